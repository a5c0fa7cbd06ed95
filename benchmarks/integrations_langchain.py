"""``AgentSessionChatHistory`` against LangChain's own chat histories.

    python benchmarks/integrations_langchain.py [--messages 16000] [--adds 4000] [--repeat 3]
        [--postgres DSN]

Workload: an agent conversation of LangChain messages, four per turn: a ~200 B
``HumanMessage``, an ``AIMessage`` with one tool call, an id, response metadata and usage, a
~1 KB ``ToolMessage`` and a ~500 B final ``AIMessage`` (id, metadata, usage).

Compared in one run, best of ``--repeat``:

* **add_message**: messages/s, one message per call, into an empty session (the first
  ``--adds`` messages of the workload), against ``InMemoryChatMessageHistory`` (a list
  append: the ceiling, it persists nothing);
* **reload**: a new store object and a new history reading the whole ``--messages``-message
  history, against ``messages_from_dict`` of the same messages' JSON (``json.loads`` +
  ``messages_from_dict``: the decoding every JSON-persisted LangChain history does on a read,
  measured alone, without its file or database);
* **next read**: what ``RunnableWithMessageHistory`` pays per call with a shared store: a new
  history object's ``messages`` after one more message was added (read incrementally from the
  session's cache).

langchain-community (``FileChatMessageHistory``, ``SQLChatMessageHistory``,
``PostgresChatMessageHistory``) is compared when installed; otherwise its rows are left out
and the run says so. The PostgreSQL rows need ``--postgres`` or
``AGENTSESSION_TEST_POSTGRES_DSN`` (a fresh schema, dropped afterwards).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory, InMemoryChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    ToolMessage,
    message_to_dict,
    messages_from_dict,
)

sys.path.insert(0, str(Path(__file__).parent))

from _postgres import drop_schema, postgres_url
from _workload import _text

import agentsession as ags
from agentsession.integrations.langchain import AgentSessionChatHistory, history_from_events

warnings.filterwarnings("ignore", message=".*deprecated.*")  # langchain-core 1.x histories


def conversation(count: int) -> list[BaseMessage]:
    """``count`` messages of the workload (four per turn)."""
    usage = {"input_tokens": 1200, "output_tokens": 80, "total_tokens": 1280}
    meta = {"model_name": "model-1", "finish_reason": "stop", "system_fingerprint": "fp_1"}
    out: list[BaseMessage] = []
    turn = 0
    while len(out) < count:
        call = {"name": "read_file", "args": {"path": _text(60, turn)}, "id": f"call_{turn}"}
        out += [
            HumanMessage(_text(200, turn)),
            AIMessage(
                "",
                tool_calls=[call],
                id=f"run-{turn}-0",
                response_metadata=meta,
                usage_metadata=usage,
            ),
            ToolMessage(_text(1000, turn), tool_call_id=f"call_{turn}", name="read_file"),
            AIMessage(
                _text(500, turn), id=f"run-{turn}-1", response_metadata=meta, usage_metadata=usage
            ),
        ]
        turn += 1
    return out[:count]


def best(repeat: int, run: Callable[[], float]) -> float:
    return min(run() for _ in range(repeat))


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# -- the histories ----------------------------------------------------------------------------


class Target:
    """One history kind: how to open a store (None for LangChain's own) and a history."""

    def __init__(
        self,
        name: str,
        url: Callable[[], str] | None,
        make: Callable[[Any, str], BaseChatMessageHistory] | None = None,
        cold: Callable[[str], list[BaseMessage]] | None = None,
    ) -> None:
        self.name, self.url = name, url
        self.make = make or (lambda store, sid: AgentSessionChatHistory(sid, store=store))
        self.cold = cold
        """How to read a history with nothing cached, when a new store object cannot."""

    def open(self) -> Any:
        return None if self.url is None else ags.open_store(self.url())

    def close(self, store: Any) -> None:
        if store is not None:
            store.close()


def add_rate(target: Target, messages: list[BaseMessage]) -> float:
    store = target.open()
    history = target.make(store, f"add-{uuid.uuid4().hex[:8]}")
    add = history.add_message
    seconds = timed(lambda: [add(m) for m in messages])
    target.close(store)
    return seconds


def fill(target: Target, messages: list[BaseMessage]) -> str:
    store = target.open()
    session_id = f"reload-{uuid.uuid4().hex[:8]}"
    history = target.make(store, session_id)
    for start in range(0, len(messages), 400):
        history.add_messages(messages[start : start + 400])
    target.close(store)
    return session_id


def reload(target: Target, session_id: str, count: int) -> float:
    def run() -> None:
        if target.cold is not None:
            assert len(target.cold(session_id)) == count
            return
        store = target.open()
        assert len(target.make(store, session_id).messages) == count
        target.close(store)

    return timed(run)


def next_read(target: Target, session_id: str, message: BaseMessage, count: int) -> float:
    """A shared store, the history read once; then one add and a new history's read."""
    store = target.open()
    target.make(store, session_id).messages  # noqa: B018 - the previous call's read
    target.make(store, session_id).add_message(message)
    seconds = timed(lambda: target.make(store, session_id).messages)
    assert len(target.make(store, session_id).messages) == count + 1
    target.close(store)
    return seconds


def decode_floor(messages: list[BaseMessage]) -> float:
    data = json.dumps([message_to_dict(m) for m in messages])
    return timed(lambda: messages_from_dict(json.loads(data)))


# -- PostgreSQL -------------------------------------------------------------------------------


# -- the run ----------------------------------------------------------------------------------


def community_targets() -> Iterator[Target]:
    """LangChain's own persistent histories, when langchain-community is installed."""
    try:
        from langchain_community.chat_message_histories import (  # type: ignore[import-not-found]
            FileChatMessageHistory,
        )
    except ImportError:
        return
    work = Path(tempfile.mkdtemp(prefix="lc-file-"))
    yield Target(
        "FileChatMessageHistory",
        None,
        lambda _store, sid: FileChatMessageHistory(str(work / f"{sid}.json")),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=16_000, help="history to reload")
    parser.add_argument("--adds", type=int, default=4_000, help="add_message calls timed")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--postgres", default=os.environ.get("AGENTSESSION_TEST_POSTGRES_DSN"))
    args = parser.parse_args()

    messages = conversation(args.messages)
    adds = messages[: args.adds]
    extra = HumanMessage("one more question")
    work = Path(tempfile.mkdtemp(prefix="agentsession-bench-"))
    memory = ags.open_store("memory:")
    targets = [
        Target(
            "agentsession memory",
            None,
            lambda _store, sid: AgentSessionChatHistory(sid, store=memory),
            # Its data lives in one store object, whose sessions keep the cache: read cold.
            lambda sid: history_from_events(memory.get(sid).read()),
        ),
        Target("agentsession jsonl", lambda: str(work / "jsonl")),
        Target("agentsession sqlite", lambda: f"sqlite:///{work}/sessions.db"),
    ]
    notes: list[str] = []
    schema = ""
    if args.postgres:
        pg, schema = postgres_url(args.postgres)
        targets.append(Target("agentsession postgresql", lambda: pg))
    else:
        notes.append("postgresql: skipped (no --postgres DSN)")
    community = list(community_targets())
    if not community:
        notes.append(
            "langchain-community is not installed: its file and SQL histories are not compared "
            "(LangChain's InMemoryChatMessageHistory and messages_from_dict are)"
        )
    targets += community

    rows: list[tuple[str, float, float, str]] = []  # label, items/s, ms, ratio text
    try:

        def inmem_add() -> float:
            history = InMemoryChatMessageHistory()
            return timed(lambda: [history.add_message(m) for m in adds])

        in_memory = best(args.repeat, inmem_add)
        floor = best(args.repeat, lambda: decode_floor(messages))
        results: dict[str, tuple[float, float, float]] = {}
        for target in targets:
            add = best(args.repeat, lambda t=target: add_rate(t, adds))
            session_id = fill(target, messages)
            again = best(args.repeat, lambda t=target, s=session_id: reload(t, s, len(messages)))
            step = next_read(target, session_id, extra, len(messages))
            results[target.name] = (add, again, step)
            print(f"  measured {target.name}", file=sys.stderr)
    finally:
        memory.close()
        shutil.rmtree(work, ignore_errors=True)
        if schema:
            drop_schema(args.postgres, schema)

    print(
        f"LangChain chat histories: add_message x {len(adds):,}, reload of {len(messages):,} "
        f"messages, best of {args.repeat}\n"
    )
    print(f"{'case':<44}{'items/s':>12}{'ms':>10}{'ratio':>9}")
    rows.append(
        ("add_message: InMemoryChatMessageHistory", len(adds) / in_memory, in_memory * 1000, "1.00")
    )
    for name, (add, _, _) in results.items():
        rows.append((f"add_message: {name}", len(adds) / add, add * 1000, f"{in_memory / add:.2g}"))
    rows.append(
        ("reload: json.loads + messages_from_dict", len(messages) / floor, floor * 1000, "1.00")
    )
    for name, (_, again, _) in results.items():
        rows.append(
            (f"reload: {name}", len(messages) / again, again * 1000, f"{again / floor:.2f}")
        )
    for name, (_, _, step) in results.items():
        rows.append((f"next read: {name}", 1 / step, step * 1000, ""))
    for label, rate, ms, ratio in rows:
        print(f"{label:<44}{rate:>12,.0f}{ms:>10.1f}{ratio:>9}")
    print(
        "\nitems/s: messages per second (next read: reads per second); ratio: add_message rate "
        "/ InMemory's, reload time / the decode floor's"
    )
    for note in notes:
        print(f"note: {note}")


if __name__ == "__main__":
    main()
