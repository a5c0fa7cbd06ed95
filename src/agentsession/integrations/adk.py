"""Google ADK's ``BaseSessionService`` over any agentsession store (the ``adk`` extra).

::

    from google.adk.runners import Runner
    from agentsession.integrations.adk import AgentSessionService

    service = AgentSessionService("sessions/")  # or "sqlite:///s.db", "postgresql://...", a store
    runner = Runner(agent=agent, app_name="helper", session_service=service)

:class:`AgentSessionService` implements ADK's session service (``create_session``,
``get_session`` with ``GetSessionConfig``, ``list_sessions``, ``delete_session``,
``append_event``, ``get_user_state``) with the signatures, return types and errors of ADK's own
services, on every backend (memory, JSONL, SQLite, PostgreSQL, encrypted or not). Its methods
are calls of :mod:`agentsession.aio`: inline on the event loop where that backend's placement
allows (an append on memory, or on JSONL at durability ``flush``), in the store's worker
threads otherwise.

**Ids.** ADK names a session by ``(app_name, user_id, session_id)``; its agentsession id is
``adk:<app>:<user>:<session>`` (:func:`session_key`), each part percent-encoded so that none
holds a ``:``. ``list_sessions`` lists the prefix ``adk:<app>:`` (and ``<user>:``) with
``Store.list``, which reads no events. Session ids are stripped of surrounding white space and a
missing one is generated, as ADK's in-memory service does.

**The log.** ``create_session`` writes one ``adk/session`` event (the session's JSON as ADK
writes it, without events: ids, initial session state, creation time) through
``Store.create``, so of two processes creating one id exactly one succeeds (the other gets
``AlreadyExistsError``). Every ADK event then becomes one ``adk/event`` whose payload is the
event's JSON exactly as ``Event.model_dump_json(exclude_none=True)`` wrote it (ADK's SQLite
service's form), read back with ``Event.model_validate_json``. Each is mirrored, in the same
atomic batch, by agentsession's typed events, so that ``session.messages()``, the CLI's
``show`` and ``messages`` see the conversation: text (and media) from the user becomes
``user/message``, a model's content ``assistant/message`` (text, thoughts and function calls as
tool calls, through :func:`agentsession.providers.gemini.from_gemini`) and its
``usage_metadata`` a ``usage`` event, every function response a ``tool/result``; each carries
the invocation id as ``meta["turn_id"]``. ADK marks no end of an invocation, so no
``turn/start``/``turn/end`` markers are written (crash recovery would take every finished
invocation for a cut-off turn); the derived history pairs calls and results by id, so
``messages()`` stays provider-valid (a call still waiting, a long-running tool's, has the
interrupted stand-in until its response arrives). ``mirror_messages=False`` writes the
``adk/event`` alone (and a rewind's marker, below).

**State.** ADK has four scopes, kept where each belongs:

* *session* keys (no prefix) are derived from the log: the initial state of ``adk/session``,
  then every ``adk/event``'s ``state_delta`` in log order. The delta is in the event's payload,
  so a session-state change is exactly as durable and atomic as its event. A snapshot of the
  folded state (meta namespace ``adk-snapshot``, keyed by the session's id: the state, the time
  of the last update and the seq and identity of the event it was folded up to) is written when
  an append crosses a multiple of 64 seqs, so ``get_session`` with a ``GetSessionConfig`` and
  ``list_sessions`` read only the events after it. It is a cache: it is checked against the
  event it names and ignored when that event is not there (a session deleted and made again).
* ``user:`` keys live in the meta namespace ``adk-user-state`` (key ``<app>:<user>``), ``app:``
  keys in ``adk-app-state`` (key ``<app>``), as one JSON object each, changed with
  ``dict.update`` semantics (a dict value replaces, ``None`` is stored) by a compare-and-set
  loop (``BaseStore._meta_update``), atomic across threads, processes and machines.
* ``temp:`` keys are applied to the caller's ``Session`` object only and never written.

``get_session`` and ``list_sessions`` return the merged state (session, then ``app:``, then
``user:`` keys), as ADK's services do.

**Compaction.** ADK's runner builds its request from the events ``get_session`` returns, not
from ``messages()``. So each ``session/compaction`` marker that applies to all agents (from
``session.compact()``, ``agentsession compact`` or the ``max_messages`` cap; not one that
stands for an ADK compaction event the log holds, :data:`OWN_COMPACTION_META`, which ADK
reads itself) is read as ADK's own
compaction: an ADK event with ``actions.compaction`` (``EventCompaction``) whose timestamp range
covers the ADK events the marker summarised and whose content is the summary's text, so ADK's
content builder sends the summary in their place (a marker without a summary leaves those
events out instead). Derived on read; nothing new is stored. The other way round, an ADK
compaction event the runner appends (an app with an ``EventsCompactionConfig``) is stored with
its marker in the same conditional write (:func:`compaction_marker`: ADK's summary as the
marker's, the retained tail from the first ADK event after the compacted range), so that
``messages()`` shows what ADK's model is sent.

**Rewind.** ADK's rewind (``Runner.rewind_async(..., rewind_before_invocation_id=X)``) appends
an ADK event whose ``actions.rewind_before_invocation_id`` is ``X`` and whose ``state_delta``
reverses the session state; it is stored like any other (its delta folded), and ADK's readers
leave out the invocations it rewound. So that the derived history (``messages()``, ``show``,
the viewer) leaves them out too, the same atomic batch ends with a ``session/rewind`` marker
(kind ``adk.rewind``, :data:`REWIND_KIND`) whose ``to_seq`` is the seq right before the first
``adk/event`` of invocation ``X`` (by ``meta["turn_id"]``). No marker is written when no
``adk/event`` has that invocation id (ADK ignores an unknown id too), nor when that seq is
before the latest ``session/compaction`` marker: a rewind never goes back past the latest
compaction, so ADK's reading then leaves the invocations out and the derived history keeps
them. The marker depends on the log as it stands, so this one append is conditional
(``expect_seq``): when another writer came first, the marker is planned again on the events it
added (a compaction among them raises the floor).

**Concurrency.** Appends never fail because another writer came first: two processes appending
to one session both land, in one order (the log's), and no ``StaleSessionError`` is ever
raised. (A rewind's append, planned again each time another writer came first, gives up with
:class:`~agentsession.errors.ConflictError` after 1000 tries in a row.) The caller's
``Session`` object is brought up to date on each append: the events other writers stored
since the object last saw the log are added to it (with their state deltas) before the new
one, so its ``events`` and ``state`` are what ``get_session`` would return.
A genuinely conflicting write, two writers setting the same key, is decided by order, with no
error: the last ``state_delta`` in log order wins for session keys, the last compare-and-set for
``user:``/``app:`` keys. An error would not help: ADK's runner does not reload and retry (the
invocation would fail), a retry would reach the same last-writer-wins outcome, and the log keeps
both writes (each event carries its delta) for whoever needs the history. ADK's SQL services
raise ``StaleSessionError`` whenever the session object is older than storage, also when the two
writes touch nothing in common.

**What is not atomic.** An event and the ``user:``/``app:`` changes it carries are separate
writes (the event first): a process killed between them leaves the event in the log, with its
delta in its payload, and the shared state without it. A retried delivery of one event object
is stored again (ADK's in-memory service deduplicates it; its SQL services refuse it).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as _dt
import functools
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final, NamedTuple, TypeVar, Union
from urllib.parse import quote, unquote

import msgspec

try:
    from google.adk.errors.already_exists_error import AlreadyExistsError
    from google.adk.errors.session_not_found_error import SessionNotFoundError
    from google.adk.events.event import Event as AdkEvent
    from google.adk.events.event_actions import EventActions, EventCompaction
    from google.adk.platform import time as platform_time
    from google.adk.platform import uuid as platform_uuid
    from google.adk.sessions.base_session_service import (
        BaseSessionService,
        GetSessionConfig,
        ListSessionsResponse,
    )
    from google.adk.sessions.session import Session as AdkSession
    from google.adk.sessions.state import State
    from google.genai import types
    from pydantic import TypeAdapter
    from pydantic_core import to_jsonable_python
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "agentsession.integrations.adk needs Google's ADK: pip install 'agentsession[adk]'"
    ) from exc

from ..aio import AsyncSession, AsyncStore
from ..aio._backend import default_max_threads
from ..backoff import Backoff
from ..children import (
    read_session_value,
    read_store_value,
    update_session_value,
    update_store_value,
)
from ..codec import decode, encode
from ..compaction import memory_cutoff_seq, plan_compaction
from ..derive import Deriver
from ..errors import (
    ConflictError,
    DuplicateSession,
    EncryptionError,
    SessionShredded,
    UsageError,
)
from ..events import (
    ASSISTANT_MESSAGE,
    COMPACTION,
    REWIND_REVISION,
    SESSION_REWIND,
    TOOL_RESULT,
    USAGE,
    USER_MESSAGE,
    Event,
    SessionRewind,
    compaction_of,
)
from ..messages import Message, Part, TextPart, ThinkingPart, ToolCall, ToolResult
from ..providers.gemini import from_gemini
from ..session import BaseSession
from ..store import BaseStore, open_store

__all__ = [
    "ADK_EVENT",
    "COMPACTION_ID_PREFIX",
    "OWN_COMPACTION_META",
    "ADK_SESSION",
    "REWIND_KIND",
    "AgentSessionService",
    "StoreTarget",
    "compaction_marker",
    "session_key",
]

ADK_EVENT: Final = "adk/event"
"""Event type of one ADK event; its payload is the event's JSON, byte for byte."""
ADK_SESSION: Final = "adk/session"
"""Event type of an ADK session's first event: its ids, initial session state and creation
time (``app_name``, ``user_id``, ``id``, ``state``, ``last_update_time``)."""

