"""Branches: a session whose history starts with another's, up to a seq, without copying it.

``session.branch(at_seq=..., at_turn=..., id=...)`` creates a session whose own log holds one
event, a ``session/branch`` marker (:class:`~agentsession.events.SessionBranch`) naming the
origin and the seq; the branch then diverges with its own appends. The branch presents one
log: seqs ``1..origin_seq`` are the origin's events (read from the origin, with the origin's
key on an encrypted store), the marker reads back at ``origin_seq + 1`` and its own events
follow. Its derived history is the origin's as it stood right after ``origin_seq`` (rewinds
and compactions up to there included), continued by its own events, and a rewind in the
branch may go back into the shared part (to the latest compaction, as anywhere).

How it is stored: the branch's own log storage keeps its events at its own seqs (the marker
at 1); :class:`ShiftedLog` wraps that storage once the session has read the marker, adding
``origin_seq`` to every seq it hands up and taking it off every seq it is handed (the events
are sealed at their own seqs: :attr:`agentsession.crypto.SessionCipher.seq_offset`). Reads
before ``origin_seq + 1`` are the origin's (:meth:`agentsession.BaseSession.read`), so
opening a branch and reading its latest events reads none of the origin's, and a branch of
a long session stores one small event until it diverges.

The origin's branches are listed in the store's meta (kind ``branches``, keyed by the
origin's id: the branch ids and seqs, changed by compare-and-set), for
``session.branches()``, and for ``store.delete``/``store.shred`` of an origin, which refuse
while it has branches unless ``recursive=True`` (which removes them first).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

import msgspec

from .errors import SessionError
from .events import Event
from .storage import LogStorage, LogView, Reopen

if TYPE_CHECKING:
    from .listing import CatalogChange

__all__ = [
    "BRANCHES_KIND",
    "BranchRef",
    "ShiftedLog",
    "BranchHost",
    "add_branch",
    "branch_refs",
    "branches_problem",
    "live_branches",
    "remove_branch",
    "shift",
]

BRANCHES_KIND: Final = "branches"
"""The meta kind of an origin's branch index (key: the origin's id)."""


class BranchRef(msgspec.Struct, frozen=True, array_like=True):
    """A session and a seq of it: a branch's origin (``branch.origin``), or one branch of a
    session (``session.branches()``)."""

    id: str
    """The session's id."""
    seq: int
    """The seq: where the branch's history leaves its origin's."""


_REFS = msgspec.json.Decoder(list[BranchRef])
_ENCODE = msgspec.json.Encoder()


def branch_refs(raw: str | None) -> list[BranchRef]:
    """The branches listed in an index value (empty when there is none or it is unreadable)."""
    if not raw:
        return []
    try:
        return _REFS.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return []


def _update(
    get: Callable[[str, str], str | None],
    cas: Callable[[str, str, str | None, str | None], bool],
    origin: str,
    change: Callable[[list[BranchRef]], list[BranchRef]],
) -> None:
    for _ in range(64):
        raw = get(BRANCHES_KIND, origin)
        refs = change(branch_refs(raw))
        new = _ENCODE.encode(refs).decode() if refs else None
        if new == raw or cas(BRANCHES_KIND, origin, raw, new):
            return
    raise RuntimeError(f"the branch index of session {origin!r} kept changing")


def add_branch(
    get: Callable[[str, str], str | None],
    cas: Callable[[str, str, str | None, str | None], bool],
    origin: str,
    ref: BranchRef,
) -> None:
    """List ``ref`` among ``origin``'s branches (once)."""
    _update(get, cas, origin, lambda refs: refs if ref in refs else [*refs, ref])


def remove_branch(
    get: Callable[[str, str], str | None],
    cas: Callable[[str, str, str | None, str | None], bool],
    origin: str,
    branch_id: str,
) -> None:
    """Take the branch ``branch_id`` off ``origin``'s list."""
    _update(get, cas, origin, lambda refs: [r for r in refs if r.id != branch_id])


class BranchHost(Protocol):
    """What the branch index needs of a store (a :class:`~agentsession.BaseStore`)."""

    def _meta_get(self, kind: str, key: str) -> str | None: ...

    def _meta_cas(self, kind: str, key: str, expected: str | None, new: str | None) -> bool: ...

    def exists(self, session_id: str) -> bool: ...

    def get(self, session_id: str) -> Any: ...


def live_branches(store: BranchHost, origin: str) -> list[BranchRef]:
    """``origin``'s branches: the entries of its index whose session exists and is that branch
    (its own marker, sealed on an encrypted store, names this origin and seq: the index is
    stored in clear, so an entry alone is never believed). Writes nothing: an entry not
    believed (a branch never written, or gone) is skipped, and a deleted branch takes its own
    entry off (:func:`remove_branch`)."""
    return [
        ref
        for ref in branch_refs(store._meta_get(BRANCHES_KIND, origin))
        if _is(store, origin, ref)
    ]


