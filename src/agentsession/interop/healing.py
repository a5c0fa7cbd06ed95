"""Healing an imported history: the tool-call defects other stores keep, found and fixed once.

Histories written by other runtimes are often broken in ways that make every later model
request fail: a run killed mid-tool leaves a call without its result, a result is stored without
its call, a model server names two calls alike, a subagent's result lands after other messages.
:func:`heal` takes the events of one session as an importer builds them (each source record's
own event, the record events, followed by agentsession's typed events read from it:
``user/message``, ``assistant/message``, ``tool/result``) and returns them fixed, with one
:class:`Defect` per problem found and what was done:

* ``duplicate_call_id``: a tool call whose id an earlier call of the session already has gets
  the id ``<id>~<n>`` (the first free ``n`` from 2); the results that answer it (first come,
  first served, as ``messages()`` pairs them) get it too. The id the source gave is kept in the
  event meta ``import_call_ids`` (``{new id: old id}``).
* ``late_result``: a result that arrives after a later user or assistant message closed its
  call's exchange (a subagent's result written after the main conversation went on) is moved
  back to its exchange, right after the exchange's other results; the record event it was read
  from moves with it when it holds nothing else.
* ``orphan_call``: a call that no result answers is answered by the interrupted stand-in
  (:func:`agentsession.derive.interrupted_tool_result`, the same the recorder and ``messages()``
  use), as a ``tool/result`` event right after the exchange's real results and before the next
  user or assistant message: so every call is answered before the next assistant message
  (OpenAI), the results directly follow their calls (Anthropic's alternation: the stand-ins
  join the exchange's ``user`` turn of ``tool_result`` blocks) and each exchange's calls and
  responses are grouped (Gemini).
* ``orphan_result``: a result that answers no call made before it is taken out of the history:
  its ``tool/result`` event is dropped and kept whole in the meta ``import_orphan_results`` of
  the event before it (the record event it was read from, when it has one); a record event that
  holds only such results is passed to the source's ``set_aside`` hook (the OpenAI Agents
  importer turns an orphan ``function_call_output`` item into an event the SDK does not send).

Events of other types (the source's record events, usage, markers) are left where they are.
Healing is deterministic: the same events give the same output, ids included (a stand-in's id is
derived from its call's event id), so an import run again writes nothing new.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from ..derive import interrupted_tool_result
from ..events import ASSISTANT_MESSAGE, MAX_EVENT_ID_CHARS, TOOL_RESULT, USER_MESSAGE, Event
from ..messages import Message, ToolCall, ToolResult

__all__ = [
    "DEFECT_KINDS",
    "META_CALL_IDS",
    "META_HEALED",
    "META_ORPHAN_RESULTS",
    "Defect",
    "SET_ASIDE",
    "HealHooks",
    "heal",
    "survey",
]

DEFECT_KINDS: Final = (
    "duplicate_call_id",
    "late_result",
    "orphan_call",
    "orphan_result",
    "truncated_record",
    "interleaved_subagent",
)
"""Every defect kind a report can name. Two are found by a source's reader rather than by
:func:`heal`: ``truncated_record`` (a last record that does not decode, set aside as a
:data:`SET_ASIDE` event) and ``interleaved_subagent`` (Claude Code subagent entries inline in a
main transcript, kept out of its history)."""
SET_ASIDE: Final = "import/set_aside"
"""Event type of a record that could not be read and was set aside (a truncated last record):
``{"source", "raw", "reason"}``; not model-visible."""
META_HEALED: Final = "import_healed"
"""Meta key of an event healing wrote or changed: the defect kind."""
META_CALL_IDS: Final = "import_call_ids"
"""Meta key of an event whose call ids were remapped: ``{new id: id in the source}``."""
META_ORPHAN_RESULTS: Final = "import_orphan_results"
"""Meta key holding the orphan results taken out of the history (their ``tool/result``
payloads, as read)."""


@dataclass(frozen=True)
class Defect:
    """One problem found in a session, and what was done about it."""

    kind: str
    """One of :data:`DEFECT_KINDS`."""
    action: str
    """What was done: ``remapped``, ``reattached``, ``answered_interrupted``,
    ``moved_to_meta``, ``set_aside``, or ``none`` (healing was off)."""
    call_id: str = ""
    """The tool call concerned (for a remapped call, its id in the source)."""
    detail: str = ""
    """A readable sentence: where, and to what."""

    def as_dict(self) -> dict[str, str]:
        """The defect as JSON-ready data (empty fields left out)."""
        out = {"kind": self.kind, "action": self.action}
        if self.call_id:
            out["call_id"] = self.call_id
        if self.detail:
            out["detail"] = self.detail
        return out


def _no_records(call: ToolCall, call_event: Event) -> list[Event]:
    return []


def _same(event: Event) -> Event:
    return event


@dataclass
class HealHooks:
    """What a source adds to healing for its own record events."""

    standin_records: Callable[[ToolCall, Event], list[Event]] = _no_records
    """Record events to write before a stand-in result (the OpenAI Agents importer writes a
    ``function_call_output`` item, so that the SDK's item list is healed too); given the call
    and its ``assistant/message`` event."""
    set_aside: Callable[[Event], Event] = _same
    """The event a record event becomes when all it holds is orphan results."""
    move_records: bool = True
    """Whether a record event holding only late results moves with them (False where the
    records' order is the source's own, as Claude Code's transcript entries)."""


@dataclass
class _Slot:
    """The results of one exchange closed while calls were unanswered: filled in by late
    results, the rest answered by stand-ins when the session ends."""

    calls: list[ToolCall]
    call_event: Event
    late: dict[int, list[Event]] = field(default_factory=dict)


_Item = Event | _Slot

_TYPED: Final = (USER_MESSAGE, ASSISTANT_MESSAGE, TOOL_RESULT)


def _typed_or_slot(item: _Item) -> bool:
    return not isinstance(item, Event) or item.type in _TYPED


def _msg(event: Event) -> Message | None:
    try:
        return event.decode(Message)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None


def _result(event: Event) -> ToolResult | None:
    try:
        return event.decode(ToolResult)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None


def _derived_id(base: str, suffix: str) -> str | None:
    made = f"{base}:{suffix}"
    return made if base and len(made) <= MAX_EVENT_ID_CHARS else None


def _remap(events: Sequence[Event], defects: list[Defect]) -> list[Event]:
    """Give every call whose id is taken a fresh one, and its results with it."""
    used: set[str] = set()
    waiting: dict[str, deque[str]] = {}  # source id -> the ids of its open calls, in order
    out: list[Event] = []
    for event in events:
        if event.type == ASSISTANT_MESSAGE:
            msg = _msg(event)
            if msg is None or not msg.tool_calls:
                out.append(event)
                continue
            calls: list[ToolCall] = []
            renamed: dict[str, str] = {}
            for call in msg.tool_calls:
                new_id = call.id
                if call.id in used:
                    n = 2
                    while f"{call.id}~{n}" in used:
                        n += 1
                    new_id = f"{call.id}~{n}"
                    renamed[new_id] = call.id
                    defects.append(
                        Defect(
                            "duplicate_call_id",
                            "remapped",
                            call.id,
                            f"call {call.id!r} ({call.name}) renamed {new_id!r}: an earlier call "
                            "of the session has its id",
                        )
                    )
                used.add(new_id)
                waiting.setdefault(call.id, deque()).append(new_id)
                calls.append(msgspec.structs.replace(call, id=new_id) if renamed else call)
            if renamed:
                meta = {**event.meta, META_CALL_IDS: renamed, META_HEALED: "duplicate_call_id"}
                message = msgspec.structs.replace(msg, tool_calls=calls)
                event = Event.new(
                    ASSISTANT_MESSAGE,
                    message,
                    agent=event.agent,
                    user=event.user,
                    meta=meta,
                    time=event.time,
                    id=event.id,
                )
            out.append(event)
        elif event.type == TOOL_RESULT:
            result = _result(event)
            queue = waiting.get(result.call_id) if result is not None else None
            if result is None or not queue:
                out.append(event)
                continue
            new_id = queue.popleft()
            if new_id != result.call_id:
                meta = {**event.meta, META_CALL_IDS: {new_id: result.call_id}}
                event = Event.new(
                    TOOL_RESULT,
                    msgspec.structs.replace(result, call_id=new_id),
                    agent=event.agent,
                    user=event.user,
                    meta=meta,
                    time=event.time,
                    id=event.id,
                )
            out.append(event)
        else:
            out.append(event)
    return out


def _units(events: Sequence[Event]) -> list[list[Event]]:
    """The events cut into units: the record events before a run of typed events, with it."""
    units: list[list[Event]] = []
    current: list[Event] = []
    typed_seen = False
    for event in events:
        typed = event.type in _TYPED
        if typed_seen and not typed:
            units.append(current)
            current, typed_seen = [], False
        current.append(event)
        typed_seen = typed_seen or typed
    if current:
        units.append(current)
    return units


def heal(
    events: Sequence[Event], hooks: HealHooks | None = None
) -> tuple[list[Event], list[Defect]]:
    """``events`` with their tool-call defects fixed, and the defects found (see the module's
    docstring). ``events`` are one session's, in order; the output holds every input event or
    a record of it (nothing is dropped without a trace)."""
    hooks = hooks or HealHooks()
    defects: list[Defect] = []
    items: list[_Item] = []
    open_calls: list[ToolCall] = []
    open_event: Event | None = None
    slots: dict[str, deque[tuple[_Slot, int]]] = {}

    def close(unit: list[_Item]) -> None:
        """Close the open exchange: its stand-ins go right after its last typed event, before
        the record events of the message that closes it."""
        nonlocal open_calls, open_event
        if open_calls and open_event is not None:
            slot = _Slot(list(open_calls), open_event)
            for index, call in enumerate(open_calls):
                slots.setdefault(call.id, deque()).append((slot, index))
            last = next(
                (
                    i
                    for i in range(len(unit) - 1, -1, -1)
                    if _typed_or_slot(unit[i])
                ),
                None,
            )
            if last is None:
                items.append(slot)  # before the unit
            else:
                unit.insert(last + 1, slot)
        open_calls, open_event = [], None

    def orphan(unit: list[_Item], event: Event, result: ToolResult) -> None:
        defects.append(
            Defect(
                "orphan_result",
                "moved_to_meta",
                result.call_id,
                f"result for {result.call_id!r} answers no call made before it: kept in the "
                f"meta {META_ORPHAN_RESULTS!r}",
            )
        )
        data = msgspec.json.decode(bytes(event.data))
        host_index = next(
            (i for i, e in enumerate(unit) if isinstance(e, Event) and e.type not in _TYPED), None
        )
        if host_index is not None:
            host = unit[host_index]
            assert isinstance(host, Event)
            kept = [*host.meta.get(META_ORPHAN_RESULTS, []), data]
            unit[host_index] = msgspec.structs.replace(
                host, meta={**host.meta, META_ORPHAN_RESULTS: kept}
            )
            return
        for i in range(len(items) - 1, -1, -1):
            prior = items[i]
            if isinstance(prior, Event):
                kept = [*prior.meta.get(META_ORPHAN_RESULTS, []), data]
                items[i] = msgspec.structs.replace(
                    prior, meta={**prior.meta, META_ORPHAN_RESULTS: kept}
                )
                return
        # Nothing before it: the result becomes a record of its own.
        unit.append(
            Event.new(
                "import/orphan_result",
                data,
                agent=event.agent,
                meta={META_HEALED: "orphan_result"},
                time=event.time,
                id=_derived_id(event.id, "o"),
            )
        )

    for unit in _units(_remap(events, defects)):
        kept_unit: list[_Item] = []
        moved: list[tuple[_Slot, int, Event]] = []
        orphans = 0
        results = 0
        for event in unit:
            if event.type in (USER_MESSAGE, ASSISTANT_MESSAGE):
                close(kept_unit)
                kept_unit.append(event)
                msg = _msg(event)
                if event.type == ASSISTANT_MESSAGE and msg is not None and msg.tool_calls:
                    open_calls, open_event = list(msg.tool_calls), event
                continue
            if event.type != TOOL_RESULT:
                kept_unit.append(event)
                continue
            results += 1
            result = _result(event)
            if result is None:
                kept_unit.append(event)
                continue
            match = next((c for c in open_calls if c.id == result.call_id), None)
            if match is not None:
                open_calls.remove(match)
                kept_unit.append(event)
                continue
            queue = slots.get(result.call_id)
            if queue:
                slot, index = queue.popleft()
                moved.append((slot, index, event))
                continue
            orphans += 1
            orphan(kept_unit, event, result)
        if (
            hooks.move_records
            and moved
            and len(moved) == results
            and len({id(s) for s, _, _ in moved}) == 1
            and all(isinstance(e, Event) and e.type not in _TYPED for e in kept_unit)
        ):
            # A unit of late results for one exchange: its records move with them.
            slot, index, _ = moved[0]
            records = [e for e in kept_unit if isinstance(e, Event)]
            kept_unit = []
            slot.late.setdefault(index, []).extend(records)
        for slot, index, event in moved:
            slot.late.setdefault(index, []).append(event)
            defects.append(
                Defect(
                    "late_result",
                    "reattached",
                    slot.calls[index].id,
                    f"result for {slot.calls[index].id!r} came after later messages: moved back "
                    "to its call",
                )
            )
        if (
            orphans
            and orphans == results
            and all(isinstance(e, Event) and e.type not in _TYPED for e in kept_unit)
        ):
            kept_unit = [hooks.set_aside(e) if isinstance(e, Event) else e for e in kept_unit]
        items.extend(kept_unit)
    close([])

    out: list[Event] = []
    for item in items:
        if isinstance(item, Event):
            out.append(item)
            continue
        for index, call in enumerate(item.calls):
            if index in item.late:
                out.extend(item.late[index])
                continue
            defects.append(
                Defect(
                    "orphan_call",
                    "answered_interrupted",
                    call.id,
                    f"call {call.id!r} ({call.name}) has no result: answered as interrupted",
                )
            )
            base = item.call_event
            out.extend(hooks.standin_records(call, base))
            out.append(
                Event.new(
                    TOOL_RESULT,
                    interrupted_tool_result(call),
                    agent=base.agent,
                    meta={**_turn(base), META_HEALED: "orphan_call"},
                    time=base.time,
                    id=_derived_id(base.id, f"i{index}"),
                )
            )
    return out, defects


def _turn(event: Event) -> dict[str, Any]:
    turn = event.meta.get("turn_id")
    return {"turn_id": turn} if isinstance(turn, str) else {}


def survey(events: Sequence[Event]) -> list[Defect]:
    """The defects :func:`heal` would fix in ``events``, each with the action ``none`` (what
    an import with healing off reports)."""
    _, found = heal(events)
    return [Defect(d.kind, "none", d.call_id, d.detail) for d in found]
