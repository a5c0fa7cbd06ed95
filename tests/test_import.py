"""``agentsession import``: agentkit sessions directories and lango databases, through the library
(:mod:`agentsession.interop.importers`) and the command line."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import agentsession as ags
from agentsession import events as ev
from agentsession.chat.identity import active_session, agent_binding, cli_current
from agentsession.cli import cli
from agentsession.interop import importers as im
from agentsession.interop.agentkit import decode_agentkit_line

GOLDEN = Path(__file__).parent / "golden"
AGENTKIT_DIR = GOLDEN / "agentkit_dir"
LANGO_DDL = GOLDEN / "lango" / "schema.sql"
LANGO_PROTECTED_DDL = GOLDEN / "lango" / "schema_payload_protection.sql"

CLI_TS = "cli:20260905-101112.123"
NEW_ID = "slack:C001:u:U111:new:20260905-101112.123"


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def agentkit_dir(tmp_path: Path) -> Path:
    """The static fixture plus the CLI pointer, a symlink as agentkit's SetCLICurrent makes it
    (a relative target naming the log)."""
    target = tmp_path / "sessions"
    shutil.copytree(AGENTKIT_DIR, target)
    os.symlink("cli_20260905-101112.123.jsonl", target / "cli_current.jsonl")
    return target


def mattn(t: str) -> str:
    """A time as mattn/go-sqlite3 writes it."""
    return t + "+00:00"


def make_lango_db(path: Path, ddl: Path = LANGO_DDL) -> Path:
    """A lango database: three sessions (tool calls, a compacted summary written by
    CompactMessages, a summary that sorts after an older message), an empty one, and a message
    whose session was deleted."""
    conn = sqlite3.connect(path)
    conn.executescript(ddl.read_text())
    sessions = [
        (
            1,
            "telegram:42",
            "operator",
            "telegram",
            "42",
            "claude-sonnet-4",
            '{"lango.mode":"coding"}',
        ),
        (2, "slack:C9", None, "slack", "C9", None, None),
        (3, "slack:C10", None, None, None, None, None),
        (4, "discord:7", None, None, None, None, None),
    ]
    for sid, key, agent, ctype, cid, model, meta in sessions:
        conn.execute(
            "INSERT INTO sessions (id, key, agent_id, channel_type, channel_id, model, metadata,"
            " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                sid,
                key,
                agent,
                ctype,
                cid,
                model,
                meta,
                mattn("2026-04-13 09:59:00"),
                mattn("2026-04-13 10:00:03"),
            ),
        )
    call = [{"id": "call_1", "name": "fs_list", "input": '{"path":"."}'}]
    answer = [{"id": "call_1", "name": "fs_list", "input": "", "output": "a.py\nb.py"}]
    thought = [
        {
            "id": "call_2",
            "name": "fs_read",
            "input": '{"path":"a.py"}',
            "thought": True,
            "thoughtSignature": "c2lnbmF0dXJl",
        }
    ]
    messages = [
        # id, session, role, content, timestamp, tool_calls, author
        (1, 1, "user", "List the files", mattn("2026-04-13 10:00:00"), [], None),
        (2, 1, "assistant", "", mattn("2026-04-13 10:00:01"), call, "operator"),
        (3, 1, "tool", "a.py\nb.py", mattn("2026-04-13 10:00:02"), answer, "operator"),
        (
            4,
            1,
            "assistant",
            "Two files: a.py and b.py.",
            mattn("2026-04-13 10:00:03"),
            [],
            "operator",
        ),
        (5, 1, "model", "", mattn("2026-04-13 10:00:04"), thought, "operator"),
        # slack:C9: CompactMessages deleted the first messages and wrote the summary a day early,
        # here in modernc.org/sqlite's time.Time.String() form.
        (
            9,
            2,
            "system",
            "[Compacted Summary]\nThe user asked for a deploy plan.",
            "2026-04-12 11:00:00.5 +0000 UTC m=+0.001234",
            None,
            None,
        ),
        (7, 2, "user", "And the rollback?", "2026-04-13 11:00:00.123456789 +0000 UTC", [], None),
        (8, 2, "model", "Revert the tag.", "2026-04-13 11:00:05 +0000 UTC", [], "planner"),
        # slack:C10: a message older than the summary's fake timestamp survived compaction.
        (10, 3, "user", "An old question", mattn("2026-04-01 09:00:00"), [], None),
        (
            11,
            3,
            "system",
            "[Compacted Summary]\nOld talk.",
            mattn("2026-04-12 09:00:00"),
            None,
            None,
        ),
        (12, 3, "user", "A new question", mattn("2026-04-13 09:00:00"), [], None),
        (13, None, "user", "orphan", mattn("2026-04-13 09:00:00"), [], None),
    ]
    for mid, sid, role, content, ts, calls, author in messages:
        conn.execute(
            "INSERT INTO messages (id, role, content, timestamp, tool_calls, author,"
            " session_messages) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                mid,
                role,
                content,
                ts,
                None if calls is None else json.dumps(calls),
                author or "",
                sid,
            ),
        )
    conn.commit()
    conn.close()
    return path


@pytest.fixture
def lango_db(tmp_path: Path) -> Path:
    return make_lango_db(tmp_path / "lango.db")


STORES = ["jsonl", "sqlite"]


def store_url(tmp_path: Path, kind: str) -> str:
    return str(tmp_path / "store") if kind == "jsonl" else f"sqlite:///{tmp_path / 'store.db'}"


# -- agentkit ---------------------------------------------------------------------------------


def test_agentkit_names_follow_agentkit() -> None:
    assert im.agentkit_safe_name("slack:C001:t:17.9") == "slack_C001_t_17.9"
    assert im.agentkit_safe_name("a b/ü") == "a_b__"
    assert im.agentkit_cli_session_id("cli_default.jsonl") == "cli:default"
    assert im.agentkit_cli_session_id("cli_20260905-101112.123.jsonl") == CLI_TS
    assert im.agentkit_cli_session_id("cli_20260905-101112_123.jsonl") == CLI_TS
    assert im.agentkit_cli_session_id("slack_C001.jsonl") == "cli:default"


def test_scan_agentkit_dir_finds_sessions_and_identity(agentkit_dir: Path) -> None:
    source = im.scan_agentkit_dir(agentkit_dir)
    found = [(s.session_id, Path(s.source).name, s.events, s.guessed_id) for s in source.sessions]
    assert found == [
        (CLI_TS, "cli_20260905-101112.123.jsonl", 7, False),
        ("cli:default", "cli_default.jsonl", 4, False),
        ("slack:C001", "slack_C001.jsonl", 25, True),
        (NEW_ID, "slack_C001_u_U111_new_20260905-101112.123.jsonl", 11, False),
        ("slack:C002", "slack_C002.jsonl", 35, True),
    ]
    assert source.identity == [
        im.IdentityEntry("active", "slack:C001:u:U111", NEW_ID),
        im.IdentityEntry("bind", "slack:C001", "coder"),
        im.IdentityEntry("bind", "slack:C002", "researcher"),
        im.IdentityEntry("cli", "current", CLI_TS),
    ]
    assert len(source.notes) == 1 and "model binding 'gpt-4o'" in source.notes[0]
    session, events = next(source.iter_events())
    assert session.session_id == CLI_TS
    assert [e.seq for e in events] == list(range(1, 8))


@pytest.mark.parametrize("kind", STORES)
def test_import_agentkit_into_a_store(agentkit_dir: Path, tmp_path: Path, kind: str) -> None:
    store = ags.open_store(store_url(tmp_path, kind))
    report = im.import_source(im.scan_agentkit_dir(agentkit_dir), store)
    assert (report.found, report.imported, report.skipped, report.events) == (5, 5, 0, 82)
    assert report.verified
    originals = {
        "cli:default": "cli_default.jsonl",
        CLI_TS: "interrupted.jsonl",
        "slack:C001": "tools.jsonl",
        NEW_ID: "recovered.jsonl",
        "slack:C002": "subagents_compaction.jsonl",
    }
    for sid, golden in originals.items():
        lines = (GOLDEN / "agentkit" / golden).read_bytes().splitlines()
        got = store.get(sid).read()
        assert [e.seq for e in got] == list(range(1, len(lines) + 1))
        assert [(e.type, e.agent, bytes(e.data)) for e in got] == [
            (d.type, d.agent, bytes(d.data)) for d in map(decode_agentkit_line, lines)
        ]
    assert [(m.role, m.text) for m in store.get("cli:default").messages()] == [
        ("user", "hi"),
        ("assistant", "hello"),
    ]
    assert active_session(store, "slack:C001:u:U111") == NEW_ID
    assert agent_binding(store, "slack:C001") == "coder"
    assert agent_binding(store, "slack:C002") == "researcher"
    assert cli_current(store) == CLI_TS
    store.close()


def test_agentkit_dry_run_writes_nothing(agentkit_dir: Path, tmp_path: Path) -> None:
    report = im.import_source(im.scan_agentkit_dir(agentkit_dir), None, dry_run=True)
    assert {s.status for s in report.sessions} == {"would_import"}
    assert (report.imported, report.events, report.verified) == (5, 82, False)
    assert {i.status for i in report.identity} == {"would_write"}
    code, out, _ = invoke(
        "--store", str(tmp_path / "store"), "import", "agentkit", str(agentkit_dir), "--dry-run"
    )
    assert code == 0
    assert out.splitlines()[-1] == (
        "dry run: sessions found 5, would import 5, would skip 0 (already there), events 82; "
        f"nothing written to {tmp_path / 'store'}"
    )
    assert not (tmp_path / "store").exists()


def test_agentkit_existing_session_is_skipped_and_reported(
    agentkit_dir: Path, tmp_path: Path
) -> None:
    store = ags.open_store(tmp_path / "store")
    store.create("slack:C001", [ev_user("mine")])
    ags.chat.bind_agent(store, "slack:C001", "someone")
    report = im.import_source(im.scan_agentkit_dir(agentkit_dir), store)
    status = {s.session_id: s.status for s in report.sessions}
    assert status["slack:C001"] == "skipped"
    assert (report.imported, report.skipped, report.events) == (4, 1, 57)
    assert [m.text for m in store.get("slack:C001").messages()] == ["mine"]
    assert agent_binding(store, "slack:C001") == "someone"
    bind = next(i for i in report.identity if i.key == "slack:C001")
    assert bind.status == "skipped"
    store.close()
    code, out, _ = invoke(
        "import", "agentkit", str(agentkit_dir), "--store", str(tmp_path / "store")
    )
    assert code == 0
    assert f"skipped slack:C001: already in {tmp_path / 'store'}" in out
    assert out.splitlines()[-1] == (
        "sessions found 5, imported 0, skipped 5 (already there), events 0 into "
        f"{tmp_path / 'store'}; event counts and seqs verified"
    )


def ev_user(text: str) -> ags.Event:
    return ags.Event.new(ev.USER_MESSAGE, ags.Message.user(text))


def test_agentkit_torn_last_line_is_left_out_and_a_gap_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "sessions"
    src.mkdir()
    good = (GOLDEN / "agentkit" / "cli_default.jsonl").read_bytes()
    (src / "cli_default.jsonl").write_bytes(good + b'{"ID":"","Seq":5,"Sess')
    source = im.scan_agentkit_dir(src)
    assert source.sessions[0].events == 4
    assert "torn write" in source.notes[0]
    lines = good.splitlines()
    (src / "cli_default.jsonl").write_bytes(b"\n".join([lines[0], lines[2]]) + b"\n")
    with pytest.raises(ags.UsageError, match="event 2 has seq 3"):
        im.scan_agentkit_dir(src)
    (src / "cli_default.jsonl").write_bytes(b"not json\n" + good)
    with pytest.raises(ags.UsageError, match=r"cli_default.jsonl:1: not an agentkit event line"):
        im.scan_agentkit_dir(src)


def test_agentkit_id_map_and_first_line_session_id(agentkit_dir: Path) -> None:
    source = im.scan_agentkit_dir(agentkit_dir, id_map={"slack_C002": "slack:C002:t:1.0"})
    assert "slack:C002:t:1.0" in [s.session_id for s in source.sessions]
    line = (GOLDEN / "agentkit" / "cli_default.jsonl").read_text()
    (agentkit_dir / "chat-api_default_channel.jsonl").write_text(
        line.replace('"SessionID":""', '"SessionID":"chat-api:default_channel"')
    )
    ids = {s.session_id: s.guessed_id for s in im.scan_agentkit_dir(agentkit_dir).sessions}
    assert ids["chat-api:default_channel"] is False
    with pytest.raises(ags.UsageError, match=r"no log 'missing\.jsonl'"):
        im.scan_agentkit_dir(agentkit_dir, id_map={"missing": "x"})


# -- lango ------------------------------------------------------------------------------------


def test_parse_lango_time() -> None:
    utc = dt.timezone.utc
    want = dt.datetime(2026, 4, 13, 10, 0, 0, 123456, tzinfo=utc)
    assert im.parse_lango_time("2026-04-13 10:00:00.123456789+00:00") == want
    assert im.parse_lango_time("2026-04-13 19:00:00.123456789+09:00") == want
    assert im.parse_lango_time("2026-04-13 10:00:00.123456789 +0000 UTC m=+0.5") == want
    assert im.parse_lango_time("2026-04-13T10:00:00.123456Z") == want
    assert im.parse_lango_time("0001-01-01 00:00:00+00:00") is None
    with pytest.raises(ags.UsageError, match="not a lango timestamp"):
        im.parse_lango_time("yesterday")


@pytest.mark.parametrize("kind", STORES)
def test_import_lango_into_a_store(lango_db: Path, tmp_path: Path, kind: str) -> None:
    source = im.scan_lango_db(lango_db)
    assert [(s.session_id, s.events) for s in source.sessions] == [
        ("telegram:42", 6),
        ("slack:C9", 4),
        ("slack:C10", 4),
        ("discord:7", 1),
    ]
    assert source.identity == [im.IdentityEntry("bind", "telegram:42", "operator")]
    assert source.notes == [
        "1 message(s) belong to no session (their session was deleted) and are not imported"
    ]
    store = ags.open_store(store_url(tmp_path, kind))
    report = im.import_source(source, store)
    assert (report.found, report.imported, report.skipped, report.events) == (4, 4, 0, 15)
    assert report.verified
    assert agent_binding(store, "telegram:42") == "operator"

    telegram = store.get("telegram:42")
    assert telegram.messages() == [
        ags.Message.user("List the files"),
        ags.Message(
            role="assistant",
            tool_calls=[ags.ToolCall("call_1", "fs_list", {"path": "."})],
            author="operator",
        ),
        ags.Message(role="tool", tool_results=[ags.ToolResult("call_1", "fs_list", "a.py\nb.py")]),
        ags.Message.assistant("Two files: a.py and b.py.", author="operator"),
        ags.Message(
            role="assistant",
            # the Gemini thought signature is the call's, for replays
            tool_calls=[ags.ToolCall("call_2", "fs_read", {"path": "a.py"}, "c2lnbmF0dXJl")],
            author="operator",
        ),
        ags.Message(
            role="tool",
            tool_results=[
                ags.ToolResult(
                    "call_2",
                    "fs_read",
                    "tool execution was interrupted before it produced a result (process "
                    "exited); re-run it if the result is still needed",
                    audit={"decision": "interrupted"},
                )
            ],
        ),
    ]
    events = telegram.read()
    assert events[0].type == im.LANGO_SESSION_TYPE
    assert events[0].payload() == {
        "key": "telegram:42",
        "agentId": "operator",
        "channelType": "telegram",
        "channelId": "42",
        "model": "claude-sonnet-4",
        "metadata": {"lango.mode": "coding"},
        "createdAt": "2026-04-13T09:59:00Z",
        "updatedAt": "2026-04-13T10:00:03Z",
    }
    assert [e.meta.get("lango_id") for e in events] == [None, 1, 2, 3, 4, 5]
    assert events[1].time == dt.datetime(2026, 4, 13, 10, 0, tzinfo=dt.timezone.utc)
    assert events[5].meta["lango_thoughts"] == {
        "call_2": {"thought": True, "thoughtSignature": "c2lnbmF0dXJl"}
    }
    info = telegram.info()  # the sessions row lands in the record too
    assert (info.agent_id, info.channel_type, info.channel_id, info.model) == (
        "operator",
        "telegram",
        "42",
        "claude-sonnet-4",
    )
    assert info.metadata == {"lango.mode": "coding"}

    compacted = store.get("slack:C9")
    assert [e.type for e in compacted.read()] == [
        im.LANGO_SESSION_TYPE,
        ev.COMPACTION,
        ev.USER_MESSAGE,
        ev.ASSISTANT_MESSAGE,
    ]
    marker = compacted.read()[1].decode(ev.Compaction)
    assert (marker.first_kept_seq, marker.retained_tail) == (3, [])
    assert compacted.messages() == [
        ags.Message(
            role="system",
            parts=[ags.TextPart("[Compacted Summary]\nThe user asked for a deploy plan.")],
        ),
        ags.Message.user("And the rollback?"),
        ags.Message.assistant("Revert the tag.", author="planner"),
    ]
    late = store.get("slack:C10")
    assert late.messages() == [
        ags.Message(role="system", parts=[ags.TextPart("[Compacted Summary]\nOld talk.")]),
        ags.Message.user("An old question"),
        ags.Message.user("A new question"),
    ]
    assert [e.type for e in store.get("discord:7").read()] == [im.LANGO_SESSION_TYPE]
    store.close()


def test_lango_row_events_maps_roles() -> None:
    row = {
        "id": 1,
        "role": "user",
        "content": "out",
        "author": "user",
        "tool_calls": '[{"id":"c","name":"n","input":"","output":"out"}]',
    }
    assert [e.type for e in im.lango_row_events(row)] == [ev.TOOL_RESULT]
    row = {"id": 2, "role": "function", "content": "", "tool_calls": "[]"}
    [kept] = im.lango_row_events(row)
    assert kept.type == im.LANGO_MESSAGE_TYPE and kept.payload()["role"] == "function"
    row = {
        "id": 3,
        "role": "assistant",
        "content": "",
        "tool_calls": '[{"id":"c","name":"n","input":"[1, 2]"}]',
    }
    [call] = im.lango_row_events(row)
    assert call.meta["lango_inputs"] == {"c": "[1, 2]"}
    assert call.payload().tool_calls == [ags.ToolCall("c", "n", {})]


def test_lango_dry_run_existing_session_and_json(lango_db: Path, tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    code, out, _ = invoke("import", "lango", str(lango_db), "--store", url, "--dry-run", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["dry_run"] is True and report["verified"] is False
    assert [s["status"] for s in report["sessions"]] == ["would_import"] * 4
    code, out, _ = invoke("import", "--json", "lango", str(lango_db), "--store", url, "--dry-run")
    assert code == 0 and json.loads(out) == report  # --json before the subcommand too
    assert not (tmp_path / "store").exists()
    store = ags.open_store(url)
    store.create("slack:C9", [ev_user("already here")])
    store.close()
    code, out, _ = invoke("--store", url, "import", "lango", str(lango_db), "--json")
    assert code == 0
    report = json.loads(out)
    assert set(report) == {
        "source_kind",
        "source",
        "destination",
        "dry_run",
        "sessions_found",
        "imported",
        "skipped",
        "events",
        "verified",
        "healed",
        "sessions",
        "identity",
        "notes",
    }
    assert (report["source_kind"], report["sessions_found"], report["imported"]) == ("lango", 4, 3)
    assert (report["skipped"], report["events"], report["verified"]) == (1, 11, True)
    assert report["sessions"][1] == {
        "session_id": "slack:C9",
        "source": f"{lango_db}#slack:C9",
        "events": 4,
        "status": "skipped",
        "guessed_id": False,
        "defects": [],
    }
    assert report["identity"] == [
        {"kind": "bind", "key": "telegram:42", "value": "operator", "status": "written"}
    ]
    store = ags.open_store(url)
    assert [m.text for m in store.get("slack:C9").messages()] == ["already here"]
    store.close()


def test_lango_refuses_sqlcipher_and_protected_payloads(tmp_path: Path) -> None:
    encrypted = tmp_path / "lango.db"
    encrypted.write_bytes(bytes(range(16)) * 64)  # what SQLCipher writes: no SQLite header
    code, out, err = invoke("--store", str(tmp_path / "store"), "import", "lango", str(encrypted))
    assert code == 2 and out == ""
    assert err.startswith("Error: encrypted lango database (SQLCipher): ")
    assert "decrypt it first" in err.lower() and "agentsession does not read SQLCipher" in err
    assert not (tmp_path / "store").exists()

    protected = make_lango_db(tmp_path / "new.db", LANGO_PROTECTED_DDL)
    assert len(im.scan_lango_db(protected).sessions) == 4  # the newer schema reads as well
    conn = sqlite3.connect(protected)
    conn.execute("UPDATE messages SET content_ciphertext = x'00ff' WHERE id = 1")
    conn.commit()
    conn.close()
    with pytest.raises(ags.UsageError, match=r"1 message\(s\) are payload-protected"):
        im.scan_lango_db(protected)

    plain = tmp_path / "other.db"
    sqlite3.connect(plain).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(ags.UsageError, match="not a lango database: it has no sessions or"):
        im.scan_lango_db(plain)


def test_lango_database_is_opened_read_only(lango_db: Path, tmp_path: Path) -> None:
    before = lango_db.read_bytes()
    os.chmod(lango_db, 0o444)
    try:
        code, _, _ = invoke("import", "lango", str(lango_db), "--store", str(tmp_path / "s"))
    finally:
        os.chmod(lango_db, 0o644)
    assert code == 0
    assert lango_db.read_bytes() == before


def test_missing_sources_exit_4(tmp_path: Path) -> None:
    code, _, err = invoke("import", "agentkit", str(tmp_path / "nope"))
    assert code == 4 and err == f"Error: no agentkit sessions directory at {tmp_path / 'nope'}\n"
    code, _, err = invoke("import", "lango", str(tmp_path / "nope.db"))
    assert code == 4 and err == f"Error: no lango database at {tmp_path / 'nope.db'}\n"
    (tmp_path / "file").write_text("x")
    code, _, err = invoke("import", "agentkit", str(tmp_path / "file"))
    assert code == 2 and "is not a directory" in err


# -- a source is imported whole or not at all ---------------------------------------------------


def agentkit_line(seq: int, event_id: str = "", **fields: object) -> str:
    """One agentkit line: a user message by default."""
    line: dict[str, object] = {
        "ID": event_id,
        "Seq": seq,
        "SessionID": "",
        "AgentID": "coder",
        "Type": "user/message",
        "Data": {
            "Role": "user",
            "Content": [{"type": "text", "text": f"message {seq}"}],
            "ToolCalls": None,
            "ToolResults": None,
        },
        "CreatedAt": "0001-01-01T00:00:00Z",
        "UserID": "",
    }
    line.update(fields)
    return json.dumps(line)


def two_logs(tmp_path: Path, bad_line: str) -> Path:
    """An agentkit directory whose first log is good and whose second holds ``bad_line`` as
    its second line."""
    src = tmp_path / "sessions"
    src.mkdir()
    good = [agentkit_line(n, f"e{n}") for n in (1, 2, 3)]
    (src / "a_good.jsonl").write_text("\n".join(good) + "\n")
    bad = [agentkit_line(1, "b1"), bad_line, agentkit_line(3, "b3")]
    (src / "b_bad.jsonl").write_text("\n".join(bad) + "\n")
    return src


def assert_nothing_imported(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    if store_dir.exists():
        with ags.open_store(store_dir) as store:
            assert store.list() == []


def test_agentkit_log_repeating_an_event_id_imports_nothing(tmp_path: Path) -> None:
    src = two_logs(tmp_path, agentkit_line(2, "b1"))
    with pytest.raises(ags.UsageError) as caught:
        im.scan_agentkit_dir(src)
    assert str(caught.value) == (
        f"{src / 'b_bad.jsonl'}:2: event id 'b1' is also the id of line 1; a session holds "
        "each event id once, so this log cannot be imported"
    )
    code, out, err = invoke("import", "agentkit", str(src), "--store", str(tmp_path / "store"))
    assert code == 2 and out == ""
    assert "b_bad.jsonl:2: event id 'b1' is also the id of line 1" in err
    assert_nothing_imported(tmp_path)


BAD_AGENTKIT_LINES = {
    "id of 200 characters": (
        agentkit_line(2, "x" * 200),
        "an event's id must be a string of 1 to 128 printable characters",
    ),
    "id with a newline": (
        agentkit_line(2, "b\n2"),
        "an event's id must be a string of 1 to 128 printable characters",
    ),
    "payload nested 300 deep": (
        agentkit_line(2, "b2", Type="custom/deep", Data=json.loads("[" * 300 + "]" * 300)),
        "the custom/deep event's payload",
    ),
    "reserved type": (
        agentkit_line(2, "b2", Type="agentsession/shred", Data={}),
        "'agentsession/shred' events are written by store.shred() only",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_AGENTKIT_LINES))
def test_agentkit_event_an_append_refuses_fails_the_scan_and_imports_nothing(
    tmp_path: Path, case: str
) -> None:
    line, reason = BAD_AGENTKIT_LINES[case]
    src = two_logs(tmp_path, line)
    with pytest.raises(ags.UsageError) as caught:
        im.scan_agentkit_dir(src)
    assert str(caught.value).startswith(f"{src / 'b_bad.jsonl'}:2: session 'b:bad': ")
    assert reason in str(caught.value)
    code, out, err = invoke("import", "agentkit", str(src), "--store", str(tmp_path / "store"))
    assert code == 2 and out == "" and reason in err
    assert_nothing_imported(tmp_path)


def test_lango_message_an_append_refuses_fails_the_scan_and_imports_nothing(
    lango_db: Path, tmp_path: Path
) -> None:
    conn = sqlite3.connect(lango_db)
    when = mattn("2026-04-13 10:00:00")
    conn.execute(
        "INSERT INTO sessions (id, key, created_at, updated_at) VALUES (5, 'zz:deep', ?, ?)",
        (when, when),
    )
    nested = json.loads("[" * 300 + "]" * 300)
    deep = [{"id": "call_9", "name": "t", "input": json.dumps({"a": nested})}]
    conn.execute(
        "INSERT INTO messages (id, role, content, timestamp, tool_calls, author,"
        " session_messages) VALUES (20, 'assistant', '', ?, ?, '', 5)",
        (when, json.dumps(deep)),
    )
    conn.commit()
    conn.close()
    with pytest.raises(ags.UsageError) as caught:
        im.scan_lango_db(lango_db)
    assert str(caught.value).startswith(
        f"{lango_db}: messages row 20: session 'zz:deep': the assistant/message event's payload"
    )
    code, out, err = invoke("import", "lango", str(lango_db), "--store", str(tmp_path / "store"))
    assert code == 2 and out == "" and "messages row 20" in err
    assert_nothing_imported(tmp_path)


# -- symbolic links out of an agentkit directory ------------------------------------------------


@pytest.mark.parametrize("sidecar", ["slack_C001/runtime.json", "slack_C001_u_U111/current.json"])
def test_agentkit_symlinked_sidecar_file_is_refused(
    agentkit_dir: Path, tmp_path: Path, sidecar: str
) -> None:
    outside = tmp_path / "outside.json"
    outside.write_text('{"agentId": "intruder", "sessionId": "slack:C001"}')
    (agentkit_dir / sidecar).unlink()
    os.symlink(outside, agentkit_dir / sidecar)
    with pytest.raises(ags.UsageError) as caught:
        im.scan_agentkit_dir(agentkit_dir)
    assert str(caught.value).startswith(f"{agentkit_dir / sidecar} is a symbolic link; refusing")
    code, out, err = invoke(
        "import", "agentkit", str(agentkit_dir), "--store", str(tmp_path / "store")
    )
    assert code == 2 and out == "" and "is a symbolic link" in err
    assert_nothing_imported(tmp_path)


def test_agentkit_symlinked_sidecar_directory_is_refused(
    agentkit_dir: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "runtime.json").write_text('{"agentId": "intruder"}')
    os.symlink(outside, agentkit_dir / "cli_default")
    with pytest.raises(ags.UsageError, match="is a symbolic link to a directory; refusing"):
        im.scan_agentkit_dir(agentkit_dir)


# -- a lango database is read without changing it or its directory ------------------------------

SRC_DIR = Path(ags.__file__).resolve().parent.parent  # the sources under test
UNPRIVILEGED = 65534  # nobody


def test_lango_wal_database_leaves_no_files_beside_it(tmp_path: Path) -> None:
    (tmp_path / "lango").mkdir()
    lango_db = make_lango_db(tmp_path / "lango" / "lango.db")
    conn = sqlite3.connect(lango_db)
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    conn.close()
    before = _snapshot(lango_db.parent)
    for extra in ("--dry-run", "--json"):
        code, _, err = invoke(
            "import", "lango", str(lango_db), "--store", str(tmp_path / "s"), extra
        )
        assert code == 0, err
        assert _snapshot(lango_db.parent) == before


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def _run_as_nobody(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """``python -m agentsession ARGS`` as an unprivileged user (setpriv), for whom a directory's
    mode binds (root ignores it)."""
    return subprocess.run(
        [
            "setpriv",
            f"--reuid={UNPRIVILEGED}",
            f"--regid={UNPRIVILEGED}",
            "--clear-groups",
            "--",
            sys.executable,
            "-m",
            "agentsession",
            *args,
        ],
        env={"PYTHONPATH": str(SRC_DIR), "HOME": str(home), "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory the unprivileged user can reach (pytest's tmp_path is root's alone)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run the import as an unprivileged user")
    base = Path(tempfile.mkdtemp(prefix="agentsession-import-ro-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        for path in [base, *base.rglob("*")]:
            if path.is_dir() and not path.is_symlink():
                path.chmod(0o755)
        shutil.rmtree(base)


@pytest.mark.parametrize("pending_wal", [False, True], ids=["checkpointed", "pending-wal"])
def test_lango_wal_database_in_a_read_only_directory_is_left_byte_identical(
    shared_tmp: Path, pending_wal: bool
) -> None:
    source = shared_tmp / "lango"
    source.mkdir()
    db = make_lango_db(source / "lango.db")
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    conn.close()  # the last connection checkpoints and removes the -wal file
    if pending_wal:
        # A session written after the last checkpoint lives only in lango.db-wal: copy the
        # database and its log while the writer holds them open (as after a crash of lango).
        live = shared_tmp / "live"
        live.mkdir()
        shutil.copy(db, live / "lango.db")
        writer = sqlite3.connect(live / "lango.db")
        writer.execute("PRAGMA wal_autocheckpoint=0")
        when = mattn("2026-04-14 08:00:00")
        writer.execute(
            "INSERT INTO sessions (id, key, created_at, updated_at) VALUES (6, 'wal:only', ?, ?)",
            (when, when),
        )
        writer.execute(
            "INSERT INTO messages (id, role, content, timestamp, tool_calls, author,"
            " session_messages) VALUES (30, 'user', 'from the log', ?, NULL, '', 6)",
            (when,),
        )
        writer.commit()
        shutil.copy(live / "lango.db-wal", source / "lango.db-wal")
        writer.close()
        assert (source / "lango.db-wal").stat().st_size > 0
    store_dir = shared_tmp / "store"
    store_dir.mkdir()
    os.chown(store_dir, UNPRIVILEGED, UNPRIVILEGED)
    source.chmod(0o555)
    before = _snapshot(source)

    dry = _run_as_nobody(
        "import", "lango", str(db), "--store", str(store_dir), "--dry-run", "--json", home=store_dir
    )
    assert dry.returncode == 0, dry.stderr
    assert _snapshot(source) == before
    run = _run_as_nobody(
        "import", "lango", str(db), "--store", str(store_dir), "--json", home=store_dir
    )
    assert run.returncode == 0, run.stderr
    assert _snapshot(source) == before

    report = json.loads(run.stdout)
    expected = ["telegram:42", "slack:C9", "slack:C10", "discord:7"]
    if pending_wal:
        expected.append("wal:only")
    assert [s["session_id"] for s in report["sessions"]] == expected
    assert json.loads(dry.stdout)["sessions_found"] == len(expected)
    with ags.open_store(store_dir) as store:
        assert sorted(s.id for s in store.list()) == sorted(expected)
        if pending_wal:
            assert [m.text for m in store.get("wal:only").messages()] == ["from the log"]


# -- an interrupted import, run again, imports exactly what is missing ---------------------------

KILL_SESSIONS = 30


def many_sessions(root: Path) -> Path:
    """An agentkit directory of KILL_SESSIONS sessions, each bound to an agent, with
    active-session mappings, a model binding (a note) and the CLI pointer."""
    src = root / "many"
    src.mkdir()
    for i in range(KILL_SESSIONS):
        lines = [agentkit_line(n, f"s{i}-e{n}") for n in range(1, 4)]
        (src / f"chat_s{i:03}.jsonl").write_text("\n".join(lines) + "\n")
        (src / f"chat_s{i:03}").mkdir()
        (src / f"chat_s{i:03}" / "runtime.json").write_text(
            json.dumps({"agentId": f"agent-{i}", "model": "m" if i == 0 else ""})
        )
    for key in range(5):
        (src / f"chat_k{key}").mkdir()
        (src / f"chat_k{key}" / "current.json").write_text(
            json.dumps({"sessionId": f"chat:s00{key}"})
        )
    (src / "cli_default.jsonl").write_text(agentkit_line(1, "cli-1") + "\n")
    os.symlink("cli_default.jsonl", src / "cli_current.jsonl")
    return src


def imported_state(store: ags.Store, source: im.ImportSource) -> dict[str, object]:
    """Everything an agentkit import writes: each session's events (times aside: agentkit's
    zero times are stamped at import) and every identity mapping the source holds."""
    sessions = {
        info.id: [
            (e.seq, e.id, e.type, e.agent, e.user, bytes(e.data), e.meta)
            for e in store.get(info.id).read()
        ]
        for info in store.list()
    }
    mappings = {
        (entry.kind, entry.key): store.meta_get(
            entry.kind, "current" if entry.kind == "cli" else entry.key
        )
        for entry in source.identity
    }
    return {"sessions": sessions, "mappings": mappings}


def test_rerun_of_an_import_stopped_before_its_bindings_writes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = many_sessions(tmp_path)
    source = im.scan_agentkit_dir(src)
    with ags.open_store(tmp_path / "reference") as reference:
        im.import_source(source, reference)
        want = imported_state(reference, source)
    assert len(want["mappings"]) == KILL_SESSIONS + 5 + 1  # type: ignore[arg-type]

    store = ags.open_store(tmp_path / "store")

    def stopped(*_args: object) -> im.IdentityOutcome:
        raise KeyboardInterrupt  # the process stops after the sessions, before any mapping

    monkeypatch.setattr(im, "_apply_identity", stopped)
    with pytest.raises(KeyboardInterrupt):
        im.import_source(source, store)
    monkeypatch.undo()
    assert agent_binding(store, "chat:s001") == ""

    dry = im.import_source(source, store, dry_run=True)
    assert {i.status for i in dry.identity} == {"would_write"}
    report = im.import_source(source, store)
    assert (report.imported, report.skipped) == (0, KILL_SESSIONS + 1)
    assert {i.status for i in report.identity} == {"written"}
    assert any("hold exactly the source's events" in note for note in report.notes)
    assert imported_state(store, source) == want

    # A session the store had before, with other events, still keeps its missing binding.
    store.delete("chat:s002")
    store.create("chat:s002", [ev_user("mine")])
    ags.chat.bind_agent(store, "chat:s002", "")
    report = im.import_source(source, store)
    bind = next(i for i in report.identity if (i.kind, i.key) == ("bind", "chat:s002"))
    assert bind.status == "skipped" and agent_binding(store, "chat:s002") == ""
    store.close()


_CHILD = """
import sys
from agentsession import open_store
from agentsession.interop.importers import import_source, scan_agentkit_dir

