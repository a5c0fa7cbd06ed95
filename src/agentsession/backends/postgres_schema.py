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
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

__all__ = [
    "LATEST_VERSION",
    "MIGRATIONS",
    "Migration",
    "Statements",
    "apply_migrations",
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
)
"""Every migration, oldest first. Append new ones; never edit one that has shipped."""

LATEST_VERSION = MIGRATIONS[-1].version
"""The schema version this code reads and writes."""

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


def _render(template: str, schema: str) -> bytes:
    return sql.SQL(template).format(s=sql.Identifier(schema)).as_bytes(None)


def schema_version(conn: psycopg.Connection[Any], schema: str) -> int:
    """The highest applied migration of ``schema`` (0 when it has none or does not exist)."""
    table = sql.Identifier(schema, "schema_migrations").as_string(None)
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
    if row is None or not row[0]:
        return 0
    query = _render("SELECT coalesce(max(version), 0) FROM {s}.schema_migrations", schema)
    found = conn.execute(query).fetchone()
    return int(found[0]) if found else 0


def apply_migrations(conn: psycopg.Connection[Any], schema: str) -> list[int]:
    """Bring ``schema`` up to :data:`LATEST_VERSION` over ``conn`` (an autocommit connection);
    returns the versions applied now (empty when it was current).

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
    return applied


# -- the statements over these tables ----------------------------------------------------------

# Reads return these columns first, in this order (the backend builds events from them).
# The JSONB values come as text: the client keeps them as they are (msgspec.Raw), without a
# per-row loader or parse.
_EVENT_COLUMNS = 'seq, type, agent, "user", time, data::text, meta::text, raw_event'
_EVENT_COLUMNS_E = (
    'e.seq, e.type, e.agent, e."user", e.time, e.data::text, e.meta::text, e.raw_event'
)

_UPSERT_SESSION = """
    INSERT INTO {s}.sessions AS s (id, created_at, updated_at, last_seq, compaction_seq)
    SELECT %(id)s, %(first_time)s, %(last_time)s, %(n)s, %(mark)s
    WHERE %(expect)s::bigint IS NULL OR %(expect)s::bigint = 0
       OR EXISTS (SELECT 1 FROM {s}.sessions WHERE id = %(id)s)
    ON CONFLICT (id) DO UPDATE SET
        last_seq = s.last_seq + EXCLUDED.last_seq,
        updated_at = EXCLUDED.updated_at,
        compaction_seq = CASE WHEN EXCLUDED.compaction_seq > 0
                              THEN s.last_seq + EXCLUDED.compaction_seq
                              ELSE s.compaction_seq END
    WHERE %(expect)s::bigint IS NULL
       OR (s.last_seq = %(expect)s::bigint
           AND (%(life)s::bigint IS NULL OR s.life = %(life)s::bigint))
    RETURNING s.last_seq - %(n)s AS base, s.life AS life
"""

# One event (the common case): scalar parameters, which cost far less to send than arrays.
_APPEND_ONE = f"""
WITH s AS ({_UPSERT_SESSION}), inserted AS (
    INSERT INTO {{s}}.events (session_id, seq, type, agent, "user", time, data, meta, raw_event)
    SELECT %(id)s, s.base + 1, %(type)s, %(agent)s, %(user)s, %(time)s,
           %(data)s::jsonb, %(meta)s::jsonb, %(raw)s::bytea
    FROM s
)
SELECT base, life FROM s
"""

# A batch: one array per column (sent in binary), unnested in order.
_APPEND_MANY = f"""
WITH s AS ({_UPSERT_SESSION}), inserted AS (
    INSERT INTO {{s}}.events (session_id, seq, type, agent, "user", time, data, meta, raw_event)
    SELECT %(id)s, s.base + b.ord, b.type, b.agent, b.usr, b.time, b.data::jsonb, b.meta::jsonb,
           b.raw
    FROM s, unnest(%(types)b::text[], %(agents)b::text[], %(users)b::text[],
                   %(times)b::timestamptz[], %(datas)b::text[], %(metas)b::text[],
                   %(raws)b::bytea[])
            WITH ORDINALITY AS b(type, agent, usr, time, data, meta, raw, ord)
)
SELECT base, life FROM s
"""

_OPEN = f"""
SELECT {_EVENT_COLUMNS_E}, s.compaction_seq, s.life
FROM {{s}}.sessions s JOIN {{s}}.events e ON e.session_id = s.id AND e.seq >= s.compaction_seq
WHERE s.id = %s ORDER BY e.seq
"""

_REFRESH = f"""
SELECT {_EVENT_COLUMNS_E}, s.last_seq, s.life
FROM {{s}}.sessions s LEFT JOIN {{s}}.events e ON e.session_id = s.id AND e.seq > %s
WHERE s.id = %s ORDER BY e.seq
"""

_READ = f"""
SELECT {_EVENT_COLUMNS} FROM {{s}}.events
WHERE session_id = %s AND seq > %s ORDER BY seq LIMIT %s
"""

_READ_RANGE = f"""
SELECT {_EVENT_COLUMNS} FROM {{s}}.events
WHERE session_id = %s AND seq > %s AND seq <= %s ORDER BY seq
"""

_LIST = """
SELECT id, updated_at, last_seq FROM {s}.sessions
WHERE %(prefix)s::text IS NULL OR starts_with(id, %(prefix)s::text)
ORDER BY updated_at DESC, id DESC LIMIT %(limit)s OFFSET %(offset)s
"""


@dataclass(frozen=True)
class Statements:
    """Every statement the store runs, with its schema filled in (rendered once per store)."""

    append_one: bytes
    append_many: bytes
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
    delete_meta_of: bytes
    meta_get: bytes
    meta_set: bytes
    meta_delete: bytes

    @classmethod
    def for_schema(cls, schema: str) -> Statements:
        """The statements for the tables in ``schema``."""

        def render(template: str) -> bytes:
            return _render(template, schema)

        return cls(
            append_one=render(_APPEND_ONE),
            append_many=render(_APPEND_MANY),
            open=render(_OPEN),
            refresh=render(_REFRESH),
            read=render(_READ),
            read_range=render(_READ_RANGE),
            list=render(_LIST),
            list_all=render("SELECT id, updated_at, last_seq FROM {s}.sessions"),
            exists=render("SELECT 1 FROM {s}.sessions WHERE id = %s"),
            last_append=render("SELECT updated_at FROM {s}.sessions WHERE id = %s"),
            expired=render(
                "SELECT id FROM {s}.sessions WHERE updated_at < %s ORDER BY updated_at, id"
            ),
            delete_session=render("DELETE FROM {s}.sessions WHERE id = %s RETURNING last_seq"),
            delete_events=render("DELETE FROM {s}.events WHERE session_id = %s"),
            delete_meta_of=render("DELETE FROM {s}.meta WHERE kind = ANY(%s) AND key = %s"),
            meta_get=render("SELECT value FROM {s}.meta WHERE kind = %s AND key = %s"),
            meta_set=render(
                "INSERT INTO {s}.meta AS m (kind, key, value, updated_at) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (kind, key) DO UPDATE "
                "SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at"
            ),
            meta_delete=render("DELETE FROM {s}.meta WHERE kind = %s AND key = %s"),
        )
