"""An endless session stays bounded: a synthetic agent writes turns without end under a
compaction policy (``CompactionPolicy(max_messages=2 * --compact-every, keep_turns=2)``, so the
store compacts about every ``--compact-every`` turns, at a turn's end; ``--explicit`` calls
``session.compact`` instead, appending each stretch of turns in one batch: faster, for long
runs) and archiving every ``--archive-every`` turns; at each archive
run the table shows the live log's size, the time to open the session from a fresh store (and
derive its history), and the archive's size, with ratios against the first checkpoint (the
baseline, measured in the same run). At the end, ``read()`` of the whole history must return
every event, in order.

    python benchmarks/retention.py [--turns 300000] [--archive-every 10000]
                                   [--compact-every 1000] [--store jsonl|sqlite]
    python benchmarks/retention.py --turns 1000000      # the long run

Then, the cost of an append with a compaction policy active (a budget never reached) against
none, on the same store kind, CPU time, best of interleaved rounds [target: <= 1.05x; the
summarizer's own time is the application's and is not in it].

What to look for: the live-log and open-time ratios stay near 1.0 however many turns were
written (the bound is about ``--archive-every`` turns plus the kept tail), while the archive
grows with the history.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import agentsession as ags
from agentsession.archive import ARCHIVE_KIND, decode_index
from agentsession.compaction import CompactionPolicy

SID = "endless"


def live_bytes(store: ags.BaseStore, kind: str, directory: Path) -> int:
    """The live log's size: the JSONL file, or the SQLite rows' data."""
    if kind == "jsonl":
        return os.path.getsize(directory / f"{SID}.jsonl")
    import sqlite3

    conn = sqlite3.connect(directory / "store.db")
    try:
        (size,) = conn.execute(
            "SELECT coalesce(sum(length(data)), 0) FROM events WHERE session_id = ?", (SID,)
        ).fetchone()
    finally:
        conn.close()
    return int(size)


def timed_open(url: str, repeat: int = 3) -> tuple[float, float]:
    """Seconds to open the session from a fresh store (to its latest seq), then to derive its
    history: the best of ``repeat`` tries."""
    best = (float("inf"), float("inf"))
    for _ in range(repeat):
        start = time.perf_counter()
        store = ags.open_store(url)
        session = store.get(SID)
        _ = session.latest_seq
        opened = time.perf_counter() - start
        session.messages()
        derived = time.perf_counter() - start
        store.close()
        best = (min(best[0], opened), min(best[1], derived))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=300_000)
    parser.add_argument("--archive-every", type=int, default=10_000)
    parser.add_argument("--compact-every", type=int, default=1_000)
    parser.add_argument("--store", choices=["jsonl", "sqlite"], default="jsonl")
    parser.add_argument(
        "--explicit",
        action="store_true",
        help="compact with session.compact between batches instead of the policy",
    )
    parser.add_argument(
        "--rows", type=int, default=20, help="at most this many checkpoints printed (and the last)"
    )
    args = parser.parse_args()
    if args.archive_every % args.compact_every:
        sys.exit("--archive-every must be a multiple of --compact-every")

    directory = Path(tempfile.mkdtemp(prefix="agentsession-retention-"))
    url = str(directory) if args.store == "jsonl" else f"sqlite:///{directory / 'store.db'}"
    print(
        f"{args.turns:,} turns, compaction every {args.compact_every:,}, archive every "
        f"{args.archive_every:,}, {args.store} store"
    )
    header = (
        f"{'turns':>10} {'events':>10} {'live peak':>11} {'ratio':>6} {'live after':>10} "
        f"{'open ms':>8} "
        f"{'ratio':>6} {'+history ms':>11} {'ratio':>6} {'archive':>11} {'run s':>6}"
    )
    print(header)
    print("-" * len(header))
    policy = CompactionPolicy(
        max_messages=2 * args.compact_every, keep_turns=2, summarize=_summarize
    )
    store = ags.open_store(url) if args.explicit else ags.open_store(url, compaction=policy)
    session = store.get(SID)
    base: tuple[int, float, float] | None = None
    written = 0
    started = time.perf_counter()
    worst_live = 0
    try:
        while written < args.turns:
            if args.explicit:
                batch: list[ags.Event] = []
                for n in range(written, written + args.compact_every):
                    batch.append(ags.Event.new("user/message", ags.Message.user(_question(n))))
                    batch.append(
                        ags.Event.new("assistant/message", ags.Message.assistant(_answer(n)))
                    )
                session.append_many(batch)
                session.compact(f"summary of the first {written} turns", keep_turns=2)
            else:
                for n in range(written, written + args.compact_every):
                    with session.turn() as turn:  # the policy runs as the turn ends
                        turn.user(_question(n))
                        turn.assistant(_answer(n))
            written += args.compact_every
            if written % args.archive_every:
                continue
            peak = live_bytes(store, args.store, directory)  # the most the live log holds
            worst_live = max(worst_live, peak)
            run = time.perf_counter()
            entry = store.archive(SID).sessions[0]
            run = time.perf_counter() - run
            if entry.skipped is not None:
                sys.exit(f"archive skipped: {entry.skipped}")
            session = store.get(SID)
            live = live_bytes(store, args.store, directory)
            opened, derived = timed_open(url)
            if base is None:
                base = (peak, opened, derived)
            checkpoints = args.turns // args.archive_every
            step = max(1, -(-checkpoints // max(1, args.rows)))
            number = written // args.archive_every
            if number % step and number != 1 and written + args.compact_every <= args.turns:
                continue
            print(
                f"{written:>10,} {session.latest_seq:>10,} {peak:>11,} {peak / base[0]:>6.2f} "
                f"{live:>10,} "
                f"{opened * 1000:>8.1f} {opened / base[1]:>6.2f} {derived * 1000:>11.1f} "
                f"{derived / base[2]:>6.2f} {entry.archive_total_bytes:>11,} {run:>6.2f}"
            )
        total = time.perf_counter() - started
        start = time.perf_counter()
        events = ags.open_store(url).get(SID).read()
        read_s = time.perf_counter() - start
        seqs = [e.seq for e in events]
        if seqs != list(range(1, len(seqs) + 1)):
            sys.exit("read() of the whole history is not every event in order")
        index = decode_index(SID, store._meta_get(ARCHIVE_KIND, SID))
        archive = sum(seg.bytes for seg in index.segments)
        print()
        print(f"live-log bound (largest, just before an archive run): {worst_live:,} bytes")
        print(f"archive: {archive:,} bytes in {len(index.segments)} segments")
        print(f"read() of the whole history: {len(events):,} events in order, {read_s:.2f} s")
        print(f"total run: {total:.1f} s")
        if not args.explicit:
            markers = sum(1 for e in events if e.type == "session/compaction")
            print(f"compactions made by the policy: {markers:,}")
    finally:
        store.close()
        shutil.rmtree(directory, ignore_errors=True)
    append_cost(args.store)


def _question(n: int) -> str:
    return f"question {n}: what next?"


def _answer(n: int) -> str:
    return f"answer {n}: the quick brown fox jumps over"


def _summarize(messages: list[ags.Message]) -> ags.Message:
    """The synthetic agent's summarizer (an application would call a cheaper model)."""
    return ags.Message.user(f"summary of {len(messages)} messages")


