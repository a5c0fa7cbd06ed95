"""The event log's record, its type vocabulary, typed payloads and the one codec.

Every stored record is an :class:`Event`. Its ``data`` stays encoded JSON bytes
(:class:`msgspec.Raw`) until someone asks for the payload, so a reader that only needs ``seq``
and ``type`` never pays for decoding a large tool result. Payloads are typed structs; their JSON
keys are camelCase, as agentkit writes them. All JSON passes through
:mod:`agentsession.codec`; this module adds the event line format (:func:`encode_event`,
:func:`decode_event`, :func:`decode_event_lines`) on the same encoder.
"""

from __future__ import annotations

import builtins
import datetime as _dt
import itertools
import json as _json
import os
import time as _time
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeVar

import msgspec

from .codec import decode, encode, encoder, fallback_dumps, utcnow
from .messages import Message, ToolCall, ToolResult

__all__ = [
    "ASSISTANT_MESSAGE",
    "COMPACTION",
    "CORE_NAMESPACES",
    "EVENT_TYPES",
    "FINISH_BLOCKED",
    "FORMAT_REVISION",
    "REWIND_REVISION",
    "FINISH_COMPLETED",
    "FINISH_STATUSES",
    "MAX_EVENT_ID_CHARS",
    "MESSAGE_END",
    "MESSAGE_START",
    "MESSAGE_UPDATE",
    "OVERFLOW_RECOVERY",
    "PAYLOAD_TYPES",
    "PERMISSION_REQUEST",
    "PERMISSION_RESOLVED",
    "RETRY_END",
    "RETRY_START",
    "RUN_FINISH",
    "SESSION_BRANCH",
    "SESSION_DELIVERY",
    "SESSION_DISCARD",
    "SESSION_FORK",
    "SESSION_LEASE",
    "SESSION_MERGE",
    "SESSION_RECOVERY",
    "SESSION_REWIND",
    "SESSION_ROLLBACK",
    "SKILL_LOAD",
    "STEP_END",
    "STEP_START",
    "SUBAGENT_END",
    "SUBAGENT_START",
    "SUMMARIZATION_RETRY_END",
    "SUMMARIZATION_RETRY_START",
    "TODO_DONE",
    "TODO_IN_PROGRESS",
    "TODO_PENDING",
    "TODO_STATUSES",
    "TODO_UPDATE",
    "TOOL_CALL",
    "TOOL_RESULT",
    "TURN_CONTINUE",
    "TURN_END",
    "TURN_START",
    "USAGE",
    "USER_MESSAGE",
    "Compaction",
    "Event",
    "MessageStream",
    "OverflowRecovery",
    "PermissionRequest",
    "PermissionResolved",
    "RetryEnd",
    "RetryStart",
    "RunFinish",
    "SessionBranch",
    "SessionDelivery",
    "SessionDiscard",
    "SessionFork",
    "SessionLease",
    "SessionMerge",
    "SessionRecovery",
    "SessionRewind",
    "SessionRollback",
    "SkillLoad",
    "StepEnd",
    "StepStart",
    "SubagentEnd",
    "SubagentStart",
    "SummarizationRetryEnd",
    "SummarizationRetryStart",
    "Todo",
    "TodoUpdate",
    "TurnContinue",
    "TurnEnd",
    "TurnError",
    "TurnStart",
    "Usage",
    "check_event_type",
    "decode",
    "encode",
    "new_event_id",
    "utcnow",
]

# ---------------------------------------------------------------------------------------------
# Event type strings (agentkit's vocabulary).

