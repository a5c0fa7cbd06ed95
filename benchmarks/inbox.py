"""What a message costs through the inbox (``store.deliver`` then ``session.pending`` under the
lease and ``delivery.start_turn``) against the same turn recorded directly, on every backend,
measured in one run.

    python benchmarks/inbox.py [--messages 300] [--rounds 5] [--postgres DSN]

Per message, both paths record a turn holding the user message (``turn/start``, the message,
``turn/end``). The direct path does only that; the inbox path first delivers the message (one
more append, of a ``session/delivery``) and then drains it: ``pending`` finds it and
``start_turn`` opens its turn. Each round delivers ``--messages`` messages then drains them
all, alternating with the direct path on a fresh session, and each case keeps its best round.
The ratio is the inbox's cost over the direct turn's [target <= 2.0]. The DSN comes from
``--postgres`` or ``AGENTSESSION_TEST_POSTGRES_DSN`` (a fresh schema, dropped at the end).
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


def direct(store: ags.BaseStore, sid: str, texts: list[str]) -> float:
    session = store.get(sid)
    with store.lock(sid, timeout=10):
        start = time.perf_counter()
        for text in texts:
            with session.turn() as turn:
                turn.user(text)
        return time.perf_counter() - start


def inbox(store: ags.BaseStore, sid: str, texts: list[str]) -> float:
    session = store.get(sid)
    start = time.perf_counter()
    for i, text in enumerate(texts):
        store.deliver(sid, text, id=f"{sid}-{i}")
    with store.lock(sid, timeout=10) as lease:
        for delivery in session.pending(lease):
            with delivery.start_turn():
                pass
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--postgres", default=os.environ.get("AGENTSESSION_TEST_POSTGRES_DSN"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="agentsession-inbox-"))
    schema = ""
    urls = {"memory": "memory:", "jsonl": str(work / "jsonl"), "sqlite": f"sqlite:///{work}/s.db"}
    if args.postgres:
        urls["postgresql"], schema = postgres_url(args.postgres)
    try:
        print(f"{args.messages} messages per round, best of {args.rounds}\n")
        print(f"{'backend':<12}{'direct/s':>11}{'inbox/s':>11}{'ratio':>8}{'target':>9}")
        for name, url in urls.items():
            count = args.messages if name != "postgresql" else max(args.messages // 5, 20)
            texts = [f"message {i}" for i in range(count)]
            best = {"direct": float("inf"), "inbox": float("inf")}
            with ags.open_store(url) as store:
                for round_ in range(args.rounds):
                    best["direct"] = min(best["direct"], direct(store, f"d{round_}", texts))
                    best["inbox"] = min(best["inbox"], inbox(store, f"i{round_}", texts))
            rate = {k: count / v for k, v in best.items()}
            ratio = best["inbox"] / best["direct"]
            print(
                f"{name:<12}{rate['direct']:>11,.0f}{rate['inbox']:>11,.0f}"
                f"{ratio:>8.2f}{'<= 2.00':>9}"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if schema:
            drop_schema(args.postgres, schema)


if __name__ == "__main__":
    main()
