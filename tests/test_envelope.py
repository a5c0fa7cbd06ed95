"""The turn envelope, its context variable, inbound messages and route policies."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import msgspec
import pytest

from agentsession.chat.envelope import (
    ACTIVE_ENTRY_DELIVERY,
    ACTIVE_ENTRY_EFFECTIVE,
    METADATA_SESSION_SCOPE,
    ActorRef,
    MessageEvent,
    PlatformSessionPolicy,
    RoutePolicy,
    TurnEnvelope,
    active_entry_key,
    active_entry_key_from_context,
    active_session_entry_key,
    agent_id_from_context,
    apply_envelope,
    context_with_delivery_route,
    conversation_from_event,
    conversation_from_loop_request,
    conversation_id,
    current_envelope,
    decode_message_event,
    decode_turn_envelope,
    default_route_policy,
    delivery_from_envelope,
    delivery_route_from_context,
    inbound_delivery_id,
    metadata_from_context,
    platform_from_context,
    platform_session_policy_for,
    register_platform_policy,
    resolve_envelope,
    route_policy_for_platform,
    route_ref_from_context,
    session_scope_from_context,
    sync_message_event,
    unregister_platform_policy,
    user_id_from_context,
    with_agent_id,
    with_conversation,
    with_route,
    with_workspace,
    workspace_from_context,
)
from agentsession.chat.routing import (
    RouteRef,
    SessionRouteTarget,
    build_delivery_id,
    build_session_route,
    route_reply_to,
    route_session_id,
    session_route_from_delivery,
)
from agentsession.errors import UsageError
from agentsession.events import encode


def delivery_route(platform: str, delivery_id: str) -> RouteRef:
    """A session route whose target names only a delivery id (agentkit's ``SessionRoute``)."""
    return build_session_route(platform, SessionRouteTarget(delivery_id=delivery_id))


@pytest.fixture(autouse=True)
def fresh_envelope() -> Iterator[None]:
    """Each test starts with no envelope, and whatever it installs is undone afterwards."""
    with apply_envelope(TurnEnvelope()):
        yield


@pytest.fixture
def platform_name(request: pytest.FixtureRequest) -> Iterator[str]:
    """A platform id of this test's own, unregistered afterwards."""
    name = f"test-{request.node.name}"
    yield name
    unregister_platform_policy(name)


# ---------------------------------------------------------------------------------------------
# resolve_envelope.


def test_resolve_envelope_preserves_the_inbound_route() -> None:
    delivery = build_delivery_id("slack", "C001", "111.0", "U111")
    route = delivery_route("slack", delivery)
    event = MessageEvent(
        envelope=TurnEnvelope(route=route, actor=ActorRef(user_id="U111")),
        platform_id="slack",
        user_id="U111",
    )
    env = resolve_envelope(event, default_route_policy("channel"))
    assert env.route == route
    assert route_session_id(env.route) == delivery


def test_resolve_envelope_under_channel_scope_gives_channel_conversation_and_workspace() -> None:
    delivery = build_delivery_id("slack", "C001", "111.0", "U111")
    event = MessageEvent(
        platform_id="slack",
        user_id="U111",
        envelope=TurnEnvelope(route=delivery_route("slack", delivery)),
    )
    env = resolve_envelope(event, default_route_policy("channel"))
    assert env.conversation == "slack:C001"
    assert env.workspace == "slack:C001"
    assert route_session_id(env.route) == delivery


def test_resolve_envelope_for_chat_api_uses_the_delivery_as_conversation() -> None:
    delivery = build_delivery_id("chat-api", "default_channel", "conv_1")
    event = MessageEvent(
        platform_id="chat-api",
        envelope=TurnEnvelope(route=delivery_route("chat-api", delivery)),
    )
    policy = route_policy_for_platform("chat-api", default_route_policy("channel"))
    env = resolve_envelope(event, policy)
    assert env.conversation == delivery
    assert env.workspace == "chat-api:default_channel"


def test_resolve_envelope_without_a_policy_uses_the_platform_registry() -> None:
    delivery = build_delivery_id("chat-api", "default_channel", "conv_1")
    event = MessageEvent(envelope=TurnEnvelope(route=delivery_route("chat-api", delivery)))
    assert resolve_envelope(event).conversation == delivery


def test_resolve_envelope_under_thread_scope_keys_the_conversation_by_thread() -> None:
    event = MessageEvent(envelope=TurnEnvelope(route=delivery_route("slack", "slack:C1:t:9.0")))
    assert resolve_envelope(event, default_route_policy("thread")).conversation == "slack:C1:t:9.0"


def test_a_rebuilt_route_keeps_its_reply_to() -> None:
    # The adapter set a target but no platform: the route is rebuilt. agentkit lost reply_to.
    route = build_session_route(
        "", SessionRouteTarget(delivery_id="slack:C001:t:1.0", reply_to="msg-7")
    )
    event = MessageEvent(platform_id="slack", envelope=TurnEnvelope(route=route))
    env = resolve_envelope(event, default_route_policy())
    assert env.route.platform == "slack"
    assert route_reply_to(env.route) == "msg-7"
    assert route_session_id(env.route) == "slack:C001:t:1.0"


def test_a_rebuilt_route_takes_its_platform_from_the_delivery_when_the_event_has_none() -> None:
    event = MessageEvent(envelope=TurnEnvelope(route=delivery_route("", "feishu:oc_x:t:om_y")))
    assert resolve_envelope(event).route.platform == "feishu"


def test_resolve_envelope_keeps_fields_the_adapter_set() -> None:
    env = TurnEnvelope(
        route=delivery_route("slack", "slack:C001:t:1.0"),
        conversation="slack:C001:new:x",
        workspace="tenant-a",
        agent_id="coder",
        actor=ActorRef(user_id="U1", name="Ann"),
        metadata={"k": "v", METADATA_SESSION_SCOPE: "user"},
    )
    event = MessageEvent(envelope=env, user_id="U2", metadata={"other": 1})
    assert resolve_envelope(event, default_route_policy("thread")) == env


def test_resolve_envelope_fills_actor_and_metadata_from_the_event() -> None:
    event = MessageEvent(
        envelope=TurnEnvelope(route=delivery_route("slack", "slack:C001")),
        user_id=" U5 ",
        metadata={"team": "T1"},
    )
    env = resolve_envelope(event, default_route_policy("user"))
    assert env.actor.user_id == "U5"
    assert env.metadata == {"team": "T1", METADATA_SESSION_SCOPE: "user"}
    assert env.conversation == "slack:C001:u:U5"
    assert event.metadata == {"team": "T1"}  # the event's own dict is not changed


def test_resolve_envelope_without_a_delivery_leaves_conversation_and_workspace_empty() -> None:
    env = resolve_envelope(MessageEvent(user_id="U1", message="hi"), default_route_policy())
    assert (env.conversation, env.workspace, env.route) == ("", "", RouteRef())


# ---------------------------------------------------------------------------------------------
# The envelope struct and its JSON.


def test_envelope_with_conversation_preserves_route_and_workspace() -> None:
    env = TurnEnvelope(
        route=delivery_route("slack", "slack:C001:t:1:u:U1"),
        conversation="slack:C001",
        workspace="slack:C001",
    )
    changed = env.with_conversation("slack:C001:new:20260101")
    assert changed.conversation == "slack:C001:new:20260101"
    assert route_session_id(changed.route) == "slack:C001:t:1:u:U1"
    assert changed.workspace == "slack:C001"
    assert env.conversation == "slack:C001"


def test_turn_envelope_json_uses_camel_case_keys_and_leaves_out_empty_fields() -> None:
    env = TurnEnvelope(
        route=delivery_route("slack", "slack:C1"),
        conversation="slack:C1",
        agent_id="coder",
        actor=ActorRef(user_id="U1", email="u@example.com"),
    )
    assert msgspec.json.decode(encode(env)) == {
        "route": {"platform": "slack", "kind": "session", "target": {"deliveryId": "slack:C1"}},
        "conversation": "slack:C1",
        "agentId": "coder",
        "actor": {"userId": "U1", "email": "u@example.com"},
    }
    assert encode(TurnEnvelope(route=RouteRef(), actor=ActorRef())) == b"{}"


def test_decode_turn_envelope_round_trips_and_reads_legacy_routes() -> None:
    env = TurnEnvelope(route=delivery_route("slack", "slack:C1"), metadata={"n": [1, 2]})
    assert decode_turn_envelope(encode(env)) == env
    legacy = decode_turn_envelope(
        b'{"route":{"platform":"slack","kind":"session","sessionId":"slack:C9"},"agentId":"a"}'
    )
    assert route_session_id(legacy.route) == "slack:C9"
    assert legacy.agent_id == "a"


def test_decode_turn_envelope_rejects_malformed_json() -> None:
    with pytest.raises(UsageError, match="not a turn envelope"):
        decode_turn_envelope(b'{"route": 3}')


def test_decode_message_event_reads_agentkit_field_names_and_legacy_routes() -> None:
    event = decode_message_event(
        b'{"envelope":{"route":{"platform":"slack","kind":"session","data":"slack:C1"}},'
        b'"AgentID":"coder","PlatformID":"slack","UserID":"U1","Message":"hi",'
        b'"metadata":{"k":1}}'
    )
    assert inbound_delivery_id(event) == "slack:C1"
    assert (event.agent_id, event.platform_id, event.user_id) == ("coder", "slack", "U1")
    assert (event.message, event.metadata) == ("hi", {"k": 1})
    assert decode_message_event(encode(event)) == event
    with pytest.raises(UsageError, match="not a message event"):
        decode_message_event(b"[]")


# ---------------------------------------------------------------------------------------------
# The envelope of the current context.


def test_applied_envelope_is_read_by_every_accessor() -> None:
    env = TurnEnvelope(
        route=delivery_route("slack", "slack:C001:t:1:u:U1"),
        conversation="slack:C001:new:20260101",
        workspace="slack:C001",
        agent_id="coder",
        actor=ActorRef(user_id="U1"),
        metadata={"team": "T1"},
    )
    with apply_envelope(env) as applied:
        assert applied is env
        assert current_envelope() is env
        assert conversation_id() == "slack:C001:new:20260101"
        assert conversation_id() == "slack:C001:new:20260101"
        assert agent_id_from_context() == "coder"
        assert delivery_route_from_context() == "slack:C001:t:1:u:U1"
        assert workspace_from_context() == "slack:C001"
        assert platform_from_context() == "slack"
        assert user_id_from_context() == "U1"
        assert metadata_from_context() == {"team": "T1"}
        assert route_ref_from_context() == env.route


def test_the_envelope_is_zero_when_none_is_set() -> None:
    assert contextvars.Context().run(current_envelope) == TurnEnvelope()
    assert conversation_id() == ""
    assert metadata_from_context() is None
    assert delivery_route_from_context() == ""


def test_leaving_the_with_block_restores_the_previous_envelope() -> None:
    outer = TurnEnvelope(conversation="outer")
    with apply_envelope(outer):
        with apply_envelope(TurnEnvelope(conversation="inner")):
            assert conversation_id() == "inner"
        assert conversation_id() == "outer"
    assert current_envelope() == TurnEnvelope()


def test_a_plain_call_keeps_the_change_until_reset() -> None:
    token = apply_envelope(TurnEnvelope(conversation="kept"))
    assert conversation_id() == "kept"
    token.reset()
    token.reset()  # a second reset does nothing
    assert conversation_id() == ""


def test_with_route_changes_only_the_route() -> None:
    base = TurnEnvelope(
        route=delivery_route("slack", "slack:C001"),
        conversation="slack:C001",
        workspace="slack:C001",
    )
    with apply_envelope(base), with_route(delivery_route("slack", "slack:C002")):
        assert delivery_route_from_context() == "slack:C002"
        assert conversation_id() == "slack:C001"
        assert current_envelope().workspace == "slack:C001"


def test_each_with_function_restores_the_previous_envelope_on_exit() -> None:
    base = TurnEnvelope(conversation="c", workspace="w", agent_id="a")
    with apply_envelope(base):
        with with_conversation("c2"):
            assert current_envelope() == base.with_conversation("c2")
        with with_workspace("w2"):
            assert current_envelope() == base.with_workspace("w2")
        with with_agent_id("a2"):
            assert current_envelope() == base.with_agent_id("a2")
        assert current_envelope() == base


def test_context_with_delivery_route_keeps_the_rest_of_the_envelope() -> None:
    base = TurnEnvelope(conversation="slack:C1", agent_id="coder", actor=ActorRef(user_id="U1"))
    with apply_envelope(base), context_with_delivery_route("slack", "slack:C1:t:2.0"):
        assert delivery_route_from_context() == "slack:C1:t:2.0"
        assert current_envelope().with_route(RouteRef()) == base


def test_threads_each_see_their_own_envelope() -> None:
    seen: list[str] = []
    with apply_envelope(TurnEnvelope(conversation="main")):
        worker = threading.Thread(target=lambda: seen.append(conversation_id()))
        worker.start()
        worker.join()
    assert seen == [""]


def test_asyncio_tasks_do_not_see_each_others_changes() -> None:
    async def turn(name: str) -> str:
        with with_conversation(name):
            await asyncio.sleep(0)
            return conversation_id()

    async def main() -> list[str]:
        return list(await asyncio.gather(turn("a"), turn("b")))

    assert asyncio.run(main()) == ["a", "b"]


def test_workspace_from_context_derives_the_channel_from_the_delivery_route(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        context_with_delivery_route("slack", "slack:C001:t:17.9:u:U111"),
        caplog.at_level(logging.WARNING, logger="agentsession.chat.envelope"),
    ):
        assert workspace_from_context() == "slack:C001"
    assert "set TurnEnvelope.workspace" in caplog.text
    assert "U111" not in caplog.text  # the derived key is logged, not the user's delivery id


def test_workspace_from_context_falls_back_to_the_conversation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        apply_envelope(TurnEnvelope(conversation="cli:default")),
        caplog.at_level(logging.WARNING, logger="agentsession.chat.envelope"),
    ):
        assert workspace_from_context() == "cli:default"
    assert "derived from the conversation" in caplog.text


