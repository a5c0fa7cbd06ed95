"""Read replicas: which server answers a read, and how a session object reads its own writes.

A store opened with ``read_url=`` (or ``read_urls=[...]``) sends every write (appends,
deletes, the catalog's and ``meta``'s writes), every turn lock, every ``meta`` read (values
that coordinate writers: keys, compare-and-set) and every live feed (``LISTEN`` works on the
primary only) to the primary, and these reads to a streaming replica, round robin over the
replicas given: opening a session, its reads, ``messages()``, catching up, the store's lists,
searches, totals and ``exists``.

**Read-your-writes.** Each session's log keeps a :class:`Freshness`: after an append it holds
the primary's WAL insert position read right after the commit (``pg_current_wal_insert_lsn()``,
on the connection that committed, so at or after the commit record). A read of the session
object goes to a replica only once that replica has replayed that position
(``pg_last_wal_replay_lsn()``; the position a replica was last seen at is remembered, so a
replica known to be past it costs no extra query):

* *opening* (the tail, or the full window ``messages()`` loads) asks the replica again, with
  a growing pause, for ``replica_wait`` seconds, then reads from the primary; until the
  session object writes again, its later opens no longer wait;
* *a catch-up* (the events other writers appended after those the session object holds, its
  own writes among them) and *a read of a range of events* (older events, and those the
  append pipeline reads) ask the replica once, and read from the primary when it is behind:
  the window of recent events already holds the object's own writes, and the primary
  answers at once.

A follower woken by the store's live feed (``LISTEN`` on the primary: the notification names
the session and its latest seq) reads a catch-up that a replica answers with less from the
primary, so it sees the append at once. A read that goes to the primary reads the primary's
position too, so that the session
object's later reads never see a replica behind what it saw. An append whose outcome is
unknown (its connection lost), and the catch-up of an append that found another writer
first, read from the primary. A read that a replica fails (a query cancelled by a conflict
with recovery, tables not replayed yet) goes to the primary; a replica that cannot be
reached is left out for :data:`DOWN_SECONDS`.

Other store objects, and the store's lists and searches, read what the replica has replayed:
they may lag behind the primary by the replica's replay lag.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ...errors import StorageError, StoreUnavailable, UsageError
from .connections import Connections, _Conn, _Row

__all__ = [
    "DEFAULT_REPLICA_WAIT",
    "DOWN_SECONDS",
    "NOTIFIED_KEPT",
    "REPLAY_LSN",
    "WRITE_LSN",
    "Freshness",
    "Replica",
    "ReplicaSet",
]

log = logging.getLogger("agentsession.backends.postgres")
_T = TypeVar("_T")

DEFAULT_REPLICA_WAIT = 0.5
"""Seconds opening a session object that wrote (its tail, or its full window) waits for a
replica to replay the write before it reads from the primary (the store's
``replica_wait``)."""

DOWN_SECONDS = 5.0
"""Seconds a replica that could not be reached, or failed a read, is left out."""

WRITE_LSN = b"SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint"
"""The primary's WAL insert position, as a byte count: run right after a commit on the
connection that committed, it is at or after the commit record."""

REPLAY_LSN = (
    b"SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
    b"ELSE pg_current_wal_flush_lsn() END - '0/0'::pg_lsn)::bigint"
)
"""How far a replica has replayed, as a byte count (a server that is not in recovery, such
as the primary named as its own replica: how far it has flushed)."""

NOTIFIED_KEPT = 10_000
"""How many sessions' latest notified seqs a store with read replicas remembers."""

_FIRST_PAUSE = 0.002
_LONGEST_PAUSE = 0.05


class Freshness:
    """What one session object wrote, as far as its reads must see: the WAL position its
    last append reached (0: nothing written), whether it must read from the primary (an
    append whose outcome is unknown), and whether a read already waited for that position."""

    __slots__ = ("lsn", "pinned", "waited")

    def __init__(self) -> None:
        self.lsn = 0
        """The WAL position a replica must have replayed to serve this object's reads."""
        self.pinned = False
        """Read from the primary (until the next append that reports its position)."""
        self.waited = False
        """A read waited ``replica_wait`` for :attr:`lsn` already (later reads do not)."""

    def wrote(self, lsn: int | None) -> None:
        """Take in an append that reached WAL position ``lsn`` (None: unknown, so read from
        the primary until the next append)."""
        if lsn is None:
            self.pinned = True
            return
        self.lsn = max(self.lsn, lsn)
        self.pinned = False
        self.waited = False

    def unknown(self) -> None:
        """An append's outcome, or where it reached, is not known: read from the primary."""
        self.pinned = True


class Replica:
    """One read replica: its connections, how far it was last seen to have replayed, and
    until when it is left out."""

    __slots__ = ("db", "down_until", "replayed")

    def __init__(self, db: Connections) -> None:
        self.db = db
        """The replica's connections (its own pools)."""
        self.replayed = 0
        """The furthest replay position seen on this replica."""
        self.down_until = 0.0
        """``time.monotonic()`` before which the replica is left out."""

    def seen(self, lsn: int | None) -> bool | None:
        """Take in a replay position read from the replica; None when it read none."""
        if lsn is None:
            return None
        if lsn > self.replayed:
            self.replayed = lsn
        return True

    def failed(self, exc: StorageError) -> None:
        """Take in a read the replica failed (the read then goes to the primary): a replica
        that cannot be reached is left out for :data:`DOWN_SECONDS`; any other failure (a
        query cancelled by a conflict with recovery, tables not replayed yet) is this read's
        alone."""
        if isinstance(exc, StoreUnavailable):
            self.down_until = time.monotonic() + DOWN_SECONDS
            where = self.db.target.where
            log.info("read replica %s left out for %g s: %s", where, DOWN_SECONDS, exc)
        else:
            log.debug("read replica %s failed a read: %s", self.db.target.where, exc)


