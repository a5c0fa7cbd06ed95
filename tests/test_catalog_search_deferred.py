"""The SQLite store's search documents indexed apart from its appends (schema version 5): an
append only marks its session in ``catalog_search_dirty`` (an insert trigger), a search
first indexes every marked session's documents from its log, and a store opened read-only
matches them in the logs instead. What a search finds never depends on when the documents
were indexed (checked against a rebuild), nothing is lost or indexed twice however a process
ends, and a version 4 file is migrated (and read as it is when read-only)."""

from __future__ import annotations

import sqlite3
import textwrap
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from agentsession import Event, Message, StorageError, open_store
from agentsession.backends import sqlite as sqlite_backend
from agentsession.events import TurnEnd, TurnStart

from .test_catalog_deferred import run_then_kill, store_at_version
from .test_catalog_deferred import sql_rows as _sql


def _hits(store: Any, query: str) -> list[tuple[Any, ...]]:
    return sorted(
        (h.session_id, h.seq, h.role, h.rewound, h.compacted, h.snippet)
        for h in store.search(query, limit=1000)
    )


_ALL_DOCUMENTS = "SELECT rowid FROM catalog_documents UNION ALL SELECT rowid FROM catalog_pending"


def _documents(path: Path) -> int:
    """Documents indexed (in the FTS5 table, or waiting in ``catalog_pending``); each once."""
    rowids = [r[0] for r in _sql(path, _ALL_DOCUMENTS)]
    assert len(rowids) == len(set(rowids)), "a document indexed twice"
    return len(rowids)


def _turn(session: Any, n: int) -> None:
    with session.turn(agent="bot") as turn:
        turn.user(f"question {n} about pandas")
        turn.assistant(f"answer {n} on dataframes")


