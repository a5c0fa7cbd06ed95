"""Which session a chat conversation uses now: the active-session map, agent binding and the
command line's pointer, kept in the store's small key-value primitive.

* **Active session** (namespace ``active``): ``/new`` starts a fresh session for an entry key
  (a channel, thread or user, per the route policy) and later turns of that key go to it.
* **Agent binding** (namespace ``bind``, keyed by session id and deleted with the session): the
  agent a session is bound to.
* **CLI pointer** (namespace ``cli``): the session the command line attaches to next.

Every function takes any :class:`~agentsession.contract.Store`; writes are atomic and persisted
by the backend.
"""

from __future__ import annotations

from ..contract import Store, check_session_id
from ..errors import UsageError
from .routing import DEFAULT_CLI_SESSION_ID

__all__ = [
    "active_session",
    "agent_binding",
    "bind_agent",
    "cli_current",
    "set_active_session",
    "set_cli_current",
]


def _entry_key(key: object) -> str:
    if not isinstance(key, str) or not key.strip():
        raise UsageError("an active-session entry key is required")
    return key


def active_session(store: Store, key: str) -> str:
    """The session that ``/new`` made current for an entry key; the key itself when none."""
    return store.meta_get("active", _entry_key(key)) or key


def set_active_session(store: Store, key: str, session_id: str) -> None:
    """Map an entry key to the session its next turns go to (atomic, persisted)."""
    key = _entry_key(key)
    sid = check_session_id(session_id)
    store.meta_set("active", key, None if sid == key else sid)


def agent_binding(store: Store, session_id: str) -> str:
    """The agent a session is bound to, or ``""``."""
    return store.meta_get("bind", check_session_id(session_id)) or ""


def bind_agent(store: Store, session_id: str, agent: str) -> None:
    """Bind a session to an agent (``""`` removes the binding)."""
    sid = check_session_id(session_id)
    if not isinstance(agent, str):
        raise UsageError("agent must be a string")
    store.meta_set("bind", sid, agent or None)


def cli_current(store: Store, *, create: bool = False) -> str:
    """The session the command line attaches to next (default ``cli:default``).

    Reading never writes, unless ``create=True``: then a missing pointer is set to
    ``cli:default`` (agentkit's ``ResolveCLICurrent``, which creates the
    ``cli_current.jsonl`` link, so an agentkit process sharing the directory sees it)."""
    current = store.meta_get("cli", "current")
    if current:
        return current
    if create:
        set_cli_current(store, DEFAULT_CLI_SESSION_ID)
    return DEFAULT_CLI_SESSION_ID


def set_cli_current(store: Store, session_id: str) -> None:
    """Point the command line at a session."""
    store.meta_set("cli", "current", check_session_id(session_id))
