"""``AgentSessionSaver`` against LangGraph's own ``SqliteSaver`` and ``PostgresSaver``.

    python benchmarks/integrations_langgraph.py [--steps 200] [--repeat 3] [--postgres DSN]
                                                [--text repeated|varied] [--resumes 8]
                                                [--async]

Workload: one ``StateGraph`` run of ``--steps`` super-steps on a new thread, an agent loop over
a ``messages`` channel (``add_messages``): the model node adds an ``AIMessage`` with a tool
call (~300 B of text), the tool node a ~1 KB ``ToolMessage``, alternately, so the message list
grows by one per step (``--text repeated``, the default: every message the same repeated
sentences, which compress well; ``--text varied``: each message its own random words, less
compressible than prose); then the thread's state history read back
(``graph.get_state_history``) through a new saver and connection or store object.

Measured, best of ``--repeat`` (a fresh database each time):

* **run**: super-steps per second of the run (each super-step is one ``put_writes`` and one
  ``put``);
* **history**: checkpoints per second of the history read;
* **bytes**: what the store takes on disk after the run: the SQLite file (after a WAL
  checkpoint), the PostgreSQL tables' total relation size (heap, TOAST and indexes), the JSONL
  directory;
* **added**: what the run added to it: bytes after the run minus bytes of the same store
  initialised and empty (opened, its tables made, before the run). Each side's fixed pages
  (an empty table's or index's first pages, the migrations' records) are left out, so a small
  thread is compared on what it costs, not on what each schema costs empty.

agentsession's PostgreSQL appends write no search documents (they mark the thread; the first
search indexes them): what indexing them adds is printed below its row.

Pairs: agentsession on SQLite against ``SqliteSaver`` (WAL, ``synchronous`` at SQLite's
default FULL), also with agentsession at ``durability="fsync"`` (``synchronous=FULL``: the same
durability); agentsession on PostgreSQL against ``PostgresSaver``, each in a fresh schema
(dropped afterwards; needs ``--postgres`` or ``AGENTSESSION_TEST_POSTGRES_DSN``); agentsession on
JSONL for reference (its ratios against both baselines are printed too). Ratios are
agentsession's value over the baseline's.

Also for reference, LangGraph's ``InMemorySaver``, which keeps everything in the process and
stores nothing durable: its run throughput over each baseline's is about as fast as any saver
can make this graph run here (LangGraph's own work per super-step, the saves' thread hand-overs
and a serialization of what changed), so it tells how much of a target ratio is within reach.
**run+history** is the whole workload's throughput ratio: the baseline's run and history read
seconds over agentsession's.

``--async`` runs the graph with ``ainvoke`` and reads it with ``aget_state_history``, against
``langgraph-checkpoint-sqlite``'s ``AsyncSqliteSaver`` and ``langgraph-checkpoint-postgres``'s
``AsyncPostgresSaver`` (the rows keep their names); agentsession's saver is the same object,
through its async methods.

Last, **two processes resuming one thread**: each makes ``--resumes`` runs of one shared
thread at the same time (a one-node graph whose state keeps every run's input, the node taking
2 ms as a model call would, shortened), each run resuming from the thread's latest checkpoint;
printed, how many of the inputs the thread's final state holds. LangGraph runs a thread from
its latest checkpoint, so two runs at once both start from it and the later checkpoint drops
the other run's input, whatever the saver; agentsession's turn lock (``store.lock`` on the
thread's session, held around each run) makes the runs take turns. Run with ``--resumes 0`` to
leave it out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import operator
import os
import random
import shutil
import sqlite3
import string
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import START, MessagesState, StateGraph

sys.path.insert(0, str(Path(__file__).parent))

from _postgres import drop_schema, postgres_url

import agentsession as ags
from agentsession.integrations.langgraph import AgentSessionSaver

TEXT = "The quick brown fox jumps over the lazy dog. " * 7  # ~300 B
RESULT = "Sunny, 21 degrees, light wind from the west. " * 23  # ~1 KB
VARIED = False
"""``--text varied``: each message a text of its own, of random words (seeded)."""
_WORDS = random.Random(7)
_VOCABULARY = [
    "".join(_WORDS.choice(string.ascii_lowercase) for _ in range(_WORDS.randint(2, 9)))
    for _ in range(5000)
]


def text_of(template: str, n: int) -> str:
    """Message ``n``'s text: ``template``, or (``--text varied``) as many random words."""
    if not VARIED:
        return template
    rng = random.Random(n)
    words: list[str] = []
    size = 0
    while size < len(template):
        words.append(rng.choice(_VOCABULARY))
        size += len(words[-1]) + 1
    return " ".join(words)


