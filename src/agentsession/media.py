"""Opt-in media and size policies: what an application may choose to shrink before storing, and
turning stored attachment references back into images before a model call.

Nothing here runs unless asked: by default the recorder stores every message whole. An
application that wants agentkit's storage policy passes ``storage=AGENTKIT_STORAGE_POLICY`` to
``session.turn()`` (or its own :class:`StoragePolicy`).

* :func:`sanitize_for_storage` shrinks a message for the log under a :class:`StoragePolicy`:
  inline media become ``attachment_ref`` parts (data URLs never reach disk), text is capped at a
  byte budget, cut on a character boundary. Tool-call arguments are kept whole, so they stay
  valid JSON.
* :func:`estimate_logical_chars` measures a message before sanitising; the recorder records it
  in ``meta["logical_chars"]`` when a policy shrank the message, and :func:`sum_logical_chars`
  adds those figures up for context accounting.
* :func:`hydrate_local_attachments` loads image references of the last user message (and
  images that named tools reported) from a workspace as ``data:`` URLs. A missing or unreadable
  file degrades to a text hint; a path never escapes the workspace root.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Collection, Iterable, Sequence
from typing import Literal, Protocol

import msgspec

from .derive import truncate_text
from .errors import UsageError
from .events import ASSISTANT_MESSAGE, USER_MESSAGE, Event, decode
from .messages import (
    AttachmentRef,
    FilePart,
    ImagePart,
    Message,
    Part,
    RefusalPart,
    TextPart,
    ThinkingPart,
)

__all__ = [
    "AGENTKIT_STORAGE_POLICY",
    "DEFAULT_MAX_IMAGE_BYTES",
    "DEFAULT_MAX_STORED_TEXT_BYTES",
    "IMAGE_SLOT_CHARS",
    "METADATA_LOGICAL_CHARS",
    "StoragePolicy",
    "Workspace",
    "estimate_logical_chars",
    "hydrate_local_attachments",
    "sanitize_for_storage",
    "sum_logical_chars",
]

DEFAULT_MAX_STORED_TEXT_BYTES = 8192
"""agentkit's cap on each stored text part (``DefaultMaxStoredTextBytes``)."""
METADATA_LOGICAL_CHARS = "logical_chars"
"""The ``meta`` key holding a message's size before sanitising."""
IMAGE_SLOT_CHARS = 256
"""What an inline image counts for in :func:`estimate_logical_chars` (not its base64 length)."""
DEFAULT_MAX_IMAGE_BYTES = 10 << 20
"""Largest image file :func:`hydrate_local_attachments` inlines."""

_IMAGE_EXTENSIONS = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".bmp": "image/bmp",
    ".heic": "image/heic",
    ".heif": "image/heif",
}
_MAGIC = [
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"BM", "image/bmp"),
]
_READ_IMAGE_LINE = re.compile(r"^Image: (.+)$", re.M)


def _is_data_url(value: str) -> bool:
    return value.lstrip()[:5].lower() == "data:"


def _ref(source: str, url: str, mime: str) -> AttachmentRef | None:
    source, url, mime = source.strip(), url.strip(), mime.strip()
    if source:
        return AttachmentRef(source=source, mime=mime)
    if url and not _is_data_url(url):
        return AttachmentRef(url=url, mime=mime)
    return None


def _sanitize_part(part: Part, policy: StoragePolicy) -> Part | None:
    if isinstance(part, TextPart):
        text = part.text
        if policy.drop_blank_text:
            text = text.strip()
            if not text or _is_data_url(text):
                return None
        if policy.max_text_bytes:
            text = truncate_text(text, policy.max_text_bytes)
        return part if text == part.text else TextPart(text)
    if isinstance(part, (ImagePart, FilePart)) and policy.media == "reference":
        return _ref(part.source, part.url, part.mime)
    # Thinking is kept as it is: its signature covers the exact text, and providers need it
    # back unchanged within a tool-using turn. Attachment references are already small.
    return part


