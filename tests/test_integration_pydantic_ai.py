"""``agentsession.integrations.pydantic_ai``: a Pydantic AI history on the event log.

A real ``pydantic_ai.Agent`` over a ``FunctionModel`` for five turns with a tool, on every
backend, read back by a fresh store object; a run killed (SIGKILL, in a subprocess) inside a
tool and resumed from the store; saves that never double; the typed mirror; compaction and
rewind honoured by ``load()``; the async API; round trips of generated ``ModelMessage`` lists
(hypothesis), equal under ``ModelMessagesTypeAdapter``; the example.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

pytest.importorskip("pydantic_ai")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.messages import (
    AudioUrl,
    BinaryContent,
    CachePoint,
    CompactionPart,
    DocumentUrl,
    FilePart,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    RetryFeedbackPart,
    RetryInfo,
    SystemPromptPart,
    TextContent,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RequestUsage

from agentsession import BaseStore, open_store
from agentsession.aio import open_async_store
from agentsession.derive import interrupted_tool_result
from agentsession.errors import UsageError
from agentsession.events import ASSISTANT_MESSAGE, TOOL_RESULT, USAGE, USER_MESSAGE
from agentsession.integrations.pydantic_ai import (
    MESSAGE,
    META_KEY,
    MessageStore,
    events_for,
    history_from_events,
)

from .store_urls import store_url

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ["memory", "jsonl", "sqlite", "postgres"]
SHARED = ["jsonl", "sqlite", "postgres"]
"""The backends whose data another store object, or another process, can open."""


def dump(messages: list[ModelMessage]) -> bytes:
    return ModelMessagesTypeAdapter.dump_json(messages)


# ---------------------------------------------------------------------------------------------
# A scripted agent: each prompt "add A B" calls the tool, then answers with its result.


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Calls ``add`` for a new prompt ``add A B``; answers with the tool's result after it."""
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    for part in last.parts:
        if isinstance(part, ToolReturnPart):
            return ModelResponse(
                parts=[TextPart(f"the sum is {part.content}")],
                usage=RequestUsage(input_tokens=20, output_tokens=5),
            )
        if isinstance(part, UserPromptPart) and isinstance(part.content, str):
            _, a, b = part.content.split()
            return ModelResponse(
                parts=[
                    ThinkingPart("the user wants a sum"),
                    ToolCallPart("add", {"a": int(a), "b": int(b)}),
                ],
                usage=RequestUsage(input_tokens=10, output_tokens=3),
            )
    raise AssertionError(f"unexpected request {last!r}")


def make_agent(kill_at: tuple[int, int] | None = None) -> Agent[None, str]:
    """The agent; its tool kills the process (SIGKILL) when called with ``kill_at``."""
    agent = Agent(FunctionModel(scripted), system_prompt="Add numbers with the tool.")

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        """Add two integers."""
        if (a, b) == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return a + b

    return agent


PROMPTS = [f"add {n} {n * 10}" for n in range(1, 6)]


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from store_url(request.param, tmp_path)


@pytest.fixture(params=SHARED)
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from store_url(request.param, tmp_path)


def test_five_turns_with_a_tool_are_read_back_by_a_new_store(url: str) -> None:
    agent = make_agent()
    store = open_store(url)
    history = MessageStore("chat", store=store)
    all_messages: list[ModelMessage] = []
    for prompt in PROMPTS:
        result = agent.run_sync(prompt, message_history=history.load())
        assert history.save(result) == 4  # prompt, call, return, answer
        all_messages = result.all_messages()
    assert history.load_json() == dump(all_messages)
    assert dump(history.load()) == dump(all_messages)
    answers = [m.role for m in history.log().messages()]
    assert answers == ["system"] + ["user", "assistant", "tool", "assistant"] * 5
    usage = [e.payload() for e in history.log().read() if e.type == USAGE]
    assert [(u.input_tokens, u.output_tokens) for u in usage] == [(10, 3), (20, 5)] * 5
    if url != "memory:":
        store.close()
        with MessageStore("chat", store=url) as reopened:
            assert reopened.load_json() == dump(all_messages)
    else:
        store.close()


