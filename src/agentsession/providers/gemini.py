"""The Google Gemini ``generateContent`` format (the ``google-genai`` SDK's ``Content``).

:func:`to_gemini` turns a session's messages into the ``system_instruction`` and ``contents``
of ``client.models.generate_content(...)``; :func:`from_gemini` turns its response (the SDK's
``GenerateContentResponse`` or its dict form, with snake_case or camelCase keys) into a
:class:`~agentsession.providers._common.ProviderReply`. The ``google.genai`` package is never
imported here.

What the request looks like, by construction:

* ``system_instruction`` is a ``Content`` with one text part per system message, wherever
  they stand (omitted when there is none). Only their text is sent.
* ``contents`` are plain dicts with the SDK's snake_case field names (``function_call``,
  ``inline_data``, ``thought_signature``: what ``types.Content`` and its ``ContentDict``
  accept; the REST API takes these names too). Bytes (inline data, thought signatures) are
  standard base64 strings, which the SDK decodes, so a request can also be serialised as
  JSON as it is.
* Roles are ``user`` and ``model``; consecutive messages of one role are merged into one
  ``Content``. An assistant message sends its parts in order (thought parts, text, media),
  then one ``function_call`` part per tool call, with the call's ``thought_signature``.
* The results of one model turn's calls go as ``function_response`` parts in one ``user``
  ``Content``, in the order of the calls (Gemini matches responses to calls by position when
  there are no ids; two calls of one turn with one id are told apart by their tool names), at
  the start of that content; ``response`` is ``{"output": text}``, or
  ``{"error": text}`` when the tool failed; images and files the tool returned are the
  response's ``parts``.
* A history that breaks the tool-call pairing rule
  (:func:`agentsession.validation.provider_errors`) raises
  :class:`~agentsession.errors.UsageError`; nothing is repaired.
* :func:`gemini_errors` checks these rules (alternation, one kind of data per part, the
  function responses grouped in the next user content in call order) on any request, and
  returns what breaks them as sentences.

**Call ids.** Gemini may leave a ``function_call`` without an ``id``. :func:`from_gemini` then
gives the call a stable id: ``gemini-call-<n>-<digest>``, ``n`` the call's position among the
response's calls and ``digest`` 12 hex digits of a SHA-256 over the response id, ``n``, the
name, the arguments and the signature, so converting one response twice gives the same ids,
and the ids use only ``[A-Za-z0-9-]`` (other APIs take them). Such an id was never Gemini's:
:func:`to_gemini` sends the call and its response without an id (matched by position, as
Gemini returned them), and sends every other id (one Gemini gave, or another provider's) on
both the ``function_call`` and its ``function_response``.

What is dropped or changed, because the API cannot take it (the lossy rules):

* **Thinking.** Gemini's own parts (``provider="gemini"``) go back as ``thought`` parts with
  their ``thought_signature``; a neutral part without a signature goes as a ``thought`` part.
  Every other thinking part is dropped (another provider's signature means nothing here),
  and so is thinking in a user message, a redacted (Anthropic) block, and one with neither
  text nor signature. A signature that is not base64 cannot be Gemini's and is dropped.
* **Signatures on other parts.** Gemini also signs text and media parts. :func:`from_gemini`
  keeps such a signature as an empty ``ThinkingPart(provider="gemini")`` just before the part
  it came on, and :func:`to_gemini` puts it back on that part; with no part after it, it is
  sent as an empty text part carrying the signature (what the streaming API returns). A
  ``thought`` part with no text comes back that way too.
* **Refusals** are sent as text: it is what the model said.
* **Empty text** is dropped; a message left with no parts is left out (its neighbours merge).
* **Media.** Inline data (``data`` or a ``data:`` URL) goes as ``inline_data``, a URL as
  ``file_data`` (``file_uri``) with the part's media type (guessed from the extension when
  the part has none; the base64 of inline data is sniffed for common image and PDF types).
  Media whose type is unknown, or whose data is not base64, becomes a short text
  placeholder. ``ImagePart.detail`` and ``FilePart.name`` are dropped (Gemini's
  ``display_name`` is for server-side tools only). Text parts of a tool result are appended
  to its output text.
* **Tool call order.** A message's tool calls follow its parts.
* **Never sent:** ``Message.name`` and ``author``, ``ToolResult.audit``, ``ToolResult.name``
  (a ``function_response`` carries its call's name, as Gemini checks), the ``source`` of
  media. An :class:`~agentsession.messages.AttachmentRef` still in the history raises
  :class:`~agentsession.errors.UsageError`: hydrate it first
  (:func:`agentsession.media.hydrate_local_attachments`).

:func:`from_gemini` reads the first candidate: text, thought parts (as
``ThinkingPart(provider="gemini", signature=thought_signature)``), inline and file data (an
image type as :class:`~agentsession.messages.ImagePart`, any other as
:class:`~agentsession.messages.FilePart`) and function calls (with their
``thought_signature``), in one assistant message (empty when there is no candidate).
Server-side tool parts (``executable_code``, ``code_execution_result``, ``tool_call``) are not
represented. Its usage counts ``prompt_token_count + tool_use_prompt_token_count`` as
``input_tokens`` (the context size, cached tokens included) and
``candidates_token_count + thoughts_token_count`` as ``output_tokens``, with the cached and
the thought tokens beside them; ``total_tokens`` is Gemini's ``total_token_count``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import mimetypes
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
    ProviderReply,
    answered_call,
    as_plain,
    check_history,
    inline_media,
    is_inline,
    placeholder_text,
    split_system,
    standard_base64,
    thinking_for,
    turn_errors,
)

__all__ = ["INVENTED_CALL_ID_PREFIX", "from_gemini", "gemini_errors", "to_gemini"]

PROVIDER = "gemini"
"""The ``ThinkingPart.provider`` of Gemini's own thinking, sent back with its signatures."""

