"""Fencing tokens for the turn lock: leases with epochs, expiry, steals and fenced appends.

``store.lock(session_id, timeout=..., ttl=None, steal_after=None)`` returns a :class:`Lease`:
the conversation's turn lock (:class:`~agentsession.locks.TurnLock`, which it extends) with an
**epoch** that grows by one at every acquisition of that conversation's lock. Inside ``with
store.lock(...) as lease:`` the lease is *current* (in this thread or asyncio task), and every
append to that session through the same store carries its epoch: the recorder's helpers and
``session.turn()`` included. An append under a lease that another worker has since taken over
raises :class:`~agentsession.errors.LeaseLost` and writes nothing.

**The lease record.** The store's meta holds one small record per conversation (kind
:data:`LEASE_KIND`): the current epoch, the holder (a random token per acquisition), when it
last renewed (Unix ms, from this machine's clock), its ``ttl``, whether it was released and
whether its holder also holds the operating system's (or the database server's) lock. Every
change is a compare-and-set, so two workers never get the same epoch. The record is not
deleted with the session, so epochs keep growing across a delete.

**Taking the lock.** A worker first takes the backend's lock (``flock``, an advisory lock, a
thread lock), then moves the record to the next epoch. When it takes the lease without the
backend's lock (a steal or an expiry: see below), or the record it finds was not released and
the backend can lose a lock under a live holder (a PostgreSQL connection the server ended), it
also appends a ``session/lease`` event (:class:`~agentsession.events.SessionLease`) before
``lock`` returns. That event is the fence: it is in the log, ordered with every other append,
and an append under an older epoch that finds it among the events stored since it last looked
(which every backend reads under its write lock before writing) is refused, atomically with the
write. An append whose session object has not looked since its lease was taken reads the record
once first. Releasing marks the record released, so the next ordinary acquisition writes
nothing to the log.

**Expiry and steals.** With ``ttl=`` the lease expires unless renewed: a daemon thread renews
it every ``ttl / 3`` while it is held (it stops with the process, or while the process is
stopped). A waiter takes over an expired lease even though the expired holder's process still
holds the backend's lock. With ``steal_after=`` a waiter takes the lock from a holder that has
not renewed for that long (a holder without ``ttl`` never renews: its acquisition counts).
Both are off by default: a waiter then waits for the backend's lock as before. A lease taken
without the backend's lock (stolen, or taken over after expiry) holds by its record alone: a
later waiter that gets the backend's lock waits until it is released, expires or is stolen.

Times compare Unix milliseconds of different processes, and machines on PostgreSQL: keep
``ttl`` and ``steal_after`` well above the clock skew between them.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Final

import msgspec

from .errors import LeaseLost, LockTimeout, UsageError
from .events import SessionLease
from .lease import LEASE_KIND, LeaseRecord, dump_lease, load_lease, now_ms
from .locks import TurnLock

if TYPE_CHECKING:
    from types import TracebackType

    from .locks import _HeldRegistry

__all__ = ["Lease", "Leases", "current_lease", "leases_here"]

_current: contextvars.ContextVar[tuple[Lease, ...]] = contextvars.ContextVar(
    "agentsession_current_leases", default=()
)
"""The leases current in this context (thread or asyncio task): entered, not yet left."""


leases_here: Callable[[], tuple[Lease, ...]] = _current.get
"""The leases current in this context (empty: none, which an append asks first)."""


def current_lease(scope: object, session_id: str) -> Lease | None:
    """The lease current in this context for ``session_id`` among the locks of ``scope`` (a
    store's lock registry), or None."""
    for lease in _current.get():
        if lease.session_id == session_id and lease.scope is scope:
            return lease
    return None


class Lease(TurnLock):
    """A held turn lock with its fencing epoch (made by ``store.lock``; see the module
    docstring). Use it as a context manager: inside the ``with`` it is current, and appends to
    its session carry its epoch."""

    def __init__(
        self,
        leases: Leases,
        session_id: str,
        handle: object | None,
        record: LeaseRecord,
        *,
        stolen: bool,
    ) -> None:
        super().__init__(leases.registry, session_id, handle)
        self._leases = leases
        self._record = record
        self.epoch = record.epoch
        """The lease's epoch: one more than the acquisition before it."""
        self.ttl = None if record.ttl is None else record.ttl / 1000
        """Seconds the lease lasts without renewal (None: it does not expire)."""
        self.stolen = stolen
        """Whether it was taken over from a holder that had not released it (stolen, expired,
        or gone with its process or connection); a ``session/lease`` event then fenced the
        log."""
        self._lost = False
        self._released = False
        self._tokens: list[contextvars.Token[tuple[Lease, ...]]] = []
        self._renewer: threading.Thread | None = None
        self._stop = threading.Event()

    @property
    def backend_lock(self) -> bool:
        """Whether the lease also holds the backend's lock (False: taken by its record alone,
        from a holder that still held it: stolen, or expired)."""
        return self._handle is not None

    @contextlib.contextmanager
    def current(self) -> Iterator[Lease]:
        """Make the lease current in this context for the ``with`` block without releasing it
        at the end (as entering the lease itself does)."""
        token = _current.set((*_current.get(), self))
        try:
            yield self
        finally:
            _current.reset(token)

    @property
    def scope(self) -> object:
        """The lock registry the lease belongs to (a store's)."""
        return self._leases.registry

    @property
    def locally_held(self) -> bool:
        """Whether the lease is held as far as this process knows, without reading the lease
        record: not released, not known lost, and its backend lock (when it has one) alive."""
        if self._released or self._lost:
            return False
        return self._handle is None or super().held

    @property
    def lost(self) -> bool:
        """Whether the lease is known lost without asking storage (a renewal or an append
        found another worker's epoch)."""
        return self._lost

    @property
    def held(self) -> bool:
        """Whether the lease is still this worker's: not released, not lost, its backend lock
        alive (a PostgreSQL lock connection the server ended is not), and the store's lease
        record still names it (one meta read)."""
        if self._released or self._lost:
            return False
        if self._handle is not None and not super().held:
            return False
        record = self._leases.read(self.session_id)
        if record is None or record.epoch != self.epoch or record.holder != self._record.holder:
            self._lost = True
            return False
        return not record.expired(now_ms())

    def renew(self) -> None:
        """Renew the lease now (``ttl`` leases renew themselves in the background); raises
        :class:`~agentsession.errors.LeaseLost` when another worker took it."""
        if self._released:
            raise UsageError(f"the lease of session {self.session_id!r} was released")
        if not self._leases.renew(self):
            raise self.lost_error()

    def lost_error(self, current: int = 0) -> LeaseLost:
        """Mark the lease lost; the error to raise."""
        self._lost = True
        return LeaseLost(self.session_id, self.epoch, current)

    def release(self) -> None:
        """Release the lease: the record is marked released (when it is still this lease's)
        and the backend's lock dropped; releasing twice is harmless."""
        if self._released:
            return
        self._released = True
        self._stop_renewing()
        try:
            # Not in a forked child (its copy must leave the parent's lease alone), nor after
            # the store dropped every lock (closed).
            if not self._lost and self._registry.generation == self._generation:
                self._leases.mark_released(self)
        finally:
            super().release()

    def __enter__(self) -> Lease:
        self._tokens.append(_current.set((*_current.get(), self)))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._tokens:
            token = self._tokens.pop()
            try:
                _current.reset(token)
            except ValueError:  # left in another context: drop it from this one
                _current.set(tuple(x for x in _current.get() if x is not self))
        self.release()

    def __repr__(self) -> str:
        state = "released" if self._released else "lost" if self._lost else "taken"
        return f"<Lease {self.session_id!r} epoch {self.epoch} {state}>"

    # -- renewal --------------------------------------------------------------------------

    def _start_renewing(self) -> None:
        ttl = self.ttl
        if ttl is None:
            return
        interval = max(ttl / 3, 0.01)
        self._renewer = threading.Thread(
            target=self._renew_loop, args=(interval,), name="agentsession-lease", daemon=True
        )
        _renewing.add(self)
        self._renewer.start()

    def _stop_renewing(self) -> None:
        """Stop the renewal thread and wait for a renewal under way to finish (bounded), so
        that none touches the store after the release, nor while the interpreter exits."""
        self._stop.set()
        renewer = self._renewer
        if renewer is not None and renewer is not threading.current_thread():
            renewer.join(_JOIN_TIMEOUT)
        _renewing.discard(self)

    def _renew_loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            if self._registry.generation != self._generation:
                return  # the store was closed (or this is a forked child): nothing to renew
            try:
                if not self._leases.renew(self):
                    self._lost = True
                    return
            except Exception:  # storage unavailable now: try again at the next interval
                continue


_JOIN_TIMEOUT: Final = 5.0
"""How long a release (or the interpreter's exit) waits for a renewal under way."""

_renewing: weakref.WeakSet[Lease] = weakref.WeakSet()
"""The leases whose renewal thread runs: stopped before the interpreter exits (a daemon
thread inside a database driver while the interpreter is torn down can crash it)."""


@atexit.register
def _stop_all_renewals() -> None:
    for lease in list(_renewing):
        lease._stop_renewing()


Fence = Callable[[Lease, SessionLease], None]
"""Appends a lease's ``session/lease`` event (its payload given) under that lease."""


class Leases:
    """The leases of one store: the backend's locks (``registry``), the lease records in the
    store's meta (``meta_get``, ``meta_cas``) and how to fence a session's log (``fence``)."""

    def __init__(
        self,
        registry: _HeldRegistry,
        meta_get: Callable[[str, str], str | None],
        meta_cas: Callable[[str, str, str | None, str | None], bool],
        fence: Fence,
    ) -> None:
        self.registry = registry
        self._lost_while_alive = bool(getattr(registry.locker, "lost_while_alive", False))
        self._get = meta_get
        self._cas = meta_cas
        self._fence = fence

    def read(self, session_id: str) -> LeaseRecord | None:
        """The session's lease record (None: never locked)."""
        return load_lease(self._get(LEASE_KIND, session_id))

    def _swap(self, session_id: str, old: str | None, new: LeaseRecord) -> bool:
        return self._cas(LEASE_KIND, session_id, old, dump_lease(new))

    def acquire(
        self,
        session_id: str,
        timeout: float | None,
        ttl: float | None = None,
        steal_after: float | None = None,
    ) -> Lease:
        """Take the session's lease (see the module docstring); raises
        :class:`~agentsession.errors.LockTimeout` when ``timeout`` runs out first."""
        for name, value in (("ttl", ttl), ("steal_after", steal_after)):
            if value is not None and (not isinstance(value, int | float) or value <= 0):
                raise UsageError(f"lock {name} must be a number of seconds > 0 or None")
        deadline = None if timeout is None else time.monotonic() + timeout
        ttl_ms = None if ttl is None else max(1, round(ttl * 1000))
        pause = 0.005
        while True:
            raw = self._get(LEASE_KIND, session_id)
            record = load_lease(raw)
            now = now_ms()
            # Poll when something may change without the backend's lock being released:
            # a lease that may expire or be stolen, or one held by its record alone.
            polling = steal_after is not None or (
                record is not None and not record.released and (record.ttl or not record.os)
            )
            wait = _remaining(deadline)
            if polling:
                wait = 0.0 if wait is None else min(wait, 0.0)
            try:
                handle: object | None = self.registry.take(session_id, wait)
            except LockTimeout:
                handle = None
            if handle is not None:
                # The backend's lock is ours: its previous holder released it or is gone.
                live = (
                    record is not None
                    and not record.released
                    and not record.os
                    and not record.stale(now, steal_after)
                )
                if not live:
                    lease = self._take(session_id, raw, record, handle, ttl_ms, now, os=True)
                    if lease is not None:
                        return lease
                self.registry.release(session_id, handle)  # a record-only holder is live
            elif record is not None and record.stale(now, steal_after):
                lease = self._take(session_id, raw, record, None, ttl_ms, now, os=False)
                if lease is not None:
                    return lease
            remaining = _remaining(deadline)
            if remaining is not None and remaining <= 0:
                raise LockTimeout(session_id, timeout or 0.0)
            time.sleep(pause if remaining is None else min(pause, remaining))
            pause = min(pause * 2, 0.1)

    def _take(
        self,
        session_id: str,
        raw: str | None,
        record: LeaseRecord | None,
        handle: object | None,
        ttl_ms: int | None,
        now: int,
        *,
        os: bool,
    ) -> Lease | None:
        new = LeaseRecord(
            epoch=(record.epoch if record is not None else 0) + 1,
            holder=_token(),
            renewed=now,
            ttl=ttl_ms,
            os=os,
        )
        if not self._swap(session_id, raw, new):
            if handle is not None:
                self.registry.release(session_id, handle)
            return None  # another worker changed the record meanwhile: look again
        # Taken over from a holder that did not release it. When the backend's lock came with
        # it, that holder is gone (a file or thread lock is only dropped with its process or
        # by its release) unless the backend can lose a lock under a live holder
        # (PostgreSQL's connection): only then, and for a lease taken by its record, can the
        # old holder still write, and the log is fenced.
        taken_over = record is not None and not record.released
        fence = taken_over and (handle is None or self._lost_while_alive)
        lease = Lease(self, session_id, handle, new, stolen=taken_over)
        if fence:
            assert record is not None
            if record.expired(now):
                reason = "expired"
            else:
                reason = "unreleased" if record.os and handle is not None else "stolen"
            try:
                self._fence(lease, SessionLease(new.epoch, record.epoch, reason))
            except BaseException:
                lease.release()
                raise
        lease._start_renewing()
        return lease

    def renew(self, lease: Lease) -> bool:
        """Move the lease's record to now; False when it is no longer the lease's."""
        raw = self._get(LEASE_KIND, lease.session_id)
        record = load_lease(raw)
        mine = lease._record
        if record is None or record.epoch != mine.epoch or record.holder != mine.holder:
            return False
        renewed = msgspec.structs.replace(record, renewed=now_ms())
        if self._swap(lease.session_id, raw, renewed):
            lease._record = renewed
            return True
        return self.renew(lease)  # (changed by a concurrent renewal of ours: look again)

    def mark_released(self, lease: Lease) -> None:
        """Mark the record released when it is still the lease's."""
        raw = self._get(LEASE_KIND, lease.session_id)
        record = load_lease(raw)
        mine = lease._record
        if record is None or record.epoch != mine.epoch or record.holder != mine.holder:
            return
        self._swap(lease.session_id, raw, msgspec.structs.replace(record, released=True))


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _token() -> str:
    return os.urandom(8).hex()
