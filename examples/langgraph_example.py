"""A LangGraph graph checkpointed in agentsession: a ``StateGraph`` with a model node, a tool
node and a human approval (``interrupt()``) before the tool runs, over a rule-based model (no
network, no API key). The run stops at the approval, resumes from the store (as another
process would), then travels back to before the model ran and asks again on a fork, where the
tool is refused; the thread's session shows the conversation to agentsession's own tools.

    pip install 'agentsession[langgraph]'
    python examples/langgraph_example.py [DIRECTORY]
"""

from __future__ import annotations

import re
import sys
import tempfile
from collections.abc import Sequence
from typing import Any, Literal

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt

from agentsession.integrations.langgraph import AgentSessionSaver


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny and 21 degrees in {city}."


class RuleModel(BaseChatModel):
    """Calls ``get_weather`` for a question naming a city, answers from a tool's result."""

    @property
    def _llm_type(self) -> str:
        return "rules"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> RuleModel:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        last = messages[-1]
        usage = {"input_tokens": 10 * len(messages), "output_tokens": 5, "total_tokens": 0}
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
        if isinstance(last, ToolMessage):
            reply = AIMessage(f"It is {str(last.content).lower()}", usage_metadata=usage)
        elif (found := re.search(r"\b([A-Z][a-z]+)\?", str(last.content))) is not None:
            call = {
                "name": "get_weather",
                "args": {"city": found[1]},
                "id": f"call_{len(messages)}",
            }
            reply = AIMessage("", tool_calls=[call], usage_metadata=usage)
        else:
            reply = AIMessage("You are welcome.", usage_metadata=usage)
        return ChatResult(generations=[ChatGeneration(message=reply)])


def build(saver: AgentSessionSaver) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The graph: model, then (for a tool call) a human's approval, then the tool."""
    model = RuleModel().bind_tools([get_weather])

    def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [model.invoke(state["messages"])]}

    def route(state: MessagesState) -> Literal["approve", "__end__"]:
        last = state["messages"][-1]
        return "approve" if isinstance(last, AIMessage) and last.tool_calls else END

    def approve(state: MessagesState) -> Command[Literal["tools", "__end__"]]:
        answer = interrupt({"run": state["messages"][-1].tool_calls})  # type: ignore[attr-defined]
        if answer == "yes":
            return Command(goto="tools")
        calls = state["messages"][-1].tool_calls  # type: ignore[attr-defined]
        refused = [ToolMessage("Not allowed.", tool_call_id=c["id"]) for c in calls]
        return Command(goto=END, update={"messages": [*refused, AIMessage("I did not look.")]})

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("approve", approve)
    builder.add_node("tools", ToolNode([get_weather]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


def main(directory: str) -> None:
    config: RunnableConfig = {"configurable": {"thread_id": "ada"}}
    with AgentSessionSaver(directory) as saver:
        graph = build(saver)
        result = graph.invoke({"messages": [HumanMessage("What is the weather in Paris?")]}, config)
        print("interrupted:", result["__interrupt__"][0].value)

    # Another process (here: a new saver and store) resumes the thread from the store.
    with AgentSessionSaver(directory) as saver:
        graph = build(saver)
        result = graph.invoke(Command(resume="yes"), config)
        print("assistant:", result["messages"][-1].content)

        # Time travel: back to before the model first ran, a second question added there
        # (update_state makes a fork of the thread), and this time the tool is refused.
        history = list(graph.get_state_history(config))
        first = next(s for s in reversed(history) if s.next == ("agent",))
        fork = graph.update_state(first.config, {"messages": [HumanMessage("And in Rome?")]})
        graph.invoke(None, fork)  # stops at the approval again
        result = graph.invoke(Command(resume="no"), config)
        print("on the fork:", result["messages"][-1].content)
        print(f"{len(list(graph.get_state_history(config)))} checkpoints in the thread")

        session = saver.session("ada")
        print(f"\nagentsession's view of {session.id} in {session.location}:")
        for message in session.messages():
            said = message.text or ", ".join(c.name for c in message.tool_calls)
            print(f"  {message.role}: {said or message.tool_results[0].content}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="agentsession-"))
