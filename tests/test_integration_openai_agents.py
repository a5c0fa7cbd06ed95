"""``OpenAIAgentsSession``: the OpenAI Agents SDK's ``Session`` over every store.

The SDK's own session tests (``tests/memory/test_session.py``, ``test_session_limit.py`` and
the old ``tests/test_session.py`` of openai/openai-agents-python), ported to run against
``OpenAIAgentsSession`` on memory, JSONL, SQLite and PostgreSQL, with the SDK's ``Runner`` and
a scripted model where the SDK uses its ``FakeModel``; then what only this adapter has: the
log it writes, byte-exact round trips of every item shape, a differential test against the
SDK's ``SQLiteSession``, incremental reading, and two processes popping and adding.

Coroutines run with ``asyncio.run`` (a new event loop each time: the session is loop-agnostic).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.util
import json
import shutil
import textwrap
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar, TypeVar, cast

import pytest

pytest.importorskip("agents")

from agents import (
    Agent,
    RunConfig,
    Runner,
    SQLiteSession,
    TResponseInputItem,
    function_tool,
    set_tracing_disabled,
)
from agents.memory import Session, SessionSettings
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseFunctionWebSearch,
    ResponseOutputMessage,
    ResponseReasoningItem,
)
from openai.types.responses.response_function_web_search import ActionSearch
from openai.types.responses.response_reasoning_item import Summary

from agentsession import BaseStore, UsageError, open_store
from agentsession.aio import AsyncSession
from agentsession.derive import live_events
from agentsession.events import COMPACTION, SESSION_REWIND, USER_MESSAGE, Event, SessionRewind
from agentsession.integrations import openai_agents
from agentsession.integrations.openai_agents import (
    CLEAR,
    ITEM,
    POP,
    REWIND_KIND,
    OpenAIAgentsSession,
)
from agentsession.messages import Message, ThinkingPart
from agentsession.testing._processes import run_released
from agentsession.validation import provider_errors
from agentsession.view.transcript import transcript_rows

from .test_conformance_postgres import DSN, drop_schemas, new_schema_name, url_with_schema

set_tracing_disabled(True)  # no trace export (and no API key) in tests

T = TypeVar("T")

BACKENDS = [
    "memory",
    "jsonl",
    "sqlite",
    pytest.param(
        "postgresql",
        marks=[pytest.mark.postgres, pytest.mark.skipif(not DSN, reason="no PostgreSQL DSN")],
    ),
]
RUNNER_METHODS = ["run", "run_sync", "run_streamed"]


_loop: asyncio.AbstractEventLoop | None = None


def run(coro: Awaitable[T]) -> T:
    """Run ``coro`` on the test's event loop (see ``event_loop``), or a new one."""
    if _loop is None:
        return cast("T", asyncio.run(cast("Any", coro)))
    return _loop.run_until_complete(coro)


@pytest.fixture(autouse=True)
def event_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """One event loop per test: its sessions are closed on it (``aclose``, which also closes
    what a store opened on the loop, such as PostgreSQL's async pool) before it closes."""
    global _loop
    loop = _loop = asyncio.new_event_loop()
    try:
        yield loop
    finally:
        _loop = None
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


# ---------------------------------------------------------------------------------------------
# Stores and sessions


@pytest.fixture(params=BACKENDS)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | BaseStore]:
    """What ``store=`` gets: a URL or path (a memory store is passed as an object, so that
    tests in one process never share it)."""
    kind = request.param
    if kind == "memory":
        store = open_store("memory:")
        yield store
        store.close()
    elif kind == "jsonl":
        yield str(tmp_path / "store")
    elif kind == "sqlite":
        yield f"sqlite:///{tmp_path}/store.db"
    else:
        schema = new_schema_name()
        try:
            yield url_with_schema(schema)
        finally:
            drop_schemas([schema])


@pytest.fixture
def make_session(
    target: str | BaseStore, event_loop: asyncio.AbstractEventLoop
) -> Iterator[Callable[..., OpenAIAgentsSession]]:
    """``make_session(id, **options)`` on the test's store; every session is closed after."""
    made: list[OpenAIAgentsSession] = []

    async def first_use(session: OpenAIAgentsSession) -> None:
        # A store that opens something on the loop that first uses it natively (PostgreSQL's
        # async pool) should find the test's loop, not a thread's short-lived one.
        await (await session.log()).latest_seq()

    def make(session_id: str = "s", **options: Any) -> OpenAIAgentsSession:
        session = OpenAIAgentsSession(session_id, target, **options)
        if not made and not event_loop.is_running():
            event_loop.run_until_complete(first_use(session))
        made.append(session)
        return session

    yield make
    for session in made:
        event_loop.run_until_complete(session.aclose())


# ---------------------------------------------------------------------------------------------
# A scripted model (the SDK's tests use their FakeModel) and the runner helpers


