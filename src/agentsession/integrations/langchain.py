"""LangChain chat message history on an agentsession log (the ``langchain`` extra).

:class:`AgentSessionChatHistory` is a ``langchain_core.chat_history.BaseChatMessageHistory``,
so a LangChain agent (``create_agent``) keeps its conversation in any agentsession store: load
the history, run the agent on it plus the new message, add what the run produced::

    store = open_store("sessions/")
    history = AgentSessionChatHistory(session_id, store=store)
    before = history.messages
    result = agent.invoke({"messages": [*before, HumanMessage(text)]})
    history.add_messages(result["messages"][len(before):])

``RunnableWithMessageHistory`` (deprecated in langchain-core 1.x) takes it as its factory's
history as well.

**The events.** Every LangChain message becomes one of agentsession's typed events, so the
session's own ``messages()``, the providers' converters, the command line and compaction see
the conversation: ``HumanMessage`` a ``user/message``, ``SystemMessage`` a ``user/message``
whose message has role ``system`` (as the lango importer stores them; the derived history
keeps it in place as a system message), ``AIMessage`` an ``assistant/message`` (text, content
blocks as parts, ``tool_calls`` with ids and arguments) followed by a ``usage`` event when it
has ``usage_metadata``, ``ToolMessage`` a ``tool/result`` (``status="error"`` is
``is_error``). A ``ChatMessage`` with role ``user``/``human``, ``assistant``/``ai`` or
``system``/``developer`` is stored as that kind; one with another role and a
``FunctionMessage`` (a result without a call id, which no provider-valid history can pair)
become ``langchain/message`` events, application events that LangChain reads back and
agentsession's derived history leaves out. ``RemoveMessage`` is refused: it is an
instruction to LangGraph's reducer, not a message.

What the typed payload cannot carry (ids, ``additional_kwargs``, ``response_metadata``,
``usage_metadata``, ``artifact``, content blocks with no neutral part, a ``name`` of ``""``,
the class of a chunk or a ``ChatMessage``) is kept in the event's ``meta["langchain"]``, as
the fields that differ from the message the payload alone rebuilds, so that reading returns
messages equal (``==``) to those added. A value that JSON would change (bytes, a tuple, a
non-JSON object in ``artifact``) is refused with :class:`~agentsession.errors.UsageError`
rather than stored changed.

**Reading.** :attr:`AgentSessionChatHistory.messages` is the log as LangChain wrote it, in
order, from the latest compaction marker on: no interrupted stand-ins for unanswered calls
and no results left out, unlike the provider-valid ``session.messages()``. A marker is
honoured: its summary comes first, then the messages it kept, each rebuilt exactly when its
event is still found between the marker's ``first_kept_seq`` and the marker (otherwise from
its neutral form), then what follows. A rewind (``session.rewind``, ``retry``, ``edit``) is
honoured too: what it took out of the history is not read, and a history object that read
it before reads again.

**Clearing** deletes nothing: :meth:`~AgentSessionChatHistory.clear` appends a compaction
marker with no summary and nothing kept (kind ``prune``, ``meta["langchain"] ==
{"clear": True}``), appended only if the log still ends where the history last read it
(retried otherwise), so it clears exactly what was there, whichever process wrote it. Every
history object and ``session.messages()`` start after it; ``read()`` still returns the older
events.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import os
import threading
import weakref
from collections.abc import Generator, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeVar

import msgspec
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
    messages_from_dict,
)

from ..aio import AsyncSession, AsyncStore, open_async_store
from ..context import turn_id
from ..derive import live_events, render_skill, rewind_target
from ..errors import ConflictError, UsageError
from ..events import (
    ASSISTANT_MESSAGE,
    COMPACTION,
    SESSION_FORK,
    SESSION_REWIND,
    SKILL_LOAD,
    TOOL_RESULT,
    TURN_CONTINUE,
    TURN_END,
    TURN_START,
    USAGE,
    USER_MESSAGE,
    Compaction,
    Event,
    SessionFork,
    SkillLoad,
    TurnContinue,
    Usage,
    compaction_of,
    decode,
    encode,
)
from ..messages import (
    AttachmentRef,
    FilePart,
    ImagePart,
    Message,
    Part,
    RefusalPart,
    Role,
    TextPart,
    ThinkingPart,
    ToolCall,
    ToolResult,
)
from ..recorder import META_TURN_ID
from ..session import BaseSession
from ..store import BaseStore, open_store

if TYPE_CHECKING:
    from types import TracebackType

    from pydantic.fields import FieldInfo

__all__ = [
    "LANGCHAIN_MESSAGE",
    "META_KEY",
    "AgentSessionChatHistory",
    "events_for",
    "history_from_events",
]

log = logging.getLogger(__name__)

META_KEY: Final = "langchain"
"""The event meta key holding what LangChain needs beyond the typed payload (and marking the
markers :meth:`AgentSessionChatHistory.clear` writes)."""

LANGCHAIN_MESSAGE: Final = "langchain/message"
"""The event type of messages agentsession's history has no kind for (``FunctionMessage``, a
``ChatMessage`` with another role): the payload is ``message_to_dict(message)``."""

_CLEAR_RETRIES = 16
"""How often :meth:`AgentSessionChatHistory.clear` appends its marker conditionally before it
appends it after whatever other writers added meanwhile."""

_FIRST_SPAN = 512
"""How many events the first backward read looks at for the latest compaction marker (each
next read looks four times as far)."""

_ROLES: Final[Mapping[str, Role]] = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
    "system": "system",
    "developer": "system",
}
"""``ChatMessage`` roles stored as one of agentsession's own message roles."""

