"""Pydantic AI message history on an agentsession log (the ``pydantic-ai`` extra).

:class:`MessageStore` keeps a Pydantic AI conversation in any agentsession store: load the
history, run the agent on it, save what the run added::

    store = MessageStore("user-42", store="sessions/")   # or sqlite:///, postgresql://
    result = agent.run_sync("Hello", message_history=store.load())
    store.save(result)                                   # result.new_messages(), once

**The events.** Each ``ModelMessage`` is one ``pydantic_ai/message`` event (:data:`MESSAGE`)
whose payload is the message's JSON exactly as ``ModelMessagesTypeAdapter`` writes it, so
:meth:`MessageStore.load` gives back messages that dump to the same bytes, and
:meth:`MessageStore.load_json` those bytes themselves. Right before it, in the same atomic
batch, come agentsession's typed events for its parts (the mirror), so the session's
``messages()``, the providers' converters, ``agentsession show`` and the viewer see the
conversation: a ``SystemPromptPart`` is a ``user/message`` whose message has role ``system``, a
``UserPromptPart`` a ``user/message`` (text, images and files as parts), a ``ModelResponse``
one ``assistant/message`` (text, thinking, tool calls with their ids and arguments, files) and
a ``usage`` event for its ``RequestUsage``, a ``ToolReturnPart`` a ``tool/result``
(``is_error`` unless its outcome is ``success``), a retry prompt bound to a tool call a
``tool/result`` with ``is_error`` and any other retry feedback a ``user/message``. Parts with
no neutral form (the provider's built-in tools, instructions, capability and compaction parts)
are in the message's JSON only.

**Exactly once.** Every event's id is derived from the message's run id (``run_id``, which
Pydantic AI sets on each message of a run) and a digest of its JSON, so saving a run's
``new_messages()`` again (a retry after a lost reply, or after each step of ``agent.iter()``:
the messages stored before are skipped), whole or in pieces, stores nothing twice, in any
process.

**Reading.** :meth:`MessageStore.load` reads the live history: what a rewind
(``session.rewind``, ``retry``, ``edit``) took out is left out, and a compaction marker
(``session.compact``, ``agentsession compact``, the history cap) is honoured: its summary
comes first, as a ``ModelRequest`` with one ``UserPromptPart``, then the messages whose events
lie at or after the marker's first kept seq. A run killed in a tool leaves the
``ModelResponse`` with the call and no return: :meth:`MessageStore.load` returns it as it is,
and Pydantic AI runs the pending call when that history is passed with no new prompt
(``agent.run(message_history=store.load())``); ``messages()`` shows the interrupted stand-in.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import hashlib
import os
import threading
import weakref
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, Final, Union

import msgspec
import pydantic_core
from pydantic_ai.messages import (
    AudioUrl,
    BinaryContent,
    DocumentUrl,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryPromptPart,
    SystemPromptPart,
    TextContent,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
    VideoUrl,
)
from pydantic_ai.messages import FilePart as PydanticFilePart
from pydantic_ai.messages import TextPart as PydanticTextPart
from pydantic_ai.messages import ThinkingPart as PydanticThinkingPart

from ..aio import AsyncSession, AsyncStore
from ..derive import live_events
from ..errors import UsageError
from ..events import (
    ASSISTANT_MESSAGE,
    COMPACTION,
    MAX_EVENT_ID_CHARS,
    TOOL_RESULT,
    USAGE,
    USER_MESSAGE,
    Event,
    Usage,
    compaction_of,
)
from ..messages import (
    FilePart,
    ImagePart,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolCall,
    ToolResult,
)
from ..session import BaseSession
from ..store import BaseStore, open_store

__all__ = [
    "MESSAGE",
    "META_KEY",
    "MessageStore",
    "events_for",
    "history_from_events",
    "history_json",
]

MESSAGE: Final = "pydantic_ai/message"
"""Event type of one ``ModelMessage``; its payload is the message's JSON as
``ModelMessagesTypeAdapter`` writes it."""

META_KEY: Final = "pydantic_ai"
"""The event ``meta`` key naming the message a mirrored event was read from: ``{"message":
event id}`` (the id of its :data:`MESSAGE` event)."""

_ID_PREFIX: Final = "pydantic_ai:"

StoreTarget = Union[str, "os.PathLike[str]", BaseStore, AsyncStore]
"""What ``store=`` takes: a URL or path for :func:`agentsession.open_store`, or an open store."""


# ---------------------------------------------------------------------------------------------
# Messages to events.


def _message_json(message: ModelMessage) -> bytes:
    """One message's JSON, exactly the bytes ``ModelMessagesTypeAdapter.dump_json`` writes for
    it inside a list."""
    return ModelMessagesTypeAdapter.dump_json([message])[1:-1]


def _key(base: str) -> str:
    """An event id from ``base``, hashed when it would be too long for an id."""
    key = _ID_PREFIX + base
    if len(key) + 8 <= MAX_EVENT_ID_CHARS:  # room for the mirrored events' ":k" suffixes
        return key
    return _ID_PREFIX + "h:" + hashlib.sha256(base.encode()).hexdigest()


def _message_keys(
    messages: Sequence[ModelMessage], raws: Sequence[bytes], run_id: str | None
) -> list[str]:
    """The id of each message's :data:`MESSAGE` event: its run id (or ``run_id``), a digest of
    its JSON and how many equal messages of that run came before it in ``messages``. So the
    same message gets the same id however the run's messages are split between saves."""
    seen: dict[str, int] = {}
    keys: list[str] = []
    for message, raw in zip(messages, raws, strict=True):
        run = message.run_id or run_id or ""
        base = f"{run}:{hashlib.sha256(raw).hexdigest()[:24]}"
        index = seen[base] = seen.get(base, -1) + 1
        keys.append(_key(f"{base}:{index}"))
    return keys


