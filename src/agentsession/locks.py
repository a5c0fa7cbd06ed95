"""The per-conversation turn lock: one live turn per session across threads and processes.

``store.lock(session_id, timeout=...)`` returns a :class:`TurnLock`, already held; use it as a
context manager or call :meth:`TurnLock.release`. A holder that dies (even by SIGKILL) releases
its lock, because the operating system (``flock``) or the database server (advisory locks)
drops it with the process or connection; that is how recovery tells a crashed turn from a live
one.

The lock is **not reentrant**: asking for a lock the same thread (or asyncio task) already
holds raises :class:`~agentsession.errors.UsageError` at once instead of waiting for itself.
Another thread of the same process waits like another process would. Taking the lock blocks;
from asyncio code, take it in a worker thread so that the event loop keeps running the holder
(``lock = await asyncio.to_thread(store.lock, session_id, timeout)``, then ``lock.release()``):
several coroutines of one loop then wait for each other in turn.

File turn locks (:class:`FileLocker`, used by the JSONL and SQLite stores) need ``fcntl.flock``,
which only POSIX systems (Linux, macOS) have. ``fcntl`` is imported when such a lock is first
used, so importing agentsession works everywhere; on a system without it, taking or testing a
file turn lock raises :class:`~agentsession.errors.StoreUnavailable` naming the platform.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Protocol

from ._names import safe_name
from .errors import LockTimeout, StorageError, StoreUnavailable, UsageError

if TYPE_CHECKING:
    from types import TracebackType

__all__ = [
    "FileLocker",
    "Locker",
    "ThreadLocker",
    "TurnLock",
    "file_locks_unavailable",
    "require_file_locks",
]


class Locker(Protocol):
    """What a backend provides for turn locks. A locker whose holder can lose a lock while
    its process lives (PostgreSQL's, on a connection the server ends) says so with a class
    attribute ``lost_while_alive = True``: taking such a lock over from a holder that did not
    release it then fences the session's log (:mod:`agentsession.fencing`)."""

    def acquire(self, session_id: str, timeout: float | None) -> object:
        """Block until the lock is held (or raise :class:`LockTimeout`); returns a handle."""

    def release(self, handle: object) -> None:
        """Release a held lock."""

    def is_locked(self, session_id: str) -> bool:
        """Whether anyone (this process included) holds the lock now."""


def _wait_steps(timeout: float | None) -> tuple[float | None, float]:
    deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
    return deadline, 0.001


class TurnLock:
    """A held turn lock. Released by :meth:`release` or on leaving a ``with`` block."""

    def __init__(self, registry: _HeldRegistry, session_id: str, handle: object) -> None:
        self._registry = registry
        self._generation = registry.generation
        self.session_id = session_id
        """The session whose turns this lock serialises."""
        self._handle: object | None = handle

    @property
    def held(self) -> bool:
        """True until released, until the store that took it was closed, or until the lock
        was lost: on PostgreSQL a turn lock lives on a server connection, and a connection the
        server ended (a restart, ``pg_terminate_backend``, a network failure) takes the lock
        with it, so another writer may hold it now. A long turn that must not overlap
        another checks ``held`` before it writes what depends on the lock; a lost lock is
        released like any other (the store takes new ones on fresh connections)."""
        return self._handle is not None and self._registry.holds(self.session_id, self._handle)

    def release(self) -> None:
        """Release the lock; releasing twice (or after the store was closed) is harmless."""
        handle, self._handle = self._handle, None
        if handle is not None and self._registry.generation == self._generation:
            self._registry.release(self.session_id, handle)

    def __enter__(self) -> TurnLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "held" if self.held else "released"
        return f"<TurnLock {self.session_id!r} {state}>"


_held_here: contextvars.ContextVar[frozenset[tuple[int, str]]] = contextvars.ContextVar(
    "agentsession_turn_locks_held", default=frozenset()
)
"""The turn locks taken in the current context: a thread's, or an asyncio task's (each task
runs in a copy of its creator's context), so that re-entry is caught where it would deadlock
and nowhere else."""


_acting_owner: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "agentsession_turn_lock_owner", default=None
)
"""Who owns the turn locks taken in the current context when that is not the running thread:
:mod:`agentsession.aio` sets it in the context of work it runs in a worker thread for an
asyncio task, so that the task (not the pool thread) holds what the work takes."""


