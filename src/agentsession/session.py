"""``BaseSession``: one append pipeline and the in-memory window, shared by every backend.

A **session** is one conversation's append-only log. A backend implements a handful of storage
primitives (``_storage_*``, below) and nothing else: it never stamps, validates or decodes an
event's payload, never touches the window or the derived history, and never applies a policy.
Everything else is the session's, once: the window, the id index and the pipeline's plans in
:mod:`agentsession.core` (:class:`~agentsession.core.SessionCore`, which performs no I/O), and
here the sync facade that drives them (with a fast lane for the hot single append), the
storage delegates and the child sessions' methods. What the session does:

* **The append pipeline** (:meth:`BaseSession.append_many`, and :meth:`BaseSession.append` for
  one event): check and stamp the events (seq cleared, ``time`` set to the store's clock when
  unset), decide which event of the batch is a compaction marker that rebuilds the history
  (:attr:`agentsession.events.Compaction.rebuilds_history`, the only place that decides it),
  check the TTL, hand the batch to the backend, take in other writers' events that the backend
  caught up on, take in the stored batch, and apply the store's history cap. A backend may offer
  a single-event fast path (``_storage_append_one``); the pipeline drives it and falls back to
  the batch primitive whenever the fast path declines.
* **Conditional appends**: ``append_many(events, expect_seq=n)`` stores the batch only when the
  log's latest seq is ``n`` at the moment of writing (checked by the backend under its write
  lock); otherwise nothing is written and :class:`~agentsession.errors.ConflictError` is
  raised. Compaction and ``Store.create`` are built on it.
* **The window, loaded lazily**: opening a session reads only its tail (the last events, found
  without reading the log from the start), so ``latest_seq``, ``read()`` of recent events and
  appending cost O(tail) however long the log is. The first ``messages()``, ``entries()``,
  ``compact()`` or ``prune()`` loads the full window: every event from the latest compaction
  marker to the end (the whole log when there is none, so O(window)). ``read()`` serves from
  the window when it can and from storage otherwise; ``messages()`` derives from it, loading
  older events only when a legacy marker or another agent's history needs them.
* **Derived history**: one incremental :class:`~agentsession.derive.Deriver` per agent filter,
  fed only the new events.
"""

from __future__ import annotations

import datetime as _dt
import inspect
import os
import threading
import weakref
from collections.abc import Generator, Mapping, Sequence
from typing import Any, Literal, TypeVar, cast

from . import _trace, children, compaction, indexing
from .branching import BranchRef, ShiftedLog
from .branching import live_branches as _live_branches
from .context import AgentFilter, resolve_agent
from .core import (
    _ID_LIMIT,
    _RETRYABLE,
    ID_WINDOW,
    Clock,
    SessionCore,
    SessionHost,
    SessionPlans,
    _check_read,
    _replace,
    check_event,
)
from .crypto import is_sealed
from .derive import Deriver, IndexedMessage
from .errors import CorruptLogError, StorageError, UsageError
from .events import COMPACTION, USER_MESSAGE, Event, new_event_id
from .fencing import Lease
from .fencing import leases_here as _leases_here
from .follow import ChangeHub, Subscription
from .follow import follow as _follow
from .inbox import Delivery
from .inbox import pending as _pending
from .indexing import Fields
from .lease import HeldLease
from .media import StoragePolicy
from .messages import Message
from .ops import Plan, drive
from .recorder import Turn
from .rewind import again as _again
from .rewind import branch as _branch
from .rewind import rewind as _rewind
from .storage import DiscardingLog, LogStorage, Reopen

# ID_WINDOW, Clock, SessionHost, SessionPlans and check_event live in agentsession.core and are
# re-exported here, where other modules import them from.
__all__ = ["ID_WINDOW", "BaseSession", "Clock", "SessionHost", "SessionPlans", "check_event"]

T = TypeVar("T")


