"""The child-session and session-record part of the storage contract (a mixin of
:class:`agentsession.testing.StoreConformance`)."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from ..children import LifecycleEvent
from ..errors import (
    ChildStateError,
    DuplicateSession,
    SessionNotFound,
    SessionShredded,
    UsageError,
)
from ..events import SESSION_FORK, SESSION_MERGE, SUBAGENT_END, SUBAGENT_START
from ..messages import Message, ToolCall
from ..session import BaseSession
from ..store import BaseStore
from ._processes import OPEN, child_env, run_released

__all__ = ["ChildSessionConformance"]


_KILLED_MERGER = OPEN + textwrap.dedent(
    """
    import os, signal, sys
    import agentsession as ags
    import agentsession.children as children
    store = ags.open_store(sys.argv[1], **_options)
    child = store.open(sys.argv[2])
    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)
    children._mark = die  # killed after the parent write, before the child's mark
    child.merge(sys.argv[3])
    """
)

_MERGER = OPEN + textwrap.dedent(
    """
    import os, sys, time
    import agentsession as ags
    store = ags.open_store(sys.argv[1], **_options)
    child = store.open(sys.argv[2])
    while not os.path.exists(sys.argv[3]):
        time.sleep(0.001)
    try:
        child.merge("summary from " + sys.argv[4], lock_timeout=60)
        print("merged")
    except ags.errors.ChildStateError as exc:
        print("refused", exc.state)
    store.close()
    """
)


def _ends(session: BaseSession, child_id: str) -> list[Any]:
    return [
        e
        for e in session.read()
        if e.type == SUBAGENT_END and e.payload().session == child_id
    ]


def _texts(messages: list[Message]) -> list[str]:
    return [m.text for m in messages]


class ChildSessionConformance:
    """Child sessions (fork, merge, discard, children_of) and the session record, on every
    backend. Mixed into :class:`agentsession.testing.StoreConformance`, which provides the
    factory and fixtures."""

    durable: bool = True
    shared_across_processes: bool = True
    encryption_key: bytes | None = None

    def make_store(self, tmp_path: Path, **options: Any) -> BaseStore:
        raise NotImplementedError

    def reopen(self, store: BaseStore, tmp_path: Path, **options: Any) -> BaseStore:
        raise NotImplementedError

    def _parent(self, store: BaseStore, session_id: str = "parent") -> BaseSession:
        parent = store.get(session_id)
        with parent.turn(agent="lead") as turn:
            turn.user("plan the trip")
            with turn.step() as step:
                step.assistant("looking", tool_calls=[ToolCall("c1", "search", {"q": "x"})])
                step.tool_result("c1", "search", "three options")
            turn.assistant("here are three options")
        return parent

    # -- fork ------------------------------------------------------------------------------

    def test_a_fork_is_a_persisted_session_linked_both_ways(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        parent = self._parent(store)
        seen = parent.latest_seq
        child = parent.fork("researcher", inherit="all", task="compare prices",
                            meta={"ticket": "T-1"})
        assert child.id.startswith("parent:child:researcher:")
        first = child.read()[0]
        assert first.seq == 1 and first.type == SESSION_FORK
        fork = first.payload()
        assert (fork.parent, fork.parent_seq, fork.agent, fork.task, fork.inherit) == (
            "parent", seen, "researcher", "compare prices", -1
        )
        link = parent.read(seen)[-1]
        assert link.type == SUBAGENT_START and link.payload().session == child.id
        assert child.messages() == parent.messages()
        again = self.reopen(store, tmp_path)
        try:
            kept = again.open(child.id)
            assert (kept.parent, kept.fork_point) == ("parent", seen)
            assert kept.messages() == parent.messages()
            [info] = again.children_of("parent")
            assert (info.id, info.agent, info.task, info.fork_seq, info.state) == (
                child.id, "researcher", "compare prices", seen, "active"
            )
            assert kept.info().metadata == {"ticket": "T-1"}
            assert kept.info().parent == "parent"
            assert store.get("parent").parent is None
            assert again.children_of("nobody") == []
        finally:
            if again is not store:
                again.close()

    def test_children_are_listed_in_fork_order(self, store: BaseStore) -> None:
        parent = self._parent(store)
        ids = [parent.fork(f"agent{i}").id for i in range(5)]
        assert [c.id for c in store.children_of("parent")] == ids
        assert store.exists(ids[0]) and ids[0] in {i.id for i in store.list()}

    def test_inherit_takes_the_last_messages_and_never_a_result_without_its_call(
        self, store: BaseStore
    ) -> None:
        parent = self._parent(store)
        whole = parent.messages()
        assert [m.role for m in whole] == ["user", "assistant", "tool", "assistant"]
        assert parent.fork("a", inherit=0).messages() == []
        assert parent.fork("b", inherit=1).messages() == whole[-1:]
        # The last 2 would start at the tool result: its call is not there, so it goes too.
        assert parent.fork("c", inherit=2).messages() == whole[-1:]
        assert parent.fork("d", inherit=3).messages() == whole[-3:]
        assert parent.fork("e", inherit=99).messages() == whole
        for bad in (-1, "some", 1.5, True):
            with pytest.raises(UsageError):
                parent.fork("x", inherit=bad)  # type: ignore[arg-type]

    def test_a_call_still_in_flight_is_not_inherited(self, store: BaseStore) -> None:
        parent = store.get("inflight")
        with parent.turn(agent="lead") as turn:
            turn.user("delegate it")
            with turn.step() as step:
                step.assistant("delegating", tool_calls=[ToolCall("t1", "task", {})])
                child = parent.fork("worker", inherit="all")
                assert _texts(child.messages()) == ["delegate it"]
                child.merge("done it")
                step.tool_result("t1", "task", "ok")
        # The merge landed while the call was open: the call still gets its real result.
        history = parent.messages()
        assert [(m.role, m.text) for m in history] == [
            ("user", "delegate it"), ("assistant", "delegating"), ("tool", ""),
            ("assistant", "done it"),
        ]
        assert history[2].tool_results[0].content == "ok"

    def test_a_child_continues_after_its_inherited_history(self, store: BaseStore) -> None:
        parent = self._parent(store)
        child = parent.fork("researcher", inherit=1)
        with child.turn(agent="researcher") as turn:
            turn.user("find the cheapest")
            turn.assistant("option two")
        assert _texts(child.messages()) == [
            "here are three options", "find the cheapest", "option two"
        ]
        assert child.latest_seq == 5  # fork, turn/start, user, assistant, turn/end

    def test_an_explicit_child_id_that_exists_is_refused(self, store: BaseStore) -> None:
        parent = self._parent(store)
        parent.fork("a", child_id="kid")
        with pytest.raises(DuplicateSession):
            parent.fork("b", child_id="kid")
        with pytest.raises(DuplicateSession):
            self._parent(store, "p2").fork("c", child_id="parent")
        assert [c.id for c in store.children_of("parent")] == ["kid"]
        assert store.children_of("p2") == []

    def test_max_messages_caps_the_childs_history(self, store: BaseStore) -> None:
        parent = self._parent(store)
        child = parent.fork("worker", inherit="all", max_messages=3)
        for i in range(4):
            with child.turn(agent="worker") as turn:
                turn.user(f"q{i}")
                turn.assistant(f"a{i}")
        # As the store's cap: at each new user turn, older whole turns beyond 3 messages go.
        assert _texts(child.messages()) == ["q2", "a2", "q3", "a3"]
        assert len(parent.messages()) == 4  # the parent keeps its own history

    # -- merge -----------------------------------------------------------------------------

    def test_merge_with_a_summary_writes_one_authored_message_then_marks_the_child(
        self, store: BaseStore
    ) -> None:
        parent = self._parent(store)
        child = parent.fork("researcher", inherit="all")
        with child.turn(agent="researcher") as turn:
            turn.user("compare")
            turn.assistant("two is cheapest")
        seq = child.merge("option two is cheapest")
        end = parent.read(seq - 1, 1)[0]
        assert end.type == SUBAGENT_END and end.payload().status == "merged"
        last = parent.messages()[-1]
        assert (last.role, last.text, last.author) == (
            "assistant", "option two is cheapest", "researcher"
        )
        assert child.read()[-1].type == SESSION_MERGE
        assert store.children_of("parent")[0].state == "merged"
        other = parent.fork("writer")
        other.merge(Message.assistant("drafted"), as_author="editor")
        assert parent.messages()[-1].author == "editor"

    def test_merge_without_a_summary_copies_only_the_childs_own_messages(
        self, store: BaseStore
    ) -> None:
        parent = self._parent(store)
        before = parent.messages()
        child = parent.fork("researcher", inherit="all")
        with child.turn(agent="researcher") as turn:
            turn.user("check prices")
            with turn.step() as step:
                step.assistant("", tool_calls=[ToolCall("k1", "prices", {})])
                step.tool_result("k1", "prices", "cheap")
            turn.assistant("option two")
        child.merge()
        after = parent.messages()
        assert after[: len(before)] == before
        added = after[len(before) :]
        assert [m.role for m in added] == ["user", "assistant", "tool", "assistant"]
        assert added[-1].text == "option two" and added[-1].author == "researcher"
        assert _texts(after).count("plan the trip") == 1  # inherited messages not copied

    def test_merged_or_discarded_children_refuse_a_second_end(self, store: BaseStore) -> None:
        parent = self._parent(store)
        merged = parent.fork("a")
        merged.merge("done")
        with pytest.raises(ChildStateError) as err:
            merged.merge("again")
        assert err.value.state == "merged" and merged.id in str(err.value)
        with pytest.raises(ChildStateError):
            merged.discard("late")
        dropped = parent.fork("b")
        note = dropped.discard("not needed")
        assert parent.read(note - 1, 1)[0].payload().status == "discarded"
        with pytest.raises(ChildStateError) as err:
            dropped.merge("too late")
        assert err.value.state == "discarded"
        listed = store.children_of("parent", include_discarded=True)
        assert [c.state for c in listed] == ["merged", "discarded"]
        assert listed[0].merged_at is not None and listed[1].merged_at is None
        assert [c.id for c in store.children_of("parent")] == [merged.id]  # as lango
        assert store.get(dropped.id).latest_seq > 0  # still there to read
        assert len(_ends(parent, merged.id)) == 1 and len(_ends(parent, dropped.id)) == 1
        assert len(parent.messages()) == 5  # the discard note is not in the history
        with pytest.raises(UsageError):
            parent.merge("not a child")

    def test_a_merge_from_inside_the_parents_turn_does_not_wait_for_its_lock(
        self, store: BaseStore
    ) -> None:
        parent = self._parent(store)
        child = parent.fork("a")
        with store.lock("parent", timeout=5):
            child.merge("inside", lock_timeout=0)
        other = parent.fork("b")
        held = threading.Event()
        release = threading.Event()

        def hold() -> None:
            with store.lock("parent", timeout=5):
                held.set()
                release.wait(10)

        thread = threading.Thread(target=hold)
        thread.start()
        try:
            held.wait(5)
            from ..errors import LockTimeout

            with pytest.raises(LockTimeout):
                other.merge("blocked", lock_timeout=0.1)
            assert _ends(parent, other.id) == []
        finally:
            release.set()
            thread.join()
        other.merge("after")
        assert len(_ends(parent, other.id)) == 1

    def test_a_child_of_a_deleted_and_recreated_parent_cannot_merge(
        self, store: BaseStore
    ) -> None:
        parent = self._parent(store)
        child = parent.fork("a")
        store.delete("parent")
        self._parent(store)
        with pytest.raises(ChildStateError) as err:
            child.merge("into the wrong life")
        assert err.value.state == "orphaned"
        assert store.children_of("parent") == []
        assert _ends(store.get("parent"), child.id) == []

    def test_a_deleted_child_leaves_its_parents_index(self, store: BaseStore) -> None:
        parent = self._parent(store)
        merged, active = parent.fork("a"), parent.fork("b")
        merged.merge("done")
        assert store.delete(merged.id)
        assert [c.id for c in store.children_of("parent")] == [active.id]
        raw = store.meta_get("children", "parent")
        assert raw is not None and (store.encrypted or merged.id not in raw)
        assert store.delete(active.id)
        assert store.children_of("parent") == []

    def test_delete_recursive_removes_the_tree(self, store: BaseStore) -> None:
        parent = self._parent(store)
        child = parent.fork("a")
        grandchild = child.fork("b")
        assert [c.id for c in store.children_of(child.id)] == [grandchild.id]
        assert store.delete("parent", recursive=True)
        assert not store.exists(child.id) and not store.exists(grandchild.id)
        assert store.children_of("parent") == []

    # -- shredding (encrypted stores) -----------------------------------------------------

    def test_shredding_a_parent_with_children_needs_recursive_or_keep_children(
        self, store: BaseStore
    ) -> None:
        if not store.encrypted:
            pytest.skip("shredding needs an encrypted store")
        parent = self._parent(store)
        child = parent.fork("a", inherit="all")
        grandchild = child.fork("b", inherit="all")
        assert grandchild.messages()[0].text == "plan the trip"  # a copy of the parent's
        with pytest.raises(UsageError, match=r"child session\(s\) holding copies"):
            store.shred("parent")
        assert not store.is_shredded("parent")
        assert store.shred("parent", recursive=True) == [grandchild.id, child.id, "parent"]
        for sid in ("parent", child.id, grandchild.id):
            assert store.is_shredded(sid)
            with pytest.raises(SessionShredded):
                store.get(sid).read()
        assert [(c.id, c.shredded) for c in store.children_of("parent")] == [(child.id, True)]
        assert store.delete("parent", recursive=True)
        assert not store.exists(child.id) and not store.exists(grandchild.id)
        assert store.children_of("parent") == []

    def test_a_parent_shredded_alone_keeps_its_children_listed_and_deletable(
        self, store: BaseStore
    ) -> None:
        if not store.encrypted:
            pytest.skip("shredding needs an encrypted store")
        parent = self._parent(store)
        merged, active = parent.fork("a", inherit="all"), parent.fork("b", inherit="all")
        merged.merge("done")
        assert store.shred("parent", keep_children=True) == ["parent"]
        assert [(c.id, c.state, c.shredded) for c in store.children_of("parent")] == [
            (merged.id, "merged", False),
            (active.id, "active", False),
        ]
        # The children keep their copies: that is what keep_children chose.
        assert store.get(active.id).messages()[0].text == "plan the trip"
        # Nothing can be merged into a shredded parent: the child is orphaned.
        with pytest.raises(ChildStateError, match="shredded") as orphaned:
            store.get(active.id).merge("too late")
        assert orphaned.value.state == "orphaned"
        assert store.shred(active.id) == [active.id]
        assert [c.shredded for c in store.children_of("parent")] == [False, True]
        assert store.delete(active.id)
        assert [c.id for c in store.children_of("parent")] == [merged.id]
        assert store.delete("parent")
        assert store.exists(merged.id)

    def test_lifecycle_hooks_run_after_the_write_and_cannot_undo_it(
        self, store: BaseStore, caplog: pytest.LogCaptureFixture
    ) -> None:
        seen: list[LifecycleEvent] = []

        def record(event: LifecycleEvent) -> None:
            child = store.get(event.child_id)
            seen.append(event)
            assert child.latest_seq >= 1  # durable before the hook runs

        def broken(event: LifecycleEvent) -> None:
            raise RuntimeError("hook bug")

        store.add_lifecycle_hook(record)
        store.add_lifecycle_hook(broken)
        parent = self._parent(store)
        with caplog.at_level(logging.ERROR, logger="agentsession"):
            a = parent.fork("a")
            a.merge("done")
            b = parent.fork("b")
            b.discard("no")
        assert [(e.type, e.child_id, e.agent) for e in seen] == [
            ("fork", a.id, "a"), ("merge", a.id, "a"), ("fork", b.id, "b"), ("discard", b.id, "b")
        ]
        assert all(e.parent_id == "parent" and e.parent_seq > 0 for e in seen)
        assert "hook bug" in caplog.text
        store.remove_lifecycle_hook(record)
        parent.fork("c")
        assert len(seen) == 4

    def test_a_merge_killed_before_its_mark_is_completed_by_a_retry(
        self, store: BaseStore
    ) -> None:
        if not self.shared_across_processes:
            pytest.skip("this backend's data is not shared between processes")
        parent = self._parent(store)
        child = parent.fork("researcher", inherit="all")
        with child.turn(agent="researcher") as turn:
            turn.user("work")
            turn.assistant("worked")
        proc = subprocess.run(
            [sys.executable, "-c", _KILLED_MERGER, store.url, child.id, "the summary"],
            capture_output=True,
            timeout=120,
            env=child_env(self.encryption_key),
        )
        assert proc.returncode == -9, proc.stderr.decode(errors="replace")
        assert len(_ends(parent, child.id)) == 1  # the parent write landed
        assert child.read()[-1].type != SESSION_MERGE  # the mark did not
        assert store.children_of("parent")[0].state == "active"
        seq = child.merge("the summary")
        assert len(_ends(parent, child.id)) == 1 and seq == _ends(parent, child.id)[0].seq
        assert _texts(parent.messages()).count("the summary") == 1
        assert child.read()[-1].type == SESSION_MERGE
        assert store.children_of("parent")[0].state == "merged"
        with pytest.raises(ChildStateError):
            child.merge("the summary")

    def test_of_two_processes_merging_one_child_exactly_one_wins(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        if not self.shared_across_processes:
            pytest.skip("this backend's data is not shared between processes")
        parent = self._parent(store)
        child = parent.fork("researcher")
        go = tmp_path / "go-merge"
        args = [[store.url, child.id, str(go), str(n)] for n in range(2)]
        outs = run_released(_MERGER, args, go, 120.0, self.encryption_key)
        assert sorted(outs) == ["merged", "refused merged"]
        assert len(_ends(parent, child.id)) == 1
        assert sum(t.startswith("summary from") for t in _texts(parent.messages())) == 1

    # -- the session record ----------------------------------------------------------------

    def test_the_session_record_is_durable_and_reported_by_info(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        parent = self._parent(store)
        info = parent.info()
        first, last = parent.read()[0], parent.read()[-1]
        assert (info.created_at, info.updated_at) == (first.time, last.time)
        assert (info.agent_id, info.model, info.metadata, info.parent) == ("", "", {}, "")
        updated = parent.update(agent_id="lead", channel_type="slack", channel_id="C1",
                                model="m1", metadata={"team": "T"})
        assert (updated.agent_id, updated.channel_type, updated.channel_id, updated.model) == (
            "lead", "slack", "C1", "m1"
        )
        assert updated.updated_at is not None and updated.updated_at >= last.time  # type: ignore[operator]
        parent.update(model="m2")  # None leaves the others alone
        parent.update(channel_id="")  # "" clears
        again = self.reopen(store, tmp_path)
        try:
            kept = again.open("parent").info()
            assert (kept.agent_id, kept.channel_type, kept.channel_id, kept.model) == (
                "lead", "slack", "", "m2"
            )
            assert kept.metadata == {"team": "T"} and kept.created_at == first.time
        finally:
            if again is not store:
                again.close()
        with pytest.raises(SessionNotFound):
            store.get("never").update(model="x")
        with pytest.raises(UsageError):
            parent.update(metadata={"n": 1})  # type: ignore[dict-item]
        store.delete("parent")
        self._parent(store)
        assert store.get("parent").info().model == ""  # the record died with the session

    def test_concurrent_record_updates_of_different_fields_never_lose_one(
        self, store: BaseStore
    ) -> None:
        session = self._parent(store)
        fields = ["agent_id", "channel_type", "channel_id", "model"]

        def write(name: str) -> None:
            for i in range(10):
                change: dict[str, Any] = {name: f"{name}-{i}"}
                session.update(**change)

        threads = [threading.Thread(target=write, args=(name,)) for name in fields]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        info = session.info()
        assert [getattr(info, name) for name in fields] == [f"{n}-9" for n in fields]

    def test_create_writes_the_record_and_refuses_an_existing_id(self, store: BaseStore) -> None:
        from ..events import Event

        made = store.create("fresh", [Event.new("test/x", {})], agent_id="bot",
                            channel_type="telegram", model="m")
        assert (made.info().agent_id, made.info().channel_type) == ("bot", "telegram")
        with pytest.raises(DuplicateSession):
            store.create("fresh", [Event.new("test/x", {})], agent_id="other")
        assert store.get("fresh").info().agent_id == "bot"