def _is(store: BranchHost, origin: str, ref: BranchRef) -> bool:
    """Whether ``ref`` is a branch of ``origin`` (a session that cannot be opened, shredded
    say, cannot show it is, and is not counted)."""
    try:
        return store.exists(ref.id) and store.get(ref.id).origin == BranchRef(origin, ref.seq)
    except SessionError:
        return False


def branches_problem(origin: str, branches: Sequence[BranchRef], remedy: str) -> str:
    """The error message of a delete or shred that would leave ``branches`` without the
    history they share with ``origin``."""
    shown = ", ".join(repr(ref.id) for ref in branches[:5])
    more = f" and {len(branches) - 5} more" if len(branches) > 5 else ""
    return (
        f"session {origin!r} has {len(branches)} branch(es) reading their history from it "
        f"({shown}{more}): {remedy} them too; nothing done"
    )


def shift(events: Sequence[Event], base: int) -> list[Event]:
    """``events`` with ``base`` added to their seqs."""
    replace = msgspec.structs.replace
    return [replace(event, seq=event.seq + base) for event in events]


class _ShiftedView:
    """The session's view as its own log storage knows it: seqs without the shared part."""

    __slots__ = ("_base", "_view")

    def __init__(self, view: LogView, base: int) -> None:
        self._view = view
        self._base = base

    @property
    def id(self) -> str:
        return self._view.id

    @property
    def seen_seq(self) -> int:
        return max(self._view.seen_seq - self._base, 0)

    def admits(self, foreign: Sequence[Event], events: Sequence[Event]) -> bool:
        return self._view.admits(shift(foreign, self._base), events)

    def indexed(self, stored: Sequence[Event]) -> CatalogChange | None:
        # The catalog and documents of a branch carry the seqs its reader presents; ``shared``
        # says how to take them back to its own storage's.
        return self._shared(self._view.indexed(shift(stored, self._base)))

    def indexed_since(self, after: int, stored: Sequence[Event]) -> CatalogChange | None:
        # ``after``: a seq the catalog holds, as the reader presents it.
        return self._shared(self._view.indexed_since(after, shift(stored, self._base)))

    def _shared(self, change: CatalogChange | None) -> CatalogChange | None:
        if change is None:
            return None
        return msgspec.structs.replace(change, shared=self._base)

    def catalog_due(self, kinds: Sequence[str], first: int, last: int) -> bool:
        return self._view.catalog_due(kinds, first + self._base, last + self._base)


class ShiftedLog:
    """A branch's own log storage, its seqs shifted past the history it shares with its
    origin (``base``, the origin seq): what it hands up has ``base`` added, what it is handed
    has ``base`` taken off. Reads before ``base`` return only the branch's own events (the
    shared part is read from the origin by the session). Backend-specific attributes are the
    wrapped storage's (:attr:`inner`)."""

    def __init__(self, inner: LogStorage, base: int) -> None:
        self.inner = inner
        """The branch's own log storage."""
        self.base = base
        """The origin seq the branch's own events come after."""
        self._views: tuple[LogView, _ShiftedView] | None = None

    def _view(self, view: LogView) -> _ShiftedView:
        cached = self._views
        if cached is not None and cached[0] is view:
            return cached[1]
        shifted = _ShiftedView(view, self.base)
        self._views = (view, shifted)
        return shifted

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    @property
    def location(self) -> str:
        return self.inner.location

    @property
    def identity(self) -> tuple[str, ...]:
        return self.inner.identity

    def open(self, view: LogView) -> tuple[list[Event], bool]:
        events, complete = self.inner.open(self._view(view))
        return shift(events, self.base), complete

    def open_tail(self, view: LogView) -> tuple[list[Event], bool]:
        events, complete = self.inner.open_tail(self._view(view))
        return shift(events, self.base), complete

    def append(
        self, view: LogView, events: list[Event], marker: int, expect_seq: int | None
    ) -> tuple[list[Event], list[Event]] | Reopen:
        expect = None if expect_seq is None else expect_seq - self.base
        if expect is not None and expect < 0:
            return [], []  # expects a seq of the shared part: the log is past it
        result = self.inner.append(self._view(view), events, marker, expect)
        if isinstance(result, Reopen):
            return result
        foreign, stored = result
        return shift(foreign, self.base), shift(stored, self.base)

    def append_one(self, view: LogView, event: Event, marker: bool) -> Event | None:
        stored = self.inner.append_one(self._view(view), event, marker)
        if stored is None:
            return None
        return msgspec.structs.replace(stored, seq=stored.seq + self.base)

    def refresh(self, view: LogView) -> list[Event] | Reopen:
        result = self.inner.refresh(self._view(view))
        if isinstance(result, Reopen):
            return result
        return shift(result, self.base)

    def read(self, after: int, limit: int | None) -> list[Event]:
        return shift(self.inner.read(max(after - self.base, 0), limit), self.base)

    def quarantine(self, event: Event, reason: str) -> bool:
        own = msgspec.structs.replace(event, seq=event.seq - self.base)
        return self.inner.quarantine(own, reason)

    def close(self) -> None:
        self.inner.close()

    def after_fork(self) -> None:
        self.inner.after_fork()
