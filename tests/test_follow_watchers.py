"""The backends' watchers of other processes' appends (``agentsession.follow.Watcher``): inotify
on a JSONL directory (and a poll of its files where inotify is unavailable), agentkit's layout
and the single-file store, and ``PRAGMA data_version`` on SQLite. A writer runs in another
process; the follower here yields every event once, in order, and the watcher thread ends with
the follower or the store."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import agentsession as ags
from agentsession import Event, Message
from agentsession.backends.jsonl import watch
from agentsession.backends.jsonl.single import JsonlFileStore
from agentsession.backends.sqlite import DataVersionWatcher
from agentsession.events import decode

WATCH_THREAD = "agentsession-watch"

_WRITER = textwrap.dedent(
    """
    import json, sys, time
    import agentsession as ags
    from agentsession import Event, Message
    from agentsession.backends.jsonl.single import JsonlFileStore

    target, options, ids, count = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
    if options.pop("single", False):
        store = JsonlFileStore(target, **options)
    else:
        store = ags.open_store(target, **options)
    sessions = [store.get(sid) for sid in json.loads(ids)]
    for i in range(int(count)):
        for session in sessions:
            session.append(Event.new("assistant/message", Message.assistant(f"{i}")))
        time.sleep(0.005)
    if len(sys.argv) > 5:
        for session in sessions:
            store.delete(session.id)
    store.close()
    """
)


def _write(
    target: str, ids: list[str], count: int, *, delete: bool = False, **options: Any
) -> subprocess.Popen[bytes]:
    """A writer process appending ``count`` events to each of ``ids`` (then deleting them)."""
    args = [sys.executable, "-c", _WRITER, target, json.dumps(options), json.dumps(ids), str(count)]
    return subprocess.Popen([*args, "delete"] if delete else args)


def _watch_threads() -> int:
    return sum(t.name == WATCH_THREAD for t in threading.enumerate())


def _no_watch_thread() -> bool:
    return _until(lambda: _watch_threads() == 0, 10)


def _until(condition: Callable[[], bool], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def _texts(events: list[Event]) -> list[str]:
    return [decode(e.data, Message).text for e in events]


@pytest.fixture(params=["jsonl", "jsonl-agentkit", "jsonl-poll", "jsonl-file", "sqlite"])
def backend(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Callable[[], ags.BaseStore], str, dict[str, Any]]]:
    """How to open the store here, its target for the writer process, and the writer's
    options."""
    kind = request.param
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'store.db'}"
        yield (lambda: ags.open_store(url)), url, {}
    elif kind == "jsonl-file":
        path = str(tmp_path / "one" / "chat.jsonl")
        yield (lambda: JsonlFileStore(path, session_id="cli:chat")), path, {
            "single": True,
            "session_id": "cli:chat",
        }
    else:
        if kind == "jsonl-poll":
            monkeypatch.setattr(watch, "_inotify_calls", lambda: None)
        options = {"dialect": "agentkit"} if kind == "jsonl-agentkit" else {}
        root = str(tmp_path / "store")
        yield (lambda: ags.open_store(root, **options)), root, options


def test_a_follower_yields_another_process_appends_once_in_order(
    backend: tuple[Callable[[], ags.BaseStore], str, dict[str, Any]],
) -> None:
    opener, target, options = backend
    sid = "cli:chat"
    with opener() as store:
        store.get(sid).append(Event.new("assistant/message", Message.assistant("before")))
        got: list[Event] = []
        follower = store.get(sid).follow(after=1, timeout=15)
        writer = _write(target, [sid], 30, **options)
        for event in follower:
            got.append(event)
            if len(got) == 30:
                break
        assert _watch_threads() == 1  # the follower's generator still holds its subscription
        follower.close()
        assert writer.wait(30) == 0
        assert [e.seq for e in got] == list(range(2, 32))
        assert _texts(got) == [str(i) for i in range(30)]
        assert _no_watch_thread()


def test_the_watcher_thread_ends_when_the_store_closes(
    backend: tuple[Callable[[], ags.BaseStore], str, dict[str, Any]],
) -> None:
    opener, _, _ = backend
    store = opener()
    follower = store.get("cli:chat").follow(timeout=30)
    ended: list[BaseException | None] = []

    def follow() -> None:
        try:
            for _ in follower:
                pass
        except Exception as exc:  # the store closed under it
            ended.append(exc)
        else:
            ended.append(None)

    thread = threading.Thread(target=follow)
    thread.start()
    assert _until(lambda: _watch_threads() == 1, 10)
    store.close()
    assert _no_watch_thread()
    thread.join(10)  # woken by the close, its next read finds the store closed
    assert not thread.is_alive()
    assert len(ended) == 1 and isinstance(ended[0], ags.UsageError)


def _record(
    run: Callable[[Callable[[str | None], None], threading.Event], None],
) -> tuple[list[str | None], threading.Event, threading.Thread]:
    told: list[str | None] = []
    stop = threading.Event()
    ready = threading.Event()

    def changed(session_id: str | None) -> None:
        if not ready.is_set():  # the first sign says it watches: what follows is recorded
            assert session_id is None
            ready.set()
            return
        told.append(session_id)

    thread = threading.Thread(target=run, args=(changed, stop))
    thread.start()
    assert ready.wait(10)
    return told, stop, thread


@pytest.mark.parametrize("inotify", [True, False])
@pytest.mark.parametrize("dialect", ["agentsession", "agentkit"])
def test_the_file_watcher_names_the_session_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inotify: bool, dialect: str
) -> None:
    if not inotify:
        monkeypatch.setattr(watch, "_inotify_calls", lambda: None)
    root = str(tmp_path / "store")
    ids = ["cli:a", "b/c", "plain"]
    with ags.open_store(root, dialect=dialect) as store:
        for sid in ids:
            store.get(sid).append(Event.new("assistant/message", Message.assistant("x")))
        watcher = store._files.watcher()
        told, stop, thread = _record(watcher.run)
        try:
            assert _write(root, ids[:2], 3, dialect=dialect).wait(30) == 0
            assert _until(lambda: set(told) >= set(ids[:2]))
        finally:
            stop.set()
            thread.join(2)
        assert not thread.is_alive()
        assert watcher.mode == ("inotify" if inotify and sys.platform == "linux" else "poll")
        assert set(told) == set(ids[:2])


def test_the_file_watcher_says_any_session_for_a_name_it_cannot_read_back(
    tmp_path: Path,
) -> None:
    with ags.open_store(str(tmp_path), dialect="agentkit") as store:
        watcher = store._files.watcher()
        told, stop, thread = _record(watcher.run)
        try:
            (tmp_path / "written_by_agentkit.jsonl").write_text("{}\n")  # no id beside it
            (tmp_path / "notes.txt").write_text("not a session file\n")
            assert _until(lambda: bool(told))
            time.sleep(0.1)
        finally:
            stop.set()
            thread.join(2)
        assert told and set(told) == {None}


def test_the_file_watcher_stops_soon_after_it_is_told_and_closes_its_descriptor(
    tmp_path: Path,
) -> None:
    watcher = watch.FileWatcher(str(tmp_path), lambda name: name)
    opened: list[watch.Inotify] = []
    real_open = watch.Inotify.open

    def spy(directory: str) -> watch.Inotify | None:
        made = real_open(directory)
        if made is not None:
            opened.append(made)
        return made

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(watch.Inotify, "open", staticmethod(spy))
        told, stop, thread = _record(watcher.run)
        started = time.monotonic()
        stop.set()
        thread.join(2)
    assert not thread.is_alive() and time.monotonic() - started < 0.5
    assert all(w.fd == -1 for w in opened)
    assert told == []


def test_the_poll_sees_a_file_replaced_and_deleted(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text("one\n")
    (tmp_path / "b.jsonl").write_text("one\n")
    watcher = watch.FileWatcher(str(tmp_path), lambda name: name[:-6], poll_interval=0.01)
    told, stop, thread = _record(watcher._poll)
    try:
        (tmp_path / "new.jsonl").write_text("two\n")
        (tmp_path / "b.jsonl").unlink()
        assert _until(lambda: {"b", "new"} <= set(told))
    finally:
        stop.set()
        thread.join(2)
    assert not thread.is_alive()
    assert set(told) == {"b", "new"}


def test_the_sqlite_watcher_names_the_sessions_that_grew_or_went(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with ags.open_store(url) as store:
        for sid in ("a", "b", "quiet"):
            store.get(sid).append(Event.new("assistant/message", Message.assistant("x")))
        db = str(tmp_path / "store.db")
        told, stop, thread = _record(DataVersionWatcher(db, None).run)
        try:
            assert _write(url, ["a", "b"], 3).wait(30) == 0
            assert _until(lambda: {"a", "b"} <= set(told))
            growth = set(told)
            told.clear()
            assert _write(url, ["a"], 1, delete=True).wait(30) == 0
            assert _until(lambda: "a" in told)
            time.sleep(0.05)
        finally:
            stop.set()
            thread.join(2)
        assert not thread.is_alive()
        assert growth == {"a", "b"}
        assert set(told) == {"a"}


def test_the_sqlite_watcher_says_any_session_beyond_the_sessions_it_looks_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentsession.backends import sqlite

    monkeypatch.setattr(sqlite, "_HEADS", sqlite._HEADS.replace("LIMIT 1001", "LIMIT 2"))
    monkeypatch.setattr(sqlite, "_HEADS_AT_MOST", 1)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with ags.open_store(url) as store:
        for sid in ("a", "b"):
            store.get(sid).append(Event.new("assistant/message", Message.assistant("x")))
        told, stop, thread = _record(DataVersionWatcher(str(tmp_path / "store.db"), None).run)
        try:
            assert _write(url, ["a"], 1).wait(30) == 0
            assert _until(lambda: bool(told))
        finally:
            stop.set()
            thread.join(2)
        assert told and set(told) == {None}


def test_the_sqlite_watcher_still_sees_changes_after_a_quiet_spell(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with ags.open_store(url) as store:
        session = store.get("a")
        session.append(Event.new("assistant/message", Message.assistant("x")))
        watcher = DataVersionWatcher(
            str(tmp_path / "store.db"), None, interval=0.001, idle_interval=0.2, quiet=0.05
        )
        told, stop, thread = _record(watcher.run)  # quiet by now: the slower looks
        try:
            for text in ("y", "z"):
                session.append(Event.new("assistant/message", Message.assistant(text)))
                assert _until(lambda: len(told) == 1)
                told.clear()
                time.sleep(0.1)  # quiet again
        finally:
            stop.set()
            thread.join(2)
        assert not thread.is_alive()
