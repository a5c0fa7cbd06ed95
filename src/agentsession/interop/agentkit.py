"""agentkit's JSONL line dialect, mapped to and from agentsession events.

agentkit (the Go package ``github.com/lengzhao/agentkit``) stores a session as one
``json.Marshal(agentkit.SessionEvent)`` per line (``runtime/session/sessstore/jsonl.go``). The
struct has no JSON tags except ``metadata``, so a line carries Go's field names, always in this
order and always present except ``metadata``::

    {"ID":"","Seq":3,"SessionID":"","AgentID":"coder","Type":"user/message",
     "Data":{"Role":"user","Content":[{"type":"text","text":"hi"}],"ToolCalls":null,
     "ToolResults":null},"CreatedAt":"0001-01-01T00:00:00Z","UserID":"U1",
     "metadata":{"logical_chars":12004}}

This module translates single lines; it does no I/O. :func:`is_agentkit_line` tells the two
dialects apart by their first six bytes (agentkit's lines begin ``{"ID":``, ours ``{"seq":``),
:func:`decode_agentkit_line` turns a line into an :class:`~agentsession.events.Event` whose
payload is agentsession's payload JSON (valid for :data:`~agentsession.events.PAYLOAD_TYPES`), and
:func:`encode_agentkit_line` writes an event as agentkit would.

Event fields (:data:`EVENT_KEYS`)
---------------------------------

* ``Seq`` is ``seq``; ``AgentID`` is ``agent``; ``UserID`` is ``user``; ``metadata`` is ``meta``
  (written with sorted keys, as Go writes maps).
* ``Type`` maps through :data:`EVENT_TYPES` (every agentkit type has the same string in
  agentsession). A type agentkit may add later that falls in a namespace agentsession reserves
  (``user/``, ``tool/``, ``turn/``, ...) and that agentsession does not know would be refused by
  an append, so it is kept as ``agentkit/<type>`` (:data:`FOREIGN_TYPE_PREFIX`); writing strips
  the prefix again. Other unknown types are kept as they are.
* ``CreatedAt``: agentkit's JSONL backend serialises the caller's event, not its stamped copy, so
  every line it writes carries Go's zero time ``0001-01-01T00:00:00Z`` (:data:`ZERO_TIME`). That
  decodes as ``time=None``; any other time decodes as a timezone-aware UTC datetime (Go writes
  nanoseconds; digits past the microsecond are dropped). Writing puts the event's own time in
  ``CreatedAt`` (Go's RFC 3339 form, trailing zero digits dropped), and the zero time when it is
  None: Go's loader reads both.
* ``ID`` is always ``""`` in agentkit's writers and is ignored; ``SessionID`` is usually ``""``
  on disk and is ignored too (the session is the file). Writing sets ``ID`` to ``""`` and
  ``SessionID`` to the ``session_id`` given.

Payloads
--------

Messages are translated key by key (:data:`MESSAGE_KEYS`, :data:`TOOL_CALL_KEYS`,
:data:`TOOL_RESULT_KEYS`, :data:`PART_TYPES`): ``Role``/``Content``/``ToolCalls``/``ToolResults``
become ``role``/``parts``/``toolCalls``/``toolResults`` (``null`` lists become empty), a tool
call's ``Input`` becomes ``arguments`` and a tool result's ``ID`` becomes ``callId``; a result's
``Audit`` (such as ``{"decision": "interrupted"}`` on agentkit's stand-in results) is kept as
``audit``. Part types agentsession lacks are folded: ``image_url`` into ``image``;
``document``, ``audio`` and ``video`` into ``file``; ``""`` into ``text``; any other type into
``attachment_ref`` when it has a ``url`` or ``source``, else ``text``. The original type is kept
in the part's ``agentkitType`` key so that writing restores it.

Lifecycle payloads (turn, step, usage, todo, skill, retry, overflow, continue, finish, recovery,
subagent, compaction) already use agentsession's camelCase keys; only the messages inside
compaction markers and ``turn/continue`` are translated. Writing follows Go's ``omitempty`` rules
(:data:`GO_PAYLOAD_SHAPES`): keys Go always writes are written even when agentsession leaves them
out, holding the value agentsession's absent key means (``closedStep: -1``, ``kind: "summary"``,
``items: null``, a zero ``summary`` message for a prune marker); on reading, a zero ``summary``
message and ``null`` values mean "absent". agentsession's payloads are written in canonical form,
so an agentkit line read and written again is byte for byte the line Go wrote.

Keys the other side does not know are kept, in both directions: Go's decoder and agentsession's
readers both ignore unknown keys, and the line itself is never rewritten by agentkit's loader
(``Data`` is a ``json.RawMessage``). So agentkit-only fields (``turn/end``'s ``stopReason``,
``stepLimit``, ``cancelled``, ``failed``, ``message``; ``skill/load``'s ``rendered``; any newer
message key) survive a read and a write, and agentsession-only fields ride along in agentkit
lines as :data:`EXTENSION_KEYS`.

What agentkit cannot represent, and what happens to it
------------------------------------------------------

* **Thinking signatures** (``ThinkingPart.signature``): agentkit's ``ContentPart`` has no such
  field. Written as the part's ``signature`` extension key: agentkit ignores it (and its own
  storage sanitiser drops thinking parts altogether); agentsession reads it back.
* **Inline image and file data** (``ImagePart.data``, ``FilePart.data``, base64 with no URL):
  written as the equivalent ``data:<mime>;base64,<data>`` URL in ``url``, the form agentkit's
  providers understand. It reads back as that URL (``url`` set, ``data`` empty): the same bytes
  in the other of agentsession's two spellings. When a part has both a URL and data, ``data`` is
  kept as an extension key.
* **File names** (``FilePart.name``), **message names and authors** (``Message.name``,
  ``Message.author``): extension keys ``name``/``author``, ignored by agentkit.
* **Tool error flags** (``ToolResult.is_error``): agentkit's ``ToolResult`` has none; extension
  key ``isError``, ignored by agentkit (the model still sees the result text).
* **Turn errors** (``turn/end`` ``error: {type, message}``): agentkit has only ``failed``.
  Written as ``failed: true`` plus the ``error`` object as an extension key; on reading,
  ``failed`` is dropped again when ``error`` is present.
* **Cache token counts** (``usage`` ``cacheReadTokens``, ``cacheWriteTokens``), compaction
  ``retainedTurnStarts``, ``inTurn`` and ``retainedAgents``: extension keys. agentkit's derive
  does not filter a marker's kept messages by agent, and it treats a marker without
  ``retainedTail`` as the legacy form (replaying events after ``beforeSeq``) even when it has
  ``firstKeptSeq``; for a prune marker (no summary) it puts the zero message first in the
  history.
* **Streaming and permission events** (``message/*``, ``permission/*``): agentkit's session
  package never writes them (streaming is outbound only; the permission plugin owns the others)
  and their Go payloads are not part of its session format, so they are kept exactly as
  agentsession writes them (no translation).
* **Batch atomicity** (the JSONL backend's ``more`` flag): not a property of an event, and
  agentkit has no equivalent: every agentkit line stands alone, so a batch cut short by a crash
  cannot be recognised in this dialect.
* **Lines longer than 1 MiB** (:data:`AGENTKIT_MAX_LINE_BYTES`), from large tool results or
  inline media: agentkit's loader fails on such a line and then cannot open the session, so
  :func:`encode_agentkit_line` refuses to write one (unless told otherwise); reading accepts
  lines of any length.
* **An event time of exactly** ``0001-01-01T00:00:00Z``: that is Go's zero time, which means
  "no time" in this dialect, so it reads back as ``time=None``.
* **Lone UTF-16 surrogates** in strings: written as JSON ``\\uXXXX`` escapes, which Go's decoder
  replaces with U+FFFD.
* **Tool call input** that is not a JSON object (possible in Go, whose ``Input`` is raw JSON):
  kept verbatim in the call's ``agentkitInput`` key (restored on writing), with ``arguments``
  parsed from it when it is a string holding a JSON object and empty otherwise. A ``null`` input
  reads as empty arguments and is written as ``{}``. Tool result ``Content`` given as a list of
  parts (older agentkit versions) reads as the joined text, the original kept in
  ``agentkitContent``.

Go escapes ``<``, ``>``, ``&``, U+2028 and U+2029 in strings as ``\\u003c`` and so on; the writer
does the same, so its lines are what Go itself would write.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json as _json
import re
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from ..codec import decode, encode, fallback_dumps
from ..errors import UsageError
from ..events import (
    ASSISTANT_MESSAGE,
    COMPACTION,
    MESSAGE_END,
    MESSAGE_START,
    MESSAGE_UPDATE,
    OVERFLOW_RECOVERY,
    PAYLOAD_TYPES,
    PERMISSION_REQUEST,
    PERMISSION_RESOLVED,
    RETRY_END,
    RETRY_START,
    RUN_FINISH,
    SESSION_BRANCH,
    SESSION_DELIVERY,
    SESSION_DISCARD,
    SESSION_FORK,
    SESSION_LEASE,
    SESSION_MERGE,
    SESSION_RECOVERY,
    SESSION_REWIND,
    SESSION_ROLLBACK,
    SKILL_LOAD,
    STEP_END,
    STEP_START,
    SUBAGENT_END,
    SUBAGENT_START,
    SUMMARIZATION_RETRY_END,
    SUMMARIZATION_RETRY_START,
    TODO_UPDATE,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_CONTINUE,
    TURN_END,
    TURN_START,
    USAGE,
    USER_MESSAGE,
    Event,
    check_event_type,
)

__all__ = [
    "AGENTKIT_LINE_PREFIX",
    "AGENTKIT_MAX_LINE_BYTES",
    "EVENT_KEYS",
    "AGENTSESSION_ONLY_TYPES",
    "EVENT_TYPES",
    "EVENT_TYPE_TABLE",
    "EXTENSION_KEYS",
    "FOREIGN_TYPE_PREFIX",
    "GO_PAYLOAD_SHAPES",
    "MESSAGE_KEYS",
    "PART_KEYS",
    "PART_TYPES",
    "TOOL_CALL_KEYS",
    "TOOL_RESULT_KEYS",
    "ZERO_TIME",
    "AgentkitLineError",
    "decode_agentkit_line",
    "encode_agentkit_line",
    "is_agentkit_line",
]

# ---------------------------------------------------------------------------------------------
# Mapping tables.

AGENTKIT_LINE_PREFIX: Final = b'{"ID":'
"""How every line agentkit writes begins: ``ID`` is the first field of ``SessionEvent`` and Go
writes compact JSON with fields in declaration order."""

AGENTKIT_MAX_LINE_BYTES: Final = (1 << 20) - 1
"""The longest line agentkit's loader reads: it scans the file with a ``bufio.Scanner`` whose
buffer is capped at 1 MiB (``jsonlScannerMaxLineBytes`` in ``sessstore/jsonl_load.go``), and a
line plus its newline must fit. One longer line makes the whole session fail to open there."""

ZERO_TIME: Final = "0001-01-01T00:00:00Z"
"""Go's zero ``time.Time`` as JSON: the ``CreatedAt`` of every line agentkit's JSONL backend
writes (it serialises the caller's event, not the copy it stamped)."""

FOREIGN_TYPE_PREFIX: Final = "agentkit/"
"""Namespace for agentkit event types that fall in a namespace agentsession reserves but does not
know (none today): agentsession would refuse to append them under their own name."""

EVENT_KEYS: Final[Mapping[str, str]] = {
    "ID": "id",
    "Seq": "seq",
    "SessionID": "",
    "AgentID": "agent",
    "Type": "type",
    "Data": "data",
    "CreatedAt": "time",
    "UserID": "user",
    "metadata": "meta",
}
"""agentkit's ``SessionEvent`` keys, in the order Go writes them, and the :class:`Event` field
each becomes (``""``: not kept; ``SessionID`` is the file). agentkit itself never sets ``ID``
(its lines carry ``""``); agentsession writes the event's id there (since revision 4)."""

EVENT_TYPE_TABLE: Final[tuple[tuple[str, str, str], ...]] = (
    ("EventTurnStart", "turn/start", TURN_START),
    ("EventTurnEnd", "turn/end", TURN_END),
    ("EventStepStart", "step/start", STEP_START),
    ("EventStepEnd", "step/end", STEP_END),
    ("EventUserMessage", "user/message", USER_MESSAGE),
    ("EventMessageStart", "message/start", MESSAGE_START),
    ("EventMessageUpdate", "message/update", MESSAGE_UPDATE),
    ("EventMessageEnd", "message/end", MESSAGE_END),
    ("EventAssistantMessage", "assistant/message", ASSISTANT_MESSAGE),
    ("EventToolCall", "tool/call", TOOL_CALL),
    ("EventToolResult", "tool/result", TOOL_RESULT),
    ("EventCompaction", "session/compaction", COMPACTION),
    ("EventSkillLoad", "skill/load", SKILL_LOAD),
    ("EventAutoRetryStart", "retry/start", RETRY_START),
    ("EventAutoRetryEnd", "retry/end", RETRY_END),
    ("EventSummarizationRetryStart", "summarization/retry/start", SUMMARIZATION_RETRY_START),
    ("EventSummarizationRetryEnd", "summarization/retry/end", SUMMARIZATION_RETRY_END),
    ("EventOverflowRecovery", "overflow/recovery", OVERFLOW_RECOVERY),
    ("EventTurnContinue", "turn/continue", TURN_CONTINUE),
    ("EventUsage", "usage", USAGE),
    ("EventTodoUpdate", "todo/update", TODO_UPDATE),
    ("EventRunFinish", "run/finish", RUN_FINISH),
    ("EventSessionRecovery", "session/recovery", SESSION_RECOVERY),
    ("EventSubagentStart", "subagent/start", SUBAGENT_START),
    ("EventSubagentEnd", "subagent/end", SUBAGENT_END),
    ("EventPermissionRequest", "permission/request", PERMISSION_REQUEST),
    ("EventPermissionResolved", "permission/resolved", PERMISSION_RESOLVED),
)
"""Every agentkit event type (``agentkit/events.go``): Go constant, agentkit string,
agentsession type. All 27 have an agentsession type of the same string."""

AGENTSESSION_ONLY_TYPES: Final = (
    SESSION_FORK,
    SESSION_MERGE,
    SESSION_DISCARD,
    SESSION_LEASE,
    SESSION_DELIVERY,
    SESSION_ROLLBACK,
    SESSION_REWIND,
    SESSION_BRANCH,
)
"""agentsession's event types that agentkit has no equivalent of (child sessions, the turn
lock's fences, the inbox's deliveries, its rollback markers, rewinds and branch markers). In its
dialect they are written under the same type string, which agentkit keeps as it is and leaves
out of its derived history (so agentkit's history still holds a rolled-back or rewound
turn)."""

EVENT_TYPES: Final[Mapping[str, str]] = {ak: ours for _, ak, ours in EVENT_TYPE_TABLE}
"""agentkit event type string → agentsession event type."""

_TYPES_OUT: Final[Mapping[str, str]] = {ours: ak for _, ak, ours in EVENT_TYPE_TABLE}

MESSAGE_KEYS: Final[Mapping[str, str]] = {
    "Role": "role",
    "Content": "parts",
    "ToolCalls": "toolCalls",
    "ToolResults": "toolResults",
}
"""``agentkit.ModelMessage`` keys (untagged Go fields, in Go's order) → message keys."""

TOOL_CALL_KEYS: Final[Mapping[str, str]] = {"ID": "id", "Name": "name", "Input": "arguments"}
"""``agentkit.ToolCall`` keys → tool call keys (``Input`` is raw JSON, normally an object)."""

TOOL_RESULT_KEYS: Final[Mapping[str, str]] = {
    "ID": "callId",
    "Name": "name",
    "Content": "content",
    "Audit": "audit",
}
"""``agentkit.ToolResult`` keys → tool result keys."""

PART_KEYS: Final[tuple[str, ...]] = ("type", "text", "url", "mime", "detail", "source")
"""``agentkit.ContentPart`` keys in Go's order; all but ``type`` are ``omitempty``."""

PART_TYPES: Final[Mapping[str, str]] = {
    "text": "text",
    "": "text",
    "thinking": "thinking",
    "refusal": "refusal",  # agentsession's own (agentkit has none): kept through its dialect
    "image": "image",
    "image_url": "image",
    "file": "file",
    "document": "file",
    "audio": "file",
    "video": "file",
    "attachment_ref": "attachment_ref",
}
"""agentkit content part type → agentsession part type. Any other type becomes
``attachment_ref`` when it has a ``url`` or ``source`` and ``text`` otherwise; whenever the two
differ the agentkit type is kept in the part's ``agentkitType`` key."""

EXTENSION_KEYS: Final[Mapping[str, tuple[str, ...]]] = {
    "ModelMessage": ("name", "author"),
    "ContentPart": ("signature", "name", "data", "agentkitType"),
    "ToolCall": ("agentkitInput",),
    "ToolResult": ("isError", "agentkitContent"),
    "turn/end": ("error",),
    "usage": ("cacheReadTokens", "cacheWriteTokens"),
    "session/compaction": ("retainedTurnStarts", "inTurn", "retainedAgents"),
}
"""Keys that carry what one side cannot represent inside the other side's objects. agentkit's Go
decoder ignores them (none matches one of its field names, even case-insensitively);
agentsession's readers use the agentsession fields and ignore the ``agentkit*`` ones, which only
restore agentkit's original form on writing."""

_ZERO_MESSAGE: Final[Mapping[str, Any]] = {
    "Role": "",
    "Content": None,
    "ToolCalls": None,
    "ToolResults": None,
}

_Shape = tuple[tuple[str, bool, Any], ...]
_RETRY_START: Final[_Shape] = (
    ("attempt", True, 0),
    ("maxAttempts", True, 0),
    ("delayMs", True, 0),
    ("errorMessage", True, ""),
)
_RETRY_END: Final[_Shape] = (
    ("success", True, False),
    ("attempt", True, 0),
    ("finalError", False, None),
)

GO_PAYLOAD_SHAPES: Final[Mapping[str, _Shape]] = {
    TURN_START: (),
    TURN_END: (
        ("steps", True, 0),
        ("stopReason", False, None),
        ("stepLimit", False, None),
        ("cancelled", False, None),
        ("failed", False, None),
        ("message", False, None),
    ),
    STEP_START: (("step", True, 0),),
    STEP_END: (("step", True, 0),),
    COMPACTION: (
        ("beforeSeq", False, None),
        ("firstKeptSeq", False, None),
        ("retainedTail", False, None),
        ("tokensBefore", False, None),
        ("summary", True, _ZERO_MESSAGE),
        ("kind", True, "summary"),
    ),
    SKILL_LOAD: (
        ("name", True, ""),
        ("description", True, ""),
        ("body", True, ""),
        ("resourceBase", False, None),
        ("rendered", False, None),
    ),
    RETRY_START: _RETRY_START,
    RETRY_END: _RETRY_END,
    SUMMARIZATION_RETRY_START: _RETRY_START,
    SUMMARIZATION_RETRY_END: _RETRY_END,
    OVERFLOW_RECOVERY: (("applied", True, 0), ("reason", False, None), ("error", False, None)),
    TURN_CONTINUE: (
        ("segment", True, 0),
        ("reason", True, ""),
        ("steps", True, 0),
        ("messages", False, None),
    ),
    USAGE: (("inputTokens", True, 0), ("outputTokens", True, 0), ("totalTokens", True, 0)),
    TODO_UPDATE: (("items", True, None),),
    RUN_FINISH: (("status", True, ""), ("summary", False, None)),
    SESSION_RECOVERY: (
        ("turnStartSeq", True, 0),
        ("steps", True, 0),
        ("orphanResults", True, 0),
        ("closedStep", True, -1),
        ("reason", True, ""),
    ),
    SUBAGENT_START: (
        ("agent", True, ""),
        ("session", True, ""),
        ("task", True, ""),
        ("async", False, None),
        ("jobId", False, None),
    ),
    SUBAGENT_END: (
        ("agent", True, ""),
        ("session", True, ""),
        ("status", True, ""),
        ("summary", False, None),
        ("steps", True, 0),
        ("error", False, None),
        ("jobId", False, None),
    ),
}
"""The Go payload struct of each lifecycle type agentkit writes, as ``(key, always written,
value written when the agentsession payload leaves the key out)`` in Go's field order (Go tags
without ``omitempty`` are always written). From ``runtime/session/sessevents`` (lifecycle,
recovery, subagent), ``cap/session/types.go``, ``cap/compaction`` and ``derive/skill_render.go``.
Keys agentsession has beyond these are written after them."""


class AgentkitLineError(msgspec.DecodeError):
    """A line is not a valid agentkit event; the message says why (a ``ValueError``)."""


# ---------------------------------------------------------------------------------------------
# Detection.


def is_agentkit_line(line: bytes) -> bool:
    """Whether ``line`` is in agentkit's dialect: a constant-time test of its first six bytes.

    agentkit writes ``json.Marshal(SessionEvent)``, which always begins ``{"ID":``; an
    agentsession line always begins ``{"seq":``. Nothing after the prefix is looked at, so a
    line that passes may still fail to decode.
    """
    return line[:6] == AGENTKIT_LINE_PREFIX


# ---------------------------------------------------------------------------------------------
# Times.

_UTC = _dt.timezone.utc
_ZERO_INSTANT = _dt.datetime(1, 1, 1, tzinfo=_UTC)
_TIME = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(?:([Zz])|([+-])(\d\d):(\d\d))"
)


