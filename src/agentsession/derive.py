"""From the event log to the message list a model sees.

One state machine, :class:`Deriver`, implements every rule, and every entry point uses it:
:func:`messages` and :func:`index_messages_for_compaction` here, and the incremental state a
session keeps so that ``Session.messages()`` after an append costs only the new events.

The rules (agentkit's ``DeriveMessages``, with its gaps closed):

* **Agent filter**: with an agent given, an event takes part when its agent is empty or equal.
* **Compaction**: the latest compaction marker that passes the filter replaces everything before
  it with its summary and retained tail. A legacy marker (only ``before_seq``) keeps the summary
  and replays the events after ``before_seq``.
* **Messages**: user and assistant messages are replayed as stored; ``tool/result`` events become
  tool messages; ``turn/continue`` contributes its messages; ``skill/load`` becomes a user
  message carrying the rendered skill, held back while tool calls are unanswered so that tool
  results follow their calls directly.
* **Rollback**: a ``session/rollback`` marker (a delivery with the ``rollback`` policy ended a
  running turn) leaves out every event from the turn's ``turn/start`` up to the marker that
  carries the turn's id (``meta["turn_id"]``), whatever the agent filter. Nothing is deleted;
  an incremental deriver that already applied those events asks for a rebuild.
* **Rewind**: a ``session/rewind`` marker (``session.rewind``, ``retry``, ``edit``) makes the
  history the one that stood right after its ``to_seq``; what follows it continues that one.
  The events it takes out stay in the log and come back when a later rewind goes back to a
  seq among them: :func:`live_events` gives the events the history is made of, whatever the
  agent filter. An incremental deriver that meets a rewind to before its last event asks for
  a rebuild.
* **Pairing**: tool results pair with calls by id, first come first served, so ids repeated across
  steps stay correct. A result with no open call before it is left out. When a user or assistant
  message arrives while calls are unanswered, or at the end of the log, each unanswered call is
  answered by the *interrupted* stand-in (:func:`interrupted_tool_result`), placed after the
  exchange's real results. A real result that arrives after its call was closed this way replaces
  the stand-in.

The output therefore always passes :func:`agentsession.validation.provider_errors`.
"""

from __future__ import annotations

import bisect
import logging
from collections import deque
from collections.abc import Iterable, Sequence

import msgspec

from .errors import NewerFormat
from .events import (
    ASSISTANT_MESSAGE,
    COMPACTION,
    EVENT_TYPES,
    FORMAT_REVISION,
    SESSION_FORK,
    SESSION_REWIND,
    SESSION_ROLLBACK,
    SKILL_LOAD,
    TOOL_RESULT,
    TURN_CONTINUE,
    USER_MESSAGE,
    Compaction,
    Event,
    SessionFork,
    SessionRewind,
    SessionRollback,
    SkillLoad,
    TurnContinue,
    compaction_of,
    decode,
)
from .messages import Message, TextPart, ToolCall, ToolResult

__all__ = [
    "INTERRUPTED_TOOL_RESULT_TEXT",
    "Deriver",
    "IndexedMessage",
    "index_messages_for_compaction",
    "check_revision",
    "interrupted_tool_result",
    "live_events",
    "rewind_target",
    "messages",
    "prune_tool_results",
    "render_skill",
    "truncate_text",
]

log = logging.getLogger(__name__)

INTERRUPTED_TOOL_RESULT_TEXT = (
    "tool execution was interrupted before it produced a result (process exited); "
    "re-run it if the result is still needed"
)
"""The content of the stand-in result for a tool call that never got one (agentkit's text)."""

TRUNCATION_MARK = "\n...[truncated]"
"""Appended to text that was cut."""


def interrupted_tool_result(call: ToolCall) -> ToolResult:
    """The stand-in result for ``call``: interrupted text, audit ``{"decision": "interrupted"}``."""
    return ToolResult(
        call_id=call.id,
        name=call.name,
        content=INTERRUPTED_TOOL_RESULT_TEXT,
        audit={"decision": "interrupted"},
    )