def _load_example() -> Any:
    """``examples/openai_agents_example.py`` as a module (it is not a package)."""
    path = Path(__file__).parent.parent / "examples" / "openai_agents_example.py"
    spec = importlib.util.spec_from_file_location("openai_agents_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXAMPLE = _load_example()


class ScriptedModel(EXAMPLE.ScriptedModel):  # type: ignore[misc,name-defined]
    """The example's scripted model, scripted one call at a time."""

    def __init__(self) -> None:
        super().__init__([])

    def set_next_output(self, output: list[Any]) -> None:
        self.outputs.append(output)

    @property
    def last_input(self) -> list[dict[str, Any]]:
        return cast("list[dict[str, Any]]", self.inputs[-1])


def text_message(text: str, item_id: str = "msg_1") -> ResponseOutputMessage:
    return cast("ResponseOutputMessage", EXAMPLE.say(text, item_id))


def _run_sync(agent: Agent[Any], input_data: Any, **kwargs: Any) -> Any:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return Runner.run_sync(agent, input_data, **kwargs)
    finally:
        loop.close()


async def run_agent(method: str, agent: Agent[Any], input_data: Any, **kwargs: Any) -> Any:
    """Run ``agent`` with ``Runner.run``, ``Runner.run_sync`` (in a thread with its own loop)
    or ``Runner.run_streamed`` (consumed), as the SDK's tests do."""
    if method == "run":
        return await Runner.run(agent, input_data, **kwargs)
    if method == "run_sync":
        return await asyncio.to_thread(_run_sync, agent, input_data, **kwargs)
    result = Runner.run_streamed(agent, input_data, **kwargs)
    async for _event in result.stream_events():
        pass
    return result


def contents(items: list[TResponseInputItem]) -> list[Any]:
    return [cast("dict[str, Any]", item).get("content") for item in items]


def content(item: TResponseInputItem | None) -> Any:
    """The ``content`` of an item (None for no item)."""
    return None if item is None else cast("dict[str, Any]", item).get("content")


# ---------------------------------------------------------------------------------------------
# Ported: tests/memory/test_session.py


@pytest.mark.parametrize("method", RUNNER_METHODS)
def test_session_memory_basic_functionality(
    method: str, make_session: Callable[..., OpenAIAgentsSession]
) -> None:
    session = make_session("test_session_123")
    model = ScriptedModel()
    agent = Agent(name="test", model=model)

    async def scenario() -> None:
        model.set_next_output([text_message("San Francisco")])
        first = await run_agent(
            method, agent, "What city is the Golden Gate Bridge in?", session=session
        )
        assert first.final_output == "San Francisco"
        model.set_next_output([text_message("California")])
        second = await run_agent(method, agent, "What state is it in?", session=session)
        assert second.final_output == "California"
        assert len(model.last_input) > 1  # the first turn's items came along

    run(scenario())


@pytest.mark.parametrize("method", RUNNER_METHODS)
def test_session_memory_with_explicit_instance(
    method: str, make_session: Callable[..., OpenAIAgentsSession]
) -> None:
    session = make_session("test_session_456")
    model = ScriptedModel()
    agent = Agent(name="test", model=model)

    async def scenario() -> None:
        model.set_next_output([text_message("Hello")])
        first = await run_agent(method, agent, "Hi there", session=session)
        assert first.final_output == "Hello"
        model.set_next_output([text_message("I remember you said hi")])
        second = await run_agent(method, agent, "Do you remember what I said?", session=session)
        assert second.final_output == "I remember you said hi"
        assert contents(await session.get_items())[0] == "Hi there"

    run(scenario())


@pytest.mark.parametrize("method", RUNNER_METHODS)
def test_session_memory_different_sessions(
    method: str, make_session: Callable[..., OpenAIAgentsSession]
) -> None:
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    session_1, session_2 = make_session("session_1"), make_session("session_2")

    async def scenario() -> None:
        model.set_next_output([text_message("I like cats")])
        await run_agent(method, agent, "I like cats", session=session_1)
        model.set_next_output([text_message("I like dogs")])
        await run_agent(method, agent, "I like dogs", session=session_2)
        model.set_next_output([text_message("Yes, you mentioned cats")])
        third = await run_agent(method, agent, "What did I say I like?", session=session_1)
        assert third.final_output == "Yes, you mentioned cats"
        seen = json.dumps(model.last_input)
        assert "I like cats" in seen and "I like dogs" not in seen

    run(scenario())


def test_session_memory_direct(make_session: Callable[..., OpenAIAgentsSession]) -> None:
    session = make_session("direct_test")

    async def scenario() -> None:
        items: list[TResponseInputItem] = [
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi there!"},
        ]
        await session.add_items(items)
        assert await session.get_items() == items
        await session.clear_session()
        assert await session.get_items() == []

    run(scenario())


def test_close_releases_the_store_opened_from_a_url(tmp_path: Path) -> None:
    """(For ``test_sqlite_session_close_closes_worker_thread_connections``.)"""
    target = str(tmp_path / "store")
    session = OpenAIAgentsSession("s", target)
    run(session.add_items([{"role": "user", "content": "Hello"}]))
    store = session.store
    session.close()
    assert store.sync._closed
    with pytest.raises(UsageError, match="closed"):
        run(session.get_items())
    session.close()  # harmless


def test_session_memory_pop_item(make_session: Callable[..., OpenAIAgentsSession]) -> None:
    session = make_session("pop_test")

    async def scenario() -> None:
        assert await session.pop_item() is None
        await session.add_items(
            [
                {"role": "user", "content": "Hello"},
                {"role": "assistant", "content": "Hi there!"},
                {"role": "user", "content": "How are you?"},
            ]
        )
        assert len(await session.get_items()) == 3
        assert await session.pop_item() == {"role": "user", "content": "How are you?"}
        assert contents(await session.get_items()) == ["Hello", "Hi there!"]
        assert await session.pop_item() == {"role": "assistant", "content": "Hi there!"}
        assert await session.pop_item() == {"role": "user", "content": "Hello"}
        assert await session.pop_item() is None
        assert await session.get_items() == []

    run(scenario())


def test_session_memory_pop_different_sessions(
    make_session: Callable[..., OpenAIAgentsSession],
) -> None:
    session_1, session_2 = make_session("session_1"), make_session("session_2")

    async def scenario() -> None:
        await session_1.add_items([{"role": "user", "content": "Session 1 message"}])
        await session_2.add_items(
            [
                {"role": "user", "content": "Session 2 message 1"},
                {"role": "user", "content": "Session 2 message 2"},
            ]
        )
        popped = await session_2.pop_item()
        assert popped is not None and popped.get("content") == "Session 2 message 2"
        assert contents(await session_1.get_items()) == ["Session 1 message"]
        assert contents(await session_2.get_items()) == ["Session 2 message 1"]

    run(scenario())


def test_session_get_items_with_limit(make_session: Callable[..., OpenAIAgentsSession]) -> None:
    session = make_session("count_test")
    texts = ["Message 1", "Response 1", "Message 2", "Response 2", "Message 3", "Response 3"]

    async def scenario() -> None:
        await session.add_items([{"role": "user", "content": t} for t in texts])
        assert contents(await session.get_items()) == texts
        assert contents(await session.get_items(limit=2)) == texts[-2:]
        assert contents(await session.get_items(limit=4)) == texts[-4:]
        assert contents(await session.get_items(limit=10)) == texts
        assert await session.get_items(limit=0) == []

    run(scenario())


@pytest.mark.parametrize("method", RUNNER_METHODS)
def test_session_memory_appends_list_input_by_default(
    method: str, make_session: Callable[..., OpenAIAgentsSession]
) -> None:
    session = make_session("list_input")
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    history: list[TResponseInputItem] = [
        {"role": "user", "content": "Earlier message"},
        {"role": "assistant", "content": "Saved reply"},
    ]
    list_input: list[TResponseInputItem] = [{"role": "user", "content": "Test message"}]

    async def scenario() -> None:
        await session.add_items(history)
        model.set_next_output([text_message("This should run")])
        await run_agent(method, agent, list_input, session=session)
        assert model.last_input == history + list_input

    run(scenario())


@pytest.mark.parametrize("method", RUNNER_METHODS)
def test_session_callback_prepared_input(
    method: str, make_session: Callable[..., OpenAIAgentsSession]
) -> None:
    session = make_session("session_1")
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    history: list[TResponseInputItem] = [
        {"role": "user", "content": "Hello there."},
        {"role": "assistant", "content": "Hi, I'm here to assist you."},
    ]
    new_input: list[TResponseInputItem] = [{"role": "user", "content": "What your name?"}]

    def only_user_messages(past: list[Any], new: list[Any]) -> list[Any]:
        return [item for item in past if item["role"] == "user"] + new

    async def scenario() -> None:
        await session.add_items(history)
        model.set_next_output([text_message("I'm gpt-4o")])
        await run_agent(
            method,
            agent,
            new_input,
            session=session,
            run_config=RunConfig(session_input_callback=only_user_messages),
        )
        assert model.last_input == [history[0], new_input[0]]

    run(scenario())


def test_session_unicode_content(make_session: Callable[..., OpenAIAgentsSession]) -> None:
    session = make_session("unicode_test")
    texts = ["こんにちは", "😊👍", "Привет"]

    async def scenario() -> None:
        await session.add_items([{"role": "user", "content": t} for t in texts])
        assert contents(await session.get_items()) == texts

    run(scenario())


def test_session_special_characters_and_sql_injection(
    make_session: Callable[..., OpenAIAgentsSession],
) -> None:
    session = make_session("special_chars_test")
    texts = [
        "O'Reilly",
        "DROP TABLE sessions;",
        '"SELECT * FROM users WHERE name = "admin";"',
        "Robert'); DROP TABLE students;--",
        "Normal message",
    ]

    async def scenario() -> None:
        await session.add_items([{"role": "user", "content": t} for t in texts])
        assert contents(await session.get_items()) == texts

    run(scenario())


def test_session_concurrent_access(make_session: Callable[..., OpenAIAgentsSession]) -> None:
    """Five threads, each with its own event loop, adding to one session object."""
    session = make_session("concurrent_test")
    items: list[TResponseInputItem] = [
        {"role": "user", "content": f"Message {i}"} for i in range(10)
    ]

    def add_item(item: TResponseInputItem) -> None:
        asyncio.run(session.add_items([item]))

    with concurrent.futures.ThreadPoolExecutor(max_workers=5) as executor:
        list(executor.map(add_item, items))
    got = run(session.get_items())
    assert sorted(contents(got)) == sorted(f"Message {i}" for i in range(10))


def test_sessions_naming_one_store_share_it(tmp_path: Path) -> None:
    """(For ``test_sqlite_session_file_lock_is_shared_across_instances``.)"""
    target = str(tmp_path / "store")
    session_1 = OpenAIAgentsSession("session_1", target)
    session_2 = OpenAIAgentsSession("session_2", target)
    assert session_1.store is session_2.store

    async def scenario() -> None:
        await asyncio.gather(
            session_1.add_items([{"role": "user", "content": "session_1"}]),
            session_2.add_items([{"role": "user", "content": "session_2"}]),
        )
        assert contents(await session_1.get_items()) == ["session_1"]
        assert contents(await session_2.get_items()) == ["session_2"]

    run(scenario())
    store = session_1.store
    session_1.close()
    assert not store.sync._closed
    assert run(session_2.get_items()) != []
    session_2.close()
    assert store.sync._closed
    assert target not in openai_agents._shared


def test_session_add_items_exception_propagates_in_streamed(
    make_session: Callable[..., OpenAIAgentsSession],
) -> None:
    session = make_session("test_exception_session")

    async def failing_add_items(_items: Any) -> None:
        raise RuntimeError("Simulated session.add_items failure")

    session.add_items = failing_add_items  # type: ignore[method-assign,assignment]
    model = ScriptedModel()
    model.set_next_output([text_message("This should not be reached")])

    async def consume() -> None:
        result = Runner.run_streamed(Agent(name="test", model=model), "Hello", session=session)
        async for _event in result.stream_events():
            pass

    with pytest.raises(RuntimeError, match=r"Simulated session\.add_items failure"):
        run(consume())


def test_session_settings_default(make_session: Callable[..., OpenAIAgentsSession]) -> None:
    session = make_session("default_settings_test")
    assert isinstance(session.session_settings, SessionSettings)
    assert session.session_settings.limit is None


def test_session_settings_constructor(make_session: Callable[..., OpenAIAgentsSession]) -> None:
    session = make_session("constructor", session_settings=SessionSettings(limit=5))
    assert session.session_settings is not None and session.session_settings.limit == 5
    as_dict = make_session("from_dict", session_settings={"limit": 7})
    assert as_dict.session_settings is not None and as_dict.session_settings.limit == 7


def test_get_items_uses_session_settings_limit(
    make_session: Callable[..., OpenAIAgentsSession],
) -> None:
    session = make_session("uses_settings_limit", session_settings=SessionSettings(limit=3))

    async def scenario() -> None:
        await session.add_items([{"role": "user", "content": f"Message {i}"} for i in range(5)])
        assert contents(await session.get_items()) == ["Message 2", "Message 3", "Message 4"]

    run(scenario())


def test_get_items_explicit_limit_overrides_session_settings(
    make_session: Callable[..., OpenAIAgentsSession],
) -> None:
    session = make_session("explicit_override", session_settings=SessionSettings(limit=5))

    async def scenario() -> None:
        await session.add_items([{"role": "user", "content": f"Message {i}"} for i in range(10)])
        assert contents(await session.get_items(limit=2)) == ["Message 8", "Message 9"]

    run(scenario())


def test_runner_with_session_settings_override(
    make_session: Callable[..., OpenAIAgentsSession],
) -> None:
    session = make_session("runner_override", session_settings=SessionSettings(limit=100))
    model = ScriptedModel()

    async def scenario() -> None:
        await session.add_items([{"role": "user", "content": f"Turn {i}"} for i in range(10)])
        model.set_next_output([text_message("Got it")])
        await Runner.run(
            Agent(name="test", model=model),
            "New question",
            session=session,
            run_config=RunConfig(session_settings=SessionSettings(limit=2)),
        )
        history = [item for item in model.last_input if item.get("content") != "New question"]
        assert contents(cast("Any", history)) == ["Turn 8", "Turn 9"]

    run(scenario())


# ---------------------------------------------------------------------------------------------
# Ported: tests/memory/test_session_limit.py


async def _turns(
    method: str, agent: Agent[Any], model: ScriptedModel, session: Session, numbers: range
) -> None:
    for n in numbers:
        model.set_next_output([text_message(f"Reply {n}")])
        await run_agent(method, agent, f"Message {n}", session=session)


@pytest.mark.parametrize("method", RUNNER_METHODS)
def test_session_limit_parameter(
    method: str, make_session: Callable[..., OpenAIAgentsSession]
) -> None:
    session = make_session("limit_test")
    model = ScriptedModel()
    agent = Agent(name="test", model=model)

    async def scenario() -> None:
        await _turns(method, agent, model, session, range(1, 4))
        assert len(await session.get_items()) == 6
        model.set_next_output([text_message("Reply 4")])
        await run_agent(
            method,
            agent,
            "Message 4",
            session=session,
            run_config=RunConfig(session_settings=SessionSettings(limit=2)),
        )
        sent = model.last_input
        assert len(sent) == 3
        assert sent[0].get("content") == "Message 3"
        assert sent[1]["content"][0]["text"] == "Reply 3"
        assert sent[2].get("content") == "Message 4"

    run(scenario())


@pytest.mark.parametrize("method", RUNNER_METHODS)
def test_session_limit_zero(method: str, make_session: Callable[..., OpenAIAgentsSession]) -> None:
    session = make_session("limit_zero_test")
    model = ScriptedModel()
    agent = Agent(name="test", model=model)

    async def scenario() -> None:
        await _turns(method, agent, model, session, range(1, 3))
        model.set_next_output([text_message("Reply 3")])
        await run_agent(
            method,
            agent,
            "Message 3",
            session=session,
            run_config=RunConfig(session_settings=SessionSettings(limit=0)),
        )
        assert [item.get("content") for item in model.last_input] == ["Message 3"]

    run(scenario())


@pytest.mark.parametrize("method", RUNNER_METHODS)
def test_session_limit_none_gets_all_history(
    method: str, make_session: Callable[..., OpenAIAgentsSession]
) -> None:
    session = make_session("limit_none_test")
    model = ScriptedModel()
    agent = Agent(name="test", model=model)

    async def scenario() -> None:
        await _turns(method, agent, model, session, range(1, 6))
        assert len(await session.get_items()) == 10
        model.set_next_output([text_message("Reply 6")])
        await run_agent(
            method,
            agent,
            "Message 6",
            session=session,
            run_config=RunConfig(session_settings=SessionSettings(limit=None)),
        )
        sent = model.last_input
        assert len(sent) == 11
        assert sent[0].get("content") == "Message 1"
        assert sent[-1].get("content") == "Message 6"

    run(scenario())


@pytest.mark.parametrize("method", RUNNER_METHODS)
def test_session_limit_larger_than_history(
    method: str, make_session: Callable[..., OpenAIAgentsSession]
) -> None:
    session = make_session("limit_large_test")
    model = ScriptedModel()
    agent = Agent(name="test", model=model)

    async def scenario() -> None:
        await _turns(method, agent, model, session, range(1, 2))
        model.set_next_output([text_message("Reply 2")])
        await run_agent(
            method,
            agent,
            "Message 2",
            session=session,
            run_config=RunConfig(session_settings=SessionSettings(limit=100)),
        )
        sent = model.last_input
        assert len(sent) == 3
        assert sent[0].get("content") == "Message 1"
        assert sent[1]["content"][0]["text"] == "Reply 1"
        assert sent[2].get("content") == "Message 2"

    run(scenario())


def test_non_positive_limits_behave_as_the_installed_sqlite_session(
    make_session: Callable[..., OpenAIAgentsSession],
) -> None:
    """(For ``test_session_limit_negative_returns_empty``: the installed SDK's
    ``SQLiteSession`` is the reference, whichever way its version treats a negative limit.)"""
    ours = make_session("limit_negative_test")
    theirs = SQLiteSession("limit_negative_test")
    items: list[TResponseInputItem] = [
        {"role": "user", "content": "1"},
        {"role": "assistant", "content": "2"},
    ]

    async def scenario() -> None:
        for session in (ours, theirs):
            await session.add_items(items)
        for limit in (-2, -1, 0, 1, None):
            assert await ours.get_items(limit=limit) == await theirs.get_items(limit=limit)

    run(scenario())
    theirs.close()


# ---------------------------------------------------------------------------------------------
# A whole agent run: tool calls, reasoning, hosted tools, a handoff; persisted and resumed


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def _reasoning(item_id: str) -> ResponseReasoningItem:
    return ResponseReasoningItem(
        id=item_id,
        type="reasoning",
        summary=[Summary(type="summary_text", text="Thinking about the weather.")],
        encrypted_content="gAAAAABo" + "x" * 40 + "==",
    )


def _script(model: ScriptedModel) -> None:
    model.set_next_output(
        [
            _reasoning("rs_1"),
            ResponseFunctionWebSearch(
                id="ws_1",
                type="web_search_call",
                status="completed",
                action=ActionSearch(type="search", query="paris weather"),
            ),
            ResponseFunctionToolCall(
                id="fc_1",
                call_id="call_1",
                type="function_call",
                name="get_weather",
                arguments='{"city":"Paris"}',
            ),
        ]
    )
    model.set_next_output(
        [
            ResponseFunctionToolCall(
                id="fc_2",
                call_id="call_2",
                type="function_call",
                name="transfer_to_forecaster",
                arguments="{}",
            )
        ]
    )
    model.set_next_output([_reasoning("rs_2"), text_message("Sunny in Paris.", "msg_2")])


def _agents(model: ScriptedModel) -> Agent[Any]:
    forecaster = Agent(name="forecaster", model=model)
    return Agent(name="triage", model=model, tools=[get_weather], handoffs=[forecaster])


@pytest.mark.parametrize("method", RUNNER_METHODS)
def test_an_agent_run_persists_items_as_the_sqlite_session_does_and_resumes(
    method: str, make_session: Callable[..., OpenAIAgentsSession], target: str | BaseStore
) -> None:
    """The same scripted run through ``SQLiteSession`` and through ours stores the same items,
    byte for byte; a new object on the store resumes the conversation from them."""

    ours, resumed = make_session("weather"), make_session("weather")

    async def scenario() -> None:
        stored: list[str] = []
        for session in (SQLiteSession("weather"), ours):
            model = ScriptedModel()
            _script(model)
            result = await run_agent(method, _agents(model), "Weather in Paris?", session=session)
            assert result.final_output == "Sunny in Paris."
            stored.append(json.dumps(await session.get_items()))
        assert stored[0] == stored[1]
        kinds = [item.get("type") for item in json.loads(stored[1])]
        for kind in ("reasoning", "web_search_call", "function_call", "function_call_output"):
            assert kind in kinds

        # ``resumed`` is another object: it reads the log
        model = ScriptedModel()
        model.set_next_output([text_message("Still sunny.", "msg_3")])
        await run_agent(method, Agent(name="forecaster", model=model), "And now?", session=resumed)
        assert json.dumps(model.last_input[:-1]) == stored[1]

    run(scenario())


# ---------------------------------------------------------------------------------------------
# Every item shape round-trips byte for byte

_ENCRYPTED = "gAAAAABoZ2V0LXJlYXNvbmluZy1lbmNyeXB0ZWQtY29udGVudA" + "A" * 64 + "=="

ITEM_SHAPES: list[dict[str, Any]] = [
    {"role": "user", "content": "plain text"},
    {"role": "system", "content": "be brief"},
    {"role": "developer", "content": "be briefer"},
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "look"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0K", "detail": "low"},
            {
                "type": "input_file",
                "file_data": "data:application/pdf;base64,JVBE",
                "filename": "a.pdf",
            },
            {"type": "input_file", "file_id": "file_123"},
        ],
    },
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [
            {
                "type": "output_text",
                "text": "See [1].",
                "annotations": [
                    {
                        "type": "url_citation",
                        "url": "https://e.x",
                        "title": "E",
                        "start_index": 4,
                        "end_index": 7,
                    }
                ],
                "logprobs": [],
            },
            {"type": "refusal", "refusal": "not that"},
        ],
    },
    {
        "id": "rs_1",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "weighing"}],
        "content": [{"type": "reasoning_text", "text": "step 1"}],
        "encrypted_content": _ENCRYPTED,
        "status": None,
    },
    {
        "id": "fc_1",
        "type": "function_call",
        "call_id": "call_1",
        "name": "f",
        "arguments": '{"a": 1.5e-7}',
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "ok"},
    {
        "type": "function_call_output",
        "call_id": "call_2",
        "output": [
            {"type": "input_text", "text": "t"},
            {"type": "input_image", "image_url": "https://e.x/i.png"},
        ],
    },
    {
        "id": "fc_3",
        "type": "function_call",
        "call_id": "call_3",
        "name": "transfer_to_billing",
        "arguments": "{}",
    },
    {"type": "function_call_output", "call_id": "call_3", "output": '{"assistant": "billing"}'},
    {
        "id": "cu_1",
        "type": "computer_call",
        "call_id": "call_4",
        "status": "completed",
        "action": {"type": "click", "button": "left", "x": 10, "y": 20},
        "pending_safety_checks": [{"id": "sc_1", "code": "malicious_instructions", "message": "?"}],
    },
    {
        "type": "computer_call_output",
        "call_id": "call_4",
        "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AAAA"},
        "acknowledged_safety_checks": [
            {"id": "sc_1", "code": "malicious_instructions", "message": "?"}
        ],
    },
    {
        "id": "ws_1",
        "type": "web_search_call",
        "status": "completed",
        "action": {"type": "search", "query": "q", "sources": None},
    },
    {
        "id": "fs_1",
        "type": "file_search_call",
        "status": "completed",
        "queries": ["q3 revenue"],
        "results": [
            {
                "file_id": "file_1",
                "filename": "q3.pdf",
                "score": 0.9,
                "text": "...",
                "attributes": {"k": 1},
            }
        ],
    },
    {
        "id": "ci_1",
        "type": "code_interpreter_call",
        "status": "completed",
        "code": "print(1)",
        "container_id": "c_1",
        "outputs": [{"type": "logs", "logs": "1\n"}],
    },
    {
        "id": "ig_1",
        "type": "image_generation_call",
        "status": "completed",
        "result": "iVBORw0KGgo=",
    },
    {
        "id": "ls_1",
        "type": "local_shell_call",
        "call_id": "call_5",
        "status": "completed",
        "action": {"type": "exec", "command": ["ls", "-la"], "env": {"A": "1"}},
    },
    {"id": "ls_1", "type": "local_shell_call_output", "output": '{"stdout": "a\\n"}'},
    {
        "type": "shell_call",
        "call_id": "call_6",
        "action": {"commands": ["pwd"], "timeout_ms": 1000},
        "status": "completed",
    },
    {
        "type": "shell_call_output",
        "call_id": "call_6",
        "output": [{"stdout": "/\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
    },
    {
        "type": "apply_patch_call",
        "call_id": "call_7",
        "status": "completed",
        "operation": {"type": "update_file", "path": "a.py", "diff": "@@\n-a\n+b\n"},
    },
    {
        "type": "apply_patch_call_output",
        "call_id": "call_7",
        "status": "completed",
        "output": "done",
    },
    {
        "id": "mcpl_1",
        "type": "mcp_list_tools",
        "server_label": "s",
        "tools": [{"name": "t", "input_schema": {"type": "object"}}],
    },
    {
        "id": "mcpr_1",
        "type": "mcp_approval_request",
        "server_label": "s",
        "name": "t",
        "arguments": "{}",
    },
    {
        "type": "mcp_approval_response",
        "approval_request_id": "mcpr_1",
        "approve": True,
        "reason": None,
    },
    {
        "id": "mcp_1",
        "type": "mcp_call",
        "server_label": "s",
        "name": "t",
        "arguments": "{}",
        "output": "r",
        "error": None,
    },
    {
        "id": "ct_1",
        "type": "custom_tool_call",
        "call_id": "call_8",
        "name": "grammar",
        "input": "x = 1",
    },
    {"type": "custom_tool_call_output", "call_id": "call_8", "output": "ok"},
    {"type": "item_reference", "id": "msg_0"},
    {"type": "compaction", "encrypted_content": _ENCRYPTED},
    {
        "role": "user",
        "content": "keys in odd order",
        "zeta": 1,
        "alpha": [None, True, False, -0.0, 1e300, 2**70, -(2**65)],
    },
    {
        "role": "user",
        "content": "control \u0000 \n \t \u2028 and 😊 and \\ \" '",
        "provider_data": {"model": "x"},
    },
]


def test_every_item_shape_round_trips_byte_for_byte(
    make_session: Callable[..., OpenAIAgentsSession],
) -> None:
    items = cast("list[TResponseInputItem]", ITEM_SHAPES)
    writers = [make_session("shapes") for _ in items]
    readers = [make_session("shapes") for _ in range(3)]

    async def scenario() -> None:
        await writers[0].add_items(items[:5])
        for writer, item in zip(writers[1:], items[5:], strict=False):
            await writer.add_items([item])
        for session in readers[:2]:
            got = await session.get_items()
            assert [json.dumps(i) for i in got] == [json.dumps(i) for i in items]
            got_limited = await session.get_items(limit=7)
            assert json.dumps(got_limited) == json.dumps(items[-7:])
        popped = await readers[2].pop_item()
        assert json.dumps(popped) == json.dumps(items[-1])

    run(scenario())


def test_a_lone_surrogate_round_trips(make_session: Callable[..., OpenAIAgentsSession]) -> None:
    item = cast("TResponseInputItem", {"role": "user", "content": "half \ud83d of a pair"})
    writer, reader = make_session("surrogate"), make_session("surrogate")

    async def scenario() -> None:
        await writer.add_items([item, item])
        got = await reader.get_items()
        assert json.dumps(got) == json.dumps([item, item])

    run(scenario())


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.dictionaries(st.text(), _json_values, max_size=5), min_size=1, max_size=4))
def test_any_json_object_round_trips_byte_for_byte(items: list[dict[str, Any]]) -> None:
    store = open_store("memory:")
    try:
        session = OpenAIAgentsSession("any", store)
        run(session.add_items(cast("list[TResponseInputItem]", items)))
        got = run(OpenAIAgentsSession("any", store).get_items())
        assert json.dumps(got) == json.dumps(items)
    finally:
        store.close()


