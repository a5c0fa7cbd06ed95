"""``agentsession branch``: branching a conversation from the command line, and listing a
session's branches with ``--list``, on a JSONL store directory and a SQLite file."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import agentsession as ags
from agentsession.branching import BRANCHES_KIND, BranchRef
from agentsession.cli import cli
from agentsession.events import SESSION_BRANCH, SessionBranch

from .cli_chat_store import SID, chat_store, events, invoke, texts


@pytest.fixture(params=["jsonl", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store holding ``SID``: three turns (seqs 1-4, 5-8, 9-12)."""
    yield from chat_store(request.param, tmp_path)


def branches(url: str, session_id: str = SID) -> list[BranchRef]:
    store = ags.open_store(url)
    try:
        return store.get(session_id).branches()
    finally:
        store.close()


def exists(url: str, session_id: str) -> bool:
    store = ags.open_store(url)
    try:
        return store.exists(session_id)
    finally:
        store.close()


def turn_id(url: str, index: int) -> str:
    starts = [e for e in events(url) if e.type == "turn/start"]
    value = starts[index].meta["turn_id"]
    assert isinstance(value, str)
    return value


def snapshot(url: str) -> dict[str, bytes]:
    """Every file of the store (for SQLite: the database's directory) and its bytes."""
    root = Path(url.removeprefix("sqlite:///")).parent if url.startswith("sqlite") else Path(url)
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_branch_at_the_head_by_default(url: str) -> None:
    code, out, err = invoke(url, "branch", SID)
    assert (code, err) == (0, "")
    found = re.fullmatch(
        r"(cli:chat~[0-9a-f]{12}): branched from cli:chat at seq 12; its history has 6 "
        r"messages and ends with seq 11, assistant: answer 2\n",
        out,
    )
    assert found is not None, out
    new = found.group(1)
    assert branches(url) == [BranchRef(new, 12)]
    assert texts(url, new) == texts(url)
    marker = events(url, new)[-1]
    assert marker.type == SESSION_BRANCH and marker.seq == 13
    assert marker.decode(SessionBranch) == SessionBranch(
        origin=SID, origin_seq=12, min_revision=6
    )
    assert len(events(url)) == 12  # the origin is left as it was


def test_a_branch_at_a_turn_by_its_id_keeps_that_turn(url: str) -> None:
    code, out, err = invoke(url, "branch", SID, "--at-turn", turn_id(url, 1), "--id", "cli:b")
    assert (code, err) == (0, "")
    assert out == (
        "cli:b: branched from cli:chat at seq 8; its history has 4 messages and ends with "
        "seq 7, assistant: answer 1\n"
    )
    assert texts(url, "cli:b") == ["question 0", "answer 0", "question 1", "answer 1"]
    assert branches(url) == [BranchRef("cli:b", 8)]
    # The branch goes on by itself; the origin does not see it.
    store = ags.open_store(url)
    with store.get("cli:b").turn(agent="coder") as turn:
        turn.user("question b")
        turn.assistant("answer b")
    store.close()
    assert texts(url, "cli:b")[-2:] == ["question b", "answer b"]
    assert texts(url)[-1] == "answer 2"


def test_a_branch_at_a_turn_by_a_seq_inside_it(url: str) -> None:
    code, out, err = invoke(url, "branch", SID, "--at-turn", "2", "--id", "cli:b")
    assert (code, err) == (0, "")
    assert out.startswith("cli:b: branched from cli:chat at seq 4; its history has 2 messages")
    assert texts(url, "cli:b") == ["question 0", "answer 0"]


def test_a_branch_at_a_seq_inside_a_turn_starts_before_it(url: str) -> None:
    code, out, err = invoke(url, "branch", SID, "--at-seq", "6", "--id", "cli:b")
    assert (code, err) == (0, "")
    assert out.startswith("cli:b: branched from cli:chat at seq 4;")
    assert texts(url, "cli:b") == ["question 0", "answer 0"]


def test_a_branch_at_seq_0_has_an_empty_history(url: str) -> None:
    code, out, err = invoke(url, "branch", SID, "--at-seq", "0", "--id", "cli:b")
    assert (code, err) == (0, "")
    assert out == "cli:b: branched from cli:chat at seq 0; its history is empty\n"
    assert texts(url, "cli:b") == []
    assert [e.type for e in events(url, "cli:b")] == [SESSION_BRANCH]


