"""The Anthropic Messages format: requests the SDK's own types accept, responses parsed by the
SDK's own models, and the lossy rules of ``agentsession.providers.anthropic``."""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic.types import ContentBlockParam
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from hypothesis import given
from pydantic import TypeAdapter, ValidationError

from agentsession import open_store
from agentsession.errors import UsageError
from agentsession.events import USAGE
from agentsession.messages import (
    AttachmentRef,
    FilePart,
    ImagePart,
    Message,
    Part,
    RefusalPart,
    TextPart,
    ThinkingPart,
    ToolCall,
    ToolResult,
)
from agentsession.providers.anthropic import anthropic_errors, from_anthropic, to_anthropic

from .provider_strategies import merged_assistant_turns, provider_valid_histories, run_doc_section

FIXTURES = Path(__file__).parent / "fixtures" / "anthropic"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(24))).decode()
PDF = base64.b64encode(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n").decode()
_REQUEST = TypeAdapter(MessageCreateParamsNonStreaming)
_BLOCK = TypeAdapter(ContentBlockParam)
_CITATION_KINDS = {
    "char_location",
    "page_location",
    "content_block_location",
    "web_search_result_location",
    "search_result_location",
}


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


def _materialise(value: Any) -> Any:
    # Iterable fields of the SDK's TypedDicts validate lazily: iterate them to validate.
    if isinstance(value, dict):
        return {k: _materialise(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, Iterator)):
        return [_materialise(v) for v in value]
    return value


def assert_sdk_accepts(request: dict[str, Any]) -> None:
    """The request validates as the SDK's ``MessageCreateParamsNonStreaming``, and each content
    block as its ``ContentBlockParam`` without any change: the SDK's TypedDicts ignore unknown
    keys and coerce some values, and its message type also admits response models (which
    allow extra fields), so equality with the input is what proves that every key and value
    is one the SDK's request types name."""
    full = {"model": "claude-sonnet-4-5", "max_tokens": 1024, **request}
    _materialise(_REQUEST.validate_python(full))
    assert set(request) <= {"system", "messages"}
    if "system" in request:
        assert type(request["system"]) is str
    for msg in request["messages"]:
        assert set(msg) == {"role", "content"}
        for block in msg["content"]:
            assert _materialise(_BLOCK.validate_python(block)) == block


def as_response(content: list[dict[str, Any]]) -> anthropic.types.Message:
    """An assistant turn of a request, as the response the SDK would have parsed."""
    return anthropic.types.Message.model_validate(
        {
            "id": "msg_x",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": content,
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
    )


# ---------------------------------------------------------------------------------------------
# The proof can fail.


@pytest.mark.parametrize(
    "block",
    [
        {"type": "text", "text": "hi", "annotations": []},  # an unknown key
        {"type": "thinking", "thinking": "t"},  # no signature
        {"type": "image", "source": {"type": "base64", "media_type": "image/bmp", "data": PNG}},
        {"type": "tool_result", "tool_use_id": "a", "content": "x", "name": "read"},
        {"type": "text", "text": 3},
    ],
)
def test_the_sdk_check_refuses_a_request_the_api_would_refuse(block: dict[str, Any]) -> None:
    request = {"messages": [{"role": "user", "content": [block]}]}
    with pytest.raises((ValidationError, AssertionError)):
        assert_sdk_accepts(request)


def _text(text: str = "hi") -> dict[str, Any]:
    return {"type": "text", "text": text}


def _use(call_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "ls", "input": {}}


def _result(call_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": "ok"}


def _messages(*contents: list[dict[str, Any]]) -> dict[str, Any]:
    """A request of alternating user and assistant messages, the first a user's."""
    roles = itertools.cycle(("user", "assistant"))
    return {"messages": [{"role": next(roles), "content": c} for c in contents]}


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        (
            {"messages": [{"role": "user", "content": [_text()]}] * 2},
            "message 1: a second user message in a row",
        ),
        ({"messages": [{"role": "system", "content": [_text()]}]}, "neither user nor assistant"),
        ({"messages": "hi"}, "no list of messages"),
        ("hi", "not an object"),
        (_messages([]), "message 0: no content"),
        (_messages([_text(" \n")]), "message 0, block 0: blank text"),
        (_messages([_text()], [_use("c1")], [_text(), _result("c1")]), "must come before"),
        (_messages([_text()], [_use("c1")], [_text()]), "'c1' has no tool_result in the next"),
        (_messages([_text()], [_use("c1")]), "message 1: tool_use 'c1' has no tool_result after"),
        (_messages([_result("c9")]), "tool_result 'c9' answers no tool_use"),
        (_messages([_text()], [_use("c1"), _result("c1")], [_result("c1")]), "role 'assistant'"),
        (_messages([_use("c1")], [_text()]), "tool_use blocks in a message of role 'user'"),
        (_messages([_text()], [_use("c:1")], [_result("c:1")]), "'c:1' is not of"),
        (
            _messages([_text()], [_use("c1")], [_result("c1")], [_use("c1")], [_result("c1")]),
            "'c1' is used twice",
        ),
        (
            _messages([_text()], [_use("c1"), _use("c2")], [_result("c2"), _result("c3")]),
            "message 1: tool_use 'c1' has no tool_result in the next message",
        ),
        (_messages([_text()], [{"type": "tool_use", "name": "ls", "input": {}}]), "without an id"),
    ],
)
def test_the_structure_check_refuses_a_request_the_api_would_refuse(
    request_: Any, error: str
) -> None:
    errors = anthropic_errors(request_)
    assert any(error in e for e in errors), errors


def test_the_structure_check_takes_a_valid_request_with_string_content() -> None:
    request = _messages([_text()], [_use("c1"), _use("c2")], [_result("c2"), _result("c1")])
    assert anthropic_errors(request) == []
    assert (
        anthropic_errors({"system": "Be brief.", "messages": [{"role": "user", "content": "hi"}]})
        == []
    )


# ---------------------------------------------------------------------------------------------
# Requests.


def test_system_messages_become_the_system_parameter_and_it_is_omitted_when_none() -> None:
    history = [
        Message.system("Be brief."),
        Message.user("hi"),
        Message.system("Answer in French."),
        Message.user("again"),
    ]
    request = to_anthropic(history)
    assert_sdk_accepts(request)
    assert request["system"] == "Be brief.\n\nAnswer in French."
    assert request["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "again"}],
        }
    ]
    assert "system" not in to_anthropic([Message.user("hi")])


