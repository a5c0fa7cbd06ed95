"""The transcript workload shared by the benchmarks: what an agent loop appends; and how a
case is timed (its best round)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import agentsession as ags

STEPS_PER_TURN = 3


def _text(size: int, seed: int) -> str:
    base = f"turn {seed}: the quick brown fox jumps over the lazy dog. "
    return (base * (size // len(base) + 1))[:size]


def transcript(turns: int, agent: str = "coder") -> Iterator[tuple[str, Any]]:
    """(event type, payload) pairs for ``turns`` turns: per turn a ~200 B user message, three
    steps each with an assistant message making one ~150 B tool call and a ~2 KB tool result,
    a ~500 B final answer, and the turn and step markers (15 events per turn)."""
    for turn in range(turns):
        yield "turn/start", ags.events.TurnStart()
        yield "user/message", ags.Message.user(_text(200, turn))
        for step in range(STEPS_PER_TURN):
            call_id = f"call-{turn}-{step}"
            call = ags.ToolCall(call_id, "read_file", {"path": _text(110, turn), "limit": 200})
            yield "step/start", ags.events.StepStart(step=step)
            yield "assistant/message", ags.Message.assistant(tool_calls=[call])
            yield "tool/result", ags.ToolResult(call_id, "read_file", _text(2000, step))
            yield "step/end", ags.events.StepEnd(step=step)
        yield "assistant/message", ags.Message.assistant(_text(500, turn))
        yield "turn/end", ags.events.TurnEnd(steps=STEPS_PER_TURN)


def best(fn: Callable[[], object], rounds: int) -> float:
    """The shortest of ``rounds`` runs of ``fn``, in seconds."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)
