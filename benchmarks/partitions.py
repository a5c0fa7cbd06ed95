"""A hash-partitioned events table against the plain one, measured in the same run.

    python benchmarks/partitions.py [--postgres DSN] [--events 200000] [--per-session 100]
                                    [--partitions 16] [--rounds 3] [--ops 400]

The DSN comes from ``--postgres`` or ``AGENTSESSION_TEST_POSTGRES_DSN``. Two fresh schemas
(``bench_<random>``, dropped at the end) get the same ``--events`` events in sessions of
``--per-session`` each, loaded in bulk by SQL (one ``INSERT ... SELECT``; rows as the store
writes them). One is laid out anew by ``partition_events`` (timed: the migration of a store
with data), the other stays one table. Then, in interleaved rounds (each layout going first in
turn), through the store's API:

* **append**: one event per call to sessions already open (a round robin over 100 of them);
* **open**: a cold open of a session no store object has opened, and a read of its last 20
  events;
* **list**: the 50 most recently updated sessions (the ``sessions`` table: unchanged by the
  layout, measured to show it);

printing the best rate of each side, the median of the rounds' ratios (partitioned / plain),
and, for maintenance, ``VACUUM (ANALYZE)`` of the whole plain table against one partition.
``--events 10000000`` is the size the docs talk about (it takes a while to load).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from _postgres import drop_schema, postgres_url

from agentsession import Event, Message, open_store
from agentsession.events import USER_MESSAGE

_LOAD = """
INSERT INTO {s}.sessions (id, created_at, updated_at, last_seq)
SELECT 'p' || lpad(n::text, 8, '0'), now() - interval '1 day', now() - n * interval '1 ms',
       %(per)s
FROM generate_series(1, %(sessions)s) AS n;
INSERT INTO {s}.events (session_id, seq, type, time, data)
SELECT 'p' || lpad(n::text, 8, '0'), q, 'user/message', now() - interval '1 day',
       convert_to('{{"role":"user","parts":[{{"type":"text","text":"message ' || q
                  || ' of session ' || n || '"}}]}}', 'UTF8')
FROM generate_series(1, %(sessions)s) AS n, generate_series(1, %(per)s) AS q;
"""


def load(url: str, schema: str, dsn: str, sessions: int, per: int) -> float:
    """Create the store's tables and load the events in bulk; returns the seconds taken."""
    import psycopg
    from psycopg import sql

    open_store(url).close()
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in _LOAD.strip().split(";\n"):
            if statement.strip():
                query = sql.SQL(statement).format(s=sql.Identifier(schema))
                conn.execute(query, {"per": per, "sessions": sessions})
        conn.execute(sql.SQL("VACUUM ANALYZE {}.events").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("VACUUM ANALYZE {}.sessions").format(sql.Identifier(schema)))
    return time.perf_counter() - started


def said(text: str) -> Event:
    return Event.new(USER_MESSAGE, Message.user(text))


def rate(count: int, run: Callable[[], None]) -> float:
    started = time.perf_counter()
    run()
    return count / (time.perf_counter() - started)


def measure(
    store: Any, sessions: int, ops: int, rng: random.Random, unseen: list[int]
) -> dict[str, float]:
    """One round's rates (operations per second) on ``store``."""
    ids = [f"p{n:08d}" for n in rng.sample(range(1, sessions + 1), 100)]
    opened = [store.get(sid) for sid in ids]

    def append() -> None:
        for i in range(ops):
            opened[i % len(opened)].append(said(f"appended {i}"))

    cold = [unseen.pop() for _ in range(min(ops // 4, len(unseen)))]

    def open_cold() -> None:
        for n in cold:
            session = store.get(f"p{n:08d}")
            last = session.latest_seq
            session.read(after=max(0, last - 20))

    def listing() -> None:
        for _ in range(ops // 4):
            store.list(limit=50)

    return {
        "append": rate(ops, append),
        "open + read last 20": rate(len(cold), open_cold),
        "list newest 50": rate(ops // 4, listing),
    }


def vacuum_seconds(dsn: str, relation: str) -> float:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        conn.execute(f"VACUUM (ANALYZE) {relation}")
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", default=os.environ.get("AGENTSESSION_TEST_POSTGRES_DSN"))
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--per-session", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ops", type=int, default=400)
    args = parser.parse_args()
    if not args.postgres:
        sys.exit("give --postgres DSN or set AGENTSESSION_TEST_POSTGRES_DSN")
    from agentsession.backends.postgres import partition_events

    dsn = args.postgres
    sessions = max(1, args.events // args.per_session)
    events = sessions * args.per_session
    plain_url, plain = postgres_url(dsn)
    part_url, part = postgres_url(dsn)
    try:
        seconds = load(plain_url, plain, dsn, sessions, args.per_session)
        print(f"loaded {events:,} events in {sessions:,} sessions per schema ({seconds:.1f} s)")
        load(part_url, part, dsn, sessions, args.per_session)
        started = time.perf_counter()
        copied = partition_events(part_url, args.partitions)
        migration = time.perf_counter() - started
        print(
            f"partition_events({args.partitions}): {copied:,} events copied in "
            f"{migration:.1f} s ({copied / migration:,.0f} events/s)\n"
        )
        stores = {
            "plain": open_store(plain_url, pool_max_size=2),
            "partitioned": open_store(part_url, pool_max_size=2, partitions=args.partitions),
        }
        rng = random.Random(7)
        unseen = {name: list(range(1, sessions + 1)) for name in stores}
        for name in unseen:
            random.Random(11).shuffle(unseen[name])
        results: dict[str, list[dict[str, float]]] = {name: [] for name in stores}
        order = list(stores)
        for round_ in range(args.rounds):
            for name in order if round_ % 2 == 0 else reversed(order):
                results[name].append(measure(stores[name], sessions, args.ops, rng, unseen[name]))
        for store in stores.values():
            store.close()
        print(f"{'operation':<22} {'plain /s':>10} {'partitioned /s':>15} {'ratio':>7}")
        for op in results["plain"][0]:
            best_plain = max(r[op] for r in results["plain"])
            best_part = max(r[op] for r in results["partitioned"])
            pairs = zip(results["partitioned"], results["plain"], strict=True)
            ratios = [p[op] / q[op] for p, q in pairs]
            print(
                f"{op:<22} {best_plain:>10,.0f} {best_part:>15,.0f} "
                f"{statistics.median(ratios):>7.2f}"
            )
        whole = vacuum_seconds(dsn, f'"{plain}".events')
        one = vacuum_seconds(dsn, f'"{part}".events_{args.partitions}_0')
        print(
            f"\nVACUUM (ANALYZE): the plain table {whole * 1000:,.0f} ms, one of "
            f"{args.partitions} partitions {one * 1000:,.0f} ms (ratio {one / whole:.2f})"
        )
    finally:
        drop_schema(dsn, plain)
        drop_schema(dsn, part)


if __name__ == "__main__":
    main()
