"""The command line, driven with click's CliRunner, and the demo end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import agentsession as ags
from agentsession.cli import cli
from agentsession.testing.conformance import start_lock_holder
from agentsession.validation import provider_errors


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
    assert lines[0].split()[:3] == ["id", "events", "turns"]
    assert [line.split()[0] for line in lines[1:]] == ["cli:long", "slack:C002", "slack:C001"]
    assert lines[3].split()[1:3] == ["9", "1"]


def test_ls_json_prefix_and_limit(store_dir: Path) -> None:
    code, out, _ = invoke(store_dir, "ls", "--json", "--prefix", "slack:", "--limit", "1")
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["id"] for r in rows] == ["slack:C002"]
    assert rows[0]["events"] == 4 and rows[0]["turns"] == 1 and rows[0]["size"] > 0


def test_ls_of_an_empty_store_says_so(tmp_path: Path) -> None:
    assert invoke(tmp_path / "empty", "ls")[1].startswith("no sessions in")


def test_stats_counts_sessions_events_bytes_and_incomplete_turns(store_dir: Path) -> None:
    code, out, _ = invoke(store_dir, "stats", "--json")
    assert code == 0
    stats = json.loads(out)
    assert stats["sessions"] == 3
    assert stats["events"] == 9 + 4 + 16
    assert stats["incomplete_turns"] == 1
    assert stats["bytes"] > 1000
    assert "incomplete turns: 1" in invoke(store_dir, "stats")[1]


def test_rm_deletes_and_refuses_unknown_sessions(store_dir: Path) -> None:
    assert invoke(store_dir, "rm", "cli:long") == (0, "deleted cli:long\n", "")
    code, out, err = invoke(store_dir, "rm", "cli:long")
    assert code == 1
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
    code, out, _ = invoke(store_dir, "messages", "slack:C002", "--agent", "coder")
    assert code == 0
    history = json.loads(out)
    assert [m["role"] for m in history] == ["user", "assistant", "tool"]
    assert history[2]["toolResults"][0]["audit"] == {"decision": "interrupted"}


def test_tail_prints_the_latest_events(store_dir: Path) -> None:
    out = invoke(store_dir, "tail", "cli:long", "-n", "3")[1].splitlines()
    assert [line.split()[0] for line in out] == ["14", "15", "16"]
    assert "turn/end" in out[-1]
    rows = invoke(store_dir, "tail", "cli:long", "-n", "2", "--json")[1].splitlines()
    assert [json.loads(r)["seq"] for r in rows] == [15, 16]


def test_tail_follow_prints_events_another_process_appends(store_dir: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentsession",
            "--store",
            str(store_dir),
            "tail",
            "-f",
            "slack:C001",
            "-n",
            "1",
            "--interval",
            "0.05",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.split()[0] == "9"
        writer = ags.open_store(store_dir).get("slack:C001")
        writer.append(ags.Event.new("user/message", ags.Message.user("from elsewhere")))
        line = proc.stdout.readline()
        assert line.split()[0] == "10" and "from elsewhere" in line
    finally:
        proc.kill()
        proc.wait()


# -- repair, compact, copy --------------------------------------------------------------------


def test_repair_dry_run_reports_and_writes_nothing(store_dir: Path) -> None:
    code, out, _ = invoke(store_dir, "repair", "--all", "--dry-run")
    assert code == 0
    assert "slack:C002: would repair turn at seq 1 (1 unanswered calls)" in out
    assert "slack:C001: clean" in out
    assert ags.open_store(store_dir).get("slack:C002").latest_seq == 4


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
    assert code == 1 and "--all" in err
    code, _, err = invoke(store_dir, "repair", "nope")
    assert code == 1 and "no session 'nope'" in err


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
    assert code == 1 and "--summary" in err
    code, _, err = invoke(store_dir, "compact", "slack:C002", "--summary", "s", "--keep-turns", "1")
    assert code == 1 and "unanswered tool calls" in err


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
    assert code == 1 and "no session 'nope'" in err


def test_migrate_on_a_store_without_schema(store_dir: Path) -> None:
    assert "no schema to migrate" in invoke(store_dir, "migrate")[1]


# -- errors and help --------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["show", "messages", "tail", "compact"])
def test_unknown_session_is_one_line_and_exit_1(store_dir: Path, command: str) -> None:
    args = [command, "no:such"] + (
        ["--summary", "s", "--keep-turns", "1"] if command == "compact" else []
    )
    code, out, err = invoke(store_dir, *args)
    assert code == 1
    assert err == f"Error: no session 'no:such' in {store_dir.resolve()}\n"
    assert "Traceback" not in out


def test_bad_url_and_unreadable_store_are_one_line(tmp_path: Path) -> None:
    code, _, err = invoke("foo://x", "ls")
    assert code == 1 and err.startswith("Error: unknown store URL scheme 'foo'")
    plain = tmp_path / "file"
    plain.write_text("x")
    code, _, err = invoke(plain, "ls")
    assert code == 1 and "not a directory" in err and err.count("\n") == 1


def test_missing_driver_extra_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.delitem(sys.modules, "agentsession.backends.postgres", raising=False)
    code, _, err = invoke("postgresql://nobody@127.0.0.1:1/none", "ls")
    assert code == 1
    assert "pip install 'agentsession[postgres]'" in err and err.count("\n") == 1


def test_debug_shows_the_traceback(store_dir: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["--store", str(store_dir), "--debug", "show", "nope"])
    assert result.exit_code == 1
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
    assert len(sessions) == 3
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
    assert result.exit_code == 1
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
            assert json.loads(invoke(url, "messages", "slack:C002")[1])[-1]["role"] == "tool"
            assert "would repair" in invoke(url, "repair", "--all", "--dry-run")[1]
            assert invoke(url, "repair", "--all")[1].startswith("slack:C002: repaired 1 turn")
            assert (
                "compacted"
                in invoke(url, "compact", "cli:long", "--summary", "S", "--keep-turns", "1")[1]
            )
            assert json.loads(invoke(url, "stats", "--json")[1])["incomplete_turns"] == 0
            assert invoke(url, "rm", "cli:long")[0] == 0
            assert invoke(url, "migrate")[0] == 0
        finally:
            if url.startswith("postgresql"):
                from .test_conformance_postgres import drop_schemas

                drop_schemas([url.rsplit("schema=", 1)[1]])