TURN_START: Final = "turn/start"
TURN_END: Final = "turn/end"
STEP_START: Final = "step/start"
STEP_END: Final = "step/end"
USER_MESSAGE: Final = "user/message"
ASSISTANT_MESSAGE: Final = "assistant/message"
MESSAGE_START: Final = "message/start"
MESSAGE_UPDATE: Final = "message/update"
MESSAGE_END: Final = "message/end"
TOOL_CALL: Final = "tool/call"
TOOL_RESULT: Final = "tool/result"
COMPACTION: Final = "session/compaction"
SKILL_LOAD: Final = "skill/load"
RETRY_START: Final = "retry/start"
RETRY_END: Final = "retry/end"
SUMMARIZATION_RETRY_START: Final = "summarization/retry/start"
SUMMARIZATION_RETRY_END: Final = "summarization/retry/end"
OVERFLOW_RECOVERY: Final = "overflow/recovery"
TURN_CONTINUE: Final = "turn/continue"
USAGE: Final = "usage"
TODO_UPDATE: Final = "todo/update"
RUN_FINISH: Final = "run/finish"
SESSION_RECOVERY: Final = "session/recovery"
SESSION_FORK: Final = "session/fork"
SESSION_MERGE: Final = "session/merge"
SESSION_DISCARD: Final = "session/discard"
SESSION_LEASE: Final = "session/lease"
SESSION_DELIVERY: Final = "session/delivery"
SESSION_ROLLBACK: Final = "session/rollback"
SESSION_REWIND: Final = "session/rewind"
SESSION_BRANCH: Final = "session/branch"

FORMAT_REVISION: Final = 7
"""The newest revision of the line format this version reads and writes (``docs/format.md``).
A payload's ``minRevision`` above it makes the derived history refuse the log
(:class:`~agentsession.errors.NewerFormat`)."""

REWIND_REVISION: Final = 6
"""The revision that added rewinds and branches: the ``minRevision`` their markers carry (a
reader that knows an older revision refuses the log rather than derive a wrong history)."""

SUBAGENT_START: Final = "subagent/start"
SUBAGENT_END: Final = "subagent/end"
PERMISSION_REQUEST: Final = "permission/request"
PERMISSION_RESOLVED: Final = "permission/resolved"


# ---------------------------------------------------------------------------------------------
# Status vocabularies (agentkit's ``Todo*`` and ``Finish*`` constants).

TODO_PENDING: Final = "pending"
"""A todo item not started yet (agentkit's ``TodoPending``)."""
TODO_IN_PROGRESS: Final = "in_progress"
"""A todo item being worked on (agentkit's ``TodoInProgress``)."""
TODO_DONE: Final = "done"
"""A finished todo item (agentkit's ``TodoDone``); every other status counts as outstanding."""
TODO_STATUSES: Final = (TODO_PENDING, TODO_IN_PROGRESS, TODO_DONE)
"""The todo statuses agentkit defines, in workflow order (others are stored as given)."""

FINISH_COMPLETED: Final = "completed"
"""``run/finish`` status: the run did what it was asked (agentkit's ``FinishCompleted``)."""
FINISH_BLOCKED: Final = "blocked"
"""``run/finish`` status: the run cannot go on without help (agentkit's ``FinishBlocked``)."""
FINISH_STATUSES: Final = (FINISH_COMPLETED, FINISH_BLOCKED)
"""The run finish statuses, the only two the recorder's ``finish`` accepts."""


# ---------------------------------------------------------------------------------------------
# Payloads. Fields that are empty are left out of the JSON, as agentkit does with ``omitempty``.