# ---------------------------------------------------------------------------------------------
# Exactly as SQLiteSession, whatever the sequence of calls

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 3), st.integers(0, 2)),
        st.tuples(st.just("pop"), st.integers(0, 2)),
        st.tuples(st.just("clear"), st.integers(0, 2)),
        st.tuples(st.just("get"), st.integers(0, 2), st.none() | st.integers(-1, 6)),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(_ops)
def test_any_sequence_of_calls_answers_as_the_sqlite_session(ops: list[tuple[Any, ...]]) -> None:
    """Three objects on one session (the third made anew before each call, so that it reads
    the log backwards for a limit) against one ``SQLiteSession``."""
    store = open_store("memory:")
    theirs = SQLiteSession("diff")
    counter = iter(range(1_000_000))

    def ours(which: int) -> OpenAIAgentsSession:
        return objects[which] if which < 2 else OpenAIAgentsSession("diff", store)

    async def scenario() -> None:
        for op in ops:
            if op[0] == "add":
                items = [{"role": "user", "content": f"m{next(counter)}"} for _ in range(op[1])]
                await ours(op[2]).add_items(cast("Any", items))
                await theirs.add_items(cast("Any", items))
            elif op[0] == "pop":
                assert await ours(op[1]).pop_item() == await theirs.pop_item()
            elif op[0] == "clear":
                await ours(op[1]).clear_session()
                await theirs.clear_session()
            else:
                limit = op[2]
                assert await ours(op[1]).get_items(limit) == await theirs.get_items(limit)
        assert await ours(2).get_items() == await theirs.get_items()

    objects = [OpenAIAgentsSession("diff", store), OpenAIAgentsSession("diff", store)]
    try:
        run(scenario())
    finally:
        theirs.close()
        store.close()


