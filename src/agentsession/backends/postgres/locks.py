"""Turn locks as PostgreSQL session-level advisory locks (:class:`PostgresLocker`).

A turn lock is an advisory lock on a 64-bit key derived from the schema and the session id
(:func:`turn_lock_key`), held on a connection of the store's lock pool that is not handed back
until the lock is released; a holder that dies (SIGKILL, lost network) loses its connection and
with it the lock. Waiting is the server's job: ``pg_advisory_lock`` under a ``lock_timeout``
set for that one statement, so a waiter gets the lock as soon as it is released, with no
polling (timeout 0 is one ``pg_try_advisory_lock``).
"""

from __future__ import annotations

import hashlib
import math
import threading
from dataclasses import dataclass

import psycopg
import psycopg_pool

from ...errors import LockTimeout
from .connections import Connections, _closed_by_server, _Conn

__all__ = ["PostgresLocker", "turn_lock_key"]


def turn_lock_key(schema: str, session_id: str) -> int:
    """The signed 64-bit advisory lock key of a session's turn lock: the first 8 bytes of
    BLAKE2b over a fixed prefix, the schema and the session id (UTF-8, surrogates kept)."""
    material = b"agentsession-turn\x00%s\x00%s" % (
        schema.encode(),
        session_id.encode("utf-8", "surrogatepass"),
    )
    return int.from_bytes(hashlib.blake2b(material, digest_size=8).digest(), "big", signed=True)


@dataclass(eq=False)
class _LockHandle:
    session_id: str
    key: int
    conn: _Conn


_IS_LOCKED = b"""
SELECT EXISTS (
    SELECT 1 FROM pg_locks
    WHERE locktype = 'advisory' AND granted AND objsubid = 1
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND classid::bigint = %s AND objid::bigint = %s
)
"""


_MAX_LOCK_TIMEOUT_MS = 2**31 - 1
"""The largest ``lock_timeout`` PostgreSQL accepts (an int of milliseconds, about 24.8 days)."""


def _lock_timeout_ms(timeout: float | None) -> int:
    """``lock_timeout`` for a wait of ``timeout`` seconds (positive, or None for ever).

    0 means no limit to PostgreSQL: None, and waits too long for ``lock_timeout`` to express
    (infinity included), wait for ever. A positive timeout is rounded up to whole
    milliseconds, so it never becomes 0.
    """
    if timeout is None or not timeout * 1000 < _MAX_LOCK_TIMEOUT_MS:
        return 0
    return max(1, math.ceil(timeout * 1000))


def _take_advisory_lock(conn: _Conn, key: int, timeout: float | None) -> bool:
    """Take the session-level advisory lock ``key`` on ``conn`` (an autocommit connection),
    waiting at most ``timeout`` seconds (None: for ever; 0 or less: not at all); whether it was
    taken.

    The server does the waiting: ``pg_advisory_lock`` under a session-level ``lock_timeout``
    set just before and reset (to the session's default) right after. A timeout aborts only
    that statement's implicit transaction, which leaves the connection idle and usable.
    """
    if timeout is not None and timeout <= 0:
        row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
        return bool(row and row[0])
    conn.execute("SELECT set_config('lock_timeout', %s, false)", (str(_lock_timeout_ms(timeout)),))
    try:
        conn.execute("SELECT pg_advisory_lock(%s)", (key,))
    except psycopg.errors.LockNotAvailable:
        return False
    finally:
        if not conn.closed:
            conn.execute("RESET lock_timeout")
    return True


