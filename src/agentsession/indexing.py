"""The store side of the catalog and search (``store.list(where=...)``, ``store.search``,
``store.totals``, ``store.reindex``, ``session.update(title=..., tags=...)``).

A backend keeps its catalog rows and search documents in a :class:`CatalogIndex` (handed to the
store in :attr:`agentsession.catalog.StoreParts.index`): SQL tables updated in the append's
transaction, a sidecar index for JSONL, :class:`MemoryIndex` for the memory backend (the
reference). The append pipeline asks the store's :class:`Indexing` what a stored batch changes
(:func:`agentsession.listing.change_of` with the store's prices, its search setting and, when
encrypted, its field sealer); the backend applies that :class:`~agentsession.listing.CatalogChange`
where it stores the batch. This module turns the store's calls into index queries and index
rows into :class:`~agentsession.contract.SessionInfo` (opening sealed fields, telling ``live``
from ``needs_recovery`` by the turn lock).

**Branches.** A branch (:meth:`agentsession.session.BaseSession.branch`) presents its origin's
history up to its fork point as seqs ``1..N``; the catalog counts only its own events (its
``session/branch`` marker at ``N + 1`` and after): its row's messages, turns and usage are what
the branch added (so :func:`totals` counts every token once, where it was spent), its title is
its own first user message unless set, and a search finds a shared message in the origin only.
Every path that reads a log for the catalog (catching up, indexing documents, ``reindex``)
reads through :func:`catalogued`, so what appending hands the catalog and what a rebuild makes
agree.
"""

from __future__ import annotations

import builtins
import datetime as _dt
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

import msgspec

from .contract import SessionInfo
from .errors import (
    CorruptLogError,
    EncryptionError,
    SessionExpired,
    SessionShredded,
    StorageError,
    StoreUnavailable,
    UsageError,
)
from .events import Event
from .listing import (
    OPEN,
    CatalogChange,
    CatalogRow,
    FieldSealer,
    Filter,
    Hit,
    ListQuery,
    Page,
    Price,
    SearchQuery,
    Totals,
    TotalsQuery,
    UsageRow,
    add_usage,
    apply_change,
    change_of,
    check_group,
    check_limit,
    check_order,
    decode_cursor,
    encode_cursor,
    order_key,
    parse_where,
    search_rows,
    select,
    sort_totals,
    time_of,
    totals_of,
    words,
)

_log = logging.getLogger("agentsession.catalog")

if TYPE_CHECKING:
    from .crypto import KeyRing
    from .storage import LogView


class IndexHost(Protocol):
    """What this module needs of a store (:class:`agentsession.store.BaseStore`)."""

    _index: CatalogIndex | None
    _indexing: Indexing
    _catalog: Any  # an agentsession.catalog.Catalog

    @property
    def _keyring(self) -> KeyRing | None: ...

    @property
    def encrypted(self) -> bool: ...

    def _meta_get(self, kind: str, key: str) -> str | None: ...

    def _meta_set(self, kind: str, key: str, value: str | None) -> None: ...

    def is_locked(self, session_id: str) -> bool: ...

    def get(self, session_id: str) -> Any: ...


__all__ = ["PRICES_KIND", "CatalogIndex", "Fields", "IndexHost", "Indexing", "MemoryIndex"]

PRICES_KIND: Final = "prices"
"""The meta kind of the store's prices (key ``store``: JSON of model → price)."""

_PRICES_KEY: Final = "store"


class Fields(msgspec.Struct, frozen=True, kw_only=True):
    """Catalog fields set by ``session.update`` (None: unchanged), as the index stores them
    (sealed on an encrypted store)."""

    title: str | None = None
    """The title (``""``: none, a derived one may take its place)."""
    tags: tuple[str, ...] | None = None
    """The tags (replacing the set)."""
    user: str | None = None
    """The user."""
    tenant: str | None = None
    """The tenant."""


