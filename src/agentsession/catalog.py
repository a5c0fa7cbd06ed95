"""The store side of the storage contract, by composition: a catalog, meta, a locker.

A backend's store is :class:`~agentsession.store.BaseStore` given its parts as a
:class:`StoreParts`; it does not subclass the store to change what it does (the named store
classes of the built-in backends derive from ``BaseStore`` only to keep their names, and
override nothing). The parts:

* a :class:`Catalog`: the sessions as a whole (open one, exists, a page of the listing,
  expired ids, delete, last append, ...), plus where the store is (``location``, ``url``);
  deriving from :class:`CatalogDefaults`, a backend writes seven members (six of the
  protocol's fifteen, and ``list_all``, the listing as a whole) and takes the other nine;
* a :class:`MetaStorage`: small persisted values by namespace and key, with a compare-and-set
  that each backend makes atomic across threads, store objects and processes (required: a
  store whose meta lacks it cannot be constructed); :class:`MetaInMemory` is one in this
  process's memory;
* a locker factory (a :class:`~agentsession.locks.Locker` for the turn locks), or the store
  whose turn locks this one takes (a view of another store's session);
* optionally the backend's native async I/O and how long an append rides out a lost
  connection.

What a store class's I/O costs stays a declaration on the class (``capabilities``, a
:class:`~agentsession.contract.Capabilities`) that the async API reads.

A session's log is the other half of the contract (:mod:`agentsession.storage`): the catalog
opens a session as ``BaseSession(store, session_id, log)`` over the backend's log storage.
"""

from __future__ import annotations

import abc
import builtins
import datetime as _dt
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Literal, Protocol

import msgspec

from .contract import SessionInfo, check_session_id
from .errors import ConflictError
from .fencing import Lease
from .locks import Locker

if TYPE_CHECKING:
    import concurrent.futures

    from .session import BaseSession, SessionHost

__all__ = [
    "Catalog",
    "CatalogDefaults",
    "LockHost",
    "MetaInMemory",
    "MetaStorage",
    "Purpose",
    "StoreParts",
    "expired_among",
    "meta_update",
    "page_of",
]

META_UPDATE_RETRIES = 1000

Purpose = Literal["open", "create", "lock"]
"""What an id is resolved for (:meth:`Catalog.resolve`)."""


