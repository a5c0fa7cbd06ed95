"""The catalog of conversations and search over them: the records and the rules (no I/O).

A store keeps, beside each session's log, a **catalog row** (:class:`SessionInfo`'s fields:
title, tags, user, tenant, agents, status, counts and usage totals) and **search documents**
(one per message, tool call or tool result). Both are kept current as the store appends:
the append pipeline hands the backend a :class:`CatalogChange` made from the batch it stores
(:func:`change_of`, from the plaintext events, before they are sealed), and the backend applies
it in the append's transaction (SQL) or its index (JSONL's sidecar, memory's dict). Nothing is
ever computed by reading a log again, except when an index is rebuilt (``reindex``).

This module holds what every backend shares:

* the query records the store hands a catalog: :class:`ListQuery` (a :class:`Filter` made by
  :func:`parse_where`, an order, a keyset position), :class:`SearchQuery`,
  :class:`TotalsQuery`; the :class:`Page` the store returns and its opaque cursors;
* the change an append makes (:class:`CatalogChange`, with :class:`UsageRow` per day and agent
  and :class:`Document` per searchable event) and :func:`change_of`, which makes it;
* the reference implementation over rows in memory (:class:`CatalogRow`, :func:`apply_change`,
  :func:`select`, :func:`search_rows`, :func:`totals_of`): what the memory backend runs, and
  what the tests check the SQL backends against;
* words for search (:func:`words`) and prices (:class:`Price`, :func:`cost_of`).

On an encrypted store the index never holds plaintext: :class:`FieldSealer` (made from the
store key by :meth:`agentsession.crypto.KeyRing.field_sealer`) seals title, user, tenant and
tags deterministically (equal values match; what leaks is which sessions share a value) and
turns each word of a search document into a keyed blind token (equal words match; what leaks
is how often each token occurs in the store). ``docs/catalog.md`` says it in full.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal, Protocol, TypeVar

import msgspec

from .errors import UsageError
from .events import (
    ASSISTANT_MESSAGE,
    COMPACTION,
    SESSION_REWIND,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USAGE,
    USER_MESSAGE,
    Compaction,
    Event,
    SessionRewind,
    Usage,
)
from .messages import Message, TextPart, ToolCall, ToolResult

__all__ = [
    "GROUPS",
    "ORDERS",
    "STATUSES",
    "TITLE_CHARS",
    "CatalogChange",
    "CatalogRow",
    "Document",
    "FieldSealer",
    "Filter",
    "Group",
    "Hit",
    "ListQuery",
    "Order",
    "Page",
    "Price",
    "SearchQuery",
    "Status",
    "Totals",
    "TotalsQuery",
    "UsageRow",
    "UsageTotals",
    "add_usage",
    "apply_change",
    "change_of",
    "cost_of",
    "decode_cursor",
    "encode_cursor",
    "parse_where",
    "search_rows",
    "select",
    "snippet",
    "totals_of",
    "words",
]

T = TypeVar("T")

Status = Literal["live", "idle", "needs_recovery", "shredded", "archived"]
"""A session's state in the catalog: ``live`` (a turn is open and its turn lock is held),
``idle`` (no turn open), ``needs_recovery`` (a turn is open and nobody holds the lock: the
process running it is gone), ``shredded`` (``store.shred``), ``archived``."""

STATUSES: Final[tuple[str, ...]] = ("live", "idle", "needs_recovery", "shredded", "archived")
"""Every :data:`Status`."""

Order = Literal["updated", "created", "id"]
"""How :meth:`Store.list` orders a page: ``updated`` (the last append, newest first),
``created`` (the first event, newest first), ``id`` (ascending)."""

ORDERS: Final[tuple[str, ...]] = ("updated", "created", "id")
"""Every :data:`Order`."""

Group = Literal["tenant", "user", "agent", "day"]
"""What :meth:`Store.totals` groups usage by."""

GROUPS: Final[tuple[str, ...]] = ("tenant", "user", "agent", "day")
"""Every :data:`Group`."""

TITLE_CHARS: Final = 80
"""A title derived from the first user message keeps at most this many characters."""

OPEN: Final = "live"
"""The status a backend stores while a turn is open (``live`` or ``needs_recovery`` is decided
when listing, by whether the session's turn lock is held)."""

# -- records ------------------------------------------------------------------------------------


class UsageTotals(msgspec.Struct, frozen=True, kw_only=True):
    """Tokens (and cost) summed over usage events."""

    input_tokens: int = 0
    """Prompt tokens."""
    output_tokens: int = 0
    """Completion tokens."""
    cache_read_tokens: int = 0
    """Prompt tokens served from the provider's cache."""
    cache_write_tokens: int = 0
    """Prompt tokens written to the provider's cache."""
    cost: float = 0.0
    """Cost, in the unit of the prices set with ``store.set_prices`` (or carried by usage
    events); 0 when none is known."""

    def __add__(self, other: UsageTotals) -> UsageTotals:
        return UsageTotals(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            cost=self.cost + other.cost,
        )


NO_USAGE: Final = UsageTotals()


class Price(msgspec.Struct, frozen=True, kw_only=True):
    """What a model's tokens cost, per million (``store.set_prices({"model": Price(...)})``)."""

    input: float = 0.0
    """Per million prompt tokens (those not read from the cache)."""
    output: float = 0.0
    """Per million completion tokens."""
    cache_read: float = 0.0
    """Per million prompt tokens read from the cache."""
    cache_write: float = 0.0
    """Per million prompt tokens written to the cache."""


def cost_of(usage: Usage, price: Price) -> float:
    """What ``usage`` cost at ``price``: cache reads at their price, the rest of the prompt at
    the input price (``input_tokens`` includes cached tokens, as the providers report it)."""
    uncached = max(usage.input_tokens - usage.cache_read_tokens, 0)
    return (
        uncached * price.input
        + usage.output_tokens * price.output
        + usage.cache_read_tokens * price.cache_read
        + usage.cache_write_tokens * price.cache_write
    ) / 1_000_000


class UsageRow(msgspec.Struct, frozen=True, kw_only=True):
    """Usage of one session on one day (UTC) by one agent: what ``totals`` sums."""

    day: str
    """``YYYY-MM-DD`` (UTC) of the usage events."""
    agent: str = ""
    """The agent of the usage events (their envelope's ``agent``)."""
    calls: int = 0
    """Usage events (model calls)."""
    usage: UsageTotals = NO_USAGE
    """Their tokens and cost."""


class Document(msgspec.Struct, frozen=True, kw_only=True):
    """One searchable event: a message's text, a tool call's name and arguments, a tool
    result's name and content. On an encrypted store ``text`` is blind tokens, space
    separated (see :class:`FieldSealer`)."""

    seq: int
    """The event's seq."""
    role: str
    """``user``, ``assistant``, ``tool`` (a tool call or result) or ``system``."""
    text: str
    """What is searched (plaintext, or blind tokens)."""


class CatalogChange(msgspec.Struct, frozen=True, kw_only=True):
    """What one stored batch changes in its session's catalog row and search documents (made
    by :func:`change_of`; a backend applies it where it stores the batch)."""

    first_time: _dt.datetime | None = None
    """The batch's first event time: the row's ``created_at`` when it has none."""
    last_time: _dt.datetime | None = None
    """The batch's last event time: the row's ``updated_at``."""
    last_seq: int = 0
    """The batch's last seq."""
    first_seq: int = 0
    """The batch's first seq (0: not known)."""
    shared: int = 0
    """For a branch's change: the length of the history it shares with its origin (its fork
    point). The change's seqs are those its reader presents; minus ``shared`` they are its own
    storage's, which a backend that keeps the catalog's seqs beside its log compares."""
    events: int = 0
    """Events in the batch."""
    messages: int = 0
    """User and assistant messages in the batch (added)."""
    turns: int = 0
    """Turns started in the batch (added)."""
    usage: UsageTotals = NO_USAGE
    """Usage in the batch (added to the row's totals)."""
    usage_rows: tuple[UsageRow, ...] = ()
    """The same usage by day and agent (added to the store's usage rows)."""
    agents: tuple[str, ...] = ()
    """Agents of the batch's events (added to the row's set)."""
    user: str = ""
    """The first user named by the batch's events: the row's ``user`` when it has none
    (sealed on an encrypted store)."""
    title: str = ""
    """A title from the batch's first user message: the row's ``title`` when it has none
    (sealed on an encrypted store)."""
    status: str | None = None
    """``live`` when the batch leaves a turn open, ``idle`` when it closes one, None when it
    changes nothing."""
    compacted_before: int = 0
    """A compaction marker in the batch: events before this seq are compacted away (the row
    keeps the highest)."""
    rewound: tuple[tuple[int, int], ...] = ()
    """Rewind markers in the batch, as ``(to_seq, marker_seq)``: documents with a seq between
    are flagged ``rewound``."""
    documents: tuple[Document, ...] = ()
    """The batch's searchable events (empty when the store is not searchable)."""


class CatalogRow(msgspec.Struct, kw_only=True):
    """A session's catalog row as a backend keeps it (mutable; the reference implementation's
    row, and what a backend's query returns to the store, which makes the
    :class:`~agentsession.contract.SessionInfo`)."""

    id: str
    """The session id."""
    created_at: _dt.datetime | None = None
    """Time of the first event."""
    updated_at: _dt.datetime | None = None
    """Time of the last append."""
    last_seq: int = 0
    """Highest seq."""
    size: int = 0
    """Bytes in storage, where the backend knows it."""
    title: str = ""
    """The title (set by ``session.update(title=...)``, else from the first user message)."""
    title_set: bool = False
    """Whether ``title`` was set by ``update`` (a derived title never replaces it)."""
    tags: list[str] = []
    """Tags (set by ``session.update(tags=...)``)."""
    user: str = ""
    """The user (``update(user=...)``, else the first event naming one)."""
    tenant: str = ""
    """The tenant (``update(tenant=...)``)."""
    agents: list[str] = []
    """Agents seen, in order of first appearance."""
    status: str = "idle"
    """``live`` (a turn open), ``idle``, ``shredded``, ``archived``."""
    messages: int = 0
    """User and assistant messages."""
    turns: int = 0
    """Turns started."""
    usage: UsageTotals = NO_USAGE
    """Usage totals."""
    compacted_before: int = 0
    """Events before this seq are compacted away."""


class Filter(msgspec.Struct, frozen=True, kw_only=True):
    """A checked ``where`` (:func:`parse_where`): every field set must hold (None: any)."""

    prefix: str | None = None
    """Ids starting with this."""
    ids: tuple[str, ...] | None = None
    """One of these ids."""
    user: tuple[str, ...] | None = None
    """One of these users (sealed on an encrypted store)."""
    tenant: tuple[str, ...] | None = None
    """One of these tenants (sealed on an encrypted store)."""
    agent: tuple[str, ...] | None = None
    """Any of these agents among the session's."""
    tags: tuple[str, ...] | None = None
    """Every one of these tags (sealed on an encrypted store)."""
    status: tuple[str, ...] | None = None
    """One of these stored statuses (``live`` stands for ``live`` and ``needs_recovery``,
    which the store tells apart)."""
    updated: tuple[_dt.datetime | None, _dt.datetime | None] | None = None
    """``(after, before)``: ``after <= updated_at < before`` (None: open)."""
    created: tuple[_dt.datetime | None, _dt.datetime | None] | None = None
    """``(after, before)`` on ``created_at``."""
    title: str | None = None
    """The title contains this (case-insensitive; plaintext stores only)."""

    def seal(self, sealer: FieldSealer) -> Filter:
        """This filter with its user, tenant and tag values sealed as an encrypted store's
        catalog keeps them."""
        if self.title is not None:
            raise UsageError(
                "where={'title': ...} needs the titles in clear: an encrypted store keeps them "
                "sealed (search with store.search instead)"
            )

        def sealed(values: tuple[str, ...] | None) -> tuple[str, ...] | None:
            return None if values is None else tuple(sealer.seal_field(v) for v in values)

        return msgspec.structs.replace(
            self, user=sealed(self.user), tenant=sealed(self.tenant), tags=sealed(self.tags)
        )


class ListQuery(msgspec.Struct, frozen=True, kw_only=True):
    """What ``store.list`` asks a catalog for: rows matching ``where``, in ``order``, after the
    keyset position ``after`` (exclusive), at most ``limit``."""

    where: Filter = Filter()
    """The filter."""
    order: str = "updated"
    """An :data:`Order`."""
    after: tuple[Any, str] | None = None
    """The last row of the previous page as ``(order value, id)``; the order value is a
    datetime (None sorts oldest) for ``updated``/``created``, the id for ``id``."""
    limit: int | None = 50
    """Rows at most (None: all)."""


class SearchQuery(msgspec.Struct, frozen=True, kw_only=True):
    """What ``store.search`` asks a catalog for."""

    terms: tuple[str, ...]
    """The query's words, normalised (:func:`words`) or, on an encrypted store, blind tokens;
    every one must occur in a document."""
    text: str = ""
    """The query as the caller wrote it (for a backend's own highlighter)."""
    where: Filter = Filter()
    """Only in sessions matching this."""
    session_id: str | None = None
    """Only in this session."""
    after: tuple[float, str, int] | None = None
    """The last hit of the previous page as ``(rank, session id, seq)``."""
    limit: int = 20
    """Hits at most."""
    blind: bool = False
    """The terms are blind tokens (no snippet can be made from the index)."""


class TotalsQuery(msgspec.Struct, frozen=True, kw_only=True):
    """What ``store.totals`` asks a catalog for."""

    where: Filter = Filter()
    """Only sessions matching this."""
    group_by: str = "tenant"
    """A :data:`Group`."""
    since: _dt.date | None = None
    """Usage on this day or later (UTC)."""
    until: _dt.date | None = None
    """Usage before this day (UTC)."""


class Hit(msgspec.Struct, frozen=True, kw_only=True):
    """One search result: an event whose text holds every word of the query."""

    session_id: str
    """The session."""
    seq: int
    """The event's seq."""
    role: str
    """``user``, ``assistant``, ``tool`` or ``system``."""
    snippet: str = ""
    """The text around the first match, with matches in ``[`` ``]``."""
    rank: float = 0.0
    """Relevance (higher is better; comparable within one search)."""
    rewound: bool = False
    """A rewind written after the event went back past it (it took no part in the history
    since; a later rewind may have brought it back)."""
    compacted: bool = False
    """The event is before the session's latest compaction (the model sees its summary)."""


class Totals(msgspec.Struct, frozen=True, kw_only=True):
    """Usage summed over a group (``store.totals``)."""

    key: str
    """The group's tenant, user, agent or day (``""``: none set)."""
    sessions: int = 0
    """Sessions with usage in the group."""
    calls: int = 0
    """Usage events."""
    usage: UsageTotals = NO_USAGE
    """Tokens and cost."""


class Page(list[T]):
    """One page of results (a list), and the cursor of the next (None: this was the last):
    pass ``cursor=page.next_cursor`` for the next page."""

    __slots__ = ("next_cursor",)

    def __init__(self, items: Iterable[T] = (), next_cursor: str | None = None) -> None:
        super().__init__(items)
        self.next_cursor = next_cursor

    @property
    def items(self) -> list[T]:
        """The results, as a plain list."""
        return list(self)

    def __repr__(self) -> str:
        return f"Page({list.__repr__(self)}, next_cursor={self.next_cursor!r})"


# -- where ---------------------------------------------------------------------------------------

_SET_FIELDS: Final = ("user", "tenant", "agent", "status", "id")
_TIME_FIELDS: Final = ("updated", "created", "updated_at", "created_at")


def _strings(name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple, set, frozenset)):
        values = tuple(sorted(value)) if isinstance(value, (set, frozenset)) else tuple(value)
        if not values:
            raise UsageError(f"where={{{name!r}: ...}}: an empty set matches nothing")
        for item in values:
            if not isinstance(item, str):
                raise UsageError(
                    f"where={{{name!r}: ...}} takes strings, not {type(item).__name__}"
                )
        return values
    raise UsageError(
        f"where={{{name!r}: ...}} takes a string or a list/set of strings, "
        f"not {type(value).__name__}"
    )