INVENTED_CALL_ID_PREFIX = "gemini-call-"
"""The prefix of the call ids :func:`from_gemini` makes up for calls Gemini gave no id;
:func:`to_gemini` never sends such an id."""

# ---------------------------------------------------------------------------------------------
# Request: our messages -> Gemini.


def to_gemini(messages: Sequence[Message]) -> dict[str, Any]:
    """The ``contents`` and ``system_instruction`` of ``client.models.generate_content`` for a
    provider-valid history (see the module docstring for what is dropped and why).

    Raises :class:`~agentsession.errors.UsageError` when the history breaks the tool-call
    pairing rule or still holds an attachment reference."""
    check_history(messages, "Gemini")
    system, rest = split_system(messages)
    contents: list[dict[str, Any]] = []
    calls: list[ToolCall] = []  # the calls of the last model turn, which results answer
    i = 0
    while i < len(rest):
        msg = rest[i]
        i += 1
        if msg.role == "tool":
            results = list(msg.tool_results)
            while i < len(rest) and rest[i].role == "tool":
                results.extend(rest[i].tool_results)
                i += 1
            role, parts = "user", _function_responses(results, calls)
        elif msg.role == "assistant":
            role, parts = "model", _model_parts(msg)
            if msg.tool_calls:
                calls = list(msg.tool_calls)
        else:
            role, parts = "user", _user_parts(msg.parts)
        if not parts:
            continue
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})
    request: dict[str, Any] = {"contents": contents}
    if system:
        request["system_instruction"] = {"parts": [{"text": text} for text in system]}
    return request


def _user_parts(parts: Sequence[Part]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, (TextPart, RefusalPart)):
            if part.text:
                out.append({"text": part.text})
        elif isinstance(part, (ImagePart, FilePart)):
            out.append(_media_part(part))
        # Thinking in a user message has no place in the API.
    return out


