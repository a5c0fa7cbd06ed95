"""The static store: a store over one fixed session (agentkit's ``session/static``).

For tests and presets: code that takes a store (the chat layer, recovery, an agent loop) is
handed one session object, of any backend, that it cannot escape. ``StaticStore(session)``
wraps it; ``get("")`` and ``get(session.id)`` return that very object, and every other id is
:class:`~agentsession.errors.SessionNotFound` (agentkit's "session not found"), unless the store
is built with ``any_id=True``: then every id names the one log (the lenient rule agentkit's
constructor documented; its type documented the matching one, which is the default here).

It is a full :class:`~agentsession.store.BaseStore`:

* ``open`` and ``exists`` answer for the session (``open("")`` is the session too);
  ``create`` of the session's id is the usual conditional append, of another id a
  :class:`~agentsession.errors.UsageError` (with ``any_id``, every id creates into the one log).
* ``list()`` lists the session once it has events; ``recover()`` repairs it.
* ``lock`` takes the turn lock through the store that holds the session (its lock files,
  PostgreSQL advisory locks, its thread locks for memory), so the static store and that store
  exclude each other and a second ``lock`` from the holder is refused as re-entry whichever
  store it goes through; such a lock is released by its holder or by closing that store.
* ``meta_get``/``meta_set`` (the agent binding, the active-session map, the CLI pointer) live
  in this object's memory, like agentkit's sidecar map; nothing is persisted.
* ``delete`` of the session's id deletes the session in the store that holds it (its events,
  and its meta there and here), as deleting through that store would: the static store is a
  view of that session, not a copy. The object stays the store's session, and starts over
  from seq 1 when appended to again.

No URL scheme opens a static store: build it from a session. Closing it closes the session's
files or connections (the session reopens them when used again), never the store that holds
the session.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence

from ..catalog import CatalogDefaults, MetaInMemory, StoreParts
from ..contract import Capabilities, SessionInfo, check_session_id
from ..errors import SessionNotFound, UsageError
from ..events import Event
from ..locks import ThreadLocker
from ..session import BaseSession, SessionHost
from ..store import BaseStore

__all__ = ["StaticCatalog", "StaticStore"]


class StaticCatalog(CatalogDefaults):
    """The catalog of a :class:`StaticStore`: one session object, asked of the store that
    holds it (``host``, None when the session's host is not a store). Of
    :class:`~agentsession.catalog.CatalogDefaults` it keeps the listing's page, the id as
    cache key, and doing nothing for the rest of the life cycle: the session's store keeps
    its activity, cleans its own leftovers and handles forks, and closing the static store
    leaves to the store's cache to close the session object (which reopens its files or
    connections when used again), never the store that holds the session."""

    def __init__(
        self, session: BaseSession, host: BaseStore | None, meta: MetaInMemory, any_id: bool
    ) -> None:
        self.session = session
        """The one session."""
        self._session = session
        self._host = host
        self._meta = meta
        self.any_id = any_id
        """Whether every id names the session (the lenient rule)."""

    @property
    def location(self) -> str:
        """``static:`` and where the session is stored."""
        return f"static:{self._session.location}"

    @property
    def url(self) -> str:
        """The URL of the store that holds the session (opening it gives that whole store,
        not this view of one session)."""
        if self._host is None:
            raise UsageError("a static store has no URL: build it from a session")
        return self._host.url

    def _names_session(self, session_id: str) -> bool:
        return self.any_id or session_id == self._session.id

    def resolve(self, session_id: str, purpose: str) -> str:
        """The session's id for ``""``, the session's id, or (``any_id``) any id; another id
        is :class:`SessionNotFound` to open, a :class:`UsageError` to create, and its own to
        lock (the lock of that id in the session's store)."""
        if session_id == "" and purpose != "create":
            return self._session.id
        sid = check_session_id(session_id)
        if self._names_session(sid):
            return self._session.id
        if purpose == "lock":
            return sid
        if purpose == "create":
            raise UsageError(
                f"a static store holds only session {self._session.id!r}; it cannot create "
                f"{sid!r}"
            )
        raise SessionNotFound(
            sid, f"session not found: {sid!r} (the static store holds only {self._session.id!r})"
        )

    def open_session(self, store: SessionHost, session_id: str) -> BaseSession:
        return self._session

    def exists(self, session_id: str) -> bool:
        if not self._names_session(session_id):
            return False
        if self._host is None:
            return self._session.latest_seq > 0
        return self._host.exists(self._session.id)  # asked of storage, not of the object

    def _last_event(self) -> Event | None:
        latest = self._session.latest_seq
        found = self._session.read(after=latest - 1, limit=1) if latest else []
        return found[-1] if found else None

    def list_all(self) -> list[SessionInfo]:
        last = self._last_event() if self.exists(self._session.id) else None
        if last is None:
            return []
        return [SessionInfo(id=self._session.id, updated_at=last.time, last_seq=last.seq)]

    def expired_ids(self, cutoff: _dt.datetime) -> list[str]:
        """The session when its last event is before ``cutoff`` (one read of it)."""
        last = self.last_append(self._session.id)
        return [self._session.id] if last is not None and last < cutoff else []

    def last_append(self, session_id: str) -> _dt.datetime | None:
        if not self._names_session(session_id):
            return None
        last = self._last_event()
        return None if last is None else last.time

    def delete(self, session_id: str, meta_kinds: Sequence[str]) -> bool:
        """Deletes the session in the store that holds it, and its meta here."""
        if not self._names_session(session_id):
            return False
        for kind in meta_kinds:
            self._meta.set(kind, session_id, None)
            self._meta.set(kind, self._session.id, None)
        if self._host is None:
            raise UsageError(
                f"session {self._session.id!r} has no store to delete it from "
                f"(its host is a {type(self._session.plans.host).__name__})"
            )
        return self._host.delete(self._session.id)


class StaticStore(BaseStore):
    """A store whose one session is ``session`` (any backend's); see the module docstring.

    ``any_id=True`` makes every id name that session (agentkit's lenient rule); by default an
    id other than ``""`` and ``session.id`` is :class:`~agentsession.errors.SessionNotFound`.
    The store's ``ttl`` and ``clock`` are those of the store that holds the session.
    """

    capabilities = Capabilities()

    def __init__(self, session: BaseSession, *, any_id: bool = False) -> None:
        if not isinstance(session, BaseSession):
            raise UsageError(
                f"a static store needs a session object, not {type(session).__name__}"
            )
        holder = session.plans.host
        host = holder if isinstance(holder, BaseStore) else None
        meta = MetaInMemory()
        catalog = StaticCatalog(session, host, meta, any_id)
        parts = StoreParts(
            catalog, meta, locker=ThreadLocker if host is None else None, lock_through=host
        )
        super().__init__(parts, durability=holder.durability, ttl=holder.ttl, clock=holder.clock)
        self._static = catalog

    @property
    def session(self) -> BaseSession:
        """The one session."""
        return self._static.session

    @property
    def any_id(self) -> bool:
        """Whether every id names the session (the lenient rule)."""
        return self._static.any_id

    @any_id.setter
    def any_id(self, value: bool) -> None:
        self._static.any_id = value