def truncate_text(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes, on a character boundary, plus the
    truncation mark; unchanged when it fits or ``max_bytes <= 0``."""
    if max_bytes <= 0:
        return text
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes:
        return text
    cut = data[:max_bytes].decode("utf-8", "ignore")
    return cut + TRUNCATION_MARK


def _escape_attr(value: str) -> str:
    return value.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")


def render_skill(skill: SkillLoad) -> str:
    """The model-visible text of a loaded skill (agentkit's ``<skill_content>`` form)."""
    if skill.resource_base:
        hint = (
            f"Base directory for this skill: {skill.resource_base}\n"
            "Relative paths in this skill resolve against that directory: read files with "
            "`read` and run scripts with `bash`.\n"
        )
    else:
        hint = "Load referenced resources only as needed.\n"
    return (
        f'<skill_content name="{_escape_attr(skill.name)}">\n'
        f"<skill_resources>\n{hint}</skill_resources>\n\n"
        f"<skill_instructions>\n{skill.body}\n</skill_instructions>\n</skill_content>"
    )


class _Revision(msgspec.Struct, rename="camel"):
    min_revision: int = 0


def check_revision(event: Event) -> None:
    """Raise :class:`~agentsession.errors.NewerFormat` when ``event``'s payload asks for a
    format revision newer than :data:`~agentsession.events.FORMAT_REVISION` (its
    ``minRevision``): an event a newer version wrote, whose meaning this one does not know."""
    try:
        needed = decode(event.data, _Revision).min_revision
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError):
        return
    if needed > FORMAT_REVISION:
        raise NewerFormat(
            f"event seq {event.seq} ({event.type}) needs format revision {needed}; this "
            f"version of agentsession reads up to revision {FORMAT_REVISION}: upgrade it to "
            "read this session"
        )


def rewind_target(event: Event) -> int | None:
    """The ``to_seq`` of a ``session/rewind`` marker: the seq whose history it goes back to;
    None (with a warning) for a marker that does not decode or names no earlier seq.
    Raises :class:`~agentsession.errors.NewerFormat` for a marker of a newer revision."""
    check_revision(event)
    marker = _decode_or_none(event, SessionRewind)
    if not isinstance(marker, SessionRewind):
        return None
    if not 0 <= marker.to_seq < event.seq:
        log.warning(
            "ignored the rewind marker at seq %d: to_seq %d is not an earlier seq",
            event.seq,
            marker.to_seq,
        )
        return None
    return marker.to_seq


def live_events(events: Sequence[Event]) -> Sequence[Event]:
    """The events the derived history is made of, in seq order: ``events`` (a log, or its
    tail, in seq order) without rewind markers and without the events a rewind took out.

    Each event extends the history as it stood before it; a rewind to seq ``t`` makes the
    history the one that stood right after ``t``, so the events after ``t`` up to the marker
    leave it (a later rewind to a seq among them brings them back). A rewind to a seq before
    the first of ``events`` leaves none of the earlier ones. ``events`` itself when it holds
    no rewind (no copy)."""
    if not any(event.type == SESSION_REWIND for event in events):
        return events
    seqs: list[int] = []
    heads: list[int] = []  # index of the history's last event right after each event (-1)
    parents: list[int] = []  # index of the history's event before each event (-1)
    head = -1
    first = events[0].seq
    for index, event in enumerate(events):
        parents.append(head)
        if event.type == SESSION_REWIND:
            target = rewind_target(event)
            if target is not None:
                at = bisect.bisect_right(seqs, target) - 1
                head = heads[at] if target >= first and at >= 0 else -1
        else:
            head = index
        seqs.append(event.seq)
        heads.append(head)
    chain: list[Event] = []
    while head >= 0:
        chain.append(events[head])
        head = parents[head]
    chain.reverse()
    return chain


class IndexedMessage(msgspec.Struct, frozen=True):
    """A derived message with the seq of the event it came from."""

    message: Message
    """The model-visible message."""
    seq: int
    """Seq of the source event (the compaction marker for a summary; the assistant message for a
    stand-in result)."""
    is_turn_start: bool = False
    """True for messages that begin a turn (user messages, skill loads): safe cut points."""
    agent: str = ""
    """For a message a compaction marker kept: the agent it came from (``retained_agents``);
    for other messages the source event's agent is in the log itself."""


class _Slot:
    """One tool call waiting for its result."""

    __slots__ = ("call", "entry", "index")

    def __init__(self, call: ToolCall) -> None:
        self.call = call
        self.entry = -1  # index of the stand-in message in the entries, once closed
        self.index = -1  # position of this call's stand-in within that message


def _decode_or_none(event: Event, type_: type[msgspec.Struct]) -> msgspec.Struct | None:
    """The event's payload as ``type_``; None, with a warning, when it is not one (data written
    by an older or foreign writer: the append pipeline refuses such payloads today)."""
    try:
        return decode(event.data, type_)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
        log.warning(
            "left event seq %d (%s) out of the history: its payload is not a valid %s: %s",
            event.seq,
            event.type,
            type_.__name__,
            exc,
        )
        return None


class Deriver:
    """Incremental derivation state for one agent filter.

    Feed events in seq order with :meth:`feed`; :meth:`entries` gives the derived list at any
    point. ``feed`` returns False when it meets a legacy compaction marker, whose rule needs
    events from before the marker: rebuild from those events with :meth:`from_events`.
    """

    def __init__(self, agent: str | None = None) -> None:
        self.agent = agent or None
        """The agent filter, or None for every agent."""
        self.last_seq = 0
        """Seq of the last event fed."""
        self._entries: list[IndexedMessage] = []
        self._open: list[_Slot] = []
        self._exchange_seq = 0
        self._exchange_agent = ""
        self._standins: dict[str, deque[_Slot]] = {}
        self._pending: list[IndexedMessage] = []
        self._floor = 0  # a legacy marker hides every event up to its before_seq
        # Rolled-back turns: turn id -> [(its turn/start seq, the marker's seq)].
        self._rolled: dict[str, list[tuple[int, int]]] = {}
        self.summary: IndexedMessage | None = None
        """The summary entry of the compaction the history starts from (None when none)."""

    # -- building -------------------------------------------------------------------------

    @classmethod
    def from_events(cls, events: Sequence[Event], agent: str | None = None) -> Deriver:
        """A deriver that has applied ``events`` (a whole log, or a log from a compaction on)."""
        deriver = cls(agent)
        last = events[-1].seq if events else 0
        events = live_events(events)
        for event in events:
            if event.type == SESSION_ROLLBACK:
                deriver._note_rollback(event)
        start = 0
        for i in range(len(events) - 1, -1, -1):
            event = events[i]
            if event.type != COMPACTION or not deriver.passes(event):
                continue
            data = compaction_of(event)
            if data is None:
                continue
            if data.rebuilds_history:
                deriver._start_from(data, event.seq)
                start = i + 1
            else:
                deriver.summary = (
                    None if data.summary is None else IndexedMessage(data.summary, event.seq)
                )
                deriver._entries = [] if deriver.summary is None else [deriver.summary]
                deriver._floor = data.before_seq
                # The legacy rule replays every event after ``before_seq``, also those before
                # the marker; later markers do not pass the filter, so none is skipped wrongly.
                for earlier in events:
                    if earlier.seq > data.before_seq and earlier.type != COMPACTION:
                        deriver._apply(earlier)
                deriver.last_seq = max(event.seq, last)
                return deriver
            break
        for event in events[start:]:
            deriver.feed(event)
        deriver.last_seq = max(deriver.last_seq, last)
        return deriver

    def passes(self, event: Event) -> bool:
        """Whether ``event`` takes part under this deriver's agent filter."""
        return self.agent is None or not event.agent or event.agent == self.agent

    def _note_rollback(self, event: Event) -> bool:
        """Take in a ``session/rollback`` marker; True when it was new."""
        marker = _decode_or_none(event, SessionRollback)
        if not isinstance(marker, SessionRollback) or not marker.turn_id:
            return False
        span = (marker.turn_start_seq, event.seq)
        spans = self._rolled.setdefault(marker.turn_id, [])
        if span in spans:
            return False
        spans.append(span)
        return True

    def _rolled_back(self, event: Event) -> bool:
        """Whether ``event`` belongs to a rolled-back turn."""
        turn = event.meta.get("turn_id") if event.meta else None
        if not isinstance(turn, str):
            return False
        spans = self._rolled.get(turn)
        return bool(spans) and any(first <= event.seq < last for first, last in spans or ())

    def feed(self, event: Event) -> bool:
        """Apply one event. False means a legacy compaction marker, a rollback marker of a
        turn whose events were applied already, or a rewind to before the last event fed,
        needs a rebuild (nothing changed)."""
        if event.seq and event.seq <= self.last_seq:
            return True
        if event.type == SESSION_REWIND:
            target = rewind_target(event)
            if target is not None and target < self.last_seq:
                return False  # events after the target were applied: derive again
        elif event.type == SESSION_ROLLBACK:
            marker = _decode_or_none(event, SessionRollback)
            if isinstance(marker, SessionRollback) and marker.turn_id:
                known = (marker.turn_start_seq, event.seq) in self._rolled.get(marker.turn_id, ())
                if not known and marker.turn_start_seq <= self.last_seq:
                    return False  # the turn's events were applied: derive again from the log
                self._note_rollback(event)
        elif event.type == COMPACTION and self.passes(event):
            data = compaction_of(event)
            if data is not None:
                if not data.rebuilds_history:
                    return False
                self._start_from(data, event.seq)
        else:
            self._apply(event)
        self.last_seq = max(self.last_seq, event.seq)
        return True

    def feed_all(self, events: Iterable[Event]) -> bool:
        """Apply events in order; False as soon as one needs a rebuild."""
        return all(self.feed(event) for event in events)

    def _apply(self, event: Event) -> None:
        if not self.passes(event) or (event.seq and event.seq <= self._floor):
            return
        if self._rolled and self._rolled_back(event):
            return
        kind = event.type
        if kind in (USER_MESSAGE, ASSISTANT_MESSAGE):
            msg = _decode_or_none(event, Message)
            if isinstance(msg, Message):
                self._message(msg, event.seq, kind == USER_MESSAGE)
        elif kind == TOOL_RESULT:
            result = _decode_or_none(event, ToolResult)
            if isinstance(result, ToolResult):
                self._results((result,), event.seq)
        elif kind == SKILL_LOAD:
            skill = _decode_or_none(event, SkillLoad)
            if isinstance(skill, SkillLoad):
                entry = IndexedMessage(Message.user(render_skill(skill)), event.seq, True)
                if self._open:
                    self._pending.append(entry)
                else:
                    self._entries.append(entry)
        elif kind == TURN_CONTINUE:
            cont = _decode_or_none(event, TurnContinue)
            if isinstance(cont, TurnContinue):
                for msg in cont.messages:
                    self._message(msg, event.seq, msg.role == "user")
        elif kind == SESSION_FORK:
            fork = _decode_or_none(event, SessionFork)
            if isinstance(fork, SessionFork):  # a child's inherited history
                for msg in fork.messages:
                    self._message(msg, event.seq, msg.role == "user")
        elif kind not in EVENT_TYPES and b'"minRevision"' in bytes(event.data):
            check_revision(event)

    def _start_from(self, data: Compaction, seq: int) -> None:
        self.summary = None if data.summary is None else IndexedMessage(data.summary, seq)
        self._entries = [] if self.summary is None else [self.summary]
        self._open = []
        self._standins = {}
        self._pending = []
        self._floor = 0
        tail_seq = data.first_kept_seq or seq
        agents = data.retained_agents
        if len(agents) != len(data.retained_tail):
            agents = [""] * len(data.retained_tail)  # an older marker: the tail passes all
        starts = set(data.retained_turn_starts)
        for index, (msg, agent) in enumerate(zip(data.retained_tail, agents, strict=True)):
            # A kept message of another agent stays out of this agent's history.
            if self.agent is None or not agent or agent == self.agent:
                turn_start = index in starts if starts else msg.role == "user"
                self._message(msg, tail_seq, turn_start, agent)

    # -- the pairing rules ----------------------------------------------------------------

    def _message(self, msg: Message, seq: int, is_turn_start: bool, agent: str = "") -> None:
        if msg.role == "tool":
            self._results(msg.tool_results, seq, agent)
            return
        self._close_exchange()
        self._entries.append(IndexedMessage(msg, seq, is_turn_start and msg.role == "user", agent))
        if msg.role == "assistant" and msg.tool_calls:
            self._open = [_Slot(call) for call in msg.tool_calls]
            self._exchange_seq = seq
            self._exchange_agent = agent

    def _results(self, results: Iterable[ToolResult], seq: int, agent: str = "") -> None:
        matched: list[ToolResult] = []
        for result in results:
            slot = next((s for s in self._open if s.call.id == result.call_id), None)
            if slot is not None:
                self._open.remove(slot)
                matched.append(result)
                continue
            late = self._standins.get(result.call_id)
            if late:
                self._replace_standin(late.popleft(), result)
            # Otherwise no call precedes it: a provider would reject it, so it is left out.
        if matched:
            message = Message(role="tool", tool_results=matched)
            self._entries.append(IndexedMessage(message, seq, False, agent))
        if not self._open and self._pending:
            self._entries.extend(self._pending)
            self._pending = []

    def _standin_message(self) -> IndexedMessage:
        results = [interrupted_tool_result(slot.call) for slot in self._open]
        message = Message(role="tool", tool_results=results)
        return IndexedMessage(message, self._exchange_seq, False, self._exchange_agent)

    def _close_exchange(self) -> None:
        if self._open:
            index = len(self._entries)
            self._entries.append(self._standin_message())
            for position, slot in enumerate(self._open):
                slot.entry, slot.index = index, position
                self._standins.setdefault(slot.call.id, deque()).append(slot)
            self._open = []
        if self._pending:
            self._entries.extend(self._pending)
            self._pending = []

    def _replace_standin(self, slot: _Slot, result: ToolResult) -> None:
        entry = self._entries[slot.entry]
        results = list(entry.message.tool_results)
        results[slot.index] = result
        message = msgspec.structs.replace(entry.message, tool_results=results)
        self._entries[slot.entry] = msgspec.structs.replace(entry, message=message)

    # -- output ---------------------------------------------------------------------------

    @property
    def has_open_calls(self) -> bool:
        """True while tool calls of the latest exchange await results."""
        return bool(self._open)

    def unanswered_calls(self) -> list[ToolCall]:
        """Tool calls that have no real result yet, in call order: the open exchange's, and
        those a later message closed with the interrupted stand-in."""
        waiting = [slot for queue in self._standins.values() for slot in queue]
        waiting.sort(key=lambda slot: (slot.entry, slot.index))
        return [slot.call for slot in waiting] + [slot.call for slot in self._open]

    def committed(self) -> list[IndexedMessage]:
        """The derived entries without the stand-ins and held skill loads of an open exchange."""
        return list(self._entries)

    def committed_since(self, start: int) -> list[IndexedMessage]:
        """``committed()[start:]`` without copying the entries before ``start``."""
        return self._entries[start:]

    def entries(self) -> list[IndexedMessage]:
        """The derived list as it stands: unanswered calls get the interrupted stand-in."""
        out = list(self._entries)
        if self._open:
            out.append(self._standin_message())
        out.extend(self._pending)
        return out

    def settled(self) -> list[IndexedMessage]:
        """The derived list without an exchange still waiting for results (its assistant
        message, the results it already has, and the skill loads held behind it): what a
        child session inherits, since those calls are in flight, not interrupted."""
        out = list(self._entries)
        if self._open:
            for index in range(len(out) - 1, -1, -1):
                message = out[index].message
                if message.role == "assistant" and message.tool_calls:
                    del out[index:]
                    break
        return out

    def messages(self, max_tool_result_bytes: int | None = None) -> list[Message]:
        """The derived messages, optionally with long tool results cut."""
        out = [entry.message for entry in self._entries]
        if self._open:
            out.append(self._standin_message().message)
        out.extend(entry.message for entry in self._pending)
        if max_tool_result_bytes:
            return prune_tool_results(out, max_tool_result_bytes)
        return out


def prune_tool_results(msgs: Sequence[Message], max_bytes: int) -> list[Message]:
    """Copies of ``msgs`` whose tool results and tool-message text are cut to ``max_bytes``
    (on a UTF-8 boundary, plus the truncation mark). The input is not changed."""
    if max_bytes <= 0:
        return list(msgs)
    out: list[Message] = []
    for msg in msgs:
        if msg.role != "tool" and not msg.tool_results:
            out.append(msg)
            continue
        parts = [
            TextPart(truncate_text(p.text, max_bytes)) if type(p) is TextPart else p
            for p in msg.parts
        ]
        results = [
            msgspec.structs.replace(r, content=truncate_text(r.content, max_bytes))
            for r in msg.tool_results
        ]
        out.append(msgspec.structs.replace(msg, parts=parts, tool_results=results))
    return out


def messages(
    events: Sequence[Event],
    agent: str | None = None,
    max_tool_result_bytes: int | None = None,
) -> list[Message]:
    """The model-visible history of ``events`` (see the module docstring for the rules)."""
    return Deriver.from_events(events, agent).messages(max_tool_result_bytes)


def index_messages_for_compaction(
    events: Sequence[Event], agent: str | None = None
) -> list[IndexedMessage]:
    """The derived history with source seqs and turn-start flags, for planning a compaction.

    Exactly the entries behind :func:`messages`, so the two never disagree.
    """
    return Deriver.from_events(events, agent).entries()
