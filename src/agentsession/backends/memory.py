"""The memory backend: the reference implementation of the storage contract.

Every session of a store lives in a list inside that store; nothing survives the process.
Everything is composed: :class:`MemoryLog` is a session's storage, :class:`MemoryCatalog` keeps
the lists, a ``MetaInMemory`` the meta values and a ``MemoryIndex`` the catalog rows;
:class:`MemoryStore` hands them to :class:`~agentsession.store.BaseStore`."""

from __future__ import annotations

import datetime as _dt
import threading
from collections.abc import Sequence
from typing import Any

import msgspec

from ..catalog import CatalogDefaults, MetaInMemory, StoreParts
from ..contract import Capabilities, SessionInfo
from ..events import Event
from ..follow import LocalWatcher
from ..indexing import MemoryIndex
from ..locks import ThreadLocker
from ..session import BaseSession, SessionHost
from ..storage import ARCHIVED, REOPEN, LogView, Reopen
from ..store import BaseStore

__all__ = ["MemoryCatalog", "MemoryLog", "MemoryStore", "MetaInMemory", "open_memory"]


class MemoryLog:
    """One session's log: a list in the store's dict, shared by the logs of one id (seq ``n`` at
    index ``n - 1``; an archived event's place holds an ``ARCHIVED`` stub). It remembers which
    list it read (its *life*): when the store's list for the id is another, it says ``REOPEN``."""

    def __init__(
        self, logs: dict[str, list[Event]], lock: threading.RLock, sid: str, store: str,
        index: MemoryIndex,
    ) -> None:  # fmt: skip
        self._logs, self._lock, self._index, self._id = logs, lock, index, sid
        self._identity = ("memory", store, sid)
        self._life: list[Event] | None = None  # the store's list this object has read

    location = "memory"  # always

    @property
    def identity(self) -> tuple[str, ...]:
        """Memory logs belong to one store object."""
        return self._identity

    def open(self, view: LogView) -> tuple[list[Event], bool]:
        with self._lock:
            self._life = self._logs.get(self._id)
            return [e for e in self._life or () if e.type != ARCHIVED], True

    def open_tail(self, view: LogView) -> tuple[list[Event], bool]:
        with self._lock:
            self._life = self._logs.get(self._id)
            log = self._life or ()
            return list(log[-1:]), len(log) <= 1

    def append_one(self, view: LogView, event: Event, marker: bool) -> Event | None:
        """The fast path: one event at ``seen_seq + 1`` when this log's list is the store's
        and nothing was appended since the session last looked; None otherwise."""
        with self._lock:
            log = self._life
            if log is None or len(log) != view.seen_seq or self._logs.get(self._id) is not log:
                return None
            stored = msgspec.structs.replace(event, seq=len(log) + 1)
            log.append(stored)
            self._index.take(self._id, view, [stored])  # catalog and documents (or a mark)
            return stored

    def append(
        self, view: LogView, events: list[Event], marker: int, expect_seq: int | None
    ) -> tuple[list[Event], list[Event]] | Reopen:
        with self._lock:
            log = self._current(view)
            if isinstance(log, Reopen):
                return log
            foreign = log[view.seen_seq :]
            base = len(log)
            if (
                (expect_seq is not None and base != expect_seq)
                or not view.admits(foreign, events)
            ):
                return foreign, []
            if self._life is None:
                log = self._life = self._logs.setdefault(self._id, [])
            stored = [
                msgspec.structs.replace(event, seq=base + i)
                for i, event in enumerate(events, start=1)
            ]
            log.extend(stored)
            self._index.take(self._id, view, stored)
            return foreign, stored

    def refresh(self, view: LogView) -> list[Event] | Reopen:
        with self._lock:
            return log if isinstance(log := self._current(view), Reopen) else log[view.seen_seq :]

    def read(self, after: int, limit: int | None) -> list[Event]:
        with self._lock:
            log = self._logs.get(self._id, [])[after : None if limit is None else after + limit]
            return [e for e in log if e.type != ARCHIVED]

    def discard_through(self, seq: int) -> tuple[int | None, int | None]:
        """Drop the (archived) events up to ``seq``, the last event excepted: one stub each."""
        with self._lock:
            log = self._logs.get(self._id, [])
            count = max(0, min(seq, len(log) - 1))  # one stub, shared:
            log[:count] = [msgspec.structs.replace(log[0], type=ARCHIVED)] * count if count else []
            return None, None

    def quarantine(self, event: Event, reason: str) -> bool:
        """Nothing is quarantined in memory."""
        return False

    def close(self) -> None:
        """Nothing to release (nor, in a forked child, anything shared: :meth:`after_fork`)."""

    after_fork = close

    def _current(self, view: LogView) -> list[Event] | Reopen:
        """The store's list for the id, or REOPEN when it is not the one this log read (and
        the session has seen something of that one)."""
        log = self._logs.get(self._id)
        if log is not self._life:
            if self._life is not None or view.seen_seq:
                return REOPEN
            self._life = log
        return [] if log is None else log


class MemoryCatalog(CatalogDefaults):
    """The sessions of a :class:`MemoryStore`: a dict of lists, under one lock shared with
    its meta (deleting a session drops its log and its entries together); the rest is
    :class:`~agentsession.catalog.CatalogDefaults` (the listing filtered in Python)."""

    location = url = "memory:"  # memory is not shared: the URL opens a new, empty store

    def __init__(self) -> None:
        self._logs: dict[str, list[Event]] = {}
        self._lock = threading.RLock()
        self.meta = MetaInMemory(self._lock)
        """The store's meta, under the same lock."""
        self.index = MemoryIndex(self._lock)
        """The catalog rows and search documents, under the same lock."""

    def open_session(self, store: SessionHost, session_id: str) -> BaseSession:
        log = MemoryLog(self._logs, self._lock, session_id, str(id(self)), self.index)
        return BaseSession(store, session_id, log)

    def exists(self, session_id: str) -> bool:
        with self._lock:
            return bool(self._logs.get(session_id))

    def list_all(self) -> list[SessionInfo]:
        with self._lock:
            return [
                SessionInfo(
                    id=sid, updated_at=log[-1].time, created_at=log[0].time, last_seq=log[-1].seq
                )
                for sid, log in self._logs.items()
                if log
            ]

    def last_append(self, session_id: str) -> _dt.datetime | None:
        with self._lock:
            log = self._logs.get(session_id)
            return log[-1].time if log else None

    def delete(self, session_id: str, meta_kinds: Sequence[str]) -> bool:
        with self._lock:
            for kind in meta_kinds:
                self.meta.set(kind, session_id, None)
            self.index.delete(session_id)
            return bool(self._logs.pop(session_id, None))


class MemoryStore(BaseStore):
    """Sessions kept in this process's memory. Opened by ``open_store("memory:")``."""

    capabilities = Capabilities(in_memory=True)

    def __init__(self, **options: Any) -> None:
        catalog = MemoryCatalog()
        parts = StoreParts(
            catalog, catalog.meta, ThreadLocker, watcher=LocalWatcher, index=catalog.index
        )
        super().__init__(parts, **options)
        catalog.index.defer(self._indexing)  # the catalog at turns' ends, documents apart


def open_memory(url: str, **options: Any) -> MemoryStore:
    """``open_store("memory:")``: a new, empty store in this process's memory (``create`` is
    accepted and has nothing to do)."""
    options.pop("create", None)
    return MemoryStore(**options)
