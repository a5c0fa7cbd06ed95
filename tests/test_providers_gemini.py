"""The Gemini format: requests the ``google-genai`` SDK's own models accept, responses parsed by
its own ``GenerateContentResponse``, and the lossy rules of ``agentsession.providers.gemini``."""

from __future__ import annotations

import base64
import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest
from google.genai import types
from hypothesis import given
from pydantic import ValidationError

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
from agentsession.providers.anthropic import to_anthropic
from agentsession.providers.gemini import (
    INVENTED_CALL_ID_PREFIX,
    from_gemini,
    gemini_errors,
    to_gemini,
)

from .provider_strategies import merged_assistant_turns, provider_valid_histories, run_doc_section

FIXTURES = Path(__file__).parent / "fixtures" / "gemini"
PNG_BYTES = b"\x89PNG\r\n\x1a\n" + bytes(range(250, 256)) * 4
PNG = base64.b64encode(PNG_BYTES).decode()
_DATA_KEYS = ("text", "inline_data", "file_data", "function_call", "function_response")


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


def _as_bytes(value: Any) -> Any:
    """A request dict with its base64 bytes fields decoded, as the SDK's python dump has them."""
    if isinstance(value, list):
        return [_as_bytes(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: _as_bytes(v) for k, v in value.items()}
    if "thought_signature" in out:
        out["thought_signature"] = base64.b64decode(out["thought_signature"])
    if "inline_data" in out:
        out["inline_data"]["data"] = base64.b64decode(out["inline_data"]["data"])
    return out


def assert_sdk_accepts(request: dict[str, Any]) -> None:
    """Every content builds the SDK's ``types.Content`` (whose models forbid unknown fields),
    the system instruction its ``GenerateContentConfig``, and dumping them back gives the
    request (so no camelCase alias or misread value can pass: the SDK accepts aliases)."""
    assert set(request) <= {"contents", "system_instruction"}
    for content in request["contents"]:
        model = types.Content.model_validate(content)
        assert model.model_dump(exclude_unset=True) == _as_bytes(content)
    if "system_instruction" in request:
        config = types.GenerateContentConfig(system_instruction=request["system_instruction"])
        instruction = config.system_instruction
        assert isinstance(instruction, types.Content)
        assert instruction.model_dump(exclude_unset=True) == request["system_instruction"]


def as_response(content: dict[str, Any]) -> types.GenerateContentResponse:
    """A model turn of a request, as the response the SDK would have parsed."""
    return types.GenerateContentResponse.model_validate(
        {"candidates": [{"content": content, "finish_reason": "STOP"}]}
    )


# ---------------------------------------------------------------------------------------------
# The proof can fail.


@pytest.mark.parametrize(
    "part",
    [
        {"txt": "hi"},  # an unknown field
        {"text": "hi", "thought_signature": "not base64!"},
        {"function_call": {"name": "f", "arguments": {}}},
        {"functionCall": {"name": "f", "args": {}}},  # the alias: accepted, but not our key
        {"function_response": {"name": "f", "response": "text"}},
    ],
)
def test_the_sdk_check_refuses_a_part_the_sdk_would_refuse_or_rename(part: dict[str, Any]) -> None:
    with pytest.raises((ValidationError, AssertionError)):
        assert_sdk_accepts({"contents": [{"role": "user", "parts": [part]}]})


def _call(name: str, call_id: str = "") -> dict[str, Any]:
    call: dict[str, Any] = {"name": name, "args": {}}
    if call_id:
        call["id"] = call_id
    return {"function_call": call}


def _answer(name: str, call_id: str = "") -> dict[str, Any]:
    response: dict[str, Any] = {"name": name, "response": {"output": ""}}
    if call_id:
        response["id"] = call_id
    return {"function_response": response}


def _contents(*parts: list[dict[str, Any]]) -> dict[str, Any]:
    """A request of alternating user and model contents, the first a user's."""
    roles = itertools.cycle(("user", "model"))
    return {"contents": [{"role": next(roles), "parts": p} for p in parts]}


Q = {"text": "q"}


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        (
            _contents([Q], [_call("a"), _call("b")], [_answer("b"), _answer("a")]),
            "function response 0 is for 'b', but call 0 of content 1 is 'a'",
        ),
        ({"contents": [{"role": "user", "parts": [Q]}] * 2}, "a second user content in a row"),
        ({"contents": [{"role": "assistant", "parts": [Q]}]}, "neither user nor model"),
        ({"system_instruction": {"parts": [Q]}}, "no list of contents"),
        (_contents([]), "content 0: no parts"),
        (_contents([{"text": "q", "inline_data": {}}]), "part 0: holds text and inline_data"),
        (_contents([{"thought": True}]), "part 0: holds no data"),
        (_contents([{"text": ""}]), "empty text without a thought signature"),
        (_contents([Q], [_call("a")], [Q, _answer("a")]), "must come before every other part"),
        (_contents([Q], [_call("a"), _call("b")], [_answer("a")]), "call 1 ('b') has no function"),
        (_contents([Q], [_call("a")]), "content 1: function call 0 ('a') has no function response"),
        (_contents([Q], [Q], [_answer("a")]), "response 0 ('a') answers no function call"),
        (_contents([Q], [_call("a", "x1")], [_answer("a", "x2")]), "has the id 'x2'"),
        (_contents([Q], [_call("a", "x1")], [_answer("a")]), "has the id None"),
        (
            _contents([Q], [_call("a", f"{INVENTED_CALL_ID_PREFIX}0-ab")], [_answer("a")]),
            "made-up id",
        ),
        (_contents([_call("a")], [Q]), "function calls in a content of role 'user'"),
        (_contents([Q], [_answer("a")]), "function responses in a content of role 'model'"),
    ],
)
def test_the_structure_check_refuses_a_request_gemini_would_refuse_or_misread(
    request_: dict[str, Any], error: str
) -> None:
    errors = gemini_errors(request_)
    assert any(error in e for e in errors), errors


