"""PostgreSQL through psycopg's native ``AsyncConnectionPool``
(``agentsession.backends.postgres.aio``): which operations run natively (no task in the
store's executor), that their results equal the sync path's with sync writers in another
thread and another process, that a deleted and recreated session is detected, that a cancelled
append leaves whole batches and a session object that took in exactly what was stored, and
what falls back to worker threads.

The storage contract through the native path is ``test_conformance_async.py``'s
``TestAsyncPostgresStore`` (the default placement is native). Needs the server named by
``AGENTSESSION_TEST_POSTGRES_DSN``; skipped without it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import random
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import pytest

from agentsession import (
    ConflictError,
    Event,
    Message,
    OutcomeUnknown,
    SessionExpired,
    open_store,
)
from agentsession.aio import AsyncBackend, AsyncSession, AsyncStore, open_async_store
from agentsession.events import ASSISTANT_MESSAGE, USER_MESSAGE, decode

from .test_aio import CountingExecutor, batch, check_whole_batches
from .test_conformance_postgres import (
    DSN,
    SKIP_REASON,
    drop_schemas,
    new_schema_name,
    url_with_schema,
)

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not DSN, reason=SKIP_REASON)]

if DSN:
    import psycopg
    from psycopg import sql

    from agentsession.backends.postgres import aio as postgres_aio
    from agentsession.backends.postgres.aio import PostgresAsyncBackend

if TYPE_CHECKING:
    from agentsession.backends.postgres import PostgresLog

T = TypeVar("T")


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


@pytest.fixture
def schema() -> Iterator[str]:
    name = new_schema_name()
    try:
        yield name
    finally:
        drop_schemas([name])


@pytest.fixture
def url(schema: str) -> str:
    return url_with_schema(schema)


def said(text: str, kind: str = ASSISTANT_MESSAGE) -> Event:
    role = Message.user if kind == USER_MESSAGE else Message.assistant
    return Event.new(kind, role(text))


def pg(session: AsyncSession) -> PostgresLog:
    """The PostgreSQL log of the session object an async session wraps (its life, whether it
    opens again)."""
    return cast("PostgresLog", session.sync.plans.log)


def stored_log(url: str, session_id: str) -> list[Event]:
    """The session's log as a fresh sync store reads it."""
    with open_store(url) as store:
        return store.get(session_id).read()


def check_window(session: AsyncSession, log: list[Event]) -> None:
    """The session object holds exactly the end of the stored log: its window is the log from
    the window's start, and its latest seq the log's."""
    sync = session.sync
    assert sync._latest_seq == (log[-1].seq if log else 0)
    start = sync._window_start
    assert [(e.seq, bytes(e.data)) for e in sync._window] == [
        (e.seq, bytes(e.data)) for e in log[start - 1 :]
    ]


# -- what runs natively -----------------------------------------------------------------------


def test_appends_reads_and_messages_run_natively_with_no_task_in_the_executor(url: str) -> None:
    async def main() -> None:
        executor = CountingExecutor()
        async with open_async_store(url, executor=executor) as store:
            assert isinstance(store.backend, PostgresAsyncBackend)
            session = await store.get("s")  # opening reads the tail: a worker thread
            opened = len(executor.submitted)
            assert await session.append(said("first")) == 1  # creates the session's row
            assert await session.append(said("hi", USER_MESSAGE)) == 2  # the cap: none
            assert await session.append_many([said("a"), said("b")]) == [3, 4]
            assert await session.append_many(batch(0, 3), expect_seq=4) == [5, 6, 7]
            with pytest.raises(ConflictError, match="expected the latest seq to be 1"):
                await session.append_many(batch(1, 2), expect_seq=1)
            assert await session.latest_seq() == 7
            assert [e.seq for e in await session.read(after=2, limit=2)] == [3, 4]
            assert await session.read(after=2, limit=0) == []
            history = await session.messages()
            assert [m.text for m in history] == ["first", "hi", "a", "b"]
            assert [e.message.text for e in await session.entries()] == [m.text for m in history]
            for n in range(2, 70):
                await session.append(Event.new("test/n", {"n": n}))
            assert len(executor.submitted) == opened  # nothing went to a thread

            async with open_async_store(url, executor=executor) as again:
                other = await again.get("s")  # the tail only: the first events are in storage
                assert other.sync._window_start > 1
                before = len(executor.submitted)
                older = await other.read(after=0, limit=3)  # a native range read
                assert [e.seq for e in older] == [1, 2, 3]
                assert await other.append(Event.new("test/n")) == 76
                assert len(executor.submitted) == before
            check_window(session, stored_log(url, "s")[:-1])
            assert await session.latest_seq() == 76  # caught up natively

    run(main())