T = TypeVar("T")


# ---------------------------------------------------------------------------------------------
# LangChain content blocks and agentsession parts.


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _media(block: Mapping[str, Any]) -> tuple[str, str, str]:
    """``(url, base64 data, mime type)`` of an image or file block in any of LangChain's forms
    (v1 ``url``/``base64``, v0 ``source_type``, Anthropic's ``source``)."""
    source = block.get("source")
    if isinstance(source, Mapping):  # Anthropic's native block
        return _str(source.get("url")), _str(source.get("data")), _str(source.get("media_type"))
    data = _str(block.get("base64"))
    if not data and block.get("source_type") == "base64":
        data = _str(block.get("data"))
    return _str(block.get("url")), data, _str(block.get("mime_type"))


def _part(block: object) -> Part | None:
    """The neutral part of one content block; None for a block no part can hold."""
    if isinstance(block, str):
        return TextPart(block) if block else None
    if not isinstance(block, Mapping):
        return None
    kind = block.get("type")
    if kind == "text" and isinstance(block.get("text"), str):
        notes = block.get("annotations")
        if isinstance(notes, list) and all(isinstance(n, dict) for n in notes):
            return TextPart(block["text"], notes)
        return TextPart(block["text"])
    if kind == "image_url":
        image = block.get("image_url")
        if isinstance(image, Mapping):
            return ImagePart(url=_str(image.get("url")), detail=_str(image.get("detail")))
        return ImagePart(url=_str(image))
    if kind == "image":
        url, data, mime = _media(block)
        return ImagePart(url=url, data=data, mime=mime) if url or data else None
    if kind == "file":
        url, data, mime = _media(block)
        return FilePart(url=url, data=data, mime=mime) if url or data else None
    if kind == "thinking":
        text, signature = _str(block.get("thinking")), _str(block.get("signature"))
        return ThinkingPart(text, signature, provider="anthropic")
    if kind == "redacted_thinking":
        return ThinkingPart("", _str(block.get("data")), provider="anthropic", redacted=True)
    if kind == "reasoning":
        return ThinkingPart(_str(block.get("reasoning")), id=_str(block.get("id")))
    if kind == "refusal":
        return RefusalPart(_str(block.get("refusal")))
    return None


def _parts(content: str | list[str | dict[Any, Any]]) -> list[Part]:
    if isinstance(content, str):
        return [TextPart(content)] if content else []
    return [part for part in map(_part, content) if part is not None]


def _block(part: Part) -> dict[str, Any]:
    """The LangChain content block of one part: the OpenAI form for an image URL, standard
    v1 blocks otherwise."""
    if isinstance(part, TextPart):
        block: dict[str, Any] = {"type": "text", "text": part.text}
        if part.annotations:
            block["annotations"] = part.annotations
        return block
    if isinstance(part, ImagePart) and part.url:
        # The OpenAI form, the one most histories hold (also for data: URLs): so a message in
        # it is rebuilt from the payload alone and its image is not stored twice.
        image = {"url": part.url, "detail": part.detail} if part.detail else {"url": part.url}
        return {"type": "image_url", "image_url": image}
    if isinstance(part, (ImagePart, FilePart)):
        kind = "image" if isinstance(part, ImagePart) else "file"
        if part.url:
            return {"type": kind, "url": part.url}
        block = {"type": kind, "base64": part.data}
        if part.mime:
            block["mime_type"] = part.mime
        return block
    if isinstance(part, ThinkingPart):
        if part.redacted:
            return {"type": "redacted_thinking", "data": part.signature}
        if part.provider == "anthropic" or part.signature:
            return {"type": "thinking", "thinking": part.text, "signature": part.signature}
        block = {"type": "reasoning", "reasoning": part.text}
        if part.id:
            block["id"] = part.id
        return block
    if isinstance(part, RefusalPart):
        return {"type": "text", "text": part.text}
    assert isinstance(part, AttachmentRef)
    return {"type": "non_standard", "value": msgspec.to_builtins(part)}