class CatalogIndex(Protocol):
    """Where a backend keeps catalog rows, usage rows and search documents. Every method may
    be called from any thread."""

    def sync(self, store: IndexHost) -> None:
        """Bring the index up to date before a query (an index kept apart from the logs
        catches up with them here; one updated in the append's transaction has nothing to
        do)."""
        ...

    def query(self, query: ListQuery) -> builtins.list[CatalogRow]:
        """The rows of ``query`` (filter, order, after the keyset position, limit)."""
        ...

    def search(self, query: SearchQuery) -> builtins.list[Hit]:
        """The hits of ``query``, best first, then by session id and seq."""
        ...

    def totals(self, query: TotalsQuery) -> builtins.list[Totals]:
        """Usage rows summed by ``query.group_by``, ordered by key."""
        ...

    def set_fields(self, session_id: str, fields: Fields) -> None:
        """Store fields set by ``session.update`` (a session without a row gets none)."""
        ...

    def shredded(self, session_id: str) -> None:
        """The session was shredded: its status becomes ``shredded``, its title, user,
        tenant and tags are cleared and its documents removed."""
        ...

    def rebuild(
        self, session_id: str, change: CatalogChange | None, fields: Fields, rewound: bool
    ) -> None:
        """Replace the session's row, usage rows and documents with what ``change`` (made from
        its whole log; None: it has no events) and ``fields`` say (``reindex``).
        ``rewound``: documents are flagged by ``change.rewound``."""
        ...


class Indexing:
    """A store's catalog settings and what the append pipeline asks of them: whether it keeps
    a catalog and documents, its prices, its field sealer when encrypted."""

    def __init__(self, store: IndexHost, *, catalog: bool, searchable: bool) -> None:
        self._store = store
        self.catalog = catalog
        """Whether appends update the catalog."""
        self.searchable = searchable
        """Whether appends index documents for search."""
        self.deferred = False
        """Whether the backend takes catalog changes at turn boundaries: an append inside a
        turn its session object opened hands it no change (the backend marks the session, to
        be caught up from its log before the catalog is read), and the append that ends the
        turn hands it the change of the whole turn (see
        :meth:`~agentsession.core.SessionCore._catalog_change`). Set by the backend."""
        self.lazy = False
        """With :attr:`deferred`: whether the backend marks the session at every append it
        gets no change for (SQLite's connection triggers, :class:`MemoryIndex`'s marks), so
        that a turn's start needs no change either, and appends outside turns hand one over
        only at the session's first event and every few events (see
        :meth:`~agentsession.core.SessionCore._catalog_due`). Set by the backend."""
        self.documents_apart = False
        """Whether the backend indexes search documents apart from the appends (from its
        logs, before a search): the changes appends hand it then hold no documents
        (:meth:`change`). Set by the backend."""
        self._prices: dict[str, Price] | None = None
        self._sealer: FieldSealer | None = None
        self._lock = threading.Lock()

    def prices(self) -> dict[str, Price]:
        """The store's prices (read from its meta once per store object)."""
        prices = self._prices
        if prices is None:
            raw = self._store._meta_get(PRICES_KIND, _PRICES_KEY)
            prices = {} if raw is None else _prices_decoder.decode(raw)
            self._prices = prices
        return prices

    def set_prices(self, prices: dict[str, Price]) -> None:
        """Store ``prices`` for every process (usage appended from now on is priced)."""
        self._store._meta_set(PRICES_KIND, _PRICES_KEY, msgspec.json.encode(prices).decode())
        self._prices = dict(prices)

    def sealer(self) -> FieldSealer | None:
        """The encrypted store's field sealer (None: not encrypted)."""
        if self._sealer is None:
            ring = self._store._keyring
            if ring is None:
                return None
            self._sealer = ring.field_sealer()
        return self._sealer

    def change(
        self, stored: Sequence[Event], *, documents: bool | None = None
    ) -> CatalogChange | None:
        """What ``stored`` (plaintext, with seqs) changes; None when the store keeps no
        catalog. ``documents``: whether it holds the search documents (when the store is
        searchable; None: unless the backend indexes them apart, :attr:`documents_apart`)."""
        if not self.catalog or not stored:
            return None
        if documents is None:
            documents = not self.documents_apart
        return change_of(
            stored,
            prices=self.prices() or None,
            searchable=self.searchable and documents,
            sealer=self.sealer(),
        )


