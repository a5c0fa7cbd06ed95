"""The PostgreSQL backend's tables, their numbered migrations, and the SQL run over them.

Every store lives in one schema (``agentsession`` unless the URL's ``?schema=`` or the
``schema`` option says otherwise). ``<schema>.schema_migrations`` records which migrations ran;
:func:`apply_migrations` runs the missing ones in order, all in one transaction that first takes
a transaction-scoped advisory lock derived from the schema name, so processes that open a fresh
schema at the same time wait for each other instead of racing on ``CREATE TABLE``. A store
whose schema is already current never takes that lock or runs DDL (so a role without ``CREATE``
privilege can use a schema an administrator migrated).

Version 1, the tables (``{s}`` is the schema)::

    {s}.sessions   one row per session that has events
        id              text COLLATE "C" PRIMARY KEY (byte order: fast, predictable)
        created_at      timestamptz   time of the first event
        updated_at      timestamptz   time of the last event (listing, TTL)
        last_seq        bigint        highest seq; the row lock serialises one session's writers
        compaction_seq  bigint        seq of the latest compaction marker that rebuilds the
                                      history on its own (0: none); opening reads from here
        metadata        jsonb         reserved for per-session values ('{}')
    {s}.events     the log
        session_id, seq PRIMARY KEY   reads are key-range scans of this index
        type, agent, "user" text, time timestamptz
        data, meta      jsonb         NULL when the event lives in raw_event instead
        raw_event       bytea         the whole event as agentsession JSON, only for events
                                      that JSONB/TEXT cannot hold (NUL, lone surrogates)
    {s}.meta       small persisted values: (kind, key) PRIMARY KEY, value text, updated_at

Version 2 adds ``{s}.sessions.life bigint`` (from the sequence ``{s}.session_lives``): one
number per life of a session id. A session deleted and created again gets a new row and so a
new life, which is how a session object that read the old life tells the two apart (existing
rows get distinct lives when the column is added).

Version 3 stores payloads byte-exact: ``{s}.events.data`` and ``meta`` become ``bytea``::

    data        the payload exactly as appended (the bytes of ``event.data``: key order,
                whitespace, number spelling and ``\\u0000`` or lone surrogate escapes kept);
                opaque to the server, so a sealed (encrypted) payload fits the same column
    meta        the event's meta as agentsession JSON; NULL when empty
    raw_event   only for an event whose type, agent or user TEXT cannot hold (NUL, lone
                surrogates): those fields and the time as an agentsession JSON object, with
                a readable copy (U+FFFD in place of what TEXT cannot hold) in ``type``,
                ``agent`` and ``"user"``. Rows version 2 put there hold the whole event, with
                ``data`` and ``meta`` NULL, and read back as before

The conversion runs in the migration's transaction: one ``ALTER TABLE ... TYPE bytea USING
convert_to(data::text, 'UTF8')`` rewrites the table once, and each payload keeps the JSONB
text form that version 2 stored and read back. JSON queries go through the function
``{s}.json_of(bytea) -> jsonb`` (NULL for bytes jsonb does not accept: ``\\u0000``, lone
surrogates, a sealed payload) and the view ``{s}.events_json`` (``data`` and ``meta`` as
jsonb); an expression index such as ``CREATE INDEX ON {s}.events
(({s}.json_of(data)->>'role'))`` serves a frequent query.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Final

import psycopg
from psycopg import sql

__all__ = [
    "APPEND_MANY_CATALOG_PARAMS",
    "APPEND_MANY_PARAMS",
    "CATALOG_PARAMS",
    "LATEST_VERSION",
    "MARKS_VERSION",
    "APPEND_CATALOG_PARAMS",
    "TAIL_EVENTS",
    "MIGRATIONS",
    "READABLE_AS_IT_IS",
    "CATALOG_VERSION",
    "Migration",
    "NOTIFY_ID_BYTES",
    "Statements",
    "apply_migrations",
    "event_partitions",
    "listen_lock_key",
    "partition_events_on",
    "notify_channel",
    "schema_version",
]


@dataclass(frozen=True)
class Migration:
    """One numbered step of the schema's history."""

    version: int
    """Applied in increasing order, once; recorded in ``schema_migrations``."""
    name: str
    """What it does, for people."""
    statements: tuple[str, ...]
    """DDL with ``{s}`` standing for the quoted schema name."""


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "sessions, events and meta tables",
        (
            """
            CREATE TABLE {s}.sessions (
                id text COLLATE "C" PRIMARY KEY,
                created_at timestamptz NOT NULL,
                updated_at timestamptz NOT NULL,
                last_seq bigint NOT NULL CHECK (last_seq > 0),
                compaction_seq bigint NOT NULL DEFAULT 0,
                metadata jsonb NOT NULL DEFAULT '{{}}'::jsonb
            )
            """,
            "CREATE INDEX sessions_updated_at_idx ON {s}.sessions (updated_at DESC, id DESC)",
            """
            CREATE TABLE {s}.events (
                session_id text COLLATE "C" NOT NULL,
                seq bigint NOT NULL CHECK (seq > 0),
                type text NOT NULL,
                agent text NOT NULL DEFAULT '',
                "user" text NOT NULL DEFAULT '',
                time timestamptz NOT NULL,
                data jsonb,
                meta jsonb,
                raw_event bytea,
                PRIMARY KEY (session_id, seq)
            )
            """,
            """
            CREATE TABLE {s}.meta (
                kind text COLLATE "C" NOT NULL,
                key text COLLATE "C" NOT NULL,
                value text NOT NULL,
                updated_at timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (kind, key)
            )
            """,
        ),
    ),
    Migration(
        2,
        "sessions.life: a number that changes when a session is deleted and created again",
        (
            "CREATE SEQUENCE {s}.session_lives AS bigint",
            """
            ALTER TABLE {s}.sessions
                ADD COLUMN life bigint NOT NULL DEFAULT nextval('{s}.session_lives')
            """,
        ),
    ),
    Migration(
        3,
        "events.data and events.meta as bytea: payloads stored byte-exact; json_of, events_json",
        (
            # One rewrite of the table; each payload keeps the text version 2 read back.
            """
            ALTER TABLE {s}.events
                ALTER COLUMN data TYPE bytea USING convert_to(data::text, 'UTF8'),
                ALTER COLUMN meta TYPE bytea USING convert_to(meta::text, 'UTF8')
            """,
            # IMMUTABLE (convert_from is only STABLE) so that it can back an expression index:
            # a database's encoding never changes.
            """
            CREATE FUNCTION {s}.json_of(payload bytea) RETURNS jsonb
            LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
            BEGIN
                RETURN convert_from(payload, 'UTF8')::jsonb;
            EXCEPTION WHEN others THEN
                RETURN NULL;
            END
            $$
            """,
            """
            CREATE VIEW {s}.events_json AS
            SELECT session_id, seq, type, agent, "user", time,
                   {s}.json_of(data) AS data, {s}.json_of(meta) AS meta
            FROM {s}.events
            """,
        ),
    ),
    Migration(
        4,
        "events.eid: the event's id (NULL for events stored before), to recognise retries",
        ("ALTER TABLE {s}.events ADD COLUMN eid text",),
    ),
    Migration(
        5,
        "the catalog (sessions' catalog columns, usage, documents) and full-text search",
        (
            # Existing rows get indexed = false (their catalog is built from their events by
            # the first listing or search, see PostgresIndex.sync); rows made from now on are
            # indexed unless a store with catalog=False writes them.
            """
            ALTER TABLE {s}.sessions
                ADD COLUMN title text NOT NULL DEFAULT '',
                ADD COLUMN title_set boolean NOT NULL DEFAULT false,
                ADD COLUMN tags text[] NOT NULL DEFAULT '{{}}',
                ADD COLUMN "user" text COLLATE "C" NOT NULL DEFAULT '',
                ADD COLUMN tenant text COLLATE "C" NOT NULL DEFAULT '',
                ADD COLUMN agents text[] NOT NULL DEFAULT '{{}}',
                ADD COLUMN status text COLLATE "C" NOT NULL DEFAULT 'idle',
                ADD COLUMN messages bigint NOT NULL DEFAULT 0,
                ADD COLUMN turns bigint NOT NULL DEFAULT 0,
                ADD COLUMN input_tokens bigint NOT NULL DEFAULT 0,
                ADD COLUMN output_tokens bigint NOT NULL DEFAULT 0,
                ADD COLUMN cache_read_tokens bigint NOT NULL DEFAULT 0,
                ADD COLUMN cache_write_tokens bigint NOT NULL DEFAULT 0,
                ADD COLUMN cost double precision NOT NULL DEFAULT 0,
                ADD COLUMN compacted_before bigint NOT NULL DEFAULT 0,
                ADD COLUMN indexed boolean NOT NULL DEFAULT false
            """,
            "ALTER TABLE {s}.sessions ALTER COLUMN indexed SET DEFAULT true",
            "CREATE INDEX sessions_created_at_idx ON {s}.sessions (created_at DESC, id DESC)",
            """
            CREATE INDEX sessions_tenant_idx ON {s}.sessions
                (tenant, updated_at DESC, id DESC)
            """,
            """
            CREATE INDEX sessions_user_idx ON {s}.sessions ("user", updated_at DESC, id DESC)
            """,
            "CREATE INDEX sessions_tags_idx ON {s}.sessions USING gin (tags)",
            "CREATE INDEX sessions_agents_idx ON {s}.sessions USING gin (agents)",
            "CREATE INDEX sessions_stale_idx ON {s}.sessions (id) WHERE NOT indexed",
            """
            CREATE TABLE {s}.usage (
                session_id text COLLATE "C" NOT NULL,
                day text COLLATE "C" NOT NULL,
                agent text COLLATE "C" NOT NULL,
                calls bigint NOT NULL DEFAULT 0,
                input_tokens bigint NOT NULL DEFAULT 0,
                output_tokens bigint NOT NULL DEFAULT 0,
                cache_read_tokens bigint NOT NULL DEFAULT 0,
                cache_write_tokens bigint NOT NULL DEFAULT 0,
                cost double precision NOT NULL DEFAULT 0,
                PRIMARY KEY (session_id, day, agent)
            )
            """,
            """
            CREATE TABLE {s}.documents (
                session_id text COLLATE "C" NOT NULL,
                seq bigint NOT NULL,
                role text NOT NULL,
                text text,
                words tsvector NOT NULL,
                rewound boolean NOT NULL DEFAULT false,
                PRIMARY KEY (session_id, seq)
            )
            """,
            "CREATE INDEX documents_words_idx ON {s}.documents USING gin (words)",
        ),
    ),
    Migration(
        6,
        "the catalog taken at turn boundaries: sessions.catalog_seq",
        (
            # The last seq the row's catalog holds. An append hands the catalog a change only
            # at a turn's start and end (and outside turns), applied where it continues
            # catalog_seq; appends between mark the row not indexed, and the next listing
            # catches it up from catalog_seq (PostgresIndex.sync). A row not indexed when the
            # column is added gets 0: rebuilt whole.
            "ALTER TABLE {s}.sessions ADD COLUMN catalog_seq bigint NOT NULL DEFAULT 0",
            "UPDATE {s}.sessions SET catalog_seq = last_seq WHERE indexed",
        ),
    ),
    Migration(
        7,
        "search documents indexed apart from the appends (search_dirty); partial filter indexes",
        (
            # The sessions whose search documents are behind their log: an append marks its
            # session with the seq before it (nothing written when it is marked already), and
            # a search first indexes the documents of the marked sessions from their logs
            # (PostgresIndex.index_documents). Appends write no documents (no GIN entries).
            """
            CREATE TABLE {s}.search_dirty (
                session_id text COLLATE "C" PRIMARY KEY,
                after bigint NOT NULL
            )
            """,
            # Version 6 kept the documents of a row up to its catalog_seq; those after it went
            # with the row's catch-up, which from now on leaves documents to the marks.
            """
            INSERT INTO {s}.search_dirty (session_id, after)
            SELECT id, catalog_seq FROM {s}.sessions WHERE NOT indexed AND catalog_seq > 0
            """,
            # An append updates the session row (its latest seq and time), which adds an entry
            # to each of the table's indexes: those that serve only a listing's filters leave
            # out the rows they never find (no tenant, no user, no tags, no agents), so the
            # sessions that have none cost their appends no entry there. The queries say so
            # (index.py).
            "DROP INDEX {s}.sessions_tenant_idx",
            """
            CREATE INDEX sessions_tenant_idx ON {s}.sessions (tenant, updated_at DESC, id DESC)
            WHERE tenant <> ''
            """,
            "DROP INDEX {s}.sessions_user_idx",
            """
            CREATE INDEX sessions_user_idx ON {s}.sessions ("user", updated_at DESC, id DESC)
            WHERE "user" <> ''
            """,
            "DROP INDEX {s}.sessions_tags_idx",
            "CREATE INDEX sessions_tags_idx ON {s}.sessions USING gin (tags) WHERE tags <> '{{}}'",
            "DROP INDEX {s}.sessions_agents_idx",
            """
            CREATE INDEX sessions_agents_idx ON {s}.sessions USING gin (agents)
            WHERE agents <> '{{}}'
            """,
        ),
    ),
)
"""Every migration, oldest first. Append new ones; never edit one that has shipped."""

