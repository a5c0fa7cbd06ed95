"""Property tests of rewind, retry, edit, branch and compaction against a reference model.

For any sequence of turns (some with an answered tool call), rewinds to any seq or turn,
retries, edits, branches (the program goes on in the branch) and compactions, the derived
history equals the model's, passes ``provider_errors``, and ``read()`` holds every event
appended (a branch's: its origin's up to the point, then its own). The model knows the rules
by itself: the history right after each seq, a point inside a turn moved to before the turn,
the latest compaction a floor, a compaction summarising the live history and keeping its
latest turns, a branch sharing the history up to its point. It runs on memory, and (fewer
examples) on JSONL and SQLite, where a fresh store derives the same history from the log
alone."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentsession as ags
from agentsession import Message
from agentsession.errors import UsageError
from agentsession.messages import ToolCall, ToolResult
from agentsession.validation import provider_errors

Msg = tuple[str, str]


@dataclass(frozen=True)
class MTurn:
    start: int  # seq of its turn/start
    user_seq: int
    end: int  # seq of its turn/end
    messages: tuple[Msg, ...]


@dataclass(frozen=True)
class History:
    summary: str | None = None
    turns: tuple[MTurn, ...] = ()

    def messages(self) -> list[Msg]:
        out: list[Msg] = [("user", self.summary)] if self.summary is not None else []
        for turn in self.turns:
            out.extend(turn.messages)
        return out


@dataclass
class Model:
    id: str = "p"  # the session the program writes to now (a branch after a branch op)
    seq: int = 0
    floor: int = 0
    now: History = field(default_factory=History)
    at: dict[int, History] = field(default_factory=lambda: {0: History()})
    move: dict[int, int] = field(default_factory=dict)  # a seq inside a turn -> before it
    compactions: list[int] = field(default_factory=list)

    def add(self, history: History) -> int:
        self.seq += 1
        self.at[self.seq] = history
        self.now = history
        return self.seq

    def turn(self, user: str, tool: bool, answer: str) -> None:
        start = self.seq + 1
        before = self.now
        msgs: list[Msg] = [("user", user)]
        if tool:
            msgs += [("assistant", ""), ("tool", ""), ("assistant", answer)]
            count = 10  # turn/start, user, 2 x (step/start .. step/end) with 2 + 1 inside, turn/end
        else:
            msgs += [("assistant", answer)]
            count = 4
        for offset in range(count - 1):
            self.move[start + offset] = start - 1
            self.add(before)
        turn = MTurn(start, start + 1, start + count - 1, tuple(msgs))
        self.add(History(before.summary, (*before.turns, turn)))

    def branch(self, at_seq: int) -> None:
        """Go on in a branch made at ``at_seq``: the history up to the point is shared, the
        marker follows it."""
        point = self.move.get(at_seq, at_seq)
        self.seq = point
        self.at = {k: v for k, v in self.at.items() if k <= point}
        self.move = {k: v for k, v in self.move.items() if k <= point}
        self.compactions = [c for c in self.compactions if c <= point]
        self.floor = max(self.compactions, default=0)
        self.add(self.at[point])

    def target(self, to_seq: int) -> int | None:
        """Where a rewind to ``to_seq`` goes (None: refused by the floor)."""
        point = self.move.get(to_seq, to_seq)
        return None if point < self.floor else point


def record_turn(session: ags.BaseSession | ags.Turn, user: str, tool: bool, answer: str,
                turn: ags.Turn | None = None) -> None:
    """Record a turn's messages (the user's unless empty: retry and edit record it)."""
    assert turn is not None
    if user:
        turn.user(user)
    if tool:
        with turn.step() as step:
            step.assistant(Message.assistant("", tool_calls=[ToolCall(id="c", name="f")]))
            step.tool_result(ToolResult(call_id="c", name="f", content="r"))
        with turn.step() as step:
            step.assistant(answer)
    else:
        turn.assistant(answer)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("turn"), st.booleans(), st.just(0.0)),
        st.tuples(st.just("rewind_seq"), st.booleans(), st.floats(0, 1)),
        st.tuples(st.just("rewind_turn"), st.booleans(), st.floats(0, 1)),
        st.tuples(st.just("retry"), st.booleans(), st.just(0.0)),
        st.tuples(st.just("edit"), st.booleans(), st.floats(0, 1)),
        st.tuples(st.just("compact"), st.booleans(), st.just(0.0)),
        st.tuples(st.just("branch"), st.booleans(), st.floats(0, 1)),
    ),
    max_size=14,
)


def run(store: ags.BaseStore, program: list[tuple[str, bool, float]]) -> Model:
    session = store.get("p")
    model = Model()
    counter = 0
    for op, flag, where in program:
        counter += 1
        text = f"{op}{counter}"
        if op == "turn":
            with session.turn() as turn:
                record_turn(session, f"q{counter}", flag, f"a{counter}", turn)
            model.turn(f"q{counter}", flag, f"a{counter}")
        elif op == "rewind_seq":
            to_seq = round(where * model.seq)
            point = model.target(to_seq) if model.seq else None
            if point is None:
                with pytest.raises(UsageError):
                    session.rewind(to_seq=to_seq)
                continue
            session.rewind(to_seq=to_seq)
            model.add(model.at[point])
        elif op == "rewind_turn":
            if not model.now.turns:
                continue
            turn_ = model.now.turns[int(where * (len(model.now.turns) - 1))]
            point = model.target(turn_.end)
            if point is None:
                with pytest.raises(UsageError):
                    session.rewind(to_turn=turn_.user_seq)
                continue
            session.rewind(to_turn=turn_.user_seq)
            model.add(model.at[point])
        elif op in ("retry", "edit"):
            if not model.now.turns:
                continue
            if op == "retry":
                turn_ = model.now.turns[-1]
                user = turn_.messages[0][1]
                opened = session.retry()
            else:
                turn_ = model.now.turns[int(where * (len(model.now.turns) - 1))]
                user = f"edited{counter}"
                opened = session.edit(turn_.user_seq, user)
            point = model.target(turn_.start - 1)
            if point is None:
                with pytest.raises(UsageError), opened:
                    pass
                continue
            with opened as turn:
                record_turn(session, "", flag, text, turn)
            model.add(model.at[point])  # the marker
            model.turn(user, flag, text)
        elif op == "compact":
            kept = 1 + int(flag)
            history = model.now
            if len(history.turns) <= kept:
                continue  # nothing to summarise: compaction's own rules, not rewind's
            marker = session.compact(f"S{counter}", keep_turns=kept)
            seq = model.add(History(f"S{counter}", history.turns[-kept:]))
            assert marker == seq
            model.floor = seq
            model.compactions.append(seq)
        elif op == "branch":
            at_seq = round(where * model.seq)
            if not model.seq:
                continue
            session = session.branch(at_seq=at_seq, id=f"p{counter}")
            model.branch(at_seq)
            model.id = session.id
        assert session.latest_seq == model.seq
        check(session, model)
    return model


def check(session: ags.BaseSession, model: Model) -> None:
    got = [(m.role, m.text) for m in session.messages()]
    assert got == model.now.messages()
    assert provider_errors(session.messages()) == []
    assert [e.seq for e in session.read()] == list(range(1, model.seq + 1))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_rewinds_follow_the_model_in_memory(program: list[tuple[str, bool, float]]) -> None:
    with ags.open_store("memory:") as store:
        run(store, program)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(program=ops)
def test_rewinds_follow_the_model_on_disk(
    backend: str, tmp_path_factory: pytest.TempPathFactory, program: list[tuple[str, bool, float]]
) -> None:
    where: Path = tmp_path_factory.mktemp(backend)
    url = str(where / "s") if backend == "jsonl" else f"sqlite:///{where / 's.db'}"
    with ags.open_store(url) as store:
        model = run(store, program)
    with ags.open_store(url) as store:  # derived from the log alone
        if model.seq:
            check(store.get(model.id), model)
