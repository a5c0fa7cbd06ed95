"""``store.stats()``: a store's and a session's counts, on every backend."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

import agentsession as ags
from agentsession.aio import open_async_store
from agentsession.codec import encode
from agentsession.errors import SessionNotFound, UsageError
from agentsession.events import Event, TurnStart
from agentsession.stats import SessionStats, StoreStats

DSN = os.environ.get("AGENTSESSION_TEST_POSTGRES_DSN", "")


@pytest.fixture(params=["memory", "jsonl", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """``(name, url)`` of an empty store of each backend (PostgreSQL in a schema of its own,
    dropped afterwards)."""
    name: str = request.param
    if name != "postgres":
        yield name, {
            "memory": "memory:",
            "jsonl": str(tmp_path / "store"),
            "sqlite": f"sqlite:///{tmp_path}/s.db",
        }[name]
        return
    if not DSN:
        pytest.skip(
            "set AGENTSESSION_TEST_POSTGRES_DSN (for example "
            "postgresql://postgres@127.0.0.1:5432/test) to run the PostgreSQL tests"
        )
    schema = "t_" + uuid.uuid4().hex[:16]
    parts = urlsplit(DSN)
    query = "&".join(q for q in (parts.query, f"schema={schema}") if q)
    try:
        yield name, urlunsplit(parts._replace(query=query))
    finally:
        import psycopg
        from psycopg import sql

        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def fill(store: ags.BaseStore) -> None:
    """``a``: one whole turn with a tool call, then a turn a crash cut off (8 events);
    ``b``: one user message."""
    a = store.get("a")
    with a.turn() as turn, turn.step() as step:  # turn/start, user, step/start ... turn/end
        turn.user("read a.py")
        step.assistant("reading", tool_calls=[ags.ToolCall("c1", "read", {"path": "a.py"})])
        step.tool_result("c1", "read", "print(1)")
    a.append(Event.new("turn/start", TurnStart()))  # never ended: incomplete
    store.get("b").append(Event.new("user/message", ags.Message.user("hi")))


def test_an_empty_store_counts_nothing(backend: tuple[str, str]) -> None:
    name, url = backend
    with ags.open_store(url) as store:
        stats = store.stats()
        assert isinstance(stats, StoreStats)
        assert (stats.sessions, stats.events) == (0, 0)
        if name == "sqlite":
            assert stats.bytes is not None and stats.bytes > 0  # the database file
        else:
            assert stats.bytes == 0


def test_store_stats_count_sessions_events_and_bytes_from_the_listing(
    backend: tuple[str, str],
) -> None:
    name, url = backend
    with ags.open_store(url) as store:
        fill(store)
        a_events = store.get("a").latest_seq
        stats = store.stats()
        assert (stats.sessions, stats.events) == (2, a_events + 1)
        if name == "jsonl":
            assert stats.bytes == sum(info.size for info in store.list()) > 0
        elif name == "sqlite":
            path = store.url.removeprefix("sqlite:///")
            on_disk = sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
            assert stats.bytes == on_disk > 0
        else:
            assert stats.bytes is None  # memory and PostgreSQL keep no size


def test_session_stats_count_events_turns_messages_and_incomplete_turns(
    backend: tuple[str, str],
) -> None:
    name, url = backend
    with ags.open_store(url) as store:
        fill(store)
        events = store.get("a").read()
        stats = store.stats("a")
        assert isinstance(stats, SessionStats)
        assert stats.session_id == "a"
        assert stats.events == len(events)
        assert stats.turns == 2
        assert stats.message_events == 2  # the user's message and the assistant's
        assert stats.history_messages == len(store.get("a").messages()) == 3
        assert stats.incomplete_turns == 1
        if name == "jsonl":
            assert stats.bytes == next(i.size for i in store.list() if i.id == "a") > 0
        else:
            assert stats.bytes is None
        assert store.stats("b").incomplete_turns == 0


def test_stats_of_a_session_without_events_raise_not_found(backend: tuple[str, str]) -> None:
    _, url = backend
    with ags.open_store(url) as store:
        fill(store)
        with pytest.raises(SessionNotFound, match="no session 'nope'"):
            store.stats("nope")
        with pytest.raises(UsageError):
            store.stats("")


def test_stats_encode_as_the_command_line_prints_them() -> None:
    """``agentsession stats --json`` prints these structs: the keys and their order are its
    output format."""
    with ags.open_store("memory:") as store:
        fill(store)
        assert list(json.loads(encode(store.stats()))) == ["sessions", "events", "bytes"]
        assert list(json.loads(encode(store.stats("a")))) == [
            "session_id",
            "events",
            "turns",
            "message_events",
            "history_messages",
            "incomplete_turns",
            "bytes",
        ]


def test_a_closed_store_refuses_stats() -> None:
    store = ags.open_store("memory:")
    store.close()
    with pytest.raises(UsageError, match="closed"):
        store.stats()


def test_the_async_store_reports_the_same_stats(tmp_path: Path) -> None:
    import asyncio

    async def main() -> tuple[StoreStats, SessionStats]:
        async with open_async_store(tmp_path / "s") as store:
            fill(store.sync)
            return await store.stats(), await store.stats("a")

    store_stats, session_stats = asyncio.run(main())
    with ags.open_store(tmp_path / "s") as store:
        assert (store_stats, session_stats) == (store.stats(), store.stats("a"))
