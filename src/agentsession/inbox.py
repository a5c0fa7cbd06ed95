"""The inbox: incoming user messages recorded durably without the turn lock, and drained in
order by the worker that holds it.

``store.deliver(session_id, message, id=..., policy=...)`` appends a ``session/delivery``
event (:class:`~agentsession.events.SessionDelivery`) to the conversation's log, without the
turn lock: deliveries are ordered, encrypted, copied and shown like every other event, and are
not part of the derived history. The event id is the delivery's id, so a chat platform's
retry of the same event id stores nothing and returns the first :class:`Delivery` (within the
append pipeline's id window: see ``docs/reliability.md``).

A worker holding the conversation's lease drains them::

    with store.lock(session_id, timeout=30, ttl=10) as lease:
        for delivery in session.pending(lease):
            with delivery.start_turn(agent="bot") as turn:   # turn/start names the delivery,
                turn.assistant(answer(turn.session.messages()))  # then its user message

A delivery is **claimed** once a ``turn/start`` naming it (``meta["delivery"]``) is stored;
``pending`` yields the unclaimed ones, in seq order, and with ``retry_unfinished=True`` also
those whose claiming turn never wrote its own ``turn/end`` (its worker died; recovery closes
such a turn with a ``turn/end`` of its own, which does not count as finishing it).

**Policies** (``policy=``; the store's ``default_delivery_policy`` when None):

* ``enqueue``: recorded at once; processed after the turn that is running, if any.
* ``reject``: refused with :class:`~agentsession.errors.SessionBusy` while a turn runs (the
  log's latest ``turn/start`` has no matching ``turn/end``, by ``meta["turn_id"]``, and no
  ``session/recovery`` closed it), recording nothing. The check reads the log and then
  appends: a turn that starts in between does not refuse the delivery, which is then
  processed after that turn, as ``enqueue`` would.

* ``interrupt``: the running turn, if the inbox opened it (``delivery.start_turn``), is told
  at its next step boundary: ``turn.interrupted`` becomes true and ``turn.step()`` raises
  :class:`~agentsession.errors.TurnInterrupted`; escaping the turn, it answers the turn's
  unanswered tool calls and ends it with a ``turn/end`` naming the delivery. The delivery
  stays unclaimed, so ``pending`` yields it next.
* ``merge``: the running inbox turn's next ``turn.step()`` records the message as one of its
  user messages (``meta["delivery"]``, which claims it: ``pending`` skips it) and
  ``turn.new_messages()`` returns it.
* ``rollback``: as ``interrupt``, and after the turn's ``turn/end`` a ``session/rollback``
  marker (:class:`~agentsession.events.SessionRollback`) leaves that turn out of the derived
  history; nothing is deleted.

With no turn running, or a turn the inbox did not open, these three are processed as
``enqueue``. See "The inbox" in ``docs/concurrency.md`` for timelines and limits.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol

import msgspec

from .contract import Session
from .errors import SessionBusy, UsageError
from .events import (
    SESSION_DELIVERY,
    SESSION_RECOVERY,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
    Event,
    SessionDelivery,
    SessionRecovery,
)
from .messages import Message

if TYPE_CHECKING:
    from .fencing import Lease
    from .recorder import Turn


class InboxSession(Session, Protocol):
    """What the inbox needs of a session (a :class:`~agentsession.BaseSession`)."""

    def turn(self, *args: Any, **kwargs: Any) -> Turn:
        """A new turn."""

    def _recent(self, seq: int) -> Event | None:
        """The event at ``seq`` if held in memory (no I/O), else None."""


class InboxStore(Protocol):
    """What the inbox needs of a store (a :class:`~agentsession.BaseStore`)."""

    default_delivery_policy: str

    def get(self, session_id: str) -> InboxSession:
        """The session with this id."""

__all__ = [
    "DELIVERY_POLICIES",
    "META_DELIVERY",
    "UNSUPPORTED_POLICIES",
    "Delivery",
    "InboxSession",
    "InboxState",
    "InboxStore",
    "check_policy",
    "deliver",
    "pending",
]

META_DELIVERY: Final = "delivery"
"""The meta key naming a delivery's id on the ``turn/start`` that claims it and on the user
message that turn records for it."""

DELIVERY_POLICIES: Final = ("enqueue", "reject", "interrupt", "merge", "rollback")
"""The delivery policies supported."""

UNSUPPORTED_POLICIES: Final[tuple[str, ...]] = ()
"""Double-texting policies named by the design and not supported yet (none left)."""


def check_policy(policy: object) -> str:
    """``policy`` when it is a supported delivery policy; :class:`UsageError` otherwise."""
    if policy in DELIVERY_POLICIES:
        assert isinstance(policy, str)
        return policy
    if policy in UNSUPPORTED_POLICIES:
        raise UsageError(
            f"delivery policy {policy!r} is not supported yet (supported: "
            f"{', '.join(DELIVERY_POLICIES)})"
        )
    raise UsageError(
        f"unknown delivery policy {policy!r} (supported: {', '.join(DELIVERY_POLICIES)})"
    )


def _as_message(message: object) -> Message:
    if isinstance(message, str):
        return Message.user(message)
    if isinstance(message, Message):
        if message.role != "user":
            raise UsageError(f"a delivery needs a user message, not role {message.role!r}")
        return message
    raise UsageError(f"a delivery's message is a Message or a str, not {type(message).__name__}")


class Delivery:
    """One incoming user message of the inbox, as stored (a ``session/delivery`` event): made
    by ``store.deliver`` and yielded by ``session.pending``. :meth:`start_turn` opens the
    turn that processes it."""

    def __init__(
        self, session: InboxSession, event: Event, *, recorded: bool | None = None
    ) -> None:
        payload = event.decode(SessionDelivery)
        self._session = session
        self.session_id = session.id
        """The conversation."""
        self.id = event.id
        """The delivery's id (the event's; the caller's ``id=``, or a new one)."""
        self.seq = event.seq
        """The seq of its ``session/delivery`` event: deliveries are processed in seq order."""
        self.message = payload.message
        """The user's message."""
        self.policy = payload.policy
        """The policy it was delivered with (``enqueue``, ``reject``, ``interrupt``, ``merge``
        or ``rollback``)."""
        self.agent = event.agent
        """The agent it is addressed to (empty: none named)."""
        self.user = event.user
        """The end user who sent it (empty: not given)."""
        self.time = event.time
        """When it was stored (UTC)."""
        self.meta: dict[str, Any] = dict(event.meta)
        """The meta given to ``deliver`` (platform annotations)."""
        self._recorded = recorded
        self._turn: Turn | None = None  # the turn start_turn opened

    def start_turn(self, **turn_kwargs: Any) -> Turn:
        """A turn that processes this delivery: ``with delivery.start_turn(...) as turn:``.
        ``turn_kwargs`` go to ``session.turn()`` (``agent`` and ``user`` default to the
        delivery's). Its ``turn/start`` names the delivery (``meta["delivery"]``), which
        claims it, and the delivery's message is recorded as the turn's user message right
        after it, unless an earlier, unfinished turn of this delivery recorded it already (a
        retry), so that the history holds it once."""
        kwargs = dict(turn_kwargs)
        if self.agent:
            kwargs.setdefault("agent", self.agent)
        if self.user:
            kwargs.setdefault("user", self.user)
        turn = self._session.turn(**kwargs)
        self._prepare(turn)
        return turn

    def _prepare(self, turn: Turn) -> None:
        """Make ``turn`` (not entered yet) claim this delivery and record its message."""
        turn._start_meta = {META_DELIVERY: self.id}
        turn._after_start = self._record_message
        turn._watch_inbox = True  # interrupt, merge and rollback act at its step boundaries
        self._turn = turn

    def _record_message(self, turn: Turn) -> None:
        from .recorder import _message_event

        recorded = self._recorded
        if recorded is None:
            state = InboxState()
            state.feed(self._session.read(self.seq))
            recorded = self.id in state.recorded
        if recorded:
            return
        metadata = dict(turn.metadata or {})
        metadata[META_DELIVERY] = self.id
        event = _message_event(
            turn, USER_MESSAGE, self.message, user=turn.user_id, metadata=metadata
        )
        turn._append(event)
        self._recorded = True

    def __repr__(self) -> str:
        return f"<Delivery {self.id!r} seq={self.seq} session={self.session_id!r}>"


