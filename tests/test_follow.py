"""Live feeds (``agentsession.follow``): ``session.follow()`` and ``store.changes()``, sync and
async, on memory, JSONL, SQLite and PostgreSQL (the latter needs
``AGENTSESSION_TEST_POSTGRES_DSN``): order and exactly-once, ``after`` and ``timeout``, a delete
and re-create while followed (``SessionReset``), cancellation, and four writer processes
appending 2,000 events each while three followers read (one restarting from its last seq)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentsession as ags
from agentsession.aio import open_async_store
from agentsession.errors import SessionReset, UsageError

from .store_urls import store_url


@pytest.fixture(params=["memory", "jsonl", "sqlite", "postgres", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from store_url(request.param, tmp_path)


@pytest.fixture(params=["jsonl", "sqlite", "postgres", "redis"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from store_url(request.param, tmp_path)


def note(i: int) -> ags.Event:
    return ags.Event.new("app/note", {"i": i})


def writer_store(store: ags.BaseStore, url: str) -> ags.BaseStore:
    """Another store object on the same data (the same one for memory)."""
    return store if url == "memory:" else ags.open_store(url)


def test_follow_yields_every_event_once_in_order(url: str) -> None:
    with ags.open_store(url) as store:
        session = store.get("f")
        session.append(note(-1))
        other = writer_store(store, url)

        def write() -> None:
            for i in range(200):
                other.get("f").append(note(i))
                if i % 50 == 0:
                    time.sleep(0.01)

        got: list[int] = []
        follower = session.follow(after=1, timeout=2)
        thread = threading.Thread(target=write)
        thread.start()
        for event in follower:
            got.append(event.seq)
            if len(got) == 200:
                follower.close()
        thread.join()
        if other is not store:
            other.close()
        assert got == list(range(2, 202))
        assert [e.payload()["i"] for e in session.read(1)] == list(range(200))
        assert not store._changes.followed  # the closed follower left the hub


def test_after_and_timeout(url: str) -> None:
    with ags.open_store(url) as store:
        session = store.get("f")
        session.append_many([note(i) for i in range(5)])
        assert [e.seq for e in session.follow(after=2, timeout=0)] == [3, 4, 5]
        started = time.monotonic()
        assert list(session.follow(timeout=0.2)) == []  # the default: from the latest now
        assert time.monotonic() - started >= 0.2
        for bad in ({"after": -1}, {"after": "1"}, {"timeout": -1}, {"after": True}):
            with pytest.raises(UsageError):
                session.follow(**bad)  # type: ignore[arg-type]


def test_a_delete_and_recreate_while_followed_raises_session_reset(url: str) -> None:
    with ags.open_store(url) as store:
        session = store.get("f")
        session.append_many([note(i) for i in range(3)])
        other = writer_store(store, url)
        follower = session.follow(after=0, timeout=5)
        assert [next(follower).seq for _ in range(3)] == [1, 2, 3]

        def recreate() -> None:
            time.sleep(0.1)
            other.delete("f")
            other.get("f").append_many([note(i) for i in range(5)])

        thread = threading.Thread(target=recreate)
        thread.start()
        with pytest.raises(SessionReset) as info:
            next(follower)
        thread.join()
        assert info.value.first_seq == 1 and info.value.session_id == "f"
        if other is not store:
            other.close()


def test_the_async_follow_and_its_cancellation(tmp_path: Path) -> None:
    async def run() -> tuple[list[int], bool]:
        async with open_async_store(tmp_path / "s") as store:
            session = await store.get("f")
            await session.append(note(0))
            seen: list[int] = []

            async def follow() -> None:
                async for event in session.follow(after=0):
                    seen.append(event.seq)

            task = asyncio.create_task(follow())
            for i in range(1, 4):
                await asyncio.sleep(0.02)
                await session.append(note(i))
            for _ in range(100):
                if len(seen) == 4:
                    break
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return seen, store.sync._changes.followed

    seen, still_followed = asyncio.run(run())
    assert seen == [1, 2, 3, 4]
    assert not still_followed  # cancelling left the hub


def test_store_changes_reports_created_appended_and_deleted(url: str) -> None:
    with ags.open_store(url) as store:
        store.get("a").append(note(0))
        other = writer_store(store, url)

        def write() -> None:
            while not store._changes.followed:  # the feed has subscribed, then lists
                time.sleep(0.01)
            time.sleep(0.2)
            other.get("a").append(note(1))
            other.get("b").append_many([note(0), note(1)])
            time.sleep(0.3)
            other.delete("a")

        thread = threading.Thread(target=write)
        thread.start()
        seen: dict[tuple[str, str], int] = {}
        positions = []
        for change in store.changes(timeout=5):
            seen[(change.session_id, change.kind)] = change.seq
            positions.append(change.position)
            if ("a", "deleted") in seen:
                break
        thread.join()
        assert seen == {("a", "appended"): 2, ("b", "created"): 2, ("a", "deleted"): 0}
        # Resuming from before b's append reports b again; from the latest, nothing.
        resumed = list(store.changes(after="|", timeout=0.1))
        assert [(c.session_id, c.kind, c.seq) for c in resumed] == [("b", "appended", 2)]
        assert list(store.changes(after=resumed[-1].position, timeout=0.1)) == []
        with pytest.raises(UsageError):
            store.changes(after="not a position")
        if other is not store:
            other.close()


_WRITER = textwrap.dedent(
    """
    import sys
    import agentsession as ags
    store = ags.open_store(sys.argv[1])
    session = store.get("f")
    for i in range(int(sys.argv[3])):
        session.append(ags.Event.new("app/note", {"w": sys.argv[2], "i": i}))
    store.close()
    """
)


@pytest.mark.slow
def test_four_writer_processes_and_three_followers(shared_url: str) -> None:
    """4 processes append 2,000 events each while 3 followers read (one of them starting
    again from its last seq twice): each sees every event once, in seq order, and each
    writer's events in its own order."""
    per_writer = 2000
    total = 4 * per_writer
    with ags.open_store(shared_url) as store:
        store.get("f").append(note(-1))  # the store exists before the processes race
    results: dict[str, list[ags.Event]] = {}
    errors: list[BaseException] = []

    def follower(name: str, restarts: int) -> None:
        try:
            got: list[ags.Event] = []
            cursor = 1
            with ags.open_store(shared_url) as mine:
                session = mine.get("f")
                for round_ in range(restarts + 1):
                    stop_at = total if round_ == restarts else (round_ + 1) * total // 3
                    for event in session.follow(after=cursor, timeout=30):
                        got.append(event)
                        cursor = event.seq
                        if len(got) >= stop_at:
                            break  # closes this follower; the next round starts at cursor
            results[name] = got
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=follower, args=(name, restarts))
        for name, restarts in (("a", 0), ("b", 0), ("c", 2))
    ]
    for thread in threads:
        thread.start()
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, shared_url, str(w), str(per_writer)])
        for w in range(4)
    ]
    try:
        for proc in writers:
            assert proc.wait(120) == 0
    finally:
        for proc in writers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    for name, got in results.items():
        assert [e.seq for e in got] == list(range(2, total + 2)), name
        for w in range(4):
            mine = [e.payload()["i"] for e in got if e.payload().get("w") == str(w)]
            assert mine == list(range(per_writer)), (name, w)
    assert set(results) == {"a", "b", "c"}


def test_a_session_that_does_not_exist_yet_is_followed_from_its_creation(
    shared_url: str,
) -> None:
    with ags.open_store(shared_url) as store, ags.open_store(shared_url) as other:
        follower = store.get("later").follow(after=0, timeout=10)

        def create() -> None:
            time.sleep(0.2)
            other.get("later").append_many([note(0), note(1)])

        thread = threading.Thread(target=create)
        thread.start()
        assert [next(follower).seq, next(follower).seq] == [1, 2]  # no SessionReset
        follower.close()
        thread.join()