_EVENTS_JSON_VIEW = MIGRATIONS[2].statements[2]
"""The view ``events_json`` (version 3), made again when the events table is laid out anew."""

LATEST_VERSION = MIGRATIONS[-1].version
"""The schema version this code reads and writes."""

CATALOG_VERSION = 5
"""The oldest schema version with the catalog's columns and tables (a store opened to read
lists and searches it; versions 6 and 7 add only what writers use)."""

MARKS_VERSION = 7
"""The schema version with ``search_dirty``: appends mark their sessions, and searches index
the marked sessions' documents first."""

_BOOTSTRAP = """
CREATE TABLE IF NOT EXISTS {s}.schema_migrations (
    version integer PRIMARY KEY,
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


def migration_lock_key(schema: str) -> int:
    """The 64-bit advisory lock key that serialises migrations of one schema."""
    digest = hashlib.sha256(b"agentsession-migrate\x00" + schema.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def notify_channel(schema: str) -> str:
    """The ``LISTEN``/``NOTIFY`` channel on which the appends to ``schema``'s sessions are
    announced: ``agentsession_`` and the first 16 hex digits of the SHA-256 of the schema
    name in UTF-8 (one channel per schema, lowercase ASCII, well under the 63-byte limit of a
    channel name whatever the schema is called)."""
    return "agentsession_" + hashlib.sha256(schema.encode()).hexdigest()[:16]


def listen_lock_key(schema: str) -> int:
    """The 64-bit advisory lock key whose holders are the connections listening on
    ``schema``'s channel: each holds it shared while it listens, and an append notifies only
    when it cannot take it exclusively for an instant (someone listens)."""
    digest = hashlib.sha256(b"agentsession-listen\x00" + schema.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


NOTIFY_ID_BYTES = 7900
"""The longest session id (in UTF-8 bytes) an append's notification carries: PostgreSQL's
payloads must be shorter than 8000 bytes, and the seq and a space come first. The
notification of an append to a session with a longer id carries the seq alone."""

# What each append statement's RETURNING adds (the sessions row's ``id`` and ``last_seq``
# after the append): the notification, sent when the transaction commits, of nothing when the
# statement writes nothing. Its payload is ``"<last_seq> <session id>"``, or ``"<last_seq>"``
# when the id is too long to fit. It is sent only while something listens (holds the listen
# lock shared; the exclusive try and its release are one expression, so nothing is held
# past it): a transaction that notifies takes a lock, at commit, that every other notifying
# transaction of the server waits for, through its WAL flush, so notifying when nobody
# listens would cost concurrent writers their group commits for nothing.
_NOTIFY = (
    """CASE WHEN CASE WHEN pg_try_advisory_lock({key}::bigint)
                 THEN pg_advisory_unlock({key}::bigint) IS NULL ELSE true END
     THEN pg_notify({channel}, CASE WHEN octet_length(id) <= """
    + str(NOTIFY_ID_BYTES)
    + """
                               THEN last_seq::text || ' ' || id ELSE last_seq::text END)
     END"""
)


def _render(template: str, schema: str) -> bytes:
    notify = sql.SQL(_NOTIFY).format(
        channel=sql.Literal(notify_channel(schema)), key=sql.Literal(listen_lock_key(schema))
    )
    return sql.SQL(template).format(s=sql.Identifier(schema), notify=notify).as_bytes(None)


def schema_version(
    conn: psycopg.Connection[Any], schema: str, *, assume_table: bool = False
) -> int:
    """The highest applied migration of ``schema`` (0 when it has none or does not exist).

    With ``assume_table`` it is one query, which raises
    :class:`psycopg.errors.UndefinedTable` when the schema has no ``schema_migrations``.
    """
    if not assume_table:
        table = sql.Identifier(schema, "schema_migrations").as_string(None)
        row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
        if row is None or not row[0]:
            return 0
    query = _render("SELECT coalesce(max(version), 0) FROM {s}.schema_migrations", schema)
    found = conn.execute(query).fetchone()
    return int(found[0]) if found else 0


def apply_migrations(
    conn: psycopg.Connection[Any], schema: str, *, partitions: int = 1
) -> list[int]:
    """Bring ``schema`` up to :data:`LATEST_VERSION` over ``conn`` (an autocommit connection);
    returns the versions applied now (empty when it was current). A schema created now gets
    its events table hash-partitioned into ``partitions`` (1: one plain table), in the same
    transaction (see :func:`partition_events_on`).

    Raises :class:`RuntimeError` when the schema is newer than this code knows; the caller
    translates it.
    """
    current = schema_version(conn, schema)
    if current > LATEST_VERSION:
        raise RuntimeError(
            f"schema {schema!r} is at version {current}, but this agentsession only knows "
            f"versions up to {LATEST_VERSION}: upgrade agentsession"
        )
    if current == LATEST_VERSION:
        return []
    applied: list[int] = []
    with conn.transaction():
        # Held until commit: concurrent openers queue here, then find the work done.
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (migration_lock_key(schema),))
        conn.execute(_render("CREATE SCHEMA IF NOT EXISTS {s}", schema))
        conn.execute(_render(_BOOTSTRAP, schema))
        done = {
            int(v)
            for (v,) in conn.execute(_render("SELECT version FROM {s}.schema_migrations", schema))
        }
        record = _render(
            "INSERT INTO {s}.schema_migrations (version, name) VALUES (%s, %s)", schema
        )
        for migration in MIGRATIONS:
            if migration.version in done:
                continue
            for statement in migration.statements:
                conn.execute(_render(statement, schema))
            conn.execute(record, (migration.version, migration.name))
            applied.append(migration.version)
        if not done and partitions != 1:  # created now: empty, so partitioned at no cost
            _repartition(conn, schema, partitions)
    return applied


# -- a partitioned events table ----------------------------------------------------------------

MAX_PARTITIONS = 1024
"""The most partitions :func:`partition_events_on` makes."""


def event_partitions(conn: psycopg.Connection[Any], schema: str) -> int:
    """How many hash partitions ``schema``'s events table has (1: a plain table)."""
    table = sql.Identifier(schema, "events").as_string(None)
    row = conn.execute(
        "SELECT c.relkind = 'p', (SELECT count(*) FROM pg_inherits i WHERE i.inhparent = c.oid)"
        " FROM pg_class c WHERE c.oid = to_regclass(%s)",
        (table,),
    ).fetchone()
    if row is None:
        raise RuntimeError(f"schema {schema!r} holds no events table")
    return int(row[1]) if row[0] else 1


