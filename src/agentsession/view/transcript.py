"""A session's events as neutral transcript rows, for any renderer (terminal, web page, JSON).

:func:`transcript_rows` turns a log into one :class:`Row` per event: plain values only (no
markup, no terminal escapes), grouped by turn and step through each row's ``depth``. A renderer
only decides how rows look; what an event *means* for a person reading the session is decided
here once. Rows are frozen :mod:`msgspec` structs tagged by ``kind``, so
``msgspec.json.encode(rows)`` gives each as an object with a ``"kind"`` key.

A log with ``session/rewind`` markers (``session.rewind``, ``retry``, ``edit``) keeps every
event: each marker becomes a :class:`RewindRow`, and every row whose event the derived history
no longer holds (:func:`agentsession.derive.live_events`) has ``rewound`` set, so a renderer
can grey it out without hiding it.

A branch (``session.branch``) reads back as its origin's events up to the point it left them,
then its ``session/branch`` marker, then its own events: the marker becomes a
:class:`BranchRow`, which sits exactly where the branch's history leaves its origin's (the
rows before it are the origin's events, shared).

Long texts (message text, tool-call arguments, tool results, summaries, unknown payloads) are
cut to :data:`PREVIEW_CHARS` characters ending in ``…`` and a message's thinking is folded to a
short marker, unless ``full=True``. Texts keep their newlines: putting a row on one line is the
renderer's business.
"""

from __future__ import annotations

import bisect
import datetime as _dt
from collections.abc import Sequence
from typing import Any, ClassVar, Final, TypeAlias

import msgspec

from .. import events as ev
from ..codec import encode
from ..derive import live_events
from ..errors import NewerFormat
from ..events import Event
from ..messages import Message, RefusalPart, ThinkingPart, ToolCall, ToolResult

__all__ = [
    "INTEGRATION_NAMESPACES",
    "PREVIEW_CHARS",
    "AnyRow",
    "AssistantMessageRow",
    "BranchRow",
    "CompactionRow",
    "DiscardRow",
    "EventRow",
    "ForkRow",
    "MergeRow",
    "RecoveryRow",
    "RewindRow",
    "Row",
    "RunFinishRow",
    "SkillLoadRow",
    "StepEndRow",
    "StepStartRow",
    "SubagentEndRow",
    "SubagentStartRow",
    "TodoItemView",
    "TodoRow",
    "ToolCallRow",
    "ToolCallView",
    "ToolResultRow",
    "TurnEndRow",
    "TurnStartRow",
    "UsageRow",
    "UserMessageRow",
    "speaker",
    "transcript_rows",
]

PREVIEW_CHARS: Final = 160
"""Longest text a row carries unless ``full``: longer ones keep their first
``PREVIEW_CHARS - 1`` characters and end in ``…``."""

INTEGRATION_NAMESPACES: Final = ("adk/", "langchain/", "openai_agents/", "pydantic_ai/")
"""Event-type prefixes of the framework integrations' own records (``adk/event``,
``adk/session``, ``langchain/message``, ``openai_agents/item``, ``openai_agents/pop``,
``openai_agents/clear``, ``pydantic_ai/message``): the framework's objects as it hands them
over, kept so that it gets them back exactly. The integrations also write the same
conversation as typed events (``user/message``, ``assistant/message``, ``tool/result``,
``usage``), so a reader who has those rows sees each message twice;
:attr:`EventRow.integration` marks these rows so that a renderer can hide them when the
session has typed rows."""


# ---------------------------------------------------------------------------------------------
# The rows.


