"""ADK's session service on agentsession stores against ADK's own SqliteSessionService.

Workload: ADK events as an agent's runner appends them, four per turn (the user's ~200 B
question, a model function call, a ~2 KB function response, a ~500 B answer that also sets a
session-state key, as ``output_key`` does), appended one ``append_event`` call each through
one session object. Compared in one run, on this machine:

* **append_event** rate: ``AgentSessionService`` on JSONL (the default store) at durability
  ``flush`` (the default) and ``fsync``, SQLite and PostgreSQL, against ADK's
  ``SqliteSessionService`` (which commits every append with SQLite's defaults: a rollback
  journal synced to disk).
* **reload**: ``get_session`` of a 16,000-event session by a new service (nothing cached), all
  events and with ``GetSessionConfig(num_recent_events=20)``. ADK's session is filled by
  inserting its rows (the very rows its ``append_event`` writes) directly, to save the minutes
  its own appends would take.
* **two processes x 500 appends** to one session, each process loading the session once and
  then appending through that object (what two workers serving one conversation do): events
  acknowledged and stored, errors, and acknowledged events lost.

    python benchmarks/integrations_adk.py [--events 2000] [--adk-events 300]
        [--reload-events 16000] [--race 500] [--postgres DSN]

The DSN comes from ``--postgres`` or ``AGENTSESSION_TEST_POSTGRES_DSN`` (a fresh schema,
dropped at the end). Targets at the default durability: append rate >= 10x ADK's
SqliteSessionService; two processes: 0 errors, 0 lost.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import multiprocessing
import os
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _postgres import drop_schema, with_schema
from _workload import _text
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types

from agentsession.integrations.adk import AgentSessionService

APP, USER = "bench_app", "bench_user"


def adk_events(count: int, tag: str = "") -> Iterator[Event]:
    """``count`` events of the workload (four per turn)."""
    for n in range(count):
        turn, kind = divmod(n, 4)
        invocation = f"{tag}inv-{turn}"
        call_id = f"{tag}call-{turn}"
        if kind == 0:
            yield Event(
                invocation_id=invocation,
                author="user",
                content=types.Content(role="user", parts=[types.Part(text=_text(200, turn))]),
            )
        elif kind == 1:
            call = types.FunctionCall(
                id=call_id, name="read_file", args={"path": _text(110, turn), "limit": 200}
            )
            content = types.Content(role="model", parts=[types.Part(function_call=call)])
            yield Event(invocation_id=invocation, author="coder", content=content)
        elif kind == 2:
            response = types.FunctionResponse(
                id=call_id, name="read_file", response={"result": _text(2000, turn)}
            )
            content = types.Content(role="user", parts=[types.Part(function_response=response)])
            yield Event(invocation_id=invocation, author="coder", content=content)
        else:
            answer = _text(500, turn)
            yield Event(
                invocation_id=invocation,
                author="coder",
                content=types.Content(role="model", parts=[types.Part(text=answer)]),
                actions=EventActions(state_delta={f"{tag}last_answer": answer[:40]}),
            )


def service_for(target: str) -> BaseSessionService:
    """ADK's SQLite service for ``adk-sqlite:PATH``, else ours over the store ``target``."""
    if target.startswith("adk-sqlite:"):
        return SqliteSessionService(target[len("adk-sqlite:") :])
    durability = "fsync" if target.endswith("#fsync") else "flush"
    return AgentSessionService(target.removesuffix("#fsync"), durability=durability)


async def close(service: BaseSessionService) -> None:
    closing = getattr(service, "close", None)
    if closing is not None:
        await closing()


# -- append rate -----------------------------------------------------------------------------


async def append_rate(target: str, count: int) -> float:
    """Events per second appended one call each (the events are built before the clock)."""
    service = service_for(target)
    session = await service.create_session(app_name=APP, user_id=USER)
    events = list(adk_events(count))
    start = time.perf_counter()
    for event in events:
        await service.append_event(session, event)
    elapsed = time.perf_counter() - start
    await close(service)
    return count / elapsed


