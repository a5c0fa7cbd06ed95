"""Append and reload throughput of the JSONL store against the raw file-system limits.

Workload: an agent transcript (see ``_workload.py``), appended one event per call as an agent
loop does. Compared in one run: the JSONL store at durability ``flush`` and ``fsync`` against
plain ``write``+``flush`` (and ``+fsync``) of the very same lines, and reloading the session
(a fresh store reading every event) against ``json.loads`` of every line of the same file.

    python benchmarks/append_reload.py [--turns 2000] [--fsync-events 300] [--repeat 3]
        [--fsync-rounds 9]

The fsync rows alternate the store and the raw loop in short rounds (fresh files each) and keep
each one's best round: a disk's flush time drifts by more than the difference being measured.

Targets: flush >= 0.6x raw write+flush; fsync >= 0.9x raw fsync; reload <= 0.4x json.loads.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _workload import transcript

import agentsession as ags


def append_store(
    directory: Path, items: list[tuple[str, object]], durability: str, prebuilt: bool
) -> float:
    """Seconds to append ``items`` one call each. With ``prebuilt`` the events exist before the
    clock starts (as the raw baseline's lines do); otherwise building them is timed too."""
    shutil.rmtree(directory, ignore_errors=True)
    store = ags.open_store(directory, durability=durability)
    session = store.get("bench")
    new = ags.Event.new
    if prebuilt:
        events = [new(kind, payload, agent="coder") for kind, payload in items]
        start = time.perf_counter()
        for event in events:
            session.append(event)
    else:
        start = time.perf_counter()
        for kind, payload in items:
            session.append(new(kind, payload, agent="coder"))
    elapsed = time.perf_counter() - start
    store.close()
    return elapsed


def append_raw(path: Path, lines: list[bytes], fsync: bool) -> float:
    path.unlink(missing_ok=True)
    start = time.perf_counter()
    with open(path, "ab") as f:
        for line in lines:
            f.write(line)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
    return time.perf_counter() - start


def reload_store(directory: Path) -> tuple[float, int]:
    start = time.perf_counter()
    store = ags.open_store(directory)
    count = len(store.get("bench").read())
    elapsed = time.perf_counter() - start
    store.close()
    return elapsed, count


def reload_json(path: Path) -> tuple[float, int]:
    start = time.perf_counter()
    with open(path, "rb") as f:
        rows = [json.loads(line) for line in f.read().splitlines()]
    return time.perf_counter() - start, len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--fsync-events", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--fsync-rounds", type=int, default=9)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: tmp)")
    args = parser.parse_args()

    items = list(transcript(args.turns))
    few = items[: args.fsync_events]
    work = Path(args.dir or tempfile.mkdtemp(prefix="agentsession-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    store_dir, raw_path = work / "store", work / "raw.jsonl"
    try:
        best: dict[str, float] = {}

        def keep(name: str, seconds: float) -> None:
            best[name] = min(seconds, best.get(name, float("inf")))

        for _ in range(args.repeat):
            keep("flush+build", append_store(store_dir, items, "flush", prebuilt=False))
            keep("flush", append_store(store_dir, items, "flush", prebuilt=True))
            lines = (store_dir / "bench.jsonl").read_bytes().splitlines(keepends=True)
            keep("raw flush", append_raw(raw_path, lines, fsync=False))
            seconds, count = reload_store(store_dir)
            assert count == len(items)
            keep("reload", seconds)
            seconds, count = reload_json(store_dir / "bench.jsonl")
            assert count == len(items)
            keep("json.loads", seconds)
        lines = (store_dir / "bench.jsonl").read_bytes().splitlines(keepends=True)
        for _ in range(args.fsync_rounds):
            keep("fsync", append_store(store_dir, few, "fsync", prebuilt=True))
            keep("raw fsync", append_raw(raw_path, lines[: len(few)], fsync=True))
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)

    rate = {k: (len(few) if "fsync" in k else len(items)) / best[k] for k in best}
    print(
        f"JSONL store, {args.turns} turns = {len(items)} events "
        f"({len(few)} for fsync rows), best of {args.repeat} ({args.fsync_rounds} for fsync)\n"
    )
    print(f"{'case':<28}{'items/s':>12}{'ms':>10}{'ratio':>9}{'target':>10}")
    rows = [
        ("jsonl append, flush", "flush", rate["flush"] / rate["raw flush"], ">= 0.60"),
        ("  same, building events", "flush+build", rate["flush+build"] / rate["raw flush"], ""),
        ("raw write+flush", "raw flush", 1.0, ""),
        ("jsonl append, fsync", "fsync", rate["fsync"] / rate["raw fsync"], ">= 0.90"),
        ("raw write+flush+fsync", "raw fsync", 1.0, ""),
        ("jsonl reload (read all)", "reload", best["reload"] / best["json.loads"], "<= 0.40"),
        ("json.loads every line", "json.loads", 1.0, ""),
    ]
    for label, key, ratio, target in rows:
        print(f"{label:<28}{rate[key]:>12,.0f}{best[key] * 1000:>10.1f}{ratio:>9.2f}{target:>10}")


if __name__ == "__main__":
    main()