def test_tool_results_go_first_in_the_next_user_message_with_is_error_and_images() -> None:
    history = [
        Message.user("list and read"),
        Message(
            role="assistant",
            parts=[TextPart("Sure.")],
            tool_calls=[ToolCall("c1", "ls", {}), ToolCall("c2", "read", {"path": "a.png"})],
        ),
        Message.tool(ToolResult("c2", "read", "", parts=[ImagePart(data=PNG, mime="image/png")])),
        Message.tool(ToolResult("c1", "ls", "no such dir", is_error=True, audit={"x": "y"})),
        Message.user("thanks"),
    ]
    request = to_anthropic(history)
    assert_sdk_accepts(request)
    assert anthropic_errors(request) == []
    assert request["messages"][2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "c2",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                    }
                ],
            },
            {
                "type": "tool_result",
                "tool_use_id": "c1",
                "content": "no such dir",
                "is_error": True,
            },
            {"type": "text", "text": "thanks"},
        ],
    }
    assert request["messages"][1]["content"] == [
        {"type": "text", "text": "Sure."},
        {"type": "tool_use", "id": "c1", "name": "ls", "input": {}},
        {"type": "tool_use", "id": "c2", "name": "read", "input": {"path": "a.png"}},
    ]


def test_a_tool_result_with_text_and_an_image_sends_both_as_content_blocks() -> None:
    history = [
        Message.user("shot"),
        Message.assistant(tool_calls=[ToolCall("c1", "screenshot")]),
        Message.tool(
            ToolResult(
                "c1",
                "screenshot",
                "taken",
                parts=[TextPart("1024x768"), ImagePart(url=f"data:image/png;base64,{PNG}")],
            )
        ),
    ]
    request = to_anthropic(history)
    assert_sdk_accepts(request)
    assert request["messages"][2]["content"][0]["content"] == [
        {"type": "text", "text": "taken"},
        {"type": "text", "text": "1024x768"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
    ]


def test_consecutive_assistant_messages_merge_and_blank_text_is_dropped() -> None:
    history = [
        Message.user("hi"),
        Message.user("  "),
        Message.assistant("one"),
        Message.assistant([TextPart(""), TextPart("\n")]),
        Message.assistant("two"),
    ]
    request = to_anthropic(history)
    assert_sdk_accepts(request)
    assert anthropic_errors(request) == []
    assert request["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
        },
    ]


