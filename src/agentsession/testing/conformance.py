"""The storage contract every backend must pass, as one abstract pytest class."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ..chat.identity import (
    active_session,
    agent_binding,
    bind_agent,
    cli_current,
    set_active_session,
    set_cli_current,
)
from ..copying import copy_store
from ..errors import (
    ConflictError,
    DuplicateSession,
    LockTimeout,
    SessionExpired,
    SessionNotFound,
    StorageError,
    UsageError,
)
from ..events import Event, decode, encode_event
from ..messages import Message, ToolCall, ToolResult
from ..session import BaseSession
from ..storage import Reopen
from ..store import BaseStore, open_store
from ._processes import OPEN as _OPEN
from ._processes import child_env as _child_env
from ._processes import run_released
from .children import ChildSessionConformance
from .encryption import EncryptionConformance
from .rewind import RewindConformance

__all__ = [
    "FakeClock",
    "StoreConformance",
    "kill_writer_mid_append",
    "run_children",
    "start_lock_holder",
]


class FakeClock:
    """A settable UTC clock for TTL and cache tests."""

    def __init__(self, start: dt.datetime | None = None) -> None:
        self.now = start or dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        """Move the clock forward by ``timedelta(**delta)``."""
        self.now += dt.timedelta(**delta)


_APPENDER = _OPEN + textwrap.dedent(
    """
    import os, sys, time
    import agentsession as ags
    url, sid, go = sys.argv[1], sys.argv[2], sys.argv[5]
    writer, count = int(sys.argv[3]), int(sys.argv[4])
    store = ags.open_store(url, **_options)
    session = store.get(sid)
    while not os.path.exists(go):
        time.sleep(0.001)
    for i in range(count):
        session.append(ags.Event.new("test/append", {"writer": writer, "i": i}))
    store.close()
    """
)


_SAME_IDS = _OPEN + textwrap.dedent(
    """
    import json, os, sys, time
    import agentsession as ags
    url, sid, go = sys.argv[1], sys.argv[2], sys.argv[5]
    writer, count, writers = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[6])
    store = ags.open_store(url, **_options)
    session = store.get(sid)
    session.latest_seq
    # Every writer has the session open before any appends (see docs/reliability.md: a
    # session object recognises the ids of what it read since it opened).
    open(f"{go}.ready-{writer}", "w").close()
    ready = [f"{go}.ready-{w}" for w in range(writers)]
    while not os.path.exists(go) or not all(map(os.path.exists, ready)):
        time.sleep(0.001)
    def event(i):
        return ags.Event.new("test/once", {"i": i, "writer": writer}, id=f"queue:msg-{i}")
    got = {}
    i = 0
    # Writer 0 appends one event per call; the others in batches of 2 to 4 whose bounds
    # differ between writers, so that their batches overlap only in part.
    while i < count:
        size = 1 if writer == 0 else 2 + (i // 7 + writer) % 3
        ids = range(i, min(i + size, count))
        if size == 1:
            got[i] = session.append(event(i))
        else:
            got.update(zip(ids, session.append_many([event(n) for n in ids])))
        i += size
    print(json.dumps(got))
    store.close()
    """
)


def run_children(
    args: list[list[str]], go_file: Path, timeout: float = 180.0, key: bytes | None = None
) -> None:
    """Start one Python child per argument list running the appender, release them together,
    and wait; every child is killed if anything goes wrong."""
    run_released(_APPENDER, args, go_file, timeout, key)


_LOCK_HOLDER = _OPEN + textwrap.dedent(
    """
    import sys, time
    import agentsession as ags
    store = ags.open_store(sys.argv[1], **_options)
    session = store.get(sys.argv[2])
    lock = store.lock(sys.argv[2], timeout=30)
    with session.turn(agent="crashy") as turn:
        turn.user("do the thing")
        with turn.step() as step:
            step.assistant("calling", tool_calls=[ags.ToolCall("call-1", "slow_tool", {})])
            print("holding", flush=True)
            time.sleep(600)
    """
)


_KILLED_WRITER = _OPEN + textwrap.dedent(
    """
    import sys
    import agentsession as ags
    store = ags.open_store(sys.argv[1], **_options)
    session = store.get(sys.argv[2])
    n = 0
    while True:
        size = 1 + n % 5
        filler = "x" * (200 if n % 3 else 300_000)
        session.append_many([
            ags.Event.new("test/batch", {"batch": n, "i": i, "of": size, "filler": filler})
            for i in range(size)
        ])
        print(n, flush=True)
        n += 1
    """
)


def kill_writer_mid_append(
    url: str, session_id: str, after_batches: int, key: bytes | None = None
) -> int:
    """Run a child appending batches of 1..5 events (some of 300 KB) to ``session_id``,
    SIGKILL it once it acknowledged ``after_batches`` batches, and return the number of the
    last batch it acknowledged."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, url, session_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_child_env(key),
    )
    try:
        acknowledged = -1
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        while acknowledged < after_batches and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                raise AssertionError(proc.stderr.read() if proc.stderr else "writer died")
            acknowledged = int(line)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        return acknowledged
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def start_lock_holder(url: str, session_id: str, key: bytes | None = None) -> subprocess.Popen[str]:
    """A child that takes the session's turn lock, opens a turn with an unanswered tool call,
    prints ``holding`` and sleeps until killed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _LOCK_HOLDER, url, session_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_child_env(key),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "holding":
        proc.kill()
        proc.wait()
        raise AssertionError(
            f"lock holder failed: {line} {proc.stderr.read() if proc.stderr else ''}"
        )
    return proc


def _reap(pids: list[int], timeout: float) -> None:
    """Wait for forked children; kill those still running after ``timeout`` seconds and fail."""
    deadline = time.monotonic() + timeout
    stuck = []
    for pid in pids:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                assert os.waitstatus_to_exitcode(status) == 0, f"child {pid} failed"
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                stuck.append(pid)
                break
            time.sleep(0.01)
    assert not stuck, f"forked children {stuck} never finished (blocked in a shared lock?)"


def _payloads(events: list[Event]) -> list[Any]:
    return [decode(e.data) for e in events]


class StoreConformance(EncryptionConformance, ChildSessionConformance, RewindConformance):
    """Subclass per backend and implement :meth:`make_store`."""

    durable: bool = True
    """Whether a second store made on the same ``tmp_path`` sees the first one's data."""
    shared_across_processes: bool = True
    """Whether several processes can open the store through its ``url``."""
    encryption_key: bytes | None = None
    """The 32-byte key the store under test is encrypted with (None: not encrypted); child
    processes get it through the environment. ``make_store`` passes it as ``key=``."""

    def make_store(self, tmp_path: Path, **options: Any) -> BaseStore:
        """The one factory hook: a store keeping its data under ``tmp_path`` (or wherever the
        backend keeps it), with ``options`` passed to the backend."""
        raise NotImplementedError

    def session_file(self, store: BaseStore, session_id: str) -> Path | None:
        """For a backend that keeps each session in a file of its own: that file's path (the
        symlink tests plant a link there). None (the default) skips those tests."""
        return None

    # -- fixtures -------------------------------------------------------------------------

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[BaseStore]:
        store = self.make_store(tmp_path)
        try:
            yield store
        finally:
            store.close()

    def reopen(self, store: BaseStore, tmp_path: Path, **options: Any) -> BaseStore:
        """A second store on the same data (the same store when data is not durable)."""
        if not self.durable:
            return store
        return self.make_store(tmp_path, **options)

    # -- order, seqs, batches -------------------------------------------------------------

    def test_append_assigns_consecutive_seqs_from_one(self, store: BaseStore) -> None:
        session = store.get("order")
        seqs = [session.append(Event.new("test/n", {"n": n})) for n in range(5)]
        assert seqs == [1, 2, 3, 4, 5]
        assert session.latest_seq == 5

    def test_read_returns_every_event_in_order_with_its_payload(self, store: BaseStore) -> None:
        session = store.get("order")
        for n in range(20):
            session.append(Event.new("test/n", {"n": n}, agent="a", user="u"))
        events = session.read()
        assert [e.seq for e in events] == list(range(1, 21))
        assert _payloads(events) == [{"n": n} for n in range(20)]
        assert all(e.agent == "a" and e.user == "u" for e in events)

    def test_batch_gets_consecutive_seqs_and_reads_back_whole(self, store: BaseStore) -> None:
        session = store.get("batch")
        session.append(Event.new("test/n", {"n": -1}))
        seqs = session.append_many([Event.new("test/n", {"n": n}) for n in range(10)])
        assert seqs == list(range(2, 12))
        assert _payloads(session.read(after=1)) == [{"n": n} for n in range(10)]
        assert session.append_many([]) == []

    def test_invalid_batch_writes_nothing(self, store: BaseStore) -> None:
        session = store.get("batch")
        session.append(Event.new("test/n", {"n": 0}))
        bad: list[Any] = [Event.new("test/n", {"n": 1}), {"not": "an event"}]
        with pytest.raises(UsageError):
            session.append_many(bad)
        with pytest.raises(UsageError):
            session.append(Event.new("", {"n": 2}))
        assert session.latest_seq == 1
        assert len(session.read()) == 1

    def test_caller_supplied_seq_is_replaced(self, store: BaseStore) -> None:
        session = store.get("seq")
        assert session.append(Event(seq=99, type="test/n")) == 1
        assert session.read()[0].seq == 1

    def test_seqs_continue_after_reopen(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path, max_cached_sessions=0)
        session = store.get("reopen")
        for n in range(3):
            session.append(Event.new("test/n", {"n": n}))
        if self.durable:
            store.close()
            store = self.make_store(tmp_path)
        try:
            reopened = store.get("reopen")
            assert reopened is not session
            assert reopened.latest_seq == 3
            assert reopened.append(Event.new("test/n", {"n": 3})) == 4
            assert [e.seq for e in reopened.read()] == [1, 2, 3, 4]
        finally:
            store.close()

    def test_concurrent_threads_get_unique_gap_free_seqs(self, store: BaseStore) -> None:
        session = store.get("threads")
        errors: list[BaseException] = []

        def work(writer: int) -> None:
            try:
                for i in range(50):
                    if i % 10 == 0:
                        session.append_many(
                            [Event.new("test/t", {"w": writer, "i": i, "b": b}) for b in range(3)]
                        )
                    else:
                        session.append(Event.new("test/t", {"w": writer, "i": i}))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(w,)) for w in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        events = session.read()
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert len(events) == 6 * (45 + 5 * 3)
        # Batches stay contiguous.
        for i, event in enumerate(events):
            data = decode(event.data)
            if data.get("b") == 0:
                following = [decode(e.data) for e in events[i : i + 3]]
                assert [(d["w"], d["i"], d.get("b")) for d in following] == [
                    (data["w"], data["i"], b) for b in range(3)
                ]

    def test_concurrent_processes_get_unique_gap_free_seqs(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        if not self.shared_across_processes:
            pytest.skip("this backend's data is not shared between processes")
        go = tmp_path / "go-processes"
        run_children(
            [[store.url, "shared", str(w), "500", str(go)] for w in range(4)],
            go,
            key=self.encryption_key,
        )
        events = store.get("shared").read()
        assert [e.seq for e in events] == list(range(1, 2001))
        seen = sorted((d["writer"], d["i"]) for d in _payloads(events))
        assert seen == sorted((w, i) for w in range(4) for i in range(500))

    def test_eight_processes_appending_to_one_session_get_seqs_1_to_2000(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        if not self.shared_across_processes:
            pytest.skip("this backend's data is not shared between processes")
        go = tmp_path / "go-eight"
        run_children(
            [[store.url, "eight", str(w), "250", str(go)] for w in range(8)],
            go,
            key=self.encryption_key,
        )
        events = store.get("eight").read()
        assert [e.seq for e in events] == list(range(1, 2001))
        assert len({(d["writer"], d["i"]) for d in _payloads(events)}) == 2000

    @pytest.mark.parametrize("after_batches", [20, 45])
    def test_writer_killed_mid_append_leaves_whole_batches_and_gap_free_seqs(
        self, store: BaseStore, after_batches: int
    ) -> None:
        if not self.shared_across_processes:
            pytest.skip("this backend's data is not shared between processes")
        acknowledged = kill_writer_mid_append(
            store.url, "crash", after_batches, key=self.encryption_key
        )
        events = store.get("crash").read()
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        batches: dict[int, list[int]] = {}
        for event in events:
            data = decode(event.data)
            batches.setdefault(data["batch"], []).append(data["i"])
        # Every acknowledged batch survived the kill (durability "flush"), and every batch is
        # whole: all of its events or none.
        assert set(range(acknowledged + 1)) <= set(batches)
        for batch, items in batches.items():
            assert items == list(range(1 + batch % 5)), batch
        session = store.get("crash")
        assert session.append(Event.new("test/after")) == len(events) + 1

    def test_two_stores_on_the_same_data_see_each_others_appends(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        if not self.durable:
            pytest.skip("data is not shared between stores on this backend")
        other = self.reopen(store, tmp_path)
        try:
            a, b = store.get("both"), other.get("both")
            assert a.append(Event.new("test/n", {"from": "a"})) == 1
            assert b.append(Event.new("test/n", {"from": "b"})) == 2
            assert a.append(Event.new("test/n", {"from": "a"})) == 3
            assert b.latest_seq == 3
            assert _payloads(b.read()) == [{"from": "a"}, {"from": "b"}, {"from": "a"}]
        finally:
            other.close()

    def test_opening_a_long_session_reads_only_its_tail(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        if not self.durable:
            pytest.skip("data is not shared between stores on this backend")
        padding = "p" * 1000
        writer = store.get("long")
        for n in range(300):  # ~300 KB: far more than a tail
            writer.append(Event.new("user/message", Message.user(f"m{n} {padding}")))
        other = self.reopen(store, tmp_path)
        try:
            session = other.get("long")
            assert len(session._window) < 300  # opened at the tail, not the history
            assert session.latest_seq == 300
            assert [e.seq for e in session.read(after=290)] == list(range(291, 301))
            assert session.append(Event.new("test/n", {"n": 301})) == 301
            assert len(session._window) < 300
            assert [m.text for m in session.messages()][-1] == f"m299 {padding}"
            assert len(session.read()) == 301
        finally:
            other.close()

    def test_a_lazily_opened_session_agrees_with_a_full_load_under_concurrent_writers(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        """Random interleavings of two writers on one log, each opened lazily: every read,
        latest_seq and messages() equals what a fresh store reading the whole log returns."""
        if not self.durable:
            pytest.skip("data is not shared between stores on this backend")
        import random

        rng = random.Random(1234)
        other = self.reopen(store, tmp_path)
        checker = self.reopen(store, tmp_path)
        try:
            for round_ in range(4):
                sid = f"lazy{round_}"
                a, b = store.get(sid), other.get(sid)
                for step in range(120):
                    who = a if rng.random() < 0.5 else b
                    roll = rng.random()
                    if roll < 0.45:
                        text = f"q{step} " + "x" * rng.randrange(0, 3000)
                        who.append(Event.new("user/message", Message.user(text)))
                    elif roll < 0.8:
                        who.append(Event.new("assistant/message", Message.assistant(f"a{step}")))
                    elif roll < 0.85 and who.latest_seq > 4:
                        who.compact(f"summary at {step}", keep_turns=rng.randrange(1, 4))
                    elif roll < 0.9:
                        who.close()  # reopens its files or connections on next use
                    else:
                        reader = store.get(sid) if who is a else other.get(sid)
                        assert reader.latest_seq == checker.get(sid).latest_seq
                    if rng.random() < 0.2:
                        fresh = self.reopen(store, tmp_path)
                        try:
                            truth = fresh.get(sid)
                            view = a if rng.random() < 0.5 else b
                            assert view.messages() == truth.messages()
                            assert view.latest_seq == truth.latest_seq
                            after = rng.randrange(0, truth.latest_seq + 1)
                            assert view.read(after=after) == truth.read(after=after)
                            assert view.read(after=after, limit=3) == truth.read(
                                after=after, limit=3
                            )
                        finally:
                            fresh.close()
        finally:
            other.close()
            checker.close()

    def test_held_session_survives_cache_eviction(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path, max_cached_sessions=1)
        try:
            held = store.get("held")
            held.append(Event.new("user/message", Message.user("first")))
            store.get("other").append(Event.new("test/n", {}))  # evicts "held"
            fresh = store.get("held")
            assert fresh is not held
            assert fresh.append(Event.new("user/message", Message.user("second"))) == 2
            assert held.append(Event.new("user/message", Message.user("third"))) == 3
            assert [m.text for m in held.messages()] == ["first", "second", "third"]
            assert [m.text for m in fresh.messages()] == ["first", "second", "third"]
        finally:
            store.close()

    # -- isolation and content ------------------------------------------------------------

    def test_sessions_are_isolated(self, store: BaseStore) -> None:
        a, b = store.get("slack:C001"), store.get("slack:C002")
        a.append(Event.new("user/message", Message.user("for a")))
        b.append(Event.new("user/message", Message.user("for b")))
        b.append(Event.new("user/message", Message.user("for b again")))
        assert [m.text for m in a.messages()] == ["for a"]
        assert [m.text for m in b.messages()] == ["for b", "for b again"]
        assert (a.latest_seq, b.latest_seq) == (1, 2)

    def test_similar_ids_never_share_storage(self, store: BaseStore) -> None:
        ids = ["a:b", "a_b", "a/b", "a.b", "a..b", "A:b", "a%3Ab", "a b", ".", ".."]
        for n, sid in enumerate(ids):
            store.get(sid).append(Event.new("test/id", {"n": n}))
        for n, sid in enumerate(ids):
            assert _payloads(store.get(sid).read()) == [{"n": n}], sid
        assert sorted(i.id for i in store.list()) == sorted(ids)

    def test_unicode_round_trips_including_nul_and_lone_surrogates(self, store: BaseStore) -> None:
        texts = [
            "héllo wörld",
            "日本語のテキスト",
            "emoji 🎉👩‍💻",
            "nul\x00byte",
            "lone \ud800 high",
            "lone \udfff low",
            "rtl \u202e mark",
            "line\u2028sep",
            "<>&'\"",
        ]
        session = store.get("unicode:ü🎉")
        for text in texts:
            session.append(
                Event.new(
                    "user/message",
                    Message.user(text),
                    agent="agent-é",
                    user="ü\ud800",
                    meta={"note": text},
                )
            )
        events = session.read()
        assert [decode(e.data, Message).text for e in events] == texts
        assert [e.meta["note"] for e in events] == texts
        assert all(e.agent == "agent-é" and e.user == "ü\ud800" for e in events)
        assert [m.text for m in session.messages()] == texts
        assert "unicode:ü🎉" in [i.id for i in store.list()]

    def test_large_payloads_round_trip(self, store: BaseStore) -> None:
        session = store.get("large")
        big = "x" * (2 << 20) + "ü"
        session.append(Event.new("tool/result", ToolResult("c1", "read", big)))
        session.append(Event.new("test/n", {"after": True}))
        events = session.read()
        assert decode(events[0].data, ToolResult).content == big
        assert decode(events[1].data) == {"after": True}

    def test_read_after_and_limit(self, store: BaseStore) -> None:
        session = store.get("paging")
        for n in range(10):
            session.append(Event.new("test/n", {"n": n}))
        assert [e.seq for e in session.read(after=7)] == [8, 9, 10]
        assert [e.seq for e in session.read(after=2, limit=3)] == [3, 4, 5]
        assert [e.seq for e in session.read(limit=2)] == [1, 2]
        assert session.read(after=10) == []
        assert session.read(after=3, limit=0) == []
        with pytest.raises(UsageError):
            session.read(after=-1)
        with pytest.raises(UsageError):
            session.read(limit=-1)

    def test_unknown_event_types_round_trip_unchanged(self, store: BaseStore) -> None:
        session = store.get("unknown")
        payload = {"nested": {"list": [1, 2.5, None, True, "s"]}, "Key": "Value", "empty": {}}
        session.append(Event.new("plugin/custom-thing", payload, meta={"k": 1}))
        session.append(Event.new("plugin/no-data"))
        events = session.read()
        assert events[0].type == "plugin/custom-thing"
        assert events[0].payload() == payload
        assert events[0].meta == {"k": 1}
        assert events[1].payload() is None

    def test_time_is_stamped_in_utc_when_unset_and_kept_when_set(self, store: BaseStore) -> None:
        session = store.get("time")
        before = dt.datetime.now(dt.timezone.utc)
        session.append(Event.new("test/n"))
        given = dt.datetime(2025, 5, 6, 7, 8, 9, 123456, tzinfo=dt.timezone.utc)
        session.append(Event.new("test/n", time=given))
        first, second = session.read()
        assert first.time is not None
        assert first.time.utcoffset() == dt.timedelta(0)
        assert before - dt.timedelta(seconds=5) <= first.time <= before + dt.timedelta(minutes=1)
        assert second.time == given

    def test_messages_are_derived_from_the_log(self, store: BaseStore) -> None:
        session = store.get("derive")
        call = ToolCall("c1", "read", {"path": "a.py"})
        session.append(Event.new("user/message", Message.user("read a.py")))
        session.append(Event.new("assistant/message", Message.assistant("ok", tool_calls=[call])))
        history = session.messages()
        assert [m.role for m in history] == ["user", "assistant", "tool"]
        assert history[2].tool_results[0].audit == {"decision": "interrupted"}
        session.append(Event.new("tool/result", ToolResult("c1", "read", "print(1)")))
        history = session.messages()
        assert history[2].tool_results[0].content == "print(1)"

    def test_the_recorder_refuses_what_the_history_would_lose_and_keeps_the_running_turn(
        self, store: BaseStore
    ) -> None:
        session = store.get("recorder-rules")
        with session.turn(agent="a") as turn:
            turn.user("deploy")
            with turn.step() as step:
                step.assistant(tool_calls=[ToolCall("approve", "deploy")])
                with pytest.raises(UsageError, match=r"open calls: 'approve'"):
                    step.tool_result("made-up", "deploy", "never called")
        with pytest.raises(UsageError, match="closed"):
            step.usage(1, 1)
        with pytest.raises(UsageError, match="closed"):
            turn.user("after the end")
        kinds = [e.type for e in session.read()]
        assert kinds.count("tool/result") == 0 and kinds.count("user/message") == 1
        with session.turn(agent="a") as turn:
            turn.user("approved")
            turn.tool_result("approve", "deploy", "deployed")  # the call an earlier turn left
            assert session.compact("the deploy was asked for", keep_turns=0) is not None
            texts = [m.text for m in session.messages()]
            assert texts == ["the deploy was asked for", "approved"]
        history = session.messages()
        assert [m.role for m in history] == ["user", "user"]

    # -- the store ------------------------------------------------------------------------

    def test_get_rejects_blank_ids(self, store: BaseStore) -> None:
        for bad in ["", "   "]:
            with pytest.raises(UsageError):
                store.get(bad)
        with pytest.raises(UsageError):
            store.get(42)  # type: ignore[arg-type]

    def test_exists_list_and_delete(self, store: BaseStore) -> None:
        assert not store.exists("s1")
        session = store.get("s1")
        assert not store.exists("s1")  # nothing appended yet
        assert store.list() == []
        session.append(Event.new("test/n"))
        assert store.exists("s1")
        assert [i.id for i in store.list()] == ["s1"]
        assert store.delete("s1") is True
        assert store.delete("s1") is False
        assert not store.exists("s1")
        assert store.list() == []
        assert store.get("s1").read() == []

    def test_append_after_delete_starts_over(self, store: BaseStore) -> None:
        held = store.get("gone")
        held.append(Event.new("test/n", {"n": 1}))
        held.append(Event.new("test/n", {"n": 2}))
        store.delete("gone")
        assert held.append(Event.new("test/n", {"n": 3})) == 1
        assert _payloads(store.get("gone").read()) == [{"n": 3}]

    def test_list_is_newest_first_with_prefix_limit_and_offset(self, store: BaseStore) -> None:
        for sid in ["slack:A", "slack:B", "cli:x", "slack:C"]:
            store.get(sid).append(Event.new("test/n"))
            time.sleep(0.02)
        store.get("slack:A").append(Event.new("test/n"))
        assert [i.id for i in store.list()] == ["slack:A", "slack:C", "cli:x", "slack:B"]
        assert [i.id for i in store.list(prefix="slack:")] == ["slack:A", "slack:C", "slack:B"]
        assert [i.id for i in store.list(limit=2)] == ["slack:A", "slack:C"]
        assert [i.id for i in store.list(limit=2, offset=2)] == ["cli:x", "slack:B"]
        assert store.list(prefix="nope") == []
        with pytest.raises(UsageError):
            store.list(limit=-1)

    def test_list_pages_are_slices_of_the_newest_first_list_and_prefixes_are_literal(
        self, store: BaseStore
    ) -> None:
        # "%" and "_" are LIKE wildcards and "ü" is two bytes in UTF-8: a prefix matches as
        # the id's literal start, whatever the backend filters with.
        ids = ["a%", "a_b", "ab", "a", "b:a", "aü", "a%x"]
        for sid in ids:
            store.get(sid).append(Event.new("test/n"))
            time.sleep(0.02)
        newest = ids[::-1]
        assert [i.id for i in store.list()] == newest
        for prefix in (None, "", "a", "a%", "a_", "aü", "b", "zz"):
            whole = [sid for sid in newest if prefix is None or sid.startswith(prefix)]
            assert [i.id for i in store.list(prefix=prefix)] == whole
            for limit in (None, 0, 1, 2, 5):
                for offset in (0, 1, 3, 10):
                    end = None if limit is None else offset + limit
                    page = store.list(prefix=prefix, limit=limit, offset=offset)
                    assert [i.id for i in page] == whole[offset:end], (prefix, limit, offset)
        with pytest.raises(UsageError):
            store.list(offset=-1)

    def test_expired_names_every_session_idle_longer_than_the_ttl(self, tmp_path: Path) -> None:
        clock = FakeClock()
        store = self.make_store(tmp_path, ttl=dt.timedelta(hours=1), clock=clock)
        try:
            for sid, idle in [("old:a", 20), ("old:b", 30), ("recent", 30), ("new", 0)]:
                store.get(sid).append(Event.new("test/n"))
                clock.advance(minutes=idle)
            # Last appends at minutes 0, 20, 50 and 80; it is minute 80. Exactly the TTL old
            # is not older than it.
            assert store.expired() == ["old:a"]
            clock.advance(minutes=1)
            assert sorted(store.expired()) == ["old:a", "old:b"]
            clock.advance(minutes=30)
            assert sorted(store.expired()) == ["old:a", "old:b", "recent"]
            assert sorted(store.purge_expired()) == ["old:a", "old:b", "recent"]
            assert store.expired() == []
            assert [i.id for i in store.list()] == ["new"]
        finally:
            store.close()

    def test_ttl_expires_sessions_and_never_revives_them(self, tmp_path: Path) -> None:
        clock = FakeClock()
        store = self.make_store(tmp_path, ttl=dt.timedelta(hours=1), clock=clock)
        try:
            old, fresh = store.get("old"), store.get("fresh")
            old.append(Event.new("test/n"))
            clock.advance(minutes=50)
            fresh.append(Event.new("test/n"))
            clock.advance(minutes=20)
            with pytest.raises(SessionExpired):
                store.get("old")
            with pytest.raises(SessionExpired):
                old.append(Event.new("test/n"))
            assert store.get("fresh").latest_seq == 1
            assert store.get("never-used").latest_seq == 0
            assert store.purge_expired() == ["old"]
            assert not store.exists("old")
            assert store.get("old").append(Event.new("test/n")) == 1
            assert [i.id for i in store.list()] == ["old", "fresh"]
        finally:
            store.close()

    def test_an_update_renews_the_ttl_only_with_renew_on_update(self, tmp_path: Path) -> None:
        clock = FakeClock()
        hour = dt.timedelta(hours=1)
        store = self.make_store(tmp_path, ttl=hour, clock=clock, renew_on_update=True)
        try:
            kept, idle = store.get("kept"), store.get("idle")
            kept.append(Event.new("test/n"))
            idle.append(Event.new("test/n"))
            clock.advance(minutes=50)
            assert kept.update(model="m1").model == "m1"  # renewed at minute 50
            clock.advance(minutes=20)  # minute 70: the appends are past the TTL
            assert store.expired() == ["idle"]
            with pytest.raises(SessionExpired):
                store.get("idle")
            with pytest.raises(SessionExpired):
                idle.update(model="late")  # an expired session is not renewed by an update
            assert store.get("kept") is not None
            assert kept.append(Event.new("test/n")) == 2  # minute 70: appends go on
            clock.advance(minutes=59)
            assert kept.update(metadata={"k": "v"}).metadata == {"k": "v"}  # minute 129
            clock.advance(minutes=59)  # minute 188: the append (70) is old, the update is not
            assert sorted(store.expired()) == ["idle"]
            assert store.get("kept").latest_seq == 2
            assert kept.append(Event.new("test/n")) == 3
            clock.advance(minutes=61)
            assert sorted(store.expired()) == ["idle", "kept"]
            with pytest.raises(SessionExpired, match="last append"):
                store.get("kept")
            assert sorted(store.purge_expired()) == ["idle", "kept"]
        finally:
            store.close()
        if not self.durable:
            return
        # A store opened without the option still honours a stored renewal (the renewal is
        # a fact of the session, not a setting of the reader) but does not make one.
        clock = FakeClock()
        store = self.make_store(tmp_path, ttl=hour, clock=clock, renew_on_update=True)
        try:
            store.get("s").append(Event.new("test/n"))
            store.get("plain").append(Event.new("test/n"))
            clock.advance(minutes=50)
            store.get("s").update(model="m")
        finally:
            store.close()
        plain = self.make_store(tmp_path, ttl=hour, clock=clock)
        try:
            plain.get("plain").update(model="m")  # no renewal: expiry counts from the append
            clock.advance(minutes=20)
            assert plain.expired() == ["plain"]
            assert plain.get("s").latest_seq == 1
            with pytest.raises(SessionExpired):
                plain.get("plain")
        finally:
            plain.close()

    # -- identity -------------------------------------------------------------------------

    def test_active_session_maps_a_key_and_survives_reopen(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path)
        key = "slack:C001:t:123:u:U111"
        assert active_session(store, key) == key
        set_active_session(store, key, "slack:C001:t:123:u:U111:new:1")
        assert active_session(store, key) == "slack:C001:t:123:u:U111:new:1"
        assert active_session(store, "slack:C002") == "slack:C002"
        set_active_session(store, key, "slack:C001:t:123:u:U111:new:2")
        assert active_session(store, key) == "slack:C001:t:123:u:U111:new:2"
        if self.durable:
            store.close()
            store = self.make_store(tmp_path)
            assert active_session(store, key) == "slack:C001:t:123:u:U111:new:2"
        for bad in ["", "  "]:
            with pytest.raises(UsageError):
                active_session(store, bad)
            with pytest.raises(UsageError):
                set_active_session(store, bad, "x")
        with pytest.raises(UsageError):
            set_active_session(store, key, "")
        store.close()

    def test_agent_binding_defaults_empty_and_survives_reopen(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path)
        assert agent_binding(store, "slack:C001") == ""
        bind_agent(store, "slack:C001", "coder")
        assert agent_binding(store, "slack:C001") == "coder"
        assert agent_binding(store, "slack:C002") == ""
        if self.durable:
            store.close()
            store = self.make_store(tmp_path)
            assert agent_binding(store, "slack:C001") == "coder"
        bind_agent(store, "slack:C001", "")
        assert agent_binding(store, "slack:C001") == ""
        with pytest.raises(UsageError):
            agent_binding(store, "")
        store.close()

    def test_cli_current_defaults_and_round_trips(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path)
        assert cli_current(store) == "cli:default"
        set_cli_current(store, "cli:20260905-101112.123-abcdef")
        assert cli_current(store) == "cli:20260905-101112.123-abcdef"
        set_cli_current(store, "cli:with_underscore.and.dots")
        if self.durable:
            store.close()
            store = self.make_store(tmp_path)
        assert cli_current(store) == "cli:with_underscore.and.dots"
        with pytest.raises(UsageError):
            set_cli_current(store, "")
        store.close()

    def test_identity_writes_from_many_threads_never_tear(self, store: BaseStore) -> None:
        def work(n: int) -> None:
            for i in range(30):
                set_active_session(store, "slack:C001", f"slack:C001:new:{n}-{i}")
                assert active_session(store, "slack:C001").startswith("slack:C001:new:")

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert active_session(store, "slack:C001").endswith("-29")

    # -- the turn lock --------------------------------------------------------------------

    def test_turn_lock_is_exclusive_and_times_out(self, store: BaseStore) -> None:
        assert not store.is_locked("conv")
        with store.lock("conv", timeout=1) as held:
            assert held.held
            assert store.is_locked("conv")
            failures: list[BaseException] = []

            def other() -> None:
                try:
                    store.lock("conv", timeout=0.05)
                except BaseException as exc:
                    failures.append(exc)

            t = threading.Thread(target=other)
            t.start()
            t.join()
            assert len(failures) == 1 and isinstance(failures[0], LockTimeout)
            assert not store.is_locked("other-conv")
            with store.lock("other-conv", timeout=0):
                pass
        assert not held.held
        assert not store.is_locked("conv")
        store.lock("conv", timeout=0).release()

    def test_turn_lock_is_not_reentrant_in_one_thread(self, store: BaseStore) -> None:
        with store.lock("conv"):
            with pytest.raises(UsageError, match="not reentrant"):
                store.lock("conv", timeout=5)
            assert store.is_locked("conv")
        with store.lock("conv", timeout=0):
            pass

    def test_turn_lock_waits_for_the_holder_thread(self, store: BaseStore) -> None:
        order: list[str] = []
        first = store.lock("conv")

        def waiter() -> None:
            with store.lock("conv", timeout=10):
                order.append("waiter")

        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.1)
        order.append("holder")
        first.release()
        t.join()
        assert order == ["holder", "waiter"]

    # -- conditional appends, create and open -------------------------------------------

    def _second_writer(self, store: BaseStore, tmp_path: Path, session_id: str) -> Any:
        """Another session object on the same log: through a second store where data is
        durable, else a second object of the same store (bypassing its cache)."""
        if self.durable:
            other = self.reopen(store, tmp_path)
            return other, other.get(session_id)
        return None, store._open_session(session_id)

    def test_conditional_append_stores_only_at_the_expected_seq(self, store: BaseStore) -> None:
        session = store.get("cond")
        assert session.append_many([Event.new("test/n", {"n": 1})], expect_seq=0) == [1]
        assert session.append_many(
            [Event.new("test/n", {"n": 2}), Event.new("test/n", {"n": 3})], expect_seq=1
        ) == [2, 3]
        for stale in (0, 1, 2, 7):
            with pytest.raises(ConflictError, match="expected the latest seq"):
                session.append_many([Event.new("test/n", {"n": "stale"})], expect_seq=stale)
        assert _payloads(session.read()) == [{"n": 1}, {"n": 2}, {"n": 3}]
        with pytest.raises(ConflictError):
            store.get("cond-empty").append_many([Event.new("test/n", {})], expect_seq=1)
        assert not store.exists("cond-empty")
        with pytest.raises(UsageError):
            session.append_many([Event.new("test/n", {})], expect_seq=-1)

    def test_conditional_append_sees_other_writers(self, store: BaseStore, tmp_path: Path) -> None:
        session = store.get("cond2")
        session.append(Event.new("test/n", {"by": "a"}))
        other_store, other = self._second_writer(store, tmp_path, "cond2")
        try:
            other.append(Event.new("test/n", {"by": "b"}))
            with pytest.raises(ConflictError):
                session.append_many([Event.new("test/n", {"by": "a2"})], expect_seq=1)
            assert session.latest_seq == 2
            assert session.append_many([Event.new("test/n", {"by": "a3"})], expect_seq=2) == [3]
            assert _payloads(other.read()) == [{"by": "a"}, {"by": "b"}, {"by": "a3"}]
        finally:
            if other_store is not None:
                other_store.close()

    def test_open_needs_an_existing_session_and_create_a_new_one(self, store: BaseStore) -> None:
        with pytest.raises(SessionNotFound):
            store.open("nobody")
        created = store.create("new", [Event.new("test/n", {"n": 1})])
        assert created.latest_seq == 1
        assert store.open("new").read()[0].type == "test/n"
        with pytest.raises(DuplicateSession):
            store.create("new", [Event.new("test/n", {"n": 2})])
        assert _payloads(store.get("new").read()) == [{"n": 1}]
        # Without events (lango's Create of an empty session): only the record is written.
        empty = store.create("empty", [], model="m")
        assert not store.exists("empty") and empty.info().model == "m"
        with pytest.raises(DuplicateSession):
            store.create("empty")

    def test_only_one_of_two_racing_creates_wins(self, store: BaseStore, tmp_path: Path) -> None:
        store.get("race")  # both objects exist before either writes
        other_store, other = self._second_writer(store, tmp_path, "race")
        try:
            assert other.append_many([Event.new("test/n", {"by": "b"})], expect_seq=0) == [1]
            with pytest.raises(DuplicateSession):
                store.create("race", [Event.new("test/n", {"by": "a"})])
            assert _payloads(store.get("race").read()) == [{"by": "b"}]
        finally:
            if other_store is not None:
                other_store.close()

    def test_payloads_pass_through_backends_undecoded(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        """A payload that is valid JSON but not valid for its type's struct (data written by an
        older or foreign writer: the append pipeline refuses it today) is stored and read back
        by the backend as it was: backends never interpret payloads, and the deriver skips what
        it cannot use."""
        odd = {"firstKeptSeq": "not a number", "summary": 5}
        session = store.get("odd")
        session.append(Event.new("user/message", Message.user("hi")))
        now = dt.datetime.now(dt.timezone.utc)
        raw = [
            Event.new("session/compaction", odd, time=now),
            Event.new("session/compaction", odd, time=now),
            Event.new("user/message", [1], time=now),
        ]
        ring = store._keyring
        if ring is not None:  # every event of an encrypted store is sealed
            cipher = ring.cipher("odd")
            raw = [cipher.seal(event, seq) for seq, event in enumerate(raw, start=2)]
        with session._lock:  # the storage primitive itself, below the pipeline's checks
            appended = session._storage_append(raw, 0, None)
            assert not isinstance(appended, Reopen)
            foreign, stored = appended
            session._ingest(session._run(session._from_storage(foreign)))
            session._ingest(session._run(session._from_storage(stored)))
        assert [decode(e.data) for e in session.read()[1:]] == [odd, odd, [1]]
        assert [m.text for m in session.messages()] == ["hi"]
        again = self.reopen(store, tmp_path)
        try:
            reread = again.get("odd")
            assert [decode(e.data) for e in reread.read()[1:]] == [odd, odd, [1]]
            assert [m.text for m in reread.messages()] == ["hi"]
        finally:
            if again is not store:
                again.close()

    def test_payloads_of_the_wrong_shape_are_refused_at_append(self, store: BaseStore) -> None:
        session = store.get("shapes")
        wrong = [
            Event.new("tool/result", {"callId": 5}),
            Event.new("session/compaction", {"firstKeptSeq": "x"}),
            Event.new("user/message", {"role": "user", "parts": "hi"}),
            Event.new("user/mesage", Message.user("typo")),
        ]
        for event in wrong:
            with pytest.raises(UsageError):
                session.append(event)
        assert session.latest_seq == 0
        # The wire forms users meet are accepted and stored in the neutral shape.
        call = ToolCall("c1", "read", arguments='{"path": "a.py"}')  # type: ignore[arg-type]
        session.append(Event.new("assistant/message", Message.assistant(tool_calls=[call])))
        session.append(Event.new("tool/result", ToolResult("c1", "read", {"rows": 3})))  # type: ignore[arg-type]
        history = session.messages()
        assert history[0].tool_calls[0].arguments == {"path": "a.py"}
        assert history[1].tool_results[0].content == '{"rows":3}'

    def test_a_turn_appended_while_compaction_plans_is_kept(
        self, store: BaseStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        session = store.get("race-compact")
        for n in range(3):
            with session.turn(agent="a") as turn:
                turn.user(f"question {n}")
                turn.assistant(f"answer {n}")
        other_store, other = self._second_writer(store, tmp_path, "race-compact")
        from .. import core as core_module

        real = core_module.plan_compaction  # type: ignore[attr-defined]
        calls: list[int] = []

        def plan_while_another_writer_appends(*args: Any, **kwargs: Any) -> Any:
            plan = real(*args, **kwargs)
            if not calls:  # after the first plan, before its marker is appended
                with other.turn(agent="a") as turn:
                    turn.user("concurrent question")
                    turn.assistant("concurrent answer")
            calls.append(1)
            return plan

        monkeypatch.setattr(core_module, "plan_compaction", plan_while_another_writer_appends)
        try:
            assert session.compact("summary", keep_turns=1) is not None
            texts = [m.text for m in session.messages()]
            assert texts == ["summary", "concurrent question", "concurrent answer"]
            assert len(calls) == 2  # planned again after the conflict
        finally:
            if other_store is not None:
                other_store.close()

    def test_what_cannot_be_read_back_is_refused_at_append(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        session = store.get("boundary")
        deep: Any = 1
        for _ in range(400):
            deep = [deep]
        naive = dt.datetime(2026, 1, 1, 12, 0)
        bad_events = [
            Event.new("test/deep", deep),
            Event(type="test/raw", data=msgspec.Raw(b"not json")),
            Event(type="test/raw", data=msgspec.Raw(b'{"a":1}\n{"seq":2,"type":"forged"}')),
            Event(type="test/raw", data=msgspec.Raw(b'{"a":"\x00"}')),
            Event.new("test/naive", {}, time=naive),
            Event.new("test/meta", {}, meta={"deep": deep}),
            Event(type="", data=msgspec.Raw(b"{}")),
        ]
        for bad in bad_events:
            with pytest.raises(UsageError):
                session.append(bad)
            with pytest.raises(UsageError):
                session.append_many([Event.new("test/ok", {}), bad])
        assert session.latest_seq == 0
        # Pretty-printed JSON is stored compactly, on one line; the deepest allowed nesting reads
        # back after reopening.
        allowed: Any = 1
        for _ in range(250):
            allowed = [allowed]
        session.append(Event(type="test/pretty", data=msgspec.Raw(b'{\n  "a": [1,\n 2]\n}')))
        session.append(Event.new("test/deep-ok", allowed))
        # Long values too: one pretty-printed (a raw CR LF far from the start), and one that
        # opens more arrays than the deepest nesting allowed, side by side (two levels deep).
        text = "x" * 600
        long_pretty = b'{"text": "%s",\r\n  "b": [1,\n 2]}' % text.encode()
        session.append(Event(type="test/pretty-long", data=msgspec.Raw(long_pretty)))
        wide: list[list[int]] = [[] for _ in range(300)]
        session.append(Event.new("test/wide", wide))
        again = self.reopen(store, tmp_path)
        try:
            events = again.get("boundary").read()
            kinds = ["test/pretty", "test/deep-ok", "test/pretty-long", "test/wide"]
            assert [e.type for e in events] == kinds
            assert decode(events[0].data) == {"a": [1, 2]}
            assert decode(events[1].data) == allowed
            assert bytes(events[2].data) == b'{"text":"%s","b":[1,2]}' % text.encode()
            assert decode(events[3].data) == wide
        finally:
            if again is not store:
                again.close()

    # -- exactly-once appends: event ids across writers ------------------------------------

    def _writers(self, store: BaseStore, tmp_path: Path, session_id: str) -> tuple[Any, Any]:
        """Two session objects on one log, both opened before either appends: the second
        through another store where data is durable (its store, to close, and the object)."""
        first = store.get(session_id)
        first.latest_seq  # noqa: B018  # opened and caught up
        return first, self._second_writer(store, tmp_path, session_id)

    def test_an_id_appended_by_two_writers_is_stored_once(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        a, (other_store, b) = self._writers(store, tmp_path, "once")
        try:
            b.latest_seq  # noqa: B018  # b has seen the log before a appends
            a.append(Event.new("test/n", {"by": "a", "n": 0}))
            seq = a.append(Event.new("test/n", {"by": "a"}, id="queue:msg-1"))
            # b has not seen it: its append catches up under the write lock and finds it.
            assert b.append(Event.new("test/n", {"by": "b"}, id="queue:msg-1")) == seq
            seqs = a.append_many(
                [Event.new("test/n", {"by": "a"}, id=f"queue:batch-{n}") for n in range(3)]
            )
            retry = [Event.new("test/n", {"by": "b"}, id=f"queue:batch-{n}") for n in range(3)]
            assert b.append_many(retry) == seqs
            assert b.latest_seq == a.latest_seq == seqs[-1] == 5
            assert [decode(e.data)["by"] for e in b.read()] == ["a"] * 5
            # The encrypted (sealed) and conditional paths check the ids the same way.
            c_seq = b.append(Event.new("test/n", {"by": "b"}, id="queue:msg-2"))
            assert a.append_many(
                [Event.new("test/n", {"by": "a"}, id="queue:msg-2")], expect_seq=5
            ) == [c_seq]
            assert [e.id for e in a.read()].count("queue:msg-2") == 1
        finally:
            if other_store is not None:
                other_store.close()

    def test_an_id_stored_before_another_writer_first_saw_the_session_is_recognised(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        """A session object that opened before the session existed has read nothing of it:
        its first append reads the other writer's events (or reloads at the tail and reads the
        ids back over the id window) before it checks, however long the log has grown."""
        other_store, b = self._second_writer(store, tmp_path, "late")
        try:
            b.latest_seq  # noqa: B018  # opened: no events yet
            a = store.get("late")
            assert a.append(Event.new("test/n", {"by": "a"}, id="queue:first")) == 1
            padding = "p" * 1000
            a.append_many([Event.new("test/n", {"n": n, "pad": padding}) for n in range(300)])
            assert b.append(Event.new("test/n", {"by": "b"}, id="queue:first")) == 1
            assert b.append_many(
                [Event.new("test/n", {"by": "b"}, id=i) for i in ("queue:first", "queue:new")]
            ) == [1, 302]
            assert [e.id for e in a.read()].count("queue:first") == 1
        finally:
            if other_store is not None:
                other_store.close()

    def test_a_batch_with_stored_and_new_ids_appends_only_the_new_ones(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        a, (other_store, b) = self._writers(store, tmp_path, "once-part")
        try:
            b.latest_seq  # noqa: B018
            assert a.append_many([Event.new("test/n", {"n": n}, id=f"m-{n}") for n in (1, 3)]) == [
                1,
                2,
            ]
            batch = [Event.new("test/n", {"n": n}, id=f"m-{n}") for n in range(5)]
            # m-1 and m-3 keep their seqs; m-0, m-2 and m-4 are appended, in batch order.
            assert b.append_many(batch) == [3, 1, 4, 2, 5]
            assert a.append_many(batch) == [3, 1, 4, 2, 5]
            assert [(e.seq, e.id) for e in a.read()] == [
                (1, "m-1"),
                (2, "m-3"),
                (3, "m-0"),
                (4, "m-2"),
                (5, "m-4"),
            ]
        finally:
            if other_store is not None:
                other_store.close()

    def test_a_batch_holding_one_id_twice_is_refused_and_writes_nothing(
        self, store: BaseStore
    ) -> None:
        session = store.get("twice")
        batch = [
            Event.new("test/n", {"n": 1}, id="queue:dup"),
            Event.new("test/n", {"n": 2}),
            Event.new("test/n", {"n": 3}, id="queue:dup"),
        ]
        with pytest.raises(UsageError, match="'queue:dup' more than once"):
            session.append_many(batch)
        assert session.latest_seq == 0
        assert not store.exists("twice")
        session.append(Event.new("test/n", {"n": 0}))
        with pytest.raises(UsageError, match="'queue:dup' more than once"):
            session.append_many(batch, expect_seq=1)
        assert [e.seq for e in session.read()] == [1]

    def test_an_id_is_recognised_within_the_id_window_and_not_beyond(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        """The window is :data:`agentsession.core.ID_WINDOW` seqs: an id stored at the
        oldest seq of the window is recognised, by the writer that stored it and by another
        one that caught up since; one seq further back it is not looked up, and stored
        again."""
        from ..core import ID_WINDOW

        a, (other_store, b) = self._writers(store, tmp_path, "window")
        try:
            b.latest_seq  # noqa: B018
            assert a.append(Event.new("test/n", {"by": "a"}, id="queue:old")) == 1
            chunk = 16_384
            for start in range(2, ID_WINDOW + 1, chunk):
                end = min(start + chunk, ID_WINDOW + 1)
                a.append_many([Event.new("test/fill") for _ in range(start, end)])
            assert a.latest_seq == ID_WINDOW  # seq 1 is the oldest inside the window
            assert b.append(Event.new("test/n", {"by": "b"}, id="queue:old")) == 1
            assert a.append(Event.new("test/n", {"by": "a"}, id="queue:old")) == 1
            assert b.latest_seq == ID_WINDOW  # nothing written
            a.append(Event.new("test/fill"))  # seq 1 is now beyond the window
            assert a.append(Event.new("test/n", {"by": "a"}, id="queue:old")) == ID_WINDOW + 2
            assert [e.seq for e in b.read(after=ID_WINDOW) if e.id == "queue:old"] == [
                ID_WINDOW + 2
            ]
            # The new copy is the one within the window now.
            assert b.append(Event.new("test/n", {"by": "b"}, id="queue:old")) == ID_WINDOW + 2
        finally:
            if other_store is not None:
                other_store.close()

    def test_an_idempotency_key_stored_before_the_opening_tail_is_recognised(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        """A session object opened long after an id was stored (its opening tail holds
        thousands of later events) recognises the id when it appends it again, alone or in a
        batch; it reads the older ids once, and never for ids made here since it opened."""
        writer = store.get("late")
        assert writer.append(Event.new("test/n", {"by": "first"}, id="queue:late")) == 1
        filler = [Event.new("test/fill", {"pad": "x" * 200}) for _ in range(3000)]
        writer.append_many(filler)
        other, late = self._second_writer(store, tmp_path, "late")
        try:
            assert late.latest_seq == 3001
            covers = [0]
            if isinstance(late, BaseSession):  # (a facade of another API hides it)
                cover = late._cover_ids

                def counted() -> Any:
                    covers[0] += 1
                    return cover()

                late._cover_ids = counted  # type: ignore[method-assign]
            assert late.append(Event.new("test/n", {"by": "fresh"})) == 3002
            fresh_reads = covers[0]  # an id made here since it opened: nothing older to read
            assert late.append(Event.new("test/n", {"by": "again"}, id="queue:late")) == 1
            batch = [
                Event.new("test/n", {"by": "new"}, id="queue:new"),
                Event.new("test/n", {"by": "again"}, id="queue:late"),
            ]
            assert late.append_many(batch) == [3003, 1]
            if isinstance(late, BaseSession):
                assert (fresh_reads, covers[0]) == (0, 1)  # read once per session object
            assert [e.id for e in writer.read()].count("queue:late") == 1
            assert writer.latest_seq == 3003
        finally:
            if other is not None:
                other.close()

    def test_processes_appending_the_same_ids_store_each_once(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        """Three processes append the same 2,000 ids (one by one, and in batches that overlap
        in part): each id is stored once, and every writer got its stored seq."""
        if not self.shared_across_processes:
            pytest.skip("this backend's data is not shared between processes")
        go = tmp_path / "go-same-ids"
        outs = run_released(
            _SAME_IDS,
            [[store.url, "same-ids", str(w), "2000", str(go), "3"] for w in range(3)],
            go,
            key=self.encryption_key,
        )
        events = store.get("same-ids").read()
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        ids = [e.id for e in events]
        assert len(ids) == len(set(ids)) == 2000, f"{len(ids) - len(set(ids))} duplicates"
        stored = {e.id: e.seq for e in events}
        for out in outs:
            got = {f"queue:msg-{i}": seq for i, seq in msgspec.json.decode(out).items()}
            assert got == stored

    # -- data safety: fork, delete and re-create, stale objects ----------------------------

    def test_forked_processes_sharing_an_open_store_never_share_a_seq(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        """Workers forked from a process holding an open session (``multiprocessing``'s fork
        start method, ``os.fork``) each append; every acknowledged event is stored exactly
        once, seqs stay unique and gap-free, and the log reads back."""
        if not self.shared_across_processes or not hasattr(os, "fork"):
            pytest.skip("this backend's data is not shared between processes")
        session = store.get("forked")
        session.append(Event.new("test/n", {"by": "parent", "i": -1}))
        session.read()  # the parent has everything open and cached
        errors = tmp_path / "fork-errors"
        children = []
        for child in range(3):
            pid = os.fork()
            if pid == 0:  # pragma: no cover - runs in the child
                code = 0
                try:
                    for i in range(60):
                        session.append(Event.new("test/n", {"by": child, "i": i}))
                    session.append_many(
                        [Event.new("test/n", {"by": child, "i": i}) for i in range(60, 63)]
                    )
                except BaseException as exc:
                    errors.with_suffix(f".{child}").write_text(repr(exc))
                    code = 1
                finally:
                    os._exit(code)
            children.append(pid)
        try:
            for i in range(60):
                session.append(Event.new("test/n", {"by": "parent", "i": i}))
        finally:
            _reap(children, timeout=120)
        assert not list(tmp_path.glob("fork-errors.*")), [
            p.read_text() for p in tmp_path.glob("fork-errors.*")
        ]
        again = self.reopen(store, tmp_path)
        try:
            events = again.get("forked").read()
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            seen = [(d["by"], d["i"]) for d in _payloads(events)]
            assert len(seen) == len(set(seen)) == 1 + 60 + 3 * 63
            assert session.latest_seq == len(events)
            assert [e.seq for e in session.read()] == [e.seq for e in events]
        finally:
            if again is not store:
                again.close()

    def test_a_forked_child_neither_shares_nor_releases_the_parents_turn_lock(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        if not self.shared_across_processes or not hasattr(os, "fork"):
            pytest.skip("this backend's data is not shared between processes")
        lock = store.lock("locked", timeout=5)
        outcome = tmp_path / "child-outcome"
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            code = 0
            try:
                try:
                    store.lock("locked", timeout=0).release()
                    outcome.write_text("the child took the parent's lock")
                    code = 1
                except LockTimeout:
                    pass
                lock.release()  # the inherited object: must not release the parent's lock
                store.close()
                outcome.write_text("ok" if code == 0 else outcome.read_text())
            except BaseException as exc:
                outcome.write_text(repr(exc))
                code = 1
            finally:
                os._exit(code)
        try:
            _reap([pid], timeout=60)
        finally:
            said = outcome.read_text() if outcome.exists() else "(nothing)"
            assert said == "ok", f"the forked child said: {said}"
        other = self.reopen(store, tmp_path)
        try:
            assert lock.held and other.is_locked("locked")
            with pytest.raises(LockTimeout):
                other.lock("locked", timeout=0)
        finally:
            lock.release()
            if other is not store:
                other.close()
        assert not store.is_locked("locked")

    def test_closing_a_store_releases_its_turn_locks(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        first = self.make_store(tmp_path)
        lock = first.lock("closing", timeout=5)
        assert lock.held
        first.close()
        assert not lock.held
        lock.release()  # harmless after the close
        again = store.lock("closing", timeout=5)
        again.release()

    def test_a_deleted_and_recreated_session_never_mixes_with_its_old_life(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        old = store.get("lives")
        old.append_many(
            [
                Event.new("turn/start", {}, agent="a"),
                Event.new("user/message", Message.user("old-1"), agent="a"),
                Event.new("user/message", Message.user("old-2"), agent="a"),
                Event.new(
                    "assistant/message",
                    Message.assistant("old-3", tool_calls=[ToolCall("c-old", "t")]),
                    agent="a",
                ),
            ]
        )
        assert [m.text for m in old.messages()][:3] == ["old-1", "old-2", "old-3"]
        other_store, _ = self._second_writer(store, tmp_path, "lives")
        deleter = other_store if other_store is not None else store
        try:
            assert deleter.delete("lives")
            new = deleter.get("lives")
            for n in range(1, 4):
                new.append(Event.new("user/message", Message.user(f"new-{n}")))
            assert [m.text for m in old.messages()] == ["new-1", "new-2", "new-3"]
            for n in range(4, 6):
                new.append(Event.new("user/message", Message.user(f"new-{n}")))
            assert [m.text for m in old.messages()] == [f"new-{n}" for n in range(1, 6)]
            assert old.latest_seq == 5
            # Recovery through the old object repairs nothing of the old life into the new one.
            assert [r.status for r in store.recover(["lives"])] == ["clean"]
            assert [e.type for e in new.read()] == ["user/message"] * 5
            old.append(Event.new("user/message", Message.user("new-6")))
            assert [m.text for m in new.messages()] == [f"new-{n}" for n in range(1, 7)]
        finally:
            if other_store is not None:
                other_store.close()

    def test_a_session_object_reused_after_close_reads_the_new_log(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        held = store.get("reused")
        held.append_many([Event.new("test/n", {"life": 1, "n": n}) for n in range(5)])
        held.read()
        held.close()
        other_store, _ = self._second_writer(store, tmp_path, "reused")
        deleter = other_store if other_store is not None else store
        try:
            deleter.delete("reused")
            deleter.get("reused").append_many(
                [Event.new("test/n", {"life": 2, "n": n}) for n in range(9)]
            )
            assert _payloads(held.read()) == [{"life": 2, "n": n} for n in range(9)]
            assert held.append(Event.new("test/n", {"life": 2, "n": 9})) == 10
            assert _payloads(deleter.get("reused").read())[-1] == {"life": 2, "n": 9}
        finally:
            if other_store is not None:
                other_store.close()

    def test_a_symlinked_session_file_never_reaches_outside_the_store(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        path = self.session_file(store, "linked")
        if path is None:
            pytest.skip("this backend keeps no file per session")
        outside = tmp_path / "outside-the-store.txt"
        outside.write_bytes(b'{"seq":1,"type":"test/n","time":"2026-01-01T00:00:00Z"}\nsecret')
        before = outside.read_bytes()
        path.symlink_to(outside)
        with pytest.raises(StorageError):
            store.get("linked").append(Event.new("test/n", {}))
        with pytest.raises(StorageError):
            store.delete("linked")
        assert outside.read_bytes() == before
        assert not store.exists("linked")
        assert "linked" not in [info.id for info in store.list()]

    def test_meta_values_and_session_scoped_meta_die_with_the_session(
        self, store: BaseStore
    ) -> None:
        assert store.meta_get("app", "k") is None
        store.meta_set("app", "k", "v")
        store.meta_set("app", "doomed", "kept")  # not session-scoped: survives the delete
        assert store.meta_get("app", "k") == "v"
        store.get("doomed").append(Event.new("test/n", {}))
        bind_agent(store, "doomed", "coder")
        assert store.delete("doomed")
        assert agent_binding(store, "doomed") == ""
        assert store.meta_get("app", "doomed") == "kept"
        store.meta_set("app", "k", None)
        assert store.meta_get("app", "k") is None
        with pytest.raises(UsageError):
            store.meta_get("", "k")
        with pytest.raises(UsageError):
            store.meta_set("app", "k", 5)  # type: ignore[arg-type]

    def test_killed_lock_holder_frees_the_lock_and_recover_repairs_its_turn(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        if not self.shared_across_processes:
            pytest.skip("this backend's data is not shared between processes")
        holder = start_lock_holder(store.url, "conv:crash", key=self.encryption_key)
        try:
            assert store.is_locked("conv:crash")
            with pytest.raises(LockTimeout):
                store.lock("conv:crash", timeout=0.2)
            [live] = store.recover(["conv:crash"])
            assert live.status == "live"
        finally:
            holder.kill()
            holder.wait()
        with store.lock("conv:crash", timeout=10):
            pass
        assert not store.is_locked("conv:crash")
        [report] = store.recover()
        assert (report.session_id, report.status) == ("conv:crash", "repaired")
        session = store.get("conv:crash")
        assert [e.type for e in session.read()][-4:] == [
            "tool/result",
            "step/end",
            "turn/end",
            "session/recovery",
        ]
        assert session.messages()[-1].tool_results[0].audit == {"decision": "interrupted"}
        assert store.recover() == []

    def test_closed_store_refuses_use(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path)
        store.close()
        store.close()
        with pytest.raises(UsageError):
            store.get("x")

    def test_store_is_a_context_manager(self, tmp_path: Path) -> None:
        with self.make_store(tmp_path) as store:
            store.get("cm").append(Event.new("test/n"))
        with pytest.raises(UsageError):
            store.list()

    # -- compare-and-set meta, created_at --------------------------------------------------

    def test_meta_cas_sets_only_over_the_expected_value(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        kind = "conformance-cas"
        assert store._meta_cas(kind, "k", None, None)  # no entry, none expected
        assert store._meta_cas(kind, "k", None, "one")  # absent -> set
        assert store._meta_get(kind, "k") == "one"
        for expected, new in [(None, "two"), ("wrong", "two"), (None, None), ("wrong", None)]:
            assert not store._meta_cas(kind, "k", expected, new), (expected, new)
            assert store._meta_get(kind, "k") == "one"
        assert store._meta_cas(kind, "k", "one", "one")  # already held: True, nothing written
        assert store._meta_cas(kind, "k", "one", "two")
        assert store._meta_get(kind, "k") == "two"
        assert not store._meta_cas(kind, "k", "one", "three")  # stale expected
        assert store._meta_get(kind, "k") == "two"
        assert store._meta_cas(kind, "k", "two", None)  # delete with the expected value
        assert store._meta_get(kind, "k") is None
        assert store._meta_cas(kind, "k", None, None)
        assert not store._meta_cas(kind, "k", "two", None)  # already gone
        assert not store._meta_cas(kind, "k", "two", "three")
        assert store._meta_get(kind, "k") is None
        assert store._meta_cas(kind, "other", None, "kept")
        assert store._meta_get(kind, "k") is None  # keys stay apart
        assert store.list() == []  # no entry (nor a lock beside one) is ever a session
        other = self.reopen(store, tmp_path)
        try:
            assert other._meta_get(kind, "other") == "kept"
            assert not other._meta_cas(kind, "other", None, "late")
            assert other._meta_cas(kind, "other", "kept", None)
            assert store._meta_get(kind, "other") is None
        finally:
            if other is not store:
                other.close()

    def test_copy_store_in_and_out_keeps_events_meta_and_a_live_child(
        self, store: BaseStore
    ) -> None:
        source, back = open_store("memory:"), open_store("memory:")
        try:
            source.create(
                "copy:a",
                [Event.new("user/message", Message.user("hi")), Event.new("test/n", {"n": 1})],
                agent_id="coder",
                model="model-1",
            )
            child = source.get("copy:a").fork("helper", inherit="all", task="look")
            child.append(Event.new("assistant/message", Message.assistant("found it")))
            bind_agent(source, "copy:a", "coder")
            source.meta_set("conformance-copy", "some key", "kept")
            report = copy_store(source, store)
            assert (report.sessions, report.shredded, report.meta_kept) == (2, [], [])
            for sid in ("copy:a", child.id):
                copied = [encode_event(e) for e in store.get(sid).read()]
                assert copied == [encode_event(e) for e in source.get(sid).read()], sid
            info = store.get("copy:a").info()
            assert (info.agent_id, info.model) == ("coder", "model-1")
            assert agent_binding(store, "copy:a") == "coder"
            assert store.meta_get("conformance-copy", "some key") == "kept"
            assert [c.id for c in store.children_of("copy:a")] == [child.id]
            store.get(child.id).merge("done")  # the child is live in the copy
            report = copy_store(store, back)
            assert report.sessions == 2
            assert [c.state for c in back.children_of("copy:a")] == ["merged"]
            assert back.get("copy:a").read()[-1].type == "subagent/end"
            assert back.get("copy:a").info().agent_id == "coder"
        finally:
            source.close()
            back.close()

    def test_meta_list_enumerates_every_entry_of_every_kind(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        mine = ("conformance-list", "conformance-list-2", "bind")
        entries = {
            ("conformance-list", "a"): "1",
            ("conformance-list", "slack:C001:t:17.9"): "with: colons",
            ("conformance-list", "ünï/cödé %2F"): "v\u00e9",
            ("conformance-list-2", "only"): '{"json": [1, 2]}',
        }
        for (kind, key), value in entries.items():
            store.meta_set(kind, key, value)
        store.meta_set("conformance-list", "gone", "x")
        store.meta_set("conformance-list", "gone", None)
        store.get("listed").append(Event.new("test/n", {}))
        store.meta_set("bind", "listed", "coder")
        expected = sorted(
            [(k, key, v) for (k, key), v in entries.items()] + [("bind", "listed", "coder")]
        )
        assert [e for e in store._meta_list() if e[0] in mine] == expected
        of_one_kind = [e for e in expected if e[0] == "conformance-list"]
        assert store._meta_list("conformance-list") == of_one_kind
        assert store._meta_list("conformance-none") == []
        other = self.reopen(store, tmp_path)
        try:
            assert [e for e in other._meta_list() if e[0] in mine] == expected
        finally:
            if other is not store:
                other.close()
        store.delete("listed")  # session-scoped entries go with their session
        assert [e for e in store._meta_list() if e[0] == "bind"] == []

    def test_meta_update_from_many_threads_loses_no_increment(self, store: BaseStore) -> None:
        errors: list[BaseException] = []

        def work() -> None:
            try:
                for _ in range(50):
                    store._meta_update(
                        "conformance-cas", "threads", lambda v: str(int(v or "0") + 1)
                    )
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert store._meta_get("conformance-cas", "threads") == "200"

    def test_meta_cas_of_two_store_objects_on_one_key_exclude_each_other(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        """Two store objects on the same data (one object when the data is not durable) race
        compare-and-sets of one counter from two threads each, every try expecting the value
        it just read: each set that reports success moved the counter by exactly one, so no
        two of them succeeded over the same expected value."""
        kind = "conformance-cas"
        other = self.reopen(store, tmp_path)
        wins = [0, 0, 0, 0]
        errors: list[BaseException] = []
        start = threading.Barrier(len(wins))

        def work(n: int, target: BaseStore) -> None:
            try:
                start.wait()
                for _ in range(40):
                    current = target._meta_get(kind, "race")
                    if target._meta_cas(kind, "race", current, str(int(current or "0") + 1)):
                        wins[n] += 1
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [
            threading.Thread(target=work, args=(n, store if n % 2 else other))
            for n in range(len(wins))
        ]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not errors
            assert sum(wins) > 0
            assert store._meta_get(kind, "race") == str(sum(wins))
            assert other._meta_get(kind, "race") == str(sum(wins))
        finally:
            if other is not store:
                other.close()

    def test_meta_update_from_four_processes_loses_no_increment(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        """Four processes each add 1 to one counter 50 times through ``_meta_update`` (a
        compare-and-set loop): every increment lands, so the backend's compare-and-set is
        atomic across processes."""
        if not self.shared_across_processes:
            pytest.skip("this backend's data is not shared between processes")
        counter = _OPEN + textwrap.dedent(
            """
            import os, sys, time
            import agentsession as ags
            url, go, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
            store = ags.open_store(url, **_options)
            while not os.path.exists(go):
                time.sleep(0.001)
            for _ in range(count):
                store._meta_update(
                    "conformance-cas", "counter", lambda v: str(int(v or "0") + 1)
                )
            store.close()
            """
        )
        go = tmp_path / "go-meta-counter"
        args = [[store.url, str(go), "50"]] * 4
        run_released(counter, args, go, 180.0, self.encryption_key)
        assert store._meta_get("conformance-cas", "counter") == "200"

    def test_list_reports_the_first_events_time_as_created_at(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        given = dt.datetime(2025, 5, 6, 7, 8, 9, 123456, tzinfo=dt.timezone.utc)
        store.get("created:stamped").append(Event.new("test/n", {"n": 0}))
        store.get("created:given").append_many(
            [Event.new("test/n", {"n": 0}, time=given), Event.new("test/n", {"n": 1})]
        )
        reader = self.reopen(store, tmp_path)
        try:
            stamped = reader.get("created:stamped").read()[0].time
            assert stamped is not None and stamped != given
            expected = {"created:stamped": stamped, "created:given": given}

            def created() -> dict[str, dt.datetime | None]:
                return {info.id: info.created_at for info in store.list()}

            assert created() == expected
            time.sleep(0.01)
            store.get("created:stamped").append(Event.new("test/n", {"n": 1}))
            store.get("created:given").append(
                Event.new("test/n", {"n": 2}, time=given + dt.timedelta(days=1))
            )
            assert created() == expected  # later appends never move it
            assert {i.id: i.created_at for i in reader.list()} == expected
            assert store.delete("created:given")
            later = given + dt.timedelta(days=2, microseconds=1)
            store.get("created:given").append(Event.new("test/n", {"n": 0}, time=later))
            assert created() == {**expected, "created:given": later}  # a new life, a new time
        finally:
            if reader is not store:
                reader.close()
