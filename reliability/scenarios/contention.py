"""Contention: many processes on one session, and many processes on one turn lock.

**Appends** (row ``contention``): N writer processes append M times each to one session
(single messages, atomic call-and-result pairs, application events), while a recorder process
records whole turns under the session's turn lock, two readers read and derive the history,
a compactor compacts and prunes (under the turn lock, as the docs advise) and a recoverer runs
``store.recover()`` over and over. Afterwards: every acknowledged event is stored exactly once,
seqs are gap-free from 1, each agent's history is provider-valid, no reader saw a gap or an
invalid history, and recovery never repaired a turn (nothing crashed: a repair would have cut
a live turn).

**Turn lock** (row ``contention/turn-lock``): 8 processes take ``store.lock(id)`` in turns; each
holder reports the time it entered (after taking the lock) and left (before releasing it) and
appends an event while it holds the lock. Holders are SIGKILLed at random, most of them while
holding the lock, and replaced. The check: no two holders' intervals overlap (a killed holder's
interval ends when the kill was sent, or when it reported leaving), the lock of every killed
holder is taken again, each acknowledged event is stored once, and the lock is free at the end.
"""

from __future__ import annotations

import collections
import os
import random
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

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

NAME = "contention"
TITLE = "N writers x M appends on one session with readers, compaction and recover(); turn locks"

Report = Callable[[str], None]
SESSION = "contention:1"
LOCK_SESSION = "contention:lock"
HOLDERS = 8


# -- appends -------------------------------------------------------------------------------------


def _writer(
    url: str, options: dict[str, object], index: int, appends: int, seed: int, report: Report
) -> None:
    rng = random.Random(seed)
    agent = f"w{index}"
    with ags.open_store(url, **options) as store:
        session = store.get(SESSION)
        for n in range(appends):
            key = f"K:w{index}-{n}"
            r = rng.random()
            if r < 0.6:
                session.append(
                    ags.Event.new("user/message", ags.Message.user(f"{key} hi"), agent=agent)
                )
                report(f"A {key}")
            elif r < 0.9:
                call = ags.ToolCall(id=f"c{index}-{n}", name="read", arguments={"n": n})
                result = f"{key}r"
                session.append_many(
                    [
                        ags.Event.new(
                            "assistant/message",
                            ags.Message.assistant(f"{key} call", tool_calls=[call]),
                            agent=agent,
                        ),
                        ags.Event.new(
                            "tool/result",
                            ags.ToolResult(call.id, "read", f"{result} output"),
                            agent=agent,
                        ),
                    ]
                )
                report(f"A {key}")
                report(f"A {result}")
            else:
                session.append(ags.Event.new("rel/note", {"key": key}, agent=agent))
                report(f"A {key}")
    report("D")


def _recorder(url: str, options: dict[str, object], turns: int, seed: int, report: Report) -> None:
    """Whole turns under the turn lock (agent ``rec``)."""
    rng = random.Random(seed)
    with ags.open_store(url, **options) as store:
        session = store.get(SESSION)
        for n in range(turns):
            with store.lock(SESSION, timeout=60):
                recorder = session.turn(agent="rec")
                with recorder as turn:
                    report(f"A ts:{recorder.turn_id}")
                    turn.user(f"K:rec-{n}-u question")
                    report(f"A K:rec-{n}-u")
                    with turn.step() as step:
                        report(f"A ss:{recorder.turn_id}:0")
                        call = ags.ToolCall(id=f"rc{n}", name="grep")
                        step.assistant(f"K:rec-{n}-a looking", tool_calls=[call])
                        report(f"A K:rec-{n}-a")
                        time.sleep(rng.uniform(0, 0.003))  # the tool runs
                        step.tool_result(call.id, "grep", f"K:rec-{n}-r found")
                        report(f"A K:rec-{n}-r")
                    report(f"A se:{recorder.turn_id}:0")
                    turn.assistant(f"K:rec-{n}-f done")
                    report(f"A K:rec-{n}-f")
                report(f"A te:{recorder.turn_id}")
            time.sleep(rng.uniform(0, 0.003))  # the user thinks: others get the lock too
    report("D")


def _reader(url: str, options: dict[str, object], stop: Path, seed: int, report: Report) -> None:
    """Reads and derived histories while the others write: every read gap-free, every history
    provider-valid."""
    from agentsession.validation import provider_errors

    rng = random.Random(seed)
    reads = 0
    with ags.open_store(url, **options) as store:
        session = store.get(SESSION)
        while not stop.exists():
            reads += 1
            latest = session.latest_seq
            after = rng.randint(0, max(latest, 0))
            events = session.read(after=after, limit=rng.choice((None, 20, 200)))
            seqs = [e.seq for e in events]
            if seqs != list(range(after + 1, after + 1 + len(seqs))):
                report(f"V read(after={after}) returned seqs {seqs[:5]}...")
            agent = rng.choice((None, "w0", "w1", "rec"))
            problems = provider_errors(session.messages(agent=agent))
            if problems:
                report(f"V messages({agent}) at seq {session.latest_seq}: {problems[0]}")
            if rng.random() < 0.05:  # a fresh object now and then: opening from the tail
                session.close()
                session = store.get(SESSION)
    report(f"N reads {reads}")


