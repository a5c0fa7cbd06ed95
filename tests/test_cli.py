"""The command line, driven with click's CliRunner, and the demo end to end."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import click
import msgspec
import pytest
from click.testing import CliRunner

import agentsession as ags
import agentsession.registry
from agentsession.backends.jsonl import LOCK_DIR
from agentsession.backends.memory import MemoryCatalog
from agentsession.catalog import StoreParts
from agentsession.cli import _output as cli_output
from agentsession.cli import cli
from agentsession.locks import ThreadLocker
from agentsession.session import SessionHost
from agentsession.testing.conformance import start_lock_holder
from agentsession.validation import provider_errors

from .pipes import readline_within, unread
from .test_conformance_postgres import DSN as PG_DSN
from .test_conformance_postgres import drop_schemas, new_schema_name, url_with_schema

SRC = Path(agentsession.__file__).resolve().parent.parent


def invoke(store: Path | str, *args: str, input: str | None = None) -> tuple[int, str, str]:
    runner = CliRunner()
    result = runner.invoke(cli, ["--store", str(store), *args], input=input, env={"COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


def fill(directory: Path) -> ags.BaseStore:
    """A store with a finished conversation, a crashed one and a compacted one."""
    store = ags.open_store(directory)
    ok = store.get("slack:C001")
    with ok.turn(agent="coder", user="U1") as turn:
        turn.user("Fix the failing test")
        with turn.step() as step:
            step.assistant("Looking.", tool_calls=[ags.ToolCall("c1", "read", {"path": "a.py"})])
            step.tool_result("c1", "read", "x = 1\n" * 200)
            step.usage(input_tokens=1200, output_tokens=80)
        turn.assistant("Fixed.")
    crashed = store.get("slack:C002")
    crashed.append_many(
        [
            ags.Event.new("turn/start", ags.events.TurnStart(), agent="coder"),
            ags.Event.new("user/message", ags.Message.user("deploy"), agent="coder"),
            ags.Event.new("step/start", ags.events.StepStart(step=0), agent="coder"),
            ags.Event.new(
                "assistant/message",
                ags.Message.assistant(tool_calls=[ags.ToolCall("d1", "deploy", {})]),
                agent="coder",
            ),
        ]
    )
    long = store.get("cli:long")
    for n in range(4):
        with long.turn(agent="coder") as turn:
            turn.user(f"question {n}")
            turn.assistant(f"answer {n}")
    return store


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    fill(tmp_path / "store").close()
    return tmp_path / "store"


# -- ls, stats, rm ----------------------------------------------------------------------------


def test_ls_lists_sessions_newest_first_with_counts(store_dir: Path) -> None:
    code, out, _ = invoke(store_dir, "ls")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["id", "events", "last", "activity", "(UTC)", "size"]
    assert [line.split()[0] for line in lines[1:]] == ["cli:long", "slack:C002", "slack:C001"]
    # The JSONL store reads the count from the last line of each file (list()'s last_seq).
    assert [line.split()[1] for line in lines[1:]] == ["16", "4", "9"]


def test_ls_json_prefix_and_limit(store_dir: Path) -> None:
    code, out, _ = invoke(store_dir, "ls", "--json", "--prefix", "slack:", "--limit", "1")
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["id"] for r in rows] == ["slack:C002"]
    assert set(rows[0]) == {"id", "last_seq", "updated_at", "size"}
    assert rows[0]["last_seq"] == 4 and rows[0]["size"] > 0


def test_ls_of_an_empty_store_says_so(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert invoke(tmp_path / "empty", "ls")[1].startswith("no sessions in")


def test_stats_counts_sessions_events_and_bytes_of_the_store(store_dir: Path) -> None:
    code, out, _ = invoke(store_dir, "stats", "--json")
    assert code == 0
    stats = json.loads(out)
    assert set(stats) == {"sessions", "events", "bytes"}
    assert stats["sessions"] == 3
    assert stats["events"] == 9 + 4 + 16  # from list()'s last_seq (JSONL: each file's last line)
    assert stats["bytes"] == sum(p.stat().st_size for p in store_dir.glob("*.jsonl"))
    text = invoke(store_dir, "stats")[1].splitlines()
    assert text[0] == f"store: {store_dir.resolve()}"
    assert text[1:3] == ["sessions: 3", "events: 29"]


def test_stats_of_one_session_counts_its_turns_messages_and_incomplete_turns(
    store_dir: Path,
) -> None:
    code, out, _ = invoke(store_dir, "stats", "slack:C002", "--json")
    assert code == 0
    stats = json.loads(out)
    assert stats == {
        "session_id": "slack:C002",
        "events": 4,
        "turns": 1,
        "message_events": 2,
        "history_messages": 3,  # and the stand-in result of the call the crash cut off
        "incomplete_turns": 1,
        "bytes": (store_dir / "slack_C002.jsonl").stat().st_size,
    }
    text = invoke(store_dir, "stats", "cli:long")[1].splitlines()
    assert text[:6] == [
        "session: cli:long",
        "events: 16",
        "turns: 4",
        "message events: 8",
        "messages in history: 8",
        "incomplete turns: 0",
    ]
    code, _, err = invoke(store_dir, "stats", "no:such")
    assert code == 4 and err == f"Error: no session 'no:such' in {store_dir.resolve()}\n"


class ListingOnlyCatalog(MemoryCatalog):
    """A memory catalog whose listing does not know last seqs, and whose sessions cannot be
    opened once it is filled."""

    filled = False

    def list_page(
        self, prefix: str | None, limit: int | None, offset: int
    ) -> list[ags.SessionInfo]:
        page = super().list_page(prefix, limit, offset)
        return [msgspec.structs.replace(i, last_seq=-1) for i in page]

    def open_session(self, store: SessionHost, session_id: str) -> ags.BaseSession:
        if self.filled:
            raise AssertionError(f"session {session_id!r} was opened")
        return super().open_session(store, session_id)


class ListingOnlyStore(ags.BaseStore):
    """A store over a :class:`ListingOnlyCatalog`: ls and stats must work from list()
    alone."""

    def __init__(self) -> None:
        catalog = ListingOnlyCatalog()
        super().__init__(StoreParts(catalog, catalog.meta, locker=ThreadLocker))
        for sid, turns in [("a", 1), ("b", 2)]:
            session = self.get(sid)
            for _ in range(turns):
                with session.turn(agent="x") as turn:
                    turn.user("hi")
        catalog.filled = True


@pytest.fixture
def listing_only(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setitem(
        agentsession.registry._registered, "listingonly", lambda *_, **__: ListingOnlyStore()
    )
    return "listingonly:"


def test_ls_and_stats_read_no_events_and_show_unknown_counts(listing_only: str) -> None:
    code, out, err = invoke(listing_only, "ls")
    assert code == 0, err
    assert [line.split()[:2] for line in out.splitlines()[1:]] == [["b", "?"], ["a", "?"]]
    rows = [json.loads(line) for line in invoke(listing_only, "ls", "--json")[1].splitlines()]
    assert [(r["id"], r["last_seq"]) for r in rows] == [("b", None), ("a", None)]
    code, out, err = invoke(listing_only, "stats", "--json")
    assert code == 0, err
    assert json.loads(out) == {"sessions": 2, "events": None, "bytes": None}  # sizes unknown
    assert "events: ?" in invoke(listing_only, "stats")[1].splitlines()


def test_rm_deletes_and_refuses_unknown_sessions(store_dir: Path) -> None:
    assert invoke(store_dir, "rm", "-y", "cli:long") == (0, "deleted cli:long\n", "")
    code, out, err = invoke(store_dir, "rm", "-y", "cli:long")
    assert code == 4
    assert err.strip() == f"Error: no session 'cli:long' in {store_dir.resolve()}"
    assert "Traceback" not in out + err


# -- show, messages, tail ---------------------------------------------------------------------


def test_show_prints_the_transcript_by_turn_and_step(store_dir: Path) -> None:
    code, out, _ = invoke(store_dir, "show", "slack:C001")
    assert code == 0
    assert "┌─ turn (coder) ·" in out
    assert "user U1: Fix the failing test" in out
    assert '→ read({"path":"a.py"}) [c1]' in out
    assert "┌ step 0" in out and "usage: 1200 in / 80 out" in out
    assert "1200 in / 80 out tokens" in out  # per turn
    assert "…" in out  # the long result is shortened
    assert "assistant (coder): Fixed." in out


def test_show_full_expands_long_results(store_dir: Path) -> None:
    out = invoke(store_dir, "show", "slack:C001", "--full")[1]
    assert out.count("x = 1") == 200


def test_show_highlights_recovery_and_compaction(store_dir: Path) -> None:
    store = ags.open_store(store_dir)
    store.recover()
    store.get("cli:long").compact("Summary so far", keep_turns=1)
    assert "RECOVERY" in invoke(store_dir, "show", "slack:C002")[1]
    out = invoke(store_dir, "show", "cli:long")[1]
    assert "COMPACTION" in out and "Summary so far" in out


def test_show_json_prints_raw_events_one_per_line(store_dir: Path) -> None:
    out = invoke(store_dir, "show", "slack:C002", "--json")[1]
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["seq"] for r in rows] == [1, 2, 3, 4]
    assert rows[3]["data"]["toolCalls"][0]["id"] == "d1"


def test_messages_prints_the_derived_history_as_json(store_dir: Path) -> None:
    code, out, _ = invoke(store_dir, "messages", "slack:C002", "--agent", "coder", "--json")
    assert code == 0
    history = json.loads(out)
    assert [m["role"] for m in history] == ["user", "assistant", "tool"]
    assert history[2]["toolResults"][0]["audit"] == {"decision": "interrupted"}


def test_messages_json_keeps_a_lone_surrogate_escaped(tmp_path: Path) -> None:
    ags.open_store(tmp_path).get("s").append(
        ags.Event.new("user/message", ags.Message.user("bad \udc80 text"))
    )
    code, out, err = invoke(tmp_path, "messages", "s", "--json")
    assert code == 0, err
    assert "\\udc80" in out
    assert json.loads(out)[0]["parts"][0]["text"] == "bad \udc80 text"


def test_tail_prints_the_latest_events(store_dir: Path) -> None:
    out = invoke(store_dir, "tail", "cli:long", "-n", "3")[1].splitlines()
    assert [line.split()[0] for line in out] == ["14", "15", "16"]
    # As show prints the rows: nested in their turn, the turn's end a frame.
    shown = invoke(store_dir, "show", "cli:long")[1].splitlines()
    assert out == shown[-3:]
    assert "end of turn" in out[-1]
    rows = invoke(store_dir, "tail", "cli:long", "-n", "2", "--json")[1].splitlines()
    assert [json.loads(r)["seq"] for r in rows] == [15, 16]
    after = invoke(store_dir, "tail", "cli:long", "--after", "12", "--json")[1].splitlines()
    assert [json.loads(r)["seq"] for r in after] == [13, 14, 15, 16]
    whole = invoke(store_dir, "tail", "cli:long", "--after", "0")[1].splitlines()
    assert whole == shown[1:]  # show's without its header
    code, _, err = invoke(store_dir, "tail", "cli:long", "--after", "1", "-n", "2")
    assert code == 2 and "not both" in err


def test_tail_follow_prints_events_another_process_appends(store_dir: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentsession", "--store", str(store_dir), "tail", "-f",
         "slack:C001", "-n", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        first = readline_within(proc.stdout)
        assert first.split()[0] == "9"
        writer = ags.open_store(store_dir)
        session = writer.get("slack:C001")
        session.append(ags.Event.new("user/message", ags.Message.user("from elsewhere")))
        line = readline_within(proc.stdout)
        assert line.split()[0] == "10" and "from elsewhere" in line
        with session.turn(agent="other") as turn:
            turn.user("a whole turn")
        lines = [readline_within(proc.stdout) for _ in range(4)]
        assert lines[0].strip() == ""  # show's blank line before a turn
        assert [line.split()[0] for line in lines[1:]] == ["11", "12", "13"]
        assert "a whole turn" in lines[2] and lines[2].split()[1] == "│"  # nested
        writer.close()
        proc.send_signal(signal.SIGINT)
        left = unread(proc.stdout) + unread(proc.stderr)
        out, err = proc.communicate(timeout=60)
        assert (proc.returncode, left, out, err) == (0, "", "", "")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_tail_follow_json_from_a_seq_and_across_a_delete(store_dir: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentsession", "--store", str(store_dir), "tail", "-f",
         "slack:C001", "--after", "6", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        # The events before -f waits come in one write.
        lines = [readline_within(proc.stdout) for _ in range(3)]
        seqs = [json.loads(line)["seq"] for line in lines]
        assert seqs == [7, 8, 9]
        writer = ags.open_store(store_dir)
        writer.delete("slack:C001")
        writer.get("slack:C001").append(ags.Event.new("user/message", ags.Message.user("anew")))
        writer.close()
        assert "was deleted" in readline_within(proc.stderr)
        event = json.loads(readline_within(proc.stdout))
        assert event["seq"] == 1 and event["data"]["parts"][0]["text"] == "anew"
        proc.send_signal(signal.SIGINT)
        left = unread(proc.stdout) + unread(proc.stderr)
        out, err = proc.communicate(timeout=60)
        assert (proc.returncode, left, out, err) == (0, "", "", "")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


# -- repair, compact, copy --------------------------------------------------------------------


def test_repair_dry_run_reports_and_writes_nothing(store_dir: Path) -> None:
    code, out, _ = invoke(store_dir, "repair", "--all", "--dry-run")
    assert code == 0
    assert "slack:C002: would repair turn at seq 1 (1 unanswered calls)" in out
    assert "slack:C001: clean" in out
    assert ags.open_store(store_dir).get("slack:C002").latest_seq == 4


def test_repair_dry_run_reports_a_live_session_as_live(store_dir: Path) -> None:
    holder = start_lock_holder(str(store_dir), "slack:live")
    try:
        out = invoke(store_dir, "repair", "--dry-run", "slack:live", "slack:C002")[1]
    finally:
        holder.kill()
        holder.wait()
    lines = out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("slack:live: live (turn lock held), would repair turn at seq ")
    assert lines[1] == "slack:C002: would repair turn at seq 1 (1 unanswered calls)"
    store = ags.open_store(store_dir)
    assert ags.scan_incomplete(store.get("slack:live").read()) is not None
    assert store.get("slack:C002").latest_seq == 4


def test_repair_fixes_crashed_turns_one_line_per_session(store_dir: Path) -> None:
    code, out, _ = invoke(store_dir, "repair", "slack:C002")
    assert code == 0
    assert out == "slack:C002: repaired 1 turn(s), 1 interrupted tool result(s) recorded\n"
    session = ags.open_store(store_dir).get("slack:C002")
    assert [e.type for e in session.read()][-1] == "session/recovery"
    assert provider_errors(session.messages()) == []
    assert invoke(store_dir, "repair", "--all")[1] == "nothing to repair\n"


def test_repair_leaves_a_live_turn_alone(store_dir: Path) -> None:
    holder = start_lock_holder(str(store_dir), "slack:live")
    try:
        out = invoke(store_dir, "repair", "--all")[1]
        assert "slack:live: live (turn lock held), left alone" in out
        assert "slack:C002: repaired" in out
    finally:
        holder.kill()
        holder.wait()
    assert "slack:live: repaired" in invoke(store_dir, "repair", "slack:live")[1]


def test_repair_needs_ids_or_all(store_dir: Path) -> None:
    code, _, err = invoke(store_dir, "repair")
    assert code == 2 and "--all" in err
    code, _, err = invoke(store_dir, "repair", "nope")
    assert code == 4 and "no session 'nope'" in err


def test_compact_with_summary_text_or_file(store_dir: Path, tmp_path: Path) -> None:
    code, out, _ = invoke(store_dir, "compact", "cli:long", "--summary", "S1", "--keep-turns", "2")
    assert code == 0 and "compacted at seq 17" in out and "4 messages kept" in out
    summary = tmp_path / "summary.txt"
    summary.write_text("S2 from a file\n")
    code, out, _ = invoke(
        store_dir, "compact", "cli:long", "--summary-file", str(summary), "--keep-turns", "0"
    )
    assert code == 0
    history = ags.open_store(store_dir).get("cli:long").messages()
    assert [m.text for m in history] == ["S2 from a file"]
    code, out, _ = invoke(store_dir, "compact", "cli:long", "--summary", "-", "--keep-turns", "5")
    assert "nothing to compact" in out


def test_compact_argument_errors(store_dir: Path) -> None:
    code, _, err = invoke(store_dir, "compact", "cli:long", "--keep-turns", "1")
    assert code == 2 and "--summary" in err
    code, _, err = invoke(store_dir, "compact", "slack:C002", "--summary", "s", "--keep-turns", "1")
    assert code == 2 and "unanswered tool calls" in err  # the library's UsageError


def test_copy_between_stores_verifies_counts(store_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "copy"
    code, out, _ = invoke(store_dir, "copy", str(store_dir), str(target))
    assert code == 0
    assert "copied 3 sessions (29 events)" in out and "verified" in out
    src, dst = ags.open_store(store_dir), ags.open_store(target)
    for info in src.list():
        assert dst.get(info.id).read() == src.get(info.id).read()
    code, _, err = invoke(store_dir, "copy", str(store_dir), str(target), "--id", "cli:long")
    assert code == 1 and "already exists" in err
    code, _, err = invoke(store_dir, "copy", str(store_dir), str(tmp_path / "x"), "--id", "nope")
    assert code == 4 and "no session 'nope'" in err
    assert not (tmp_path / "x").exists()


def test_copy_keeps_records_children_bindings_the_cli_pointer_and_last_activity(
    store_dir: Path, tmp_path: Path
) -> None:
    from agentsession.chat.identity import (
        agent_binding,
        bind_agent,
        cli_current,
        set_active_session,
        set_cli_current,
    )

    with ags.open_store(store_dir) as src:
        src.get("slack:C001").update(agent_id="coder", model="model-1", metadata={"k": "v"})
        child = src.get("slack:C001").fork("researcher", task="look")
        child.append(ags.Event.new("assistant/message", ags.Message.assistant("found it")))
        bind_agent(src, "slack:C002", "reviewer")
        set_active_session(src, "slack:C009", "slack:C002")
        set_cli_current(src, "cli:long")
        src.meta_set("some-integration", "k", "state")
        child_id = child.id
        when = {info.id: info.updated_at for info in src.list()}
    # Two records, the children index, the binding, the map, the pointer, the integration's.
    entries = 7
    target = tmp_path / "copy"
    code, out, err = invoke(store_dir, "copy", str(store_dir), str(target))
    assert code == 0, err
    with ags.open_store(target, create=False) as dst:
        info = dst.get("slack:C001").info()
        assert (info.agent_id, info.model, info.metadata) == ("coder", "model-1", {"k": "v"})
        assert agent_binding(dst, "slack:C002") == "reviewer"
        assert dst.meta_get("active", "slack:C009") == "slack:C002"
        assert cli_current(dst) == "cli:long"
        assert dst.meta_get("some-integration", "k") == "state"
        assert {i.id: i.updated_at for i in dst.list()} == when
        dst.get(child_id).merge()  # a live subagent of the copy merges into its parent
    assert out.startswith("copied 4 sessions (") and f"and {entries} meta entries from" in out
    code, out, err = invoke(store_dir, "copy", str(store_dir), str(tmp_path / "j"), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert (report["sessions"], report["meta"], report["verified_meta"]) == (4, entries, entries)
    assert report["meta_kept"] == [] and report["completed"] == []


def test_migrate_on_a_store_without_schema(store_dir: Path, tmp_path: Path) -> None:
    expected = "nothing to migrate (the schema is up to date, or this store has no schema)\n"
    assert invoke(store_dir, "migrate") == (0, expected, "")
    assert invoke("memory:", "migrate")[0] == 2  # the command line refuses memory: stores


@pytest.mark.parametrize("form", ["path", "sqlite"])
def test_migrate_of_a_path_with_no_store_says_no_store_and_creates_nothing(
    tmp_path: Path, form: str
) -> None:
    missing = tmp_path / ("typo" if form == "path" else "typo.db")
    url = str(missing) if form == "path" else f"sqlite:///{missing}"
    code, out, err = invoke(url, "migrate")
    assert (code, out) == (4, "")
    assert err.startswith(f"Error: no store at {missing}")
    assert not missing.exists()
    code, out, _ = invoke(url, "migrate", "--json")
    assert (code, out) == (4, "")


def test_migrate_an_up_to_date_sqlite_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    ags.open_store(url).close()  # opening a store creates it and applies the migrations
    assert invoke(url, "migrate")[1].startswith("nothing to migrate")
    assert invoke(url, "migrate", "--json") == (0, '{"applied":[]}\n', "")


@pytest.mark.postgres
@pytest.mark.skipif(not PG_DSN, reason="no PostgreSQL DSN")
def test_migrate_creates_the_tables_of_a_new_postgres_schema() -> None:
    schema = new_schema_name()
    try:
        url = url_with_schema(schema)
        code, out, err = invoke(url, "migrate")
        assert code == 0, err
        assert out.startswith("applied migrations 1, ")
        assert invoke(url, "migrate")[1].startswith("nothing to migrate")
    finally:
        drop_schemas([schema])


# -- errors and help --------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["show", "messages", "tail", "compact"])
def test_unknown_session_is_one_line_and_exit_4(store_dir: Path, command: str) -> None:
    args = [command, "no:such"] + (
        ["--summary", "s", "--keep-turns", "1"] if command == "compact" else []
    )
    code, out, err = invoke(store_dir, *args)
    assert code == 4
    assert err == f"Error: no session 'no:such' in {store_dir.resolve()}\n"
    assert "Traceback" not in out


def test_bad_url_and_unreadable_store_are_one_line(tmp_path: Path) -> None:
    code, _, err = invoke("foo://x", "ls")
    assert code == 2 and err.startswith("Error: unknown store URL scheme 'foo'")
    plain = tmp_path / "file"
    plain.write_text("x")
    code, _, err = invoke(plain, "ls")
    assert code == 4 and "not a directory" in err and err.count("\n") == 1


def test_missing_driver_extra_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    for name in [m for m in sys.modules if m.startswith("agentsession.backends.postgres")]:
        monkeypatch.delitem(sys.modules, name)
    code, _, err = invoke("postgresql://nobody@127.0.0.1:1/none", "ls")
    assert code == 1
    assert "pip install 'agentsession[postgres]'" in err and err.count("\n") == 1


def test_a_turn_lock_that_cannot_be_created_is_one_line(store_dir: Path) -> None:
    (store_dir / LOCK_DIR).write_text("in the way")
    code, out, err = invoke(store_dir, "repair", "slack:C002")
    assert code == 1
    assert out.startswith("slack:C002: damaged, left alone: cannot create the directory of the")
    assert "'slack:C002'" in out and out.count("\n") == 1
    assert err == "Error: 1 session(s) could not be read or repaired: slack:C002\n"
    assert "Traceback" not in out + err


def test_show_draws_every_row_kind_and_escapes_stored_text(tmp_path: Path) -> None:
    store = ags.open_store(tmp_path / "s")
    store.get("kinds").append_many(
        [
            ags.Event.new("turn/start", ags.events.TurnStart(), agent="lead"),
            ags.Event.new("user/message", ags.Message.user("[bold]not markup[/]"), agent="lead"),
            ags.Event.new(
                "subagent/start",
                ags.events.SubagentStart(agent="helper", session="kinds/sub", task="find it"),
                agent="lead",
            ),
            ags.Event.new(
                "subagent/end",
                ags.events.SubagentEnd(
                    agent="helper",
                    session="kinds/sub",
                    status="completed",
                    summary="found",
                    steps=2,
                ),
                agent="lead",
            ),
            ags.Event.new("skill/load", ags.events.SkillLoad(name="pdf", description="reads PDFs")),
            ags.Event.new(
                "todo/update",
                ags.events.TodoUpdate(items=[ags.events.Todo("1", "ship", "done")]),
            ),
            ags.Event.new("retry/start", ags.events.RetryStart(attempt=2)),
            ags.Event.new("turn/end", ags.events.TurnEnd(steps=0), agent="lead"),
        ]
    )
    store.close()
    code, out, _ = invoke(tmp_path / "s", "show", "kinds")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("session kinds · 8 events · 1 turn · ")
    body = [line.strip() for line in lines[2:]]
    assert body == [
        line.strip()
        for line in [
            "1 ┌─ turn (lead) · " + body[0].split(" · ", 1)[1],
            "2 │ user: [bold]not markup[/]",
            "3 │ subagent helper started in session kinds/sub: find it",
            "4 │ subagent helper completed after 2 step(s): found",
            "5 │ skill pdf loaded: reads PDFs",
            "6 │ todos: [x] ship",
            '7 │ retry/start: {"attempt":2}',
            "8 └─ end of turn · 0 steps",
        ]
    ]


def test_debug_shows_the_traceback(store_dir: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["--store", str(store_dir), "--debug", "show", "nope"])
    assert result.exit_code == 4
    assert "Traceback" in result.stderr and "SessionNotFound" in result.stderr


def test_store_comes_from_the_environment(store_dir: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["ls", "--json"], env={"AGENTSESSION_STORE": str(store_dir)})
    assert result.exit_code == 0 and len(result.stdout.splitlines()) == 3


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["ls"],
        ["show"],
        ["tail"],
        ["messages"],
        ["repair"],
        ["compact"],
        ["copy"],
        ["rm"],
        ["stats"],
        ["migrate"],
        ["demo"],
    ],
)
def test_every_command_has_short_and_long_help(command: list[str]) -> None:
    for flag in ["-h", "--help"]:
        result = CliRunner().invoke(cli, [*command, flag])
        assert result.exit_code == 0
        assert "Usage:" in result.stdout
    # The help ends with examples: every line after the last heading runs the command.
    lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    examples = lines[len(lines) - lines[::-1].index("Examples:") :]
    assert examples, result.stdout
    for line in examples:
        assert "agentsession" in line and set(command) <= set(line.split()), line


# -- the demo ---------------------------------------------------------------------------------


def test_demo_runs_end_to_end_and_can_run_again(tmp_path: Path) -> None:
    for _ in range(2):
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "agentsession", "demo", "demo-dir"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "COLUMNS": "120"},
        )
        assert proc.returncode == 0, proc.stderr
        assert time.monotonic() - started < 30  # generous; the demo itself takes ~1 s
        assert "agentsession --store demo-dir show slack:C002" in proc.stdout
    store = ags.open_store(tmp_path / "demo-dir")
    sessions = {info.id: store.get(info.id) for info in store.list()}
    assert len(sessions) == 5  # one of them a subagent's child session, one the inbox scene's
    events = {sid: s.read() for sid, s in sessions.items()}
    recoveries = [e for evs in events.values() for e in evs if e.type == "session/recovery"]
    assert len(recoveries) == 1
    assert any(e.type == "session/compaction" for evs in events.values() for e in evs)
    for session in sessions.values():
        for agent in [None, "demo-coder"]:
            assert provider_errors(session.messages(agent=agent)) == []
    crashed = next(
        s for s in sessions.values() if any(e.type == "session/recovery" for e in s.read())
    )
    assert any(
        r.audit == {"decision": "interrupted"} for m in crashed.messages() for r in m.tool_results
    )


def test_demo_refuses_a_directory_it_did_not_make(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("precious")
    result = CliRunner().invoke(cli, ["demo", str(tmp_path)])
    assert result.exit_code == 2
    assert "not made by the demo" in result.stderr
    assert (tmp_path / "mine.txt").read_text() == "precious"


# -- the SQL stores ---------------------------------------------------------------------------


def sql_store_urls(tmp_path: Path) -> list[str]:
    urls = [f"sqlite:///{tmp_path / 'cli.db'}"]
    dsn = os.environ.get("AGENTSESSION_TEST_POSTGRES_DSN")
    if dsn:
        from .test_conformance_postgres import new_schema_name, url_with_schema

        urls.append(url_with_schema(new_schema_name()))
    return urls


def test_every_command_works_on_the_sql_stores(store_dir: Path, tmp_path: Path) -> None:
    for url in sql_store_urls(tmp_path):
        try:
            code, out, err = invoke(store_dir, "copy", str(store_dir), url)
            assert code == 0, err
            assert "copied 3 sessions (29 events)" in out
            code, out, _ = invoke(url, "ls", "--json")
            assert sorted(json.loads(line)["id"] for line in out.splitlines()) == [
                "cli:long",
                "slack:C001",
                "slack:C002",
            ]
            assert "user U1: Fix the failing test" in invoke(url, "show", "slack:C001")[1]
            assert "4" in invoke(url, "tail", "slack:C002", "-n", "1")[1].split()[0]
            messages = invoke(url, "messages", "slack:C002", "--json")[1]
            assert json.loads(messages)[-1]["role"] == "tool"
            assert "would repair" in invoke(url, "repair", "--all", "--dry-run")[1]
            assert invoke(url, "repair", "--all")[1].startswith("slack:C002: repaired 1 turn")
            assert (
                "compacted"
                in invoke(url, "compact", "cli:long", "--summary", "S", "--keep-turns", "1")[1]
            )
            stats = json.loads(invoke(url, "stats", "--json")[1])
            # 29 copied, 4 written by the repair, 1 compaction marker
            assert (stats["sessions"], stats["events"]) == (3, 34)
            assert (
                json.loads(invoke(url, "stats", "slack:C002", "--json")[1])["incomplete_turns"] == 0
            )
            assert invoke(url, "rm", "-y", "cli:long")[0] == 0
            assert invoke(url, "migrate") == (
                0,
                "nothing to migrate (the schema is up to date, or this store has no schema)\n",
                "",
            )
        finally:
            if url.startswith("postgresql"):
                from .test_conformance_postgres import drop_schemas

                drop_schemas([url.rsplit("schema=", 1)[1]])


def test_compact_waits_for_the_turn_lock_and_no_lock_skips_it(store_dir: Path) -> None:
    holder = ags.open_store(store_dir)
    lock = holder.lock("cli:long", timeout=5)  # an agent running a turn of the session
    try:
        code, _, err = invoke(
            store_dir,
            "compact",
            "cli:long",
            "--summary",
            "S",
            "--keep-turns",
            "1",
            "--lock-timeout",
            "0.2",
        )
        assert code == 1
        assert "is busy: its turn lock is held" in err and "--no-lock" in err
        assert ags.open_store(store_dir).get("cli:long").messages()[0].text != "S"
        code, out, _ = invoke(
            store_dir, "compact", "cli:long", "--summary", "S", "--keep-turns", "1", "--no-lock"
        )
        assert code == 0 and "compacted at seq" in out
    finally:
        lock.release()
        holder.close()
    code, out, _ = invoke(store_dir, "compact", "cli:long", "--summary", "S2", "--keep-turns", "1")
    assert code == 0 and "compacted at seq" in out


# -- output for pipes and terminals -----------------------------------------------------------

LONG_ID = "slack:T0123456789:C0123456789:t:1712345678.123456"


def run_cli(*args: str, columns: int = 40) -> subprocess.CompletedProcess[str]:
    """The command in a child process, its stdout and stderr pipes (not terminals)."""
    return subprocess.run(
        [sys.executable, "-m", "agentsession", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": str(columns)},
    )


def run_on_terminal(*args: str, columns: int) -> str:
    """The command's output with stdout and stderr on a pseudo-terminal of ``columns``."""
    pty = pytest.importorskip("pty")
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentsession", *args],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env={**os.environ, "COLUMNS": str(columns), "TERM": "xterm"},
    )
    os.close(slave)
    chunks = []
    try:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed its side
                break
            if not chunk:
                break
            chunks.append(chunk)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode())


