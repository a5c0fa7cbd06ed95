"""A PostgreSQL session's log: rows of ``<schema>.events`` under a row of ``<schema>.sessions``.

How appends, opening and catching up work, and how payloads are stored byte-exact, is told in
:mod:`agentsession.backends.postgres.store`. This module holds :class:`PostgresLog`, the
session's log storage (a :class:`~agentsession.storage.LogStorage`: the session is the
library's :class:`~agentsession.BaseSession`, given this log), and the row encoding and
decoding. The async API (:mod:`agentsession.backends.postgres.aio`) runs the same statements
on its own pool: it asks the log for each request (``open_request``, ``refresh_request``,
``read_request``, ``append_request``, ``catch_up_request``) and hands the rows back to it
(``opened``, ``take_refresh``, ``decode``, ``take_append``), so that the state they keep
(the life, whether to reopen) is one object's, whichever API ran the statement.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, TypeVar

import msgspec
import psycopg

from ...backoff import Backoff
from ...codec import decode, encode
from ...errors import CorruptLogError, StorageError, StoreUnavailable, UsageError
from ...events import Event, decode_event, encode_event
from ...session import BaseSession
from ...storage import REOPEN, LogView, Reopen
from .binary import bytea_array, text_array, timestamptz_array
from .connections import Connections, _Conn, _Row
from .index import PostgresIndex, _readable, append_params, raw_append_params
from .replicas import Freshness, ReplicaSet, write_lsn
from .schema import APPEND_MANY_CATALOG_PARAMS, APPEND_MANY_PARAMS, TAIL_EVENTS, Statements

__all__ = ["AppendRequest", "PostgresLog", "PostgresSession", "Request", "check_text"]

_W = TypeVar("_W", bound=tuple[Any, ...])

PostgresSession = BaseSession
"""A PostgreSQL store's session: the library's :class:`~agentsession.BaseSession` over a
:class:`PostgresLog` (the name is kept for code that imports it)."""

Request = tuple[str, bytes, tuple[Any, ...]]
"""A read the log asks for: what it is called in errors, the statement (``$n``
placeholders, rows in binary) and its parameters."""


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


def check_text(what: str, value: str) -> str:
    """``value``, when a PostgreSQL TEXT value can hold it; raises
    :class:`~agentsession.errors.UsageError` naming it as ``what`` otherwise."""
    if not _fits_text(value):
        raise UsageError(
            f"{what} {value!r} cannot be stored in PostgreSQL: TEXT holds neither NUL nor "
            "lone surrogates"
        )
    return value


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
    params["types"] = text_array([row[0] for row in rows])
    params["agents"] = text_array([row[1] for row in rows])
    params["users"] = text_array([row[2] for row in rows])
    params["datas"] = bytea_array([row[3] for row in rows])
    params["metas"] = bytea_array([row[4] for row in rows])
    params["raws"] = bytea_array([row[5] for row in rows])
    times = [event.time for event in events]  # stamped by append_many
    params["times"] = timestamptz_array(times)  # type: ignore[arg-type]
    params["eids"] = text_array([event.id or None for event in events])
    return params


_in_many_order = operator.itemgetter(*APPEND_MANY_PARAMS)
"""The batch statement's parameters from their dict, in ``$n`` order (one C call)."""
_in_many_catalog_order = operator.itemgetter(*APPEND_MANY_CATALOG_PARAMS)

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


class AppendRequest(NamedTuple):
    """An append the log asks for (:meth:`PostgresLog.append_request`): one statement whose
    one row is ``base, life`` (no row: nothing written)."""

    action: str
    """What the append is called in errors."""
    unknown: str
    """What a lost connection leaves unknown (the write's ``OutcomeUnknown`` says it)."""
    statement: bytes
    params: Any
    raw: bool
    """Whether the statement runs on a raw (``$n``) cursor."""


_UNKNOWN = (
    "the append may or may not have been stored: read the session (latest_seq) before retrying it"
)


