"""The OpenAI Agents SDK's ``Session`` over any agentsession store (the ``openai-agents`` extra).

::

    from agents import Agent, Runner
    from agentsession.integrations.openai_agents import OpenAIAgentsSession

    session = OpenAIAgentsSession("user-42", store="sessions/")   # or sqlite:///, postgresql://
    result = await Runner.run(Agent(name="helper"), "Hello", session=session)

:class:`OpenAIAgentsSession` implements the SDK's ``Session`` protocol (``get_items``,
``add_items``, ``pop_item``, ``clear_session``, ``session_id``, ``session_settings``) and
behaves as the SDK's ``SQLiteSession`` does, on any store: memory, JSONL, SQLite, PostgreSQL,
encrypted or not. Its async methods are calls of :mod:`agentsession.aio`.

**The log.** Every item is one event ``openai_agents/item`` whose payload is the item's JSON,
so :meth:`~OpenAIAgentsSession.get_items` returns it exactly as it was added. Popping an item
appends ``openai_agents/pop`` (naming the popped item's seq) and clearing appends
``openai_agents/clear``: nothing is ever deleted, and the item list is derived from the log
(from these events alone, as in logs written before pops wrote rewind markers). A
pop is a conditional append (``append_many(..., expect_seq=)``) made against the item list it
was decided on, so of two processes popping at once each gets a different item (or None),
and an item added meanwhile is never popped unseen.

**The typed mirror.** Each ``add_items`` batch also carries, after its items, agentsession's
typed events for them (:func:`agentsession.providers.from_openai_responses_input`), each right
after the last item it was read from: user and
system messages as ``user/message``, the assistant's messages, reasoning and function calls as
``assistant/message``, each ``function_call_output`` as a ``tool/result``. So the session's
``messages()``, ``agentsession show`` and ``messages``, the viewer and the provider converters
see the conversation, and a function call that never got its output (a run killed mid-tool)
has the interrupted stand-in there. The built-in tools' items, custom tool calls and item
references have no neutral form and are in the item list only. A pop appends, in the same
conditional batch, a ``session/rewind`` marker (kind :data:`REWIND_KIND`) to the seq before the
popped item, so the derived history is again the one from before the item was added (and the
viewer and ``agentsession show`` show the pop as a rewind); where that history would not be the
mirror of the remaining items (a compaction marker after the item, or a message read from it
and the live item right before it), and at a clear, a compaction marker (kind ``prune``,
``meta["openai_agents"]`` naming the pop or the clear) is appended instead, after which the
derived history is the mirror of the items that remain (nothing after a clear). So what
``messages()`` shows never disagrees with ``get_items()``. Such a pop's marker carries the
remaining items' messages, so it costs O(items) to write; a rewind marker costs O(1).
``record_usage(result)`` stores a run's token usage as ``usage`` events.
``mirror_messages=False`` writes the items alone (``messages()`` is then empty). Sessions
written before the mirror existed have none for their earlier items.

**Reading** keeps the live items' JSON in memory and reads only the events appended since the
last call; ``get_items(limit=n)`` on a new object reads the log backwards from its end until it
has ``n`` live items, so it costs O(n) however long the session is.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Union, cast

import msgspec

from ..aio import AsyncSession, AsyncStore
from ..backoff import Backoff
from ..codec import decode, encode
from ..compaction import COMPACTION_EFFECT_KIND
from ..errors import ConflictError, UsageError
from ..events import (
    ASSISTANT_MESSAGE,
    COMPACTION,
    REWIND_REVISION,
    SESSION_REWIND,
    TOOL_RESULT,
    USAGE,
    USER_MESSAGE,
    Compaction,
    Event,
    SessionRewind,
    Usage,
)
from ..messages import Message
from ..providers.openai_responses import from_openai_responses_input, input_messages_with_ends
from ..store import BaseStore, open_store

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import SessionSettings

__all__ = [
    "CLEAR",
    "COMPACTION_EFFECT",
    "ITEM",
    "META_KEY",
    "POP",
    "REWIND_KIND",
    "OpenAIAgentsSession",
]

COMPACTION_EFFECT: Final = (
    "the OpenAI Agents SDK sends its item list (openai_agents/item events), which a "
    "compaction does not shorten: it shortens messages() and what agentsession shows only; "
    "use the SDK's own compaction session to shorten what the model is sent"
)
"""What ``agentsession compact`` prints for a session of this integration (meta namespace
:data:`agentsession.compaction.COMPACTION_EFFECT_KIND`, key ``openai_agents``)."""
_EFFECT_NOTED: weakref.WeakSet[BaseStore] = weakref.WeakSet()

ITEM: Final = "openai_agents/item"
"""Event type of one item added to the session; its payload is the item's JSON."""
POP: Final = "openai_agents/pop"
"""Event type of a pop: ``{"itemSeq": n}``, the seq of the ``openai_agents/item`` removed."""
CLEAR: Final = "openai_agents/clear"
"""Event type of ``clear_session()``: every item before it is gone from the item list."""
REWIND_KIND: Final = "openai.pop"
"""The ``kind`` of the ``session/rewind`` marker a pop appends after its ``openai_agents/pop``
(to the seq before the popped item), so that the derived history loses the item too."""

