"""The memory backend against the storage contract."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentsession import BaseStore, open_store
from agentsession.testing import StoreConformance


class TestMemoryStore(StoreConformance):
    durable = False
    shared_across_processes = False

    def make_store(self, tmp_path: Path, **options: Any) -> BaseStore:
        return open_store("memory:", **options)


class TestMemoryStoreEncrypted(TestMemoryStore):
    """The whole contract again on an encrypted store."""

    encryption_key = bytes(range(32))

    def make_store(self, tmp_path: Path, **options: Any) -> BaseStore:
        options.setdefault("key", self.encryption_key)
        return super().make_store(tmp_path, **options)
