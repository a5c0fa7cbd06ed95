"""PostgreSQL backend behaviour beyond the shared contract: migrations, concurrency, the turn
lock, errors and reconnection, what opening reads, and how rows are stored.

Needs the server named by ``AGENTSESSION_TEST_POSTGRES_DSN``; skipped without it. Every test
works in schemas of its own, dropped afterwards.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import msgspec
import pytest

from agentsession import (
    ConflictError,
    Event,
    LockTimeout,
    Message,
    OutcomeUnknown,
    StorageError,
    StoreUnavailable,
    TurnLock,
    UsageError,
    open_store,
)
from agentsession.chat.identity import (
    bind_agent,
)
from agentsession.events import COMPACTION, decode, decode_event
from agentsession.testing.conformance import run_children, start_lock_holder

from .test_conformance_postgres import DSN, SKIP_REASON, drop_schemas, new_schema_name
from .test_conformance_postgres import url_with_schema as _url_with_schema

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not DSN, reason=SKIP_REASON)]

if DSN:
    import psycopg
    from psycopg import sql
    from psycopg.pq import TransactionStatus

    from agentsession.backends import postgres
    from agentsession.backends.postgres import PostgresStore, migrate
    from agentsession.backends.postgres import locks as pg_locks
    from agentsession.backends.postgres import schema as pg_schema
    from agentsession.backends.postgres_schema import LATEST_VERSION, MIGRATIONS

PASSWORD = "pw-Sh0uld-Never-Leak"


# -- fixtures and helpers ---------------------------------------------------------------------


@pytest.fixture
def schema() -> Iterator[str]:
    name = new_schema_name()
    try:
        yield name
    finally:
        drop_schemas([name])


@pytest.fixture
def url(schema: str) -> str:
    return _url_with_schema(schema)


@pytest.fixture
def store(url: str) -> Iterator[PostgresStore]:
    opened = open_store(url, pool_max_size=4)
    assert isinstance(opened, PostgresStore)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def admin() -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(DSN, autocommit=True) as conn:
        yield conn


def with_password(dsn: str, password: str = PASSWORD) -> str:
    """``dsn`` with a password in its user info (the test server trusts, and ignores it)."""
    parts = urlsplit(dsn)
    user, _, host = parts.netloc.rpartition("@")
    user = (user or "postgres").split(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}"))


def rows(admin: psycopg.Connection[Any], schema: str, query: str, *params: Any) -> list[Any]:
    """Run ``query`` with ``{s}`` standing for the schema."""
    statement = sql.SQL(query).format(s=sql.Identifier(schema))  # type: ignore[arg-type]
    return admin.execute(statement, params).fetchall()


def backends(admin: psycopg.Connection[Any], application_name: str) -> list[int]:
    found = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (application_name,)
    ).fetchall()
    return [pid for (pid,) in found]


def terminate(admin: psycopg.Connection[Any], application_name: str) -> int:
    """Terminate every server backend with that application name; wait until they are gone."""
    pids = backends(admin, application_name)
    for pid in pids:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    wait_for(lambda: not set(pids) & set(backends(admin, application_name)))
    return len(pids)


def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def advisory_waiters(
    admin: psycopg.Connection[Any], application_name: str, waited: str = "0 s"
) -> list[int]:
    """Backends of that application name waiting in the server for an advisory lock, for at
    least ``waited`` (an interval, by the server's clock)."""
    found = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s "
        "AND wait_event_type = 'Lock' AND wait_event = 'advisory' "
        "AND now() - query_start >= %s::interval",
        (application_name, waited),
    ).fetchall()
    return [pid for (pid,) in found]