def test_the_structure_check_takes_calls_answered_in_order_and_camel_case_keys() -> None:
    request = _contents([Q], [Q, _call("a", "x1"), _call("b")], [_answer("a", "x1"), _answer("b")])
    assert_sdk_accepts(request)
    assert gemini_errors(request) == []
    camel = {
        "contents": [
            {"role": "user", "parts": [Q]},
            {"role": "model", "parts": [{"functionCall": {"name": "a", "args": {}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "a", "response": {}}}]},
        ]
    }
    assert gemini_errors(camel) == []


# ---------------------------------------------------------------------------------------------
# Requests.


def test_system_messages_become_the_system_instruction_and_it_is_omitted_when_none() -> None:
    history = [
        Message.system("Be brief."),
        Message.user("hi"),
        Message.system("Answer in French."),
        Message.user("again"),
    ]
    request = to_gemini(history)
    assert_sdk_accepts(request)
    assert request == {
        "contents": [{"role": "user", "parts": [{"text": "hi"}, {"text": "again"}]}],
        "system_instruction": {"parts": [{"text": "Be brief."}, {"text": "Answer in French."}]},
    }
    assert "system_instruction" not in to_gemini([Message.user("hi")])


def test_function_responses_are_grouped_in_call_order_with_errors_ids_and_media() -> None:
    history = [
        Message.user("go"),
        Message(
            role="assistant",
            parts=[TextPart("Working.")],
            tool_calls=[
                ToolCall("fc_1", "ls", {"dir": "."}, signature=PNG),
                ToolCall("fc_2", "shot"),
                ToolCall("fc_3", "read", {"path": "a"}),
            ],
        ),
        Message.tool(ToolResult("fc_3", "", "contents of a", audit={"decision": "approved"})),
        Message.tool(
            ToolResult(
                "fc_2",
                "shot",
                "taken",
                parts=[TextPart("800x600"), ImagePart(data=PNG, mime="image/png")],
            ),
            ToolResult("fc_1", "ls", "permission denied", is_error=True),
        ),
        Message.user("thanks"),
    ]
    request = to_gemini(history)
    assert_sdk_accepts(request)
    assert gemini_errors(request) == []
    assert request["contents"][1] == {
        "role": "model",
        "parts": [
            {"text": "Working."},
            {
                "function_call": {"name": "ls", "args": {"dir": "."}, "id": "fc_1"},
                "thought_signature": PNG,
            },
            {"function_call": {"name": "shot", "args": {}, "id": "fc_2"}},
            {"function_call": {"name": "read", "args": {"path": "a"}, "id": "fc_3"}},
        ],
    }
    assert request["contents"][2] == {
        "role": "user",
        "parts": [
            {
                "function_response": {
                    "name": "ls",
                    "response": {"error": "permission denied"},
                    "id": "fc_1",
                }
            },
            {
                "function_response": {
                    "name": "shot",
                    "response": {"output": "taken\n800x600"},
                    "id": "fc_2",
                    "parts": [{"inline_data": {"mime_type": "image/png", "data": PNG}}],
                }
            },
            # the result had no name: the call's is used
            {
                "function_response": {
                    "name": "read",
                    "response": {"output": "contents of a"},
                    "id": "fc_3",
                }
            },
            {"text": "thanks"},
        ],
    }
    assert "approved" not in json.dumps(request)


