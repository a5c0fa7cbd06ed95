"""Crash recovery: find turns that a crash left open and close them.

A turn that ends normally is bracketed by ``turn/start`` and ``turn/end`` (the recorder writes
the end even when an exception escapes). A process that dies outright leaves the turn open,
perhaps with a step open and tool calls unanswered. :func:`scan_incomplete` finds such turns;
:func:`repair_incomplete` closes one by appending, in one atomic batch, an *interrupted* result
for every unanswered call, ``step/end`` for the open step, ``turn/end`` and an audit
``session/recovery`` event. :func:`recover_store` does this for every session of a store whose
turn lock is free (a held lock means the turn is live, not crashed).

This is agentkit's ``ScanIncomplete``/``RepairIncomplete`` with its bugs fixed:

* turns are tracked **per agent**: another agent's ``turn/start`` does not hide an open turn;
* unanswered calls are found with derive's own positional pairing (:class:`Deriver`), so an
  earlier result never answers a later call that reuses its id;
* ``turn/end`` counts the step the repair closes.

The scan and the report are pure; only :func:`repair_incomplete`, :func:`repair_all_incomplete`
and :func:`recover_store` write (the latter not with ``dry_run=True``, which reports what it would
repair), and only through the Session and Store API.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from typing import Final

import msgspec

from . import _trace
from .contract import (
    IncompleteTurn,
    RecoveryReport,
    RecoveryStatus,
    Session,
    Store,
    StoreRecoveryReport,
)
from .derive import Deriver, interrupted_tool_result
from .errors import (
    EncryptionError,
    LockTimeout,
    SessionExpired,
    SessionNotFound,
    SessionShredded,
    StorageError,
    UsageError,
)
from .events import (
    SESSION_RECOVERY,
    STEP_END,
    STEP_START,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    Event,
    SessionRecovery,
    StepEnd,
    StepStart,
    TurnEnd,
    decode,
)
from .messages import ToolCall

__all__ = [
    "INCOMPLETE_TURN_REASON",
    "IncompleteTurn",
    "RecoveryReport",
    "RecoveryStatus",
    "StoreRecoveryReport",
    "latest_event_seq",
    "read_all_events",
    "recover_store",
    "repair_all_incomplete",
    "repair_incomplete",
    "scan_all_incomplete",
    "scan_incomplete",
]

log = logging.getLogger(__name__)

INCOMPLETE_TURN_REASON: Final = "turn/start without turn/end"
"""The ``reason`` of every ``session/recovery`` event this module writes (agentkit's text)."""


# ---------------------------------------------------------------------------------------------
# Scanning (pure).


class _Open:
    """Marker bookkeeping of one agent's open turn during the scan."""

    __slots__ = ("agent", "ended", "index", "open_step", "seq", "started")

    def __init__(self, seq: int, index: int, agent: str) -> None:
        self.seq = seq
        self.index = index
        self.agent = agent
        self.started = 0
        self.ended = 0
        self.open_step = -1


def _orphan_calls(events: Sequence[Event], turn: _Open) -> list[ToolCall]:
    """The turn's unanswered calls, by derive's own pairing rule (not a second one)."""
    deriver = Deriver(turn.agent or None)
    for event in events[turn.index + 1 :]:
        # A turn's events are its agent's: other agents' (and unattributed) events belong to
        # no turn of this agent, and answering their calls is not this turn's repair.
        if event.agent == turn.agent and event.seq > turn.seq:
            # A legacy compaction marker inside the turn makes feed() return False and change
            # nothing; the events after it are paired as derive replays them, so go on.
            deriver.feed(event)
    return deriver.unanswered_calls()


def scan_all_incomplete(events: Sequence[Event]) -> list[IncompleteTurn]:
    """Every incomplete turn of ``events`` (a whole log in seq order), earliest first.

    Turns are tracked per agent: each agent has at most one open turn, opened by its
    ``turn/start`` and closed by its ``turn/end``; its ``step/start`` and ``step/end`` count
    toward it. Events of other agents, including unattributed ones, neither open, close nor
    belong to it. A ``session/recovery`` event closes nothing by itself (a repair writes
    ``turn/end``).

    A second ``turn/start`` of the same agent while its turn is open **supersedes** the open
    turn, which is then not reported (agentkit does the same): a later ``turn/end`` could not
    be told apart as the end of the first turn or of the second, so only the latest start can
    be judged. The superseded turn's unanswered calls stay answered by derive's stand-in.

    ``orphan_calls`` are the calls of the turn's events (its agent's, after its
    ``turn/start``) that :class:`~agentsession.derive.Deriver` leaves unanswered: the pairing
    of derive itself, positional, so an earlier result never answers a later call with the
    same id.
    """
    open_turns: dict[str, _Open] = {}
    for index, event in enumerate(events):
        kind = event.type
        if kind == TURN_START:
            open_turns.pop(event.agent, None)  # superseded: see the docstring
            open_turns[event.agent] = _Open(event.seq, index, event.agent)
        elif kind == TURN_END:
            open_turns.pop(event.agent, None)
        elif kind == STEP_START:
            turn = open_turns.get(event.agent)
            if turn is not None:
                try:
                    turn.open_step = decode(event.data, StepStart).step
                except (msgspec.DecodeError, msgspec.ValidationError):
                    # The recorder numbers steps by the steps ended before them.
                    turn.open_step = turn.ended
                turn.started += 1
        elif kind == STEP_END:
            turn = open_turns.get(event.agent)
            if turn is not None:
                turn.ended += 1
                turn.open_step = -1
    return [
        IncompleteTurn(
            turn_start_seq=turn.seq,
            agent=turn.agent,
            steps_started=turn.started,
            steps_ended=turn.ended,
            open_step=turn.open_step,
            orphan_calls=_orphan_calls(events, turn),
        )
        for turn in sorted(open_turns.values(), key=lambda t: t.seq)
    ]


def scan_incomplete(events: Sequence[Event]) -> IncompleteTurn | None:
    """The earliest incomplete turn of ``events``, or None when every turn is closed.

    Keeps returning an open turn until every one is repaired. See :func:`scan_all_incomplete`
    for the rules.
    """
    turns = scan_all_incomplete(events)
    return turns[0] if turns else None


def latest_event_seq(events: Sequence[Event]) -> int:
    """The highest seq in ``events`` (0 when empty)."""
    return max((event.seq for event in events), default=0)


def read_all_events(session: Session) -> list[Event]:
    """Every event of ``session`` from seq 1, also those a compaction keeps out of memory."""
    return session.read(0)


# ---------------------------------------------------------------------------------------------
# Repairing.


def _repair_events(turn: IncompleteTurn) -> list[Event]:
    agent = turn.agent
    batch = [
        Event.new(TOOL_RESULT, interrupted_tool_result(call), agent=agent)
        for call in turn.orphan_calls
    ]
    if turn.open_step >= 0:
        batch.append(Event.new(STEP_END, StepEnd(step=turn.open_step), agent=agent))
    steps = turn.steps_after_repair
    batch.append(Event.new(TURN_END, TurnEnd(steps=steps), agent=agent))
    record = SessionRecovery(
        turn_start_seq=turn.turn_start_seq,
        steps=steps,
        orphan_results=len(turn.orphan_calls),
        closed_step=turn.open_step,
        reason=INCOMPLETE_TURN_REASON,
    )
    batch.append(Event.new(SESSION_RECOVERY, record, agent=agent))
    return batch


def _report(session_id: str, turn: IncompleteTurn, recovery_seq: int = 0) -> RecoveryReport:
    return RecoveryReport(
        session_id=session_id,
        turn_start_seq=turn.turn_start_seq,
        agent=turn.agent,
        orphan_results=len(turn.orphan_calls),
        closed_step=turn.open_step,
        steps=turn.steps_after_repair,
        repaired=recovery_seq > 0,
        recovery_seq=recovery_seq,
    )


def repair_incomplete(session: Session, incomplete: IncompleteTurn | None) -> RecoveryReport:
    """Close the incomplete turn ``incomplete`` of ``session``; idempotent.

    The session is read again and scanned first, and the turn is repaired as it is *now*:
    when it is no longer incomplete (someone repaired or ended it) nothing is written, and a
    ``None`` turn writes nothing either. Otherwise one atomic batch is appended, every event
    with the turn's agent: an interrupted ``tool/result``
    (:func:`~agentsession.derive.interrupted_tool_result`) for each unanswered call,
    ``step/end`` for the open step, ``turn/end`` whose ``steps`` counts the step just closed,
    and ``session/recovery``. Afterwards no scan reports the turn.

    Re-reading and appending are two operations: hold the session's turn lock (as
    :func:`recover_store` does) so that no live turn writes in between.
    """
    if incomplete is None:
        return RecoveryReport(session_id=session.id)
    current = next(
        (
            turn
            for turn in scan_all_incomplete(read_all_events(session))
            if turn.turn_start_seq == incomplete.turn_start_seq
        ),
        None,
    )
    if current is None:
        return RecoveryReport(
            session_id=session.id,
            turn_start_seq=incomplete.turn_start_seq,
            agent=incomplete.agent,
        )
    seqs = session.append_many(_repair_events(current))
    return _report(session.id, current, seqs[-1])


def repair_all_incomplete(session: Session) -> list[RecoveryReport]:
    """Repair every incomplete turn of ``session``, earliest first; one report per turn
    repaired (empty when the session is clean).

    For a runner that holds the session's turn lock before its turn: no other turn of the
    session can be live then, whatever its agent, so every open turn is a crashed one.
    """
    reports: list[RecoveryReport] = []
    for turn in scan_all_incomplete(read_all_events(session)):
        report = repair_incomplete(session, turn)
        if report.repaired:
            reports.append(report)
    return reports


def recover_store(
    store: Store,
    session_ids: Iterable[str] | None = None,
    *,
    lock_timeout: float = 0.0,
    dry_run: bool = False,
) -> list[StoreRecoveryReport]:
    """Repair every crashed turn of the store's sessions whose turn lock is free.

    ``session_ids`` limits the pass to those sessions (default: every session of
    ``store.list()``). For each session with an incomplete turn, the turn lock is tried for
    ``lock_timeout`` seconds (0: once). When it is held, the turn may be running: the session
    is reported ``live`` and left alone. Otherwise, under the lock, the session is read again
    and every incomplete turn is repaired with :func:`repair_incomplete`, earliest first.

    With ``dry_run`` nothing is written (no lock file either, so a read-only store can be
    checked): the sessions are scanned the same way and the turn lock is only tested
    (``is_locked``, for up to ``lock_timeout``), never taken. A session whose lock is
    free is reported ``pending`` instead of being repaired, its ``turns`` saying what a repair
    would write (``repaired`` False, ``recovery_seq`` 0); one whose lock is held is ``live``
    as without ``dry_run``. What it reports may be out of date as soon as it returns.

    Returns one report per session that had an incomplete turn, and per session asked for by
    id whatever its state. An id with no events is ``clean`` (there is nothing to repair; a
    caller that wants an error for unknown ids can check ``store.exists`` first). A session
    whose TTL has run out is skipped in the store-wide pass and reported ``expired`` when asked
    for by id. A session that cannot be read or repaired (a corrupt log, an unreadable file, a
    database error, a sealed event that does not open) is reported ``damaged`` with the error,
    logged at WARNING, and the pass goes on with the other sessions; a shredded one is skipped
    in the store-wide pass and reported ``shredded`` when asked for by id. Repairs are
    logged at WARNING too. The calling thread must not hold the turn lock of a session it
    recovers (the lock is not reentrant: :class:`~agentsession.errors.UsageError`; a dry run
    reports such a session ``live``); use :func:`repair_all_incomplete` under a lock you hold.
    """
    if lock_timeout < 0:
        raise UsageError(f"lock_timeout must be >= 0, not {lock_timeout}")
    if session_ids is None:
        explicit = False
        ids = [info.id for info in store.list()]
    else:
        if isinstance(session_ids, str):
            raise UsageError("recover_store takes a list of session ids, not one string")
        explicit = True
        ids = list(dict.fromkeys(session_ids))
    reports: list[StoreRecoveryReport] = []
    for session_id in ids:
        with _trace.span("agentsession.recover.session", session_id=session_id) as span:
            try:
                report = _recover_session(store, session_id, lock_timeout, dry_run)
            except SessionShredded:
                report = StoreRecoveryReport(session_id=session_id, status="shredded")
            except (StorageError, SessionNotFound, EncryptionError) as exc:
                # One damaged session never stops the pass: report it and go on.
                log.warning("recovery skipped session %r: %s", session_id, exc)
                report = StoreRecoveryReport(
                    session_id=session_id, status="damaged", error=str(exc)
                )
            span.set(status=report.status)
        if explicit or report.status in ("repaired", "live", "pending", "damaged"):
            if report.status == "repaired":
                log.warning(
                    "repaired %d crashed turn(s) of session %r",
                    sum(1 for t in report.turns if t.repaired),
                    session_id,
                )
            reports.append(report)
    return reports


def _recover_session(
    store: Store, session_id: str, lock_timeout: float, dry_run: bool
) -> StoreRecoveryReport:
    if not store.exists(session_id):
        return StoreRecoveryReport(session_id=session_id, status="clean")
    try:
        session = store.get(session_id)
        found = scan_all_incomplete(read_all_events(session))
        if not found:
            return StoreRecoveryReport(session_id=session_id, status="clean")
        if dry_run:
            # Only tested, never taken: taking it would create the lock file, and a dry run
            # writes nothing (it works on a read-only store too).
            live = _held_for(store, session_id, lock_timeout)
            turns = [_report(session_id, turn) for turn in found]
            status: RecoveryStatus = "live" if live else "pending"
            return StoreRecoveryReport(session_id=session_id, status=status, turns=turns)
        try:
            lock = store.lock(session_id, timeout=lock_timeout)
        except LockTimeout:
            turns = [_report(session_id, turn) for turn in found]
            return StoreRecoveryReport(session_id=session_id, status="live", turns=turns)
        with lock:
            repaired = repair_all_incomplete(session)
    except SessionExpired:
        return StoreRecoveryReport(session_id=session_id, status="expired")
    # Someone may have closed the turns between the first scan and taking the lock.
    return StoreRecoveryReport(
        session_id=session_id, status="repaired" if repaired else "clean", turns=repaired
    )


def _held_for(store: Store, session_id: str, timeout: float) -> bool:
    """Whether the session's turn lock stays held for ``timeout`` seconds (0: tested once)."""
    deadline = time.monotonic() + timeout
    while store.is_locked(session_id):
        if time.monotonic() >= deadline:
            return True
        time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
    return False
