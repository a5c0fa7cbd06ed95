"""PostgreSQL for the async API: psycopg's native ``AsyncConnectionPool`` instead of threads.

A :class:`~agentsession.backends.postgres.PostgresStore`'s parts
(:attr:`StoreParts.async_backend <agentsession.catalog.StoreParts.async_backend>`) make a
:class:`PostgresAsyncBackend`, which has a pool of its own (the store's server,
settings, sizes and checks; opened on the event loop that first uses it, closed with the async
store) and gives each plain PostgreSQL session a :class:`PostgresNativeLog`: the session's log
storage as coroutines (:class:`agentsession.ops.AsyncLog`). The async session drives the sync
API's own plans on it (:func:`agentsession.ops.adrive`; see :mod:`agentsession.aio._backend`)
for ``append``, ``append_many``, ``read``, ``latest_seq``, ``messages`` and ``entries``: the
append pipeline, catch-up, window loading, history cap and retries are the sync code. Each
coroutine is the sync storage method of the session's
:class:`~agentsession.backends.postgres.storage.PostgresLog` with ``await``: the log builds the
same statements and parameters and takes the rows in (``open_request``/``opened``,
``refresh_request``/``take_refresh``, ``append_request``/``take_append``,
``catch_up_request``, ``decode``), so that a plan cannot tell them apart and the log's state
(its life, whether it must open again) is one object's. What the log may know of the session
comes through the session's public plans (``session.plans.log``, ``session.plans.view``). The
single-event fast path is native too (``AppendOne``: the sync log's ``append_next``
statement).

The pool closes with the async store, or, left open, when its event loop shuts down (a task
of the backend's closes it when ``asyncio.run`` cancels the tasks left: psycopg_pool's workers
would otherwise keep ``asyncio.run`` from returning); the next loop then gets a new pool. A
store closed while the pool's loop is open but idle (the loop ``Runner.run_sync`` of the
OpenAI Agents SDK keeps between runs) runs that loop until the pool is closed.

On an encrypted store the plans read and record the session's key as operations too
(:class:`~agentsession.ops.MetaGet`, :class:`~agentsession.ops.MetaAdd`:
:meth:`PostgresNativeLog.meta` and :meth:`~PostgresNativeLog.meta_add`), and seal and open
events on the loop (AES-GCM of a few kilobytes). These calls run in worker threads instead (as
every other call): on a subclass's session, or one without a PostgreSQL log of this store; when
a worker thread holds the session's lock (the loop never waits for another thread's storage
work); when the call comes from an event loop other than the pool's while that one is still
open (a pool whose loop was closed is replaced by one on the new loop).

**Cancellation.** An append's plan runs in a task of its own (:meth:`PostgresNativeLog.drive`),
shielded from the caller's cancellation once it has started its statement (``_write``: one
autocommit transaction, committed whole or not at all). Cancelled before the plan started a
write (waiting for the session's queue, a catch-up, waiting for a pooled connection), the plan
is interrupted where it waits, with nothing written. Once it has started one, the cancellation
does not reach it: the plan runs to its end (the statement finished, its outcome taken into the
session object: the batch's events are in the window, or nothing was written) and then the
caller gets ``CancelledError``, as for work handed to a worker thread; so nothing lands later.
psycopg would otherwise cancel the query in the server and, cancelled again, close the
connection with the outcome unknown. Should the plan's task itself be interrupted after its
write started (the event loop shutting down), the session object reloads from storage when next
used (the log answers :data:`~agentsession.storage.REOPEN` until it has opened again). Reads
are interrupted where they wait.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import msgspec
import psycopg
import psycopg_pool

from ...aio._backend import AsyncBackend
from ...backoff import Backoff
from ...errors import StorageError, StoreUnavailable, UsageError
from ...events import Event
from ...ops import Plan, adrive
from ...session import BaseSession
from ...storage import REOPEN, LogView, Reopen
from ...store import BaseStore
from .replicas import REPLAY_LSN, WRITE_LSN, Freshness, Replica, ReplicaSet
from .schema import Statements
from .storage import AppendRequest, PostgresLog, Request, check_text

__all__ = ["PostgresAsyncBackend", "PostgresHost", "PostgresLog", "PostgresNativeLog"]

log = logging.getLogger(__name__)

T = TypeVar("T")
_Row = tuple[Any, ...]
_Conn = psycopg.AsyncConnection[_Row]
_Pool = psycopg_pool.AsyncConnectionPool[_Conn]


class PostgresHost(Protocol):
    """What the async backend uses of a PostgreSQL store's connections (the store's
    :class:`~agentsession.backends.postgres.connections.Connections`)."""

    @property
    def closed(self) -> bool:
        """Whether the store's connections were closed (the store is closed)."""
        ...

    def make_async_pool(self) -> _Pool: ...

    def failure(self, exc: psycopg.Error, action: str, write: str = "") -> StorageError: ...

    def pool_timeout_error(
        self,
        pool: psycopg_pool.ConnectionPool[Any] | psycopg_pool.AsyncConnectionPool[Any],
        action: str,
    ) -> StoreUnavailable: ...


