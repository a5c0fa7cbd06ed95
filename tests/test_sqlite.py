"""Behaviour specific to the SQLite backend: pragmas, files, schemas, corruption, crashes."""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentsession as ags
from agentsession import CorruptLogError, Event, Message, StoreUnavailable, UsageError
from agentsession.backends import sqlite as sqlite_backend
from agentsession.backends.sqlite import APPLICATION_ID, SCHEMA_VERSION, SqliteLog, SqliteStore
from agentsession.chat.identity import (
    active_session,
    agent_binding,
    bind_agent,
    set_active_session,
)
from agentsession.events import Compaction
from agentsession.storage import REOPEN


def open_db(path: Path, **options: Any) -> SqliteStore:
    store = ags.open_store(f"sqlite:///{path}", **options)
    assert isinstance(store, SqliteStore)
    return store


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "sessions.db"


@pytest.fixture
def store(db: Path) -> Iterator[SqliteStore]:
    store = open_db(db)
    try:
        yield store
    finally:
        store.close()


def raw(path: Path) -> sqlite3.Connection:
    """A plain connection to the database, as another tool would open it."""
    return sqlite3.connect(path, isolation_level=None)


def texts(session: ags.BaseSession) -> list[str]:
    return [m.text for m in session.messages()]


# -- pragmas, files, connections --------------------------------------------------------------


