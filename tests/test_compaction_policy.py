"""Compaction policies: ``open_store(..., compaction=CompactionPolicy(...))`` summarizes at the
end of a turn when the history is over its budget, records the summarizer's usage, reports a
failing summarizer without touching the history, and elides older long tool results in
``messages()``; token counting (the estimate, tiktoken, a counter of one's own)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentsession as ags
from agentsession.aio import open_async_store
from agentsession.compaction import (
    MEDIA_PART_TOKENS,
    MESSAGE_OVERHEAD_TOKENS,
    CompactionFailure,
    CompactionPolicy,
    default_token_counter,
    elide_tool_results,
    elision_stub,
    estimate_tokens,
    tiktoken_counter,
)
from agentsession.events import USAGE, Compaction, TurnEnd, TurnStart, Usage
from agentsession.validation import provider_errors

from .store_urls import store_url

SECRET = "the launch code is swordfish"


def run_turn(
    session: ags.BaseSession, n: int, *, result: str = "", agent: str = "coder"
) -> list[ags.Message]:
    """One turn with a tool exchange; returns the messages it recorded."""
    result = result or f"result {n}"
    with session.turn(agent=agent) as turn:
        turn.user(f"question {n}")
        with turn.step() as step:
            step.assistant(tool_calls=[ags.ToolCall(f"c{n}", "read", {"n": n})])
            step.tool_result(f"c{n}", "read", result)
        turn.assistant(f"answer {n}")
    return [
        ags.Message.user(f"question {n}"),
        ags.Message.assistant(tool_calls=[ags.ToolCall(f"c{n}", "read", {"n": n})]),
        ags.Message.tool(ags.ToolResult(f"c{n}", "read", result)),
        ags.Message.assistant(f"answer {n}"),
    ]


def texts(msgs: Sequence[ags.Message]) -> list[str]:
    return [m.text or ",".join(r.content for r in m.tool_results) or "calls" for m in msgs]


class Summarizer:
    """A summarizer that remembers what it was asked, returning a summary and a usage."""

    def __init__(self, usage: Usage | None = None) -> None:
        self.calls: list[list[ags.Message]] = []
        self.usage = usage
        self.threads: list[int] = []

    def __call__(self, messages: list[ags.Message]) -> Any:
        self.calls.append(messages)
        self.threads.append(threading.get_ident())
        summary = ags.Message.user(f"summary #{len(self.calls)} of {len(messages)}")
        return summary if self.usage is None else (summary, self.usage)


@pytest.fixture(params=["memory", "jsonl", "sqlite", "postgres", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from store_url(request.param, tmp_path)


@pytest.fixture(params=["jsonl", "sqlite", "postgres", "redis"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store two store objects share."""
    yield from store_url(request.param, tmp_path)


# -- the policy's settings ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"max_messages": 0, "summarize": Summarizer()},
        {"max_tokens": -1, "summarize": Summarizer()},
        {"max_tokens": True, "summarize": Summarizer()},
        {"keep_turns": -1},
        {"elide_tool_results_over": 0},
        {"max_messages": 5},  # a budget without a summarizer
        {"summarize": "not callable"},
        {"token_counter": 3},
        {"on_failure": 3},
    ],
)
def test_a_policy_refuses_bad_settings(options: dict[str, Any]) -> None:
    with pytest.raises(ags.UsageError):
        CompactionPolicy(**options)


def test_open_store_refuses_what_is_not_a_policy() -> None:
    with pytest.raises(ags.UsageError, match="CompactionPolicy"):
        ags.open_store("memory:", compaction={"max_messages": 4})


# -- compacting at the end of a turn ------------------------------------------------------------


