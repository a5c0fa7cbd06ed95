"""How a PostgreSQL store learns of the appends other processes make: ``LISTEN``/``NOTIFY``.

Every statement that stores events (the fast single-event path, the general one-event path and
the batch, from the sync and the async API alike) and the one that deletes a session send a
notification in their own transaction, from their ``RETURNING`` list, so it costs no extra
round trip (see :mod:`agentsession.backends.postgres.schema`): on the schema's channel
(:func:`~agentsession.backends.postgres.schema.notify_channel`), with the payload
``"<last_seq> <session id>"`` (the seq alone when the id is longer than
:data:`~agentsession.backends.postgres.schema.NOTIFY_ID_BYTES`). PostgreSQL delivers it when
the transaction commits, and never when it rolls back or writes nothing.

:class:`PostgresWatcher` is the store's :class:`~agentsession.follow.Watcher`: while something
follows a session of the store object, it holds a connection of its own (outside the pools)
that ``LISTEN``\\ s on the channel, holds the schema's listen lock shared (appends notify
only while someone holds it: see
:func:`~agentsession.backends.postgres.schema.listen_lock_key`), and turns each notification
into ``changed(session_id)`` (``changed(None)`` for a payload without an id). A lost
connection is made again with a growing pause (20 ms, doubling up to 1 s, for as long as
anything follows), and then ``changed(None)`` tells every follower to read again:
notifications sent while nobody listened are lost.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

import psycopg
from psycopg import sql

from ...backoff import Backoff
from ...errors import StorageError
from .connections import Connections, _Conn, log
from .schema import listen_lock_key

__all__ = ["POLL", "PostgresWatcher", "session_of"]

POLL = 0.25
"""Seconds the watcher waits for a notification before it looks at its ``stop`` again."""


def session_of(payload: str) -> str | None:
    """The session id a notification's payload names (``"<seq> <session id>"``); None for a
    payload without one (a session id too long to send, or a payload of another program)."""
    seq, space, session_id = payload.partition(" ")
    if not space or not seq.isdigit():
        return None
    return session_id


class PostgresWatcher:
    """Tells a store's followers of the appends other processes make: ``LISTEN`` on the
    store's channel on a connection of its own, holding the schema's listen lock
    (:func:`~agentsession.backends.postgres.schema.listen_lock_key`) shared so that appends
    notify (see :mod:`this module <agentsession.backends.postgres.watch>`). ``db`` is the
    store's connections (how to reach the server, and the translation of its errors, without
    the password), ``channel`` the schema's channel."""

    def __init__(
        self,
        db: Connections,
        channel: str,
        heard: Callable[[str, int], None] | None = None,
    ) -> None:
        self._db = db
        self._channel = channel
        self._heard = heard
        """Told each notification's session id and latest seq before ``changed`` (a store
        with read replicas: a follower woken by it then reads past a replica behind it)."""
        key = listen_lock_key(db.target.schema)
        self._listen = b"LISTEN %s; SELECT pg_advisory_lock_shared(%d)" % (
            sql.Identifier(channel).as_bytes(None),
            key,
        )
        self._doing = f"listening for appends to {db.target.location}"

    @property
    def channel(self) -> str:
        """The ``LISTEN``/``NOTIFY`` channel."""
        return self._channel

    def run(self, changed: Callable[[str | None], None], stop: threading.Event) -> None:
        """Until ``stop`` is set: ``changed(session_id)`` for each notification,
        ``changed(None)`` each time the ``LISTEN`` is in place (the first time, and after a
        lost connection was made again). Returns within :data:`POLL` seconds of ``stop`` (or
        once a connection attempt under way ends), its connection closed."""
        backoff = Backoff(tries=1, reconnect_timeout=math.inf)
        while not stop.is_set():
            try:
                conn = self._connect()
            except StorageError as exc:  # unreachable (the message holds no password)
                log.debug("%s: %s", self._doing, exc)
                if stop.wait(backoff.reconnect_pause() or 0.0):
                    return
                continue
            try:
                if stop.is_set():
                    return
                changed(None)  # what was appended before the LISTEN, or while it was lost
                backoff = Backoff(tries=1, reconnect_timeout=math.inf)
                self._relay(conn, changed, stop)
                return
            except psycopg.Error as exc:
                log.info("%s; connecting again", self._db.failure(exc, self._doing))
            finally:
                conn.close()
            if stop.wait(backoff.reconnect_pause() or 0.0):
                return

    def _connect(self) -> _Conn:
        """A connection listening on the channel (:class:`StorageError` when the server
        cannot be reached or refuses)."""
        conn = self._db.connect(self._db.watch_kwargs())
        try:
            setup = b"SET statement_timeout = 0"
            if conn.info.server_version >= 140000:
                setup += b"; SET idle_session_timeout = 0"  # it is idle, by design
            conn.execute(setup)
            conn.execute(self._listen)
        except psycopg.Error as exc:
            conn.close()
            raise self._db.failure(exc, self._doing) from None
        return conn

    def _relay(
        self, conn: _Conn, changed: Callable[[str | None], None], stop: threading.Event
    ) -> None:
        """Turn ``conn``'s notifications into calls of ``changed`` until ``stop`` is set."""
        heard = self._heard
        while not stop.is_set():
            for note in conn.notifies(timeout=POLL):
                session_id = session_of(note.payload)
                if heard is not None and session_id is not None:
                    heard(session_id, int(note.payload.partition(" ")[0]))
                changed(session_id)
