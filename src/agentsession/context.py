"""The session key, turn id and run context of the current code, carried in :mod:`contextvars`.

lango's context helpers (``WithSessionKey``/``SessionKeyFromContext``,
``WithTurnID``/``TurnIDFromContext``, ``WithRunContext``/``RunContextFromContext``) in Python
form: a value is set for the current context and read anywhere below it without being passed
down, the way the chat layer carries its turn envelope (:mod:`agentsession.chat.envelope`).
It lives in the core, and imports nothing of it, because the recorder uses it::

    with with_session_key("bg:task-7"), with_run_context(RunContext(run_id="task-7")):
        with session.turn() as turn:      # turn.turn_id: the context's, or a new one
            assert turn_id() == turn.turn_id
            ...

Each ``with_*`` function sets its value at once and returns a :class:`ContextToken`: use it in a
``with`` statement to put the previous value back on exit (nesting restores each level), or
ignore it to keep the change for the rest of the context. The variables are ``ContextVar``\\ s,
so every thread and every asyncio task has its own value: a task sees the values of the code
that created it (a copy; what the task sets stays in the task), and a new thread starts with
none set (on Python 3.11).

Readers return an empty value when nothing was set: ``""`` from :func:`session_key` and
:func:`turn_id`, ``None`` from :func:`run_context`.

**What the recorder does with them.** ``session.turn()`` takes the turn id from the context
when one is set and otherwise makes one (``uuid4().hex``), keeps it as ``turn.turn_id``, makes
it the context's turn id while the turn is open, and stamps it on every event it writes, in
``event.meta["turn_id"]`` (:data:`agentsession.recorder.META_TURN_ID`). The run id of the
context's :class:`RunContext` is stamped on the turn's ``turn/start`` only (see
:mod:`agentsession.recorder`). The session key is not read by the core: it is there for the
application's own code (lango's background tasks and workflow steps key their sessions with it).
"""

from __future__ import annotations

import contextvars
import enum
from collections.abc import Callable
from types import TracebackType
from typing import Final, Generic, Literal, TypeVar

import msgspec

__all__ = [
    "FROM_ENVELOPE",
    "AgentFilter",
    "ContextToken",
    "envelope_agent",
    "resolve_agent",
    "set_envelope_agent_source",
    "RunContext",
    "run_context",
    "session_key",
    "turn_id",
    "with_run_context",
    "with_session_key",
    "with_turn_id",
]

T = TypeVar("T")


class RunContext(msgspec.Struct, frozen=True, kw_only=True):
    """What run the current code belongs to (lango's ``RunContext``): a background task or a
    workflow run. Frozen, so the value :func:`run_context` returns can be kept and shared."""

    session_type: str = ""
    """The kind of session the run uses, for example ``background`` or ``workflow``."""
    workflow_id: str = ""
    """The workflow, for a workflow run."""
    run_id: str = ""
    """The run (a background task id, a workflow run id)."""


class ContextToken(Generic[T]):
    """The result of setting a context value with a ``with_*`` function.

    Use it in a ``with`` statement to put the previous value back on exit, or call
    :meth:`reset`; ignoring it keeps the change.
    """

    __slots__ = ("_done", "_token", "_value", "_var")

    def __init__(self, var: contextvars.ContextVar[T], value: T) -> None:
        self._var = var
        self._value = value
        self._token = var.set(value)
        self._done = False

    @property
    def value(self) -> T:
        """The value that was set."""
        return self._value

    def reset(self) -> None:
        """Put back the value that was current before; a second call does nothing.

        Must run in the context that made the change (as ``with`` does); elsewhere it raises
        ``ValueError``, as :meth:`contextvars.ContextVar.reset` does.
        """
        if not self._done:
            self._var.reset(self._token)
            self._done = True

    def __enter__(self) -> T:
        return self._value

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.reset()

    def __repr__(self) -> str:
        return f"<ContextToken {self._var.name}={self._value!r}{' reset' if self._done else ''}>"


_session_key: contextvars.ContextVar[str] = contextvars.ContextVar(
    "agentsession.session_key", default=""
)
_turn_id: contextvars.ContextVar[str] = contextvars.ContextVar("agentsession.turn_id", default="")
_run_context: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar(
    "agentsession.run_context", default=None
)


def _text(what: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, not {type(value).__name__}")
    return value


def with_session_key(key: str) -> ContextToken[str]:
    """Make ``key`` the context's session key (lango's ``WithSessionKey``); ``with`` restores
    the previous one on exit."""
    return ContextToken(_session_key, _text("a session key", key))


def session_key() -> str:
    """The context's session key, or ``""`` when none is set (lango's
    ``SessionKeyFromContext``)."""
    return _session_key.get()


def with_turn_id(turn_id: str) -> ContextToken[str]:
    """Make ``turn_id`` the context's turn id (lango's ``WithTurnID``; lango uses the trace id):
    turns opened below it take it as their id. ``with`` restores the previous one on exit."""
    return ContextToken(_turn_id, _text("a turn id", turn_id))


def turn_id() -> str:
    """The context's turn id, or ``""`` when none is set (lango's ``TurnIDFromContext``). While
    a recorded turn is open, it is that turn's id."""
    return _turn_id.get()


def with_run_context(run: RunContext) -> ContextToken[RunContext | None]:
    """Make ``run`` the context's run context (lango's ``WithRunContext``); ``with`` restores
    the previous one on exit."""
    if not isinstance(run, RunContext):
        raise TypeError(f"with_run_context needs a RunContext, not {type(run).__name__}")
    return ContextToken(_run_context, run)


def run_context() -> RunContext | None:
    """The context's run context, or ``None`` when none is set (lango's
    ``RunContextFromContext``)."""
    return _run_context.get()


# ---------------------------------------------------------------------------------------------
# The agent of the current turn envelope, for agentkit's DeriveMessages(ctx).


class _FromEnvelope(enum.Enum):
    FROM_ENVELOPE = "from-envelope"


FROM_ENVELOPE: Final = _FromEnvelope.FROM_ENVELOPE
"""``session.messages(agent=FROM_ENVELOPE)`` (and ``entries``): filter the history by the agent
of the current chat turn envelope (``chat.current_envelope().agent_id``), as agentkit's
``DeriveMessages(ctx)`` does; no envelope, or one without an agent, gives every agent's
messages."""

AgentFilter = str | None | Literal[_FromEnvelope.FROM_ENVELOPE]
"""What a history's ``agent`` argument takes: an agent id, None (every agent) or
:data:`FROM_ENVELOPE`."""

_envelope_agent_source: list[Callable[[], str]] = []


def set_envelope_agent_source(source: Callable[[], str]) -> None:
    """Where :func:`envelope_agent` reads the envelope's agent (the chat layer sets it when it
    is imported; the core imports nothing of it)."""
    _envelope_agent_source[:] = [source]


def envelope_agent() -> str:
    """The agent id of the current chat turn envelope (``""`` when none is set)."""
    return _envelope_agent_source[0]() if _envelope_agent_source else ""


def resolve_agent(agent: AgentFilter) -> str | None:
    """An ``agent`` argument as the filter it means: :data:`FROM_ENVELOPE` becomes the
    envelope's agent (None when it names none)."""
    if agent is FROM_ENVELOPE:
        return envelope_agent() or None
    return agent
