"""``AsyncSession``, ``AsyncTurn`` and ``AsyncStep``: the session API and the recorder as
coroutines, each delegating to the sync object it wraps (see :mod:`agentsession.aio`)."""

from __future__ import annotations

import asyncio
import datetime as _dt
import functools
import inspect
from collections.abc import AsyncIterator, Callable, Mapping, Sequence, Sized
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, cast

from .. import _trace
from ..branching import BranchRef
from ..children import DEFAULT_MERGE_LOCK_TIMEOUT, SessionRecord
from ..compaction import (
    CompactionFailure,
    DeferredPolicy,
    policy_deferred,
    summary_of,
    usage_events,
)
from ..context import AgentFilter, resolve_agent, turn_id, with_turn_id
from ..derive import IndexedMessage
from ..errors import UsageError
from ..events import USER_MESSAGE, Event
from ..fencing import Lease
from ..follow import Cursor, Subscription
from ..follow import check as check_follow
from ..inbox import Delivery
from ..media import StoragePolicy
from ..messages import Message
from ..ops import Plan
from ..recorder import Step, Turn
from ..session import BaseSession
from ..store import BaseStore
from ._backend import AsyncBackend, CallKind, NativeLog
from ._recorder import AsyncRecording

if TYPE_CHECKING:
    from types import TracebackType

    from typing_extensions import Unpack

__all__ = [
    "AsyncDelivery",
    "AsyncSession",
    "AsyncStep",
    "AsyncTurn",
    "LeaseHolder",
    "SessionHost",
]

T = TypeVar("T")


class _Lock(Protocol):
    async def __aenter__(self) -> object: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class SessionHost(Protocol):
    """What an async session needs from its async store."""

    @property
    def sync(self) -> BaseStore:
        """The sync store."""

    @property
    def backend(self) -> AsyncBackend:
        """Where the store's calls run."""

    async def _call(
        self,
        op: str,
        fn: Callable[[], T],
        *,
        kind: CallKind = "other",
        session: BaseSession | None = None,
        args: Mapping[str, Any] | None = None,
        user_message: bool = False,
        shield: bool = False,
    ) -> T: ...

    def _wrap(self, session: BaseSession) -> AsyncSession: ...

    def lock(self, session_id: str, timeout: float | None = None) -> _Lock:
        """The session's turn lock."""


class LeaseHolder(Protocol):
    """A taken turn lock that holds a sync lease: an
    :class:`~agentsession.aio.AsyncTurnLock` (``async with astore.lock(...) as lock``)."""

    @property
    def lease(self) -> Lease:
        """The sync lease taken."""


def _has_user_message(events: Sequence[object]) -> bool:
    return any(getattr(event, "type", None) == USER_MESSAGE for event in events)