def _time_in(text: str) -> _dt.datetime | None:
    if text == ZERO_TIME:
        return None
    match = _TIME.fullmatch(text)
    if match is None:
        raise AgentkitLineError(f"CreatedAt {text!r} is not an RFC 3339 time")
    year, month, day, hour, minute, second = (int(g) for g in match.group(1, 2, 3, 4, 5, 6))
    micro = int((match.group(7) or "").ljust(6, "0")[:6])
    if match.group(8):
        zone = _UTC
    else:
        offset = _dt.timedelta(hours=int(match.group(10)), minutes=int(match.group(11)))
        zone = _dt.timezone(-offset if match.group(9) == "-" else offset)
    try:
        when = _dt.datetime(year, month, day, hour, minute, second, micro, zone).astimezone(_UTC)
    except (ValueError, OverflowError) as exc:
        raise AgentkitLineError(f"CreatedAt {text!r} is not a valid time: {exc}") from None
    return None if when == _ZERO_INSTANT else when


def _time_out(when: _dt.datetime | None) -> str:
    if when is None:
        return ZERO_TIME
    when = when.replace(tzinfo=_UTC) if when.tzinfo is None else when.astimezone(_UTC)
    text = (
        f"{when.year:04d}-{when.month:02d}-{when.day:02d}"
        f"T{when.hour:02d}:{when.minute:02d}:{when.second:02d}"
    )
    if when.microsecond:
        text += "." + f"{when.microsecond:06d}".rstrip("0")
    return text + "Z"