def add_long_session(store_dir: Path) -> None:
    store = ags.open_store(store_dir)
    store.get(LONG_ID).append(ags.Event.new("user/message", ags.Message.user("word " * 25 + "end")))
    store.close()


def test_piped_ls_prints_whole_ids_at_any_width(store_dir: Path) -> None:
    add_long_session(store_dir)
    proc = run_cli("--store", str(store_dir), "ls", columns=40)
    assert proc.returncode == 0, proc.stderr
    ids = [line.split()[0] for line in proc.stdout.splitlines()[1:]]
    assert ids[0] == LONG_ID
    assert "…" not in proc.stdout
    assert invoke(store_dir, "ls")[1].splitlines()[1].split()[0] == LONG_ID  # CliRunner: a pipe


def test_piped_show_is_plain_unwrapped_and_keeps_its_gutter(store_dir: Path) -> None:
    add_long_session(store_dir)
    proc = run_cli("--store", str(store_dir), "show", LONG_ID, columns=40)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"session {LONG_ID} · 1 events · 0 turns · ")
    assert lines[1:] == ["    1 user: " + "word " * 25 + "end"]
    assert "\x1b" not in proc.stdout
    out = run_cli("--store", str(store_dir), "show", "slack:C001", columns=40).stdout
    for line in out.splitlines()[1:]:
        assert line == "" or re.match(r" *\d+ ", line), line


