"""Reads from a streaming replica against reads from the primary, measured in the same run.

    python benchmarks/replicas.py [--primary DSN --replica DSN] [--sessions 200]
                                  [--events 50] [--ops 400] [--rounds 3]

Without ``--primary``/``--replica`` it starts a throwaway primary and a ``pg_basebackup``
replica of it on free loopback ports (``tests/pg_clusters.py``; PostgreSQL 15's programs under
``/usr/lib/postgresql/15/bin``, run as the ``postgres`` OS user when run as root) and stops
them at the end. A fresh schema holds ``--sessions`` sessions of ``--events`` events. In
interleaved rounds (each side first in turn), a store reading from the primary
(``open_store(primary)``) against one reading from the replica (``read_url=replica``):

* **open + read**: a cold open of a session and a read of all its events;
* **list newest 50**;
* **append**: one event per call (with a replica, each append also reads the primary's WAL
  position, for read-your-writes);
* **append, then read it**: an append and, at once, a read of the session from storage (a
  ``read`` that catches up: on the replica only once it has replayed the append);

then, with the replica's replay paused, what a session object's reads after its own append
cost: a catch-up and a range read ask the replica once and read from the primary; loading the
full window waits ``replica_wait``, then reads from the primary.
Both servers share this machine's CPUs here: the replica's figures show the path's cost, not
the capacity a replica on its own machine adds.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from agentsession import Event, Message, open_store  # noqa: E402
from agentsession.events import USER_MESSAGE  # noqa: E402


def said(text: str) -> Event:
    return Event.new(USER_MESSAGE, Message.user(text))


@contextlib.contextmanager
def servers(primary: str | None, replica: str | None) -> Iterator[tuple[str, str, Any]]:
    """The primary's and the replica's DSNs, and the throwaway pair (None when given)."""
    if primary and replica:
        yield primary, replica, None
        return
    from tests.pg_clusters import SKIP_REASON, replicated_pair

    if SKIP_REASON:
        sys.exit(f"cannot start a primary and a replica: {SKIP_REASON}")
    with replicated_pair() as pair:
        yield pair.primary.dsn, pair.replica.dsn, pair


def with_schema(dsn: str, schema: str) -> str:
    return f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"


def wait_replayed(primary: str, replica: str) -> None:
    import psycopg

    with psycopg.connect(primary, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()
        assert row is not None
    with psycopg.connect(replica, autocommit=True) as conn:
        while True:
            done = conn.execute(
                "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (row[0],)
            ).fetchone()
            if done and done[0]:
                return
            time.sleep(0.01)


def rate(count: int, run: Callable[[], None]) -> float:
    started = time.perf_counter()
    run()
    return count / (time.perf_counter() - started)


def measure(store: Any, ids: list[str], ops: int, tag: str) -> dict[str, float]:
    cold = list(ids)

    def open_read() -> None:
        for sid in cold[: ops // 4]:
            store.open(sid).read()

    def listing() -> None:
        for _ in range(ops // 4):
            store.list(limit=50)

    writers = [store.get(sid) for sid in ids[-20:]]
    for session in writers:
        session.read()

    def append() -> None:
        for i in range(ops):
            writers[i % len(writers)].append(said(f"{tag} {i}"))

    def append_read() -> None:
        for i in range(ops // 2):
            session = writers[i % len(writers)]
            session.append(said(f"{tag} read {i}"))
            session.read(after=session.latest_seq - 1)

    return {
        "open + read": rate(ops // 4, open_read),
        "list newest 50": rate(ops // 4, listing),
        "append": rate(ops, append),
        "append, then read it": rate(ops // 2, append_read),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--primary")
    parser.add_argument("--replica")
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--events", type=int, default=50)
    parser.add_argument("--ops", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--replica-wait", type=float, default=0.5)
    args = parser.parse_args()
    with servers(args.primary, args.replica) as (primary, replica, pair):
        schema = "bench_" + uuid.uuid4().hex[:10]
        primary_url, replica_url = with_schema(primary, schema), with_schema(replica, schema)
        try:
            run(args, primary, replica, primary_url, replica_url, pair)
        finally:
            import psycopg

            if pair is not None:
                pair.resume_replay()
            with psycopg.connect(primary, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def run(
    args: argparse.Namespace,
    primary: str,
    replica: str,
    primary_url: str,
    replica_url: str,
    pair: Any,
) -> None:
    loader = open_store(primary_url)
    ids = [f"s{n:05d}" for n in range(args.sessions)]
    for sid in ids:
        loader.get(sid).append_many([said(f"{sid} event {i}") for i in range(args.events)])
    loader.close()
    wait_replayed(primary, replica)
    print(f"{args.sessions} sessions of {args.events} events\n")
    results: dict[str, list[dict[str, float]]] = {"primary": [], "replica": []}
    for round_ in range(args.rounds):
        sides = ["primary", "replica"] if round_ % 2 == 0 else ["replica", "primary"]
        for side in sides:
            options: dict[str, Any] = {"pool_max_size": 2}
            if side == "replica":
                options.update(read_url=replica_url, replica_wait=args.replica_wait)
            store = open_store(primary_url, **options)
            try:
                start = (round_ * 2 + sides.index(side)) * (args.ops // 4) % len(ids)
                order = ids[start:] + ids[:start]
                results[side].append(measure(store, order, args.ops, f"{side}{round_}"))
            finally:
                store.close()
    print(f"{'operation':<24} {'primary /s':>11} {'replica /s':>11} {'ratio':>7}")
    for op in results["primary"][0]:
        best_p = max(r[op] for r in results["primary"])
        best_r = max(r[op] for r in results["replica"])
        pairs = zip(results["replica"], results["primary"], strict=True)
        ratio = statistics.median(r[op] / p[op] for r, p in pairs)
        print(f"{op:<24} {best_p:>11,.0f} {best_r:>11,.0f} {ratio:>7.2f}")
    if pair is None:
        print("\n(read-your-writes under a paused replica: needs the throwaway pair)")
        return
    loader = open_store(primary_url)
    loader.get("long").append_many([said(f"long {i}") for i in range(100)])
    loader.close()
    wait_replayed(primary, replica)
    store = open_store(primary_url, read_url=replica_url, replica_wait=args.replica_wait)
    try:
        session = store.get("long")  # opens its tail: 64 of the 100 events
        pair.pause_replay()
        session.append(said("while paused"))
        timed = {}
        for name, call in (
            ("catch-up (read of the last event)", lambda: session.read(after=100)),
            ("range read (all events)", lambda: session.read()),
            ("full window (messages()), first", lambda: session.messages()),
        ):
            started = time.perf_counter()
            call()
            timed[name] = time.perf_counter() - started
        pair.resume_replay()
        print(
            f"\nreplica paused, replica_wait={args.replica_wait:g} s, a session object that "
            "just appended:"
        )
        for name, seconds in timed.items():
            print(f"  {name:<36} {seconds * 1000:>8,.1f} ms")
    finally:
        store.close()


if __name__ == "__main__":
    main()