class ReplicaSet:
    """The primary and the read replicas of a store (none: every read goes to the primary),
    and the choice of the server that answers each read (see the module docstring).

    ``wait``: the store's ``replica_wait``."""

    def __init__(self, primary: Connections, replicas: Sequence[Connections], wait: float) -> None:
        if not isinstance(wait, (int, float)) or not wait >= 0:
            raise UsageError(f"replica_wait must be >= 0 seconds, not {wait!r}")
        self.primary = primary
        """The primary's connections: every write."""
        self.replicas = tuple(Replica(db) for db in replicas)
        """The read replicas, in the order given."""
        self.wait = float(wait)
        """Seconds a read waits for a replica to replay a session object's write."""
        self._mutex = threading.Lock()
        self._turn = 0
        self._notified: OrderedDict[str, int] = OrderedDict()

    def heard(self, session_id: str, seq: int) -> None:
        """Take in a notification (the store's live feed, from the primary): session
        ``session_id`` has events up to ``seq``. A catch-up of that session that a replica
        answers with less reads from the primary (a follower woken by the notification sees
        the append at once, not at its next fallback read). The latest
        :data:`NOTIFIED_KEPT` sessions are remembered."""
        with self._mutex:
            notified = self._notified
            if seq > notified.get(session_id, 0):
                notified[session_id] = seq
                notified.move_to_end(session_id)
                if len(notified) > NOTIFIED_KEPT:
                    notified.popitem(last=False)

    def notified(self, session_id: str) -> int:
        """The latest seq a notification announced for ``session_id`` (0: none heard)."""
        return self._notified.get(session_id, 0)

    @property
    def enabled(self) -> bool:
        """Whether the store has read replicas."""
        return bool(self.replicas)

    def choose(self) -> Replica | None:
        """The next replica, round robin, leaving out those marked down (None: no replica
        to read from)."""
        replicas = self.replicas
        if not replicas:
            return None
        now = time.monotonic()
        with self._mutex:
            for _ in range(len(replicas)):
                replica = replicas[self._turn % len(replicas)]
                self._turn += 1
                if replica.down_until <= now:
                    return replica
        return None

    def pauses(self, fresh: Freshness, wait: bool = True) -> Callable[[], float | None]:
        """The pauses between asking a replica for its replay position on behalf of
        ``fresh``: each call gives the next (None: stop waiting, and mark ``fresh`` as having
        waited, unless ``wait`` is False: a catch-up, which asks once and never waits)."""
        if not wait:
            return lambda: None
        deadline = time.monotonic() + (0.0 if fresh.waited else self.wait)
        pause = _FIRST_PAUSE

        def next_pause() -> float | None:
            nonlocal pause
            left = deadline - time.monotonic()
            if left <= 0:
                fresh.waited = True
                return None
            current, pause = min(pause, left), min(pause * 2, _LONGEST_PAUSE)
            return current

        return next_pause

    def reader(
        self, fresh: Freshness | None, wait: bool = True
    ) -> tuple[Connections, Replica | None]:
        """The server a read answers from: a replica that has replayed ``fresh``'s writes
        (None: no writes to wait for), waiting for one as the module docstring says (not
        ``wait``: asking it once), else the primary; with the replica (None: the primary)."""
        if fresh is not None and fresh.pinned:
            return self.primary, None
        replica = self.choose()
        if replica is None:
            return self.primary, None
        need = 0 if fresh is None else fresh.lsn
        if need <= replica.replayed:
            return replica.db, replica
        assert fresh is not None
        next_pause = self.pauses(fresh, wait)
        while True:
            try:
                replayed = replica.db.run("reading the replay position", _replay_lsn)
            except StorageError as exc:
                replica.failed(exc)
                return self.primary, None
            if replica.seen(replayed) and need <= replica.replayed:
                return replica.db, replica
            pause = next_pause()
            if pause is None:
                return self.primary, None
            time.sleep(pause)

    def run(self, action: str, op: Callable[[_Conn], _T], fresh: Freshness | None = None) -> _T:
        """Run the read ``op`` on the server :meth:`reader` chooses (the primary when the
        replica then fails it)."""
        db, replica = self.reader(fresh)
        if replica is None:
            return db.run(action, op)
        try:
            return db.run(action, op)
        except StorageError as exc:
            replica.failed(exc)
            return self.primary.run(action, op)

    def fetch(
        self,
        action: str,
        statement: bytes,
        params: Sequence[Any],
        fresh: Freshness | None = None,
    ) -> list[_Row]:
        """A session's read statement (``$n``, in binary: ``Connections.fetch``) on the
        server :meth:`reader` chooses (the primary when the replica then fails it)."""
        db, replica = self.reader(fresh)
        if replica is None:
            return db.fetch(action, statement, params)
        try:
            return db.fetch(action, statement, params)
        except StorageError as exc:
            replica.failed(exc)
            return self.primary.fetch(action, statement, params)

    def close(self) -> None:
        """Close the replicas' connections (the primary's are the store's)."""
        for replica in self.replicas:
            replica.db.close()

    def after_fork(self) -> None:
        """In a forked child: the replicas' connections start over, as the primary's."""
        for replica in self.replicas:
            replica.db.after_fork()


def write_lsn(conn: _Conn) -> int | None:
    """The primary's WAL insert position on ``conn`` (run right after a commit there)."""
    row = conn.execute(WRITE_LSN).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def _replay_lsn(conn: _Conn) -> int | None:
    row = conn.execute(REPLAY_LSN).fetchone()
    return None if row is None or row[0] is None else int(row[0])
