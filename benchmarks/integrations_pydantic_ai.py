"""``MessageStore`` against what a Pydantic AI application does without a store.

    python benchmarks/integrations_pydantic_ai.py [--turns 500] [--repeat 3] [--postgres DSN]

Workload: a conversation of ``--turns`` runs, four messages each (a ``ModelRequest`` with a
~200 B user prompt, a ``ModelResponse`` with a tool call and usage, a ``ModelRequest`` with a
~1 KB tool return, a ~500 B text ``ModelResponse``), one run id per run.

Compared in one run, best of ``--repeat``:

* **save**: runs/s, each run's four messages saved after it (``save_new``), into an empty
  session, against the usual way without a store: ``all_messages_json()`` written whole to a
  file after each run (the file grows, so that costs O(n) per run);
* **retried save**: the same run saved again (stores nothing);
* **load**: the whole history by a new store object, against ``validate_json`` of the same
  JSON read from that file (the decoding any JSON-persisted history pays).

The PostgreSQL rows need ``--postgres`` or ``AGENTSESSION_TEST_POSTGRES_DSN`` (a fresh schema,
dropped afterwards).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from agentsession.integrations.pydantic_ai import MessageStore


def runs(turns: int) -> list[list[ModelMessage]]:
    """The conversation, one list of four messages per run."""
    when = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    out: list[list[ModelMessage]] = []
    for n in range(turns):
        run = str(uuid.uuid4())
        call = f"call_{n}"
        out.append(
            [
                ModelRequest(
                    parts=[UserPromptPart(f"question {n}: " + "x" * 180, timestamp=when)],
                    run_id=run,
                ),
                ModelResponse(
                    parts=[ToolCallPart("lookup", {"query": f"q{n}", "limit": 5}, call)],
                    usage=RequestUsage(input_tokens=1000 + n, output_tokens=20),
                    model_name="bench",
                    timestamp=when,
                    run_id=run,
                ),
                ModelRequest(
                    parts=[ToolReturnPart("lookup", "r" * 1000, call, timestamp=when)],
                    run_id=run,
                ),
                ModelResponse(
                    parts=[TextPart("a" * 500)],
                    usage=RequestUsage(input_tokens=1100 + n, output_tokens=120),
                    model_name="bench",
                    timestamp=when,
                    run_id=run,
                ),
            ]
        )
    return out


def best(repeat: int, fn: Callable[[], float]) -> float:
    return min(fn() for _ in range(repeat))


def file_baseline(conversation: list[list[ModelMessage]], repeat: int) -> tuple[float, float]:
    """(seconds to save every run by rewriting the file, seconds to load it)."""

    def save() -> float:
        directory = tempfile.mkdtemp()
        path = Path(directory) / "history.json"
        history: list[ModelMessage] = []
        start = time.perf_counter()
        for run in conversation:
            history.extend(run)
            path.write_bytes(ModelMessagesTypeAdapter.dump_json(history))
        took = time.perf_counter() - start
        shutil.rmtree(directory)
        return took

    directory = tempfile.mkdtemp()
    path = Path(directory) / "history.json"
    path.write_bytes(ModelMessagesTypeAdapter.dump_json([m for run in conversation for m in run]))

    def load() -> float:
        start = time.perf_counter()
        ModelMessagesTypeAdapter.validate_json(path.read_bytes())
        return time.perf_counter() - start

    result = best(repeat, save), best(repeat, load)
    shutil.rmtree(directory)
    return result


def store_urls(postgres: str | None) -> Iterator[tuple[str, str, Callable[[], None]]]:
    """(label, url, cleanup) of each backend."""
    directory = tempfile.mkdtemp()
    yield "jsonl (flush)", str(Path(directory) / "j"), lambda: None
    yield "sqlite (flush)", f"sqlite:///{directory}/s.db", lambda: None
    if postgres:
        import psycopg

        schema = f"bench_{uuid.uuid4().hex[:12]}"
        sep = "&" if "?" in postgres else "?"

        def drop() -> None:
            with psycopg.connect(postgres, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

        yield "postgresql", f"{postgres}{sep}schema={schema}", drop
    shutil.rmtree(directory, ignore_errors=True)


def measure(url: str, conversation: list[list[ModelMessage]], repeat: int) -> tuple[float, ...]:
    """(save s, retried save s, load s) for one backend."""
    saves, retries, loads = [], [], []
    for _ in range(repeat):
        session_id = f"bench-{uuid.uuid4().hex}"
        with MessageStore(session_id, store=url) as history:
            start = time.perf_counter()
            for run in conversation:
                history.save_new(run)
            saves.append(time.perf_counter() - start)
            start = time.perf_counter()
            for run in conversation[-50:]:
                history.save_new(run)
            retries.append((time.perf_counter() - start) / 50)
        with MessageStore(session_id, store=url) as fresh:
            start = time.perf_counter()
            loaded = fresh.load()
            loads.append(time.perf_counter() - start)
            assert len(loaded) == 4 * len(conversation)
    return min(saves), min(retries), min(loads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--postgres", default=os.environ.get("AGENTSESSION_TEST_POSTGRES_DSN"))
    args = parser.parse_args()
    conversation = runs(args.turns)
    messages = 4 * args.turns
    print(f"{args.turns} runs, {messages} messages; best of {args.repeat}\n")
    print(f"{'':32}{'save runs/s':>12}{'retry ms':>10}{'load ms':>10}")
    save_s, load_s = file_baseline(conversation, args.repeat)
    print(
        f"{'file, whole history per run':32}{args.turns / save_s:>12,.0f}{'-':>10}"
        f"{load_s * 1e3:>10.1f}"
    )
    for label, url, cleanup in store_urls(args.postgres):
        try:
            save, retry, load = measure(url, conversation, args.repeat)
        finally:
            cleanup()
        print(
            f"{'MessageStore ' + label:32}{args.turns / save:>12,.0f}{retry * 1e3:>10.2f}"
            f"{load * 1e3:>10.1f}"
        )


if __name__ == "__main__":
    main()