# ---------------------------------------------------------------------------------------------
# Go's string escaping.

_GO_ESCAPES: Final = (
    (b"<", b"\\u003c"),
    (b">", b"\\u003e"),
    (b"&", b"\\u0026"),
    ("\u2028".encode(), b"\\u2028"),
    ("\u2029".encode(), b"\\u2029"),
)


def _go_json(value: Any, *, sort_keys: bool = False) -> bytes:
    """Compact JSON of ``value`` escaped as Go's encoder escapes it. The escaped characters occur
    only inside JSON strings, and never as part of an escape sequence, so replacing the bytes is
    exact."""
    out = encode(value, sort_keys=sort_keys)
    for needle, escaped in _GO_ESCAPES:
        if needle in out:
            out = out.replace(needle, escaped)
    return out


# ---------------------------------------------------------------------------------------------
# Messages: agentkit → agentsession.


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise AgentkitLineError(f"{what} must be a JSON array or null, not {value!r:.60}")
    return value


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise AgentkitLineError(f"{what} must be a JSON object, not {value!r:.60}")
    return value


def _part_in(raw: Any) -> dict[str, Any]:
    part = _object(raw, "a content part")
    kind = part.get("type", "")
    if not isinstance(kind, str):
        raise AgentkitLineError(f"a content part's type must be a string, not {kind!r:.60}")
    ours = PART_TYPES.get(kind)
    if ours is None:
        ours = "attachment_ref" if part.get("url") or part.get("source") else "text"
    out: dict[str, Any] = {"type": ours}
    out.update((k, v) for k, v in part.items() if k != "type")
    if ours in ("text", "thinking") and "text" not in out:
        out["text"] = ""  # Go leaves an empty text out (omitempty); ours requires it
    if ours != kind:
        out["agentkitType"] = kind
    return out


