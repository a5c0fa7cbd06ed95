"""``AsyncStore``, ``AsyncTurnLock`` and ``open_async_store`` (see :mod:`agentsession.aio`)."""

from __future__ import annotations

import asyncio
import builtins
import concurrent.futures
import contextlib
import datetime as _dt
import functools
import inspect
import logging
import os
import threading
import weakref
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Iterable,
    Mapping,
    Sequence,
)
from typing import TYPE_CHECKING, Any, TypeVar, overload

from ..archive import ArchiveReport
from ..children import ChildInfo, LifecycleEvent, LifecycleHook
from ..contract import SessionInfo, StoreRecoveryReport
from ..errors import LeaseLost, LockTimeout, UsageError
from ..events import Event
from ..fencing import Lease
from ..follow import Change
from ..inbox import Delivery
from ..listing import Hit, Page, Price, Totals
from ..messages import Message
from ..retention import AuditEntry, ErasureReport, Hold, RetentionReport
from ..session import BaseSession
from ..stats import SessionStats, StoreStats
from ..store import BaseStore, open_store
from ._backend import AsyncBackend, Call, CallKind, Offload, backend_for, default_max_threads
from ._session import AsyncDelivery, AsyncSession

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["AsyncStore", "AsyncTurnLock", "open_async_store"]

log = logging.getLogger("agentsession")

T = TypeVar("T")

AsyncLifecycleHook = Callable[[LifecycleEvent], Awaitable[object]]
"""A coroutine function called with each lifecycle event (see
:meth:`AsyncStore.add_lifecycle_hook`)."""

_FIRST_PAUSE = 0.001
_LONGEST_PAUSE = 0.05


def _check_settings(
    executor: concurrent.futures.Executor | None, max_threads: int | None, offload: object
) -> None:
    if offload not in ("auto", "always"):
        raise UsageError(f"offload must be 'auto' or 'always', not {offload!r}")
    if max_threads is not None and (
        isinstance(max_threads, bool) or not isinstance(max_threads, int) or max_threads < 1
    ):
        raise UsageError(f"max_threads must be an int >= 1 or None, not {max_threads!r}")
    if executor is not None and max_threads is not None:
        raise UsageError("give executor= or max_threads=, not both")


def _thread_pool(max_threads: int | None) -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(
        max_threads or default_max_threads(), thread_name_prefix="agentsession-aio"
    )