def _instant(name: str, value: object) -> _dt.datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = _dt.datetime.fromisoformat(value)
        except ValueError:
            raise UsageError(
                f"where={{{name!r}: ...}}: {value!r} is not an ISO 8601 time"
            ) from None
    if isinstance(value, _dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=_dt.timezone.utc)
    if isinstance(value, _dt.date):
        return _dt.datetime(value.year, value.month, value.day, tzinfo=_dt.timezone.utc)
    raise UsageError(
        f"where={{{name!r}: ...}} takes (after, before) as datetimes, dates or ISO strings, "
        f"not {type(value).__name__}"
    )


def _range(name: str, value: object) -> tuple[_dt.datetime | None, _dt.datetime | None]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise UsageError(
            f"where={{{name!r}: ...}} takes a pair (after, before); None leaves a side open"
        )
    return _instant(name, value[0]), _instant(name, value[1])


def parse_where(where: Mapping[str, object] | None, prefix: str | None = None) -> Filter:
    """``where`` checked (:class:`~agentsession.errors.UsageError` naming the problem).

    Keys: ``user``, ``tenant``, ``agent``, ``status``, ``id`` (a value or a list/set of
    values: any of them), ``tag`` or ``tags`` (a tag or a list: every one), ``updated`` and
    ``created`` (``(after, before)``, datetimes, dates or ISO strings, None for an open side),
    ``title`` (contained, case-insensitive)."""
    if where is None:
        where = {}
    if not isinstance(where, Mapping):
        raise UsageError(f"where must be a mapping of field to value, not {type(where).__name__}")
    fields: dict[str, Any] = {}
    if prefix is not None:
        if not isinstance(prefix, str):
            raise UsageError(f"prefix must be a string, not {type(prefix).__name__}")
        fields["prefix"] = prefix
    for name, value in where.items():
        if name in _SET_FIELDS:
            values = _strings(name, value)
            if name == "status":
                unknown = [v for v in values if v not in STATUSES]
                if unknown:
                    raise UsageError(
                        f"where={{'status': ...}}: unknown status {unknown[0]!r} "
                        f"(one of {', '.join(STATUSES)})"
                    )
            fields["ids" if name == "id" else name] = values
        elif name in ("tag", "tags"):
            fields["tags"] = tuple(dict.fromkeys(_strings(name, value)))
        elif name in _TIME_FIELDS:
            fields[name.removesuffix("_at")] = _range(name, value)
        elif name == "title":
            if not isinstance(value, str):
                raise UsageError(
                    f"where={{'title': ...}} takes a string, not {type(value).__name__}"
                )
            fields["title"] = value
        elif name == "prefix":
            if not isinstance(value, str):
                raise UsageError(
                    f"where={{'prefix': ...}} takes a string, not {type(value).__name__}"
                )
            fields["prefix"] = value
        else:
            raise UsageError(
                f"where: unknown field {name!r} (fields: user, tenant, agent, status, id, tag, "
                "tags, updated, created, title, prefix)"
            )
    return Filter(**fields)


