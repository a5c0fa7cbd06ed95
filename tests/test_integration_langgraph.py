"""``agentsession.integrations.langgraph``: LangGraph's checkpointer on the event log.

LangGraph's own conformance suite (``langgraph-checkpoint-conformance``) on memory, JSONL,
SQLite and PostgreSQL, plain and encrypted; a real ``StateGraph`` with a tool node,
interrupted with ``interrupt()``, resumed from another store object and time-travelled
(``get_state_history``, ``update_state``); deltas that read back exactly (hypothesis);
retried writes stored once; the typed mirror; copy (``copy_store``, ``copy_thread``) and
encryption; two processes resuming one thread under the turn lock.
"""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import itertools
import json
import multiprocessing
import operator
import shutil
import subprocess
import sys
import threading
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import msgspec
import pytest

pytest.importorskip("langgraph.checkpoint.base")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, empty_checkpoint
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import (
    BASE_CAPABILITIES,
    EXTENDED_CAPABILITIES,
)
from langgraph.checkpoint.serde.types import INTERRUPT
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from agentsession import BaseStore, Event, copy_store, open_store
from agentsession.errors import UsageError
from agentsession.integrations.langgraph import (
    CHECKPOINT,
    META_KEY,
    REMOVED,
    SNAPSHOT_EVERY,
    WRITE,
    WRITES,
    AgentSessionSaver,
    CheckpointData,
    WriteData,
    WritesData,
)
from agentsession.validation import provider_errors

from .store_urls import store_url

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ["memory", "jsonl", "sqlite", "postgres"]
SHARED = ["jsonl", "sqlite", "postgres"]
"""The backends whose data another store object, or another process, can open."""


def _example() -> Any:
    """``examples/langgraph_example.py`` as a module (it is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "langgraph_example", ROOT / "examples" / "langgraph_example.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # the graph's state type hints are looked up there
    spec.loader.exec_module(module)
    return module


example = _example()


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from store_url(request.param, tmp_path)


@pytest.fixture(params=SHARED)
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from store_url(request.param, tmp_path)


@pytest.fixture
def store(url: str) -> Iterator[BaseStore]:
    opened = open_store(url)
    yield opened
    opened.close()


def config_of(thread_id: str, **more: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", **more}}


# ---------------------------------------------------------------------------------------------
# LangGraph's conformance suite.


def _conformance(store: BaseStore) -> Any:
    @checkpointer_test(name=f"AgentSessionSaver on {store.url.split(':')[0]}")
    async def factory() -> Any:
        yield AgentSessionSaver(store)

    return asyncio.run(validate(factory))


def test_langgraph_conformance_passes_every_capability(store: BaseStore) -> None:
    report = _conformance(store)
    failures = {name: r.failures for name, r in report.results.items() if r.failures}
    assert failures == {}
    assert report.passed_all_base()
    for capability in BASE_CAPABILITIES | EXTENDED_CAPABILITIES:
        result = report.results[capability.value]
        assert result.detected, f"{capability.value} is not detected"
        assert result.passed is True, capability.value
    assert report.conformance_level() == "FULL"


def test_langgraph_conformance_passes_on_an_encrypted_store(tmp_path: Path) -> None:
    with open_store(tmp_path / "enc", passphrase="correct horse") as store:
        report = _conformance(store)
    assert report.conformance_level() == "FULL", report.to_dict()


# ---------------------------------------------------------------------------------------------
# A real graph: tool node, interrupt, resume elsewhere, time travel.


def test_a_graph_is_interrupted_resumed_from_another_store_and_time_travelled(
    shared_url: str,
) -> None:
    config = config_of("ada")
    with AgentSessionSaver(shared_url) as saver:
        graph = example.build(saver)
        first = graph.invoke({"messages": [HumanMessage("What is the weather in Paris?")]}, config)
        [pending] = first["__interrupt__"]
        assert pending.value["run"][0]["args"] == {"city": "Paris"}
        assert graph.get_state(config).next == ("approve",)

    with AgentSessionSaver(shared_url) as saver:  # a new store object: all from storage
        graph = example.build(saver)
        assert graph.get_state(config).next == ("approve",)
        done = graph.invoke(Command(resume="yes"), config)
        assert done["messages"][-1].content == "It is sunny and 21 degrees in paris."
        assert [m.type for m in done["messages"]] == ["human", "ai", "tool", "ai"]

        history = list(graph.get_state_history(config))
        assert [s.next for s in history] == [
            (),
            ("agent",),
            ("tools",),
            ("approve",),
            ("agent",),
            ("__start__",),
        ]
        for newer, older in itertools.pairwise(history):
            assert newer.parent_config is not None
            assert (
                newer.parent_config["configurable"]["checkpoint_id"]
                == (older.config["configurable"]["checkpoint_id"])
            )

        # Back to before the model ran: a second question there makes a fork.
        start = history[-2]
        fork = graph.update_state(start.config, {"messages": [HumanMessage("And in Rome?")]})
        assert graph.get_state(fork).values["messages"][-1].content == "And in Rome?"
        stopped = graph.invoke(None, fork)
        assert stopped["__interrupt__"][0].value["run"][0]["args"] == {"city": "Rome"}
        refused = graph.invoke(Command(resume="no"), config)
        assert [m.content for m in refused["messages"]] == [
            "What is the weather in Paris?",
            "And in Rome?",
            "",
            "Not allowed.",
            "I did not look.",
        ]
        # The first branch is still there, unchanged.
        old = graph.get_state(history[0].config)
        assert old.values["messages"][-1].content == "It is sunny and 21 degrees in paris."

        # The mirror: what was said, on both branches, provider-valid.
        session = saver.session("ada")
        derived = session.messages()
        assert [m.role for m in derived] == [
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant",
            "tool",
            "assistant",
        ]
        assert derived[4].text == "And in Rome?"
        assert provider_errors(derived) == []
        usage = [e.payload() for e in session.read() if e.type == "usage"]
        assert [u.input_tokens for u in usage] == [10, 30, 20]


def test_the_async_graph_api_runs_on_the_saver(tmp_path: Path) -> None:
    async def run() -> list[str]:
        config = config_of("async")
        with AgentSessionSaver(tmp_path / "s") as saver:
            graph = example.build(saver)
            await graph.ainvoke({"messages": [HumanMessage("Weather in Oslo?")]}, config)
            done = await graph.ainvoke(Command(resume="yes"), config)
            states = [s async for s in graph.aget_state_history(config)]
            assert len(states) == 6
            return [str(m.content) for m in done["messages"]]

    assert asyncio.run(run())[-1] == "It is sunny and 21 degrees in oslo."


# ---------------------------------------------------------------------------------------------
# What is stored.


def _events(store: BaseStore, session_id: str, kind: str) -> list[Any]:
    return [e for e in store.get(session_id).read() if e.type == kind]


class State(TypedDict):
    """The counting graph's state: a list channel (``operator.add``) and a counter."""

    items: Annotated[list[str], operator.add]
    steps: int


