"""The SQLite backend: one database file in WAL mode holding every session of a store.

Standard library ``sqlite3`` only. How it stays safe and fast:

* **Layout.** ``sessions.key`` is an ``AUTOINCREMENT`` integer, never reused. An event's row id
  ``events.key`` is ``(sessions.key << 32) | seq``, so one session's events are one contiguous
  range of one B-tree: an append adds a row at the end of its range (short rows stay in their
  page instead of spilling into overflow pages, as they would in a ``WITHOUT ROWID`` table), and
  no second index has to be written. ``session_id`` and ``seq`` are kept as readable columns.
* **Appends.** A single event from a writer that saw the session last is one autocommit
  ``INSERT ... SELECT ... WHERE EXISTS`` (its session key must still exist); the row id refuses
  a seq another writer took first. Anything else runs in one ``BEGIN IMMEDIATE`` transaction:
  read the session's row and last seq, catch up on other writers' events, insert the batch.
  The database's write lock orders every writer of every process, so seqs stay unique and
  gap-free and a batch is committed whole or not at all (a writer killed mid-batch leaves
  nothing behind).
* **Only the events table is written per append.** A session's last seq and last-append time
  are read from its newest row (one range seek), not stored in ``sessions``: rewriting that row
  and an index on it at every append doubled the pages each commit writes and roughly halved
  the append rate. The ``session_summary`` view shows them per session.
* **Delete and recreate** are told apart by the session key: a recreated session gets a new one,
  so a held session's log (:class:`SqliteLog`) whose key is gone answers ``REOPEN``, writing
  nothing, and the session starts over instead of mixing two lives of one id.
* **Opening** reads from ``sessions.compaction_seq`` (the latest compaction marker that rebuilds
  history on its own) to the end; older events are read by key range when asked for.
* **Durability.** ``flush`` is ``PRAGMA synchronous=NORMAL``: in WAL mode a commit is in the
  operating system before ``append`` returns, so it survives the process crashing or being
  killed, but a power loss or kernel crash may roll back the last transactions (the database
  stays consistent). ``fsync`` is ``synchronous=FULL``: the WAL is synced at every commit, so an
  acknowledged append survives a power loss too.
* **Connections.** One per thread (``threading.local``), closed with their thread or by
  :meth:`SqliteStore.close`; a forked child never touches its parent's connections. Writers of
  one process queue on a lock instead of SQLite's sleeping busy handler; other processes wait
  up to ``busy_timeout`` seconds for the write lock.
* **Files.** The database is created ``0600`` (SQLite gives its ``-wal`` and ``-shm`` files the
  database's mode), a missing directory ``0700``; turn locks are ``flock`` files in
  ``<database>.locks/``.
* **Read-only.** ``create=False`` on a database this process may not write (a read-only
  mount, another user's file or directory) opens it read-only (``mode=ro``; ``immutable=1``
  when the directory cannot hold the ``-wal`` and ``-shm`` files and they are not there), and
  never switches the journal mode or migrates: reads work, a write raises ``StorageError``.
  ``read_only=True`` (what the CLI's reading commands pass) switches and migrates nothing
  either, on a file this process could write.
  Either way a version 1 file is read as it is (``eid`` read as NULL); another out-of-date
  schema raises ``StoreUnavailable`` saying to run ``agentsession migrate``.
* **Schema versions** live in ``PRAGMA user_version`` (``PRAGMA application_id`` marks the file
  as ours); ``_MIGRATIONS[n]`` upgrades version ``n`` to ``n + 1`` inside one transaction.
* **Followers** learn of other connections' commits from ``PRAGMA data_version`` on a
  connection of their own, looked at every :data:`DATA_VERSION_INTERVAL` seconds; when it
  moves, the newest row of every session tells which sessions grew
  (:class:`DataVersionWatcher`).
* **Text.** ``data`` and ``meta`` are TEXT columns holding the codec's UTF-8 JSON bytes as they
  are (bound as bytes and cast, read back as bytes), so SQLite's JSON functions and the
  ``sqlite3`` shell read them; ``time`` is the codec's RFC 3339 form, as in JSONL lines.
  Strings holding lone surrogates are stored as their ``surrogatepass`` bytes.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as _dt
import functools
import logging
import os
import sqlite3
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Final
from urllib.parse import quote, unquote

import msgspec

from .. import indexing
from ..catalog import CatalogDefaults, StoreParts
from ..codec import decode, encode
from ..contract import Capabilities, SessionInfo
from ..errors import (
    ConflictError,
    CorruptLogError,
    EncryptionError,
    SessionError,
    SessionExpired,
    SessionShredded,
    StorageError,
    StoreUnavailable,
    UsageError,
)
from ..events import Event
from ..listing import OPEN, CatalogChange, Document
from ..locks import FileLocker
from ..session import BaseSession, SessionHost
from ..storage import REOPEN, LogView, Reopen
from ..store import BaseStore
from .sqlite_index import FreshRow, SqliteIndex, create_index_tables
from .sqlite_index import fetch_all as _fetchall
from .sqlite_index import surrogate_text as _surrogate_text

log = logging.getLogger(__name__)

__all__ = [
    "DATA_VERSION_IDLE_INTERVAL",
    "DATA_VERSION_INTERVAL",
    "DATA_VERSION_QUIET",
    "SCHEMA_VERSION",
    "DataVersionWatcher",
    "SqliteCatalog",
    "SqliteLog",
    "SqliteMeta",
    "SqliteStore",
    "migrate",
    "open_sqlite",
    "sqlite_path",
]

SCHEMA_VERSION = 6
"""The schema version this module writes (``PRAGMA user_version``): ``len(_MIGRATIONS)``."""

APPLICATION_ID = 0x41475353
"""``PRAGMA application_id`` of an agentsession database (``AGSS``)."""

LOCK_DIR_SUFFIX = ".locks"
_JOURNAL_SIZE_LIMIT = 64 << 20  # bytes a WAL file is cut back to after a checkpoint
_UTC = _dt.timezone.utc
_fromiso = _dt.datetime.fromisoformat
_replace = msgspec.structs.replace
_Raw = msgspec.Raw
_payload_list = msgspec.json.Decoder(list[msgspec.Raw])
_payload_one = msgspec.json.Decoder(msgspec.Raw)

# -- schema ------------------------------------------------------------------------------------

_SCHEMA_V1 = (
    """
    CREATE TABLE sessions (
        key            INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: one life of an id
        id             TEXT    NOT NULL UNIQUE,
        created_at     TEXT    NOT NULL,
        compaction_seq INTEGER NOT NULL DEFAULT 0,  -- latest marker that rebuilds history
        metadata       TEXT,
        CHECK (key BETWEEN 1 AND 2147483647)
    )
    """,
    """
    CREATE TABLE events (
        key        INTEGER PRIMARY KEY,  -- (sessions.key << 32) | seq
        session_id TEXT    NOT NULL,
        seq        INTEGER NOT NULL,
        type       TEXT    NOT NULL,
        agent      TEXT    NOT NULL DEFAULT '',
        user       TEXT    NOT NULL DEFAULT '',
        time       TEXT    NOT NULL,  -- RFC 3339
        data       TEXT    NOT NULL,  -- JSON
        meta       TEXT,              -- JSON object, or NULL when empty
        CHECK (seq BETWEEN 1 AND 4294967295 AND (key & 4294967295) = seq)
    )
    """,
    """
    CREATE TABLE meta (
        kind       TEXT NOT NULL,
        key        TEXT NOT NULL,
        value      TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (kind, key)
    ) WITHOUT ROWID
    """,
    """
    CREATE VIEW session_summary AS
    SELECT s.id AS id, s.key AS key, s.created_at AS created_at, e.time AS updated_at,
           e.seq AS last_seq, s.compaction_seq AS compaction_seq, s.metadata AS metadata
    FROM sessions AS s JOIN events AS e ON e.key = (
        SELECT max(key) FROM events WHERE key > (s.key << 32) AND key < ((s.key + 1) << 32))
    """,
)


def _create_v1(conn: sqlite3.Connection) -> None:
    for statement in _SCHEMA_V1:
        conn.execute(statement)


def _add_event_ids(conn: sqlite3.Connection) -> None:
    """Version 2 (revision 4): ``events.eid``, the event's id (NULL for events stored before)."""
    conn.execute("ALTER TABLE events ADD COLUMN eid TEXT")


CATALOG_FILL_KIND = "catalog"
"""The meta kind of the mark a migration leaves for the catalog to be filled from the logs
(key :data:`CATALOG_FILL_KEY`): kept until every session is indexed, so a store opened after
a crash mid-fill fills it again."""
CATALOG_FILL_KEY = "fill"


def _add_catalog(conn: sqlite3.Connection) -> None:
    """Version 3 (the catalog and search index, :mod:`agentsession.backends.sqlite_index`):
    its tables, empty, and the mark that has the store fill them from the logs when it opens
    (:meth:`SqliteStore.fill_catalog`; decoding events needs the store, and its key)."""
    create_index_tables(conn)
    conn.execute(
        "INSERT OR REPLACE INTO meta (kind, key, value, updated_at) "
        "SELECT ?, ?, 'pending', ? WHERE EXISTS (SELECT 1 FROM sessions)",
        (CATALOG_FILL_KIND, CATALOG_FILL_KEY, _utc_iso(_dt.datetime.now(_UTC))),
    )


CATALOG_DIRTY_DDL: Final = (
    "CREATE TABLE IF NOT EXISTS catalog_dirty (skey INTEGER PRIMARY KEY)",
    f"""
    CREATE TRIGGER IF NOT EXISTS catalog_dirty_mark AFTER INSERT ON events
    BEGIN
        INSERT OR IGNORE INTO catalog_dirty (skey) VALUES (new.key >> {32});
    END
    """,
)
"""Version 4: the sessions whose catalog row may be behind their log. Every insert into
``events`` marks its session (one probe of a small table; nothing written when it is marked
already); an append that hands the catalog its change clears the mark in its transaction, and
reading the catalog first catches up every marked session from its log
(:meth:`SqliteStore.catch_up_catalog`). Appends inside a turn leave the mark, so a turn costs
the catalog one write at its start and one at its end instead of one per event. Version 6
drops the trigger: the connections of a store that keeps the catalog mark instead
(:data:`MARKING_TRIGGERS`)."""


def _add_catalog_dirty(conn: sqlite3.Connection) -> None:
    """Version 4: :data:`CATALOG_DIRTY_DDL` (the catalog of a version 3 file is current)."""
    for statement in CATALOG_DIRTY_DDL:
        conn.execute(statement)


