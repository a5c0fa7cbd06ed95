"""Where each operation of the async API runs: inline on the event loop, or in a worker thread.

Every coroutine of :mod:`agentsession.aio` is one call of the sync API (a method of
:class:`~agentsession.BaseStore`, :class:`~agentsession.BaseSession`, :class:`~agentsession.Turn`
or :class:`~agentsession.Step`), described by a :class:`Call` and handed to the store's
:class:`AsyncBackend`, which decides where it runs (:meth:`AsyncBackend.placement`) and runs it
(:meth:`AsyncBackend.call`). The semantics stay in the sync objects; this module only moves work.

* **Inline** on the loop: work that cannot wait for long (the memory backend; a JSONL append
  at durability ``flush``, one ``write()`` to the page cache; a read served from a JSONL
  session's window). An inline call that touches a session first tries the session's lock
  without waiting: when a worker thread holds it, the call goes to a thread instead, so the
  loop never waits for another thread's storage work.
* **Natively**, where the store's backend has async I/O (see below).
* **In a worker thread** of the store's executor: everything else (fsync, SQLite, what
  PostgreSQL does not do natively, reads that may reach storage, recovery). The thread runs in
  a copy of the task's context (so the turn id and run context are read there as in the
  task), and the turn locks it takes belong to the task, not to the pool thread.

**Cancellation.** Work handed to a thread is never interrupted: a task cancelled while its call
waits in the executor's queue gets ``CancelledError`` at once and nothing was done; a task
cancelled while its call runs gets ``CancelledError`` when the call has finished (its result is
dropped, and undone where a :attr:`Call.undo` says how, as for a turn lock taken meanwhile).
So when ``CancelledError`` reaches the caller of ``append_many``, the batch is in the log whole
or not at all, and it will not land later. A call marked :attr:`Call.shield` (closing a turn,
a step or a lock) runs even when the task is cancelled before it starts.

**Declared capabilities.** Which of these a backend's operations get is read from what its
store class declares (``capabilities``, a :class:`~agentsession.contract.Capabilities`), never
from its name: ``in_memory`` (memory), ``inline_appends`` and ``inline_reads`` (JSONL), nothing
(threads: SQLite, the static store, third-party backends), ``native_async`` (PostgreSQL).

**Native async storage**: a store class declaring ``native_async`` hands its store the
function ``async_backend(executor)`` among its parts (``StoreParts.async_backend``, reached
through the public :meth:`~agentsession.store.BaseStore.async_backend`), returning a subclass of
:class:`AsyncBackend` whose :meth:`~AsyncBackend.native_log` gives a session's log storage as
coroutines (a :class:`NativeLog`). The async session then runs ``append``,
``append_many``, ``read``, ``latest_seq``, ``messages`` and ``entries`` as the sync API's own
plans, driven on the loop by :func:`agentsession.ops.adrive`: its tasks queue on the log's
:attr:`NativeLog.queue`, then it takes the session's lock without waiting (a worker thread
holding it sends the call to a thread, as the sync plan) and holds it until the plan ends.
A write the log has started settles before ``CancelledError`` reaches the caller, and the
plan takes its outcome in first (:meth:`NativeLog.drive`), so the promise above holds.
:meth:`AsyncBackend.close` releases what the backend holds when the store closes. PostgreSQL
does (:mod:`agentsession.backends.postgres.aio`: psycopg's ``AsyncConnectionPool``);
``offload="always"`` uses worker threads instead.

The placement reads the sync session's state only through its public, I/O-free members
(:attr:`~agentsession.BaseSession.state_lock`, :attr:`~agentsession.BaseSession.encrypted`,
:attr:`~agentsession.BaseSession.window_loaded`, :meth:`~agentsession.BaseSession.window_holds`,
:meth:`~agentsession.BaseSession.history_in_memory`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import os
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Generic, Literal, Protocol, TypeVar

from ..locks import _acting_owner, _held_here, _owner
from ..ops import AsyncLog, Plan
from ..session import BaseSession
from ..store import BaseStore

__all__ = [
    "AsyncBackend",
    "Call",
    "CallKind",
    "NativeLog",
    "Offload",
    "Where",
    "backend_for",
    "default_max_threads",
    "window_serves",
]

T = TypeVar("T")

Where = Literal["inline", "thread"]
"""Where a call runs: on the event loop, or in a worker thread of the store's executor."""

Offload = Literal["auto", "always"]
"""``auto``: each backend's placement (see ``docs/architecture.md``, "The async API");
``always``: every operation that may touch storage runs in a worker thread."""

CallKind = Literal["append", "read", "buffered", "lock", "hooks", "other"]
"""What a call does, for the placement: ``append`` writes events; ``read`` is ``read``,
``latest_seq``, ``messages`` or ``entries``; ``buffered`` is a recorder helper while a batched
step is open (it only checks and buffers the event); ``lock`` tries, tests or releases a turn
lock; ``hooks`` may call lifecycle hooks (fork, merge, discard); ``other`` is the rest."""

_PROPAGATED: tuple[contextvars.ContextVar[Any], ...] = (_held_here,)
"""Context variables that a call marked :attr:`Call.propagate` hands back to the task: the
turn locks the context holds."""


