"""``session.follow()`` on PostgreSQL: the appends' notifications (``pg_notify`` in each
append's own statement, sync and native async alike) and the store's watcher, which
``LISTEN``\\ s on a connection of its own, connects again when that connection is lost, and
stops with the last follower or the store.

Needs the server named by ``AGENTSESSION_TEST_POSTGRES_DSN``; skipped without it. Every test
works in a schema of its own, dropped afterwards.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from agentsession import BaseStore, ConflictError, Event, open_store
from agentsession.aio import open_async_store

from .test_aio import CountingExecutor
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

    from agentsession.backends.postgres.aio import PostgresAsyncBackend
    from agentsession.backends.postgres.connections import Connections
    from agentsession.backends.postgres.schema import (
        NOTIFY_ID_BYTES,
        listen_lock_key,
        notify_channel,
    )
    from agentsession.backends.postgres.target import _Target
    from agentsession.backends.postgres.watch import PostgresWatcher, session_of


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


def eventually(check: Callable[[], bool], timeout: float = 15.0) -> None:
    """Wait until ``check()`` holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"still not true after {timeout} s: {check}")
        time.sleep(0.02)


def watcher_pids(schema: str) -> list[int]:
    """The server processes of the connections listening for this schema's appends."""
    with psycopg.connect(DSN, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
            (f"agentsession-watch/{schema}",),
        ).fetchall()
    return [row[0] for row in rows]


def watch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "agentsession-watch" and t.is_alive()]


def record_signs(store: BaseStore) -> list[str | None]:
    """Every sign the store's watcher gives (before its thread starts: wrap the hub's
    ``notify``, which the watcher is handed when it starts)."""
    hub = store._changes
    signs: list[str | None] = []
    notify = hub.notify

    def recording(session_id: str | None) -> None:
        signs.append(session_id)
        notify(session_id)

    hub.notify = recording  # type: ignore[method-assign]
    return signs


_WRITER = textwrap.dedent(
    """
    import sys
    from agentsession import Event, open_store

    store = open_store(sys.argv[1])
    session = store.get(sys.argv[2])
    n = 0
    for line in sys.stdin:
        how, count = line.split()
        made = []
        for _ in range(int(count)):
            n += 1
            made.append(Event.new("test/n", {"n": n}))
        if how == "one":
            for event in made:
                session.append(event)
        else:
            session.append_many(made)
        print(session.latest_seq, flush=True)
    store.close()
    """
)


class Writer:
    """A writer in another process: ``append("one", 5)`` appends 5 events one per call,
    ``append("many", 5)`` one batch of 5 (payloads ``{"n": 1}``, ``{"n": 2}``, ...)."""

    def __init__(self, url: str, session_id: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, url, session_id],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def append(self, how: str, count: int) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{how} {count}\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait(30) == 0


class Follower:
    """A thread following a session from seq 1 until it has ``total`` events (or nothing new
    came for 30 s), keeping what it yields. The session is created first, with an event of
    payload ``{"n": 0}`` (a session created while followed is a new life)."""

    def __init__(self, store: BaseStore, session_id: str, total: int) -> None:
        self.session = store.get(session_id)
        self.session.append(Event.new("test/n", {"n": 0}))
        self.total = total
        self.events: list[Event] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for event in self.session.follow(after=1, timeout=30.0):
                self.events.append(event)
                if len(self.events) >= self.total:
                    return
        except BaseException as exc:  # reported by the test
            self.error = exc

    @property
    def seqs(self) -> list[int]:
        return [event.seq for event in self.events]

    def wait_for(self, count: int) -> None:
        eventually(lambda: len(self.events) >= count or self.error is not None, 30.0)
        assert self.error is None

    def join(self) -> None:
        self.thread.join(40)
        assert not self.thread.is_alive() and self.error is None


# -- the notifications -------------------------------------------------------------------------


def test_the_channel_is_one_short_name_per_schema() -> None:
    assert notify_channel("agentsession") == notify_channel("agentsession")
    assert notify_channel("a") != notify_channel("b")
    long = notify_channel("ü" * 63)
    assert long.startswith("agentsession_") and long.isascii() and len(long) <= 63


@pytest.mark.parametrize(
    ("payload", "session_id"),
    [
        ("3 s", "s"),
        ("12 with spaces  in it ", "with spaces  in it "),
        ("7 ", ""),
        ("7", None),
        ("", None),
        ("x s", None),
        ("-1 s", None),
    ],
)
def test_the_payload_names_the_session(payload: str, session_id: str | None) -> None:
    assert session_of(payload) == session_id


