"""Store URLs of each backend for tests that run on several (PostgreSQL in a schema of its own,
dropped afterwards; skipped without ``AGENTSESSION_TEST_POSTGRES_DSN``; Redis under a key prefix of
its own, skipped without a server)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .redis_servers import SKIP_REASON as REDIS_SKIP
from .redis_servers import drop_prefixes, new_prefix, url_with_prefix
from .test_conformance_postgres import DSN, drop_schemas, new_schema_name, url_with_schema


def store_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """Yield a URL of ``backend`` (``memory``, ``jsonl``, ``sqlite``, ``postgres`` or
    ``redis``, under a key prefix of its own, deleted afterwards): a
    generator for a fixture to ``yield from``."""
    if backend == "memory":
        yield "memory:"
    elif backend == "jsonl":
        yield str(tmp_path / "store")
    elif backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
    elif backend == "redis":
        if REDIS_SKIP:
            pytest.skip(REDIS_SKIP)
        prefix = new_prefix()
        try:
            yield url_with_prefix(prefix) + "&lock_ttl=2"
        finally:
            drop_prefixes([prefix])
    else:
        if not DSN:
            pytest.skip("set AGENTSESSION_TEST_POSTGRES_DSN to run the PostgreSQL cases")
        schema = new_schema_name()
        try:
            yield url_with_schema(schema)
        finally:
            drop_schemas([schema])