def _compactor(url: str, options: dict[str, object], stop: Path, seed: int, report: Report) -> None:
    rng = random.Random(seed)
    done = conflicts = 0
    with ags.open_store(url, **options) as store:
        session = store.get(SESSION)
        while not stop.exists():
            time.sleep(rng.uniform(0.001, 0.01))
            with store.lock(SESSION, timeout=60):
                try:
                    if rng.random() < 0.6:
                        session.compact("summary so far", keep_turns=rng.choice((1, 3, 10)))
                    else:
                        session.prune(rng.randint(5, 60))
                    done += 1
                except ags.ConflictError:
                    conflicts += 1  # documented: writers kept appending while it planned
    report(f"N compactions {done} conflicts {conflicts}")


def _recoverer(url: str, options: dict[str, object], stop: Path, report: Report) -> None:
    passes = 0
    with ags.open_store(url, **options) as store:
        while not stop.exists():
            passes += 1
            for rep in store.recover([SESSION]):
                if rep.status not in ("clean", "live"):
                    report(f"V recover() reported {rep.status} {rep.error} while nothing crashed")
            time.sleep(0.002)
    report(f"N recover passes {passes}")


def _appends(config: Config, backend: str, rng: random.Random) -> Result:
    result = Result(scenario=NAME, backend=backend, expected_errors=False)
    writers, appends = (4, 400) if config.quick else (8, 1000)
    turns = config.trials(40, 200)
    url, options = config.store_url(backend, "contention")
    stop = config.workdir / f"contention-{backend}.stop"
    procs: dict[str, Proc] = {}
    try:
        ags.open_store(url, **options).close()  # created before the processes start
        for i in range(2):
            procs[f"reader {i}"] = spawn(partial(_reader, url, options, stop, rng.randrange(2**32)))
        procs["compactor"] = spawn(partial(_compactor, url, options, stop, rng.randrange(2**32)))
        procs["recoverer"] = spawn(partial(_recoverer, url, options, stop))
        for i in range(writers):
            procs[f"writer {i}"] = spawn(
                partial(_writer, url, options, i, appends, rng.randrange(2**32))
            )
        procs["recorder"] = spawn(partial(_recorder, url, options, turns, rng.randrange(2**32)))
        producers = [p for name, p in procs.items() if name.startswith(("writer", "recorder"))]
        pump(
            list(procs.values()),
            time.monotonic() + 600,
            until=lambda: all(p.fd is None and p.poll() for p in producers),
        )
        stop.touch()
        for name, proc in procs.items():
            proc.finish(60)
            if proc.exit_code != 0:
                note(result, f"{name} exited with {proc.exit_code}")
            count_problems(result, proc, name)
        acked = [line[2:] for p in producers for line in p.lines if line.startswith("A ")]
        result.trials = writers * appends + turns
        for name, proc in procs.items():
            for line in proc.lines:
                if line.startswith("V "):
                    violation(result, f"{name}: {line[2:]}")
                elif line.startswith("N "):
                    note(result, f"{name}: {line[2:]}")
        _check_log(
            url, options, SESSION, acked, (None, "rec", *(f"w{i}" for i in range(writers))), result
        )
    except Exception as exc:
        count_exception(result, exc, "contention")
    finally:
        for proc in procs.values():
            proc.finish(0)
        config.drop_store(backend, url)
    return result


def _check_log(
    url: str,
    options: dict[str, object],
    sid: str,
    acked: list[str],
    agents: tuple[str | None, ...],
    result: Result,
) -> None:
    """The stored log against what was acknowledged (a fresh store object)."""
    try:
        with ags.open_store(url, **options) as store:
            session = store.open(sid)
            events = session.read()
            check_seqs(events, result, sid)
            tally(result, acked, stored_keys(events, result, sid))
            check_history(session, result, agents)
            if scan_all_incomplete(events):
                violation(result, f"{sid}: a turn is left open though no process crashed")
            if [r.status for r in store.recover([sid])] != ["clean"]:
                violation(result, f"{sid}: recover() found something to repair at the end")
            if session.latest_seq != len(events):
                violation(result, f"{sid}: latest_seq {session.latest_seq} != {len(events)}")
    except ags.SessionError as exc:
        result.unopenable += 1
        note(result, f"{sid}: {type(exc).__name__}: {exc}")