def listen(schema: str, *, lock: bool = True) -> psycopg.Connection[Any]:
    """A connection listening on the schema's channel, holding its listen lock shared (as the
    watcher does: appends notify only then) unless ``lock`` is False."""
    conn = psycopg.connect(DSN, autocommit=True)
    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(notify_channel(schema))))
    if lock:
        conn.execute("SELECT pg_advisory_lock_shared(%s)", (listen_lock_key(schema),))
    return conn


def advisory_holders(schema: str) -> list[str]:
    """The modes in which the schema's listen lock is held, by anyone."""
    key = listen_lock_key(schema)
    with psycopg.connect(DSN, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT mode FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND ((classid::bigint << 32) | objid::bigint) = %s",
            (key & 0xFFFFFFFFFFFFFFFF if key >= 0 else key,),
        ).fetchall()
    return sorted(row[0] for row in rows)


def received(conn: psycopg.Connection[Any], count: int) -> list[str]:
    """The payloads of the next ``count`` notifications (fewer when they do not come)."""
    notes = list(conn.notifies(timeout=10.0, stop_after=count))
    return [note.payload for note in notes]


def test_every_statement_that_stores_events_notifies(url: str, schema: str) -> None:
    with listen(schema) as conn, open_store(url) as store:
        session = store.get("s")
        session.append(Event.new("test/n"))  # the general path: creates the row
        session.append(Event.new("test/n"))  # the fast path
        session.append_many([Event.new("test/n"), Event.new("test/n")])  # a batch
        assert received(conn, 3) == ["1 s", "2 s", "4 s"]
        with open_store(url) as second:
            other = second.get("s")  # it has seen seq 4
            session.append(Event.new("test/n"))
            other.append(Event.new("test/n"))  # the fast path writes nothing: the general path
        assert received(conn, 2) == ["5 s", "6 s"]
        store.delete("s")
        assert received(conn, 1) == ["6 s"]


def test_nothing_is_notified_when_nothing_is_written(url: str, schema: str) -> None:
    with listen(schema) as conn, open_store(url) as store:
        session = store.get("s")
        session.append(Event.new("test/n"))
        assert received(conn, 1) == ["1 s"]
        with pytest.raises(ConflictError):
            session.append_many([Event.new("test/n")], expect_seq=5)
        assert store.delete("nobody") is False
        assert list(conn.notifies(timeout=0.5)) == []


def test_nothing_is_notified_while_nobody_holds_the_listen_lock(url: str, schema: str) -> None:
    with listen(schema, lock=False) as conn, open_store(url) as store:
        session = store.get("s")
        session.append(Event.new("test/n"))  # the general path
        session.append(Event.new("test/n"))  # the fast path
        session.append_many([Event.new("test/n"), Event.new("test/n")])
        assert list(conn.notifies(timeout=0.5)) == []
        assert advisory_holders(schema) == []  # the appends' instant tries hold nothing
        with listen(schema):
            assert advisory_holders(schema) == ["ShareLock"]
            session.append(Event.new("test/n"))
            assert received(conn, 1) == ["5 s"]
        # Closing a connection does not wait for its server process to end and release
        # the lock: the listener has gone once nobody holds the lock.
        eventually(lambda: advisory_holders(schema) == [])
        session.append(Event.new("test/n"))
        assert list(conn.notifies(timeout=0.5)) == []


