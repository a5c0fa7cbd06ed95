"""``AgentSessionStore`` (the Claude Agent SDK's ``SessionStore``) on each backend.

    python benchmarks/integrations_claude.py [--batches 100] [--size 10] [--postgres DSN]

Workload: ``--batches`` appends of ``--size`` transcript entries each (alternately a ~200 B
user entry and an assistant entry with a ~300 B text block and usage, each with a ``uuid``),
as the SDK's transcript mirror appends them (one batch per flush), then one ``load`` of the
whole transcript from a new store object. Measured with the summary kept on append (the
default) and with ``summaries=False``. The SDK's own ``InMemorySessionStore`` (a list append:
the ceiling, it persists nothing) is the baseline. The PostgreSQL rows need ``--postgres`` or
``AGENTSESSION_TEST_POSTGRES_DSN`` (a fresh schema, dropped afterwards).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid
from typing import Any

from claude_agent_sdk import InMemorySessionStore
from claude_agent_sdk.types import SessionKey

from agentsession.integrations.claude import AgentSessionStore

KEY: SessionKey = {"project_key": "-home-me-app", "session_id": str(uuid.uuid4())}


def entry(i: int) -> Any:
    if i % 2 == 0:
        return {
            "type": "user",
            "uuid": str(uuid.uuid4()),
            "message": {"role": "user", "content": f"question {i} " * 18},
        }
    text = {"type": "text", "text": f"answer {i} " * 30}
    usage = {"input_tokens": 100 + i, "output_tokens": 30}
    message = {"id": f"msg_{i}", "role": "assistant", "content": [text], "usage": usage}
    return {"type": "assistant", "uuid": str(uuid.uuid4()), "message": message}


async def measure(make: Any, batches: list[list[Any]]) -> tuple[float, float]:
    store = make()
    start = time.perf_counter()
    for batch in batches:
        await store.append(KEY, batch)
    appended = time.perf_counter() - start
    if isinstance(store, AgentSessionStore):
        store.close()
        store = make()
    start = time.perf_counter()
    loaded = await store.load(KEY)
    read = time.perf_counter() - start
    assert loaded is not None and len(loaded) == sum(len(b) for b in batches)
    if isinstance(store, AgentSessionStore):
        store.close()
    return appended, read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--size", type=int, default=10)
    parser.add_argument("--postgres", default=os.environ.get("AGENTSESSION_TEST_POSTGRES_DSN"))
    args = parser.parse_args()
    batches = [[entry(b * args.size + i) for i in range(args.size)] for b in range(args.batches)]
    folder = tempfile.mkdtemp(prefix="bench-claude-")
    targets = {"jsonl": f"{folder}/jsonl", "sqlite": f"sqlite:///{folder}/s.db"}
    schema = f"bench_claude_{uuid.uuid4().hex[:8]}"
    if args.postgres:
        joiner = "&" if "?" in args.postgres else "?"
        targets["postgresql"] = f"{args.postgres}{joiner}schema={schema}"
    rows: list[tuple[str, float, float]] = []
    memory = InMemorySessionStore()
    rows.append(("InMemorySessionStore (SDK)", *asyncio.run(measure(lambda: memory, batches))))
    try:
        for name, url in targets.items():
            for summaries in (True, False):
                label = f"{name}{'' if summaries else ', summaries=False'}"
                KEY["session_id"] = str(uuid.uuid4())

                def make(url: str = url, summaries: bool = summaries) -> AgentSessionStore:
                    return AgentSessionStore(store=url, summaries=summaries)

                rows.append((label, *asyncio.run(measure(make, batches))))
    finally:
        if args.postgres:
            import psycopg

            with psycopg.connect(args.postgres, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    entries = args.batches * args.size
    print(f"{args.batches} appends of {args.size} entries, then load of {entries} entries")
    print(f"{'store':34} {'ms/append':>10} {'entries/s':>10} {'load ms':>8}")
    for label, appended, read in rows:
        per = appended / args.batches * 1000
        print(f"{label:34} {per:10.2f} {entries / appended:10.0f} {read * 1000:8.1f}")


if __name__ == "__main__":
    main()
