"""What the provider formats share: the reply record, the check every ``to_*`` runs first
(:func:`check_history`), the pieces of the structural checks (:func:`turn_errors` for
Anthropic and Gemini, :class:`OpenCalls` for OpenAI's two APIs), the rules for content a
provider cannot express, media decoding, and the pieces of the two OpenAI APIs' wire forms
that are the same.

One copy of each helper lives here; the provider modules import them. Nothing here imports an
SDK.
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from ..codec import encode
from ..errors import UsageError
from ..events import Usage
from ..messages import (
    AttachmentRef,
    FilePart,
    ImagePart,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolCall,
    ToolResult,
)
from ..recorder import Step, Turn
from ..validation import provider_errors

if TYPE_CHECKING:
    from ..aio import AsyncStep, AsyncTurn

__all__ = [
    "OPENAI_IMAGE_DETAILS",
    "CallIds",
    "OpenCalls",
    "ProviderReply",
    "answered_call",
    "as_mapping",
    "as_plain",
    "check_history",
    "data_url",
    "inline_media",
    "int_field",
    "is_inline",
    "openai_arguments",
    "openai_base64",
    "openai_call_id",
    "openai_filename",
    "openai_usage",
    "parse_data_url",
    "placeholder_text",
    "sniff",
    "split_system",
    "standard_base64",
    "text_parts",
    "thinking_for",
    "turn_errors",
]


class ProviderReply(msgspec.Struct, frozen=True, kw_only=True):
    """A provider's answer, converted: what ``from_<provider>`` returns."""

    messages: list[Message]
    """The answer as our messages (normally one assistant message; a function-call-only
    answer is an assistant message with tool calls and no text)."""
    usage: Usage | None = None
    """Token usage of the call, when the response reported it."""
    stop_reason: str = ""
    """Why the model stopped, in the provider's words (``end_turn``, ``tool_use``, ``stop``,
    ``length``, ``STOP``...)."""
    id: str = ""
    """The provider's response id."""
    model: str = ""
    """The model that answered."""

    @property
    def message(self) -> Message:
        """The one assistant message of the answer (all of them merged when the provider
        returned several, as the Responses API may)."""
        assistant = [m for m in self.messages if m.role == "assistant"]
        if not assistant:
            raise UsageError("the provider's answer holds no assistant message")
        if len(assistant) == 1:
            return assistant[0]
        return Message(
            role="assistant",
            parts=[p for m in assistant for p in m.parts],
            tool_calls=[c for m in assistant for c in m.tool_calls],
            author=assistant[0].author,
        )

    def record(self, step: Step | Turn) -> int:
        """Record the answer on a recorder step (or turn): ``step.assistant(message)``, then
        ``step.usage(...)`` when usage was reported; returns the assistant message's seq.

        Raises ``TypeError`` for a step of :mod:`agentsession.aio`, whose helpers are
        coroutines that would never run here: ``await reply.arecord(step)`` records on those.
        """
        if not isinstance(step, (Step, Turn)):
            raise TypeError(_wrong_step("record", step, "await reply.arecord(step)"))
        seq = step.assistant(self.message)
        usage = self.usage
        if usage is not None:
            step.usage(*_usage_args(usage), **_usage_kwargs(usage))
        return seq

    async def arecord(self, step: AsyncStep | AsyncTurn) -> int:
        """:meth:`record` for a step (or turn) of :mod:`agentsession.aio`:
        ``await reply.arecord(step)`` records the assistant message, then the usage, each
        awaited; returns the assistant message's seq.

        Raises ``TypeError`` for a sync :class:`~agentsession.Step`: use :meth:`record`."""
        from ..aio import AsyncStep, AsyncTurn

        if not isinstance(step, (AsyncStep, AsyncTurn)):
            raise TypeError(_wrong_step("arecord", step, "reply.record(step)"))
        seq = await step.assistant(self.message)
        usage = self.usage
        if usage is not None:
            await step.usage(*_usage_args(usage), **_usage_kwargs(usage))
        return seq