def _call_in(raw: Any) -> dict[str, Any]:
    call = _object(raw, "a tool call")
    out: dict[str, Any] = {"id": call.get("ID", ""), "name": call.get("Name", "")}
    given = call.get("Input")
    if isinstance(given, dict):
        if given:
            out["arguments"] = given
    elif given is not None:
        out["agentkitInput"] = given
        if isinstance(given, str):
            try:
                parsed = decode(given) if given.strip() else None
            except ValueError:
                parsed = None
            if isinstance(parsed, dict) and parsed:
                out["arguments"] = parsed
    out.update((k, v) for k, v in call.items() if k not in TOOL_CALL_KEYS)
    return out


def _result_in(raw: Any) -> dict[str, Any]:
    result = _object(raw, "a tool result")
    out: dict[str, Any] = {"callId": result.get("ID", ""), "name": result.get("Name", "")}
    content = result.get("Content")
    if isinstance(content, list):
        out["content"] = "".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
        out["agentkitContent"] = content
    elif isinstance(content, (dict, int, float)):
        out["content"] = encode(content).decode()
        out["agentkitContent"] = content
    elif content is not None:
        out["content"] = content
    audit = result.get("Audit")
    if audit is not None:
        out["audit"] = audit
    out.update((k, v) for k, v in result.items() if k not in TOOL_RESULT_KEYS)
    return out


