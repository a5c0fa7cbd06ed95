"""Run state: what an agent loop needs to know about the current run, read from the log.

A **run** is what answers one user request: it starts at the latest ``user/message`` (a
``turn/continue`` does not start one) and takes in every event after it. The helpers here are
pure functions over a list of events (a whole log in seq order); those taking ``after`` look
only at events with ``seq > after``. Events whose payload does not parse are skipped, never
fatal. :func:`load_run_state` reads a session and gathers them into a :class:`RunState`.

agentkit's ``LatestTodos`` is not scoped to the run, so a previous run's todo list leaks into
the run state; :func:`latest_todos_in_run` is the scoped form, and :class:`RunState` uses it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

import msgspec

from .events import (
    ASSISTANT_MESSAGE,
    RUN_FINISH,
    STEP_END,
    TODO_UPDATE,
    TOOL_CALL,
    USAGE,
    USER_MESSAGE,
    Event,
    RunFinish,
    StepEnd,
    Todo,
    TodoUpdate,
    Usage,
    decode,
    encode,
)
from .messages import Message, ToolCall

if TYPE_CHECKING:
    from .contract import Session

__all__ = [
    "RunState",
    "finish_after",
    "last_assistant_text",
    "latest_todos",
    "latest_todos_in_run",
    "latest_usage",
    "load_run_state",
    "pending_todos",
    "repeated_tool_calls",
    "run_start_seq",
    "run_state_from_events",
    "step_count",
    "tool_call_signature",
    "total_usage",
]

P = TypeVar("P")


def _payloads(
    events: Sequence[Event], kind: str, type_: type[P], after: int = 0, *, reverse: bool = False
) -> Iterator[tuple[Event, P]]:
    """``(event, payload)`` of the ``kind`` events after ``after`` whose payload parses."""
    for event in reversed(events) if reverse else events:
        if event.type != kind or event.seq <= after:
            continue
        try:
            payload = decode(event.data, type_)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        yield event, payload


def _last(events: Sequence[Event], kind: str, type_: type[P], after: int = 0) -> P | None:
    for _, payload in _payloads(events, kind, type_, after, reverse=True):
        return payload
    return None


def run_start_seq(events: Sequence[Event]) -> int:
    """Seq of the latest ``user/message``: where the current run starts (0 when none).

    ``turn/continue`` does not start a run, even though its messages are model-visible.
    """
    for event, _ in _payloads(events, USER_MESSAGE, Message, reverse=True):
        return event.seq
    return 0


def latest_todos(events: Sequence[Event]) -> list[Todo]:
    """The items of the latest ``todo/update`` in the whole log (empty when none).

    Not limited to the current run; see :func:`latest_todos_in_run`.
    """
    update = _last(events, TODO_UPDATE, TodoUpdate)
    return list(update.items) if update is not None else []


def latest_todos_in_run(events: Sequence[Event], start_seq: int | None = None) -> list[Todo]:
    """The items of the latest ``todo/update`` after ``start_seq`` (default: the current run's
    start, :func:`run_start_seq`); empty when the run has written none."""
    after = run_start_seq(events) if start_seq is None else start_seq
    update = _last(events, TODO_UPDATE, TodoUpdate, after)
    return list(update.items) if update is not None else []


def pending_todos(items: Sequence[Todo]) -> list[Todo]:
    """The items not ``done`` (every other status counts as outstanding), in order."""
    return [item for item in items if not item.done]


def finish_after(events: Sequence[Event], after: int = 0) -> RunFinish | None:
    """The latest ``run/finish`` after ``after``, or None."""
    return _last(events, RUN_FINISH, RunFinish, after)


def last_assistant_text(events: Sequence[Event], after: int = 0) -> str:
    """The text of the latest assistant message after ``after`` that has any, stripped.

    A message's text is its text parts joined (:attr:`Message.text`); messages that only call
    tools, or whose text is blank, do not count. Empty when there is none.
    """
    for _, msg in _payloads(events, ASSISTANT_MESSAGE, Message, after, reverse=True):
        text = msg.text.strip()
        if text:
            return text
    return ""


def step_count(events: Sequence[Event], after: int = 0) -> int:
    """The number of ``step/end`` events after ``after``: steps completed (or repaired)."""
    return sum(1 for _ in _payloads(events, STEP_END, StepEnd, after))


def tool_call_signature(call: ToolCall) -> str:
    """``name + "\\x00" + arguments`` as canonical JSON (compact, keys sorted at every level):
    equal for calls of one tool with equal arguments, however the JSON was spelled."""
    return call.name + "\x00" + encode(call.arguments, sort_keys=True).decode("utf-8", "replace")


def repeated_tool_calls(events: Sequence[Event], after: int = 0) -> int:
    """How many ``tool/call`` events after ``after``, counted back from the latest, repeat the
    latest one's signature (:func:`tool_call_signature`); 0 when there are none.

    For loop detection: 3 means the agent made the same call three times in a row. Only
    ``tool/call`` events count, not the calls inside assistant messages.
    """
    signatures = [
        tool_call_signature(call) for _, call in _payloads(events, TOOL_CALL, ToolCall, after)
    ]
    if not signatures:
        return 0
    last = signatures[-1]
    count = 0
    for signature in reversed(signatures):
        if signature != last:
            break
        count += 1
    return count


def latest_usage(events: Sequence[Event]) -> Usage:
    """The latest ``usage`` payload in the whole log (zeros when none): its ``input_tokens``
    is the current context size."""
    return _last(events, USAGE, Usage) or Usage()


def total_usage(events: Sequence[Event], after: int = 0) -> Usage:
    """The field-wise sum of the ``usage`` payloads after ``after`` (cache fields included)."""
    input_tokens = output_tokens = total_tokens = cache_read = cache_write = 0
    for _, usage in _payloads(events, USAGE, Usage, after):
        input_tokens += usage.input_tokens
        output_tokens += usage.output_tokens
        total_tokens += usage.total_tokens
        cache_read += usage.cache_read_tokens
        cache_write += usage.cache_write_tokens
    return Usage(input_tokens, output_tokens, total_tokens, cache_read, cache_write)


class RunState(msgspec.Struct, frozen=True, kw_only=True):
    """The current run, as :func:`load_run_state` reads it from the log."""

    start_seq: int = 0
    """Seq of the user message that started the run (0 when there is none)."""
    todos: list[Todo] = []
    """The run's latest todo list (empty until the run writes one)."""
    pending: list[Todo] = []
    """The items of ``todos`` not done."""
    finish: RunFinish | None = None
    """The run's latest ``run/finish``, or None while the agent has not declared it finished."""
    repeats: int = 0
    """Consecutive identical tool calls at the end of the run (loop detection)."""
    usage: Usage = Usage()
    """Tokens used by the run's model calls, summed."""
    context_tokens: int = 0
    """The current context size: the latest usage's ``input_tokens`` in the whole log."""
    steps: int = 0
    """Steps the run has completed."""
    last_assistant_text: str = ""
    """The run's latest non-blank assistant text, stripped."""


def run_state_from_events(events: Sequence[Event], agent: str | None = None) -> RunState:
    """The :class:`RunState` of ``events`` (a whole log in seq order).

    With ``agent``, only that agent's events and unattributed ones count (derive's filter).
    ``todos`` are the current run's: a new user request starts with no todo list rather than
    inheriting one written for an earlier request (use :func:`latest_todos` for the latest of
    the whole log).
    """
    if agent:
        events = [event for event in events if not event.agent or event.agent == agent]
    start = run_start_seq(events)
    todos = latest_todos_in_run(events, start)
    return RunState(
        start_seq=start,
        todos=todos,
        pending=pending_todos(todos),
        finish=finish_after(events, start),
        repeats=repeated_tool_calls(events, start),
        usage=total_usage(events, start),
        context_tokens=latest_usage(events).input_tokens,
        steps=step_count(events, start),
        last_assistant_text=last_assistant_text(events, start),
    )


def load_run_state(session: Session, agent: str | None = None) -> RunState:
    """Read every event of ``session`` and return its :class:`RunState` (see
    :func:`run_state_from_events`)."""
    return run_state_from_events(session.read(0), agent)