# -- reload ----------------------------------------------------------------------------------


async def fill(target: str, count: int) -> str:
    """A session of ``count`` events; returns its id."""
    service = service_for(target)
    session = await service.create_session(app_name=APP, user_id=USER)
    if isinstance(service, SqliteSessionService):
        if count:
            fill_adk_sqlite(target[len("adk-sqlite:") :], session.id, count)
    else:
        for event in adk_events(count):
            await service.append_event(session, event)
    await close(service)
    return session.id


def fill_adk_sqlite(path: str, session_id: str, count: int) -> None:
    """Insert the rows ADK's ``append_event`` would write (one transaction: minutes saved)."""
    rows = [
        (
            e.id,
            APP,
            USER,
            session_id,
            e.invocation_id,
            e.timestamp,
            e.model_dump_json(exclude_none=True),
        )
        for e in adk_events(count)
    ]
    with sqlite3.connect(path) as conn:
        conn.executemany(
            "INSERT INTO events (id, app_name, user_id, session_id, invocation_id, timestamp,"
            " event_data) VALUES (?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        conn.execute(
            "UPDATE sessions SET update_time=? WHERE app_name=? AND user_id=? AND id=?",
            (rows[-1][5], APP, USER, session_id),
        )


async def reload_seconds(
    target: str, session_id: str, count: int, recent: int | None, repeat: int
) -> float:
    """Best time of ``get_session`` by a new service (the events counted)."""
    best = float("inf")
    config = None if recent is None else GetSessionConfig(num_recent_events=recent)
    for _ in range(repeat):
        service = service_for(target)
        start = time.perf_counter()
        got = await service.get_session(
            app_name=APP, user_id=USER, session_id=session_id, config=config
        )
        best = min(best, time.perf_counter() - start)
        await close(service)
        assert got is not None and len(got.events) == (count if recent is None else recent)
    return best


# -- two processes -----------------------------------------------------------------------------


def race_worker(target: str, session_id: str, tag: str, count: int, ready: str) -> tuple[int, int]:
    """Append ``count`` events through one session object once both workers loaded it;
    returns (acknowledged, errors)."""

    async def run() -> tuple[int, int]:
        service = service_for(target)
        session = await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
        assert session is not None
        Path(ready, tag).touch()
        while len(os.listdir(ready)) < 2:
            await asyncio.sleep(0.001)
        acknowledged = errors = 0
        for event in adk_events(count, tag):
            try:
                await service.append_event(session, event)
                acknowledged += 1
            except Exception:
                errors += 1
        await close(service)
        return acknowledged, errors

    return asyncio.run(run())