@pytest.mark.parametrize(("durability", "level"), [("flush", 1), ("fsync", 2)])
def test_wal_mode_and_synchronous_level_follow_durability(
    db: Path, durability: str, level: int
) -> None:
    store = open_db(db, durability=durability, busy_timeout=12.5)
    seen: list[tuple[Any, ...]] = []

    def probe() -> None:
        conn = store._db.connection()
        seen.append(
            (
                conn.execute("PRAGMA journal_mode").fetchone()[0],
                conn.execute("PRAGMA synchronous").fetchone()[0],
                conn.execute("PRAGMA busy_timeout").fetchone()[0],
            )
        )

    probe()
    thread = threading.Thread(target=probe)  # another thread, another connection: same setup
    thread.start()
    thread.join()
    store.close()
    assert seen == [("wal", level, 12500)] * 2
    with raw(db) as conn:  # WAL is recorded in the file itself
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_database_wal_and_directory_are_owner_only(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        directory = tmp_path / "new"
        store = open_db(directory / "sessions.db")
        store.get("s").append(Event.new("test/n"))
        with store.lock("s", timeout=1):
            pass
        modes = {
            name: stat.S_IMODE(os.stat(directory / name).st_mode)
            for name in ("sessions.db", "sessions.db-wal", "sessions.db-shm")
        }
        locks = stat.S_IMODE(os.stat(directory / "sessions.db.locks").st_mode)
        store.close()
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    assert modes == {"sessions.db": 0o600, "sessions.db-wal": 0o600, "sessions.db-shm": 0o600}
    assert locks == 0o700


def test_each_thread_has_a_connection_closed_with_the_thread_or_the_store(
    store: SqliteStore,
) -> None:
    main = store._db.connection()
    assert store._db.connection() is main
    finished: list[sqlite3.Connection] = []
    alive: list[sqlite3.Connection] = []
    stop = threading.Event()
    ready = threading.Event()

    def short() -> None:
        finished.append(store._db.connection())
        store.get("t").append(Event.new("test/n"))

    def long() -> None:
        alive.append(store._db.connection())
        ready.set()
        stop.wait(10)

    thread = threading.Thread(target=short)
    thread.start()
    thread.join()
    keeper = threading.Thread(target=long)
    keeper.start()
    ready.wait(10)
    try:
        assert finished[0] is not main and alive[0] is not main
        with pytest.raises(sqlite3.ProgrammingError):  # closed when its thread ended
            finished[0].execute("SELECT 1")
        assert alive[0].execute("SELECT 1").fetchone() == (1,)
        store.close()
        for conn in (main, alive[0]):
            with pytest.raises(sqlite3.ProgrammingError):
                conn.execute("SELECT 1")
    finally:
        stop.set()
        keeper.join()


def test_a_closed_store_refuses_held_sessions(db: Path) -> None:
    store = open_db(db)
    session = store.get("s")
    session.append(Event.new("test/n"))
    store.close()
    with pytest.raises(UsageError, match="closed"):
        session.append(Event.new("test/n"))


def test_url_opens_the_same_database_even_with_odd_characters_in_the_path(
    tmp_path: Path,
) -> None:
    store = open_db(tmp_path / "dir with space %41 #x" / "s.db")
    store.get("s").append(Event.new("test/n", {"n": 1}))
    assert store.url.startswith("sqlite:////")
    other = ags.open_store(store.url)
    assert isinstance(other, SqliteStore) and other.path == store.path
    assert [e.payload() for e in other.get("s").read()] == [{"n": 1}]
    other.close()
    store.close()


def test_a_forked_child_uses_its_own_connections_and_leaves_the_parents_open(
    store: SqliteStore,
) -> None:
    session = store.get("fork")
    session.append(Event.new("test/n", {"by": "parent"}))
    parents = [store._db.connection()]
    ready, stop = threading.Event(), threading.Event()

    def keeper() -> None:  # another thread's connection, open while the parent forks
        parents.append(store._db.connection())
        ready.set()
        stop.wait(10)

    thread = threading.Thread(target=keeper)
    thread.start()
    ready.wait(10)
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            code = 1
            try:
                if store._db.connection() in parents:
                    code = 2  # SQLite connections must not cross a fork
                else:
                    for conn in parents:
                        conn.total_changes  # noqa: B018 - raises if the child closed it
                    store.get("fork").append(Event.new("test/n", {"by": "child"}))
                    store.close()
                    code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    finally:
        stop.set()
        thread.join()
    assert os.waitstatus_to_exitcode(status) == 0
    assert session.append(Event.new("test/n", {"by": "parent"})) == 3
    assert [e.payload()["by"] for e in session.read()] == ["parent", "child", "parent"]


def test_payloads_are_json_text_that_sqlite_can_query(store: SqliteStore, db: Path) -> None:
    store.get("s").append(Event.new("test/n", {"n": 41, "text": "ü"}, meta={"k": "v"}))
    with raw(db) as conn:
        row = conn.execute(
            "SELECT typeof(data), json_extract(data, '$.n'), json_extract(data, '$.text'), "
            "json_extract(meta, '$.k'), time FROM events WHERE session_id = 's'"
        ).fetchone()
    assert row[:4] == ("text", 41, "ü", "v")
    assert row[4].endswith("Z")  # the codec's RFC 3339 form, as in JSONL lines


def test_ids_and_strings_that_utf8_cannot_carry_round_trip(store: SqliteStore) -> None:
    sid = "lone \ud800 id"
    session = store.get(sid)
    session.append(Event.new("test/\udfff", {"n": 1}, agent="a\ud800", user="u\udc00"))
    bind_agent(store, sid, "agent\ud800")
    set_active_session(store, "key\ud801", sid)
    fresh = open_db(store.path)
    try:
        [event] = fresh.get(sid).read()
        assert (event.type, event.agent, event.user) == ("test/\udfff", "a\ud800", "u\udc00")
        assert [i.id for i in fresh.list()] == [sid]
        assert agent_binding(fresh, sid) == "agent\ud800"
        assert active_session(fresh, "key\ud801") == sid
        assert fresh.exists(sid) and not fresh.exists("lone \ud801 id")
    finally:
        fresh.close()


# -- opening reads only the tail ---------------------------------------------------------------


def test_open_reads_from_the_last_compaction_marker_and_read_still_returns_everything(
    db: Path,
) -> None:
    store = open_db(db)
    session = store.get("s")
    for n in range(50):
        session.append(Event.new("user/message", Message.user(f"m{n}")))
    summary = Compaction(
        summary=Message.user("summary"), first_kept_seq=50, retained_tail=[Message.user("m49")]
    )
    marker_seq = session.append(Event.new("session/compaction", summary))
    session.append(Event.new("user/message", Message.user("after")))
    reopened = open_db(db).get("s")
    assert isinstance(reopened._log, SqliteLog)
    assert reopened._window_start == marker_seq
    assert len(reopened._window) == 2
    assert texts(reopened) == ["summary", "m49", "after"]
    assert [e.seq for e in reopened.read()] == list(range(1, 53))
    assert [e.seq for e in reopened.read(after=10, limit=2)] == [11, 12]


def test_only_markers_that_rebuild_history_move_the_opening_point(store: SqliteStore) -> None:
    session = store.get("s")
    for n in range(3):
        session.append(Event.new("user/message", Message.user(f"m{n}")))
    legacy = Compaction(summary=Message.user("old style"), before_seq=2)
    session.append_many([Event.new("test/n"), Event.new("session/compaction", legacy)])
    with raw(Path(store.path)) as conn:
        assert conn.execute("SELECT compaction_seq FROM sessions").fetchone() == (0,)
    session.append_many(
        [Event.new("session/compaction", Compaction(summary=Message.user("s"), first_kept_seq=3))]
    )
    with raw(Path(store.path)) as conn:
        assert conn.execute("SELECT compaction_seq FROM sessions").fetchone() == (6,)


# -- schema versions ---------------------------------------------------------------------------

V1_DDL = """
CREATE TABLE sessions (
    key            INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: one life of an id
    id             TEXT    NOT NULL UNIQUE,
    created_at     TEXT    NOT NULL,
    compaction_seq INTEGER NOT NULL DEFAULT 0,  -- latest marker that rebuilds history
    metadata       TEXT,
    CHECK (key BETWEEN 1 AND 2147483647)
);
CREATE TABLE events (
    key        INTEGER PRIMARY KEY,  -- (sessions.key << 32) | seq
    session_id TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    type       TEXT    NOT NULL,
    agent      TEXT    NOT NULL DEFAULT '',
    user       TEXT    NOT NULL DEFAULT '',
    time       TEXT    NOT NULL,  -- RFC 3339
    data       TEXT    NOT NULL,  -- JSON
    meta       TEXT,              -- JSON object, or NULL when empty
    CHECK (seq BETWEEN 1 AND 4294967295 AND (key & 4294967295) = seq)
);
CREATE TABLE meta (
    kind       TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (kind, key)
) WITHOUT ROWID;
CREATE VIEW session_summary AS
SELECT s.id AS id, s.key AS key, s.created_at AS created_at, e.time AS updated_at,
       e.seq AS last_seq, s.compaction_seq AS compaction_seq, s.metadata AS metadata
FROM sessions AS s JOIN events AS e ON e.key = (
    SELECT max(key) FROM events WHERE key > (s.key << 32) AND key < ((s.key + 1) << 32));
PRAGMA user_version = 1;
PRAGMA application_id = 1095193427;
"""

# Session key 7 (keys 7 << 32 | seq), and a deleted session's key 9 already used once.
V1_ROWS = """
INSERT INTO sessions VALUES (7, 'slack:C001', '2026-01-01T00:00:00.000000+00:00', 3, NULL);
UPDATE sqlite_sequence SET seq = 9 WHERE name = 'sessions';
INSERT INTO events VALUES
  (30064771073, 'slack:C001', 1, 'user/message', '', 'U1', '2026-01-01T00:00:00Z',
   '{"role":"user","parts":[{"type":"text","text":"hello"}]}', NULL),
  (30064771074, 'slack:C001', 2, 'assistant/message', 'coder', '', '2026-01-01T00:00:01.5Z',
   '{"role":"assistant","parts":[{"type":"text","text":"hi"}]}', '{"logical_chars":2}'),
  (30064771075, 'slack:C001', 3, 'session/compaction', 'coder', '', '2026-01-01T00:00:02.000001Z',
   '{"summary":{"role":"user","parts":[{"type":"text","text":"greetings"}]},"firstKeptSeq":3}',
   NULL),
  (30064771076, 'slack:C001', 4, 'plugin/custom', '', '', '2026-01-01T00:00:03+00:00',
   '{"x":[1,2]}', NULL);
INSERT INTO meta VALUES ('bind', 'slack:C001', 'coder', '2026-01-01T00:00:00.000000+00:00');
INSERT INTO meta VALUES ('active', 'slack:C001:t:1', 'slack:C001:t:1:new:1',
                         '2026-01-01T00:00:00.000000+00:00');
"""


def build_v1(path: Path) -> None:
    with raw(path) as conn:
        conn.executescript(V1_DDL + V1_ROWS)


def test_schema_version_and_application_id_are_recorded(store: SqliteStore, db: Path) -> None:
    assert SCHEMA_VERSION == 6 == len(sqlite_backend._MIGRATIONS)
    assert APPLICATION_ID == 1095193427
    with raw(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert conn.execute("PRAGMA application_id").fetchone() == (APPLICATION_ID,)
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert {"sessions", "events", "meta", "session_summary"} <= names


def test_a_v1_database_built_from_the_v1_ddl_opens_and_keeps_working(db: Path) -> None:
    build_v1(db)
    store = open_db(db)
    session = store.get("slack:C001")
    assert session._window_start == 3  # opened at the compaction marker
    assert texts(session) == ["greetings"]
    events = session.read()
    assert [e.seq for e in events] == [1, 2, 3, 4]
    assert events[1].agent == "coder" and events[1].meta == {"logical_chars": 2}
    assert events[0].user == "U1" and events[0].time is not None
    assert events[1].time is not None and events[1].time.microsecond == 500000
    assert events[3].payload() == {"x": [1, 2]}
    assert agent_binding(store, "slack:C001") == "coder"
    assert active_session(store, "slack:C001:t:1") == "slack:C001:t:1:new:1"
    [info] = store.list()
    assert (info.id, info.last_seq) == ("slack:C001", 4)
    assert all(e.id == "" for e in events)  # stored before events had ids
    again = Event.new("user/message", Message.user("again"))
    assert session.append(again) == 5
    assert session.append(again) == 5  # a retry of an event with an id stores nothing
    assert [e.id for e in session.read(after=4)] == [again.id]
    store.get("new").append(Event.new("test/n"))
    store.close()
    with raw(db) as conn:
        keys = conn.execute("SELECT id, key FROM sessions ORDER BY key").fetchall()
        assert conn.execute("SELECT max(key) FROM events").fetchone() == ((10 << 32) | 1,)
    assert keys == [("slack:C001", 7), ("new", 10)]  # a new session never reuses a key


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_read_only_reads_a_v1_database_as_it_is_and_changes_nothing(db: Path, journal: str) -> None:
    build_v1(db)
    conn = raw(db)
    conn.execute(f"PRAGMA journal_mode={journal}")
    conn.close()
    before = db.read_bytes()
    store = open_db(db, read_only=True)
    session = store.get("slack:C001")
    assert texts(session) == ["greetings"]
    events = session.read()
    assert [e.seq for e in events] == [1, 2, 3, 4] and all(e.id == "" for e in events)
    assert [(i.id, i.last_seq) for i in store.list()] == [("slack:C001", 4)]
    assert agent_binding(store, "slack:C001") == "coder"
    with pytest.raises(ags.StorageError):  # not meant for writes: the schema lacks event ids
        session.append(Event.new("test/n"))
    store.close()
    assert db.read_bytes() == before
    conn = raw(db)
    try:
        assert conn.execute("PRAGMA user_version").fetchone() == (1,)
        assert conn.execute("PRAGMA journal_mode").fetchone() == (journal,)
    finally:
        conn.close()


def test_read_only_refuses_an_older_schema_it_cannot_read(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    open_db(db).close()

    def to_v7(conn: sqlite3.Connection) -> None:
        conn.execute("ALTER TABLE sessions ADD COLUMN title TEXT")

    monkeypatch.setattr(sqlite_backend, "_MIGRATIONS", [*sqlite_backend._MIGRATIONS, to_v7])
    before = db.read_bytes()
    with pytest.raises(
        StoreUnavailable, match=r"schema version 6 is older than 7; run `agentsession migrate`$"
    ):
        open_db(db, read_only=True)
    assert db.read_bytes() == before
    open_db(db).close()  # a store opened to write migrates
    conn = raw(db)
    try:
        assert conn.execute("PRAGMA user_version").fetchone() == (7,)
    finally:
        conn.close()


def test_read_only_on_a_missing_or_empty_file_is_no_store_and_creates_nothing(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "sub" / "absent.db"
    with pytest.raises(StoreUnavailable, match="no store at"):
        open_db(missing, read_only=True)
    assert not missing.parent.exists()
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    with pytest.raises(StoreUnavailable, match="no store at"):
        open_db(empty, read_only=True)
    assert empty.read_bytes() == b""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]


def test_an_empty_file_gets_the_current_schema(db: Path) -> None:
    db.write_bytes(b"")
    open_db(db).close()
    with raw(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)


def test_migrations_run_in_order_from_an_older_version(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build_v1(db)

    def to_v7(conn: sqlite3.Connection) -> None:
        conn.execute("ALTER TABLE sessions ADD COLUMN title TEXT")

    monkeypatch.setattr(sqlite_backend, "_MIGRATIONS", [*sqlite_backend._MIGRATIONS, to_v7])
    store = open_db(db)
    assert store.get("slack:C001").latest_seq == 4
    store.close()
    with raw(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (7,)
        columns = [row[1] for row in conn.execute("PRAGMA table_info(sessions)")]
        event_columns = [row[1] for row in conn.execute("PRAGMA table_info(events)")]
    assert columns[-1] == "title"
    assert event_columns[-1] == "eid"  # version 2


def test_a_newer_schema_version_is_refused_clearly(db: Path) -> None:
    build_v1(db)
    with raw(db) as conn:
        conn.execute("PRAGMA user_version = 8")
    with pytest.raises(StoreUnavailable, match=r"schema version 8, newer .* supports \(6\)"):
        open_db(db)


def test_another_applications_database_is_refused(db: Path) -> None:
    with raw(db) as conn:
        conn.execute("CREATE TABLE sessions (whatever TEXT)")
    with pytest.raises(StoreUnavailable, match="another application"):
        open_db(db)
    with raw(db) as conn:
        conn.execute("PRAGMA user_version = 1")
        conn.execute("PRAGMA application_id = 42")
    with pytest.raises(StoreUnavailable, match="not an agentsession database"):
        open_db(db)


@pytest.mark.parametrize("kind", ["text file", "directory"])
def test_a_path_that_is_not_a_database_is_unavailable(db: Path, kind: str) -> None:
    if kind == "directory":
        db.mkdir()
    else:
        db.write_text("this is not a database, just some text that is long enough " * 20)
    with pytest.raises(StoreUnavailable):
        open_db(db)


# -- corruption --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("data", "'{broken'"),
        ("data", "'1, 2'"),
        ("time", "'yesterday'"),
        ("meta", "'[1, 2]'"),
        ("meta", "'{\"k\":'"),
    ],
)
def test_a_row_that_does_not_decode_raises_naming_session_and_seq(
    db: Path, column: str, value: str
) -> None:
    store = open_db(db)
    for n in range(3):
        store.get("s").append(Event.new("test/n", {"n": n}))
    store.close()
    with raw(db) as conn:
        conn.execute(f"UPDATE events SET {column} = {value} WHERE session_id = 's' AND seq = 2")
    with pytest.raises(CorruptLogError) as info:
        open_db(db).get("s")
    err = info.value
    assert err.session_id == "s" and err.path == str(db)
    assert "'s'" in str(err) and "seq 2" in str(err)


def test_a_corrupt_row_before_the_compaction_marker_surfaces_on_a_full_read(db: Path) -> None:
    store = open_db(db)
    session = store.get("s")
    for n in range(3):
        session.append(Event.new("user/message", Message.user(f"m{n}")))
    marker = Compaction(summary=Message.user("sum"), first_kept_seq=4)
    session.append(Event.new("session/compaction", marker))
    session.append(Event.new("user/message", Message.user("after")))
    store.close()
    with raw(db) as conn:
        conn.execute("UPDATE events SET data = '{nope' WHERE seq = 1")
    reopened = open_db(db).get("s")
    assert texts(reopened) == ["sum", "after"]
    with pytest.raises(CorruptLogError, match="seq 1"):
        reopened.read()


# -- delete and recreate -----------------------------------------------------------------------


def test_delete_removes_rows_and_binding_together_and_spares_other_sessions(
    store: SqliteStore, db: Path
) -> None:
    for sid in ("gone", "kept"):
        store.get(sid).append(Event.new("test/n"))
        bind_agent(store, sid, "coder")
    assert store.delete("gone") is True
    with raw(db) as conn:
        counts = [
            conn.execute(sql, ("gone",)).fetchone()[0]
            for sql in (
                "SELECT count(*) FROM events WHERE session_id = ?",
                "SELECT count(*) FROM sessions WHERE id = ?",
                "SELECT count(*) FROM meta WHERE key = ?",
            )
        ]
    assert counts == [0, 0, 0]
    assert agent_binding(store, "kept") == "coder" and store.get("kept").latest_seq == 1


def test_a_recreated_session_is_detected_even_when_it_grew_past_the_old_one(
    store: SqliteStore,
) -> None:
    held = store.get("s")
    held.append(Event.new("test/n", {"life": 1}))
    held.append(Event.new("test/n", {"life": 1}))
    other = open_db(Path(store.path))
    try:
        assert other.delete("s") is True
        for _ in range(5):
            other.get("s").append(Event.new("test/n", {"life": 2}))
    finally:
        other.close()
    assert held.latest_seq == 5
    assert [e.payload()["life"] for e in held.read()] == [2] * 5
    assert held.append(Event.new("test/n", {"life": 2})) == 6


def test_a_writer_catches_up_on_another_stores_appends_before_its_own(
    store: SqliteStore,
) -> None:
    held = store.get("s")
    held.append(Event.new("user/message", Message.user("one")))
    other = open_db(Path(store.path))
    try:
        other.get("s").append(Event.new("user/message", Message.user("two")))
    finally:
        other.close()
    assert held.append(Event.new("user/message", Message.user("three"))) == 3
    assert texts(held) == ["one", "two", "three"]


def test_sqlite_urls_follow_sqlalchemys_convention(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    relative = ags.open_store("sqlite:///rel/my.db")
    assert relative.location == str((tmp_path / "rel" / "my.db").resolve())
    relative.close()
    absolute = ags.open_store(f"sqlite:///{tmp_path}/abs.db")  # tmp_path starts with "/"
    assert absolute.location == str((tmp_path / "abs.db").resolve())
    assert ags.open_store(absolute.url).location == absolute.location  # url round-trips
    absolute.close()
    with pytest.raises(ags.UsageError) as refused:
        ags.open_store("sqlite://my.db")
    assert "sqlite:///relative/path.db" in str(refused.value)
    assert "sqlite:////absolute/path.db" in str(refused.value)


# -- the log storage: lives ------------------------------------------------------------------


class _SeenView:
    """A :class:`~agentsession.storage.LogView` that has seen ``seen_seq`` and admits all."""

    def __init__(self, seen_seq: int) -> None:
        self.id = "s"
        self.seen_seq = seen_seq

    def admits(self, foreign: object, events: object) -> bool:
        return True


def test_a_log_whose_session_was_deleted_and_created_again_answers_reopen_and_writes_nothing(
    store: SqliteStore,
) -> None:
    store.get("s").append(Event.new("test/n", {"n": 1}))
    log = SqliteLog(store._db, "s", store.clock)
    events, complete = log.open_tail(_SeenView(0))
    assert [e.seq for e in events] == [1] and complete
    store.delete("s")
    assert log.refresh(_SeenView(1)) is REOPEN
    batch = [Event.new("test/n", {"n": 2}, time=store.clock())]
    assert log.append(_SeenView(1), batch, -1, None) is REOPEN
    assert not store.exists("s")
    other = open_db(Path(store.path))
    other.get("s").append(Event.new("test/n", {"n": 3}))  # another life of the id
    assert log.refresh(_SeenView(1)) is REOPEN
    assert log.append(_SeenView(1), batch, -1, None) is REOPEN
    assert log.append_one(_SeenView(1), batch[0], False) is None
    assert [e.payload() for e in other.get("s").read()] == [{"n": 3}]
    log.open_tail(_SeenView(0))  # the session reopens: this life is the log's now
    appended = log.append(_SeenView(0), batch, -1, None)
    assert appended is not REOPEN and not isinstance(appended, type(REOPEN))
    foreign, stored = appended
    assert [e.seq for e in foreign] == [1] and [e.seq for e in stored] == [2]
    other.close()


def test_a_held_session_starts_over_when_its_log_is_deleted_and_created_again(
    store: SqliteStore,
) -> None:
    held = store.get("s")
    held.append_many([Event.new("test/n", {"n": n}) for n in range(3)])
    other = open_db(Path(store.path))
    other.delete("s")
    other.get("s").append(Event.new("test/n", {"n": "new"}))
    assert held.latest_seq == 1
    assert held.append(Event.new("test/n", {"n": "after"})) == 2
    assert [e.payload() for e in other.get("s").read()] == [{"n": "new"}, {"n": "after"}]
    other.close()


def test_opening_another_store_on_the_file_keeps_this_process_seeing_other_writers(
    db: Path,
) -> None:
    """Opening a second store object on a database this process has open must not touch the
    file: closing a descriptor of it drops this process's SQLite locks, and a writer process
    closing its last connection would then delete the write-ahead log under our connections,
    which would read a stale database from then on."""
    import subprocess
    import sys

    first = open_db(db)
    session = first.get("s")
    session.append(Event.new("test/n"))
    assert session.read()  # a connection with its locks
    second = open_db(db)  # the file exists: it is not opened again
    writer = (
        "import sys, agentsession as ags\n"
        "store = ags.open_store(sys.argv[1])\n"
        "for i in range(20):\n"
        "    store.get('s').append(ags.Event.new('test/n', {'i': i}))\n"
        "store.close()\n"
    )
    for _ in range(3):
        subprocess.run([sys.executable, "-c", writer, f"sqlite:///{db}"], check=True, timeout=60)
    assert session.latest_seq == 61
    assert second.get("s").latest_seq == 61
    first.close()
    second.close()