class Catalog(Protocol):
    """The sessions of one store as a whole. Every method may be called from any thread; the
    arguments are checked before (ids by :func:`~agentsession.contract.check_session_id`, or by
    :meth:`resolve`; a page's limit and offset)."""

    @property
    def location(self) -> str:
        """Where the store keeps its data, for people (a directory, a file, a URL without its
        password)."""
        ...

    @property
    def url(self) -> str:
        """What ``open_store`` takes to open this store again (in another process, say)."""
        ...

    def resolve(self, session_id: str, purpose: Purpose) -> str:
        """The id that ``session_id``, as a caller gave it, names; ``purpose`` is ``"open"``
        (``get``, ``open``), ``"create"`` or ``"lock"`` (``lock``, ``is_locked``). Most
        catalogs check the id (:func:`~agentsession.contract.check_session_id`) and return it;
        a store of one session maps ``""`` (and, for a lenient one, every id) to that
        session's and refuses the ids that name none of its sessions."""
        ...

    def cache_key(self, session_id: str) -> str:
        """What identifies the session's storage in the store's session cache (the id, or a
        resolved path for files)."""
        ...

    def open_session(self, store: SessionHost, session_id: str) -> BaseSession:
        """A new session object of ``store`` for ``session_id``:
        ``BaseSession(store, session_id, log)`` over the backend's
        :class:`~agentsession.storage.LogStorage`. Called outside the store's locks."""
        ...

    def exists(self, session_id: str) -> bool:
        """Whether the session has at least one event."""
        ...

    def list_page(
        self, prefix: str | None, limit: int | None, offset: int
    ) -> builtins.list[SessionInfo]:
        """The sessions whose id starts with ``prefix`` (None: all), most recently appended
        first (``updated_at``, then the id, both descending), after skipping ``offset``, at
        most ``limit`` (None: no limit). A database does it in its query; :func:`page_of`
        does it over a whole listing."""
        ...

    def expired_ids(self, cutoff: _dt.datetime) -> builtins.list[str]:
        """Ids of the sessions whose last append is before ``cutoff`` (a database: one query;
        :func:`expired_among` asks :meth:`last_append` of each session listed)."""
        ...

    def last_append(self, session_id: str) -> _dt.datetime | None:
        """Time of the session's last event, or None when it has none."""
        ...

    def delete(self, session_id: str, meta_kinds: Sequence[str]) -> bool:
        """Delete the session's events and everything stored beside them, and its meta
        entries of ``meta_kinds`` (keyed by the session id), atomically where the backend
        can; True when it had events."""
        ...

    def set_last_activity(self, session_id: str, when: _dt.datetime) -> None:
        """Make ``when`` the session's last activity where the backend keeps it apart from its
        last event's time (JSONL: the file's modification time; a copy keeps the source's);
        nothing to do where the last event's time is the last activity."""
        ...

    def renew(self, session_id: str) -> None:
        """Push back an expiry the backend keeps of its own, as an append does (Redis: the
        session's keys expire on the server ``ttl + expire_grace`` after their last write), for
        an update that renews the session (``renew_on_update``); nothing where expiry is only
        the store's check."""
        ...

    def storage_bytes(self) -> int | None:
        """The whole store's size in bytes where the backend keeps no size per session but
        knows its total (SQLite: the database file and its write-ahead log); None otherwise."""
        ...

    def clean_crash_leftovers(self) -> None:
        """Remove what processes killed while writing left behind (temporary files holding
        wrapped keys, say); run once, when the store is first used (nothing, for a
        database)."""
        ...

    def close(self) -> None:
        """Release files, connections and pools (the store is closed)."""
        ...

    def after_fork(self) -> None:
        """In a forked child, before any use: stop sharing descriptors, connections and locks
        with the parent."""
        ...


class CatalogDefaults(abc.ABC):
    """What most catalogs answer alike, for a :class:`Catalog` to derive from (a helper, not
    a base of the store: it holds no state and calls nothing but the catalog's own members).

    A catalog deriving from it writes ``location``, ``url``, ``open_session``, ``exists``,
    :meth:`list_all`, ``last_append`` and ``delete``, and gets the rest, each of which it
    overrides where its backend does more:

    * :meth:`resolve`: the id checked (:func:`~agentsession.contract.check_session_id`);
      :meth:`cache_key`: the id itself;
    * :meth:`list_page` and :meth:`expired_ids` over :meth:`list_all`, with :func:`page_of`
      and :func:`expired_among` (a database answers both in a query instead);
    * :meth:`set_last_activity`, :meth:`renew`, :meth:`clean_crash_leftovers`, :meth:`close`
      and :meth:`after_fork` do nothing, :meth:`storage_bytes` is None: a backend whose last
      activity is its last event's time, that a crash leaves nothing of, that holds no file,
      connection or lock of its own and keeps sizes per session (or none)."""

    @abc.abstractmethod
    def list_all(self) -> builtins.list[SessionInfo]:
        """Every session that has events, in any order (what :meth:`list_page` and
        :meth:`expired_ids` filter; a catalog answering both in queries still has it, for
        checking them against the defaults)."""

    @abc.abstractmethod
    def last_append(self, session_id: str) -> _dt.datetime | None:
        """See :meth:`Catalog.last_append` (what :meth:`expired_ids` asks of each session)."""

    def resolve(self, session_id: str, purpose: Purpose) -> str:
        """The id as given, checked."""
        return check_session_id(session_id)

    def cache_key(self, session_id: str) -> str:
        """The id itself."""
        return session_id

    def list_page(
        self, prefix: str | None, limit: int | None, offset: int
    ) -> builtins.list[SessionInfo]:
        """:meth:`list_all` filtered, sorted and sliced (:func:`page_of`)."""
        return page_of(self.list_all(), prefix, limit, offset)

    def expired_ids(self, cutoff: _dt.datetime) -> builtins.list[str]:
        """The sessions of :meth:`list_all` last appended before ``cutoff``
        (:func:`expired_among`)."""
        return expired_among(self.list_all(), self.last_append, cutoff)

    def set_last_activity(self, session_id: str, when: _dt.datetime) -> None:  # noqa: B027 - a default, not abstract
        """Nothing: the last event's time is the last activity."""

    def renew(self, session_id: str) -> None:  # noqa: B027 - a default, not abstract
        """Nothing: the store's TTL check is the only expiry."""

    def storage_bytes(self) -> int | None:
        """None: no total apart from the sessions' sizes."""
        return None

    def clean_crash_leftovers(self) -> None:  # noqa: B027 - a default, not abstract
        """Nothing: a crash leaves nothing behind."""

    def close(self) -> None:  # noqa: B027 - a default, not abstract
        """Nothing to release."""

    def after_fork(self) -> None:  # noqa: B027 - a default, not abstract
        """Nothing is shared with another process."""