# -- cursors -------------------------------------------------------------------------------------


def encode_cursor(kind: str, key: Sequence[Any]) -> str:
    """An opaque cursor for the keyset position ``key`` of a listing or search ``kind``."""
    parts = [v.isoformat() if isinstance(v, _dt.datetime) else v for v in key]
    raw = msgspec.json.encode([kind, *parts])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, kind: str) -> list[Any]:
    """The keyset position in a cursor of ``kind``; a cursor of another listing, order or
    search, or not one at all, is a :class:`~agentsession.errors.UsageError`."""
    if not isinstance(cursor, str):
        raise UsageError(f"cursor must be a string, not {type(cursor).__name__}")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        decoded = msgspec.json.decode(raw)
    except (ValueError, binascii.Error, msgspec.DecodeError):
        raise UsageError("cursor is not one this store made (pass page.next_cursor)") from None
    if not isinstance(decoded, list) or not decoded or decoded[0] != kind:
        raise UsageError(
            f"cursor was made for another listing or order ({kind} expected): pass the "
            "next_cursor of a page made with the same arguments"
        )
    return decoded[1:]


def time_of(value: object) -> _dt.datetime | None:
    """A cursor's time (None stays None)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise UsageError("cursor is not one this store made (pass page.next_cursor)")
    return _dt.datetime.fromisoformat(value)


# -- words ---------------------------------------------------------------------------------------

_WORD: Final = re.compile(r"\w+")
_ASCII_WORD: Final = re.compile(r"[A-Za-z0-9_]+")


def words(text: str) -> list[str]:
    """The words of ``text`` as search compares them: Unicode-normalised (NFKC), case-folded,
    accents removed, split on anything not a letter, digit or ``_``."""
    if text.isascii():
        # Normalising and removing accents change nothing in ASCII, and case-folding is
        # lower(): the same words, without a pass over every character in Python.
        return _ASCII_WORD.findall(text.lower())
    folded = unicodedata.normalize("NFKD", text.casefold())
    bare = "".join(c for c in folded if not unicodedata.combining(c))
    return _WORD.findall(unicodedata.normalize("NFKC", bare))


def snippet(text: str, terms: Sequence[str], width: int = 160) -> str:
    """A piece of ``text`` around the first word among ``terms`` (normalised words), at most
    about ``width`` characters, with every matching word in ``[`` ``]``."""
    wanted = set(terms)
    matches = [m for m in _WORD.finditer(text) if _norm(m.group()) in wanted]
    if not matches:
        return text[:width] + ("…" if len(text) > width else "")
    start = max(matches[0].start() - width // 3, 0)
    end = min(start + width, len(text))
    out: list[str] = ["…" if start else ""]
    pos = start
    for m in matches:
        if m.start() < start or m.end() > end:
            continue
        out += [text[pos : m.start()], "[", m.group(), "]"]
        pos = m.end()
    out.append(text[pos:end])
    if end < len(text):
        out.append("…")
    return "".join(out).replace("\n", " ")


def _norm(word: str) -> str:
    found = words(word)
    return found[0] if len(found) == 1 else word.casefold()


class FieldSealer(Protocol):
    """What an encrypted store's catalog uses to keep its fields and words unreadable
    (:meth:`agentsession.crypto.KeyRing.field_sealer`)."""

    def seal_field(self, value: str) -> str:
        """``value`` sealed deterministically (equal values give equal text)."""
        ...

    def open_field(self, sealed: str) -> str:
        """The value :meth:`seal_field` sealed."""
        ...

    def blind(self, word: str) -> str:
        """A keyed token for a normalised word (equal words, equal tokens)."""
        ...


# -- what an append changes ----------------------------------------------------------------------

_ROLES: Final = {USER_MESSAGE: "user", ASSISTANT_MESSAGE: "assistant"}
_message_decoder: Final = msgspec.json.Decoder(Message)
_usage_decoder: Final = msgspec.json.Decoder(Usage)
_call_decoder: Final = msgspec.json.Decoder(ToolCall)
_result_decoder: Final = msgspec.json.Decoder(ToolResult)


def _json_text(value: object) -> str:
    """Arguments as searchable text: the values' words, and the keys'."""
    return msgspec.json.encode(value).decode() if value else ""


def _call_text(call: ToolCall) -> str:
    return f"{call.name} {_json_text(call.arguments)}".strip()


def _result_text(result: ToolResult) -> str:
    texts = [result.name, result.content]
    texts += [p.text for p in result.parts if isinstance(p, TextPart)]
    return " ".join(t for t in texts if t)


def message_text(message: Message) -> str:
    """A message's searchable text: its text parts, its tool calls' names and arguments, its
    tool results."""
    parts = message.parts
    if len(parts) == 1 and not message.tool_calls and not message.tool_results:
        only = parts[0]  # the common case: one text part
        return only.text if isinstance(only, TextPart) else ""
    texts = [p.text for p in parts if isinstance(p, TextPart)]
    texts += [_call_text(c) for c in message.tool_calls]
    texts += [_result_text(r) for r in message.tool_results]
    return "\n".join(t for t in texts if t)


def _title_of(text: str) -> str:
    """A title from a user message's text: whitespace folded, at most :data:`TITLE_CHARS`
    characters, cut at a word with ``…``."""
    if len(text) > TITLE_CHARS or "  " in text or not text.isprintable():
        text = " ".join(text[: TITLE_CHARS * 8].split())
    if len(text) <= TITLE_CHARS:
        return text
    cut = text[: TITLE_CHARS - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > TITLE_CHARS // 2 else cut).rstrip() + "…"


def _day(time: _dt.datetime | None) -> str:
    if time is None:
        return ""
    if time.tzinfo is not None:
        time = time.astimezone(_dt.timezone.utc)
    return time.date().isoformat()


_TEXT_TYPES: Final = frozenset((USER_MESSAGE, ASSISTANT_MESSAGE, TOOL_CALL, TOOL_RESULT))


def _text_of(event: Event, searchable: bool) -> tuple[str, str, str]:
    """``(role, searchable text, title)`` of a message, tool call or tool result event (the
    text only when ``searchable``; a title only for a user message)."""
    kind = event.type
    if kind in _ROLES:
        message = _message_decoder.decode(event.data)
        role = message.role if message.role in ("system", "tool") else _ROLES[kind]
        text = message_text(message)
        if kind != USER_MESSAGE or message.role != "user":
            return role, text if searchable else "", ""
        if len(message.parts) != 1:  # the title is the text parts' only
            title = _title_of(" ".join(p.text for p in message.parts if isinstance(p, TextPart)))
        else:
            title = _title_of(text)
        return role, text if searchable else "", title
    if not searchable:
        return "tool", "", ""
    if kind == TOOL_CALL:
        return "tool", _call_text(_call_decoder.decode(event.data)), ""
    return "tool", _result_text(_result_decoder.decode(event.data)), ""


def _usage_of(event: Event, prices: Mapping[str, Price] | None) -> UsageTotals:
    """A usage event's tokens, and its cost (its own, else from ``prices``)."""
    used = _usage_decoder.decode(event.data)
    cost = used.cost
    if cost is None and prices:
        price = prices.get(used.model) or prices.get("*")
        cost = cost_of(used, price) if price is not None else None
    return UsageTotals(
        input_tokens=used.input_tokens,
        output_tokens=used.output_tokens,
        cache_read_tokens=used.cache_read_tokens,
        cache_write_tokens=used.cache_write_tokens,
        cost=cost or 0.0,
    )


