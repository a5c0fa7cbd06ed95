"""``agentsession compact`` on sessions written by the framework integrations: what it does
to what each framework sends, and what it prints about that."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("google.adk")
pytest.importorskip("agents")

from agentsession import open_store
from agentsession.cli import cli
from agentsession.compaction import COMPACTION_EFFECT_KIND
from agentsession.events import USER_MESSAGE, Event
from agentsession.integrations.adk import AgentSessionService, session_key
from agentsession.integrations.openai_agents import COMPACTION_EFFECT, OpenAIAgentsSession
from agentsession.messages import Message

from .test_integration_adk import _ask, _sent, _texts, _three_weather_turns, _weather_runner


def invoke(store: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--store", str(store), *args], env={"COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


def test_compact_of_an_adk_session_shortens_what_the_runner_sends_and_warns_of_nothing(
    tmp_path: Path,
) -> None:
    async def three_turns() -> str:
        async with AgentSessionService(str(tmp_path)) as service:
            _, session = await _three_weather_turns(service)
            return session.id

    session_id = asyncio.run(three_turns())
    sid = session_key("app", "ada", session_id)
    code, out, err = invoke(
        tmp_path, "compact", sid, "--keep-turns", "1", "--summary", "Paris and Oslo."
    )
    assert code == 0, err
    assert "compacted at seq" in out
    assert err == ""

    async def next_turn() -> list[str]:
        async with AgentSessionService(str(tmp_path)) as service:
            runner = _weather_runner(service)
            await _ask(runner, session_id, "Weather in Bern?")
            return _texts(_sent(runner)[0])

    sent = asyncio.run(next_turn())
    assert sent[0] == "model: Paris and Oslo."
    assert sent[1:] == [
        "user: Weather in Rome?",
        "model: call {'city': 'Rome'}",
        "user: response {'result': 'sunny in Rome'}",
        "model: The weather: sunny in Rome.",
        "user: Weather in Bern?",
    ]


def test_compact_of_an_openai_agents_session_warns_that_the_items_stay(tmp_path: Path) -> None:
    async def two_turns() -> None:
        session = OpenAIAgentsSession("sdk:ada", store=str(tmp_path))
        for n in range(2):
            await session.add_items([{"role": "user", "content": f"Question {n}"}])
            await session.add_items([{"role": "assistant", "content": f"Answer {n}"}])
        await session.aclose()

    asyncio.run(two_turns())
    code, out, err = invoke(
        tmp_path, "compact", "sdk:ada", "--keep-turns", "1", "--summary", "Question 0."
    )
    assert code == 0, err
    assert "compacted at seq" in out
    assert err == f"warning: sdk:ada: {COMPACTION_EFFECT}\n"
    assert "OpenAI Agents SDK sends its item list" in err

    async def items() -> int:
        session = OpenAIAgentsSession("sdk:ada", store=str(tmp_path))
        try:
            return len(await session.get_items())
        finally:
            await session.aclose()

    assert asyncio.run(items()) == 4  # what the SDK sends is unchanged, as the warning says
    store = open_store(tmp_path)
    assert [m.text for m in store.get("sdk:ada").messages()] == [
        "Question 0.", "Question 1", "Answer 1",
    ]
    store.close()


def test_compact_prints_the_note_any_writer_recorded_for_its_event_types(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.create("plain", [Event.new(USER_MESSAGE, Message.user(f"Q{n}")) for n in range(2)])
    store.meta_set(COMPACTION_EFFECT_KIND, "user", "a note for user/ events")
    store.close()
    code, _, err = invoke(tmp_path, "compact", "plain", "--keep-turns", "1", "--summary", "S")
    assert code == 0, err
    assert err == "warning: plain: a note for user/ events\n"
