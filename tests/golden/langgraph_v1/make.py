"""Make the LangGraph golden store in this directory (run from the repository root).

    python tests/golden/langgraph_v1/make.py

Writes ``jsonl/``, a JSONL store holding one thread, ``lg:golden``, written through
:class:`agentsession.integrations.langgraph.AgentSessionSaver`: a graph of :data:`STEPS`
super-steps (run ``run-1``) that alternately adds an ``AIMessage`` with a tool call and its
``ToolMessage`` to the ``messages`` channel and an item to an ``operator.add`` list channel,
then a second run (``run-2``) whose checkpoints ``delete_for_runs`` took out. It was made
by the version that stored every channel value's bytes (whole or delta) in the checkpoint
event, uncompressed;
``expected.json`` holds, for every checkpoint id, the values a reader must rebuild (messages
as ``[type, id, content]``), its pending writes' channels and its parent.
``tests/test_integration_langgraph.py`` checks that later versions still read it so. Never
edit the outputs by hand.
"""

from __future__ import annotations

import json
import operator
import shutil
from pathlib import Path
from typing import Annotated, Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.graph import START, MessagesState, StateGraph

import agentsession as ags
from agentsession.integrations.langgraph import AgentSessionSaver

STEPS = 24
"""Super-steps of the run."""
THREAD = "golden"
"""The thread id."""


class State(MessagesState):
    """Messages, a list channel and a step counter."""

    items: Annotated[list[str], operator.add]
    steps: int


def graph(saver: AgentSessionSaver) -> Any:
    """The model/tool loop of :data:`STEPS` super-steps."""

    def model(state: State) -> dict[str, Any]:
        n = state.get("steps", 0)
        call = {"name": "lookup", "args": {"n": n}, "id": f"call_{n}"}
        reply = AIMessage(f"looking up {n}", tool_calls=[call], id=f"ai-{n}")
        return {"messages": [reply], "items": [f"m{n}"], "steps": n + 1}

    def tool(state: State) -> dict[str, Any]:
        n = state["steps"]
        result = ToolMessage(f"result {n}", tool_call_id=f"call_{n - 1}", id=f"tool-{n}")
        return {"messages": [result], "items": [f"t{n}"], "steps": n + 1}

    def after_model(state: State) -> Literal["tool", "__end__"]:
        return "tool" if state["steps"] < STEPS else "__end__"

    def after_tool(state: State) -> Literal["model", "__end__"]:
        return "model" if state["steps"] < STEPS else "__end__"

    builder = StateGraph(State)
    builder.add_node("model", model)
    builder.add_node("tool", tool)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", after_model)
    builder.add_conditional_edges("tool", after_tool)
    return builder.compile(checkpointer=saver)


def summary(value: Any) -> Any:
    """A value as JSON: each message as ``[type, id, content]``, wherever it is."""
    if isinstance(value, BaseMessage):
        return [value.type, value.id, value.content]
    if isinstance(value, dict):
        return {str(k): summary(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [summary(v) for v in value]
    return value


def expected(saver: AgentSessionSaver) -> dict[str, Any]:
    """What the thread's checkpoints hold, by checkpoint id."""
    config = {"configurable": {"thread_id": THREAD}}
    return {
        tup.config["configurable"]["checkpoint_id"]: {
            "values": summary(tup.checkpoint["channel_values"]),
            "writes": sorted(channel for _, channel, _ in tup.pending_writes or []),
            "parent": (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
        }
        for tup in saver.list(config)
    }


def main() -> None:
    here = Path(__file__).parent
    directory = here / "jsonl"
    shutil.rmtree(directory, ignore_errors=True)
    store = ags.open_store(directory)
    saver = AgentSessionSaver(store)
    config: dict[str, Any] = {
        "configurable": {"thread_id": THREAD},
        "recursion_limit": STEPS + 10,
        "metadata": {"run_id": "run-1"},
    }
    compiled = graph(saver)
    compiled.invoke(
        {"messages": [HumanMessage("go", id="human-0")], "items": [], "steps": 0},
        config,
        durability="sync",
    )
    # a second run, then taken out: its checkpoints are removed, their events stay
    config["metadata"] = {"run_id": "run-2"}
    compiled.invoke({"messages": [HumanMessage("again", id="human-1")]}, config)
    saver.delete_for_runs(["run-2"])
    wanted = expected(AgentSessionSaver(store))
    (here / "expected.json").write_text(json.dumps(wanted, indent=1, sort_keys=True) + "\n")
    store.close()
    # the store's catalog is derived from the logs, and a store rebuilds it: leave it out
    for derived in (directory / ".meta").glob("catalog.*"):
        derived.unlink()


if __name__ == "__main__":
    main()
