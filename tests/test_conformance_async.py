"""The storage contract through the async API: the conformance suite, unchanged, against a sync
facade over :class:`agentsession.aio.AsyncStore`.

The facade runs every call as a task on one event loop in a background thread
(``call_soon_threadsafe`` starting the task, the caller waiting for its result), so each test
of :class:`agentsession.testing.StoreConformance` goes through the async code path: placement,
worker threads, polled turn locks, the async turn and step. Each calling thread is one "task"
for the facade: its turn id and the turn locks it holds are kept between its calls (they live
in context variables, which a task would keep), so lock re-entry and a merge from inside the
parent's lock behave as they do for one task.

Attributes starting with ``_`` (backend internals that a few tests reach into, such as
``session._window``) are read from the wrapped sync objects.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from agentsession import context as context_module
from agentsession import locks as locks_module
from agentsession.aio import (
    AsyncSession,
    AsyncStep,
    AsyncStore,
    AsyncTurn,
    AsyncTurnLock,
    open_async_store,
)
from agentsession.testing import StoreConformance

from .redis_servers import SKIP_REASON as REDIS_SKIP
from .redis_servers import drop_prefixes, new_prefix, url_with_prefix
from .test_conformance_postgres import (
    DSN,
    SKIP_REASON,
    drop_schemas,
    new_schema_name,
    url_with_schema,
)

T = TypeVar("T")

# The context variables a task keeps between its awaits, kept per calling thread here.
_KEPT: tuple[contextvars.ContextVar[Any], ...] = (
    context_module._turn_id,
    locks_module._held_here,
    locks_module._acting_owner,
)


class LoopThread:
    """An event loop running in a daemon thread; :meth:`call` runs a coroutine there as a task
    and waits for its result, keeping the calling thread's task state between calls."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._local = threading.local()

    def _state(self) -> dict[contextvars.ContextVar[Any], Any]:
        state: dict[contextvars.ContextVar[Any], Any] | None = getattr(self._local, "state", None)
        if state is None:
            # This thread acts as one task: it owns the turn locks its calls take.
            state = {var: var.get() for var in _KEPT}
            state[locks_module._acting_owner] = (threading.get_ident(), 0)
            self._local.state = state
        return state

    def call(self, make: Callable[[], Awaitable[T]]) -> T:
        if threading.current_thread() is self._thread:
            raise RuntimeError("a facade call from the event loop's own thread would deadlock")
        state = self._state()

        async def as_this_thread() -> T:
            for var, value in state.items():
                var.set(value)
            try:
                return await make()
            finally:
                for var in _KEPT:
                    state[var] = var.get()

        result: concurrent.futures.Future[T] = concurrent.futures.Future()

        def start() -> None:
            task = self.loop.create_task(as_this_thread())

            def done(task: asyncio.Task[T]) -> None:
                if task.cancelled():
                    result.cancel()
                elif task.exception() is not None:
                    result.set_exception(task.exception())  # type: ignore[arg-type]
                else:
                    result.set_result(task.result())

            task.add_done_callback(done)

        self.loop.call_soon_threadsafe(start)
        return result.result()


_loop: LoopThread | None = None
_loop_lock = threading.Lock()


def loop_thread() -> LoopThread:
    """The process's facade loop (started on first use)."""
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = LoopThread()
        return _loop


def facade(runner: LoopThread, value: Any) -> Any:
    """The sync facade of an async object (other values as they are)."""
    for cls, kind in _FACADES.items():
        if isinstance(value, cls):
            return kind(runner, value)
    return value


class Facade:
    """A sync object over an async one: coroutine methods block on the loop thread."""

    def __init__(self, runner: LoopThread, target: Any) -> None:
        self._runner = runner
        self._target = target

    def _await(self, make: Callable[[], Awaitable[Any]]) -> Any:
        return facade(self._runner, self._runner.call(make))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # backend internals: the wrapped sync object's
            return getattr(self._target.sync, name)
        attr = getattr(self._target, name)
        if inspect.iscoroutinefunction(attr):
            return lambda *args, **kwargs: self._await(lambda: attr(*args, **kwargs))
        if callable(attr):
            return lambda *args, **kwargs: facade(self._runner, attr(*args, **kwargs))
        return facade(self._runner, attr)

    def __repr__(self) -> str:
        return f"<facade of {self._target!r}>"


class StoreFacade(Facade):
    """A :class:`~agentsession.BaseStore` look-alike over an :class:`AsyncStore`."""

    def lock(self, session_id: str, timeout: float | None = None) -> Any:
        return self._await(lambda: self._target.lock(session_id, timeout).acquire())

    def __enter__(self) -> StoreFacade:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SessionFacade(Facade):
    """A :class:`~agentsession.BaseSession` look-alike over an :class:`AsyncSession`."""

    @property
    def latest_seq(self) -> int:
        return self._await(self._target.latest_seq)  # type: ignore[no-any-return]

    @property
    def parent(self) -> str | None:
        return self._await(self._target.parent)  # type: ignore[no-any-return]

    @property
    def fork_point(self) -> int | None:
        return self._await(self._target.fork_point)  # type: ignore[no-any-return]


