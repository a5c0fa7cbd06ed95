"""``agentsession.integrations.langchain``: LangChain's chat message history on the event log.

Round trips of every message type (generated with hypothesis) on memory, JSONL, SQLite and
PostgreSQL, read back by a fresh store object; the typed events each message becomes; clearing
without deleting; compactions honoured; the sync and async APIs; ``RunnableWithMessageHistory``
over a scripted model; two processes adding to one history. The tests of LangChain's own
histories (``libs/core/tests/unit_tests/chat_history``, ``test_chat_history.py``) are ported
at the end, against this history.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.util
import multiprocessing
import subprocess
import sys
import threading
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory

import agentsession as ags
from agentsession import BaseStore, open_store
from agentsession.aio import AsyncStore, open_async_store
from agentsession.context import with_turn_id
from agentsession.errors import UsageError
from agentsession.events import COMPACTION, Compaction, Usage
from agentsession.integrations.langchain import (
    LANGCHAIN_MESSAGE,
    META_KEY,
    AgentSessionChatHistory,
    events_for,
    history_from_events,
)
from agentsession.providers import to_openai_chat
from agentsession.validation import provider_errors

from .test_conformance_postgres import DSN, drop_schemas, new_schema_name, url_with_schema

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.filterwarnings(
    "ignore::langchain_core._api.deprecation.LangChainDeprecationWarning"
)

BACKENDS = ["memory", "jsonl", "sqlite", "postgres"]
SHARED = ["jsonl", "sqlite", "postgres"]
"""The backends whose data another store object, or another process, can open."""


class Backend:
    """The stores of one backend for a test: ``writer`` and ``reader`` are two store objects
    over the same data (the same object for memory, whose data no second object sees)."""

    def __init__(self, kind: str, url: str, options: dict[str, Any]) -> None:
        self.kind, self.url, self.options = kind, url, options
        self._opened: list[BaseStore] = []
        self._writer: BaseStore | None = None
        self._reader: BaseStore | None = None

    def open(self) -> BaseStore:
        """A new store object (for memory: the writer)."""
        if self.kind == "memory":
            return self.writer
        store = open_store(self.url, **self.options)
        self._opened.append(store)
        return store

    @property
    def writer(self) -> BaseStore:
        if self._writer is None:
            self._writer = open_store(self.url, **self.options)
            self._opened.append(self._writer)
        return self._writer

    @property
    def reader(self) -> BaseStore:
        if self._reader is None:
            self._reader = self.open()
        return self._reader

    def close(self) -> None:
        for store in self._opened:
            store.close()


def _backend(kind: str, tmp_path: Path) -> Iterator[Backend]:
    if kind == "memory":
        backend = Backend(kind, "memory:", {})
    elif kind == "jsonl":
        backend = Backend(kind, str(tmp_path / "sessions"), {})
    elif kind == "sqlite":
        backend = Backend(kind, f"sqlite:///{tmp_path}/sessions.db", {})
    else:
        if not DSN:
            pytest.skip("set AGENTSESSION_TEST_POSTGRES_DSN to run the PostgreSQL tests")
        schema = new_schema_name()
        backend = Backend(kind, url_with_schema(schema), {"pool_max_size": 4})
    try:
        yield backend
    finally:
        backend.close()
        if kind == "postgres":
            drop_schemas([schema])


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Every backend."""
    yield from _backend(request.param, tmp_path)


@pytest.fixture(params=SHARED)
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """The backends whose data other store objects and processes see."""
    yield from _backend(request.param, tmp_path)


def new_id() -> str:
    return "lc:" + uuid.uuid4().hex[:12]


# ---------------------------------------------------------------------------------------------
# Generated messages.

_keys = st.sampled_from(["a", "b", "model", "x y", "é"])
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)
json_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=3),
    max_leaves=6,
)
json_objects = st.dictionaries(_keys, json_values, max_size=3)
texts = st.text(max_size=12)
ids = st.none() | st.text(min_size=1, max_size=8)