def _count_graph(saver: AgentSessionSaver) -> Any:
    """A graph adding one item to the list channel per step, for 40 steps."""

    def step(state: State) -> dict[str, Any]:
        return {"items": [f"item {state['steps']}"], "steps": state["steps"] + 1}

    def more(state: State) -> str:
        return "step" if state["steps"] < 40 else END

    builder = StateGraph(State)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", more)
    return builder.compile(checkpointer=saver)


def test_a_list_channel_is_stored_as_deltas_and_reads_back_whole(store: BaseStore) -> None:
    saver = AgentSessionSaver(store)
    graph = _count_graph(saver)
    config = config_of("count")
    graph.invoke({"items": [], "steps": 0}, config)
    blobs = [
        blob
        for event in _events(store, "lg:count", CHECKPOINT)
        for blob in event.decode(CheckpointData).blobs
        if blob.ch == "items"
    ]
    assert len(blobs) == 41  # one per version
    whole = [b for b in blobs if b.base is None]
    assert len(whole) <= 2  # the empty list, then the first item; deltas after
    assert SNAPSHOT_EVERY > 41
    # Each item's bytes are stored once: the blobs add up to little more than the last value.
    last = saver.serde.dumps_typed([f"item {i}" for i in range(40)])[1]
    assert sum(len(b.d) for b in blobs) < 2 * len(last) * 4 / 3 + 8 * 41
    history = list(graph.get_state_history(config))
    assert len(history) == 42
    for state in history:
        steps = state.values.get("steps", 0)
        assert state.values.get("items", []) == [f"item {i}" for i in range(steps)]


def test_values_are_stored_deflated_when_that_is_smaller(store: BaseStore) -> None:
    """A value, a pending write and a checkpoint that deflate smaller are stored deflated
    (``z``), small ones as they are, and all read back as given."""
    saver = AgentSessionSaver(store)
    long = "the same words again " * 400  # 8 KB that deflates well
    checkpoint: Checkpoint = {
        **empty_checkpoint(),
        "channel_values": {"long": long, "short": 7},
        "channel_versions": {"long": "1", "short": "1"},
    }
    stored = saver.put(config_of("z"), checkpoint, {"note": long}, {"long": "1", "short": "1"})
    saver.put_writes(stored, [("long", long), ("short", 8)], "task")
    [event] = _events(store, "lg:z", CHECKPOINT)
    data = event.decode(CheckpointData)
    blobs = {blob.ch: blob for blob in data.blobs}
    assert blobs["long"].z and len(blobs["long"].d) < len(long) // 10
    assert not blobs["short"].z
    assert data.z and len(data.md[1]) < len(long) // 10
    [event] = _events(store, "lg:z", WRITES)
    writes = {w.ch: w for w in event.decode(WritesData).w}
    assert writes["long"].z and len(writes["long"].d) < len(long) // 10
    assert not writes["short"].z
    tup = AgentSessionSaver(store).get_tuple(config_of("z"))
    assert tup is not None
    assert tup.checkpoint["channel_values"] == {"long": long, "short": 7}
    assert tup.metadata["note"] == long
    assert [(c, v) for _, c, v in tup.pending_writes or []] == [("long", long), ("short", 8)]


