"""The Redis store against baselines measured in the same run.

    python benchmarks/redis.py [--url redis://127.0.0.1:6379/0] [--appends 2000] [--rounds 3]
                               [--items 1000] [--writer-items 300]

The URL comes from ``--url`` or ``AGENTSESSION_TEST_REDIS_URL``; every key the run writes is
under a fresh prefix (``bench<random>:``) and deleted at the end. Printed, each with its
baseline and the ratio (targets in brackets):

* **append**: events/s appending one event per call (the agent-transcript workload of
  ``_workload.py``) vs a raw redis-py loop of ``XADD`` of the same event lines to one stream;
  interleaved rounds, best rates; with and without the catalog and search index (one script
  per append on one server) [ratio >= 0.7]; then one more run of each with the server's
  ``INFO commandstats`` read before and after (deltas: other clients of the server count too):
  server time per append and the commands the script runs per append;
* **reload**: a new store object opening the session and reading every event vs a raw
  ``XRANGE`` of the stream (bytes, nothing decoded), best of the rounds [ratio <= 1.5];
* **OpenAI Agents SDK**: items/s added one per ``add_items`` call by ``OpenAIAgentsSession``
  over this store vs the SDK's own ``RedisSession`` (``agents.extensions.memory``) on the same
  server, and ``get_items()`` of the whole session by a new object [ratio >= 2];
* **two writers**: two processes adding ``--writer-items`` items each to one session through
  each; items stored, lost and duplicated;
* **catalog** (``--catalog-sessions``, 0 to skip): the probes of ``benchmarks/catalog.py`` on
  a store of that many sessions of 10 messages (the issue's scale is 100,000): the first page
  of ``list(order="updated")``, a page filtered by tenant and tag, a two-word search, each in
  a fresh process (median of 3; ``catalog.py``'s probe imports redis-py inside what it times,
  so each is also timed after that import), a search for one common word alone (every
  document holding it matches: the top 20 by rank), and appending with the catalog kept against
  ``catalog=False`` [<= 20 ms, <= 30 ms, <= 100 ms, <= 1.3x].
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "redis":
    # A script run from this folder (benchmarks/catalog.py's probes) that imports redis-py
    # finds this file first: hand the import over to redis-py itself.
    _HERE = Path(__file__).resolve().parent
    _SAVED = sys.path[:]
    del sys.modules["redis"]
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
    try:
        import redis as _real
    finally:
        sys.path[:] = _SAVED
    sys.modules["redis"] = _real  # what the import statement returns (the rest is harmless)

import argparse
import asyncio
import json
import os
import subprocess
import textwrap
import time
import uuid
from typing import Any

# This file is named redis.py: import redis-py before the benchmarks' folder goes on the path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
import msgspec  # noqa: E402
import redis  # noqa: E402

sys.path.insert(0, str(_HERE))
from _workload import transcript  # noqa: E402

import agentsession as ags  # noqa: E402
from agentsession.events import encode_event  # noqa: E402

URL = os.environ.get("AGENTSESSION_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def events(count: int) -> list[tuple[str, Any]]:
    out = []
    for kind, payload in transcript(count // 15 + 1):
        out.append((kind, payload))
        if len(out) == count:
            break
    return out


def ours_append(url: str, work: list[tuple[str, Any]], **options: Any) -> float:
    with ags.open_store(url, **options) as store:
        session = store.get(f"bench-{uuid.uuid4().hex}")
        start = time.perf_counter()
        for kind, payload in work:
            session.append(ags.Event.new(kind, payload))
        return len(work) / (time.perf_counter() - start)


def raw_append(client: redis.Redis, key: str, work: list[tuple[str, Any]]) -> float:
    lines = []
    for seq, (kind, payload) in enumerate(work, start=1):
        event = msgspec.structs.replace(ags.Event.new(kind, payload), seq=seq)
        lines.append(encode_event(event))
    start = time.perf_counter()
    for line in lines:
        client.xadd(key, {"e": line})
    return len(lines) / (time.perf_counter() - start)


def commandstats(client: redis.Redis) -> dict[str, tuple[int, int]]:
    """``INFO commandstats``: command -> (calls, microseconds)."""
    return {
        name.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
        for name, v in client.info("commandstats").items()
    }


def server_cost(client: redis.Redis, run: Any, count: int, command: str) -> str:
    """What ``run()`` (``count`` appends, each one ``command`` call) cost the server."""
    before = commandstats(client)
    run()
    after = commandstats(client)
    delta = {
        k: (v[0] - before.get(k, (0, 0))[0], v[1] - before.get(k, (0, 0))[1])
        for k, v in after.items()
    }
    calls, usec = delta.get(command.lower(), (0, 0))
    inner = (
        sum(c for k, (c, _) in delta.items() if k != command.lower()) if command != "XADD" else 0
    )
    return (
        f"{usec / count:6.1f} us of server time per append ({calls} {command}),"
        f" {inner / count:.1f} other commands per append"
    )


def ours_reload(url: str, sid: str) -> tuple[float, int]:
    start = time.perf_counter()
    with ags.open_store(url) as store:
        got = store.get(sid).read()
    return time.perf_counter() - start, len(got)


def raw_reload(client: redis.Redis, key: str) -> tuple[float, int]:
    start = time.perf_counter()
    got = client.xrange(key)
    return time.perf_counter() - start, len(got)


def sdk_items(count: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for i in range(count):
        if i % 3 == 0:
            items.append({"content": f"Question {i}: the weather in Paris today?", "role": "user"})
        elif i % 3 == 1:
            items.append(
                {
                    "arguments": '{"city": "Paris", "unit": "celsius"}',
                    "call_id": f"call_{i:08x}",
                    "name": "get_weather",
                    "type": "function_call",
                    "id": f"fc_{i:08x}",
                }
            )
        else:
            items.append(
                {
                    "call_id": f"call_{i - 1:08x}",
                    "output": json.dumps({"city": "Paris", "hourly": list(range(24))}),
                    "type": "function_call_output",
                }
            )
    return items


def sdk_session(kind: str, url: str, prefix: str, name: str) -> Any:
    if kind == "redissession":
        from agents.extensions.memory.redis_session import RedisSession

        return RedisSession.from_url(name, url=url.split("?")[0], key_prefix=prefix + "sdk")
    from agentsession.integrations.openai_agents import OpenAIAgentsSession

    return OpenAIAgentsSession(name, url)


async def sdk_round(
    kind: str, url: str, prefix: str, items: list[dict[str, Any]]
) -> dict[str, float]:
    name = f"sdk-{uuid.uuid4().hex}"
    session = sdk_session(kind, url, prefix, name)
    start = time.perf_counter()
    for item in items:
        await session.add_items([item])
    rate = len(items) / (time.perf_counter() - start)
    await _close(session)
    reader = sdk_session(kind, url, prefix, name)
    start = time.perf_counter()
    got = await reader.get_items()
    reload = time.perf_counter() - start
    assert len(got) == len(items), (kind, len(got))
    await _close(reader)
    return {"rate": rate, "reload": reload}


async def _close(session: Any) -> None:
    closer = getattr(session, "aclose", None)
    if closer is not None:
        await closer()
    else:
        result = session.close()
        if asyncio.iscoroutine(result):
            await result


CHILD = textwrap.dedent(
    """
    import asyncio, json, os, sys, time
    kind, url, prefix, name, who, count, go = sys.argv[2:9]
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_redis", sys.argv[1])
    bench = importlib.util.module_from_spec(spec); spec.loader.exec_module(bench)

    async def main():
        session = bench.sdk_session(kind, url, prefix, name)
        while not os.path.exists(go):
            await asyncio.sleep(0.0005)
        ok, errors = [], []
        for i in range(int(count)):
            content = f"{who}-{i}"
            try:
                await session.add_items([{"role": "user", "content": content}])
                ok.append(content)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
        await bench._close(session)
        print(json.dumps({"ok": ok, "errors": errors}))

    asyncio.run(main())
    """
)


def two_writers(kind: str, url: str, prefix: str, count: int) -> dict[str, Any]:
    name = f"two-{uuid.uuid4().hex}"
    go = Path(f"/tmp/{name}.go")
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                CHILD,
                __file__,
                kind,
                url,
                prefix,
                name,
                who,
                str(count),
                str(go),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for who in "ab"
    ]
    time.sleep(3.0)
    go.write_text("go")
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise SystemExit(err.decode(errors="replace"))
        reports.append(json.loads(out))
    go.unlink()

    async def stored() -> list[str]:
        reader = sdk_session(kind, url, prefix, name)
        got = [str(item.get("content")) for item in await reader.get_items()]
        await _close(reader)
        return got

    contents = asyncio.run(stored())
    acknowledged = [c for r in reports for c in r["ok"]]
    in_order = all(
        [c for c in contents if c.startswith(who)] == [f"{who}-{i}" for i in range(count)]
        for who in "ab"
    )
    return {
        "stored": len(contents),
        "errors": sum(len(r["errors"]) for r in reports),
        "lost": len(set(acknowledged) - set(contents)),
        "duplicated": len(contents) - len(set(contents)),
        "each writer's order kept": in_order,
    }


def catalog_run(url: str, sessions: int) -> None:
    import catalog as bench_catalog

    store_url = url + "cat:"  # under the run's prefix: deleted with it
    seconds = bench_catalog.fill(store_url, sessions, 10)
    print(f"catalog, {sessions:,} sessions of 10 messages (filled in {seconds:.0f} s):")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import redis"], check=True)
    print(f"  (a process importing redis-py alone: {(time.perf_counter() - start) * 1000:.0f} ms)")
    search = f"search:{bench_catalog._refund_session(sessions)}"  # a common word, a rare one
    probes = (
        ("list", "first page"),
        ("filtered", "tenant + tag"),
        (search, "search"),
        ("word", "one common word"),
    )
    for what, label in probes:
        mine = []
        for _ in range(3):
            out = subprocess.run(
                [sys.executable, __file__, "--probe", store_url, what],
                capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
            row = json.loads(out.strip().splitlines()[-1])
            mine.append(row["ms"])
        if what == "word":  # this benchmark's own probe: timed after the import only
            print(f"  {label:22} {'':>11}  ({row['found']} found); after importing the backend:"
                  f" {sorted(mine)[1]:.1f} ms")  # fmt: skip
            continue
        ms, found, _ = bench_catalog._median_probe(["--probe", store_url, what])
        print(
            f"  {label:22} {ms:8.1f} ms  ({found} found); after importing the backend:"
            f" {sorted(mine)[1]:.1f} ms"
        )
    on, off = url + "on:", url + "off:"
    ratio = bench_catalog.append_ratio(on, off)
    print(f"  append, catalog kept / catalog=False: {ratio:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=URL)
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--writer-items", type=int, default=300)
    parser.add_argument("--catalog-sessions", type=int, default=10_000)
    parser.add_argument("--probe", nargs=2, metavar=("URL", "WHAT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        import catalog as bench_catalog

        import agentsession.backends.redis  # noqa: F401 - the import is not what is timed

        store_url, what = args.probe
        if what == "word":  # one common word alone: every document holding it is a match
            store = ags.open_store(store_url)
            start = time.perf_counter()
            found = len(store.search("refund", limit=20))
            ms = (time.perf_counter() - start) * 1000
            store.close()
            print(json.dumps({"ms": ms, "found": found}))
            return
        bench_catalog.probe(store_url, what)
        return
    prefix = f"bench{uuid.uuid4().hex[:8]}:"
    base = args.url.split("?")[0]
    url = f"{base}?prefix={prefix}"
    client = redis.Redis.from_url(base)
    work = events(args.appends)
    try:
        rates: dict[str, list[float]] = {"ours": [], "ours, catalog=False": [], "raw XADD": []}
        for n in range(args.rounds):
            order = ["ours", "ours, catalog=False", "raw XADD"]
            for name in order[n % 3 :] + order[: n % 3]:
                if name == "raw XADD":
                    rates[name].append(raw_append(client, f"{prefix}raw-{n}", work))
                elif name == "ours":
                    rates[name].append(ours_append(url, work))
                else:
                    rates[name].append(ours_append(url, work, catalog=False))
        best = {k: max(v) for k, v in rates.items()}
        print(f"append, {args.appends} events one per call (best of {args.rounds}):")
        for name, rate in best.items():
            print(f"  {name:22} {rate:10,.0f} events/s  {rate / best['raw XADD']:.2f}x raw")
        print("  server side (INFO commandstats deltas, one more run each):")
        costs = {
            "ours": lambda: ours_append(url, work),
            "ours, catalog=False": lambda: ours_append(url, work, catalog=False),
            "raw XADD": lambda: raw_append(client, f"{prefix}raw-cost", work),
        }
        for name, run in costs.items():
            command = "XADD" if name == "raw XADD" else "EVALSHA"
            print(f"  {name:22} {server_cost(client, run, len(work), command)}")
        with ags.open_store(url) as store:
            session = store.get("reload")
            session.append_many([ags.Event.new(k, p) for k, p in work])
        raw_key = f"{prefix}raw-0"
        ours_s = min(ours_reload(url, "reload")[0] for _ in range(args.rounds))
        raw_s = min(raw_reload(client, raw_key)[0] for _ in range(args.rounds))
        print(f"reload, {args.appends} events (best of {args.rounds}):")
        print(f"  ours (open + read)     {ours_s * 1000:8.1f} ms  {ours_s / raw_s:.2f}x raw")
        print(f"  raw XRANGE             {raw_s * 1000:8.1f} ms")
        if args.catalog_sessions:
            catalog_run(url, args.catalog_sessions)
        try:
            import agents.extensions.memory.redis_session  # noqa: F401
        except ImportError as exc:
            print(f"OpenAI Agents SDK RedisSession: not installed ({exc})")
            return
        items = sdk_items(args.items)
        sdk: dict[str, list[dict[str, float]]] = {"agentsession": [], "redissession": []}
        for n in range(args.rounds):
            for kind in (["agentsession", "redissession"] if n % 2 == 0 else
                         ["redissession", "agentsession"]):  # fmt: skip
                sdk[kind].append(asyncio.run(sdk_round(kind, url, prefix, items)))
        ours_rate = max(r["rate"] for r in sdk["agentsession"])
        theirs_rate = max(r["rate"] for r in sdk["redissession"])
        ours_get = min(r["reload"] for r in sdk["agentsession"])
        theirs_get = min(r["reload"] for r in sdk["redissession"])
        print(f"OpenAI Agents SDK, {args.items} items one per add_items (best of {args.rounds}):")
        print(
            f"  OpenAIAgentsSession    {ours_rate:10,.0f} items/s  {ours_rate / theirs_rate:.2f}x;"
            f" get_items {ours_get * 1000:.1f} ms"
        )
        print(
            f"  RedisSession           {theirs_rate:10,.0f} items/s;"
            f" get_items {theirs_get * 1000:.1f} ms"
        )
        print(f"two processes, {args.writer_items} items each, one session:")
        for kind, label in (
            ("agentsession", "OpenAIAgentsSession"),
            ("redissession", "RedisSession"),
        ):
            print(f"  {label:22} {two_writers(kind, url, prefix, args.writer_items)}")
    finally:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i : i + 500])
        client.close()


if __name__ == "__main__":
    main()
