"""A branch in the catalog and search, on every backend that keeps them: a branch presents its
origin's history up to its fork point as its own (seqs ``1..N``), but the catalog counts only
what the branch added (its marker and after): its row's messages, turns and usage, its title
(its own first user message), and its search documents; a shared message is found in the
origin only, and totals count a token once. What appending hands the catalog and what
``reindex`` rebuilds from the logs must agree, with appends in turns (handed over at turn
boundaries) and outside turns alike."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentsession import Event, Message, open_store
from agentsession.events import Usage
from agentsession.store import BaseStore

from .store_urls import store_url

BACKENDS = ["memory", "jsonl", "sqlite", "postgres", "redis"]


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseStore]:
    for url in store_url(request.param, tmp_path):
        opened = open_store(url)
        try:
            yield opened
        finally:
            opened.close()


def said(text: str) -> Event:
    return Event.new("user/message", Message.user(text))


def answered(text: str) -> Event:
    return Event.new("assistant/message", Message.assistant(text))


def write(session: Any, events: list[Event], in_turn: bool) -> None:
    if in_turn:
        with session.turn():
            session.append_many(events)
    else:
        for event in events:
            session.append(event)


def rows(store: BaseStore) -> list[tuple[Any, ...]]:
    return sorted((i.id, i.messages, i.turns, i.title, i.status) for i in store.list(limit=None))


def hits(store: BaseStore, query: str) -> list[tuple[str, int]]:
    return sorted((h.session_id, h.seq) for h in store.search(query, limit=100))


@pytest.mark.parametrize("in_turn", [True, False], ids=["turns", "outside-turns"])
def test_a_branch_is_catalogued_as_the_log_it_presents(store: BaseStore, in_turn: bool) -> None:
    origin = store.get("origin")
    spent = Event.new("usage", Usage(input_tokens=100, output_tokens=10, model="m"))
    write(origin, [said("shared zebra question"), answered("shared reply"), spent], in_turn)
    write(origin, [said("later origin words"), answered("origin answer")], in_turn)
    at_head = origin.branch(id="head")
    own_spend = Event.new("usage", Usage(input_tokens=7, output_tokens=1, model="m"))
    write(at_head, [said("branch only okapi"), answered("branch reply"), own_spend], in_turn)
    early = origin.branch(at_seq=origin.read()[1].seq, id="early")
    write(early, [said("early okapi")], in_turn)

    shared_seq = next(e.seq for e in origin.read() if e.type == "user/message")
    appended_rows = rows(store)
    appended_hits = (hits(store, "zebra"), hits(store, "okapi"))
    assert appended_hits[0] == [("origin", shared_seq)]
    own = {
        sid: next(e.seq for e in store.get(sid).read() if "okapi" in str(e.payload()))
        for sid in ("early", "head")
    }
    assert appended_hits[1] == sorted(own.items())
    by_id = {r[0]: r for r in appended_rows}
    assert by_id["origin"][1:4] == (4, 2 if in_turn else 0, "shared zebra question")
    assert by_id["head"][1:4] == (2, 1 if in_turn else 0, "branch only okapi")
    assert by_id["early"][1:4] == (1, 1 if in_turn else 0, "early okapi")

    # Each token once, where it was spent: the origin's 100 and the head branch's 7.
    [total] = store.totals(group_by="tenant")
    assert (total.usage.input_tokens, total.usage.output_tokens, total.calls) == (107, 11, 2)
    assert total.sessions == 2

    assert store.reindex() == 3
    assert store.totals(group_by="tenant") == [total]
    assert rows(store) == appended_rows
    assert (hits(store, "zebra"), hits(store, "okapi")) == appended_hits
