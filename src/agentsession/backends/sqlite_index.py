"""A catalog and search index in SQLite tables (:class:`SqliteIndex`, a
:class:`~agentsession.indexing.CatalogIndex`).

It keeps its own tables and never reads a log, so it serves the SQLite backend (its tables sit
in the store's database, and :meth:`SqliteIndex.apply` runs in the append's transaction) and a
sidecar database beside logs kept elsewhere alike. The tables (:data:`INDEX_SCHEMA`):

* ``catalog``: one row per session. ``key`` is an ``AUTOINCREMENT`` integer (never reused, so
  a session deleted and created again gets a new one); ``created_key`` and ``updated_key`` hold
  the times as fixed-width UTC text (``''``: none), which sorts as the instants do, so keyset
  pages are index range scans on ``(updated_key, id)``; ``tags`` (as set) and ``agents`` (in
  order of first appearance) are JSON lists; usage totals are columns.
* ``catalog_tags`` and ``catalog_agents``: ``(session_id, tag)`` and ``(session_id, agent)``,
  for ``where`` on tags and agents.
* ``catalog_usage``: usage per session, UTC day and agent (what ``totals`` sums).
* ``catalog_documents``: an FTS5 table, one row per searchable event, its ``rowid``
  ``(catalog.key << 32) | seq`` (a session's documents are one rowid range: deleting or flagging
  them never scans the table). ``text`` holds the document's words as
  :func:`agentsession.listing.words` makes them, space separated (blind tokens as they are), so
  FTS5's ``unicode61`` tokenizer splits exactly where search's normalisation does; ``body`` the
  text as written when it differs (NULL otherwise), from which a hit's snippet is made. A
  document :meth:`SqliteIndex.add_documents` indexes (read back from a log, for a store that
  indexes documents apart from its appends) keeps ASCII text as written in ``text``, which
  ``unicode61`` splits and folds exactly as ``words`` does. Ranked by ``bm25``.

The tables hold what the store hands them: on an encrypted store sealed titles, users, tenants
and tags, and blind tokens for words (``body`` is then NULL: tokens are their own words).
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as _dt
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec

from ..codec import decode, encode
from ..errors import StorageError
from ..indexing import Fields, set_row_fields, shred_row
from ..listing import (
    CatalogChange,
    CatalogRow,
    Document,
    Filter,
    Hit,
    ListQuery,
    SearchQuery,
    Totals,
    TotalsQuery,
    UsageRow,
    UsageTotals,
    add_usage,
    apply_change,
    document_hit,
    matches,
    select,
    snippet,
    sort_totals,
    totals_of,
    words,
)

if TYPE_CHECKING:
    from ..indexing import IndexHost

__all__ = [
    "INDEX_SCHEMA",
    "INDEX_TABLES",
    "FreshRow",
    "SqliteIndex",
    "create_index_tables",
    "time_key",
]

INDEX_TABLES: Final = (
    "catalog",
    "catalog_tags",
    "catalog_agents",
    "catalog_usage",
    "catalog_documents",
    "catalog_pending",
)
"""The tables an index keeps (dropping them forgets it; :meth:`SqliteIndex.rebuild` of every
session fills them again)."""

INDEX_SCHEMA: Final = (
    """
    CREATE TABLE IF NOT EXISTS catalog (
        key               INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: document rowids
        id                TEXT    NOT NULL UNIQUE,
        created_key       TEXT    NOT NULL DEFAULT '',  -- fixed-width UTC, '' when unknown
        updated_key       TEXT    NOT NULL DEFAULT '',
        last_seq          INTEGER NOT NULL DEFAULT 0,
        title             TEXT    NOT NULL DEFAULT '',
        title_set         INTEGER NOT NULL DEFAULT 0,
        user              TEXT    NOT NULL DEFAULT '',
        tenant            TEXT    NOT NULL DEFAULT '',
        tags              TEXT    NOT NULL DEFAULT '[]',  -- JSON list, as set
        agents            TEXT    NOT NULL DEFAULT '[]',  -- JSON list, first appearance first
        status            TEXT    NOT NULL DEFAULT 'idle',
        messages          INTEGER NOT NULL DEFAULT 0,
        turns             INTEGER NOT NULL DEFAULT 0,
        input_tokens      INTEGER NOT NULL DEFAULT 0,
        output_tokens     INTEGER NOT NULL DEFAULT 0,
        cache_read_tokens INTEGER NOT NULL DEFAULT 0,
        cache_write_tokens INTEGER NOT NULL DEFAULT 0,
        cost              REAL    NOT NULL DEFAULT 0,
        compacted_before  INTEGER NOT NULL DEFAULT 0
    )
    """,
    "CREATE INDEX IF NOT EXISTS catalog_by_updated ON catalog (updated_key, id)",
    "CREATE INDEX IF NOT EXISTS catalog_by_created ON catalog (created_key, id)",
    "CREATE INDEX IF NOT EXISTS catalog_by_tenant ON catalog (tenant, updated_key, id)",
    "CREATE INDEX IF NOT EXISTS catalog_by_user ON catalog (user, updated_key, id)",
    # Idle rows (most) are not in it: appends to them never touch it; a turn's start and end do.
    "CREATE INDEX IF NOT EXISTS catalog_by_status ON catalog (status, updated_key, id) "
    "WHERE status != 'idle'",
    """
    CREATE TABLE IF NOT EXISTS catalog_tags (
        session_id TEXT NOT NULL,
        tag        TEXT NOT NULL,
        PRIMARY KEY (session_id, tag)
    ) WITHOUT ROWID
    """,
    "CREATE INDEX IF NOT EXISTS catalog_tags_by_tag ON catalog_tags (tag, session_id)",
    """
    CREATE TABLE IF NOT EXISTS catalog_agents (
        session_id TEXT NOT NULL,
        agent      TEXT NOT NULL,
        PRIMARY KEY (session_id, agent)
    ) WITHOUT ROWID
    """,
    "CREATE INDEX IF NOT EXISTS catalog_agents_by_agent ON catalog_agents (agent, session_id)",
    """
    CREATE TABLE IF NOT EXISTS catalog_usage (
        session_id         TEXT    NOT NULL,
        day                TEXT    NOT NULL,  -- YYYY-MM-DD, UTC
        agent              TEXT    NOT NULL,
        calls              INTEGER NOT NULL DEFAULT 0,
        input_tokens       INTEGER NOT NULL DEFAULT 0,
        output_tokens      INTEGER NOT NULL DEFAULT 0,
        cache_read_tokens  INTEGER NOT NULL DEFAULT 0,
        cache_write_tokens INTEGER NOT NULL DEFAULT 0,
        cost               REAL    NOT NULL DEFAULT 0,
        PRIMARY KEY (session_id, day, agent)
    ) WITHOUT ROWID
    """,
    "CREATE INDEX IF NOT EXISTS catalog_usage_by_day ON catalog_usage (day)",
    """
    CREATE VIRTUAL TABLE IF NOT EXISTS catalog_documents USING fts5 (
        session_id UNINDEXED, seq UNINDEXED, role UNINDEXED, rewound UNINDEXED,
        text, body UNINDEXED,
        tokenize = "unicode61 remove_diacritics 2 tokenchars '_'"
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS catalog_pending (
        rowid      INTEGER PRIMARY KEY,  -- as in catalog_documents
        session_id TEXT    NOT NULL,
        seq        INTEGER NOT NULL,
        role       TEXT    NOT NULL,
        rewound    INTEGER NOT NULL DEFAULT 0,
        text       TEXT    NOT NULL,
        body       TEXT
    )
    """,
)
"""The index's DDL, in order (every statement ``IF NOT EXISTS``: running it again changes
nothing)."""

_SEQ_BITS: Final = 32
_UTC: Final = _dt.timezone.utc
_strings_decoder: Final = msgspec.json.Decoder(list[str])


def create_index_tables(conn: sqlite3.Connection) -> None:
    """Create the index's tables and indexes (those missing) on ``conn``, in the caller's
    transaction when one is open."""
    for statement in INDEX_SCHEMA:
        conn.execute(statement)


def time_key(moment: _dt.datetime | None) -> str:
    """A time as the index keeps it: fixed-width UTC ISO 8601 text, which sorts as the
    instants do (naive times taken as UTC; None is ``''``, before every time)."""
    if moment is None:
        return ""
    if moment.tzinfo is not _UTC:  # (the codec's times are UTC already)
        moment = moment.replace(tzinfo=_UTC) if moment.tzinfo is None else moment.astimezone(_UTC)
    return moment.isoformat(timespec="microseconds")


def _time_of(key: str) -> _dt.datetime | None:
    return _dt.datetime.fromisoformat(key) if key else None


def _bind(value: str) -> str | bytes:
    """A string as SQLite can store it: itself, or its surrogatepass bytes (bound through
    ``CAST(? AS TEXT)``)."""
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogatepass")
    return value


def surrogate_text(raw: bytes) -> str:
    """Text as SQLite stored it, lone surrogates kept (a ``text_factory``)."""
    return raw.decode("utf-8", "surrogatepass")


def fetch_all(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[Any]:
    """Rows of a query; text holding lone surrogates is read back too."""
    try:
        return conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError as exc:
        if "decode to UTF-8" not in str(exc):
            raise
    conn.text_factory = surrogate_text
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.text_factory = str


def _casefold(value: str | None) -> str | None:
    return value.casefold() if isinstance(value, str) else value


# -- statements --------------------------------------------------------------------------------

_T = "CAST(? AS TEXT)"
# An append's change in the common case: counters, times and the status (a turn's start and
# end change it), one row written with its entries in the indexes on updated_key (the row is
# found by its id, and columns other indexes hold are left alone).
_BUMP = """
UPDATE catalog SET
    updated_key = CASE WHEN ?1 = '' THEN updated_key ELSE ?1 END,
    last_seq = max(last_seq, ?2),
    messages = messages + ?3,
    turns = turns + ?4,
    input_tokens = input_tokens + ?5,
    output_tokens = output_tokens + ?6,
    cache_read_tokens = cache_read_tokens + ?7,
    cache_write_tokens = cache_write_tokens + ?8,
    cost = cost + ?9,
    status = CASE WHEN ?13 IS NULL OR status IN ('shredded', 'archived') THEN status ELSE ?13 END
