"""The catalog and search at scale: the first page of a listing, a filtered page and a search,
each in a fresh process, and what keeping the catalog costs an append.

    python benchmarks/catalog.py [--sessions 100000] [--messages 10]
        [--backends jsonl,sqlite,postgres] [--baseline-seconds 60] [--large] [--copies 1]
        [--postgres DSN]

Per backend, a store is filled with ``--sessions`` sessions of ``--messages`` messages (user and
assistant in turn, one batch each), each with a tenant (one of 50) and a tag (one of 7) set by
``session.update`` (on SQLite the fill ends with ``store.index_documents()``, which indexes the
search documents appends leave for later; its time is part of the fill's). Then, each in a
new Python process after its imports (the median of three processes), the time of the query,
after the store is opened (the opening is printed apart):

* the first page of ``store.list(order="updated", limit=50)`` [targets: <= 20 ms SQLite and
  PostgreSQL, <= 50 ms JSONL];
* a filtered page, ``where={"tenant": ..., "tag": ...}`` [<= 30 ms];
* ``store.search`` of a two-word query [<= 100 ms SQLite and PostgreSQL, <= 200 ms JSONL].

Appending with the catalog and search index kept costs [<= 1.3x] appending with
``catalog=False`` (the same 4,000 single appends over 200 sessions, alternating runs).

Baselines, filled for at most ``--baseline-seconds`` each (the size they reach is printed):
ADK's ``SqliteSessionService.list_sessions`` and ``DatabaseSessionService.list_sessions``
(SQLAlchemy on ``sqlite+aiosqlite``; one app and user, every session) and the OpenAI
Agents SDK's ``SQLiteSession`` (open and ``get_items(limit=5)`` of one session), each in a
fresh process likewise. ``--large`` fills 1,000,000 sessions on SQLite and PostgreSQL instead.
``--copies K`` (PostgreSQL): fill a K-th of the sessions through the store's API, then copy
them in SQL K - 1 times under new ids (:func:`copy_postgres`): the tables and indexes reach the
full size in minutes, the contents repeat (a search's rare word then matches K sessions).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _postgres import drop_schema, postgres_url

import agentsession as ags

_HERE = os.path.abspath(__file__)
TENANTS = 50
TAGS = 7
WORDS = ("invoice", "refund", "parcel", "delivery", "password", "upgrade", "printer", "router")


def _events(i: int, messages: int) -> list[ags.Event]:
    out = []
    for m in range(messages):
        word = WORDS[(i + m) % len(WORDS)]
        if m % 2 == 0:
            out.append(ags.Event.new("user/message", ags.Message.user(f"help with my {word} {i}")))
        else:
            out.append(
                ags.Event.new("assistant/message", ags.Message.assistant(f"about the {word}"))
            )
    return out


def _refund_session(sessions: int) -> int:
    """A session near the middle whose first user message is about a refund (WORDS[1])."""
    middle = sessions // 2
    return middle - (middle - 1) % len(WORDS)


def fill(url: str, sessions: int, messages: int) -> float:
    """Fill the store; returns the seconds it took."""
    store = ags.open_store(url)
    start = time.perf_counter()
    for i in range(sessions):
        session = store.get(f"chat:{i:07d}")
        session.append_many(_events(i, messages))
        session.update(tenant=f"t{i % TENANTS}", tags=[f"tag{i % TAGS}"])
        if i % 1000 == 999:
            store._drop_cached(session.id)
    index_documents = getattr(store, "index_documents", None)
    if index_documents is not None:
        # SQLite indexes search documents apart from appends (the first search would): the
        # step a writer runs after appending so that no later search pays for them.
        index_documents()
    store.close()
    return time.perf_counter() - start


def copy_postgres(dsn: str, schema: str, copies: int) -> float:
    """Make ``copies - 1`` more of every session in ``schema``, in SQL, under new ids (the
    session ``chat:0000042`` gets ``chat:0000042~1`` ...): each table that has a session's id
    (``sessions.id``, the others' ``session_id``) gets its rows again with that id changed, so
    the tables and their indexes hold ``copies`` times the sessions, events, usage rows and
    search documents, with the contents of the filled ones repeated (``--large`` on
    PostgreSQL, whose fill through the store's API would take hours). Returns the seconds it
    took, ``ANALYZE`` included."""
    import psycopg
    from psycopg import sql

    start = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = %s AND table_type = 'BASE TABLE' ORDER BY table_name",
                (schema,),
            ).fetchall()
        ]
        for table in tables:
            columns = [
                r[0]
                for r in conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = %s"
                    " AND table_name = %s AND is_generated = 'NEVER' ORDER BY ordinal_position",
                    (schema, table),
                ).fetchall()
            ]
            key = "id" if table == "sessions" else "session_id"
            if key not in columns:
                continue
            for k in range(1, copies):
                picked = [
                    sql.SQL("{} || {}").format(sql.Identifier(c), sql.Literal(f"~{k}"))
                    if c == key
                    else sql.Identifier(c)
                    for c in columns
                ]
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {t} ({cols}) SELECT {picked} FROM {t}"
                        " WHERE strpos({key}, '~') = 0"
                    ).format(
                        t=sql.Identifier(schema, table),
                        cols=sql.SQL(", ").join(map(sql.Identifier, columns)),
                        picked=sql.SQL(", ").join(picked),
                        key=sql.Identifier(key),
                    )
                )
            conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, table)))
    return time.perf_counter() - start


def probe(url: str, what: str) -> None:
    """In a fresh process: open the store and run one query; print the milliseconds."""
    start = time.perf_counter()
    store = ags.open_store(url)
    opened = time.perf_counter()
    if what == "list":
        found = len(store.list(order="updated", limit=50))
    elif what == "filtered":
        found = len(store.list(where={"tenant": "t3", "tag": "tag3"}, limit=50))
    else:
        # A common word and a rare one (session 12345's first user message holds both).
        # "search:N": a common word and a rare one (session N's first message holds both).
        found = len(store.search(f"refund {what.partition(':')[2]}", limit=20))
    done = time.perf_counter()
    store.close()
    # The query's time, in a fresh process (cold caches); opening the store is reported apart
    # (PostgreSQL's pool and schema check, say, are paid once per process, not per page).
    print(
        json.dumps(
            {"ms": (done - opened) * 1000, "open_ms": (opened - start) * 1000, "found": found}
        )
    )


def _median_probe(args: list[str]) -> tuple[float, int, float]:
    """The median query time of three fresh processes, what it found, and the median time
    those processes took to open the store."""
    runs = []
    opens = []
    found = 0
    for _ in range(3):
        out = subprocess.run(
            [sys.executable, _HERE, *args], capture_output=True, text=True, check=True
        ).stdout
        row = json.loads(out.strip().splitlines()[-1])
        runs.append(row["ms"])
        opens.append(row.get("open_ms", 0.0))
        found = row["found"]
    return statistics.median(runs), found, statistics.median(opens)


def append_ratio(url_on: str, url_off: str, repeat: int = 3) -> float:
    """Append time with the catalog / without (alternating, best of ``repeat``)."""
    best = {url_on: float("inf"), url_off: float("inf")}
    for r in range(repeat):
        for url in (url_on, url_off) if r % 2 == 0 else (url_off, url_on):
            store = ags.open_store(url, catalog=url is url_on)
            sessions = [store.get(f"a{r}:{n}") for n in range(200)]
            events = [
                ags.Event.new("user/message", ags.Message.user(f"text {k} about invoice"))
                for k in range(4000)
            ]
            start = time.perf_counter()
            for k, event in enumerate(events):
                sessions[k % 200].append(event)
            best[url] = min(best[url], time.perf_counter() - start)
            store.close()
    return best[url_on] / best[url_off]


# -- baselines ------------------------------------------------------------------------------------


def adk_service(path: str) -> Any:
    """ADK's session service on the file ``path``: ``SqliteSessionService``, or, for a path
    ending ``.sqlalchemy.db``, ``DatabaseSessionService`` (SQLAlchemy, ``sqlite+aiosqlite``)."""
    if path.endswith(".sqlalchemy.db"):
        from google.adk.sessions import DatabaseSessionService

        return DatabaseSessionService(f"sqlite+aiosqlite:///{path}")
    from google.adk.sessions.sqlite_session_service import SqliteSessionService

    return SqliteSessionService(path)


def adk_fill(path: str, seconds: float) -> int:
    from google.adk.events.event import Event
    from google.genai import types

    async def run() -> int:
        service = adk_service(path)
        deadline = time.perf_counter() + seconds
        n = 0
        while time.perf_counter() < deadline:
            session = await service.create_session(
                app_name="bench", user_id="u", session_id=f"s{n}"
            )
            for m in range(2):
                content = types.Content(role="user", parts=[types.Part(text=f"help {n} {m}")])
                await service.append_event(session, Event(author="user", content=content))
            n += 1
        return n

    return asyncio.run(run())


def adk_probe(path: str) -> None:
    start = time.perf_counter()

    async def run() -> int:
        service = adk_service(path)
        listed = await service.list_sessions(app_name="bench", user_id="u")
        return len(listed.sessions)

    found = asyncio.run(run())
    print(json.dumps({"ms": (time.perf_counter() - start) * 1000, "found": found}))


def openai_fill(path: str, sessions: int, messages: int, seconds: float) -> int:
    from agents.memory import SQLiteSession

    async def run() -> int:
        deadline = time.perf_counter() + seconds
        n = 0
        while n < sessions and time.perf_counter() < deadline:
            session = SQLiteSession(f"s{n}", path)
            items = [
                {"role": "user" if m % 2 == 0 else "assistant", "content": f"help {n} {m}"}
                for m in range(messages)
            ]
            await session.add_items(items)  # type: ignore[arg-type]
            session.close()
            n += 1
        return n

    return asyncio.run(run())


def openai_probe(path: str) -> None:
    from agents.memory import SQLiteSession

    start = time.perf_counter()

    async def run() -> int:
        session = SQLiteSession("s0", path)
        items = await session.get_items(limit=5)
        session.close()
        return len(items)

    found = asyncio.run(run())
    print(json.dumps({"ms": (time.perf_counter() - start) * 1000, "found": found}))


# -- the run --------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--messages", type=int, default=10)
    parser.add_argument("--backends", default="jsonl,sqlite,postgres")
    parser.add_argument("--baseline-seconds", type=float, default=60.0)
    parser.add_argument("--large", action="store_true")
    parser.add_argument(
        "--copies",
        type=int,
        default=1,
        help="PostgreSQL: fill SESSIONS / COPIES through the API, then copy them in SQL",
    )
    parser.add_argument("--postgres", default=os.environ.get("AGENTSESSION_TEST_POSTGRES_DSN"))
    parser.add_argument("--probe", nargs=2, metavar=("URL", "WHAT"), help=argparse.SUPPRESS)
    parser.add_argument("--adk-probe", help=argparse.SUPPRESS)
    parser.add_argument("--openai-probe", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        probe(*args.probe)
        return
    if args.adk_probe:
        adk_probe(args.adk_probe)
        return
    if args.openai_probe:
        openai_probe(args.openai_probe)
        return

    sessions = 1_000_000 if args.large else args.sessions
    targets = {
        "jsonl": (50, 30, 200),
        "sqlite": (20, 30, 100),
        "postgres": (20, 30, 100),
    }
    tmp = Path(tempfile.mkdtemp(prefix="agentsession-catalog-bench-"))
    rows: list[str] = []
    try:
        for backend in filter(None, args.backends.split(",")):
            if args.large and backend == "jsonl":
                continue
            schema = None
            if backend == "jsonl":
                url = str(tmp / "jsonl")
                ratio_urls = (str(tmp / "ratio-on"), str(tmp / "ratio-off"))
            elif backend == "sqlite":
                url = f"sqlite:///{tmp / 'catalog.db'}"
                ratio_urls = (f"sqlite:///{tmp / 'on.db'}", f"sqlite:///{tmp / 'off.db'}")
            else:
                if not args.postgres:
                    print("postgres: skipped (no --postgres or AGENTSESSION_TEST_POSTGRES_DSN)")
                    continue
                url, schema = postgres_url(args.postgres)
                on, schema_on = postgres_url(args.postgres)
                off, schema_off = postgres_url(args.postgres)
                ratio_urls = (on, off)
            try:
                if schema is not None and args.copies > 1:
                    filled = sessions // args.copies
                    seconds = fill(url, filled, args.messages)
                    print(f"{backend}: filled {filled:,} sessions in {seconds:.0f} s", flush=True)
                    seconds = copy_postgres(args.postgres, schema, args.copies)
                    print(
                        f"{backend}: copied them to {filled * args.copies:,} sessions"
                        f" in {seconds:.0f} s",
                        flush=True,
                    )
                    sessions, searched = filled * args.copies, _refund_session(filled)
                else:
                    seconds = fill(url, sessions, args.messages)
                    print(f"{backend}: filled {sessions:,} sessions in {seconds:.0f} s", flush=True)
                    searched = _refund_session(sessions)
                results = [
                    _median_probe(["--probe", url, w])
                    for w in ("list", "filtered", f"search:{searched}")
                ]
                ratio = append_ratio(*ratio_urls)
                (lt, ft, st) = targets[backend]
                rows.append(
                    f"| {backend} | {sessions:,} | {results[0][0]:.1f} (<= {lt}; "
                    f"open {results[0][2]:.0f}) | "
                    f"{results[1][0]:.1f} (<= {ft}; {results[1][1]} rows) | "
                    f"{results[2][0]:.1f} (<= {st}; {results[2][1]} hits) | {ratio:.2f} (<= 1.3) |"
                )
            finally:
                if schema is not None:
                    for name in (schema, schema_on, schema_off):
                        drop_schema(args.postgres, name)
        for service, file in (
            ("SqliteSessionService", "adk.db"),
            ("DatabaseSessionService", "adk.sqlalchemy.db"),
        ):
            adk_path = str(tmp / file)
            try:
                adk_n = adk_fill(adk_path, args.baseline_seconds)
                adk_ms, adk_found, _ = _median_probe(["--adk-probe", adk_path])
                rows.append(
                    f"| ADK {service}.list_sessions | {adk_n:,} | {adk_ms:.1f} "
                    f"({adk_found} sessions, every one) | - | - | - |"
                )
            except ImportError as exc:
                rows.append(f"| ADK {service} | skipped ({exc}) | | | | |")
        oai_path = str(tmp / "openai.db")
        try:
            oai_n = openai_fill(oai_path, sessions, args.messages, args.baseline_seconds)
            oai_ms, _, _ = _median_probe(["--openai-probe", oai_path])
            rows.append(
                f"| OpenAI SQLiteSession open + get_items(limit=5) | {oai_n:,} | {oai_ms:.1f} "
                "(no listing API) | - | - | - |"
            )
        except ImportError:
            rows.append("| OpenAI Agents SDK | skipped (pip install openai-agents) | | | | |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(
        "| store | sessions | first page ms | filtered page ms | search ms | append with/without |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
