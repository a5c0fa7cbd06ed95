"""Rewind, retry and edit: going back in a conversation without deleting anything.

``session.rewind(to_seq=..., to_turn=...)`` appends a ``session/rewind`` marker
(:class:`~agentsession.events.SessionRewind`); from it on the derived history (``messages()``,
``entries()``, the converters) is the one that stood right after the marker's ``to_seq``, and
what is appended next continues that one (:func:`agentsession.derive.live_events`).
``read()`` still returns every event. ``session.retry()`` (regenerate) and
``session.edit(turn_seq, message)`` rewind to before a turn and open a new one holding the
same, or the edited, user message.

The rules (``docs/rewind.md``):

* **Turns are kept whole**: a point inside a turn (after its ``turn/start``, before its
  ``turn/end``) moves to just before its ``turn/start``. Turns are read from the history as
  it stands: a ``turn/start`` up to its ``turn/end`` (by ``meta["turn_id"]``), or, for logs
  written without turn markers, a user message up to the next one.
* **Compaction is a floor**: a rewind never goes back past the latest compaction marker (the
  turns it summarised stay summarised: :class:`~agentsession.errors.UsageError`), so a
  history built from the latest marker on never needs an earlier event.
* **A running turn is left alone**: while the log's latest turn has no end, a rewind refuses
  (:class:`~agentsession.errors.UsageError`) unless the caller holds the session's turn lock
  (the lease that runs that turn, or a crashed one's successor).
* **Conditional**: the marker is planned at a seq and appended only if nothing was appended
  since (``expect_seq``); on a conflict it is planned again, like compaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

from .branching import BranchRef, add_branch, remove_branch
from .contract import Session
from .derive import live_events
from .errors import ConflictError, DuplicateSession, UsageError
from .events import (
    COMPACTION,
    REWIND_REVISION,
    SESSION_BRANCH,
    SESSION_RECOVERY,
    SESSION_REWIND,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
    Event,
    SessionBranch,
    SessionRecovery,
    SessionRewind,
)
from .messages import Message

if TYPE_CHECKING:
    from .recorder import Turn

__all__ = [
    "REWIND_KINDS",
    "BranchStore",
    "RewindSession",
    "TurnSpan",
    "plan_rewind",
    "again",
    "branch",
    "rewind",
    "turn_spans",
]

REWIND_KINDS: Final = ("rewind", "retry", "edit", "openai.pop", "adk.rewind")
"""What a rewind marker's ``kind`` names: the session's own calls and the integrations."""

_RETRIES: Final = 16


class RewindSession(Session, Protocol):
    """What rewinding needs of a session (a :class:`~agentsession.BaseSession`)."""

    def append_many(self, events: Sequence[Event], *, expect_seq: int | None = None) -> list[int]:
        """Append events, all or none, conditional on ``expect_seq``."""

    def turn(self, *args: Any, **kwargs: Any) -> Turn:
        """A new turn."""


class TurnSpan:
    """One turn of the history as it stands: its first and last seq, its id, whether it
    ended, and its user messages."""

    __slots__ = ("end", "ended", "marked", "start", "turn_id", "users")

    def __init__(self, start: int, turn_id: str | None, marked: bool) -> None:
        self.start = start
        """Seq of its ``turn/start`` (or of its first user message, for an unmarked turn)."""
        self.end = start
        """Seq of its last event: its ``turn/end`` once it ended."""
        self.turn_id = turn_id
        """Its ``meta["turn_id"]`` (None: none recorded)."""
        self.marked = marked
        """Whether it has a ``turn/start`` (else it is a user message and what followed)."""
        self.ended = not marked
        """Whether it ended (an unmarked turn always counts as ended)."""
        self.users: list[Event] = []
        """Its user messages, in seq order."""

    def __contains__(self, seq: int) -> bool:
        return self.start <= seq <= self.end

    def __repr__(self) -> str:
        state = "ended" if self.ended else "open"
        return f"<TurnSpan {self.start}..{self.end} {state} turn_id={self.turn_id!r}>"


def turn_spans(events: Sequence[Event]) -> list[TurnSpan]:
    """The turns of ``events`` (the live events of a history, in seq order): a ``turn/start``
    opens a marked turn, closed by the ``turn/end`` with its ``meta["turn_id"]`` (or by a
    ``session/recovery`` that repaired it); a user message outside a marked turn opens an
    unmarked one, which lasts until the next turn begins."""
    spans: list[TurnSpan] = []
    current: TurnSpan | None = None
    for event in events:
        kind = event.type
        turn_id = event.meta.get("turn_id") if event.meta else None
        turn_id = turn_id if isinstance(turn_id, str) else None
        if kind == TURN_START:
            current = TurnSpan(event.seq, turn_id, True)
            spans.append(current)
            continue
        if current is not None and current.marked and not current.ended:
            current.end = event.seq
            if kind == TURN_END and turn_id == current.turn_id:
                current.ended = True
            elif kind == SESSION_RECOVERY:
                try:
                    repaired = event.decode(SessionRecovery).turn_start_seq
                except ValueError:
                    repaired = 0
                if repaired == current.start:
                    current.ended = True
            if kind == USER_MESSAGE:
                current.users.append(event)
            continue
        if kind == USER_MESSAGE:
            current = TurnSpan(event.seq, turn_id, False)
            current.users.append(event)
            spans.append(current)
        elif current is not None and not current.marked:
            current.end = event.seq
    return spans


def _running(events: Sequence[Event]) -> TurnSpan | None:
    """The log's latest marked turn when it has not ended (every event, rewound or not)."""
    for span in reversed(turn_spans(events)):
        if span.marked:
            return None if span.ended else span
    return None


