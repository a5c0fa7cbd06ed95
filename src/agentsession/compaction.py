"""Compaction planning: where to cut the history, and the marker that records the cut.

A pure planner over a session's derived history: it reads a :class:`~agentsession.derive.Deriver`
and the events of the window and returns the :class:`~agentsession.events.Compaction` payload
to append, or None. ``Session.compact()`` and the store's history cap call it with the session
lock held and append the marker only if the log has not grown since the plan was made (a
conditional append), planning again when it has.

A marker holds the summary, the seq of the first event kept verbatim (always a turn boundary)
and the kept messages themselves (the retained tail), so the marker alone rebuilds the history:
derive starts from it, and opening a session reads from the last marker on. The events before
it stay in storage and ``read()`` returns them.

**Turns.** Cuts fall only between whole turns. A turn begins at a ``turn/start`` event (at a
user message in a log without turn markers) and, inside the retained tail of an earlier marker,
at each user message it kept (the tail itself began at a turn boundary). Counting the turns a
marker retained is what lets a second compaction or prune cut inside them.

A history cap (lango's ``max_messages``) is the same mechanism with ``kind="prune"``: it keeps
the most recent whole turns whose messages fit the cap, carrying the current summary forward.
"""

from __future__ import annotations

from collections.abc import Sequence

from .derive import Deriver, IndexedMessage
from .errors import UsageError
from .events import TURN_START, USER_MESSAGE, Compaction, Event, compaction_of
from .messages import Message

__all__ = [
    "memory_cutoff_seq",
    "plan_compaction",
    "plan_prune",
    "previous_summary_text",
    "turn_cuts",
]


def memory_cutoff_seq(data: Compaction) -> int:
    """The highest seq a marker makes unnecessary for rebuilding history (agentkit's
    ``MemoryCutoffSeq``): ``first_kept_seq - 1``, else the legacy ``before_seq``."""
    if data.first_kept_seq > 1:
        return data.first_kept_seq - 1
    if data.first_kept_seq == 1:
        return 0
    return data.before_seq


def previous_summary_text(data: Compaction) -> str:
    """The text of a marker's summary (its first text part), for summarising again."""
    return data.summary.text if data.summary is not None else ""


def _marker_base(events: Sequence[Event], deriver: Deriver) -> int:
    """Seq after which the window's events are replayed live by ``deriver``: the latest marker
    that passes its filter (its ``before_seq`` for a legacy marker), or 0."""
    for event in reversed(events):
        if deriver.passes(event):
            data = compaction_of(event)
            if data is not None:
                return event.seq if data.rebuilds_history else data.before_seq
    return 0


def turn_cuts(events: Sequence[Event], deriver: Deriver) -> list[tuple[int, int]]:
    """Where the derived history can be cut: ``(entry index, first kept seq)`` for the start of
    every turn, earliest first.

    ``events`` is the session's window (every event from the latest marker on, or from the
    legacy marker's ``before_seq``). The summary entry is never a turn start.
    """
    entries = deriver.committed()
    base = _marker_base(events, deriver)
    live = [e for e in events if e.seq > base and deriver.passes(e)]
    starts = [e.seq for e in live if e.type == TURN_START]
    if not starts:
        starts = [e.seq for e in live if e.type == USER_MESSAGE]
    cuts: dict[int, int] = {}
    first = 1 if deriver.summary is not None else 0
    # Messages a marker retained come before every live one; their seq is the marker's.
    for index in range(first, len(entries)):
        entry = entries[index]
        if entry.seq > base:
            break
        if entry.is_turn_start and entry.message.role == "user":
            cuts[index] = entry.seq
    # Live turns: the first entry at or after each turn's first event.
    position = first
    for seq in starts:
        while position < len(entries) and (
            entries[position].seq < seq or entries[position].seq <= base
        ):
            position += 1
        if position == len(entries):
            break
        cuts.setdefault(position, seq)
    if first < len(entries) and first not in cuts and entries[first].message.role != "tool":
        # The history opens mid-turn (a tail kept by hand): its start is a boundary too.
        cuts[first] = entries[first].seq
    return sorted(cuts.items())


