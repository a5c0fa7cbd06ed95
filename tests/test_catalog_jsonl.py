"""The JSONL directory store's catalog: a SQLite sidecar (``.meta/catalog.sqlite``) caught up
from the change journal (``.meta/catalog.journal``). Its answers equal the memory store's on
the same data; it counts what other processes append, also a writer killed mid-loop; it is
made again when missing or unreadable, compares every log when the journal is gone, holds no
plaintext on an encrypted store, and is owner-only."""

from __future__ import annotations

import datetime as dt
import os
import random
import signal
import sqlite3
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentsession import BaseStore, Event, Message, ToolCall, ToolResult, open_store
from agentsession.backends.jsonl import JsonlFileStore
from agentsession.backends.jsonl.journal import JOURNAL_NAME
from agentsession.backends.jsonl.sidecar import SIDECAR_NAME
from agentsession.errors import UsageError
from agentsession.events import TurnEnd, TurnStart, Usage
from agentsession.testing.catalog import CatalogConformance

UTC = dt.timezone.utc
BASE = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
WORDS = ["brown", "fox", "lazy", "dog", "quick", "river", "stone", "cloud", "amber", "déjà"]
SRC = str(Path(__file__).resolve().parents[1] / "src")


def _events(rng: random.Random, n: int, start: dt.datetime) -> list[Event]:
    out: list[Event] = []
    for i in range(n):
        when = start + dt.timedelta(seconds=i)
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5)))
        kind = rng.random()
        agent = rng.choice(["coder", "planner", ""])
        if kind < 0.35:
            out.append(Event.new("user/message", Message.user(text), time=when, agent=agent))
        elif kind < 0.6:
            out.append(
                Event.new("assistant/message", Message.assistant(text), time=when, agent=agent)
            )
        elif kind < 0.7:
            call = ToolCall(f"c{i}", "grep", {"pattern": text})
            out.append(
                Event.new("assistant/message", Message.assistant(tool_calls=[call]), time=when)
            )
            out.append(Event.new("tool/result", ToolResult(f"c{i}", "grep", text), time=when))
        elif kind < 0.8:
            out.append(Event.new("turn/start", TurnStart(), time=when, agent=agent))
        elif kind < 0.9:
            out.append(Event.new("turn/end", TurnEnd(steps=1), time=when, agent=agent))
        else:
            usage = Usage(input_tokens=rng.randint(1, 99), output_tokens=rng.randint(1, 99))
            out.append(Event.new("usage", usage, time=when, agent=agent))
    return out


def _fill(stores: list[BaseStore], seed: int, sessions: int = 30) -> None:
    """The same appends, updates and deletes on every store."""
    rng = random.Random(seed)
    plan: list[tuple[str, Any]] = []
    for k in range(sessions):
        sid = f"s{k:03d}"
        start = BASE + dt.timedelta(minutes=rng.randint(0, 500))
        for batch in range(rng.randint(1, 3)):
            plan.append(("append", (sid, _events(rng, rng.randint(1, 6), start))))
            start += dt.timedelta(minutes=batch + 1)
        if rng.random() < 0.4:
            plan.append(
                (
                    "update",
                    (
                        sid,
                        {
                            "title": f"title {k}",
                            "tags": rng.sample(["red", "blue", "green"], rng.randint(0, 2)),
                            "tenant": rng.choice(["acme", "globex", ""]),
                            "user": rng.choice(["ann", "bob"]),
                        },
                    ),
                )
            )
    victims = rng.sample(range(sessions), 3)
    for k in victims:
        plan.append(("delete", f"s{k:03d}"))
    for store in stores:
        for op, arg in plan:
            if op == "append":
                sid, events = arg
                session = store.get(sid)
                if len(events) == 1:
                    session.append(events[0])
                else:
                    session.append_many(events)
            elif op == "update":
                store.get(arg[0]).update(**arg[1])
            else:
                store.delete(arg)


def _listing(store: BaseStore, **kwargs: Any) -> list[tuple[Any, ...]]:
    out = []
    cursor = None
    while True:
        page = store.list(limit=7, cursor=cursor, **kwargs)
        out += [
            (i.id, i.updated_at, i.created_at, i.last_seq, i.title, i.tags, i.user, i.tenant,
             i.agents, i.status, i.messages, i.turns, i.usage)
            for i in page
        ]
        cursor = page.next_cursor
        if cursor is None:
            return out