class MetaStorage(Protocol):
    """Small persisted values (the chat layer's identity mappings, the session record, the
    children index, an encrypted store's key records) by namespace (``kind``) and key. Every
    method is atomic; names are checked before."""

    def get(self, kind: str, key: str) -> str | None:
        """The value stored, or None."""
        ...

    def set(self, kind: str, key: str, value: str | None) -> None:
        """Store ``value`` atomically (None removes the entry)."""
        ...

    def add(self, kind: str, key: str, value: str) -> str:
        """Store ``value`` only when the key has none (the first of two racing writers wins);
        returns the value stored now."""
        ...

    def cas(self, kind: str, key: str, expected: str | None, new: str | None) -> bool:
        """Compare and set: store ``new`` (None removes the entry) only when the stored value
        is ``expected`` (None: no entry); True when it was (or when it already held ``new``
        and ``expected == new``), False when the stored value was another. Required of every
        backend, atomic across threads, store objects and processes (a lock file, a
        conditional statement): the building block of the session record and the children
        index, with no fallback."""
        ...

    def list(self, kind: str | None) -> builtins.list[tuple[str, str, str]]:
        """Every stored entry as ``(kind, key, value)``, of one ``kind`` or (None) of every
        kind, sorted by kind and key: what a whole-store copy enumerates."""
        ...


class MetaInMemory:
    """Meta entries in a dict in this process's memory (the memory store's and a static
    store's :class:`MetaStorage`), atomic under ``lock``."""

    def __init__(self, lock: threading.RLock | threading.Lock | None = None) -> None:
        self.entries: dict[tuple[str, str], str] = {}
        """The values by ``(kind, key)``."""
        self.lock = lock if lock is not None else threading.Lock()
        """Held by every method (a memory store shares it with its logs)."""

    def get(self, kind: str, key: str) -> str | None:
        with self.lock:
            return self.entries.get((kind, key))

    def set(self, kind: str, key: str, value: str | None) -> None:
        with self.lock:
            if value is None:
                self.entries.pop((kind, key), None)
            else:
                self.entries[(kind, key)] = value

    def add(self, kind: str, key: str, value: str) -> str:
        with self.lock:
            return self.entries.setdefault((kind, key), value)

    def cas(self, kind: str, key: str, expected: str | None, new: str | None) -> bool:
        with self.lock:
            if self.entries.get((kind, key)) != expected:
                return False
            if new is None:
                self.entries.pop((kind, key), None)
            else:
                self.entries[(kind, key)] = new
            return True

    def list(self, kind: str | None = None) -> builtins.list[tuple[str, str, str]]:
        with self.lock:
            items = [(k, key, v) for (k, key), v in self.entries.items() if kind in (None, k)]
        return sorted(items)


