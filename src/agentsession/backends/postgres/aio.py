"""PostgreSQL for the async API: psycopg's native ``AsyncConnectionPool`` instead of threads.

:meth:`PostgresStore._async_backend <agentsession.backends.postgres.store.PostgresStore>` returns a
:class:`PostgresAsyncBackend`, which performs these operations natively, on a pool of its own
(the store's server, settings, sizes and checks; opened on the event loop that first uses it,
closed with the async store):

* ``append`` and ``append_many`` (with ``expect_seq``): the pipeline's pure steps run on the
  sync session object (``_prepare``, ``_marker_index``, then ``_ingest``/``_extend`` of what was
  stored), and the SQL is the sync backend's: the same statements and parameters (the fast
  path for one event, else the general path), the same life check (``_adopt_append``) and
  catch-up of other writers' events. Both paths append only after the latest seq the session
  object has checked the batch's ids against; when another writer appended first, nothing is
  written, and the append catches up and plans again. The async writers of one session
  object queue on an ``asyncio.Lock``; the session's own lock is held only around each
  in-memory step, never across an ``await``.
* ``read``, ``latest_seq``, ``messages`` and ``entries``: the catch-up (``refresh``) runs
  natively, then the sync method runs on the loop with that catch-up done
  (``_refresh_done``), when the in-memory window answers it (the rule JSONL's inline reads
  follow: :func:`agentsession.aio._backend.window_serves`); ``read()`` of events older than
  the window is one more native query.

The pool closes with the async store, or, left open, when its event loop shuts down (a task
of the backend's closes it when ``asyncio.run`` cancels the tasks left: psycopg_pool's workers
would otherwise keep ``asyncio.run`` from returning); the next loop then gets a new pool. A
store closed while the pool's loop is open but idle (the loop ``Runner.run_sync`` of the
OpenAI Agents SDK keeps between runs) runs that loop until the pool is closed.

Everything else goes to worker threads (``super().call``), and so do these operations when:

* the store is encrypted (a sealed append seals for the seqs it expects, and retries);
* the batch holds a user message and the history cap may apply (the store's ``max_messages``,
  or a child session's cap not known yet: it is read from the session's first event);
* the session expired by the TTL as far as this object knows (the pipeline catches up before
  refusing), or must reload (a failed catch-up, a new life seen while reading);
* a worker thread holds the session's lock (the loop never waits for another thread's storage
  work), or the call comes from an event loop other than the pool's while that one is still
  open (a pool whose loop was closed is replaced by one on the new loop);
* ``messages()``/``entries()`` need the full window loaded, or older events for a deriver.

First opening a session (``store.get``), compaction and pruning, fork/merge/discard, recovery,
turn locks and the recorder's helpers (they append through the sync ``Turn``) run in threads.

**Cancellation.** The append's statement is one autocommit transaction (committed whole or
not at all). It runs in a task of its own that a cancellation of the caller does not interrupt:
the caller gets ``CancelledError`` once the statement has finished and its outcome has been
taken into the session object (the batch's events are in the window, or nothing was written),
as for work handed to a worker thread; so nothing lands later. psycopg would otherwise cancel
the query in the server and, cancelled again, close the connection with the outcome unknown.
Should that task itself be interrupted (the event loop shutting down), the session object
reloads from storage when next used. Waiting for the session's writer lock or for a pooled
connection is cancelled at once, with nothing done. Reads are interrupted where they are (the
session's state changes only in the in-memory steps, which do not await).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

import psycopg
import psycopg_pool

from ... import _trace
from ...aio._backend import AsyncBackend, Call, _settle, window_serves
from ...errors import (
    ConflictError,
    OutcomeUnknown,
    SessionExpired,
    StorageError,
    StoreUnavailable,
    UsageError,
)
from ...events import Event
from ...session import BaseSession, _marker_index, contention_pause, reconnect_pauses
from ...store import BaseStore
from .schema import Statements

__all__ = ["PostgresAsyncBackend", "PostgresHost", "PostgresLog"]

log = logging.getLogger(__name__)

T = TypeVar("T")
_Row = tuple[Any, ...]
_Conn = psycopg.AsyncConnection[_Row]
_Pool = psycopg_pool.AsyncConnectionPool[_Conn]


class PostgresLog(Protocol):
    """What the native path uses of a PostgreSQL session beyond :class:`BaseSession`: its
    life, whether it must reload, and the steps it shares with the sync backend
    (``PostgresSession`` in :mod:`agentsession.backends.postgres` is the implementation)."""

    _life: int | None
    _stale: bool
    _refresh_done: bool

    def _append_next(
        self, event: Event, marker: bool
    ) -> tuple[bytes, tuple[Any, ...], int] | None: ...

    def _append_request(
        self, events: list[Event], marker: int, expect_seq: int | None
    ) -> tuple[bytes, Any, bool]: ...

    def _append_messages(self, count: int) -> tuple[str, str]: ...

    def _adopt_append(self, base: int, life: int) -> int: ...

    def _take_refresh(self, rows: list[_Row], after: int) -> list[Event] | None: ...

    def _refreshed(self, rows: list[_Row]) -> tuple[int, int, list[Event]] | None: ...

    def _catch_up_failed(self, base: int, count: int, exc: StorageError) -> StorageError: ...

    def _decode(self, rows: list[_Row]) -> list[Event]: ...

    def _stored(self, events: list[Event], base: int) -> list[Event]: ...


class PostgresHost(Protocol):
    """What the native path uses of a PostgreSQL store (``PostgresStore``)."""

    _sql: Statements

    def _make_async_pool(self) -> _Pool: ...

    def _native_session(self, session: BaseSession) -> PostgresLog | None: ...

    def _failure(self, exc: psycopg.Error, action: str, write: str = "") -> StorageError: ...

    def _pool_timeout_error(
        self,
        pool: psycopg_pool.ConnectionPool[Any] | psycopg_pool.AsyncConnectionPool[Any],
        action: str,
    ) -> StoreUnavailable: ...


_RACE_RETRIES = 1000
"""How often a native append plans again when other writers keep appending first (with a
growing random pause from the fifth try on); then it goes to a worker thread."""

_APPENDS = frozenset({"append", "append_many"})
_READS = frozenset({"read", "latest_seq", "messages", "entries"})


@dataclass(frozen=True, slots=True)
class _Seen:
    """What the session object knew when a native call started (read under its lock)."""

    life: int | None
    latest: int


@dataclass(frozen=True, slots=True)
class _Plan:
    """A native append, planned under the session's lock."""

    seen: _Seen
    fast: tuple[bytes, tuple[Any, ...], int] | None
    """The fast path's statement, parameters and seq (one event, no ``expect_seq``)."""
    general: tuple[bytes, Any, bool] | None
    """The general path's statement, parameters and whether it takes a raw cursor (None
    with a fast path: built only if that stores nothing; without ``expect_seq`` it does not
    depend on what the session object knows)."""