def _hits(store: BaseStore, query: str) -> list[tuple[str, int, str, bool, bool]]:
    return sorted(
        (h.session_id, h.seq, h.role, h.rewound, h.compacted)
        for h in store.search(query, limit=1000)
    )


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[BaseStore, BaseStore]]:
    memory = open_store("memory:")
    jsonl = open_store(str(tmp_path / "store"))
    try:
        yield memory, jsonl
    finally:
        memory.close()
        jsonl.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_answers_equal_the_memory_store(pair: tuple[BaseStore, BaseStore], seed: int) -> None:
    memory, jsonl = pair
    _fill([memory, jsonl], seed)
    for order in ("updated", "created", "id"):
        assert _listing(jsonl, order=order) == _listing(memory, order=order)
    for where in ({"tenant": "acme"}, {"tag": "red"}, {"tenant": "acme", "tag": "blue"},
                  {"agent": "coder"}, {"status": "idle"}, {"user": "bob"}):
        assert _listing(jsonl, where=where) == _listing(memory, where=where), where
    for query in ("brown", "brown fox", "lazy dog", "deja", "grep"):
        assert _hits(jsonl, query) == _hits(memory, query), query
    for group in ("tenant", "user", "agent", "day"):
        assert jsonl.totals(group_by=group) == memory.totals(group_by=group), group


def test_another_store_object_sees_appends_and_updates(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    writer, reader = open_store(root), open_store(root)
    try:
        assert list(reader.list()) == []
        writer.get("a").append(Event.new("user/message", Message.user("first words")))
        writer.get("b").append(Event.new("user/message", Message.user("other words")))
        assert [i.id for i in reader.list(order="id")] == ["a", "b"]
        writer.get("a").append(Event.new("assistant/message", Message.assistant("reply")))
        writer.get("a").update(title="A", tags=["t"])
        (row,) = reader.list(where={"tag": "t"})
        assert (row.id, row.messages, row.title) == ("a", 2, "A")
        assert sorted(h.session_id for h in reader.search("words")) == ["a", "b"]
        writer.delete("b")
        assert [i.id for i in reader.list()] == ["a"]
        assert reader.search("other").items == []
    finally:
        writer.close()
        reader.close()


_WRITER = textwrap.dedent(
    """
    import sys
    from agentsession import Event, Message, open_store
    store = open_store(sys.argv[1])
    name = sys.argv[2]
    i = 0
    while True:
        sid = f"{name}-{i % 5}"
        store.get(sid).append(Event.new("user/message", Message.user(f"note {i}")))
        print(sid, flush=True)
        i += 1
    """
)


def test_a_writer_killed_mid_loop_loses_no_acknowledged_event(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    env = {**os.environ, "PYTHONPATH": SRC}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, root, f"w{n}"],
            stdout=subprocess.PIPE,
            env=env,
        )
        for n in range(3)
    ]
    acknowledged: dict[str, int] = {}
    try:
        for proc in procs:
            assert proc.stdout is not None
            for _ in range(150):  # appends acknowledged before the kill
                line = proc.stdout.readline().decode().strip()
                acknowledged[line] = acknowledged.get(line, 0) + 1
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
        for proc in procs:
            assert proc.stdout is not None
            rest = proc.stdout.read().decode().split()
            for line in rest:
                acknowledged[line] = acknowledged.get(line, 0) + 1
            proc.wait()
    # A torn journal entry (a write cut short) spoils only itself.
    with open(os.path.join(root, ".meta", JOURNAL_NAME), "ab") as f:
        f.write(b'\n"w0-')
    store = open_store(root)
    try:
        store.get("late").append(Event.new("user/message", Message.user("after the tear")))
        rows = {i.id: i for i in store.list(limit=None)}
        for sid, count in acknowledged.items():
            assert rows[sid].messages >= count, sid
            assert rows[sid].messages == rows[sid].last_seq == store.get(sid).latest_seq
        assert rows["late"].messages == 1
    finally:
        store.close()


