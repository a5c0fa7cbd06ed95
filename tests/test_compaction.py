"""Compaction: summary plus retained tail on a turn boundary; nothing stored is deleted."""

from __future__ import annotations

from pathlib import Path

import pytest

import agentsession as ags
from agentsession import derive
from agentsession.backends.jsonl import JsonlSession
from agentsession.compaction import memory_cutoff_seq, previous_summary_text
from agentsession.events import Compaction
from agentsession.validation import provider_errors


def run_turn(session: ags.BaseSession, n: int, *, agent: str = "coder") -> None:
    with session.turn(agent=agent) as turn:
        turn.user(f"question {n}")
        with turn.step() as step:
            step.assistant(tool_calls=[ags.ToolCall(f"c{n}", "read", {"n": n})])
            step.tool_result(f"c{n}", "read", f"result {n}")
        turn.assistant(f"answer {n}")


def texts(msgs: list[ags.Message]) -> list[str]:
    return [m.text or ",".join(r.content for r in m.tool_results) or "calls" for m in msgs]


@pytest.fixture(params=["memory", "jsonl"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ags.BaseStore:
    return ags.open_store("memory:" if request.param == "memory" else tmp_path)


def test_compact_keeps_the_last_turns_verbatim_after_the_summary(store: ags.BaseStore) -> None:
    session = store.get("c")
    for n in range(4):
        run_turn(session, n)
    before = session.messages()
    seq = session.compact(ags.Message.user("Summary of 0 and 1"), keep_turns=2, tokens_before=900)
    assert seq is not None
    marker = session.read()[-1].payload()
    assert isinstance(marker, Compaction)
    starts = [e.seq for e in session.read() if e.type == "turn/start"]
    assert marker.first_kept_seq == starts[2]
    assert marker.tokens_before == 900
    after = session.messages()
    assert texts(after) == ["Summary of 0 and 1", *texts(before[8:])]
    assert texts(after)[1] == "question 2"
    assert len(session.read()) == seq  # nothing deleted from storage
    run_turn(session, 4)
    assert texts(session.messages())[-1] == "answer 4"
    assert provider_errors(session.messages()) == []


def test_reopening_after_compaction_reads_only_the_tail(tmp_path: Path) -> None:
    session = ags.open_store(tmp_path).get("c")
    for n in range(5):
        run_turn(session, n)
    marker_seq = session.compact("summary", keep_turns=1)
    run_turn(session, 5)
    expected = session.messages()
    reopened = ags.open_store(tmp_path).get("c")
    assert isinstance(reopened, JsonlSession)
    assert reopened._window_start == marker_seq
    assert reopened.messages() == expected
    assert len(reopened.read()) == reopened.latest_seq


def test_memory_is_trimmed_to_the_marker_but_history_survives() -> None:
    session = ags.open_store("memory:").get("c")
    for n in range(6):
        session.append(ags.Event.new("user/message", ags.Message.user(f"m{n}")))
    session.append(
        ags.Event.new(
            "session/compaction",
            Compaction(
                summary=ags.Message.user("summary"),
                first_kept_seq=6,
                retained_tail=[ags.Message.user("recent")],
            ),
        )
    )
    assert len(session._window) <= 3
    assert texts(session.messages()) == ["summary", "recent"]
    assert len(session.read()) == 7


def test_compact_refuses_while_tool_calls_are_unanswered(store: ags.BaseStore) -> None:
    session = store.get("c")
    run_turn(session, 0)
    session.append(
        ags.Event.new(
            "assistant/message", ags.Message.assistant(tool_calls=[ags.ToolCall("open", "t")])
        )
    )
    with pytest.raises(ags.UsageError, match="unanswered tool calls"):
        session.compact("summary", keep_turns=1)


def test_compact_with_more_turns_kept_than_exist_does_nothing(store: ags.BaseStore) -> None:
    session = store.get("c")
    run_turn(session, 0)
    latest = session.latest_seq
    assert session.compact("summary", keep_turns=3) is None
    assert session.latest_seq == latest


def test_compact_keeping_no_turns_leaves_only_the_summary(store: ags.BaseStore) -> None:
    session = store.get("c")
    run_turn(session, 0)
    session.compact("everything so far", keep_turns=0)
    assert texts(session.messages()) == ["everything so far"]
    run_turn(session, 1)
    assert texts(session.messages())[:2] == ["everything so far", "question 1"]


def test_compact_arguments_are_checked(store: ags.BaseStore) -> None:
    session = store.get("c")
    run_turn(session, 0)
    with pytest.raises(ags.UsageError):
        session.compact("s")
    with pytest.raises(ags.UsageError):
        session.compact("s", keep_turns=1, first_kept_seq=1)
    with pytest.raises(ags.UsageError):
        session.compact("s", first_kept_seq=999)
    with pytest.raises(ags.UsageError):
        session.compact("s", keep_turns=-1)


def test_compact_for_one_agent_leaves_the_others_history(store: ags.BaseStore) -> None:
    session = store.get("c")
    run_turn(session, 0, agent="a")
    run_turn(session, 1, agent="b")
    run_turn(session, 2, agent="a")
    b_before = session.messages(agent="b")
    session.compact("a's summary", keep_turns=1, agent="a")
    assert texts(session.messages(agent="a"))[:2] == ["a's summary", "question 2"]
    assert session.messages(agent="b") == b_before
    assert session.messages(agent="b") == derive.messages(session.read(), agent="b")


def test_compaction_helpers_match_agentkit() -> None:
    assert memory_cutoff_seq(Compaction(first_kept_seq=10)) == 9
    assert memory_cutoff_seq(Compaction(first_kept_seq=1)) == 0
    assert memory_cutoff_seq(Compaction(before_seq=18)) == 18
    assert previous_summary_text(Compaction(summary=ags.Message.user("so far"))) == "so far"
    assert previous_summary_text(Compaction()) == ""


def test_max_messages_caps_history_at_each_new_turn_with_prune_markers(tmp_path: Path) -> None:
    store = ags.open_store(tmp_path, max_messages=6)
    session = store.get("capped")
    for n in range(6):
        with session.turn(agent="coder") as turn:
            turn.user(f"question {n}")
            at_turn_start = session.messages()
            assert len(at_turn_start) <= 6
            assert texts(at_turn_start)[-1] == f"question {n}"
            assert provider_errors(at_turn_start) == []
            with turn.step() as step:
                step.assistant(tool_calls=[ags.ToolCall(f"c{n}", "read", {"n": n})])
                step.tool_result(f"c{n}", "read", f"result {n}")
            turn.assistant(f"answer {n}")
    history = session.messages()
    assert texts(history)[0].startswith("question")  # whole turns only, no summary
    events = session.read()
    assert len([e for e in events if e.type == "user/message"]) == 6  # nothing deleted
    markers = [e.payload() for e in events if e.type == "session/compaction"]
    assert markers
    assert all(m.kind == "prune" and m.summary is None for m in markers)
    assert ags.open_store(tmp_path).get("capped").messages() == history