def check_partitions(partitions: object) -> int:
    """``partitions`` when it is a whole number from 1 to :data:`MAX_PARTITIONS`; raises
    :class:`ValueError` otherwise."""
    if (
        not isinstance(partitions, int)
        or isinstance(partitions, bool)
        or not 1 <= partitions <= MAX_PARTITIONS
    ):
        raise ValueError(
            f"partitions must be a whole number from 1 to {MAX_PARTITIONS}, not {partitions!r}"
        )
    return partitions


def partition_events_on(conn: psycopg.Connection[Any], schema: str, partitions: int) -> int:
    """Lay ``schema``'s events table out as ``partitions`` hash partitions by session id (1:
    one plain table) over ``conn`` (an autocommit connection), in one transaction; returns how
    many events were copied (0 when the table already had that layout, and nothing was done).

    The transaction takes the schema's migration lock and ``ACCESS EXCLUSIVE`` locks on the
    sessions and events tables (appends and reads wait until it commits), creates the new
    table (same columns, primary key ``(session_id, seq)``, partitions
    ``events_<n>_<i>`` for ``MODULUS n, REMAINDER i``), copies every row, drops the old table,
    and creates the view ``events_json`` and the table's other indexes again (from their
    definitions: an index PostgreSQL cannot build on a partitioned table, such as a unique one
    without ``session_id``, fails the whole transaction, which changes nothing).
    """
    check_partitions(partitions)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (migration_lock_key(schema),))
        if event_partitions(conn, schema) == partitions:
            return 0
        return _repartition(conn, schema, partitions)


