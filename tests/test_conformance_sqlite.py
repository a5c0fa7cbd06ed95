"""The SQLite backend against the storage contract."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentsession import BaseStore, open_store
from agentsession.testing import StoreConformance


class TestSqliteStore(StoreConformance):
    def make_store(self, tmp_path: Path, **options: Any) -> BaseStore:
        return open_store(f"sqlite:///{tmp_path}/sessions.db", **options)


class TestSqliteStoreFsync(StoreConformance):
    """The same contract with ``durability="fsync"`` (``PRAGMA synchronous=FULL``)."""

    def make_store(self, tmp_path: Path, **options: Any) -> BaseStore:
        options.setdefault("durability", "fsync")
        return open_store(f"sqlite:///{tmp_path}/sessions.db", **options)


class TestSqliteStoreEncrypted(TestSqliteStore):
    """The whole contract again on an encrypted store."""

    encryption_key = bytes(range(32))

    def make_store(self, tmp_path: Path, **options: Any) -> BaseStore:
        options.setdefault("key", self.encryption_key)
        return super().make_store(tmp_path, **options)
