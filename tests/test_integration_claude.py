"""The Claude Agent SDK's ``SessionStore`` (``agentsession.integrations.claude``) and
``agentsession import claude-code``.

The SDK's own conformance suite (``claude_agent_sdk.testing.run_session_store_conformance``)
runs on memory, JSONL, SQLite (plain and encrypted) and PostgreSQL stores. Claude Code itself
cannot run here (it needs an account and the network), so ``query()`` is driven against a
stand-in command line, ``tests/fixtures/claude/fake_claude.py``, which speaks the SDK's
stream-json protocol and replays hand-written transcript frames
(``tests/fixtures/claude/turn*.frames.jsonl``): the SDK's own transcript mirror appends them to
the store, and a second ``query()`` with ``resume`` materializes the session from the store,
as it would for Claude Code.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import itertools
import json
import os
import shutil
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("claude_agent_sdk", reason="the claude extra is not installed")

from claude_agent_sdk import (
    ClaudeAgentOptions,
    get_session_messages_from_store,
    list_sessions_from_store,
    project_key_for_directory,
    query,
)
from claude_agent_sdk.testing import run_session_store_conformance
from claude_agent_sdk.types import SessionKey

from agentsession import BaseStore, open_store
from agentsession.cli import cli
from agentsession.integrations.claude import AgentSessionStore
from agentsession.interop.claude_code import (
    ENTRY,
    import_claude_code,
    scan_claude_code_dir,
    session_key,
)
from agentsession.messages import ThinkingPart
from agentsession.validation import provider_errors

from .test_conformance_postgres import (
    DSN,
    SKIP_REASON,
    drop_schemas,
    new_schema_name,
    url_with_schema,
)

T = TypeVar("T")
FIXTURES = Path(__file__).parent / "fixtures" / "claude"
SESSION = "6f1c2b1e-8d3a-4c55-9a0e-2b7f4d1c9e01"
PROJECTS = FIXTURES / "projects"
PROJECT = "-home-dev-notes"

BACKENDS = [
    "memory",
    "jsonl",
    "sqlite",
    "sqlite-encrypted",
    pytest.param(
        "postgresql", marks=[pytest.mark.postgres, pytest.mark.skipif(not DSN, reason=SKIP_REASON)]
    ),
]


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


@pytest.fixture
def make_url(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """A new, empty store's URL of a backend, each call."""
    counter = itertools.count()
    schemas: list[str] = []

    def make(backend: str) -> str:
        n = next(counter)
        if backend == "memory":
            return "memory:"
        if backend == "jsonl":
            return str(tmp_path / f"jsonl-{n}")
        if backend.startswith("sqlite"):
            return f"sqlite:///{tmp_path}/s-{n}.db"
        schemas.append(new_schema_name())
        return url_with_schema(schemas[-1])

    try:
        yield make
    finally:
        drop_schemas(schemas)


def opened(url: str, backend: str) -> BaseStore:
    options: dict[str, Any] = {}
    if backend.endswith("encrypted"):
        options["passphrase"] = "correct horse battery staple"
    if backend == "postgresql":
        options["pool_max_size"] = 2
    return open_store(url, **options)


# -- the SDK's conformance suite ---------------------------------------------------------------


