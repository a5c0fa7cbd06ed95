"""``agentsession rewind``: going back in a conversation from the command line, on a JSONL
store directory and a SQLite file."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import agentsession as ags
from agentsession.cli import cli
from agentsession.events import SESSION_REWIND, SessionRewind

from .cli_chat_store import SID, chat_store, events, invoke, texts


@pytest.fixture(params=["jsonl", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store holding ``SID``: three turns (seqs 1-4, 5-8, 9-12)."""
    yield from chat_store(request.param, tmp_path)


def turn_id(url: str, index: int) -> str:
    starts = [e for e in events(url) if e.type == "turn/start"]
    value = starts[index].meta["turn_id"]
    assert isinstance(value, str)
    return value


def test_rewind_to_a_turn_by_its_id_keeps_that_turn(url: str) -> None:
    code, out, err = invoke(url, "rewind", SID, "--to-turn", turn_id(url, 1), "--reason", "off")
    assert (code, err) == (0, "")
    assert out == (
        f"{SID}: rewound to seq 8 (marker at seq 13); the history now has 4 messages and ends "
        "with seq 7, assistant: answer 1\n"
    )
    assert texts(url) == ["question 0", "answer 0", "question 1", "answer 1"]
    marker = events(url)[-1]
    assert marker.type == SESSION_REWIND and marker.seq == 13
    assert marker.decode(SessionRewind).to_seq == 8
    assert marker.decode(SessionRewind).kind == "rewind"
    assert marker.decode(SessionRewind).reason == "off"


def test_rewind_to_a_turn_by_a_seq_inside_it(url: str) -> None:
    code, out, err = invoke(url, "rewind", SID, "--to-turn", "2")
    assert (code, err) == (0, "")
    assert "rewound to seq 4 (marker at seq 13)" in out
    assert texts(url) == ["question 0", "answer 0"]
    assert len(events(url)) == 13  # nothing deleted


def test_rewind_to_a_seq_inside_a_turn_goes_to_before_it(url: str) -> None:
    code, out, err = invoke(url, "rewind", SID, "--to-seq", "6")
    assert (code, err) == (0, "")
    assert out.startswith(f"{SID}: rewound to seq 4 (marker at seq 13);")
    assert texts(url) == ["question 0", "answer 0"]


def test_rewind_to_seq_0_empties_the_history_and_a_later_rewind_undoes_it(url: str) -> None:
    code, out, _ = invoke(url, "rewind", SID, "--to-seq", "0")
    assert code == 0
    assert out == f"{SID}: rewound to seq 0 (marker at seq 13); the history is now empty\n"
    assert texts(url) == []
    code, out, _ = invoke(url, "rewind", SID, "--to-seq", "12")
    assert code == 0
    assert "the history now has 6 messages and ends with seq 11, assistant: answer 2" in out
    assert texts(url)[-1] == "answer 2"


def test_rewind_json(url: str) -> None:
    code, out, err = invoke(url, "rewind", SID, "--to-turn", "5", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "session_id": SID,
        "seq": 13,
        "to_seq": 8,
        "messages": 4,
        "last": {"seq": 7, "role": "assistant", "text": "answer 1"},
    }
    code, out, _ = invoke(url, "rewind", SID, "--to-seq", "0", "--json")
    assert code == 0
    assert json.loads(out)["last"] is None


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--to-seq", "4", "--to-turn", "5"],
    ],
    ids=["neither", "both"],
)
def test_exactly_one_point_is_a_usage_error(url: str, args: list[str]) -> None:
    code, out, err = invoke(url, "rewind", SID, *args)
    assert (code, out) == (2, "")
    assert err == "Error: give exactly one of --to-seq N and --to-turn TURN\n"
    assert len(events(url)) == 12


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--to-seq", "99"], "to_seq must be a seq of the log (0..12), not 99"),
        (["--to-turn", "nope"], "no turn of the history holds 'nope'"),
        (["--to-turn", "99"], "no turn of the history holds 99"),
        (["--to-turn", " "], "--to-turn needs a turn id or a seq"),
        (["--to-seq", "-1"], "Invalid value for '--to-seq'"),
    ],
)
def test_a_point_that_is_not_there_is_a_usage_error(
    url: str, args: list[str], message: str
) -> None:
    code, out, err = invoke(url, "rewind", SID, *args)
    assert (code, out) == (2, "")
    assert message in err and "Traceback" not in err
    assert len(events(url)) == 12


