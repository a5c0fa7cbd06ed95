"""``AgentSessionService`` against ADK's session-service contract, on every backend.

The first part ports the service-generic tests of ADK's own suite (google/adk-python,
``tests/unittests/sessions/test_session_service.py``: the tests that take its shared
``session_service`` fixture, and the in-memory ones whose behaviour every service owes), with
ADK's names; each runs on memory, JSONL, SQLite and PostgreSQL (with
``AGENTSESSION_TEST_POSTGRES_DSN``). ADK tests of its SQL services' stale-session check are
ported with the opposite expectation, which is this service's design: a stale session object
appends and is brought up to date. Then what is this integration's own: ids, the byte-exact
payload, the typed mirror, snapshots, two processes appending to one session, and ADK's own
``SqliteSessionService`` in that situation, for comparison.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import importlib.util
import itertools
import json
import multiprocessing
import os
import shutil
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from pydantic import Field

pytest.importorskip("google.adk")

from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
from google.adk.runners import Runner
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.adk.sessions.in_memory_session_service import InMemorySessionService
from google.adk.sessions.session import Session
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.adk.tools.tool_confirmation import ToolConfirmation
from google.genai import types

from agentsession import open_store
from agentsession.aio import AsyncSession, AsyncStore
from agentsession.children import read_session_value
from agentsession.errors import EncryptionError
from agentsession.events import COMPACTION, REWIND_REVISION, SESSION_REWIND, SessionRewind
from agentsession.events import Event as LogEvent
from agentsession.integrations.adk import (
    ADK_EVENT,
    ADK_SESSION,
    APP_STATE_KIND,
    COMPACTION_ID_PREFIX,
    REWIND_KIND,
    SNAPSHOT_KIND,
    USER_STATE_KIND,
    AgentSessionService,
    session_key,
)
from agentsession.validation import provider_errors

from .test_conformance_postgres import DSN, drop_schemas, new_schema_name, url_with_schema

NO_POSTGRES = pytest.mark.skipif(
    not DSN, reason="set AGENTSESSION_TEST_POSTGRES_DSN to run the PostgreSQL tests"
)
BACKENDS = ["memory", "jsonl", "sqlite", pytest.param("postgres", marks=NO_POSTGRES)]
SHARED_BACKENDS = ["jsonl", "sqlite", pytest.param("postgres", marks=NO_POSTGRES)]


def _url(backend: str, tmp_path: Path) -> Iterator[str]:
    if backend == "memory":
        yield "memory:"
    elif backend == "jsonl":
        yield str(tmp_path / "store")
    elif backend == "sqlite":
        yield f"sqlite:///{tmp_path}/sessions.db"
    else:
        schema = new_schema_name()
        try:
            yield url_with_schema(schema)
        finally:
            drop_schemas([schema])


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A new store of each backend."""
    yield from _url(request.param, tmp_path)