blocks = st.one_of(
    texts,
    st.builds(lambda t: {"type": "text", "text": t}, texts),
    st.builds(
        lambda t, notes: {"type": "text", "text": t, "annotations": notes},
        texts,
        st.lists(json_objects, max_size=2),
    ),
    st.builds(lambda u: {"type": "image_url", "image_url": {"url": u}}, texts),
    st.builds(
        lambda u, d: {"type": "image_url", "image_url": {"url": u, "detail": d}},
        texts,
        st.sampled_from(["low", "high", "auto"]),
    ),
    st.builds(lambda u: {"type": "image", "url": u}, texts),
    st.builds(lambda b: {"type": "image", "base64": b, "mime_type": "image/png"}, texts),
    st.builds(lambda b: {"type": "file", "base64": b, "mime_type": "application/pdf"}, texts),
    st.builds(lambda t, s: {"type": "thinking", "thinking": t, "signature": s}, texts, texts),
    st.builds(lambda t: {"type": "reasoning", "reasoning": t}, texts),
    st.builds(lambda d: {"type": "redacted_thinking", "data": d}, texts),
    st.builds(lambda r: {"type": "refusal", "refusal": r}, texts),
    st.dictionaries(st.sampled_from(["type", "text", "url", "data"]), json_values, max_size=3),
)
contents = texts | st.lists(blocks, max_size=3)
common = st.fixed_dictionaries(
    {},
    optional={
        "id": ids,
        "name": st.none() | texts,
        "additional_kwargs": json_objects,
        "response_metadata": json_objects,
    },
)
tool_calls = st.lists(
    st.fixed_dictionaries({"name": texts, "args": json_objects, "id": ids}), max_size=3
)
invalid_tool_calls = st.lists(
    st.fixed_dictionaries(
        {
            "name": st.none() | texts,
            "args": st.none() | texts,
            "id": ids,
            "error": st.none() | texts,
            "type": st.just("invalid_tool_call"),
        }
    ),
    max_size=2,
)
counts = st.integers(0, 10**6)
usage = st.none() | st.fixed_dictionaries(
    {"input_tokens": counts, "output_tokens": counts, "total_tokens": counts},
    optional={
        "input_token_details": st.fixed_dictionaries(
            {}, optional={"cache_read": counts, "cache_creation": counts}
        ),
        "output_token_details": st.fixed_dictionaries({}, optional={"reasoning": counts}),
    },
)


def _message(cls: type[BaseMessage], **fixed: Any) -> st.SearchStrategy[BaseMessage]:
    return st.builds(lambda content, kw: cls(content=content, **fixed, **kw), contents, common)


def _ai(content: Any, kw: dict[str, Any], calls: Any, invalid: Any, used: Any) -> BaseMessage:
    return AIMessage(
        content=content,
        tool_calls=calls,
        invalid_tool_calls=invalid,
        usage_metadata=used,
        **kw,
    )


messages_of_every_type = st.one_of(
    _message(HumanMessage),
    _message(SystemMessage),
    st.builds(_ai, contents, common, tool_calls, invalid_tool_calls, usage),
    st.builds(
        lambda content, kw, call_id, status, artifact: ToolMessage(
            content=content, tool_call_id=call_id, status=status, artifact=artifact, **kw
        ),
        contents,
        common,
        texts,
        st.sampled_from(["success", "error"]),
        json_values,
    ),
    st.builds(
        lambda content, kw, role: ChatMessage(content=content, role=role, **kw),
        contents,
        common,
        st.sampled_from(["user", "human", "assistant", "ai", "system", "developer", "critic"]),
    ),
    st.builds(
        lambda content, kw, name: FunctionMessage(content=content, **{**kw, "name": name}),
        contents,
        common,
        st.text(min_size=1, max_size=6),
    ),
    _message(AIMessageChunk),
)
histories = st.lists(messages_of_every_type, max_size=8)


@st.composite
def agent_loops(draw: st.DrawFn) -> list[BaseMessage]:
    """Well-formed agent loops: every tool call is answered by a ToolMessage."""
    out: list[BaseMessage] = []
    for turn in range(draw(st.integers(1, 3))):
        out.append(HumanMessage(draw(texts), id=f"h{turn}"))
        for step in range(draw(st.integers(0, 2))):
            calls = [
                {"name": draw(texts), "args": draw(json_objects), "id": f"c{turn}-{step}-{i}"}
                for i in range(draw(st.integers(1, 3)))
            ]
            out.append(AIMessage(draw(contents), tool_calls=calls, usage_metadata=draw(usage)))
            for call in draw(st.permutations(calls)):
                out.append(
                    ToolMessage(
                        draw(contents),
                        tool_call_id=call["id"],
                        name=call["name"],
                        status=draw(st.sampled_from(["success", "error"])),
                    )
                )
        out.append(AIMessage(draw(contents), id=f"a{turn}"))
    return out


# ---------------------------------------------------------------------------------------------
# Round trips.

ROUND_TRIP = settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@ROUND_TRIP
@given(messages=histories, data=st.data())
def test_every_message_type_reads_back_equal_from_a_fresh_store(
    backend: Backend, messages: list[BaseMessage], data: st.DataObject
) -> None:
    session_id = new_id()
    history = AgentSessionChatHistory(session_id, store=backend.writer)
    added: list[BaseMessage] = []
    while len(added) < len(messages):
        size = data.draw(st.integers(1, len(messages) - len(added)))
        chunk = messages[len(added) : len(added) + size]
        if size == 1 and data.draw(st.booleans()):
            history.add_message(chunk[0])
        else:
            history.add_messages(chunk)
        added.extend(chunk)
        if data.draw(st.booleans()):  # read between adds: the incremental path
            assert history.messages == added
    assert AgentSessionChatHistory(session_id, store=backend.reader).messages == messages
    assert history.messages == messages
    session = backend.writer.get(session_id)
    assert history_from_events(session.read()) == messages
    assert provider_errors(session.messages()) == []


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(messages=histories, split=st.integers(0, 8))
def test_every_message_type_round_trips_through_the_async_api(
    backend: Backend, messages: list[BaseMessage], split: int
) -> None:
    session_id = new_id()

    async def main() -> list[BaseMessage]:
        if backend.kind == "memory":
            astore = AsyncStore(backend.writer, executor=pool)
        else:
            astore = await open_async_store(backend.url, **backend.options)
        try:
            history = AgentSessionChatHistory(session_id, store=astore)
            await history.aadd_messages(messages[:split])
            await history.aadd_messages(messages[split:])
            fresh = AgentSessionChatHistory(session_id, store=astore)
            assert await fresh.aget_messages() == messages
            return await history.aget_messages()
        finally:
            if backend.kind != "memory":
                await astore.close()

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        assert asyncio.run(main()) == messages
    assert AgentSessionChatHistory(session_id, store=backend.reader).messages == messages