def test_workspace_from_context_is_empty_without_route_or_conversation() -> None:
    assert workspace_from_context() == ""


# ---------------------------------------------------------------------------------------------
# Inbound messages.


def test_inbound_delivery_id_prefers_the_route() -> None:
    delivery = build_delivery_id("slack", "C001", "1", "U1")
    event = MessageEvent(envelope=TurnEnvelope(route=delivery_route("slack", delivery)))
    assert inbound_delivery_id(event) == delivery
    assert inbound_delivery_id(MessageEvent()) == ""


def test_delivery_from_envelope_uses_the_route() -> None:
    env = TurnEnvelope(route=delivery_route("slack", "slack:C001:t:1"))
    assert delivery_from_envelope(env) == "slack:C001:t:1"
    assert delivery_from_envelope(TurnEnvelope()) == ""


def test_delivery_route_from_context_prefers_the_envelope() -> None:
    delivery = build_delivery_id("slack", "C001", "1", "U1")
    with apply_envelope(TurnEnvelope(route=delivery_route("slack", delivery))):
        assert delivery_route_from_context() == delivery
        assert route_session_id(route_ref_from_context()) == delivery


def test_conversation_from_event_uses_the_envelope() -> None:
    event = MessageEvent(envelope=TurnEnvelope(conversation=" slack:C001:new "))
    assert conversation_from_event(event) == "slack:C001:new"


