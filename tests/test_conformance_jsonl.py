"""The JSONL backend against the storage contract."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentsession import BaseStore, open_store
from agentsession.testing import StoreConformance


class TestJsonlStore(StoreConformance):
    def make_store(self, tmp_path: Path, **options: Any) -> BaseStore:
        return open_store(tmp_path / "sessions", **options)


class TestJsonlStoreFsync(StoreConformance):
    """The same contract with ``durability="fsync"``."""

    def make_store(self, tmp_path: Path, **options: Any) -> BaseStore:
        options.setdefault("durability", "fsync")
        return open_store(tmp_path / "sessions", **options)