_live_sessions: weakref.WeakSet[BaseSession] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """In a forked child: no lock another parent thread held is held here, and every backend
    drops what it shared with the parent (descriptors, connections) before it is used."""
    for session in list(_live_sessions):
        session._lock = threading.RLock()
        session._storage_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class BaseSession(SessionCore):
    """One conversation's session: the pipeline's plans over a log storage.

    A backend makes it with the storage of the session's log (``BaseSession(store, id, log)``,
    a :class:`~agentsession.storage.LogStorage`), which it opens at once; the session's own
    behaviour is the same on every backend."""

    def __init__(self, store: SessionHost, session_id: str, log: LogStorage | None = None) -> None:
        self._log = log
        self._lock = threading.RLock()
        self._hub: ChangeHub = store._changes  # its followers, woken by this object's appends
        # The fast lane's lease lookup, kept while the context's current leases are the same.
        self._leases_seen: tuple[object, ...] = ()
        self._lease_found: HeldLease | None = None
        super().__init__(store, session_id)
        _live_sessions.add(self)
        if log is not None:
            with self._lock:
                self._load()

    # -- storage primitives ---------------------------------------------------------------
    #
    # A backend gives the session a LogStorage (agentsession.storage) when it makes it:
    # ``BaseSession(store, id, log)``; these methods hand each operation to it. (A backend may
    # still subclass the session and override them instead; see docs/architecture.md.)

    def _storage_open(self) -> tuple[list[Event], bool]:
        """Events from the latest compaction marker to the end, and whether that is the whole
        log: the full window. Called with the session lock held."""
        return self._required_log().open(self._view)

    def _storage_open_tail(self) -> tuple[list[Event], bool]:
        """Open the log cheaply: the latest events (at least the last one when the log has
        any; a small tail, in seq order), found without reading the log from the start, and
        whether they are the whole log. Called with the session lock held."""
        if self._log is None:
            return self._storage_open()
        return self._log.open_tail(self._view)

    def _storage_append(
        self, events: list[Event], marker: int, expect_seq: int | None
    ) -> tuple[list[Event], list[Event]] | Reopen:
        """Persist ``events`` (seq 0, time stamped) atomically after whatever is stored now
        (see :meth:`agentsession.storage.LogStorage.append`): returns the events other writers
        appended since this session last looked, then the stored events with their seqs
        (empty when nothing was written), or :data:`~agentsession.storage.REOPEN`. Called
        with the session lock held."""
        return self._required_log().append(self._view, events, marker, expect_seq)

    def _storage_append_one(self, event: Event, marker: bool) -> Event | None:
        """Optional fast path for one event: store it with seq ``latest_seq + 1`` when this
        session saw the log last, and return it with its seq; return None (having written
        nothing) to take the general path. Called with the session lock held."""
        if self._log is None:
            return None
        return self._log.append_one(self._view, event, marker)

    def _storage_refresh(self) -> list[Event] | Reopen:
        """Events other writers appended since this session last looked (or
        :data:`~agentsession.storage.REOPEN`)."""
        return self._required_log().refresh(self._view)

    def _storage_read(self, after: int, limit: int | None) -> list[Event]:
        """Events with ``seq > after`` from storage."""
        return self._required_log().read(after, limit)

    def _storage_discard_through(self, seq: int) -> tuple[int | None, int | None] | None:
        """Drop the archived events up to ``seq`` from the live log
        (:class:`~agentsession.storage.DiscardingLog`); None when the log storage cannot (a
        branch, or a backend without it). Called with the session lock held."""
        log = self._log
        if log is None or isinstance(log, ShiftedLog) or not isinstance(log, DiscardingLog):
            return None
        return log.discard_through(seq)

    def _storage_can_discard(self) -> bool:
        """Whether :meth:`_storage_discard_through` can drop events."""
        log = self._log
        return (
            log is not None and not isinstance(log, ShiftedLog) and isinstance(log, DiscardingLog)
        )

    def _storage_close(self) -> None:
        """Release backend resources (the session stays usable and reopens them)."""
        if self._log is not None:
            self._log.close()

    def _storage_after_fork(self) -> None:
        """In a forked child, before any use: stop sharing descriptors, connections and locks
        with the parent (reopen them lazily)."""
        if self._log is not None:
            self._log.after_fork()

    def _shift_log(self, base: int) -> None:
        """Compose the log storage for a branch whose shared history ends at ``base`` (0: not
        a branch): :class:`~agentsession.branching.ShiftedLog` around the backend's."""
        log = self._log
        inner = log.inner if isinstance(log, ShiftedLog) else log
        if inner is None:
            if base:
                raise UsageError(
                    f"{type(self).__name__} stores without a log storage: it cannot hold a "
                    "branch"
                )
            return
        self._log = ShiftedLog(inner, base) if base else inner

    def _origin_read(self, origin: str, after: int, count: int) -> list[Event]:
        """A branch's shared history: ``count`` events of ``origin`` after seq ``after``, as
        the origin reads them (its key, its own shared history when it is a branch too)."""
        if origin == self._id:
            raise CorruptLogError(
                f"session {self._id!r} names itself as its branch origin", session_id=self._id
            )
        events: list[Event] = self._store.get(origin).read(after, count)
        if len(events) != count or (events and events[-1].seq != after + count):
            raise CorruptLogError(
                f"session {self._id!r} is a branch of {origin!r} up to seq {self._base}, "
                f"whose events {after + 1}..{after + count} are gone (deleted or replaced)",
                session_id=self._id,
            )
        return events

    def _required_log(self) -> LogStorage:
        log = self._log
        if log is None:
            raise NotImplementedError(
                f"{type(self).__name__} has no log storage: pass one to BaseSession(store, id, "
                "log) or override the _storage_* methods"
            )
        return log

    @property
    def location(self) -> str:
        """Where the session is stored, for people (a path, a URL, ``memory``)."""
        return self._required_log().location

    @property
    def log_identity(self) -> tuple[str, ...]:
        """What identifies the stored log within this process: two session objects of one log
        (from two store objects, say) have equal identities."""
        if self._log is not None:
            return self._log.identity
        return (type(self).__name__, self.location, self._id)

    # -- in-memory state, read without I/O (the async API's placement) --------------------

    @property
    def encrypted(self) -> bool:
        """Whether this session's events are sealed (its store is encrypted)."""
        return self._cipher is not None

    @property
    def plans(self) -> SessionPlans:
        """This session's pipeline as plans, for a driver other than the sync API's (see
        :class:`SessionPlans`)."""
        return SessionPlans(self)

    @property
    def state_lock(self) -> threading.RLock:
        """The lock guarding this object's in-memory state (its window, ids and derived
        histories); every method holds it while it reads or changes that state. Code that
        decides from that state where a call runs (the async API) holds it meanwhile, taken
        without waiting (``acquire(blocking=False)``), so the state stays as read until the
        call has run. Never wait for it on an event loop: a thread may hold it across I/O."""
        return self._lock

    @property
    def window_loaded(self) -> bool:
        """Whether the full window (every event from the latest compaction marker that
        rebuilds the history, or from seq 1) is in memory, so that deriving the history or
        applying the history cap reads nothing more from storage. Read it holding
        :attr:`state_lock`, or as a hint."""
        return self._full

    def window_holds(self, after: int) -> bool:
        """Whether the in-memory window holds every event with ``seq > after``, so that
        ``read(after)`` reads nothing from storage once caught up with other writers. Read it
        holding :attr:`state_lock`, or as a hint."""
        return after + 1 >= self._window_start

    def history_in_memory(self, agent: str | None = None) -> bool:
        """Whether ``messages(agent)`` and ``entries(agent)`` are derived from memory once
        caught up with other writers: the full window is loaded and is the whole log, or the
        history of this agent filter was derived before. Read it holding :attr:`state_lock`,
        or as a hint."""
        return self._full and (
            (self._window_start == 1 and not self._base) or (agent or None) in self._derivers
        )

    # -- drivers --------------------------------------------------------------------------

    def _run(self, plan: Plan[T]) -> T:
        """Run a plan of this session with the sync driver, under the session lock."""
        with self._lock:
            return drive(plan, self)

    def _meta(self, kind: str, key: str) -> str | None:
        """The store's meta value (``kind``, ``key``), for :class:`~agentsession.ops.MetaGet`."""
        return self._store._meta_get(kind, key)

    def _meta_add(self, kind: str, key: str, value: str) -> str:
        """The store's meta ``add`` (``value`` unless the entry has one; returns what is
        stored), for :class:`~agentsession.ops.MetaAdd`."""
        return self._store._meta_add(kind, key, value)

    # -- state ----------------------------------------------------------------------------

    def _load(self) -> None:
        """(Re)open the log at its tail: :meth:`_load_plan`, driven synchronously."""
        self._run(self._load_plan())

    def _quarantine_unsealed(self, event: Event, reason: str) -> bool:
        """Move ``event`` (read from storage, not sealed though the store is encrypted) out
        of the log, when the store is opened to quarantine what is corrupt; True when it was
        (:meth:`agentsession.storage.LogStorage.quarantine`; only the JSONL store has
        ``on_corrupt``)."""
        return self._log is not None and self._log.quarantine(event, reason)

    def _refresh(self) -> None:
        """Catch up with other writers' appends: the sync lane of :meth:`_refresh_plan` (the
        operation made here, what it read taken in by the same :meth:`_take_in`). Called with
        the session lock held."""
        events = self._storage_refresh()
        if events:
            if isinstance(events, Reopen):
                drive(self._reopen(), self)
            elif self._cipher is None and not is_sealed(events[-1]) and not is_sealed(events[0]):
                self._ingest(events)
            else:
                drive(self._take_in(events), self)

    # -- the append pipeline --------------------------------------------------------------

    def append(self, event: Event) -> int:
        """Append one event; returns its seq. ``time`` is stamped (UTC) when unset."""
        if _trace.enabled:
            with _trace.span(
                "agentsession.append",
                session_id=self._id,
                backend=_trace.backend_of(self),
                events=1,
                event_type=event.type if isinstance(event, Event) else None,
            ):
                seq = self._append_one(event)
        else:
            seq = self._append_one(event)
        if self._hub.followed:  # wake this store object's followers at once
            self._hub.notify(self._id)
        return seq

    def _append_one(self, event: Event) -> int:
        """:meth:`append` without tracing: :meth:`_append_one_plan`, driven synchronously.

        The sync driver's fast lane: when the plan would do nothing but the single-event
        operation (a plain session that has seen events, no TTL, no marker, an id not stored,
        nothing unsure, no older ids to read first), it performs that operation itself and
        takes the stored event in, or hands the outcome to the same parts of the plan
        (:meth:`_one_failed`, :meth:`_one_stored`). It is the hot path of an agent loop: no
        generator, no call that the common case does not need."""
        # _prepare, inlined
        prepared = check_event(event, self._id)
        if not prepared.id:
            prepared = _replace(prepared, id=new_event_id())
        if prepared.time is None or prepared.seq:
            prepared = _replace(prepared, seq=0, time=prepared.time or self._store.clock())
        with self._lock:
            if (
                self._cipher is None
                and self._latest_seq
                and not self._unsure
                and self._store.ttl is None
                and prepared.type != COMPACTION
                and (not (leases := _leases_here()) or self._fence_current(leases))
            ):
                if self._ids_todo:
                    self._index_window()
                if prepared.id not in self._ids and not (
                    self._ids_from > 1 and self._needs_cover((prepared,))
                ):
                    log = self._log
                    try:
                        if log is not None:  # the composed log, without the delegating call
                            stored = log.append_one(self._view, prepared, False)
                        else:
                            stored = self._storage_append_one(prepared, False)
                    except BaseException as exc:
                        return drive(self._one_failed(prepared, -1, exc), self)
                    if stored is not None:
                        seq = stored.seq
                        if seq == 1 or (stored.type == USER_MESSAGE and self._may_cap()):
                            return drive(self._one_stored(prepared, stored, -1), self)
                        # _take_one, inlined
                        self._window.append(stored)
                        self._latest_seq = seq
                        ids = self._ids  # (a reload while appending may have replaced it)
                        ids[stored.id] = seq
                        if len(ids) > _ID_LIMIT:
                            self._forget_old_ids()
                        return seq
            return drive(self._append_one_plan(prepared), self)

    def _fence_current(self, leases: tuple[object, ...]) -> bool:
        """Whether an append may take the fast lane under the lease current for this session
        (none, or one checked here and not fenced since): the single-event operation writes
        only when nothing was stored since this object looked, so no fence can be missed.
        ``leases`` are the context's current leases: while they are the same tuple, the
        session's lease among them is the one found last time."""
        if leases is self._leases_seen:
            lease = self._lease_found
        else:
            lease = self._store.current_lease(self._id)
            self._leases_seen, self._lease_found = leases, lease
        self._appending_lease = lease
        return lease is None or (
            not lease.lost
            and self._fence_checked == lease.epoch
            and self._fence_seen <= lease.epoch
        )

    def _may_cap(self) -> bool:
        """Whether a user message appended now may be over a history cap: False when
        :meth:`_history_cap_plan` would answer no cap without reading anything."""
        if self._replaying:
            return False
        own = self._own_cap
        return own is None or own[0] != self._generation or bool(own[1] or self._store.max_messages)

    def _one_failed(self, prepared: Event, marker: int, exc: BaseException) -> Plan[int]:
        """After an append of ``prepared`` raised ``exc``: ride out a lost connection
        (:meth:`_append_checked`), or remember that the event may be stored and raise."""
        if isinstance(exc, _RETRYABLE):
            return (yield from self._append_checked([prepared], marker, None, exc))[0]
        if isinstance(exc, StorageError):
            self._unsure.add(prepared.id)
        raise exc

    def _one_stored(self, prepared: Event, stored: Event, marker: int) -> Plan[int]:
        """After the single-event operation stored ``prepared`` as ``stored``: check that a
        new log's store is still plain, take it in, apply the history cap."""
        if stored.seq == 1:
            try:
                yield from self._check_still_plain()  # encrypted while this wrote a new log
            except StorageError:
                self._unsure.add(prepared.id)
                raise
        if marker < 0:
            self._take_one(stored)
        else:
            self._extend((stored,), marker)
        if stored.type == USER_MESSAGE:
            cap = yield from self._history_cap_plan()
            if cap:
                yield from self._prune_plan(cap, None)
        return stored.seq

    def _take_one(self, stored: Event) -> int:
        """Take in one stored event that is not a marker (``_extend``, for the hot path)."""
        seq = stored.seq
        self._window.append(stored)
        self._latest_seq = seq
        ids = self._ids  # (a reload while appending may have replaced it)
        ids[stored.id] = seq
        if len(ids) > _ID_LIMIT:
            self._forget_old_ids()
        return seq

    def append_many(self, events: Sequence[Event], *, expect_seq: int | None = None) -> list[int]:
        """Append a batch atomically: all events or none, with consecutive seqs.

        With ``expect_seq``, the batch is stored only when the log's latest seq is exactly
        ``expect_seq`` (0: the session has no events yet) at the moment of writing; otherwise
        nothing is written and :class:`~agentsession.errors.ConflictError` is raised.
        """
        return self._traced_batch(events, expect_seq, prepared=False)

    def _append_prepared(self, events: list[Event]) -> list[int]:
        """:meth:`append_many` of events that :meth:`_prepare` returned (the recorder checks
        each event of a batched step when it is recorded, and does not pay for it twice)."""
        return self._traced_batch(events, None, prepared=True)

    def _traced_batch(
        self, events: Sequence[Event], expect_seq: int | None, *, prepared: bool
    ) -> list[int]:
        batch = self._prepare_batch(events, expect_seq, prepared)
        if not batch:
            return []
        if _trace.enabled:
            with _trace.span(
                "agentsession.append", session_id=self._id, backend=_trace.backend_of(self)
            ) as span:
                seqs = self._run(self._append_batch_plan(batch, expect_seq))
                span.set(events=len(seqs))
        else:
            seqs = self._run(self._append_batch_plan(batch, expect_seq))
        if self._hub.followed:  # wake this store object's followers at once
            self._hub.notify(self._id)
        return seqs

    # -- reading --------------------------------------------------------------------------

    @property
    def id(self) -> str:
        """The session id."""
        return self._id

    @property
    def latest_seq(self) -> int:
        """Highest seq in the log (0 when empty), including other writers' appends."""
        with self._lock:
            self._refresh()
            return self._latest_seq

    def read(self, after: int = 0, limit: int | None = None) -> list[Event]:
        """Events with ``seq > after`` in seq order, at most ``limit`` (all when None)."""
        if _trace.enabled:
            with _trace.span(
                "agentsession.read", session_id=self._id, backend=_trace.backend_of(self)
            ) as span:
                events = self._read(after, limit)
                span.set(events=len(events))
                return events
        return self._read(after, limit)

    def _recent(self, seq: int) -> Event | None:
        """The event at ``seq`` when the window of recent events holds it, as :meth:`read`
        would return it, without I/O and without catching up (None: :meth:`read` it)."""
        with self._lock:
            window = self._window
            if window and window[-1].seq == seq:
                return window[-1]  # the common case: the append just made
            served = self._from_window(seq - 1, 1)
            return served[0] if served and served[0].seq == seq else None

    def _read(self, after: int, limit: int | None) -> list[Event]:
        """:meth:`read` without tracing: :meth:`_read_plan`, with the catch-up in the sync
        lane (:meth:`_refresh`)."""
        _check_read(after, limit)
        if limit == 0:
            return []
        with self._lock:
            self._refresh()
            served = self._from_window(after, limit)
            if served is not None:
                return served
            return drive(self._read_stored(after, limit), self)

    def _derived(self, agent: str | None) -> Deriver:
        """:meth:`_deriver` in the sync lane: the fed deriver, else one built (driven)."""
        return self._fed_deriver(agent) or drive(self._deriver(agent), self)

    def entries(self, agent: AgentFilter = None) -> list[IndexedMessage]:
        """The derived history with source seqs (what compaction plans its cut on); ``agent``
        as for :meth:`messages`."""
        agent = resolve_agent(agent)
        with self._lock:
            self._refresh()
            return self._derived(agent).entries()

    def messages(
        self, agent: AgentFilter = None, *, max_tool_result_bytes: int | None = None
    ) -> list[Message]:
        """The provider-valid, compaction-aware history, updated incrementally.

        ``agent`` filters it (events of that agent and events without one); None gives every
        agent's messages. The filter is only ever this argument: inside a chat turn envelope
        that names an agent, ``messages()`` still returns every agent's messages, so that the
        history is a function of the log and the arguments alone; agentkit's
        ``DeriveMessages(ctx)`` took the filter from the envelope, which
        ``messages(agent=FROM_ENVELOPE)`` does (:data:`agentsession.context.FROM_ENVELOPE`).

        With the store's ``max_loaded_events`` cap and a window longer than it, the history is
        derived from the latest ``max_loaded_events`` events only, from the first turn boundary
        among them (a ``turn/start`` or a user message), with a compaction marker among them
        honoured as usual (see :attr:`agentsession.store.BaseStore.max_loaded_events`).
        """
        agent = resolve_agent(agent)
        if _trace.enabled:
            with _trace.span(
                "agentsession.messages",
                session_id=self._id,
                backend=_trace.backend_of(self),
                agent=agent or None,
            ) as span:
                messages = self._messages(agent, max_tool_result_bytes)
                span.set(messages=len(messages))
                return messages
        return self._messages(agent, max_tool_result_bytes)

    def _messages(self, agent: str | None, max_tool_result_bytes: int | None) -> list[Message]:
        """:meth:`messages` without tracing: the deriver of the ``agent`` filter (built from the
        window the first time, capped by ``max_loaded_events``), fed the new events."""
        with self._lock:
            self._refresh()
            return self._history_messages(self._derived(agent), max_tool_result_bytes)

    # -- recording and compaction ---------------------------------------------------------

    def turn(
        self,
        agent: str | None = None,
        user: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        *,
        storage: StoragePolicy | None = None,
        batch_steps: bool = False,
    ) -> Turn:
        """Record a turn: ``with session.turn(agent=..., user=...) as turn: ...`` writes
        ``turn/start`` and, however the block ends, ``turn/end`` (see
        :mod:`agentsession.recorder`). ``agent``, ``user`` and ``metadata`` default to the
        context's (the chat layer's turn envelope, when one is applied). Messages are stored
        whole unless a ``storage`` policy says otherwise (see :mod:`agentsession.media`).

        With ``batch_steps=True`` each step is buffered and written with one
        :meth:`append_many` when it closes (one write, one sync at durability ``fsync``);
        helpers return seq 0 while their step is buffered, and a crash loses the step in
        progress whole. Without it (the default) every helper appends at once."""
        return Turn(self, agent, user, metadata, storage=storage, batch_steps=batch_steps)

    def rewind(
        self,
        *,
        to_turn: int | str | None = None,
        to_seq: int | None = None,
        reason: str | None = None,
    ) -> int:
        """Go back in the conversation: append a ``session/rewind`` marker after which the
        derived history (``messages()``, ``entries()``, the converters) is the one that stood
        right after ``to_seq``, or after the end of turn ``to_turn`` (its turn id, or any seq
        inside it); the turns after that point leave it, and what is appended next continues
        it. Nothing is deleted: ``read()`` returns every event, and rewinding to the seq just
        before a rewind marker undoes it. Returns the marker's seq.

        A ``to_seq`` inside a turn moves to just before the turn's ``turn/start`` (turns stay
        whole). Raises :class:`~agentsession.errors.UsageError` for a point not in the log,
        one before the latest compaction marker (a compaction is a floor: what it summarised
        stays summarised), and while a turn runs, unless the caller holds the session's turn
        lock. The marker is planned at a seq and appended only if nothing was appended since
        (planned again otherwise). See :mod:`agentsession.rewind` and ``docs/rewind.md``."""
        return _rewind(self, self._holds_lock, to_seq=to_seq, to_turn=to_turn, reason=reason)

    def retry(self, *, agent: str | None = None) -> Turn:
        """Regenerate the last answer: a turn (enter it: ``with session.retry() as turn:``)
        whose entering rewinds to before the last turn that holds a user message and records
        that turn's user message(s) again right after its ``turn/start``; ``agent`` is the
        new turn's (as :meth:`turn`'s). Nothing is written until it is entered."""
        return _again(self, self._holds_lock, None, None, "retry", {"agent": agent})

    def edit(self, turn_seq: int, new_message: Message | str, *, agent: str | None = None) -> Turn:
        """Edit an earlier message: a turn (enter it: ``with session.edit(seq, "...") as
        turn:``) whose entering rewinds to before the turn that holds seq ``turn_seq`` (its
        ``turn/start`` or its user message: an ``entries()`` seq) and records
        ``new_message`` (a user message or a str) right after its ``turn/start``. The turns
        after it leave the history with it. Nothing is written until it is entered."""
        if isinstance(turn_seq, bool) or not isinstance(turn_seq, int):
            raise UsageError(f"edit needs the seq of a turn, not {turn_seq!r}")
        return _again(self, self._holds_lock, turn_seq, new_message, "edit", {"agent": agent})

    def _holds_lock(self) -> bool:
        """Whether the caller holds this session's turn lock (no I/O)."""
        return self._store.holds_lock(self._id)

    @property
    def life(self) -> int:
        """How many times this object found its log gone (deleted, perhaps created again) and
        opened it anew: a follower that sees it change raises
        :class:`~agentsession.errors.SessionReset`. No I/O."""
        return self._lives

    def follow(
        self, *, after: int | None = None, timeout: float | None = None
    ) -> Generator[Event, None, None]:
        """The events after seq ``after`` (None: the latest now) as they are appended, by any
        process, in seq order, each once: ``for event in session.follow(): ...``. Waits for
        new ones until ``timeout`` seconds pass with nothing new (None: for ever) or the
        iterator is closed. Raises :class:`~agentsession.errors.SessionReset` when the session
        is deleted (and perhaps created again) while followed. See
        :mod:`agentsession.follow`."""
        return _follow(self, self._store._changes, after, timeout)

    def subscribe(self) -> Subscription:
        """A wake-up for a loop of its own that reads what is new (as :meth:`follow` does):
        ``sub.wait(seconds)`` returns when this session may have grown (an append through
        this store object, or one another process made, as the backend reports it), True,
        or when the time is up, False; ``await sub.await_sign(seconds)`` on an event loop.
        Close it (``with session.subscribe() as sub:``). No I/O."""
        sub: Subscription = self._store._changes.subscribe(self._id)
        return sub

    @property
    def origin(self) -> BranchRef | None:
        """For a branch: the session it branched from and the seq its history shares up to
        (``BranchRef(id, seq)``); None for a session that is not a branch. No I/O."""
        origin = self._origin
        return None if origin is None else BranchRef(origin, self._base)

    def branch(
        self,
        *,
        at_turn: int | str | None = None,
        at_seq: int | None = None,
        id: str | None = None,
    ) -> BaseSession:
        """A new session whose history starts with this one's as it stood right after
        ``at_seq`` (moved to before the turn it falls inside), or after the end of turn
        ``at_turn`` (its turn id, or a seq inside it), or at the head when neither is given;
        nothing is copied: the branch stores one ``session/branch`` marker and reads the
        shared part from this session, then diverges with its own appends. Its seqs go on
        from the point (the marker is at ``point + 1``). ``id``: the branch's id (default:
        this id, ``~`` and 12 hex digits); an id that exists raises
        :class:`~agentsession.errors.DuplicateSession`. Listed by :meth:`branches`; its
        :attr:`origin` names this session and the point. See :mod:`agentsession.branching`."""
        made: BaseSession = _branch(
            self, self._store, at_turn=at_turn, at_seq=at_seq, branch_id=id
        )
        return made

    def branches(self) -> list[BranchRef]:
        """The branches of this session that exist, in the order they were made, each as
        ``BranchRef(id, seq)`` (``seq``: where its history leaves this one's)."""
        return _live_branches(self._store, self._id)

    def pending(
        self, lease: Lease, *, retry_unfinished: bool = False
    ) -> Generator[Delivery, None, None]:
        """The inbox's deliveries not claimed yet, in delivery (seq) order, for the worker
        holding ``lease`` (the session's, held: :class:`~agentsession.errors.UsageError`
        otherwise): ``for d in session.pending(lease): with d.start_turn() as turn: ...``
        (see :mod:`agentsession.inbox`).

        A generator: it reads the log again when the deliveries it knows are done (and after
        a turn that took ``merge`` deliveries over), so one delivered while draining is
        yielded too. A delivery is claimed once a ``turn/start`` naming it
        is stored (:meth:`~agentsession.inbox.Delivery.start_turn`); with
        ``retry_unfinished=True`` those whose claiming turn never wrote its own ``turn/end``
        (its worker died) are yielded again. First, as the lease holder knows no other turn
        is live, turns a crashed worker left open are closed
        (:func:`~agentsession.recovery.repair_incomplete`). Raises
        :class:`~agentsession.errors.LeaseLost` when the lease is known lost before a
        yield."""
        return _pending(self, lease, retry_unfinished=retry_unfinished)

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
        """Replace the history before a turn boundary by ``summary``; returns the marker's seq,
        or None when there was nothing to drop (see :mod:`agentsession.compaction`).

        A text ``summary`` becomes a user message; with ``summary_role="system"`` a system
        message starting with :data:`~agentsession.compaction.LANGO_SUMMARY_PREFIX`
        (``[Compacted Summary]\n``), the row lango's ``CompactMessages`` writes.

        Give exactly one of ``keep_turns`` (how many of the latest turns stay verbatim,
        counting turns an earlier compaction retained; ``0`` inside a running turn keeps that
        turn, so the question being answered is never summarised away), ``first_kept_seq``, or
        ``up_to_message`` (lango's ``CompactMessages``): the index in ``messages(agent)`` of
        the last message to replace, inclusive, so messages ``0..up_to_message`` become the
        summary. The cut falls only on a turn boundary and never separates a tool call from
        its result: when message ``up_to_message + 1`` does not begin a turn, the cut moves
        back to the latest boundary before it and the rest of that turn stays verbatim (no
        message the caller did not ask to drop is dropped; None when that boundary is the
        first message: an index inside the first turn compacts nothing and returns None,
        where lango deletes message 0). An index that names no message raises
        :class:`~agentsession.errors.UsageError` (``compact index <i> out of range (have <n>
        messages)``).

        The marker applies to ``agent``'s history (all agents when None). It is appended only
        if nothing was appended while it was planned (planning again otherwise), so a
        concurrent turn is never lost. Raises :class:`~agentsession.errors.UsageError` while
        tool calls are unanswered.
        """
        summary = compaction.summary_message(summary, summary_role)
        return self._run(
            self._compact_plan(
                summary,
                keep_turns=keep_turns,
                first_kept_seq=first_kept_seq,
                up_to_message=up_to_message,
                tokens_before=tokens_before,
                agent=agent,
            )
        )

    def _turn_ended(self, agent: str) -> None:
        """After a turn recorded on this object ended normally: run the store's compaction
        policy (:class:`~agentsession.compaction.CompactionPolicy`) unless the async turn runs
        it. Never raises an Exception: a failure is reported by the policy. The session lock
        is held while planning and appending, never while the summarizer runs."""
        policy = self._store.compaction
        if policy is None or not policy.budgeted:
            return
        deferred = compaction.deferred_policy()
        if deferred is not None:
            deferred.due, deferred.agent = True, agent
            return
        try:
            planned = self._run(self._policy_check_plan(policy))
        except Exception as exc:
            policy.report(compaction.CompactionFailure(self._id, "plan", exc))
            return
        if planned is None:
            return
        summarize = policy.summarize
        assert summarize is not None  # a budgeted policy has one
        if inspect.iscoroutinefunction(summarize):
            error = TypeError("a coroutine function summarizes only on the async store")
            policy.report(compaction.CompactionFailure(self._id, "summarize", error))
            return
        try:
            result = summarize(list(planned.messages))
        except Exception as exc:
            policy.report(compaction.CompactionFailure(self._id, "summarize", exc))
            return
        try:
            summary, usages = compaction.summary_of(result)
        except TypeError as exc:
            if inspect.iscoroutine(result):
                result.close()
            policy.report(compaction.CompactionFailure(self._id, "result", exc))
            return
        try:
            self._run(self._policy_commit_plan(planned, summary))
        except Exception as exc:
            policy.report(compaction.CompactionFailure(self._id, "append", exc))
        if usages:
            try:
                self.append_many(compaction.usage_events(usages, agent))
            except Exception as exc:
                policy.report(compaction.CompactionFailure(self._id, "append", exc))

    def prune(self, max_messages: int, agent: str | None = None) -> int | None:
        """Cap the history at ``max_messages`` derived messages with a prune marker that keeps
        the most recent whole turns that fit (see :func:`agentsession.compaction.plan_prune`);
        returns the marker's seq, or None when the history already fits."""
        if not isinstance(max_messages, int) or max_messages < 1:
            raise UsageError(f"max_messages must be an int >= 1, not {max_messages!r}")
        return self._run(self._prune_plan(max_messages, agent))

    def annotate_timeout(self, partial: str = "", *, agent: str = "") -> int:
        """Record that the model's reply timed out (lango's ``AnnotateTimeout``, keeping the
        partial text as lango v0.6 did); returns the seq.

        Appends an assistant message (:func:`agentsession.recorder.timeout_annotation`):
        ``partial + "\\n\\n---\\n" + TIMEOUT_NOTE`` when ``partial`` is not empty, else
        :data:`~agentsession.recorder.TIMEOUT_NOTE` alone, so the next :meth:`messages`
        tells the model that its previous reply was cut off. Tool calls still unanswered get
        the interrupted stand-in before it in the derived history, so that stays
        provider-valid. ``agent`` attributes the message (default: none, so every agent's
        history shows it); the context's turn id, when one is set, is stamped as in a turn.
        Inside a recorded turn, letting the ``TimeoutError`` escape or calling
        ``turn.timed_out()`` records the same message (see :class:`~agentsession.recorder.Turn`).
        """
        from .context import turn_id
        from .events import ASSISTANT_MESSAGE
        from .recorder import META_TURN_ID, timeout_annotation

        current = turn_id()
        meta = {META_TURN_ID: current} if current else None
        event = Event.new(ASSISTANT_MESSAGE, timeout_annotation(partial), agent=agent, meta=meta)
        return self.append(event)

    # -- child sessions and the session record --------------------------------------------

    def _host(self) -> children.ChildHost:
        return cast("children.ChildHost", self._store)

    def _settled_entries(self, agent: str | None) -> tuple[list[IndexedMessage], int]:
        """The derived history without an exchange still waiting for results, and the latest
        seq it was derived from."""
        return self._run(self._settled_plan(agent))

    def _last_time(self) -> _dt.datetime | None:
        """Time of the latest event (None when the log is empty)."""
        return self._run(self._last_time_plan())

    def fork(
        self,
        agent: str = "",
        *,
        inherit: int | Literal["all"] = 0,
        max_messages: int | None = None,
        task: str = "",
        meta: Mapping[str, str] | None = None,
        parent_agent: str | None = None,
        child_id: str | None = None,
    ) -> BaseSession:
        """Fork a child session for a subagent (lango's ``ForkChild``); returns it.

        The child is a full session of the same store, created atomically with its first
        event, ``session/fork``, which records this session, its latest seq, ``agent``,
        ``task``, ``meta`` and the inherited history: the last ``inherit`` messages (``"all"``:
        every one; 0: none) of this session's derived history for ``parent_agent``, cut so
        that a tool result never comes without its call and leaving out an exchange whose
        calls are still waiting for results. The child's :meth:`messages` starts with them and
        goes on with its own events. This session gets a ``subagent/start`` linking event.
        ``max_messages`` caps the child's history as the store's ``max_messages`` does (the
        smaller of the two applies). ``child_id`` defaults to
        ``<this id>:child:<agent>:<random>``; an existing id raises
        :class:`~agentsession.errors.DuplicateSession`. Lifecycle hooks are called with a
        ``fork`` event once everything is written. See ``docs/subagents.md``."""
        return cast(
            "BaseSession",
            children.fork(
                self._host(),
                self,
                agent=agent,
                inherit=inherit,
                max_messages=max_messages,
                task=task,
                meta=meta,
                parent_agent=parent_agent,
                child_id=child_id,
            ),
        )

    def merge(
        self,
        summary: Message | str | None = None,
        *,
        as_author: str | None = None,
        agent: str | None = None,
        lock_timeout: float | None = children.DEFAULT_MERGE_LOCK_TIMEOUT,
    ) -> int:
        """Merge this child session into its parent (lango's ``MergeChild`` and
        ``MergeChildAsAuthor``); returns the seq of the parent's ``subagent/end``.

        With a ``summary`` (a message, or text for an assistant message) the parent gets that
        one message; without (None, or ``""`` as lango's ``MergeChild(key, "")``), the child's
        own messages since the fork (never the history it inherited). Messages without an
        author get ``as_author`` (default: the child's agent); they are recorded under
        ``agent`` in the parent (default: the ``parent_agent`` the child was forked for).
        Everything lands in one atomic batch that ends with a ``subagent/end`` (status
        ``merged``) carrying the fork's id; only after the parent acknowledged it is the child
        marked merged (``session/merge``).

        It holds the parent's turn lock meanwhile (taken unless this thread already holds it,
        as a merge run inside the parent's own turn does), waiting ``lock_timeout`` seconds
        (None: for ever); :class:`~agentsession.errors.LockTimeout` then means nothing was
        written and the merge can be retried. The lock serialises merges: a retry after a
        crash between the parent write and the mark finds the ``subagent/end`` and only
        writes the mark (exactly one copy in the parent), and of two processes merging the
        same child one merges and the other gets
        :class:`~agentsession.errors.ChildStateError`, as does merging a child that was
        merged or discarded, or whose parent was deleted since the fork."""
        return children.merge(
            self._host(),
            self,
            summary,
            as_author=as_author,
            agent=agent,
            lock_timeout=lock_timeout,
        )

    def discard(
        self,
        reason: str = "",
        *,
        lock_timeout: float | None = children.DEFAULT_MERGE_LOCK_TIMEOUT,
    ) -> int:
        """Discard this child session: the parent gets a note (``subagent/end``, status
        ``discarded``, with ``reason``; not part of its derived history), then the child is
        marked discarded (``session/discard``). Its log stays. Locking, crash safety and
        errors as :meth:`merge`; returns the seq of the note."""
        return children.discard(self._host(), self, reason, lock_timeout=lock_timeout)

    @property
    def parent(self) -> str | None:
        """The parent session id of a child session (None for a session that was not
        forked), from its first event."""
        fork = children.fork_of(self)
        return None if fork is None else fork.parent

    @property
    def fork_point(self) -> int | None:
        """The parent's latest seq when this child was forked (None when not a child)."""
        fork = children.fork_of(self)
        return None if fork is None else fork.parent_seq

    def info(self) -> children.SessionRecord:
        """The session's record: ``created_at`` (its first event's time), ``updated_at`` (the
        later of its last append and its last :meth:`update`), the attributes lango keeps
        (agent id, channel type and id, model, metadata) and, for a child, its parent and
        fork point."""
        return children.record_of(self._host(), self)

    def update(
        self,
        *,
        agent_id: str | None = None,
        channel_type: str | None = None,
        channel_id: str | None = None,
        model: str | None = None,
        metadata: Mapping[str, str] | None = None,
        title: str | None = None,
        tags: Sequence[str] | None = None,
        user: str | None = None,
        tenant: str | None = None,
    ) -> children.SessionRecord:
        """Change the session's record in one atomic, durable write (compare-and-set, so
        concurrent updates of different fields never lose each other); returns the record.
        None leaves a field as it is, ``""`` clears it, and ``metadata`` (and ``tags``)
        replaces the whole map (set). ``title``, ``tags``, ``user`` and ``tenant`` are the
        catalog's too (``store.list(where=...)``; a title set here replaces the one derived
        from the first user message, ``""`` brings that back only on ``store.reindex``).
        Raises :class:`~agentsession.errors.SessionNotFound` when the session has no
        events.

        In a store opened with ``renew_on_update=True`` the update also renews the session's
        TTL as an append does (see :attr:`agentsession.BaseStore.renew_on_update`), and an
        expired session raises :class:`~agentsession.errors.SessionExpired` instead of being
        updated (unless the store has ``revive_expired``)."""
        store = self._store
        renew = store.renew_on_update
        if renew and store.ttl is not None and not store.revive_expired:
            with self._lock:
                self._refresh()
                self._check_ttl()
        record = children.update_record(
            self._host(),
            self,
            agent_id=agent_id,
            channel_type=channel_type,
            channel_id=channel_id,
            model=model,
            metadata=metadata,
            title=title,
            tags=tags,
            user=user,
            tenant=tenant,
        )
        if any(v is not None for v in (title, tags, user, tenant)):
            indexing.fields_updated(
                self._store,
                self._id,
                Fields(
                    title=title,
                    tags=None if tags is None else record.tags,
                    user=user,
                    tenant=tenant,
                ),
            )
        if renew:
            self._host()._renew(self._id)
        return record

    def close(self) -> None:
        """Release open files or connections; the session reopens them when used again."""
        with self._lock:
            self._storage_close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._id!r} at {self.location}>"
