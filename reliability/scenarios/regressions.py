"""Regressions of earlier data-safety bugs, each a sub-scenario with its own rows
(``regressions/<name>``; see ``docs/safety.md`` for the rules they hold the library to):

* ``fork-after-open``: a process opens a store, uses a session, then ``os.fork()``s; parent and
  children all append through the objects they inherited. Every acknowledged event is stored
  once, seqs are gap-free, and (JSONL) every line of the file is one whole JSON event.
* ``delete-recreate``: a session object of one store (and, on some trials, of another process)
  outlives ``delete`` and re-creation by a second store object. It must see only the new life
  (never a deleted event), append only into it (at the right seq), and ``recover()`` through
  it must not repair a turn of the old life into the new one.
* ``use-after-close``: session objects used after ``store.delete`` (same store), after
  ``session.close()`` and after ``store.close()``. Each call either raises a ``SessionError``
  or does the right thing; an append that returned a seq must be stored (never silently lost)
  and nothing deleted comes back.
* ``compaction-race``: one process compacts and prunes in a loop without the turn lock while
  others append. Every acknowledged event is in the log exactly once; every compaction marker
  keeps (in its retained tail) each acknowledged message stored after the previous marker from
  its first kept seq on, so a message is dropped from the history only by a marker that covers
  it; the messages after the last marker's cut are in the derived history, which is
  provider-valid.
* ``special-files`` (JSONL): a symlink to a log outside the store, a symlink to a directory, a
  dangling symlink, a FIFO and a directory named like sessions, a symlinked quarantine sidecar.
  Every operation on them raises a ``SessionError`` or is harmless; none hangs, nothing outside
  the store is read into a session or written, and the store's other sessions still work.
"""

from __future__ import annotations

import json
import os
import random
import stat
import time
from collections.abc import Callable, Collection
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from reliability.common import (
    Config,
    Result,
    check_history,
    check_seqs,
    count_exception,
    count_problems,
    message_keys,
    note,
    spawn,
    stored_keys,
    tally,
    violation,
)

import agentsession as ags
from agentsession.errors import SessionError
from agentsession.events import Compaction

NAME = "regressions"
TITLE = "fork after open, delete + re-create, use after delete/close, compaction races, symlinks"

Report = Callable[[str], None]
Options = dict[str, object]
T = TypeVar("T")
NO_FILES = "the backend keeps no file per session"


def _user(key: str, agent: str = "") -> ags.Event:
    return ags.Event.new("user/message", ags.Message.user(f"{key} text"), agent=agent)


def _attempt(report: Report, what: str, call: Callable[[], T]) -> tuple[bool, T | None]:
    """Run ``call``: a ``SessionError`` is reported as a refusal (``R``), anything else as
    uncaught (``U``); ``(succeeded, value)``."""
    report(f"P {what}")
    try:
        return True, call()
    except SessionError as exc:
        report(f"R {what}: {type(exc).__name__}: {exc}")
    except Exception as exc:
        report(f"U {what}: {type(exc).__name__}: {exc}")
    return False, None


def _collect(result: Result, lines: list[str], who: str) -> list[str]:
    """Count a runner's ``V``/``U``/``R`` lines; its acknowledged keys."""
    acked: list[str] = []
    for line in lines:
        kind, _, text = line.partition(" ")
        if kind == "A":
            acked.append(text)
        elif kind == "V":
            violation(result, f"{who}: {text}")
        elif kind == "U":
            result.uncaught += 1
            note(result, f"{who}: uncaught {text}")
        elif kind == "R":
            result.errors += 1
            if not result.expected_errors:
                note(result, f"{who}: {text}")
    return acked


def _last_phase(lines: list[str]) -> str:
    return next((line[2:] for line in reversed(lines) if line.startswith("P ")), "start")


def _run(result: Result, target: Callable[[Report], None], who: str, timeout: float) -> list[str]:
    """Run ``target`` in a child; count what it reported; its acknowledged keys."""
    proc = spawn(target)
    proc.finish(timeout)
    if proc.killed_at is not None:
        violation(
            result, f"{who}: did not finish in {timeout:.0f} s (hung in {_last_phase(proc.lines)})"
        )
    count_problems(result, proc, who)
    return _collect(result, proc.lines, who)


