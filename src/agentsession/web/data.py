"""What the viewer's JSON endpoints return, computed from a store with the library's public
reading API; no HTTP here, so each piece is testable (and benchmarkable) on its own.

Costs, which decide what the pages may ask for:

* :func:`list_sessions` reads ``store.list()`` only (no event; see
  ``docs/architecture.md`` for what each backend reads for it), plus, with an agent filter,
  each candidate's session record (one meta entry), first event and last few events, in list
  order until the page is full.
* :func:`session_badges` reads one whole session (what it needs cannot be known otherwise):
  the sessions page asks for it only for the sessions it shows.
* :func:`rows_page` reads ``limit`` events, plus the events since the latest ``turn/start``
  before the page (the context that gives its rows their nesting and turn totals): a page
  costs the same at the start and the end of a session of any length.
* :func:`session_stats` (the charts) reads the whole session, after the first screen.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

import msgspec

from .. import children
from .. import events as ev
from ..branching import live_branches
from ..codec import encode, pretty
from ..contract import SessionInfo
from ..events import Event, encode_event
from ..messages import (
    FilePart,
    ImagePart,
    Message,
    RefusalPart,
    TextPart,
    ThinkingPart,
    ToolCall,
    ToolResult,
)
from ..recovery import scan_all_incomplete
from ..session import BaseSession
from ..store import BaseStore
from ..view import transcript_rows
from ..view.live import CONTEXT_CHUNK, context_before
from .markdown import render_markdown

__all__ = [
    "AGENT_TAIL",
    "CONTEXT_CHUNK",
    "BadgeCache",
    "Badges",
    "BranchLink",
    "ChildLink",
    "InterruptedCall",
    "ListedSession",
    "ListingCache",
    "SessionsPage",
    "SessionSummary",
    "Stats",
    "ToolDuration",
    "TurnTokens",
    "badges_of",
    "event_at",
    "event_mark",
    "list_sessions",
    "message_views",
    "raw_event",
    "row_dicts",
    "rows_page",
    "session_agents",
    "session_badges",
    "session_stats",
    "session_summary",
]

_MARKDOWN_KINDS: Final = frozenset({"user_message", "assistant_message"})


# ---------------------------------------------------------------------------------------------
# The sessions list.


class ListedSession(msgspec.Struct, frozen=True, kw_only=True):
    """One line of the sessions page: only what ``store.list()`` reports."""

    id: str
    """The session id."""
    events: int | None
    """Its number of events (its last seq); None when the backend cannot tell cheaply."""
    last_activity: _dt.datetime | None
    """Time of its last append (UTC), when known."""
    created_at: _dt.datetime | None
    """Time of its first event (UTC), when known."""
    size: int | None
    """Bytes in storage; None when the backend does not keep it per session."""


class SessionsPage(msgspec.Struct, frozen=True, kw_only=True):
    """A page of the sessions list, newest first."""

    sessions: list[ListedSession]
    """The sessions of the page."""
    offset: int
    """Index of the page's first session among the matching ones."""
    limit: int
    """The page size asked for."""
    total: int | None
    """How many sessions match; None with an agent filter (which stops reading records once
    the page is full)."""
    more: bool
    """Whether sessions match after this page."""
    store: str
    """The store's location."""
    encrypted: bool
    """Whether the store is encrypted (every session then is)."""


