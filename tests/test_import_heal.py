"""``agentsession import openai-agents | adk | langgraph | claude-code``: sources written by the
real libraries (tests/import_sources.py), imported read-only, healed, idempotent, resumable after
SIGKILL, with a golden report per source."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import agentsession as ags
from agentsession.branching import BranchRef
from agentsession.cli import cli
from agentsession.derive import INTERRUPTED_TOOL_RESULT_TEXT
from agentsession.events import ASSISTANT_MESSAGE, TOOL_RESULT, USER_MESSAGE, Event
from agentsession.interop.foreign import open_source
from agentsession.interop.healing import heal
from agentsession.interop.importers import import_source, report_dict
from agentsession.messages import Message, ToolCall, ToolResult
from agentsession.providers.anthropic import anthropic_errors, to_anthropic
from agentsession.providers.gemini import gemini_errors, to_gemini
from agentsession.providers.openai_chat import openai_chat_errors, to_openai_chat
from agentsession.providers.openai_responses import (
    openai_responses_errors,
    to_openai_responses,
)
from agentsession.validation import provider_errors

from . import import_sources
from .test_conformance_postgres import DSN, SKIP_REASON, drop_schemas, new_schema_name

GOLDEN = Path(__file__).parent / "golden" / "import_heal"


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


# ---------------------------------------------------------------------------------------------
# The sources, each written once per test session (they are only read).


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sources")
    lg = root / "checkpoints.sqlite"
    import_sources.langgraph_db(lg)
    return {
        "openai-agents": import_sources.openai_agents_db(root / "conversations.db"),
        "adk": Path(import_sources.adk_db(root / "adk.db")),
        "langgraph": lg,
        "claude-code": import_sources.claude_code_dir(root / "projects"),
    }


KINDS = ["openai-agents", "adk", "langgraph", "claude-code"]


def snapshot(path: Path) -> dict[str, bytes]:
    """Every file under (or beside, for a database) ``path``, by name, with its bytes."""
    folder = path if path.is_dir() else path.parent
    out: dict[str, bytes] = {}
    for root, _, files in os.walk(folder):
        for name in files:
            full = Path(root) / name
            out[str(full.relative_to(folder))] = full.read_bytes()
    return out


def all_events(store: ags.BaseStore) -> dict[str, list[tuple[Any, ...]]]:
    """Every event of every session; the id and time only of the events the import derives
    from the source (a Claude subagent's fork markers, with their fork id, are made by the
    run that forks it)."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    for info in store.list():
        out[info.id] = [
            (e.seq, e.type, e.agent, e.user, _meta(e), _without_fork_id(e))
            + ((e.id, e.time) if e.id.startswith(("imp:", "claude:")) else ())
            for e in store.get(info.id).read()
        ]
    return out


def _meta(event: Event) -> Any:
    return {k: v for k, v in event.meta.items() if k != "fork_id"}


def _without_fork_id(event: Event) -> Any:
    data = msgspec.json.decode(bytes(event.data))
    if event.type == "session/fork":
        data.pop("forkId", None)
    return data


def assert_provider_valid(store: ags.BaseStore) -> None:
    for info in store.list():
        history = store.get(info.id).messages()
        assert provider_errors(history) == [], info.id
        assert openai_chat_errors(to_openai_chat(history)) == [], info.id
        assert openai_responses_errors(to_openai_responses(history)) == [], info.id
        assert anthropic_errors(to_anthropic(history)) == [], info.id
        assert gemini_errors(to_gemini(history)) == [], info.id


def normalized(report: dict[str, Any], *roots: Path) -> dict[str, Any]:
    text = json.dumps(report, sort_keys=True)
    for root in roots:
        text = text.replace(str(root), "<dir>")
    return json.loads(text)


