"""Child-session stores written by this version load in every later one (the tree, the
records and the index), from ``tests/golden/children`` (made by its ``make.py``)."""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentsession as ags

GOLDEN = Path(__file__).resolve().parent / "golden" / "children"
START = dt.datetime(2026, 12, 1, 9, 30, tzinfo=dt.timezone.utc)


@pytest.fixture(params=["jsonl", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ags.BaseStore]:
    if request.param == "jsonl":
        shutil.copytree(GOLDEN / "jsonl", tmp_path / "jsonl")
        opened = ags.open_store(tmp_path / "jsonl", create=False)
    else:
        shutil.copy(GOLDEN / "store.sqlite3", tmp_path / "store.sqlite3")
        opened = ags.open_store(f"sqlite:///{tmp_path}/store.sqlite3", create=False)
    with opened:
        yield opened


def texts(messages: list[ags.Message]) -> list[str]:
    return [m.text for m in messages]


def test_the_tree_loads(store: ags.BaseStore) -> None:
    researcher, drafter = store.children_of("golden:lead", include_discarded=True)
    assert store.children_of("golden:lead") == [researcher]
    assert researcher.merged_at is not None and drafter.merged_at is None
    assert (researcher.id, researcher.agent, researcher.task, researcher.state) == (
        "golden:lead:child:researcher", "researcher", "compare fares", "merged"
    )
    assert (drafter.id, drafter.agent, drafter.state) == (
        "golden:lead:child:drafter", "drafter", "discarded"
    )
    assert researcher.fork_seq == 8 and drafter.fork_seq == 11
    assert researcher.created_at == START
    child = store.open("golden:lead:child:researcher")
    assert (child.parent, child.fork_point) == ("golden:lead", 8)
    # inherit=2 would start at the calendar tool result, whose call it cuts off: left out.
    assert texts(child.messages()) == [
        "Asking the researcher.", "Compare the fares.", "FR at 89 EUR."
    ]


def test_the_parent_holds_one_merged_summary_and_a_discard_note(store: ags.BaseStore) -> None:
    lead = store.open("golden:lead")
    history = lead.messages()
    assert texts(history)[-1] == "Cheapest: FR, 89 EUR."
    assert history[-1].author == "researcher"
    ends = [e.payload() for e in lead.read() if e.type == "subagent/end"]
    assert [(e.session, e.status, e.summary) for e in ends] == [
        ("golden:lead:child:researcher", "merged", "Cheapest: FR, 89 EUR."),
        ("golden:lead:child:drafter", "discarded", "not needed"),
    ]
    with pytest.raises(ags.SessionError):
        store.open("golden:lead:child:researcher").merge("again")


def test_the_records_load(store: ags.BaseStore) -> None:
    lead = store.open("golden:lead").info()
    assert (lead.agent_id, lead.channel_type, lead.channel_id, lead.model) == (
        "lead", "slack", "C042", "m-large"
    )
    assert (lead.created_at, lead.updated_at, lead.parent) == (START, START, "")
    child = store.open("golden:lead:child:researcher").info()
    assert (child.agent_id, child.metadata, child.parent, child.fork_seq) == (
        "researcher", {"ticket": "T-7"}, "golden:lead", 8
    )
    created = {info.id: info.created_at for info in store.list()}
    assert created == dict.fromkeys(
        ["golden:lead", "golden:lead:child:researcher", "golden:lead:child:drafter"], START
    )
