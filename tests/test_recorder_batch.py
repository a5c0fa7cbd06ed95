"""Batched steps: ``session.turn(batch_steps=True)`` writes each step with one ``append_many``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import agentsession as ags
from agentsession.context import with_turn_id
from agentsession.events import TurnEnd
from agentsession.validation import provider_errors

from .pipes import readline_within

BACKENDS = ["memory", "jsonl", "sqlite"]


def open_backend(kind: str, tmp_path: Path) -> ags.BaseStore:
    if kind == "memory":
        return ags.open_store("memory:")
    if kind == "jsonl":
        return ags.open_store(tmp_path / "jsonl")
    return ags.open_store(f"sqlite:///{tmp_path / 'store.db'}")


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ags.BaseStore]:
    store = open_backend(request.param, tmp_path)
    try:
        yield store
    finally:
        store.close()


class Spy:
    """Counts the session's ``append`` and ``append_many`` calls (the batch sizes), and the
    recorder's ``_append_prepared`` (``append_many`` of events it checked already)."""

    def __init__(self, session: ags.BaseSession, monkeypatch: pytest.MonkeyPatch) -> None:
        self.singles = 0
        self.batches: list[list[str]] = []
        append, append_many = session.append, session.append_many

        def spy_append(event: ags.Event) -> int:
            self.singles += 1
            return append(event)

        def spy_append_many(events: Sequence[ags.Event], **kwargs: Any) -> list[int]:
            self.batches.append([e.type for e in events])
            return append_many(events, **kwargs)

        def spy_append_prepared(events: list[ags.Event]) -> list[int]:
            self.batches.append([e.type for e in events])
            return append_prepared(events)

        append_prepared = session._append_prepared
        monkeypatch.setattr(session, "append", spy_append)
        monkeypatch.setattr(session, "append_many", spy_append_many)
        monkeypatch.setattr(session, "_append_prepared", spy_append_prepared)


def kinds(session: ags.BaseSession) -> list[str]:
    return [e.type for e in session.read()]


def record_script(session: ags.BaseSession, *, batch_steps: bool) -> None:
    """The same turn, recorded with or without batching."""
    read = ags.ToolCall("c1", "read", {"path": "a.py"})
    write = ags.ToolCall("c2", "write", {"path": "a.py", "content": "fixed"})
    with session.turn(agent="coder", user="U1", batch_steps=batch_steps) as turn:
        turn.user("Fix the failing test")
        with turn.step() as step:
            step.assistant("Looking.", tool_calls=[read])
            step.tool_call(read)
            step.tool_result("c1", "read", "def f(): return 1")
            step.usage(input_tokens=1200, output_tokens=80)
        with turn.step() as step:
            step.assistant(tool_calls=[write], thinking="edit it")
            turn.todos([ags.events.Todo("1", "fix", "done")])  # on the turn, inside the step
            step.tool_result(ags.ToolResult("c2", "write", "ok"))
        turn.assistant("Fixed.")


# -- what is written, and when ---------------------------------------------------------------


