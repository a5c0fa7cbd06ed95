"""Rewinds in the neutral transcript rows: a ``session/rewind`` marker is a row of its own, and
every row whose event a rewind took out of the history is marked ``rewound`` (never hidden)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner

import agentsession as ags
from agentsession import Message
from agentsession.cli import _output as cli_output
from agentsession.cli import cli
from agentsession.cli.transcript import REWOUND_MARK
from agentsession.derive import live_events
from agentsession.events import SESSION_REWIND, Event, SessionRewind
from agentsession.view import AnyRow, EventRow, RewindRow, Row, transcript_rows


@pytest.fixture
def session() -> Iterator[ags.BaseSession]:
    with ags.open_store("memory:") as store:
        yield store.get("c")


def three_turns(session: ags.BaseSession) -> list[int]:
    """Three turns q0/a0 .. q2/a2 (seqs 1-4, 5-8, 9-12); the seqs of their user messages."""
    seqs = []
    for i in range(3):
        with session.turn() as turn:
            seqs.append(turn.user(f"q{i}"))
            turn.assistant(f"a{i}")
    return seqs


def rewound(rows: list[Row]) -> list[int]:
    return [row.seq for row in rows if row.rewound]


def rewinds(rows: list[Row]) -> list[RewindRow]:
    return [row for row in rows if isinstance(row, RewindRow)]


def assert_agrees_with_live_events(events: list[Event], rows: list[Row]) -> None:
    """Every row but a marker's is rewound exactly when its event is not a live one."""
    live = {event.seq for event in live_events(events)}
    for row in rows:
        if not isinstance(row, RewindRow):
            assert row.rewound is (row.seq not in live), row


def test_a_log_without_rewinds_has_no_rewound_row(session: ags.BaseSession) -> None:
    three_turns(session)
    rows = transcript_rows(session.read())
    assert len(rows) == 12 and rewound(rows) == [] and rewinds(rows) == []


def test_a_rewind_is_a_row_and_the_turns_it_took_out_are_rewound(
    session: ags.BaseSession,
) -> None:
    users = three_turns(session)
    marker = session.rewind(to_turn=users[0], reason="wrong path")
    with session.turn() as turn:
        turn.user("q-new")
        turn.assistant("a-new")
    events = session.read()
    rows = transcript_rows(events)
    assert len(rows) == len(events)  # nothing hidden
    assert rewound(rows) == list(range(5, 13))  # the second and third turns, whole
    [row] = rewinds(rows)
    assert (row.seq, row.rewind_kind, row.to_seq, row.reason) == (marker, "rewind", 4, "wrong path")
    assert not row.rewound and row.depth == 0
    texts = {r.seq: getattr(r, "text", "") for r in rows}
    assert texts[6] == "q1" and texts[marker + 2] == "q-new"
    assert_agrees_with_live_events(events, rows)


def test_undoing_a_rewind_marks_the_undone_marker(session: ags.BaseSession) -> None:
    users = three_turns(session)
    first = session.rewind(to_seq=users[0] - 1)  # before the first turn: all out
    rows = transcript_rows(session.read())
    assert rewound(rows) == list(range(1, 13))
    undo = session.rewind(to_seq=first - 1)  # back to right before that marker
    events = session.read()
    rows = transcript_rows(events)
    assert rewound(rows) == [first]  # every turn is back; the undone marker is greyed
    assert [(r.seq, r.to_seq, r.rewound) for r in rewinds(rows)] == [
        (first, 0, True),
        (undo, first - 1, False),
    ]
    assert_agrees_with_live_events(events, rows)


def test_retry_rewinds_the_last_turn(session: ags.BaseSession) -> None:
    three_turns(session)
    with session.retry() as turn:
        turn.assistant("a2 again")
    events = session.read()
    rows = transcript_rows(events)
    assert rewound(rows) == [9, 10, 11, 12]
    [row] = rewinds(rows)
    assert (row.seq, row.rewind_kind, row.to_seq, row.rewound) == (13, "retry", 8, False)
    assert [getattr(r, "text", "") for r in rows[-3:-1]] == ["q2", "a2 again"]
    assert not any(r.rewound for r in rows[-5:])
    assert_agrees_with_live_events(events, rows)


