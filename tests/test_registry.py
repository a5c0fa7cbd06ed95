"""The backend registry and what ``open_store`` requires of a backend."""

from __future__ import annotations

from typing import Any

import pytest

import agentsession
import agentsession.registry
import agentsession.store
from agentsession import BaseStore, UsageError
from agentsession.backends.memory import MemoryCatalog, MemoryStore, MetaInMemory
from agentsession.catalog import StoreParts
from agentsession.locks import ThreadLocker


class _MetaWithoutCompareAndSet:
    """A meta storage that provides every primitive but compare-and-set."""

    def get(self, kind: str, key: str) -> str | None:
        return None

    def set(self, kind: str, key: str, value: str | None) -> None:
        return None

    def add(self, kind: str, key: str, value: str) -> str:
        return value

    def list(self, kind: str | None) -> list[tuple[str, str, str]]:
        return []


class _NoCompareAndSetStore(BaseStore):
    """A backend whose meta lacks compare-and-set (its catalog and locker are memory's)."""

    def __init__(self, **options: Any) -> None:
        parts = StoreParts(
            MemoryCatalog(),
            _MetaWithoutCompareAndSet(),  # type: ignore[arg-type]
            locker=ThreadLocker,
        )
        super().__init__(parts, **options)


def test_a_registered_backend_without_compare_and_set_fails_when_opened(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opened: list[str] = []

    def factory(url: str, **options: Any) -> BaseStore:
        opened.append(url)
        return _NoCompareAndSetStore(**options)

    monkeypatch.setitem(agentsession.registry._registered, "nocas", factory)
    with pytest.raises(
        TypeError,
        match="_NoCompareAndSetStore backend's meta \\(_MetaWithoutCompareAndSet\\) does not "
        "implement cas",
    ):
        agentsession.open_store("nocas://x")
    assert opened == ["nocas://x"]  # the factory ran: the store refused to be constructed


def test_the_store_has_no_compare_and_set_of_its_own() -> None:
    """BaseStore never stands in for a backend's compare-and-set: without one from the meta,
    not even a meta whose other primitives could emulate it makes a store."""
    meta = _MetaWithoutCompareAndSet()
    with pytest.raises(TypeError, match="does not implement cas"):
        BaseStore(StoreParts(MemoryCatalog(), meta, locker=ThreadLocker))  # type: ignore[arg-type]
    calls: list[tuple[object, ...]] = []

    class Counting(MetaInMemory):
        def cas(self, *args: Any) -> bool:
            calls.append(args)
            return super().cas(*args)

    catalog = MemoryCatalog()
    counted = BaseStore(StoreParts(catalog, Counting(), locker=ThreadLocker))
    try:
        assert counted._meta_update("kind", "key", lambda old: "new") == "new"
        assert calls == [("kind", "key", None, "new")]  # the update went through the meta's cas
    finally:
        counted.close()


def test_a_factory_returning_something_else_than_a_store_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(agentsession.registry._registered, "notastore", lambda url, **_: object())
    with pytest.raises(TypeError, match="returned object, not a BaseStore"):
        agentsession.open_store("notastore://x")


def test_the_store_module_still_exports_the_registry_names() -> None:
    for name in ("register_backend", "migrate_store", "path_of"):
        assert getattr(agentsession.store, name) is getattr(agentsession.registry, name), name
    assert agentsession.open_store is agentsession.store.open_store
    assert agentsession.store.migrate_store("memory:") == []


def test_a_scheme_registered_through_the_store_module_is_opened() -> None:
    made: list[MemoryStore] = []

    def factory(url: str, **options: Any) -> BaseStore:
        made.append(MemoryStore(**options))
        return made[-1]

    agentsession.store.register_backend("viastore", factory)
    try:
        assert agentsession.open_store("viastore:", max_messages=3) is made[0]
        assert made[0].max_messages == 3
        with pytest.raises(UsageError, match="options cannot be applied"):
            agentsession.open_store(made[0], max_messages=3)
    finally:
        agentsession.registry._registered.pop("viastore", None)