def _repartition(conn: psycopg.Connection[Any], schema: str, partitions: int) -> int:
    """The body of :func:`partition_events_on` (in the caller's transaction, holding the
    migration lock)."""
    conn.execute(_render("LOCK TABLE {s}.sessions, {s}.events IN ACCESS EXCLUSIVE MODE", schema))
    table = sql.Identifier(schema, "events").as_string(None)
    indexes = [
        str(r[0])
        for r in conn.execute(
            "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i "
            "WHERE i.indrelid = to_regclass(%s) AND NOT i.indisprimary ORDER BY i.indexrelid",
            (table,),
        )
    ]
    old = f"events_before_{partitions}"
    conn.execute(_render("DROP VIEW IF EXISTS {s}.events_json", schema))
    conn.execute(_render("ALTER TABLE {s}.events RENAME TO " + old, schema))
    conn.execute(_render("ALTER INDEX {s}.events_pkey RENAME TO " + old + "_pkey", schema))
    by_hash = " PARTITION BY HASH (session_id)" if partitions > 1 else ""
    conn.execute(
        _render(
            "CREATE TABLE {s}.events (LIKE {s}." + old + " INCLUDING DEFAULTS "
            "INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMMENTS)" + by_hash,
            schema,
        )
    )
    conn.execute(
        _render(
            "ALTER TABLE {s}.events ADD CONSTRAINT events_pkey PRIMARY KEY (session_id, seq)",
            schema,
        )
    )
    for i in range(partitions if partitions > 1 else 0):
        conn.execute(
            _render(
                f"CREATE TABLE {{s}}.events_{partitions}_{i} PARTITION OF {{s}}.events "
                f"FOR VALUES WITH (MODULUS {partitions}, REMAINDER {i})",
                schema,
            )
        )
    cursor = conn.execute(_render("INSERT INTO {s}.events SELECT * FROM {s}." + old, schema))
    copied = max(cursor.rowcount, 0)
    conn.execute(_render("DROP TABLE {s}." + old, schema))
    for definition in indexes:
        conn.execute(definition.encode())
    conn.execute(_render(_EVENTS_JSON_VIEW, schema))
    conn.execute(_render("ANALYZE {s}.events", schema))
    return copied


# -- the statements over these tables ----------------------------------------------------------

# The statements a session runs on every open, read and append use ``$n`` placeholders (they
# run on a psycopg ``RawCursor``: no placeholder conversion) and are prepared on first use; the
# store's other statements use psycopg's ``%s``.
#
# Reads return these columns first, in this order, in binary: ``data``, ``meta`` and
# ``raw_event`` arrive as the stored bytes, with nothing to convert on either side.
_EVENT_COLUMNS = 'seq, type, agent, "user", time, data, meta, raw_event, eid'
_EVENT_COLUMNS_E = 'e.seq, e.type, e.agent, e."user", e.time, e.data, e.meta, e.raw_event, e.eid'
_EVENT_COLUMNS_NO_ID = _EVENT_COLUMNS.replace("eid", "NULL::text")
_EVENT_COLUMNS_E_NO_ID = _EVENT_COLUMNS_E.replace("e.eid", "NULL::text")

READABLE_AS_IT_IS = 3
"""The oldest schema version a read-only store reads without migrating it: version 3 lacks
only ``events.eid`` (read as NULL: events stored without ids). Versions 1 and 2 store payloads
as jsonb and version 1 has no ``sessions.life``: those must be migrated first."""

TAIL_EVENTS = 64
"""How many of the latest events opening a session reads (``PostgresLog`` opens at the
tail; the full window is read when something needs it)."""

# The fast path for one event, when the session object knows the latest seq and the life:
# $1 id, $2 the new seq (latest + 1), $3 time, $4 the new seq when the event is a compaction
# marker that rebuilds the history (else 0), $5 life, $6 type, $7 agent, $8 user, $9 data,
# $10 meta, $11 raw_event, $12 eid. It stores the event only when the session row still says
# last_seq = $2 - 1 in life $5 (checked under the row's lock, so seqs stay gap-free across
# writers); otherwise it inserts nothing (rowcount 0). A plain UPDATE of the row: no
# speculative insertion, no evaluation of the life's sequence default, no separate lock record.
#
# Each append statement comes in two forms: without the catalog (``/*SET*/`` marks the row
# as not indexed: a store opened with catalog=False does not keep it, and an append inside a
# turn leaves it for the turn's end) and with it (the catalog's columns of the session row
# changed in the same UPDATE, and its usage rows written by a data-modifying CTE fed by the
# row the append wrote: one statement, so one round trip and one transaction). In a store
# that keeps a search index, both also mark the session for search (``/*CTES*/``, version 7).
# See APPEND_CATALOG_PARAMS.
_APPEND_NEXT = """
WITH s AS (
    UPDATE {s}.sessions AS s
    SET last_seq = $2::bigint, updated_at = $3,
        compaction_seq = greatest(compaction_seq, $4::bigint)/*SET*/
    WHERE id = $1 AND last_seq = $2::bigint - 1 AND life = $5::bigint
    RETURNING id/*RET*/, {notify}
)/*CTES*/
INSERT INTO {s}.events (session_id, seq, type, agent, "user", time, data, meta, raw_event, eid)
SELECT $1, $2::bigint, $6, $7, $8, $3, $9::bytea, $10::bytea, $11::bytea, $12 FROM s
"""

