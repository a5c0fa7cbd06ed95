"""What the conformance suite's child processes share: how they open the store under test."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["CHILD_KEY", "OPEN", "child_env", "run_released"]

CHILD_KEY = "AGENTSESSION_CONFORMANCE_KEY"
"""The environment variable that hands an encrypted store's key (hex) to the children."""

OPEN = (
    "import os\n"
    "_key = os.environ.get('AGENTSESSION_CONFORMANCE_KEY')\n"
    "_options = {'key': bytes.fromhex(_key)} if _key else {}\n"
)
"""The lines a child script starts with: ``_options`` then opens the store as the test does."""


def child_env(key: bytes | None) -> dict[str, str] | None:
    """The environment of a child process (None: this one's) for a store encrypted with
    ``key`` (None: not encrypted)."""
    return None if key is None else {**os.environ, CHILD_KEY: key.hex()}


def run_released(
    script: str,
    args: list[list[str]],
    go_file: Path,
    timeout: float = 180.0,
    key: bytes | None = None,
) -> list[str]:
    """Start one Python child per argument list running ``script``, release them together by
    creating ``go_file`` (the scripts wait for it), wait, and return each one's stdout; every
    child is killed if anything goes wrong, and one that fails fails the test."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, *a],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env(key),
        )
        for a in args
    ]
    outs: list[str] = []
    try:
        time.sleep(0.2)
        go_file.write_text("go")
        deadline = time.monotonic() + timeout
        for proc in procs:
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            assert proc.returncode == 0, err.decode(errors="replace")
            outs.append(out.decode(errors="replace").strip())
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return outs