def _message_in(raw: Any) -> dict[str, Any]:
    msg = _object(raw, "a message")
    out: dict[str, Any] = {"role": msg.get("Role", "")}
    parts = [_part_in(p) for p in _list(msg.get("Content"), "Content")]
    calls = [_call_in(c) for c in _list(msg.get("ToolCalls"), "ToolCalls")]
    results = [_result_in(r) for r in _list(msg.get("ToolResults"), "ToolResults")]
    if parts:
        out["parts"] = parts
    if calls:
        out["toolCalls"] = calls
    if results:
        out["toolResults"] = results
    out.update((k, v) for k, v in msg.items() if k not in MESSAGE_KEYS)
    return out


def _is_zero_message(raw: Any) -> bool:
    """A Go zero ``ModelMessage`` (what agentkit writes for a marker without a summary)."""
    return isinstance(raw, dict) and all(k in MESSAGE_KEYS and not v for k, v in raw.items())


# ---------------------------------------------------------------------------------------------
# Messages: agentsession → agentkit.


def _part_out(raw: Any) -> Any:
    if not isinstance(raw, dict):
        return raw
    rest = dict(raw)
    kind = rest.pop("type", "")
    kind = rest.pop("agentkitType", kind)
    if raw.get("type") in ("image", "file") and rest.get("data") and not rest.get("url"):
        rest["url"] = f"data:{rest.get('mime', '')};base64,{rest.pop('data')}"
    out: dict[str, Any] = {"type": kind}
    for key in PART_KEYS[1:]:
        value = rest.pop(key, None)
        if value:
            out[key] = value
    out.update(rest)
    return out


