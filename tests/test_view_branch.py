"""Branches in the transcript: a ``session/branch`` marker is a :class:`BranchRow` where the
branch leaves its origin, and ``agentsession show`` names a branch's origin and a session's
branches under its header (the web page: ``tests/test_web.py``, ``test_web_browser.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner

import agentsession as ags
from agentsession.branching import (
    BRANCHES_KIND,
    BranchRef,
    add_branch,
    branch_refs,
    live_branches,
)
from agentsession.cli import cli
from agentsession.events import SESSION_BRANCH, Event
from agentsession.view import AnyRow, BranchRow, EventRow, TurnStartRow, transcript_rows


def turns(session: ags.BaseSession, count: int, tag: str = "") -> list[int]:
    seqs = []
    for i in range(count):
        with session.turn() as turn:
            seqs.append(turn.user(f"q{tag}{i}"))
            turn.assistant(f"a{tag}{i}")
    return seqs


def test_the_marker_is_a_branch_row_where_the_branch_leaves_its_origin() -> None:
    with ags.open_store("memory:") as store:
        origin = store.get("o")
        users = turns(origin, 3)
        branch = origin.branch(at_turn=users[0], id="o-b")
        turns(branch, 1, "b")
        rows = transcript_rows(branch.read())
        point = users[0] + 2  # the end of the first turn
        assert rows[point] == BranchRow(
            seq=point + 1, depth=0, time=rows[point].time, origin="o", origin_seq=point
        )
        assert rows[point].kind == "branch"
        # The rows before it are the origin's; the branch's own turn follows it.
        assert rows[:point] == transcript_rows(origin.read())[:point]
        assert isinstance(rows[point + 1], TurnStartRow) and rows[point + 1].seq == point + 2
        assert [type(row) for row in rows].count(BranchRow) == 1
        encoded = msgspec.json.encode(rows)
        assert msgspec.json.decode(encoded, type=list[AnyRow]) == rows
        marker = msgspec.json.decode(encoded, type=list[dict[str, object]])[point]
        assert marker["kind"] == "branch" and marker["origin"] == "o"
        assert marker["origin_seq"] == point and marker["rewound"] is False
        # A branch taken from nothing: the marker is its first row.
        empty = origin.branch(at_seq=0, id="o-z")
        assert transcript_rows(empty.read()) == [
            BranchRow(seq=1, depth=0, time=empty.read()[0].time, origin="o", origin_seq=0)
        ]


def test_a_broken_branch_marker_is_an_event_row() -> None:
    broken = Event(type=SESSION_BRANCH, seq=1, data=msgspec.Raw(b'{"origin": 7}'))
    [row] = transcript_rows([broken])
    assert isinstance(row, EventRow) and row.type == SESSION_BRANCH


def test_live_branches_skips_a_gone_branch_without_writing() -> None:
    with ags.open_store("memory:") as store:
        origin = store.get("o")
        turns(origin, 1)
        origin.branch(id="o-b")
        add_branch(store._meta_get, store._meta_cas, "o", BranchRef("gone", 1))
        # An entry naming a session that is not that branch is not believed either.
        store.get("other").append(Event.new("user/message", ags.Message.user("x")))
        add_branch(store._meta_get, store._meta_cas, "o", BranchRef("other", 1))
        before = store._meta_get(BRANCHES_KIND, "o")
        assert live_branches(store, "o") == [BranchRef("o-b", 4)]
        assert store._meta_get(BRANCHES_KIND, "o") == before  # nothing written
        store.delete("o-b")  # a deleted branch takes its own entry off
        assert live_branches(store, "o") == []
        assert branch_refs(store._meta_get(BRANCHES_KIND, "o")) == [
            BranchRef("gone", 1), BranchRef("other", 1)
        ]


# -- agentsession show -------------------------------------------------------------------------


def show(url: str, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--store", url, "show", *args], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture
def branched(tmp_path: Path) -> str:
    """A JSONL store: ``o`` with two turns (seqs 1-8), its branch ``o-b`` from seq 4 with a
    turn of its own (6-9), and its branch ``o-c`` at its head."""
    url = str(tmp_path / "store")
    with ags.open_store(url) as store:
        origin = store.get("o")
        users = turns(origin, 2)
        branch = origin.branch(at_turn=users[0], id="o-b")
        turns(branch, 1, "b")
        origin.branch(id="o-c")
        store.get("plain").append(Event.new("user/message", ags.Message.user("hi")))
    return url


def test_show_names_a_branchs_origin_and_where_it_leaves_it(branched: str) -> None:
    out = show(branched, "o-b").splitlines()
    assert out[0].startswith("session o-b · 9 events · 2 turns")
    assert out[1] == "branch of o at seq 4"
    lines = {int(line[:5]): line[6:] for line in out if line[:5].strip().isdigit()}
    assert sorted(lines) == list(range(1, 10))
    assert lines[2] == "│ user: q0"  # the origin's event, shared
    assert lines[5] == (
        " BRANCH  of session o: its events up to seq 4 are above (shared), this branch's "
        "own follow"
    )
    assert lines[7] == "│ user: qb0"
    assert not any(line.startswith("branches:") for line in out)
    rows = [json.loads(line) for line in show(branched, "o-b", "--json", "--rows").splitlines()]
    assert rows[4] == {
        "kind": "branch",
        "seq": 5,
        "depth": 0,
        "agent": "",
        "time": rows[4]["time"],
        "rewound": False,
        "origin": "o",
        "origin_seq": 4,
    }


def test_show_lists_a_sessions_branches(branched: str) -> None:
    out = show(branched, "o").splitlines()
    assert out[1] == "branches: o-b (from seq 4), o-c (from seq 8)"
    assert not any("branch of" in line or "BRANCH" in line for line in out)
    head = show(branched, "o-c").splitlines()
    assert head[1] == "branch of o at seq 8" and "BRANCH" in head[-1]
    plain = show(branched, "plain").splitlines()
    assert len(plain) == 2 and "branch" not in plain[0] + plain[1]