class InboxState:
    """What the inbox reads from a log, fed in seq order: the deliveries, the turns that
    claimed them, which turns finished, which delivery messages were recorded, and the latest
    turn (whether it runs)."""

    def __init__(self) -> None:
        self.deliveries: list[Event] = []
        """The ``session/delivery`` events, in seq order."""
        self.claims: dict[str, list[str]] = {}
        """Delivery id -> the turn ids of the turns whose ``turn/start`` names it."""
        self.finished: set[str] = set()
        """Turn ids with their own ``turn/end``."""
        self.recorded: set[str] = set()
        """Delivery ids whose user message a turn recorded (the turn that claimed it, or a
        running turn a ``merge`` delivery was handed to)."""
        self.ids: dict[str, Event] = {}
        """Delivery id -> its event."""
        self._latest_start: Event | None = None
        self._latest_closed = True

    def feed(self, events: list[Event]) -> None:
        """Take in ``events`` (the next ones of the log, in seq order)."""
        for event in events:
            kind = event.type
            if kind == SESSION_DELIVERY:
                self.deliveries.append(event)
                self.ids.setdefault(event.id, event)
            elif kind == TURN_START:
                self._latest_start = event
                self._latest_closed = False
                delivery = event.meta.get(META_DELIVERY)
                turn_id = event.meta.get("turn_id")
                if isinstance(delivery, str) and isinstance(turn_id, str):
                    self.claims.setdefault(delivery, []).append(turn_id)
            elif kind == TURN_END:
                turn_id = event.meta.get("turn_id")
                if isinstance(turn_id, str):
                    self.finished.add(turn_id)
                start = self._latest_start
                if start is not None and (
                    turn_id == start.meta.get("turn_id")
                    or (turn_id is None and "turn_id" not in start.meta)
                ):
                    self._latest_closed = True
            elif kind == SESSION_RECOVERY:
                start = self._latest_start
                if start is not None:
                    try:
                        repaired = event.decode(SessionRecovery).turn_start_seq
                    except (msgspec.DecodeError, msgspec.ValidationError):
                        repaired = 0
                    if repaired == start.seq:
                        self._latest_closed = True
            elif kind == USER_MESSAGE:
                delivery = event.meta.get(META_DELIVERY)
                if isinstance(delivery, str):
                    self.recorded.add(delivery)

    @property
    def running(self) -> str | None:
        """The turn id of the running turn (the latest ``turn/start`` not closed by its
        ``turn/end`` or a recovery), ``""`` when it has none, None when no turn runs."""
        start = self._latest_start
        if start is None or self._latest_closed:
            return None
        turn_id = start.meta.get("turn_id")
        return turn_id if isinstance(turn_id, str) else ""

    def unfinished(self, delivery_id: str) -> bool:
        """Whether the delivery was claimed and no claiming turn wrote its own ``turn/end``."""
        turns = self.claims.get(delivery_id, [])
        return bool(turns) and not any(t in self.finished for t in turns)


