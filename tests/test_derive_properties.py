"""Properties of derive over arbitrary event logs.

Whatever the log holds (random lifecycles cut off by crashes anywhere, tool-call ids reused
across steps, several agents interleaved, compactions of either form anywhere) the derived
history is accepted by a provider, and a session's incremental history equals a full derive
after every append.
"""

from __future__ import annotations

import tempfile
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import agentsession as ags
from agentsession import derive
from agentsession.events import (
    ASSISTANT_MESSAGE,
    COMPACTION,
    SKILL_LOAD,
    STEP_END,
    STEP_START,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_CONTINUE,
    TURN_END,
    TURN_START,
    USAGE,
    USER_MESSAGE,
    Compaction,
    Event,
    SkillLoad,
    StepEnd,
    StepStart,
    TurnContinue,
    TurnEnd,
    TurnStart,
    Usage,
)
from agentsession.messages import Message, ToolCall, ToolResult
from agentsession.validation import provider_errors

AGENTS = ["", "a", "b"]
CALL_IDS = ["c1", "c2", "c3"]

call_ids = st.sampled_from(CALL_IDS)
agents = st.sampled_from(AGENTS)


@st.composite
def messages_(draw: st.DrawFn) -> Message:
    """Any message, including ones a provider would reject on their own."""
    role = draw(st.sampled_from(["user", "assistant", "tool", "system"]))
    if role == "assistant":
        ids = draw(st.lists(call_ids, max_size=3))
        return Message.assistant("a", tool_calls=[ToolCall(i, "t") for i in ids])
    if role == "tool":
        ids = draw(st.lists(call_ids, min_size=1, max_size=2))
        return Message.tool(*[ToolResult(i, "t", "r") for i in ids])
    return Message(role=role, parts=[ags.TextPart(role)])


@st.composite
def events_(draw: st.DrawFn) -> tuple[str, Any, str]:
    agent = draw(agents)
    kind = draw(
        st.sampled_from(
            [
                "turn",
                "user",
                "assistant",
                "assistant",
                "assistant_calls",
                "assistant_calls",
                "result",
                "result",
                "result",
                "step",
                "skill",
                "continue",
                "compaction",
                "legacy",
                "usage",
                "tool_call",
                "junk",
            ]
        )
    )
    if kind == "turn":
        return draw(
            st.sampled_from([(TURN_START, TurnStart(), agent), (TURN_END, TurnEnd(steps=1), agent)])
        )
    if kind == "step":
        return draw(
            st.sampled_from(
                [(STEP_START, StepStart(step=0), agent), (STEP_END, StepEnd(step=0), agent)]
            )
        )
    if kind == "user":
        return USER_MESSAGE, Message.user("u"), agent
    if kind == "assistant":
        return ASSISTANT_MESSAGE, Message.assistant("a"), agent
    if kind == "assistant_calls":
        ids = draw(st.lists(call_ids, min_size=1, max_size=3))
        return (
            ASSISTANT_MESSAGE,
            Message.assistant(tool_calls=[ToolCall(i, "t") for i in ids]),
            agent,
        )
    if kind == "result":
        return TOOL_RESULT, ToolResult(draw(call_ids), "t", "r"), agent
    if kind == "tool_call":
        return TOOL_CALL, ToolCall(draw(call_ids), "t"), agent
    if kind == "skill":
        return SKILL_LOAD, SkillLoad(name="s", body="b"), agent
    if kind == "continue":
        msgs = draw(st.lists(messages_(), max_size=3))
        return TURN_CONTINUE, TurnContinue(segment=1, reason="r", steps=1, messages=msgs), agent
    if kind == "compaction":
        tail = draw(st.lists(messages_(), max_size=4))
        summary = draw(st.none() | st.just(Message.user("summary")))
        data = Compaction(
            summary=summary, first_kept_seq=draw(st.integers(1, 40)), retained_tail=tail
        )
        return COMPACTION, data, agent
    if kind == "legacy":
        data = Compaction(summary=Message.user("legacy"), before_seq=draw(st.integers(0, 40)))
        return COMPACTION, data, agent
    if kind == "usage":
        return USAGE, Usage(input_tokens=1, output_tokens=1, total_tokens=2), agent
    return "plugin/junk", {"x": 1}, agent


logs = st.lists(events_(), max_size=60)


def sequenced(items: list[tuple[str, Any, str]]) -> list[Event]:
    out = []
    for seq, (kind, payload, agent) in enumerate(items, start=1):
        event = Event.new(kind, payload, agent=agent)
        out.append(Event(seq=seq, type=kind, agent=agent, data=event.data))
    return out


@given(logs)
def test_derived_history_is_always_provider_valid(items: list[tuple[str, Any, str]]) -> None:
    events = sequenced(items)
    for agent in [None, *AGENTS[1:]]:
        msgs = derive.messages(events, agent=agent)
        assert provider_errors(msgs) == [], (agent, msgs)
        assert [i.message for i in derive.index_messages_for_compaction(events, agent)] == msgs


@given(logs, st.integers(0, 60))
def test_every_prefix_of_a_log_is_provider_valid(
    items: list[tuple[str, Any, str]], cut: int
) -> None:
    # A crash can stop the log anywhere.
    events = sequenced(items)[:cut]
    assert provider_errors(derive.messages(events)) == []


@given(logs)
def test_incremental_session_history_equals_a_full_derive_after_every_append(
    items: list[tuple[str, Any, str]],
) -> None:
    session = ags.open_store("memory:").get("prop")
    appended: list[Event] = []
    for kind, payload, agent in items:
        session.append(Event.new(kind, payload, agent=agent))
        appended = session.read()
        for who in [None, "a"]:
            assert session.messages(agent=who) == derive.messages(appended, agent=who)
    assert session.messages(agent="b") == derive.messages(appended, agent="b")


@given(logs, st.integers(0, 60))
def test_reopened_jsonl_session_derives_the_same_history(
    items: list[tuple[str, Any, str]], reopen_at: int
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        store = ags.open_store(directory)
        session = store.get("prop")
        for i, (kind, payload, agent) in enumerate(items):
            if i == reopen_at:
                store.close()
                store = ags.open_store(directory)
                session = store.get("prop")
            session.append(Event.new(kind, payload, agent=agent))
        store.close()
        reopened = ags.open_store(directory).get("prop")
        events = reopened.read()
        assert [e.seq for e in events] == list(range(1, len(items) + 1))
        for who in [None, *AGENTS[1:]]:
            assert reopened.messages(agent=who) == derive.messages(events, agent=who)
