"""The demo: what it suggests runs, and an interrupted demo leaves no half-written store."""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

import agentsession as ags
from agentsession.cli import cli
from agentsession.demo import command_prefix, run_demo


class ClosedAfter(io.StringIO):
    """A stdout whose reader goes away after ``writes`` writes (``demo | head``)."""

    def __init__(self, writes: int) -> None:
        super().__init__()
        self.left = writes

    def write(self, text: str) -> int:
        if self.left == 0:
            raise BrokenPipeError
        self.left -= 1
        return super().write(text)


class RaisingConsole(Console):
    """Rich's console, letting a closed pipe surface as the command line's console does."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


def quiet() -> Console:
    return Console(file=io.StringIO())


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def assert_complete(directory: Path) -> None:
    store = ags.open_store(directory, create=False)
    try:
        assert {info.id for info in store.list()} == {
            "slack:C001:t:1712345678.9",
            "slack:C002",
            "cli:demo",
            "cli:demo:child:researcher",
            "slack:C003:t:1712350000.1",
        }
        [child] = store.children_of("cli:demo")
        assert (child.id, child.state) == ("cli:demo:child:researcher", "merged")
        assert store.get("cli:demo").messages()[-1].author == "researcher"
        assert any(e.type == "session/recovery" for e in store.get("slack:C002").read())
        double = store.get("slack:C003:t:1712350000.1")
        assert [m.text for m in double.messages()] == [
            "Deploy staging",
            "Done: deploy staging.",
            "and production too",
            "Done: and production too.",
        ]
        assert [e.id for e in double.read() if e.type == "session/delivery"] == ["Ev100", "Ev101"]
        compacted = store.get("slack:C001:t:1712345678.9").read()
        assert compacted[-1].type == "session/compaction"
    finally:
        store.close()


@pytest.mark.parametrize("writes", [0, 3, 12])
def test_an_interrupted_demo_leaves_no_store_and_an_earlier_one_whole(
    tmp_path: Path, writes: int
) -> None:
    target = tmp_path / "demo"
    with pytest.raises(BrokenPipeError):
        run_demo(target, RaisingConsole(file=ClosedAfter(writes)))
    assert list(tmp_path.iterdir()) == []
    run_demo(target, quiet())
    before = files(target)
    with pytest.raises(BrokenPipeError):
        run_demo(target, RaisingConsole(file=ClosedAfter(writes)))
    assert [p.name for p in tmp_path.iterdir()] == ["demo"]
    assert files(target) == before
    assert_complete(target)


def test_demo_into_a_closed_pipe_exits_quietly_with_its_store_complete_or_absent(
    tmp_path: Path,
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentsession", "demo", "d"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        for _ in range(3):
            proc.stdout.readline()
        proc.stdout.close()  # `agentsession demo | head -3`
        proc.wait(timeout=60)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    assert proc.returncode in (0, 141) and err == b""
    names = [p.name for p in tmp_path.iterdir()]
    assert names in ([], ["d"])  # the store is moved into place whole, or not at all
    if names:
        assert_complete(tmp_path / "d")


def test_the_commands_the_demo_suggests_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["demo"])
    assert result.exit_code == 0, result.output
    commands = [line.strip() for line in result.stdout.splitlines() if " --store " in line]
    assert len(commands) == 6
    for command in commands:
        words = shlex.split(command)
        at = words.index("--store")
        assert words[:at] == shlex.split(command_prefix())
        run = CliRunner().invoke(cli, words[at:])
        assert run.exit_code == 0, (command, run.output)
    proc = subprocess.run(
        shlex.split(commands[0]), cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("id ")


def test_demo_json_summarises_what_it_wrote(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["demo", str(tmp_path / "d"), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["store"] == str((tmp_path / "d").resolve())
    assert {s["id"]: s["events"] for s in summary["sessions"]}["slack:C002"] == 23
    assert len(summary["commands"]) == 6


def make_script(directory: Path) -> Path:
    directory.mkdir(parents=True)
    script = directory / "agentsession"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    return script


def test_command_prefix_names_what_runs_from_the_shell(tmp_path: Path) -> None:
    script = make_script(tmp_path / "project" / ".venv" / "bin")
    scripts = str(script.parent)
    python = str(tmp_path / "project" / ".venv" / "bin" / "python")
    # This installation's script is on PATH.
    on_path = command_prefix(
        which=lambda name: str(script), scripts=scripts, executable=python, cwd=str(tmp_path)
    )
    assert on_path == "agentsession"
    # The venv of the README's set-up: its bin is not on PATH.
    nowhere = {"which": lambda name: None, "scripts": scripts, "executable": python}
    assert command_prefix(**nowhere, cwd=str(tmp_path / "project")) == ".venv/bin/agentsession"
    assert command_prefix(**nowhere, cwd=str(tmp_path / "elsewhere")) == str(script)
    # Another agentsession is first on PATH: this one is named by its path.
    other = make_script(tmp_path / "other")
    assert command_prefix(
        which=lambda name: str(other), scripts=scripts, executable=python, cwd=str(tmp_path)
    ) == "project/.venv/bin/agentsession"
    # No script (running from a source tree): python -m, with this interpreter.
    empty = str(tmp_path / "empty")
    assert (
        command_prefix(
            which=lambda name: python if name == "python" else None,
            scripts=empty,
            executable=python,
            cwd=str(tmp_path),
        )
        == "python -m agentsession"
    )
    assert (
        command_prefix(
            which=lambda name: None, scripts=empty, executable=python, cwd=str(tmp_path / "x")
        )
        == f"{python} -m agentsession"
    )


def test_command_prefix_of_this_process_runs(tmp_path: Path) -> None:
    prefix = shlex.split(command_prefix(cwd=str(tmp_path)))
    proc = subprocess.run(
        [*prefix, "--version"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "version" in proc.stdout