SEARCH_DIRTY_DDL: Final = (
    """
    CREATE TABLE IF NOT EXISTS catalog_search_dirty (
        skey  INTEGER PRIMARY KEY,  -- sessions.key of a session with documents to index
        after INTEGER NOT NULL      -- its documents are indexed up to this seq
    )
    """,
    f"""
    CREATE TRIGGER IF NOT EXISTS catalog_search_mark AFTER INSERT ON events
    BEGIN
        INSERT OR IGNORE INTO catalog_search_dirty (skey, after)
        VALUES (new.key >> {32}, new.seq - 1);
    END
    """,
)
"""Version 5: the sessions whose search documents are behind their log. The first event
inserted after a session's documents were indexed marks it with the seq before it (events
are inserted in seq order, so every later event of the session is after it; later inserts
find the mark and write nothing). Appends never index documents: a search first indexes those
of every marked session from its log and removes the mark, in batches of sessions per write
transaction (:meth:`SqliteStore.index_documents`); a store that cannot write the file matches
them in their events instead."""


def _add_search_dirty(conn: sqlite3.Connection) -> None:
    """Version 5: :data:`SEARCH_DIRTY_DDL`. A version 4 file's documents are current but for
    the sessions it marks in ``catalog_dirty`` (their documents went with their row's
    catch-up): those are marked from seq 0 (a row's last seq counts a branch's shared history,
    a mark does not; indexing a document again replaces it)."""
    for statement in SEARCH_DIRTY_DDL:
        conn.execute(statement)
    conn.execute(
        "INSERT OR IGNORE INTO catalog_search_dirty (skey, after) "
        "SELECT d.skey, 0 FROM catalog_dirty AS d JOIN sessions AS s ON s.key = d.skey"
    )


def _drop_insert_triggers(conn: sqlite3.Connection) -> None:
    """Version 6: the insert triggers of versions 4 and 5 go (every insert paid them, a store
    opened with ``catalog=False`` too); each connection of a store that keeps the catalog
    makes the same marks with triggers of its own (:data:`MARKING_TRIGGERS`). The marks in
    ``catalog_dirty`` and ``catalog_search_dirty`` stay as they are."""
    conn.execute("DROP TRIGGER IF EXISTS catalog_dirty_mark")
    conn.execute("DROP TRIGGER IF EXISTS catalog_search_mark")


MARKING_TRIGGERS: Final = (
    f"""
    CREATE TEMP TRIGGER IF NOT EXISTS agentsession_mark BEFORE INSERT ON main.events
    BEGIN
        SELECT RAISE(IGNORE)
        WHERE NOT EXISTS (SELECT 1 FROM main.sessions WHERE key = new.key >> {32});
        INSERT OR IGNORE INTO catalog_dirty (skey) VALUES (new.key >> {32});
        INSERT OR IGNORE INTO catalog_search_dirty (skey, after)
        VALUES (new.key >> {32}, new.seq - 1);
    END
    """,
)
"""What each connection of a store that keeps the catalog (and may write the file) creates
for itself (a ``TEMP`` trigger: the file holds none, so a store opened with ``catalog=False``
pays nothing): an event of a session whose row is gone is not inserted (the checked append's
condition: with a trigger on the table, an ``INSERT ... SELECT ... WHERE EXISTS`` would copy
its row through a temporary table first, so these connections insert with ``VALUES``), and
every other marks its session in ``catalog_dirty`` and ``catalog_search_dirty`` as the
triggers of versions 4 and 5 did (an insert that fails takes its marks back with it). A turn
so costs the catalog one write, at its end."""

_CLEAR_CURRENT_MARKS: Final = f"""
DELETE FROM catalog_dirty WHERE skey IN (
    SELECT d.skey FROM catalog_dirty AS d
    JOIN sessions AS s ON s.key = d.skey
    JOIN catalog AS c ON c.id = s.id
    WHERE c.last_seq = (SELECT max(e.key) FROM events AS e WHERE e.key > (s.key << {32})
                        AND e.key < ((s.key + 1) << {32})) - (s.key << {32})
    AND EXISTS (SELECT 1 FROM events AS f WHERE f.key = (s.key << {32}) + 1
                AND f.type != 'session/branch'))
"""
"""Version 6: remove the marks of sessions whose catalog row holds their log's last seq (an
append that hands the catalog its change leaves the mark). A branch (its first event a
``session/branch`` marker: its row's seqs count the shared history, its events' do not), or a
session whose first event is gone (archived), is left to the catch-up that reads its log."""

_MARKED_ROWS: Final = f"""
SELECT CAST(s.id AS BLOB), c.last_seq, c.status,
    (SELECT max(e.key) FROM events AS e WHERE e.key > (s.key << {32})
     AND e.key < ((s.key + 1) << {32})) - (s.key << {32}),
    EXISTS (SELECT 1 FROM events AS f WHERE f.key = (s.key << {32}) + 1
            AND f.type != 'session/branch')
FROM catalog_dirty AS d JOIN sessions AS s ON s.key = d.skey
LEFT JOIN catalog AS c ON c.id = s.id
"""
"""The sessions ``catalog_dirty`` marks: id, the seq its catalog row holds (NULL: none), the
row's status, its log's last seq, and whether its row's seqs are its log's (not a branch's,
not one whose first event is gone): what a store opened read-only catches up in memory
(:meth:`SqliteCatalog.rows_behind`)."""

DOCUMENTS_BATCH: Final = 64
"""Sessions whose documents :meth:`SqliteStore.index_documents` indexes per write
transaction."""
_MARKED_FOR_SEARCH: Final = (
    "SELECT skey FROM catalog_search_dirty WHERE skey > ? ORDER BY skey LIMIT 4096"
)

_MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [
    _create_v1,
    _add_event_ids,
    _add_catalog,
    _add_catalog_dirty,
    _add_search_dirty,
    _drop_insert_triggers,
]
"""``_MIGRATIONS[n]`` turns a version ``n`` database into version ``n + 1`` (0: empty file)."""

# -- statements --------------------------------------------------------------------------------
# Every bound id or free-form string goes through CAST(? AS TEXT): a plain str is unchanged,
# the surrogatepass bytes of a string UTF-8 cannot carry become TEXT with the same bytes.

_SEQ_BITS = 32
_MAX_SEQ = (1 << _SEQ_BITS) - 1
_COLUMNS = "seq, type, agent, user, time, CAST(data AS BLOB), CAST(meta AS BLOB), eid"
_NAMES = "key, session_id, seq, type, agent, user, time, data, meta, eid"
_VALUES = (
    "?1, CAST(?2 AS TEXT), ?3, CAST(?4 AS TEXT), CAST(?5 AS TEXT), CAST(?6 AS TEXT), "
    "CAST(?7 AS TEXT), CAST(?8 AS TEXT), CAST(?9 AS TEXT), ?10"
)
_INSERT = f"INSERT INTO events ({_NAMES}) VALUES ({_VALUES})"
_INSERT_IF_CURRENT = (
    f"INSERT INTO events ({_NAMES}) SELECT {_VALUES} "
    f"WHERE EXISTS (SELECT 1 FROM sessions WHERE key = ?1 >> {_SEQ_BITS})"
)
_EVENTS_SIZE = "SELECT coalesce(sum(length(data)), 0) FROM events WHERE key > ? AND key < ?"
"""The bytes of a key range's stored event data (an archive run's report)."""

_HEAD = (
    "SELECT s.key, s.compaction_seq, (SELECT max(e.key) FROM events AS e "
    f"WHERE e.key > (s.key << {_SEQ_BITS}) AND e.key < ((s.key + 1) << {_SEQ_BITS})) "
    "FROM sessions AS s WHERE s.id = CAST(? AS TEXT)"
)


def _row_statements(columns: str) -> tuple[str, str]:
    """The two event reads (a key range; a key range while the session's life is current)."""
    return (
        f"SELECT {columns} FROM events WHERE key > ? AND key < ? ORDER BY key LIMIT ?",
        f"SELECT {columns} FROM events WHERE key > ?1 AND key < ?2 "
        f"AND EXISTS (SELECT 1 FROM sessions WHERE key = ?1 >> {_SEQ_BITS}) ORDER BY key",
    )


_ROWS, _ROWS_IF_CURRENT = _row_statements(_COLUMNS)
# A version 1 database opened read-only is read as it is: its events have no ids.
_ROWS_V1, _ROWS_IF_CURRENT_V1 = _row_statements(_COLUMNS.replace("eid", "NULL"))
_CREATE_SESSION = "INSERT INTO sessions (id, created_at) VALUES (CAST(? AS TEXT), ?)"
# Every session's id, newest event's time and seq, and first event's time: two range seeks
# per session. ``sessions.created_at`` is when the row was made (the clock of the writer that
# created it), not the first event's time, which may be given by the caller.
_LIST_ALL = (
    "SELECT ss.id, ss.updated_at, ss.last_seq, (SELECT e.time FROM events AS e "
    f"WHERE e.key > (ss.key << {_SEQ_BITS}) AND e.key < ((ss.key + 1) << {_SEQ_BITS}) "
    "ORDER BY e.key LIMIT 1) FROM session_summary AS ss"
)
_FIRST_TIME = (
    f"(SELECT e.time FROM events AS e WHERE e.key > (page.key << {_SEQ_BITS}) "
    f"AND e.key < ((page.key + 1) << {_SEQ_BITS}) ORDER BY e.key LIMIT 1)"
)
# Ordered by the instant (agentsession_time_key: fixed-width UTC text, as _time_key), not the
# stored text, whose offset and fraction digits vary; the first event's time is read for the
# page's rows only.
_ORDER = "agentsession_time_key(updated_at) DESC, id DESC"
_LIST_PAGE = (
    f"SELECT page.id, page.updated_at, page.last_seq, {_FIRST_TIME} FROM ("
    "SELECT id, key, updated_at, last_seq FROM session_summary "
    "WHERE ?1 IS NULL OR substr(CAST(id AS BLOB), 1, length(CAST(?1 AS BLOB))) = CAST(?1 AS BLOB) "
    f"ORDER BY {_ORDER} LIMIT ?2 OFFSET ?3) AS page ORDER BY {_ORDER}"
)
_EXPIRED = "SELECT id FROM session_summary WHERE agentsession_time_key(updated_at) < ?"
_META_WHERE = "kind = CAST(? AS TEXT) AND key = CAST(? AS TEXT)"
_META_INSERT_IF_ABSENT = (
    "INSERT OR IGNORE INTO meta (kind, key, value, updated_at) "
    "VALUES (CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT), ?)"
)
_META_UPDATE_IF = (
    "UPDATE meta SET value = CAST(? AS TEXT), updated_at = ? "
    f"WHERE {_META_WHERE} AND value = CAST(? AS TEXT)"
)
_META_DELETE_IF = f"DELETE FROM meta WHERE {_META_WHERE} AND value = CAST(? AS TEXT)"
_SET_COMPACTION = "UPDATE sessions SET compaction_seq = ? WHERE key = ?"
_TAIL_EVENTS = 64
"""How many of the latest events opening a session reads (the history loads when needed)."""


