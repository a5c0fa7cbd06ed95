"""The PostgreSQL catalog and search against the memory store's (the reference), on the same
appended data; the migration that builds the catalog of a version 4 store; encrypted stores
keep no plaintext in the catalog's columns.

Needs a server: set ``AGENTSESSION_TEST_POSTGRES_DSN``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import sql

import agentsession as ags
from agentsession import BaseStore, open_store
from agentsession.backends.postgres.schema import MIGRATIONS
from agentsession.events import Usage

from .test_conformance_postgres import (
    DSN,
    SKIP_REASON,
    drop_schemas,
    new_schema_name,
    url_with_schema,
)

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not DSN, reason=SKIP_REASON)]

KEY = bytes(range(32))


@pytest.fixture
def schemas() -> Iterator[list[str]]:
    names: list[str] = []
    try:
        yield names
    finally:
        drop_schemas(names)


def pg_store(schemas: list[str], **options: Any) -> BaseStore:
    name = new_schema_name()
    schemas.append(name)
    options.setdefault("pool_max_size", 3)
    return open_store(url_with_schema(name), **options)


def fill(store: BaseStore) -> None:
    """The same sessions on any store (times from the store's clock: compared by order)."""
    store.set_prices({"gpt": {"input": 1.0, "output": 2.0}})
    for i in range(12):
        session = store.get(f"s:{i:02d}")
        agent = "bot" if i % 2 else "helper"
        with session.turn(agent=agent) as turn:
            turn.user(f"hello world number {i} about pandas and café")
            turn.assistant(f"answer {i} bamboo forest" + (" pandas" if i % 3 == 0 else ""))
        session.append(
            ags.Event.new(
                "usage", Usage(input_tokens=100 * i, output_tokens=10, model="gpt"), agent=agent
            )
        )
        if i % 4 == 0:
            session.update(
                title=f"Custom {i}",
                tags=["platinum", f"t{i % 3}"],
                tenant="acmecorp",
                user="ursula",
            )
        elif i % 4 == 1:
            session.update(tags=["t1"], tenant="globex")
    # A rewind: the first answer of s:05 is gone from the history.
    rewound = store.get("s:05")
    with rewound.turn(agent="bot") as turn:
        turn.user("second question on pandas")
    rewound.rewind(to_seq=2)
    # Many events in one batch.
    store.get("s:99").append_many(
        [ags.Event.new("user/message", ags.Message.user(f"batch pandas {n}")) for n in range(3)]
    )


def norm_info(info: Any) -> tuple[Any, ...]:
    return (
        info.id,
        info.last_seq,
        info.title,
        tuple(sorted(info.tags)),
        info.user,
        info.tenant,
        info.agents,
        info.status,
        info.messages,
        info.turns,
        info.usage.input_tokens,
        info.usage.output_tokens,
        round(info.usage.cost, 9),
    )


def norm_hits(hits: list[Any]) -> list[tuple[Any, ...]]:
    return sorted((h.session_id, h.seq, h.role, h.rewound, h.compacted) for h in hits)


WHERES: list[dict[str, Any] | None] = [
    None,
    {"tenant": "acmecorp"},
    {"tenant": ["acmecorp", "globex"]},
    {"tag": "platinum"},
    {"tags": ["platinum", "t0"]},
    {"tenant": "acmecorp", "tag": "platinum"},
    {"agent": "bot"},
    {"user": "ursula"},
    {"status": "idle"},
    {"id": ["s:01", "s:02"]},
    {"title": "custom"},
]


def listing(store: BaseStore, where: Any, order: str, limit: int) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    cursor = None
    while True:
        page = store.list(where=where, order=order, limit=limit, cursor=cursor)
        out += [norm_info(i) for i in page]
        cursor = page.next_cursor
        if cursor is None:
            return out


@pytest.mark.parametrize("encrypted", [False, True])
def test_same_answers_as_the_memory_store(schemas: list[str], encrypted: bool) -> None:
    options: dict[str, Any] = {"key": KEY} if encrypted else {}
    mem = open_store("memory:", **options)
    pg = pg_store(schemas, **options)
    with mem, pg:
        fill(mem)
        fill(pg)
        for where in WHERES:
            if encrypted and where and "title" in where:
                continue
            for order in ("updated", "created", "id"):
                for limit in (1, 5, 50):
                    assert listing(pg, where, order, limit) == listing(mem, where, order, limit), (
                        where,
                        order,
                        limit,
                    )
        for query in ("pandas", "hello pandas", "bamboo forest", "cafe", "nothing here"):
            for where in (None, {"tenant": "acmecorp"}, {"tag": "t1"}):
                assert norm_hits(list(pg.search(query, where=where, limit=100))) == norm_hits(
                    list(mem.search(query, where=where, limit=100))
                ), (query, where)
        # Paging through hits gives each once.
        seen: list[Any] = []
        cursor = None
        while True:
            page = pg.search("pandas", limit=2, cursor=cursor)
            seen += page
            cursor = page.next_cursor
            if cursor is None:
                break
        assert norm_hits(seen) == norm_hits(list(mem.search("pandas", limit=100)))
        assert [h.rank for h in seen] == sorted((h.rank for h in seen), reverse=True)
        assert any(h.rewound for h in seen)
        for group in ("tenant", "user", "agent", "day"):
            # (sorted here: an encrypted store orders tenant and user groups by sealed key)
            got = sorted(
                (t.key, t.sessions, t.calls, t.usage.input_tokens)
                for t in pg.totals(group_by=group)
            )
            want = sorted(
                (t.key, t.sessions, t.calls, t.usage.input_tokens)
                for t in mem.totals(group_by=group)
            )
            assert got == want, group
        # Delete and shred leave nothing behind in the index.
        assert pg.delete("s:03") and mem.delete("s:03")
        assert listing(pg, None, "id", 50) == listing(mem, None, "id", 50)
        if encrypted:
            pg.shred("s:04")
            mem.shred("s:04")
            assert listing(pg, None, "id", 50) == listing(mem, None, "id", 50)
            assert norm_hits(list(pg.search("pandas", limit=100))) == norm_hits(
                list(mem.search("pandas", limit=100))
            )


def test_snippets_mark_matches(schemas: list[str]) -> None:
    with pg_store(schemas) as store:
        fill(store)
        hits = store.search("bamboo forest", where={"tenant": "acmecorp"})
        assert hits and all("[bamboo]" in h.snippet and "[forest]" in h.snippet for h in hits)


def test_an_encrypted_store_keeps_no_plaintext_in_the_catalog(schemas: list[str]) -> None:
    with pg_store(schemas, key=KEY) as store:
        fill(store)
        schema = schemas[-1]
        with psycopg.connect(DSN) as conn:
            dump = ""
            for table in ("sessions", "documents", "usage"):
                rows = conn.execute(
                    sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, table))
                ).fetchall()
                dump += repr(rows)
        for word in (
            "pandas",
            "bamboo",
            "acmecorp",
            "globex",
            "platinum",
            "Custom",
            "hello",
            "ursula",
        ):
            assert word not in dump, word
        assert store.search("bamboo pandas")  # found through blind tokens
        assert [i.id for i in store.list(where={"tenant": "acmecorp", "tag": "platinum"})]


