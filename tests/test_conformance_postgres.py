"""The PostgreSQL backend against the storage contract.

Needs a server: set ``AGENTSESSION_TEST_POSTGRES_DSN`` (CI uses
``postgresql://postgres@127.0.0.1:5432/test``). Every test gets schemas of its own, dropped
afterwards, so the tests run in parallel (``pytest -n 2``).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from agentsession import BaseStore, open_store
from agentsession.testing import StoreConformance

DSN = os.environ.get("AGENTSESSION_TEST_POSTGRES_DSN", "")
SKIP_REASON = (
    "set AGENTSESSION_TEST_POSTGRES_DSN (for example postgresql://postgres@127.0.0.1:5432/test) "
    "to run the PostgreSQL tests"
)

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not DSN, reason=SKIP_REASON)]


def new_schema_name() -> str:
    """A schema name no other test uses."""
    return "t_" + uuid.uuid4().hex[:16]


def url_with_schema(schema: str, dsn: str | None = None) -> str:
    """The test server's URL with ``?schema=`` added to its query."""
    parts = urlsplit(dsn or DSN)
    query = "&".join(q for q in (parts.query, f"schema={schema}") if q)
    return urlunsplit(parts._replace(query=query))


def drop_schemas(names: list[str]) -> None:
    """Drop test schemas (and everything in them)."""
    if not names:
        return
    import psycopg
    from psycopg import sql

    with psycopg.connect(DSN, autocommit=True) as conn:
        for name in names:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@contextlib.contextmanager
def fresh_schema_url() -> Iterator[str]:
    """The URL of a schema no other test uses, dropped afterwards."""
    name = new_schema_name()
    try:
        yield url_with_schema(name)
    finally:
        drop_schemas([name])


class TestPostgresStore(StoreConformance):
    """The whole contract against a real server, each test in fresh schemas."""

    @pytest.fixture(autouse=True)
    def _schemas(self) -> Iterator[None]:
        self.schemas: dict[Path, str] = {}
        try:
            yield
        finally:
            drop_schemas(list(self.schemas.values()))

    def make_store(self, tmp_path: Path, **options: Any) -> BaseStore:
        schema = self.schemas.setdefault(tmp_path, new_schema_name())
        options.setdefault("pool_max_size", 4)
        return open_store(url_with_schema(schema), **options)


class TestPostgresStoreFsync(TestPostgresStore):
    """The same contract with ``durability="fsync"`` (``synchronous_commit = on``)."""

    def make_store(self, tmp_path: Path, **options: Any) -> BaseStore:
        options.setdefault("durability", "fsync")
        return super().make_store(tmp_path, **options)


class TestPostgresStoreEncrypted(TestPostgresStore):
    """The whole contract again on an encrypted store."""

    encryption_key = bytes(range(32))

    def make_store(self, tmp_path: Path, **options: Any) -> BaseStore:
        options.setdefault("key", self.encryption_key)
        return super().make_store(tmp_path, **options)


class TestPostgresStorePartitioned(TestPostgresStore):
    """The whole contract on an events table hash-partitioned by session id."""

    def make_store(self, tmp_path: Path, **options: Any) -> BaseStore:
        options.setdefault("partitions", 4)
        return super().make_store(tmp_path, **options)


class TestPostgresStoreReadUrl(TestPostgresStore):
    """The whole contract with ``read_url`` naming the server itself: every read takes the
    read replicas' path (the server, not in recovery, counts as replayed as far as it has
    flushed). A real streaming replica is ``test_postgres_replicas.py``'s."""

    def make_store(self, tmp_path: Path, **options: Any) -> BaseStore:
        schema = self.schemas.setdefault(tmp_path, new_schema_name())
        options.setdefault("read_url", url_with_schema(schema))
        return super().make_store(tmp_path, **options)