OWN_COMPACTION_META: Final = "adk_compaction"
"""The meta key of a ``session/compaction`` marker that stands for an ADK compaction event
stored in the log (appended by ADK's runner through :class:`AgentSessionService`, or by
``agentsession import adk``: the event's ``EventCompaction``): ADK reads that event itself, so
no compaction event is derived from the marker."""

COMPACTION_ID_PREFIX: Final = "agentsession-compaction-"
"""What the id of an ADK compaction event derived from a ``session/compaction`` marker starts
with (followed by the marker's seq); such events are in ``get_session``'s events, not in the
log."""
ID_PREFIX: Final = "adk:"
"""What every ADK session's agentsession id starts with (see :func:`session_key`)."""
USER_STATE_KIND: Final = "adk-user-state"
"""Meta namespace of ``user:`` state: key ``<app>:<user>`` (parts encoded as in ids), value
one JSON object."""
APP_STATE_KIND: Final = "adk-app-state"
"""Meta namespace of ``app:`` state: key ``app:<app>``, value one JSON object."""
SNAPSHOT_KIND: Final = "adk-snapshot"
"""Meta namespace of the session-state snapshots, keyed by agentsession session id."""
SNAPSHOT_EVERY: Final = 64
"""An append that crosses a multiple of this many seqs writes the session-state snapshot."""
REWIND_KIND: Final = "adk.rewind"
"""The ``kind`` of the ``session/rewind`` marker that records ADK's rewind
(``Runner.rewind_async``)."""
_REWIND_TRIES = 1000
_MAX_CACHED = 256
_MARKER = "agentsession:"

StoreTarget = Union[str, "os.PathLike[str]", BaseStore, AsyncStore]
"""What ``store`` takes: a URL or path for :func:`agentsession.open_store`, or an open store
(sync or :class:`~agentsession.aio.AsyncStore`)."""

T = TypeVar("T")
_events_adapter: TypeAdapter[list[AdkEvent]] = TypeAdapter(list[AdkEvent])


# -- ids -------------------------------------------------------------------------------------


def _quote(part: str) -> str:
    # Injective and free of ":" (quote keeps only letters, digits and "_.-~").
    return quote(part, safe="")


def session_key(app_name: str, user_id: str, session_id: str) -> str:
    """The agentsession id of an ADK session: ``adk:<app>:<user>:<session>``, each part
    percent-encoded (``urllib.parse.quote(part, safe="")``), so no part holds a ``:``."""
    return f"{ID_PREFIX}{_quote(app_name)}:{_quote(user_id)}:{_quote(session_id)}"


def _parse_key(key: str) -> tuple[str, str, str] | None:
    """``(app_name, user_id, session_id)`` of an id :func:`session_key` made, else None."""
    if not key.startswith(ID_PREFIX):
        return None
    parts = key[len(ID_PREFIX) :].split(":")
    if len(parts) != 3:
        return None
    app, user, sid = (unquote(p) for p in parts)
    return (app, user, sid) if session_key(app, user, sid) == key else None


def _user_key(app_name: str, user_id: str) -> str:
    return f"{_quote(app_name)}:{_quote(user_id)}"


def _app_key(app_name: str) -> str:
    return f"app:{_quote(app_name)}"


# -- stored shapes ----------------------------------------------------------------------------