class ContextFacade(Facade):
    """A sync context manager over an async one (a turn, a step)."""

    def __enter__(self) -> ContextFacade:
        self._await(self._target.__aenter__)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._await(lambda: self._target.__aexit__(*exc))


class LockFacade(Facade):
    """A held :class:`~agentsession.TurnLock` look-alike over an :class:`AsyncTurnLock`."""

    def __enter__(self) -> LockFacade:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


_FACADES: dict[type, type[Facade]] = {
    AsyncStore: StoreFacade,
    AsyncSession: SessionFacade,
    AsyncTurn: ContextFacade,
    AsyncStep: ContextFacade,
    AsyncTurnLock: LockFacade,
}


def open_facade(target: str, **options: Any) -> Any:
    """A sync facade over ``await open_async_store(target, **options)``."""
    runner = loop_thread()
    opened = runner.call(lambda: _open(target, options))
    return facade(runner, opened)


async def _open(target: str, options: dict[str, Any]) -> AsyncStore:
    return await open_async_store(target, **options)


_FORKS = (
    "os.fork() of a process whose event loop runs in another thread: the child has no loop "
    "thread to run the facade's calls (asyncio does not support forking a running loop)"
)
_SYNC_WRITERS = (
    "time only: the writers are child processes on the sync API and the facade would only "
    "read at the end, which test_two_stores_on_the_same_data_see_each_others_appends and "
    "test_writer_killed_mid_append_leaves_whole_batches_and_gap_free_seqs cover"
)
_PRIMITIVE = (
    "tests the backend primitives _meta_cas/_meta_update/_meta_list, which the async API does "
    "not wrap (they run inside meta_set, update, fork and copy_store); the sync suite covers it"
)

_SYNC_COPY = (
    "copy_store is a sync function over store objects (the async API has none): the sync "
    "suite runs it on every backend"
)


class AsyncConformance(StoreConformance):
    """The conformance suite through :mod:`agentsession.aio`; subclasses give the store."""

    def open_args(self, tmp_path: Path, **options: Any) -> tuple[str, dict[str, Any]]:
        """The URL and options of the store under test."""
        raise NotImplementedError

    def make_store(self, tmp_path: Path, **options: Any) -> Any:
        url, options = self.open_args(tmp_path, **options)
        return open_facade(url, **options)

    @pytest.mark.skip(reason=_FORKS)
    def test_forked_processes_sharing_an_open_store_never_share_a_seq(self) -> None:
        """Not run through the facade."""

    @pytest.mark.skip(reason=_FORKS)
    def test_a_forked_child_neither_shares_nor_releases_the_parents_turn_lock(self) -> None:
        """Not run through the facade."""

    @pytest.mark.skip(reason=_SYNC_WRITERS)
    def test_concurrent_processes_get_unique_gap_free_seqs(self) -> None:
        """Not run through the facade."""

    @pytest.mark.skip(reason=_SYNC_WRITERS)
    def test_eight_processes_appending_to_one_session_get_seqs_1_to_2000(self) -> None:
        """Not run through the facade."""

    @pytest.mark.skip(reason=_PRIMITIVE)
    def test_meta_cas_sets_only_over_the_expected_value(self) -> None:
        """Not run through the facade."""

    @pytest.mark.skip(reason=_PRIMITIVE)
    def test_meta_list_enumerates_every_entry_of_every_kind(self) -> None:
        """Not run through the facade."""

    @pytest.mark.skip(reason=_SYNC_COPY)
    def test_copy_store_in_and_out_keeps_events_meta_and_a_live_child(self) -> None:
        """Not run through the facade."""

    @pytest.mark.skip(reason=_PRIMITIVE)
    def test_meta_update_from_many_threads_loses_no_increment(self) -> None:
        """Not run through the facade."""

    @pytest.mark.skip(reason=_PRIMITIVE)
    def test_meta_update_from_four_processes_loses_no_increment(self) -> None:
        """Not run through the facade."""

    @pytest.mark.skip(reason=_PRIMITIVE)
    def test_meta_cas_of_two_store_objects_on_one_key_exclude_each_other(self) -> None:
        """Not run through the facade."""


class TestAsyncMemoryStore(AsyncConformance):
    durable = False
    shared_across_processes = False

    def open_args(self, tmp_path: Path, **options: Any) -> tuple[str, dict[str, Any]]:
        return "memory:", options