class StoragePolicy(msgspec.Struct, frozen=True, kw_only=True):
    """What to shrink in a message before it is stored (see :func:`sanitize_for_storage`)."""

    max_text_bytes: int | None = None
    """Cap on each text part and tool-result content, in UTF-8 bytes (None: no cap)."""
    media: Literal["keep", "reference"] = "keep"
    """``reference``: inline images and files become ``attachment_ref`` parts (or are dropped
    when no reference can be made), so base64 data never reaches storage."""
    drop_blank_text: bool = False
    """Trim text parts and drop those left empty or holding a ``data:`` URL."""

    def __post_init__(self) -> None:
        if self.max_text_bytes is not None and self.max_text_bytes < 1:
            raise UsageError(f"max_text_bytes must be >= 1 or None, not {self.max_text_bytes}")
        if self.media not in ("keep", "reference"):
            raise UsageError(f"media must be 'keep' or 'reference', not {self.media!r}")


AGENTKIT_STORAGE_POLICY = StoragePolicy(
    max_text_bytes=DEFAULT_MAX_STORED_TEXT_BYTES, media="reference", drop_blank_text=True
)
"""agentkit's storage policy: text cut to 8 KiB, media stored by reference, blank text dropped."""


def sanitize_for_storage(msg: Message, policy: StoragePolicy = AGENTKIT_STORAGE_POLICY) -> Message:
    """A copy of ``msg`` shrunk under ``policy`` (the input is not changed).

    * text parts are cut to ``max_text_bytes`` bytes on a UTF-8 character boundary (plus
      ``"\\n...[truncated]"``); with ``drop_blank_text`` they are trimmed first, and dropped
      when empty or a ``data:`` URL;
    * with ``media="reference"``, image and file parts become ``attachment_ref`` parts (by
      workspace ``source``, else by a non-``data:`` URL), or are dropped when no reference can
      be made;
    * thinking parts and attachment references are kept unchanged (a thinking signature covers
      the exact text); tool calls are kept whole (their arguments stay valid JSON); tool-result
      contents are cut like text.
    """
    limit = policy.max_text_bytes or 0
    parts = [p for p in (_sanitize_part(part, policy) for part in msg.parts) if p is not None]
    results = (
        [
            msgspec.structs.replace(r, content=truncate_text(r.content, limit))
            for r in msg.tool_results
        ]
        if limit
        else list(msg.tool_results)
    )
    return msgspec.structs.replace(msg, parts=parts, tool_results=results)


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def estimate_logical_chars(msg: Message) -> int:
    """The size of a message as a model would see it, in UTF-8 bytes.

    The role, every text, thinking text, source and non-``data:`` URL, tool-call names and
    arguments (as compact JSON), tool-result names and contents. Inline media (a ``data:`` URL
    or base64 ``data``) count :data:`IMAGE_SLOT_CHARS` each, not their encoded length.
    """
    total = _size(msg.role)
    for part in msg.parts:
        if isinstance(part, (TextPart, ThinkingPart, RefusalPart)):
            total += _size(part.text)
        elif isinstance(part, (ImagePart, FilePart)):
            inline = bool(part.data) or _is_data_url(part.url)
            total += _size(part.source) + (IMAGE_SLOT_CHARS if inline else _size(part.url))
        else:
            total += _size(part.source) + _size(part.url)
    for call in msg.tool_calls:
        total += _size(call.name) + len(msgspec.json.encode(call.arguments))
    for result in msg.tool_results:
        total += _size(result.name) + _size(result.content)
    return total


def sum_logical_chars(events: Iterable[Event], agent: str | None = None) -> int:
    """Total logical size of the user and assistant messages in ``events``.

    Uses ``meta["logical_chars"]`` where sanitising recorded it, else estimates the stored
    message. The agent filter is derive's: with ``agent`` given, events of that agent and
    events with no agent count.
    """
    total = 0
    for event in events:
        if event.type not in (USER_MESSAGE, ASSISTANT_MESSAGE):
            continue
        if agent and event.agent and event.agent != agent:
            continue
        recorded = event.meta.get(METADATA_LOGICAL_CHARS)
        if isinstance(recorded, (int, float)) and not isinstance(recorded, bool) and recorded > 0:
            total += int(recorded)
            continue
        try:
            total += estimate_logical_chars(decode(event.data, Message))
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
    return total


# ---------------------------------------------------------------------------------------------
# Hydration.


class Workspace(Protocol):
    """Resolves workspace-relative paths (agentkit's ``workspace.Service``)."""

    def resolve(self, relative: str) -> str:
        """The absolute path of ``relative`` inside the workspace."""