@pytest.mark.parametrize(
    ("options", "events", "threaded"),
    [
        ({"key": bytes(32)}, ["test/n"], False),  # sealed appends: the key read natively
        ({"max_messages": 4}, [USER_MESSAGE], False),  # the history cap: the plan's, native
        ({"max_messages": 4}, [ASSISTANT_MESSAGE], False),
        ({"offload": "always"}, ["test/n"], True),
    ],
)
def test_what_falls_back_to_worker_threads(
    url: str, options: dict[str, Any], events: list[str], threaded: bool
) -> None:
    async def main() -> None:
        executor = CountingExecutor()
        async with open_async_store(url, executor=executor, **options) as store:
            native = isinstance(store.backend, PostgresAsyncBackend)
            assert native == (options.get("offload") != "always")
            assert type(store.backend) is AsyncBackend or native
            session = await store.get("s")
            await session.append(said("before"))
            before = len(executor.submitted)
            for kind in events:
                await session.append(said("x", kind) if "message" in kind else Event.new(kind))
            assert (len(executor.submitted) > before) == threaded
            assert [e.seq for e in await session.read()] == [1, 2]

    run(main())


def test_a_ttl_expired_session_is_refused_as_by_the_sync_api(url: str) -> None:
    now = [dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)]

    async def main() -> None:
        async with open_async_store(url, ttl=dt.timedelta(hours=1), clock=lambda: now[0]) as store:
            session = await store.get("s")
            await session.append(Event.new("test/n"))
            now[0] += dt.timedelta(hours=2)
            with pytest.raises(SessionExpired):
                await session.append(Event.new("test/n"))
            assert await session.latest_seq() == 1

    run(main())


def test_messages_load_the_window_natively_once_then_answer_from_it(url: str) -> None:
    with open_store(url) as sync:
        writer = sync.get("s")
        for n in range(80):
            writer.append(said(f"m{n}"))

    async def main() -> None:
        executor = CountingExecutor()
        async with open_async_store(url, executor=executor) as store:
            session = await store.get("s")  # the tail: the window is not loaded
            before = len(executor.submitted)
            assert not session.sync._full
            assert len(await session.messages()) == 80  # loads the full window: natively
            assert session.sync._full
            await session.append(said("more"))
            assert [m.text for m in await session.messages()][-2:] == ["m79", "more"]
            assert len(executor.submitted) == before

    run(main())


def test_the_async_pool_opens_on_first_use_and_closes_with_the_store(
    url: str, schema: str
) -> None:
    def connections() -> int:
        with psycopg.connect(DSN, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                (f"agentsession-async/{schema}",),
            ).fetchone()
        return int(row[0]) if row else 0

    async def main() -> None:
        store = await open_async_store(url)
        session = await store.get("s")
        assert connections() == 0  # not used yet
        await session.append(Event.new("test/n"))
        assert connections() >= 1
        await store.close()
        for _ in range(200):  # the server drops a backend soon after its client hangs up
            if connections() == 0:
                break
            await asyncio.sleep(0.01)
        assert connections() == 0

    run(main())


def test_a_second_event_loop_gets_threads_while_the_pools_is_open_then_a_pool(url: str) -> None:
    executor = CountingExecutor()
    store = AsyncStore(open_store(url), executor=executor)
    other = asyncio.new_event_loop()
    running = threading.Thread(target=other.run_forever)
    running.start()

    async def use(expected_seq: int) -> int:
        session = await store.get("s")
        before = len(executor.submitted)
        assert await session.append(Event.new("test/n")) == expected_seq
        return len(executor.submitted) - before

    try:
        assert asyncio.run_coroutine_threadsafe(use(1), other).result(30) == 0  # its pool
        assert run(use(2)) == 1  # the pool's loop is still open: a worker thread
    finally:

        async def cancel_the_rest() -> None:  # as asyncio.run does before closing its loop
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(cancel_the_rest(), other).result(30)
        other.call_soon_threadsafe(other.stop)
        running.join()
        other.close()
    assert run(use(3)) == 0  # the pool's loop is closed: a new pool on this one

    async def close() -> None:
        await store.close()

    run(close())
    executor.shutdown()


_UNCLOSED = textwrap.dedent(
    """
    import asyncio, sys
    from agentsession import Event, open_store
    from agentsession.aio import AsyncStore
    store = AsyncStore(open_store(sys.argv[1]))

    async def use():
        session = await store.get("s")
        for _ in range(3):
            await session.append(Event.new("test/n"))

    for _ in range(20):
        asyncio.run(use())  # never closed: each run ends with its pool open
    print(store.sync.get("s").latest_seq)
    """
)