class State(MessagesState):
    """The agent loop's state: the messages and a step counter."""

    steps: int


def build(saver: BaseCheckpointSaver[Any], steps: int) -> Any:
    """The agent loop: model, tool, model, ... for ``steps`` super-steps."""

    def model(state: State) -> dict[str, Any]:
        n = state.get("steps", 0)
        call = {"name": "lookup", "args": {"n": n}, "id": f"call_{n}"}
        reply = AIMessage(text_of(TEXT, n), tool_calls=[call])
        return {"messages": [reply], "steps": n + 1}

    def tool(state: State) -> dict[str, Any]:
        n = state["steps"]
        result = ToolMessage(text_of(RESULT, n), tool_call_id=f"call_{n - 1}")
        return {"messages": [result], "steps": n + 1}

    def after_model(state: State) -> Literal["tool", "__end__"]:
        return "tool" if state["steps"] < steps else "__end__"

    def after_tool(state: State) -> Literal["model", "__end__"]:
        return "model" if state["steps"] < steps else "__end__"

    builder = StateGraph(State)
    builder.add_node("model", model)
    builder.add_node("tool", tool)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", after_model)
    builder.add_conditional_edges("tool", after_tool)
    return builder.compile(checkpointer=saver)


Measured = tuple[float, float, int, int]
"""Super-steps/s of the run, checkpoints/s of the history read, stored bytes, bytes added."""


ASYNC = False
"""``--async``: the graph run with ``ainvoke`` and read with ``aget_state_history``, the
baselines being LangGraph's async savers."""

AsyncOpener = Callable[[], contextlib.AbstractAsyncContextManager[BaseCheckpointSaver[Any]]]


def measure(
    open_saver: Callable[[], contextlib.AbstractContextManager[BaseCheckpointSaver[Any]]],
    size: Callable[[], int],
    steps: int,
    aopen: AsyncOpener | None = None,
) -> Measured:
    """(super-steps/s of the run, checkpoints/s of the history read, stored bytes, bytes the
    run added to the store initialised and empty); with ``--async``, through ``aopen`` (by
    default ``open_saver``'s saver: agentsession's serves both APIs)."""
    if ASYNC:
        return asyncio.run(ameasure(aopen or as_async(open_saver), size, steps))
    config = {"configurable": {"thread_id": uuid.uuid4().hex}, "recursion_limit": steps + 10}
    with open_saver() as saver:
        empty = size()
        graph = build(saver, steps)
        start = time.perf_counter()
        result = graph.invoke({"messages": [], "steps": 0}, config)
        run = time.perf_counter() - start
        assert result["steps"] == steps and len(result["messages"]) == steps
    with open_saver() as saver:
        graph = build(saver, steps)
        start = time.perf_counter()
        history = list(graph.get_state_history(config))
        read = time.perf_counter() - start
        assert len(history) == steps + 2, len(history)
        assert len(history[0].values["messages"]) == steps
    stored = size()
    return steps / run, len(history) / read, stored, stored - empty


async def ameasure(aopen: AsyncOpener, size: Callable[[], int], steps: int) -> Measured:
    """:func:`measure` with ``ainvoke`` and ``aget_state_history``."""
    config = {"configurable": {"thread_id": uuid.uuid4().hex}, "recursion_limit": steps + 10}
    async with aopen() as saver:
        empty = size()
        graph = build(saver, steps)
        start = time.perf_counter()
        result = await graph.ainvoke({"messages": [], "steps": 0}, config)
        run = time.perf_counter() - start
        assert result["steps"] == steps and len(result["messages"]) == steps
    async with aopen() as saver:
        graph = build(saver, steps)
        start = time.perf_counter()
        history = [state async for state in graph.aget_state_history(config)]
        read = time.perf_counter() - start
        assert len(history) == steps + 2, len(history)
    stored = size()
    return steps / run, len(history) / read, stored, stored - empty