def test_the_mirror_holds_each_part_as_a_typed_event() -> None:
    result = make_agent().run_sync("add 2 3")
    events = events_for(result.new_messages())
    kinds = [e.type for e in events]
    assert kinds == [
        USER_MESSAGE,  # the system prompt
        USER_MESSAGE,
        MESSAGE,
        ASSISTANT_MESSAGE,
        USAGE,
        MESSAGE,
        TOOL_RESULT,
        MESSAGE,
        ASSISTANT_MESSAGE,
        USAGE,
        MESSAGE,
    ]
    system, user = events[0].payload(), events[1].payload()
    assert (system.role, system.parts[0].text) == ("system", "Add numbers with the tool.")
    assert (user.role, user.parts[0].text) == ("user", "add 2 3")
    call = events[3].payload()
    assert call.parts[0].text == "the user wants a sum"  # the thinking part
    assert (call.tool_calls[0].name, call.tool_calls[0].arguments) == ("add", {"a": 2, "b": 3})
    answer = events[6].payload()
    assert (answer.call_id, answer.content, answer.is_error) == (
        call.tool_calls[0].id,
        "5",
        False,
    )
    # Every mirrored event names its message's event; the ids are the run's.
    message_ids = {e.id for e in events if e.type == MESSAGE}
    assert all(e.meta[META_KEY]["message"] in message_ids for e in events if e.type != MESSAGE)
    assert all(result.run_id in e.id for e in events)
    assert [e.id for e in events_for(result.new_messages())] == [e.id for e in events]
    stored = [msgspec.structs.replace(e, seq=n) for n, e in enumerate(events, 1)]
    assert dump(history_from_events(stored)) == dump(result.new_messages())


def test_a_retried_save_stores_nothing_twice(shared_url: str) -> None:
    result = make_agent().run_sync("add 1 2")
    with MessageStore("chat", store=shared_url) as first:
        assert first.save(result) == 4
        stored = len(first.log().read())
        assert first.save(result) == 0
        assert first.save_new(result.new_messages()[:2]) == 0
    # Another store object (another process would do the same) retries the save.
    with MessageStore("chat", store=shared_url) as second:
        assert second.save(result) == 0
        assert len(second.log().read()) == stored
        assert second.load_json() == dump(result.all_messages())


def test_saving_after_each_step_of_iter_stores_each_message_once() -> None:
    agent = make_agent()
    history = MessageStore("chat", store=open_store("memory:"))

    async def run() -> list[ModelMessage]:
        async with agent.iter("add 4 5", message_history=await history.aload()) as run:
            async for _ in run:
                await history.asave(run)
        assert run.result is not None
        await history.asave(run.result)
        return run.result.all_messages()

    all_messages = asyncio.run(run())
    assert history.load_json() == dump(all_messages)
    assert sum(1 for e in history.log().read() if e.type == MESSAGE) == 4


def test_a_run_saved_in_pieces_loses_and_doubles_nothing() -> None:
    agent = make_agent()
    first = agent.run_sync(PROMPTS[0])
    second = agent.run_sync(PROMPTS[1], message_history=first.all_messages())
    everything = second.all_messages()
    history = MessageStore("chat", store=open_store("memory:"))
    assert history.save_new(everything[:3]) == 3  # across the two runs' boundary as well
    assert history.save_new(everything[3:6]) == 3
    assert history.save_new(everything) == 2
    assert history.save(second) == 0
    assert history.load_json() == dump(everything)


def test_messages_without_a_run_id_are_keyed_by_their_json() -> None:
    request = ModelRequest(parts=[UserPromptPart("hi", timestamp=dt.datetime(2026, 1, 1))])
    history = MessageStore("chat", store=open_store("memory:"))
    assert history.save_new([request, request]) == 2  # two equal messages: both kept
    assert history.save_new([request, request]) == 0
    assert history.save_new([request], run_id="r1") == 1
    assert len(history.load()) == 3


# ---------------------------------------------------------------------------------------------
# Killed inside a tool, resumed.

KILLED_RUN = textwrap.dedent(
    """
    import asyncio, sys
    sys.path[:0] = [{root!r}, {src!r}]
    from tests.test_integration_pydantic_ai import make_agent, PROMPTS
    from agentsession.integrations.pydantic_ai import MessageStore

    agent = make_agent(kill_at=(3, 30))  # the third turn's tool call never returns

    async def main() -> None:
        history = MessageStore("chat", store={url!r})
        for prompt in PROMPTS[:3]:
            async with agent.iter(prompt, message_history=await history.aload()) as run:
                async for _ in run:
                    await history.asave(run)  # each step as it happens
            await history.asave(run.result)

    asyncio.run(main())
    """
)