def test_branch_json(url: str) -> None:
    code, out, err = invoke(url, "branch", SID, "--at-turn", "5", "--id", "cli:b", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out) == {"id": "cli:b", "origin": SID, "seq": 8, "messages": 4}
    code, out, _ = invoke(url, "branch", SID, "--at-seq", "0", "--json")
    assert code == 0
    made = json.loads(out)
    assert made["id"].startswith(f"{SID}~") and (made["seq"], made["messages"]) == (0, 0)


def test_a_branch_of_a_running_session_leaves_the_running_turn_out(url: str) -> None:
    store = ags.open_store(url)
    store.get(SID).append_many(
        [
            ags.Event.new("turn/start", ags.events.TurnStart(), agent="coder"),
            ags.Event.new("user/message", ags.Message.user("question 3"), agent="coder"),
        ]
    )
    store.close()
    code, out, err = invoke(url, "branch", SID, "--id", "cli:b")
    assert (code, err) == (0, "")
    assert out.startswith("cli:b: branched from cli:chat at seq 12; its history has 6")
    assert texts(url, "cli:b")[-1] == "answer 2"


def test_both_points_are_a_usage_error(url: str) -> None:
    code, out, err = invoke(url, "branch", SID, "--at-seq", "4", "--at-turn", "5")
    assert (code, out) == (2, "")
    assert err == "Error: give at most one of --at-seq N and --at-turn TURN\n"
    assert branches(url) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--at-seq", "99"], "must be a seq of the log (0..12), not 99"),
        (["--at-turn", "nope"], "no turn of the history holds 'nope'"),
        (["--at-turn", "99"], "no turn of the history holds 99"),
        (["--at-turn", " "], "--at-turn needs a turn id or a seq"),
        (["--at-seq", "-1"], "Invalid value for '--at-seq'"),
        (["--id", SID], "a branch needs an id of its own"),
        (["--id", ""], "session id is required"),
    ],
)
def test_bad_input_is_a_usage_error_and_writes_nothing(
    url: str, args: list[str], message: str
) -> None:
    before = snapshot(url)
    code, out, err = invoke(url, "branch", SID, *args)
    assert (code, out) == (2, "")
    assert message in err and "Traceback" not in err
    assert err.splitlines()[-1].startswith("Error: ")
    assert snapshot(url) == before


def test_an_existing_id_is_a_usage_error_and_is_not_listed_as_a_branch(url: str) -> None:
    store = ags.open_store(url)
    store.get("cli:other").append_many([ags.Event.new("app/note", {"n": 1})])
    store.close()
    code, out, err = invoke(url, "branch", SID, "--id", "cli:other")
    assert (code, out) == (2, "")
    assert err == "Error: session 'cli:other' exists already: a branch needs a new id\n"
    assert branches(url) == []  # deleting the origin will not take cli:other with it
    assert [e.type for e in events(url, "cli:other")] == ["app/note"]
    code, _, _ = invoke(url, "branch", SID, "--id", "cli:b")
    assert code == 0
    code, out, err = invoke(url, "branch", SID, "--id", "cli:b", "--at-seq", "0")
    assert (code, out) == (2, "")
    assert "'cli:b' exists already" in err
    assert branches(url) == [BranchRef("cli:b", 12)]


@pytest.mark.parametrize("args", [[], ["--list"]], ids=["branch", "list"])
def test_an_unknown_or_empty_session_is_not_found_and_not_created(
    url: str, args: list[str]
) -> None:
    code, out, err = invoke(url, "branch", "cli:chta", *args)
    assert (code, out) == (4, "")
    assert err.startswith("Error: no session 'cli:chta' in ")
    assert err.endswith(f"did you mean '{SID}'?\n")
    # A session without events is not there either: it has nothing to branch from.
    code, out, err = invoke(url, "branch", "cli:empty", *args)
    assert (code, out) == (4, "")
    assert err.startswith("Error: no session 'cli:empty' in ")
    assert not exists(url, "cli:chta") and not exists(url, "cli:empty")
    assert branches(url) == []


def test_a_missing_store_is_not_found_and_not_created(tmp_path: Path) -> None:
    for missing in (str(tmp_path / "typo"), f"sqlite:///{tmp_path}/typo.db"):
        for args in ([], ["--list"]):
            code, out, err = invoke(missing, "branch", SID, *args)
            assert (code, out) == (4, "")
            assert err.startswith("Error: no store at ")
    assert list(tmp_path.iterdir()) == []