def _text(value: object) -> str:
    """A tool return's or retry's content as the text a tool result holds."""
    if isinstance(value, str):
        return value
    try:
        return pydantic_core.to_json(value, fallback=repr).decode()
    except (TypeError, ValueError, pydantic_core.PydanticSerializationError):
        return repr(value)


def _media_type(item: object) -> str:
    try:
        return str(getattr(item, "media_type", "") or "")
    except (ValueError, TypeError, AttributeError):  # a URL whose type cannot be guessed
        return ""


def _content_part(item: object) -> Part | None:
    """The neutral part of one item of a user prompt or a response's file; None for an item no
    part holds (a cache point, an uploaded file)."""
    if isinstance(item, str):
        return TextPart(item) if item else None
    if isinstance(item, TextContent):
        return TextPart(item.content) if item.content else None
    if isinstance(item, BinaryContent):
        if item.is_image:
            return ImagePart(data=item.base64, mime=item.media_type)
        return FilePart(data=item.base64, mime=item.media_type)
    if isinstance(item, ImageUrl):
        return ImagePart(url=item.url, mime=_media_type(item))
    if isinstance(item, (DocumentUrl, AudioUrl, VideoUrl)):
        return FilePart(url=item.url, mime=_media_type(item))
    return None


def _user_parts(part: UserPromptPart) -> list[Part]:
    content = part.content
    items: Iterable[object] = [content] if isinstance(content, str) else content
    return [p for p in map(_content_part, items) if p is not None]


def _tool_call(part: ToolCallPart) -> ToolCall:
    try:
        arguments = part.args_as_dict()
    except (ValueError, TypeError):
        arguments = {}
    if not isinstance(arguments, dict):
        arguments = {"args": arguments}
    return ToolCall(id=part.tool_call_id, name=part.tool_name, arguments=arguments)


def _usage(message: ModelResponse) -> Usage | None:
    usage = message.usage
    made = int(usage.input_tokens or 0) + int(usage.output_tokens or 0)
    if not made and not usage.cache_read_tokens and not usage.cache_write_tokens:
        return None
    return Usage(
        input_tokens=int(usage.input_tokens or 0),
        output_tokens=int(usage.output_tokens or 0),
        total_tokens=made,
        cache_read_tokens=int(usage.cache_read_tokens or 0),
        cache_write_tokens=int(usage.cache_write_tokens or 0),
        reasoning_tokens=int(getattr(usage, "output_reasoning_tokens", 0) or 0),
    )


