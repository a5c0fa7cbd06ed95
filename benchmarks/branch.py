"""What a branch costs: opening it and reading its latest 20 events against the same on a plain
session, however long the origin, and what a branch stores, measured in one run.

    python benchmarks/branch.py [--origin 100000] [--rounds 5] [--postgres DSN]

Per backend: an origin of ``--origin`` events (``--origin / 5`` on PostgreSQL); **plain**, a
session of 200 events of its own; **branch**, a branch of the origin at its head with 200
events of its own; **young**, a branch with 10 of its own (its latest 20 reach 10 into the
origin). Each case opens a new store object, gets the session and reads its latest 20 events;
each keeps its best round. The ratios are each branch's time over plain's [target <= 2.0].
The bytes column is what making the branch added to the store (its marker and its index
entry), before it diverged [target: O(1), not growing with the origin]. The DSN comes from
``--postgres`` or ``AGENTSESSION_TEST_POSTGRES_DSN`` (a fresh schema, dropped at the end).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from _postgres import drop_schema, postgres_url
from _workload import best

import agentsession as ags


def events(count: int, tag: str) -> list[ags.Event]:
    return [
        ags.Event.new("bench/event", {"tag": tag, "i": i, "pad": "x" * 80}) for i in range(count)
    ]


def fill(session: ags.BaseSession, count: int, tag: str) -> None:
    for start in range(0, count, 1000):
        session.append_many(events(min(1000, count - start), tag))


def size_of(url: str, work: Path) -> int:
    """What the store holds, in bytes: its files for JSONL, the rows' column bytes for SQLite
    (the file grows by whole pages) and the schema's rows on PostgreSQL."""
    if url.startswith("postgresql"):
        import psycopg

        dsn, _, schema = url.partition("?schema=")
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                f'SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM "{schema}".events t'
            ).fetchone()
            meta = conn.execute(
                f'SELECT coalesce(sum(pg_column_size(m.*)), 0) FROM "{schema}".meta m'
            ).fetchone()
            return int(row[0] if row else 0) + int(meta[0] if meta else 0)
    if url.startswith("sqlite:///"):
        import sqlite3

        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            rows = conn.execute(
                "SELECT (SELECT coalesce(sum(length(session_id) + length(type) + length(agent)"
                " + length(user) + length(time) + length(data) + coalesce(length(meta), 0)"
                " + 16), 0) FROM events) + (SELECT coalesce(sum(length(kind) + length(key)"
                " + length(value) + length(updated_at)), 0) FROM meta)"
                " + (SELECT coalesce(sum(length(id) + length(created_at) + 16), 0)"
                " FROM sessions)"
            ).fetchone()
        return int(rows[0])
    return sum(p.stat().st_size for p in work.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--origin", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--postgres", default=os.environ.get("AGENTSESSION_TEST_POSTGRES_DSN"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="agentsession-branch-"))
    schema = ""
    urls = {"jsonl": str(work / "jsonl"), "sqlite": f"sqlite:///{work}/s.db"}
    if args.postgres:
        urls["postgresql"], schema = postgres_url(args.postgres)
    try:
        print(f"latest 20 events after opening, best of {args.rounds}\n")
        print(
            f"{'backend':<12}{'origin':>8}{'plain ms':>10}{'branch ms':>11}{'young ms':>10}"
            f"{'branch/plain':>14}{'young/plain':>13}{'bytes':>8}"
        )
        for name, url in urls.items():
            count = args.origin if name != "postgresql" else args.origin // 5
            with ags.open_store(url) as store:
                origin = store.get("origin")
                fill(origin, count, "o")
                fill(store.get("plain"), 200, "p")
                before = size_of(url, work / "jsonl" if name == "jsonl" else work)
                branch = origin.branch(id="branch")
                grown = size_of(url, work / "jsonl" if name == "jsonl" else work) - before
                fill(branch, 199, "b")  # with its marker: 200 of its own
                young = origin.branch(id="young")
                fill(young, 9, "y")

            def latest(sid: str, url: str = url) -> None:
                with ags.open_store(url) as fresh:
                    session = fresh.get(sid)
                    got = session.read(after=session.latest_seq - 20)
                    assert len(got) == 20

            times = {
                sid: best(lambda sid=sid: latest(sid), args.rounds)
                for sid in ("plain", "branch", "young")
            }
            print(
                f"{name:<12}{count:>8}{times['plain'] * 1000:>10.2f}"
                f"{times['branch'] * 1000:>11.2f}{times['young'] * 1000:>10.2f}"
                f"{times['branch'] / times['plain']:>14.2f}"
                f"{times['young'] / times['plain']:>13.2f}{grown:>8}"
            )
        print("\ntargets: branch/plain and young/plain <= 2.00; bytes O(1)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if schema:
            drop_schema(args.postgres, schema)


if __name__ == "__main__":
    main()
