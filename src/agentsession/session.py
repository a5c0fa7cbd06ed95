"""The Session and Store contracts, and the base classes every backend builds on.

A **session** is one conversation's append-only log. A **store** opens sessions by id and owns
what spans sessions. Backends implement a handful of storage primitives (``_storage_*``); the
base classes here hold everything else once: seq stamping, the in-memory window that opening
and compaction keep small, the incremental derived history, TTL, and the LRU cache of open
sessions.

The window: a session keeps in memory every event from its latest compaction marker to the
end (or the whole log when there is none). ``read()`` serves from it when it can and from
storage otherwise; ``messages()`` derives from it, loading older events only when a legacy
marker or another agent's history needs them.
"""

from __future__ import annotations

import bisect
import builtins
import datetime as _dt
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import msgspec

from .compaction import compact, prune
from .derive import Deriver, IndexedMessage
from .errors import SessionExpired, UsageError
from .events import COMPACTION, USER_MESSAGE, Compaction, Event, decode, utcnow
from .locks import Locker, TurnLock, _HeldRegistry
from .messages import Message
from .recorder import Turn

if TYPE_CHECKING:
    from types import TracebackType

    from .recovery import StoreRecoveryReport

__all__ = [
    "BaseSession",
    "BaseStore",
    "Durability",
    "Session",
    "SessionInfo",
    "Store",
]

Durability = Literal["flush", "fsync"]
"""What an acknowledged append survives.

``flush``: the data is in the operating system (or the database server) before ``append``
returns, so it survives the process crashing or being killed. ``fsync``: it is also on stable
storage, so it survives a power loss or kernel crash, at the cost of a disk sync per append.
"""

Clock = Callable[[], _dt.datetime]

DEFAULT_CLI_SESSION_ID = "cli:default"
"""The command line's session when none was chosen."""


class SessionInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A session as ``Store.list()`` reports it."""

    id: str
    """The session id."""
    updated_at: _dt.datetime | None = None
    """Time of the last append (UTC), when the backend knows it cheaply."""
    size: int = 0
    """Bytes used in storage, when the backend knows it (0 otherwise)."""
    last_seq: int = -1
    """Highest seq, when the backend knows it cheaply (-1 otherwise)."""


@runtime_checkable
class Session(Protocol):
    """One conversation's append-only event log."""

    @property
    def id(self) -> str:
        """The session id."""

    @property
    def latest_seq(self) -> int:
        """Highest seq in the log (0 when empty)."""

    def append(self, event: Event) -> int:
        """Append one event; returns its seq."""

    def append_many(self, events: Sequence[Event]) -> list[int]:
        """Append a batch atomically (all or nothing, consecutive seqs); returns the seqs."""

    def read(self, after: int = 0, limit: int | None = None) -> list[Event]:
        """Events with ``seq > after`` in seq order, at most ``limit`` of them."""

    def messages(self, agent: str | None = None) -> list[Message]:
        """The provider-valid, compaction-aware history (see :mod:`agentsession.derive`)."""


@runtime_checkable
class Store(Protocol):
    """Opens sessions by id and owns what spans sessions."""

    def get(self, session_id: str) -> Session:
        """The session with this id (it exists once something is appended)."""

    def exists(self, session_id: str) -> bool:
        """Whether the session has at least one event."""

    def list(
        self, prefix: str | None = None, limit: int | None = None, offset: int = 0
    ) -> list[SessionInfo]:
        """Sessions, most recently appended first."""

    def delete(self, session_id: str) -> bool:
        """Delete a session; returns whether it existed."""

    def close(self) -> None:
        """Release every resource the store holds."""


def check_session_id(session_id: object) -> str:
    """``session_id`` when it is a usable id; :class:`UsageError` otherwise."""
    if not isinstance(session_id, str):
        raise UsageError(f"session id must be a string, not {type(session_id).__name__}")
    if not session_id.strip():
        raise UsageError("session id is required (got an empty or blank string)")
    return session_id