def _owner() -> tuple[int, int]:
    """This thread, and the asyncio task running in it (0 outside a task); or whoever the
    current context acts for (:data:`_acting_owner`)."""
    acting = _acting_owner.get()
    if acting is not None:
        return acting
    task = None
    aio = sys.modules.get("asyncio")  # not imported: no task can be running
    if aio is not None:
        try:
            task = aio.current_task()
        except RuntimeError:  # no running event loop in this thread
            task = None
    return threading.get_ident(), 0 if task is None else id(task)


class _HeldRegistry:
    """The locks held through one store in this process, and which context took them (to
    refuse re-entry); the handles, so that closing the store releases them."""

    def __init__(self, locker: Locker) -> None:
        self.locker = locker
        self.generation = 0
        """Bumped when every lock is dropped at once (store closed, forked child)."""
        self._handles: dict[str, object] = {}
        self._owners: dict[str, tuple[int, int]] = {}
        self._mutex = threading.Lock()

    def acquire(self, session_id: str, timeout: float | None) -> TurnLock:
        return TurnLock(self, session_id, self.take(session_id, timeout))

    def take(self, session_id: str, timeout: float | None) -> object:
        """Take the backend's lock of ``session_id`` for the calling thread or task (re-entry
        refused); returns its handle, for a :class:`TurnLock` or :meth:`release`."""
        key = (id(self), session_id)
        held = _held_here.get()
        me = _owner()
        with self._mutex:
            # Both must agree: the context took it (not another task spawned from it, which
            # inherits a copy of the context) and so did this thread or task (not a pool
            # thread that ran another task's acquisition before).
            if key in held and self._owners.get(session_id) == me:
                raise UsageError(
                    f"the turn lock of session {session_id!r} is already held here (by this "
                    "thread or asyncio task); the lock is not reentrant"
                )
        handle = self.locker.acquire(session_id, timeout)
        with self._mutex:
            self._handles[session_id] = handle
            self._owners[session_id] = me
        _held_here.set(held | {key})
        return handle

    def held_here(self, session_id: str) -> bool:
        """Whether this thread (or asyncio task) holds the session's lock through this
        registry: the holder may write as the lock's owner without taking it again."""
        with self._mutex:
            return (id(self), session_id) in _held_here.get() and self._owners.get(
                session_id
            ) == _owner()

    def holds(self, session_id: str, handle: object) -> bool:
        with self._mutex:
            if self._handles.get(session_id) is not handle:
                return False
        alive = getattr(self.locker, "alive", None)
        return alive is None or bool(alive(handle))

    def release(self, session_id: str, handle: object) -> None:
        key = (id(self), session_id)
        held = _held_here.get()
        if key in held:
            _held_here.set(held - {key})
        with self._mutex:
            if self._handles.get(session_id) is not handle:
                return  # already released (by release_all)
            del self._handles[session_id]
            self._owners.pop(session_id, None)
        self.locker.release(handle)

    def release_all(self) -> None:
        """Release every lock held through this registry (the store is closing)."""
        with self._mutex:
            held = list(self._handles.values())
            self._handles.clear()
            self._owners.clear()
            self.generation += 1
        errors: list[BaseException] = []
        for handle in held:
            try:
                self.locker.release(handle)
            except StorageError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def forget_after_fork(self) -> None:
        """In a forked child: the parent's locks stay the parent's. Forget them without
        releasing them (the child's copies of their descriptors are closed, which leaves the
        parent's lock in place), and start the locker afresh."""
        self._mutex = threading.Lock()
        held = list(self._handles.values())
        self._handles.clear()
        self._owners.clear()
        self.generation += 1
        after_fork = getattr(self.locker, "after_fork", None)
        if after_fork is not None:
            after_fork(held)


class ThreadLocker:
    """Turn locks for one process (the memory backend)."""

    def __init__(self) -> None:
        self._locks: dict[str, threading.Lock] = {}
        self._mutex = threading.Lock()

    def _lock_for(self, session_id: str) -> threading.Lock:
        with self._mutex:
            return self._locks.setdefault(session_id, threading.Lock())

    def acquire(self, session_id: str, timeout: float | None) -> object:
        lock = self._lock_for(session_id)
        if not lock.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            raise LockTimeout(session_id, timeout or 0.0)
        return lock

    def release(self, handle: object) -> None:
        assert isinstance(handle, type(threading.Lock()))
        handle.release()

    def is_locked(self, session_id: str) -> bool:
        return self._lock_for(session_id).locked()

    def after_fork(self, held: list[object]) -> None:
        """In a forked child: locks copied held from the parent's threads are dropped."""
        self._locks = {}
        self._mutex = threading.Lock()


