"""Crash recovery: scanning for turns a crash left open, repairing them, store-wide recovery."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

import agentsession as ags
import agentsession.derive as ags_derive
from agentsession.derive import Deriver
from agentsession.events import (
    ASSISTANT_MESSAGE,
    SESSION_RECOVERY,
    STEP_END,
    STEP_START,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
    Event,
    SessionRecovery,
    StepEnd,
    StepStart,
    TurnEnd,
    TurnStart,
)
from agentsession.messages import Message, ToolCall, ToolResult
from agentsession.recovery import (
    INCOMPLETE_TURN_REASON,
    IncompleteTurn,
    latest_event_seq,
    read_all_events,
    recover_store,
    repair_all_incomplete,
    repair_incomplete,
    scan_all_incomplete,
    scan_incomplete,
)
from agentsession.testing.conformance import FakeClock, start_lock_holder
from agentsession.validation import provider_errors

# -- building logs ----------------------------------------------------------------------------


def turn_start(agent: str = "coder") -> Event:
    return Event.new(TURN_START, TurnStart(), agent=agent)


def turn_end(steps: int, agent: str = "coder") -> Event:
    return Event.new(TURN_END, TurnEnd(steps=steps), agent=agent)


def step_start(step: int, agent: str = "coder") -> Event:
    return Event.new(STEP_START, StepStart(step=step), agent=agent)


def step_end(step: int, agent: str = "coder") -> Event:
    return Event.new(STEP_END, StepEnd(step=step), agent=agent)


def user(text: str, agent: str = "coder") -> Event:
    return Event.new(USER_MESSAGE, Message.user(text), agent=agent)


def assistant(*call_ids: str, text: str = "", agent: str = "coder") -> Event:
    calls = [ToolCall(call_id, "read", {"path": f"{call_id}.py"}) for call_id in call_ids]
    return Event.new(ASSISTANT_MESSAGE, Message.assistant(text, tool_calls=calls), agent=agent)


def result(call_id: str, agent: str = "coder") -> Event:
    return Event.new(
        TOOL_RESULT, ToolResult(call_id, "read", f"contents of {call_id}"), agent=agent
    )


def call(call_id: str) -> ToolCall:
    return ToolCall(call_id, "read", {"path": f"{call_id}.py"})


def numbered(events: list[Event]) -> list[Event]:
    """The events with seqs 1, 2, 3 ... as a store would stamp them."""
    return [Event(seq=i, type=e.type, agent=e.agent, data=e.data) for i, e in enumerate(events, 1)]


def crashed_turn(agent: str = "coder") -> list[Event]:
    """agentkit's crashed session: a step open, calls a and b, only a answered."""
    return [
        turn_start(agent),
        user("read both files", agent),
        step_start(0, agent),
        assistant("call-a", "call-b", agent=agent),
        result("call-a", agent),
    ]


def closed_turn(agent: str = "coder") -> list[Event]:
    return [
        turn_start(agent),
        user("hello", agent),
        step_start(0, agent),
        assistant(text="hi", agent=agent),
        step_end(0, agent),
        turn_end(1, agent),
    ]


def of_type(session: ags.BaseSession, kind: str) -> list[Event]:
    return [e for e in session.read() if e.type == kind]


def interrupted(messages: list[Message]) -> list[ToolResult]:
    return [r for m in messages for r in m.tool_results if r.audit == {"decision": "interrupted"}]


@pytest.fixture
def store() -> Iterator[ags.BaseStore]:
    store = ags.open_store("memory:")
    try:
        yield store
    finally:
        store.close()


def crashed_session(store: ags.BaseStore, session_id: str = "s") -> ags.BaseSession:
    session = store.get(session_id)
    session.append_many(crashed_turn())
    return session


# -- scanning ---------------------------------------------------------------------------------


def test_scan_finds_the_open_turn_its_open_step_and_the_unanswered_call() -> None:
    turn = scan_incomplete(numbered(crashed_turn()))
    assert turn == IncompleteTurn(
        turn_start_seq=1,
        agent="coder",
        steps_started=1,
        steps_ended=0,
        open_step=0,
        orphan_calls=[call("call-b")],
    )