def with_options(url: str, options: str) -> str:
    """``url`` with ``options=`` (server settings for its sessions, ``-c name=value ...``)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(query=f"{parts.query}&options={quote(options)}"))


def kill_after_checkout(
    store: PostgresStore, admin: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> list[int]:
    """Make the store's next checkout hand out a connection whose server backend is then
    terminated (after the pool's check passed, before the store uses it); returns the list of
    the checkouts' backend pids, for the test to see how many there were."""
    checkout = store._db.checkout
    pids: list[int] = []

    def dying_checkout(pool: Any, action: str) -> Any:
        conn = checkout(pool, action)
        pids.append(conn.info.backend_pid)
        if len(pids) == 1:
            admin.execute("SELECT pg_terminate_backend(%s)", (pids[0],))
            wait_for(
                lambda: (
                    not admin.execute(
                        "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pids[0],)
                    ).fetchall()
                )
            )
        return conn

    monkeypatch.setattr(store._db, "checkout", dying_checkout)
    return pids


def assert_no_password(exc: BaseException) -> None:
    seen: BaseException | None = exc
    while seen is not None:
        assert PASSWORD not in str(seen)
        assert PASSWORD not in repr(seen)
        seen = seen.__cause__ or seen.__context__


# -- migrations -------------------------------------------------------------------------------


def test_migrate_records_versions_and_is_idempotent(
    url: str, schema: str, admin: psycopg.Connection[Any]
) -> None:
    assert migrate(url) == [m.version for m in MIGRATIONS]
    assert migrate(url) == []
    recorded = rows(admin, schema, "SELECT version, name, applied_at FROM {s}.schema_migrations")
    assert [(v, n) for v, n, _ in recorded] == [(m.version, m.name) for m in MIGRATIONS]
    assert all(applied is not None for _, _, applied in recorded)
    with open_store(url) as store:
        store.get("s").append(Event.new("test/n"))
    assert migrate(url, schema=schema) == []
    tables = admin.execute(
        "SELECT table_name, table_type FROM information_schema.tables WHERE table_schema = %s",
        (schema,),
    ).fetchall()
    assert set(tables) == {
        ("schema_migrations", "BASE TABLE"),
        ("sessions", "BASE TABLE"),
        ("events", "BASE TABLE"),
        ("meta", "BASE TABLE"),
        ("usage", "BASE TABLE"),
        ("documents", "BASE TABLE"),
        ("search_dirty", "BASE TABLE"),
        ("events_json", "VIEW"),
    }


_OPENER = textwrap.dedent(
    """
    import os, sys, time
    import agentsession as ags
    url, go, n = sys.argv[1], sys.argv[2], sys.argv[3]
    while not os.path.exists(go):
        time.sleep(0.001)
    with ags.open_store(url) as store:
        store.get("opened").append(ags.Event.new("test/opened", {"n": int(n)}))
    """
)


@pytest.mark.slow
def test_four_processes_opening_a_fresh_schema_migrate_it_once(
    url: str, schema: str, tmp_path: Path, admin: psycopg.Connection[Any]
) -> None:
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _OPENER, url, str(go), str(n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for n in range(4)
    ]
    try:
        time.sleep(0.5)  # let them all start and wait on the file
        go.write_text("go")
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err.decode(errors="replace")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    versions = rows(admin, schema, "SELECT version FROM {s}.schema_migrations ORDER BY 1")
    assert [v for (v,) in versions] == [m.version for m in MIGRATIONS]
    with open_store(url) as store:
        events = store.get("opened").read()
    assert [e.seq for e in events] == [1, 2, 3, 4]
    assert sorted(decode(e.data)["n"] for e in events) == [0, 1, 2, 3]


def test_schema_newer_than_the_code_is_refused(url: str, schema: str, admin: Any) -> None:
    migrate(url)
    rows(admin, schema, "INSERT INTO {s}.schema_migrations VALUES (9999, 'future') RETURNING 1")
    with pytest.raises(StorageError, match="upgrade agentsession"):
        open_store(url)


def test_without_auto_migrate_a_fresh_schema_is_refused(url: str) -> None:
    with pytest.raises(StorageError, match="migrate"):
        open_store(url, auto_migrate=False)
    migrate(url)
    with open_store(url, auto_migrate=False) as store:
        assert store.get("s").append(Event.new("test/n")) == 1


def test_schema_option_and_url_parameter_agree(schema: str) -> None:
    with open_store(DSN, schema=schema) as store:
        assert isinstance(store, PostgresStore)
        assert store.schema == schema
        assert f"schema={schema}" in store.url
        store.get("s").append(Event.new("test/n"))
    with open_store(store.url) as again:
        assert again.get("s").latest_seq == 1
    with pytest.raises(UsageError, match="schema"):
        open_store(_url_with_schema(schema), schema="other")
    with pytest.raises(UsageError, match="schema name"):
        open_store(DSN, schema="bad-name; drop")


# -- concurrency ------------------------------------------------------------------------------


@pytest.mark.slow
def test_eight_processes_append_seqs_1_to_2000_and_the_session_row_agrees(
    store: PostgresStore, schema: str, tmp_path: Path, admin: psycopg.Connection[Any]
) -> None:
    go = tmp_path / "go"
    run_children([[store.url, "eight", str(w), "250", str(go)] for w in range(8)], go)
    events = store.get("eight").read()
    assert [e.seq for e in events] == list(range(1, 2001))
    assert len({(d["writer"], d["i"]) for d in map(decode, (e.data for e in events))}) == 2000
    (stats,) = rows(
        admin,
        schema,
        "SELECT s.last_seq, count(e.seq), min(e.seq), max(e.seq) FROM {s}.sessions s "
        "JOIN {s}.events e ON e.session_id = s.id WHERE s.id = 'eight' GROUP BY s.last_seq",
    )
    assert stats == (2000, 2000, 1, 2000)


def test_a_locked_session_row_does_not_hold_up_appends_to_other_sessions(
    store: PostgresStore, schema: str, admin: psycopg.Connection[Any]
) -> None:
    store.get("blocked").append(Event.new("test/n"))
    blocker = psycopg.connect(DSN)  # not autocommit: holds the row lock until rollback
    try:
        rows_locked = blocker.execute(
            sql.SQL("SELECT 1 FROM {}.sessions WHERE id = 'blocked' FOR UPDATE").format(
                sql.Identifier(schema)
            )
        ).fetchall()
        assert rows_locked == [(1,)]
        stuck_result: list[int] = []
        stuck = threading.Thread(
            target=lambda: stuck_result.append(store.get("blocked").append(Event.new("test/n")))
        )
        stuck.start()
        # The append to "blocked" now waits on the row lock, as seen by the server ...
        wait_for(
            lambda: bool(
                admin.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE application_name = %s "
                    "AND wait_event_type = 'Lock'",
                    (f"agentsession/{schema}",),
                ).fetchall()
            )
        )
        # ... while appends to other sessions, from several threads, all go through.
        errors: list[BaseException] = []

        def work(n: int) -> None:
            try:
                session = store.get(f"free-{n}")
                for i in range(40):
                    session.append(Event.new("test/n", {"i": i}))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        workers = [threading.Thread(target=work, args=(n,)) for n in range(3)]
        for t in workers:
            t.start()
        for t in workers:
            t.join(timeout=60)
        assert not errors
        assert not any(t.is_alive() for t in workers)
        assert stuck.is_alive() and not stuck_result
        for n in range(3):
            assert [e.seq for e in store.get(f"free-{n}").read()] == list(range(1, 41))
    finally:
        blocker.rollback()
        blocker.close()
    stuck.join(timeout=60)
    assert stuck_result == [2]


def test_a_writer_catches_up_on_other_writers_events_when_appending(url: str) -> None:
    with open_store(url) as first, open_store(url) as second:
        a, b = first.get("shared"), second.get("shared")
        a.append(Event.new("user/message", Message.user("one")))
        b.append_many([Event.new("user/message", Message.user(t)) for t in ("two", "three")])
        assert a.append(Event.new("user/message", Message.user("four"))) == 4
        # The append itself brought the other writer's events into a's window.
        assert [e.seq for e in a._window] == [1, 2, 3, 4]
        assert [m.text for m in a.messages()] == ["one", "two", "three", "four"]


# -- the turn lock ----------------------------------------------------------------------------


@pytest.mark.slow
def test_sigkilled_lock_holder_leaves_the_lock_free_and_its_turn_recoverable(
    store: PostgresStore,
) -> None:
    holder = start_lock_holder(store.url, "conv:crash")
    try:
        assert store.is_locked("conv:crash")
        assert [r.status for r in store.recover(["conv:crash"])] == ["live"]
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        wait_for(lambda: not store.is_locked("conv:crash"))
        with store.lock("conv:crash", timeout=0):
            pass
        (report,) = store.recover(["conv:crash"])
        assert report.status == "repaired"
        history = store.get("conv:crash").messages()
        assert history[-1].tool_results[0].audit == {"decision": "interrupted"}
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_lock_lives_on_its_own_connection_and_dies_with_it(
    store: PostgresStore, url: str, schema: str, admin: psycopg.Connection[Any]
) -> None:
    lock_app = f"agentsession-lock/{schema}"
    held = store.lock("conv", timeout=5)
    with open_store(url) as other:
        assert other.is_locked("conv")
        holders = admin.execute(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
            "WHERE l.locktype = 'advisory' AND l.granted AND a.application_name LIKE %s",
            (f"%/{schema}",),
        ).fetchall()
        assert holders == [(lock_app,)]
        # A holder that loses its connection (a network failure, say) loses the lock.
        assert terminate(admin, lock_app) == 1
        wait_for(lambda: not other.is_locked("conv"))
        with other.lock("conv", timeout=0):
            assert store.is_locked("conv")
        held.release()  # unlocking on the dead connection fails quietly
        assert not other.is_locked("conv")
        with store.lock("conv", timeout=5):
            assert other.is_locked("conv")


