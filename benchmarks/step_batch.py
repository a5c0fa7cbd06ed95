"""Batched steps against one append per event, at durability ``fsync``.

Workload: agent steps of 4 events each (``step/start``, an assistant message making one ~150 B
tool call, a ~2 KB tool result, ``step/end``; see ``_workload.py``). Compared on the JSONL and
SQLite stores, in fresh sessions of one store per backend:

* the recorder with ``session.turn(batch_steps=True)`` (one ``append_many`` per step: one write
  and one disk sync) against the same steps recorded with ``batch_steps=False`` (4 single
  appends, 4 syncs);
* ``session.append_many`` of the 4 events against 4 ``session.append`` calls (events built
  before the clock starts);
* the physical limit: the same JSONL lines written with plain ``os.write`` and
  ``os.fdatasync``, once per step against once per line.

Rounds are interleaved (every case once per round, in turn) and the best round of each case is
kept. Items/s counts events stored.

    python benchmarks/step_batch.py [--steps 20] [--repeat 40] [--durability fsync] [--dir D]

Target: the batched step records >= 3x the items/s of the unbatched one at ``fsync``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _workload import transcript

import agentsession as ags
from agentsession.events import encode_event

EVENTS_PER_STEP = 4
TARGET = 3.0
RAW = {"write+fdatasync per step": True, "write+fdatasync per line": False}
"""The raw rows: case name and whether the lines of a step are synced together."""

Step = tuple[ags.Message, ags.ToolResult]


def workload(count: int) -> list[Step]:
    """``count`` steps' assistant message and tool result, taken from the shared transcript."""
    steps: list[Step] = []
    pending: ags.Message | None = None
    turns = count // 3 + 1  # the transcript has three steps per turn
    for kind, payload in transcript(turns):
        if kind == "assistant/message" and payload.tool_calls:
            pending = payload
        elif kind == "tool/result" and pending is not None:
            steps.append((pending, payload))
            pending = None
    return steps[:count]


def step_events(steps: list[Step]) -> list[list[ags.Event]]:
    """The 4 events of each step, as the recorder would store them."""
    new = ags.Event.new
    return [
        [
            new("step/start", ags.events.StepStart(step=i), agent="coder"),
            new("assistant/message", message, agent="coder"),
            new("tool/result", result, agent="coder"),
            new("step/end", ags.events.StepEnd(step=i), agent="coder"),
        ]
        for i, (message, result) in enumerate(steps)
    ]


def record(session: ags.BaseSession, steps: list[Step], batch_steps: bool) -> float:
    """Seconds to record ``steps`` inside one turn (turn/start and turn/end not timed)."""
    with session.turn(agent="coder", batch_steps=batch_steps) as turn:
        start = time.perf_counter()
        for message, result in steps:
            with turn.step() as step:
                step.assistant(message)
                step.tool_result(result)
        elapsed = time.perf_counter() - start
    return elapsed


def append_batches(session: ags.BaseSession, batches: list[list[ags.Event]]) -> float:
    """Seconds for one ``append_many`` per step (the session is created untimed)."""
    session.append(ags.Event.new("turn/start", ags.events.TurnStart(), agent="coder"))
    start = time.perf_counter()
    for batch in batches:
        session.append_many(batch)
    return time.perf_counter() - start


def append_singles(session: ags.BaseSession, batches: list[list[ags.Event]]) -> float:
    """Seconds for one ``append`` per event (the session is created untimed)."""
    session.append(ags.Event.new("turn/start", ags.events.TurnStart(), agent="coder"))
    start = time.perf_counter()
    for batch in batches:
        for event in batch:
            session.append(event)
    return time.perf_counter() - start


def raw_writes(path: Path, lines: list[list[bytes]], per_step: bool) -> float:
    """Seconds to write ``lines`` with ``os.write`` + ``os.fdatasync``, once per step or once
    per line: what the file system allows."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, b"\n")
        os.fdatasync(fd)
        start = time.perf_counter()
        for step in lines:
            if per_step:
                os.write(fd, b"".join(step))
                os.fdatasync(fd)
            else:
                for line in step:
                    os.write(fd, line)
                    os.fdatasync(fd)
        return time.perf_counter() - start
    finally:
        os.close(fd)
        path.unlink()


Case = Callable[[ags.BaseSession], float]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="steps per round and case")
    parser.add_argument("--repeat", type=int, default=40, help="rounds (best kept)")
    parser.add_argument("--durability", choices=["fsync", "flush"], default="fsync")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: tmp)")
    args = parser.parse_args()

    steps = workload(args.steps)
    batches = step_events(steps)
    cases: dict[str, Case] = {
        "step, batch_steps=True": lambda s: record(s, steps, batch_steps=True),
        "step, 4 single appends": lambda s: record(s, steps, batch_steps=False),
        "append_many(4 events)": lambda s: append_batches(s, batches),
        "4 x append": lambda s: append_singles(s, batches),
    }
    lines = [[encode_event(event) + b"\n" for event in batch] for batch in batches]
    work = Path(args.dir or tempfile.mkdtemp(prefix="agentsession-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    urls = {"jsonl": str(work / "jsonl"), "sqlite": f"sqlite:///{work / 'bench.db'}"}
    best: dict[tuple[str, str], float] = {}
    try:
        stores = {
            name: ags.open_store(url, durability=args.durability) for name, url in urls.items()
        }
        try:
            for round_ in range(args.repeat):
                for backend, store in stores.items():
                    for index, (name, case) in enumerate(cases.items()):
                        seconds = case(store.get(f"bench-{round_}-{index}"))
                        key = (backend, name)
                        best[key] = min(seconds, best.get(key, float("inf")))
                if args.durability == "fsync":
                    for name, per_step in RAW.items():
                        seconds = raw_writes(work / "raw.jsonl", lines, per_step)
                        best["raw", name] = min(seconds, best.get(("raw", name), float("inf")))
        finally:
            for store in stores.values():
                store.close()
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)

    items = len(steps) * EVENTS_PER_STEP
    print(
        f"{len(steps)} steps of {EVENTS_PER_STEP} events per case, durability "
        f"{args.durability}, best of {args.repeat} interleaved rounds\n"
    )
    print(f"{'backend':<8}{'case':<26}{'items/s':>11}{'ms/step':>9}{'ratio':>8}{'target':>9}")
    met = True
    pairs = [
        ("step, batch_steps=True", "step, 4 single appends", f">= {TARGET:.1f}"),
        ("append_many(4 events)", "4 x append", ""),
    ]
    rows = [(backend, fast, slow, target) for backend in stores for fast, slow, target in pairs]
    if args.durability == "fsync":
        synced_per_step, synced_per_line = RAW
        rows.append(("raw", synced_per_step, synced_per_line, ""))
    for backend, fast, slow, target in rows:
        ratio = best[(backend, slow)] / best[(backend, fast)]
        if target and args.durability == "fsync":
            met = met and ratio >= TARGET
        for name, shown, goal in ((fast, f"{ratio:.2f}", target), (slow, "1.00", "")):
            seconds = best[(backend, name)]
            print(
                f"{backend:<8}{name:<26}{items / seconds:>11,.0f}"
                f"{seconds * 1000 / len(steps):>9.2f}{shown:>8}{goal:>9}"
            )
    if args.durability == "fsync":
        print(f"\ntarget (batched step >= {TARGET:.0f}x at fsync): {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