@pytest.mark.parametrize("summaries", [True, False], ids=["summaries", "folded-on-read"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_sdks_session_store_conformance_suite_passes(
    backend: str, summaries: bool, make_url: Callable[[str], str]
) -> None:
    stores: list[BaseStore] = []

    def make() -> AgentSessionStore:
        stores.append(opened(make_url(backend), backend))
        return AgentSessionStore(store=stores[-1], summaries=summaries)

    try:
        run(run_session_store_conformance(make))
    finally:
        for store in stores:
            store.close()


# -- the log -------------------------------------------------------------------------------


def _frames(turn: int) -> list[dict[str, Any]]:
    with (FIXTURES / f"turn{turn}.frames.jsonl").open() as f:
        return [json.loads(line) for line in f]


def _entries(turn: int, where: str = "main") -> list[dict[str, Any]]:
    return [
        e
        for f in _frames(turn)
        if f["type"] == "transcript_mirror" and f["filePath"] == where
        for e in f["entries"]
    ]


KEY: SessionKey = {"project_key": PROJECT, "session_id": SESSION}
SUB: SessionKey = {**KEY, "subpath": "subagents/agent-a1b2c3"}


def test_a_retried_batch_stores_each_uuid_once_and_entries_without_one_again() -> None:
    store = AgentSessionStore(store="memory:")
    entries = [e for e in _entries(1) if "uuid" in e]

    async def scenario() -> None:
        await store.append(KEY, entries[:3])  # type: ignore[arg-type]
        await store.append(KEY, entries)  # type: ignore[arg-type]  # overlaps the first
        await store.append(KEY, entries + entries)  # type: ignore[arg-type]  # one id twice
        assert await store.load(KEY) == entries
        untitled = {"type": "tag", "tag": "x"}
        await store.append(KEY, [untitled])  # type: ignore[list-item]
        await store.append(KEY, [untitled])  # type: ignore[list-item]
        assert await store.load(KEY) == [*entries, untitled, untitled]

    try:
        run(scenario())
        session = store.store.get(session_key(PROJECT, SESSION))
        usages = [e for e in session.read() if e.type == "usage"]
        assert len(usages) == 3  # msg_01 (on two entries), msg_02, msg_03: once each
        assert len(session.messages()) == 7
    finally:
        store.close()


def test_the_typed_mirror_pairs_tool_uses_with_their_results() -> None:
    store = AgentSessionStore(store="memory:")
    try:
        run(store.append(KEY, _entries(1)))  # type: ignore[arg-type]
        messages = store.store.get(session_key(PROJECT, SESSION)).messages()
        assert [m.role for m in messages] == [
            "user", "assistant", "assistant", "tool", "assistant", "tool", "assistant",
        ]  # fmt: skip
        assert messages[0].text == "What is in notes.txt, and how many words?"
        assert isinstance(messages[1].parts[0], ThinkingPart)
        [read] = messages[2].tool_calls
        assert (read.id, read.name, read.arguments) == (
            "toolu_01",
            "Read",
            {"file_path": "/home/dev/notes/notes.txt"},
        )
        assert [(r.call_id, r.content) for r in messages[3].tool_results] == [
            ("toolu_01", "buy milk")
        ]
        assert messages[5].tool_results[0].content == "Two words."  # text blocks joined
        assert messages[6].text == 'notes.txt says "buy milk": two words.'
        assert provider_errors(messages) == []
    finally:
        store.close()


def test_mirror_messages_false_stores_the_entries_alone() -> None:
    store = AgentSessionStore(store="memory:", mirror_messages=False)
    try:
        run(store.append(KEY, _entries(1)))  # type: ignore[arg-type]
        session = store.store.get(session_key(PROJECT, SESSION))
        assert {e.type for e in session.read()} == {ENTRY}
        assert session.messages() == []
        assert run(store.load(KEY)) == _entries(1)
    finally:
        store.close()


def test_subagent_transcripts_are_child_sessions_deleted_with_their_session() -> None:
    store = AgentSessionStore(store="memory:")
    try:
        run(store.append(KEY, _entries(1)[:1]))  # type: ignore[arg-type]
        run(store.append(SUB, _entries(1, "subagents/agent-a1b2c3")))  # type: ignore[arg-type]
        main = session_key(PROJECT, SESSION)
        [child] = store.store.children_of(main)
        assert child.id == session_key(PROJECT, SESSION, "subagents/agent-a1b2c3")
        assert child.agent == "claude-subagent"
        assert [m.text for m in store.store.get(child.id).messages()] == [
            "Count the words in: buy milk",
            "Two words.",
        ]
        assert run(store.list_subkeys(KEY)) == ["subagents/agent-a1b2c3"]
        run(store.delete(KEY))
        assert not store.store.exists(child.id) and not store.store.exists(main)
    finally:
        store.close()


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)  # fmt: skip
ENTRIES = st.lists(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["user", "assistant", "summary", "x"])},
        optional={"uuid": st.uuids().map(str), "message": JSON, "data": JSON},
    ),
    max_size=6,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(ENTRIES, max_size=3))
