"""Compaction: summary plus retained tail on a turn boundary; nothing stored is deleted."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import agentsession as ags
from agentsession import derive
from agentsession.backends.jsonl import JsonlLog
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
    padding = "x" * 4096  # so the history is far longer than what opening reads
    for n in range(40):
        run_turn(session, n)
        session.append(ags.Event.new("app/note", {"padding": padding}))
    marker_seq = session.compact("summary", keep_turns=1)
    assert marker_seq is not None
    for n in range(40, 60):
        run_turn(session, n)
        session.append(ags.Event.new("app/note", {"padding": padding}))
    expected = session.messages()
    reopened = ags.open_store(tmp_path).get("c")
    assert isinstance(reopened._log, JsonlLog)
    # Opening read only the end of the file; messages() loads from the marker, not seq 1.
    assert reopened._window_start > marker_seq
    assert not reopened._full
    assert reopened.messages() == expected
    assert reopened._window_start == marker_seq
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


# -- the history cap and compaction counting whole turns ---------------------------------------


@pytest.fixture(params=["memory", "jsonl"])
def open_capped(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[int], ags.BaseStore]:
    """Opens a store with a history cap: the same memory store each time, or the JSONL store
    in ``tmp_path`` opened again (so a second call checks what was stored)."""
    opened: list[ags.BaseStore] = []

    def opener(max_messages: int) -> ags.BaseStore:
        if request.param == "jsonl":
            return ags.open_store(tmp_path, max_messages=max_messages)
        if not opened:
            opened.append(ags.open_store("memory:", max_messages=max_messages))
        return opened[0]

    return opener


def chat_turn(session: ags.BaseSession, n: int) -> None:
    """A two-message turn recorded with turn markers: ``u{n}``, ``a{n}``."""
    with session.turn() as turn:
        turn.user(f"u{n}")
        turn.assistant(f"a{n}")


def bare_turn(session: ags.BaseSession, n: int) -> None:
    """A two-message turn without turn markers: ``u{n}``, ``a{n}``."""
    session.append(ags.Event.new("user/message", ags.Message.user(f"u{n}")))
    session.append(ags.Event.new("assistant/message", ags.Message.assistant(f"a{n}")))


def markers(session: ags.BaseSession) -> list[Compaction]:
    return [
        data
        for event in session.read()
        if event.type == "session/compaction" and isinstance(data := event.payload(), Compaction)
    ]


@pytest.mark.parametrize("record", [chat_turn, bare_turn])
def test_cap_keeps_every_whole_turn_that_fits_at_each_prune(
    open_capped: Callable[[int], ags.BaseStore],
    record: Callable[[ags.BaseSession, int], None],
) -> None:
    # Regression: the second prune did not count the turns the first kept, and the history
    # fell from 4 messages to 2 at turn 3 although [u2, a2, u3, a3] fits.
    session = open_capped(4).get("s")
    for n in range(6):
        record(session, n)
        expected = [f"{kind}{m}" for m in range(max(0, n - 1), n + 1) for kind in "ua"]
        assert texts(session.messages()) == expected
    assert len(markers(session)) == 4  # a prune at each of turns 2..5, all kept whole turns
    assert texts(open_capped(4).get("s").messages()) == ["u4", "a4", "u5", "a5"]


def test_cap_on_bare_user_messages_keeps_the_latest_ones(
    open_capped: Callable[[int], ags.BaseStore],
) -> None:
    # Regression: without turn markers or replies, a cap of 3 kept 1 message instead of 3.
    session = open_capped(3).get("s")
    for n in range(7):
        session.append(ags.Event.new("user/message", ags.Message.user(f"u{n}")))
        assert texts(session.messages()) == [f"u{m}" for m in range(max(0, n - 2), n + 1)]


def test_cap_counts_a_bare_user_message_after_marked_turns_as_a_turn(
    open_capped: Callable[[int], ags.BaseStore],
) -> None:
    # Regression: once the log had a turn/start, a user message outside any turn was not a turn
    # start, so [u1, a1, u2] (turn 1 and the new bare turn) could not be told apart.
    session = open_capped(3).get("s")
    chat_turn(session, 0)
    bare_turn(session, 1)
    chat_turn(session, 2)
    assert texts(session.messages()) == ["u1", "a1", "u2", "a2"]
    bare_turn(session, 3)
    assert texts(session.messages()) == ["u2", "a2", "u3", "a3"]


def test_cap_keeps_a_turn_longer_than_the_cap_whole(
    open_capped: Callable[[int], ags.BaseStore],
) -> None:
    session = open_capped(3).get("s")
    chat_turn(session, 0)
    with session.turn() as turn:
        turn.user("u1")  # [u0, a0, u1] fits
        with turn.step() as step:
            step.assistant(tool_calls=[ags.ToolCall("c1", "read")])
            step.tool_result("c1", "read", "r1")
        turn.user("u1'")  # the turn is 4 messages: it stays whole, turn 0 goes
        assert texts(session.messages()) == ["u1", "calls", "r1", "u1'"]
        turn.assistant("a1")
    assert texts(session.messages()) == ["u1", "calls", "r1", "u1'", "a1"]
    assert provider_errors(session.messages()) == []


def test_cap_does_not_cut_at_a_user_message_of_a_turn_that_began_before_the_prune(
    open_capped: Callable[[int], ags.BaseStore],
) -> None:
    # The prune at u1 lands inside turn 1; once its turn/end is in the log, u1' is known to
    # belong to it, so the prune at u2 does not keep [u1', a1', u2].
    session = open_capped(3).get("s")
    bare_turn(session, 0)
    session.append(ags.Event.new("assistant/message", ags.Message.assistant("a0'")))
    with session.turn() as turn:
        turn.user("u1")
        assert texts(session.messages()) == ["u1"]
        turn.assistant("a1")
        turn.user("u1'")
        turn.assistant("a1'")
    chat_turn(session, 2)
    assert texts(session.messages()) == ["u2", "a2"]


def test_second_compaction_counts_the_turns_the_first_kept(store: ags.BaseStore) -> None:
    # Regression: with 3 turns visible (2 kept by the first compaction, 1 new), keep_turns=2
    # returned None.
    session = store.get("c")
    for n in range(4):
        chat_turn(session, n)
    assert session.compact("s1", keep_turns=2) is not None
    assert texts(session.messages()) == ["s1", "u2", "a2", "u3", "a3"]
    chat_turn(session, 4)
    assert session.compact("s2", keep_turns=2) is not None
    assert texts(session.messages()) == ["s2", "u3", "a3", "u4", "a4"]
    assert provider_errors(session.messages()) == []


def test_keep_turns_counts_turns_inside_a_retained_tail(store: ags.BaseStore) -> None:
    session = store.get("c")
    for n in range(5):
        run_turn(session, n)
    session.compact("s1", keep_turns=3)
    assert session.compact("s2", keep_turns=4) is None  # only 3 turns are visible
    session.compact("s2", keep_turns=1)
    assert texts(session.messages()) == ["s2", "question 4", "calls", "result 4", "answer 4"]
    [first, second] = markers(session)
    # A cut inside a retained tail records the tail's first_kept_seq: a lower bound.
    assert second.first_kept_seq == first.first_kept_seq
    assert second.retained_tail == first.retained_tail[-4:]


def test_compaction_after_a_prune(open_capped: Callable[[int], ags.BaseStore]) -> None:
    session = open_capped(4).get("s")
    for n in range(4):
        chat_turn(session, n)
    assert texts(session.messages()) == ["u2", "a2", "u3", "a3"]  # kept by a prune
    assert session.compact("s", keep_turns=3) is None  # two turns are visible
    assert session.compact("s", keep_turns=1) is not None
    assert texts(session.messages()) == ["s", "u3", "a3"]


def test_prune_after_a_compaction_carries_the_summary_and_counts_it(
    open_capped: Callable[[int], ags.BaseStore],
) -> None:
    session = open_capped(5).get("s")
    for n in range(2):
        chat_turn(session, n)
    session.compact("s", keep_turns=1)
    assert texts(session.messages()) == ["s", "u1", "a1"]
    chat_turn(session, 2)  # [s, u1, a1, u2]: fits
    assert texts(session.messages()) == ["s", "u1", "a1", "u2", "a2"]
    chat_turn(session, 3)  # [s, u1, a1, u2, a2, u3] is 6: turn 1 goes, the summary stays
    assert texts(session.messages()) == ["s", "u2", "a2", "u3", "a3"]
    prune = markers(session)[-1]
    assert prune.kind == "prune"
    assert prune.summary == ags.Message.user("s")
    assert texts(open_capped(5).get("s").messages()) == ["s", "u2", "a2", "u3", "a3"]
    # A second compaction summarises again, counting the turns the prune kept.
    session.compact("s2", keep_turns=1)
    assert texts(session.messages()) == ["s2", "u3", "a3"]


def test_prune_with_a_summary_and_a_cap_of_one_keeps_the_latest_turn() -> None:
    session = ags.open_store("memory:", max_messages=1).get("s")
    chat_turn(session, 0)
    session.compact("s", keep_turns=0)
    chat_turn(session, 1)
    chat_turn(session, 2)
    assert texts(session.messages()) == ["s", "u2", "a2"]


def test_compact_with_an_explicit_first_kept_seq(store: ags.BaseStore) -> None:
    session = store.get("c")
    for n in range(4):
        chat_turn(session, n)
    starts = [e.seq for e in session.read() if e.type == "turn/start"]
    session.compact("s1", first_kept_seq=starts[1])
    assert texts(session.messages()) == ["s1", "u1", "a1", "u2", "a2", "u3", "a3"]
    assert markers(session)[-1].first_kept_seq == starts[1]
    # At or before the seq the retained messages start from: all of them stay, and the old
    # summary is replaced, not kept as a message.
    session.compact("s2", first_kept_seq=starts[0])
    assert texts(session.messages()) == ["s2", "u1", "a1", "u2", "a2", "u3", "a3"]
    # Among the retained messages: their seqs are not recorded, so it cannot be placed.
    with pytest.raises(ags.UsageError, match="retained"):
        session.compact("s3", first_kept_seq=starts[2])
    chat_turn(session, 4)
    new_start = session.read()[-4].seq
    assert session.read()[-4].type == "turn/start"
    # After the marker: only the new turn stays.
    session.compact("s3", first_kept_seq=new_start)
    assert texts(session.messages()) == ["s3", "u4", "a4"]


def test_prune_of_one_agent_leaves_the_others_history(store: ags.BaseStore) -> None:
    session = store.get("c")
    for n, agent in enumerate("abab"):
        run_turn(session, n, agent=agent)
    b_before = session.messages(agent="b")
    assert session.prune(4, agent="a") is not None
    assert texts(session.messages(agent="a")) == ["question 2", "calls", "result 2", "answer 2"]
    assert session.messages(agent="b") == b_before
    assert session.prune(4, agent="a") is None  # it fits now


def test_a_marker_naming_no_agent_keeps_each_agents_tail_under_its_own_filter() -> None:
    session = ags.open_store("memory:").get("agents")
    for agent in "aba":
        with session.turn(agent=agent) as turn:
            turn.user(f"q-{agent}")
            turn.assistant(f"r-{agent}")
    session.compact("summary", keep_turns=2)
    assert [m.text for m in session.messages(agent="b")] == ["summary", "q-b", "r-b"]
    assert [m.text for m in session.messages(agent="a")] == ["summary", "q-a", "r-a"]
    assert [m.text for m in session.messages(agent="nobody")] == ["summary"]
    assert [m.text for m in session.messages()] == ["summary", "q-b", "r-b", "q-a", "r-a"]
    # A second compaction keeps the agents of the messages the first one kept.
    with session.turn(agent="b") as turn:
        turn.user("q-b2")
    session.compact("summary 2", keep_turns=2)
    assert [m.text for m in session.messages(agent="b")] == ["summary 2", "q-b2"]
    assert [m.text for m in session.messages(agent="a")] == ["summary 2", "q-a", "r-a"]


def test_a_marker_written_before_retained_agents_passes_every_filter() -> None:
    session = ags.open_store("memory:").get("old")
    old_marker = {
        "summary": {"role": "user", "parts": [{"type": "text", "text": "s"}]},
        "firstKeptSeq": 1,
        "retainedTail": [{"role": "user", "parts": [{"type": "text", "text": "kept"}]}],
    }
    session.append(ags.Event.new("session/compaction", old_marker))
    assert [m.text for m in session.messages(agent="anyone")] == ["s", "kept"]


# ---------------------------------------------------------------------------------------------
# Compacting from inside a running turn keeps it.


def test_compact_keeping_no_turns_inside_a_running_turn_keeps_that_turn(
    store: ags.BaseStore,
) -> None:
    session = store.get("c")
    run_turn(session, 0)
    with session.turn(agent="coder") as turn:
        turn.user("question 1")
        with turn.step() as step:
            step.assistant(tool_calls=[ags.ToolCall("c1", "read")])
            step.tool_result("c1", "read", "result 1")
        assert session.compact("summary of 0", keep_turns=0) is not None
        assert texts(session.messages()) == ["summary of 0", "question 1", "calls", "result 1"]
        turn.assistant("answer 1")
    assert texts(session.messages())[-2:] == ["result 1", "answer 1"]
    same_log = session if store.url == "memory:" else ags.open_store(store.url).get("c")
    assert texts(same_log.messages()) == [
        "summary of 0",
        "question 1",
        "calls",
        "result 1",
        "answer 1",
    ]
    # Once the turn has ended, keep_turns=0 keeps none again.
    session.compact("summary of 0 and 1", keep_turns=0)
    assert texts(session.messages()) == ["summary of 0 and 1"]
    assert provider_errors(session.messages()) == []


def test_compact_up_to_the_last_message_inside_a_running_turn_keeps_that_turn(
    store: ags.BaseStore,
) -> None:
    session = store.get("c")
    run_turn(session, 0)
    with session.turn(agent="coder") as turn:
        turn.user("question 1")
        last = len(session.messages()) - 1
        assert session.compact("summary of 0", up_to_message=last) is not None
        assert texts(session.messages()) == ["summary of 0", "question 1"]


def test_compact_inside_the_only_running_turn_plans_nothing(store: ags.BaseStore) -> None:
    session = store.get("c")
    with session.turn(agent="coder") as turn:
        turn.user("question 0")
        latest = session.latest_seq
        assert session.compact("summary", keep_turns=0) is None
        assert session.latest_seq == latest
        assert texts(session.messages()) == ["question 0"]


def test_compact_in_a_running_turn_with_no_message_yet_keeps_none(store: ags.BaseStore) -> None:
    session = store.get("c")
    run_turn(session, 0)
    with session.turn(agent="coder"):
        session.compact("summary", keep_turns=0)
        assert texts(session.messages()) == ["summary"]