def change_of(
    stored: Sequence[Event],
    *,
    prices: Mapping[str, Price] | None = None,
    searchable: bool = True,
    sealer: FieldSealer | None = None,
) -> CatalogChange:
    """What the stored batch ``stored`` (plaintext, with seqs) changes in its session's
    catalog row and search documents.

    ``prices`` (model → :class:`Price`; ``"*"`` for any model) give a usage event without a
    ``cost`` its cost (a usage event's ``model``, or ``"*"``). ``searchable``: make the
    documents. ``sealer``: seal the user and title and blind the documents' words (an
    encrypted store)."""
    messages = turns = 0
    usage = NO_USAGE
    by_day: dict[tuple[str, str], list[Any]] = {}
    agents: list[str] = []
    user = title = ""
    status: str | None = None
    compacted = 0
    rewound: list[tuple[int, int]] = []
    documents: list[Document] = []
    for event in stored:
        kind = event.type
        if event.agent and event.agent not in agents:
            agents.append(event.agent)
        if event.user and not user:
            user = event.user
        if kind in _ROLES:
            messages += 1
        elif kind == TURN_START:
            turns += 1
            status = OPEN
        elif kind == TURN_END:
            status = "idle"
        try:
            if kind in _TEXT_TYPES and (searchable or (kind == USER_MESSAGE and not title)):
                # (without documents only a title is read: the first user message's)
                role, text, first_title = _text_of(event, searchable)
                if first_title and not title:
                    title = first_title
                if text:
                    if sealer is not None:
                        text = " ".join(sealer.blind(w) for w in words(text))
                    documents.append(Document(seq=event.seq, role=role, text=text))
            elif kind == USAGE:
                totals = _usage_of(event, prices)
                usage = usage + totals
                row = by_day.setdefault((_day(event.time), event.agent), [0, NO_USAGE])
                row[0] += 1
                row[1] = row[1] + totals
            elif kind == COMPACTION:
                marker = event.decode(Compaction)
                first = marker.first_kept_seq or (marker.before_seq + 1 if marker.before_seq else 0)
                compacted = max(compacted, first or event.seq)
            elif kind == SESSION_REWIND:
                rewound.append((event.decode(SessionRewind).to_seq, event.seq))
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeError):
            pass  # a payload this version cannot read: counted above, not indexed
    if sealer is not None:
        user = sealer.seal_field(user) if user else ""
        title = sealer.seal_field(title) if title else ""
    return CatalogChange(
        first_time=stored[0].time if stored else None,
        last_time=stored[-1].time if stored else None,
        last_seq=stored[-1].seq if stored else 0,
        first_seq=stored[0].seq if stored else 0,
        events=len(stored),
        messages=messages,
        turns=turns,
        usage=usage,
        usage_rows=tuple(
            UsageRow(day=day, agent=agent, calls=calls, usage=totals)
            for (day, agent), (calls, totals) in by_day.items()
        ),
        agents=tuple(agents),
        user=user,
        title=title,
        status=status,
        compacted_before=compacted,
        rewound=tuple(rewound),
        documents=tuple(documents),
    )