def test_scan_ignores_closed_turns() -> None:
    events = numbered([turn_start(), step_start(0), step_end(0), turn_end(1)])
    assert scan_incomplete(events) is None
    assert scan_all_incomplete(events) == []


def test_scan_of_an_empty_log_finds_nothing() -> None:
    assert scan_incomplete([]) is None


def test_scan_reports_no_open_step_once_the_step_ended() -> None:
    events = numbered([turn_start(), step_start(0), assistant(text="done"), step_end(0)])
    turn = scan_incomplete(events)
    assert turn is not None
    assert (turn.steps_started, turn.steps_ended, turn.open_step) == (1, 1, -1)
    assert turn.orphan_calls == []


def test_another_agents_later_turn_start_does_not_hide_an_open_turn() -> None:
    events = numbered([*crashed_turn("coder"), *closed_turn("reviewer")])
    turns = scan_all_incomplete(events)
    assert [(t.agent, t.turn_start_seq) for t in turns] == [("coder", 1)]
    assert turns[0].orphan_calls == [call("call-b")]


def test_another_agents_turn_end_does_not_close_an_open_turn() -> None:
    events = numbered([turn_start("coder"), turn_start("reviewer"), turn_end(0, "reviewer")])
    assert [t.agent for t in scan_all_incomplete(events)] == ["coder"]


def test_every_agent_can_have_an_open_turn_and_the_earliest_comes_first() -> None:
    events = numbered(
        [turn_start("coder"), turn_start("reviewer"), step_start(0, "reviewer"), turn_start("")]
    )
    turns = scan_all_incomplete(events)
    assert [(t.agent, t.turn_start_seq) for t in turns] == [
        ("coder", 1),
        ("reviewer", 2),
        ("", 4),
    ]
    assert scan_incomplete(events) == turns[0]
    assert turns[1].open_step == 0
    assert turns[0].open_step == -1  # the reviewer's step is not the coder's


def test_a_new_turn_start_of_the_same_agent_supersedes_its_open_turn() -> None:
    events = numbered([*crashed_turn(), turn_start(), user("again")])
    turns = scan_all_incomplete(events)
    assert [t.turn_start_seq for t in turns] == [6]
    assert turns[0].orphan_calls == []
    assert turns[0].open_step == -1


def test_a_turn_end_after_a_superseding_start_leaves_nothing_open() -> None:
    events = numbered([*crashed_turn(), turn_start(), turn_end(0)])
    assert scan_incomplete(events) is None


def test_a_recovery_event_alone_does_not_close_a_turn() -> None:
    record = SessionRecovery(turn_start_seq=1, reason=INCOMPLETE_TURN_REASON)
    events = numbered([turn_start(), Event.new(SESSION_RECOVERY, record, agent="coder")])
    turn = scan_incomplete(events)
    assert turn is not None
    assert turn.turn_start_seq == 1


def test_an_earlier_result_does_not_answer_a_later_call_with_the_same_id() -> None:
    # A previous turn's call "x" got its result late, after the next turn started. agentkit
    # counted results by id, so that late result answered the new turn's own call "x".
    events = numbered(
        [
            turn_start(),
            assistant("x"),
            turn_end(0),
            turn_start(),
            result("x"),
            step_start(0),
            assistant("x"),
        ]
    )
    turn = scan_incomplete(events)
    assert turn is not None
    assert turn.turn_start_seq == 4
    assert turn.orphan_calls == [call("x")]


def test_a_duplicated_result_does_not_answer_a_later_call_with_the_same_id() -> None:
    events = numbered(
        [
            turn_start(),
            step_start(0),
            assistant("x"),
            result("x"),
            result("x"),
            step_end(0),
            step_start(1),
            assistant("x"),
        ]
    )
    turn = scan_incomplete(events)
    assert turn is not None
    assert turn.orphan_calls == [call("x")]


def test_calls_left_unanswered_in_an_earlier_step_are_orphans_too() -> None:
    events = numbered(
        [
            turn_start(),
            step_start(0),
            assistant("x", "y"),
            result("y"),
            step_end(0),
            step_start(1),
            assistant("x"),
            result("x"),
        ]
    )
    turn = scan_incomplete(events)
    assert turn is not None
    assert turn.orphan_calls == [call("x")]  # the first "x"; the second one is answered