def test_anthropic_thinking_goes_back_byte_identical_and_other_thinking_is_dropped() -> None:
    signature = "EuYBCkQYAiJAgCs1le6/Pol5Z4/JdPRLVThgDoadBZlNM+TpCKHdLSVoi/WpJ6EFjIiC=="
    history = [
        Message.user("q"),
        Message(
            role="assistant",
            parts=[
                ThinkingPart("mine", signature=signature, provider="anthropic"),
                ThinkingPart(
                    "", signature="EmwKAhgBEgy3va3pzix", provider="anthropic", redacted=True
                ),
                ThinkingPart("unsigned", provider="anthropic"),
                ThinkingPart("theirs", signature="c2ln", provider="gemini"),
                ThinkingPart("summary", signature="gAAAA", provider="openai", id="rs_1"),
                ThinkingPart("neutral"),
                ThinkingPart("legacy", signature="sig"),
                TextPart("answer"),
            ],
        ),
    ]
    request = to_anthropic(history)
    assert_sdk_accepts(request)
    assert request["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "mine", "signature": signature},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
        {"type": "text", "text": "answer"},
    ]


def test_thinking_in_a_user_message_is_not_sent() -> None:
    part = ThinkingPart("x", signature="s", provider="anthropic")
    request = to_anthropic([Message.user([TextPart("hi"), part])])
    assert request["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def test_citations_are_sent_back_with_only_the_fields_the_api_accepts() -> None:
    char = {
        "type": "char_location",
        "cited_text": "The grass is green.",
        "document_index": 0,
        "document_title": "Doc",
        "start_char_index": 0,
        "end_char_index": 20,
        "file_id": "file_1",  # in responses, not in requests
    }
    untitled = {
        "type": "page_location",
        "cited_text": "Sky.",
        "document_index": 1,
        "start_page_number": 1,
        "end_page_number": 2,
    }
    openai = {"type": "url_citation", "url": "https://x", "start_index": 0, "end_index": 3}
    broken = {"type": "char_location", "cited_text": "x", "document_index": "0"}
    history = [
        Message.user("q"),
        Message.assistant(TextPart("green", annotations=[char, untitled, openai, broken])),
        Message.user(TextPart("mine", annotations=[char])),
    ]
    request = to_anthropic(history)
    assert_sdk_accepts(request)
    expected_char = {k: v for k, v in char.items() if k != "file_id"}
    assert request["messages"][1]["content"] == [
        {
            "type": "text",
            "text": "green",
            "citations": [expected_char, {**untitled, "document_title": None}],
        }
    ]
    assert request["messages"][2]["content"] == [{"type": "text", "text": "mine"}]


def test_refusals_are_sent_as_text() -> None:
    request = to_anthropic([Message.user("q"), Message.assistant(RefusalPart("I can't help."))])
    assert request["messages"][1]["content"] == [{"type": "text", "text": "I can't help."}]


def test_user_images_and_documents_use_the_api_s_sources() -> None:
    text_file = base64.b64encode(b"plain words").decode()
    parts: list[Part] = [
        ImagePart(data=PNG, mime="image/png", detail="high", source="upload/a.png"),
        ImagePart(url="https://example.com/cat.jpg"),
        ImagePart(url=f"data:image/jpeg;base64,{PNG}"),
        ImagePart(data=PNG),  # sniffed
        FilePart(data=PDF, mime="application/pdf", name="report.pdf"),
        FilePart(url="https://example.com/paper.pdf"),
        FilePart(data=text_file, mime="text/plain"),
        FilePart(data=PNG, mime="image/png"),  # an image given as a file
    ]
    request = to_anthropic([Message.user(parts)])
    assert_sdk_accepts(request)
    png = {"type": "base64", "media_type": "image/png", "data": PNG}
    assert request["messages"][0]["content"] == [
        {"type": "image", "source": png},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": PNG}},
        {"type": "image", "source": png},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
            "title": "report.pdf",
        },
        {"type": "document", "source": {"type": "url", "url": "https://example.com/paper.pdf"}},
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "plain words"},
        },
        {"type": "image", "source": png},
    ]