# ---------------------------------------------------------------------------------------------
# The typed mirror


@pytest.mark.parametrize("method", RUNNER_METHODS)
def test_an_agent_runs_conversation_is_the_sessions_derived_history(
    method: str, make_session: Callable[..., OpenAIAgentsSession]
) -> None:
    """After a run with reasoning, a built-in tool, a function call and a handoff, the
    session's ``messages()`` holds the conversation (calls paired with their outputs, the
    reasoning kept) and every provider's request built from it is valid."""
    from agentsession.providers import (
        anthropic_errors,
        openai_chat_errors,
        openai_responses_errors,
        to_anthropic,
        to_openai_chat,
        to_openai_responses,
    )

    session = make_session("mirror")

    async def scenario() -> None:
        model = ScriptedModel()
        _script(model)
        await run_agent(method, _agents(model), "Weather in Paris?", session=session)
        history = await (await session.log()).messages()
        assert [m.role for m in history] == [
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
        ]
        assert history[0].text == "Weather in Paris?"
        assert [c.name for c in history[1].tool_calls] == ["get_weather"]
        assert [p.id for p in history[1].parts if isinstance(p, ThinkingPart)] == ["rs_1"]
        assert history[2].tool_results[0].call_id == "call_1"
        assert history[2].tool_results[0].name == "get_weather"
        assert history[-1].text == "Sunny in Paris."
        assert provider_errors(history) == []
        assert openai_responses_errors(to_openai_responses(history)) == []
        assert openai_chat_errors(to_openai_chat(history)) == []
        assert anthropic_errors(to_anthropic(history)) == []

    run(scenario())