WHERE id = CAST(?10 AS TEXT) AND (?15 IS NULL OR last_seq = ?15)
RETURNING key, created_key = '' OR (user = '' AND ?11 != '') OR (title = '' AND ?12 != '')
    OR compacted_before < ?14, agents
"""
# The rest, when _BUMP says something else changes.
_SETTLE = """
UPDATE catalog SET
    created_key = CASE WHEN created_key = '' THEN ?2 ELSE created_key END,
    user = CASE WHEN user = '' THEN CAST(?3 AS TEXT) ELSE user END,
    title = CASE WHEN title = '' THEN CAST(?4 AS TEXT) ELSE title END,
    status = CASE WHEN ?5 IS NULL OR status IN ('shredded', 'archived') THEN status ELSE ?5 END,
    compacted_before = max(compacted_before, ?6)
WHERE key = ?1
"""
_INSERT_ROW = f"""
INSERT INTO catalog (id, created_key, updated_key, last_seq, messages, turns, input_tokens,
    output_tokens, cache_read_tokens, cache_write_tokens, cost, user, title, status,
    compacted_before)
VALUES ({_T}, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, {_T}, {_T}, coalesce(?, 'idle'), ?)
ON CONFLICT (id) DO NOTHING
RETURNING key
"""
_ADD_AGENT = f"INSERT OR IGNORE INTO catalog_agents (session_id, agent) VALUES ({_T}, {_T})"
_APPEND_AGENT = "UPDATE catalog SET agents = json_insert(agents, '$[#]', json(?)) WHERE key = ?"
_ADD_USAGE = f"""
INSERT INTO catalog_usage (session_id, day, agent, calls, input_tokens, output_tokens,
    cache_read_tokens, cache_write_tokens, cost)
