"""The on-disk line format is an API: golden files pin it, and old files must keep loading."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from agentsession import open_store
from agentsession.events import EVENT_TYPES, PAYLOAD_TYPES, decode_event, encode_event

from .golden_events import (
    all_event_types_events,
    canonical_events,
    events_since_0_3,
    events_since_0_4,
    events_since_0_5,
    events_since_0_6,
)

GOLDEN = Path(__file__).parent / "golden" / "events-v1.jsonl"
SINCE_0_3 = Path(__file__).parent / "golden" / "events-0.3.jsonl"
SINCE_0_4 = Path(__file__).parent / "golden" / "events-0.4.jsonl"
SINCE_0_5 = Path(__file__).parent / "golden" / "events-0.5.jsonl"
SINCE_0_6 = Path(__file__).parent / "golden" / "events-0.6.jsonl"


def test_every_event_type_is_pinned_by_the_golden_files() -> None:
    assert {e.type for e in all_event_types_events()} >= EVENT_TYPES


def test_what_0_3_added_matches_its_golden_lines_byte_for_byte() -> None:
    lines = [encode_event(e) + b"\n" for e in events_since_0_3()]
    if os.environ.get("AGENTSESSION_UPDATE_GOLDEN"):
        SINCE_0_3.write_bytes(b"".join(lines))
    assert SINCE_0_3.read_bytes().splitlines(keepends=True) == lines
    decoded = [decode_event(line) for line in SINCE_0_3.read_bytes().splitlines()]
    assert decoded == events_since_0_3()
    assert [type(e.payload()) for e in decoded] == [PAYLOAD_TYPES[e.type] for e in decoded]


def test_what_0_4_added_matches_its_golden_lines_byte_for_byte() -> None:
    lines = [encode_event(e) + b"\n" for e in events_since_0_4()]
    if os.environ.get("AGENTSESSION_UPDATE_GOLDEN"):
        SINCE_0_4.write_bytes(b"".join(lines))
    assert SINCE_0_4.read_bytes().splitlines(keepends=True) == lines
    assert all(line.endswith(b',"id":"%s"}\n' % e.id.encode()) for line, e in
               zip(lines, events_since_0_4(), strict=True))
    assert [decode_event(line) for line in lines] == events_since_0_4()


def test_what_revision_5_added_matches_its_golden_lines_byte_for_byte() -> None:
    lines = [encode_event(e) + b"\n" for e in events_since_0_5()]
    if os.environ.get("AGENTSESSION_UPDATE_GOLDEN"):
        SINCE_0_5.write_bytes(b"".join(lines))
    assert SINCE_0_5.read_bytes().splitlines(keepends=True) == lines
    decoded = [decode_event(line) for line in SINCE_0_5.read_bytes().splitlines()]
    assert decoded == events_since_0_5()
    assert [type(e.payload()) for e in decoded] == [PAYLOAD_TYPES[e.type] for e in decoded]


def test_what_revision_6_added_matches_its_golden_lines_byte_for_byte() -> None:
    lines = [encode_event(e) + b"\n" for e in events_since_0_6()]
    if os.environ.get("AGENTSESSION_UPDATE_GOLDEN"):
        SINCE_0_6.write_bytes(b"".join(lines))
    assert SINCE_0_6.read_bytes().splitlines(keepends=True) == lines
    decoded = [decode_event(line) for line in SINCE_0_6.read_bytes().splitlines()]
    assert decoded == events_since_0_6()
    assert [type(e.payload()) for e in decoded] == [PAYLOAD_TYPES[e.type] for e in decoded]


def test_a_rewound_log_loads_and_its_rewinds_apply(tmp_path: Path) -> None:
    """Revision 6's markers, after revisions 4 and 5's lines: the first rewinds to an empty
    history, the second undoes it; read() keeps every event."""
    body = SINCE_0_4.read_bytes() + SINCE_0_5.read_bytes()
    first, second = SINCE_0_6.read_bytes().splitlines(keepends=True)[:2]
    (tmp_path / "rewound.jsonl").write_bytes(body + first)
    (tmp_path / "undone.jsonl").write_bytes(body + first + second)
    with open_store(tmp_path) as store:
        assert store.get("rewound").messages() == []
        assert [m.text for m in store.get("undone").messages()] == ["deploy it"]
        assert len(store.get("undone").read()) == 9


def test_a_branch_log_from_the_golden_marker_reads_its_origin(tmp_path: Path) -> None:
    """Revision 6's branch marker as the first line of a log makes that log a branch of the
    session it names, at the seq it names; its own events follow the shared part."""
    origin = events_since_0_4()  # seqs 1..3: "deploy it", "deployed", webhook
    body = b"".join(encode_event(e) + b"\n" for e in origin)
    (tmp_path / "o.jsonl").write_bytes(body)
    marker = SINCE_0_6.read_bytes().splitlines(keepends=True)[2].replace(
        b'"origin":"slack:C1:t:1","originSeq":12', b'"origin":"o","originSeq":2'
    )
    (tmp_path / "b.jsonl").write_bytes(marker)
    with open_store(tmp_path) as store:
        branch = store.get("b")
        assert branch.origin is not None and (branch.origin.id, branch.origin.seq) == ("o", 2)
        assert [e.seq for e in branch.read()] == [1, 2, 3]
        assert [m.text for m in branch.messages()] == ["deploy it", "deployed"]


def test_a_fence_in_a_log_stays_out_of_the_history(tmp_path: Path) -> None:
    """A log holding revision 5's ``session/lease``, ``session/delivery`` and
    ``session/rollback`` loads, and neither the fence, the deliveries nor the marker are
    messages (a delivery enters the history as the user message of the turn that processes
    it); the marker leaves its turn's events (turn ``t-1`` from seq 2 on: "deployed") out."""
    (tmp_path / "fenced.jsonl").write_bytes(SINCE_0_4.read_bytes() + SINCE_0_5.read_bytes())
    with open_store(tmp_path) as store:
        session = store.get("fenced")
        assert [e.type for e in session.read()][-4:] == [
            "session/lease",
            "session/delivery",
            "session/delivery",
            "session/rollback",
        ]
        assert [m.text for m in session.messages()] == ["deploy it"]
        assert len(session.read()) == 7  # nothing deleted


