"""PostgreSQL schemas for the benchmarks: each run works in a fresh schema and drops it."""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit, urlunsplit


def with_schema(dsn: str, schema: str) -> str:
    """``dsn`` with ``?schema=`` added to its query."""
    parts = urlsplit(dsn)
    query = "&".join(q for q in (parts.query, f"schema={schema}") if q)
    return urlunsplit(parts._replace(query=query))


def postgres_url(dsn: str) -> tuple[str, str]:
    """The URL of a new schema (``bench_<random>``) on ``dsn``'s server, and its name."""
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    return with_schema(dsn, schema), schema


def drop_schema(dsn: str, schema: str) -> None:
    """Drop ``schema`` and everything in it."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
