"""Deriving the model-visible history from the event log."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

import agentsession as ags
from agentsession import derive
from agentsession.derive import INTERRUPTED_TOOL_RESULT_TEXT, Deriver
from agentsession.events import (
    ASSISTANT_MESSAGE,
    COMPACTION,
    SKILL_LOAD,
    TOOL_RESULT,
    TURN_CONTINUE,
    USER_MESSAGE,
    Compaction,
    Event,
    SkillLoad,
    TurnContinue,
)
from agentsession.messages import Message, ToolCall, ToolResult
from agentsession.validation import provider_errors


class Log:
    """Builds a list of sequenced events."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, kind: str, payload: object = None, agent: str = "") -> int:
        seq = len(self.events) + 1
        event = Event.new(kind, payload, agent=agent)
        self.events.append(Event(seq=seq, type=event.type, agent=agent, data=event.data))
        return seq

    def user(self, text: str, agent: str = "") -> int:
        return self.add(USER_MESSAGE, Message.user(text), agent)

    def assistant(self, text: str = "", calls: tuple[str, ...] = (), agent: str = "") -> int:
        tool_calls = [ToolCall(c, "read", {"n": i}) for i, c in enumerate(calls)]
        return self.add(ASSISTANT_MESSAGE, Message.assistant(text, tool_calls=tool_calls), agent)

    def result(self, call_id: str, content: str = "ok", agent: str = "") -> int:
        return self.add(TOOL_RESULT, ToolResult(call_id, "read", content), agent)


def roles(msgs: list[Message]) -> list[str]:
    return [m.role for m in msgs]


def interrupted(msgs: list[Message]) -> list[str]:
    return [
        r.call_id for m in msgs for r in m.tool_results if r.audit == {"decision": "interrupted"}
    ]


# -- pairing ------------------------------------------------------------------------------


def test_unanswered_calls_get_exactly_one_interrupted_stand_in_each() -> None:
    log = Log()
    log.user("read both")
    log.assistant("", ("call-a", "call-b"))
    log.result("call-a")
    msgs = derive.messages(log.events)
    assert roles(msgs) == ["user", "assistant", "tool", "tool"]
    assert interrupted(msgs) == ["call-b"]
    stand_in = msgs[-1].tool_results[0]
    assert stand_in.content == INTERRUPTED_TOOL_RESULT_TEXT
    assert stand_in.name == "read"
    assert provider_errors(msgs) == []


def test_repeated_call_ids_across_steps_stay_paired() -> None:
    log = Log()
    log.user("go")
    log.assistant("", ("read-call",))
    log.result("read-call", "first")
    log.assistant("", ("read-call",))
    log.result("read-call", "second")
    msgs = derive.messages(log.events)
    assert interrupted(msgs) == []
    assert [r.content for m in msgs for r in m.tool_results] == ["first", "second"]


def test_an_earlier_result_never_answers_a_later_call() -> None:
    log = Log()
    log.assistant("", ("x",))
    log.result("x", "first")
    log.result("x", "duplicate")  # no call before it is open: left out
    log.assistant("", ("x",))  # this call has no result of its own
    msgs = derive.messages(log.events)
    assert [r.content for m in msgs for r in m.tool_results] == [
        "first",
        INTERRUPTED_TOOL_RESULT_TEXT,
    ]
    assert provider_errors(msgs) == []


def test_result_without_a_call_before_it_is_left_out() -> None:
    log = Log()
    log.result("ghost")
    log.user("hi")
    log.result("ghost")
    assert roles(derive.messages(log.events)) == ["user"]


def test_message_between_call_and_result_gets_the_stand_in_then_the_real_result() -> None:
    log = Log()
    log.assistant("", ("c1",), agent="a")
    log.user("meanwhile", agent="b")
    log.result("c1", "late but real", agent="a")
    msgs = derive.messages(log.events)
    assert roles(msgs) == ["assistant", "tool", "user"]
    assert msgs[1].tool_results[0].content == "late but real"
    assert provider_errors(msgs) == []
    # Agent a alone sees its call answered in place.
    assert roles(derive.messages(log.events, agent="a")) == ["assistant", "tool"]


def test_next_assistant_message_closes_the_previous_exchange() -> None:
    log = Log()
    log.assistant("", ("c1",))
    log.assistant("moving on")
    msgs = derive.messages(log.events)
    assert roles(msgs) == ["assistant", "tool", "assistant"]
    assert interrupted(msgs) == ["c1"]


def test_tool_message_results_are_matched_one_by_one() -> None:
    log = Log()
    log.assistant("", ("c1", "c2"))
    log.add(ASSISTANT_MESSAGE, Message.tool(ToolResult("c2", "read", "two"), ToolResult("zz", "x")))
    msgs = derive.messages(log.events)
    assert [[r.call_id for r in m.tool_results] for m in msgs[1:]] == [["c2"], ["c1"]]
    assert provider_errors(msgs) == []


