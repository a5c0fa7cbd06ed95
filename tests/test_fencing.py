"""Fencing tokens for the turn lock (``agentsession.fencing``): epochs, steals, expiry, a stopped
holder resumed, a PostgreSQL lock connection killed, processes contending with random stops.

The PostgreSQL cases need ``AGENTSESSION_TEST_POSTGRES_DSN`` and are skipped without it."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentsession as ags
from agentsession import Event, Message
from agentsession.errors import LeaseLost, LockTimeout, UsageError
from agentsession.events import SESSION_LEASE, SessionLease, decode

from .store_urls import store_url
from .test_conformance_postgres import DSN, drop_schemas, new_schema_name, url_with_schema


@pytest.fixture(params=["jsonl", "sqlite", "postgres", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store URL shared by processes, of every backend that has one."""
    yield from store_url(request.param, tmp_path)


def said(text: str) -> Event:
    return Event.new("assistant/message", Message.assistant(text))


def fences(store: ags.BaseStore, session_id: str) -> list[SessionLease]:
    log = store.get(session_id).read()
    return [decode(e.data, SessionLease) for e in log if e.type == SESSION_LEASE]


def test_the_epoch_grows_by_one_at_every_acquisition_and_survives_a_delete(url: str) -> None:
    with ags.open_store(url) as store, ags.open_store(url) as other:
        epochs = []
        for owner in (store, other, store):
            with owner.lock("s", timeout=5) as lease:
                epochs.append(lease.epoch)
                assert lease.held and not lease.stolen
                owner.get("s").append(said(f"epoch {lease.epoch}"))
        assert epochs == [1, 2, 3]
        store.delete("s")
        with store.lock("s", timeout=5) as lease:
            assert lease.epoch == 4
        assert fences(store, "s") == []  # released each time: nothing fenced the log
        assert not store.exists("s")  # an ordinary acquisition writes nothing


def test_memory_store_leases() -> None:
    store = ags.open_store("memory:")
    with store.lock("s") as first:
        assert store.current_lease("s") is first
        store.get("s").append(said("one"))
    assert store.current_lease("s") is None
    with store.lock("s") as second:
        assert second.epoch == first.epoch + 1
    with pytest.raises(UsageError, match="ttl"):
        store.lock("s", ttl=0)


def test_a_steal_fences_the_log_and_the_stale_holder_writes_nothing(url: str) -> None:
    with ags.open_store(url) as store, ags.open_store(url) as thief_store:
        session = store.get("s")
        with store.lock("s", timeout=5) as held:
            with session.turn() as turn:
                turn.user("question")
                turn.assistant("first half")
            with pytest.raises(LockTimeout):
                thief_store.lock("s", timeout=0.2)  # not stale yet: waits, as before
            taken: list[int] = []

            def thief() -> None:
                with thief_store.lock("s", timeout=10, steal_after=0.3) as lease:
                    taken.append(lease.epoch)
                    assert lease.stolen and not lease.backend_lock
                    thief_store.get("s").append(said("the thief's"))

            worker = threading.Thread(target=thief)
            worker.start()
            worker.join(30)
            assert taken == [held.epoch + 1]
            before = [e.seq for e in store.get("s").read()]
            with pytest.raises(LeaseLost) as lost:
                session.append(said("stale"))
            assert lost.value.epoch == held.epoch and lost.value.current == held.epoch + 1
            with pytest.raises(LeaseLost):
                session.append_many([said("stale a"), said("stale b")])
            assert not held.held and held.lost
        log = store.get("s").read()
        assert [e.seq for e in log] == before
        assert not any("stale" in str(bytes(e.data)) for e in log)
        assert fences(store, "s") == [
            SessionLease(epoch=held.epoch + 1, previous=held.epoch, reason="stolen")
        ]
        store.get("s").messages()  # the history stays derivable
        with store.lock("s", timeout=5) as after:  # the thief released: an ordinary take
            assert after.epoch == held.epoch + 2
            session.append(said("next turn"))


def test_without_a_lease_appends_keep_todays_behaviour(url: str) -> None:
    with ags.open_store(url) as store, ags.open_store(url) as other:
        with store.lock("s", timeout=5):
            pass
        with other.lock("s", timeout=5, steal_after=0.01):
            other.get("s").append(said("under a lease"))
        store.get("s").append(said("no lease: not fenced"))  # outside any ``with``
        assert len(store.get("s").read()) == 2