def _content(parts: Sequence[Part]) -> str | list[str | dict[Any, Any]]:
    if not parts:
        return ""
    if len(parts) == 1 and isinstance(parts[0], TextPart) and not parts[0].annotations:
        return parts[0].text
    return [_block(part) for part in parts]


# ---------------------------------------------------------------------------------------------
# Messages to events.


def _tool_result(message: ToolMessage) -> ToolResult:
    parts = _parts(message.content)
    text = "".join(p.text for p in parts if isinstance(p, TextPart))
    return ToolResult(
        call_id=message.tool_call_id,
        name=message.name or "",
        content=text,
        is_error=message.status == "error",
        parts=[p for p in parts if not isinstance(p, TextPart)],
    )


def _neutral(message: BaseMessage) -> tuple[str, Message | ToolResult] | None:
    """The event type and typed payload of ``message``; None when agentsession's history has
    no kind for it (stored as a :data:`LANGCHAIN_MESSAGE`)."""
    if isinstance(message, ToolMessage):
        return TOOL_RESULT, _tool_result(message)
    if isinstance(message, AIMessage):
        calls = [
            ToolCall(call.get("id") or "", call["name"], call.get("args") or {})
            for call in message.tool_calls
        ]
        return ASSISTANT_MESSAGE, Message(
            role="assistant",
            parts=_parts(message.content),
            tool_calls=calls,
            name=message.name or "",
        )
    role: Role
    if isinstance(message, HumanMessage):
        role = "user"
    elif isinstance(message, SystemMessage):
        role = "system"
    elif isinstance(message, ChatMessage) and message.role.lower() in _ROLES:
        role = _ROLES[message.role.lower()]
    else:
        return None
    kind = ASSISTANT_MESSAGE if role == "assistant" else USER_MESSAGE
    return kind, Message(role=role, parts=_parts(message.content), name=message.name or "")


def _usage(message: AIMessage) -> Usage | None:
    usage = message.usage_metadata
    if not usage:
        return None

    def count(source: Mapping[str, Any] | None, key: str) -> int:
        value = (source or {}).get(key, 0)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    raw: Mapping[str, Any] = usage
    given = raw.get("input_token_details")
    details = given if isinstance(given, Mapping) else None
    produced = raw.get("output_token_details")
    output = produced if isinstance(produced, Mapping) else None
    return Usage(
        input_tokens=count(raw, "input_tokens"),
        output_tokens=count(raw, "output_tokens"),
        total_tokens=count(raw, "total_tokens"),
        cache_read_tokens=count(details, "cache_read"),
        cache_write_tokens=count(details, "cache_creation"),
        reasoning_tokens=count(output, "reasoning"),
    )


def _fields(message: BaseMessage) -> dict[str, Any]:
    """Every field of ``message`` by name, the extra ones (``extra="allow"``) included."""
    values = {name: getattr(message, name) for name in type(message).model_fields}
    if message.model_extra:
        values.update(message.model_extra)
    return values


def _differs_from_default(declared: Mapping[str, FieldInfo], name: str, value: object) -> bool:
    """Whether a field the rebuilt message's class lacks (a chunk's, a ``ChatMessage``'s role,
    an extra one) must be stored: not when it holds its class's default."""
    info = declared.get(name)
    return info is None or info.get_default(call_default_factory=True) != value


def _check_json(value: Any, message: BaseMessage, what: str) -> None:
    """Refuse a value that JSON cannot carry unchanged (it would read back different)."""
    try:
        same = decode(encode(value)) == value
    except (TypeError, ValueError, UsageError) as exc:
        raise UsageError(
            f"cannot store the {type(message).__name__} {what}: {exc} (agentsession keeps "
            "messages as JSON)"
        ) from None
    if not same:
        raise UsageError(
            f"cannot store the {type(message).__name__} {what}: it holds values JSON would "
            "change (bytes, tuples, non-string keys, NaN); agentsession keeps messages as JSON"
        )


