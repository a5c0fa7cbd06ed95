"""The chat layer: routing platform deliveries to sessions, the turn envelope, chat commands, the
identity mappings (``/new``'s active session, agent binding, the CLI pointer), outbound events
and per-tenant stores resolved through the workspace.

Built on the core (it uses only the public store API and the store's key-value primitive); the
core never imports it. Importing it installs the turn envelope as the source of the recorder's
default agent, user and metadata.
"""

from __future__ import annotations

from .commands import (
    Command,
    CommandRegistry,
    CommandReply,
    default_commands,
    edit_command,
    new_command,
    resolve_active_session_id,
    retry_command,
    session_command,
)
from .envelope import (
    ActorRef,
    MessageEvent,
    RoutePolicy,
    TurnEnvelope,
    active_entry_key_from_context,
    apply_envelope,
    conversation_id,
    current_envelope,
    default_route_policy,
    outbound_from_envelope,
    resolve_envelope,
    route_policy_for_platform,
    with_agent_id,
    with_conversation,
    with_route,
    with_workspace,
)
from .identity import (
    active_session,
    agent_binding,
    bind_agent,
    cli_current,
    set_active_session,
    set_cli_current,
)
from .inbox import EVENT_ID_KEY, deliver
from .routing import (
    OutboundEvent,
    RouteRef,
    SessionRouteTarget,
    apply_scope,
    build_delivery_id,
    new_session_id,
    parse_delivery,
    session_route_from_delivery,
    workspace_dir_name,
    workspace_key,
)
from .workspace import TENANT_TOOL_WORK_DIR, WorkspaceStores, tenant_resolver

__all__ = [
    "EVENT_ID_KEY",
    "deliver",
    "TENANT_TOOL_WORK_DIR",
    "ActorRef",
    "Command",
    "CommandRegistry",
    "CommandReply",
    "MessageEvent",
    "OutboundEvent",
    "RoutePolicy",
    "RouteRef",
    "SessionRouteTarget",
    "TurnEnvelope",
    "WorkspaceStores",
    "active_entry_key_from_context",
    "active_session",
    "agent_binding",
    "apply_envelope",
    "apply_scope",
    "bind_agent",
    "build_delivery_id",
    "cli_current",
    "conversation_id",
    "current_envelope",
    "default_commands",
    "default_route_policy",
    "edit_command",
    "new_command",
    "new_session_id",
    "outbound_from_envelope",
    "parse_delivery",
    "resolve_active_session_id",
    "resolve_envelope",
    "retry_command",
    "route_policy_for_platform",
    "session_command",
    "session_route_from_delivery",
    "set_active_session",
    "set_cli_current",
    "tenant_resolver",
    "with_agent_id",
    "with_conversation",
    "with_route",
    "with_workspace",
    "workspace_dir_name",
    "workspace_key",
]
