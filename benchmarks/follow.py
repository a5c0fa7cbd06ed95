"""Live feeds across processes: how long an event takes from its append's return in a writer
process to a follower in another process yielding it, and what the idle follower costs.

    python benchmarks/follow.py [--sessions 100] [--rate 100] [--seconds 8] [--idle 4]
                                [--poll] [--postgres DSN]

Per backend (JSONL, SQLite, and PostgreSQL when ``--postgres`` or
``AGENTSESSION_TEST_POSTGRES_DSN`` names a server: a fresh schema, dropped at the end), one
follower process follows ``--sessions`` sessions at once (a thread per session, each running
``session.follow()``). First nobody writes: the follower process's CPU time over ``--idle``
seconds, as a share of one core, is the idle cost [target <= 1%]. Then a writer process appends
``--rate`` events per second for ``--seconds`` seconds, spread over the sessions in turn; each
event's text is the writer's ``time.time_ns()`` before the call, and the writer reports the
time each append returned. The latency of an event is the follower's ``time.time_ns()`` when
its ``follow()`` yielded it minus that return time [targets: p50 <= 5 ms, p99 <= 50 ms].
``--poll`` adds a JSONL row with inotify turned off (the 20 ms poll of the files).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _postgres import drop_schema, postgres_url

import agentsession as ags
from agentsession import Event, Message
from agentsession.events import decode

_HERE = os.path.abspath(__file__)
_SETTLE = 2.0  # seconds the follower waits before measuring idle (watchers slow down when quiet)


def _sid(i: int) -> str:
    return f"feed-{i:03d}"


def follower(url: str, sessions: int, idle: float, poll: bool) -> None:
    """The follower process: follow every session; report the idle CPU share, then each
    event's receive time (one JSON line per event) once the writer has stopped."""
    if poll:
        from agentsession.backends.jsonl import watch

        watch._inotify_calls = lambda: None  # type: ignore[attr-defined]
    store = ags.open_store(url)
    received: list[tuple[str, int, int]] = []
    lock = threading.Lock()
    started = threading.Barrier(sessions + 1)

    def follow(sid: str) -> None:
        session = store.get(sid)
        feed = session.follow(after=session.latest_seq, timeout=None)
        started.wait()
        for event in feed:
            now = time.time_ns()
            with lock:
                received.append((sid, event.seq, now))
            if decode(event.data, Message).text == "stop":
                return

    threads = [threading.Thread(target=follow, args=(_sid(i),)) for i in range(sessions)]
    for thread in threads:
        thread.start()
    started.wait()
    time.sleep(_SETTLE)
    cpu, wall = time.process_time(), time.monotonic()
    time.sleep(idle)
    share = (time.process_time() - cpu) / (time.monotonic() - wall)
    print(json.dumps({"idle": share}), flush=True)
    for thread in threads:
        thread.join()
    for sid, seq, now in received:
        print(json.dumps({"sid": sid, "seq": seq, "at": now}))
    store.close()


def writer(url: str, sessions: int, rate: float, seconds: float) -> None:
    """The writer process: ``rate`` appends a second over the sessions in turn, each return
    time reported; then a ``stop`` event to each session."""
    store = ags.open_store(url)
    handles = [store.get(_sid(i)) for i in range(sessions)]
    count = int(rate * seconds)
    start = time.monotonic()
    for n in range(count):
        pause = start + n / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        session = handles[n % sessions]
        seq = session.append(
            Event.new("assistant/message", Message.assistant(str(time.time_ns())))
        )
        print(json.dumps({"sid": session.id, "seq": seq, "at": time.time_ns()}))
    sys.stdout.flush()
    for session in handles:
        session.append(Event.new("assistant/message", Message.assistant("stop")))
    store.close()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(url: str, args: argparse.Namespace, poll: bool = False) -> tuple[float, list[float]]:
    """The idle CPU share of the follower process and every event's latency (ms)."""
    store = ags.open_store(url)
    for i in range(args.sessions):  # the sessions exist before anyone follows
        store.get(_sid(i)).append(Event.new("assistant/message", Message.assistant("hello")))
    store.close()
    role = [sys.executable, _HERE, "--role"]
    sizes = [str(args.sessions), str(args.idle), str(args.rate), str(args.seconds)]
    follow = subprocess.Popen(
        [*role, "follower", url, *sizes, "poll" if poll else "inotify"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert follow.stdout is not None
    idle = json.loads(follow.stdout.readline())["idle"]
    write = subprocess.run(
        [*role, "writer", url, *sizes], stdout=subprocess.PIPE, text=True, check=True
    )
    sent = {(r["sid"], r["seq"]): r["at"] for r in map(json.loads, write.stdout.splitlines())}
    got = {(r["sid"], r["seq"]): r["at"] for r in map(json.loads, follow.stdout)}
    if follow.wait() != 0:
        raise SystemExit(f"the follower process failed on {url}")
    missing = [key for key in sent if key not in got]
    if missing:
        raise SystemExit(f"{len(missing)} events were never yielded on {url}: {missing[:5]}")
    return idle, [(got[key] - at) / 1e6 for key, at in sent.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--idle", type=float, default=4.0)
    parser.add_argument("--poll", action="store_true", help="add JSONL without inotify")
    parser.add_argument("--postgres", default=os.environ.get("AGENTSESSION_TEST_POSTGRES_DSN"))
    parser.add_argument("--role", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        role, url, sessions, idle, rate, seconds, *rest = args.role
        if role == "follower":
            follower(url, int(sessions), float(idle), rest == ["poll"])
        else:
            writer(url, int(sessions), float(rate), float(seconds))
        return
    work = Path(tempfile.mkdtemp(prefix="agentsession-follow-"))
    schema = ""
    cases = [("jsonl", str(work / "jsonl"), False)]
    if args.poll:
        cases.append(("jsonl (poll)", str(work / "jsonl-poll"), True))
    cases.append(("sqlite", f"sqlite:///{work}/s.db", False))
    if args.postgres:
        url, schema = postgres_url(args.postgres)
        cases.append(("postgresql", url, False))
    try:
        print(
            f"{args.sessions} sessions followed by one process, {args.rate:g} appends/s for "
            f"{args.seconds:g} s from another; idle measured over {args.idle:g} s\n"
        )
        print(
            f"{'backend':<14}{'events':>7}{'p50 ms':>8}{'p99 ms':>8}{'max ms':>8}"
            f"{'idle % core':>13}"
        )
        for name, url, poll in cases:
            idle, latencies = measure(url, args, poll)
            print(
                f"{name:<14}{len(latencies):>7}{statistics.median(latencies):>8.2f}"
                f"{_percentile(latencies, 0.99):>8.2f}{max(latencies):>8.2f}"
                f"{idle * 100:>13.2f}",
                flush=True,
            )
        print(f"{'target':<14}{'':>7}{'<= 5':>8}{'<= 50':>8}{'':>8}{'<= 1':>13}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if schema:
            drop_schema(args.postgres, schema)


if __name__ == "__main__":
    main()