def test_media_the_api_cannot_take_becomes_a_placeholder() -> None:
    parts: list[Part] = [
        ImagePart(data=PNG, mime="image/bmp"),
        ImagePart(url="gs://bucket/cat.png"),
        ImagePart(data="not base64!", mime="image/png"),
        FilePart(data=PNG, mime="audio/wav", name="memo.wav"),
        FilePart(url="https://example.com/notes.docx", mime="application/msword"),
    ]
    history = [Message.user(parts), Message.assistant(ImagePart(url="https://example.com/x.png"))]
    request = to_anthropic(history)
    assert_sdk_accepts(request)
    texts = [b["text"] for m in request["messages"] for b in m["content"]]
    assert all(b["type"] == "text" for m in request["messages"] for b in m["content"])
    assert texts[0].startswith("[image (image/bmp) not sent:")
    assert texts[1].startswith("[image gs://bucket/cat.png not sent:")
    assert texts[3].startswith("[file memo.wav (audio/wav) not sent:")
    assert "https://example.com/notes.docx" in texts[4]
    assert texts[5].startswith("[image https://example.com/x.png not sent:")


def test_tool_ids_the_api_refuses_are_sanitised_the_same_way_in_call_and_result() -> None:
    history = [
        Message.user("q"),
        Message.assistant(tool_calls=[ToolCall("fc:1/a", "read"), ToolCall("ok_id-2", "ls")]),
        Message.tool(ToolResult("fc:1/a", "read", "x"), ToolResult("ok_id-2", "ls", "y")),
    ]
    request = to_anthropic(history)
    assert_sdk_accepts(request)
    assert anthropic_errors(request) == []
    use, other = request["messages"][1]["content"]
    assert use["id"].startswith("fc_1_a_") and other["id"] == "ok_id-2"
    assert request["messages"][2]["content"][0]["tool_use_id"] == use["id"]


def test_names_authors_and_audit_are_never_sent() -> None:
    history = [
        Message.user("hi", name="alice", author="bot"),
        Message(role="assistant", tool_calls=[ToolCall("c1", "read")], author="researcher"),
        Message.tool_result("c1", "read", "ok", audit={"decision": "approved"}),
    ]
    sent = json.dumps(to_anthropic(history))
    for word in ("alice", "bot", "researcher", "approved", "decision"):
        assert word not in sent


def test_an_invalid_history_raises() -> None:
    unanswered = [Message.user("q"), Message.assistant(tool_calls=[ToolCall("c1", "ls")])]
    with pytest.raises(UsageError, match="c1"):
        to_anthropic(unanswered)
    with pytest.raises(UsageError, match="answers no open call"):
        to_anthropic([Message.user("q"), Message.tool_result("c9", "ls", "x")])


def test_an_attachment_reference_raises_until_it_is_hydrated() -> None:
    with pytest.raises(UsageError, match="hydrate"):
        to_anthropic([Message.user([TextPart("see"), AttachmentRef(source="upload/a.png")])])
    history = [
        Message.user("q"),
        Message.assistant(tool_calls=[ToolCall("c1", "shot")]),
        Message.tool(ToolResult("c1", "shot", "", parts=[AttachmentRef(source="a.png")])),
    ]
    with pytest.raises(UsageError, match="hydrate"):
        to_anthropic(history)


