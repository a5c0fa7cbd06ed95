"""Rewind, retry and edit (``agentsession.rewind``): the marker, the derived history it leaves,
undo, turns kept whole, the compaction floor, running turns, conflicts, encryption, the async
API, and a reader that meets a newer revision. On memory, JSONL, SQLite and PostgreSQL (the
latter needs ``AGENTSESSION_TEST_POSTGRES_DSN``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentsession as ags
from agentsession import Message
from agentsession.aio import open_async_store
from agentsession.derive import live_events, messages
from agentsession.errors import NewerFormat, UsageError
from agentsession.events import SESSION_REWIND, SessionRewind
from agentsession.messages import ToolCall, ToolResult
from agentsession.validation import provider_errors

from .store_urls import store_url


@pytest.fixture(params=["memory", "jsonl", "sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from store_url(request.param, tmp_path)


def texts(session: ags.BaseSession) -> list[str]:
    return [f"{m.role[0]}:{m.text}" for m in session.messages()]


def three_turns(session: ags.BaseSession) -> list[int]:
    """Three turns q0/a0 .. q2/a2; the seqs of their user messages."""
    seqs = []
    for i in range(3):
        with session.turn() as turn:
            seqs.append(turn.user(f"q{i}"))
            turn.assistant(f"a{i}")
    return seqs


def test_rewind_to_a_turn_and_continue(url: str) -> None:
    with ags.open_store(url) as store:
        session = store.get("c")
        users = three_turns(session)
        before = len(session.read())
        marker = session.rewind(to_turn=users[1], reason="wrong path")
        assert texts(session) == ["u:q0", "a:a0", "u:q1", "a:a1"]
        assert len(session.read()) == before + 1  # nothing deleted, one marker
        stored = session.read()[-1]
        assert stored.seq == marker and stored.type == SESSION_REWIND
        payload = stored.decode(SessionRewind)
        assert (payload.kind, payload.reason, payload.min_revision) == ("rewind", "wrong path", 6)
        assert payload.to_seq == users[1] + 2  # the turn's turn/end
        with session.turn() as turn:
            turn.user("q-new")
            turn.assistant("a-new")
        expected = ["u:q0", "a:a0", "u:q1", "a:a1", "u:q-new", "a:a-new"]
        assert texts(session) == expected
        assert [f"{m.role[0]}:{m.text}" for m in messages(session.read())] == expected
    if url != "memory:":
        with ags.open_store(url) as again:  # derived from the log alone
            assert texts(again.get("c")) == expected
            assert [e.message.text for e in again.get("c").entries()][-1] == "a-new"


def test_undo_a_rewind_by_rewinding_to_the_seq_before_it(url: str) -> None:
    with ags.open_store(url) as store:
        session = store.get("c")
        users = three_turns(session)
        marker = session.rewind(to_seq=users[0] - 1)  # before the first turn
        assert texts(session) == []
        session.rewind(to_seq=marker - 1)
        assert texts(session) == ["u:q0", "a:a0", "u:q1", "a:a1", "u:q2", "a:a2"]


def test_a_seq_inside_a_turn_moves_to_its_start(url: str) -> None:
    with ags.open_store(url) as store:
        session = store.get("c")
        users = three_turns(session)
        marker = session.rewind(to_seq=users[2] + 1)  # q2's answer, inside turn 2
        assert session.read()[-1].decode(SessionRewind).to_seq == users[2] - 2
        assert texts(session) == ["u:q0", "a:a0", "u:q1", "a:a1"]
        assert marker == session.latest_seq


def test_retry_regenerates_the_last_answer(url: str) -> None:
    with ags.open_store(url) as store:
        session = store.get("c")
        three_turns(session)
        turn = session.retry()
        assert session.read()[-1].type != SESSION_REWIND  # nothing written before entering
        with turn:
            turn.assistant("a2 again")
        assert texts(session) == ["u:q0", "a:a0", "u:q1", "a:a1", "u:q2", "a:a2 again"]
        rewinds = [e.decode(SessionRewind) for e in session.read() if e.type == SESSION_REWIND]
        assert [r.kind for r in rewinds] == ["retry"]


def test_edit_an_earlier_message(url: str) -> None:
    with ags.open_store(url) as store:
        session = store.get("c")
        users = three_turns(session)
        with session.edit(users[1], "q1 edited") as turn:
            turn.assistant("a1'")
        assert texts(session) == ["u:q0", "a:a0", "u:q1 edited", "a:a1'"]
        assert session.read()[-5].decode(SessionRewind).kind == "edit"


def test_tool_calls_stay_answered_across_rewinds() -> None:
    store = ags.open_store("memory:")
    session = store.get("c")
    with session.turn() as turn:
        turn.user("go")
        with turn.step() as step:
            step.assistant(Message.assistant("", tool_calls=[ToolCall(id="t1", name="f")]))
        with turn.step() as step:
            step.tool_result(ToolResult(call_id="t1", name="f", content="ok"))
            step.assistant("done")
    call_seq = next(e.seq for e in session.read() if e.type == "assistant/message")
    session.rewind(to_seq=call_seq)  # inside the turn: the whole turn goes
    assert session.messages() == []
    session.rewind(to_seq=session.latest_seq - 1)  # undone
    assert provider_errors(session.messages()) == []
    assert [m.role for m in session.messages()] == ["user", "assistant", "tool", "assistant"]


def test_the_latest_compaction_is_a_floor() -> None:
    store = ags.open_store("memory:")
    session = store.get("c")
    users = three_turns(session)
    marker = session.compact("summary of q0..q1", keep_turns=1)
    assert marker is not None
    with pytest.raises(UsageError, match="before the compaction marker"):
        session.rewind(to_seq=users[0])
    session.rewind(to_seq=marker)  # the marker itself is fine: the compacted history
    assert texts(session)[0] == "u:summary of q0..q1"
    # compaction after a rewind summarises only the live history
    session2 = store.get("d")
    users2 = three_turns(session2)
    session2.rewind(to_turn=users2[0])
    with session2.turn() as turn:
        turn.user("q9")
        turn.assistant("a9")
    session2.compact("S", keep_turns=1)
    assert texts(session2) == ["u:S", "u:q9", "a:a9"]


def test_a_running_turn_refuses_unless_under_its_lock(url: str) -> None:
    with ags.open_store(url) as store:
        session = store.get("c")
        users = three_turns(session)
        turn = session.turn()
        turn.__enter__()
        errors: list[BaseException] = []

        def other() -> None:  # another thread, no lock
            try:
                store.get("c").rewind(to_turn=users[0])
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert isinstance(errors[0], UsageError) and "turn running" in str(errors[0])
        turn.__exit__(None, None, None)
        store.get("c").rewind(to_seq=store.get("c").latest_seq)  # a no-op rewind, allowed now
        session = store.get("c")
        with store.lock("c", timeout=5), session.turn() as turn:
            turn.user("q3")
            session.rewind(to_turn=users[0])  # under the lock that runs it
        assert texts(session)[:2] == ["u:q0", "a:a0"]


def test_bad_points_are_refused() -> None:
    store = ags.open_store("memory:")
    session = store.get("c")
    with pytest.raises(UsageError, match="nothing to rewind"):
        session.rewind(to_seq=0)
    three_turns(session)
    for kwargs in ({}, {"to_seq": 1, "to_turn": 1}, {"to_seq": 99}, {"to_seq": -1},
                   {"to_turn": "no-such-turn"}, {"to_seq": True}):
        with pytest.raises(UsageError):
            session.rewind(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        session.edit("2", "x")  # type: ignore[arg-type]
    with pytest.raises(UsageError), session.edit(2, Message.assistant("not a user message")):
        pass
    empty = store.get("e")
    with empty.turn() as turn:
        turn.assistant("no user message")
    with pytest.raises(UsageError, match="no turn with a user message"), empty.retry():
        pass


def test_a_conflicting_writer_makes_the_rewind_plan_again() -> None:
    store = ags.open_store("memory:")
    session = store.get("c")
    users = three_turns(session)
    other = store.get("c")
    real = session.read
    calls = []

    def read_then_append(after: int = 0, limit: int | None = None) -> list[ags.Event]:
        events = real(after, limit)
        if not calls:
            calls.append(1)  # another writer appends between the plan and the marker
            store2 = other
            with store2.turn() as turn:
                turn.user("q3")
                turn.assistant("a3")
        return events

    session.read = read_then_append  # type: ignore[method-assign]
    session.rewind(to_turn=users[0])
    assert texts(session) == ["u:q0", "a:a0"]
    marker = session.read()[-1]
    assert marker.type == SESSION_REWIND and marker.seq == 17  # planned again at seq 16
    assert [e.type for e in session.read()].count(SESSION_REWIND) == 1


def test_an_encrypted_store_rewinds(tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    url = str(tmp_path / "enc")
    with ags.open_store(url, passphrase="correct horse") as store:
        session = store.get("c")
        users = three_turns(session)
        with session.retry() as turn:
            turn.assistant("again")
        session.rewind(to_turn=users[0])
        assert texts(session) == ["u:q0", "a:a0"]
    with ags.open_store(url, passphrase="correct horse") as store:
        assert texts(store.get("c")) == ["u:q0", "a:a0"]


def test_the_async_api() -> None:
    async def run() -> list[str]:
        async with open_async_store("memory:") as store:
            session = await store.get("c")
            async with session.turn() as turn:
                await turn.user("q0")
                await turn.assistant("a0")
            async with session.retry() as turn:
                await turn.assistant("a0 again")
            entries = await session.entries()
            async with session.edit(entries[0].seq, "q0 edited") as turn:
                await turn.assistant("a0'")
            seq = await session.rewind(to_seq=0)
            assert seq > 0
            return [m.text for m in await session.messages()]

    assert asyncio.run(run()) == []


def test_live_events_and_a_newer_revision() -> None:
    def ev(seq: int, kind: str, payload: object = None) -> ags.Event:
        return ags.Event.new(kind, payload).__class__(
            seq=seq, type=kind, data=ags.Event.new(kind, payload).data
        )

    log = [
        ev(1, "user/message", Message.user("a")),
        ev(2, "user/message", Message.user("b")),
        ev(3, SESSION_REWIND, SessionRewind(to_seq=1)),
        ev(4, "user/message", Message.user("c")),
        ev(5, SESSION_REWIND, SessionRewind(to_seq=2)),  # back to a, b
        ev(6, "user/message", Message.user("d")),
    ]
    assert [e.seq for e in live_events(log)] == [1, 2, 6]
    assert [m.text for m in messages(log)] == ["a", "b", "d"]
    newer = [*log, ev(7, SESSION_REWIND, SessionRewind(to_seq=6, min_revision=8))]
    with pytest.raises(NewerFormat, match="revision 8"):
        messages(newer)
    unknown = [*log, ev(7, "session/someday", {"minRevision": 9})]
    with pytest.raises(NewerFormat, match="revision 9"):
        messages(unknown)
    assert messages([*log, ev(7, "myapp/x", {"minRevision": 1})])  # known revisions pass