def test_the_sidecar_is_owner_only_and_made_again_when_missing_or_unreadable(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    store = open_store(str(root))
    try:
        for k in range(3):
            store.get(f"s{k}").append(Event.new("user/message", Message.user(f"hello {k}")))
        store.get("s1").update(title="one")
        assert len(store.list()) == 3
        meta = root / ".meta"
        for name in os.listdir(meta):
            if name.startswith("catalog."):
                assert stat.S_IMODE(os.stat(meta / name).st_mode) == 0o600, name
    finally:
        store.close()
    for damage in ("remove", "garble"):
        sidecar = root / ".meta" / SIDECAR_NAME
        for suffix in ("-wal", "-shm"):
            (root / ".meta" / (SIDECAR_NAME + suffix)).unlink(missing_ok=True)
        if damage == "remove":
            sidecar.unlink()
        else:
            sidecar.write_bytes(b"not a database at all" * 100)
        store = open_store(str(root))
        try:
            rows = {i.id: i for i in store.list()}
            assert sorted(rows) == ["s0", "s1", "s2"], damage
            assert rows["s1"].title == "one"
            assert [h.session_id for h in store.search("hello 2")] == ["s2"]
        finally:
            store.close()


def test_a_missing_journal_makes_the_next_sync_compare_every_log(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    store = open_store(root)
    try:
        store.get("a").append(Event.new("user/message", Message.user("one")))
        assert len(store.list()) == 1
        blind = open_store(root, catalog=False)  # writes no journal
        try:
            blind.get("a").append(Event.new("user/message", Message.user("two")))
            blind.get("b").append(Event.new("user/message", Message.user("three")))
        finally:
            blind.close()
        assert [i.id for i in store.list()] == ["a"]  # behind: no journal entry
        os.unlink(os.path.join(root, ".meta", JOURNAL_NAME))
        rows = {i.id: i.messages for i in store.list()}
        assert rows == {"a": 2, "b": 1}
    finally:
        store.close()


def test_reindex_catches_up_with_logs_another_program_wrote(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    store = open_store(root)
    try:
        store.get("a").append(Event.new("user/message", Message.user("one")))
        assert store.list()[0].messages == 1
        blind = open_store(root, catalog=False)
        try:
            blind.get("a").append(Event.new("user/message", Message.user("two")))
        finally:
            blind.close()
        assert store.list()[0].messages == 1
        assert store.reindex() == 1
        assert store.list()[0].messages == 2
        assert [h.seq for h in store.search("two")] == [2]
    finally:
        store.close()


def test_catalog_false_writes_no_journal_and_keeps_no_index(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = open_store(str(root), catalog=False)
    try:
        store.get("a").append(Event.new("user/message", Message.user("one")))
        assert [i.id for i in store.list()] == ["a"]
        with pytest.raises(UsageError, match="catalog"):
            store.list(where={"tenant": "x"})
    finally:
        store.close()
    assert not (root / ".meta" / JOURNAL_NAME).exists()
    assert not (root / ".meta" / SIDECAR_NAME).exists()


def test_the_single_file_store_keeps_no_index(tmp_path: Path) -> None:
    store = JsonlFileStore(tmp_path / "one.jsonl")
    try:
        store.session.append(Event.new("user/message", Message.user("one")))
        with pytest.raises(UsageError, match="keeps no catalog index"):
            store.list(where={"tenant": "x"})
    finally:
        store.close()
    assert not (tmp_path / ".meta").exists()


def test_an_encrypted_stores_sidecar_holds_no_plaintext(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = open_store(str(root), passphrase="correct horse")
    try:
        session = store.get("secret-session")
        session.append(Event.new("user/message", Message.user("the xylophone zebra quartz")))
        session.update(title="classified title", tenant="hush-tenant", tags=["covert"])
        assert [h.seq for h in store.search("xylophone zebra")] == [1]
        (row,) = store.list(where={"tenant": "hush-tenant", "tag": "covert"})
        assert row.title == "classified title"
        store.shred("secret-session")
        assert store.search("xylophone").items == []
        assert store.list()[0].status == "shredded"
    finally:
        store.close()
    data = b"".join(
        (root / ".meta" / name).read_bytes()
        for name in os.listdir(root / ".meta")
        if name.startswith(SIDECAR_NAME)
    )
    for secret in (b"xylophone", b"zebra", b"quartz", b"classified", b"hush", b"covert"):
        assert secret not in data, secret


def test_the_sidecar_records_its_schema_version(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = open_store(str(root))
    try:
        store.get("a").append(Event.new("user/message", Message.user("one")))
        store.list()
    finally:
        store.close()
    with sqlite3.connect(root / ".meta" / SIDECAR_NAME) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
        conn.execute("PRAGMA user_version = 99")
    store = open_store(str(root))
    try:
        with pytest.raises(UsageError, match="newer agentsession"):
            store.list()
    finally:
        store.close()


def test_a_log_that_cannot_be_read_is_still_listed_and_the_others_indexed(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = open_store(str(root))
    try:
        store.get("good").append(Event.new("user/message", Message.user("fine words")))
        store.get("bad").append(Event.new("user/message", Message.user("lost words")))
    finally:
        store.close()
    (root / "bad.jsonl").write_bytes(b'{"seq":1,"type":"user/message"\n{broken\n')
    store = open_store(str(root))  # the index is made from the logs
    try:
        assert sorted(i.id for i in store.list()) == ["bad", "good"]
        assert [h.session_id for h in store.search("words")] == ["good"]
    finally:
        store.close()


class TestJsonlCatalog(CatalogConformance):
    """The shared catalog conformance on a JSONL directory (its sidecar index)."""

    def make_store(self, tmp_path: Path, **options: Any) -> BaseStore:
        tmp_path.mkdir(parents=True, exist_ok=True)
        return open_store(tmp_path / "sessions", **options)


class TestJsonlCatalogEncrypted(TestJsonlCatalog):
    encryption_key = bytes(range(32))