# -- the reference implementation ----------------------------------------------------------------


def apply_change(row: CatalogRow | None, session_id: str, change: CatalogChange) -> CatalogRow:
    """``row`` (None: a new session) with ``change`` applied, as every backend applies it."""
    if row is None:
        row = CatalogRow(id=session_id)
    if row.created_at is None:
        row.created_at = change.first_time
    if change.last_time is not None:
        row.updated_at = change.last_time
    row.last_seq = max(row.last_seq, change.last_seq)
    row.messages += change.messages
    row.turns += change.turns
    if change.usage is not NO_USAGE:
        row.usage = row.usage + change.usage
    for agent in change.agents:
        if agent not in row.agents:
            row.agents = [*row.agents, agent]
    if not row.user:
        row.user = change.user
    if not row.title:
        row.title = change.title
    if change.status is not None and row.status not in ("shredded", "archived"):
        row.status = change.status
    row.compacted_before = max(row.compacted_before, change.compacted_before)
    return row


def add_usage(rows: dict[tuple[str, str], UsageRow], change: CatalogChange) -> None:
    """Add ``change``'s usage rows to a session's ``rows`` (by ``(day, agent)``), as every
    backend sums them."""
    for row in change.usage_rows:
        key = (row.day, row.agent)
        old = rows.get(key)
        rows[key] = (
            row
            if old is None
            else UsageRow(
                day=row.day,
                agent=row.agent,
                calls=old.calls + row.calls,
                usage=old.usage + row.usage,
            )
        )