class AsyncTurnLock:
    """A session's turn lock, taken from asyncio: ``async with store.lock(id, timeout=5):``, or
    ``lock = await store.lock(id)`` then ``await lock.release()``.

    Waiting never blocks the event loop nor holds a worker thread: the lock is tried (``timeout
    0``, in a worker thread where a try may touch storage) with pauses of 1 ms growing to 50 ms
    between tries, until it is taken or ``timeout`` runs out
    (:class:`~agentsession.errors.LockTimeout`). The task that took it holds it: taking it
    again from the same task raises :class:`~agentsession.errors.UsageError` (not reentrant),
    another task waits, and sync work the task runs in worker threads (a merge into this
    session) counts as the holder. Cancelled while a try runs, a lock the try took is released
    before ``CancelledError`` propagates.
    """

    def __init__(
        self,
        store: AsyncStore,
        session_id: str,
        timeout: float | None,
        ttl: float | None = None,
        steal_after: float | None = None,
    ) -> None:
        self._store = store
        self.session_id = session_id
        """The session whose turns this lock serialises."""
        self.timeout = timeout
        """Seconds to wait for it (None: for ever; 0: one try)."""
        self.ttl = ttl
        """Seconds the lease lasts without renewal (None: it does not expire)."""
        self.steal_after = steal_after
        """Take the lock from a holder that has not renewed for that long (None: never)."""
        self._lock: Lease | None = None
        self._current: contextlib.AbstractContextManager[Lease] | None = None
        self._taken = False

    @property
    def held(self) -> bool:
        """True from when it is taken until it is released (or its store closed, or its
        lease known lost), as far as this process knows (no I/O)."""
        return self._lock is not None and self._lock.locally_held

    @property
    def lease(self) -> Lease:
        """The sync lease taken (its ``epoch``, ``stolen``, ``lost``); raises
        :class:`~agentsession.errors.UsageError` before it is taken."""
        if self._lock is None:
            raise UsageError(f"the turn lock of session {self.session_id!r} is not taken")
        return self._lock

    @property
    def epoch(self) -> int:
        """The lease's fencing epoch (see :class:`agentsession.fencing.Lease`)."""
        return self.lease.epoch

    @property
    def stolen(self) -> bool:
        """Whether the lease was taken over from a holder that had not released it."""
        return self.lease.stolen

    @property
    def lost(self) -> bool:
        """Whether the lease is known lost (no I/O)."""
        return self._lock is not None and self._lock.lost

    @property
    def locally_held(self) -> bool:
        """Whether the lease is held as far as this process knows (no I/O): :attr:`held`."""
        return self.held

    @property
    def backend_lock(self) -> bool:
        """Whether the lease also holds the backend's lock."""
        return self.lease.backend_lock

    @property
    def scope(self) -> object:
        """The lock registry the lease belongs to (its store's)."""
        return self.lease.scope

    def lost_error(self, current: int = 0) -> LeaseLost:
        """Mark the lease lost; the error to raise."""
        return self.lease.lost_error(current)

    async def renew(self) -> None:
        """Renew the lease now (in a worker thread); raises
        :class:`~agentsession.errors.LeaseLost` when another worker took it."""
        lease = self.lease
        await self._store._call("lock.renew", lease.renew, kind="lock", propagate=True)

    async def acquire(self) -> AsyncTurnLock:
        """Take the lock (see the class); returns this object, held."""
        if self._taken:
            raise UsageError("this turn lock object was taken already; ask store.lock() again")
        self._taken = True
        store, timeout = self._store, self.timeout
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + max(timeout, 0.0)
        # A negative timeout goes to the sync call, which refuses it as the sync API does.
        first = timeout if timeout is not None and timeout < 0 else 0.0
        pause = _FIRST_PAUSE
        while True:
            try:
                self._lock = await store._call(
                    "lock.try",
                    functools.partial(
                        store.sync.lock, self.session_id, first, self.ttl, self.steal_after
                    ),
                    kind="lock",
                    args={"session_id": self.session_id},
                    propagate=True,
                    undo=Lease.release,
                )
                return self
            except LockTimeout:
                if deadline is None:
                    wait = pause
                else:
                    wait = min(pause, deadline - loop.time())
                    if wait <= 0:
                        raise LockTimeout(self.session_id, timeout or 0.0) from None
            await asyncio.sleep(wait)
            pause = min(pause * 2, _LONGEST_PAUSE)

    async def release(self) -> None:
        """Release the lock; releasing twice (or after the store was closed) is harmless.
        Shielded: a cancelled task still releases it."""
        lock, self._lock = self._lock, None
        if lock is None:
            return
        current, self._current = self._current, None
        if current is not None:
            current.__exit__(None, None, None)
        if self._store.closed:
            lock.release()  # only forgets it: closing the store released it
            return
        await self._store._call(
            "lock.release", lock.release, kind="lock", propagate=True, shield=True, check=False
        )

    def __await__(self) -> Generator[Any, None, AsyncTurnLock]:
        return self.acquire().__await__()

    async def __aenter__(self) -> AsyncTurnLock:
        if not self._taken:
            await self.acquire()
        # Current in this task: its appends to the session carry the lease's epoch.
        self._current = self.lease.current()
        self._current.__enter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.release()

    def __repr__(self) -> str:
        state = "held" if self.held else "not held"
        return f"<AsyncTurnLock {self.session_id!r} {state}>"


