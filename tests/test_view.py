"""The neutral transcript view: one plain row per event, nested by turn and step."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import msgspec
import pytest

import agentsession.view as view
from agentsession import events as ev
from agentsession.events import Event
from agentsession.messages import Message, ToolCall, ToolResult
from agentsession.view import (
    PREVIEW_CHARS,
    AssistantMessageRow,
    CompactionRow,
    EventRow,
    RecoveryRow,
    Row,
    RunFinishRow,
    SkillLoadRow,
    StepEndRow,
    StepStartRow,
    SubagentEndRow,
    SubagentStartRow,
    TodoItemView,
    TodoRow,
    ToolCallRow,
    ToolCallView,
    ToolResultRow,
    TurnEndRow,
    TurnStartRow,
    UsageRow,
    UserMessageRow,
    transcript_rows,
)

T0 = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)


def numbered(*events: Event) -> list[Event]:
    """The events with seqs 1, 2, 3 ... and one time, as a store would stamp them."""
    return [msgspec.structs.replace(e, seq=i, time=T0) for i, e in enumerate(events, 1)]


def raw(kind: str, data: bytes, agent: str = "") -> Event:
    return Event(type=kind, agent=agent, data=msgspec.Raw(data))


LONG = "line\n" * 100  # 500 characters, with newlines


def conversation() -> list[Event]:
    """A turn with a step using every inner row kind, then markers outside any turn."""
    return numbered(
        Event.new(ev.TURN_START, ev.TurnStart(), agent="coder", user="U1"),  # 1
        Event.new(ev.USER_MESSAGE, Message.user("Fix it"), agent="coder", user="U1"),  # 2
        Event.new(ev.STEP_START, ev.StepStart(step=0), agent="coder"),  # 3
        Event.new(  # 4
            ev.ASSISTANT_MESSAGE,
            Message.assistant(
                "Looking.",
                tool_calls=[ToolCall("c1", "read", {"path": "a.py"})],
                thinking="Which file? " * 20,
            ),
            agent="coder",
        ),
        Event.new(ev.TOOL_CALL, ToolCall("c1", "read", {"path": "a.py"}), agent="coder"),  # 5
        Event.new(  # 6
            ev.TOOL_RESULT,
            ToolResult("c1", "read", LONG, audit={"decision": "interrupted"}),
            agent="coder",
        ),
        Event.new(ev.USAGE, ev.Usage(input_tokens=100, output_tokens=7), agent="coder"),  # 7
        Event.new(  # 8
            ev.TODO_UPDATE,
            ev.TodoUpdate(items=[ev.Todo("t1", "ship", "done"), ev.Todo("t2", "test")]),
            agent="coder",
        ),
        Event.new(  # 9
            ev.SUBAGENT_START,
            ev.SubagentStart(agent="helper", session="s/sub", task="look", async_=True),
            agent="coder",
        ),
        Event.new(  # 10
            ev.SUBAGENT_END,
            ev.SubagentEnd(agent="helper", session="s/sub", status="failed", error="boom"),
            agent="coder",
        ),
        Event.new(ev.SKILL_LOAD, ev.SkillLoad(name="pdf", body=LONG), agent="coder"),  # 11
        Event.new(ev.RETRY_START, ev.RetryStart(attempt=2), agent="coder"),  # 12
        Event.new(ev.STEP_END, ev.StepEnd(step=0), agent="coder"),  # 13
        Event.new(ev.USAGE, ev.Usage(input_tokens=20, output_tokens=3), agent="coder"),  # 14
        Event.new(ev.RUN_FINISH, ev.RunFinish(status="completed", summary="done"), agent="coder"),
        Event.new(  # 16
            ev.TURN_END,
            ev.TurnEnd(steps=1, error=ev.TurnError("TimeoutError", "too slow")),
            agent="coder",
        ),
        Event.new(  # 17
            ev.SESSION_RECOVERY,
            ev.SessionRecovery(turn_start_seq=1, steps=1, orphan_results=2, closed_step=0),
        ),
        Event.new(  # 18
            ev.COMPACTION,
            ev.Compaction(
                summary=Message.user(LONG),
                first_kept_seq=16,
                retained_tail=[Message.user("a"), Message.assistant("b")],
                tokens_before=900,
            ),
        ),
        Event.new(ev.OVERFLOW_RECOVERY, ev.OverflowRecovery(applied=1)),  # 19
        Event.new("custom/thing", {"x": [1, 2]}),  # 20
    )


def test_one_row_per_event_with_its_seq_agent_and_time() -> None:
    rows = transcript_rows(conversation())
    assert [r.seq for r in rows] == list(range(1, 21))
    assert all(r.time == T0 for r in rows)
    assert rows[0].agent == "coder" and rows[16].agent == ""


def test_every_row_kind_and_its_fields() -> None:
    rows = transcript_rows(conversation())
    assert [type(r) for r in rows] == [
        TurnStartRow,
        UserMessageRow,
        StepStartRow,
        AssistantMessageRow,
        ToolCallRow,
        ToolResultRow,
        UsageRow,
        TodoRow,
        SubagentStartRow,
        SubagentEndRow,
        SkillLoadRow,
        EventRow,
        StepEndRow,
        UsageRow,
        RunFinishRow,
        TurnEndRow,
        RecoveryRow,
        CompactionRow,
        EventRow,
        EventRow,
    ]
    start, user, step, said, call, result, usage, todos = rows[:8]
    assert isinstance(start, TurnStartRow) and start.user == "U1"
    assert isinstance(user, UserMessageRow) and (user.user, user.text) == ("U1", "Fix it")
    assert isinstance(step, StepStartRow) and step.step == 0
    assert isinstance(said, AssistantMessageRow)
    assert said.text == "Looking."
    assert said.tool_calls == [ToolCallView(id="c1", name="read", arguments='{"path":"a.py"}')]
    assert isinstance(call, ToolCallRow) and (call.name, call.call_id) == ("read", "c1")
    assert isinstance(result, ToolResultRow)
    assert (result.name, result.call_id, result.is_error) == ("read", "c1", False)
    assert result.audit == {"decision": "interrupted"} and result.interrupted
    assert result.content_chars == len(LONG)
    assert isinstance(usage, UsageRow) and (usage.input_tokens, usage.output_tokens) == (100, 7)
    assert isinstance(todos, TodoRow)
    assert todos.items == [
        TodoItemView(id="t1", title="ship", status="done", done=True),
        TodoItemView(id="t2", title="test", status="pending", done=False),
    ]
    sub_start, sub_end, skill, retry, step_end, _, finish, end, recovery, compaction = rows[8:18]
    assert isinstance(sub_start, SubagentStartRow)
    assert (sub_start.subagent, sub_start.child_session, sub_start.task) == (
        "helper",
        "s/sub",
        "look",
    )
    assert sub_start.background
    assert isinstance(sub_end, SubagentEndRow)
    assert (sub_end.subagent, sub_end.status, sub_end.error) == ("helper", "failed", "boom")
    assert isinstance(skill, SkillLoadRow) and skill.name == "pdf"
    assert isinstance(retry, EventRow) and retry.type == "retry/start"
    assert json.loads(retry.data) == {"attempt": 2}
    assert isinstance(step_end, StepEndRow) and step_end.step == 0
    assert isinstance(finish, RunFinishRow) and (finish.status, finish.summary) == (
        "completed",
        "done",
    )
    assert isinstance(end, TurnEndRow)
    assert (end.steps, end.error_type, end.error_message) == (1, "TimeoutError", "too slow")
    assert isinstance(recovery, RecoveryRow)
    assert (recovery.turn_start_seq, recovery.orphan_results, recovery.closed_step) == (1, 2, 0)
    assert isinstance(compaction, CompactionRow)
    assert (compaction.compaction_kind, compaction.first_kept_seq) == ("summary", 16)
    assert (compaction.kept_messages, compaction.tokens_before) == (2, 900)
    overflow, custom = rows[18:]
    assert isinstance(overflow, EventRow) and overflow.type == "overflow/recovery"
    assert isinstance(custom, EventRow) and custom.type == "custom/thing"
    assert json.loads(custom.data) == {"x": [1, 2]}


def test_a_turn_end_totals_the_usage_of_its_turn_only() -> None:
    rows = transcript_rows(
        numbered(
            Event.new(ev.USAGE, ev.Usage(input_tokens=1000, output_tokens=1000)),
            *conversation(),
            Event.new(ev.TURN_START, ev.TurnStart()),
            Event.new(ev.TURN_END, ev.TurnEnd(steps=0)),
        )
    )
    ends = [r for r in rows if isinstance(r, TurnEndRow)]
    assert [(e.input_tokens, e.output_tokens) for e in ends] == [(120, 10), (0, 0)]
    assert ends[1].error_type == "" and ends[1].error_message == ""


def test_depth_is_0_outside_a_turn_1_in_a_turn_2_in_a_step() -> None:
    rows = transcript_rows(conversation())
    depths = {r.seq: r.depth for r in rows}
    assert depths[1] == 0 and depths[16] == 0  # the turn's own markers
    assert depths[2] == 1  # in the turn, before the step
    assert depths[3] == 1 and depths[13] == 1  # the step's own markers
    assert [depths[seq] for seq in range(4, 13)] == [2] * 9  # inside the step
    assert depths[14] == 1 and depths[15] == 1  # after the step, still in the turn
    assert [depths[seq] for seq in range(17, 21)] == [0] * 4  # after the turn


def test_a_step_outside_a_turn_nests_at_1_and_a_new_turn_closes_an_open_step() -> None:
    rows = transcript_rows(
        numbered(
            Event.new(ev.STEP_START, ev.StepStart(step=0)),
            Event.new(ev.USER_MESSAGE, Message.user("in a bare step")),
            Event.new(ev.STEP_END, ev.StepEnd(step=0)),
            Event.new(ev.TURN_START, ev.TurnStart()),
            Event.new(ev.STEP_START, ev.StepStart(step=0)),
            Event.new(ev.TURN_START, ev.TurnStart()),  # supersedes, the crashed step with it
            Event.new(ev.USER_MESSAGE, Message.user("new turn")),
        )
    )
    assert [r.depth for r in rows] == [0, 1, 0, 0, 1, 0, 1]


def test_long_texts_are_previews_and_thinking_is_folded() -> None:
    rows = {r.seq: r for r in transcript_rows(conversation())}
    said, result, skill, compaction = rows[4], rows[6], rows[11], rows[18]
    assert isinstance(said, AssistantMessageRow)
    thinking = "Which file? " * 20
    assert said.thinking == f"(thinking: {len(thinking)} chars)"
    assert said.thinking_chars == len(thinking)
    assert isinstance(result, ToolResultRow)
    assert result.content == LONG[: PREVIEW_CHARS - 1] + "…"
    assert len(result.content) == PREVIEW_CHARS
    assert isinstance(skill, SkillLoadRow) and skill.body == LONG[: PREVIEW_CHARS - 1] + "…"
    assert isinstance(compaction, CompactionRow)
    assert compaction.summary == LONG[: PREVIEW_CHARS - 1] + "…"


def test_full_keeps_every_text_whole_and_shows_the_thinking() -> None:
    rows = {r.seq: r for r in transcript_rows(conversation(), full=True)}
    said, result, skill, compaction = rows[4], rows[6], rows[11], rows[18]
    assert isinstance(said, AssistantMessageRow) and said.thinking == "Which file? " * 20
    assert isinstance(result, ToolResultRow) and result.content == LONG
    assert isinstance(skill, SkillLoadRow) and skill.body == LONG
    assert isinstance(compaction, CompactionRow) and compaction.summary == LONG


def test_a_text_of_exactly_the_preview_length_is_not_cut() -> None:
    text = "x" * PREVIEW_CHARS
    (row,) = transcript_rows(numbered(Event.new(ev.USER_MESSAGE, Message.user(text))))
    assert isinstance(row, UserMessageRow) and row.text == text
    (row,) = transcript_rows(numbered(Event.new(ev.USER_MESSAGE, Message.user(text + "y"))))
    assert isinstance(row, UserMessageRow) and row.text == "x" * (PREVIEW_CHARS - 1) + "…"


def test_long_tool_call_arguments_are_cut_unless_full() -> None:
    call = ToolCall("c9", "write", {"text": "z" * 500})
    events = numbered(Event.new(ev.ASSISTANT_MESSAGE, Message.assistant(tool_calls=[call])))
    (short,) = transcript_rows(events)
    (whole,) = transcript_rows(events, full=True)
    assert isinstance(short, AssistantMessageRow) and isinstance(whole, AssistantMessageRow)
    assert len(short.tool_calls[0].arguments) == PREVIEW_CHARS
    assert json.loads(whole.tool_calls[0].arguments) == {"text": "z" * 500}
    assert short.thinking == "" and short.thinking_chars == 0


def test_a_prune_and_a_legacy_compaction_marker() -> None:
    prune, legacy = transcript_rows(
        numbered(
            Event.new(ev.COMPACTION, ev.Compaction(kind="prune", first_kept_seq=5)),
            Event.new(ev.COMPACTION, ev.Compaction(summary=Message.user("s"), before_seq=3)),
        )
    )
    assert isinstance(prune, CompactionRow)
    assert (prune.compaction_kind, prune.first_kept_seq, prune.summary) == ("prune", 5, "")
    assert isinstance(legacy, CompactionRow)
    assert (legacy.first_kept_seq, legacy.summary) == (3, "s")


@pytest.mark.parametrize(
    ("kind", "data"),
    [
        (ev.TURN_END, b'{"error": 5}'),
        (ev.STEP_START, b"[]"),
        (ev.USER_MESSAGE, b'{"role": "nobody"}'),
        (ev.ASSISTANT_MESSAGE, b"not json"),
        (ev.TOOL_RESULT, b"null"),
        (ev.USAGE, b'{"inputTokens": "many"}'),
        (ev.TODO_UPDATE, b'{"items": [{}]}'),
        (ev.COMPACTION, b'{"summary": 1}'),
        (ev.SESSION_RECOVERY, b'{"steps": "x"}'),
        (ev.SUBAGENT_START, b"3"),
        (ev.SKILL_LOAD, b"{}"),
        (ev.RUN_FINISH, b"{}"),
        ("custom/thing", b"\xff not json"),
    ],
)
def test_a_payload_that_does_not_decode_becomes_a_generic_row(kind: str, data: bytes) -> None:
    events = numbered(
        Event.new(ev.USER_MESSAGE, Message.user("before")),
        raw(kind, data, agent="coder"),
        Event.new(ev.USER_MESSAGE, Message.user("after")),
    )
    before, bad, after = transcript_rows(events)
    assert isinstance(bad, EventRow)
    assert (bad.seq, bad.type, bad.agent) == (2, kind, "coder")
    assert bad.data == data.decode("utf-8", "replace")
    assert isinstance(before, UserMessageRow) and isinstance(after, UserMessageRow)


def test_a_bad_payload_still_nests_by_its_type() -> None:
    rows = transcript_rows(
        numbered(
            Event.new(ev.TURN_START, ev.TurnStart()),
            raw(ev.STEP_START, b"[]"),  # opens a step all the same
            Event.new(ev.USER_MESSAGE, Message.user("in the step")),
            raw(ev.STEP_END, b"[]"),  # closes it
            raw(ev.TURN_END, b"[]"),  # closes the turn
            Event.new(ev.USER_MESSAGE, Message.user("outside")),
        )
    )
    assert [type(r).__name__ for r in rows] == [
        "TurnStartRow",
        "EventRow",
        "UserMessageRow",
        "EventRow",
        "EventRow",
        "UserMessageRow",
    ]
    assert [r.depth for r in rows] == [0, 1, 2, 1, 0, 0]


def test_a_turn_start_payload_is_not_looked_at() -> None:
    (row,) = transcript_rows(numbered(raw(ev.TURN_START, b"[1]", agent="a")))
    assert isinstance(row, TurnStartRow) and row.agent == "a"


def test_rows_hold_stored_text_as_it_is_no_markup_or_escapes() -> None:
    text = "[bold red]not markup[/] \x1b[31m <b>&amp;"
    (row,) = transcript_rows(numbered(Event.new(ev.USER_MESSAGE, Message.user(text))))
    assert isinstance(row, UserMessageRow) and row.text == text


def test_rows_encode_as_json_tagged_by_kind() -> None:
    rows = transcript_rows(conversation())
    encoded = json.loads(msgspec.json.encode(rows))
    assert [item["kind"] for item in encoded] == [r.kind for r in rows]
    assert encoded[0] == {
        "kind": "turn_start",
        "seq": 1,
        "depth": 0,
        "agent": "coder",
        "time": "2026-01-02T03:04:05Z",
        "rewound": False,
        "user": "U1",
    }
    decoded = msgspec.json.decode(msgspec.json.encode(rows), type=list[view.AnyRow])
    assert decoded == rows


def row_classes() -> list[type[Row]]:
    return [
        value
        for name in view.__all__
        if isinstance(value := getattr(view, name), type) and issubclass(value, Row)
    ]


def test_every_row_class_has_its_kind_as_its_json_tag_and_a_docstring() -> None:
    classes = row_classes()
    assert len(classes) == 23
    kinds = [cls.kind for cls in classes if cls is not Row]
    assert len(set(kinds)) == len(kinds) == 22
    for cls in classes:
        assert (cls.__doc__ or "").strip(), cls
        if cls is not Row:
            assert cls.__struct_config__.tag == cls.kind


def test_the_package_reexports_the_module() -> None:
    module: Any = view.transcript
    assert sorted(view.__all__) == sorted(module.__all__)
    for name in view.__all__:
        assert getattr(view, name) is getattr(module, name)


def test_a_refusal_shows_in_the_assistant_row() -> None:
    from agentsession.messages import RefusalPart, TextPart
    from agentsession.view.transcript import AssistantMessageRow, transcript_rows

    message = Message(role="assistant", parts=[TextPart("Sorry. "), RefusalPart("no bookings")])
    event = Event(seq=1, type="assistant/message", data=Event.new("x", message).data)
    [row] = transcript_rows([event])
    assert isinstance(row, AssistantMessageRow)
    assert row.text == "Sorry. [refused] no bookings"


def test_an_assistant_row_names_the_author_and_every_renderer_labels_it_so() -> None:
    """A merge writes the child's summary (or its messages) into the parent as messages whose
    author is the subagent and whose events name no agent: `messages`, `show` and the viewer
    (through ``speaker``) all label them with the author."""
    by_author = Message(role="assistant", parts=Message.assistant("x").parts, author="researcher")
    by_name = Message(role="assistant", parts=Message.assistant("y").parts, name="helper")
    rows = transcript_rows(
        numbered(
            Event.new(ev.ASSISTANT_MESSAGE, by_author),
            Event.new(ev.ASSISTANT_MESSAGE, by_author, agent="coder"),
            Event.new(ev.ASSISTANT_MESSAGE, by_name),
            Event.new(ev.ASSISTANT_MESSAGE, Message.assistant("z"), agent="coder"),
            Event.new(ev.USER_MESSAGE, Message.user("q"), agent="coder"),
            Event.new(ev.USER_MESSAGE, Message(role="user", parts=Message.user("r").parts,
                                               author="researcher"), agent="coder"),
            Event.new(ev.SKILL_LOAD, ev.SkillLoad(name="pdf"), agent="coder"),
        )
    )
    assert [r.author for r in rows if isinstance(r, AssistantMessageRow | UserMessageRow)] == [
        "researcher", "researcher", "helper", "", "", "researcher"
    ]
    # A user message is labelled with its author only: the agent recorded it, the user said it.
    assert [view.speaker(r) for r in rows] == ["researcher", "researcher", "helper", "coder",
                                               "", "researcher", "coder"]


def test_show_labels_a_merged_summary_with_its_author(tmp_path: Any) -> None:
    from click.testing import CliRunner

    import agentsession as ags
    from agentsession.cli import cli

    store = ags.open_store(tmp_path / "store")
    parent = store.get("p")
    with parent.turn(agent="coder") as turn:
        turn.user("find it")
        turn.assistant("asking")
    child = parent.fork("researcher", task="look")
    with child.turn(agent="researcher") as turn:
        turn.assistant("found")
    child.merge("Research: found.")
    store.close()
    shown = CliRunner().invoke(cli, ["--store", str(tmp_path / "store"), "show", "p"])
    assert shown.exit_code == 0, shown.output
    [line] = [line for line in shown.output.splitlines() if "Research: found." in line
              and "subagent" not in line]
    assert "assistant (researcher): Research: found." in line
    listed = CliRunner().invoke(cli, ["--store", str(tmp_path / "store"), "messages", "p"])
    assert "assistant (researcher):" in listed.output


@pytest.mark.parametrize(
    ("kind", "integration"),
    [
        ("adk/event", True),
        ("adk/session", True),
        ("langchain/message", True),
        ("openai_agents/item", True),
        ("openai_agents/pop", True),
        ("openai_agents/clear", True),
        ("pydantic_ai/message", True),
        ("custom/thing", False),
        ("adkx/event", False),
        ("adk", False),
    ],
)
def test_an_integration_record_is_marked(kind: str, integration: bool) -> None:
    [row] = transcript_rows(numbered(Event.new(kind, {"x": 1})))
    assert isinstance(row, EventRow) and row.integration is integration


def test_every_integration_event_type_is_in_an_integration_namespace() -> None:
    from agentsession.integrations import adk, langchain, openai_agents, pydantic_ai

    types = [adk.ADK_EVENT, adk.ADK_SESSION, langchain.LANGCHAIN_MESSAGE, openai_agents.ITEM,
             openai_agents.POP, openai_agents.CLEAR, pydantic_ai.MESSAGE]
    assert all(t.startswith(view.INTEGRATION_NAMESPACES) for t in types)
    assert not any(t.startswith(view.INTEGRATION_NAMESPACES) for t in ev.EVENT_TYPES)