def test_closing_the_store_releases_the_locks_it_holds(url: str) -> None:
    first = open_store(url)
    first.lock("conv", timeout=5)
    with open_store(url) as second:
        assert second.is_locked("conv")
        first.close()
        wait_for(lambda: not second.is_locked("conv"))
        with second.lock("conv", timeout=0):
            pass


def test_a_waiter_gets_the_lock_as_soon_as_the_holder_releases_it(
    store: PostgresStore, schema: str, admin: psycopg.Connection[Any]
) -> None:
    lock_app = f"agentsession-lock/{schema}"
    events: list[str] = []
    outcomes: list[object] = []

    def wait_for_the_lock() -> None:
        try:
            outcomes.append(store.lock("conv", timeout=300))
            events.append("acquired")
        except BaseException as exc:  # pragma: no cover - reported below
            outcomes.append(exc)

    held = store.lock("conv", timeout=5)
    waiter = threading.Thread(target=wait_for_the_lock)
    waiter.start()
    try:
        # The waiter waits in the server, on the lock itself: not polling, not sleeping.
        wait_for(lambda: len(advisory_waiters(admin, lock_app)) == 1)
        events.append("waiting")
        assert not outcomes
        events.append("released")
        held.release()
        waiter.join(timeout=60)
        assert not waiter.is_alive()
    finally:
        held.release()
        waiter.join(timeout=60)
    assert events == ["waiting", "released", "acquired"]
    (got,) = outcomes
    assert isinstance(got, TurnLock) and got.held
    assert store.is_locked("conv")
    got.release()
    assert not store.is_locked("conv")