def test_orphans_are_only_the_turns_own_agents_calls() -> None:
    events = numbered(
        [
            turn_start("coder"),
            assistant("a1", agent="coder"),
            assistant("b1", agent="reviewer"),
            assistant("n1", agent=""),
        ]
    )
    turn = scan_incomplete(events)
    assert turn is not None
    assert turn.orphan_calls == [call("a1")]


def test_calls_before_the_turn_start_are_not_the_turns_orphans() -> None:
    events = numbered([assistant("old"), turn_start(), user("next")])
    turn = scan_incomplete(events)
    assert turn is not None
    assert turn.orphan_calls == []


def test_unparsable_step_start_still_opens_a_step() -> None:
    bad = Event.new(STEP_START, {"step": "zero"}, agent="coder")
    events = numbered([turn_start(), step_start(0), step_end(0), bad])
    turn = scan_incomplete(events)
    assert turn is not None
    assert (turn.steps_started, turn.open_step) == (2, 1)


def test_latest_event_seq_is_the_highest_seq() -> None:
    assert latest_event_seq(numbered(crashed_turn())) == 5
    assert latest_event_seq([]) == 0


# -- repairing one turn -----------------------------------------------------------------------


def test_repair_closes_the_turn_and_answers_the_unanswered_call(store: ags.BaseStore) -> None:
    session = crashed_session(store)
    report = repair_incomplete(session, scan_incomplete(session.read()))
    assert report.repaired
    assert (report.orphan_results, report.closed_step, report.steps) == (1, 0, 1)
    assert (report.session_id, report.turn_start_seq, report.agent) == ("s", 1, "coder")
    assert scan_incomplete(session.read()) is None
    assert len(of_type(session, SESSION_RECOVERY)) == 1


def test_repair_appends_result_step_end_turn_end_and_recovery_in_one_batch(
    store: ags.BaseStore,
) -> None:
    session = crashed_session(store)
    report = repair_incomplete(session, scan_incomplete(session.read()))
    written = session.read(after=5)
    assert [e.seq for e in written] == [6, 7, 8, 9]
    assert [e.type for e in written] == [TOOL_RESULT, STEP_END, TURN_END, SESSION_RECOVERY]
    assert {e.agent for e in written} == {"coder"}
    assert written[0].payload() == ags_derive.interrupted_tool_result(call("call-b"))
    assert written[1].payload() == StepEnd(step=0)
    assert written[2].payload() == TurnEnd(steps=1)
    assert written[3].payload() == SessionRecovery(
        turn_start_seq=1,
        steps=1,
        orphan_results=1,
        closed_step=0,
        reason="turn/start without turn/end",
    )
    assert report.recovery_seq == 9


def test_turn_end_counts_the_step_the_repair_closed(store: ags.BaseStore) -> None:
    session = store.get("s")
    session.append_many(
        [turn_start(), step_start(0), assistant(text="one"), step_end(0), step_start(1)]
    )
    report = repair_incomplete(session, scan_incomplete(session.read()))
    assert (report.steps, report.closed_step) == (2, 1)
    assert of_type(session, TURN_END)[-1].payload() == TurnEnd(steps=2)
    assert of_type(session, SESSION_RECOVERY)[-1].payload().steps == 2


def test_repair_without_an_open_step_writes_no_step_end(store: ags.BaseStore) -> None:
    session = store.get("s")
    session.append_many([turn_start(), step_start(0), step_end(0)])
    report = repair_incomplete(session, scan_incomplete(session.read()))
    assert [e.type for e in session.read(after=3)] == [TURN_END, SESSION_RECOVERY]
    assert (report.closed_step, report.steps, report.orphan_results) == (-1, 1, 0)


def test_scanning_and_repairing_twice_leaves_one_recovery_event(store: ags.BaseStore) -> None:
    session = crashed_session(store)
    first = repair_incomplete(session, scan_incomplete(session.read()))
    second = repair_incomplete(session, scan_incomplete(session.read()))
    assert first.repaired
    assert not second.repaired
    assert second.recovery_seq == 0
    assert len(of_type(session, SESSION_RECOVERY)) == 1


