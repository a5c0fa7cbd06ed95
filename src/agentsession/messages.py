"""Provider-neutral messages: what a model sees.

A :class:`Message` has a role, ordered content parts, tool calls (assistant) and tool results
(tool). Every part is a small typed struct whose JSON form carries a ``type`` tag; the JSON keys
are camelCase. Converters for provider wire formats live elsewhere; this module only defines
the shapes and convenient constructors.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import msgspec

from .codec import decode, encode
from .errors import UsageError

__all__ = [
    "AttachmentRef",
    "FilePart",
    "ImagePart",
    "Message",
    "Part",
    "RefusalPart",
    "Role",
    "TextPart",
    "ThinkingPart",
    "ToolCall",
    "ToolResult",
]

Role = Literal["system", "user", "assistant", "tool"]
"""The four message roles."""


class TextPart(msgspec.Struct, frozen=True, tag="text", tag_field="type", omit_defaults=True):
    """Plain text."""

    text: str
    """The text."""
    annotations: list[dict[str, Any]] = []
    """Citations and annotations a provider attached to the text (its own JSON objects, kept
    as they came: OpenAI's ``annotations``, Anthropic's ``citations``); since revision 3."""


class ThinkingPart(
    msgspec.Struct, frozen=True, tag="thinking", tag_field="type", omit_defaults=True
):
    """Model reasoning, with the provider's signature when it gave one."""

    text: str
    """The reasoning text (a summary of it, for OpenAI's reasoning items)."""
    signature: str = ""
    """Opaque provider data that must be sent back unchanged: Anthropic's ``signature`` (the
    ``data`` of a redacted block), Gemini's ``thought_signature``, OpenAI's
    ``encrypted_content``."""
    provider: str = ""
    """The API that produced it (``anthropic``, ``openai``, ``gemini``; "" when unknown): a
    signature only means something to its own provider, so the other formats drop the block;
    since revision 3."""
    redacted: bool = False
    """An Anthropic ``redacted_thinking`` block (no text; its data is in ``signature``);
    since revision 3."""
    id: str = ""
    """The provider's id of the reasoning item (OpenAI Responses); since revision 3."""


class RefusalPart(msgspec.Struct, frozen=True, tag="refusal", tag_field="type"):
    """The model declined to answer (OpenAI's ``refusal``); since revision 3."""

    text: str
    """What the model said instead."""


class ImagePart(
    msgspec.Struct,
    frozen=True,
    tag="image",
    tag_field="type",
    omit_defaults=True,
    rename="camel",
):
    """An image given by URL (``https:`` or ``data:``) or by base64 ``data``."""

    url: str = ""
    """An ``http(s)`` URL or a ``data:`` URL."""
    data: str = ""
    """Base64-encoded image bytes, when no URL is given."""
    mime: str = ""
    """Media type, for example ``image/png``."""
    detail: str = ""
    """Provider detail hint (``low``, ``high``, ``auto``)."""
    source: str = ""
    """Workspace-relative path the image came from; never sent to a provider."""


class FilePart(
    msgspec.Struct,
    frozen=True,
    tag="file",
    tag_field="type",
    omit_defaults=True,
    rename="camel",
):
    """A document, audio or video file given by URL or base64 ``data``."""

    url: str = ""
    """An ``http(s)`` URL or a ``data:`` URL."""
    data: str = ""
    """Base64-encoded file bytes, when no URL is given."""
    mime: str = ""
    """Media type, for example ``application/pdf``."""
    name: str = ""
    """File name shown to the model."""
    source: str = ""
    """Workspace-relative path the file came from; never sent to a provider."""


class AttachmentRef(
    msgspec.Struct,
    frozen=True,
    tag="attachment_ref",
    tag_field="type",
    omit_defaults=True,
):
    """A stored reference to an attachment; hydrated back into data before a model call."""

    source: str = ""
    """Workspace-relative path (for example ``upload/shot.png``)."""
    url: str = ""
    """Remote URL when there is no local source (never a ``data:`` URL)."""
    mime: str = ""
    """Media type."""