def test_gemini_thinking_goes_back_with_its_signature_and_other_thinking_is_dropped() -> None:
    signature = base64.b64encode(b"\xfb\xff signature").decode()
    history = [
        Message.user("q"),
        Message(
            role="assistant",
            parts=[
                ThinkingPart("mine", signature=signature, provider="gemini"),
                ThinkingPart("unsigned", provider="gemini"),
                ThinkingPart("neutral"),
                ThinkingPart("legacy", signature="c2ln"),
                ThinkingPart("theirs", signature="EuYBCkQYAiJA", provider="anthropic"),
                ThinkingPart("", signature="EmwKAhgB", provider="anthropic", redacted=True),
                ThinkingPart("summary", signature="gAAAA", provider="openai", id="rs_1"),
                ThinkingPart("garbled", signature="not base64!", provider="gemini"),
                TextPart("answer", annotations=[{"type": "url_citation", "url": "https://x"}]),
            ],
        ),
        Message.user([TextPart("more"), ThinkingPart("user thinking", provider="gemini")]),
    ]
    request = to_gemini(history)
    assert_sdk_accepts(request)
    assert request["contents"][1]["parts"] == [
        {"text": "mine", "thought": True, "thought_signature": signature},
        {"text": "unsigned", "thought": True},
        {"text": "neutral", "thought": True},
        {"text": "garbled", "thought": True},
        {"text": "answer"},
    ]
    assert request["contents"][2]["parts"] == [{"text": "more"}]


def test_a_signature_on_a_text_part_goes_back_on_that_part() -> None:
    sig = base64.b64encode(b"text signature").decode()
    urlsafe = base64.urlsafe_b64encode(b"\xfb\xff\xfe other").decode()
    history = [
        Message.user("q"),
        Message(
            role="assistant",
            parts=[
                ThinkingPart("", signature=sig, provider="gemini"),
                TextPart("Paris."),
                ThinkingPart("", signature=urlsafe, provider="gemini"),  # with nothing after it
            ],
        ),
    ]
    request = to_gemini(history)
    assert_sdk_accepts(request)
    standard = base64.b64encode(b"\xfb\xff\xfe other").decode()
    assert request["contents"][1]["parts"] == [
        {"text": "Paris.", "thought_signature": sig},
        {"text": "", "thought_signature": standard},
    ]