def test_repairing_a_turn_someone_else_repaired_writes_nothing(store: ags.BaseStore) -> None:
    session = crashed_session(store)
    stale = scan_incomplete(session.read())
    assert repair_incomplete(session, stale).repaired
    latest = session.latest_seq
    report = repair_incomplete(session, stale)
    assert not report.repaired
    assert (report.turn_start_seq, report.agent, report.orphan_results) == (1, "coder", 0)
    assert session.latest_seq == latest


def test_repairing_none_writes_nothing(store: ags.BaseStore) -> None:
    session = store.get("s")
    session.append_many(closed_turn())
    report = repair_incomplete(session, None)
    assert not report.repaired
    assert (report.session_id, report.recovery_seq, report.turn_start_seq) == ("s", 0, 0)
    assert session.latest_seq == 6


def test_repair_uses_the_turn_as_it_is_now_not_the_stale_scan(store: ags.BaseStore) -> None:
    session = crashed_session(store)
    stale = scan_incomplete(session.read())
    session.append(result("call-b"))  # the tool answered after the scan
    report = repair_incomplete(session, stale)
    assert report.orphan_results == 0
    assert all(not e.payload().audit for e in of_type(session, TOOL_RESULT))


def test_scan_keeps_returning_open_turns_until_every_one_is_repaired(
    store: ags.BaseStore,
) -> None:
    session = store.get("s")
    session.append_many([*crashed_turn("coder"), *crashed_turn("reviewer")])
    seen = []
    while (turn := scan_incomplete(session.read())) is not None:
        seen.append((turn.agent, turn.turn_start_seq))
        assert repair_incomplete(session, turn).repaired
    assert seen == [("coder", 1), ("reviewer", 6)]
    assert len(of_type(session, SESSION_RECOVERY)) == 2


def test_repair_all_incomplete_repairs_every_agents_turn_earliest_first(
    store: ags.BaseStore,
) -> None:
    session = store.get("s")
    session.append_many([*crashed_turn("coder"), *closed_turn("x"), *crashed_turn("reviewer")])
    reports = repair_all_incomplete(session)
    assert [(r.agent, r.turn_start_seq) for r in reports] == [("coder", 1), ("reviewer", 12)]
    assert scan_all_incomplete(session.read()) == []
    assert repair_all_incomplete(session) == []
    for agent in (None, "coder", "reviewer"):
        msgs = session.messages(agent=agent)
        assert provider_errors(msgs) == []
        assert Deriver.from_events(session.read(), agent).unanswered_calls() == []


def test_a_repaired_mid_turn_orphan_replaces_derives_stand_in(store: ags.BaseStore) -> None:
    session = store.get("s")
    session.append_many(
        [turn_start(), step_start(0), assistant("x"), step_end(0), step_start(1), assistant("y")]
    )
    repair_all_incomplete(session)
    assert Deriver.from_events(session.read(), "coder").unanswered_calls() == []
    msgs = session.messages()
    assert provider_errors(msgs) == []
    assert [r.call_id for r in interrupted(msgs)] == ["x", "y"]


def test_read_all_events_reads_from_seq_one(store: ags.BaseStore) -> None:
    session = crashed_session(store)
    assert [e.seq for e in read_all_events(session)] == [1, 2, 3, 4, 5]


# -- derive before a repair -------------------------------------------------------------------


def test_derive_answers_unanswered_calls_without_a_repair(store: ags.BaseStore) -> None:
    session = crashed_session(store)
    msgs = session.messages()
    assert provider_errors(msgs) == []
    assert [r.call_id for r in interrupted(msgs)] == ["call-b"]


def test_derive_keeps_repeated_tool_call_ids_paired(store: ags.BaseStore) -> None:
    session = store.get("s")
    session.append_many(
        [
            user("read it twice"),
            assistant("read-call"),
            result("read-call"),
            assistant("read-call"),
            result("read-call"),
            assistant(text="done"),
        ]
    )
    msgs = session.messages()
    assert provider_errors(msgs) == []
    assert interrupted(msgs) == []
    assert [m.role for m in msgs] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]