def _wrong_step(method: str, step: object, instead: str) -> str:
    """The message of the ``TypeError`` :meth:`ProviderReply.record` and
    :meth:`ProviderReply.arecord` raise for a step of the other API (or no step at all)."""
    kind = type(step).__name__
    aio = sys.modules.get("agentsession.aio")
    is_async = aio is not None and isinstance(step, (aio.AsyncStep, aio.AsyncTurn))
    if method == "record" and is_async:
        return f"ProviderReply.record() takes a sync Step or Turn, not {kind}: use {instead}"
    if method == "arecord" and isinstance(step, (Step, Turn)):
        return f"ProviderReply.arecord() takes an AsyncStep or AsyncTurn, not {kind}: use {instead}"
    wanted = "a Step or Turn" if method == "record" else "an AsyncStep or AsyncTurn"
    return f"ProviderReply.{method}() takes {wanted} of the recorder, not {kind}"


def _usage_args(usage: Usage) -> tuple[int, int, int]:
    return usage.input_tokens, usage.output_tokens, usage.total_tokens


def _usage_kwargs(usage: Usage) -> dict[str, int]:
    return {
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
    }


def as_plain(value: Any) -> Any:
    """A response object of an official SDK (a pydantic model), or its dict form, as plain
    JSON data: the SDKs are never imported here, only asked for their dict form."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_unset=False, by_alias=True)
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    return value


def split_system(messages: Sequence[Message]) -> tuple[list[str], list[Message]]:
    """The text of the system messages, and the other messages in order (for the APIs that
    take instructions apart from the conversation)."""
    system = [m.text for m in messages if m.role == "system" and m.text]
    return system, [m for m in messages if m.role != "system"]


def thinking_for(part: ThinkingPart, provider: str) -> bool:
    """Whether a thinking block can be sent to ``provider``: its own blocks (and neutral ones
    with no signature, as text the other APIs cannot take back are dropped) — a signature only
    verifies at the provider that made it, so another provider's block is dropped (the
    documented rule)."""
    return part.provider == provider or (not part.provider and not part.signature)


def data_url(part: ImagePart | FilePart) -> str:
    """The part's URL, or a ``data:`` URL built from its base64 ``data``."""
    if part.url:
        return part.url
    if not part.data:
        raise UsageError(f"{type(part).__name__} has neither url nor data")
    return f"data:{part.mime or 'application/octet-stream'};base64,{part.data}"


def parse_data_url(url: str) -> tuple[str, str] | None:
    """``(mime, base64 data)`` of a ``data:...;base64,`` URL, or None for any other URL."""
    if not url.startswith("data:"):
        return None
    head, sep, data = url[5:].partition(",")
    if not sep or not head.endswith(";base64"):
        return None
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
    return head[: -len(";base64")] or "application/octet-stream", data


def text_parts(parts: Sequence[Part]) -> str:
    """The text of the text parts, joined with no separator."""
    return "".join(p.text for p in parts if type(p) is TextPart)


# ---------------------------------------------------------------------------------------------
# The check every ``to_*`` runs first.


def check_history(messages: Sequence[Message], api: str) -> None:
    """Raise :class:`~agentsession.errors.UsageError` when ``messages`` cannot be converted for
    ``api`` (a name for the message, such as ``"Anthropic"``): when the list is not
    provider-valid (:func:`agentsession.validation.provider_errors`, every problem listed), or
    when a message or a tool result still holds an
    :class:`~agentsession.messages.AttachmentRef` (named by its source or URL), which must be
    hydrated first (:func:`agentsession.media.hydrate_local_attachments`). Nothing is
    repaired."""
    errors = provider_errors(messages)
    if errors:
        raise UsageError(
            f"cannot convert to {api}: the message list is not provider-valid: " + "; ".join(errors)
        )
    for i, msg in enumerate(messages):
        parts = [*msg.parts, *(p for r in msg.tool_results for p in r.parts)]
        ref = next((p for p in parts if isinstance(p, AttachmentRef)), None)
        if ref is not None:
            raise UsageError(
                f"cannot convert to {api}: message {i} holds an attachment reference "
                f"({ref.source or ref.url or 'no source'}); hydrate the attachments before the "
                "model call (agentsession.media.hydrate_local_attachments) or leave them out"
            )


# ---------------------------------------------------------------------------------------------
# Call ids in a request.