# One event (the general path): $1 id, $2 time, $3 marker (1 when the event is a compaction
# marker that rebuilds the history, else 0), $4 expect_seq (NULL: unconditional), $5 life
# (NULL: any), $6 type, $7 agent, $8 user, $9 data, $10 meta, $11 raw_event, $12 eid. With a
# life, the event is stored only in that life: a session row that is gone is not created
# again (nothing is written), so an append never lands in a life its writer has not read.
_APPEND_ONE = """
WITH s AS (
    INSERT INTO {s}.sessions AS s (id, created_at, updated_at, last_seq, compaction_seq/*COLS*/)
    SELECT $1, $2, $2, 1, $3::bigint/*VALS*/
    WHERE $4::bigint IS NULL OR ($4::bigint = 0 AND $5::bigint IS NULL)
       OR EXISTS (SELECT 1 FROM {s}.sessions WHERE id = $1)
    ON CONFLICT (id) DO UPDATE SET
        last_seq = s.last_seq + 1,
        updated_at = EXCLUDED.updated_at,
        compaction_seq = CASE WHEN EXCLUDED.compaction_seq > 0
                              THEN s.last_seq + 1
                              ELSE s.compaction_seq END/*SET*/
    WHERE $4::bigint IS NULL
       OR (s.last_seq = $4::bigint AND ($5::bigint IS NULL OR s.life = $5::bigint))
    RETURNING s.last_seq - 1 AS base, s.life AS life/*RET*/, {notify}
), inserted AS (
    INSERT INTO {s}.events (session_id, seq, type, agent, "user", time, data, meta, raw_event,
                            eid)
    SELECT $1, s.base + 1, $6, $7, $8, $2, $9::bytea, $10::bytea, $11::bytea, $12
    FROM s
)/*CTES*/
SELECT base, life FROM s
"""

# A batch: one array per column (sent in binary), unnested in order; the conditions are the
# one event's.
_APPEND_MANY = """
WITH s AS (
    INSERT INTO {s}.sessions AS s (id, created_at, updated_at, last_seq, compaction_seq/*COLS*/)
    SELECT %(id)s, %(first_time)s, %(last_time)s, %(n)s, %(mark)s/*VALS*/
    WHERE %(expect)s::bigint IS NULL OR (%(expect)s::bigint = 0 AND %(life)s::bigint IS NULL)
       OR EXISTS (SELECT 1 FROM {s}.sessions WHERE id = %(id)s)
    ON CONFLICT (id) DO UPDATE SET
        last_seq = s.last_seq + EXCLUDED.last_seq,
        updated_at = EXCLUDED.updated_at,
        compaction_seq = CASE WHEN EXCLUDED.compaction_seq > 0
                              THEN s.last_seq + EXCLUDED.compaction_seq
                              ELSE s.compaction_seq END/*SET*/
    WHERE %(expect)s::bigint IS NULL
       OR (s.last_seq = %(expect)s::bigint
           AND (%(life)s::bigint IS NULL OR s.life = %(life)s::bigint))
    RETURNING s.last_seq - %(n)s AS base, s.life AS life/*RET*/, {notify}
), inserted AS (
    INSERT INTO {s}.events (session_id, seq, type, agent, "user", time, data, meta, raw_event,
                            eid)
    SELECT %(id)s, s.base + b.ord, b.type, b.agent, b.usr, b.time, b.data, b.meta, b.raw,
           b.eid
    FROM s, unnest(%(types)b::text[], %(agents)b::text[], %(users)b::text[],
                   %(times)b::timestamptz[], %(datas)b::bytea[], %(metas)b::bytea[],
                   %(raws)b::bytea[], %(eids)b::text[])
            WITH ORDINALITY AS b(type, agent, usr, time, data, meta, raw, eid, ord)
)/*CTES*/
SELECT base, life FROM s
"""

CATALOG_PARAMS = (
    "c_messages",
    "c_turns",
    "c_input",
    "c_output",
    "c_cache_read",
    "c_cache_write",
    "c_cost",
    "c_agents",
    "c_user",
    "c_title",
    "c_status",
    "c_compacted",
    "u_days",
    "u_agents",
    "u_calls",
    "u_input",
    "u_output",
    "u_cache_read",
    "u_cache_write",
    "u_cost",
    "d_seqs",
    "d_roles",
    "d_texts",
    "d_words",
    "d_rewound",
    "d_language",
    "r_to",
    "r_marker",
    "c_first",
    "c_last",
)
"""The parameters the catalog adds to an append statement, in this order after the
statement's own (``$13`` on for the one-event statements; by name in the batch's): what one
:class:`~agentsession.listing.CatalogChange` adds to the session row (counts, usage, agents,
the user and title when the row has none, the status, the compaction point), its usage rows
per (day, agent) as arrays, its documents as arrays (``d_words``: the tsvector's text, made
by :func:`agentsession.backends.postgres.index.document_words`; ``d_language``: NULL, or the
text search configuration that parses it), its rewinds (``r_to``, ``r_marker``), and the
first and last seq it covers (``c_first``, ``c_last``: it is applied only where ``c_first``
follows the row's ``catalog_seq``)."""

# Whether the change continues what the row's catalog holds (``s`` is the row before the
# append): only then is it applied, and the row marked indexed.
_OK = "s.catalog_seq = %(c_first)s::bigint - 1"

