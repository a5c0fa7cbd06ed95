"""``BaseStore`` and ``open_store``: opening sessions, the session cache, the store's API.

A **store** opens sessions by id and owns what spans sessions: listing, deleting, the turn
locks, crash recovery over many sessions, and a small key-value primitive (``meta_get`` and
``meta_set``) that the chat layer keeps its identity mappings in. A backend does not subclass
:class:`BaseStore` to change what it does: it hands it its parts
(:class:`~agentsession.catalog.StoreParts`: a catalog, meta with its own atomic
compare-and-set, a locker), which the store calls. ``open_store`` picks the backend from a URL
through :mod:`agentsession.registry` (which third-party packages extend with the entry-point
group ``agentsession.backends``, a name mapping a URL scheme to a ``module:factory``); its
names are re-exported here. An encrypted store's keys are a
:class:`~agentsession.keys.KeyLifecycle` the store holds.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as _dt
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, cast, overload

import msgspec

from . import _trace, children, indexing
from . import retention as _retention
from ._durations import as_timedelta
from .archive import (
    ARCHIVE_KIND,
    SEGMENT_KIND,
    ArchiveReport,
    SessionArchive,
    archive_session,
    segment_keys,
)
from .branching import BRANCHES_KIND, branches_problem, live_branches, remove_branch
from .catalog import Catalog, MetaStorage, StoreParts, meta_update
from .codec import utcnow
from .compaction import CompactionPolicy
from .contract import (
    Capabilities,
    Durability,
    SessionInfo,
    StoreRecoveryReport,
    check_session_id,
)
from .core import RENEWED_KIND, Clock, renewal_text, renewal_time
from .crypto import ACTIVE_KIND, SESSION_KIND, KeyRing
from .errors import (
    ConflictError,
    DuplicateSession,
    SessionError,
    SessionNotFound,
    UsageError,
)
from .events import SESSION_LEASE, Event, SessionLease
from .fencing import Lease, Leases, current_lease
from .follow import Change, ChangeHub, PollWatcher, Watcher
from .follow import changes as _changes
from .inbox import Delivery, check_policy
from .inbox import deliver as _deliver
from .indexing import CatalogIndex, Indexing
from .keys import KeyLifecycle
from .listing import Hit, Page, Price, Totals
from .locks import _HeldRegistry
from .messages import Message
from .recovery import recover_store
from .registry import migrate_store, open_url, path_of, register_backend
from .retention import AuditEntry, ErasureReport, Hold, Retention, RetentionReport
from .retention import as_rules as retention_rules
from .session import BaseSession
from .stats import SessionStats, StoreStats, session_stats, store_stats

if TYPE_CHECKING:
    import concurrent.futures
    from types import TracebackType

__all__ = [
    "SESSION_META_KINDS",
    "BaseStore",
    "migrate_store",
    "open_store",
    "path_of",
    "register_backend",
]

SESSION_META_KINDS: tuple[str, ...] = (
    "bind",
    SESSION_KIND,
    ACTIVE_KIND,
    children.RECORD_KIND,
    children.CHILDREN_KIND,
    "adk-snapshot",
    BRANCHES_KIND,
    RENEWED_KIND,
    ARCHIVE_KIND,
)
"""Meta namespaces keyed by session id, whose entries are deleted with their session (the chat
layer's agent binding lives in ``bind``; an encrypted store's session keys in
``crypto-session`` and ``crypto-active``, so deleting a session also destroys its key; the
session record in ``record``; a parent's children index in ``children``; the ADK
integration's session-state snapshot in ``adk-snapshot``; the latest renewal by an update in
``renewed``; the archive index in ``archive``, whose segments are deleted with it). Shredding a
session removes them
too, except its key's tombstone (``crypto-session``) and the ids its children index keeps."""

_KEPT_BY_SHRED = frozenset({SESSION_KIND, children.CHILDREN_KIND})


_live_stores: weakref.WeakSet[BaseStore] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # Every store, whatever another's reset raises (the interpreter would stop at the first
    # error and leave the rest holding the parent's lock records, thread ids and pools).
    for store in list(_live_stores):
        with contextlib.suppress(Exception):  # a child cannot report it safely: carry on
            store._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _check_name(what: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"a meta {what} must be a non-blank string, not {value!r}")
    return value


class _CacheEntry:
    __slots__ = ("last_used", "session")

    def __init__(self, session: BaseSession, last_used: _dt.datetime) -> None:
        self.session = session
        self.last_used = last_used


