"""The README's code runs, and its commands are the ones CI runs."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README, flags=re.S)


def shell_blocks() -> list[str]:
    return [b.strip() for b in re.findall(r"```sh\n(.*?)```", README, flags=re.S)]


@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_readme_python_block_runs(
    index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code = python_blocks()[index]
    exec(compile(code, f"README.md python block {index}", "exec"), {"__name__": "__readme__"})


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_test_one() -> None:
    setup = README.split("## Set up", 1)[1].split("\n## ", 1)[0]
    commands = [b.strip() for b in re.findall(r"```sh\n(.*?)```", setup, flags=re.S)]
    assert len(commands) == 2
    test_command = commands[1].split("&&")[-1].strip()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert test_command in ci.splitlines()


def test_quickstart_example_prints_the_history(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py"), str(tmp_path / "store")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert "Fix the failing test" in out
    assert "assistant: Fixed." in out


def command_line_transcript() -> list[tuple[str, list[str]]]:
    """The ``$ agentsession ...`` examples of the README's command-line section, each with the
    lines printed under it (trailing blank lines dropped)."""
    section = README.split("## The command line", 1)[1].split("\n## ", 1)[0]
    block = re.findall(r"```text\n(.*?)```", section, flags=re.S)[0]
    examples: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            examples.append((line[2:], []))
        else:
            examples[-1][1].append(line)
    for _, lines in examples:
        while lines and not lines[-1].strip():
            lines.pop()
    return examples


TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def normalised(line: str, home: str) -> str:
    """A line with what must vary between runs made comparable: the demo's directory and the
    dates and times (both fixed width, so columns stay aligned). Sizes, counts and the order
    of lines are compared as they are: the demo writes the same bytes in the same order on
    every run, and ``ls`` breaks a tie of times by id."""
    return TIME.sub("<time>", line.replace(home, "/home/me"))


def test_the_readme_command_line_transcript_is_real_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner
    from rich.console import Console

    from agentsession.cli import cli
    from agentsession.demo import run_demo

    examples = command_line_transcript()
    commands = {shlex.split(command)[3] for command, _ in examples}
    assert {"ls", "show", "messages", "stats"} <= commands
    home = tmp_path / "me"
    home.mkdir()
    monkeypatch.chdir(home)
    run_demo("./agentsession-demo", Console(quiet=True))
    for command, expected in examples:
        argv = shlex.split(command)
        assert argv[0] == "agentsession"
        result = CliRunner().invoke(cli, argv[1:], env={"COLUMNS": "80"})
        got = [normalised(line, str(home.resolve())) for line in result.output.splitlines()]
        want = [normalised(line, "/home/me") for line in expected]
        assert got == want, command
