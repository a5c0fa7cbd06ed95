"""Recording turns and steps, and the plain append functions."""

from __future__ import annotations

from pathlib import Path

import pytest

import agentsession as ags
from agentsession import recorder
from agentsession.chat.envelope import ActorRef, TurnEnvelope, apply_envelope
from agentsession.events import TurnEnd
from agentsession.media import AGENTKIT_STORAGE_POLICY
from agentsession.validation import provider_errors


@pytest.fixture
def session() -> ags.BaseSession:
    return ags.open_store("memory:").get("rec")


def kinds(session: ags.BaseSession) -> list[str]:
    return [e.type for e in session.read()]


def test_turn_and_steps_write_their_lifecycle_events(session: ags.BaseSession) -> None:
    call = ags.ToolCall("c1", "read", {"path": "a.py"})
    with session.turn(agent="coder", user="U456") as turn:
        turn.user("Fix the failing test")
        with turn.step() as step:
            step.assistant("Looking.", tool_calls=[call])
            step.tool_call(call)
            step.tool_result("c1", "read", "...file contents...")
            step.usage(input_tokens=1200, output_tokens=80)
        with turn.step() as step:
            step.assistant("Fixed.")
    assert kinds(session) == [
        "turn/start",
        "user/message",
        "step/start",
        "assistant/message",
        "tool/call",
        "tool/result",
        "usage",
        "step/end",
        "step/start",
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    events = session.read()
    assert all(e.agent == "coder" for e in events)
    assert [e.user for e in events if e.user] == ["U456"]  # only the user message
    assert [e.payload().step for e in events if e.type.startswith("step/")] == [0, 0, 1, 1]
    assert events[-1].payload() == TurnEnd(steps=2)
    assert events[6].payload().total_tokens == 1280
    assert provider_errors(session.messages()) == []


def test_exception_in_a_step_answers_calls_closes_step_and_turn_and_reraises(
    session: ags.BaseSession,
) -> None:
    with (  # noqa: PT012 - the whole turn is what raises
        pytest.raises(TimeoutError, match="model took too long"),
        session.turn(agent="coder") as turn,
    ):
        turn.user("go")
        with turn.step() as step:
            step.assistant(tool_calls=[ags.ToolCall("c1", "slow"), ags.ToolCall("c2", "slow")])
            step.tool_result("c2", "slow", "done")
            raise TimeoutError("model took too long")
    # A TimeoutError ends the turn as timed out: the annotation comes before turn/end.
    assert kinds(session)[-5:] == [
        "tool/result",
        "tool/result",
        "step/end",
        "assistant/message",
        "turn/end",
    ]
    failed = session.read()[-4].payload()
    assert failed.call_id == "c1"
    assert failed.is_error and "TimeoutError: model took too long" in failed.content
    end = session.read()[-1].payload()
    assert end.steps == 1
    assert end.error is not None
    assert (end.error.type, end.error.message) == ("TimeoutError", "model took too long")
    assert provider_errors(session.messages()) == []


def test_exception_outside_steps_still_closes_the_turn(session: ags.BaseSession) -> None:
    with pytest.raises(KeyboardInterrupt), session.turn() as turn:  # noqa: PT012
        turn.user("hi")
        raise KeyboardInterrupt
    assert kinds(session) == ["turn/start", "user/message", "turn/end"]
    assert session.read()[-1].payload().error.type == "KeyboardInterrupt"


def test_caught_exception_in_a_step_keeps_the_turn_going(session: ags.BaseSession) -> None:
    with session.turn() as turn:
        try:
            with turn.step() as step:
                step.assistant(tool_calls=[ags.ToolCall("c1", "flaky")])
                raise RuntimeError("tool crashed")
        except RuntimeError:
            pass
        with turn.step() as step:
            step.assistant("recovered")
    assert kinds(session) == [
        "turn/start",
        "step/start",
        "assistant/message",
        "tool/result",
        "step/end",
        "step/start",
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    assert session.read()[-1].payload() == TurnEnd(steps=2)


def test_steps_do_not_nest_and_need_an_open_turn(session: ags.BaseSession) -> None:
    turn = session.turn()
    with pytest.raises(ags.UsageError):
        turn.step()
    with turn, turn.step(), pytest.raises(ags.UsageError, match="steps do not nest"):
        turn.step().__enter__()


def test_turn_defaults_come_from_the_envelope(session: ags.BaseSession) -> None:
    env = TurnEnvelope(
        agent_id="meetingbot", actor=ActorRef(user_id="U9"), metadata={"platform": "slack"}
    )
    with apply_envelope(env), session.turn() as turn:
        turn.user("hello")
    events = session.read()
    assert {e.agent for e in events} == {"meetingbot"}
    user_event = events[1]
    assert user_event.user == "U9"
    assert user_event.meta == {"platform": "slack", "turn_id": user_event.meta["turn_id"]}


def test_helpers_record_every_kind_of_event(session: ags.BaseSession) -> None:
    with session.turn(agent="a") as turn:
        turn.todos([ags.events.Todo("1", "read"), ags.events.Todo("2", "fix", "done")])
        turn.retry_start(1, 3, 500, "429")
        turn.retry_end(True, 2)
        turn.summarization_retry_start(1, 2)
        turn.summarization_retry_end(False, 2, "timeout")
        turn.overflow_recovery(1, "context overflow")
        turn.skill_load("pdf", "Use pdftotext.", resource_base="/skills/pdf")
        turn.continue_turn(1, "max steps", messages=[ags.Message.user("continue")])
        turn.subagent_start("researcher", "s:sub:researcher:1", "find docs")
        turn.subagent_end("researcher", "s:sub:researcher:1", "completed", summary="found")
        turn.finish("completed", "done")
        with pytest.raises(ags.UsageError):
            turn.finish("maybe")
    assert kinds(session)[1:-1] == [
        "todo/update",
        "retry/start",
        "retry/end",
        "summarization/retry/start",
        "summarization/retry/end",
        "overflow/recovery",
        "skill/load",
        "turn/continue",
        "subagent/start",
        "subagent/end",
        "run/finish",
    ]


def test_a_policy_sanitizes_and_records_logical_chars(session: ags.BaseSession) -> None:
    with session.turn(storage=AGENTKIT_STORAGE_POLICY) as turn:
        turn.user("x" * 12000)
    event = session.read()[1]
    assert event.meta["logical_chars"] >= 12000
    stored = event.payload().text
    assert stored.endswith("\n...[truncated]") and len(stored.encode()) < 9000


def test_without_a_policy_long_text_is_stored_whole(session: ags.BaseSession) -> None:
    with session.turn() as turn:
        turn.user("x" * 12000)
        turn.assistant("y" * 50000)
    events = session.read()
    assert events[1].payload().text == "x" * 12000
    assert events[2].payload().text == "y" * 50000
    assert "logical_chars" not in events[1].meta and "logical_chars" not in events[2].meta


def test_short_messages_get_no_logical_chars(session: ags.BaseSession) -> None:
    with session.turn(storage=AGENTKIT_STORAGE_POLICY) as turn:
        turn.assistant("short")
    assert "logical_chars" not in session.read()[1].meta


def test_the_user_is_never_stamped_on_assistant_messages(session: ags.BaseSession) -> None:
    with apply_envelope(TurnEnvelope(actor=ActorRef(user_id="U9"))), session.turn() as turn:
        turn.user("hi")
        turn.assistant("x")
    events = session.read()
    assert events[1].user == "U9"
    assert events[2].user == ""


def test_large_tool_call_arguments_stay_valid_json(session: ags.BaseSession) -> None:
    args = {"content": "y" * 20000, "path": "big.txt"}
    msg = ags.Message.assistant(tool_calls=[ags.ToolCall("w", "write", args)])
    with session.turn(storage=AGENTKIT_STORAGE_POLICY) as turn:
        turn.assistant(msg)
    assert session.read()[1].payload().tool_calls[0].arguments == args


def test_without_an_envelope_turns_have_empty_defaults(session: ags.BaseSession) -> None:
    previous = recorder._context_defaults
    recorder.set_context_defaults(None)
    try:
        with session.turn() as turn:
            turn.user("hi")
        assert {e.agent for e in session.read()} == {""}
        assert session.read()[1].user == ""
    finally:
        recorder.set_context_defaults(previous)


def test_a_second_open_turn_on_one_session_is_refused(session: ags.BaseSession) -> None:
    with session.turn(agent="a") as outer:
        outer.user("first")
        with pytest.raises(ags.UsageError, match="already has an open turn"), session.turn("b"):
            pass
        outer.assistant("done")
    assert [e.type for e in session.read()] == [
        "turn/start",
        "user/message",
        "assistant/message",
        "turn/end",
    ]
    with session.turn(agent="c") as turn:  # closed turns free the session again
        turn.user("next")
    assert ags.scan_incomplete(session.read()) is None


def test_turns_of_different_sessions_and_stores_may_be_open_together() -> None:
    one, two = ags.open_store("memory:"), ags.open_store("memory:")
    with one.get("s").turn() as a, two.get("s").turn() as b, one.get("t").turn() as c:
        a.user("a"), b.user("b"), c.user("c")
    assert "Turn closed" in repr(a) and "'s'" in repr(a)


def test_two_store_objects_on_one_jsonl_log_share_the_open_turn(tmp_path: Path) -> None:
    first, second = ags.open_store(tmp_path), ags.open_store(tmp_path)
    with first.get("s").turn(), pytest.raises(ags.UsageError, match="already has an open turn"):
        second.get("s").turn().__enter__()


# ---------------------------------------------------------------------------------------------
# Writes that would land outside any turn, and results no call asked for.


def test_helpers_of_a_turn_or_step_never_entered_or_already_closed_raise(
    session: ags.BaseSession,
) -> None:
    never = session.turn()
    with pytest.raises(ags.UsageError, match="not entered"):
        never.user("hi")
    with session.turn() as turn:
        turn.user("hi")
        unentered = turn.step()
        with pytest.raises(ags.UsageError, match=r"step 0 .* is not entered"):
            unentered.assistant("lost")
        with turn.step() as step:
            step.assistant("kept")
        with pytest.raises(ags.UsageError, match=r"step 0 .* is closed"):
            step.usage(input_tokens=5)
        with pytest.raises(ags.UsageError, match="entered already"):
            step.__enter__()
    with pytest.raises(ags.UsageError, match="turn of session 'rec' is closed"):
        turn.assistant("after the end")
    with pytest.raises(ags.UsageError, match="step 0 of session 'rec' is closed"):
        step.tool_result("c1", "read", "x")
    with pytest.raises(ags.UsageError, match="closed"):
        unentered.__enter__()
    with pytest.raises(ags.UsageError, match="entered and closed already"):
        turn.__enter__()  # a second turn/start under the same turn id
    assert kinds(session)[-1] == "turn/end"
    assert kinds(session).count("turn/start") == 1
    assert [e.type for e in session.read()].count("assistant/message") == 1


def test_a_tool_result_for_a_call_never_made_raises_and_names_the_open_calls(
    session: ags.BaseSession,
) -> None:
    with session.turn() as turn, turn.step() as step:
        step.assistant(tool_calls=[ags.ToolCall("c1", "read"), ags.ToolCall("c2", "grep")])
        with pytest.raises(ags.UsageError, match=r"'c9' answers no open tool call.*'c1', 'c2'"):
            step.tool_result("c9", "read", "made up")
        step.tool_result("c1", "read", "one")
        with pytest.raises(ags.UsageError, match=r"'c1' answers no open .*open calls: 'c2'\)"):
            step.tool_result("c1", "read", "twice")  # already answered
        step.tool_result(ags.ToolResult("c2", "grep", "two"))
        with pytest.raises(ags.UsageError, match="open calls: none"):
            step.tool_result(ags.ToolResult("c3", "grep", "none open"))
    results = [e.payload().call_id for e in session.read() if e.type == "tool/result"]
    assert results == ["c1", "c2"]
    assert provider_errors(session.messages()) == []


def test_a_late_result_for_a_call_an_earlier_turn_left_open_is_recorded(
    session: ags.BaseSession,
) -> None:
    with session.turn(agent="coder") as turn:
        turn.user("deploy")
        turn.assistant(tool_calls=[ags.ToolCall("approve-1", "deploy")])  # awaits approval
    with session.turn(agent="coder") as turn:
        turn.user("approved")
        turn.tool_result("approve-1", "deploy", "deployed")
    tool = [m for m in session.messages() if m.role == "tool"]
    assert [r.content for m in tool for r in m.tool_results] == ["deployed"]


def test_a_result_for_a_call_appended_around_the_recorder_is_recorded(
    session: ags.BaseSession,
) -> None:
    with session.turn() as turn:
        call = ags.ToolCall("side", "read")
        session.append(ags.Event.new("assistant/message", ags.Message.assistant(tool_calls=[call])))
        turn.tool_result("side", "read", "ok")
    assert [m.role for m in session.messages()] == ["assistant", "tool"]


def test_tool_calls_given_as_dicts_are_refused_naming_tool_call(session: ags.BaseSession) -> None:
    call = {"id": "c1", "name": "read", "arguments": {}}
    with session.turn() as turn, turn.step() as step:
        with pytest.raises(ags.UsageError, match=r"tool_calls\[0\] must be a ToolCall, not dict"):
            step.assistant("Looking.", tool_calls=[call])  # type: ignore[list-item]
        step.assistant("Looking.", tool_calls=[ags.ToolCall(**call)])
        step.tool_result("c1", "read", "ok")
    assert provider_errors(session.messages()) == []