class BaseStore:
    """Every backend's store: the session cache, TTL, encryption, turn locks, hooks, stats,
    over the backend's parts (``parts``: a :class:`~agentsession.catalog.StoreParts`, or a
    function that builds it, called once the settings below are checked and set, so that it
    can read ``durability`` and ``clock``). The named store classes of the built-in backends
    derive from it only to keep their names and constructors; they override nothing."""

    capabilities: ClassVar[Capabilities] = Capabilities()
    """What the backend's I/O costs, for the async API's placement (see
    :class:`~agentsession.contract.Capabilities`); each backend declares its own."""

    def __init__(
        self,
        parts: StoreParts | Callable[[], StoreParts],
        *,
        durability: Durability = "flush",
        ttl: _dt.timedelta | str | None = None,
        max_cached_sessions: int | None = 256,
        cache_idle_ttl: _dt.timedelta | str | None = None,
        clock: Clock = utcnow,
        max_messages: int | None = None,
        passphrase: str | None = None,
        key: bytes | None = None,
        max_loaded_events: int | None = None,
        default_delivery_policy: str = "enqueue",
        catalog: bool = True,
        searchable: bool = True,
        revive_expired: bool = False,
        renew_on_update: bool = False,
        compaction: CompactionPolicy | None = None,
        retention: Retention | Sequence[Retention] | None = None,
    ) -> None:
        if compaction is not None and not isinstance(compaction, CompactionPolicy):
            raise UsageError(
                f"compaction must be a CompactionPolicy or None, not {type(compaction).__name__}"
            )
        if durability not in ("flush", "fsync"):
            raise UsageError(f"durability must be 'flush' or 'fsync', not {durability!r}")
        # Durations may be Go duration strings ("30m"), as in agentkit's configuration.
        ttl = as_timedelta(ttl, "ttl")
        cache_idle_ttl = as_timedelta(cache_idle_ttl, "cache_idle_ttl")
        if ttl is not None and ttl <= _dt.timedelta(0):
            raise UsageError(f"ttl must be positive, not {ttl}")
        if max_cached_sessions is not None and (
            isinstance(max_cached_sessions, bool)
            or not isinstance(max_cached_sessions, int)
            or max_cached_sessions < 0
        ):
            raise UsageError(
                f"max_cached_sessions must be an int >= 0 or None, not {max_cached_sessions!r}"
            )
        if cache_idle_ttl is not None and cache_idle_ttl <= _dt.timedelta(0):
            raise UsageError(f"cache_idle_ttl must be positive, not {cache_idle_ttl}")
        if max_loaded_events == 0 and not isinstance(max_loaded_events, bool):
            max_loaded_events = None  # agentkit's 0: no cap
        if max_messages is not None and max_messages < 1:
            raise UsageError(f"max_messages must be >= 1 or None, not {max_messages}")
        if max_loaded_events is not None and (
            isinstance(max_loaded_events, bool)
            or not isinstance(max_loaded_events, int)
            or max_loaded_events < 1
        ):
            raise UsageError(
                f"max_loaded_events must be an int >= 0 or None, not {max_loaded_events!r}"
            )
        check_policy(default_delivery_policy)
        self._keys = KeyLifecycle(
            self,
            passphrase,
            key,
            shred_clears=[k for k in SESSION_META_KINDS if k not in _KEPT_BY_SHRED],
        )
        """The store's encryption lifecycle (its key ring once unlocked)."""
        self.retention: tuple[Retention, ...] = retention_rules(retention)
        """The retention rules :meth:`apply_retention` applies (``docs/retention.md``)."""
        self.max_messages = max_messages
        """History cap: at a new user turn, older whole turns beyond this many derived
        messages are dropped from the history by a prune compaction (never deleted)."""
        self.compaction = compaction
        """The compaction policy run when a turn ends (None: none): see
        :class:`~agentsession.compaction.CompactionPolicy` and ``docs/compaction.md``."""
        self.max_loaded_events = max_loaded_events
        """Loading cap (agentkit's ``MaxLoadedEvents``; None, the default, or 0: no cap): when a
        session object loads its window (the events since its latest compaction marker, or the
        whole log; the first ``messages()``, ``entries()``, ``compact()`` or ``prune()`` after
        opening), it reads at most this many of the latest events, so opening a huge
        uncompacted log never loads all of it.

        When the window is longer, ``messages()`` (and ``entries()``, ``compact()``,
        ``prune()``) sees the history derived from those latest ``max_loaded_events`` events
        only: it starts at the first turn boundary among them (a ``turn/start`` or a user
        message, so it never opens with tool results whose calls were not loaded; when no
        turn begins among them, at the first assistant message, the results whose calls were
        not loaded left out), and a compaction marker among them is honoured as usual; a
        marker older than them is not seen (its summary is not in the history), and no
        agent's history reaches back before them. Events appended afterwards extend the
        loaded window as usual. A session object that holds its events already (it appended
        them to a log that was empty when it opened it, or loaded them before) is not cut
        back. ``read()`` still returns every stored event. Compaction markers count among
        the ``N`` events (agentkit reads the whole file and keeps every marker besides its
        ``N``; a log is read here backwards from its tail, never whole)."""
        self.default_delivery_policy = default_delivery_policy
        """The policy of a :meth:`deliver` that names none: ``"enqueue"`` (the default),
        ``"reject"``, ``"interrupt"``, ``"merge"`` or ``"rollback"`` (see
        :mod:`agentsession.inbox`)."""
        self.durability: Durability = durability
        """What an acknowledged append survives (see :data:`Durability`)."""
        self.ttl = ttl
        """Sessions whose last append is older than this are expired (None: never)."""
        self.revive_expired = bool(revive_expired)
        """Whether an expired session can still be opened and appended to, the append
        renewing it (lango's ``AppendMessage`` on an expired session). False, the default:
        :meth:`get` and appends raise :class:`~agentsession.errors.SessionExpired`. Either
        way :meth:`expired` lists the expired sessions and :meth:`purge_expired` deletes
        them."""
        self.renew_on_update = bool(renew_on_update)
        """Whether :meth:`~agentsession.session.BaseSession.update` renews the session's TTL as
        an append does (lango's ``Update``, which moves ``updated_at``). False, the default:
        expiry counts from the last append only. True: each update stores its time as the
        session's latest renewal (the meta entry ``renewed``, in clear), and the session
        expires ``ttl`` after the later of its last append and that time, for every store
        object that opens it (the renewal is stored, not a setting of the reader); on Redis
        the session's keys get their server-side expiry pushed back as an append does. An
        update of a session that has expired raises
        :class:`~agentsession.errors.SessionExpired`, as an append does (unless
        :attr:`revive_expired`)."""
        self.clock = clock
        """The store's clock (UTC); replaceable in tests."""
        self.max_cached_sessions = max_cached_sessions
        """Open session objects kept for reuse by :meth:`get`, the least recently used
        dropped first: None keeps every one (agentkit's ``0``), ``0`` keeps none."""
        self.cache_idle_ttl = cache_idle_ttl
        """A cached session object unused this long is dropped (None: never)."""
        self._cache: OrderedDict[str, _CacheEntry] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._closed = False
        self._held_locks: _HeldRegistry | None = None
        self._lease_manager: Leases | None = None
        self._hooks: builtins.list[children.LifecycleHook] = []
        # The backend's parts, built once the settings above are checked and set (a backend
        # reads durability and the clock while it builds them).
        built = parts() if callable(parts) else parts
        if not callable(getattr(built.meta, "cas", None)):
            raise TypeError(
                f"the {type(self).__name__} backend's meta ({type(built.meta).__name__}) does "
                "not implement cas: every backend provides its own compare-and-set, atomic "
                "across store objects and processes (see agentsession.catalog.MetaStorage.cas)"
            )
        if (built.locker is None) == (built.lock_through is None):
            raise TypeError(
                f"the {type(self).__name__} backend must give a locker or a store to lock "
                "through (one of the two)"
            )
        self._catalog: Catalog = built.catalog
        """The sessions as a whole (see :class:`agentsession.catalog.Catalog`)."""
        self._index: CatalogIndex | None = cast("CatalogIndex | None", built.index)
        """Catalog rows and search documents (None: the backend keeps none)."""
        self._indexing = Indexing(self, catalog=bool(catalog), searchable=bool(searchable))
        """What appends keep in the index (``catalog``, ``searchable``), prices, sealer."""
        self._meta: MetaStorage = built.meta
        """Small persisted values (see :class:`agentsession.catalog.MetaStorage`)."""
        self._make_locker = built.locker
        self._lock_through = built.lock_through
        self._async_factory = built.async_backend
        self._reconnect_timeout = float(built.reconnect_timeout)
        make_watcher = built.watcher
        self._changes = ChangeHub(
            cast("Callable[[], Watcher]", make_watcher) if make_watcher is not None else PollWatcher
        )
        """This store object's followers and the watcher of other processes' appends."""
        _live_stores.add(self)

    # -- the composed parts --------------------------------------------------------------

    def _open_session(self, session_id: str) -> BaseSession:
        """A new session object for ``session_id``, outside the cache (the catalog's)."""
        return self._catalog.open_session(self, session_id)

    def _meta_get(self, kind: str, key: str) -> str | None:
        """The composed meta's :meth:`~agentsession.catalog.MetaStorage.get` (unchecked
        names: the library's own namespaces)."""
        return self._meta.get(kind, key)

    def _meta_set(self, kind: str, key: str, value: str | None) -> None:
        """The composed meta's :meth:`~agentsession.catalog.MetaStorage.set`."""
        self._meta.set(kind, key, value)

    def _meta_add(self, kind: str, key: str, value: str) -> str:
        """The composed meta's :meth:`~agentsession.catalog.MetaStorage.add`."""
        return self._meta.add(kind, key, value)

    def _meta_cas(self, kind: str, key: str, expected: str | None, new: str | None) -> bool:
        """The composed meta's compare-and-set
        (:meth:`~agentsession.catalog.MetaStorage.cas`), atomic across threads, store objects
        and processes."""
        return self._meta.cas(kind, key, expected, new)

    def _meta_list(self, kind: str | None = None) -> builtins.list[tuple[str, str, str]]:
        """The composed meta's :meth:`~agentsession.catalog.MetaStorage.list`."""
        return self._meta.list(kind)

    def _meta_update(
        self, kind: str, key: str, change: Callable[[str | None], str | None]
    ) -> str | None:
        """Read, change and write one entry atomically: :func:`agentsession.catalog.meta_update`
        over the composed meta."""
        return meta_update(self._meta, kind, key, change)

    @property
    def location(self) -> str:
        """Where the store keeps its data, for people."""
        return self._catalog.location

    @property
    def url(self) -> str:
        """What ``open_store`` takes to open this store again (in another process, say)."""
        return self._catalog.url

    def async_backend(self, executor: concurrent.futures.Executor) -> object:
        """The backend's native async I/O, for :mod:`agentsession.aio`: an
        ``agentsession.aio.AsyncBackend`` that performs the operations it can natively and runs
        the rest on ``executor`` (PostgreSQL: psycopg's async pool). Only for a store whose
        :attr:`capabilities` declare ``native_async`` (:class:`UsageError` otherwise); the
        async API calls it once per async store."""
        if not self.capabilities.native_async or self._async_factory is None:
            raise UsageError(f"{type(self).__name__} has no native async I/O")
        return self._async_factory(executor)

    # -- the Store API --------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(f"store {self.location} is closed")
        if self._keys.pending:
            self._keys.unlock()

    @property
    def _keyring(self) -> KeyRing | None:
        """The unlocked key ring of an encrypted store (None: plain, or not unlocked yet): what
        sessions seal and open with."""
        return self._keys.ring

    @_keyring.setter
    def _keyring(self, ring: KeyRing | None) -> None:
        self._keys.ring = ring

    def _drop_cached(self, session_id: str) -> None:
        """Close the cached session object of ``session_id``, if there is one."""
        with self._cache_lock:
            entry = self._cache.pop(self._catalog.cache_key(session_id), None)
        if entry is not None:
            entry.session.close()

    @property
    def encrypted(self) -> bool:
        """Whether the store encrypts its events (it was opened with a passphrase or key)."""
        self._check_open()
        return self._keys.ring is not None

    def change_passphrase(
        self,
        old: str | None,
        new: str | None,
        *,
        old_key: bytes | None = None,
        new_key: bytes | None = None,
    ) -> None:
        """Wrap the store's key under a new passphrase (or a new 32-byte key): the old one is
        checked first, then one record is rewritten atomically, so the time does not depend on
        how much the store holds and a crash leaves the old or the new passphrase working.
        Processes that have the store open keep working."""
        self._check_open()
        self._keys.change_passphrase(old, new, old_key=old_key, new_key=new_key)

    def shred(
        self, session_id: str, *, recursive: bool = False, keep_children: bool = False
    ) -> builtins.list[str]:
        """Destroy the session's key, so its events can never be read again, from this store
        or from any copy of its log (see ``docs/security.md`` for what stays visible); returns
        the ids shredded, children first. The log stays; reading it raises
        :class:`~agentsession.errors.SessionShredded` (an
        :class:`~agentsession.errors.EncryptionError`), and so does appending until the
        session is deleted, also from session objects that held the
        key before (in this process or another: a
        :data:`~agentsession.crypto.SHRED_NOTICE` appended to the log just before the key is
        destroyed tells them). What is kept beside the log under the session's id goes too
        (its record, agent binding, integration state); its children index keeps only its
        children's ids, so they can still be found. When shredding is interrupted (a crash
        between the notice and the key), the session already refuses; shred it again to
        destroy the key.

        Child sessions (forked for subagents) hold copies of what their parent's history held
        when they were forked. With ``recursive``, the session's children, and theirs, are
        shredded too (each before its parent). Without it, a session that has children not
        shredded yet is refused (:class:`~agentsession.errors.UsageError` naming them, nothing
        shredded) unless ``keep_children`` says to shred it alone, the children keeping their
        copies.
        """
        sid = check_session_id(session_id)
        self._check_open()
        shredded = self._keys.shred(sid, recursive=recursive, keep_children=keep_children)
        if self._index is not None:
            for gone in shredded:
                self._index.shredded(gone)
        return shredded

    def is_shredded(self, session_id: str) -> bool:
        """Whether the session was shredded (its key is destroyed; False in a plain store)."""
        self._check_open()
        return self._keys.is_shredded(check_session_id(session_id))

    def rotate_key(self, session_id: str) -> str:
        """Seal the session's new events under a new data key; returns its key id. Events
        sealed under earlier keys stay readable."""
        self._check_open()
        return self._keys.rotate(session_id)

    def _evict(self, now: _dt.datetime) -> None:
        idle = self.cache_idle_ttl
        if idle is not None:
            for key in [k for k, e in self._cache.items() if now - e.last_used >= idle]:
                del self._cache[key]
        limit = self.max_cached_sessions
        if limit is None:
            return
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
        sid = self._catalog.resolve(session_id, "open")
        key = self._catalog.cache_key(sid)
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
        if self.ttl is not None and not self.revive_expired:
            with session._lock:
                session._refresh()
                session._check_ttl()
        return session

    def open(self, session_id: str) -> BaseSession:
        """The session with this id, which must exist: raises
        :class:`~agentsession.errors.SessionNotFound` when it has no events (use :meth:`get`
        to start a session by appending to it)."""
        self._check_open()
        sid = self._catalog.resolve(session_id, "open")
        if not self._catalog.exists(sid):
            raise SessionNotFound(sid, f"no session {sid!r} in {self.location}")
        return self.get(sid)

    def create(
        self,
        session_id: str,
        events: Sequence[Event] = (),
        *,
        agent_id: str | None = None,
        channel_type: str | None = None,
        channel_id: str | None = None,
        model: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> BaseSession:
        """A new session whose log starts with ``events``, written atomically only if the
        session has no events yet: raises :class:`~agentsession.errors.DuplicateSession`
        when it exists (also when another process created it first). The keyword arguments,
        when given, are written to the session's record (see :meth:`BaseSession.update`)
        right after its events.

        With no events (lango's ``Create(&Session{Key: ...})``) only the record is written,
        and only if the session has neither events nor a record (else
        :class:`~agentsession.errors.DuplicateSession`): ``info()`` and ``update()`` work at
        once, and the session is listed from its first event on."""
        self._check_open()
        sid = self._catalog.resolve(session_id, "create")
        if isinstance(events, Event):
            events = [events]
        if not events:
            session = self.get(sid)
            children.create_record(
                self,
                session,
                agent_id=agent_id,
                channel_type=channel_type,
                channel_id=channel_id,
                model=model,
                metadata=metadata,
            )
            return session
        session = self.get(sid)
        try:
            session.append_many(events, expect_seq=0)
        except ConflictError:
            raise DuplicateSession(
                sid, f"session {sid!r} already exists in {self.location}"
            ) from None
        fields = (agent_id, channel_type, channel_id, model, metadata)
        if any(field is not None for field in fields):
            session.update(
                agent_id=agent_id,
                channel_type=channel_type,
                channel_id=channel_id,
                model=model,
                metadata=metadata,
            )
        return session

    # -- child sessions --------------------------------------------------------------------

    def children_of(
        self, parent_id: str, *, include_discarded: bool = False
    ) -> builtins.list[children.ChildInfo]:
        """The child sessions forked from ``parent_id``, in fork order (lango's
        ``ChildrenOf``; empty for a session without children or that does not exist). Read
        from the parent's children index (one meta entry), not from every session; a child
        that was deleted since is left out, and so is a discarded one unless
        ``include_discarded`` (lango deletes a discarded child; here its log stays, and
        ``get`` still opens it). See :meth:`BaseSession.fork`."""
        self._check_open()
        found = children.children_of(self, check_session_id(parent_id))
        if include_discarded:
            return found
        return [child for child in found if child.state != "discarded"]

    def add_lifecycle_hook(self, hook: children.LifecycleHook) -> None:
        """Call ``hook`` with a :class:`~agentsession.children.LifecycleEvent` after every
        fork, merge and discard made through this store (lango's ``WithLifecycleHook``), once
        what it reports is durable. An exception in a hook is logged (logger
        ``agentsession``) and does not undo the write or reach the caller."""
        if not callable(hook):
            raise UsageError(f"a lifecycle hook must be callable, not {hook!r}")
        with self._cache_lock:
            self._hooks = [*self._hooks, hook]

    def remove_lifecycle_hook(self, hook: children.LifecycleHook) -> None:
        """Stop calling ``hook`` (nothing happens when it was not added)."""
        with self._cache_lock:
            self._hooks = [h for h in self._hooks if h is not hook]

    def _lifecycle_hooks(self) -> builtins.list[children.LifecycleHook]:
        return self._hooks  # replaced, never changed in place: safe to iterate

    def exists(self, session_id: str) -> bool:
        """Whether the session has at least one event."""
        self._check_open()
        return self._catalog.exists(check_session_id(session_id))

    def list(
        self,
        prefix: str | None = None,
        limit: int | None = None,
        offset: int = 0,
        *,
        where: Mapping[str, object] | None = None,
        order: str = "updated",
        cursor: str | None = None,
    ) -> Page[SessionInfo]:
        """Sessions whose id starts with ``prefix``, most recently appended first: a
        :class:`~agentsession.listing.Page` (a list, with ``next_cursor`` when ``limit`` cut
        it short).

        ``where`` filters by the catalog's fields (``user``, ``tenant``, ``agent``,
        ``status``, ``id``: a value or a set of values; ``tag``/``tags``: every one;
        ``updated``/``created``: ``(after, before)``; ``title``: contained), ``order`` is
        ``updated`` (the default), ``created`` (both newest first) or ``id``, and ``cursor``
        (a page's ``next_cursor``) continues a listing after the page that gave it (keyset
        pagination: stable while sessions are appended to). ``offset`` skips rows, as before
        cursors. ``docs/catalog.md`` says what each backend keeps."""
        self._check_open()
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
        ):
            raise UsageError("list(limit=...) must be an int >= 0 or None")
        if offset < 0:
            raise UsageError("list(offset=...) must be >= 0")
        if (self._index is None or not self._indexing.catalog) and (
            where is None and cursor is None and order == "updated"
        ):
            # No catalog index: the backend's listing (ids, times, sizes).
            return Page(self._catalog.list_page(prefix, limit, offset))
        if limit == 0:
            return Page()
        return indexing.list_page(self, prefix, limit, offset, where, order, cursor)

    def search(
        self,
        query: str,
        *,
        where: Mapping[str, object] | None = None,
        session_id: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> Page[Hit]:
        """Events whose text holds every word of ``query`` (messages, tool names, arguments
        and results), best first: a :class:`~agentsession.listing.Page` of
        :class:`~agentsession.listing.Hit` (session id, seq, role, snippet, rank, and whether
        the event was rewound or compacted away). ``where`` filters the sessions as in
        :meth:`list`, ``session_id`` searches one session. On an encrypted store the index
        holds keyed blind tokens, never words (``docs/catalog.md`` says what that reveals);
        a store opened with ``searchable=False`` keeps no index and refuses."""
        self._check_open()
        if session_id is not None:
            session_id = check_session_id(session_id)
        return indexing.search(self, query, where, session_id, limit, cursor)

    def totals(
        self,
        *,
        where: Mapping[str, object] | None = None,
        group_by: str = "tenant",
        since: _dt.date | None = None,
        until: _dt.date | None = None,
    ) -> builtins.list[Totals]:
        """Usage (tokens, cost, calls, sessions) summed by ``group_by`` (``tenant``, ``user``,
        ``agent`` or ``day``) over the sessions matching ``where``, for usage on days from
        ``since`` up to (not including) ``until`` (UTC), ordered by key."""
        self._check_open()
        return indexing.totals(self, where, group_by, since, until)

    @property
    def keeps_catalog(self) -> bool:
        """Whether the store keeps a catalog (``list(where=...)``, ``totals``): its backend
        has an index and it was not opened with ``catalog=False``."""
        return self._index is not None and self._indexing.catalog

    @property
    def searchable(self) -> bool:
        """Whether ``search`` works: the store keeps a catalog and was not opened with
        ``searchable=False``."""
        return self.keeps_catalog and self._indexing.searchable

    def set_prices(self, prices: Mapping[str, Price | Mapping[str, float]]) -> None:
        """Record what each model's tokens cost, per million (``{"gpt-4o": Price(input=2.5,
        output=10)}``; ``"*"`` for any model): a usage event appended from then on that
        carries no ``cost`` gets one from its ``model``'s price, added to the catalog's usage
        totals. Kept in the store, for every process (one that has the store open already
        reads them when it opens the store again); earlier usage is not re-priced (``reindex``
        does that)."""
        self._check_open()
        if not isinstance(prices, Mapping):
            raise UsageError(
                f"set_prices takes a mapping of model to price, not {type(prices).__name__}"
            )
        checked: dict[str, Price] = {}
        for model, price in prices.items():
            if not isinstance(model, str):
                raise UsageError(f"a price's model must be a string, not {model!r}")
            if isinstance(price, Mapping):
                try:
                    price = msgspec.convert(dict(price), Price)
                except msgspec.ValidationError as exc:
                    raise UsageError(f"price of {model!r}: {exc}") from None
            if not isinstance(price, Price):
                raise UsageError(f"price of {model!r} must be a Price, not {type(price).__name__}")
            checked[model] = price
        self._indexing.set_prices(checked)

    def reindex(
        self,
        session_ids: Iterable[str] | None = None,
        *,
        progress: Callable[[str], None] | None = None,
    ) -> int:
        """Rebuild the catalog and search index of ``session_ids`` (None: every session) from
        their logs; returns how many sessions were read. Needed after a crash left a JSONL
        store's index behind, after another program wrote the logs, or to re-price usage.
        ``progress`` is called with each session's id once it is rebuilt."""
        self._check_open()
        if isinstance(session_ids, str):
            raise UsageError("reindex takes a list of session ids, not one string")
        return indexing.reindex(self, session_ids, progress)

    def delete(self, session_id: str, *, recursive: bool = False) -> bool:
        """Delete the session's events and everything stored beside them (its record, its
        children index); True if it existed.

        With ``recursive``, its child sessions (and theirs) are deleted first. Without, they
        stay, as sessions of their own: a child whose parent is gone can no longer be merged
        or discarded (:class:`~agentsession.errors.ChildStateError`), even when a new session
        takes the parent's id. A session object still held elsewhere starts over from seq 1
        when appended to again. A shredded session is deleted like any other (its children
        are found from the ids its index keeps, shredded children too).
        """
        self._check_open()
        sid = check_session_id(session_id)
        existed = self._catalog.exists(sid)
        held = _retention.hold_of(self, sid) if existed else None
        if held is not None:
            raise UsageError(
                f"session {sid!r} is under a legal hold ({held.reason}); release it first"
            )
        branches = live_branches(self, sid) if existed else []
        if branches and not recursive:
            raise UsageError(branches_problem(sid, branches, "delete(recursive=True) deletes"))
        for branch in branches:
            self.delete(branch.id, recursive=True)
        if recursive:
            # Shredded children too: a shredded parent's index keeps its children's ids.
            for child in children.children_of(self, sid):
                self.delete(child.id, recursive=True)
        if self._catalog.exists(sid):
            self._forget_child(sid)
        self._drop_cached(sid)
        segments = segment_keys(sid, self._meta_get(ARCHIVE_KIND, sid)) if existed else []
        deleted = self._catalog.delete(sid, SESSION_META_KINDS)
        for key in segments:  # after the index: a crash leaves unreferenced segments, no gap
            self._meta_set(SEGMENT_KIND, key, None)
        self._keys.forget(sid)
        return deleted or bool(segments)

    def _forget_child(self, session_id: str) -> None:
        """Take a child that is being deleted out of its parent's index (even when it expired).
        A log that cannot be opened (shredded, corrupt) never stops a delete: its entry stays,
        and ``children_of`` skips it once the child is gone."""
        probe: BaseSession | None = None
        try:
            probe = self._open_session(session_id)
            origin = probe.origin
            if origin is not None:
                remove_branch(self._meta_get, self._meta_cas, origin.id, session_id)
            children.forget(self, probe)
        except SessionError:
            pass
        finally:
            if probe is not None:
                probe.close()

    def expired(self) -> builtins.list[str]:
        """Ids of the sessions whose last append is older than the TTL (empty without TTL)."""
        self._check_open()
        if self.ttl is None:
            return []
        cutoff = self.clock() - self.ttl
        ids = self._catalog.expired_ids(cutoff)
        if not ids:
            return ids
        # A renewal by update() (renew_on_update) after the cutoff keeps a session alive:
        # the renewals are read in one call, only when some session is past its last append.
        renewed = {
            key: when
            for _, key, value in self._meta_list(RENEWED_KIND)
            if (when := renewal_time(value)) is not None
        }
        return [sid for sid in ids if not (sid in renewed and renewed[sid] >= cutoff)]

    def _renew(self, session_id: str) -> None:
        """Record a renewal of the session now (its update, with :attr:`renew_on_update`):
        the stored renewal time moves forward only (a slower concurrent update with an earlier
        clock does not move it back), and the backend pushes back an expiry it keeps of its
        own (:meth:`~agentsession.catalog.Catalog.renew`)."""
        text = renewal_text(self.clock())
        now = renewal_time(text)
        assert now is not None

        def later(raw: str | None) -> str | None:
            stored = renewal_time(raw)
            return raw if stored is not None and stored >= now else text

        self._meta_update(RENEWED_KIND, session_id, later)
        self._catalog.renew(session_id)

    def archive(
        self,
        session_id: str | None = None,
        *,
        before: int | None = None,
        keep_after_marker: bool = True,
    ) -> ArchiveReport:
        """Move the events no derived history needs out of the live log of ``session_id``
        (None: of every session) into its archive, and report what moved, session by
        session (``docs/retention.md``).

        What stays live: everything from the latest compaction marker that rebuilds the
        history for every agent on (with ``keep_after_marker``, from its first kept seq on),
        what a rewind after it goes back to, every seq from a branch point or a child's fork
        point on, and every seq from ``before`` on. Seqs never change, and :meth:`BaseSession.
        read` reads archived seqs from the archive; opening a session and ``messages()``
        never read it. A session without such a marker, a branch, or one of a backend that
        cannot drop events is skipped (its entry says why)."""
        self._check_open()
        if before is not None and (isinstance(before, bool) or not isinstance(before, int)):
            raise UsageError(f"archive(before=...) must be a seq (int) or None, not {before!r}")
        if session_id is not None:
            ids = [check_session_id(session_id)]
        else:
            ids = [info.id for info in self.list(order="id")]
        return ArchiveReport([self._archive_one(sid, before, keep_after_marker) for sid in ids])

    def _archive_one(self, sid: str, before: int | None, keep_after_marker: bool) -> SessionArchive:
        if not self._catalog.exists(sid):
            return SessionArchive(sid, skipped="no such session")
        if self.encrypted and self.is_shredded(sid):
            return SessionArchive(sid, skipped="shredded")
        if self._index is not None and self._indexing.catalog:
            # A catalog caught up from the logs (JSONL's) takes in what is about to leave it.
            self.list(sid, limit=1)
        forks = [child.fork_seq or 0 for child in children.children_of(self, sid)]
        session = self._open_session(sid)
        try:
            report = archive_session(
                self, session, sid, before=before, keep_after_marker=keep_after_marker,
                fork_points=forks,
            )  # fmt: skip
        finally:
            session.close()
        if report.skipped is None:
            self._drop_cached(sid)  # the next get() opens the log as it is now
        return report

    # -- retention ------------------------------------------------------------------------------

    def apply_retention(self, *, dry_run: bool = False) -> RetentionReport:
        """Archive or delete sessions as the store's retention rules say (``retention=`` of
        :func:`open_store`: :class:`~agentsession.retention.Retention`), never one under a
        legal hold; every action is recorded in the audit log. With ``dry_run``, report what
        would be done and change nothing."""
        self._check_open()
        return _retention.apply_retention(self, dry_run=dry_run)

    def hold(self, session_id: str, reason: str) -> None:
        """Place a legal hold on the session: no retention rule, erasure or :meth:`delete`
        touches it until :meth:`release` (recorded in the audit log)."""
        self._check_open()
        sid = check_session_id(session_id)
        if not isinstance(reason, str) or not reason.strip():
            raise UsageError("hold(session_id, reason): the reason must be a non-empty string")
        record = _retention.Hold(reason=reason, since=self.clock())
        self._meta_set(_retention.HOLD_KIND, sid, msgspec.json.encode(record).decode())
        _retention.audit(self, "hold", sid, reason)

    def release(self, session_id: str) -> bool:
        """Lift the session's legal hold; True when it had one (recorded in the audit log)."""
        self._check_open()
        sid = check_session_id(session_id)
        held = _retention.hold_of(self, sid)
        if held is None:
            return False
        self._meta_set(_retention.HOLD_KIND, sid, None)
        _retention.audit(self, "release", sid, held.reason)
        return True

    def holds(self) -> dict[str, Hold]:
        """Every legal hold, by session id."""
        self._check_open()
        return _retention.holds(self)

    def audit_log(self) -> builtins.list[AuditEntry]:
        """The store's audit log (retention actions, holds, data-subject requests), oldest
        first."""
        self._check_open()
        return _retention.audit_log(self)

    def export_user(self, user: str, dest: str | os.PathLike[str] | None = None) -> str:
        """Write every session ``user`` took part in (the catalog's user, or any event's),
        whole and read through the archive, as JSONL files with a ``manifest.json`` into
        ``dest`` (None: a new private temporary directory); returns the directory."""
        self._check_open()
        return _retention.export_user(self, user, dest)

    def erase_user(self, user: str) -> ErasureReport:
        """Erase every session ``user`` took part in that no legal hold keeps (with its
        branches and children): shredded, then deleted, in an encrypted store; deleted
        otherwise. Returns what was erased and what a hold kept."""
        self._check_open()
        return _retention.erase_user(self, user)

    def _read_all(self, session_id: str) -> builtins.list[Event]:
        """Every event of a session, archived ones included (a fresh session object)."""
        session = self._open_session(session_id)
        try:
            return session.read()
        finally:
            session.close()

    def purge_expired(self) -> builtins.list[str]:
        """Delete every expired session (but those under a legal hold); returns their ids."""
        ids = [sid for sid in self.expired() if _retention.hold_of(self, sid) is None]
        for session_id in ids:
            self.delete(session_id)
        return ids

    # -- the turn lock -------------------------------------------------------------------

    def _locks(self) -> _HeldRegistry:
        with self._cache_lock:
            if self._held_locks is None:
                assert self._make_locker is not None  # a store that locks through another
                self._held_locks = _HeldRegistry(self._make_locker())
            return self._held_locks

    def _leases(self) -> Leases:
        registry = self._locks()
        with self._cache_lock:
            if self._lease_manager is None:
                self._lease_manager = Leases(registry, self._meta_get, self._meta_cas, self._fence)
            return self._lease_manager

    def changes(
        self,
        *,
        prefix: str | None = None,
        after: str | None = None,
        timeout: float | None = None,
    ) -> Generator[Change, None, None]:
        """A store-wide feed for dashboards and session lists: a
        :class:`~agentsession.follow.Change` each time a session (whose id starts with
        ``prefix``) is created, grows or is deleted, as any process writes: ``for change in
        store.changes(): ...``. ``after``: a :attr:`Change.position
        <agentsession.follow.Change.position>` the caller kept, to resume (first the sessions
        appended to since then, oldest first); None starts from now. Runs until ``timeout``
        seconds pass with no change (None: for ever) or the iterator is closed. Read from the
        store's listing at each sign of an append (see :mod:`agentsession.follow`); a
        deletion is seen only while the feed runs."""
        self._check_open()
        return _changes(self, self._changes, prefix, after, timeout)

    def lock(
        self,
        session_id: str,
        timeout: float | None = None,
        ttl: float | None = None,
        steal_after: float | None = None,
    ) -> Lease:
        """Take the session's turn lock: one holder at a time across threads and processes
        (and machines, on PostgreSQL). Returns a :class:`~agentsession.fencing.Lease`, whose
        ``epoch`` grows by one at every acquisition; inside ``with store.lock(...) as lease:``
        every append to the session through this store carries the epoch, and one made after
        another worker took the lock over raises :class:`~agentsession.errors.LeaseLost`,
        writing nothing (see :mod:`agentsession.fencing` and ``docs/concurrency.md``).

        ``timeout`` in seconds (None waits for ever, 0 tries once); raises
        :class:`~agentsession.errors.LockTimeout` when it runs out. ``ttl``: the lease expires
        unless renewed (a background thread renews it while it is held), and a waiter may
        then take it over. ``steal_after``: take the lock from a holder that has not renewed
        for that many seconds, even one whose process still holds the backend's lock
        (stopped, hung). Not reentrant: a second ``lock`` of the same session from the
        thread that holds it raises :class:`~agentsession.errors.UsageError`."""
        self._check_open()
        sid = self._catalog.resolve(session_id, "lock")
        if self._lock_through is not None:
            return self._lock_through.lock(sid, timeout, ttl, steal_after)
        if timeout is not None and timeout < 0:
            raise UsageError(f"lock timeout must be >= 0 or None, not {timeout}")
        return self._leases().acquire(sid, timeout, ttl, steal_after)

    def deliver(
        self,
        session_id: str,
        message: Message | str,
        *,
        id: str | None = None,
        policy: str | None = None,
        agent: str | None = None,
        user: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> Delivery:
        """Record an incoming user message in the conversation's inbox, durably and without
        the turn lock: a ``session/delivery`` event, which a worker holding the lock drains
        with ``session.pending(lease)`` (see :mod:`agentsession.inbox` and
        ``docs/concurrency.md``). Returns the stored :class:`~agentsession.inbox.Delivery`.

        ``message``: a user :class:`~agentsession.Message` or a string. ``id``: the
        delivery's id (a chat platform's event id): delivering an id the log holds already
        stores nothing and returns the first delivery (within the append pipeline's id
        window). ``policy``: ``"enqueue"`` (processed after the running turn),
        ``"reject"`` (raises :class:`~agentsession.errors.SessionBusy` while a turn runs,
        recording nothing), ``"interrupt"`` (the running inbox turn's next ``turn.step()``
        raises :class:`~agentsession.errors.TurnInterrupted`; then processed), ``"merge"``
        (handed to the running inbox turn at its next step as one of its user messages) or
        ``"rollback"`` (as interrupt, and that turn is left out of the history); None takes
        :attr:`default_delivery_policy`; any other raises
        :class:`~agentsession.errors.UsageError`. ``agent``, ``user`` and ``meta`` are stored
        on the event (the agent it is addressed to, the sender, platform annotations)."""
        self._check_open()
        return _deliver(
            self, session_id, message, id=id, policy=policy, agent=agent, user=user, meta=meta
        )

    def _fence(self, lease: Lease, payload: SessionLease) -> None:
        """Append ``lease``'s ``session/lease`` event under it: from then on an append under
        an older epoch is refused."""
        with lease.current():
            self.get(lease.session_id).append(Event.new(SESSION_LEASE, payload))

    def current_lease(self, session_id: str) -> Lease | None:
        """The lease of ``session_id`` current in this thread or asyncio task (entered with
        ``with store.lock(...)``, through this store), or None: what its appends carry."""
        if self._lock_through is not None:
            return self._lock_through.current_lease(session_id)
        registry = self._held_locks
        return None if registry is None else current_lease(registry, session_id)

    def is_locked(self, session_id: str) -> bool:
        """Whether some thread or process holds the session's turn lock now."""
        self._check_open()
        sid = self._catalog.resolve(session_id, "lock")
        if self._lock_through is not None:
            return self._lock_through.is_locked(sid)
        return self._locks().locker.is_locked(sid)

    def holds_lock(self, session_id: str) -> bool:
        """Whether the caller (this thread, or this asyncio task) holds the session's turn
        lock, taken through this store: no I/O."""
        sid = self._catalog.resolve(session_id, "lock")
        if self._lock_through is not None:
            return self._lock_through.holds_lock(sid)
        return self._locks().held_here(sid)

    def recover(
        self,
        session_ids: Sequence[str] | None = None,
        *,
        lock_timeout: float = 0.0,
        dry_run: bool = False,
    ) -> builtins.list[StoreRecoveryReport]:
        """Repair every crashed turn whose turn lock is free (see
        :func:`agentsession.recovery.recover_store`): one report per session with an incomplete
        turn, or per session named in ``session_ids``; a session whose lock is held by a live
        process is reported ``live`` and left alone. With ``dry_run`` nothing is written and a
        session a repair would fix is reported ``pending``."""
        self._check_open()
        with _trace.span(
            "agentsession.recover", backend=_trace.backend_of(self), dry_run=dry_run
        ) as span:
            reports = recover_store(self, session_ids, lock_timeout=lock_timeout, dry_run=dry_run)
            span.set(sessions=len(reports))
            return reports

    @overload
    def stats(self, session_id: None = None) -> StoreStats: ...

    @overload
    def stats(self, session_id: str) -> SessionStats: ...

    def stats(self, session_id: str | None = None) -> StoreStats | SessionStats:
        """The store's counts (sessions, events, bytes: from its listing, reading no event),
        or with ``session_id`` that session's (events, turns, messages, incomplete turns,
        bytes: its log is read); :class:`SessionNotFound` for a session without events. See
        :mod:`agentsession.stats`."""
        self._check_open()
        if session_id is None:
            return store_stats(self)
        return session_stats(self, check_session_id(session_id))

    # -- small persisted values ----------------------------------------------------------

    def meta_get(self, namespace: str, key: str) -> str | None:
        """A small persisted value (``None`` when unset): the key-value primitive the chat
        layer's identity mappings are built on. Namespaces in :data:`SESSION_META_KINDS` are
        keyed by session id and deleted with the session."""
        self._check_open()
        return self._meta_get(_check_name("namespace", namespace), _check_name("key", key))

    def meta_set(self, namespace: str, key: str, value: str | None) -> None:
        """Store a small value atomically (``None`` removes it)."""
        self._check_open()
        if value is not None and not isinstance(value, str):
            raise UsageError(f"a meta value must be a string or None, not {type(value).__name__}")
        self._meta_set(_check_name("namespace", namespace), _check_name("key", key), value)

    def close(self) -> None:
        """Close every cached session, release every turn lock taken through this store (on
        every backend; a :class:`~agentsession.locks.TurnLock` of it then reports itself
        released) and close the store; safe to call twice."""
        with self._cache_lock:
            entries = list(self._cache.values())
            self._cache.clear()
        for entry in entries:
            entry.session.close()
        if not self._closed:
            self._closed = True
            try:
                if self._held_locks is not None:
                    self._held_locks.release_all()
            finally:
                try:
                    self._catalog.close()
                finally:
                    self._changes.close()  # followers woken now read a closed store
        else:
            self._changes.close()

    def _after_fork(self) -> None:
        """In a forked child: no lock another parent thread held is held here, and the
        parent's turn locks stay the parent's (forgotten here, never released)."""
        self._cache_lock = threading.Lock()
        if self._held_locks is not None:
            self._held_locks.forget_after_fork()
        self._catalog.after_fork()

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


# ---------------------------------------------------------------------------------------------
# Opening a store: the URL goes through the backend registry (agentsession.registry).

StoreFactory = Callable[..., BaseStore]
"""What a registered backend provides: ``factory(url, **options)`` returns an open store."""


def open_store(target: str | os.PathLike[str] | BaseStore, **options: Any) -> BaseStore:
    """Open a store.

    ``target`` is one of:

    * ``"memory:"`` — sessions in this process's memory;
    * a directory path, or ``"jsonl:///abs/dir"`` / ``"jsonl:relative/dir"`` — the JSONL store
      (the embedded default), created owner-only when missing;
    * ``"sqlite:///relative.db"`` or ``"sqlite:////absolute/path.db"`` — one SQLite file
      (SQLAlchemy's convention);
    * ``"postgresql://user@host/db"`` (or ``postgres://``) — PostgreSQL (extra ``postgres``);
    * a URL whose scheme a backend registered (:func:`register_backend`, or an entry point in
      the group ``agentsession.backends``);
    * a store object, returned as it is.

    ``create=False`` opens only a store that exists (for reading: a missing directory,
    database file or schema raises :class:`~agentsession.errors.StoreUnavailable` saying there
    is no store there, and nothing is created). ``read_only=True`` is ``create=False`` that
    also changes no schema: a backend with one (SQLite, PostgreSQL) runs no DDL and migrates
    nothing, reads an older schema as it is where it can, and otherwise raises
    :class:`~agentsession.errors.StoreUnavailable` saying to run ``agentsession migrate``
    (backends without a schema just get ``create=False``). ``options`` go to the backend:
    ``durability`` (``"flush"`` or ``"fsync"``), ``ttl`` (a ``timedelta``),
    ``max_cached_sessions``, ``cache_idle_ttl``, ``clock``, ``max_messages``,
    ``default_delivery_policy`` (``"enqueue"``, ``"reject"``, ``"interrupt"``, ``"merge"`` or
    ``"rollback"``: see :meth:`BaseStore.deliver`),
    ``max_loaded_events`` (derive each session's history from at most its latest N events,
    from the first turn boundary among them: see :attr:`BaseStore.max_loaded_events`; 0 or
    None: no cap), ``revive_expired`` (see :attr:`BaseStore.revive_expired`),
    ``renew_on_update`` (``session.update()`` renews the TTL as an append does, lango's
    ``Update``: see :attr:`BaseStore.renew_on_update`; False, the default: expiry counts from
    the last append only), ``compaction``
    (a :class:`~agentsession.compaction.CompactionPolicy`: summarize the history at the end of
    a turn when it is over a budget, elide older tool results; ``docs/compaction.md``); ``ttl`` and
    ``cache_idle_ttl`` also take Go duration strings (``"30m"``, ``"1h30m"``); for JSONL
    ``on_corrupt`` (``"raise"`` or ``"quarantine"``) and ``max_open_files``; for SQLite
    ``busy_timeout`` (seconds a writer waits for another, default 30); for
    PostgreSQL ``schema``, ``pool_min_size``, ``pool_max_size``, ``lock_pool_max_size``,
    ``pool_timeout``, ``connect_timeout``, ``auto_migrate`` and ``prepare_threshold``.

    ``passphrase="..."`` or ``key=<32 bytes>`` opens an encrypted store, or makes a new (or
    empty) store encrypted (see :mod:`agentsession.crypto` and ``docs/security.md``; the
    ``crypto`` extra). A wrong one raises :class:`~agentsession.crypto.EncryptionError` here,
    before any event is read, and so does opening an encrypted store without one.
    """
    if isinstance(target, BaseStore):
        if options:
            raise UsageError("options cannot be applied to a store object that is already open")
        return target
    store = open_url(target, **options)
    if not isinstance(store, BaseStore):
        raise TypeError(
            f"the backend factory for {target!r} returned {type(store).__name__}, not a BaseStore"
        )
    try:
        store._check_open()  # an encrypted store checks its key now, before any read
    except BaseException:
        store.close()
        raise
    return store