def test_over_the_message_budget_a_turn_end_summarizes_all_but_the_kept_turns(url: str) -> None:
    summarize = Summarizer()
    policy = CompactionPolicy(max_messages=10, keep_turns=2, summarize=summarize)
    with ags.open_store(url, compaction=policy) as store:
        session = store.get("s")
        recorded = [run_turn(session, n) for n in range(2)]
        assert summarize.calls == []  # 8 messages fit
        recorded.append(run_turn(session, 2))  # 12: over
        assert len(summarize.calls) == 1
        assert texts(summarize.calls[0]) == texts(recorded[0])  # the first turn only
        history = session.messages()
        assert texts(history) == ["summary #1 of 4", *texts(recorded[1]), *texts(recorded[2])]
        marker = [e for e in session.read() if e.type == "session/compaction"]
        assert len(marker) == 1
        assert isinstance(marker[0].payload(), Compaction)
        recorded.append(run_turn(session, 3))  # summary + 3 turns = 13: over again
        assert len(summarize.calls) == 2
        # The summarizer gets the current summary first, then the turn it replaces.
        assert texts(summarize.calls[1]) == ["summary #1 of 4", *texts(recorded[1])]
        assert texts(session.messages()) == [
            "summary #2 of 5",
            *texts(recorded[2]),
            *texts(recorded[3]),
        ]
        # Nothing stored is deleted, and a session opened again derives the same history.
        assert sum(1 for e in session.read() if e.type == "user/message") == 4
    if url != "memory:":  # a memory store is gone with its object
        with ags.open_store(url) as store:
            assert texts(store.get("s").messages())[0] == "summary #2 of 5"


def test_a_token_budget_counts_with_the_policys_counter() -> None:
    asked: list[int] = []

    def counter(messages: Sequence[ags.Message]) -> int:
        asked.append(len(messages))
        return 10 * len(messages)

    summarize = Summarizer()
    policy = CompactionPolicy(
        max_tokens=100, keep_turns=1, summarize=summarize, token_counter=counter
    )
    store = ags.open_store("memory:", compaction=policy)
    session = store.get("t")
    recorded = [run_turn(session, n) for n in range(2)]
    assert summarize.calls == []  # 80 tokens
    run_turn(session, 2)  # 120 tokens: over
    assert len(summarize.calls) == 1
    assert texts(summarize.calls[0]) == texts(recorded[0] + recorded[1])
    marker = next(e.payload() for e in session.read() if e.type == "session/compaction")
    assert marker.tokens_before == 120
    # The count is a running one: the first turn's end counts its history, each later one
    # only the messages added since (4 a turn), until the marker rebuilds the history, which
    # is counted whole once (the summary, the kept turn and the new one: 9).
    run_turn(session, 3)
    assert asked == [4, 4, 4, 9]


def test_nothing_is_summarized_while_the_history_fits(url: str) -> None:
    summarize = Summarizer()
    policy = CompactionPolicy(max_messages=100, max_tokens=10_000, summarize=summarize)
    with ags.open_store(url, compaction=policy) as store:
        session = store.get("fits")
        for n in range(3):
            run_turn(session, n)
        assert summarize.calls == []
        assert not any(e.type == "session/compaction" for e in session.read())


def test_a_turn_that_raises_runs_no_policy() -> None:
    summarize = Summarizer()
    store = ags.open_store(
        "memory:", compaction=CompactionPolicy(max_messages=1, summarize=summarize)
    )
    session = store.get("x")
    run_turn(session, 0)
    calls = len(summarize.calls)

    def doomed() -> None:
        with session.turn() as turn:
            turn.user("doomed")
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        doomed()
    assert len(summarize.calls) == calls


def test_the_summarizers_usage_is_recorded_as_usage_events_of_the_turns_agent(url: str) -> None:
    usage = Usage(input_tokens=900, output_tokens=80, model="cheap-model", cost=0.002)
    policy = CompactionPolicy(max_messages=5, keep_turns=1, summarize=Summarizer(usage))
    with ags.open_store(url, compaction=policy) as store:
        session = store.get("u")
        run_turn(session, 0, agent="planner")
        run_turn(session, 1, agent="planner")
        usages = [e for e in session.read() if e.type == USAGE]
        assert len(usages) == 1
        event = usages[0]
        assert event.agent == "planner"
        assert event.meta["compaction"] == "summarize"
        got = event.payload()
        assert (got.input_tokens, got.output_tokens, got.model, got.cost) == (
            900,
            80,
            "cheap-model",
            0.002,
        )
        # After the marker: the usage is recorded once the marker is in.
        types_ = [e.type for e in session.read()]
        assert types_.index("session/compaction") < types_.index(USAGE)


