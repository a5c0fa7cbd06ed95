"""Properties of the store's history cap (``open_store(..., max_messages=cap)``) against a
brute-force model.

A random conversation is recorded twice, into a capped store and into one without a cap. The
cap applies whenever a user message is appended; the model says what it must leave: take the
uncapped history as it was right after the latest user message, try every turn boundary and
keep the longest suffix of whole turns that fits the cap (the latest turn alone when none fits),
then add everything recorded since. The model knows where turns start from how the conversation
was generated, not from the planner:

* a turn recorded with ``session.turn()`` (``turn/start`` ... ``turn/end``) is one turn;
* without turn markers every user message starts a turn (nothing in the log ties a second user
  message to the turn before it).

Marked turns may carry a second user message too: the markers record where their kept turns
begin and whether they were appended inside an open turn, so the model holds for them as well
(:func:`test_markers_record_where_kept_turns_begin_and_an_open_turn` pins two such cases).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import agentsession as ags
from agentsession.events import ASSISTANT_MESSAGE, TOOL_RESULT, USER_MESSAGE, Event
from agentsession.messages import Message, ToolCall, ToolResult
from agentsession.validation import provider_errors

# -- the conversation -------------------------------------------------------------------------


@dataclass(frozen=True)
class TurnShape:
    """One generated turn: a user message, then assistant messages (each with 0-2 tool calls,
    answered right after it), and optionally a second user message between or after them."""

    marked: bool
    """Recorded with ``session.turn()``/``turn.step()`` (True) or as bare events (False)."""
    calls: tuple[int, ...]
    """Tool calls of each assistant message, in order (0: a plain text reply)."""
    second_user_after: int | None = None
    """The second user message follows this many assistant messages (None: there is none)."""
    compact_after: int | None = None
    """After the turn, ``compact(keep_turns=compact_after)`` (None: no compaction)."""


@st.composite
def turn_shapes(
    draw: st.DrawFn, *, second_user_in_marked_turns: bool = False, compactions: bool = False
) -> TurnShape:
    """A random turn shape, marked or bare at random. A marked turn gets a second user message
    only with ``second_user_in_marked_turns``; a compaction follows only with ``compactions``."""
    marked = draw(st.booleans())
    calls = tuple(draw(st.lists(st.integers(0, 2), max_size=3)))
    second = None
    if second_user_in_marked_turns or not marked:
        second = draw(st.none() | st.integers(0, len(calls)))
    compact = draw(st.none() | st.integers(0, 3)) if compactions else None
    return TurnShape(marked, calls, second, compact)


conversations = st.lists(turn_shapes(second_user_in_marked_turns=True), min_size=1, max_size=8)
any_conversations = st.lists(turn_shapes(second_user_in_marked_turns=True), min_size=1, max_size=8)
compacted_conversations = st.lists(
    turn_shapes(second_user_in_marked_turns=True, compactions=True), min_size=1, max_size=8
)
caps = st.integers(1, 12)


# -- the model ----------------------------------------------------------------------------------


def longest_fitting_suffix(turn_starts: Sequence[int], total: int, room: int) -> int:
    """Brute force: where the longest suffix of whole turns of ``total`` messages that fits in
    ``room`` begins, given the index of every turn's first message. Every turn start is tried;
    the earliest whose suffix fits wins, else the latest turn is kept alone."""
    fitting = [start for start in turn_starts if total - start <= room]
    return min(fitting) if fitting else max(turn_starts)


@dataclass
class Model:
    """What was recorded, counted in derived messages, independently of derive and the planner.

    The capped history is ``[summary] + full[kept_from:]`` where ``full`` is the uncapped one.
    """

    cap: int
    total: int = 0
    """Messages in the uncapped history."""
    turn_starts: list[int] = field(default_factory=list)
    """Index of the first message of every turn, in the uncapped history."""
    kept_from: int = 0
    """Index in the uncapped history where the capped history's messages begin."""
    summary: Message | None = None
    """The summary the capped history starts with, once a compaction made one."""
    at_last_user: int = 0
    """``total`` right after the latest user message (the latest point the cap applied)."""

    def user(self, starts_turn: bool) -> None:
        """A user message was appended: the cap applies."""
        if starts_turn:
            self.turn_starts.append(self.total)
        self.total += 1
        self.at_last_user = self.total
        room = self.cap - (self.summary is not None)
        if self.total - self.kept_from > room:
            visible = [start for start in self.turn_starts if start >= self.kept_from]
            self.kept_from = longest_fitting_suffix(visible, self.total, room)

    def other(self, count: int = 1) -> None:
        """Assistant or tool messages were appended: the cap does not apply."""
        self.total += count

    def compact(self, keep_turns: int, summary: Message) -> bool:
        """``compact(summary, keep_turns=keep_turns)``; False when there is nothing to drop."""
        visible = [start for start in self.turn_starts if start >= self.kept_from]
        if keep_turns > len(visible):
            return False
        self.kept_from = visible[-keep_turns] if keep_turns else self.total
        self.summary = summary
        return True

    def history(self, full: Sequence[Message]) -> list[Message]:
        """The capped history the model expects, given the uncapped one."""
        return ([self.summary] if self.summary is not None else []) + list(full[self.kept_from :])


