"""Hash-partitioned events (``partitions=N``, ``partition_events``, ``migrate --partitions``).

Against the server named by ``AGENTSESSION_TEST_POSTGRES_DSN``, each test in a fresh schema.
The whole storage contract on a partitioned store is ``test_conformance_postgres.py``'s
``TestPostgresStorePartitioned`` (and the async one's); here: the layout made at creation,
a store with data laid out anew with every event kept byte for byte (and back), the checks
of the option, and exactly-once appends across partitions with several writers.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from agentsession import Event, Message, UsageError, open_store
from agentsession.events import USER_MESSAGE

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

    from agentsession.backends.postgres import migrate, partition_events
    from agentsession.backends.postgres.schema import MIGRATIONS, event_partitions


@pytest.fixture
def schema() -> Iterator[str]:
    name = new_schema_name()
    try:
        yield name
    finally:
        drop_schemas([name])


def said(text: str, **kw: Any) -> Event:
    return Event.new(USER_MESSAGE, Message.user(text), **kw)


def partitions_of(schema: str) -> int:
    with psycopg.connect(DSN, autocommit=True) as conn:
        return event_partitions(conn, schema)


def rows_of(schema: str) -> list[tuple[Any, ...]]:
    """Every events row, as stored (bytes for bytes)."""
    with psycopg.connect(DSN, autocommit=True) as conn:
        query = sql.SQL("SELECT * FROM {}.events ORDER BY session_id, seq").format(
            sql.Identifier(schema)
        )
        return conn.execute(query).fetchall()


def rows_per_partition(schema: str) -> dict[str, int]:
    with psycopg.connect(DSN, autocommit=True) as conn:
        query = sql.SQL("SELECT tableoid::regclass::text, count(*) FROM {}.events GROUP BY 1")
        return {
            str(r[0]): int(r[1])
            for r in conn.execute(query.format(sql.Identifier(schema))).fetchall()
        }


def fill(store: Any, sessions: int, per_session: int) -> None:
    for n in range(sessions):
        session = store.get(f"s{n:03d}")
        with session.turn(agent="bot") as turn:
            turn.user(f"question {n} about partition{n % 7}")
            turn.assistant(f"answer {n}")
        session.append_many([said(f"note {n}.{i}", id=f"note:{n}:{i}") for i in range(per_session)])


def test_a_store_created_with_partitions(schema: str) -> None:
    url = url_with_schema(schema)
    store = open_store(url, partitions=4)
    try:
        fill(store, 40, 3)
        assert partitions_of(schema) == 4
        spread = rows_per_partition(schema)
        assert len(spread) == 4  # 40 sessions land in every partition
        assert sum(spread.values()) == len(rows_of(schema))
        assert [m.text for m in store.open("s007").messages()][:2] == [
            "question 7 about partition0",
            "answer 7",
        ]
        assert len(store.list(limit=100)) == 40
        assert {h.session_id for h in store.search("partition3")} == {
            f"s{n:03d}" for n in range(40) if n % 7 == 3
        }
        assert store.delete("s001")
        assert not store.exists("s001")
    finally:
        store.close()
    again = open_store(url, partitions=4)  # the layout it has: opens
    again.close()
    with pytest.raises(UsageError, match="--partitions 8"):
        open_store(url, partitions=8)


def test_partition_events_keeps_every_event(schema: str) -> None:
    url = url_with_schema(schema)
    store = open_store(url)
    try:
        fill(store, 30, 5)
    finally:
        store.close()
    with psycopg.connect(DSN, autocommit=True) as conn:  # an index of the user's own
        conn.execute(
            sql.SQL(
                "CREATE INDEX events_role_idx ON {s}.events (({s}.json_of(data)->>'role'))"
            ).format(s=sql.Identifier(schema))
        )
    before = rows_of(schema)
    assert partitions_of(schema) == 1
    assert partition_events(url, 8) == len(before)
    assert partitions_of(schema) == 8
    assert rows_of(schema) == before
    assert partition_events(url, 8) == 0  # the layout it has: nothing done
    with psycopg.connect(DSN, autocommit=True) as conn:
        indexes = {
            r[0]
            for r in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = 'events'",
                (schema,),
            )
        }
        assert {"events_pkey", "events_role_idx"} <= indexes
        view = conn.execute(
            sql.SQL("SELECT count(*) FROM {}.events_json").format(sql.Identifier(schema))
        ).fetchone()
        assert view is not None
        assert view[0] == len(before)
        collation = conn.execute(
            "SELECT collation_name FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = 'events' AND column_name = 'session_id'",
            (schema,),
        ).fetchone()
        assert collation == ("C",)
    store = open_store(url, partitions=8)
    try:
        session = store.get("s004")
        assert session.append(said("after")) == len(session.read())
        assert [h.session_id for h in store.search("after")] == ["s004"]
        # The ids stored before are still recognised: appended again, stored once.
        first = next(e.seq for e in session.read() if e.id == "note:4:0")
        assert session.append(said("again", id="note:4:0")) == first
    finally:
        store.close()
    after = rows_of(schema)
    assert partition_events(url, 3) == len(after)
    assert rows_of(schema) == after
    assert partition_events(url, 1) == len(after)  # back to one plain table
    assert partitions_of(schema) == 1
    assert rows_of(schema) == after


def test_migrate_with_partitions_and_the_cli(schema: str) -> None:
    url = url_with_schema(schema)
    assert migrate(url, partitions=2)  # created with the layout
    assert partitions_of(schema) == 2
    store = open_store(url)
    try:
        fill(store, 5, 1)
    finally:
        store.close()
    before = rows_of(schema)
    assert migrate(url, partitions=5) == []  # no migration applied, but laid out anew
    assert partitions_of(schema) == 5
    assert rows_of(schema) == before

    from agentsession.cli import cli

    result = CliRunner().invoke(cli, ["--store", url, "migrate", "--partitions", "3", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {"applied": [], "partitions": 3}
    assert partitions_of(schema) == 3
    assert rows_of(schema) == before


@pytest.mark.parametrize("bad", [0, -1, 1025, 2.5, True, "4"])
def test_the_number_of_partitions_is_checked(schema: str, bad: Any) -> None:
    url = url_with_schema(schema)
    with pytest.raises(UsageError, match="partitions"):
        open_store(url, partitions=bad)
    with pytest.raises(UsageError, match="partitions"):
        partition_events(url, bad)


def test_partition_events_needs_a_store(schema: str) -> None:
    from agentsession import StoreUnavailable

    with pytest.raises(StoreUnavailable, match="no store"):
        partition_events(url_with_schema(schema), 4)


def test_exactly_once_across_partitions_with_several_writers(schema: str) -> None:
    """Four store objects append the same ids to sessions spread over the partitions, at
    once: each id is stored once, each session's seqs have no gap."""
    url = url_with_schema(schema)
    open_store(url, partitions=4).close()
    stores = [open_store(url, partitions=4) for _ in range(4)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(stores))

    def write(store: Any) -> None:
        try:
            barrier.wait()
            for n in range(12):
                session = store.get(f"x{n}")
                for i in range(6):
                    session.append(said(f"{n}.{i}", id=f"once:{n}:{i}"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(s,)) for s in stores]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for s in stores:
            s.close()
    assert errors == []
    rows = rows_of(schema)
    ids = [r[-1] for r in rows]
    assert sorted(ids) == sorted(f"once:{n}:{i}" for n in range(12) for i in range(6))
    for n in range(12):
        seqs = [r[1] for r in rows if r[0] == f"x{n}"]
        assert seqs == list(range(1, 7))
    assert len(rows_per_partition(schema)) == 4


def test_the_golden_version_2_store_migrates_into_partitions_and_reads_back() -> None:
    """``tests/golden/postgres_v2.sql`` migrated with ``partitions=4`` reads back exactly as
    the same store migrated to one table does (events, raw bytes, times, listing)."""
    from .test_postgres import load_golden_v2

    plain, split = new_schema_name(), new_schema_name()
    try:
        load_golden_v2(plain)
        load_golden_v2(split)
        later = [m.version for m in MIGRATIONS if m.version > 2]
        assert migrate(url_with_schema(plain)) == later
        assert migrate(url_with_schema(split), partitions=4) == later
        assert partitions_of(plain) == 1
        assert partitions_of(split) == 4
        assert rows_of(split) == rows_of(plain)
        with open_store(url_with_schema(plain)) as one, open_store(url_with_schema(split)) as four:
            ids = [i.id for i in one.list()]
            assert ids == [i.id for i in four.list()]
            assert len(ids) == 4
            for sid in ids:
                expected = one.get(sid).read()
                read = four.get(sid).read()
                assert read == expected
                assert [e.raw for e in read] == [e.raw for e in expected]
    finally:
        drop_schemas([plain, split])
