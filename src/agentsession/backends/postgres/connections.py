"""The PostgreSQL store's connections: two pools, what a forked child does with them, and the
one place driver errors become agentsession errors.

* **Opening a store connects once**: the connection that checked the schema waits in a
  :class:`_Handoff` and becomes the query pool's first connection. The lock pool opens when
  the first turn lock is taken.
* **Pooled connections are checked when handed out** (:func:`_check_or_drain`: a poll of the
  socket, no round trip); a connection the server closed is replaced, and the pool's other
  idle ones are drained instead of being checked, and backed off from, one by one.
* **Errors** are translated in :meth:`Connections.failure`, called by :meth:`Connections.run`:
  an unreachable server is :class:`~agentsession.errors.StoreUnavailable` naming host and
  database, never the password; a read whose connection drops is retried once; a write whose
  connection drops is :class:`~agentsession.errors.OutcomeUnknown`. psycopg_pool's own
  per-attempt "error connecting" warnings about these pools are logged at DEBUG instead
  (:class:`_PoolConnectNoise`).
* **A forked child** never uses its parent's connections (:meth:`Connections.after_fork`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import psycopg
import psycopg_pool
from psycopg.conninfo import conninfo_to_dict

if TYPE_CHECKING:
    from typing_extensions import Self

from ...errors import OutcomeUnknown, StorageError, StoreUnavailable, UsageError
from .target import _Target

__all__ = ["Connections"]

# The package's one logger, under the name users configure (the package, not this module).
log = logging.getLogger("agentsession.backends.postgres")
_T = TypeVar("_T")
_Row = tuple[Any, ...]
_AsyncPool = psycopg_pool.AsyncConnectionPool[psycopg.AsyncConnection[_Row]]

_POOL_NAME_PREFIXES = (
    "agentsession/",
    "agentsession-lock/",
    "agentsession-async/",
    "agentsession-replica/",
    "agentsession-replica-async/",
)
"""How the store's pools are named (then the schema): ``name`` and ``application_name``. The
third is the async API's pool (:mod:`agentsession.backends.postgres.aio`); the last two are a
read replica's query pool and async pool (:mod:`agentsession.backends.postgres.replicas`)."""

_WATCH_NAME_PREFIX = "agentsession-watch/"
"""The ``application_name`` of the connection that listens for appends (then the schema;
:mod:`agentsession.backends.postgres.watch`)."""

_WATCH_CONNECT_TIMEOUT = 2
"""Seconds the listening connection waits for the server when connecting (libpq's least):
its thread looks at its ``stop`` only between attempts."""


class _PoolConnectNoise(logging.Filter):
    """A filter on psycopg_pool's logger (``psycopg.pool``): its per-attempt "error connecting
    in <pool>: <error>" warning about a pool of this module becomes a DEBUG line of this
    module's logger; every other record passes untouched.

    The store reports a server it cannot reach itself, as
    :class:`~agentsession.errors.StoreUnavailable` naming host and database, so the raw warning
    (repeated for every reconnection attempt, and racing the store's own error on open) is
    noise next to it.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if (
            isinstance(record.msg, str)
            and record.msg.startswith("error connecting in ")
            and isinstance(args, tuple)
            and len(args) == 2
            and isinstance(args[0], str)
            and args[0].startswith(_POOL_NAME_PREFIXES)
        ):
            log.debug("pool %r could not connect: %s", *args)
            return False
        return True


def _install_pool_log_filter() -> None:
    """Add :class:`_PoolConnectNoise` to psycopg_pool's logger, once."""
    pool_log = logging.getLogger("psycopg.pool")
    if not any(type(f).__name__ == _PoolConnectNoise.__name__ for f in pool_log.filters):
        pool_log.addFilter(_PoolConnectNoise())


_install_pool_log_filter()