def test_a_retried_put_or_put_writes_is_stored_once(shared_url: str) -> None:
    config = config_of("retry")
    checkpoint = empty_checkpoint()
    with AgentSessionSaver(shared_url) as one, AgentSessionSaver(shared_url) as two:
        stored = one.put(config, checkpoint, {"source": "input", "step": -1}, {})
        two.put(config, checkpoint, {"source": "input", "step": -1}, {})
        writes = [("a", 1), ("b", {"x": [1, 2]}), (INTERRUPT, "why")]
        for saver in (one, two, one):
            saver.put_writes(stored, writes, "task-1", "path")
        tup = two.get_tuple(stored)
        assert tup is not None
        assert tup.pending_writes == [  # in writes_sort_key order: (path, task, index)
            ("task-1", INTERRUPT, "why"),
            ("task-1", "a", 1),
            ("task-1", "b", {"x": [1, 2]}),
        ]
        assert len(_events(one.store, "lg:retry", CHECKPOINT)) == 1
        [event] = _events(one.store, "lg:retry", WRITES)  # the call's writes: one event
        assert [w.idx for w in event.decode(WritesData).w] == [0, 1, -3]
        # A special write with another value replaces the first; a regular one does not.
        one.put_writes(stored, [("a", 2), (INTERRUPT, "again")], "task-1")
        tup = two.get_tuple(stored)
        assert tup is not None
        assert {w[1]: w[2] for w in tup.pending_writes or []} == {
            "a": 1,
            "b": {"x": [1, 2]},
            INTERRUPT: "again",
        }


def test_removals_are_events_and_nothing_is_deleted_but_by_delete_thread(
    store: BaseStore,
) -> None:
    saver = AgentSessionSaver(store)
    graph = _count_graph(saver)
    graph.invoke({"items": [], "steps": 0}, config_of("p"))
    before = len(store.get("lg:p").read())
    saver.prune(["p"])
    assert len(list(saver.list(config_of("p")))) == 1
    assert [e.type for e in store.get("lg:p").read()[before:]] == [REMOVED]
    # The kept checkpoint's list is a delta on removed versions: it still reads whole.
    latest = saver.get_tuple(config_of("p"))
    assert latest is not None
    assert latest.checkpoint["channel_values"]["items"] == [f"item {i}" for i in range(40)]
    saver.delete_thread("p")
    assert not store.exists("lg:p")
    assert saver.get_tuple(config_of("p")) is None


def test_the_store_argument_is_checked() -> None:
    with pytest.raises(UsageError, match="memory"):
        AgentSessionSaver("memory:")
    with pytest.raises(UsageError, match="store must be"):
        AgentSessionSaver(42)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="thread_id"):
        AgentSessionSaver(open_store("memory:")).get_tuple({"configurable": {}})


items = st.lists(
    st.one_of(
        st.integers(-(2**62), 2**62),
        st.text(max_size=20),
        st.dictionaries(st.text(max_size=5), st.integers(-(2**62), 2**62), max_size=3),
    ),
    max_size=40,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.booleans(), items), min_size=1, max_size=12))
def test_every_version_of_a_list_channel_reads_back_equal(
    steps: list[tuple[bool, list[Any]]],
) -> None:
    """Each step either extends the list or replaces it; every checkpoint reads back the
    value it was given, whether stored whole or as a delta."""
    store = open_store("memory:")
    saver = AgentSessionSaver(store)
    thread = uuid.uuid4().hex
    value: list[Any] = []
    version: str | None = None
    parent: str | None = None
    expected: dict[str, list[Any]] = {}
    for extend, new in steps:
        value = [*value, *new] if extend else new
        version = saver.get_next_version(version, None)
        checkpoint: Checkpoint = {
            **empty_checkpoint(),
            "channel_values": {"v": value},
            "channel_versions": {"v": version},
        }
        config = config_of(thread, **({"checkpoint_id": parent} if parent else {}))
        stored = saver.put(config, checkpoint, {"step": len(expected)}, {"v": version})
        parent = stored["configurable"]["checkpoint_id"]
        expected[parent] = value
    fresh = AgentSessionSaver(store)  # reads it all from the log
    for checkpoint_id, wanted in expected.items():
        tup = fresh.get_tuple(config_of(thread, checkpoint_id=checkpoint_id))
        assert tup is not None
        assert tup.checkpoint["channel_values"]["v"] == wanted
    # list() decodes each delta's items once for the whole call: every tuple still gets the
    # value it was given, in a list of its own
    listed = list(AgentSessionSaver(store).list(config_of(thread)))
    assert {t.config["configurable"]["checkpoint_id"] for t in listed} == set(expected)
    values = [t.checkpoint["channel_values"]["v"] for t in listed]
    for tup, value in zip(listed, values, strict=True):
        assert value == expected[tup.config["configurable"]["checkpoint_id"]]
    assert len({id(value) for value in values}) == len(values)
    store.close()