def test_conversation_from_event_is_empty_without_an_envelope_conversation() -> None:
    assert conversation_from_event(MessageEvent()) == ""


@dataclass
class Request:
    event: MessageEvent


def test_conversation_from_loop_request_uses_the_event_envelope() -> None:
    request = Request(MessageEvent(envelope=TurnEnvelope(conversation="slack:C001")))
    assert conversation_from_loop_request(request) == "slack:C001"


def test_sync_message_event_fills_empty_fields_from_the_envelope() -> None:
    env = TurnEnvelope(
        route=delivery_route("slack", "slack:C1"), actor=ActorRef(user_id="U1"), metadata={"k": 1}
    )
    synced = sync_message_event(MessageEvent(message="hi"), env)
    assert synced == MessageEvent(
        envelope=env, platform_id="slack", user_id="U1", message="hi", metadata={"k": 1}
    )


def test_sync_message_event_keeps_fields_already_set() -> None:
    event = MessageEvent(platform_id="teams", user_id="U9", metadata={"own": True})
    env = TurnEnvelope(
        route=delivery_route("slack", "slack:C1"), actor=ActorRef(user_id="U1"), metadata={"k": 1}
    )
    synced = sync_message_event(event, env)
    assert (synced.platform_id, synced.user_id, synced.metadata) == ("teams", "U9", {"own": True})
    assert synced.envelope is env