def _verify_log(
    url: str,
    options: Options,
    sid: str,
    acked: list[str],
    result: Result,
    *,
    forbidden: Collection[str] = (),
) -> list[ags.Event]:
    """Every acknowledged key stored once, seqs gap-free, history provider-valid, and none of
    ``forbidden`` (deleted events) stored; the events."""
    try:
        with ags.open_store(url, **options) as store:
            if not store.exists(sid):
                tally(result, acked, [])
                return []
            session = store.open(sid)
            events = session.read()
            check_seqs(events, result, sid)
            keys = stored_keys(events, result, sid)
            tally(result, acked, keys)
            back = set(forbidden).intersection(keys)
            if back:
                violation(result, f"{sid}: deleted events are back: {sorted(back)[:3]}")
            check_history(session, result)
            return events
    except SessionError as exc:
        result.unopenable += 1
        note(result, f"{sid}: {type(exc).__name__}: {exc}")
    except Exception as exc:
        count_exception(result, exc, f"verify {sid}")
    return []


# -- fork after open -----------------------------------------------------------------------------


def _fork_after_open(url: str, options: Options, sid: str, children: int, report: Report) -> None:
    store = ags.open_store(url, **options)
    session = store.get(sid)
    for i in range(5):
        session.append(_user(f"K:pre-{i}"))
        report(f"A K:pre-{i}")
    session.read()
    session.messages()
    pids = []
    for c in range(children):
        pid = os.fork()
        if pid == 0:  # a grandchild: the inherited store and session objects
            code = 0
            try:
                for i in range(40):
                    session.append(_user(f"K:c{c}-{i}"))
                    report(f"A K:c{c}-{i}")
                batch = [_user(f"K:c{c}-b{i}") for i in range(3)]
                session.append_many(batch)
                for i in range(3):
                    report(f"A K:c{c}-b{i}")
                store.get(sid).read()
                store.close()
            except SessionError as exc:
                report(f"R child {c}: {type(exc).__name__}: {exc}")
                code = 1
            except BaseException as exc:
                report(f"U child {c}: {type(exc).__name__}: {exc}")
                code = 1
            finally:
                os._exit(code)
        pids.append(pid)
    for i in range(40):
        session.append(_user(f"K:p-{i}"))
        report(f"A K:p-{i}")
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            report(f"V forked child {pid} exited with {os.waitstatus_to_exitcode(status)}")
    if session.latest_seq != len(session.read()):
        report(f"V the parent's object: latest_seq {session.latest_seq} != stored events")
    store.close()


def _check_jsonl_lines(path: Path, result: Result) -> None:
    """Every line of a JSONL log is one whole JSON event; nothing was quarantined."""
    if not path.exists():
        return
    for n, line in enumerate(path.read_bytes().split(b"\n")):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
            if not isinstance(event, dict) or not isinstance(event.get("seq"), int):
                raise ValueError("not an event")
        except ValueError as exc:
            violation(result, f"{path.name} line {n + 1} is not a whole event: {exc}")
            return
    quarantine = path.with_name(path.name + ".quarantine")
    if quarantine.exists() and quarantine.stat().st_size:
        violation(result, f"{quarantine.name} is not empty: a torn or interleaved write")


def _sub_fork(
    config: Config, backend: str, url: str, options: Options, rng: random.Random
) -> Result:
    result = Result(scenario=f"{NAME}/fork-after-open", backend=backend, expected_errors=False)
    for trial in range(config.trials(8, 50)):
        sid = f"fork:{trial}"
        acked = _run(
            result,
            partial(_fork_after_open, url, options, sid, rng.choice((1, 2, 3))),
            f"trial {trial}",
            120,
        )
        result.trials += 1
        _verify_log(url, options, sid, acked, result)
        if backend.startswith("jsonl"):
            _check_jsonl_lines(Path(url) / f"fork_{trial}.jsonl", result)
    return result


# -- delete and re-create ------------------------------------------------------------------------


def _life_one(session: ags.BaseSession, life: int) -> None:
    """A life that ends with a turn left open (a tool call unanswered)."""
    session.append_many(
        [
            ags.Event.new("turn/start", ags.events.TurnStart(), agent="a"),
            _user(f"K:old{life}-u", "a"),
            ags.Event.new(
                "assistant/message",
                ags.Message.assistant(
                    f"K:old{life}-a", tool_calls=[ags.ToolCall(f"c-old{life}", "t")]
                ),
                agent="a",
            ),
        ]
    )


def _recreate(url: str, options: Options, sid: str, life: int, report: Report) -> None:
    """Delete ``sid`` and start its next life through a store object of this process."""
    with ags.open_store(url, **options) as other:
        if not other.delete(sid):
            report(f"V delete({sid!r}) found nothing to delete in life {life}")
        new = other.get(sid)
        for i in range(3):
            new.append(_user(f"K:life{life}-{i}"))
            report(f"A K:life{life}-{i}")