VALUES ({_T}, ?, {_T}, ?, ?, ?, ?, ?, ?)
ON CONFLICT (session_id, day, agent) DO UPDATE SET
    calls = calls + excluded.calls,
    input_tokens = input_tokens + excluded.input_tokens,
    output_tokens = output_tokens + excluded.output_tokens,
    cache_read_tokens = cache_read_tokens + excluded.cache_read_tokens,
    cache_write_tokens = cache_write_tokens + excluded.cache_write_tokens,
    cost = cost + excluded.cost
"""
_ADD_DOCUMENT = (
    "INSERT OR REPLACE INTO catalog_pending "
    f"(rowid, session_id, seq, role, rewound, text, body) VALUES (?, {_T}, ?, ?, 0, ?, ?)"
)
_ADD_INDEXED = (
    "INSERT OR REPLACE INTO catalog_documents "
    f"(rowid, session_id, seq, role, rewound, text, body) VALUES (?, {_T}, ?, ?, 0, ?, ?)"
)
_DOCUMENT_TABLES: Final = ("catalog_documents", "catalog_pending")
_FLUSH = (
    "INSERT OR REPLACE INTO catalog_documents (rowid, session_id, seq, role, rewound, text, "
    "body) SELECT rowid, session_id, seq, role, rewound, text, body FROM catalog_pending "
    "WHERE rowid <= ?"
)
PENDING_AT_MOST: Final = 200
"""Documents a process's appends leave in ``catalog_pending`` before one of them moves them
into the FTS5 table (each FTS5 commit writes a segment: one per document would cost several
times the append; one per batch costs little per document)."""
_ROW_COLUMNS = (
    "c.id, c.created_key, c.updated_key, c.last_seq, c.title, c.title_set, c.user, c.tenant, "
    "c.tags, c.agents, c.status, c.messages, c.turns, c.input_tokens, c.output_tokens, "
    "c.cache_read_tokens, c.cache_write_tokens, c.cost, c.compacted_before, c.key"
)
_KEY_OF = f"SELECT key FROM catalog WHERE id = {_T}"
_ROW_OF = f"SELECT {_ROW_COLUMNS} FROM catalog AS c WHERE c.id = {_T}"
_ORDERS: Final = {
    "updated": ("c.updated_key", "DESC"),
    "created": ("c.created_key", "DESC"),
    "id": ("c.id", "ASC"),
}
_GROUPS: Final = {
    "tenant": "c.tenant",
    "user": "c.user",
    "agent": "u.agent",
    "day": "u.day",
}


def _filter_sql(where: Filter) -> tuple[str, list[Any], bool]:
    """``where`` as SQL on the catalog row ``c`` (``1`` when it holds for every row), its
    parameters, and whether it needs the ``agentsession_casefold`` function."""
    parts: list[str] = []
    params: list[Any] = []

    def one_of(column: str, values: Sequence[str]) -> None:
        parts.append(f"{column} IN ({', '.join([_T] * len(values))})")
        params.extend(_bind(v) for v in values)

    if where.prefix is not None:
        parts.append(
            f"substr(CAST(c.id AS BLOB), 1, length(CAST({_T} AS BLOB))) = CAST({_T} AS BLOB)"
        )
        params += [_bind(where.prefix)] * 2
    if where.ids is not None:
        one_of("c.id", where.ids)
    if where.user is not None:
        one_of("c.user", where.user)
    if where.tenant is not None:
        one_of("c.tenant", where.tenant)
    if where.status is not None:
        one_of("c.status", where.status)
    if where.agent is not None:
        parts.append(
            "EXISTS (SELECT 1 FROM catalog_agents AS a WHERE a.session_id = c.id AND a.agent "
            f"IN ({', '.join([_T] * len(where.agent))}))"
        )
        params.extend(_bind(v) for v in where.agent)
    for tag in where.tags or ():
        parts.append(
            f"EXISTS (SELECT 1 FROM catalog_tags AS t WHERE t.session_id = c.id AND t.tag = {_T})"
        )
        params.append(_bind(tag))
    for column, bounds in (("c.updated_key", where.updated), ("c.created_key", where.created)):
        if bounds is None:
            continue
        after, before = bounds
        if after is None and before is None:
            continue
        parts.append(f"{column} != ''")  # a row without the time matches only an open range
        if after is not None:
            parts.append(f"{column} >= ?")
            params.append(time_key(after))
        if before is not None:
            parts.append(f"{column} < ?")
            params.append(time_key(before))
    if where.title is not None:
        parts.append(f"instr(agentsession_casefold(c.title), {_T}) > 0")
        params.append(_bind(where.title.casefold()))
    return (" AND ".join(parts) or "1"), params, where.title is not None


def _usage_totals(
    input_tokens: int, output_tokens: int, cache_read: int, cache_write: int, cost: float
) -> UsageTotals:
    """The usage totals of a row's or a query's columns, in the order the tables keep them
    (input, output, cache-read and cache-write tokens, cost)."""
    return UsageTotals(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        cost=cost,
    )


def _row_of(values: Sequence[Any]) -> CatalogRow:
    (
        sid,
        created,
        updated,
        last_seq,
        title,
        title_set,
        user,
        tenant,
        tags,
        agents,
        status,
        messages,
        turns,
        input_tokens,
        output_tokens,
        cache_read,
        cache_write,
        cost,
        compacted,
        _key,
    ) = values
    return CatalogRow(
        id=sid,
        created_at=_time_of(created),
        updated_at=_time_of(updated),
        last_seq=last_seq,
        title=title,
        title_set=bool(title_set),
        user=user,
        tenant=tenant,
        tags=_strings(tags),
        agents=_strings(agents),
        status=status,
        messages=messages,
        turns=turns,
        usage=_usage_totals(input_tokens, output_tokens, cache_read, cache_write, cost),
        compacted_before=compacted,
    )


def _strings(raw: str) -> list[str]:
    """A JSON list of strings (written by the codec: lone surrogates escaped)."""
    try:
        return _strings_decoder.decode(raw)
    except (msgspec.DecodeError, UnicodeError):
        return [str(v) for v in decode(raw)]


def _document_rows(
    base: int, sid: str | bytes, change: CatalogChange, *, ascii_as_is: bool = False
) -> list[tuple[Any, ...]]:
    """The rows of ``change``'s documents (rowid, session id, seq, role, words, body).
    ``ascii_as_is`` (rows for the FTS5 table, never matched word by word): ASCII text is
    its own ``text``, without a ``body`` (FTS5's ``unicode61`` splits and folds ASCII
    exactly as :func:`~agentsession.listing.words` does)."""
    rows: list[tuple[Any, ...]] = []
    for doc in change.documents:
        if ascii_as_is and doc.text.isascii():
            rows.append((base | doc.seq, sid, doc.seq, doc.role, doc.text, None))
            continue
        text = " ".join(words(doc.text))
        body = None if text == doc.text else _bind(doc.text)
        rows.append((base | doc.seq, sid, doc.seq, doc.role, text, body))
    return rows


def _flag_rewound(conn: sqlite3.Connection, base: int, change: CatalogChange) -> None:
    """Flag the documents ``change``'s rewinds went back past (``base``: the session's rowid
    range)."""
    for to_seq, marker_seq in change.rewound:
        if marker_seq > to_seq + 1:
            for table in _DOCUMENT_TABLES:
                conn.execute(
                    f"UPDATE {table} SET rewound = 1 WHERE rowid > ? AND rowid < ? AND rewound = 0",
                    (base + to_seq, base + marker_seq),
                )


def _delete_documents(conn: sqlite3.Connection, key: int) -> None:
    """Delete the documents of the session whose catalog key is ``key`` (a rowid range)."""
    base = key << _SEQ_BITS
    for table in _DOCUMENT_TABLES:
        conn.execute(
            f"DELETE FROM {table} WHERE rowid > ? AND rowid < ?", (base, base + (1 << _SEQ_BITS))
        )


def _match_of(terms: Sequence[str]) -> str:
    """An FTS5 query holding every term (each a phrase of one word, quoted)."""
    return " ".join('"' + t.replace('"', '""') + '"' for t in terms)


class FreshRow(msgspec.Struct, kw_only=True):
    """A session's catalog row caught up in memory from its log, by a store that cannot write
    its catch-up (opened read-only): what the index's queries answer for the session instead
    of what its tables hold (:attr:`SqliteIndex.rows_behind`)."""

    key: int | None
    """The session's ``catalog.key`` (None: the tables hold no row for it)."""
    row: CatalogRow
    """The row as the catch-up would write it."""
    usage: tuple[UsageRow, ...] = ()
    """Its usage rows (what the tables hold with what the catch-up adds)."""
    rewound: tuple[tuple[int, int], ...] = ()
    """Rewind markers among the events read, as ``(to_seq, marker_seq)``: the session's
    documents between are ``rewound``."""

    def flags(self, seq: int) -> bool:
        """Whether a rewind among the events read went back past ``seq``."""
        return any(to < seq < at for to, at in self.rewound)