def test_refusals_are_text_and_empty_text_and_empty_messages_are_left_out() -> None:
    history = [
        Message.user("q"),
        Message.assistant(RefusalPart("I can't help with that.")),
        Message.assistant([TextPart("")]),
        Message.assistant(ThinkingPart("x", signature="c2ln", provider="openai")),
        Message.assistant(" "),
    ]
    request = to_gemini(history)
    assert_sdk_accepts(request)
    assert request["contents"] == [
        {"role": "user", "parts": [{"text": "q"}]},
        {"role": "model", "parts": [{"text": "I can't help with that."}, {"text": " "}]},
    ]


def test_media_goes_as_inline_or_file_data_with_a_media_type() -> None:
    wav = base64.b64encode(b"RIFF....WAVEfmt ").decode()
    parts: list[Part] = [
        ImagePart(data=PNG, mime="image/png", detail="low", source="upload/a.png"),
        ImagePart(url=f"data:image/png;base64,{PNG}"),
        ImagePart(data=PNG),  # sniffed
        ImagePart(url="https://example.com/cat.jpg"),  # guessed from the extension
        ImagePart(url="gs://bucket/cat.webp", mime="image/webp"),
        FilePart(url="https://example.com/paper.pdf", name="paper.pdf"),
        FilePart(data=wav, mime="audio/wav"),
    ]
    request = to_gemini([Message.user(parts)])
    assert_sdk_accepts(request)
    png = {"inline_data": {"mime_type": "image/png", "data": PNG}}
    assert request["contents"][0]["parts"] == [
        png,
        png,
        png,
        {"file_data": {"file_uri": "https://example.com/cat.jpg", "mime_type": "image/jpeg"}},
        {"file_data": {"file_uri": "gs://bucket/cat.webp", "mime_type": "image/webp"}},
        {
            "file_data": {
                "file_uri": "https://example.com/paper.pdf",
                "mime_type": "application/pdf",
            }
        },
        {"inline_data": {"mime_type": "audio/wav", "data": wav}},
    ]
    # The SDK reads the very bytes.
    content = types.Content.model_validate(request["contents"][0])
    assert content.parts is not None and content.parts[0].inline_data is not None
    assert content.parts[0].inline_data.data == PNG_BYTES


def test_media_without_a_known_type_or_valid_data_becomes_a_placeholder() -> None:
    parts: list[Part] = [
        ImagePart(data=base64.b64encode(b"unknown bytes").decode()),
        FilePart(url="https://example.com/download", name="blob"),
        ImagePart(data="not base64!", mime="image/png"),
        ImagePart(url="data:text/plain,hello"),
    ]
    request = to_gemini([Message.user(parts)])
    assert_sdk_accepts(request)
    texts = [p["text"] for p in request["contents"][0]["parts"]]
    assert texts[0] == "[image not sent: its media type is unknown]"
    assert (
        texts[1] == "[file blob https://example.com/download not sent: its media type is unknown]"
    )
    assert texts[2] == "[image (image/png) not sent: its data is not base64]"
    assert texts[3].startswith("[image not sent:")


def test_names_authors_and_audit_are_never_sent() -> None:
    history = [
        Message.user("hi", name="alice", author="bot"),
        Message(role="assistant", tool_calls=[ToolCall("c1", "read")], author="researcher"),
        Message.tool_result("c1", "read", "ok", audit={"decision": "approved"}),
    ]
    sent = json.dumps(to_gemini(history))
    for word in ("alice", "bot", "researcher", "approved", "decision"):
        assert word not in sent


def test_an_invalid_history_raises() -> None:
    with pytest.raises(UsageError, match="c1"):
        to_gemini([Message.user("q"), Message.assistant(tool_calls=[ToolCall("c1", "ls")])])
    with pytest.raises(UsageError, match="answers no open call"):
        to_gemini([Message.user("q"), Message.tool_result("c9", "ls", "x")])


def test_an_attachment_reference_raises_until_it_is_hydrated() -> None:
    with pytest.raises(UsageError, match="hydrate"):
        to_gemini([Message.user([TextPart("see"), AttachmentRef(source="upload/a.png")])])


# ---------------------------------------------------------------------------------------------
# Responses.

