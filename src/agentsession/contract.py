"""The contracts every store and session keeps, and the plain records they return.

A leaf module: it imports only the data model (events, messages, errors, locks), so everything
else can depend on it without cycles. Backends subclass :class:`~agentsession.session.BaseSession`
and :class:`~agentsession.store.BaseStore`, which implement these protocols once; code that only
uses a store (recovery, the chat layer, adapters) types against :class:`Store` and
:class:`Session`.
"""

from __future__ import annotations

import builtins
import datetime as _dt
from collections.abc import Mapping, Sequence
from typing import Literal, Protocol, runtime_checkable

import msgspec

from .context import AgentFilter
from .errors import UsageError
from .events import Event
from .fencing import Lease
from .listing import Page, UsageTotals
from .messages import Message, ToolCall

__all__ = [
    "Capabilities",
    "Durability",
    "IncompleteTurn",
    "RecoveryReport",
    "RecoveryStatus",
    "Session",
    "SessionInfo",
    "Store",
    "StoreRecoveryReport",
    "check_session_id",
]

Durability = Literal["flush", "fsync"]
"""What an acknowledged append survives.

``flush``: the data is in the operating system (or committed on the database server) before
``append`` returns, so it survives the process crashing or being killed. ``fsync``: it is also
on stable storage, so it survives a power loss or kernel crash, at the cost of a disk sync per
append.
"""


class Capabilities(msgspec.Struct, frozen=True, kw_only=True):
    """What a backend's I/O costs, declared by its store class (``capabilities``, a class
    attribute of :class:`~agentsession.store.BaseStore`) for the async API
    (:mod:`agentsession.aio`), which runs on the event loop only what cannot wait for long and
    everything else in worker threads or natively. The default, every flag off, is the safe
    one: worker threads. A subclass inherits its base's declaration; one that makes an
    operation costlier (a slower medium, a network hop) declares its own."""

    in_memory: bool = False
    """Nothing waits for storage: every operation may run on the loop, except those that may
    call lifecycle hooks, wait for turn locks (recovery) or burn CPU (a passphrase change)."""
    inline_appends: bool = False
    """An append at durability ``flush`` to a plain (not encrypted) session is one cheap
    write (JSONL: one ``write()`` to the page cache), so it may run on the loop; a user
    message runs there only when the session's full window is in memory (the history cap
    plans from it)."""
    inline_reads: bool = False
    """Catching up with other writers is cheap (JSONL: one ``lseek``, and a read of their new
    lines), so a read the session's in-memory window answers may run on the loop."""
    native_async: bool = False
    """The store has async I/O of its own, which the async API opens through
    :meth:`~agentsession.store.BaseStore.async_backend` (PostgreSQL: psycopg's async pool)."""


class SessionInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A session as ``Store.list()`` reports it: what the backend keeps, without reading the
    session's events (see ``docs/architecture.md`` for what each backend keeps)."""

    id: str
    """The session id."""
    updated_at: _dt.datetime | None = None
    """Time of the last append (UTC), when the backend knows it cheaply."""
    created_at: _dt.datetime | None = None
    """Time of the first event (UTC), when the backend knows it cheaply."""
    size: int = 0
    """Bytes used in storage, when the backend knows it (0 otherwise)."""
    last_seq: int = -1
    """Highest seq, which is also the number of events (seqs are gap-free); -1 when the
    backend does not know it cheaply."""
    title: str = ""
    """The title: set by ``session.update(title=...)``, else the first user message's text,
    shortened (``docs/catalog.md``)."""
    tags: tuple[str, ...] = ()
    """Tags set by ``session.update(tags=...)``."""
    user: str = ""
    """The user: set by ``session.update(user=...)``, else the first event's ``user``."""
    tenant: str = ""
    """The tenant, set by ``session.update(tenant=...)``."""
    agents: tuple[str, ...] = ()
    """The agents whose events the session holds, in order of first appearance."""
    status: str = "idle"
    """``live`` (a turn is open and its turn lock held), ``idle``, ``needs_recovery`` (a turn
    is open and nobody holds its lock), ``shredded`` or ``archived``."""
    messages: int = 0
    """User and assistant messages."""
    turns: int = 0
    """Turns started."""
    usage: UsageTotals = UsageTotals()
    """Tokens and cost of its usage events."""

    def __repr__(self) -> str:
        # What the session's content says (the title is its first user message's text; a
        # user, tenant or tag may name someone) is not shown: a repr ends up in logs.
        hidden = ("title", "tags", "user", "tenant")
        shown = ", ".join(
            f"{name}=<hidden>" if name in hidden and getattr(self, name) else
            f"{name}={getattr(self, name)!r}"
            for name in self.__struct_fields__
        )
        return f"SessionInfo({shown})"