class _Created(msgspec.Struct, frozen=True, kw_only=True):
    """The ``adk/session`` payload: ADK's session JSON without events."""

    app_name: str
    user_id: str
    id: str
    state: dict[str, Any] = {}
    last_update_time: float = 0.0


class _Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    """The session state folded up to the ``adk/event`` at ``seq`` (``mark`` names it)."""

    seq: int
    mark: str
    time: float
    state: dict[str, Any] = {}


class _Actions(msgspec.Struct):
    state_delta: dict[str, Any] = {}


class _Head(msgspec.Struct):
    """What folding needs of an ADK event's JSON (the rest is skipped unread)."""

    timestamp: float = 0.0
    actions: _Actions | None = None


_created_decoder = msgspec.json.Decoder(_Created)
_snapshot_decoder = msgspec.json.Decoder(_Snapshot)
_head_decoder = msgspec.json.Decoder(_Head)


def _mark(event: Event) -> str:
    """What identifies a stored ``adk/event``: its ADK id and when it was stored."""
    stamp = event.time.isoformat() if event.time is not None else ""
    return f"{event.meta.get('adk', '')}@{stamp}"


def _snapshot_of(raw: str | None) -> _Snapshot | None:
    """The stored snapshot ``raw`` (None when there is none or it does not decode)."""
    if raw is None:
        return None
    try:
        return _snapshot_decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _split(delta: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A state delta's ``app:``, ``user:`` and session parts (prefixes removed; ``temp:``
    keys dropped)."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    session: dict[str, Any] = {}
    for key, value in delta.items():
        if key.startswith(State.APP_PREFIX):
            app[key[len(State.APP_PREFIX) :]] = value
        elif key.startswith(State.USER_PREFIX):
            user[key[len(State.USER_PREFIX) :]] = value
        elif not key.startswith(State.TEMP_PREFIX):
            session[key] = value
    return app, user, session


def _merged(
    session: Mapping[str, Any], app: Mapping[str, Any], user: Mapping[str, Any]
) -> dict[str, Any]:
    out = dict(session)
    out.update((State.APP_PREFIX + k, v) for k, v in app.items())
    out.update((State.USER_PREFIX + k, v) for k, v in user.items())
    return out


def _state_of(raw: str | None) -> dict[str, Any]:
    if raw is None:
        return {}
    value = decode(raw)
    return value if isinstance(value, dict) else {}