# -- recording ----------------------------------------------------------------------------------


class Recorder:
    """Records the same conversation into a capped and an uncapped session, keeps the model up
    to date and calls ``check(at_user_message)`` right after each user message (where the cap
    applies) and after each turn."""

    def __init__(
        self,
        capped: ags.BaseSession,
        uncapped: ags.BaseSession,
        model: Model,
        check: Callable[[bool], None],
    ) -> None:
        self.capped = capped
        self.sessions = [capped, uncapped]
        self.model = model
        self.check = check
        self.counter = 0

    def _text(self, kind: str) -> str:
        self.counter += 1
        return f"{kind} {self.counter}"

    def turn(self, shape: TurnShape) -> None:
        """Record one turn of ``shape``, then its compaction if it has one."""
        if shape.marked:
            with contextlib.ExitStack() as stack:
                turns = [stack.enter_context(s.turn(agent="")) for s in self.sessions]
                self._body(shape, turns)
        else:
            self._body(shape, None)
        self.check(False)
        if shape.compact_after is not None:
            summary = Message.user(self._text("summary"))
            seq = self.capped.compact(summary, keep_turns=shape.compact_after)
            assert (seq is not None) == self.model.compact(shape.compact_after, summary)
            self.check(False)

    def _body(self, shape: TurnShape, turns: list[ags.Turn] | None) -> None:
        self._user(turns, starts_turn=True)
        for position, calls in enumerate(shape.calls):
            if shape.second_user_after == position:
                self._user(turns, starts_turn=turns is None)
            self._assistant(turns, calls)
        if shape.second_user_after == len(shape.calls):
            self._user(turns, starts_turn=turns is None)

    def _user(self, turns: list[ags.Turn] | None, *, starts_turn: bool) -> None:
        text = self._text("user")
        if turns is None:
            for session in self.sessions:
                session.append(Event.new(USER_MESSAGE, Message.user(text)))
        else:
            for turn in turns:
                turn.user(text)
        self.model.user(starts_turn)
        self.check(True)

    def _assistant(self, turns: list[ags.Turn] | None, calls: int) -> None:
        text = self._text("assistant")
        tool_calls = [ToolCall(f"{text}/{i}", "read", {"i": i}) for i in range(calls)]
        results = [ToolResult(call.id, call.name, f"result of {call.id}") for call in tool_calls]
        if turns is None:
            for session in self.sessions:
                message = Message.assistant(text, tool_calls=tool_calls)
                session.append(Event.new(ASSISTANT_MESSAGE, message))
                for result in results:
                    session.append(Event.new(TOOL_RESULT, result))
        elif calls:
            for turn in turns:
                with turn.step() as step:
                    step.assistant(text, tool_calls=tool_calls)
                    for result in results:
                        step.tool_result(result)
        else:
            for turn in turns:
                turn.assistant(text)
        self.model.other(1 + len(results))