@settings(max_examples=60, deadline=None)
@given(loop=agent_loops())
def test_an_agent_loop_leaves_every_tool_call_answered_by_its_own_result(
    loop: list[BaseMessage],
) -> None:
    store = open_store("memory:")
    history = AgentSessionChatHistory("loop", store=store)
    history.add_messages(loop)
    derived = store.get("loop").messages()
    assert provider_errors(derived) == []
    results = [r for m in derived for r in m.tool_results]
    assert all(not r.audit for r in results)  # no interrupted stand-in anywhere
    assert len(results) == sum(isinstance(m, ToolMessage) for m in loop)
    assert [m.role for m in derived if m.role != "tool"] == [
        "user" if isinstance(m, HumanMessage) else "assistant"
        for m in loop
        if not isinstance(m, ToolMessage)
    ]
    assert history.messages == loop


# ---------------------------------------------------------------------------------------------
# What each message becomes.


def _memory_history(session_id: str = "s") -> tuple[AgentSessionChatHistory, ags.BaseSession]:
    store = open_store("memory:")
    return AgentSessionChatHistory(session_id, store=store), store.get(session_id)


def test_an_ai_message_is_an_assistant_message_with_its_tool_calls_and_a_usage_event() -> None:
    history, session = _memory_history()
    ai = AIMessage(
        [{"type": "thinking", "thinking": "look first", "signature": "sig"}, "Reading."],
        tool_calls=[{"name": "read", "args": {"path": "a.py"}, "id": "call_1"}],
        usage_metadata={
            "input_tokens": 120,
            "output_tokens": 30,
            "total_tokens": 150,
            "input_token_details": {"cache_read": 100, "cache_creation": 5},
            "output_token_details": {"reasoning": 12},
        },
        response_metadata={"model_name": "m-1", "finish_reason": "tool_calls"},
        id="run-1",
        name="coder",
    )
    history.add_message(ai)
    message_event, usage_event = session.read()
    assert message_event.type == "assistant/message"
    message = message_event.payload()
    assert message.role == "assistant" and message.name == "coder"
    assert message.parts == [
        ags.ThinkingPart("look first", "sig", provider="anthropic"),
        ags.TextPart("Reading."),
    ]
    assert message.tool_calls == [ags.ToolCall("call_1", "read", {"path": "a.py"})]
    extra = message_event.meta[META_KEY]["set"]
    assert extra["id"] == "run-1" and extra["response_metadata"]["model_name"] == "m-1"
    assert usage_event.type == "usage"
    assert usage_event.payload() == Usage(120, 30, 150, 100, 5, 12)
    assert history.messages == [ai]


def test_a_tool_message_is_a_tool_result_and_an_error_status_is_is_error() -> None:
    history, session = _memory_history()
    call = AIMessage("", tool_calls=[{"name": "run", "args": {}, "id": "c9"}])
    result = ToolMessage(
        "exit 1", tool_call_id="c9", name="run", status="error", artifact={"code": 1}
    )
    history.add_messages([HumanMessage("go"), call, result])
    event = session.read()[-1]
    assert event.type == "tool/result"
    assert event.payload() == ags.ToolResult("c9", "run", "exit 1", is_error=True)
    assert event.meta[META_KEY] == {"set": {"artifact": {"code": 1}}}
    [derived] = session.messages()[-1].tool_results
    assert derived.is_error and derived.content == "exit 1"
    assert history.messages[-1] == result


def test_a_plain_message_needs_no_meta() -> None:
    history, session = _memory_history()
    history.add_messages([HumanMessage("hi"), AIMessage("hello")])
    assert [e.meta for e in session.read()] == [{}, {}]


def test_a_system_message_is_a_system_message_in_place_in_the_derived_history() -> None:
    history, session = _memory_history()
    history.add_messages([SystemMessage("Be brief."), HumanMessage("hi"), AIMessage("hello")])
    first = session.read()[0]
    assert first.type == "user/message" and first.payload().role == "system"
    assert [m.role for m in session.messages()] == ["system", "user", "assistant"]
    assert to_openai_chat(session.messages())[0] == {"role": "system", "content": "Be brief."}


def test_messages_without_an_agentsession_kind_are_kept_for_langchain_only() -> None:
    history, session = _memory_history()
    odd = [
        FunctionMessage("42", name="answer"),
        ChatMessage("looks fine", role="critic"),
        ChatMessage("as a user", role="user"),
    ]
    history.add_messages([HumanMessage("hi"), *odd])
    kinds = [e.type for e in session.read()]
    assert kinds == ["user/message", LANGCHAIN_MESSAGE, LANGCHAIN_MESSAGE, "user/message"]
    assert [m.text for m in session.messages()] == ["hi", "as a user"]
    assert history.messages == [HumanMessage("hi"), *odd]