# -- agents, skills, continuations ------------------------------------------------------------


def test_agent_filter_keeps_the_agents_own_and_shared_events() -> None:
    log = Log()
    log.user("for everyone")
    log.user("for meetingbot", agent="meetingbot")
    log.user("for coder", agent="coder")
    assert [m.text for m in derive.messages(log.events, agent="meetingbot")] == [
        "for everyone",
        "for meetingbot",
    ]
    assert len(derive.messages(log.events)) == 3


def test_skill_load_is_held_until_after_the_tool_result() -> None:
    log = Log()
    log.user("use the pdf skill")
    log.assistant("", ("load",))
    log.add(SKILL_LOAD, SkillLoad(name="pdf & co", body="Use pdftotext.", resource_base="/s"))
    log.result("load", "loaded")
    msgs = derive.messages(log.events)
    assert roles(msgs) == ["user", "assistant", "tool", "user"]
    assert msgs[3].text.startswith('<skill_content name="pdf &amp; co">')
    assert "Base directory for this skill: /s" in msgs[3].text
    assert "Use pdftotext." in msgs[3].text


def test_skill_load_waits_for_every_call_of_the_step() -> None:
    log = Log()
    log.assistant("", ("a", "b"))
    log.result("a")
    log.add(SKILL_LOAD, SkillLoad(name="s", body="b"))
    log.result("b")
    assert roles(derive.messages(log.events)) == ["assistant", "tool", "tool", "user"]


def test_skill_load_outside_a_tool_exchange_appears_in_place() -> None:
    log = Log()
    log.user("hi")
    log.add(SKILL_LOAD, SkillLoad(name="s", body="b"))
    log.user("again")
    assert [m.text[:14] for m in derive.messages(log.events)] == [
        "hi",
        "<skill_content",
        "again",
    ]


def test_turn_continue_messages_are_model_visible() -> None:
    log = Log()
    log.user("long task")
    log.add(
        TURN_CONTINUE,
        TurnContinue(
            segment=1,
            reason="max steps",
            steps=8,
            messages=[Message.user("continue where you left off")],
        ),
    )
    assert [m.text for m in derive.messages(log.events)] == [
        "long task",
        "continue where you left off",
    ]


# -- compaction -------------------------------------------------------------------------------


def test_latest_compaction_replaces_history_with_summary_and_tail() -> None:
    log = Log()
    for n in range(6):
        log.user(f"m{n}")
    log.add(
        COMPACTION,
        Compaction(
            summary=Message.user("summary"),
            first_kept_seq=6,
            retained_tail=[Message.user("recent")],
        ),
    )
    log.user("after")
    assert [m.text for m in derive.messages(log.events)] == ["summary", "recent", "after"]


def test_legacy_compaction_replays_events_after_before_seq() -> None:
    log = Log()
    for n in range(1, 21):
        log.user(f"m{n}")
    log.add(COMPACTION, Compaction(summary=Message.user("summary"), before_seq=18))
    for n in range(22, 25):
        log.user(f"m{n}")
    assert [m.text for m in derive.messages(log.events)] == [
        "summary",
        "m19",
        "m20",
        "m22",
        "m23",
        "m24",
    ]


def test_compaction_of_another_agent_does_not_apply() -> None:
    log = Log()
    log.user("shared")
    log.user("mine", agent="a")
    log.add(
        COMPACTION, Compaction(summary=Message.user("b's summary"), first_kept_seq=3), agent="b"
    )
    assert [m.text for m in derive.messages(log.events, agent="a")] == ["shared", "mine"]
    assert [m.text for m in derive.messages(log.events, agent="b")] == ["b's summary"]


def test_unparsable_compaction_marker_is_ignored() -> None:
    log = Log()
    log.user("kept")
    log.add(COMPACTION, {"summary": "not a message"})
    assert [m.text for m in derive.messages(log.events)] == ["kept"]


def test_history_never_starts_inside_a_tool_exchange() -> None:
    log = Log()
    log.add(
        COMPACTION,
        Compaction(
            summary=None,
            first_kept_seq=1,
            kind="prune",
            retained_tail=[Message.tool_result("c0", "read", "orphan"), Message.user("start")],
        ),
    )
    log.result("c1")
    msgs = derive.messages(log.events)
    assert roles(msgs) == ["user"]
    assert provider_errors(msgs) == []


def test_index_for_compaction_agrees_with_messages() -> None:
    log = Log()
    log.user("one")
    log.assistant("", ("c1",))
    log.add(SKILL_LOAD, SkillLoad(name="s", body="b"))
    log.user("two")
    indexed = derive.index_messages_for_compaction(log.events)
    assert [i.message for i in indexed] == derive.messages(log.events)
    assert [i.seq for i in indexed] == [1, 2, 2, 3, 4]
    assert [i.is_turn_start for i in indexed] == [True, False, False, True, True]


