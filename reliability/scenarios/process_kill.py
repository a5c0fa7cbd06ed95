"""Process kill at random points: a child process records realistic turns (the recorder's
turns and steps, tool calls and results, usage, compaction and pruning, subagents forked,
merged or discarded, batched steps, turns that fail with an exception, on some trials an
encrypted store or a store the child creates itself) and is SIGKILLed after a random delay.

The child reports the key of every event whose append had returned (see
:func:`reliability.common.event_key`; the recorder's markers are counted by the turn id it
stamps) through a pipe. The harness then reopens the store, runs ``store.recover()`` and checks
that every acknowledged event is stored exactly once, seqs are gap-free, no turn is left
incomplete, every session opens and each agent's history is provider-valid, and that a second
``recover()`` through a fresh store object writes nothing.

Children are forked from the harness process, which has agentsession imported but no store
open at the time of the fork, so a trial costs a fork, not an interpreter start.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import random
import time
from collections.abc import Callable
from functools import partial

from reliability.common import (
    Config,
    Proc,
    Result,
    check_history,
    check_seqs,
    count_exception,
    count_problems,
    note,
    pump,
    spawn,
    stored_keys,
    tally,
    violation,
)

import agentsession as ags
from agentsession.recovery import scan_all_incomplete

NAME = "process_kill"
TITLE = "SIGKILL at random points of realistic turns, then recover() and check every ack"

AGENTS = ("coder", "helper")
HISTORY_AGENTS: tuple[str | None, ...] = (None, "coder", "helper", "researcher")
TOOLS = ("read", "grep", "run_tests", "edit")
KEY = bytes(range(32))
PASSPHRASE = "reliability harness passphrase"
CHILD_LIFETIME = 30.0
"""A child that was somehow not killed stops by itself after this many seconds."""


@dataclasses.dataclass
class StoreSpec:
    """One store the trials write to."""

    label: str
    url: str
    options: dict[str, object]
    fresh: bool = False
    """Created by the trial's child itself (killed maybe while creating it)."""


Report = Callable[[str], None]


# -- the child's workload ------------------------------------------------------------------------


class _Workload:
    """What one child records until it is killed."""

    def __init__(self, store: ags.BaseStore, trial: int, rng: random.Random, report: Report):
        self.store = store
        self.trial = trial
        self.rng = rng
        self.report = report
        self.counter = itertools.count(1)
        self.usage = itertools.count(1)

    def key(self) -> str:
        return f"K:t{self.trial}-{next(self.counter)}"

    def ack(self, session_id: str, key: str) -> None:
        self.report(f"A {session_id} {key}")

    def turn(self, session: ags.BaseSession, agent: str) -> None:
        """One turn under the session's turn lock: a user message, 1-3 steps of assistant
        messages with tool calls and results and usage, a final answer; sometimes batched,
        sometimes failing with an exception the recorder closes the turn on."""
        rng, sid = self.rng, session.id
        batch = rng.random() < 0.3
        fail = rng.random() < 0.05
        with self.store.lock(sid, timeout=30):
            recorder = session.turn(agent=agent, user="U1", batch_steps=batch)
            turn_id = recorder.turn_id
            try:
                with recorder as turn:
                    self.ack(sid, f"ts:{turn_id}")
                    k = self.key()
                    turn.user(f"{k} please fix test {rng.randint(1, 99)}")
                    self.ack(sid, k)
                    for _ in range(rng.randint(1, 3)):
                        self._step(turn, sid, turn_id, batch, fail)
                    k = self.key()
                    turn.assistant(f"{k} done")
                    self.ack(sid, k)
            except _Planned:
                pass
            self.ack(sid, f"te:{turn_id}")

    def _step(self, turn: ags.Turn, sid: str, turn_id: str, batch: bool, fail: bool) -> None:
        rng = self.rng
        pending: list[str] = []

        def done(key: str) -> None:
            if batch:
                pending.append(key)
            else:
                self.ack(sid, key)

        step = turn.step()
        try:
            with step:
                done(f"ss:{turn_id}:{step.number}")
                calls = [
                    ags.ToolCall(
                        id=f"c{self.trial}-{next(self.counter)}",
                        name=rng.choice(TOOLS),
                        arguments={"path": f"src/m{rng.randint(1, 9)}.py"},
                    )
                    for _ in range(rng.choice((0, 1, 1, 2, 3)))
                ]
                k = self.key()
                step.assistant(f"{k} looking", tool_calls=calls)
                done(k)
                for call in calls:
                    if rng.random() < 0.3:
                        step.tool_call(call)
                        done(f"call:{call.id}")
                    if fail and rng.random() < 0.5:
                        raise _Planned("the tool crashed")
                    size = rng.choice((10, 10, 300, 5000, 70000))
                    k = self.key()
                    step.tool_result(call.id, call.name, f"{k} output " + "x" * size)
                    done(k)
                u = next(self.usage)
                step.usage(input_tokens=u, output_tokens=7)
                done(f"usage:{u}")
        except _Planned:
            # The step was closed (batched: written) on the way out, then the error went on.
            self._closed(sid, turn_id, step.number, pending)
            raise
        self._closed(sid, turn_id, step.number, pending)

    def _closed(self, sid: str, turn_id: str, number: int, pending: list[str]) -> None:
        for key in pending:
            self.ack(sid, key)
        self.ack(sid, f"se:{turn_id}:{number}")

    def subagent(self, session: ags.BaseSession) -> None:
        """Fork a child session, record a turn in it, merge (a summary) or discard it."""
        rng = self.rng
        child = session.fork("researcher", inherit=rng.choice((0, 2, 4, 8)), task="look it up")
        self.report(f"S {child.id}")
        self.turn(child, "researcher")
        if rng.random() < 0.7:
            self.report("P merge")
            k = self.key()
            child.merge(f"{k} what the researcher found")
            self.ack(session.id, k)
        else:
            self.report("P discard")
            child.discard("not needed")


