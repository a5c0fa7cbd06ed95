"""Platform deliveries straight into the conversation's inbox (:mod:`agentsession.inbox`).

``chat.deliver(store, event, event_id=...)`` resolves an inbound :class:`MessageEvent` as a turn
would (its envelope under the route policy, then ``/new``'s active-session mapping) and records
the message with ``store.deliver`` under the platform's event id, so a platform's retry of the
same event stores nothing and returns the first delivery. A worker holding the conversation's
lease then drains it with ``session.pending(lease)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..codec import encode
from ..errors import UsageError
from .commands import resolve_active_session_id
from .envelope import (
    MessageEvent,
    RoutePolicy,
    active_entry_key_from_context,
    apply_envelope,
    resolve_envelope,
)

if TYPE_CHECKING:
    from ..inbox import Delivery
    from ..store import BaseStore

__all__ = ["EVENT_ID_KEY", "deliver"]

EVENT_ID_KEY = "event_id"
"""The metadata key of a platform's event id, read when ``event_id`` is not given."""


def deliver(
    store: BaseStore,
    event: MessageEvent,
    *,
    event_id: str | None = None,
    policy: str | None = None,
    route_policy: RoutePolicy | None = None,
    agent_id: str | None = None,
) -> Delivery:
    """Record the inbound ``event`` in its conversation's inbox and return the
    :class:`~agentsession.inbox.Delivery`.

    The conversation is the one a turn for this event would use: the envelope resolved under
    ``route_policy`` (the platform's default when None), then ``/new``'s active-session mapping
    of its entry key. ``event_id`` is the platform's event id (default: the event's metadata
    ``event_id``; None stores the delivery under a new id, so a retry is not recognised).
    ``agent_id`` overrides the envelope's agent; the delivery records the agent and the user
    who spoke, and the event's metadata. ``policy`` as :meth:`agentsession.BaseStore.deliver`.
    A message that is not text is delivered as its JSON text."""
    envelope = resolve_envelope(event, route_policy)
    if agent_id is not None:
        envelope = envelope.with_agent_id(agent_id)
    with apply_envelope(envelope):
        key = active_entry_key_from_context() or envelope.conversation
        session_id = resolve_active_session_id(store, key) if key else ""
    if not session_id:
        raise UsageError("the event names no conversation (no route, delivery id or envelope)")
    if event_id is None:
        raw = event.metadata.get(EVENT_ID_KEY)
        event_id = raw if isinstance(raw, str) and raw else None
    return store.deliver(
        session_id,
        _text(event.message),
        id=event_id,
        policy=policy,
        agent=envelope.agent_id or None,
        user=envelope.actor.user_id or None,
        meta=_flat(event.metadata) or None,
    )


def _text(message: Any) -> str:
    if isinstance(message, str):
        return message
    if message is None:
        raise UsageError("the event carries no message")
    return encode(message).decode()


def _flat(metadata: dict[str, Any]) -> dict[str, Any]:
    """The event's metadata as event meta (JSON values; the event id is the event's own)."""
    return {k: v for k, v in metadata.items() if k != EVENT_ID_KEY}