def test_appends_write_no_document_and_a_search_indexes_each_once(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with open_store(f"sqlite:///{path}") as store:
        for n in range(3):
            _turn(store.get(f"s{n}"), n)
        assert _documents(path) == 0
        assert len(_sql(path, "SELECT * FROM catalog_search_dirty")) == 3
        assert len(store.search("pandas")) == 3
        assert _documents(path) == 6 and _sql(path, "SELECT * FROM catalog_search_dirty") == []
        assert store.index_documents() == 0
        _turn(store.get("s0"), 9)
        assert _sql(path, "SELECT skey, after FROM catalog_search_dirty") == [(1, 4)]
        assert store.index_documents() == 1
        assert _documents(path) == 8
        store.reindex()  # a rebuild changes nothing either
        assert _documents(path) == 8


def test_a_read_only_store_finds_documents_not_indexed_yet_and_writes_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    url = f"sqlite:///{path}"
    with open_store(url) as store:
        session = store.get("a")
        _turn(session, 0)
        store.search("pandas")  # indexed
        _turn(session, 1)
        session.append(Event.new("user/message", Message.user("café olé"), agent="bot"))
        session.rewind(to_seq=4)  # the second turn and the message are rewound
        expected = {q: _hits(store, q) for q in ("pandas", "answer", "cafe", "ole 1")}
        store.reindex()
        assert {q: _hits(store, q) for q in expected} == expected
    with open_store(url) as store:
        _turn(store.get("b"), 2)
        _turn(store.get("a"), 3)
        expected = {q: _hits(store, q) for q in ("pandas", "answer 3", "question")}
    # Written again after the searches above: the marks are there for a reader.
    with open_store(url) as store:
        _turn(store.get("b"), 4)
        _turn(store.get("a"), 5)
    with open_store(url) as store:
        store.index_documents()
        expected = {q: _hits(store, q) for q in ("pandas", "answer 5", "question", "dataframes")}
    with open_store(url) as store:
        _turn(store.get("b"), 6)
    marks = _sql(path, "SELECT * FROM catalog_search_dirty")
    assert marks
    before = path.read_bytes()
    with open_store(url, read_only=True) as reader:
        assert _hits(reader, "answer 6") == [
            ("b", 11, "assistant", False, False, "[answer] [6] on dataframes")
        ]
        assert len(reader.search("pandas", limit=100)) == 7
        page = reader.search("pandas", limit=4)
        rest = reader.search("pandas", limit=100, cursor=page.next_cursor)
        assert len(page) + len(rest) == 7 and not {(h.session_id, h.seq) for h in page} & {
            (h.session_id, h.seq) for h in rest
        }
        assert _hits(reader, "pandas") == _hits(reader, "pandas")
    assert path.read_bytes() == before and _sql(path, "SELECT * FROM catalog_search_dirty") == marks
    with open_store(url) as store:
        assert len(store.search("pandas", limit=100)) == 7


def check_branch_documents(store: Any) -> None:
    """A branch's documents carry the seqs its reader presents (after its shared history),
    indexed apart from its appends."""
    origin = store.get("o")
    _turn(origin, 0)
    _turn(origin, 1)
    branch = origin.branch(at_seq=4)
    branch.append(Event.new("user/message", Message.user("branch only words")))
    hits = store.search("branch only")
    [own] = [e for e in branch.read() if e.type == "user/message" and "branch" in e.payload().text]
    assert [(h.session_id, h.seq) for h in hits] == [(branch.id, own.seq)]
    assert [h.session_id for h in store.search("pandas")] == ["o", "o"]
    branch.append(Event.new("assistant/message", Message.assistant("branch reply")))
    assert [h.seq for h in store.search("reply")] == [own.seq + 1]


def test_a_branch_documents_carry_the_seqs_its_reader_presents(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path}/s.db") as store:
        check_branch_documents(store)


def test_an_encrypted_store_indexes_blind_tokens_only(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with open_store(f"sqlite:///{path}", key=bytes(range(32))) as store:
        _turn(store.get("secret"), 0)
        [hit] = store.search("question pandas")
        assert hit.snippet == "[question] 0 about [pandas]"
        assert _documents(path) == 2
    raw = (
        path.read_bytes() + Path(f"{path}-wal").read_bytes()
        if Path(f"{path}-wal").exists()
        else path.read_bytes()
    )
    assert b"pandas" not in raw and b"dataframes" not in raw


def test_an_index_run_that_fails_midway_leaves_its_marks(tmp_path: Path, monkeypatch: Any) -> None:
    path = tmp_path / "s.db"
    with open_store(f"sqlite:///{path}") as store:
        for n in range(5):
            _turn(store.get(f"s{n}"), n)
        store.list(order="id")
        calls = []
        real = sqlite_backend.SqliteIndex.add_documents

        def failing(self: Any, *args: Any) -> bool:
            calls.append(1)
            if len(calls) == 3:
                raise sqlite3.OperationalError("disk I/O error")
            return real(self, *args)

        monkeypatch.setattr(sqlite_backend.SqliteIndex, "add_documents", failing)
        with pytest.raises(StorageError, match="disk I/O error"):
            store.index_documents()
        monkeypatch.setattr(sqlite_backend.SqliteIndex, "add_documents", real)
        assert _documents(path) == 0  # the batch was rolled back whole
        assert len(_sql(path, "SELECT * FROM catalog_search_dirty")) == 5
        assert len(store.search("pandas", limit=100)) == 5
        assert _documents(path) == 10


_INDEXER = textwrap.dedent(
    """
    import sys
    import agentsession as ags
    store = ags.open_store(sys.argv[1])
    for n in range(int(sys.argv[2])):
        session = store.get(f"s{n}")
        session.append(ags.Event.new("user/message", ags.Message.user(f"needle {n} hay")))
        session.append(ags.Event.new("assistant/message", ags.Message.assistant(f"more hay {n}")))
    store.list(order="id")
    print("written", flush=True)
    store.index_documents()
    print("indexed", flush=True)
    sys.stdin.read()
    """
)


def test_a_process_killed_while_indexing_loses_and_doubles_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    url = f"sqlite:///{path}"
    count = 600
    run_then_kill(_INDEXER, url, str(count), timeout=120)  # wherever its index run is
    with open_store(url) as store:
        hits = store.search("needle", limit=10_000)
        assert sorted(h.session_id for h in hits) == sorted(f"s{n}" for n in range(count))
        assert len(store.search("hay", limit=10_000)) == 2 * count
    assert _documents(path) == 2 * count


def test_a_version_4_database_is_migrated_and_read_as_is_when_read_only(
    tmp_path: Path, monkeypatch: Any
) -> None:
    path = tmp_path / "v4.db"
    url = f"sqlite:///{path}"
    with store_at_version(url, 4, monkeypatch) as store:  # documents written with the rows
        _turn(store.get("done"), 0)
        inside = store.get("inside")
        inside.append(Event.new("turn/start", TurnStart(), agent="bot"))
        inside.append(Event.new("user/message", Message.user("mid turn pandas"), agent="bot"))
    assert _sql(path, "PRAGMA user_version") == [(4,)]
    # Version 4's writer removed the mark of the row a turn's end wrote (version 6 keeps it).
    _sql(path, "DELETE FROM catalog_dirty WHERE skey = 1")
    assert _sql(path, "SELECT skey FROM catalog_dirty") == [(2,)]  # "inside" is behind
    before = path.read_bytes()
    with open_store(url, read_only=True) as reader:
        assert [h.session_id for h in reader.search("pandas")] == ["done"]  # as it is
    assert path.read_bytes() == before
    with open_store(url) as store:
        assert isinstance(store, sqlite_backend.SqliteStore)
        assert store.applied_migrations == (5, 6)
        # The session version 4 had not caught up is marked, from its first seq.
        assert _sql(path, "SELECT skey, after FROM catalog_search_dirty") == [(2, 0)]
        assert sorted(h.session_id for h in store.search("pandas")) == ["done", "inside"]
        inside = store.get("inside")
        inside.append(Event.new("turn/end", TurnEnd(steps=0), agent="bot"))
        expected = _hits(store, "pandas")
        store.reindex()
        assert _hits(store, "pandas") == expected


OPS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),
        st.sampled_from(["start", "user", "assistant", "end", "search", "rewind", "reopen"]),
        st.sampled_from(["apple", "berry", "cherry"]),
    ),
    max_size=30,
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_search_always_matches_a_rebuild(tmp_path_factory: Any, ops: list[Any]) -> None:
    path = tmp_path_factory.mktemp("db") / "s.db"
    url = f"sqlite:///{path}"
    store = open_store(url)
    running: set[str] = set()
    try:
        for sid, op, word in ops:
            session = store.get(sid)
            if op == "start":
                session.append(Event.new("turn/start", TurnStart(), agent="x"))
                running.add(sid)
            elif op == "end":
                session.append(Event.new("turn/end", TurnEnd(steps=0), agent="x"))
                running.discard(sid)
            elif op == "user":
                session.append(Event.new("user/message", Message.user(f"{word} pie"), agent="x"))
            elif op == "assistant":
                session.append(Event.new("assistant/message", Message.assistant(f"{word} jam")))
            elif op == "search":
                store.search(word)
            elif op == "rewind" and session.latest_seq > 1 and sid not in running:
                session.rewind(to_seq=session.latest_seq // 2)
            elif op == "reopen":
                store.close()
                store = open_store(url)
        with open_store(url, read_only=True) as reader:
            seen_by_reader = {w: _hits(reader, w) for w in ("apple", "berry", "cherry", "pie")}
        found = {w: _hits(store, w) for w in ("apple", "berry", "cherry", "pie")}
        assert found == seen_by_reader
        store.reindex()
        assert {w: _hits(store, w) for w in found} == found
        _documents(path)  # none indexed twice
    finally:
        store.close()


def test_one_index_run_indexes_every_marked_session(tmp_path: Path, monkeypatch: Any) -> None:
    path = tmp_path / "s.db"
    with open_store(f"sqlite:///{path}") as store:
        for n in range(11):
            _turn(store.get(f"s{n}"), n)
        store.list(order="id")
        # Read two marks at a time: far fewer than the sessions marked.
        marked = sqlite_backend._MARKED_FOR_SEARCH.replace("LIMIT 4096", "LIMIT 2")
        monkeypatch.setattr(sqlite_backend, "_MARKED_FOR_SEARCH", marked)
        assert store.index_documents() == 11
        assert _sql(path, "SELECT * FROM catalog_search_dirty") == []
        assert _documents(path) == 22