def _call_out(raw: Any) -> Any:
    if not isinstance(raw, dict):
        return raw
    rest = dict(raw)
    out: dict[str, Any] = {"ID": rest.pop("id", ""), "Name": rest.pop("name", "")}
    arguments = rest.pop("arguments", None) or {}
    out["Input"] = rest.pop("agentkitInput") if "agentkitInput" in rest else arguments
    out.update(rest)
    return out


def _result_out(raw: Any) -> Any:
    if not isinstance(raw, dict):
        return raw
    rest = dict(raw)
    out: dict[str, Any] = {"ID": rest.pop("callId", ""), "Name": rest.pop("name", "")}
    content = rest.pop("content", "")
    out["Content"] = rest.pop("agentkitContent") if "agentkitContent" in rest else content
    out["Audit"] = rest.pop("audit", None) or None
    out.update(rest)
    return out


def _message_out(raw: Any) -> Any:
    if not isinstance(raw, dict):
        return raw
    rest = dict(raw)
    parts = [_part_out(p) for p in rest.pop("parts", None) or ()]
    calls = [_call_out(c) for c in rest.pop("toolCalls", None) or ()]
    results = [_result_out(r) for r in rest.pop("toolResults", None) or ()]
    out: dict[str, Any] = {
        "Role": rest.pop("role", ""),
        "Content": parts or None,
        "ToolCalls": calls or None,
        "ToolResults": results or None,
    }
    out.update(rest)
    return out


def _messages_out(raw: Any) -> Any:
    return [_message_out(m) for m in raw] if isinstance(raw, list) else raw


# ---------------------------------------------------------------------------------------------
# Payloads.

_NULL = b"null"


@functools.cache
def _field_names(struct_type: type[msgspec.Struct]) -> Mapping[str, str]:
    return {f.encode_name: f.name for f in msgspec.structs.fields(struct_type)}


@functools.cache
def _plain_defaults(struct_type: type[msgspec.Struct]) -> tuple[tuple[str, str, Any], ...]:
    """(encode name, attribute, default) of the fields ``struct_type`` leaves out at their
    default, for defaults that are plain values (not factories)."""
    if not struct_type.__struct_config__.omit_defaults:
        return ()
    return tuple(
        (f.encode_name, f.name, f.default)
        for f in msgspec.structs.fields(struct_type)
        if f.default is not msgspec.NODEFAULT
    )


