"""OpenAI Chat Completions: our messages as the request's ``messages``, and a
``ChatCompletion`` as our messages.

:func:`to_openai_chat` returns plain dicts of the shapes the SDK's
``ChatCompletionMessageParam`` describes (``client.chat.completions.create(messages=...)``);
:func:`from_openai_chat` reads a ``ChatCompletion`` (the SDK's object or its dict form) into a
:class:`~agentsession.providers._common.ProviderReply`. The SDK itself is never imported.

What goes where:

* **system** messages become ``system`` messages (``system_role="developer"`` for the models
  that take ``developer``), in place, with their text;
* **user** messages carry text, images (``image_url``: an ``https:`` URL or a ``data:`` URL,
  with ``detail`` when it is one the API knows), WAV and MP3 audio given as base64
  (``input_audio``) and other files given as base64 (``file`` with ``file_data`` and a
  ``filename``);
* **assistant** messages carry their text and refusals (a string when the message is one text
  part, else ``text`` and ``refusal`` content parts in order) and ``tool_calls``
  (``function`` calls whose ``arguments`` are the JSON text of our decoded arguments);
* every **tool** result becomes one ``tool`` message with its ``tool_call_id``, its content
  (with the text of its extra text parts as more text parts).

Messages of one role in a row are sent as they are (OpenAI accepts them); the participant
``name`` is sent on system, user and assistant messages when it matches the API's pattern (no
whitespace, none of ``<|\\/>``).

What the API cannot express is dropped by these rules (docs/providers.md has the table):

* **reasoning**: Chat Completions has no field for it, so every thinking part is dropped
  (OpenAI's own reasoning items can only be sent back through the Responses API);
* **annotations** of text parts: a request's assistant message has no field for them (they are
  read from replies and kept on the :class:`~agentsession.messages.TextPart`);
* images and files outside user messages (system messages take text, assistant messages text
  and refusals), and the images and files of a tool result (``tool`` messages take text);
  refusals outside assistant messages;
* a file given only by an ``https:`` URL (Chat Completions takes files as base64 data): it is
  replaced by the text ``[file: <name or url>]`` so the model knows it was there;
* an image ``detail`` the API does not know; ``ImagePart.source`` and ``FilePart.source``
  (workspace paths), ``ToolResult.is_error`` (the content says what failed),
  ``ToolResult.audit``, ``ToolResult.name``, ``ToolCall.signature`` (Gemini's),
  ``Message.author`` and a ``name`` the API would refuse;
* a tool call id used before in the history (a model server that names every call
  ``call_0``) is sent as ``<id>_<n>`` from its second use on, and an empty one as ``call``
  (:class:`~agentsession.providers._common.CallIds`), on the call and on its ``tool``
  message alike: the API wants each id once per request;
* a system, user or assistant message left with nothing to send is left out.

Two things raise :class:`~agentsession.errors.UsageError` instead: a history that is not
provider-valid (:func:`agentsession.validation.provider_errors`; ``session.messages()`` always
is), and an :class:`~agentsession.messages.AttachmentRef` (a stored reference to an upload:
hydrate it first with :func:`agentsession.media.hydrate_local_attachments`).

:func:`openai_chat_errors` checks a request's ``messages`` against the API's structural rules
(every tool call answered by its ``tool`` message before the next assistant, user or system
message) and returns what breaks them as sentences: ``to_openai_chat`` of a provider-valid
history always passes.

From a reply: the first choice's message becomes one assistant message (its ``content`` as a
text part keeping the message's ``annotations``, its ``refusal`` as a
:class:`~agentsession.messages.RefusalPart`, its function tool calls with their arguments
decoded); ``usage`` gives input, output and total tokens, ``prompt_tokens_details``'
``cached_tokens`` and ``cache_write_tokens`` and ``completion_tokens_details``'
``reasoning_tokens``; ``finish_reason`` is the stop reason. Audio output is not kept; a custom
tool call or a legacy ``function_call`` raises ``UsageError`` (there is no neutral form for
them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ..errors import UsageError
from ..messages import (
    FilePart,
    ImagePart,
    Message,
    Part,
    RefusalPart,
    TextPart,
    ToolCall,
    ToolResult,
)
from ._common import (
    OPENAI_IMAGE_DETAILS,
    CallIds,
    OpenCalls,
    ProviderReply,
    as_mapping,
    check_history,
    data_url,
    openai_arguments,
    openai_base64,
    openai_call_id,
    openai_filename,
    openai_usage,
)

__all__ = ["from_openai_chat", "openai_chat_errors", "to_openai_chat"]

_NAME = re.compile(r"[^\s<|\\/>]+")
_AUDIO_FORMATS = {
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/vnd.wave": "wav",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
}


def _text_content(texts: list[str]) -> str | list[dict[str, Any]] | None:
    if not texts:
        return None
    if len(texts) == 1:
        return texts[0]
    return [{"type": "text", "text": text} for text in texts]


def _user_part(part: Part) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        image: dict[str, Any] = {"url": data_url(part)}
        if part.detail in OPENAI_IMAGE_DETAILS:
            image["detail"] = part.detail
        return {"type": "image_url", "image_url": image}
    if isinstance(part, FilePart):
        inline = openai_base64(part)
        if inline is None:
            return {"type": "text", "text": f"[file: {part.name or part.url}]"}
        mime, data = inline
        audio = _AUDIO_FORMATS.get((part.mime or mime).lower())
        if audio is not None:
            return {"type": "input_audio", "input_audio": {"data": data, "format": audio}}
        file = {"file_data": f"data:{mime};base64,{data}", "filename": openai_filename(part, mime)}
        return {"type": "file", "file": file}
    return None  # thinking and refusals are not a user's


def _user(msg: Message) -> dict[str, Any] | None:
    parts = [p for p in (_user_part(part) for part in msg.parts) if p is not None]
    if not parts:
        return None
    if len(parts) == 1 and parts[0]["type"] == "text":
        return {"role": "user", "content": parts[0]["text"]}
    return {"role": "user", "content": parts}


def _assistant(msg: Message, ids: CallIds) -> dict[str, Any] | None:
    content: list[dict[str, Any]] = []
    for part in msg.parts:
        if isinstance(part, TextPart):
            content.append({"type": "text", "text": part.text})
        elif isinstance(part, RefusalPart):
            content.append({"type": "refusal", "refusal": part.text})
    out: dict[str, Any] = {"role": "assistant"}
    if len(content) == 1 and content[0]["type"] == "text":
        out["content"] = content[0]["text"]
    elif content:
        out["content"] = content
    if msg.tool_calls:
        out["tool_calls"] = [
            {
                "id": ids.call(call),
                "type": "function",
                "function": {"name": call.name, "arguments": openai_arguments(call)},
            }
            for call in msg.tool_calls
        ]
    return out if len(out) > 1 else None


def _tool(result: ToolResult, ids: CallIds) -> dict[str, Any]:
    call_id = ids.result(result)
    texts = [p.text for p in result.parts if isinstance(p, TextPart)]
    if not texts:
        return {"role": "tool", "tool_call_id": call_id, "content": result.content}
    if result.content:
        texts.insert(0, result.content)
    content = [{"type": "text", "text": text} for text in texts]
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def to_openai_chat(
    messages: Sequence[Message], *, system_role: Literal["system", "developer"] = "system"
) -> list[dict[str, Any]]:
    """The ``messages`` of a Chat Completions request for ``messages`` (see the module
    docstring for what is sent and what is dropped).

    ``system_role`` is the role system messages are sent with: ``system``, or ``developer``
    for the models that ask for it. Raises :class:`~agentsession.errors.UsageError` when the
    history is not provider-valid or holds an attachment reference."""
    if system_role not in ("system", "developer"):
        raise UsageError(f"system_role must be 'system' or 'developer', not {system_role!r}")
    check_history(messages, "OpenAI Chat Completions")
    ids = CallIds(openai_call_id)
    out: list[dict[str, Any]] = []
    for msg in messages:
        if msg.role == "tool":
            out.extend(_tool(result, ids) for result in msg.tool_results)
            continue
        if msg.role == "system":
            content = _text_content([p.text for p in msg.parts if isinstance(p, TextPart)])
            item = None if content is None else {"role": system_role, "content": content}
        elif msg.role == "user":
            item = _user(msg)
        else:
            item = _assistant(msg, ids)
        if item is None:
            continue
        if msg.name and _NAME.fullmatch(msg.name):
            item["name"] = msg.name
        out.append(item)
    return out


# ---------------------------------------------------------------------------------------------
# The API's structure.

_CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


def openai_chat_errors(request_messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every way the ``messages`` of a Chat Completions request break the API's structural
    rules, as readable sentences (an empty list means valid; ``to_openai_chat`` of a
    provider-valid history always gives one), like
    :func:`agentsession.validation.provider_errors` for our own messages.

    The rules: each message is an object with a role the API knows; an assistant message has
    content or tool calls, each tool call with a non-empty id not used before; every tool
    call is answered by exactly one ``tool`` message with its ``tool_call_id`` before the next
    message of another role (system, developer, user or assistant); and a ``tool`` message
    answers a call of the assistant message before it that is not answered yet."""
    errors: list[str] = []
    calls = OpenCalls(
        errors,
        where="message",
        call="tool call",
        call_key="id",
        answer="tool message",
        answer_key="tool_call_id",
    )
    for i, msg in enumerate(request_messages):
        if not isinstance(msg, Mapping):
            errors.append(f"message {i}: not an object but {type(msg).__name__}")
            continue
        role = msg.get("role")
        if role == "tool":
            calls.answer(i, msg)
            continue
        calls.close(i)
        if role not in _CHAT_ROLES:
            errors.append(f"message {i}: unknown role {role!r}")
        if role != "assistant":
            if "tool_calls" in msg:
                errors.append(f"message {i}: {role} message carries tool calls")
            continue
        tool_calls = msg.get("tool_calls") or []
        if not tool_calls and msg.get("content") in (None, "", []):
            errors.append(f"message {i}: assistant message with neither content nor tool calls")
        for call in tool_calls:
            calls.open(i, call if isinstance(call, Mapping) else {})
    calls.close(-1)
    return errors


