"""Opening a long session is O(tail): time to open + messages() for logs of growing length.

Each log holds N events (user/assistant turns) with a compaction marker 100 events before the
end. Opening a session reads from that marker (found by scanning back from the end of the
file), so the time should not grow with N.

    python benchmarks/tail_open.py [--sizes 10000 100000 1000000] [--repeat 5]

Target: the 1,000,000-event figure under 50 ms and within 2x of the 10,000-event figure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import agentsession as ags

TAIL = 100


def build(directory: Path, events: int) -> int:
    """Write a log of ``events`` events whose compaction marker sits TAIL events from the end."""
    store = ags.open_store(directory)
    session = store.get("long")
    batch: list[ags.Event] = []
    marker_at = events - TAIL
    for n in range(1, events + 1):
        if n == marker_at:
            session.append_many(batch)
            batch = []
            session.compact(f"summary of the first {n - 1} events", keep_turns=2)
            continue
        text = f"message {n}: the quick brown fox jumps over the lazy dog"
        if n % 2:
            batch.append(ags.Event.new("user/message", ags.Message.user(text), agent="coder"))
        else:
            batch.append(
                ags.Event.new("assistant/message", ags.Message.assistant(text), agent="coder")
            )
        if len(batch) == 5000:
            session.append_many(batch)
            batch = []
    session.append_many(batch)
    store.close()
    return os.path.getsize(directory / "long.jsonl")


def open_and_derive(directory: Path) -> tuple[float, int]:
    start = time.perf_counter()
    store = ags.open_store(directory)
    count = len(store.get("long").messages())
    elapsed = time.perf_counter() - start
    store.close()
    return elapsed, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="agentsession-tail-"))
    rows = []
    try:
        for size in args.sizes:
            directory = work / str(size)
            print(f"building {size:,} events...", file=sys.stderr, flush=True)
            nbytes = build(directory, size)
            times = []
            for _ in range(args.repeat):
                seconds, count = open_and_derive(directory)
                times.append(seconds)
            rows.append((size, nbytes, min(times), statistics.median(times), count))
            shutil.rmtree(directory)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = rows[0][2]
    print(
        f"open + messages() of a JSONL session, compaction {TAIL} events from the end, "
        f"best and median of {args.repeat}\n"
    )
    print(
        f"{'events':>12}{'file MB':>10}{'best ms':>10}{'median ms':>11}{'messages':>10}"
        f"{'vs first':>10}"
    )
    for size, nbytes, best, median, count in rows:
        print(
            f"{size:>12,}{nbytes / 1e6:>10.1f}{best * 1000:>10.2f}{median * 1000:>11.2f}"
            f"{count:>10}{best / base:>10.2f}"
        )
    print("\ntarget: the largest log under 50 ms and within 2x of the smallest")


if __name__ == "__main__":
    main()