def _in_range(
    value: _dt.datetime | None, bounds: tuple[_dt.datetime | None, _dt.datetime | None]
) -> bool:
    after, before = bounds
    if value is None:
        return after is None and before is None
    return (after is None or value >= after) and (before is None or value < before)


def matches(row: CatalogRow, where: Filter) -> bool:
    """Whether ``row`` satisfies ``where`` (the rule every backend's query follows)."""
    return (
        (where.prefix is None or row.id.startswith(where.prefix))
        and (where.ids is None or row.id in where.ids)
        and (where.user is None or row.user in where.user)
        and (where.tenant is None or row.tenant in where.tenant)
        and (where.agent is None or any(a in where.agent for a in row.agents))
        and (where.tags is None or all(t in row.tags for t in where.tags))
        and (where.status is None or row.status in where.status)
        and (where.updated is None or _in_range(row.updated_at, where.updated))
        and (where.created is None or _in_range(row.created_at, where.created))
        and (where.title is None or where.title.casefold() in row.title.casefold())
    )


_OLDEST: Final = _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)


def order_key(row: CatalogRow, order: str) -> tuple[Any, str]:
    """The keyset position of ``row`` in ``order``: ``(value, id)``."""
    if order == "updated":
        return (row.updated_at, row.id)
    if order == "created":
        return (row.created_at, row.id)
    return (row.id, row.id)