def test_a_0_4_log_recognises_a_retried_event_by_its_stored_id(tmp_path: Path) -> None:
    (tmp_path / "golden.jsonl").write_bytes(SINCE_0_4.read_bytes())
    session = open_store(tmp_path).get("golden")
    for event in events_since_0_4():
        retry = msgspec.structs.replace(event, seq=0, time=None)
        assert session.append(retry) == event.seq  # stored already: nothing written
    assert session.read() == events_since_0_4()


def test_lines_from_before_0_4_read_back_without_ids(tmp_path: Path) -> None:
    (tmp_path / "old.jsonl").write_bytes(GOLDEN.read_bytes())
    session = open_store(tmp_path).get("old")
    assert {e.id for e in session.read()} == {""}
    seq = session.append(canonical_events()[0])  # an id-less event gets one when appended
    assert session.read(after=seq - 1)[0].id


def test_encoding_matches_the_golden_lines_byte_for_byte() -> None:
    lines = [encode_event(e) + b"\n" for e in canonical_events()]
    if os.environ.get("AGENTSESSION_UPDATE_GOLDEN"):
        GOLDEN.write_bytes(b"".join(lines))
    assert GOLDEN.read_bytes().splitlines(keepends=True) == lines


def test_golden_lines_decode_to_the_same_events_and_payloads() -> None:
    expected = canonical_events()
    decoded = [decode_event(line) for line in GOLDEN.read_bytes().splitlines()]
    assert decoded == expected
    for got, want in zip(decoded, expected, strict=True):
        if got.type in PAYLOAD_TYPES:
            assert got.payload() == want.payload()
            assert type(got.payload()) is PAYLOAD_TYPES[got.type]
        else:
            assert got.payload() == msgspec.json.decode(want.raw)


def test_golden_file_opens_as_a_jsonl_session(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    (tmp_path / "golden.jsonl").write_bytes(GOLDEN.read_bytes())
    session = store.get("golden")
    assert session.latest_seq == len(canonical_events())
    assert session.read() == canonical_events()
    # The last marker is a legacy compaction (before_seq 18): summary, then events after 18.
    history = session.messages()
    assert history[0].text == "legacy"
