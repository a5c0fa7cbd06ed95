"""What a compaction policy costs: appends and turns with a policy active, against none.

Cases, on the memory, JSONL (durability ``flush``) and SQLite stores, each in a fresh session
of a store opened with or without ``compaction=CompactionPolicy(...)``:

* **append**: ``session.append`` of message events one per call (events built before the
  clock starts), with a policy whose budget is never reached (``max_tokens`` and
  ``max_messages`` far above the history), against a store without one. Target: at most
  1.05x the time without a policy (the check runs at a turn's end, never in an append).
* **turn**: whole turns (``turn/start``, a user message, an assistant message with a tool
  call, its result, the answer, ``turn/end``) under the same policy, against none: what the
  budget check adds at each turn's end (its running token count, by the default estimate).
* **agent loop**: the same turns reading ``session.messages()`` before each of their two
  model calls, as an agent does: the history the check counts is then derived already.
* **turn, over budget**: the same turns with ``max_messages=24, keep_turns=2``, so that about
  every other turn compacts, with a summarizer that returns at once: the cost of planning and
  appending the marker (the summarizer's own time excluded, as it is the application's model).

Rounds are interleaved (every case once per round, in turn) and the best round of each case is
kept. Time is the process's CPU time (user and system: the writes' system calls count, a disk
sync's wait would not; the stores run at durability ``flush``), so that other load on a shared
machine moves the ratios less; ``--wall`` uses the wall clock. The ratio is the case's time
over the baseline's measured in the same run.

    python benchmarks/compaction_policy.py [--events 1000] [--turns 100] [--repeat 15]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import agentsession as ags
from agentsession.compaction import CompactionPolicy

TARGET = 1.05

_clock = time.process_time
"""The timer: the process's CPU time (user and system), so that other load on a shared machine
changes the ratios less than it changes wall time (``--wall`` times with the wall clock)."""


def _summarize(messages: list[ags.Message]) -> ags.Message:
    return ags.Message.user(f"summary of {len(messages)} messages")


UNDER = CompactionPolicy(max_tokens=10**12, max_messages=10**9, summarize=_summarize)
OVER = CompactionPolicy(max_messages=24, keep_turns=2, summarize=_summarize)
POLICIES: dict[str, CompactionPolicy | None] = {"none": None, "under": UNDER, "over": OVER}


def _events(count: int) -> list[ags.Event]:
    out = []
    for i in range(count):
        if i % 2 == 0:
            out.append(ags.Event.new("user/message", ags.Message.user(f"question {i} " * 8)))
        else:
            out.append(
                ags.Event.new("assistant/message", ags.Message.assistant(f"answer {i} " * 30))
            )
    return out


def _appends(session: ags.BaseSession, events: list[ags.Event]) -> float:
    append = session.append
    start = _clock()
    for event in events:
        append(event)
    return _clock() - start


def _turns(session: ags.BaseSession, count: int, *, loop: bool = False) -> float:
    """Seconds for ``count`` turns; with ``loop``, ``messages()`` is read before each of the
    two model calls, as an agent loop does."""
    result = "line of tool output\n" * 40
    messages = session.messages
    start = _clock()
    for n in range(count):
        with session.turn(agent="coder") as turn:
            turn.user(f"question {n}")
            if loop:
                messages()
            turn.assistant(tool_calls=[ags.ToolCall(f"c{n}", "read", {"n": n})])
            turn.tool_result(f"c{n}", "read", result)
            if loop:
                messages()
            turn.assistant(f"answer {n}")
    return _clock() - start


def _url(backend: str, root: Path, name: str) -> str:
    if backend == "memory":
        return "memory:"
    if backend == "jsonl":
        return str(root / f"{name}.d")
    return f"sqlite:///{root / (name + '.db')}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--backends", default="memory,jsonl,sqlite")
    parser.add_argument("--wall", action="store_true", help="time with the wall clock")
    args = parser.parse_args()
    global _clock
    if args.wall:
        _clock = time.perf_counter
    backends = args.backends.split(",")
    events = _events(args.events)
    root = Path(tempfile.mkdtemp(prefix="compaction-policy-bench-"))
    cases: list[tuple[str, str, str]] = []  # (backend, kind, policy)
    for backend in backends:
        cases += [(backend, "append", "none"), (backend, "append", "under")]
        cases += [(backend, "turn", "none"), (backend, "turn", "under"), (backend, "turn", "over")]
        cases += [(backend, "loop", "none"), (backend, "loop", "under"), (backend, "loop", "over")]
    best: dict[tuple[str, str, str], float] = {}
    try:
        for round_ in range(args.repeat):
            for backend, kind, policy_name in cases:
                name = f"{backend}-{kind}-{policy_name}-{round_}"
                store = ags.open_store(_url(backend, root, name), compaction=POLICIES[policy_name])
                try:
                    session = store.get(name)
                    if kind == "append":
                        seconds = _appends(session, events)
                    else:
                        seconds = _turns(session, args.turns, loop=kind == "loop")
                finally:
                    store.close()
                key = (backend, kind, policy_name)
                best[key] = min(best.get(key, seconds), seconds)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print(
        f"Appends and turns with a compaction policy, against none (best of {args.repeat}, "
        f"{'wall' if args.wall else 'CPU'} time; {args.events} appends, {args.turns} turns of 6 "
        "events)"
    )
    print()
    print(f"{'store':<8} {'case':<32} {'items/s':>10} {'ratio':>7}   target")
    failed = False
    for backend in backends:
        for kind, names in (
            ("append", ("none", "under")),
            ("turn", ("none", "under", "over")),
            ("loop", ("none", "under", "over")),
        ):
            base = best[(backend, kind, "none")]
            count = args.events if kind == "append" else args.turns
            unit = 1 if kind == "append" else 6
            for policy_name in names:
                seconds = best[(backend, kind, policy_name)]
                what = "agent loop" if kind == "loop" else kind
                label = {
                    "none": f"{what}, no policy",
                    "under": f"{what}, policy under budget",
                    "over": f"{what}, policy over budget",
                }[policy_name]
                ratio = seconds / base
                target = ""
                if kind == "append" and policy_name == "under":
                    target = f"<= {TARGET:.2f}x"
                    failed |= ratio > TARGET
                print(
                    f"{backend:<8} {label:<32} {count * unit / seconds:>10,.0f} "
                    f"{ratio:>6.2f}x   {target}"
                )
    print()
    print(
        "items/s: events stored per second; ratio: the case's time over the same store's "
        "and case's time without a policy"
    )
    if failed:
        print("an append with a policy missed its target", file=sys.stderr)


if __name__ == "__main__":
    main()