def test_a_run_killed_in_a_tool_resumes_from_the_store(shared_url: str, tmp_path: Path) -> None:
    script = tmp_path / "killed.py"
    script.write_text(
        KILLED_RUN.format(root=str(ROOT), src=str(ROOT / "src"), url=shared_url),
        encoding="utf-8",
    )
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr

    history = MessageStore("chat", store=shared_url)
    try:
        loaded = history.load()
        # Two whole turns, then the third's prompt and the call that never got its return.
        assert len(loaded) == 1 + 4 + 4 + 1
        last = loaded[-1]
        assert isinstance(last, ModelResponse)
        [call] = [p for p in last.parts if isinstance(p, ToolCallPart)]
        assert call.args == {"a": 3, "b": 30}
        # agentsession's history closes the call with the interrupted stand-in.
        derived = history.log().messages()
        assert derived[-1].tool_results == [interrupted_tool_result(derived[-2].tool_calls[0])]

        # Resuming: Pydantic AI runs the pending call when given the history and no prompt.
        agent = make_agent()
        resumed = agent.run_sync(message_history=loaded)
        assert history.save(resumed) == 2  # the return and the answer
        assert resumed.output == "the sum is 33"
        for prompt in PROMPTS[3:]:
            result = agent.run_sync(prompt, message_history=history.load())
            history.save(result)
        final = history.load()
        assert dump(final) == dump(result.all_messages())
        prompts = [
            p.content
            for m in final
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, UserPromptPart)
        ]
        assert prompts == PROMPTS
        calls = [p.tool_call_id for m in final for p in m.parts if isinstance(p, ToolCallPart)]
        returns = [p.tool_call_id for m in final for p in m.parts if isinstance(p, ToolReturnPart)]
        assert calls == returns and len(calls) == 5  # each call answered once
        assert [m.role for m in history.log().messages()][-4:] == [
            "user",
            "assistant",
            "tool",
            "assistant",
        ]
    finally:
        history.close()


# ---------------------------------------------------------------------------------------------
# Compaction and rewind.


def test_a_compaction_is_honoured_by_load() -> None:
    agent = make_agent()
    history = MessageStore("chat", store=open_store("memory:"))
    for prompt in PROMPTS[:3]:
        history.save(agent.run_sync(prompt, message_history=history.load()))
    session = history.log()
    assert session.compact("The user added 1+10 and 2+20.", keep_turns=1) is not None
    loaded = history.load()
    first = loaded[0]
    assert isinstance(first, ModelRequest)
    assert [p.content for p in first.parts if isinstance(p, UserPromptPart)] == [
        "The user added 1+10 and 2+20."
    ]
    assert [p.content for p in loaded[1].parts if isinstance(p, UserPromptPart)] == ["add 3 30"]
    assert len(loaded) == 1 + 4
    # The agent runs on the compacted history (Pydantic AI merges the summary's request with
    # the next one in what it sends), and the next save continues it.
    result = agent.run_sync(PROMPTS[3], message_history=loaded)
    history.save(result)
    assert dump(history.load()) == dump([*loaded, *result.new_messages()])


def test_a_rewind_is_honoured_by_load() -> None:
    agent = make_agent()
    history = MessageStore("chat", store=open_store("memory:"))
    history.save(agent.run_sync(PROMPTS[0]))
    before, session = history.load_json(), history.log()
    first_turn_ends = session.latest_seq
    history.save(agent.run_sync(PROMPTS[1], message_history=history.load()))
    session.rewind(to_seq=first_turn_ends)
    assert history.load_json() == before
    # The next run continues from there.
    result = agent.run_sync(PROMPTS[2], message_history=history.load())
    history.save(result)
    assert history.load_json() == dump(result.all_messages())


def test_the_stores_history_cap_is_honoured_by_load(tmp_path: Path) -> None:
    agent = make_agent()
    store = open_store(tmp_path / "capped", max_messages=6)
    history = MessageStore("capped", store=store)
    for prompt in PROMPTS:
        result = agent.run_sync(prompt, message_history=history.load())
        history.save(result)
    loaded = history.load()
    # Whole turns only, the latest last: each turn is 4 messages (5 in the mirror's count
    # with the system prompt of the first), so the cap keeps the last turn.
    assert dump(loaded) == dump(result.new_messages())
    with MessageStore("capped", store=tmp_path / "capped") as reopened:
        assert reopened.load_json() == history.load_json()
    store.close()


# ---------------------------------------------------------------------------------------------
# The async API, the store argument, the mirror switch.