_USAGE_OF: Final = (
    "SELECT day, agent, calls, input_tokens, output_tokens, cache_read_tokens, "
    f"cache_write_tokens, cost FROM catalog_usage WHERE session_id = {_T}"
)
_KEYS: Final = " AND c.key {} IN (SELECT value FROM json_each(?))"
"""Rows whose ``catalog.key`` is (not) one of a JSON list's."""


def _keys_sql(keys: Sequence[int], negate: bool) -> tuple[str, list[Any]]:
    """A condition on the catalog row ``c`` (appended with ``AND``): its key is one of
    ``keys`` (``negate``: none of them; nothing when there are none)."""
    if not keys and negate:
        return "", []
    return _KEYS.format("NOT" if negate else ""), [encode(sorted(keys)).decode()]


def _merge_totals(*groups: Sequence[Totals]) -> builtins.list[Totals]:
    """Totals of disjoint sets of sessions summed by key."""
    merged: dict[str, Totals] = {}
    for group in groups:
        for t in group:
            old = merged.get(t.key)
            merged[t.key] = (
                t
                if old is None
                else Totals(
                    key=t.key,
                    sessions=old.sessions + t.sessions,
                    calls=old.calls + t.calls,
                    usage=old.usage + t.usage,
                )
            )
    return sort_totals(list(merged.values()))


# -- the index ---------------------------------------------------------------------------------