class _Payload(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    pass


class TurnStart(_Payload, frozen=True):
    """``turn/start``: a turn begins. Carries nothing."""


class TurnError(_Payload, frozen=True):
    """The exception that ended a turn."""

    type: str
    """Exception class name, for example ``TimeoutError``."""
    message: str = ""
    """``str(exception)``."""


class TurnEnd(_Payload, frozen=True):
    """``turn/end``: a turn is over."""

    steps: int
    """Number of steps the turn completed."""
    error: TurnError | None = None
    """Set when the turn ended because an exception escaped it."""


class StepStart(_Payload, frozen=True):
    """``step/start``: one model call (and its tool calls) begins."""

    step: int
    """Step number within the turn, from 0."""


class StepEnd(_Payload, frozen=True):
    """``step/end``: the step is over."""

    step: int
    """Step number within the turn, from 0."""


class Compaction(_Payload, frozen=True):
    """``session/compaction``: history up to a point is replaced by a summary."""

    summary: Message | None = None
    """The summary message (usually a user message); ``None`` for a prune."""
    first_kept_seq: int = 0
    """First event seq whose messages are kept verbatim (a turn boundary)."""
    retained_tail: list[Message] = []
    """The kept messages themselves, so the marker alone rebuilds the history."""
    tokens_before: int = 0
    """Context size before compaction, when known."""
    before_seq: int = 0
    """Legacy form: highest summarised seq, used only when ``first_kept_seq`` is unset."""
    kind: str = "summary"
    """``summary`` or ``prune`` (a history cap that drops messages without summarising)."""
    retained_turn_starts: list[int] = []
    """Indexes into ``retained_tail`` of the messages that begin a turn, so that a later
    compaction or history cap cuts only between the kept turns; empty in markers written before
    this field existed (every kept user message then counts as a turn start)."""
    in_turn: bool = False
    """True when the marker was appended inside a turn that had not ended (a history cap applies
    right after the user message that started it): the events after the marker, up to the next
    ``turn/end``, belong to that turn."""
    retained_agents: list[str] = []
    """The agent of each message of ``retained_tail`` (same length), so that every agent's
    history keeps only its own kept messages; empty when no kept message has an agent (and
    in markers written before this field existed: their tail passes every filter)."""

    @property
    def rebuilds_history(self) -> bool:
        """Whether the marker alone rebuilds the history from its own seq on (it names the first
        kept seq or carries the kept messages), so nothing before it needs to be loaded. The
        legacy form (only ``before_seq``) needs the events after ``before_seq``."""
        return bool(self.first_kept_seq or self.retained_tail)

    @property
    def history_starts_at(self) -> int:
        """For a marker at seq ``s``: the first seq derive needs is ``s`` when the marker
        rebuilds history, else ``before_seq + 1``. This returns the latter (0 when it rebuilds)."""
        return 0 if self.rebuilds_history else self.before_seq + 1


class SkillLoad(_Payload, frozen=True):
    """``skill/load``: a skill's instructions were loaded into the conversation."""

    name: str
    """Skill name."""
    description: str = ""
    """One-line description (not shown to the model)."""
    body: str = ""
    """The skill's instructions."""
    resource_base: str = ""
    """Directory the skill's relative paths resolve against."""


class RetryStart(_Payload, frozen=True):
    """``retry/start``: a failed model call is retried."""

    attempt: int = 0
    """Attempt number, from 1."""
    max_attempts: int = 0
    """Attempts allowed."""
    delay_ms: int = 0
    """Delay before this attempt, in milliseconds."""
    error_message: str = ""
    """Why the previous attempt failed."""


class RetryEnd(_Payload, frozen=True):
    """``retry/end``: retrying is over."""

    success: bool = False
    """Whether an attempt finally succeeded."""
    attempt: int = 0
    """The last attempt number."""
    final_error: str = ""
    """The error that ended retrying, when it failed."""


class SummarizationRetryStart(RetryStart, frozen=True):
    """``summarization/retry/start``: a failed summarisation call is retried."""


class SummarizationRetryEnd(RetryEnd, frozen=True):
    """``summarization/retry/end``: summarisation retrying is over."""


class OverflowRecovery(_Payload, frozen=True):
    """``overflow/recovery``: the context overflowed and was shrunk."""

    applied: int = 0
    """How many recovery measures were applied."""
    reason: str = ""
    """Why recovery ran."""
    error: str = ""
    """The provider error that triggered it."""


class TurnContinue(_Payload, frozen=True):
    """``turn/continue``: a long turn continues in a new segment."""

    segment: int = 0
    """Segment number."""
    reason: str = ""
    """Why the turn continued."""
    steps: int = 0
    """Steps so far."""
    messages: list[Message] = []
    """Model-visible messages injected at the continuation."""


class Usage(_Payload, frozen=True):
    """``usage``: tokens used by one model call."""

    input_tokens: int = 0
    """Prompt tokens (the current context size)."""
    output_tokens: int = 0
    """Completion tokens."""
    total_tokens: int = 0
    """Input plus output, as the provider reported it."""
    cache_read_tokens: int = 0
    """Prompt tokens served from the provider's cache."""
    cache_write_tokens: int = 0
    """Prompt tokens written to the provider's cache."""
    reasoning_tokens: int = 0
    """Output tokens spent on reasoning, when the provider reports them (part of
    ``output_tokens``); since revision 3."""
    model: str = ""
    """The model that was called, when known (since revision 7): what the store's prices
    (``store.set_prices``) look a cost up by."""
    cost: float | None = None
    """What the call cost, when the application or provider knows it (since revision 7); None:
    the store's prices decide, when set."""


class Todo(_Payload, frozen=True, omit_defaults=False):
    """One item of the agent's todo list."""

    id: str
    """Stable item id."""
    title: str = ""
    """What is to be done."""
    status: str = "pending"
    """``pending``, ``in_progress`` or ``done``; anything but ``done`` is outstanding."""

    @property
    def done(self) -> bool:
        """True only for status ``done``."""
        return self.status == "done"


class TodoUpdate(_Payload, frozen=True):
    """``todo/update``: the whole todo list as it is now."""

    items: list[Todo] = []
    """Every item, in order."""


class RunFinish(_Payload, frozen=True):
    """``run/finish``: the agent declared the run finished."""

    status: str
    """``completed`` or ``blocked``."""
    summary: str = ""
    """What was done, or why it is blocked."""


class SessionRecovery(_Payload, frozen=True):
    """``session/recovery``: an interrupted turn was repaired."""

    turn_start_seq: int = 0
    """Seq of the repaired turn's ``turn/start``."""
    steps: int = 0
    """Steps the turn had completed."""
    orphan_results: int = 0
    """How many unanswered tool calls were answered with the interrupted result."""
    closed_step: int = -1
    """The step that was closed, or -1 when none was open."""
    reason: str = ""
    """Why the repair was needed."""


class SubagentStart(_Payload, frozen=True):
    """``subagent/start``: work was delegated to a subagent."""

    agent: str = ""
    """Subagent id."""
    session: str = ""
    """The child session id."""
    task: str = ""
    """What the subagent was asked to do."""
    async_: bool = msgspec.field(default=False, name="async")
    """True when the parent did not wait for it."""
    job_id: str = ""
    """Background job id, for asynchronous subagents."""


class SessionFork(_Payload, frozen=True):
    """``session/fork``: the first event of a child session (see ``docs/subagents.md``).

    It records where the child came from and carries the history it inherited, which
    :meth:`~agentsession.session.BaseSession.messages` shows before the child's own events."""

    parent: str
    """The parent session id."""
    parent_seq: int
    """The parent's latest seq when the child was forked (its history up to there is what
    the child could inherit)."""
    fork_id: str
    """A random id of this fork: the parent's linking events carry it, and a merge is
    recognised by it when it is retried."""
    agent: str = ""
    """The subagent working in the child."""
    task: str = ""
    """What the subagent was asked to do."""
    inherit: int = 0
    """How many of the parent's messages were asked for (-1: all of them)."""
    messages: list[Message] = []
    """The inherited history: the last provider-valid messages of the parent's derived
    history (never a tool result without its call, never a call without its result)."""
    max_messages: int = 0
    """The child's history cap (0: the store's)."""
    metadata: dict[str, str] = {}
    """Free metadata given at the fork."""


def fork_in(first: Sequence[Event]) -> SessionFork | None:
    """The ``session/fork`` payload in a session's first event, given as a list of at most one
    event (None when the session is not a child)."""
    if not first or first[0].type != SESSION_FORK:
        return None
    try:
        return first[0].decode(SessionFork)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


class SessionMerge(_Payload, frozen=True):
    """``session/merge``: the child's work reached its parent (the last thing a merge
    writes, after the parent acknowledged its events)."""

    parent: str
    """The parent session id."""
    fork_id: str
    """The fork this merge completes."""
    parent_seq: int = 0
    """Seq of the parent's ``subagent/end`` that the merge wrote."""
    mode: str = ""
    """``summary`` (one summary message) or ``messages`` (the child's own messages)."""
    messages: int = 0
    """How many messages reached the parent."""


class SessionDiscard(_Payload, frozen=True):
    """``session/discard``: the child was discarded; nothing of it reached the parent but a
    note."""

    parent: str
    """The parent session id."""
    fork_id: str
    """The fork this ends."""
    parent_seq: int = 0
    """Seq of the note (``subagent/end``, status ``discarded``) in the parent."""
    reason: str = ""
    """Why it was discarded."""


class SessionLease(_Payload, frozen=True):
    """``session/lease``: a worker took the conversation's turn lock over from a holder that
    had not released it (see ``docs/concurrency.md``). Every append made under an older
    lease after this event is refused (:class:`~agentsession.errors.LeaseLost`). Not part of
    the derived history."""

    epoch: int
    """The new lease's epoch."""
    previous: int = 0
    """The epoch of the lease taken over."""
    reason: str = ""
    """``stolen`` (the holder had not renewed for ``steal_after``), ``expired`` (its ``ttl``
    ran out) or ``unreleased`` (its lock went with its process or database connection)."""


class SessionDelivery(_Payload, frozen=True):
    """``session/delivery``: an incoming user message recorded by ``store.deliver`` (the
    inbox, see :mod:`agentsession.inbox` and ``docs/concurrency.md``), waiting for a worker to
    process it in a turn. The event's ``id`` is the delivery's id (a chat platform's event id
    makes a retried delivery a no-op), its ``agent`` and ``user`` the delivery's. Not part of
    the derived history: the turn that processes it records the message as its user
    message."""

    message: Message
    """The user's message."""
    policy: str = "enqueue"
    """What the delivery does when a turn is running: ``enqueue`` (processed after it),
    ``reject`` (refused; such a delivery is stored only when no turn was running),
    ``interrupt`` (the running turn is ended at its next step boundary, then the delivery is
    processed), ``merge`` (handed to the running turn at its next step, recorded as one of its
    user messages) or ``rollback`` (as ``interrupt``, and the ended turn is left out of the
    history: see :class:`SessionRollback`)."""


class SessionRollback(_Payload, frozen=True):
    """``session/rollback``: a delivery with the ``rollback`` policy ended a running turn,
    which is left out of the derived history from then on: every event from the turn's
    ``turn/start`` (``turn_start_seq``) to this marker that carries the turn's id
    (``meta["turn_id"]``) takes no part in it. Nothing is deleted from the log. Written by
    the recorder right after the turn's ``turn/end``."""

    turn_id: str = ""
    """The id of the turn rolled back."""
    turn_start_seq: int = 0
    """Seq of its ``turn/start``."""
    delivery: str = ""
    """The id of the delivery that rolled it back."""


class SessionRewind(_Payload, frozen=True):
    """``session/rewind`` (since revision 6): from this marker on, the derived history is the
    one that stood right after seq ``to_seq`` (earlier than the marker), and what is appended
    next continues it. The events between stay in the log (``read()`` returns them) and
    take no part in the history; a later rewind to a seq between them brings them back (a
    rewind is undone by rewinding to the seq just before it). Never earlier than the latest
    compaction marker (see ``docs/rewind.md``)."""

    to_seq: int = 0
    """The seq the history goes back to: it is as it stood right after this event."""
    kind: str = "rewind"
    """What asked for it: ``rewind``, ``retry``, ``edit``, or an integration
    (``openai.pop``, ``adk.rewind``)."""
    reason: str = ""
    """Why, as the caller put it (free text)."""
    min_revision: int = 0
    """The format revision a reader must know to derive a history from this log (6): a reader
    that knows an older one refuses rather than show the rewound turns."""


class SessionBranch(_Payload, frozen=True):
    """``session/branch`` (since revision 6): the first event (its own seq 1) of a branch,
    whose history starts with session ``origin``'s as it stood right after seq
    ``origin_seq``, without copying it. The branch's own events come after that prefix: this
    marker reads back at seq ``origin_seq + 1`` and the events after it follow (see
    ``docs/rewind.md``)."""

    origin: str = ""
    """The id of the session branched from."""
    origin_seq: int = 0
    """The seq of ``origin`` the branch's history shares up to (after which it diverges)."""
    min_revision: int = 0
    """The format revision a reader must know (6): an older reader refuses the branch rather
    than show its own events without the shared history."""


class SubagentEnd(_Payload, frozen=True):
    """``subagent/end``: a subagent finished."""

    agent: str = ""
    """Subagent id."""
    session: str = ""
    """The child session id."""
    status: str = ""
    """How it ended (``completed``, ``failed``, ...)."""
    summary: str = ""
    """What it reported back."""
    steps: int = 0
    """Steps it ran."""
    error: str = ""
    """Failure text, when it failed."""
    job_id: str = ""
    """Background job id, for asynchronous subagents."""


class MessageStream(_Payload, frozen=True):
    """``message/start``, ``message/update``, ``message/end``: streaming progress (outbound)."""

    id: str = ""
    """Id of the message being streamed."""
    delta: str = ""
    """Text added since the previous update."""
    message: Message | None = None
    """The whole message, on ``message/end``."""


class PermissionRequest(_Payload, frozen=True):
    """``permission/request``: a tool call waits for a person's approval."""

    call_id: str = ""
    """The tool call waiting."""
    tool: str = ""
    """Tool name."""
    reason: str = ""
    """Why approval is needed."""


class PermissionResolved(_Payload, frozen=True):
    """``permission/resolved``: the approval was decided."""

    call_id: str = ""
    """The tool call concerned."""
    decision: str = ""
    """``allow``, ``deny`` or another runtime decision."""
    reason: str = ""
    """Why."""


PAYLOAD_TYPES: Final[Mapping[str, type[Any]]] = {
    TURN_START: TurnStart,
    TURN_END: TurnEnd,
    STEP_START: StepStart,
    STEP_END: StepEnd,
    USER_MESSAGE: Message,
    ASSISTANT_MESSAGE: Message,
    MESSAGE_START: MessageStream,
    MESSAGE_UPDATE: MessageStream,
    MESSAGE_END: MessageStream,
    TOOL_CALL: ToolCall,
    TOOL_RESULT: ToolResult,
    COMPACTION: Compaction,
    SKILL_LOAD: SkillLoad,
    RETRY_START: RetryStart,
    RETRY_END: RetryEnd,
    SUMMARIZATION_RETRY_START: SummarizationRetryStart,
    SUMMARIZATION_RETRY_END: SummarizationRetryEnd,
    OVERFLOW_RECOVERY: OverflowRecovery,
    TURN_CONTINUE: TurnContinue,
    USAGE: Usage,
    TODO_UPDATE: TodoUpdate,
    RUN_FINISH: RunFinish,
    SESSION_RECOVERY: SessionRecovery,
    SESSION_FORK: SessionFork,
    SESSION_MERGE: SessionMerge,
    SESSION_DISCARD: SessionDiscard,
    SESSION_LEASE: SessionLease,
    SESSION_DELIVERY: SessionDelivery,
    SESSION_ROLLBACK: SessionRollback,
    SESSION_REWIND: SessionRewind,
    SESSION_BRANCH: SessionBranch,
    SUBAGENT_START: SubagentStart,
    SUBAGENT_END: SubagentEnd,
    PERMISSION_REQUEST: PermissionRequest,
    PERMISSION_RESOLVED: PermissionResolved,
}
"""The payload struct of every known event type."""

EVENT_TYPES: Final = frozenset(PAYLOAD_TYPES)
"""Every event type string agentsession knows."""

CORE_NAMESPACES: Final = ("user/", "assistant/", "tool/", "turn/", "step/", "session/")
"""Type prefixes reserved for agentsession's own events: an event type in one of them must be
one of :data:`EVENT_TYPES` (a typo such as ``user/mesage`` is refused at append). Applications
record their own events under a namespace of their own (for example ``myapp/deploy``); those are
stored and read back unchanged and never take part in the derived history."""


def check_event_type(kind: str) -> str | None:
    """Why ``kind`` may not be appended (a typo in a core namespace), or None when it may."""
    if kind in EVENT_TYPES or not kind.startswith(CORE_NAMESPACES):
        return None
    import difflib

    close = difflib.get_close_matches(kind, sorted(EVENT_TYPES), n=1)
    hint = f". Did you mean {close[0]!r}?" if close else ""
    return (
        f"unknown event type {kind!r} in a namespace reserved for agentsession's own events "
        f"({', '.join(CORE_NAMESPACES)}); application events go in a namespace of their own "
        f"(for example 'myapp/...'){hint}"
    )


T = TypeVar("T")
_NULL = msgspec.Raw(b"null")


def compaction_of(event: Event) -> Compaction | None:
    """The payload of a ``session/compaction`` event, or None when it is not one or does not
    decode as one. The single place that decides what a marker is."""
    if event.type != COMPACTION:
        return None
    try:
        return decode(event.data, Compaction)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _to_raw(payload: Any) -> msgspec.Raw:
    if payload is None:
        return _NULL
    if isinstance(payload, msgspec.Raw):
        return payload
    return msgspec.Raw(encode(payload))


# ---------------------------------------------------------------------------------------------
# Event ids.

MAX_EVENT_ID_CHARS: Final = 128
"""Longest event id an append accepts (ids are compared as strings, byte for byte)."""

_id_counter = itertools.count()
_id_bits = 0  # the constant bits of this process's ids: version, variant, 42 random bits


def _reseed_event_ids() -> None:
    """New random bits and a new counter: at import, and in a forked child, so that parent
    and child never make the same id."""
    global _id_counter, _id_bits
    _id_counter = itertools.count()
    node = int.from_bytes(os.urandom(6), "big") >> 6  # 42 bits
    _id_bits = (0x7 << 76) | (0b10 << 62) | node


_reseed_event_ids()
os.register_at_fork(after_in_child=_reseed_event_ids)
_time_ns = _time.time_ns

_ID_CONSTANT_MASK: Final = (0xF << 76) | (0b11 << 62) | ((1 << 42) - 1)


def made_here_since(event_id: str, ms: int) -> bool:
    """Whether ``event_id`` was made by :func:`new_event_id` in this process at Unix
    millisecond ``ms`` or later (its random bits are this process's, its time is not before
    ``ms``). No stored event can hold such an id unless it was appended after ``ms``: the
    pipeline uses this to skip looking up fresh ids in older parts of a log."""
    if len(event_id) != 32:
        return False
    try:
        value = int(event_id, 16)
    except ValueError:
        return False
    return (value & _ID_CONSTANT_MASK) == _id_bits and (value >> 80) >= ms


def new_event_id() -> str:
    """A new event id: 32 lowercase hex digits laid out as a UUIDv7 (RFC 9562): 48 bits of
    Unix time in milliseconds, the version, the top 12 bits of a 32-bit counter of this
    process, the variant, the counter's low 20 bits, then 42 random bits drawn once per
    process (and again in a forked child). Ids made later sort after earlier ones of the same
    process (until its counter wraps, after 2**32 ids), and roughly by time across processes;
    two processes share an id only if they drew the same 42 random bits and made the same
    count in the same millisecond."""
    n = next(_id_counter) & 0xFFFF_FFFF
    value = ((_time_ns() // 1_000_000) & 0xFFFF_FFFF_FFFF) << 80
    value |= _id_bits | ((n >> 20) << 64) | ((n & 0xFFFFF) << 42)
    return value.to_bytes(16, "big").hex()


# ---------------------------------------------------------------------------------------------
# The event.


class Event(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """One record of a session's append-only log.

    Build one with :meth:`Event.new`; the store fills ``seq`` and, when it is unset, ``time``.
    """

    # gc=False: events never take part in reference cycles, and a session keeps many of them
    # in memory, so leaving them out of the cycle collector saves its scans.

    seq: int = 0
    """Position in the session: 1, 2, 3 ... unique and never reused. Assigned on append."""
    type: str
    """Event type, for example ``user/message`` (see the constants in this module)."""
    agent: str = ""
    """Id of the agent that produced or owns the event; may be empty."""
    user: str = ""
    """End-user id, set on user messages."""
    time: _dt.datetime | None = None
    """When the event was appended (UTC); stamped on append when unset."""
    data: msgspec.Raw = _NULL
    """The payload as encoded JSON; see :meth:`payload`."""
    meta: dict[str, Any] = {}
    """Small annotations: ``logical_chars``, platform metadata."""
    id: str = ""
    """The event's id (since revision 4): :meth:`new` makes one (:func:`new_event_id`), an append
    gives one to an event that has none. Appending an event whose id the session already
    holds stores nothing and returns the stored event's seq, so a retried append is never
    stored twice (see ``docs/reliability.md`` for how far back each backend looks). Events
    written before revision 4 read back with ``""``."""

    @classmethod
    def new(
        cls,
        type: str,
        payload: Any = None,
        *,
        agent: str = "",
        user: str = "",
        meta: Mapping[str, Any] | None = None,
        time: _dt.datetime | None = None,
        id: str | None = None,
    ) -> Event:
        """An event of ``type`` carrying ``payload`` (a payload struct, plain JSON data or None).

        ``id`` defaults to a new :func:`new_event_id`; pass one of your own (at most
        :data:`MAX_EVENT_ID_CHARS` characters, such as a queue message's id) to make appends of
        the same logical event idempotent across processes."""
        return cls(
            type=type,
            agent=agent,
            user=user,
            time=time,
            data=_to_raw(payload),
            meta=dict(meta) if meta else {},
            id=new_event_id() if id is None else id,
        )

    def payload(self) -> Any:
        """The decoded payload: its typed struct for a known type, plain JSON data otherwise."""
        return decode(self.data, PAYLOAD_TYPES.get(self.type))

    def decode(self, type_: builtins.type[T]) -> T:
        """The payload decoded as ``type_``."""
        return decode(self.data, type_)

    @property
    def raw(self) -> bytes:
        """The payload's JSON bytes, exactly as stored."""
        return bytes(self.data)

    def __repr__(self) -> str:
        data = bytes(self.data)
        shown = (data if len(data) <= 120 else data[:117] + b"...").decode("utf-8", "replace")
        extra = "".join(
            f", {name}={value!r}"
            for name, value in (("agent", self.agent), ("user", self.user), ("meta", self.meta))
            if value
        )
        return f"Event(seq={self.seq}, type={self.type!r}{extra}, time={self.time}, data={shown})"


# ---------------------------------------------------------------------------------------------
# Whole events as JSON (the JSONL line format and the CLI's ``--json`` output).

_event_decoder = msgspec.json.Decoder(Event)


def encode_event(event: Event) -> bytes:
    """One event as compact JSON (no trailing newline). See ``docs/format.md``."""
    try:
        return encoder.encode(event)
    except UnicodeEncodeError:
        pass
    fields = msgspec.to_builtins(msgspec.structs.replace(event, data=_NULL, meta={}))
    out = _json.dumps(fields, ensure_ascii=True, separators=(",", ":"))[:-1]
    if event.data is not _NULL and bytes(event.data) != b"null":
        out += ',"data":' + bytes(event.data).decode("utf-8", "surrogatepass")
    if event.meta:
        out += ',"meta":' + fallback_dumps(event.meta).decode("ascii")
    return (out + "}").encode("utf-8", "surrogatepass")


def decode_event(buf: bytes | memoryview) -> Event:
    """Parse one event line; raises :class:`msgspec.DecodeError` when it is not an event."""
    try:
        return _event_decoder.decode(buf)
    except msgspec.DecodeError:
        pass
    except RecursionError:
        raise msgspec.DecodeError("JSON is nested too deeply") from None
    # msgspec refuses JSON escapes of lone surrogates; the standard library reads them.
    try:
        obj = _json.loads(bytes(buf))
    except (ValueError, RecursionError):
        raise msgspec.DecodeError("JSON is malformed or nested too deeply") from None
    if not isinstance(obj, dict):
        raise msgspec.DecodeError("an event must be a JSON object") from None
    try:
        if "data" in obj:
            obj["data"] = msgspec.Raw(fallback_dumps(obj["data"]))
        return msgspec.convert(obj, Event)
    except (msgspec.ValidationError, UnicodeError, RecursionError, TypeError) as exc:
        # A lone surrogate where a key, a time or a seq belongs, say.
        raise msgspec.DecodeError(f"not a valid event: {exc}") from None


def decode_event_lines(buf: bytes | memoryview) -> list[Event]:
    """Parse newline-delimited events (fast path); raises :class:`msgspec.DecodeError` on any bad
    line, leaving it to the caller to locate it."""
    try:
        return _event_decoder.decode_lines(buf)
    except RecursionError:
        raise msgspec.DecodeError("JSON is nested too deeply") from None
