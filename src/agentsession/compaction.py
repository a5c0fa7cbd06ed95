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

**Turns.** Cuts fall only between whole turns. After the marker the history starts from, a
turn begins at each ``turn/start`` event and at each user message outside a marked turn (every
user message, in a log without turn markers); a user message between ``turn/start`` and
``turn/end`` belongs to that turn. Inside the retained tail of the marker, a turn begins at each
user message it kept (the tail itself began at a turn boundary). Counting the turns a marker
retained is what lets a second compaction or prune cut inside them.

Markers record that structure for the next cut: ``retained_turn_starts`` (where the kept
turns begin) and ``in_turn`` (a history cap lands right after the user message that started a
turn, so the events after the marker may still belong to it). For markers written before those
fields existed, every kept user message counts as a turn start, and whether the history opens
inside a turn is guessed from the first ``turn/start`` or ``turn/end`` after the marker.

A history cap (lango's ``max_messages``) is the same mechanism with ``kind="prune"``: it keeps
the most recent whole turns whose messages fit the cap, carrying the current summary forward.

**Compacting up to a message** (lango's ``CompactMessages(key, upToIndex, summary)``):
``up_to_message=i`` asks for messages ``0..i`` of the derived history (``messages()``, with the
same agent filter) to be replaced by the summary. A cut only falls on a turn boundary, so when
message ``i + 1`` does not begin a turn, the cut moves back to the latest boundary before it:
the rest of that turn stays verbatim (after a summary that may cover it too), and no message
the caller did not ask to drop is ever dropped. ``i`` naming the last message replaces the
whole history; a boundary that falls on the first message (nothing to drop) plans nothing.

**The running turn is kept.** Compacting from inside a turn that has not ended (its
``turn/start`` has no ``turn/end`` yet, as in a ``with session.turn()`` block that compacts
before calling the model) never summarises it away: ``keep_turns=0``, and ``up_to_message``
naming the last message, keep that turn verbatim after the summary, as ``keep_turns=1`` would,
so the question being answered stays in the history (nothing is planned when the running turn
is the whole history). A turn a crash left open counts as running until
:mod:`agentsession.recovery` ends it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal

from .derive import Deriver, IndexedMessage
from .errors import UsageError
from .events import TURN_END, TURN_START, USER_MESSAGE, Compaction, Event, compaction_of
from .messages import Message

__all__ = [
    "COMPACTION_EFFECT_KIND",
    "history_start",
    "memory_cutoff_seq",
    "plan_compaction",
    "plan_prune",
    "previous_summary_text",
    "summary_message",
    "LANGO_SUMMARY_PREFIX",
    "turn_cuts",
]

COMPACTION_EFFECT_KIND = "compaction-effect"
"""Meta namespace where code that writes its own event types into sessions says what a
compaction does not change for them: key the types' namespace (``openai_agents`` for
``openai_agents/item``), value one sentence. ``agentsession compact`` prints the sentence of
every namespace among the compacted session's event types, so the core needs to know no
integration."""


def memory_cutoff_seq(data: Compaction) -> int:
    """The highest seq a marker makes unnecessary for rebuilding history (agentkit's
    ``MemoryCutoffSeq``): ``first_kept_seq - 1``, else the legacy ``before_seq``."""
    if data.first_kept_seq > 1:
        return data.first_kept_seq - 1
    if data.first_kept_seq == 1:
        return 0
    return data.before_seq


LANGO_SUMMARY_PREFIX: Final = "[Compacted Summary]\n"
"""What lango's ``CompactMessages`` puts before the summary text of the system row it
writes; ``compact(..., summary_role="system")`` writes it too."""


def summary_message(
    summary: Message | str | None, role: Literal["user", "system"] = "user"
) -> Message | None:
    """A compaction's summary as a message: text becomes a user message, or with
    ``role="system"`` a system message of :data:`LANGO_SUMMARY_PREFIX` and the text (lango's
    summary row); a message or None is returned as it is."""
    if role not in ("user", "system"):
        raise UsageError(f"summary_role must be 'user' or 'system', not {role!r}")
    if not isinstance(summary, str):
        return summary
    if role == "system":
        return Message.system(LANGO_SUMMARY_PREFIX + summary)
    return Message.user(summary)


def previous_summary_text(data: Compaction) -> str:
    """The text of a marker's summary (its first text part), for summarising again."""
    return data.summary.text if data.summary is not None else ""


def _marker_base(events: Sequence[Event], deriver: Deriver) -> int:
    """Seq after which the window's events are replayed live by ``deriver``: the latest marker
    that passes its filter (its ``before_seq`` for a legacy marker), or 0."""
    return _base_marker(events, deriver)[0]


def _base_marker(events: Sequence[Event], deriver: Deriver) -> tuple[int, Compaction | None]:
    """:func:`_marker_base` and that marker's payload (None when there is none)."""
    for event in reversed(events):
        if deriver.passes(event):
            data = compaction_of(event)
            if data is not None:
                return (event.seq if data.rebuilds_history else data.before_seq), data
    return 0, None


def _scan_turns(live: Sequence[Event], inside: bool | None) -> tuple[list[int], bool]:
    """Seqs where the turns of ``live`` (events replayed after the marker) begin: every
    ``turn/start``, and every user message outside a marked turn; and whether the last of them
    is still open at the end.

    A user message between a ``turn/start`` and its ``turn/end`` belongs to that turn.
    ``inside`` says whether ``live`` opens inside a turn (the marker's ``in_turn``); None, for
    markers written before that was recorded, guesses it: events before a ``turn/end`` that no
    ``turn/start`` precedes are inside a turn.
    """
    if inside is None:
        inside = False
        for event in live:
            if event.type in (TURN_START, TURN_END):
                inside = event.type == TURN_END
                break
    starts: list[int] = []
    for event in live:
        if event.type == TURN_START:
            starts.append(event.seq)
            inside = True
        elif event.type == TURN_END:
            inside = False
        elif event.type == USER_MESSAGE and not inside:
            starts.append(event.seq)
    return starts, inside


def _opens_inside(marker: Compaction | None) -> bool | None:
    """Whether the history after ``marker`` opens inside a turn: its ``in_turn`` when it records
    turn structure, None (guess) for older markers."""
    if marker is None:
        return False
    if marker.in_turn or marker.retained_turn_starts:
        return marker.in_turn
    return None


def _kept(
    events: Sequence[Event], entries: Sequence[IndexedMessage]
) -> tuple[list[Message], list[str]]:
    """The messages of ``entries`` and the agent of the event each came from (an empty list
    when none has one), for ``retained_tail`` and ``retained_agents``."""
    agents_by_seq = {e.seq: e.agent for e in events if e.agent}
    agents = [agents_by_seq.get(entry.seq, entry.agent) for entry in entries]
    return [entry.message for entry in entries], agents if any(agents) else []


def _tail_starts(cuts: Sequence[tuple[int, int]], index: int) -> list[int]:
    """For a marker keeping the entries from ``index`` on: the indexes into its tail where
    turns begin (``cuts`` from :func:`turn_cuts`)."""
    return [cut - index for cut, _ in cuts if cut >= index]


def _ends_in_turn(events: Sequence[Event], deriver: Deriver) -> bool:
    """Whether a marker appended now sits inside a turn that has not ended."""
    base, marker = _base_marker(events, deriver)
    live = [e for e in events if e.seq > base and deriver.passes(e)]
    return _scan_turns(live, _opens_inside(marker))[1]


def turn_cuts(events: Sequence[Event], deriver: Deriver) -> list[tuple[int, int]]:
    """Where the derived history can be cut: ``(entry index, first kept seq)`` for the start of
    every turn, earliest first.

    ``events`` is the session's window (every event from the latest marker on, or from the
    legacy marker's ``before_seq``). The summary entry is never a turn start. Live turns begin
    at ``turn/start`` events and at user messages outside marked turns; inside the retained tail
    of the marker the history starts from, at each user message. Cutting inside a tail gives
    the marker's own ``first_kept_seq`` (the seqs of the tail's messages are not stored): a
    lower bound of the first event kept.
    """
    entries = deriver.committed()
    base, marker = _base_marker(events, deriver)
    first = 1 if deriver.summary is not None else 0
    cuts: dict[int, int] = {}
    # Messages a marker retained come before every live one; their seq is the marker's.
    position = first
    while position < len(entries) and entries[position].seq <= base:
        entry = entries[position]
        if entry.is_turn_start and entry.message.role == "user":
            cuts[position] = entry.seq
        position += 1
    # Live turns: the first entry at or after each turn's first event that is not a tool
    # message (tool results answer the calls of the turn before).
    live = [e for e in events if e.seq > base and deriver.passes(e)]
    for seq in _scan_turns(live, _opens_inside(marker))[0]:
        while position < len(entries) and (
            entries[position].seq < seq or entries[position].message.role == "tool"
        ):
            position += 1
        if position == len(entries):
            break
        cuts.setdefault(position, seq)
    if first < len(entries) and first not in cuts and entries[first].message.role != "tool":
        # The history opens mid-turn (a tail kept by hand): its start is a boundary too.
        cuts[first] = entries[first].seq
    return sorted(cuts.items())


def _open_turn_cut(events: Sequence[Event], deriver: Deriver) -> tuple[int, int] | None:
    """The cut (see :func:`turn_cuts`) where the turn still running at the end of the log
    begins (a ``turn/start`` with no ``turn/end`` yet); None when no turn is running or the
    running one has no message yet."""
    base, marker = _base_marker(events, deriver)
    live = [e for e in events if e.seq > base and deriver.passes(e)]
    starts, running = _scan_turns(live, _opens_inside(marker))
    if not running:
        return None
    cuts = turn_cuts(events, deriver)
    if not cuts:
        return None
    last = cuts[-1]
    # A running turn begun after the marker starts at its turn/start; one that opened before
    # the marker (a cap inside it) starts at the latest boundary.
    return last if not starts or last[1] >= starts[-1] else None


def history_start(events: Sequence[Event], deriver: Deriver) -> int:
    """Index in ``events`` of the first event that begins a turn under ``deriver``'s agent
    filter: a ``turn/start`` or a user message; 0 when none does.

    For a window cut short by the store's ``max_loaded_events``, the history is derived from
    there on, so that it never opens in the middle of a turn, with tool results whose calls
    were not loaded (agentkit's ring of loaded events could). When no turn begins among the
    events (one turn longer than the cap), they are all used rather than none: the deriver
    leaves out every result whose call was not loaded, so the history opens with the first
    loaded assistant message, never with a tool result."""
    for index, event in enumerate(events):
        if event.type in (TURN_START, USER_MESSAGE) and deriver.passes(event):
            return index
    return 0


def _keep_turns_for_message(
    events: Sequence[Event], deriver: Deriver, up_to_message: int, session_id: str
) -> int | None:
    """The ``keep_turns`` that replaces messages ``0..up_to_message`` of the derived history,
    moving the cut back to the latest turn boundary at or before message ``up_to_message + 1``;
    None when that boundary is the first message (nothing would be dropped)."""
    if isinstance(up_to_message, bool) or not isinstance(up_to_message, int):
        raise UsageError(f"up_to_message must be an int, not {up_to_message!r}")
    total = len(deriver.entries())  # what messages() returns
    if not 0 <= up_to_message < total:
        raise UsageError(
            f"compact index {up_to_message} out of range (have {total} messages) "
            f"in session {session_id!r}"
        )
    if up_to_message + 1 == total:
        return 0  # the whole history
    cuts = turn_cuts(events, deriver)
    before = [position for position, (index, _) in enumerate(cuts) if index <= up_to_message + 1]
    if not before or cuts[before[-1]][0] == 0:
        return None
    return len(cuts) - before[-1]


def _tail_from_seq(
    events: Sequence[Event], deriver: Deriver, first_kept_seq: int, session_id: str
) -> list[IndexedMessage]:
    """The messages from the first entry whose event is at or after ``first_kept_seq`` to the
    end, never the current summary and never starting inside a tool exchange.

    The messages a marker retained all carry the marker's ``first_kept_seq`` (their own seqs are
    not stored), so a seq after it and before the marker cannot be placed among them: that is a
    :class:`UsageError`.
    """
    entries = deriver.committed()
    kept = entries[1:] if deriver.summary is not None else entries
    base = _marker_base(events, deriver)
    if kept and kept[0].seq < first_kept_seq < base:
        raise UsageError(
            f"first_kept_seq {first_kept_seq} of session {session_id!r} falls among the "
            f"messages the compaction at seq {base} retained (from seq {kept[0].seq} on), "
            "whose own seqs are not recorded; give a seq outside that range or use keep_turns"
        )
    start = next((i for i, e in enumerate(kept) if e.seq >= first_kept_seq), len(kept))
    while start < len(kept) and kept[start].message.role == "tool":
        start += 1  # never start inside a tool exchange
    return kept[start:]


def plan_compaction(
    events: Sequence[Event],
    deriver: Deriver,
    latest_seq: int,
    summary: Message | None,
    *,
    keep_turns: int | None = None,
    first_kept_seq: int | None = None,
    up_to_message: int | None = None,
    tokens_before: int = 0,
    kind: str = "summary",
    session_id: str = "",
) -> Compaction | None:
    """The marker that replaces the history before a turn boundary by ``summary``, or None
    when there is nothing to drop.

    Give one of ``keep_turns`` (how many of the latest turns stay verbatim, counting the turns
    the current marker retained; 0 keeps none but a turn still running, see the module
    docstring), ``first_kept_seq`` (the first event to keep; it
    should be a turn boundary) or ``up_to_message`` (the index, in ``deriver``'s messages, of
    the last message to replace; the cut moves back to a turn boundary, see the module
    docstring). Raises :class:`UsageError` while tool calls are unanswered, when
    ``up_to_message`` is not the index of a message (``compact index <i> out of range (have
    <n> messages)``), and when ``first_kept_seq`` falls among the messages the current marker
    retained (after its ``first_kept_seq``, before the marker): their own seqs are not
    recorded.
    """
    given = [v for v in (keep_turns, first_kept_seq, up_to_message) if v is not None]
    if len(given) != 1:
        raise UsageError(
            "compact() needs exactly one of keep_turns, first_kept_seq and up_to_message"
        )
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
    if up_to_message is not None:
        keep_turns = _keep_turns_for_message(events, deriver, up_to_message, session_id)
        if keep_turns is None:
            return None
    if keep_turns == 0:
        running = _open_turn_cut(events, deriver)
        if running is not None:
            # Compacting from inside a turn never summarises away the question it answers.
            if running[0] == 0:
                return None  # the running turn is the whole history: nothing to drop
            keep_turns = 1  # the running turn is the latest cut
    if keep_turns is not None:
        if keep_turns == 0:
            return Compaction(
                summary=summary,
                first_kept_seq=latest_seq + 1,
                in_turn=_ends_in_turn(events, deriver),
                tokens_before=tokens_before,
                kind=kind,
            )
        cuts = turn_cuts(events, deriver)
        if keep_turns > len(cuts):
            return None
        index, seq = cuts[-keep_turns]
        tail, agents = _kept(events, entries[index:])
        return Compaction(
            summary=summary,
            first_kept_seq=seq,
            retained_tail=tail,
            retained_turn_starts=_tail_starts(cuts, index),
            in_turn=_ends_in_turn(events, deriver),
            retained_agents=agents,
            tokens_before=tokens_before,
            kind=kind,
        )
    assert first_kept_seq is not None
    if not 1 <= first_kept_seq <= latest_seq + 1:
        raise UsageError(
            f"first_kept_seq {first_kept_seq} is outside session {session_id!r} "
            f"(seqs 1..{latest_seq})"
        )
    kept = _tail_from_seq(events, deriver, first_kept_seq, session_id)
    tail, agents = _kept(events, kept)
    starts = _tail_starts(turn_cuts(events, deriver), len(entries) - len(kept))
    return Compaction(
        summary=summary,
        first_kept_seq=first_kept_seq,
        retained_tail=tail,
        retained_turn_starts=starts or ([0] if tail else []),
        in_turn=_ends_in_turn(events, deriver),
        retained_agents=agents,
        tokens_before=tokens_before,
        kind=kind,
    )


def plan_prune(events: Sequence[Event], deriver: Deriver, max_messages: int) -> Compaction | None:
    """The prune marker that caps the history at ``max_messages`` derived messages, or None
    when it already fits (or tool calls are unanswered, so no cut is safe yet).

    The history kept is the current summary (when a compaction made one; it counts towards the
    cap) followed by the most recent **whole** turns whose messages fit the cap, every time:
    turns a previous prune retained are counted like any other. When the latest turn alone
    (with the summary) exceeds the cap, that turn is kept whole (never cut inside a turn) and
    everything else but the summary is dropped.
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
    tail, agents = _kept(events, entries[index:])
    return Compaction(
        summary=summary.message if summary is not None else None,
        first_kept_seq=seq,
        retained_tail=tail,
        retained_turn_starts=_tail_starts(cuts, index),
        in_turn=_ends_in_turn(events, deriver),
        retained_agents=agents,
        kind="prune",
    )