class PostgresNativeLog:
    """A plain PostgreSQL session's log storage on the async pool: the coroutines of
    :class:`agentsession.ops.AsyncLog`, each the sync method of the session's
    :class:`PostgresLog` (:attr:`pg`) with ``await``, given what the log may know of the
    session (:attr:`view`). One per session object and event loop; used by one plan at a time
    (its tasks queue on :attr:`queue`), with the session's lock held."""

    __slots__ = ("_backend", "_pool", "_queue", "_writing", "loop", "pg", "session", "view")

    def __init__(
        self,
        backend: PostgresAsyncBackend,
        session: BaseSession,
        pg: PostgresLog,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._backend = backend
        self.session = session
        """The session object, as the plans know it."""
        self.pg = pg
        """The session's log storage."""
        self.view: LogView = session.plans.view
        """What the log may know of the session."""
        self.loop = loop
        """The event loop this log belongs to."""
        self._queue = asyncio.Lock()
        self._pool: _Pool | None = None
        self._writing = False  # whether the running plan has started a write

    @property
    def queue(self) -> asyncio.Lock:
        """The lock this loop's tasks take to drive a plan of the session."""
        return self._queue

    async def connect(self) -> bool:
        """The backend's pool for this loop (opened on first use); False when the pool
        belongs to another loop that is still open."""
        self._pool = await self._backend.connections()
        return self._pool is not None

    async def drive(self, plan: Plan[T], *, writes: bool) -> T:
        """Run ``plan`` on this log (the caller holds the session's lock). A plan that
        ``writes`` runs in a task of its own: cancelled before the plan started a write, it
        is interrupted where it waits (nothing written); once it has, it runs to its end (the
        write settled and taken in, the session object consistent) and then the caller gets
        ``CancelledError``. Another plan is interrupted where it waits."""
        if not writes:
            return await adrive(plan, self.session, self)
        self._writing = False
        task = asyncio.ensure_future(adrive(plan, self.session, self))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done() and not self._writing:
                task.cancel()
            while not task.done():  # however often the caller is cancelled meanwhile
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait([task])
            if not task.cancelled():
                task.exception()  # retrieved: the cancellation is what the caller gets
            raise

    # -- ops.AsyncLog -------------------------------------------------------------------------

    async def open(self) -> tuple[list[Event], bool]:
        """``PostgresLog.open``: the full window and the life."""
        pg = self.pg
        return pg.opened(await self._read(pg.open_request(tail=False)), tail=False)

    async def open_tail(self) -> tuple[list[Event], bool]:
        """``PostgresLog.open_tail``: the latest events and the life, in one round trip."""
        pg = self.pg
        return pg.opened(await self._read(pg.open_request(tail=True)), tail=True)

    async def refresh(self, *, primary: bool = False) -> list[Event] | Reopen:
        """``PostgresLog.refresh``: the events other writers appended since the session
        object last looked; :data:`~agentsession.storage.REOPEN` when it must open the log
        again (the plan then does, natively). ``primary``: never from a read replica."""
        pg = self.pg
        if pg.stale:
            return REOPEN
        after = self.view.seen_seq
        rows = await self._read(pg.refresh_request(after), primary, wait=False, behind=pg.behind)
        return pg.take_refresh(rows, after)

    async def read(self, after: int, limit: int | None) -> list[Event]:
        """``PostgresLog.read``: a key-range scan, ``seq > after``, at most ``limit``."""
        pg = self.pg
        return pg.decode(await self._read(pg.read_request(after, limit), wait=False))

    async def meta(self, kind: str, key: str) -> str | None:
        """The store's ``meta_get``."""
        check_text(f"{kind} key", key)
        action = f"reading {kind} {key!r}"
        statement = self._backend.statements.meta_get
        rows = await self._fetch((action, statement, (kind, key)), raw=False)
        return rows[0][0] if rows else None

    async def meta_add(self, kind: str, key: str, value: str) -> str:
        """The store's ``meta_add``: ``value`` unless the entry has one; the value stored."""
        check_text(f"{kind} key", key)
        check_text(f"{kind} value", value)
        action = f"writing {kind} {key!r}"
        statement = self._backend.statements.meta_add
        clock = self.session.plans.host.clock
        while True:  # an entry deleted between the insert and the read: try again
            params = {"kind": kind, "key": key, "value": value, "now": clock()}
            rows = await self._fetch((action, statement, params), raw=False)
            if rows:
                return str(rows[0][0])

    async def append_one(self, event: Event, marker: bool) -> Event | None:
        """``PostgresLog.append_one``: the fast path's one statement, at the seq after the
        latest the session object has seen and in the life the log read; None (nothing
        written) to take the general path."""
        seq = self.view.seen_seq + 1
        request = self.pg.append_one_request(self.view, event, marker, seq - 1)
        if request is None:
            return None
        stored = await self._settled_write(request, _store_one)
        return msgspec.structs.replace(event, seq=seq) if stored else None

    async def append(
        self, events: list[Event], marker: int, expect_seq: int | None
    ) -> tuple[list[Event], list[Event]] | Reopen:
        """``PostgresLog.append``: the general path's statement, after the latest seq the
        session object has seen (or ``expect_seq``) and in the life the log read, when the
        session has seen none of the batch's ids, and the catch-up on other writers' events
        stored before the batch. The statement settles whatever happens to the caller (see
        the module docstring)."""
        pg, view = self.pg, self.view
        if pg.stale:
            return REOPEN
        if not view.admits((), events):  # (after opening again: the pipeline checks first)
            return [], []
        seen = view.seen_seq
        after = seen if expect_seq is None else expect_seq
        request = pg.append_request(view, events, marker, after)
        row = await self._settled_write(request, _store_batch)
        base, life = (-1, -1) if row is None else (int(row[0]), int(row[1]))
        if base < 0:  # another writer appended first, or the life is gone: nothing written
            return pg.refused(expect_seq, await self.refresh(primary=True))
        pg.take_append(life)
        foreign: list[Event] = []
        if base > seen:
            try:
                foreign = await self._catch_up_to(seen, base, len(events))
            except asyncio.CancelledError:
                pg.mark_stale()  # stored, not taken in (the loop shutting down): reopen
                raise
        return foreign, pg.stored(events, base)

    # -- the steps ----------------------------------------------------------------------------

    async def _fetch(
        self, request: Request | tuple[str, bytes, dict[str, Any]], *, raw: bool = True
    ) -> list[_Row]:
        pool = self._pool
        assert pool is not None, "connect() first"
        action, statement, params = request
        return await self._backend.fetch(pool, action, statement, params, raw)

    async def _read(
        self,
        request: Request,
        primary: bool = False,
        *,
        wait: bool = True,
        behind: Callable[[list[_Row]], bool] | None = None,
    ) -> list[_Row]:
        """A session read: on a read replica that has replayed the log's writes, else on the
        primary (``primary``: always; not ``wait``: a catch-up, which asks the replica once),
        as ``PostgresLog``'s sync reads choose."""
        pool = self._pool
        assert pool is not None, "connect() first"
        pg = self.pg
        if pg.reads is None:
            return await self._fetch(request)
        return await self._backend.read(pool, pg, request, primary, wait, behind)

    async def _settled_write(
        self, request: AppendRequest, run: Callable[[_Conn, AppendRequest], Awaitable[T]]
    ) -> T:
        """Run an append's statement with ``run`` on a pooled connection (handed back here),
        as the sync log runs it: a driver error is translated; a lost connection leaves the
        outcome unknown. From the moment the statement starts, a cancellation of the caller
        waits for the plan, whose task is shielded, to end (see :meth:`drive`)."""
        pool = self._pool
        assert pool is not None, "connect() first"
        backend = self._backend
        conn = await backend.getconn(pool, request.action)  # cancelled here: nothing done
        self._writing = True
        fresh = self.pg.freshness if self.pg.reads is not None else None
        try:
            result = await run(conn, request)
            if fresh is not None:  # where the write reached, for reads from replicas
                fresh.wrote(await _write_lsn(conn))
        except psycopg.Error as exc:
            if fresh is not None:
                fresh.unknown()
            lost = conn.closed or conn.broken
            await backend.putconn(pool, conn)
            unknown = request.unknown if lost else ""
            raise backend.host.failure(exc, request.action, unknown) from None
        except BaseException:
            # Interrupted (the loop shutting down): whether the batch was stored is unknown
            # here, so the log opens again when next used.
            if fresh is not None:
                fresh.unknown()
            self.pg.mark_stale()
            await backend.putconn(pool, conn, shielded=True)
            raise
        await backend.putconn(pool, conn)
        return result

    async def _catch_up_to(self, after: int, base: int, count: int) -> list[Event]:
        """``PostgresLog``'s catch-up: other writers' events between seq ``after`` and the
        batch stored after ``base``, read again for the store's ``reconnect_timeout`` while
        the server cannot be reached."""
        pg = self.pg
        request = pg.catch_up_request(after, base)
        backoff = Backoff(tries=1, reconnect_timeout=pg.reconnect_timeout)
        while True:
            try:
                return pg.decode(await self._fetch(request))
            except StoreUnavailable as exc:
                pause = backoff.reconnect_pause()
                if pause is None:
                    raise pg.catch_up_failed(base, count, exc) from exc
                await asyncio.sleep(pause)
            except StorageError as exc:
                raise pg.catch_up_failed(base, count, exc) from exc


async def _store_batch(conn: _Conn, request: AppendRequest) -> _Row | None:
    """Run an append's statement: its one row (``base, life``), or None (nothing written)."""
    statement, params = request.statement, request.params
    if request.raw:
        return await (await psycopg.AsyncRawCursor(conn).execute(statement, params)).fetchone()
    return await (await conn.execute(statement, params)).fetchone()


async def _store_one(conn: _Conn, request: AppendRequest) -> bool:
    """Run the fast path's statement: whether it wrote its one row."""
    cursor = psycopg.AsyncRawCursor(conn)
    await cursor.execute(request.statement, request.params)
    return cursor.rowcount == 1


async def _write_lsn(conn: _Conn) -> int | None:
    """The primary's WAL insert position on ``conn``, right after an append committed there
    (None when it cannot be read: the append's outcome is known, its position is not)."""
    try:
        row = await (await conn.execute(WRITE_LSN)).fetchone()
    except psycopg.Error:
        return None
    return None if row is None or row[0] is None else int(row[0])


def _close_on_idle_loop(loop: asyncio.AbstractEventLoop, guard: asyncio.Task[None]) -> None:
    """Cancel ``guard`` on ``loop``, which is open but not running, and run the loop until
    the guard has closed its pool (from a thread that runs no loop)."""
    try:
        guard.cancel()
        loop.run_until_complete(asyncio.wait([guard]))
    except RuntimeError:  # another thread started running it meanwhile: it closes it there
        loop.call_soon_threadsafe(guard.cancel)


class PostgresAsyncBackend(AsyncBackend):
    """The async API's backend for a PostgreSQL store: a plain session's log storage natively
    on psycopg's ``AsyncConnectionPool`` (:meth:`native_log`), the rest in worker threads (see
    the module docstring). ``host`` is the store's connections (which make the pool and
    translate driver errors), ``statements`` the store's statements."""

    name = "postgres"

    def __init__(
        self,
        store: BaseStore,
        executor: concurrent.futures.Executor,
        host: PostgresHost,
        statements: Statements,
        reads: ReplicaSet | None = None,
    ) -> None:
        super().__init__(store, executor)
        self._host = host
        self._statements = statements
        self._reads = reads if reads is not None and reads.enabled else None
        self._replica_pools: dict[int, _Pool] = {}  # id(Replica): its pool on this loop
        self._pool: _Pool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._opening: asyncio.Task[None] | None = None
        self._guard: asyncio.Task[None] | None = None
        self._logs: weakref.WeakKeyDictionary[BaseSession, PostgresNativeLog] = (
            weakref.WeakKeyDictionary()
        )
        self._closed = False

    @property
    def host(self) -> PostgresHost:
        """The store's connections."""
        return self._host

    @property
    def statements(self) -> Statements:
        """The store's statements."""
        return self._statements

    def native_log(self, session: BaseSession) -> PostgresNativeLog | None:
        """``session``'s log storage on this backend's pool, for the running event loop: for
        a session of this store (None for a subclass's, which may store differently, or one
        whose log is not a PostgreSQL log of this store)."""
        native = self._logs.get(session)
        loop = asyncio.get_running_loop()
        if native is None or native.loop is not loop:  # its queue belongs to a loop of its own
            pg = session.plans.log
            if (
                type(session) is not BaseSession
                or not isinstance(pg, PostgresLog)
                or pg.connections is not self._host
            ):
                return None
            native = self._logs[session] = PostgresNativeLog(self, session, pg, loop)
        return native

    async def close(self) -> None:
        """Close the pool (connections in use are closed when they come back), on the loop
        it belongs to."""
        self._closed = True
        guard, self._guard = self._guard, None
        self._pool = self._opening = None
        loop = self._loop
        if guard is None or guard.done() or loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            guard.cancel()
            await asyncio.wait([guard])
        elif loop.is_running():
            loop.call_soon_threadsafe(guard.cancel)  # it closes the pool there
        elif running is None:
            _close_on_idle_loop(loop, guard)
        else:
            # The pool's loop is open but nothing runs it (the SDK's Runner.run_sync keeps
            # one between runs, never closed): nothing else would close the pool, and its
            # tasks would be destroyed pending at exit. Run that loop until the pool is
            # closed, in a worker thread, as this thread runs a loop of its own.
            await running.run_in_executor(self.executor, _close_on_idle_loop, loop, guard)

    async def _guard_pool(self, pool: _Pool) -> None:
        """Wait until cancelled, then close ``pool``: when the backend closes, or when the
        pool's event loop shuts down with the pool open (``asyncio.run`` cancels every task
        left). psycopg_pool's workers catch a cancellation that arrives while they maintain a
        connection and wait for more work, so an open pool could keep ``asyncio.run`` from
        returning; closing it stops them."""
        replica_pools = list(self._replica_pools.values())
        try:
            await asyncio.get_running_loop().create_future()  # never set
        finally:
            if self._pool is pool:
                self._pool = self._opening = None
                self._replica_pools = {}
            for replica_pool in replica_pools:
                await replica_pool.close()
            await pool.close()

    # -- connections ------------------------------------------------------------------------

    async def connections(self) -> _Pool | None:
        """The pool, opened on first use; None when it belongs to another event loop that is
        still open (the call then runs in a worker thread). A pool whose loop was closed (an
        earlier ``asyncio.run``) is dropped, its connections closed as it is collected, and a
        new one opens on this loop."""
        loop = asyncio.get_running_loop()
        pool = self._pool
        if pool is not None and self._loop is not loop:
            if self._loop is not None and not self._loop.is_closed():
                return None
            pool = self._pool = self._opening = self._guard = None
        if pool is None:
            if self._closed or self._host.closed:
                raise UsageError(f"store {self.store.location} is closed")
            pool = self._pool = self._host.make_async_pool()
            self._loop = loop
            self._opening = loop.create_task(pool.open())
            if self._reads is not None:
                self._replica_pools = {id(r): r.db.make_async_pool() for r in self._reads.replicas}
                for replica_pool in self._replica_pools.values():
                    await replica_pool.open(wait=False)
            self._guard = loop.create_task(self._guard_pool(pool), name=f"{pool.name}-guard")
        opening = self._opening
        if opening is not None:
            await asyncio.shield(opening)
            self._opening = None
        return pool

    async def read(
        self,
        pool: _Pool,
        pg: PostgresLog,
        request: Request,
        primary: bool = False,
        wait: bool = True,
        behind: Callable[[list[_Row]], bool] | None = None,
    ) -> list[_Row]:
        """A session read of ``pg`` (whose store has read replicas): on a replica that has
        replayed the log's writes, waiting for one as the sync reads do, else on the primary's
        ``pool`` (``primary``: always), reading the primary's WAL position with it (see
        :mod:`~agentsession.backends.postgres.replicas`)."""
        reads, fresh = pg.reads, pg.freshness
        assert reads is not None
        action, statement, params = request
        if not primary and not fresh.pinned:
            replica = reads.choose()
            replica_pool = None if replica is None else self._replica_pools.get(id(replica))
            if (
                replica is not None
                and replica_pool is not None
                and await self._caught_up(reads, replica, replica_pool, fresh, wait)
            ):
                try:
                    rows = await self.fetch(replica_pool, action, statement, params)
                except StorageError as exc:
                    replica.failed(exc)
                else:
                    if behind is None or not behind(rows):
                        return rows
        conn = await self.getconn(pool, action)
        try:
            cursor = psycopg.AsyncRawCursor(conn)
            await cursor.execute(statement, params, binary=True)
            rows = await cursor.fetchall()
            lsn = await _write_lsn(conn)
        except psycopg.Error as exc:
            await self.putconn(pool, conn)
            raise self._host.failure(exc, action) from None
        except BaseException:
            await self.putconn(pool, conn, shielded=True)
            raise
        await self.putconn(pool, conn)
        if lsn is not None:
            fresh.lsn = max(fresh.lsn, lsn)
        return rows

    async def _caught_up(
        self, reads: ReplicaSet, replica: Replica, pool: _Pool, fresh: Freshness, wait: bool
    ) -> bool:
        """Whether ``replica`` has replayed ``fresh``'s writes, asking it again with a growing
        pause for the store's ``replica_wait`` (False: read from the primary)."""
        need = fresh.lsn
        if need <= replica.replayed:
            return True
        next_pause = reads.pauses(fresh, wait)
        while True:
            try:
                rows = await self.fetch(pool, "reading the replay position", REPLAY_LSN, (), False)
            except StorageError as exc:
                replica.failed(exc)
                return False
            replica.seen(int(rows[0][0]) if rows and rows[0][0] is not None else None)
            if need <= replica.replayed:
                return True
            pause = next_pause()
            if pause is None:
                return False
            await asyncio.sleep(pause)

    async def getconn(self, pool: _Pool, action: str) -> _Conn:
        """A connection, checked by the pool as the sync pool's are."""
        if self._host.closed:
            raise UsageError(f"store {self.store.location} is closed")
        try:
            return await pool.getconn()
        except psycopg_pool.PoolClosed:
            raise UsageError(f"store {self.store.location} is closed") from None
        except psycopg_pool.PoolTimeout:
            # Telling an unreachable server from a busy pool connects: not on the loop.
            # The loop's default executor, not the store's: a native plan holds the session's
            # lock meanwhile, and the store's threads may all be waiting for that lock.
            loop = asyncio.get_running_loop()
            error = await loop.run_in_executor(None, self._host.pool_timeout_error, pool, action)
            raise error from None

    async def putconn(self, pool: _Pool, conn: _Conn, *, shielded: bool = False) -> None:
        """Hand ``conn`` back to ``pool`` (``shielded``: on the way out of a cancellation)."""
        if shielded:  # on the way out of a cancellation: a second one must not lose it
            await asyncio.shield(pool.putconn(conn))
        else:
            await pool.putconn(conn)

    async def fetch(
        self,
        pool: _Pool,
        action: str,
        statement: bytes,
        params: tuple[Any, ...] | dict[str, Any],
        raw: bool = True,
    ) -> list[_Row]:
        """The rows of a read statement, as the store's connections' ``fetch`` (``raw``:
        ``$n`` placeholders, in binary) or ``run`` (``%s``, in text): a read whose connection
        drops is retried once on a fresh connection; driver errors are translated by
        :attr:`host`."""
        for attempt in range(2):
            conn = await self.getconn(pool, action)
            try:
                if raw:
                    cursor = psycopg.AsyncRawCursor(conn)
                    await cursor.execute(statement, params, binary=True)
                    rows = await cursor.fetchall()
                else:
                    rows = await (await conn.execute(statement, params)).fetchall()
            except psycopg.Error as exc:
                lost = conn.closed or conn.broken
                await self.putconn(pool, conn)
                if lost and attempt == 0:
                    log.info("%s: connection lost (%s); retrying once", action, exc)
                    continue
                raise self._host.failure(exc, action) from None
            except BaseException:
                await self.putconn(pool, conn, shielded=True)
                raise
            await self.putconn(pool, conn)
            return rows
        raise AssertionError("unreachable")  # pragma: no cover