def _text(value: str) -> str | bytes:
    """A string as SQLite can store it: itself, or its surrogatepass bytes (cast to TEXT)."""
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogatepass")
    return value


def _time_text(moment: _dt.datetime) -> bytes:
    """A time as the codec writes it (RFC 3339, ``Z`` for UTC), without the JSON quotes."""
    return encode(moment)[1:-1]


if sys.version_info >= (3, 11):
    _parse_time = _fromiso
else:  # pragma: no cover - Python 3.10 reads no "Z"

    def _parse_time(text: str) -> _dt.datetime:
        return _fromiso(text[:-1] + "+00:00" if text.endswith("Z") else text)


def _utc_iso(moment: _dt.datetime) -> str:
    """Fixed-width UTC ISO 8601 (naive times taken as UTC): ``created_at``, ``updated_at``."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_UTC)
    return moment.astimezone(_UTC).isoformat(timespec="microseconds")


def _time_key(text: str) -> str:
    """A stored time as fixed-width UTC text, which sorts as the instants do (the SQL function
    ``agentsession_time_key``; naive times taken as UTC, as :func:`_as_utc` does)."""
    return _utc_iso(_parse_time(text))


def _as_utc(moment: _dt.datetime) -> _dt.datetime:
    return moment.replace(tzinfo=_UTC) if moment.tzinfo is None else moment.astimezone(_UTC)


def _decode_meta(raw: bytes) -> dict[str, Any]:
    value = decode(raw)
    if not isinstance(value, dict):
        raise ValueError("meta is not a JSON object")
    return value


def _storage_error(
    exc: sqlite3.Error, action: str, path: str, session_id: str = ""
) -> SessionError:
    """The one translation of ``sqlite3`` errors into the agentsession tree."""
    text = str(exc)
    code = getattr(exc, "sqlite_errorname", "")
    where = f"session {session_id!r}: " if session_id else ""
    message = f"{where}{action} {path} failed: {text}"
    if isinstance(exc, sqlite3.ProgrammingError) and "closed" in text:
        return UsageError(f"{where}{action} {path}: the store is closed")
    if isinstance(exc, sqlite3.IntegrityError):
        return ConflictError(message)
    if code.startswith(("SQLITE_CANTOPEN", "SQLITE_NOTADB", "SQLITE_READONLY")) or any(
        marker in text
        for marker in ("unable to open", "not a database", "readonly database", "read-only")
    ):
        return StoreUnavailable(message)
    if code.startswith("SQLITE_CORRUPT") or "malformed" in text:
        return CorruptLogError(message, path=path, session_id=session_id)
    if code.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in text:
        return StorageError(f"{message} (another connection held the write lock too long)")
    return StorageError(message)


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


# -- one database file's connections in this process ---------------------------------------

_write_locks: dict[str, threading.Lock] = {}
_write_locks_guard = threading.Lock()
_live_databases: weakref.WeakSet[_Database] = weakref.WeakSet()
_inherited: list[sqlite3.Connection] = []  # a forked child's copies: never used, never closed


def _write_lock_for(path: str) -> threading.Lock:
    with _write_locks_guard:
        return _write_locks.setdefault(path, threading.Lock())


def _after_fork_in_child() -> None:
    global _write_locks_guard
    _write_locks_guard = threading.Lock()
    _write_locks.clear()
    for database in list(_live_databases):
        database.after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class _ThreadConnection:
    """Held in a thread's ``threading.local``; its finalizer closes the connection when the
    thread ends."""

    __slots__ = ("__weakref__", "conn", "cursor")

    def __init__(self, conn: sqlite3.Connection, registry: set[sqlite3.Connection]) -> None:
        self.conn = conn
        self.cursor = conn.cursor()  # reused by the append fast path
        weakref.finalize(self, _close_connection, conn, registry, os.getpid())


def _close_connection(
    conn: sqlite3.Connection, registry: set[sqlite3.Connection], pid: int
) -> None:
    # A forked child tears down its parent's threads' locals (running this finalizer there):
    # a connection is only ever closed by the process that opened it.
    if os.getpid() != pid:
        return
    registry.discard(conn)
    with contextlib.suppress(sqlite3.Error):
        conn.close()


def _close_all(registry: set[sqlite3.Connection], pid: int) -> None:
    for conn in list(registry):
        _close_connection(conn, registry, pid)


class _Database:
    """One database file as a store object and its sessions' logs reach it: a connection per
    thread (opened on first use, closed with its thread or by :meth:`close`), the process's
    write lock for the file, and the statements that read events (they depend on the schema
    version). In a forked child it forgets the parent's connections and lock by itself."""

    __slots__ = (
        "__weakref__",
        "_close_connections",
        "_connections",
        "_connections_lock",
        "_local",
        "busy_timeout",
        "catalog",
        "closed",
        "dirty",
        "insert_checked",
        "marks",
        "path",
        "rows",
        "rows_if_current",
        "search_marks",
        "synchronous",
        "uri",
        "write_lock",
    )

    def __init__(self, path: str, busy_timeout: float, synchronous: str) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self.synchronous = synchronous
        self.uri: str | None = None  # a read-only connection's URI (None: read and write)
        self.rows, self.rows_if_current = _ROWS, _ROWS_IF_CURRENT
        self.catalog = True  # the catalog tables exist (False: an older version read as is)
        self.dirty = True  # catalog_dirty exists (False: version 3 read as it is)
        self.search_marks = True  # catalog_search_dirty exists (False: version 3 or 4 read)
        self.marks = False  # each connection makes MARKING_TRIGGERS (enable_marks)
        self.insert_checked = _INSERT_IF_CURRENT  # the append that checks the session's row
        self.closed = False
        self._local = threading.local()
        self._connections: set[sqlite3.Connection] = set()
        self._connections_lock = threading.Lock()
        self._close_connections = weakref.finalize(self, _close_all, self._connections, os.getpid())
        self.write_lock = _write_lock_for(path)
        _live_databases.add(self)

    def connection(self) -> sqlite3.Connection:
        """This thread's connection, opened on first use."""
        try:
            conn: sqlite3.Connection = self._local.held.conn
            return conn
        except AttributeError:
            return self._connect().conn

    def held(self) -> _ThreadConnection:
        """This thread's connection with its reusable cursor, opened on first use."""
        try:
            held: _ThreadConnection = self._local.held
            return held
        except AttributeError:
            return self._connect()

    def _connect(self) -> _ThreadConnection:
        with self._connections_lock:
            if self.closed:
                raise UsageError(f"store {self.path} is closed")
            uri = self.uri
            try:
                conn = sqlite3.connect(
                    self.path if uri is None else uri,
                    timeout=self.busy_timeout,
                    isolation_level=None,  # transactions are explicit
                    check_same_thread=False,  # so that close() can close every thread's
                    uri=uri is not None,
                )
            except sqlite3.Error as exc:
                raise _storage_error(exc, "opening", self.path) from exc
            try:
                conn.create_function("agentsession_time_key", 1, _time_key, deterministic=True)
                conn.execute(f"PRAGMA synchronous={self.synchronous}")
                conn.execute(f"PRAGMA journal_size_limit={_JOURNAL_SIZE_LIMIT}")
            except sqlite3.Error as exc:
                conn.close()
                raise _storage_error(exc, "opening", self.path) from exc
            self._connections.add(conn)
            held = self._local.held = _ThreadConnection(conn, self._connections)
        if self.marks:
            self._make_triggers(conn)
        return held

    def enable_marks(self) -> None:
        """From now on every connection marks the sessions it appends to
        (:data:`MARKING_TRIGGERS`, made on this thread's connection now and on every other
        when it opens); its checked append inserts with ``VALUES``."""
        self.insert_checked = _INSERT
        self.marks = True
        self._make_triggers(self.connection())

    def _make_triggers(self, conn: sqlite3.Connection) -> None:
        try:
            for statement in MARKING_TRIGGERS:
                conn.execute(statement)
        except sqlite3.Error as exc:
            raise _storage_error(exc, "opening", self.path) from exc

    def close(self) -> None:
        """Close every thread's connection; a later use raises :class:`UsageError`."""
        with self._connections_lock:
            self.closed = True
            self._close_connections()

    def after_fork(self) -> None:
        """In a forked child: keep the parent's connections (unused, never closed: closing one
        here could disturb the parent's locks) and open new ones on demand."""
        _inherited.extend(self._connections)
        self._connections = set()
        self._connections_lock = threading.Lock()
        self._close_connections.detach()
        self._close_connections = weakref.finalize(self, _close_all, self._connections, os.getpid())
        self._local = threading.local()
        self.write_lock = _write_lock_for(self.path)


# -- a session's log ---------------------------------------------------------------------------