def test_a_remove_message_is_refused_and_nothing_of_its_batch_is_written() -> None:
    history, session = _memory_history()
    with pytest.raises(UsageError, match="RemoveMessage"):
        history.add_messages([HumanMessage("kept?"), RemoveMessage(id="m1")])
    assert session.read() == []


@pytest.mark.parametrize(
    "message",
    [
        HumanMessage("x", additional_kwargs={"raw": b"bytes"}),
        AIMessage("x", response_metadata={"pair": (1, 2)}),
        ToolMessage("x", tool_call_id="c", artifact=object()),
        AIMessage("x", response_metadata={"nan": float("nan")}),
        AIMessage("", tool_calls=[{"name": "t", "args": {"pair": (1, 2)}, "id": "c"}]),
        HumanMessage([{"type": "text", "text": "x", "raw": b"bytes"}]),
    ],
    ids=["bytes", "tuple", "object", "nan", "tuple-in-arguments", "bytes-in-a-block"],
)
def test_a_value_json_would_change_is_refused_rather_than_stored_changed(
    message: BaseMessage,
) -> None:
    history, session = _memory_history()
    with pytest.raises(UsageError, match="JSON"):
        history.add_messages([message])
    assert session.read() == []


def test_an_unanswered_call_has_no_stand_in_in_langchains_view_but_one_in_the_derived() -> None:
    history, session = _memory_history()
    asked = [
        HumanMessage("deploy"),
        AIMessage("", tool_calls=[{"name": "d", "args": {}, "id": "c"}]),
    ]
    history.add_messages(asked)
    assert history.messages == asked
    [standin] = session.messages()[-1].tool_results
    assert standin.audit == {"decision": "interrupted"}
    answer = ToolMessage("deployed", tool_call_id="c")  # answered in a later call: paired
    history.add_message(answer)
    assert history.messages == [*asked, answer]
    assert session.messages()[-1].tool_results[0].content == "deployed"


def test_messages_recorded_by_agentsession_read_back_as_langchain_messages() -> None:
    store = open_store("memory:")
    session = store.get("recorded")
    with session.turn(agent="coder") as turn:
        turn.user("Fix it")
        with turn.step() as step:
            step.assistant("Looking.", tool_calls=[ags.ToolCall("c1", "read", {"p": "a"})])
            step.tool_result("c1", "read", "def f(): ...")
        turn.assistant("Fixed.")
    assert AgentSessionChatHistory("recorded", store=store).messages == [
        HumanMessage("Fix it"),
        AIMessage("Looking.", tool_calls=[{"name": "read", "args": {"p": "a"}, "id": "c1"}]),
        ToolMessage("def f(): ...", tool_call_id="c1", name="read"),
        AIMessage("Fixed."),
    ]


def test_agent_user_and_the_context_turn_id_are_stamped_and_the_agent_filters() -> None:
    store = open_store("memory:")
    coder = AgentSessionChatHistory("shared", store=store, agent="coder", user="U1")
    critic = AgentSessionChatHistory("shared", store=store, agent="critic")
    with with_turn_id("t-7"):
        coder.add_messages([HumanMessage("write"), AIMessage("written")])
    critic.add_messages([HumanMessage("review"), AIMessage("fine")])
    first = store.get("shared").read()[0]
    assert (first.agent, first.user, first.meta["turn_id"]) == ("coder", "U1", "t-7")
    assert [m.content for m in coder.messages] == ["write", "written"]
    assert [m.content for m in critic.messages] == ["review", "fine"]
    everyone = AgentSessionChatHistory("shared", store=store)
    assert len(everyone.messages) == 4
    assert [m.text for m in store.get("shared").messages(agent="critic")] == ["review", "fine"]


def test_events_for_builds_the_batch_add_messages_appends() -> None:
    ai = AIMessage("a", usage_metadata={"input_tokens": 1, "output_tokens": 2, "total_tokens": 3})
    events = events_for([HumanMessage("q"), ai], agent="x")
    assert [e.type for e in events] == ["user/message", "assistant/message", "usage"]
    assert {e.agent for e in events} == {"x"}


# ---------------------------------------------------------------------------------------------
# Clearing and compaction.


def test_clear_keeps_the_log_and_every_reader_starts_after_it(backend: Backend) -> None:
    session_id = new_id()
    history = AgentSessionChatHistory(session_id, store=backend.writer)
    history.add_messages([HumanMessage("one"), AIMessage("two", id="r2")])
    session = backend.writer.get(session_id)
    before = len(session.read())
    history.clear()
    events = session.read()
    assert len(events) == before + 1  # nothing deleted
    marker = events[-1]
    assert marker.type == COMPACTION and marker.meta[META_KEY] == {"clear": True}
    data = marker.decode(Compaction)
    assert data.summary is None and data.retained_tail == []
    assert data.first_kept_seq == marker.seq
    assert history.messages == []
    assert AgentSessionChatHistory(session_id, store=backend.reader).messages == []
    assert session.messages() == []
    history.add_messages([HumanMessage("three")])
    assert AgentSessionChatHistory(session_id, store=backend.open()).messages == [
        HumanMessage("three")
    ]