def deliver(
    store: InboxStore,
    session_id: str,
    message: Message | str,
    *,
    id: str | None = None,
    policy: str | None = None,
    agent: str | None = None,
    user: str | None = None,
    meta: Mapping[str, Any] | None = None,
) -> Delivery:
    """``store.deliver``: see :meth:`agentsession.BaseStore.deliver`."""
    chosen = check_policy(store.default_delivery_policy if policy is None else policy)
    msg = _as_message(message)
    if id is not None and (not isinstance(id, str) or not id):
        raise UsageError(f"a delivery id must be a non-empty string, not {id!r}")
    session = store.get(session_id)
    if chosen == "reject":
        state = InboxState()
        state.feed(session.read())
        first = state.ids.get(id) if id is not None else None
        if first is not None:
            return Delivery(session, first)
        running = state.running
        if running is not None:
            raise SessionBusy(session.id, running)
    event = Event.new(
        SESSION_DELIVERY,
        SessionDelivery(message=msg, policy=chosen),
        agent=agent or "",
        user=user or "",
        meta=meta,
        id=id,
    )
    seq = session.append(event)
    recent = session._recent(seq)  # the append just took it in: no read
    stored = [recent] if recent is not None else session.read(seq - 1, 1)
    if not stored or stored[0].type != SESSION_DELIVERY:
        kind = stored[0].type if stored else "nothing"
        raise UsageError(
            f"id {event.id!r} of session {session.id!r} names a {kind} event, not a delivery"
        )
    return Delivery(session, stored[0])