_POP_TRIES = 1000
"""How often ``pop_item`` decides again when other writers keep appending first."""
_FIRST_SPAN = 64
"""Events read by the first backward read of a new object's ``get_items(limit=n)``, at least."""

StoreTarget = Union[str, "os.PathLike[str]", BaseStore, AsyncStore]
"""What ``store=`` takes: a URL or path for :func:`agentsession.open_store`, or an open store."""


_Json = msgspec.Raw
"""An item's JSON as stored (a view of the bytes read, never copied)."""


class _Pop(msgspec.Struct, frozen=True, rename="camel"):
    item_seq: int


_pop_decoder = msgspec.json.Decoder(_Pop)

META_KEY: Final = "openai_agents"
"""The ``meta`` key of the compaction markers that mirror a pop (``{"pop": item_seq}``) or a
clear (``{"clear": true}``)."""


def _with_mirror(items: Sequence[Any], raws: Sequence[_Json]) -> list[Event]:
    """The ``openai_agents/item`` events of ``items`` (stored as ``raws``), each message of
    the typed mirror right after the last item it was read from (so that reading the log
    backwards for the latest items reads about two events per item). When the items cannot be
    read as messages there is no mirror: the items themselves are stored whatever they hold."""
    try:
        messages = input_messages_with_ends(items)
    except (UsageError, ValueError, TypeError):
        messages = []
    after: dict[int, list[Event]] = {}
    for message, end in messages:
        mirrored = after.setdefault(end, [])
        if message.role == "assistant":
            mirrored.append(Event.new(ASSISTANT_MESSAGE, message))
        elif message.role == "tool":
            mirrored.extend(Event.new(TOOL_RESULT, result) for result in message.tool_results)
        else:
            mirrored.append(Event.new(USER_MESSAGE, message))
    events: list[Event] = []
    for index, raw in enumerate(raws):
        events.append(Event.new(ITEM, raw))
        events.extend(after.get(index, ()))
    return events


def _rebuild(raws: Sequence[_Json], at_seq: int, meta: Mapping[str, Any]) -> Event:
    """A marker at seq ``at_seq`` after which the derived history is the mirror of the items
    ``raws`` (none: an empty history)."""
    tail: list[Message] = []
    if raws:
        try:
            tail = from_openai_responses_input(_decode_items(raws))
        except (UsageError, ValueError, TypeError):
            tail = []
    marker = Compaction(first_kept_seq=at_seq, retained_tail=tail, kind="prune")
    return Event.new(COMPACTION, marker, meta={META_KEY: dict(meta)})


def _usage(value: Any) -> Usage | None:
    """An SDK ``Usage`` (``agents.usage.Usage``, or a response's) as a ``usage`` payload."""
    if value is None:
        return None
    given = getattr(value, "input_tokens_details", None)
    made = getattr(value, "output_tokens_details", None)
    return Usage(
        input_tokens=int(getattr(value, "input_tokens", 0) or 0),
        output_tokens=int(getattr(value, "output_tokens", 0) or 0),
        total_tokens=int(getattr(value, "total_tokens", 0) or 0),
        cache_read_tokens=int(getattr(given, "cached_tokens", 0) or 0),
        cache_write_tokens=int(getattr(given, "cache_write_tokens", 0) or 0),
        reasoning_tokens=int(getattr(made, "reasoning_tokens", 0) or 0),
    )


