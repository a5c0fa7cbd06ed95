"""``agentsession.catalog.CatalogDefaults``: what a catalog derives instead of writing, and the
memory backend as the reference that writes only its own members."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path

import pytest

import agentsession.backends.memory as memory
from agentsession import BaseSession, BaseStore, Event
from agentsession.catalog import (
    Catalog,
    CatalogDefaults,
    MetaInMemory,
    StoreParts,
    expired_among,
    page_of,
)
from agentsession.contract import SessionInfo
from agentsession.errors import UsageError
from agentsession.locks import ThreadLocker
from agentsession.session import SessionHost

UTC = dt.timezone.utc
BASE = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)

WRITTEN = {"location", "url", "open_session", "exists", "list_all", "last_append", "delete"}
"""What a catalog deriving from CatalogDefaults writes itself."""


def _protocol_members() -> set[str]:
    return {name for name in vars(Catalog) if not name.startswith("_")}


def test_the_defaults_and_the_written_members_make_the_whole_protocol() -> None:
    members = _protocol_members()
    assert len(members) == 16
    defaults = {name for name in vars(CatalogDefaults) if not name.startswith("_")}
    assert defaults - {"list_all", "last_append"} == members - WRITTEN
    assert (WRITTEN - {"list_all"}) | (defaults - {"list_all"}) == members
    assert CatalogDefaults.__abstractmethods__ == {"list_all", "last_append"}


def test_the_reference_backend_writes_only_its_own_members_in_under_200_lines() -> None:
    own = {name for name in vars(memory.MemoryCatalog) if not name.startswith("_")}
    assert own - {"meta"} == WRITTEN  # meta: the store's MetaStorage, handed to StoreParts
    assert issubclass(memory.MemoryCatalog, CatalogDefaults)
    lines = Path(memory.__file__).read_text(encoding="utf-8").count("\n")
    assert lines < 200, lines


def test_meta_in_memory_is_still_importable_from_the_memory_backend() -> None:
    assert memory.MetaInMemory is MetaInMemory
    assert "MetaInMemory" in memory.__all__


class _Listed(CatalogDefaults):
    """A catalog of fixed sessions, all the rest from the defaults."""

    location = url = "listed:"

    def __init__(self, times: dict[str, dt.datetime]) -> None:
        self.times = times
        self.deleted: list[str] = []

    def open_session(self, store: SessionHost, session_id: str) -> BaseSession:
        raise UsageError("a listing only")

    def exists(self, session_id: str) -> bool:
        return session_id in self.times

    def list_all(self) -> list[SessionInfo]:
        return [SessionInfo(id=sid, updated_at=when) for sid, when in self.times.items()]

    def last_append(self, session_id: str) -> dt.datetime | None:
        return self.times.get(session_id)

    def delete(self, session_id: str, meta_kinds: Sequence[str]) -> bool:
        self.deleted.append(session_id)
        return self.times.pop(session_id, None) is not None


def test_the_defaults_page_and_expire_the_listing() -> None:
    times = {f"s{i}": BASE + dt.timedelta(minutes=i % 4) for i in range(10)}
    catalog = _Listed(times)
    every = catalog.list_all()
    for prefix in (None, "s1", "s", "x"):
        for limit in (None, 0, 2, 20):
            for offset in (0, 3, 15):
                page = catalog.list_page(prefix, limit, offset)
                assert page == page_of(every, prefix, limit, offset)
    assert [i.id for i in catalog.list_page(None, 3, 0)] == ["s7", "s3", "s6"]
    cutoff = BASE + dt.timedelta(minutes=2)
    expired = catalog.expired_ids(cutoff)
    assert sorted(expired) == sorted(expired_among(every, catalog.last_append, cutoff))
    assert sorted(expired) == ["s0", "s1", "s4", "s5", "s8", "s9"]


def test_the_defaults_check_ids_and_do_nothing_for_the_life_cycle() -> None:
    catalog = _Listed({"a": BASE})
    assert catalog.resolve("a", "open") == "a"
    with pytest.raises(UsageError):
        catalog.resolve("", "create")
    assert catalog.cache_key("a") == "a"
    assert catalog.storage_bytes() is None
    catalog.set_last_activity("a", BASE + dt.timedelta(days=1))
    catalog.clean_crash_leftovers()
    catalog.after_fork()
    catalog.close()
    assert catalog.last_append("a") == BASE  # the last event's time is the last activity


def test_a_store_runs_over_a_catalog_written_with_the_defaults() -> None:
    catalog = _Listed({"old": BASE, "new": BASE + dt.timedelta(hours=1)})
    store = BaseStore(StoreParts(catalog, MetaInMemory(), locker=ThreadLocker))
    try:
        assert [i.id for i in store.list()] == ["new", "old"]
        assert [i.id for i in store.list(prefix="o")] == ["old"]
        assert store.exists("old") and not store.exists("gone")
    finally:
        store.close()


def test_a_catalog_without_its_listing_cannot_be_made() -> None:
    class Unlisted(CatalogDefaults):
        def last_append(self, session_id: str) -> dt.datetime | None:
            return None

    with pytest.raises(TypeError, match="list_all"):
        Unlisted()  # type: ignore[abstract]


def test_the_memory_store_still_lists_and_expires_through_the_defaults() -> None:
    store = memory.MemoryStore()
    try:
        for i, sid in enumerate(["b", "a", "c"]):
            store.get(sid).append(Event(type="test/n", time=BASE + dt.timedelta(minutes=i)))
        assert [i.id for i in store.list()] == ["c", "a", "b"]
        assert [i.id for i in store.list(limit=1, offset=1)] == ["a"]
        catalog = store._catalog
        assert sorted(catalog.expired_ids(BASE + dt.timedelta(minutes=2))) == ["a", "b"]
    finally:
        store.close()