def test_a_rewind_is_honoured_by_the_history_as_by_messages(backend: Backend) -> None:
    """``session.rewind`` (and its undo) changes what LangChain is sent, as it changes
    ``session.messages()``: for a history object that read before it and for a fresh one."""
    session_id = new_id()
    history = AgentSessionChatHistory(session_id, store=backend.writer)
    history.add_messages([HumanMessage("one"), AIMessage("two", id="r2")])
    history.add_messages([HumanMessage("three"), AIMessage("four", id="r4")])
    assert len(history.messages) == 4
    session = backend.writer.get(session_id)
    marker = session.rewind(to_seq=2)
    expected = [HumanMessage("one"), AIMessage("two", id="r2")]
    assert history.messages == expected  # read before: reads again
    assert AgentSessionChatHistory(session_id, store=backend.open()).messages == expected
    assert [m.text for m in session.messages()] == ["one", "two"]
    history.add_messages([HumanMessage("five")])
    assert history.messages == [*expected, HumanMessage("five")]
    session.rewind(to_seq=marker - 1)  # undone: the history before the first rewind
    assert [m.content for m in history.messages] == ["one", "two", "three", "four"]
    fresh = AgentSessionChatHistory(session_id, store=backend.open())
    assert [m.content for m in fresh.messages] == ["one", "two", "three", "four"]


def test_clear_works_while_calls_are_unanswered_and_on_an_empty_session() -> None:
    history, session = _memory_history()
    history.clear()
    assert history.messages == [] and len(session.read()) == 1
    history.add_messages(
        [HumanMessage("go"), AIMessage("", tool_calls=[{"name": "t", "args": {}, "id": "c"}])]
    )
    with pytest.raises(UsageError, match="unanswered"):
        session.compact("summary", keep_turns=0)  # agentsession's own compaction refuses
    history.clear()
    assert history.messages == [] and session.messages() == []


def test_a_clear_from_another_history_object_is_seen_on_the_next_read() -> None:
    store = open_store("memory:")
    mine = AgentSessionChatHistory("s", store=store)
    mine.add_messages([HumanMessage("a")])
    assert mine.messages == [HumanMessage("a")]
    AgentSessionChatHistory("s", store=store).clear()
    assert mine.messages == []


def test_clear_reads_again_when_another_writer_appends_before_its_marker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    history, session = _memory_history()
    history.add_messages([HumanMessage("a")])
    original = session.append_many
    expected: list[int | None] = []

    def racing(events: Any, *, expect_seq: int | None = None) -> list[int]:
        if not expected:  # another writer gets in between the history's read and its marker
            original(events_for([AIMessage("raced")]))
        expected.append(expect_seq)
        return original(events, expect_seq=expect_seq)

    monkeypatch.setattr(session, "append_many", racing)
    history.clear()
    assert expected == [1, 2]  # refused at 1, read again, appended at 2
    marker = session.read()[-1]
    assert marker.seq == 3 and marker.decode(Compaction).first_kept_seq == 3
    assert history.messages == []


def _clear_in_a_child(url: str, options: dict[str, Any], session_id: str) -> None:
    store = open_store(url, **options)
    try:
        AgentSessionChatHistory(session_id, store=store).clear()
    finally:
        store.close()


def test_a_clear_in_another_process_is_seen_and_deletes_nothing(shared: Backend) -> None:
    session_id = new_id()
    history = AgentSessionChatHistory(session_id, store=shared.writer)
    history.add_messages([HumanMessage("before"), AIMessage("the clear")])
    assert len(history.messages) == 2  # cached in this process
    child = multiprocessing.get_context("fork").Process(
        target=_clear_in_a_child, args=(shared.url, shared.options, session_id)
    )
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    assert history.messages == []
    assert [e.type for e in shared.writer.get(session_id).read()] == [
        "user/message",
        "assistant/message",
        COMPACTION,
    ]


def test_assigning_messages_replaces_the_history_in_one_atomic_append() -> None:
    history, session = _memory_history()
    history.add_messages([HumanMessage("old")])
    history.messages = [HumanMessage("new"), AIMessage("list")]
    assert history.messages == [HumanMessage("new"), AIMessage("list")]
    events = session.read()
    assert [e.type for e in events] == [
        "user/message",
        COMPACTION,
        "user/message",
        "assistant/message",
    ]


def _turns(count: int) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for i in range(count):
        out.append(HumanMessage(f"q{i}", id=f"h{i}"))
        out.append(
            AIMessage(f"a{i}", id=f"r{i}", response_metadata={"n": i}, additional_kwargs={"k": i})
        )
    return out


