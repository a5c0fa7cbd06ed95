"""A LangChain agent with its conversation in agentsession: ``create_agent`` (LangChain 1.x's
agent, a LangGraph graph) with a tool, over a scripted model (no network, no API key). Each
turn loads the history, runs the agent on it plus the new question, and adds the messages the
run produced; a new store object then reads the conversation back, and clearing it deletes
nothing.

    pip install 'agentsession[langchain]' langchain
    python examples/langchain_example.py [DIRECTORY]
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool

import agentsession as ags
from agentsession.integrations.langchain import AgentSessionChatHistory


class ScriptedModel(GenericFakeChatModel):
    """Answers from a list; takes the agent's tools as a real chat model would."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:
        return self


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny and 21 degrees in {city}."


def scripted_model() -> ScriptedModel:
    call = {"name": "get_weather", "args": {"city": "Paris"}, "id": "call_1"}
    usage = {"input_tokens": 24, "output_tokens": 8, "total_tokens": 32}
    return ScriptedModel(
        messages=iter(
            [
                AIMessage("", tool_calls=[call], usage_metadata=usage),
                AIMessage("It is sunny in Paris, 21 degrees.", usage_metadata=usage),
                AIMessage("You asked about Paris."),
            ]
        )
    )


def ask(agent: Any, store: ags.BaseStore, session_id: str, question: str) -> str:
    """One turn: the stored history plus the question in, the run's new messages stored."""
    history = AgentSessionChatHistory(session_id, store=store)
    before = history.messages
    result = agent.invoke({"messages": [*before, HumanMessage(question)]})
    history.add_messages(result["messages"][len(before) :])  # one atomic batch
    return str(result["messages"][-1].content)


def main(directory: str) -> None:
    store = ags.open_store(directory)
    agent = create_agent(scripted_model(), tools=[get_weather], system_prompt="Be brief.")
    for question in ("What is the weather in Paris?", "Which city did I ask about?"):
        print(f"user: {question}\nassistant: {ask(agent, store, 'web:ada', question)}")
    store.close()

    # Another process (here: a new store object) reads the same history back.
    reopened = ags.open_store(directory)
    history = AgentSessionChatHistory("web:ada", store=reopened)
    print(f"\n{len(history.messages)} LangChain messages in {history.session.location}:")
    for message in history.messages:
        print(f"  {message.type}: {message.content or message.tool_calls}")  # type: ignore[attr-defined]
    session = history.session
    print("agentsession's history:", [m.role for m in session.messages()])
    usage = [e.payload() for e in session.read() if e.type == "usage"]
    print("usage events:", [(u.input_tokens, u.output_tokens) for u in usage])

    history.clear()  # a marker: nothing is deleted
    print(f"\nafter clear(): {history.messages} ({len(session.read())} events kept)")
    reopened.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="agentsession-"))