async def _contend(backoff: Backoff) -> None:
    """The pause before the current try of a conditional append that other writers keep
    beating (:meth:`agentsession.backoff.Backoff.contention_pause`)."""
    if pause := backoff.contention_pause():
        await asyncio.sleep(pause)


# ---------------------------------------------------------------------------------------------
# Stores opened from a URL or path: one per target in the process, shared by the sessions that
# name it (one connection pool, one session cache), closed when the last of them closes.

_shared_lock = threading.Lock()
_shared: dict[str, tuple[AsyncStore, int]] = {}
_executor: concurrent.futures.ThreadPoolExecutor | None = None


def _thread_pool() -> concurrent.futures.ThreadPoolExecutor:
    """The worker threads of every store this module wraps (created on first use)."""
    with _shared_lock:
        return _thread_pool_locked()


def _thread_pool_locked() -> concurrent.futures.ThreadPoolExecutor:
    global _executor
    if _executor is None:
        # Sized as asyncio's default executor (and as an AsyncStore's own pool).
        _executor = concurrent.futures.ThreadPoolExecutor(
            thread_name_prefix="agentsession-openai-agents"
        )
    return _executor


def _after_fork_in_child() -> None:
    # The parent's worker threads and its shared stores' connections are not ours to use.
    global _executor, _shared_lock
    _executor = None
    _shared_lock = threading.Lock()
    _shared.clear()
    _wrappers.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _reuse_shared_locked(target: str) -> AsyncStore | None:
    """The open shared store of ``target``, with one more user (called with the lock held)."""
    entry = _shared.get(target)
    if entry is None or entry[0].closed:
        return None
    _shared[target] = (entry[0], entry[1] + 1)
    return entry[0]


def _acquire_shared(target: str) -> AsyncStore:
    with _shared_lock:
        store = _reuse_shared_locked(target)
    if store is not None:
        return store
    opened = AsyncStore(open_store(target), executor=_thread_pool())  # outside the lock: I/O
    with _shared_lock:
        store = _reuse_shared_locked(target)  # another thread opened it meanwhile
        if store is None:
            _shared[target] = (opened, 1)
            return opened
    opened.sync.close()
    return store


def _release_shared(target: str, store: AsyncStore) -> AsyncStore | None:
    """Drop one user of a shared store; returns it when that was the last (to be closed)."""
    with _shared_lock:
        entry = _shared.get(target)
        if entry is None or entry[0] is not store:
            return None
        if entry[1] > 1:
            _shared[target] = (store, entry[1] - 1)
            return None
        del _shared[target]
    return store


def _close_shared(target: str, store: AsyncStore) -> None:
    last = _release_shared(target, store)
    if last is not None:
        _close_from_sync(last)