@dataclass(frozen=True, slots=True)
class _Landed:
    """Where an append's statement stored the batch: after seq ``base``, in life ``life``
    (``fast``: by the fast path, right after what the session object had seen)."""

    base: int
    life: int
    fast: bool


class _Outcome:
    """A sentinel: what a step under the session's lock could not do on the loop."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


_BUSY = _Outcome("a worker thread holds the session's lock")
_THREADS = _Outcome("run the call in a worker thread")
_OLDER = _Outcome("read older events from storage")


_INLINE: dict[str, Callable[[BaseSession, Mapping[str, Any]], Any]] = {
    "latest_seq": lambda session, args: session.latest_seq,
    "read": lambda session, args: session._read(args["after"], args["limit"]),
    "messages": lambda session, args: session._messages(
        args.get("agent"), args.get("max_tool_result_bytes")
    ),
    "entries": lambda session, args: session.entries(args.get("agent")),
}
"""The read operations' sync bodies (without their tracing spans), run on the loop after the
native catch-up."""


def _with_batch(call: Call[Any], batch: list[Event], expect_seq: int | None) -> Call[Any]:
    """``call`` appending ``batch`` (its events as the pipeline stamped them, ids included)."""
    if call.op == "append":
        args: dict[str, Any] = {"event": batch[0]}
    else:
        args = {"events": batch, "expect_seq": expect_seq}
    return Call(call.op, call.kind, call.fn, call.session, args, user_message=call.user_message)


def _untraced(call: Call[Any], session: BaseSession) -> Call[Any]:
    """``call`` as its untraced sync body, for a fallback inside the native span."""
    args = call.args
    fn: Callable[[], Any]
    if call.op == "append":
        fn = functools.partial(session._append_one, args["event"])
    elif call.op == "append_many":
        fn = functools.partial(session._append_batch, args["events"], args["expect_seq"])
    else:
        fn = functools.partial(_INLINE[call.op], session, args)
    return Call(call.op, call.kind, fn, session, args, user_message=call.user_message)


def _close_on_idle_loop(loop: asyncio.AbstractEventLoop, guard: asyncio.Task[None]) -> None:
    """Cancel ``guard`` on ``loop``, which is open but not running, and run the loop until
    the guard has closed its pool (from a thread that runs no loop)."""
    try:
        guard.cancel()
        loop.run_until_complete(asyncio.wait([guard]))
    except RuntimeError:  # another thread started running it meanwhile: it closes it there
        loop.call_soon_threadsafe(guard.cancel)


class PostgresAsyncBackend(AsyncBackend):
    """The async API's backend for a PostgreSQL store: appends, reads, ``latest_seq`` and the
    catch-up of ``messages()``/``entries()`` natively on psycopg's ``AsyncConnectionPool``, the
    rest in worker threads (see the module docstring). ``host`` is the store again, as this
    module uses it (a protocol: it does not import the sync backend, which imports it)."""

    name = "postgres"

    def __init__(
        self, store: BaseStore, executor: concurrent.futures.Executor, host: PostgresHost
    ) -> None:
        super().__init__(store, executor)
        self._host = host
        self._pool: _Pool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._opening: asyncio.Task[None] | None = None
        self._guard: asyncio.Task[None] | None = None
        self._writers: weakref.WeakKeyDictionary[BaseSession, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self._closed = False

    # -- dispatch ---------------------------------------------------------------------------

    async def call(self, call: Call[T]) -> T:
        """Perform ``call`` natively when it is one of the native operations on one of this
        store's sessions (see the module docstring), else as :class:`AsyncBackend` does."""
        session = call.session
        op = call.op
        if session is not None and session._cipher is None and (op in _APPENDS or op in _READS):
            pg = self._host._native_session(session)
            if pg is not None:
                if op in _APPENDS:
                    return cast("T", await self._append(call, session, pg))
                return cast("T", await self._read(call, session, pg))
        return await super().call(call)

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
        try:
            await asyncio.get_running_loop().create_future()  # never set
        finally:
            if self._pool is pool:
                self._pool = self._opening = None
            await pool.close()

    # -- connections ------------------------------------------------------------------------

    async def _connections(self) -> _Pool | None:
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
            if self._closed or self.store._closed:
                raise UsageError(f"store {self.store.location} is closed")
            pool = self._pool = self._host._make_async_pool()
            self._loop = loop
            self._opening = loop.create_task(pool.open())
            self._guard = loop.create_task(self._guard_pool(pool), name=f"{pool.name}-guard")
        opening = self._opening
        if opening is not None:
            await asyncio.shield(opening)
            self._opening = None
        return pool

    async def _getconn(self, pool: _Pool, action: str) -> _Conn:
        """A connection, checked by the pool as the sync pool's are."""
        if self.store._closed:
            raise UsageError(f"store {self.store.location} is closed")
        try:
            return await pool.getconn()
        except psycopg_pool.PoolClosed:
            raise UsageError(f"store {self.store.location} is closed") from None
        except psycopg_pool.PoolTimeout:
            # Telling an unreachable server from a busy pool connects: not on the loop.
            loop = asyncio.get_running_loop()
            error = await loop.run_in_executor(
                self.executor, self._host._pool_timeout_error, pool, action
            )
            raise error from None

    async def _putconn(self, pool: _Pool, conn: _Conn, *, shielded: bool = False) -> None:
        if shielded:  # on the way out of a cancellation: a second one must not lose it
            await asyncio.shield(pool.putconn(conn))
        else:
            await pool.putconn(conn)

    async def _fetch(
        self, pool: _Pool, action: str, statement: bytes, params: tuple[Any, ...]
    ) -> list[_Row]:
        """The rows of a read statement, in binary, as the sync store's ``_fetch``: a read
        whose connection drops is retried once on a fresh connection; driver errors are
        translated by the store."""
        for attempt in range(2):
            conn = await self._getconn(pool, action)
            try:
                cursor = psycopg.AsyncRawCursor(conn)
                await cursor.execute(statement, params, binary=True)
                rows = await cursor.fetchall()
            except psycopg.Error as exc:
                lost = conn.closed or conn.broken
                await self._putconn(pool, conn)
                if lost and attempt == 0:
                    log.info("%s: connection lost (%s); retrying once", action, exc)
                    continue
                raise self._host._failure(exc, action) from None
            except BaseException:
                await self._putconn(pool, conn, shielded=True)
                raise
            await self._putconn(pool, conn)
            return rows
        raise AssertionError("unreachable")  # pragma: no cover

    # -- the session's lock -----------------------------------------------------------------

    def _try_locked(self, session: BaseSession, step: Callable[[], T]) -> T | _Outcome:
        """Run ``step`` holding the session's lock, taken without waiting (:data:`_BUSY` when
        a worker thread holds it)."""
        lock = session._lock
        if not lock.acquire(blocking=False):
            return _BUSY
        try:
            return step()
        finally:
            lock.release()

    async def _locked(self, session: BaseSession, step: Callable[[], T]) -> T:
        """Run ``step`` (in-memory work) holding the session's lock: on the loop, or in a
        worker thread when a thread holds the lock now (never waiting for it on the loop)."""
        result = self._try_locked(session, step)
        if not isinstance(result, _Outcome):
            return result

        def locked() -> T:
            with session._lock:
                return step()

        return await self._in_thread(Call("session.locked", "other", locked, session, shield=True))

    def _writer(self, session: BaseSession) -> asyncio.Lock:
        """The lock the async writers of ``session`` queue on."""
        lock = self._writers.get(session)
        if lock is None:
            lock = self._writers[session] = asyncio.Lock()
        return lock

    # -- reads ------------------------------------------------------------------------------

    async def _read(self, call: Call[Any], session: BaseSession, pg: PostgresLog) -> Any:
        op, args = call.op, call.args
        if op == "read":
            after, limit = args.get("after", 0), args.get("limit")
            if (
                type(after) is not int
                or after < 0
                or not (limit is None or (type(limit) is int and limit >= 0))
            ):
                return await super().call(call)  # the sync call raises the usage error
            if limit == 0:
                return []
        elif op != "latest_seq" and not window_serves(session, call):
            return await super().call(call)  # loading the window reads storage: a thread
        pool = await self._connections()
        if pool is None:
            return await super().call(call)
        seen = self._try_locked(session, lambda: None if pg._stale else _seen(session, pg))
        if not isinstance(seen, _Seen):
            return await super().call(call)
        if not _trace.enabled:
            return await self._read_natively(pool, call, session, pg, seen)
        if op == "read":
            with _trace.span(
                "agentsession.read", session_id=session.id, backend=_trace.backend_of(session)
            ) as span:
                events = await self._read_natively(pool, call, session, pg, seen)
                span.set(events=len(events))
                return events
        if op == "messages":
            with _trace.span(
                "agentsession.messages",
                session_id=session.id,
                backend=_trace.backend_of(session),
                agent=args.get("agent") or None,
            ) as span:
                messages = await self._read_natively(pool, call, session, pg, seen)
                span.set(messages=len(messages))
                return messages
        return await self._read_natively(pool, call, session, pg, seen)

    async def _read_natively(
        self, pool: _Pool, call: Call[Any], session: BaseSession, pg: PostgresLog, seen: _Seen
    ) -> Any:
        """Catch up natively, then answer from the window on the loop (or read older events
        natively, or hand the call to a thread when the window cannot answer it)."""
        action = f"reading session {session.id!r}"
        rows = await self._fetch(pool, action, self._host._sql.refresh, (session.id, seen.latest))
        result = self._try_locked(session, lambda: self._answer(call, session, pg, seen, rows))
        if result is _OLDER:
            args = call.args
            statement = self._host._sql.read
            params = (session.id, args["after"], args["limit"])
            return pg._decode(await self._fetch(pool, action, statement, params))
        if isinstance(result, _Outcome):
            return await super().call(_untraced(call, session))
        return result

    def _answer(
        self,
        call: Call[Any],
        session: BaseSession,
        pg: PostgresLog,
        seen: _Seen,
        rows: list[_Row],
    ) -> Any:
        """Under the session's lock: take in what the catch-up read, then run the sync body
        of ``call`` with that catch-up done, when the window answers it."""
        if not _caught_up(session, pg, seen, rows):
            return _THREADS
        op = call.op
        if op == "read" and call.args["after"] + 1 < session._window_start:
            return _OLDER
        if not window_serves(session, call):
            return _THREADS
        pg._refresh_done = True
        try:
            return _INLINE[op](session, call.args)
        finally:
            pg._refresh_done = False

    async def _catch_up(self, pool: _Pool, session: BaseSession, pg: PostgresLog) -> None:
        """What the sync refresh does, natively (in a worker thread when a reload is due)."""
        seen = self._try_locked(session, lambda: None if pg._stale else _seen(session, pg))
        if isinstance(seen, _Seen):
            action = f"reading session {session.id!r}"
            params = (session.id, seen.latest)
            rows = await self._fetch(pool, action, self._host._sql.refresh, params)
            if self._try_locked(session, lambda: _caught_up(session, pg, seen, rows)) is True:
                return

        def refresh() -> None:
            with session._lock:
                session._refresh()

        await self._in_thread(Call("refresh", "read", refresh, session, shield=True))

    # -- appends ----------------------------------------------------------------------------

    async def _append(
        self, call: Call[Any], session: BaseSession, pg: PostgresLog
    ) -> int | list[int]:
        args = call.args
        one = call.op == "append"
        expect_seq = None if one else args.get("expect_seq")
        if not one and (
            not isinstance(args.get("events"), list)
            or (expect_seq is not None and (type(expect_seq) is not int or expect_seq < 0))
        ):
            return cast("list[int]", await super().call(call))  # raises the usage error
        pool = await self._connections()
        if pool is None:
            return cast("int | list[int]", await super().call(call))
        if not _trace.enabled:
            return await self._append_natively(pool, call, session, pg, one, expect_seq)
        event = args["event"] if one else None
        with _trace.span(
            "agentsession.append",
            session_id=session.id,
            backend=_trace.backend_of(session),
            events=1 if one else None,
            event_type=event.type if isinstance(event, Event) else None,
        ) as span:
            seqs = await self._append_natively(pool, call, session, pg, one, expect_seq)
            if isinstance(seqs, list):
                span.set(events=len(seqs))
            return seqs

    async def _append_natively(
        self,
        pool: _Pool,
        call: Call[Any],
        session: BaseSession,
        pg: PostgresLog,
        one: bool,
        expect_seq: int | None,
    ) -> int | list[int]:
        # The pipeline's pure steps, on the sync session object: check and stamp, the marker.
        if one:
            batch = [session._prepare(call.args["event"], None)]
        else:
            now = session._store.clock()
            batch = [session._prepare(event, now) for event in call.args["events"]]
            if not batch:
                return []
            session._check_batch_ids(batch)
        marker = _marker_index(batch)
        user_message = call.user_message
        async with self._writer(session):
            for attempt in range(_RACE_RETRIES):
                if pause := contention_pause(attempt):  # writers are racing for this session
                    await asyncio.sleep(pause)
                plan = self._try_locked(
                    session,
                    lambda: self._plan(session, pg, batch, marker, expect_seq, one, user_message),
                )
                if isinstance(plan, list):  # stored already: a retried append stores nothing
                    return plan[0] if one else plan
                if not isinstance(plan, _Plan):
                    return cast("int | list[int]", await super().call(_untraced(call, session)))
                action = pg._append_messages(len(batch))[0]
                try:
                    # Cancelled while waiting for a connection: nothing done.
                    conn = await self._getconn(pool, action)
                    write = asyncio.ensure_future(
                        self._write(pool, conn, session, pg, batch, marker, expect_seq, plan,
                                    user_message)
                    )
                    seqs = await _settled(write)
                except (OutcomeUnknown, StoreUnavailable):
                    # Lost or unreachable: the pipeline in a thread finds out whether the batch
                    # landed (by its ids) and appends it if not, within reconnect_timeout.
                    await self._locked(
                        session, lambda: session._unsure.update(e.id for e in batch)
                    )
                    if session._store._reconnect_timeout <= 0:
                        raise
                    retry = _with_batch(call, batch, expect_seq)
                    return cast("int | list[int]", await super().call(_untraced(retry, session)))
                if seqs is not None:
                    return seqs[0] if one else seqs
                # Another writer appended first: plan again, checking the ids against its events.
        return cast("int | list[int]", await super().call(_untraced(call, session)))

    def _plan(
        self,
        session: BaseSession,
        pg: PostgresLog,
        batch: list[Event],
        marker: int,
        expect_seq: int | None,
        one: bool,
        user_message: bool,
    ) -> _Plan | list[int] | None:
        """Under the session's lock: the statements of a native append; the seqs of a batch
        stored already (a retry); or None when this append goes to a worker thread (see the
        module docstring; also a batch of which only some events are stored). Both paths
        append only after the latest seq the session object has seen, whose events it has
        checked the batch's ids against."""
        if session._ids_from > 1 and session._needs_cover(batch):
            return None  # older ids to read first (once per session object): a thread
        known = session._stored_seqs(batch)
        if None not in known:
            return cast("list[int]", known)
        unsure = session._unsure
        if (
            pg._stale
            or any(seq is not None for seq in known)
            or (unsure and any(event.id in unsure for event in batch))
        ):
            return None
        if user_message and not _no_history_cap(session, pg):
            return None
        if session._store.ttl is not None:
            try:
                session._check_ttl()
            except SessionExpired:
                return None  # the pipeline catches up before refusing: a thread
        fast = pg._append_next(batch[0], marker == 0) if one else None
        seen = _seen(session, pg)
        after = seen.latest if expect_seq is None else expect_seq
        general = pg._append_request(batch, marker, after) if fast is None else None
        return _Plan(seen, fast, general)

    async def _write(
        self,
        pool: _Pool,
        conn: _Conn,
        session: BaseSession,
        pg: PostgresLog,
        batch: list[Event],
        marker: int,
        expect_seq: int | None,
        plan: _Plan,
        user_message: bool,
    ) -> list[int] | None:
        """Store ``batch`` (on ``conn``, handed back here) and take it into the session object:
        the sync backend's ``_storage_append`` and the pipeline's steps after it; None when
        another writer appended first (nothing written: caught up, to plan again). Runs to its
        end in a task of its own whatever happens to the caller."""
        action, unknown = pg._append_messages(len(batch))
        try:
            landed = await _store_batch(conn, plan, pg, batch, marker)
        except psycopg.Error as exc:
            lost = conn.closed or conn.broken
            await self._putconn(pool, conn)
            raise self._host._failure(exc, action, unknown if lost else "") from None
        except BaseException:
            # Interrupted (the loop shutting down): whether the batch was stored is unknown
            # here, so the session object reloads from storage when next used.
            pg._stale = True
            await self._putconn(pool, conn, shielded=True)
            raise
        await self._putconn(pool, conn)
        if landed is None:  # another writer appended first: nothing was written
            await self._catch_up(pool, session, pg)
            if expect_seq is None:
                return None
            # The other writer may have stored this very batch (a retry): its seqs.
            known = await self._locked(session, lambda: session._stored_seqs(batch))
            if None not in known:
                return cast("list[int]", known)
            raise ConflictError(
                f"session {session.id!r}: expected the latest seq to be {expect_seq}, "
                f"but it is {session._latest_seq}; nothing was appended"
            )
        stored = pg._stored(batch, landed.base)
        try:
            await self._take_in(pool, session, pg, plan.seen, landed, stored, marker)
        except BaseException:
            pg._stale = True  # stored, and not (wholly) taken in: reload when next used
            raise
        if user_message and not await self._locked(session, lambda: _no_history_cap(session, pg)):
            # Not known before the append (a new life of the log): as the pipeline, in a thread.
            cap = functools.partial(_apply_history_cap, session)
            await self._in_thread(Call("append.cap", "append", cap, session, shield=True))
        return [event.seq for event in stored]

    async def _take_in(
        self,
        pool: _Pool,
        session: BaseSession,
        pg: PostgresLog,
        seen: _Seen,
        landed: _Landed,
        stored: list[Event],
        marker: int,
    ) -> None:
        """The life check, the catch-up on other writers' events stored before the batch,
        and the batch, into the window (as ``_storage_append`` and the pipeline do)."""
        if landed.fast:
            after: int | None = landed.base
        else:
            after = await self._locked(session, lambda: _adopt(session, pg, seen, landed))
        if after is None:
            return  # the session object moved to another life meanwhile: it reloads
        foreign: list[Event] = []
        if landed.base > after:
            statement = self._host._sql.read_range
            action = f"reading session {session.id!r}"
            pauses = reconnect_pauses(session._store._reconnect_timeout)
            while True:
                try:
                    rows = await self._fetch(
                        pool, action, statement, (session.id, after, landed.base)
                    )
                    break
                except StoreUnavailable as exc:  # lost again: read again, for a while
                    pause = next(pauses, None)
                    if pause is None:
                        raise pg._catch_up_failed(landed.base, len(stored), exc) from exc
                    await asyncio.sleep(pause)
                except StorageError as exc:
                    raise pg._catch_up_failed(landed.base, len(stored), exc) from exc
            foreign = pg._decode(rows)
        await self._locked(
            session, lambda: _extend(session, pg, landed.life, after, foreign, stored, marker)
        )


