"""The narrow storage contract a backend implements for one session's log, by composition.

A backend hands the session a :class:`LogStorage` object (``BaseSession(store, id, log)``); it
does not subclass the session. The session's plans (:mod:`agentsession.ops`) ask it for
exactly these operations and nothing else; it never stamps, validates or decodes a payload, and
never touches the session's window, ids or derived history.

What the storage may know of the session is a :class:`LogView`: the latest seq the session has
taken in and the id check it must make under its write lock (:meth:`LogView.admits`).

**Lives.** A log can be deleted and created again under a session object. The storage names
that as a value instead of reaching into the session: :meth:`LogStorage.refresh` and
:meth:`LogStorage.append` return :data:`REOPEN` when the log the session read is gone (deleted,
perhaps created again), having written nothing; the session then forgets what it held, opens the
log again at its tail and (for an append) tries again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

from .events import Event

if TYPE_CHECKING:
    from .listing import CatalogChange

__all__ = ["ARCHIVED", "REOPEN", "DiscardingLog", "LogStorage", "LogView", "Reopen"]


class Reopen:
    """The type of :data:`REOPEN`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "REOPEN"


REOPEN: Final = Reopen()
"""What :meth:`LogStorage.refresh` and :meth:`LogStorage.append` return when the log the
session read is gone (deleted, perhaps created again): nothing was written, and the session
opens the log again."""


ARCHIVED: Final = "agentsession/archived"
"""The type of the stub a log storage may keep in an archived event's place (the memory
backend does); a log storage never returns one from a read."""


class LogView(Protocol):
    """What a log storage may know of the session it serves."""

    @property
    def id(self) -> str:
        """The session id."""
        ...

    @property
    def seen_seq(self) -> int:
        """The latest seq the session has taken in (0: none)."""
        ...

    def admits(self, foreign: Sequence[Event], events: Sequence[Event]) -> bool:
        """Whether ``events`` may be written after the other writers' events ``foreign`` (none
        of their ids is stored): asked under the storage's write lock, after catching up."""
        ...

    def indexed(self, stored: Sequence[Event]) -> CatalogChange | None:
        """What the batch ``stored`` (as the storage stores it, with its seqs) changes in the
        store's catalog and search index (None: the store keeps none): a backend that keeps
        its index in the log's storage applies it where it stores the batch, atomically with
        it (``docs/catalog.md``)."""
        ...

    def catalog_due(self, kinds: Sequence[str], first: int, last: int) -> bool:
        """Whether a backend whose catalog catches up from the logs by itself (the JSONL
        store's change journal) must tell it about a batch of events of types ``kinds``
        stored as seqs ``first`` to ``last``: always, unless the store takes the catalog at
        turn boundaries (:attr:`Indexing.deferred <agentsession.indexing.Indexing.deferred>`)
        and the batch is inside a turn this session object opened (the catalog then finds
        the rest of the turn by itself, or is told at its end)."""
        ...

    def indexed_since(self, after: int, stored: Sequence[Event]) -> CatalogChange | None:
        """What every event after seq ``after`` up to and with the batch ``stored`` changes in
        the catalog: for a backend whose catalog row is at ``after`` when the change
        :meth:`indexed` gave does not continue it (the session object has the events in
        between in memory; None: it has not, or the store keeps no catalog)."""
        ...


class LogStorage(Protocol):
    """One session's log in a backend (see the module docstring). Every method is called
    with the session's lock held, so one storage object never runs two calls at once."""

    @property
    def location(self) -> str:
        """Where the log is stored, for people (a path, a URL, ``memory``)."""
        ...

    @property
    def identity(self) -> tuple[str, ...]:
        """What identifies the stored log within this process (equal for two storage objects
        of one log)."""
        ...

    def open(self, view: LogView) -> tuple[list[Event], bool]:
        """The full window: events from the latest compaction marker (that rebuilds the
        history) to the end, and whether that is the whole log."""
        ...

    def open_tail(self, view: LogView) -> tuple[list[Event], bool]:
        """The latest events (at least the last one when the log has any), found without
        reading the log from the start, and whether they are the whole log."""
        ...

    def append(
        self, view: LogView, events: list[Event], marker: int, expect_seq: int | None
    ) -> tuple[list[Event], list[Event]] | Reopen:
        """Store ``events`` (seq 0, stamped) atomically after what is stored now; returns the
        events other writers appended since ``view.seen_seq``, then the stored events with
        their seqs (empty: nothing written, because ``expect_seq`` did not match the stored
        latest seq or ``view.admits`` refused). ``marker`` is the
        index of the last compaction marker in the batch that rebuilds the history (-1:
        none). :data:`REOPEN`: the log the view read is gone; nothing written."""
        ...

    def append_one(self, view: LogView, event: Event, marker: bool) -> Event | None:
        """The optional fast path for one event: store it at ``view.seen_seq + 1`` when
        nothing was appended since, and return it with its seq; None (nothing written) to take
        the general path."""
        ...

    def refresh(self, view: LogView) -> list[Event] | Reopen:
        """The events other writers appended after ``view.seen_seq``; :data:`REOPEN` when the
        log the view read is gone."""
        ...

    def read(self, after: int, limit: int | None) -> list[Event]:
        """Stored events with ``seq > after``, in order, at most ``limit`` (None: all)."""
        ...

    def quarantine(self, event: Event, reason: str) -> bool:
        """Move an unsealed event of an encrypted store out of the log, where the store is
        opened to quarantine what is corrupt; True when it was (False: the storage does not)."""
        ...

    def close(self) -> None:
        """Release files or connections (the log reopens them when used again)."""
        ...

    def after_fork(self) -> None:
        """In a forked child, before any use: stop sharing descriptors, connections and locks
        with the parent."""
        ...


@runtime_checkable
class DiscardingLog(Protocol):
    """A log storage that can drop archived events from the live log (every built-in backend's
    does; ``docs/retention.md``). The store calls it only once the events are archived and the
    archive's index says so: what a crash leaves is the old log or the new one, never a gap."""

    def discard_through(self, seq: int) -> tuple[int | None, int | None]:
        """Drop every stored event with a seq up to ``seq`` (the last event of the log is always
        kept), atomically; returns the live log's stored size before and after, in bytes
        (None where the backend keeps no size)."""
        ...
