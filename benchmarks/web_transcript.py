"""The viewer's first screen of a 10,000-event session: server time, against reading it all.

Builds one session of ~10,000 events (turns of a user message, three steps each with an
assistant message calling a tool, the tool/call and tool/result events and usage, and a final
answer) on JSONL and SQLite, then times, through the ASGI app in this process (starlette's
TestClient, so the HTTP layer is in the figure):

* ``first screen``: what the transcript page asks before it can draw: the page itself
  (``/session``), the header (``/api/session``) and the first page of rows
  (``/api/session/rows``, the page's default page size), the session opened anew by every
  request (``max_cached_sessions=0``), as on a first visit;
* ``rows page at the end``: the last page of rows (its look-back to the turn's start
  included), what the live tail and a reader at the end cost;
* ``charts``: ``/api/session/stats``, which reads the whole session (loaded after the first
  screen);
* baselines, measured in the same run: reading the whole session (``session.read()``) and the
  JSON rows of the whole session as ``agentsession show --json --rows`` builds them.

    python benchmarks/web_transcript.py [--events 10000] [--repeat 7]

Target: the first screen well under one second, and a small fraction of the whole-session
baselines (it reads one page, they read everything). Every figure is also given as a ratio to
``show --json --rows`` of the whole session, measured in the same run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import msgspec
from starlette.testclient import TestClient

import agentsession as ags
from agentsession.view import transcript_rows
from agentsession.web import create_app
from agentsession.web.app import DEFAULT_PAGE_ROWS

SESSION = "bench:web"
EVENTS_PER_TURN = 22


def _text(size: int, seed: int) -> str:
    base = f"turn {seed}: the **quick** brown fox jumps over the lazy dog. "
    return (base * (size // len(base) + 1))[:size]


def build(url: str, events: int) -> int:
    """Append ~``events`` events of realistic turns to the session; returns how many."""
    store = ags.open_store(url)
    session = store.get(SESSION)
    clock = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    batch: list[ags.Event] = []

    def add(kind: str, payload: object) -> None:
        nonlocal clock
        clock += dt.timedelta(milliseconds=350)
        batch.append(ags.Event.new(kind, payload, agent="coder", time=clock))

    turn = 0
    while session.latest_seq + len(batch) + EVENTS_PER_TURN <= events:
        add("turn/start", ags.events.TurnStart())
        add("user/message", ags.Message.user(_text(200, turn)))
        for step in range(3):
            call = ags.ToolCall(f"call-{turn}-{step}", "read_file", {"path": f"src/m{step}.py"})
            add("step/start", ags.events.StepStart(step=step))
            add("assistant/message", ags.Message.assistant(_text(120, step), tool_calls=[call]))
            add("tool/call", call)
            add("tool/result", ags.ToolResult(call.id, "read_file", _text(2000, step)))
            add("usage", ags.events.Usage(1500 + 40 * step, 90, 1590 + 40 * step, 1200, 0, 0))
            add("step/end", ags.events.StepEnd(step=step))
        add("assistant/message", ags.Message.assistant(_text(500, turn)))
        add("turn/end", ags.events.TurnEnd(steps=3))
        turn += 1
        if len(batch) >= 1000:
            session.append_many(batch)
            batch = []
    if batch:
        session.append_many(batch)
    count = session.latest_seq
    store.close()
    return count


def timed(run: Callable[[], object], repeat: int) -> float:
    """Median milliseconds of ``run`` over ``repeat`` runs (after one warm-up)."""
    run()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def requests(client: TestClient, *paths: str) -> Callable[[], object]:
    """GET each of ``paths`` in turn (each must answer 200)."""

    def run() -> object:
        for path in paths:
            response = client.get(path)
            assert response.status_code == 200, (path, response.text)
        return None

    return run


def read_all(store: ags.BaseStore) -> object:
    """The whole session's events."""
    return store.open(SESSION).read()


def show_rows(store: ags.BaseStore) -> bytes:
    """The whole session's rows as ``agentsession show --json --rows`` prints them."""
    rows = transcript_rows(store.open(SESSION).read())
    return b"".join(msgspec.json.encode(row) + b"\n" for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="agentsession-web-bench-"))
    try:
        backends = {"JSONL": str(work / "jsonl"), "SQLite": f"sqlite:///{work / 'store.db'}"}
        results: dict[str, dict[str, float]] = {}
        counts: dict[str, int] = {}
        sid = "bench%3Aweb"
        for name, url in backends.items():
            counts[name] = build(url, args.events)
            # No session cache: every request opens the session anew, as a first visit does.
            store = ags.open_store(url, create=False, max_cached_sessions=0)
            app = create_app(store, allowed_hosts=["testserver"])
            last_after = max(0, counts[name] - DEFAULT_PAGE_ROWS)
            with TestClient(app) as client:
                results[name] = {
                    "first screen (page + header + first rows)": timed(requests(
                        client, f"/session?id={sid}", f"/api/session?id={sid}",
                        f"/api/session/rows?id={sid}"), args.repeat),
                    "  of which the first rows": timed(requests(
                        client, f"/api/session/rows?id={sid}"), args.repeat),
                    "rows page at the end": timed(requests(
                        client, f"/api/session/rows?id={sid}&after={last_after}"), args.repeat),
                    "charts (whole session, after the first screen)": timed(requests(
                        client, f"/api/session/stats?id={sid}"), args.repeat),
                    "baseline: read the whole session": timed(
                        partial(read_all, store), args.repeat),
                    "baseline: show --json --rows of it": timed(
                        partial(show_rows, store), args.repeat),
                }
            store.close()
        sizes = ", ".join(f"{n}: {c:,}" for n, c in counts.items())
        print(f"one session of ~{args.events:,} events ({sizes}); "
              f"server time through the ASGI app in process, median of {args.repeat} runs, "
              "the session opened anew by every request; x = the time over show --json --rows's")
        print()
        names = list(backends)
        header = ["", *names]
        table = [header]
        for label in results[names[0]]:
            cells = [label]
            for name in names:
                ms = results[name][label]
                base = results[name]["baseline: show --json --rows of it"]
                cells.append(f"{ms:.1f} ms ({ms / base:.2f}x)")
            table.append(cells)
        widths = [max(len(line[i]) for line in table) for i in range(len(header))]
        for index, line in enumerate(table):
            print("| " + " | ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) + " |")
            if index == 0:
                print("| " + " | ".join("-" * w for w in widths) + " |")
        print()
        print(f"first rows = /api/session/rows with the page's default page size "
              f"({DEFAULT_PAGE_ROWS} rows, full texts, Markdown rendered)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
