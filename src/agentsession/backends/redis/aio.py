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
import sys
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
    Target,
    eval_command,
    evalsha_command,
    pack_command,
    parse_reply,
    script_sha,
    script_text,
)
from .storage import RedisLog, Request, numbered

__all__ = ["RedisAsyncBackend", "RedisNativeLog"]

T = TypeVar("T")


if sys.version_info >= (3, 11):
    _within = asyncio.timeout
else:  # pragma: no cover - Python 3.10

    @contextlib.asynccontextmanager
    async def _within(seconds: float) -> Any:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            task.cancel()

        handle = loop.call_later(seconds, expire)
        try:
            yield
        except asyncio.CancelledError:
            if expired:
                raise TimeoutError from None
            raise
        finally:
            handle.cancel()


class _AsyncDirect:
    """A connection of the store's own to a plain-TCP server on one event loop, for the
    append's script (``Server``'s ``_Direct`` on asyncio streams): sent and read here
    (RESP2), without redis-py's pool, connection and parser around each call. One task uses
    it at a time (the backend keeps the idle ones of a loop)."""

    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, target: Target, connect_timeout: float, timeout: float) -> _AsyncDirect:
        host, port = target.nodes[0]
        try:
            async with _within(connect_timeout):
                reader, writer = await asyncio.open_connection(host, port)
        except (OSError, TimeoutError) as exc:
            raise rex.ConnectionError(f"Error connecting to {host}:{port}. {exc}") from None
        direct = cls(reader, writer)
        try:
            setup = target.setup_commands()
            if setup:
                writer.write(b"".join(pack_command(parts) for parts in setup))
                buf = bytearray()
                for _ in setup:
                    answer = await direct.read(buf, timeout)
                    if isinstance(answer, Exception):
                        raise answer
        except BaseException:
            direct.close()
            raise
        return direct

    async def read(self, buf: bytearray, timeout: float) -> Any:
        """One reply (what follows it stays in ``buf``)."""
        while True:
            got = parse_reply(buf, 0) if buf else None
            if got is not None:
                del buf[: got[1]]
                return got[0]
            async with _within(timeout):
                chunk = await self.reader.read(65536)
            if not chunk:
                raise rex.ConnectionError("Connection closed by server.")
            buf += chunk

    async def call(self, command: bytes, timeout: float) -> Any:
        """Send ``command`` and read its reply: an error reply raised as redis-py's
        exception; a failed send or read raises redis-py's ``ConnectionError`` or
        ``TimeoutError`` (the caller drops the connection)."""
        try:
            self.writer.write(command)
            if self.writer.transport.get_write_buffer_size():
                await self.writer.drain()
            answer = await self.read(bytearray(), timeout)
        except TimeoutError:
            raise rex.TimeoutError("Timeout reading from the server") from None
        except OSError as exc:
            raise rex.ConnectionError(f"Error while talking to the server: {exc}") from None
        if isinstance(answer, Exception):
            raise answer
        return answer

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


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
        """An append's script on one server, packed here: on a connection of the backend's
        own to a plain-TCP server (:class:`_AsyncDirect`), else of the client's pool
        (``Server.packed_script``, on the asyncio client)."""
        backend = self._backend
        if not backend.server.target.tls:
            direct = await backend.take_direct()
            try:
                command = evalsha_command(script_sha(request.name), request.keys, request.args)
                try:
                    reply = await direct.call(command, backend.server.timeouts[0])
                except rex.NoScriptError:
                    text = script_text(request.name)
                    command = eval_command(text, request.keys, request.args)
                    reply = await direct.call(command, backend.server.timeouts[0])
            except rex.ResponseError:
                backend.give_back(direct)  # an answer: the connection is fine
                raise
            except BaseException:
                direct.close()  # the reply may be on its way: not for the next command
                raise
            backend.give_back(direct)
            return reply
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
        self._idle: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[_AsyncDirect]] = (
            weakref.WeakKeyDictionary()
        )

    async def take_direct(self) -> _AsyncDirect:
        """An idle connection of the running loop for an append's script (made when there
        is none)."""
        idle = self._idle.get(asyncio.get_running_loop())
        if idle:
            return idle.pop()
        db = self.server
        return await _AsyncDirect.connect(db.target, db.timeouts[1], db.timeouts[0])

    def give_back(self, direct: _AsyncDirect) -> None:
        """Keep ``direct`` for the running loop's next append."""
        self._idle.setdefault(asyncio.get_running_loop(), []).append(direct)

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
        for direct in self._idle.pop(loop, []):
            direct.close()
        client = self._clients.pop(loop, None)
        if client is not None:
            with contextlib.suppress(Exception):
                await client.aclose()
