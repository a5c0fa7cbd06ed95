"""A PostgreSQL session's log: rows of ``<schema>.events`` under a row of ``<schema>.sessions``.

How appends, opening and catching up work, and how payloads are stored byte-exact, is told in
:mod:`agentsession.backends.postgres.store`. This module holds the session and the row
encoding and decoding it shares with the async API (:mod:`agentsession.backends.postgres.aio`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from ...backoff import Backoff
from ...codec import decode, encode
from ...errors import CorruptLogError, StorageError, StoreUnavailable
from ...events import Event, decode_event, encode_event
from ...session import BaseSession
from ...store import BaseStore
from .connections import Connections, _Conn, _Row
from .schema import TAIL_EVENTS, Statements

__all__ = ["PostgresSession"]


def _fits_text(value: str) -> bool:
    """Whether a PostgreSQL TEXT value can hold ``value`` exactly."""
    if "\x00" in value:
        return False
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _readable(value: str) -> str:
    """``value`` with NUL and lone surrogates replaced by U+FFFD, so TEXT can hold it."""
    value = value.replace("\x00", "\ufffd")
    return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _columns(event: Event) -> tuple[str, str, str, bytes, bytes | None, bytes | None]:
    """``type, agent, user, data, meta, raw_event`` of one event's row."""
    meta = encode(event.meta) if event.meta else None
    kind, agent, user = event.type, event.agent, event.user
    if _fits_text(kind) and _fits_text(agent) and _fits_text(user):
        return kind, agent, user, bytes(event.data), meta, None
    header = encode_event(Event(type=kind, agent=agent, user=user, time=event.time))
    return _readable(kind), _readable(agent), _readable(user), bytes(event.data), meta, header


def _append_next_params(
    session_id: str, event: Event, seq: int, marker: bool, life: int
) -> tuple[Any, ...]:
    """The parameters of the fast path's statement (``append_next``, ``$1`` ... ``$12``)."""
    head = (session_id, seq, event.time, seq if marker else 0, life)
    return (*head, *_columns(event), event.id or None)


def _append_one_params(
    session_id: str, event: Event, marker: bool, expect_seq: int | None, life: int | None
) -> tuple[Any, ...]:
    """The parameters of the one-event append statement (``$1`` ... ``$12``): the same event
    columns as :func:`_append_next_params`, after a head of their own."""
    head = (session_id, event.time, 1 if marker else 0, expect_seq, life)
    return (*head, *_columns(event), event.id or None)


def _append_many_params(
    session_id: str,
    events: Sequence[Event],
    marker: int,
    expect_seq: int | None,
    life: int | None,
) -> dict[str, Any]:
    """The parameters of the batch append statement."""
    params: dict[str, Any] = {
        "id": session_id,
        "first_time": events[0].time,
        "last_time": events[-1].time,
        "n": len(events),
        "mark": marker + 1,
        "expect": expect_seq,
        "life": life,
    }
    rows = [_columns(event) for event in events]
    for index, name in enumerate(("types", "agents", "users", "datas", "metas", "raws")):
        params[name] = [row[index] for row in rows]
    params["times"] = [event.time for event in events]
    params["eids"] = [event.id or None for event in events]
    return params


_Raw = msgspec.Raw
_replace = msgspec.structs.replace


def _unusual_event(row: Sequence[Any]) -> Event:
    """An event whose row sets ``raw_event``: the JSON of its fields TEXT could not hold (the
    payload and meta in their columns), or a whole event that version 2 stored there."""
    raw, data, meta, eid = row[7], row[5], row[6], row[8]
    if raw is not None:
        event = decode_event(raw)
    else:
        event = Event(type=row[1], agent=row[2], user=row[3], time=row[4])
    return msgspec.structs.replace(
        event,
        seq=row[0],
        data=_Raw(data) if data is not None else event.data,
        meta=decode(meta) if meta is not None else event.meta,
        id=eid or event.id,
    )


def _events_of(rows: Sequence[Sequence[Any]], session_id: str = "") -> list[Event]:
    """Events from rows whose first columns are ``seq, type, agent, user, time, data, meta,
    raw_event, eid`` (read in binary: ``data`` and ``meta`` are the stored bytes). A row whose
    ``meta`` or ``raw_event`` does not decode (damaged, or written by another program) raises
    :class:`~agentsession.errors.CorruptLogError` naming its seq."""
    try:
        return _decode_rows(rows)
    except (ValueError, TypeError, RecursionError):
        pass
    for row in rows:
        try:
            _decode_rows((row,))
        except (ValueError, TypeError, RecursionError) as exc:
            where = f"session {session_id!r}: " if session_id else ""
            raise CorruptLogError(
                f"{where}the event with seq {row[0]} does not decode: {exc}",
                session_id=session_id,
            ) from None
    raise AssertionError("unreachable")  # pragma: no cover: some row failed above