def say(what):
    sys.stdout.write(what + "\\n")
    sys.stdout.flush()

store = open_store(sys.argv[2])
meta_set = store.meta_set

def announced(namespace, key, value):
    say(f"meta {namespace} {key}")
    meta_set(namespace, key, value)

store.meta_set = announced
source = scan_agentkit_dir(sys.argv[1])
say("scanned")
import_source(source, store, progress=lambda outcome: say(f"session {outcome.session_id}"))
say("done")
"""


@pytest.mark.parametrize("kind", STORES)
def test_import_killed_at_random_points_then_run_again_equals_an_uninterrupted_one(
    tmp_path: Path, kind: str
) -> None:
    src = many_sessions(tmp_path)
    source = im.scan_agentkit_dir(src)
    (tmp_path / "reference").mkdir()
    with ags.open_store(store_url(tmp_path / "reference", kind)) as reference:
        im.import_source(source, reference)
        want = imported_state(reference, source)
    child = tmp_path / "child.py"
    child.write_text(_CHILD)
    # Lines the child prints: scanned, one per session (after its create), one before each
    # identity write, done.
    sessions_end = 1 + len(source.sessions)
    total = sessions_end + len(source.identity) + 1
    rng = random.Random(1402)
    # The first kill comes right after the last session is written, before its bindings; the
    # others anywhere.
    kill_after = [sessions_end, *(rng.randrange(1, total) for _ in range(7))]
    for round_number, lines_before_kill in enumerate(kill_after):
        root = tmp_path / f"round{round_number}"
        root.mkdir()
        url = store_url(root, kind)
        proc = subprocess.Popen(
            [sys.executable, str(child), str(src), url],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(SRC_DIR)},
        )
        try:
            assert proc.stdout is not None
            seen = [proc.stdout.readline() for _ in range(lines_before_kill)]
            proc.kill()
        finally:
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        assert all(seen), f"round {round_number}: the import ended before line {len(seen)}"
        assert proc.returncode == -signal.SIGKILL
        code, out, err = invoke("import", "agentkit", str(src), "--store", url, "--json")
        assert code == 0, err
        assert json.loads(out)["verified"] is True
        with ags.open_store(url) as store:
            assert imported_state(store, source) == want, (round_number, lines_before_kill)


_HALF_WRITE = """
import os, signal, sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
conn.execute("PRAGMA cache_size=1")  # spill the transaction into the database file
conn.execute("BEGIN")
conn.execute(
    "INSERT INTO sessions (id, key, created_at, updated_at) VALUES (50, 'half:written', '', '')"
)
conn.executemany(
    "INSERT INTO messages (id, role, content, timestamp, author, session_messages)"
    " VALUES (?, 'user', ?, '', '', 50)",
    [(100 + n, "x" * 2000) for n in range(300)],
)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_lango_database_with_an_interrupted_write_is_read_rolled_back_and_left_alone(
    tmp_path: Path,
) -> None:
    (tmp_path / "lango").mkdir()
    db = make_lango_db(tmp_path / "lango" / "lango.db")
    writer = subprocess.run([sys.executable, "-c", _HALF_WRITE, str(db)], timeout=60)
    assert writer.returncode == -signal.SIGKILL
    assert (tmp_path / "lango" / "lango.db-journal").stat().st_size > 0
    before = _snapshot(db.parent)
    source = im.scan_lango_db(db)
    assert [s.session_id for s in source.sessions] == [
        "telegram:42",
        "slack:C9",
        "slack:C10",
        "discord:7",
    ]
    assert any("lango.db-journal holds a write a crash interrupted" in n for n in source.notes)
    source.close()
    code, _, err = invoke("import", "lango", str(db), "--store", str(tmp_path / "store"))
    assert code == 0, err
    assert _snapshot(db.parent) == before


def test_rerun_of_a_lango_import_stopped_before_its_bindings_writes_them(
    lango_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = im.scan_lango_db(lango_db)
    store = ags.open_store(tmp_path / "store")
    monkeypatch.setattr(im, "_apply_identity", lambda *_args: (_ for _ in ()).throw(SystemExit))
    with pytest.raises(SystemExit):
        im.import_source(source, store)
    monkeypatch.undo()
    assert agent_binding(store, "telegram:42") == ""
    report = im.import_source(source, store)
    assert report.skipped == 4 and [i.status for i in report.identity] == ["written"]
    assert agent_binding(store, "telegram:42") == "operator"
    store.close()