def test_a_history_read_decodes_each_message_once_and_gives_each_checkpoint_its_own_list(
    tmp_path: Path,
) -> None:
    """Reading a thread's history deserializes each message once, not once per checkpoint
    that holds it; changing one checkpoint's list leaves the others as they were."""
    golden = _load_golden()
    directory = tmp_path / "store"
    shutil.copytree(GOLDEN / "jsonl", directory)
    with AgentSessionSaver(str(directory)) as saver:
        made = 0
        loads = saver.serde.loads_typed

        def counting(data: tuple[str, bytes]) -> Any:
            nonlocal made
            value = loads(data)
            if isinstance(value, list):
                made += sum(isinstance(item, BaseMessage) for item in value)
            return value

        saver.serde.loads_typed = counting  # type: ignore[method-assign]
        history = list(saver.list({"configurable": {"thread_id": golden.THREAD}}))
        assert len(history) == 26
        lists = [t.checkpoint["channel_values"].get("messages", []) for t in history]
        held = sum(len(messages) for messages in lists)
        distinct = {m.id for messages in lists for m in messages}
        assert held > 10 * len(distinct)
        # each stored message decoded about once (the first run's whole lists and the second
        # run's taken-out versions included), not once per checkpoint that holds it
        assert made <= 2 * len(distinct) + 4
        lists[0].append(HumanMessage("only here"))
        assert all(len(m) < len(lists[0]) for m in lists[1:])
        assert golden.expected(saver) == json.loads((GOLDEN / "expected.json").read_text())


message_steps = st.lists(
    st.tuples(
        st.sampled_from(["add", "add", "add", "mutate", "extra", "replace", "same"]),
        st.text(max_size=12),
    ),
    min_size=1,
    max_size=14,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message_steps)
