"""The PostgreSQL backend: many workers on many machines sharing one database.

Opened by ``open_store("postgresql://user@host:5432/db?schema=agentsession")``. The tables
and their migrations are in :mod:`agentsession.backends.postgres.schema`; ``docs/scaling.md``
covers running it at scale. How it keeps the storage contract:

* **Append is one statement** (so one round trip, one transaction in autocommit mode). The
  common case, one event from a session object that saw the log last, is the fast path
  (``_storage_append_one``): an ``UPDATE`` of the session row to ``last_seq + 1``, conditional
  on the row still having the latest seq and life this object knows, and an ``INSERT`` of the
  event fed by its ``RETURNING`` (nothing is written when the condition fails, and the general
  path runs). The general path is an ``INSERT ... ON CONFLICT DO UPDATE ... RETURNING`` that
  bumps ``sessions.last_seq`` by the batch size (creating the row on the first append), and a
  data-modifying CTE inserts the events with seqs after the returned previous value (scalar
  parameters for one event, ``unnest`` of one array per column for a batch), conditional on
  the row still having the latest seq this object has seen: the append pipeline checked the
  batch's event ids against everything up to it, and when another writer appended first,
  nothing is written and the pipeline reads those events, checks the ids again and tries
  again (``BaseSession._append_fresh``). The session
  row's lock serialises the writers of one session; other sessions proceed in parallel. When the
  previous ``last_seq`` is beyond what this session object has seen, the events in between
  (other writers') are read by key range right after: they were committed before this append
  could lock the row and never change, so reading them after the commit gives exactly the rows
  the same transaction would have seen. A previous ``last_seq`` *below* ours means the session
  was deleted (and perhaps recreated) underneath us, and the session starts over. The
  statements a session runs are prepared by psycopg after a few executions, and the append
  statement runs on a cursor each connection keeps.
* **Opening** reads the session's latest events (``TAIL_EVENTS``) by key range, with its
  life, in one round trip: O(tail) however long the log is. The full window, from
  ``sessions.compaction_seq`` (the latest compaction marker that rebuilds the history on its
  own) to the end, is read when ``messages()`` and the like first need it; never the history
  before it.
* **Payloads are stored byte-exact** (schema version 3): ``data`` is a ``bytea`` holding the
  exact bytes of ``event.data``, so ``event.raw`` reads back as it was appended (key order,
  whitespace, number spelling, ``\\u0000`` and lone surrogate escapes), and reads hand the
  stored bytes over in binary with nothing to parse or convert; ``meta`` is the meta's
  agentsession JSON as ``bytea``. Only an event whose type, agent or user TEXT cannot hold
  (NUL, lone UTF-16 surrogates) also sets ``raw_event`` (those fields as JSON), with a readable
  copy (U+FFFD in their place) in the TEXT columns. Session ids, meta keys and values that TEXT
  cannot hold are refused with :class:`~agentsession.errors.UsageError` (a documented
  divergence from the file backends, which accept any non-blank id).
* **Durability**: an acknowledged append is a committed transaction, which survives our
  process dying whatever the setting. ``flush`` leaves ``synchronous_commit`` at the server's
  default (normally ``on``: the commit waits for the WAL to reach disk); ``fsync`` forces
  ``synchronous_commit = on`` on the store's connections even where the server or role default
  is ``off`` or ``local``. Whether a commit survives a power loss is finally the server's
  business (its ``fsync``, ``full_page_writes`` and disk cache settings, replication); opening
  an ``fsync`` store on a server with ``fsync = off`` logs a warning.
* **Errors** are translated in one place (:meth:`PostgresStore._run`): a server that cannot
  be reached is :class:`~agentsession.errors.StoreUnavailable` naming host and database, never
  the password (psycopg_pool's own per-attempt "error connecting" warnings about the store's
  pools are logged at DEBUG instead, by this module's logger). A read whose connection drops
  is retried once on a fresh connection. A write whose connection drops raises
  :class:`~agentsession.errors.OutcomeUnknown` here; the append pipeline
  (:meth:`BaseSession._append_checked <agentsession.session.BaseSession._append_checked>`)
  then reads the log for the batch's event ids and appends it again only if it is not there,
  within ``reconnect_timeout``.
* **Opening a store** connects once: the connection that checks the schema version (and
  gives a precise error when the server cannot be reached) becomes the pool's first
  connection. The lock pool opens when the first turn lock is taken.
* **Pooled connections are checked when handed out**, through psycopg_pool's ``check`` hook
  (a poll of the socket, no round trip), so a statement, and above all a write, does not go to
  a connection the server already closed (a restart, an administrator's
  ``pg_terminate_backend``, ``idle_session_timeout``). A connection that fails the check is
  replaced, and the pool's other idle connections, probably closed by the same event, are
  replaced too (``drain``) instead of being checked, and backed off from, one by one.
* **The async API** (:mod:`agentsession.aio`) appends and reads natively on psycopg's
  ``AsyncConnectionPool`` (:mod:`agentsession.backends.postgres.aio`), with the statements,
  parameters, life check and row decoding of this module (``_append_next``,
  ``_append_request``, ``_adopt_append``, ``_take_refresh``: what the sync primitives use).
* **The turn lock** is a session-level advisory lock on a 64-bit key derived from the schema
  and the session id, held on a connection of a separate lock pool that is not handed back
  until the lock is released; a holder that dies (SIGKILL, lost network) loses its connection
  and with it the lock. Waiting is the server's job: ``pg_advisory_lock`` under a
  ``lock_timeout`` set for that one statement, so a waiter gets the lock as soon as it is
  released, with no polling (timeout 0 is one ``pg_try_advisory_lock``). See
  :class:`PostgresLocker`.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as _dt
import hashlib
import logging
import math
import os
import re
import select
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast
from urllib.parse import unquote, urlsplit, urlunsplit

import msgspec
import psycopg
import psycopg_pool
from psycopg.conninfo import conninfo_to_dict

if TYPE_CHECKING:
    import concurrent.futures

    from typing_extensions import Self

    from ...aio._backend import AsyncBackend
    from .aio import PostgresLog

from ...codec import decode, encode
from ...contract import SessionInfo
from ...errors import (
    CorruptLogError,
    LockTimeout,
    OutcomeUnknown,
    StorageError,
    StoreUnavailable,
    UsageError,
)
from ...events import Event, decode_event, encode_event
from ...session import BaseSession, reconnect_pauses
from ...store import BaseStore
from .schema import (
    LATEST_VERSION,
    READABLE_AS_IT_IS,
    TAIL_EVENTS,
    Statements,
    apply_migrations,
    schema_version,
)

__all__ = [
    "DEFAULT_SCHEMA",
    "PostgresLocker",
    "PostgresSession",
    "PostgresStore",
    "migrate",
    "open_postgres",
    "turn_lock_key",
]

# The package's one logger, under the name users configure (the package, not this module).
log = logging.getLogger("agentsession.backends.postgres")
_T = TypeVar("_T")
_Row = tuple[Any, ...]
_AsyncPool = psycopg_pool.AsyncConnectionPool[psycopg.AsyncConnection[_Row]]

DEFAULT_SCHEMA = "agentsession"
"""The schema a store uses when neither the URL's ``?schema=`` nor the option names one."""