def plan_rewind(
    events: Sequence[Event],
    *,
    to_seq: int | None = None,
    to_turn: int | str | None = None,
    before_turn: int | None = None,
    holds_lock: bool = False,
    session_id: str = "",
    branching: bool = False,
) -> tuple[int, TurnSpan | None]:
    """Where a rewind of the log ``events`` (every event, in seq order) goes: the seq whose
    history it restores, and the turn it goes back before (``before_turn``, for retry and
    edit; else None). Exactly one of ``to_seq`` (the history right after that seq, moved to
    before the turn it falls inside), ``to_turn`` (a turn id, or a seq inside the turn: the
    history up to that turn's end) and ``before_turn`` (a seq inside a turn: the history
    before it). Raises :class:`~agentsession.errors.UsageError` for a point that is not in
    the log, one before the latest compaction marker, or while a turn runs that the caller
    does not hold the lock of. ``branching``: where a branch starts, which may be before the
    latest compaction and inside a running turn (moved to before it)."""
    given = [
        name
        for name, value in (("to_seq", to_seq), ("to_turn", to_turn), ("before_turn", before_turn))
        if value is not None
    ]
    if len(given) != 1:
        names = "at_seq and at_turn" if branching else "to_seq and to_turn"
        raise UsageError(f"give exactly one of {names}")
    latest = events[-1].seq if events else 0
    who = f"session {session_id!r}"
    running = None if branching else _running(events)
    if running is not None and not holds_lock:
        raise UsageError(
            f"{who} has a turn running (from seq {running.start}): rewind it under the "
            "session's turn lock (store.lock), which the turn's worker holds"
        )
    spans = turn_spans(live_events(events))
    target: int
    span: TurnSpan | None = None
    if to_seq is not None:
        if isinstance(to_seq, bool) or not isinstance(to_seq, int) or not 0 <= to_seq <= latest:
            name = "at_seq" if branching else "to_seq"
            raise UsageError(
                f"{who}: {name} must be a seq of the log (0..{latest}), not {to_seq!r}"
            )
        target = to_seq
        # The history as it stood right after to_seq: a turn it ends inside is left out whole.
        upto = [e for e in events if e.seq <= to_seq]
        if to_seq and (not upto or upto[-1].seq != to_seq):
            raise UsageError(f"{who}: no event has seq {to_seq}")
        then = turn_spans(live_events(upto)) if upto else []
        last = next((s for s in reversed(then) if s.marked), None)
        if last is not None and not last.ended:
            target = last.start - 1  # turns are kept whole
    else:
        point = to_turn if to_turn is not None else before_turn
        span = _find_turn(spans, point, who)
        if to_turn is not None:
            if not span.ended:
                raise UsageError(f"{who}: turn {point!r} is still running; nothing follows it")
            target, span = span.end, None
        else:
            target = span.start - 1
    floor = 0 if branching else max((e.seq for e in events if e.type == COMPACTION), default=0)
    if target < floor:
        raise UsageError(
            f"{who}: seq {target} is before the compaction marker at seq {floor}; a rewind "
            "goes back no further than the latest compaction (the turns it summarised stay "
            "summarised)"
        )
    return target, span