class CallIds:
    """The id each tool call and its result are sent with, unique in the request.

    A history may reuse a call id once its call is answered (a model server that names every
    call ``call_0``), or within one message; derive pairs results with calls by id, first come
    first served. The APIs that pair by id want each id once per request, so the first use of
    an id keeps it and every later use gets ``<id>_<n>``, the smallest ``n`` from 2 not taken
    yet; a result gets the id of the earliest unanswered call with its id and its tool name
    (:func:`answered_call`). The ids depend only on the messages before, so a request for a
    longer history starts with the request for a shorter one.

    ``legal`` turns an id the API would refuse into one it takes (empty, or with characters it
    does not allow), deterministically; it is applied before the check for reuse."""

    def __init__(self, legal: Callable[[str], str]) -> None:
        self._legal = legal
        self._used: set[str] = set()
        self._open: list[tuple[ToolCall, str]] = []  # unanswered calls and their sent ids

    def call(self, call: ToolCall) -> str:
        """The id ``call`` is sent with (give the calls in message order)."""
        base = wire = self._legal(call.id)
        n = 1
        while wire in self._used:
            n += 1
            wire = f"{base}_{n}"
        self._used.add(wire)
        self._open.append((call, wire))
        return wire

    def result(self, result: ToolResult) -> str:
        """The id ``result`` is sent with: its call's."""
        at = answered_call([call for call, _ in self._open], result)
        if at is None:  # no call before it: check_history refused such a history already
            return self._legal(result.call_id)
        return self._open.pop(at)[1]


def answered_call(calls: Sequence[ToolCall], result: ToolResult) -> int | None:
    """The index in ``calls`` (unanswered calls, in order) of the call ``result`` answers: the
    first with its id and its tool name, else the first with its id (two calls of one message
    may share an id; their names tell their results apart); None when no call has its id."""
    same_id = [n for n, call in enumerate(calls) if call.id == result.call_id]
    named = [n for n in same_id if calls[n].name == result.name]
    found = named or same_id
    return found[0] if found else None


# ---------------------------------------------------------------------------------------------
# The wire form's structure.


def turn_errors(
    turns: Any,
    *,
    roles: tuple[str, str],
    key: str,
    noun: str,
    item: str,
    from_text: Callable[[str], Mapping[str, Any]] | None = None,
) -> tuple[list[str], list[tuple[str, list[Mapping[str, Any]]]]]:
    """The checks Anthropic's ``messages`` and Gemini's ``contents`` share, and the turns read
    for the provider's own checks.

    ``turns`` must be a list of objects, each with one of the two ``roles``, the roles
    alternating, and a non-empty list of objects under ``key`` (a string there is one text item,
    ``from_text(text)``, where the API takes that shorthand). ``noun`` and ``item`` name a turn
    and one of its items in the sentences (``message`` and ``block``, ``content`` and
    ``part``). Returns the errors, and each turn as ``(role,
    items)`` (``("", [])`` for one that is not an object, with the items that are objects)."""
    if not isinstance(turns, Sequence) or isinstance(turns, (str, bytes)):
        return [f"the request has no list of {noun}s"], []
    errors: list[str] = []
    read: list[tuple[str, list[Mapping[str, Any]]]] = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, Mapping):
            errors.append(f"{noun} {i}: not an object but {type(turn).__name__}")
            read.append(("", []))
            continue
        role = turn.get("role")
        if role not in roles:
            errors.append(f"{noun} {i}: role {role!r} is neither {roles[0]} nor {roles[1]}")
        elif read and read[-1][0] == role:
            errors.append(f"{noun} {i}: a second {role} {noun} in a row (the roles alternate)")
        items = turn.get(key)
        if isinstance(items, str) and from_text is not None:
            items = [from_text(items)]
        if not isinstance(items, Sequence) or isinstance(items, (str, bytes)) or not items:
            errors.append(f"{noun} {i}: no {key}")
            items = []
        errors.extend(
            f"{noun} {i}, {item} {j}: not an object"
            for j, x in enumerate(items)
            if not isinstance(x, Mapping)
        )
        kept = [x for x in items if isinstance(x, Mapping)]
        read.append((role if isinstance(role, str) else "", kept))
    return errors, read


