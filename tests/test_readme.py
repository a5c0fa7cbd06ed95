"""The README's code runs, and its commands are the ones CI runs."""

from __future__ import annotations

import re
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