FIXTURE_NAMES = ["text", "thought_function_calls", "signed_text", "function_call_ids"]


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_a_response_converts_the_same_in_every_form_the_sdk_and_the_api_give(name: str) -> None:
    data = fixture(name)
    parsed = types.GenerateContentResponse.model_validate(data)
    expected = from_gemini(data)  # REST JSON: camelCase, standard base64
    assert from_gemini(parsed) == expected  # the SDK object (dumps urlsafe base64)
    assert from_gemini(parsed.model_dump()) == expected  # snake_case with bytes
    assert from_gemini(parsed.model_dump(mode="json")) == expected  # snake_case, urlsafe
    assert from_gemini(parsed.model_dump(mode="json", by_alias=True)) == expected


def test_thought_parts_and_function_calls_with_their_signature() -> None:
    data = fixture("thought_function_calls")
    reply = from_gemini(types.GenerateContentResponse.model_validate(data))
    parts = data["candidates"][0]["content"]["parts"]
    message = reply.message
    assert message.parts == [ThinkingPart(parts[0]["text"], provider="gemini")]
    weather, time = message.tool_calls
    assert (weather.name, weather.arguments) == ("get_weather", {"city": "Paris"})
    assert weather.signature == parts[1]["thoughtSignature"]  # standard base64, as sent
    assert (time.name, time.arguments, time.signature) == ("get_time", {"tz": "Europe/Paris"}, "")
    usage = reply.usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (1200, 135, 1335)
    assert (usage.cache_read_tokens, usage.reasoning_tokens) == (1024, 95)
    assert (reply.stop_reason, reply.id, reply.model) == ("STOP", "resp-calls-1", "gemini-2.5-pro")


def test_calls_without_ids_get_stable_ids_that_are_never_sent_back() -> None:
    data = fixture("thought_function_calls")
    first = from_gemini(data).message.tool_calls
    assert [c.id for c in first] == [c.id for c in from_gemini(data).message.tool_calls]
    assert all(re.fullmatch(r"gemini-call-\d-[0-9a-f]{12}", c.id) for c in first)
    assert first[0].id.startswith("gemini-call-0-") and first[1].id.startswith("gemini-call-1-")
    other = from_gemini({**data, "responseId": "resp-calls-2"}).message.tool_calls
    assert not {c.id for c in first} & {c.id for c in other}
    history = [Message.user("q"), from_gemini(data).message]
    history += [Message.tool_result(c.id, c.name, "ok") for c in first]
    request = to_gemini(history)
    assert_sdk_accepts(request)
    assert gemini_errors(request) == []
    sent = json.dumps(request)
    assert INVENTED_CALL_ID_PREFIX not in sent and '"id"' not in sent
    # Another API takes the invented ids as they are.
    anthropic_request = to_anthropic(history)
    assert anthropic_request["messages"][1]["content"][0]["id"] == first[0].id


def test_ids_gemini_gave_go_back_on_the_call_and_its_response() -> None:
    data = fixture("function_call_ids")
    message = from_gemini(data).message
    assert message.tool_calls == [
        ToolCall("fc_a1b2", "search", {"query": "agentsession"}, "+2NhbGwgc2lnbmF0dXJlIGdlbWluaSAz")
    ]
    usage = from_gemini(data).usage
    assert usage is not None and usage.input_tokens == 57  # prompt + tool-use prompt
    request = to_gemini(
        [Message.user("q"), message, Message.tool_result("fc_a1b2", "search", "3 hits")]
    )
    assert_sdk_accepts(request)
    assert request["contents"][1]["parts"] == [
        {
            "function_call": {"name": "search", "args": {"query": "agentsession"}, "id": "fc_a1b2"},
            "thought_signature": "+2NhbGwgc2lnbmF0dXJlIGdlbWluaSAz",
        }
    ]
    assert request["contents"][2]["parts"][0]["function_response"]["id"] == "fc_a1b2"