def _model_parts(msg: Message) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    carried = ""  # a signature waiting for the part it was given on
    for part in msg.parts:
        if isinstance(part, ThinkingPart):
            if carried:
                out.append({"text": "", "thought_signature": carried})
                carried = ""
            if part.redacted or not thinking_for(part, PROVIDER):
                continue
            signature = _signature(part.signature)
            if part.text:
                thought: dict[str, Any] = {"text": part.text, "thought": True}
                if signature:
                    thought["thought_signature"] = signature
                out.append(thought)
            else:
                carried = signature
            continue
        if isinstance(part, (TextPart, RefusalPart)):
            if not part.text:
                continue
            sent: dict[str, Any] = {"text": part.text}
        elif isinstance(part, (ImagePart, FilePart)):
            sent = _media_part(part)
        else:
            continue
        if carried:
            sent["thought_signature"] = carried
            carried = ""
        out.append(sent)
    if carried:
        out.append({"text": "", "thought_signature": carried})
    for call in msg.tool_calls:
        function_call: dict[str, Any] = {"name": call.name, "args": call.arguments}
        if _sends_id(call.id):
            function_call["id"] = call.id
        sent = {"function_call": function_call}
        signature = _signature(call.signature)
        if signature:
            sent["thought_signature"] = signature
        out.append(sent)
    return out


def _sends_id(call_id: str) -> bool:
    return bool(call_id) and not call_id.startswith(INVENTED_CALL_ID_PREFIX)


def _function_responses(results: list[ToolResult], calls: list[ToolCall]) -> list[dict[str, Any]]:
    # The history is provider-valid: every result answers one of the last model turn's calls.
    waiting = list(enumerate(calls))
    answered: list[tuple[int, ToolResult]] = []
    for result in results:
        at = answered_call([call for _, call in waiting], result)
        if at is not None:
            answered.append((waiting.pop(at)[0], result))
    answered.sort(key=lambda pair: pair[0])
    return [_function_response(result, calls[n]) for n, result in answered]


def _function_response(result: ToolResult, call: ToolCall) -> dict[str, Any]:
    texts = [result.content] if result.content else []
    media: list[dict[str, Any]] = []
    for part in result.parts:
        if isinstance(part, (TextPart, RefusalPart)):
            if part.text:
                texts.append(part.text)
        elif isinstance(part, (ImagePart, FilePart)):
            sent = _media_part(part)
            if "text" in sent:
                texts.append(sent["text"])
            else:
                media.append(sent)
    response: dict[str, Any] = {
        "name": call.name,  # Gemini checks it against the call's
        "response": {"error" if result.is_error else "output": "\n".join(texts)},
    }
    if _sends_id(call.id):
        response["id"] = call.id
    if media:
        response["parts"] = media
    return {"function_response": response}


# ---------------------------------------------------------------------------------------------
# The API's structure.

_DATA_KEYS = (
    "text",
    "inline_data",
    "file_data",
    "function_call",
    "function_response",
    "executable_code",
    "code_execution_result",
)
"""The fields of a ``Part`` that hold its data: a part holds exactly one."""


def gemini_errors(request: Mapping[str, Any]) -> list[str]:
    """Every way a ``generateContent`` request (``contents`` and ``system_instruction``, as
    :func:`to_gemini` returns them; snake_case or camelCase keys) breaks the API's structural
    rules, as readable sentences (an empty list means valid; ``to_gemini`` of a provider-valid
    history always gives one), like :func:`agentsession.validation.provider_errors` for our own
    messages.

    The rules: ``contents`` alternate ``user`` and ``model``, each with parts; a part holds
    exactly one kind of data, and an empty text only to carry a ``thought_signature``;
    ``function_call`` parts stand in model contents only, never with an id
    :func:`from_gemini` made up; ``function_response`` parts stand in user contents only, before
    every other part; and the function responses of a content answer the function calls of the
    model content right before it, one each, in call order (Gemini pairs them by position):
    the same name, and the call's id (or none when the call has none)."""
    if not isinstance(request, Mapping):
        return [f"the request is not an object but {type(request).__name__}"]
    errors, turns = turn_errors(
        _get(request, "contents"), roles=("user", "model"), key="parts", noun="content", item="part"
    )
    calls: list[Mapping[str, Any]] = []  # the function calls of the content before
    for i, (role, parts) in enumerate(turns):
        for j, part in enumerate(parts):
            held = [k for k in _DATA_KEYS if _get(part, k) is not None]
            if len(held) != 1:
                errors.append(f"content {i}, part {j}: holds {' and '.join(held) or 'no data'}")
            if _get(part, "text") == "" and _get(part, "thought_signature") is None:
                errors.append(f"content {i}, part {j}: empty text without a thought signature")
        responses = [_get(p, "function_response") for p in parts]
        leading = next((j for j, r in enumerate(responses) if r is None), len(responses))
        if any(r is not None for r in responses[leading:]):
            errors.append(f"content {i}: function responses must come before every other part")
        answers = [r if isinstance(r, Mapping) else {} for r in responses if r is not None]
        if answers and role != "user":
            errors.append(f"content {i}: function responses in a content of role {role!r}")
        errors += _pairing_errors(i, calls, answers)
        found = (_get(p, "function_call") for p in parts)
        calls = [c if isinstance(c, Mapping) else {} for c in found if c is not None]
        if calls and role != "model":
            errors.append(f"content {i}: function calls in a content of role {role!r}")
        errors.extend(
            f"content {i}: function call {_get(c, 'name')!r} has the made-up id {_get(c, 'id')!r}"
            for c in calls
            if str(_get(c, "id") or "").startswith(INVENTED_CALL_ID_PREFIX)
        )
    errors.extend(
        f"content {len(turns) - 1}: function call {n} ({_get(c, 'name')!r}) has no function "
        "response after it"
        for n, c in enumerate(calls)
    )
    return errors


