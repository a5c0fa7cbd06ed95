"""The backends side by side on the agent-transcript workload, against the physical limits
(raw sqlite3, raw JSONL ``write``+``flush``) and, when ``openai-agents`` is installed
(``pip install '.[bench]'``), its ``SQLiteSession``.

    python benchmarks/backends.py [--turns 1000] [--sessions 2000] [--big 1000000]

PostgreSQL rows need a server: the DSN comes from ``--postgres`` or
``AGENTSESSION_TEST_POSTGRES_DSN`` (each run uses a fresh schema and drops it).

Printed, every read figure measured in a fresh process (best of ``--repeat``):

* append items/s (one event per call, as an agent loop appends);
* reload ms: open a store and read every event of the transcript;
* last-20 ms: open a store and read the latest 20 events (``read(after=latest_seq - 20)``);
* open-1-of-N ms: open a store holding N sessions, open one and derive its messages;
* first-open ms: import + open a store + first ``get`` + read of the latest 20 events (also
  shown without the import, next to the import time alone);
* an uncompacted session of ``--big`` events (and of 10,000): open + read of the latest 20
  events, ms and MB of memory above the interpreter's baseline;
* for PostgreSQL, the aggregate rate of 1 and of 8 writer processes on 8 different sessions
  (information: the server shares the machine's cores with the writers).

``--id-cost [REF]`` instead compares the append rate of this checkout with REF's (by default
the last commit before events had ids), each backend in fresh processes, best of
``--repeat`` alternating rounds: the cost of storing and checking an event id per append
(target: >= 0.90, at most 10 % slower), and, beside it, of making each event in the loop
(``Event.new``, which makes the id since ids exist).

Targets: SQLite append >= 50 % of raw sqlite3 (one INSERT and commit per item, WAL, the same
synchronous level); the ``--big`` session opens in <= 10 ms and <= 50 MB on JSONL and SQLite and
in <= 2x the 10,000-event figure on every backend; first open <= 1.5x SQLiteSession's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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

import msgspec

sys.path.insert(0, str(Path(__file__).parent))

from _postgres import drop_schema, postgres_url
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


def fill_sessions(url: str, sessions: int, per_session: Items) -> None:
    store = ags.open_store(url)
    events = [ags.Event.new(kind, payload, agent="coder") for kind, payload in per_session]
    for n in range(sessions):
        store.get(f"user:{n}").append_many(events)
    store.close()


def build_long(url: str, session_id: str, events: int) -> None:
    """An uncompacted session of ``events`` short user/assistant messages, in batches."""
    store = ags.open_store(url)
    session = store.get(session_id)
    new, user, assistant = ags.Event.new, ags.Message.user, ags.Message.assistant
    for first in range(0, events, 5000):
        batch = []
        for n in range(first, min(first + 5000, events)):
            text = f"message {n}: the quick brown fox jumps over the lazy dog"
            if n % 2:
                batch.append(new("assistant/message", assistant(text), agent="coder"))
            else:
                batch.append(new("user/message", user(text), agent="coder"))
        session.append_many(batch)
    store.close()


# -- fresh-process probes ---------------------------------------------------------------------

_PROBE = textwrap.dedent(
    """
    import json, sys, time
    started = time.perf_counter()
    mode, target, sid = sys.argv[1], sys.argv[2], sys.argv[3]
    if mode.startswith("sdk-"):
        import asyncio
        from agents.memory import SQLiteSession
    elif mode.startswith("raw-"):
        pass
    else:
        import agentsession as ags
        # The backend's modules (psycopg, sqlite3) count as imports, as the SDK's do.
        if target.startswith("postgresql:"):
            import agentsession.backends.postgres
        elif target.startswith("sqlite:"):
            import agentsession.backends.sqlite
        else:
            import agentsession.backends.jsonl
    imported = time.perf_counter()
    def memory(field):  # kB, from /proc (ru_maxrss would carry the parent's peak over exec)
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(field))
    base = memory("VmRSS:")
    if mode.startswith("sdk-"):
        session = SQLiteSession(sid, target)
        limit = 20 if mode == "sdk-last20" else None
        count = len(asyncio.run(session.get_items(limit)))
        session.close()
    elif mode == "raw-reload":
        with open(target, "rb") as f:
            count = len([json.loads(line) for line in f.read().splitlines()])
    elif mode == "raw-last20":
        with open(target, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 65536))
            count = len([json.loads(line) for line in f.read().splitlines()[-20:]])
    else:
        store = ags.open_store(target)
        session = store.get(sid)
        if mode == "reload":
            count = len(session.read())
        elif mode == "last20":
            count = len(session.read(after=max(0, session.latest_seq - 20)))
        elif mode == "open":
            count = len(session.messages())
        store.close()
    done = time.perf_counter()
    peak = memory("VmHWM:")
    print(json.dumps({
        "ms": (done - imported) * 1000,
        "import_ms": (imported - started) * 1000,
        "mb": max(0, peak - base) / 1024,
        "count": count,
    }))
    """
)


# Imports read compiled bytecode, as in any installed program (the first run writes it).
_PROBE_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


class Probe:
    """A measurement in a fresh interpreter: ``mode`` against ``target`` (a URL or a path)."""

    def __init__(self, mode: str, target: str, session_id: str = "bench") -> None:
        self.mode, self.target, self.session_id = mode, target, session_id
        self.best: dict[str, float] = {}

    def run(self) -> dict[str, float]:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE, self.mode, self.target, self.session_id],
            capture_output=True,
            text=True,
            timeout=600,
            env=_PROBE_ENV,
        )
        if done.returncode != 0:
            raise RuntimeError(f"probe {self.mode} {self.target} failed:\n{done.stderr}")
        out = done.stdout
        result: dict[str, float] = msgspec.json.decode(out.strip().splitlines()[-1])
        for key, value in result.items():
            self.best[key] = min(value, self.best.get(key, float("inf")))
        return result


def probe_rounds(probes: dict[str, Probe], rounds: int) -> None:
    """Run every probe once per round, in turn, so drift in the machine's speed hits all alike;
    each keeps its best figures."""
    for _ in range(rounds):
        for probe in probes.values():
            probe.run()


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


def sdk_fill(path: Path, sessions: int, per_session: list[dict[str, Any]]) -> None:
    for n in range(sessions):
        session = sdk_session(path, f"user:{n}")
        asyncio.run(session.add_items(per_session))
        session.close()


# -- the run ----------------------------------------------------------------------------------


def raw_jsonl(path: Path, lines: list[bytes]) -> float:
    """The physical limit of a JSONL append: ``write`` + ``flush`` of the same lines."""
    path.unlink(missing_ok=True)

    def run() -> None:
        with open(path, "ab") as f:
            for line in lines:
                f.write(line)
                f.flush()

    return timed(run)


# -- the cost of event ids ---------------------------------------------------------------------

ID_COST_BASELINE = "38a173c"
"""The last commit before events had ids (and appends recognised retries by them)."""

_ID_COST_CHILD = textwrap.dedent(
    """
    import json, sys, time
    import agentsession as ags
    url, count, options = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    store = ags.open_store(url, **options)
    message = ags.Message.user("y" * 200)
    # The append rate as append_all measures it: the events are made beforehand.
    session = store.get("made-before")
    events = [ags.Event.new("user/message", message, agent="coder") for _ in range(count)]
    start = time.perf_counter()
    for event in events:
        session.append(event)
    rate = count / (time.perf_counter() - start)
    # Each event made when it is appended, as an agent loop does: the id's making counted.
    session = store.get("made-in-loop")
    start = time.perf_counter()
    for _ in range(count):
        session.append(ags.Event.new("user/message", message, agent="coder"))
    print(rate, count / (time.perf_counter() - start))
    store.close()
    """
)


def id_cost(ref: str, dsn: str | None, count: int, rounds: int) -> None:
    """Append rates of this checkout against ``ref`` (the code before event ids), each in fresh
    processes, rounds alternating, best of ``rounds``: the cost of making, storing and
    checking an id per append."""
    repo = Path(__file__).resolve().parent.parent
    work = Path(tempfile.mkdtemp(prefix="agentsession-idcost-"))
    tree = work / "baseline"
    subprocess.run(
        ["git", "-C", str(repo), "worktree", "add", "--detach", str(tree), ref],
        check=True,
        capture_output=True,
    )
    cases: list[tuple[str, Callable[[str], str], dict[str, Any]]] = [
        ("jsonl flush", lambda tag: str(work / f"j-{tag}"), {}),
        ("jsonl fsync", lambda tag: str(work / f"f-{tag}"), {"durability": "fsync"}),
        ("sqlite", lambda tag: f"sqlite:///{work / f's-{tag}.db'}", {}),
        ("memory", lambda tag: "memory:", {}),
    ]
    schemas: list[str] = []
    if dsn:

        def pg(tag: str) -> str:
            url, schema = postgres_url(dsn)
            schemas.append(schema)
            return url

        cases.append(("postgresql", pg, {}))
    try:
        print(f"Appends of {count} events, one per call: {ref} (before event ids) and now")
        print("append: the events made beforehand (the append rate, as append_all measures it)")
        print("make + append: each made by Event.new in the loop (its id made too, since ids)")
        print(
            f"{'backend':<14}{'append before/s':>17}{'now/s':>11}{'ratio':>7}{'target':>9}"
            f"{'make+append before/s':>22}{'now/s':>11}{'ratio':>7}"
        )
        for name, make_url, options in cases:
            best = dict.fromkeys(("before", "now", "before+", "now+"), 0.0)
            for round_ in range(rounds):
                for label, src in (("before", tree / "src"), ("now", repo / "src")):
                    env = {**os.environ, "PYTHONPATH": str(src)}
                    out = subprocess.run(
                        [sys.executable, "-c", _ID_COST_CHILD, make_url(f"{label}{round_}"),
                         str(count), json.dumps(options)],
                        check=True, capture_output=True, text=True, env=env,
                    ).stdout.split()
                    best[label] = max(best[label], float(out[-2]))
                    best[label + "+"] = max(best[label + "+"], float(out[-1]))
            print(
                f"{name:<14}{best['before']:>17,.0f}{best['now']:>11,.0f}"
                f"{best['now'] / best['before']:>7.2f}{'>= 0.90':>9}"
                f"{best['before+']:>22,.0f}{best['now+']:>11,.0f}"
                f"{best['now+'] / best['before+']:>7.2f}"
            )
    finally:
        subprocess.run(
            ["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)],
            capture_output=True,
        )
        shutil.rmtree(work, ignore_errors=True)
        for schema in schemas:
            assert dsn is not None
            drop_schema(dsn, schema)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=1000, help="transcript length (16/turn)")
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--big", type=int, default=1_000_000, help="uncompacted session size")
    parser.add_argument("--repeat", type=int, default=5, help="fresh processes per figure")
    parser.add_argument(
        "--writer-events", type=int, default=1500, help="events each PostgreSQL writer appends"
    )
    parser.add_argument("--postgres", default=os.environ.get("AGENTSESSION_TEST_POSTGRES_DSN"))
    parser.add_argument(
        "--id-cost",
        nargs="?",
        const=ID_COST_BASELINE,
        default=None,
        metavar="REF",
        help="only compare append rates with REF (a git commit; default: the code before "
        "event ids), in fresh processes; needs a git checkout",
    )
    args = parser.parse_args()
    if args.id_cost:
        id_cost(args.id_cost, args.postgres, count=4000, rounds=args.repeat)
        return

    items = list(transcript(args.turns))
    one_turn = list(transcript(1))
    work = Path(tempfile.mkdtemp(prefix="agentsession-backends-"))
    notes: list[str] = []
    pg_dsn, schemas = args.postgres, []
    say = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
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
        stored = [n for n, _ in backends if n != "memory"]

        # Appends: each backend in turn, twice (best kept), with the raw limits and the SDK in
        # the same rounds.
        say("appending...")
        lines = [
            encode_event(ags.Event(seq=i + 1, type=k, data=ags.Event.new(k, p).data)) + b"\n"
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
            rates["raw sqlite3"] = max(rates.get("raw sqlite3", 0.0), raw)
            raw = len(lines) / raw_jsonl(work / "raw.jsonl", lines)
            rates["raw jsonl"] = max(rates.get("raw jsonl", 0.0), raw)
            if sdk is not None:
                rate = len(sdk) / sdk_append(work / "sdk.db", sdk)
                rates["sdk"] = max(rates.get("sdk", 0.0), rate)

        # Reads, each in fresh processes, every probe once per round.
        say("reading in fresh processes...")
        target = f"user:{random.randrange(args.sessions)}"
        probes: dict[tuple[str, str], Probe] = {}
        for name, make in backends:
            if name == "memory":
                continue
            probes[name, "reload"] = Probe("reload", urls[name])
            probes[name, "last20"] = Probe("last20", urls[name])
            many = make("many")
            fill_sessions(many, args.sessions, one_turn)
            probes[name, "open"] = Probe("open", many, target)
        raw_path = str(work / "raw.jsonl")
        probes["raw jsonl", "reload"] = Probe("raw-reload", raw_path)
        probes["raw jsonl", "last20"] = Probe("raw-last20", raw_path)
        if sdk is not None:
            probes["sdk", "reload"] = Probe("sdk-reload", str(work / "sdk.db"))
            probes["sdk", "last20"] = Probe("sdk-last20", str(work / "sdk.db"))
            sdk_fill(work / "sdk-many.db", args.sessions, sdk_items(one_turn))
            probes["sdk", "open"] = Probe("sdk-reload", str(work / "sdk-many.db"), target)
        probe_rounds({f"{k}": v for k, v in probes.items()}, args.repeat)

        # The uncompacted long session: 10,000 events and --big events.
        sizes = sorted({10_000, args.big})
        big: dict[tuple[str, int], Probe] = {}
        for size in sizes:
            for name, make in backends:
                if name == "memory":
                    continue
                say(f"building an uncompacted {name} session of {size:,} events...")
                url = make(f"long-{size}")
                build_long(url, "long", size)
                big[name, size] = Probe("last20", url, "long")
        probe_rounds({f"{k}": v for k, v in big.items()}, args.repeat)

        pg_rates = None
        if pg_dsn:
            from postgres import writers  # the writer processes of benchmarks/postgres.py

            say("postgresql writers...")
            url, schema = postgres_url(pg_dsn)
            schemas.append(schema)
            ags.open_store(url).close()  # migrate once before the writers start
            one = eight = 0.0
            for _ in range(3):  # interleaved, best of three each
                one = max(one, args.writer_events / writers(url, 1, args.writer_events, work))
                eight = max(
                    eight, 8 * args.writer_events / writers(url, 8, args.writer_events, work)
                )
            pg_rates = (one, eight)
    finally:
        for schema in schemas:
            drop_schema(pg_dsn, schema)
        shutil.rmtree(work, ignore_errors=True)

    def fig(name: str, kind: str, key: str = "ms") -> str:
        probe = probes.get((name, kind))
        return "-" if probe is None else f"{probe.best[key]:.1f}"

    print(
        f"agent transcript: {args.turns} turns = {len(items)} events appended one per call; "
        f"reads in fresh processes, best of {args.repeat}; open one of {args.sessions} sessions"
        "\n"
    )
    head = ("backend", "append items/s", "reload ms", "last-20 ms", "open-1-of-N ms")
    print(f"{head[0]:<30}{head[1]:>16}{head[2]:>11}{head[3]:>12}{head[4]:>16}")
    labels = {"sdk": "openai-agents SQLiteSession"}
    for name in [*(n for n, _ in backends), "raw jsonl", "raw sqlite3", "sdk"]:
        if name not in rates:
            continue
        print(
            f"{labels.get(name, name):<30}{rates[name]:>16,.0f}{fig(name, 'reload'):>11}"
            f"{fig(name, 'last20'):>12}{fig(name, 'open'):>16}"
        )

    print("\nfirst open: import + open_store + get + read of the latest 20 events (ms)\n")
    print(
        f"{'backend':<30}{'total':>9}{'vs SDK':>9}{'without import':>16}{'vs SDK':>9}"
        f"{'import':>9}"
    )
    sdk_first = sdk_open = None
    if ("sdk", "last20") in probes:
        best = probes["sdk", "last20"].best
        sdk_first, sdk_open = best["ms"] + best["import_ms"], best["ms"]
    for name in [*stored, "sdk"]:
        probe = probes.get((name, "last20"))
        if probe is None:
            continue
        total = probe.best["ms"] + probe.best["import_ms"]
        ratio = "-" if sdk_first is None else f"{total / sdk_first:.2f}"
        bare = "-" if sdk_open is None else f"{probe.best['ms'] / sdk_open:.2f}"
        print(
            f"{labels.get(name, name):<30}{total:>9.1f}{ratio:>9}{probe.best['ms']:>16.1f}"
            f"{bare:>9}{probe.best['import_ms']:>9.1f}"
        )

    print("\nan uncompacted session: open + read of the latest 20 events, fresh process\n")
    print(
        f"{'backend':<14}" + "".join(f"{f'{n:,} ms':>14}{'MB':>7}" for n in sizes) + f"{'ratio':>8}"
    )
    for name in stored:
        cells = "".join(
            f"{big[name, n].best['ms']:>14.1f}{big[name, n].best['mb']:>7.1f}" for n in sizes
        )
        ratio = big[name, sizes[-1]].best["ms"] / big[name, sizes[0]].best["ms"]
        print(f"{name:<14}{cells}{ratio:>8.2f}")
    print(
        f"\ntargets: the {sizes[-1]:,}-event session <= 10 ms and <= 50 MB on jsonl and sqlite, "
        "and <= 2x the 10,000-event figure on every backend"
    )

    print()
    sqlite_rate, raw_rate = rates["sqlite"], rates["raw sqlite3"]
    print(f"sqlite / raw sqlite3 append rate: {sqlite_rate / raw_rate:.2f}   (target >= 0.50)")
    print(f"jsonl / raw write+flush append rate: {rates['jsonl'] / rates['raw jsonl']:.2f}")
    if sdk_first is not None:
        for name in stored:
            best = probes[name, "last20"].best
            ratio = (best["ms"] + best["import_ms"]) / sdk_first
            print(
                f"{name} first open / SQLiteSession's: {ratio:.2f}, without the imports "
                f"{best['ms'] / (sdk_open or 1):.2f}   (target <= 1.50)"
            )
    if pg_rates:
        one, eight = pg_rates
        print(
            f"postgresql 1 writer: {one:,.0f} items/s; 8 writers on 8 sessions: {eight:,.0f} "
            f"items/s; ratio {eight / one:.2f}   (information: {os.cpu_count()} CPUs shared "
            "with the server)"
        )
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