def _extra(message: BaseMessage, payload: Message | ToolResult) -> dict[str, Any]:
    """What ``message`` has that the message rebuilt from ``payload`` alone lacks: the
    ``set`` fields (as LangChain dumps them) and the ``unset`` ones; empty when nothing."""
    if isinstance(payload, ToolResult):
        rebuilt = _build(_result_kwargs(payload))
    else:
        rebuilt = _build(_message_kwargs(payload)[0])
    mine, theirs = _fields(message), _fields(rebuilt)
    declared = type(message).model_fields
    changed = {
        name
        for name, value in mine.items()
        if (
            theirs[name] != value
            if name in theirs
            else _differs_from_default(declared, name, value)
        )
    }
    extra: dict[str, Any] = {}
    if changed:
        dumped = message.model_dump(include=changed)
        dumped.update({k: v for k, v in (message.model_extra or {}).items() if k in changed})
        _check_json(dumped, message, "fields " + ", ".join(sorted(changed)))
        extra["set"] = dumped
    unset = sorted(theirs.keys() - mine.keys())
    if unset:
        extra["unset"] = unset
    return extra


def events_for(messages: Iterable[BaseMessage], *, agent: str = "", user: str = "") -> list[Event]:
    """The events that record ``messages`` (what :meth:`AgentSessionChatHistory.add_messages`
    appends in one batch): one per message, plus a ``usage`` event after an ``AIMessage``
    with ``usage_metadata``. ``agent`` is stamped on every event, ``user`` on user messages;
    the context's turn id, when one is set, in ``meta["turn_id"]``.

    Raises :class:`~agentsession.errors.UsageError` for a ``RemoveMessage``, an object that is
    not a message, and a value JSON would not carry unchanged."""
    current = turn_id()
    stamp = {META_TURN_ID: current} if current else {}
    events: list[Event] = []
    for message in messages:
        if isinstance(message, RemoveMessage):
            raise UsageError(
                "a RemoveMessage is an instruction to LangGraph's add_messages reducer, not a "
                "message to keep; use clear() to start the history afresh"
            )
        if not isinstance(message, BaseMessage):
            raise UsageError(f"add_messages takes LangChain messages, not {type(message).__name__}")
        neutral = _neutral(message)
        if neutral is None:
            whole = message_to_dict(message)
            _check_json(whole, message, "message")
            events.append(Event.new(LANGCHAIN_MESSAGE, whole, agent=agent, meta=stamp or None))
            continue
        kind, payload = neutral
        try:
            data = msgspec.Raw(encode(payload))
        except TypeError as exc:
            raise UsageError(
                f"cannot store the {type(message).__name__}: {exc} (agentsession keeps messages "
                "as JSON)"
            ) from None
        meta: dict[str, Any] = dict(stamp)
        # Compared with the payload as it will read back, so what JSON changes in it (a tuple
        # in tool call arguments) is found, and refused unless the meta can carry it.
        extra = _extra(message, decode(data, type(payload)))
        if extra:
            meta[META_KEY] = extra
        is_user = kind == USER_MESSAGE and isinstance(payload, Message) and payload.role == "user"
        events.append(
            Event.new(kind, data, agent=agent, user=user if is_user else "", meta=meta or None)
        )
        if isinstance(message, AIMessage) and (usage := _usage(message)) is not None:
            events.append(Event.new(USAGE, usage, agent=agent, meta=stamp or None))
    return events


# ---------------------------------------------------------------------------------------------
# Events to messages.


def _message_kwargs(message: Message) -> list[dict[str, Any]]:
    """The constructor arguments (with ``type``) of the LangChain messages of one neutral
    message: one, or one per tool result."""
    if message.role == "tool":
        return [_result_kwargs(result) for result in message.tool_results]
    kwargs: dict[str, Any] = {
        "type": {"user": "human", "assistant": "ai", "system": "system"}[message.role],
        "content": _content(message.parts),
    }
    if message.name:
        kwargs["name"] = message.name
    if message.tool_calls:
        kwargs["tool_calls"] = [
            {"name": c.name, "args": c.arguments, "id": c.id, "type": "tool_call"}
            for c in message.tool_calls
        ]
    return [kwargs]


def _result_kwargs(result: ToolResult) -> dict[str, Any]:
    content: str | list[str | dict[Any, Any]] = result.content
    if result.parts:
        head: list[str | dict[Any, Any]] = (
            [{"type": "text", "text": result.content}] if result.content else []
        )
        content = head + [_block(part) for part in result.parts]
    kwargs: dict[str, Any] = {"type": "tool", "content": content, "tool_call_id": result.call_id}
    if result.name:
        kwargs["name"] = result.name
    if result.is_error:
        kwargs["status"] = "error"
    return kwargs


def _build(kwargs: dict[str, Any]) -> BaseMessage:
    return messages_from_dict([{"type": kwargs["type"], "data": kwargs}])[0]


def _with_extra(kwargs: dict[str, Any], extra: object) -> dict[str, Any]:
    if isinstance(extra, dict):
        fields = extra.get("set")
        if isinstance(fields, dict):
            kwargs.update(fields)
        for name in extra.get("unset") or ():
            kwargs.pop(name, None)
    return kwargs