def _find_turn(spans: list[TurnSpan], point: int | str | None, who: str) -> TurnSpan:
    if isinstance(point, str):
        found = [s for s in spans if s.turn_id == point]
    elif isinstance(point, int) and not isinstance(point, bool):
        found = [s for s in spans if point in s]
    else:
        raise UsageError(f"{who}: a turn is named by its turn id or a seq in it, not {point!r}")
    if not found:
        raise UsageError(f"{who}: no turn of the history holds {point!r}")
    return found[-1]


def rewind(
    session: RewindSession,
    holds_lock: Callable[[], bool],
    *,
    to_seq: int | None = None,
    to_turn: int | str | None = None,
    reason: str | None = None,
    kind: str = "rewind",
    agent: str = "",
) -> int:
    """``session.rewind``: see :meth:`agentsession.BaseSession.rewind`."""
    seq, _ = _append_rewind(
        session,
        lambda events: plan_rewind(
            events,
            to_seq=to_seq,
            to_turn=to_turn,
            holds_lock=holds_lock(),
            session_id=session.id,
        ),
        reason,
        kind,
        agent,
    )
    return seq


def _append_rewind(
    session: RewindSession,
    planner: Callable[[Sequence[Event]], tuple[int, TurnSpan | None]],
    reason: str | None,
    kind: str,
    agent: str,
) -> tuple[int, TurnSpan | None]:
    """Plan a rewind on the log as it stands and append its marker conditionally; plan again
    when another writer appended in between."""
    if reason is not None and not isinstance(reason, str):
        raise UsageError(f"a rewind's reason is a string, not {type(reason).__name__}")
    if kind not in REWIND_KINDS:
        raise UsageError(f"unknown rewind kind {kind!r} (known: {', '.join(REWIND_KINDS)})")
    for _ in range(_RETRIES):
        events = session.read()
        planned_at = events[-1].seq if events else 0
        if not planned_at:
            raise UsageError(f"session {session.id!r} is empty: there is nothing to rewind")
        target, span = planner(events)
        marker = Event.new(
            SESSION_REWIND,
            SessionRewind(
                to_seq=target, kind=kind, reason=reason or "", min_revision=REWIND_REVISION
            ),
            agent=agent,
        )
        try:
            [seq] = session.append_many([marker], expect_seq=planned_at)
        except ConflictError:
            continue
        return seq, span
    raise ConflictError(
        f"session {session.id!r}: other writers kept appending while a rewind was planned "
        f"({_RETRIES} tries); take the session's turn lock to rewind"
    )