def race(target: str, count: int, work: Path) -> tuple[int, int, int]:
    """(events stored, errors, acknowledged events lost) of two processes appending ``count``
    events each to one session."""
    session_id = asyncio.run(fill(target, 0))
    ready = work / f"ready-{uuid.uuid4().hex}"
    ready.mkdir()
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=context) as pool:
        futures = [
            pool.submit(race_worker, target, session_id, tag, count, str(ready))
            for tag in ("a-", "b-")
        ]
        results = [f.result() for f in futures]

    async def stored() -> int:
        service = service_for(target)
        got = await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
        await close(service)
        assert got is not None
        return len(got.events)

    kept = asyncio.run(stored())
    acknowledged = sum(a for a, _ in results)
    errors = sum(e for _, e in results)
    return kept, errors, max(0, acknowledged - kept)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=2000, help="appends timed per store")
    parser.add_argument("--adk-events", type=int, default=300, help="appends timed for ADK")
    parser.add_argument("--fsync-events", type=int, default=500)
    parser.add_argument("--reload-events", type=int, default=16000)
    parser.add_argument("--race", type=int, default=500, help="appends per process")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--postgres", default=os.environ.get("AGENTSESSION_TEST_POSTGRES_DSN"))
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="agentsession-adk-bench-"))
    schemas: list[str] = []
    say = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731

    def target(kind: str) -> str:
        tag = uuid.uuid4().hex[:8]
        if kind == "adk":
            return f"adk-sqlite:{work / f'adk-{tag}.db'}"
        if kind == "jsonl":
            return str(work / f"jsonl-{tag}")
        if kind == "jsonl fsync":
            return str(work / f"jsonl-{tag}") + "#fsync"
        if kind == "sqlite":
            return f"sqlite:///{work / f'sqlite-{tag}.db'}"
        schema = f"bench_{tag}"
        schemas.append(schema)
        return with_schema(args.postgres, schema)

    kinds = ["jsonl", "jsonl fsync", "sqlite"] + (["postgresql"] if args.postgres else [])
    labels = {
        "adk": "ADK SqliteSessionService",
        "jsonl": "agentsession jsonl (flush)",
        "jsonl fsync": "agentsession jsonl (fsync)",
        "sqlite": "agentsession sqlite (flush)",
        "postgresql": "agentsession postgresql",
    }
    try:
        rates: dict[str, float] = {}
        for kind in ["adk", *kinds]:
            say(f"append rate: {kind}")
            count = {"adk": args.adk_events, "jsonl fsync": args.fsync_events}.get(
                kind, args.events
            )
            rates[kind] = max(
                asyncio.run(append_rate(target(kind), count)) for _ in range(args.repeat)
            )

        reloads: dict[str, tuple[float, float]] = {}
        for kind in ["adk", "jsonl", "sqlite"] + (["postgresql"] if args.postgres else []):
            say(f"reload: filling {kind} with {args.reload_events} events")
            where = target(kind)
            sid = asyncio.run(fill(where, args.reload_events))
            full = asyncio.run(reload_seconds(where, sid, args.reload_events, None, args.repeat))
            recent = asyncio.run(reload_seconds(where, sid, args.reload_events, 20, args.repeat))
            reloads[kind] = (full, recent)

        races: dict[str, tuple[int, int, int]] = {}
        for kind in ["adk", "jsonl", "sqlite"] + (["postgresql"] if args.postgres else []):
            say(f"two processes: {kind}")
            races[kind] = race(target(kind), args.race, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        for schema in schemas:
            drop_schema(args.postgres, schema)

    print(
        f"ADK session services, one run: append_event rates best of {args.repeat} "
        f"({args.events} events; ADK {args.adk_events}, fsync {args.fsync_events})\n"
    )
    print(
        f"{'append_event, one call per event':<36}{'events/s':>10}{'ms/event':>10}"
        f"{'ratio':>9}{'target':>9}"
    )
    for kind in ["adk", *kinds]:
        rate = rates[kind]
        target_text = ">= 10" if kind in ("jsonl", "sqlite", "postgresql") else ""
        print(
            f"{labels[kind]:<36}{rate:>10,.0f}{1000 / rate:>10.2f}"
            f"{rate / rates['adk']:>9.1f}{target_text:>9}"
        )

    print(
        f"\n{'get_session, ' + format(args.reload_events, ',') + ' events':<36}"
        f"{'all (s)':>10}{'ratio':>9}{'last 20 (ms)':>14}{'ratio':>9}"
    )
    for kind, (full, recent) in reloads.items():
        adk_full, adk_recent = reloads["adk"]
        print(
            f"{labels[kind]:<36}{full:>10.3f}{full / adk_full:>9.2f}"
            f"{recent * 1000:>14.1f}{recent / adk_recent:>9.2f}"
        )

    print(
        f"\n{f'2 processes x {args.race} appends':<36}{'stored':>10}{'errors':>9}{'lost':>9}"
        f"{'target':>14}"
    )
    for kind, (kept, errors, lost) in races.items():
        target_text = "" if kind == "adk" else "0 err, 0 lost"
        print(f"{labels[kind]:<36}{kept:>10}{errors:>9}{lost:>9}{target_text:>14}")


if __name__ == "__main__":
    main()
