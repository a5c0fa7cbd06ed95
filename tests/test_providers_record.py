"""``ProviderReply.record`` and ``arecord``: a reply is recorded on a step of its own API
(sync or :mod:`agentsession.aio`), and a step of the other API is refused, never half-recorded."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest

from agentsession import ToolCall, open_store
from agentsession.aio import open_async_store
from agentsession.events import USAGE, Usage
from agentsession.messages import Message
from agentsession.providers import ProviderReply
from agentsession.validation import provider_errors

REPLY = ProviderReply(
    messages=[
        Message.assistant("Looking.", tool_calls=[ToolCall("call_0", "read", {"path": "a"})])
    ],
    usage=Usage(120, 8, 128, cache_read_tokens=100, reasoning_tokens=3),
)


def test_record_on_an_async_step_raises_type_error_and_records_nothing() -> None:
    async def main() -> None:
        async with open_async_store("memory:") as store:
            session = await store.get("s")
            async with session.turn() as turn, turn.step() as step:
                with warnings.catch_warnings():
                    warnings.simplefilter("error")  # no coroutine left un-awaited
                    with pytest.raises(TypeError, match=r"await reply\.arecord\(step\)"):
                        REPLY.record(step)  # type: ignore[arg-type]
                    with pytest.raises(TypeError, match="AsyncTurn"):
                        REPLY.record(turn)  # type: ignore[arg-type]
            kinds = [e.type for e in await session.read()]
            assert "assistant/message" not in kinds and USAGE not in kinds

    asyncio.run(main())


def test_arecord_on_an_async_step_records_the_message_then_the_usage() -> None:
    async def main() -> None:
        async with open_async_store("memory:") as store:
            session = await store.get("s")
            async with session.turn() as turn:
                await turn.user("Read a")
                async with turn.step() as step:
                    seq = await REPLY.arecord(step)
                    for call in REPLY.message.tool_calls:
                        await step.tool_result(call.id, call.name, "contents")
                await REPLY.arecord(turn)  # a turn records as a step does
                await turn.tool_result("call_0", "read", "again")
            events = await session.read()
            assert events[seq - 1].type == "assistant/message"
            assert events[seq].payload() == REPLY.usage
            history = await session.messages()
            assert [m.role for m in history] == ["user", "assistant", "tool", "assistant", "tool"]
            assert provider_errors(history) == []

    asyncio.run(main())


def test_arecord_on_a_sync_step_raises_type_error_and_records_nothing() -> None:
    session = open_store("memory:").get("s")

    async def record(step: Any) -> None:
        await REPLY.arecord(step)

    with (
        session.turn() as turn,
        turn.step() as step,
        pytest.raises(TypeError, match=r"use reply\.record\(step\)"),
    ):
        asyncio.run(record(step))
    assert "assistant/message" not in [e.type for e in session.read()]


@pytest.mark.parametrize("step", [None, "step", object()])
def test_record_and_arecord_refuse_what_is_no_step(step: Any) -> None:
    with pytest.raises(TypeError, match=r"record\(\) takes a Step or Turn"):
        REPLY.record(step)
    with pytest.raises(TypeError, match=r"arecord\(\) takes an AsyncStep or AsyncTurn"):
        asyncio.run(REPLY.arecord(step))


def test_record_on_a_sync_step_records_the_message_then_the_usage() -> None:
    session = open_store("memory:").get("s")
    with session.turn() as turn, turn.step() as step:
        seq = REPLY.record(step)
        step.tool_result("call_0", "read", "contents")
    events = session.read()
    assert events[seq - 1].payload() == REPLY.message
    assert events[seq].payload() == REPLY.usage
