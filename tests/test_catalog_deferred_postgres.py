"""The PostgreSQL store's catalog taken at turn boundaries (schema version 6,
``sessions.catalog_seq``): appends inside a turn mark the row not indexed, the turn's end
hands it the whole turn where it continues ``catalog_seq``, and reading the catalog catches up
the rows not indexed from their logs, so what is listed always matches a rebuild.

Its search documents indexed apart from the appends (schema version 7): an append only marks
its session in ``search_dirty`` (in its own statement), a search first indexes every marked
session's documents from its log, and a store opened read-only searches what is indexed. What
a search finds never depends on when the documents were indexed (checked against a rebuild),
and a version 6 schema is migrated (and read as it is when read-only).

Needs a server: set ``AGENTSESSION_TEST_POSTGRES_DSN``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from agentsession import Event, Message, StorageError, aio, open_store
from agentsession.backends.postgres.index import PostgresIndex
from agentsession.backends.postgres.schema import MIGRATIONS
from agentsession.events import TurnEnd, TurnStart

from .test_catalog_deferred import _listed, _rebuilt, _turn, kill_writer_mid_turn, run_then_kill
from .test_catalog_search_deferred import _INDEXER, check_branch_documents
from .test_conformance_postgres import DSN, SKIP_REASON, fresh_schema_url

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not DSN, reason=SKIP_REASON)]


@pytest.fixture
def url() -> Iterator[str]:
    with fresh_schema_url() as fresh:
        yield fresh


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


# -- search documents indexed apart (schema version 7) ----------------------------------------


def _sql(url: str, query: str, *params: Any) -> list[Any]:
    schema = url.split("schema=")[1]
    with psycopg.connect(DSN, autocommit=True) as conn:
        cursor = conn.execute(sql.SQL(query).format(s=sql.Identifier(schema)), params)
        return cursor.fetchall() if cursor.description else []


def _marks(url: str) -> list[tuple[str, int]]:
    return [tuple(r) for r in _sql(url, "SELECT * FROM {s}.search_dirty ORDER BY 1")]


def _documents(url: str) -> int:
    return int(_sql(url, "SELECT count(*) FROM {s}.documents")[0][0])


def _hits(store: Any, query: str) -> list[tuple[Any, ...]]:
    return sorted(
        (h.session_id, h.seq, h.role, h.rewound, h.compacted, h.snippet)
        for h in store.search(query, limit=1000)
    )


def test_appends_write_no_document_and_a_search_indexes_each_once(url: str) -> None:
    with open_store(url, pool_max_size=3) as store:
        for n in range(3):
            _turn(store.get(f"s{n}"), n)
        assert _documents(url) == 0
        assert _marks(url) == [("s0", 0), ("s1", 0), ("s2", 0)]
        assert len(store.search("pandas")) == 3
        assert _documents(url) == 6 and _marks(url) == []
        assert store.index_documents() == 0
        _turn(store.get("s0"), 9)
        assert _marks(url) == [("s0", 4)]
        assert store.index_documents() == 1
        assert _documents(url) == 8 and _marks(url) == []
        expected = _hits(store, "pandas")
        store.reindex()  # a rebuild changes nothing either
        assert _documents(url) == 8 and _hits(store, "pandas") == expected


def test_appends_inside_a_turn_mark_too(url: str) -> None:
    with open_store(url, pool_max_size=3) as store:
        session = store.get("a")
        _turn(session, 0)
        store.index_documents()
        session.append(Event.new("turn/start", TurnStart(), agent="bot"))
        store.index_documents()  # the turn's start alone: nothing left to index
        assert _marks(url) == []
        session.append(Event.new("user/message", Message.user("inside words"), agent="bot"))
        assert _marks(url) == [("a", 5)]
        session.append(Event.new("turn/end", TurnEnd(steps=0), agent="bot"))
        assert [(h.session_id, h.seq) for h in store.search("inside")] == [("a", 6)]


def test_a_search_finds_what_a_rebuild_finds_after_rewinds_and_two_writers(url: str) -> None:
    one = open_store(url, pool_max_size=3)
    two = open_store(url, pool_max_size=3)
    try:
        a, b = one.get("s"), two.get("s")
        _turn(a, 0)
        one.search("pandas")  # the first turn indexed
        _turn(b, 1)
        a.append(Event.new("user/message", Message.user("café olé"), agent="bot"))
        a.rewind(to_seq=4)  # the second turn and the message are rewound
        _turn(two.get("t"), 2)
        queries = ("pandas", "answer", "cafe", "ole 1", "dataframes")
        expected = {q: _hits(two, q) for q in queries}
        assert [h.rewound for h in two.search("answer 1")] == [True]
        assert {q: _hits(one, q) for q in queries} == expected
        one.reindex()
        assert {q: _hits(two, q) for q in queries} == expected
    finally:
        one.close()
        two.close()


def test_a_read_only_store_finds_documents_not_indexed_yet_and_writes_nothing(url: str) -> None:
    with open_store(url, pool_max_size=3) as store:
        _turn(store.get("a"), 0)
        store.index_documents()
        _turn(store.get("b"), 1)
        _turn(store.get("a"), 2)
        store.get("c").append(Event.new("user/message", Message.user("pandas and more")))
    marks = _marks(url)
    assert marks == [("a", 4), ("b", 0), ("c", 0)] and _documents(url) == 2
    queries = ("pandas", "answer 2", "question", "more")
    with open_store(url, read_only=True, pool_max_size=3) as reader:
        seen = {q: _hits(reader, q) for q in queries}
        assert [h.session_id for h in reader.search("answer 2")] == ["a"]
        assert len(reader.search("pandas", limit=100)) == 4
        page = reader.search("pandas", limit=3)
        rest = reader.search("pandas", limit=100, cursor=page.next_cursor)
        assert {(h.session_id, h.seq) for h in page} | {(h.session_id, h.seq) for h in rest} == {
            ("a", 2), ("a", 6), ("b", 2), ("c", 1)
        }
        assert len(page) + len(rest) == 4
        assert [h.session_id for h in reader.search("pandas", where={"id": ["b"]})] == ["b"]
        assert reader.index_documents() == 0
    assert _marks(url) == marks and _documents(url) == 2  # nothing written
    with open_store(url, pool_max_size=3) as store:
        assert {q: _hits(store, q) for q in queries} == seen  # as an index run writes them


def test_a_branch_documents_carry_the_seqs_its_reader_presents(url: str) -> None:
    with open_store(url, pool_max_size=3) as store:
        check_branch_documents(store)


def test_an_encrypted_store_indexes_blind_tokens_only(url: str) -> None:
    with open_store(url, key=bytes(range(32)), pool_max_size=3) as store:
        _turn(store.get("secret"), 0)
        with open_store(url, key=bytes(range(32)), read_only=True, pool_max_size=3) as reader:
            [hit] = reader.search("question pandas")  # from the log: nothing indexed yet
            assert hit.snippet == "[question] 0 about [pandas]"
        [hit] = store.search("question pandas")
        assert hit.snippet == "[question] 0 about [pandas]"
    rows = _sql(url, "SELECT text, words::text FROM {s}.documents")
    assert len(rows) == 2
    assert all(text == "" and "pandas" not in words for text, words in rows)


def test_an_index_run_that_fails_midway_leaves_its_marks(url: str, monkeypatch: Any) -> None:
    with open_store(url, pool_max_size=3) as store:
        for n in range(5):
            _turn(store.get(f"s{n}"), n)
        calls = []
        real = PostgresIndex._index_marked

        def failing(self: Any, *args: Any) -> int:
            calls.append(1)
            if len(calls) == 3:
                raise StorageError("the server went away")
            return real(self, *args)

        monkeypatch.setattr(PostgresIndex, "_index_marked", failing)
        with pytest.raises(StorageError, match="went away"):
            store.index_documents()
        monkeypatch.setattr(PostgresIndex, "_index_marked", real)
        assert _documents(url) == 4 and [m[0] for m in _marks(url)] == ["s2", "s3", "s4"]
        assert len(store.search("pandas", limit=100)) == 5
        assert _documents(url) == 10 and _marks(url) == []


def test_a_deleted_session_leaves_no_mark(url: str) -> None:
    with open_store(url, pool_max_size=3) as store:
        _turn(store.get("gone"), 0)
        assert _marks(url) == [("gone", 0)]
        store.delete("gone")
        assert _marks(url) == [] and store.search("pandas").items == []


def test_the_async_api_marks_as_the_sync_one_does(url: str) -> None:
    import asyncio

    async def write() -> None:
        async with aio.open_async_store(url, pool_max_size=3) as store:
            session = await store.get("a")
            await session.append(Event.new("user/message", Message.user("async pandas")))
            await session.append(Event.new("assistant/message", Message.assistant("async reply")))

    asyncio.run(write())
    assert _marks(url) == [("a", 0)] and _documents(url) == 0
    with open_store(url, pool_max_size=3) as store:
        assert [(h.session_id, h.seq) for h in store.search("async")] == [("a", 1), ("a", 2)]


def test_a_version_6_schema_is_read_as_it_is_and_migrated(url: str) -> None:
    with open_store(url, pool_max_size=3) as store:
        _turn(store.get("done"), 0)
        inside = store.get("inside")
        inside.append(Event.new("turn/start", TurnStart(), agent="bot"))
        store.index_documents()  # what version 6 wrote with the rows at the turn boundaries
        inside.append(Event.new("user/message", Message.user("mid turn pandas"), agent="bot"))
    # Back to version 6: no search marks ("inside" is behind its row's catalog_seq, with no
    # documents after it, as version 6 left a session mid-turn).
    _sql(url, "DROP TABLE {s}.search_dirty; DELETE FROM {s}.schema_migrations WHERE version = 7")
    assert _sql(url, "SELECT indexed, catalog_seq FROM {s}.sessions WHERE id = 'inside'") == [
        (False, 1)
    ]
    with open_store(url, read_only=True, pool_max_size=3) as reader:
        assert [h.session_id for h in reader.search("pandas")] == ["done"]  # as it is
        assert [i.id for i in reader.list(order="id")] == ["done", "inside"]
    assert _sql(url, "SELECT max(version) FROM {s}.schema_migrations") == [(6,)]
    with open_store(url, pool_max_size=3) as store:
        assert _sql(url, "SELECT max(version) FROM {s}.schema_migrations") == [(7,)]
        assert _marks(url) == [("inside", 1)]  # marked from its row's catalog_seq
        assert sorted(h.session_id for h in store.search("pandas")) == ["done", "inside"]
        store.get("inside").append(Event.new("turn/end", TurnEnd(steps=0), agent="bot"))
        expected = _hits(store, "pandas")
        store.reindex()
        assert _hits(store, "pandas") == expected


def test_the_filter_indexes_hold_only_rows_with_a_value_and_serve_the_filters(url: str) -> None:
    with open_store(url, pool_max_size=3) as store:
        for n in range(40):
            store.get(f"s{n}").append(Event.new("user/message", Message.user("hi")))
        store.get("s7").update(tenant="acme", user="ada", tags=["x"])
        store.get("s7").append(Event.new("assistant/message", Message.assistant("hi"), agent="bot"))
        for where in ({"tenant": "acme"}, {"user": "ada"}, {"tags": ["x"]}, {"agent": "bot"}):
            assert [i.id for i in store.list(where=where)] == ["s7"]
        assert len(store.list(where={"tenant": ""}, limit=100)) == 39
    schema = url.split("schema=")[1]
    predicates = _sql(
        url,
        "SELECT c.relname, pg_get_expr(i.indpred, i.indrelid) FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname IN ('sessions_tenant_idx', 'sessions_user_idx', "
        "'sessions_tags_idx', 'sessions_agents_idx') ORDER BY 1",
        schema,
    )
    assert predicates == [
        ("sessions_agents_idx", "(agents <> '{}'::text[])"),
        ("sessions_tags_idx", "(tags <> '{}'::text[])"),
        ("sessions_tenant_idx", "(tenant <> ''::text)"),
        ("sessions_user_idx", "(\"user\" <> ''::text)"),
    ]
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")
        for condition, index in (
            ("tenant = ANY(ARRAY['acme']) AND tenant <> ''", "sessions_tenant_idx"),
            ("\"user\" = ANY(ARRAY['ada']) AND \"user\" <> ''", "sessions_user_idx"),
            ("tags @> ARRAY['x'] AND tags <> '{}'", "sessions_tags_idx"),
            ("agents && ARRAY['bot'] AND agents <> '{}'", "sessions_agents_idx"),
        ):
            plan = conn.execute(
                sql.SQL("EXPLAIN SELECT id FROM {}.sessions WHERE ").format(sql.Identifier(schema))
                + sql.SQL(condition)  # type: ignore[arg-type]
            ).fetchall()
            assert index in " ".join(r[0] for r in plan)


def test_indexing_while_another_store_appends_loses_no_document(url: str) -> None:
    import threading

    writer = open_store(url, pool_max_size=3)
    indexer = open_store(url, pool_max_size=3)
    done = threading.Event()
    failures: list[BaseException] = []

    def write() -> None:
        try:
            for n in range(40):
                session = writer.get(f"s{n % 4}")
                session.append(Event.new("user/message", Message.user(f"needle {n} hay")))
                session.append(Event.new("assistant/message", Message.assistant(f"reply {n}")))
        except BaseException as exc:  # reported below
            failures.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=write)
    try:
        thread.start()
        runs = 0
        while not done.is_set() or runs == 0:
            indexer.index_documents()
            runs += 1
        thread.join()
        assert failures == []
        found = sorted((h.session_id, h.seq) for h in indexer.search("needle", limit=1000))
        assert len(found) == 40 and _marks(url) == []
        indexer.reindex()
        assert sorted((h.session_id, h.seq) for h in indexer.search("needle", limit=1000)) == found
        assert _documents(url) == 80
    finally:
        writer.close()
        indexer.close()


def test_a_process_killed_while_indexing_loses_and_doubles_nothing(url: str) -> None:
    count = 300
    run_then_kill(_INDEXER, url, str(count), timeout=120)  # wherever its index run is
    with open_store(url, pool_max_size=3) as store:
        hits = store.search("needle", limit=10_000)
        assert sorted(h.session_id for h in hits) == sorted(f"s{n}" for n in range(count))
        assert len(store.search("hay", limit=10_000)) == 2 * count
    assert _documents(url) == 2 * count and _marks(url) == []
