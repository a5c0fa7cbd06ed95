"""The Redis backend against the storage contract: on the local server (a key prefix per
test, its keys deleted afterwards) and on a 3-primary Redis Cluster the tests start on
loopback ports (``redis-server --cluster-enabled yes``, ``redis-cli --cluster create``).

Skipped with the reason when no server answers at ``AGENTSESSION_TEST_REDIS_URL`` (default
``redis://127.0.0.1:6379/0``) or redis-py is missing; the Cluster needs ``redis-server`` and
``redis-cli`` on the PATH.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentsession import BaseStore, open_store
from agentsession.testing import StoreConformance

from .redis_servers import (
    SERVER_SKIP,
    SKIP_REASON,
    cluster_url,
    drop_prefixes,
    new_prefix,
    redis_cluster,
    requires_redis,
    url_with_prefix,
)

pytestmark = [pytest.mark.redis, requires_redis]


class TestRedisStore(StoreConformance):
    """The whole contract against the local server, each test under a prefix of its own."""

    base_url: str | None = None

    @pytest.fixture(autouse=True)
    def _prefixes(self) -> Iterator[None]:
        self.prefixes: dict[Path, str] = {}
        try:
            yield
        finally:
            drop_prefixes(list(self.prefixes.values()), self.base_url)

    def make_store(self, tmp_path: Path, **options: Any) -> BaseStore:
        prefix = self.prefixes.setdefault(tmp_path, new_prefix())
        url = url_with_prefix(prefix, self.base_url) + "&lock_ttl=2"
        return open_store(url, **options)


class TestRedisStoreEncrypted(TestRedisStore):
    """The whole contract again on an encrypted store."""

    encryption_key = bytes(range(32))

    def make_store(self, tmp_path: Path, **options: Any) -> BaseStore:
        options.setdefault("key", self.encryption_key)
        return super().make_store(tmp_path, **options)


@pytest.fixture(scope="class")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A 3-primary Redis Cluster on loopback ports for the class, killed afterwards."""
    if SERVER_SKIP:
        pytest.skip(SERVER_SKIP)
    with redis_cluster(tmp_path_factory.mktemp("cluster")) as nodes:
        yield cluster_url(nodes)


@pytest.mark.slow
@pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON or "-")
class TestRedisClusterStore(TestRedisStore):
    """The whole contract on a Redis Cluster (every key of a session in one slot, the
    catalog in another)."""

    @pytest.fixture(autouse=True)
    def _cluster(self, cluster: str) -> None:
        self.base_url = cluster