Part = TextPart | ThinkingPart | RefusalPart | ImagePart | FilePart | AttachmentRef
"""One content part of a message."""


class ToolCall(msgspec.Struct, frozen=True, omit_defaults=True):
    """A model's request to run a tool."""

    id: str
    """Call id chosen by the provider; a result answers it by this id."""
    name: str
    """Tool name."""
    arguments: dict[str, Any] = {}
    """Decoded JSON arguments. A JSON object given as a string (the wire form of OpenAI's
    APIs) is parsed; anything else that is not a mapping raises
    :class:`~agentsession.errors.UsageError`."""
    signature: str = ""
    """Opaque provider data attached to the call that must be sent back unchanged (Gemini's
    ``thought_signature``, base64); since revision 3."""

    def __post_init__(self) -> None:
        if type(self.id) is not str or type(self.name) is not str:
            raise UsageError(
                f"ToolCall needs a string id and name, not {self.id!r} and {self.name!r}"
            )
        args = self.arguments
        if type(args) is dict:
            return
        if isinstance(args, (str, bytes)):
            try:
                parsed = decode(args) if args.strip() else {}
            except ValueError as exc:
                raise UsageError(
                    f"ToolCall {self.id!r} ({self.name}): arguments is not valid JSON: {exc}"
                ) from None
            if not isinstance(parsed, dict):
                raise UsageError(
                    f"ToolCall {self.id!r} ({self.name}): arguments must be a JSON object, "
                    f"not {type(parsed).__name__}"
                )
            msgspec.structs.force_setattr(self, "arguments", parsed)
        elif isinstance(args, Mapping):
            msgspec.structs.force_setattr(self, "arguments", dict(args))
        else:
            raise UsageError(
                f"ToolCall {self.id!r} ({self.name}): arguments must be a dict or a JSON object "
                f"string, not {type(args).__name__}"
            )