def test_a_lock_timeout_raises_and_leaves_the_lock_connection_usable(
    url: str, schema: str, admin: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    lock_app = f"agentsession-lock/{schema}"
    key = postgres.turn_lock_key(schema, "conv")
    holder = psycopg.connect(DSN, autocommit=True)
    # The URL gives the sessions a lock_timeout of their own: a wait overrides it for its one
    # statement, then puts it back.
    store = open_store(with_options(url, "-c lock_timeout=7s"), lock_pool_max_size=1)
    try:
        holder.execute("SELECT pg_advisory_lock(%s)", (key,))
        with caplog.at_level(logging.WARNING), pytest.raises(LockTimeout) as info:
            store.lock("conv", timeout=0.2)
        assert (info.value.session_id, info.value.timeout) == ("conv", 0.2)
        (pid,) = backends(admin, lock_app)  # the pool's one lock connection, still open
        holder.execute("SELECT pg_advisory_unlock(%s)", (key,))
        with caplog.at_level(logging.WARNING), store.lock("conv", timeout=5) as held:
            # ... and handed back cleanly: this lock got it (the pool has only that one).
            assert backends(admin, lock_app) == [pid]
            assert isinstance(held._handle, pg_locks._LockHandle)
            conn = held._handle.conn
            assert conn.info.backend_pid == pid
            assert conn.autocommit
            assert conn.info.transaction_status == TransactionStatus.IDLE
            assert conn.execute("SHOW lock_timeout").fetchone() == ("7s",)
            assert conn.execute("SHOW statement_timeout").fetchone() == ("0",)
        assert not store.is_locked("conv")
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    finally:
        store.close()
        holder.close()


def test_timeout_zero_tries_once_and_none_waits_for_ever(
    url: str, schema: str, admin: psycopg.Connection[Any]
) -> None:
    lock_app = f"agentsession-lock/{schema}"
    key = postgres.turn_lock_key(schema, "conv")
    migrate(url)
    holder = psycopg.connect(DSN, autocommit=True)
    # Session defaults that would cut any wait short after 100 ms: timeout=None waits anyway.
    store = open_store(with_options(url, "-c lock_timeout=100 -c statement_timeout=100"))
    outcomes: list[object] = []

    def take(timeout: float | None) -> None:
        try:
            outcomes.append(store.lock("conv", timeout=timeout))
        except BaseException as exc:
            outcomes.append(exc)

    try:
        holder.execute("SELECT pg_advisory_lock(%s)", (key,))
        # timeout=0: one try, no wait (a lock_timeout of 0 would wait for ever instead).
        trier = threading.Thread(target=take, args=(0,))
        trier.start()
        trier.join(timeout=60)
        assert not trier.is_alive()
        assert isinstance(outcomes.pop(), LockTimeout)
        # timeout=None: waits in the server, well past both session defaults, until released.
        waiter = threading.Thread(target=take, args=(None,))
        waiter.start()
        wait_for(lambda: len(advisory_waiters(admin, lock_app, "1 s")) == 1)
        assert waiter.is_alive() and not outcomes
        holder.execute("SELECT pg_advisory_unlock(%s)", (key,))
        waiter.join(timeout=60)
        assert not waiter.is_alive()
        (got,) = outcomes
        assert isinstance(got, TurnLock) and got.held
        got.release()
        # A free lock with timeout=0 is taken at once.
        with store.lock("conv", timeout=0):
            assert store.is_locked("conv")
    finally:
        holder.close()  # frees a waiter still waiting, should an assertion have failed
        store.close()


def test_lock_key_depends_on_schema_and_session() -> None:
    key = postgres.turn_lock_key
    assert key("a", "s") == key("a", "s")
    assert len({key("a", "s"), key("b", "s"), key("a", "t"), key("a", "s\ud800")}) == 4
    assert all(-(2**63) <= key("a", str(n)) < 2**63 for n in range(100))


# -- errors -----------------------------------------------------------------------------------


def test_wrong_port_is_store_unavailable_naming_host_and_database() -> None:
    parts = urlsplit(with_password(DSN))
    host = parts.hostname or "127.0.0.1"
    bad = urlunsplit(parts._replace(netloc=f"{parts.netloc.rpartition('@')[0]}@{host}:1"))
    with pytest.raises(StoreUnavailable) as info:
        open_store(bad)
    message = str(info.value)
    assert f"{host}:1" in message
    assert repr(urlsplit(DSN).path.lstrip("/")) in message
    assert_no_password(info.value)
    with pytest.raises(StoreUnavailable) as info:
        migrate(bad)
    assert_no_password(info.value)


def test_unknown_database_is_store_unavailable_naming_it() -> None:
    parts = urlsplit(with_password(DSN))
    bad = urlunsplit(parts._replace(path="/no_such_database_here"))
    with pytest.raises(StoreUnavailable, match="no_such_database_here") as info:
        open_store(bad)
    assert parts.hostname is not None and parts.hostname in str(info.value)
    assert_no_password(info.value)


def test_unreachable_server_leaves_no_raw_pool_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    parts = urlsplit(DSN)
    host = parts.hostname or "127.0.0.1"
    user = parts.netloc.rpartition("@")[0]
    bad = urlunsplit(parts._replace(netloc=f"{user}@{host}:1" if user else f"{host}:1"))
    import agentsession.backends.postgres.store as pg_store

    prepare = pg_store._prepare_schema

    def prepare_after_the_pool_failed(
        db: Any, target: Any, durability: str, auto_migrate: bool, create: bool, *more: Any
    ) -> Any:
        # The store opens its pool only once the schema is checked; open it now and let it
        # fail in the background first, then fail the store's own connection.
        db.pool.open(wait=False)
        wait_for(lambda: db.pool.get_stats().get("connections_errors", 0) >= 1)
        return prepare(db, target, durability, auto_migrate, create, *more)

    monkeypatch.setattr(pg_store, "_prepare_schema", prepare_after_the_pool_failed)
    with caplog.at_level(logging.DEBUG), pytest.raises(StoreUnavailable, match=f"{host}:1"):
        open_store(bad)
    # psycopg_pool's warning became a DEBUG line of the backend's logger ...
    demoted = [
        r
        for r in caplog.records
        if r.name == "agentsession.backends.postgres" and "could not connect" in r.getMessage()
    ]
    assert demoted and all(r.levelno == logging.DEBUG for r in demoted)
    assert "agentsession/" in demoted[0].getMessage()
    # ... and no raw "error connecting" line escaped at WARNING.
    assert not [
        r
        for r in caplog.records
        if r.levelno >= logging.WARNING and "error connecting" in r.getMessage()
    ]


def test_other_pools_connection_warnings_are_left_alone(caplog: pytest.LogCaptureFixture) -> None:
    pool_log = logging.getLogger("psycopg.pool")
    with caplog.at_level(logging.WARNING, logger="psycopg.pool"):
        pool_log.warning("error connecting in %r: %s", "someone-elses-pool", "refused")
    assert [r.levelno for r in caplog.records] == [logging.WARNING]


def test_password_never_appears_in_locations_or_errors(
    schema: str, admin: psycopg.Connection[Any]
) -> None:
    url = _url_with_schema(schema, with_password(DSN))
    store = open_store(url)
    try:
        session = store.get("s")
        session.append(Event.new("test/n"))
        assert store.url == url  # what reopens it (the password included)
        for text in (store.location, repr(store), session.location, repr(session)):
            assert PASSWORD not in text
        admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
        with pytest.raises(StorageError, match="missing") as info:
            session.append(Event.new("test/n"))
        assert_no_password(info.value)
        with pytest.raises(StorageError) as info:
            store.list()
        assert_no_password(info.value)
    finally:
        store.close()


def test_read_after_the_server_closed_the_pool_connections_succeeds(
    url: str, schema: str, admin: psycopg.Connection[Any]
) -> None:
    # Eight dead idle connections: checked one by one, with psycopg_pool's backoff between
    # failed checks (0, 1, 2, 4, 8, 16 ... s), they would outlast the 30 s pool timeout; the
    # first failed check drains the pool instead.
    with open_store(url, pool_min_size=8, pool_max_size=8) as store:
        session = store.get("s")
        session.append_many([Event.new("test/n", {"n": n}) for n in range(3)])
        wait_for(lambda: len(backends(admin, f"agentsession/{schema}")) == 8)
        assert terminate(admin, f"agentsession/{schema}") == 8
        assert [e.seq for e in session.read()] == [1, 2, 3]
        assert session.append(Event.new("test/n", {"n": 3})) == 4


def test_lock_after_the_server_closed_the_idle_lock_connections_succeeds(
    store: PostgresStore, schema: str, admin: psycopg.Connection[Any]
) -> None:
    lock_app = f"agentsession-lock/{schema}"
    first, second = store.lock("a", timeout=5), store.lock("b", timeout=5)
    first.release()
    second.release()
    assert terminate(admin, lock_app) == 2  # both idle in the lock pool now
    with store.lock("a", timeout=5):
        assert store.is_locked("a")
    with store.lock("b", timeout=0):
        assert store.is_locked("b")


def test_read_on_a_connection_that_dies_is_retried_once(
    url: str,
    schema: str,
    admin: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with open_store(url, pool_min_size=1, pool_max_size=1) as store:
        assert isinstance(store, PostgresStore)
        session = store.get("s")
        session.append_many([Event.new("test/n", {"n": n}) for n in range(3)])
        # The connection dies after the pool checked it, so the read really meets it dead.
        checkouts = kill_after_checkout(store, admin, monkeypatch)
        with caplog.at_level("INFO", logger="agentsession.backends.postgres"):
            assert [decode(e.data)["n"] for e in session._storage_read(0, None)] == [0, 1, 2]
        assert "retrying once" in caplog.text
        assert len(checkouts) == 2 and checkouts[0] != checkouts[1]


def test_a_write_whose_connection_dies_before_it_arrives_is_retried_and_stored_once(
    url: str, schema: str, admin: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_store(url, pool_min_size=1, pool_max_size=1) as store:
        assert isinstance(store, PostgresStore)
        session = store.get("s")
        session.append(Event.new("test/n", {"n": 0}))
        checkouts = kill_after_checkout(store, admin, monkeypatch)
        assert session.append(Event.new("test/n", {"n": 1})) == 2  # no error for the caller
        assert len(checkouts) >= 2  # the lost try, then a read and the append on new ones
        monkeypatch.undo()
    with open_store(url) as store:
        assert [decode(e.data)["n"] for e in store.get("s").read()] == [0, 1]


def test_a_write_that_landed_before_its_connection_died_is_not_stored_twice(
    url: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_store(url, pool_min_size=1, pool_max_size=1) as store:
        assert isinstance(store, PostgresStore)
        session = store.get("s")
        session.append(Event.new("test/n", {"n": 0}))
        run = store._db.run
        lost: list[str] = []

        def commit_then_lose(action: str, op: Any, *, write: str = "") -> Any:
            if not write or lost:
                return run(action, op, write=write)

            def landed_then_dies(conn: Any) -> Any:
                op(conn)  # committed (autocommit): the event is stored
                lost.append(action)
                conn.close()
                raise psycopg.OperationalError("the connection was lost (simulated)")

            return run(action, landed_then_dies, write=write)

        monkeypatch.setattr(store._db, "run", commit_then_lose)
        one = Event.new("test/n", {"n": 1})
        assert session.append(one) == 2
        batch = [Event.new("test/n", {"n": n}) for n in (2, 3)]
        lost.clear()
        assert session.append_many(batch) == [3, 4]
        assert len(lost) == 1
        monkeypatch.undo()
        assert session.append(one) == 2  # appended again by the caller: still once
    with open_store(url) as store:
        events = store.get("s").read()
    assert [decode(e.data)["n"] for e in events] == [0, 1, 2, 3]
    assert [e.id for e in events[1:]] == [one.id, batch[0].id, batch[1].id]


def test_with_reconnect_timeout_0_a_lost_write_says_its_outcome_is_unknown(
    url: str, schema: str, admin: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_store(url, pool_min_size=1, pool_max_size=1, reconnect_timeout=0) as store:
        assert isinstance(store, PostgresStore)
        session = store.get("s")
        session.append(Event.new("test/n", {"n": 0}))
        checkouts = kill_after_checkout(store, admin, monkeypatch)
        event = Event.new("test/n", {"n": 1})
        with pytest.raises(OutcomeUnknown, match="may or may not have been stored"):
            session.append(event)
        assert len(checkouts) == 1  # not retried
        monkeypatch.undo()
        # Appending the same event again finds out: here it was not stored (the server was
        # gone before the append arrived), so it is stored now, once.
        assert session.append(event) == 2
        assert session.append(event) == 2
        assert session.latest_seq == 2


def test_reconnect_timeout_is_checked() -> None:
    with pytest.raises(UsageError, match="reconnect_timeout"):
        PostgresStore("postgresql://nowhere.invalid/x", reconnect_timeout=-1)


def test_server_errors_on_write_are_storage_errors_not_unknown_outcomes(
    store: PostgresStore, schema: str, admin: psycopg.Connection[Any]
) -> None:
    session = store.get("s")
    # The client refuses malformed JSON itself, so a trigger of the test's own (dropped with
    # its schema) makes the server refuse one kind of event.
    for statement in (
        "CREATE FUNCTION {s}.refuse() RETURNS trigger LANGUAGE plpgsql "
        "AS $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$",
        "CREATE TRIGGER refuse BEFORE INSERT ON {s}.events FOR EACH ROW "
        "WHEN (NEW.type = 'test/refused') EXECUTE FUNCTION {s}.refuse()",
    ):
        admin.execute(sql.SQL(statement).format(s=sql.Identifier(schema)))  # type: ignore[arg-type]
    with pytest.raises(StorageError, match="refused by the test") as info:
        session.append(Event.new("test/refused"))
    assert "may or may not" not in str(info.value)
    assert session.latest_seq == 0
    assert session.append(Event.new("test/n")) == 1


# -- what opening reads, and how rows look ----------------------------------------------------


def _turns(session: Any, count: int, start: int = 0) -> None:
    for n in range(start, start + count):
        with session.turn(agent="coder") as turn:
            turn.user(f"question {n}")
            with turn.step() as step:
                step.assistant(f"answer {n}")


def test_opening_reads_from_the_last_compaction_marker(
    url: str, schema: str, admin: psycopg.Connection[Any]
) -> None:
    with open_store(url) as store:
        session = store.get("long")
        _turns(session, 6)
        marker = session.compact("the summary", keep_turns=2)
        assert marker is not None
        _turns(session, 2, start=6)
        before = [m.text for m in session.messages()]
        total = session.latest_seq
    ((compaction_seq,),) = rows(
        admin, schema, "SELECT compaction_seq FROM {s}.sessions WHERE id = 'long'"
    )
    assert compaction_seq == marker
    with open_store(url) as store:
        reopened = store.get("long")
        assert reopened._window_start == marker
        assert reopened._window[0].seq == marker
        assert reopened._window[0].type == COMPACTION
        assert len(reopened._window) == total - marker + 1
        assert [m.text for m in reopened.messages()] == before
        assert [e.seq for e in reopened.read()] == list(range(1, total + 1))


def test_a_marker_appended_on_the_fast_path_moves_the_opening_point(
    url: str, schema: str, admin: psycopg.Connection[Any]
) -> None:
    from agentsession.events import Compaction

    with open_store(url) as store:
        session = store.get("fast")
        _turns(session, 2)  # the first append creates the row; the rest take the fast path
        marker = Compaction(summary=Message.user("the summary"), first_kept_seq=session.latest_seq)
        seq = session.append(Event.new(COMPACTION, marker))
        _turns(session, 1, start=2)
    ((compaction_seq, last_seq),) = rows(
        admin, schema, "SELECT compaction_seq, last_seq FROM {s}.sessions WHERE id = 'fast'"
    )
    assert compaction_seq == seq and last_seq == seq + 6
    with open_store(url) as store:
        reopened = store.get("fast")
        assert reopened.messages()[0].text == "the summary"
        assert reopened._window_start == seq


def test_legacy_marker_does_not_move_the_opening_point(
    url: str, schema: str, admin: psycopg.Connection[Any]
) -> None:
    with open_store(url) as store:
        session = store.get("legacy")
        _turns(session, 3)
        session.append(Event.new(COMPACTION, {"summary": Message.user("old"), "beforeSeq": 4}))
    ((compaction_seq,),) = rows(
        admin, schema, "SELECT compaction_seq FROM {s}.sessions WHERE id = 'legacy'"
    )
    assert compaction_seq == 0
    with open_store(url) as store:
        assert store.get("legacy")._window_start == 1


def test_values_text_cannot_hold_go_to_raw_event_and_payloads_stay_in_data(
    store: PostgresStore, schema: str, admin: psycopg.Connection[Any]
) -> None:
    session = store.get("values")
    session.append(Event.new("user/message", Message.user("plain"), agent="a", meta={"k": 1}))
    session.append(Event.new("user/message", Message.user("nul\x00"), agent="a"))
    session.append(Event.new("test/n", {"ok": True}, user="u\ud800", meta={"m": "\ud800"}))
    stored = rows(
        admin,
        schema,
        'SELECT seq, data, meta, raw_event IS NULL, "user" FROM {s}.events ORDER BY seq',
    )
    assert stored[0][1:4] == (
        b'{"role":"user","parts":[{"type":"text","text":"plain"}]}',
        b'{"k":1}',
        True,
    )
    # A NUL in the payload is an escape in its JSON: bytes like any other.
    assert stored[1][1:4] == (
        b'{"role":"user","parts":[{"type":"text","text":"nul\\u0000"}]}',
        None,
        True,
    )
    # A user TEXT cannot hold: raw_event has it, the payload and meta keep their columns.
    assert stored[2][1:] == (b'{"ok":true}', b'{"m":"\\ud800"}', False, "u\ufffd")
    # JSON queries: the view (NULL where jsonb cannot hold the payload).
    texts = rows(
        admin, schema, "SELECT seq, data->'parts'->0->>'text' FROM {s}.events_json ORDER BY seq"
    )
    assert texts == [(1, "plain"), (2, None), (3, None)]
    with open_store(store.url) as again:
        events = again.get("values").read()
    assert decode(events[1].data, Message).text == "nul\x00"
    assert events[2].user == "u\ud800" and events[2].meta == {"m": "\ud800"}
    assert events[2].raw == b'{"ok":true}'
    assert events[0].meta == {"k": 1}


# Payloads as an application might write them: none of this survives JSONB, all of it bytea.
EXACT_PAYLOADS = [
    b'{ "z" : 1 ,\t"a":[ 1 , 2 ] }',
    b'{"b":1,"a":2,"b":3}',
    b'{"big":123456789012345678901234567890,"f":1.50,"e":1E+2,"neg":-0.0,"tiny":5e-324}',
    '{"text":"h\u00e9llo \u2603 \U0001f600","esc":"\\u00e9\\u2603\\ud83d\\ude00"}'.encode(),
    b'{"nul":"a\\u0000b","k\\u0000":true}',
    b'{"lone":"\\ud800","low":"x\\udc00y","pair":"\\ud83d\\ude00"}',
    b'"a string"',
    b"[]",
    b"  null",
    b"-0",
]


def test_payload_bytes_round_trip_exactly(
    store: PostgresStore, schema: str, admin: psycopg.Connection[Any]
) -> None:
    session = store.get("exact")
    one = [Event(type="app/exact", data=msgspec.Raw(raw)) for raw in EXACT_PAYLOADS]
    for event in one:
        session.append(event)
    session.append_many([Event(type="app/batch", data=msgspec.Raw(raw)) for raw in EXACT_PAYLOADS])
    expected = EXACT_PAYLOADS * 2
    stored = rows(admin, schema, "SELECT data FROM {s}.events ORDER BY seq")
    assert [bytes(d) for (d,) in stored] == expected
    # A fresh store reads them back (the tail, the full window, and by range).
    with open_store(store.url) as again:
        reopened = again.get("exact")
        assert [e.raw for e in reopened.read()] == expected
        assert [e.raw for e in reopened.read(after=len(EXACT_PAYLOADS))] == EXACT_PAYLOADS
        assert [e.raw for e in reopened._window] == expected  # the tail held them all
        assert decode(reopened.read()[4].data) == {"nul": "a\x00b", "k\x00": True}


def test_opening_reads_the_tail_by_key_range(
    url: str, schema: str, admin: psycopg.Connection[Any]
) -> None:
    tail = pg_schema.TAIL_EVENTS
    total = tail * 3 + 5
    with open_store(url) as store:
        store.get("long").append_many(
            [Event.new("user/message", Message.user(f"m{n}")) for n in range(total)]
        )
        store.get("short").append_many([Event.new("test/n", {"n": n}) for n in range(3)])
    with open_store(url) as store:
        long = store.get("long")
        assert [e.seq for e in long._window] == list(range(total - tail + 1, total + 1))
        assert long._window_start == total - tail + 1 and not long._full
        assert [e.seq for e in long.read(after=total - 20)] == list(range(total - 19, total + 1))
        assert [e.seq for e in long.read(after=3, limit=2)] == [4, 5]
        assert long.append(Event.new("user/message", Message.user("more"))) == total + 1
        assert len(long.messages()) == total + 1  # loads the full window
        assert long._window_start == 1 and long._full
        short = store.get("short")
        assert [e.seq for e in short._window] == [1, 2, 3] and short._full
    # The server reads only the tail: the index scan returns TAIL_EVENTS rows.
    statement = pg_schema.Statements.for_schema(schema).open_tail
    (plan,) = psycopg.RawCursor(admin).execute(
        b"EXPLAIN (ANALYZE, FORMAT JSON) " + statement, ("long", tail)
    ).fetchone() or (None,)
    scans = list(_plan_nodes(plan[0]["Plan"], "events"))
    assert scans and all(node["Actual Rows"] == tail for node in scans)
    assert all("Index" in node["Node Type"] for node in scans)


def _plan_nodes(node: dict[str, Any], relation: str) -> Iterator[dict[str, Any]]:
    if node.get("Relation Name") == relation:
        yield node
    for child in node.get("Plans", []):
        yield from _plan_nodes(child, relation)


def test_a_session_object_that_opened_at_the_tail_sees_a_delete_and_recreate(
    url: str,
) -> None:
    with open_store(url) as first, open_store(url) as second:
        first.get("s").append_many([Event.new("test/n", {"n": n}) for n in range(100)])
        held = second.get("s")
        assert held.latest_seq == 100 and not held._full
        first.delete("s")
        first.get("s").append(Event.new("test/n", {"n": "new"}))
        # Appending notices the new life: seq 2, after the new life's first event.
        assert held.append(Event.new("test/n", {"n": "held"})) == 2
        assert [decode(e.data)["n"] for e in held.read()] == ["new", "held"]
        first.delete("s")
        assert held.latest_seq == 0 and held.read() == []


def test_an_append_never_lands_in_a_life_its_session_object_has_not_read(url: str) -> None:
    """The log the object read is gone: an append writes nothing there, the object opens the
    log again and appends to what it finds; a conditional append planned in the old life is
    refused."""
    with open_store(url) as first, open_store(url) as second:
        first.get("s").append_many([Event.new("test/n", {"n": n}) for n in range(3)])
        held = second.get("s")
        assert held.latest_seq == 3
        first.delete("s")
        # Created by the object's own conditional append at 0: a new life, read from seq 1.
        assert held.append_many([Event.new("test/n", {"n": "a"})], expect_seq=0) == [1]
        assert [decode(e.data)["n"] for e in held.read()] == ["a"]
        assert [decode(e.data)["n"] for e in first.get("s").read()] == ["a"]
        planned = held.latest_seq
        first.delete("s")
        first.get("s").append(Event.new("test/n", {"n": "b"}))  # the same latest seq
        with pytest.raises(ConflictError):
            held.append_many([Event.new("test/n", {"n": "planned"})], expect_seq=planned)
        # Nothing of it was written, and the object reads the new life from here on.
        assert [decode(e.data)["n"] for e in first.get("s").read()] == ["b"]
        assert [decode(e.data)["n"] for e in held.read()] == ["b"]
        assert held.append(Event.new("test/n", {"n": "c"})) == 2
        first.delete("s")
        # Gone and not created again: an unconditional append starts a life of its own.
        assert held.append(Event.new("test/n", {"n": "d"})) == 1
        assert [decode(e.data)["n"] for e in first.get("s").read()] == ["d"]


def test_opening_a_store_connects_once_and_the_lock_pool_waits_for_a_lock(
    url: str, schema: str, admin: psycopg.Connection[Any]
) -> None:
    migrate(url)
    with open_store(url, pool_min_size=1) as store:
        store.get("s").read()
        wait_for(lambda: len(backends(admin, f"agentsession/{schema}")) == 1)
        assert isinstance(store, PostgresStore)
        assert store._db.pool.get_stats().get("connections_num") == 1
        assert backends(admin, f"agentsession-lock/{schema}") == []
        with store.lock("s", timeout=5):
            assert len(backends(admin, f"agentsession-lock/{schema}")) == 1
    with open_store(url, pool_min_size=0) as store:
        assert store.get("s").append(Event.new("test/n")) == 1
        assert store._db.pool.get_stats().get("connections_num") == 1


def test_session_ids_text_cannot_hold_are_refused(store: PostgresStore) -> None:
    for bad in ["nul\x00id", "lone\ud800"]:
        with pytest.raises(UsageError, match="cannot be stored in PostgreSQL"):
            store.get(bad)
        assert not store.exists(bad)
        assert store.delete(bad) is False
    with pytest.raises(UsageError):
        bind_agent(store, "s", "agent\x00")


def test_list_prefix_is_literal(store: PostgresStore) -> None:
    for sid in ["a%b", "a_b", "axb", "A%b"]:
        store.get(sid).append(Event.new("test/n"))
    assert [i.id for i in store.list(prefix="a%")] == ["a%b"]
    assert [i.id for i in store.list(prefix="a_")] == ["a_b"]
    info = store.list(prefix="axb")[0]
    assert info.last_seq == 1 and info.updated_at is not None


def test_fsync_forces_synchronous_commit_on(schema: str) -> None:
    def setting(store: Any) -> str:
        row = store._db.run("test", lambda c: c.execute("SHOW synchronous_commit").fetchone())
        return str(row[0])

    # The server (here: the URL) says off; flush leaves it, fsync overrides it.
    parts = urlsplit(_url_with_schema(schema))
    off = urlunsplit(parts._replace(query=parts.query + "&options=-c%20synchronous_commit%3Doff"))
    with open_store(off) as store:
        assert setting(store) == "off"
    with open_store(off, durability="fsync") as store:
        assert setting(store) == "on"
        assert store.get("s").append(Event.new("test/n")) == 1


def test_pool_sizes_are_checked(url: str) -> None:
    with pytest.raises(UsageError):
        open_store(url, pool_min_size=3, pool_max_size=2)
    with pytest.raises(UsageError):
        open_store(url, lock_pool_max_size=0)


def test_latest_migration_matches_the_code() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, LATEST_VERSION + 1))


def test_a_version_1_schema_with_data_migrates_and_its_sessions_get_distinct_lives(
    url: str, schema: str, admin: psycopg.Connection[Any]
) -> None:
    """Data written by version 1 (before ``sessions.life``) loads after the migration."""
    from psycopg import sql

    s = sql.Identifier(schema)
    admin.execute(sql.SQL("CREATE SCHEMA {}").format(s))
    admin.execute(
        sql.SQL(
            "CREATE TABLE {}.schema_migrations (version integer PRIMARY KEY, name text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        ).format(s)
    )
    for statement in MIGRATIONS[0].statements:
        admin.execute(sql.SQL(statement).format(s=s))
    admin.execute(
        sql.SQL("INSERT INTO {}.schema_migrations (version, name) VALUES (1, %s)").format(s),
        (MIGRATIONS[0].name,),
    )
    for sid in ("v1:a", "v1:b"):
        admin.execute(
            sql.SQL(
                "INSERT INTO {}.sessions (id, created_at, updated_at, last_seq) "
                "VALUES (%s, now(), now(), 2)"
            ).format(s),
            (sid,),
        )
        for seq, text in ((1, "hello"), (2, "again")):
            admin.execute(
                sql.SQL(
                    'INSERT INTO {}.events (session_id, seq, type, agent, "user", time, data) '
                    "VALUES (%s, %s, 'user/message', '', '', now(), %s::jsonb)"
                ).format(s),
                (sid, seq, json.dumps({"role": "user", "parts": [{"type": "text", "text": text}]})),
            )
    with open_store(url) as store:
        assert [m.text for m in store.get("v1:a").messages()] == ["hello", "again"]
        assert store.get("v1:b").append(Event.new("test/n", {})) == 3
    lives = admin.execute(sql.SQL("SELECT id, life FROM {}.sessions ORDER BY id").format(s))
    rows = lives.fetchall()
    assert [r[0] for r in rows] == ["v1:a", "v1:b"] and rows[0][1] != rows[1][1]
    versions = admin.execute(sql.SQL("SELECT version FROM {}.schema_migrations").format(s))
    assert sorted(v for (v,) in versions) == [m.version for m in MIGRATIONS]


GOLDEN_V2 = Path(__file__).parent / "golden" / "postgres_v2.sql"
"""A store at schema version 2 with data, as version 2 wrote it (see the file's header)."""


def load_golden_v2(schema: str) -> None:
    """Load ``golden/postgres_v2.sql`` into ``schema`` (which must not exist yet)."""
    script = GOLDEN_V2.read_text(encoding="utf-8").replace("agentsession_golden_v2", schema)
    with psycopg.connect(DSN, autocommit=True) as conn:  # the dump changes search_path
        conn.execute(script.encode())


def test_a_version_2_store_with_data_migrates_to_byte_exact_payloads_and_reads_back(
    url: str, schema: str, admin: psycopg.Connection[Any]
) -> None:
    load_golden_v2(schema)
    # What version 2 read back: the JSONB text of data and meta, or the whole raw_event.
    expected: dict[str, list[Event]] = {}
    for sid, seq, kind, agent, user, at, data, meta, raw in rows(
        admin,
        schema,
        'SELECT session_id, seq, type, agent, "user", time, data::text, meta::text, raw_event '
        "FROM {s}.events ORDER BY session_id, seq",
    ):
        if raw is not None:
            event = msgspec.structs.replace(decode_event(raw), seq=seq)
        else:
            event = Event(
                seq=seq,
                type=kind,
                agent=agent,
                user=user,
                time=at,
                data=msgspec.Raw(data.encode()),
                meta=decode(meta) if meta is not None else {},
            )
        expected.setdefault(sid, []).append(event)
    lives = dict(rows(admin, schema, "SELECT id, life FROM {s}.sessions"))
    assert lives == {"golden:chat": 1, "golden:numbers": 39, "golden:odd": 42, "golden:again": 46}

    # Without auto_migrate, a version-2 schema is refused as clearly as any older one.
    with pytest.raises(StorageError, match=r"not at version 7 \(it is at version 2\).*migrate"):
        open_store(url, auto_migrate=False)

    with open_store(url) as store:
        versions = rows(admin, schema, "SELECT version FROM {s}.schema_migrations ORDER BY 1")
        assert [v for (v,) in versions] == [1, 2, 3, 4, 5, 6, 7]
        assert rows(admin, schema, "SELECT pg_typeof(data)::text FROM {s}.events LIMIT 1") == [
            ("bytea",)
        ]
        for sid, events in expected.items():
            session = store.get(sid)
            read = session.read()
            assert read == events, sid
            assert [e.raw for e in read] == [e.raw for e in events], sid
            assert [e.time for e in read] == [e.time for e in events]
        assert sorted(lives) == sorted(expected)
        assert rows(admin, schema, "SELECT id, life FROM {s}.sessions ORDER BY life") == sorted(
            lives.items(), key=lambda item: item[1]
        )
        assert [(i.id, i.last_seq) for i in store.list()] == [
            ("golden:again", 2),
            ("golden:odd", 3),
            ("golden:numbers", 3),
            ("golden:chat", 38),
        ]

        # The payloads are JSONB's text form, as version 2 read them (not what was appended).
        numbers = store.get("golden:numbers").read()
        assert numbers[0].raw == (
            b'{"a": 12345678901234567890123, "e": 100, "m": 1.50, "s": "x", "z": 1, "neg": 0.0}'
        )
        assert [e.raw for e in numbers[1:]] == [b"null", b'[3, 2, 1, {"a": false, "b": true}]']
        # Events version 2 kept in raw_event (NUL, lone surrogates) still read back exactly.
        odd = store.get("golden:odd").read()
        assert decode(odd[0].data, Message).text == "nul\x00inside"
        assert odd[1].user == "u\udc00" and decode(odd[1].data) == {"s": "lone \ud800 surrogate"}
        assert odd[2].meta == {"note": "nul\x00meta"}

        chat = store.get("golden:chat")
        assert chat.messages()[0].text == "summary of the first turns"
        assert [m.text for m in chat.messages()] == [
            "summary of the first turns",
            'question 2: h\u00e9llo \u2603 \U0001f600 "quoted" \\ back\tslash',
            "",
            "",
            "answer 2",
            "after the compaction",
            "still here",
            "with meta",
        ]
        assert chat._window_start == 31  # the full window starts at the compaction marker
        assert chat.read()[-1].meta == {
            "logical_chars": 12004,
            "platform": {"ts": "1712345678.9", "\u00fc": [1, 2.5, None]},
        }
        assert store.meta_get("bind", "golden:chat") == "coder"
        assert store.meta_get("pointer", "cli") == "golden:chat"

        # Appending after the migration stores the new payload byte-exact, after seq 38.
        again = store.get("golden:again")
        assert [decode(e.data)["n"] for e in again.read()] == [2, 3]
        raw = b'{"z":1,  "a":1.50}'
        assert chat.append(Event(type="app/new", data=msgspec.Raw(raw))) == 39
    with open_store(url) as store:
        assert store.get("golden:chat").read(after=38)[0].raw == raw
    # JSON queries go through the view.
    assert rows(
        admin,
        schema,
        "SELECT data->>'role' FROM {s}.events_json WHERE session_id = 'golden:chat' AND seq = 2",
    ) == [("user",)]


# -- reading never migrates ---------------------------------------------------------------------


def catalog(admin: psycopg.Connection[Any], schema: str) -> dict[str, list[Any]]:
    """What ``schema`` holds, from ``information_schema``: whether it exists, its columns
    (of tables and views), functions and sequences, and the migrations recorded in it."""
    found = {
        "schemata": "SELECT schema_name FROM information_schema.schemata WHERE schema_name = %s",
        "columns": "SELECT table_name, column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = %s ORDER BY 1, 2",
        "routines": "SELECT routine_name FROM information_schema.routines "
        "WHERE routine_schema = %s ORDER BY 1",
        "sequences": "SELECT sequence_name FROM information_schema.sequences "
        "WHERE sequence_schema = %s ORDER BY 1",
    }
    state = {name: admin.execute(query, (schema,)).fetchall() for name, query in found.items()}
    state["versions"] = (
        rows(admin, schema, "SELECT version FROM {s}.schema_migrations ORDER BY 1")
        if ("schema_migrations", "version", "integer") in state["columns"]
        else []
    )
    return state


def load_version_3(schema: str, admin: psycopg.Connection[Any]) -> None:
    """The golden version 2 store, migrated to version 3 as version 3 did (no ``eid``)."""
    load_golden_v2(schema)
    for statement in MIGRATIONS[2].statements:
        admin.execute(sql.SQL(statement).format(s=sql.Identifier(schema)))  # type: ignore[arg-type]
    rows(admin, schema, "INSERT INTO {s}.schema_migrations (version, name) VALUES (3, 'v3') "
         "RETURNING 1")


def test_reading_commands_read_a_version_3_store_as_it_is_and_migrate_nothing(
    url: str, schema: str, admin: psycopg.Connection[Any], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from .test_cli import invoke, reading_commands, run_reading_command

    load_version_3(schema, admin)
    before = catalog(admin, schema)
    assert [v for (v,) in before["versions"]] == [1, 2, 3]
    assert not [c for c in before["columns"] if c[1] == "eid"]
    commands = reading_commands("golden:chat", 38, 4, "after the compaction", tmp_path)
    for args, shown in commands:
        code, out, err = run_reading_command(url, args, monkeypatch)
        assert catalog(admin, schema) == before, args
        if args[0] == "copy":
            continue  # the source is left alone; whether the copy verifies is another matter
        assert (code, err) == (0, ""), args
        assert shown in out, args
    with open_store(url, read_only=True) as store:
        events = store.get("golden:odd").read()
        assert decode(events[0].data, Message).text == "nul\x00inside"
        assert [e.id for e in events] == ["", "", ""]
    # A write still migrates.
    assert invoke(url, "migrate") == (0, "applied migrations 4, 5, 6, 7\n", "")
    assert [v for (v,) in catalog(admin, schema)["versions"]] == [1, 2, 3, 4, 5, 6, 7]


def test_reading_commands_refuse_a_version_2_store_and_migrate_nothing(
    url: str, schema: str, admin: psycopg.Connection[Any], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from .test_cli import reading_commands, run_reading_command

    load_golden_v2(schema)
    before = catalog(admin, schema)
    assert [v for (v,) in before["versions"]] == [1, 2]
    for args, _ in reading_commands("golden:chat", 38, 4, "", tmp_path):
        code, out, err = run_reading_command(url, args, monkeypatch)
        assert (code, out) == (1, ""), args
        assert err.strip().endswith(
            "schema version 2 is older than 7; run `agentsession migrate`"
        ), args
        assert catalog(admin, schema) == before, args
    assert not (tmp_path / "copied").exists()
    with pytest.raises(StoreUnavailable, match="older than 7"):
        open_store(url, read_only=True)
    assert catalog(admin, schema) == before


@pytest.mark.parametrize("exists", [False, True])
def test_reading_commands_on_a_schema_without_a_store_say_no_store_and_create_nothing(
    url: str, schema: str, admin: psycopg.Connection[Any], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, exists: bool,
) -> None:
    from .test_cli import reading_commands, run_reading_command

    if exists:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    before = catalog(admin, schema)
    assert before["schemata"] == ([(schema,)] if exists else [])
    assert before["columns"] == before["routines"] == before["sequences"] == []
    for args, _ in reading_commands("golden:chat", 38, 4, "", tmp_path):
        code, out, err = run_reading_command(url, args, monkeypatch)
        assert (code, out) == (4, ""), args
        assert "no store at" in err and f"schema {schema!r} holds no agentsession" in err, args
        assert catalog(admin, schema) == before, args
    with pytest.raises(StoreUnavailable, match="no store at"):
        open_store(url, read_only=True)
    assert catalog(admin, schema) == before
    assert not (tmp_path / "copied").exists()