async def _settled(task: asyncio.Future[T]) -> T:
    """The outcome of ``task``, which a cancellation of the caller does not interrupt: the
    caller cancelled meanwhile gets ``CancelledError`` once ``task`` has finished (its result
    dropped), however often it is cancelled meanwhile, as for work in a worker thread."""
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await _settle(task)
        raise


# -- the steps under the session's lock -------------------------------------------------------


def _seen(session: BaseSession, pg: PostgresLog) -> _Seen:
    return _Seen(pg._life, session._latest_seq)


def _unmoved(session: BaseSession, pg: PostgresLog, seen: _Seen) -> bool:
    """Whether the session object is where it was when the call started."""
    return not pg._stale and pg._life == seen.life and session._latest_seq == seen.latest


def _caught_up(session: BaseSession, pg: PostgresLog, seen: _Seen, rows: list[_Row]) -> bool:
    """Take in what a refresh from ``seen.latest`` read; False when the session must reload
    (a worker thread does it). When another thread or task caught up meanwhile, only the
    events it has not taken in are."""
    if _unmoved(session, pg, seen):
        events = pg._take_refresh(rows, seen.latest)  # the sync refresh's own life check
        if events is None:
            return False
        session._ingest(events)
        return True
    found = pg._refreshed(rows)
    latest = session._latest_seq
    if pg._stale or found is None or found[1] != pg._life or latest < seen.latest:
        return False
    last_seq, _, events = found
    if last_seq < seen.latest:  # the log is shorter than it was: reload
        return False
    session._ingest([event for event in events if event.seq > latest])
    return True