class TestAsyncJsonlStore(AsyncConformance):
    """JSONL at durability ``flush``: appends and window reads run inline."""

    def open_args(self, tmp_path: Path, **options: Any) -> tuple[str, dict[str, Any]]:
        return str(tmp_path / "sessions"), options

    def session_file(self, store: Any, session_id: str) -> Path | None:
        return Path(store.sync.path_for(session_id))


class TestAsyncJsonlStoreFsync(TestAsyncJsonlStore):
    """JSONL at durability ``fsync``: appends run in worker threads."""

    def open_args(self, tmp_path: Path, **options: Any) -> tuple[str, dict[str, Any]]:
        options.setdefault("durability", "fsync")
        return super().open_args(tmp_path, **options)


class TestAsyncJsonlStoreEncrypted(TestAsyncJsonlStore):
    """An encrypted JSONL store: appends run in worker threads."""

    encryption_key = bytes(range(32))

    def open_args(self, tmp_path: Path, **options: Any) -> tuple[str, dict[str, Any]]:
        options.setdefault("key", self.encryption_key)
        return super().open_args(tmp_path, **options)


class TestAsyncSqliteStore(AsyncConformance):
    def open_args(self, tmp_path: Path, **options: Any) -> tuple[str, dict[str, Any]]:
        return f"sqlite:///{tmp_path}/sessions.db", options


@pytest.mark.postgres
@pytest.mark.skipif(not DSN, reason=SKIP_REASON)
class TestAsyncPostgresStore(AsyncConformance):
    """PostgreSQL, each test in fresh schemas (worker threads until a native driver)."""

    @pytest.fixture(autouse=True)
    def _schemas(self) -> Iterator[None]:
        self.schemas: dict[Path, str] = {}
        try:
            yield
        finally:
            drop_schemas(list(self.schemas.values()))

    def open_args(self, tmp_path: Path, **options: Any) -> tuple[str, dict[str, Any]]:
        schema = self.schemas.setdefault(tmp_path, new_schema_name())
        options.setdefault("pool_max_size", 4)
        return url_with_schema(schema), options


@pytest.mark.postgres
@pytest.mark.skipif(not DSN, reason=SKIP_REASON)
class TestAsyncPostgresStoreEncrypted(TestAsyncPostgresStore):
    """An encrypted PostgreSQL store: sealing, opening and the session keys run natively."""

    encryption_key = bytes(range(32))

    def open_args(self, tmp_path: Path, **options: Any) -> tuple[str, dict[str, Any]]:
        options.setdefault("key", self.encryption_key)
        return super().open_args(tmp_path, **options)


@pytest.mark.postgres
@pytest.mark.skipif(not DSN, reason=SKIP_REASON)
class TestAsyncPostgresStorePartitioned(TestAsyncPostgresStore):
    """The contract on an events table hash-partitioned by session id."""

    def open_args(self, tmp_path: Path, **options: Any) -> tuple[str, dict[str, Any]]:
        options.setdefault("partitions", 4)
        return super().open_args(tmp_path, **options)


@pytest.mark.postgres
@pytest.mark.skipif(not DSN, reason=SKIP_REASON)
class TestAsyncPostgresStoreReadUrl(TestAsyncPostgresStore):
    """The contract with ``read_url`` naming the server itself: every native read takes the
    read replicas' path (see ``test_conformance_postgres.py``'s ``TestPostgresStoreReadUrl``)."""

    def open_args(self, tmp_path: Path, **options: Any) -> tuple[str, dict[str, Any]]:
        url, options = super().open_args(tmp_path, **options)
        options.setdefault("read_url", url)
        return url, options


@pytest.mark.redis
@pytest.mark.skipif(bool(REDIS_SKIP), reason=REDIS_SKIP or "-")
class TestAsyncRedisStore(AsyncConformance):
    """Redis, each test under a key prefix of its own: appends and reads run natively on
    redis-py's asyncio client."""

    @pytest.fixture(autouse=True)
    def _prefixes(self) -> Iterator[None]:
        self.prefixes: dict[Path, str] = {}
        try:
            yield
        finally:
            drop_prefixes(list(self.prefixes.values()))

    def open_args(self, tmp_path: Path, **options: Any) -> tuple[str, dict[str, Any]]:
        prefix = self.prefixes.setdefault(tmp_path, new_prefix())
        return url_with_prefix(prefix) + "&lock_ttl=2", options


@pytest.mark.redis
@pytest.mark.skipif(bool(REDIS_SKIP), reason=REDIS_SKIP or "-")
class TestAsyncRedisStoreEncrypted(TestAsyncRedisStore):
    """An encrypted Redis store through the async API."""

    encryption_key = bytes(range(32))

    def open_args(self, tmp_path: Path, **options: Any) -> tuple[str, dict[str, Any]]:
        options.setdefault("key", self.encryption_key)
        return super().open_args(tmp_path, **options)