def test_a_call_without_its_output_has_the_interrupted_stand_in(
    make_session: Callable[..., OpenAIAgentsSession],
) -> None:
    """A run killed while its tool ran leaves a function call with no output: the derived
    history answers it as interrupted (what the SDK would send is left as it was)."""
    session = make_session("killed")

    async def scenario() -> None:
        call = {"type": "function_call", "call_id": "c1", "name": "deploy", "arguments": "{}"}
        await session.add_items([{"role": "user", "content": "deploy"}, cast("Any", call)])
        history = await (await session.log()).messages()
        assert [m.role for m in history] == ["user", "assistant", "tool"]
        assert history[2].tool_results[0].audit == {"decision": "interrupted"}
        assert provider_errors(history) == []
        assert len(await session.get_items()) == 2

    run(scenario())


def test_usage_of_a_run_is_recorded_once_per_response(
    make_session: Callable[..., OpenAIAgentsSession],
) -> None:
    from agents.items import ModelResponse
    from agents.usage import Usage as SdkUsage
    from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

    session = make_session("usage")

    def usage(given: int, cached: int, made: int, reasoning: int) -> SdkUsage:
        return SdkUsage(
            requests=1,
            input_tokens=given,
            input_tokens_details=InputTokensDetails(cached_tokens=cached, cache_write_tokens=0),
            output_tokens=made,
            output_tokens_details=OutputTokensDetails(reasoning_tokens=reasoning),
            total_tokens=given + made,
        )

    class Result:  # what a run result offers: its model responses
        raw_responses: ClassVar[list[ModelResponse]] = [
            ModelResponse(output=[], usage=usage(859, 256, 80, 12), response_id="resp_1"),
            ModelResponse(output=[], usage=usage(950, 900, 20, 0), response_id="resp_2"),
        ]

    async def scenario() -> None:
        model = ScriptedModel()
        _script(model)
        run_result = await Runner.run(_agents(model), "Weather in Paris?", session=session)
        assert await session.record_usage(run_result) == len(run_result.raw_responses) == 3
        assert await session.record_usage(Result()) == 2
        assert await session.record_usage(Result()) == 0  # the same responses: nothing more
        assert await session.record_usage(usage(1, 0, 1, 0)) == 1  # a run's total
        events = [e for e in await (await session.log()).read() if e.type == "usage"]
        stored = [e.payload() for e in events[3:5]]
        assert [(u.input_tokens, u.cache_read_tokens, u.output_tokens) for u in stored] == [
            (859, 256, 80),
            (950, 900, 20),
        ]
        assert stored[0].reasoning_tokens == 12 and stored[0].total_tokens == 939
        assert len(events) == 6

    run(scenario())