def _check_lease(session: InboxSession, lease: Lease) -> None:
    """:class:`UsageError` unless ``lease`` is a held lease of ``session``."""
    from .fencing import Lease as _Lease

    if not isinstance(lease, _Lease):
        raise UsageError(
            f"pending() needs the session's lease (store.lock(...)), not {type(lease).__name__}"
        )
    if lease.session_id != session.id:
        raise UsageError(
            f"the lease is for session {lease.session_id!r}, not {session.id!r}"
        )
    if not lease.held:
        raise UsageError(f"the lease of session {session.id!r} is not held (released or lost)")


def pending(
    session: InboxSession, lease: Lease, *, retry_unfinished: bool = False
) -> Generator[Delivery, None, None]:
    """``session.pending``: see :meth:`agentsession.BaseSession.pending`."""
    from .recorder import has_open_turn
    from .recovery import repair_incomplete, scan_all_incomplete

    _check_lease(session, lease)
    if has_open_turn(session):
        raise UsageError(
            f"session {session.id!r} has an open turn in this process: finish it before "
            "draining the inbox"
        )
    events = session.read()
    # The lease holder knows no other turn is live: a turn left open was its worker's crash.
    incomplete = scan_all_incomplete(events)
    if incomplete:
        for cut in incomplete:
            repair_incomplete(session, cut)
        events = session.read()
    state = InboxState()
    state.feed(events)
    cursor = events[-1].seq if events else 0
    index = 0
    while True:
        while index < len(state.deliveries):
            event = state.deliveries[index]
            index += 1
            if state.ids.get(event.id) is not event:
                continue  # the same id stored twice (beyond the id window): the first counts
            claimed = event.id in state.claims
            if claimed and not (retry_unfinished and state.unfinished(event.id)):
                continue
            if not claimed and event.id in state.recorded:
                continue  # a merge delivery handed to the turn that was running
            if not lease.locally_held:
                raise lease.lost_error()
            delivery = Delivery(session, event, recorded=event.id in state.recorded)
            yield delivery
            opened = delivery._turn
            if opened is not None and not opened.is_open and not opened._merged:
                # Its turn claimed it and handed nothing else over; under the lease nothing
                # else claims deliveries: what others wrote meanwhile (new deliveries) is read
                # when the ones known are done.
                continue
            break
        else:
            new = session.read(cursor)
            if not new:
                return
            cursor = new[-1].seq
            state.feed(new)
            continue
        # After a yield: take in what was written meanwhile (the turn, new deliveries).
        new = session.read(cursor)
        if new:
            cursor = new[-1].seq
            state.feed(new)

