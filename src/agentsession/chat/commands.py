"""Chat commands a runtime can hand to its users: ``/new``, ``/session``, ``/retry`` and
``/edit``.

A :class:`CommandRegistry` dispatches a user's ``/command args`` text::

    registry = default_commands(store)
    reply = registry.dispatch("/new")       # the reply text; None when not a command
    full = registry.reply("/retry")         # a CommandReply: .text and .to_answer
    if full is not None and full.to_answer:
        ...                                 # /retry, /edit: answer these messages, a new turn

Every command acts on the conversation of the current turn envelope
(:mod:`agentsession.envelope`): ``/new`` starts a fresh conversation for the current entry
key and maps the key to it, so the runtime's next turn lands in the new session (or, on the
command line, moves the CLI pointer); ``/session`` describes the session the next turn uses.
``/retry`` and ``/edit TEXT`` rewind that session to before its last turn (a
``session/rewind`` marker of kind ``retry`` or ``edit``: :mod:`agentsession.rewind`) and
hand back, in the whole reply's :attr:`CommandReply.to_answer`
(:meth:`CommandRegistry.reply`), the user message(s) the runtime answers next: the last
turn's own (``/retry``) or ``TEXT`` (``/edit``). A command calls no model: recording those
messages and the answer, as a new turn, is the runtime's part.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..derive import live_events
from ..errors import LockTimeout, UsageError
from ..events import COMPACTION, TURN_START
from ..messages import Message
from ..rewind import rewind, turn_spans
from ..store import BaseStore
from .envelope import active_entry_key_from_context, agent_id_from_context, conversation_id
from .identity import active_session, cli_current, set_active_session, set_cli_current
from .routing import new_session_id

__all__ = [
    "Command",
    "CommandRegistry",
    "CommandReply",
    "current_entry_key",
    "default_commands",
    "edit_command",
    "new_command",
    "resolve_active_session_id",
    "retry_command",
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


def _next_session_id(store: BaseStore) -> str:
    """The session the current entry key's next turn uses: on the command line the CLI
    pointer (which ``/new`` moves), else the ``/new`` mapping of the entry key."""
    key = current_entry_key()
    return cli_current(store) if _is_cli(key) else resolve_active_session_id(store, key)


@dataclass(frozen=True)
class CommandReply:
    """A command's whole reply (:meth:`CommandRegistry.reply`): the text to show the user,
    and the user messages the runtime should answer now.

    ``to_answer`` is empty for a reply that is only shown (``/new``, ``/session``). ``/retry``
    and ``/edit`` rewound the conversation to before its last turn and put there the
    message(s) to answer instead: the runtime records them in a new turn (``turn.user(m)``
    for each) and calls the model, as it does for a message the user sent. A runtime that
    reads the text alone (:meth:`CommandRegistry.dispatch`) answers nothing; the user then
    sends the message again."""

    text: str
    """The reply to show the user."""
    to_answer: tuple[Message, ...] = ()
    """The user messages to answer next, in order (empty: nothing to answer)."""

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise UsageError(f"a command reply's text is a str, not {type(self.text).__name__}")
        messages = tuple(self.to_answer)
        for message in messages:
            if not isinstance(message, Message) or message.role != "user":
                raise UsageError("a command reply's to_answer holds user messages only")
        object.__setattr__(self, "to_answer", messages)


@dataclass(frozen=True)
class Command:
    """A chat command: ``/name`` (or ``/alias``) followed by free text arguments."""

    name: str
    """The command word, without the slash."""
    description: str
    """One line for ``/help``."""
    run: Callable[[str], str | CommandReply]
    """Runs the command with its argument text; returns the reply text, or a
    :class:`CommandReply` to hand the runtime messages to answer as well."""
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
        """Run the command ``text`` names and return its reply text; None when ``text`` is
        not a command (does not start with ``/``). An unknown command or bad arguments raise
        :class:`UsageError` with a message fit to show the user. The messages a command hands
        back to answer (``/retry``, ``/edit``) are in :meth:`reply`'s result, not here."""
        reply = self.reply(text)
        return None if reply is None else reply.text

    def reply(self, text: str) -> CommandReply | None:
        """Run the command ``text`` names and return its whole reply: the text to show and,
        in ``to_answer``, the user messages to answer now (``/retry``, ``/edit``); None when
        ``text`` is not a command. Errors as for :meth:`dispatch`."""
        stripped = text.strip()
        if not stripped.startswith("/") or stripped == "/":
            return None
        word, _, args = stripped[1:].partition(" ")
        with self._lock:
            command = self._commands.get(word.lower())
        if command is None:
            known = ", ".join(f"/{c.name}" for c in self.commands())
            raise UsageError(f"unknown command /{word}; known commands: {known}")
        reply = command.run(args.strip())
        return reply if isinstance(reply, CommandReply) else CommandReply(reply)


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
        session_id = _next_session_id(store)
        session = store.get(session_id)
        events = session.read()
        # agentkit prints "(memory)" for a session with no file.
        where = "(memory)" if session.location == "memory" else session.location
        lines = [
            f"session id: {session_id}",
            f"path: {where}",
            f"events: {len(events)}",
            f"messages: {len(session.messages())}",
            f"turns: {sum(1 for e in events if e.type == TURN_START)}",
        ]
        return "\n".join(lines)

    return Command(
        "session", "show the current session id, where it is stored and its size", run, alias="sess"
    )