def _request_mirror(message: ModelRequest) -> list[tuple[str, Any]]:
    """``(event type, payload)`` of the typed events of a request's parts, in order."""
    out: list[tuple[str, Any]] = []
    for part in message.parts:
        if isinstance(part, SystemPromptPart):
            if part.content:
                out.append((USER_MESSAGE, Message(role="system", parts=[TextPart(part.content)])))
        elif isinstance(part, UserPromptPart):
            parts = _user_parts(part)
            if parts:
                out.append((USER_MESSAGE, Message(role="user", parts=parts)))
        elif isinstance(part, ToolReturnPart):
            result = ToolResult(
                call_id=part.tool_call_id,
                name=part.tool_name,
                content=_text(part.content),
                is_error=part.outcome != "success",
            )
            out.append((TOOL_RESULT, result))
        elif isinstance(part, (RetryPromptPart, RetryFeedbackPart)):
            feedback = part.model_response()
            name = getattr(part, "tool_name", None)
            if name:
                call_id = str(getattr(part, "tool_call_id", ""))
                result = ToolResult(call_id=call_id, name=name, content=feedback, is_error=True)
                out.append((TOOL_RESULT, result))
            elif feedback:
                out.append((USER_MESSAGE, Message(role="user", parts=[TextPart(feedback)])))
    return out


def _response_mirror(message: ModelResponse) -> list[tuple[str, Any]]:
    """``(event type, payload)`` of a response's typed events: its message, its usage."""
    parts: list[Part] = []
    calls: list[ToolCall] = []
    for part in message.parts:
        if isinstance(part, PydanticTextPart):
            if part.content:
                parts.append(TextPart(part.content))
        elif isinstance(part, PydanticThinkingPart):
            parts.append(
                ThinkingPart(
                    part.content,
                    signature=part.signature or "",
                    provider=part.provider_name or "",
                    id=part.id or "",
                )
            )
        elif isinstance(part, ToolCallPart):
            calls.append(_tool_call(part))
        elif isinstance(part, PydanticFilePart):
            file = _content_part(part.content)
            if file is not None:
                parts.append(file)
    out: list[tuple[str, Any]] = []
    if parts or calls:
        out.append((ASSISTANT_MESSAGE, Message(role="assistant", parts=parts, tool_calls=calls)))
    usage = _usage(message)
    if usage is not None:
        out.append((USAGE, usage))
    return out


def events_for(
    messages: Sequence[ModelMessage], *, run_id: str | None = None, mirror: bool = True
) -> list[Event]:
    """The events that store ``messages``, in order: for each message its typed mirror (unless
    ``mirror`` is False), then its :data:`MESSAGE` event. Every id is derived from the
    message's run id (else ``run_id``) and JSON, so the same messages always give the same ids
    (see the module's docstring)."""
    messages = list(messages)
    for message in messages:
        if not isinstance(message, (ModelRequest, ModelResponse)):
            raise UsageError(
                f"a Pydantic AI message is a ModelRequest or a ModelResponse, not "
                f"{type(message).__name__}"
            )
    raws = [_message_json(message) for message in messages]
    events: list[Event] = []
    keys = _message_keys(messages, raws, run_id)
    for message, raw, key in zip(messages, raws, keys, strict=True):
        if mirror:
            typed = (
                _request_mirror(message)
                if isinstance(message, ModelRequest)
                else _response_mirror(message)
            )
            events.extend(
                Event.new(kind, payload, id=f"{key}:{index}", meta={META_KEY: {"message": key}})
                for index, (kind, payload) in enumerate(typed)
            )
        events.append(Event.new(MESSAGE, msgspec.Raw(raw), id=key))
    return events


# ---------------------------------------------------------------------------------------------
# Events to messages.


def _summary_request(summary: Message, marker: Event) -> bytes:
    """A compaction's summary as the JSON of a ``ModelRequest`` with one user prompt, stamped
    with the marker's time (so every load gives the same message)."""
    text = "\n\n".join(p.text for p in summary.parts if isinstance(p, TextPart))
    when = marker.time or _EPOCH
    return _message_json(ModelRequest(parts=[UserPromptPart(text, timestamp=when)], timestamp=when))