class _Handoff:
    """The connection a store opened to check its schema, waiting to become its pool's first
    connection (so that opening a store connects once)."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._conn: _Conn | None = None

    def put(self, conn: _Conn) -> None:
        """Leave ``conn`` for the pool to take."""
        with self._mutex:
            self._conn = conn

    def take(self) -> _Conn | None:
        """The connection left here, once (None when there is none, or it was closed)."""
        with self._mutex:
            conn, self._conn = self._conn, None
        return conn if conn is not None and not conn.closed else None


class _Conn(psycopg.Connection[_Row]):
    """The store's connections: the pool's first one is the store's schema-checking
    connection (``handoff``), and each keeps one cursor for the append statement."""

    _append_cursor: psycopg.RawCursor[_Row] | None = None

    @classmethod
    def connect(cls, conninfo: str = "", **kwargs: Any) -> Self:
        handoff = kwargs.pop("handoff", None)
        if isinstance(handoff, _Handoff):
            conn = handoff.take()
            if conn is not None:
                return cast("Self", conn)
        return super().connect(conninfo, **kwargs)

    def append_cursor(self) -> psycopg.RawCursor[_Row]:
        """A ``$n`` cursor kept for the append statement, whose result is one small row (other
        statements take a cursor of their own, so no large result stays referenced)."""
        cursor = self._append_cursor
        if cursor is None:
            cursor = self._append_cursor = psycopg.RawCursor(self)
        return cursor


_inherited: list[object] = []  # a forked child's copies of its parent's pools: never used


class Connections:
    """A store's connections to one schema: the query pool, the lock pool (opened with the
    first turn lock), the async API's pool on demand, and the translation of driver errors.

    ``durability`` ``fsync`` sets ``synchronous_commit = on`` on every connection; the other
    arguments are the store's options of the same names (see
    :class:`~agentsession.backends.postgres.PostgresStore`).
    """

    def __init__(
        self,
        target: _Target,
        *,
        durability: str,
        pool_min_size: int,
        pool_max_size: int,
        lock_pool_max_size: int,
        pool_timeout: float,
        connect_timeout: int,
        prepare_threshold: int | None,
        replica: bool = False,
    ) -> None:
        self.target = target
        self.replica = replica
        """Whether these are a read replica's connections (named apart; never written to)."""
        self.pool_timeout = pool_timeout
        self._pool_min_size = pool_min_size
        self._pool_max_size = pool_max_size
        self._lock_pool_max_size = lock_pool_max_size
        params = conninfo_to_dict(target.conninfo)
        self._connect_kwargs: dict[str, Any] = {
            "autocommit": True,
            "prepare_threshold": prepare_threshold,
        }
        if "connect_timeout" not in params:
            self._connect_kwargs["connect_timeout"] = connect_timeout
        self._app_name = "application_name" not in params
        setup = "SET TimeZone TO 'UTC'"
        if durability == "fsync":
            setup += "; SET synchronous_commit TO on"
        self._setup = setup.encode()
        self._mutex = threading.Lock()  # opening and closing the pools
        self._closed = False
        self._reopen = False  # set in a forked child: open this process's pools on first use
        self._connections: weakref.WeakSet[_Conn] = weakref.WeakSet()
        self._handoff = _Handoff()
        self._lock_pool_open = False  # the lock pool opens with the first turn lock
        self.pool, self.lock_pool = self._make_pools()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (the store is closed)."""
        return self._closed

    @property
    def _pool_name(self) -> str:
        return f"{_POOL_NAME_PREFIXES[3 if self.replica else 0]}{self.target.schema}"

    def pool_kwargs(self) -> dict[str, Any]:
        """How the query pool's connections are made (the first one by the store itself)."""
        return {
            **self._connect_kwargs,
            **({"application_name": self._pool_name} if self._app_name else {}),
        }

    def watch_kwargs(self) -> dict[str, Any]:
        """How the connection that listens for appends is made: as the pools' (autocommit),
        with TCP keepalives (so a server that vanished is noticed while it waits), never
        preparing a statement, and connecting within :data:`_WATCH_CONNECT_TIMEOUT` seconds."""
        name = f"{_WATCH_NAME_PREFIX}{self.target.schema}"
        return {
            **self._connect_kwargs,
            "prepare_threshold": None,
            "connect_timeout": _WATCH_CONNECT_TIMEOUT,
            **({"application_name": name} if self._app_name else {}),
            "keepalives": 1,
            "keepalives_idle": 15,
            "keepalives_interval": 5,
            "keepalives_count": 3,
        }

    def _make_pools(
        self,
    ) -> tuple[psycopg_pool.ConnectionPool[_Conn], psycopg_pool.ConnectionPool[_Conn]]:
        """The store's two pools, not yet open: statements, and turn locks."""
        pool: psycopg_pool.ConnectionPool[_Conn] = psycopg_pool.ConnectionPool(
            self.target.conninfo,
            connection_class=_Conn,
            kwargs={**self.pool_kwargs(), "handoff": self._handoff},
            min_size=self._pool_min_size,
            max_size=self._pool_max_size,
            timeout=self.pool_timeout,
            configure=self._configure,
            check=lambda conn: _check_or_drain(pool, conn),
            name=self._pool_name,
            open=False,
        )
        lock_name = f"{_POOL_NAME_PREFIXES[1]}{self.target.schema}"
        lock_pool: psycopg_pool.ConnectionPool[_Conn] = psycopg_pool.ConnectionPool(
            self.target.conninfo,
            connection_class=_Conn,
            kwargs={
                **self._connect_kwargs,
                **({"application_name": lock_name} if self._app_name else {}),
                # The client notices a dead server; the server-side settings below make the
                # server notice a dead client, and drop its locks.
                "keepalives": 1,
                "keepalives_idle": 15,
                "keepalives_interval": 5,
                "keepalives_count": 3,
            },
            min_size=0,
            max_size=self._lock_pool_max_size,
            timeout=self.pool_timeout,
            configure=self._configure_lock,
            check=lambda conn: _check_or_drain(lock_pool, conn),
            reset=_unlock_all,
            name=lock_name,
            open=False,
        )
        return pool, lock_pool

    def make_async_pool(self) -> _AsyncPool:
        """The async API's pool (:mod:`~agentsession.backends.postgres.aio`), not yet open:
        the query pool's server, settings (``TimeZone``, ``synchronous_commit`` at ``fsync``),
        sizes, timeout and hand-out check, with connections of its own. It opens on the event
        loop that first uses it and closes with the async store."""
        name = f"{_POOL_NAME_PREFIXES[4 if self.replica else 2]}{self.target.schema}"
        setup = self._setup

        async def configure(conn: psycopg.AsyncConnection[_Row]) -> None:
            await conn.execute(setup)

        async def check(conn: psycopg.AsyncConnection[_Row]) -> None:
            # As _check_or_drain: a poll of the socket, no round trip.
            if _closed_by_server(conn):
                await conn.close()
                await pool.drain()
                raise psycopg.OperationalError("the server closed this pooled connection")

        pool: _AsyncPool = psycopg_pool.AsyncConnectionPool(
            self.target.conninfo,
            connection_class=psycopg.AsyncConnection,
            kwargs={
                **self._connect_kwargs,
                **({"application_name": name} if self._app_name else {}),
            },
            min_size=self._pool_min_size,
            max_size=self._pool_max_size,
            timeout=self.pool_timeout,
            configure=configure,
            check=check,
            name=name,
            open=False,
        )
        return pool

    def open(self, first: _Conn) -> None:
        """Open the query pool with ``first`` (the connection that checked the schema) as its
        first connection; with ``pool_min_size`` >= 1, wait until it holds its connections (a
        request arriving sooner would make the pool grow by another)."""
        self._handoff.put(first)
        try:
            self.pool.open(wait=self._pool_min_size > 0, timeout=self.pool_timeout)
        except psycopg_pool.PoolTimeout:
            self.close()
            raise self.pool_timeout_error(self.pool, "opening the store") from None

    def open_in_background(self) -> None:
        """Open the query pool without waiting for a connection (a read replica's: a
        replica that cannot be reached leaves the store usable, reading from the primary)."""
        self.pool.open(wait=False)

    def after_fork(self) -> None:
        """In a forked child: never touch the parent's connections again, and use pools of
        this process's own (opened when first needed).

        The inherited connections share their sockets with the parent's. Their sockets are
        pointed at ``/dev/null`` in this process (the parent's are untouched), so nothing
        this process does with them, not even a finalizer saying goodbye to the server, can
        reach the parent's sessions; the inherited pools are kept, unused, for ever.
        """
        devnull = os.open(os.devnull, os.O_RDWR)
        try:
            for conn in list(self._connections):
                with contextlib.suppress(OSError, ValueError, psycopg.Error):
                    os.dup2(devnull, conn.pgconn.socket)
        finally:
            os.close(devnull)
        _inherited.append((self.pool, self.lock_pool, self._handoff))
        self._mutex = threading.Lock()
        self._connections = weakref.WeakSet()
        self._handoff = _Handoff()
        self._lock_pool_open = False
        self.pool, self.lock_pool = self._make_pools()
        self._reopen = True

    def connect(self, kwargs: dict[str, Any] | None = None) -> _Conn:
        """A connection made directly, outside the pools (``kwargs``: how; the pools' settings
        by default); :class:`~agentsession.errors.StoreUnavailable` when the server cannot be
        reached."""
        try:
            conn = _Conn.connect(self.target.conninfo, **(kwargs or self._connect_kwargs))
        except psycopg.Error as exc:
            raise self.unavailable(str(exc)) from None
        self._connections.add(conn)
        return conn

    def _configure(self, conn: _Conn) -> None:
        self._connections.add(conn)
        conn.execute(self._setup)

    def _configure_lock(self, conn: _Conn) -> None:
        self._connections.add(conn)
        setup = (
            "SET tcp_keepalives_idle = 15; SET tcp_keepalives_interval = 5; "
            "SET tcp_keepalives_count = 3"
        )
        # Lock waits are bounded by lock_timeout (the caller's timeout), never by a role's
        # statement_timeout; nothing else long runs on these connections.
        setup += "; SET statement_timeout = 0"
        if conn.info.server_version >= 140000:
            setup += "; SET idle_session_timeout = 0"  # never drop a connection holding a lock
        conn.execute(setup.encode())

    def unavailable(self, reason: str) -> StoreUnavailable:
        """The error for a server that cannot be reached, ``reason`` scrubbed of secrets."""
        reason = self.target.scrub(reason.strip()).replace("\n", " ").replace("\t", "")
        return StoreUnavailable(f"cannot reach {self.target.where}: {reason}")

    def failure(self, exc: psycopg.Error, action: str, write: str = "") -> StorageError:
        """The agentsession error for a driver error raised while ``action`` ran."""
        message = self.target.scrub(str(exc).strip().splitlines()[0] if str(exc) else "")
        if isinstance(exc, psycopg.errors.UndefinedTable):
            return StorageError(
                f"{action} failed: the store's tables are missing from schema "
                f"{self.target.schema!r} in {self.target.where} (dropped?): {message}"
            )
        if write:
            return OutcomeUnknown(
                f"{action} failed: the connection to {self.target.where} was lost before the "
                f"server answered, so the outcome is unknown: {write} ({message})"
            )
        if isinstance(exc, psycopg.OperationalError):
            return self.unavailable(f"{action} failed: {message}")
        return StorageError(f"{action} failed in {self.target.where}: {message}")

    def checkout(self, pool: psycopg_pool.ConnectionPool[_Conn], action: str) -> _Conn:
        """A connection from ``pool``, checked by the pool (see :func:`_check_or_drain`)."""
        if self._reopen:
            self._open_pools_after_fork()
        if pool is self.lock_pool and not self._lock_pool_open:
            self._open_lock_pool()
        try:
            return pool.getconn(timeout=self.pool_timeout)
        except psycopg_pool.PoolClosed:
            raise UsageError(f"store {self.target.location} is closed") from None
        except psycopg_pool.PoolTimeout:
            raise self.pool_timeout_error(pool, action) from None

    def _open_pools_after_fork(self) -> None:
        with self._mutex:
            if self._reopen and not self._closed:
                self.pool.open(wait=False)
                self._reopen = False

    def _open_lock_pool(self) -> None:
        with self._mutex:
            if not self._lock_pool_open and not self._closed:
                self.lock_pool.open(wait=False)
                self._lock_pool_open = True

    def pool_timeout_error(
        self,
        pool: psycopg_pool.ConnectionPool[Any] | psycopg_pool.AsyncConnectionPool[Any],
        action: str,
    ) -> StoreUnavailable:
        """Tell a server that cannot be reached from a pool whose connections are all busy."""
        try:
            self.connect().close()
        except StoreUnavailable as exc:
            return exc
        return StoreUnavailable(
            f"{action}: no free connection to {self.target.where} within {self.pool_timeout:g}"
            f" s: all {pool.max_size} connections of pool {pool.name!r} are in use (raise "
            "pool_max_size or lock_pool_max_size, or check the server's max_connections)"
        )

    def run(self, action: str, op: Callable[[_Conn], _T], *, write: str = "") -> _T:
        """Run ``op`` on a pooled connection, translating every driver error.

        A read (``write`` empty) whose connection drops is retried once on a fresh connection.
        A write is never retried; if its connection drops, ``write`` says what may or may not
        have happened. A server-reported error leaves the connection usable and means the
        statement (a whole transaction) did not take effect.
        """
        attempts = 1 if write else 2
        for attempt in range(attempts):
            conn = self.checkout(self.pool, action)
            try:
                result = op(conn)
            except psycopg.Error as exc:
                lost = conn.closed or conn.broken
                self.pool.putconn(conn)
                if lost and attempt + 1 < attempts:
                    log.info("%s: connection lost (%s); retrying once", action, exc)
                    continue
                raise self.failure(exc, action, write if lost else "") from None
            except BaseException:
                self.pool.putconn(conn)
                raise
            self.pool.putconn(conn)
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    def fetch(self, action: str, statement: bytes, params: Sequence[Any]) -> list[_Row]:
        """The rows of a session's read statement (``$n`` placeholders), in binary: the stored
        bytes and integers as they are, with no text to parse on either side."""
        return self.run(
            action,
            lambda conn: psycopg.RawCursor(conn).execute(statement, params, binary=True).fetchall(),
        )

    def close(self) -> None:
        """Close the pools (and the first connection, when the pool never took it)."""
        with self._mutex:
            self._closed = True
        self.lock_pool.close()
        self.pool.close()
        unused = self._handoff.take()  # the pool never needed a connection
        if unused is not None:
            unused.close()