# ---------------------------------------------------------------------------------------------
# Responses.


@pytest.mark.parametrize("name", ["text_citations", "thinking_tool_use", "redacted_thinking"])
def test_a_response_converts_the_same_as_an_sdk_object_and_as_a_dict(name: str) -> None:
    data = fixture(name)
    parsed = anthropic.types.Message.model_validate(data)
    assert from_anthropic(parsed) == from_anthropic(data)
    assert from_anthropic(parsed.model_dump()) == from_anthropic(data)


def test_text_with_citations_keeps_the_citations_as_annotations() -> None:
    data = fixture("text_citations")
    reply = from_anthropic(anthropic.types.Message.model_validate(data))
    parts = reply.message.parts
    assert [p.text for p in parts if isinstance(p, TextPart)] == [
        b["text"] for b in data["content"]
    ]
    assert parts[1] == TextPart("the grass is green", annotations=data["content"][1]["citations"])
    # null fields are left out (the SDK object has them all, the dict form not).
    page = data["content"][3]["citations"][0]
    assert parts[3].annotations[0] == {k: v for k, v in page.items() if v is not None}
    assert reply.stop_reason == "end_turn" and reply.id == "msg_01CitesXyZ"
    assert reply.model == "claude-sonnet-4-5"
    assert reply.usage is not None and reply.usage.input_tokens == 2095
    # and the citations go back as the API accepts them
    request = to_anthropic([Message.user("q"), reply.message])
    assert_sdk_accepts(request)
    assert request["messages"][1]["content"] == [
        {k: v for k, v in block.items() if k != "citations" or v} for block in data["content"]
    ]


def test_thinking_and_tool_use_and_usage_with_cache_fields() -> None:
    data = fixture("thinking_tool_use")
    reply = from_anthropic(anthropic.types.Message.model_validate(data))
    thinking = data["content"][0]
    assert reply.message == Message(
        role="assistant",
        parts=[
            ThinkingPart(
                thinking["thinking"], signature=thinking["signature"], provider="anthropic"
            ),
            TextPart("Let me check the weather."),
        ],
        tool_calls=[
            ToolCall(
                "toolu_01A09q90qw90lq917835lq9",
                "get_weather",
                {"location": "Paris, France", "unit": "celsius"},
            )
        ],
    )
    usage = reply.usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (1656, 210, 1866)
    assert (usage.cache_read_tokens, usage.cache_write_tokens) == (1024, 512)
    assert usage.reasoning_tokens == 150
    assert reply.stop_reason == "tool_use"


def test_redacted_thinking_is_kept_and_sent_back_unchanged() -> None:
    data = fixture("redacted_thinking")
    reply = from_anthropic(data)
    redacted = reply.message.parts[1]
    assert redacted == ThinkingPart(
        "", signature=data["content"][1]["data"], provider="anthropic", redacted=True
    )
    history = [Message.user("q"), reply.message]
    history += [Message.tool_result(c.id, c.name, "ok") for c in reply.message.tool_calls]
    request = to_anthropic(history)
    assert_sdk_accepts(request)
    assert request["messages"][1]["content"] == data["content"]


def test_a_response_that_is_not_a_message_raises() -> None:
    with pytest.raises(UsageError):
        from_anthropic("hello")
    with pytest.raises(UsageError, match="tool_use"):
        from_anthropic({"content": [{"type": "tool_use", "name": "x", "input": {}}]})


# ---------------------------------------------------------------------------------------------
# Properties.


def sent_in_user_message(part: Part) -> bool:
    if isinstance(part, ThinkingPart):
        return False
    if isinstance(part, (TextPart, RefusalPart)):
        return bool(part.text.strip())
    return True  # media: a block or a placeholder


