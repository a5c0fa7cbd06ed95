"""The async API picks where operations run from what each store class declares
(``capabilities``), and reads the sync objects only through their public members."""

from __future__ import annotations

import ast
import asyncio
import concurrent.futures
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import agentsession.aio
from agentsession import BaseStore, Event
from agentsession.aio import AsyncBackend, open_async_store
from agentsession.aio._backend import Call, backend_for, window_serves
from agentsession.backends.jsonl import JsonlFileStore, JsonlStore
from agentsession.backends.memory import MemoryCatalog, MemoryStore
from agentsession.backends.sqlite import SqliteStore
from agentsession.backends.static import StaticStore
from agentsession.catalog import StoreParts
from agentsession.contract import Capabilities
from agentsession.errors import UsageError
from agentsession.locks import ThreadLocker

AIO = Path(agentsession.aio.__file__).parent


def _placement(store: BaseStore, call: Call[Any]) -> str:
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        return backend_for(store, executor, "auto").placement(call)


def _noop() -> None:
    return None


def test_every_builtin_store_declares_its_capabilities() -> None:
    """Each backend's store class says what its I/O costs, in its own class body."""
    declared = {
        MemoryStore: Capabilities(in_memory=True),
        JsonlStore: Capabilities(inline_appends=True, inline_reads=True),
        SqliteStore: Capabilities(),
        StaticStore: Capabilities(),
    }
    for cls, capabilities in declared.items():
        assert "capabilities" in vars(cls), cls.__name__
        assert cls.capabilities == capabilities, cls.__name__
    assert JsonlFileStore.capabilities == JsonlStore.capabilities
    assert BaseStore.capabilities == Capabilities()


def test_postgres_declares_native_async() -> None:
    pytest.importorskip("psycopg")
    from agentsession.backends.postgres import PostgresStore

    assert PostgresStore.capabilities == Capabilities(native_async=True)


def test_placement_follows_the_declaration_not_the_class(tmp_path: Path) -> None:
    """A store class of any name gets the placement its capabilities declare; one declaring
    nothing gets worker threads."""

    class Slow(MemoryStore):
        capabilities = Capabilities()

    class Quick(SqliteStore):
        capabilities = Capabilities(in_memory=True)

    class Inherits(MemoryStore):
        pass

    lookup = Call("store.exists", "other", _noop)
    with Slow() as slow, Inherits() as inherits:
        assert _placement(slow, lookup) == "thread"
        assert _placement(inherits, lookup) == "inline"
    with Quick(str(tmp_path / "q.db")) as quick:
        assert _placement(quick, lookup) == "inline"
        assert _placement(quick, Call("store.recover", "other", _noop)) == "thread"
        assert _placement(quick, Call("fork", "hooks", _noop)) == "thread"


def test_inline_appends_follow_durability_and_encryption(tmp_path: Path) -> None:
    event = Event.new("custom/x", {})
    with JsonlStore(str(tmp_path / "plain")) as plain:
        session = plain.get("s")
        call = Call("append", "append", _noop, session, {"event": event})
        assert _placement(plain, call) == "inline"
        plain.durability = "fsync"
        assert _placement(plain, call) == "thread"
    with JsonlStore(str(tmp_path / "sealed"), passphrase="pw") as sealed:
        session = sealed.get("s")
        assert session.encrypted
        call = Call("append", "append", _noop, session, {"event": event})
        assert _placement(sealed, call) == "thread"


def test_inline_reads_follow_the_window(tmp_path: Path) -> None:
    with JsonlStore(str(tmp_path / "s"), durability="fsync") as store:
        session = store.get("s")
        session.append_many([Event.new("custom/x", {"i": i}) for i in range(3)])
        read = Call("read", "read", _noop, session, {"after": 0, "limit": None})
        assert session.window_holds(0)
        assert window_serves(session, read)
        assert _placement(store, read) == "inline"  # inline reads at any durability