def check_session_id(session_id: object) -> str:
    """``session_id`` when it is a usable id; :class:`UsageError` otherwise."""
    if not isinstance(session_id, str):
        raise UsageError(f"session id must be a string, not {type(session_id).__name__}")
    if not session_id.strip():
        raise UsageError("session id is required (got an empty or blank string)")
    return session_id


@runtime_checkable
class Session(Protocol):
    """One conversation's append-only event log."""

    @property
    def id(self) -> str:
        """The session id."""

    @property
    def latest_seq(self) -> int:
        """Highest seq in the log (0 when empty)."""

    def append(self, event: Event) -> int:
        """Append one event; returns its seq."""

    def append_many(
        self, events: Sequence[Event], *, expect_seq: int | None = None
    ) -> list[int]:
        """Append a batch atomically (all or nothing, consecutive seqs); returns the seqs.
        With ``expect_seq``, only when the log's latest seq is that number (else
        :class:`~agentsession.errors.ConflictError`)."""

    def read(self, after: int = 0, limit: int | None = None) -> list[Event]:
        """Events with ``seq > after`` in seq order, at most ``limit`` of them."""

    def messages(
        self, agent: AgentFilter = None, *, max_tool_result_bytes: int | None = None
    ) -> list[Message]:
        """The provider-valid, compaction-aware history (see :mod:`agentsession.derive`);
        ``agent`` filters it (:data:`~agentsession.context.FROM_ENVELOPE`: by the chat turn
        envelope's agent), ``max_tool_result_bytes`` cuts longer tool results to that size."""

    def compact(
        self,
        summary: Message | str | None,
        *,
        keep_turns: int | None = None,
        first_kept_seq: int | None = None,
        up_to_message: int | None = None,
        tokens_before: int = 0,
        agent: str | None = None,
        summary_role: Literal["user", "system"] = "user",
    ) -> int | None:
        """Replace the history before a turn boundary by ``summary`` (the cut given as turns
        kept, a first kept seq, or the index in ``messages()`` of the last message replaced);
        the marker's seq, or None when there is nothing to drop. A text summary is a user
        message, or with ``summary_role="system"`` lango's ``[Compacted Summary]`` row."""


