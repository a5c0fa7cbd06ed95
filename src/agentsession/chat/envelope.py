"""The turn envelope, carried in a :mod:`contextvars` variable, and the route policies.

A :class:`TurnEnvelope` is the routing context of one turn: where replies go (``route``),
which history and turn lock it uses (``conversation``), which tenant directory
(``workspace``), which agent runs it and who spoke. The runner builds one per inbound message
with :func:`resolve_envelope` and installs it for the turn::

    env = resolve_envelope(event, route_policy_for_platform(event.platform_id))
    with apply_envelope(env):
        ...  # conversation_id(), workspace_from_context(), active_entry_key_from_context()

:func:`apply_envelope` and the ``with_*`` functions change the envelope of the current context
and return an :class:`EnvelopeToken`: use it as a context manager to put the previous envelope
back on exit, or ignore it to keep the change. The variable is a ``ContextVar``, so threads and
asyncio tasks each see their own envelope.

A :class:`RoutePolicy` says how a delivery id becomes a conversation (the scope, and whether
``/new`` maps the scoped key or the raw delivery id). Platforms can register overrides; the
registry is process-wide, thread-safe, and starts with ``chat-api`` mapping raw delivery ids.

The configured scope travels in the envelope's metadata under :data:`METADATA_SESSION_SCOPE`
(``sessionScope``, agentkit's later key), so :func:`active_entry_key_from_context` maps ``/new``
under thread or user scope correctly; agentkit v0.2.1 always used channel scope there.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Mapping
from typing import Any, Final, Literal, Protocol

import msgspec

from .. import recorder
from ..codec import decode, encode
from ..context import ContextToken, set_envelope_agent_source
from ..errors import UsageError
from .routing import (
    OutboundEvent,
    RouteRef,
    Scope,
    _RouteRefWire,
    apply_scope,
    parse_delivery,
    parse_scope,
    route_reply_to,
    route_session_id,
    session_route_from_delivery,
    workspace_key,
)

__all__ = [
    "ACTIVE_ENTRY_DELIVERY",
    "ACTIVE_ENTRY_EFFECTIVE",
    "METADATA_SESSION_SCOPE",
    "ActiveEntryMode",
    "ActorRef",
    "EnvelopeToken",
    "LoopRequest",
    "MessageEvent",
    "PlatformSessionPolicy",
    "RoutePolicy",
    "TurnEnvelope",
    "WorkspaceScope",
    "active_entry_key",
    "active_entry_key_from_context",
    "active_session_entry_key",
    "agent_id_from_context",
    "apply_envelope",
    "context_with_delivery_route",
    "conversation_from_event",
    "conversation_from_loop_request",
    "conversation_id",
    "decode_message_event",
    "decode_turn_envelope",
    "default_route_policy",
    "delivery_from_envelope",
    "delivery_route_from_context",
    "current_envelope",
    "inbound_delivery_id",
    "metadata_from_context",
    "outbound_from_envelope",
    "platform_from_context",
    "platform_session_policy_for",
    "register_platform_policy",
    "resolve_envelope",
    "route_policy_for_platform",
    "route_ref_from_context",
    "session_scope_from_context",
    "sync_message_event",
    "unregister_platform_policy",
    "user_id_from_context",
    "with_agent_id",
    "with_conversation",
    "with_route",
    "with_workspace",
    "workspace_from_context",
]

logger = logging.getLogger(__name__)

METADATA_SESSION_SCOPE: Final = "sessionScope"
"""Envelope metadata key holding the configured conversation scope (``channel``, ``thread`` or
``user``); :func:`resolve_envelope` sets it and :func:`active_entry_key_from_context` reads it."""

_ZERO_ROUTE: Final = RouteRef()


# ---------------------------------------------------------------------------------------------
# The envelope.


class ActorRef(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """Who spoke on an inbound turn. JSON keys: ``userId``, ``name``, ``email``."""

    user_id: str = ""
    """The platform's user id."""
    name: str = ""
    """Display name, when known."""
    email: str = ""
    """E-mail address, when known."""


_ZERO_ACTOR: Final = ActorRef()