_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def history_json(events: Sequence[Event]) -> bytes:
    """The history ``events`` (a log in seq order) hold, as the JSON list
    ``ModelMessagesTypeAdapter`` reads: the :data:`MESSAGE` payloads as stored, after rewinds,
    from the latest compaction marker on (its summary first)."""
    kept: list[tuple[int, bytes]] = []  # (seq, one message's JSON)
    for event in live_events(events):
        if event.type == MESSAGE:
            kept.append((event.seq, bytes(event.data)))
        elif event.type == COMPACTION:
            marker = compaction_of(event)
            if marker is None:
                continue
            first = marker.first_kept_seq or (marker.before_seq + 1 if marker.before_seq else 0)
            if not first and marker.retained_tail:
                first = event.seq  # kept messages it alone carries: none of ours
            retained = [entry for entry in kept if entry[0] >= first] if first else []
            if marker.summary is not None:
                retained.insert(0, (event.seq, _summary_request(marker.summary, event)))
            kept = retained
    return b"[" + b",".join(raw for _, raw in kept) + b"]"


def history_from_events(events: Sequence[Event]) -> list[ModelMessage]:
    """The Pydantic AI messages ``events`` hold (see :func:`history_json`)."""
    return ModelMessagesTypeAdapter.validate_json(history_json(events))


# ---------------------------------------------------------------------------------------------
# Async stores wrapping a sync one: one per store in the process, on a shared thread pool.

_lock = threading.Lock()
_pool: concurrent.futures.ThreadPoolExecutor | None = None
_wrappers: weakref.WeakValueDictionary[int, AsyncStore] = weakref.WeakValueDictionary()


def _after_fork_in_child() -> None:
    global _pool, _lock
    _pool = None
    _lock = threading.Lock()
    _wrappers.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _wrapper(store: BaseStore) -> AsyncStore:
    """The async store of ``store`` in this process (one per store, never closed here)."""
    global _pool
    with _lock:
        wrapper = _wrappers.get(id(store))
        if wrapper is None or wrapper.sync is not store:
            if _pool is None:
                _pool = concurrent.futures.ThreadPoolExecutor(
                    thread_name_prefix="agentsession-pydantic-ai"
                )
            wrapper = _wrappers[id(store)] = AsyncStore(store, executor=_pool)
        return wrapper


def _run_of(result: Any) -> tuple[list[ModelMessage], str | None]:
    """The new messages and run id of a run's result (``AgentRunResult``, an ``AgentRun``, a
    streamed run's result)."""
    new_messages = getattr(result, "new_messages", None)
    if not callable(new_messages):
        raise UsageError(
            f"save() takes a Pydantic AI run's result (with new_messages()), not "
            f"{type(result).__name__}; use save_new() for a list of messages"
        )
    run_id = getattr(result, "run_id", None)
    return list(new_messages()), run_id if isinstance(run_id, str) and run_id else None