class _NativeMemory(BaseStore):
    """A memory store declaring native async I/O, made by composition."""

    capabilities = Capabilities(native_async=True)

    def __init__(
        self, make: Callable[[BaseStore, concurrent.futures.Executor], object]
    ) -> None:
        catalog = MemoryCatalog()
        parts = StoreParts(
            catalog,
            catalog.meta,
            locker=ThreadLocker,
            async_backend=lambda executor: make(self, executor),
        )
        super().__init__(parts)


def test_a_native_store_must_return_an_async_backend() -> None:
    broken = _NativeMemory(lambda store, executor: object())
    with broken as store, concurrent.futures.ThreadPoolExecutor(1) as executor:
        with pytest.raises(TypeError, match="must return an AsyncBackend"):
            backend_for(store, executor, "auto")
        assert type(backend_for(store, executor, "always")) is AsyncBackend


def test_async_backend_refuses_a_store_without_native_async() -> None:
    with (
        MemoryStore() as store,
        concurrent.futures.ThreadPoolExecutor(1) as executor,
        pytest.raises(UsageError, match="no native async I/O"),
    ):
        store.async_backend(executor)


def test_a_native_store_gets_its_own_backend() -> None:
    class Own(AsyncBackend):
        name = "own"

    async def main() -> None:
        async with open_async_store(_NativeMemory(Own)) as store:
            assert isinstance(store.backend, Own)
            session = await store.get("s")
            assert await session.append(Event.new("custom/x", {})) == 1

    asyncio.run(main())


# -- the seams the placement reads ------------------------------------------------------------


def test_session_seams_tell_what_is_in_memory(tmp_path: Path) -> None:
    with JsonlStore(str(tmp_path / "s")) as store:
        session = store.get("s")
        session.append_many([Event.new("custom/x", {"i": i}) for i in range(3)])
        reopened = JsonlStore(str(tmp_path / "s"))
        try:
            fresh = reopened.get("s")
            assert not fresh.encrypted
            assert fresh.window_holds(3)
            assert fresh.state_lock.acquire(blocking=False)
            fresh.state_lock.release()
            fresh.messages()
            assert fresh.window_loaded
            assert fresh.window_holds(0)
            assert fresh.history_in_memory()
        finally:
            reopened.close()


def test_holds_lock_is_the_callers_own() -> None:
    async def main() -> None:
        async with open_async_store("memory:") as store:
            assert not store.holds_lock("s")
            async with store.lock("s"):
                assert store.holds_lock("s")
                assert store.sync.holds_lock("s")
            assert not store.holds_lock("s")

    asyncio.run(main())


# -- what aio/ may read -----------------------------------------------------------------------

AIO_OWN_PRIVATE = {
    "_call": "AsyncStore._call / AsyncSession._call: how the async objects hand a call on",
    "_wrap": "AsyncStore._wrap: one AsyncSession per sync session object",
    "_record": "AsyncTurn._record: how an AsyncStep's helpers reach the turn",
    "_buffers_user_message": "AsyncTurn's, read by its AsyncStep when it closes",
    "_own_executor": "AsyncStore's, set by the opener that made its thread pool",
}
"""Private members of aio's own classes that other aio objects use (never the sync
objects')."""


def test_aio_reads_no_private_member_of_another_object() -> None:
    """Outside ``self``, aio touches only its own classes' private members (listed above): no
    private attribute of a sync session, store, turn or step, and no class-name dispatch."""
    found: list[str] = []
    for path in sorted(AIO.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            name = node.attr
            if name in ("__module__", "__qualname__"):
                found.append(f"{path.name}:{node.lineno} reads {name}")
            if not name.startswith("_") or name.startswith("__"):
                continue
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                continue
            if name not in AIO_OWN_PRIVATE:
                found.append(f"{path.name}:{node.lineno} reads {ast.unparse(node)}")
    assert not found, "\n".join(found)