class OpenCalls:
    """The calls of a request not answered yet, for the checks of the APIs that pair a call
    and its answer by id (OpenAI's two): each problem goes to ``errors`` as a sentence.

    ``where`` names a place in the request (``message``, ``item``), ``call`` and ``answer`` the
    two kinds of entry (``tool call`` and ``tool message``...), ``call_key`` and
    ``answer_key`` the fields that hold their ids."""

    def __init__(
        self,
        errors: list[str],
        *,
        where: str,
        call: str,
        call_key: str,
        answer: str,
        answer_key: str,
    ) -> None:
        self.errors = errors
        self.where, self.call, self.call_key = where, call, call_key
        self.answer_kind, self.answer_key = answer, answer_key
        self.waiting: dict[str, int] = {}
        """An open call's id -> where the call is."""
        self.seen: set[str] = set()

    def open(self, at: int, entry: Mapping[str, Any]) -> None:
        """A call at ``at``: it must have an id, not used before in the request."""
        call_id = entry.get(self.call_key)
        if not isinstance(call_id, str) or not call_id:
            self.errors.append(f"{self.where} {at}: {self.call} has no {self.call_key}")
        elif call_id in self.seen:
            self.errors.append(f"{self.where} {at}: {self.call} id {call_id!r} is used twice")
        else:
            self.seen.add(call_id)
            self.waiting[call_id] = at

    def answer(self, at: int, entry: Mapping[str, Any]) -> None:
        """An answer at ``at``: it must name a call that is open."""
        call_id = entry.get(self.answer_key)
        if not isinstance(call_id, str) or not call_id:
            self.errors.append(f"{self.where} {at}: {self.answer_kind} has no {self.answer_key}")
        elif self.waiting.pop(call_id, None) is None:
            self.errors.append(
                f"{self.where} {at}: {self.answer_kind} {call_id!r} answers no open {self.call}"
            )

    def close(self, before: int) -> None:
        """No more answers may come (an entry at ``before``, or the end when it is negative):
        every call still open is an error."""
        end = "the end" if before < 0 else f"{self.where} {before}"
        self.errors.extend(
            f"{self.where} {at}: {self.call} {call_id!r} has no {self.answer_kind} before {end}"
            for call_id, at in self.waiting.items()
        )
        self.waiting.clear()


# ---------------------------------------------------------------------------------------------
# Media.

_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
)


def standard_base64(data: str) -> tuple[str, bytes] | None:
    """``(standard base64, bytes)`` of base64 text in either alphabet (standard or URL-safe),
    padded or not; the text itself when it already is padded standard base64. None when it is
    not base64."""
    padded = data + "=" * (-len(data) % 4)
    for altchars in (None, b"-_"):
        try:
            raw = base64.b64decode(padded, altchars=altchars, validate=True)
        except (binascii.Error, ValueError):
            continue
        encoded = data if padded == data and altchars is None else base64.b64encode(raw).decode()
        return encoded, raw
    return None


def sniff(raw: bytes) -> str:
    """The media type the first bytes of ``raw`` announce (PNG, JPEG, GIF, WebP, PDF), or
    ``""``."""
    if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP":
        return "image/webp"
    return next((mime for magic, mime in _MAGIC if raw.startswith(magic)), "")


def is_inline(part: ImagePart | FilePart) -> bool:
    """Whether the part is given inline: by ``data``, or by a ``data:`` URL."""
    return bool(part.data) or part.url.startswith("data:")


def inline_media(part: ImagePart | FilePart) -> tuple[str, str] | None:
    """``(media type, standard base64)`` of media given inline (:func:`is_inline`).

    The media type is the ``data:`` URL's, else the part's, lowercased, ``image/jpg`` read as
    ``image/jpeg``, and sniffed from the bytes (:func:`sniff`) when neither names one (``""``
    when that finds nothing either). None when the part is not given inline, or holds nothing
    usable: a ``data:`` URL that is not base64, or data that is empty or not base64."""
    data, mime = part.data, part.mime
    if not data:
        parsed = parse_data_url(part.url)
        if parsed is None:
            return None
        url_mime, data = parsed
        mime = mime if url_mime == "application/octet-stream" else url_mime
    decoded = standard_base64(data)
    if decoded is None or not decoded[1]:
        return None
    mime = mime.lower()
    mime = "image/jpeg" if mime == "image/jpg" else mime
    return mime or sniff(decoded[1][:16]), decoded[0]