def _payload(event: Event, type_: type[T]) -> T | None:
    try:
        return event.decode(type_)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
        log.warning(
            "left event seq %d (%s) out of the LangChain history: its payload is not a valid "
            "%s: %s",
            event.seq,
            event.type,
            type_.__name__,
            exc,
        )
        return None


def _from_neutral(messages: Iterable[Message]) -> list[BaseMessage]:
    return [_build(kwargs) for message in messages for kwargs in _message_kwargs(message)]


def _from_event(event: Event) -> list[BaseMessage]:
    """The LangChain messages one event holds (none for events that hold no message)."""
    kind = event.type
    kwargs: dict[str, Any]
    if kind in (USER_MESSAGE, ASSISTANT_MESSAGE):
        message = _payload(event, Message)
        if message is None:
            return []
        if message.role == "tool":
            return _from_neutral([message])
        kwargs = _message_kwargs(message)[0]
    elif kind == TOOL_RESULT:
        result = _payload(event, ToolResult)
        if result is None:
            return []
        kwargs = _result_kwargs(result)
    elif kind == LANGCHAIN_MESSAGE:
        try:
            return messages_from_dict([event.payload()])
        except (ValueError, TypeError, KeyError, msgspec.DecodeError) as exc:
            log.warning("left event seq %d out of the LangChain history: %s", event.seq, exc)
            return []
    elif kind == TURN_CONTINUE:
        cont = _payload(event, TurnContinue)
        return [] if cont is None else _from_neutral(cont.messages)
    elif kind == SESSION_FORK:
        fork = _payload(event, SessionFork)
        return [] if fork is None else _from_neutral(fork.messages)
    elif kind == SKILL_LOAD:
        skill = _payload(event, SkillLoad)
        return [] if skill is None else [HumanMessage(render_skill(skill))]
    else:
        return []
    if event.meta:
        kwargs = _with_extra(kwargs, event.meta.get(META_KEY))
    return [_build(kwargs)]


_MESSAGE_EVENTS = (USER_MESSAGE, ASSISTANT_MESSAGE, TOOL_RESULT)


def _seq_of(event: Event) -> int:
    return event.seq


def _passes(event: Event, agent: str | None) -> bool:
    return agent is None or not event.agent or event.agent == agent


def _item(event: Event) -> Message | ToolResult | None:
    """The neutral form a compaction marker keeps of a message event."""
    if event.type == TOOL_RESULT:
        return _payload(event, ToolResult)
    if event.type in (USER_MESSAGE, ASSISTANT_MESSAGE):
        return _payload(event, Message)
    return None


def _kept(data: Compaction, sources: Sequence[Event], agent: str | None) -> list[BaseMessage]:
    """The history a compaction marker starts: its summary, then the messages it kept.

    A kept message is rebuilt from its own event when that event is among ``sources`` (the
    events from the marker's ``first_kept_seq`` to the marker), found in order, so it keeps
    its LangChain fields; otherwise from its neutral form. ``langchain/message`` events among
    the sources after the first kept message stay in place. A stand-in result for a call that
    was never answered, found in no event, is left out, as it was before the compaction."""
    out = [] if data.summary is None else _from_neutral([data.summary])
    agents = data.retained_agents
    if len(agents) != len(data.retained_tail):
        agents = [""] * len(data.retained_tail)
    items: list[Message | ToolResult] = []
    for message, owner in zip(data.retained_tail, agents, strict=True):
        if agent is not None and owner and owner != agent:
            continue
        items.extend(message.tool_results if message.role == "tool" else [message])
    candidates = [
        (event, _item(event))
        for event in sources
        if _passes(event, agent) and event.type in (*_MESSAGE_EVENTS, LANGCHAIN_MESSAGE)
    ]
    position, matched = 0, False

    def own_events(until: int) -> list[BaseMessage]:
        found = candidates[position:until]
        return [m for e, _ in found if e.type == LANGCHAIN_MESSAGE for m in _from_event(e)]

    for item in items:
        index = next(
            (i for i in range(position, len(candidates)) if candidates[i][1] == item), None
        )
        if index is not None:
            if matched:
                out.extend(own_events(index))
            out.extend(_from_event(candidates[index][0]))
            position, matched = index + 1, True
        elif isinstance(item, ToolResult):
            if item.audit.get("decision") != "interrupted":
                out.append(_build(_result_kwargs(item)))
        else:
            out.extend(_from_neutral([item]))
    if matched:
        out.extend(own_events(len(candidates)))
    return out