_prices_decoder: Final = msgspec.json.Decoder(dict[str, Price])


def shared_until(session: Any) -> int:
    """The seq a branch's history shares with its origin up to (0: ``session``, a session
    object, is not a branch): its own storage's seqs are the presented ones minus this."""
    origin = session.origin
    return 0 if origin is None else int(origin.seq)


def catalogued(session: Any, after: int = 0) -> list[Event]:
    """The events of ``session`` (a session object) after seq ``after`` that its catalog row
    and search documents are made of: every one, except a branch's shared history (seqs up to
    its fork point, which are its origin's)."""
    return list(session.read(after=max(after, shared_until(session))))


def change_for(
    store: IndexHost, events: Sequence[Event], *, documents: bool | None = None
) -> CatalogChange | None:
    """What ``events`` (plaintext, with seqs: read back from a log) change in ``store``'s
    catalog (None: it keeps none): for an index that catches up with logs after they were
    written (the JSONL store's sidecar) rather than where they are stored. ``documents`` as
    for :meth:`Indexing.change`."""
    return store._indexing.change(events, documents=documents)


# -- the reference index ------------------------------------------------------------------------


class MemoryIndex:
    """A :class:`CatalogIndex` in this process's memory (the memory backend's; the reference
    the SQL indexes are tested against): rows by id, usage rows, documents, under a lock."""

    def __init__(self, lock: threading.RLock | None = None) -> None:
        self._lock = lock if lock is not None else threading.RLock()
        self.rows: dict[str, CatalogRow] = {}
        """Catalog rows by session id."""
        self.usage: dict[str, dict[tuple[str, str], UsageRow]] = {}
        """Usage rows by session id, then ``(day, agent)``."""
        self.documents: dict[str, dict[int, Any]] = {}
        """Documents by session id, then seq, as ``[document, rewound]``."""
        self.lazy = False
        """Whether the store takes the catalog at turns' ends (:attr:`Indexing.lazy`): an
        append that hands no change over marks its session, caught up by :meth:`sync`."""
        self.marked: builtins.set[str] = builtins.set()
        """The sessions whose rows may be behind their logs."""
        self.unindexed: builtins.set[str] = builtins.set()
        """With :attr:`lazy`: the sessions whose documents may be behind their logs (indexed
        from their logs by :meth:`sync`, as SQLite's are before a search)."""
        self.documents_upto: dict[str, int] = {}
        """With :attr:`lazy`: the seq each session's documents are indexed up to."""

    def defer(self, indexing: Indexing) -> None:
        """Take the catalog at turns' ends and the documents apart from the appends
        (:attr:`Indexing.lazy`, :attr:`Indexing.documents_apart`), when the store keeps one:
        the memory store's setting."""
        indexing.deferred = indexing.lazy = indexing.documents_apart = indexing.catalog
        self.lazy = indexing.catalog

    def take(self, session_id: str, view: LogView, stored: Sequence[Event]) -> None:
        """Where the memory log stores a batch, under the store's lock: apply the change the
        session hands over (``view.indexed``) when it continues the row, or else the change
        since the row's last seq; mark the session when it hands over none, or none that
        continues the row (what SQLite's ``_hand_over`` does)."""
        change = view.indexed(stored)
        if change is not None:
            row = self.rows.get(session_id)
            held = 0 if row is None else row.last_seq
            if change.first_seq != held + 1:
                change = view.indexed_since(held, stored)
            if change is not None and change.first_seq == held + 1:
                self.apply(session_id, change)
                if change.status != OPEN:
                    self.marked.discard(session_id)
                self.unindexed.add(session_id)
                return
        if self.lazy:
            self.marked.add(session_id)
            self.unindexed.add(session_id)

    def apply(self, session_id: str, change: CatalogChange | None) -> None:
        """Apply an append's change (called by the memory log where it stores the batch; None:
        nothing to do)."""
        if change is None:
            return
        with self._lock:
            self.rows[session_id] = apply_change(self.rows.get(session_id), session_id, change)
            add_usage(self.usage.setdefault(session_id, {}), change)
            self._add_documents(session_id, change)

    def _add_documents(self, session_id: str, change: CatalogChange) -> None:
        """The change's documents, and the flags its rewinds set on the session's."""
        docs = self.documents.setdefault(session_id, {})
        for doc in change.documents:
            docs[doc.seq] = [doc, False]
        for to_seq, marker_seq in change.rewound:
            for seq, entry in docs.items():
                if to_seq < seq < marker_seq:
                    entry[1] = True


    def delete(self, session_id: str) -> None:
        """Forget the session (its log was deleted)."""
        with self._lock:
            self.marked.discard(session_id)
            self.unindexed.discard(session_id)
            self.documents_upto.pop(session_id, None)
            self.rows.pop(session_id, None)
            self.usage.pop(session_id, None)
            self.documents.pop(session_id, None)

    def sync(self, store: IndexHost) -> None:
        """Catch up every marked session's row from its log, then index the documents of
        every session they are behind for (read without the store's lock, which an append
        takes inside its session's lock); what another append moved meanwhile stays marked
        for the next catch-up."""
        with self._lock:
            rows = [(sid, r.last_seq if (r := self.rows.get(sid)) else 0) for sid in self.marked]
            docs = [(sid, self.documents_upto.get(sid, 0)) for sid in self.unindexed]
            self.marked.clear()
            self.unindexed.clear()
        for sid, held in rows:
            self._catch_up(store, sid, held, documents=False)
        for sid, upto in docs if store._indexing.searchable else ():
            self._catch_up(store, sid, upto, documents=True)

    def _catch_up(self, store: IndexHost, sid: str, after: int, *, documents: bool) -> None:
        """Apply the change of the session's events after ``after`` to its row, or (with
        ``documents``) add their documents."""
        try:
            session = store.get(sid)
            start = max(after, shared_until(session))  # a branch's own events (catalogued)
            events = catalogued(session, start)
        except SessionShredded:
            self.shredded(sid)
            return
        except SessionExpired:
            return  # gone for every reader: nothing to catch up
        except (CorruptLogError, EncryptionError) as exc:
            _log.warning("catalog: session %r not caught up: %s", sid, type(exc).__name__)
            with self._lock:
                (self.unindexed if documents else self.marked).add(sid)
            return
        change = change_for(store, events, documents=documents)
        fields = record_fields(store, sid) if change and not (after or documents) else None
        with self._lock:
            if documents:
                if self.documents_upto.get(sid, 0) != after:
                    self.unindexed.add(sid)
                elif change is not None and change.first_seq == start + 1:
                    self._add_documents(sid, change)
                    self.documents_upto[sid] = change.last_seq
                return
            row = self.rows.get(sid)
            if (0 if row is None else row.last_seq) != after:
                self.marked.add(sid)
            elif change is not None and change.first_seq == start + 1:
                self.apply(sid, change)
                if fields is not None:
                    set_row_fields(self.rows[sid], fields)

    def query(self, query: ListQuery) -> builtins.list[CatalogRow]:
        with self._lock:
            return [msgspec.structs.replace(r) for r in select(self.rows.values(), query)]

    def search(self, query: SearchQuery) -> builtins.list[Hit]:
        with self._lock:
            docs = [
                (sid, doc, rewound)
                for sid, by_seq in self.documents.items()
                for doc, rewound in by_seq.values()
            ]
            return search_rows(docs, self.rows, query)

    def totals(self, query: TotalsQuery) -> builtins.list[Totals]:
        with self._lock:
            usage = [(sid, row) for sid, rows in self.usage.items() for row in rows.values()]
            return totals_of(usage, self.rows, query)

    def set_fields(self, session_id: str, fields: Fields) -> None:
        with self._lock:
            row = self.rows.get(session_id)
            if row is not None:
                set_row_fields(row, fields)

    def shredded(self, session_id: str) -> None:
        with self._lock:
            row = self.rows.get(session_id)
            if row is not None:
                shred_row(row)
            self.documents.pop(session_id, None)

    def rebuild(
        self, session_id: str, change: CatalogChange | None, fields: Fields, rewound: bool
    ) -> None:
        with self._lock:
            self.delete(session_id)
            if change is not None:
                self.apply(session_id, change)
                set_row_fields(self.rows[session_id], fields)
                self.documents_upto[session_id] = change.last_seq