def default_max_threads() -> int:
    """The default size of a store's thread pool (as asyncio's default executor)."""
    return min(32, (os.cpu_count() or 1) + 4)


_NO_ARGS: Mapping[str, Any] = MappingProxyType({})


class Call(Generic[T]):
    """One operation of the async API: the sync call that does it, and what the placement
    needs to know about it. (A plain class with slots: one is made per call, on the hot path
    of an inline append.)"""

    __slots__ = ("args", "fn", "kind", "op", "propagate", "session", "shield", "undo",
                 "user_message")

    def __init__(
        self,
        op: str,
        kind: CallKind,
        fn: Callable[[], T],
        session: BaseSession | None = None,
        args: Mapping[str, Any] | None = None,
        *,
        user_message: bool = False,
        shield: bool = False,
        propagate: bool = False,
        undo: Callable[[T], object] | None = None,
    ) -> None:
        self.op = op
        """The operation, for example ``append_many``, ``store.get``, ``turn.user``,
        ``lock.try``."""
        self.kind = kind
        """What it does (see :data:`CallKind`)."""
        self.fn = fn
        """The sync call (a ``functools.partial`` of a sync method)."""
        self.session = session
        """The session it touches, if any."""
        self.args = _NO_ARGS if args is None else args
        """The operation's arguments by name, for a backend that performs it natively."""
        self.user_message = user_message
        """Whether it may append a user message (which can apply the history cap)."""
        self.shield = shield
        """Run it even when the task is cancelled before it started (closing a turn, a
        lock)."""
        self.propagate = propagate
        """Hand the turn locks the call took or released back to the task's context."""
        self.undo = undo
        """What undoes the call's result when the task was cancelled while it ran."""

    def __repr__(self) -> str:
        return f"<Call {self.op} ({self.kind})>"


class NativeLog(AsyncLog, Protocol):
    """One session's log storage as coroutines (:class:`agentsession.ops.AsyncLog`), with
    what the async session needs to drive its plans on them."""

    @property
    def queue(self) -> asyncio.Lock:
        """The lock this event loop's tasks take, one after another, to drive a plan of the
        session (the session's own lock is re-entrant on the loop's thread)."""

    async def connect(self) -> bool:
        """Get ready to drive a plan on the running loop; False when it cannot now (the call
        then runs in a worker thread)."""

    async def drive(self, plan: Plan[T], *, writes: bool) -> T:
        """Run ``plan`` with :func:`agentsession.ops.adrive` on this log, the session's lock
        held by the caller. When the plan ``writes`` (an append), a cancellation that arrives
        once it has started a write is raised when the plan has ended (the write settled and
        taken in); before that, and for other plans, the plan is interrupted where it
        waits."""


class AsyncBackend:
    """How one store's operations run under asyncio: the placement policy and the runner.

    This base class is the policy of every backend without one of its own (SQLite,
    third-party backends) and of ``offload="always"``: every call runs in a worker thread,
    except recorder helpers while a batched step is open (they only buffer). Subclasses
    override :meth:`placement`; a backend with native async primitives overrides :meth:`call`.
    """

    name = "threads"
    """A short name for people (docs, benchmarks, ``repr``)."""

    def __init__(self, store: BaseStore, executor: concurrent.futures.Executor) -> None:
        self.store = store
        """The sync store whose operations this runs."""
        self.executor = executor
        """The worker threads."""

    def placement(self, call: Call[Any]) -> Where:
        """Where ``call`` runs (before the inline session-lock check)."""
        return "inline" if call.kind == "buffered" else "thread"

    async def call(self, call: Call[T]) -> T:
        """Run ``call`` where :meth:`placement` says. For a call that touches a session, the
        placement is decided holding the session's lock (taken without waiting), so the
        session state it reads stays as it was until the call has run; when a worker thread
        holds that lock, the call runs in a thread instead of waiting for it on the loop."""
        session = call.session
        if session is None or call.kind == "buffered":
            if self.placement(call) == "inline":
                return self._inline(call)
            return await self._in_thread(call)
        lock = session.state_lock
        if lock.acquire(blocking=False):
            try:
                if self.placement(call) == "inline":
                    return self._inline(call)
            finally:
                lock.release()
        return await self._in_thread(call)

    def _inline(self, call: Call[T]) -> T:
        # A copy of the context, as in a thread: what the sync call sets in it (a sync turn's
        # turn id) stays there; only the turn locks come back when asked.
        context = contextvars.copy_context()
        result = context.run(call.fn)
        if call.propagate:
            _hand_back(context)
        return result

    async def _in_thread(self, call: Call[T]) -> T:
        owner = _owner()  # this task (or whom the task acts for) owns the locks taken there
        context = contextvars.copy_context()
        fn = call.fn

        def work() -> T:
            _acting_owner.set(owner)
            return fn()

        pending = self.executor.submit(context.run, work)
        future = asyncio.wrap_future(pending)
        try:
            result = await asyncio.shield(future)
        except asyncio.CancelledError:
            if not call.shield and pending.cancel():
                raise  # still queued: nothing was done
            done, value = await _settle(future)
            if done and call.undo is not None:
                undo = call.undo
                await self.call(
                    Call(f"{call.op}.undo", call.kind, lambda: undo(value), call.session,
                         shield=True)
                )
            raise
        if call.propagate:
            _hand_back(context)
        return result

    def native_log(self, session: BaseSession) -> NativeLog | None:
        """``session``'s log storage as coroutines, when this backend has them for it (see
        the module docstring); None: the session's calls run as :meth:`call` places them."""
        return None

    async def close(self) -> None:
        """Release what the backend holds of its own (a native connection pool); called once,
        when its store closes, after the sync store was closed. Threads: nothing."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} for {self.store!r}>"


def window_serves(session: BaseSession, call: Call[Any]) -> bool:
    """Whether a read call (``read``, ``latest_seq``, ``messages``, ``entries``) is answered by
    the session's in-memory window once it has caught up with other writers, reading nothing
    else from storage: ``read(after)`` when the window holds ``after + 1``; the history when
    the full window is loaded and the deriver of that agent filter exists (or the window is
    the whole log). Read with the session's :attr:`~agentsession.BaseSession.state_lock` held,
    or as a hint."""
    op = call.op
    if op == "latest_seq":
        return True
    if op == "read":
        after = call.args.get("after", 0)
        return isinstance(after, int) and session.window_holds(after)
    if op in ("messages", "entries"):
        return session.history_in_memory(call.args.get("agent"))
    return False


def _hand_back(context: contextvars.Context) -> None:
    """Set in the running context the propagated variables' values from ``context``."""
    for var in _PROPAGATED:
        value = context.get(var)
        if value is not var.get():
            var.set(value)