def _adopt(session: BaseSession, pg: PostgresLog, seen: _Seen, landed: _Landed) -> int | None:
    """The general path's life check: the seq after which other writers' events are to be
    read (up to ``landed.base``), or None when the session object moved to another life since
    the append was planned (it then reloads when next used)."""
    if _unmoved(session, pg, seen):
        return pg._adopt_append(landed.base, landed.life)  # the sync code's own check
    if pg._stale or pg._life != landed.life:
        pg._stale = True
        return None
    return min(session._latest_seq, landed.base)  # others caught up meanwhile


def _extend(
    session: BaseSession,
    pg: PostgresLog,
    life: int,
    after: int,
    foreign: list[Event],
    stored: list[Event],
    marker: int,
) -> None:
    """Take the events after seq ``after`` (other writers', then the batch) into the window:
    the pipeline's ``_ingest`` and ``_extend``; only those the window does not hold yet when
    another thread or task caught up meanwhile."""
    if pg._stale or pg._life != life:
        pg._stale = True
        return
    latest = session._latest_seq
    if latest == after:
        session._ingest(foreign)
        session._extend(stored, marker)
        return
    if latest < after:  # a gap nobody read: reload when next used
        pg._stale = True
        return
    session._ingest([event for event in foreign if event.seq > latest])
    new = [event for event in stored if event.seq > latest]
    if len(new) == len(stored):
        session._extend(stored, marker)
    else:
        session._ingest(new)


