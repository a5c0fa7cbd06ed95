"""Property-based tests of crash recovery over random multi-agent logs.

Each generated log interleaves the turns of up to three agents (one of them may be the
unattributed agent ``""``, whose events every agent sees). A turn is ``turn/start``, a user
message, steps (``step/start``, an assistant message with tool calls, results, ``step/end``),
perhaps a closing assistant text, and ``turn/end``. Call ids come from a three-letter alphabet,
so they repeat across steps, turns and agents (never within one message, as with providers: a
result names only its call id, so two calls of one message with the same id could not be told
apart); every call carries a unique serial number in its arguments so the test can tell calls
apart.

Crashes: an agent's last turn may stop at a random point (its process died), and such a turn
may also have left results out in any of its steps; independently, the whole log may be cut
at a random point (the machine died), leaving every agent's turn in progress open.

What the generator leaves out, and why:

* **A closed turn with an unanswered call.** Repair answers only the calls of incomplete
  turns; a call a finished turn left unanswered keeps derive's stand-in for ever, and because
  late results pair with the earliest unanswered call of their id, it could take a repaired
  turn's interrupted result. So a turn that ends answers all its calls.
* **A crashed agent starting another turn.** Its new ``turn/start`` supersedes the crashed
  turn, which is then never repaired (see ``scan_all_incomplete``), with the same effect on
  its unanswered calls. A runner repairs before each turn, so this does not arise in use.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

import agentsession as ags
from agentsession.derive import Deriver
from agentsession.events import (
    ASSISTANT_MESSAGE,
    STEP_END,
    STEP_START,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
    Event,
    StepEnd,
    StepStart,
    TurnEnd,
    TurnStart,
)
from agentsession.messages import Message, ToolCall, ToolResult
from agentsession.recovery import (
    repair_all_incomplete,
    repair_incomplete,
    scan_all_incomplete,
)
from agentsession.validation import provider_errors

EXAMPLES = settings(max_examples=300, deadline=None)

AGENTS = ["", "coder", "reviewer"]
CALL_IDS = ["x", "y", "z"]


@dataclass
class Written:
    """One generated event and what the oracle needs to know about it."""

    event: Event
    calls: list[int] = field(default_factory=list)
    """Serials of the calls an assistant message makes."""
    answers: int = -1
    """Serial of the call a tool result answers."""


@dataclass
class Log:
    events: list[Written]
    agents: list[str]


@st.composite
def turn_events(draw: st.DrawFn, agent: str, serials: list[int], crashed: bool) -> list[Written]:
    out = [
        Written(Event.new(TURN_START, TurnStart(), agent=agent)),
        Written(Event.new(USER_MESSAGE, Message.user("do it"), agent=agent)),
    ]
    steps = draw(st.integers(0, 3) | st.integers(1, 3))
    for step in range(steps):
        out.append(Written(Event.new(STEP_START, StepStart(step=step), agent=agent)))
        ids = draw(st.lists(st.sampled_from(CALL_IDS), min_size=1, max_size=3, unique=True))
        calls = []
        for call_id in ids:
            serials[0] += 1
            calls.append((serials[0], ToolCall(call_id, "tool", {"n": serials[0]})))
        msg = Message.assistant("step", tool_calls=[c for _, c in calls])
        out.append(Written(Event.new(ASSISTANT_MESSAGE, msg, agent=agent), [n for n, _ in calls]))
        answered = draw(st.permutations(calls))
        if crashed:  # a dying runtime may have left some results out
            answered = answered[: draw(st.integers(0, len(answered)))]
        for serial, call in answered:
            result = ToolResult(call.id, call.name, f"result {serial}")
            out.append(Written(Event.new(TOOL_RESULT, result, agent=agent), answers=serial))
        out.append(Written(Event.new(STEP_END, StepEnd(step=step), agent=agent)))
    if draw(st.booleans()):
        out.append(Written(Event.new(ASSISTANT_MESSAGE, Message.assistant("done"), agent=agent)))
    out.append(Written(Event.new(TURN_END, TurnEnd(steps=steps), agent=agent)))
    if crashed:
        # Anywhere before turn/end, often just after a model call (while its tools run).
        calling = [i + 1 for i, w in enumerate(out) if w.calls]
        uniform = st.integers(1, len(out) - 1)
        out = out[: draw(st.sampled_from(calling) | uniform if calling else uniform)]
    return out


@st.composite
def logs(draw: st.DrawFn) -> Log:
    agents = draw(st.lists(st.sampled_from(AGENTS), min_size=1, max_size=3, unique=True))
    serials = [0]
    streams: list[list[Written]] = []
    for agent in agents:
        turns = draw(st.integers(1, 3))
        crash_last = draw(st.sampled_from([False, True, True]))
        stream: list[Written] = []
        for n in range(turns):
            stream += draw(turn_events(agent, serials, crashed=crash_last and n == turns - 1))
        streams.append(stream)
    order = draw(st.permutations([i for i, s in enumerate(streams) for _ in s]))
    positions = [0] * len(streams)
    merged: list[Written] = []
    for i in order:
        merged.append(streams[i][positions[i]])
        positions[i] += 1
    if draw(st.booleans()):
        merged = merged[: draw(st.integers(0, len(merged)))]
    return Log(merged, agents)


def write(log: Log) -> ags.BaseSession:
    session = ags.open_store("memory:").get("prop")
    if log.events:
        session.append_many([w.event for w in log.events])
    return session


def expected_open_turns(log: Log) -> dict[str, int]:
    """Agent -> seq of its open turn's start: an agent whose last event is not ``turn/end``."""
    last: dict[str, Event] = {}
    start: dict[str, int] = {}
    for seq, written in enumerate(log.events, 1):
        event = written.event
        last[event.agent] = event
        if event.type == TURN_START:
            start[event.agent] = seq
    return {agent: start[agent] for agent, event in last.items() if event.type != TURN_END}


