"""The PostgreSQL store's catalog taken at turn boundaries (schema version 6,
``sessions.catalog_seq``): appends inside a turn mark the row not indexed, the turn's end
hands it the whole turn where it continues ``catalog_seq``, and reading the catalog catches up
the rows not indexed from their logs, so what is listed always matches a rebuild.

Needs a server: set ``AGENTSESSION_TEST_POSTGRES_DSN``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from agentsession import Event, Message, open_store
from agentsession.backends.postgres.schema import MIGRATIONS
from agentsession.events import TurnEnd, TurnStart

from .test_catalog_deferred import _listed, _rebuilt, _turn, kill_writer_mid_turn
from .test_conformance_postgres import (
    DSN,
    SKIP_REASON,
    drop_schemas,
    new_schema_name,
    url_with_schema,
)

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not DSN, reason=SKIP_REASON)]


@pytest.fixture
def url() -> Iterator[str]:
    name = new_schema_name()
    try:
        yield url_with_schema(name)
    finally:
        drop_schemas([name])


def _state(url: str, session_id: str) -> tuple[Any, ...] | None:
    schema = url.split("schema=")[1]
    with psycopg.connect(DSN) as conn:
        return conn.execute(
            sql.SQL(
                "SELECT messages, turns, indexed, catalog_seq, last_seq FROM {}.sessions "
                "WHERE id = %s"
            ).format(sql.Identifier(schema)),
            (session_id,),
        ).fetchone()


def test_a_turn_writes_the_row_at_its_start_and_end_only(url: str) -> None:
    with open_store(url, pool_max_size=3) as store:
        session = store.get("a")
        _turn(session, 0)
        assert _state(url, "a") == (2, 1, True, 4, 4)
        session.append(Event.new("turn/start", TurnStart(), agent="bot"))
        session.append(Event.new("user/message", Message.user("inside"), agent="bot"))
        # The row has the turn's start; its message waits for the turn's end.
        assert _state(url, "a") == (2, 2, False, 5, 6)
        session.append(Event.new("turn/end", TurnEnd(steps=0), agent="bot"))
        assert _state(url, "a") == (3, 2, True, 7, 7)
        session.append(Event.new("turn/start", TurnStart(), agent="bot"))
        session.append(Event.new("user/message", Message.user("again"), agent="bot"))
        [info] = store.list(order="id")  # reading the catalog catches up
        assert (info.messages, info.turns) == (4, 3)
        assert _state(url, "a") == (4, 3, True, 9, 9)
        # The turn's end no longer continues the row: it is left for the next catch-up.
        session.append(Event.new("turn/end", TurnEnd(steps=0), agent="bot"))
        assert _state(url, "a") == (4, 3, False, 9, 10)
        assert _listed(store) == _rebuilt(store)


def test_two_writers_of_one_session_never_count_an_event_twice(url: str) -> None:
    one = open_store(url, pool_max_size=3)
    two = open_store(url, pool_max_size=3)
    try:
        a, b = one.get("s"), two.get("s")
        a.append(Event.new("turn/start", TurnStart(), agent="x"))
        a.append(Event.new("user/message", Message.user("from a"), agent="x"))
        b.append(Event.new("user/message", Message.user("from b"), agent="y"))
        a.append(Event.new("assistant/message", Message.assistant("a again"), agent="x"))
        a.append(Event.new("turn/end", TurnEnd(steps=0), agent="x"))
        _turn(b, 1, agent="y")
        assert _listed(one) == _rebuilt(two)
        assert one.list()[0].messages == 5
    finally:
        one.close()
        two.close()


def test_a_writer_killed_mid_turn_is_caught_up_from_its_log(url: str, tmp_path: Path) -> None:
    kill_writer_mid_turn(url, 7)
    assert _state(url, "killed") == (0, 1, False, 1, 8)
    with open_store(url, pool_max_size=3) as store:
        [info] = store.list(order="id")
        assert (info.messages, info.turns, info.last_seq) == (7, 1, 8)
        assert _state(url, "killed") == (7, 1, True, 8, 8)
        assert _listed(store) == _rebuilt(store)


def test_a_version_5_store_migrates_and_a_reader_lists_it_as_it_is(url: str) -> None:
    with open_store(url, pool_max_size=3) as store:
        _turn(store.get("a"), 0)
        _turn(store.get("b"), 1)
        store.get("b").append(Event.new("turn/start", TurnStart(), agent="bot"))
        store.get("b").append(Event.new("user/message", Message.user("cut"), agent="bot"))
    schema = url.split("schema=")[1]
    # Back to version 5: no catalog_seq, no search marks (b's row is not indexed, as version 5
    # left rows written with catalog=False).
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "ALTER TABLE {s}.sessions DROP COLUMN catalog_seq; DROP TABLE {s}.search_dirty; "
                "DELETE FROM {s}.schema_migrations WHERE version >= 6"
            ).format(s=sql.Identifier(schema))
        )
    with open_store(url, read_only=True, pool_max_size=3) as reader:
        assert [(i.id, i.messages) for i in reader.list(order="id")] == [("a", 2), ("b", 2)]
    with open_store(url, pool_max_size=3) as store:
        assert _state(url, "a") == (2, 1, True, 4, 4)
        assert _state(url, "b")[2:] == (False, 0, 6)  # type: ignore[index]
        assert [(i.id, i.messages) for i in store.list(order="id")] == [("a", 2), ("b", 3)]
        assert _listed(store) == _rebuilt(store)
    assert [m.version for m in MIGRATIONS][-1] == 7