def set_row_fields(row: CatalogRow, fields: Fields) -> None:
    """Set ``fields`` on ``row`` (what every index does for ``session.update``)."""
    if fields.title is not None:
        row.title = fields.title
        row.title_set = bool(fields.title)
    if fields.tags is not None:
        row.tags = list(fields.tags)
    if fields.user is not None:
        row.user = fields.user
    if fields.tenant is not None:
        row.tenant = fields.tenant


def shred_row(row: CatalogRow) -> None:
    """Clear what a shredded session's row may not keep (its sealed fields), and mark it."""
    row.status = "shredded"
    row.title = row.user = row.tenant = ""
    row.tags = []


# -- the store's calls --------------------------------------------------------------------------


def _info(store: IndexHost, row: CatalogRow, sealer: FieldSealer | None) -> SessionInfo:
    """The :class:`SessionInfo` of an index row: sealed fields opened, an open turn told
    ``live`` (its turn lock is held) from ``needs_recovery``."""
    status = row.status
    if status == OPEN:
        try:
            if not store.is_locked(row.id):
                status = "needs_recovery"
        except (StoreUnavailable, StorageError, OSError):
            # No turn locks here (no fcntl), or the lock cannot be tested (its file is in the
            # way): the stored status is all a listing can say; recovery reports the error.
            pass
    title, user, tenant, tags = row.title, row.user, row.tenant, tuple(row.tags)
    if sealer is not None:
        title, user, tenant = (_open(sealer, v) for v in (title, user, tenant))
        tags = tuple(_open(sealer, t) for t in tags)
    return SessionInfo(
        id=row.id,
        updated_at=row.updated_at,
        created_at=row.created_at,
        size=row.size,
        last_seq=row.last_seq,
        title=title,
        tags=tags,
        user=user,
        tenant=tenant,
        agents=tuple(row.agents),
        status=status,
        messages=row.messages,
        turns=row.turns,
        usage=row.usage,
    )