class TurnEnvelope(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """The routing context of one turn.

    JSON keys: ``route``, ``conversation``, ``workspace``, ``agentId``, ``actor``,
    ``metadata``; empty fields are left out. Read JSON with :func:`decode_turn_envelope`, which
    accepts every legacy route form.
    """

    route: RouteRef = _ZERO_ROUTE
    """Where outbound replies go (captured from the inbound message)."""
    conversation: str = ""
    """The history and turn-lock key (the session id)."""
    workspace: str = ""
    """The tenant key for files, shell, skills and memory (see :func:`routing.workspace_key`)."""
    agent_id: str = ""
    """The agent running this turn."""
    actor: ActorRef = _ZERO_ACTOR
    """Who spoke."""
    metadata: dict[str, Any] = {}
    """Platform and plugin extensions (JSON values)."""

    def __post_init__(self) -> None:
        # Keep an empty route or actor identical to the default so it is left out of the JSON.
        if self.route is not _ZERO_ROUTE and self.route == _ZERO_ROUTE:
            msgspec.structs.force_setattr(self, "route", _ZERO_ROUTE)
        if self.actor is not _ZERO_ACTOR and self.actor == _ZERO_ACTOR:
            msgspec.structs.force_setattr(self, "actor", _ZERO_ACTOR)

    def with_route(self, route: RouteRef) -> TurnEnvelope:
        """A copy with ``route`` replaced."""
        return msgspec.structs.replace(self, route=route)

    def with_conversation(self, conversation: str) -> TurnEnvelope:
        """A copy with ``conversation`` replaced."""
        return msgspec.structs.replace(self, conversation=conversation)

    def with_workspace(self, workspace: str) -> TurnEnvelope:
        """A copy with ``workspace`` replaced."""
        return msgspec.structs.replace(self, workspace=workspace)

    def with_agent_id(self, agent_id: str) -> TurnEnvelope:
        """A copy with ``agent_id`` replaced."""
        return msgspec.structs.replace(self, agent_id=agent_id)

    def with_metadata(self, metadata: Mapping[str, Any]) -> TurnEnvelope:
        """A copy with ``metadata`` replaced."""
        return msgspec.structs.replace(self, metadata=dict(metadata))

    def with_session_scope(self, scope: str) -> TurnEnvelope:
        """A copy whose metadata records ``scope`` (parsed) under :data:`METADATA_SESSION_SCOPE`."""
        return self.with_metadata({**self.metadata, METADATA_SESSION_SCOPE: parse_scope(scope)})

    def session_scope(self) -> Scope | None:
        """The scope recorded in the metadata, or ``None`` when there is none."""
        raw = self.metadata.get(METADATA_SESSION_SCOPE)
        if isinstance(raw, str) and raw.strip():
            return parse_scope(raw)
        return None


_ZERO_ENVELOPE: Final = TurnEnvelope()


class _TurnEnvelopeWire(msgspec.Struct, rename="camel"):
    route: _RouteRefWire = msgspec.field(default_factory=_RouteRefWire)
    conversation: str = ""
    workspace: str = ""
    agent_id: str = ""
    actor: ActorRef = _ZERO_ACTOR
    metadata: dict[str, Any] = {}

    def to_envelope(self) -> TurnEnvelope:
        return TurnEnvelope(
            route=self.route.to_route(),
            conversation=self.conversation,
            workspace=self.workspace,
            agent_id=self.agent_id,
            actor=self.actor,
            metadata=self.metadata,
        )


def decode_turn_envelope(data: bytes | str) -> TurnEnvelope:
    """Read a turn envelope from JSON, accepting every legacy route form (see
    :func:`routing.decode_route_ref`). Raises :class:`UsageError` on malformed input."""
    try:
        return decode(data, _TurnEnvelopeWire).to_envelope()
    except (ValueError, TypeError) as exc:
        raise UsageError(f"not a turn envelope: {exc}") from None


# ---------------------------------------------------------------------------------------------
# The envelope of the current context.

_current: contextvars.ContextVar[TurnEnvelope] = contextvars.ContextVar(
    "agentsession.turn_envelope"
)


class EnvelopeToken(ContextToken[TurnEnvelope]):
    """The result of changing the current envelope.

    Use it in a ``with`` statement to restore the previous envelope on exit, or call
    :meth:`reset`. Ignoring it keeps the change.
    """

    __slots__ = ()

    @property
    def envelope(self) -> TurnEnvelope:
        """The envelope that was installed."""
        return self._value


def apply_envelope(env: TurnEnvelope) -> EnvelopeToken:
    """Make ``env`` the current envelope (``with apply_envelope(env): …`` restores the old one)."""
    return EnvelopeToken(_current, env)


def current_envelope() -> TurnEnvelope:
    """The current envelope, or the zero envelope when none is set."""
    return _current.get(_ZERO_ENVELOPE)


# session.messages(agent=FROM_ENVELOPE) reads the envelope's agent through the core's context.
set_envelope_agent_source(lambda: current_envelope().agent_id)


def with_route(route: RouteRef) -> EnvelopeToken:
    """Replace the current envelope's route (usable as a context manager)."""
    return apply_envelope(current_envelope().with_route(route))


def with_conversation(conversation: str) -> EnvelopeToken:
    """Replace the current envelope's conversation (usable as a context manager)."""
    return apply_envelope(current_envelope().with_conversation(conversation))


def with_workspace(workspace: str) -> EnvelopeToken:
    """Replace the current envelope's workspace (usable as a context manager)."""
    return apply_envelope(current_envelope().with_workspace(workspace))


def with_agent_id(agent_id: str) -> EnvelopeToken:
    """Replace the current envelope's agent id (usable as a context manager)."""
    return apply_envelope(current_envelope().with_agent_id(agent_id))


def context_with_delivery_route(platform: str, delivery: str) -> EnvelopeToken:
    """Point the current envelope's route at ``delivery``, keeping every other field (usable as
    a context manager)."""
    return with_route(session_route_from_delivery(platform, delivery))


def conversation_id() -> str:
    """The current turn's conversation (history and lock key), or ``""``."""
    return current_envelope().conversation


def platform_from_context() -> str:
    """The current route's platform, or ``""``."""
    return current_envelope().route.platform


def user_id_from_context() -> str:
    """The id of the user who spoke this turn, or ``""``."""
    return current_envelope().actor.user_id


def metadata_from_context() -> dict[str, Any] | None:
    """A copy of the current envelope's metadata, or ``None`` when it is empty."""
    metadata = current_envelope().metadata
    return dict(metadata) if metadata else None


def agent_id_from_context() -> str:
    """The agent running the current turn, or ``""``."""
    return current_envelope().agent_id


def route_ref_from_context() -> RouteRef:
    """The current envelope's route (the zero route when none is set)."""
    return current_envelope().route


def delivery_route_from_context() -> str:
    """The delivery id the current route returns to, or ``""``."""
    return delivery_from_envelope(current_envelope())


def session_scope_from_context() -> Scope:
    """The scope recorded in the current envelope's metadata; ``channel`` when none is."""
    return current_envelope().session_scope() or "channel"


def workspace_from_context() -> str:
    """The current turn's workspace key.

    The envelope's ``workspace`` when set. Otherwise it is derived, with a logged warning, from
    the delivery route (its channel) or else the conversation; ``""`` when there is neither.
    """
    env = current_envelope()
    if env.workspace:
        return env.workspace
    delivery = delivery_from_envelope(env)
    if delivery:
        derived = workspace_key(apply_scope(delivery, "channel", env.actor.user_id))
        logger.warning(
            "workspace %r derived from the delivery route; set TurnEnvelope.workspace at ingress",
            derived,
        )
        return derived
    if env.conversation:
        derived = workspace_key(env.conversation)
        logger.warning(
            "workspace %r derived from the conversation; set TurnEnvelope.workspace at ingress",
            derived,
        )
        return derived
    return ""


# ---------------------------------------------------------------------------------------------
# Route policies and the platform registry.

ActiveEntryMode = Literal["effective", "delivery"]
"""Which key ``/new`` maps: the scoped conversation key, or the raw delivery id."""

ACTIVE_ENTRY_EFFECTIVE: Final[ActiveEntryMode] = "effective"
"""``/new`` maps the scoped key (``slack:C001`` under channel scope)."""

ACTIVE_ENTRY_DELIVERY: Final[ActiveEntryMode] = "delivery"
"""``/new`` maps the raw delivery id (each ``chat-api`` conversation on its own)."""

WorkspaceScope = Literal["channel"]
"""How the workspace is derived from a delivery id; only ``channel`` is defined."""


class RoutePolicy(msgspec.Struct, frozen=True):
    """How inbound delivery ids map to conversations, workspaces and ``/new`` keys."""

    conversation_scope: Scope = "channel"
    """The scope applied to a delivery id to get the conversation key."""
    workspace_scope: WorkspaceScope = "channel"
    """How the workspace is derived (one workspace per channel)."""
    active_entry_mode: ActiveEntryMode = ACTIVE_ENTRY_EFFECTIVE
    """Which key ``/new`` maps."""


class PlatformSessionPolicy(msgspec.Struct, frozen=True):
    """A platform's overrides of the runner's :class:`RoutePolicy`."""

    active_entry_mode: ActiveEntryMode | None = None
    """Replaces the policy's ``active_entry_mode`` when set."""


def default_route_policy(scope: str = "channel") -> RoutePolicy:
    """The runner's default policy: ``scope`` (parsed) for conversations, one workspace per
    channel, ``/new`` mapping the scoped key."""
    return RoutePolicy(conversation_scope=parse_scope(scope))


_registry_lock = threading.Lock()
_platform_policies: dict[str, PlatformSessionPolicy] = {
    "chat-api": PlatformSessionPolicy(active_entry_mode=ACTIVE_ENTRY_DELIVERY),
}


def register_platform_policy(platform: str, policy: PlatformSessionPolicy) -> None:
    """Register (or replace) the overrides of ``platform``; a blank platform is ignored.

    Safe to call from any thread, also while others read the registry.
    """
    platform = platform.strip()
    if not platform:
        return
    with _registry_lock:
        _platform_policies[platform] = policy


def unregister_platform_policy(platform: str) -> None:
    """Remove the overrides of ``platform``, if any."""
    with _registry_lock:
        _platform_policies.pop(platform.strip(), None)


def platform_session_policy_for(platform: str) -> PlatformSessionPolicy:
    """The overrides registered for ``platform``; no overrides for a blank or unknown one."""
    platform = platform.strip()
    if not platform:
        return PlatformSessionPolicy()
    with _registry_lock:
        return _platform_policies.get(platform, PlatformSessionPolicy())


def route_policy_for_platform(platform: str, base: RoutePolicy | None = None) -> RoutePolicy:
    """``base`` (default: :func:`default_route_policy`) with ``platform``'s overrides applied."""
    policy = base if base is not None else default_route_policy()
    override = platform_session_policy_for(platform)
    if override.active_entry_mode is not None:
        policy = msgspec.structs.replace(policy, active_entry_mode=override.active_entry_mode)
    return policy


def active_entry_key(route: RouteRef, policy: RoutePolicy, user_id: str = "") -> str:
    """The key ``/new`` maps for a turn on ``route``; ``""`` when the route has no delivery.

    Under mode ``delivery`` it is the delivery id, otherwise the delivery id under the
    policy's conversation scope.
    """
    try:
        delivery = route_session_id(route)
    except UsageError:
        return ""
    if policy.active_entry_mode == ACTIVE_ENTRY_DELIVERY:
        return delivery
    return apply_scope(delivery, policy.conversation_scope, user_id)


def active_session_entry_key(platform: str, delivery: str, scope: str, user_id: str = "") -> str:
    """The ``/new`` key of ``delivery`` on ``platform`` under ``scope``; ``""`` for no delivery."""
    if not delivery:
        return ""
    policy = route_policy_for_platform(platform, default_route_policy(scope))
    return active_entry_key(session_route_from_delivery(platform, delivery), policy, user_id)


def active_entry_key_from_context(scope: str | None = None) -> str:
    """The ``/new`` key of the current turn.

    The scope is ``scope`` when given, else the one recorded in the envelope's metadata (see
    :data:`METADATA_SESSION_SCOPE`), else ``channel``. agentkit v0.2.1 always used ``channel``,
    so ``/new`` under thread or user scope mapped the whole channel.
    """
    env = current_envelope()
    chosen = parse_scope(scope) if scope is not None else session_scope_from_context()
    policy = route_policy_for_platform(env.route.platform, default_route_policy(chosen))
    return active_entry_key(env.route, policy, env.actor.user_id)


# ---------------------------------------------------------------------------------------------
# Inbound messages.


class MessageEvent(msgspec.Struct, frozen=True, omit_defaults=True):
    """An inbound message as a platform adapter hands it to the runner.

    JSON keys follow agentkit's Go struct: ``envelope``, ``AgentID``, ``PlatformID``,
    ``UserID``, ``Message``, ``metadata``. Read JSON with :func:`decode_message_event`.
    """

    envelope: TurnEnvelope = _ZERO_ENVELOPE
    """The routing context the adapter captured (often only the route)."""
    agent_id: str = msgspec.field(default="", name="AgentID")
    """The agent addressed, when the adapter knows it."""
    platform_id: str = msgspec.field(default="", name="PlatformID")
    """The platform (``slack``)."""
    user_id: str = msgspec.field(default="", name="UserID")
    """The user who spoke."""
    message: Any = msgspec.field(default=None, name="Message")
    """The message itself: text or any JSON value."""
    metadata: dict[str, Any] = {}
    """Platform extensions (JSON values)."""


class _MessageEventWire(msgspec.Struct):
    envelope: _TurnEnvelopeWire = msgspec.field(default_factory=_TurnEnvelopeWire)
    agent_id: str = msgspec.field(default="", name="AgentID")
    platform_id: str = msgspec.field(default="", name="PlatformID")
    user_id: str = msgspec.field(default="", name="UserID")
    message: Any = msgspec.field(default=None, name="Message")
    metadata: dict[str, Any] = {}


def decode_message_event(data: bytes | str) -> MessageEvent:
    """Read a message event from JSON, accepting every legacy route form. Raises
    :class:`UsageError` on malformed input."""
    try:
        wire = decode(data, _MessageEventWire)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"not a message event: {exc}") from None
    return MessageEvent(
        envelope=wire.envelope.to_envelope(),
        agent_id=wire.agent_id,
        platform_id=wire.platform_id,
        user_id=wire.user_id,
        message=wire.message,
        metadata=wire.metadata,
    )