def _sortable(key: tuple[Any, str], order: str) -> tuple[Any, str]:
    value, sid = key
    if order == "id":
        return (value, sid)
    return (_OLDEST if value is None else value, sid)


def select(rows: Iterable[CatalogRow], query: ListQuery) -> list[CatalogRow]:
    """The rows of a :class:`ListQuery` (the reference: sorted in Python)."""
    order = query.order
    found = [r for r in rows if matches(r, query.where)]
    descending = order != "id"
    found.sort(key=lambda r: _sortable(order_key(r, order), order), reverse=descending)
    if query.after is not None:
        mark = _sortable(query.after, order)
        found = [
            r
            for r in found
            if (_sortable(order_key(r, order), order) < mark) == descending
            and _sortable(order_key(r, order), order) != mark
        ]
    return found if query.limit is None else found[: query.limit]


def document_hit(
    session_id: str,
    doc: Document,
    query: SearchQuery,
    rank: float,
    *,
    rewound: bool,
    compacted: bool,
) -> Hit:
    """The hit of the session's document ``doc`` for ``query``, its snippet made from the
    document's text (none of blind tokens)."""
    return Hit(
        session_id=session_id,
        seq=doc.seq,
        role=doc.role,
        snippet="" if query.blind else snippet(doc.text, query.terms),
        rank=rank,
        rewound=rewound,
        compacted=compacted,
    )


