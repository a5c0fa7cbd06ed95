"""Redis for the async API: redis-py's asyncio client instead of threads.

A :class:`~agentsession.backends.redis.RedisStore`'s parts make a :class:`RedisAsyncBackend`,
which has an asyncio client of its own per event loop (the store's server and settings) and
gives each plain Redis session a :class:`RedisNativeLog`: the session's log storage as
coroutines (:class:`agentsession.ops.AsyncLog`). The async session drives the sync API's own
plans on it (:func:`agentsession.ops.adrive`) for ``append``, ``append_many``, ``read``,
``latest_seq``, ``messages`` and ``entries``. Each coroutine runs the script the session's
:class:`~agentsession.backends.redis.storage.RedisLog` builds (``open_call``/``opened``,
``refresh_call``/``take_refresh``, ``append_call``/``take_append``, ``read_call``/``decode``),
so the log's state (its life, whether it must open again) is one object's whichever API ran
it. With ``replicas=N`` (``WAIT``) an append runs in a worker thread instead (the sync
path), as do encrypted sessions' key reads.

**Cancellation** is as on PostgreSQL: an append's plan runs in a task of its own, shielded
from the caller's cancellation once its script was sent; the caller gets ``CancelledError``
after the plan has taken the outcome in.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import weakref
from typing import Any, TypeVar

import redis.exceptions as rex

from ...aio._backend import AsyncBackend
from ...errors import StorageError, UsageError
from ...events import Event
from ...ops import Plan, adrive
from ...session import BaseSession
from ...storage import REOPEN, LogView, Reopen
from ...store import BaseStore
from .server import (
    COMMANDS,
    Server,
    eval_command,
    evalsha_command,
    script_sha,
    script_text,
)
from .storage import RedisLog, Request, numbered

__all__ = ["RedisAsyncBackend", "RedisNativeLog"]

T = TypeVar("T")


class RedisNativeLog:
    """A plain Redis session's log storage on the asyncio client (see the module
    docstring). One per session object and event loop."""

    __slots__ = ("_backend", "_client", "_queue", "_writing", "log", "loop", "session", "view")

    def __init__(
        self,
        backend: RedisAsyncBackend,
        session: BaseSession,
        log: RedisLog,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._backend = backend
        self.session = session
        """The session object, as the plans know it."""
        self.log = log
        """The session's log storage."""
        self.view: LogView = session.plans.view
        """What the log may know of the session."""
        self.loop = loop
        """The event loop this log belongs to."""
        self._queue = asyncio.Lock()
        self._client: Any = None
        self._writing = False

    @property
    def queue(self) -> asyncio.Lock:
        """The lock this loop's tasks take to drive a plan of the session."""
        return self._queue

    async def connect(self) -> bool:
        """The backend's client for this loop; False when the store waits for replicas (the
        sync path then runs in a thread)."""
        if self._backend.server.target.replicas:
            return False
        self._client = self._backend.client()
        return True

    async def drive(self, plan: Plan[T], *, writes: bool) -> T:
        """Run ``plan`` on this log; an append's plan settles before a cancellation reaches
        the caller once its script was sent."""
        if not writes:
            return await adrive(plan, self.session, self)
        self._writing = False
        task = asyncio.ensure_future(adrive(plan, self.session, self))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done() and not self._writing:
                task.cancel()
            while not task.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait([task])
            if not task.cancelled():
                task.exception()
            raise

    async def _run(self, request: Request) -> Any:
        db = self._backend.server
        if db.closed:
            raise UsageError(f"store {db.target.location} is closed")
        client = self._client
        try:
            if request.unknown and not db.cluster:
                return await self._packed(client, request)
            if request.name in COMMANDS:
                return await client.execute_command(request.name, *request.keys, *request.args)
            try:
                return await client.evalsha(
                    script_sha(request.name), len(request.keys), *request.keys, *request.args
                )
            except rex.NoScriptError:
                return await client.eval(
                    script_text(request.name), len(request.keys), *request.keys, *request.args
                )
        except (rex.RedisError, OSError) as exc:
            raise db.failure(exc, request.action, request.unknown) from None

    async def _packed(self, client: Any, request: Request) -> Any:
        """An append's script on one server, packed here and sent on a connection of the
        client's pool (``Server.packed_script``, on the asyncio client)."""
        pool = client.connection_pool
        connection = await pool.get_connection()
        try:
            await connection.send_packed_command(
                [evalsha_command(script_sha(request.name), request.keys, request.args)]
            )
            try:
                return await connection.read_response()
            except rex.NoScriptError:
                text = script_text(request.name)
                await connection.send_packed_command(
                    [eval_command(text, request.keys, request.args)]
                )
                return await connection.read_response()
        except rex.ResponseError:
            raise  # an answer: the connection is fine
        except BaseException:
            await connection.disconnect(nowait=True)  # a reply may be on its way
            raise
        finally:
            await pool.release(connection)

    # -- ops.AsyncLog -------------------------------------------------------------------------

    async def open(self) -> tuple[list[Event], bool]:
        """``RedisLog.open``: the window from the latest marker, and the life."""
        return self.log.opened(await self._run(self.log.open_call(tail=False)), tail=False)

    async def open_tail(self) -> tuple[list[Event], bool]:
        """``RedisLog.open_tail``: the latest events and the life."""
        return self.log.opened(await self._run(self.log.open_call(tail=True)), tail=True)

    async def refresh(self) -> list[Event] | Reopen:
        """``RedisLog.refresh``."""
        log = self.log
        if log.stale:
            return REOPEN
        after = self.view.seen_seq
        return log.take_refresh(await self._run(log.refresh_call(after)), after)

    async def read(self, after: int, limit: int | None) -> list[Event]:
        """``RedisLog.read``."""
        return self.log.decode(await self._run(self.log.read_call(after, limit)))

    async def meta(self, kind: str, key: str) -> Any:
        """Not native: the driver reads meta with the sync call."""
        return NotImplemented

    async def meta_add(self, kind: str, key: str, value: str) -> Any:
        """Not native: the driver writes meta with the sync call."""
        return NotImplemented

    async def append_one(self, event: Event, marker: bool) -> Event | None:
        """``RedisLog.append_one``."""
        log = self.log
        if log.life is None or log.stale:
            return None
        stored = await self._write([event], 0 if marker else -1, self.view.seen_seq)
        return stored[0] if stored else None

    async def append(
        self, events: list[Event], marker: int, expect_seq: int | None
    ) -> tuple[list[Event], list[Event]] | Reopen:
        """``RedisLog.append``."""
        log, view = self.log, self.view
        if log.stale:
            return REOPEN
        if not view.admits((), events):
            return [], []
        seen = view.seen_seq
        after = seen if expect_seq is None else expect_seq
        stored = await self._write(events, marker, after)
        if stored is None:
            if log.stale:
                return REOPEN
            return log.refused(expect_seq, await self.refresh())
        foreign: list[Event] = []
        if after > seen:
            try:
                foreign = log.decode(await self._run(log.read_call(seen, None, after)))
            except StorageError as exc:
                raise log.catch_up_failed(after, len(events), exc) from exc
            except asyncio.CancelledError:
                log.mark_stale()
                raise
        return foreign, stored

    async def _write(self, events: list[Event], marker: int, after: int) -> list[Event] | None:
        log = self.log
        db = self._backend.server
        stored = numbered(events, after)
        change = self.view.indexed(stored)
        request = log.append_call(stored, marker, after, change, not db.cluster)
        self._writing = True
        try:
            reply = await self._run(request)
        except asyncio.CancelledError:
            log.mark_stale()  # interrupted (the loop shutting down): open again when used
            raise
        status, reply = log.take_append(reply)
        if status != 1:
            return None
        if db.cluster:
            with contextlib.suppress(StorageError):  # stored: reindex repairs the index
                await self._run(log.index_call(reply, stored))
        return stored