def test_a_language_stems_words(schemas: list[str]) -> None:
    with pg_store(schemas, search_language="english") as store:
        said = ags.Message.user("the runners were running")
        store.get("a").append(ags.Event.new("user/message", said))
        assert [h.seq for h in store.search("run")] == [1]
    with pytest.raises(ags.UsageError, match="search_language"):
        pg_store(schemas, search_language="no_such_language")


def test_catalog_false_leaves_rows_to_index_and_the_next_listing_builds_them(
    schemas: list[str],
) -> None:
    with pg_store(schemas, catalog=False) as store:
        fill(store)
        url = store.url
    with open_store("memory:") as mem, open_store(url) as store:
        fill(mem)
        assert listing(store, None, "id", 50) == listing(mem, None, "id", 50)
        assert norm_hits(list(store.search("pandas", limit=100))) == norm_hits(
            list(mem.search("pandas", limit=100))
        )


def test_a_version_4_store_migrates_and_lists_with_catalog_fields(schemas: list[str]) -> None:
    name = new_schema_name()
    schemas.append(name)
    url = url_with_schema(name)
    # A store made with version 4's DDL, then written by version 4's statements (the
    # catalog=False statements write the same columns plus indexed, absent in version 4).
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        conn.execute(
            sql.SQL(
                "CREATE TABLE {}.schema_migrations (version integer PRIMARY KEY, "
                "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            ).format(sql.Identifier(name))
        )
        from agentsession.backends.postgres.schema import _render

        for migration in MIGRATIONS[:4]:
            for statement in migration.statements:
                conn.execute(_render(statement, name))
            conn.execute(
                _render("INSERT INTO {s}.schema_migrations VALUES (%s, %s)", name),
                (migration.version, migration.name),
            )
    mem = open_store("memory:")
    fill(mem)
    with open_store(url, catalog=False) as old:
        fill(old)
        # Version 4 had no catalog: drop what versions 5 to 7 added, and go back to version 4.
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(
                sql.SQL(
                    "DROP TABLE {s}.usage, {s}.documents, {s}.search_dirty; "
                    "DELETE FROM {s}.schema_migrations WHERE version >= 5"
                ).format(s=sql.Identifier(name))
            )
            cols = [
                "title",
                "title_set",
                "tags",
                "user",
                "tenant",
                "agents",
                "status",
                "messages",
                "turns",
                "input_tokens",
                "output_tokens",
                "cache_read_tokens",
                "cache_write_tokens",
                "cost",
                "compacted_before",
                "indexed",
                "catalog_seq",
            ]
            conn.execute(
                sql.SQL("DROP INDEX {}").format(sql.Identifier(name, "sessions_created_at_idx"))
            )
            conn.execute(
                sql.SQL("ALTER TABLE {}.sessions ").format(sql.Identifier(name))
                + sql.SQL(", ").join(
                    sql.SQL("DROP COLUMN {}").format(sql.Identifier(c)) for c in cols
                )
            )
    with open_store(url) as store:
        with psycopg.connect(DSN) as conn:
            versions = conn.execute(
                sql.SQL("SELECT max(version) FROM {}.schema_migrations").format(
                    sql.Identifier(name)
                )
            ).fetchone()
        assert versions == (MIGRATIONS[-1].version,)
        assert listing(store, None, "updated", 50) == listing(mem, None, "updated", 50)
        assert listing(store, {"tenant": "acmecorp"}, "updated", 3) == listing(
            mem, {"tenant": "acmecorp"}, "updated", 3
        )
        assert norm_hits(list(store.search("pandas", limit=100))) == norm_hits(
            list(mem.search("pandas", limit=100))
        )
        # Built once: every row is indexed now.
        with psycopg.connect(DSN) as conn:
            left = conn.execute(
                sql.SQL("SELECT count(*) FROM {}.sessions WHERE NOT indexed").format(
                    sql.Identifier(name)
                )
            ).fetchone()
        assert left == (0,)


def test_the_async_api_keeps_the_catalog(schemas: list[str]) -> None:
    from agentsession import aio

    name = new_schema_name()
    schemas.append(name)

    async def run() -> None:
        async with aio.open_async_store(url_with_schema(name), pool_max_size=3) as store:
            session = await store.get("async:1")
            await session.append(ags.Event.new("user/message", ags.Message.user("async pandas")))
            await session.append(ags.Event.new("assistant/message", ags.Message.assistant("ok")))
            await session.append_many(
                [
                    ags.Event.new("user/message", ags.Message.user(f"more pandas {n}"))
                    for n in range(2)
                ]
            )

    asyncio.run(run())
    with open_store(url_with_schema(name)) as store:
        [info] = store.list()
        assert (info.id, info.messages, info.title, info.last_seq) == (
            "async:1",
            4,
            "async pandas",
            4,
        )
        assert [h.seq for h in store.search("pandas", limit=10)] == [1, 3, 4] or sorted(
            h.seq for h in store.search("pandas", limit=10)
        ) == [1, 3, 4]


def test_update_and_reindex(schemas: list[str]) -> None:
    with pg_store(schemas) as store, open_store("memory:") as mem:
        for s in (store, mem):
            fill(s)
            s.get("s:02").update(title="", tags=["x"], user="someone")
            s.get("s:07").update(title="Renamed")
        assert listing(store, None, "id", 50) == listing(mem, None, "id", 50)
        assert store.reindex() == mem.reindex()
        assert listing(store, None, "id", 50) == listing(mem, None, "id", 50)
        since = dt.date.today() - dt.timedelta(days=1)
        assert [t.key for t in store.totals(group_by="day", since=since)] == [
            t.key for t in mem.totals(group_by="day", since=since)
        ]


def _document_words_reference(words: list[str]) -> str:
    """The tsvector literal, one word at a time (the definition document_words keeps)."""
    from agentsession.backends.postgres import index as pg_index

    positions: dict[str, list[int]] = {}
    size = 0
    for n, word in enumerate(words, start=1):
        found = positions.get(word)
        if found is None:
            length = len(word.encode("utf-8", "surrogatepass"))
            if length > pg_index.MAX_LEXEME_BYTES:
                continue
            size += length + 8
            if size > pg_index.MAX_WORDS_BYTES:
                break
            found = positions[word] = []
        if len(found) < 256:
            found.append(min(n, 16383))
    return " ".join(
        pg_index._quoted(w) + ":" + ",".join(map(str, dict.fromkeys(p)))
        for w, p in positions.items()
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "b", "c'd", "é", "x" * 3000]), max_size=400),
    st.integers(min_value=0, max_value=20000),
)
def test_document_words_match_their_definition(words: list[str], pad: int) -> None:
    from agentsession.backends.postgres.index import document_words

    words = ["w"] * pad + words  # positions past the largest a tsvector keeps
    assert document_words(words, None) == _document_words_reference(words)