_POOL_NAME_PREFIXES = ("agentsession/", "agentsession-lock/", "agentsession-async/")
"""How the store's pools are named (then the schema): ``name`` and ``application_name``. The
third is the async API's pool (:mod:`agentsession.backends.postgres.aio`)."""


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

_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}\Z")


# -- connections ------------------------------------------------------------------------------


class _Handoff:
    """The connection a store opened to check its schema, waiting to become its pool's first
    connection (so that opening a store connects once)."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._conn: _Conn | None = None

    def put(self, conn: _Conn) -> None:
        with self._mutex:
            self._conn = conn

    def take(self) -> _Conn | None:
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


# -- values -----------------------------------------------------------------------------------


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
        if meta is None:
            add(
                Event(
                    seq=row[0],
                    type=row[1],
                    agent=row[2],
                    user=row[3],
                    time=row[4],
                    data=_Raw(data),
                    id=row[8] or "",
                )
            )
        else:
            add(
                Event(
                    seq=row[0],
                    type=row[1],
                    agent=row[2],
                    user=row[3],
                    time=row[4],
                    data=_Raw(data),
                    meta=decode(meta),
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


# -- URLs and messages ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Target:
    """What a URL names: the DSN for psycopg, the schema, and how to describe it safely."""

    url: str
    """What reopens the store (the given URL, with ``schema=`` when it came as an option)."""
    conninfo: str
    """The URL without agentsession's own query parameters."""
    schema: str
    host: str
    port: str
    dbname: str
    user: str
    secrets: tuple[str, ...] = field(default=())

    @classmethod
    def parse(cls, url: str, schema: str | None) -> _Target:
        if not isinstance(url, str):
            raise UsageError(f"a PostgreSQL URL must be a string, not {type(url).__name__}")
        parts = urlsplit(url)
        if parts.scheme.lower() not in ("postgresql", "postgres"):
            raise UsageError(f"not a PostgreSQL URL (postgresql://user@host/db): {url!r}")
        kept: list[str] = []
        url_schema: str | None = None
        for item in parts.query.split("&") if parts.query else []:
            name, _, value = item.partition("=")
            if name == "schema":
                url_schema = unquote(value)
            else:
                kept.append(item)
        if schema is not None and url_schema is not None and schema != url_schema:
            raise UsageError(
                f"the URL names schema {url_schema!r} but the schema option says {schema!r}"
            )
        chosen = schema if schema is not None else url_schema
        if chosen is not None and not _SCHEMA_NAME.match(chosen):
            raise UsageError(
                f"schema name {chosen!r} must be 1-63 letters, digits or underscores, "
                "not starting with a digit"
            )
        conninfo = urlunsplit(parts._replace(query="&".join(kept)))
        try:
            params = conninfo_to_dict(conninfo)
        except psycopg.Error as exc:
            raise UsageError(f"invalid PostgreSQL URL: {_scrub(str(exc), _secrets(url))}") from None
        password = str(params.get("password") or "")
        secrets = tuple(s for s in {password, *_secrets(url)} if s)
        if schema is not None and url_schema is None:
            query = "&".join([*kept, f"schema={schema}"])
            url = urlunsplit(parts._replace(query=query))
        return cls(
            url=url,
            conninfo=conninfo,
            schema=chosen or DEFAULT_SCHEMA,
            host=str(params.get("host") or params.get("hostaddr") or "localhost"),
            port=str(params.get("port") or "5432"),
            dbname=str(params.get("dbname") or params.get("user") or "(default)"),
            user=str(params.get("user") or ""),
            secrets=secrets,
        )

    @property
    def where(self) -> str:
        """Host, port and database for messages (never the password)."""
        return f"PostgreSQL at {self.host}:{self.port}, database {self.dbname!r}"

    @property
    def location(self) -> str:
        """A password-free URL for people."""
        user = f"{self.user}@" if self.user else ""
        return f"postgresql://{user}{self.host}:{self.port}/{self.dbname}?schema={self.schema}"

    def scrub(self, message: str) -> str:
        """``message`` with any secret of the URL masked."""
        return _scrub(message, self.secrets)