def _closed_by_server(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether an idle connection was closed by the server (restart, termination, timeout).

    An idle connection has nothing to read unless the server sent an error and hung up, so a
    readable socket means it is gone: checking costs a ``poll``, not a round trip.
    """
    if conn.closed or conn.broken:
        return True
    try:
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError, psycopg.Error):
        return True


def _check_or_drain(pool: psycopg_pool.ConnectionPool[_Conn], conn: _Conn) -> None:
    """The pools' ``check`` hook, which psycopg_pool runs on a connection it hands out: a
    connection the server closed is refused (the pool replaces it), so a statement, and above
    all a write, never goes to a dead connection. The check polls the socket instead of
    sending a query, so a healthy connection costs no round trip.

    A server that closed one connection (a restart, a failover, an administrator) has usually
    closed every idle one, so the pool is drained too: the next candidate is a fresh connection
    rather than the next dead one, each of which would cost a pause (psycopg_pool backs off
    between failed checks of one request: 0, 1, 2, 4 ... s, which a pool of a few dead
    connections would turn into a pool timeout).
    """
    if _closed_by_server(conn):
        conn.close()
        pool.drain()
        raise psycopg.OperationalError("the server closed this pooled connection")


def _unlock_all(conn: _Conn) -> None:
    """Pool reset hook: a lock connection goes back to the pool holding no lock."""
    conn.execute("SELECT pg_advisory_unlock_all()")