def placeholder_text(part: ImagePart | FilePart, reason: str) -> str:
    """The text sent in place of media a provider cannot take:
    ``[image <name> <url> (<mime>) not sent: <reason>]``, with what the part has of its name,
    its URL (not a ``data:`` URL) and its media type, so the model knows it was there."""
    kind = "image" if isinstance(part, ImagePart) else "file"
    label = " ".join(
        x
        for x in (
            kind,
            getattr(part, "name", ""),
            part.url if part.url and not part.url.startswith("data:") else "",
            f"({part.mime})" if part.mime else "",
        )
        if x
    )
    return f"[{label} not sent: {reason}]"


# ---------------------------------------------------------------------------------------------
# Reading replies.


def as_mapping(value: Any, what: str) -> Mapping[str, Any]:
    """``value`` (an SDK object or plain data, see :func:`as_plain`) as a mapping; raises
    :class:`~agentsession.errors.UsageError` naming ``what`` when it is not an object."""
    value = as_plain(value)
    if not isinstance(value, Mapping):
        raise UsageError(f"{what} must be an object, not {type(value).__name__}")
    return value


def int_field(data: Any, key: str) -> int:
    """``data[key]`` when ``data`` is a mapping and the value an int (not a bool), else 0."""
    if not isinstance(data, Mapping):
        return 0
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


# ---------------------------------------------------------------------------------------------
# What the two OpenAI APIs share.

OPENAI_IMAGE_DETAILS = frozenset({"auto", "low", "high", "original"})
"""The image ``detail`` values OpenAI's APIs know; any other is dropped."""

_EXTENSIONS = {
    "audio/wav": ".wav",
    "audio/wave": ".wav",
    "audio/vnd.wave": ".wav",
    "audio/mp3": ".mp3",
    "text/markdown": ".md",
}
"""Common media types Python's own table does not name."""
_BUILTIN_TYPES = mimetypes.MimeTypes(filenames=())
"""Python's built-in table only, so that file names do not depend on the host's
/etc/mime.types."""


def openai_base64(part: FilePart | ImagePart) -> tuple[str, str] | None:
    """``(mime, base64 data)`` of a part given by ``data`` or a ``data:`` URL, else None (the
    data is sent as it is: OpenAI's APIs check it)."""
    if part.data and not part.url:
        return part.mime or "application/octet-stream", part.data
    return parse_data_url(part.url)


def openai_filename(part: FilePart, mime: str) -> str:
    """The part's name, or ``file`` with the extension of its media type (OpenAI asks for a
    file name with inline file data)."""
    if part.name:
        return part.name
    mime = mime.lower()
    return "file" + (_EXTENSIONS.get(mime) or _BUILTIN_TYPES.guess_extension(mime) or "")


def openai_call_id(call_id: str) -> str:
    """A call id as OpenAI's APIs take it: not empty (an empty one is sent as ``call``)."""
    return call_id or "call"


def openai_arguments(call: ToolCall) -> str:
    """The call's arguments as the compact JSON text OpenAI's APIs take."""
    return encode(call.arguments).decode()


def openai_usage(usage: Any, *, given: str, made: str) -> Usage | None:
    """The usage of an OpenAI reply, None when it has none. ``given`` and ``made`` name the
    API's words for the prompt and the answer: Chat Completions' ``prompt`` and ``completion``,
    the Responses API's ``input`` and ``output`` (``<given>_tokens``,
    ``<given>_tokens_details.cached_tokens``, ``<made>_tokens_details.reasoning_tokens``...)."""
    if not isinstance(usage, Mapping):
        return None
    given_details = usage.get(f"{given}_tokens_details")
    made_details = usage.get(f"{made}_tokens_details")
    return Usage(
        input_tokens=int_field(usage, f"{given}_tokens"),
        output_tokens=int_field(usage, f"{made}_tokens"),
        total_tokens=int_field(usage, "total_tokens"),
        cache_read_tokens=int_field(given_details, "cached_tokens"),
        cache_write_tokens=int_field(given_details, "cache_write_tokens"),
        reasoning_tokens=int_field(made_details, "reasoning_tokens"),
    )