def again(
    session: RewindSession,
    holds_lock: Callable[[], bool],
    turn_seq: int | None,
    message: Message | str | None,
    kind: str,
    turn_kwargs: dict[str, Any],
) -> Turn:
    """``session.retry`` (``turn_seq`` None: the last turn, ``message`` None: its own user
    messages) and ``session.edit``: a turn, not entered yet, whose entering rewinds to before
    that turn and then records the user message(s) right after its ``turn/start``."""
    from .recorder import _message_event

    if message is not None:
        if isinstance(message, str):
            message = Message.user(message)
        if not isinstance(message, Message) or message.role != "user":
            raise UsageError("edit needs a user message (a str or Message.user(...))")
    chosen: list[TurnSpan] = []

    def planner(events: Sequence[Event]) -> tuple[int, TurnSpan | None]:
        point = turn_seq
        if point is None:
            spans = [s for s in turn_spans(live_events(events)) if s.users]
            if not spans:
                raise UsageError(f"session {session.id!r} has no turn with a user message to retry")
            point = spans[-1].start
        target, span = plan_rewind(
            events, before_turn=point, holds_lock=holds_lock(), session_id=session.id
        )
        assert span is not None
        if message is None and not span.users:
            raise UsageError(
                f"session {session.id!r}: the turn at seq {span.start} has no user message to retry"
            )
        return target, span

    turn = session.turn(**turn_kwargs)

    def before(opened: Turn) -> None:
        _, span = _append_rewind(session, planner, None, kind, opened.agent or "")
        assert span is not None
        chosen.append(span)

    def after(opened: Turn) -> None:
        span = chosen[-1]
        if message is not None:
            texts = [message]
        else:
            texts = [event.decode(Message) for event in span.users]
        for text in texts:
            event = _message_event(
                opened, USER_MESSAGE, text, user=opened.user_id, metadata=opened.metadata
            )
            opened._append(event)

    turn._before_start = before
    turn._after_start = after
    return turn


class BranchStore(Protocol):
    """What making a branch needs of a store (a :class:`~agentsession.BaseStore`)."""

    def get(self, session_id: str) -> Any:
        """The session with this id."""

    def exists(self, session_id: str) -> bool:
        """Whether it has events."""

    def _meta_get(self, kind: str, key: str) -> str | None:
        """A meta value."""

    def _meta_cas(self, kind: str, key: str, expected: str | None, new: str | None) -> bool:
        """A meta compare-and-set."""


def branch(
    session: RewindSession,
    store: BranchStore,
    *,
    at_turn: int | str | None,
    at_seq: int | None,
    branch_id: str | None,
) -> Any:
    """``session.branch``: see :meth:`agentsession.BaseSession.branch`."""
    events = session.read()
    if not events:
        raise UsageError(f"session {session.id!r} is empty: there is nothing to branch from")
    if at_turn is None and at_seq is None:
        at_seq = events[-1].seq  # the head (before a turn still running)
    point, _ = plan_rewind(
        events, to_seq=at_seq, to_turn=at_turn, session_id=session.id, branching=True
    )
    if branch_id is None:
        branch_id = f"{session.id}~{uuid.uuid4().hex[:12]}"
    elif not isinstance(branch_id, str) or not branch_id:
        raise UsageError(f"a branch id is a non-empty string, not {branch_id!r}")
    if branch_id == session.id:
        raise UsageError("a branch needs an id of its own")
    taken = DuplicateSession(f"session {branch_id!r} exists already: a branch needs a new id")
    if store.exists(branch_id):
        raise taken
    target = store.get(branch_id)
    ref = BranchRef(branch_id, point)
    # Listed first: a branch is never unlisted (an entry whose marker is not written is not
    # believed, and is taken off when another writer took the id first).
    add_branch(store._meta_get, store._meta_cas, session.id, ref)
    marker = Event.new(
        SESSION_BRANCH,
        SessionBranch(origin=session.id, origin_seq=point, min_revision=REWIND_REVISION),
    )
    try:
        target.append_many([marker], expect_seq=0)
    except ConflictError:
        remove_branch(store._meta_get, store._meta_cas, session.id, branch_id)
        raise taken from None
    target._load()  # reads its marker: from now on it is the branch
    return target