def test_the_async_api_runs_an_agent(url: str) -> None:
    async def main() -> None:
        store = await open_async_store(url)
        try:
            history = MessageStore("chat", store=store)
            agent = make_agent()
            for prompt in PROMPTS[:2]:
                result = await agent.run(prompt, message_history=await history.aload())
                assert await history.asave(result) == 4
            assert await history.aload_json() == dump(result.all_messages())
            assert await history.asave_new(result.new_messages()) == 0
            assert len(await (await history.alog()).messages()) == 9
            await history.aclose()
            with pytest.raises(UsageError):
                await history.aload()
        finally:
            await store.close()

    asyncio.run(main())


def test_a_streamed_run_of_the_test_model_is_saved() -> None:
    agent = Agent(TestModel())

    @agent.tool_plain
    def lookup(city: str) -> str:
        """Look a city up."""
        return f"{city}: sunny"

    history = MessageStore("chat", store=open_store("memory:"))

    async def main() -> list[ModelMessage]:
        async with agent.run_stream("Weather?", message_history=await history.aload()) as run:
            await run.get_output()
        assert await history.asave(run) == 4
        return run.all_messages()

    all_messages = asyncio.run(main())
    assert history.load_json() == dump(all_messages)
    roles = [m.role for m in history.log().messages()]
    assert roles == ["user", "assistant", "tool", "assistant"]


ASYNC_WITH_A_URL = textwrap.dedent(
    """
    import asyncio, sys
    sys.path[:0] = [{root!r}, {src!r}]
    from tests.test_integration_pydantic_ai import make_agent
    from agentsession.integrations.pydantic_ai import MessageStore

    agent = make_agent()

    async def main(close_async: bool) -> MessageStore:
        history = MessageStore("chat", store={url!r})
        result = await agent.run("add 2 2", message_history=await history.aload())
        await history.asave(result)
        if close_async:
            await history.aclose()
        return history

    asyncio.run(main(True))
    left_open = asyncio.run(main(False))
    left_open.close()  # outside the loop: its async parts are closed on a loop of their own
    with MessageStore("chat", store={url!r}) as reopened:
        print(len(reopened.load()))
    """
)


