"""What an append under a lease (``with store.lock(...)``: a fenced append) costs against one
without, on every backend, measured in one run.

    python benchmarks/lease.py [--appends 2000] [--rounds 5] [--postgres DSN]

Then the hand-over: how long a waiter with ``steal_after=0.5`` takes to get the lock from a
holder that never renews (the bound is ``steal_after`` plus the waiter's polling pause, at most
0.1 s).

Each round appends ``--appends`` events one call each to a fresh session, first without a lease
and then inside ``with store.lock(id)``, alternating, and keeps each case's best round. The
ratio is the lease's rate over the plain rate [target >= 0.91, that is <= 1.10x the cost].
The DSN comes from ``--postgres`` or ``AGENTSESSION_TEST_POSTGRES_DSN`` (a fresh schema,
dropped at the end); without one PostgreSQL is left out.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from _postgres import drop_schema, postgres_url

import agentsession as ags


def run(url: str, appends: int, leased: bool, sid: str) -> float:
    with ags.open_store(url) as store:
        session = store.get(sid)
        session.append(ags.Event.new("bench/first", {}))
        events = [ags.Event.new("bench/n", {"n": i}) for i in range(appends)]
        if leased:
            with store.lock(sid, timeout=10):
                start = time.perf_counter()
                for event in events:
                    session.append(event)
                return time.perf_counter() - start
        start = time.perf_counter()
        for event in events:
            session.append(event)
        return time.perf_counter() - start


def hand_over(url: str, steal_after: float) -> float:
    """Seconds from a waiter asking until it holds the lock, stolen from a holder that took it
    ``steal_after`` seconds earlier and never renewed (a stopped process, as far as the waiter
    can tell)."""
    with ags.open_store(url) as holder_store, ags.open_store(url) as waiter_store:
        held = holder_store.lock("handover", timeout=10)
        try:
            start = time.perf_counter()
            with waiter_store.lock("handover", timeout=30, steal_after=steal_after):
                return time.perf_counter() - start
        finally:
            held.release()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--postgres", default=os.environ.get("AGENTSESSION_TEST_POSTGRES_DSN"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="agentsession-lease-"))
    schema = ""
    urls = {"memory": "memory:", "jsonl": str(work / "jsonl"), "sqlite": f"sqlite:///{work}/s.db"}
    if args.postgres:
        urls["postgresql"], schema = postgres_url(args.postgres)
    try:
        print(f"{args.appends} appends per round, best of {args.rounds}\n")
        print(f"{'backend':<12}{'plain/s':>12}{'leased/s':>12}{'ratio':>8}{'target':>9}")
        for name, url in urls.items():
            count = args.appends if name != "postgresql" else max(args.appends // 10, 50)
            best = {False: float("inf"), True: float("inf")}
            for round_ in range(args.rounds):
                for leased in (False, True):
                    sid = f"{name}-{round_}-{leased}"
                    best[leased] = min(best[leased], run(url, count, leased, sid))
            plain, leased_rate = count / best[False], count / best[True]
            print(
                f"{name:<12}{plain:>12,.0f}{leased_rate:>12,.0f}"
                f"{leased_rate / plain:>8.2f}{'>= 0.91':>9}"
            )
        print("\nhand-over after a steal (steal_after 0.5 s; target <= steal_after + 0.1 s)\n")
        print(f"{'backend':<12}{'seconds':>10}")
        for name, url in urls.items():
            if name != "memory":  # one memory store per process: nothing to steal from
                print(f"{name:<12}{hand_over(url, 0.5):>10.3f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if schema:
            drop_schema(args.postgres, schema)


if __name__ == "__main__":
    main()
