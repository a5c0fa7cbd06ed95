"""The JSONL backend against the storage contract."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentsession import BaseStore, open_store
from agentsession.backends.jsonl import JsonlStore
from agentsession.testing import StoreConformance


class TestJsonlStore(StoreConformance):
    def make_store(self, tmp_path: Path, **options: Any) -> BaseStore:
        return open_store(tmp_path / "sessions", **options)

    def session_file(self, store: BaseStore, session_id: str) -> Path | None:
        assert isinstance(store, JsonlStore)
        return Path(store.path_for(session_id))


class TestJsonlStoreFsync(TestJsonlStore):
    """The same contract with ``durability="fsync"``."""

    def make_store(self, tmp_path: Path, **options: Any) -> BaseStore:
        options.setdefault("durability", "fsync")
        return open_store(tmp_path / "sessions", **options)


class TestJsonlStoreQuarantine(TestJsonlStore):
    """The same contract with ``on_corrupt="quarantine"``: nothing valid is ever moved aside."""

    def make_store(self, tmp_path: Path, **options: Any) -> BaseStore:
        options.setdefault("on_corrupt", "quarantine")
        return open_store(tmp_path / "sessions", **options)


class TestJsonlStoreEncrypted(TestJsonlStore):
    """The whole contract again on an encrypted store."""

    encryption_key = bytes(range(32))

    def make_store(self, tmp_path: Path, **options: Any) -> BaseStore:
        options.setdefault("key", self.encryption_key)
        return super().make_store(tmp_path, **options)
