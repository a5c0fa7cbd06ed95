"""The Anthropic Messages API format.

:func:`to_anthropic` turns a session's messages into the ``system`` and ``messages`` parameters
of ``client.messages.create(...)``; :func:`from_anthropic` turns its response (the SDK's
``Message`` or its dict form) into a :class:`~agentsession.providers._common.ProviderReply`.
The ``anthropic`` package is never imported here.

What the request looks like, by construction:

* ``system`` is the text of the system messages, wherever they stand, joined with a blank
  line (omitted when there is none). Only their text is sent.
* ``messages`` alternate ``user`` / ``assistant``: consecutive messages of one role are merged
  into one message with several content blocks, and a tool message becomes ``tool_result``
  blocks (``is_error`` when the tool failed; text, image and document content) at the start of
  the next user message, where the API wants them.
* An assistant message sends its parts in order (``thinking``, ``redacted_thinking``, ``text``
  with its citations), then one ``tool_use`` block per tool call.
* A history that breaks the tool-call pairing rule
  (:func:`agentsession.validation.provider_errors`) raises
  :class:`~agentsession.errors.UsageError`; nothing is repaired.
* :func:`anthropic_errors` checks these rules (alternation, ``tool_result`` blocks first in
  the next user message, answering exactly the previous message's ``tool_use`` ids) on any
  request, and returns what breaks them as sentences.

What is dropped or changed, because the API cannot take it (the lossy rules):

* **Thinking.** Anthropic's own blocks (``provider="anthropic"``) are sent back byte-identical:
  ``thinking`` with its ``signature``, ``redacted_thinking`` with its ``data``. Every other
  thinking part is dropped: another provider's (its signature only verifies there), a neutral
  one (the API verifies every thinking block's signature, and sending reasoning as text would
  put words in the model's mouth), one without a signature, and any in a user message.
* **Citations.** ``TextPart.annotations`` go out as the text's ``citations`` when they are
  citations of the five kinds the API accepts back, with the fields it accepts (a response's
  ``file_id`` is left out); anything else (an OpenAI annotation) is dropped. Only assistant
  text carries them.
* **Refusals** are sent as text: it is what the model said.
* **Blank text** (empty or whitespace only) is dropped: the API refuses such blocks. A message
  left with no content is left out (its neighbours merge).
* **Media.** Images go as ``base64`` (``image/jpeg``, ``png``, ``gif``, ``webp``; a ``data:``
  URL is unpacked) or ``url`` sources (``http(s)``); files as ``document`` blocks: PDF
  (``base64`` or ``url``) or ``text/plain`` (sent as text), titled with ``FilePart.name``.
  What cannot be sent that way (another image type, another file type, invalid base64, a
  ``gs://`` URL, media in an assistant message) becomes a short text placeholder saying what
  was left out. ``ImagePart.detail`` is dropped.
* **Tool call order.** A message's tool calls follow its parts; a response that interleaved
  them is sent back with its ``tool_use`` blocks last.
* **Tool call ids** the API would refuse (outside ``[A-Za-z0-9_-]``, or empty) are sent as a
  sanitised id with a hash suffix, the same one in the ``tool_use`` and its ``tool_result``;
  an id used before in the history (a model server that names every call ``call_0``) is sent
  as ``<id>_<n>`` from its second use on (:class:`~agentsession.providers._common.CallIds`).
* **Never sent:** ``Message.name`` and ``author``, ``ToolResult.name`` and ``audit``, the
  ``source`` of media. An :class:`~agentsession.messages.AttachmentRef` still in the history
  raises :class:`~agentsession.errors.UsageError`: hydrate it first
  (:func:`agentsession.media.hydrate_local_attachments`).

:func:`from_anthropic` keeps the response whole: text blocks (with their ``citations`` in
``annotations``, ``null`` fields left out), thinking and redacted thinking as
``ThinkingPart(provider="anthropic")``, ``tool_use`` as tool calls, in one assistant message
(empty text blocks are skipped; server-tool blocks such as ``web_search_tool_result`` are not
represented). Its usage counts the whole prompt as ``input_tokens``
(``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``, the context size),
with the cache reads and writes and the thinking tokens
(``output_tokens_details.thinking_tokens``) beside it.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import UsageError
from ..events import Usage
from ..messages import (
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
from ._common import (
    CallIds,
    ProviderReply,
    as_plain,
    check_history,
    inline_media,
    is_inline,
    placeholder_text,
    split_system,
    thinking_for,
    turn_errors,
)

__all__ = ["anthropic_errors", "from_anthropic", "to_anthropic"]

PROVIDER = "anthropic"
"""The ``ThinkingPart.provider`` of Anthropic's own thinking: the only thinking sent back here."""

