"""Run a Google ADK agent whose sessions live in an agentsession store (no network, no key).

    python examples/adk_example.py [STORE]

``STORE`` is a directory (the default: a new temporary one), ``sqlite:///file.db`` or
``postgresql://...``. A scripted model stands in for Gemini: asked about the weather, it calls
the ``get_weather`` tool, then answers with what the tool returned. The tool keeps the city in
``user:`` state (shared by all the user's sessions). After two turns the service is closed and
a new one, as after a restart, reads the session back; agentsession's own view of the same log
(the provider-neutral history) is printed too, and the CLI shows it with
``agentsession --store STORE show <id>``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import AsyncGenerator

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from agentsession.integrations.adk import AgentSessionService, session_key

APP = "weather_app"
USER = "user-1"


class ScriptedModel(BaseLlm):
    """A model that calls ``get_weather`` for the city in the user's question, then answers
    with the tool's result: enough of an LLM to drive ADK's runner in a test."""

    model: str = "scripted-weather"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """One reply: a function call, or the answer once the function responded."""
        last = llm_request.contents[-1] if llm_request.contents else None
        parts = last.parts or [] if last is not None else []
        answered = [p.function_response for p in parts if p.function_response is not None]
        if answered:
            result = (answered[0].response or {}).get("result", "unknown")
            reply = types.Part(text=f"The weather: {result}.")
        else:
            question = " ".join(p.text or "" for p in parts)
            city = question.rstrip("?").split()[-1] if question.strip() else "Paris"
            call = types.FunctionCall(name="get_weather", args={"city": city})
            reply = types.Part(function_call=call)
        usage = types.GenerateContentResponseUsageMetadata(
            prompt_token_count=40, candidates_token_count=8, total_token_count=48
        )
        content = types.Content(role="model", parts=[reply])
        yield LlmResponse(content=content, usage_metadata=usage)


def get_weather(city: str, tool_context: ToolContext) -> dict[str, str]:
    """The weather in ``city`` (always sunny here); remembers the city for the user."""
    tool_context.state["user:last_city"] = city
    return {"result": f"sunny in {city}"}


async def ask(runner: Runner, session_id: str, text: str) -> str:
    """Run one turn; returns the agent's final text."""
    message = types.Content(role="user", parts=[types.Part(text=text)])
    answer = ""
    async for event in runner.run_async(user_id=USER, session_id=session_id, new_message=message):
        if event.is_final_response() and event.content and event.content.parts:
            answer = "".join(p.text or "" for p in event.content.parts)
    return answer


async def main(store: str) -> None:
    """Two turns, a restart, and the session read back."""
    agent = LlmAgent(
        name="weather_agent",
        model=ScriptedModel(),
        instruction="Answer weather questions with the get_weather tool.",
        tools=[get_weather],
        output_key="last_answer",
    )
    async with AgentSessionService(store) as service:
        runner = Runner(agent=agent, app_name=APP, session_service=service)
        session = await service.create_session(app_name=APP, user_id=USER, state={"units": "C"})
        for question in ("What is the weather in Paris?", "And in Oslo?"):
            print(f"user:  {question}\nagent: {await ask(runner, session.id, question)}")

    async with AgentSessionService(store) as service:  # a new process would do the same
        reloaded = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert reloaded is not None
        print(f"\n{len(reloaded.events)} ADK events; state: {reloaded.state}")
        log = service.store.sync.get(session_key(APP, USER, session.id))
        print(f"agentsession id {log.id!r}: {log.latest_seq} events; the history:")
        for message in log.messages():
            calls = ", ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
            results = ", ".join(r.content for r in message.tool_results)
            print(f"  {message.role:<9} {message.text or calls or results}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()))
