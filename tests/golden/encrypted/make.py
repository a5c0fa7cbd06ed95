"""Make the encrypted golden stores in this directory (run from the repository root).

    python tests/golden/encrypted/make.py [--dsn postgresql://postgres@127.0.0.1:5432/test]
        [--out DIR]

Writes, with the passphrase :data:`PASSPHRASE` and a stopped clock (every event's time is
:data:`START`, whichever backend reads the clock how often), the same two sessions into three
stores:

* ``jsonl/`` — a JSONL store directory: the logs and their ``.meta`` key records;
* ``store.sqlite3`` — a SQLite store (checkpointed and closed: one file, no ``-wal``; not
  ``.db``, which ``.gitignore`` leaves out);
* ``postgres.sql`` — a PostgreSQL store in the schema ``agentsession_golden_enc``, dumped with
  ``pg_dump --schema=agentsession_golden_enc --inserts --no-owner --no-privileges
  --no-tablespaces`` (pg_dump's psql-only ``\\restrict`` lines removed), as
  ``tests/golden/postgres_v2.sql`` is; skipped without ``--dsn`` (or
  ``AGENTSESSION_TEST_POSTGRES_DSN``). The schema is dropped afterwards.

The sessions: ``golden:chat``, a turn with a tool call, then (after ``rotate_key``, so its
second turn is sealed under the data key ``k2``) a second turn; ``golden:shredded``, one turn,
whose key is then shredded. ``tests/test_encryption_golden.py`` opens each store with the
passphrase and expects exactly these events, written out literally there.

Deterministic enough: event times, seqs, types, agents and the plaintext are fixed; the scrypt
salt, the keys and every nonce are random, so each run writes different ciphertext (and
the tests never compare it). Never edit the outputs by hand: they are what this version
wrote, and later versions must keep reading them.

``--out DIR`` writes the stores into ``DIR`` instead of this directory (which holds what the
first version with encryption wrote): ``tests/golden/encrypted-format1/`` holds what the last
version sealing events in format 1 wrote, ``tests/golden/encrypted-format2/`` format 2 (every
field stored in clear bound to the box; see ``docs/format.md``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import agentsession as ags

HERE = Path(__file__).resolve().parent
"""Where the stores are written (``--out``)."""
PASSPHRASE = "golden passphrase: correct horse battery staple"
"""The passphrase every golden store here is encrypted with."""
SCHEMA = "agentsession_golden_enc"
"""The PostgreSQL schema of ``postgres.sql``."""
START = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)


def fixed_clock() -> Callable[[], dt.datetime]:
    """A clock stopped at :data:`START`."""
    return lambda: START


def write_sessions(store: ags.BaseStore) -> None:
    """The golden sessions (see the module docstring)."""
    chat = store.get("golden:chat")
    with chat.turn(agent="coder", user="U1", metadata={"channel": "C1"}) as turn:
        turn.user("Where is the config?")
        with turn.step() as step:
            step.assistant(tool_calls=[ags.ToolCall("c1", "read_file", {"path": "config.toml"})])
            step.tool_result("c1", "read_file", "debug = true")
        turn.assistant("It is config.toml; debug is on.")
    assert store.rotate_key("golden:chat") == "k2"
    with chat.turn(agent="coder", user="U1") as turn:
        turn.user("Thanks")
        turn.assistant("You are welcome.")
    gone = store.get("golden:shredded")
    with gone.turn(agent="coder", user="U2") as turn:
        turn.user("Forget me")
        turn.assistant("Done.")
    store.shred("golden:shredded")


def make_jsonl() -> None:
    target = HERE / "jsonl"
    shutil.rmtree(target, ignore_errors=True)
    with ags.open_store(target, passphrase=PASSPHRASE, clock=fixed_clock()) as store:
        write_sessions(store)
    shutil.rmtree(target / ".locks", ignore_errors=True)  # lock files: not part of the data


def make_sqlite() -> None:
    target = HERE / "store.sqlite3"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
    with ags.open_store(f"sqlite:///{target}", passphrase=PASSPHRASE, clock=fixed_clock()) as s:
        write_sessions(s)
    import sqlite3

    conn = sqlite3.connect(target)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA journal_mode=DELETE")
    finally:
        conn.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)


HEADER = f"""\
-- An encrypted PostgreSQL store (schema version 3), made by tests/golden/encrypted/make.py
-- with the passphrase in that script, then:
--   pg_dump --schema={SCHEMA} --inserts --no-owner --no-privileges \\
--           --no-tablespaces <db>
-- with pg_dump's psql-only \\restrict lines removed. tests/test_encryption_golden.py loads it
-- into a fresh schema (replacing the name {SCHEMA}) and opens it with the passphrase.
-- Never edit it: it is what this version wrote.
--
"""


def make_postgres(dsn: str) -> None:
    import psycopg
    from psycopg import sql

    def drop() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))

    drop()
    sep = "&" if "?" in dsn else "?"
    try:
        url = f"{dsn}{sep}schema={SCHEMA}"
        with ags.open_store(url, passphrase=PASSPHRASE, clock=fixed_clock()) as store:
            write_sessions(store)
        dump = subprocess.run(
            [
                "pg_dump",
                f"--schema={SCHEMA}",
                "--inserts",
                "--no-owner",
                "--no-privileges",
                "--no-tablespaces",
                dsn,
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        drop()
    lines = [
        line for line in dump.splitlines() if not line.startswith(("\\restrict", "\\unrestrict"))
    ]
    (HERE / "postgres.sql").write_text(HEADER + "\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    """Write the golden stores."""
    global HERE
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("AGENTSESSION_TEST_POSTGRES_DSN", ""))
    parser.add_argument("--out", type=Path, default=HERE, help="where to write the stores")
    args = parser.parse_args()
    HERE = args.out.resolve()
    HERE.mkdir(parents=True, exist_ok=True)
    make_jsonl()
    make_sqlite()
    if args.dsn:
        make_postgres(args.dsn)
    else:
        print("no --dsn: postgres.sql left as it is", file=sys.stderr)


if __name__ == "__main__":
    main()