def _seq_of(event: Event) -> int:
    return event.seq


class BaseSession:
    """Shared behaviour of every backend's session. Subclasses implement ``_storage_*``."""

    def __init__(self, store: BaseStore, session_id: str) -> None:
        self._store = store
        self._id = session_id
        self._lock = threading.RLock()
        self._window: list[Event] = []
        self._window_start = 1
        self._latest_seq = 0
        self._derivers: dict[str | None, Deriver] = {}

    # -- storage primitives (backends) ----------------------------------------------------

    def _storage_open(self) -> tuple[list[Event], bool]:
        """Events from the latest compaction marker to the end, and whether that is the whole
        log. Called with the session lock held."""
        raise NotImplementedError

    def _storage_append(self, events: list[Event]) -> tuple[list[Event], list[Event]]:
        """Persist ``events`` (seq unset) atomically after whatever is in storage now.

        Returns the events other writers appended since this session last looked, then the
        stored events with their seqs. Called with the session lock held.
        """
        raise NotImplementedError

    def _storage_refresh(self) -> list[Event]:
        """Events other writers appended since this session last looked."""
        raise NotImplementedError

    def _storage_read(self, after: int, limit: int | None) -> list[Event]:
        """Events with ``seq > after`` from storage."""
        raise NotImplementedError

    def _storage_close(self) -> None:
        """Release backend resources (the session stays usable and reopens them)."""

    @property
    def location(self) -> str:
        """Where the session is stored, for people (a path, a URL, ``memory``)."""
        raise NotImplementedError

    # -- state ----------------------------------------------------------------------------

    def _load(self) -> None:
        """(Re)load the window from storage, forgetting everything derived."""
        events, complete = self._storage_open()
        self._window = events
        self._derivers = {}
        if events:
            self._latest_seq = events[-1].seq
            self._window_start = 1 if complete else events[0].seq
        else:
            self._latest_seq = 0
            self._window_start = 1

    def _reset(self) -> None:
        """Forget all state: the stored log was deleted or replaced underneath us."""
        self._window = []
        self._window_start = 1
        self._latest_seq = 0
        self._derivers = {}

    def _ingest(self, events: Sequence[Event]) -> None:
        if not events:
            return
        self._window.extend(events)
        self._latest_seq = events[-1].seq
        for event in events:
            if event.type == COMPACTION:
                self._trim_at(event)

    def _trim_at(self, marker: Event) -> None:
        """Drop window events before a compaction marker that rebuilds history on its own."""
        try:
            data = decode(marker.data, Compaction)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        if not (data.first_kept_seq or data.retained_tail):
            return
        # Derivers of other agents still need the events the marker hides from them.
        for deriver in self._derivers.values():
            start = bisect.bisect_right(self._window, deriver.last_seq, key=_seq_of)
            if not deriver.feed_all(self._window[start:]):
                self._derivers = {}
                break
        index = bisect.bisect_left(self._window, marker.seq, key=_seq_of)
        del self._window[:index]
        self._window_start = marker.seq

    def _ensure_window_from(self, seq: int) -> None:
        """Make the window hold every event from ``seq`` on."""
        if self._window_start <= max(seq, 1):
            return
        older = [e for e in self._storage_read(max(seq, 1) - 1, None) if e.seq < self._window_start]
        self._window[:0] = older
        self._window_start = max(seq, 1)

    def _refresh(self) -> None:
        self._ingest(self._storage_refresh())

    def _check_ttl(self) -> None:
        """Raise :class:`SessionExpired` when the last append is older than the store's TTL."""
        ttl = self._store.ttl
        if ttl is None or not self._window:
            return
        last = self._window[-1].time
        if last is not None and self._store.clock() - last > ttl:
            raise SessionExpired(
                self._id,
                f"session {self._id!r} expired: last append at {last.isoformat()} is older "
                f"than the store's TTL of {ttl}",
            )

    # -- the Session API ------------------------------------------------------------------

    @property
    def id(self) -> str:
        """The session id."""
        return self._id

    @property
    def latest_seq(self) -> int:
        """Highest seq in the log (0 when empty), including other writers' appends."""
        with self._lock:
            self._refresh()
            return self._latest_seq

    def append(self, event: Event) -> int:
        """Append one event; returns its seq. ``time`` is stamped (UTC) when unset."""
        return self.append_many((event,))[0]

    def append_many(self, events: Sequence[Event]) -> list[int]:
        """Append a batch atomically: all events or none, with consecutive seqs."""
        if isinstance(events, Event):
            raise UsageError("append_many takes a sequence of events; use append for one")
        batch = list(events)
        if not batch:
            return []
        now = self._store.clock()
        prepared: list[Event] = []
        for event in batch:
            if not isinstance(event, Event):
                raise UsageError(
                    f"session {self._id!r}: can only append Event objects, "
                    f"not {type(event).__name__}"
                )
            if not event.type:
                raise UsageError(f"session {self._id!r}: an event needs a type")
            if event.time is None or event.seq:
                event = msgspec.structs.replace(event, seq=0, time=event.time or now)
            prepared.append(event)
        with self._lock:
            if self._store.ttl is not None:
                try:
                    self._check_ttl()
                except SessionExpired:
                    self._refresh()  # another process may have appended since
                    self._check_ttl()
            foreign, stored = self._storage_append(prepared)
            self._ingest(foreign)
            self._ingest(stored)
            if self._store.max_messages:
                self._after_append(stored)
        return [event.seq for event in stored]

    def read(self, after: int = 0, limit: int | None = None) -> list[Event]:
        """Events with ``seq > after`` in seq order, at most ``limit`` (all when None)."""
        if after < 0:
            raise UsageError(f"read(after={after}): after must be >= 0")
        if limit is not None and limit < 0:
            raise UsageError(f"read(limit={limit}): limit must be >= 0 or None")
        if limit == 0:
            return []
        with self._lock:
            self._refresh()
            if after + 1 >= self._window_start:
                start = bisect.bisect_right(self._window, after, key=_seq_of)
                end = len(self._window) if limit is None else start + limit
                return self._window[start:end]
        return self._storage_read(after, limit)

    def _deriver(self, agent: str | None) -> Deriver:
        key = agent or None
        deriver = self._derivers.get(key)
        if deriver is not None:
            start = bisect.bisect_right(self._window, deriver.last_seq, key=_seq_of)
            if deriver.last_seq + 1 >= self._window_start and deriver.feed_all(
                self._window[start:]
            ):
                return deriver
        deriver = self._build_deriver(key)
        self._derivers[key] = deriver
        return deriver

    def _build_deriver(self, agent: str | None) -> Deriver:
        probe = Deriver(agent)
        if self._window_start > 1:
            need = 1
            for event in reversed(self._window):
                if event.type != COMPACTION or not probe.passes(event):
                    continue
                try:
                    data = decode(event.data, Compaction)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue
                need = (
                    event.seq
                    if (data.first_kept_seq or data.retained_tail)
                    else (data.before_seq + 1)
                )
                break
            self._ensure_window_from(need)
        return Deriver.from_events(self._window, agent)

    def entries(self, agent: str | None = None) -> list[IndexedMessage]:
        """The derived history with source seqs (what compaction plans its cut on)."""
        with self._lock:
            self._refresh()
            return self._deriver(agent).entries()

    def messages(
        self, agent: str | None = None, *, max_tool_result_bytes: int | None = None
    ) -> list[Message]:
        """The provider-valid, compaction-aware history, updated incrementally."""
        with self._lock:
            self._refresh()
            return self._deriver(agent).messages(max_tool_result_bytes)

    # -- recording and compaction ---------------------------------------------------------

    def turn(
        self,
        agent: str | None = None,
        user: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Turn:
        """Record a turn: ``with session.turn(agent=..., user=...) as turn: ...`` writes
        ``turn/start`` and, however the block ends, ``turn/end`` (see
        :mod:`agentsession.recorder`). ``agent``, ``user`` and ``metadata`` default to the turn
        envelope's."""
        return Turn(self, agent, user, metadata)

    def compact(
        self,
        summary: Message | str | None,
        *,
        keep_turns: int | None = None,
        first_kept_seq: int | None = None,
        tokens_before: int = 0,
        agent: str | None = None,
    ) -> int | None:
        """Replace the history before a turn boundary by ``summary`` (see
        :func:`agentsession.compaction.compact`); returns the marker's seq, or None when
        there was nothing to drop."""
        return compact(
            self,
            summary,
            keep_turns=keep_turns,
            first_kept_seq=first_kept_seq,
            tokens_before=tokens_before,
            agent=agent,
        )

    def _after_append(self, stored: Sequence[Event]) -> None:
        """Apply the store's history cap when a new user turn arrived."""
        cap = self._store.max_messages
        if cap and any(e.type == USER_MESSAGE for e in stored):
            prune(self, cap)

    def close(self) -> None:
        """Release open files or connections; the session reopens them when used again."""
        with self._lock:
            self._storage_close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._id!r} at {self.location}>"