# ---------------------------------------------------------------------------------------------
# Replies.


def _reply_parts(message: Mapping[str, Any]) -> list[Part]:
    parts: list[Part] = []
    content = message.get("content")
    annotations = message.get("annotations") or []
    if isinstance(content, str):
        if content or annotations:
            parts.append(TextPart(content, [dict(a) for a in annotations]))
    elif isinstance(content, list):
        # The request's form of an assistant message (text and refusal parts).
        for item in content:
            item = as_mapping(item, "a content part")
            if item.get("type") == "text":
                parts.append(TextPart(str(item.get("text", ""))))
            elif item.get("type") == "refusal":
                parts.append(RefusalPart(str(item.get("refusal", ""))))
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        parts.append(RefusalPart(refusal))
    return parts


def _reply_calls(message: Mapping[str, Any]) -> list[ToolCall]:
    if message.get("function_call"):
        raise UsageError(
            "the reply holds a legacy function_call, which has no call id; "
            "pass tools=[...] instead of functions=[...]"
        )
    calls: list[ToolCall] = []
    for raw in message.get("tool_calls") or []:
        call = as_mapping(raw, "a tool call")
        if call.get("type", "function") != "function":
            raise UsageError(
                f"tool call {call.get('id')!r} is a {call.get('type')!r} call; only function "
                "tool calls have a neutral form"
            )
        function = as_mapping(call.get("function"), "a tool call's function")
        calls.append(
            ToolCall(
                str(call.get("id", "")),
                str(function.get("name", "")),
                function.get("arguments") or {},
            )
        )
    return calls


def from_openai_chat(response: Any) -> ProviderReply:
    """A Chat Completions reply (a ``ChatCompletion`` of the SDK, or its dict form) as a
    :class:`~agentsession.providers._common.ProviderReply` (see the module docstring).

    Raises :class:`~agentsession.errors.UsageError` when the reply has no choice, or a tool
    call that is not a function call, or arguments that are not a JSON object."""
    data = as_mapping(response, "the reply")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise UsageError("the reply holds no choice")
    choice = as_mapping(choices[0], "a choice")
    message = as_mapping(choice.get("message") or {}, "a choice's message")
    reply = Message(role="assistant", parts=_reply_parts(message), tool_calls=_reply_calls(message))
    return ProviderReply(
        messages=[reply],
        usage=openai_usage(data.get("usage"), given="prompt", made="completion"),
        stop_reason=str(choice.get("finish_reason") or ""),
        id=str(data.get("id") or ""),
        model=str(data.get("model") or ""),
    )