def test_signed_text_and_thoughts_go_back_as_they_came() -> None:
    data = fixture("signed_text")
    parsed = types.GenerateContentResponse.model_validate(data)
    message = from_gemini(parsed).message
    assert message.text == "Paris is the capital of France."
    request = to_gemini([Message.user("q"), message])
    assert_sdk_accepts(request)
    returned = types.Content.model_validate(request["contents"][1])
    assert parsed.candidates is not None and parsed.candidates[0].content is not None
    assert returned.parts == parsed.candidates[0].content.parts  # the same bytes, flags, text


def test_media_in_a_response_becomes_parts_with_standard_base64() -> None:
    pdf = b"%PDF-1.7 made up"
    response = types.GenerateContentResponse(
        candidates=[
            types.Candidate(
                content=types.Content(
                    role="model",
                    parts=[
                        types.Part(inline_data=types.Blob(data=PNG_BYTES, mime_type="image/png")),
                        types.Part(inline_data=types.Blob(data=pdf, mime_type="application/pdf")),
                        types.Part(
                            file_data=types.FileData(file_uri="gs://b/v.mp4", mime_type="video/mp4")
                        ),
                        types.Part(
                            executable_code=types.ExecutableCode(code="print(1)", language="PYTHON")
                        ),
                    ],
                )
            )
        ]
    )
    assert from_gemini(response).message.parts == [
        ImagePart(data=PNG, mime="image/png"),
        FilePart(data=base64.b64encode(pdf).decode(), mime="application/pdf"),
        FilePart(url="gs://b/v.mp4", mime="video/mp4"),
    ]


def test_a_blocked_prompt_gives_an_empty_message_and_the_block_reason() -> None:
    data = {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 9}}
    reply = from_gemini(types.GenerateContentResponse.model_validate(data))
    assert reply.message == Message(role="assistant")
    assert reply.stop_reason == "SAFETY"
    assert reply.usage is not None and reply.usage.input_tokens == 9
    assert to_gemini([Message.user("q"), reply.message])["contents"] == [
        {"role": "user", "parts": [{"text": "q"}]}
    ]
    with pytest.raises(UsageError):
        from_gemini(["not", "a", "response"])


# ---------------------------------------------------------------------------------------------
# Properties.


def _is_gemini_signature(signature: str) -> bool:
    try:
        return bool(base64.b64decode(signature, validate=True))
    except ValueError:
        return False


def gemini_user_parts(msg: Message) -> list[Part]:
    """A user message's parts as Gemini keeps them: no thinking, no empty text."""
    return [
        p
        for p in msg.parts
        if not isinstance(p, ThinkingPart)
        and (not isinstance(p, (TextPart, RefusalPart)) or p.text)
    ]


def gemini_assistant(msg: Message) -> tuple[list[Part], list[ToolCall]]:
    """An assistant message as it comes back from Gemini: Gemini's and neutral unsigned
    thinking (a signature only when it is base64), text and refusals as text; tool calls with
    their signature."""
    parts: list[Part] = []
    for p in msg.parts:
        if isinstance(p, ThinkingPart):
            if p.redacted or p.provider not in ("gemini", ""):
                continue
            if not p.provider and p.signature:
                continue
            signature = p.signature if _is_gemini_signature(p.signature) else ""
            if p.text or signature:
                parts.append(ThinkingPart(p.text, signature, "gemini"))
        elif isinstance(p, (TextPart, RefusalPart)) and p.text:
            parts.append(TextPart(p.text))
    return parts, [ToolCall(c.id, c.name, c.arguments, c.signature) for c in msg.tool_calls]


def expected_assistant_messages(history: list[Message]) -> list[Message]:
    """``history``'s assistant messages as they come back from Gemini: the documented lossy
    rules applied, empty messages left out, consecutive messages of one role merged."""
    return merged_assistant_turns(history, gemini_user_parts, gemini_assistant)


@given(provider_valid_histories())
def test_every_request_is_accepted_by_the_sdk_and_keeps_gemini_s_structure(
    history: list[Message],
) -> None:
    request = to_gemini(history)
    assert_sdk_accepts(request)
    assert gemini_errors(request) == []