def test_any_entries_load_deep_equal_with_each_uuid_once(
    batches: list[list[dict[str, Any]]],
) -> None:
    store = AgentSessionStore(store="memory:")
    expected: list[dict[str, Any]] = []
    seen: set[str] = set()
    for batch in batches:
        for entry in batch:
            uuid = entry.get("uuid")
            if uuid is None or uuid not in seen:
                expected.append(entry)
            if uuid is not None:
                seen.add(uuid)
    try:
        for batch in batches:
            run(store.append(KEY, batch))  # type: ignore[arg-type]
        assert run(store.load(KEY)) == (expected or None)
    finally:
        store.close()


# -- query() with resume, against a stand-in Claude Code ---------------------------------------


def _fake_cli(tmp_path: Path) -> Path:
    cli_path = tmp_path / "claude"
    script = FIXTURES / "fake_claude.py"
    cli_path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
    cli_path.chmod(0o755)
    return cli_path


@pytest.mark.parametrize("backend", ["jsonl", "sqlite", BACKENDS[-1]])
def test_query_mirrors_a_turn_and_resumes_from_the_store(
    backend: str, make_url: Callable[[str], str], tmp_path: Path
) -> None:
    """First ``query()``: the stand-in CLI emits the recorded frames of turn 1, which the SDK's
    transcript mirror appends to the store. Second ``query()`` with ``resume``, in a fresh
    config dir: the SDK loads the session (and its subagent's) from the store into the files
    Claude Code resumes from; the stand-in reports what it found there."""
    cli_path = _fake_cli(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    report = tmp_path / "report.json"
    url = make_url(backend)
    env = {"FAKE_CLAUDE_REPORT": str(report)}

    async def scenario() -> list[Any]:
        store = AgentSessionStore(store=opened(url, backend))
        try:
            first = ClaudeAgentOptions(
                cli_path=cli_path,
                cwd=work,
                session_store=store,
                env={**env, "CLAUDE_CONFIG_DIR": str(tmp_path / "config")},
            )
            [m async for m in query(prompt="What is in notes.txt?", options=first)]
        finally:
            store.store.close()
        # Another process, another host: a new store object, no local transcript.
        store = AgentSessionStore(store=opened(url, backend))
        try:
            again = ClaudeAgentOptions(
                cli_path=cli_path, cwd=work, session_store=store, resume=SESSION, env=env
            )
            got = [m async for m in query(prompt="Anything else in there?", options=again)]
            key: SessionKey = {
                "project_key": project_key_for_directory(work),
                "session_id": SESSION,
            }
            assert await store.load(key) == _entries(1) + _entries(2)
            assert await store.list_subkeys(key) == ["subagents/agent-a1b2c3"]
            [listed] = await list_sessions_from_store(store, directory=str(work))
            assert (listed.session_id, listed.custom_title) == (SESSION, "Notes and words")
            said = await get_session_messages_from_store(store, SESSION, directory=str(work))
            assert [m.uuid for m in said][-2:] == [e["uuid"] for e in _entries(2)]
            texts = [
                m.text for m in store.store.get(session_key(key["project_key"], SESSION)).messages()
            ]
            assert texts[-2:] == ["Thanks. Anything else in there?", "No, that is all it holds."]
            return got
        finally:
            store.store.close()

    got = run(scenario())
    assert type(got[-1]).__name__ == "ResultMessage"
    found = json.loads(report.read_text())
    assert found["entries"] == _entries(1)
    assert found["subagents"] == ["subagents/agent-a1b2c3"]


# -- import claude-code ---------------------------------------------------------------------


def _digest(folder: Path) -> dict[str, tuple[str, int]]:
    return {
        str(p.relative_to(folder)): (
            hashlib.sha256(p.read_bytes()).hexdigest(),
            p.stat().st_mtime_ns,
        )
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_import_stores_what_the_mirror_stores_reads_only_and_is_idempotent(tmp_path: Path) -> None:
    source = tmp_path / "projects"
    shutil.copytree(PROJECTS, source)
    before = _digest(source)
    store = open_store(str(tmp_path / "store"))
    try:
        # Not healed: the typed mirror is then exactly the SDK's (healing joins the lines of
        # one model message into one assistant message; tests/test_import_heal.py).
        unhealed = scan_claude_code_dir(source)
        unhealed.heal = False
        first = import_claude_code(unhealed, store)
        assert [s.status for s in first.sessions] == ["imported", "imported"] and first.verified
        again = import_claude_code(scan_claude_code_dir(source / PROJECT), store)
        assert [s.status for s in again.sessions] == ["skipped", "skipped"]
        assert _digest(source) == before
        mirrored = AgentSessionStore(store="memory:")
        run(mirrored.append(KEY, _entries(1)))  # type: ignore[arg-type]
        imported = store.get(session_key(PROJECT, SESSION))
        assert imported.messages() == mirrored.store.get(session_key(PROJECT, SESSION)).messages()
        mirrored.close()

        # The session went on since: only the new lines are appended.
        main = source / PROJECT / f"{SESSION}.jsonl"
        with main.open("a") as f:
            f.writelines(json.dumps(e) + "\n" for e in _entries(2))
        third = import_claude_code(scan_claude_code_dir(source), store)
        assert [s.status for s in third.sessions] == ["imported", "skipped"]
        reader = AgentSessionStore(store=store)
        assert run(reader.load(KEY)) == _entries(1) + _entries(2)
        assert run(reader.list_subkeys(KEY)) == ["subagents/agent-a1b2c3"]
    finally:
        store.close()


def test_import_claude_code_command(tmp_path: Path) -> None:
    runner = CliRunner()
    target = str(tmp_path / "store")
    dry = runner.invoke(
        cli, ["--store", target, "import", "claude-code", str(PROJECTS), "--dry-run"]
    )
    assert dry.exit_code == 0, dry.output
    assert not os.path.exists(target)
    done = runner.invoke(cli, ["--store", target, "import", "claude-code", str(PROJECTS), "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert (report["imported"], report["verified"]) == (2, True)
    rerun = runner.invoke(
        cli, ["--store", target, "import", "claude-code", str(PROJECTS), "--json"]
    )
    assert json.loads(rerun.output)["imported"] == 0
    missing = runner.invoke(cli, ["--store", target, "import", "claude-code", str(tmp_path / "no")])
    assert missing.exit_code != 0


def test_the_example_runs(tmp_path: Path) -> None:
    path = Path(__file__).parent.parent / "examples" / "claude_example.py"
    spec = importlib.util.spec_from_file_location("claude_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    run(module.main(str(tmp_path / "store")))


def test_compact_shortens_messages_only_and_warns_that_claude_resumes_from_the_entries(
    tmp_path: Path,
) -> None:
    store = AgentSessionStore(store=str(tmp_path))
    run(store.append(KEY, _entries(1)))  # type: ignore[arg-type]
    store.close()
    sid = session_key(PROJECT, SESSION)
    result = CliRunner().invoke(
        cli, ["--store", str(tmp_path), "compact", sid, "--keep-turns", "0", "--summary", "S"]
    )
    assert result.exit_code == 0, result.output
    assert "Claude Code resumes from its transcript entries" in result.stderr
    store = AgentSessionStore(store=str(tmp_path))
    try:
        assert run(store.load(KEY)) == _entries(1)
        assert [m.text for m in store.store.get(sid).messages()] == ["S"]
    finally:
        store.close()