class AsyncSession:
    """One conversation's log, as coroutines: every method is the sync
    :class:`~agentsession.BaseSession` method of the same name, run inline or in a worker
    thread (see :mod:`agentsession.aio`). Get one from :meth:`AsyncStore.get
    <agentsession.aio.AsyncStore.get>`."""

    def __init__(self, store: SessionHost, session: BaseSession) -> None:
        self._store = store
        self._sync = session

    @property
    def id(self) -> str:
        """The session id."""
        return self._sync.id

    @property
    def sync(self) -> BaseSession:
        """The sync session this wraps (the same object ``store.sync.get(id)`` returns)."""
        return self._sync

    @property
    def store(self) -> SessionHost:
        """The async store the session came from."""
        return self._store

    @property
    def location(self) -> str:
        """Where the session is stored, for people."""
        return self._sync.location

    async def _call(
        self,
        op: str,
        fn: Callable[[], T],
        kind: CallKind = "other",
        *,
        args: Mapping[str, Any] | None = None,
        user_message: bool = False,
        shield: bool = False,
    ) -> T:
        return await self._store._call(
            op,
            fn,
            kind=kind,
            session=self._sync,
            args=args,
            user_message=user_message,
            shield=shield,
        )

    async def _drive(
        self, native: NativeLog, op: str, plan: Callable[[], Plan[T]], kind: CallKind
    ) -> T:
        """Run the sync API's plan (``plan()``) on the session's native log storage, after
        this loop's other tasks driving one (see :mod:`agentsession.aio._backend`; ``kind``
        ``append``: a plan that writes); in a worker thread, with the sync driver, when the
        log cannot be used from this loop now or a thread holds the session's lock."""
        session = self._sync
        async with native.queue:  # cancelled while waiting: nothing done
            if await native.connect():
                lock = session.state_lock
                if lock.acquire(blocking=False):
                    try:
                        return await native.drive(plan(), writes=kind == "append")
                    finally:
                        lock.release()
            return await self._call(op, lambda: session.plans.run(plan()), kind, shield=False)

    # -- the log ----------------------------------------------------------------------------

    async def latest_seq(self) -> int:
        """Highest seq in the log (0 when empty), including other writers' appends."""
        native = self._store.backend.native_log(self._sync)
        if native is not None:
            return await self._drive(native, "latest_seq", self._sync.plans.latest_seq, "read")
        return await self._call("latest_seq", lambda: self._sync.latest_seq, "read")

    async def append(self, event: Event) -> int:
        """Append one event; returns its seq (:meth:`agentsession.BaseSession.append`)."""
        native = self._store.backend.native_log(self._sync)
        if native is not None:
            return await self._append_natively(native, event)
        return await self._store._call(  # the hot path: no extra layer
            "append",
            functools.partial(self._sync.append, event),
            kind="append",
            session=self._sync,
            args={"event": event},
            user_message=getattr(event, "type", None) == USER_MESSAGE,
        )

    async def _traced(
        self,
        native: NativeLog,
        op: str,
        plan: Callable[[], Plan[T]],
        kind: CallKind,
        span_name: str,
        counted: Literal["events", "messages"] | None = None,
        **fields: Unpack[_trace.Attributes],
    ) -> T:
        """:meth:`_drive`, in a span ``span_name`` while tracing is on: the session's id and
        backend, ``fields``, and the length of the result as ``counted``."""
        if not _trace.enabled:
            return await self._drive(native, op, plan, kind)
        sync = self._sync
        attributes: _trace.Attributes = {
            **fields,
            "session_id": sync.id,
            "backend": _trace.backend_of(sync),
        }
        with _trace.span(span_name, **attributes) as span:
            result = await self._drive(native, op, plan, kind)
            if counted == "events":
                span.set(events=len(cast("Sized", result)))
            elif counted == "messages":
                span.set(messages=len(cast("Sized", result)))
            return result

    async def _append_natively(self, native: NativeLog, event: Event) -> int:
        prepared = self._sync.plans.append(event)  # checked and stamped once, here
        plan = functools.partial(_once, prepared)
        event_type = getattr(event, "type", None)
        return await self._traced(
            native, "append", plan, "append", "agentsession.append", events=1, event_type=event_type
        )

    async def append_many(
        self, events: Sequence[Event], *, expect_seq: int | None = None
    ) -> list[int]:
        """Append a batch atomically: all events or none, with consecutive seqs
        (:meth:`agentsession.BaseSession.append_many`). Cancelled while it runs, the batch
        is written whole or not at all, and is settled when ``CancelledError`` arrives."""
        batch = events if isinstance(events, Event) else list(events)
        native = self._store.backend.native_log(self._sync)
        if native is not None:
            return await self._append_many_natively(native, batch, expect_seq)
        return await self._call(
            "append_many",
            functools.partial(self._sync.append_many, batch, expect_seq=expect_seq),
            "append",
            args={"events": batch, "expect_seq": expect_seq},
            user_message=isinstance(batch, list) and _has_user_message(batch),
        )

    async def _append_many_natively(
        self, native: NativeLog, events: Sequence[Event], expect_seq: int | None
    ) -> list[int]:
        plan = functools.partial(_once, self._sync.plans.append_many(events, expect_seq))
        return await self._traced(
            native, "append_many", plan, "append", "agentsession.append", counted="events"
        )

    async def read(self, after: int = 0, limit: int | None = None) -> list[Event]:
        """Events with ``seq > after`` in seq order, at most ``limit``."""
        native = self._store.backend.native_log(self._sync)
        if native is not None:
            plan = functools.partial(self._sync.plans.read, after, limit)
            return await self._traced(
                native, "read", plan, "read", "agentsession.read", counted="events"
            )
        return await self._call(
            "read",
            functools.partial(self._sync.read, after, limit),
            "read",
            args={"after": after, "limit": limit},
        )

    async def messages(
        self, agent: AgentFilter = None, *, max_tool_result_bytes: int | None = None
    ) -> list[Message]:
        """The provider-valid, compaction-aware history
        (:meth:`agentsession.BaseSession.messages`)."""
        agent = resolve_agent(agent)  # here: the envelope is this task's
        native = self._store.backend.native_log(self._sync)
        if native is not None:
            plan = functools.partial(self._sync.plans.messages, agent, max_tool_result_bytes)
            return await self._traced(
                native,
                "messages",
                plan,
                "read",
                "agentsession.messages",
                counted="messages",
                agent=agent or None,
            )
        fn = functools.partial(
            self._sync.messages, agent, max_tool_result_bytes=max_tool_result_bytes
        )
        args = {"agent": agent, "max_tool_result_bytes": max_tool_result_bytes}
        return await self._call("messages", fn, "read", args=args)

    async def entries(self, agent: AgentFilter = None) -> list[IndexedMessage]:
        """The derived history with source seqs (what compaction plans its cut on)."""
        agent = resolve_agent(agent)
        native = self._store.backend.native_log(self._sync)
        if native is not None:
            plan = functools.partial(self._sync.plans.entries, agent)
            return await self._drive(native, "entries", plan, "read")
        fn = functools.partial(self._sync.entries, agent)
        return await self._call("entries", fn, "read", args={"agent": agent})

    # -- compaction -------------------------------------------------------------------------

    async def compact(
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
        """Replace the history before a turn boundary by ``summary``; the marker's seq, or
        None (:meth:`agentsession.BaseSession.compact`)."""
        fn = functools.partial(
            self._sync.compact,
            summary,
            keep_turns=keep_turns,
            first_kept_seq=first_kept_seq,
            up_to_message=up_to_message,
            tokens_before=tokens_before,
            agent=agent,
            summary_role=summary_role,
        )
        return await self._call("compact", fn)

    async def rewind(
        self,
        *,
        to_turn: int | str | None = None,
        to_seq: int | None = None,
        reason: str | None = None,
    ) -> int:
        """Go back in the conversation with a rewind marker; returns its seq
        (:meth:`agentsession.BaseSession.rewind`)."""
        fn = functools.partial(self._sync.rewind, to_turn=to_turn, to_seq=to_seq, reason=reason)
        return await self._call("rewind", fn)

    def retry(self, *, agent: str | None = None) -> AsyncTurn:
        """Regenerate the last answer: ``async with session.retry() as turn:``
        (:meth:`agentsession.BaseSession.retry`)."""
        return AsyncTurn(self, self._sync.retry(agent=agent))

    def edit(
        self, turn_seq: int, new_message: Message | str, *, agent: str | None = None
    ) -> AsyncTurn:
        """Edit an earlier message: ``async with session.edit(seq, "...") as turn:``
        (:meth:`agentsession.BaseSession.edit`)."""
        return AsyncTurn(self, self._sync.edit(turn_seq, new_message, agent=agent))

    @property
    def origin(self) -> BranchRef | None:
        """For a branch: the session it branched from and the seq (no I/O;
        :attr:`agentsession.BaseSession.origin`)."""
        return self._sync.origin

    async def branch(
        self,
        *,
        at_turn: int | str | None = None,
        at_seq: int | None = None,
        id: str | None = None,
    ) -> AsyncSession:
        """A new session sharing this one's history up to a point, without copying it
        (:meth:`agentsession.BaseSession.branch`)."""
        fn = functools.partial(self._sync.branch, at_turn=at_turn, at_seq=at_seq, id=id)
        return self._store._wrap(await self._call("branch", fn, "hooks"))

    async def branches(self) -> list[BranchRef]:
        """This session's branches (:meth:`agentsession.BaseSession.branches`)."""
        return await self._call("branches", self._sync.branches, "read")

    async def prune(self, max_messages: int, agent: str | None = None) -> int | None:
        """Cap the history at ``max_messages`` derived messages
        (:meth:`agentsession.BaseSession.prune`)."""
        return await self._call("prune", functools.partial(self._sync.prune, max_messages, agent))

    async def annotate_timeout(self, partial: str = "", *, agent: str = "") -> int:
        """Record that the model's reply timed out; returns the seq
        (:meth:`agentsession.BaseSession.annotate_timeout`; the task's turn id is stamped)."""
        fn = functools.partial(self._sync.annotate_timeout, partial, agent=agent)
        return await self._call("annotate_timeout", fn, "append")

    # -- recording --------------------------------------------------------------------------

    def turn(
        self,
        agent: str | None = None,
        user: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        *,
        storage: StoragePolicy | None = None,
        batch_steps: bool = False,
    ) -> AsyncTurn:
        """Record a turn: ``async with session.turn(agent=...) as turn: ...`` (see
        :class:`AsyncTurn` and :meth:`agentsession.BaseSession.turn`). The defaults and the
        turn id are taken from the calling task's context."""
        sync = self._sync.turn(agent, user, metadata, storage=storage, batch_steps=batch_steps)
        return AsyncTurn(self, sync)

    @property
    def life(self) -> int:
        """How often the log was found gone and opened anew (no I/O;
        :attr:`agentsession.BaseSession.life`)."""
        return self._sync.life

    def subscribe(self) -> Subscription:
        """A wake-up for a loop of its own: ``await sub.await_sign(seconds)``
        (:meth:`agentsession.BaseSession.subscribe`; no I/O)."""
        return self._sync.subscribe()

    async def follow(
        self, *, after: int | None = None, timeout: float | None = None
    ) -> AsyncIterator[Event]:
        """The events after seq ``after`` (None: the latest now) as any process appends them,
        in seq order, each once: ``async for event in session.follow(): ...``; until
        ``timeout`` seconds pass with nothing new (None: for ever), the iterator is closed or
        the task cancelled (:meth:`agentsession.BaseSession.follow`). Raises
        :class:`~agentsession.errors.SessionReset` when the session is deleted while
        followed."""
        check_follow(after, timeout)
        with self._sync.subscribe() as sub:
            latest = await self.latest_seq()
            cursor = Cursor(self.id, latest, after, self._sync.life, timeout, sub)
            while True:
                events = await self.read(cursor.seq)
                if cursor.new_life(self._sync.life):
                    events = await self.read(cursor.seq)
                if events:
                    cursor.took(events)
                    for event in events:
                        yield event
                    continue
                wait = cursor.wait()
                if wait is None:
                    return
                await sub.await_sign(wait)

    async def pending(
        self, lease: LeaseHolder | Lease, *, retry_unfinished: bool = False
    ) -> AsyncIterator[AsyncDelivery]:
        """The inbox's deliveries not claimed yet, in delivery (seq) order, for the task
        holding ``lease`` (the async lock taken with ``async with astore.lock(...)``, or its
        sync lease): ``async for d in session.pending(lock): async with d.start_turn() as
        turn: ...`` (:meth:`agentsession.BaseSession.pending`; each step of the sync
        generator runs as one call)."""
        sync_lease = lease.lease if not isinstance(lease, Lease) else lease
        generator = self._sync.pending(sync_lease, retry_unfinished=retry_unfinished)
        try:
            while True:
                delivery = await self._call(
                    "pending", functools.partial(next, generator, None), "read"
                )
                if delivery is None:
                    return
                yield AsyncDelivery(self, delivery)
        finally:
            await self._call("pending.close", generator.close, "other", shield=True)

    # -- child sessions and the session record ------------------------------------------------

    async def fork(
        self,
        agent: str = "",
        *,
        inherit: int | Literal["all"] = 0,
        max_messages: int | None = None,
        task: str = "",
        meta: Mapping[str, str] | None = None,
        parent_agent: str | None = None,
        child_id: str | None = None,
    ) -> AsyncSession:
        """Fork a child session for a subagent; returns it
        (:meth:`agentsession.BaseSession.fork`)."""
        fn = functools.partial(
            self._sync.fork,
            agent,
            inherit=inherit,
            max_messages=max_messages,
            task=task,
            meta=meta,
            parent_agent=parent_agent,
            child_id=child_id,
        )
        return self._store._wrap(await self._call("fork", fn, "hooks"))

    async def _under_parent_lock(
        self, op: str, fn: Callable[[], int], timeout: float | None
    ) -> int:
        """Run a merge or discard holding the parent's turn lock, taken here (polled, never
        waited for in a thread) unless this task holds it already; the sync call then finds
        it held by this task and does not wait."""
        parent = await self.parent()
        if parent is None or self._store.sync.holds_lock(parent):
            return await self._call(op, fn, "hooks")
        async with self._store.lock(parent, timeout=timeout):
            return await self._call(op, fn, "hooks")

    async def merge(
        self,
        summary: Message | str | None = None,
        *,
        as_author: str | None = None,
        agent: str | None = None,
        lock_timeout: float | None = DEFAULT_MERGE_LOCK_TIMEOUT,
    ) -> int:
        """Merge this child session into its parent; returns the seq of the parent's
        ``subagent/end`` (:meth:`agentsession.BaseSession.merge`). The parent's turn lock is
        awaited on the loop, not in a worker thread."""
        fn = functools.partial(
            self._sync.merge, summary, as_author=as_author, agent=agent, lock_timeout=lock_timeout
        )
        return await self._under_parent_lock("merge", fn, lock_timeout)

    async def discard(
        self, reason: str = "", *, lock_timeout: float | None = DEFAULT_MERGE_LOCK_TIMEOUT
    ) -> int:
        """Discard this child session; returns the seq of the note in the parent
        (:meth:`agentsession.BaseSession.discard`)."""
        fn = functools.partial(self._sync.discard, reason, lock_timeout=lock_timeout)
        return await self._under_parent_lock("discard", fn, lock_timeout)

    async def parent(self) -> str | None:
        """The parent session id of a child session (None for one that was not forked)."""
        return await self._call("parent", lambda: self._sync.parent, "read", args={"after": 0})

    async def fork_point(self) -> int | None:
        """The parent's latest seq when this child was forked (None when not a child)."""
        return await self._call(
            "fork_point", lambda: self._sync.fork_point, "read", args={"after": 0}
        )

    async def info(self) -> SessionRecord:
        """The session's record (:meth:`agentsession.BaseSession.info`)."""
        return await self._call("info", self._sync.info)

    async def update(
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
    ) -> SessionRecord:
        """Change the session's record atomically; returns it
        (:meth:`agentsession.BaseSession.update`)."""
        fn = functools.partial(
            self._sync.update,
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
        return await self._call("update", fn)

    async def close(self) -> None:
        """Release open files or connections; the session reopens them when used again."""
        await self._call("close", self._sync.close)

    def __repr__(self) -> str:
        return f"<AsyncSession {self.id!r} at {self.location}>"


class AsyncDelivery:
    """One incoming user message of the inbox, for asyncio: the sync
    :class:`~agentsession.inbox.Delivery` it wraps, with :meth:`start_turn` opening an
    :class:`AsyncTurn`. Made by ``await astore.deliver(...)`` and yielded by
    ``session.pending(lock)``."""

    def __init__(self, session: AsyncSession, delivery: Delivery) -> None:
        self._session = session
        self._delivery = delivery

    @property
    def sync(self) -> Delivery:
        """The sync delivery this wraps."""
        return self._delivery

    @property
    def session_id(self) -> str:
        """The conversation."""
        return self._delivery.session_id

    @property
    def id(self) -> str:
        """The delivery's id."""
        return self._delivery.id

    @property
    def seq(self) -> int:
        """The seq of its ``session/delivery`` event."""
        return self._delivery.seq

    @property
    def message(self) -> Message:
        """The user's message."""
        return self._delivery.message

    @property
    def policy(self) -> str:
        """The policy it was delivered with."""
        return self._delivery.policy

    @property
    def agent(self) -> str:
        """The agent it is addressed to (empty: none named)."""
        return self._delivery.agent

    @property
    def user(self) -> str:
        """The end user who sent it (empty: not given)."""
        return self._delivery.user

    @property
    def time(self) -> _dt.datetime | None:
        """When it was stored (UTC)."""
        return self._delivery.time

    @property
    def meta(self) -> dict[str, Any]:
        """The meta given to ``deliver``."""
        return self._delivery.meta

    def start_turn(self, **turn_kwargs: Any) -> AsyncTurn:
        """A turn that processes this delivery: ``async with delivery.start_turn(...) as
        turn:`` (see :meth:`agentsession.inbox.Delivery.start_turn`: its ``turn/start``
        claims the delivery, its user message is recorded right after it)."""
        turn = self._delivery.start_turn(**turn_kwargs)
        return AsyncTurn(self._session, turn)

    def __repr__(self) -> str:
        return f"<AsyncDelivery of {self._delivery!r}>"


class AsyncTurn(AsyncRecording):
    """One turn, recorded from asyncio: ``async with session.turn(...) as turn:`` writes
    ``turn/start`` and, however the block ends, ``turn/end``; every helper is a coroutine
    around the sync :class:`~agentsession.Turn`'s (which holds the turn's state and builds
    the events).

    **Turn id.** While the turn is open its id is the task's turn id
    (:func:`agentsession.context.turn_id`), set here in the task's own context; every event
    of the turn carries it (``meta["turn_id"]``) whichever thread wrote it.

    **Cancellation and errors.** When the block raises, or the task is cancelled in it, the
    turn is closed as the sync recorder closes it on an exception (the unanswered calls get
    error results, the open step is closed, ``turn/end`` carries the error, for example
    ``CancelledError``); that work is shielded from the cancellation and runs to its end, then
    the exception (``CancelledError``) propagates. A task cancelled while ``turn/start`` is
    written closes the turn the same way when it got opened after all.
    """

    def __init__(self, session: AsyncSession, turn: Turn) -> None:
        self._session = session
        self._turn = turn
        self._recording = turn
        self._previous_turn_id: str | None = None

    @property
    def sync(self) -> Turn:
        """The sync turn this wraps (its state: calls awaiting results, the open step)."""
        return self._turn

    @property
    def session(self) -> AsyncSession:
        """The session being recorded into."""
        return self._session

    @property
    def turn_id(self) -> str:
        """The turn's id, stamped on every event as ``meta["turn_id"]``."""
        return self._turn.turn_id

    @property
    def agent(self) -> str:
        """The agent running the turn."""
        return self._turn.agent

    @property
    def user_id(self) -> str:
        """The end user the turn answers."""
        return self._turn.user_id

    @property
    def metadata(self) -> dict[str, Any] | None:
        """Platform metadata copied onto user messages."""
        return self._turn.metadata

    @property
    def storage(self) -> StoragePolicy | None:
        """The storage policy applied to messages (None: stored whole)."""
        return self._turn.storage

    @property
    def batch_steps(self) -> bool:
        """Whether each step is written as one batch when it closes."""
        return self._turn.batch_steps

    @property
    def steps(self) -> int:
        """Steps completed so far."""
        return self._turn.steps

    @property
    def start_seq(self) -> int:
        """Seq of this turn's ``turn/start``."""
        return self._turn.start_seq

    @property
    def is_open(self) -> bool:
        """Whether the turn is open: ``turn/start`` is written and ``turn/end`` not yet."""
        return self._turn.is_open

    @property
    def buffering(self) -> bool:
        """Whether a step of a ``batch_steps`` turn is open (its helpers only buffer)."""
        return self._turn.buffering

    @property
    def buffered(self) -> tuple[Event, ...]:
        """The events the open batched step has buffered, not written yet."""
        return self._turn.buffered

    @property
    def partial(self) -> str:
        """The reply text produced and not recorded yet (``turn.partial += delta``); kept by
        the timeout annotation (see :class:`agentsession.Turn`)."""
        return self._turn.partial

    @partial.setter
    def partial(self, value: str) -> None:
        self._turn.partial = value

    def timed_out(self, partial: str | None = None) -> None:
        """Mark the turn as ended by a timeout (:meth:`agentsession.Turn.timed_out`)."""
        self._turn.timed_out(partial)

    def step(self) -> AsyncStep:
        """A new step: ``async with turn.step() as step: ...``. In a turn opened by the inbox,
        entering it is the step boundary of :meth:`agentsession.Turn.step` (one read of the
        log, off the event loop): it raises :class:`~agentsession.errors.TurnInterrupted` for
        an ``interrupt`` or ``rollback`` delivery, and hands ``merge`` deliveries over
        (:meth:`new_messages`)."""
        turn = self._turn
        if not turn.is_open:
            raise UsageError("open the turn (with session.turn(...)) before its steps")
        return AsyncStep(self, Step(turn, turn.steps), boundary=True)

    @property
    def interrupted(self) -> bool:
        """Whether a delivery with the ``interrupt`` or ``rollback`` policy was seen by this
        turn (:attr:`agentsession.Turn.interrupted`), as of its latest step boundary: reading
        it does no I/O here; entering the next step looks at the log and raises
        :class:`~agentsession.errors.TurnInterrupted` then."""
        return self._turn.interruption_seen

    def new_messages(self) -> list[Message]:
        """The messages of ``merge`` deliveries the latest step boundary handed over to this
        turn (:meth:`agentsession.Turn.new_messages`)."""
        return self._turn.new_messages()

    def _kind(self) -> CallKind:
        return "buffered" if self._turn.buffering else "append"

    def _buffers_user_message(self) -> bool:
        return _has_user_message(self._turn.buffered) if self._turn.buffering else False

    async def _record(self, op: str, fn: Callable[[], int], *, user_message: bool = False) -> int:
        return await self._session._call(op, fn, self._kind(), user_message=user_message)

    async def __aenter__(self) -> AsyncTurn:
        turn = self._turn
        try:
            await self._session._call("turn.enter", turn.__enter__, "append")
        except asyncio.CancelledError as exc:
            if turn.is_open:  # turn/start was written before the cancellation arrived
                await self._session._call(
                    "turn.exit",
                    functools.partial(turn.__exit__, type(exc), exc, exc.__traceback__),
                    "append",
                    shield=True,
                )
            raise
        self._previous_turn_id = turn_id()
        with_turn_id(turn.turn_id)  # kept until __aexit__ puts the previous one back
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            deferred = await self._session._call(
                "turn.exit",
                functools.partial(_exit_deferring_policy, self._turn, exc_type, exc, tb),
                "append",
                user_message=self._buffers_user_message(),
                shield=True,
            )
        finally:
            previous, self._previous_turn_id = self._previous_turn_id, None
            if previous is not None and turn_id() == self._turn.turn_id:
                with_turn_id(previous)
        if deferred.due:
            await self._run_policy(deferred.agent)

    async def _run_policy(self, agent: str) -> None:
        """The store's compaction policy after this turn ended (as the sync session runs it,
        :class:`~agentsession.compaction.CompactionPolicy`): the check and the marker in the
        placement of other calls, a coroutine summarizer awaited here, a plain one in a worker
        thread. Failures are reported by the policy, never raised."""
        policy = self._session.store.sync.compaction
        if policy is None or policy.summarize is None:
            return
        sync = self._session.sync
        plans = sync.plans
        try:
            planned = await self._session._call(
                "compaction.check", functools.partial(plans.run, plans.policy_check(policy))
            )
        except Exception as exc:
            policy.report(CompactionFailure(sync.id, "plan", exc))
            return
        if planned is None:
            return
        summarize = policy.summarize
        try:
            if inspect.iscoroutinefunction(summarize):
                result = await summarize(list(planned.messages))
            else:
                result = await asyncio.to_thread(summarize, list(planned.messages))
                if inspect.isawaitable(result):
                    result = await result
        except Exception as exc:
            policy.report(CompactionFailure(sync.id, "summarize", exc))
            return
        try:
            summary, usages = summary_of(result)
        except TypeError as exc:
            policy.report(CompactionFailure(sync.id, "result", exc))
            return
        try:
            await self._session._call(
                "compaction.commit",
                functools.partial(plans.run, plans.policy_commit(planned, summary)),
                "append",
            )
        except Exception as exc:
            policy.report(CompactionFailure(sync.id, "append", exc))
        if usages:
            try:
                await self._session.append_many(usage_events(usages, agent))
            except Exception as exc:
                policy.report(CompactionFailure(sync.id, "append", exc))

    def __repr__(self) -> str:
        return f"<AsyncTurn of {self._turn!r}>"


def _exit_deferring_policy(
    turn: Turn,
    exc_type: type[BaseException] | None,
    exc: BaseException | None,
    tb: TracebackType | None,
) -> DeferredPolicy:
    """Close the sync ``turn`` leaving the store's compaction policy to the async turn."""
    with policy_deferred() as deferred:
        turn.__exit__(exc_type, exc, tb)
    return deferred


class AsyncStep(AsyncRecording):
    """One model call and its tool calls, between ``step/start`` and ``step/end``:
    ``async with turn.step() as step: ...`` (see :class:`~agentsession.Step`). An exception
    or a cancellation in the block answers the step's open calls with error results and
    closes the step (with ``batch_steps``, writes it), shielded from the cancellation."""

    def __init__(self, turn: AsyncTurn, step: Step, *, boundary: bool = False) -> None:
        self._turn = turn
        self._step = step
        self._recording = step
        self._boundary = boundary  # the turn's step boundary is still to be crossed

    @property
    def sync(self) -> Step:
        """The sync step this wraps."""
        return self._step

    @property
    def number(self) -> int:
        """Step number within the turn, from 0."""
        return self._step.number

    @property
    def is_open(self) -> bool:
        """Whether the step is open: ``step/start`` is recorded and ``step/end`` not yet."""
        return self._step.is_open

    @property
    def seqs(self) -> list[int]:
        """Seqs of the step's events (with ``batch_steps``, once it is written)."""
        return self._step.seqs

    async def _record(self, op: str, fn: Callable[[], int], *, user_message: bool = False) -> int:
        return await self._turn._record(op, fn, user_message=user_message)

    async def _close(self, op: str, fn: Callable[[], None]) -> None:
        await self._turn.session._call(
            op,
            fn,
            "append",
            user_message=self._turn._buffers_user_message(),
            shield=True,
        )

    async def close(self) -> None:
        """Write ``step/end`` (once); with ``batch_steps``, write the whole step as one
        batch (:meth:`agentsession.Step.close`)."""
        await self._close("step.close", self._step.close)

    async def __aenter__(self) -> AsyncStep:
        step = self._step
        if self._boundary:
            self._boundary = False
            await self._turn.session._call("step.boundary", self._turn.sync.step_boundary, "append")
        kind: CallKind = "buffered" if self._turn.batch_steps else "append"
        try:
            await self._turn.session._call("step.enter", step.__enter__, kind)
        except asyncio.CancelledError as exc:
            if step.is_open:
                close = functools.partial(step.__exit__, type(exc), exc, None)
                await self._close("step.exit", close)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._close("step.exit", functools.partial(self._step.__exit__, exc_type, exc, tb))

    def __repr__(self) -> str:
        return f"<AsyncStep of {self._step!r}>"


def _once(plan: Plan[T]) -> Plan[T]:
    """``plan`` itself: an append's plan is made (its events checked and stamped) once, before
    the call may go to a thread."""
    return plan
