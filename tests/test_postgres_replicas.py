"""Read replicas (``read_url`` / ``read_urls``): against a real streaming replica.

The module starts a throwaway primary and a hot-standby replica of it (``pg_basebackup``, see
``tests/pg_clusters.py``) once, on free loopback ports, and always stops both. Each test uses
a schema of its own. Pausing the replica's replay (``pg_wal_replay_pause()``) makes what the
replica serves tell apart from what the primary holds: reads go to the replica, a session
object that appended reads its own writes (from the primary once ``replica_wait`` has passed),
another store object reads the stale replica, and writes never go to the replica (a hot
standby refuses every write, so a write sent there would fail).

Skipped with the reason when the PostgreSQL server programs (initdb, pg_ctl, pg_basebackup)
are not installed.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from agentsession import Event, Message, UsageError, open_store
from agentsession.aio import open_async_store
from agentsession.events import USER_MESSAGE

from .pg_clusters import SKIP_REASON, ReplicatedPair, free_port, replicated_pair

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON)]


def said(text: str, **kw: Any) -> Event:
    return Event.new(USER_MESSAGE, Message.user(text), **kw)


@pytest.fixture(scope="module")
def pair() -> Iterator[ReplicatedPair]:
    with replicated_pair() as clusters:
        yield clusters


@pytest.fixture
def schema(pair: ReplicatedPair) -> Iterator[str]:
    name = "r_" + uuid.uuid4().hex[:16]
    try:
        yield name
    finally:
        pair.resume_replay()
        import psycopg

        with psycopg.connect(pair.primary.dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def urls(pair: ReplicatedPair, schema: str) -> tuple[str, str]:
    return f"{pair.primary.dsn}?schema={schema}", f"{pair.replica.dsn}?schema={schema}"


def replica_app_names(pair: ReplicatedPair) -> set[str]:
    import psycopg

    with psycopg.connect(pair.replica.dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT application_name FROM pg_stat_activity").fetchall()
    return {str(r[0]) for r in rows}


def texts(events: list[Event]) -> list[str]:
    return [e.decode(Message).text for e in events if e.type == USER_MESSAGE]


def test_reads_go_to_the_replica(pair: ReplicatedPair, schema: str) -> None:
    primary, replica = urls(pair, schema)
    writer = open_store(primary)  # writes only through the primary
    reader = open_store(primary, read_url=replica)
    try:
        writer.get("a").append(said("one"))
        pair.wait_replayed()
        assert texts(reader.open("a").read()) == ["one"]
        assert f"agentsession-replica/{schema}" in replica_app_names(pair)
        pair.pause_replay()
        writer.get("a").append(said("two"))
        writer.get("b").append(said("other"))
        # The replica has not replayed them: the reader's opens, reads, lists and searches
        # answer what it holds.
        assert texts(reader.open("a").read()) == ["one"]
        assert [s.id for s in reader.list()] == ["a"]
        assert [h.session_id for h in reader.search("other")] == []
        assert texts(writer.open("a").read()) == ["one", "two"]
        pair.resume_replay()
        pair.wait_replayed()
        assert texts(reader.get("a").read()) == ["one", "two"]
        assert sorted(s.id for s in reader.list()) == ["a", "b"]
        assert [h.session_id for h in reader.search("other")] == ["b"]
    finally:
        writer.close()
        reader.close()


def test_a_session_object_reads_its_own_writes(pair: ReplicatedPair, schema: str) -> None:
    primary, replica = urls(pair, schema)
    store = open_store(primary, read_url=replica, replica_wait=0.2)
    other = open_store(primary, read_url=replica)
    writer = open_store(primary)
    pair.wait_replayed()  # the schema the stores created
    try:
        # More events than opening reads (its tail), so that reading them all goes to storage.
        writer.get("a").append_many([said(f"old {i}") for i in range(80)])
        pair.wait_replayed()
        session = store.get("a")
        assert len(session.read(after=70)) == 10
        pair.pause_replay()
        session.append(said("mine"))
        log = session.plans.log
        # The catch-up asks the replica once, and the window holds the write: read at once.
        assert texts(session.read(after=80)) == ["mine"]
        everything = [f"old {i}" for i in range(80)] + ["mine"]
        assert texts(session.read()) == everything  # older events: from the primary at once
        assert not log.freshness.waited
        # The full window (more than the tail opening read) waits replica_wait for the
        # replica to replay the write, then reads from the primary: the write is there.
        assert [m.text for m in session.messages()] == everything
        assert log.freshness.waited
        assert texts(session.read()) == everything
        # Another store object, which did not write, reads the stale replica.
        assert texts(other.open("a").read())[-1] == "old 79"
        pair.resume_replay()
        pair.wait_replayed()
        # Replayed past its write: the session object reads the replica again. Proved by a
        # write the replica has not replayed (replay paused again), which it does not see.
        assert texts(session.read())[-1] == "mine"
        pair.pause_replay()
        writer.get("a").append(said("theirs"))
        assert texts(session.read())[-1] == "mine"
        assert texts(writer.open("a").read())[-1] == "theirs"
        # Its next append finds the other writer's event first (the append is conditional on
        # the latest seq), catches up from the primary and lands after it.
        assert session.append(said("after")) == 83
        assert texts(session.read())[-3:] == ["mine", "theirs", "after"]
        assert texts(other.get("a").read())[-1] == "mine"  # the replica, paused before "theirs"
    finally:
        store.close()
        other.close()
        writer.close()


def test_writes_never_go_to_the_replica(pair: ReplicatedPair, schema: str) -> None:
    """The replica is a hot standby: it refuses every write. Appends, a batch, create,
    delete and turn locks all succeed, so all of them went to the primary."""
    primary, replica = urls(pair, schema)
    store = open_store(primary, read_urls=[replica, replica])
    try:
        session = store.get("a")
        with session.turn(agent="bot") as turn:
            turn.user("hello")
            turn.assistant("hi")
        session.append_many([said("x"), said("y")])
        store.create("b", [said("b")])
        assert store.delete("b")
        import psycopg

        with psycopg.connect(pair.primary.dsn, autocommit=True) as conn:
            row = conn.execute(
                f'SELECT count(*) FROM "{schema}".events WHERE session_id = %s', ("a",)
            ).fetchone()
        assert row is not None
        assert row[0] == session.latest_seq >= 4
        with (
            psycopg.connect(pair.replica.dsn, autocommit=True) as conn,
            pytest.raises(psycopg.errors.ReadOnlySqlTransaction),
        ):
            conn.execute(f'DELETE FROM "{schema}".events')
    finally:
        store.close()


def test_a_replica_that_cannot_be_reached_leaves_reads_on_the_primary(
    pair: ReplicatedPair, schema: str
) -> None:
    primary, _ = urls(pair, schema)
    nowhere = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres?connect_timeout=1"
    store = open_store(primary, read_url=nowhere, pool_timeout=2)
    try:
        store.get("a").append(said("one"))
        assert texts(store.open("a").read()) == ["one"]
        assert [s.id for s in store.list()] == ["a"]
    finally:
        store.close()


def test_options_are_checked(pair: ReplicatedPair, schema: str) -> None:
    primary, replica = urls(pair, schema)
    with pytest.raises(UsageError, match="replica_wait"):
        open_store(primary, read_url=replica, replica_wait=-1)
    with pytest.raises(UsageError, match="read_urls"):
        open_store(primary, read_urls=replica)
    with pytest.raises(UsageError, match="schema"):
        open_store(primary, read_url=f"{pair.replica.dsn}?schema=elsewhere")


def test_the_store_url_reopens_the_store_with_its_replicas(
    pair: ReplicatedPair, schema: str
) -> None:
    """``store.url`` carries the replicas and ``replica_wait`` as URL parameters: a store
    opened from it (a worker process's, say) reads from the same replica."""
    primary, replica = urls(pair, schema)
    writer = open_store(primary)
    first = open_store(primary, read_url=replica, replica_wait=0.25)
    again = open_store(first.url)
    try:
        assert "read_url=" in first.url and "replica_wait=0.25" in first.url
        assert "read_url" not in first.location
        writer.get("a").append(said("one"))
        pair.wait_replayed()
        pair.pause_replay()
        writer.get("a").append(said("two"))
        # The reopened store reads the paused replica, as the first one does.
        assert texts(again.open("a").read()) == ["one"]
        assert texts(first.open("a").read()) == ["one"]
        assert again.url == first.url
        # Its own appends it reads at once: from the primary after replica_wait.
        session = again.get("a")
        session.append(said("three"))
        assert texts(session.read()) == ["one", "two", "three"]
    finally:
        pair.resume_replay()
        for store in (writer, first, again):
            store.close()


def test_replicas_named_in_the_url_and_the_options_must_agree(
    pair: ReplicatedPair, schema: str
) -> None:
    primary, replica = urls(pair, schema)
    in_url = open_store(primary, read_url=replica).url
    same = open_store(in_url, read_url=replica)  # the same replica in both places: fine
    same.close()
    other = f"{pair.replica.dsn}?schema={schema}&application_name=x"
    with pytest.raises(UsageError, match="read replicas"):
        open_store(in_url, read_url=other)
    with pytest.raises(UsageError, match="replica_wait"):
        open_store(f"{in_url}&replica_wait=1", replica_wait=2)
    with pytest.raises(UsageError, match="replica_wait"):
        open_store(f"{primary}&replica_wait=soon")
    with pytest.raises(UsageError, match="cannot name read replicas"):
        open_store(primary, read_url=in_url)


def test_a_replica_password_stays_out_of_messages_and_location(
    pair: ReplicatedPair, schema: str
) -> None:
    primary, _ = urls(pair, schema)
    secret = "s3cr3t-replica-pw"
    nowhere = f"postgresql://postgres:{secret}@127.0.0.1:{free_port()}/postgres?connect_timeout=1"
    store = open_store(primary, read_url=nowhere, pool_timeout=2)
    try:
        assert secret in store.url  # it must reopen the store
        assert secret not in store.location and secret not in repr(store)
        store.get("a").append(said("one"))
        assert texts(store.open("a").read()) == ["one"]
    finally:
        store.close()


def test_many_threads_read_their_own_writes(pair: ReplicatedPair, schema: str) -> None:
    """Each thread's session object appends and at once reads every event it appended,
    whatever the replica's lag."""
    primary, replica = urls(pair, schema)
    store = open_store(primary, read_url=replica, replica_wait=0.05)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            session = store.get(f"s{n}")
            for i in range(15):
                session.append(said(f"{n}-{i}"))
                assert texts(session.read())[-1] == f"{n}-{i}"
        except BaseException as exc:
            errors.append(exc)

    try:
        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
    finally:
        store.close()


def test_async_twin(pair: ReplicatedPair, schema: str) -> None:
    primary, replica = urls(pair, schema)

    async def main() -> None:
        store = await open_async_store(primary, read_url=replica, replica_wait=0.2)
        other = await open_async_store(primary, read_url=replica)
        writer = open_store(primary)
        try:
            writer.get("a").append_many([said(f"old {i}") for i in range(80)])
            await asyncio.to_thread(pair.wait_replayed)
            session = await store.get("a")
            assert len(await session.read(after=70)) == 10
            await asyncio.to_thread(pair.pause_replay)
            await session.append(said("mine"))
            assert texts(await session.read(after=80)) == ["mine"]
            everything = [f"old {i}" for i in range(80)] + ["mine"]
            assert texts(await session.read()) == everything  # the primary, at once
            assert not session.sync.plans.log.freshness.waited
            # The full window: waits replica_wait, then reads from the primary.
            assert [m.text for m in await session.messages()] == everything
            assert session.sync.plans.log.freshness.waited
            fresh = await other.open("a")
            assert texts(await fresh.read())[-1] == "old 79"  # the stale replica
            await asyncio.to_thread(pair.resume_replay)
            await asyncio.to_thread(pair.wait_replayed)
            assert texts(await session.read())[-1] == "mine"
            await asyncio.to_thread(pair.pause_replay)
            writer.get("a").append(said("theirs"))
            assert texts(await session.read())[-1] == "mine"  # from the replica
            assert await session.append(said("after")) == 83
            assert texts(await session.read())[-3:] == ["mine", "theirs", "after"]
            assert f"agentsession-replica-async/{schema}" in replica_app_names(pair)
        finally:
            await store.close()
            await other.close()
            writer.close()

    asyncio.run(main())


def test_an_append_whose_position_is_unknown_reads_from_the_primary(
    pair: ReplicatedPair, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the WAL position cannot be read after an append (which committed), the session
    object reads from the primary, without waiting, until its next append reports one."""
    import psycopg

    from agentsession.backends.postgres import storage

    primary, replica = urls(pair, schema)
    store = open_store(primary, read_url=replica, replica_wait=5)
    writer = open_store(primary)
    pair.wait_replayed()
    try:
        writer.get("a").append_many([said(f"old {i}") for i in range(80)])
        pair.wait_replayed()
        session = store.get("a")
        pair.pause_replay()

        def lost(conn: Any) -> int:
            raise psycopg.OperationalError("lost")

        monkeypatch.setattr(storage, "write_lsn", lost)
        assert session.append(said("mine")) == 81
        log = session.plans.log
        assert log.freshness.pinned
        assert [m.text for m in session.messages()][-1] == "mine"  # the primary, no wait
        assert not log.freshness.waited
        monkeypatch.undo()
        pair.resume_replay()
        pair.wait_replayed()
        session.append(said("next"))
        assert not log.freshness.pinned
    finally:
        store.close()
        writer.close()


def test_a_follower_sees_an_append_the_replica_has_not_replayed(
    pair: ReplicatedPair, schema: str
) -> None:
    """A follower is woken by the primary's notification of an append; its catch-up, which a
    replica behind the notified seq answers with less, reads from the primary, so the event
    arrives at once, not at the follower's next fallback read (a minute while it listens)."""
    import psycopg

    primary, replica = urls(pair, schema)
    writer = open_store(primary)
    reader = open_store(primary, read_url=replica)
    got: list[str] = []
    try:
        writer.get("a").append(said("one"))
        pair.wait_replayed()
        session = reader.get("a")
        assert texts(session.read()) == ["one"]
        pair.pause_replay()

        def follow() -> None:
            for event in session.follow(after=1, timeout=20.0):
                got.extend(texts([event]))
                return

        thread = threading.Thread(target=follow)
        thread.start()
        with psycopg.connect(pair.primary.dsn, autocommit=True) as conn:
            while True:  # the watcher listens (it holds the listen lock shared)
                row = conn.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                    "AND mode = 'ShareLock' AND granted"
                ).fetchone()
                if row and row[0]:
                    break
                time.sleep(0.01)
        writer.get("a").append(said("two"))
        thread.join()
        assert got == ["two"]
    finally:
        writer.close()
        reader.close()
