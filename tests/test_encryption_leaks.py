"""Proof that an encrypted store leaks no text, that tampering is caught, and that no secret
or plaintext reaches an error, a log record or a repr.

A marker string goes into every text field an agent writes (user text, tool arguments, tool
output, thinking, a compaction summary, event meta and the event's user id) through the
recorder and compaction, into the session record and the children index, and through every
integration (ADK's events and its ``app:``, ``user:`` and session state with its snapshot,
OpenAI Agents items, LangChain messages); then every byte each backend keeps is searched for
it: every file
of a JSONL store, SQLite's database, ``-wal`` and ``-shm`` files (before and after a
checkpoint), and PostgreSQL's table, index and TOAST files after a ``CHECKPOINT`` (read with
``pg_read_binary_file``) and a ``pg_dump`` of the schema. The same run without encryption must
find the marker, so that the search can fail.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentsession as ags
from agentsession.crypto import EncryptionError

from .test_conformance_postgres import DSN, drop_schemas, new_schema_name, url_with_schema

MARK = "zq7Marker0x"
"""In every text field written; never in any stored byte of an encrypted store."""
PASSPHRASE = "Pa55-Distinctive-LeakCheck-phrase"
"""A passphrase distinctive enough to search every message for."""


def write_marked(store: ags.BaseStore, session_id: str = "leak:1") -> None:
    """A session with the marker in every text field, through the recorder and compaction."""
    session = store.get(session_id)
    with session.turn(
        agent="coder", user=f"user-id {MARK}", metadata={"note": f"meta {MARK}"}
    ) as turn:
        turn.user(f"user text {MARK}")
        with turn.step() as step:
            step.assistant(
                tool_calls=[ags.ToolCall("c1", "grep", {"pattern": f"tool arguments {MARK}"})],
                thinking=f"thinking {MARK}",
            )
            step.tool_result("c1", "grep", f"tool output {MARK}")
        turn.assistant(f"final answer {MARK}")
    with session.turn(agent="coder", user=f"user-id {MARK}") as turn:
        turn.user("second question")
        turn.assistant("second answer")
    assert session.compact(f"compaction summary {MARK}", keep_turns=1) is not None
    # A child session, its record and its parent's children index.
    child = session.fork(
        "helper", inherit="all", task=f"child task {MARK}", meta={"m": f"fork meta {MARK}"}
    )
    child.update(model=f"model {MARK}")
    child.merge(f"merged summary {MARK}")
    session.update(channel_id=f"channel {MARK}", metadata={"k": f"record {MARK}"})
    write_marked_integrations(store)


ADK_STATE_EVENTS = 70
"""ADK events appended with a marked state delta: past a snapshot (one per 64 seqs)."""


def write_marked_integrations(store: ags.BaseStore) -> None:
    """The marker through every integration, into everything each keeps beside its log."""
    from google.adk.events.event import Event as AdkEvent
    from google.adk.events.event_actions import EventActions
    from google.genai import types
    from langchain_core.messages import AIMessage, HumanMessage

    from agentsession.integrations.adk import AgentSessionService
    from agentsession.integrations.langchain import AgentSessionChatHistory
    from agentsession.integrations.openai_agents import OpenAIAgentsSession

    async def adk() -> None:
        service = AgentSessionService(store)
        try:
            state = {"app:a": f"app {MARK}", "user:u": f"user {MARK}", "s": f"session {MARK}"}
            session = await service.create_session(
                app_name="app", user_id="u1", session_id="marked", state=state
            )
            for n in range(ADK_STATE_EVENTS):
                delta = {
                    "s": f"session {n} {MARK}",
                    "user:u": f"user {n} {MARK}",
                    "app:a": f"app {n} {MARK}",
                }
                content = types.Content(role="user", parts=[types.Part(text=f"adk {n} {MARK}")])
                event = AdkEvent(
                    author="user",
                    invocation_id=f"i{n}",
                    content=content,
                    actions=EventActions(state_delta=delta),
                )
                await service.append_event(session, event)
        finally:
            await service.close()

    async def openai_agents() -> None:
        items = OpenAIAgentsSession("marked-oa", store=store)
        await items.add_items([{"role": "user", "content": f"openai item {MARK}"}])

    asyncio.run(adk())
    asyncio.run(openai_agents())
    history = AgentSessionChatHistory("marked-lc", store=store, agent="coder", user="u")
    history.add_messages([HumanMessage(f"langchain {MARK}"), AIMessage(f"reply {MARK}")])


def check_marked_integrations(store: ags.BaseStore) -> None:
    """What the integrations wrote reads back with the marker (it was really written)."""
    from agentsession.integrations.adk import SNAPSHOT_KIND, AgentSessionService, session_key

    last = ADK_STATE_EVENTS - 1

    async def adk() -> None:
        service = AgentSessionService(store)
        try:
            session = await service.get_session(app_name="app", user_id="u1", session_id="marked")
            assert session is not None
            assert session.state == {
                "s": f"session {last} {MARK}",
                "app:a": f"app {last} {MARK}",
                "user:u": f"user {last} {MARK}",
            }
            assert await service.get_user_state(app_name="app", user_id="u1") == {
                "u": f"user {last} {MARK}"
            }
        finally:
            await service.close()

    asyncio.run(adk())
    assert store.meta_get(SNAPSHOT_KIND, session_key("app", "u1", "marked")) is not None
    texts = b"".join(e.raw for e in store.get("marked-oa").read())
    texts += b"".join(e.raw for e in store.get("marked-lc").read())
    assert f"openai item {MARK}".encode() in texts
    assert f"langchain {MARK}".encode() in texts


def check_marked(store: ags.BaseStore, session_id: str = "leak:1") -> None:
    """The marked session reads back with the marker (it was really written)."""
    events = store.get(session_id).read()
    texts = b"".join(e.raw for e in events).decode()
    for what in ("user text", "tool arguments", "tool output", "thinking", "final answer"):
        assert f"{what} {MARK}" in texts, what
    assert f"compaction summary {MARK}" in texts
    assert any(e.user == f"user-id {MARK}" for e in events)
    assert any(e.meta.get("note") == f"meta {MARK}" for e in events)
    info = store.get(session_id).info()
    assert (info.channel_id, info.metadata) == (f"channel {MARK}", {"k": f"record {MARK}"})
    [child] = store.children_of(session_id)
    assert child.task == f"child task {MARK}"
    kid = store.get(child.id).info()
    assert (kid.model, kid.metadata) == (f"model {MARK}", {"m": f"fork meta {MARK}"})
    assert store.get(session_id).messages()[-1].text == f"merged summary {MARK}"
    check_marked_integrations(store)


def hits(blobs: dict[str, bytes]) -> dict[str, int]:
    """Where the marker occurs (as UTF-8, and as UTF-16 for good measure), and how often."""
    needles = (MARK.encode(), MARK.encode("utf-16-le"))
    found = {name: sum(blob.count(n) for n in needles) for name, blob in blobs.items()}
    return {name: count for name, count in found.items() if count}


# -- JSONL ------------------------------------------------------------------------------------


def jsonl_files(directory: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("encrypted", [True, False])
def test_jsonl_files_hold_no_text_of_an_encrypted_store(tmp_path: Path, encrypted: bool) -> None:
    secret = {"passphrase": PASSPHRASE} if encrypted else {}
    with ags.open_store(tmp_path / "s", **secret) as store:
        write_marked(store)
        check_marked(store)
    files = jsonl_files(tmp_path / "s")
    assert any(name.endswith(".jsonl") for name in files)
    if encrypted:
        assert hits(files) == {}
        assert any("/.meta/crypto/" in name for name in files)
    else:
        found = hits(files)
        # The control run finds the marker in every kind of meta entry that the encrypted
        # run seals, so the search covers them.
        for kind in ("record", "children", "adk-app-state", "adk-user-state", "adk-snapshot"):
            assert any(f"/.meta/{kind}/" in name for name in found), (kind, found)


# -- SQLite -----------------------------------------------------------------------------------


def sqlite_files(path: Path) -> dict[str, bytes]:
    out = {}
    for suffix in ("", "-wal", "-shm", "-journal"):
        candidate = Path(f"{path}{suffix}")
        if candidate.exists():
            out[candidate.name] = candidate.read_bytes()
    return out


@pytest.mark.parametrize("encrypted", [True, False])
def test_sqlite_files_hold_no_text_of_an_encrypted_store(tmp_path: Path, encrypted: bool) -> None:
    db = tmp_path / "s.db"
    secret = {"passphrase": PASSPHRASE} if encrypted else {}
    store = ags.open_store(f"sqlite:///{db}", **secret)
    try:
        write_marked(store)
        check_marked(store)
        before = sqlite_files(db)  # the writes are (mostly) in the write-ahead log now
        assert f"{db.name}-wal" in before
    finally:
        store.close()
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        after = sqlite_files(db)  # in the database file now
    finally:
        conn.close()
    found = {
        **{f"before:{k}": v for k, v in before.items()},
        **{f"after:{k}": v for k, v in after.items()},
    }
    if encrypted:
        assert hits(found) == {}
    else:
        assert any(k.startswith("before:") for k in hits(found))
        assert any(k.startswith("after:") for k in hits(found))


# -- PostgreSQL -------------------------------------------------------------------------------


@pytest.fixture
def pg_schema() -> Iterator[str]:
    if not DSN:
        pytest.skip("set AGENTSESSION_TEST_POSTGRES_DSN to run the PostgreSQL tests")
    name = new_schema_name()
    try:
        yield name
    finally:
        drop_schemas([name])


def postgres_relation_files(schema: str) -> dict[str, bytes]:
    """Every relation file of the schema's tables, their TOAST tables and indexes, after a
    checkpoint has written the shared buffers out (needs a superuser)."""
    import psycopg

    out: dict[str, bytes] = {}
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        rows = conn.execute(
            "SELECT c.oid::regclass::text, c.reltoastrelid FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'i')",
            (schema,),
        ).fetchall()
        oids = [name for name, _ in rows]
        oids += [
            conn.execute("SELECT %s::oid::regclass::text", (toast,)).fetchone()[0]  # type: ignore[index]
            for _, toast in rows
            if toast
        ]
        toast_indexes = conn.execute(
            "SELECT i.indexrelid::regclass::text FROM pg_index i "
            "WHERE i.indrelid IN (SELECT reltoastrelid FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.reltoastrelid <> 0)",
            (schema,),
        ).fetchall()
        oids += [name for (name,) in toast_indexes]
        for relation in oids:
            row = conn.execute(
                "SELECT pg_relation_filepath(%s::regclass), pg_relation_size(%s::regclass)",
                (relation, relation),
            ).fetchone()
            assert row is not None
            path, size = row
            if size:
                data = conn.execute("SELECT pg_read_binary_file(%s)", (path,)).fetchone()
                assert data is not None
                out[f"{relation} ({path})"] = bytes(data[0])
    assert any(".events " in name for name in out)
    return out


def postgres_dump(schema: str) -> bytes:
    return subprocess.run(
        ["pg_dump", f"--schema={schema}", "--inserts", "--no-owner", DSN],
        check=True,
        capture_output=True,
        timeout=60,
    ).stdout


@pytest.mark.postgres
@pytest.mark.parametrize("encrypted", [True, False])
def test_postgres_relations_and_dump_hold_no_text_of_an_encrypted_store(
    pg_schema: str, encrypted: bool
) -> None:
    secret = {"passphrase": PASSPHRASE} if encrypted else {}
    with ags.open_store(url_with_schema(pg_schema), pool_max_size=2, **secret) as store:
        write_marked(store)
        check_marked(store)
    blobs = postgres_relation_files(pg_schema)
    if shutil.which("pg_dump"):
        blobs["pg_dump"] = postgres_dump(pg_schema)
    if encrypted:
        assert hits(blobs) == {}
    else:
        found = hits(blobs)
        assert any(".events " in name for name in found), found
        if "pg_dump" in blobs:
            assert "pg_dump" in found


# -- every meta kind --------------------------------------------------------------------------

VISIBLE_META = (
    "crypto",
    "crypto-session",
    "crypto-active",
    "bind",
    "active",
    "cli",
    "compaction-effect",
    "lease",
)
"""The meta namespaces an encrypted store keeps in clear (docs/security.md says why): key
records, agent bindings (agent names, which every event stores in clear too), the
active-session map and the CLI pointer (session ids and entry keys), the sentence an
integration records about what compaction does not change (the library's own text), and the
turn lock's lease records (epochs, a random token, times)."""


def test_every_meta_entry_of_an_encrypted_store_is_sealed_or_documented_visible(
    tmp_path: Path,
) -> None:
    from agentsession.chat import identity

    with ags.open_store(tmp_path / "s", passphrase=PASSPHRASE) as store:
        write_marked(store)
        identity.bind_agent(store, "leak:1", "coder")
        identity.set_active_session(store, "slack:C1", "leak:1")
        identity.set_cli_current(store, "leak:1")
        store.rotate_key("leak:1")
        [child] = store.children_of("leak:1")
        grandchild = store.get(child.id).fork("deeper", task=f"task {MARK}")
        store.shred(child.id, keep_children=True)  # its index keeps only ids now
        assert store.children_of(child.id)[0].id == grandchild.id
    kinds: dict[str, list[str]] = {}
    for path in sorted((tmp_path / "s" / ".meta").rglob("*.json")):
        value = json.loads(path.read_bytes())["value"]
        kinds.setdefault(path.parent.name, []).append(value)
    assert set(VISIBLE_META) | {"record", "children", "adk-snapshot"} <= set(kinds)
    assert {"adk-app-state", "adk-user-state"} <= set(kinds)
    for kind, values in kinds.items():
        if kind in VISIBLE_META:
            continue
        for value in values:
            sealed = value.startswith('{"sealed":1,')
            ids_only = kind == "children" and value.startswith('{"shredded":1,')
            assert sealed or ids_only, (kind, value[:80])
    security = (Path(__file__).parent.parent / "docs" / "security.md").read_text()
    for kind in VISIBLE_META:
        assert f"`{kind}`" in security, kind


# -- tampering --------------------------------------------------------------------------------


def jsonl_store_with_two_sessions(directory: Path) -> None:
    with ags.open_store(directory, passphrase=PASSPHRASE) as store:
        for sid in ("a", "b"):
            session = store.get(sid)
            session.append(ags.Event.new("test/first", {"text": f"{sid} one {MARK}"}))
            session.append(ags.Event.new("user/message", ags.Message.user(f"{sid} {MARK}")))
            session.append(ags.Event.new("test/third", {"text": f"{sid} three {MARK}"}))


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def write_lines(path: Path, lines: list[dict[str, Any]]) -> None:
    path.write_bytes(
        b"".join(json.dumps(line, separators=(",", ":")).encode() + b"\n" for line in lines)
    )


def read_all(directory: Path, session_id: str) -> list[ags.Event]:
    with ags.open_store(directory, create=False, passphrase=PASSPHRASE) as store:
        return store.get(session_id).read()


def flip_a_byte(lines: list[dict[str, Any]], other: list[dict[str, Any]]) -> str:
    box = bytearray(base64.b64decode(lines[1]["data"]["box"]))
    box[len(box) // 2] ^= 0x01
    lines[1]["data"]["box"] = base64.b64encode(bytes(box)).decode()
    return "seq 2"


def move_from_another_session(lines: list[dict[str, Any]], other: list[dict[str, Any]]) -> str:
    lines[1]["data"] = other[1]["data"]  # b's seq 2, same type, into a at seq 2
    return "seq 2"


def move_to_another_seq(lines: list[dict[str, Any]], other: list[dict[str, Any]]) -> str:
    lines[2]["data"] = lines[0]["data"]  # seq 1's box at seq 3
    lines[2]["type"] = lines[0]["type"]
    return "seq 3"


def swap_two_lines(lines: list[dict[str, Any]], other: list[dict[str, Any]]) -> str:
    lines[0]["data"], lines[2]["data"] = lines[2]["data"], lines[0]["data"]
    lines[0]["type"], lines[2]["type"] = lines[2]["type"], lines[0]["type"]
    return "seq 1"


def change_the_type(lines: list[dict[str, Any]], other: list[dict[str, Any]]) -> str:
    lines[1]["type"] = "assistant/message"
    return "seq 2"


@pytest.mark.parametrize(
    "tamper",
    [flip_a_byte, move_from_another_session, move_to_another_seq, swap_two_lines, change_the_type],
)
def test_a_tampered_sealed_line_raises_naming_the_session_and_seq(
    tmp_path: Path, tamper: Any, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "s"
    jsonl_store_with_two_sessions(directory)
    assert [e.decode(dict)["text"] for e in read_all(directory, "a") if e.type == "test/first"]
    path, other = directory / "a.jsonl", lines_of(directory / "b.jsonl")
    lines = lines_of(path)
    where = tamper(lines, other)
    write_lines(path, lines)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(EncryptionError) as caught:
        read_all(directory, "a")
    message = str(caught.value)
    assert f"session 'a' {where} " in message, message
    assert "does not open" in message
    assert MARK not in message and PASSPHRASE not in message
    assert all(
        MARK not in r.getMessage() and PASSPHRASE not in r.getMessage() for r in caplog.records
    )
    # The other session is untouched and reads.
    assert len(read_all(directory, "b")) == 3


def test_a_truncated_box_and_a_malformed_sealed_payload_raise_naming_the_seq(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "s"
    jsonl_store_with_two_sessions(directory)
    path = directory / "a.jsonl"
    lines = lines_of(path)
    lines[2]["data"]["box"] = lines[2]["data"]["box"][:16]
    write_lines(path, lines)
    with pytest.raises(EncryptionError, match=r"session 'a' seq 3 "):
        read_all(directory, "a")
    lines[2]["data"]["box"] = "not base64!"
    write_lines(path, lines)
    with pytest.raises(EncryptionError, match=r"session 'a' seq 3"):
        read_all(directory, "a")


# -- no secret or plaintext in errors, logs or reprs ---------------------------------------


def forbidden(key: bytes) -> list[str]:
    """What must never be printed: the passphrase, the key in its usual spellings, the marker."""
    return [PASSPHRASE, MARK, key.hex(), repr(key), base64.b64encode(key).decode()]


@pytest.mark.parametrize("backend", ["jsonl", "sqlite", "postgres"])
def test_no_secret_or_plaintext_in_errors_logs_or_reprs(
    tmp_path: Path, backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    schemas: list[str] = []
    if backend == "jsonl":
        url = str(tmp_path / "s")
    elif backend == "sqlite":
        url = f"sqlite:///{tmp_path / 's.db'}"
    else:
        if not DSN:
            pytest.skip("set AGENTSESSION_TEST_POSTGRES_DSN to run the PostgreSQL tests")
        schemas.append(new_schema_name())
        url = url_with_schema(schemas[0])
    key = bytes(range(100, 132))
    texts: list[str] = []
    store_key = b""
    try:
        with ags.open_store(url, passphrase=PASSPHRASE) as store:
            write_marked(store)
            session = store.get("leak:1")
            ring = store._keyring
            assert ring is not None
            store_key = ring._store_key  # the unwrapped store key: never printed either
            texts += [
                repr(store),
                repr(session),
                repr(ring),
                repr(ring.cipher("leak:1")),
                str(store),
            ]
            with pytest.raises(ags.UsageError) as refused:
                store.shred("leak:1")  # its child keeps a copy of its history
            texts += [str(refused.value), repr(refused.value)]
            store.shred("leak:1", recursive=True)
            for attempt in (
                lambda: store.get("leak:1").read(),
                lambda: store.get("leak:1").append(ags.Event.new("test/x", {"t": MARK})),
                lambda: store.change_passphrase("wrong " + PASSPHRASE, "new " + PASSPHRASE),
                lambda: store.change_passphrase(PASSPHRASE, ""),
            ):
                with pytest.raises(ags.SessionError) as caught:
                    attempt()
                texts += [str(caught.value), repr(caught.value)]
        for opener in (
            lambda: ags.open_store(url, create=False, passphrase=PASSPHRASE[::-1]),
            lambda: ags.open_store(url, create=False, key=key),
            lambda: ags.open_store(url, create=False),
            lambda: ags.open_store(url, create=False, passphrase=PASSPHRASE, key=key),
        ):
            with pytest.raises(ags.SessionError) as caught:
                opener()
            texts += [str(caught.value), repr(caught.value)]
    finally:
        drop_schemas(schemas)
    texts += [record.getMessage() for record in caplog.records]
    texts += [str(record.args) for record in caplog.records]
    assert len(texts) > 10
    for text in texts:
        for secret in forbidden(key) + forbidden(store_key)[2:] + [PASSPHRASE[::-1]]:
            assert secret not in text, (secret, text)
