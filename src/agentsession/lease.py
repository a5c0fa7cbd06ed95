"""The lease record of a conversation's turn lock, and the fences in its log: plain data, no I/O.

:mod:`agentsession.fencing` takes and keeps leases (with the backends' locks); the session
pipeline (:mod:`agentsession.core`) checks an append's lease against the record and against the
``session/lease`` events it takes in. Both read them here.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

import msgspec

from .codec import decode
from .errors import LeaseLost
from .events import SESSION_LEASE, Event, SessionLease

__all__ = [
    "LEASE_KIND",
    "HeldLease",
    "LeaseRecord",
    "dump_lease",
    "fence_epoch",
    "load_lease",
    "now_ms",
]


LEASE_KIND = "lease"
"""The meta kind of the lease records (key: the session id)."""


class LeaseRecord(msgspec.Struct, frozen=True, omit_defaults=True):
    """A conversation's lease as the store's meta holds it."""

    epoch: int
    """The epoch of the latest acquisition."""
    holder: str
    """A random token of that acquisition."""
    renewed: int
    """When the holder took or last renewed the lease (Unix ms)."""
    ttl: int | None = None
    """The lease's ``ttl`` in ms (None: it does not expire)."""
    released: bool = False
    """Whether the holder released it."""
    os: bool = True
    """Whether the holder also holds the backend's lock (False: stolen, or taken over after
    expiry, by the record alone)."""

    def expired(self, now: int) -> bool:
        """Whether the lease ran out of ``ttl`` without renewal at ``now`` (Unix ms)."""
        return self.ttl is not None and now - self.renewed > self.ttl

    def stale(self, now: int, steal_after: float | None) -> bool:
        """Whether a waiter with ``steal_after`` may take the lease over at ``now`` from a
        holder that has not released it: it expired, or has not renewed for ``steal_after``
        seconds. (A released lease whose backend lock is still held is not taken: whoever
        holds that lock holds it without a lease record, as a forked child's copy would.)"""
        if self.released:
            return False
        if self.expired(now):
            return True
        return steal_after is not None and now - self.renewed >= steal_after * 1000


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(LeaseRecord)


def load_lease(raw: str | None) -> LeaseRecord | None:
    if raw is None:
        return None
    try:
        return _DECODER.decode(raw)
    except msgspec.DecodeError:
        return None  # unreadable (written by hand): the next acquisition replaces it


def dump_lease(record: LeaseRecord) -> str:
    return _ENCODER.encode(record).decode()




def now_ms() -> int:
    """Now, in Unix milliseconds: the clock of the lease records."""
    return time.time_ns() // 1_000_000


def fence_epoch(events: Sequence[Event]) -> int:
    """The highest epoch among the ``session/lease`` events of ``events`` (0: none)."""
    highest = 0
    for event in events:
        if event.type == SESSION_LEASE:
            try:
                epoch = decode(event.data, SessionLease).epoch
            except (ValueError, TypeError):
                continue  # (an unreadable fence fences nothing)
            highest = max(highest, epoch)
    return highest


class HeldLease(Protocol):
    """What the session pipeline asks of the lease an append is made under."""

    @property
    def epoch(self) -> int:
        """The lease's epoch."""
        ...

    @property
    def lost(self) -> bool:
        """Whether the lease is known lost."""
        ...

    def lost_error(self, current: int = 0) -> LeaseLost:
        """Mark the lease lost; the error to raise."""
        ...