def file_locks_unavailable(
    what: str, instead: str = "the memory and PostgreSQL stores lock without them"
) -> StoreUnavailable:
    """The error for ``what`` (a plural phrase, for example ``"this store's turn locks"``) on
    a system without POSIX file locks: it names the platform, then says what to do
    ``instead``."""
    import platform  # only on this error path: it is slow to import

    system = platform.system() or sys.platform
    return StoreUnavailable(
        f"{what} need POSIX file locks (the fcntl module), which {system} does not have; {instead}"
    )


def require_file_locks(what: str = "this store's turn locks (lock files)") -> None:
    """Raise :func:`file_locks_unavailable` when this Python has no ``fcntl`` module."""
    try:
        import fcntl  # noqa: F401 - only whether it exists
    except ImportError as exc:
        raise file_locks_unavailable(what) from exc


def _lock_error(action: str, path: str, session_id: str, exc: OSError) -> StorageError:
    """The :class:`StorageError` for an ``OSError`` on a lock file: names the file and the
    session (both already known to whoever configured the store) and the OS reason."""
    reason = exc.strerror or type(exc).__name__
    return StorageError(
        f"cannot {action} the turn lock file {path} of session {session_id!r}: {reason}"
    )


def _close_quietly(fd: int) -> None:
    """Close a descriptor on a path that is already failing (its error would hide the first)."""
    with contextlib.suppress(OSError):
        os.close(fd)


class FileLocker:
    """Turn locks as ``flock`` on one small file per session in a directory.

    Every ``OSError`` (a directory that cannot be created, a file that cannot be opened or
    locked) becomes a :class:`~agentsession.errors.StorageError` naming the lock file and the
    session. On a system without ``fcntl`` (Windows), creating one raises
    :class:`~agentsession.errors.StoreUnavailable`; a store creates its locker when a turn lock
    is first taken or tested (``lock``, ``is_locked``, and ``recover`` when a session has a
    crashed turn), not when it is opened.
    """

    def __init__(self, directory: str) -> None:
        require_file_locks()
        self.directory = directory
        """Where the lock files live (created owner-only)."""

    def path_for(self, session_id: str) -> str:
        """The lock file of a session."""
        return os.path.join(self.directory, safe_name(session_id) + ".lock")

    def _open(self, session_id: str, create: bool) -> int | None:
        """The lock file's descriptor; None when it does not exist and ``create`` is False."""
        path = self.path_for(session_id)
        flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0) | (os.O_CREAT if create else 0)
        if create:
            try:
                os.makedirs(self.directory, mode=0o700, exist_ok=True)
            except OSError as exc:
                raise _lock_error("create the directory of", path, session_id, exc) from exc
        try:
            try:
                return os.open(path, flags, 0o600)
            except OSError as exc:
                if create or exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                    raise
                # Testing a lock only reads (flock needs no write access): a store on a
                # read-only mount, or another user's, can still be asked.
                return os.open(path, flags & ~os.O_RDWR | os.O_RDONLY)
        except FileNotFoundError as exc:
            if create:
                raise _lock_error("create", path, session_id, exc) from exc
            return None
        except OSError as exc:
            raise _lock_error("open", path, session_id, exc) from exc

    def acquire(self, session_id: str, timeout: float | None) -> object:
        import fcntl  # present: checked when this locker was made

        fd = self._open(session_id, create=True)
        assert fd is not None
        deadline, pause = _wait_steps(timeout)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                pass
            except OSError as exc:
                _close_quietly(fd)
                raise _lock_error("lock", self.path_for(session_id), session_id, exc) from exc
            if deadline is not None and time.monotonic() >= deadline:
                _close_quietly(fd)
                raise LockTimeout(session_id, timeout or 0.0)
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def release(self, handle: object) -> None:
        assert isinstance(handle, int)
        try:
            os.close(handle)  # closing the descriptor drops the flock
        except OSError as exc:
            raise StorageError(
                f"cannot close a turn lock file in {self.directory}: "
                f"{exc.strerror or type(exc).__name__}"
            ) from exc

    def after_fork(self, held: list[object]) -> None:
        """In a forked child: close this process's copies of the parent's lock descriptors
        (the parent's locks stay held: its own descriptors still reference them)."""
        for handle in held:
            if isinstance(handle, int):
                _close_quietly(handle)

    def is_locked(self, session_id: str) -> bool:
        import fcntl  # present: checked when this locker was made

        fd = self._open(session_id, create=False)
        if fd is None:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError as exc:
            raise _lock_error("test", self.path_for(session_id), session_id, exc) from exc
        finally:
            _close_quietly(fd)
        return False