def test_a_store_opened_from_a_url_closes_cleanly_after_async_use(url: str, tmp_path: Path) -> None:
    script = tmp_path / "async_url.py"
    script.write_text(
        ASYNC_WITH_A_URL.format(root=str(ROOT), src=str(ROOT / "src"), url=url), encoding="utf-8"
    )
    proc = subprocess.run(
        [sys.executable, "-W", "error", str(script)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    # memory: each store object has its own data; the others read both runs back.
    assert proc.stdout.strip() == ("0" if url == "memory:" else "8")


@pytest.fixture(params=["jsonl", "sqlite"])
def file_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from store_url(request.param, tmp_path)


def test_an_encrypted_store_seals_the_messages(file_url: str, tmp_path: Path) -> None:
    secret = "add 4242 1717"
    store = open_store(file_url, passphrase="pw")
    history = MessageStore("chat", store=store)
    result = make_agent().run_sync(secret)
    history.save(result)
    store.close()
    stored = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert b"4242" not in stored and b"5959" not in stored
    with MessageStore("chat", store=open_store(file_url, passphrase="pw")) as reopened:
        assert reopened.load_json() == dump(result.all_messages())
        reopened.store.close()


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(UsageError):
        MessageStore("", store="memory:")
    with pytest.raises(UsageError):
        MessageStore("chat", store=42)  # type: ignore[arg-type]
    history = MessageStore("chat", store=open_store("memory:"))
    with pytest.raises(UsageError):
        history.save(["not a result"])
    with pytest.raises(UsageError):
        history.save_new([{"kind": "request"}])  # type: ignore[list-item]
    history.close()
    with pytest.raises(UsageError):
        history.load()


def test_without_the_mirror_only_the_messages_are_stored() -> None:
    store: BaseStore = open_store("memory:")
    history = MessageStore("chat", store=store, mirror_messages=False)
    result = make_agent().run_sync("add 1 1")
    history.save(result)
    assert {e.type for e in history.log().read()} == {MESSAGE}
    assert history.log().messages() == []
    assert history.load_json() == dump(result.all_messages())


# ---------------------------------------------------------------------------------------------
# Round trips of generated messages.

_text = st.text(max_size=20)
_times = st.datetimes(
    min_value=dt.datetime(2000, 1, 1),
    max_value=dt.datetime(2100, 1, 1),
    timezones=st.just(dt.timezone.utc),
)
_ids = st.text(alphabet="abcdef0123456789_", min_size=1, max_size=12)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=6,
)
_user_content = st.one_of(
    _text,
    st.lists(
        st.one_of(
            _text,
            st.builds(ImageUrl, url=st.just("https://example.com/a.png")),
            st.builds(BinaryContent, data=st.binary(max_size=16), media_type=st.just("image/png")),
            st.builds(
                BinaryContent, data=st.binary(max_size=16), media_type=st.just("application/pdf")
            ),
            st.builds(DocumentUrl, url=st.sampled_from(["https://x.org/a.pdf", "https://x.org/a"])),
            st.builds(AudioUrl, url=st.just("https://example.com/a.mp3")),
            st.builds(TextContent, content=_text),
            st.just(CachePoint()),
        ),
        max_size=3,
    ),
)
_request_parts = st.one_of(
    st.builds(SystemPromptPart, content=_text, timestamp=_times),
    st.builds(UserPromptPart, content=_user_content, timestamp=_times),
    st.builds(
        ToolReturnPart,
        tool_name=_ids,
        content=_json,
        tool_call_id=_ids,
        timestamp=_times,
        outcome=st.sampled_from(["success", "failed", "denied", "retried", "interrupted"]),
    ),
    st.builds(
        RetryFeedbackPart,
        content=_text,
        retry=st.builds(
            RetryInfo, cause=st.sampled_from(["validation_error", "no_output", "model_retry"])
        ),
        timestamp=_times,
    ),
)
_response_parts = st.one_of(
    st.builds(TextPart, content=_text),
    st.builds(ThinkingPart, content=_text, signature=st.none() | _ids),
    st.builds(
        ToolCallPart,
        tool_name=_ids,
        args=st.none() | st.dictionaries(_ids, _json, max_size=3) | st.just('{"a": 1}'),
        tool_call_id=_ids,
    ),
    st.builds(
        NativeToolCallPart,
        tool_name=st.just("web_search"),
        args=st.dictionaries(_ids, _json, max_size=2),
        tool_call_id=_ids,
        provider_name=st.just("openai"),
    ),
    st.builds(CompactionPart, content=st.none() | _text),
    st.builds(
        FilePart,
        content=st.builds(
            BinaryContent, data=st.binary(max_size=16), media_type=st.just("image/png")
        ),
    ),
)
_usage = st.builds(
    RequestUsage,
    input_tokens=st.integers(0, 10**6),
    output_tokens=st.integers(0, 10**6),
    cache_read_tokens=st.integers(0, 10**3),
)
_run_ids = st.none() | st.sampled_from(["run-a", "run-b"])
_messages = st.lists(
    st.one_of(
        st.builds(
            ModelRequest,
            parts=st.lists(_request_parts, min_size=1, max_size=3),
            timestamp=st.none() | _times,
            instructions=st.none() | _text,
            run_id=_run_ids,
        ),
        st.builds(
            ModelResponse,
            parts=st.lists(_response_parts, max_size=3),
            usage=_usage,
            model_name=st.none() | _ids,
            timestamp=_times,
            run_id=_run_ids,
        ),
    ),
    max_size=6,
)


@pytest.fixture(params=["memory", "jsonl", "sqlite"])
def quick_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from store_url(request.param, tmp_path)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(messages=_messages)
def test_generated_messages_round_trip(quick_url: str, messages: list[ModelMessage]) -> None:
    session_id = f"gen-{uuid.uuid4().hex}"
    store = open_store(quick_url)
    try:
        history = MessageStore(session_id, store=store)
        history.save_new(messages)
        history.save_new(messages)  # a retry changes nothing
        expected = dump(messages)
        assert history.load_json() == expected
        assert dump(history.load()) == expected
        history.log().messages()  # the mirror makes a history agentsession can derive
    finally:
        store.close()
    if quick_url != "memory:":
        with MessageStore(session_id, store=quick_url) as reopened:
            assert dump(reopened.load()) == expected


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(messages=_messages)
def test_generated_messages_round_trip_on_postgres(tmp_path: Path, messages: list[Any]) -> None:
    for url in store_url("postgres", tmp_path):
        with MessageStore("gen", store=url) as history:
            history.save_new(messages)
            assert dump(history.load()) == dump(messages)


# ---------------------------------------------------------------------------------------------
# The example.


def test_the_example_runs_without_a_warning(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-W",
            "error",
            str(ROOT / "examples" / "pydantic_ai_example.py"),
            str(tmp_path / "s"),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert "the sum is 33" in out.stdout
    assert out.stderr == ""