# ---------------------------------------------------------------------------------------------
# The view: a pure state machine over events, driven by sync or async reads.


class _Read(NamedTuple):
    """A request to the driver: ``session.read(after, limit)``."""

    after: int
    limit: int | None


class _Latest(NamedTuple):
    """A request to the driver: ``session.latest_seq``."""


_Request = _Read | _Latest
_Steps = Generator[_Request, Any, T]


class _State(NamedTuple):
    """What a history object knows of its session: the messages, the seq they were read up
    to, and whether the log ends inside a turn (for the marker :meth:`clear` writes)."""

    messages: list[BaseMessage]
    last_seq: int
    in_turn: bool


def _window(latest: int, agent: str | None) -> _Steps[list[Event]]:
    """The events from the latest compaction marker that applies (all when there is none),
    read backwards in growing spans."""
    events: list[Event] = []
    end, span = latest, _FIRST_SPAN
    while end > 0:
        after = max(0, end - span)
        chunk: list[Event] = yield _Read(after, end - after)
        events[:0] = chunk
        for index in range(len(chunk) - 1, -1, -1):
            event = chunk[index]
            if event.type == COMPACTION and _passes(event, agent) and compaction_of(event):
                return events[index:]
        end, span = after, span * 4
    return events


def _refresh(state: _State | None, agent: str | None) -> _Steps[_State]:
    """``state`` brought up to date with the log (loaded from the window when None)."""
    if state is None:
        latest: int = yield _Latest()
        events = yield from _window(latest, agent)
        messages: list[BaseMessage] = []
        last, in_turn = 0, False
    else:
        events = yield _Read(state.last_seq, None)
        if not events:
            return state
        if any(e.type == SESSION_REWIND and _goes_back(e, state.last_seq) for e in events):
            return (yield from _refresh(None, agent))  # a rewind: read the history again
        messages, last, in_turn = list(state.messages), state.last_seq, state.in_turn
    stored_last = events[-1].seq if events else 0
    # What a rewind took out of the history is not read (the window starts at the latest
    # compaction, which no rewind goes back past).
    live = live_events(events)
    for event in live:
        if event.seq <= last:
            continue
        last = event.seq
        if not _passes(event, agent):
            continue
        kind = event.type
        if kind == COMPACTION:
            data = compaction_of(event)
            if data is None:
                continue
            if data.rebuilds_history:
                first = data.first_kept_seq
                sources: list[Event] = []
                if data.retained_tail and 0 < first < event.seq:
                    sources = yield _Read(first - 1, event.seq - first)
                messages = _kept(data, sources, agent)
            else:  # the legacy form: the summary, then every event after before_seq
                earlier: list[Event] = yield _Read(
                    data.before_seq, max(0, event.seq - data.before_seq - 1)
                )
                messages = [] if data.summary is None else _from_neutral([data.summary])
                for old in earlier:
                    if old.type != COMPACTION and _passes(old, agent):
                        messages.extend(_from_event(old))
            in_turn = data.in_turn
            continue
        if kind == TURN_START:
            in_turn = True
        elif kind == TURN_END:
            in_turn = False
        messages.extend(_from_event(event))
    return _State(messages, max(last, stored_last), in_turn)


def _goes_back(marker: Event, last: int) -> bool:
    """Whether a rewind marker takes out of the history something read up to ``last``."""
    target = rewind_target(marker)
    return target is not None and target < last


def history_from_events(events: Sequence[Event], agent: str | None = None) -> list[BaseMessage]:
    """The LangChain history of ``events`` (a whole log in seq order), as
    :attr:`AgentSessionChatHistory.messages` reads it: from the latest compaction marker that
    applies to ``agent`` (None: every agent), without interrupted stand-ins."""

    def read(after: int, limit: int | None) -> list[Event]:
        start = bisect.bisect_right(events, after, key=_seq_of)
        return list(events[start : None if limit is None else start + limit])

    steps = _refresh(None, agent)
    try:
        request = next(steps)
        while True:
            if isinstance(request, _Latest):
                request = steps.send(events[-1].seq if events else 0)
            else:
                request = steps.send(read(request.after, request.limit))
    except StopIteration as stop:
        state: _State = stop.value
        return state.messages


def _run(steps: _Steps[T], session: BaseSession) -> T:
    """Drive ``steps`` with the sync session's reads."""
    try:
        request = next(steps)
        while True:
            if isinstance(request, _Latest):
                request = steps.send(session.latest_seq)
            else:
                request = steps.send(session.read(request.after, request.limit))
    except StopIteration as stop:
        result: T = stop.value
        return result


