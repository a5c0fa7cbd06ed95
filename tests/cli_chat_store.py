"""What the ``agentsession rewind`` and ``agentsession branch`` tests share: a JSONL directory
or a SQLite file holding one conversation of three turns, the CLI run on it, and its messages
and events read back with a store of their own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from click.testing import CliRunner

import agentsession as ags
from agentsession.cli import cli

from .store_urls import store_url

SID = "cli:chat"


def invoke(url: str, *args: str) -> tuple[int, str, str]:
    """Run the CLI on the store at ``url``: exit code, stdout, stderr."""
    result = CliRunner().invoke(cli, ["--store", url, *args], env={"COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


def chat_store(backend: str, tmp_path: Path) -> Iterator[str]:
    """A store URL of ``backend`` holding ``SID``: three turns (seqs 1-4, 5-8, 9-12), each a
    question and its answer (a generator for a fixture to ``yield from``)."""
    for found in store_url(backend, tmp_path):
        store = ags.open_store(found)
        session = store.get(SID)
        for n in range(3):
            with session.turn(agent="coder") as turn:
                turn.user(f"question {n}")
                turn.assistant(f"answer {n}")
        store.close()
        yield found


def texts(url: str, session_id: str = SID) -> list[str]:
    """The session's derived messages' texts."""
    store = ags.open_store(url)
    try:
        return [m.text for m in store.get(session_id).messages()]
    finally:
        store.close()


def events(url: str, session_id: str = SID) -> list[ags.Event]:
    """The session's events."""
    store = ags.open_store(url)
    try:
        return store.get(session_id).read()
    finally:
        store.close()