def test_ids_are_whole_on_a_narrow_terminal(store_dir: Path) -> None:
    add_long_session(store_dir)
    out = run_on_terminal("--store", str(store_dir), "ls", columns=30)
    assert LONG_ID in out and "…" not in out
    out = run_on_terminal("--store", str(store_dir), "show", LONG_ID, columns=30)
    assert f"session {LONG_ID} " in out


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store whose every output is far larger than a pipe's buffer."""
    directory = tmp_path_factory.mktemp("big") / "store"
    store = ags.open_store(directory)
    store.get("big").append_many(
        [ags.Event.new("user/message", ags.Message.user(f"{n} " + "x" * 300)) for n in range(2000)]
    )
    for n in range(600):
        session = store.get(f"many:{n:04d}:" + "y" * 150)
        session.append(ags.Event.new("user/message", ags.Message.user("hi")))
    store.close()
    return directory


@pytest.mark.parametrize(
    "args",
    [
        ["show", "--json", "big"],
        ["show", "big"],
        ["tail", "-n", "5000", "big"],
        ["tail", "-n", "5000", "--json", "big"],
        ["ls"],
        ["ls", "--json"],
        ["messages", "big"],
        ["messages", "--json", "big"],
    ],
)
def test_a_closed_pipe_ends_the_command_quietly_with_141(big_store: Path, args: list[str]) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentsession", "--store", str(big_store), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        assert proc.stdout.readline()
        proc.stdout.close()  # what `| head -1` does once it has its line
        proc.wait(timeout=60)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    assert (proc.returncode, err) == (141, b"")