def test_max_tool_result_bytes_cuts_results_on_a_character_boundary() -> None:
    log = Log()
    log.assistant("", ("c1",))
    log.result("c1", "é" * 100)
    msgs = derive.messages(log.events, max_tool_result_bytes=11)
    assert msgs[1].tool_results[0].content == "é" * 5 + "\n...[truncated]"
    assert derive.messages(log.events)[1].tool_results[0].content == "é" * 100


def test_session_messages_can_cut_long_tool_results(tmp_path: Path) -> None:
    session = ags.open_store(tmp_path).get("s")
    session.append(Event.new(ASSISTANT_MESSAGE, Message.assistant(tool_calls=[ToolCall("c", "r")])))
    session.append(Event.new(TOOL_RESULT, ToolResult("c", "r", "x" * 50)))
    cut = session.messages(max_tool_result_bytes=10)
    assert cut[1].tool_results[0].content == "x" * 10 + "\n...[truncated]"


# -- incremental state ------------------------------------------------------------------------


def test_deriver_fed_one_event_at_a_time_matches_a_full_derive() -> None:
    log = Log()
    log.user("q")
    log.assistant("", ("a", "b"))
    log.result("b")
    log.user("interrupting")
    log.result("a", "late")
    log.add(
        COMPACTION,
        Compaction(
            summary=Message.user("s"),
            first_kept_seq=4,
            retained_tail=[Message.user("interrupting")],
        ),
    )
    log.assistant("done")
    deriver = Deriver()
    for i, event in enumerate(log.events):
        assert deriver.feed(event)
        assert deriver.messages() == derive.messages(log.events[: i + 1])


def test_deriver_asks_for_a_rebuild_at_a_legacy_marker() -> None:
    deriver = Deriver()
    legacy = Event.new(COMPACTION, Compaction(summary=Message.user("s"), before_seq=1))
    assert not deriver.feed(Event(seq=2, type=COMPACTION, data=legacy.data))


def test_an_event_the_deriver_cannot_use_is_left_out_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bad = ags.Event(seq=2, type="user/message", data=msgspec.Raw(b'{"role":"user","parts":5}'))
    good = ags.Event.new("user/message", ags.Message.user("hi"))
    good = msgspec.structs.replace(good, seq=1)
    with caplog.at_level("WARNING", logger="agentsession.derive"):
        history = derive.messages([good, bad])
    assert [m.text for m in history] == ["hi"]
    assert "seq 2 (user/message)" in caplog.text and "not a valid Message" in caplog.text


def test_a_rollback_marker_leaves_its_turn_out_by_turn_id_and_seq_range() -> None:
    """``session/rollback`` hides the events from ``turnStartSeq`` up to the marker carrying
    the turn's id: others (no turn id, another turn, after the marker) stay; an incremental
    deriver that applied the turn asks for a rebuild, and the rebuild agrees."""
    from agentsession.events import SESSION_ROLLBACK, SessionRollback

    def stamped(kind: str, payload: object, seq: int, turn: str | None) -> Event:
        meta = {} if turn is None else {"turn_id": turn}
        made = Event.new(kind, payload, meta=meta)
        return Event(seq=seq, type=made.type, data=made.data, meta=made.meta)

    events = [
        stamped(USER_MESSAGE, Message.user("kept before"), 1, "t0"),
        stamped(USER_MESSAGE, Message.user("rolled"), 2, "t1"),
        stamped(ASSISTANT_MESSAGE, Message.assistant("x", tool_calls=[ToolCall("c", "r")]), 3,
                "t1"),
        stamped(USER_MESSAGE, Message.user("no turn id"), 4, None),
        stamped(TOOL_RESULT, ToolResult("c", "r", "late"), 5, "t1"),
        stamped(SESSION_ROLLBACK, SessionRollback(turn_id="t1", turn_start_seq=2,
                                                  delivery="d"), 6, None),
        stamped(USER_MESSAGE, Message.user("same id, later"), 7, "t1"),
    ]
    expected = ["kept before", "no turn id", "same id, later"]
    assert [m.text for m in derive.messages(events)] == expected
    incremental = Deriver()
    assert incremental.feed_all(events[:5])
    assert not incremental.feed(events[5])  # applied already: rebuild
    assert incremental.last_seq == 5  # nothing changed
    fresh = Deriver()
    assert fresh.feed_all(events[:1])
    assert fresh.feed_all(events[5:6] + events[6:])  # a marker of a turn not applied yet
    assert [m.text for m in fresh.messages()] == ["kept before", "same id, later"]
