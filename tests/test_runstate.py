"""Run state read from the log: todos, finish, repeats, usage, steps, last assistant text."""

from __future__ import annotations

from collections.abc import Iterator

import msgspec
import pytest

import agentsession as ags
import agentsession.derive as ags_derive
from agentsession.events import (
    ASSISTANT_MESSAGE,
    RUN_FINISH,
    STEP_END,
    TODO_UPDATE,
    TOOL_CALL,
    TURN_CONTINUE,
    USAGE,
    USER_MESSAGE,
    Event,
    RunFinish,
    StepEnd,
    Todo,
    TodoUpdate,
    TurnContinue,
    Usage,
)
from agentsession.messages import Message, ToolCall
from agentsession.runstate import (
    RunState,
    finish_after,
    last_assistant_text,
    latest_todos,
    latest_todos_in_run,
    latest_usage,
    load_run_state,
    pending_todos,
    repeated_tool_calls,
    run_start_seq,
    run_state_from_events,
    step_count,
    tool_call_signature,
    total_usage,
)


def numbered(*events: Event) -> list[Event]:
    """The events with seqs 1, 2, 3 ... as a store would stamp them."""
    return [Event(seq=i, type=e.type, agent=e.agent, data=e.data) for i, e in enumerate(events, 1)]


def user(text: str, agent: str = "") -> Event:
    return Event.new(USER_MESSAGE, Message.user(text), agent=agent)


def said(text: str = "", *calls: ToolCall, agent: str = "") -> Event:
    return Event.new(ASSISTANT_MESSAGE, Message.assistant(text, tool_calls=calls), agent=agent)


def todos(*items: tuple[str, str], agent: str = "") -> Event:
    update = TodoUpdate(items=[Todo(id=i, title=f"task {i}", status=s) for i, s in items])
    return Event.new(TODO_UPDATE, update, agent=agent)


def finish(status: str, summary: str = "", agent: str = "") -> Event:
    return Event.new(RUN_FINISH, RunFinish(status, summary), agent=agent)


def usage(inp: int, out: int, total: int, cache_read: int = 0, cache_write: int = 0) -> Event:
    return Event.new(USAGE, Usage(inp, out, total, cache_read, cache_write))


def tool_call(name: str, arguments: dict[str, object], call_id: str = "c") -> Event:
    return Event.new(TOOL_CALL, ToolCall(call_id, name, dict(arguments)))


def raw(kind: str, json_text: str) -> Event:
    return Event.new(kind, msgspec.Raw(json_text.encode()))


def step_end(step: int) -> Event:
    return Event.new(STEP_END, StepEnd(step=step))


# -- todos ------------------------------------------------------------------------------------


def test_latest_todos_uses_the_most_recent_snapshot() -> None:
    events = numbered(todos(("1", "pending")), todos(("1", "done"), ("2", "pending")))
    assert [(t.id, t.status) for t in latest_todos(events)] == [("1", "done"), ("2", "pending")]


def test_latest_todos_is_empty_without_an_update() -> None:
    assert latest_todos(numbered(user("hi"))) == []


def test_latest_todos_in_run_ignores_a_previous_runs_todos() -> None:
    events = numbered(user("first task"), todos(("old", "pending")), user("second task"))
    assert [t.id for t in latest_todos(events)] == ["old"]  # agentkit's whole-log view
    assert latest_todos_in_run(events) == []
    assert latest_todos_in_run(events, start_seq=3) == []


def test_latest_todos_in_run_takes_the_runs_latest_update() -> None:
    events = numbered(
        user("first"), todos(("old", "pending")), user("second"), todos(("a", "pending"))
    )
    assert [t.id for t in latest_todos_in_run(events)] == ["a"]
    assert [t.id for t in latest_todos_in_run(events, start_seq=0)] == ["a"]
    assert [t.id for t in latest_todos_in_run(numbered(todos(("x", "done"))))] == ["x"]


def test_pending_todos_are_every_item_not_done() -> None:
    items = [
        Todo(id="1", status="done"),
        Todo(id="2", status="pending"),
        Todo(id="3", status="in_progress"),
        Todo(id="4", status="someday"),
    ]
    assert [t.id for t in pending_todos(items)] == ["2", "3", "4"]


# -- finish, run start ------------------------------------------------------------------------


def test_finish_after_ignores_earlier_runs() -> None:
    events = numbered(user("one"), finish("completed", "did one"), user("two"))
    assert finish_after(events, run_start_seq(events)) is None
    assert finish_after(events, 0) == RunFinish("completed", "did one")


