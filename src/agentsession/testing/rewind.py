"""The rewind and branch rules every backend holds (mixed into
:class:`~agentsession.testing.conformance.StoreConformance`): a rewind leaves the turns after
its point out of the derived history and nothing out of ``read()``, is undone by rewinding to
the seq before it, keeps turns whole, stops at the latest compaction, refuses while another
worker's turn runs, is planned again when another writer appended first, and a second store
on the same data derives the same history from the log alone; a branch shares its origin's
history up to its point, diverges, reads back the same from a second store, and keeps its
origin from being deleted alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..branching import BranchRef
from ..errors import UsageError
from ..events import SESSION_BRANCH, SESSION_REWIND, SessionRewind
from ..session import BaseSession
from ..store import BaseStore

__all__ = ["RewindConformance"]


def _texts(session: BaseSession) -> list[str]:
    return [f"{m.role[0]}:{m.text}" for m in session.messages()]


def _turns(session: BaseSession, count: int) -> list[int]:
    """``count`` turns q<i>/a<i>; the seqs of their user messages."""
    seqs = []
    for i in range(count):
        with session.turn() as turn:
            seqs.append(turn.user(f"q{i}"))
            turn.assistant(f"a{i}")
    return seqs


class RewindConformance:
    """Rewind, retry and edit on the store under test (``store`` and ``reopen`` come from
    :class:`~agentsession.testing.conformance.StoreConformance`)."""

    durable: bool

    def reopen(self, store: BaseStore, tmp_path: Path, **options: Any) -> BaseStore:
        raise NotImplementedError

    def test_rewind_leaves_later_turns_out_of_the_history_and_keeps_the_log(
        self, store: BaseStore
    ) -> None:
        session = store.get("rw")
        users = _turns(session, 3)
        count = len(session.read())
        marker = session.rewind(to_turn=users[0], reason="try again")
        assert _texts(session) == ["u:q0", "a:a0"]
        assert len(session.read()) == count + 1 and session.read()[-1].seq == marker
        payload = session.read()[-1].decode(SessionRewind)
        assert (payload.to_seq, payload.reason) == (users[0] + 2, "try again")
        with session.turn() as turn:
            turn.user("q9")
            turn.assistant("a9")
        assert _texts(session) == ["u:q0", "a:a0", "u:q9", "a:a9"]
        session.rewind(to_seq=marker - 1)  # undo: the history before the first rewind
        assert _texts(session) == ["u:q0", "a:a0", "u:q1", "a:a1", "u:q2", "a:a2"]

    def test_a_second_store_derives_the_same_history_from_the_log(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        session = store.get("rw")
        users = _turns(session, 3)
        with session.retry() as turn:
            turn.assistant("a2'")
        with session.edit(users[1], "q1'") as turn:
            turn.assistant("a1'")
        expected = ["u:q0", "a:a0", "u:q1'", "a:a1'"]
        assert _texts(session) == expected
        other = self.reopen(store, tmp_path)
        try:
            assert _texts(other.get("rw")) == expected
            kinds = [e.decode(SessionRewind).kind for e in other.get("rw").read()
                     if e.type == SESSION_REWIND]
            assert kinds == ["retry", "edit"]
        finally:
            if other is not store:
                other.close()

    def test_a_point_inside_a_turn_moves_before_it_and_compaction_is_a_floor(
        self, store: BaseStore
    ) -> None:
        session = store.get("rw")
        users = _turns(session, 3)
        session.rewind(to_seq=users[2] + 1)  # q2's answer
        assert session.read()[-1].decode(SessionRewind).to_seq == users[2] - 2
        assert _texts(session) == ["u:q0", "a:a0", "u:q1", "a:a1"]
        marker = session.compact("summary", keep_turns=1)
        assert marker is not None
        with pytest.raises(UsageError, match="compaction"):
            session.rewind(to_seq=users[0])
        assert _texts(session) == ["u:summary", "u:q1", "a:a1"]

    def test_a_rewind_racing_a_writer_is_planned_again(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        session = store.get("rw")
        users = _turns(session, 2)
        other = self.reopen(store, tmp_path)
        real = session.read
        raced: list[int] = []

        def read_then_race(after: int = 0, limit: int | None = None) -> list[Any]:
            events = real(after, limit)
            if not raced:  # another writer appends between the plan and the marker
                writer = other.get("rw")
                with writer.turn() as turn:
                    raced.append(turn.user("q-late"))
                    turn.assistant("a-late")
            return events

        session.read = read_then_race  # type: ignore[method-assign]
        try:
            session.rewind(to_turn=users[0])
        finally:
            del session.read
            if other is not store:
                other.close()
        if not raced:
            pytest.skip("this store's session reads through another object: not patchable")
        log = session.read()
        assert [e.type for e in log].count(SESSION_REWIND) == 1
        assert log[-1].type == SESSION_REWIND and log[-1].seq == raced[0] + 3
        assert _texts(session) == ["u:q0", "a:a0"]  # the late turn rewound too

    def test_a_running_turn_is_rewound_only_under_the_lock(self, store: BaseStore) -> None:
        session = store.get("rw")
        users = _turns(session, 2)
        turn = session.turn()
        turn.__enter__()
        try:
            with pytest.raises(UsageError, match="turn running"):
                session.rewind(to_turn=users[0])
        finally:
            turn.__exit__(None, None, None)
        with store.lock("rw", timeout=10), session.turn() as turn:
            turn.user("q2")
            session.rewind(to_turn=users[0])
        assert _texts(session) == ["u:q0", "a:a0"]

    def test_a_branch_shares_its_origins_history_and_diverges(
        self, store: BaseStore, tmp_path: Path
    ) -> None:
        origin = store.get("rw")
        users = _turns(origin, 3)
        branch = origin.branch(at_turn=users[0], id="rw-branch")
        point = users[0] + 2
        assert branch.origin == BranchRef("rw", point)
        assert origin.branches() == [BranchRef("rw-branch", point)]
        with branch.turn() as turn:
            turn.user("qb")
            turn.assistant("ab")
        assert _texts(branch) == ["u:q0", "a:a0", "u:qb", "a:ab"]
        assert _texts(origin)[-2:] == ["u:q2", "a:a2"]
        log = branch.read()
        assert [e.seq for e in log] == list(range(1, point + 6))
        assert log[:point] == origin.read()[:point] and log[point].type == SESSION_BRANCH
        with pytest.raises(UsageError, match="branch"):
            store.delete("rw")
        other = self.reopen(store, tmp_path)
        try:
            again = other.get("rw-branch")
            assert again.origin == BranchRef("rw", point)
            assert _texts(again) == ["u:q0", "a:a0", "u:qb", "a:ab"]
            assert again.read(after=point) == log[point:]
        finally:
            if other is not store:
                other.close()
        assert store.delete("rw", recursive=True)
        assert not store.exists("rw-branch")
