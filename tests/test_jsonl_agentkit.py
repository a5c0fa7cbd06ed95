"""The JSONL store on agentkit's logs: read transparently, appended in agentkit's dialect,
repaired by recovery, and (``dialect="agentkit"``) named as agentkit names them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import agentsession as ags
from agentsession import CorruptLogError, Event, Message
from agentsession._names import unsafe_name
from agentsession.backends.jsonl import JsonlLog, agentkit_file_name
from agentsession.derive import Deriver
from agentsession.interop.agentkit import decode_agentkit_line, is_agentkit_line
from agentsession.validation import provider_errors

GOLDEN = Path(__file__).parent / "golden" / "agentkit"
LOGS = sorted(p.stem for p in GOLDEN.glob("*.jsonl"))


def sid(name: str) -> str:
    """The id whose file the agentsession dialect names ``name`` (``cli_default``:
    ``cli:default``)."""
    found = unsafe_name(name)
    assert found is not None
    return found


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    for path in GOLDEN.glob("*.jsonl"):
        shutil.copy(path, tmp_path / path.name)
    return tmp_path


@pytest.mark.parametrize("name", LOGS)
def test_an_agentkit_log_reads_as_its_lines_decode(logs: Path, name: str) -> None:
    expected = [decode_agentkit_line(line) for line in lines_of(GOLDEN / f"{name}.jsonl")]
    session = ags.open_store(logs).get(sid(name))  # the default store reads agentkit's dialect
    assert session.read() == expected
    assert session.latest_seq == expected[-1].seq
    assert session.messages() == Deriver.from_events(expected, None).messages()
    tail = session.read(after=expected[-1].seq - 2)
    assert tail == expected[-2:]
    assert (logs / f"{name}.jsonl").read_bytes() == (GOLDEN / f"{name}.jsonl").read_bytes()


def test_appending_to_an_agentkit_log_writes_agentkit_lines(logs: Path) -> None:
    session = ags.open_store(logs).get("tools")
    before = session.latest_seq
    seq = session.append(Event.new("user/message", Message.user("and the docs?"), agent="coder"))
    seqs = session.append_many(
        [
            Event.new("assistant/message", Message.assistant("Done."), agent="coder"),
            Event.new("turn/end", ags.events.TurnEnd(steps=0), agent="coder"),
        ]
    )
    assert [seq, *seqs] == [before + 1, before + 2, before + 3]
    new = lines_of(logs / "tools.jsonl")[-3:]
    assert all(is_agentkit_line(line) for line in new)
    assert [decode_agentkit_line(line).seq for line in new] == [before + 1, before + 2, before + 3]
    reread = ags.open_store(logs).get("tools")
    assert reread.read() == session.read()
    assert [m.text for m in reread.messages()][-2:] == ["and the docs?", "Done."]


def test_recovery_repairs_an_agentkit_turn_in_agentkit_lines(logs: Path) -> None:
    store = ags.open_store(logs)
    assert ags.scan_incomplete(store.get("interrupted").read()) is not None
    [report] = [r for r in store.recover() if r.session_id == "interrupted"]
    assert report.status == "repaired"
    lines = lines_of(logs / "interrupted.jsonl")
    assert all(is_agentkit_line(line) for line in lines)
    events = ags.open_store(logs).get("interrupted").read()
    assert ags.scan_incomplete(events) is None
    assert provider_errors(Deriver.from_events(events, None).messages()) == []


def test_a_torn_agentkit_tail_is_absent_and_moved_aside_by_the_next_append(logs: Path) -> None:
    path = logs / "tools.jsonl"
    intact = path.read_bytes()
    torn = b'{"ID":"","Seq":26,"SessionID":"","AgentID":"coder","Type":"user/mes'
    path.write_bytes(intact + torn)
    session = ags.open_store(logs).get("tools")
    assert session.latest_seq == 25
    assert path.read_bytes() == intact + torn  # reading writes nothing
    assert session.append(ags.Event.new("test/n")) == 26
    assert path.read_bytes().startswith(intact + b'{"ID":')
    assert (logs / "tools.jsonl.quarantine").read_bytes() == torn + b"\n"


def test_a_complete_garbage_line_raises_or_is_quarantined_on_request(logs: Path) -> None:
    path = logs / "tools.jsonl"
    intact = path.read_bytes()
    path.write_bytes(intact + b'{"ID":"","Seq":"not a number"}\n')
    with pytest.raises(CorruptLogError):
        ags.open_store(logs).get("tools")
    session = ags.open_store(logs, on_corrupt="quarantine").get("tools")
    assert session.latest_seq == 25
    assert len(session.read()) == 25


def test_quarantine_mode_never_empties_a_readable_agentkit_log(logs: Path) -> None:
    store = ags.open_store(logs, on_corrupt="quarantine")
    for name in LOGS:
        session = store.get(sid(name))
        assert len(session.read()) == len(lines_of(GOLDEN / f"{name}.jsonl"))
        session.messages()
    assert not list(logs.glob("*.quarantine"))
    for name in LOGS:
        assert (logs / f"{name}.jsonl").read_bytes() == (GOLDEN / f"{name}.jsonl").read_bytes()


def test_reopening_an_agentkit_log_starts_its_window_at_the_compaction_marker(
    logs: Path,
) -> None:
    expected = ags.open_store(logs).get("subagents:compaction").messages()
    session = ags.open_store(logs).get("subagents:compaction")
    log = session._log
    assert isinstance(log, JsonlLog)
    markers = [e.seq for e in session.read() if e.type == "session/compaction"]
    assert session.messages() == expected
    assert session._window_start == markers[-1]
    # The backwards scan finds agentkit's marker lines by their head, as it finds ours.
    data = (logs / "subagents_compaction.jsonl").read_bytes()
    offset = log._find_last_marker(len(data))
    assert offset is not None
    assert decode_agentkit_line(data[offset:].split(b"\n", 1)[0]).seq == markers[-1]


def test_a_long_agentkit_log_opens_at_its_tail_and_reads_by_seq(tmp_path: Path) -> None:
    store = ags.open_store(tmp_path, dialect="agentkit")
    session = store.get("long")
    for first in range(0, 3000, 500):
        session.append_many(
            [
                Event.new("user/message", Message.user(f"m{n} " + "x" * 500), agent="a")
                for n in range(first, first + 500)
            ]
        )
    reopened = ags.open_store(tmp_path).get("long")
    assert isinstance(reopened._log, JsonlLog)
    assert len(reopened._window) < 3000 and not reopened._full
    assert reopened.latest_seq == 3000
    for after in (0, 1, 1499, 1500, 2990, 2999):
        got = reopened._storage_read(after, 3)
        assert [e.seq for e in got] == list(range(after + 1, min(after + 4, 3001)))
    assert all(is_agentkit_line(line) for line in lines_of(tmp_path / "long.jsonl"))


def test_the_agentkit_dialect_names_files_as_agentkit_and_refuses_collisions(
    tmp_path: Path,
) -> None:
    store = ags.open_store(tmp_path, dialect="agentkit")
    store.get("slack:C001").append(Event.new("user/message", Message.user("hi")))
    store.get("a_b").append(Event.new("user/message", Message.user("hi")))
    assert (tmp_path / "slack_C001.jsonl").exists() and (tmp_path / "a_b.jsonl").exists()
    assert agentkit_file_name("cli:20260905-101112.123") == "cli_20260905-101112.123"
    with pytest.raises(ags.UsageError, match="same agentkit file"):
        store.get("slack;C001")
    with pytest.raises(ags.UsageError, match="same agentkit file"):
        ags.open_store(tmp_path, dialect="agentkit").get("a:b")  # also from another store
    for bad in ("", "a..b", "../x"):
        with pytest.raises(ags.UsageError):
            agentkit_file_name(bad)
    assert sorted(info.id for info in store.list()) == ["a_b", "slack:C001"]
    # The agentsession dialect names ``a_b`` differently, so it never meets agentkit's file.
    assert not (tmp_path / "a%5Fb.jsonl").exists()


def test_an_unknown_dialect_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ags.UsageError, match="dialect"):
        ags.open_store(tmp_path, dialect="go")


def test_the_command_line_works_on_an_agentkit_directory(logs: Path) -> None:
    from click.testing import CliRunner

    from agentsession.cli import cli

    def run(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(cli, ["--store", str(logs), *args], env={"COLUMNS": "200"})
        return result.exit_code, result.stdout

    code, out = run("ls")
    assert code == 0 and "cli:default" in out and "interrupted" in out
    code, out = run("messages", "cli:default", "--json")
    assert code == 0
    assert [(m["role"], m["parts"][0]["text"]) for m in json.loads(out)] == [
        ("user", "hi"),
        ("assistant", "hello"),
    ]
    code, out = run("repair", "--dry-run", "--exit-code", "interrupted")
    assert code == 1  # something to repair
    code, _ = run("repair", "interrupted")
    assert code == 0
    assert all(is_agentkit_line(line) for line in lines_of(logs / "interrupted.jsonl"))
    assert ags.scan_incomplete(ags.open_store(logs).get("interrupted").read()) is None
    state = ags.load_run_state(ags.open_store(logs).get("tools"))
    assert state.steps == 3 and state.usage.total_tokens > 0


def test_an_encrypted_store_reads_agentkit_logs_but_never_appends_to_them(logs: Path) -> None:
    with pytest.raises(ags.UsageError, match="cannot be encrypted"):
        ags.open_store(logs, dialect="agentkit", key=bytes(32))
    # A directory of agentkit logs is not an empty store: it cannot become encrypted in place.
    with pytest.raises(ags.EncryptionError, match="unencrypted sessions"):
        ags.open_store(logs, key=bytes(32))


def test_an_agentkit_log_planted_in_an_encrypted_store_is_refused_and_not_appended(
    tmp_path: Path,
) -> None:
    """Every event of an encrypted store is sealed: an agentkit log's plain lines planted in one
    are unsealed events, never history (docs/security.md)."""
    store = ags.open_store(tmp_path, key=bytes(32))
    store.get("mine").append(Event.new("user/message", Message.user("sealed")))
    shutil.copy(GOLDEN / "cli_default.jsonl", tmp_path / "cli_default.jsonl")
    with pytest.raises(ags.EncryptionError, match=r"'cli:default' seq 1 .*not sealed"):
        store.get("cli:default").messages()
    with pytest.raises((ags.UsageError, ags.EncryptionError)):
        store.get("cli:default").append(Event.new("user/message", Message.user("more")))
    assert (tmp_path / "cli_default.jsonl").read_bytes() == (
        GOLDEN / "cli_default.jsonl"
    ).read_bytes()