# -- the runner: repair before the next turn --------------------------------------------------


def test_crashed_session_is_repaired_once_before_the_next_turn(store: ags.BaseStore) -> None:
    session = crashed_session(store)
    for _ in range(2):  # two turns: only the first finds anything to repair
        with store.lock("s", timeout=1):
            repair_all_incomplete(session)
            with session.turn(agent="coder") as turn:
                turn.user("carry on")
                history = session.messages(agent="coder")
    assert len(of_type(session, SESSION_RECOVERY)) == 1
    assert len(of_type(session, TURN_END)) == 3
    assert scan_incomplete(session.read()) is None
    crashed_call = [r for r in interrupted(history) if r.call_id == "call-b"]
    assert crashed_call == [ags_derive.interrupted_tool_result(call("call-b"))]
    # The interrupted result is stored, not a stand-in derive had to make up.
    assert Deriver.from_events(session.read(), "coder").unanswered_calls() == []


def test_recovery_then_one_turn_leaves_one_recovery_and_two_turn_ends(
    store: ags.BaseStore,
) -> None:
    session = crashed_session(store)
    with store.lock("s", timeout=1):
        repair_all_incomplete(session)
        with session.turn(agent="coder") as turn:
            turn.user("carry on")
            first_request = session.messages(agent="coder")
    assert len(of_type(session, SESSION_RECOVERY)) == 1
    assert len(of_type(session, TURN_END)) == 2
    assert scan_incomplete(session.read()) is None
    assert "call-b" in [r.call_id for r in interrupted(first_request)]


def test_clean_session_gets_no_recovery_event(store: ags.BaseStore) -> None:
    session = store.get("s")
    session.append_many(closed_turn())
    with store.lock("s", timeout=1):
        assert repair_all_incomplete(session) == []
        with session.turn(agent="coder") as turn:
            turn.user("next")
    assert of_type(session, SESSION_RECOVERY) == []
    assert recover_store(store) == []


# -- store-wide recovery ----------------------------------------------------------------------


def test_recover_store_repairs_crashed_sessions_and_skips_clean_ones(
    store: ags.BaseStore,
) -> None:
    crashed_session(store, "crashed")
    store.get("clean").append_many(closed_turn())
    reports = recover_store(store)
    assert [(r.session_id, r.status) for r in reports] == [("crashed", "repaired")]
    (turn,) = reports[0].turns
    assert turn.repaired
    assert (turn.session_id, turn.agent, turn.orphan_results) == ("crashed", "coder", 1)
    assert not store.is_locked("crashed")
    assert of_type(store.get("clean"), SESSION_RECOVERY) == []
    assert recover_store(store) == []


def test_recover_store_repairs_every_open_turn_of_a_session(store: ags.BaseStore) -> None:
    store.get("s").append_many([*crashed_turn("coder"), *crashed_turn("reviewer")])
    (report,) = recover_store(store)
    assert report.status == "repaired"
    assert [(t.agent, t.turn_start_seq) for t in report.turns] == [("coder", 1), ("reviewer", 6)]


def test_recover_store_reports_every_session_asked_for_by_id(store: ags.BaseStore) -> None:
    crashed_session(store, "crashed")
    store.get("clean").append_many(closed_turn())
    crashed_session(store, "not-asked")
    reports = recover_store(store, ["clean", "crashed", "unknown", "clean"])
    assert [(r.session_id, r.status) for r in reports] == [
        ("clean", "clean"),
        ("crashed", "repaired"),
        ("unknown", "clean"),
    ]
    assert reports[0].turns == []
    assert not store.exists("unknown")
    assert scan_incomplete(store.get("not-asked").read()) is not None


def test_recover_store_leaves_a_session_whose_lock_is_held_alone(store: ags.BaseStore) -> None:
    session = crashed_session(store)
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with store.lock("s", timeout=5):
            taken.set()
            done.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert taken.wait(5)
        (report,) = recover_store(store, lock_timeout=0.05)
    finally:
        done.set()
        holder.join()
    assert report.status == "live"
    assert [(t.turn_start_seq, t.orphan_results, t.repaired) for t in report.turns] == [
        (1, 1, False)
    ]
    assert session.latest_seq == 5
    (after,) = recover_store(store)
    assert after.status == "repaired"