def test_an_expired_lease_is_taken_over_and_a_live_one_renews(url: str) -> None:
    with ags.open_store(url) as store, ags.open_store(url) as other:
        with store.lock("s", timeout=5, ttl=0.3) as live:
            time.sleep(0.8)  # renewed in the background meanwhile
            with pytest.raises(LockTimeout):
                other.lock("s", timeout=0.2)
            assert live.held
            live._stop.set()  # as if the process were stopped: no more renewals
            time.sleep(0.5)
            with other.lock("s", timeout=5) as taken:  # no steal_after: it expired
                assert taken.epoch == live.epoch + 1 and taken.stolen
            with pytest.raises(LeaseLost):
                store.get("s").append(said("too late"))
        assert fences(store, "s")[-1].reason == "expired"


_HOLDER = textwrap.dedent(
    """
    import os, sys, time
    import agentsession as ags
    from agentsession.errors import LeaseLost
    url, ttl = sys.argv[1], float(sys.argv[2])
    store = ags.open_store(url)
    session = store.get("s")
    with store.lock("s", timeout=10, ttl=ttl or None) as lease:
        session.append(ags.Event.new("assistant/message", ags.Message.assistant("holder 1")))
        print("held", lease.epoch, flush=True)
        sys.stdin.readline()  # the parent stops this process here, then resumes it
        try:
            session.append(ags.Event.new("assistant/message", ags.Message.assistant("holder 2")))
            print("written", flush=True)
        except LeaseLost:
            print("refused", flush=True)
    store.close()
    """
)


def _holder(url: str, ttl: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _HOLDER, url, str(ttl)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("how", ["steal_after", "ttl"])
def test_a_stopped_holder_is_stolen_from_and_its_append_refused_when_resumed(
    url: str, how: str
) -> None:
    holder = _holder(url, 0.3 if how == "ttl" else 0)
    try:
        assert holder.stdout is not None and holder.stdin is not None
        line = holder.stdout.readline().split()
        assert line[0] == "held"
        os.kill(holder.pid, signal.SIGSTOP)
        with ags.open_store(url) as store:
            options = {"steal_after": 0.3} if how == "steal_after" else {}
            with store.lock("s", timeout=10, **options) as lease:  # type: ignore[arg-type]
                assert lease.epoch == int(line[1]) + 1 and lease.stolen
                store.get("s").append(said("the new holder's"))
                os.kill(holder.pid, signal.SIGCONT)
                holder.stdin.write("\n")
                holder.stdin.flush()
                assert holder.stdout.readline().strip() == "refused"
                assert holder.wait(30) == 0
                store.get("s").append(said("still mine"))
            texts = [m.text for m in store.get("s").messages()]
            assert texts == ["holder 1", "the new holder's", "still mine"]
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGCONT)
            holder.kill()
            holder.wait()


@pytest.mark.postgres
@pytest.mark.skipif(not DSN, reason="set AGENTSESSION_TEST_POSTGRES_DSN")
def test_a_postgresql_lease_whose_connection_is_killed_is_fenced_once_taken() -> None:
    import psycopg

    schema = new_schema_name()
    url = url_with_schema(schema)
    try:
        with ags.open_store(url) as store, ags.open_store(url) as other:
            session = store.get("s")
            with store.lock("s", timeout=5) as lease:
                session.append(said("before"))
                with psycopg.connect(DSN, autocommit=True) as admin:
                    admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_locks "
                        "WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()"
                        " AND pid IN (SELECT pid FROM pg_stat_activity"
                        "  WHERE application_name LIKE %s)",
                        (f"%{schema}%",),
                    )
                deadline = time.monotonic() + 10
                while lease.held and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert not lease.held
                session.append(said("not taken yet: safe"))  # the epoch is still current
                with other.lock("s", timeout=10) as taken:
                    assert taken.epoch == lease.epoch + 1 and taken.stolen
                    assert taken.backend_lock
                    with pytest.raises(LeaseLost):
                        session.append(said("fenced"))
                    other.get("s").append(said("the new holder's"))
            texts = [m.text for m in other.get("s").messages()]
            assert texts == ["before", "not taken yet: safe", "the new holder's"]
            assert fences(other, "s")[-1].reason == "unreleased"
    finally:
        drop_schemas([schema])