def _delete_recreate(
    url: str, options: Options, sid: str, lives: int, elsewhere: bool, report: Report
) -> None:
    """Life 0 through ``old``; then ``lives`` times: ``old`` leaves a turn open, a second
    store object (in another process when ``elsewhere``) deletes the session and starts a
    new life, and ``old`` must follow it."""
    store = ags.open_store(url, **options)
    old = store.get(sid)
    deleted: set[str] = set()
    for life in range(1, lives + 1):
        _life_one(old, life - 1)  # the current life ends with a turn left open
        old.messages()
        deleted |= {f"K:old{life - 1}-u", f"K:old{life - 1}-a"}
        for key in sorted(deleted):
            report(f"G {key}")
        if elsewhere:  # the second store object is in another process
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    _recreate(url, options, sid, life, report)
                except BaseException as exc:
                    report(f"U recreate: {type(exc).__name__}: {exc}")
                    code = 1
                finally:
                    os._exit(code)
            os.waitpid(pid, 0)
        else:
            _recreate(url, options, sid, life, report)
        wanted = {f"K:life{life}-{i}" for i in range(3)}
        ok, events = _attempt(report, "old.read()", old.read)
        if ok and events is not None:
            keys = set(stored_keys(events, Result("", "")))
            if keys & deleted:
                report(f"V the old object read deleted events: {sorted(keys & deleted)[:3]}")
            if not wanted <= keys:
                report(f"V the old object does not see life {life}: {sorted(keys)[:6]}")
        ok, messages = _attempt(report, "old.messages()", old.messages)
        if ok and messages is not None and message_keys(messages) & deleted:
            report("V the old object's history mixes in deleted messages")
        ok, reports = _attempt(report, "recover()", lambda: store.recover([sid]))
        if ok and reports is not None and [r.status for r in reports] != ["clean"]:
            statuses = [r.status for r in reports]
            report(f"V recover() through the old store after re-creation: {statuses}")
        key = f"K:life{life}-old"
        ok, seq = _attempt(report, "old.append()", partial(old.append, _user(key)))
        if ok:
            report(f"A {key}")
            if seq != 4:
                report(f"V the old object appended at seq {seq}, not 4, in life {life}")
        deleted |= wanted | {key}
    store.close()


def _sub_delete(
    config: Config, backend: str, url: str, options: Options, rng: random.Random
) -> Result:
    result = Result(scenario=f"{NAME}/delete-recreate", backend=backend, expected_errors=False)
    for trial in range(config.trials(12, 60)):
        sid = f"lives:{trial}"
        lives = rng.randint(1, 3)
        target = partial(_delete_recreate, url, options, sid, lives, trial % 2 == 1)
        proc = spawn(target)
        proc.finish(120)
        if proc.killed_at is not None:
            violation(result, f"trial {trial}: hung in {_last_phase(proc.lines)}")
        count_problems(result, proc, f"trial {trial}")
        acked = _collect(result, proc.lines, f"trial {trial}")
        gone = {line[2:] for line in proc.lines if line.startswith("G ")}
        result.trials += 1
        # Only the last life's events may be stored; every earlier one was deleted.
        last = [k for k in acked if k.startswith(f"K:life{lives}-")]
        gone |= set(acked) - set(last)
        _verify_log(url, options, sid, last, result, forbidden=gone)
    return result


# -- use after delete and close ------------------------------------------------------------------