class SqliteLog:
    """One session's log in a :class:`SqliteStore`: a range of rows of the ``events`` table
    (the :class:`~agentsession.storage.LogStorage` contract; the session is the library's
    :class:`~agentsession.BaseSession`, given this log).

    It remembers the ``sessions.key`` it read (its *life*): when the stored session's key is
    another one (deleted, perhaps created again) or the session has no row any more, it
    answers :data:`~agentsession.storage.REOPEN`, having written nothing."""

    __slots__ = ("_clock", "_db", "_id", "_index", "_key", "_life")

    def __init__(
        self,
        database: _Database,
        session_id: str,
        clock: Callable[[], _dt.datetime],
        index: SqliteIndex | None = None,
    ) -> None:
        self._db = database
        self._index = index  # the catalog tables, written in each append's transaction
        self._id = session_id
        self._key = _text(session_id)  # the id as bound in statements
        self._clock = clock
        self._life: int | None = None  # the sessions.key this log read (None: no row yet)

    @property
    def location(self) -> str:
        """The database file."""
        return self._db.path

    @property
    def identity(self) -> tuple[str, ...]:
        """The database file and the session id."""
        return ("sqlite", self._db.path, self._id)

    def _error(self, action: str, exc: sqlite3.Error) -> SessionError:
        return _storage_error(exc, action, self._db.path, self._id)

    def _head(self, conn: sqlite3.Connection) -> tuple[int, int, int] | None:
        """The stored session's key, compaction seq and last seq; None when there is none."""
        row = conn.execute(_HEAD, (self._key,)).fetchone()
        if row is None:
            return None
        key, compaction_seq, top = row
        return key, compaction_seq, 0 if top is None else top - (key << _SEQ_BITS)

    # -- reading ----------------------------------------------------------------------------

    def _rows_to_events(self, rows: list[Any]) -> list[Event]:
        """Events from ``(seq, type, agent, user, time, data, meta, eid)`` rows; a row that does
        not decode raises :class:`CorruptLogError` naming the session and seq."""
        if not rows:
            return []
        try:
            events = [
                Event(
                    seq=seq,
                    type=type_,
                    agent=agent,
                    user=user,
                    time=_parse_time(time),
                    data=_Raw(data),
                    meta={} if meta is None else _decode_meta(meta),
                    id=eid or "",
                )
                for seq, type_, agent, user, time, data, meta, eid in rows
            ]
            # One parse checks that every payload is exactly one JSON value.
            payloads = b"[" + b",".join([row[5] for row in rows]) + b"]"
            if len(_payload_list.decode(payloads)) == len(rows):
                return events
        except (TypeError, ValueError, RecursionError):
            pass
        return [self._row_to_event(row) for row in rows]

    def _row_to_event(self, row: tuple[Any, ...]) -> Event:
        seq, type_, agent, user, time, data, meta, eid = row
        try:
            for name, value in (("type", type_), ("agent", agent), ("user", user)):
                if not isinstance(value, str):
                    raise ValueError(f"{name} is not text")
            if not isinstance(data, bytes):
                raise ValueError("data is missing")
            try:
                _payload_one.decode(data)
            except (msgspec.DecodeError, RecursionError):
                decode(data)  # the codec also reads escaped lone surrogates
            return Event(
                seq=seq,
                type=type_,
                agent=agent,
                user=user,
                time=_parse_time(time),
                data=_Raw(data),
                meta={} if meta is None else _decode_meta(meta),
                id=eid if isinstance(eid, str) else "",
            )
        except (TypeError, ValueError) as exc:
            raise CorruptLogError(
                f"session {self._id!r}: the event with seq {seq} in {self._db.path} does not "
                f"decode: {exc}",
                path=self._db.path,
                session_id=self._id,
            ) from exc

    def _select(self, conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[Event]:
        return self._rows_to_events(_fetchall(conn, sql, params))

    def _range(self, conn: sqlite3.Connection, key: int, after: int) -> list[Event]:
        """Every stored event of the session's life ``key`` with ``seq > after``."""
        base = key << _SEQ_BITS
        return self._select(conn, self._db.rows, (base + after, base + _MAX_SEQ + 1, -1))

    def open(self, view: LogView) -> tuple[list[Event], bool]:
        return self._open_range(tail=False)

    def open_tail(self, view: LogView) -> tuple[list[Event], bool]:
        return self._open_range(tail=True)

    def _open_range(self, *, tail: bool) -> tuple[list[Event], bool]:
        """Events from the latest compaction marker on, or (``tail``) only the last
        :data:`_TAIL_EVENTS` of them, in one read transaction; and whether that is the whole
        log. The life read is this log's from now on."""
        conn = self._db.connection()
        own = not conn.in_transaction
        try:
            if own:
                conn.execute("BEGIN")
            try:
                head = self._head(conn)
                if head is None:
                    events, complete, key = [], True, None
                else:
                    key, start, last = head
                    after = max(start, 1) - 1  # never before the marker
                    if tail:
                        after = max(after, last - _TAIL_EVENTS)
                    events = self._range(conn, key, after)
                    complete = after == 0
                if own:
                    conn.execute("COMMIT")
            except BaseException:
                if own:
                    _rollback(conn)
                raise
        except sqlite3.Error as exc:
            raise self._error("reading", exc) from exc
        self._life = key
        return events, complete

    def refresh(self, view: LogView) -> list[Event] | Reopen:
        """Other writers' events after ``view.seen_seq``; REOPEN when the stored session is
        not the life this log read (deleted; created, or created again, since it looked)."""
        try:
            conn = self._db.connection()
            head = self._head(conn)
            seen = view.seen_seq
            if head is None:
                if self._life is not None or seen:
                    return REOPEN  # deleted since we looked
                return []
            key, _, last = head
            if key != self._life or last < seen:
                return REOPEN  # created or created again since we looked
            if last == seen:
                return []
            base = key << _SEQ_BITS
            return self._select(conn, self._db.rows_if_current, (base + seen, base + _MAX_SEQ + 1))
        except sqlite3.Error as exc:
            raise self._error("reading", exc) from exc

    def read(self, after: int, limit: int | None) -> list[Event]:
        key = self._life
        if key is None or after >= _MAX_SEQ:
            return []
        base = key << _SEQ_BITS
        db = self._db
        try:
            return self._select(
                db.connection(),
                db.rows,
                (base + after, base + _MAX_SEQ + 1, -1 if limit is None else limit),
            )
        except sqlite3.Error as exc:
            raise self._error("reading", exc) from exc

    def discard_through(self, seq: int) -> tuple[int | None, int | None]:
        """Delete the rows of the (archived) events up to ``seq``, the last event's excepted,
        in one write transaction; returns the bytes of the session's stored event data before
        and after."""
        conn = self._db.connection()
        try:
            with self._db.write_lock:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    head = self._head(conn)
                    if head is None:
                        conn.execute("COMMIT")
                        return None, None
                    base = head[0] << _SEQ_BITS
                    span = (base, base + _MAX_SEQ + 1)
                    size = _EVENTS_SIZE
                    before = int(conn.execute(size, span).fetchone()[0])
                    upto = base + min(seq, head[2] - 1)  # head[2]: the last seq
                    conn.execute("DELETE FROM events WHERE key > ? AND key <= ?", (base, upto))
                    after = int(conn.execute(size, span).fetchone()[0])
                    conn.execute("COMMIT")
                except BaseException:
                    _rollback(conn)
                    raise
        except sqlite3.Error as exc:
            raise self._error("archiving", exc) from exc
        return before, after

    # -- appending --------------------------------------------------------------------------

    def append_one(self, view: LogView, event: Event, marker: bool) -> Event | None:
        """The fast path: one checked ``INSERT`` when this log's life is current and no one
        appended since ``view.seen_seq``. Anything else (other writers' events to catch up on,
        a deleted session, a compaction marker, strings UTF-8 cannot carry) takes the general
        path.

        One statement in autocommit mode is its own write transaction (SQLite takes the write
        lock, waiting through the busy handler, then checks and inserts against the newest
        data), so it needs no ``BEGIN``/``COMMIT`` round trips."""
        key = self._life
        seq = view.seen_seq + 1
        if key is None or marker or seq > _MAX_SEQ:
            return None
        meta = event.meta
        params = (
            (key << _SEQ_BITS) | seq,
            self._key,
            seq,
            event.type,
            event.agent,
            event.user,
            encode(event.time)[1:-1],
            event.data,
            encode(meta) if meta else None,
            event.id or None,
        )
        db = self._db
        stored = _replace(event, seq=seq)
        index = self._index
        change = None if index is None else view.indexed((stored,))
        if change is not None:
            assert index is not None
            return self._append_one_indexed(view, params, stored, change, index)
        with db.write_lock:
            try:
                if db.held().cursor.execute(db.insert_checked, params).rowcount != 1:
                    return None  # the session's row is gone
            except (sqlite3.IntegrityError, UnicodeEncodeError):
                return None  # another writer took the seq, or a string needs care
            except sqlite3.Error as exc:
                raise self._error("appending to", exc) from exc
        return stored

    def _append_one_indexed(
        self,
        view: LogView,
        params: tuple[Any, ...],
        stored: Event,
        change: CatalogChange,
        index: SqliteIndex,
    ) -> Event | None:
        """The fast path when the store keeps a catalog: the checked ``INSERT`` and the
        catalog's change in one transaction."""
        db = self._db
        held = db.held()
        cursor = held.cursor
        with db.write_lock:
            try:
                cursor.execute("BEGIN IMMEDIATE")
                try:
                    if cursor.execute(db.insert_checked, params).rowcount != 1:
                        cursor.execute("ROLLBACK")
                        return None  # the session's row is gone
                    skey = params[0] >> _SEQ_BITS if db.marks else None
                    _hand_over(held.conn, index, view, (stored,), change, skey)
                    cursor.execute("COMMIT")
                except BaseException:
                    _rollback(held.conn)
                    raise
            except (sqlite3.IntegrityError, UnicodeEncodeError):
                return None  # another writer took the seq, or a string needs care
            except sqlite3.Error as exc:
                raise self._error("appending to", exc) from exc
        return stored

    def append(
        self, view: LogView, events: list[Event], marker: int, expect_seq: int | None
    ) -> tuple[list[Event], list[Event]] | Reopen:
        # Everything that can be prepared is prepared before the write lock is taken.
        fields = [
            (
                self._key,
                _text(e.type),
                _text(e.agent),
                _text(e.user),
                _time_text(e.time),  # type: ignore[arg-type]  # stamped by append_many
                e.data,
                encode(e.meta) if e.meta else None,
                e.id or None,
            )
            for e in events
        ]
        db = self._db
        conn = db.connection()
        try:
            with db.write_lock:
                written = self._write(conn, view, fields, events, marker, expect_seq)
        except sqlite3.Error as exc:
            raise self._error("appending to", exc) from exc
        if isinstance(written, Reopen):
            return written
        foreign, first = written
        if first == 0:
            return foreign, []
        return foreign, [_replace(event, seq=first + i) for i, event in enumerate(events)]

    def _write(
        self,
        conn: sqlite3.Connection,
        view: LogView,
        fields: list[tuple[Any, ...]],
        events: list[Event],
        marker: int,
        expect_seq: int | None,
    ) -> tuple[list[Event], int] | Reopen:
        """One transaction: allocate seqs after whatever is stored, insert, commit. Returns the
        other writers' new events and the first seq of the batch (0 when nothing was written:
        ``expect_seq`` did not match, the view refused, or the seal is stale), or REOPEN."""
        count = len(fields)
        seen = view.seen_seq
        conn.execute("BEGIN IMMEDIATE")
        try:
            key = self._life
            first = seen + 1
            foreign: list[Event] = []
            stored = False
            fast = expect_seq is None or expect_seq == seen
            if fast and key is not None and first + count - 1 <= _MAX_SEQ:
                # Fast path: no one else appended and the session is the one we read. The
                # view is asked all the same: the session may have reopened since it checked.
                if not view.admits((), events):
                    conn.execute("ROLLBACK")
                    return [], 0
                try:
                    cursor = conn.executemany(self._db.insert_checked, _rows(key, first, fields))
                    stored = cursor.rowcount == count
                except sqlite3.IntegrityError:
                    pass  # another writer took the seq
                if not stored:
                    conn.execute("ROLLBACK")
                    conn.execute("BEGIN IMMEDIATE")
            if not stored:
                caught_up = self._catch_up(conn, seen)
                if isinstance(caught_up, Reopen):
                    conn.execute("ROLLBACK")
                    return caught_up
                foreign, first, key = caught_up
                if self._life is None and first > 1:
                    self._life = key  # a life read first here (as in _catch_up) is this log's
                if (expect_seq is not None and first - 1 != expect_seq) or not view.admits(
                    foreign, events
                ):
                    conn.execute("ROLLBACK")  # nothing written, not even a new session row
                    return foreign, 0
                if first + count - 1 > _MAX_SEQ:
                    raise StorageError(
                        f"session {self._id!r} is full: seqs end at {_MAX_SEQ} in {self.location}"
                    )
                conn.executemany(_INSERT, _rows(key, first, fields))
            if marker >= 0:
                conn.execute(_SET_COMPACTION, (first + marker, key))
            if self._index is not None:
                numbered = [_replace(e, seq=first + i) for i, e in enumerate(events)]
                change = view.indexed(numbered)
                if change is not None:
                    assert key is not None
                    skey = key if self._db.marks else None
                    _hand_over(conn, self._index, view, numbered, change, skey)
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
        self._life = key
        return foreign, first

    def _catch_up(
        self, conn: sqlite3.Connection, seen: int
    ) -> tuple[list[Event], int, int] | Reopen:
        """Inside the write transaction: other writers' events after ``seen``, the next seq
        and the session key (a new session's row is made here, and kept only if the batch
        is written); REOPEN when the stored session is not the life this log read."""
        head = self._head(conn)
        if head is None:
            if self._life is not None or seen:
                return REOPEN  # deleted: the session starts a new log
            created = _utc_iso(self._clock())
            key = conn.execute(_CREATE_SESSION, (self._key, created)).lastrowid
            assert key is not None
            return [], 1, key
        key, _, last = head
        if (key != self._life and (self._life is not None or seen)) or last < seen:
            return REOPEN  # created again since we looked
        # (A log that has read no life takes this one, created by another writer since it
        # looked, and catches up on all of it, as the session has seen nothing.)
        foreign = self._range(conn, key, seen) if last > seen else []
        return foreign, last + 1, key

    # -- the rest of its life cycle ---------------------------------------------------------

    def quarantine(self, event: Event, reason: str) -> bool:
        """SQLite quarantines nothing (only JSONL stores have ``on_corrupt``)."""
        return False

    def close(self) -> None:
        """Nothing to release: connections belong to the store's threads."""

    def after_fork(self) -> None:
        """Nothing of its own: the database object forgets the parent's connections and lock
        in a forked child."""


def _rows(key: int, first: int, fields: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Insert parameters: each event's row key and seq, then its prepared fields."""
    base = key << _SEQ_BITS
    return [(base + first + i, sid, first + i, *rest) for i, (sid, *rest) in enumerate(fields)]


# -- the store ---------------------------------------------------------------------------------


def _hand_over(
    conn: sqlite3.Connection,
    index: SqliteIndex,
    view: LogView,
    stored: Sequence[Event],
    change: CatalogChange,
    skey: int | None,
) -> None:
    """Inside an append's transaction: apply ``change`` to the catalog when it continues what
    the catalog holds (its ``first_seq`` follows the row's last seq), or else the change since
    the row's last seq when the session object holds those events; otherwise apply nothing,
    so the session is caught up from its log before the catalog is next read (a turn another
    object wrote part of, or one a crash cut short).

    Applied, the row holds the log's last seq: unless it leaves a turn open (the turn's next
    event would mark the session again at once, a second write of the mark's page), the
    session's mark goes (``skey``: its ``sessions.key``, when this store's connections mark
    what they append; :data:`MARKING_TRIGGERS`), so that the marks are the sessions with
    appends since their rows were last handed a change (what a store opened read-only
    catches up in memory at each query: :meth:`SqliteCatalog.rows_behind`)."""
    first = change.first_seq
    status = change.status
    if not index.apply(view.id, change, conn, after=first - 1 if first else None):
        held = index.indexed_seq(view.id, conn) or 0
        since = view.indexed_since(held, stored)
        if since is None or since.first_seq != held + 1:
            return
        index.apply(view.id, since, conn)
        status = since.status
    if skey is not None and status != OPEN:
        conn.execute("DELETE FROM catalog_dirty WHERE skey = ?", (skey,))


class SqliteCatalog(CatalogDefaults):
    """The sessions of one database file (a :class:`~agentsession.catalog.Catalog`): the
    ``sessions`` table and the view ``session_summary``, through the file's connections.
    From :class:`~agentsession.catalog.CatalogDefaults`: ``resolve``, ``cache_key``, and
    nothing to do for ``set_last_activity`` (the last event's time is the last activity),
    ``clean_crash_leftovers`` (a transaction leaves nothing behind) and ``after_fork`` (the
    file's connections and write lock forget the parent's by themselves)."""

    def __init__(
        self, db: _Database, clock: Callable[[], _dt.datetime], index: SqliteIndex | None = None
    ) -> None:
        self._db = db
        self._path = db.path
        self._clock = clock
        self.index = index
        """The catalog and search index in the database's tables (None: a database read as
        an older version has none)."""

    @property
    def location(self) -> str:
        """The database file."""
        return self._path

    @property
    def url(self) -> str:
        """``sqlite:///`` and the database's absolute path (so four slashes on POSIX)."""
        return "sqlite:///" + quote(self._path)

    def _error(self, action: str, exc: sqlite3.Error, session_id: str = "") -> SessionError:
        return _storage_error(exc, action, self._path, session_id)

    def open_session(self, store: SessionHost, session_id: str) -> BaseSession:
        log = SqliteLog(self._db, session_id, self._clock, self.index)
        return BaseSession(store, session_id, log)

    def catch_up_session(
        self, store: BaseStore, index: SqliteIndex, key: int, conn: sqlite3.Connection
    ) -> int:
        """Inside the caller's write transaction on ``conn``: apply to the catalog row of the
        session whose ``sessions.key`` is ``key`` the change of its events after the row's
        last seq (rebuilt whole when it has fewer events than that: made again since);
        returns 1 when the session was read, 0 when there was nothing to do or it cannot be
        read now (corrupt, or expired: logged)."""
        row = conn.execute("SELECT CAST(id AS BLOB) FROM sessions WHERE key = ?", (key,)).fetchone()
        if row is None:
            return 0  # deleted since: its row went with it
        sid = _surrogate_text(row[0])
        held = index.indexed_seq(sid, conn) or 0
        session = None
        try:
            session = self.open_session(store, sid)  # (a shredded one raises as it opens)
            latest = session.latest_seq
            if latest < held:  # made again since: fewer events than indexed
                indexing.reindex(store, [sid])
                return 1
            if latest == held:
                return 0
            events = indexing.catalogued(session, held)
            change = indexing.change_for(store, events)
            if change is not None:
                index.apply(sid, change, conn)
                if not held:  # a new row: what update() set is in the record
                    index.set_fields(sid, indexing.record_fields(store, sid))
            return 1
        except SessionShredded:
            index.shredded(sid)
            return 1
        except (CorruptLogError, EncryptionError, SessionExpired) as exc:
            log.warning("catalog: session %r not caught up: %s", sid, type(exc).__name__)
            return 0
        finally:
            if session is not None:
                session.close()

    def rows_behind(
        self, store: BaseStore, index: SqliteIndex, conn: sqlite3.Connection
    ) -> builtins.list[FreshRow]:
        """What a store that cannot write its catch-up (opened read-only) lists for the
        sessions :data:`CATALOG_DIRTY_DDL` marks, read on ``conn`` (in the query's read
        transaction): the rows of those behind their logs caught up in memory, as
        :meth:`catch_up_session` would write them (:meth:`caught_up`). A marked session whose
        row holds its log's last seq (an append that hands the catalog its change leaves the
        mark: :data:`_CLEAR_CURRENT_MARKS`) or is shredded is read from the tables as it
        is."""
        try:
            marked = _fetchall(conn, _MARKED_ROWS, ())
        except sqlite3.Error as exc:
            raise self._error("listing the sessions of", exc) from exc
        out: builtins.list[FreshRow] = []
        for raw_id, held, status, last, own_seqs in marked:
            if last is None or status == "shredded" or (own_seqs and held == last):
                continue
            fresh = self.caught_up(store, index, _surrogate_text(raw_id), held or 0, conn)
            if fresh is not None:
                out.append(fresh)
        return out

    def caught_up(
        self,
        store: BaseStore,
        index: SqliteIndex,
        sid: str,
        held: int,
        conn: sqlite3.Connection,
    ) -> FreshRow | None:
        """:meth:`catch_up_session` in memory, writing nothing: the row of the session
        ``sid``, whose catalog row holds seq ``held``, with the change of its events after
        that (its whole log when it has fewer events than that: made again since) applied
        (:meth:`SqliteIndex.caught_up`); None when it is current or cannot be read now
        (corrupt, or expired: logged; its row is listed as the tables hold it)."""
        session = None
        try:
            session = self.open_session(store, sid)  # (a shredded one raises as it opens)
            latest = session.latest_seq
            if latest == held:
                return None
            rebuilt = latest < held
            events = indexing.catalogued(session, 0 if rebuilt else held)
            change = indexing.change_for(store, events, documents=False) if events else None
            # A new row, or one made again: what update() set is in the record.
            fields = indexing.record_fields(store, sid) if rebuilt or not held else None
            return index.caught_up(sid, change, conn, fields=fields, rebuilt=rebuilt)
        except SessionShredded:
            return index.caught_up(sid, None, conn, shredded=True)
        except (CorruptLogError, EncryptionError, SessionExpired) as exc:
            log.warning("catalog: session %r not caught up: %s", sid, type(exc).__name__)
            return None
        finally:
            if session is not None:
                session.close()

    def index_session_documents(
        self, store: BaseStore, index: SqliteIndex, conn: sqlite3.Connection, skey: int
    ) -> int:
        """Inside the caller's write transaction on ``conn``: index the documents of the
        session whose ``sessions.key`` is ``skey`` after its mark's seq
        (:data:`SEARCH_DIRTY_DDL`), and remove the mark (kept when the session has no catalog
        row yet: its documents need one); returns 1 when its log was read."""
        mark = conn.execute(
            "SELECT after FROM catalog_search_dirty WHERE skey = ?", (skey,)
        ).fetchone()
        if mark is None:
            return 0  # indexed by another process meanwhile
        found = self.marked_events(store, conn, skey, mark[0])
        if found is None:
            conn.execute("DELETE FROM catalog_search_dirty WHERE skey = ?", (skey,))
            return 0
        sid, events = found
        change = indexing.change_for(store, events, documents=True) if events else None
        if change is not None and not index.add_documents(sid, change, conn):
            return 0  # no row yet (caught up by the next listing): the mark stays
        conn.execute("DELETE FROM catalog_search_dirty WHERE skey = ?", (skey,))
        return 1

    def marked_events(
        self, store: BaseStore, conn: sqlite3.Connection, skey: int, after: int
    ) -> tuple[str, list[Event]] | None:
        """The id of the session whose ``sessions.key`` is ``skey`` and its events after a
        mark's ``after`` (a seq of its own storage: a branch's events are read with the seqs
        its reader presents), plaintext, read on ``conn``; None when there is nothing to
        index (deleted, shredded, or unreadable now: logged)."""
        row = conn.execute(
            "SELECT CAST(s.id AS BLOB), (SELECT max(e.key) FROM events AS e "
            "WHERE e.key > (s.key << 32) AND e.key < ((s.key + 1) << 32)), "
            "(SELECT c.status FROM catalog AS c WHERE c.id = s.id) "
            "FROM sessions AS s WHERE s.key = ?",
            (skey,),
        ).fetchone()
        if row is None or row[1] is None or row[2] == "shredded":
            return None
        sid = _surrogate_text(row[0])
        stored_last = row[1] & _MAX_SEQ
        session = None
        try:
            session = self.open_session(store, sid)  # (a shredded one raises as it opens)
            shared = session.latest_seq - stored_last  # a branch's history before its own
            return sid, session.read(after=after + max(shared, 0))
        except SessionShredded:
            return None
        except (CorruptLogError, EncryptionError, SessionExpired) as exc:
            log.warning("search: session %r not indexed: %s", sid, type(exc).__name__)
            return None
        finally:
            if session is not None:
                session.close()

    def documents_behind(
        self, store: SqliteStore, *, index_first: bool
    ) -> builtins.list[tuple[str, Document, bool]]:
        """What :attr:`SqliteIndex.documents_behind` asks before a search: with
        ``index_first`` (a store that may write the file) the documents of the marked
        sessions are indexed (:meth:`SqliteStore.index_documents`) and nothing is returned;
        otherwise (opened read-only) they are read from those sessions' logs, each with the
        flag its session's later rewinds set."""
        if index_first:
            store.index_documents()
            return []
        conn = self._db.connection()
        out: builtins.list[tuple[str, Document, bool]] = []
        try:
            marks = conn.execute("SELECT skey, after FROM catalog_search_dirty").fetchall()
            for skey, after in marks:
                found = self.marked_events(store, conn, skey, after)
                if found is None or not found[1]:
                    continue
                sid, events = found
                change = indexing.change_for(store, events, documents=True)
                if change is None:
                    continue
                for doc in change.documents:
                    rewound = any(to < doc.seq < at for to, at in change.rewound)
                    out.append((sid, doc, rewound))
        except sqlite3.Error as exc:
            raise self._error("searching", exc) from exc
        return out

    def exists(self, session_id: str) -> bool:
        conn = self._db.connection()
        try:
            row = conn.execute(
                "SELECT 1 FROM sessions WHERE id = CAST(? AS TEXT)", (_text(session_id),)
            ).fetchone()
        except sqlite3.Error as exc:
            raise self._error("reading", exc, session_id) from exc
        return row is not None

    def _unreadable_time(self, exc: sqlite3.OperationalError) -> SessionError:
        """The error for a listing query that failed: ``agentsession_time_key`` raising (an
        unreadable time) is a corrupt log."""
        if "user-defined function raised exception" in str(exc):
            return CorruptLogError(
                f"{self._path}: a session's last event has an unreadable time",
                path=self._path,
            )
        return self._error("listing the sessions of", exc)

    def _session_infos(self, query: str, params: Sequence[Any]) -> list[SessionInfo]:
        """Sessions from ``query``'s rows: ``id, updated_at, last_seq, created_at``."""
        conn = self._db.connection()
        try:
            rows = _fetchall(conn, query, params)
            return [
                SessionInfo(
                    id=sid,
                    updated_at=_as_utc(_parse_time(updated)),
                    created_at=_as_utc(_parse_time(created)),
                    last_seq=last,
                )
                for sid, updated, last, created in rows
            ]
        except sqlite3.OperationalError as exc:
            raise self._unreadable_time(exc) from exc
        except sqlite3.Error as exc:
            raise self._error("listing the sessions of", exc) from exc
        except (TypeError, ValueError) as exc:
            raise CorruptLogError(
                f"{self._path}: a session's first or last event has an unreadable time: {exc}",
                path=self._path,
            ) from exc

    def list_all(self) -> list[SessionInfo]:
        """Every session, unordered (:func:`~agentsession.catalog.page_of` of it is what
        :meth:`list_page` answers in its query)."""
        return self._session_infos(_LIST_ALL, ())

    def last_append(self, session_id: str) -> _dt.datetime | None:
        conn = self._db.connection()
        try:
            row = conn.execute(
                "SELECT updated_at FROM session_summary WHERE id = CAST(? AS TEXT)",
                (_text(session_id),),
            ).fetchone()
        except sqlite3.Error as exc:
            raise self._error("reading", exc, session_id) from exc
        return None if row is None else _as_utc(_parse_time(row[0]))

    def list_page(
        self, prefix: str | None, limit: int | None, offset: int
    ) -> builtins.list[SessionInfo]:
        """One query: filtered by the id's bytes, ordered by the last event's instant and the
        id, and sliced in SQL."""
        params = (None if prefix is None else _text(prefix), -1 if limit is None else limit, offset)
        return self._session_infos(_LIST_PAGE, params)

    def expired_ids(self, cutoff: _dt.datetime) -> builtins.list[str]:
        """One query: the sessions whose last event is before ``cutoff``."""
        conn = self._db.connection()
        try:
            rows = _fetchall(conn, _EXPIRED, (_utc_iso(cutoff),))
        except sqlite3.OperationalError as exc:
            raise self._unreadable_time(exc) from exc
        except sqlite3.Error as exc:
            raise self._error("listing the expired sessions of", exc) from exc
        return [sid for (sid,) in rows]

    def delete(self, session_id: str, meta_kinds: Sequence[str]) -> bool:
        sid = _text(session_id)
        conn = self._db.connection()
        try:
            with self._db.write_lock:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    row = conn.execute(
                        "SELECT key FROM sessions WHERE id = CAST(? AS TEXT)", (sid,)
                    ).fetchone()
                    if row is not None:
                        base = row[0] << _SEQ_BITS
                        conn.execute(
                            "DELETE FROM events WHERE key > ? AND key < ?",
                            (base, base + _MAX_SEQ + 1),
                        )
                        conn.execute("DELETE FROM sessions WHERE key = ?", (row[0],))
                    if self.index is not None:
                        self.index.delete(session_id)  # in this transaction
                    conn.executemany(
                        "DELETE FROM meta WHERE kind = CAST(? AS TEXT) AND key = CAST(? AS TEXT)",
                        [(_text(kind), sid) for kind in meta_kinds],
                    )
                    conn.execute("COMMIT")
                except BaseException:
                    _rollback(conn)
                    raise
        except sqlite3.Error as exc:
            raise self._error("deleting from", exc, session_id) from exc
        return row is not None

    def storage_bytes(self) -> int | None:
        """The database file's size with its write-ahead log's (no size is kept per
        session)."""
        return sum(
            os.path.getsize(path)
            for path in (self._path, self._path + "-wal")
            if os.path.exists(path)
        )

    def close(self) -> None:
        self._db.close()


class SqliteMeta:
    """The ``meta`` table of one database file (a
    :class:`~agentsession.catalog.MetaStorage`); compare-and-set is one conditional
    statement."""

    def __init__(self, db: _Database, clock: Callable[[], _dt.datetime]) -> None:
        self._db = db
        self._path = db.path
        self._clock = clock

    def _error(self, action: str, exc: sqlite3.Error) -> SessionError:
        return _storage_error(exc, action, self._path, "")

    def get(self, kind: str, key: str) -> str | None:
        conn = self._db.connection()
        try:
            rows = _fetchall(
                conn,
                "SELECT value FROM meta WHERE kind = CAST(? AS TEXT) AND key = CAST(? AS TEXT)",
                (_text(kind), _text(key)),
            )
        except sqlite3.Error as exc:
            raise self._error(f"reading the {kind} entry {key!r} from", exc) from exc
        if not rows:
            return None
        value = rows[0][0]
        if not isinstance(value, str):
            raise CorruptLogError(
                f"{self._path}: the {kind} entry {key!r} is not text", path=self._path
            )
        return value

    def list(self, kind: str | None = None) -> builtins.list[tuple[str, str, str]]:
        conn = self._db.connection()
        where: str = ""
        params: tuple[Any, ...] = ()
        if kind is not None:
            where, params = " WHERE kind = CAST(? AS TEXT)", (_text(kind),)
        try:
            rows = _fetchall(
                conn,
                "SELECT CAST(kind AS BLOB), CAST(key AS BLOB), CAST(value AS BLOB) FROM meta"
                + where,
                params,
            )
        except sqlite3.Error as exc:
            raise self._error("listing the meta entries of", exc) from exc
        items: builtins.list[tuple[str, str, str]] = []
        for row in rows:
            if not all(isinstance(column, bytes) for column in row):
                raise CorruptLogError(f"{self._path}: a meta entry is not text", path=self._path)
            kind_, key, value = (_surrogate_text(column) for column in row)
            items.append((kind_, key, value))
        return sorted(items)

    def set(self, kind: str, key: str, value: str | None) -> None:
        conn = self._db.connection()
        try:
            with self._db.write_lock:
                if value is None:
                    conn.execute(
                        "DELETE FROM meta WHERE kind = CAST(? AS TEXT) AND key = CAST(? AS TEXT)",
                        (_text(kind), _text(key)),
                    )
                else:
                    conn.execute(
                        "INSERT OR REPLACE INTO meta (kind, key, value, updated_at) "
                        "VALUES (CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT), ?)",
                        (_text(kind), _text(key), _text(value), _utc_iso(self._clock())),
                    )
        except sqlite3.Error as exc:
            raise self._error(f"writing the {kind} entry {key!r} to", exc) from exc

    def add(self, kind: str, key: str, value: str) -> str:
        conn = self._db.connection()
        try:
            with self._db.write_lock:
                conn.execute(
                    "INSERT OR IGNORE INTO meta (kind, key, value, updated_at) "
                    "VALUES (CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT), ?)",
                    (_text(kind), _text(key), _text(value), _utc_iso(self._clock())),
                )
        except sqlite3.Error as exc:
            raise self._error(f"writing the {kind} entry {key!r} to", exc) from exc
        stored = self.get(kind, key)
        return value if stored is None else stored

    def cas(self, kind: str, key: str, expected: str | None, new: str | None) -> bool:
        where = (_text(kind), _text(key))
        params: tuple[Any, ...]
        if new == expected:  # nothing to write (both None: no entry): one read answers
            return self.get(kind, key) == expected
        if new is None:
            assert expected is not None
            statement, params = _META_DELETE_IF, (*where, _text(expected))
        elif expected is None:
            statement = _META_INSERT_IF_ABSENT
            params = (*where, _text(new), _utc_iso(self._clock()))
        else:
            statement = _META_UPDATE_IF
            params = (_text(new), _utc_iso(self._clock()), *where, _text(expected))
        conn = self._db.connection()
        try:
            with self._db.write_lock:
                return conn.execute(statement, params).rowcount == 1
        except sqlite3.Error as exc:
            raise self._error(f"writing the {kind} entry {key!r} to", exc) from exc


def _create_file(path: str) -> None:
    """Create the database file (owner-only) unless it exists. An existing file is not
    opened: closing a descriptor of it would drop every POSIX lock this process's SQLite
    connections hold on it, and another process closing its last connection would then take
    them for gone and delete the write-ahead log under them (they would read a stale
    database from then on)."""
    directory = os.path.dirname(path)
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(path, flags, 0o600)
        except FileExistsError:
            return
        os.close(fd)
    except OSError as exc:
        raise StoreUnavailable(f"cannot create the database {path}: {exc}") from exc


def _schema_state(conn: sqlite3.Connection) -> tuple[int, int]:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    app = conn.execute("PRAGMA application_id").fetchone()[0]
    return int(version), int(app)


def _prepare_schema(db: _Database, read_only: bool) -> tuple[int, ...]:
    """Switch to WAL and create or migrate the schema; refuse files that are not ours; returns
    the versions applied. Opened for reading (``read_only``, or a file this process may not
    write), nothing is switched or migrated: see :func:`_check_schema_for_reading`."""
    path = db.path
    conn = db.connection()
    try:
        target = len(_MIGRATIONS)
        if db.uri is not None or read_only:
            _check_schema_for_reading(db, conn)
            return ()
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreUnavailable(f"{path} cannot use WAL mode (journal mode {mode})")
        if _schema_state(conn) == (target, APPLICATION_ID):
            db.search_marks = _has_table(conn, "catalog_search_dirty")
            return ()
        with db.write_lock:
            conn.execute("BEGIN IMMEDIATE")
            try:
                version, app = _schema_state(conn)
                if (version, app) == (0, 0):
                    if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                        raise StoreUnavailable(
                            f"{path} is a SQLite database of another application "
                            "(it has tables but no agentsession schema)"
                        )
                elif app != APPLICATION_ID:
                    raise StoreUnavailable(
                        f"{path} is not an agentsession database (application_id {app:#x})"
                    )
                if version > target:
                    raise StoreUnavailable(
                        f"{path} has schema version {version}, newer than this "
                        f"agentsession supports ({target}): upgrade agentsession"
                    )
                for migrate in _MIGRATIONS[version:]:
                    migrate(conn)
                db.search_marks = _has_table(conn, "catalog_search_dirty")
                applied = tuple(range(version + 1, target + 1))
                conn.execute(f"PRAGMA user_version={target}")
                conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
                conn.execute("COMMIT")
                return applied
            except BaseException:
                _rollback(conn)
                raise
    except sqlite3.Error as exc:
        raise _storage_error(exc, "opening", path) from exc


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    return bool(
        conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
        ).fetchall()
    )


def _check_schema_for_reading(db: _Database, conn: sqlite3.Connection) -> None:
    """Check the schema without changing the file: the current version is read as usual,
    version 1 as it is (its events have no ids: no ``events.eid``, read as NULL); any other
    raises :class:`StoreUnavailable`."""
    path = db.path
    target = len(_MIGRATIONS)
    version, app = _schema_state(conn)
    if (version, app) == (0, 0) and not conn.execute(
        "SELECT count(*) FROM sqlite_master"
    ).fetchone()[0]:
        raise StoreUnavailable(f"no store at {path} (the database has no tables)")
    if app != APPLICATION_ID:
        raise StoreUnavailable(f"{path} is not an agentsession database")
    if version > target:
        raise StoreUnavailable(
            f"{path} has schema version {version}, newer than this agentsession "
            f"supports ({target}): upgrade agentsession"
        )
    if version in (1, 2):
        db.catalog = False  # no catalog tables: listed by ids and times, as then
        if version == 1:
            db.rows, db.rows_if_current = _ROWS_V1, _ROWS_IF_CURRENT_V1
    elif version in (3, 4):
        # Its documents are indexed with the rows (3: each append, 4: at turn boundaries):
        # read as they are.
        db.search_marks = False
        db.dirty = version == 4
    elif version != target and version != 5:  # (5 differs in its triggers: read as it is)
        raise StoreUnavailable(
            f"{path}: schema version {version} is older than {target}; run "
            "`agentsession migrate`" + (" with write access" if db.uri is not None else "")
        )


def _open_database(
    path: str, busy_timeout: float, synchronous: str, create: bool, read_only: bool
) -> tuple[_Database, tuple[int, ...]]:
    """The database file's connections, its schema checked (and created or migrated unless
    ``read_only``); with the schema versions applied now."""
    db = _Database(path, busy_timeout, synchronous)
    if create and not read_only:
        _create_file(path)
    else:
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            raise StoreUnavailable(f"no store at {path} (no such file)") from None
        except OSError as exc:
            raise StoreUnavailable(f"cannot open the database {path}: {exc}") from exc
        if size == 0:
            raise StoreUnavailable(f"no store at {path} (the file is empty)")
        db.uri = _read_only_uri(path)
    try:
        return db, _prepare_schema(db, read_only)
    except BaseException:
        db.close()
        raise


DATA_VERSION_INTERVAL = 0.002
"""Seconds between two looks of a :class:`DataVersionWatcher` at ``PRAGMA data_version``
while the database changes."""
DATA_VERSION_IDLE_INTERVAL = 0.025
"""Seconds between two looks once the database has not changed for :data:`DATA_VERSION_QUIET`
seconds (what an idle follower costs: a look every 2 ms takes about 3% of a core)."""
DATA_VERSION_QUIET = 1.0
"""Seconds without a change after which a :class:`DataVersionWatcher` looks less often."""

_HEADS_AT_MOST = 1000  # sessions whose newest rows a change is told by; beyond: "any session"
_HEADS = (
    "SELECT s.id, (SELECT max(key) FROM events WHERE key > (s.key << 32) "
    f"AND key < ((s.key + 1) << 32)) FROM sessions AS s LIMIT {_HEADS_AT_MOST + 1}"
)
_ERROR_PAUSE = 0.1  # seconds a watcher waits after a failed look before the next one


class DataVersionWatcher:
    """The :class:`~agentsession.follow.Watcher` of a SQLite store: on a connection of its
    own (opened in :meth:`run`, closed when it returns, never writing), it reads
    ``PRAGMA data_version``, which moves when any other connection (of this process or
    another) commits: every ``interval`` seconds, and every ``idle_interval`` seconds once it
    has not moved for ``quiet`` seconds (the first append after a quiet spell is seen up to
    ``idle_interval`` late). When it moved, the newest row key of each session (one range
    seek per session) tells which sessions grew, were deleted or were created again:
    ``changed(id)`` for each. A database of more than 1000 sessions is not looked through:
    ``changed(None)``."""

    def __init__(
        self,
        path: str,
        uri: str | None,
        interval: float = DATA_VERSION_INTERVAL,
        idle_interval: float = DATA_VERSION_IDLE_INTERVAL,
        quiet: float = DATA_VERSION_QUIET,
    ) -> None:
        self.path = path
        """The database file."""
        self.uri = uri
        """The URI its connection opens (a read-only one's), or None: ``path`` read-write."""
        self.interval = interval
        """Seconds between two looks at ``PRAGMA data_version`` while the database changes."""
        self.idle_interval = idle_interval
        """Seconds between two looks after ``quiet`` seconds without a change."""
        self.quiet = quiet
        """Seconds without a change after which the looks are ``idle_interval`` apart."""

    def _connect(self) -> sqlite3.Connection:
        # mode=rw: a database deleted meanwhile is not created again.
        uri = self.uri if self.uri is not None else f"file:{quote(self.path)}?mode=rw"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        try:
            conn.text_factory = _surrogate_text  # ids holding lone surrogates read back too
            conn.execute("PRAGMA query_only=1")
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _heads(conn: sqlite3.Connection) -> dict[str, int | None] | None:
        """Each session's newest row key (None: too many sessions to look through)."""
        rows = conn.execute(_HEADS).fetchall()
        if len(rows) > _HEADS_AT_MOST:
            return None
        return dict(rows)

    def run(self, changed: Callable[[str | None], None], stop: threading.Event) -> None:
        """Watch until ``stop`` is set (returns within ``idle_interval`` seconds of it)."""
        conn = self._connect()
        try:
            cursor = conn.cursor()

            def version_of() -> int:
                return int(cursor.execute("PRAGMA data_version").fetchone()[0])

            version = version_of()
            heads = self._heads(conn)
            changed(None)  # watching now: what was appended before is read by every follower
            last_change = time.monotonic()
            wait = self.interval
            while not stop.wait(wait):
                now = version_of()
                if now == version:
                    if wait != self.idle_interval and time.monotonic() - last_change > self.quiet:
                        wait = self.idle_interval
                    continue
                last_change = time.monotonic()
                wait = self.interval
                try:
                    new = self._heads(conn)
                except sqlite3.OperationalError:  # busy or locked for a moment: look again
                    changed(None)
                    stop.wait(_ERROR_PAUSE)
                    continue
                version = now
                if heads is None or new is None:
                    changed(None)
                else:
                    for sid, key in new.items():
                        if heads.get(sid) != key:
                            changed(sid)
                    for sid in heads.keys() - new.keys():
                        changed(sid)
                heads = new
        finally:
            conn.close()


class SqliteStore(BaseStore):
    """Sessions in one SQLite database file. Opened by ``open_store("sqlite:///relative.db")``
    or ``open_store("sqlite:////absolute/path.db")`` (see :func:`sqlite_path`).

    ``busy_timeout`` is how many seconds a writer waits for another process's write lock
    before failing with :class:`~agentsession.errors.StorageError`. ``read_only=True`` opens
    an existing database to read and changes nothing in it (no journal mode switch, no
    migration): the current schema is read as usual, version 1 as it is (its events have no
    ids), any other raises :class:`~agentsession.errors.StoreUnavailable`; writes are not meant
    for such a store (on version 1 they fail). The other options are
    :class:`~agentsession.session.BaseStore`'s.

    Its parts: a :class:`SqliteCatalog`, a :class:`SqliteMeta`, a
    :class:`~agentsession.locks.FileLocker` over lock files beside the database and, for its
    followers, a :class:`DataVersionWatcher`.
    """

    capabilities = Capabilities()

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 30.0,
        create: bool = True,
        read_only: bool = False,
        **options: Any,
    ) -> None:
        def parts() -> StoreParts:
            if busy_timeout < 0:
                raise UsageError(f"busy_timeout must be >= 0 seconds, not {busy_timeout}")
            self.busy_timeout = busy_timeout
            """Seconds a writer waits for another connection's write lock."""
            resolved = os.path.realpath(os.path.abspath(os.fspath(path)))
            synchronous = "FULL" if self.durability == "fsync" else "NORMAL"
            db, self.applied_migrations = _open_database(
                resolved, busy_timeout, synchronous, create, read_only
            )
            self._db = db  # the file's connections (its catalog's, meta's and logs')
            index = (
                SqliteIndex(db.connection, location=db.path, write_lock=db.write_lock)
                if db.catalog
                else None
            )
            self._tables = index  # the catalog's tables, caught up before they are read
            return StoreParts(
                SqliteCatalog(db, self.clock, index),
                SqliteMeta(db, self.clock),
                locker=lambda: FileLocker(resolved + LOCK_DIR_SUFFIX),
                watcher=lambda: DataVersionWatcher(db.path, db.uri),
                index=index,
            )

        super().__init__(parts, **options)
        if self._tables is not None:
            self._tables.catch_up = self.catch_up_catalog
            self._indexing.deferred = self._db.uri is None and not read_only
            if self._indexing.deferred and self._indexing.catalog and self._db.search_marks:
                # Its connections mark what they append: a turn's start and most appends
                # outside turns hand the catalog nothing (Indexing.lazy); every reader
                # catches the marked sessions up (one opened read-only, in memory).
                self._db.enable_marks()
                self._indexing.lazy = True
            elif not self._indexing.deferred and self._indexing.catalog and self._db.dirty:
                # Opened read-only: it cannot write the catch-up, so it makes the marked
                # sessions' rows in memory for each query (SqliteIndex.rows_behind).
                catalog = self._catalog
                assert isinstance(catalog, SqliteCatalog)
                self._tables.rows_behind = functools.partial(
                    catalog.rows_behind, self, self._tables
                )
            if self._db.search_marks:
                self._indexing.documents_apart = self._indexing.deferred
                catalog = self._catalog
                assert isinstance(catalog, SqliteCatalog)
                self._tables.documents_behind = functools.partial(
                    catalog.documents_behind, self, index_first=self._indexing.deferred
                )
        if self._db.uri is None and not read_only and self._db.catalog:
            try:
                self.fill_catalog()
            except BaseException:
                self.close()
                raise

    applied_migrations: tuple[int, ...] = ()
    """Schema versions this store object applied when it opened the file (usually none)."""

    def fill_catalog(self) -> int | None:
        """Fill the catalog and search index from the logs when a migration left the mark
        that it must be (version 3 added the tables to a database holding sessions); returns
        how many sessions were indexed (None: no mark, nothing to do). Run when the store
        opens.

        Each session is read and indexed in one write transaction, so an append by another
        process is either in the log read or applied after the rebuild. The mark goes once
        every session is indexed: a crash, or a session that cannot be read now (an encrypted
        store opened without its key, a store opened with ``catalog=False``), leaves it, and
        the next opening fills again (rebuilding a session twice changes nothing)."""
        if not self._indexing.catalog:
            return None
        meta = self._meta
        if meta.get(CATALOG_FILL_KIND, CATALOG_FILL_KEY) is None:
            return None
        db = self._db
        conn = db.connection()
        count = 0
        complete = True
        index = self._index
        assert index is not None
        for info in self._catalog.list_page(None, None, 0):
            sid = info.id
            try:
                with db.write_lock:
                    conn.execute("BEGIN IMMEDIATE")
                    try:
                        if self.is_shredded(sid):
                            # Its events cannot be read: a row of its times, marked shredded.
                            first = CatalogChange(
                                first_time=info.created_at,
                                last_time=info.updated_at,
                                last_seq=info.last_seq,
                            )
                            index.rebuild(sid, first, indexing.Fields(), False)
                            index.shredded(sid)
                            count += 1
                        else:
                            count += indexing.reindex(self, [sid])
                        conn.execute("COMMIT")
                    except BaseException:
                        _rollback(conn)
                        raise
            except SessionError:
                complete = False  # unreadable now (no key, say): indexed at a later opening
            except sqlite3.Error as exc:
                raise _storage_error(exc, "filling the catalog of", db.path, sid) from exc
        if complete:
            meta.set(CATALOG_FILL_KIND, CATALOG_FILL_KEY, None)
        return count

    def catch_up_catalog(self) -> int:
        """Bring the catalog rows of the sessions marked behind their logs up to date
        (:data:`CATALOG_DIRTY_DDL`: appends inside a turn, or by a writer that crashed
        mid-turn, leave the mark); returns how many sessions were caught up. Run before the
        catalog is read (``list`` with a ``where``/``order``/``cursor``, ``search``,
        ``totals``); nothing on a store that cannot write the file (opened read-only: each
        query makes the marked sessions' rows in memory instead,
        :meth:`SqliteCatalog.rows_behind`).

        Each session is read after its row's last seq and its change applied in one write
        transaction, so an append by another process is either in what is read or marks the
        session again."""
        db = self._db
        if not (self._indexing.catalog and self._indexing.deferred):
            return 0
        index = self._tables
        assert index is not None
        catalog = self._catalog
        assert isinstance(catalog, SqliteCatalog)
        conn = db.connection()
        done = 0
        try:
            if conn.execute("SELECT 1 FROM catalog_dirty LIMIT 1").fetchone() is None:
                return 0
            with db.write_lock:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.execute(_CLEAR_CURRENT_MARKS)
                    conn.execute("COMMIT")
                except BaseException:
                    _rollback(conn)
                    raise
            # Every session marked when it starts, once, in key order (one marked again
            # meanwhile, by a writer, waits for the next catch-up: never an endless loop).
            seen = -1
            while keys := [
                r[0]
                for r in conn.execute(
                    "SELECT skey FROM catalog_dirty WHERE skey > ? ORDER BY skey LIMIT 512",
                    (seen,),
                )
            ]:
                seen = keys[-1]
                for key in keys:
                    with db.write_lock:
                        conn.execute("BEGIN IMMEDIATE")
                        try:
                            done += catalog.catch_up_session(self, index, key, conn)
                            conn.execute("DELETE FROM catalog_dirty WHERE skey = ?", (key,))
                            conn.execute("COMMIT")
                        except BaseException:
                            _rollback(conn)
                            raise
        except sqlite3.Error as exc:
            raise _storage_error(exc, "catching up the catalog of", db.path) from exc
        return done

    def index_documents(self) -> int:
        """Index the search documents of the sessions marked behind their logs
        (:data:`SEARCH_DIRTY_DDL`: appends never index documents), in batches of
        :data:`DOCUMENTS_BATCH` sessions per write transaction (one FTS5 segment each);
        returns how many sessions were read. Run by every ``search`` first; a writer may run
        it after appending, so that the next search (in any process, one opened read-only
        too) finds the documents indexed. Nothing on a store that cannot write the file, or
        keeps no search index.

        Each session's mark goes in the transaction that indexes its documents, so a crash
        leaves it for the next run, and indexing a document again replaces it."""
        indexing_ = self._indexing
        if not (indexing_.catalog and indexing_.searchable and indexing_.documents_apart):
            return 0
        index = self._tables
        assert index is not None
        catalog = self._catalog
        assert isinstance(catalog, SqliteCatalog)
        db = self._db
        conn = db.connection()
        done = 0
        try:
            for _ in range(4):  # writers may mark sessions meanwhile: a few rounds, not forever
                seen = 0  # every mark once per round, in key order (some may stay: no row yet)
                while marks := [r[0] for r in conn.execute(_MARKED_FOR_SEARCH, (seen,))]:
                    seen = marks[-1]
                    for start in range(0, len(marks), DOCUMENTS_BATCH):
                        with db.write_lock:
                            conn.execute("BEGIN IMMEDIATE")
                            try:
                                for skey in marks[start : start + DOCUMENTS_BATCH]:
                                    done += catalog.index_session_documents(self, index, conn, skey)
                                conn.execute("COMMIT")
                            except BaseException:
                                _rollback(conn)
                                raise
                if not seen:
                    break
        except sqlite3.Error as exc:
            raise _storage_error(exc, "indexing the documents of", db.path) from exc
        return done

    @property
    def path(self) -> str:
        """The database file (resolved)."""
        return self.location