def test_a_batched_step_is_one_append_many_with_consecutive_seqs(
    store: ags.BaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = store.get("batched")
    spy = Spy(session, monkeypatch)
    call = ags.ToolCall("c1", "read")
    with session.turn(agent="coder", batch_steps=True) as turn:
        assert turn.start_seq == 1
        assert turn.user("go") == 2  # outside a step: appended at once
        with turn.step() as step:
            returned = [
                step.assistant("Looking.", tool_calls=[call]),
                step.tool_result("c1", "read", "text"),
                turn.usage(10, 2),  # a turn helper while the step is open is buffered too
            ]
            assert returned == [0, 0, 0]
            assert session.latest_seq == 2  # nothing of the step is stored yet
            assert step.seqs == []
        assert step.seqs == [3, 4, 5, 6, 7]
        assert turn.assistant("Done.") == 8
    assert spy.batches == [["step/start", "assistant/message", "tool/result", "usage", "step/end"]]
    assert spy.singles == 4  # turn/start, user, final assistant, turn/end
    events = session.read()
    assert [e.seq for e in events] == list(range(1, 10))
    assert [e.type for e in events if e.seq in step.seqs] == spy.batches[0]
    assert events[-1].payload() == TurnEnd(steps=1)
    # Each buffered event keeps the time it was recorded at, in recording order.
    times = [e.time for e in events]
    assert all(t is not None for t in times)
    assert times == sorted(times)  # type: ignore[type-var]


def test_the_jsonl_log_holds_each_step_as_one_batch(tmp_path: Path) -> None:
    store = ags.open_store(tmp_path)
    try:
        record_script(store.get("s"), batch_steps=True)
    finally:
        store.close()
    rows = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    more = [(row["type"], row.get("more", False)) for row in rows]
    assert more == [
        ("turn/start", False),
        ("user/message", False),
        ("step/start", True),
        ("assistant/message", True),
        ("tool/call", True),
        ("tool/result", True),
        ("usage", True),
        ("step/end", False),
        ("step/start", True),
        ("assistant/message", True),
        ("todo/update", True),
        ("tool/result", True),
        ("step/end", False),
        ("assistant/message", False),
        ("turn/end", False),
    ]


def test_batched_and_unbatched_recordings_store_the_same_turn(store: ags.BaseStore) -> None:
    batched, plain = store.get("batched"), store.get("plain")
    with with_turn_id("t1"):  # the same turn id in both (by default each turn gets a new one)
        record_script(batched, batch_steps=True)
        record_script(plain, batch_steps=False)
    assert batched.messages() == plain.messages()
    assert provider_errors(batched.messages()) == []

    def stored(session: ags.BaseSession) -> list[tuple[object, ...]]:
        return [(e.seq, e.type, e.agent, e.user, bytes(e.data), e.meta) for e in session.read()]

    assert stored(batched) == stored(plain)


def test_step_seqs_are_filled_without_batching_too(store: ags.BaseStore) -> None:
    session = store.get("plain")
    with session.turn() as turn:
        turn.user("hi")
        with turn.step() as step:
            assert step.assistant("x") == 4
            assert step.seqs == [3, 4]
        assert step.seqs == [3, 4, 5]


def test_the_default_appends_every_helper_at_once(
    store: ags.BaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = store.get("plain")
    spy = Spy(session, monkeypatch)
    record_script(session, batch_steps=False)
    assert spy.batches == []
    assert spy.singles == len(session.read()) == 15


# -- exceptions, validation and storage failures ---------------------------------------------


def test_an_exception_in_a_batched_step_answers_its_calls_in_the_same_batch(
    store: ags.BaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = store.get("failing")
    spy = Spy(session, monkeypatch)
    with (  # noqa: PT012 - the whole turn is what raises
        pytest.raises(TimeoutError, match="model took too long"),
        session.turn(agent="coder", batch_steps=True) as turn,
    ):
        turn.user("go")
        with turn.step() as step:
            step.assistant(tool_calls=[ags.ToolCall("c1", "slow"), ags.ToolCall("c2", "slow")])
            step.tool_result("c2", "slow", "done")
            raise TimeoutError("model took too long")
    assert spy.batches == [
        ["step/start", "assistant/message", "tool/result", "tool/result", "step/end"]
    ]
    events = session.read()
    assert events[-2].type == "assistant/message"  # the timeout annotation, before turn/end
    failed = events[-4].payload()
    assert failed.call_id == "c1"
    assert failed.is_error and "TimeoutError: model took too long" in failed.content
    end = events[-1].payload()
    assert end.steps == 1
    assert end.error is not None and end.error.type == "TimeoutError"
    assert provider_errors(session.messages()) == []
    assert ags.scan_incomplete(events) is None


def test_a_caught_exception_in_a_batched_step_keeps_the_turn_going(
    store: ags.BaseStore,
) -> None:
    session = store.get("caught")
    with session.turn(batch_steps=True) as turn:
        try:
            with turn.step() as step:
                step.assistant(tool_calls=[ags.ToolCall("c1", "flaky")])
                raise RuntimeError("tool crashed")
        except RuntimeError:
            pass
        with turn.step() as step:
            step.assistant("recovered")
    assert kinds(session) == [
        "turn/start",
        "step/start",
        "assistant/message",
        "tool/result",
        "step/end",
        "step/start",
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    assert session.read()[-1].payload() == TurnEnd(steps=2)


def test_the_turn_writes_a_step_it_finds_open(
    store: ags.BaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = store.get("open-step")
    spy = Spy(session, monkeypatch)
    with pytest.raises(KeyError), session.turn(batch_steps=True) as turn:  # noqa: PT012
        step = turn.step().__enter__()
        step.assistant(tool_calls=[ags.ToolCall("c1", "read")])
        raise KeyError("lost")
    assert spy.batches == [["step/start", "assistant/message", "tool/result", "step/end"]]
    assert kinds(session)[-1] == "turn/end"
    assert step.seqs == [2, 3, 4, 5]
    assert provider_errors(session.messages()) == []


@pytest.mark.parametrize("batch_steps", [True, False])
def test_a_bad_payload_fails_at_the_helper_call(store: ags.BaseStore, batch_steps: bool) -> None:
    session = store.get("bad")
    with session.turn(batch_steps=batch_steps) as turn, turn.step() as step:
        step.assistant("ok")
        with pytest.raises(ags.UsageError, match=r"usage event's payload is not valid"):
            step.usage("many", 0, 5)  # type: ignore[arg-type]
        with pytest.raises(ags.UsageError, match=r"todo/update event's payload"):
            turn.todos([ags.events.Todo("1", 5)])  # type: ignore[arg-type]
        step.usage(1, 1)
    assert kinds(session) == [
        "turn/start",
        "step/start",
        "assistant/message",
        "usage",
        "step/end",
        "turn/end",
    ]


def failing_append_many(
    session: ags.BaseSession, monkeypatch: pytest.MonkeyPatch
) -> Callable[[], int]:
    """Make ``append_many`` fail as a broken storage would; returns how often it was tried."""
    tries = 0

    def fail(events: Sequence[ags.Event], **kwargs: Any) -> list[int]:
        nonlocal tries
        tries += 1
        raise ags.StorageError("disk full")

    monkeypatch.setattr(session, "append_many", fail)
    monkeypatch.setattr(session, "_append_prepared", fail)  # what the recorder calls
    return lambda: tries


def test_a_storage_failure_when_the_step_closes_propagates(
    store: ags.BaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = store.get("broken")
    tries = failing_append_many(session, monkeypatch)
    with (  # noqa: PT012 - the step's close is what raises
        pytest.raises(ags.StorageError, match="disk full"),
        session.turn(agent="a", batch_steps=True) as turn,
    ):
        turn.user("go")
        with turn.step() as step:
            step.assistant(tool_calls=[ags.ToolCall("c1", "read")])
        pytest.fail("the step's failed write must propagate")  # pragma: no cover
    assert tries() == 1  # not retried
    # turn/end is still written; the lost step is neither counted nor are its calls answered.
    assert kinds(session) == ["turn/start", "user/message", "turn/end"]
    end = session.read()[-1].payload()
    assert end.steps == 0
    assert end.error is not None and end.error.type == "StorageError"
    assert ags.scan_incomplete(session.read()) is None
    assert provider_errors(session.messages()) == []


def test_a_storage_failure_is_chained_after_the_escaping_exception(
    store: ags.BaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = store.get("broken")
    with session.turn(batch_steps=True) as turn:
        turn.assistant("first", tool_calls=[ags.ToolCall("c0", "read")])  # stored at once
        failing_append_many(session, monkeypatch)
        with pytest.raises(ags.StorageError) as info, turn.step() as step:  # noqa: PT012
            step.tool_result("c0", "read", "answered in the lost step")
            raise ValueError("model error")
        assert isinstance(info.value.__context__, ValueError)
        assert str(info.value.__context__) == "model error"
        # The lost step's answer is not in the log: the call is still open.
        assert [call.id for call in turn._calls] == ["c0"]
        assert turn.steps == 0
    assert kinds(session) == ["turn/start", "assistant/message", "turn/end"]
    assert ags.scan_incomplete(session.read()) is None
    assert provider_errors(session.messages()) == []


# -- a real crash ----------------------------------------------------------------------------

_CRASHING_TURN = textwrap.dedent(
    """
    import sys, time
    import agentsession as ags
    store = ags.open_store(sys.argv[1])
    session = store.get("conv:crash")
    with session.turn(agent="crashy", batch_steps=True) as turn:
        turn.user("fix it")
        with turn.step() as step:
            step.assistant("reading", tool_calls=[ags.ToolCall("c1", "read", {})])
            step.tool_result("c1", "read", "contents")
        with turn.step() as step:
            step.assistant("writing", tool_calls=[ags.ToolCall("c2", "write", {})])
            step.tool_call(ags.ToolCall("c2", "write", {}))
            print("ready", flush=True)
            time.sleep(600)
    """
)



def test_a_process_killed_in_a_batched_step_leaves_whole_steps_and_recovers(
    tmp_path: Path,
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _CRASHING_TURN, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = readline_within(proc.stdout)
        if line.strip() != "ready":
            proc.kill()
            proc.wait()
            raise AssertionError(f"the turn did not start: {line!r} {proc.stderr.read()}")
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()

    store = ags.open_store(tmp_path)
    try:
        session = store.get("conv:crash")
        # The first step whole, nothing of the second (it was only in the child's memory).
        assert kinds(session) == [
            "turn/start",
            "user/message",
            "step/start",
            "assistant/message",
            "tool/result",
            "step/end",
        ]
        assert list(tmp_path.glob("*.quarantine")) == []
        incomplete = ags.scan_incomplete(session.read())
        assert incomplete is not None
        assert (incomplete.steps_ended, incomplete.open_step) == (1, -1)
        assert incomplete.orphan_calls == []  # c2 was never written

        (report,) = store.recover()
        assert report.status == "repaired"
        assert kinds(session)[6:] == ["turn/end", "session/recovery"]
        assert session.read()[6].payload() == TurnEnd(steps=1)
        assert ags.scan_incomplete(session.read()) is None
        assert provider_errors(session.messages()) == []
    finally:
        store.close()