class PostgresLog:
    """One session's log in a :class:`~agentsession.backends.postgres.PostgresStore`: its
    row of ``<schema>.sessions`` and its rows of ``<schema>.events`` (see
    :mod:`agentsession.backends.postgres.store`), over the store's connections ``db`` and
    statements ``sql`` (the :class:`~agentsession.storage.LogStorage` contract; the session is
    the library's :class:`~agentsession.BaseSession`, given this log).

    It remembers the ``sessions.life`` it read (its *life*, None: no row yet) and whether it
    must open the log again before its next use (:attr:`stale`: an append was stored but the
    other writers' events before it could not be read, or its outcome was not taken in). A
    log that is gone (deleted, perhaps created again) or stale answers
    :data:`~agentsession.storage.REOPEN`, having written nothing. An append is conditional on
    the latest seq the session has seen *and* on the life this log read, so it never lands in
    another life."""

    __slots__ = (
        "_db",
        "_fresh",
        "_id",
        "_identity",
        "_index",
        "_life",
        "_location",
        "_one_action",
        "_reading",
        "_reads",
        "_reconnect_timeout",
        "_sql",
        "_stale",
    )

    def __init__(
        self,
        db: Connections,
        sql: Statements,
        session_id: str,
        reconnect_timeout: float,
        index: PostgresIndex | None = None,
        reads: ReplicaSet | None = None,
    ) -> None:
        self._db = db
        self._reads = reads if reads is not None and reads.enabled else None
        self._fresh = Freshness()
        self._sql = sql
        self._index = index
        self._id = session_id
        self._reconnect_timeout = reconnect_timeout
        where = db.target.location
        self._location = f"{where} session {session_id!r}"
        self._identity = ("postgresql", where, session_id)
        self._reading = f"reading session {session_id!r}"
        self._one_action = f"appending 1 event to session {session_id!r}"
        self._life: int | None = None  # sessions.life of the life this log read
        self._stale = False  # open the log again before the next use

    # -- what it is ------------------------------------------------------------------------

    @property
    def location(self) -> str:
        """The store's password-free URL and the session id."""
        return self._location

    @property
    def identity(self) -> tuple[str, ...]:
        """The server, database, schema and session id."""
        return self._identity

    @property
    def session_id(self) -> str:
        """The session id."""
        return self._id

    @property
    def connections(self) -> Connections:
        """The store's connections this log's statements run on."""
        return self._db

    @property
    def reads(self) -> ReplicaSet | None:
        """The store's read replicas (None: every read goes to :attr:`connections`)."""
        return self._reads

    @property
    def freshness(self) -> Freshness:
        """What this log wrote, as far as its reads must see it (read replicas only)."""
        return self._fresh

    @property
    def statements(self) -> Statements:
        """The store's statements."""
        return self._sql

    @property
    def life(self) -> int | None:
        """``sessions.life`` of the life this log read (None: it read no session row)."""
        return self._life

    @property
    def stale(self) -> bool:
        """Whether the log must be opened again before its next use (its refresh and append
        answer :data:`~agentsession.storage.REOPEN` until then)."""
        return self._stale

    @property
    def reconnect_timeout(self) -> float:
        """Seconds a catch-up after a stored append keeps reading while the server cannot be
        reached (the store's ``reconnect_timeout``)."""
        return self._reconnect_timeout

    def mark_stale(self) -> None:
        """Open the log again before its next use: what was stored is not known here (an
        append's statement or catch-up interrupted)."""
        self._stale = True

    # -- the requests and what their rows mean (shared by the sync and the async API) ------

    def open_request(self, *, tail: bool) -> Request:
        """What opening reads: the latest ``TAIL_EVENTS`` events (``tail``) or the full
        window (from ``sessions.compaction_seq``), with the life, by key range, in one round
        trip."""
        action = f"opening session {self._id!r}"
        if tail:
            return action, self._sql.open_tail, (self._id, TAIL_EVENTS)
        return action, self._sql.open, (self._id,)

    def opened(self, rows: list[_Row], *, tail: bool) -> tuple[list[Event], bool]:
        """Take in what :meth:`open_request` read: the events and whether they are the whole
        log; the life they belong to (none: no session row)."""
        self._stale = False
        if not rows:
            self._life = None
            return [], True
        self._life = int(rows[0][9 if tail else 10])
        if rows[0][0] is None:  # a session row without events (archived)
            return [], True
        events = _events_of(rows, self._id)
        return events, events[0].seq <= 1

    def refresh_request(self, after: int) -> Request:
        """What catching up from seq ``after`` reads: the events after it, the latest seq
        and the life."""
        return self._reading, self._sql.refresh, (self._id, after)

    def take_refresh(self, rows: list[_Row], after: int) -> list[Event] | Reopen:
        """What :meth:`refresh_request` read, taken in: the events other writers appended;
        :data:`~agentsession.storage.REOPEN` when the log this object read is gone (deleted,
        perhaps created again) or was created since it found none."""
        found = _refreshed(rows, self._id)
        if found is None:
            if after or self._life is not None:
                return REOPEN  # deleted since we last looked
            return []
        last_seq, life, events = found
        if life != self._life:
            # Another life, or created since this log found none: opened again at its tail
            # (rather than read whole).
            return REOPEN
        if last_seq < after:
            # Read from a replica behind what this log saw: nothing new yet. (From the
            # primary a life's last_seq never goes back: open again, as for another life.)
            return [] if self._reads is not None else REOPEN
        return events

    def read_request(self, after: int, limit: int | None) -> Request:
        """A key-range scan of the primary key: ``seq > after``, in order, at most
        ``limit``."""
        return self._reading, self._sql.read, (self._id, after, limit)

    def decode(self, rows: list[_Row]) -> list[Event]:
        """Events from rows of the :meth:`read_request` and :meth:`catch_up_request`
        statements."""
        return _events_of(rows, self._id)

    def append_request(
        self, view: LogView, events: list[Event], marker: int, after: int
    ) -> AppendRequest:
        """The general path's statement for ``events``: stored only when the session row
        still has the latest seq ``after`` and the life this log read (created, when this log
        read no row and ``after`` is 0), so stored as seqs ``after + 1...``; with what they
        change in the store's catalog (:meth:`catalog`), in the same statement. Its one row is
        ``base, life``; no row: nothing written."""
        count = len(events)
        action = (
            self._one_action if count == 1 else f"appending {count} events to session {self._id!r}"
        )
        life = self._life
        catalog = self.catalog(view, events, after)
        sql = self._sql
        if count == 1:
            one = _append_one_params(self._id, events[0], marker == 0, after, life)
            if catalog is None:
                return AppendRequest(action, _UNKNOWN, sql.append_one, one, True)
            one += raw_append_params(catalog)
            return AppendRequest(action, _UNKNOWN, sql.append_one_catalog, one, True)
        many = _append_many_params(self._id, events, marker, after, life)
        if catalog is None:
            ordered = _in_many_order(many)
            return AppendRequest(action, _UNKNOWN, sql.append_many, ordered, True)
        many.update(catalog)
        ordered = _in_many_catalog_order(many)
        return AppendRequest(action, _UNKNOWN, sql.append_many_catalog, ordered, True)

    def catalog(self, view: LogView, events: list[Event], after: int) -> dict[str, Any] | None:
        """The catalog's parameters of an append of ``events`` after seq ``after`` (what
        ``view.indexed`` says they change, as stored with seqs ``after + 1...``: an append is
        only ever stored right after the seq it is conditional on; its documents are indexed
        apart, see :meth:`PostgresIndex.index_documents`); None when the store keeps no
        catalog."""
        if self._index is None:
            return None
        change = view.indexed(_numbered(events, after))
        if change is None:
            return None
        return append_params(change)

    def take_append(self, life: int) -> None:
        """Take in the life an append landed in (the one this log read, or the first one)."""
        self._life = life

    def refused(
        self, expect_seq: int | None, found: list[Event] | Reopen
    ) -> tuple[list[Event], list[Event]] | Reopen:
        """What an append that wrote nothing answers, given what catching up then found
        (``found``): the other writers' events and no stored ones. A conditional
        append (``expect_seq`` above 0) planned in a life that is gone is refused as a seq
        that did not match (the log opens again when next used), so it never lands in
        another life; any other append answers :data:`~agentsession.storage.REOPEN` and is
        tried again in the new life."""
        if not isinstance(found, Reopen):
            return found, []
        if expect_seq:
            self._stale = True
            return [], []
        return found

    def catch_up_request(self, after: int, upto: int) -> Request:
        """What reading the other writers' events between seq ``after`` and an append stored
        after ``upto`` reads (they were committed before the append and never change)."""
        return self._reading, self._sql.read_range, (self._id, after, upto)

    def catch_up_failed(self, base: int, count: int, exc: StorageError) -> StorageError:
        """Mark this log to open again when next used, and return the error for an append
        stored as seqs ``base + 1...`` whose catch-up on other writers' events failed."""
        self._stale = True
        return StorageError(
            f"session {self._id!r}: the append was stored as seqs {base + 1}..."
            f"{base + count}, but reading the events other writers appended before it "
            f"failed; the session reloads when next used ({exc})"
        )

    @staticmethod
    def stored(events: list[Event], base: int) -> list[Event]:
        """``events`` as an append stored them after seq ``base``."""
        return _numbered(events, base)

    # -- LogStorage -------------------------------------------------------------------------

    def _fetch(
        self,
        request: Request,
        *,
        primary: bool = False,
        wait: bool = True,
        behind: Callable[[list[_Row]], bool] | None = None,
    ) -> list[_Row]:
        """The rows of a read: from a read replica that has replayed this log's writes, or
        the primary (``primary``: always; ``wait``: False for a catch-up, which does not wait
        for a replica; see :mod:`~agentsession.backends.postgres.replicas`).
        A read that falls back to the primary also reads the primary's WAL position, so that
        this log's later reads never see a replica behind what it saw; so does a replica's
        answer that ``behind`` finds behind what is known to be stored."""
        reads = self._reads
        if reads is None:
            return self._db.fetch(*request)
        action, statement, params = request
        fresh = self._fresh
        db, replica = (self._db, None) if primary else reads.reader(fresh, wait)
        if replica is not None:
            try:
                rows = db.fetch(action, statement, params)
            except StorageError as exc:
                replica.failed(exc)
            else:
                if behind is None or not behind(rows):
                    return rows

        def read(conn: _Conn) -> tuple[list[_Row], int | None]:
            cursor = psycopg.RawCursor(conn)
            rows = cursor.execute(statement, params, binary=True).fetchall()
            try:
                return rows, write_lsn(conn)
            except psycopg.Error:
                return rows, None

        rows, lsn = self._db.run(action, read)
        if lsn is not None:
            fresh.lsn = max(fresh.lsn, lsn)
        return rows

    def _written(self, conn: _Conn) -> int | None:
        """After an append's statement on ``conn``: the WAL position it reached (read
        replicas only; None otherwise, or when it could not be read: the log then reads
        from the primary until its next append)."""
        if self._reads is None:
            return None
        try:
            return write_lsn(conn)
        except psycopg.Error:  # the append committed: its position is unknown, not its outcome
            return None

    def open_tail(self, view: LogView) -> tuple[list[Event], bool]:
        """The latest ``TAIL_EVENTS`` events and the life, in one round trip."""
        return self.opened(self._fetch(self.open_request(tail=True)), tail=True)

    def open(self, view: LogView) -> tuple[list[Event], bool]:
        """The full window: from ``sessions.compaction_seq`` to the end, and the life."""
        return self.opened(self._fetch(self.open_request(tail=False)), tail=False)

    def refresh(self, view: LogView) -> list[Event] | Reopen:
        return self._refresh(view, primary=False)

    def _refresh(self, view: LogView, *, primary: bool) -> list[Event] | Reopen:
        if self._stale:
            return REOPEN
        after = view.seen_seq
        request = self.refresh_request(after)
        rows = self._fetch(request, primary=primary, wait=False, behind=self.behind)
        return self.take_refresh(rows, after)

    def behind(self, rows: list[_Row]) -> bool:
        """Whether a catch-up's rows (:meth:`refresh_request`) read from a replica are behind
        the latest seq a notification announced for this session (read replicas only)."""
        reads = self._reads
        if reads is None:
            return False
        notified = reads.notified(self._id)
        return bool(notified) and (not rows or int(rows[0][9]) < notified)

    def read(self, after: int, limit: int | None) -> list[Event]:
        rows = self._fetch(self.read_request(after, limit), wait=False)
        return _events_of(rows, self._id)

    def discard_through(self, seq: int) -> tuple[int | None, int | None]:
        """Delete the rows of the (archived) events up to ``seq``, the last event's excepted,
        in one transaction (the session row locked first, as appends lock it); returns the
        rows' stored size before and after."""
        statements, sid = self._sql, self._id

        def discard(conn: Any) -> tuple[int, int]:
            with conn.transaction():
                before = int(conn.execute(statements.events_size, (sid,)).fetchone()[0])
                conn.execute(statements.discard_events, {"id": sid, "seq": seq})
                after = int(conn.execute(statements.events_size, (sid,)).fetchone()[0])
            return before, after

        sizes: tuple[int, int] = self._db.run(
            f"archiving session {sid!r}",
            discard,
            write="the archived events may or may not have been dropped from the live log",
        )
        return sizes

    def append_one_request(
        self, view: LogView, event: Event, marker: bool, seen: int
    ) -> AppendRequest | None:
        """The fast path's statement for ``event`` at seq ``seen + 1`` (``append_next``, on a
        raw cursor; it writes one row or none), with what it changes in the store's catalog,
        or None when this log knows no row yet or must open again: the general path then
        appends."""
        life = self._life
        if life is None or self._stale:
            return None
        params = _append_next_params(self._id, event, seen + 1, marker, life)
        catalog = self.catalog(view, [event], seen)
        if catalog is None:
            return AppendRequest(self._one_action, _UNKNOWN, self._sql.append_next, params, True)
        params += raw_append_params(catalog)
        statement = self._sql.append_next_catalog
        return AppendRequest(self._one_action, _UNKNOWN, statement, params, True)

    def append_one(self, view: LogView, event: Event, marker: bool) -> Event | None:
        """The fast path: one statement that updates the session row and inserts the event
        with seq ``seen_seq + 1``, only if the row still has that latest seq and this log's
        life (``append_next``). None, having written nothing, when this log knows no row yet,
        another writer appended, or the session was deleted or created again: the general
        path then appends and catches up."""
        seq = view.seen_seq + 1
        request = self.append_one_request(view, event, marker, seq - 1)
        if request is None:
            return None
        statement, params = request.statement, request.params

        def append(conn: _Conn) -> tuple[int, int | None]:
            stored = conn.append_cursor().execute(statement, params).rowcount
            return stored, self._written(conn)

        stored, _ = self._write(request, append)
        return _replace(event, seq=seq) if stored == 1 else None

    def append(
        self, view: LogView, events: list[Event], marker: int, expect_seq: int | None
    ) -> tuple[list[Event], list[Event]] | Reopen:
        """One statement, only after the latest seq the session has seen (or ``expect_seq``)
        and in the life this log read, when none of the batch's ids is among the events the
        session has seen (``view.admits``): what another writer appended first is caught up
        on and checked by the pipeline. Other writers' events before an append stored after
        a seq beyond the session's are read right after it (:meth:`catch_up_request`)."""
        if self._stale:
            return REOPEN
        if not view.admits((), events):  # (after opening again: the pipeline checks first)
            return [], []
        seen = view.seen_seq
        after = seen if expect_seq is None else expect_seq
        request = self.append_request(view, events, marker, after)
        statement, params = request.statement, request.params
        raw = request.raw

        def append(conn: _Conn) -> tuple[int, int, int | None]:
            cursor = conn.append_cursor() if raw else conn
            row = cursor.execute(statement, params).fetchone()
            lsn = self._written(conn)
            return (-1, -1, lsn) if row is None else (row[0], row[1], lsn)

        base, life, _ = self._write(request, append)
        if base < 0:  # another writer appended first, or the life is gone: nothing written
            return self.refused(expect_seq, self._refresh(view, primary=True))
        self._life = life
        foreign: list[Event] = []
        if base > seen:
            foreign = self._catch_up_to(seen, base, len(events))
        return foreign, _numbered(events, base)

    def _write(self, request: AppendRequest, op: Callable[[_Conn], _W]) -> _W:
        """Run an append's ``op`` on the primary; with read replicas, take in the WAL
        position it reached (its last item), or that it is unknown (the op failed)."""
        if self._reads is None:
            return self._db.run(request.action, op, write=request.unknown)
        try:
            result = self._db.run(request.action, op, write=request.unknown)
        except BaseException:
            self._fresh.unknown()
            raise
        self._fresh.wrote(result[-1])
        return result

    def quarantine(self, event: Event, reason: str) -> bool:
        """Nothing is quarantined in PostgreSQL (a damaged row raises)."""
        return False

    def close(self) -> None:
        """Nothing of its own to release: the store's pools hold the connections."""

    def after_fork(self) -> None:
        """Nothing of its own is shared with the parent: the store's connections start over
        in the child (:meth:`Connections.after_fork
        <agentsession.backends.postgres.connections.Connections.after_fork>`)."""

    def _catch_up_to(self, after: int, base: int, count: int) -> list[Event]:
        """Other writers' events between seq ``after`` and an append stored after ``base``:
        read again, with a growing pause, while the connection keeps being lost or the
        server cannot be reached, for the store's ``reconnect_timeout``."""
        backoff = Backoff(tries=1, reconnect_timeout=self._reconnect_timeout)
        while True:
            try:
                return _events_of(self._db.fetch(*self.catch_up_request(after, base)), self._id)
            except StoreUnavailable as exc:
                pause = backoff.reconnect_pause()
                if pause is None:
                    raise self.catch_up_failed(base, count, exc) from exc
                time.sleep(pause)
            except StorageError as exc:
                raise self.catch_up_failed(base, count, exc) from exc