EVIL = "\x1b[31m\x9b2J\x7f\x07\r"
EVIL_ID = "evil:\x1b]0;pwned\x07"
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@pytest.fixture
def evil_store(tmp_path: Path) -> Path:
    """A session whose id, agent, user, texts, tool names and arguments carry control
    characters."""
    store = ags.open_store(tmp_path / "evil")
    with store.get(EVIL_ID).turn(agent="a\x1b[1m", user="u\x1b[2m") as turn:
        turn.user(f"hello {EVIL} there\nsecond line")
        with turn.step() as step:
            call = ags.ToolCall("c\x1b1", "t\x1bool", {"k": EVIL})
            step.assistant(f"ok{EVIL}", tool_calls=[call])
            step.tool_result("c\x1b1", "t\x1bool", f"result {EVIL}")
    store.close()
    return tmp_path / "evil"


@pytest.mark.parametrize(
    "args",
    [
        ["ls"],
        ["show", EVIL_ID],
        ["show", "--full", EVIL_ID],
        ["tail", EVIL_ID],
        ["messages", EVIL_ID],
        ["stats"],
        ["stats", EVIL_ID],
        ["repair", "--dry-run", EVIL_ID],
        ["rm", "--dry-run", EVIL_ID],
        ["show", "nope\x1b[2J"],
        ["show", EVIL_ID.upper()],
    ],
)
def test_control_characters_are_escaped_in_human_output(evil_store: Path, args: list[str]) -> None:
    _, out, err = invoke(evil_store, *args)
    assert not RAW_CONTROL.findall(out + err), (out, err)
    assert "\\x1b" in out + err or args == ["stats"]


@pytest.mark.parametrize("terminal", [False, True])
def test_a_newline_in_a_store_path_or_a_name_is_escaped_on_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, terminal: bool
) -> None:
    monkeypatch.setattr(cli_output, "is_terminal", lambda stream: terminal)
    directory = tmp_path / "two\nlines"
    sid = "chat:a\nb\tc"
    store = ags.open_store(directory)
    with store.get(sid).turn(agent="ag\nent", user="us\ner") as turn:
        turn.user("text keeps\nits lines")
    child = store.get(sid).fork("sub\nagent", task="t")
    store.close()
    raw = (str(directory), sid, child.id, "ag\nent", "us\ner", "sub\nagent")
    for args in (["show", sid], ["show", "--full", sid], ["show", child.id], ["ls"],
                 ["ls", "--tree"], ["stats"], ["stats", sid], ["show", "no\nsuch"],
                 ["tail", sid], ["repair", "--dry-run", sid], ["rm", "--dry-run", sid]):
        code, out, err = invoke(directory, *args)
        assert code in (0, 1, 4), (args, out, err)
        for name in raw:
            assert name not in out + err, (args, name, out, err)
    out = invoke(directory, "show", sid)[1]
    header = out.split("\n")[0]
    assert header.startswith("session chat:a\\x0ab\\x09c ")
    assert str(directory).replace("\n", "\\x0a") in header
    assert "subagent sub\\x0aagent started in session chat:a\\x0ab\\x09c:child:" in out
    assert "ag\\x0aent" in out and "us\\x0aer" in out


def test_json_output_keeps_control_characters_exactly(evil_store: Path) -> None:
    out = invoke(evil_store, "show", "--json", EVIL_ID)[1]
    events = [json.loads(line) for line in out.split("\n") if line]
    assert events[1]["data"]["parts"][0]["text"] == f"hello {EVIL} there\nsecond line"
    history = json.loads(invoke(evil_store, "messages", "--json", EVIL_ID)[1])
    assert history[-1]["toolResults"][0]["content"] == f"result {EVIL}"
    assert json.loads(invoke(evil_store, "ls", "--json")[1])["id"] == EVIL_ID


# -- logging ----------------------------------------------------------------------------------


def test_a_library_warning_is_one_clean_line_on_stderr(store_dir: Path) -> None:
    with open(store_dir / "slack_C002.jsonl", "ab") as f:
        f.write(b'{"seq":5,"type":"us')  # a torn last write: moved aside by the next writer
    shown = run_cli("--store", str(store_dir), "show", "slack:C002")
    assert shown.returncode == 0 and shown.stderr == ""  # reading moves nothing
    assert "4 │ │ assistant (coder)" in shown.stdout
    proc = run_cli("--store", str(store_dir), "repair", "slack:C002")  # a writer
    assert proc.returncode == 0
    assert re.fullmatch(
        r"warning: session 'slack:C002': moved 19 bytes at offset \d+ of \S+slack_C002\.jsonl to "
        r"\S+slack_C002\.jsonl\.quarantine \(torn write at the end of the log\)\n",
        proc.stderr,
    ), proc.stderr