def _rewind_last_turn(
    store: BaseStore, kind: str, message: Message | None, lock_timeout: float
) -> CommandReply:
    """Rewind the next turn's session to before its last turn that holds a user message
    (a marker of ``kind``), under the session's turn lock; the reply hands back ``message``,
    or that turn's own user messages, to answer."""
    nothing = CommandReply(f"nothing to {kind}: this conversation has no message to go back to")
    session_id = _next_session_id(store)
    if not session_id or not store.exists(session_id):
        return nothing
    session = store.get(session_id)
    with contextlib.ExitStack() as held:
        if not store.holds_lock(session_id):  # a runtime may dispatch under the lock
            try:
                held.enter_context(store.lock(session_id, timeout=lock_timeout))
            except LockTimeout:
                raise UsageError(
                    f"the conversation is busy (a turn is being answered); /{kind} again when "
                    "it is done"
                ) from None
        events = session.read()
        spans = [s for s in turn_spans(live_events(events)) if s.users]
        if not spans:
            return nothing
        last = spans[-1]
        floor = max((e.seq for e in events if e.type == COMPACTION), default=0)
        if last.start - 1 < floor:
            return CommandReply(
                f"nothing to {kind}: the last message comes before the latest compaction, "
                "and a rewind goes back no further than that"
            )
        rewind(
            session,
            lambda: store.holds_lock(session_id),
            to_seq=last.start - 1,
            kind=kind,
            agent=agent_id_from_context(),
        )
    if message is None:
        asked = [event.decode(Message) for event in last.users]
        return CommandReply(
            f"rewound the last answer; asking again: {_gist(asked)}", to_answer=tuple(asked)
        )
    return CommandReply(
        f"rewound the last turn; asking instead: {_gist([message])}", to_answer=(message,)
    )


def _gist(messages: list[Message], limit: int = 80) -> str:
    text = " / ".join(m.text for m in messages if m.text) or "(a message without text)"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def retry_command(store: BaseStore, *, lock_timeout: float = 5.0) -> Command:
    """``/retry``: regenerate the last answer. Rewinds the conversation to before its last
    turn that holds a user message (a ``session/rewind`` marker of kind ``retry``: the turn
    leaves the history, nothing is deleted) and replies with that turn's user message(s) in
    :attr:`CommandReply.to_answer`, for the runtime to answer again in a new turn. Takes the
    session's turn lock (waiting up to ``lock_timeout`` seconds) unless the caller holds it;
    a conversation without a message gets a "nothing to retry" reply."""

    def run(args: str) -> CommandReply:
        if args:
            raise UsageError("usage: /retry")
        return _rewind_last_turn(store, "retry", None, lock_timeout)

    return Command("retry", "answer the last message again (the last answer is dropped)", run)


def edit_command(store: BaseStore, *, lock_timeout: float = 5.0) -> Command:
    """``/edit TEXT``: replace the last user message by ``TEXT``. Rewinds the conversation to
    before its last turn that holds a user message (a ``session/rewind`` marker of kind
    ``edit``) and replies with ``TEXT`` as a user message in :attr:`CommandReply.to_answer`,
    for the runtime to answer in a new turn. The lock and an empty conversation as for
    :func:`retry_command`."""

    def run(args: str) -> CommandReply:
        if not args:
            raise UsageError("usage: /edit NEW MESSAGE")
        return _rewind_last_turn(store, "edit", Message.user(args), lock_timeout)

    return Command("edit", "replace the last message by the text given, and answer it", run)


def help_command(registry: CommandRegistry) -> Command:
    """``/help``: the registry's commands, one line each (:meth:`CommandRegistry.help`)."""

    def run(args: str) -> str:
        if args:
            raise UsageError("usage: /help")
        return registry.help()

    return Command("help", "list the commands", run)


def default_commands(store: BaseStore) -> CommandRegistry:
    """A registry with ``/new``, ``/session``, ``/retry``, ``/edit`` bound to ``store``, and
    ``/help`` listing them (and any registered later)."""
    registry = CommandRegistry(
        [new_command(store), session_command(store), retry_command(store), edit_command(store)]
    )
    registry.register(help_command(registry))
    return registry