def _open(sealer: FieldSealer, value: str) -> str:
    return sealer.open_field(value) if value else ""


def _stored_filter(store: IndexHost, where: Filter) -> tuple[Filter, builtins.set[str] | None]:
    """``where`` as the index stores its values (sealed), and the statuses the store must
    check itself (``live``/``needs_recovery`` are one stored status)."""
    sealer = store._indexing.sealer()
    if sealer is not None:
        where = where.seal(sealer)
    wanted: builtins.set[str] | None = None
    if where.status is not None and ("live" in where.status or "needs_recovery" in where.status):
        wanted = builtins.set(where.status)
        stored = {OPEN if s == "needs_recovery" else s for s in where.status}
        where = msgspec.structs.replace(where, status=tuple(sorted(stored)))
    return where, wanted


def _index(store: IndexHost) -> CatalogIndex:
    index = store._index
    if not store._indexing.catalog:
        raise UsageError(
            "this store was opened with catalog=False: it keeps no catalog to list by "
            "field or search"
        )
    if index is None:
        raise UsageError(
            f"the {type(store).__name__} backend keeps no catalog index: list it without "
            "where/order/cursor, or use a store that keeps one"
        )
    index.sync(store)
    return index


def list_page(
    store: IndexHost,
    prefix: str | None,
    limit: int | None,
    offset: int,
    where: Mapping[str, object] | None,
    order: str,
    cursor: str | None,
) -> Page[SessionInfo]:
    """``store.list`` (arguments checked here)."""
    order = check_order(order)
    if limit is not None:
        check_limit(limit)
    if cursor is not None and offset:
        raise UsageError("list() takes a cursor or an offset, not both")
    checked = parse_where(where, prefix)
    after: tuple[Any, str] | None = None
    if cursor is not None:
        value, sid = decode_cursor(cursor, f"list:{order}")
        after = ((sid if order == "id" else time_of(value)), str(sid))
    index = _index(store)
    sealer = store._indexing.sealer()
    stored_where, wanted = _stored_filter(store, checked)
    out: builtins.list[SessionInfo] = []
    skip = offset
    want = None if limit is None else limit + 1
    batch = None if want is None else max(want + skip, 50)
    while True:
        rows = index.query(ListQuery(where=stored_where, order=order, after=after, limit=batch))
        for row in rows:
            info = _info(store, row, sealer)
            if wanted is not None and info.status not in wanted:
                continue
            if skip:
                skip -= 1
                continue
            out.append(info)
            if want is not None and len(out) >= want:
                break
        if batch is None or len(rows) < batch or (want is not None and len(out) >= want):
            break
        after = order_key(rows[-1], order)
    next_cursor = None
    if limit is not None and len(out) > limit:
        out = out[:limit]
        last = out[-1]
        value = (
            last.id
            if order == "id"
            else (last.updated_at if order == "updated" else last.created_at)
        )
        next_cursor = encode_cursor(f"list:{order}", (value, last.id))
    return Page(out, next_cursor)