# The row's catalog columns, as an append changes them (``s`` is the row before the append).
_CATALOG_SET = f""",
        messages = s.messages + CASE WHEN {_OK} THEN %(c_messages)s::bigint ELSE 0 END,
        turns = s.turns + CASE WHEN {_OK} THEN %(c_turns)s::bigint ELSE 0 END,
        input_tokens = s.input_tokens + CASE WHEN {_OK} THEN %(c_input)s::bigint ELSE 0 END,
        output_tokens = s.output_tokens + CASE WHEN {_OK} THEN %(c_output)s::bigint ELSE 0 END,
        cache_read_tokens = s.cache_read_tokens
            + CASE WHEN {_OK} THEN %(c_cache_read)s::bigint ELSE 0 END,
        cache_write_tokens = s.cache_write_tokens
            + CASE WHEN {_OK} THEN %(c_cache_write)s::bigint ELSE 0 END,
        cost = s.cost + CASE WHEN {_OK} THEN %(c_cost)s::float8 ELSE 0 END,
        agents = CASE WHEN NOT ({_OK}) OR %(c_agents)s::text[] <@ s.agents THEN s.agents
                      ELSE s.agents || ARRAY(
                          SELECT x.a FROM unnest(%(c_agents)s::text[]) WITH ORDINALITY AS x(a, o)
                          WHERE x.a <> ALL (s.agents) ORDER BY x.o) END,
        "user" = CASE WHEN s."user" = '' AND {_OK} THEN %(c_user)s::text ELSE s."user" END,
        title = CASE WHEN s.title = '' AND {_OK} THEN %(c_title)s::text ELSE s.title END,
        status = CASE WHEN NOT ({_OK}) OR %(c_status)s::text IS NULL
                           OR s.status IN ('shredded', 'archived')
                      THEN s.status ELSE %(c_status)s::text END,
        compacted_before = CASE WHEN {_OK}
                                THEN greatest(s.compacted_before, %(c_compacted)s::bigint)
                                ELSE s.compacted_before END,
        catalog_seq = CASE WHEN {_OK} THEN %(c_last)s::bigint ELSE s.catalog_seq END,
        indexed = {_OK}"""

_CATALOG_COLS = """, messages, turns, input_tokens, output_tokens,
        cache_read_tokens, cache_write_tokens, cost, agents, "user", title, status,
        compacted_before, catalog_seq, indexed"""

_CATALOG_VALS = """, %(c_messages)s::bigint, %(c_turns)s::bigint,
        %(c_input)s::bigint, %(c_output)s::bigint, %(c_cache_read)s::bigint,
        %(c_cache_write)s::bigint, %(c_cost)s::float8, %(c_agents)s::text[], %(c_user)s::text,
        %(c_title)s::text, coalesce(%(c_status)s::text, 'idle'), %(c_compacted)s::bigint,
        CASE WHEN %(c_first)s::bigint = 1 THEN %(c_last)s::bigint ELSE 0 END,
        %(c_first)s::bigint = 1"""

# The usage rows and documents of the batch, written only when the append wrote (``s`` has
# its row). A document's words become its tsvector: ``d_words`` is a tsvector's text (exact
# lexemes with positions) when ``d_language`` is NULL, else text the configuration parses.
_USAGE_CTE = """
    INSERT INTO {s}.usage AS u (session_id, day, agent, calls, input_tokens, output_tokens,
                                cache_read_tokens, cache_write_tokens, cost)
    SELECT %(id)s, x.day, x.agent, x.calls, x.i, x.o, x.cr, x.cw, x.cost
    FROM s, unnest(%(u_days)s::text[], %(u_agents)s::text[], %(u_calls)s::bigint[],
                   %(u_input)s::bigint[], %(u_output)s::bigint[], %(u_cache_read)s::bigint[],
                   %(u_cache_write)s::bigint[], %(u_cost)s::float8[])
            AS x(day, agent, calls, i, o, cr, cw, cost)
    WHERE s.caught
    ON CONFLICT (session_id, day, agent) DO UPDATE SET
        calls = u.calls + EXCLUDED.calls,
        input_tokens = u.input_tokens + EXCLUDED.input_tokens,
        output_tokens = u.output_tokens + EXCLUDED.output_tokens,
        cache_read_tokens = u.cache_read_tokens + EXCLUDED.cache_read_tokens,
        cache_write_tokens = u.cache_write_tokens + EXCLUDED.cache_write_tokens,
        cost = u.cost + EXCLUDED.cost"""

_DOCUMENTS_CTE = """
    INSERT INTO {s}.documents AS d (session_id, seq, role, text, words, rewound)
    SELECT %(id)s, x.seq, x.role, x.text,
           CASE WHEN %(d_language)s::regconfig IS NULL THEN x.w::tsvector
                ELSE to_tsvector(%(d_language)s::regconfig, x.w) END,
           x.rewound
    FROM s, unnest(%(d_seqs)s::bigint[], %(d_roles)s::text[], %(d_texts)s::text[],
                   %(d_words)s::text[], %(d_rewound)s::boolean[])
            AS x(seq, role, text, w, rewound)
    WHERE s.caught
    ON CONFLICT (session_id, seq) DO UPDATE SET
        role = EXCLUDED.role, text = EXCLUDED.text, words = EXCLUDED.words,
        rewound = EXCLUDED.rewound"""

# Documents already stored that a rewind of the batch went back past (those of the batch
# itself come flagged: a CTE does not see what a sibling inserts).
_REWIND_CTE = """
    UPDATE {s}.documents AS d SET rewound = true
    FROM s, unnest(%(r_to)s::bigint[], %(r_marker)s::bigint[]) AS x(t, m)
    WHERE s.caught AND d.session_id = %(id)s AND d.seq > x.t AND d.seq < x.m
      AND NOT d.rewound"""

_CATALOG_CTES = (
    f",\ncatalog_usage AS ({_USAGE_CTE}\n), catalog_documents AS ({_DOCUMENTS_CTE}\n), "
    f"catalog_rewound AS ({_REWIND_CTE}\n)"
)

# What an append changes in the catalog (version 7): the row's columns and the usage rows.
# Its documents are left to the search marks.
_APPEND_CATALOG_CTES = f",\ncatalog_usage AS ({_USAGE_CTE}\n)"

# The search mark (version 7): the session, with the seq before the append, unless it is
# marked already (a probe of the primary key; nothing written then). ``/*BASE*/`` is the
# template's expression of the seq before the append.
_MARK_CTE = """,
search_mark AS (
    INSERT INTO {s}.search_dirty (session_id, after) SELECT %(id)s, /*BASE*/ FROM s
    ON CONFLICT (session_id) DO NOTHING
)"""

APPEND_CATALOG_PARAMS: Final = tuple(
    name for name in CATALOG_PARAMS if not name.startswith(("d_", "r_"))
)
"""The parameters the catalog adds to an append statement (``$13`` on for the one-event
statements): :data:`CATALOG_PARAMS` but the documents and rewinds, which the search marks
leave to :meth:`~agentsession.backends.postgres.index.PostgresIndex.index_documents`."""


