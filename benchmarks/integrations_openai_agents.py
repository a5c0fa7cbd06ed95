"""``OpenAIAgentsSession`` against the OpenAI Agents SDK's own ``SQLiteSession``, in one run.

Workload: items of the shapes the SDK stores for an agent loop (a user message, a reasoning
item with 1 KB of encrypted content, a function call, its output, an assistant message; 370
bytes on average), the same for every session type.

    python benchmarks/integrations_openai_agents.py [--items 16000] [--repeat 7]
        [--processes-items 500] [--postgres DSN]

Printed, for ``SQLiteSession`` (a file, WAL) and ``OpenAIAgentsSession`` on the default store
(JSONL at durability ``flush``), JSONL at ``fsync``, SQLite, memory and (with a DSN, from
``--postgres`` or ``AGENTSESSION_TEST_POSTGRES_DSN``; a fresh schema, dropped after)
PostgreSQL:

* append items/s: ``add_items`` of one item per call, ``--items`` items;
* reload ms: a new session object on a newly opened store, ``get_items()`` of every item
  (best of ``--repeat``);
* again ms: ``get_items()`` on that object after one more ``add_items`` (what an agent loop
  pays per turn: only the new events are read);
* last-20 ms: a new object, ``get_items(limit=20)``;
* two processes appending ``--processes-items`` items each, one per call, to one session:
  items stored, calls that raised, and calls that returned but whose item is missing (lost).

Targets, at the default durability (JSONL, ``flush``): append >= 10x ``SQLiteSession``'s rate;
reload <= 0.5x its time.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _postgres import drop_schema, with_schema
from agents import SQLiteSession

from agentsession.integrations.openai_agents import OpenAIAgentsSession

Factory = Callable[[], Any]


def sdk_items(count: int) -> list[dict[str, Any]]:
    """``count`` items of an agent loop, shaped (and keyed in the order) as the SDK stores
    them."""
    items: list[dict[str, Any]] = []
    encrypted = "gAAAAABo" + "Q2lwaGVyVGV4dA" * 80 + "=="  # reasoning state: about 1 KB
    for i in range(count):
        kind = i % 5
        item: dict[str, Any]
        if kind == 0:
            item = {"content": f"Question {i}: the weather in Paris today?", "role": "user"}
        elif kind == 1:
            item = {
                "id": f"rs_{i:08x}",
                "summary": [{"text": "The user wants the weather.", "type": "summary_text"}],
                "type": "reasoning",
                "encrypted_content": encrypted,
            }
        elif kind == 2:
            item = {
                "arguments": '{"city": "Paris", "unit": "celsius"}',
                "call_id": f"call_{i:08x}",
                "name": "get_weather",
                "type": "function_call",
                "id": f"fc_{i:08x}",
            }
        elif kind == 3:
            item = {
                "call_id": f"call_{i - 1:08x}",
                "output": json.dumps({"city": "Paris", "sky": "sunny", "hourly": list(range(24))}),
                "type": "function_call_output",
            }
        else:
            item = {
                "id": f"msg_{i:08x}",
                "content": [
                    {
                        "annotations": [],
                        "text": f"It is sunny in Paris (answer {i}).",
                        "type": "output_text",
                        "logprobs": [],
                    }
                ],
                "role": "assistant",
                "status": "completed",
                "type": "message",
            }
        items.append(item)
    return items


async def append_all(session: Any, items: list[dict[str, Any]]) -> float:
    start = time.perf_counter()
    for item in items:
        await session.add_items([item])
    return time.perf_counter() - start


async def timed_get(session: Any, limit: int | None = None) -> tuple[float, int]:
    gc.collect()
    start = time.perf_counter()
    got = await session.get_items(limit)
    return time.perf_counter() - start, len(got)


async def close(session: Any) -> None:
    if isinstance(session, OpenAIAgentsSession):
        await session.aclose()  # on the loop: also closes what the store opened on it
    else:
        session.close()
    store = getattr(session, "bench_store", None)
    if store is not None:  # opened for this object alone (with options)
        store.close()


async def append_phase(factory: Factory, items: list[dict[str, Any]]) -> float:
    """Seconds to add ``items`` one per call to a new session object."""
    writer = factory()
    seconds = await append_all(writer, items)
    await close(writer)
    return seconds


async def read_round(factory: Factory, count: int) -> dict[str, float]:
    """One round of the reads, in seconds: reload, again (after one more item), last 20."""
    gc.collect()
    start = time.perf_counter()
    reader = factory()  # a new object on a newly opened store: nothing cached
    got = await reader.get_items()
    reload = time.perf_counter() - start
    assert len(got) == count, (len(got), count)
    await reader.add_items([got[0]])
    again, seen = await timed_get(reader)
    assert seen == count + 1
    await reader.pop_item()
    await close(reader)
    limited = factory()
    last20, seen = await timed_get(limited, 20)
    assert seen == 20
    await close(limited)
    return {"reload": reload, "again": again, "last20": last20}


CHILD = textwrap.dedent(
    """
    import asyncio, json, os, sys, time
    kind, target, name, count, go = sys.argv[1:6]
    if kind == "sqlitesession":
        from agents import SQLiteSession
        session = SQLiteSession("shared", target)
    else:
        from agentsession.integrations.openai_agents import OpenAIAgentsSession
        session = OpenAIAgentsSession("shared", target)
    while not os.path.exists(go):
        time.sleep(0.0005)

    async def main():
        ok, errors = [], []
        start = time.perf_counter()
        for i in range(int(count)):
            content = f"{name}-{i}"
            try:
                await session.add_items([{"role": "user", "content": content}])
                ok.append(content)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
        elapsed = time.perf_counter() - start
        session.close()
        print(json.dumps({"ok": ok, "errors": errors, "seconds": elapsed}))

    asyncio.run(main())
    """
)


async def stored_contents(factory: Factory) -> list[str]:
    session = factory()
    got = [str(item.get("content")) for item in await session.get_items()]
    await close(session)
    return got


def two_processes(
    kind: str, target: str, count: int, factory: Factory, work: Path
) -> dict[str, Any]:
    """Two processes appending ``count`` items each, one per call, to one session."""
    go = work / f"go-{uuid.uuid4().hex}"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, kind, target, name, str(count), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for name in "ab"
    ]
    time.sleep(3.0)  # both imported and waiting
    go.write_text("go")
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise SystemExit(err.decode(errors="replace"))
        reports.append(json.loads(out))
    stored = asyncio.run(stored_contents(factory))
    acknowledged = [c for r in reports for c in r["ok"]]
    return {
        "stored": len(stored),
        "errors": sum(len(r["errors"]) for r in reports),
        "lost": len(set(acknowledged) - set(stored)),
        "duplicated": len(stored) - len(set(stored)),
        "seconds": max(r["seconds"] for r in reports),
        "first_error": next((e for r in reports for e in r["errors"]), ""),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--items", type=int, default=16000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--processes-items", type=int, default=500)
    parser.add_argument("--postgres", default=os.environ.get("AGENTSESSION_TEST_POSTGRES_DSN", ""))
    args = parser.parse_args()

    items = sdk_items(args.items)
    average = sum(len(json.dumps(i)) for i in items) / len(items)
    work = Path(tempfile.mkdtemp(prefix="agentsession-bench-oa-"))
    schema = "bench_" + uuid.uuid4().hex[:12]

    def ours(target: str, **options: Any) -> Factory:
        def make() -> OpenAIAgentsSession:
            if not options:
                return OpenAIAgentsSession("bench", target)  # the store opened from the URL
            from agentsession import open_store

            session = OpenAIAgentsSession("bench", open_store(target, **options))
            session.bench_store = session.store.sync  # type: ignore[attr-defined]
            return session

        return make

    from agentsession import open_store

    memory_store = open_store("memory:")
    sdk_db = work / "sdk.db"
    # (label, factory, (kind, target) of the two-process run or None)
    cases: list[tuple[str, Factory, tuple[str, str] | None]] = [
        (
            "SQLiteSession (file, WAL)",
            lambda: SQLiteSession("bench", sdk_db),
            ("sqlitesession", str(work / "sdk-procs.db")),
        ),
        ("ours: JSONL, flush (default)", ours(str(work / "jsonl")), ("ours", str(work / "procs"))),
        ("ours: JSONL, fsync", ours(str(work / "fsync"), durability="fsync"), None),
        (
            "ours: SQLite",
            ours(f"sqlite:///{work}/ours.db"),
            ("ours", f"sqlite:///{work}/ours-procs.db"),
        ),
        ("ours: memory (one store)", lambda: OpenAIAgentsSession("bench", memory_store), None),
    ]
    if args.postgres:
        url = with_schema(args.postgres, schema)
        procs_url = with_schema(args.postgres, schema + "p")
        cases.append(("ours: PostgreSQL", ours(url), ("ours", procs_url)))

    results: dict[str, dict[str, float]] = {}
    processes: dict[str, dict[str, Any]] = {}
    try:
        for label, factory, _ in cases:
            print(f"appending: {label} ...", file=sys.stderr)
            results[label] = {"append": asyncio.run(append_phase(factory, items))}
        # The reads alternate between the session types round by round, each keeping its
        # best round: the machine's load drifts more than the differences measured.
        for round_number in range(args.repeat):
            print(f"reading, round {round_number + 1} ...", file=sys.stderr)
            for label, factory, _ in cases:
                for name, seconds in asyncio.run(read_round(factory, len(items))).items():
                    results[label][name] = min(seconds, results[label].get(name, float("inf")))
        for label, _, procs in cases:
            if procs is None:
                continue
            print(f"two processes: {label} ...", file=sys.stderr)
            kind, target = procs

            def reader(kind: str = kind, target: str = target) -> Any:
                if kind == "sqlitesession":
                    return SQLiteSession("shared", target)
                return OpenAIAgentsSession("shared", target)

            reader().close()  # create the store first
            processes[label] = two_processes(kind, target, args.processes_items, reader, work)
    finally:
        memory_store.close()
        shutil.rmtree(work, ignore_errors=True)
        if args.postgres:
            drop_schema(args.postgres, schema)
            drop_schema(args.postgres, schema + "p")

    base = results[cases[0][0]]
    print(
        f"\nOpenAI Agents SDK sessions: {args.items:,} items of the SDK's shapes "
        f"({average:.0f} bytes on average), add_items one item per call; reads: best of "
        f"{args.repeat} alternating rounds\n"
    )
    header = (
        f"{'session':<30}{'append/s':>10}{'ratio':>7}{'target':>8}"
        f"{'reload ms':>11}{'ratio':>7}{'target':>8}{'again ms':>10}{'last-20 ms':>12}"
    )
    print(header)
    for label, _, _ in cases:
        r = results[label]
        rate = args.items / r["append"]
        is_default = label.startswith("ours: JSONL, flush")
        print(
            f"{label:<30}{rate:>10,.0f}{base['append'] / r['append']:>7.1f}"
            f"{'>= 10' if is_default else '':>8}{r['reload'] * 1000:>11.1f}"
            f"{r['reload'] / base['reload']:>7.2f}{'<= 0.5' if is_default else '':>8}"
            f"{r['again'] * 1000:>10.1f}{r['last20'] * 1000:>12.2f}"
        )
    print(
        f"\nTwo processes appending {args.processes_items} items each (one per call) to one "
        "session\n"
    )
    print(f"{'session':<30}{'stored':>8}{'errors':>8}{'lost':>6}{'duplicated':>12}{'seconds':>9}")
    for label, p in processes.items():
        print(
            f"{label:<30}{p['stored']:>8}{p['errors']:>8}{p['lost']:>6}{p['duplicated']:>12}"
            f"{p['seconds']:>9.2f}"
        )
        if p["first_error"]:
            print(f"{'':<30}first error: {p['first_error'][:70]}")


if __name__ == "__main__":
    main()