@pytest.fixture(params=SHARED_BACKENDS)
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A new store of each backend that several processes can share."""
    yield from _url(request.param, tmp_path)


@pytest.fixture
def session_service(store_url: str) -> Iterator[AgentSessionService]:
    """The service over a new store (ADK's fixture name)."""
    service = AgentSessionService(store_url)
    yield service
    asyncio.run(service.close())  # closed already by the test's loop (see asynctest)


def asynctest(fn: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """Run an ``async def`` test on its own event loop, closing the services it was given
    there: a store's native async resources (PostgreSQL's pool) belong to the loop that
    opened them."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> None:
        async def body() -> None:
            try:
                await fn(*args, **kwargs)
            finally:
                for value in kwargs.values():
                    if isinstance(value, AgentSessionService):
                        await value.close()

        asyncio.run(body())

    return run


def text(value: str, role: str = "user") -> types.Content:
    return types.Content(role=role, parts=[types.Part(text=value)])


def storage_of(service: AgentSessionService, session: Session) -> Any:
    """The agentsession session holding ``session``."""
    return service.store.sync.get(session_key(session.app_name, session.user_id, session.id))


# ---------------------------------------------------------------------------------------------
# ADK's contract (test_session_service.py), on every backend.


@asynctest
async def test_get_empty_session(session_service: AgentSessionService) -> None:
    assert not await session_service.get_session(
        app_name="my_app", user_id="test_user", session_id="123"
    )


@asynctest
async def test_create_get_session(session_service: AgentSessionService) -> None:
    session = await session_service.create_session(
        app_name="my_app", user_id="test_user", state={"key": "value"}
    )
    assert (session.app_name, session.user_id) == ("my_app", "test_user")
    assert session.id
    assert session.state == {"key": "value"}
    assert session.last_update_time <= time.time()

    got = await session_service.get_session(
        app_name="my_app", user_id="test_user", session_id=session.id
    )
    assert got == session
    await session_service.delete_session(
        app_name="my_app", user_id="test_user", session_id=session.id
    )
    assert (
        await session_service.get_session(
            app_name="my_app", user_id="test_user", session_id=session.id
        )
        is None
    )


@asynctest
async def test_create_and_list_sessions(session_service: AgentSessionService) -> None:
    ids = [f"session{i}" for i in range(5)]
    for sid in ids:
        await session_service.create_session(
            app_name="my_app", user_id="test_user", session_id=sid, state={"key": "value" + sid}
        )
    sessions = (
        await session_service.list_sessions(app_name="my_app", user_id="test_user")
    ).sessions
    assert {s.id for s in sessions} == set(ids)
    for session in sessions:
        assert session.state == {"key": "value" + session.id}
        assert session.events == []


@asynctest
async def test_list_sessions_ordered_by_last_update_time(
    session_service: AgentSessionService,
) -> None:
    for sid in ("a", "b", "c"):
        await session_service.create_session(app_name="my_app", user_id="u", session_id=sid)
    session_a = await session_service.get_session(app_name="my_app", user_id="u", session_id="a")
    assert session_a is not None
    await asyncio.sleep(0.01)
    await session_service.append_event(session_a, Event(invocation_id="inv", author="user"))
    listed = (await session_service.list_sessions(app_name="my_app", user_id="u")).sessions
    assert [s.id for s in listed] == ["b", "c", "a"]


@asynctest
async def test_list_sessions_all_users(session_service: AgentSessionService) -> None:
    for user, sid in (("user1", "session1a"), ("user1", "session1b"), ("user2", "session2a")):
        await session_service.create_session(
            app_name="my_app", user_id=user, session_id=sid, state={"key": "value" + sid[-2:]}
        )
    one = (await session_service.list_sessions(app_name="my_app", user_id="user1")).sessions
    assert {s.id: s.state for s in one} == {
        "session1a": {"key": "value1a"},
        "session1b": {"key": "value1b"},
    }
    two = (await session_service.list_sessions(app_name="my_app", user_id="user2")).sessions
    assert [(s.id, s.state) for s in two] == [("session2a", {"key": "value2a"})]
    every = (await session_service.list_sessions(app_name="my_app", user_id=None)).sessions
    assert {s.id: s.user_id for s in every} == {
        "session1a": "user1",
        "session1b": "user1",
        "session2a": "user2",
    }


@asynctest
async def test_app_state_is_shared_by_all_users_of_app(
    session_service: AgentSessionService,
) -> None:
    session1 = await session_service.create_session(
        app_name="my_app", user_id="u1", session_id="s1", state={"app:k1": "v1"}
    )
    event = Event(
        invocation_id="inv1", author="user", actions=EventActions(state_delta={"app:k2": "v2"})
    )
    await session_service.append_event(session=session1, event=event)
    session2 = await session_service.create_session(
        app_name="my_app", user_id="u2", session_id="s2"
    )
    assert session2.state == {"app:k1": "v1", "app:k2": "v2"}
    got = await session_service.get_session(app_name="my_app", user_id="u1", session_id="s1")
    assert got is not None
    assert (got.state.get("app:k1"), got.state.get("app:k2")) == ("v1", "v2")


@asynctest
async def test_user_state_is_shared_only_by_user_sessions(
    session_service: AgentSessionService,
) -> None:
    session1 = await session_service.create_session(
        app_name="my_app", user_id="u1", session_id="s1", state={"user:k1": "v1"}
    )
    event = Event(
        invocation_id="inv1", author="user", actions=EventActions(state_delta={"user:k2": "v2"})
    )
    await session_service.append_event(session=session1, event=event)
    session1b = await session_service.create_session(
        app_name="my_app", user_id="u1", session_id="s1b"
    )
    assert session1b.state == {"user:k1": "v1", "user:k2": "v2"}
    session2 = await session_service.create_session(
        app_name="my_app", user_id="u2", session_id="s2"
    )
    assert session2.state == {}


@asynctest
async def test_session_state_is_not_shared(session_service: AgentSessionService) -> None:
    session1 = await session_service.create_session(
        app_name="my_app", user_id="u1", session_id="s1", state={"sk1": "v1"}
    )
    event = Event(
        invocation_id="inv1", author="user", actions=EventActions(state_delta={"sk2": "v2"})
    )
    await session_service.append_event(session=session1, event=event)
    got = await session_service.get_session(app_name="my_app", user_id="u1", session_id="s1")
    assert got is not None
    assert (got.state.get("sk1"), got.state.get("sk2")) == ("v1", "v2")
    session1b = await session_service.create_session(
        app_name="my_app", user_id="u1", session_id="s1b"
    )
    assert session1b.state == {}


@pytest.mark.parametrize(
    ("initial", "delta", "expected"),
    [
        pytest.param(
            {"profile": {"name": "ada", "role": "admin"}},
            {"profile": {"name": "bob"}},
            {"profile": {"name": "bob"}},
            id="dict_valued_state_delta_replaces_stored_value",
        ),
        pytest.param(
            {"flag": True},
            {"flag": None},
            {"flag": None},
            id="none_valued_state_delta_is_stored_not_dropped",
        ),
        pytest.param(
            {"flag": False},
            {"new_flag": True},
            {"flag": False, "new_flag": True},
            id="boolean_state_survives_unrelated_state_delta",
        ),
    ],
)
@asynctest
async def test_session_state_delta_semantics(
    session_service: AgentSessionService,
    initial: dict[str, Any],
    delta: dict[str, Any],
    expected: dict[str, Any],
) -> None:
    session = await session_service.create_session(
        app_name="my_app", user_id="u1", session_id="s1", state=initial
    )
    event = Event(invocation_id="inv1", author="user", actions=EventActions(state_delta=delta))
    await session_service.append_event(session=session, event=event)
    reloaded = await session_service.get_session(app_name="my_app", user_id="u1", session_id="s1")
    assert reloaded is not None
    assert reloaded.state == expected
    assert session.state == expected


@asynctest
async def test_app_state_dict_valued_delta_replaces_stored_value(
    session_service: AgentSessionService,
) -> None:
    session1 = await session_service.create_session(
        app_name="my_app",
        user_id="u1",
        session_id="s1",
        state={"app:cfg": {"name": "ada", "role": "admin"}},
    )
    event = Event(
        invocation_id="inv1",
        author="user",
        actions=EventActions(state_delta={"app:cfg": {"name": "bob"}}),
    )
    await session_service.append_event(session=session1, event=event)
    session2 = await session_service.create_session(
        app_name="my_app", user_id="u2", session_id="s2"
    )
    assert session2.state.get("app:cfg") == {"name": "bob"}
    assert session1.state.get("app:cfg") == {"name": "bob"}


@asynctest
async def test_user_state_none_valued_delta_is_stored_not_dropped(
    session_service: AgentSessionService,
) -> None:
    session1 = await session_service.create_session(
        app_name="my_app", user_id="u1", session_id="s1", state={"user:pref": "dark_mode"}
    )
    event = Event(
        invocation_id="inv1", author="user", actions=EventActions(state_delta={"user:pref": None})
    )
    await session_service.append_event(session=session1, event=event)
    session1b = await session_service.create_session(
        app_name="my_app", user_id="u1", session_id="s1b"
    )
    assert "user:pref" in session1b.state and session1b.state["user:pref"] is None
    assert "user:pref" in session1.state and session1.state["user:pref"] is None


@asynctest
async def test_temp_state_is_not_persisted_in_state_or_events(
    session_service: AgentSessionService,
) -> None:
    session = await session_service.create_session(app_name="my_app", user_id="u1", session_id="s1")
    event = Event(
        invocation_id="inv1",
        author="user",
        actions=EventActions(state_delta={"temp:k1": "v1", "sk": "v2"}),
    )
    await session_service.append_event(session=session, event=event)
    # Available in the session object (the same invocation), never stored.
    assert session.state.get("temp:k1") == "v1"
    assert session.state.get("sk") == "v2"
    assert "temp:k1" not in event.actions.state_delta
    got = await session_service.get_session(app_name="my_app", user_id="u1", session_id="s1")
    assert got is not None
    assert got.state.get("sk") == "v2"
    assert "temp:k1" not in got.state
    assert "temp:k1" not in got.events[0].actions.state_delta
    assert b"temp:k1" not in b"".join(
        bytes(e.data) for e in storage_of(session_service, got).read()
    )


@asynctest
async def test_temp_state_visible_across_sequential_events(
    session_service: AgentSessionService,
) -> None:
    session = await session_service.create_session(
        app_name="my_app", user_id="u1", session_id="s_seq"
    )
    event1 = Event(
        invocation_id="inv1",
        author="agent1",
        actions=EventActions(state_delta={"temp:output": "result_from_a1"}),
    )
    await session_service.append_event(session=session, event=event1)
    assert session.state.get("temp:output") == "result_from_a1"
    assert "temp:output" not in event1.actions.state_delta


@asynctest
async def test_get_session_respects_user_id(session_service: AgentSessionService) -> None:
    session1 = await session_service.create_session(
        app_name="my_app", user_id="u1", session_id="s1"
    )
    await session_service.append_event(session1, Event(invocation_id="inv1", author="user"))
    await session_service.create_session(app_name="my_app", user_id="u2", session_id="s1")
    got = await session_service.get_session(app_name="my_app", user_id="u2", session_id="s1")
    assert got is not None
    assert got.user_id == "u2"
    assert len(got.events) == 0


@asynctest
async def test_create_session_with_existing_id_raises_error(
    session_service: AgentSessionService,
) -> None:
    await session_service.create_session(
        app_name="my_app", user_id="test_user", session_id="existing_session"
    )
    with pytest.raises(AlreadyExistsError):
        await session_service.create_session(
            app_name="my_app", user_id="test_user", session_id="existing_session"
        )


@asynctest
async def test_create_session_with_padded_duplicate_id_raises_error(
    session_service: AgentSessionService,
) -> None:
    await session_service.create_session(
        app_name="my_app", user_id="u", session_id="existing", state={"keep": "original"}
    )
    with pytest.raises(AlreadyExistsError):
        await session_service.create_session(
            app_name="my_app", user_id="u", session_id="  existing  ", state={"keep": "x"}
        )
    got = await session_service.get_session(app_name="my_app", user_id="u", session_id="existing")
    assert got is not None and got.state["keep"] == "original"


@asynctest
async def test_padded_session_id_reads_and_deletes(session_service: AgentSessionService) -> None:
    await session_service.create_session(app_name="my_app", user_id="u", session_id="  s1 ")
    got = await session_service.get_session(app_name="my_app", user_id="u", session_id=" s1  ")
    assert got is not None and got.id == "s1"
    await session_service.delete_session(app_name="my_app", user_id="u", session_id="s1 ")
    assert (
        await session_service.get_session(app_name="my_app", user_id="u", session_id="s1") is None
    )


@asynctest
async def test_create_session_with_blank_id_generates_one(
    session_service: AgentSessionService,
) -> None:
    session = await session_service.create_session(
        app_name="my_app", user_id="test_user", session_id="   "
    )
    assert session.id.strip()


@asynctest
async def test_create_session_concurrent_same_id_raises_already_exists_error(
    session_service: AgentSessionService,
) -> None:
    for i in range(5):
        sid = f"race-session-{i}"
        results = await asyncio.gather(
            session_service.create_session(app_name="my_app", user_id="user", session_id=sid),
            session_service.create_session(app_name="my_app", user_id="user", session_id=sid),
            return_exceptions=True,
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        assert len(errors) == 1 and isinstance(errors[0], AlreadyExistsError)
        assert sid in str(errors[0])
        got = await session_service.get_session(app_name="my_app", user_id="user", session_id=sid)
        assert got is not None and got.id == sid


@asynctest
async def test_append_event_bytes(session_service: AgentSessionService) -> None:
    session = await session_service.create_session(app_name="my_app", user_id="user")
    content = types.Content(
        role="user",
        parts=[types.Part.from_bytes(data=b"test_image_data", mime_type="image/png")],
    )
    grounding = types.GroundingMetadata(
        search_entry_point=types.SearchEntryPoint(sdk_blob=b"test_sdk_blob")
    )
    event = Event(
        invocation_id="invocation", author="user", content=content, grounding_metadata=grounding
    )
    await session_service.append_event(session=session, event=event)
    assert session.events[0].content == content
    got = await session_service.get_session(
        app_name="my_app", user_id="user", session_id=session.id
    )
    assert got is not None and len(got.events) == 1
    assert got.events[0].content == content
    assert got.events[0].grounding_metadata == grounding


@asynctest
async def test_append_event_complete(session_service: AgentSessionService) -> None:
    session = await session_service.create_session(app_name="my_app", user_id="user")
    event = Event(
        invocation_id="invocation",
        author="user",
        content=text("test_text"),
        turn_complete=True,
        partial=False,
        actions=EventActions(artifact_delta={"file": 0}, transfer_to_agent="agent", escalate=True),
        long_running_tool_ids={"tool1"},
        error_code="error_code",
        error_message="error_message",
        interrupted=True,
        grounding_metadata=types.GroundingMetadata(web_search_queries=["query1"]),
        usage_metadata=types.GenerateContentResponseUsageMetadata(
            prompt_token_count=1, candidates_token_count=1, total_token_count=2
        ),
        citation_metadata=types.CitationMetadata(),
        custom_metadata={"custom_key": "custom_value"},
        timestamp=1700000000.123,
        input_transcription=types.Transcription(text="input transcription", finished=True),
        output_transcription=types.Transcription(text="output transcription", finished=True),
    )
    await session_service.append_event(session=session, event=event)
    got = await session_service.get_session(
        app_name="my_app", user_id="user", session_id=session.id
    )
    assert got == session


@asynctest
async def test_append_event_with_requested_tool_confirmations(
    session_service: AgentSessionService,
) -> None:
    session = await session_service.create_session(app_name="my_app", user_id="user")
    confirmation = ToolConfirmation(
        hint="dynamic hint",
        confirmed=False,
        payload={"collection_name": "photos", "resource_id": "album_1"},
    )
    event = Event(
        invocation_id="invocation",
        author="user",
        actions=EventActions(requested_tool_confirmations={"tool_call_1": confirmation}),
    )
    await session_service.append_event(session=session, event=event)
    got = await session_service.get_session(
        app_name="my_app", user_id="user", session_id=session.id
    )
    assert got is not None and len(got.events) == 1
    back = got.events[0].actions.requested_tool_confirmations["tool_call_1"]
    assert back.hint == "dynamic hint"
    assert back.payload == {"collection_name": "photos", "resource_id": "album_1"}
    assert not back.confirmed


@asynctest
async def test_append_event_with_non_serializable_state_delta(
    session_service: AgentSessionService,
) -> None:
    session = await session_service.create_session(app_name="my_app", user_id="user")
    event = Event(
        invocation_id="invocation",
        author="user",
        actions=EventActions(state_delta={"callback": lambda: 1, "ok": 2, "user:f": len}),
    )
    await session_service.append_event(session=session, event=event)
    got = await session_service.get_session(
        app_name="my_app", user_id="user", session_id=session.id
    )
    assert got is not None and len(got.events) == 1
    assert got.state["ok"] == 2
    assert isinstance(got.state["callback"], str)
    assert isinstance(got.state["user:f"], str)


@asynctest
async def test_session_last_update_time_updates_on_event(
    session_service: AgentSessionService,
) -> None:
    session = await session_service.create_session(app_name="my_app", user_id="user")
    original = session.last_update_time
    event = Event(invocation_id="invocation", author="user", timestamp=original + 10)
    await session_service.append_event(session=session, event=event)
    assert session.last_update_time == pytest.approx(original + 10, abs=1e-6)
    got = await session_service.get_session(
        app_name="my_app", user_id="user", session_id=session.id
    )
    assert got is not None
    assert got.last_update_time == pytest.approx(original + 10, abs=1e-6)
    listed = (await session_service.list_sessions(app_name="my_app", user_id="user")).sessions
    assert listed[0].last_update_time == got.last_update_time


@asynctest
async def test_append_event_to_deleted_session_raises_session_not_found(
    session_service: AgentSessionService,
) -> None:
    session = await session_service.create_session(app_name="my_app", user_id="user")
    await session_service.delete_session(app_name="my_app", user_id="user", session_id=session.id)
    with pytest.raises(SessionNotFoundError):
        await session_service.append_event(session, Event(invocation_id="inv1", author="user"))
    # Nothing was left behind.
    assert not session_service.store.sync.exists(session_key("my_app", "user", session.id))


@asynctest
async def test_append_event_to_unknown_session_raises_session_not_found(
    session_service: AgentSessionService,
) -> None:
    session = Session(app_name="my_app", user_id="user", id="never_created")
    with pytest.raises(SessionNotFoundError):
        await session_service.append_event(session, Event(invocation_id="inv1", author="user"))
    assert (await session_service.list_sessions(app_name="my_app")).sessions == []


@asynctest
async def test_get_session_with_config(session_service: AgentSessionService) -> None:
    base = int(time.time())
    session = await session_service.create_session(app_name="my_app", user_id="user")
    for i in range(1, 6):
        await session_service.append_event(session, Event(author="user", timestamp=base + i))

    async def events(config: GetSessionConfig | None) -> list[float]:
        got = await session_service.get_session(
            app_name="my_app", user_id="user", session_id=session.id, config=config
        )
        assert got is not None
        assert got.last_update_time == base + 5  # the state and time never depend on config
        return [e.timestamp for e in got.events]

    assert len(await events(None)) == 5
    assert await events(GetSessionConfig(num_recent_events=0)) == []
    assert await events(GetSessionConfig(num_recent_events=3)) == [base + 3, base + 4, base + 5]
    assert await events(GetSessionConfig(after_timestamp=base + 4)) == [base + 4, base + 5]
    assert await events(GetSessionConfig(after_timestamp=base + 50)) == []
    both = GetSessionConfig(after_timestamp=base + 4, num_recent_events=3)
    assert await events(both) == [base + 4, base + 5]


@asynctest
async def test_partial_events_are_not_persisted(session_service: AgentSessionService) -> None:
    session = await session_service.create_session(app_name="my_app", user_id="user")
    await session_service.append_event(session, Event(author="user", partial=True))
    assert len(session.events) == 0
    got = await session_service.get_session(
        app_name="my_app", user_id="user", session_id=session.id
    )
    assert got is not None and len(got.events) == 0


@asynctest
async def test_get_user_state(session_service: AgentSessionService) -> None:
    """ADK's six get_user_state tests: empty, written by append_event, isolated between users
    and between apps, readable before a session is made, the latest write."""
    assert await session_service.get_user_state(app_name="my_app", user_id="u1") == {}
    session = await session_service.create_session(app_name="my_app", user_id="u1")
    for delta in (
        {"user:profile": {"name": "Alice"}, "session_key": 1},
        {"user:counter": 1},
        {"user:counter": 2},
    ):
        event = Event(author="system", actions=EventActions(state_delta=delta))
        await session_service.append_event(session, event)
    assert await session_service.get_user_state(app_name="my_app", user_id="u1") == {
        "profile": {"name": "Alice"},
        "counter": 2,
    }
    assert await session_service.get_user_state(app_name="my_app", user_id="u2") == {}
    assert await session_service.get_user_state(app_name="other_app", user_id="u1") == {}


@asynctest
async def test_get_session_keeps_exact_epoch_across_a_repeated_local_hour(
    session_service: AgentSessionService,
) -> None:
    epochs = [1730613600.0, 1730615400.0]
    session = await session_service.create_session(app_name="my_app", user_id="user")
    for epoch in epochs:
        await session_service.append_event(session, Event(author="user", timestamp=epoch))
    got = await session_service.get_session(
        app_name="my_app", user_id="user", session_id=session.id
    )
    assert got is not None and [e.timestamp for e in got.events] == epochs


@asynctest
async def test_delete_session_removes_only_the_targeted_users_session(
    session_service: AgentSessionService,
) -> None:
    await session_service.create_session(app_name="my_app", user_id="u1", session_id="s1")
    await session_service.create_session(app_name="my_app", user_id="u2", session_id="s1")
    await session_service.delete_session(app_name="my_app", user_id="u1", session_id="s1")
    assert (
        await session_service.get_session(app_name="my_app", user_id="u1", session_id="s1") is None
    )
    other = await session_service.get_session(app_name="my_app", user_id="u2", session_id="s1")
    assert other is not None and other.id == "s1"


@asynctest
async def test_delete_session_unknown_session_is_a_noop(
    session_service: AgentSessionService,
) -> None:
    await session_service.create_session(app_name="my_app", user_id="u1", session_id="s1")
    for app, user, sid in (
        ("my_app", "u1", "nope"),
        ("my_app", "nope", "s1"),
        ("nope", "u1", "s1"),
    ):
        await session_service.delete_session(app_name=app, user_id=user, session_id=sid)
    assert await session_service.get_session(app_name="my_app", user_id="u1", session_id="s1")


@asynctest
async def test_list_sessions_strips_events_and_merges_scoped_state(
    session_service: AgentSessionService,
) -> None:
    session = await session_service.create_session(
        app_name="my_app",
        user_id="u1",
        session_id="s1",
        state={"app:a": "av", "user:u": "uv", "sk": "sv", "temp:t": "tv"},
    )
    event = Event(
        invocation_id="inv1", author="user", actions=EventActions(state_delta={"sk2": "sv2"})
    )
    await session_service.append_event(session=session, event=event)
    [listed] = (await session_service.list_sessions(app_name="my_app", user_id="u1")).sessions
    assert listed.id == "s1"
    assert listed.events == []
    assert listed.state == {"app:a": "av", "user:u": "uv", "sk": "sv", "sk2": "sv2"}


@asynctest
async def test_list_sessions_unknown_app_or_user_returns_empty_response(
    session_service: AgentSessionService,
) -> None:
    await session_service.create_session(app_name="my_app", user_id="u1", session_id="s1")
    assert (await session_service.list_sessions(app_name="unknown_app")).sessions == []
    unknown = await session_service.list_sessions(app_name="my_app", user_id="unknown_user")
    assert unknown.sessions == []
    assert [s.id for s in (await session_service.list_sessions(app_name="my_app")).sessions] == [
        "s1"
    ]


@asynctest
async def test_append_different_events_not_deduplicated(
    session_service: AgentSessionService,
) -> None:
    session = await session_service.create_session(
        app_name="test_app", user_id="user_multi", session_id="session_multi"
    )
    e1 = Event(id="shared-event-id", invocation_id="inv_a", author="user")
    e2 = Event(id="shared-event-id", invocation_id="inv_b", author="agent")
    await session_service.append_event(session=session, event=e1)
    await session_service.append_event(session=session, event=e2)
    got = await session_service.get_session(
        app_name="test_app", user_id="user_multi", session_id="session_multi"
    )
    assert got is not None and [e.author for e in got.events] == ["user", "agent"]


# ADK's SQL services reject a stale session object (test_append_event_to_stale_session,
# test_append_event_concurrent_stale_sessions_reject_stale_writer); this service lets both
# writers land and brings the stale object up to date.


@asynctest
async def test_append_event_to_stale_session_lands_and_catches_up(
    session_service: AgentSessionService,
) -> None:
    now = time.time()
    original = await session_service.create_session(app_name="my_app", user_id="user")
    event1 = Event(
        invocation_id="inv1",
        author="user",
        timestamp=now + 1,
        actions=EventActions(state_delta={"sk1": "v1"}),
    )
    await session_service.append_event(original, event1)
    updated = await session_service.get_session(
        app_name="my_app", user_id="user", session_id=original.id
    )
    assert updated is not None
    event2 = Event(
        invocation_id="inv2",
        author="user",
        timestamp=now + 2,
        actions=EventActions(state_delta={"sk2": "v2"}),
    )
    await session_service.append_event(updated, event2)
    assert "sk2" not in original.state  # stale now
    event3 = Event(
        invocation_id="inv3",
        author="user",
        timestamp=now + 3,
        actions=EventActions(state_delta={"sk3": "v3"}),
    )
    await session_service.append_event(original, event3)
    final = await session_service.get_session(
        app_name="my_app", user_id="user", session_id=original.id
    )
    assert final is not None
    assert [e.invocation_id for e in final.events] == ["inv1", "inv2", "inv3"]
    assert {k: final.state[k] for k in ("sk1", "sk2", "sk3")} == {
        "sk1": "v1",
        "sk2": "v2",
        "sk3": "v3",
    }
    assert original == final  # the stale object was brought up to date


@asynctest
async def test_concurrent_stale_sessions_both_land(session_service: AgentSessionService) -> None:
    session = await session_service.create_session(app_name="my_app", user_id="user")
    for i in range(8):
        latest = await session_service.get_session(
            app_name="my_app", user_id="user", session_id=session.id
        )
        assert latest is not None
        copies = [latest.model_copy(deep=True), latest.model_copy(deep=True)]
        events = [
            Event(
                invocation_id=f"inv{i}-{n}",
                author="user",
                actions=EventActions(state_delta={f"sk{i}-{n}": f"v{i}-{n}", "last": n}),
            )
            for n in (1, 2)
        ]
        results = await asyncio.gather(
            *(session_service.append_event(c, e) for c, e in zip(copies, events, strict=True)),
            return_exceptions=True,
        )
        assert not [r for r in results if isinstance(r, BaseException)]
    final = await session_service.get_session(
        app_name="my_app", user_id="user", session_id=session.id
    )
    assert final is not None and len(final.events) == 16
    for i in range(8):
        assert final.state[f"sk{i}-1"] == f"v{i}-1" and final.state[f"sk{i}-2"] == f"v{i}-2"
    # A conflicting key: the last write in log order wins.
    last = [e for e in final.events if "last" in e.actions.state_delta][-1]
    assert final.state["last"] == last.actions.state_delta["last"]


@asynctest
async def test_concurrent_appends_through_one_session_object_keep_it_equal_to_the_log(
    session_service: AgentSessionService,
) -> None:
    session = await session_service.create_session(app_name="my_app", user_id="user")
    for i in range(10):
        events = [Event(invocation_id=f"inv{i}-{n}", author="user") for n in range(3)]
        await asyncio.gather(*(session_service.append_event(session, e) for e in events))
    got = await session_service.get_session(
        app_name="my_app", user_id="user", session_id=session.id
    )
    assert got is not None and len(got.events) == 30
    assert sorted(e.id for e in session.events) == sorted(e.id for e in got.events)


# ---------------------------------------------------------------------------------------------
# This integration's own behaviour.


def test_ids_are_prefixed_and_injective() -> None:
    assert session_key("my_app", "u1", "s1") == "adk:my_app:u1:s1"
    assert session_key("a:b", "c", "d") == "adk:a%3Ab:c:d"
    assert session_key("a", "b:c", "d") != session_key("a:b", "c", "d")
    assert session_key("a", "u/1", "s 1%") == "adk:a:u%2F1:s%201%25"


@asynctest
async def test_apps_whose_names_share_a_prefix_are_listed_apart(
    session_service: AgentSessionService,
) -> None:
    await session_service.create_session(app_name="app", user_id="u:1", session_id="x")
    await session_service.create_session(app_name="app:u", user_id="1", session_id="y")
    await session_service.create_session(app_name="ap", user_id="p", session_id="z")
    listed = (await session_service.list_sessions(app_name="app")).sessions
    assert [(s.user_id, s.id) for s in listed] == [("u:1", "x")]
    listed = (await session_service.list_sessions(app_name="app:u", user_id="1")).sessions
    assert [s.id for s in listed] == ["y"]


@asynctest
async def test_the_payload_is_the_events_json_byte_for_byte(
    session_service: AgentSessionService,
) -> None:
    session = await session_service.create_session(app_name="my_app", user_id="u")
    event = Event(
        invocation_id="inv",
        author="agent",
        content=text("héllo ✓", role="model"),
        actions=EventActions(state_delta={"n": 10**30, "f": 0.1 + 0.2}),
    )
    await session_service.append_event(session, event)
    stored = [e for e in storage_of(session_service, session).read() if e.type == ADK_EVENT]
    assert [bytes(e.data) for e in stored] == [event.model_dump_json(exclude_none=True).encode()]
    got = await session_service.get_session(app_name="my_app", user_id="u", session_id=session.id)
    assert got is not None and got.events == [event]
    assert got.state == {"n": 10**30, "f": 0.1 + 0.2}


@asynctest
async def test_the_mirror_gives_a_provider_valid_history(
    session_service: AgentSessionService,
) -> None:
    session = await session_service.create_session(app_name="my_app", user_id="u1")
    call = types.FunctionCall(id="c1", name="read", args={"path": "a.py"})
    slow = types.FunctionCall(id="c2", name="deploy", args={})
    events = [
        Event(invocation_id="i1", author="user", content=text("Fix the test")),
        Event(
            invocation_id="i1",
            author="coder",
            content=types.Content(
                role="model",
                parts=[
                    types.Part(text="Reading.", thought=True),
                    types.Part(text="Looking."),
                    types.Part(function_call=call),
                ],
            ),
        ),
        Event(
            invocation_id="i1",
            author="coder",
            content=types.Content(
                role="user",
                parts=[
                    types.Part(
                        function_response=types.FunctionResponse(
                            id="c1", name="read", response={"result": "assert 1 == 2"}
                        )
                    )
                ],
            ),
        ),
        Event(
            invocation_id="i1",
            author="coder",
            content=types.Content(role="model", parts=[types.Part(function_call=slow)]),
            long_running_tool_ids={"c2"},
        ),
        Event(invocation_id="i1", author="coder", actions=EventActions(state_delta={"k": 1})),
    ]
    for event in events:
        await session_service.append_event(session, event)
    log = storage_of(session_service, session)
    messages = log.messages()
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant", "tool"]
    assert messages[0].text == "Fix the test"
    assert messages[1].text == "Looking." and messages[1].tool_calls[0].id == "c1"
    assert messages[1].author == "coder"
    assert messages[2].tool_results[0].content == "assert 1 == 2"
    assert messages[4].tool_results[0].audit == {"decision": "interrupted"}  # still running
    assert provider_errors(messages) == []
    assert {e.meta.get("turn_id") for e in log.read()[1:]} == {"i1"}
    # The long-running tool answers later: its result replaces the stand-in.
    late = Event(
        invocation_id="i2",
        author="user",
        content=types.Content(
            role="user",
            parts=[
                types.Part(
                    function_response=types.FunctionResponse(
                        id="c2", name="deploy", response={"error": "denied"}
                    )
                ),
                types.Part(text="It failed?"),
            ],
        ),
    )
    await session_service.append_event(session, late)
    messages = log.messages()
    assert messages[4].tool_results[0].content == "denied"
    assert messages[4].tool_results[0].is_error
    assert messages[-1].text == "It failed?"
    assert provider_errors(messages) == []


@asynctest
async def test_without_the_mirror_only_adk_events_are_written(store_url: str) -> None:
    async with AgentSessionService(store_url, mirror_messages=False) as service:
        session = await service.create_session(app_name="my_app", user_id="u")
        await service.append_event(
            session, Event(invocation_id="i", author="user", content=text("hi"))
        )
        log = storage_of(service, session)
        assert [e.type for e in log.read()] == [ADK_SESSION, ADK_EVENT]
        assert log.messages() == []


@pytest.fixture
def read_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int | None]]:
    """Every ``BaseSession.read(after, limit)`` call made meanwhile."""
    from agentsession.session import BaseSession

    calls: list[tuple[int, int | None]] = []
    original = BaseSession.read

    def read(self: BaseSession, after: int = 0, limit: int | None = None) -> Any:
        calls.append((after, limit))
        return original(self, after, limit)

    monkeypatch.setattr(BaseSession, "read", read)
    return calls


@asynctest
async def test_config_and_listing_read_only_the_end_of_a_long_log(
    session_service: AgentSessionService, read_calls: list[tuple[int, int | None]]
) -> None:
    session = await session_service.create_session(app_name="my_app", user_id="u", state={"n": 0})
    for i in range(1, 301):
        delta = {"n": i} if i % 7 == 0 else {}
        event = Event(
            invocation_id=f"i{i}",
            author="user",
            content=text(f"m{i}"),
            actions=EventActions(state_delta=delta),
        )
        await session_service.append_event(session, event)
    # A JSONL store's catalog index catches up with the appends at its first listing (reading
    # them once); from then on a listing reads only the end of a log.
    await session_service.list_sessions(app_name="my_app")
    read_calls.clear()
    got = await session_service.get_session(
        app_name="my_app",
        user_id="u",
        session_id=session.id,
        config=GetSessionConfig(num_recent_events=3),
    )
    assert got is not None
    assert [e.invocation_id for e in got.events] == ["i298", "i299", "i300"]
    assert got.state == {"n": 294}
    listed = (await session_service.list_sessions(app_name="my_app")).sessions
    assert listed[0].state == {"n": 294}
    assert listed[0].last_update_time == session.last_update_time
    assert read_calls and min(after for after, _ in read_calls) > 600 - 2 * 64 - 8


@asynctest
async def test_a_snapshot_of_a_deleted_log_is_ignored(
    session_service: AgentSessionService,
) -> None:
    session = await session_service.create_session(
        app_name="my_app", user_id="u", session_id="s", state={"life": 1}
    )
    for i in range(70):
        await session_service.append_event(
            session, Event(author="user", actions=EventActions(state_delta={"i": i}))
        )
    # Deleted behind the service's back (agentsession rm), leaving its snapshot; made again.
    session_service.store.sync.delete(session_key("my_app", "u", "s"))
    again = await session_service.create_session(
        app_name="my_app", user_id="u", session_id="s", state={"life": 2}
    )
    for j in range(70):  # long enough to hold the seq the old snapshot names
        await session_service.append_event(
            again, Event(author="user", actions=EventActions(state_delta={"j": j}))
        )
    config = GetSessionConfig(num_recent_events=1)
    got = await session_service.get_session(
        app_name="my_app", user_id="u", session_id="s", config=config
    )
    assert got is not None and got.state == {"life": 2, "j": 69}
    listed = (await session_service.list_sessions(app_name="my_app")).sessions
    assert [s.state for s in listed] == [{"life": 2, "j": 69}]


@asynctest
async def test_store_objects_are_used_and_left_open(tmp_path: Path) -> None:
    sync = open_store(tmp_path / "store")
    async_store = AsyncStore(open_store(tmp_path / "other"))
    for target in (sync, async_store):
        async with AgentSessionService(target) as service:
            session = await service.create_session(app_name="a", user_id="u", session_id="s")
            await service.append_event(session, Event(author="user", content=text("hi")))
    assert sync.get(session_key("a", "u", "s")).latest_seq == 3
    assert (await async_store.get(session_key("a", "u", "s"))).sync.latest_seq == 3
    sync.close()
    await async_store.close()


# ---------------------------------------------------------------------------------------------
# Encrypted stores: the state kept beside the log is sealed, and goes with its session.

SECRET = "zq7AdkSecret0x"
"""In every state value written; never in a stored meta value of an encrypted store."""


async def _marked_session(service: AgentSessionService, session_id: str, events: int) -> Session:
    state = {"app:a": f"app {SECRET}", "user:u": f"user {SECRET}", "s": f"session {SECRET}"}
    session = await service.create_session(
        app_name="my_app", user_id="u1", session_id=session_id, state=state
    )
    for i in range(events):
        delta = {"s": f"s{i} {SECRET}", "user:u": f"u{i} {SECRET}", "app:a": f"a{i} {SECRET}"}
        await service.append_event(
            session, Event(author="user", actions=EventActions(state_delta=delta))
        )
    return session


def _stored(service: AgentSessionService, session_id: str = "s") -> dict[str, str | None]:
    """The raw stored values of the app, user and snapshot entries."""
    sync = service.store.sync
    return {
        APP_STATE_KIND: sync._meta_get(APP_STATE_KIND, "app:my_app"),
        USER_STATE_KIND: sync._meta_get(USER_STATE_KIND, "my_app:u1"),
        SNAPSHOT_KIND: sync._meta_get(SNAPSHOT_KIND, session_key("my_app", "u1", session_id)),
    }


@asynctest
async def test_state_beside_the_log_is_sealed_in_an_encrypted_store(shared_url: str) -> None:
    async with AgentSessionService(shared_url, passphrase="pw") as service:
        await _marked_session(service, "s", 70)
        stored = _stored(service)
        for kind, raw in stored.items():
            assert raw is not None and raw.startswith('{"sealed":1,'), kind
            assert SECRET not in raw, kind
        got = await service.get_session(
            app_name="my_app", user_id="u1", session_id="s", config=GetSessionConfig()
        )
        assert got is not None
        want = {"s": f"s69 {SECRET}", "app:a": f"a69 {SECRET}", "user:u": f"u69 {SECRET}"}
        assert got.state == want
        [listed] = (await service.list_sessions(app_name="my_app")).sessions
        assert listed.state == want
        assert await service.get_user_state(app_name="my_app", user_id="u1") == {
            "u": f"u69 {SECRET}"
        }
    # Another process (a new store object) opens them with the passphrase.
    async with AgentSessionService(shared_url, passphrase="pw") as again:
        got = await again.get_session(app_name="my_app", user_id="u1", session_id="s")
        assert got is not None and got.state == want


@asynctest
async def test_shred_and_delete_take_the_session_state_snapshot_with_the_session(
    shared_url: str,
) -> None:
    async with AgentSessionService(shared_url, passphrase="pw") as service:
        await _marked_session(service, "gone", 70)
        await _marked_session(service, "shredded", 70)
        sync = service.store.sync
        assert _stored(service, "gone")[SNAPSHOT_KIND] is not None
        assert _stored(service, "shredded")[SNAPSHOT_KIND] is not None
        sync.delete(session_key("my_app", "u1", "gone"))  # agentsession rm: not the service
        assert _stored(service, "gone")[SNAPSHOT_KIND] is None
        assert sync.shred(session_key("my_app", "u1", "shredded")) == [
            session_key("my_app", "u1", "shredded")
        ]
        assert _stored(service, "shredded")[SNAPSHOT_KIND] is None
        # The shared state is the app's and the user's, not the session's: it stays, sealed
        # under the store key (docs/security.md says why).
        assert await service.get_user_state(app_name="my_app", user_id="u1") == {
            "u": f"u69 {SECRET}"
        }


@asynctest
async def test_plaintext_state_written_before_sealing_still_loads(shared_url: str) -> None:
    async with AgentSessionService(shared_url, passphrase="pw") as service:
        await _marked_session(service, "s", 70)
        sync = service.store.sync
        key = session_key("my_app", "u1", "s")
        snapshot = json.loads(read_session_value(sync, SNAPSHOT_KIND, key) or "")
        snapshot["state"] = {"from": "the old snapshot"}
        # What the service wrote before it sealed them: plain JSON objects.
        sync._meta_set(APP_STATE_KIND, "app:my_app", '{"a":"old app"}')
        sync._meta_set(USER_STATE_KIND, "my_app:u1", '{"u":"old user","sealed":1}')
        sync._meta_set(SNAPSHOT_KIND, key, json.dumps(snapshot))
    async with AgentSessionService(shared_url, passphrase="pw") as service:
        got = await service.get_session(
            app_name="my_app",
            user_id="u1",
            session_id="s",
            config=GetSessionConfig(num_recent_events=1),
        )
        assert got is not None
        # A snapshot in plaintext is not believed in an encrypted store (it is a cache): the
        # state is folded from the log; the shared state written in plaintext still loads.
        old = {"app:a": "old app", "user:u": "old user"}
        assert got.state == {**old, "s": f"s69 {SECRET}", "user:sealed": 1}
        assert await service.get_user_state(app_name="my_app", user_id="u1") == {
            "u": "old user",
            "sealed": 1,
        }
        # The next change writes the entry sealed, the old keys kept.
        await service.append_event(
            got, Event(author="user", actions=EventActions(state_delta={"user:v": "new"}))
        )
        raw = service.store.sync._meta_get(USER_STATE_KIND, "my_app:u1")
        assert raw is not None and raw.startswith('{"sealed":1,"box":') and "old" not in raw
        assert await service.get_user_state(app_name="my_app", user_id="u1") == {
            "u": "old user",
            "sealed": 1,
            "v": "new",
        }


GOLDEN = Path(__file__).parent / "golden" / "adk_encrypted"


@asynctest
async def test_the_golden_store_with_plaintext_adk_state_still_loads(tmp_path: Path) -> None:
    """An encrypted store whose ADK state an earlier version kept in plaintext
    (tests/golden/adk_encrypted/make.py): it reads, and each entry is sealed when it next
    changes."""
    directory = tmp_path / "store"
    shutil.copytree(GOLDEN / "jsonl", directory)
    key = bytes(range(32))
    want = {
        "topic": "golden",
        "n": 69,
        "app:tier": "gold",
        "app:last": 69,
        "user:lang": "en",
        "user:seen": 69,
    }
    async with AgentSessionService(str(directory), key=key) as service:
        for config in (None, GetSessionConfig(num_recent_events=2)):
            got = await service.get_session(
                app_name="golden_app", user_id="ada", session_id="s1", config=config
            )
            assert got is not None and got.state == want
        [listed] = (await service.list_sessions(app_name="golden_app")).sessions
        assert listed.state == want
        assert await service.get_user_state(app_name="golden_app", user_id="ada") == {
            "lang": "en",
            "seen": 69,
        }
        sync = service.store.sync
        assert sync._meta_get(USER_STATE_KIND, "golden_app:ada") == '{"lang":"en","seen":69}'
        delta = {"user:seen": 70, "app:last": 70}
        event = Event(author="user", actions=EventActions(state_delta=delta))
        await service.append_event(got, event)
        shared = ((USER_STATE_KIND, "golden_app:ada"), (APP_STATE_KIND, "app:golden_app"))
        for kind, entry in shared:
            raw = sync._meta_get(kind, entry)
            assert raw is not None and raw.startswith('{"sealed":1,"box":"'), kind
        got = await service.get_session(app_name="golden_app", user_id="ada", session_id="s1")
        assert got is not None
        assert got.state == {**want, "app:last": 70, "user:seen": 70}
        # The plaintext snapshot goes with a shred of its session.
        sid = session_key("golden_app", "ada", "s1")
        assert sync._meta_get(SNAPSHOT_KIND, sid) is not None
        sync.shred(sid)
        assert sync._meta_get(SNAPSHOT_KIND, sid) is None


@asynctest
async def test_sealed_shared_state_moved_to_another_user_does_not_open(shared_url: str) -> None:
    async with AgentSessionService(shared_url, passphrase="pw") as service:
        await _marked_session(service, "s", 1)
        sync = service.store.sync
        sync._meta_set(USER_STATE_KIND, "my_app:u2", sync._meta_get(USER_STATE_KIND, "my_app:u1"))
        with pytest.raises(EncryptionError, match="does not open") as caught:
            await service.get_user_state(app_name="my_app", user_id="u2")
        assert SECRET not in str(caught.value) and "pw" not in str(caught.value)


# ---------------------------------------------------------------------------------------------
# Two processes appending to one session.

APP, USER, PER_PROCESS = "race_app", "racer", 200


def _append_in_process(
    kind: str, url: str, session_id: str, tag: str, count: int, ready_dir: str
) -> tuple[int, int, list[str]]:
    """Append ``count`` events to a session from a new process, after both processes have
    loaded it; returns (acknowledged, errors, the ids of the session object's events)."""
    return asyncio.run(_append_all(kind, url, session_id, tag, count, ready_dir))


async def _append_all(
    kind: str, url: str, session_id: str, tag: str, count: int, ready_dir: str
) -> tuple[int, int, list[str]]:
    service: Any = AgentSessionService(url) if kind == "agentsession" else SqliteSessionService(url)
    session = await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
    Path(ready_dir, tag).touch()
    deadline = time.monotonic() + 60
    while len(os.listdir(ready_dir)) < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.001)
    acknowledged = errors = 0
    for i in range(count):
        event = Event(
            invocation_id=f"{tag}-{i}",
            author="user",
            content=text(f"{tag} {i}"),
            actions=EventActions(state_delta={tag: i, "last_writer": tag}),
        )
        try:
            await service.append_event(session, event)
            acknowledged += 1
        except Exception:
            errors += 1
    if kind == "agentsession":
        await service.close()
    return acknowledged, errors, [e.invocation_id for e in session.events]


@pytest.fixture(scope="module")
def two_processes() -> Iterator[concurrent.futures.ProcessPoolExecutor]:
    """Two worker processes, started once for the module (spawned: no state inherited)."""
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=context) as pool:
        yield pool


def _race(
    pool: concurrent.futures.ProcessPoolExecutor, kind: str, url: str, session_id: str, tmp: Path
) -> list[tuple[int, int, list[str]]]:
    ready = tmp / f"ready-{kind}"
    ready.mkdir()
    futures = [
        pool.submit(_append_in_process, kind, url, session_id, tag, PER_PROCESS, str(ready))
        for tag in ("a", "b")
    ]
    return [f.result(timeout=240) for f in futures]


@pytest.mark.slow
def test_two_processes_append_to_one_session_and_lose_nothing(
    shared_url: str, tmp_path: Path, two_processes: concurrent.futures.ProcessPoolExecutor
) -> None:
    service = AgentSessionService(shared_url)
    created = asyncio.run(service.create_session(app_name=APP, user_id=USER))
    results = _race(two_processes, "agentsession", shared_url, created.id, tmp_path)
    assert [(ack, errors) for ack, errors, _ in results] == [(PER_PROCESS, 0)] * 2
    final = asyncio.run(service.get_session(app_name=APP, user_id=USER, session_id=created.id))
    assert final is not None
    ids = [e.invocation_id for e in final.events]
    assert len(ids) == 2 * PER_PROCESS  # nothing lost, nothing twice
    for tag in ("a", "b"):
        assert [i for i in ids if i.startswith(tag)] == [f"{tag}-{n}" for n in range(PER_PROCESS)]
        assert final.state[tag] == PER_PROCESS - 1
    assert final.state["last_writer"] == ids[-1][0]  # the last in log order wins
    for _, _, seen in results:  # each process's object was kept equal to the log
        assert seen == ids[: len(seen)]
    log = service.store.sync.get(session_key(APP, USER, created.id))
    assert len(log.messages()) == 2 * PER_PROCESS
    asyncio.run(service.close())


@pytest.mark.slow
def test_adks_sqlite_service_fails_with_two_processes(
    tmp_path: Path, two_processes: concurrent.futures.ProcessPoolExecutor
) -> None:
    """The comparison: ADK's own SqliteSessionService (its DatabaseSessionService needs
    SQLAlchemy, not installed here) in the same situation rejects the appends of whichever
    process's session object is older than storage (StaleSessionError)."""
    path = str(tmp_path / "adk.db")
    created = asyncio.run(SqliteSessionService(path).create_session(app_name=APP, user_id=USER))
    results = _race(two_processes, "adk-sqlite", path, created.id, tmp_path)
    final = asyncio.run(
        SqliteSessionService(path).get_session(app_name=APP, user_id=USER, session_id=created.id)
    )
    assert final is not None
    errors = sum(e for _, e, _ in results)
    acknowledged = sum(a for a, _, _ in results)
    assert errors > 0
    assert len(final.events) == acknowledged  # what it acknowledged it kept
    assert len(final.events) < 2 * PER_PROCESS


# ---------------------------------------------------------------------------------------------
# The example.


def test_the_example_runs_an_adk_runner_over_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = Path(__file__).parent.parent / "examples" / "adk_example.py"
    spec = importlib.util.spec_from_file_location("adk_example", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    asyncio.run(example.main(str(tmp_path)))
    out = capsys.readouterr().out
    assert "agent: The weather: sunny in Paris." in out
    assert "agent: The weather: sunny in Oslo." in out
    assert "'user:last_city': 'Oslo'" in out
    store = open_store(tmp_path)
    [info] = store.list(prefix="adk:weather_app:")
    messages = store.get(info.id).messages()
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"] * 2
    assert provider_errors(messages) == []
    store.close()


# ---------------------------------------------------------------------------------------------
# Compaction: a marker becomes ADK's own compaction event, which the runner's content builder
# honours.


class RecordingModel(BaseLlm):
    """A model that records the contents of every request: asked about a city, it calls
    ``weather``, then answers with the tool's result."""

    model: str = "recording"
    sent: list[list[types.Content]] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.sent.append([c.model_copy(deep=True) for c in llm_request.contents])
        parts = llm_request.contents[-1].parts or []
        answered = [p.function_response for p in parts if p.function_response is not None]
        if answered:
            reply = types.Part(text=f"The weather: {(answered[0].response or {})['result']}.")
        else:
            city = " ".join(p.text or "" for p in parts).rstrip("?").split()[-1]
            call = types.FunctionCall(name="weather", args={"city": city})
            reply = types.Part(function_call=call)
        yield LlmResponse(content=types.Content(role="model", parts=[reply]))


def weather(city: str) -> dict[str, str]:
    """The weather in ``city``."""
    return {"result": f"sunny in {city}"}


def _texts(contents: list[types.Content]) -> list[str]:
    """Each part of ``contents`` as ``role: what it holds`` (text, a call or a response)."""
    out = []
    for content in contents:
        for part in content.parts or []:
            if part.function_call is not None:
                what = f"call {part.function_call.args}"
            elif part.function_response is not None:
                what = f"response {part.function_response.response}"
            else:
                what = part.text or ""
            out.append(f"{content.role}: {what}")
    return out


async def _ask(
    runner: Runner, session_id: str, question: str, config: GetSessionConfig | None = None
) -> None:
    """One turn of the runner (reading the session with ``config``)."""
    message = types.Content(role="user", parts=[types.Part(text=question)])
    async for _ in runner.run_async(
        user_id="ada",
        session_id=session_id,
        new_message=message,
        run_config=RunConfig(get_session_config=config),
    ):
        pass


def _weather_runner(service: AgentSessionService) -> Runner:
    """A runner of app ``app`` over ``service`` whose model records its requests."""
    agent = LlmAgent(name="helper", model=RecordingModel(), tools=[weather])
    return Runner(agent=agent, app_name="app", session_service=service)


async def _three_weather_turns(service: AgentSessionService) -> tuple[Runner, Session]:
    """A runner over ``service`` whose model records its requests, and a session with three
    turns (a question, a tool call, its response, an answer: four contents each)."""
    runner = _weather_runner(service)
    session = await service.create_session(app_name="app", user_id="ada")
    for city in ("Paris", "Oslo", "Rome"):
        await _ask(runner, session.id, f"Weather in {city}?")
    return runner, session


def _sent(runner: Runner) -> list[list[types.Content]]:
    model = runner.agent.model  # type: ignore[attr-defined]
    assert isinstance(model, RecordingModel)
    return model.sent


@pytest.mark.parametrize("config", [None, GetSessionConfig(num_recent_events=100)])
@asynctest
async def test_a_compacted_session_sends_the_summary_and_the_kept_turn_to_the_model(
    shared_url: str, config: GetSessionConfig | None
) -> None:
    async with AgentSessionService(shared_url) as service:
        runner, session = await _three_weather_turns(service)
        assert len(_sent(runner)[-1]) == 11  # 3 turns of 4 contents, less the last answer

        log = storage_of(service, session)
        assert log.compact("Ada asked about Paris and Oslo.", keep_turns=1) is not None
        _sent(runner).clear()
        await _ask(runner, session.id, "Weather in Bern?", config)
        assert _texts(_sent(runner)[0]) == [
            "model: Ada asked about Paris and Oslo.",
            "user: Weather in Rome?",
            "model: call {'city': 'Rome'}",
            "user: response {'result': 'sunny in Rome'}",
            "model: The weather: sunny in Rome.",
            "user: Weather in Bern?",
        ]
        # Derived on read: the log holds no ADK compaction event.
        stored = [e for e in storage_of(service, session).read() if e.type == ADK_EVENT]
        assert not any(b"compaction" in bytes(e.data) for e in stored)
        got = await service.get_session(app_name="app", user_id="ada", session_id=session.id)
        assert got is not None
        [derived] = [e for e in got.events if e.actions.compaction is not None]
        assert derived.id.startswith(COMPACTION_ID_PREFIX)


@asynctest
async def test_a_prune_without_a_summary_leaves_the_dropped_turns_out_of_the_request(
    store_url: str,
) -> None:
    async with AgentSessionService(store_url) as service:
        runner, session = await _three_weather_turns(service)
        assert storage_of(service, session).prune(4) is not None  # the last turn fits
        _sent(runner).clear()
        await _ask(runner, session.id, "Weather in Bern?")
        # No empty summary turn: ADK would send a compaction's empty content as one.
        assert _texts(_sent(runner)[0]) == [
            "user: Weather in Rome?",
            "model: call {'city': 'Rome'}",
            "user: response {'result': 'sunny in Rome'}",
            "model: The weather: sunny in Rome.",
            "user: Weather in Bern?",
        ]
        assert all(content.parts for content in _sent(runner)[0])


@asynctest
async def test_a_second_compaction_replaces_the_first_summary(store_url: str) -> None:
    async with AgentSessionService(store_url) as service:
        runner, session = await _three_weather_turns(service)
        log = storage_of(service, session)
        assert log.compact("Paris.", keep_turns=2) is not None
        await _ask(runner, session.id, "Weather in Bern?")
        assert log.compact("Paris, Oslo and Rome.", keep_turns=1) is not None
        _sent(runner).clear()
        await _ask(runner, session.id, "Weather in Kyiv?")
        assert _texts(_sent(runner)[0]) == [
            "model: Paris, Oslo and Rome.",
            "user: Weather in Bern?",
            "model: call {'city': 'Bern'}",
            "user: response {'result': 'sunny in Bern'}",
            "model: The weather: sunny in Bern.",
            "user: Weather in Kyiv?",
        ]


@asynctest
async def test_a_compaction_of_one_agents_history_leaves_adks_request_whole(
    store_url: str,
) -> None:
    async with AgentSessionService(store_url) as service:
        runner, session = await _three_weather_turns(service)
        log = storage_of(service, session)
        assert log.compact("Helper's turns.", keep_turns=1, agent="helper") is not None
        _sent(runner).clear()
        await _ask(runner, session.id, "Weather in Bern?")
        assert len(_sent(runner)[0]) == 13  # the three turns and the question: nothing cut
        assert "Helper's turns." not in _texts(_sent(runner)[0])


def test_a_summarised_range_never_hides_a_kept_event_when_the_clock_went_back() -> None:
    from agentsession.events import Compaction
    from agentsession.events import Event as LogEvent
    from agentsession.integrations.adk import _with_compactions  # the pure derivation
    from agentsession.messages import Message

    marker = Compaction(summary=Message.user("Earlier."), first_kept_seq=3)
    events = [
        LogEvent(seq=1, type=ADK_EVENT, data=msgspec.Raw(b"{}")),
        LogEvent(seq=2, type=ADK_EVENT, data=msgspec.Raw(b"{}")),
        LogEvent(seq=3, type=ADK_EVENT, data=msgspec.Raw(b"{}")),
        LogEvent(seq=4, type=COMPACTION, data=msgspec.Raw(msgspec.json.encode(marker))),
    ]
    # The kept event (seq 3) was stamped before the second summarised one (a clock went back).
    parsed = {
        1: Event(author="user", timestamp=10.0, content=text("one")),
        2: Event(author="user", timestamp=30.0, content=text("two")),
        3: Event(author="user", timestamp=20.0, content=text("three")),
    }
    out = _with_compactions(events, parsed)
    compaction = out[-1].actions.compaction
    assert compaction is not None
    assert compaction.start_timestamp == 10.0
    assert compaction.end_timestamp < 20.0  # seq 3 stays in the request; seq 2 is sent too


# ---------------------------------------------------------------------------------------------
# ADK's rewind (Runner.rewind_async): stored as ADK stores it, and recorded as a rewind marker
# so that the derived history leaves the rewound invocations out as ADK's readers do.


def _repeatable() -> None:
    """Make ADK's ids and clock repeatable in the running context, so two services driven
    through the same steps are given the same events."""
    ids = itertools.count(1)
    clock = itertools.count(1)
    platform_uuid.set_id_provider(lambda: f"id-{next(ids)}")
    platform_time.set_time_provider(lambda: 1_700_000_000.0 + next(clock))


async def _ask_city(runner: Runner, city: str) -> None:
    """One turn of ``runner`` in session ``s``: a question about ``city``, whose user event
    also sets session state."""
    message = types.Content(role="user", parts=[types.Part(text=f"Weather in {city}?")])
    delta = {"city": city, f"asked:{city}": True}
    async for _ in runner.run_async(
        user_id="ada", session_id="s", new_message=message, state_delta=delta
    ):
        pass


def _invocations(session: Session) -> list[str]:
    """The invocation ids of ``session``'s events, in order of their first event."""
    return list(dict.fromkeys(e.invocation_id for e in session.events))


async def _rewinding(service: BaseSessionService) -> tuple[Runner, list[Session]]:
    """Three turns (Paris, Oslo, Rome), ADK's rewind before Oslo's, a turn about Bern, then a
    rewind before Rome's (rewound already: ADK's readers then keep Paris and Oslo), all
    through ADK's ``Runner`` over ``service``, with repeatable ids and clock; the runner and
    the session as ``get_session`` returned it after each rewind and at the end."""
    _repeatable()
    runner = _weather_runner(service)
    await service.create_session(app_name="app", user_id="ada", session_id="s")
    for city in ("Paris", "Oslo", "Rome"):
        await _ask_city(runner, city)
    seen: list[Session] = []

    async def rewind(before: int) -> None:
        got = await service.get_session(app_name="app", user_id="ada", session_id="s")
        assert got is not None
        invocation = _invocations(got)[before]
        await runner.rewind_async(
            user_id="ada", session_id="s", rewind_before_invocation_id=invocation
        )
        after = await service.get_session(app_name="app", user_id="ada", session_id="s")
        assert after is not None
        seen.append(after)

    await rewind(1)  # before Oslo
    await _ask_city(runner, "Bern")
    await rewind(2)  # before Rome
    await _ask_city(runner, "Kyiv")
    final = await service.get_session(app_name="app", user_id="ada", session_id="s")
    assert final is not None
    seen.append(final)
    return runner, seen


def _markers(log: Any) -> list[tuple[int, SessionRewind, LogEvent]]:
    """The ``session/rewind`` markers of ``log``: seq, payload, event."""
    return [(e.seq, e.decode(SessionRewind), e) for e in log.read() if e.type == SESSION_REWIND]


def _first_seq(log: Any, invocation: str) -> int:
    """The seq of the first ``adk/event`` of ``invocation`` in ``log``."""
    return next(
        e.seq for e in log.read() if e.type == ADK_EVENT and e.meta.get("turn_id") == invocation
    )


@asynctest
async def test_adks_rewind_reads_back_as_adks_own_service_and_leaves_the_derived_history(
    session_service: AgentSessionService,
) -> None:
    reference = InMemorySessionService()  # type: ignore[no-untyped-call]
    ref_runner, expected = await _rewinding(reference)
    runner, got = await _rewinding(session_service)
    # ADK reads the session back as its own service gives it: every event (the rewound ones
    # and the rewind events with their reversing state deltas), the same state.
    assert [s.events for s in got] == [s.events for s in expected]
    assert [s.state for s in got] == [s.state for s in expected]
    # (ADK's reversing delta sets a key the rewind took back to None.)
    assert got[-1].state == {
        "city": "Kyiv",
        "asked:Paris": True,
        "asked:Oslo": True,
        "asked:Rome": None,
        "asked:Bern": None,
        "asked:Kyiv": True,
    }
    # ... and its runner sends the model the same requests.
    assert _sent(runner) == _sent(ref_runner)
    assert _texts(_sent(runner)[-1]) == [
        "user: Weather in Paris?",
        "model: call {'city': 'Paris'}",
        "user: response {'result': 'sunny in Paris'}",
        "model: The weather: sunny in Paris.",
        "user: Weather in Oslo?",
        "model: call {'city': 'Oslo'}",
        "user: response {'result': 'sunny in Oslo'}",
        "model: The weather: sunny in Oslo.",
        "user: Weather in Kyiv?",
        "model: call {'city': 'Kyiv'}",
        "user: response {'result': 'sunny in Kyiv'}",
    ]

    # The derived history leaves the rewound invocations out, as ADK's readers do.
    log = storage_of(session_service, got[-1])
    messages = log.messages()
    assert [m.text for m in messages if m.role == "user"] == [
        "Weather in Paris?",
        "Weather in Oslo?",
        "Weather in Kyiv?",
    ]
    assert not any("Rome" in m.text or "Bern" in m.text for m in messages)
    assert provider_errors(messages) == []

    # One marker per rewind, right after the stored rewind event, to the seq before the first
    # event of the invocation rewound.
    paris, oslo, rome = _invocations(got[0])[:3]
    rewinds = [e for e in got[-1].events if e.actions.rewind_before_invocation_id]
    assert [e.actions.rewind_before_invocation_id for e in rewinds] == [oslo, rome]
    markers = _markers(log)
    assert [(m.kind, m.to_seq, m.min_revision) for _, m, _ in markers] == [
        (REWIND_KIND, _first_seq(log, oslo) - 1, REWIND_REVISION),
        (REWIND_KIND, _first_seq(log, rome) - 1, REWIND_REVISION),
    ]
    events = {e.seq: e for e in log.read()}
    for (seq, marker, event), rewind in zip(markers, rewinds, strict=True):
        stored = events[seq - 1]
        assert stored.type == ADK_EVENT and stored.meta["adk"] == rewind.id
        assert event.meta == {"turn_id": rewind.invocation_id}
        assert marker.kind == "adk.rewind"
    assert paris in {e.meta.get("turn_id") for e in log.read()}


@asynctest
async def test_a_rewind_before_an_unknown_invocation_writes_no_marker(
    session_service: AgentSessionService,
) -> None:
    reference = InMemorySessionService()  # type: ignore[no-untyped-call]
    results = []
    for service in (reference, session_service):
        _repeatable()
        session = await service.create_session(app_name="app", user_id="ada", session_id="s")
        await service.append_event(
            session, Event(invocation_id="i1", author="user", content=text("Hello"))
        )
        unknown = EventActions(rewind_before_invocation_id="nowhere", state_delta={"k": 1})
        await service.append_event(
            session, Event(invocation_id="i2", author="user", actions=unknown)
        )
        results.append(await service.get_session(app_name="app", user_id="ada", session_id="s"))
    expected, got = results
    assert expected is not None and got is not None
    assert (got.events, got.state) == (expected.events, expected.state)
    log = storage_of(session_service, got)
    assert _markers(log) == []
    assert [m.text for m in log.messages()] == ["Hello"]


@asynctest
async def test_a_rewind_back_past_the_latest_compaction_writes_no_marker(
    session_service: AgentSessionService,
) -> None:
    runner = _weather_runner(session_service)
    await session_service.create_session(app_name="app", user_id="ada", session_id="s")
    for city in ("Paris", "Oslo", "Rome"):
        await _ask_city(runner, city)
    log = storage_of(session_service, await _get(session_service))
    compacted = log.compact("Ada asked about Paris and Oslo.", keep_turns=1)
    assert compacted is not None
    before = [m.text for m in log.messages()]
    # Rome's turn was kept, but it is before the marker: a rewind goes back no further.
    rome = _invocations(await _get(session_service))[2]
    await runner.rewind_async(user_id="ada", session_id="s", rewind_before_invocation_id=rome)
    assert _markers(log) == []
    assert [m.text for m in log.messages()] == before
    # The rewind event is stored all the same (ADK reads it back and honours it).
    got = await _get(session_service)
    assert [e.actions.rewind_before_invocation_id for e in got.events][-1] == rome
    # An invocation after the marker can be rewound.
    await _ask_city(runner, "Bern")
    bern = _invocations(await _get(session_service))[-1]
    await runner.rewind_async(user_id="ada", session_id="s", rewind_before_invocation_id=bern)
    [(_, marker, _)] = _markers(log)
    assert marker.to_seq == _first_seq(log, bern) - 1 >= compacted
    assert [m.text for m in log.messages()] == before
    assert not any("Bern" in m.text for m in log.messages())


@asynctest
async def test_a_compaction_appended_while_a_rewind_is_planned_is_not_gone_back_past(
    session_service: AgentSessionService, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = _weather_runner(session_service)
    await session_service.create_session(app_name="app", user_id="ada", session_id="s")
    for city in ("Paris", "Oslo"):
        await _ask_city(runner, city)
    log = storage_of(session_service, await _get(session_service))
    oslo = _invocations(await _get(session_service))[1]
    tries: list[int | None] = []
    append_many = AsyncSession.append_many

    async def another_writer_first(
        self: AsyncSession, events: Any, *, expect_seq: int | None = None
    ) -> list[int]:
        tries.append(expect_seq)
        if len(tries) == 1:  # another writer compacts between the plan and the write
            assert log.compact("Paris.", keep_turns=1) is not None
        return await append_many(self, events, expect_seq=expect_seq)

    monkeypatch.setattr(AsyncSession, "append_many", another_writer_first)
    await runner.rewind_async(user_id="ada", session_id="s", rewind_before_invocation_id=oslo)
    monkeypatch.undo()
    assert len(tries) == 2 and tries[0] is not None and tries[1] == tries[0] + 1
    assert _markers(log) == []  # planned again: the marker would go back past the compaction
    got = await _get(session_service)
    assert got.events[-1].actions.rewind_before_invocation_id == oslo
    assert [e.type for e in log.read()][-2:] == [COMPACTION, ADK_EVENT]


async def _get(service: AgentSessionService) -> Session:
    got = await service.get_session(app_name="app", user_id="ada", session_id="s")
    assert got is not None
    return got


def test_adks_own_compaction_becomes_a_marker_as_the_runner_appends_it(tmp_path: Path) -> None:
    """ADK's runner with an ``EventsCompactionConfig`` appends its compaction event through the
    service: the same write ends with a ``session/compaction`` marker, so ``messages()`` shows
    ADK's summary in place of the invocations it compacted, and ADK still reads its own
    compaction event once."""
    from google.adk.runners import Runner

    import agentsession as ags
    from agentsession.integrations.adk import OWN_COMPACTION_META

    from .import_sources import adk_compaction_app

    app = adk_compaction_app()
    url = str(tmp_path / "store")

    async def main() -> list[Any]:
        async with AgentSessionService(url) as service:
            runner = Runner(app=app, session_service=service)
            await service.create_session(app_name="shop", user_id="ada", session_id="c1")
            for text in ("one", "two", "three"):
                async for _ in runner.run_async(
                    user_id="ada",
                    session_id="c1",
                    new_message=types.Content(role="user", parts=[types.Part(text=text)]),
                ):
                    pass
            got = await service.get_session(app_name="shop", user_id="ada", session_id="c1")
            assert got is not None
            return list(got.events)

    adk_events = asyncio.run(main())
    assert sum(1 for e in adk_events if e.actions and e.actions.compaction) == 1
    with ags.open_store(url) as store:
        [sid] = [i.id for i in store.list()]
        session = store.get(sid)
        markers = [e for e in session.read() if e.type == "session/compaction"]
        assert len(markers) == 1 and OWN_COMPACTION_META in markers[0].meta
        texts = [m.text for m in session.messages()]
        assert texts[0] == "Summary: the user said one and two."
        assert "one" not in texts and "two" not in texts
        assert texts[-2:] == ["three", "re: three"]