def test_finish_after_takes_the_latest_finish() -> None:
    events = numbered(user("go"), finish("blocked", "need a key"), finish("completed", "done"))
    assert finish_after(events, 1) == RunFinish("completed", "done")


def test_run_start_seq_is_the_latest_user_message() -> None:
    assert run_start_seq(numbered(user("a"), said("b"), user("c"), said("d"))) == 3
    assert run_start_seq(numbered(said("no user yet"))) == 0


def test_run_start_seq_ignores_continuations() -> None:
    cont = TurnContinue(segment=1, reason="max steps", messages=[Message.user("keep going")])
    events = numbered(user("start"), Event.new(TURN_CONTINUE, cont))
    assert run_start_seq(events) == 1
    assert len(ags_derive.index_messages_for_compaction(events)) == 2  # still model-visible


# -- assistant text, steps --------------------------------------------------------------------


def test_last_assistant_text_skips_tool_only_and_blank_messages() -> None:
    events = numbered(
        user("go"),
        said("  first answer \n"),
        said("", ToolCall("c1", "read", {})),
        said("   "),
    )
    assert last_assistant_text(events) == "first answer"
    assert last_assistant_text(events, after=2) == ""


def test_last_assistant_text_joins_a_messages_text_parts() -> None:
    msg = Message(role="assistant", parts=[ags.TextPart("Hello, "), ags.TextPart("world")])
    assert last_assistant_text(numbered(Event.new(ASSISTANT_MESSAGE, msg))) == "Hello, world"


def test_step_count_counts_step_ends_after_the_cutoff() -> None:
    events = numbered(step_end(0), user("go"), step_end(0), step_end(1))
    assert step_count(events) == 3
    assert step_count(events, after=2) == 2


# -- repeated tool calls ----------------------------------------------------------------------


def test_repeated_tool_calls_counts_the_consecutive_tail() -> None:
    events = numbered(
        tool_call("read", {"path": "a.go"}),
        tool_call("read", {"path": "b.go"}),
        raw(TOOL_CALL, '{ "id" : "c2", "name": "read", "arguments" : { "path" : "b.go" } }'),
        tool_call("read", {"path": "b.go"}),
    )
    assert repeated_tool_calls(events) == 3
    assert repeated_tool_calls([*events, *numbered(tool_call("read", {"path": "c.go"}))]) == 1


def test_repeated_tool_calls_ignores_key_order_at_every_level() -> None:
    events = numbered(
        tool_call("edit", {"path": "a", "opts": {"x": 1, "y": [{"b": 2, "a": 1}]}}),
        tool_call("edit", {"opts": {"y": [{"a": 1, "b": 2}], "x": 1}, "path": "a"}),
    )
    assert repeated_tool_calls(events) == 2


def test_repeated_tool_calls_tells_tools_and_arguments_apart() -> None:
    assert repeated_tool_calls(numbered(tool_call("read", {}), tool_call("list", {}))) == 1
    assert repeated_tool_calls(numbered(tool_call("r", {"n": 1}), tool_call("r", {"n": "1"}))) == 1


def test_repeated_tool_calls_looks_only_after_the_cutoff() -> None:
    events = numbered(tool_call("read", {}), tool_call("read", {}), tool_call("read", {}))
    assert repeated_tool_calls(events, after=1) == 2
    assert repeated_tool_calls(events, after=3) == 0
    assert repeated_tool_calls([]) == 0


def test_tool_call_signature_is_name_nul_canonical_json() -> None:
    call = ToolCall("id", "read", {"b": 1, "a": "é"})
    assert tool_call_signature(call) == 'read\x00{"a":"é","b":1}'


def test_tool_call_signature_survives_lone_surrogates() -> None:
    call = ToolCall("id", "read", {"path": "\udc80"})
    assert tool_call_signature(call) == tool_call_signature(
        ToolCall("other", "read", dict(call.arguments))
    )


# -- usage ------------------------------------------------------------------------------------


def test_total_usage_sums_after_the_cutoff() -> None:
    events = numbered(usage(10, 5, 15, cache_read=4), usage(20, 7, 27, 1, 2))
    assert total_usage(events).total_tokens == 42
    assert total_usage(events, after=1).total_tokens == 27
    assert total_usage(events) == Usage(30, 12, 42, 5, 2)


def test_latest_usage_is_the_last_in_the_whole_log_or_zeros() -> None:
    assert latest_usage(numbered(usage(10, 5, 15), user("x"), usage(99, 1, 100))).input_tokens == 99
    assert latest_usage([]) == Usage()