def _decode_rows(rows: Iterable[Sequence[Any]]) -> list[Event]:
    events: list[Event] = []
    add = events.append
    for row in rows:
        data = row[5]
        if row[7] is not None or data is None:
            add(_unusual_event(row))
            continue
        meta = row[6]
        add(
            Event(
                seq=row[0],
                type=row[1],
                agent=row[2],
                user=row[3],
                time=row[4],
                data=_Raw(data),
                meta={} if meta is None else decode(meta),
                id=row[8] or "",
            )
        )
    return events


def _refreshed(rows: list[_Row], session_id: str = "") -> tuple[int, int, list[Event]] | None:
    """The ``refresh`` statement's rows: the session's latest seq, its life and the events
    after the seq asked for (None: the session has no row)."""
    if not rows:
        return None
    first = rows[0]
    events = _events_of(rows, session_id) if first[0] is not None else []
    return int(first[9]), int(first[10]), events


def _numbered(events: list[Event], base: int) -> list[Event]:
    """``events`` as stored after seq ``base``: with seqs ``base + 1``, ``base + 2``, ..."""
    if len(events) == 1:
        return [_replace(events[0], seq=base + 1)]
    return [_replace(event, seq=base + i) for i, event in enumerate(events, start=1)]


class PostgresSession(BaseSession):
    """A session stored as rows of ``<schema>.events`` (see
    :mod:`agentsession.backends.postgres.store`), over its store's connections ``db`` and
    statements ``sql``."""

    def __init__(self, store: BaseStore, session_id: str, db: Connections, sql: Statements) -> None:
        super().__init__(store, session_id)
        self._db = db
        self._sql = sql
        self._stale = False  # set when catching up failed: reload before the next use
        self._life: int | None = None  # sessions.life of the life this object read
        with self._lock:
            self._load()

    @property
    def location(self) -> str:
        """The store's password-free URL and the session id."""
        return f"{self._store.location} session {self._id!r}"

    def _storage_open_tail(self) -> tuple[list[Event], bool]:
        """The latest ``TAIL_EVENTS`` events and the life, by key range, in one round trip."""
        action, statement, params, life_column = self._open_request(tail=True)
        self._stale = False
        return self._opened(self._db.fetch(action, statement, params), life_column)

    def _storage_open(self) -> tuple[list[Event], bool]:
        """The full window: from ``sessions.compaction_seq`` to the end, and the life."""
        action, statement, params, life_column = self._open_request(tail=False)
        self._stale = False
        return self._opened(self._db.fetch(action, statement, params), life_column)

    def _open_request(self, *, tail: bool) -> tuple[str, bytes, tuple[Any, ...], int]:
        """What opening reads (the tail, or the full window): the action for errors, the
        statement, its parameters and the column of the life in its rows. Shared by the sync
        and the async API."""
        action = f"opening session {self._id!r}"
        if tail:
            return action, self._sql.open_tail, (self._id, TAIL_EVENTS), 9
        return action, self._sql.open, (self._id,), 10

    def _opened(self, rows: list[_Row], life_column: int) -> tuple[list[Event], bool]:
        """Take in what opening read: the events and whether they are the whole log; the
        life they belong to (none: no session row). Shared by the sync and the async API."""
        if not rows:
            self._life = None
            return [], True
        self._life = int(rows[0][life_column])
        if rows[0][0] is None:  # a session row without events (archived)
            return [], True
        events = _events_of(rows, self._id)
        return events, events[0].seq <= 1

    def _storage_refresh(self) -> list[Event]:
        if self._stale:
            self._load()
            return []
        after = self._latest_seq
        rows = self._db.fetch(f"reading session {self._id!r}", self._sql.refresh, (self._id, after))
        events = self._take_refresh(rows, after)
        if events is None:
            self._load()  # created, or deleted and created again, since we last looked
            return []
        return events

    def _take_refresh(self, rows: list[_Row], after: int) -> list[Event] | None:
        """What a refresh from seq ``after`` read (the ``refresh`` statement's ``rows``), taken
        in: the events other writers appended; a session deleted since this object last
        looked starts over (empty); None when it must be reloaded (created, or deleted and
        created again: another life). Shared by the sync and the async API."""
        found = _refreshed(rows, self._id)
        if found is None:
            if after or self._life is not None:
                self._reset()  # deleted since we last looked
                self._life = None
            return []
        last_seq, life, events = found
        if life != self._life or last_seq < after:
            return None
        return events

    def _storage_read(self, after: int, limit: int | None) -> list[Event]:
        """A key-range scan of the primary key: ``seq > after``, in order, at most ``limit``."""
        rows = self._db.fetch(
            f"reading session {self._id!r}", self._sql.read, (self._id, after, limit)
        )
        return _events_of(rows, self._id)

    def _append_next(self, event: Event, marker: bool) -> tuple[bytes, tuple[Any, ...], int] | None:
        """The fast path's statement, its parameters and the seq it stores ``event`` at
        (``latest_seq + 1``); None when this object knows no row yet or must reload."""
        life = self._life
        if life is None or self._stale:
            return None
        seq = self._latest_seq + 1
        params = _append_next_params(self._id, event, seq, marker, life)
        return self._sql.append_next, params, seq

    def _append_request(
        self, events: list[Event], marker: int, expect_seq: int | None
    ) -> tuple[bytes, Any, bool]:
        """The general path's statement and parameters for ``events``, and whether it runs on
        a raw (``$n``) cursor. Its one row is ``base, life`` (no row: ``expect_seq`` did not
        match); a conditional append holds only within the life it was planned in."""
        life = self._life if expect_seq else None
        sql = self._sql
        if len(events) == 1:
            one = _append_one_params(self._id, events[0], marker == 0, expect_seq, life)
            return sql.append_one, one, True
        many = _append_many_params(self._id, events, marker, expect_seq, life)
        return sql.append_many, many, False

    def _append_messages(self, count: int) -> tuple[str, str]:
        """What an append of ``count`` events is called in errors, and what a lost connection
        leaves unknown."""
        return (
            f"appending {count} event{'s' if count != 1 else ''} to session {self._id!r}",
            "the append may or may not have been stored: read the session (latest_seq) "
            "before retrying it",
        )

    def _adopt_append(self, base: int, life: int) -> int:
        """Take in where an append landed: after seq ``base``, in life ``life``. A life other
        than the one this object read, or a ``base`` below the seq it has seen, means the
        session was deleted (and perhaps created again) since it last looked: it starts over.
        Returns the seq after which other writers' events are to be read, up to ``base``.
        Shared by the sync and the async API."""
        if life != self._life:
            if self._life is not None or self._latest_seq:
                self._reset()  # deleted (and perhaps created again) since we last looked
            self._life = life
        elif base < self._latest_seq:
            self._reset()
        return self._latest_seq

    def _catch_up_failed(self, base: int, count: int, exc: StorageError) -> StorageError:
        """Mark this object to reload when next used, and return the error for an append
        stored as seqs ``base + 1...`` whose catch-up on other writers' events failed."""
        self._stale = True
        return StorageError(
            f"session {self._id!r}: the append was stored as seqs {base + 1}..."
            f"{base + count}, but reading the events other writers appended before it "
            f"failed; the session reloads when next used ({exc})"
        )

    def _decode(self, rows: list[_Row]) -> list[Event]:
        """Events from rows of the ``read`` and ``read_range`` statements."""
        return _events_of(rows, self._id)

    def _stored(self, events: list[Event], base: int) -> list[Event]:
        """``events`` as an append stored them after seq ``base``."""
        return _numbered(events, base)

    def _storage_append_one(self, event: Event, marker: bool) -> Event | None:
        """The fast path: one statement that updates the session row and inserts the event
        with seq ``latest_seq + 1``, only if the row still has that latest seq and this
        object's life (``append_next``). None, having written nothing, when this object knows
        no row yet, another writer appended, or the session was deleted or created again: the
        general path then appends and catches up."""
        request = self._append_next(event, marker)
        if request is None:
            return None
        statement, params, seq = request

        def append(conn: _Conn) -> int:
            return conn.append_cursor().execute(statement, params).rowcount

        action, unknown = self._append_messages(1)
        stored = self._db.run(action, append, write=unknown)
        return _replace(event, seq=seq) if stored == 1 else None

    def _storage_append(
        self, events: list[Event], marker: int, expect_seq: int | None
    ) -> tuple[list[Event], list[Event]]:
        if self._stale:
            self._load()
        # Only after the latest seq this object has seen: the pipeline checked the batch's ids
        # against everything up to it, and checks what another writer appended first.
        after = self._latest_seq if expect_seq is None else expect_seq
        statement, params, raw = self._append_request(events, marker, after)

        def append(conn: _Conn) -> tuple[int, int]:
            cursor = conn.append_cursor() if raw else conn
            row = cursor.execute(statement, params).fetchone()
            return (-1, -1) if row is None else (row[0], row[1])

        count = len(events)
        action, unknown = self._append_messages(count)
        base, life = self._db.run(action, append, write=unknown)
        if base < 0:  # another writer appended first: nothing was written
            return self._storage_refresh(), []
        after = self._adopt_append(base, life)
        foreign: list[Event] = []
        if base > after:
            foreign = self._catch_up_to(after, base, count)
        return foreign, _numbered(events, base)

    def _catch_up_to(self, after: int, base: int, count: int) -> list[Event]:
        """Other writers' events between seq ``after`` and an append stored after ``base``:
        read again, with a growing pause, while the connection keeps being lost or the
        server cannot be reached, for the store's ``reconnect_timeout``."""
        backoff = Backoff(tries=1, reconnect_timeout=self._store._reconnect_timeout)
        while True:
            try:
                return self._read_range(after, base)
            except StoreUnavailable as exc:
                pause = backoff.reconnect_pause()
                if pause is None:
                    raise self._catch_up_failed(base, count, exc) from exc
                time.sleep(pause)
            except StorageError as exc:
                raise self._catch_up_failed(base, count, exc) from exc

    def _read_range(self, after: int, upto: int) -> list[Event]:
        rows = self._db.fetch(
            f"reading session {self._id!r}", self._sql.read_range, (self._id, after, upto)
        )
        return _events_of(rows, self._id)