class PostgresLocker:
    """Turn locks as session-level advisory locks, each on a connection of its own.

    ``acquire`` takes a connection from the store's lock pool and lets the server wait:
    ``pg_advisory_lock`` with ``lock_timeout`` set to the timeout for that statement (0, no
    limit, for ``timeout=None``), so the lock is granted the moment its holder releases it
    (waiters queue in the server, first come first served) and a timeout is the server's
    ``lock_not_available`` error, raised as :class:`~agentsession.errors.LockTimeout`.
    ``timeout=0`` is one ``pg_try_advisory_lock``. Lock connections run with
    ``statement_timeout = 0``, so a role's statement timeout does not cut a wait short. The
    connection stays out of the pool while the lock is held. ``release`` unlocks and hands the
    connection back (or closes it when unlocking fails, which drops the lock too). A process
    that dies loses its connections, and the server drops their locks: at once when the socket
    closes (a killed process), or after the TCP keepalive probes set on lock connections fail
    (a lost network, about 30 s). ``is_locked`` reads ``pg_locks``. The timeout counts only
    time spent waiting for the lock, not for a connection.
    """

    def __init__(self, db: Connections, schema: str) -> None:
        self._db = db
        self._schema = schema
        self._held: set[_LockHandle] = set()
        self._held_mutex = threading.Lock()

    def acquire(self, session_id: str, timeout: float | None) -> object:
        """Take the turn lock of ``session_id``, waiting at most ``timeout`` seconds (None: for
        ever, 0: not at all); returns the handle :meth:`release` takes. Raises
        :class:`~agentsession.errors.LockTimeout` when the time runs out."""
        key = turn_lock_key(self._schema, session_id)
        conn = self._db.checkout(self._db.lock_pool, "taking a turn lock")
        try:
            taken = _take_advisory_lock(conn, key, timeout)
        except psycopg.Error as exc:
            self._db.lock_pool.putconn(conn)
            raise self._db.failure(exc, f"taking the turn lock of session {session_id!r}") from None
        except BaseException:
            self._db.lock_pool.putconn(conn)  # the reset hook drops a lock granted meanwhile
            raise
        if not taken:
            self._db.lock_pool.putconn(conn)
            raise LockTimeout(session_id, timeout or 0.0)
        handle = _LockHandle(session_id, key, conn)
        self._track(handle, held=True)
        return handle

    def release(self, handle: object) -> None:
        """Unlock and hand the lock's connection back to the pool (closing it, which drops the
        lock too, when unlocking fails)."""
        assert isinstance(handle, _LockHandle)
        self._track(handle, held=False)
        conn = handle.conn
        unlocked = False
        try:
            if not conn.closed:
                row = conn.execute("SELECT pg_advisory_unlock(%s)", (handle.key,)).fetchone()
                unlocked = bool(row and row[0])
        except psycopg.Error:
            unlocked = False
        if not unlocked:
            conn.close()  # closing the connection drops every lock it held
        try:
            self._db.lock_pool.putconn(conn)
        except psycopg_pool.PoolClosed:
            conn.close()

    lost_while_alive = True
    """A holder can lose its lock while its process lives (a connection the server ended): a
    worker that takes it over from a holder that did not release it fences the log
    (:mod:`agentsession.fencing`)."""

    def alive(self, handle: object) -> bool:
        """Whether the connection holding ``handle``'s lock is still open on the server's side
        (a poll of its socket, no round trip): a lock whose connection the server ended is
        lost (see :attr:`TurnLock.held <agentsession.locks.TurnLock.held>`)."""
        assert isinstance(handle, _LockHandle)
        return not _closed_by_server(handle.conn)

    def is_locked(self, session_id: str) -> bool:
        """Whether any client of the database holds the session's turn lock (``pg_locks``)."""
        key = turn_lock_key(self._schema, session_id)
        high, low = (key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF
        row = self._db.run(
            f"checking the turn lock of session {session_id!r}",
            lambda conn: conn.execute(_IS_LOCKED, (high, low)).fetchone(),
        )
        return bool(row and row[0])

    def _track(self, handle: _LockHandle, *, held: bool) -> None:
        with self._held_mutex:
            if held:
                self._held.add(handle)
            else:
                self._held.discard(handle)

    def drop_all(self) -> None:
        """Close the connection of every lock held (the server drops the locks with them): a
        closed store holds no locks."""
        with self._held_mutex:
            held, self._held = list(self._held), set()
        for handle in held:
            handle.conn.close()

    def forget_after_fork(self) -> None:
        """In a forked child: the parent's held locks stay the parent's, never touched here."""
        self._held = set()
        self._held_mutex = threading.Lock()