class AsyncStore:
    """A store for asyncio code: every operation of :class:`~agentsession.BaseStore` as a
    coroutine (or an async context manager), each delegating to the sync store it wraps, inline
    on the loop or in a worker thread of the store's own pool (see :mod:`agentsession.aio` and
    ``docs/architecture.md``, "The async API"). Open one with :func:`open_async_store`.

    ``executor`` replaces the store's thread pool (it is then not shut down on close);
    ``max_threads`` sizes the pool (default as asyncio's default executor); ``offload="always"``
    runs every operation that may touch storage in a worker thread, also where the backend's
    placement would run it inline.
    """

    def __init__(
        self,
        store: BaseStore,
        *,
        executor: concurrent.futures.Executor | None = None,
        max_threads: int | None = None,
        offload: Offload = "auto",
    ) -> None:
        if not isinstance(store, BaseStore):
            raise UsageError(f"AsyncStore wraps a BaseStore, not {type(store).__name__}")
        _check_settings(executor, max_threads, offload)
        self._sync = store
        self._own_executor = executor is None
        self._executor = executor or _thread_pool(max_threads)
        self._backend = backend_for(store, self._executor, offload)
        self._sessions: weakref.WeakValueDictionary[int, AsyncSession] = (
            weakref.WeakValueDictionary()
        )
        self._sessions_lock = threading.Lock()
        self._hooks: dict[Any, LifecycleHook] = {}
        self._closed = False

    # -- what it wraps ----------------------------------------------------------------------

    @property
    def sync(self) -> BaseStore:
        """The sync store this wraps (share it with sync code: both see the same sessions)."""
        return self._sync

    @property
    def backend(self) -> AsyncBackend:
        """Where this store's operations run (see :class:`~agentsession.aio.AsyncBackend`)."""
        return self._backend

    @property
    def url(self) -> str:
        """What ``open_async_store`` (or ``open_store``) takes to open this store again."""
        return self._sync.url

    @property
    def location(self) -> str:
        """Where the store keeps its data, for people."""
        return self._sync.location

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    async def _call(
        self,
        op: str,
        fn: Callable[[], T],
        *,
        kind: CallKind = "other",
        session: BaseSession | None = None,
        args: Mapping[str, Any] | None = None,
        user_message: bool = False,
        shield: bool = False,
        propagate: bool = False,
        undo: Callable[[T], object] | None = None,
        check: bool = True,
    ) -> T:
        """Run one sync call through the backend (refused once the store is closed)."""
        if check and self._closed:
            raise UsageError(f"store {self.location} is closed")
        call = Call(
            op,
            kind,
            fn,
            session,
            args,
            user_message=user_message,
            shield=shield,
            propagate=propagate,
            undo=undo,
        )
        return await self._backend.call(call)

    def _wrap(self, session: BaseSession) -> AsyncSession:
        """The async session of a sync one: one wrapper per sync session object, so that
        ``await store.get(id)`` twice gives the same object as the sync store does."""
        with self._sessions_lock:
            wrapper = self._sessions.get(id(session))
            if wrapper is None or wrapper.sync is not session:
                wrapper = AsyncSession(self, session)
                self._sessions[id(session)] = wrapper
            return wrapper

    # -- sessions ---------------------------------------------------------------------------

    async def get(self, session_id: str) -> AsyncSession:
        """The session with this id; it exists in storage once something is appended
        (:meth:`agentsession.BaseStore.get`)."""
        sync = await self._call("store.get", functools.partial(self._sync.get, session_id))
        return self._wrap(sync)

    async def open(self, session_id: str) -> AsyncSession:
        """The session with this id, which must exist
        (:class:`~agentsession.errors.SessionNotFound` otherwise)."""
        sync = await self._call("store.open", functools.partial(self._sync.open, session_id))
        return self._wrap(sync)

    async def create(
        self,
        session_id: str,
        events: Sequence[Event] = (),
        *,
        agent_id: str | None = None,
        channel_type: str | None = None,
        channel_id: str | None = None,
        model: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> AsyncSession:
        """A new session whose log starts with ``events``, written atomically only if the
        session has none; without events, its record only
        (:meth:`agentsession.BaseStore.create`)."""
        fn = functools.partial(
            self._sync.create,
            session_id,
            events,
            agent_id=agent_id,
            channel_type=channel_type,
            channel_id=channel_id,
            model=model,
            metadata=metadata,
        )
        return self._wrap(await self._call("store.create", fn))

    async def exists(self, session_id: str) -> bool:
        """Whether the session has at least one event."""
        return await self._call("store.exists", functools.partial(self._sync.exists, session_id))

    async def list(
        self,
        prefix: str | None = None,
        limit: int | None = None,
        offset: int = 0,
        *,
        where: Mapping[str, object] | None = None,
        order: str = "updated",
        cursor: str | None = None,
    ) -> Page[SessionInfo]:
        """Sessions whose id starts with ``prefix``, most recently appended first, filtered by
        ``where``, a page at a time (:meth:`agentsession.BaseStore.list`)."""
        fn = functools.partial(
            self._sync.list, prefix, limit, offset, where=where, order=order, cursor=cursor
        )
        return await self._call("store.list", fn)

    async def search(
        self,
        query: str,
        *,
        where: Mapping[str, object] | None = None,
        session_id: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> Page[Hit]:
        """Events whose text holds every word of ``query``
        (:meth:`agentsession.BaseStore.search`)."""
        fn = functools.partial(
            self._sync.search, query, where=where, session_id=session_id, limit=limit,
            cursor=cursor,
        )
        return await self._call("store.search", fn)

    async def totals(
        self,
        *,
        where: Mapping[str, object] | None = None,
        group_by: str = "tenant",
        since: _dt.date | None = None,
        until: _dt.date | None = None,
    ) -> builtins.list[Totals]:
        """Usage summed by ``group_by`` (:meth:`agentsession.BaseStore.totals`)."""
        fn = functools.partial(
            self._sync.totals, where=where, group_by=group_by, since=since, until=until
        )
        return await self._call("store.totals", fn)

    async def set_prices(self, prices: Mapping[str, Price | Mapping[str, float]]) -> None:
        """Record what each model's tokens cost (:meth:`agentsession.BaseStore.set_prices`)."""
        await self._call("store.set_prices", functools.partial(self._sync.set_prices, prices))

    async def reindex(
        self,
        session_ids: Iterable[str] | None = None,
        *,
        progress: Callable[[str], None] | None = None,
    ) -> int:
        """Rebuild the catalog and search index from the logs
        (:meth:`agentsession.BaseStore.reindex`; ``progress`` is called in the thread that
        rebuilds)."""
        await_fn = functools.partial(self._sync.reindex, session_ids, progress=progress)
        return await self._call("store.reindex", await_fn)

    async def delete(self, session_id: str, *, recursive: bool = False) -> bool:
        """Delete the session (with ``recursive``, its child sessions first); True if it
        existed (:meth:`agentsession.BaseStore.delete`)."""
        fn = functools.partial(self._sync.delete, session_id, recursive=recursive)
        return await self._call("store.delete", fn)

    async def children_of(
        self, parent_id: str, *, include_discarded: bool = False
    ) -> builtins.list[ChildInfo]:
        """The child sessions forked from ``parent_id``, in fork order (discarded ones only
        with ``include_discarded``: :meth:`agentsession.BaseStore.children_of`)."""
        fn = functools.partial(
            self._sync.children_of, parent_id, include_discarded=include_discarded
        )
        return await self._call("store.children_of", fn)

    @overload
    async def stats(self, session_id: None = None) -> StoreStats: ...

    @overload
    async def stats(self, session_id: str) -> SessionStats: ...

    async def stats(self, session_id: str | None = None) -> StoreStats | SessionStats:
        """The store's counts, or with ``session_id`` that session's
        (:meth:`agentsession.BaseStore.stats`)."""
        fn = functools.partial(self._sync.stats, session_id)
        return await self._call("store.stats", fn)

    async def expired(self) -> builtins.list[str]:
        """Ids of the sessions whose last append is older than the TTL."""
        return await self._call("store.expired", self._sync.expired)

    async def archive(
        self,
        session_id: str | None = None,
        *,
        before: int | None = None,
        keep_after_marker: bool = True,
    ) -> ArchiveReport:
        """Move what no derived history needs out of the live logs
        (:meth:`agentsession.BaseStore.archive`)."""
        fn = functools.partial(
            self._sync.archive, session_id, before=before, keep_after_marker=keep_after_marker
        )
        return await self._call("store.archive", fn)

    async def apply_retention(self, *, dry_run: bool = False) -> RetentionReport:
        """Archive or delete sessions as the retention rules say
        (:meth:`agentsession.BaseStore.apply_retention`)."""
        fn = functools.partial(self._sync.apply_retention, dry_run=dry_run)
        return await self._call("store.apply_retention", fn)

    async def hold(self, session_id: str, reason: str) -> None:
        """Place a legal hold on the session (:meth:`agentsession.BaseStore.hold`)."""
        await self._call("store.hold", functools.partial(self._sync.hold, session_id, reason))

    async def release(self, session_id: str) -> bool:
        """Lift the session's legal hold (:meth:`agentsession.BaseStore.release`)."""
        return await self._call("store.release", functools.partial(self._sync.release, session_id))

    async def holds(self) -> dict[str, Hold]:
        """Every legal hold, by session id (:meth:`agentsession.BaseStore.holds`)."""
        return await self._call("store.holds", self._sync.holds, kind="read")

    async def audit_log(self) -> builtins.list[AuditEntry]:
        """The store's audit log, oldest first (:meth:`agentsession.BaseStore.audit_log`)."""
        return await self._call("store.audit_log", self._sync.audit_log, kind="read")

    async def export_user(self, user: str, dest: str | os.PathLike[str] | None = None) -> str:
        """Write everything ``user`` took part in as JSONL with a manifest
        (:meth:`agentsession.BaseStore.export_user`); returns the directory."""
        fn = functools.partial(self._sync.export_user, user, dest)
        return await self._call("store.export_user", fn)

    async def erase_user(self, user: str) -> ErasureReport:
        """Erase every session ``user`` took part in that no hold keeps
        (:meth:`agentsession.BaseStore.erase_user`)."""
        return await self._call("store.erase_user", functools.partial(self._sync.erase_user, user))

    async def purge_expired(self) -> builtins.list[str]:
        """Delete every expired session; returns their ids."""
        return await self._call("store.purge_expired", self._sync.purge_expired)

    # -- the inbox ----------------------------------------------------------------------------

    async def changes(
        self,
        *,
        prefix: str | None = None,
        after: str | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[Change]:
        """The store-wide feed of created, grown and deleted sessions
        (:meth:`agentsession.BaseStore.changes`): ``async for change in store.changes():``;
        each step of the sync feed runs as one call."""
        generator = self._sync.changes(prefix=prefix, after=after, timeout=timeout)
        try:
            while True:
                change = await self._call(
                    "changes", functools.partial(next, generator, None), kind="read"
                )
                if change is None:
                    return
                yield change
        finally:
            await self._call("changes.close", generator.close, kind="other", shield=True)

    async def deliver(
        self,
        session_id: str,
        message: Message | str,
        *,
        id: str | None = None,
        policy: str | None = None,
        agent: str | None = None,
        user: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> AsyncDelivery:
        """Record an incoming user message in the conversation's inbox, without the turn
        lock; returns the stored delivery (:meth:`agentsession.BaseStore.deliver`: a repeated
        ``id`` returns the first, ``policy="reject"`` raises
        :class:`~agentsession.errors.SessionBusy` while a turn runs)."""
        sync = self._sync

        def run() -> tuple[Delivery, BaseSession]:
            delivery = sync.deliver(
                session_id, message, id=id, policy=policy, agent=agent, user=user, meta=meta
            )
            return delivery, sync.get(session_id)

        delivery, session = await self._call("store.deliver", run, kind="append")
        return AsyncDelivery(self._wrap(session), delivery)

    # -- turn locks and recovery --------------------------------------------------------------

    def holds_lock(self, session_id: str) -> bool:
        """Whether the calling task holds the session's turn lock, taken through this store
        (or its sync store): no I/O (:meth:`agentsession.BaseStore.holds_lock`)."""
        return self._sync.holds_lock(session_id)

    def lock(
        self,
        session_id: str,
        timeout: float | None = None,
        ttl: float | None = None,
        steal_after: float | None = None,
    ) -> AsyncTurnLock:
        """The session's turn lock, taken by ``async with`` or ``await`` (see
        :class:`AsyncTurnLock`); ``timeout`` in seconds (None waits for ever, 0 tries once);
        ``ttl`` and ``steal_after`` as :meth:`agentsession.BaseStore.lock`'s. Inside ``async
        with`` its lease is current in the task: appends carry its epoch."""
        return AsyncTurnLock(self, session_id, timeout, ttl, steal_after)

    async def is_locked(self, session_id: str) -> bool:
        """Whether some task, thread or process holds the session's turn lock now."""
        fn = functools.partial(self._sync.is_locked, session_id)
        return await self._call("lock.is_locked", fn, kind="lock")

    async def recover(
        self,
        session_ids: Sequence[str] | None = None,
        *,
        lock_timeout: float = 0.0,
        dry_run: bool = False,
    ) -> builtins.list[StoreRecoveryReport]:
        """Repair every crashed turn whose turn lock is free
        (:meth:`agentsession.BaseStore.recover`); in a worker thread on every backend (with
        ``lock_timeout`` it waits there for each session's lock)."""
        fn = functools.partial(
            self._sync.recover, session_ids, lock_timeout=lock_timeout, dry_run=dry_run
        )
        return await self._call("store.recover", fn)

    # -- small persisted values -----------------------------------------------------------------

    async def meta_get(self, namespace: str, key: str) -> str | None:
        """A small persisted value (None when unset)."""
        fn = functools.partial(self._sync.meta_get, namespace, key)
        return await self._call("store.meta_get", fn)

    async def meta_set(self, namespace: str, key: str, value: str | None) -> None:
        """Store a small value atomically (None removes it)."""
        fn = functools.partial(self._sync.meta_set, namespace, key, value)
        await self._call("store.meta_set", fn)

    # -- lifecycle hooks ----------------------------------------------------------------------

    def add_lifecycle_hook(self, hook: LifecycleHook | AsyncLifecycleHook) -> None:
        """Call ``hook`` after every fork, merge and discard made through this store (also
        through the sync store it wraps), once what it reports is durable
        (:meth:`agentsession.BaseStore.add_lifecycle_hook`).

        A plain function is called in the worker thread that made the write (never on the
        event loop). A coroutine function runs on the event loop this is called from, and the
        fork, merge or discard returns once it has finished, as with a plain hook (its worker
        thread waits for it meanwhile); its exceptions are logged and never reach the
        caller."""
        if inspect.iscoroutinefunction(hook):
            wrapped = _loop_hook(hook, asyncio.get_running_loop())
        elif callable(hook):
            wrapped = hook  # type: ignore[assignment]
        else:
            raise UsageError(f"a lifecycle hook must be callable, not {hook!r}")
        self._hooks[hook] = wrapped
        self._sync.add_lifecycle_hook(wrapped)

    def remove_lifecycle_hook(self, hook: LifecycleHook | AsyncLifecycleHook) -> None:
        """Stop calling ``hook`` (nothing happens when it was not added)."""
        wrapped = self._hooks.pop(hook, None)
        if wrapped is not None:
            self._sync.remove_lifecycle_hook(wrapped)

    # -- encryption ---------------------------------------------------------------------------

    @property
    def encrypted(self) -> bool:
        """Whether the store encrypts its events (checked when it was opened: no I/O)."""
        return self._sync.encrypted

    @property
    def keeps_catalog(self) -> bool:
        """Whether the store keeps a catalog (:attr:`agentsession.BaseStore.keeps_catalog`)."""
        return self._sync.keeps_catalog

    @property
    def searchable(self) -> bool:
        """Whether ``search`` works (:attr:`agentsession.BaseStore.searchable`)."""
        return self._sync.searchable

    async def change_passphrase(
        self,
        old: str | None,
        new: str | None,
        *,
        old_key: bytes | None = None,
        new_key: bytes | None = None,
    ) -> None:
        """Wrap the store's key under a new passphrase or key
        (:meth:`agentsession.BaseStore.change_passphrase`; scrypt runs in a worker thread)."""
        fn = functools.partial(
            self._sync.change_passphrase, old, new, old_key=old_key, new_key=new_key
        )
        await self._call("store.change_passphrase", fn)

    async def shred(
        self, session_id: str, *, recursive: bool = False, keep_children: bool = False
    ) -> builtins.list[str]:
        """Destroy the session's key, and with ``recursive`` its children's; returns the ids
        shredded (:meth:`agentsession.BaseStore.shred`)."""
        fn = functools.partial(
            self._sync.shred, session_id, recursive=recursive, keep_children=keep_children
        )
        return await self._call("store.shred", fn)

    async def is_shredded(self, session_id: str) -> bool:
        """Whether the session was shredded (:meth:`agentsession.BaseStore.is_shredded`)."""
        return await self._call(
            "store.is_shredded", functools.partial(self._sync.is_shredded, session_id)
        )

    async def rotate_key(self, session_id: str) -> str:
        """Seal the session's new events under a new data key; returns its key id."""
        fn = functools.partial(self._sync.rotate_key, session_id)
        return await self._call("store.rotate_key", fn)

    # -- closing ------------------------------------------------------------------------------

    async def close(self) -> None:
        """Close the sync store (its sessions, turn locks, connections), the backend's own
        connections (PostgreSQL's async pool) and the thread pool; safe to call twice.
        Shielded: a cancelled task still closes it."""
        if self._closed:
            return
        try:
            await self._call("store.close", self._sync.close, shield=True)
        finally:
            self._closed = True
            try:
                await self._backend.close()  # a native pool, for one
            finally:
                if self._own_executor:
                    self._executor.shutdown(wait=False)

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<AsyncStore {self._backend.name} {self.location}>"


def _loop_hook(hook: AsyncLifecycleHook, loop: asyncio.AbstractEventLoop) -> LifecycleHook:
    """A sync hook running the coroutine hook on ``loop`` and waiting for it (from a worker
    thread); on the loop's own thread it can only be scheduled."""

    def run(event: LifecycleEvent) -> None:
        if loop.is_closed() or not loop.is_running():
            log.error("lifecycle hook %r skipped: its event loop is not running", hook)
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:  # a fork made through the sync API on the loop itself
            task = loop.create_task(_logged(hook, event))
            _pending_hooks.add(task)
            task.add_done_callback(_pending_hooks.discard)
            return
        asyncio.run_coroutine_threadsafe(_logged(hook, event), loop).result()

    return run


_pending_hooks: set[asyncio.Task[None]] = set()


async def _logged(hook: AsyncLifecycleHook, event: LifecycleEvent) -> None:
    try:
        await hook(event)
    except Exception:
        log.exception("lifecycle hook %r failed on %s of %s", hook, event.type, event.child_id)


class _OpeningStore:
    """What :func:`open_async_store` returns: await it for the store, or use it in
    ``async with`` to close the store on leaving the block."""

    def __init__(self, open_sync: Callable[[], BaseStore], settings: dict[str, Any]) -> None:
        self._open_sync = open_sync
        self._settings = settings
        self._store: AsyncStore | None = None

    async def _open(self) -> AsyncStore:
        settings = self._settings
        executor: concurrent.futures.Executor | None = settings["executor"]
        own = executor is None
        if executor is None:
            executor = _thread_pool(settings["max_threads"])
        pending = executor.submit(self._open_sync)  # connecting, scrypt: never on the loop
        try:
            sync = await asyncio.shield(asyncio.wrap_future(pending))
        except BaseException:
            if not pending.cancel():
                pending.add_done_callback(_close_opened)
            if own:
                executor.shutdown(wait=False)
            raise
        try:
            store = AsyncStore(sync, executor=executor, offload=settings["offload"])
        except BaseException:
            sync.close()
            raise
        store._own_executor = own
        return store

    def __await__(self) -> Generator[Any, None, AsyncStore]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncStore:
        self._store = await self._open()
        return self._store

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        store, self._store = self._store, None
        if store is not None:
            await store.close()


def _close_opened(future: concurrent.futures.Future[BaseStore]) -> None:
    """Close a store that finished opening after its opener was cancelled."""
    if not future.cancelled() and future.exception() is None:
        future.result().close()


def open_async_store(
    target: str | os.PathLike[str] | BaseStore,
    *,
    executor: concurrent.futures.Executor | None = None,
    max_threads: int | None = None,
    offload: Offload = "auto",
    **options: Any,
) -> _OpeningStore:
    """Open a store for asyncio code: ``store = await open_async_store(url)``, or
    ``async with open_async_store(url) as store: ...`` (closed on leaving the block).

    ``target`` and ``options`` are :func:`~agentsession.open_store`'s (a URL, a path or a sync
    store object to wrap); opening runs in a worker thread (connecting, and scrypt for a
    passphrase, never block the loop). ``executor``, ``max_threads`` and ``offload`` are
    :class:`AsyncStore`'s.
    """
    _check_settings(executor, max_threads, offload)
    settings = {"executor": executor, "max_threads": max_threads, "offload": offload}
    return _OpeningStore(functools.partial(open_store, target, **options), settings)
