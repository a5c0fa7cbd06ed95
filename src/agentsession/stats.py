"""Counts of a store or of one session: what ``store.stats()`` and ``agentsession stats`` report.

A store's counts come from its listing (``store.list()``), so they read no event and cost
O(sessions); a session's counts read its log and derive its history once.
"""

from __future__ import annotations

import builtins
from typing import Protocol

import msgspec

from . import events as ev
from .catalog import Catalog
from .contract import Session, SessionInfo
from .errors import SessionNotFound
from .recovery import scan_all_incomplete

__all__ = ["SessionStats", "StoreStats", "session_stats", "store_stats"]


class StoreStats(msgspec.Struct, frozen=True, kw_only=True):
    """A store's counts, from its listing (no event is read)."""

    sessions: int
    """How many sessions it holds."""
    events: int | None
    """How many events its sessions hold; None when the backend cannot tell without reading
    the sessions (its listing reports no last seq)."""
    bytes: int | None
    """Bytes in storage: the sum of its sessions' sizes, or the database file's (with its
    write-ahead log) for SQLite, which keeps no size per session; 0 for a store without
    sessions; None when unknown (memory, PostgreSQL)."""


class SessionStats(msgspec.Struct, frozen=True, kw_only=True):
    """One session's counts (its whole log is read)."""

    session_id: str
    """The session id."""
    events: int
    """How many events it holds."""
    turns: int
    """How many turns were started in it (``turn/start`` events)."""
    message_events: int
    """How many user and assistant messages are stored in it."""
    history_messages: int
    """How many messages its history holds: what a model is sent (after compaction, with tool
    results)."""
    incomplete_turns: int
    """How many of its turns are open: cut off by a crash, or running now."""
    bytes: int | None
    """Bytes in storage; None when the backend does not keep a size per session."""


class _Counted(Protocol):
    """What the counts need from a store (``BaseStore``)."""

    @property
    def location(self) -> str: ...

    def exists(self, session_id: str) -> bool: ...

    def get(self, session_id: str) -> Session: ...

    def list(
        self, prefix: str | None = None, limit: int | None = None, offset: int = 0
    ) -> builtins.list[SessionInfo]: ...

    _catalog: Catalog


def store_stats(store: _Counted) -> StoreStats:
    """The counts of ``store``, from one listing."""
    infos = store.list()
    sizes = [info.size for info in infos]
    if sizes and all(sizes):
        size: int | None = sum(sizes)
    else:
        # A backend that keeps no size per session may know its whole size (SQLite's file).
        size = store._catalog.storage_bytes()
        if size is None and not sizes:
            size = 0
    return StoreStats(
        sessions=len(infos),
        events=sum(info.last_seq for info in infos)
        if all(info.last_seq >= 0 for info in infos)
        else None,
        bytes=size,
    )


def session_stats(store: _Counted, session_id: str) -> SessionStats:
    """The counts of the session ``session_id`` of ``store``; :class:`SessionNotFound` when it
    has no events."""
    if not store.exists(session_id):
        raise SessionNotFound(session_id, f"no session {session_id!r} in {store.location}")
    session = store.get(session_id)
    events = session.read()
    size = next((i.size for i in store.list(prefix=session_id) if i.id == session_id), 0)
    return SessionStats(
        session_id=session_id,
        events=len(events),
        turns=sum(1 for e in events if e.type == ev.TURN_START),
        message_events=sum(
            1 for e in events if e.type in (ev.USER_MESSAGE, ev.ASSISTANT_MESSAGE)
        ),
        history_messages=len(session.messages()),
        incomplete_turns=len(scan_all_incomplete(events)),
        bytes=size or None,
    )