class ToolResult(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """The answer to one tool call."""

    call_id: str
    """Id of the call this answers."""
    name: str = ""
    """Tool name."""
    content: str = ""
    """What the tool returned, as the model will see it."""
    is_error: bool = False
    """True when the tool failed; ``content`` then describes the failure."""
    audit: dict[str, str] = {}
    """Runtime annotations (for example ``{"decision": "interrupted"}``); not sent to models."""
    parts: list[Part] = []
    """Content beyond ``content``'s text that the tool returned, such as images (Anthropic
    and Gemini accept them in tool results); since revision 3."""

    def __post_init__(self) -> None:
        if type(self.call_id) is not str or type(self.name) is not str:
            raise UsageError(
                f"ToolResult needs a string call_id and name, not {self.call_id!r} and "
                f"{self.name!r}"
            )
        content = self.content
        if type(content) is not str:
            if content is None:
                msgspec.structs.force_setattr(self, "content", "")
            elif isinstance(content, (dict, list, int, float, bool)):
                # Structured tool output: the model sees it as JSON text.
                msgspec.structs.force_setattr(self, "content", encode(content).decode())
            else:
                raise UsageError(
                    f"ToolResult {self.call_id!r} ({self.name}): content must be text or JSON "
                    f"data (dict, list, number), not {type(content).__name__}"
                )
        if type(self.audit) is not dict:
            raise UsageError(f"ToolResult {self.call_id!r}: audit must be a dict of strings")


def _check_calls_and_results(msg: Message) -> None:
    """Make ``msg``'s tool calls and results lists (from any other iterable) and raise
    :class:`~agentsession.errors.UsageError`, naming the struct, for an item of another type."""
    for field, kind, shape in (
        ("tool_calls", ToolCall, "ToolCall(id, name, arguments)"),
        ("tool_results", ToolResult, "ToolResult(call_id, name, content)"),
    ):
        items = getattr(msg, field)
        if type(items) is not list:
            if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
                raise UsageError(
                    f"Message {field} must be a list of {kind.__name__}, "
                    f"not {type(items).__name__}"
                )
            items = list(items)
            msgspec.structs.force_setattr(msg, field, items)
        for i, item in enumerate(items):
            if not isinstance(item, kind):
                hint = " (a provider's reply converts with agentsession.providers)"
                raise UsageError(
                    f"Message {field}[{i}] must be a {kind.__name__}, not "
                    f"{type(item).__name__}: build it as {shape}"
                    + (hint if isinstance(item, Mapping) else "")
                )


_PART_TYPES = (TextPart, ThinkingPart, RefusalPart, ImagePart, FilePart, AttachmentRef)


def _parts(content: str | Part | Sequence[Part] | None) -> list[Part]:
    if content is None:
        return []
    if isinstance(content, str):
        return [TextPart(content)] if content else []
    if isinstance(content, _PART_TYPES):
        return [content]
    if isinstance(content, (list, tuple)):
        return list(content)
    raise UsageError(
        "message content must be text, a part (TextPart, ImagePart, ...) or a list of parts, "
        f"not {type(content).__name__}"
    )


class Message(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """One model-visible message.

    Built with the constructors (:meth:`user`, :meth:`assistant`, ...), which check their
    arguments; a message assembled by hand with fields of the wrong type is refused when it is
    appended (the append pipeline validates every payload against its struct)."""

    role: Role
    """``system``, ``user``, ``assistant`` or ``tool``."""
    parts: list[Part] = []
    """Ordered content parts."""
    tool_calls: list[ToolCall] = []
    """Tool calls made by an assistant message."""
    tool_results: list[ToolResult] = []
    """Tool results carried by a tool message."""
    name: str = ""
    """Optional participant name (provider ``name`` field)."""
    author: str = ""
    """Optional author: the agent that produced the message, in multi-agent runs."""

    def __post_init__(self) -> None:
        # A dict in place of a ToolCall would pass here and fail far away (the recorder reads
        # call.id), so the types are checked where the message is built (and decoded: the
        # common case costs a type test per call).
        calls = self.tool_calls
        if calls:
            if type(calls) is not list:
                _check_calls_and_results(self)
            for call in calls:
                if type(call) is not ToolCall:
                    _check_calls_and_results(self)
                    break
        results = self.tool_results
        if results:
            if type(results) is not list:
                _check_calls_and_results(self)
            for result in results:
                if type(result) is not ToolResult:
                    _check_calls_and_results(self)
                    break

    @classmethod
    def user(
        cls, content: str | Part | Sequence[Part], *, name: str = "", author: str = ""
    ) -> Message:
        """A user message from text or parts."""
        return cls(role="user", parts=_parts(content), name=name, author=author)

    @classmethod
    def system(cls, content: str | Part | Sequence[Part]) -> Message:
        """A system message."""
        return cls(role="system", parts=_parts(content))

    @classmethod
    def assistant(
        cls,
        content: str | Part | Sequence[Part] | None = None,
        *,
        tool_calls: Iterable[ToolCall] = (),
        thinking: str | None = None,
        signature: str = "",
        author: str = "",
    ) -> Message:
        """An assistant message: text and/or tool calls, optionally preceded by thinking."""
        parts = _parts(content)
        if thinking is not None:
            parts.insert(0, ThinkingPart(thinking, signature))
        return cls(role="assistant", parts=parts, tool_calls=list(tool_calls), author=author)

    @classmethod
    def tool(cls, *results: ToolResult) -> Message:
        """A tool message carrying one or more results."""
        return cls(role="tool", tool_results=list(results))

    @classmethod
    def tool_result(
        cls,
        call_id: str,
        name: str,
        content: str,
        *,
        is_error: bool = False,
        audit: Mapping[str, str] | None = None,
    ) -> Message:
        """A tool message with a single result."""
        result = ToolResult(call_id, name, content, is_error, dict(audit or {}))
        return cls(role="tool", tool_results=[result])

    @property
    def text(self) -> str:
        """The message's text parts joined with no separator."""
        return "".join(p.text for p in self.parts if type(p) is TextPart)