async def _settle(future: asyncio.Future[T]) -> tuple[bool, Any]:
    """Wait for ``future`` however often the task is cancelled meanwhile; whether it
    succeeded, and its result (its exception is dropped: the cancellation wins)."""
    while True:
        try:
            return True, await asyncio.shield(future)
        except asyncio.CancelledError:
            if future.done():
                return False, None
        except BaseException:  # the work failed: the cancellation is what the caller gets
            return False, None


_THREADED_EVEN_IN_MEMORY = frozenset({"store.recover", "store.change_passphrase"})
"""Operations that go to a thread on a store whose I/O is all in memory: recovery may wait for
turn locks, and changing the passphrase runs scrypt (about 0.1 s of CPU)."""


class _InMemoryBackend(AsyncBackend):
    """The placement of a store declaring ``in_memory`` (the memory backend): everything
    inline (nothing waits for storage), except what may call lifecycle hooks (a sync hook must
    not run on the loop), recovery (which may wait for turn locks) and changing the passphrase
    (scrypt: about 0.1 s of CPU)."""

    name = "in-memory"

    def placement(self, call: Call[Any]) -> Where:
        if call.kind == "hooks" or call.op in _THREADED_EVEN_IN_MEMORY:
            return "thread"
        return "inline"


class _DeclaredBackend(AsyncBackend):
    """The placement of a store declaring ``inline_appends`` or ``inline_reads`` (JSONL):
    with ``inline_appends``, appends inline at durability ``flush`` unless the session is
    encrypted or a user message may apply the history cap to a window not loaded yet; with
    ``inline_reads``, reads inline when the session's window serves them; recorder helpers
    of an open batched step inline (they only buffer); the rest in a worker thread."""

    name = "inline-io"

    def __init__(self, store: BaseStore, executor: concurrent.futures.Executor) -> None:
        super().__init__(store, executor)
        capabilities = store.capabilities
        self._appends = capabilities.inline_appends
        self._reads = capabilities.inline_reads

    def placement(self, call: Call[Any]) -> Where:
        kind, session = call.kind, call.session
        if kind == "buffered":
            return "inline"
        if session is None:
            return "thread"
        if kind == "append":
            cheap = (
                self._appends
                and self.store.durability == "flush"
                and not session.encrypted
                and (not call.user_message or session.window_loaded)
            )
            return "inline" if cheap else "thread"
        if kind == "read" and self._reads and window_serves(session, call):
            return "inline"
        return "thread"


def backend_for(
    store: BaseStore, executor: concurrent.futures.Executor, offload: Offload
) -> AsyncBackend:
    """The :class:`AsyncBackend` of ``store``, from what its class declares
    (:attr:`~agentsession.store.BaseStore.capabilities`): worker threads with
    ``offload="always"``; else the store's native async I/O (``native_async``), else the
    in-memory placement (``in_memory``), else inline appends and reads as declared, else
    threads."""
    if offload == "always":
        return AsyncBackend(store, executor)
    capabilities = store.capabilities
    if capabilities.native_async:
        backend = store.async_backend(executor)
        if not isinstance(backend, AsyncBackend):
            raise TypeError(f"{type(store).__name__}.async_backend must return an AsyncBackend")
        return backend
    if capabilities.in_memory:
        return _InMemoryBackend(store, executor)
    if capabilities.inline_appends or capabilities.inline_reads:
        return _DeclaredBackend(store, executor)
    return AsyncBackend(store, executor)