class _Fold:
    """The session state and last update time, folded event by event."""

    __slots__ = ("fed", "mark", "seq", "state", "time")

    def __init__(self, state: dict[str, Any], time: float, seq: int, mark: str) -> None:
        self.state = state
        self.time = time
        self.seq = seq  # the last adk/event folded (0: none yet)
        self.mark = mark
        self.fed = 0

    @classmethod
    def start(cls, first: Event) -> _Fold:
        """The fold at a log's first event (its ``adk/session``)."""
        if first.type == ADK_SESSION:
            try:
                created = _created_decoder.decode(first.data)
                return cls(dict(created.state), created.last_update_time, 0, "")
            except (msgspec.DecodeError, msgspec.ValidationError):
                pass
        fold = cls({}, first.time.timestamp() if first.time is not None else 0.0, 0, "")
        fold.feed(first)
        return fold

    def feed(self, event: Event) -> None:
        if event.type != ADK_EVENT:
            return
        try:
            head = _head_decoder.decode(event.data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        self.time = head.timestamp
        if head.actions is not None and head.actions.state_delta:
            self.state.update(_split(head.actions.state_delta)[2])
        self.seq = event.seq
        self.mark = _mark(event)
        self.fed += 1


class _Folded(NamedTuple):
    """A session's state as of its log's end, and the events read to get it."""

    fold: _Fold
    events: list[Event]
    """The events from the snapshot's seq (or seq 1) to the end."""
    stale: str | None
    """The stored snapshot when it was found not to match the log (to replace it)."""
    base: int
    """The seq of the snapshot used (0: none)."""


# -- the typed mirror ---------------------------------------------------------------------------


def _tool_result(raw: object) -> ToolResult | None:
    """A ``function_response`` part as a tool result: ``{"result": text}`` (also
    ``"output"``) gives the text, ``{"error": text}`` an error result, anything else its
    JSON."""
    if not isinstance(raw, Mapping):
        return None
    call_id, name, response = raw.get("id"), raw.get("name"), raw.get("response")
    content, is_error = "", False
    if isinstance(response, Mapping) and len(response) == 1:
        [(field, value)] = response.items()
        if isinstance(value, str) and field in ("result", "output", "error"):
            content, is_error = value, field == "error"
        else:
            content = encode(response).decode()
    elif response is not None:
        content = encode(response).decode()
    return ToolResult(
        call_id=call_id if isinstance(call_id, str) else "",
        name=name if isinstance(name, str) else "",
        content=content,
        is_error=is_error,
    )


def _plain_message(parts: Sequence[Mapping[str, Any]]) -> Message | None:
    """The message of content parts that are plain text and function calls with ids (what
    most events hold), or None when a part needs :func:`from_gemini` (thoughts, signatures,
    media, a call without an id)."""
    texts: list[Part] = []
    calls: list[ToolCall] = []
    for part in parts:
        if part.keys() == {"text"}:
            if part["text"]:
                texts.append(TextPart(part["text"]))
        elif part.keys() == {"function_call"}:
            call = part["function_call"]
            args = call.get("args") if isinstance(call, Mapping) else None
            if not isinstance(call, Mapping) or not call.get("id") or not isinstance(args, dict):
                return None
            calls.append(ToolCall(call["id"], call.get("name") or "", args))
        else:
            return None
    return Message(role="assistant", parts=texts, tool_calls=calls)


def _mirror(doc: Mapping[str, Any], user_id: str, meta: Mapping[str, Any]) -> list[Event]:
    """The typed events (``user/message``, ``assistant/message``, ``tool/result``) of one ADK
    event's JSON (none for an event without content, or whose content cannot be read)."""
    content = doc.get("content")
    if not isinstance(content, Mapping):
        return []
    author = doc.get("author") or ""
    by_user = author == "user"
    agent = "" if by_user or not isinstance(author, str) else author
    role = content.get("role") or ("user" if by_user else "model")
    parts = [p for p in content.get("parts") or [] if isinstance(p, Mapping)]
    results = [
        Event.new(TOOL_RESULT, result, agent=agent, meta=meta)
        for p in parts
        if (result := _tool_result(p.get("function_response"))) is not None
    ]
    rest = [p for p in parts if p.get("function_response") is None]
    message: list[Event] = []
    if rest:
        msg = _plain_message(rest)
        usage = doc.get("usage_metadata") if role == "model" else None
        if msg is None or usage is not None:
            response: dict[str, Any] = {"usage_metadata": usage}
            if msg is None:
                response["candidates"] = [{"content": {"parts": rest}}]
            reply = from_gemini(response)
            msg = reply.messages[0] if msg is None else msg
            usage = reply.usage
        visible = [p for p in msg.parts if type(p) is not ThinkingPart]
        if role == "model" and (visible or msg.tool_calls):
            msg = msgspec.structs.replace(msg, author=agent)
            message.append(Event.new(ASSISTANT_MESSAGE, msg, agent=agent, meta=meta))
            if usage is not None:
                message.append(Event.new(USAGE, usage, agent=agent, meta=meta))
        elif role != "model" and visible:
            msg = Message(role="user", parts=visible)
            user = user_id if by_user else ""
            message.append(Event.new(USER_MESSAGE, msg, agent=agent, user=user, meta=meta))
    # Results answer calls made before this event: they go before a user's new text.
    return message + results if role == "model" else results + message


def _mirror_or_nothing(
    doc: Mapping[str, Any], user_id: str, meta: Mapping[str, Any]
) -> list[Event]:
    """:func:`_mirror`, or nothing when the content is not what it expects: the ``adk/event``
    is stored whatever its content."""
    try:
        return _mirror(doc, user_id, meta)
    except (UsageError, ValueError, TypeError, KeyError, AttributeError):
        return []


# -- the service --------------------------------------------------------------------------------


def _marker_seq(session: AdkSession) -> int:
    """The seq of the log the session object reflects (0: unknown)."""
    marker = session._storage_update_marker
    if marker is None or not marker.startswith(_MARKER):
        return 0
    try:
        return int(marker[len(_MARKER) :])
    except ValueError:
        return 0


def _crosses(seqs: Sequence[int]) -> bool:
    """Whether a batch stored at ``seqs`` covers a multiple of :data:`SNAPSHOT_EVERY`."""
    return seqs[-1] // SNAPSHOT_EVERY > (seqs[0] - 1) // SNAPSHOT_EVERY


# -- ADK's rewind as a rewind marker -------------------------------------------------------------


def _rewind_target(events: Sequence[Event], invocation_id: str) -> int | None:
    """The seq a ``session/rewind`` marker for ADK's rewind before ``invocation_id`` goes back
    to, in the log ``events`` (in seq order): the seq right before the invocation's first
    ``adk/event`` (the first whose ``meta["turn_id"]`` is the id), so the derived history is
    the one that stood before the invocation began, as ADK's own reading
    (``google.adk.events._rewind_events._apply_rewinds``) leaves it. None, for no marker,
    when no ``adk/event`` has that invocation id (ADK ignores an unknown one too) or when that
    seq is before the latest ``session/compaction`` marker (a rewind never goes back past the
    latest compaction: the turns it summarised stay summarised)."""
    first = next(
        (e.seq for e in events if e.type == ADK_EVENT and e.meta.get("turn_id") == invocation_id),
        None,
    )
    if first is None:
        return None
    floor = max((e.seq for e in events if e.type == COMPACTION), default=0)
    return first - 1 if first - 1 >= floor else None


async def _append_planned(
    log: AsyncSession,
    batch: Sequence[Event],
    plan: Callable[[list[Event]], Event | None],
    what: str,
) -> list[int]:
    """Append ``batch`` followed, in the same write, by the marker ``plan`` makes of the log as
    it stands (all its events; None: no marker), written only if nothing was appended since
    (``expect_seq``); when another writer came first, the events it added are read and the
    marker planned again. ``what`` names the write for the error after
    :data:`_REWIND_TRIES` tries in a row."""
    events = await log.read()
    backoff = Backoff(tries=_REWIND_TRIES)
    while backoff.next_try():
        if pause := backoff.contention_pause():
            await asyncio.sleep(pause)
        planned_at = events[-1].seq if events else 0
        marker = plan(events)
        written = [*batch, marker] if marker is not None else list(batch)
        try:
            return await log.append_many(written, expect_seq=planned_at)
        except ConflictError:
            events += await log.read(planned_at)
    raise ConflictError(
        f"session {log.id!r}: other writers kept appending while {what} was written "
        f"({_REWIND_TRIES} tries)"
    )


async def _append_rewind(
    log: AsyncSession, batch: Sequence[Event], invocation_id: str
) -> list[int]:
    """Append ``batch`` (an ADK rewind event and its mirror) followed, in the same write, by
    the ``session/rewind`` marker (kind ``adk.rewind``) to :func:`_rewind_target`'s seq, if
    there is one, planned on the log as it stands (:func:`_append_planned`: a compaction
    marker another writer added may have raised the floor)."""
    meta = {"turn_id": batch[0].meta["turn_id"]} if "turn_id" in batch[0].meta else {}

    def plan(events: list[Event]) -> Event | None:
        target = _rewind_target(events, invocation_id)
        if target is None:
            return None
        marker = SessionRewind(
            to_seq=target,
            kind=REWIND_KIND,
            reason=f"before invocation {invocation_id}",
            min_revision=REWIND_REVISION,
        )
        return Event.new(SESSION_REWIND, marker, meta=meta)

    return await _append_planned(
        log, batch, plan, f"ADK's rewind before invocation {invocation_id!r}"
    )


_STAMP_SLACK: Final = 1e-6
"""Seconds by which an ADK event's stored timestamp may miss a compaction range's bounds and
still be inside it (a column rounded to the microsecond, a float's last digit)."""


def _is_compaction(event: Event) -> bool:
    """Whether an ``adk/event`` is one of ADK's compaction events."""
    doc = msgspec.json.decode(bytes(event.data))
    actions = doc.get("actions") if isinstance(doc, dict) else None
    return isinstance(actions, dict) and bool(actions.get("compaction"))


def compaction_marker(
    before: Sequence[Event],
    compaction: Mapping[str, Any],
    *,
    meta: Mapping[str, Any] | None = None,
    time: _dt.datetime | None = None,
    event_id: str = "",
) -> Event | None:
    """The ``session/compaction`` marker of ADK's compaction ``compaction`` (an
    ``EventCompaction`` as JSON: ``start_timestamp``, ``end_timestamp``,
    ``compacted_content``), to follow ``before`` (the session's events so far, seqs 1..n in
    order): ADK's compacted content as the summary (a user message, as ``compact()`` writes),
    the retained tail starting with the first ADK event after the last one in the compacted
    range, or nothing kept when no later one comes before it; ``compaction`` in the meta
    (:data:`OWN_COMPACTION_META`, so no second ADK compaction event is derived from it). None
    when the range holds no ADK event before it, the content has no text, or the history
    cannot be cut there (a tool call unanswered at that point): the ADK event alone then
    stays, as ADK reads it."""
    try:
        start = float(compaction["start_timestamp"])
        end = float(compaction["end_timestamp"])
    except (KeyError, TypeError, ValueError):
        return None
    content = compaction.get("compacted_content")
    parts = content.get("parts") if isinstance(content, dict) else None
    text = "".join(
        p["text"] for p in parts or [] if isinstance(p, dict) and isinstance(p.get("text"), str)
    )
    if not text:
        return None
    numbered = [msgspec.structs.replace(e, seq=n) for n, e in enumerate(before, 1)]
    last_covered = -1
    for i, event in enumerate(numbered):
        if event.type != ADK_EVENT or _is_compaction(event):
            continue  # an earlier compaction is not itself compacted
        doc = msgspec.json.decode(bytes(event.data))
        stamp = doc.get("timestamp") if isinstance(doc, dict) else None
        # A stored timestamp may be rounded to the microsecond (ADK's older schema's column)
        # where the range keeps ADK's float: within _STAMP_SLACK is inside.
        if isinstance(stamp, (int, float)) and start - _STAMP_SLACK <= stamp <= end + _STAMP_SLACK:
            last_covered = i
    if last_covered < 0:
        return None
    first_kept = len(numbered) + 1
    for event in numbered[last_covered + 1 :]:
        if event.type == ADK_EVENT and not _is_compaction(event):
            first_kept = event.seq
            break
    try:
        marker = plan_compaction(
            numbered,
            Deriver.from_events(numbered),
            len(numbered),
            Message.user(text),
            first_kept_seq=first_kept,
        )
    except UsageError:
        return None
    if marker is None:
        return None
    return Event.new(
        COMPACTION,
        marker,
        meta={**(meta or {}), OWN_COMPACTION_META: dict(compaction)},
        time=time,
        id=event_id,
    )


async def _append_compaction(
    log: AsyncSession, batch: Sequence[Event], compaction: Mapping[str, Any]
) -> list[int]:
    """Append ``batch`` (an ADK compaction event and its mirror) followed, in the same write,
    by its ``session/compaction`` marker (:func:`compaction_marker`), so that ``messages()``
    shows ADK's summary in place of what it compacted; planned on the log as it stands
    (:func:`_append_planned`)."""
    meta = {"turn_id": batch[0].meta["turn_id"]} if "turn_id" in batch[0].meta else {}
    return await _append_planned(
        log,
        batch,
        lambda events: compaction_marker([*events, *batch], compaction, meta=meta),
        "ADK's compaction event",
    )


# -- compaction markers as ADK compaction events -------------------------------------------------


def _summary_content(summary: Message | None) -> types.Content | None:
    """A marker's summary as ADK's compacted content (its text, as the model's: the shape of
    ADK's own summariser), or None when it has no text (a prune)."""
    text = summary.text if summary is not None else ""
    return types.Content(role="model", parts=[types.Part(text=text)]) if text else None


def _compaction_event(
    marker: Event, events: Sequence[AdkEvent], bounds: Sequence[int]
) -> tuple[AdkEvent | None, list[int]]:
    """The ADK compaction event that stands for ``marker`` (its summary in place of the ADK
    events it summarised) and the indexes in ``events`` of those events.

    ``events`` are the ADK events before the marker and ``bounds[i]`` the seq where
    ``events[i]``'s batch (the ``adk/event`` and its typed mirror) ends, exclusive; an ADK event
    is summarised when its whole batch lies before the marker's first kept seq. ADK's content
    builder drops the events whose timestamps fall in ``[start, end]``, so the range ends
    before the earliest kept event even if a clock went back: a kept event is never hidden (a
    summarised one the range cannot exclude is sent as it was). The event is None when the
    marker has no summary text (a prune): ADK would send its empty content as a turn.
    """
    data = compaction_of(marker)
    if data is None:
        return None, []
    first_kept = memory_cutoff_seq(data) + 1
    covered = [i for i, end in enumerate(bounds) if 0 < end <= first_kept]
    content = _summary_content(data.summary)
    if not covered or content is None:
        return None, covered
    start = min(events[i].timestamp for i in covered)
    end = max(events[i].timestamp for i in covered)
    summarised = set(covered)
    kept = [e.timestamp for i, e in enumerate(events) if i not in summarised]
    if kept:
        end = min(end, math.nextafter(min(kept), -math.inf))
    if end < start:
        return None, []
    name = f"{COMPACTION_ID_PREFIX}{marker.seq}"
    compaction = EventCompaction(
        start_timestamp=start, end_timestamp=end, compacted_content=content
    )
    derived = AdkEvent(
        id=name,
        invocation_id=name,
        author="user",
        timestamp=end,
        actions=EventActions(compaction=compaction),
    )
    return derived, covered


def _with_compactions(events: Sequence[Event], parsed: Mapping[int, AdkEvent]) -> list[AdkEvent]:
    """The ADK events of ``events`` (a stretch of a log, oldest first; ``parsed`` maps the seq
    of each ``adk/event`` to return to its ADK event) as ADK's runner should see them after
    the ``session/compaction`` markers among them that apply to all agents: an ADK compaction
    event in place of each marker with a summary (see :func:`_compaction_event`), and the
    events a marker without one (a prune) dropped left out. Derived on read: nothing of it is
    stored."""
    out: list[AdkEvent] = []
    before: list[AdkEvent] = []
    bounds: list[int] = []  # 0: the batch has not ended yet
    dropped: set[int] = set()  # ids of the ADK events a prune dropped
    for event in events:
        if event.type not in (ADK_EVENT, COMPACTION):
            continue
        if bounds and bounds[-1] == 0:
            bounds[-1] = event.seq
        if event.type == ADK_EVENT:
            adk = parsed.get(event.seq)
            if adk is not None:
                before.append(adk)
                bounds.append(0)
                out.append(adk)
        elif not event.agent and OWN_COMPACTION_META not in event.meta:
            # (a marker for one agent's history leaves the others whole; one made from ADK's
            # own compaction event, by an import, has that event in the log already)
            derived, covered = _compaction_event(event, before, bounds)
            if derived is not None:
                out.append(derived)
            elif covered:
                dropped.update(id(before[i]) for i in covered)
    return [e for e in out if id(e) not in dropped] if dropped else out


def _backwards(session: BaseSession, events: list[Event]) -> Iterator[Event]:
    """``events`` (the end of the log) newest first, then older events, read backwards in
    doubling spans."""
    yield from reversed(events)
    start = events[0].seq if events else 1
    span = max(SNAPSHOT_EVERY, len(events))
    while start > 1:
        span *= 2
        after = max(0, start - 1 - span)
        older = [e for e in session.read(after, start - 1 - after) if e.seq < start]
        if not older:
            return
        yield from reversed(older)
        start = older[0].seq


class AgentSessionService(BaseSessionService):
    """ADK's session service over an agentsession store (see :mod:`agentsession.integrations.adk`
    for the design: ids, where each state scope lives, what a concurrent write does).

    ``store`` is a URL or path (opened with :func:`agentsession.open_store` and ``options``;
    closed by :meth:`close`), or an open store, sync or
    :class:`~agentsession.aio.AsyncStore`, which stays the caller's to close.
    ``mirror_messages`` (default True) also records every ADK event's content as agentsession's
    typed messages, so ``messages()`` and the CLI see the conversation.

    Use it from one event loop and close it there (``async with AgentSessionService(...)``,
    or ``await service.close()``): what a backend opens natively for asyncio (PostgreSQL's
    async pool) belongs to the loop that opened it.
    """

    def __init__(self, store: StoreTarget, *, mirror_messages: bool = True, **options: Any) -> None:
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._owns_store = False
        if isinstance(store, AsyncStore):
            if options:
                raise UsageError("options cannot be applied to a store that is already open")
            self._astore = store
        else:
            sync = open_store(store, **options)
            self._owns_store = not isinstance(store, BaseStore)
            self._executor = concurrent.futures.ThreadPoolExecutor(
                default_max_threads(), thread_name_prefix="agentsession-adk"
            )
            self._astore = AsyncStore(sync, executor=self._executor)
        self._sync: BaseStore = self._astore.sync
        self.mirror_messages = mirror_messages
        """Whether ADK events are also recorded as typed messages (see the module)."""
        self._sessions: OrderedDict[str, AsyncSession] = OrderedDict()
        self._sessions_lock = threading.Lock()
        self._in_flight: dict[int, set[str]] = {}

    @property
    def store(self) -> AsyncStore:
        """The store the sessions live in (``store.sync`` is the sync store)."""
        return self._astore

    # -- plumbing ---------------------------------------------------------------------------

    async def _run(self, op: str, fn: Callable[[], T]) -> T:
        """Run one sync call of this service (several store operations) where the store's
        async backend places such a call: inline on memory, in a worker thread elsewhere."""
        return await self._astore._call(op, fn)

    def _cached(self, key: str) -> AsyncSession | None:
        with self._sessions_lock:
            found = self._sessions.get(key)
            if found is not None:
                self._sessions.move_to_end(key)
            return found

    def _open(self, key: str) -> AsyncSession:
        """The store's session of ``key``, kept between calls: an append then needs no call
        to open it, and runs inline where the backend allows it. (Sync: in a worker thread.)"""
        found = self._cached(key)
        if found is not None:
            return found
        opened = self._astore._wrap(self._sync.get(key))
        self._remember(key, opened)
        return opened

    def _session(self, key: str) -> BaseSession:
        """The sync session of ``key`` (see :meth:`_open`)."""
        return self._open(key).sync

    def _remember(self, key: str, session: AsyncSession) -> None:
        with self._sessions_lock:
            self._sessions[key] = session
            self._sessions.move_to_end(key)
            while len(self._sessions) > _MAX_CACHED:
                self._sessions.popitem(last=False)

    def _forget(self, key: str) -> None:
        with self._sessions_lock:
            self._sessions.pop(key, None)

    def _merge_shared(self, kind: str, key: str, delta: Mapping[str, Any]) -> None:
        """Apply ``delta`` to a shared state entry (``dict.update``), atomically (sealed under
        the store key in an encrypted store)."""

        def change(current: str | None) -> str:
            state = _state_of(current)
            state.update(delta)
            return encode(state).decode()

        self._sync._check_open()
        update_store_value(self._sync, kind, key, change)

    def _shared_state(self, kind: str, key: str) -> dict[str, Any]:
        """A shared state entry (``{}`` when none), opened in an encrypted store."""
        self._sync._check_open()
        return _state_of(read_store_value(self._sync, kind, key))

    def _shared(self, app_name: str, user_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
        app = self._shared_state(APP_STATE_KIND, _app_key(app_name))
        user = self._shared_state(USER_STATE_KIND, _user_key(app_name, user_id))
        return app, user

    def _snapshot_text(self, key: str) -> str | None:
        """The stored snapshot's JSON (opened with the session's key in an encrypted store),
        or None. The snapshot is a cache: in an encrypted store, one that is not sealed
        (written by a version that kept it in plaintext, or by someone without the key) or
        does not open is not believed, and the state is folded from the log instead."""
        self._sync._check_open()
        try:
            return read_session_value(self._sync, SNAPSHOT_KIND, key)
        except SessionShredded:
            raise
        except EncryptionError:
            return None

    def _fold(self, key: str, session: BaseSession) -> _Folded | None:
        """The session state at the log's end, from the snapshot when it matches the log
        (reading the events after it), else from the whole log; None for no session."""
        raw = self._snapshot_text(key)
        snapshot = _snapshot_of(raw)
        if snapshot is not None and snapshot.seq > 0:
            events = session.read(snapshot.seq - 1)
            if events and events[0].seq == snapshot.seq and _mark(events[0]) == snapshot.mark:
                fold = _Fold(dict(snapshot.state), snapshot.time, snapshot.seq, snapshot.mark)
                for event in events[1:]:
                    fold.feed(event)
                return _Folded(fold, events, None, snapshot.seq)
        events = session.read()
        if not events:
            return None
        fold = _Fold.start(events[0])
        for event in events[1:]:
            fold.feed(event)
        return _Folded(fold, events, raw, 0)

    def _save_snapshot(self, key: str, fold: _Fold, stale: str | None) -> None:
        """Store ``fold`` as the session's snapshot unless a later one is stored already."""
        if not fold.mark:
            return
        new = encode(
            _Snapshot(seq=fold.seq, mark=fold.mark, time=fold.time, state=fold.state)
        ).decode()

        def change(current: str | None) -> str | None:
            stored = None if current == stale else _snapshot_of(current)
            return current if stored is not None and stored.seq >= fold.seq else new

        self._sync._check_open()
        update_session_value(self._sync, SNAPSHOT_KIND, key, change, cache=True)

    def _keep_snapshot(self, key: str, folded: _Folded) -> None:
        """Write a snapshot when the fold read more than :data:`SNAPSHOT_EVERY` events past
        the stored one (a snapshot an append did not get to write)."""
        if folded.fold.fed > SNAPSHOT_EVERY and folded.fold.seq > folded.base:
            self._save_snapshot(key, folded.fold, folded.stale)

    # -- create, get, list, delete ------------------------------------------------------------

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> AdkSession:
        """Create a session (``AlreadyExistsError`` when the id exists, also when another
        process created it first); ``app:`` and ``user:`` keys of ``state`` go to the shared
        state, the rest is the session's initial state. Values are stored in their JSON form
        (as ADK's SQL services store them)."""
        sid = (session_id or "").strip() or platform_uuid.new_uuid()
        safe = to_jsonable_python(state or {}, serialize_unknown=True)
        app_delta, user_delta, own = _split(safe)
        now = platform_time.get_time()
        created = _Created(
            app_name=app_name, user_id=user_id, id=sid, state=own, last_update_time=now
        )
        first = Event.new(ADK_SESSION, msgspec.Raw(encode(created)), user=user_id)
        key = session_key(app_name, user_id, sid)

        def create() -> tuple[dict[str, Any], dict[str, Any]]:
            try:
                opened = self._sync.create(key, [first])
            except DuplicateSession:
                raise AlreadyExistsError(f"Session with id {sid} already exists.") from None
            self._remember(key, self._astore._wrap(opened))
            if app_delta:
                self._merge_shared(APP_STATE_KIND, _app_key(app_name), app_delta)
            if user_delta:
                self._merge_shared(USER_STATE_KIND, _user_key(app_name, user_id), user_delta)
            return self._shared(app_name, user_id)

        app, user = await self._run("adk.create_session", create)
        session = AdkSession(
            id=sid,
            app_name=app_name,
            user_id=user_id,
            state=_merged(own, app, user),
            events=[],
            last_update_time=now,
        )
        session._storage_update_marker = f"{_MARKER}1"
        return session

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> AdkSession | None:
        """The session with its events and merged state, or None. ``config`` keeps the
        ``num_recent_events`` latest events and, of those, the ones after the latest event
        older than ``after_timestamp`` (ADK's in-memory semantics); with it, only the end of
        the log is read (the events since the state snapshot, and as many more as needed)."""
        sid = session_id.strip() if session_id else session_id
        recent = config.num_recent_events if config is not None else None
        after = config.after_timestamp if config is not None else None
        fn = functools.partial(self._load, app_name, user_id, sid, recent, after)
        return await self._run("adk.get_session", fn)

    def _load(
        self, app_name: str, user_id: str, sid: str, recent: int | None, after: float | None
    ) -> AdkSession | None:
        key = session_key(app_name, user_id, sid)
        log = self._session(key)
        if recent is None and after is None:
            events = log.read()
            if not events:
                return None
            fold = _Fold.start(events[0])
            adk = [e for e in events if e.type == ADK_EVENT]
            parsed = _parse(adk)
            for adk_event in parsed:
                fold.time = adk_event.timestamp
                if adk_event.actions.state_delta:
                    fold.state.update(_split(adk_event.actions.state_delta)[2])
            if any(e.type == COMPACTION for e in events):
                parsed = _with_compactions(
                    events, dict(zip((e.seq for e in adk), parsed, strict=True))
                )
            if len(events) > 2 * SNAPSHOT_EVERY and adk:
                self._refresh_after_full_read(key, events, adk[-1], fold)
            latest = events[-1].seq
        else:
            folded = self._fold(key, log)
            if folded is None:
                return None
            fold = folded.fold
            picked: list[Event] = []
            markers: list[Event] = []
            if recent != 0:
                for event in _backwards(log, folded.events):
                    if event.type == COMPACTION:
                        markers.append(event)
                    if event.type != ADK_EVENT:
                        continue
                    if recent is not None and len(picked) >= recent:
                        break
                    if after is not None and _head_decoder.decode(event.data).timestamp < after:
                        break
                    picked.append(event)
            picked.reverse()
            parsed = _parse(picked)
            if markers and picked:
                by_seq = dict(zip((e.seq for e in picked), parsed, strict=True))
                stretch = sorted(picked + markers, key=lambda e: e.seq)
                parsed = _with_compactions(stretch, by_seq)
            self._keep_snapshot(key, folded)
            latest = folded.events[-1].seq
        app, user = self._shared(app_name, user_id)
        session = AdkSession(
            id=sid,
            app_name=app_name,
            user_id=user_id,
            state=_merged(fold.state, app, user),
            events=parsed,
            last_update_time=fold.time,
        )
        session._storage_update_marker = f"{_MARKER}{latest}"
        return session

    def _refresh_after_full_read(
        self, key: str, events: list[Event], last: Event, fold: _Fold
    ) -> None:
        """After reading a whole long log: write a snapshot when the stored one lags (or does
        not match the log)."""
        stale = self._snapshot_text(key)
        snapshot = _snapshot_of(stale)
        if (
            snapshot is not None
            and 0 < snapshot.seq <= len(events)
            and _mark(events[snapshot.seq - 1]) == snapshot.mark
        ):
            if last.seq - snapshot.seq <= SNAPSHOT_EVERY:
                return
            stale = None  # it matches the log, and lags
        fold.seq, fold.mark = last.seq, _mark(last)
        self._save_snapshot(key, fold, stale)

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """The app's sessions (of one user, or of all users with ``user_id=None``), without
        events, with merged state, least recently updated first. Costs one ``Store.list`` of
        the id prefix and, per session, the events since its state snapshot."""
        fn = functools.partial(self._list, app_name, user_id)
        return ListSessionsResponse(sessions=await self._run("adk.list_sessions", fn))

    def _list(self, app_name: str, user_id: str | None) -> list[AdkSession]:
        prefix = f"{ID_PREFIX}{_quote(app_name)}:"
        if user_id is not None:
            prefix += f"{_quote(user_id)}:"
        app = self._shared_state(APP_STATE_KIND, _app_key(app_name))
        users: dict[str, dict[str, Any]] = {}
        out: list[AdkSession] = []
        for info in self._sync.list(prefix=prefix):
            ids = _parse_key(info.id)
            if ids is None or ids[0] != app_name:
                continue
            _, owner, sid = ids
            folded = self._fold(info.id, self._session(info.id))
            if folded is None:
                continue
            self._keep_snapshot(info.id, folded)
            user = users.get(owner)
            if user is None:
                user = users[owner] = self._shared_state(
                    USER_STATE_KIND, _user_key(app_name, owner)
                )
            session = AdkSession(
                id=sid,
                app_name=app_name,
                user_id=owner,
                state=_merged(folded.fold.state, app, user),
                events=[],
                last_update_time=folded.fold.time,
            )
            session._storage_update_marker = f"{_MARKER}{folded.events[-1].seq}"
            out.append(session)
        out.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return out

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session's log and snapshot (nothing happens when there is none); the
        shared ``user:``/``app:`` state stays, as in ADK's services."""
        sid = session_id.strip() if session_id else session_id
        key = session_key(app_name, user_id, sid)

        def delete() -> None:
            self._forget(key)
            self._sync.delete(key)
            self._sync.meta_set(SNAPSHOT_KIND, key, None)

        await self._run("adk.delete_session", delete)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The ``user:`` state of the app's user, keys without the prefix (``{}`` when
        none)."""
        fn = functools.partial(self._shared_state, USER_STATE_KIND, _user_key(app_name, user_id))
        return await self._run("adk.get_user_state", fn)

    # -- appending ------------------------------------------------------------------------------

    async def append_event(self, session: AdkSession, event: AdkEvent) -> AdkEvent:
        """Store ``event`` and update ``session`` as ADK's services do (``temp:`` state
        applied but not stored, the other deltas applied, the event added,
        ``last_update_time`` set to its timestamp), after adding the events other writers
        stored since ``session`` last saw the log. Partial events are not stored. Raises
        ``SessionNotFoundError`` when the session does not exist; never
        ``StaleSessionError``."""
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        payload = event.model_dump_json(exclude_none=True).encode()
        doc = decode(payload)
        actions = doc.get("actions") if isinstance(doc, dict) else None
        delta = actions.get("state_delta") if isinstance(actions, dict) else None
        app_delta, user_delta, _ = _split(delta) if isinstance(delta, dict) else ({}, {}, {})
        by_user = event.author == "user"
        meta: dict[str, Any] = {"turn_id": event.invocation_id} if event.invocation_id else {}
        batch = [
            Event.new(
                ADK_EVENT,
                msgspec.Raw(payload),
                agent="" if by_user else event.author,
                user=session.user_id if by_user else "",
                meta={"adk": event.id, **meta},
            )
        ]
        if self.mirror_messages and isinstance(doc, dict):
            batch += _mirror_or_nothing(doc, session.user_id, meta)
        key = session_key(session.app_name, session.user_id, session.id)
        log = self._cached(key)
        if log is None:
            log = await self._run("adk.open_session", functools.partial(self._open, key))
        seen = _marker_seq(session)
        flying = self._in_flight.setdefault(id(session), set())
        flying.add(event.id)
        try:
            # The append is the async API's own (inline, in a thread or native, as the
            # backend places it); the rest of this call runs only in the rare cases it names.
            compaction = actions.get("compaction") if isinstance(actions, dict) else None
            if event.actions.rewind_before_invocation_id:
                seqs = await _append_rewind(log, batch, event.actions.rewind_before_invocation_id)
            elif isinstance(compaction, dict) and self.mirror_messages:
                seqs = await _append_compaction(log, batch, compaction)
            elif len(batch) == 1:
                seqs = [await log.append(batch[0])]
            else:
                seqs = await log.append_many(batch)
            if seqs[0] == 1:
                # The log had no events: the session was deleted (or never created). Take
                # back what this append started.
                await self._run("adk.undo_append", functools.partial(self._undo, key))
                raise SessionNotFoundError(f"Session {session.id} not found.")
            if 0 < seen < seqs[0] - 1:  # other writers appended since the object saw the log
                between = [
                    e for e in await log.read(seen, seqs[0] - 1 - seen) if e.type == ADK_EVENT
                ]
                for seq, other in zip((e.seq for e in between), _parse(between), strict=True):
                    if seq > _marker_seq(session) and other.id not in flying:
                        self._commit_event_to_session(session, other)
        finally:
            flying.discard(event.id)
            if not flying:
                self._in_flight.pop(id(session), None)
        session.last_update_time = event.timestamp
        if seqs[-1] > _marker_seq(session):
            session._storage_update_marker = f"{_MARKER}{seqs[-1]}"
        self._commit_event_to_session(session, event)
        snapshot = _crosses(seqs)
        if app_delta or user_delta or snapshot:
            fn = functools.partial(
                self._after_append,
                key,
                log.sync,
                session.app_name,
                session.user_id,
                app_delta,
                user_delta,
                snapshot,
            )
            await self._run("adk.shared_state", fn)
        return event

    def _undo(self, key: str) -> None:
        """Delete a log an append to a missing session started."""
        self._forget(key)
        self._sync.delete(key)

    def _after_append(
        self,
        key: str,
        log: BaseSession,
        app_name: str,
        user_id: str,
        app_delta: Mapping[str, Any],
        user_delta: Mapping[str, Any],
        snapshot: bool,
    ) -> None:
        """The writes beside the event: the shared state, and the snapshot when due."""
        if app_delta:
            self._merge_shared(APP_STATE_KIND, _app_key(app_name), app_delta)
        if user_delta:
            self._merge_shared(USER_STATE_KIND, _user_key(app_name, user_id), user_delta)
        if snapshot:
            folded = self._fold(key, log)
            if folded is not None and folded.fold.seq > folded.base:
                self._save_snapshot(key, folded.fold, folded.stale)

    # -- closing ----------------------------------------------------------------------------

    async def close(self) -> None:
        """Close the store when this service opened it (from a URL or path), and the worker
        threads it started; a store passed in stays open."""
        if self._owns_store:
            await self._astore.close()
        elif self._executor is not None:
            # The async side made here for a sync store passed in: release what its backend
            # holds of its own (a native connection pool), not the store.
            release = getattr(self._astore.backend, "close", None)
            if release is not None:
                await release()
        if self._executor is not None:
            self._executor.shutdown(wait=False)

    async def __aenter__(self) -> AgentSessionService:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def _parse(events: Sequence[Event]) -> list[AdkEvent]:
    """The ADK events of stored ``adk/event`` events (one validation for all of them)."""
    if not events:
        return []
    if len(events) == 1:
        return [AdkEvent.model_validate_json(bytes(events[0].data))]
    joined = b"[" + b",".join(bytes(e.data) for e in events) + b"]"
    return _events_adapter.validate_json(joined)