def test_a_message_list_changed_in_place_is_stored_as_changed(
    steps: list[tuple[str, str]],
) -> None:
    """The same list objects handed to ``put`` again and again, their messages added to,
    changed in place (content, tool calls, an extra field), replaced or left alone: each
    checkpoint reads back what the whole value's bytes at its ``put`` read back as."""
    from langchain_core.messages import AIMessage

    store = open_store("memory:")
    saver = AgentSessionSaver(store)
    thread = uuid.uuid4().hex
    value: list[Any] = []
    version: str | None = None
    parent: str | None = None
    expected: dict[str, bytes] = {}
    for number, (step, text) in enumerate(steps):
        if step == "add" or not value:
            value.append(AIMessage(text, id=f"m{number}"))
        elif step == "mutate":
            value[len(value) // 2].content += text
            value[-1].tool_calls.append({"name": "f", "args": {"t": text}, "id": f"c{number}"})
        elif step == "extra":
            value[0].additional_kwargs[f"k{number}"] = [text]
        elif step == "replace":
            value[-1] = AIMessage(text, id=value[-1].id)
        version = saver.get_next_version(version, None)
        checkpoint: Checkpoint = {
            **empty_checkpoint(),
            "channel_values": {"messages": value},
            "channel_versions": {"messages": version},
        }
        config = config_of(thread, **({"checkpoint_id": parent} if parent else {}))
        stored = saver.put(config, checkpoint, {}, {"messages": version})
        parent = stored["configurable"]["checkpoint_id"]
        expected[parent] = saver.serde.dumps_typed(value)
    fresh = AgentSessionSaver(store)
    for checkpoint_id, wanted in expected.items():
        tup = fresh.get_tuple(config_of(thread, checkpoint_id=checkpoint_id))
        assert tup is not None
        got = tup.checkpoint["channel_values"]["messages"]
        assert got == saver.serde.loads_typed(wanted)
        assert [m.model_dump() for m in got] == [
            m.model_dump() for m in saver.serde.loads_typed(wanted)
        ]
    store.close()


# ---------------------------------------------------------------------------------------------
# Copy and encryption.


def test_an_encrypted_thread_is_sealed_and_copies_with_copy_store_and_copy_thread(
    tmp_path: Path,
) -> None:
    config = config_of("ada")
    with open_store(tmp_path / "enc", passphrase="pw") as store:
        saver = AgentSessionSaver(store)
        graph = example.build(saver)
        graph.invoke({"messages": [HumanMessage("What is the weather in Paris?")]}, config)
        graph.invoke(Command(resume="yes"), config)
        _count_graph(saver).invoke({"items": [], "steps": 39}, config_of("count"))
        saver.copy_thread("ada", "bob")
        copied = store.get("lg:bob").latest_seq
        saver.copy_thread("ada", "bob")  # again: each event's id is there, nothing is stored
        assert store.get("lg:bob").latest_seq == copied
        with pytest.raises(UsageError, match="already has events"):
            saver.copy_thread("ada", "count")  # a thread of its own
        with open_store(tmp_path / "plain") as plain:
            copy_store(store, plain)
    raw = b"".join(p.read_bytes() for p in (tmp_path / "enc").rglob("*") if p.is_file())
    assert b"Paris" not in raw and b"paris" not in raw
    assert b"Paris" in b"".join(
        p.read_bytes() for p in (tmp_path / "plain").rglob("*") if p.is_file()
    )
    for where, options in ((tmp_path / "enc", {"passphrase": "pw"}), (tmp_path / "plain", {})):
        with open_store(where, **options) as reopened:
            saver = AgentSessionSaver(reopened)
            graph = example.build(saver)
            for thread in ("ada", "bob"):
                state = graph.get_state(config_of(thread))
                assert state.values["messages"][-1].content == (
                    "It is sunny and 21 degrees in paris."
                )
                assert len(list(graph.get_state_history(config_of(thread)))) == 6
                assert [m.role for m in saver.session(thread).messages()] == [
                    "user",
                    "assistant",
                    "tool",
                    "assistant",
                ]


def test_the_mirror_records_each_message_once_with_its_id(tmp_path: Path) -> None:
    with AgentSessionSaver(tmp_path / "s") as saver:
        graph = example.build(saver)
        config = config_of("m")
        graph.invoke({"messages": [HumanMessage("Thanks", id="h1")]}, config)
        graph.invoke({"messages": [HumanMessage("Thanks again", id="h2")]}, config)
        events = [e for e in saver.session("m").read() if META_KEY in e.meta]
        ids = [e.meta[META_KEY]["message"] for e in events if e.type != "usage"]
        assert ids[0] == "h1" and ids.count("h1") == 1 and "h2" in ids
        assert len(ids) == len(set(ids)) == 4


def test_a_put_that_fails_leaves_its_messages_to_the_next_puts_mirror(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A ``put`` whose append fails has not mirrored its messages: the next ``put`` of the
    channel mirrors them (once each), as if the failed one had never run."""
    from agentsession.integrations import langgraph as module

    store = open_store("memory:")
    saver = AgentSessionSaver(store)
    first = saver.put(config_of("f"), empty_checkpoint(), {"step": -1}, {})
    real = module._store
    failing = [True]

    def store_once_refused(session: Any, events: list[Any]) -> None:
        if failing.pop() if failing else False:
            raise ValueError("refused")
        real(session, events)

    monkeypatch.setattr(module, "_store", store_once_refused)
    said = [HumanMessage("Hello", id="h1")]
    checkpoint: Any = {**empty_checkpoint(), "id": "1f0-a", "channel_values": {"messages": said}}
    with pytest.raises(ValueError, match="refused"):
        saver.put(first, checkpoint, {"step": 0}, {"messages": "2"})
    assert not [e for e in store.get("lg:f").read() if META_KEY in e.meta]
    both = [*said, HumanMessage("Again", id="h2")]
    checkpoint = {**empty_checkpoint(), "id": "1f0-b", "channel_values": {"messages": both}}
    saver.put(first, checkpoint, {"step": 0}, {"messages": "3"})
    ids = [e.meta[META_KEY]["message"] for e in store.get("lg:f").read() if META_KEY in e.meta]
    assert ids == ["h1", "h2"]


# ---------------------------------------------------------------------------------------------
# Two processes resuming one thread.


def _resume_in_a_child(url: str, name: str, rounds: int) -> None:
    with open_store(url) as store:
        saver = AgentSessionSaver(store)
        graph = _count_graph(saver)
        for index in range(rounds):
            # One run at a time on the thread: each resumes from the latest checkpoint.
            with store.lock(saver.session_id("shared"), timeout=120):
                graph.invoke({"items": [f"{name}-{index}"], "steps": 40}, config_of("shared"))


def test_two_processes_resuming_one_thread_lose_no_write(shared_url: str) -> None:
    rounds = 8
    context = multiprocessing.get_context("fork")
    workers = [
        context.Process(target=_resume_in_a_child, args=(shared_url, name, rounds))
        for name in ("a", "b")
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
    for worker in workers:
        if worker.is_alive():
            worker.kill()
            worker.join()
    assert [w.exitcode for w in workers] == [0, 0]
    with open_store(shared_url) as store:
        saver = AgentSessionSaver(store)
        latest = saver.get_tuple(config_of("shared"))
        assert latest is not None
        items = latest.checkpoint["channel_values"]["items"]
        given = [item for item in items if not item.startswith("item ")]
        assert sorted(given) == sorted(f"{n}-{i}" for n in "ab" for i in range(rounds))
        assert len(items) == 2 * len(given)  # each run's input and its one step
        # Every run's checkpoints are all there, one chain.
        listed = list(saver.list(config_of("shared")))
        inputs = [t for t in listed if t.metadata["source"] == "input"]
        assert len(inputs) == 2 * rounds
        ids = [t.config["configurable"]["checkpoint_id"] for t in listed]
        parents = [
            t.parent_config["configurable"]["checkpoint_id"] for t in listed[:-1] if t.parent_config
        ]
        assert parents == ids[1:]


# ---------------------------------------------------------------------------------------------
# The example.


def test_the_langgraph_example_runs_without_a_warning(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-W",
            "error",
            str(ROOT / "examples" / "langgraph_example.py"),
            str(tmp_path / "s"),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert "on the fork: I did not look." in out.stdout
    assert "  tool: Sunny and 21 degrees in Paris." in out.stdout
    assert out.stderr == ""


# ---------------------------------------------------------------------------------------------
# Stored forms of earlier versions.

GOLDEN = Path(__file__).parent / "golden" / "langgraph_v1"


def test_a_thread_written_by_the_first_stored_form_still_reads(tmp_path: Path) -> None:
    """A thread written by the version that kept every channel value's bytes in the
    checkpoint events, uncompressed (tests/golden/langgraph_v1/make.py): every checkpoint
    reads back its values, pending writes and parent, and the thread goes on."""
    golden = _load_golden()
    directory = tmp_path / "store"
    shutil.copytree(GOLDEN / "jsonl", directory)
    with AgentSessionSaver(str(directory)) as saver:
        got = golden.expected(saver)
        assert got == json.loads((GOLDEN / "expected.json").read_text())
        assert len(got) == 26
        # the thread goes on from its latest checkpoint in the current form
        config = {"configurable": {"thread_id": golden.THREAD}, "recursion_limit": 50}
        graph = golden.graph(saver)
        graph.invoke({"messages": [HumanMessage("more", id="human-2")]}, config)
        state = graph.get_state(config)
        assert [m.id for m in state.values["messages"]][-2:] == ["human-2", "ai-24"]
        assert state.values["items"][-1] == "m24"
    with AgentSessionSaver(str(directory)) as fresh:
        again = golden.expected(fresh)
        for checkpoint_id, wanted in got.items():
            assert again[checkpoint_id] == wanted


def _load_golden() -> Any:
    spec = importlib.util.spec_from_file_location("langgraph_golden", GOLDEN / "make.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # the graph's state type hints are looked up there
    spec.loader.exec_module(module)
    return module


def _tuples(saver: AgentSessionSaver, thread_id: str) -> list[Any]:
    """Every checkpoint of a thread as plain data (what a saver hands LangGraph, less the
    thread id in the configs)."""
    return [
        (
            tup.config["configurable"]["checkpoint_id"],
            tup.parent_config and tup.parent_config["configurable"]["checkpoint_id"],
            tup.checkpoint,
            tup.metadata,
            tup.pending_writes,
        )
        for tup in saver.list(config_of(thread_id))
    ]


def _plainly(d: str, z: bool | int, preset: bytes | None = None) -> dict[str, Any]:
    """A value stored as ``d``, ``z`` in the form before the preset dictionaries: deflated
    without one (``z`` True) or as it is."""
    from agentsession.integrations.langgraph import _PRESET, _unsqueeze

    if z != 2:
        return {"d": d, "z": bool(z)}
    raw = _unsqueeze(d, z, preset or _PRESET)
    return {"d": base64.b64encode(zlib.compress(raw)).decode("ascii"), "z": True}


def test_a_thread_in_the_forms_before_reads_back_equal_and_goes_on(store: BaseStore) -> None:
    """The forms before ``langgraph/writes``, the checkpoint's shared version and the preset
    dictionary: each pending write its own ``langgraph/write`` event, each blob with its own
    version, values deflated without the dictionary (or not at all). A thread rewritten in
    that form reads back equal to the same thread as the saver now stores it, and goes on."""
    saver = AgentSessionSaver(store)
    _count_graph(saver).invoke({"items": [], "steps": 0}, config_of("now"))
    earlier = [*saver.list(config_of("now"))][5].config  # a special write too, and a path
    saver.put_writes(earlier, [("items", ["long " * 100]), (INTERRUPT, "why")], "task-i", "p")
    old: list[Any] = []
    for event in store.get("lg:now").read():
        if event.type == CHECKPOINT:
            data = event.decode(CheckpointData)
            if len(data.blobs) > 1:  # the version the blobs share is stored once
                assert data.v is not None and all(b.v == "" for b in data.blobs)
                assert all(b.v == data.v for b in data.blobs_read())
            blobs = [msgspec.structs.replace(b, **_plainly(b.d, b.z)) for b in data.blobs]
            from agentsession.integrations.langgraph import _CHECKPOINT_PRESET as PRESET
            from agentsession.integrations.langgraph import _unsqueeze

            assert data.z == 2
            md = _plainly(data.md[1], 2, PRESET)["d"]
            # the checkpoint held its id too, then
            skeleton = saver.serde.loads_typed((data.cp[0], _unsqueeze(data.cp[1], 2, PRESET)))
            assert "id" not in skeleton
            cp_type, cp_bytes = saver.serde.dumps_typed({**skeleton, "id": data.id})
            cp = base64.b64encode(zlib.compress(cp_bytes)).decode("ascii")
            whole = msgspec.structs.replace(
                data, blobs=blobs, cp=(cp_type, cp), md=(data.md[0], md), z=True
            )
            whole = msgspec.structs.replace(whole, blobs=whole.blobs_read(), v=None)
            old.append(Event.new(CHECKPOINT, whole))
            continue
        if event.type != WRITES:
            old.append(msgspec.structs.replace(event, seq=0, id=""))
            continue
        batch = event.decode(WritesData)
        for w in batch.w:
            write = WriteData(batch.cp, batch.task, w.idx, w.ch, w.t, ns=batch.ns, path=batch.path)
            old.append(Event.new(WRITE, msgspec.structs.replace(write, **_plainly(w.d, w.z))))
    assert sum(e.type == WRITE for e in old) > len(_events(store, "lg:now", WRITES))
    assert any(w.z == 2 for e in _events(store, "lg:now", WRITES) for w in e.decode(WritesData).w)
    assert not any(
        b.z == 2 for e in old if e.type == CHECKPOINT for b in e.decode(CheckpointData).blobs
    )
    store.get("lg:old").append_many(old)
    fresh = AgentSessionSaver(store)
    assert _tuples(fresh, "old") == _tuples(fresh, "now")
    assert any(tup[4] for tup in _tuples(fresh, "old"))
    assert any(w.z for e in _events(store, "lg:old", WRITE) for w in [e.decode(WriteData)])
    # the thread goes on (its list's deltas extend the old form's), writes in the new form
    final = _count_graph(fresh).invoke({"items": [], "steps": 0}, config_of("old"))
    assert final["items"] == [f"item {i}" for i in range(40)] * 2
    assert _events(store, "lg:old", WRITES)


def _wait_for(condition: Any) -> None:
    """Wait until ``condition()`` holds (another thread's progress); fails after 30 s."""
    for _ in range(3000):
        if condition():
            return
        threading.Event().wait(0.01)
    raise AssertionError("the other threads did not get there")


def test_calls_that_overlap_are_stored_in_one_append_each_returning_once_stored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While one append of a thread runs, the calls that arrive queue; the next stores all
    their events in one append (the first caller's first, then in the order they came), and
    each call returns only once its own events are in the log. When that combined append
    fails, each call is appended on its own, so only the call at fault raises."""
    from agentsession.integrations import langgraph as module

    store = open_store("memory:")
    saver = AgentSessionSaver(store)
    first = saver.put(config_of("g"), empty_checkpoint(), {"step": -1}, {})
    writer = saver._thread("g", read=False).writer
    before = writer.appends
    entered, release = threading.Event(), threading.Event()
    calls: list[list[str]] = []
    real = module._store

    def store_held(session: Any, events: list[Any]) -> None:
        calls.append([e.type for e in events])
        if len(calls) == 1:
            entered.set()
            release.wait(30)
        if any(e.type == WRITES and e.decode(WritesData).task == "bad" for e in events):
            raise ValueError("refused")
        real(session, events)

    monkeypatch.setattr(module, "_store", store_held)
    monkeypatch.setattr(module, "_LINGER", 0.0)
    stored_on_return: dict[str, bool] = {}
    errors: dict[str, BaseException] = {}

    def write(task: str) -> None:
        try:
            saver.put_writes(first, [("a", task)], task)
        except BaseException as exc:
            errors[task] = exc
            return
        stored_on_return[task] = any(
            e.type == WRITES and e.decode(WritesData).task == task for e in store.get("lg:g").read()
        )

    def put() -> None:
        checkpoint = {**empty_checkpoint(), "id": "1f0-second"}
        saver.put(first, checkpoint, {"step": 0}, {})
        stored_on_return["put"] = any(
            e.type == CHECKPOINT and e.decode(CheckpointData).id == "1f0-second"
            for e in store.get("lg:g").read()
        )

    leader = threading.Thread(target=write, args=("one",))
    leader.start()
    assert entered.wait(30)
    others = [threading.Thread(target=write, args=(t,)) for t in ("two", "bad", "three")]
    others.append(threading.Thread(target=put))
    for queued, thread in enumerate(others, start=1):
        thread.start()
        _wait_for(lambda n=queued: len(writer.queue) == n)  # queued in this order
    release.set()
    for thread in [leader, *others]:
        thread.join(30)
    # the leader's append; the four queued calls in one; that failing, each on its own
    assert calls[:2] == [[WRITES], [WRITES, WRITES, WRITES, CHECKPOINT]]
    assert calls[2:] == [[WRITES], [WRITES], [WRITES], [CHECKPOINT]]
    assert writer.appends - before == 6
    assert stored_on_return == {"one": True, "two": True, "three": True, "put": True}
    assert isinstance(errors.pop("bad"), ValueError) and not errors
    tup = AgentSessionSaver(store).get_tuple(first)
    assert tup is not None
    assert sorted(v for _, _, v in tup.pending_writes or []) == ["one", "three", "two"]


def test_a_steps_writes_wait_for_its_checkpoint_and_are_stored_with_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``put_writes`` with nothing else queued waits (up to ``_LINGER``) for the ``put`` that
    follows it: both are one append, made by the put's caller. A wait that sees no ``put``
    come stores the writes alone and the next calls do not wait."""
    from agentsession.integrations import langgraph as module

    store = open_store("memory:")
    saver = AgentSessionSaver(store)
    first = saver.put(config_of("l"), empty_checkpoint(), {"step": -1}, {})
    writer = saver._thread("l", read=False).writer
    calls: list[list[str]] = []
    real = module._store

    callers: list[threading.Thread] = []

    def store_seen(session: Any, events: list[Any]) -> None:
        calls.append([e.type for e in events])
        callers.append(threading.current_thread())
        real(session, events)

    monkeypatch.setattr(module, "_store", store_seen)
    monkeypatch.setattr(module, "_LINGER", 60.0)  # only a put ends the wait here
    writes = threading.Thread(target=saver.put_writes, args=(first, [("a", 1)], "task"))
    writes.start()
    _wait_for(lambda: writer.busy)
    assert calls == []  # waiting for the put
    saver.put(first, {**empty_checkpoint(), "id": "1f0-next"}, {"step": 0}, {})
    writes.join(30)
    assert calls == [[WRITES, CHECKPOINT]]
    assert callers == [threading.current_thread()]  # stored by the put's caller
    monkeypatch.setattr(module, "_LINGER", 0.01)
    saver.put_writes(first, [("b", 2)], "task-2")  # no put follows
    assert writer.skip == module._LINGER_AFTER_MISS
    monkeypatch.setattr(module, "_LINGER", 60.0)
    saver.put_writes(first, [("c", 3)], "task-3")  # stored at once: no wait after a miss
    assert calls[1:] == [[WRITES], [WRITES]]
    tup = AgentSessionSaver(store).get_tuple(first)
    assert tup is not None
    assert [(c, v) for _, c, v in tup.pending_writes or []] == [("a", 1), ("b", 2), ("c", 3)]


@pytest.mark.parametrize("channel", ["__interrupt__", "__error__"])
def test_writes_that_end_a_step_do_not_wait_for_a_checkpoint(
    monkeypatch: pytest.MonkeyPatch, channel: str
) -> None:
    """An interrupt's or an error's writes end the super-step: no ``put`` follows them, so
    they are stored at once instead of waiting (which would delay every interrupted run)."""
    from agentsession.integrations import langgraph as module

    store = open_store("memory:")
    saver = AgentSessionSaver(store)
    first = saver.put(config_of("e"), empty_checkpoint(), {"step": -1}, {})
    writer = saver._thread("e", read=False).writer
    monkeypatch.setattr(module, "_LINGER", 60.0)  # a wait would only end with a put
    done = threading.Event()

    def write() -> None:
        saver.put_writes(first, [(channel, "why")], "task")
        done.set()

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    assert done.wait(30), "the writes waited for a checkpoint"
    thread.join(30)
    assert writer.misses == 0 and writer.skip == 0 and writer.appends == 2
    tup = AgentSessionSaver(store).get_tuple(first)
    assert tup is not None
    assert [(c, v) for _, c, v in tup.pending_writes or []] == [(channel, "why")]
    # Other writes still wait for their checkpoint: a put ends the wait.
    other = threading.Thread(target=saver.put_writes, args=(first, [("a", 1)], "task-2"))
    other.start()
    _wait_for(lambda: writer.lingering)
    saver.put(first, {**empty_checkpoint(), "id": "1f0-next"}, {"step": 0}, {})
    other.join(30)
    assert writer.appends == 3  # the writes and the checkpoint: one append


@pytest.mark.parametrize("channel", ["__interrupt__", "__error__"])
def test_writes_that_end_a_step_relieve_a_leader_waiting_for_a_checkpoint(
    monkeypatch: pytest.MonkeyPatch, channel: str
) -> None:
    """A leader waiting for a ``put`` to take its writes stops waiting when a parallel task's
    interrupt or error comes instead (no ``put`` follows it): both calls' writes are stored
    in one append, at once."""
    from agentsession.integrations import langgraph as module

    store = open_store("memory:")
    saver = AgentSessionSaver(store)
    first = saver.put(config_of("e"), empty_checkpoint(), {"step": -1}, {})
    writer = saver._thread("e", read=False).writer
    monkeypatch.setattr(module, "_LINGER", 60.0)  # a wait would only end with a put
    waiting = threading.Thread(target=saver.put_writes, args=(first, [("a", 1)], "task-1"))
    waiting.start()
    _wait_for(lambda: writer.lingering)
    ending = threading.Thread(target=saver.put_writes, args=(first, [(channel, "why")], "task-2"))
    ending.start()
    waiting.join(30)
    ending.join(30)
    assert not waiting.is_alive() and not ending.is_alive(), "the writes waited for a checkpoint"
    assert writer.appends == 2  # the first put, then both calls' writes in one append
    tup = AgentSessionSaver(store).get_tuple(first)
    assert tup is not None
    assert sorted((c, v) for _, c, v in tup.pending_writes or []) == sorted(
        [("a", 1), (channel, "why")]
    )


def test_the_version_blobs_share_is_stored_once_and_read_back_for_each(
    store: BaseStore,
) -> None:
    """A checkpoint's blobs leave out the version most of them have (the checkpoint's ``v``);
    each reads back with its own, whatever its type, an empty version included."""
    saver = AgentSessionSaver(store)
    versions: dict[str, Any] = {"a": "7.x", "b": "7.x", "c": 7, "d": 7.0, "e": "7.x"}
    checkpoint: Checkpoint = {
        **empty_checkpoint(),
        "channel_values": {"a": [1], "b": "two", "c": 3, "d": {"four": 4}},
        "channel_versions": versions,
    }
    stored = saver.put(config_of("v"), checkpoint, {}, versions)
    [event] = _events(store, "lg:v", CHECKPOINT)
    data = event.decode(CheckpointData)
    assert data.v == "7.x"
    assert [(b.ch, b.v) for b in data.blobs] == [
        ("a", ""),
        ("b", ""),
        ("c", 7),
        ("d", 7.0),
        ("e", ""),
    ]
    read = [(b.ch, b.v, type(b.v)) for b in data.blobs_read()]
    assert read == [(ch, v, type(v)) for ch, v in versions.items()]
    tup = AgentSessionSaver(store).get_tuple(stored)
    assert tup is not None
    assert tup.checkpoint["channel_values"] == checkpoint["channel_values"]
    # an empty version is never taken for the shared one
    versions = {"a": "", "b": "8.x", "c": "8.x"}
    checkpoint = {**empty_checkpoint(), "channel_values": {"a": 1, "b": 2, "c": 3}}
    checkpoint["channel_versions"] = versions
    stored = saver.put(stored, checkpoint, {}, versions)
    data = _events(store, "lg:v", CHECKPOINT)[-1].decode(CheckpointData)
    assert data.v is None and [b.v for b in data.blobs_read()] == ["", "8.x", "8.x"]
    tup = AgentSessionSaver(store).get_tuple(stored)
    assert tup is not None and tup.checkpoint["channel_values"] == {"a": 1, "b": 2, "c": 3}