def _with_extras(typed: Any, given: Any, canonical: Any) -> Any:
    """``canonical`` (``to_builtins`` of ``typed``) plus every key of ``given`` (the payload
    ``typed`` was built from) that ``typed``'s structs do not know, at every depth.

    msgspec leaves a field out at its default only when the value is the default object itself,
    so a decoded ``"kind": "summary"`` would stay; such keys are removed here, giving the form
    agentsession's encoder writes for a freshly built payload."""
    if isinstance(typed, msgspec.Struct) and isinstance(given, dict):
        for key, attr, default in _plain_defaults(type(typed)):
            if key in canonical and getattr(typed, attr) == default:
                del canonical[key]
        names = _field_names(type(typed))
        tag = typed.__struct_config__.tag_field
        for key, value in given.items():
            if key in names:
                if key in canonical:
                    canonical[key] = _with_extras(getattr(typed, names[key]), value, canonical[key])
            elif key != tag:
                canonical[key] = value
        return canonical
    if (
        isinstance(typed, list)
        and isinstance(given, list)
        and isinstance(canonical, list)
        and len(typed) == len(given) == len(canonical)
    ):
        return [_with_extras(t, g, c) for t, g, c in zip(typed, given, canonical, strict=True)]
    return canonical


def _payload_in(kind: str, obj: Any) -> Any:
    """agentkit's payload of ``kind`` in agentsession's shape (not yet validated)."""
    if kind in (USER_MESSAGE, ASSISTANT_MESSAGE):
        return _message_in(obj)
    if kind == TOOL_CALL:
        return _call_in(obj)
    if kind == TOOL_RESULT:
        return _result_in(obj)
    if kind not in GO_PAYLOAD_SHAPES:  # message/*, permission/*: agentsession's own shape
        return {} if obj is None else obj
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        return obj  # refused by validation with msgspec's message
    out = {k: v for k, v in obj.items() if v is not None}  # Go's nil slices, maps and raws
    if kind == COMPACTION:
        if "summary" in out:
            if _is_zero_message(out["summary"]):
                del out["summary"]
            else:
                out["summary"] = _message_in(out["summary"])
        if "retainedTail" in out:
            out["retainedTail"] = [_message_in(m) for m in _list(out["retainedTail"], "tail")]
    elif kind == TURN_CONTINUE and "messages" in out:
        out["messages"] = [_message_in(m) for m in _list(out["messages"], "messages")]
    elif kind == TURN_END and "error" in out and out.get("failed") is True:
        del out["failed"]  # written for agentkit's sake alongside our error object
    return out


def _data_in(kind: str, raw: bytes, seq: int) -> msgspec.Raw:
    try:
        obj = decode(raw)
    except ValueError as exc:
        raise AgentkitLineError(f"seq {seq} ({kind}): Data is not valid JSON: {exc}") from None
    payload_type = PAYLOAD_TYPES.get(kind)
    if payload_type is None:
        return msgspec.Raw(encode(obj))
    given = _payload_in(kind, obj)
    try:
        typed = msgspec.convert(given, payload_type)
    except (msgspec.ValidationError, UsageError, TypeError, ValueError) as exc:
        raise AgentkitLineError(
            f"seq {seq} ({kind}): the payload is not a valid {payload_type.__name__}: {exc}"
        ) from None
    return msgspec.Raw(encode(_with_extras(typed, given, msgspec.to_builtins(typed))))


def _payload_out(kind: str, obj: Any) -> Any:
    """agentsession's payload of ``kind`` in agentkit's shape."""
    if kind in (USER_MESSAGE, ASSISTANT_MESSAGE):
        return _message_out(obj)
    if kind == TOOL_CALL:
        return _call_out(obj)
    if kind == TOOL_RESULT:
        return _result_out(obj)
    shape = GO_PAYLOAD_SHAPES.get(kind)
    if shape is None or not isinstance(obj, dict):
        return obj
    rest = dict(obj)
    if kind == COMPACTION:
        if "summary" in rest:
            rest["summary"] = _message_out(rest["summary"])
        if "retainedTail" in rest:
            rest["retainedTail"] = _messages_out(rest["retainedTail"])
    elif kind == TURN_CONTINUE and "messages" in rest:
        rest["messages"] = _messages_out(rest["messages"])
    elif kind == TURN_END and "error" in rest:
        rest.setdefault("failed", True)
    out: dict[str, Any] = {}
    for key, always, absent in shape:
        if key in rest:
            out[key] = rest.pop(key)
        elif always:
            out[key] = absent
    out.update(rest)
    return out


# ---------------------------------------------------------------------------------------------
# Lines.


class _Line(msgspec.Struct, kw_only=True, gc=False):
    """One agentkit line as Go writes it (``agentkit.SessionEvent``)."""

    id: str = msgspec.field(default="", name="ID")
    seq: int = msgspec.field(name="Seq")
    session_id: str = msgspec.field(default="", name="SessionID")
    agent_id: str = msgspec.field(default="", name="AgentID")
    type: str = msgspec.field(name="Type")
    data: msgspec.Raw = msgspec.field(default=msgspec.Raw(_NULL), name="Data")
    created_at: str = msgspec.field(default=ZERO_TIME, name="CreatedAt")
    user_id: str = msgspec.field(default="", name="UserID")
    metadata: dict[str, Any] | None = None