def test_a_compaction_is_honoured_and_the_kept_messages_stay_exact(backend: Backend) -> None:
    session_id = new_id()
    history = AgentSessionChatHistory(session_id, store=backend.writer)
    turns = _turns(3)
    history.add_messages(turns)
    assert history.messages == turns  # cached before the compaction: read incrementally after
    backend.writer.get(session_id).compact("Summary: q0 and q1 were answered.", keep_turns=1)
    expected = [HumanMessage("Summary: q0 and q1 were answered."), *turns[4:]]
    assert history.messages == expected
    assert AgentSessionChatHistory(session_id, store=backend.reader).messages == expected


def test_a_compaction_keeps_langchain_only_messages_in_place_and_adds_no_stand_in(
    backend: Backend,
) -> None:
    session_id = new_id()
    history = AgentSessionChatHistory(session_id, store=backend.writer)
    unanswered = AIMessage("", tool_calls=[{"name": "t", "args": {}, "id": "c"}], id="r1")
    kept = [
        HumanMessage("h1", id="h1"),
        unanswered,  # the next user message closes it with a stand-in in the derived history
        HumanMessage("h2", id="h2"),
        FunctionMessage("42", name="f"),
        AIMessage("a2", id="r2"),
    ]
    history.add_messages([HumanMessage("h0"), AIMessage("a0"), *kept])
    backend.writer.get(session_id).compact("Summary.", keep_turns=2)
    expected = [HumanMessage("Summary."), *kept]
    assert AgentSessionChatHistory(session_id, store=backend.reader).messages == expected
    assert history.messages == expected


def test_the_stores_history_cap_keeps_whole_turns_exactly(tmp_path: Path) -> None:
    store = open_store(tmp_path / "capped", max_messages=4)
    history = AgentSessionChatHistory("capped", store=store)
    turns = _turns(5)
    for start in range(0, len(turns), 2):  # one call per turn, as RunnableWithMessageHistory
        history.add_messages(turns[start : start + 2])
    assert history.messages == turns[-4:]
    assert (
        AgentSessionChatHistory("capped", store=open_store(tmp_path / "capped")).messages
        == (turns[-4:])
    )


# ---------------------------------------------------------------------------------------------
# The async API.


def test_the_async_methods_go_through_an_async_store(backend: Backend) -> None:
    session_id = new_id()
    messages = [SystemMessage("s"), HumanMessage("hi", id="h"), AIMessage("hello", id="a")]

    async def main() -> None:
        if backend.kind == "memory":  # closing an async store closes its sync one: wrap it
            astore = AsyncStore(backend.writer, executor=pool)
        else:
            astore = await open_async_store(backend.url, **backend.options)
        try:
            history = AgentSessionChatHistory(session_id, store=astore)
            await history.aadd_messages(messages[:2])
            history.add_message(messages[2])  # the sync methods use the async store's sync one
            assert await history.aget_messages() == messages
            assert AgentSessionChatHistory(session_id, store=backend.reader).messages == messages
            await history.aclear()
            assert await history.aget_messages() == []
            await history.aadd_messages([HumanMessage("after")])
            again = AgentSessionChatHistory(session_id, store=astore)
            assert await again.aget_messages() == [HumanMessage("after")]
        finally:
            if backend.kind != "memory":
                await astore.close()

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        asyncio.run(main())
    assert AgentSessionChatHistory(session_id, store=backend.open()).messages == [
        HumanMessage("after")
    ]


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_a_url_first_used_from_async_code_opens_one_async_store(kind: str, tmp_path: Path) -> None:
    url = str(tmp_path / "s") if kind == "jsonl" else f"sqlite:///{tmp_path}/s.db"

    async def main() -> None:
        async with AgentSessionChatHistory("u", store=url) as history:
            await history.aadd_messages([HumanMessage("a")])
            history.add_messages([AIMessage("b")])  # the sync methods share it
            assert history.messages == await history.aget_messages()
            await history.aclear()
            await history.aadd_messages([HumanMessage("c")])

    asyncio.run(main())
    with AgentSessionChatHistory("u", store=url) as history:
        assert history.messages == [HumanMessage("c")]
        assert len(history.session.read()) == 4


def test_with_a_sync_store_the_async_methods_run_the_sync_ones_in_a_thread() -> None:
    store = open_store("memory:")
    history = AgentSessionChatHistory("t", store=store)
    threads: list[int] = []
    original = store.get

    def noting(session_id: str) -> ags.BaseSession:
        threads.append(threading.get_ident())
        return original(session_id)

    store.get = noting  # type: ignore[method-assign]

    async def main() -> list[BaseMessage]:
        await history.aadd_messages([HumanMessage("x")])
        return await history.aget_messages()

    assert asyncio.run(main()) == [HumanMessage("x")]
    assert threads and threading.get_ident() not in threads


def test_store_options_apply_only_to_a_url_and_a_bad_or_private_store_is_refused() -> None:
    with pytest.raises(UsageError, match="store options"):
        AgentSessionChatHistory("s", store=open_store("memory:"), durability="fsync")
    with pytest.raises(UsageError, match="open_store"):
        AgentSessionChatHistory("s", store="memory:")
    with pytest.raises(UsageError, match="store must be"):
        AgentSessionChatHistory("s", store=42)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# RunnableWithMessageHistory.