def texts(msgs: Sequence[Message]) -> list[str]:
    """Readable form of a history, for assertion messages."""
    return [m.text or ",".join(r.call_id for r in m.tool_results) for m in msgs]


def check_common(history: list[Message], model: Model, full: list[Message]) -> None:
    """What holds of every capped history, model or not."""
    assert provider_errors(history) == []
    assert history and history[0].role != "tool"
    body = history[1:] if model.summary is not None else history
    assert body == full[len(full) - len(body) :]  # a suffix of the uncapped history


def run_conversation(
    capped: ags.BaseSession, uncapped: ags.BaseSession, cap: int, shapes: Sequence[TurnShape]
) -> None:
    """Record ``shapes`` into both sessions, checking the capped history against the model at
    every point where the cap applies and after every turn (and compaction)."""
    model = Model(cap)

    def check(at_user_message: bool) -> None:
        full = uncapped.messages()
        assert len(full) == model.total  # the model counts what derive produces
        if model.summary is None:
            # The model's running state is the plain statement: the longest suffix of whole
            # turns of the uncapped history at the latest user message that fits the cap.
            assert model.kept_from == longest_fitting_suffix(
                model.turn_starts, model.at_last_user, cap
            )
        history = capped.messages()
        expected = model.history(full)
        assert texts(history) == texts(expected), (texts(full), model.turn_starts)
        assert history == expected
        check_common(history, model, full)
        if at_user_message and len(history) > cap:
            # Over the cap only when the latest turn alone exceeds it (with the summary).
            assert model.kept_from == model.turn_starts[-1]

    recorder = Recorder(capped, uncapped, model, check)
    for shape in shapes:
        recorder.turn(shape)


# -- the properties -----------------------------------------------------------------------------


@given(shapes=conversations, cap=caps)
@example(  # two-message turns under a cap of 4: [u2, a2, u3, a3] fits and stays
    shapes=[TurnShape(True, (0,))] * 5, cap=4
)
@example(  # bare user messages under a cap of 3: the last three stay
    shapes=[TurnShape(False, ())] * 6, cap=3
)
@example(  # a marked turn after bare ones: the bare user message is a turn of its own
    shapes=[TurnShape(True, ()), TurnShape(False, ())], cap=1
)
@example(  # a turn that alone exceeds the cap is kept whole
    shapes=[TurnShape(True, (0,)), TurnShape(True, (2, 0), 2)], cap=3
)
def test_capped_history_is_the_longest_suffix_of_whole_turns(
    shapes: list[TurnShape], cap: int
) -> None:
    store = ags.open_store("memory:", max_messages=cap)
    run_conversation(store.get("s"), ags.open_store("memory:").get("s"), cap, shapes)