def search(
    store: IndexHost,
    query: str,
    where: Mapping[str, object] | None,
    session_id: str | None,
    limit: int,
    cursor: str | None,
) -> Page[Hit]:
    """``store.search`` (arguments checked here)."""
    if not isinstance(query, str):
        raise UsageError(f"search query must be a string, not {type(query).__name__}")
    check_limit(limit)
    terms = tuple(dict.fromkeys(words(query)))
    if not terms:
        raise UsageError(f"search query {query!r} has no words to look for")
    if not store._indexing.searchable:
        raise UsageError(
            "this store was opened with searchable=False: it keeps no search index "
            "(open it with searchable=True and run store.reindex() to build one)"
        )
    after: tuple[float, str, int] | None = None
    if cursor is not None:
        rank, sid, seq = decode_cursor(cursor, "search")
        after = (float(rank), str(sid), int(seq))
    index = _index(store)
    sealer = store._indexing.sealer()
    where_filter, wanted = _stored_filter(store, parse_where(where))
    if wanted is not None:
        raise UsageError(
            "search() cannot filter by live or needs_recovery (a status of the moment)"
        )
    blind = sealer is not None
    if blind:
        assert sealer is not None
        terms = tuple(sealer.blind(t) for t in terms)
    hits = index.search(
        SearchQuery(
            terms=terms,
            text=query,
            where=where_filter,
            session_id=session_id,
            after=after,
            limit=limit + 1,
            blind=blind,
        )
    )
    if blind:
        hits = _snippets(store, hits, words(query))
    next_cursor = None
    if len(hits) > limit:
        hits = hits[:limit]
        last = hits[-1]
        next_cursor = encode_cursor("search", (last.rank, last.session_id, last.seq))
    return Page(hits, next_cursor)


def _snippets(
    store: IndexHost, hits: builtins.list[Hit], terms: Sequence[str]
) -> builtins.list[Hit]:
    """Hits of an encrypted store with their snippets, made from the events opened (the
    index holds no text)."""
    from .listing import message_text, snippet
    from .messages import Message, ToolCall, ToolResult

    out: builtins.list[Hit] = []
    for hit in hits:
        text = ""
        try:
            events = store.get(hit.session_id).read(after=hit.seq - 1, limit=1)
        except SessionShredded:
            continue
        if events:
            event = events[0]
            payload = event.payload()
            if isinstance(payload, Message):
                text = message_text(payload)
            elif isinstance(payload, ToolCall):
                text = f"{payload.name} {msgspec.json.encode(payload.arguments).decode()}"
            elif isinstance(payload, ToolResult):
                text = f"{payload.name} {payload.content}"
        out.append(msgspec.structs.replace(hit, snippet=snippet(text, terms) if text else ""))
    return out