# ---------------------------------------------------------------------------------------------
# Route policies and the platform registry.


def test_default_route_policy_parses_the_scope() -> None:
    assert default_route_policy(" THREAD ") == RoutePolicy(
        conversation_scope="thread",
        workspace_scope="channel",
        active_entry_mode=ACTIVE_ENTRY_EFFECTIVE,
    )
    assert default_route_policy("bogus").conversation_scope == "channel"


def test_route_policy_for_chat_api_maps_the_delivery_id() -> None:
    policy = route_policy_for_platform("chat-api", default_route_policy("channel"))
    assert policy.active_entry_mode == ACTIVE_ENTRY_DELIVERY


def test_register_platform_policy_overrides_the_defaults(platform_name: str) -> None:
    assert route_policy_for_platform(platform_name).active_entry_mode == ACTIVE_ENTRY_EFFECTIVE
    register_platform_policy(
        f"  {platform_name} ", PlatformSessionPolicy(active_entry_mode=ACTIVE_ENTRY_DELIVERY)
    )
    policy = route_policy_for_platform(platform_name, default_route_policy("thread"))
    assert policy.active_entry_mode == ACTIVE_ENTRY_DELIVERY
    assert policy.conversation_scope == "thread"


def test_a_blank_or_unknown_platform_has_no_overrides() -> None:
    register_platform_policy("  ", PlatformSessionPolicy(active_entry_mode=ACTIVE_ENTRY_DELIVERY))
    assert platform_session_policy_for("") == PlatformSessionPolicy()
    assert platform_session_policy_for("no-such-platform") == PlatformSessionPolicy()