@runtime_checkable
class Store(Protocol):
    """Opens sessions by id and owns what spans sessions."""

    def get(self, session_id: str) -> Session:
        """The session with this id (it exists once something is appended)."""

    def open(self, session_id: str) -> Session:
        """The session with this id, which must exist
        (:class:`~agentsession.errors.SessionNotFound` otherwise)."""

    def create(
        self,
        session_id: str,
        events: Sequence[Event] = (),
        *,
        agent_id: str | None = None,
        channel_type: str | None = None,
        channel_id: str | None = None,
        model: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Session:
        """A new session holding ``events``, with its record's fields when given
        (:class:`~agentsession.errors.DuplicateSession` when it exists); without events,
        only its record."""

    def exists(self, session_id: str) -> bool:
        """Whether the session has at least one event."""

    def list(
        self,
        prefix: str | None = None,
        limit: int | None = None,
        offset: int = 0,
        *,
        where: Mapping[str, object] | None = None,
        order: str = "updated",
        cursor: str | None = None,
    ) -> Page[SessionInfo]:
        """Sessions, most recently appended first (a page of them, filtered by ``where``:
        :meth:`agentsession.BaseStore.list`)."""

    def delete(self, session_id: str, *, recursive: bool = False) -> bool:
        """Delete a session (with ``recursive``, its child sessions first); returns whether it
        existed."""

    def lock(
        self,
        session_id: str,
        timeout: float | None = None,
        ttl: float | None = None,
        steal_after: float | None = None,
    ) -> Lease:
        """Take the session's turn lock: a lease with a fencing epoch (a context manager)."""

    def is_locked(self, session_id: str) -> bool:
        """Whether some thread or process holds the session's turn lock now."""

    def recover(
        self,
        session_ids: Sequence[str] | None = None,
        *,
        lock_timeout: float = 0.0,
        dry_run: bool = False,
    ) -> builtins.list[StoreRecoveryReport]:
        """Repair every crashed turn whose turn lock is free (with ``dry_run``, only report
        them as ``pending``, writing nothing)."""

    def meta_get(self, namespace: str, key: str) -> str | None:
        """A small persisted value, or None."""

    def meta_set(self, namespace: str, key: str, value: str | None) -> None:
        """Store a small value atomically (None removes it)."""

    def close(self) -> None:
        """Release every resource the store holds."""


# ---------------------------------------------------------------------------------------------
# What crash recovery finds and does (see agentsession.recovery).


class IncompleteTurn(msgspec.Struct, frozen=True, kw_only=True):
    """A turn that has a ``turn/start`` and no ``turn/end``."""

    turn_start_seq: int
    """Seq of the turn's ``turn/start``."""
    agent: str
    """The agent whose turn it is (may be empty)."""
    steps_started: int = 0
    """``step/start`` events of the turn."""
    steps_ended: int = 0
    """``step/end`` events of the turn."""
    open_step: int = -1
    """Number of the step left open, or -1 when none is."""
    orphan_calls: list[ToolCall] = []
    """The turn's tool calls that have no result, in call order."""

    @property
    def steps_after_repair(self) -> int:
        """Steps the turn has once repaired: those ended plus the open step the repair closes."""
        return self.steps_ended + (1 if self.open_step >= 0 else 0)


class RecoveryReport(msgspec.Struct, frozen=True, kw_only=True):
    """What repairing one turn wrote (or, with ``repaired`` False, would need to write)."""

    session_id: str
    """The session."""
    turn_start_seq: int = 0
    """Seq of the turn's ``turn/start`` (0 when there was no turn)."""
    agent: str = ""
    """The turn's agent."""
    orphan_results: int = 0
    """Interrupted results for unanswered calls."""
    closed_step: int = -1
    """The step closed with ``step/end``, or -1 when none was open."""
    steps: int = 0
    """The ``steps`` written in ``turn/end``, the closed step included."""
    repaired: bool = False
    """True when this call appended the repair; False when nothing was written (no turn, the
    turn was already closed, or its session is live)."""
    recovery_seq: int = 0
    """Seq of the ``session/recovery`` event written, or 0 when nothing was written."""


RecoveryStatus = Literal["clean", "repaired", "pending", "live", "expired", "shredded", "damaged"]
"""How :func:`recover_store` found a session.

``clean``: no incomplete turn (also a session with no events). ``repaired``: its incomplete
turns were closed. ``pending`` (only with ``dry_run=True``, which writes nothing): it has an
incomplete turn and its turn lock is free, so a repair would close it. ``live``: it has an
incomplete turn but its turn lock is held, so the turn may still be running; it was left alone.
``expired``: the store's TTL has run out for it, so it can be neither read nor repaired
(reported only when asked for by id). ``shredded`` (since revision 4): the session was shredded
(``store.shred``), so it can be neither read nor repaired (reported only when asked for by id).
``damaged``: the session could not be read or repaired (a corrupt log, an unreadable file, a
database error, a sealed event that does not open); ``error`` says why, and the pass went on
with the other sessions.
"""


class StoreRecoveryReport(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`recover_store` found and did in one session."""

    session_id: str
    """The session."""
    status: RecoveryStatus
    """``clean``, ``repaired``, ``pending``, ``live``, ``expired``, ``shredded`` or
    ``damaged`` (see :data:`RecoveryStatus`)."""
    turns: list[RecoveryReport] = []
    """One report per incomplete turn, earliest first: written for ``repaired``; for
    ``pending`` and ``live``, what a repair would write (``repaired`` False)."""
    error: str = ""
    """For ``damaged``: what went wrong (the error's message)."""


