"""The ``agentsession`` group: global options, and the one place library errors become a
line on stderr and an exit status."""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..crypto import EncryptionError
from ..errors import SessionError, SessionNotFound, UsageError
from ._output import (
    EXIT_BROKEN_PIPE,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    _fail,
    _logging_to_stderr,
)
from ._state import DEFAULT_STORE, NoStore, State

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
"""The click context settings every command shares (``-h`` for help, 100 columns)."""


F = TypeVar("F", bound=Callable[..., Any])


def _exit_code(exc: SessionError) -> int:
    if isinstance(exc, (SessionNotFound, NoStore)):
        return EXIT_NOT_FOUND
    if isinstance(exc, UsageError):
        return EXIT_USAGE
    if isinstance(exc, EncryptionError):
        return EXIT_ERROR  # a wrong or missing key, or sealed data that does not open
    return EXIT_ERROR


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that flushing it at exit cannot fail again."""
    with contextlib.suppress(AttributeError, ValueError, OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


class _Group(click.Group):
    """Turns library errors (the :class:`SessionError` tree, into which every backend translates
    operating-system and driver errors) into one clear line (a traceback with ``--debug``) and
    the exit status of their kind; a closed stdout into a quiet exit."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; map errors to one line and an exit status."""
        try:
            result = super().invoke(ctx)
            sys.stdout.flush()
            return result
        except SessionError as exc:
            state = ctx.find_object(State)
            if state is not None and state.debug:
                traceback.print_exc()
            _fail(str(exc) or type(exc).__name__, _exit_code(exc))
        except BrokenPipeError:
            _silence_stdout()
            raise click.exceptions.Exit(EXIT_BROKEN_PIPE) from None
        except KeyboardInterrupt:
            # Ctrl-C, wherever it lands: quiet, 130 (click's own reaction is "Aborted!", 1).
            raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
        finally:
            state = ctx.find_object(State)
            if state is not None:
                state.close()


pass_state = click.make_pass_decorator(State)
"""Decorates a command to be called with the group's :class:`State` first."""


def many_ids(recursive_help: str) -> Callable[[F], F]:
    """The arguments of a command that destroys sessions: ``SESSION_IDS`` ('-' reads them
    from stdin), ``-y/--yes`` and ``-r/--recursive`` (described by ``recursive_help``)."""

    def decorate(command: F) -> F:
        command = click.option("-r", "--recursive", is_flag=True, help=recursive_help)(command)
        command = click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")(
            command
        )
        return click.argument("session_ids", nargs=-1, required=True)(command)

    return decorate


def _examples(*lines: str) -> str:
    """A help epilog: the examples, kept as written (click's ``\\b``)."""
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)


_GROUP_EPILOG = (
    "\b\n"
    "Exit status:\n"
    "  0    success\n"
    "  1    an error (with repair --exit-code: something to repair); also a wrong or\n"
    "       missing key of an encrypted store, or encrypted data that does not open\n"
    "  2    usage error (a bad option, argument or store URL)\n"
    "  4    not found: no such session, or no store at the path\n"
    "  130  interrupted by Ctrl-C (serve, which runs until then, exits 0)\n"
    "  141  stdout was closed early (| head); nothing is printed\n"
    "\n"
    "\b\n"
    "JSON: every command takes --json. Objects the command line makes use snake_case keys;\n"
    "events (show, tail) and messages (messages) are printed exactly as stored\n"
    "(docs/format.md). Only writes create a store: copy's destination, demo, import (and\n"
    "migrate, on PostgreSQL only).\n"
    "\n"
    "\b\n"
    "--store, --key-file and --debug go before the command or after it (the later wins).\n"
    "\n"
    "\b\n"
    "Encrypted stores (docs/security.md): the key comes from --key-file PATH or the\n"
    "environment variable AGENTSESSION_PASSPHRASE, never from the arguments. A key file\n"
    "holds the passphrase as text (a trailing newline is dropped), or 64 hex digits: a raw key.\n"
    "\n"
    + _examples(
        "agentsession demo",
        "agentsession --store ./agentsession-demo ls",
        "agentsession --store ./agentsession-demo show slack:C002",
        "AGENTSESSION_STORE=sqlite:///sessions.db agentsession stats --json",
    )
)


@click.group(cls=_Group, context_settings=CONTEXT, epilog=_GROUP_EPILOG)
@click.option(
    "--store",
    "url",
    envvar="AGENTSESSION_STORE",
    default=DEFAULT_STORE,
    show_default=True,
    help="Store URL or directory (env AGENTSESSION_STORE): a path, sqlite:///file.db or "
    "postgresql://... (memory: is refused: every command would see a new, empty store).",
)
@click.option(
    "--key-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="The passphrase of an encrypted store, in a file (text; or 64 hex digits: a raw "
    "key). Default: the environment variable AGENTSESSION_PASSPHRASE. A passphrase is never "
    "taken as an argument.",
)
@click.option(
    "--debug", is_flag=True, help="Show tracebacks on errors, and the debug log (all loggers)."
)
@click.version_option(package_name="agentsession")
@click.pass_context
def cli(ctx: click.Context, url: str, key_file: str | None, debug: bool) -> None:
    """Durable, crash-safe sessions for LLM agents.

    Start with `agentsession demo`, then explore what it wrote with `ls`, `show` and
    `messages`.
    """
    state = ctx.obj = State(url=url, debug=debug, key_file=key_file)
    state._log = ctx.with_resource(_logging_to_stderr(debug))


def _global_after(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Apply a global option given after the command name, as if it came before it (it wins
    over the same option given there)."""
    state = ctx.find_object(State)
    if state is None or value is None or value is False:
        return value
    if param.name == "global_store":
        state.close()
        state.url = value
    elif param.name == "global_key_file":
        state.key_file = value
    elif param.name == "global_debug":
        state.debug_on()
    return value


def _global_options() -> list[click.Option]:
    """``--store``, ``--key-file`` and ``--debug`` as options of a command, so that they work
    after its name as well as before it."""
    return [
        click.Option(
            ["--store", "global_store"],
            default=None,
            expose_value=False,
            callback=_global_after,
            help="As the global --store (also accepted before the command).",
        ),
        click.Option(
            ["--key-file", "global_key_file"],
            type=click.Path(dir_okay=False),
            default=None,
            expose_value=False,
            callback=_global_after,
            help="As the global --key-file (also accepted before the command).",
        ),
        click.Option(
            ["--debug", "global_debug"],
            is_flag=True,
            expose_value=False,
            callback=_global_after,
            help="As the global --debug (also accepted before the command).",
        ),
    ]


def _accept_global_options(group: click.Group) -> None:
    """Give every command of ``group`` (and of its subgroups) the global options it does not
    define itself (``serve`` and ``import``'s commands have their own ``--store``, which means
    the same)."""
    for command in group.commands.values():
        taken = {opt for param in command.params for opt in param.opts}
        command.params.extend(
            option for option in _global_options() if not taken.intersection(option.opts)
        )
        if isinstance(command, click.Group):
            _accept_global_options(command)