def test_recover_store_skips_expired_sessions_unless_asked_for() -> None:
    clock = FakeClock()
    store = ags.open_store("memory:", ttl=dt.timedelta(hours=1), clock=clock)
    try:
        crashed_session(store, "old")
        clock.advance(hours=2)
        assert recover_store(store) == []
        (report,) = recover_store(store, ["old"])
        assert report.status == "expired"
    finally:
        store.close()


# -- dry runs ----------------------------------------------------------------------------------


def test_dry_run_reports_pending_turns_and_writes_nothing(store: ags.BaseStore) -> None:
    crashed = crashed_session(store, "crashed")
    store.get("clean").append_many(closed_turn())
    before = crashed.read()
    (report,) = recover_store(store, dry_run=True)
    assert (report.session_id, report.status) == ("crashed", "pending")
    (turn,) = report.turns
    assert (turn.turn_start_seq, turn.agent, turn.orphan_results) == (1, "coder", 1)
    assert (turn.closed_step, turn.steps, turn.repaired, turn.recovery_seq) == (0, 1, False, 0)
    assert crashed.read() == before
    assert not store.is_locked("crashed")
    # Asking again finds the same, and the real repair writes what the dry run said.
    assert recover_store(store, dry_run=True) == [report]
    (done,) = store.recover()
    assert done.status == "repaired"
    (written,) = done.turns
    assert msgspec.structs.replace(written, repaired=False, recovery_seq=0) == turn
    assert written.recovery_seq == crashed.latest_seq
    assert store.recover(dry_run=True) == []


def test_dry_run_reports_every_session_asked_for_by_id(store: ags.BaseStore) -> None:
    crashed_session(store, "crashed")
    store.get("clean").append_many(closed_turn())
    store.get("two").append_many([*crashed_turn("coder"), *crashed_turn("reviewer")])
    reports = store.recover(["clean", "crashed", "unknown", "two"], dry_run=True)
    assert [(r.session_id, r.status) for r in reports] == [
        ("clean", "clean"),
        ("crashed", "pending"),
        ("unknown", "clean"),
        ("two", "pending"),
    ]
    assert [(t.agent, t.turn_start_seq, t.repaired) for t in reports[3].turns] == [
        ("coder", 1, False),
        ("reviewer", 6, False),
    ]
    assert [len(store.get(sid).read()) for sid in ["clean", "crashed", "two"]] == [6, 5, 10]
    assert not store.exists("unknown")


def test_dry_run_leaves_a_live_session_live(store: ags.BaseStore) -> None:
    session = crashed_session(store)
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with store.lock("s", timeout=5):
            taken.set()
            done.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert taken.wait(5)
        (report,) = recover_store(store, dry_run=True)
        assert store.is_locked("s")  # the dry run did not take the holder's lock away
    finally:
        done.set()
        holder.join()
    assert report.status == "live"
    assert [(t.turn_start_seq, t.orphan_results, t.repaired) for t in report.turns] == [
        (1, 1, False)
    ]
    assert session.latest_seq == 5
    assert recover_store(store, dry_run=True)[0].status == "pending"


def test_dry_run_reports_an_expired_session_asked_for() -> None:
    clock = FakeClock()
    store = ags.open_store("memory:", ttl=dt.timedelta(hours=1), clock=clock)
    try:
        crashed_session(store, "old")
        clock.advance(hours=2)
        assert recover_store(store, dry_run=True) == []
        assert [r.status for r in recover_store(store, ["old"], dry_run=True)] == ["expired"]
    finally:
        store.close()