def _with_catalog(template: str, catalog: bool, raw: bool, base: str, marks: bool) -> str:
    """An append statement with the catalog's parts (``catalog``) or marking the row not
    indexed; ``marks``: with the search mark (``base``: the seq before the append); ``raw``:
    the catalog's parameters numbered after the statement's 12."""
    ctes = _MARK_CTE.replace("/*BASE*/", base) if marks else ""
    if not catalog:
        plain = template.replace("/*SET*/", ",\n        indexed = false")
        plain = plain.replace("/*COLS*/", ", indexed").replace("/*VALS*/", ", false")
        out = plain.replace("/*CTES*/", ctes).replace("/*RET*/", "")
    else:
        out = (
            template.replace("/*SET*/", _CATALOG_SET)
            .replace("/*RET*/", ", s.indexed AS caught")
            .replace("/*COLS*/", _CATALOG_COLS)
            .replace("/*VALS*/", _CATALOG_VALS)
            .replace("/*CTES*/", _APPEND_CATALOG_CTES + ctes)
        )
    if raw:
        numbers = {name: f"${i}" for i, name in enumerate(APPEND_CATALOG_PARAMS, start=13)}
        numbers["id"] = "$1"
        out = re.sub(r"%\((\w+)\)s", lambda m: numbers[m.group(1)], out)
    return out


# The latest events by key range (never the history before them) and the session's life:
# $1 id, $2 how many. No row: no session; one row with a NULL seq: a session without events.
# The events come from a LATERAL subquery kept apart by OFFSET 0, so that the bound on seq,
# which depends on the session row, is always part of the index condition: a plain join lets
# the planner (on a table without statistics yet) scan all the session's events by id and
# filter the seqs afterwards.
_OPEN_TAIL = f"""
SELECT {_EVENT_COLUMNS_E}, s.life
FROM {{s}}.sessions s
LEFT JOIN LATERAL (
    SELECT * FROM {{s}}.events x
    WHERE x.session_id = s.id AND x.seq > s.last_seq - $2::bigint OFFSET 0
) e ON true
WHERE s.id = $1 ORDER BY e.seq
"""

# The full window: from the latest compaction marker that rebuilds the history on its own
# (the same LATERAL fence as above).
_OPEN = f"""
SELECT {_EVENT_COLUMNS_E}, s.compaction_seq, s.life
FROM {{s}}.sessions s
LEFT JOIN LATERAL (
    SELECT * FROM {{s}}.events x
    WHERE x.session_id = s.id AND x.seq >= s.compaction_seq OFFSET 0
) e ON true
WHERE s.id = $1 ORDER BY e.seq
"""

# $1 id, $2 after: the events after ours, the latest seq and the life.
_REFRESH = f"""
SELECT {_EVENT_COLUMNS_E}, s.last_seq, s.life
FROM {{s}}.sessions s LEFT JOIN {{s}}.events e ON e.session_id = s.id AND e.seq > $2::bigint
WHERE s.id = $1 ORDER BY e.seq
"""

_READ = f"""
SELECT {_EVENT_COLUMNS} FROM {{s}}.events
WHERE session_id = $1 AND seq > $2::bigint ORDER BY seq LIMIT $3::bigint
"""

_READ_RANGE = f"""
SELECT {_EVENT_COLUMNS} FROM {{s}}.events
WHERE session_id = $1 AND seq > $2::bigint AND seq <= $3::bigint ORDER BY seq
"""

_LIST = """
SELECT id, updated_at, last_seq, created_at FROM {s}.sessions
WHERE %(prefix)s::text IS NULL OR starts_with(id, %(prefix)s::text)
ORDER BY updated_at DESC, id DESC LIMIT %(limit)s OFFSET %(offset)s
"""


def _positional(template: str) -> str:
    """``template`` with its named parameters (``%(name)s``, ``%(name)b``) as ``$1``,
    ``$2``... in the order of :func:`positional_names`: a long statement with named
    parameters is parsed again by psycopg at every execution (it caches only statements
    under 4096 characters), a ``$n`` one runs as it is on a raw cursor."""
    names = positional_names(template)
    return re.sub(r"%\((\w+)\)[sb]", lambda m: f"${names.index(m.group(1)) + 1}", template)


def positional_names(template: str) -> tuple[str, ...]:
    """The named parameters of ``template``, in the order of their first use (the order of
    the ``$n`` parameters :func:`_positional` gives it)."""
    return tuple(dict.fromkeys(re.findall(r"%\((\w+)\)[sb]", template)))


APPEND_MANY_PARAMS: Final = positional_names(_with_catalog(_APPEND_MANY, False, False, "", False))
"""The batch append statement's parameters, in ``$n`` order (without the catalog)."""
APPEND_MANY_CATALOG_PARAMS: Final = positional_names(
    _with_catalog(_APPEND_MANY, True, False, "", False)
)
"""The batch append statement's parameters, in ``$n`` order (with the catalog)."""


