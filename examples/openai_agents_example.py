"""An OpenAI Agents SDK agent with a durable agentsession session: a tool call, a restart that
resumes the conversation from the store, an undo, and the log it all left.

A scripted model stands in for OpenAI's (no network, no API key). Needs the
``openai-agents`` extra: ``pip install 'agentsession[openai-agents]'``.

    python examples/openai_agents_example.py [DIRECTORY]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from agentsession.integrations.openai_agents import OpenAIAgentsSession


class ScriptedModel(Model):
    """A model that answers each call with the next of its scripted outputs, and remembers
    the input it was sent."""

    def __init__(self, outputs: list[list[Any]]) -> None:
        self.outputs = outputs
        self.inputs: list[Any] = []

    def _next(self, model_input: Any) -> list[Any]:
        self.inputs.append(model_input)
        return self.outputs.pop(0)

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        return ModelResponse(output=self._next(input), usage=Usage(), response_id=None)

    async def stream_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> AsyncIterator[Any]:
        response = Response(
            id="resp_1",
            created_at=0,
            model="scripted",
            object="response",
            output=self._next(input),
            tool_choice="auto",
            tools=[],
            parallel_tool_calls=False,
        )
        yield ResponseCompletedEvent(
            type="response.completed", response=response, sequence_number=0
        )


def say(text: str, item_id: str) -> ResponseOutputMessage:
    """An assistant message output item."""
    return ResponseOutputMessage(
        id=item_id,
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


async def main(directory: str) -> None:
    """Run the conversation against the JSONL store in ``directory``."""
    set_tracing_disabled(True)
    weather_call = ResponseFunctionToolCall(
        id="fc_1",
        call_id="call_1",
        type="function_call",
        name="get_weather",
        arguments='{"city": "Paris"}',
    )
    model = ScriptedModel(
        [
            [weather_call],
            [say("It is sunny in Paris.", "msg_1")],
            [say("Tomorrow too, I expect.", "msg_2")],
        ]
    )
    agent = Agent(name="weather", instructions="Be brief.", model=model, tools=[get_weather])

    session = OpenAIAgentsSession("user-42", store=directory)
    result = await Runner.run(agent, "What is the weather in Paris?", session=session)
    print("agent:", result.final_output)
    session.close()

    # What a restarted process does: the conversation is read back from the store.
    session = OpenAIAgentsSession("user-42", store=directory)
    result = await Runner.run(agent, "And tomorrow?", session=session)
    print("agent:", result.final_output)
    print(f"the model was sent {len(model.inputs[-1])} items: the whole conversation so far")

    undone = await session.pop_item()  # an undo: the last answer leaves the item list...
    print("undone:", undone)
    print(f"{len(await session.get_items())} items remain")

    log = await session.log()  # ...and the log keeps it, with the pop as an event of its own
    for event in await log.read():
        print(f"  {event.seq:3} {event.type}")
    session.close()
    print(f"see it with: agentsession --store {directory} show user-42")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()))