class MessageStore:
    """A Pydantic AI conversation in an agentsession session: :meth:`load` gives the
    ``message_history`` of the next run, :meth:`save` stores what a run added.

    ``session_id`` is the agentsession session id (any id the store accepts). ``store`` is a
    URL or a path (opened with :func:`agentsession.open_store` and closed by :meth:`close`), a
    sync :class:`~agentsession.BaseStore` or an :class:`~agentsession.aio.AsyncStore` (both
    left open by :meth:`close`). ``mirror_messages`` (default True) also writes the typed events
    that make the conversation visible to ``messages()``, the command line and the viewer.

    Every method has an async twin (:meth:`aload`, :meth:`asave`, ...), for code on an event
    loop; safe to share between threads, and between processes through a store they share
    (JSONL, SQLite, PostgreSQL). See the module's docstring for the log it writes."""

    session_id: str
    """The session id in the store."""

    def __init__(
        self, session_id: str, store: StoreTarget, *, mirror_messages: bool = True
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise UsageError(f"session_id must be a non-empty string, not {session_id!r}")
        self.session_id = session_id
        self._mirror = bool(mirror_messages)
        self._async: AsyncStore | None = None
        self._owned = False
        if isinstance(store, AsyncStore):
            self._sync, self._async = store.sync, store
        elif isinstance(store, BaseStore):
            self._sync = store
        elif isinstance(store, (str, os.PathLike)):
            self._sync = open_store(os.fspath(store))
            self._owned = True
        else:
            raise UsageError(
                f"store must be a URL, a path, a BaseStore or an AsyncStore, not {store!r}"
            )
        self._closed = False

    # -- the store ----------------------------------------------------------------------------

    @property
    def store(self) -> BaseStore:
        """The sync store the conversation lives in."""
        return self._sync

    def _check(self) -> None:
        if self._closed:
            raise UsageError(f"MessageStore {self.session_id!r} is closed")

    def log(self) -> BaseSession:
        """The agentsession session holding the conversation (to read its events, say)."""
        self._check()
        return self._sync.get(self.session_id)

    async def alog(self) -> AsyncSession:
        """:meth:`log` as the async session."""
        self._check()
        if self._async is None:
            self._async = _wrapper(self._sync)
        return await self._async.get(self.session_id)

    def close(self) -> None:
        """Close a store opened from a URL or path (a store object passed in stays open);
        using this object afterwards raises :class:`~agentsession.errors.UsageError`. In async
        code prefer :meth:`aclose`, which also closes what the store opened on the event loop
        (PostgreSQL's async connection pool)."""
        if self._closed:
            return
        self._closed = True
        if not self._owned:
            return
        if self._async is not None:
            try:
                asyncio.get_running_loop()
            except RuntimeError:  # no loop in this thread: close the async parts on one
                asyncio.run(self._async.close())
                return
        self._sync.close()

    async def aclose(self) -> None:
        """:meth:`close` for async code: a store opened here is closed with
        :meth:`AsyncStore.close <agentsession.aio.AsyncStore.close>` (off the event loop, with
        its native connection pool)."""
        if self._closed:
            return
        self._closed = True
        if not self._owned:
            return
        if self._async is None:
            self._async = _wrapper(self._sync)
        await self._async.close()

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> MessageStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- reading ------------------------------------------------------------------------------

    def load_json(self) -> bytes:
        """The history as the JSON list ``ModelMessagesTypeAdapter`` reads: each message's
        JSON exactly as it was saved (a compaction's summary as a ``ModelRequest``)."""
        return history_json(self.log().read())

    async def aload_json(self) -> bytes:
        """:meth:`load_json` for async code."""
        return history_json(await (await self.alog()).read())

    def load(self) -> list[ModelMessage]:
        """The history to pass as ``message_history``: every message saved, after rewinds and
        from the latest compaction on (see the module's docstring)."""
        return ModelMessagesTypeAdapter.validate_json(self.load_json())

    async def aload(self) -> list[ModelMessage]:
        """:meth:`load` for async code."""
        return ModelMessagesTypeAdapter.validate_json(await self.aload_json())

    # -- writing ------------------------------------------------------------------------------

    def save(self, result: Any) -> int:
        """Store a run's new messages (``result.new_messages()``, keyed by ``result.run_id``)
        and return how many were not stored before. ``result`` is what ``agent.run`` or
        ``run_sync`` returned, a streamed run's result, or an ``AgentRun`` of ``agent.iter()``
        (saved after each node, a run killed mid-tool keeps its pending call)."""
        messages, run_id = _run_of(result)
        return self.save_new(messages, run_id=run_id)

    async def asave(self, result: Any) -> int:
        """:meth:`save` for async code."""
        messages, run_id = _run_of(result)
        return await self.asave_new(messages, run_id=run_id)

    def save_new(self, messages: Sequence[ModelMessage], *, run_id: str | None = None) -> int:
        """Store ``messages`` (a run's ``new_messages()``) in one atomic write and return how
        many were not stored before: a message saved earlier (same run id and JSON, see the
        module's docstring) is skipped. ``run_id`` keys the messages that carry none."""
        events = events_for(messages, run_id=run_id, mirror=self._mirror)
        if not events:
            self._check()
            return 0
        session = self.log()
        before = session.latest_seq
        seqs = session.append_many(events)
        return _stored(events, seqs, before)

    async def asave_new(
        self, messages: Sequence[ModelMessage], *, run_id: str | None = None
    ) -> int:
        """:meth:`save_new` for async code."""
        events = events_for(messages, run_id=run_id, mirror=self._mirror)
        session = await self.alog()
        if not events:
            return 0
        before = await session.latest_seq()
        seqs = await session.append_many(events)
        return _stored(events, seqs, before)

    def __repr__(self) -> str:
        return f"<MessageStore {self.session_id!r} at {self._sync.location}>"


def _stored(events: Sequence[Event], seqs: Sequence[int], before: int) -> int:
    """How many :data:`MESSAGE` events of a batch were stored new (seq after ``before``)."""
    return sum(
        1 for event, seq in zip(events, seqs, strict=True) if event.type == MESSAGE and seq > before
    )