class Row(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    """What every transcript row carries. Subclasses add what their kind needs."""

    kind: ClassVar[str] = ""
    """What the row shows (``turn_start``, ``tool_result``, ...); also its JSON tag."""

    seq: int
    """Seq of the event the row shows."""
    depth: int
    """Nesting: 0 outside a turn, 1 inside a turn, 2 inside a step of a turn (a step outside
    any turn nests at 1). Turn markers sit at the depth around the turn, step markers at the
    depth around the step."""
    agent: str = ""
    """The event's agent (may be empty)."""
    time: _dt.datetime | None = None
    """When the event was appended (UTC), when known."""
    rewound: bool = False
    """True when a later ``session/rewind`` took the event out of the derived history (it
    is not among :func:`agentsession.derive.live_events`; for a :class:`RewindRow`, when a
    later rewind went back past the marker, undoing it): the model no longer sees it, but
    the log keeps it, so renderers show it muted rather than hide it."""


class TurnStartRow(Row, frozen=True, kw_only=True, tag="turn_start"):
    """``turn/start``: a turn begins."""

    kind: ClassVar[str] = "turn_start"
    user: str = ""
    """The end user the turn was for, when the event names one."""


class TurnEndRow(Row, frozen=True, kw_only=True, tag="turn_end"):
    """``turn/end``: a turn is over."""

    kind: ClassVar[str] = "turn_end"
    steps: int = 0
    """Steps the turn completed."""
    input_tokens: int = 0
    """Input tokens of the ``usage`` events since the turn began."""
    output_tokens: int = 0
    """Output tokens of the ``usage`` events since the turn began."""
    error_type: str = ""
    """Exception class that ended the turn ("" when it ended normally)."""
    error_message: str = ""
    """That exception's message."""


class StepStartRow(Row, frozen=True, kw_only=True, tag="step_start"):
    """``step/start``: a step (one model call and its tools) begins."""

    kind: ClassVar[str] = "step_start"
    step: int = 0
    """Step number within the turn, from 0."""


class StepEndRow(Row, frozen=True, kw_only=True, tag="step_end"):
    """``step/end``: the step is over."""

    kind: ClassVar[str] = "step_end"
    step: int = 0
    """Step number within the turn, from 0."""


class UserMessageRow(Row, frozen=True, kw_only=True, tag="user_message"):
    """``user/message``: what the user said."""

    kind: ClassVar[str] = "user_message"
    user: str = ""
    """The end user's id, when known."""
    text: str = ""
    """The message's text (a preview unless ``full``)."""
    author: str = ""
    """Who wrote it when the message names someone (its ``author``, else its ``name``): for
    example the subagent whose messages a merge wrote into the parent. "" when the message
    names no one."""


class ToolCallView(msgspec.Struct, frozen=True, kw_only=True):
    """One tool call of an assistant message."""

    id: str
    """The call id that its result names."""
    name: str
    """Tool name."""
    arguments: str = "{}"
    """The arguments as compact JSON (a preview unless ``full``)."""


class AssistantMessageRow(Row, frozen=True, kw_only=True, tag="assistant_message"):
    """``assistant/message``: what the model answered."""

    kind: ClassVar[str] = "assistant_message"
    text: str = ""
    """The message's text (a preview unless ``full``)."""
    tool_calls: list[ToolCallView] = []
    """The calls it made, in order."""
    thinking: str = ""
    """The thinking text when ``full``; otherwise a short marker such as
    ``(thinking: 1234 chars)``; "" when the message has no thinking."""
    thinking_chars: int = 0
    """Length of the whole thinking text (0 when none)."""
    author: str = ""
    """Who wrote it when the message names someone (its ``author``, else its ``name``): for
    example the subagent whose summary a merge wrote into the parent, whose event names no
    agent. "" when the message names no one. Renderers label the row with
    :func:`speaker`."""


class ToolCallRow(Row, frozen=True, kw_only=True, tag="tool_call"):
    """``tool/call``: a tool started running."""

    kind: ClassVar[str] = "tool_call"
    name: str = ""
    """Tool name."""
    call_id: str = ""
    """The call id."""


class ToolResultRow(Row, frozen=True, kw_only=True, tag="tool_result"):
    """``tool/result``: what a tool returned."""

    kind: ClassVar[str] = "tool_result"
    name: str = ""
    """Tool name."""
    call_id: str = ""
    """The call this answers."""
    audit: dict[str, str] = {}
    """Audit annotations, such as ``{"decision": "interrupted"}``."""
    is_error: bool = False
    """Whether the tool failed."""
    interrupted: bool = False
    """Whether this is the stand-in a crash repair wrote (audit decision ``interrupted``)."""
    content: str = ""
    """The result text (a preview unless ``full``)."""
    content_chars: int = 0
    """Length of the whole result text."""


class UsageRow(Row, frozen=True, kw_only=True, tag="usage"):
    """``usage``: tokens one model call used."""

    kind: ClassVar[str] = "usage"
    input_tokens: int = 0
    """Prompt tokens."""
    output_tokens: int = 0
    """Completion tokens."""
    cache_read_tokens: int = 0
    """Prompt tokens served from the provider's cache."""
    cache_write_tokens: int = 0
    """Prompt tokens written to the provider's cache."""


class TodoItemView(msgspec.Struct, frozen=True, kw_only=True):
    """One item of a todo list."""

    id: str
    """Stable item id."""
    title: str = ""
    """What is to be done."""
    status: str = ""
    """``pending``, ``in_progress``, ``done`` or another runtime status."""
    done: bool = False
    """Whether the status is ``done``."""


class TodoRow(Row, frozen=True, kw_only=True, tag="todo_update"):
    """``todo/update``: the agent's todo list as it is now."""

    kind: ClassVar[str] = "todo_update"
    items: list[TodoItemView] = []
    """Every item, in order."""


class CompactionRow(Row, frozen=True, kw_only=True, tag="compaction"):
    """``session/compaction``: older history was replaced (nothing stored is deleted)."""

    kind: ClassVar[str] = "compaction"
    compaction_kind: str = "summary"
    """``summary`` or ``prune``."""
    first_kept_seq: int = 0
    """First seq kept verbatim (for the legacy form, the seq after which events replay)."""
    kept_messages: int = 0
    """Messages the marker carries verbatim."""
    tokens_before: int = 0
    """Context size before compaction, when known."""
    summary: str = ""
    """The summary's text (a preview unless ``full``); "" for a prune without summary."""


class RecoveryRow(Row, frozen=True, kw_only=True, tag="recovery"):
    """``session/recovery``: a turn a crash cut off was closed by a repair."""

    kind: ClassVar[str] = "recovery"
    turn_start_seq: int = 0
    """Seq of the repaired turn's ``turn/start``."""
    steps: int = 0
    """Steps written in the repair's ``turn/end``."""
    orphan_results: int = 0
    """Unanswered calls answered as interrupted."""
    closed_step: int = -1
    """The step the repair closed, or -1 when none was open."""
    reason: str = ""
    """Why the repair was needed."""


class RewindRow(Row, frozen=True, kw_only=True, tag="rewind"):
    """``session/rewind``: the history went back to the one that stood right after seq
    ``to_seq``; the events between that seq and this marker stay in the log, marked
    ``rewound``."""

    kind: ClassVar[str] = "rewind"
    rewind_kind: str = "rewind"
    """What asked for it: ``rewind``, ``retry``, ``edit``, ``openai.pop`` or ``adk.rewind``
    (:data:`agentsession.rewind.REWIND_KINDS`)."""
    to_seq: int = 0
    """The seq the history went back to: it is as it stood right after that event."""
    reason: str = ""
    """Why, as the caller put it (a preview unless ``full``); "" when none was given."""


class BranchRow(Row, frozen=True, kw_only=True, tag="branch"):
    """``session/branch``: this session is a branch (``session.branch``); its history is
    session ``origin``'s as it stood right after seq ``origin_seq`` (the rows before this
    one, the origin's events), continued by its own events (the rows after it). The row
    sits at seq ``origin_seq + 1``: where the branch leaves its origin."""

    kind: ClassVar[str] = "branch"
    origin: str = ""
    """The id of the session branched from."""
    origin_seq: int = 0
    """The origin's seq the branch shares its history up to."""


class SubagentStartRow(Row, frozen=True, kw_only=True, tag="subagent_start"):
    """``subagent/start``: work was delegated to a subagent."""

    kind: ClassVar[str] = "subagent_start"
    subagent: str = ""
    """The subagent's id."""
    child_session: str = ""
    """The subagent's session id."""
    task: str = ""
    """What it was asked to do (a preview unless ``full``)."""
    background: bool = False
    """True when the parent did not wait for it."""
    job_id: str = ""
    """Background job id, for asynchronous subagents."""
    fork_id: str = ""
    """The fork's id when the child was forked with ``session.fork`` (the event's meta
    ``fork_id``); "" otherwise."""


class SubagentEndRow(Row, frozen=True, kw_only=True, tag="subagent_end"):
    """``subagent/end``: a subagent finished."""

    kind: ClassVar[str] = "subagent_end"
    subagent: str = ""
    """The subagent's id."""
    child_session: str = ""
    """The subagent's session id."""
    status: str = ""
    """How it ended: ``completed``, ``failed``, ...; for a forked child, ``merged`` (its work
    was written here) or ``discarded`` (only this note was)."""
    summary: str = ""
    """What it reported back (a preview unless ``full``); for a discarded child, why it was
    discarded."""
    steps: int = 0
    """Steps it ran."""
    error: str = ""
    """Failure text, when it failed."""
    job_id: str = ""
    """Background job id, for asynchronous subagents."""
    fork_id: str = ""
    """The fork this ends (the event's meta ``fork_id``), for a forked child; "" otherwise."""
    merge_mode: str = ""
    """For a merge: ``summary`` (one summary message) or ``messages`` (the child's own
    messages) was written here before this event; "" otherwise."""
    merged_messages: int = 0
    """For a merge: how many messages it wrote here."""


class ForkRow(Row, frozen=True, kw_only=True, tag="fork"):
    """``session/fork``: this session is a child, forked from a parent session (its first
    event)."""

    kind: ClassVar[str] = "fork"
    parent: str = ""
    """The parent session id."""
    parent_seq: int = 0
    """The parent's latest seq when the child was forked."""
    fork_id: str = ""
    """The fork's id (the parent's ``subagent/start`` and ``subagent/end`` carry it)."""
    subagent: str = ""
    """The subagent working in the child."""
    task: str = ""
    """What it was asked to do (a preview unless ``full``)."""
    inherited_messages: int = 0
    """How many of the parent's messages the child inherited."""


class MergeRow(Row, frozen=True, kw_only=True, tag="merge"):
    """``session/merge``: this child's work was written into its parent."""

    kind: ClassVar[str] = "merge"
    parent: str = ""
    """The parent session id."""
    parent_seq: int = 0
    """Seq of the parent's ``subagent/end`` that the merge wrote."""
    fork_id: str = ""
    """The fork this merge completes."""
    mode: str = ""
    """``summary`` (one summary message) or ``messages`` (the child's own messages)."""
    messages: int = 0
    """How many messages reached the parent."""


class DiscardRow(Row, frozen=True, kw_only=True, tag="discard"):
    """``session/discard``: this child was discarded; its parent got only a note."""

    kind: ClassVar[str] = "discard"
    parent: str = ""
    """The parent session id."""
    parent_seq: int = 0
    """Seq of the note (``subagent/end``, status ``discarded``) in the parent."""
    fork_id: str = ""
    """The fork this ends."""
    reason: str = ""
    """Why it was discarded (a preview unless ``full``)."""


class SkillLoadRow(Row, frozen=True, kw_only=True, tag="skill_load"):
    """``skill/load``: a skill's instructions were loaded."""

    kind: ClassVar[str] = "skill_load"
    name: str = ""
    """Skill name."""
    description: str = ""
    """One-line description."""
    body: str = ""
    """The instructions (a preview unless ``full``)."""


class RunFinishRow(Row, frozen=True, kw_only=True, tag="run_finish"):
    """``run/finish``: the agent declared the run finished."""

    kind: ClassVar[str] = "run_finish"
    status: str = ""
    """``completed`` or ``blocked``."""
    summary: str = ""
    """What was done, or why it is blocked (a preview unless ``full``)."""


class EventRow(Row, frozen=True, kw_only=True, tag="event"):
    """Any other event (retries, overflow recovery, streaming, permissions, unknown types), and
    any event whose payload does not decode as its type's."""

    kind: ClassVar[str] = "event"
    type: str = ""
    """The event type, as stored."""
    data: str = ""
    """The payload's JSON text (a preview unless ``full``)."""
    integration: bool = False
    """True when the type is in one of :data:`INTEGRATION_NAMESPACES`: a framework
    integration's own record of what it also wrote as typed events."""


AnyRow: TypeAlias = (
    TurnStartRow
    | TurnEndRow
    | StepStartRow
    | StepEndRow
    | UserMessageRow
    | AssistantMessageRow
    | ToolCallRow
    | ToolResultRow
    | UsageRow
    | TodoRow
    | CompactionRow
    | RecoveryRow
    | RewindRow
    | BranchRow
    | SubagentStartRow
    | SubagentEndRow
    | ForkRow
    | MergeRow
    | DiscardRow
    | SkillLoadRow
    | RunFinishRow
    | EventRow
)
"""Every row kind :func:`transcript_rows` produces, for decoding rows from JSON:
``msgspec.json.decode(data, type=list[AnyRow])``."""


# ---------------------------------------------------------------------------------------------
# Building them.


def speaker(row: Row) -> str:
    """Whom a renderer names beside a row: a message's ``author`` when it names one (as
    ``agentsession messages`` does); otherwise the event's agent, except for a user message
    (the agent that recorded a user's words did not say them); "" for no one. The terminal
    and the web page label rows with it, so that they agree."""
    if isinstance(row, UserMessageRow):
        return row.author
    if isinstance(row, AssistantMessageRow):
        return row.author or row.agent
    return row.agent


def _preview(text: str, full: bool) -> str:
    if full or len(text) <= PREVIEW_CHARS:
        return text
    return text[: PREVIEW_CHARS - 1] + "…"


def _call_view(call: ToolCall, full: bool) -> ToolCallView:
    arguments = encode(call.arguments).decode("utf-8", "replace")
    return ToolCallView(id=call.id, name=call.name, arguments=_preview(arguments, full))


def _thinking(message: Message, full: bool) -> tuple[str, int]:
    text = "\n".join(p.text for p in message.parts if type(p) is ThinkingPart)
    if not text:
        return "", 0
    return (text if full else f"(thinking: {len(text)} chars)"), len(text)


def _meta_text(event: Event, key: str) -> str:
    """A text the event's meta holds under ``key`` ("" when absent or not a string)."""
    value = event.meta.get(key)
    return value if isinstance(value, str) else ""


def _meta_count(event: Event, key: str) -> int:
    """A count the event's meta holds under ``key`` (0 when absent or not a count)."""
    value = event.meta.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


class _Nesting:
    """Where the log is: inside a turn, inside a step, and the turn's token totals."""

    __slots__ = ("input_tokens", "output_tokens", "step", "turn")

    def __init__(self) -> None:
        self.turn = False
        self.step = False
        self.input_tokens = 0
        self.output_tokens = 0

    @property
    def depth(self) -> int:
        return int(self.turn) + int(self.step)


def _row(event: Event, nest: _Nesting, full: bool) -> Row:
    """The row of one event, updating ``nest``; raises msgspec errors for a bad payload."""
    base: dict[str, Any] = {"seq": event.seq, "agent": event.agent, "time": event.time}
    kind = event.type
    if kind == ev.TURN_START:
        # A turn/start carries nothing, so its payload is not even looked at.
        nest.turn, nest.step = True, False
        nest.input_tokens = nest.output_tokens = 0
        return TurnStartRow(depth=0, user=event.user, **base)
    if kind == ev.TURN_END:
        end = event.decode(ev.TurnEnd)
        nest.turn, nest.step = False, False
        error = end.error
        return TurnEndRow(
            depth=0,
            steps=end.steps,
            input_tokens=nest.input_tokens,
            output_tokens=nest.output_tokens,
            error_type=error.type if error is not None else "",
            error_message=error.message if error is not None else "",
            **base,
        )
    if kind == ev.STEP_START:
        start = event.decode(ev.StepStart)
        row: Row = StepStartRow(depth=nest.depth, step=start.step, **base)
        nest.step = True
        return row
    if kind == ev.STEP_END:
        step_end = event.decode(ev.StepEnd)
        nest.step = False
        return StepEndRow(depth=nest.depth, step=step_end.step, **base)
    depth = nest.depth
    if kind == ev.USER_MESSAGE:
        message = event.decode(Message)
        return UserMessageRow(
            depth=depth,
            user=event.user,
            text=_preview(message.text, full),
            author=message.author or message.name or "",
            **base,
        )
    if kind == ev.ASSISTANT_MESSAGE:
        message = event.decode(Message)
        thinking, thinking_chars = _thinking(message, full)
        refusal = "".join(p.text for p in message.parts if type(p) is RefusalPart)
        text = message.text + (f"[refused] {refusal}" if refusal else "")
        return AssistantMessageRow(
            depth=depth,
            text=_preview(text, full),
            tool_calls=[_call_view(call, full) for call in message.tool_calls],
            thinking=thinking,
            thinking_chars=thinking_chars,
            author=message.author or message.name or "",
            **base,
        )
    if kind == ev.TOOL_CALL:
        call = event.decode(ToolCall)
        return ToolCallRow(depth=depth, name=call.name, call_id=call.id, **base)
    if kind == ev.TOOL_RESULT:
        result = event.decode(ToolResult)
        return ToolResultRow(
            depth=depth,
            name=result.name,
            call_id=result.call_id,
            audit=dict(result.audit),
            is_error=result.is_error,
            interrupted=result.audit.get("decision") == "interrupted",
            content=_preview(result.content, full),
            content_chars=len(result.content),
            **base,
        )
    if kind == ev.USAGE:
        usage = event.decode(ev.Usage)
        nest.input_tokens += usage.input_tokens
        nest.output_tokens += usage.output_tokens
        return UsageRow(
            depth=depth,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            **base,
        )
    if kind == ev.TODO_UPDATE:
        todos = event.decode(ev.TodoUpdate)
        items = [
            TodoItemView(id=t.id, title=t.title, status=t.status, done=t.done) for t in todos.items
        ]
        return TodoRow(depth=depth, items=items, **base)
    if kind == ev.COMPACTION:
        marker = event.decode(ev.Compaction)
        return CompactionRow(
            depth=depth,
            compaction_kind=marker.kind,
            first_kept_seq=marker.first_kept_seq or marker.before_seq,
            kept_messages=len(marker.retained_tail),
            tokens_before=marker.tokens_before,
            summary=_preview(marker.summary.text, full) if marker.summary else "",
            **base,
        )
    if kind == ev.SESSION_RECOVERY:
        record = event.decode(ev.SessionRecovery)
        return RecoveryRow(
            depth=depth,
            turn_start_seq=record.turn_start_seq,
            steps=record.steps,
            orphan_results=record.orphan_results,
            closed_step=record.closed_step,
            reason=record.reason,
            **base,
        )
    if kind == ev.SESSION_REWIND:
        back = event.decode(ev.SessionRewind)
        return RewindRow(
            depth=depth,
            rewind_kind=back.kind,
            to_seq=back.to_seq,
            reason=_preview(back.reason, full),
            **base,
        )
    if kind == ev.SESSION_BRANCH:
        point = event.decode(ev.SessionBranch)
        return BranchRow(depth=depth, origin=point.origin, origin_seq=point.origin_seq, **base)
    if kind == ev.SUBAGENT_START:
        sub = event.decode(ev.SubagentStart)
        return SubagentStartRow(
            depth=depth,
            subagent=sub.agent,
            child_session=sub.session,
            task=_preview(sub.task, full),
            background=sub.async_,
            job_id=sub.job_id,
            fork_id=_meta_text(event, "fork_id"),
            **base,
        )
    if kind == ev.SUBAGENT_END:
        done = event.decode(ev.SubagentEnd)
        return SubagentEndRow(
            depth=depth,
            subagent=done.agent,
            child_session=done.session,
            status=done.status,
            summary=_preview(done.summary, full),
            steps=done.steps,
            error=done.error,
            job_id=done.job_id,
            fork_id=_meta_text(event, "fork_id"),
            merge_mode=_meta_text(event, "mode"),
            merged_messages=_meta_count(event, "messages"),
            **base,
        )
    if kind == ev.SESSION_FORK:
        fork = event.decode(ev.SessionFork)
        return ForkRow(
            depth=depth,
            parent=fork.parent,
            parent_seq=fork.parent_seq,
            fork_id=fork.fork_id,
            subagent=fork.agent,
            task=_preview(fork.task, full),
            inherited_messages=len(fork.messages),
            **base,
        )
    if kind == ev.SESSION_MERGE:
        merge = event.decode(ev.SessionMerge)
        return MergeRow(
            depth=depth,
            parent=merge.parent,
            parent_seq=merge.parent_seq,
            fork_id=merge.fork_id,
            mode=merge.mode,
            messages=merge.messages,
            **base,
        )
    if kind == ev.SESSION_DISCARD:
        dropped = event.decode(ev.SessionDiscard)
        return DiscardRow(
            depth=depth,
            parent=dropped.parent,
            parent_seq=dropped.parent_seq,
            fork_id=dropped.fork_id,
            reason=_preview(dropped.reason, full),
            **base,
        )
    if kind == ev.SKILL_LOAD:
        skill = event.decode(ev.SkillLoad)
        return SkillLoadRow(
            depth=depth,
            name=skill.name,
            description=skill.description,
            body=_preview(skill.body, full),
            **base,
        )
    if kind == ev.RUN_FINISH:
        finish = event.decode(ev.RunFinish)
        return RunFinishRow(
            depth=depth, status=finish.status, summary=_preview(finish.summary, full), **base
        )
    return _event_row(event, depth, full)


def _event_row(event: Event, depth: int, full: bool) -> EventRow:
    return EventRow(
        seq=event.seq,
        depth=depth,
        agent=event.agent,
        time=event.time,
        type=event.type,
        data=_preview(event.raw.decode("utf-8", "replace"), full),
        integration=event.type.startswith(INTEGRATION_NAMESPACES),
    )


def _target(marker: Event) -> int | None:
    """The seq a rewind marker goes back to, by the rule of
    :func:`agentsession.derive.rewind_target` (None for a marker that does not decode or
    names no earlier seq), without its warning: ``live_events`` gave that one already."""
    try:
        to_seq = marker.decode(ev.SessionRewind).to_seq
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError):
        return None
    return to_seq if 0 <= to_seq < marker.seq else None