def as_async(
    open_saver: Callable[[], contextlib.AbstractContextManager[BaseCheckpointSaver[Any]]],
) -> AsyncOpener:
    """``open_saver``'s saver in an async context manager."""

    @contextlib.asynccontextmanager
    async def opened() -> AsyncIterator[BaseCheckpointSaver[Any]]:
        with open_saver() as saver:
            yield saver

    return opened


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def sqlite_bytes(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def postgres_bytes(dsn: str, schema: str) -> int:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r'",
            (schema,),
        ).fetchone()
    assert row is not None
    return int(row[0])


@contextlib.contextmanager
def ours(url: str, **options: Any) -> Iterator[BaseCheckpointSaver[Any]]:
    store = ags.open_store(url, **options)
    try:
        yield AgentSessionSaver(store)
    finally:
        store.close()


def in_memory() -> Callable[[], contextlib.AbstractContextManager[BaseCheckpointSaver[Any]]]:
    """Opens the same ``InMemorySaver`` each time (its checkpoints live in the object)."""
    from langgraph.checkpoint.memory import InMemorySaver

    saver = InMemorySaver()
    return lambda: contextlib.nullcontext(saver)


@contextlib.contextmanager
def sqlite_saver(path: Path) -> Iterator[BaseCheckpointSaver[Any]]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        saver.setup()  # its tables, as an initialised empty store has them
        yield saver
    finally:
        conn.close()


@contextlib.contextmanager
def postgres_saver(dsn: str, schema: str) -> Iterator[BaseCheckpointSaver[Any]]:
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg import Connection
    from psycopg.rows import dict_row

    conn = Connection.connect(
        dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row,
        options=f"-c search_path={schema}",
    )  # fmt: skip
    try:
        saver = PostgresSaver(conn)
        saver.setup()
        yield saver
    finally:
        conn.close()


@contextlib.asynccontextmanager
async def asqlite_saver(path: Path) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        await saver.setup()
        yield saver


@contextlib.asynccontextmanager
async def apostgres_saver(dsn: str, schema: str) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg import AsyncConnection
    from psycopg.rows import dict_row

    conn = await AsyncConnection.connect(
        dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row,
        options=f"-c search_path={schema}",
    )  # fmt: skip
    try:
        saver = AsyncPostgresSaver(conn)
        await saver.setup()
        yield saver
    finally:
        await conn.close()


# -- two processes resuming one thread ------------------------------------------------------


class Items(TypedDict):
    """The resumed thread's state: every input any run gave it."""

    items: Annotated[list[str], operator.add]


def resume_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    """One node that takes 2 ms (a model call, shortened): each run adds its input."""

    def work(state: Items) -> dict[str, Any]:
        time.sleep(0.002)
        return {}

    builder = StateGraph(Items)
    builder.add_node("work", work)
    builder.add_edge(START, "work")
    return builder.compile(checkpointer=saver)


Opener = Callable[[], contextlib.AbstractContextManager[BaseCheckpointSaver[Any]]]


def resumer(open_saver: Opener, name: str, rounds: int, locked: bool, start: Any) -> None:
    """A process's ``rounds`` runs of the shared thread, each resuming from its latest
    checkpoint; ``locked``: each run inside the thread's turn lock (agentsession's
    ``store.lock``), else as LangGraph runs it."""
    config = {"configurable": {"thread_id": "shared"}}
    with open_saver() as saver:
        graph = resume_graph(saver)
        start.wait()
        for index in range(rounds):
            given = {"items": [f"{name}-{index}"]}
            if locked:
                assert isinstance(saver, AgentSessionSaver)
                with saver.store.lock(saver.session_id("shared"), timeout=120):
                    graph.invoke(given, config)
            else:
                graph.invoke(given, config)


