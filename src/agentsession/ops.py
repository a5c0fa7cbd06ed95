"""The storage operations a plan yields, and the two drivers that perform them.

The session pipeline (:mod:`agentsession.core`) is written once, as **plans**: generators that
decide everything (what to append, which seqs, when to catch up, when to retry) and perform no
I/O themselves. Wherever a plan needs storage it yields an operation from this module and is
sent the result (or has the storage's exception thrown into it, at the ``yield``). Two drivers
run plans:

* :func:`drive` runs a plan synchronously: each operation's :meth:`Op.run` calls the sync
  storage (and :class:`Pause` sleeps);
* :func:`adrive` runs the same plan on an event loop: each operation's :meth:`Op.arun` awaits
  the storage's native coroutine where it has one (:class:`AsyncLog`), and the sync call
  otherwise (:class:`Pause` awaits ``asyncio.sleep``).

This is the shape of psycopg's generators and waiting functions, and of httpx's auth flows:
the logic cannot drift between the sync and the async API, because there is only one.

A plan's storage is the session's log storage (for the append, refresh, open and read
operations) and the session's store (for :class:`MetaGet` and :class:`MetaAdd`: the encryption
keys); what an operation calls is typed by the :class:`SyncLog` and :class:`AsyncLog` protocols
below.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any, Protocol, TypeVar

import msgspec

from .events import Event
from .storage import Reopen

__all__ = [
    "Append",
    "AppendOne",
    "AsyncLog",
    "MetaAdd",
    "MetaGet",
    "Op",
    "Open",
    "OpenTail",
    "Pause",
    "Plan",
    "Quarantine",
    "Read",
    "ReadOrigin",
    "Refresh",
    "SyncLog",
    "adrive",
    "drive",
]

T = TypeVar("T")


class SyncLog(Protocol):
    """What the sync driver calls: a session's log storage, its store's meta, in-process."""

    def _storage_open(self) -> tuple[list[Event], bool]: ...

    def _storage_open_tail(self) -> tuple[list[Event], bool]: ...

    def _storage_append(
        self, events: list[Event], marker: int, expect_seq: int | None
    ) -> tuple[list[Event], list[Event]] | Reopen: ...

    def _storage_append_one(self, event: Event, marker: bool) -> Event | None: ...

    def _storage_refresh(self) -> list[Event] | Reopen: ...

    def _storage_read(self, after: int, limit: int | None) -> list[Event]: ...

    def _origin_read(self, origin: str, after: int, count: int) -> list[Event]: ...

    def _quarantine_unsealed(self, event: Event, reason: str) -> bool: ...

    def _meta(self, kind: str, key: str) -> str | None: ...

    def _meta_add(self, kind: str, key: str, value: str) -> str: ...


class AsyncLog(Protocol):
    """What the async driver awaits: the native coroutines of a log storage. Each may return
    :data:`NotImplemented` to have the driver make the sync call instead (an operation the
    storage does not do natively, or not in its current state)."""

    async def open(self) -> tuple[list[Event], bool] | Any: ...

    async def open_tail(self) -> tuple[list[Event], bool] | Any: ...

    async def append(
        self, events: list[Event], marker: int, expect_seq: int | None
    ) -> tuple[list[Event], list[Event]] | Any: ...

    async def append_one(self, event: Event, marker: bool) -> Event | Any | None: ...

    async def refresh(self) -> list[Event] | Any: ...

    async def read(self, after: int, limit: int | None) -> list[Event] | Any: ...

    async def meta(self, kind: str, key: str) -> str | Any | None: ...

    async def meta_add(self, kind: str, key: str, value: str) -> str | Any: ...


class Op(msgspec.Struct):
    """One storage operation of a plan: :meth:`run` performs it synchronously, :meth:`arun`
    on an event loop (natively where the log has a coroutine for it)."""

    def run(self, log: SyncLog) -> Any:
        """Perform the operation with the sync storage; returns what the plan is sent."""
        raise NotImplementedError

    async def arun(self, log: SyncLog, native: AsyncLog | None) -> Any:
        """Perform the operation on an event loop: natively when ``native`` does it, else as
        :meth:`run` (the caller decided that the sync call may run on the loop)."""
        return self.run(log)


Plan = Generator[Op, Any, T]
"""A plan: yields operations, is sent their results, returns its outcome."""


class Open(Op):
    """Read the full window: events from the latest compaction marker on, and whether that is
    the whole log."""

    def run(self, log: SyncLog) -> tuple[list[Event], bool]:
        return log._storage_open()

    async def arun(self, log: SyncLog, native: AsyncLog | None) -> Any:
        if native is not None:
            result = await native.open()
            if result is not NotImplemented:
                return result
        return log._storage_open()


class OpenTail(Op):
    """Open the log at its tail (see :meth:`agentsession.BaseSession._storage_open_tail`)."""

    def run(self, log: SyncLog) -> tuple[list[Event], bool]:
        return log._storage_open_tail()

    async def arun(self, log: SyncLog, native: AsyncLog | None) -> Any:
        if native is not None:
            result = await native.open_tail()
            if result is not NotImplemented:
                return result
        return log._storage_open_tail()


class Append(Op):
    """Store a batch after whatever is stored (conditionally with ``expect_seq``): returns the
    events other writers appended first, and the stored events (empty: nothing written)."""

    events: list[Event]
    marker: int
    expect_seq: int | None

    def run(self, log: SyncLog) -> tuple[list[Event], list[Event]] | Reopen:
        return log._storage_append(self.events, self.marker, self.expect_seq)

    async def arun(self, log: SyncLog, native: AsyncLog | None) -> Any:
        if native is not None:
            result = await native.append(self.events, self.marker, self.expect_seq)
            if result is not NotImplemented:
                return result
        return self.run(log)


class AppendOne(Op):
    """The single-event fast path: the stored event, or None (nothing written)."""

    event: Event
    marker: bool

    def run(self, log: SyncLog) -> Event | None:
        return log._storage_append_one(self.event, self.marker)

    async def arun(self, log: SyncLog, native: AsyncLog | None) -> Any:
        if native is not None:
            result = await native.append_one(self.event, self.marker)
            return None if result is NotImplemented else result  # None: the general path
        return self.run(log)


class Refresh(Op):
    """The events other writers appended since the session last looked."""

    def run(self, log: SyncLog) -> list[Event] | Reopen:
        return log._storage_refresh()

    async def arun(self, log: SyncLog, native: AsyncLog | None) -> Any:
        if native is not None:
            result = await native.refresh()
            if result is not NotImplemented:
                return result
        return log._storage_refresh()


class Read(Op):
    """Stored events with ``seq > after``, at most ``limit``."""

    after: int
    limit: int | None

    def run(self, log: SyncLog) -> list[Event]:
        return log._storage_read(self.after, self.limit)

    async def arun(self, log: SyncLog, native: AsyncLog | None) -> Any:
        if native is not None:
            result = await native.read(self.after, self.limit)
            if result is not NotImplemented:
                return result
        return self.run(log)


class ReadOrigin(Op):
    """A branch's shared history: session ``origin``'s events with ``seq > after``, ``count``
    of them (the origin reads them, with its own key)."""

    origin: str
    after: int
    count: int

    def run(self, log: SyncLog) -> list[Event]:
        return log._origin_read(self.origin, self.after, self.count)

    async def arun(self, log: SyncLog, native: AsyncLog | None) -> Any:
        return self.run(log)


class MetaGet(Op):
    """A small persisted value of the store (``kind``, ``key``)."""

    kind: str
    key: str

    def run(self, log: SyncLog) -> str | None:
        return log._meta(self.kind, self.key)

    async def arun(self, log: SyncLog, native: AsyncLog | None) -> Any:
        if native is not None:
            result = await native.meta(self.kind, self.key)
            if result is not NotImplemented:
                return result
        return log._meta(self.kind, self.key)


class MetaAdd(Op):
    """Store ``value`` as the store's value (``kind``, ``key``) unless it has one; the plan is
    sent the value stored (``value``, or the one another writer stored first)."""

    kind: str
    key: str
    value: str

    def run(self, log: SyncLog) -> str:
        return log._meta_add(self.kind, self.key, self.value)

    async def arun(self, log: SyncLog, native: AsyncLog | None) -> Any:
        if native is not None:
            result = await native.meta_add(self.kind, self.key, self.value)
            if result is not NotImplemented:
                return result
        return log._meta_add(self.kind, self.key, self.value)


class Quarantine(Op):
    """Move an unsealed event out of an encrypted log (True when the storage did)."""

    event: Event
    reason: str

    def run(self, log: SyncLog) -> bool:
        return log._quarantine_unsealed(self.event, self.reason)


class Pause(Op):
    """Wait ``seconds`` before the next try (a retry's backoff)."""

    seconds: float

    def run(self, log: SyncLog) -> None:
        time.sleep(self.seconds)

    async def arun(self, log: SyncLog, native: AsyncLog | None) -> None:
        import asyncio  # here: importing the core must not import asyncio (nor fcntl)

        await asyncio.sleep(self.seconds)


def drive(plan: Plan[T], log: SyncLog) -> T:
    """Run ``plan`` to its end with the sync storage ``log``: each operation it yields is
    performed and its result sent back (its exception thrown in). Returns the plan's value."""
    send = plan.send
    try:
        op = next(plan)
        while True:
            try:
                result = op.run(log)
            except BaseException as exc:
                op = plan.throw(exc)
            else:
                op = send(result)
    except StopIteration as stop:
        value: T = stop.value
        return value


async def adrive(plan: Plan[T], log: SyncLog, native: AsyncLog | None) -> T:
    """Run ``plan`` to its end on the event loop: each operation is awaited natively where
    ``native`` does it (see :class:`AsyncLog`), and made with the sync storage otherwise."""
    try:
        op = next(plan)
        while True:
            try:
                result = await op.arun(log, native)
            except BaseException as exc:
                op = plan.throw(exc)
            else:
                op = plan.send(result)
    except StopIteration as stop:
        value: T = stop.value
        return value
