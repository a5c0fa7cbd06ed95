"""The SQLite backend's catalog and search (``SqliteIndex`` in the store's database) against
the reference, its migration from version 2, and what its tables hold."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

from agentsession import BaseStore, Event, Message, open_store
from agentsession.backends import sqlite as sqlite_backend
from agentsession.backends.sqlite_index import INDEX_TABLES, PENDING_AT_MOST
from agentsession.testing.catalog import CatalogConformance


class TestSqliteCatalog(CatalogConformance):
    def make_store(self, tmp_path: Path, **options: Any) -> BaseStore:
        tmp_path.mkdir(parents=True, exist_ok=True)
        return open_store(f"sqlite:///{tmp_path}/sessions.db", **options)


class TestSqliteCatalogEncrypted(TestSqliteCatalog):
    encryption_key = bytes(range(32))


def _counts(path: Path, session_id: str) -> dict[str, int]:
    """Rows each index table holds for the session."""
    conn = sqlite3.connect(path)
    try:
        key = conn.execute("SELECT key FROM catalog WHERE id = ?", (session_id,)).fetchone()
        counts = {
            table: conn.execute(
                f"SELECT count(*) FROM {table} WHERE session_id = ?", (session_id,)
            ).fetchone()[0]
            for table in INDEX_TABLES
            if table != "catalog"
        }
        counts["catalog"] = 0 if key is None else 1
        return counts
    finally:
        conn.close()


def test_delete_leaves_nothing_of_the_session_in_the_index(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with open_store(f"sqlite:///{path}") as store:
        session = store.get("a")
        session.append(Event.new("user/message", Message.user("hello there"), agent="x"))
        session.update(tags=["t"])
        assert all(_counts(path, "a")[t] for t in ("catalog", "catalog_tags", "catalog_agents"))
        assert [h.seq for h in store.search("hello")] == [1]
        assert _counts(path, "a")["catalog_documents"] == 1
        session.append(Event.new("user/message", Message.user("hello again"), agent="x"))
        assert _marks(path) == [(1, 1)]  # its second document is not indexed yet
        store.delete("a")
        assert set(_counts(path, "a").values()) == {0}
        assert store.index_documents() == 0  # the mark of the deleted session goes
        assert _marks(path) == []
        assert set(_counts(path, "a").values()) == {0}


def _marks(path: Path) -> list[tuple[int, int]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT skey, after FROM catalog_search_dirty ORDER BY skey").fetchall()
    finally:
        conn.close()


def test_appends_leave_documents_to_the_search_which_indexes_them_once(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with open_store(f"sqlite:///{path}") as store:
        session = store.get("a")
        for n in range(PENDING_AT_MOST + 5):
            session.append(Event.new("user/message", Message.user(f"needle number{n}")))
        counts = _counts(path, "a")
        assert counts["catalog_documents"] == counts["catalog_pending"] == 0
        assert _marks(path) == [(1, 0)]  # the seq before its first document not indexed
        hits = store.search("needle", limit=1000)
        assert sorted(h.seq for h in hits) == list(range(1, PENDING_AT_MOST + 6))
        assert _counts(path, "a")["catalog_documents"] == PENDING_AT_MOST + 5
        assert _marks(path) == []
        session.append(Event.new("user/message", Message.user("needle last")))
        assert _marks(path) == [(1, PENDING_AT_MOST + 5)]
        assert [h.seq for h in store.search("number3")] == [4]
        assert store.index_documents() == 0  # the search indexed it
        assert _counts(path, "a")["catalog_documents"] == PENDING_AT_MOST + 6
        assert [h.seq for h in store.search("last")] == [PENDING_AT_MOST + 6]


# -- the migration from version 2 --------------------------------------------------------------

V2_ROWS = """
INSERT INTO sessions VALUES (1, 'chat', '2026-01-01T00:00:00.000000+00:00', 0, NULL);
INSERT INTO events VALUES
  (4294967297, 'chat', 1, 'user/message', '', 'U1', '2026-01-01T00:00:00Z',
   '{"role":"user","parts":[{"type":"text","text":"Where is the café?"}]}', NULL, 'e1'),
  (4294967298, 'chat', 2, 'assistant/message', 'guide', '', '2026-01-01T00:00:01Z',
   '{"role":"assistant","parts":[{"type":"text","text":"Around the corner"}]}', NULL, 'e2'),
  (4294967299, 'chat', 3, 'usage', 'guide', '', '2026-01-01T00:00:02Z',
   '{"inputTokens":12,"outputTokens":3}', NULL, 'e3');
"""


def build_v2(path: Path) -> None:
    """A version 2 database, made with that version's DDL (version 1's and ``events.eid``)."""
    from .test_sqlite import V1_DDL

    conn = sqlite3.connect(path)
    try:
        conn.executescript(
            V1_DDL.replace("PRAGMA user_version = 1;", "")
            + "ALTER TABLE events ADD COLUMN eid TEXT;\nPRAGMA user_version = 2;\n"
            + V2_ROWS
        )
    finally:
        conn.close()


def test_a_version_2_database_is_migrated_and_its_catalog_filled_once(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    build_v2(path)
    store = open_store(f"sqlite:///{path}")
    try:
        assert isinstance(store, sqlite_backend.SqliteStore)
        assert store.applied_migrations == (3, 4, 5, 6)
        [info] = store.list()
        assert (info.id, info.title, info.user, info.agents, info.messages) == (
            "chat",
            "Where is the café?",
            "U1",
            ("guide",),
            2,
        )
        assert info.usage.input_tokens == 12
        assert [h.seq for h in store.search("cafe")] == [1]
        assert store.fill_catalog() is None  # the mark is gone: filled once
    finally:
        store.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone() == (6,)
    finally:
        conn.close()


def test_a_fill_cut_short_is_done_again_at_the_next_opening(
    tmp_path: Path, monkeypatch: Any
) -> None:
    path = tmp_path / "v2.db"
    build_v2(path)
    calls: list[str] = []

    def crash(store: Any, session_ids: Any, progress: Any = None) -> int:
        calls.append("crash")
        raise KeyboardInterrupt

    monkeypatch.setattr(sqlite_backend.indexing, "reindex", crash)
    with contextlib.suppress(KeyboardInterrupt):
        open_store(f"sqlite:///{path}")
    assert calls == ["crash"]
    monkeypatch.undo()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT count(*) FROM catalog").fetchone() == (0,)
        assert conn.execute("SELECT value FROM meta WHERE kind = 'catalog'").fetchone()
    finally:
        conn.close()
    with open_store(f"sqlite:///{path}") as store:
        assert [i.title for i in store.list()] == ["Where is the café?"]
        assert store.fill_catalog() is None


def test_read_only_reads_a_version_2_database_without_a_catalog(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    build_v2(path)
    before = path.read_bytes()
    with open_store(f"sqlite:///{path}", read_only=True) as store:
        assert [(i.id, i.last_seq) for i in store.list()] == [("chat", 3)]
    assert path.read_bytes() == before