def test_dry_run_on_jsonl_writes_no_byte_and_sees_another_process_lock(tmp_path: Path) -> None:
    store = ags.open_store(tmp_path)
    crashed_session(store, "conv:crashed")
    store.get("conv:clean").append_many(closed_turn())
    child = start_lock_holder(store.url, "conv:live")
    try:
        logs = sorted(tmp_path.glob("*.jsonl"))
        assert len(logs) == 3
        before = {path.name: path.read_bytes() for path in logs}
        reports = store.recover(dry_run=True)
        assert {(r.session_id, r.status) for r in reports} == {
            ("conv:crashed", "pending"),
            ("conv:live", "live"),
        }
        assert all(not t.repaired for r in reports for t in r.turns)
        assert {path.name: path.read_bytes() for path in tmp_path.glob("*.jsonl")} == before
        assert list(tmp_path.glob("*.quarantine")) == []
        assert not store.is_locked("conv:crashed")
        assert store.is_locked("conv:live")
    finally:
        child.kill()
        child.wait()
        store.close()


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((), {"lock_timeout": -1.0}), (("s",), {})],
    ids=["negative-timeout", "one-string-for-ids"],
)
def test_recover_store_rejects_misuse(
    store: ags.BaseStore, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    with pytest.raises(ags.UsageError):
        recover_store(store, *args, **kwargs)


def test_crash_for_real_live_while_the_holder_runs_then_repaired_once(tmp_path: Path) -> None:
    store = ags.open_store(tmp_path)
    sid = "conv:crash"
    child = start_lock_holder(store.url, sid)
    try:
        session = store.get(sid)
        before = session.latest_seq
        (live,) = recover_store(store)
        assert (live.session_id, live.status) == (sid, "live")
        assert [(t.agent, t.orphan_results, t.closed_step) for t in live.turns] == [
            ("crashy", 1, 0)
        ]
        assert session.latest_seq == before
    finally:
        child.kill()
        child.wait()
    try:
        (repaired,) = recover_store(store, lock_timeout=5)
        assert repaired.status == "repaired"
        assert len(of_type(session, SESSION_RECOVERY)) == 1
        msgs = session.messages()
        assert provider_errors(msgs) == []
        assert [r.call_id for r in interrupted(msgs)] == ["call-1"]
        assert Deriver.from_events(session.read(), "crashy").unanswered_calls() == []
        # A fresh store (another process, say) reads the repair back from disk.
        reopened = ags.open_store(tmp_path)
        assert scan_all_incomplete(reopened.get(sid).read()) == []
        reopened.close()
        assert recover_store(store) == []
        (again,) = recover_store(store, [sid])
        assert (again.status, again.turns) == ("clean", [])
        assert len(of_type(session, SESSION_RECOVERY)) == 1
    finally:
        store.close()


def test_one_damaged_session_never_stops_recovery_of_the_others(tmp_path: Path) -> None:
    store = ags.open_store(tmp_path)
    for sid in ("a-crashed", "z-crashed"):
        store.get(sid).append_many(
            [
                ags.Event.new("turn/start", ags.events.TurnStart(), agent="coder"),
                ags.Event.new("user/message", ags.Message.user("go"), agent="coder"),
            ]
        )
    store.get("m-damaged").append_many(
        [ags.Event.new("user/message", ags.Message.user(str(n))) for n in range(3)]
    )
    store.close()
    path = tmp_path / "m-damaged.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + b"{not json}\n" + lines[2])
    reports = {r.session_id: r for r in ags.open_store(tmp_path).recover()}
    assert reports["a-crashed"].status == "repaired"
    assert reports["z-crashed"].status == "repaired"
    assert reports["m-damaged"].status == "damaged"
    assert "line 2" in reports["m-damaged"].error
    assert path.read_bytes() == lines[0] + b"{not json}\n" + lines[2]  # left alone


def test_repair_all_reports_damaged_sessions_and_exits_non_zero(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from agentsession.cli import cli

    store = ags.open_store(tmp_path)
    store.get("crashed").append(ags.Event.new("turn/start", ags.events.TurnStart()))
    store.get("damaged").append(ags.Event.new("user/message", ags.Message.user("x")))
    store.get("damaged").append(ags.Event.new("user/message", ags.Message.user("y")))
    store.close()
    (tmp_path / "damaged.jsonl").write_bytes(b"{broken\n" + b"{broken\n")
    result = CliRunner().invoke(cli, ["--store", str(tmp_path), "repair", "--all"])
    assert result.exit_code == 1
    assert "crashed: repaired 1 turn(s)" in result.output
    assert "damaged: damaged, left alone" in result.output