class RedisAsyncBackend(AsyncBackend):
    """The async API's backend for a Redis store: a plain session's log storage natively on
    redis-py's asyncio client (one per event loop), the rest in worker threads."""

    name = "redis"

    def __init__(
        self, store: BaseStore, executor: concurrent.futures.Executor, server: Server
    ) -> None:
        super().__init__(store, executor)
        self.server = server
        """The store's server (its target, key names, error translation)."""
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
            weakref.WeakKeyDictionary()
        )
        self._logs: weakref.WeakKeyDictionary[BaseSession, RedisNativeLog] = (
            weakref.WeakKeyDictionary()
        )

    def client(self) -> Any:
        """The asyncio client of the running loop (made on first use)."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._clients[loop] = self.server.target.connect_async(
                socket_timeout=30.0, connect_timeout=10.0
            )
        return client

    def native_log(self, session: BaseSession) -> RedisNativeLog | None:
        """``session``'s log storage on the asyncio client (None: a subclass's session, or
        a log that is not this store's)."""
        native = self._logs.get(session)
        loop = asyncio.get_running_loop()
        if native is None or native.loop is not loop:
            log = session.plans.log
            if (
                type(session) is not BaseSession
                or not isinstance(log, RedisLog)
                or log.server is not self.server
            ):
                return None
            native = self._logs[session] = RedisNativeLog(self, session, log, loop)
        return native

    async def close(self) -> None:
        """Close the running loop's client (others are dropped with their loops)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        client = self._clients.pop(loop, None)
        if client is not None:
            with contextlib.suppress(Exception):
                await client.aclose()