def anthropic_assistant(msg: Message) -> tuple[list[Part], list[ToolCall]]:
    """An assistant message as it comes back from Anthropic: its own signed thinking, text
    that is not blank with its citations, refusals as text; tool calls without a signature."""
    parts: list[Part] = []
    for p in msg.parts:
        if isinstance(p, ThinkingPart):
            if p.provider == "anthropic" and p.signature:
                text = "" if p.redacted else p.text
                parts.append(ThinkingPart(text, p.signature, "anthropic", p.redacted))
        elif isinstance(p, TextPart):
            if p.text.strip():
                notes = [a for a in p.annotations if a.get("type") in _CITATION_KINDS]
                parts.append(TextPart(p.text, notes))
        elif isinstance(p, RefusalPart) and p.text.strip():
            parts.append(TextPart(p.text))
    return parts, [ToolCall(c.id, c.name, c.arguments) for c in msg.tool_calls]


def expected_assistant_messages(history: list[Message]) -> list[Message]:
    """``history``'s assistant messages as they come back from Anthropic: the documented lossy
    rules applied, empty messages left out, consecutive messages of one role merged."""
    return merged_assistant_turns(
        history,
        lambda msg: [p for p in msg.parts if sent_in_user_message(p)],
        anthropic_assistant,
    )


@given(provider_valid_histories())
def test_every_request_is_accepted_by_the_sdk_and_keeps_the_api_s_structure(
    history: list[Message],
) -> None:
    request = to_anthropic(history)
    assert_sdk_accepts(request)
    assert anthropic_errors(request) == []


@given(provider_valid_histories())
def test_the_assistant_turns_of_a_request_convert_back_to_the_history_s_messages(
    history: list[Message],
) -> None:
    request = to_anthropic(history)
    turns = [m["content"] for m in request["messages"] if m["role"] == "assistant"]
    back = [from_anthropic(as_response(content)).message for content in turns]
    assert back == expected_assistant_messages(history)


# ---------------------------------------------------------------------------------------------
# A recorded loop.


class ScriptedMessages:
    """Stands in for ``anthropic.Anthropic().messages``."""

    def __init__(self, replies: list[Any]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []

    def create(self, **request: Any) -> Any:
        self.requests.append(request)
        return self.replies.pop(0)


def test_a_recorded_reply_sends_its_signed_thinking_before_the_tool_use_and_then_the_result(
    tmp_path: Path,
) -> None:
    first = fixture("thinking_tool_use")
    final = {**fixture("text_citations"), "content": [{"type": "text", "text": "18°C in Paris."}]}
    api = ScriptedMessages(
        [
            anthropic.types.Message.model_validate(first),
            anthropic.types.Message.model_validate(final),
        ]
    )
    session = open_store(tmp_path / "store").get("weather")
    with session.turn(agent="bot") as turn:
        turn.user("Weather in Paris?")
        for _ in range(3):
            request = to_anthropic([Message.system("Be brief."), *session.messages()])
            assert_sdk_accepts(request)
            assert anthropic_errors(request) == []
            reply = from_anthropic(api.create(model="claude-sonnet-4-5", max_tokens=64, **request))
            with turn.step() as step:
                reply.record(step)
                for call in reply.message.tool_calls:
                    step.tool_result(call.id, call.name, "18°C")
            if not reply.message.tool_calls:
                break
    # Read back from disk, in a new store.
    stored = open_store(tmp_path / "store").get("weather")
    second = to_anthropic(stored.messages())
    assert api.requests[1]["messages"] == second["messages"][:3]
    assistant, results = second["messages"][1], second["messages"][2]
    assert assistant["content"][0] == first["content"][0]  # byte-identical, signature and all
    assert [b["type"] for b in assistant["content"]] == ["thinking", "text", "tool_use"]
    assert results == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
                "content": "18°C",
            }
        ],
    }
    assert api.requests[1]["system"] == "Be brief."
    usages = [e.payload() for e in stored.read() if e.type == USAGE]
    assert [(u.input_tokens, u.cache_read_tokens, u.reasoning_tokens) for u in usages] == [
        (1656, 1024, 150),
        (2095, 0, 0),
    ]


# ---------------------------------------------------------------------------------------------
# The documentation runs.


def test_the_anthropic_doc_section_has_a_runnable_example(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    run_doc_section("## Anthropic Messages")
    assert "The README says hello." in capsys.readouterr().out