class _RootWorkspace:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.path.realpath(os.fspath(root))

    def resolve(self, relative: str) -> str:
        return os.path.join(self.root, relative)


def _within(root: str, path: str) -> bool:
    real = os.path.realpath(path)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def _load_image(
    workspace: Workspace, root: str | None, source: str, max_bytes: int, strip_prefix: str
) -> tuple[bytes, str] | None:
    """The bytes and mime type of a workspace image, or None when it cannot or may not be read."""
    rel = source.strip().lstrip("/")
    if strip_prefix and rel.startswith(strip_prefix):
        rel = rel[len(strip_prefix) :]
    ext = os.path.splitext(rel)[1].lower()
    if ext not in _IMAGE_EXTENSIONS or not rel:
        return None
    try:
        path = workspace.resolve(rel)
        if root is not None and not _within(root, path):
            return None
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size > max_bytes:
                return None
            data = f.read(max_bytes + 1)
    except (OSError, ValueError):
        return None
    if len(data) > max_bytes:
        return None
    mime = _IMAGE_EXTENSIONS.get(ext) or next(
        (m for magic, m in _MAGIC if data.startswith(magic)), "image/png"
    )
    return data, mime


def _data_url(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def hydrate_local_attachments(
    messages: Sequence[Message],
    workspace: Workspace | str | os.PathLike[str] | None,
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
    *,
    image_tools: Collection[str] = (),
    strip_prefix: str = "",
) -> list[Message]:
    """Before a model call: inline the images the last user message references as ``data:``
    URLs, and the images that tools named in ``image_tools`` reported after it (lines
    ``Image: <path>`` in their results; agentkit's runtime uses ``image_tools={"read"}``).

    ``workspace`` is a directory (paths never escape it, symlinks included) or an object with
    ``resolve(relative) -> path``; ``strip_prefix`` is removed from the front of a stored path
    first (agentkit's ``"work/"``). An attachment that is missing, unreadable, too large or not
    an image becomes the text ``[attachment: <source or url>]``. The input is not changed.
    """
    out = list(messages)
    if workspace is None or not out:
        return out
    max_bytes = max_image_bytes if max_image_bytes > 0 else DEFAULT_MAX_IMAGE_BYTES
    if isinstance(workspace, (str, os.PathLike)):
        rooted = _RootWorkspace(workspace)
        ws: Workspace = rooted
        root: str | None = rooted.root
    else:
        ws, root = workspace, None
    last_user = next((i for i in range(len(out) - 1, -1, -1) if out[i].role == "user"), None)
    if last_user is None:
        return out

    parts: list[Part] = []
    for part in out[last_user].parts:
        if not isinstance(part, AttachmentRef):
            parts.append(part)
            continue
        loaded = (
            _load_image(ws, root, part.source, max_bytes, strip_prefix) if part.source else None
        )
        if loaded is not None:
            data, mime = loaded
            parts.append(ImagePart(url=_data_url(data, mime), mime=mime, source=part.source))
        else:
            label = part.source or part.url
            parts.append(TextPart(f"[attachment: {label}]" if label else "[attachment omitted]"))
    out[last_user] = msgspec.structs.replace(out[last_user], parts=parts)

    # Images the read tool reported in the latest batch of tool messages after that user turn.
    last_tool = next((i for i in range(len(out) - 1, last_user, -1) if out[i].role == "tool"), None)
    if last_tool is None:
        return out
    first_tool = last_tool
    while first_tool - 1 > last_user and out[first_tool - 1].role == "tool":
        first_tool -= 1
    seen: list[str] = []
    for msg in out[first_tool : last_tool + 1]:
        for result in msg.tool_results:
            if result.name not in image_tools:
                continue
            for path in _READ_IMAGE_LINE.findall(result.content):
                path = path.strip()
                if path and path not in seen:
                    seen.append(path)
    images: list[Part] = []
    for path in seen:
        loaded = _load_image(ws, root, path, max_bytes, strip_prefix)
        if loaded is not None:
            data, mime = loaded
            images.append(ImagePart(url=_data_url(data, mime), mime=mime, source=path))
    if images:
        out.insert(last_tool + 1, Message(role="user", parts=images))
    return out