def _use_after(url: str, options: Options, sid: str, report: Report) -> None:
    store = ags.open_store(url, **options)
    session = store.get(sid)
    for i in range(3):
        session.append(_user(f"K:gone-{i}"))
    session.messages()
    # 1. reused after store.delete (same store)
    _attempt(report, "delete", lambda: store.delete(sid))
    ok, events = _attempt(report, "read after delete", session.read)
    if ok and events:
        report(f"V read() after delete returned {len(events)} deleted events")
    ok, seq = _attempt(
        report, "append after delete", lambda: session.append(_user("K:after-delete"))
    )
    if ok:
        report("A K:after-delete")
        if seq != 1:
            report(f"V append after delete got seq {seq}, not 1 (a seq of the old life)")
    ok, messages = _attempt(report, "messages after delete", session.messages)
    if ok and messages is not None and any(k.startswith("K:gone") for k in message_keys(messages)):
        report("V messages() after delete shows deleted messages")
    # 1b. deleted through another store object (no new life)
    other_sid = f"{sid}:b"
    other = store.get(other_sid)
    other.append(_user("K:gone-b"))
    other.messages()
    with ags.open_store(url, **options) as second:
        second.delete(other_sid)
    ok, events = _attempt(report, "read after another store's delete", other.read)
    if ok and events:
        report(f"V read() after another store's delete returned {len(events)} deleted events")
    # 2. reused after session.close()
    session.close()
    ok, _ = _attempt(
        report, "append after session.close", lambda: session.append(_user("K:after-sclose"))
    )
    if ok:
        report("A K:after-sclose")
    _attempt(report, "read after session.close", session.read)
    # 3. reused after store.close()
    lock = store.lock(f"{sid}:lock", timeout=10)
    store.close()
    if lock.held:
        report("V a turn lock is still held after store.close()")
    _attempt(report, "lock.release after close", lock.release)
    ok, _ = _attempt(
        report, "append after store.close", lambda: session.append(_user("K:after-close"))
    )
    if ok:
        report("A K:after-close")
    ok, _ = _attempt(
        report,
        "append_many after store.close",
        lambda: session.append_many([_user("K:after-close-m")]),
    )
    if ok:
        report("A K:after-close-m")
    for what, call in (
        ("read after store.close", session.read),
        ("messages after store.close", session.messages),
        ("latest_seq after store.close", lambda: session.latest_seq),
        ("compact after store.close", lambda: session.compact("s", keep_turns=0)),
        ("get after store.close", lambda: store.get(sid)),
        ("recover after store.close", lambda: store.recover([sid])),
    ):
        _attempt(report, what, call)

    def turn_after_close() -> None:
        with session.turn(agent="a") as turn:
            turn.user("K:turn-after-close")
            report("A K:turn-after-close")

    _attempt(report, "turn after store.close", turn_after_close)


def _sub_use_after(
    config: Config, backend: str, url: str, options: Options, rng: random.Random
) -> Result:
    result = Result(scenario=f"{NAME}/use-after-close", backend=backend, expected_errors=True)
    for trial in range(config.trials(5, 30)):
        sid = f"reuse:{trial}"
        acked = _run(result, partial(_use_after, url, options, sid), f"trial {trial}", 60)
        result.trials += 1
        _verify_log(url, options, sid, acked, result, forbidden={f"K:gone-{i}" for i in range(3)})
    if result.errors:
        note(result, f"{result.errors} calls refused with a SessionError (allowed)")
    return result


# -- compaction racing writers -------------------------------------------------------------------


def _race_writer(url: str, options: Options, sid: str, index: int, n: int, report: Report) -> None:
    with ags.open_store(url, **options) as store:
        session = store.get(sid)
        for i in range(n):
            if i % 3 == 2:
                session.append(_user(f"K:w{index}-{i}"))
                report(f"A K:w{index}-{i}")
            else:
                a = f"K:w{index}-{i}a"
                session.append_many(
                    [
                        _user(f"K:w{index}-{i}"),
                        ags.Event.new("assistant/message", ags.Message.assistant(f"{a} reply")),
                    ]
                )
                report(f"A K:w{index}-{i}")
                report(f"A {a}")


def _race_compactor(
    url: str, options: Options, sid: str, seed: int, stop: Path, report: Report
) -> None:
    rng = random.Random(seed)
    done = conflicts = 0
    with ags.open_store(url, **options) as store:
        session = store.get(sid)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not stop.exists():
            try:
                if rng.random() < 0.6:
                    session.compact("summary", keep_turns=rng.choice((0, 1, 2, 2, 5, 5, 20)))
                else:
                    session.prune(rng.randint(1, 30))
                done += 1
            except ags.ConflictError:
                conflicts += 1  # documented: the writers kept appending while it planned
    report(f"N compactions {done}, conflicts {conflicts}")