def _chain(
    store: Any, seen: list[list[BaseMessage]], replies: list[AIMessage]
) -> RunnableWithMessageHistory:
    def remember(messages: list[BaseMessage]) -> list[BaseMessage]:
        seen.append(list(messages))
        return messages

    model = RunnableLambda(remember) | GenericFakeChatModel(messages=iter(replies))
    return RunnableWithMessageHistory(
        model,  # type: ignore[arg-type]
        lambda session_id: AgentSessionChatHistory(session_id, store=store),
    )


REPLIES = [
    AIMessage(
        "Hello Ada.",
        id="run-1",
        usage_metadata={"input_tokens": 5, "output_tokens": 3, "total_tokens": 8},
    ),
    AIMessage("You are Ada.", id="run-2"),
]


def test_a_runnable_with_message_history_persists_two_turns(backend: Backend) -> None:
    session_id = new_id()
    seen: list[list[BaseMessage]] = []
    chain = _chain(backend.writer, seen, list(REPLIES))
    config: Any = {"configurable": {"session_id": session_id}}
    first = chain.invoke("My name is Ada.", config)
    second = chain.invoke("What is my name?", config)
    assert [m.content for m in seen[1]] == ["My name is Ada.", "Hello Ada.", "What is my name?"]
    expected = [HumanMessage("My name is Ada."), first, HumanMessage("What is my name?"), second]
    assert AgentSessionChatHistory(session_id, store=backend.reader).messages == expected
    derived = backend.writer.get(session_id).messages()
    assert [m.role for m in derived] == ["user", "assistant", "user", "assistant"]
    assert [e.type for e in backend.writer.get(session_id).read()].count("usage") == 1


def test_a_runnable_with_message_history_persists_through_the_async_api(
    shared: Backend,
) -> None:
    session_id = new_id()
    seen: list[list[BaseMessage]] = []
    config: Any = {"configurable": {"session_id": session_id}}

    async def main() -> list[BaseMessage]:
        async with open_async_store(shared.url, **shared.options) as astore:
            chain = _chain(astore, seen, list(REPLIES))
            first = await chain.ainvoke("My name is Ada.", config)
            second = await chain.ainvoke("What is my name?", config)
            return [
                HumanMessage("My name is Ada."),
                first,
                HumanMessage("What is my name?"),
                second,
            ]

    expected = asyncio.run(main())
    assert len(seen[1]) == 3
    assert AgentSessionChatHistory(session_id, store=shared.open()).messages == expected


# ---------------------------------------------------------------------------------------------
# Two writers.

BATCHES = 25


def _add_batches(url: str, options: dict[str, Any], session_id: str, worker: str) -> None:
    store = open_store(url, **options)
    try:
        for i in range(BATCHES):  # a new history object per call, as RunnableWithMessageHistory
            AgentSessionChatHistory(session_id, store=store).add_messages(
                [HumanMessage(f"{worker}:{i}"), AIMessage(f"{worker}:{i}", id=f"{worker}-{i}")]
            )
    finally:
        store.close()


def _check_two_writers(messages: list[BaseMessage]) -> None:
    assert len(messages) == 2 * 2 * BATCHES
    for index in range(0, len(messages), 2):  # each batch stayed whole
        human, ai = messages[index], messages[index + 1]
        assert isinstance(human, HumanMessage) and isinstance(ai, AIMessage)
        assert human.content == ai.content
    for worker in ("w0", "w1"):
        mine = [m.content for m in messages[::2] if str(m.content).startswith(worker)]
        assert mine == [f"{worker}:{i}" for i in range(BATCHES)]