def _close_from_sync(store: AsyncStore) -> None:
    """Close ``store`` from sync code. Where no event loop runs in this thread, with
    :meth:`AsyncStore.close` on a loop of its own, which also closes what the store opened on
    another loop (PostgreSQL's async pool, on a loop such as ``Runner.run_sync``'s that may
    never run again, whose tasks would be destroyed pending at exit); else (and when the
    interpreter is shutting down) the sync store only: the pool then closes with its loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(store.close())
            return
        except RuntimeError:
            pass  # no worker thread can start any more (the interpreter is exiting)
        finally:
            loop.close()
    store.sync.close()


_wrappers: weakref.WeakValueDictionary[int, AsyncStore] = weakref.WeakValueDictionary()


def _wrapper(store: BaseStore) -> AsyncStore:
    """The one async store of a sync store in this process (one thread pool and, where the
    backend has a native async path, one connection pool for every session using it)."""
    with _shared_lock:
        wrapper = _wrappers.get(id(store))
        if wrapper is None or wrapper.sync is not store:
            wrapper = _wrappers[id(store)] = AsyncStore(store, executor=_thread_pool_locked())
        return wrapper


# ---------------------------------------------------------------------------------------------


def _settings(value: SessionSettings | Mapping[str, Any] | None) -> SessionSettings:
    from agents.memory import SessionSettings

    if value is None:
        return SessionSettings()
    if isinstance(value, SessionSettings):
        return value
    if isinstance(value, Mapping):
        return SessionSettings(**value)
    raise UsageError(f"session_settings must be a SessionSettings or a dict, not {value!r}")


_GC_PAUSE_ITEMS: Final = 256
"""From this many items on, a decode pauses the cycle collector (see :func:`_decode_items`)."""


def _decode_items(raws: Sequence[_Json]) -> list[TResponseInputItem]:
    """Fresh item objects from their stored JSON, decoded in one call."""
    if not raws:
        return []
    joined = b"[" + b",".join(raws) + b"]"
    # Decoding builds one container per item and per nested object: thousands of them, which
    # would set off the cycle collector again and again (each pass scanning everything built
    # so far) although none of them can be garbage yet: it is paused for the one call.
    enabled = gc.isenabled()
    if enabled and len(raws) >= _GC_PAUSE_ITEMS:
        gc.disable()
        try:
            return cast("list[TResponseInputItem]", decode(joined))
        finally:
            gc.enable()
    return cast("list[TResponseInputItem]", decode(joined))


async def _note_compaction_effect(store: AsyncStore) -> None:
    """Record in ``store`` what a compaction does not change for these sessions (read by
    ``agentsession compact``), unless it is there already."""
    key = ITEM.split("/", 1)[0]
    if await store.meta_get(COMPACTION_EFFECT_KIND, key) != COMPACTION_EFFECT:
        await store.meta_set(COMPACTION_EFFECT_KIND, key, COMPACTION_EFFECT)
    _EFFECT_NOTED.add(store.sync)


class OpenAIAgentsSession:
    """The OpenAI Agents SDK's ``Session`` protocol over an agentsession store: pass it to
    ``Runner.run(..., session=...)`` as you would a ``SQLiteSession``.

    ``session_id`` is the agentsession session id (any id the store accepts). ``store`` is a
    URL or a path (opened with :func:`agentsession.open_store`; every session of this process
    naming the same target shares one store, closed when the last of them is closed), a sync
    :class:`~agentsession.BaseStore` or an :class:`~agentsession.aio.AsyncStore` (left open by
    :meth:`close`). ``session_settings`` (a ``SessionSettings`` or its dict) sets the default
    ``limit`` of :meth:`get_items`, as for the SDK's sessions. ``mirror_messages`` (default
    True) also writes the typed events that make the conversation visible to ``messages()``,
    the command line and the viewer.

    Safe to share between tasks, threads and event loops, and between processes through a
    store they share (JSONL, SQLite, PostgreSQL). See the module's docstring for the log it
    writes."""

    session_id: str
    """The session id, in the store and for the SDK."""

    def __init__(
        self,
        session_id: str,
        store: StoreTarget,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        *,
        mirror_messages: bool = True,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise UsageError(f"session_id must be a non-empty string, not {session_id!r}")
        self.session_id = session_id
        self._mirror = bool(mirror_messages)
        # Made on first use: importing the SDK takes seconds, and a session that only stores
        # items (a worker, a script) need not pay for it.
        self._settings = None if session_settings is None else _settings(session_settings)
        self._shared_target: str | None = None
        if isinstance(store, AsyncStore):
            self._store = store
        elif isinstance(store, BaseStore):
            self._store = _wrapper(store)
        elif isinstance(store, (str, os.PathLike)):
            target = os.fspath(store)
            self._store = _acquire_shared(target)
            self._shared_target = target
        else:
            raise UsageError(
                f"store must be a URL, a path, a BaseStore or an AsyncStore, not {store!r}"
            )
        self._release = (
            weakref.finalize(self, _close_shared, self._shared_target, self._store)
            if self._shared_target is not None
            else None
        )
        self._session: AsyncSession | None = None
        self._closed = False
        # The item list, as of event seq ``_seen`` (-1: nothing read yet): the seqs and JSON
        # of the live items above ``_floor``; below it nothing was read yet unless
        # ``_complete``. ``_pending`` holds items popped by events above the floor that lie
        # below it.
        self._lock = threading.Lock()
        self._seqs: list[int] = []
        self._raws: list[_Json] = []
        self._seen = -1
        self._floor = 0
        self._complete = False
        self._pending: set[int] = set()
        # The seq of the latest compaction marker among the events read (0: none): a pop's
        # rewind marker never goes back past it.
        self._compacted = 0

    @property
    def session_settings(self) -> SessionSettings | None:
        """The SDK's session settings: ``limit`` is :meth:`get_items`' default (a
        ``SessionSettings()`` when none were given, as ``SQLiteSession`` has)."""
        if self._settings is None:
            self._settings = _settings(None)
        return self._settings

    @session_settings.setter
    def session_settings(self, value: SessionSettings | Mapping[str, Any] | None) -> None:
        self._settings = None if value is None else _settings(value)

    # -- the store ----------------------------------------------------------------------------

    @property
    def store(self) -> AsyncStore:
        """The async store the items live in."""
        return self._store

    async def log(self) -> AsyncSession:
        """The agentsession session whose log holds the items (to read its events, say)."""
        if self._closed:
            raise UsageError(f"OpenAIAgentsSession {self.session_id!r} is closed")
        session = self._session
        if session is None:
            session = self._session = await self._store.get(self.session_id)
            if self._store.sync not in _EFFECT_NOTED:  # once per store and process
                await _note_compaction_effect(self._store)
        return session

    def close(self) -> None:
        """Forget the session; a store opened from a URL or path is closed with the last
        session using it. Using the session afterwards raises
        :class:`~agentsession.errors.UsageError`; closing twice is harmless. In async code
        prefer :meth:`aclose`, which also closes what the store opened on the event loop
        (PostgreSQL's async connection pool)."""
        self._closed = True
        self._session = None
        if self._release is not None:
            self._release()

    async def aclose(self) -> None:
        """:meth:`close`, closing a store this was the last user of with
        :meth:`AsyncStore.close <agentsession.aio.AsyncStore.close>`."""
        self._closed = True
        self._session = None
        if self._release is not None and self._release.detach() is not None:
            assert self._shared_target is not None
            last = _release_shared(self._shared_target, self._store)
            if last is not None:
                await last.close()

    # -- the item list --------------------------------------------------------------------

    def _apply(self, events: Sequence[Event]) -> None:
        """Take in events after ``_seen`` (called with ``_lock`` held)."""
        seen = self._seen
        seqs, raws = self._seqs, self._raws
        add_seq, add_raw = seqs.append, raws.append
        for event in events:
            seq = event.seq
            if seq <= seen:
                continue
            kind = event.type
            if kind == ITEM:
                add_seq(seq)
                add_raw(event.data)  # msgspec.Raw: the stored bytes, not copied
            elif kind == POP:
                self._remove(self._popped(event))
            elif kind == CLEAR:
                seqs.clear()
                raws.clear()
                self._pending.clear()
                self._complete = True
            elif kind == COMPACTION:
                self._compacted = max(self._compacted, seq)
            seen = seq
        self._seen = seen

    @staticmethod
    def _popped(event: Event) -> int:
        try:
            return _pop_decoder.decode(event.data).item_seq
        except msgspec.DecodeError:
            return 0  # not ours to understand: removes nothing

    def _remove(self, item_seq: int) -> None:
        seqs = self._seqs
        for index in range(len(seqs) - 1, -1, -1):
            if seqs[index] == item_seq:
                del seqs[index]
                del self._raws[index]
                return
            if seqs[index] < item_seq:
                break
        if not self._complete and 0 < item_seq <= self._floor:
            self._pending.add(item_seq)

    def _apply_older(self, floor: int, events: Sequence[Event], new_floor: int) -> None:
        """Take in the events with ``new_floor < seq <= floor``, read backwards from the floor
        (nothing when another reader moved the floor meanwhile; called with ``_lock`` held)."""
        if self._complete or self._floor != floor:
            return
        older_seqs: list[int] = []
        older_raws: list[_Json] = []
        pending = self._pending
        for event in reversed(events):
            seq = event.seq
            if not new_floor < seq <= floor:
                continue
            kind = event.type
            if kind == ITEM:
                if seq in pending:
                    pending.discard(seq)
                else:
                    older_seqs.append(seq)
                    older_raws.append(event.data)
            elif kind == POP:
                pending.add(self._popped(event))
            elif kind == COMPACTION:
                self._compacted = max(self._compacted, seq)
            elif kind == CLEAR:
                self._complete = True
                break
        older_seqs.reverse()
        older_raws.reverse()
        self._seqs[:0] = older_seqs
        self._raws[:0] = older_raws
        self._floor = new_floor
        if new_floor == 0:
            self._complete = True
        if self._complete:
            pending.clear()

    async def _live(self, want: int | None) -> tuple[list[_Json], list[int], int, int]:
        """The live items' JSON (all of them, or the latest ``want``), caught up with the log;
        with their seqs, the seq of the log they reflect and that of its latest compaction
        marker after the first of them (0: none; an earlier one may show too)."""
        session = await self.log()
        if self._seen < 0 and want is None:
            events = await session.read()
            with self._lock:
                if self._seen < 0:
                    self._floor, self._complete = 0, True
                    self._seen = 0
                self._apply(events)
        elif self._seen < 0:
            latest = await session.latest_seq()
            with self._lock:
                if self._seen < 0:
                    self._seen = self._floor = latest
                    self._complete = latest == 0
        else:
            events = await session.read(after=self._seen)
            if events:
                with self._lock:
                    self._apply(events)
        span = max(_FIRST_SPAN, 2 * (want or 0))
        while True:
            with self._lock:
                raws = self._raws
                if self._complete or (want is not None and len(raws) >= want):
                    if want is None:
                        return raws[:], self._seqs[:], self._seen, self._compacted
                    return raws[-want:], self._seqs[-want:], self._seen, self._compacted
                floor = self._floor
            after = 0 if want is None else max(0, floor - span)
            events = await session.read(after=after, limit=floor - after)
            with self._lock:
                self._apply_older(floor, events, after)
            span *= 2

    # -- the Session protocol -----------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The items in the order they were added: the latest ``limit`` of them (default:
        ``session_settings.limit``; None: all). As the SDK's ``SQLiteSession``, a limit of 0
        gives none and a negative limit all of them."""
        if limit is None and self._settings is not None:
            limit = self._settings.limit
        want = None if limit is None or limit < 0 else limit
        if want == 0:
            await self.log()  # raises when closed, as every other call
            return []
        raws, _, _, _ = await self._live(want)
        return _decode_items(raws)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items, in one atomic write (one event each)."""
        session = await self.log()
        if not items:
            return
        raws = [msgspec.Raw(encode(item)) for item in items]
        if self._mirror:
            events = _with_mirror(items, raws)
        else:
            events = [Event.new(ITEM, raw) for raw in raws]
        if len(events) == 1:
            seqs = [await session.append(events[0])]
        else:
            seqs = await session.append_many(events)
        with self._lock:
            if self._seen == seqs[0] - 1:  # nothing else happened since we last looked
                self._seqs.extend(s for s, e in zip(seqs, events, strict=True) if e.type == ITEM)
                self._raws.extend(raws)
                self._seen = seqs[-1]

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the most recent item and return it (None when there is none).

        Appends ``openai_agents/pop`` and, in the same write, what takes the item out of the
        derived history: a ``session/rewind`` marker (kind ``openai.pop``) to the seq before
        the item, or, where the history cannot go back there (a compaction marker after the
        item, or a mirrored message read from the item and the one before it), the mirror's
        compaction marker. The write is made only if the log still ends where the item list
        it read ends; when another writer appended first, it reads again and decides again,
        so concurrent pops (in any process) each get a different item."""
        session = await self.log()
        backoff = Backoff(tries=_POP_TRIES)
        while backoff.next_try():
            await _contend(backoff)
            raws, seqs, base, compacted = await self._live(2 if self._mirror else 1)
            if not raws:
                return None
            events = self._pop_events(seqs, compacted)
            if events is None:
                # The mirror's marker carries the items that remain: it needs all of them.
                raws, seqs, base, _ = await self._live(None)
                if not raws:
                    return None
                events = [
                    Event.new(POP, _Pop(seqs[-1])),
                    _rebuild(raws[:-1], base + 2, {"pop": seqs[-1]}),
                ]
            try:
                written = await session.append_many(events, expect_seq=base)
            except ConflictError:
                continue
            with self._lock:
                if self._seen == base:
                    self._remove(seqs[-1])
                    self._seen = written[-1]
                    if events[-1].type == COMPACTION:
                        self._compacted = written[-1]
            return cast("TResponseInputItem", decode(raws[-1]))
        raise ConflictError(
            f"session {self.session_id!r}: other writers kept appending while pop_item "
            f"decided ({_POP_TRIES} tries)"
        )

    def _pop_events(self, seqs: Sequence[int], compacted: int) -> list[Event] | None:
        """What a pop of the item at ``seqs[-1]`` appends when a rewind marker can take it out
        of the derived history (``seqs``: the latest live items' seqs, two of them with the
        mirror; ``compacted``: the latest compaction marker's seq). None when the mirror's
        compaction marker is needed instead: a compaction marker lies after the item (a rewind
        never goes back past one), or the item right before it in the log is a live item with
        no mirrored message between them, so a message after the popped item may have been
        read from both (an assistant's reasoning and reply, say) and would be lost whole.
        Without the mirror, only the ``openai_agents/pop`` then."""
        item_seq = seqs[-1]
        pop = Event.new(POP, _Pop(item_seq))
        adjacent = len(seqs) > 1 and seqs[-2] == item_seq - 1
        if compacted >= item_seq or (self._mirror and adjacent):
            return None if self._mirror else [pop]
        marker = SessionRewind(
            to_seq=item_seq - 1, kind=REWIND_KIND, min_revision=REWIND_REVISION
        )
        return [pop, Event.new(SESSION_REWIND, marker)]

    async def clear_session(self) -> None:
        """Empty the item list: appends ``openai_agents/clear`` and the mirror's marker (the log
        keeps every event)."""
        session = await self.log()
        if not self._mirror:
            seq = await session.append(Event.new(CLEAR))
        else:  # the marker names its own seq: appended where the log ends, conditionally
            backoff = Backoff(tries=_POP_TRIES)
            while backoff.next_try():
                await _contend(backoff)
                base = await session.latest_seq()
                events = [Event.new(CLEAR), _rebuild((), base + 2, {"clear": True})]
                try:
                    seq = (await session.append_many(events, expect_seq=base))[-1]
                    break
                except ConflictError:
                    continue
            else:
                raise ConflictError(
                    f"session {self.session_id!r}: other writers kept appending while "
                    f"clear_session appended ({_POP_TRIES} tries)"
                )
        with self._lock:
            if self._seen < seq:  # what came before the clear no longer matters
                self._seqs.clear()
                self._raws.clear()
                self._pending.clear()
                self._seen = self._floor = seq
                self._complete = True
                if self._mirror:
                    self._compacted = seq

    async def record_usage(self, result: Any) -> int:
        """Store the token usage of a run as ``usage`` events, one per model response, and
        return how many were stored.

        ``result`` is what ``Runner.run``/``run_sync`` returned (or a streamed run's result
        once consumed): each of its ``raw_responses`` with a usage gives one event, whose id
        is derived from the response id, so recording the same result twice stores nothing
        the second time. An ``agents.usage.Usage`` (a run's total) gives one event."""
        session = await self.log()
        responses = getattr(result, "raw_responses", None)
        events: list[Event] = []
        if responses is None:
            usage = _usage(result)
            if usage is not None:
                events.append(Event.new(USAGE, usage))
        else:
            for response in responses:
                usage = _usage(getattr(response, "usage", None))
                if usage is None:
                    continue
                response_id = getattr(response, "response_id", None)
                key = f"openai_agents:usage:{response_id}" if response_id else None
                events.append(Event.new(USAGE, usage, id=key))
        if not events:
            return 0
        before = await session.latest_seq()
        seqs = await session.append_many(events)
        return sum(1 for seq in seqs if seq > before)

    def __repr__(self) -> str:
        return f"<OpenAIAgentsSession {self.session_id!r} at {self._store.location}>"