async def _arun(steps: _Steps[T], session: AsyncSession) -> T:
    """Drive ``steps`` with the async session's reads."""
    try:
        request = next(steps)
        while True:
            if isinstance(request, _Latest):
                request = steps.send(await session.latest_seq())
            else:
                request = steps.send(await session.read(request.after, request.limit))
    except StopIteration as stop:
        result: T = stop.value
        return result


def _clear_marker(state: _State, agent: str) -> Event:
    """The marker that clears the history read into ``state``: no summary, nothing kept."""
    data = Compaction(first_kept_seq=state.last_seq + 1, in_turn=state.in_turn, kind="prune")
    return Event.new(COMPACTION, data, agent=agent, meta={META_KEY: {"clear": True}})


_cache: weakref.WeakKeyDictionary[BaseSession, dict[str | None, _State]] = (
    weakref.WeakKeyDictionary()
)
"""What the history objects of each session object have read, by agent filter: the history
objects ``RunnableWithMessageHistory`` makes for every call share it, so a call reads only the
events appended since the previous one."""
_cache_lock = threading.Lock()


# ---------------------------------------------------------------------------------------------
# The chat history.

StoreTarget = str | os.PathLike[str] | BaseStore | AsyncStore
"""What :class:`AgentSessionChatHistory` takes as its store."""


