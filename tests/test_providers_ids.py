"""Tool-call ids a model server reuses (``call_0`` in every turn, twice in one message, empty)
stay provider-valid: every converter gives each call an id of its own, deterministically, and
its answer the same id, so the output passes its provider's check."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given

from agentsession import ToolCall, open_store
from agentsession.messages import Message, ToolResult
from agentsession.providers import (
    anthropic_errors,
    gemini_errors,
    openai_chat_errors,
    openai_responses_errors,
    to_anthropic,
    to_gemini,
    to_openai_chat,
    to_openai_responses,
)
from agentsession.validation import provider_errors

from .provider_strategies import histories_with_reused_ids

CONVERTERS: dict[str, tuple[Callable[[list[Message]], Any], Callable[[Any], list[str]]]] = {
    "anthropic": (to_anthropic, anthropic_errors),
    "openai_chat": (to_openai_chat, openai_chat_errors),
    "openai_responses": (to_openai_responses, openai_responses_errors),
    "gemini": (to_gemini, gemini_errors),
}


def exchange(call_ids: list[str], question: str) -> list[Message]:
    calls = [ToolCall(call_id, "read", {"n": n}) for n, call_id in enumerate(call_ids)]
    results = [ToolResult(c.id, c.name, f"result {n}") for n, c in enumerate(calls)]
    return [Message.user(question), Message.assistant(tool_calls=calls), Message.tool(*results)]


REUSED = exchange(["call_0"], "one") + exchange(["call_0"], "two") + [Message.assistant("done")]


@pytest.mark.parametrize("api", sorted(CONVERTERS))
def test_an_id_reused_in_every_turn_passes_every_provider_check(api: str) -> None:
    convert, errors = CONVERTERS[api]
    assert provider_errors(REUSED) == []
    request = convert(REUSED)
    assert errors(request) == []
    assert convert(REUSED) == request  # deterministic


def test_a_reused_id_is_renamed_from_its_second_use_and_its_result_with_it() -> None:
    history = REUSED + exchange(["call_0", "call_0_2"], "three")
    chat = to_openai_chat(history)
    calls = [c["id"] for m in chat if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    answers = [m["tool_call_id"] for m in chat if m["role"] == "tool"]
    assert calls == ["call_0", "call_0_2", "call_0_3", "call_0_2_2"]
    assert answers == calls
    responses = to_openai_responses(history)
    assert [i["call_id"] for i in responses if i.get("type") == "function_call"] == calls
    blocks = [b for m in to_anthropic(history)["messages"] for b in m["content"]]
    assert [b["id"] for b in blocks if b["type"] == "tool_use"] == calls
    assert [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"] == calls
    # The first use keeps its id: a request for the start of the history is the start of
    # this one (the prompt cache still hits).
    assert to_openai_chat(history[:3]) == chat[:3]


def test_an_id_twice_in_one_message_is_answered_in_call_order() -> None:
    history = exchange(["call_0", "call_0"], "both")
    chat = to_openai_chat(history)
    assert [c["id"] for c in chat[1]["tool_calls"]] == ["call_0", "call_0_2"]
    assert [(m["tool_call_id"], m["content"]) for m in chat[2:]] == [
        ("call_0", "result 0"),
        ("call_0_2", "result 1"),
    ]
    assert openai_chat_errors(chat) == []


def test_an_empty_id_is_sent_as_a_non_empty_one() -> None:
    history = exchange([""], "empty")
    for api, (convert, errors) in CONVERTERS.items():
        assert errors(convert(history)) == [], api


def test_a_model_server_reusing_call_0_records_a_history_every_provider_takes() -> None:
    session = open_store("memory:").get("reused")
    for question in ("one", "two"):
        with session.turn() as turn:
            turn.user(question)
            with turn.step() as step:
                step.assistant(tool_calls=[ToolCall("call_0", "read")])
                step.tool_result("call_0", "read", question)
            turn.assistant("done")
    history = session.messages()
    for api, (convert, errors) in CONVERTERS.items():
        assert errors(convert(history)) == [], api


@given(history=histories_with_reused_ids())
def test_every_converter_s_output_passes_its_provider_s_check_with_reused_ids(
    history: list[Message],
) -> None:
    assert provider_errors(history) == []
    for api, (convert, errors) in CONVERTERS.items():
        assert errors(convert(history)) == [], api


def test_two_calls_sharing_an_id_get_the_results_of_their_own_tools() -> None:
    calls = [ToolCall("call_0", "read"), ToolCall("call_0", "search")]
    history = [
        Message.user("go"),
        Message.assistant(tool_calls=calls),
        Message.tool(ToolResult("call_0", "search", "found"), ToolResult("call_0", "read", "text")),
    ]
    chat = to_openai_chat(history)
    assert [(m["tool_call_id"], m["content"]) for m in chat[2:]] == [
        ("call_0_2", "found"),
        ("call_0", "text"),
    ]
    contents = to_gemini(history)["contents"]
    responses = [p["function_response"] for p in contents[2]["parts"]]
    assert [(r["name"], r["response"]) for r in responses] == [
        ("read", {"output": "text"}),
        ("search", {"output": "found"}),
    ]
    for api, (convert, errors) in CONVERTERS.items():
        assert errors(convert(history)) == [], api


def test_gemini_sends_a_result_under_its_call_s_name() -> None:
    history = [
        Message.user("go"),
        Message.assistant(tool_calls=[ToolCall("c1", "read")]),
        Message.tool(ToolResult("c1", "read_file", "text")),  # the runtime's own tool name
    ]
    request = to_gemini(history)
    assert request["contents"][2]["parts"][0]["function_response"]["name"] == "read"
    assert gemini_errors(request) == []