@given(provider_valid_histories())
def test_the_model_turns_of_a_request_convert_back_to_the_history_s_messages(
    history: list[Message],
) -> None:
    request = to_gemini(history)
    turns = [c for c in request["contents"] if c["role"] == "model"]
    back = [from_gemini(as_response(content)).message for content in turns]
    assert back == expected_assistant_messages(history)
    assert [from_gemini(as_response(content).model_dump()).message for content in turns] == back


# ---------------------------------------------------------------------------------------------
# A recorded loop.


class ScriptedModels:
    """Stands in for ``genai.Client().models``."""

    def __init__(self, replies: list[Any]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []

    def generate_content(self, *, model: str, contents: Any, config: Any = None) -> Any:
        self.requests.append({"model": model, "contents": contents, "config": config})
        return self.replies.pop(0)


def test_a_recorded_reply_sends_the_call_s_thought_signature_and_responses_in_call_order(
    tmp_path: Path,
) -> None:
    first = fixture("thought_function_calls")
    parsed = types.GenerateContentResponse.model_validate(first)
    final = types.GenerateContentResponse.model_validate(fixture("text"))
    api = ScriptedModels([parsed, final])
    session = open_store(tmp_path / "store").get("weather")
    with session.turn(agent="bot") as turn:
        turn.user("Weather and time in Paris?")
        for _ in range(3):
            request = to_gemini([Message.system("Be brief."), *session.messages()])
            assert_sdk_accepts(request)
            assert gemini_errors(request) == []
            config = {"system_instruction": request.get("system_instruction")}
            reply = from_gemini(
                api.generate_content(
                    model="gemini-2.5-pro", contents=request["contents"], config=config
                )
            )
            with turn.step() as step:
                reply.record(step)
                for call in reversed(reply.message.tool_calls):
                    step.tool_result(call.id, call.name, f"{call.name} ok")
            if not reply.message.tool_calls:
                break
    stored = open_store(tmp_path / "store").get("weather")
    second = to_gemini(stored.messages())
    assert api.requests[1]["contents"] == second["contents"][:3]
    model_turn, responses = second["contents"][1], second["contents"][2]
    signature = first["candidates"][0]["content"]["parts"][1]["thoughtSignature"]
    assert model_turn["parts"] == [
        {"text": first["candidates"][0]["content"]["parts"][0]["text"], "thought": True},
        {
            "function_call": {"name": "get_weather", "args": {"city": "Paris"}},
            "thought_signature": signature,
        },
        {"function_call": {"name": "get_time", "args": {"tz": "Europe/Paris"}}},
    ]
    # Byte-identical: the SDK reads back the very bytes it parsed from the response.
    assert parsed.candidates is not None and parsed.candidates[0].content is not None
    received = parsed.candidates[0].content.parts
    sent = types.Content.model_validate(model_turn).parts
    assert received is not None and sent is not None
    assert sent[1].thought_signature == received[1].thought_signature
    assert sent[1].thought_signature == base64.b64decode(signature)
    assert responses == {
        "role": "user",
        "parts": [
            {
                "function_response": {
                    "name": "get_weather",
                    "response": {"output": "get_weather ok"},
                }
            },
            {"function_response": {"name": "get_time", "response": {"output": "get_time ok"}}},
        ],
    }
    assert api.requests[1]["config"] == {"system_instruction": {"parts": [{"text": "Be brief."}]}}
    usages = [e.payload() for e in stored.read() if e.type == USAGE]
    assert [(u.input_tokens, u.output_tokens, u.reasoning_tokens) for u in usages] == [
        (1200, 135, 95),
        (10, 6, 0),
    ]


# ---------------------------------------------------------------------------------------------
# The documentation runs.


def test_the_gemini_doc_section_has_a_runnable_example(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    run_doc_section("## Google Gemini")
    assert "Sunny, 21°C, 14:05." in capsys.readouterr().out
