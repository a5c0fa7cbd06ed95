"""What the viewer's catalog endpoints return: the store's features, a page of its catalog
(filters by status, tag, tenant, user and agent, keyset cursors) and a page of search hits,
computed with ``store.list(where=...)`` and ``store.search``; no HTTP here.

Costs: a catalog page is one ``store.list`` query of the page's size (the backend's catalog
index answers it: no log is read); with "id contains" (which no index answers), the pages
after the cursor are read (200 rows, then twice as many each time, up to 12,800) and filtered
until the page is full. A search
page is one ``store.search``.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from typing import Final

import msgspec

from ..contract import SessionInfo
from ..listing import Hit, UsageTotals, encode_cursor
from ..store import BaseStore

__all__ = [
    "FILTERS",
    "CatalogPage",
    "CatalogSession",
    "SearchPage",
    "StoreFeatures",
    "catalog_page",
    "catalog_where",
    "search_page",
    "store_features",
]

FILTERS: Final = ("status", "tag", "tenant", "user", "agent")
"""The catalog filters the viewer's endpoints take (``tag`` repeatable: every one)."""

_SCAN: Final = 200
"""Rows of the first ``store.list`` while filtering by "id contains" (each next one reads
twice as many, up to :data:`_SCAN_MAX`: a rare text costs a few queries, not one per 200
sessions)."""
_SCAN_MAX: Final = 12_800


class StoreFeatures(msgspec.Struct, frozen=True, kw_only=True):
    """What the sessions page can offer for a store."""

    store: str
    """The store's location."""
    encrypted: bool
    """Whether the store is encrypted."""
    catalog: bool
    """Whether the store keeps a catalog index: filters by status, tag, tenant, user and
    agent, and pages by cursor (``/api/catalog``)."""
    searchable: bool
    """Whether the store keeps a search index (``/api/search``)."""


def store_features(store: BaseStore) -> StoreFeatures:
    """What ``store`` keeps: a catalog index (the backend hands one, and the store was not
    opened with ``catalog=False``) and a search index (also not ``searchable=False``)."""
    # The store's own record of what it keeps: asking it through a query would build a
    # lagging index (JSONL's) before the page is even shown.
    return StoreFeatures(
        store=store.location,
        encrypted=store.encrypted,
        catalog=store.keeps_catalog,
        searchable=store.searchable,
    )


class CatalogSession(msgspec.Struct, frozen=True, kw_only=True):
    """One line of the sessions page from the catalog: what ``store.list(where=...)``
    reports (:class:`~agentsession.contract.SessionInfo`), under the sessions page's names."""

    id: str
    """The session id."""
    events: int | None
    """Its number of events (its last seq); None when not known."""
    last_activity: _dt.datetime | None
    """Time of its last append (UTC)."""
    created_at: _dt.datetime | None
    """Time of its first event (UTC)."""
    size: int | None
    """Bytes in storage; None when the backend does not keep it per session."""
    title: str
    """Its title ("": none)."""
    tags: tuple[str, ...]
    """Its tags."""
    user: str
    """Its user."""
    tenant: str
    """Its tenant."""
    agents: tuple[str, ...]
    """The agents of its events."""
    status: str
    """``live``, ``idle``, ``needs_recovery``, ``shredded`` or ``archived``."""
    messages: int
    """User and assistant messages."""
    turns: int
    """Turns started."""
    usage: UsageTotals
    """Tokens and cost."""


class CatalogPage(msgspec.Struct, frozen=True, kw_only=True):
    """A page of the catalog, in the order asked for."""

    sessions: list[CatalogSession]
    """The sessions of the page."""
    next_cursor: str | None
    """The cursor of the next page (None: this was the last)."""
    store: str
    """The store's location."""
    encrypted: bool
    """Whether the store is encrypted."""


class SearchPage(msgspec.Struct, frozen=True, kw_only=True):
    """A page of search hits, best first."""

    hits: list[Hit]
    """The hits (session id, seq, role, snippet with matches in ``[`` ``]``, rank, and
    whether the event was rewound or compacted away)."""
    next_cursor: str | None
    """The cursor of the next page (None: this was the last)."""
    query: str
    """The query searched."""


def catalog_where(
    *,
    status: str = "",
    tags: Sequence[str] = (),
    tenant: str = "",
    user: str = "",
    agent: str = "",
) -> dict[str, object]:
    """The ``where`` of the filters given (an empty one is left out)."""
    where: dict[str, object] = {}
    for name, value in (("status", status), ("tenant", tenant), ("user", user), ("agent", agent)):
        if value:
            where[name] = value
    wanted = [t for t in tags if t]
    if wanted:
        where["tags"] = wanted
    return where


def _line(info: SessionInfo) -> CatalogSession:
    return CatalogSession(
        id=info.id,
        events=info.last_seq if info.last_seq >= 0 else None,
        last_activity=info.updated_at,
        created_at=info.created_at,
        size=info.size or None,
        title=info.title,
        tags=info.tags,
        user=info.user,
        tenant=info.tenant,
        agents=info.agents,
        status=info.status,
        messages=info.messages,
        turns=info.turns,
        usage=info.usage,
    )


def catalog_page(
    store: BaseStore,
    *,
    where: dict[str, object] | None = None,
    query: str = "",
    cursor: str | None = None,
    limit: int = 50,
) -> CatalogPage:
    """A page of the sessions matching ``where`` whose id contains ``query``, most recently
    appended first, after ``cursor`` (a page's ``next_cursor``)."""
    where = where or {}
    if not query:
        page = store.list(where=where, limit=limit, cursor=cursor)
        picked, next_cursor = list(page), page.next_cursor
    else:
        picked, next_cursor = _containing(store, where, query, cursor, limit)
    return CatalogPage(
        sessions=[_line(info) for info in picked],
        next_cursor=next_cursor,
        store=store.location,
        encrypted=store.encrypted,
    )


def _containing(
    store: BaseStore, where: dict[str, object], query: str, cursor: str | None, limit: int
) -> tuple[list[SessionInfo], str | None]:
    """The first ``limit`` sessions after ``cursor`` whose id contains ``query``, and the
    cursor after the last of them (None: the listing ended)."""
    picked: list[SessionInfo] = []
    after = cursor
    batch = _SCAN
    while True:
        page = store.list(where=where, limit=batch, cursor=after)
        batch = min(batch * 2, _SCAN_MAX)
        for info in page:
            if query not in info.id:
                continue
            picked.append(info)
            if len(picked) == limit:
                # The keyset position of the last session shown, as store.list makes it.
                return picked, encode_cursor("list:updated", (info.updated_at, info.id))
        if page.next_cursor is None:
            return picked, None
        after = page.next_cursor


def search_page(
    store: BaseStore,
    query: str,
    *,
    where: dict[str, object] | None = None,
    session_id: str | None = None,
    cursor: str | None = None,
    limit: int = 20,
) -> SearchPage:
    """A page of the hits of ``query`` in the sessions matching ``where`` (or in
    ``session_id``), after ``cursor``."""
    page = store.search(
        query, where=where or None, session_id=session_id, limit=limit, cursor=cursor
    )
    return SearchPage(hits=list(page), next_cursor=page.next_cursor, query=query)