def test_list_prints_the_branches_and_a_branchs_origin(url: str) -> None:
    code, out, err = invoke(url, "branch", SID, "--list")
    assert (code, out, err) == (0, f"{SID}: no branches\n", "")
    assert invoke(url, "branch", SID, "--at-turn", "5", "--id", "cli:b1")[0] == 0
    assert invoke(url, "branch", SID, "--at-seq", "0", "--id", "cli:long-branch-id")[0] == 0
    assert invoke(url, "branch", "cli:b1", "--id", "cli:b1:b")[0] == 0
    code, out, err = invoke(url, "branch", SID, "--list")
    assert (code, err) == (0, "")
    assert out == (
        f"{SID}: 2 branches\n"
        "id                  seq\n"
        "cli:b1                8\n"
        "cli:long-branch-id    0\n"
    )
    code, out, err = invoke(url, "branch", "cli:b1", "--list")
    assert (code, err) == (0, "")
    assert out == (
        f"cli:b1: a branch of {SID} at seq 8\n"
        "cli:b1: 1 branch\n"
        "id        seq\n"
        "cli:b1:b    9\n"
    )
    code, out, _ = invoke(url, "branch", "cli:b1:b", "--list")
    assert (code, out) == (0, "cli:b1:b: a branch of cli:b1 at seq 9\ncli:b1:b: no branches\n")


def test_list_json(url: str) -> None:
    assert invoke(url, "branch", SID, "--at-turn", "5", "--id", "cli:b1")[0] == 0
    code, out, err = invoke(url, "branch", SID, "--list", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "session_id": SID,
        "origin": None,
        "branches": [{"id": "cli:b1", "seq": 8}],
    }
    code, out, _ = invoke(url, "branch", "cli:b1", "--list", "--json")
    assert code == 0
    assert json.loads(out) == {
        "session_id": "cli:b1",
        "origin": {"id": SID, "seq": 8},
        "branches": [],
    }


def test_list_writes_nothing_and_leaves_out_entries_that_are_no_branch(url: str) -> None:
    assert invoke(url, "branch", SID, "--at-turn", "5", "--id", "cli:b1")[0] == 0
    store = ags.open_store(url)
    store.get("cli:other").append_many([ags.Event.new("app/note", {"n": 1})])
    # An entry whose branch was never written (a writer stopped between the two), one naming
    # a session that is no branch, and one with a seq its marker does not name.
    store.meta_set(
        BRANCHES_KIND,
        SID,
        '[["cli:b1",8],["cli:gone",4],["cli:other",4],["cli:b1",4]]',
    )
    store.close()
    before = snapshot(url)
    code, out, err = invoke(url, "branch", SID, "--list", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out)["branches"] == [{"id": "cli:b1", "seq": 8}]
    assert snapshot(url) == before


@pytest.mark.parametrize(
    "args",
    [["--at-seq", "4"], ["--at-turn", "5"], ["--id", "cli:b"]],
    ids=["at-seq", "at-turn", "id"],
)
def test_list_with_a_branch_option_is_a_usage_error(url: str, args: list[str]) -> None:
    code, out, err = invoke(url, "branch", SID, "--list", *args)
    assert (code, out) == (2, "")
    assert err == "Error: --list takes none of --at-seq, --at-turn and --id\n"
    assert branches(url) == []


def test_an_encrypted_store_branches_with_its_key(tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    url = str(tmp_path / "enc")
    with ags.open_store(url, passphrase="correct horse") as store, store.get(SID).turn() as turn:
        turn.user("secret question")
        turn.assistant("secret answer")
    key = tmp_path / "key"
    key.write_text("correct horse\n")
    code, out, err = invoke(url, "--key-file", str(key), "branch", SID, "--id", "cli:b")
    assert (code, err) == (0, "")
    assert out == (
        "cli:b: branched from cli:chat at seq 4; its history has 2 messages and ends with "
        "seq 3, assistant: secret answer\n"
    )
    code, out, err = invoke(url, "branch", SID, "--id", "cli:c")
    assert code == 1 and out == "" and "Traceback" not in err
    with ags.open_store(url, passphrase="correct horse") as store:
        assert [m.text for m in store.get("cli:b").messages()] == [
            "secret question",
            "secret answer",
        ]
        assert not store.exists("cli:c")


def test_branch_has_help_with_examples() -> None:
    for flag in ["-h", "--help"]:
        result = CliRunner().invoke(cli, ["branch", flag])
        assert result.exit_code == 0
        for option in ("--at-seq", "--at-turn", "--id", "--list", "--json"):
            assert option in result.stdout
    examples = result.stdout.split("Examples:")[1].split("\n")
    lines = [line.strip() for line in examples if line.strip()]
    assert lines and all(line.startswith("agentsession branch ") for line in lines)
