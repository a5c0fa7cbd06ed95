"""OpenAI Responses API: our messages as the request's ``input`` items, and a ``Response`` (or
its output items) as our messages.

:func:`to_openai_responses` returns plain dicts of the shapes the SDK's
``ResponseInputParam`` describes (``client.responses.create(input=...)``);
:func:`from_openai_responses` reads a ``Response`` (the SDK's object or its dict form) or a
list of output items into a :class:`~agentsession.providers._common.ProviderReply`. The SDK
itself is never imported.

What goes where:

* **system** messages become ``message`` items with the role ``developer``
  (``system_role="system"`` keeps ``system``), in place, with their text (to send them as the
  request's ``instructions`` instead, take them out with
  :func:`~agentsession.providers._common.split_system`);
* **user** messages carry text (``input_text``), images (``input_image``: an ``https:`` URL or a
  ``data:`` URL, ``detail`` ``auto`` unless the part names one the API knows) and files
  (``input_file``: ``file_data`` as a ``data:`` URL with a ``filename``, or ``file_url``);
* an **assistant** message becomes, in the order of its parts: a ``reasoning`` item for each
  run of OpenAI thinking parts sharing an id (``id``, ``summary`` from their texts,
  ``encrypted_content`` from the signature, byte for byte), and a ``message`` item for each run
  of text and refusal parts (a plain string when the run is one text part without annotations;
  else an output message of ``output_text`` parts with their annotations and ``refusal``
  parts); then a ``function_call`` item for each tool call (``call_id``, ``name``, the JSON text
  of the arguments);
* every **tool** result becomes a ``function_call_output`` item: its content as a string, or,
  when the result has extra parts, a list of ``input_text``, ``input_image`` and ``input_file``
  items.

Items of one role in a row are sent as they are (OpenAI accepts them).

What the API cannot express is dropped by these rules (docs/providers.md has the table):

* **thinking of another provider** (Anthropic's, Gemini's), and any thinking part without the
  ``id`` of an OpenAI reasoning item (:func:`~agentsession.providers._common.thinking_for` and
  an id: a reasoning item is sent back by its id); a reasoning item with no answer item after
  it in its message (the API refuses a reasoning item without its following item);
* **annotations** that are not of the Responses shapes (``url_citation``, ``file_citation``,
  ``container_file_citation``, ``file_path``; a Chat Completions ``url_citation`` is flattened
  into the Responses form), and fields an annotation has beyond its shape's;
* images and files outside user messages and tool results (system messages take text,
  assistant messages text and refusals); refusals outside assistant messages;
* an image ``detail`` the API does not know; ``ImagePart.source`` and ``FilePart.source``
  (workspace paths), ``ToolResult.is_error`` (the content says what failed),
  ``ToolResult.audit``, ``ToolResult.name``, ``ToolCall.signature`` (Gemini's),
  ``Message.name`` (the Responses API has no participant names) and ``Message.author``;
* what our messages do not keep: the ids of output ``message`` and ``function_call`` items,
  ``phase``, a function's ``namespace``, reasoning ``content`` and item ``status``. The API
  needs no id for a function call; an output message needs one, so an output message item is
  given a stable made-up ``msg_`` id (a hash of its place and content);
* a tool call id used before in the history (a model server that names every call
  ``call_0``) is sent as ``<id>_<n>`` from its second use on, and an empty one as ``call``
  (:class:`~agentsession.providers._common.CallIds`), on the ``function_call`` and its
  ``function_call_output`` alike: the API wants each ``call_id`` once per request;
* a system, user or assistant message left with nothing to send is left out.

Two things raise :class:`~agentsession.errors.UsageError` instead: a history that is not
provider-valid (:func:`agentsession.validation.provider_errors`; ``session.messages()`` always
is), and an :class:`~agentsession.messages.AttachmentRef` (a stored reference to an upload:
hydrate it first with :func:`agentsession.media.hydrate_local_attachments`).

:func:`openai_responses_errors` checks a request's ``input`` against the API's structural rules
(every ``function_call`` answered by a ``function_call_output`` with its ``call_id``, every
reasoning item followed by the item it led to) and returns what breaks them as sentences:
``to_openai_responses`` of a provider-valid history always passes.

From a reply: its ``message``, ``reasoning`` and ``function_call`` items become one assistant
message (parts in the order of the items, tool calls after them): each ``output_text`` a text
part keeping its annotations, each ``refusal`` a refusal part, each reasoning item one thinking
part per summary text (``provider="openai"``, its ``id``, the ``encrypted_content`` as the
first part's signature; one part without text when the summary is empty); ``usage`` gives
input, output and total tokens, ``input_tokens_details``' ``cached_tokens`` and
``cache_write_tokens`` and ``output_tokens_details``' ``reasoning_tokens``; the stop reason is
the ``incomplete_details.reason`` of an incomplete response, else its ``status``. Items of the
built-in tools (web search, file search...) are not kept; a custom tool call raises
``UsageError`` (there is no neutral form for it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ..codec import encode
from ..errors import UsageError
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
    OPENAI_IMAGE_DETAILS,
    CallIds,
    OpenCalls,
    ProviderReply,
    as_mapping,
    as_plain,
    check_history,
    data_url,
    openai_arguments,
    openai_base64,
    openai_call_id,
    openai_filename,
    openai_usage,
    thinking_for,
)

__all__ = [
    "from_openai_responses",
    "from_openai_responses_input",
    "openai_responses_errors",
    "to_openai_responses",
]

_ANNOTATION_FIELDS: dict[str, dict[str, type]] = {
    "url_citation": {"url": str, "title": str, "start_index": int, "end_index": int},
    "file_citation": {"file_id": str, "filename": str, "index": int},
    "container_file_citation": {
        "container_id": str,
        "file_id": str,
        "filename": str,
        "start_index": int,
        "end_index": int,
    },
    "file_path": {"file_id": str, "index": int},
}


def _annotation(annotation: Mapping[str, Any]) -> dict[str, Any] | None:
    """The annotation in the Responses shape, or None when it has none."""
    kind = annotation.get("type")
    nested = annotation.get("url_citation")
    if kind == "url_citation" and isinstance(nested, Mapping):
        annotation = nested  # Chat Completions nests the citation
    fields = _ANNOTATION_FIELDS.get(kind) if isinstance(kind, str) else None
    if fields is None:
        return None
    out: dict[str, Any] = {"type": kind}
    for name, type_ in fields.items():
        value = annotation.get(name)
        if not isinstance(value, type_) or isinstance(value, bool):
            return None
        out[name] = value
    return out


def _file(part: FilePart) -> dict[str, Any]:
    inline = openai_base64(part)
    if inline is None:
        out: dict[str, Any] = {"type": "input_file", "file_url": part.url}
        if part.name:
            out["filename"] = part.name
        return out
    mime, data = inline
    return {
        "type": "input_file",
        "file_data": f"data:{mime};base64,{data}",
        "filename": openai_filename(part, mime),
    }


def _input_part(part: Part, *, detail_required: bool) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        return {"type": "input_text", "text": part.text}
    if isinstance(part, ImagePart):
        image: dict[str, Any] = {"type": "input_image", "image_url": data_url(part)}
        if part.detail in OPENAI_IMAGE_DETAILS:
            image["detail"] = part.detail
        elif detail_required:
            image["detail"] = "auto"
        return image
    if isinstance(part, FilePart):
        return _file(part)
    return None  # thinking and refusals are not a user's (nor a tool's)


def _content(items: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if len(items) == 1 and items[0]["type"] == "input_text":
        return str(items[0]["text"])
    return items


def _reasoning(run: list[ThinkingPart]) -> dict[str, Any]:
    texts = [part.text for part in run]
    summary = [] if texts == [""] else [{"type": "summary_text", "text": t} for t in texts]
    item: dict[str, Any] = {"type": "reasoning", "id": run[0].id, "summary": summary}
    encrypted = next((part.signature for part in run if part.signature), "")
    if encrypted:
        item["encrypted_content"] = encrypted
    return item


def _output_message(run: list[TextPart | RefusalPart], position: int) -> dict[str, Any]:
    if len(run) == 1 and isinstance(run[0], TextPart):
        only = run[0]
        annotations = [a for a in map(_annotation, only.annotations) if a is not None]
        if not annotations:
            return {"type": "message", "role": "assistant", "content": only.text}
    content: list[dict[str, Any]] = []
    for part in run:
        if isinstance(part, RefusalPart):
            content.append({"type": "refusal", "refusal": part.text})
        else:
            annotations = [a for a in map(_annotation, part.annotations) if a is not None]
            content.append({"type": "output_text", "text": part.text, "annotations": annotations})
    # Our messages keep no output item id, and the API's output message has one: a made-up
    # id, stable for the same content at the same place, so requests stay identical.
    digest = hashlib.sha256(encode([position, content])).hexdigest()[:32]
    return {
        "type": "message",
        "role": "assistant",
        "id": f"msg_{digest}",
        "status": "completed",
        "content": content,
    }


def _assistant(msg: Message, position: int, ids: CallIds) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    texts: list[TextPart | RefusalPart] = []
    thinking: list[ThinkingPart] = []

    def flush() -> None:
        if thinking:
            items.append(_reasoning(thinking))
            thinking.clear()
        if texts:
            items.append(_output_message(texts, position + len(items)))
            texts.clear()

    for part in msg.parts:
        if isinstance(part, ThinkingPart):
            if not (part.id and thinking_for(part, "openai")):
                continue
            if texts or (thinking and thinking[0].id != part.id):
                flush()
            thinking.append(part)
        elif isinstance(part, (TextPart, RefusalPart)):
            if thinking:
                flush()
            texts.append(part)
    flush()
    items.extend(
        {
            "type": "function_call",
            "call_id": ids.call(call),
            "name": call.name,
            "arguments": openai_arguments(call),
        }
        for call in msg.tool_calls
    )
    while items and items[-1]["type"] == "reasoning":
        items.pop()  # a reasoning item must be followed by the item it led to
    return items


def _tool(result: ToolResult, ids: CallIds) -> dict[str, Any]:
    extra = [p for p in (_input_part(p, detail_required=False) for p in result.parts) if p]
    output: str | list[dict[str, Any]] = result.content
    if extra:
        text = [{"type": "input_text", "text": result.content}] if result.content else []
        output = text + extra
    call_id = ids.result(result)
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def to_openai_responses(
    messages: Sequence[Message], *, system_role: Literal["developer", "system"] = "developer"
) -> list[dict[str, Any]]:
    """The ``input`` items of a Responses API request for ``messages`` (see the module
    docstring for what is sent and what is dropped).

    ``system_role`` is the role system messages are sent with: ``developer`` (the Responses
    API's own) or ``system``. Raises :class:`~agentsession.errors.UsageError` when the history
    is not provider-valid or holds an attachment reference."""
    if system_role not in ("developer", "system"):
        raise UsageError(f"system_role must be 'developer' or 'system', not {system_role!r}")
    check_history(messages, "the OpenAI Responses API")
    ids = CallIds(openai_call_id)
    out: list[dict[str, Any]] = []
    for msg in messages:
        if msg.role == "assistant":
            out.extend(_assistant(msg, len(out), ids))
        elif msg.role == "tool":
            out.extend(_tool(result, ids) for result in msg.tool_results)
        elif msg.role == "system":
            texts = [
                {"type": "input_text", "text": p.text} for p in msg.parts if type(p) is TextPart
            ]
            if texts:
                out.append({"type": "message", "role": system_role, "content": _content(texts)})
        else:
            parts = [_input_part(p, detail_required=True) for p in msg.parts]
            content = [p for p in parts if p is not None]
            if content:
                out.append({"type": "message", "role": "user", "content": _content(content)})
    return out


# ---------------------------------------------------------------------------------------------
# The API's structure.

_OUTPUT_KINDS = frozenset({"reasoning", "function_call"})


def _kind(item: Mapping[str, Any]) -> str:
    """An input item's type (a message may leave it out)."""
    kind = item.get("type", "message" if "role" in item else None)
    return kind if isinstance(kind, str) else ""


def openai_responses_errors(input_items: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every way the ``input`` items of a Responses API request break the API's structural
    rules, as readable sentences (an empty list means valid; ``to_openai_responses`` of a
    provider-valid history always gives one), like
    :func:`agentsession.validation.provider_errors` for our own messages.

    The rules: each item is an object with a type; every ``function_call`` has a non-empty
    ``call_id`` not used before, and is answered by exactly one ``function_call_output`` with
    that ``call_id`` after it and before the next message or reasoning item; a
    ``function_call_output`` answers such an open call; and a ``reasoning`` item is followed by
    the item it led to (an assistant message or a function call, after any other reasoning
    items), not by the end or by input."""
    errors: list[str] = []
    calls = OpenCalls(
        errors,
        where="item",
        call="function call",
        call_key="call_id",
        answer="function_call_output",
        answer_key="call_id",
    )
    reasoning: list[int] = []  # reasoning items still waiting for the item they led to

    def unfollowed(by: str) -> None:
        errors.extend(f"item {at}: reasoning item is followed by {by}" for at in reasoning)
        reasoning.clear()

    for i, item in enumerate(input_items):
        if not isinstance(item, Mapping):
            errors.append(f"item {i}: not an object but {type(item).__name__}")
            continue
        kind = _kind(item)
        role = item.get("role")
        if kind in _OUTPUT_KINDS or (kind == "message" and role == "assistant"):
            if kind != "reasoning":
                reasoning.clear()  # the item they led to
        else:
            what = f"a {role} message" if kind == "message" else f"a {kind or 'typeless'} item"
            unfollowed(f"{what} (item {i})")
        if kind == "function_call_output":
            calls.answer(i, item)
            continue
        if kind == "function_call":
            calls.open(i, item)
            continue
        calls.close(i)
        if not kind:
            errors.append(f"item {i}: item without a type")
        elif kind == "reasoning":
            reasoning.append(i)
    calls.close(-1)
    unfollowed("the end")
    return errors


# ---------------------------------------------------------------------------------------------
# Replies.


def _message_parts(item: Mapping[str, Any]) -> list[Part]:
    content = item.get("content")
    if isinstance(content, str):
        return [TextPart(content)] if content else []
    parts: list[Part] = []
    for raw in content if isinstance(content, list) else []:
        part = as_mapping(raw, "a message's content part")
        kind = part.get("type")
        if kind in ("output_text", "input_text", "text"):
            annotations = [
                dict(as_mapping(a, "an annotation")) for a in part.get("annotations") or []
            ]
            parts.append(TextPart(str(part.get("text", "")), annotations))
        elif kind == "refusal":
            parts.append(RefusalPart(str(part.get("refusal", ""))))
    return parts


def _reasoning_parts(item: Mapping[str, Any]) -> list[Part]:
    item_id = str(item.get("id") or "")
    encrypted = item.get("encrypted_content")
    signature = encrypted if isinstance(encrypted, str) else ""
    texts = [
        str(as_mapping(s, "a reasoning summary").get("text", "")) for s in item.get("summary") or []
    ] or [""]
    return [
        ThinkingPart(text, signature if i == 0 else "", provider="openai", id=item_id)
        for i, text in enumerate(texts)
    ]


def _stop_reason(data: Mapping[str, Any]) -> str:
    status = str(data.get("status") or "")
    details = data.get("incomplete_details")
    if status == "incomplete" and isinstance(details, Mapping) and details.get("reason"):
        return str(details["reason"])
    return status


def from_openai_responses(response: Any) -> ProviderReply:
    """A Responses API reply (a ``Response`` of the SDK or its dict form, or a list of output
    items, objects or dicts) as a :class:`~agentsession.providers._common.ProviderReply` (see
    the module docstring).

    Raises :class:`~agentsession.errors.UsageError` for a custom tool call, or arguments that
    are not a JSON object."""
    data = as_plain(response)
    meta: Mapping[str, Any] = {}
    if isinstance(data, list):
        items = data
    elif isinstance(data, Mapping) and isinstance(data.get("output"), list):
        items, meta = data["output"], data
    else:
        raise UsageError(
            "from_openai_responses takes a Response, its dict form or a list of output items, "
            f"not {type(response).__name__}"
        )
    parts: list[Part] = []
    calls: list[ToolCall] = []
    for raw in items:
        item = as_mapping(raw, "an output item")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message" and item.get("role") == "assistant":
            parts.extend(_message_parts(item))
        elif kind == "reasoning":
            parts.extend(_reasoning_parts(item))
        elif kind == "function_call":
            calls.append(
                ToolCall(
                    str(item.get("call_id", "")),
                    str(item.get("name", "")),
                    item.get("arguments") or {},
                )
            )
        elif kind == "custom_tool_call":
            raise UsageError(
                f"output item {item.get('call_id')!r} is a custom tool call; only function "
                "calls have a neutral form"
            )
    return ProviderReply(
        messages=[Message(role="assistant", parts=parts, tool_calls=calls)],
        usage=openai_usage(meta.get("usage"), given="input", made="output"),
        stop_reason=_stop_reason(meta),
        id=str(meta.get("id") or ""),
        model=str(meta.get("model") or ""),
    )


# ---------------------------------------------------------------------------------------------
# A conversation of input items (what the OpenAI Agents SDK's sessions keep) as our messages.

_ASSISTANT_SIDE = frozenset({"reasoning", "function_call"})


def _input_parts(content: Any) -> list[Part]:
    """The parts of a user, system or tool-output content: a string, or a list of
    ``input_text``/``output_text``, ``input_image`` and ``input_file`` items."""
    if isinstance(content, str):
        return [TextPart(content)] if content else []
    parts: list[Part] = []
    for raw in content if isinstance(content, list) else []:
        part = as_mapping(raw, "a content part")
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text"):
            parts.append(TextPart(str(part.get("text", ""))))
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            detail = part.get("detail")
            parts.append(
                ImagePart(url=part["image_url"], detail=detail if isinstance(detail, str) else "")
            )
        elif kind == "input_file":
            name = str(part.get("filename") or "")
            url = part.get("file_data") or part.get("file_url")
            if isinstance(url, str) and url:
                parts.append(FilePart(url=url, name=name))
    return parts


def _output_result(item: Mapping[str, Any], names: Mapping[str, str]) -> ToolResult:
    call_id = str(item.get("call_id", ""))
    output = item.get("output")
    if isinstance(output, str):
        return ToolResult(call_id, names.get(call_id, ""), output)
    # A list of content items: kept as parts (texts too), so it is sent back as a list.
    return ToolResult(call_id, names.get(call_id, ""), parts=_input_parts(output))


def from_openai_responses_input(items: Sequence[Any]) -> list[Message]:
    """Responses API input items (a request's ``input``: the conversation as the OpenAI Agents
    SDK's sessions keep it) as our messages, in order.

    * a ``message`` of role ``user`` (or an easy input message, ``{"role": "user",
      "content": ...}``) becomes a user message: text, ``input_image`` with an ``image_url``
      as an image, ``input_file`` with ``file_data`` or ``file_url`` as a file; ``system`` and
      ``developer`` messages become system messages;
    * the assistant's items in a row (``message`` of role ``assistant``, ``reasoning``,
      ``function_call``) become one assistant message, read as :func:`from_openai_responses`
      reads a reply's output; text or reasoning after a function call starts the next one;
    * each ``function_call_output`` becomes a tool message with one result (the call's name
      when the call is among ``items``): a string output as its content, a list of content
      items as its parts (texts, images, files).

    Items with no neutral form are skipped (an assistant message goes on past them): the
    built-in tools' calls and outputs (web and file search, computer use, code interpreter,
    image generation, shell, MCP, apply patch), custom tool calls, item references and
    ``compaction`` items. Raises
    :class:`~agentsession.errors.UsageError` for a function call whose arguments are not a
    JSON object."""
    return [message for message, _ in input_messages_with_ends(items)]


def input_messages_with_ends(items: Sequence[Any]) -> list[tuple[Message, int]]:
    """:func:`from_openai_responses_input`, each message with the index in ``items`` of the
    last item it was read from (so that a writer can store each message right after its
    items)."""
    messages: list[tuple[Message, int]] = []
    names: dict[str, str] = {}
    run: list[Mapping[str, Any]] = []  # the assistant's items in a row
    run_end = -1

    def flush() -> None:
        if run:
            reply = from_openai_responses(list(run))
            message = reply.messages[0]
            if message.parts or message.tool_calls:
                messages.append((message, run_end))
            run.clear()

    for index, raw in enumerate(items):
        item = as_mapping(as_plain(raw), "an input item")
        kind = item.get("type", "message" if "role" in item else None)
        role = item.get("role")
        if kind in _ASSISTANT_SIDE or (kind == "message" and role == "assistant"):
            if kind != "function_call" and any(i.get("type") == "function_call" for i in run):
                flush()  # parts come before a message's calls
            if kind == "function_call":
                names[str(item.get("call_id", ""))] = str(item.get("name", ""))
            run.append(item)
            run_end = index
            continue
        if not (kind == "message" or kind == "function_call_output"):
            continue  # no neutral form (built-in tools, references): the run goes on past it
        flush()
        if kind == "message" and role == "user":
            parts = _input_parts(item.get("content"))
            if parts:
                messages.append((Message(role="user", parts=parts), index))
        elif kind == "message" and role in ("system", "developer"):
            parts = [p for p in _input_parts(item.get("content")) if isinstance(p, TextPart)]
            if parts:
                messages.append((Message(role="system", parts=parts), index))
        elif kind == "function_call_output":
            result = _output_result(item, names)
            messages.append((Message(role="tool", tool_results=[result]), index))
    flush()
    return messages