class _CacheEntry:
    __slots__ = ("last_used", "session")

    def __init__(self, session: BaseSession, last_used: _dt.datetime) -> None:
        self.session = session
        self.last_used = last_used


class BaseStore:
    """Shared behaviour of every backend's store: the session cache, TTL, context manager."""

    def __init__(
        self,
        *,
        durability: Durability = "flush",
        ttl: _dt.timedelta | None = None,
        max_cached_sessions: int = 256,
        cache_idle_ttl: _dt.timedelta | None = None,
        clock: Clock = utcnow,
        max_messages: int | None = None,
    ) -> None:
        if durability not in ("flush", "fsync"):
            raise UsageError(f"durability must be 'flush' or 'fsync', not {durability!r}")
        if ttl is not None and ttl <= _dt.timedelta(0):
            raise UsageError(f"ttl must be positive, not {ttl}")
        if max_cached_sessions < 0:
            raise UsageError("max_cached_sessions must be >= 0")
        if cache_idle_ttl is not None and cache_idle_ttl <= _dt.timedelta(0):
            raise UsageError(f"cache_idle_ttl must be positive, not {cache_idle_ttl}")
        if max_messages is not None and max_messages < 1:
            raise UsageError(f"max_messages must be >= 1 or None, not {max_messages}")
        self.max_messages = max_messages
        """History cap: at a new user turn, older whole turns beyond this many derived
        messages are dropped from the history by a prune compaction (never deleted)."""
        self.durability: Durability = durability
        """What an acknowledged append survives (see :data:`Durability`)."""
        self.ttl = ttl
        """Sessions whose last append is older than this are expired (None: never)."""
        self.clock = clock
        """The store's clock (UTC); replaceable in tests."""
        self.max_cached_sessions = max_cached_sessions
        self.cache_idle_ttl = cache_idle_ttl
        self._cache: OrderedDict[str, _CacheEntry] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._closed = False
        self._held_locks: _HeldRegistry | None = None

    # -- backend primitives ---------------------------------------------------------------

    def _cache_key(self, session_id: str) -> str:
        """What identifies the session's storage (a resolved path for files)."""
        return session_id

    def _open_session(self, session_id: str) -> BaseSession:
        raise NotImplementedError

    def _exists(self, session_id: str) -> bool:
        raise NotImplementedError

    def _list_all(self) -> list[SessionInfo]:
        raise NotImplementedError

    def _delete(self, session_id: str) -> bool:
        raise NotImplementedError

    def _last_append(self, session_id: str) -> _dt.datetime | None:
        """Time of the session's last event, or None when it has none."""
        raise NotImplementedError

    def _close(self) -> None:
        """Release backend resources."""

    def _make_locker(self) -> Locker:
        """The backend's turn-lock implementation."""
        raise NotImplementedError

    def _meta_get(self, kind: str, key: str) -> str | None:
        """A small persisted value (active mapping, agent binding, CLI pointer), or None."""
        raise NotImplementedError

    def _meta_set(self, kind: str, key: str, value: str | None) -> None:
        """Store a small value atomically (None removes it)."""
        raise NotImplementedError

    @property
    def location(self) -> str:
        """Where the store keeps its data, for people."""
        raise NotImplementedError

    @property
    def url(self) -> str:
        """What ``open_store`` takes to open this store again (in another process, say)."""
        raise NotImplementedError

    # -- the Store API --------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(f"store {self.location} is closed")

    def _evict(self, now: _dt.datetime) -> None:
        idle = self.cache_idle_ttl
        if idle is not None:
            for key in [k for k, e in self._cache.items() if now - e.last_used >= idle]:
                del self._cache[key]
        limit = self.max_cached_sessions
        while limit and len(self._cache) > limit:
            self._cache.popitem(last=False)
        if limit == 0:
            self._cache.clear()

    def get(self, session_id: str) -> BaseSession:
        """The session with this id; it exists in storage once something is appended.

        Raises :class:`SessionExpired` when the store has a TTL and the session's last append
        is older than it.
        """
        self._check_open()
        sid = check_session_id(session_id)
        key = self._cache_key(sid)
        now = self.clock()
        with self._cache_lock:
            self._evict(now)  # idle entries go before this lookup can refresh them
            entry = self._cache.get(key)
            if entry is not None:
                entry.last_used = now
                self._cache.move_to_end(key)
        if entry is None:
            opened = self._open_session(sid)  # I/O outside the store-wide lock
            with self._cache_lock:
                entry = self._cache.get(key)
                if entry is None:
                    entry = self._cache[key] = _CacheEntry(opened, now)
                else:
                    opened.close()  # another thread opened it first
                entry.last_used = now
                self._cache.move_to_end(key)
                self._evict(now)
        session = entry.session
        if self.ttl is not None:
            with session._lock:
                session._refresh()
                session._check_ttl()
        return session

    def exists(self, session_id: str) -> bool:
        """Whether the session has at least one event."""
        self._check_open()
        return self._exists(check_session_id(session_id))

    def list(
        self, prefix: str | None = None, limit: int | None = None, offset: int = 0
    ) -> list[SessionInfo]:
        """Sessions whose id starts with ``prefix``, most recently appended first."""
        self._check_open()
        if limit is not None and limit < 0:
            raise UsageError("list(limit=...) must be >= 0 or None")
        if offset < 0:
            raise UsageError("list(offset=...) must be >= 0")
        infos = [i for i in self._list_all() if prefix is None or i.id.startswith(prefix)]
        oldest = _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)
        infos.sort(key=lambda i: (i.updated_at or oldest, i.id), reverse=True)
        end = None if limit is None else offset + limit
        return infos[offset:end]

    def delete(self, session_id: str) -> bool:
        """Delete the session's events and everything stored beside them; True if it existed.

        A session object still held elsewhere starts over from seq 1 when appended to again.
        """
        self._check_open()
        sid = check_session_id(session_id)
        with self._cache_lock:
            entry = self._cache.pop(self._cache_key(sid), None)
        if entry is not None:
            entry.session.close()
        return self._delete(sid)

    def expired(self) -> builtins.list[str]:
        """Ids of the sessions whose last append is older than the TTL (empty without TTL)."""
        self._check_open()
        if self.ttl is None:
            return []
        cutoff = self.clock() - self.ttl
        out: builtins.list[str] = []
        for info in self._list_all():
            last = self._last_append(info.id)
            if last is not None and last < cutoff:
                out.append(info.id)
        return out

    def purge_expired(self) -> builtins.list[str]:
        """Delete every expired session; returns their ids."""
        ids = self.expired()
        for session_id in ids:
            self.delete(session_id)
        return ids

    # -- the turn lock -------------------------------------------------------------------

    def _locks(self) -> _HeldRegistry:
        with self._cache_lock:
            if self._held_locks is None:
                self._held_locks = _HeldRegistry(self._make_locker())
            return self._held_locks

    def lock(self, session_id: str, timeout: float | None = None) -> TurnLock:
        """Take the session's turn lock: one holder at a time across threads and processes
        (and machines, on PostgreSQL). ``timeout`` in seconds (None waits for ever, 0 tries
        once); raises :class:`~agentsession.errors.LockTimeout` when it runs out. Not
        reentrant: a second ``lock`` of the same session from the thread that holds it raises
        :class:`~agentsession.errors.UsageError`. Use as a context manager."""
        self._check_open()
        sid = check_session_id(session_id)
        if timeout is not None and timeout < 0:
            raise UsageError(f"lock timeout must be >= 0 or None, not {timeout}")
        return self._locks().acquire(sid, timeout)

    def is_locked(self, session_id: str) -> bool:
        """Whether some thread or process holds the session's turn lock now."""
        self._check_open()
        return self._locks().locker.is_locked(check_session_id(session_id))

    def recover(
        self, session_ids: Sequence[str] | None = None, *, lock_timeout: float = 0.0
    ) -> builtins.list[StoreRecoveryReport]:
        """Repair every crashed turn whose turn lock is free (see
        :func:`agentsession.recovery.recover_store`): one report per session with an incomplete
        turn, or per session named in ``session_ids``; a session whose lock is held by a live
        process is reported ``live`` and left alone."""
        from .recovery import recover_store

        self._check_open()
        return recover_store(self, session_ids, lock_timeout=lock_timeout)

    # -- identity: the active-session mapping, agent binding, the CLI pointer -------------

    def active_session(self, key: str) -> str:
        """The session that ``/new`` made current for an entry key; the key itself when none."""
        self._check_open()
        if not isinstance(key, str) or not key.strip():
            raise UsageError("an active-session entry key is required")
        return self._meta_get("active", key) or key

    def set_active_session(self, key: str, session_id: str) -> None:
        """Map an entry key to the session its next turns go to (atomic, persisted)."""
        self._check_open()
        if not isinstance(key, str) or not key.strip():
            raise UsageError("an active-session entry key is required")
        sid = check_session_id(session_id)
        self._meta_set("active", key, None if sid == key else sid)

    def agent_bind(self, session_id: str) -> str:
        """The agent a session is bound to, or ``""``."""
        self._check_open()
        return self._meta_get("bind", check_session_id(session_id)) or ""

    def set_agent_bind(self, session_id: str, agent: str) -> None:
        """Bind a session to an agent (``""`` removes the binding)."""
        self._check_open()
        sid = check_session_id(session_id)
        if not isinstance(agent, str):
            raise UsageError("agent must be a string")
        self._meta_set("bind", sid, agent or None)

    def cli_current(self) -> str:
        """The session the command line attaches to next (default ``cli:default``)."""
        self._check_open()
        return self._meta_get("cli", "current") or DEFAULT_CLI_SESSION_ID

    def set_cli_current(self, session_id: str) -> None:
        """Point the command line at a session."""
        self._check_open()
        self._meta_set("cli", "current", check_session_id(session_id))

    def close(self) -> None:
        """Close every cached session and the store; safe to call twice."""
        with self._cache_lock:
            entries = list(self._cache.values())
            self._cache.clear()
        for entry in entries:
            entry.session.close()
        if not self._closed:
            self._closed = True
            self._close()

    def __enter__(self) -> BaseStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.location}>"