def _check_markers(
    events: list[ags.Event], keyed: dict[int, str], acked: set[str], result: Result, sid: str
) -> int:
    """Each compaction marker keeps, in its retained tail, every acknowledged message stored
    after the previous marker from its first kept seq on (one appended while the marker was
    planned included: the conditional append must have made it plan again). A first kept seq
    that falls among an earlier marker's retained messages names that marker's first kept seq
    (their own seqs are not stored), so only messages after the previous marker are held to
    it. ``keyed``: the key of each keyed event, by seq. Returns the seq from which every
    acknowledged message must be in the history."""
    floor = 0
    previous = 0
    keys: list[tuple[int, str]] = []
    for event in events:
        if event.type != "session/compaction":
            key = keyed.get(event.seq)
            if key in acked:
                keys.append((event.seq, key))
            continue
        marker = event.decode(Compaction)
        if not marker.first_kept_seq:
            previous = event.seq
            continue
        floor = max(marker.first_kept_seq, previous + 1)
        kept = message_keys(marker.retained_tail)
        left_out = [(seq, key) for seq, key in keys if floor <= seq < event.seq and key not in kept]
        if left_out:
            seq, key = left_out[0]
            violation(
                result,
                f"{sid}: the marker at seq {event.seq} (first kept seq "
                f"{marker.first_kept_seq}) leaves out {len(left_out)} acknowledged message(s) "
                f"stored after seq {floor}, e.g. seq {seq} {key}",
            )
        previous = event.seq
    return floor


def _sub_compaction(
    config: Config, backend: str, url: str, options: Options, rng: random.Random
) -> Result:
    result = Result(scenario=f"{NAME}/compaction-race", backend=backend, expected_errors=False)
    for trial in range(config.trials(5, 30)):
        sid = f"race:{trial}"
        with ags.open_store(url, **options) as store:
            store.get(sid).append(_user("K:first"))
        acked = ["K:first"]
        stop = config.workdir / f"race-{backend}-{trial}.stop"
        seed = rng.randrange(2**32)
        compactor = spawn(partial(_race_compactor, url, options, sid, seed, stop))
        writers = [
            spawn(partial(_race_writer, url, options, sid, i, config.trials(80, 300)))
            for i in range(3)
        ]
        for i, proc in enumerate(writers):
            proc.finish(120)
            count_problems(result, proc, f"trial {trial} writer {i}")
            acked += _collect(result, proc.lines, f"writer {i}")
        stop.touch()
        compactor.finish(60)
        count_problems(result, compactor, f"trial {trial} compactor")
        if trial == 0:
            for line in compactor.lines:
                if line.startswith("N "):
                    note(result, f"trial 0 compactor: {line[2:]}")
        result.trials += 1
        events = _verify_log(url, options, sid, acked, result)
        if not events:
            continue
        # Seq -> key, once: _verify_log has counted the events that do not decode.
        keyed = {e.seq: k for e in events for k in stored_keys([e], Result("", ""))}
        wanted = set(acked)
        cover = _check_markers(events, keyed, wanted, result, sid)
        try:
            with ags.open_store(url, **options) as store:
                visible = message_keys(store.open(sid).messages())
        except SessionError as exc:
            result.unopenable += 1
            note(result, f"{sid}: messages(): {exc}")
            continue
        missing = [
            (seq, key)
            for seq, key in keyed.items()
            if key in wanted and seq >= cover and key not in visible
        ]
        if missing:
            violation(
                result,
                f"{sid}: {len(missing)} acknowledged events from seq {cover} on "
                f"are missing from the history, e.g. seq {missing[0][0]} {missing[0][1]}",
            )
        markers = sum(1 for e in events if e.type == "session/compaction")
        if trial == 0:
            shown = f"{len(events)} events, {markers} markers, last cut at seq {cover}"
            note(result, f"trial 0: {shown}")
    return result


# -- symlinks and special files ------------------------------------------------------------------


def _snapshot(path: Path) -> tuple[Any, ...]:
    """What must not change outside the store: bytes and times of files, listings of dirs."""
    st = path.lstat()
    if stat.S_ISDIR(st.st_mode):
        return ("dir", sorted(p.name for p in path.iterdir()), st.st_mtime_ns)
    return ("file", path.read_bytes(), st.st_mtime_ns)