@dataclass(frozen=True)
class Statements:
    """Every statement the store runs, with its schema filled in (rendered once per store)."""

    append_next: bytes
    append_one: bytes
    append_many: bytes
    append_next_catalog: bytes
    append_one_catalog: bytes
    append_many_catalog: bytes
    open_tail: bytes
    open: bytes
    refresh: bytes
    read: bytes
    read_range: bytes
    list: bytes
    list_all: bytes
    exists: bytes
    last_append: bytes
    expired: bytes
    delete_session: bytes
    delete_events: bytes
    discard_events: bytes
    events_size: bytes
    delete_meta_of: bytes
    delete_usage: bytes
    delete_documents: bytes
    delete_mark: bytes
    marked: bytes
    lock_session: bytes
    documents_add: bytes
    mark_done: bytes
    mark_moved: bytes
    catalog_rebuild: bytes
    catalog_apply: bytes
    meta_get: bytes
    meta_list: bytes
    meta_list_kind: bytes
    meta_set: bytes
    meta_delete: bytes
    meta_add: bytes
    meta_cas_insert: bytes
    meta_cas_update: bytes
    meta_cas_delete: bytes

    @classmethod
    def for_schema(cls, schema: str, *, event_ids: bool = True, marks: bool = False) -> Statements:
        """The statements for the tables in ``schema``. Without ``event_ids`` (a version 3
        schema opened read-only, which has no ``events.eid``), reads return NULL for it.
        ``marks``: appends mark their sessions in ``search_dirty`` (version 7; a store that
        keeps a search index), whose documents a search indexes first."""
        before_next = "$2::bigint - 1"

        def render(template: str) -> bytes:
            if not event_ids:
                template = template.replace(_EVENT_COLUMNS_E, _EVENT_COLUMNS_E_NO_ID)
                template = template.replace(_EVENT_COLUMNS, _EVENT_COLUMNS_NO_ID)
            return _render(template, schema)

        return cls(
            append_next=render(_with_catalog(_APPEND_NEXT, False, True, before_next, marks)),
            append_one=render(_with_catalog(_APPEND_ONE, False, True, "s.base", marks)),
            append_many=render(
                _positional(_with_catalog(_APPEND_MANY, False, False, "s.base", marks))
            ),
            append_next_catalog=render(
                _with_catalog(_APPEND_NEXT, True, True, before_next, marks)
            ),
            append_one_catalog=render(_with_catalog(_APPEND_ONE, True, True, "s.base", marks)),
            append_many_catalog=render(
                _positional(_with_catalog(_APPEND_MANY, True, False, "s.base", marks))
            ),
            open_tail=render(_OPEN_TAIL),
            open=render(_OPEN),
            refresh=render(_REFRESH),
            read=render(_READ),
            read_range=render(_READ_RANGE),
            list=render(_LIST),
            list_all=render("SELECT id, updated_at, last_seq, created_at FROM {s}.sessions"),
            exists=render("SELECT 1 FROM {s}.sessions WHERE id = %s"),
            last_append=render("SELECT updated_at FROM {s}.sessions WHERE id = %s"),
            expired=render(
                "SELECT id FROM {s}.sessions WHERE updated_at < %s ORDER BY updated_at, id"
            ),
            delete_session=render(
                "DELETE FROM {s}.sessions WHERE id = %s RETURNING last_seq, {notify}"
            ),
            delete_events=render("DELETE FROM {s}.events WHERE session_id = %s"),
            # Archived events (never the last): the session row is locked first, as an append
            # locks it, so the latest seq read is the stored one.
            discard_events=render(
                "WITH s AS (SELECT last_seq FROM {s}.sessions WHERE id = %(id)s FOR UPDATE) "
                "DELETE FROM {s}.events WHERE session_id = %(id)s AND seq <= %(seq)s "
                "AND seq < (SELECT last_seq FROM s)"
            ),
            events_size=render(
                "SELECT coalesce(sum(pg_column_size(e.*)), 0) FROM {s}.events AS e "
                "WHERE e.session_id = %s"
            ),
            delete_usage=render("DELETE FROM {s}.usage WHERE session_id = %s"),
            delete_documents=render("DELETE FROM {s}.documents WHERE session_id = %s"),
            delete_mark=render("DELETE FROM {s}.search_dirty WHERE session_id = %s"),
            # The marked sessions after an id, in id order (a keyset scan of the marks).
            marked=render(
                "SELECT session_id, after FROM {s}.search_dirty WHERE session_id > %s "
                "ORDER BY session_id LIMIT 500"
            ),
            # Waits out an append in flight and keeps the next one waiting (appends lock the
            # row first): what is read then is the latest seq stored.
            lock_session=render("SELECT last_seq FROM {s}.sessions WHERE id = %s FOR UPDATE"),
            # A marked session's documents, and the rewinds among its events flagging those
            # stored before.
            documents_add=render(
                "WITH s AS (SELECT true AS caught), catalog_documents AS ("
                + _DOCUMENTS_CTE
                + "\n), catalog_rewound AS ("
                + _REWIND_CTE
                + "\n) SELECT 1"
            ),
            # The mark, once the documents up to the latest seq are indexed; or moved to the
            # seq they were indexed up to (appended to since). Only while it is the mark read.
            mark_done=render(
                "DELETE FROM {s}.search_dirty WHERE session_id = %(id)s AND after = %(after)s"
            ),
            mark_moved=render(
                "UPDATE {s}.search_dirty SET after = %(upto)s "
                "WHERE session_id = %(id)s AND after = %(after)s"
            ),
            # A rebuild's usage rows and documents (the row's columns are set apart).
            catalog_rebuild=render(
                "WITH s AS (SELECT true AS caught)" + _CATALOG_CTES + " SELECT 1"
            ),
            # A change caught up from the log: applied where it continues catalog_seq.
            catalog_apply=render(
                "WITH s AS (UPDATE {s}.sessions AS s SET last_seq = s.last_seq"
                + _CATALOG_SET.replace(f"indexed = {_OK}", "indexed = s.last_seq = %(c_last)s")
                + " WHERE id = %(id)s AND "
                + _OK.replace("s.catalog_seq", "catalog_seq")
                + " RETURNING s.id, true AS caught)"
                + _CATALOG_CTES
                + " SELECT 1 FROM s"
            ),
            delete_meta_of=render("DELETE FROM {s}.meta WHERE kind = ANY(%s) AND key = %s"),
            meta_get=render("SELECT value FROM {s}.meta WHERE kind = %s AND key = %s"),
            meta_list=render("SELECT kind, key, value FROM {s}.meta ORDER BY kind, key"),
            meta_list_kind=render(
                "SELECT kind, key, value FROM {s}.meta WHERE kind = %s ORDER BY key"
            ),
            meta_set=render(
                "INSERT INTO {s}.meta AS m (kind, key, value, updated_at) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (kind, key) DO UPDATE "
                "SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at"
            ),
            meta_delete=render("DELETE FROM {s}.meta WHERE kind = %s AND key = %s"),
            # Insert unless present, then return whichever value is stored (one statement).
            meta_add=render(
                "WITH ins AS (INSERT INTO {s}.meta (kind, key, value, updated_at) "
                "VALUES (%(kind)s, %(key)s, %(value)s, %(now)s) ON CONFLICT (kind, key) "
                "DO NOTHING RETURNING value) SELECT value FROM ins UNION ALL "
                "SELECT value FROM {s}.meta WHERE kind = %(kind)s AND key = %(key)s LIMIT 1"
            ),
            # Compare-and-set, one statement each; the row count says whether it held. Under
            # READ COMMITTED an UPDATE or DELETE racing another writer re-checks its WHERE
            # against the row that writer committed, and the INSERT waits for a racing one.
            meta_cas_insert=render(
                "INSERT INTO {s}.meta (kind, key, value, updated_at) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (kind, key) DO NOTHING"
            ),
            meta_cas_update=render(
                "UPDATE {s}.meta SET value = %s, updated_at = %s "
                "WHERE kind = %s AND key = %s AND value = %s"
            ),
            meta_cas_delete=render(
                "DELETE FROM {s}.meta WHERE kind = %s AND key = %s AND value = %s"
            ),
        )