def test_a_summarizer_may_return_a_list_of_usages() -> None:
    usages = [Usage(input_tokens=1, model="a"), Usage(input_tokens=2, model="b")]

    def summarize(messages: list[ags.Message]) -> Any:
        return ags.Message.user("s"), usages

    store = ags.open_store(
        "memory:", compaction=CompactionPolicy(max_messages=5, keep_turns=1, summarize=summarize)
    )
    session = store.get("l")
    run_turn(session, 0)
    run_turn(session, 1)
    got = [e.payload().model for e in session.read() if e.type == USAGE]
    assert got == ["a", "b"]


# -- failures -----------------------------------------------------------------------------------


def _raising(messages: list[ags.Message]) -> Any:
    raise ConnectionError(f"model down while reading {messages[0].text}: {SECRET}")


@pytest.mark.parametrize(
    ("summarize", "stage"),
    [
        (_raising, "summarize"),
        (lambda messages: f"a string {SECRET}", "result"),
        (lambda messages: None, "result"),
        (lambda messages: (ags.Message.user("s"),), "result"),
        (lambda messages: (ags.Message.user("s"), "not a usage"), "result"),
        (lambda messages: ags.Message.user(""), "result"),
        (lambda messages: ags.Message(role="user"), "result"),
        (
            lambda messages: ags.Message.assistant("s", tool_calls=[ags.ToolCall("x", "t")]),
            "result",
        ),
    ],
)
def test_a_failing_summarizer_leaves_the_history_and_is_reported(
    url: str,
    summarize: Callable[[list[ags.Message]], Any],
    stage: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    failures: list[CompactionFailure] = []
    policy = CompactionPolicy(
        max_messages=5, keep_turns=1, summarize=summarize, on_failure=failures.append
    )
    with ags.open_store(url, compaction=policy) as store:
        session = store.get("f")
        run_turn(session, 0, result=SECRET)
        events = len(session.read())
        before = session.messages()
        with caplog.at_level(logging.WARNING, logger="agentsession.compaction"):
            run_turn(session, 1)  # over budget: the summarizer fails, the turn completes
        stored = session.read()
        assert stored[-1].type == "turn/end"
        assert len(stored) == 2 * events  # the turn's events, nothing else
        assert not any(e.type in ("session/compaction", USAGE) for e in stored)
        assert texts(session.messages())[: len(before)] == texts(before)
        assert [(f.session_id, f.stage) for f in failures] == [("f", stage)]
        assert isinstance(failures[0].error, (ConnectionError, TypeError))
        warnings = [r for r in caplog.records if r.name == "agentsession.compaction"]
        assert len(warnings) == 1
        assert "'f'" in warnings[0].getMessage()
        # No message content in the log: neither the history nor the exception's text.
        for record in caplog.records:
            assert "swordfish" not in record.getMessage()
            assert "question" not in record.getMessage()


def test_a_raising_on_failure_is_logged_and_the_turn_still_completes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def on_failure(failure: CompactionFailure) -> None:
        raise RuntimeError("callback broke")

    policy = CompactionPolicy(
        max_messages=1, keep_turns=0, summarize=_raising, on_failure=on_failure
    )
    session = ags.open_store("memory:", compaction=policy).get("cb")
    with caplog.at_level(logging.WARNING, logger="agentsession.compaction"):
        run_turn(session, 0)
    assert session.read()[-1].type == "turn/end"
    assert any("on_failure" in r.getMessage() for r in caplog.records)


def test_a_coroutine_summarizer_on_the_sync_store_is_a_reported_failure() -> None:
    async def summarize(messages: list[ags.Message]) -> ags.Message:
        return ags.Message.user("never")

    failures: list[CompactionFailure] = []
    policy = CompactionPolicy(
        max_messages=1, keep_turns=0, summarize=summarize, on_failure=failures.append
    )
    session = ags.open_store("memory:", compaction=policy).get("co")
    run_turn(session, 0)
    assert [f.stage for f in failures] == ["summarize"]
    assert "async store" in str(failures[0].error)


# -- other writers ------------------------------------------------------------------------------


def test_a_turn_appended_while_summarizing_is_kept_and_the_marker_lands(shared_url: str) -> None:
    """Another process's turn (a second store object) lands while the summarizer runs: the cut
    stays where it was planned, the new turn stays verbatim after the summary."""
    other = ags.open_store(shared_url)
    concurrent: list[list[ags.Message]] = []

    def summarize(messages: list[ags.Message]) -> ags.Message:
        if not concurrent:
            concurrent.append(run_turn(other.get("c"), 99))
        return ags.Message.user(f"summary of {len(messages)}")

    policy = CompactionPolicy(max_messages=10, keep_turns=2, summarize=summarize)
    try:
        with ags.open_store(shared_url, compaction=policy) as store:
            session = store.get("c")
            recorded = [run_turn(session, n) for n in range(3)]
            history = session.messages()
            assert texts(history) == [
                "summary of 4",
                *texts(recorded[1]),
                *texts(recorded[2]),
                *texts(concurrent[0]),
            ]
            assert not provider_errors(history)
            assert sum(1 for e in session.read() if e.type == "session/compaction") == 1
    finally:
        other.close()


def test_a_compaction_made_while_summarizing_wins_and_ours_is_dropped(shared_url: str) -> None:
    other = ags.open_store(shared_url)
    failures: list[CompactionFailure] = []

    def summarize(messages: list[ags.Message]) -> ags.Message:
        other.get("w").compact(ags.Message.user("theirs"), keep_turns=1)
        return ags.Message.user("ours")

    policy = CompactionPolicy(
        max_messages=10, keep_turns=2, summarize=summarize, on_failure=failures.append
    )
    try:
        with ags.open_store(shared_url, compaction=policy) as store:
            session = store.get("w")
            recorded = [run_turn(session, n) for n in range(3)]
            assert texts(session.messages()) == ["theirs", *texts(recorded[2])]
            assert sum(1 for e in session.read() if e.type == "session/compaction") == 1
            assert failures == []  # superseded is not a failure
    finally:
        other.close()


def test_the_summarizer_runs_without_the_session_lock() -> None:
    """Another thread appends to the same session object while the summarizer runs."""
    store = ags.open_store("memory:")
    session_box: list[ags.BaseSession] = []
    done = threading.Event()

    def summarize(messages: list[ags.Message]) -> ags.Message:
        def write() -> None:
            session_box[0].append(ags.Event.new("test/note", {"n": 1}))
            done.set()

        thread = threading.Thread(target=write)
        thread.start()
        thread.join(timeout=30)
        assert done.is_set()
        return ags.Message.user("summary")

    store.compaction = CompactionPolicy(max_messages=5, keep_turns=1, summarize=summarize)
    session = store.get("lk")
    session_box.append(session)
    run_turn(session, 0)
    last = run_turn(session, 1)
    assert texts(session.messages()) == ["summary", *texts(last)]


# -- eliding tool results -----------------------------------------------------------------------


def test_older_long_tool_results_are_elided_in_messages_only(url: str) -> None:
    policy = CompactionPolicy(elide_tool_results_over=100)
    big = "x" * 12_345
    with ags.open_store(url, compaction=policy) as store:
        session = store.get("e")
        run_turn(session, 0, result=big)
        run_turn(session, 1, result="short")
        history = session.messages()
        # The latest turn is whole while it is the latest.
        run_turn_latest = texts(history)
        assert run_turn_latest[2] == elision_stub(12_345)
        assert elision_stub(12_345) == "[tool result elided: 12,345 characters]"
        assert run_turn_latest[6] == "short"
        assert not provider_errors(history)
        assert history[2].tool_results[0].call_id == "c0"  # still paired with its call
        # Storage, read() and entries() are untouched.
        stored = [e.payload() for e in session.read() if e.type == "tool/result"]
        assert stored[0].content == big
        assert session.entries()[2].message.tool_results[0].content == big
        run_turn(session, 2, result=big)
        assert texts(session.messages())[10] == big  # the latest turn's own result


def test_elision_keeps_the_latest_turn_and_short_results() -> None:
    long_result = ags.Message.tool(ags.ToolResult("c1", "t", "y" * 50))
    short_result = ags.Message.tool(ags.ToolResult("c2", "t", "ok"))
    messages = [ags.Message.user("q"), long_result, short_result, long_result]
    out = elide_tool_results(messages, 10, before=3)
    assert out[1].tool_results[0].content == elision_stub(50)
    assert out[2] is short_result
    assert out[3] is long_result
    assert messages[1] is long_result  # the input is not changed


def test_the_async_store_elides_too() -> None:
    async def main() -> list[str]:
        async with open_async_store(
            "memory:", compaction=CompactionPolicy(elide_tool_results_over=3)
        ) as store:
            session = await store.get("ae")
            run_turn(session.sync, 0, result="long result")
            run_turn(session.sync, 1)
            return texts(await session.messages())

    assert asyncio.run(main())[2] == elision_stub(11)


# -- counting tokens ----------------------------------------------------------------------------


def test_the_estimate_is_characters_over_four_plus_an_overhead_per_message() -> None:
    assert estimate_tokens([]) == 0
    assert estimate_tokens([ags.Message.user("abcd")]) == 1 + MESSAGE_OVERHEAD_TOKENS
    assert estimate_tokens([ags.Message.user("abcde")]) == 2 + MESSAGE_OVERHEAD_TOKENS
    pair = [ags.Message.user("a" * 400), ags.Message.assistant("b" * 40)]
    assert estimate_tokens(pair) == 100 + 10 + 2 * MESSAGE_OVERHEAD_TOKENS
    image = ags.Message(role="user", parts=[ags.ImagePart(url="https://example.com/i.png")])
    assert estimate_tokens([image]) == MEDIA_PART_TOKENS + MESSAGE_OVERHEAD_TOKENS
    call = ags.Message.assistant(tool_calls=[ags.ToolCall("c", "read", {"path": "/a"})])
    assert estimate_tokens([call]) > MESSAGE_OVERHEAD_TOKENS


def test_without_tiktoken_the_default_counter_is_the_estimate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # import raises ImportError
    assert default_token_counter() is estimate_tokens
    with pytest.raises(ImportError):
        tiktoken_counter()


def test_with_tiktoken_installed_the_default_counter_uses_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """tiktoken is not a dependency of the test environment: a stand-in module with its API
    (``get_encoding(name).encode(text, disallowed_special=())``) is put in its place."""
    asked: list[str] = []

    class Encoding:
        def encode(self, text: str, *, disallowed_special: Any = "all") -> list[int]:
            assert disallowed_special == ()
            return list(range(len(text.split())))

    def get_encoding(name: str) -> Encoding:
        asked.append(name)
        return Encoding()

    fake = types.ModuleType("tiktoken")
    fake.get_encoding = get_encoding  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tiktoken", fake)
    counter = default_token_counter()
    assert counter is not estimate_tokens
    assert asked == ["o200k_base"]
    assert counter([ags.Message.user("one two three")]) == 3 + MESSAGE_OVERHEAD_TOKENS
    policy = CompactionPolicy(max_tokens=10, summarize=Summarizer())
    assert policy.count([ags.Message.user("a b")]) == 2 + MESSAGE_OVERHEAD_TOKENS


def test_a_tiktoken_whose_encoding_cannot_load_falls_back_to_the_estimate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def get_encoding(name: str) -> Any:
        raise OSError("no network to fetch the encoding")

    fake = types.ModuleType("tiktoken")
    fake.get_encoding = get_encoding  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tiktoken", fake)
    assert default_token_counter() is estimate_tokens


def test_the_budget_counts_older_tool_results_as_elided() -> None:
    summarize = Summarizer()
    policy = CompactionPolicy(
        max_tokens=200,
        elide_tool_results_over=20,
        summarize=summarize,
        token_counter=estimate_tokens,
    )
    session = ags.open_store("memory:", compaction=policy).get("el")
    for n in range(3):
        run_turn(session, n, result="z" * 5_000)  # 1,250 tokens each, were it not elided
    assert summarize.calls == []


# -- the async store ----------------------------------------------------------------------------


def test_the_async_store_awaits_a_coroutine_summarizer_on_its_loop(url: str) -> None:
    async def main() -> None:
        loop_thread = threading.get_ident()
        seen: list[int] = []

        async def summarize(messages: list[ags.Message]) -> Any:
            seen.append(threading.get_ident())
            await asyncio.sleep(0)
            return ags.Message.user(f"async summary of {len(messages)}"), Usage(
                input_tokens=5, model="m"
            )

        policy = CompactionPolicy(max_messages=3, keep_turns=1, summarize=summarize)
        async with open_async_store(url, compaction=policy) as store:
            session = await store.get("as")
            for n in range(2):
                async with session.turn(agent="bot") as turn:
                    await turn.user(f"question {n}")
                    await turn.assistant(f"answer {n}")
            assert seen == [loop_thread]
            history = await session.messages()
            assert texts(history) == ["async summary of 2", "question 1", "answer 1"]
            usages = [e for e in await session.read() if e.type == USAGE]
            assert [(e.agent, e.payload().model) for e in usages] == [("bot", "m")]

    asyncio.run(main())


def test_the_async_store_runs_a_plain_summarizer_in_a_worker_thread() -> None:
    async def main() -> None:
        summarize = Summarizer()
        policy = CompactionPolicy(max_messages=3, keep_turns=1, summarize=summarize)
        async with open_async_store("memory:", compaction=policy) as store:
            session = await store.get("th")
            for n in range(2):
                async with session.turn() as turn:
                    await turn.user(f"q{n}")
                    await turn.assistant(f"a{n}")
            assert len(summarize.calls) == 1
            assert summarize.threads[0] != threading.get_ident()
            assert texts(await session.messages()) == ["summary #1 of 2", "q1", "a1"]

    asyncio.run(main())


def test_a_failing_async_summarizer_is_reported_and_the_turn_completes() -> None:
    async def main() -> list[CompactionFailure]:
        failures: list[CompactionFailure] = []

        async def summarize(messages: list[ags.Message]) -> ags.Message:
            raise TimeoutError(SECRET)

        policy = CompactionPolicy(
            max_messages=1, keep_turns=0, summarize=summarize, on_failure=failures.append
        )
        async with open_async_store("memory:", compaction=policy) as store:
            session = await store.get("af")
            async with session.turn() as turn:
                await turn.user("q")
                await turn.assistant("a")
            events = await session.read()
            assert events[-1].type == "turn/end"
            assert not any(e.type == "session/compaction" for e in events)
        return failures

    assert [f.stage for f in asyncio.run(main())] == ["summarize"]


def test_a_sync_turn_on_the_sync_side_of_an_async_store_runs_the_policy_itself() -> None:
    summarize = Summarizer()

    async def main() -> None:
        policy = CompactionPolicy(max_messages=5, keep_turns=1, summarize=summarize)
        async with open_async_store("memory:", compaction=policy) as store:
            session = await store.get("ss")
            run_turn(session.sync, 0)
            run_turn(session.sync, 1)

    asyncio.run(main())
    assert len(summarize.calls) == 1


# -- the property -------------------------------------------------------------------------------

turn_shapes = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=2),  # tool exchanges in the turn
        st.integers(min_value=1, max_value=300),  # size of each result
        st.booleans(),  # whether the summarizer fails at this turn's end
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shapes=turn_shapes,
    keep_turns=st.integers(min_value=1, max_value=3),
    max_messages=st.integers(min_value=2, max_value=12),
    elide=st.one_of(st.none(), st.integers(min_value=1, max_value=200)),
)
def test_after_any_turns_the_history_is_valid_and_ends_with_the_latest_turn(
    shapes: list[tuple[int, int, bool]], keep_turns: int, max_messages: int, elide: int | None
) -> None:
    failing = [False]

    def summarize(messages: list[ags.Message]) -> ags.Message:
        if failing[0]:
            raise RuntimeError("down")
        assert not provider_errors(messages)
        return ags.Message.user(f"summary of {len(messages)}")

    policy = CompactionPolicy(
        max_messages=max_messages,
        keep_turns=keep_turns,
        summarize=summarize,
        elide_tool_results_over=elide,
        on_failure=lambda failure: None,
    )
    session = ags.open_store("memory:", compaction=policy).get("p")
    for n, (exchanges, size, fails) in enumerate(shapes):
        failing[0] = fails
        latest: list[ags.Message] = []
        with session.turn() as turn:
            turn.user(f"q{n}")
            latest.append(ags.Message.user(f"q{n}"))
            for k in range(exchanges):
                call = ags.ToolCall(f"c{n}-{k}", "t", {})
                turn.assistant(tool_calls=[call])
                turn.tool_result(call.id, "t", "r" * size)
                latest.append(ags.Message.assistant(tool_calls=[call]))
                latest.append(ags.Message.tool(ags.ToolResult(call.id, "t", "r" * size)))
            turn.assistant(f"a{n}")
            latest.append(ags.Message.assistant(f"a{n}"))
        history = session.messages()
        assert not provider_errors(history)
        assert history[-len(latest) :] == latest
    assert sum(1 for e in session.read() if e.type == "user/message") == len(shapes)