def _read_only_uri(path: str) -> str | None:
    """The URI that opens an existing database read-only when this process may not write it
    or its directory (which holds the ``-wal`` and ``-shm`` files); None when it may."""
    directory = os.path.dirname(path)
    dir_writable = os.access(directory, os.W_OK | os.X_OK)
    if os.access(path, os.W_OK) and dir_writable:
        return None
    uri = f"file:{quote(path)}?mode=ro"
    if not dir_writable and not (os.path.exists(path + "-wal") and os.path.exists(path + "-shm")):
        # WAL needs the -shm file to read; when it cannot be created, the file is read as it
        # stands (as immutable), which is all of it: a clean close checkpoints the log.
        uri += "&immutable=1"
    return uri


def migrate(url: str, **options: Any) -> builtins.list[int]:
    """Create or upgrade the database at ``url`` (see :func:`sqlite_path`); returns the schema
    versions applied now (opening a store migrates too)."""
    store = open_sqlite(url, **options)
    try:
        return list(store.applied_migrations)
    finally:
        store.close()


def sqlite_path(url: str) -> str:
    """The database path of a ``sqlite:`` URL, by SQLAlchemy's convention:
    ``sqlite:///relative.db`` is relative to the working directory, ``sqlite:////abs/path.db``
    is absolute (``sqlite:relative.db`` is relative too). ``sqlite://name.db``, which reads as
    a host name, is refused with a message showing both forms."""
    scheme, _, rest = url.partition(":")
    rest = rest.partition("?")[0]
    if rest.startswith("///"):
        path = rest[3:]
    elif rest.startswith("//"):
        raise UsageError(
            f"{url!r} is ambiguous: write {scheme}:///relative/path.db for a file relative to "
            f"the working directory, or {scheme}:////absolute/path.db for an absolute path"
        )
    else:
        path = rest
    path = unquote(path)
    if not path:
        raise UsageError(
            f"{url!r} names no file: use {scheme}:///relative.db or {scheme}:////absolute.db"
        )
    return path


def open_sqlite(url: str, **options: Any) -> SqliteStore:
    """``open_store("sqlite:///relative.db")`` or ``open_store("sqlite:////abs/path.db")``."""
    return SqliteStore(sqlite_path(url), **options)