class _Planned(Exception):
    """An exception the workload raises inside a turn on purpose."""


def _child(spec: StoreSpec, sid: str, trial: int, seed: int, report: Report) -> None:
    rng = random.Random(seed)
    report("P open")
    store = ags.open_store(spec.url, **spec.options)
    work = _Workload(store, trial, rng, report)
    session = store.get(sid)
    report(f"S {sid}")
    deadline = time.monotonic() + CHILD_LIFETIME
    turns = 0
    while time.monotonic() < deadline:
        r = rng.random()
        if turns and r < 0.08:
            report("P compact")
            session.compact("summary of the earlier turns", keep_turns=rng.choice((0, 1, 2)))
        elif turns and r < 0.13:
            report("P prune")
            session.prune(rng.randint(2, 8))
        elif turns and r < 0.22:
            report("P fork")
            work.subagent(session)
        else:
            report("P turn")
            work.turn(session, rng.choice(AGENTS))
            turns += 1
    store.close()


# -- the harness side ----------------------------------------------------------------------------


def _kill_plan(rng: random.Random) -> tuple[bool, float]:
    """When to kill: ``(from_start, delay)``. Mostly a delay after the child reported its
    session open (within its first turns, sometimes after many); on some trials a delay from
    the fork itself, so that opening (or creating) the store is cut too."""
    r = rng.random()
    if r < 0.12:
        return True, rng.uniform(0.0, 0.12)
    if r < 0.8:
        return False, rng.uniform(0.0, 0.06)
    return False, rng.uniform(0.06, 0.3)


def _kill_at_random(proc: Proc, from_start: bool, delay: float) -> None:
    """Wait for the child to open its session (unless ``from_start``), then ``delay`` seconds,
    reading its reports; then SIGKILL it, reap it and read the rest."""
    if not from_start:
        opened = lambda: any(line.startswith("S ") for line in proc.lines)  # noqa: E731
        pump([proc], time.monotonic() + 20, until=opened)
    proc.finish(delay)


def _parse(proc: Proc) -> tuple[list[str], dict[str, list[str]], str]:
    """Sessions the child used, its acknowledged keys per session, its last phase."""
    sessions: list[str] = []
    acked: dict[str, list[str]] = collections.defaultdict(list)
    phase = "start"
    for line in proc.lines:
        if line.startswith("A "):
            _, sid, key = line.split(" ", 2)
            acked[sid].append(key)
        elif line.startswith("S "):
            sessions.append(line[2:])
        elif line.startswith("P "):
            phase = line[2:]
    return sessions, acked, phase