# -- processes ----------------------------------------------------------------------------------

SRC = Path(__file__).resolve().parent.parent / "src"

_KILLED_CHILD = """
import sys, time
from pathlib import Path
import agentsession as ags
from agentsession.compaction import CompactionPolicy

ready = Path(sys.argv[2])

def summarize(messages):
    ready.write_text("summarizing")
    time.sleep(600)  # killed here

store = ags.open_store(sys.argv[1], compaction=CompactionPolicy(
    max_messages=3, keep_turns=1, summarize=summarize))
session = store.get("k")
for n in range(2):
    with session.turn() as turn:
        turn.user(f"question {n}")
        turn.assistant(f"answer {n}")
"""


def _python(code: str, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_a_process_killed_while_summarizing_leaves_the_history_whole(
    backend: str, tmp_path: Path
) -> None:
    url = next(store_url(backend, tmp_path))
    ready = tmp_path / "ready"
    child = _python(_KILLED_CHILD, url, str(ready))
    try:
        for _ in range(600):
            if ready.exists() or child.poll() is not None:
                break
            time.sleep(0.05)
        assert ready.exists(), child.stderr.read().decode() if child.stderr else ""
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    summarize = Summarizer()
    with ags.open_store(
        url, compaction=CompactionPolicy(max_messages=3, keep_turns=1, summarize=summarize)
    ) as store:
        session = store.get("k")
        stored = session.read()
        assert [e.type for e in stored].count("turn/end") == 2
        assert stored[-1].type == "turn/end"
        assert not any(e.type == "session/compaction" for e in stored)
        assert texts(session.messages()) == ["question 0", "answer 0", "question 1", "answer 1"]
        with session.turn() as turn:  # the next turn's end compacts
            turn.user("question 2")
            turn.assistant("answer 2")
        assert texts(session.messages()) == ["summary #1 of 4", "question 2", "answer 2"]


_WRITER = """
import sys, time
import agentsession as ags
from agentsession.compaction import CompactionPolicy

def summarize(messages):
    time.sleep(0.02)  # other writers get in meanwhile
    asked = [m.text for m in messages if m.role == "user"]
    return ags.Message.user("S(" + " | ".join(asked) + ")")

name, turns, with_policy = sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
policy = CompactionPolicy(max_messages=8, keep_turns=2, summarize=summarize)
store = ags.open_store(sys.argv[1], compaction=policy if with_policy else None)
session = store.get("shared")
for n in range(turns):
    with session.turn(agent=name) as turn:
        turn.user(f"{name}-q{n}")
        turn.assistant(tool_calls=[ags.ToolCall(f"{name}-c{n}", "t", {})])
        turn.tool_result(f"{name}-c{n}", "t", "r")
        turn.assistant(f"{name}-a{n}")
store.close()
"""


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_writers_in_several_processes_lose_no_question(backend: str, tmp_path: Path) -> None:
    """Three processes record turns into one session at once, two of them with a policy whose
    summary names every question it replaces: every question stays in the final history,
    verbatim or inside a summary, and the history is provider-valid."""
    url = next(store_url(backend, tmp_path))
    ags.open_store(url).close()  # the store exists before its writers race to make it
    turns = 12
    procs = [
        _python(_WRITER, url, name, str(turns), flag)
        for name, flag in (("a", "1"), ("b", "1"), ("c", "0"))
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()
    with ags.open_store(url) as store:
        session = store.get("shared")
        history = session.messages()
        assert not provider_errors(history)
        text = "\n".join(m.text for m in history)
        missing = [
            f"{name}-q{n}" for name in "abc" for n in range(turns) if f"{name}-q{n}" not in text
        ]
        assert missing == []
        assert any(e.type == "session/compaction" for e in session.read())


def test_a_turn_another_task_records_while_an_async_summarizer_waits_is_kept() -> None:
    async def main() -> None:
        release = asyncio.Event()

        async def summarize(messages: list[ags.Message]) -> ags.Message:
            await release.wait()  # the other task records a whole turn meanwhile
            return ags.Message.user(f"summary of {len(messages)}")

        policy = CompactionPolicy(max_messages=3, keep_turns=1, summarize=summarize)
        async with open_async_store("memory:", compaction=policy) as store:
            session = await store.get("at")

            async def turn(n: int) -> None:
                async with session.turn() as t:
                    await t.user(f"q{n}")
                    await t.assistant(f"a{n}")

            await turn(0)
            first = asyncio.create_task(turn(1))  # over budget: summarizes after its turn
            while not any(e.type == "turn/end" for e in (await session.read())[4:]):
                await asyncio.sleep(0.001)
            # Another writer's whole turn, stored while the summarizer waits.
            await session.append_many(
                [
                    ags.Event.new("turn/start", TurnStart()),
                    ags.Event.new("user/message", ags.Message.user("q2")),
                    ags.Event.new("assistant/message", ags.Message.assistant("a2")),
                    ags.Event.new("turn/end", TurnEnd(steps=0)),
                ]
            )
            release.set()
            await first
            history = await session.messages()
            assert texts(history) == ["summary of 2", "q1", "a1", "q2", "a2"]

    asyncio.run(main())


def test_an_encrypted_store_compacts_by_its_policy(tmp_path: Path) -> None:
    summarize = Summarizer(Usage(input_tokens=3, model="m"))
    policy = CompactionPolicy(max_messages=5, keep_turns=1, summarize=summarize)
    with ags.open_store(
        tmp_path / "sealed", passphrase="correct horse", compaction=policy
    ) as store:
        session = store.get("enc")
        run_turn(session, 0, result=SECRET)
        last = run_turn(session, 1)
        assert texts(session.messages()) == ["summary #1 of 4", *texts(last)]
    raw = b"".join(p.read_bytes() for p in (tmp_path / "sealed").rglob("*.jsonl"))
    assert b"swordfish" not in raw and b"summary #1" not in raw
    with ags.open_store(tmp_path / "sealed", passphrase="correct horse") as store:
        assert texts(store.get("enc").messages())[0] == "summary #1 of 4"