def _special(store_dir: str, outside: str, report: Report) -> None:
    store = ags.open_store(store_dir)
    special = ("evil", "pipe", "dir", "dangling", "dirlink", "torn")
    for sid in special:
        _attempt(report, f"exists({sid})", partial(store.exists, sid))
        ok, session = _attempt(report, f"get({sid})", partial(store.get, sid))
        if ok and session is not None:
            ok, events = _attempt(report, f"read({sid})", session.read)
            if (
                ok
                and events
                and any("outside" in bytes(e.data).decode("utf-8", "replace") for e in events)
            ):
                report(f"V read({sid}) returned events of a file outside the store")
            ok, _ = _attempt(report, f"append({sid})", partial(session.append, _user(f"K:{sid}")))
            if ok:
                report(f"A {sid} K:{sid}")
            _attempt(report, f"messages({sid})", session.messages)
        _attempt(report, f"open({sid})", partial(store.open, sid))
        _attempt(report, f"recover([{sid}])", partial(store.recover, [sid]))
        _attempt(report, f"delete({sid})", partial(store.delete, sid))
    ok, infos = _attempt(report, "list()", store.list)
    if ok and infos is not None and "good" not in [i.id for i in infos]:
        report("V list() lost the regular session 'good'")
    _attempt(report, "recover() of the whole store", store.recover)
    ok, _ = _attempt(report, "append(good)", lambda: store.get("good").append(_user("K:good-2")))
    if ok:
        report("A good K:good-2")
    else:
        report("V the regular session 'good' cannot be appended to beside the special files")
    store.close()
    report("P done")


def _sub_special(
    config: Config, backend: str, url: str, options: Options, rng: random.Random
) -> Result:
    result = Result(scenario=f"{NAME}/special-files", backend=backend, expected_errors=True)
    if not backend.startswith("jsonl"):
        result.skipped = NO_FILES
        return result
    for trial in range(config.trials(3, 20)):
        base = config.workdir / f"special-{backend}-{trial}"
        store_dir = base / "store"
        outside = base / "outside"
        outside.mkdir(parents=True)
        victim = outside / "victim.jsonl"
        victim.write_bytes(
            b'{"seq":1,"type":"user/message","time":"2026-01-01T00:00:00Z","data":{"role":"user",'
            b'"parts":[{"type":"text","text":"outside secret"}]}}\n'
        )
        (outside / "sub").mkdir()
        with ags.open_store(store_dir, **options) as store:
            store.get("good").append(_user("K:good-1"))
        (store_dir / "evil.jsonl").symlink_to(victim)
        os.mkfifo(store_dir / "pipe.jsonl")
        (store_dir / "dir.jsonl").mkdir()
        (store_dir / "dangling.jsonl").symlink_to(outside / "missing.jsonl")
        (store_dir / "dirlink.jsonl").symlink_to(outside / "sub")
        torn = store_dir / "torn.jsonl"
        torn.write_bytes(victim.read_bytes().replace(b"outside secret", b"kept") + b'{"seq":2,"ty')
        os.chmod(torn, 0o600)
        (store_dir / "torn.jsonl.quarantine").symlink_to(victim)
        if rng.random() < 0.5:  # the order of the entries should not matter
            os.utime(store_dir / "evil.jsonl", follow_symlinks=False)
        before = {p: _snapshot(p) for p in (victim, outside / "sub", outside)}
        acked_lines = _run(
            result, partial(_special, str(store_dir), str(outside)), f"trial {trial}", 30
        )
        result.trials += 1
        after = {p: _snapshot(p) for p in before}
        for path, snap in before.items():
            if after[path] != snap:
                violation(result, f"{path.name} outside the store was changed")
        if not stat.S_ISFIFO((store_dir / "pipe.jsonl").lstat().st_mode):
            violation(result, "the FIFO was replaced")
        if (outside / "missing.jsonl").exists():
            violation(result, "a dangling symlink was written through")
        by_session: dict[str, list[str]] = {}
        for line in acked_lines:
            sid, _, key = line.partition(" ")
            by_session.setdefault(sid, []).append(key)
        by_session.setdefault("good", []).insert(0, "K:good-1")
        for sid, keys in by_session.items():
            _verify_log(str(store_dir), options, sid, keys, result)
    if result.errors:
        note(result, f"{result.errors} operations on special files refused with a SessionError")
    return result


# -- the scenario ----------------------------------------------------------------------------------

SUBS = (
    ("fork-after-open", _sub_fork),
    ("delete-recreate", _sub_delete),
    ("use-after-close", _sub_use_after),
    ("compaction-race", _sub_compaction),
    ("special-files", _sub_special),
)


def run(config: Config) -> list[Result]:
    """One row per sub-scenario and backend."""
    results: list[Result] = []
    for name, sub in SUBS:
        for backend in config.backends:
            rng = config.rng(f"{NAME}/{name}:{backend}")
            url, options = config.store_url(backend, f"reg-{name}")
            try:
                results.append(sub(config, backend, url, options, rng))
            except Exception as exc:
                row = Result(scenario=f"{NAME}/{name}", backend=backend)
                count_exception(row, exc, name)
                results.append(row)
            finally:
                config.drop_store(backend, url)
    return results
