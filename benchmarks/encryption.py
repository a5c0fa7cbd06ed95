"""What encryption at rest costs: encrypted against plain append and reload, per backend.

Workload: an agent transcript (see ``_workload.py``), appended one event per call at
durability ``flush`` as an agent loop does; reload is a fresh store reading every event of the
session. Each backend (JSONL, SQLite, and PostgreSQL when a DSN is given) runs plain and
encrypted in the same run, in interleaved rounds (fresh stores each), keeping each case's best
round. The encrypted stores are opened with ``key=`` so the KDF stays out of the timed loop;
what the KDF costs once per open with a passphrase (scrypt, n=2^15, r=8, p=1) is reported on
its own line.

    python benchmarks/encryption.py [--turns 300] [--rounds 5]
        [--dsn postgresql://postgres@127.0.0.1:5432/test]

Targets: encrypted JSONL append >= 0.5x plain, encrypted JSONL reload >= 0.5x plain (ratios
are throughput: encrypted / plain, higher is better).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _workload import transcript

import agentsession as ags

KEY = bytes(range(32))
PASSPHRASE = "benchmark passphrase"


def append(url: str, items: list[tuple[str, Any]], secret: dict[str, Any]) -> float:
    """Seconds to append ``items`` one call each (events built before the clock starts)."""
    store = ags.open_store(url, durability="flush", **secret)
    try:
        session = store.get("bench")
        events = [ags.Event.new(kind, payload, agent="coder") for kind, payload in items]
        start = time.perf_counter()
        for event in events:
            session.append(event)
        return time.perf_counter() - start
    finally:
        store.close()


def reload(url: str, secret: dict[str, Any], expected: int) -> float:
    """Seconds for a fresh store to open and read every event of the session."""
    start = time.perf_counter()
    store = ags.open_store(url, create=False, **secret)
    try:
        count = len(store.get("bench").read())
    finally:
        store.close()
    elapsed = time.perf_counter() - start
    assert count == expected, (count, expected)
    return elapsed


def kdf_open(url: str) -> float:
    """Seconds to open an encrypted store with its passphrase (the KDF) and close it."""
    start = time.perf_counter()
    ags.open_store(url, create=False, passphrase=PASSPHRASE).close()
    return time.perf_counter() - start


class Backend:
    """Makes fresh store URLs of one backend and removes them afterwards."""

    def __init__(self, name: str, work: Path, dsn: str = "") -> None:
        self.name = name
        self.work = work
        self.dsn = dsn
        self.schemas: list[str] = []

    def fresh(self) -> str:
        tag = uuid.uuid4().hex[:12]
        if self.name == "jsonl":
            return str(self.work / f"jsonl-{tag}")
        if self.name == "sqlite":
            return f"sqlite:///{self.work / f'sqlite-{tag}.db'}"
        schema = f"bench_enc_{tag}"
        self.schemas.append(schema)
        sep = "&" if "?" in self.dsn else "?"
        return f"{self.dsn}{sep}schema={schema}"

    def cleanup(self) -> None:
        if self.schemas:
            import psycopg
            from psycopg import sql

            with psycopg.connect(self.dsn, autocommit=True) as conn:
                for schema in self.schemas:
                    conn.execute(
                        sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                    )
            self.schemas.clear()


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dsn", default=os.environ.get("AGENTSESSION_TEST_POSTGRES_DSN", ""))
    args = parser.parse_args()

    items = list(transcript(args.turns))
    work = Path(tempfile.mkdtemp(prefix="agentsession-bench-enc-"))
    backends = [Backend("jsonl", work), Backend("sqlite", work)]
    if args.dsn:
        backends.append(Backend("postgres", work, args.dsn))
    best: dict[tuple[str, str], float] = {}

    def keep(key: tuple[str, str], seconds: float) -> None:
        best[key] = min(seconds, best.get(key, float("inf")))

    cases: list[tuple[str, dict[str, Any]]] = [("plain", {}), ("encrypted", {"key": KEY})]
    try:
        for round_ in range(args.rounds):
            for backend in backends:
                order = cases if round_ % 2 == 0 else cases[::-1]  # interleaved
                for label, secret in order:
                    url = backend.fresh()
                    keep((backend.name, f"append {label}"), append(url, items, secret))
                    keep((backend.name, f"reload {label}"), reload(url, secret, len(items)))
                url = backend.fresh()
                ags.open_store(url, passphrase=PASSPHRASE).close()
                keep((backend.name, "kdf open"), kdf_open(url))
                backend.cleanup()
    finally:
        for backend in backends:
            backend.cleanup()
        shutil.rmtree(work, ignore_errors=True)

    n = len(items)
    print(
        f"{args.turns} turns = {n} events, one append per event, durability flush; "
        f"best of {args.rounds} interleaved rounds; encrypted stores opened with key=\n"
    )
    print(f"{'backend':<10}{'case':<20}{'events/s':>12}{'ms':>10}{'ratio':>8}{'target':>9}")
    rate: Callable[[str, str], float] = lambda b, c: n / best[(b, c)]  # noqa: E731
    for backend in backends:
        b = backend.name
        for what in ("append", "reload"):
            plain, enc = rate(b, f"{what} plain"), rate(b, f"{what} encrypted")
            target = ">= 0.50" if b == "jsonl" else ""
            ms = best[(b, f"{what} plain")] * 1e3
            print(f"{b:<10}{what + ' plain':<20}{plain:>12,.0f}{ms:>10.1f}")
            print(
                f"{b:<10}{what + ' encrypted':<20}{enc:>12,.0f}"
                f"{best[(b, what + ' encrypted')] * 1e3:>10.1f}{enc / plain:>8.2f}{target:>9}"
            )
    for backend in backends:
        b = backend.name
        print(
            f"{b:<10}{'open, passphrase':<20}{'':>12}{best[(b, 'kdf open')] * 1e3:>10.1f}"
            "   (scrypt, once per open)"
        )


if __name__ == "__main__":
    main()