def _no_history_cap(session: BaseSession, pg: PostgresLog) -> bool:
    """Whether a user message can be appended without the history cap applying: the store
    has no ``max_messages`` and the session is not a child forked with one (known for this
    life of the log, or read here from the first event when the window holds it)."""
    if session._store.max_messages:
        return False
    own = session._own_cap
    if own is None or own[0] != session._generation:
        window = session._window
        if not window or window[0].seq != 1:
            return False  # the first event is in storage: a thread reads it
        pg._refresh_done = True  # reading the first event from the window, nothing else
        try:
            session._history_cap()
        finally:
            pg._refresh_done = False
        own = session._own_cap
    return own is not None and not own[1]


def _apply_history_cap(session: BaseSession) -> None:
    """The pipeline's history cap after a user message (in a worker thread)."""
    with session._lock:
        cap = session._history_cap()
        if cap:
            session._apply_cap(cap)


async def _store_batch(
    conn: _Conn, plan: _Plan, pg: PostgresLog, batch: list[Event], marker: int
) -> _Landed | None:
    """Run the planned append: the fast path when there is one, else the general path.
    None: nothing was written (another writer appended after what the plan saw, or
    ``expect_seq`` did not match)."""
    general = plan.general
    if plan.fast is not None:
        statement, params, seq = plan.fast
        cursor = psycopg.AsyncRawCursor(conn)
        await cursor.execute(statement, params)
        if cursor.rowcount == 1:
            assert plan.seen.life is not None
            return _Landed(seq - 1, plan.seen.life, fast=True)
        return None
    assert general is not None
    statement, params, raw = general
    if raw:
        row = await (await psycopg.AsyncRawCursor(conn).execute(statement, params)).fetchone()
    else:
        row = await (await conn.execute(statement, params)).fetchone()
    return None if row is None else _Landed(int(row[0]), int(row[1]), fast=False)
