"""Chat commands /new and /session, and the active-session mapping they drive."""

from __future__ import annotations

from pathlib import Path

import pytest

import agentsession as ags
from agentsession.chat.commands import (
    Command,
    CommandRegistry,
    default_commands,
    resolve_active_session_id,
)
from agentsession.chat.envelope import TurnEnvelope, apply_envelope, with_conversation
from agentsession.chat.identity import (
    active_session,
    cli_current,
    set_active_session,
)
from agentsession.chat.routing import session_route_from_delivery


@pytest.fixture
def store(tmp_path: Path) -> ags.BaseStore:
    return ags.open_store(tmp_path)


def test_store_offers_the_default_commands(store: ags.BaseStore) -> None:
    registry = default_commands(store)
    assert [c.name for c in registry.commands()] == ["edit", "help", "new", "retry", "session"]
    reply = registry.dispatch("/new")
    assert reply is not None and reply.startswith("cli:")
    assert registry.dispatch("/session") is not None


def test_new_on_the_command_line_moves_the_cli_pointer(store: ags.BaseStore) -> None:
    fresh = default_commands(store).dispatch("/new")
    assert cli_current(store) == fresh
    assert cli_current(ags.open_store(store.url)) == fresh


def test_new_in_a_chat_maps_the_entry_key_to_a_fresh_session(store: ags.BaseStore) -> None:
    env = TurnEnvelope(
        route=session_route_from_delivery("slack", "slack:C001:t:17.9"), conversation="slack:C001"
    )
    with apply_envelope(env):
        fresh = default_commands(store).dispatch("/new")
    assert fresh is not None and fresh.startswith("slack:C001:new:")
    assert active_session(store, "slack:C001") == fresh
    assert resolve_active_session_id(store, "slack:C001") == fresh
    assert cli_current(store) == "cli:default"


def test_new_uses_the_configured_thread_scope(store: ags.BaseStore) -> None:
    env = TurnEnvelope(
        route=session_route_from_delivery("slack", "slack:C001:t:17.9"),
        conversation="slack:C001:t:17.9",
        metadata={"sessionScope": "thread"},
    )
    with apply_envelope(env):
        fresh = default_commands(store).dispatch("/new")
    assert active_session(store, "slack:C001:t:17.9") == fresh
    assert active_session(store, "slack:C001") == "slack:C001"


def test_session_reports_id_location_and_counts(store: ags.BaseStore) -> None:
    session = store.get("slack:C001")
    with session.turn(agent="a") as turn:
        turn.user("hi")
        turn.assistant("hello")
    with with_conversation("slack:C001"):
        reply = default_commands(store).dispatch("/sess")
    assert reply == "\n".join(
        [
            "session id: slack:C001",
            f"path: {session.location}",
            "events: 4",
            "messages: 2",
            "turns: 1",
        ]
    )


def test_session_follows_the_active_mapping(store: ags.BaseStore) -> None:
    set_active_session(store, "slack:C001", "slack:C001:new:x")
    with with_conversation("slack:C001"):
        reply = default_commands(store).dispatch("/session")
    assert reply is not None and reply.startswith("session id: slack:C001:new:x\n")


def test_commands_reject_arguments_and_unknown_words(store: ags.BaseStore) -> None:
    registry = default_commands(store)
    with pytest.raises(ags.UsageError, match="usage: /new"):
        registry.dispatch("/new please")
    with pytest.raises(ags.UsageError, match="usage: /session"):
        registry.dispatch("/session x")
    with pytest.raises(ags.UsageError, match="unknown command /nope"):
        registry.dispatch("/nope")
    assert registry.dispatch("hello /new") is None
    assert registry.dispatch("/") is None


def test_registry_refuses_duplicate_words_and_lists_help() -> None:
    registry = CommandRegistry([Command("ping", "answer pong", lambda args: "pong", alias="p")])
    assert registry.dispatch("/P") == "pong"
    with pytest.raises(ags.UsageError):
        registry.register(Command("p", "clash", lambda args: ""))
    assert registry.help() == "/ping (/p): answer pong"


def test_resolve_active_session_id_of_an_empty_key_is_empty(store: ags.BaseStore) -> None:
    assert resolve_active_session_id(store, "") == ""
    assert resolve_active_session_id(store, "slack:C9") == "slack:C9"
