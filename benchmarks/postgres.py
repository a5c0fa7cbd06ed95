"""The PostgreSQL store against baselines measured in the same run.

    python benchmarks/postgres.py [--postgres DSN] [--appends 2000] [--rounds 6] [--batch 5000]
                                  [--reload-items 16000] [--big 1000000] [--writers 8]
                                  [--writer-events 1000]

The DSN comes from ``--postgres`` or ``AGENTSESSION_TEST_POSTGRES_DSN``; the run uses a fresh
schema (``bench_<random>``) and drops it at the end. Printed, each with its baseline and the
ratio (targets in brackets):

* **append**: items/s appending one event per call (the agent-transcript workload of
  ``_workload.py``) vs a raw psycopg loop of single-statement autocommit INSERTs of the same
  rows over one connection, into a table shaped like ``events``; interleaved rounds (each
  side going first in turn): the best rates and the median of the rounds' ratios. Client CPU
  (this process) and server CPU (the backend's ``/proc/<pid>/stat``, pid from
  ``pg_backend_pid()``) per append, summed over all rounds. Durability is the server's
  ``synchronous_commit`` for both [ratio >= 0.8];
* **batch**: ``append_many`` of ``--batch`` transcript events into a new session vs the same
  rows inserted by psycopg's ``executemany`` in one transaction (pipelined), interleaved
  rounds, best of each (information only);
* **reload**: a fresh process opening the store and reading every event of a session of
  ``--reload-items`` events, vs ``agents.SQLiteSession`` (openai-agents) reading the same items
  (``get_items()``), best of 3 [ratio <= 0.5];
* **first open**: a fresh process importing agentsession, opening the store, opening a session
  and reading it (import, then open + get + read), vs ``SQLiteSession``'s import, construction
  and ``get_items()`` [open + get + read <= 20 ms];
* **big session**: a fresh process opening a session of ``--big`` events (no compaction) and
  reading its last 20 (``read(after=latest_seq - 20)``), vs the same at 10,000 events
  [ratio <= 2];
* **writers**: ``--writers`` processes appending to as many different sessions vs 1 process
  (information only), while a sampler polls ``pg_locks`` (``granted = false``) and
  ``pg_stat_activity.wait_event_type``/``wait_event`` of their backends every ~10 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import psycopg
from _postgres import with_schema
from _workload import transcript
from psycopg import sql

import agentsession as ags
from agentsession.backends.postgres import PostgresStore
from agentsession.codec import encode

BENCH_DIR = str(Path(__file__).parent)
CLOCK_TICK = os.sysconf("SC_CLK_TCK")


# -- helpers ----------------------------------------------------------------------------------


def backend_cpu(pid: int) -> float:
    """Seconds of CPU (user + system) a server backend has used: ``/proc/<pid>/stat``."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICK


def items_of(count: int) -> list[tuple[str, Any]]:
    """The first ``count`` (type, payload) pairs of the agent transcript."""
    return list(transcript(count // 15 + 1))[:count]


def events_of(items: list[tuple[str, Any]]) -> list[ags.Event]:
    return [ags.Event.new(kind, payload, agent="coder") for kind, payload in items]


def run_child(code: str, *args: str, timeout: float = 120) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter; its last stdout line is JSON."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"child failed ({proc.returncode}): {err.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


# -- append -----------------------------------------------------------------------------------


def append_round(url: str, events: list[ags.Event]) -> tuple[float, float, float]:
    """(seconds, client CPU s, server CPU s) to append ``events`` one per call to a new
    session of a store that is already open."""
    store = ags.open_store(url)
    assert isinstance(store, PostgresStore)
    try:
        session = store.get(f"append-{uuid.uuid4().hex[:8]}")
        session.append(ags.Event.new("warm/up"))
        pid = store._db.run("pid", lambda conn: conn.info.backend_pid)
        server0, client0, start = backend_cpu(pid), time.process_time(), time.perf_counter()
        for event in events:
            session.append(event)
        seconds = time.perf_counter() - start
        client = time.process_time() - client0
        server = backend_cpu(pid) - server0
        # One thread appending: the pool handed out one connection throughout.
        assert store._db.run("pid", lambda conn: conn.info.backend_pid) == pid
    finally:
        store.close()
    return seconds, client, server


RAW_TABLE = """
CREATE TABLE {s}.raw_events (
    session_id text COLLATE "C" NOT NULL,
    seq bigint NOT NULL CHECK (seq > 0),
    type text NOT NULL,
    agent text NOT NULL DEFAULT '',
    "user" text NOT NULL DEFAULT '',
    time timestamptz NOT NULL,
    data bytea,
    meta bytea,
    PRIMARY KEY (session_id, seq)
)
"""


def raw_round(dsn: str, schema: str, events: list[ags.Event]) -> tuple[float, float, float]:
    """The physical limit: one autocommit INSERT per row over one connection (psycopg
    prepares it after 5 executions, as it does ours)."""
    sid = f"raw-{uuid.uuid4().hex[:8]}"
    rows = [
        (
            sid,
            seq,
            e.type,
            e.agent,
            e.user,
            ags.codec.utcnow(),
            bytes(e.data),
            encode(e.meta) if e.meta else None,
        )
        for seq, e in enumerate(events, start=1)
    ]
    insert = sql.SQL(
        'INSERT INTO {}.raw_events (session_id, seq, type, agent, "user", time, data, meta) '
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
    ).format(sql.Identifier(schema))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET TimeZone TO 'UTC'")
        pid = conn.info.backend_pid
        server0, client0, start = backend_cpu(pid), time.process_time(), time.perf_counter()
        for row in rows:
            conn.execute(insert, row)
        seconds = time.perf_counter() - start
        client = time.process_time() - client0
        server = backend_cpu(pid) - server0
    return seconds, client, server


def bench_append(dsn: str, url: str, schema: str, count: int, rounds: int) -> dict[str, Any]:
    events = events_of(items_of(count))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL(RAW_TABLE).format(s=sql.Identifier(schema)))
    results: dict[str, list[tuple[float, float, float]]] = {"ours": [], "raw": []}
    for n in range(rounds):
        # Alternate which goes first, so that neither always follows the other's writes.
        if n % 2:
            results["ours"].append(append_round(url, events))
            results["raw"].append(raw_round(dsn, schema, events))
        else:
            results["raw"].append(raw_round(dsn, schema, events))
            results["ours"].append(append_round(url, events))
    out: dict[str, Any] = {
        "paired": statistics.median(
            raw_s / ours_s
            for (ours_s, _, _), (raw_s, _, _) in zip(results["ours"], results["raw"], strict=True)
        )
    }
    for name, runs in results.items():
        total = count * len(runs)
        out[name] = {
            "rate": max(count / seconds for seconds, _, _ in runs),
            "client_us": sum(c for _, c, _ in runs) / total * 1e6,
            "server_us": sum(s for _, _, s in runs) / total * 1e6,
        }
    return out


def bench_batch(dsn: str, url: str, schema: str, count: int, rounds: int) -> dict[str, Any]:
    """``append_many`` of ``count`` transcript events into a new session, against the same
    rows inserted by psycopg's ``executemany`` in one transaction (``raw_events``, made by
    :func:`bench_append`); interleaved rounds, best of each: (seconds, client CPU s)."""
    events = events_of(items_of(count))
    insert = sql.SQL(
        'INSERT INTO {}.raw_events (session_id, seq, type, agent, "user", time, data, meta) '
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
    ).format(sql.Identifier(schema))
    out: dict[str, list[tuple[float, float]]] = {"ours": [], "raw": []}
    with ags.open_store(url) as store, psycopg.connect(dsn) as conn:
        for _ in range(rounds):
            session = store.get(f"batch-{uuid.uuid4().hex[:8]}")
            client0, start = time.process_time(), time.perf_counter()
            session.append_many(events)
            out["ours"].append((time.perf_counter() - start, time.process_time() - client0))
            sid = f"raw-{uuid.uuid4().hex[:8]}"
            client0, start = time.process_time(), time.perf_counter()
            rows = [
                (sid, seq, e.type, e.agent, e.user, ags.codec.utcnow(), bytes(e.data),
                 encode(e.meta) if e.meta else None)
                for seq, e in enumerate(events, start=1)
            ]  # fmt: skip
            with conn.transaction(), conn.cursor() as cursor:
                cursor.executemany(insert, rows)
            out["raw"].append((time.perf_counter() - start, time.process_time() - client0))
    return {
        name: {
            "rate": max(count / seconds for seconds, _ in runs),
            "client_ms": min(cpu for _, cpu in runs) * 1e3,
        }
        for name, runs in out.items()
    }


# -- fresh processes --------------------------------------------------------------------------

_AGS_CHILD = textwrap.dedent(
    """
    import json, sys, time
    start = time.perf_counter()
    import agentsession as ags
    import agentsession.backends.postgres
    imported = time.perf_counter()
    url, sid, after, expect = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    store = ags.open_store(url)
    opened = time.perf_counter()
    session = store.get(sid)
    got = time.perf_counter()
    events = session.read(after=after)
    done = time.perf_counter()
    assert len(events) == expect, (len(events), expect)
    store.close()
    print(json.dumps({"import": imported - start, "open": opened - imported,
                      "get": got - opened, "read": done - got}))
    """
)

_SDK_CHILD = textwrap.dedent(
    """
    import asyncio, json, sys, time
    start = time.perf_counter()
    from agents.memory import SQLiteSession
    imported = time.perf_counter()
    path, sid, expect = sys.argv[1], sys.argv[2], int(sys.argv[3])
    session = SQLiteSession(sid, path)
    opened = time.perf_counter()
    items = asyncio.run(session.get_items())
    done = time.perf_counter()
    assert len(items) == expect, (len(items), expect)
    session.close()
    print(json.dumps({"import": imported - start, "open": opened - imported, "get": 0.0,
                      "read": done - opened}))
    """
)


def ags_child(url: str, sid: str, after: int, expect: int) -> dict[str, Any]:
    return run_child(_AGS_CHILD, url, sid, str(after), str(expect))


def sdk_child(path: Path, sid: str, expect: int) -> dict[str, Any]:
    return run_child(_SDK_CHILD, str(path), sid, str(expect))


def sdk_available() -> bool:
    try:
        import agents.memory  # noqa: F401
    except ImportError:
        return False
    return True


def sdk_fill(path: Path, sid: str, items: list[tuple[str, Any]]) -> None:
    from agents.memory import SQLiteSession

    session = SQLiteSession(sid, path)
    rows: list[Any] = [
        {"type": "message", "role": "user", "content": encode(p).decode()} for _, p in items
    ]
    asyncio.run(session.add_items(rows))
    session.close()


def fill(url: str, sid: str, events: Iterator[ags.Event], batch: int = 5000) -> int:
    """Append ``events`` to ``sid`` in batches of ``batch`` (append_many); returns how many."""
    store = ags.open_store(url)
    count = 0
    try:
        session = store.get(sid)
        chunk: list[ags.Event] = []
        for event in events:
            chunk.append(event)
            if len(chunk) == batch:
                session.append_many(chunk)
                count += len(chunk)
                chunk = []
        if chunk:
            session.append_many(chunk)
            count += len(chunk)
    finally:
        store.close()
    return count


def small_events(count: int) -> Iterator[ags.Event]:
    """A long chat: alternating ~60-byte user and assistant messages."""
    for n in range(1, count + 1):
        text = f"message {n}: the quick brown fox jumps over the lazy dog"
        if n % 2:
            yield ags.Event.new("user/message", ags.Message.user(text), agent="coder")
        else:
            yield ags.Event.new("assistant/message", ags.Message.assistant(text), agent="coder")


def interleaved_children(jobs: dict[str, Any], repeat: int) -> dict[str, list[dict[str, Any]]]:
    """Run each job (a no-argument function returning a child's timings) ``repeat`` times,
    in turn, so that drift in the machine's speed hits all of them alike."""
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in jobs}
    for _ in range(repeat):
        for name, job in jobs.items():
            out[name].append(job())
    return out


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


# -- writers and the wait sampler -------------------------------------------------------------

_WRITER = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, sys.argv[4])
    import agentsession as ags
    from _workload import transcript
    url, sid, count, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[5]
    items = list(transcript(count // 15 + 1))[:count]
    store = ags.open_store(url)
    session = store.get(sid)
    events = [ags.Event.new(k, p, agent="coder") for k, p in items]
    session.append(ags.Event.new("warm/up"))
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.0005)
    start = time.time()
    for event in events:
        session.append(event)
    end = time.time()
    store.close()
    print(start, end, flush=True)
    """
)


class WaitSampler:
    """Polls the writers' backends every ``interval`` s: ungranted ``pg_locks`` rows and
    ``pg_stat_activity`` wait events, counted by type."""

    def __init__(self, dsn: str, application_name: str, interval: float = 0.01) -> None:
        self.dsn, self.app, self.interval = dsn, application_name, interval
        self.waits: Counter[str] = Counter()
        self.lock_waits: Counter[str] = Counter()
        self.samples = 0
        self.active = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> WaitSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.is_set():
                activity = conn.execute(
                    "SELECT coalesce(wait_event_type, 'CPU'), coalesce(wait_event, 'running') "
                    "FROM pg_stat_activity WHERE application_name = %s AND state = 'active'",
                    (self.app,),
                ).fetchall()
                locks = conn.execute(
                    "SELECT l.locktype, l.mode FROM pg_locks l JOIN pg_stat_activity a "
                    "USING (pid) WHERE NOT l.granted AND a.application_name = %s",
                    (self.app,),
                ).fetchall()
                self.samples += 1
                self.active += len(activity)
                for kind, event in activity:
                    self.waits[f"{kind}:{event}"] += 1
                for locktype, mode in locks:
                    self.lock_waits[f"{locktype} {mode}"] += 1
                self._stop.wait(self.interval)


def writers(url: str, count: int, per_writer: int, work: Path) -> float:
    """Seconds from the first writer's first append to the last writer's last append, for
    ``count`` processes each appending ``per_writer`` events to a session of its own, all
    released together (process start and exit are not counted)."""
    go = work / f"go-{uuid.uuid4().hex}"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _WRITER,
                url,
                f"writer:{n}:{go.name}",
                str(per_writer),
                BENCH_DIR,
                str(go),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(count)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        go.write_text("go")
        spans = []
        for proc in procs:
            assert proc.stdout is not None
            start, end = map(float, proc.stdout.readline().split())
            spans.append((start, end))
            assert proc.wait(timeout=600) == 0
        return max(end for _, end in spans) - min(start for start, _ in spans)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


# -- the run ----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", default=os.environ.get("AGENTSESSION_TEST_POSTGRES_DSN"))
    parser.add_argument("--appends", type=int, default=2000, help="events per append round")
    parser.add_argument("--rounds", type=int, default=6, help="append rounds (best kept)")
    parser.add_argument("--batch", type=int, default=5000, help="events in the one-batch append")
    parser.add_argument("--reload-items", type=int, default=16000)
    parser.add_argument("--big", type=int, default=1_000_000, help="events in the big session")
    parser.add_argument("--small", type=int, default=10_000, help="its comparison session")
    parser.add_argument("--repeat", type=int, default=5, help="fresh processes per figure")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--writer-events", type=int, default=1000)
    args = parser.parse_args()
    if not args.postgres:
        parser.error("give --postgres DSN or set AGENTSESSION_TEST_POSTGRES_DSN")
    dsn: str = args.postgres
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    url = with_schema(dsn, schema)
    work = Path(tempfile.mkdtemp(prefix="agentsession-pg-bench-"))
    sdk = sdk_available()
    report: list[str] = []
    say = report.append
    try:
        ags.open_store(url).close()  # create the schema once
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT current_setting('server_version'), current_setting('synchronous_commit'),"
                " current_setting('fsync')"
            ).fetchone()
        assert row is not None
        say(
            f"PostgreSQL {row[0]} (synchronous_commit={row[1]}, fsync={row[2]}); "
            f"{os.cpu_count()} CPUs; client and server on this machine\n"
        )

        # Append.
        print("append ...", file=sys.stderr, flush=True)
        appends = bench_append(dsn, url, schema, args.appends, args.rounds)
        ours, raw = appends["ours"], appends["raw"]
        say(
            f"append, one event per call ({args.appends} transcript events x {args.rounds} "
            "rounds, interleaved; best rate, CPU summed over the rounds)"
        )
        say(f"{'':<34}{'items/s':>10}{'client us/append':>18}{'server us/append':>18}")
        for label, r in (("agentsession PostgreSQL", ours), ("raw psycopg INSERT loop", raw)):
            say(f"{label:<34}{r['rate']:>10,.0f}{r['client_us']:>18.1f}{r['server_us']:>18.1f}")
        say(
            f"ratio agentsession / raw: {ours['rate'] / raw['rate']:.2f} (best rates), "
            f"{appends['paired']:.2f} (median of the rounds' ratios)   [target >= 0.80]\n"
        )

        # One batch.
        print("batch ...", file=sys.stderr, flush=True)
        batch = bench_batch(dsn, url, schema, args.batch, args.rounds)
        say(
            f"append_many of {args.batch:,} transcript events into a new session (best of "
            f"{args.rounds} rounds, interleaved)"
        )
        say(f"{'':<34}{'items/s':>10}{'client ms':>18}")
        for label, name in (
            ("agentsession PostgreSQL", "ours"),
            ("raw psycopg executemany", "raw"),
        ):
            say(f"{label:<34}{batch[name]['rate']:>10,.0f}{batch[name]['client_ms']:>18.1f}")
        say(f"ratio agentsession / raw: {batch['ours']['rate'] / batch['raw']['rate']:.2f}\n")

        # Reload of a long transcript, fresh processes.
        print("reload ...", file=sys.stderr, flush=True)
        items = items_of(args.reload_items)
        fill(url, "reload", iter(events_of(items)))
        jobs: dict[str, Any] = {
            "agentsession": lambda: ags_child(url, "reload", 0, len(items)),
        }
        if sdk:
            sdk_fill(work / "sdk.db", "reload", items)
            jobs["SQLiteSession"] = lambda: sdk_child(work / "sdk.db", "reload", len(items))
        reloads = interleaved_children(jobs, 3)
        say(f"reload of a {len(items):,}-item session in a fresh process (best of 3, ms)")
        say(f"{'':<34}{'open+get':>10}{'read':>10}{'total':>10}")
        totals: dict[str, float] = {}
        for name, runs in reloads.items():
            fastest = min(runs, key=lambda r: r["open"] + r["get"] + r["read"])
            totals[name] = fastest["open"] + fastest["get"] + fastest["read"]
            say(
                f"{name:<34}{ms(fastest['open'] + fastest['get']):>10}{ms(fastest['read']):>10}"
                f"{ms(totals[name]):>10}"
            )
        if sdk:
            ratio = totals["agentsession"] / totals["SQLiteSession"]
            say(f"ratio agentsession / SQLiteSession: {ratio:.2f}   [target <= 0.50]\n")
        else:
            say("SQLiteSession: skipped (pip install '.[bench]')\n")

        # First open, fresh processes.
        print("first open ...", file=sys.stderr, flush=True)
        first = items_of(15)
        fill(url, "first", iter(events_of(first)))
        jobs = {"agentsession": lambda: ags_child(url, "first", 0, len(first))}
        if sdk:
            sdk_fill(work / "sdk-first.db", "first", first)
            jobs["SQLiteSession"] = lambda: sdk_child(work / "sdk-first.db", "first", len(first))
        opens = interleaved_children(jobs, args.repeat)
        say(
            f"first open in a fresh process: import, then open store + get + read of a "
            f"15-event session (median of {args.repeat}, ms)"
        )
        say(f"{'':<34}{'import':>10}{'open':>10}{'get':>10}{'read':>10}{'o+g+r':>10}")
        for name, runs in opens.items():
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            ogr = statistics.median(r["open"] + r["get"] + r["read"] for r in runs)
            say(
                f"{name:<34}{ms(med['import']):>10}{ms(med['open']):>10}{ms(med['get']):>10}"
                f"{ms(med['read']):>10}{ms(ogr):>10}"
            )
        say("target: agentsession open + get + read <= 20 ms\n")

        # The big uncompacted session.
        print(f"building {args.big:,} events ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        fill(url, "big", small_events(args.big))
        built = time.perf_counter() - start
        fill(url, "small", small_events(args.small))
        jobs = {
            f"{args.small:,} events": lambda: ags_child(url, "small", args.small - 20, 20),
            f"{args.big:,} events": lambda: ags_child(url, "big", args.big - 20, 20),
        }
        bigs = interleaved_children(jobs, args.repeat)
        say(
            f"open + read(after=latest_seq-20) of an uncompacted session in a fresh process "
            f"(best and median of {args.repeat}, ms; {args.big:,} built in {built:.0f} s with "
            "append_many batches of 5000)"
        )
        say(f"{'':<34}{'best':>10}{'median':>10}")
        figures: dict[str, float] = {}
        for name, runs in bigs.items():
            each = [r["open"] + r["get"] + r["read"] for r in runs]
            figures[name] = statistics.median(each)
            say(f"{name:<34}{ms(min(each)):>10}{ms(statistics.median(each)):>10}")
        small_ms, big_ms = figures.values()
        say(f"ratio big / small (medians): {big_ms / small_ms:.2f}   [target <= 2.00]\n")

        # Writers on different sessions.
        print("writers ...", file=sys.stderr, flush=True)
        app = f"agentsession/{schema}"
        one = writers(url, 1, args.writer_events, work)
        with WaitSampler(dsn, app) as sampler:
            many = writers(url, args.writers, args.writer_events, work)
        rate_one = args.writer_events / one
        rate_many = args.writers * args.writer_events / many
        say(
            f"{args.writers} writer processes on {args.writers} sessions vs 1 "
            f"({args.writer_events} events each)"
        )
        say(
            f"1 writer: {rate_one:,.0f} items/s; {args.writers} writers: {rate_many:,.0f} items/s"
            f" (x{rate_many / rate_one:.2f}; information only)"
        )
        say(
            f"sampled every 10 ms: {sampler.samples} samples, {sampler.active} active backends"
            f" seen; pg_locks granted = false: {sum(sampler.lock_waits.values())}"
            + (f" ({dict(sampler.lock_waits)})" if sampler.lock_waits else "")
        )
        by_type: Counter[str] = Counter()
        for key, n in sampler.waits.items():
            by_type[key.split(":")[0]] += n
        say(
            "wait_event_type of active backends: "
            + ", ".join(f"{k} {v}" for k, v in by_type.most_common())
        )
        say("wait events: " + ", ".join(f"{k} {v}" for k, v in sampler.waits.most_common(8)))
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        shutil.rmtree(work, ignore_errors=True)
    print("\n".join(report))


if __name__ == "__main__":
    main()
