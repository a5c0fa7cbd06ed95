"""The SQLite store's catalog taken at turns' ends (schema versions 4 and 6): appends inside
a turn (its start too) mark the session instead of writing its row, the turn's end hands the
row the whole turn, appends outside turns hand it over every few events, and reading the
catalog first catches up every marked session from its log, so what is listed always matches
the logs (checked against a rebuild), whoever wrote and however a writer ended."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from agentsession import Event, Message, core, open_store
from agentsession.backends import sqlite as sqlite_backend
from agentsession.events import TurnEnd, TurnStart, Usage

from .pipes import readline_within
from .test_catalog_sqlite import build_v2


def _row(info: Any) -> tuple[Any, ...]:
    return (
        info.id,
        info.last_seq,
        info.messages,
        info.turns,
        info.title,
        info.user,
        info.agents,
        info.usage.input_tokens,
        info.status,
    )


def _listed(store: Any) -> list[tuple[Any, ...]]:
    return sorted(_row(i) for i in store.list(order="id"))


def _rebuilt(store: Any) -> list[tuple[Any, ...]]:
    store.reindex()
    return _listed(store)


def sql_rows(path: Path, query: str) -> list[Any]:
    """The rows of ``query`` on the database at ``path`` (a connection of its own; what it
    writes is committed)."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(query).fetchall()
        conn.commit()
        return rows
    finally:
        conn.close()


def _dirty(path: Path) -> list[int]:
    return [r[0] for r in sql_rows(path, "SELECT skey FROM catalog_dirty ORDER BY skey")]


@contextlib.contextmanager
def store_at_version(url: str, version: int, monkeypatch: Any) -> Iterator[Any]:
    """A store at ``url`` opened (so created or migrated) as the SQLite schema ``version``
    of an earlier release was."""
    with monkeypatch.context() as m:
        m.setattr(sqlite_backend, "_MIGRATIONS", sqlite_backend._MIGRATIONS[:version])
        with open_store(url) as store:
            yield store


def _raw_messages(path: Path, session_id: str, column: str = "messages") -> int:
    conn = sqlite3.connect(path)
    try:
        row = conn.execute(f"SELECT {column} FROM catalog WHERE id = ?", (session_id,)).fetchone()
        return -1 if row is None else int(row[0])
    finally:
        conn.close()


def _turn(session: Any, n: int, agent: str = "bot") -> None:
    with session.turn(agent=agent) as turn:
        turn.user(f"question {n} about pandas")
        turn.assistant(f"answer {n}")