_items = st.sampled_from(
    [
        {"role": "user", "content": "question"},
        {"role": "system", "content": "be brief"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a"}]},
        {"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": "hm"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": '{"x": 1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "function_call_output", "call_id": "c2", "output": "two"},
        {"type": "web_search_call", "id": "ws", "status": "completed"},
    ]
)
_mirror_ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.lists(_items, min_size=1, max_size=4)),
        st.tuples(st.just("pop")),
        st.tuples(st.just("clear")),
    ),
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(_mirror_ops)
def test_the_derived_history_is_always_that_of_the_live_items(ops: list[tuple[Any, ...]]) -> None:
    """Whatever was added, popped and cleared, ``messages()`` is the history a fresh session
    gets from the live items, added in the batches they were added in (a pop written as a
    rewind marker leaves the other items of its batch as they were; one written as the
    mirror's compaction marker holds the items that remain as one batch), and it is
    provider-valid."""
    store = open_store("memory:")

    async def scenario() -> None:
        session = OpenAIAgentsSession("any", store)
        batches: list[list[Any]] = []  # the reference: the live items, as the mirror has them
        for op in ops:
            if op[0] == "add":
                await session.add_items(cast("Any", op[1]))
                batches.append(list(op[1]))
            elif op[0] == "pop":
                live = [item for batch in batches for item in batch]
                popped = await session.pop_item()
                assert popped == (live[-1] if live else None)
                last = (await (await session.log()).read())[-1] if live else None
                if last is not None and last.type == SESSION_REWIND:
                    batches[-1] = batches[-1][:-1]
                    batches = [batch for batch in batches if batch]
                else:
                    batches = [live[:-1]] if len(live) > 1 else []
            else:
                await session.clear_session()
                batches = []
        assert await session.get_items() == [item for batch in batches for item in batch]
        fresh = OpenAIAgentsSession("fresh", store)
        for batch in batches:
            await fresh.add_items(cast("Any", batch))
        ours = await (await session.log()).messages()
        assert ours == await (await fresh.log()).messages()
        assert provider_errors(ours) == []

    try:
        run(scenario())
    finally:
        store.close()


# ---------------------------------------------------------------------------------------------
# The log


def test_pop_and_clear_are_events_and_nothing_is_deleted(
    make_session: Callable[..., OpenAIAgentsSession],
) -> None:
    session = make_session("log")

    async def scenario() -> None:
        await session.add_items(
            [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
        )
        log = await session.log()
        assert [m.text for m in await log.messages()] == ["a", "b"]
        await session.pop_item()
        assert [m.text for m in await log.messages()] == ["a"]
        await session.clear_session()
        assert await log.messages() == []
        await session.add_items([{"role": "user", "content": "c"}])
        events = await log.read()
        assert [(e.seq, e.type) for e in events] == [
            (1, ITEM),
            (2, "user/message"),
            (3, ITEM),
            (4, "user/message"),
            (5, POP),
            (6, SESSION_REWIND),
            (7, CLEAR),
            (8, COMPACTION),
            (9, ITEM),
            (10, "user/message"),
        ]
        assert json.loads(events[4].raw) == {"itemSeq": 3}
        assert bytes(events[2].data) == b'{"role":"user","content":"b"}'
        assert events[5].decode(SessionRewind) == SessionRewind(
            to_seq=2, kind=REWIND_KIND, min_revision=6
        )
        assert events[7].meta == {openai_agents.META_KEY: {"clear": True}}
        history = await log.messages()
        assert [m.text for m in history] == ["c"] and provider_errors(history) == []
        assert contents(await session.get_items()) == ["c"]

    run(scenario())


def test_without_the_mirror_only_items_pops_their_rewinds_and_clears_are_written(
    make_session: Callable[..., OpenAIAgentsSession],
) -> None:
    session = make_session("plain", mirror_messages=False)

    async def scenario() -> None:
        await session.add_items(
            [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
        )
        await session.pop_item()
        await session.clear_session()
        log = await session.log()
        events = await log.read()
        assert [e.type for e in events] == [ITEM, ITEM, POP, SESSION_REWIND, CLEAR]
        assert events[3].decode(SessionRewind).to_seq == 1
        assert await log.messages() == []

    run(scenario())


async def _history_of(store: BaseStore, batches: list[list[Any]]) -> list[Any]:
    """The derived history of a fresh session given ``batches`` (its mirror, as written)."""
    fresh = OpenAIAgentsSession(f"reference-{uuid.uuid4().hex}", store)
    for batch in batches:
        await fresh.add_items(cast("Any", batch))
    return await (await fresh.log()).messages()


REASONING = {"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": "hm"}]}
REPLY = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]}