_line_decoder = msgspec.json.Decoder(_Line)


def _decode_head(line: bytes | memoryview) -> _Line:
    try:
        return _line_decoder.decode(line)
    except msgspec.ValidationError as exc:
        raise AgentkitLineError(str(exc)) from None
    except msgspec.DecodeError:
        pass
    # msgspec refuses JSON escapes of lone surrogates; the standard library reads them.
    try:
        obj = _json.loads(bytes(line))
    except (ValueError, RecursionError):
        raise AgentkitLineError("JSON is malformed") from None
    if not isinstance(obj, dict):
        raise AgentkitLineError("not a JSON object")
    if "Data" in obj:
        obj["Data"] = msgspec.Raw(fallback_dumps(obj["Data"]))
    try:
        return msgspec.convert(obj, _Line)
    except msgspec.ValidationError as exc:
        raise AgentkitLineError(str(exc)) from None


def _type_in(kind: str) -> str:
    mapped = EVENT_TYPES.get(kind)
    if mapped is not None:
        return mapped
    return FOREIGN_TYPE_PREFIX + kind if check_event_type(kind) is not None else kind


def _type_out(kind: str) -> str:
    if kind.startswith(FOREIGN_TYPE_PREFIX):
        return kind[len(FOREIGN_TYPE_PREFIX) :]
    return _TYPES_OUT.get(kind, kind)


def decode_agentkit_line(line: bytes) -> Event:
    """The event of one agentkit JSONL line (without its newline).

    ``Seq``, ``AgentID``, ``UserID`` and ``metadata`` become ``seq``, ``agent``, ``user`` and
    ``meta``; the type maps through :data:`EVENT_TYPES`; Go's zero ``CreatedAt`` becomes
    ``time=None``; ``Data`` becomes agentsession's payload JSON for the type, valid for its
    struct in :data:`~agentsession.events.PAYLOAD_TYPES` (see the module docstring for the
    translation). Raises :class:`AgentkitLineError` (a :class:`msgspec.DecodeError`) saying why
    when the line is not a valid agentkit event.
    """
    head = _decode_head(line)
    if head.seq < 0:
        raise AgentkitLineError(f"Seq must not be negative, not {head.seq}")
    if not head.type:
        raise AgentkitLineError(f"seq {head.seq}: the event has no Type")
    kind = _type_in(head.type)
    data = _data_in(kind, bytes(head.data), head.seq)
    return Event(
        seq=head.seq,
        type=kind,
        agent=head.agent_id,
        user=head.user_id,
        time=_time_in(head.created_at),
        data=data,
        meta=head.metadata or {},
        id=head.id,
    )


def encode_agentkit_line(
    event: Event, session_id: str, *, max_line_bytes: int | None = AGENTKIT_MAX_LINE_BYTES
) -> bytes:
    """``event`` as a line of agentkit's JSONL dialect (no trailing newline).

    Go's ``SessionEvent`` fields in Go's order: ``ID`` (the event's id), ``Seq``, ``SessionID``
    (``session_id``), ``AgentID``, ``Type``, ``Data`` in agentkit's payload shape, ``CreatedAt``
    (the event's time, or Go's zero time when it has none), ``UserID``, and ``metadata`` with
    sorted keys when the event has meta. Strings are escaped as Go escapes them.

    Raises :class:`~agentsession.errors.UsageError` when the event's payload is not JSON, and
    when the line would be longer than ``max_line_bytes`` (by default
    :data:`AGENTKIT_MAX_LINE_BYTES`, beyond which agentkit could not open the session at all;
    ``None`` writes lines of any length).
    """
    raw = bytes(event.data)
    if raw == _NULL:
        data = _NULL
    else:
        try:
            obj = decode(raw)
        except ValueError as exc:
            raise UsageError(
                f"cannot write event seq {event.seq} ({event.type}): its payload is not JSON: {exc}"
            ) from None
        data = _go_json(_payload_out(event.type, obj))
    out = b"".join(
        (
            b'{"ID":',
            _go_json(event.id),
            b',"Seq":',
            str(event.seq).encode(),
            b',"SessionID":',
            _go_json(session_id),
            b',"AgentID":',
            _go_json(event.agent),
            b',"Type":',
            _go_json(_type_out(event.type)),
            b',"Data":',
            data,
            b',"CreatedAt":"',
            _time_out(event.time).encode(),
            b'","UserID":',
            _go_json(event.user),
        )
    )
    if event.meta:
        out += b',"metadata":' + _go_json(event.meta, sort_keys=True)
    out += b"}"
    if max_line_bytes is not None and len(out) > max_line_bytes:
        raise UsageError(
            f"event seq {event.seq} ({event.type}) takes {len(out)} bytes in agentkit's dialect; "
            f"agentkit cannot load a line longer than {max_line_bytes} bytes"
        )
    return out
