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

**Compaction policies.** :class:`CompactionPolicy` (``open_store(url,
compaction=CompactionPolicy(...))``) is compaction the store does on its own when a turn ends
over a budget of tokens or messages, with a summary the application's ``summarize`` writes;
it may also elide older long tool results in ``messages()``. This module holds its pure parts
(the settings, token counting, eliding, reading the summarizer's answer, checking that a
marker planned again still replaces what was summarized); the session runs it (see
``docs/compaction.md``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any, Final, Literal

import msgspec

from .derive import Deriver, IndexedMessage
from .errors import UsageError
from .events import (
    TURN_END,
    TURN_START,
    USAGE,
    USER_MESSAGE,
    Compaction,
    Event,
    Usage,
    compaction_of,
)
from .messages import Message, RefusalPart, TextPart, ThinkingPart, ToolResult

__all__ = [
    "COMPACTION_EFFECT_KIND",
    "MEDIA_PART_TOKENS",
    "MESSAGE_OVERHEAD_TOKENS",
    "CompactionFailure",
    "CompactionPolicy",
    "PlannedCompaction",
    "Summarizer",
    "SummaryResult",
    "TokenCounter",
    "check_commit",
    "default_token_counter",
    "elide_message",
    "elide_tool_results",
    "elision_stub",
    "estimate_tokens",
    "latest_turn_start",
    "message_text",
    "DeferredPolicy",
    "deferred_policy",
    "policy_deferred",
    "summary_of",
    "tiktoken_counter",
    "usage_events",
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


# -- compaction policies ---------------------------------------------------------------------
#
# What a store does on its own at the end of a turn (``open_store(...,
# compaction=CompactionPolicy(...))``): the policy's settings, counting tokens, the stub of an
# elided tool result and the summarizer's answer. The sessions run it (BaseSession at the end
# of a sync turn, the async turn at the end of its own); see docs/compaction.md.

TokenCounter = Callable[[Sequence[Message]], int]
"""Counts the tokens of a list of messages. The policy keeps a running count, so a counter must
add up: the count of a list is the sum of the counts of its messages."""

MESSAGE_OVERHEAD_TOKENS: Final = 4
"""What each message costs on top of its content in :func:`estimate_tokens` (role and framing,
as in OpenAI's chat format)."""

MEDIA_PART_TOKENS: Final = 85
"""What an image, file or attachment part costs in :func:`estimate_tokens` (OpenAI's price of a
low-detail image), whatever its size."""

_log = logging.getLogger("agentsession.compaction")
_json = msgspec.json.Encoder()


class DeferredPolicy:
    """What :func:`policy_deferred` hands its caller: whether a turn that ended inside the
    block left the compaction policy to it (``due``), and the turn's agent."""

    __slots__ = ("agent", "due")

    def __init__(self) -> None:
        self.due = False
        """Whether a turn ended normally inside the block (the policy is to be run)."""
        self.agent = ""
        """That turn's agent (the summarizer's usage events are attributed to it)."""


_deferred: ContextVar[DeferredPolicy | None] = ContextVar(
    "agentsession_compaction_deferred", default=None
)


@contextlib.contextmanager
def policy_deferred() -> Iterator[DeferredPolicy]:
    """Within the block, a sync turn that ends does not run the store's compaction policy but
    marks it due on the :class:`DeferredPolicy` yielded: its caller runs it (the async turn,
    which awaits a coroutine summarizer on its event loop)."""
    deferred = DeferredPolicy()
    token = _deferred.set(deferred)
    try:
        yield deferred
    finally:
        _deferred.reset(token)


def deferred_policy() -> DeferredPolicy | None:
    """The :class:`DeferredPolicy` of the enclosing :func:`policy_deferred` block (None: not
    in one)."""
    return _deferred.get()


def message_text(message: Message) -> str:
    """The text of ``message`` a model reads, for counting: its text, thinking and refusal
    parts, each tool call's name and JSON arguments, each tool result's content and text parts,
    joined by newlines."""
    texts: list[str] = []
    for part in message.parts:
        if isinstance(part, _TEXTUAL):
            texts.append(part.text)
    for call in message.tool_calls:
        texts.append(call.name)
        if call.arguments:
            texts.append(_json.encode(call.arguments).decode())
    for result in message.tool_results:
        texts.append(result.content)
        texts.extend(p.text for p in result.parts if isinstance(p, TextPart))
    return "\n".join(texts)


_TEXTUAL = (TextPart, ThinkingPart, RefusalPart)


def _media_parts(message: Message) -> int:
    count = sum(1 for p in message.parts if not isinstance(p, _TEXTUAL))
    for result in message.tool_results:
        count += sum(1 for p in result.parts if not isinstance(p, TextPart))
    return count


def estimate_tokens(messages: Sequence[Message]) -> int:
    """The default estimate: for each message, its text's length in characters divided by 4
    (rounded up; :func:`message_text`), :data:`MESSAGE_OVERHEAD_TOKENS`, and
    :data:`MEDIA_PART_TOKENS` per image, file or attachment part. English text runs at about
    4 characters a token in OpenAI's and Anthropic's tokenizers; code and other languages run
    denser, so leave the budget some room."""
    total = 0
    for message in messages:
        text = message_text(message)
        total += -(-len(text) // 4) + MESSAGE_OVERHEAD_TOKENS
        total += MEDIA_PART_TOKENS * _media_parts(message)
    return total


def tiktoken_counter(encoding: str = "o200k_base") -> TokenCounter:
    """A counter with OpenAI's tokenizer (``tiktoken``, installed by the application): each
    message's :func:`message_text` encoded with ``encoding`` (``o200k_base``: GPT-4o and
    later), plus :data:`MESSAGE_OVERHEAD_TOKENS` and :data:`MEDIA_PART_TOKENS` per media part.
    Raises ImportError when tiktoken is not installed; loading the encoding may fetch its file
    once (tiktoken caches it)."""
    tiktoken: Any = importlib.import_module("tiktoken")  # an optional dependency, untyped here
    codec = tiktoken.get_encoding(encoding)

    def count(messages: Sequence[Message]) -> int:
        total = 0
        for message in messages:
            total += len(codec.encode(message_text(message), disallowed_special=()))
            total += MESSAGE_OVERHEAD_TOKENS + MEDIA_PART_TOKENS * _media_parts(message)
        return total

    return count


def default_token_counter() -> TokenCounter:
    """What a policy counts with when it is given no ``token_counter``: OpenAI's tokenizer
    (:func:`tiktoken_counter`) when ``tiktoken`` is importable and its encoding loads, else
    :func:`estimate_tokens`."""
    try:
        return tiktoken_counter()
    except Exception:  # not installed, or its encoding file cannot be had
        return estimate_tokens


def elision_stub(characters: int) -> str:
    """What an elided tool result reads: ``[tool result elided: 12,345 characters]``."""
    return f"[tool result elided: {characters:,} characters]"


def _result_size(result: ToolResult) -> int:
    return len(result.content) + sum(len(p.text) for p in result.parts if isinstance(p, TextPart))


def elide_message(message: Message, over: int) -> Message:
    """``message`` with each tool result longer than ``over`` characters (its content and text
    parts) replaced by :func:`elision_stub` (its call id, name and error flag kept, its other
    parts dropped); the message itself when none is."""
    if not message.tool_results:
        return message
    results = [
        msgspec.structs.replace(r, content=elision_stub(size), parts=[])
        if (size := _result_size(r)) > over
        else r
        for r in message.tool_results
    ]
    if all(new is old for new, old in zip(results, message.tool_results, strict=True)):
        return message
    return msgspec.structs.replace(message, tool_results=results)


def latest_turn_start(entries: Sequence[IndexedMessage]) -> int:
    """Index in ``entries`` of the message that begins the latest turn (the last one flagged
    ``is_turn_start``: a user message); 0 when none does (the whole history is one turn)."""
    for index in range(len(entries) - 1, -1, -1):
        if entries[index].is_turn_start:
            return index
    return 0


def elide_tool_results(messages: Sequence[Message], over: int, before: int) -> list[Message]:
    """``messages`` with the tool results of the first ``before`` of them (the turns before the
    latest) elided when longer than ``over`` characters (:func:`elide_message`). Every call
    keeps its result (a stub), so the list stays provider-valid."""
    out = list(messages)
    for index in range(min(before, len(out))):
        out[index] = elide_message(out[index], over)
    return out


SummaryResult = Message | tuple[Message, "Usage | Sequence[Usage] | None"]
"""What a summarizer returns: the summary message, or the summary and the usage of the model
call(s) that made it (a :class:`~agentsession.events.Usage`, a list of them, or None)."""

Summarizer = Callable[[list[Message]], Any]
"""``summarize(messages)``: the messages to be replaced (the current summary first, when there
is one) to a :data:`SummaryResult`; on the async store it may be a coroutine function."""


@dataclasses.dataclass(frozen=True)
class CompactionFailure:
    """A policy compaction that did not happen because something failed (what
    :attr:`CompactionPolicy.on_failure` is called with). The history is as it was."""

    session_id: str
    """The session whose turn ended."""
    stage: Literal["plan", "summarize", "result", "append"]
    """Where it failed: planning the cut, calling the summarizer, reading what it returned (not
    a message: :data:`SummaryResult`), or appending the marker."""
    error: BaseException
    """The exception (for ``result``, a TypeError saying what came back)."""


@dataclasses.dataclass(frozen=True)
class CompactionPolicy:
    """Automatic compaction, run by the store when a turn ends (``open_store(url,
    compaction=CompactionPolicy(...))``; see ``docs/compaction.md``).

    When ``with session.turn()`` (or ``async with``) exits normally and the session's history
    is over ``max_tokens`` tokens or ``max_messages`` messages, the store plans a compaction
    that keeps the latest ``keep_turns`` turns, calls ``summarize`` with the messages to be
    replaced, records the summarizer's usage as ``usage`` events, and appends the marker
    conditionally, as :meth:`~agentsession.BaseSession.compact` does. A failing summarizer
    leaves the history as it was: the failure is logged (a warning naming the session and the
    exception's type, never message content) and handed to ``on_failure``; the turn completes
    normally.

    ``elide_tool_results_over=N`` replaces, in ``messages()``, every tool result of the turns
    before the latest that is longer than ``N`` characters by a stub (:func:`elision_stub`);
    storage, ``read()`` and ``entries()`` are untouched.
    """

    max_tokens: int | None = None
    """Compact when the history counts more tokens than this (None: no token budget)."""
    max_messages: int | None = None
    """Compact when the history holds more messages than this (None: no message budget). Not
    the store's own ``max_messages`` option, which drops turns without a summary."""
    keep_turns: int = 2
    """How many of the latest turns stay verbatim after the summary (0: none)."""
    summarize: Summarizer | None = None
    """The summarizer (required with a budget): see :data:`Summarizer`."""
    elide_tool_results_over: int | None = None
    """Elide older tool results longer than this many characters in ``messages()`` (None:
    never)."""
    token_counter: TokenCounter | None = None
    """Counts tokens (None: :func:`default_token_counter`)."""
    on_failure: Callable[[CompactionFailure], object] | None = None
    """Called with each :class:`CompactionFailure` (after the warning is logged); what it
    raises is logged and dropped."""

    def __post_init__(self) -> None:
        for name in ("max_tokens", "max_messages", "elide_tool_results_over"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise UsageError(f"{name} must be an int >= 1 or None, not {value!r}")
        keep = self.keep_turns
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise UsageError(f"keep_turns must be an int >= 0, not {keep!r}")
        if self.summarize is not None and not callable(self.summarize):
            raise UsageError("summarize must be callable")
        if self.budgeted and self.summarize is None:
            raise UsageError("a compaction policy with max_tokens or max_messages needs summarize")
        if self.token_counter is not None and not callable(self.token_counter):
            raise UsageError("token_counter must be callable")
        if self.on_failure is not None and not callable(self.on_failure):
            raise UsageError("on_failure must be callable")
        if self.budgeted and self.max_tokens is not None and self.token_counter is None:
            object.__setattr__(self, "_counter", default_token_counter())
        else:
            object.__setattr__(self, "_counter", self.token_counter or estimate_tokens)

    @property
    def budgeted(self) -> bool:
        """Whether the policy compacts (it has ``max_tokens`` or ``max_messages``)."""
        return self.max_tokens is not None or self.max_messages is not None

    def count(self, messages: Sequence[Message]) -> int:
        """The tokens of ``messages`` by the policy's counter."""
        counter: TokenCounter = self.__dict__["_counter"]
        return int(counter(messages))

    def over(self, tokens: int, messages: int) -> bool:
        """Whether a history of ``tokens`` tokens and ``messages`` messages is over budget."""
        return (self.max_tokens is not None and tokens > self.max_tokens) or (
            self.max_messages is not None and messages > self.max_messages
        )

    def counted(self, message: Message) -> Message:
        """``message`` as the budget counts it: elided as it will be once a newer turn begins."""
        over = self.elide_tool_results_over
        return message if over is None else elide_message(message, over)

    def report(self, failure: CompactionFailure) -> None:
        """Log ``failure`` (the session and the exception's type only) and hand it to
        :attr:`on_failure`."""
        _log.warning(
            "compaction of session %r failed at %s: %s; the history is unchanged",
            failure.session_id,
            failure.stage,
            type(failure.error).__name__,
        )
        callback = self.on_failure
        if callback is not None:
            try:
                callback(failure)
            except Exception as exc:
                _log.warning("on_failure of a compaction policy raised %s", type(exc).__name__)


@dataclasses.dataclass(frozen=True)
class PlannedCompaction:
    """What a policy check planned (the session's, passed back to commit the marker): the
    messages to summarize, the seq the plan saw, and what the budget counted."""

    messages: list[Message]
    """The messages the summary replaces (the current summary first, when there is one)."""
    planned_at: int
    """The session's latest seq when the cut was planned."""
    keep_turns: int
    """The policy's ``keep_turns``."""
    tokens: int
    """The history's tokens when planned (the marker's ``tokens_before``)."""


def summary_of(result: object) -> tuple[Message, list[Usage]]:
    """The summary and usages of what a summarizer returned (:data:`SummaryResult`); a
    TypeError for anything else (a message without content, or with tool calls or results,
    too: the summary opens the history, where nothing could answer a call)."""
    usage: object = None
    if isinstance(result, tuple):
        if len(result) != 2:
            raise TypeError(f"a summarizer returned a tuple of {len(result)}, not (Message, Usage)")
        result, usage = result
    if not isinstance(result, Message):
        raise TypeError(f"a summarizer returned {type(result).__name__}, not a Message")
    if not result.parts:
        raise TypeError("a summarizer returned a message with no content")
    if result.role == "tool" or result.tool_calls or result.tool_results:
        raise TypeError("a summarizer returned a message with tool calls or results")
    if usage is None:
        usages: list[Usage] = []
    elif isinstance(usage, Usage):
        usages = [usage]
    elif isinstance(usage, (list, tuple)) and all(isinstance(u, Usage) for u in usage):
        usages = list(usage)
    else:
        raise TypeError(f"a summarizer returned {type(usage).__name__} as its usage, not Usage")
    return result, usages


def usage_events(usages: Sequence[Usage], agent: str) -> list[Event]:
    """The ``usage`` events of a summarizer's usages, attributed to ``agent`` (the turn's) and
    marked ``meta["compaction"] = "summarize"``."""
    return [Event.new(USAGE, u, agent=agent, meta={"compaction": "summarize"}) for u in usages]


def check_commit(
    plan: PlannedCompaction, marker: Compaction, committed: Sequence[IndexedMessage]
) -> bool:
    """Whether ``marker``, planned again from ``committed`` (the history now), replaces exactly
    the messages the summary was made of."""
    cut = len(committed) - len(marker.retained_tail)
    if cut != len(plan.messages):
        return False
    return all(e.message == m for e, m in zip(committed[:cut], plan.messages, strict=True))