def test_a_store_left_open_never_keeps_asyncio_run_from_returning(url: str) -> None:
    """psycopg_pool's workers catch a cancellation that arrives while they maintain a
    connection; the backend closes a pool left open when ``asyncio.run`` cancels the tasks
    left, so that the run returns (the timeout only guards the test run against a hang)."""
    done = subprocess.run(
        [sys.executable, "-c", _UNCLOSED, url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["60"]


def test_native_spans_are_the_sync_apis(url: str) -> None:
    pytest.importorskip("opentelemetry.sdk", reason="the OpenTelemetry SDK comes with dev")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentsession import _trace

    def spans(memory: InMemorySpanExporter) -> list[tuple[str, dict[str, Any]]]:
        found = [
            (span.name, {k: v for k, v in (span.attributes or {}).items() if "session.id" not in k})
            for span in memory.get_finished_spans()
        ]
        memory.clear()
        return found

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    _trace.enable(tracer_provider=provider)
    try:
        with open_store(url) as store:
            sync = store.get("sync")
            sync.append(said("a"))
            sync.append(said("q", USER_MESSAGE))
            sync.append_many([said("b"), said("c")])
            sync.read(after=1)
            sync.messages(agent="x")
            expected = spans(memory)

        async def main() -> None:
            executor = CountingExecutor()
            async with open_async_store(url, executor=executor) as store:
                session = await store.get("async")
                before = len(executor.submitted)
                await session.append(said("a"))
                await session.append(said("q", USER_MESSAGE))
                await session.append_many([said("b"), said("c")])
                await session.read(after=1)
                await session.messages(agent="x")
                assert len(executor.submitted) == before

        memory.clear()
        run(main())
        assert spans(memory) == expected
    finally:
        _trace.disable()
        provider.shutdown()


async def _append_many_losing_its_connection(
    session: AsyncSession, schema: str, events: list[Event]
) -> list[int] | BaseException:
    """``append_many(events)`` while its connection waits on a row lock, ended meanwhile by
    ``pg_terminate_backend``: its result, or what it raised."""
    blocker = _blocking_row_lock(schema, "s")
    try:
        task = asyncio.create_task(session.append_many(events))
        await _waiting_on_a_lock(schema)
        with psycopg.connect(DSN, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s AND wait_event_type = 'Lock'",
                (f"agentsession-async/{schema}",),
            )
        try:
            return await asyncio.wait_for(asyncio.shield(task), 0.5)
        except asyncio.TimeoutError:
            pass  # riding it out: the retry waits on the lock too
        except BaseException as exc:
            return exc
    finally:
        blocker.commit()
        blocker.close()
    try:
        return await task
    except BaseException as exc:
        return exc


def test_a_connection_lost_during_an_append_is_ridden_out_and_stored_once(
    url: str, schema: str
) -> None:
    async def main() -> None:
        async with open_async_store(url) as store:
            session = await store.get("s")
            await session.append(Event.new("test/start"))
            events = batch(1, 3)
            # No error for the caller: tried again, once.
            assert await _append_many_losing_its_connection(session, schema, events) == [2, 3, 4]
            assert await session.append(Event.new("test/after")) == 5
            log = stored_log(url, "s")
            assert [e.id for e in log[1:4]] == [e.id for e in events]
            check_window(session, log)

    run(main())


def test_with_reconnect_timeout_0_a_lost_append_is_an_unknown_outcome_error(
    url: str, schema: str
) -> None:
    async def main() -> None:
        async with open_async_store(url, reconnect_timeout=0) as store:
            session = await store.get("s")
            await session.append(Event.new("test/start"))
            events = batch(1, 3)
            outcome = await _append_many_losing_its_connection(session, schema, events)
            assert isinstance(outcome, OutcomeUnknown), outcome
            assert "outcome is unknown" in str(outcome)
            # The same events again: found not stored (the server ended the transaction), so
            # stored now, once.
            assert await session.append_many(events) == [2, 3, 4]
            assert await session.append_many(events) == [2, 3, 4]
            check_window(session, stored_log(url, "s"))

    run(main())


# -- the same results as the sync path ----------------------------------------------------------

_PROCESS_WRITER = textwrap.dedent(
    """
    import json, os, sys, time
    import agentsession as ags
    store = ags.open_store(sys.argv[1])
    session = store.get("shared")
    print("ready", flush=True)
    while not os.path.exists(sys.argv[2]):
        time.sleep(0.001)
    seqs = []
    for i in range(int(sys.argv[3])):
        seqs.append(session.append(ags.Event.new("test/w", {"w": "process", "i": i})))
        time.sleep(0.001)  # spread over the async writers' run
    print(json.dumps(seqs), flush=True)
    store.close()
    """
)


def test_native_results_equal_the_sync_paths_with_writers_in_a_thread_and_a_process(
    url: str, tmp_path: Path
) -> None:
    """Two tasks appending through the native path while a third reads, a thread appending
    through the same session object's sync API, a thread on another store and another process:
    every writer's seqs are where its events are, the log is gap-free, every read saw the log
    as it is, and the async session object's window and history are the log's."""
    go = tmp_path / "go"
    child = subprocess.Popen(
        [sys.executable, "-c", _PROCESS_WRITER, url, str(go), "60"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    got: dict[tuple[str, int], int] = {}

    def note(writer: str, events: list[Event], seqs: list[int]) -> None:
        for event, seq in zip(events, seqs, strict=True):
            got[(writer, decode(event.data)["i"])] = seq

    async def main() -> None:
        executor = CountingExecutor()
        async with open_async_store(url, executor=executor) as store:
            session = await store.get("shared")
            await session.append(Event.new("test/start"))

            async def task(name: str) -> None:
                rng = random.Random(name)
                i = 0
                while i < 60:
                    size = min(rng.randint(1, 3), 60 - i)
                    events = [Event.new("test/w", {"w": name, "i": i + k}) for k in range(size)]
                    if size == 1:
                        seqs = [await session.append(events[0])]
                    else:
                        seqs = await session.append_many(events)
                    note(name, events, seqs)
                    i += size

            seen: list[list[Event]] = []
            writing = True

            async def reader() -> None:
                latest = 0
                while writing:
                    now = await session.latest_seq()
                    assert now >= latest
                    latest = now
                    seen.append(await session.read(after=max(0, now - 5)))
                    await session.messages()

            def thread_writer(name: str, sync: Any) -> None:
                for i in range(40):
                    event = Event.new("test/w", {"w": name, "i": i})
                    note(name, [event], [sync.append(event)])
                    time.sleep(0.001)

            other = open_store(url)
            threads = [
                # the same session object, through the sync API
                threading.Thread(target=thread_writer, args=("thread", session.sync)),
                threading.Thread(target=thread_writer, args=("other", other.get("shared"))),
            ]
            go.touch()
            for thread in threads:
                thread.start()
            reading = asyncio.create_task(reader())
            await asyncio.gather(task("a"), task("b"))
            for thread in threads:
                await asyncio.to_thread(thread.join)
            out, _ = await asyncio.to_thread(child.communicate, timeout=60)
            writing = False
            await reading
            other.close()
            assert child.returncode == 0
            note("process", [Event.new("test/w", {"i": i}) for i in range(60)], json.loads(out))

            log = stored_log(url, "shared")
            assert [e.seq for e in log] == list(range(1, len(log) + 1))
            assert len(log) == 1 + 60 + 60 + 40 + 40 + 60
            for event in log[1:]:
                payload = decode(event.data)
                assert got[(payload["w"], payload["i"])] == event.seq
            for events in seen:  # each read returned the log's events at their seqs
                assert [(e.seq, bytes(e.data)) for e in events] == [
                    (e.seq, bytes(e.data)) for e in log[events[0].seq - 1 : events[-1].seq]
                ]
            assert await session.latest_seq() == len(log)
            check_window(session, log)
            with open_store(url) as sync:
                assert await session.messages() == sync.get("shared").messages()
                assert await session.read(after=100) == sync.get("shared").read(after=100)

    try:
        run(main())
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_a_deleted_and_recreated_session_is_detected_natively(url: str) -> None:
    async def main() -> None:
        executor = CountingExecutor()
        async with open_async_store(url, executor=executor) as store:
            session = await store.get("s")
            await session.append_many([said("old 1"), said("old 2"), said("old 3")])
            await session.messages()
            old_life = pg(session).life
            with open_store(url) as other:
                other.delete("s")
            assert await session.latest_seq() == 0  # deleted: seen natively
            assert await session.read() == []
            with open_store(url) as other:
                other.get("s").append_many([said("new 1"), said("new 2")])
            # Appending into the new life: the object starts over from it, with nothing old.
            assert await session.append(said("mine")) == 3
            assert pg(session).life != old_life
            assert [m.text for m in await session.messages()] == ["new 1", "new 2", "mine"]
            check_window(session, stored_log(url, "s"))

            # A conditional append planned in one life never lands in the next.
            planned_at = await session.latest_seq()
            with open_store(url) as other:
                other.delete("s")
                other.get("s").append_many([said("x"), said("y"), said("z")])
            with pytest.raises(ConflictError):
                await session.append_many([said("planned")], expect_seq=planned_at)
            assert [m.text for m in await session.messages()] == ["x", "y", "z"]
            check_window(session, stored_log(url, "s"))

    run(main())


def test_single_appends_take_the_fast_statement_natively(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the first append (which creates the session's row: the general path), each single
    append is the sync log's fast statement (``append_next``), awaited on the pool."""
    fast: list[bool] = []
    store_one = postgres_aio._store_one

    async def counted(*args: Any) -> bool:
        fast.append(await store_one(*args))
        return fast[-1]

    monkeypatch.setattr(postgres_aio, "_store_one", counted)

    async def main() -> None:
        async with open_async_store(url) as store:
            session = await store.get("s")
            assert await session.append(said("first")) == 1
            assert fast == []
            for n in range(2, 5):
                assert await session.append(said(f"n{n}")) == n
            assert fast == [True, True, True]
            with open_store(url) as other:
                other.get("s").append(said("theirs"))
            assert await session.append(said("mine")) == 6  # refused, then the general path
            assert fast == [True, True, True, False]
        assert [e.seq for e in stored_log(url, "s")] == [1, 2, 3, 4, 5, 6]

    run(main())


# -- encrypted sessions --------------------------------------------------------------------------

KEY = bytes(range(32))


def test_an_encrypted_session_seals_opens_and_keys_natively_with_no_task_in_the_executor(
    url: str, schema: str
) -> None:
    """A new session's key is recorded, an existing one's read, events sealed and opened, all
    on the pool: the sync API (another store object) reads back the plaintext, and a store
    opened without the key sees only sealed payloads."""

    async def main() -> None:
        executor = CountingExecutor()
        async with open_async_store(url, executor=executor, key=KEY) as store:
            assert isinstance(store.backend, PostgresAsyncBackend)
            session = await store.get("s")
            opened = len(executor.submitted)
            assert await session.append(said("secret one")) == 1  # records a new key
            assert await session.append_many([said("secret two", USER_MESSAGE), said("3")]) == [
                2,
                3,
            ]
            assert [m.text for m in await session.messages()] == ["secret one", "secret two", "3"]
            assert len(executor.submitted) == opened  # nothing went to a thread

            async with open_async_store(url, executor=executor, key=KEY) as again:
                other = await again.get("s")
                before = len(executor.submitted)
                assert [e.seq for e in await other.read(after=1)] == [2, 3]  # opened natively
                assert await other.append(said("four")) == 4
                assert len(executor.submitted) == before
            assert [m.text for m in await session.messages()] == [
                "secret one",
                "secret two",
                "3",
                "four",
            ]

        with open_store(url, key=KEY) as sync_store:
            texts = [m.text for m in sync_store.get("s").messages()]
            assert texts == ["secret one", "secret two", "3", "four"]
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            payloads = [row[0] for row in conn.execute("SELECT data::text FROM events")]
            keys = conn.execute(
                "SELECT count(*) FROM meta WHERE kind = 'crypto-session' AND key = 's'"
            ).fetchone()
        assert len(payloads) == 4 and not any("secret" in p for p in payloads)
        assert keys == (1,)

    run(main())


def test_two_async_stores_keying_a_new_session_at_once_agree_on_one_key(url: str) -> None:
    """Two store objects append the first events of a session at once, natively: one key is
    recorded (the second writer takes the first's), and every event opens."""

    async def main() -> None:
        async with (
            open_async_store(url, key=KEY) as one,
            open_async_store(url, key=KEY) as two,
        ):
            first, second = await one.get("s"), await two.get("s")

            async def write(session: AsyncSession, name: str) -> None:
                for i in range(5):
                    await session.append(said(f"{name} {i}"))

            await asyncio.gather(write(first, "a"), write(second, "b"))
            texts = sorted(m.text for m in await first.messages())
            assert texts == sorted([f"a {i}" for i in range(5)] + [f"b {i}" for i in range(5)])

        with open_store(url, key=KEY) as sync_store:
            assert len(sync_store.get("s").read()) == 10

    run(main())


def test_a_native_read_of_a_session_deleted_and_recreated_under_a_new_key_opens_it(
    url: str,
) -> None:
    """The cached key of a log's old life is dropped when the log is found replaced: the new
    life's key is read natively and its events open."""

    async def main() -> None:
        executor = CountingExecutor()
        async with open_async_store(url, executor=executor, key=KEY) as store:
            session = await store.get("s")
            await session.append_many([said("old 1"), said("old 2")])
            with open_store(url, key=KEY) as other:
                other.delete("s")
                other.get("s").append_many([said("new 1"), said("new 2"), said("new 3")])
            before = len(executor.submitted)
            assert [m.text for m in await session.messages()] == ["new 1", "new 2", "new 3"]
            assert await session.append(said("mine")) == 4
            assert len(executor.submitted) == before
        with open_store(url, key=KEY) as sync_store:
            assert [m.text for m in sync_store.get("s").messages()] == [
                "new 1",
                "new 2",
                "new 3",
                "mine",
            ]

    run(main())


# -- another thread moving the session object in the middle of a native call ------------------


class Interleave:
    """Runs sync code at chosen points of a native call (after its catch-up or range read,
    before or after its append statement): another store's writes, or another thread using
    the same session object (:meth:`blocked`), which must wait until the native call ends."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.at: dict[str, list[Callable[[], object]]] = {
            "after_fetch": [],
            "before_statement": [],
            "after_statement": [],
        }
        self.threads: list[tuple[threading.Thread, list[BaseException]]] = []
        fetch = PostgresAsyncBackend.fetch

        async def fetch_then(self_: Any, *args: Any) -> Any:
            rows = await fetch(self_, *args)
            self.run("after_fetch")
            return rows

        def around(store: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
            async def statement(*args: Any) -> Any:
                self.run("before_statement")
                landed = await store(*args)
                self.run("after_statement")
                return landed

            return statement

        monkeypatch.setattr(PostgresAsyncBackend, "fetch", fetch_then)
        # The general path's statement and the single-event fast path's.
        monkeypatch.setattr(postgres_aio, "_store_batch", around(postgres_aio._store_batch))
        monkeypatch.setattr(postgres_aio, "_store_one", around(postgres_aio._store_one))

    def run(self, point: str) -> None:
        steps, self.at[point] = self.at[point], []
        for step in steps:
            step()

    def blocked(self, fn: Callable[[], object]) -> Callable[[], None]:
        """A step that calls ``fn`` (a sync call on the session object) in another thread:
        that thread waits for the session's lock, which the native call holds to its end."""

        def step() -> None:
            errors: list[BaseException] = []

            def call() -> None:
                try:
                    fn()
                except BaseException as exc:
                    errors.append(exc)

            thread = threading.Thread(target=call)
            thread.start()
            thread.join(0.05)
            assert thread.is_alive(), "the thread did not wait for the native call"
            self.threads.append((thread, errors))

        return step

    def join(self) -> None:
        """Wait for the threads :meth:`blocked` started; raise what they raised."""
        threads, self.threads = self.threads, []
        for thread, errors in threads:
            thread.join(30)
            assert not thread.is_alive()
            if errors:
                raise errors[0]


def _interleaved(
    url: str,
    monkeypatch: pytest.MonkeyPatch,
    scenario: Callable[[AsyncSession, Any, Interleave], Awaitable[None]],
) -> int:
    """Run ``scenario(session, other_store_session, interleave)`` on a session holding three
    events; then the session object holds the stored log. Returns how many calls went to a
    worker thread."""

    async def main() -> int:
        executor = CountingExecutor()
        with open_store(url) as other_store:
            other = other_store.get("s")
            async with open_async_store(url, executor=executor) as store:
                session = await store.get("s")
                await session.append_many([said("1"), said("2"), said("3")])
                before = len(executor.submitted)
                interleave = Interleave(monkeypatch)
                await scenario(session, other, interleave)
                threaded = len(executor.submitted) - before
                interleave.join()
                if pg(session).stale:
                    await session.latest_seq()  # reloads (in a thread)
                check_window(session, stored_log(url, "s"))
                assert [m.text for m in await session.messages()] == [
                    m.text for m in other_store.get("s").messages()
                ]
                return threaded

    return run(main())


def recreate(other: Any) -> Callable[[], None]:
    """A step that deletes session ``s`` through ``other``'s store and creates it again with one
    event: another life of the log."""

    def step() -> None:
        other._store.delete("s")
        other._store.get("s").append(said("new"))

    return step


def test_a_thread_using_the_session_object_during_a_native_read_waits_for_it(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario(session: AsyncSession, other: Any, interleave: Interleave) -> None:
        other.append(said("4"))  # read by the native catch-up
        interleave.at["after_fetch"] += [
            lambda: other.append(said("5")),
            interleave.blocked(lambda: session.sync.latest_seq),  # catches up after the read
        ]
        assert [e.seq for e in await session.read()] == [1, 2, 3, 4]

    assert _interleaved(url, monkeypatch, scenario) == 0


def test_a_read_after_the_session_was_recreated_reloads_natively(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario(session: AsyncSession, other: Any, interleave: Interleave) -> None:
        recreate(other)()
        interleave.at["after_fetch"].append(interleave.blocked(lambda: session.sync.latest_seq))
        assert [e.seq for e in await session.read()] == [1]
        assert not pg(session).stale

    assert _interleaved(url, monkeypatch, scenario) == 0


def test_a_fast_path_append_after_another_writers_takes_the_general_path(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario(session: AsyncSession, other: Any, interleave: Interleave) -> None:
        interleave.at["before_statement"].append(lambda: other.append(said("theirs")))
        assert await session.append(said("mine")) == 5
        assert [m.text for m in await session.messages()][-2:] == ["theirs", "mine"]

    assert _interleaved(url, monkeypatch, scenario) == 0


def test_an_append_whose_batch_another_thread_took_in_first_is_not_taken_in_twice(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario(session: AsyncSession, other: Any, interleave: Interleave) -> None:
        interleave.at["after_statement"] += [
            lambda: other.append(said("after")),
            interleave.blocked(lambda: session.sync.latest_seq),  # takes in "after", later
        ]
        assert await session.append_many([said("m1"), said("m2")]) == [4, 5]
        interleave.join()
        texts = [m.text for m in await session.messages()]
        assert texts == ["1", "2", "3", "m1", "m2", "after"]


def test_an_append_after_another_writers_event_checks_its_ids_and_lands_after_it(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario(session: AsyncSession, other: Any, interleave: Interleave) -> None:
        # Appended between the plan and the statement: the statement writes nothing, the
        # append catches up, finds its ids are not among the new events, and appends again.
        interleave.at["before_statement"].append(lambda: other.append(said("before")))
        assert await session.append_many([said("m1"), said("m2")]) == [5, 6]
        # The same ids again, now stored by another writer first: nothing is written.
        batch = [said("m3"), said("m4")]
        interleave.at["before_statement"].append(lambda: other.append_many(batch))
        assert await session.append_many(batch) == [7, 8]
        texts = [m.text for m in await session.messages()]
        assert texts == ["1", "2", "3", "before", "m1", "m2", "m3", "m4"]

    assert _interleaved(url, monkeypatch, scenario) == 0


def test_an_append_whose_catch_up_another_thread_tries_to_overtake_is_taken_in_first(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario(session: AsyncSession, other: Any, interleave: Interleave) -> None:
        interleave.at["before_statement"].append(lambda: other.append(said("before")))
        # During the native range read of "before", the sync API tries to catch up: it waits.
        interleave.at["after_statement"].append(
            lambda: interleave.at["after_fetch"].append(
                interleave.blocked(lambda: session.sync.latest_seq)
            )
        )
        assert await session.append_many([said("m1"), said("m2")]) == [5, 6]
        interleave.join()  # (while the thread holds the session, a call goes to a thread)
        texts = [m.text for m in await session.messages()]
        assert texts == ["1", "2", "3", "before", "m1", "m2"]

    assert _interleaved(url, monkeypatch, scenario) == 0


def test_an_append_whose_log_is_recreated_right_after_its_statement_reloads_next(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario(session: AsyncSession, other: Any, interleave: Interleave) -> None:
        interleave.at["after_statement"] += [
            recreate(other),
            interleave.blocked(lambda: session.sync.latest_seq),  # then finds the new life
        ]
        assert await session.append_many([said("m1"), said("m2")]) == [4, 5]
        interleave.join()
        assert [m.text for m in await session.messages()] == ["new"]

    _interleaved(url, monkeypatch, scenario)


def test_a_session_recreated_as_a_child_with_a_cap_gets_the_cap(url: str) -> None:
    """The cap was known to be off when the user message was planned; the append lands in a new
    life of the log, a child forked with ``max_messages``: the cap is then applied, by the
    sync pipeline's own plan."""

    async def main() -> None:
        async with open_async_store(url) as store:
            session = await store.get("s")
            await session.append_many([said("old"), said("q", USER_MESSAGE)])
            with open_store(url) as other:
                other.delete("s")
                parent = other.get("p")
                parent.append(said("parent"))
                parent.fork("helper", child_id="s", max_messages=2)
            for n in range(3):
                await session.append_many([said(f"u{n}", USER_MESSAGE), said(f"a{n}")])
            with open_store(url) as other:
                expected = [m.text for m in other.get("s").messages()]
            assert [m.text for m in await session.messages()] == expected == ["u2", "a2"]

    run(main())


# -- cancellation -------------------------------------------------------------------------------


def test_appends_cancelled_at_random_points_leave_whole_batches_and_a_consistent_session(
    url: str,
) -> None:
    """Native appends cancelled after a random number of loop turns, a random real pause (so
    that some land mid round trip) or a random ``wait_for`` timeout: after each, the log holds
    whole batches with gap-free seqs, the session object holds exactly what was stored (it took
    the batch in before ``CancelledError`` arrived, or nothing was written), and nothing lands
    later."""
    rng = random.Random(20261201)

    async def main() -> None:
        executor = CountingExecutor()
        async with open_async_store(url, executor=executor) as store:
            session = await store.get("cancel")
            before = len(executor.submitted)
            cancelled = 0
            log: list[Event] = []
            for n in range(60):
                size = rng.randint(1, 4)
                events = batch(n, size)
                work = session.append(events[0]) if size == 1 else session.append_many(events)
                task = asyncio.ensure_future(work)
                how = rng.random()
                try:
                    if how < 0.4:
                        for _ in range(rng.randint(0, 8)):
                            await asyncio.sleep(0)
                        task.cancel()
                    elif how < 0.7:
                        await asyncio.sleep(rng.uniform(0, 0.0015))
                        task.cancel()
                    await asyncio.wait_for(task, timeout=rng.choice([0, 1e-4, 5e-4, 1e-3]))
                except (asyncio.CancelledError, asyncio.TimeoutError):
                    cancelled += 1
                log = stored_log(url, "cancel")
                check_whole_batches(log)
                check_window(session, log)
                await asyncio.sleep(0.002)  # a batch that landed late would show now
                assert len(stored_log(url, "cancel")) == len(log)
            assert cancelled > 0
            assert await session.append(Event.new("test/after")) == len(log) + 1
            assert len(executor.submitted) == before  # all native

    run(main())


def _blocking_row_lock(schema: str, session_id: str) -> psycopg.Connection[Any]:
    """A connection holding the session row's lock in an open transaction: appends to the
    session wait in the server until it commits."""
    conn = psycopg.connect(DSN)
    conn.execute(
        sql.SQL("SELECT 1 FROM {}.sessions WHERE id = %s FOR UPDATE").format(
            sql.Identifier(schema)
        ),
        (session_id,),
    )
    return conn


async def _waiting_on_a_lock(schema: str) -> None:
    """Until a connection of the async pool waits for a row lock in the server."""
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
        "AND wait_event_type = 'Lock'"
    )
    with psycopg.connect(DSN, autocommit=True) as conn:
        for _ in range(3000):
            row = conn.execute(query, (f"agentsession-async/{schema}",)).fetchone()
            if row and row[0]:
                return
            await asyncio.sleep(0.001)
    raise AssertionError("the append never reached the server")


def test_a_cancelled_append_gets_cancelled_error_once_its_statement_has_finished(
    url: str, schema: str
) -> None:
    async def main() -> None:
        async with open_async_store(url) as store:
            session = await store.get("s")
            await session.append(Event.new("test/start"))
            blocker = _blocking_row_lock(schema, "s")
            try:
                task = asyncio.create_task(session.append_many(batch(1, 3)))
                await _waiting_on_a_lock(schema)
                queued = asyncio.create_task(session.append_many(batch(2, 2)))
                for _ in range(5):
                    await asyncio.sleep(0)
                queued.cancel()  # waiting for the session's writer lock: nothing done
                with pytest.raises(asyncio.CancelledError):
                    await queued
                task.cancel()
                for _ in range(20):
                    await asyncio.sleep(0)
                assert not task.done()  # the statement runs on, waiting for the row
            finally:
                blocker.commit()
                blocker.close()
            with pytest.raises(asyncio.CancelledError):
                await task
            log = stored_log(url, "s")
            assert [decode(e.data).get("batch") for e in log[1:]] == [1, 1, 1]
            check_window(session, log)  # taken in before CancelledError arrived

    run(main())


def test_an_interrupted_statement_leaves_nothing_and_the_session_reloads(
    url: str, schema: str
) -> None:
    """The task running the append's plan interrupted during its statement (as when the event
    loop shuts down): psycopg cancels the statement in the server, the caller gets
    ``CancelledError``, nothing was written, and the session object, which cannot know that,
    reloads when next used."""

    async def main() -> None:
        async with open_async_store(url) as store:
            session = await store.get("s")
            await session.append(Event.new("test/start"))
            blocker = _blocking_row_lock(schema, "s")
            try:
                task = asyncio.create_task(session.append_many(batch(1, 3)))
                await _waiting_on_a_lock(schema)
                writes = [
                    t
                    for t in asyncio.all_tasks()
                    if getattr(t.get_coro(), "__name__", "") == "adrive"
                ]
                assert len(writes) == 1
                writes[0].cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            finally:
                blocker.commit()
                blocker.close()
            assert pg(session).stale
            assert [e.seq for e in await session.read()] == [1]
            assert await session.append(Event.new("test/after")) == 2
            check_window(session, stored_log(url, "s"))

    run(main())