_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_TOOL_ID = re.compile(r"[A-Za-z0-9_-]+")
# The fields of each citation kind the API accepts back (TextCitationParam): str, int, or
# a str that may be null but must be present.
_CITATION_FIELDS: dict[str, dict[str, str]] = {
    "char_location": {
        "cited_text": "str",
        "document_index": "int",
        "document_title": "str?",
        "end_char_index": "int",
        "start_char_index": "int",
    },
    "page_location": {
        "cited_text": "str",
        "document_index": "int",
        "document_title": "str?",
        "end_page_number": "int",
        "start_page_number": "int",
    },
    "content_block_location": {
        "cited_text": "str",
        "document_index": "int",
        "document_title": "str?",
        "end_block_index": "int",
        "start_block_index": "int",
    },
    "web_search_result_location": {
        "cited_text": "str",
        "encrypted_index": "str",
        "title": "str?",
        "url": "str",
    },
    "search_result_location": {
        "cited_text": "str",
        "end_block_index": "int",
        "search_result_index": "int",
        "source": "str",
        "start_block_index": "int",
        "title": "str?",
    },
}
# ---------------------------------------------------------------------------------------------
# Request: our messages -> Anthropic.


def to_anthropic(messages: Sequence[Message]) -> dict[str, Any]:
    """The ``system`` and ``messages`` parameters of ``client.messages.create`` for a
    provider-valid history (see the module docstring for what is dropped and why).

    Raises :class:`~agentsession.errors.UsageError` when the history breaks the tool-call
    pairing rule or still holds an attachment reference."""
    check_history(messages, "Anthropic")
    system, rest = split_system(messages)
    ids = CallIds(_tool_id)
    turns: list[dict[str, Any]] = []
    for msg in rest:
        if msg.role == "tool":
            role, blocks = "user", [_tool_result_block(r, ids) for r in msg.tool_results]
        elif msg.role == "assistant":
            role, blocks = "assistant", _assistant_blocks(msg, ids)
        else:
            role, blocks = "user", _user_blocks(msg.parts)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    request: dict[str, Any] = {"messages": turns}
    if system:
        request["system"] = "\n\n".join(system)
    return request


def _text_block(text: str) -> dict[str, Any] | None:
    return {"type": "text", "text": text} if text.strip() else None