def check_golden(name: str, report: dict[str, Any]) -> None:
    path = GOLDEN / f"{name}.json"
    if os.environ.get("AGENTSESSION_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    assert report == json.loads(path.read_text())


# ---------------------------------------------------------------------------------------------
# Each source.


@pytest.mark.parametrize("kind", KINDS)
def test_import_heals_reports_and_leaves_the_source_alone(
    kind: str, sources: dict[str, Path], tmp_path: Path
) -> None:
    source = sources[kind]
    before = snapshot(source)
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    report_file = tmp_path / "report.json"

    code, out, err = invoke(
        "import", kind, str(source), "--store", store_url, "--dry-run", "--json"
    )
    assert code == 0, err
    assert not (tmp_path / "store.db").exists()
    dry = json.loads(out)
    assert {s["status"] for s in dry["sessions"]} == {"would_import"}

    code, out, err = invoke(
        "import", kind, str(source), "--store", store_url, "--report", str(report_file)
    )
    assert code == 0, err
    assert "verified" in out
    report = json.loads(report_file.read_text())
    assert report["verified"] and report["healed"]
    check_golden(kind, normalized(report, source.parent, tmp_path))
    assert [s["events"] for s in dry["sessions"]] == [s["events"] for s in report["sessions"]]

    # The source: byte-identical, nothing created beside it (no -wal, -shm, -journal).
    assert snapshot(source) == before

    store = ags.open_store(store_url)
    try:
        assert_provider_valid(store)
        first = all_events(store)
    finally:
        store.close()

    # Again: nothing is missing, nothing is written.
    code, out, err = invoke("import", kind, str(source), "--store", store_url, "--json")
    assert code == 0, err
    again = json.loads(out)
    assert {s["status"] for s in again["sessions"]} == {"skipped"}
    assert again["events"] == 0
    store = ags.open_store(store_url)
    try:
        assert all_events(store) == first
    finally:
        store.close()


@pytest.mark.parametrize("kind", KINDS)
def test_no_heal_imports_as_is_and_lists_the_defects(
    kind: str, sources: dict[str, Path], tmp_path: Path
) -> None:
    src = open_source(kind, sources[kind], heal=False)
    store = ags.open_store(f"sqlite:///{tmp_path / 'raw.db'}")
    try:
        report = import_source(src, store)
        data = report_dict(report)
        assert data["healed"] is False
        defects = [d for s in data["sessions"] for d in s["defects"]]
        assert defects and {d["action"] for d in defects} <= {"none", "set_aside"}
        # The stand-ins are only at derive time: the log holds none.
        for info in store.list():
            events = store.get(info.id).read()
            assert not any("import_healed" in e.meta for e in events if e.type == TOOL_RESULT)
            assert provider_errors(store.get(info.id).messages()) == []
    finally:
        src.close()
        store.close()


def test_openai_agents_items_are_healed_for_the_sdk(
    sources: dict[str, Path], tmp_path: Path
) -> None:
    import asyncio

    from agentsession.integrations.openai_agents import OpenAIAgentsSession

    store = ags.open_store(f"sqlite:///{tmp_path / 's.db'}")
    src = open_source("openai-agents", sources["openai-agents"])
    try:
        import_source(src, store)
        session = OpenAIAgentsSession("killed", store=store)
        items = asyncio.run(session.get_items())
        kinds = [(i.get("type"), i.get("call_id")) for i in items]
        call = kinds.index(("function_call", "call_1"))
        assert kinds[call + 1] == ("function_call_output", "call_1")
        assert items[call + 1]["output"] == INTERRUPTED_TOOL_RESULT_TEXT
        assert items[-1]["content"][0]["text"] == "Still here."
        session.close()
        broken = OpenAIAgentsSession("broken", store=store)
        items = asyncio.run(broken.get_items())
        outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
        assert "ghost" not in outputs  # set aside
        slow = [i.get("call_id") for i in items].index("slow")
        assert items[slow + 1]["output"] == "done at last"  # re-attached
        broken.close()
    finally:
        src.close()
        store.close()


def test_openai_advanced_session_branches_and_usage(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    db = import_sources.openai_advanced_db(tmp_path / "src" / "advanced.db")
    before = snapshot(db)
    url = str(tmp_path / "st")
    code, out, err = invoke("import", "openai-agents", str(db), "--store", url, "--json")
    assert code == 0, err
    assert [s["session_id"] for s in json.loads(out)["sessions"]] == ["adv", "adv@retry"]
    assert snapshot(db) == before
    store = ags.open_store(url)
    try:
        main, retry = store.get("adv"), store.get("adv@retry")
        assert [m.text for m in main.messages()] == ["first", "One.", "second", "Two."]
        assert [m.text for m in retry.messages()] == [
            "first",
            "One.",
            "second, differently",
            "Two again.",
        ]
        usage = [e for e in main.read() if e.type == "usage"]
        assert [(u.meta["openai_agents_turn"], u.payload().input_tokens) for u in usage] == [
            (1, 7),
            (2, 7),
        ]
        # Each turn's usage right after its last item's mirror.
        types = [e.type for e in main.read()]
        assert types.index("usage") == 4
    finally:
        store.close()


def test_adk_service_reads_the_healed_session(sources: dict[str, Path], tmp_path: Path) -> None:
    import asyncio

    from agentsession.integrations.adk import AgentSessionService

    store = ags.open_store(f"sqlite:///{tmp_path / 's.db'}")
    src = open_source("adk", sources["adk"])
    try:
        import_source(src, store)
    finally:
        src.close()

    async def read() -> Any:
        service = AgentSessionService(store)
        return await service.get_session(app_name="shop", user_id="ada", session_id="s1")

    session = asyncio.run(read())
    assert session.state == {"cart": 1, "app:currency": "EUR", "user:name": "Ada"}
    responses = [
        p.function_response.id
        for e in session.events
        if e.content
        for p in e.content.parts or []
        if p.function_response
    ]
    assert responses == ["adk-call-1"]  # the stand-in; the stale one is set aside
    # ADK's rewind: the derived history leaves the rewound invocation out, as ADK does.
    texts = [m.text for m in store.get("adk:shop:ada:s2").messages()]
    assert texts == ["first", "First answer."]
    store.close()


# -- ADK: its own compaction events, and its older schema ------------------------------------


@pytest.fixture(scope="module")
def adk_shapes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adk-shapes")
    return {
        "compacted": Path(import_sources.adk_compacted_db(root / "compacted.db")),
        "compacted-v0": Path(import_sources.adk_compacted_db(root / "compacted0.db", legacy=True)),
        "v0": Path(import_sources.adk_db(root / "v0.db", legacy=True)),
    }


def _adk_events_as_adk_reads_them(url: str, session_id: str) -> list[Any]:
    import asyncio

    from google.adk.sessions import DatabaseSessionService

    async def read() -> Any:
        service = DatabaseSessionService(url)
        try:
            return await service.get_session(app_name="shop", user_id="ada", session_id=session_id)
        finally:
            await service.close()

    return list(asyncio.run(read()).events)


def test_adk_compaction_events_become_compaction_markers(
    adk_shapes: dict[str, Path], tmp_path: Path
) -> None:
    import asyncio

    from agentsession.integrations.adk import OWN_COMPACTION_META, AgentSessionService
    from agentsession.interop.foreign import ADK_COMPACTION_META

    assert OWN_COMPACTION_META == ADK_COMPACTION_META
    source = adk_shapes["compacted"]
    copy = tmp_path / "copy.db"  # ADK's own reader opens the source to write: read a copy
    copy.write_bytes(source.read_bytes())
    [own] = [
        e
        for e in _adk_events_as_adk_reads_them(f"sqlite+aiosqlite:///{copy}", "c1")
        if e.actions.compaction
    ]
    before = snapshot(source)
    store = ags.open_store(f"sqlite:///{tmp_path / 's.db'}")
    try:
        src = open_source("adk", source)
        try:
            report = import_source(src, store)
        finally:
            src.close()
        assert report.verified
        session = store.get("adk:shop:ada:c1")
        events = session.read()
        [marker] = [e for e in events if e.type == "session/compaction"]
        previous = events[marker.seq - 2]
        assert previous.type == "adk/event" and previous.meta["adk"] == own.id
        assert marker.meta["adk"] == own.id
        stored = marker.meta[ADK_COMPACTION_META]
        assert stored["start_timestamp"] == own.actions.compaction.start_timestamp
        assert stored["end_timestamp"] == own.actions.compaction.end_timestamp
        summary = own.actions.compaction.compacted_content.parts[0].text
        assert stored["compacted_content"]["parts"][0]["text"] == summary
        # The retained tail starts after the range: the third invocation.
        data = msgspec.json.decode(bytes(marker.data))
        assert data["firstKeptSeq"] == marker.seq
        assert [(m.role, m.text) for m in session.messages()] == [
            ("user", summary),
            ("user", "three"),
            ("assistant", "re: three"),
        ]
        assert_provider_valid(store)

        # ADK reads its own compaction event once: the integration derives none from the
        # marker that stands for it.
        async def read() -> Any:
            service = AgentSessionService(store)
            return await service.get_session(app_name="shop", user_id="ada", session_id="c1")

        adk = asyncio.run(read())
        assert [e.id for e in adk.events if e.actions.compaction] == [own.id]
        # Again: nothing is missing.
        src = open_source("adk", source)
        try:
            again = import_source(src, store)
        finally:
            src.close()
        assert [s.status for s in again.sessions] == ["skipped"]
    finally:
        store.close()
    assert snapshot(source) == before


def test_adk_older_schema_is_read_as_the_current_one(
    sources: dict[str, Path], adk_shapes: dict[str, Path], tmp_path: Path
) -> None:
    old = adk_shapes["v0"]
    before = snapshot(old)
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    report_file = tmp_path / "report.json"
    code, out, err = invoke("import", "adk", str(old), "--store", store_url, "--dry-run", "--json")
    assert code == 0, err
    assert {s["status"] for s in json.loads(out)["sessions"]} == {"would_import"}
    code, out, err = invoke(
        "import", "adk", str(old), "--store", store_url, "--report", str(report_file)
    )
    assert code == 0, err
    report = json.loads(report_file.read_text())
    assert report["verified"]
    assert any("older session schema" in note for note in report["notes"])
    check_golden("adk-v0", normalized(report, old.parent, tmp_path))
    assert snapshot(old) == before

    # The same script written by ADK in its current schema imports to the same histories.
    current = ags.open_store(f"sqlite:///{tmp_path / 'current.db'}")
    legacy = ags.open_store(store_url)
    try:
        src = open_source("adk", sources["adk"])
        try:
            import_source(src, current)
        finally:
            src.close()
        assert [i.id for i in legacy.list(order="id")] == [i.id for i in current.list(order="id")]
        for info in current.list():
            mine, theirs = legacy.get(info.id), current.get(info.id)
            assert [(m.role, m.text, [c.name for c in m.tool_calls]) for m in mine.messages()] == [
                (m.role, m.text, [c.name for c in m.tool_calls]) for m in theirs.messages()
            ]
            assert [e.type for e in mine.read()] == [e.type for e in theirs.read()]
        assert_provider_valid(legacy)
    finally:
        current.close()
        legacy.close()

    # Its compaction events (pickled in the actions) become markers too.
    store = ags.open_store(f"sqlite:///{tmp_path / 'compacted.db'}")
    try:
        src = open_source("adk", adk_shapes["compacted-v0"])
        try:
            import_source(src, store)
        finally:
            src.close()
        markers = [e for e in store.get("adk:shop:ada:c1").read() if e.type == "session/compaction"]
        assert markers and all("adk_compaction" in e.meta for e in markers)
        assert store.get("adk:shop:ada:c1").messages()[0].text.startswith("Summary:")
    finally:
        store.close()


def test_adk_older_schema_never_unpickles_more_than_event_actions(
    adk_shapes: dict[str, Path], tmp_path: Path
) -> None:
    import sqlite3

    bad = tmp_path / "bad.db"
    bad.write_bytes(adk_shapes["v0"].read_bytes())
    planted = tmp_path / "planted"
    payload = f"cos\nsystem\n(S'touch {planted}'\ntR.".encode()
    with sqlite3.connect(bad) as conn:
        [(eid,)] = conn.execute(
            "SELECT id FROM events WHERE session_id = 's1' ORDER BY timestamp LIMIT 1"
        ).fetchall()
        conn.execute("UPDATE events SET actions = ? WHERE id = ?", (payload, eid))
    conn.close()
    code, _out, err = invoke("import", "adk", str(bad), "--store", str(tmp_path / "st"))
    assert code == 2
    assert eid in err and "pickled actions do not load" in err
    assert not planted.exists()
    assert not (tmp_path / "st").exists()


def test_a_bad_record_before_the_last_imports_nothing(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "bad.db"
    conn = sqlite3.connect(db)
    conn.execute(
        "CREATE TABLE agent_messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT, "
        "message_data TEXT, created_at TIMESTAMP)"
    )
    for sid, data in (("a", '{"role": "user", "content": "hi"}'), ("b", "{not json"), ("b", "{}")):
        conn.execute(
            "INSERT INTO agent_messages (session_id, message_data) VALUES (?, ?)", (sid, data)
        )
    conn.commit()
    conn.close()
    code, _, err = invoke("import", "openai-agents", str(db), "--store", str(tmp_path / "st"))
    assert code == 2
    assert "row 2" in err and "not JSON" in err
    assert not (tmp_path / "st").exists() or not list((tmp_path / "st").iterdir())


def _openai_db(path: Path, texts: list[str]) -> Path:
    import sqlite3

    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE agent_messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT, "
        "message_data TEXT, created_at TIMESTAMP)"
    )
    for text in texts:
        conn.execute(
            "INSERT INTO agent_messages (session_id, message_data, created_at) VALUES (?, ?, ?)",
            ("default", json.dumps({"role": "user", "content": text}), import_sources.FIXED_TIME),
        )
    conn.commit()
    conn.close()
    return path


def test_another_database_with_the_same_session_id_loses_nothing(tmp_path: Path) -> None:
    """Ids derive from the record's place and content: the rows of a second database that sit
    where the first one's did are other records, and are imported."""
    first = _openai_db(tmp_path / "a.db", ["one", "two"])
    second = _openai_db(tmp_path / "b.db", ["three"])
    url = str(tmp_path / "st")
    for db in (first, second, second):
        code, _, err = invoke("import", "openai-agents", str(db), "--store", url)
        assert code == 0, err
    store = ags.open_store(url)
    try:
        assert [m.text for m in store.get("default").messages()] == ["one", "two", "three"]
    finally:
        store.close()


def test_id_map_file(sources: dict[str, Path], tmp_path: Path) -> None:
    mapping = tmp_path / "ids.json"
    mapping.write_text(json.dumps({"killed": "support:killed"}))
    code, out, err = invoke(
        "import",
        "openai-agents",
        str(sources["openai-agents"]),
        "--store",
        str(tmp_path / "st"),
        "--id-map",
        str(mapping),
        "--json",
    )
    assert code == 0, err
    assert sorted(s["session_id"] for s in json.loads(out)["sessions"]) == [
        "broken",
        "support:killed",
    ]


def test_claude_code_id_map_names_the_project(sources: dict[str, Path], tmp_path: Path) -> None:
    mapping = tmp_path / "ids.json"
    mapping.write_text(json.dumps({"-home-me-app": "app"}))
    code, out, err = invoke(
        "import",
        "claude-code",
        str(sources["claude-code"]),
        "--store",
        str(tmp_path / "st"),
        "--id-map",
        str(mapping),
        "--json",
    )
    assert code == 0, err
    assert [s["session_id"] for s in json.loads(out)["sessions"]] == [
        "claude:app:sess-1",
        "claude:app:sess-1:subagents%2Fagent-abc",
    ]


# ---------------------------------------------------------------------------------------------
# Killed mid-way, run again: the same store as one clean run.

_KILLER = """
import os, signal, sys
from agentsession import open_store
from agentsession.interop.foreign import open_source
from agentsession.interop.importers import import_source

def progress(outcome):
    print(outcome.session_id, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

source = open_source(sys.argv[1], sys.argv[2])
import_source(source, open_store(sys.argv[3]), progress=progress)
"""


@pytest.mark.parametrize("kind", ["openai-agents", "claude-code"])
def test_an_import_killed_mid_way_completes_on_the_next_run(
    kind: str, sources: dict[str, Path], tmp_path: Path
) -> None:
    killed = f"sqlite:///{tmp_path / 'killed.db'}"
    clean = f"sqlite:///{tmp_path / 'clean.db'}"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent / "src")}
    proc = subprocess.run(
        [sys.executable, "-c", _KILLER, kind, str(sources[kind]), killed],
        env=env,
        capture_output=True,
        timeout=300,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    assert len(proc.stdout.decode().split()) == 1  # killed after its first session
    store = ags.open_store(killed)
    try:
        assert 1 <= len(store.list()) < 3
    finally:
        store.close()
    for url in (killed, clean):
        code, _, err = invoke("import", kind, str(sources[kind]), "--store", url)
        assert code == 0, err
    a, b = ags.open_store(killed), ags.open_store(clean)
    try:
        assert all_events(a) == all_events(b)
    finally:
        a.close()
        b.close()


# ---------------------------------------------------------------------------------------------
# PostgreSQL sources.


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A schema of its own on the test server (the source's tables go there), dropped after."""
    if not DSN:
        pytest.skip(SKIP_REASON)
    import psycopg

    schema = new_schema_name()
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield schema
    finally:
        drop_schemas([schema])


def _with_search_path(schema: str) -> str:
    sep = "&" if "?" in DSN else "?"
    return f"{DSN}{sep}options=-csearch_path%3D{schema}"


@pytest.mark.postgres
def test_adk_database_session_service_on_postgres(pg_schema: str, tmp_path: Path) -> None:
    url = _with_search_path(pg_schema)
    import_sources.adk_db(
        tmp_path / "unused", url.replace("postgresql://", "postgresql+psycopg://")
    )
    code, out, err = invoke("import", "adk", url, "--store", str(tmp_path / "st"), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert [s["session_id"] for s in report["sessions"]] == ["adk:shop:ada:s1", "adk:shop:ada:s2"]
    kinds = sorted(d["kind"] for d in report["sessions"][0]["defects"])
    assert kinds == ["orphan_call", "orphan_result"]
    store = ags.open_store(str(tmp_path / "st"))
    try:
        assert_provider_valid(store)
    finally:
        store.close()


@pytest.mark.postgres
def test_langgraph_postgres_saver(pg_schema: str, tmp_path: Path) -> None:
    import psycopg
    from psycopg.rows import dict_row

    url = _with_search_path(pg_schema)
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        import_sources.langgraph_db(conn=conn)
    code, out, err = invoke("import", "langgraph", url, "--store", str(tmp_path / "st"), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert [s["session_id"] for s in report["sessions"]] == ["langgraph:interrupted"]
    store = ags.open_store(str(tmp_path / "st"))
    try:
        assert_provider_valid(store)
    finally:
        store.close()


@pytest.mark.postgres
def test_langgraph_postgres_saver_every_checkpoint(pg_schema: str, tmp_path: Path) -> None:
    import psycopg
    from psycopg.rows import dict_row

    url = _with_search_path(pg_schema)
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        import_sources.langgraph_forked_db(conn=conn)
    store_path = str(tmp_path / "st")
    args = ("import", "langgraph", url, "--checkpoints", "all", "--store", store_path, "--json")
    code, out, err = invoke(*args)
    assert code == 0, err
    report = json.loads(out)
    assert [(s.get("branch_of", ""), s["events"]) for s in report["sessions"]] == [
        ("", 6),
        ("langgraph:forked", 4),
        ("", 2),
    ]
    store = ags.open_store(store_path)
    try:
        [branch] = store.get("langgraph:forked").branches()
        assert branch.seq == 2
        assert_provider_valid(store)
    finally:
        store.close()
    code, out, err = invoke(*args)
    assert code == 0, err
    assert json.loads(out)["events"] == 0


# ---------------------------------------------------------------------------------------------
# Healing itself: whatever the shape, the healed log read literally is provider-valid.


def _literal(events: list[Event]) -> list[Message]:
    """The messages of ``events`` in log order, without derive's own fixes."""
    out: list[Message] = []
    for event in events:
        if event.type in (USER_MESSAGE, ASSISTANT_MESSAGE):
            out.append(event.decode(Message))
        elif event.type == TOOL_RESULT:
            out.append(Message(role="tool", tool_results=[event.decode(ToolResult)]))
    return out


_step = st.one_of(
    st.tuples(st.just("user"), st.just("")),
    st.tuples(st.just("call"), st.lists(st.sampled_from("abc"), min_size=1, max_size=3)),
    st.tuples(st.just("result"), st.sampled_from("abcz")),
    st.tuples(st.just("note"), st.just("")),
)

# ---------------------------------------------------------------------------------------------
# LangGraph: every checkpoint, earlier lines as branches.

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@pytest.fixture(scope="module")
def forked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("forked") / "checkpoints.sqlite"
    import_sources.langgraph_forked_db(path)
    return path


def _texts(session: Any) -> list[str]:
    return [m.text for m in session.messages()]


def test_langgraph_every_checkpoint_imports_an_earlier_line_as_a_branch(
    forked: Path, tmp_path: Path
) -> None:
    before = snapshot(forked)
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    code, out, err = invoke(
        "import",
        "langgraph",
        str(forked),
        "--checkpoints",
        "all",
        "--store",
        store_url,
        "--dry-run",
        "--json",
    )
    assert code == 0, err
    assert not (tmp_path / "store.db").exists()
    dry = json.loads(out)
    assert {s["status"] for s in dry["sessions"]} == {"would_import"}
    report_file = tmp_path / "report.json"
    code, out, err = invoke(
        "import",
        "langgraph",
        str(forked),
        "--checkpoints",
        "all",
        "--store",
        store_url,
        "--report",
        str(report_file),
    )
    assert code == 0, err
    report = json.loads(report_file.read_text())
    assert report["verified"]
    assert [s["events"] for s in dry["sessions"]] == [s["events"] for s in report["sessions"]]
    text = _UUID.sub("<checkpoint>", json.dumps(normalized(report, forked.parent, tmp_path)))
    check_golden("langgraph-checkpoints", json.loads(text))
    assert snapshot(forked) == before

    [branch_id] = [s["session_id"] for s in report["sessions"] if s.get("branch_of")]
    tip = branch_id.split("@", 1)[1]
    src = open_source("langgraph", forked, checkpoints="all")
    try:
        line = {
            t.checkpoint["id"]
            for t in src._line(
                "forked", next(t for t in src._tuples("forked") if t.checkpoint["id"] == tip)
            )
        }
        every = {t.checkpoint["id"] for th in ("forked", "straight") for t in src._tuples(th)}
    finally:
        src.close()
    store = ags.open_store(store_url)
    try:
        main = store.get("langgraph:forked")
        assert _texts(main) == [
            "first question",
            "re: first question",
            "another second question",
            "re: another second question",
            "and a third one",
            "re: and a third one",
        ]
        branch = store.get(branch_id)
        assert branch.origin == BranchRef("langgraph:forked", 2)
        assert [b.id for b in main.branches()] == [branch_id]
        assert _texts(branch) == [
            "first question",
            "re: first question",
            "second question",
            "re: second question",
            "third question",
            "re: third question",
        ]
        own = [e for e in branch.read() if e.seq > 3]
        assert len(own) == 4
        assert {e.meta["langgraph_checkpoint"] for e in own} <= line
        assert own[-1].meta["langgraph_checkpoint"] == tip
        for info in store.list():
            for event in store.get(info.id).read():
                if event.type != "session/branch":
                    assert event.meta["langgraph_checkpoint"] in every
        assert_provider_valid(store)
        first = all_events(store)
    finally:
        store.close()

    # Again: nothing is missing, nothing is written.
    code, out, err = invoke(
        "import", "langgraph", str(forked), "--checkpoints", "all", "--store", store_url, "--json"
    )
    assert code == 0, err
    again = json.loads(out)
    assert {s["status"] for s in again["sessions"]} == {"skipped"} and again["events"] == 0
    store = ags.open_store(store_url)
    try:
        assert all_events(store) == first
    finally:
        store.close()


def test_langgraph_latest_checkpoints_then_all_adds_only_the_branches(
    forked: Path, tmp_path: Path
) -> None:
    store = ags.open_store(f"sqlite:///{tmp_path / 's.db'}")
    try:
        latest = open_source("langgraph", forked)
        try:
            assert latest.checkpoints == "latest"
            assert [s.session_id for s in import_source(latest, store).sessions] == [
                "langgraph:forked",
                "langgraph:straight",
            ]
        finally:
            latest.close()
        every = open_source("langgraph", forked, checkpoints="all")
        try:
            [branch] = [s for s in every.sessions if s.branch_of]
            # As if a run was killed right after it made the branch: the next one appends
            # what the branch lacks.
            store.get("langgraph:forked").branch(at_seq=2, id=branch.session_id)
            report = import_source(every, store)
        finally:
            every.close()
        assert [(s.status, s.events) for s in report.sessions] == [
            ("skipped", 0),
            ("imported", 4),
            ("skipped", 0),
        ]
        assert report.verified
        assert len([e for e in store.get(branch.session_id).read() if e.seq > 3]) == 4
    finally:
        store.close()
    with pytest.raises(ags.UsageError, match="checkpoints"):
        open_source("adk", forked, checkpoints="all")
    with pytest.raises(ags.UsageError, match="checkpoints"):
        open_source("langgraph", forked, checkpoints="some")  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(st.lists(_step, max_size=25))
def test_heal_makes_any_shape_provider_valid_and_is_deterministic(steps: list[Any]) -> None:
    events: list[Event] = []
    for n, (kind, arg) in enumerate(steps):
        if kind == "user":
            events.append(Event.new(USER_MESSAGE, Message.user(f"u{n}"), id=f"e{n}"))
        elif kind == "call":
            calls = [ToolCall(c, "t", {}) for c in arg]
            msg = Message(role="assistant", tool_calls=calls)
            events.append(Event.new(ASSISTANT_MESSAGE, msg, id=f"e{n}"))
        elif kind == "result":
            events.append(Event.new(TOOL_RESULT, ToolResult(call_id=arg, content="r"), id=f"e{n}"))
        else:
            events.append(Event.new("app/note", {"n": n}, id=f"e{n}"))
    healed, defects = heal(events)
    assert provider_errors(_literal(healed)) == []
    again, _ = heal(events)
    assert [msgspec.json.encode(e) for e in again] == [msgspec.json.encode(e) for e in healed]
    # Nothing vanishes: every input event id is still there (or its result in meta).
    ids = {e.id for e in healed}
    orphans = sum(1 for d in defects if d.kind == "orphan_result")
    assert len([e for e in events if e.id not in ids]) == orphans
    # Healing a healed log finds nothing more.
    assert heal(healed)[1] == []