class LoopRequest(Protocol):
    """Anything carrying an inbound :class:`MessageEvent` as ``event`` (a runner's request)."""

    @property
    def event(self) -> MessageEvent:
        """The inbound message."""
        ...


def delivery_from_envelope(env: TurnEnvelope) -> str:
    """The delivery id the envelope's route returns to, or ``""``."""
    try:
        return route_session_id(env.route)
    except UsageError:
        return ""


def inbound_delivery_id(event: MessageEvent) -> str:
    """The delivery id an inbound message came from (its envelope's route), or ``""``."""
    return delivery_from_envelope(event.envelope)


def conversation_from_event(event: MessageEvent) -> str:
    """The conversation already resolved on the message's envelope (stripped), or ``""``."""
    return event.envelope.conversation.strip()


def conversation_from_loop_request(request: LoopRequest) -> str:
    """:func:`conversation_from_event` of the request's event."""
    return conversation_from_event(request.event)


def resolve_envelope(event: MessageEvent, policy: RoutePolicy | None = None) -> TurnEnvelope:
    """The full envelope of an inbound message: what the adapter set, the rest derived.

    ``policy`` defaults to :func:`route_policy_for_platform` of the event's platform. Fields
    already set are kept; empty ones are filled:

    * route: rebuilt from the delivery id when it has no platform, keeping its ``reply_to``
      (agentkit dropped it);
    * actor user: the event's user; metadata: the event's metadata;
    * conversation: the delivery id under mode ``delivery``, else the delivery id under the
      policy's scope;
    * workspace: the route's channel key (:func:`routing.workspace_key`);
    * metadata also records the policy's scope under :data:`METADATA_SESSION_SCOPE` unless it
      already names one, so :func:`active_entry_key_from_context` finds it.

    ``/new`` redirection is not applied here; the caller maps the conversation afterwards.
    """
    env = event.envelope
    delivery = inbound_delivery_id(event)
    platform = event.platform_id.strip()
    if not platform and delivery:
        platform = parse_delivery(delivery, event.user_id).platform
    if policy is None:
        policy = route_policy_for_platform(platform)

    route = env.route
    if not route.platform and delivery:
        route = session_route_from_delivery(platform, delivery, route_reply_to(route))
    user = env.actor.user_id or event.user_id.strip()
    actor = env.actor
    if user != actor.user_id:
        actor = msgspec.structs.replace(actor, user_id=user)
    metadata = dict(env.metadata or event.metadata)
    if METADATA_SESSION_SCOPE not in metadata:
        metadata[METADATA_SESSION_SCOPE] = policy.conversation_scope

    conversation = env.conversation
    if not conversation and delivery:
        if policy.active_entry_mode == ACTIVE_ENTRY_DELIVERY:
            conversation = delivery
        else:
            conversation = apply_scope(delivery, policy.conversation_scope, user)

    workspace = env.workspace
    if not workspace:
        workspace = _workspace_from_route(route, policy.workspace_scope, user)

    return TurnEnvelope(
        route=route,
        conversation=conversation,
        workspace=workspace,
        agent_id=env.agent_id,
        actor=actor,
        metadata=metadata,
    )


