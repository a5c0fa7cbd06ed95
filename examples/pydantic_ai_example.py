"""A Pydantic AI agent with its conversation in agentsession: an ``Agent`` with a tool, over a
scripted ``FunctionModel`` (no network, no API key). Each turn loads the history, runs the
agent on it and saves the run's new messages (a second save stores nothing); a new store object
then reads the conversation back, as Pydantic AI's messages and as agentsession's history.

    pip install 'agentsession[pydantic-ai]'
    python examples/pydantic_ai_example.py [DIRECTORY]
"""

from __future__ import annotations

import sys
import tempfile

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

import agentsession as ags
from agentsession.integrations.pydantic_ai import MessageStore


def scripted_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Calls ``add`` for a prompt ``add A B``, then answers with what the tool returned."""
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    for part in last.parts:
        if isinstance(part, ToolReturnPart):
            return ModelResponse(
                parts=[TextPart(f"the sum is {part.content}")],
                usage=RequestUsage(input_tokens=30, output_tokens=6),
            )
        if isinstance(part, UserPromptPart) and isinstance(part.content, str):
            _, a, b = part.content.split()
            return ModelResponse(
                parts=[ToolCallPart("add", {"a": int(a), "b": int(b)})],
                usage=RequestUsage(input_tokens=24, output_tokens=8),
            )
    raise ValueError("nothing to answer")


agent = Agent(FunctionModel(scripted_model), system_prompt="Add numbers with the tool.")


@agent.tool_plain
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def main(directory: str) -> None:
    with MessageStore("web:ada", store=directory) as history:
        for question in ("add 1 2", "add 3 30"):
            result = agent.run_sync(question, message_history=history.load())
            stored = history.save(result)
            again = history.save(result)  # a retried save: the run id makes it a no-op
            print(f"user: {question}\nassistant: {result.output}  ({stored} stored, {again})")

    # Another process (here: a new store object) reads the same conversation back.
    reopened = ags.open_store(directory)
    history = MessageStore("web:ada", store=reopened)
    messages = history.load()
    print(f"\n{len(messages)} Pydantic AI messages in {reopened.location}:")
    for message in messages:
        print(f"  {message.kind}: {[part.part_kind for part in message.parts]}")
    session = history.log()
    print("agentsession's history:", [m.role for m in session.messages()])
    usage = [e.payload() for e in session.read() if e.type == "usage"]
    print("usage events:", [(u.input_tokens, u.output_tokens) for u in usage])
    reopened.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="agentsession-"))