class AgentSessionChatHistory(BaseChatMessageHistory):
    """A LangChain chat message history kept in an agentsession session.

    ``store`` is an open store (a sync :class:`~agentsession.BaseStore` or an
    :class:`~agentsession.aio.AsyncStore`, shared and not closed by the history) or a URL or
    path that the history opens on first use (with ``store_options``) and closes in
    :meth:`close`/:meth:`aclose` (for one history in a script: a factory that opens a store
    per call opens a connection per call). The async methods go through ``agentsession.aio``
    (each call placed as that API places it: inline on the loop, in a worker thread or
    natively) when the store is an ``AsyncStore``, or a URL first used from async code (then
    opened with ``open_async_store``, and its sync store serves the sync methods); with a
    sync store they run the sync methods in a worker thread, as LangChain's default does.

    ``agent`` is stamped on every event and filters what is read (events of that agent and
    of none), as ``session.messages(agent=...)`` does; ``user`` is stamped on user messages.
    The history objects of one session object share what they read, so a new one (as
    ``RunnableWithMessageHistory`` makes for every call) reads only the events appended
    since; other writers' events (another process, a ``clear`` elsewhere) are seen on the
    next read.
    """

    def __init__(
        self,
        session_id: str,
        *,
        store: StoreTarget,
        agent: str = "",
        user: str = "",
        **store_options: Any,
    ) -> None:
        super().__init__()
        if not isinstance(session_id, str):
            raise UsageError(f"session_id must be a string, not {type(session_id).__name__}")
        if not isinstance(agent, str) or not isinstance(user, str):
            raise UsageError("agent and user must be strings")
        self.session_id = session_id
        """The agentsession session id."""
        self.agent = agent
        """The agent stamped on every event and filtering what is read ("" for none)."""
        self.user = user
        """The end-user id stamped on user messages."""
        self._target: str | os.PathLike[str] | None = None
        self._sync: BaseStore | None = None
        self._async: AsyncStore | None = None
        self._owned = False
        self._options = store_options
        if isinstance(store, AsyncStore):
            self._async, self._sync = store, store.sync
        elif isinstance(store, BaseStore):
            self._sync = store
        elif isinstance(store, (str, os.PathLike)):
            if isinstance(store, str) and store.strip().lower().startswith("memory:"):
                raise UsageError(
                    "store='memory:' would open a new, empty store for this history object "
                    "alone; open one with open_store('memory:') and pass the store itself"
                )
            self._target, self._owned = store, True
        else:
            raise UsageError(
                "store must be a URL, a path, a BaseStore or an AsyncStore, not "
                f"{type(store).__name__}"
            )
        if store_options and not self._owned:
            raise UsageError("store options apply only to a store given as a URL or a path")
        self._lock = threading.Lock()

    # -- the store ----------------------------------------------------------------------------

    @property
    def store(self) -> BaseStore:
        """The sync store (opened now when the history was given a URL)."""
        with self._lock:
            if self._sync is None:
                assert self._target is not None
                self._sync = open_store(self._target, **self._options)
            return self._sync

    @property
    def session(self) -> BaseSession:
        """The agentsession session (``store.get(session_id)``): its ``messages()`` is the
        provider-valid history of the same log."""
        return self.store.get(self.session_id)

    async def _async_store(self) -> AsyncStore | None:
        """The async store; None when the async methods run the sync ones in a thread."""
        if self._async is not None or self._target is None or self._sync is not None:
            return self._async
        opened = await open_async_store(self._target, **self._options)
        with self._lock:
            if self._async is None and self._sync is None:
                self._async, self._sync = opened, opened.sync
                return opened
        await opened.close()  # another task opened it first
        return self._async

    def close(self) -> None:
        """Close the store the history opened from a URL (a store given open is left open).
        In async code use :meth:`aclose`, which also stops an async store's worker threads."""
        with self._lock:
            owned = self._sync if self._owned else None
        if owned is not None:
            owned.close()

    async def aclose(self) -> None:
        """Close the store the history opened from a URL (a store given open is left open)."""
        with self._lock:
            if not self._owned:
                return
            store, sync = self._async, self._sync
        if store is not None:
            await store.close()
        elif sync is not None:
            await asyncio.to_thread(sync.close)

    def __enter__(self) -> AgentSessionChatHistory:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> AgentSessionChatHistory:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- reading ------------------------------------------------------------------------------

    def _read(self, session: BaseSession) -> _Steps[_State]:
        """Bring the session's cached history up to date (the steps a driver runs)."""
        agent = self.agent or None
        with _cache_lock:
            state = _cache.get(session, {}).get(agent)
        state = yield from _refresh(state, agent)
        with _cache_lock:  # keep it unless another call already kept a newer one
            kept = _cache.setdefault(session, {})
            newest = kept.get(agent)
            if newest is None or state.last_seq >= newest.last_seq:
                kept[agent] = newest = state
        return newest

    def _forget(self, session: BaseSession) -> None:
        with _cache_lock:
            _cache.get(session, {}).pop(self.agent or None, None)

    @property
    def messages(self) -> list[BaseMessage]:
        """The messages added, in order, from the latest clear or compaction on (a new list;
        the messages in it are shared with the session's cache: do not change them).

        Assigning a list replaces the history with it in one atomic append (a clear marker
        and the new messages)."""
        session = self.session
        return list(_run(self._read(session), session).messages)

    @messages.setter
    def messages(self, messages: Sequence[BaseMessage]) -> None:
        self._clear_with(events_for(messages, agent=self.agent, user=self.user))

    async def aget_messages(self) -> list[BaseMessage]:
        """The messages added, in order (:attr:`messages`, through ``agentsession.aio``)."""
        store = await self._async_store()
        if store is None:
            return await super().aget_messages()
        session = await store.get(self.session_id)
        return list((await _arun(self._read(session.sync), session)).messages)

    # -- writing ------------------------------------------------------------------------------

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages`` in one atomic batch (all or none; two processes adding at once
        lose nothing, and each batch stays whole). Raises
        :class:`~agentsession.errors.UsageError` for what cannot be stored (see the module
        docstring) before anything is written."""
        events = events_for(messages, agent=self.agent, user=self.user)
        if events:
            self.session.append_many(events)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """:meth:`add_messages`, through ``agentsession.aio``."""
        store = await self._async_store()
        if store is None:
            await super().aadd_messages(messages)
            return
        events = events_for(messages, agent=self.agent, user=self.user)
        if events:
            session = await store.get(self.session_id)
            await session.append_many(events)

    def clear(self) -> None:
        """Start the history afresh without deleting anything: append a compaction marker with
        no summary and nothing kept (see the module docstring)."""
        self._clear_with([])

    async def aclear(self) -> None:
        """:meth:`clear`, through ``agentsession.aio``."""
        store = await self._async_store()
        if store is None:
            await super().aclear()
            return
        session = await store.get(self.session_id)
        for attempt in range(_CLEAR_RETRIES):
            state = await _arun(self._read(session.sync), session)
            try:
                await session.append_many(
                    [_clear_marker(state, self.agent)], expect_seq=state.last_seq
                )
                return
            except ConflictError:
                if attempt:
                    self._forget(session.sync)
        await session.append_many([_clear_marker(state, self.agent)])

    def _clear_with(self, events: list[Event]) -> None:
        """Append a clear marker and ``events`` in one batch, conditional on the log ending
        where this history last read it (read again and retried when it does not)."""
        session = self.session
        for attempt in range(_CLEAR_RETRIES):
            state = _run(self._read(session), session)
            try:
                session.append_many(
                    [_clear_marker(state, self.agent), *events], expect_seq=state.last_seq
                )
                return
            except ConflictError:
                if attempt:
                    self._forget(session)  # perhaps the log was replaced: read it afresh
        # Other writers kept appending: clear after whatever they added by now.
        session.append_many([_clear_marker(state, self.agent), *events])

    def __repr__(self) -> str:
        where = self._sync.location if self._sync is not None else self._target
        return f"<AgentSessionChatHistory {self.session_id!r} at {where}>"
