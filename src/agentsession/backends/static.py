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
import threading
from collections.abc import Sequence
from typing import Any

from ..contract import Capabilities, SessionInfo, check_session_id
from ..errors import SessionNotFound, UsageError
from ..events import Event
from ..locks import Locker, ThreadLocker, TurnLock
from ..session import BaseSession
from ..store import BaseStore
from .memory import MetaInMemory

__all__ = ["StaticStore"]


class StaticStore(MetaInMemory, BaseStore):
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
        host = session._store
        super().__init__(durability=host.durability, ttl=host.ttl, clock=host.clock)
        self._session = session
        self.any_id = any_id
        """Whether every id names the session (the lenient rule)."""
        self._meta: dict[tuple[str, str], str] = {}
        self._meta_lock = threading.Lock()

    @property
    def session(self) -> BaseSession:
        """The one session."""
        return self._session

    def _names_session(self, session_id: str) -> bool:
        return self.any_id or session_id == self._session.id

    def _resolve(self, session_id: str) -> str:
        """The session's id for ``""``, the session's id, or (``any_id``) any id; otherwise
        :class:`SessionNotFound`."""
        if session_id == "":
            return self._session.id
        sid = check_session_id(session_id)
        if not self._names_session(sid):
            raise SessionNotFound(
                sid,
                f"session not found: {sid!r} (the static store holds only "
                f"{self._session.id!r})",
            )
        return self._session.id

    def _lock_key(self, session_id: str) -> str:
        """The id the turn lock is taken under: the session's for every id that names it."""
        if session_id == "":
            return self._session.id
        sid = check_session_id(session_id)
        return self._session.id if self._names_session(sid) else sid

    # -- the Store API, where ids are mapped -----------------------------------------------

    def get(self, session_id: str) -> BaseSession:
        """The session, for ``""``, its id, or any id with ``any_id``; otherwise
        :class:`~agentsession.errors.SessionNotFound`."""
        self._check_open()
        return super().get(self._resolve(session_id))

    def open(self, session_id: str) -> BaseSession:
        """The session, which must have events (:class:`SessionNotFound` otherwise, and for an
        id that does not name it)."""
        self._check_open()
        return super().open(self._resolve(session_id))

    def create(self, session_id: str, events: Sequence[Event], **fields: Any) -> BaseSession:
        """Start the session with ``events`` (:class:`~agentsession.errors.DuplicateSession`
        when it has events); an id that does not name the session is a
        :class:`~agentsession.errors.UsageError`: a static store holds no other session."""
        self._check_open()
        sid = check_session_id(session_id)
        if not self._names_session(sid):
            raise UsageError(
                f"a static store holds only session {self._session.id!r}; it cannot create "
                f"{sid!r}"
            )
        return super().create(self._session.id, events, **fields)

    def _host_store(self) -> BaseStore | None:
        host = self._session._store
        return host if isinstance(host, BaseStore) else None

    def lock(self, session_id: str, timeout: float | None = None) -> TurnLock:
        """Take the turn lock (see :meth:`BaseStore.lock`) of the session through the store
        that holds it (``""`` and, with ``any_id``, every id take the session's)."""
        self._check_open()
        key = self._lock_key(session_id)
        host = self._host_store()
        return super().lock(key, timeout) if host is None else host.lock(key, timeout)

    def is_locked(self, session_id: str) -> bool:
        """Whether the turn lock of the session (or of the id) is held now."""
        self._check_open()
        key = self._lock_key(session_id)
        host = self._host_store()
        return super().is_locked(key) if host is None else host.is_locked(key)

    # -- backend primitives ----------------------------------------------------------------

    def _open_session(self, session_id: str) -> BaseSession:
        return self._session

    def _exists(self, session_id: str) -> bool:
        if not self._names_session(session_id):
            return False
        host = self._host_store()  # asked of storage, not of what the object remembers
        return self._session.latest_seq > 0 if host is None else host.exists(self._session.id)

    def _last_event(self) -> Event | None:
        latest = self._session.latest_seq
        found = self._session.read(after=latest - 1, limit=1) if latest else []
        return found[-1] if found else None

    def _list_all(self) -> list[SessionInfo]:
        if not self._exists(self._session.id):
            return []
        last = self._last_event()
        if last is None:
            return []
        return [SessionInfo(id=self._session.id, updated_at=last.time, last_seq=last.seq)]

    def _last_append(self, session_id: str) -> _dt.datetime | None:
        if not self._names_session(session_id):
            return None
        last = self._last_event()
        return None if last is None else last.time

    def _delete(self, session_id: str, meta_kinds: Sequence[str]) -> bool:
        if not self._names_session(session_id):
            return False
        with self._meta_lock:
            for kind in meta_kinds:
                self._meta.pop((kind, session_id), None)
                self._meta.pop((kind, self._session.id), None)
        host = self._host_store()
        if host is None:
            raise UsageError(
                f"session {self._session.id!r} has no store to delete it from "
                f"(its host is a {type(self._session._store).__name__})"
            )
        return host.delete(self._session.id)

    def _make_locker(self) -> Locker:
        return ThreadLocker()  # only for a session whose host is not a store

    @property
    def location(self) -> str:
        """``static:`` and where the session is stored."""
        return f"static:{self._session.location}"

    @property
    def url(self) -> str:
        """The URL of the store that holds the session (opening it gives that whole store,
        not this view of one session)."""
        host = self._host_store()
        if host is None:
            raise UsageError("a static store has no URL: build it from a session")
        return host.url
