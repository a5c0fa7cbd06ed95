"""Live feeds: ``session.follow()`` yields a conversation's events as any process appends them.

A follower reads what is new (``session.read(after)``, which catches up with other writers),
yields it, and when there is nothing new waits for a sign that the log may have grown. The
signs come from the store's :class:`ChangeHub`: appends made through the same store object
wake followers at once, and the backend's :class:`Watcher` reports appends other processes
make (PostgreSQL ``LISTEN/NOTIFY``, inotify on a JSONL directory, SQLite's
``PRAGMA data_version``, or polling where a backend has nothing better). A follower also reads
again after :data:`FALLBACK` seconds without a sign, so a lost notification delays an event,
never loses it. Each event is yielded once, in seq order: the follower keeps the seq it has
yielded up to and reads after it.

A session deleted (and perhaps created again) while followed raises
:class:`~agentsession.errors.SessionReset` carrying the new life's first seq: what was yielded
belongs to the old life, and the caller decides whether to start over.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import threading
import time
from collections.abc import Callable, Generator
from typing import Any, Final, Protocol

import msgspec

from .contract import SessionInfo
from .errors import SessionReset, UsageError
from .events import Event


class FollowedSession(Protocol):
    """What following needs of a session (a :class:`~agentsession.BaseSession`)."""

    @property
    def id(self) -> str: ...

    @property
    def latest_seq(self) -> int: ...

    @property
    def life(self) -> int: ...

    def read(self, after: int = 0, limit: int | None = None) -> list[Event]: ...

__all__ = [
    "FALLBACK",
    "WATCHED_FALLBACK",
    "Change",
    "ChangeHub",
    "ChangesHost",
    "Cursor",
    "FollowedSession",
    "LocalWatcher",
    "PollWatcher",
    "Subscription",
    "Watcher",
    "changes",
    "check",
    "follow",
    "position",
]

FALLBACK: Final = 5.0
"""Seconds a follower waits for a sign before it reads again anyway, while the store's watcher
is not (yet) watching: the longest a missed sign delays an event then."""

WATCHED_FALLBACK: Final = 60.0
"""The same once the watcher has reported that it watches (its first sign): its signs are then
trusted (a watcher that may have missed appends, after a lost connection or an overflow, says
"any session may have grown"), and an idle follower reads once a minute."""


class Watcher(Protocol):
    """How a backend learns of appends other processes make (one per store object, run in a
    thread of the store's :class:`ChangeHub` while something follows)."""

    def run(self, changed: Callable[[str | None], None], stop: threading.Event) -> None:
        """Until ``stop`` is set, call ``changed(session_id)`` when that session's log may
        have grown (``changed(None)``: any session's may have, also when signs may have been
        lost); return soon after ``stop`` is set. Call ``changed(None)`` once it watches:
        followers then trust its signs (:data:`WATCHED_FALLBACK`). An error ends the
        watching; followers then fall back to reading every :data:`FALLBACK` seconds."""


class PollWatcher:
    """The watcher of a backend that has no sign of its own: "any session may have grown",
    every ``interval`` seconds (each follower then reads what is new)."""

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        """Seconds between two signs."""

    def run(self, changed: Callable[[str | None], None], stop: threading.Event) -> None:
        while not stop.wait(self.interval):
            changed(None)


class LocalWatcher:
    """The watcher of a store whose data no other process (nor store object) writes, the
    memory store: its own appends wake its followers, so it only signs that it watches and
    waits to be stopped (no look at anything, no idle cost)."""

    def run(self, changed: Callable[[str | None], None], stop: threading.Event) -> None:
        changed(None)
        stop.wait()


class Subscription:
    """One follower's wake-up: set by the hub when its session may have grown."""

    def __init__(self, hub: ChangeHub, session_id: str | None) -> None:
        self.session_id = session_id
        """The session followed (None: every session of the store)."""
        self._hub = hub
        self._event = threading.Event()
        # Set by await_sign (asyncio is imported only then: a sync follower never needs it).
        self._loop: Any = None
        self._async_event: Any = None

    def _wake(self) -> None:
        self._event.set()
        loop, event = self._loop, self._async_event
        if loop is not None and event is not None:
            with contextlib.suppress(RuntimeError):  # its loop is closed: nothing waits there
                loop.call_soon_threadsafe(event.set)

    @property
    def fallback(self) -> float:
        """Seconds to wait for a sign before reading anyway (:attr:`ChangeHub.fallback`)."""
        return self._hub.fallback

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a sign; True when there was one (since the last
        wait, or during this one)."""
        woke = self._event.wait(timeout)
        self._event.clear()
        return woke

    async def await_sign(self, timeout: float) -> bool:
        """:meth:`wait` on the running event loop (cancellable)."""
        import asyncio

        if self._async_event is None:
            self._loop = asyncio.get_running_loop()
            self._async_event = asyncio.Event()
            if self._event.is_set():
                self._async_event.set()
        try:
            await asyncio.wait_for(self._async_event.wait(), timeout)
            woke = True
        except TimeoutError:
            woke = False
        self._async_event.clear()
        self._event.clear()
        return woke

    def close(self) -> None:
        """Stop waking this follower."""
        self._hub._drop(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ChangeHub:
    """One store object's followers and its watcher: :meth:`notify` wakes the followers of a
    session (or all), and the watcher thread runs while anything is subscribed."""

    def __init__(self, make_watcher: Callable[[], Watcher] | None) -> None:
        self._make_watcher = make_watcher
        self._watching = False  # the watcher signed once, and still runs
        self._lock = threading.Lock()
        self._subs: dict[str | None, set[Subscription]] = {}
        self._count = 0
        self.followed = False
        """Whether anything is subscribed: a plain attribute, read without a lock by every
        append (a hint: a follower reads again at its fallback anyway)."""
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()


    def subscribe(self, session_id: str | None) -> Subscription:
        """A subscription to ``session_id``'s appends (None: every session's)."""
        sub = Subscription(self, session_id)
        with self._lock:
            self._subs.setdefault(session_id, set()).add(sub)
            self._count += 1
            self.followed = True
            if self._thread is None and self._make_watcher is not None:
                self._stop = threading.Event()
                self._thread = threading.Thread(
                    target=self._watch, args=(self._stop,), name="agentsession-watch", daemon=True
                )
                self._thread.start()
        return sub

    def _drop(self, sub: Subscription) -> None:
        stop = None
        with self._lock:
            subs = self._subs.get(sub.session_id)
            if subs is None or sub not in subs:
                return
            subs.discard(sub)
            if not subs:
                del self._subs[sub.session_id]
            self._count -= 1
            self.followed = self._count > 0
            if not self._count and self._thread is not None:
                stop, self._thread = self._stop, None
        if stop is not None:
            stop.set()

    def notify(self, session_id: str | None) -> None:
        """Wake the followers of ``session_id`` (None: every follower), and those of the whole
        store."""
        with self._lock:
            if session_id is None:
                woken = [s for subs in self._subs.values() for s in subs]
            else:
                woken = [*self._subs.get(session_id, ()), *self._subs.get(None, ())]
        for sub in woken:
            sub._wake()

    @property
    def fallback(self) -> float:
        """Seconds a follower waits for a sign before it reads anyway: :data:`WATCHED_FALLBACK`
        while the watcher watches, :data:`FALLBACK` otherwise."""
        return WATCHED_FALLBACK if self._watching else FALLBACK

    def _watch(self, stop: threading.Event) -> None:
        assert self._make_watcher is not None

        def changed(session_id: str | None) -> None:
            if not stop.is_set():
                self._watching = True
            self.notify(session_id)

        try:
            self._make_watcher().run(changed, stop)
        except Exception:
            pass
        finally:
            self._watching = False
            self.notify(None)  # followers read, and wait the short fallback from now on

    def close(self) -> None:
        """Stop the watcher thread, and wake every follower (the store is closing: their next
        read says so)."""
        with self._lock:
            thread, self._thread = self._thread, None
            stop = self._stop
        stop.set()
        self.notify(None)
        if thread is not None and thread is not threading.current_thread():
            thread.join(2.0)


def check(after: int | None, timeout: float | None) -> None:
    """:class:`UsageError` unless ``after`` is a seq or None and ``timeout`` seconds or None."""
    if after is not None and (isinstance(after, bool) or not isinstance(after, int) or after < 0):
        raise UsageError(f"follow(after=...) needs a seq >= 0 or None, not {after!r}")
    if timeout is not None and (not isinstance(timeout, int | float) or timeout < 0):
        raise UsageError(f"follow(timeout=...) needs seconds >= 0 or None, not {timeout!r}")


def follow(
    session: FollowedSession, hub: ChangeHub, after: int | None, timeout: float | None
) -> Generator[Event, None, None]:
    """``session.follow``: see :meth:`agentsession.BaseSession.follow`."""
    check(after, timeout)
    return _follow(session, hub, after, timeout)


class Cursor:
    """Where a follower is (the sync and the async ``follow`` share it): the seq it has
    yielded up to, the life of the log it follows, and how long it may still wait."""

    def __init__(
        self,
        session_id: str,
        latest: int,
        after: int | None,
        life: int,
        timeout: float | None,
        sub: Subscription,
    ) -> None:
        self.seq = latest if after is None else after
        """The seq yielded up to: the next read is after it."""
        self._id = session_id
        self._life = life
        self._existed = latest > 0  # a session that had no events yet has no life to lose
        self._timeout = timeout
        self._sub = sub
        self._quiet_since = time.monotonic()

    def new_life(self, life: int) -> bool:
        """Whether the log began a new life since the last look (read again); raises
        :class:`~agentsession.errors.SessionReset` when the old one had events."""
        if life == self._life:
            return False
        if self._existed:
            raise SessionReset(self._id, 1)  # a new life starts at seq 1
        self._life = life  # it came to be: follow its first life
        return True

    def took(self, events: list[Event]) -> None:
        """``events`` (read, about to be yielded) move the cursor on."""
        self._existed = True
        self.seq = events[-1].seq
        self._quiet_since = time.monotonic()

    def wait(self) -> float | None:
        """Seconds to wait for a sign now (None: the timeout passed with nothing new)."""
        wait = self._sub.fallback
        if self._timeout is not None:
            left = self._timeout - (time.monotonic() - self._quiet_since)
            if left <= 0:
                return None
            wait = min(wait, left)
        return wait


def _follow(
    session: FollowedSession, hub: ChangeHub, after: int | None, timeout: float | None
) -> Generator[Event, None, None]:
    with hub.subscribe(session.id) as sub:
        cursor = Cursor(session.id, session.latest_seq, after, session.life, timeout, sub)
        while True:
            events = session.read(cursor.seq)
            if cursor.new_life(session.life):
                events = session.read(cursor.seq)
            if events:
                cursor.took(events)
                yield from events
                continue
            wait = cursor.wait()
            if wait is None:
                return
            sub.wait(wait)


class Change(msgspec.Struct, frozen=True, kw_only=True):
    """One item of ``store.changes()``: session ``session_id`` was created, grew, or was
    deleted."""

    session_id: str
    """The session."""
    kind: str
    """``created`` (it has events now and had none), ``appended`` (it grew) or ``deleted``."""
    seq: int
    """Its latest seq now (0 when deleted)."""
    time: _dt.datetime | None = None
    """When it was last appended to, when the store knows it (None for a deletion)."""
    position: str = ""
    """Where the feed is: pass it back as ``store.changes(after=...)`` to resume after this
    change."""


class ChangesHost(Protocol):
    """What the store-wide feed needs of a store (a :class:`~agentsession.BaseStore`)."""

    def list(self, *, prefix: str | None = None) -> list[SessionInfo]: ...

    def get(self, session_id: str) -> Any: ...


def position(time: _dt.datetime | None, session_id: str) -> str:
    """The feed position of a change to ``session_id`` appended to at ``time`` (None: before
    any), as :attr:`Change.position` gives it: ``changes(after=position(...))`` resumes after
    it."""
    return f"{time.isoformat() if time else ''}|{session_id}"


def _resume_point(after: str) -> tuple[_dt.datetime, str]:
    stamp, sep, sid = after.partition("|")
    try:
        when = _dt.datetime.fromisoformat(stamp) if stamp else _MIN
    except ValueError:
        when = None
    if not sep or when is None:
        raise UsageError(f"changes(after=...) needs a position a Change gave, not {after!r}")
    return when, sid


_MIN: Final = _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)


def changes(
    store: ChangesHost,
    hub: ChangeHub,
    prefix: str | None,
    after: str | None,
    timeout: float | None,
) -> Generator[Change, None, None]:
    """``store.changes``: see :meth:`agentsession.BaseStore.changes`."""
    if prefix is not None and not isinstance(prefix, str):
        raise UsageError(f"changes(prefix=...) needs a string or None, not {prefix!r}")
    resume = None if after is None else _resume_point(after)
    check(None, timeout)
    return _changes(store, hub, prefix, resume, after, timeout)


def _fingerprint(info: SessionInfo) -> tuple[object, ...]:
    return (info.last_seq, info.size, info.updated_at)


def _changes(
    store: ChangesHost,
    hub: ChangeHub,
    prefix: str | None,
    resume: tuple[_dt.datetime, str] | None,
    after_text: str | None,
    timeout: float | None,
) -> Generator[Change, None, None]:
    def seq_of(info: SessionInfo) -> int:
        if info.last_seq >= 0:
            return info.last_seq
        latest: int = store.get(info.id).latest_seq  # the listing does not know it: ask the log
        return latest

    with hub.subscribe(None) as sub:
        listing = {info.id: info for info in store.list(prefix=prefix)}
        dated = sorted(
            (i for i in listing.values() if i.updated_at is not None),
            key=lambda i: (i.updated_at or _MIN, i.id),
        )
        cursor = position(dated[-1].updated_at, dated[-1].id) if dated else ""
        if resume is not None:
            cursor = after_text or cursor
            for info in dated:  # what changed since the position, oldest first
                if (info.updated_at or _MIN, info.id) > resume:
                    cursor = position(info.updated_at, info.id)
                    yield Change(
                        session_id=info.id,
                        kind="appended",
                        seq=seq_of(info),
                        time=info.updated_at,
                        position=cursor,
                    )
        quiet_since = time.monotonic()
        while True:
            wait = hub.fallback
            if timeout is not None:
                left = timeout - (time.monotonic() - quiet_since)
                if left <= 0:
                    return
                wait = min(wait, left)
            sub.wait(wait)
            now = {info.id: info for info in store.list(prefix=prefix)}
            found: list[Change] = []
            for sid, info in now.items():
                before = listing.get(sid)
                if before is None or _fingerprint(before) != _fingerprint(info):
                    found.append(
                        Change(
                            session_id=sid,
                            kind="created" if before is None else "appended",
                            seq=seq_of(info),
                            time=info.updated_at,
                            position=position(info.updated_at, sid),
                        )
                    )
            gone = [sid for sid in listing if sid not in now]
            found.sort(key=lambda c: (c.time or _MIN, c.session_id))
            if found:
                cursor = found[-1].position
            for sid in gone:  # (a deletion is seen only while the feed runs)
                found.append(Change(session_id=sid, kind="deleted", seq=0, position=cursor))
            listing = now
            if found:
                quiet_since = time.monotonic()
            yield from found