def _workspace_from_route(route: RouteRef, scope: str, user_id: str) -> str:
    try:
        delivery = route_session_id(route)
    except UsageError:
        return ""
    if scope == "channel":
        return workspace_key(apply_scope(delivery, "channel", user_id))
    return workspace_key(delivery)


def sync_message_event(event: MessageEvent, env: TurnEnvelope) -> MessageEvent:
    """``event`` carrying ``env``, with its empty platform, user and metadata filled from it."""
    return msgspec.structs.replace(
        event,
        envelope=env,
        platform_id=event.platform_id or env.route.platform,
        user_id=event.user_id or env.actor.user_id,
        metadata=event.metadata or dict(env.metadata),
    )


def outbound_from_envelope(
    env: TurnEnvelope | None, type: str, data: Any = None, *, agent_id: str = ""
) -> OutboundEvent:
    """The outbound event of ``type`` that a reply in the turn of ``env`` is routed by.

    ``env`` defaults (``None``) to the current envelope. The event takes the envelope's route,
    the route's platform as ``platform_id`` and the actor's user id, as agentkit's
    ``OutboundFromEnvelope`` does; ``agent_id`` is left empty there, and may be given here.
    ``data`` is the payload: ``bytes``, ``bytearray``, ``memoryview`` or :class:`msgspec.Raw`
    are taken as encoded JSON (checked: :class:`UsageError` when it is not JSON), ``None`` is
    JSON ``null``, anything else is encoded as JSON.
    """
    if env is None:
        env = current_envelope()
    if not isinstance(type, str) or not type.strip():
        raise UsageError("an outbound event needs a type")
    if data is None:
        raw = msgspec.Raw(b"null")
    elif isinstance(data, (bytes, bytearray, memoryview, msgspec.Raw)):
        buf = bytes(data)
        try:
            decode(buf)
        except ValueError as exc:
            raise UsageError(f"outbound event data is not JSON: {exc}") from None
        raw = msgspec.Raw(buf)
    else:
        raw = msgspec.Raw(encode(data))
    return OutboundEvent(
        route=env.route,
        agent_id=agent_id,
        platform_id=env.route.platform,
        user_id=env.actor.user_id,
        type=type,
        data=raw,
    )


def _recording_defaults() -> tuple[str, str, dict[str, Any] | None]:
    env = current_envelope()
    return env.agent_id, env.actor.user_id, metadata_from_context()


# Turns recorded while an envelope is applied take their agent, user and metadata from it.
recorder.set_context_defaults(_recording_defaults)