def test_edit_and_a_retry_after_a_rewind_undo_the_earlier_marker(
    session: ags.BaseSession,
) -> None:
    users = three_turns(session)
    marker = session.rewind(to_turn=users[1], reason="drop the last turn")  # 13, to 8
    with session.edit(users[1], "q1 edited") as turn:  # 14, to 4: past the first marker
        turn.assistant("a1'")
    events = session.read()
    rows = transcript_rows(events)
    assert rewound(rows) == [*range(5, 13), marker]
    kinds = [(r.rewind_kind, r.to_seq, r.rewound) for r in rewinds(rows)]
    assert kinds == [("rewind", 8, True), ("edit", 4, False)]
    assert [m.text for m in session.messages()] == ["q0", "a0", "q1 edited", "a1'"]
    assert_agrees_with_live_events(events, rows)


def numbered(*pairs: tuple[str, object]) -> list[Event]:
    return [
        msgspec.structs.replace(Event.new(kind, payload), seq=seq)
        for seq, (kind, payload) in enumerate(pairs, 1)
    ]


def test_a_rewind_to_rewound_events_brings_them_back() -> None:
    events = numbered(
        ("user/message", Message.user("a")),  # 1
        ("user/message", Message.user("b")),  # 2
        (SESSION_REWIND, SessionRewind(to_seq=1)),  # 3: history a
        ("user/message", Message.user("c")),  # 4
        (SESSION_REWIND, SessionRewind(to_seq=2)),  # 5: history a, b (3 and 4 out)
        ("user/message", Message.user("d")),  # 6
    )
    rows = transcript_rows(events)
    assert rewound(rows) == [3, 4]
    assert_agrees_with_live_events(events, rows)
    # A later rewind to the seq right after the first marker brings it (and c) back.
    back = msgspec.structs.replace(Event.new(SESSION_REWIND, SessionRewind(to_seq=4)), seq=7)
    again = [*events, back]
    rows = transcript_rows(again)
    assert rewound(rows) == [2, 5, 6]  # history a, c: the first marker is in effect again
    assert_agrees_with_live_events(again, rows)


def test_the_tail_of_a_log_is_marked_as_it_stood_at_its_end() -> None:
    events = numbered(
        ("user/message", Message.user("a")),  # 1
        ("user/message", Message.user("b")),  # 2
        ("user/message", Message.user("c")),  # 3
        (SESSION_REWIND, SessionRewind(to_seq=1)),  # 4
        ("user/message", Message.user("d")),  # 5
    )
    whole = {row.seq: row.rewound for row in transcript_rows(events)}
    for start in range(len(events)):
        tail = transcript_rows(events[start:])
        assert {row.seq: row.rewound for row in tail} == {
            seq: flag for seq, flag in whole.items() if seq > start
        }


def test_a_marker_of_a_newer_revision_or_a_broken_one_never_raises() -> None:
    base = numbered(
        ("user/message", Message.user("a")),
        ("user/message", Message.user("b")),
    )
    newer = msgspec.structs.replace(
        Event.new(SESSION_REWIND, SessionRewind(to_seq=1, min_revision=99)), seq=3
    )
    rows = transcript_rows([*base, newer])
    assert rewound(rows) == []  # what it means is not known here: nothing is greyed
    assert isinstance(rows[-1], RewindRow) and rows[-1].to_seq == 1
    broken = Event(type=SESSION_REWIND, seq=3, data=msgspec.Raw(b'{"toSeq": "x"}'))
    rows = transcript_rows([*base, broken])
    assert isinstance(rows[-1], EventRow) and rewound(rows) == []
    later = msgspec.structs.replace(Event.new(SESSION_REWIND, SessionRewind(to_seq=5)), seq=3)
    rows = transcript_rows([*base, later])  # names no earlier seq: changes nothing
    assert rewound(rows) == [] and isinstance(rows[-1], RewindRow)


