"""The async API (``agentsession.aio``): placement, context, cancellation, locks and hooks.

The storage contract itself runs through the async API in ``test_conformance_async.py``; these
tests cover what only the async API has. Plain tests drive coroutines with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import inspect
import random
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

import agentsession as ags
from agentsession import Event, ToolCall, open_store
from agentsession import recorder as recorder_module
from agentsession.aio import (
    AsyncSession,
    AsyncStep,
    AsyncStore,
    AsyncTurn,
    AsyncTurnLock,
    open_async_store,
)
from agentsession.children import LifecycleEvent
from agentsession.context import RunContext, turn_id, with_run_context, with_turn_id
from agentsession.errors import LockTimeout, UsageError
from agentsession.events import TURN_END, TURN_START, decode

from .test_conformance_postgres import DSN, drop_schemas, new_schema_name, url_with_schema
from .test_signatures import SYNC_ONLY

T = TypeVar("T")

BACKENDS = ["memory", "jsonl", "jsonl-fsync", "sqlite", "postgres"]


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


@pytest.fixture
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """The URL and options of a store of the backend named by the test's parameter."""
    kind = request.param
    schemas: list[str] = []
    if kind == "memory":
        yield "memory:", {}
    elif kind == "jsonl":
        yield str(tmp_path / "sessions"), {}
    elif kind == "jsonl-fsync":
        yield str(tmp_path / "sessions"), {"durability": "fsync"}
    elif kind == "sqlite":
        yield f"sqlite:///{tmp_path}/sessions.db", {}
    else:
        if not DSN:
            pytest.skip("set AGENTSESSION_TEST_POSTGRES_DSN to run the PostgreSQL tests")
        schemas.append(new_schema_name())
        try:
            yield url_with_schema(schemas[0]), {"pool_max_size": 4}
        finally:
            drop_schemas(schemas)


class CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    """A thread pool that counts the work handed to it, and records its threads."""

    def __init__(self, max_workers: int = 4) -> None:
        super().__init__(max_workers)
        self.submitted: list[str] = []
        self.threads: set[int] = set()

    def submit(  # type: ignore[override]
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        self.submitted.append(getattr(fn, "__name__", repr(fn)))

        def noted() -> T:
            self.threads.add(threading.get_ident())
            return fn(*args, **kwargs)

        return super().submit(noted)


class AlternatingExecutor(concurrent.futures.Executor):
    """Hands each call to the next of two one-thread pools: consecutive calls run in two
    different threads."""

    def __init__(self) -> None:
        self.pools = [concurrent.futures.ThreadPoolExecutor(1) for _ in range(2)]
        self.count = 0
        self.threads: list[int] = []

    def submit(  # type: ignore[override]
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        pool = self.pools[self.count % 2]
        self.count += 1

        def noted() -> T:
            self.threads.append(threading.get_ident())
            return fn(*args, **kwargs)

        return pool.submit(noted)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        for pool in self.pools:
            pool.shutdown(wait, cancel_futures=cancel_futures)


class GateClock:
    """A store clock that, once armed, blocks the thread that reads it until released: a way
    to hold a worker thread inside a call."""

    def __init__(self) -> None:
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> dt.datetime:
        if self.armed:
            self.armed = False
            self.entered.set()
            assert self.release.wait(30)
        return dt.datetime.now(dt.timezone.utc)


async def wait_for_thread(event: threading.Event) -> None:
    """Let the loop run until another thread sets ``event`` (no time limit asserted)."""
    while not event.is_set():
        await asyncio.sleep(0.001)


def batch(n: int, size: int) -> list[Event]:
    return [Event.new("test/batch", {"batch": n, "i": i, "of": size}) for i in range(size)]


def check_whole_batches(events: list[Event]) -> dict[int, list[int]]:
    """Seqs gap-free from 1; every batch whole. Returns the batches found."""
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    batches: dict[int, list[int]] = {}
    sizes: dict[int, int] = {}
    for event in events:
        data = decode(event.data)
        batches.setdefault(data["batch"], []).append(data["i"])
        sizes[data["batch"]] = data["of"]
    for n, items in batches.items():
        assert items == list(range(sizes[n])), n
    return batches


# -- the API ---------------------------------------------------------------------------------


def _public(obj: object) -> set[str]:
    return {name for name in dir(obj) if not name.startswith("_")}


def _sync_only(obj: object) -> set[str]:
    """The public names of ``obj``'s classes that the async API deliberately lacks
    (``tests/test_signatures.py`` says why for each)."""
    classes = {cls.__name__ for cls in type(obj).__mro__}
    return {name for cls_name, name in SYNC_ONLY if cls_name in classes}


def test_every_sync_operation_has_an_async_one() -> None:
    """Nothing of the sync API is missing from the async one, compared on live objects (the
    store's settings stay on ``store.sync``; ``sync``, ``store``, ``backend`` and ``closed`` are
    the async API's own; the sync-only names are listed in ``tests/test_signatures.py``)."""

    async def main() -> None:
        store = await open_async_store("memory:")
        session = await store.get("s")
        async with session.turn() as turn, turn.step() as step:
            pairs = [(store.sync, store), (session.sync, session), (turn.sync, turn),
                     (step.sync, step)]
            settings = {"clock", "durability", "ttl", "max_messages", "max_cached_sessions",
                        "cache_idle_ttl", "max_loaded_events", "default_delivery_policy",
                        "revive_expired", "renew_on_update", "compaction", "retention"}
            for sync, wrapper in pairs:
                assert _public(sync) - settings - _sync_only(sync) <= _public(wrapper)
        lock = await store.lock("s")
        sync_lock = store.sync.lock("t")
        assert _public(sync_lock) - _sync_only(sync_lock) <= _public(lock)
        await lock.release()
        own = {"sync", "store", "backend", "closed"}
        for cls in (AsyncSession, AsyncStore, AsyncTurn, AsyncStep, AsyncTurnLock):
            for name in {n for n in dir(cls) if not n.startswith("_")} - own:
                assert getattr(cls, name).__doc__, f"{cls.__name__}.{name}"
        await store.close()

    run(main())


def test_operations_that_do_io_are_coroutines() -> None:
    sync_only = {"turn", "lock", "step", "timed_out", "new_messages", "add_lifecycle_hook",
                 "remove_lifecycle_hook", "holds_lock", "retry", "edit", "subscribe"}
    for cls in (AsyncSession, AsyncStore, AsyncTurn, AsyncStep):
        for name in {n for n in dir(cls) if not n.startswith("_")}:
            attr = inspect.getattr_static(cls, name)
            if isinstance(attr, property) or name in sync_only:
                continue
            # an async generator (session.pending) does its I/O in its steps, awaited too
            assert inspect.iscoroutinefunction(attr) or inspect.isasyncgenfunction(attr), (
                f"{cls.__name__}.{name}"
            )


def test_open_async_store_awaits_or_closes_on_leaving_the_block(tmp_path: Path) -> None:
    async def main() -> None:
        store = await open_async_store(tmp_path / "a")
        session = await store.get("s")
        assert await store.get("s") is session  # one wrapper per sync session
        assert await session.append(Event.new("test/n")) == 1
        await store.close()
        await store.close()
        with pytest.raises(UsageError, match="closed"):
            await store.get("s")
        with pytest.raises(UsageError, match="closed"):
            await session.read()
        async with open_async_store(tmp_path / "a") as again:
            assert await (await again.get("s")).latest_seq() == 1
        assert again.closed
        sync = open_store("memory:")
        wrapped = await open_async_store(sync)
        assert wrapped.sync is sync
        await wrapped.close()
        for bad in ({"offload": "never"}, {"max_threads": 0}):
            with pytest.raises(UsageError):
                open_async_store("memory:", **bad)

    run(main())


# -- where operations run ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "options", "append_in_thread"),
    [
        ("memory:", {}, False),
        ("{tmp}/flush", {}, False),
        ("{tmp}/fsync", {"durability": "fsync"}, True),
        ("{tmp}/encrypted", {"key": bytes(32)}, True),
        ("sqlite:///{tmp}/s.db", {}, True),
        ("memory:", {"offload": "always"}, True),
    ],
)
def test_appends_run_inline_only_where_they_cannot_wait(
    tmp_path: Path, url: str, options: dict[str, Any], append_in_thread: bool
) -> None:
    async def main() -> None:
        executor = CountingExecutor()
        store = await open_async_store(url.format(tmp=tmp_path), executor=executor, **options)
        session = await store.get("s")
        await session.append(Event.new("test/n"))
        before = len(executor.submitted)
        await session.append(Event.new("test/n"))
        await session.append_many([Event.new("test/n"), Event.new("test/n")])
        assert (len(executor.submitted) > before) == append_in_thread
        await store.close()
        executor.shutdown()

    run(main())


def test_jsonl_reads_served_by_the_window_run_inline(tmp_path: Path) -> None:
    async def main() -> None:
        executor = CountingExecutor()
        store = await open_async_store(tmp_path, executor=executor)
        session = await store.get("s")
        async with session.turn() as turn:
            await turn.user("hi")  # a user message before the window is loaded: a thread
            await turn.assistant("hello")
        await session.messages()
        before = len(executor.submitted)
        assert [m.text for m in await session.messages()] == ["hi", "hello"]
        await session.read(after=1)
        await session.latest_seq()
        async with session.turn() as turn:
            await turn.user("again")
        assert len(executor.submitted) == before
        await store.close()

    run(main())


def test_an_inline_call_never_waits_for_a_worker_threads_session_lock(tmp_path: Path) -> None:
    """While a thread holds the session (a long read, a compaction), an append that would run
    inline goes to a worker thread instead, and the loop keeps running."""

    async def main() -> None:
        executor = CountingExecutor()
        store = await open_async_store(tmp_path, executor=executor)
        session = await store.get("s")
        await session.append(Event.new("test/n"))
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with session.sync._lock:
                held.set()
                release.wait(30)

        holder = threading.Thread(target=hold)
        holder.start()
        await wait_for_thread(held)
        before = len(executor.submitted)
        append = asyncio.create_task(session.append(Event.new("test/n")))
        ticks = 0
        while ticks < 5:  # the loop runs while the append waits in its thread
            await asyncio.sleep(0)
            ticks += 1
        assert not append.done()
        release.set()
        assert await append == 2
        holder.join()
        assert len(executor.submitted) == before + 1
        await store.close()

    run(main())


# -- the recorder and the context -------------------------------------------------------------


def test_an_open_turn_is_the_tasks_turn_id_whichever_thread_writes(tmp_path: Path) -> None:
    async def main() -> None:
        executor = AlternatingExecutor()
        store = await open_async_store(tmp_path, durability="fsync", executor=executor)
        session = await store.get("s")
        assert turn_id() == ""
        async with session.turn(agent="coder") as turn:
            assert turn_id() == turn.turn_id
            await turn.user("hi")
            async with turn.step() as step:
                await step.assistant("calling", tool_calls=[ToolCall("c1", "read", {})])
                await step.tool_result("c1", "read", "ok")
            await session.annotate_timeout("late")  # reads the task's turn id in a thread
            await turn.assistant("done")
        assert turn_id() == ""
        assert len(set(executor.threads)) == 2  # enter, helpers and exit moved between threads
        events = await session.read()
        assert {e.meta.get("turn_id") for e in events} == {turn.turn_id}
        assert events[0].type == TURN_START and events[-1].type == TURN_END
        with with_turn_id("outer"):
            async with session.turn() as inner:
                assert inner.turn_id == "outer" == turn_id()
            assert turn_id() == "outer"
        await store.close()
        executor.shutdown()

    run(main())


def test_a_turn_entered_and_closed_in_two_threads_is_unregistered(tmp_path: Path) -> None:
    async def main() -> None:
        executor = AlternatingExecutor()
        store = await open_async_store(tmp_path, durability="fsync", executor=executor)
        session = await store.get("s")
        async with session.turn():
            pass
        enter_thread, exit_thread = executor.threads[-2:]
        assert enter_thread != exit_thread
        assert not recorder_module._open_turns
        async with session.turn():  # the session takes the next turn
            pass
        assert [e.type for e in await session.read()] == [TURN_START, TURN_END] * 2
        await store.close()
        executor.shutdown()

    run(main())


def test_concurrent_tasks_each_see_their_own_turn(tmp_path: Path) -> None:
    async def one(store: AsyncStore, name: str) -> tuple[str, set[str]]:
        session = await store.get(name)
        async with session.turn(agent=name) as turn:
            for i in range(5):
                await turn.assistant(f"{name} {i}")
                assert turn_id() == turn.turn_id
                await asyncio.sleep(0)
        return turn.turn_id, {e.meta["turn_id"] for e in await session.read()}

    async def main() -> None:
        async with open_async_store(f"sqlite:///{tmp_path}/s.db") as store:
            results = await asyncio.gather(*(one(store, f"s{n}") for n in range(4)))
        assert len({tid for tid, _ in results}) == 4
        assert all(seen == {tid} for tid, seen in results)

    run(main())


def test_work_in_a_worker_thread_reads_the_tasks_context(tmp_path: Path) -> None:
    async def main() -> None:
        async with open_async_store(f"sqlite:///{tmp_path}/s.db") as store:
            session = await store.get("s")
            with with_run_context(RunContext(run_id="run-7")):
                async with session.turn():
                    pass
            start = (await session.read())[0]
            assert start.type == TURN_START and start.meta["run_id"] == "run-7"

    run(main())


def test_the_open_turn_registry_works_when_enter_and_exit_run_in_other_threads() -> None:
    store = open_store("memory:")
    session = store.get("s")
    turn = session.turn()
    with concurrent.futures.ThreadPoolExecutor(1) as a, concurrent.futures.ThreadPoolExecutor(
        1
    ) as b:
        a.submit(turn.__enter__).result()
        with pytest.raises(UsageError, match="already has an open turn"):
            b.submit(session.turn().__enter__).result()
        b.submit(turn.__exit__, None, None, None).result()
        assert not recorder_module._open_turns
        with session.turn():
            pass
    assert [e.type for e in session.read()] == [TURN_START, TURN_END] * 2


def test_a_second_task_cannot_open_an_overlapping_turn(tmp_path: Path) -> None:
    async def main() -> None:
        async with open_async_store(tmp_path, durability="fsync") as store:
            session = await store.get("s")
            opened, finish = asyncio.Event(), asyncio.Event()

            async def first() -> None:
                async with session.turn():
                    opened.set()
                    await finish.wait()

            task = asyncio.create_task(first())
            await opened.wait()
            with pytest.raises(UsageError, match="already has an open turn"):
                async with session.turn():
                    pass
            finish.set()
            await task
            async with session.turn():
                pass

    run(main())


def test_batched_steps_buffer_on_the_loop_and_write_one_batch(tmp_path: Path) -> None:
    async def main() -> None:
        executor = CountingExecutor()
        store = await open_async_store(f"sqlite:///{tmp_path}/s.db", executor=executor)
        session = await store.get("s")
        async with session.turn(batch_steps=True) as turn:
            await turn.user("go")
            async with turn.step() as step:
                before = len(executor.submitted)
                assert await step.assistant("a", tool_calls=[ToolCall("c1", "t", {})]) == 0
                assert await step.tool_result("c1", "t", "ok") == 0
                assert await step.usage(10, 2) == 0
                assert len(executor.submitted) == before  # buffered: no thread, no I/O
            assert len(step.seqs) == 5
        types = [e.type for e in await session.read()]
        assert types[2:7] == ["step/start", "assistant/message", "tool/result", "usage",
                              "step/end"]
        await store.close()

    run(main())


# -- cancellation ----------------------------------------------------------------------------


@pytest.mark.parametrize("target", BACKENDS, indirect=True)
def test_cancelled_appends_leave_whole_batches_and_gap_free_seqs(
    target: tuple[str, dict[str, Any]],
) -> None:
    """Appends cancelled at random points (task.cancel after a random number of loop turns,
    or a random wait_for timeout): after each cancellation the log holds whole batches with
    gap-free seqs, and nothing lands later."""
    url, options = target
    rng = random.Random(20260601)

    async def main() -> None:
        async with open_async_store(url, **options) as store:
            session = await store.get("cancel")
            cancelled = 0
            for n in range(40):
                size = rng.randint(1, 5)
                work = session.append_many(batch(n, size)) if size > 1 else session.append(
                    batch(n, 1)[0]
                )
                try:
                    if rng.random() < 0.5:
                        task = asyncio.ensure_future(work)
                        for _ in range(rng.randint(0, 6)):
                            await asyncio.sleep(0)
                        task.cancel()
                        await task
                    else:
                        await asyncio.wait_for(work, timeout=rng.choice([0, 1e-5, 1e-4, 1e-3]))
                except (asyncio.CancelledError, asyncio.TimeoutError):
                    cancelled += 1
                settled = await session.read()
                check_whole_batches(settled)
                await asyncio.sleep(0.002)  # a batch that landed late would show now
                assert len(await session.read()) == len(settled)
            assert cancelled > 0
            assert await session.append(Event.new("test/after")) == len(settled) + 1

    run(main())


def test_a_call_cancelled_while_queued_never_runs(tmp_path: Path) -> None:
    async def main() -> None:
        executor = concurrent.futures.ThreadPoolExecutor(1)
        store = await open_async_store(f"sqlite:///{tmp_path}/s.db", executor=executor)
        session = await store.get("s")
        busy, release = threading.Event(), threading.Event()
        executor.submit(lambda: (busy.set(), release.wait(30)))
        await wait_for_thread(busy)
        task = asyncio.create_task(session.append_many(batch(0, 3)))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task  # at once: the call never started
        release.set()
        assert await session.read() == []
        await store.close()
        executor.shutdown()

    run(main())


def test_a_call_cancelled_while_running_finishes_before_cancelled_error(tmp_path: Path) -> None:
    async def main() -> None:
        clock = GateClock()
        store = await open_async_store(f"sqlite:///{tmp_path}/s.db", clock=clock)
        session = await store.get("s")
        clock.armed = True
        task = asyncio.create_task(session.append_many(batch(0, 3)))
        await wait_for_thread(clock.entered)  # the worker is inside append_many
        task.cancel()
        for _ in range(20):
            await asyncio.sleep(0)
        assert not task.done()  # the cancellation waits for the write
        clock.release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        check_whole_batches(await session.read())
        assert len(await session.read()) == 3
        await store.close()

    run(main())


@pytest.mark.parametrize("url", ["memory:", "{tmp}/fsync"])
def test_a_cancelled_turn_is_closed_with_the_cancellation_then_cancelled(
    tmp_path: Path, url: str
) -> None:
    async def main() -> None:
        options = {"durability": "fsync"} if "fsync" in url else {}
        async with open_async_store(url.format(tmp=tmp_path), **options) as store:
            session = await store.get("s")
            waiting = asyncio.Event()

            async def agent() -> None:
                async with session.turn(agent="coder") as turn:
                    await turn.user("go")
                    async with turn.step() as step:
                        await step.assistant("", tool_calls=[ToolCall("c1", "slow", {})])
                        waiting.set()
                        await asyncio.sleep(3600)

            task = asyncio.create_task(agent())
            await waiting.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            events = await session.read()
            assert [e.type for e in events][-3:] == ["tool/result", "step/end", "turn/end"]
            result = events[-3].payload()
            assert result.is_error and "CancelledError" in result.content
            end = events[-1].payload()
            assert end.error.type == "CancelledError" and end.steps == 1
            assert not recorder_module._open_turns
            async with session.turn() as turn:  # the session takes new turns
                await turn.user("next")

    run(main())


def test_a_turn_that_raises_is_closed_as_the_sync_recorder_does() -> None:
    async def main() -> None:
        async with open_async_store("memory:") as store:
            session = await store.get("s")


            async def agent() -> None:
                async with session.turn() as turn:
                    await turn.assistant("", tool_calls=[ToolCall("c1", "t", {})])
                    raise ValueError("boom")

            with pytest.raises(ValueError, match="boom"):
                await agent()
            end = (await session.read())[-1].payload()
            assert (end.error.type, end.error.message) == ("ValueError", "boom")
            assert [m.role for m in await session.messages()] == ["assistant", "tool"]

    run(main())


def test_a_turn_cancelled_while_turn_start_is_written_is_closed(tmp_path: Path) -> None:
    async def main() -> None:
        clock = GateClock()
        store = await open_async_store(f"sqlite:///{tmp_path}/s.db", clock=clock)
        session = await store.get("s")
        entered = asyncio.Event()

        async def agent() -> None:
            async with session.turn():
                entered.set()

        clock.armed = True
        task = asyncio.create_task(agent())
        await wait_for_thread(clock.entered)
        task.cancel()
        clock.release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not entered.is_set()
        events = await session.read()
        assert [e.type for e in events] == [TURN_START, TURN_END]
        assert events[-1].payload().error.type == "CancelledError"
        assert not recorder_module._open_turns
        await store.close()

    run(main())


def test_turn_end_is_written_however_often_the_exit_is_cancelled(tmp_path: Path) -> None:
    async def main() -> None:
        clock = GateClock()
        store = await open_async_store(f"sqlite:///{tmp_path}/s.db", clock=clock)
        session = await store.get("s")

        async def agent() -> None:
            async with session.turn():
                clock.armed = True  # the exit's turn/end waits in its thread

        task = asyncio.create_task(agent())
        await wait_for_thread(clock.entered)
        for _ in range(3):
            task.cancel()
            await asyncio.sleep(0)
        clock.release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert [e.type for e in await session.read()] == [TURN_START, TURN_END]
        assert turn_id() == ""
        await store.close()

    run(main())


# -- turn locks ------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["memory", "jsonl", "postgres"], indirect=True)
def test_a_turn_lock_is_per_task_and_waiting_never_blocks_the_loop(
    target: tuple[str, dict[str, Any]],
) -> None:
    url, options = target

    async def main() -> None:
        async with open_async_store(url, **options) as store:
            order: list[str] = []
            async with store.lock("conv", timeout=5) as held:
                assert held.held and await store.is_locked("conv")
                with pytest.raises(UsageError, match="not reentrant"):
                    await store.lock("conv", timeout=1)
                with pytest.raises(LockTimeout):
                    await asyncio.create_task(store.lock("conv", timeout=0.05).acquire())

                async def waiter() -> None:
                    async with store.lock("conv", timeout=30):
                        order.append("waiter")

                task = asyncio.create_task(waiter())
                for _ in range(10):  # the loop runs other tasks while the waiter waits
                    await asyncio.sleep(0.001)
                    order.append("tick")
                order.append("release")
            await task
            assert order[-2:] == ["release", "waiter"] and order.count("tick") == 10
            assert not await store.is_locked("conv")
            lock = await store.lock("conv", timeout=0)
            await lock.release()
            await lock.release()  # harmless

    run(main())


def test_lock_waiters_never_hold_the_threads_the_holder_needs(tmp_path: Path) -> None:
    """Eight tasks wait for a lock whose holder appends through a pool of two threads: the
    waiters poll from the loop, so the holder's appends still get threads (waiting in the
    pool would deadlock here)."""

    async def main() -> None:
        async with open_async_store(f"sqlite:///{tmp_path}/s.db", max_threads=2) as store:
            session = await store.get("conv")
            holder = await store.lock("conv")
            order: list[int] = []

            async def waiter(n: int) -> None:
                async with store.lock("conv"):
                    order.append(n)
                    await session.append(Event.new("test/n", {"waiter": n}))

            waiters = [asyncio.create_task(waiter(n)) for n in range(8)]
            await asyncio.sleep(0.01)
            for n in range(5):
                await session.append(Event.new("test/n", {"holder": n}))
            await holder.release()
            await asyncio.wait_for(asyncio.gather(*waiters), 60)  # a guard, not a measure
            assert sorted(order) == list(range(8))
            assert await session.latest_seq() == 13

    run(main())


def test_a_task_cancelled_while_waiting_for_a_lock_leaves_it_free(tmp_path: Path) -> None:
    async def main() -> None:
        async with open_async_store(tmp_path) as store:
            holder = await store.lock("conv")
            waiter = asyncio.create_task(store.lock("conv").acquire())
            await asyncio.sleep(0.01)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            await holder.release()
            assert not await store.is_locked("conv")

    run(main())


def test_a_lock_taken_by_a_cancelled_try_is_released(tmp_path: Path) -> None:
    async def main() -> None:
        async with open_async_store(tmp_path) as store:
            real = store.sync.lock
            inside, release = threading.Event(), threading.Event()

            def slow_lock(session_id: str, *options: Any) -> Any:
                inside.set()
                release.wait(30)
                return real(session_id, *options)

            store.sync.lock = slow_lock  # type: ignore[method-assign]
            task = asyncio.create_task(store.lock("conv").acquire())
            await wait_for_thread(inside)
            task.cancel()
            release.set()
            with pytest.raises(asyncio.CancelledError):
                await task
            store.sync.lock = real  # type: ignore[method-assign]
            assert not await store.is_locked("conv")  # taken by the try, then released

    run(main())


@pytest.mark.parametrize("url", ["memory:", "{tmp}/jsonl"])
def test_a_merge_inside_the_parents_lock_does_not_wait_for_it(tmp_path: Path, url: str) -> None:
    async def main() -> None:
        async with open_async_store(url.format(tmp=tmp_path)) as store:
            parent = await store.get("parent")
            await parent.append(Event.new("user/message", ags.Message.user("hi")))
            child = await parent.fork("worker")
            async with store.lock("parent", timeout=5):
                seq = await child.merge("done", lock_timeout=0)
            assert (await parent.read(seq - 1))[0].type == "subagent/end"
            other = await parent.fork("other")
            async with store.lock("parent", timeout=5):
                blocked = asyncio.create_task(other.discard("no", lock_timeout=0.05))
                with pytest.raises(LockTimeout):
                    await blocked  # another task: it waits, and times out
            await other.discard("no")

    run(main())


# -- lifecycle hooks -------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["memory:", "{tmp}/jsonl"])
def test_lifecycle_hooks_run_off_the_loop_or_on_it_when_async(tmp_path: Path, url: str) -> None:
    async def main() -> None:
        loop_thread = threading.get_ident()
        seen: list[tuple[str, str, bool]] = []

        def plain(event: LifecycleEvent) -> None:
            seen.append(("plain", event.type, threading.get_ident() == loop_thread))

        async def coroutine(event: LifecycleEvent) -> None:
            await asyncio.sleep(0)
            seen.append(("async", event.type, threading.get_ident() == loop_thread))

        async def broken(event: LifecycleEvent) -> None:
            raise RuntimeError("hook bug")

        async with open_async_store(url.format(tmp=tmp_path)) as store:
            for hook in (plain, coroutine, broken):
                store.add_lifecycle_hook(hook)
            parent = await store.get("parent")
            await parent.append(Event.new("test/n"))
            child = await parent.fork("a")
            await child.merge("done")
            assert seen == [
                ("plain", "fork", False),
                ("async", "fork", True),
                ("plain", "merge", False),
                ("async", "merge", True),
            ]
            store.remove_lifecycle_hook(coroutine)
            await parent.fork("b")
            assert len(seen) == 5

    run(main())


# -- the rest of the API ---------------------------------------------------------------------


def test_compaction_records_and_encryption_as_coroutines(tmp_path: Path) -> None:
    async def main() -> None:
        async with open_async_store(tmp_path, passphrase="old secret") as store:
            assert store.encrypted
            session = await store.create("s", [Event.new("test/n")], model="m1")
            assert (await session.info()).model == "m1"
            assert (await session.update(model="m2")).model == "m2"
            for n in range(4):
                async with session.turn() as turn:
                    await turn.user(f"q{n}")
                    await turn.assistant(f"a{n}")
            assert await session.compact("summary", up_to_message=3) is not None
            assert [m.text for m in await session.messages()][:2] == ["summary", "q2"]
            assert await session.prune(2) is not None
            assert await session.annotate_timeout("partial") > 0
            await store.rotate_key("s")
            await store.change_passphrase("old secret", "new secret")
            await store.meta_set("app", "k", "v")
            assert await store.meta_get("app", "k") == "v"
            assert [info.id for info in await store.list()] == ["s"]
            assert await store.expired() == [] and await store.purge_expired() == []
            assert [r.status for r in await store.recover(["s"])] == ["clean"]
            await store.shred("s")
            with pytest.raises(ags.EncryptionError):
                await (await store.get("s")).read()
            assert await store.delete("s")
            assert not await store.exists("s")
        async with open_async_store(tmp_path, passphrase="new secret") as again:
            assert await again.list() == []

    run(main())


# ---------------------------------------------------------------------------------------------
# Writes that would land outside any turn, and results no call asked for (as the sync recorder).


def test_async_helpers_of_a_turn_or_step_not_open_raise() -> None:
    async def main() -> None:
        async with open_async_store("memory:") as store:
            session = await store.get("s")
            never = session.turn()
            with pytest.raises(UsageError, match="not entered"):
                await never.user("hi")
            async with session.turn() as turn:
                unentered = turn.step()
                with pytest.raises(UsageError, match=r"step 0 .* is not entered"):
                    await unentered.assistant("lost")
                async with turn.step() as step:
                    await step.assistant("kept")
                with pytest.raises(UsageError, match=r"step 0 .* is closed"):
                    await step.usage(input_tokens=5)
            with pytest.raises(UsageError, match="turn of session 's' is closed"):
                await turn.assistant("after the end")
            events = await session.read()
            assert events[-1].type == TURN_END
            assert [e.type for e in events].count("assistant/message") == 1

    run(main())


def test_an_async_tool_result_for_a_call_never_made_raises_and_names_the_open_calls() -> None:
    async def main() -> None:
        async with open_async_store("memory:") as store:
            session = await store.get("s")
            async with session.turn() as turn, turn.step() as step:
                await step.assistant(tool_calls=[ToolCall("c1", "read")])
                with pytest.raises(UsageError, match=r"'c9' answers no open .*open calls: 'c1'"):
                    await step.tool_result("c9", "read", "made up")
                await step.tool_result("c1", "read", "ok")
            results = [e for e in await session.read() if e.type == "tool/result"]
            assert [e.payload().call_id for e in results] == ["c1"]

    run(main())


def test_async_tool_calls_given_as_dicts_are_refused_naming_tool_call() -> None:
    async def main() -> None:
        async with open_async_store("memory:") as store:
            session = await store.get("s")
            call: Any = {"id": "c1", "name": "read"}
            async with session.turn() as turn, turn.step() as step:
                with pytest.raises(UsageError, match=r"tool_calls\[0\] must be a ToolCall"):
                    await step.assistant("Looking.", tool_calls=[call])
            assert [m.role for m in await session.messages()] == []

    run(main())


def test_async_compact_keeping_no_turns_inside_a_running_turn_keeps_that_turn() -> None:
    async def main() -> None:
        async with open_async_store("memory:") as store:
            session = await store.get("s")
            async with session.turn() as turn:
                await turn.user("first")
                await turn.assistant("one")
            async with session.turn() as turn:
                await turn.user("second")
                assert await session.compact("summary of first", keep_turns=0) is not None
                history = [m.text for m in await session.messages()]
                assert history == ["summary of first", "second"]

    run(main())