def _secrets(url: str) -> tuple[str, ...]:
    """The password part of a URL's netloc, raw and as given (before percent-decoding)."""
    netloc = urlsplit(url).netloc if "://" in url else ""
    userinfo, at, _ = netloc.rpartition("@")
    if not at:
        return ()
    _, colon, password = userinfo.partition(":")
    return (password,) if colon and password else ()


def _scrub(message: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret:
            message = message.replace(secret, "***")
    return message


# -- the session ------------------------------------------------------------------------------


class PostgresSession(BaseSession):
    """A session stored as rows of ``<schema>.events`` (see the module docstring)."""

    _store: PostgresStore

    def __init__(self, store: PostgresStore, session_id: str) -> None:
        super().__init__(store, session_id)
        self._stale = False  # set when catching up failed: reload before the next use
        self._life: int | None = None  # sessions.life of the life this object read
        # Set by the async API (postgres_aio), under the session lock, while it runs a read
        # whose catch-up it did natively just before: the refresh is not done twice.
        self._refresh_done = False
        with self._lock:
            self._load()

    @property
    def location(self) -> str:
        """The store's password-free URL and the session id."""
        return f"{self._store.location} session {self._id!r}"

    def _storage_open_tail(self) -> tuple[list[Event], bool]:
        """The latest ``TAIL_EVENTS`` events and the life, by key range, in one round trip."""
        self._stale = False
        rows = self._store._fetch(
            f"opening session {self._id!r}", self._store._sql.open_tail, (self._id, TAIL_EVENTS)
        )
        return self._opened(rows, 9)

    def _storage_open(self) -> tuple[list[Event], bool]:
        """The full window: from ``sessions.compaction_seq`` to the end, and the life."""
        self._stale = False
        statement = self._store._sql.open
        rows = self._store._fetch(f"opening session {self._id!r}", statement, (self._id,))
        return self._opened(rows, 10)

    def _opened(self, rows: list[_Row], life_column: int) -> tuple[list[Event], bool]:
        if not rows:
            self._life = None
            return [], True
        self._life = int(rows[0][life_column])
        if rows[0][0] is None:  # a session row without events (archived)
            return [], True
        events = _events_of(rows, self._id)
        return events, events[0].seq <= 1

    def _storage_refresh(self) -> list[Event]:
        if self._refresh_done:
            return []  # the async API caught up natively just before, under this lock hold
        if self._stale:
            self._load()
            return []
        after = self._latest_seq
        rows = self._store._fetch(
            f"reading session {self._id!r}", self._store._sql.refresh, (self._id, after)
        )
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
        rows = self._store._fetch(
            f"reading session {self._id!r}", self._store._sql.read, (self._id, after, limit)
        )
        return _events_of(rows, self._id)

    def _append_next(
        self, event: Event, marker: bool
    ) -> tuple[bytes, tuple[Any, ...], int] | None:
        """The fast path's statement, its parameters and the seq it stores ``event`` at
        (``latest_seq + 1``); None when this object knows no row yet or must reload."""
        life = self._life
        if life is None or self._stale:
            return None
        seq = self._latest_seq + 1
        params = _append_next_params(self._id, event, seq, marker, life)
        return self._store._sql.append_next, params, seq

    def _append_request(
        self, events: list[Event], marker: int, expect_seq: int | None
    ) -> tuple[bytes, Any, bool]:
        """The general path's statement and parameters for ``events``, and whether it runs on
        a raw (``$n``) cursor. Its one row is ``base, life`` (no row: ``expect_seq`` did not
        match); a conditional append holds only within the life it was planned in."""
        life = self._life if expect_seq else None
        sql = self._store._sql
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

    def _refreshed(self, rows: list[_Row]) -> tuple[int, int, list[Event]] | None:
        """The ``refresh`` statement's rows: latest seq, life and events (None: no row)."""
        return _refreshed(rows, self._id)

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
        stored = self._store._run(action, append, write=unknown)
        return _replace(event, seq=seq) if stored == 1 else None

    def _storage_append(
        self, events: list[Event], marker: int, expect_seq: int | None
    ) -> tuple[list[Event], list[Event]]:
        store = self._store
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
        base, life = store._run(action, append, write=unknown)
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
        pauses = reconnect_pauses(self._store._reconnect_timeout)
        while True:
            try:
                return self._read_range(after, base)
            except StoreUnavailable as exc:
                pause = next(pauses, None)
                if pause is None:
                    raise self._catch_up_failed(base, count, exc) from exc
                time.sleep(pause)
            except StorageError as exc:
                raise self._catch_up_failed(base, count, exc) from exc

    def _read_range(self, after: int, upto: int) -> list[Event]:
        rows = self._store._fetch(
            f"reading session {self._id!r}", self._store._sql.read_range, (self._id, after, upto)
        )
        return _events_of(rows, self._id)


# -- the turn lock ----------------------------------------------------------------------------


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

    def __init__(self, store: PostgresStore) -> None:
        self._store = store

    def acquire(self, session_id: str, timeout: float | None) -> object:
        """Take the turn lock of ``session_id``, waiting at most ``timeout`` seconds (None: for
        ever, 0: not at all); returns the handle :meth:`release` takes. Raises
        :class:`~agentsession.errors.LockTimeout` when the time runs out."""
        store = self._store
        key = turn_lock_key(store.schema, session_id)
        conn = store._checkout(store._lock_pool, "taking a turn lock")
        try:
            taken = _take_advisory_lock(conn, key, timeout)
        except psycopg.Error as exc:
            store._lock_pool.putconn(conn)
            raise store._failure(exc, f"taking the turn lock of session {session_id!r}") from None
        except BaseException:
            store._lock_pool.putconn(conn)  # the reset hook drops a lock granted meanwhile
            raise
        if not taken:
            store._lock_pool.putconn(conn)
            raise LockTimeout(session_id, timeout or 0.0)
        handle = _LockHandle(session_id, key, conn)
        store._track_lock(handle, held=True)
        return handle

    def release(self, handle: object) -> None:
        """Unlock and hand the lock's connection back to the pool (closing it, which drops the
        lock too, when unlocking fails)."""
        assert isinstance(handle, _LockHandle)
        store = self._store
        store._track_lock(handle, held=False)
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
            store._lock_pool.putconn(conn)
        except psycopg_pool.PoolClosed:
            conn.close()

    def alive(self, handle: object) -> bool:
        """Whether the connection holding ``handle``'s lock is still open on the server's side
        (a poll of its socket, no round trip): a lock whose connection the server ended is
        lost (see :attr:`TurnLock.held <agentsession.locks.TurnLock.held>`)."""
        assert isinstance(handle, _LockHandle)
        return not _closed_by_server(handle.conn)

    def is_locked(self, session_id: str) -> bool:
        """Whether any client of the database holds the session's turn lock (``pg_locks``)."""
        key = turn_lock_key(self._store.schema, session_id)
        high, low = (key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF
        row = self._store._run(
            f"checking the turn lock of session {session_id!r}",
            lambda conn: conn.execute(_IS_LOCKED, (high, low)).fetchone(),
        )
        return bool(row and row[0])


# -- the store --------------------------------------------------------------------------------


_inherited: list[object] = []  # a forked child's copies of its parent's pools: never used


class PostgresStore(BaseStore):
    """Sessions in a PostgreSQL schema. Opened by ``open_store("postgresql://...")``.

    Options besides the common ones (``durability``, ``ttl``, ...):

    * ``schema``: the schema holding the tables (default ``agentsession``; also ``?schema=``
      in the URL). Created, with the tables, on open.
    * ``pool_min_size`` / ``pool_max_size`` (default 1 / 10): connections kept open / at most
      open for reads and appends. An append or read holds one only for its statement(s).
      Opening the store waits until ``pool_min_size`` are open; the first is the connection
      that checked the schema.
    * ``lock_pool_max_size`` (default 64): connections at most held for turn locks, one per
      held lock; opened on demand, closed after 10 idle minutes.
    * ``pool_timeout`` (default 30 s): how long to wait for a free connection.
    * ``connect_timeout`` (default 10 s): how long to wait for the server when connecting
      (unless the URL sets it).
    * ``auto_migrate`` (default True): apply missing migrations on open; when False, a schema
      that is not current raises :class:`~agentsession.errors.StorageError` (run
      :func:`migrate` first).
    * ``read_only`` (default False): open to read, running no DDL at all: nothing is created
      or migrated (a missing schema is "no store at ..."). A version 3 schema is read as it
      is (its events have no ids); any other older version raises
      :class:`~agentsession.errors.StoreUnavailable` saying to run ``agentsession migrate``.
      Writes are not meant for such a store (on an old schema they fail).
    * ``prepare_threshold`` (default 5): executions after which psycopg prepares a statement
      on the server; None disables prepared statements (PgBouncer in transaction mode before
      1.21). Turn locks need a session-level connection: never transaction pooling.
    * ``reconnect_timeout`` (default 10 s): how long an append rides out a lost connection or
      a server that cannot be reached (a restart, a failover, ``pg_terminate_backend``): it
      tries again with a growing pause, first reading the log to find out whether the lost
      try was stored (by its event ids), so it is stored once. After that long it raises
      :class:`~agentsession.errors.OutcomeUnknown` (or
      :class:`~agentsession.errors.StoreUnavailable`); 0 raises at once.

    ``url`` includes the URL's password when it had one (it must reopen the store); prefer a
    ``.pgpass`` file or ``PGPASSWORD``. Messages and ``location`` never include it.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        pool_min_size: int = 1,
        pool_max_size: int = 10,
        lock_pool_max_size: int = 64,
        pool_timeout: float = 30.0,
        connect_timeout: int = 10,
        auto_migrate: bool = True,
        prepare_threshold: int | None = 5,
        reconnect_timeout: float = 10.0,
        create: bool = True,
        read_only: bool = False,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        if not isinstance(reconnect_timeout, (int, float)) or not reconnect_timeout >= 0:
            raise UsageError(f"reconnect_timeout must be >= 0 seconds, not {reconnect_timeout!r}")
        self._reconnect_timeout = float(reconnect_timeout)
        if pool_min_size < 0 or pool_max_size < 1 or pool_min_size > pool_max_size:
            raise UsageError(
                f"pool sizes must satisfy 0 <= pool_min_size <= pool_max_size and "
                f"pool_max_size >= 1 (got {pool_min_size} and {pool_max_size})"
            )
        if lock_pool_max_size < 1:
            raise UsageError(f"lock_pool_max_size must be >= 1, not {lock_pool_max_size}")
        if pool_timeout <= 0:
            raise UsageError(f"pool_timeout must be positive, not {pool_timeout}")
        self._target = _Target.parse(url, schema)
        self._pool_timeout = pool_timeout
        self._pool_max_size = pool_max_size
        self._reopen = False  # set in a forked child: open this process's pools on first use
        self._sql = Statements.for_schema(self._target.schema)
        self._held: set[_LockHandle] = set()
        self._held_mutex = threading.Lock()
        params = conninfo_to_dict(self._target.conninfo)
        self._connect_kwargs: dict[str, Any] = {
            "autocommit": True,
            "prepare_threshold": prepare_threshold,
        }
        if "connect_timeout" not in params:
            self._connect_kwargs["connect_timeout"] = connect_timeout
        app = "application_name" not in params
        setup = "SET TimeZone TO 'UTC'"
        if self.durability == "fsync":
            setup += "; SET synchronous_commit TO on"
        self._setup = setup.encode()

        self._pool_min_size = pool_min_size
        self._lock_pool_max_size = lock_pool_max_size
        self._app_name = app
        self._connections: weakref.WeakSet[_Conn] = weakref.WeakSet()
        self._handoff = _Handoff()
        self._lock_pool_open = False  # the lock pool opens with the first turn lock
        self._pool, self._lock_pool = self._make_pools()
        # One connection, made directly (for the precise error when the server cannot be
        # reached), checks the schema and then becomes the pool's first connection.
        try:
            if read_only:
                conn = self._check_schema_for_reading()
            else:
                conn = self._prepare_schema(auto_migrate, create)
        except BaseException:
            self._pool.close()  # not open yet, unless something opened it early
            raise
        self._handoff.put(conn)
        # With pool_min_size >= 1, wait until the pool holds its connections (the first is
        # that one): a request arriving sooner would make the pool grow by another.
        try:
            self._pool.open(wait=pool_min_size > 0, timeout=pool_timeout)
        except psycopg_pool.PoolTimeout:
            self._close()
            raise self._pool_timeout_error(self._pool, "opening the store") from None

    @property
    def _pool_name(self) -> str:
        return f"{_POOL_NAME_PREFIXES[0]}{self._target.schema}"

    def _pool_kwargs(self) -> dict[str, Any]:
        """How the query pool's connections are made (the first one by the store itself)."""
        return {
            **self._connect_kwargs,
            **({"application_name": self._pool_name} if self._app_name else {}),
        }

    def _make_pools(
        self,
    ) -> tuple[psycopg_pool.ConnectionPool[_Conn], psycopg_pool.ConnectionPool[_Conn]]:
        """The store's two pools, not yet open: statements, and turn locks."""
        pool: psycopg_pool.ConnectionPool[_Conn] = psycopg_pool.ConnectionPool(
            self._target.conninfo,
            connection_class=_Conn,
            kwargs={**self._pool_kwargs(), "handoff": self._handoff},
            min_size=self._pool_min_size,
            max_size=self._pool_max_size,
            timeout=self._pool_timeout,
            configure=self._configure,
            check=lambda conn: _check_or_drain(pool, conn),
            name=self._pool_name,
            open=False,
        )
        lock_name = f"{_POOL_NAME_PREFIXES[1]}{self._target.schema}"
        lock_pool: psycopg_pool.ConnectionPool[_Conn] = psycopg_pool.ConnectionPool(
            self._target.conninfo,
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
            timeout=self._pool_timeout,
            configure=self._configure_lock,
            check=lambda conn: _check_or_drain(lock_pool, conn),
            reset=_unlock_all,
            name=lock_name,
            open=False,
        )
        return pool, lock_pool

    def _make_async_pool(self) -> _AsyncPool:
        """The async API's pool (:mod:`~agentsession.backends.postgres.aio`), not yet open:
        the query pool's server, settings (``TimeZone``, ``synchronous_commit`` at ``fsync``),
        sizes, timeout and hand-out check, with connections of its own. It opens on the event
        loop that first uses it and closes with the async store."""
        name = f"{_POOL_NAME_PREFIXES[2]}{self._target.schema}"
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
            self._target.conninfo,
            connection_class=psycopg.AsyncConnection,
            kwargs={
                **self._connect_kwargs,
                **({"application_name": name} if self._app_name else {}),
            },
            min_size=self._pool_min_size,
            max_size=self._pool_max_size,
            timeout=self._pool_timeout,
            configure=configure,
            check=check,
            name=name,
            open=False,
        )
        return pool

    def _async_backend(self, executor: concurrent.futures.Executor) -> AsyncBackend:
        """The async API's backend for this store: appends, reads, ``latest_seq`` and the
        catch-up of ``messages()`` run natively on psycopg's ``AsyncConnectionPool``, the rest
        in worker threads (see :mod:`agentsession.backends.postgres.aio`)."""
        from .aio import PostgresAsyncBackend

        return PostgresAsyncBackend(self, executor, self)

    def _native_session(self, session: BaseSession) -> PostgresLog | None:
        """``session`` as the async API's native path sees it, when it is one of this store's
        PostgreSQL sessions (None otherwise, and for a subclass's, which may store differently:
        those run in worker threads)."""
        if type(session) is PostgresSession and session._store is self:
            return session
        return None

    def _after_fork(self) -> None:
        """In a forked child: never touch the parent's connections again, and use pools of
        this process's own (opened when first needed).

        The inherited connections share their sockets with the parent's. Their sockets are
        pointed at ``/dev/null`` in this process (the parent's are untouched), so nothing
        this process does with them, not even a finalizer saying goodbye to the server, can
        reach the parent's sessions; the inherited pools are kept, unused, for ever.
        """
        super()._after_fork()
        devnull = os.open(os.devnull, os.O_RDWR)
        try:
            for conn in list(self._connections):
                with contextlib.suppress(OSError, ValueError, psycopg.Error):
                    os.dup2(devnull, conn.pgconn.socket)
        finally:
            os.close(devnull)
        _inherited.append((self._pool, self._lock_pool, self._handoff))
        self._held = set()
        self._held_mutex = threading.Lock()
        self._connections = weakref.WeakSet()
        self._handoff = _Handoff()
        self._lock_pool_open = False
        self._pool, self._lock_pool = self._make_pools()
        self._reopen = True

    # -- connections and the one translation point ----------------------------------------

    def _prepare_schema(self, auto_migrate: bool, create: bool = True) -> _Conn:
        """Connect directly (for a precise error when the server is unreachable), check the
        schema version (one query when it is current) and migrate when allowed; returns the
        connection, for the pool."""
        conn = self._connect(self._pool_kwargs())
        try:
            if self.durability == "fsync":
                row = conn.execute("SHOW fsync").fetchone()
                if row is not None and row[0] != "on":
                    log.warning(
                        "%s runs with fsync = %s: durability='fsync' cannot survive a power "
                        "loss there",
                        self._target.where,
                        row[0],
                    )
            version = _current_version(conn, self._target.schema)
            if not create and version == 0:
                raise StoreUnavailable(
                    f"no store at {self._target.where}: schema {self._target.schema!r} holds no "
                    "agentsession tables"
                )
            if version != LATEST_VERSION:
                if auto_migrate or version > LATEST_VERSION:
                    _migrate_on(conn, self._target)
                else:
                    raise StorageError(
                        f"schema {self._target.schema!r} in {self._target.where} is not at "
                        f"version {LATEST_VERSION} (it is at version {version}): run "
                        "agentsession.backends.postgres.migrate() first, or open the store with "
                        "auto_migrate=True"
                    )
        except psycopg.Error as exc:
            conn.close()
            raise self._failure(exc, f"preparing schema {self._target.schema!r}") from None
        except BaseException:
            conn.close()
            raise
        return conn

    def _check_schema_for_reading(self) -> _Conn:
        """``read_only``: connect and check the schema version, creating and migrating
        nothing. The current version is read as usual, version 3 as it is (with no event
        ids); a missing store or any other version raises :class:`StoreUnavailable`."""
        conn = self._connect(self._pool_kwargs())
        try:
            version = _current_version(conn, self._target.schema)
        except psycopg.Error as exc:
            conn.close()
            raise self._failure(exc, f"reading schema {self._target.schema!r}") from None
        except BaseException:
            conn.close()
            raise
        problem = None
        if version == 0:
            problem = (
                f"no store at {self._target.where}: schema {self._target.schema!r} holds no "
                "agentsession tables"
            )
        elif version > LATEST_VERSION:
            problem = (
                f"schema {self._target.schema!r} in {self._target.where} has schema version "
                f"{version}, newer than this agentsession supports ({LATEST_VERSION}): upgrade "
                "agentsession"
            )
        elif version < READABLE_AS_IT_IS:
            problem = (
                f"schema {self._target.schema!r} in {self._target.where}: schema version "
                f"{version} is older than {LATEST_VERSION}; run `agentsession migrate`"
            )
        if problem is not None:
            conn.close()
            raise StoreUnavailable(problem)
        if version < LATEST_VERSION:
            self._sql = Statements.for_schema(self._target.schema, event_ids=False)
        return conn

    def _connect(self, kwargs: dict[str, Any] | None = None) -> _Conn:
        try:
            conn = _Conn.connect(self._target.conninfo, **(kwargs or self._connect_kwargs))
        except psycopg.Error as exc:
            raise self._unavailable(str(exc)) from None
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

    def _unavailable(self, reason: str) -> StoreUnavailable:
        reason = self._target.scrub(reason.strip()).replace("\n", " ").replace("\t", "")
        return StoreUnavailable(f"cannot reach {self._target.where}: {reason}")

    def _failure(self, exc: psycopg.Error, action: str, write: str = "") -> StorageError:
        """The agentsession error for a driver error raised while ``action`` ran."""
        message = self._target.scrub(str(exc).strip().splitlines()[0] if str(exc) else "")
        if isinstance(exc, psycopg.errors.UndefinedTable):
            return StorageError(
                f"{action} failed: the store's tables are missing from schema "
                f"{self._target.schema!r} in {self._target.where} (dropped?): {message}"
            )
        if write:
            return OutcomeUnknown(
                f"{action} failed: the connection to {self._target.where} was lost before the "
                f"server answered, so the outcome is unknown: {write} ({message})"
            )
        if isinstance(exc, psycopg.OperationalError):
            return self._unavailable(f"{action} failed: {message}")
        return StorageError(f"{action} failed in {self._target.where}: {message}")

    def _checkout(self, pool: psycopg_pool.ConnectionPool[_Conn], action: str) -> _Conn:
        """A connection from ``pool``, checked by the pool (see :func:`_check_or_drain`)."""
        if self._reopen:
            self._open_pools_after_fork()
        if pool is self._lock_pool and not self._lock_pool_open:
            self._open_lock_pool()
        try:
            return pool.getconn(timeout=self._pool_timeout)
        except psycopg_pool.PoolClosed:
            raise UsageError(f"store {self.location} is closed") from None
        except psycopg_pool.PoolTimeout:
            raise self._pool_timeout_error(pool, action) from None

    def _open_pools_after_fork(self) -> None:
        with self._held_mutex:
            if self._reopen and not self._closed:
                self._pool.open(wait=False)
                self._reopen = False

    def _open_lock_pool(self) -> None:
        with self._held_mutex:
            if not self._lock_pool_open and not self._closed:
                self._lock_pool.open(wait=False)
                self._lock_pool_open = True

    def _pool_timeout_error(
        self,
        pool: psycopg_pool.ConnectionPool[Any] | psycopg_pool.AsyncConnectionPool[Any],
        action: str,
    ) -> StoreUnavailable:
        """Tell a server that cannot be reached from a pool whose connections are all busy."""
        try:
            self._connect().close()
        except StoreUnavailable as exc:
            return exc
        return StoreUnavailable(
            f"{action}: no free connection to {self._target.where} within {self._pool_timeout:g}"
            f" s: all {pool.max_size} connections of pool {pool.name!r} are in use (raise "
            "pool_max_size or lock_pool_max_size, or check the server's max_connections)"
        )

    def _run(self, action: str, op: Callable[[_Conn], _T], *, write: str = "") -> _T:
        """Run ``op`` on a pooled connection, translating every driver error.

        A read (``write`` empty) whose connection drops is retried once on a fresh connection.
        A write is never retried; if its connection drops, ``write`` says what may or may not
        have happened. A server-reported error leaves the connection usable and means the
        statement (a whole transaction) did not take effect.
        """
        attempts = 1 if write else 2
        for attempt in range(attempts):
            conn = self._checkout(self._pool, action)
            try:
                result = op(conn)
            except psycopg.Error as exc:
                lost = conn.closed or conn.broken
                self._pool.putconn(conn)
                if lost and attempt + 1 < attempts:
                    log.info("%s: connection lost (%s); retrying once", action, exc)
                    continue
                raise self._failure(exc, action, write if lost else "") from None
            except BaseException:
                self._pool.putconn(conn)
                raise
            self._pool.putconn(conn)
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    def _fetch(self, action: str, statement: bytes, params: Sequence[Any]) -> builtins.list[_Row]:
        """The rows of a session's read statement (``$n`` placeholders), in binary: the stored
        bytes and integers as they are, with no text to parse on either side."""
        return self._run(
            action,
            lambda conn: psycopg.RawCursor(conn).execute(statement, params, binary=True).fetchall(),
        )

    def _track_lock(self, handle: _LockHandle, *, held: bool) -> None:
        with self._held_mutex:
            if held:
                self._held.add(handle)
            else:
                self._held.discard(handle)

    # -- identity ---------------------------------------------------------------------------

    @property
    def schema(self) -> str:
        """The schema holding this store's tables."""
        return self._target.schema

    @property
    def location(self) -> str:
        """``postgresql://user@host:port/db?schema=...``, without the password."""
        return self._target.location

    @property
    def url(self) -> str:
        """The URL that reopens this store, with its schema (and password, if it had one)."""
        return self._target.url

    def _check_text(self, what: str, value: str) -> str:
        if not _fits_text(value):
            raise UsageError(
                f"{what} {value!r} cannot be stored in PostgreSQL: TEXT holds neither NUL nor "
                "lone surrogates"
            )
        return value

    # -- BaseStore primitives ---------------------------------------------------------------

    def _open_session(self, session_id: str) -> PostgresSession:
        return PostgresSession(self, self._check_text("session id", session_id))

    def _make_locker(self) -> PostgresLocker:
        return PostgresLocker(self)

    def _exists(self, session_id: str) -> bool:
        if not _fits_text(session_id):
            return False
        statement = self._sql.exists
        row = self._run(
            f"checking session {session_id!r}",
            lambda conn: conn.execute(statement, (session_id,)).fetchone(),
        )
        return row is not None

    def _list_all(self) -> builtins.list[SessionInfo]:
        statement = self._sql.list_all
        rows = self._run("listing sessions", lambda conn: conn.execute(statement).fetchall())
        return [SessionInfo(id=r[0], updated_at=r[1], last_seq=r[2], created_at=r[3]) for r in rows]

    def list(
        self, prefix: str | None = None, limit: int | None = None, offset: int = 0
    ) -> builtins.list[SessionInfo]:
        """Sessions whose id starts with ``prefix``, most recently appended first (one query
        on the ``updated_at`` index)."""
        self._check_open()
        if limit is not None and limit < 0:
            raise UsageError("list(limit=...) must be >= 0 or None")
        if offset < 0:
            raise UsageError("list(offset=...) must be >= 0")
        if prefix is not None and not _fits_text(prefix):
            return []
        statement = self._sql.list
        params = {"prefix": prefix, "limit": limit, "offset": offset}
        rows = self._run(
            "listing sessions", lambda conn: conn.execute(statement, params).fetchall()
        )
        return [SessionInfo(id=r[0], updated_at=r[1], last_seq=r[2], created_at=r[3]) for r in rows]

    def expired(self) -> builtins.list[str]:
        """Ids of the sessions whose last append is older than the TTL (one query)."""
        self._check_open()
        if self.ttl is None:
            return []
        cutoff = self.clock() - self.ttl
        statement = self._sql.expired
        rows = self._run(
            "listing expired sessions",
            lambda conn: conn.execute(statement, (cutoff,)).fetchall(),
        )
        return [r[0] for r in rows]

    def _delete(self, session_id: str, meta_kinds: Sequence[str]) -> bool:
        if not _fits_text(session_id):
            return False
        statements = self._sql

        def delete(conn: _Conn) -> bool:
            with conn.transaction():
                # Locking the session row first waits out any append in flight; the events
                # are deleted by a later statement, whose snapshot includes that append.
                row = conn.execute(statements.delete_session, (session_id,)).fetchone()
                conn.execute(statements.delete_events, (session_id,))
                conn.execute(statements.delete_meta_of, (list(meta_kinds), session_id))
            return row is not None

        return self._run(
            f"deleting session {session_id!r}",
            delete,
            write="the session may or may not have been deleted",
        )

    def _last_append(self, session_id: str) -> _dt.datetime | None:
        if not _fits_text(session_id):
            return None
        statement = self._sql.last_append
        row = self._run(
            f"reading session {session_id!r}",
            lambda conn: conn.execute(statement, (session_id,)).fetchone(),
        )
        return row[0] if row is not None else None

    def _meta_get(self, kind: str, key: str) -> str | None:
        self._check_text(f"{kind} key", key)
        statement = self._sql.meta_get
        row = self._run(
            f"reading {kind} {key!r}",
            lambda conn: conn.execute(statement, (kind, key)).fetchone(),
        )
        return row[0] if row is not None else None

    def _meta_list(self, kind: str | None = None) -> builtins.list[tuple[str, str, str]]:
        params: tuple[Any, ...] = ()
        if kind is None:
            statement = self._sql.meta_list
        else:
            self._check_text("meta kind", kind)
            statement, params = self._sql.meta_list_kind, (kind,)
        rows = self._run(
            "listing the meta entries",
            lambda conn: conn.execute(statement, params).fetchall(),
        )
        return sorted((str(k), str(key), str(v)) for k, key, v in rows)

    def _meta_set(self, kind: str, key: str, value: str | None) -> None:
        self._check_text(f"{kind} key", key)
        params: tuple[Any, ...]
        if value is None:
            statement, params = self._sql.meta_delete, (kind, key)
        else:
            self._check_text(f"{kind} value", value)
            statement, params = self._sql.meta_set, (kind, key, value, self.clock())
        self._run(
            f"writing {kind} {key!r}",
            lambda conn: conn.execute(statement, params),
            write=f"the {kind} value may or may not have been written",
        )

    def _meta_add(self, kind: str, key: str, value: str) -> str:
        self._check_text(f"{kind} key", key)
        self._check_text(f"{kind} value", value)
        statement = self._sql.meta_add
        params = {"kind": kind, "key": key, "value": value, "now": self.clock()}
        row = self._run(
            f"writing {kind} {key!r}",
            lambda conn: conn.execute(statement, params).fetchone(),
            write=f"the {kind} value may or may not have been written",
        )
        if row is None:  # deleted between the insert and the read: try again
            return self._meta_add(kind, key, value)
        return str(row[0])

    def _meta_cas(self, kind: str, key: str, expected: str | None, new: str | None) -> bool:
        self._check_text(f"{kind} key", key)
        if new == expected:  # nothing to write (both None: no entry): one read answers
            return self._meta_get(kind, key) == expected
        params: tuple[Any, ...]
        if new is None:
            assert expected is not None
            self._check_text(f"{kind} value", expected)
            statement, params = self._sql.meta_cas_delete, (kind, key, expected)
        elif expected is None:
            self._check_text(f"{kind} value", new)
            statement, params = self._sql.meta_cas_insert, (kind, key, new, self.clock())
        else:
            self._check_text(f"{kind} value", expected)
            self._check_text(f"{kind} value", new)
            statement = self._sql.meta_cas_update
            params = (new, self.clock(), kind, key, expected)
        rowcount = self._run(
            f"writing {kind} {key!r}",
            lambda conn: conn.execute(statement, params).rowcount,
            write=f"the {kind} value may or may not have been written",
        )
        return rowcount == 1

    def _close(self) -> None:
        with self._held_mutex:
            held, self._held = builtins.list(self._held), set()
        for handle in held:
            handle.conn.close()  # a closed store holds no locks
        self._lock_pool.close()
        self._pool.close()
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


def _current_version(conn: _Conn, schema: str) -> int:
    """The schema's version in one query (0: no agentsession tables there)."""
    try:
        return schema_version(conn, schema, assume_table=True)
    except psycopg.errors.UndefinedTable:
        return 0


def _migrate_on(conn: psycopg.Connection[Any], target: _Target) -> builtins.list[int]:
    try:
        applied = apply_migrations(conn, target.schema)
    except RuntimeError as exc:
        raise StorageError(f"{target.where}: {exc}") from None
    if applied:
        log.info(
            "%s: applied migrations %s to schema %r",
            target.where,
            applied,
            target.schema,
        )
    return applied


def migrate(url: str, schema: str | None = None, *, connect_timeout: int = 10) -> list[int]:
    """Create or upgrade a store's tables; returns the migration versions applied now (empty
    when the schema was current). Safe to run from several processes at once.

    ``schema`` defaults to the URL's ``?schema=`` or ``agentsession``. Raises
    :class:`~agentsession.errors.StoreUnavailable` when the server cannot be reached.
    """
    target = _Target.parse(url, schema)
    params = conninfo_to_dict(target.conninfo)
    kwargs: dict[str, Any] = {"autocommit": True}
    if "connect_timeout" not in params:
        kwargs["connect_timeout"] = connect_timeout
    try:
        conn = psycopg.connect(target.conninfo, **kwargs)
    except psycopg.Error as exc:
        reason = target.scrub(str(exc).strip()).replace("\n", " ").replace("\t", "")
        raise StoreUnavailable(f"cannot reach {target.where}: {reason}") from None
    try:
        return _migrate_on(conn, target)
    except psycopg.Error as exc:
        message = target.scrub(str(exc).strip().splitlines()[0] if str(exc) else "")
        raise StorageError(
            f"migrating schema {target.schema!r} in {target.where} failed: {message}"
        ) from None
    finally:
        conn.close()


def open_postgres(url: str, **options: Any) -> PostgresStore:
    """``open_store("postgresql://user@host/db?schema=...")``."""
    return PostgresStore(url, **options)
