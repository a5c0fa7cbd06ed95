"""The backends side by side on the agent-transcript workload, against raw sqlite3 and, when
``openai-agents`` is installed (``pip install '.[bench]'``), its ``SQLiteSession``.

    python benchmarks/backends.py [--turns 2000] [--sessions 2000] [--writer-events 1500]

PostgreSQL rows need a server: the DSN comes from ``--postgres`` or
``AGENTSESSION_TEST_POSTGRES_DSN`` (each run uses a fresh schema and drops it).

Printed: append items/s (one event per call, as an agent loop appends), reload ms (a fresh
store reading every event of the session, best of 3), open-one-of-N-sessions ms (a fresh store
opening one session of a store holding N and deriving its messages, best of 3), and for
PostgreSQL the aggregate rate of 1 and of 8 writer processes on 8 different sessions (best of
3, interleaved).

Targets: SQLite >= 50 % of raw sqlite3 (one INSERT and commit per item, WAL, the same
synchronous level); reload on every backend <= SQLiteSession's; PostgreSQL with 8 writers on
8 sessions >= 2x one writer.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).parent))

from _workload import transcript

import agentsession as ags
from agentsession.events import encode, encode_event

Items = list[tuple[str, Any]]


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# -- agentsession backends --------------------------------------------------------------------


def append_all(url: str, items: Items, session_id: str = "bench") -> float:
    store = ags.open_store(url)
    session = store.get(session_id)
    events = [ags.Event.new(kind, payload, agent="coder") for kind, payload in items]

    def run() -> None:
        for event in events:
            session.append(event)

    seconds = timed(run)
    store.close()
    return seconds


def reload_fn(url: str, expected: int) -> Callable[[], None]:
    """Open a fresh store and read every event of the benchmark session."""

    def run() -> None:
        store = ags.open_store(url)
        assert len(store.get("bench").read()) == expected
        store.close()

    return run


def fill_sessions(url: str, sessions: int, per_session: Items) -> None:
    store = ags.open_store(url)
    events = [ags.Event.new(kind, payload, agent="coder") for kind, payload in per_session]
    for n in range(sessions):
        store.get(f"user:{n}").append_many(events)
    store.close()


def open_fn(url: str, target: str) -> Callable[[], None]:
    """Open a fresh store, open one session and derive its messages."""

    def run() -> None:
        store = ags.open_store(url)
        assert store.get(target).messages()
        store.close()

    return run


# -- baselines --------------------------------------------------------------------------------


def raw_sqlite(path: Path, lines: list[bytes], synchronous: str) -> float:
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute(
        "CREATE TABLE events (session_id TEXT, seq INTEGER, line BLOB, "
        "PRIMARY KEY (session_id, seq))"
    )

    def run() -> None:
        for seq, line in enumerate(lines, start=1):
            conn.execute("BEGIN")
            conn.execute("INSERT INTO events VALUES (?, ?, ?)", ("bench", seq, line))
            conn.execute("COMMIT")

    seconds = timed(run)
    conn.close()
    return seconds


def sdk_items(items: Items) -> list[dict[str, Any]]:
    """The transcript as openai-agents items of the same sizes."""
    return [{"type": "message", "role": "user", "content": encode(p).decode()} for _, p in items]


def sdk_available() -> bool:
    try:
        import agents.memory  # noqa: F401
    except ImportError:
        return False
    return True


def sdk_session(path: Path, session_id: str) -> Any:
    from agents.memory import SQLiteSession

    return SQLiteSession(session_id, path)


def make_again(backends: list[tuple[str, Callable[[str], str]]], name: str) -> str:
    """A fresh, empty store of backend ``name`` for another append round."""
    return dict(backends)[name](f"append-{uuid.uuid4().hex[:6]}")


def sdk_append(path: Path, items: list[dict[str, Any]]) -> float:
    path.unlink(missing_ok=True)
    session = sdk_session(path, "bench")

    async def run() -> None:
        for item in items:
            await session.add_items([item])

    seconds = timed(lambda: asyncio.run(run()))
    session.close()
    return seconds


def sdk_reload_fn(path: Path, expected: int) -> Callable[[], None]:
    def run() -> None:
        session = sdk_session(path, "bench")
        assert len(asyncio.run(session.get_items())) == expected
        session.close()

    return run


def sdk_fill(path: Path, sessions: int, per_session: list[dict[str, Any]]) -> None:
    for n in range(sessions):
        session = sdk_session(path, f"user:{n}")
        asyncio.run(session.add_items(per_session))
        session.close()


def sdk_open_fn(path: Path, target: str) -> Callable[[], None]:
    def run() -> None:
        session = sdk_session(path, target)
        assert asyncio.run(session.get_items())
        session.close()

    return run


def interleaved(fns: dict[str, Callable[[], None]], rounds: int) -> dict[str, float]:
    """Best time of each function over ``rounds`` rounds that run every function in turn, so
    that drift in the machine's speed hits all of them alike."""
    best = {name: float("inf") for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            best[name] = min(best[name], timed(fn))
    return best


# -- PostgreSQL writers -----------------------------------------------------------------------

_WRITER = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, sys.argv[4])
    import agentsession as ags
    from _workload import transcript
    url, sid, count, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[5]
    items = [i for _, i in zip(range(count), transcript(count // 16 + 1))]
    store = ags.open_store(url)
    session = store.get(sid)
    events = [ags.Event.new(k, p, agent="coder") for k, p in items]
    session.append(ags.Event.new("warm/up"))
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.0005)
    for event in events:
        session.append(event)
    store.close()
    """
)


def writers(url: str, count: int, per_writer: int, work: Path) -> float:
    """Wall time for ``count`` processes to each append ``per_writer`` events to its own
    session, all released together."""
    go = work / f"go-{uuid.uuid4().hex}"
    bench_dir = str(Path(__file__).parent)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _WRITER,
                url,
                f"writer:{n}:{go.name}",
                str(per_writer),
                bench_dir,
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
        start = time.perf_counter()
        go.write_text("go")
        for proc in procs:
            assert proc.wait(timeout=600) == 0
        return time.perf_counter() - start
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def postgres_url(dsn: str) -> tuple[str, str]:
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    parts = urlsplit(dsn)
    query = "&".join(filter(None, [parts.query, urlencode({"schema": schema})]))
    return urlunsplit(parts._replace(query=query)), schema


def drop_schema(dsn: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


# -- the run ----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--turns", type=int, default=2000, help="transcript length (16 events/turn)"
    )
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument(
        "--writer-events",
        type=int,
        default=1500,
        help="events each PostgreSQL writer process appends",
    )
    parser.add_argument("--postgres", default=os.environ.get("AGENTSESSION_TEST_POSTGRES_DSN"))
    args = parser.parse_args()

    items = list(transcript(args.turns))
    one_turn = list(transcript(1))
    work = Path(tempfile.mkdtemp(prefix="agentsession-backends-"))
    rows: list[tuple[str, float | None, float | None, float | None]] = []
    notes: list[str] = []
    pg_dsn, schemas = args.postgres, []
    try:
        backends: list[tuple[str, Callable[[str], str]]] = [
            ("memory", lambda tag: "memory:"),
            ("jsonl", lambda tag: str(work / f"jsonl-{tag}")),
            ("sqlite", lambda tag: f"sqlite:///{work / f'sqlite-{tag}.db'}"),
        ]
        if pg_dsn:

            def pg(tag: str) -> str:
                url, schema = postgres_url(pg_dsn)
                schemas.append(schema)
                return url

            backends.append(("postgresql", pg))
        else:
            notes.append("postgresql: skipped (no --postgres DSN)")

        # Appends: each backend in turn, twice (best kept), with the raw sqlite3 limit and the
        # SDK baseline in the same rounds.
        lines = [
            encode_event(ags.Event(seq=i + 1, type=k, data=ags.Event.new(k, p).data))
            for i, (k, p) in enumerate(items)
        ]
        sdk = sdk_items(items) if sdk_available() else None
        if sdk is None:
            notes.append("openai-agents SQLiteSession: skipped (pip install '.[bench]')")
        rates: dict[str, float] = {}
        urls = {name: make("append") for name, make in backends}
        for round_ in range(2):
            for name, _ in backends:
                url = urls[name] if round_ == 0 else make_again(backends, name)
                rates[name] = max(rates.get(name, 0.0), len(items) / append_all(url, items))
                urls[name] = url
            raw = len(lines) / raw_sqlite(work / "raw.db", lines, "NORMAL")
            rates["raw"] = max(rates.get("raw", 0.0), raw)
            if sdk is not None:
                rates["sdk"] = max(
                    rates.get("sdk", 0.0), len(sdk) / sdk_append(work / "sdk.db", sdk)
                )

        # Reads: every store (and the SDK) in the same rounds.
        target = f"user:{random.randrange(args.sessions)}"
        reloads: dict[str, Callable[[], None]] = {}
        opens: dict[str, Callable[[], None]] = {}
        for name, make in backends:
            if name == "memory":
                continue
            reloads[name] = reload_fn(urls[name], len(items))
            many = make("many")
            fill_sessions(many, args.sessions, one_turn)
            opens[name] = open_fn(many, target)
        if sdk is not None:
            reloads["sdk"] = sdk_reload_fn(work / "sdk.db", len(sdk))
            sdk_fill(work / "sdk-many.db", args.sessions, sdk_items(one_turn))
            opens["sdk"] = sdk_open_fn(work / "sdk-many.db", target)
        reload_s = interleaved(reloads, rounds=5)
        open_s = interleaved(opens, rounds=5)

        labels = {"raw": "raw sqlite3 (NORMAL)", "sdk": "openai-agents SQLiteSession"}
        for name in [*(n for n, _ in backends), "raw", *(["sdk"] if sdk is not None else [])]:
            reload_ms = reload_s[name] * 1000 if name in reload_s else None
            open_ms = open_s[name] * 1000 if name in open_s else None
            rows.append((labels.get(name, name), rates[name], reload_ms, open_ms))
        sqlite_rate, raw_rate = rates["sqlite"], rates["raw"]
        sdk_reload_ms = reload_s["sdk"] * 1000 if "sdk" in reload_s else None

        pg_rates = None
        if pg_dsn:
            url, _ = postgres_url(pg_dsn)
            schemas.append(urlsplit(url).query.split("schema=")[-1])
            ags.open_store(url).close()  # migrate once before the writers start
            # Interleaved and best of three each: the machine's speed drifts between runs.
            one = eight = 0.0
            for _ in range(3):
                one = max(one, args.writer_events / writers(url, 1, args.writer_events, work))
                eight = max(
                    eight, 8 * args.writer_events / writers(url, 8, args.writer_events, work)
                )
            pg_rates = (one, eight)
    finally:
        for schema in schemas:
            drop_schema(pg_dsn, schema)
        shutil.rmtree(work, ignore_errors=True)

    print(
        f"agent transcript: {args.turns} turns = {len(items)} events appended one per call; "
        f"open one of {args.sessions} sessions\n"
    )
    print(f"{'backend':<30}{'items/s':>11}{'reload ms':>11}{'open-1-of-N ms':>16}")
    for name, rate, reload_ms, open_ms in rows:
        fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
        print(
            f"{name:<30}{fmt(rate, ',.0f'):>11}{fmt(reload_ms, '.1f'):>11}{fmt(open_ms, '.2f'):>16}"
        )
    print()
    if sqlite_rate and raw_rate:
        print(f"sqlite / raw sqlite3 append rate: {sqlite_rate / raw_rate:.2f}   (target >= 0.50)")
    if sdk_reload_ms:
        for name, _, reload_ms, _ in rows:
            if reload_ms is not None and name != "openai-agents SQLiteSession":
                print(
                    f"{name} reload / SQLiteSession reload: {reload_ms / sdk_reload_ms:.2f}"
                    "   (target <= 1.00)"
                )
    if pg_rates:
        one, eight = pg_rates
        print(
            f"postgresql 1 writer: {one:,.0f} items/s; 8 writers on 8 sessions: {eight:,.0f} "
            f"items/s; ratio {eight / one:.2f}   (target >= 2.00; {os.cpu_count()} CPUs, "
            "server on the same machine)"
        )
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