def _rewound_seqs(events: Sequence[Event]) -> frozenset[int]:
    """The seqs of ``events`` (in seq order) whose rows are marked ``rewound``: the events
    other than markers that :func:`~agentsession.derive.live_events` leaves out, and the
    markers that a later rewind undid. Empty for a log without markers, and for one whose
    markers a newer format revision wrote (whose meaning this version does not know)."""
    markers = [event for event in events if event.type == ev.SESSION_REWIND]
    if not markers:
        return frozenset()
    try:
        live = {event.seq for event in live_events(events)}
    except NewerFormat:
        return frozenset()
    targets = {event.seq: _target(event) for event in markers}
    # The history's path, walked back from the log's end: a marker in effect is passed through
    # and jumps to the event it went back to, skipping the markers in between (undone).
    seqs = [event.seq for event in events]
    first = seqs[0]
    in_effect: set[int] = set()
    index = len(events) - 1
    while index >= 0:
        seq = seqs[index]
        if seq not in targets:
            index -= 1
            continue
        in_effect.add(seq)
        target = targets[seq]
        if target is None:  # a marker that names no earlier seq changes nothing
            index -= 1
        else:
            index = bisect.bisect_right(seqs, target) - 1 if target >= first else -1
    return frozenset(
        event.seq
        for event in events
        if (event.seq not in in_effect if event.seq in targets else event.seq not in live)
    )