def _verify(
    spec: StoreSpec,
    sid: str,
    sessions: list[str],
    acked: dict[str, list[str]],
    result: Result,
) -> None:
    """Recover, then check every session the trial touched."""
    try:
        store = ags.open_store(spec.url, **spec.options)
    except ags.StoreUnavailable as exc:
        if not any(acked.values()):
            return  # killed while creating a store, before anything was acknowledged
        result.unopenable += 1
        note(result, f"{spec.label} {sid}: store does not open: {exc}")
        return
    except Exception as exc:
        result.unopenable += 1
        count_exception(result, exc, f"{spec.label} open")
        return
    latest: dict[str, int] = {}
    try:
        ids = list(dict.fromkeys([sid, *sessions]))
        ids += [i.id for i in store.list(prefix=f"{sid}:child:") if i.id not in ids]
        for report in store.recover(ids, lock_timeout=10):
            if report.status == "damaged":
                result.unopenable += 1
                note(result, f"{spec.label} {report.session_id}: recover: damaged: {report.error}")
            elif report.status not in ("clean", "repaired"):
                violation(result, f"{spec.label} {report.session_id}: recover: {report.status}")
        for session_id in ids:
            keys = acked.get(session_id, [])
            try:
                if not store.exists(session_id):
                    tally(result, keys, [])
                    if keys:
                        note(result, f"{spec.label} {session_id}: gone, {len(keys)} acked")
                    continue
                session = store.open(session_id)
                events = session.read()
            except ags.SessionError as exc:
                result.unopenable += 1
                note(result, f"{spec.label} {session_id}: {type(exc).__name__}: {exc}")
                continue
            where = f"{spec.label} {session_id}"
            check_seqs(events, result, where)
            before = result.lost + result.duplicated
            tally(result, keys, stored_keys(events, result, where))
            if result.lost + result.duplicated > before:
                note(result, f"{where}: lost or duplicated events (of {len(keys)} acked)")
            left = scan_all_incomplete(events)
            if left:
                violation(result, f"{where}: still incomplete after recover(): {left[0]}")
            try:
                check_history(session, result, HISTORY_AGENTS)
            except ags.SessionError as exc:
                result.unopenable += 1
                note(result, f"{where}: messages(): {type(exc).__name__}: {exc}")
            latest[session_id] = session.latest_seq
            if latest[session_id] != len(events):
                violation(result, f"{where}: latest_seq {latest[session_id]} != {len(events)}")
    except Exception as exc:
        count_exception(result, exc, f"{spec.label} verify {sid}")
    finally:
        store.close()
    # A second recover(), through a fresh store object, writes nothing.
    try:
        with ags.open_store(spec.url, **spec.options) as again:
            for report in again.recover(list(latest), lock_timeout=10):
                if report.status != "clean":
                    violation(
                        result,
                        f"{spec.label} {report.session_id}: second recover(): {report.status}",
                    )
            for session_id, seq in latest.items():
                now = again.get(session_id).latest_seq
                if now != seq:
                    where = f"{spec.label} {session_id}"
                    violation(result, f"{where}: second recover() moved seq {seq} -> {now}")
    except Exception as exc:
        count_exception(result, exc, f"{spec.label} second recover {sid}")


def _specs(config: Config, backend: str, fresh: int) -> tuple[list[StoreSpec], StoreSpec]:
    """The shared stores (plain, encrypted by key, by passphrase) and a fresh one."""
    specs = []
    for label, extra in (
        ("plain", {}),
        ("key", {"key": KEY}),
        ("passphrase", {"passphrase": PASSPHRASE}),
    ):
        url, options = config.store_url(backend, f"pk-{label}")
        specs.append(StoreSpec(label, url, {**options, **extra}))
    url, options = config.store_url(backend, f"pk-fresh{fresh}")
    return specs, StoreSpec("fresh", url, options, fresh=True)


def _run_backend(config: Config, backend: str, rng: random.Random) -> Result:
    result = Result(scenario=NAME, backend=backend, expected_errors=False)
    trials = config.trials(70, 1000)
    shared, _ = _specs(config, backend, 0)
    urls = [spec.url for spec in shared]
    phases: collections.Counter[str] = collections.Counter()
    kinds: collections.Counter[str] = collections.Counter()
    try:
        for spec in shared:  # created here, closed before any fork
            ags.open_store(spec.url, **spec.options).close()
        for trial in range(trials):
            r = rng.random()
            if r < 0.05:
                _, spec = _specs(config, backend, trial)
                urls.append(spec.url)
            elif r < 0.15:
                spec = shared[1]
            elif r < 0.2:
                spec = shared[2]
            else:
                spec = shared[0]
            kinds[spec.label] += 1
            sid = f"pk:{trial:05d}"
            seed = rng.randrange(2**32)
            from_start, delay = _kill_plan(rng)
            proc = spawn(partial(_child, spec, sid, trial, seed))
            _kill_at_random(proc, from_start, delay)
            result.trials += 1
            if proc.killed_at is None:
                note(result, f"trial {trial}: the child exited by itself ({proc.exit_code})")
            count_problems(result, proc, f"trial {trial} child")
            sessions, acked, phase = _parse(proc)
            phases[phase] += 1
            _verify(spec, sid, sessions, acked, result)
    finally:
        for url in urls:
            try:
                config.drop_store(backend, url)
            except Exception as exc:
                note(result, f"could not drop a schema: {exc}")
    shown = ", ".join(f"{k} {n}" for k, n in phases.most_common())
    stores = ", ".join(f"{k} {n}" for k, n in kinds.items())
    note(result, f"killed while: {shown}; stores: {stores}")
    return result


def run(config: Config) -> list[Result]:
    """One row per backend."""
    results = []
    for backend in config.backends:
        results.append(_run_backend(config, backend, config.rng(f"{NAME}:{backend}")))
    return results