def _user_blocks(parts: Sequence[Part]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in parts:
        block: dict[str, Any] | None = None
        if isinstance(part, (TextPart, RefusalPart)):
            block = _text_block(part.text)
        elif isinstance(part, (ImagePart, FilePart)):
            block = _media_block(part)
        # Thinking in a user message has no place in the API.
        if block is not None:
            blocks.append(block)
    return blocks


def _assistant_blocks(msg: Message, ids: CallIds) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in msg.parts:
        block: dict[str, Any] | None = None
        if isinstance(part, ThinkingPart):
            block = _thinking_block(part)
        elif isinstance(part, TextPart):
            block = _text_block(part.text)
            citations = _citations(part.annotations)
            if block is not None and citations:
                block["citations"] = citations
        elif isinstance(part, RefusalPart):
            block = _text_block(part.text)
        elif isinstance(part, (ImagePart, FilePart)):
            block = _placeholder(part, "the API takes media from the user only")
        if block is not None:
            blocks.append(block)
    blocks.extend(
        {"type": "tool_use", "id": ids.call(call), "name": call.name, "input": call.arguments}
        for call in msg.tool_calls
    )
    return blocks


def _thinking_block(part: ThinkingPart) -> dict[str, Any] | None:
    # A neutral part passes thinking_for, but has no signature for the API to verify.
    if not thinking_for(part, PROVIDER) or part.provider != PROVIDER or not part.signature:
        return None
    if part.redacted:
        return {"type": "redacted_thinking", "data": part.signature}
    return {"type": "thinking", "thinking": part.text, "signature": part.signature}


def _citations(annotations: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for note in annotations:
        kind = note.get("type")
        fields = _CITATION_FIELDS.get(kind) if isinstance(kind, str) else None
        if fields is None:
            continue
        citation: dict[str, Any] = {"type": kind}
        for field, expected in fields.items():
            value = note.get(field)
            if expected == "int":
                valid = type(value) is int
            elif expected == "str":
                valid = type(value) is str
            else:
                valid = value is None or type(value) is str
            if not valid:
                break
            citation[field] = value
        else:
            out.append(citation)
    return out


def _tool_result_block(result: ToolResult, ids: CallIds) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": ids.result(result)}
    content = _user_blocks(result.parts)
    if result.content.strip():
        if content:
            content.insert(0, {"type": "text", "text": result.content})
        else:
            block["content"] = result.content
    if content:
        block["content"] = content
    if result.is_error:
        block["is_error"] = True
    return block


def _tool_id(call_id: str) -> str:
    if _TOOL_ID.fullmatch(call_id):
        return call_id
    digest = hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{re.sub(r'[^A-Za-z0-9_-]', '_', call_id)}_{digest}"


# ---------------------------------------------------------------------------------------------
# The API's structure.


def anthropic_errors(request: Mapping[str, Any]) -> list[str]:
    """Every way a Messages API request (``system`` and ``messages``, as :func:`to_anthropic`
    returns them) breaks the API's structural rules, as readable sentences (an empty list
    means valid; ``to_anthropic`` of a provider-valid history always gives one), like
    :func:`agentsession.validation.provider_errors` for our own messages.

    The rules: ``messages`` alternate ``user`` and ``assistant``, each with content; no text
    block is blank; ``tool_use`` blocks stand in assistant messages only, with ids of
    ``[A-Za-z0-9_-]`` unique in the request; ``tool_result`` blocks stand in user messages only,
    before every other block; and the tool_result blocks of a message answer exactly the
    tool_use blocks of the assistant message before it, each id once (so every tool_use is
    answered in the very next message)."""
    if not isinstance(request, Mapping):
        return [f"the request is not an object but {type(request).__name__}"]
    system = request.get("system")
    errors: list[str] = []
    if system is not None and not isinstance(system, (str, list)):
        errors.append(f"system is {type(system).__name__}, not text or a list of text blocks")
    found, turns = turn_errors(
        request.get("messages"),
        roles=("user", "assistant"),
        key="content",
        noun="message",
        item="block",
        from_text=lambda text: {"type": "text", "text": text},
    )
    errors += found
    seen: set[str] = set()
    uses: list[str] = []  # the tool_use ids of the message before
    for i, (role, blocks) in enumerate(turns):
        kinds = [b.get("type") for b in blocks]
        first_other = next((j for j, k in enumerate(kinds) if k != "tool_result"), len(kinds))
        if "tool_result" in kinds[first_other:]:
            errors.append(f"message {i}: tool_result blocks must come before every other block")
        results: list[str] = []
        new_uses: list[str] = []
        for j, block in enumerate(blocks):
            kind, text = block.get("type"), block.get("text")
            if kind == "text" and not (isinstance(text, str) and text.strip()):
                errors.append(f"message {i}, block {j}: blank text")
            if kind not in ("tool_result", "tool_use"):
                continue
            ref = block.get("tool_use_id" if kind == "tool_result" else "id")
            if not isinstance(ref, str):
                errors.append(f"message {i}, block {j}: {kind} without an id")
            else:
                (results if kind == "tool_result" else new_uses).append(ref)
        if results and role != "user":
            errors.append(f"message {i}: tool_result blocks in a message of role {role!r}")
        errors.extend(
            f"message {i - 1}: tool_use {use!r} has no tool_result in the next message"
            for use in (Counter(uses) - Counter(results)).elements()
        )
        errors.extend(
            f"message {i}: tool_result {result!r} answers no tool_use of the message before it"
            for result in (Counter(results) - Counter(uses)).elements()
        )
        uses = new_uses
        if uses and role != "assistant":
            errors.append(f"message {i}: tool_use blocks in a message of role {role!r}")
        for use in uses:
            if not _TOOL_ID.fullmatch(use):
                errors.append(f"message {i}: tool_use id {use!r} is not of [A-Za-z0-9_-]")
            if use in seen:
                errors.append(f"message {i}: tool_use id {use!r} is used twice")
            seen.add(use)
    errors.extend(
        f"message {len(turns) - 1}: tool_use {use!r} has no tool_result after it" for use in uses
    )
    return errors


# ---------------------------------------------------------------------------------------------
# Media.


def _placeholder(part: ImagePart | FilePart, reason: str) -> dict[str, Any]:
    return {"type": "text", "text": placeholder_text(part, reason)}


def _media_block(part: ImagePart | FilePart) -> dict[str, Any]:
    """An ``image`` or ``document`` block, by media type (an image given as a file is sent as
    an image), or a placeholder."""
    media = inline_media(part)
    if media is None:
        url, mime = ("" if is_inline(part) else part.url), part.mime.lower()
        if not url.startswith(("https://", "http://")):
            return _placeholder(part, "no inline data or http(s) URL Anthropic can read")
        if mime.startswith("image/") or (not mime and isinstance(part, ImagePart)):
            return {"type": "image", "source": {"type": "url", "url": url}}
        if mime == "application/pdf" or (not mime and url.split("?")[0].endswith(".pdf")):
            return _document(part, {"type": "url", "url": url})
        return _placeholder(part, "Anthropic reads PDF documents only from a URL")
    mime, data = media
    if mime in _IMAGE_TYPES:
        return {"type": "image", "source": {"type": "base64", "media_type": mime, "data": data}}
    if mime == "application/pdf":
        return _document(part, {"type": "base64", "media_type": mime, "data": data})
    if mime == "text/plain":
        try:
            text = base64.b64decode(data).decode("utf-8")
        except UnicodeDecodeError:
            return _placeholder(part, "the text is not UTF-8")
        return _document(part, {"type": "text", "media_type": mime, "data": text})
    return _placeholder(
        part, "Anthropic takes JPEG, PNG, GIF and WebP images, PDF and plain-text documents"
    )


def _document(part: ImagePart | FilePart, source: dict[str, Any]) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "document", "source": source}
    if isinstance(part, FilePart) and part.name:
        block["title"] = part.name
    return block


# ---------------------------------------------------------------------------------------------
# Response: Anthropic -> our messages.


def from_anthropic(response: Any) -> ProviderReply:
    """Convert a Messages API response (the SDK's ``Message`` or its dict form) into one
    assistant message, its usage, stop reason, id and model."""
    data = as_plain(response)
    if not isinstance(data, Mapping):
        raise UsageError(f"not an Anthropic response: {type(response).__name__}")
    parts: list[Part] = []
    calls: list[ToolCall] = []
    for raw in data.get("content") or []:
        block = as_plain(raw)
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text":
            text = block.get("text") or ""
            citations = [
                {k: v for k, v in c.items() if v is not None} for c in block.get("citations") or []
            ]
            if text or citations:
                parts.append(TextPart(text, annotations=citations))
        elif kind == "thinking":
            parts.append(
                ThinkingPart(
                    block.get("thinking") or "",
                    signature=block.get("signature") or "",
                    provider=PROVIDER,
                )
            )
        elif kind == "redacted_thinking":
            parts.append(
                ThinkingPart(
                    "", signature=block.get("data") or "", provider=PROVIDER, redacted=True
                )
            )
        elif kind == "tool_use":
            call_id, name = block.get("id"), block.get("name")
            if type(call_id) is not str or type(name) is not str:
                raise UsageError(f"tool_use block without a string id and name: {block!r}")
            calls.append(ToolCall(call_id, name, block.get("input") or {}))
    return ProviderReply(
        messages=[Message(role="assistant", parts=parts, tool_calls=calls)],
        usage=_usage(data.get("usage")),
        stop_reason=data.get("stop_reason") or "",
        id=data.get("id") or "",
        model=data.get("model") or "",
    )


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, Mapping):
        return None
    fresh = raw.get("input_tokens") or 0
    output = raw.get("output_tokens") or 0
    read = raw.get("cache_read_input_tokens") or 0
    write = raw.get("cache_creation_input_tokens") or 0
    details = raw.get("output_tokens_details")
    thinking = (details.get("thinking_tokens") or 0) if isinstance(details, Mapping) else 0
    prompt = fresh + read + write
    return Usage(
        input_tokens=prompt,
        output_tokens=output,
        total_tokens=prompt + output,
        cache_read_tokens=read,
        cache_write_tokens=write,
        reasoning_tokens=thinking,
    )
