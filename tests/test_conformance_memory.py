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
