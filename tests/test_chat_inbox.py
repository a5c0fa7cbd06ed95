"""``chat.deliver``: platform deliveries routed straight into the conversation's inbox."""

from __future__ import annotations

from pathlib import Path

import pytest

import agentsession as ags
from agentsession import chat
from agentsession.errors import UsageError


def slack_event(thread: str, user: str, text: str, event_id: str = "") -> chat.MessageEvent:
    delivery = chat.build_delivery_id("slack", "C1", thread, user)
    return chat.MessageEvent(
        envelope=chat.TurnEnvelope(route=chat.session_route_from_delivery("slack", delivery)),
        platform_id="slack",
        user_id=user,
        message=text,
        metadata={"event_id": event_id, "team": "T9"} if event_id else {"team": "T9"},
    )


def test_a_platform_delivery_lands_in_its_threads_inbox_once_per_event_id(tmp_path: Path) -> None:
    store = ags.open_store(tmp_path / "store")
    policy = chat.default_route_policy("thread")
    first = chat.deliver(store, slack_event("1.0", "U1", "hello", "Ev1"), route_policy=policy)
    again = chat.deliver(store, slack_event("1.0", "U1", "hello", "Ev1"), route_policy=policy)
    assert again.seq == first.seq and again.id == "Ev1"  # the platform's retry: stored once
    other = chat.deliver(
        store, slack_event("2.0", "U2", "elsewhere", "Ev2"), route_policy=policy, agent_id="bot"
    )
    assert first.session_id == "slack:C1:t:1.0" and other.session_id == "slack:C1:t:2.0"
    assert (other.agent, other.user) == ("bot", "U2")
    session = store.get(first.session_id)
    with store.lock(session.id, timeout=5) as lease:
        drained = []
        for delivery in session.pending(lease):
            drained.append(delivery.message.text)
            with delivery.start_turn() as turn:
                turn.assistant("hi")
    assert drained == ["hello"]
    assert [m.text for m in session.messages()] == ["hello", "hi"]
    stored = [e for e in session.read() if e.type == "session/delivery"]
    assert [e.meta.get("team") for e in stored] == ["T9"]


def test_new_moves_later_deliveries_to_the_fresh_session(tmp_path: Path) -> None:
    store = ags.open_store(tmp_path / "store")
    policy = chat.default_route_policy("thread")
    commands = chat.default_commands(store)
    event = slack_event("1.0", "U1", "/new")
    with chat.apply_envelope(chat.resolve_envelope(event, policy)):
        fresh = commands.dispatch("/new")
    assert fresh is not None
    delivery = chat.deliver(store, slack_event("1.0", "U1", "after", "Ev3"), route_policy=policy)
    assert delivery.session_id == fresh.strip().split()[0]


def test_an_event_without_an_event_id_gets_a_new_one_and_one_without_a_message_is_refused(
    tmp_path: Path,
) -> None:
    store = ags.open_store(tmp_path / "store")
    one = chat.deliver(store, slack_event("1.0", "U1", "a"))
    two = chat.deliver(store, slack_event("1.0", "U1", "a"))
    assert one.id != two.id and two.seq == one.seq + 1
    empty = chat.MessageEvent(platform_id="slack", user_id="U1", message=None)
    with pytest.raises(UsageError):
        chat.deliver(store, empty)