class ListingCache:
    """``store.list()`` kept for ``ttl`` seconds, so that paging through 100,000 sessions and
    typing a filter do not list the store again for every request (new sessions show up
    within ``ttl``). Thread-safe."""

    def __init__(
        self, store: BaseStore, ttl: float = 2.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.store = store
        """The store listed."""
        self.ttl = ttl
        """Seconds a listing is reused."""
        self._clock = clock
        self._lock = threading.Lock()
        self._at = -float("inf")
        self._infos: list[SessionInfo] = []
        self._agents: dict[str, frozenset[str]] = {}

    def get(self) -> list[SessionInfo]:
        """Every session, newest first, as listed at most ``ttl`` seconds ago."""
        with self._lock:
            now = self._clock()
            if now - self._at >= self.ttl:
                self._infos = self.store.list()
                self._at = now
                self._agents = {}
            return self._infos

    def forget(self) -> None:
        """Drop the listing kept: the next :meth:`get` lists the store (a session was created,
        appended to or deleted)."""
        with self._lock:
            self._at = -float("inf")

    def agents(
        self, info: SessionInfo, compute: Callable[[str], frozenset[str]]
    ) -> frozenset[str]:
        """The agents of a listed session, ``compute(session_id)``, kept as long as the
        listing is (``ttl``), so that typing an agent filter and paging do not read the same
        sessions again."""
        with self._lock:
            kept = self._agents.get(info.id)
        if kept is not None:
            return kept
        found = compute(info.id)
        with self._lock:
            self._agents[info.id] = found
        return found


AGENT_TAIL: Final = 8
"""Events at the end of a session whose agents the sessions list's agent filter matches."""


def _record_agent(store: BaseStore, session_id: str) -> str:
    """The agent id of the session's record ("" when it has none): one meta entry, no event.
    (``children._stored_record`` is the one reader of the record's meta entry that opens it in
    an encrypted store too; ``session.info()`` would read the session's first event.)"""
    return children._stored_record(store, session_id).agent_id


def session_agents(store: BaseStore, session_id: str) -> frozenset[str]:
    """The agents the sessions list's agent filter matches a session by: its record's agent
    id, and the agents of its first event and of its last :data:`AGENT_TAIL` events (the
    session's head and tail, which opening it reads anyway on JSONL; one indexed read each on
    SQLite and PostgreSQL), never its whole log. Empty names are left out; a session with no
    events has none."""
    found = {_record_agent(store, session_id)}
    session = store.open(session_id)
    latest = session.latest_seq
    if latest > 0:
        head = session.read(after=0, limit=1)
        tail = session.read(after=max(0, latest - AGENT_TAIL), limit=AGENT_TAIL)
        found.update(event.agent for event in (*head, *tail))
    found.discard("")
    return frozenset(found)


def list_sessions(
    store: BaseStore,
    *,
    query: str = "",
    agent: str = "",
    offset: int = 0,
    limit: int = 50,
    listing: ListingCache | None = None,
) -> SessionsPage:
    """A page of the store's sessions, newest first: those whose id contains ``query`` and,
    when ``agent`` is given, that name that agent in their record or in their first or last
    events (:func:`session_agents`).

    Reads ``store.list()`` (or ``listing``'s copy of it) and, without an agent filter, never
    an event; an agent filter reads the record, the first event and the last
    :data:`AGENT_TAIL` events of the candidates in list order, only until the page is full
    (``listing`` keeps each session's agents as long as it keeps the listing)."""
    infos = listing.get() if listing is not None else store.list()
    if query:
        infos = [info for info in infos if query in info.id]
    picked: list[SessionInfo]
    total: int | None
    if agent:
        picked, skipped = [], 0
        more = False
        for info in infos:
            if listing is not None:
                agents = listing.agents(info, lambda sid: session_agents(store, sid))
            else:
                agents = session_agents(store, info.id)
            if agent not in agents:
                continue
            if skipped < offset:
                skipped += 1
                continue
            if len(picked) == limit:
                more = True
                break
            picked.append(info)
        total = None
    else:
        picked = infos[offset : offset + limit]
        total = len(infos)
        more = offset + limit < total
    return SessionsPage(
        sessions=[
            ListedSession(
                id=info.id,
                events=info.last_seq if info.last_seq >= 0 else None,
                last_activity=info.updated_at,
                created_at=info.created_at,
                size=info.size or None,
            )
            for info in picked
        ],
        offset=offset,
        limit=limit,
        total=total,
        more=more,
        store=store.location,
        encrypted=store.encrypted,
    )


# ---------------------------------------------------------------------------------------------
# Badges: what needs a session's events.


class Badges(msgspec.Struct, frozen=True, kw_only=True):
    """What the sessions page shows of one session beyond its listing; computed from its
    events (see :func:`session_badges`)."""

    events: int
    """Number of events."""
    turns: int
    """Number of ``turn/start`` events."""
    incomplete: int
    """Turns a crash left open and no repair has closed yet."""
    recovered: int
    """Repairs recorded (``session/recovery`` events)."""
    compacted: int
    """Compaction markers."""
    parent: str
    """The parent session id, for a child session ("" otherwise)."""
    children: int
    """Child sessions forked from it (its children index)."""
    encrypted: bool
    """Whether its events are encrypted at rest."""


def badges_of(events: Sequence[Event]) -> dict[str, Any]:
    """The event-derived counts of :class:`Badges` for a whole log (``events`` in seq order):
    ``events``, ``turns``, ``incomplete``, ``recovered``, ``compacted`` and ``parent``."""
    turns = recovered = compacted = 0
    for event in events:
        kind = event.type
        if kind == ev.TURN_START:
            turns += 1
        elif kind == ev.SESSION_RECOVERY:
            recovered += 1
        elif kind == ev.COMPACTION:
            compacted += 1
    parent = ""
    if events and events[0].type == ev.SESSION_FORK:
        try:
            parent = events[0].decode(ev.SessionFork).parent
        except (msgspec.DecodeError, msgspec.ValidationError):
            parent = ""
    return {
        "events": len(events),
        "turns": turns,
        "incomplete": len(scan_all_incomplete(events)),
        "recovered": recovered,
        "compacted": compacted,
        "parent": parent,
    }


class BadgeCache:
    """The event-derived badges of one store's sessions, each valid while the session's
    latest seq is unchanged (at most ``size`` sessions; the oldest entry goes first).
    Thread-safe. Keep one per store: entries are keyed by session id alone."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._items: dict[str, tuple[int, dict[str, Any]]] = {}

    def get(self, session_id: str, latest: int) -> dict[str, Any] | None:
        """The counts of :func:`badges_of` kept for the session at ``latest``, or None."""
        with self._lock:
            item = self._items.get(session_id)
            return item[1] if item is not None and item[0] == latest else None

    def put(self, session_id: str, latest: int, value: dict[str, Any]) -> None:
        """Keep ``value`` for the session at ``latest``."""
        with self._lock:
            self._items.pop(session_id, None)
            if len(self._items) >= self._size:
                self._items.pop(next(iter(self._items)))
            self._items[session_id] = (latest, value)


def session_badges(
    store: BaseStore, session_id: str, cache: BadgeCache | None = None
) -> Badges:
    """The badges of one session: reads its whole log (unless ``cache``, which must be this
    store's, has it at its latest seq) and its children index. Raises
    :class:`~agentsession.errors.SessionNotFound` when it has no events."""
    session = store.open(session_id)
    latest = session.latest_seq
    counts = cache.get(session.id, latest) if cache is not None else None
    if counts is None:
        counts = badges_of(session.read())
        if cache is not None:
            cache.put(session.id, latest, counts)
    return Badges(
        **counts,
        children=len(store.children_of(session_id, include_discarded=True)),
        encrypted=store.encrypted,
    )


# ---------------------------------------------------------------------------------------------
# One session.


class ChildLink(msgspec.Struct, frozen=True, kw_only=True):
    """A child session, as its parent's children index lists it."""

    id: str
    """The child session id."""
    agent: str
    """The subagent working in it."""
    state: str
    """``active``, ``merged`` or ``discarded``."""
    fork_seq: int
    """The parent's seq it was forked at."""
    task: str
    """What it was asked to do."""


class BranchLink(msgspec.Struct, frozen=True, kw_only=True):
    """A session and a seq of it, for the branch switcher: a branch's origin, or one of a
    session's branches (:class:`agentsession.branching.BranchRef` as a JSON object)."""

    id: str
    """The session id."""
    seq: int
    """Where the branch's history leaves its origin's: the origin's seq it shares up to."""


class SessionSummary(msgspec.Struct, frozen=True, kw_only=True):
    """The header of the transcript page: cheap facts about one session (no full read)."""

    id: str
    """The session id."""
    latest_seq: int
    """Its highest seq (its number of events)."""
    latest_mark: str
    """The :func:`event_mark` of its latest event: the page compares it with the mark the
    live tail reports for its starting point, to tell whether the session was created again
    since."""
    location: str
    """Where it is stored."""
    encrypted: bool
    """Whether its events are encrypted at rest."""
    parent: str
    """The parent session id of a child session ("" otherwise)."""
    fork_point: int
    """The parent's seq it was forked at (0 when not a child)."""
    children: list[ChildLink]
    """Its child sessions, in fork order."""
    origin: BranchLink | None
    """For a branch (``session.branch``): the session it branched from and that session's
    seq its history shares up to; None for a session that is not a branch."""
    branches: list[BranchLink]
    """Its branches that exist, in the order they were made, each with the seq of this
    session where it leaves it."""
    agent_id: str
    """The agent its session record names ("" when none)."""
    model: str
    """The model its session record names ("" when none)."""
    created_at: _dt.datetime | None
    """Time of its first event."""
    updated_at: _dt.datetime | None
    """Time of its last append or record update."""


def session_summary(store: BaseStore, session_id: str) -> SessionSummary:
    """The header facts of a session: its latest seq, its record (first event and a meta
    entry), its parent and its children index, its origin (when it is a branch) and its
    branch index (one meta entry, and whether each branch listed exists). Raises
    :class:`~agentsession.errors.SessionNotFound` when it has no events."""
    session = store.open(session_id)
    record = session.info()
    latest = session.latest_seq
    origin = session.origin
    return SessionSummary(
        id=session.id,
        latest_seq=latest,
        latest_mark=event_mark(event_at(session, latest)),
        location=session.location,
        encrypted=store.encrypted,
        parent=record.parent,
        fork_point=record.fork_seq,
        children=[
            ChildLink(id=c.id, agent=c.agent, state=c.state, fork_seq=c.fork_seq, task=c.task)
            for c in store.children_of(session_id, include_discarded=True)
        ],
        origin=None if origin is None else BranchLink(id=origin.id, seq=origin.seq),
        branches=[
            BranchLink(id=ref.id, seq=ref.seq) for ref in live_branches(store, session.id)
        ],
        agent_id=record.agent_id,
        model=record.model,
        created_at=record.created_at,
        updated_at=record.updated_at,
    )


def row_dicts(rows: Sequence[msgspec.Struct]) -> list[dict[str, Any]]:
    """Rows as JSON-ready dicts (``kind`` tag included); a user or assistant message's row
    also gets ``html``, its text rendered by :func:`render_markdown`."""
    out: list[dict[str, Any]] = []
    for row in rows:
        item: dict[str, Any] = msgspec.to_builtins(row)
        if item.get("kind") in _MARKDOWN_KINDS and item.get("text"):
            item["html"] = render_markdown(item["text"])
        out.append(item)
    return out


def rows_page(session: BaseSession, after: int = 0, limit: int = 200) -> dict[str, Any]:
    """The transcript rows of the events after seq ``after``, at most ``limit``: the rows
    :func:`agentsession.view.transcript_rows` gives for those events within the whole log
    (``full=True``: texts whole; the page folds them), as :func:`row_dicts`.

    A row's ``rewound`` is as the log stood at the page's last event: a rewind in a later
    page may take out (or bring back) rows of this one, which the page marks again.

    Returns ``{"rows", "after", "next_after", "latest_seq", "done"}``: ask for the next page
    with ``after=next_after``; ``done`` when the page reached the latest seq."""
    events = session.read(after=after, limit=limit)
    latest = session.latest_seq
    if not events:
        return {"rows": [], "after": after, "next_after": after, "latest_seq": latest, "done": True}
    context = context_before(session, after)
    rows = transcript_rows([*context, *events], full=True)[len(context) :]
    last = events[-1].seq
    return {
        "rows": row_dicts(rows),
        "after": after,
        "next_after": last,
        "latest_seq": max(latest, last),
        "done": last >= latest,
    }


def event_mark(event: Event | None) -> str:
    """What tells one event at a seq from another at the same seq (of another life of the
    session, deleted and created again): ``"SEQ:HASH"``, the hash of its id (of its type and
    time for an event written before ids); ``"0"`` for no event. Short, and safe in a URL and
    an SSE ``id:`` line."""
    if event is None:
        return "0"
    what = event.id or f"{event.type} {event.time.isoformat() if event.time else ''}"
    return f"{event.seq}:{hashlib.blake2b(what.encode(), digest_size=8).hexdigest()}"


def event_at(session: BaseSession, seq: int) -> Event | None:
    """The event with ``seq`` (None for 0 or when the log has none)."""
    found = session.read(after=seq - 1, limit=1) if seq > 0 else []
    return found[0] if found and found[0].seq == seq else None


def raw_event(session: BaseSession, seq: int) -> bytes | None:
    """The stored JSON line of the event with ``seq`` (``docs/format.md``), pretty-printed;
    None when there is no such event."""
    found = event_at(session, seq)
    return None if found is None else pretty(encode_event(found))


# ---------------------------------------------------------------------------------------------
# What the model sees.


def _part_text(message: Message) -> tuple[str, str, list[str]]:
    """A message's text, thinking and attachment notes."""
    text: list[str] = []
    thinking: list[str] = []
    notes: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            text.append(part.text)
        elif isinstance(part, ThinkingPart):
            thinking.append(part.text)
        elif isinstance(part, RefusalPart):
            text.append(f"[refused] {part.text}")
        elif isinstance(part, (ImagePart, FilePart)):
            kind = "image" if isinstance(part, ImagePart) else "file"
            where = part.source or part.url or f"{len(part.data)} characters inline"
            notes.append(f"{kind} {part.mime} {where}".strip())
        else:
            notes.append(f"attachment {getattr(part, 'mime', '')}".strip())
    return "\n".join(text), "\n".join(thinking), notes


def message_views(messages: Sequence[Message], start: int = 0) -> list[dict[str, Any]]:
    """The messages of ``session.messages()`` for the page: index (counted from ``start``, the
    index of the first one in the history), role, author, text (and its Markdown ``html``),
    thinking, attachments, tool calls (arguments as JSON text) and tool results, in order."""
    out: list[dict[str, Any]] = []
    for index, message in enumerate(messages, start):
        text, thinking, notes = _part_text(message)
        out.append(
            {
                "index": index,
                "role": message.role,
                "author": message.author or message.name or "",
                "text": text,
                "html": render_markdown(text) if text else "",
                "thinking": thinking,
                "attachments": notes,
                "tool_calls": [
                    {
                        "id": call.id,
                        "name": call.name,
                        "arguments": encode(call.arguments).decode(),
                    }
                    for call in message.tool_calls
                ],
                "tool_results": [
                    {
                        "call_id": result.call_id,
                        "name": result.name,
                        "content": result.content,
                        "is_error": result.is_error,
                        "audit": dict(result.audit),
                    }
                    for result in message.tool_results
                ],
            }
        )
    return out


# ---------------------------------------------------------------------------------------------
# The charts.


class TurnTokens(msgspec.Struct, frozen=True, kw_only=True):
    """The tokens of one group of model calls (the sum of their ``usage`` events): a turn,
    or, in a log without turn markers, what followed one user message (see
    :attr:`Stats.grouped_by`)."""

    seq: int
    """Seq of the group's first event: its ``turn/start`` (its ``user/message`` when grouped
    by message, or its first ``usage`` event before any user message)."""
    input: int
    """Input tokens: the whole prompt, cache reads and writes included (as the converters
    count them)."""
    output: int
    """Output tokens."""
    cache_read: int
    """Input tokens read from the provider's cache (part of ``input``)."""
    cache_write: int
    """Input tokens written to the provider's cache (part of ``input``)."""
    uncached: int
    """Input tokens neither read from nor written to the cache: ``input - cache_read -
    cache_write``, at least 0. The chart stacks ``uncached``, ``cache_read``,
    ``cache_write`` and ``output``, so a bar is as tall as ``input + output``."""


class ToolDuration(msgspec.Struct, frozen=True, kw_only=True):
    """How long one tool call took."""

    seq: int
    """Seq of its result."""
    name: str
    """Tool name."""
    call_id: str
    """The call id."""
    ms: float
    """Milliseconds from its ``tool/call`` event (or, without one, the assistant message that
    made the call) to its ``tool/result``."""


class InterruptedCall(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call a crash cut off: its result is the stand-in a repair wrote (audit decision
    ``interrupted``), so the time to it is the time to the repair, not the call's."""

    seq: int
    """Seq of its stand-in result."""
    name: str
    """Tool name."""
    call_id: str
    """The call id."""


class Stats(msgspec.Struct, frozen=True, kw_only=True):
    """What the transcript page charts, and the agents for its "what the model sees" view."""

    turns: list[TurnTokens]
    """Tokens per group of model calls, in order (see :attr:`grouped_by`)."""
    grouped_by: str
    """``"turn"`` when the log has turn markers (a group per turn; ``usage`` outside any turn
    is not counted), ``"message"`` when it has none (sessions of the integrations, which
    record messages and usage without turns): a group per ``user/message``, holding the
    ``usage`` events after it."""
    usage: bool
    """Whether any ``usage`` event reported a token: when not, the page says "no usage"
    rather than drawing empty bars."""
    tools: list[ToolDuration]
    """Tool-call durations, where both ends have a time, in order; an interrupted call is not
    among them (see :attr:`interrupted`)."""
    interrupted: list[InterruptedCall]
    """Tool calls a crash cut off, in order: never timed."""
    agents: list[str]
    """Agents of the session's events, sorted."""


def _tokens(seq: int, sums: list[int]) -> TurnTokens:
    given, output, read, write = sums
    return TurnTokens(
        seq=seq,
        input=given,
        output=output,
        cache_read=read,
        cache_write=write,
        uncached=max(0, given - read - write),
    )


def session_stats(events: Sequence[Event]) -> Stats:
    """Tokens per turn (per user message in a log without turns), tool-call durations,
    interrupted calls and agents of a whole log (``events`` in seq order). A payload that does
    not decode is skipped."""
    by_turn: list[tuple[int, list[int]]] = []
    by_message: list[tuple[int, list[int]]] = []
    tools: list[ToolDuration] = []
    interrupted: list[InterruptedCall] = []
    agents: set[str] = set()
    current: list[int] | None = None
    message: list[int] | None = None
    reported = False
    started: dict[str, _dt.datetime] = {}
    asked: dict[str, _dt.datetime] = {}

    for event in events:
        if event.agent:
            agents.add(event.agent)
        kind = event.type
        try:
            if kind == ev.TURN_START:
                current = [0, 0, 0, 0]
                by_turn.append((event.seq, current))
            elif kind == ev.TURN_END:
                current = None
            elif kind == ev.USER_MESSAGE:
                message = [0, 0, 0, 0]
                by_message.append((event.seq, message))
            elif kind == ev.USAGE:
                usage = event.decode(ev.Usage)
                counts = (
                    usage.input_tokens,
                    usage.output_tokens,
                    usage.cache_read_tokens,
                    usage.cache_write_tokens,
                )
                reported = reported or any(counts)
                if message is None:
                    message = [0, 0, 0, 0]
                    by_message.append((event.seq, message))
                for sums in (current, message):
                    if sums is not None:
                        for index, count in enumerate(counts):
                            sums[index] += count
            elif kind == ev.ASSISTANT_MESSAGE and event.time is not None:
                for call in event.decode(Message).tool_calls:
                    asked[call.id] = event.time
            elif kind == ev.TOOL_CALL and event.time is not None:
                started[event.decode(ToolCall).id] = event.time
            elif kind == ev.TOOL_RESULT:
                result = event.decode(ToolResult)
                begin = started.pop(result.call_id, None) or asked.get(result.call_id)
                asked.pop(result.call_id, None)
                if result.audit.get("decision") == "interrupted":
                    interrupted.append(
                        InterruptedCall(seq=event.seq, name=result.name, call_id=result.call_id)
                    )
                elif begin is not None and event.time is not None:
                    ms = (event.time - begin).total_seconds() * 1000
                    tools.append(
                        ToolDuration(
                            seq=event.seq, name=result.name, call_id=result.call_id, ms=ms
                        )
                    )
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
    grouped_by = "turn" if by_turn else "message"
    groups = by_turn if by_turn else by_message
    return Stats(
        turns=[_tokens(seq, sums) for seq, sums in groups],
        grouped_by=grouped_by,
        usage=reported,
        tools=tools,
        interrupted=interrupted,
        agents=sorted(agents),
    )