def test_the_platform_registry_keeps_every_registration_made_concurrently() -> None:
    names = [f"test-concurrent-{i}" for i in range(4000)]
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def register_and_read(chunk: list[str]) -> None:
        try:
            start.wait()
            for name in chunk:
                register_platform_policy(
                    name, PlatformSessionPolicy(active_entry_mode=ACTIVE_ENTRY_DELIVERY)
                )
                platform_session_policy_for(names[0])
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    threads = [threading.Thread(target=register_and_read, args=(names[i::8],)) for i in range(8)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        modes = {platform_session_policy_for(name).active_entry_mode for name in names}
    finally:
        sys.setswitchinterval(previous)
        for name in names:
            unregister_platform_policy(name)
    assert errors == []
    assert modes == {ACTIVE_ENTRY_DELIVERY}


# ---------------------------------------------------------------------------------------------
# Active-entry keys (the key /new maps).

SLACK_DM = build_delivery_id("slack", "D0AK8MAHW22", "", "U02LNUW8KV5")
CHAT_API_CONVERSATION = build_delivery_id("chat-api", "default_channel", "conv_1")


@pytest.mark.parametrize(
    ("platform", "delivery", "scope", "user", "expected"),
    [
        ("slack", SLACK_DM, "channel", "U02LNUW8KV5", "slack:D0AK8MAHW22"),
        ("slack", SLACK_DM, "user", "U02LNUW8KV5", SLACK_DM),
        ("chat-api", CHAT_API_CONVERSATION, "channel", "", CHAT_API_CONVERSATION),
    ],
    ids=["slack channel scope", "slack user scope", "chat-api keeps the delivery"],
)
def test_active_session_entry_key(
    platform: str, delivery: str, scope: str, user: str, expected: str
) -> None:
    assert active_session_entry_key(platform, delivery, scope, user) == expected


def test_active_session_entry_key_of_no_delivery_is_empty() -> None:
    assert active_session_entry_key("slack", "", "thread", "U1") == ""


def test_active_entry_key_is_empty_for_a_route_without_delivery() -> None:
    assert active_entry_key(RouteRef(), default_route_policy("thread"), "U1") == ""


THREAD_DELIVERY = "slack:C001:t:1712345678.9:u:U456"


def threaded_turn(scope: str | None) -> TurnEnvelope:
    env = TurnEnvelope(
        route=session_route_from_delivery("slack", THREAD_DELIVERY),
        actor=ActorRef(user_id="U456"),
    )
    return env.with_session_scope(scope) if scope is not None else env


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        ("thread", "slack:C001:t:1712345678.9"),
        ("user", "slack:C001:u:U456"),
        ("channel", "slack:C001"),
    ],
)
def test_active_entry_key_from_context_uses_the_scope_recorded_in_the_envelope(
    scope: str, expected: str
) -> None:
    # agentkit v0.2.1 always answered "slack:C001" here.
    with apply_envelope(threaded_turn(scope)):
        assert session_scope_from_context() == scope
        assert active_entry_key_from_context() == expected


def test_active_entry_key_from_context_prefers_an_explicit_scope() -> None:
    with apply_envelope(threaded_turn("user")):
        assert active_entry_key_from_context("thread") == "slack:C001:t:1712345678.9"


def test_active_entry_key_from_context_defaults_to_channel_scope() -> None:
    with apply_envelope(threaded_turn(None)):
        assert session_scope_from_context() == "channel"
        assert active_entry_key_from_context() == "slack:C001"


def test_a_resolved_envelope_carries_its_scope_to_the_active_entry_key() -> None:
    event = MessageEvent(
        platform_id="slack",
        user_id="U456",
        envelope=TurnEnvelope(route=delivery_route("slack", THREAD_DELIVERY)),
    )
    with apply_envelope(resolve_envelope(event, default_route_policy("thread"))):
        assert active_entry_key_from_context() == "slack:C001:t:1712345678.9"


def test_active_entry_key_from_context_maps_the_delivery_for_chat_api() -> None:
    route = session_route_from_delivery("chat-api", CHAT_API_CONVERSATION)
    with apply_envelope(TurnEnvelope(route=route).with_session_scope("thread")):
        assert active_entry_key_from_context() == CHAT_API_CONVERSATION