def transcript_rows(events: Sequence[Event], *, full: bool = False) -> list[Row]:
    """One row per event of ``events`` (a log in seq order), for a person reading the session.

    Turn and step markers set the nesting that every row's ``depth`` reports; a ``turn/end``
    row totals the ``usage`` rows since its turn began. Long texts are previews and thinking is
    folded unless ``full``. A ``session/branch`` marker is a :class:`BranchRow`. A
    ``session/rewind`` marker is a :class:`RewindRow`, and the rows
    of the events a rewind took out of the history (and of the markers a later rewind undid)
    have ``rewound`` set, as ``events`` tells it: for the tail of a log, as it stood at the
    tail's last event. Never raises for stored data: an event whose payload does not
    decode as its type's becomes an :class:`EventRow` carrying the raw JSON, and still nests
    by its type (a broken ``step/start`` opens a step, a broken ``turn/end`` closes its turn).
    """
    nest = _Nesting()
    rows: list[Row] = []
    for event in events:
        try:
            rows.append(_row(event, nest, full))
        except (msgspec.DecodeError, msgspec.ValidationError):
            # Structure comes from the type, so the nesting stays right around a bad payload.
            if event.type == ev.TURN_END:
                nest.turn = nest.step = False
            elif event.type == ev.STEP_END:
                nest.step = False
            rows.append(_event_row(event, nest.depth, full))
            if event.type == ev.STEP_START:
                nest.step = True
    rewound = _rewound_seqs(events)
    if rewound:
        rows = [
            msgspec.structs.replace(row, rewound=True) if row.seq in rewound else row
            for row in rows
        ]
    return rows