@settings(max_examples=max(10, settings().max_examples // 10))
@given(shapes=conversations, cap=caps)
def test_capped_history_is_the_same_in_a_jsonl_store_and_after_reopening(
    shapes: list[TurnShape], cap: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        capped = ags.open_store(tmp, max_messages=cap).get("s")
        run_conversation(capped, ags.open_store("memory:").get("s"), cap, shapes)
        reopened = ags.open_store(tmp, max_messages=cap).get("s")
        assert reopened.messages() == capped.messages()
        capped.close()
        reopened.close()


@given(shapes=compacted_conversations, cap=caps)
@example(  # prune, compact inside what the prune kept, prune again with the summary counted
    shapes=[
        TurnShape(True, (0,)),
        TurnShape(False, (1,)),
        TurnShape(True, (0,), compact_after=1),
        TurnShape(False, (0,)),
        TurnShape(True, ()),
    ],
    cap=4,
)
def test_cap_and_compaction_together(shapes: list[TurnShape], cap: int) -> None:
    """Compactions between turns: keep_turns counts the turns a prune kept, and a prune keeps
    the summary (counted towards the cap) and the longest suffix of whole turns after it."""
    store = ags.open_store("memory:", max_messages=cap)
    run_conversation(store.get("s"), ags.open_store("memory:").get("s"), cap, shapes)


def run_invariants(
    capped: ags.BaseSession, uncapped: ags.BaseSession, cap: int, shapes: Sequence[TurnShape]
) -> None:
    """Record ``shapes`` into both sessions, checking what holds of every capped history: a
    provider-valid suffix of the uncapped one that starts at a user message and, where the cap
    applies, fits it unless it is the latest turn alone."""
    model = Model(cap)

    def check(at_user_message: bool) -> None:
        full = uncapped.messages()
        history = capped.messages()
        check_common(history, model, full)
        assert history[0].role == "user"
        if at_user_message and len(history) > cap:
            assert history == full[model.turn_starts[-1] :]

    recorder = Recorder(capped, uncapped, model, check)
    for shape in shapes:
        recorder.turn(shape)


@given(shapes=any_conversations, cap=caps)
def test_capped_history_is_a_valid_suffix_within_the_cap(shapes: list[TurnShape], cap: int) -> None:
    """Also with second user messages inside marked turns."""
    store = ags.open_store("memory:", max_messages=cap)
    run_invariants(store.get("s"), ags.open_store("memory:").get("s"), cap, shapes)


BARE = TurnShape(False, ())


@pytest.mark.parametrize(
    ("shapes", "cap"),
    [
        # The prune at u2 lands inside the marked turn [u2, u3]; at u3 nothing in the window
        # says that turn is still open, so u3 counts as a turn start and u2 is dropped.
        pytest.param([BARE, TurnShape(True, (), 0)], 1, id="window-opens-inside-a-turn"),
        # The prune at u2 retains the marked turn [u1, a1, u1', a1']; inside the retained tail
        # u1' counts as a turn start, so the prune at u3 keeps [u1', a1', u2, a2, u3].
        pytest.param(
            [BARE, TurnShape(True, (0, 0), 1), TurnShape(False, (0,)), BARE],
            5,
            id="second-user-message-in-a-retained-tail",
        ),
    ],
)
def test_markers_record_where_kept_turns_begin_and_an_open_turn(
    shapes: list[TurnShape], cap: int
) -> None:
    """A second user message inside a marked turn never becomes a cut point, neither inside a
    retained tail nor while the turn a prune landed in is still open."""
    store = ags.open_store("memory:", max_messages=cap)
    run_conversation(store.get("s"), ags.open_store("memory:").get("s"), cap, shapes)


def test_the_model_keeps_whole_turns() -> None:
    """The brute force itself, on cases worked out by hand."""
    assert longest_fitting_suffix([0, 2, 4], 6, 4) == 2  # [u2, a2, u3, a3] of 2-message turns
    assert longest_fitting_suffix([0, 2, 4], 6, 1) == 4  # nothing fits: the latest turn alone
    assert longest_fitting_suffix([0, 1, 2, 3], 4, 3) == 1  # bare user messages: the last 3
    assert longest_fitting_suffix([0], 9, 3) == 0  # one turn longer than the cap stays whole
    model = Model(cap=4)
    for _ in range(3):
        model.user(starts_turn=True)
        model.other()
    assert model.kept_from == 2
    model.user(starts_turn=False)  # a second user message inside the latest turn
    assert model.kept_from == 4
    assert model.compact(2, Message.user("s")) is False  # one turn is visible
    assert model.compact(1, Message.user("s")) is True
    assert model.kept_from == 4
    model.user(starts_turn=True)  # [s, u, a, u, u]: 5 > 4, the summary counts
    assert model.kept_from == 7