def test_an_unknown_session_is_not_found_and_not_created(url: str) -> None:
    code, out, err = invoke(url, "rewind", "cli:chta", "--to-seq", "0")
    assert (code, out) == (4, "")
    assert err.startswith("Error: no session 'cli:chta' in ")
    assert err.endswith(f"did you mean '{SID}'?\n")
    store = ags.open_store(url)
    try:
        assert not store.exists("cli:chta")
    finally:
        store.close()


def test_a_missing_store_is_not_found_and_not_created(tmp_path: Path) -> None:
    for missing in (str(tmp_path / "typo"), f"sqlite:///{tmp_path}/typo.db"):
        code, out, err = invoke(missing, "rewind", SID, "--to-seq", "0")
        assert (code, out) == (4, "")
        assert err.startswith("Error: no store at ")
    assert list(tmp_path.iterdir()) == []


def test_a_rewind_behind_the_latest_compaction_is_refused(url: str) -> None:
    store = ags.open_store(url)
    store.get(SID).compact(ags.Message.user("Summary."), keep_turns=1)
    store.close()
    code, out, err = invoke(url, "rewind", SID, "--to-seq", "4")
    assert (code, out) == (2, "")
    assert "before the compaction marker at seq 13" in err


def _open_turn(url: str) -> None:
    """Leave a turn without an end, as a crashed worker does."""
    store = ags.open_store(url)
    store.get(SID).append_many(
        [
            ags.Event.new("turn/start", ags.events.TurnStart(), agent="coder"),
            ags.Event.new("user/message", ags.Message.user("question 3"), agent="coder"),
        ]
    )
    store.close()


def test_an_open_turn_is_refused_without_the_lock_and_rewound_under_it(url: str) -> None:
    _open_turn(url)
    code, out, err = invoke(url, "rewind", SID, "--to-turn", "5", "--no-lock")
    assert (code, out) == (2, "")
    assert "has a turn running (from seq 13)" in err
    # Taking the turn lock (free: the worker that left the turn is gone) the rewind goes on.
    code, out, err = invoke(url, "rewind", SID, "--to-turn", "5")
    assert (code, err) == (0, "")
    assert "rewound to seq 8 (marker at seq 15)" in out
    assert texts(url) == ["question 0", "answer 0", "question 1", "answer 1"]


def test_a_held_turn_lock_makes_it_wait_then_fail(url: str) -> None:
    store = ags.open_store(url)
    taken = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with store.lock(SID, timeout=5):
            taken.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert taken.wait(5)
        code, out, err = invoke(url, "rewind", SID, "--to-seq", "4", "--lock-timeout", "0.2")
    finally:
        release.set()
        holder.join()
        store.close()
    assert (code, out) == (1, "")
    assert err == (
        f"Error: session '{SID}' is busy: its turn lock is held (an agent is running a turn); "
        "waited 0.2 s. Try again later\n"
    )
    assert len(events(url)) == 12


def test_rewind_has_help_with_examples() -> None:
    for flag in ["-h", "--help"]:
        result = CliRunner().invoke(cli, ["rewind", flag])
        assert result.exit_code == 0
        assert "--to-seq" in result.stdout and "--to-turn" in result.stdout
    examples = result.stdout.split("Examples:")[1].split("\n")
    lines = [line.strip() for line in examples if line.strip()]
    assert lines and all(line.startswith("agentsession rewind ") for line in lines)