def test_other_loggers_and_debug_records_show_only_with_debug(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def noisy(url: str, **options: object) -> ags.BaseStore:
        logging.getLogger("somelib.pool").warning("error connecting: raw\nnoise")
        logging.getLogger("agentsession.noisy").debug("opening %s", url)
        raise ags.StoreUnavailable("cannot reach the noisy server")

    monkeypatch.setitem(agentsession.registry._registered, "noisy", noisy)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    assert invoke("noisy://x", "ls") == (1, "", "Error: cannot reach the noisy server\n")
    result = CliRunner().invoke(cli, ["--store", "noisy://x", "--debug", "ls"])
    assert result.exit_code == 1
    assert "warning: somelib.pool: error connecting: raw\\x0anoise\n" in result.stderr
    assert "debug: agentsession.noisy: opening noisy://x\n" in result.stderr
    assert result.stderr.endswith("Error: cannot reach the noisy server\n")
    assert (root.handlers, root.level) == (handlers, level)


# -- exit codes and JSON ----------------------------------------------------------------------


def test_exit_codes_are_documented_and_kept(store_dir: Path, tmp_path: Path) -> None:
    help_text = CliRunner().invoke(cli, ["--help"]).stdout
    assert "Exit status:" in help_text
    for documented in ["2    usage error", "4    not found", "141  stdout was closed"]:
        assert documented in help_text
    assert invoke(store_dir, "ls", "--no-such-option")[0] == 2
    assert invoke("sqlite://x.db", "ls")[0] == 2  # the library's UsageError (ambiguous URL)
    assert invoke(store_dir, "show", "no:such")[0] == 4
    assert invoke(tmp_path / "none", "ls")[0] == 4


def test_repair_dry_run_exit_code_says_whether_something_needs_repair(store_dir: Path) -> None:
    assert invoke(store_dir, "repair", "--all", "--dry-run")[0] == 0
    code, out, _ = invoke(store_dir, "repair", "--all", "--dry-run", "--exit-code")
    assert code == 1 and "slack:C002: would repair" in out
    assert invoke(store_dir, "repair", "--dry-run", "--exit-code", "slack:C001")[0] == 0
    assert invoke(store_dir, "repair", "--all")[0] == 0
    assert invoke(store_dir, "repair", "--all", "--dry-run", "--exit-code")[0] == 0


SNAKE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*\Z")


def json_keys(value: object) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from json_keys(item)
    elif isinstance(value, list):
        for item in value:
            yield from json_keys(item)


def test_every_command_has_json_and_its_objects_use_snake_case(
    store_dir: Path, tmp_path: Path
) -> None:
    for name, command in cli.commands.items():
        options = [opt for param in command.params for opt in getattr(param, "opts", [])]
        assert "--json" in options, name
    runs = [
        ("ls", "--json"),
        ("stats", "--json"),
        ("stats", "--json", "slack:C002"),
        ("repair", "--all", "--dry-run", "--json"),
        ("rm", "--dry-run", "--json", "cli:long"),
        ("copy", str(store_dir), str(tmp_path / "copy"), "--json"),
        ("compact", "cli:long", "--summary", "S", "--keep-turns", "1", "--json"),
        ("compact", "cli:long", "--summary", "S", "--keep-turns", "9", "--json"),
        ("repair", "--all", "--json"),
        ("rm", "-y", "--json", "cli:long"),
        ("migrate", "--json"),
    ]
    for args in runs:
        code, out, err = invoke(store_dir, *args)
        assert code == 0, (args, err)
        values = [json.loads(line) for line in out.splitlines()]
        assert values, args
        keys = set(json_keys(values))
        assert all(SNAKE.match(key) for key in keys), (args, keys)
    # Events and messages are printed exactly as stored (docs/format.md).
    stored = (store_dir / "slack_C001.jsonl").read_bytes().decode()
    assert invoke(store_dir, "show", "--json", "slack:C001")[1] == stored
    assert invoke(store_dir, "tail", "--json", "-n", "100", "slack:C001")[1] == stored
    history = json.loads(invoke(store_dir, "messages", "--json", "slack:C001")[1])
    assert history[2]["toolResults"][0]["callId"] == "c1"


# -- rm, copy and progress --------------------------------------------------------------------


def exists(store_dir: Path, session_id: str) -> bool:
    store = ags.open_store(store_dir, create=False)
    try:
        return store.exists(session_id)
    finally:
        store.close()


def test_rm_asks_on_a_terminal_and_needs_yes_elsewhere(
    store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = invoke(store_dir, "rm", "cli:long")
    assert code == 2 and "stdin is not a terminal" in err and "-y/--yes" in err
    assert exists(store_dir, "cli:long")
    monkeypatch.setattr(cli_output, "is_terminal", lambda stream: True)
    code, out, err = invoke(store_dir, "rm", "cli:long", input="n\n")
    assert code == 1 and "Delete 1 session(s) for good: cli:long?" in err
    assert err.endswith("nothing deleted\n") and out == ""
    assert exists(store_dir, "cli:long")
    code, out, err = invoke(store_dir, "rm", "cli:long", input="y\n")
    assert (code, out) == (0, "deleted cli:long\n")
    assert not exists(store_dir, "cli:long")


def test_rm_dry_run_and_ids_from_stdin(store_dir: Path) -> None:
    code, out, _ = invoke(store_dir, "rm", "--dry-run", "cli:long", "slack:C001")
    assert code == 0
    assert out == "would delete cli:long (16 events)\nwould delete slack:C001 (9 events)\n"
    assert exists(store_dir, "cli:long") and exists(store_dir, "slack:C001")
    code, _, err = invoke(store_dir, "rm", "-", input="cli:long\n")
    assert code == 2 and "the ids came from stdin" in err
    code, out, _ = invoke(store_dir, "rm", "-y", "-", input="cli:long\n\n  slack:C001\n")
    assert (code, out) == (0, "deleted cli:long\ndeleted slack:C001\n")
    code, _, err = invoke(store_dir, "rm", "-y", "slack:C002", "nope")
    assert code == 4 and "no session 'nope'" in err
    assert exists(store_dir, "slack:C002")  # nothing is deleted when an id is unknown


def test_copy_skip_existing_resumes_an_interrupted_copy(store_dir: Path, tmp_path: Path) -> None:
    src = ags.open_store(store_dir)
    dst = ags.open_store(tmp_path / "dst")
    dst.create("cli:long", src.get("cli:long").read()[:5])  # a copy cut off after 5 events
    dst.create("slack:C001", src.get("slack:C001").read())  # a copy that finished
    dst.close()
    code, _, err = invoke(store_dir, "copy", str(store_dir), str(tmp_path / "dst"))
    assert code == 1 and "2 sessions already exist" in err and "--skip-existing" in err
    code, out, err = invoke(
        store_dir, "copy", str(store_dir), str(tmp_path / "dst"), "--skip-existing"
    )
    assert code == 0, err
    assert out.startswith("copied 2 sessions (15 events)")  # 11 of cli:long, 4 of slack:C002
    assert "completed 1 that an earlier copy left half-copied; skipped 1 already there" in out
    dst = ags.open_store(tmp_path / "dst")
    for info in src.list():
        assert dst.get(info.id).read() == src.get(info.id).read()
    dst.close()
    other = ags.open_store(tmp_path / "other")
    other.get("cli:long").append(ags.Event.new("user/message", ags.Message.user("not a copy")))
    other.close()
    code, _, err = invoke(
        store_dir, "copy", str(store_dir), str(tmp_path / "other"), "--skip-existing"
    )
    assert code == 1 and "session 'cli:long' in" in err and "is not a copy" in err
    src.close()


def test_progress_bars_are_drawn_on_a_terminal_only(
    store_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert invoke(store_dir, "copy", str(store_dir), str(tmp_path / "a"))[::2] == (0, "")
    assert invoke(store_dir, "repair", "--all")[::2] == (0, "")
    monkeypatch.setattr(cli_output, "is_terminal", lambda stream: stream is sys.stderr)
    code, _, err = invoke(store_dir, "copy", str(store_dir), str(tmp_path / "b"))
    assert code == 0 and "copying" in err
    code, _, err = invoke(tmp_path / "b", "repair", "--all", "--dry-run")
    assert code == 0 and "repairing" in err
    code, _, err = invoke(tmp_path / "b", "rm", "-y", "cli:long", "slack:C001")
    assert code == 0 and "deleting" in err


# -- help for typos ---------------------------------------------------------------------------


@pytest.mark.parametrize("typed", ["slack:c002", "slack_C002", "SLACK_C002.jsonl", "slack:C02"])
def test_an_unknown_id_suggests_the_one_meant(store_dir: Path, typed: str) -> None:
    code, _, err = invoke(store_dir, "show", typed)
    assert code == 4
    assert err == (
        f"Error: no session {typed!r} in {store_dir.resolve()}; did you mean 'slack:C002'?\n"
    )



def test_tail_follow_waits_for_a_session_that_does_not_exist_yet(store_dir: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentsession",
            "--store",
            str(store_dir),
            "tail",
            "-f",
            "slack:new",
            "--interval",
            "0.05",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        waiting = readline_within(proc.stderr)
        assert waiting.startswith(f"waiting for session 'slack:new' in {store_dir.resolve()}")
        writer = ags.open_store(store_dir)
        writer.get("slack:new").append(ags.Event.new("user/message", ags.Message.user("hello")))
        writer.close()
        line = readline_within(proc.stdout)
        assert line.split()[0] == "1" and "hello" in line
    finally:
        proc.kill()
        proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def test_a_sqlite_file_given_as_a_path_gets_the_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    ags.open_store("sqlite:///big.db").close()
    code, _, err = invoke("big.db", "ls")
    assert code == 2 and "use --store sqlite:///big.db" in err
    code, _, err = invoke("missing.db", "ls")
    assert code == 4 and "no store at" in err and "use sqlite:///missing.db" in err
    assert not (tmp_path / "missing.db").exists()


# -- stores that do not exist -----------------------------------------------------------------

NEEDS_A_STORE = [
    ["ls"],
    ["show", "x"],
    ["tail", "x"],
    ["messages", "x"],
    ["stats"],
    ["stats", "x"],
    ["repair", "--all"],
    ["repair", "--all", "--dry-run"],
    ["rm", "-y", "x"],
    ["compact", "x", "--summary", "s", "--keep-turns", "1"],
]


@pytest.mark.parametrize("kind", ["dir", "sqlite"])
@pytest.mark.parametrize("args", NEEDS_A_STORE, ids=lambda args: " ".join(args))
def test_a_command_on_a_missing_store_creates_nothing(
    tmp_path: Path, kind: str, args: list[str]
) -> None:
    url = str(tmp_path / "typo") if kind == "dir" else f"sqlite:///{tmp_path}/typo.db"
    code, out, err = invoke(url, *args)
    assert code == 4 and out == ""
    assert err.startswith("Error: no store at ") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_copy_from_a_missing_store_creates_nothing(tmp_path: Path) -> None:
    code, _, err = invoke(
        tmp_path / "unused", "copy", str(tmp_path / "doesnotexist"), str(tmp_path / "dst")
    )
    assert code == 4 and err.startswith(f"Error: no store at {tmp_path / 'doesnotexist'}")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [["ls"], ["stats"], ["show", "x"], ["migrate"]])
def test_a_memory_store_is_refused(args: list[str]) -> None:
    code, _, err = invoke("memory:", *args)
    assert code == 2 and "cannot use a memory: store" in err and "empty" in err


def test_copy_refuses_memory_stores(store_dir: Path, tmp_path: Path) -> None:
    assert invoke(store_dir, "copy", "memory:", str(tmp_path / "d"))[0] == 2
    assert invoke(store_dir, "copy", str(store_dir), "MEMORY:")[0] == 2
    assert not (tmp_path / "d").exists()


def test_sqlite_sizes_are_unknown_per_session_and_the_file_for_the_store(
    store_dir: Path, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    assert invoke(store_dir, "copy", str(store_dir), url)[0] == 0
    lines = invoke(url, "ls")[1].splitlines()
    assert [line.split()[-1] for line in lines[1:]] == ["-", "-", "-"]
    assert [json.loads(line)["size"] for line in invoke(url, "ls", "--json")[1].splitlines()] == [
        None,
        None,
        None,
    ]
    stats = json.loads(invoke(url, "stats", "--json")[1])
    assert stats["bytes"] == (tmp_path / "s.db").stat().st_size > 0
    assert "bytes: 0 B" not in invoke(url, "stats")[1]
    assert "bytes: -" in invoke(url, "stats", "slack:C001")[1].splitlines()


def test_messages_for_an_agent_the_session_never_saw_says_so(tmp_path: Path) -> None:
    store = ags.open_store(tmp_path / "s")
    with store.get("agents").turn(agent="coder") as turn:
        turn.user("hi")
        turn.assistant("hello")
    store.close()
    result = CliRunner().invoke(
        cli, ["--store", str(tmp_path / "s"), "messages", "agents", "--agent", "codr"]
    )
    assert result.exit_code == 0
    assert "no event of session 'agents' is by agent 'codr'" in result.stderr
    assert "agents in it: 'coder'" in result.stderr
    assert result.stdout == ""
    result = CliRunner().invoke(
        cli, ["--store", str(tmp_path / "s"), "messages", "agents", "--agent", "coder"]
    )
    assert result.exit_code == 0 and "note:" not in result.stderr and "hello" in result.stdout


# -- read-only commands write nothing ---------------------------------------------------------

READ_COMMANDS = [
    ("ls",),
    ("ls", "--tree", "--json"),
    ("stats",),
    ("stats", "slack:C002"),
    ("show", "slack:C002"),
    ("show", "slack:C002", "--json"),
    ("show", "slack:C002", "--json", "--rows"),
    ("messages", "slack:C002"),
    ("tail", "slack:C002"),
    ("repair", "--all", "--dry-run"),
    ("repair", "slack:C002", "--dry-run"),
    ("branch", "slack:C002", "--list"),
]
TORN = b'{"seq":5,"type":"user/message","da'


def tree_snapshot(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every path under ``root`` (itself included): its mode and, for a file, its bytes (a
    symbolic link: its target)."""
    out: dict[str, tuple[str, int, bytes]] = {}
    for here, dirs, files in os.walk(root):
        for name in [".", *dirs, *files]:
            path = os.path.join(here, name)
            if os.path.relpath(path, root).startswith(".meta/catalog."):
                continue  # the catalog's journal and index: what a listing reads is indexed
            if os.path.relpath(path, root) == ".meta" and not any(
                n for n in os.listdir(path) if not n.startswith("catalog.")
            ):
                continue
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    body = f.read()
            elif stat.S_ISLNK(st.st_mode):
                body = os.readlink(path).encode()
            else:
                body = b""
            out[os.path.relpath(path, root)] = (stat.filemode(st.st_mode), st.st_size, body)
    return out


def tear(store_dir: Path) -> None:
    """Cut slack:C002's log as a crashed writer would: a last line without its end."""
    with open(store_dir / "slack_C002.jsonl", "ab") as f:
        f.write(TORN)


@pytest.mark.parametrize("args", READ_COMMANDS, ids=" ".join)
def test_a_read_command_leaves_a_torn_store_byte_identical(
    store_dir: Path, args: tuple[str, ...]
) -> None:
    tear(store_dir)
    before = tree_snapshot(store_dir)
    code, out, err = invoke(store_dir, *args)
    assert code == 0, err
    assert tree_snapshot(store_dir) == before
    if args[0] in ("show", "tail") and "--rows" not in args:
        assert "deploy" in out  # the events before the torn line are read


def test_the_torn_tail_is_absent_to_readers_and_repaired_by_the_next_writer(
    store_dir: Path,
) -> None:
    tear(store_dir)
    shown = invoke(store_dir, "show", "slack:C002", "--json")[1]
    assert [json.loads(line)["seq"] for line in shown.splitlines()] == [1, 2, 3, 4]
    assert not (store_dir / "slack_C002.jsonl.quarantine").exists()
    code, out, _ = invoke(store_dir, "repair", "slack:C002")
    assert code == 0 and "repaired 1 turn(s)" in out
    assert (store_dir / "slack_C002.jsonl.quarantine").read_bytes() == TORN + b"\n"
    shown = invoke(store_dir, "show", "slack:C002", "--json")[1]
    seqs = [json.loads(line)["seq"] for line in shown.splitlines()]
    assert seqs[:5] == [1, 2, 3, 4, 5] and seqs == list(range(1, len(seqs) + 1))


def test_a_reader_beside_a_writer_mid_line_neither_waits_nor_misreports(store_dir: Path) -> None:
    # Another process holds the log's write lock and has written half a line: a reader reads
    # the complete lines without waiting for the lock, and then the whole line once it ends.
    path = store_dir / "slack_C002.jsonl"
    half = b'{"seq":5,"type":"user/message","time":"2026-01-01T00:00:00Z",'
    rest = b'"data":{"role":"user","parts":[{"type":"text","text":"later"}]}}\n'
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys\n"
            f"fd = os.open({str(path)!r}, os.O_WRONLY | os.O_APPEND)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            f"os.write(fd, {half!r})\n"
            "print('half', flush=True)\n"
            "sys.stdin.readline()\n"
            f"os.write(fd, {rest!r})\n"
            "fcntl.flock(fd, fcntl.LOCK_UN)\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "half\n"
        before = tree_snapshot(store_dir)
        proc = run_cli("--store", str(store_dir), "tail", "slack:C002", "--json")
        assert proc.returncode == 0, proc.stderr
        assert [json.loads(line)["seq"] for line in proc.stdout.splitlines()] == [1, 2, 3, 4]
        assert tree_snapshot(store_dir) == before
        assert writer.stdin is not None
        writer.stdin.write("go\n")
        writer.stdin.flush()
        assert writer.wait(timeout=30) == 0
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    proc = run_cli("--store", str(store_dir), "tail", "slack:C002", "--json", "-n", "1")
    assert [json.loads(line)["seq"] for line in proc.stdout.splitlines()] == [5]
    assert not (store_dir / "slack_C002.jsonl.quarantine").exists()


# -- a store this process may only read -------------------------------------------------------


def read_only_runner(how: str, store_dir: Path) -> list[str]:
    """The command prefix that runs a process seeing ``store_dir`` read-only: ``mount``, in a
    mount namespace of its own where the directory is bind-mounted read-only (a real EROFS,
    even for root); ``user``, as the unprivileged user nobody, the store being nobody's with
    every write permission removed (EACCES)."""
    if how == "mount":
        if shutil.which("unshare") is None or shutil.which("mount") is None:
            pytest.skip("needs unshare(1) and mount(8) for a read-only bind mount")
        probe = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c",
             'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0"', str(store_dir)],
            capture_output=True, timeout=30,
        )
        if probe.returncode != 0:
            pytest.skip(f"no read-only bind mount here: {probe.stderr.decode().strip()}")
        script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && shift && exec "$@"'
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                str(store_dir), "--"]
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv(1) to run a command as another user")
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@contextlib.contextmanager
def shared_tmp() -> Iterator[Path]:
    """A directory that the user nobody can reach (pytest's tmp_path is root's alone),
    removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="agentsession-ro-"))
    try:
        base.chmod(0o755)
        yield base
    finally:
        for here, dirs, _ in os.walk(base):
            for name in dirs:
                os.chmod(os.path.join(here, name), 0o700)
        shutil.rmtree(base)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """:func:`shared_tmp` as a fixture."""
    with shared_tmp() as base:
        yield base


def make_read_only(how: str, store_dir: Path) -> None:
    """Prepare ``store_dir`` for :func:`read_only_runner` (``user``: nobody's, no write bit)."""
    if how != "user":
        return
    if os.geteuid() != 0:
        pytest.skip("needs root to hand the store to the user nobody")
    for here, dirs, files in os.walk(store_dir, topdown=False):
        for name in files:
            os.chown(os.path.join(here, name), 65534, 65534)
            os.chmod(os.path.join(here, name), 0o400)
        for name in dirs:
            os.chown(os.path.join(here, name), 65534, 65534)
            os.chmod(os.path.join(here, name), 0o500)
    os.chown(store_dir, 65534, 65534)
    os.chmod(store_dir, 0o500)


@pytest.mark.parametrize("how", ["mount", "user"])
@pytest.mark.parametrize("args", READ_COMMANDS, ids=" ".join)
def test_every_read_command_works_on_a_read_only_store(
    shared_dir: Path, how: str, args: tuple[str, ...]
) -> None:
    store_dir = shared_dir / "store"
    fill(store_dir).close()
    tear(store_dir)
    make_read_only(how, store_dir)
    before = tree_snapshot(store_dir)
    proc = subprocess.run(
        [*read_only_runner(how, store_dir), sys.executable, "-m", "agentsession",
         "--store", str(store_dir), *args],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "COLUMNS": "200", "PYTHONPATH": str(SRC)},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert tree_snapshot(store_dir) == before
    if args[0] == "ls":
        assert "slack:C002" in proc.stdout
    if args[:2] == ("show", "slack:C002") and len(args) == 2:
        assert "deploy" in proc.stdout


@pytest.mark.parametrize("how", ["mount", "user"])
def test_a_dry_run_on_a_read_only_store_tells_live_turns_from_pending_ones(
    shared_dir: Path, how: str
) -> None:
    store_dir = shared_dir / "store"
    store = fill(store_dir)
    store.lock("slack:C002", timeout=0).release()  # its lock file exists, and is free
    store.close()
    holder = start_lock_holder(str(store_dir), "slack:live")
    try:
        make_read_only(how, store_dir)
        before = tree_snapshot(store_dir)
        proc = subprocess.run(
            [*read_only_runner(how, store_dir), sys.executable, "-m", "agentsession",
             "--store", str(store_dir), "repair", "--dry-run", "slack:live", "slack:C002"],
            capture_output=True, text=True, timeout=60,
            env={**os.environ, "PYTHONPATH": str(SRC)},
        )
        assert tree_snapshot(store_dir) == before
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("slack:live: live (turn lock held), would repair turn at seq")
    assert lines[1] == "slack:C002: would repair turn at seq 1 (1 unanswered calls)"


@pytest.mark.parametrize("how", ["mount", "user"])
def test_a_write_to_a_read_only_store_fails_with_one_clear_line(
    shared_dir: Path, how: str
) -> None:
    store_dir = shared_dir / "store"
    fill(store_dir).close()
    make_read_only(how, store_dir)
    before = tree_snapshot(store_dir)
    proc = subprocess.run(
        [*read_only_runner(how, store_dir), sys.executable, "-m", "agentsession",
         "--store", str(store_dir), "repair", "slack:C002"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr == "Error: 1 session(s) could not be read or repaired: slack:C002\n"
    reason = "Read-only file system" if how == "mount" else "Permission denied"
    assert proc.stdout.startswith("slack:C002: damaged, left alone: ") and reason in proc.stdout
    assert tree_snapshot(store_dir) == before


SQLITE_READ_COMMANDS = [
    ("ls",),
    ("stats",),
    ("show", "slack:C002"),
    ("messages", "slack:C002"),
    ("tail", "slack:C002"),
    ("repair", "--all", "--dry-run"),
    ("branch", "slack:C002", "--list"),
]


def test_read_commands_leave_a_sqlite_store_byte_identical(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store' / 's.db'}"
    store = ags.open_store(url)
    populate_sqlite(store)
    store.close()
    before = tree_snapshot(tmp_path / "store")
    for args in SQLITE_READ_COMMANDS:
        code, _, err = invoke(url, *args)
        assert code == 0, (args, err)
        assert tree_snapshot(tmp_path / "store") == before, args  # no -wal, -shm or lock file


@pytest.mark.parametrize("how", ["mount", "user"])
def test_read_commands_work_on_a_read_only_sqlite_store(shared_dir: Path, how: str) -> None:
    store_dir = shared_dir / "store"
    url = f"sqlite:///{store_dir / 's.db'}"
    store = ags.open_store(url)
    populate_sqlite(store)
    store.close()
    make_read_only(how, store_dir)
    before = tree_snapshot(store_dir)
    runner = read_only_runner(how, store_dir)
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(SRC)}
    for args in SQLITE_READ_COMMANDS:
        proc = subprocess.run(
            [*runner, sys.executable, "-m", "agentsession", "--store", url, *args],
            capture_output=True, text=True, timeout=60, env=env,
        )
        assert proc.returncode == 0 and proc.stderr == "", (args, proc.stderr)
        if args[0] in ("show", "messages", "tail"):
            assert "deploy" in proc.stdout, (args, proc.stdout)
    proc = subprocess.run(
        [*runner, sys.executable, "-m", "agentsession", "--store", url, "rm", "slack:C002",
         "--yes"],
        capture_output=True, text=True, timeout=60, env=env,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("Error: ") and "readonly database" in proc.stderr
    assert tree_snapshot(store_dir) == before


def populate_sqlite(store: ags.BaseStore) -> None:
    """The crashed conversation of :func:`fill`, without a turn lock (so no lock file)."""
    store.get("slack:C002").append_many(
        [
            ags.Event.new("turn/start", ags.events.TurnStart(), agent="coder"),
            ags.Event.new("user/message", ags.Message.user("deploy"), agent="coder"),
        ]
    )
# -- global options after the command ----------------------------------------------------------


def leaf_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in group.commands.items():
        yield (*prefix, name)
        if isinstance(command, click.Group):
            yield from leaf_commands(command, (*prefix, name))


def command_at(path: tuple[str, ...]) -> click.Command:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return command


@pytest.mark.parametrize("path", list(leaf_commands(cli)), ids=" ".join)
def test_every_command_takes_the_global_options_after_its_name(path: tuple[str, ...]) -> None:
    options = {opt for param in command_at(path).params for opt in param.opts}
    assert {"--store", "--key-file", "--debug"} <= options


AFTER_ARGS: dict[str, list[str]] = {
    "ls": [],
    "stats": ["slack:C001"],
    "show": ["slack:C001"],
    "tail": ["slack:C001", "-n", "2"],
    "messages": ["slack:C001"],
    "repair": ["--all", "--dry-run"],
    "rm": ["--dry-run", "slack:C001"],
    "migrate": [],
}
"""Commands that read the global store, with arguments that make them succeed on ``fill``'s."""


@pytest.mark.parametrize("command", list(AFTER_ARGS))
def test_store_after_the_command_is_the_store_before_it(
    store_dir: Path, tmp_path: Path, command: str
) -> None:
    before = CliRunner().invoke(cli, ["--store", str(store_dir), command, *AFTER_ARGS[command]])
    assert before.exit_code == 0, before.output
    after = CliRunner().invoke(cli, [command, *AFTER_ARGS[command], "--store", str(store_dir)])
    assert (after.exit_code, after.stdout) == (0, before.stdout)
    # Given on both sides, the one after the command wins (as a later option does).
    missing = tmp_path / "typo"
    wins = CliRunner().invoke(
        cli, ["--store", str(missing), command, *AFTER_ARGS[command], "--store", str(store_dir)]
    )
    assert (wins.exit_code, wins.stdout) == (0, before.stdout)
    lost = CliRunner().invoke(
        cli, ["--store", str(store_dir), command, *AFTER_ARGS[command], "--store", str(missing)]
    )
    assert lost.exit_code == 4 and lost.stderr.startswith(f"Error: no store at {missing}")


def test_compact_takes_the_store_after_the_command(store_dir: Path) -> None:
    args = ["compact", "cli:long", "--summary", "earlier", "--keep-turns", "1"]
    result = CliRunner().invoke(cli, [*args, "--store", str(store_dir)])
    assert result.exit_code == 0, result.output
    assert ags.open_store(store_dir).get("cli:long").read()[-1].type == ags.events.COMPACTION


def test_copy_and_demo_take_the_global_options_after_the_command(
    store_dir: Path, tmp_path: Path
) -> None:
    result = CliRunner().invoke(
        cli, ["copy", str(store_dir), str(tmp_path / "copy"), "--json", "--debug"]
    )
    assert result.exit_code == 0, result.output
    assert ags.open_store(tmp_path / "copy").exists("cli:long")
    result = CliRunner().invoke(cli, ["demo", str(tmp_path / "demo"), "--json", "--debug"])
    assert result.exit_code == 0, result.output


def test_key_file_after_the_command_opens_an_encrypted_store(tmp_path: Path) -> None:
    url = str(tmp_path / "sealed")
    store = ags.open_store(url, passphrase="correct horse")
    store.get("a").append(ags.Event.new("user/message", ags.Message.user("hi")))
    store.get("b").append(ags.Event.new("user/message", ags.Message.user("bye")))
    store.close()
    key = tmp_path / "store.key"
    key.write_text("correct horse\n", encoding="utf-8")
    new_key = tmp_path / "new.key"
    new_key.write_text("battery staple\n", encoding="utf-8")
    without = CliRunner().invoke(cli, ["ls", "--store", url])
    assert without.exit_code == 1 and "--key-file" in without.stderr
    listed = CliRunner().invoke(cli, ["ls", "--store", url, "--key-file", str(key)])
    assert listed.exit_code == 0 and {line.split()[0] for line in listed.stdout.splitlines()} == {
        "id",
        "a",
        "b",
    }
    shred = CliRunner().invoke(cli, ["shred", "-y", "b", "--store", url, "--key-file", str(key)])
    assert shred.exit_code == 0, shred.output
    rekey = CliRunner().invoke(
        cli, ["rekey", "--new-key-file", str(new_key), "--key-file", str(key), "--store", url]
    )
    assert rekey.exit_code == 0, rekey.output
    show = CliRunner().invoke(cli, ["--store", url, "show", "a", "--key-file", str(new_key)])
    assert show.exit_code == 0 and "hi" in show.stdout


def test_debug_after_the_command_shows_the_traceback_and_the_debug_log(store_dir: Path) -> None:
    plain = CliRunner().invoke(cli, ["--store", str(store_dir), "show", "no:such"])
    assert plain.exit_code == 4 and "Traceback" not in plain.stderr
    debug = CliRunner().invoke(cli, ["--store", str(store_dir), "show", "no:such", "--debug"])
    assert debug.exit_code == 4
    assert "Traceback" in debug.stderr and "SessionNotFound" in debug.stderr
    assert debug.stderr.endswith("Error: no session 'no:such' in " f"{store_dir.resolve()}\n")


def test_import_takes_the_global_options_after_its_commands(tmp_path: Path) -> None:
    source = tmp_path / "agentkit"
    source.mkdir()
    (source / "cli_default.jsonl").write_bytes(
        b'{"ID":"","Seq":1,"SessionID":"cli:default","AgentID":"","Type":"turn/start",'
        b'"Data":{},"CreatedAt":"0001-01-01T00:00:00Z"}\n'
    )
    result = CliRunner().invoke(
        cli, ["import", "agentkit", str(source), "--store", str(tmp_path / "s"), "--debug"]
    )
    assert result.exit_code == 0, result.output
    assert ags.open_store(tmp_path / "s").exists("cli:default")


# -- Ctrl-C, migrate, stats, messages ----------------------------------------------------------


def interrupt(
    args: list[str], ready: Callable[[str], object] = lambda first: None
) -> tuple[int, str, str]:
    """Start ``agentsession ARGS``, wait for its first line on stdout (and for ``ready`` to
    return, given that line), send it SIGINT (as Ctrl-C does) and return its exit status and
    the rest of its output."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentsession", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = readline_within(proc.stdout, 60)
        assert first, "no output"
        ready(first)
        proc.send_signal(signal.SIGINT)
        left = unread(proc.stdout)
        out, err = proc.communicate(timeout=60)
        return proc.returncode, left + out, err
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_ctrl_c_stops_serve_quietly_with_status_0(store_dir: Path) -> None:
    pytest.importorskip("uvicorn")
    httpx = pytest.importorskip("httpx")

    def serving(first: str) -> None:
        # One answered request: the server runs (and handles SIGINT itself) from then on.
        assert httpx.get(json.loads(first)["url"], timeout=60).status_code == 200

    args = ["--store", str(store_dir), "serve", "--port", "0", "--json"]
    assert interrupt(args, serving) == (0, "", "")


def test_ctrl_c_stops_tail_follow_quietly_with_status_0(store_dir: Path) -> None:
    args = ["tail", "-f", "slack:C001", "-n", "1", "--store", str(store_dir)]
    assert interrupt(args) == (0, "", "")
    # --interval, from before -f was woken by appends, is still taken (and ignored).
    assert interrupt([*args, "--interval", "0.05"]) == (0, "", "")


def test_stats_tells_message_events_from_the_messages_in_history(tmp_path: Path) -> None:
    store = ags.open_store(tmp_path / "s")
    session = store.get("chat")
    for n in range(3):
        with session.turn() as turn:
            turn.user(f"question {n}")
            with turn.step() as step:
                step.assistant("", tool_calls=[ags.ToolCall(f"c{n}", "look", {})])
                step.tool_result(f"c{n}", "look", "found")
            turn.assistant(f"answer {n}")
    session.compact(summary="the first two questions", keep_turns=1)
    store.close()
    code, out, err = invoke(tmp_path / "s", "stats", "chat", "--json")
    assert code == 0, err
    stats = json.loads(out)
    assert stats["session_id"] == "chat"
    # 9 user and assistant messages were stored; the model is sent the summary and the last
    # turn (its user message, the call, the result and the answer).
    assert (stats["message_events"], stats["history_messages"]) == (9, 5)
    text = invoke(tmp_path / "s", "stats", "chat")[1].splitlines()
    assert "message events: 9" in text and "messages in history: 5" in text
    assert text[0] == "session: chat" and not any(line.startswith("session id") for line in text)


def test_show_says_one_turn_not_one_turns(store_dir: Path) -> None:
    assert " · 1 turn · " in invoke(store_dir, "show", "slack:C002")[1].splitlines()[0]
    assert " · 4 turns · " in invoke(store_dir, "show", "cli:long")[1].splitlines()[0]


def test_ls_json_uses_the_library_names_of_session_info(store_dir: Path) -> None:
    rows = [json.loads(line) for line in invoke(store_dir, "ls", "--json")[1].splitlines()]
    infos = {info.id: info for info in ags.open_store(store_dir).list()}
    for row in rows:
        info = infos[row["id"]]
        assert set(row) == {"id", "last_seq", "updated_at", "size"}
        assert row["last_seq"] == info.last_seq and row["size"] == info.size
        assert row["updated_at"] == info.updated_at.isoformat().replace("+00:00", "Z")


def test_a_bad_agentkit_line_is_named_once(tmp_path: Path) -> None:
    source = tmp_path / "agentkit"
    source.mkdir()
    (source / "cli_default.jsonl").write_text("not json\n", encoding="utf-8")
    code, out, err = invoke(tmp_path / "s", "import", "agentkit", str(source))
    assert code == 2 and out == ""
    assert err.count("not an agentkit event line") == 1
    assert err.endswith("cli_default.jsonl:1: not an agentkit event line: JSON is malformed\n")


# -- reading commands leave an old schema alone -----------------------------------------------


def reading_commands(
    session_id: str, events: int, sessions: int, text: str, tmp_path: Path
) -> list[tuple[list[str], str]]:
    """Every command that only reads the global store, as run against a session with
    ``events`` events whose history holds ``text`` in a store of ``sessions`` sessions, each
    with what its output shows of them."""
    return [
        (["ls"], f"{session_id} "),
        (["ls", "--json"], f'"id":"{session_id}","last_seq":{events},'),
        (["show", session_id], f"session {session_id} · {events} events"),
        (["show", session_id, "--json"], f'{{"seq":{events},'),
        (["messages", session_id], text),
        (["tail", session_id], f"{events:>5} "),
        (["stats"], f"sessions: {sessions}\n"),
        (["stats", session_id], f"session: {session_id}\nevents: {events}\n"),
        (["repair", "--all", "--dry-run"], f"{session_id}: "),
        (["serve", "--port", "0"], session_id),
        (
            ["copy", "{store}", str(tmp_path / "copied"), "--id", session_id],
            f"copied 1 sessions ({events} events)",
        ),
    ]


def run_reading_command(
    url: str, args: list[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[int, str, str]:
    """Run one of :func:`reading_commands` on the store at ``url``; ``serve`` prints the ids
    of the sessions its viewer would list instead of serving them."""
    import agentsession.web.server as web_server

    def serve_once(store: ags.BaseStore, **_options: object) -> None:
        print(" ".join(info.id for info in store.list()))

    monkeypatch.setattr(web_server, "serve", serve_once)
    return invoke(url, *[url if arg == "{store}" else arg for arg in args])


def sqlite_state(path: Path) -> tuple[bytes, int, list[str]]:
    """The bytes of the database and of its write-ahead log, its schema version and its event
    columns (read without writing)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        columns = [row[1] for row in conn.execute("PRAGMA table_info(events)")]
    finally:
        conn.close()
    wal = Path(f"{path}-wal")
    return path.read_bytes() + b"|" + (wal.read_bytes() if wal.exists() else b""), version, columns


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_reading_commands_read_a_version_1_sqlite_store_and_change_no_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, journal: str
) -> None:
    from .test_sqlite import build_v1

    db = tmp_path / "old.db"
    build_v1(db)
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA journal_mode={journal}")
    conn.close()
    before = sqlite_state(db)
    assert before[1:] == (1, ["key", "session_id", "seq", "type", "agent", "user", "time",
                              "data", "meta"])
    url = f"sqlite:///{db}"
    for args, shown in reading_commands("slack:C001", 4, 1, "user: greetings", tmp_path):
        code, out, err = run_reading_command(url, args, monkeypatch)
        assert sqlite_state(db) == before, args
        if args[0] == "copy":
            continue  # the source is left alone; whether the copy verifies is another matter
        assert (code, err) == (0, ""), args
        assert shown in out, args
    # A write still migrates.
    assert invoke(url, "migrate") == (0, "applied migrations 2, 3, 4, 5, 6\n", "")
    assert sqlite_state(db)[1] == 6


def test_reading_commands_refuse_a_sqlite_schema_they_cannot_read_and_change_no_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentsession.backends import sqlite as sqlite_backend

    db = tmp_path / "old.db"
    url = f"sqlite:///{db}"
    with ags.open_store(url) as store:
        store.get("s").append(ags.Event.new("user/message", ags.Message.user("hi")))

    def to_v7(conn: sqlite3.Connection) -> None:
        conn.execute("ALTER TABLE sessions ADD COLUMN title TEXT")

    monkeypatch.setattr(sqlite_backend, "_MIGRATIONS", [*sqlite_backend._MIGRATIONS, to_v7])
    before = sqlite_state(db)
    assert before[1] == 6
    for args, _ in reading_commands("s", 1, 1, "hi", tmp_path):
        code, out, err = run_reading_command(url, args, monkeypatch)
        assert (code, out) == (1, ""), args
        assert err.strip().endswith(
            "schema version 6 is older than 7; run `agentsession migrate`"
        ), args
        assert sqlite_state(db) == before, args
    assert not (tmp_path / "copied").exists()


def test_read_only_on_a_store_without_schema_is_create_false(tmp_path: Path) -> None:
    with pytest.raises(ags.StoreUnavailable, match="no store at"):
        ags.open_store(tmp_path / "absent", read_only=True)
    assert not (tmp_path / "absent").exists()
    fill(tmp_path / "s").close()
    with ags.open_store(tmp_path / "s", read_only=True) as store:
        assert len(store.list()) == 3
    with ags.open_store("memory:", read_only=True) as store:
        assert store.list() == []