class SqliteIndex:
    """A :class:`~agentsession.indexing.CatalogIndex` in SQLite tables (:data:`INDEX_SCHEMA`,
    created by :func:`create_index_tables`), reached through ``connection`` (called for each
    operation: the calling thread's connection).

    :meth:`apply` writes into the caller's open transaction. The other writes
    (:meth:`set_fields`, :meth:`shredded`, :meth:`rebuild`, :meth:`delete`) do too when the
    connection is in one, and otherwise run in a ``BEGIN IMMEDIATE`` transaction of their own,
    holding ``write_lock`` (the process's lock for the file, when its writers share one).
    ``location`` names the file in errors."""

    def __init__(
        self,
        connection: Callable[[], sqlite3.Connection],
        *,
        location: str,
        write_lock: threading.Lock | None = None,
    ) -> None:
        self._connection = connection
        self._write_lock = write_lock
        self._pending = 0  # documents this object left in catalog_pending
        self.location = location
        """The database file, for errors."""
        self.catch_up: Callable[[], object] | None = None
        """What :meth:`sync` runs before the catalog is read (None: nothing)."""
        self.documents_behind: Callable[[], Sequence[tuple[str, Document, bool]]] | None = None
        """What :meth:`search` runs first when the store indexes documents apart from its
        appends: it indexes those its logs hold and the tables do not (where it may write)
        and returns what is still not indexed, as ``(session id, document, rewound)``,
        which the search matches word by word (None: the tables hold every document)."""
        self.rows_behind: Callable[[sqlite3.Connection], Sequence[FreshRow]] | None = None
        """What :meth:`query`, :meth:`search` and :meth:`totals` run first when the store
        cannot write its catch-up (opened read-only) and its appends leave rows behind their
        logs: the rows of those sessions caught up in memory (:meth:`caught_up`), read on
        the connection given in the query's own read transaction, so that the tables' rows
        and the logs are read as of one state of the file. The queries answer those
        sessions from them and every other from the tables (None: the tables are current,
        :meth:`sync` caught them up)."""

    # -- writing ----------------------------------------------------------------------------

    def _error(self, action: str, exc: sqlite3.Error) -> StorageError:
        return StorageError(f"{action} the catalog index in {self.location} failed: {exc}")

    @contextlib.contextmanager
    def _transaction(
        self, action: str, conn: sqlite3.Connection | None = None
    ) -> Iterator[sqlite3.Connection]:
        """The connection inside a write transaction: the caller's, or one of its own."""
        if conn is None:
            conn = self._connection()
        try:
            if conn.in_transaction:
                yield conn
                return
            lock = self._write_lock if self._write_lock is not None else contextlib.nullcontext()
            with lock:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        with contextlib.suppress(sqlite3.Error):
                            conn.execute("ROLLBACK")
                    raise
        except sqlite3.Error as exc:
            raise self._error(action, exc) from exc

    def apply(
        self,
        session_id: str,
        change: CatalogChange,
        conn: sqlite3.Connection | None = None,
        *,
        after: int | None = None,
    ) -> bool:
        """Apply an append's change to the session's row, usage rows and documents, inside the
        caller's open transaction on ``conn`` (default: this thread's connection); a
        ``sqlite3.Error`` is the caller's to handle (it rolls the append back). With
        ``after``, only when the row's last seq is ``after`` (0: it has no row yet): returns
        whether the change was applied."""
        if conn is None:
            conn = self._connection()
        sid = _bind(session_id)
        usage = change.usage
        user, title, status = _bind(change.user), _bind(change.title), change.status
        found = conn.execute(
            _BUMP,
            (
                time_key(change.last_time),
                change.last_seq,
                change.messages,
                change.turns,
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens,
                usage.cache_write_tokens,
                usage.cost,
                sid,
                user,
                title,
                status,
                change.compacted_before,
                after,
            ),
        ).fetchone()
        known: builtins.list[str] = []
        if found is None:
            if after:
                return False  # the row is elsewhere, or there is none
            inserted = conn.execute(
                _INSERT_ROW,
                (
                    sid,
                    time_key(change.first_time),
                    time_key(change.last_time),
                    change.last_seq,
                    change.messages,
                    change.turns,
                    usage.input_tokens,
                    usage.output_tokens,
                    usage.cache_read_tokens,
                    usage.cache_write_tokens,
                    usage.cost,
                    user,
                    title,
                    status,
                    change.compacted_before,
                ),
            ).fetchone()
            if inserted is None:
                return False  # (after=0) a row is there
            key = inserted[0]
        else:
            key, unsettled, listed = found
            if unsettled:
                created = time_key(change.first_time)
                conn.execute(_SETTLE, (key, created, user, title, status, change.compacted_before))
            if change.agents:
                known = _strings(listed)
        for agent in change.agents:
            if agent not in known and conn.execute(_ADD_AGENT, (sid, _bind(agent))).rowcount:
                conn.execute(_APPEND_AGENT, (encode(agent).decode(), key))
        for row in change.usage_rows:
            used = row.usage
            conn.execute(
                _ADD_USAGE,
                (
                    sid,
                    row.day,
                    _bind(row.agent),
                    row.calls,
                    used.input_tokens,
                    used.output_tokens,
                    used.cache_read_tokens,
                    used.cache_write_tokens,
                    used.cost,
                ),
            )
        base = key << _SEQ_BITS
        if change.documents:
            conn.executemany(_ADD_DOCUMENT, _document_rows(base, sid, change))
            self._pending += len(change.documents)
            if self._pending >= PENDING_AT_MOST:
                self.flush(conn)
        _flag_rewound(conn, base, change)
        return True

    def add_documents(
        self, session_id: str, change: CatalogChange, conn: sqlite3.Connection
    ) -> bool:
        """Index the documents of ``change`` (made from events of the session read back from
        its log) straight into the FTS5 table and flag what its rewinds went back past,
        inside the caller's open transaction on ``conn``: for a store that indexes documents
        apart from its appends, in batches. A document indexed already is replaced (its
        rowid is its seq), so indexing one twice changes nothing. Returns False when the
        session has no catalog row (nothing done: its documents need one)."""
        sid = _bind(session_id)
        row = conn.execute(_KEY_OF, (sid,)).fetchone()
        if row is None:
            return False
        base = row[0] << _SEQ_BITS
        if change.documents:
            rows = _document_rows(base, sid, change, ascii_as_is=True)
            conn.executemany(_ADD_INDEXED, rows)
            conn.executemany("DELETE FROM catalog_pending WHERE rowid = ?", [r[:1] for r in rows])
        _flag_rewound(conn, base, change)
        return True

    def flush(self, conn: sqlite3.Connection | None = None) -> None:
        """Move the documents waiting in ``catalog_pending`` into the FTS5 table (in the
        caller's transaction when one is open; search finds them either way)."""
        with self._transaction("indexing documents in", conn) as conn:
            top = conn.execute("SELECT max(rowid) FROM catalog_pending").fetchone()[0]
            if top is not None:
                conn.execute(_FLUSH, (top,))
                conn.execute("DELETE FROM catalog_pending WHERE rowid <= ?", (top,))
        self._pending = 0

    def _delete(self, conn: sqlite3.Connection, session_id: str) -> None:
        sid = _bind(session_id)
        row = conn.execute(_KEY_OF, (sid,)).fetchone()
        if row is not None:
            _delete_documents(conn, row[0])
            conn.execute("DELETE FROM catalog WHERE key = ?", (row[0],))
        for table in ("catalog_tags", "catalog_agents", "catalog_usage"):
            conn.execute(f"DELETE FROM {table} WHERE session_id = {_T}", (sid,))

    def delete(self, session_id: str) -> None:
        """Forget the session: its row, tags, agents, usage rows and documents (in the
        caller's transaction when one is open: the delete of its log)."""
        with self._transaction("deleting from") as conn:
            self._delete(conn, session_id)

    def set_fields(self, session_id: str, fields: Fields) -> None:
        sid = _bind(session_id)
        with self._transaction("writing") as conn:
            if conn.execute(_KEY_OF, (sid,)).fetchone() is None:
                return  # a session without a row gets none
            sets: list[str] = []
            params: list[Any] = []
            if fields.title is not None:
                sets += [f"title = {_T}", "title_set = ?"]
                params += [_bind(fields.title), int(bool(fields.title))]
            for name in ("user", "tenant"):
                value = getattr(fields, name)
                if value is not None:
                    sets.append(f"{name} = {_T}")
                    params.append(_bind(value))
            if sets:
                conn.execute(
                    f"UPDATE catalog SET {', '.join(sets)} WHERE id = {_T}", (*params, sid)
                )
            if fields.tags is not None:
                conn.execute(
                    f"UPDATE catalog SET tags = {_T} WHERE id = {_T}",
                    (encode(list(fields.tags)).decode(), sid),
                )
                conn.execute(f"DELETE FROM catalog_tags WHERE session_id = {_T}", (sid,))
                conn.executemany(
                    f"INSERT OR IGNORE INTO catalog_tags (session_id, tag) VALUES ({_T}, {_T})",
                    [(sid, _bind(tag)) for tag in fields.tags],
                )

    def shredded(self, session_id: str) -> None:
        sid = _bind(session_id)
        with self._transaction("writing") as conn:
            row = conn.execute(_KEY_OF, (sid,)).fetchone()
            if row is None:
                return
            conn.execute(
                "UPDATE catalog SET status = 'shredded', title = '', user = '', tenant = '', "
                "tags = '[]' "
                "WHERE key = ?",
                (row[0],),
            )
            conn.execute(f"DELETE FROM catalog_tags WHERE session_id = {_T}", (sid,))
            _delete_documents(conn, row[0])

    def rebuild(
        self, session_id: str, change: CatalogChange | None, fields: Fields, rewound: bool
    ) -> None:
        with self._transaction("rebuilding") as conn:
            self._delete(conn, session_id)
            if change is not None:
                self.apply(session_id, change, conn)
                self.set_fields(session_id, fields)

    # -- reading ----------------------------------------------------------------------------

    def indexed_seq(self, session_id: str, conn: sqlite3.Connection | None = None) -> int | None:
        """The last seq the session's row holds (None: it has none), read on ``conn``
        (default: this thread's connection)."""
        if conn is None:
            conn = self._connection()
        row = conn.execute(
            f"SELECT last_seq FROM catalog WHERE id = {_T}", (_bind(session_id),)
        ).fetchone()
        return None if row is None else int(row[0])

    def caught_up(
        self,
        session_id: str,
        change: CatalogChange | None,
        conn: sqlite3.Connection,
        *,
        fields: Fields | None = None,
        rebuilt: bool = False,
        shredded: bool = False,
    ) -> FreshRow | None:
        """The session's row and usage rows as its catch-up writes them, in memory: what the
        tables hold (nothing with ``rebuilt``: its log was made again) with ``change``
        applied as :meth:`apply` applies it (:func:`~agentsession.listing.apply_change`),
        then ``fields`` set and, when ``shredded``, cleared as :meth:`shredded` clears them;
        read on ``conn``, writing nothing (what a store opened read-only lists). None when
        there is no row to show."""
        sid = _bind(session_id)
        found = fetch_all(conn, _ROW_OF, (sid,))
        key = int(found[0][-1]) if found else None
        row = _row_of(found[0]) if found and not rebuilt else None
        usage: dict[tuple[str, str], UsageRow] = {}
        if row is not None:
            for day, agent, calls, i, o, r, w, cost in fetch_all(conn, _USAGE_OF, (sid,)):
                usage[(day, agent)] = UsageRow(
                    day=day,
                    agent=agent,
                    calls=calls,
                    usage=_usage_totals(i, o, r, w, cost),
                )
        if change is not None:
            row = apply_change(row, session_id, change)
            add_usage(usage, change)
        if row is None:
            return None
        row.id = session_id
        if fields is not None:
            set_row_fields(row, fields)
        if shredded:
            shred_row(row)
        # As the tables keep them: UTC, to the microsecond (what the other rows sort by).
        row.created_at = _time_of(time_key(row.created_at))
        row.updated_at = _time_of(time_key(row.updated_at))
        return FreshRow(
            key=key,
            row=row,
            usage=tuple(usage.values()),
            rewound=() if change is None else change.rewound,
        )

    @contextlib.contextmanager
    def _snapshot(self, action: str) -> Iterator[sqlite3.Connection]:
        """This thread's connection in one read transaction (the caller's when it holds
        one): what is read in it, of the tables and of the logs, is one state of the file."""
        conn = self._connection()
        if conn.in_transaction:
            yield conn
            return
        try:
            conn.execute("BEGIN")
        except sqlite3.Error as exc:
            raise self._error(action, exc) from exc
        try:
            yield conn
        finally:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")  # (it read only)

    def _fresh(self, conn: sqlite3.Connection) -> dict[str, FreshRow]:
        """:attr:`rows_behind` by session id (empty when it is None)."""
        if self.rows_behind is None:
            return {}
        return {f.row.id: f for f in self.rows_behind(conn)}

    def sync(self, store: IndexHost) -> None:
        """Run :attr:`catch_up` (set by a store whose appends leave sessions for a catch-up
        from their logs); nothing otherwise: the tables are written with each append."""
        if self.catch_up is not None:
            self.catch_up()

    def _read(self, action: str, sql: str, params: Sequence[Any], title: bool) -> list[Any]:
        conn = self._connection()
        try:
            if title:
                conn.create_function("agentsession_casefold", 1, _casefold, deterministic=True)
            return fetch_all(conn, sql, params)
        except sqlite3.Error as exc:
            raise self._error(action, exc) from exc

    def query(self, query: ListQuery) -> builtins.list[CatalogRow]:
        if self.rows_behind is None:
            return self._query_tables(query, ())
        with self._snapshot("listing") as conn:
            fresh = self._fresh(conn)
            rows = self._query_tables(query, [f.key for f in fresh.values() if f.key is not None])
        if not fresh:
            return rows
        # The tables' rows of the other sessions, and the fresh rows as the reference
        # selects them, in one order (both sides are after query.after already).
        picked = select([f.row for f in fresh.values()], query)
        return select([*rows, *picked], ListQuery(order=query.order, limit=query.limit))

    def _query_tables(self, query: ListQuery, skip: Sequence[int]) -> builtins.list[CatalogRow]:
        """The rows of ``query`` in the tables, but those whose ``catalog.key`` is in
        ``skip``."""
        column, direction = _ORDERS[query.order]
        where, params, title = _filter_sql(query.where)
        skipped, skip_params = _keys_sql(skip, negate=True)
        where += skipped
        params += skip_params
        if query.after is not None:
            value, sid = query.after
            mark = value if query.order == "id" else time_key(value)
            compare = "<" if direction == "DESC" else ">"
            where += f" AND ({column}, c.id) {compare} (?, {_T})"
            params += [_bind(mark), _bind(sid)]
        sql = (
            f"SELECT {_ROW_COLUMNS} FROM catalog AS c WHERE {where} "
            f"ORDER BY {column} {direction}, c.id {direction} LIMIT ?"
        )
        params.append(-1 if query.limit is None else query.limit)
        return [_row_of(r) for r in self._read("listing", sql, params, title)]

    def search(self, query: SearchQuery) -> builtins.list[Hit]:
        """Documents in the FTS5 table ranked by ``-bm25``, and those still pending or not
        indexed yet (:attr:`documents_behind`; matched word by word in their normalised
        text) with rank 0, after them."""
        if self.rows_behind is None:
            behind = () if self.documents_behind is None else self.documents_behind()
            hits = self._search_tables(query)
            if behind:
                hits = self._with_behind(query, hits, behind, {})
            return hits
        with self._snapshot("searching") as conn:
            fresh = self._fresh(conn)
            behind = () if self.documents_behind is None else self.documents_behind()
            hits = self._search_tables(query, [f.key for f in fresh.values() if f.key is not None])
            shown = [f.key for f in fresh.values() if f.key is not None and self._shows(f, query)]
            if shown:
                # The fresh rows' sessions, filtered by those rows (not the tables' ones).
                more = self._search_tables(
                    msgspec.structs.replace(query, where=Filter()), shown, only=True
                )
                for hit in more:
                    f = fresh.get(hit.session_id)
                    if f is not None:
                        compacted = hit.seq < f.row.compacted_before
                        rewound = hit.rewound or f.flags(hit.seq)
                        hits.append(
                            msgspec.structs.replace(hit, compacted=compacted, rewound=rewound)
                        )
                hits.sort(key=lambda h: (-h.rank, h.session_id, h.seq))
                del hits[query.limit :]
            if behind:
                hits = self._with_behind(query, hits, behind, fresh)
        return hits

    @staticmethod
    def _shows(fresh: FreshRow, query: SearchQuery) -> bool:
        """Whether ``query`` searches the session of the fresh row ``fresh``."""
        row = fresh.row
        return (
            row.status != "shredded"
            and (query.session_id is None or row.id == query.session_id)
            and matches(row, query.where)
        )

    def _with_behind(
        self,
        query: SearchQuery,
        hits: builtins.list[Hit],
        behind: Sequence[tuple[str, Document, bool]],
        fresh: Mapping[str, FreshRow],
    ) -> builtins.list[Hit]:
        """``hits`` (the tables', at most ``query.limit``) with the documents of ``behind``
        that match ``query``, in the order of the tables' hits (rank 0 for these); the
        sessions of ``fresh`` filtered by those rows rather than the tables'."""
        terms = builtins.set(query.terms)
        found = [
            (sid, doc, rewound)
            for sid, doc, rewound in behind
            if (query.session_id is None or sid == query.session_id)
            and terms.issubset(doc.text.split() if query.blind else words(doc.text))
        ]
        if not found:
            return hits
        ids = sorted({sid for sid, _, _ in found if sid not in fresh})
        compacted: dict[str, int] = {
            sid: f.row.compacted_before for sid, f in fresh.items() if self._shows(f, query)
        }
        if ids:
            where, params, title = _filter_sql(query.where)
            rows = self._read(
                "searching",
                f"SELECT c.id, c.compacted_before FROM catalog AS c WHERE {where} AND c.id IN "
                f"({', '.join([_T] * len(ids))})",
                [*params, *(_bind(i) for i in ids)],
                title,
            )
            compacted.update(rows)
        seen = {(h.session_id, h.seq) for h in hits}
        mark = None if query.after is None else (-query.after[0], query.after[1], query.after[2])
        for sid, doc, rewound in found:
            if sid not in compacted or (sid, doc.seq) in seen:
                continue
            if mark is not None and (-0.0, sid, doc.seq) <= mark:
                continue
            seen.add((sid, doc.seq))
            if sid in fresh:
                rewound = rewound or fresh[sid].flags(doc.seq)
            hits.append(
                document_hit(
                    sid, doc, query, 0.0, rewound=rewound, compacted=doc.seq < compacted[sid]
                )
            )
        hits.sort(key=lambda h: (-h.rank, h.session_id, h.seq))
        return hits[: query.limit]

    def _search_tables(
        self, query: SearchQuery, keys: Sequence[int] = (), *, only: bool = False
    ) -> builtins.list[Hit]:
        """The hits of the FTS5 table and of ``catalog_pending``, but in the sessions whose
        ``catalog.key`` is in ``keys`` (``only``: in those only)."""
        where, params, title = _filter_sql(query.where)
        restrict, restrict_params = _keys_sql(keys, negate=not only)
        where += restrict
        params += restrict_params
        session = ""
        session_params: list[Any] = []
        if query.session_id is not None:
            session = f" AND c.id = {_T}"
            session_params = [_bind(query.session_id)]
        pending_match = " AND ".join("instr(' ' || d.text || ' ', ?) > 0" for _ in query.terms)
        pending_params = [f" {t} " for t in query.terms]
        outer = ""
        outer_params: list[Any] = []
        if query.after is not None:
            rank, sid, seq = query.after
            outer = f"WHERE rank < ? OR (rank = ? AND (session_id, seq) > ({_T}, ?))"
            outer_params = [rank, rank, _bind(sid), seq]
        columns = (
            "d.session_id AS session_id, d.seq AS seq, d.role AS role, d.rewound AS rewound, "
            "d.text AS text, d.body AS body, {rank} AS rank, "
            "c.compacted_before AS compacted_before"
        )
        # The inner queries are kept whole (LIMIT -1 stops SQLite from flattening them), so
        # bm25() is computed where FTS5 allows it, not in the outer WHERE.
        sql = (
            f"SELECT * FROM (SELECT {columns.format(rank='-bm25(catalog_documents)')} "
            "FROM catalog_documents AS d JOIN catalog AS c ON c.key = d.rowid >> 32 "
            f"WHERE catalog_documents MATCH ? AND {where}{session} LIMIT -1 "
            f") UNION ALL SELECT * FROM (SELECT {columns.format(rank='0.0')} "
            "FROM catalog_pending AS d JOIN catalog AS c ON c.key = d.rowid >> 32 "
            f"WHERE {pending_match} AND {where}{session} LIMIT -1)"
        )
        sql = (
            "SELECT session_id, seq, role, rewound, text, body, rank, compacted_before "
            f"FROM ({sql}) {outer} ORDER BY rank DESC, session_id, seq LIMIT ?"
        )
        all_params = [
            _match_of(query.terms),
            *params,
            *session_params,
            *pending_params,
            *params,
            *session_params,
            *outer_params,
            query.limit,
        ]
        rows = self._read("searching", sql, all_params, title)
        hits: builtins.list[Hit] = []
        seen: builtins.set[tuple[str, int]] = builtins.set()
        for sid, seq, role, rewound, text, body, rank, compacted in rows:
            if (sid, seq) in seen:
                continue  # moved from pending while read (a document is in one table)
            seen.add((sid, seq))
            hits.append(
                Hit(
                    session_id=sid,
                    seq=seq,
                    role=role,
                    snippet=""
                    if query.blind
                    else snippet(text if body is None else body, query.terms),
                    rank=rank,
                    rewound=bool(rewound),
                    compacted=seq < compacted,
                )
            )
        return hits

    def totals(self, query: TotalsQuery) -> builtins.list[Totals]:
        if self.rows_behind is None:
            return self._totals_tables(query, ())
        with self._snapshot("totals of") as conn:
            fresh = self._fresh(conn)
            found = self._totals_tables(query, [f.key for f in fresh.values() if f.key is not None])
        if not fresh:
            return found
        rows = {sid: f.row for sid, f in fresh.items()}
        usage = [(sid, u) for sid, f in fresh.items() for u in f.usage]
        return _merge_totals(found, totals_of(usage, rows, query))

    def _totals_tables(self, query: TotalsQuery, skip: Sequence[int]) -> builtins.list[Totals]:
        """The totals of ``query`` in the tables, but of the sessions whose ``catalog.key``
        is in ``skip``."""
        where, params, title = _filter_sql(query.where)
        skipped, skip_params = _keys_sql(skip, negate=True)
        where += skipped
        params += skip_params
        group = _GROUPS[query.group_by]
        if query.since is not None:
            where += " AND u.day >= ?"
            params.append(query.since.isoformat())
        if query.until is not None:
            where += " AND u.day < ?"
            params.append(query.until.isoformat())
        sql = (
            f"SELECT {group} AS grp, count(DISTINCT u.session_id), sum(u.calls), "
            "sum(u.input_tokens), sum(u.output_tokens), sum(u.cache_read_tokens), "
            "sum(u.cache_write_tokens), sum(u.cost) "
            "FROM catalog_usage AS u JOIN catalog AS c ON c.id = u.session_id "
            f"WHERE {where} GROUP BY grp ORDER BY grp"
        )
        rows = self._read("totals of", sql, params, title)
        return [
            Totals(
                key=key,
                sessions=sessions,
                calls=calls,
                usage=_usage_totals(i, o, r, w, cost),
            )
            for key, sessions, calls, i, o, r, w, cost in rows
        ]