def _pairing_errors(
    i: int, calls: list[Mapping[str, Any]], answers: list[Mapping[str, Any]]
) -> list[str]:
    """How the function responses of content ``i`` fail to answer the calls of the content
    before it, position by position."""
    errors: list[str] = []
    for n in range(max(len(calls), len(answers))):
        if n >= len(answers):
            name = _get(calls[n], "name")
            errors.append(
                f"content {i - 1}: function call {n} ({name!r}) has no function response in "
                "the next content"
            )
            continue
        answer_name, answer_id = _get(answers[n], "name"), _get(answers[n], "id")
        if n >= len(calls):
            errors.append(
                f"content {i}: function response {n} ({answer_name!r}) answers no function "
                "call of the content before it"
            )
            continue
        call_name, call_id = _get(calls[n], "name"), _get(calls[n], "id")
        if answer_name != call_name:
            errors.append(
                f"content {i}: function response {n} is for {answer_name!r}, but call {n} of "
                f"content {i - 1} is {call_name!r} (responses go in call order)"
            )
        if answer_id != call_id:
            errors.append(
                f"content {i}: function response {n} has the id {answer_id!r}, but call {n} of "
                f"content {i - 1} has {call_id!r}"
            )
    return errors


# ---------------------------------------------------------------------------------------------
# Media and signatures.


def _signature(value: str) -> str:
    """A signature as standard base64, or "" when it is not base64 (it cannot be Gemini's)."""
    decoded = standard_base64(value) if value else None
    return decoded[0] if decoded is not None and decoded[1] else ""


def _media_part(part: ImagePart | FilePart) -> dict[str, Any]:
    """An ``inline_data`` or ``file_data`` part, or a text placeholder."""
    if not is_inline(part):
        if not part.url:
            return _placeholder(part, "it holds no base64 data")
        mime = part.mime.lower() or (mimetypes.guess_type(part.url.split("?")[0])[0] or "")
        if not mime:
            return _placeholder(part, "its media type is unknown")
        return {"file_data": {"file_uri": part.url, "mime_type": mime}}
    media = inline_media(part)
    if media is None:
        reason = "its data is not base64" if part.data else "it holds no base64 data"
        return _placeholder(part, reason)
    mime, data = media
    if not mime:
        return _placeholder(part, "its media type is unknown")
    return {"inline_data": {"mime_type": mime, "data": data}}


def _placeholder(part: ImagePart | FilePart, reason: str) -> dict[str, Any]:
    return {"text": placeholder_text(part, reason)}


# ---------------------------------------------------------------------------------------------
# Response: Gemini -> our messages.


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.capitalize() for word in rest)


def _get(data: Any, key: str) -> Any:
    """``data[key]`` under its snake_case or camelCase name (the SDK's dict forms and the REST
    JSON use either); None when absent or not a mapping."""
    if not isinstance(data, Mapping):
        return None
    value = data.get(key)
    return data.get(_camel(key)) if value is None else value


