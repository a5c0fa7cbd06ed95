"""What keeping the catalog and search index costs an append, on the agent-transcript
workload (benchmarks/_workload.py: 16 events per turn, ~7 KB of text), per backend.

    python benchmarks/catalog_append.py [--sessions 8] [--turns 40] [--rounds 5]
        [--backends sqlite,jsonl,memory,postgres] [--postgres DSN]

PostgreSQL needs a server (``--postgres`` or ``AGENTSESSION_TEST_POSTGRES_DSN``; a fresh schema
per store, dropped after); its CPU figure is the client's only.

Three stores side by side, each a new database file per round, the rounds alternating their
order: the catalog and search index kept (the default), ``searchable=False`` (the catalog rows
only) and ``catalog=False`` (neither; the baseline). Each appends ``--turns`` turns to each of
``--sessions`` sessions, turn by turn across the sessions, one event per ``session.append``
(events made beforehand). Printed per store: microseconds per event of CPU
(``time.process_time``) and of wall time, the median of the rounds, and the ratio to
``catalog=False`` measured in the same rounds [target: catalog and search <= 1.3x].

Work the store leaves for later is timed too: ``catch-up us/event`` is what the first
``store.search`` after the appends costs per appended event (the documents indexed then), so
``total`` is what the index costs in all.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from _workload import transcript

import agentsession as ags

CONFIGS: dict[str, dict[str, bool]] = {
    "catalog + search": {},
    "searchable=False": {"searchable": False},
    "catalog=False": {"catalog": False},
}


def run(url: str, options: dict[str, bool], sessions: int, turns: int) -> tuple[float, ...]:
    """Append the workload to a new store at ``url``; returns CPU and wall seconds of the
    appends, CPU and wall seconds of the first search after them, and the events appended."""
    store = ags.open_store(url, **options)
    items = list(transcript(turns))
    per_turn = len(items) // turns
    handles = [store.get(f"agent:{n}") for n in range(sessions)]
    events = [
        [ags.Event.new(kind, payload, agent="coder") for kind, payload in items]
        for _ in range(sessions)
    ]
    cpu, wall = time.process_time(), time.perf_counter()
    for turn in range(turns):
        for session, own in zip(handles, events, strict=True):
            for event in own[turn * per_turn : (turn + 1) * per_turn]:
                session.append(event)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    search_cpu = search_wall = 0.0
    if options.get("catalog", True) and options.get("searchable", True):
        search_cpu, search_wall = time.process_time(), time.perf_counter()
        hits = store.search("quick fox", limit=5)
        search_cpu = time.process_time() - search_cpu
        search_wall = time.perf_counter() - search_wall
        assert hits, "the search found nothing"
    store.close()
    return cpu, wall, search_cpu, search_wall, float(sessions * len(items))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backends", default="sqlite")
    parser.add_argument("--postgres", default=os.environ.get("AGENTSESSION_TEST_POSTGRES_DSN"))
    args = parser.parse_args()
    for backend in args.backends.split(","):
        if backend == "postgres" and not args.postgres:
            print("postgres: skipped (no --postgres DSN)")
            continue
        print(f"## {backend}")
        report(measure(backend, args), args)
        print()


def _target(backend: str, work: Path, label: str, dsn: str | None) -> tuple[str, str | None]:
    """A new store's URL (and a PostgreSQL schema to drop after)."""
    if backend == "sqlite":
        return f"sqlite:///{work / label}.db", None
    if backend == "jsonl":
        return str(work / label), None
    if backend == "memory":
        return "memory:", None
    assert dsn is not None
    from _postgres import postgres_url

    url, schema = postgres_url(dsn)
    return url, schema


def measure(backend: str, args: argparse.Namespace) -> dict[str, list[tuple[float, ...]]]:
    work = Path(tempfile.mkdtemp(prefix="agentsession-catalog-append-"))
    results: dict[str, list[tuple[float, ...]]] = {name: [] for name in CONFIGS}
    try:
        names = list(CONFIGS)
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else reversed(names):
                url, schema = _target(backend, work, f"r{r}-{names.index(name)}", args.postgres)
                try:
                    results[name].append(run(url, CONFIGS[name], args.sessions, args.turns))
                finally:
                    if schema is not None:
                        from _postgres import drop_schema

                        drop_schema(args.postgres, schema)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


def report(results: dict[str, list[tuple[float, ...]]], args: argparse.Namespace) -> None:
    """Print one backend's table (ratios to ``catalog=False`` measured in the same rounds)."""

    def per_event(name: str, column: int) -> float:
        return statistics.median(r[column] / r[4] * 1e6 for r in results[name])

    base_cpu, base_wall = per_event("catalog=False", 0), per_event("catalog=False", 1)
    events = int(results["catalog=False"][0][4])
    print(
        f"{args.sessions} sessions x {args.turns} turns = {events} events per store, one per "
        f"append; median of {args.rounds} rounds (order alternating)"
    )
    print()
    print(
        "| store | CPU us/event | ratio | wall us/event | ratio | catch-up us/event "
        "(CPU / wall) | total CPU ratio |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in CONFIGS:
        cpu, wall = per_event(name, 0), per_event(name, 1)
        later_cpu, later_wall = per_event(name, 2), per_event(name, 3)
        print(
            f"| {name} | {cpu:.1f} | {cpu / base_cpu:.2f}x | {wall:.1f} | {wall / base_wall:.2f}x "
            f"| {later_cpu:.1f} / {later_wall:.1f} | {(cpu + later_cpu) / base_cpu:.2f}x |"
        )


if __name__ == "__main__":
    main()