def test_a_turn_writes_the_row_at_its_end_only(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with open_store(f"sqlite:///{path}") as store:
        session = store.get("a")
        _turn(session, 0)
        assert _raw_messages(path, "a") == 2  # written by the turn's end,
        assert _dirty(path) == []  # which takes the mark (the row holds the log)
        session.append(Event.new("turn/start", TurnStart(), agent="bot"))
        assert _raw_messages(path, "a", "turns") == 1 and len(_dirty(path)) == 1
        session.append(Event.new("user/message", Message.user("inside"), agent="bot"))
        # The turn's start and its message wait for the turn's end (or a reader's catch-up).
        assert _raw_messages(path, "a") == 2 and len(_dirty(path)) == 1
        [info] = store.list(order="id")  # reading the catalog catches up
        assert (info.messages, info.turns) == (3, 2)
        assert _dirty(path) == []
        session.append(Event.new("turn/end", TurnEnd(steps=0), agent="bot"))
        assert _raw_messages(path, "a", "turns") == 2
        assert _listed(store) == _rebuilt(store)
        assert store.list()[0].messages == 3 and _dirty(path) == []


def test_a_read_only_reader_catches_the_marked_sessions_up_in_memory(tmp_path: Path) -> None:
    """The turn's start is not handed over; a store opened read-only, which cannot write the
    catch-up, makes the marked session's row from its log for its listing, and writes
    nothing."""
    path = tmp_path / "s.db"
    with open_store(f"sqlite:///{path}") as store:
        session = store.get("a")
        _turn(session, 0)
        session.append(Event.new("turn/start", TurnStart(), agent="bot"))
        session.append(Event.new("user/message", Message.user("more"), agent="bot"))
        assert (_raw_messages(path, "a"), _raw_messages(path, "a", "turns")) == (2, 1)
        before = path.read_bytes()
        with open_store(f"sqlite:///{path}", read_only=True) as reader:
            [info] = reader.list(order="id")
            # The turn is open (no lock was taken for it: needs_recovery).
            assert (info.messages, info.turns, info.last_seq) == (3, 2, 6)
            assert info.status == "needs_recovery"
            assert [i.id for i in reader.list(where={"status": "needs_recovery"})] == ["a"]
            assert reader.list(where={"status": "idle"}) == []
        assert path.read_bytes() == before  # the reader wrote nothing
        assert (_raw_messages(path, "a"), _raw_messages(path, "a", "turns")) == (2, 1)
        session.append(Event.new("turn/end", TurnEnd(steps=0), agent="bot"))
        with open_store(f"sqlite:///{path}", read_only=True) as reader:
            [info] = reader.list(order="id")
            assert (info.messages, info.turns, info.status) == (3, 2, "idle")
        assert _listed(store) == _rebuilt(store)


def _answers(store: Any, encrypted: bool = False) -> dict[str, Any]:
    """What ``store`` answers to listings (every order, filters, pages by cursor), searches
    and totals: hits as sets (a store opened read-only ranks documents not indexed yet
    after the others)."""

    def rows(**kwargs: Any) -> list[tuple[Any, ...]]:
        return [(*_row(i), i.tags, i.tenant, i.created_at, i.updated_at) for i in
                store.list(**kwargs)]

    def pages(**kwargs: Any) -> list[list[str]]:
        out, cursor = [], None
        while True:
            page = store.list(limit=2, cursor=cursor, **kwargs)
            out.append([i.id for i in page])
            if page.next_cursor is None:
                return out
            cursor = page.next_cursor

    def hits(query: str, **kwargs: Any) -> set[tuple[Any, ...]]:
        found, cursor = set(), None
        while True:
            page = store.search(query, limit=3, cursor=cursor, **kwargs)
            found |= {(h.session_id, h.seq, h.role, h.rewound, h.compacted) for h in page}
            if page.next_cursor is None:
                return found
            cursor = page.next_cursor

    wheres: list[dict[str, Any]] = [
        {"tenant": "acme"},
        {"tag": "vip"},
        {"agent": "helper"},
        {"status": "idle"},
        {"status": "needs_recovery"},
        {"user": "ann"},
        {"id": ["open", "quiet", "new"]},
    ]
    if not encrypted:
        wheres.append({"title": "pandas"})  # (refused on an encrypted store)
    return {
        "orders": [rows(order=o) for o in ("updated", "created", "id")],
        "pages": [pages(order=o) for o in ("updated", "created", "id")],
        "wheres": [rows(where=w, order="id") for w in wheres],
        "filtered pages": pages(where={"status": "idle"}),
        "hits": [hits("pandas"), hits("pandas", where={"agent": "helper"}), hits("question")],
        "hits in": [hits("pandas", session_id=sid) for sid in ("open", "quiet", "rewound")],
        "totals": [store.totals(group_by=g) for g in ("tenant", "user", "agent", "day")],
        "totals where": store.totals(where={"tag": "vip"}, group_by="agent"),
    }


@pytest.mark.parametrize("encrypted", [False, True])
def test_a_read_only_reader_answers_as_a_caught_up_catalog_does(
    tmp_path: Path, encrypted: bool
) -> None:
    """A store opened read-only answers listings, searches and totals from the tables and,
    for the sessions whose rows are behind their logs, from rows caught up in memory: what a
    writer's catch-up then writes, and a rebuild makes."""
    path = tmp_path / "s.db"
    url = f"sqlite:///{path}"
    options: dict[str, Any] = {"passphrase": "pw"} if encrypted else {}
    usage = Usage(input_tokens=10, output_tokens=5, model="m")
    with open_store(url, **options) as store:
        done = store.get("done")
        _turn(done, 0)
        done.update(tenant="acme", tags=["vip"])
        quiet = store.get("quiet")
        _turn(quiet, 1)
        store.list()  # a writer's catch-up: the tables are current here
        # Mid-turn: the row has the session's first event only (no title, no agent yet).
        open_ = store.get("open")
        open_.append(Event.new("turn/start", TurnStart(), agent="bot"))
        open_.append(Event.new("user/message", Message.user("pandas mid turn"), user="ann"))
        open_.append(Event.new("usage", usage, agent="helper"))
        open_.update(tenant="acme")
        # Outside turns, fewer than 64 events since the last hand-over: marked only.
        for n in range(5):
            said = Message.user(f"pandas later {n}")
            quiet.append(Event.new("user/message", said, agent="helper"))
            quiet.append(Event.new("usage", usage, agent="helper"))
        quiet.update(tags=["vip"])
        # A rewind, then more in a turn (the rewind flags the earlier documents).
        rewound = store.get("rewound")
        for n in range(3):
            _turn(rewound, 10 + n)
        rewound.rewind(to_seq=4)
        rewound.append(Event.new("turn/start", TurnStart(), agent="bot"))
        rewound.append(Event.new("user/message", Message.user("pandas again")))
        # A session made by its first event only, and (encrypted) one shredded.
        store.get("new").append(Event.new("user/message", Message.user("a new question")))
        if encrypted:
            gone = store.get("gone")
            _turn(gone, 20)
            gone.append(Event.new("user/message", Message.user("secret pandas")))
            store.shred("gone")
        marked = len(_dirty(path))
        assert marked >= 3  # open, quiet, rewound (the others' hand-overs took their marks)
        assert [_raw_messages(path, sid) for sid in ("open", "quiet", "new")] == [0, 2, 1]
        before = path.read_bytes()
        with open_store(url, read_only=True, **options) as reader:
            read_only = _answers(reader, encrypted)
        assert path.read_bytes() == before  # the reader wrote nothing
        assert len(_dirty(path)) == marked
        assert read_only == _answers(store, encrypted)  # what a writer's catch-up writes
        assert _dirty(path) == []
        store.reindex()
        assert read_only == _answers(store, encrypted)
    with open_store(url, read_only=True, **options) as reader:  # the tables alone now
        assert read_only == _answers(reader, encrypted)


def test_a_read_only_reader_sees_a_turn_a_killed_writer_left_open(tmp_path: Path) -> None:
    """The command line (read-only) finds the session a writer left mid-turn (its turn's
    start only marked it) as needing recovery."""
    path = tmp_path / "s.db"
    with open_store(f"sqlite:///{path}") as store:
        session = store.get("a")
        _turn(session, 0)
        session.append(Event.new("turn/start", TurnStart(), agent="bot"))
        session.append(Event.new("user/message", Message.user("cut off"), agent="bot"))
    # The tables hold the session as of its first turn's end.
    assert sql_rows(path, "SELECT status, turns FROM catalog WHERE id = 'a'") == [("idle", 1)]
    with open_store(f"sqlite:///{path}", read_only=True) as reader:
        assert [i.id for i in reader.list(where={"status": "needs_recovery"})] == ["a"]
        assert reader.list(where={"status": "idle"}) == []
        [info] = reader.list()
        assert (info.status, info.messages, info.turns) == ("needs_recovery", 3, 2)


def test_the_command_line_lists_and_searches_what_a_writer_left_marked(tmp_path: Path) -> None:
    """``agentsession ls`` and ``search`` (a store opened read-only) see the appends outside
    turns and inside a turn a writer left to a catch-up, and the turn it left open."""
    import json

    from click.testing import CliRunner

    from agentsession.cli import cli

    path = tmp_path / "s.db"
    url = f"sqlite:///{path}"
    with open_store(url) as store:
        chat = store.get("chat")
        _turn(chat, 0)
        for n in range(3):
            chat.append(Event.new("user/message", Message.user(f"aside {n}"), agent="bot"))
        cut = store.get("cut")
        _turn(cut, 1)
        cut.append(Event.new("turn/start", TurnStart(), agent="bot"))
        cut.append(Event.new("user/message", Message.user("walrus question"), agent="bot"))
    assert [_raw_messages(path, sid) for sid in ("chat", "cut")] == [2, 2]

    def invoke(*args: str) -> str:
        result = CliRunner().invoke(cli, ["--store", url, *args], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        return result.stdout

    rows = {r["id"]: r for r in map(json.loads, invoke("ls", "--json", "--long").splitlines())}
    assert (rows["chat"]["last_seq"], rows["chat"]["messages"]) == (7, 5)
    assert (rows["cut"]["messages"], rows["cut"]["status"]) == (3, "needs_recovery")
    listed = invoke("ls", "--json", "--status", "needs_recovery").splitlines()
    assert [json.loads(line)["id"] for line in listed] == ["cut"]
    [hit] = [json.loads(line) for line in invoke("search", "walrus", "--json").splitlines()]
    assert (hit["session_id"], hit["seq"]) == ("cut", 6)
    assert [_raw_messages(path, sid) for sid in ("chat", "cut")] == [2, 2]  # nothing written


def test_two_writers_of_one_session_never_count_an_event_twice(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    one = open_store(f"sqlite:///{path}")
    two = open_store(f"sqlite:///{path}")
    try:
        a, b = one.get("s"), two.get("s")
        a.append(Event.new("turn/start", TurnStart(), agent="x"))
        a.append(Event.new("user/message", Message.user("from a"), agent="x"))
        b.append(Event.new("user/message", Message.user("from b"), agent="y"))  # outside a turn
        a.append(Event.new("assistant/message", Message.assistant("a again"), agent="x"))
        a.append(Event.new("turn/end", TurnEnd(steps=0), agent="x"))
        _turn(b, 1, agent="y")
        assert _listed(one) == _rebuilt(two)
        assert one.list()[0].messages == 5
    finally:
        one.close()
        two.close()


_WRITER = textwrap.dedent(
    """
    import sys
    import agentsession as ags
    from agentsession.events import TurnStart
    store = ags.open_store(sys.argv[1])
    session = store.get("killed")
    session.append(ags.Event.new("turn/start", TurnStart(), agent="bot"))
    for n in range(int(sys.argv[2])):
        session.append(ags.Event.new("user/message", ags.Message.user(f"m{n}"), agent="bot"))
    print("written", flush=True)
    sys.stdin.read()
    """
)


def kill_writer_mid_turn(url: str, messages: int) -> None:
    """Run a process that opens a turn on session ``killed`` of the store at ``url`` and
    appends ``messages`` user messages in it, then SIGKILL it (and reap it)."""
    run_then_kill(_WRITER, url, str(messages))


def run_then_kill(script: str, *args: str, timeout: float = 60) -> None:
    """Run ``script`` with ``args`` in a new Python process, wait for its ``written`` line,
    then SIGKILL it (wherever it has got to since) and reap it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert proc.stdout is not None
        assert readline_within(proc.stdout, timeout) == "written\n"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_writer_killed_mid_turn_is_caught_up_from_its_log(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    url = f"sqlite:///{path}"
    kill_writer_mid_turn(url, 7)
    assert _raw_messages(path, "killed") == 0  # the killed turn never reached its row
    with open_store(url, read_only=True) as reader:  # the command line's store
        [info] = reader.list(where={"status": "needs_recovery"})
        assert (info.id, info.messages, info.turns, info.last_seq) == ("killed", 7, 1, 8)
    with open_store(url) as store:
        [info] = store.list(order="id")
        assert (info.messages, info.turns, info.last_seq) == (7, 1, 8)
        assert _dirty(path) == []
        assert _listed(store) == _rebuilt(store)


def test_a_version_3_database_is_migrated_and_read_as_is_when_read_only(
    tmp_path: Path, monkeypatch: Any
) -> None:
    path = tmp_path / "v3.db"
    build_v2(path)
    with store_at_version(f"sqlite:///{path}", 3, monkeypatch):
        pass  # version 3: catalog filled from the logs
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone() == (3,)
    conn.close()
    before = path.read_bytes()
    with open_store(f"sqlite:///{path}", read_only=True) as reader:
        [info] = reader.list(order="id")
        assert (info.id, info.messages) == ("chat", 2)
    assert path.read_bytes() == before
    with open_store(f"sqlite:///{path}") as store:
        assert isinstance(store, sqlite_backend.SqliteStore)
        assert store.applied_migrations == (4, 5, 6)
        _turn(store.get("chat"), 9)
        assert store.list(order="id")[0].messages == 4
        assert _listed(store) == _rebuilt(store)


OPS = st.lists(
    st.tuples(
        st.sampled_from([0, 1]),  # which store object writes
        st.sampled_from(["a", "b"]),  # which session
        st.sampled_from(["start", "user", "assistant", "usage", "end", "list", "reopen"]),
    ),
    max_size=40,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_the_catalog_always_matches_a_rebuild(tmp_path_factory: Any, ops: list[Any]) -> None:
    path = tmp_path_factory.mktemp("db") / "s.db"
    stores = [open_store(f"sqlite:///{path}"), open_store(f"sqlite:///{path}")]
    try:
        for who, sid, op in ops:
            store = stores[who]
            session = store.get(sid)
            agent = f"agent{who}"
            if op == "start":
                session.append(Event.new("turn/start", TurnStart(), agent=agent))
            elif op == "end":
                session.append(Event.new("turn/end", TurnEnd(steps=0), agent=agent))
            elif op == "user":
                session.append(Event.new("user/message", Message.user(f"u {sid}"), agent=agent))
            elif op == "assistant":
                session.append(Event.new("assistant/message", Message.assistant("a"), agent=agent))
            elif op == "usage":
                session.append(
                    Event.new("usage", Usage(input_tokens=3, output_tokens=1), agent=agent)
                )
            elif op == "list":
                store.list(order="id")
            else:
                store.close()
                stores[who] = open_store(f"sqlite:///{path}")
        with open_store(f"sqlite:///{path}", read_only=True) as reader:
            read_only = _listed(reader)  # caught up in memory, before any writer's catch-up
        listed = _listed(stores[0])
        assert listed == read_only
        assert listed == _rebuilt(stores[1])
    finally:
        for store in stores:
            store.close()


# -- the JSONL store: the journal names a session at a turn's start and end ------------------


def _journal_entries(root: Path) -> int:
    journal = root / ".meta" / "catalog.journal"
    return sum(1 for line in journal.read_bytes().splitlines() if line.startswith(b'"'))


def test_jsonl_a_reader_finds_the_appends_inside_a_turn(tmp_path: Path) -> None:
    root = tmp_path / "store"
    writer, reader = open_store(str(root)), open_store(str(root))
    try:
        session = writer.get("a")
        session.append(Event.new("turn/start", TurnStart(), agent="bot"))
        session.append(Event.new("user/message", Message.user("first"), agent="bot"))
        [info] = reader.list(order="id")
        assert (info.messages, info.turns, info.last_seq) == (1, 1, 2)
        noted = _journal_entries(root)
        session.append(Event.new("assistant/message", Message.assistant("second"), agent="bot"))
        session.append(Event.new("user/message", Message.user("third"), agent="bot"))
        assert _journal_entries(root) == noted  # inside the turn: the journal is not written
        [info] = reader.list(order="id")  # found through the log of a session with a turn open
        assert (info.messages, info.last_seq) == (3, 4)
        assert [h.seq for h in reader.search("third")] == [4]
        session.append(Event.new("turn/end", TurnEnd(steps=0), agent="bot"))
        assert _journal_entries(root) > noted
        [info] = reader.list(order="id")
        assert (info.messages, info.last_seq, info.status) == (3, 5, "idle")
        assert _listed(reader) == _rebuilt(writer)
    finally:
        writer.close()
        reader.close()


def test_jsonl_a_writer_killed_mid_turn_loses_nothing_from_the_catalog(tmp_path: Path) -> None:
    root = tmp_path / "store"
    url = str(root)
    with open_store(url) as store:
        store.list()  # the sidecar exists before the writer starts
    kill_writer_mid_turn(url, 7)
    with open_store(url) as store:
        [info] = store.list(order="id")
        assert (info.messages, info.turns, info.last_seq) == (7, 1, 8)
        assert _listed(store) == _rebuilt(store)


def test_one_listing_catches_up_every_marked_session_however_many(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with open_store(f"sqlite:///{path}") as writer:
        for n in range(2100):  # more than any fixed number of rounds of 512
            session = writer.get(f"s{n:04d}")
            session.append(Event.new("turn/start", TurnStart(), agent="bot"))  # marks only
            session.append(Event.new("user/message", Message.user(f"hi {n}"), agent="bot"))
    assert len(_dirty(path)) == 2100
    with open_store(f"sqlite:///{path}") as store:
        listed = store.list(order="id")
        assert len(listed) == 2100 and all((i.messages, i.turns) == (1, 1) for i in listed)
        assert _dirty(path) == []


def test_appends_outside_turns_hand_over_the_first_event_and_every_64th(tmp_path: Path) -> None:
    assert core._LAZY_OUTSIDE_TURNS == 64
    path = tmp_path / "s.db"
    with open_store(f"sqlite:///{path}") as store:
        session = store.get("a")
        for n in range(140):
            session.append(Event.new("user/message", Message.user(f"m{n}"), agent="bot"))
            # The first event (it makes the row), then seqs 65 and 129 hand over what
            # waited; the rest only mark the session.
            handed = 1 if n < 64 else 65 if n < 128 else 129
            assert _raw_messages(path, "a") == handed, n
            # A hand-over takes the mark: the marks are the rows behind their logs.
            assert _dirty(path) == ([] if n + 1 == handed else [1]), n
        with open_store(f"sqlite:///{path}", read_only=True) as reader:
            # A reader opened read-only catches the rest up in memory.
            [info] = reader.list(order="id")
            assert (info.messages, info.last_seq) == (140, 140)
        session.rewind(to_seq=100)  # a rewind marker is handed over at once
        assert _raw_messages(path, "a", "last_seq") == 141 and _dirty(path) == []
        assert store.list(order="id")[0].messages == 140
        assert _listed(store) == _rebuilt(store)


def test_a_store_without_the_catalog_writes_no_mark_and_the_file_has_no_trigger(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    with open_store(f"sqlite:///{path}", catalog=False) as store:
        session = store.get("a")
        session.append(Event.new("turn/start", TurnStart(), agent="bot"))
        session.append(Event.new("user/message", Message.user("hi"), agent="bot"))
    assert _triggers(path) == []
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT count(*) FROM catalog_search_dirty").fetchone() == (0,)
    finally:
        conn.close()
    assert _dirty(path) == []
    with open_store(f"sqlite:///{path}") as store:
        assert store.list(where={"agent": "bot"}) == []  # not kept: reindex builds it
        assert store.reindex() == 1
        [info] = store.list(where={"agent": "bot"})
        assert (info.messages, info.turns) == (1, 1)


def _triggers(path: Path) -> list[str]:
    return [r[0] for r in sql_rows(path, "SELECT name FROM sqlite_master WHERE type = 'trigger'")]


def test_a_version_5_database_loses_its_triggers_and_keeps_its_marks(
    tmp_path: Path, monkeypatch: Any
) -> None:
    path = tmp_path / "v5.db"
    url = f"sqlite:///{path}"
    with store_at_version(url, 5, monkeypatch) as store:
        _turn(store.get("done"), 0)
        open_turn = store.get("open")
        _turn(open_turn, 1)
        open_turn.append(Event.new("turn/start", TurnStart(), agent="bot"))
        open_turn.append(Event.new("user/message", Message.user("mid-turn"), agent="bot"))
    assert sorted(_triggers(path)) == ["catalog_dirty_mark", "catalog_search_mark"]
    # Marked by version 5's trigger: the turn left open (the other session's turn end took
    # its mark, as version 6's appends do).
    assert len(_dirty(path)) == 1
    before = path.read_bytes()
    with open_store(url, read_only=True) as reader:  # read as it is, marks caught up in memory
        assert [(i.id, i.messages) for i in reader.list(order="id")] == [("done", 2), ("open", 3)]
        assert [h.session_id for h in reader.search("mid")] == ["open"]
    assert path.read_bytes() == before
    with open_store(url) as store:
        assert isinstance(store, sqlite_backend.SqliteStore)
        assert store.applied_migrations == (6,)
        assert _triggers(path) == []
        assert [(i.id, i.messages) for i in store.list(order="id")] == [("done", 2), ("open", 3)]
        session = store.get("done")
        session.append(Event.new("turn/start", TurnStart(), agent="bot"))
        assert len(_dirty(path)) == 1  # marked by the connection's own trigger
        assert [h.session_id for h in store.search("mid")] == ["open"]
        assert _listed(store) == _rebuilt(store)


def test_the_memory_store_takes_the_catalog_at_a_turns_end_and_catches_up_when_read() -> None:
    with open_store("memory:") as store:
        index = store._index
        session = store.get("a")
        _turn(session, 0)
        assert (index.rows["a"].messages, index.marked) == (2, set())
        session.append(Event.new("turn/start", TurnStart(), agent="bot"))
        session.append(Event.new("user/message", Message.user("inside pandas"), agent="bot"))
        assert (index.rows["a"].messages, index.rows["a"].turns) == (2, 1)  # not written yet
        assert index.marked == {"a"} and 3 not in index.documents.get("a", {})
        [info] = store.list(order="id")  # reading the catalog catches up
        assert (info.messages, info.turns, index.marked) == (3, 2, set())
        assert [h.seq for h in store.search("inside")] == [6]  # documents indexed then too
        session.append(Event.new("turn/end", TurnEnd(steps=0), agent="bot"))
        assert index.marked == set() and index.rows["a"].last_seq == 7
        assert _listed(store) == _rebuilt(store)
        assert sorted(h.seq for h in store.search("pandas")) == [2, 6]


def test_a_branch_row_is_caught_up_from_its_log_whatever_its_seqs(tmp_path: Path) -> None:
    path = tmp_path / "s.db"

    def counts(store: Any) -> list[tuple[str, int, int]]:
        return [(i.id, i.last_seq, i.messages) for i in store.list(order="id")]

    with open_store(f"sqlite:///{path}") as store:
        origin = store.get("o")
        for n in range(3):
            _turn(origin, n)
        branch = origin.branch(at_seq=4)
        for n in range(3):
            _turn(branch, 10 + n)
            # A branch's row counts the shared history, its log's seqs do not: the marks a
            # listing clears in one statement are never a branch's.
            listed = counts(store)
            store.reindex()
            assert listed == counts(store)
        branch.append(Event.new("turn/start", TurnStart(), agent="bot"))
        branch.append(Event.new("user/message", Message.user("mid"), agent="bot"))
        assert {sid: seq for sid, seq, _ in counts(store)}[branch.id] == branch.latest_seq