# -- the turn lock -------------------------------------------------------------------------------


def _holder(
    url: str, options: dict[str, object], index: int, rounds: int, seed: int, report: Report
) -> None:
    rng = random.Random(seed)
    with ags.open_store(url, **options) as store:
        session = store.get(LOCK_SESSION)
        for n in range(rounds):
            lock = store.lock(LOCK_SESSION, timeout=60)
            report(f"E {time.monotonic()!r}")
            key = f"K:h{index}-{n}"
            session.append(ags.Event.new("rel/held", {"key": key, "pid": os.getpid()}))
            report(f"A {key}")
            time.sleep(rng.uniform(0, 0.004))
            report(f"X {time.monotonic()!r}")
            lock.release()
            time.sleep(rng.uniform(0, 0.002))
    report("D")


def _turn_lock(config: Config, backend: str, rng: random.Random) -> Result:
    result = Result(scenario=f"{NAME}/turn-lock", backend=backend, expected_errors=False)
    rounds = config.trials(25, 100)
    url, options = config.store_url(backend, "contention-lock")
    procs: list[Proc] = []
    index = 0
    kills = {"inside": 0, "elsewhere": 0}
    replaced: set[int] = set()

    def start(n: int) -> None:
        nonlocal index
        procs.append(spawn(partial(_holder, url, options, index, n, rng.randrange(2**32))))
        index += 1

    def on_line(proc: Proc, line: str) -> None:
        if line.startswith("E ") and proc.killed_at is None and rng.random() < 0.12:
            time.sleep(rng.uniform(0, 0.003))
            proc.kill()
            kills["inside"] += 1

    try:
        ags.open_store(url, **options).close()
        for _ in range(HOLDERS):
            start(rounds)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            pump(procs, time.monotonic() + 0.05, on_line)
            live = [p for p in procs if not p.poll()]
            if not live:
                break
            if rng.random() < 0.03:  # now and then a kill anywhere: waiting, opening, releasing
                victim = rng.choice(live)
                if victim.killed_at is None:
                    victim.kill()
                    kills["elsewhere"] += 1
            for proc in list(procs):
                if proc.killed_at is not None and proc.poll() and proc.pid not in replaced:
                    replaced.add(proc.pid)
                    done = sum(1 for line in proc.lines if line.startswith("X "))
                    if rounds - done > 0 and index < HOLDERS * 6:
                        start(rounds - done)
        for proc in procs:
            proc.finish(0 if proc.killed_at is not None else 60)
            if proc.killed_at is None:
                count_problems(result, proc, f"holder {proc.pid}")
        _check_intervals(procs, result)
        acked = [line[2:] for p in procs for line in p.lines if line.startswith("A ")]
        result.trials = sum(1 for p in procs for line in p.lines if line.startswith("E "))
        note(
            result,
            f"holders killed while holding: {kills['inside']}, "
            f"elsewhere: {kills['elsewhere']}; holders started: {index}",
        )
        with ags.open_store(url, **options) as store:
            try:
                store.lock(LOCK_SESSION, timeout=20).release()
            except ags.LockTimeout:
                violation(result, "the lock is still held after every holder ended")
        _check_log(url, options, LOCK_SESSION, acked, (None,), result)
    except Exception as exc:
        count_exception(result, exc, "turn-lock")
    finally:
        for proc in procs:
            proc.finish(0)
        config.drop_store(backend, url)
    return result


def _check_intervals(procs: list[Proc], result: Result) -> None:
    """No two holders inside at once."""
    intervals: list[tuple[float, float, int]] = []
    for proc in procs:
        entered: float | None = None
        for line in proc.lines:
            if line.startswith("E "):
                entered = float(line[2:])
            elif line.startswith("X ") and entered is not None:
                intervals.append((entered, float(line[2:]), proc.pid))
                entered = None
        if entered is not None and proc.killed_at is not None:
            # Killed inside: it held the lock at least until the kill was sent.
            intervals.append((entered, proc.killed_at, proc.pid))
        elif entered is not None:
            note(result, f"holder {proc.pid} ended inside the lock without being killed")
    intervals.sort()
    overlaps = collections.Counter[tuple[int, int]]()
    for i, (_, end, pid) in enumerate(intervals):
        for other_start, _, other in intervals[i + 1 :]:
            if other_start >= end:
                break
            overlaps[(pid, other)] += 1
    for (a, b), n in overlaps.items():
        violation(result, f"holders {a} and {b} held the turn lock at the same time ({n}x)")


def run(config: Config) -> list[Result]:
    """Two rows per backend: appends, and the turn lock."""
    results = []
    for backend in config.backends:
        rng = config.rng(f"{NAME}:{backend}")
        results.append(_appends(config, backend, rng))
        results.append(_turn_lock(config, backend, rng))
    return results
