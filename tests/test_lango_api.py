"""lango's session API on top of the log: timeout annotations, compacting up to a message
index, the context helpers (session key, turn id, run context) and the turn ids the recorder
stamps; and the agent filter of ``messages()`` inside a chat envelope."""

from __future__ import annotations

import ast
import asyncio
import re
import threading
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import agentsession as ags
import agentsession.context
from agentsession.chat.envelope import TurnEnvelope, apply_envelope
from agentsession.context import (
    RunContext,
    run_context,
    session_key,
    turn_id,
    with_run_context,
    with_session_key,
    with_turn_id,
)
from agentsession.events import TurnEnd
from agentsession.recorder import META_RUN_ID, META_TURN_ID, TIMEOUT_NOTE, timeout_annotation
from agentsession.validation import provider_errors

NOTE = "[This response was interrupted due to a timeout]"


@pytest.fixture(params=["memory", "jsonl"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ags.BaseStore:
    return ags.open_store("memory:" if request.param == "memory" else tmp_path)


@pytest.fixture
def session(store: ags.BaseStore) -> ags.BaseSession:
    return store.get("lango")


def run_turn(session: ags.BaseSession, n: int, *, agent: str = "coder", steps: int = 1) -> None:
    with session.turn(agent=agent) as turn:
        turn.user(f"question {n}")
        for k in range(steps):
            with turn.step() as step:
                step.assistant(tool_calls=[ags.ToolCall(f"c{n}.{k}", "read", {"n": n})])
                step.tool_result(f"c{n}.{k}", "read", f"result {n}.{k}")
        turn.assistant(f"answer {n}")


def texts(msgs: list[ags.Message]) -> list[str]:
    return [m.text or ",".join(r.content for r in m.tool_results) or "calls" for m in msgs]


def types(session: ags.BaseSession) -> list[str]:
    return [e.type for e in session.read()]


# -- annotate_timeout --------------------------------------------------------------------------


def test_the_timeout_note_is_langos_text() -> None:
    assert TIMEOUT_NOTE == NOTE
    assert timeout_annotation("").text == NOTE
    assert timeout_annotation("so far").text == "so far\n\n---\n" + NOTE
    assert timeout_annotation("x").role == "assistant"


def test_annotate_timeout_keeps_the_partial_text(session: ags.BaseSession) -> None:
    run_turn(session, 0)
    seq = session.annotate_timeout("The answer is 4")
    assert seq == session.latest_seq
    event = session.read()[-1]
    assert event.type == "assistant/message" and event.agent == ""
    last = session.messages()[-1]
    assert last.role == "assistant"
    assert last.text == "The answer is 4\n\n---\n" + NOTE


def test_annotate_timeout_without_partial_is_the_note_alone(session: ags.BaseSession) -> None:
    session.append(ags.Event.new("user/message", ags.Message.user("hi")))
    session.annotate_timeout()
    assert texts(session.messages()) == ["hi", NOTE]


def test_annotate_timeout_after_an_open_call_stays_provider_valid(
    session: ags.BaseSession,
) -> None:
    session.append(ags.Event.new("user/message", ags.Message.user("read it")))
    call = ags.ToolCall("c1", "read", {"path": "a"})
    session.append(ags.Event.new("assistant/message", ags.Message.assistant(tool_calls=[call])))
    session.annotate_timeout("half")
    msgs = session.messages()
    assert provider_errors(msgs) == []
    assert [m.role for m in msgs] == ["user", "assistant", "tool", "assistant"]
    assert msgs[2].tool_results[0].audit == {"decision": "interrupted"}
    assert msgs[3].text == "half\n\n---\n" + NOTE


def test_annotate_timeout_of_an_agent_stays_out_of_other_agents_histories(
    session: ags.BaseSession,
) -> None:
    run_turn(session, 0, agent="a")
    run_turn(session, 1, agent="b")
    session.annotate_timeout("p", agent="a")
    assert texts(session.messages(agent="a"))[-1] == "p\n\n---\n" + NOTE
    assert NOTE not in " ".join(texts(session.messages(agent="b")))


def test_annotate_timeout_stamps_the_context_turn_id(session: ags.BaseSession) -> None:
    session.annotate_timeout()
    assert META_TURN_ID not in session.read()[-1].meta
    with with_turn_id("trace-1"):
        session.annotate_timeout()
    assert session.read()[-1].meta[META_TURN_ID] == "trace-1"


def test_annotate_timeout_refuses_a_partial_that_is_not_text(session: ags.BaseSession) -> None:
    with pytest.raises(ags.UsageError, match="string"):
        session.annotate_timeout(b"bytes")  # type: ignore[arg-type]


# -- the recorder on a timeout -----------------------------------------------------------------


def test_a_timeout_escaping_a_turn_writes_the_annotation_before_turn_end(
    session: ags.BaseSession,
) -> None:
    with pytest.raises(TimeoutError), session.turn(agent="coder") as turn:  # noqa: PT012
        turn.user("go")
        with turn.step() as step:
            step.assistant(tool_calls=[ags.ToolCall("c1", "slow")])
            turn.partial = "I was about to"
            raise TimeoutError("model took too long")
    assert types(session)[-4:] == ["tool/result", "step/end", "assistant/message", "turn/end"]
    events = session.read()
    assert events[-2].payload().text == "I was about to\n\n---\n" + NOTE
    assert events[-2].agent == "coder"
    end = events[-1].payload()
    assert isinstance(end, TurnEnd) and end.error is not None
    assert (end.error.type, end.error.message) == ("TimeoutError", "model took too long")
    msgs = session.messages()
    assert provider_errors(msgs) == []
    assert msgs[-1].text == "I was about to\n\n---\n" + NOTE
    assert ags.scan_incomplete(events) is None


def test_an_asyncio_timeout_inside_the_turn_is_annotated(session: ags.BaseSession) -> None:
    async def slow_model() -> str:
        await asyncio.sleep(10)
        return "never"

    async def agent() -> None:
        with session.turn() as turn:
            turn.user("go")
            turn.partial = "partial answer"
            await asyncio.wait_for(slow_model(), timeout=0.01)

    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(agent())
    assert texts(session.messages())[-1] == "partial answer\n\n---\n" + NOTE


def test_timed_out_annotates_a_timeout_the_caller_handled(session: ags.BaseSession) -> None:
    with session.turn() as turn:
        turn.user("go")
        with turn.step() as step:
            step.assistant(tool_calls=[ags.ToolCall("c1", "slow")])
        try:
            raise TimeoutError
        except TimeoutError:
            turn.timed_out(partial="what I had")
    events = session.read()
    assert [e.type for e in events[-3:]] == ["tool/result", "assistant/message", "turn/end"]
    result = events[-3].payload()
    assert result.call_id == "c1" and result.is_error and "TimeoutError" in result.content
    assert events[-2].payload().text == "what I had\n\n---\n" + NOTE
    end = events[-1].payload()
    assert end.error is not None and end.error.type == "TimeoutError"
    assert provider_errors(session.messages()) == []


def test_timed_out_without_partial_uses_what_the_turn_streamed(
    session: ags.BaseSession,
) -> None:
    with session.turn() as turn:
        turn.user("go")
        for delta in ("The ", "answer ", "is"):
            turn.partial += delta
        turn.timed_out()
    assert texts(session.messages())[-1] == "The answer is\n\n---\n" + NOTE


def test_recording_the_reply_clears_the_partial_text(session: ags.BaseSession) -> None:
    with pytest.raises(TimeoutError), session.turn() as turn:  # noqa: PT012
        turn.user("go")
        turn.partial = "streamed"
        turn.assistant("streamed")
        raise TimeoutError
    assert texts(session.messages())[-2:] == ["streamed", NOTE]


def test_a_timeout_in_a_batched_step_is_annotated_after_the_step(
    session: ags.BaseSession,
) -> None:
    with pytest.raises(TimeoutError), session.turn(batch_steps=True) as turn:  # noqa: PT012
        turn.user("go")
        with turn.step() as step:
            step.assistant(tool_calls=[ags.ToolCall("c1", "slow")])
            raise TimeoutError
    assert types(session)[-3:] == ["step/end", "assistant/message", "turn/end"]
    assert provider_errors(session.messages()) == []


@pytest.mark.parametrize(
    "exc", [RuntimeError("boom"), ags.LockTimeout("s", 1.0), KeyboardInterrupt()]
)
def test_other_exceptions_and_lock_timeouts_are_not_annotated(
    session: ags.BaseSession, exc: BaseException
) -> None:
    with pytest.raises(type(exc)), session.turn() as turn:  # noqa: PT012
        turn.user("go")
        turn.partial = "x"
        raise exc
    assert types(session) == ["turn/start", "user/message", "turn/end"]


def test_a_turn_without_timeout_writes_no_annotation(session: ags.BaseSession) -> None:
    run_turn(session, 0)
    assert NOTE not in " ".join(texts(session.messages()))
    assert session.read()[-1].payload().error is None


# -- compact(up_to_message=) -------------------------------------------------------------------


def turn_starts(session: ags.BaseSession, agent: str | None = None) -> list[int]:
    """Indexes in messages(agent) of the user messages (every turn here starts with one)."""
    return [i for i, m in enumerate(session.messages(agent=agent)) if m.role == "user"]


def test_compact_up_to_the_end_of_a_turn_replaces_exactly_those_messages(
    session: ags.BaseSession,
) -> None:
    for n in range(4):
        run_turn(session, n)
    before = session.messages()
    third = turn_starts(session)[2]
    seq = session.compact("summary of 0 and 1", up_to_message=third - 1)
    assert seq == session.latest_seq
    after = session.messages()
    assert after == [ags.Message.user("summary of 0 and 1"), *before[third:]]
    assert provider_errors(after) == []
    assert len(session.read()) == seq  # nothing deleted


def test_an_index_inside_a_turn_moves_the_cut_back_to_the_turns_start(
    session: ags.BaseSession,
) -> None:
    for n in range(3):
        run_turn(session, n, steps=2)
    before = session.messages()
    second, third = turn_starts(session)[1:3]
    # Message second + 2 is the tool result of turn 1's first call: not a boundary.
    assert before[second + 2].role == "tool"
    session.compact("summary", up_to_message=second + 1)
    after = session.messages()
    assert after == [ags.Message.user("summary"), *before[second:]]
    assert third > second  # the turn after stays too, of course
    assert provider_errors(after) == []


def test_the_last_index_replaces_the_whole_history(session: ags.BaseSession) -> None:
    for n in range(2):
        run_turn(session, n)
    total = len(session.messages())
    assert session.compact("all of it", up_to_message=total - 1) is not None
    assert session.messages() == [ags.Message.user("all of it")]
    run_turn(session, 2)
    assert texts(session.messages())[:2] == ["all of it", "question 2"]


def test_an_index_inside_the_first_turn_drops_nothing(session: ags.BaseSession) -> None:
    for n in range(2):
        run_turn(session, n)
    before = session.messages()
    assert session.compact("s", up_to_message=1) is None
    assert session.messages() == before
    assert all(e.type != "session/compaction" for e in session.read())


@pytest.mark.parametrize("index", [-1, 4, 100])
def test_an_index_out_of_range_is_langos_error(session: ags.BaseSession, index: int) -> None:
    run_turn(session, 0)
    assert len(session.messages()) == 4
    with pytest.raises(
        ags.UsageError, match=re.escape(f"compact index {index} out of range (have 4 messages)")
    ):
        session.compact("s", up_to_message=index)


def test_up_to_message_is_one_of_three_exclusive_forms(session: ags.BaseSession) -> None:
    run_turn(session, 0)
    with pytest.raises(ags.UsageError, match="exactly one of"):
        session.compact("s", up_to_message=1, keep_turns=1)
    with pytest.raises(ags.UsageError, match="exactly one of"):
        session.compact("s", up_to_message=1, first_kept_seq=1)
    with pytest.raises(ags.UsageError, match="exactly one of"):
        session.compact("s")
    with pytest.raises(ags.UsageError, match="must be an int"):
        session.compact("s", up_to_message=True)


def test_up_to_message_refuses_while_calls_are_unanswered(session: ags.BaseSession) -> None:
    run_turn(session, 0)
    with session.turn() as turn:
        turn.user("next")
        with turn.step() as step:
            step.assistant(tool_calls=[ags.ToolCall("open", "slow")])
            with pytest.raises(ags.UsageError, match="unanswered"):
                session.compact("s", up_to_message=0)
            step.tool_result("open", "slow", "done")


def test_the_index_counts_in_the_agents_history(session: ags.BaseSession) -> None:
    for n in range(3):
        run_turn(session, n, agent="a")
        run_turn(session, 10 + n, agent="b")
    before_a, before_b = session.messages(agent="a"), session.messages(agent="b")
    second_a = turn_starts(session, "a")[1]
    session.compact("a summary", agent="a", up_to_message=second_a - 1)
    assert session.messages(agent="a") == [ags.Message.user("a summary"), *before_a[second_a:]]
    assert session.messages(agent="b") == before_b


def test_up_to_message_cuts_inside_what_an_earlier_compaction_kept(
    session: ags.BaseSession,
) -> None:
    for n in range(4):
        run_turn(session, n)
    session.compact("first summary", keep_turns=3)
    before = session.messages()
    assert texts(before)[:2] == ["first summary", "question 1"]
    second_kept = turn_starts(session)[1]  # turn 2, inside the retained tail
    session.compact("second summary", up_to_message=second_kept - 1)
    assert session.messages() == [ags.Message.user("second summary"), *before[second_kept:]]
    # Index 0 is the summary alone: replacing it re-summarises and keeps every turn.
    before = session.messages()
    session.compact("third summary", up_to_message=0)
    assert session.messages() == [ags.Message.user("third summary"), *before[1:]]


@given(
    shape=st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=6),
    data=st.data(),
)
def test_up_to_message_never_drops_what_was_not_asked_and_keeps_a_suffix(
    shape: list[int], data: st.DataObject
) -> None:
    session = ags.open_store("memory:").get("prop")
    for n, steps in enumerate(shape):
        run_turn(session, n, steps=steps)
    before = session.messages()
    index = data.draw(st.integers(min_value=0, max_value=len(before) - 1))
    boundaries = {i for i, m in enumerate(before) if m.role == "user"} | {len(before)}
    seq = session.compact("summary", up_to_message=index)
    after = session.messages()
    cut = max(b for b in boundaries if b <= index + 1)
    if cut == 0:
        assert seq is None and after == before
    else:
        assert after == [ags.Message.user("summary"), *before[cut:]]
        assert len(after) - 1 >= len(before) - index - 1  # every message after index kept
    assert provider_errors(after) == []


# -- the context helpers -----------------------------------------------------------------------


def test_nothing_is_set_by_default() -> None:
    assert session_key() == ""
    assert turn_id() == ""
    assert run_context() is None


def test_with_functions_nest_and_restore_the_previous_value() -> None:
    with with_turn_id("outer") as value:
        assert value == "outer" and turn_id() == "outer"
        with with_turn_id("inner"):
            assert turn_id() == "inner"
        assert turn_id() == "outer"
    assert turn_id() == ""
    with with_session_key("bg:1"):
        with with_session_key("workflow:w:r:s"):
            assert session_key() == "workflow:w:r:s"
        assert session_key() == "bg:1"
    assert session_key() == ""
    background = RunContext(session_type="background", run_id="task-1")
    with with_run_context(background) as value:
        assert value is background
        with with_run_context(RunContext(session_type="workflow", workflow_id="w", run_id="r")):
            assert run_context() == RunContext(
                session_type="workflow", workflow_id="w", run_id="r"
            )
        assert run_context() is background
    assert run_context() is None


def test_restoring_happens_on_an_exception_too() -> None:
    with pytest.raises(RuntimeError), with_turn_id("t"):
        raise RuntimeError
    assert turn_id() == ""


def test_a_token_that_is_ignored_keeps_the_change_until_reset() -> None:
    token = with_session_key("kept")
    try:
        assert session_key() == "kept" and token.value == "kept"
    finally:
        token.reset()
        token.reset()  # a second reset does nothing
    assert session_key() == ""


def test_values_must_have_the_right_type() -> None:
    with pytest.raises(TypeError):
        with_turn_id(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        with_session_key(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        with_run_context({"run_id": "r"})  # type: ignore[arg-type]


def test_a_run_context_is_frozen() -> None:
    run = RunContext(run_id="r")
    with pytest.raises(AttributeError):
        run.run_id = "other"  # type: ignore[misc]
    assert RunContext() == RunContext(session_type="", workflow_id="", run_id="")


def test_threads_do_not_see_each_others_values() -> None:
    barrier = threading.Barrier(4)
    seen: dict[int, tuple[str, str]] = {}

    def worker(n: int) -> None:
        with with_turn_id(f"t{n}"), with_session_key(f"s{n}"):
            barrier.wait()  # every thread has set its value before any reads
            seen[n] = (turn_id(), session_key())
            barrier.wait()

    with with_turn_id("main"):
        threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert turn_id() == "main"
    assert seen == {n: (f"t{n}", f"s{n}") for n in range(4)}


def test_asyncio_tasks_inherit_a_copy_and_keep_their_changes_to_themselves() -> None:
    async def child(n: int) -> tuple[str, str]:
        inherited = turn_id()
        with with_turn_id(f"task{n}"):
            await asyncio.sleep(0.01 * (3 - n))  # interleave the tasks
            return inherited, turn_id()

    async def main() -> list[tuple[str, str]]:
        with with_turn_id("parent"):
            results = await asyncio.gather(*(child(n) for n in range(3)))
            assert turn_id() == "parent"
            return list(results)

    assert asyncio.run(main()) == [("parent", f"task{n}") for n in range(3)]
    assert turn_id() == ""


def test_the_context_module_is_a_leaf() -> None:
    path = Path(agentsession.context.__file__)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        (node.module or "").split(".")[0] if not node.level else "agentsession"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
    }
    allowed = {"__future__", "collections", "contextvars", "enum", "types", "typing", "msgspec"}
    assert imported <= allowed, imported


# -- turn ids stamped by the recorder ----------------------------------------------------------


def test_every_recorded_event_carries_the_turns_generated_id(session: ags.BaseSession) -> None:
    with pytest.raises(RuntimeError), session.turn(agent="a") as turn:  # noqa: PT012
        turn.user("go")
        with turn.step() as step:
            step.assistant("x", tool_calls=[ags.ToolCall("c1", "t")])
            step.usage(1, 1)
            raise RuntimeError("fail")  # the error result and turn/end are stamped too
    assert re.fullmatch(r"[0-9a-f]{32}", turn.turn_id)
    assert uuid.UUID(hex=turn.turn_id).version == 4
    events = session.read()
    assert [e.type for e in events] == [
        "turn/start",
        "user/message",
        "step/start",
        "assistant/message",
        "usage",
        "tool/result",
        "step/end",
        "turn/end",
    ]
    assert {e.meta[META_TURN_ID] for e in events} == {turn.turn_id}


def test_each_turn_gets_its_own_id_and_the_context_sees_it_while_open(
    session: ags.BaseSession,
) -> None:
    ids = []
    for _ in range(3):
        with session.turn() as turn:
            assert turn_id() == turn.turn_id
            turn.user("hi")
        assert turn_id() == ""
        ids.append(turn.turn_id)
    assert len(set(ids)) == 3
    stamped = [e.meta[META_TURN_ID] for e in session.read() if e.type == "turn/start"]
    assert stamped == ids


def test_the_context_turn_id_is_used_and_restored(session: ags.BaseSession) -> None:
    with with_turn_id("trace-abc"):
        with session.turn() as turn:
            turn.user("hi")
            assert turn_id() == "trace-abc"
        assert turn.turn_id == "trace-abc"
        assert turn_id() == "trace-abc"
    assert {e.meta[META_TURN_ID] for e in session.read()} == {"trace-abc"}


def test_a_turn_inside_another_shares_its_id_unless_given_its_own(
    store: ags.BaseStore,
) -> None:
    parent, child = store.get("parent"), store.get("child")
    with parent.turn() as outer:
        with child.turn() as inner:
            inner.user("delegated")
        with with_turn_id("sub-1"), child.turn() as own:
            own.user("delegated again")
        assert turn_id() == outer.turn_id
    assert inner.turn_id == outer.turn_id and own.turn_id == "sub-1"


def test_batched_steps_are_stamped_too(session: ags.BaseSession) -> None:
    with session.turn(batch_steps=True) as turn:
        turn.user("hi")
        with turn.step() as step:
            step.assistant(tool_calls=[ags.ToolCall("c1", "t")])
            step.tool_result("c1", "t", "r")
    assert {e.meta[META_TURN_ID] for e in session.read()} == {turn.turn_id}


def test_the_stamp_wins_over_platform_metadata_and_keeps_the_rest(
    session: ags.BaseSession,
) -> None:
    with session.turn(metadata={"platform": "slack", "turn_id": "spoofed"}) as turn:
        turn.user("hi")
    user_event = session.read()[1]
    assert user_event.meta == {"platform": "slack", META_TURN_ID: turn.turn_id}


def test_the_run_id_is_stamped_on_turn_start_only(session: ags.BaseSession) -> None:
    background = RunContext(session_type="background", run_id="task-7")
    with with_run_context(background), session.turn() as turn:
        turn.user("hi")
    events = session.read()
    assert events[0].meta == {META_TURN_ID: turn.turn_id, META_RUN_ID: "task-7"}
    assert all(META_RUN_ID not in e.meta for e in events[1:])
    with with_run_context(RunContext(session_type="background")), session.turn():
        pass
    assert META_RUN_ID not in session.read()[-2].meta  # a run context without a run id


def test_turns_in_concurrent_tasks_see_their_own_ids(store: ags.BaseStore) -> None:
    async def agent(n: int) -> tuple[str, str]:
        session = store.get(f"task-{n}")
        with session.turn() as turn:
            await asyncio.sleep(0.01 * (3 - n))
            inside = turn_id()
            turn.user("hi")
        return turn.turn_id, inside

    async def main() -> list[tuple[str, str]]:
        return list(await asyncio.gather(*(agent(n) for n in range(3))))

    results = asyncio.run(main())
    assert all(own == inside for own, inside in results)
    assert len({own for own, _ in results}) == 3


# -- the agent filter and the envelope ---------------------------------------------------------


def test_messages_ignores_the_envelopes_agent(session: ags.BaseSession) -> None:
    run_turn(session, 0, agent="a")
    run_turn(session, 1, agent="b")
    everyone = session.messages()
    only_a = session.messages(agent="a")
    assert len(only_a) < len(everyone)
    with apply_envelope(TurnEnvelope(agent_id="a")):
        assert session.messages() == everyone
        assert session.messages(agent="a") == only_a
        assert session.entries() == session.entries(agent=None)