def _base64_of(value: Any) -> str:
    """Bytes as the SDK's python-mode dump gives them, or base64 text in either alphabet, as
    standard base64 ("" when absent; text that is not base64 is kept as it is)."""
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    if not isinstance(value, str) or not value:
        return ""
    decoded = standard_base64(value)
    return decoded[0] if decoded is not None else value


def _invented_id(response_id: str, n: int, name: str, args: Any, signature: str) -> str:
    key = json.dumps([response_id, n, name, args, signature], sort_keys=True, default=str)
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{INVENTED_CALL_ID_PREFIX}{n}-{digest}"


def _media_of(raw: Mapping[str, Any]) -> Part | None:
    inline = _get(raw, "inline_data")
    if isinstance(inline, Mapping):
        mime = _get(inline, "mime_type") or ""
        data = _base64_of(_get(inline, "data"))
        if not data:
            return None
        if mime.startswith("image/"):
            return ImagePart(data=data, mime=mime)
        return FilePart(data=data, mime=mime, name=_get(inline, "display_name") or "")
    linked = _get(raw, "file_data")
    if isinstance(linked, Mapping):
        mime = _get(linked, "mime_type") or ""
        uri = _get(linked, "file_uri") or ""
        if not uri:
            return None
        if mime.startswith("image/"):
            return ImagePart(url=uri, mime=mime)
        return FilePart(url=uri, mime=mime, name=_get(linked, "display_name") or "")
    return None


def from_gemini(response: Any) -> ProviderReply:
    """Convert a ``generateContent`` response (the SDK's ``GenerateContentResponse`` or its
    dict form) into one assistant message from its first candidate, its usage, finish
    reason, response id and model version."""
    data = as_plain(response)
    if not isinstance(data, Mapping):
        raise UsageError(f"not a Gemini response: {type(response).__name__}")
    response_id = _get(data, "response_id") or ""
    candidates = _get(data, "candidates") or []
    candidate = as_plain(candidates[0]) if candidates else {}
    content = as_plain(_get(candidate, "content"))
    parts: list[Part] = []
    calls: list[ToolCall] = []
    for item in _get(content, "parts") or []:
        raw = as_plain(item)
        if not isinstance(raw, Mapping):
            continue
        signature = _base64_of(_get(raw, "thought_signature"))
        text = _get(raw, "text") or ""
        call = _get(raw, "function_call")
        if isinstance(call, Mapping):
            name = _get(call, "name") or ""
            args = _get(call, "args") or {}
            call_id = _get(call, "id") or _invented_id(
                response_id, len(calls), name, args, signature
            )
            calls.append(ToolCall(call_id, name, args, signature))
        elif _get(raw, "thought"):
            if text or signature:
                parts.append(ThinkingPart(text, signature=signature, provider=PROVIDER))
        else:
            media = _media_of(raw)
            if signature:
                parts.append(ThinkingPart("", signature=signature, provider=PROVIDER))
            if media is not None:
                parts.append(media)
            elif text:
                parts.append(TextPart(text))
    finish = _get(candidate, "finish_reason")
    if finish is None:
        feedback = _get(data, "prompt_feedback")
        finish = _get(feedback, "block_reason")
    return ProviderReply(
        messages=[Message(role="assistant", parts=parts, tool_calls=calls)],
        usage=_usage(_get(data, "usage_metadata")),
        stop_reason=str(getattr(finish, "value", finish) or ""),
        id=response_id,
        model=_get(data, "model_version") or "",
    )


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, Mapping):
        return None

    def count(key: str) -> int:
        value = _get(raw, key)
        return value if type(value) is int else 0

    prompt = count("prompt_token_count") + count("tool_use_prompt_token_count")
    thoughts = count("thoughts_token_count")
    output = count("candidates_token_count") + thoughts
    return Usage(
        input_tokens=prompt,
        output_tokens=output,
        total_tokens=count("total_token_count") or prompt + output,
        cache_read_tokens=count("cached_content_token_count"),
        reasoning_tokens=thoughts,
    )