def test_a_session_id_too_long_to_send_leaves_the_seq_alone(url: str, schema: str) -> None:
    long_id = "x" * (NOTIFY_ID_BYTES + 1)  # (compressible: the primary key's index holds it)
    fitting = "é" * (NOTIFY_ID_BYTES // 2)
    with listen(schema) as conn, open_store(url) as store:
        store.get(long_id).append(Event.new("test/n"))
        store.get(fitting).append(Event.new("test/n"))
        assert received(conn, 2) == ["1", f"1 {fitting}"]


def test_the_native_async_path_notifies(url: str, schema: str) -> None:
    executor = CountingExecutor()

    async def scenario() -> None:
        async with open_async_store(url, executor=executor) as store:
            assert isinstance(store.backend, PostgresAsyncBackend)
            session = await store.get("a")
            before = len(executor.submitted)
            assert await session.append(Event.new("test/n")) == 1  # general path
            assert await session.append(Event.new("test/n")) == 2  # fast path
            assert await session.append_many([Event.new("test/n"), Event.new("test/n")]) == [3, 4]
            assert len(executor.submitted) == before  # all three ran natively

    with listen(schema) as conn:
        asyncio.run(scenario())
        assert received(conn, 3) == ["1 a", "2 a", "4 a"]


# -- the watcher -------------------------------------------------------------------------------


def test_a_follower_gets_another_process_appends_once_in_order(url: str, schema: str) -> None:
    with open_store(url) as store:
        signs = record_signs(store)
        follower = Follower(store, "s", 35)
        eventually(lambda: len(watcher_pids(schema)) == 1)
        writer = Writer(url, "s")
        try:
            assert writer.append("one", 20) == 21
            assert writer.append("many", 5) == 26
            assert writer.append("one", 10) == 36
            follower.wait_for(35)
        finally:
            writer.close()
            follower.join()
        assert follower.seqs == list(range(2, 37))
        assert [event.payload()["n"] for event in follower.events] == list(range(1, 36))
        assert signs.count("s") >= 3  # the signs named the session (not only the fallback)


def test_a_lost_watcher_connection_is_made_again(url: str, schema: str) -> None:
    with open_store(url) as store:
        signs = record_signs(store)
        follower = Follower(store, "s", 15)
        eventually(lambda: len(watcher_pids(schema)) == 1)
        (first,) = watcher_pids(schema)
        writer = Writer(url, "s")
        try:
            writer.append("one", 5)
            follower.wait_for(5)
            seen = len(signs)
            with psycopg.connect(DSN, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (first,))
            writer.append("one", 5)  # perhaps while nothing listens
            writer.append("many", 3)
            follower.wait_for(13)
            eventually(lambda: len(watcher_pids(schema)) == 1 and watcher_pids(schema) != [first])
            eventually(lambda: None in signs[seen:])  # connected again: read, all of you
            again = seen + signs[seen:].index(None) + 1
            writer.append("one", 2)
            follower.wait_for(15)
            eventually(lambda: "s" in signs[again:])  # notifications arrive again
        finally:
            writer.close()
            follower.join()
        assert follower.seqs == list(range(2, 17))


def test_the_watcher_says_any_may_have_changed_after_connecting_again(schema: str) -> None:
    with open_store(url_with_schema(schema)) as store:
        db: Connections = store._db  # type: ignore[attr-defined]
        watcher = PostgresWatcher(db, notify_channel(schema))
        signs: list[str | None] = []
        stop = threading.Event()
        thread = threading.Thread(target=watcher.run, args=(signs.append, stop))
        thread.start()
        try:
            eventually(lambda: signs == [None] and len(watcher_pids(schema)) == 1)
            store.get("s").append(Event.new("test/n"))
            eventually(lambda: signs == [None, "s"])
            (first,) = watcher_pids(schema)
            with psycopg.connect(DSN, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (first,))
            eventually(lambda: signs == [None, "s", None])
            assert watcher_pids(schema) not in ([], [first])
            store.get("s").append(Event.new("test/n"))
            eventually(lambda: signs == [None, "s", None, "s"])
        finally:
            stop.set()
            thread.join(2.0)
        assert not thread.is_alive()
        eventually(lambda: watcher_pids(schema) == [])


def test_the_watcher_stops_when_the_follower_closes(url: str, schema: str) -> None:
    with open_store(url) as store:
        session = store.get("s")
        session.append(Event.new("test/n"))
        feed = session.follow(after=0)
        assert next(feed).seq == 1  # subscribed: the watcher runs
        eventually(lambda: len(watcher_pids(schema)) == 1 and len(watch_threads()) == 1)
        feed.close()
        eventually(lambda: watch_threads() == [], 2.0)
        eventually(lambda: watcher_pids(schema) == [], 5.0)


def test_the_watcher_stops_when_the_store_closes(url: str, schema: str) -> None:
    store = open_store(url)
    session = store.get("s")
    session.append(Event.new("test/n"))
    feed = session.follow(after=0)
    assert next(feed).seq == 1
    eventually(lambda: len(watcher_pids(schema)) == 1 and len(watch_threads()) == 1)
    store.close()
    assert watch_threads() == []  # close waits for the thread
    eventually(lambda: watcher_pids(schema) == [], 5.0)
    feed.close()


def test_an_unreachable_server_is_tried_again_without_telling_the_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = "pw-Sh0uld-Never-Leak"
    parts = urlsplit(DSN)
    unreachable = urlunsplit(parts._replace(netloc=f"someone:{secret}@127.0.0.1:9"))
    db = Connections(
        _Target.parse(unreachable, "s"),
        durability="flush",
        pool_min_size=0,
        pool_max_size=1,
        lock_pool_max_size=1,
        pool_timeout=1.0,
        connect_timeout=2,
        prepare_threshold=None,
    )
    signs: list[str | None] = []
    stop = threading.Event()
    caplog.set_level(logging.DEBUG, logger="agentsession.backends.postgres")
    thread = threading.Thread(target=PostgresWatcher(db, "c").run, args=(signs.append, stop))
    thread.start()
    eventually(lambda: len([r for r in caplog.records if "listening" in r.getMessage()]) >= 3)
    stop.set()
    thread.join(3.0)
    assert not thread.is_alive()
    assert signs == []
    text = "\n".join(record.getMessage() for record in caplog.records)
    assert "cannot reach" in text and secret not in text
    db.close()