def test_rewind_rows_encode_and_decode(session: ags.BaseSession) -> None:
    three_turns(session)
    session.rewind(to_seq=4, reason="x" * 400)
    rows = transcript_rows(session.read())
    encoded = msgspec.json.encode(rows)
    assert msgspec.json.decode(encoded, type=list[AnyRow]) == rows
    marker = msgspec.json.decode(encoded, type=list[dict[str, object]])[-1]
    assert marker["kind"] == "rewind" and marker["rewind_kind"] == "rewind"
    assert marker["to_seq"] == 4 and marker["rewound"] is False
    assert len(str(marker["reason"])) == 160  # a preview unless full
    assert transcript_rows(session.read(), full=True)[-1] == msgspec.structs.replace(
        rows[-1], reason="x" * 400
    )


# -- agentsession show -------------------------------------------------------------------------


def show(url: str, *args: str, env: dict[str, str] | None = None) -> str:
    result = CliRunner().invoke(
        cli, ["--store", url, "show", *args], env={"COLUMNS": "200", **(env or {})}
    )
    assert result.exit_code == 0, result.output
    return result.stdout


def retried_store(tmp_path: Path) -> str:
    """A JSONL store whose session ``c`` has three turns, a rewind to the end of the first
    (seq 13, to 8) and a retry of the second (seq 14, to 4) with its new turn (15-18)."""
    url = str(tmp_path / "store")
    with ags.open_store(url) as store:
        session = store.get("c")
        users = three_turns(session)
        session.rewind(to_turn=users[1], reason="wrong path")
        with session.retry() as turn:
            turn.assistant("a1 again")
    return url


def test_show_marks_rewound_rows_and_says_where_the_history_went(tmp_path: Path) -> None:
    url = retried_store(tmp_path)
    out = show(url, "c").splitlines()
    lines = {int(line[:5]): line[6:] for line in out if line[:5].strip().isdigit()}
    assert sorted(lines) == list(range(1, 19))
    marked = [seq for seq, line in lines.items() if line.startswith(f"{REWOUND_MARK} ")]
    assert marked == [*range(5, 14)]
    assert lines[6] == f"{REWOUND_MARK} │ user: q1"
    assert lines[13].startswith(f"{REWOUND_MARK}  REWIND  rewind: history back to seq 8 ")
    assert "(undone by a later rewind) · wrong path" in lines[13]
    assert lines[14].startswith(" REWIND  retry: history back to seq 4 ")
    assert lines[17] == "│ assistant: a1 again"
    rows = [json.loads(line) for line in show(url, "c", "--json", "--rows").splitlines()]
    assert [row["seq"] for row in rows if row["rewound"]] == [*range(5, 14)]
    assert rows[13]["kind"] == "rewind" and rows[13]["rewind_kind"] == "retry"


def test_show_dims_rewound_rows_on_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = retried_store(tmp_path)
    monkeypatch.setattr(cli_output, "is_terminal", lambda stream: True)
    out = show(url, "c", env={"FORCE_COLOR": "1"})
    gutter = re.compile(r"^\x1b\[2m +(\d+)\x1b\[0m\x1b\[2m \x1b\[0m")
    bodies = {}
    for line in out.splitlines():
        if found := gutter.match(line):
            bodies[int(found[1])] = line[found.end() :]
    assert sorted(bodies) == list(range(1, 19))
    for seq, body in bodies.items():
        styles = [s.split(";") for s in re.findall(r"\x1b\[([0-9;]*)m", body) if s != "0"]
        if 5 <= seq <= 13:  # faint (SGR 2) throughout, after the mark
            assert body.startswith(f"\x1b[2m{REWOUND_MARK} "), body
            assert styles and all("2" in style for style in styles), body
        else:
            assert REWOUND_MARK not in body.split("marked")[0], body
            assert not any("2" in style for style in styles), body


def test_a_bad_marker_is_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    events = numbered(
        ("user/message", Message.user("a")),
        (SESSION_REWIND, SessionRewind(to_seq=7)),
    )
    with caplog.at_level("WARNING"):
        rows = transcript_rows(events)
    assert rewound(rows) == []
    assert [r.getMessage() for r in caplog.records if "to_seq 7" in r.getMessage()] == [
        "ignored the rewind marker at seq 2: to_seq 7 is not an earlier seq"
    ]
