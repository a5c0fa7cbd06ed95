"""Compaction: replacing old history with a summary, on a turn boundary, without deleting it.

:func:`compact` appends a ``session/compaction`` marker holding the summary, the seq of the first
event kept verbatim (always a turn boundary) and the kept messages themselves (the retained
tail), so the marker alone rebuilds the history: derive starts from it, and opening a session
reads from the last marker on. The events before it stay in storage and ``read()`` returns them.

A history cap (lango's ``max_messages``) is the same mechanism with ``kind="prune"`` and no
summary: :func:`prune` keeps the most recent whole turns that fit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .derive import Deriver, IndexedMessage
from .errors import UsageError
from .events import COMPACTION, TURN_START, USER_MESSAGE, Compaction, Event
from .messages import Message

if TYPE_CHECKING:
    from .session import BaseSession

__all__ = ["compact", "memory_cutoff_seq", "previous_summary_text", "prune", "turn_boundaries"]


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


def turn_boundaries(events: list[Event], deriver: Deriver) -> list[int]:
    """Seqs where turns start after the deriver's latest compaction: ``turn/start`` events, or
    user messages in a log without turn markers."""
    base = 0
    for event in reversed(events):
        if event.type == COMPACTION and deriver.passes(event):
            base = event.seq
            break
    recent = [e for e in events if e.seq > base and deriver.passes(e)]
    starts = [e.seq for e in recent if e.type == TURN_START]
    return starts or [e.seq for e in recent if e.type == USER_MESSAGE]


def _tail(entries: list[IndexedMessage], first_kept_seq: int) -> list[Message]:
    tail = [e.message for e in entries if e.seq >= first_kept_seq]
    while tail and tail[0].role == "tool":  # never start inside a tool exchange
        tail.pop(0)
    return tail


def compact(
    session: BaseSession,
    summary: Message | str | None,
    *,
    keep_turns: int | None = None,
    first_kept_seq: int | None = None,
    tokens_before: int = 0,
    agent: str | None = None,
    kind: str = "summary",
) -> int | None:
    """Append a compaction marker; returns its seq, or None when there is nothing to drop.

    Give ``keep_turns`` (how many of the latest turns stay verbatim) or ``first_kept_seq`` (the
    first event to keep; it should be a turn boundary). The marker applies to ``agent``'s
    history (all agents when None). Raises :class:`UsageError` while tool calls are unanswered:
    compact between turns or steps, after repairing a crashed turn.
    """
    if (keep_turns is None) == (first_kept_seq is None):
        raise UsageError("compact() needs exactly one of keep_turns and first_kept_seq")
    if keep_turns is not None and keep_turns < 0:
        raise UsageError(f"keep_turns must be >= 0, not {keep_turns}")
    if kind not in ("summary", "prune"):
        raise UsageError(f"compaction kind must be 'summary' or 'prune', not {kind!r}")
    if isinstance(summary, str):
        summary = Message.user(summary)
    if summary is None and kind == "summary":
        raise UsageError("a summary compaction needs a summary message")
    with session._lock:
        session._refresh()
        deriver = session._deriver(agent)
        if deriver.has_open_calls:
            raise UsageError(
                f"session {session.id!r} has unanswered tool calls; answer or repair them "
                "before compacting"
            )
        latest = session._latest_seq
        if keep_turns is not None:
            starts = turn_boundaries(session._window, deriver)
            if keep_turns == 0:
                first_kept_seq = latest + 1
            elif keep_turns <= len(starts):
                first_kept_seq = starts[-keep_turns]
            else:
                return None
        assert first_kept_seq is not None
        if not 1 <= first_kept_seq <= latest + 1:
            raise UsageError(
                f"first_kept_seq {first_kept_seq} is outside session {session.id!r} "
                f"(seqs 1..{latest})"
            )
        data = Compaction(
            summary=summary,
            first_kept_seq=first_kept_seq,
            retained_tail=_tail(deriver.committed(), first_kept_seq),
            tokens_before=tokens_before,
            kind=kind,
        )
        return session.append(Event.new(COMPACTION, data, agent=agent or ""))


def prune(session: BaseSession, max_messages: int, agent: str | None = None) -> int | None:
    """Cap the history at ``max_messages`` derived messages by a prune-kind compaction that
    keeps the most recent whole turns fitting the cap (at least the latest turn). Returns the
    marker's seq, or None when the history already fits."""
    if max_messages < 1:
        raise UsageError(f"max_messages must be >= 1, not {max_messages}")
    with session._lock:
        session._refresh()
        deriver = session._deriver(agent)
        entries = deriver.committed()
        if len(entries) <= max_messages or deriver.has_open_calls:
            return None
        starts = turn_boundaries(session._window, deriver)
        keep = None
        for start in reversed(starts):
            if len(_tail(entries, start)) > max_messages and keep is not None:
                break
            keep = start
        if keep is None or len(_tail(entries, keep)) >= len(entries):
            return None
        return compact(session, None, first_kept_seq=keep, agent=agent, kind="prune")