_WORKER = textwrap.dedent(
    """
    import os, sys, time
    import agentsession as ags
    from agentsession.errors import LeaseLost, LockTimeout
    url, name, turns, holder = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    store = ags.open_store(url)
    session = store.get("s")
    done = 0
    while done < turns:
        try:
            with store.lock("s", timeout=0.5, ttl=0.3, steal_after=0.6) as lease:
                meta = {"epoch": lease.epoch}
                with open(holder, "w") as f:  # for the test: whom to stop
                    f.write(str(os.getpid()))
                with session.turn(user=name) as turn:
                    turn.user(f"{name} {done}")
                    time.sleep(0.1)  # a model call: the lease is held for a while (long
                    # enough that the stops below mostly land on a holder mid-turn)
                    session.append(ags.Event.new("test/mark", {"epoch": lease.epoch}, meta=meta))
                    turn.assistant(f"answer {done}")
                done += 1
        except (LeaseLost, LockTimeout):
            continue
    store.close()
    """
)


def test_processes_contending_with_random_stops_never_write_after_a_fence(
    url: str, tmp_path: Path
) -> None:
    """Eight workers take the lease for a turn each, again and again, while the test stops
    and resumes them at random: no worker's event lands after a fence of a newer epoch, every
    turn that finished is whole, and the history stays derivable."""
    with ags.open_store(url):
        pass  # create the store (schema, directory) before the processes race to
    holder = tmp_path / "holder"  # the pid of the latest worker to take the lease
    workers = [
        subprocess.Popen([sys.executable, "-c", _WORKER, url, f"w{i}", "6", str(holder)])
        for i in range(8)
    ]
    rng = random.Random(7)
    try:
        deadline = time.monotonic() + 120
        while any(w.poll() is None for w in workers) and time.monotonic() < deadline:
            # Mostly the worker holding the lease now, sometimes any other.
            pid = int(holder.read_text() or 0) if holder.exists() else 0
            by_pid = {w.pid: w for w in workers}
            victim = by_pid.get(pid) if rng.random() < 0.7 else None
            victim = victim or rng.choice(workers)
            if victim.poll() is None:
                os.kill(victim.pid, signal.SIGSTOP)
                time.sleep(rng.uniform(0.35, 0.9))  # beyond the ttl: its lease expires
                os.kill(victim.pid, signal.SIGCONT)
            time.sleep(rng.uniform(0.0, 0.1))
        assert [w.wait(60) for w in workers] == [0] * 8
    finally:
        for w in workers:
            if w.poll() is None:
                os.kill(w.pid, signal.SIGCONT)
                w.kill()
                w.wait()
    with ags.open_store(url) as store:
        log = store.get("s").read()
        newest = 0
        for event in log:
            if event.type == SESSION_LEASE:
                newest = max(newest, decode(event.data, SessionLease).epoch)
            elif event.type == "test/mark":
                assert json.loads(bytes(event.data))["epoch"] >= newest, event.seq
        assert fences(store, "s"), "no lease was taken over: the stops never hit a holder"
        marks = [e for e in log if e.type == "test/mark"]
        assert len(marks) >= 48  # every worker finished its six turns
        for start in (e for e in log if e.type == "turn/start"):
            # Every turn a worker finished is whole: its start, mark and answer carry its id.
            turn = [e for e in log if e.meta.get("turn_id") == start.meta.get("turn_id")]
            kinds = [e.type for e in turn]
            if "turn/end" in kinds:
                assert kinds[:2] == ["turn/start", "user/message"], kinds
        store.get("s").messages()


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_a_killed_file_lock_holder_is_taken_over_without_a_fence(
    tmp_path: Path, backend: str
) -> None:
    """A file lock is dropped only with its holder's process (or by its release): taking it
    over from a holder killed with SIGKILL bumps the epoch but writes nothing to the log,
    since the old holder can write nothing more."""
    url = str(tmp_path / "store") if backend == "jsonl" else f"sqlite:///{tmp_path}/s.db"
    holder = _holder(url, 0)
    try:
        assert holder.stdout is not None
        epoch = int(holder.stdout.readline().split()[1])
        holder.kill()
        holder.wait(30)
        with ags.open_store(url) as store, store.lock("s", timeout=10) as lease:
            assert lease.epoch == epoch + 1 and lease.stolen and lease.backend_lock
            assert [e.type for e in store.get("s").read()] == ["assistant/message"]
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_a_ttl_lease_stops_renewing_when_its_store_closes(tmp_path: Path) -> None:
    store = ags.open_store(tmp_path / "store")
    lease = store.lock("s", ttl=0.05)
    renewer = lease._renewer
    assert renewer is not None and renewer.is_alive()
    store.close()
    renewer.join(5)
    assert not renewer.is_alive()
    assert not lease.locally_held
    lease.release()  # harmless after the close
