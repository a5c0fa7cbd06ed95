"""Encrypted stores written by this version and earlier ones open with their passphrase and read
back exactly what was written, on every backend: ``tests/golden/encrypted/`` (the first
version with encryption), ``encrypted-format1/`` (the last version sealing events in format 1,
``"sealed":1``: with event ids) and ``encrypted-format2/`` (format 2, every field stored in
clear bound to its box), each made by ``tests/golden/encrypted/make.py``.

The golden stores hold ciphertext only; the expected events and messages are written out
here literally. A wrong passphrase fails when the store is opened, before any event is read;
opening without one says the store is encrypted.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pytest

import agentsession as ags
from agentsession.crypto import EncryptionError
from agentsession.events import encode_event

from .test_conformance_postgres import DSN, drop_schemas, new_schema_name, url_with_schema

GOLDENS = Path(__file__).parent / "golden"
GOLDEN_SETS = {"encrypted": 1, "encrypted-format1": 1, "encrypted-format2": 2}
"""Each golden directory, and the format its events are sealed in."""
PASSPHRASE = "golden passphrase: correct horse battery staple"
"""The passphrase of every golden store (``make.py``'s ``PASSPHRASE``)."""

EXPECTED_CHAT = [
    b'{"seq":1,"type":"turn/start","agent":"coder","time":"2026-01-02T03:04:05Z","data":{}}',
    b'{"seq":2,"type":"user/message","agent":"coder","user":"U1",'
    b'"time":"2026-01-02T03:04:05Z","data":{"role":"user","parts":[{"type":"text",'
    b'"text":"Where is the config?"}]},"meta":{"channel":"C1"}}',
    b'{"seq":3,"type":"step/start","agent":"coder","time":"2026-01-02T03:04:05Z",'
    b'"data":{"step":0}}',
    b'{"seq":4,"type":"assistant/message","agent":"coder",'
    b'"time":"2026-01-02T03:04:05Z","data":{"role":"assistant","toolCalls":[{"id":"c1",'
    b'"name":"read_file","arguments":{"path":"config.toml"}}]}}',
    b'{"seq":5,"type":"tool/result","agent":"coder","time":"2026-01-02T03:04:05Z",'
    b'"data":{"callId":"c1","name":"read_file","content":"debug = true"}}',
    b'{"seq":6,"type":"step/end","agent":"coder","time":"2026-01-02T03:04:05Z","data":{"step":0}}',
    b'{"seq":7,"type":"assistant/message","agent":"coder",'
    b'"time":"2026-01-02T03:04:05Z","data":{"role":"assistant","parts":[{"type":"text",'
    b'"text":"It is config.toml; debug is on."}]}}',
    b'{"seq":8,"type":"turn/end","agent":"coder","time":"2026-01-02T03:04:05Z","data":{"steps":1}}',
    b'{"seq":9,"type":"turn/start","agent":"coder","time":"2026-01-02T03:04:05Z","data":{}}',
    b'{"seq":10,"type":"user/message","agent":"coder","user":"U1",'
    b'"time":"2026-01-02T03:04:05Z","data":{"role":"user","parts":[{"type":"text",'
    b'"text":"Thanks"}]}}',
    b'{"seq":11,"type":"assistant/message","agent":"coder",'
    b'"time":"2026-01-02T03:04:05Z","data":{"role":"assistant","parts":[{"type":"text",'
    b'"text":"You are welcome."}]}}',
    b'{"seq":12,"type":"turn/end","agent":"coder","time":"2026-01-02T03:04:05Z",'
    b'"data":{"steps":0}}',
]
"""``golden:chat`` as ``show --json`` prints it (seqs 1-8 sealed under ``k1``, 9-12 ``k2``)."""

EXPECTED_MESSAGES = [
    ags.Message.user("Where is the config?"),
    ags.Message.assistant(tool_calls=[ags.ToolCall("c1", "read_file", {"path": "config.toml"})]),
    ags.Message(role="tool", tool_results=[ags.ToolResult("c1", "read_file", "debug = true")]),
    ags.Message.assistant("It is config.toml; debug is on."),
    ags.Message.user("Thanks"),
    ags.Message.assistant("You are welcome."),
]


# -- the golden stores, each copied (or loaded) somewhere of its own -------------------------


@pytest.fixture(params=sorted(GOLDEN_SETS))
def golden(request: pytest.FixtureRequest) -> Path:
    """One golden directory."""
    return GOLDENS / str(request.param)


@pytest.fixture
def jsonl_url(tmp_path: Path, golden: Path) -> str:
    shutil.copytree(golden / "jsonl", tmp_path / "jsonl")
    return str(tmp_path / "jsonl")


@pytest.fixture
def sqlite_url(tmp_path: Path, golden: Path) -> str:
    shutil.copyfile(golden / "store.sqlite3", tmp_path / "store.sqlite3")
    return f"sqlite:///{tmp_path / 'store.sqlite3'}"


def load_postgres_golden(schema: str, golden: Path = GOLDENS / "encrypted") -> None:
    """Load ``golden``'s ``postgres.sql`` into ``schema`` (which must not exist yet)."""
    import psycopg

    script = (golden / "postgres.sql").read_text(encoding="utf-8")
    script = script.replace("agentsession_golden_enc", schema)
    with psycopg.connect(DSN, autocommit=True) as conn:  # the dump changes search_path
        conn.execute(script.encode())


@pytest.fixture
def postgres_url(golden: Path) -> Iterator[str]:
    if not DSN:
        pytest.skip("set AGENTSESSION_TEST_POSTGRES_DSN to run the PostgreSQL tests")
    schema = new_schema_name()
    try:
        load_postgres_golden(schema, golden)
        yield url_with_schema(schema)
    finally:
        drop_schemas([schema])


@pytest.fixture(params=["jsonl", "sqlite", "postgres"])
def golden_url(request: pytest.FixtureRequest, golden: Path) -> str:
    """A copy of ``golden``'s store of one backend."""
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


# -- reading them back ------------------------------------------------------------------------


def without_id(event: ags.Event) -> bytes:
    """The event as ``show --json`` prints it, without its id and turn id (random in each
    golden set, and absent from the first)."""
    meta = {k: v for k, v in event.meta.items() if k != "turn_id"}
    return encode_event(msgspec.structs.replace(event, id="", meta=meta))


def test_a_golden_store_reads_back_exactly_what_was_written(
    golden_url: str, golden: Path
) -> None:
    # The first version's shred left no notice in the log; later ones append one (seq 5).
    shredded_last = 4 if golden.name == "encrypted" else 5
    with ags.open_store(golden_url, create=False, passphrase=PASSPHRASE) as store:
        assert store.encrypted
        assert sorted((i.id, i.last_seq) for i in store.list()) == [
            ("golden:chat", 12),
            ("golden:shredded", shredded_last),
        ]
        chat = store.get("golden:chat")
        assert [without_id(e) for e in chat.read()] == EXPECTED_CHAT
        assert chat.messages() == EXPECTED_MESSAGES
        # Reading from the middle opens the events sealed under the second data key too.
        assert [without_id(e) for e in chat.read(after=8)] == EXPECTED_CHAT[8:]
        # The shredded session is listed, with its seqs, but can never be opened.
        with pytest.raises(EncryptionError, match=r"'golden:shredded'.*shredded"):
            store.get("golden:shredded").read()


def test_the_golden_store_keeps_appending_under_the_active_key(golden_url: str) -> None:
    with ags.open_store(golden_url, create=False, passphrase=PASSPHRASE) as store:
        assert store.get("golden:chat").append(ags.Event.new("test/note", {"n": 1})) == 13
    with ags.open_store(golden_url, create=False, passphrase=PASSPHRASE) as store:
        events = store.get("golden:chat").read()
        assert [e.seq for e in events] == list(range(1, 14))
        assert events[-1].decode(dict) == {"n": 1}


def test_a_wrong_passphrase_fails_when_opening_before_any_event_is_read(
    golden_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    original: Callable[..., object] = ags.BaseSession._load_window

    def counting(self: ags.BaseSession) -> object:
        reads.append("window")
        return original(self)

    monkeypatch.setattr(ags.BaseSession, "_load_window", counting)
    with pytest.raises(EncryptionError, match="wrong passphrase") as caught:
        ags.open_store(golden_url, create=False, passphrase="not the passphrase")
    assert reads == []
    assert "not the passphrase" not in str(caught.value)
    assert PASSPHRASE not in str(caught.value)
    with pytest.raises(EncryptionError, match="with a passphrase, not a raw key"):
        ags.open_store(golden_url, create=False, key=bytes(32))


def test_opening_a_golden_store_without_a_passphrase_says_it_is_encrypted(
    golden_url: str,
) -> None:
    with pytest.raises(EncryptionError, match="is encrypted"):
        ags.open_store(golden_url, create=False)


# -- what the golden stores hold ----------------------------------------------------------


def sealed_payloads_of_jsonl(directory: Path, name: str) -> list[dict[str, object]]:
    lines = (directory / name).read_bytes().splitlines()
    return [json.loads(line)["data"] for line in lines]


def test_the_golden_jsonl_log_holds_sealed_payloads_and_the_meta_its_key_records(
    golden: Path,
) -> None:
    payloads = sealed_payloads_of_jsonl(golden / "jsonl", "golden_chat.jsonl")
    version = GOLDEN_SETS[golden.name]
    assert [(p["sealed"], p["kid"]) for p in payloads] == [(version, "k1")] * 8 + [
        (version, "k2")
    ] * 4
    assert all(set(p) == {"sealed", "kid", "box"} for p in payloads)
    meta = golden / "jsonl" / ".meta"
    assert sorted(str(p.relative_to(meta)) for p in meta.rglob("*.json")) == [
        "crypto-active/golden_chat.json",
        "crypto-session/golden_chat.json",
        "crypto-session/golden_shredded.json",
        "crypto/store.json",
    ]
    record = json.loads(json.loads((meta / "crypto" / "store.json").read_text())["value"])
    assert record["v"] == 1 and set(record) == {"v", "kdf", "key"}
    assert {k: record["kdf"][k] for k in ("name", "n", "r", "p")} == {
        "name": "scrypt",
        "n": 32768,
        "r": 8,
        "p": 1,
    }
    shredded = json.loads((meta / "crypto-session" / "golden_shredded.json").read_text())
    assert shredded["value"] == "shredded"


def test_the_golden_sqlite_database_is_one_file_with_sealed_rows(golden: Path) -> None:
    assert not (golden / "store.sqlite3-wal").exists()
    conn = sqlite3.connect(f"file:{golden / 'store.sqlite3'}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT seq, data, meta, user FROM events WHERE session_id = 'golden:chat' ORDER BY seq"
        ).fetchall()
        kinds = dict(conn.execute("SELECT kind, count(*) FROM meta GROUP BY kind").fetchall())
    finally:
        conn.close()
    assert [r[0] for r in rows] == list(range(1, 13))
    version = GOLDEN_SETS[golden.name]
    assert all(json.loads(r[1])["sealed"] == version and not r[2] and not r[3] for r in rows)
    assert kinds == {"crypto": 1, "crypto-session": 2, "crypto-active": 1}


# -- the JSONL line format of sealed events -----------------------------------------------


def test_an_encrypted_jsonl_line_names_each_key_once(tmp_path: Path) -> None:
    """docs/format.md: one event per line, a JSON object. A sealed event's line must not
    repeat ``"seq"`` (a strict JSON reader refuses duplicate keys, and the one that keeps the
    first or the last of them may disagree with the line head)."""
    with ags.open_store(tmp_path / "s", key=bytes(range(32))) as store:
        session = store.get("a")
        session.append(ags.Event.new("test/one", {"n": 1}))  # the first line: the batch path
        session.append_many([ags.Event.new("test/two", {"n": n}) for n in (2, 2)])  # a batch
        session.append(ags.Event.new("test/three", {"n": 3}))  # the one-write fast path
    for line in (tmp_path / "s" / "a.jsonl").read_bytes().splitlines():

        def no_duplicates(pairs: list[tuple[str, object]], line: bytes = line) -> dict[str, object]:
            keys = [k for k, _ in pairs]
            assert len(keys) == len(set(keys)), line
            return dict(pairs)

        json.loads(line, object_pairs_hook=no_duplicates)


def test_a_golden_jsonl_line_with_a_clear_field_changed_does_not_open(
    golden: Path, tmp_path: Path
) -> None:
    """Format 2 binds every clear field to its box (here the agent); format 1 bound the
    session, seq and type only, but stored user and meta empty, so a line given a user does
    not open in either."""
    shutil.copytree(golden / "jsonl", tmp_path / "jsonl")
    log = tmp_path / "jsonl" / "golden_chat.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    head = b'{"seq":4,"type":"assistant/message","agent":"coder",'
    assert lines[3].startswith(head)
    changes = [head[:-1] + b',"user":"mallory",']
    if GOLDEN_SETS[golden.name] >= 2:
        changes.append(head.replace(b'"coder"', b'"other"'))
    for changed in changes:
        log.write_bytes(b"".join([*lines[:3], lines[3].replace(head, changed), *lines[4:]]))
        store = ags.open_store(tmp_path / "jsonl", create=False, passphrase=PASSPHRASE)
        try:
            with pytest.raises(EncryptionError, match=r"'golden:chat' seq 4 .*does not open"):
                store.get("golden:chat").read()
        finally:
            store.close()