def _tail_from_seq(entries: Sequence[IndexedMessage], first_kept_seq: int) -> list[Message]:
    tail = [e.message for e in entries if e.seq >= first_kept_seq]
    while tail and tail[0].role == "tool":  # never start inside a tool exchange
        tail.pop(0)
    return tail


def plan_compaction(
    events: Sequence[Event],
    deriver: Deriver,
    latest_seq: int,
    summary: Message | None,
    *,
    keep_turns: int | None = None,
    first_kept_seq: int | None = None,
    tokens_before: int = 0,
    kind: str = "summary",
    session_id: str = "",
) -> Compaction | None:
    """The marker that replaces the history before a turn boundary by ``summary``, or None
    when there is nothing to drop.

    Give ``keep_turns`` (how many of the latest turns stay verbatim; 0 keeps none) or
    ``first_kept_seq`` (the first event to keep; it should be a turn boundary). Raises
    :class:`UsageError` while tool calls are unanswered.
    """
    if (keep_turns is None) == (first_kept_seq is None):
        raise UsageError("compact() needs exactly one of keep_turns and first_kept_seq")
    if keep_turns is not None and keep_turns < 0:
        raise UsageError(f"keep_turns must be >= 0, not {keep_turns}")
    if kind not in ("summary", "prune"):
        raise UsageError(f"compaction kind must be 'summary' or 'prune', not {kind!r}")
    if summary is None and kind == "summary":
        raise UsageError("a summary compaction needs a summary message")
    if deriver.has_open_calls:
        raise UsageError(
            f"session {session_id!r} has unanswered tool calls; answer or repair them "
            "before compacting"
        )
    entries = deriver.committed()
    if keep_turns is not None:
        if keep_turns == 0:
            return Compaction(
                summary=summary,
                first_kept_seq=latest_seq + 1,
                tokens_before=tokens_before,
                kind=kind,
            )
        cuts = turn_cuts(events, deriver)
        if keep_turns > len(cuts):
            return None
        index, seq = cuts[-keep_turns]
        return Compaction(
            summary=summary,
            first_kept_seq=seq,
            retained_tail=[e.message for e in entries[index:]],
            tokens_before=tokens_before,
            kind=kind,
        )
    assert first_kept_seq is not None
    if not 1 <= first_kept_seq <= latest_seq + 1:
        raise UsageError(
            f"first_kept_seq {first_kept_seq} is outside session {session_id!r} "
            f"(seqs 1..{latest_seq})"
        )
    return Compaction(
        summary=summary,
        first_kept_seq=first_kept_seq,
        retained_tail=_tail_from_seq(entries, first_kept_seq),
        tokens_before=tokens_before,
        kind=kind,
    )


def plan_prune(events: Sequence[Event], deriver: Deriver, max_messages: int) -> Compaction | None:
    """The prune marker that caps the history at ``max_messages`` derived messages, or None
    when it already fits (or tool calls are unanswered, so no cut is safe yet).

    The history kept is the current summary (when a compaction made one; it counts towards the
    cap) followed by the most recent **whole** turns whose messages fit the cap, every time:
    turns a previous prune retained are counted like any other. When the latest turn alone
    exceeds the cap, that turn is kept whole (never cut inside a turn) and everything before
    it is dropped.
    """
    if max_messages < 1:
        raise UsageError(f"max_messages must be >= 1, not {max_messages}")
    if deriver.has_open_calls:
        return None
    entries = deriver.committed()
    if len(entries) <= max_messages:
        return None
    cuts = turn_cuts(events, deriver)
    if not cuts:
        return None
    summary = deriver.summary
    room = max_messages - (1 if summary is not None else 0)
    chosen = cuts[-1]
    for cut in cuts:  # earliest first: the first that fits keeps the most turns
        if len(entries) - cut[0] <= room:
            chosen = cut
            break
    index, seq = chosen
    if index <= (1 if summary is not None else 0):
        return None  # nothing before the first kept turn but the summary
    return Compaction(
        summary=summary.message if summary is not None else None,
        first_kept_seq=seq,
        retained_tail=[e.message for e in entries[index:]],
        kind="prune",
    )