def expected_orphans(log: Log) -> dict[str, set[int]]:
    """Agent -> serials of its calls whose result was never written."""
    made: dict[str, set[int]] = defaultdict(set)
    answered: set[int] = set()
    for written in log.events:
        made[written.event.agent].update(written.calls)
        if written.answers >= 0:
            answered.add(written.answers)
    return {agent: calls - answered for agent, calls in made.items() if calls - answered}


def serial(call: ToolCall) -> int:
    n = call.arguments["n"]
    assert isinstance(n, int)
    return n


def views(log: Log) -> list[str | None]:
    return [None, *(agent for agent in log.agents if agent)]


@EXAMPLES
@given(logs())
def test_scan_finds_each_agents_open_turn_and_exactly_its_unanswered_calls(log: Log) -> None:
    turns = scan_all_incomplete(write(log).read())
    assert {t.agent: t.turn_start_seq for t in turns} == expected_open_turns(log)
    assert [t.turn_start_seq for t in turns] == sorted(t.turn_start_seq for t in turns)
    orphans = {t.agent: {serial(c) for c in t.orphan_calls} for t in turns if t.orphan_calls}
    assert orphans == expected_orphans(log)
    for turn in turns:
        assert len({serial(c) for c in turn.orphan_calls}) == len(turn.orphan_calls)


@EXAMPLES
@given(logs())
def test_after_repair_every_history_is_valid_and_needs_no_stand_ins(log: Log) -> None:
    session = write(log)
    found = scan_all_incomplete(session.read())
    reports = repair_all_incomplete(session)
    assert [(r.agent, r.turn_start_seq) for r in reports] == [
        (t.agent, t.turn_start_seq) for t in found
    ]
    events = session.read()
    assert scan_all_incomplete(events) == []
    stored = [e for e in events if e.type == TOOL_RESULT]
    stored_interrupted = [e for e in stored if e.payload().audit == {"decision": "interrupted"}]
    assert len(stored_interrupted) == sum(r.orphan_results for r in reports)
    assert len(stored_interrupted) == sum(len(s) for s in expected_orphans(log).values())
    for view in views(log):
        msgs = session.messages(agent=view)
        assert provider_errors(msgs) == []
        # No synthetic stand-in: every call is answered by a stored result ...
        assert Deriver.from_events(events, view).unanswered_calls() == []
        # ... and every stored result answers a call (repair wrote none too many).
        visible = [e for e in stored if view is None or not e.agent or e.agent == view]
        shown = [r for m in msgs for r in m.tool_results]
        assert Counter(r.call_id for r in shown) == Counter(e.payload().call_id for e in visible)
        assert len(shown) == len(visible)


@EXAMPLES
@given(logs())
def test_repair_counts_every_started_step_and_a_second_pass_writes_nothing(log: Log) -> None:
    session = write(log)
    found = scan_all_incomplete(session.read())
    reports = repair_all_incomplete(session)
    for turn, report in zip(found, reports, strict=True):
        assert report.steps == turn.steps_started
        assert report.recovery_seq > 0
    latest = session.latest_seq
    assert repair_all_incomplete(session) == []
    for turn in found:
        assert not repair_incomplete(session, turn).repaired
    assert session.latest_seq == latest