def test_a_pop_is_a_rewind_marker_the_history_and_the_rows_follow() -> None:
    store = open_store("memory:")

    async def scenario() -> None:
        session = OpenAIAgentsSession("rewound", store)
        await session.add_items([{"role": "user", "content": "q"}])
        await session.add_items([REASONING])
        await session.add_items(
            [{"role": "user", "content": "x"}, {"role": "user", "content": "y"}]
        )
        log = await session.log()
        for _ in range(2):  # "y" then "x": each right after a mirrored message
            await session.pop_item()
            assert (await log.read())[-1].type == SESSION_REWIND
        await session.add_items([{"type": "web_search_call", "id": "ws"}])  # no message
        assert await session.pop_item() == {"type": "web_search_call", "id": "ws"}
        events = await log.read()
        assert [e.type for e in events[-2:]] == [POP, SESSION_REWIND]
        marker = events[-1].decode(SessionRewind)
        assert marker.kind == REWIND_KIND == "openai.pop" and marker.to_seq == 12
        earlier = [events[i].decode(SessionRewind).to_seq for i in (9, 11)]
        assert earlier == [6, 4]
        assert not any(e.type == COMPACTION for e in events)  # nothing restated
        history = await log.messages()
        question = {"role": "user", "content": "q"}
        assert history == await _history_of(store, [[question], [REASONING]])
        assert [e.seq for e in live_events(events)] == [1, 2, 3, 4]
        rows = transcript_rows(events)
        rewound = {row.seq for row in rows if row.rewound}
        assert rewound and rewound <= set(range(5, 15)) and 8 in rewound

    try:
        run(scenario())
    finally:
        store.close()


def test_a_pop_the_mirror_cannot_rewind_exactly_restates_what_remains() -> None:
    """The reasoning and the reply of one batch are one assistant message, written after the
    reply: a rewind to before the reply would lose the reasoning too, so the pop writes the
    mirror's marker; so does a pop of an item before a compaction marker."""
    store = open_store("memory:")

    async def scenario() -> None:
        session = OpenAIAgentsSession("restated", store)
        await session.add_items([{"role": "user", "content": "q"}])
        await session.add_items([REASONING, REPLY])
        assert await session.pop_item() == REPLY
        log = await session.log()
        events = await log.read()
        assert [e.type for e in events[-2:]] == [POP, COMPACTION]
        assert not any(e.type == SESSION_REWIND for e in events)
        want = await _history_of(store, [[{"role": "user", "content": "q"}, REASONING]])
        assert await log.messages() == want and want[-1].role == "assistant"
        # The item before that marker cannot be rewound past it either.
        assert await session.pop_item() == REASONING
        assert (await log.read())[-1].type == COMPACTION
        want = await _history_of(store, [[{"role": "user", "content": "q"}]])
        assert await log.messages() == want
        await session.add_items([{"role": "user", "content": "a"}])
        await session.add_items([{"role": "user", "content": "b"}])
        assert await log.compact("earlier", first_kept_seq=(await log.latest_seq()))
        assert await session.pop_item() == {"role": "user", "content": "b"}
        assert (await log.read())[-1].type == COMPACTION
        assert contents(await session.get_items()) == ["q", "a"]

    try:
        run(scenario())
    finally:
        store.close()


def test_without_the_mirror_a_pop_before_a_compaction_writes_no_rewind_marker() -> None:
    store = open_store("memory:")

    async def scenario() -> None:
        session = OpenAIAgentsSession("plain", store, mirror_messages=False)
        await session.add_items([{"role": "user", "content": "a"}])
        log = await session.log()
        await log.append(Event.new(USER_MESSAGE, Message.user("typed")))
        assert await log.compact("before", first_kept_seq=2)
        assert await session.pop_item() == {"role": "user", "content": "a"}
        assert (await log.read())[-1].type == POP
        assert await session.get_items() == []

    try:
        run(scenario())
    finally:
        store.close()


GOLDEN = Path(__file__).parent / "golden" / "openai_agents"


@pytest.mark.parametrize("session_id", ["mirrored", "plain"])
def test_a_log_written_before_pops_were_rewinds_reads_the_same(
    session_id: str, tmp_path: Path
) -> None:
    """tests/golden/openai_agents/make.py: pops written as ``openai_agents/pop`` with the
    mirror's compaction marker (or alone), read by this version: the same items, whole or
    from the end, the same history; a pop on it now goes on from there."""
    spec = importlib.util.spec_from_file_location("golden_make", GOLDEN / "make.py")
    assert spec is not None and spec.loader is not None
    made = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(made)
    directory = tmp_path / "store"
    shutil.copytree(GOLDEN / "jsonl", directory)
    store = open_store(directory)

    async def scenario() -> None:
        log = store.get(session_id)
        assert not any(e.type == SESSION_REWIND for e in log.read())
        assert await OpenAIAgentsSession(session_id, store).get_items() == made.ITEMS
        for n in (1, 2, 3):
            got = await OpenAIAgentsSession(session_id, store).get_items(limit=n)
            assert got == made.ITEMS[-n:]
        want = ["after the clear", "second"] if session_id == "mirrored" else []
        assert [m.text for m in log.messages()] == want
        session = OpenAIAgentsSession(session_id, store, mirror_messages=session_id == "mirrored")
        assert await session.pop_item() == made.ITEMS[-1]
        # The old pop's compaction marker lies after the item: no rewind goes back past it.
        assert log.read()[-1].type == (COMPACTION if session_id == "mirrored" else SESSION_REWIND)
        assert [m.text for m in log.messages()] == want[:1]
        assert await OpenAIAgentsSession(session_id, store).get_items() == made.ITEMS[:-1]

    try:
        run(scenario())
    finally:
        store.close()


def test_objects_of_one_session_see_each_others_writes(
    make_session: Callable[..., OpenAIAgentsSession],
) -> None:
    first, second = make_session("shared"), make_session("shared")

    async def scenario() -> None:
        await first.add_items([{"role": "user", "content": str(i)} for i in range(5)])
        assert contents(await second.get_items(limit=2)) == ["3", "4"]
        assert content(await second.pop_item()) == "4"
        assert content(await first.pop_item()) == "3"
        await second.add_items([{"role": "user", "content": "5"}])
        assert contents(await first.get_items()) == ["0", "1", "2", "5"]
        await first.clear_session()
        assert await second.get_items() == [] and await second.pop_item() is None

    run(scenario())


def test_concurrent_pops_from_tasks_of_one_object_each_get_a_different_item(
    make_session: Callable[..., OpenAIAgentsSession],
) -> None:
    session = make_session("racing")

    async def scenario() -> None:
        await session.add_items([{"role": "user", "content": str(i)} for i in range(8)])
        popped = await asyncio.gather(*(session.pop_item() for _ in range(10)))
        got = [content(p) for p in popped if p is not None]
        assert sorted(got) == [str(i) for i in range(8)] and popped.count(None) == 2
        assert await session.get_items() == []

    run(scenario())