def resumed(open_saver: Opener, rounds: int, locked: bool) -> int:
    """How many of the two processes' ``2 * rounds`` inputs the thread's final state holds."""
    with open_saver():
        pass  # the saver's tables, made once before the processes start
    context = multiprocessing.get_context("fork")
    start = context.Barrier(2)
    workers = [
        context.Process(target=resumer, args=(open_saver, name, rounds, locked, start))
        for name in ("a", "b")
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(300)
        if worker.is_alive():
            worker.kill()
            worker.join()
    if any(worker.exitcode != 0 for worker in workers):
        raise RuntimeError(f"a resuming process failed: {[w.exitcode for w in workers]}")
    with open_saver() as saver:
        state = resume_graph(saver).get_state({"configurable": {"thread_id": "shared"}})
    return len(set(state.values.get("items", [])))


def best(runs: list[Measured]) -> Measured:
    return (
        max(r[0] for r in runs),
        max(r[1] for r in runs),
        min(r[2] for r in runs),
        min(r[3] for r in runs),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--postgres", default=os.environ.get("AGENTSESSION_TEST_POSTGRES_DSN"))
    parser.add_argument(
        "--resumes",
        type=int,
        default=8,
        help="runs each of two processes makes of one shared thread (0: none)",
    )
    parser.add_argument(
        "--text",
        choices=["repeated", "varied"],
        default="repeated",
        help="repeated: every message the same sentences (they compress well); varied: each "
        "message its own random words",
    )
    parser.add_argument(
        "--async",
        dest="use_async",
        action="store_true",
        help="ainvoke and aget_state_history, against AsyncSqliteSaver and AsyncPostgresSaver",
    )
    args = parser.parse_args()
    steps = args.steps
    global VARIED, ASYNC
    VARIED = args.text == "varied"
    ASYNC = args.use_async

    rows: dict[str, Measured] = {}

    def repeat(name: str, once: Callable[[Path], Measured]) -> None:
        runs = []
        for _ in range(args.repeat):
            where = Path(tempfile.mkdtemp(prefix="lgbench-"))
            try:
                runs.append(once(where))
            finally:
                shutil.rmtree(where, ignore_errors=True)
        rows[name] = best(runs)
        run, read, size, added = rows[name]
        stored = f"{size:>11,} B {added:>11,} B added" if size >= 0 else "(nothing durable)"
        print(f"  {name:28} {run:6.0f} steps/s {read:6.0f} checkpoints/s {stored}")

    how = "async (ainvoke; the baselines AsyncSqliteSaver, AsyncPostgresSaver)" if ASYNC else "sync"
    print(f"{steps} super-steps, {args.text} text, {how}, best of {args.repeat}:")
    repeat(
        "SqliteSaver",
        lambda d: measure(
            lambda: sqlite_saver(d / "lg.db"),
            lambda: sqlite_bytes(d / "lg.db"),
            steps,
            lambda: asqlite_saver(d / "lg.db"),
        ),
    )
    repeat("InMemorySaver (reference)", lambda d: measure(in_memory(), lambda: -1, steps))
    repeat(
        "agentsession sqlite",
        lambda d: measure(
            lambda: ours(f"sqlite:///{d / 's.db'}"), lambda: sqlite_bytes(d / "s.db"), steps
        ),
    )
    repeat(
        "agentsession sqlite (fsync)",
        lambda d: measure(
            lambda: ours(f"sqlite:///{d / 's.db'}", durability="fsync"),
            lambda: sqlite_bytes(d / "s.db"),
            steps,
        ),
    )
    repeat(
        "agentsession jsonl",
        lambda d: measure(lambda: ours(str(d / "s")), lambda: dir_bytes(d / "s"), steps),
    )
    if args.postgres:
        dsn = args.postgres

        def pg(kind: str) -> Callable[[Path], Measured]:
            def once(_: Path) -> Measured:
                url, schema = postgres_url(dsn)
                try:
                    if kind == "ours":
                        measured = measure(
                            lambda: ours(url), lambda: postgres_bytes(dsn, schema), steps
                        )
                        # The search documents of the mirrored messages, which the first
                        # search indexes (appends only mark the thread): what they add.
                        with ags.open_store(url) as store:
                            store.index_documents()  # type: ignore[attr-defined]
                        searched.append(postgres_bytes(dsn, schema) - measured[2])
                        return measured
                    import psycopg

                    with psycopg.connect(dsn, autocommit=True) as conn:
                        conn.execute(f'CREATE SCHEMA "{schema}"')
                    return measure(
                        lambda: postgres_saver(dsn, schema),
                        lambda: postgres_bytes(dsn, schema),
                        steps,
                        lambda: apostgres_saver(dsn, schema),
                    )
                finally:
                    drop_schema(dsn, schema)

            return once

        searched: list[int] = []
        repeat("PostgresSaver", pg("theirs"))
        repeat("agentsession postgres", pg("ours"))
        print(
            f"  {'  + its search documents':28} {min(searched):>44,} B more once a search "
            "indexed them"
        )
    else:
        print("  (no PostgreSQL: pass --postgres DSN or set AGENTSESSION_TEST_POSTGRES_DSN)")

    pairs = [
        ("agentsession sqlite", "SqliteSaver"),
        ("agentsession sqlite (fsync)", "SqliteSaver"),
        ("agentsession postgres", "PostgresSaver"),
        ("agentsession jsonl", "SqliteSaver"),
        ("agentsession jsonl", "PostgresSaver"),
        ("InMemorySaver (reference)", "SqliteSaver"),
        ("InMemorySaver (reference)", "PostgresSaver"),
    ]
    print(
        "\nratios (agentsession / baseline): run throughput, history throughput, run+history, "
        "bytes, bytes added"
    )
    for mine, theirs in pairs:
        if mine in rows and theirs in rows:
            a, b = rows[mine], rows[theirs]
            whole = (steps / b[0] + (steps + 2) / b[1]) / (steps / a[0] + (steps + 2) / a[1])
            stored = f"{a[2] / b[2]:6.3f}x {a[3] / b[3]:6.3f}x" if a[2] >= 0 else ""
            print(
                f"  {mine:28} / {theirs:14} {a[0] / b[0]:6.2f}x {a[1] / b[1]:6.2f}x "
                f"{whole:6.2f}x {stored}"
            )

    if args.resumes and not ASYNC:
        print_resumers(args.resumes, args.postgres)


def print_resumers(rounds: int, dsn: str | None) -> None:
    """Two processes each making ``rounds`` runs of one thread at the same time."""
    print(
        f"\ntwo processes, {rounds} runs each of one thread: inputs the final state holds "
        f"(of {2 * rounds})"
    )
    where = Path(tempfile.mkdtemp(prefix="lgbench-"))
    schemas: list[str] = []
    try:
        cases: list[tuple[str, Opener, bool]] = [
            ("SqliteSaver", lambda: sqlite_saver(where / "lg.db"), False),
            ("agentsession sqlite", lambda: ours(f"sqlite:///{where / 'a.db'}"), False),
            ("agentsession sqlite, turn lock", lambda: ours(f"sqlite:///{where / 'b.db'}"), True),
        ]
        if dsn:
            theirs_schema = f"bench_{uuid.uuid4().hex[:10]}"
            url, ours_schema = postgres_url(dsn)
            schemas += [theirs_schema, ours_schema]
            import psycopg

            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f'CREATE SCHEMA "{theirs_schema}"')
            cases += [
                ("PostgresSaver", lambda: postgres_saver(dsn, theirs_schema), False),
                ("agentsession postgres, turn lock", lambda: ours(url), True),
            ]
        for name, open_saver, locked in cases:
            kept = resumed(open_saver, rounds, locked)
            print(f"  {name:34} {kept:3} ({2 * rounds - kept} lost)")
    finally:
        shutil.rmtree(where, ignore_errors=True)
        for schema in schemas:
            assert dsn is not None
            drop_schema(dsn, schema)


if __name__ == "__main__":
    main()