def append_cost(kind: str, events: int = 2000, rounds: int = 9) -> None:
    """Print the CPU time of ``events`` single appends with a compaction policy active (its
    budget never reached) against none, best of interleaved rounds."""
    policy = CompactionPolicy(max_messages=10**9, max_tokens=10**12, summarize=_summarize)
    best = {"none": float("inf"), "policy": float("inf")}
    root = Path(tempfile.mkdtemp(prefix="agentsession-append-cost-"))
    try:
        for n in range(rounds):
            for name, options in (("none", {}), ("policy", {"compaction": policy})):
                where = root / f"{name}{n}"
                url = str(where) if kind == "jsonl" else f"sqlite:///{where}.db"
                store = ags.open_store(url, **options)
                session = store.get("s")
                batch = [
                    ags.Event.new("user/message", ags.Message.user(_question(i)))
                    for i in range(events)
                ]
                start = time.process_time()
                for event in batch:
                    session.append(event)
                best[name] = min(best[name], time.process_time() - start)
                store.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ratio = best["policy"] / best["none"]
    print()
    print(f"append with a compaction policy active, {kind}, {events:,} appends, CPU time:")
    print(f"{'case':>8} {'us/append':>10} {'ratio':>6}")
    for name in ("none", "policy"):
        print(f"{name:>8} {best[name] / events * 1e6:>10.1f} {best[name] / best['none']:>6.2f}")
    print(f"target <= 1.05x: {'met' if ratio <= 1.05 else 'missed'} ({ratio:.2f}x)")


if __name__ == "__main__":
    main()
