"""Hypothesis strategies shared by the tests of ``agentsession.providers``.

:func:`provider_valid_histories` draws message lists such as ``session.messages()`` returns:
system, user, assistant and tool messages that always pass
:func:`agentsession.validation.provider_errors` (every tool call answered, by exactly one result,
before the next user, system or assistant message). They mix everything the neutral model can
hold, so that each provider format meets what it must drop as well as what it must keep:

* user messages with text, images (``https:`` URLs, ``data:`` URLs, base64 ``data``, with and
  without ``detail`` and ``source``), files (PDF by data or URL, WAV audio by data) and a
  participant ``name`` (some valid for OpenAI's pattern, some not);
* assistant messages with thinking of each provider first (Anthropic signed and redacted
  blocks, OpenAI reasoning items as runs of parts sharing an ``rs_`` id with the
  ``encrypted_content`` on the first, Gemini thoughts with and without a signature, neutral
  unsigned thinking), then text (with annotations in OpenAI Responses, OpenAI Chat and
  Anthropic shapes) and refusals, then tool calls (some carrying a Gemini signature);
* tool messages answering the calls one by one or several results at once, in any order, with
  ``is_error``, ``audit`` and extra ``parts`` (images, text);
* system messages at the start and, now and then, between turns; two assistant messages in a
  row, and histories that end with a user message, an assistant message or tool results.

Tool call ids are unique within a history (as the providers make them);
:func:`histories_with_reused_ids` draws the same histories with ids reused (a model server that
answers ``call_0`` every time), also within one message, empty, and clashing with the forms the
converters give repeated or illegal ids.

It also holds the few helpers the provider tests share: :func:`merged_assistant_turns` (what
comes back from an API that merges messages of one role) and :func:`run_doc_section` (the
examples of a section of docs/providers.md run as one program).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import strategies as st

from agentsession.messages import (
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

__all__ = [
    "annotations",
    "assistant_parts",
    "files",
    "histories_with_reused_ids",
    "images",
    "json_objects",
    "merged_assistant_turns",
    "provider_valid_histories",
    "run_doc_section",
    "texts",
    "thinking_runs",
]

texts = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=24)
"""Non-empty text (no lone surrogates: every provider speaks UTF-8 JSON)."""

_b64 = st.binary(min_size=1, max_size=16).map(lambda b: base64.b64encode(b).decode("ascii"))
_hex = st.binary(min_size=4, max_size=8).map(bytes.hex)
_IMAGE_MIMES = ("image/png", "image/jpeg", "image/gif", "image/webp")


@st.composite
def images(draw: st.DrawFn) -> ImagePart:
    """An image by ``https:`` URL, by ``data:`` URL or by base64 ``data``."""
    mime = draw(st.sampled_from(_IMAGE_MIMES))
    detail = draw(st.sampled_from(("", "", "low", "high", "auto")))
    source = draw(st.sampled_from(("", "", "upload/shot.png")))
    kind = draw(st.sampled_from(("https", "data-url", "data")))
    if kind == "https":
        name = draw(_hex)
        return ImagePart(url=f"https://example.com/{name}.png", detail=detail, source=source)
    data = draw(_b64)
    if kind == "data-url":
        return ImagePart(url=f"data:{mime};base64,{data}", mime=mime, detail=detail, source=source)
    return ImagePart(data=data, mime=mime, detail=detail, source=source)


@st.composite
def files(draw: st.DrawFn) -> FilePart:
    """A PDF by base64 data or by URL, or WAV audio by base64 data."""
    kind = draw(st.sampled_from(("pdf-data", "pdf-url", "wav")))
    name = draw(st.sampled_from(("", "report.pdf")))
    if kind == "pdf-url":
        return FilePart(url=f"https://example.com/{draw(_hex)}.pdf", mime="application/pdf")
    if kind == "wav":
        return FilePart(data=draw(_b64), mime="audio/wav")
    return FilePart(data=draw(_b64), mime="application/pdf", name=name)


@st.composite
def annotations(draw: st.DrawFn) -> dict[str, Any]:
    """One text annotation as a provider returns it: OpenAI Responses' flat ``url_citation``
    or ``file_citation``, OpenAI Chat's nested ``url_citation``, Anthropic's
    ``char_location`` citation."""
    start = draw(st.integers(0, 20))
    end = start + draw(st.integers(0, 20))
    url = f"https://example.com/{draw(_hex)}"
    title = draw(texts)
    kind = draw(st.sampled_from(("responses-url", "responses-file", "chat-url", "anthropic")))
    if kind == "responses-url":
        return {
            "type": "url_citation",
            "url": url,
            "title": title,
            "start_index": start,
            "end_index": end,
        }
    if kind == "responses-file":
        return {
            "type": "file_citation",
            "file_id": f"file-{draw(_hex)}",
            "filename": "notes.txt",
            "index": start,
        }
    if kind == "chat-url":
        return {
            "type": "url_citation",
            "url_citation": {"url": url, "title": title, "start_index": start, "end_index": end},
        }
    return {
        "type": "char_location",
        "cited_text": draw(texts),
        "document_index": 0,
        "document_title": title,
        "start_char_index": start,
        "end_char_index": end,
    }


@st.composite
def thinking_runs(draw: st.DrawFn) -> list[ThinkingPart]:
    """The thinking one provider put before an answer, as the converters store it."""
    provider = draw(st.sampled_from(("anthropic", "anthropic-redacted", "openai", "gemini", "")))
    if provider == "anthropic":
        return [ThinkingPart(draw(texts), draw(_b64), provider="anthropic")]
    if provider == "anthropic-redacted":
        return [ThinkingPart("", draw(_b64), provider="anthropic", redacted=True)]
    if provider == "gemini":
        signature = draw(st.one_of(st.just(""), _b64))
        return [ThinkingPart(draw(texts), signature, provider="gemini")]
    if provider == "":
        return [ThinkingPart(draw(texts))]
    # An OpenAI reasoning item: one part per summary text, the encrypted content on the first;
    # an item without a summary is one part with no text.
    item_id = f"rs_{draw(_hex)}"
    encrypted = draw(st.one_of(st.just(""), _b64))
    summary = draw(st.lists(texts, max_size=3))
    if not summary:
        return [ThinkingPart("", encrypted, provider="openai", id=item_id)]
    return [
        ThinkingPart(text, encrypted if i == 0 else "", provider="openai", id=item_id)
        for i, text in enumerate(summary)
    ]


@st.composite
def assistant_parts(draw: st.DrawFn) -> list[Part]:
    """Thinking first, then text (some annotated) and refusals."""
    parts: list[Part] = []
    for run in draw(st.lists(thinking_runs(), max_size=2)):
        parts.extend(run)
    for kind in draw(
        st.lists(st.sampled_from(("text", "text", "annotated", "refusal")), max_size=3)
    ):
        if kind == "refusal":
            parts.append(RefusalPart(draw(texts)))
        elif kind == "annotated":
            parts.append(
                TextPart(draw(texts), draw(st.lists(annotations(), min_size=1, max_size=2)))
            )
        else:
            parts.append(TextPart(draw(texts)))
    return parts


_json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
json_objects = st.dictionaries(
    st.text(max_size=8),
    st.recursive(
        _json_scalars,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
        ),
        max_leaves=6,
    ),
    max_size=4,
)
"""Tool-call arguments: JSON objects."""

_tool_names = st.sampled_from(("read", "search", "run_tests", "get_weather"))


def _user_message(draw: st.DrawFn) -> Message:
    parts: list[Part] = draw(
        st.lists(
            st.one_of(texts.map(TextPart), texts.map(TextPart), images(), files()),
            min_size=1,
            max_size=3,
        )
    )
    name = draw(st.sampled_from(("", "", "", "alice", "bob smith")))
    return Message(role="user", parts=parts, name=name)


def _result(draw: st.DrawFn, call: ToolCall) -> ToolResult:
    extra: list[Part] = draw(
        st.lists(st.one_of(images(), texts.map(TextPart)), max_size=2)
        if draw(st.integers(0, 3)) == 0
        else st.just([])
    )
    return ToolResult(
        call.id,
        call.name,
        draw(st.one_of(st.just(""), texts)),
        is_error=draw(st.integers(0, 4)) == 0,
        audit=draw(st.sampled_from(({}, {}, {"decision": "approved"}))),
        parts=extra,
    )


def _tool_messages(draw: st.DrawFn, calls: list[ToolCall]) -> list[Message]:
    results = draw(st.permutations([_result(draw, call) for call in calls]))
    if draw(st.booleans()):
        return [Message.tool(result) for result in results]
    return [Message.tool(*results)]


@st.composite
def provider_valid_histories(draw: st.DrawFn) -> list[Message]:
    """A provider-valid message list (see the module docstring for what it mixes)."""
    history: list[Message] = []
    next_call = 0
    if draw(st.booleans()):
        history.append(Message.system(draw(texts)))
    for turn in range(draw(st.integers(1, 3))):
        if turn and draw(st.integers(0, 4)) == 0:
            history.append(Message.system(draw(texts)))
        history.append(_user_message(draw))
        if draw(st.integers(0, 5)) == 0:
            continue  # the history may end with (or hold two) user messages
        for _ in range(draw(st.integers(0, 2))):
            calls = []
            for _ in range(draw(st.integers(1, 3))):
                signature = draw(st.one_of(st.just(""), st.just(""), _b64))
                calls.append(
                    ToolCall(f"call_{next_call}", draw(_tool_names), draw(json_objects), signature)
                )
                next_call += 1
            author = draw(st.sampled_from(("", "", "researcher")))
            history.append(
                Message(
                    role="assistant", parts=draw(assistant_parts()), tool_calls=calls, author=author
                )
            )
            history.extend(_tool_messages(draw, calls))
        for _ in range(draw(st.integers(0, 2))):
            parts = draw(assistant_parts())
            if parts:
                history.append(Message(role="assistant", parts=parts))
    return history


_REUSED_IDS = ("call_0", "call_0", "call_0", "call_1", "call_0_2", "call 0", "", "toolu_1")
"""What reused ids are drawn from: repeats, an id with a space (Anthropic refuses it), an empty
one, and one of the form a repeated ``call_0`` may be renamed to."""


def _renamed(msg: Message, ids: dict[str, str]) -> Message:
    calls = [msgspec.structs.replace(c, id=ids[c.id]) for c in msg.tool_calls]
    results = [msgspec.structs.replace(r, call_id=ids[r.call_id]) for r in msg.tool_results]
    return msgspec.structs.replace(msg, tool_calls=calls, tool_results=results)


@st.composite
def histories_with_reused_ids(draw: st.DrawFn) -> list[Message]:
    """A :func:`provider_valid_histories` history whose call ids are renamed to a few reused
    ones: still provider-valid, as ``session.messages()`` is for such a model server."""
    history = draw(provider_valid_histories())
    ids = {c.id: draw(st.sampled_from(_REUSED_IDS)) for m in history for c in m.tool_calls}
    return [_renamed(msg, ids) for msg in history]


# ---------------------------------------------------------------------------------------------
# Helpers the provider tests share.


def merged_assistant_turns(
    history: list[Message],
    user_parts: Callable[[Message], list[Part]],
    assistant: Callable[[Message], tuple[list[Part], list[ToolCall]]],
) -> list[Message]:
    """``history``'s assistant messages as they come back from an API that merges consecutive
    messages of one role (Anthropic, Gemini): each user message kept as ``user_parts`` gives
    it, each assistant message as ``assistant`` gives its parts and calls, tool results as a
    user turn, system messages apart; messages left empty are left out, then the neighbours of
    one role merge."""
    turns: list[tuple[str, list[Part], list[ToolCall]]] = []
    for msg in history:
        parts: list[Part] = []
        calls: list[ToolCall] = []
        if msg.role == "system":
            continue
        if msg.role == "tool":
            role, calls = "user", [ToolCall("result", "result")]
        elif msg.role == "user":
            role, parts = "user", user_parts(msg)
        else:
            role = "assistant"
            parts, calls = assistant(msg)
        if not parts and not calls:
            continue
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(parts)
            turns[-1][2].extend(calls)
        else:
            turns.append((role, parts, calls))
    return [
        Message(role="assistant", parts=parts, tool_calls=calls)
        for role, parts, calls in turns
        if role == "assistant"
    ]


PROVIDERS_DOC = Path(__file__).resolve().parent.parent / "docs" / "providers.md"


def run_doc_section(heading: str) -> None:
    """Run each Python block of the section of docs/providers.md under ``heading`` (a ``## ``
    heading, or its start), each a whole program, in the current directory."""
    text = PROVIDERS_DOC.read_text(encoding="utf-8")
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert blocks, f"no Python example under {heading!r}"
    for index, code in enumerate(blocks):
        where = f"docs/providers.md {heading!r} block {index}"
        exec(compile(code, where, "exec"), {"__name__": "__docs__"})
