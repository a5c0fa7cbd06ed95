"""Make the child-session golden stores in this directory (run from the repository root).

    python tests/golden/children/make.py

Writes, with a stopped clock (every time is :data:`START`), into ``jsonl/`` (a JSONL store
directory) and ``store.sqlite3`` (a SQLite store, checkpointed and closed) the same tree:

* ``golden:lead``, a turn with a tool call, whose record has agent id, channel and model;
* its child ``golden:lead:child:researcher`` (inherit 2, task and meta), one turn of its
  own, merged with a summary;
* its child ``golden:lead:child:drafter`` (inherit 0), discarded with a reason.

``tests/test_children_golden.py`` opens each store and expects exactly this tree, written out
literally there. The fork ids are random, so each run writes different ids (the tests read
them from the stores). Never edit the outputs by hand: they are what this version wrote, and
later versions must keep reading them.
"""

from __future__ import annotations

import datetime as dt
import shutil
import sqlite3
from pathlib import Path

import agentsession as ags

HERE = Path(__file__).resolve().parent
START = dt.datetime(2026, 12, 1, 9, 30, tzinfo=dt.timezone.utc)


def write(store: ags.BaseStore) -> None:
    """The tree, through the public API."""
    lead = store.get("golden:lead")
    with lead.turn(agent="lead", user="U1") as turn:
        turn.user("Find the cheapest flight to Lisbon")
        with turn.step() as step:
            step.assistant("", tool_calls=[ags.ToolCall("c1", "calendar", {"day": "fri"})])
            step.tool_result("c1", "calendar", "Friday is free")
        turn.assistant("Asking the researcher.")
    lead.update(agent_id="lead", channel_type="slack", channel_id="C042", model="m-large")
    child = lead.fork(
        "researcher",
        inherit=2,
        task="compare fares",
        meta={"ticket": "T-7"},
        child_id="golden:lead:child:researcher",
    )
    with child.turn(agent="researcher") as turn:
        turn.user("Compare the fares.")
        turn.assistant("FR at 89 EUR.")
    child.merge("Cheapest: FR, 89 EUR.")
    drafter = lead.fork("drafter", child_id="golden:lead:child:drafter")
    drafter.discard("not needed")


def main() -> None:
    clock = lambda: START  # noqa: E731
    target = HERE / "jsonl"
    shutil.rmtree(target, ignore_errors=True)
    with ags.open_store(target, clock=clock) as store:
        write(store)
    shutil.rmtree(target / ".locks", ignore_errors=True)  # runtime files, not data
    for lock in target.rglob(".cas.lock"):
        lock.unlink()
    database = HERE / "store.sqlite3"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    with ags.open_store(f"sqlite:///{database}", clock=clock) as store:
        write(store)
    conn = sqlite3.connect(database)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    shutil.rmtree(f"{database}.locks", ignore_errors=True)


if __name__ == "__main__":
    main()