def test_two_processes_adding_to_one_history_lose_nothing(shared: Backend) -> None:
    session_id = new_id()
    context = multiprocessing.get_context("fork")
    workers = [
        context.Process(target=_add_batches, args=(shared.url, shared.options, session_id, w))
        for w in ("w0", "w1")
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert [worker.exitcode for worker in workers] == [0, 0]
    _check_two_writers(AgentSessionChatHistory(session_id, store=shared.open()).messages)


def test_two_threads_adding_to_one_memory_history_lose_nothing() -> None:
    store = open_store("memory:")

    def add(worker: str) -> None:
        for i in range(BATCHES):
            AgentSessionChatHistory("threads", store=store).add_messages(
                [HumanMessage(f"{worker}:{i}"), AIMessage(f"{worker}:{i}")]
            )

    threads = [threading.Thread(target=add, args=(w,)) for w in ("w0", "w1")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    _check_two_writers(AgentSessionChatHistory("threads", store=store).messages)


# ---------------------------------------------------------------------------------------------
# LangChain's own chat history tests, ported (FileChatMessageHistory's, the base class's and
# InMemoryChatMessageHistory's serialisation tests).


@pytest.fixture
def jsonl_history(tmp_path: Path) -> Iterator[AgentSessionChatHistory]:
    with AgentSessionChatHistory("ported", store=tmp_path / "store") as history:
        yield history


def test_add_user_and_ai_messages(jsonl_history: AgentSessionChatHistory) -> None:
    jsonl_history.add_user_message("Hello!")
    jsonl_history.add_ai_message("Hi there!")
    messages = jsonl_history.messages
    assert [type(m) for m in messages] == [HumanMessage, AIMessage]
    assert [m.content for m in messages] == ["Hello!", "Hi there!"]


def test_clear_messages(jsonl_history: AgentSessionChatHistory) -> None:
    jsonl_history.add_user_message("Hello!")
    jsonl_history.add_ai_message("Hi there!")
    jsonl_history.clear()
    assert jsonl_history.messages == []


def test_a_second_history_object_sees_the_first_ones_messages(
    jsonl_history: AgentSessionChatHistory, tmp_path: Path
) -> None:
    said = ["Hello, AI!", "Hello, how can I help you?", "Tell me a joke.", "Why? To get across."]
    for index, text in enumerate(said):
        (jsonl_history.add_user_message if index % 2 == 0 else jsonl_history.add_ai_message)(text)
    assert [m.content for m in jsonl_history.messages] == said
    with AgentSessionChatHistory("ported", store=tmp_path / "store") as second:
        assert [m.content for m in second.messages] == said


def test_add_message_and_add_messages_append_in_order(
    jsonl_history: AgentSessionChatHistory,
) -> None:
    jsonl_history.add_message(HumanMessage("Hello"))
    jsonl_history.add_message(HumanMessage("World"))
    jsonl_history.add_messages([HumanMessage("Hello"), HumanMessage("World")])
    assert jsonl_history.messages == [HumanMessage("Hello"), HumanMessage("World")] * 2


def test_the_async_interface(jsonl_history: AgentSessionChatHistory) -> None:
    async def main() -> None:
        await jsonl_history.aadd_messages([HumanMessage("Hello"), HumanMessage("World")])
        assert await jsonl_history.aget_messages() == [HumanMessage("Hello"), HumanMessage("World")]
        await jsonl_history.aadd_messages([HumanMessage("!")])
        assert [m.content for m in await jsonl_history.aget_messages()] == ["Hello", "World", "!"]
        await jsonl_history.aclear()
        assert await jsonl_history.aget_messages() == []

    asyncio.run(main())


def test_tool_calls_invalid_tool_calls_and_mixed_types_are_preserved(
    jsonl_history: AgentSessionChatHistory, tmp_path: Path
) -> None:
    messages = [
        SystemMessage("You are a helpful assistant."),
        HumanMessage("What's the weather in NYC?"),
        AIMessage(
            "I'll get the weather and search for restaurants.",
            tool_calls=[
                {"name": "get_weather", "args": {"city": "NYC"}, "id": "1"},
                {"name": "search_restaurants", "args": {"cuisine": "italian"}, "id": "2"},
            ],
            invalid_tool_calls=[
                {
                    "name": "invalid_tool",
                    "args": "not valid json",
                    "id": "3",
                    "error": "parse error",
                    "type": "invalid_tool_call",
                }
            ],
        ),
        AIMessage("Hello! How can I help you today?"),
    ]
    jsonl_history.add_messages(messages)
    with AgentSessionChatHistory("ported", store=tmp_path / "store") as again:
        read = again.messages
    assert read == messages
    assert [type(m).__name__ for m in read] == [
        "SystemMessage",
        "HumanMessage",
        "AIMessage",
        "AIMessage",
    ]
    assert isinstance(read[2], AIMessage) and isinstance(read[3], AIMessage)
    assert [c["name"] for c in read[2].tool_calls] == ["get_weather", "search_restaurants"]
    assert read[2].invalid_tool_calls[0]["error"] == "parse error"
    assert read[3].tool_calls == []


# ---------------------------------------------------------------------------------------------
# The example and the documentation.


def test_the_langchain_example_runs_without_a_warning(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-W",
            "error",
            str(ROOT / "examples" / "langchain_example.py"),
            str(tmp_path / "s"),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert "You asked about Paris." in out.stdout
    assert out.stderr == ""


def _example_module() -> Any:
    """``examples/langchain_example.py`` as a module (it is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "langchain_example", ROOT / "examples" / "langchain_example.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_create_agent_run_keeps_its_conversation_in_the_history_without_warnings(
    shared: Backend,
) -> None:
    """LangChain 1.x's agent (``create_agent``, a LangGraph graph) with a tool, its history
    loaded before each turn and the run's new messages added after it, warnings as errors;
    a second store object reads the conversation, and the derived history is
    provider-valid."""
    pytest.importorskip("langchain.agents")
    from langchain.agents import create_agent

    example = _example_module()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        agent = create_agent(example.scripted_model(), tools=[example.get_weather])
        sid = new_id()
        first = example.ask(agent, shared.writer, sid, "What is the weather in Paris?")
        second = example.ask(agent, shared.open(), sid, "Which city did I ask about?")
        read = AgentSessionChatHistory(sid, store=shared.reader).messages
    assert (first, second) == ("It is sunny in Paris, 21 degrees.", "You asked about Paris.")
    assert [m.type for m in read] == ["human", "ai", "tool", "ai", "human", "ai"]
    assert read[2].tool_call_id == "call_1"  # type: ignore[attr-defined]
    derived = shared.reader.get(sid).messages()
    assert [m.role for m in derived] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert provider_errors(derived) == []
