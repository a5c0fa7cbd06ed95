"""Chat commands a runtime can hand to its users: ``/new`` and ``/session``.

A :class:`CommandRegistry` dispatches a user's ``/command args`` text::

    registry = default_commands(store)
    reply = registry.dispatch("/new")       # None when the text is not a command

Both commands act on the conversation of the current turn envelope
(:mod:`agentsession.envelope`): ``/new`` starts a fresh conversation for the current entry
key and maps the key to it, so the runtime's next turn lands in the new session (or, on the
command line, moves the CLI pointer); ``/session`` describes the session the next turn uses.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..errors import UsageError
from ..events import TURN_START
from ..store import BaseStore
from .envelope import active_entry_key_from_context, conversation_id
from .identity import active_session, cli_current, set_active_session, set_cli_current
from .routing import new_session_id

__all__ = [
    "Command",
    "CommandRegistry",
    "current_entry_key",
    "default_commands",
    "new_command",
    "resolve_active_session_id",
    "session_command",
]


def resolve_active_session_id(store: BaseStore, key: str) -> str:
    """The session that turns for entry ``key`` go to: the ``/new`` mapping, else ``key``
    (``""`` for an empty key)."""
    if not key.strip():
        return ""
    return active_session(store, key)


def _is_cli(key: str) -> bool:
    return not key or key.startswith("cli:")


def current_entry_key() -> str:
    """The entry key of the current turn: the envelope's active-entry key, else its
    conversation, else ``""`` (the command line)."""
    return active_entry_key_from_context() or conversation_id()


@dataclass(frozen=True)
class Command:
    """A chat command: ``/name`` (or ``/alias``) followed by free text arguments."""

    name: str
    """The command word, without the slash."""
    description: str
    """One line for ``/help``."""
    run: Callable[[str], str]
    """Runs the command with its argument text; returns the reply text."""
    alias: str = ""
    """A second word that runs the command."""


class CommandRegistry:
    """Commands by name and alias; thread-safe."""

    def __init__(self, commands: Iterable[Command] = ()) -> None:
        self._commands: dict[str, Command] = {}
        self._lock = threading.Lock()
        for command in commands:
            self.register(command)

    def register(self, command: Command) -> None:
        """Add a command; a name or alias already taken is a :class:`UsageError`."""
        with self._lock:
            for word in filter(None, (command.name, command.alias)):
                if word in self._commands:
                    raise UsageError(f"command /{word} is already registered")
            for word in filter(None, (command.name, command.alias)):
                self._commands[word] = command

    def commands(self) -> list[Command]:
        """The registered commands, each once, sorted by name."""
        with self._lock:
            unique = {c.name: c for c in self._commands.values()}
        return [unique[name] for name in sorted(unique)]

    def help(self) -> str:
        """One line per command."""
        lines = []
        for c in self.commands():
            alias = f" (/{c.alias})" if c.alias else ""
            lines.append(f"/{c.name}{alias}: {c.description}")
        return "\n".join(lines)

    def dispatch(self, text: str) -> str | None:
        """Run the command ``text`` names and return its reply; None when ``text`` is not a
        command (does not start with ``/``). An unknown command or bad arguments raise
        :class:`UsageError` with a message fit to show the user."""
        stripped = text.strip()
        if not stripped.startswith("/") or stripped == "/":
            return None
        word, _, args = stripped[1:].partition(" ")
        with self._lock:
            command = self._commands.get(word.lower())
        if command is None:
            known = ", ".join(f"/{c.name}" for c in self.commands())
            raise UsageError(f"unknown command /{word}; known commands: {known}")
        return command.run(args.strip())


def new_command(store: BaseStore) -> Command:
    """``/new``: start a fresh conversation for the current entry key."""

    def run(args: str) -> str:
        if args:
            raise UsageError("usage: /new")
        key = current_entry_key()
        fresh = new_session_id(key)
        if _is_cli(key):
            set_cli_current(store, fresh)
        else:
            set_active_session(store, key, fresh)
        return fresh

    return Command("new", "start a new conversation", run)


def session_command(store: BaseStore) -> Command:
    """``/session`` (``/sess``): the id, location, event, message and turn counts of the
    session the next turn uses."""

    def run(args: str) -> str:
        if args:
            raise UsageError("usage: /session")
        key = current_entry_key()
        # On the command line the next turn goes to the CLI pointer, which /new moves.
        session_id = cli_current(store) if _is_cli(key) else resolve_active_session_id(store, key)
        session = store.get(session_id)
        events = session.read()
        lines = [
            f"session id: {session_id}",
            f"path: {session.location}",
            f"events: {len(events)}",
            f"messages: {len(session.messages())}",
            f"turns: {sum(1 for e in events if e.type == TURN_START)}",
        ]
        return "\n".join(lines)

    return Command(
        "session", "show the current session id, where it is stored and its size", run, alias="sess"
    )


def default_commands(store: BaseStore) -> CommandRegistry:
    """A registry with ``/new`` and ``/session`` bound to ``store``."""
    return CommandRegistry([new_command(store), session_command(store)])