def totals(
    store: IndexHost,
    where: Mapping[str, object] | None,
    group_by: str,
    since: _dt.date | None,
    until: _dt.date | None,
) -> builtins.list[Totals]:
    """``store.totals`` (arguments checked here)."""
    group_by = check_group(group_by)
    for name, day in (("since", since), ("until", until)):
        if day is not None and not isinstance(day, _dt.date):
            raise UsageError(f"totals({name}=...) takes a date, not {type(day).__name__}")
    index = _index(store)
    where_filter, wanted = _stored_filter(store, parse_where(where))
    if wanted is not None:
        raise UsageError(
            "totals() cannot filter by live or needs_recovery (a status of the moment)"
        )
    found = index.totals(
        TotalsQuery(
            where=where_filter,
            group_by=group_by,
            since=since.date() if isinstance(since, _dt.datetime) else since,
            until=until.date() if isinstance(until, _dt.datetime) else until,
        )
    )
    sealer = store._indexing.sealer()
    if sealer is not None and group_by in ("tenant", "user"):
        # Opened, the keys sort otherwise than sealed.
        found = sort_totals([msgspec.structs.replace(t, key=_open(sealer, t.key)) for t in found])
    return found


def fields_updated(store: object, session_id: str, fields: Fields) -> None:
    """``session.update`` set catalog fields (plaintext in ``fields``): store them in the
    index, sealed on an encrypted store."""
    index = getattr(store, "_index", None)
    indexing = getattr(store, "_indexing", None)
    if index is None or not isinstance(indexing, Indexing) or not indexing.catalog:
        return
    index.set_fields(session_id, sealed_fields(indexing, fields))


def sealed_fields(indexing: Indexing, fields: Fields) -> Fields:
    """``fields`` as the index stores them (sealed on an encrypted store)."""
    sealer = indexing.sealer()
    if sealer is None:
        return fields

    def seal(value: str | None) -> str | None:
        return None if value is None else (sealer.seal_field(value) if value else "")

    return Fields(
        title=seal(fields.title),
        tags=None if fields.tags is None else tuple(sealer.seal_field(t) for t in fields.tags),
        user=seal(fields.user),
        tenant=seal(fields.tenant),
    )


def record_fields(store: IndexHost, session_id: str) -> Fields:
    """The catalog fields of the session's record (what ``update`` set), for a rebuild."""
    from . import children

    # The stored record alone: what update set (record_of also reads the session's times).
    record = children.stored_record(cast(Any, store), session_id)
    return sealed_fields(
        store._indexing,
        Fields(
            title=record.title or None,
            tags=record.tags or None,
            user=record.user or None,
            tenant=record.tenant or None,
        ),
    )


def reindex(
    store: IndexHost,
    session_ids: Iterable[str] | None,
    progress: Callable[[str], None] | None = None,
) -> int:
    """Rebuild the index rows of ``session_ids`` (None: every session) from their logs;
    returns how many sessions were read."""
    index = store._index
    if index is None:
        raise UsageError(f"the {type(store).__name__} backend keeps no catalog index")
    ids = (
        [i.id for i in store._catalog.list_page(None, None, 0)]
        if session_ids is None
        else list(session_ids)
    )
    count = 0
    for sid in ids:
        try:
            session = store.get(sid)
            events = catalogued(session)
        except SessionShredded:
            index.shredded(sid)
            continue
        change = store._indexing.change(events, documents=True) if events else None
        shared = shared_until(session)
        if change is not None and shared:
            change = msgspec.structs.replace(change, shared=shared)
        fields = record_fields(store, sid) if events else Fields()
        index.rebuild(sid, change, fields, True)
        count += 1
        if progress is not None:
            progress(sid)
    return count