# -- unparsable payloads ----------------------------------------------------------------------


def test_unparsable_payloads_are_skipped_not_fatal() -> None:
    events = numbered(
        user("real start"),
        todos(("t", "pending")),
        finish("completed"),
        usage(1, 1, 2),
        tool_call("read", {"p": 1}),
        said("real text"),
        step_end(0),
        raw(USER_MESSAGE, '{"role": 7}'),
        raw(TODO_UPDATE, '{"items": "nope"}'),
        raw(RUN_FINISH, "[1, 2]"),
        raw(USAGE, '{"inputTokens": "many"}'),
        raw(TOOL_CALL, '"not a call"'),
        raw(ASSISTANT_MESSAGE, "null"),
        raw(STEP_END, "{}"),
    )
    assert run_start_seq(events) == 1
    assert [t.id for t in latest_todos(events)] == ["t"]
    assert finish_after(events) == RunFinish("completed")
    assert latest_usage(events) == Usage(1, 1, 2)
    assert total_usage(events) == Usage(1, 1, 2)
    assert repeated_tool_calls(events) == 1
    assert last_assistant_text(events) == "real text"
    assert step_count(events) == 1


# -- load_run_state ---------------------------------------------------------------------------


@pytest.fixture
def store() -> Iterator[ags.BaseStore]:
    store = ags.open_store("memory:")
    try:
        yield store
    finally:
        store.close()


def test_load_run_state_reads_the_current_run(store: ags.BaseStore) -> None:
    session = store.get("s")
    with session.turn(agent="coder") as turn:
        turn.user("first task")
        turn.todos([Todo("old", "an old item")])
        with turn.step() as step:
            step.usage(input_tokens=100, output_tokens=10)
        turn.finish("completed", "first done")
    with session.turn(agent="coder") as turn:
        start = turn.user("second task")
        with turn.step() as step:
            step.tool_call(ToolCall("c1", "read", {"path": "a.py"}))
            step.assistant("Reading.", tool_calls=[ToolCall("c1", "read", {"path": "a.py"})])
            step.tool_result("c1", "read", "...")
            step.usage(input_tokens=200, output_tokens=20, cache_read_tokens=50)
        with turn.step() as step:
            step.tool_call(ToolCall("c2", "read", {"path": "a.py"}))
            step.todos([Todo("a", "read a.py", "done"), Todo("b", "fix it", "in_progress")])
            step.usage(input_tokens=300, output_tokens=30)
    state = load_run_state(session)
    assert state == RunState(
        start_seq=start,
        todos=[Todo("a", "read a.py", "done"), Todo("b", "fix it", "in_progress")],
        pending=[Todo("b", "fix it", "in_progress")],
        finish=None,
        repeats=2,
        usage=Usage(500, 50, 550, 50, 0),
        context_tokens=300,
        steps=2,
        last_assistant_text="Reading.",
    )


def test_a_new_run_starts_without_the_previous_runs_todos(store: ags.BaseStore) -> None:
    session = store.get("s")
    with session.turn(agent="coder") as turn:
        turn.user("first task")
        turn.todos([Todo("old", "left undone")])
    with session.turn(agent="coder") as turn:
        turn.user("unrelated question")
    state = load_run_state(session)
    assert (state.todos, state.pending) == ([], [])
    assert [t.id for t in latest_todos(session.read())] == ["old"]


def test_load_run_state_of_an_empty_session_is_all_zero(store: ags.BaseStore) -> None:
    assert load_run_state(store.get("empty")) == RunState()


def test_load_run_state_for_one_agent_ignores_other_agents(store: ags.BaseStore) -> None:
    session = store.get("s")
    session.append_many(
        [
            user("task for the coder", agent="coder"),
            usage(10, 1, 11),  # unattributed: counts for every agent
            user("task for the reviewer", agent="reviewer"),
            finish("completed", "reviewed", agent="reviewer"),
            said("coding", agent="coder"),
        ]
    )
    coder = load_run_state(session, agent="coder")
    assert (coder.start_seq, coder.finish, coder.last_assistant_text) == (1, None, "coding")
    assert coder.usage.total_tokens == 11
    reviewer = load_run_state(session, agent="reviewer")
    assert (reviewer.start_seq, reviewer.finish) == (3, RunFinish("completed", "reviewed"))
    everyone = run_state_from_events(session.read())
    assert (everyone.start_seq, everyone.last_assistant_text) == (3, "coding")