class LockHost(Protocol):
    """A store whose turn locks another store takes (:attr:`StoreParts.lock_through`)."""

    def lock(
        self,
        session_id: str,
        timeout: float | None = None,
        ttl: float | None = None,
        steal_after: float | None = None,
    ) -> Lease:
        """Take the session's turn lock (see ``BaseStore.lock``)."""
        ...

    def current_lease(self, session_id: str) -> Lease | None:
        """The session's lease current in this context, taken through this store."""
        ...

    def is_locked(self, session_id: str) -> bool:
        """Whether some thread or process holds the session's turn lock now."""
        ...

    def holds_lock(self, session_id: str) -> bool:
        """Whether the caller holds the session's turn lock, taken through this store."""
        ...


class StoreParts(msgspec.Struct, frozen=True):
    """What a backend hands :class:`~agentsession.store.BaseStore`: its storage, by
    composition."""

    catalog: Catalog
    """The sessions as a whole."""
    meta: MetaStorage
    """Small persisted values, with an atomic compare-and-set."""
    locker: Callable[[], Locker] | None = None
    """Makes the turn-lock implementation, when the first lock is taken."""
    lock_through: LockHost | None = None
    """Instead of a locker: the store whose turn locks this one takes (a view of one of its
    sessions), so that the two exclude each other and share their holders."""
    async_backend: Callable[[concurrent.futures.Executor], object] | None = None
    """For a store class declaring ``native_async``: makes its
    ``agentsession.aio.AsyncBackend`` on the async store's executor."""
    reconnect_timeout: float = 0.0
    """Seconds an append rides out a lost connection or an unreachable server (0: a file
    store has none)."""
    index: object | None = None
    """Where the backend keeps catalog rows and search documents (an
    :class:`agentsession.indexing.CatalogIndex`; None: it keeps none, and the store lists ids
    and times only)."""
    watcher: Callable[[], object] | None = None
    """Makes the :class:`agentsession.follow.Watcher` that tells followers of appends other
    processes make (None: :class:`agentsession.follow.PollWatcher`)."""


def page_of(
    infos: Iterable[SessionInfo], prefix: str | None, limit: int | None, offset: int
) -> builtins.list[SessionInfo]:
    """:meth:`Catalog.list_page` over a whole listing: filtered by ``prefix``, sorted by
    ``updated_at`` then id (both descending), sliced."""
    page = [i for i in infos if prefix is None or i.id.startswith(prefix)]
    oldest = _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)
    page.sort(key=lambda i: (i.updated_at or oldest, i.id), reverse=True)
    return page[offset : None if limit is None else offset + limit]


def expired_among(
    infos: Iterable[SessionInfo],
    last_append: Callable[[str], _dt.datetime | None],
    cutoff: _dt.datetime,
) -> builtins.list[str]:
    """:meth:`Catalog.expired_ids` over a whole listing: the sessions whose
    ``last_append(id)`` is before ``cutoff``."""
    out: builtins.list[str] = []
    for info in infos:
        last = last_append(info.id)
        if last is not None and last < cutoff:
            out.append(info.id)
    return out


def meta_update(
    meta: MetaStorage, kind: str, key: str, change: Callable[[str | None], str | None]
) -> str | None:
    """Read, change and write one entry atomically (a compare-and-set loop): ``change`` gets
    the stored value (None: no entry) and returns the new one (None removes it); it may run
    more than once when other writers change the entry meanwhile. Returns the value stored."""
    for _ in range(META_UPDATE_RETRIES):
        current = meta.get(kind, key)
        wanted = change(current)
        if wanted == current:
            return current
        if meta.cas(kind, key, current, wanted):
            return wanted
    raise ConflictError(
        f"the {kind} entry {key!r} kept changing while it was updated "
        f"({META_UPDATE_RETRIES} tries)"
    )