def test_an_encrypted_store_round_trips(tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    store = open_store(str(tmp_path / "sealed"), key=b"k" * 32)
    try:
        session = OpenAIAgentsSession("secret", store)
        run(session.add_items([{"role": "user", "content": "hush"}] * 3))
        assert run(session.pop_item()) == {"role": "user", "content": "hush"}
        assert b"hush" not in b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
        assert len(run(OpenAIAgentsSession("secret", store).get_items())) == 2
    finally:
        store.close()


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="session_id"):
        OpenAIAgentsSession("", str(tmp_path))
    with pytest.raises(UsageError, match="store must be"):
        OpenAIAgentsSession("s", cast("Any", 42))
    with pytest.raises(UsageError, match="session_settings"):
        OpenAIAgentsSession("s", open_store("memory:"), cast("Any", 3))


def test_it_is_a_session_for_the_sdk() -> None:
    store = open_store("memory:")
    assert isinstance(OpenAIAgentsSession("s", store), Session)
    store.close()


# ---------------------------------------------------------------------------------------------
# Reading is incremental


class _CountingReads:
    """Wraps an AsyncSession's ``read`` to count the events each call returns."""

    def __init__(self, log: AsyncSession) -> None:
        self.returned: list[int] = []
        self._read = log.read

        async def read(after: int = 0, limit: int | None = None) -> Any:
            events = await self._read(after, limit)
            self.returned.append(len(events))
            return events

        log.read = read  # type: ignore[method-assign]


def test_reading_again_reads_only_the_new_events(
    make_session: Callable[..., OpenAIAgentsSession],
) -> None:
    writer = make_session("long")

    async def scenario() -> None:
        await writer.add_items([{"role": "user", "content": str(i)} for i in range(1000)])
        await writer.get_items()  # it shares the reader's AsyncSession: its reads count too
        reader = make_session("long")
        counting = _CountingReads(await reader.log())
        assert len(await reader.get_items()) == 1000
        await writer.add_items([{"role": "user", "content": "new"}])
        await writer.pop_item()
        await writer.add_items([{"role": "user", "content": "newer"}])
        got = await reader.get_items()
        assert len(got) == 1001 and got[-1] == {"role": "user", "content": "newer"}
        # the six events appended since: two items and a pop, each with its mirror
        assert sum(counting.returned[1:]) == 6

    run(scenario())


def test_a_limited_read_of_a_long_session_reads_its_end_only(
    make_session: Callable[..., OpenAIAgentsSession],
) -> None:
    writer = make_session("long")

    async def scenario() -> None:
        await writer.add_items([{"role": "user", "content": str(i)} for i in range(2000)])
        for _ in range(3):
            await writer.pop_item()
        reader = make_session("long")
        counting = _CountingReads(await reader.log())
        assert contents(await reader.get_items(limit=5)) == [str(i) for i in range(1992, 1997)]
        assert sum(counting.returned) <= 200
        assert content(await reader.pop_item()) == "1996"
        assert len(await reader.get_items()) == 1996  # the rest read when asked for
        assert contents(await reader.get_items(limit=2)) == ["1994", "1995"]

    run(scenario())


# ---------------------------------------------------------------------------------------------
# Two processes


CHILD = textwrap.dedent(
    """
    import asyncio, json, os, sys, time
    from agentsession.integrations.openai_agents import OpenAIAgentsSession

    target, name, count, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    while not os.path.exists(go):
        time.sleep(0.001)

    async def main():
        session = OpenAIAgentsSession("shared", target)
        added, popped = [], []
        for i in range(count):
            await asyncio.sleep(0.001)  # paced, so that the two writers overlap
            content = f"{name}-{i}"
            await session.add_items([{"role": "user", "content": content}])
            added.append(content)
            if i % 3 == 2:
                item = await session.pop_item()
                popped.append(None if item is None else item["content"])
        await session.aclose()
        print(json.dumps({"added": added, "popped": popped}))

    asyncio.run(main())
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jsonl", "sqlite", BACKENDS[3]])
def test_two_processes_adding_and_popping_lose_and_duplicate_nothing(
    backend: str, tmp_path: Path
) -> None:
    schema = new_schema_name()
    target = {
        "jsonl": str(tmp_path / "store"),
        "sqlite": f"sqlite:///{tmp_path}/store.db",
        "postgresql": url_with_schema(schema) if DSN else "",
    }[backend]
    try:
        run(OpenAIAgentsSession("warm-up", target).aclose())  # create the store (schema) first
        outs = run_released(
            CHILD, [[target, name, "300", str(tmp_path / "go")] for name in "ab"], tmp_path / "go"
        )
        reports = [json.loads(out) for out in outs]
        added = [c for r in reports for c in r["added"]]
        popped = [c for r in reports for c in r["popped"] if c is not None]
        session = OpenAIAgentsSession("shared", target)
        final = contents(run(session.get_items()))
        run(session.aclose())
        assert len(set(popped)) == len(popped)  # no item popped twice
        assert not set(popped) & set(final)
        assert sorted(popped + final) == sorted(added)  # none lost, none duplicated
        for name in "ab":  # each writer's surviving items stay in its order
            mine = [c for c in final if c.startswith(f"{name}-")]
            assert mine == sorted(mine, key=lambda c: int(c.split("-")[1]))
    finally:
        if backend == "postgresql":
            drop_schemas([schema])


def test_the_example_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(EXAMPLE.main(str(tmp_path / "store")))
    out = capsys.readouterr().out
    assert "agent: It is sunny in Paris." in out
    assert "openai_agents/pop" in out
    session = OpenAIAgentsSession("user-42", str(tmp_path / "store"))
    items = run(session.get_items())
    run(session.aclose())
    assert [cast("dict[str, Any]", i).get("type") for i in items].count("function_call") == 1
    assert contents(items)[0] == "What is the weather in Paris?"


RUN_SYNC_SCRIPT = textwrap.dedent(
    """
    import sys

    sys.path.insert(0, sys.argv[2])
    from agents import Agent, Runner, set_tracing_disabled
    from openai_agents_example import ScriptedModel, say

    from agentsession.integrations.openai_agents import OpenAIAgentsSession

    set_tracing_disabled(True)
    model = ScriptedModel([[say("Hello.", "msg_1")], [say("Hello again.", "msg_2")]])
    agent = Agent(name="greeter", instructions="Be brief.", model=model)
    session = OpenAIAgentsSession("user-1", store=sys.argv[1])
    print(Runner.run_sync(agent, "Hi", session=session).final_output)
    print(Runner.run_sync(agent, "Hi again", session=session).final_output)
    session.close()
    """
)


@pytest.mark.parametrize("backend", ["jsonl", BACKENDS[3]])
def test_run_sync_then_close_exits_cleanly(backend: str, tmp_path: Path) -> None:
    """``Runner.run_sync`` keeps its event loop open and idle between runs, never closed:
    ``close()`` must close the PostgreSQL async pool opened on it, or its tasks are destroyed
    pending at exit (with "no running event loop" errors on stderr)."""
    import subprocess
    import sys

    schema = new_schema_name()
    target = str(tmp_path / "store") if backend == "jsonl" else url_with_schema(schema)
    script = tmp_path / "run_sync.py"
    script.write_text(RUN_SYNC_SCRIPT, encoding="utf-8")
    examples = Path(__file__).resolve().parent.parent / "examples"
    try:
        done = subprocess.run(
            [sys.executable, str(script), target, str(examples)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert (done.returncode, done.stderr) == (0, "")
        assert done.stdout == "Hello.\nHello again.\n"
    finally:
        if backend != "jsonl":
            drop_schemas([schema])