def search_rows(
    docs: Iterable[tuple[str, Document, bool]],
    rows: Mapping[str, CatalogRow],
    query: SearchQuery,
) -> list[Hit]:
    """The hits of a :class:`SearchQuery` over ``(session id, document, rewound)`` (the
    reference: every document scanned, ranked by how often the terms occur in it, then by
    session id and seq)."""
    terms = set(query.terms)
    hits: list[Hit] = []
    for sid, doc, rewound in docs:
        if query.session_id is not None and sid != query.session_id:
            continue
        row = rows.get(sid)
        if row is None or not matches(row, query.where):
            continue
        found = doc.text.split() if query.blind else words(doc.text)
        if not terms.issubset(found):
            continue
        count = sum(1 for w in found if w in terms)
        rank = count / (1.0 + len(found) / 50.0)
        compacted = doc.seq < row.compacted_before
        hits.append(document_hit(sid, doc, query, rank, rewound=rewound, compacted=compacted))
    hits.sort(key=lambda h: (-h.rank, h.session_id, h.seq))
    if query.after is not None:
        rank, sid, seq = query.after
        mark = (-rank, sid, seq)
        hits = [h for h in hits if (-h.rank, h.session_id, h.seq) > mark]
    return hits[: query.limit]


def totals_of(
    usage: Iterable[tuple[str, UsageRow]],
    rows: Mapping[str, CatalogRow],
    query: TotalsQuery,
) -> list[Totals]:
    """Usage rows ``(session id, row)`` summed by ``query.group_by`` (the reference), largest
    total tokens first, then by key."""
    groups: dict[str, list[Any]] = {}
    since = query.since.isoformat() if query.since else None
    until = query.until.isoformat() if query.until else None
    for sid, used in usage:
        row = rows.get(sid)
        if row is None or not matches(row, query.where):
            continue
        if (since and used.day < since) or (until and used.day >= until):
            continue
        key = _group_key(query.group_by, row, used)
        group = groups.setdefault(key, [set(), 0, NO_USAGE])
        group[0].add(sid)
        group[1] += used.calls
        group[2] = group[2] + used.usage
    out = [Totals(key=key, sessions=len(g[0]), calls=g[1], usage=g[2]) for key, g in groups.items()]
    return sort_totals(out)


def sort_totals(totals: list[Totals]) -> list[Totals]:
    """``totals`` in the order ``store.totals`` returns them: by key (days ascending; other
    groups by their key too)."""
    return sorted(totals, key=lambda t: t.key)


def _group_key(group: str, row: CatalogRow, used: UsageRow) -> str:
    if group == "tenant":
        return row.tenant
    if group == "user":
        return row.user
    if group == "agent":
        return used.agent
    return used.day


def check_order(order: object) -> str:
    """``order`` when it is an :data:`Order`."""
    if order not in ORDERS:
        raise UsageError(f"order must be one of {', '.join(ORDERS)}, not {order!r}")
    return str(order)


def check_group(group_by: object) -> str:
    """``group_by`` when it is a :data:`Group`."""
    if group_by not in GROUPS:
        raise UsageError(f"group_by must be one of {', '.join(GROUPS)}, not {group_by!r}")
    return str(group_by)


def check_limit(limit: object, name: str = "limit") -> int:
    """``limit`` when it is a positive int."""
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise UsageError(f"{name} must be a positive int, not {limit!r}")
    return limit
