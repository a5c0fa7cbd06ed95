"""The ``agentsession`` command line: inspect, follow, repair, compact and copy sessions.

A thin click layer over the library. The store is chosen by ``--store URL`` or the
``AGENTSESSION_STORE`` environment variable (default: the JSONL directory ``./.agentsession``).

Conventions every command follows:

* **Exit status**: 0 success; 1 an error (and, with ``repair --exit-code``, something to
  repair); 2 a usage error (a bad option or argument, also the library's ``UsageError``);
  4 not found (no such session, no store at the path); 130 Ctrl-C ended it (quietly; for
  ``serve``, which runs until Ctrl-C, that is 0); 141 stdout was closed early (as in
  ``agentsession ls | head -1``; the shell's status for a process killed by SIGPIPE).
* **Errors** print one line on stderr; ``--debug`` adds the traceback and the debug log.
  Library warnings print as one ``warning: ...`` line on stderr.
* **Output** for people escapes control characters (``\\x1b`` for ESC), so stored text cannot
  drive the terminal; when stdout is not a terminal, lines are plain and never cut or wrapped.
  A message's text keeps its newlines and tabs; a name (a session id, a store path, an agent
  or user name) is printed on one line, newline and tab escaped too. Session ids are never
  shortened.
* **JSON**: every command takes ``--json``. The objects the command line makes have snake_case
  keys; events (``show``, ``tail``) and messages (``messages``) are printed exactly as stored,
  in the format of ``docs/format.md``.
* **Stores are created only by writes**: ``copy``'s destination, ``demo`` and ``import``.
  Every other command opens the store with ``create=False`` and fails with "no store at ..."
  (exit 4) rather than create one; ``migrate`` too, but for PostgreSQL, where it creates the
  store's tables (the deploy step).
* **Reading writes nothing**: ``ls``, ``stats``, ``show``, ``messages``, ``tail``, ``repair
  --dry-run`` and ``serve`` change no byte of the store (a torn JSONL tail is read up to, and
  left for the next writer) and work on a store the process may only read; a write to such a
  store fails with one line saying why (``docs/safety.md``). They (and ``copy``'s source and
  ``import --dry-run``) open it with ``read_only=True``, so an older SQL schema is never
  migrated: it is read as it is, or refused saying to run ``agentsession migrate``.
* **Global options** (``--store``, ``--key-file``, ``--debug``) go before the command or after
  it; given on both sides, the one after wins.
* **Encrypted stores** (``docs/security.md``): the key comes from ``--key-file PATH`` or the
  environment variable ``AGENTSESSION_PASSPHRASE``, never from the command line's arguments.
  A key file holds the passphrase as UTF-8 text (one trailing newline is dropped), or exactly
  64 hex digits (and an optional newline), which are read as a raw 32-byte key (``key=`` of
  ``open_store``). ``--key-file`` wins over the environment. A command that only reads never
  makes a store encrypted: given a key for a store that is not encrypted, it stops (exit 2).
  An :class:`~agentsession.errors.EncryptionError` (a wrong or missing key, a sealed record
  that does not open, a shredded session) is an error like any other: one line, exit 1.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import difflib
import logging
import os
import re
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, NoReturn

import click
import msgspec
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from . import events as ev
from . import view
from ._names import unsafe_name
from .children import ChildInfo, descendants
from .codec import pretty
from .compaction import COMPACTION_EFFECT_KIND
from .contract import SessionInfo, StoreRecoveryReport
from .copying import copy_store
from .crypto import EncryptionError
from .errors import (
    LockTimeout,
    SessionError,
    SessionNotFound,
    StoreUnavailable,
    UsageError,
)
from .events import Event, encode, encode_event
from .messages import FilePart, ImagePart, Message, RefusalPart, TextPart, ThinkingPart
from .session import BaseSession
from .store import BaseStore, migrate_store, open_store

__all__ = [
    "DST_PASSPHRASE_ENV",
    "EXIT_BROKEN_PIPE",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_USAGE",
    "NoStore",
    "PASSPHRASE_ENV",
    "Secret",
    "clean",
    "main",
    "open_existing",
    "read_key_file",
    "suggest",
]

DEFAULT_STORE = "./.agentsession"
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

EXIT_ERROR = 1
"""An error (also: ``repair --exit-code`` found something to repair; a wrong or missing key
of an encrypted store, or sealed data that does not open)."""
EXIT_USAGE = 2
"""A usage error: a bad option or argument, or the library's ``UsageError``."""
EXIT_NOT_FOUND = 4
"""No such session, or no store at the path given."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (SIGINT) ended the command (as it ends ``tail -f``): 128 + SIGINT, quietly. ``serve``
runs until Ctrl-C, so for it Ctrl-C is success (0)."""
EXIT_BROKEN_PIPE = 141
"""Stdout was closed before the output was written (``| head``): 128 + SIGPIPE, the status a
shell reports for a Unix tool killed by SIGPIPE. Nothing is printed."""


PASSPHRASE_ENV = "AGENTSESSION_PASSPHRASE"
"""The environment variable holding the passphrase of the store (``--key-file`` wins)."""
DST_PASSPHRASE_ENV = "AGENTSESSION_DST_PASSPHRASE"
"""The environment variable holding the passphrase of ``copy``'s destination
(``--dst-key-file`` wins)."""


class NoStore(StoreUnavailable):
    """There is no store at the URL a command reads from (nothing was created there)."""


# -- terminal safety --------------------------------------------------------------------------

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_EXCEPT_LAYOUT = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _escape_control(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def clean(text: str, *, layout: bool = False) -> str:
    """``text`` with every control character (C0, DEL, C1) written as ``\\xNN``, so that
    stored text printed for a person cannot drive the terminal. With ``layout``, newline and
    tab are kept (for multi-line texts); a carriage return is always escaped."""
    pattern = _CONTROL_EXCEPT_LAYOUT if layout else _CONTROL
    return pattern.sub(_escape_control, text)


def _is_terminal(stream: IO[Any]) -> bool:
    """Whether ``stream`` is a terminal (tests replace this)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class _Console(Console):
    """A Rich console that lets a closed pipe surface as :class:`BrokenPipeError` (Rich's own
    reaction is to exit with status 1), so the command line handles it in one place."""

    def on_broken_pipe(self) -> None:
        """Raise, rather than exit."""
        self.quiet = True
        raise BrokenPipeError


def _console(file: IO[str] | None = None) -> _Console:
    return _Console(
        file=file or sys.stdout,
        width=int(os.environ.get("COLUMNS", "0") or 0) or None,
        soft_wrap=False,
        highlight=False,
        emoji=False,
    )


def _plain(markup: str) -> str:
    """The text of a line of Rich markup, without styles."""
    return Text.from_markup(markup, emoji=False).plain


def _echo(line: str = "") -> None:
    click.echo(line)


def _write_bytes(data: bytes) -> None:
    """Write ``data`` to stdout whole. A large write to a pipe whose reader has gone can
    return having written part of it, without an error; writing the rest raises
    :class:`BrokenPipeError`, which the command line turns into its quiet exit."""
    out = sys.stdout.buffer
    rest = memoryview(data)
    while rest:
        written = out.write(rest)
        rest = rest[written or 0 :]
    out.flush()


def _fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    click.echo(f"Error: {clean(message)}", err=True)
    raise click.exceptions.Exit(code)


# -- logging ----------------------------------------------------------------------------------


class _LogHandler(logging.Handler):
    """Library log records as one clean line on stderr: ``warning: ...``. Without ``--debug``
    only agentsession's own records at WARNING and above are shown (a third-party library's
    records are not: what went wrong reaches the command as an error); with ``--debug``, every
    record at DEBUG and above, with its logger's name and traceback."""

    def __init__(self, debug: bool) -> None:
        super().__init__(logging.DEBUG if debug else logging.WARNING)
        self.debug = debug

    def filter(self, record: logging.LogRecord) -> bool:
        """Agentsession's records, or every record with ``--debug``."""
        return self.debug or record.name == "agentsession" or record.name.startswith(
            "agentsession."
        )

    def emit(self, record: logging.LogRecord) -> None:
        """Print the record on stderr."""
        try:
            level = record.levelname.lower()
            if self.debug:
                text = clean(f"{level}: {record.name}: {record.getMessage()}")
                if record.exc_info:
                    text += "\n" + clean(self.format_exception(record), layout=True)
            else:
                text = clean(f"{level}: {record.getMessage()}")
            click.echo(text, err=True)
        except Exception:
            self.handleError(record)

    @staticmethod
    def format_exception(record: logging.LogRecord) -> str:
        """The record's traceback."""
        return logging.Formatter().formatException(record.exc_info)  # type: ignore[arg-type]


@contextlib.contextmanager
def _logging_to_stderr(debug: bool) -> Iterator[_LogHandler]:
    """Route log records through :class:`_LogHandler` while a command runs; restore after."""
    root = logging.getLogger()
    handler = _LogHandler(debug)
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if debug else min(level or logging.WARNING, logging.WARNING))
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


@contextlib.contextmanager
def _quiet(logger_name: str) -> Iterator[None]:
    """Hide a library logger's warnings while the command reports the same thing itself."""
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


# -- stores -----------------------------------------------------------------------------------

_SQLITE_MAGIC = b"SQLite format 3\x00"
_SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")


def _is_path(url: str) -> bool:
    """Whether ``open_store`` reads ``url`` as a directory path (as it decides)."""
    scheme, sep, _ = url.partition(":")
    return not sep or len(scheme) == 1 or "/" in scheme or "\\" in scheme


def _check_url(url: str) -> None:
    """Refuse what the command line can never use: ``memory:`` (each process has its own,
    always empty) and a SQLite file given as a path (a directory is expected there)."""
    scheme = url.strip().partition(":")[0].lower()
    if not _is_path(url) and scheme == "memory":
        raise UsageError(
            "the command line cannot use a memory: store: it lives in one process's memory, so "
            "every command would see a new, empty one. Use a directory, sqlite:///file.db or "
            "postgresql://..."
        )
    if _is_path(url) and os.path.isfile(url):
        try:
            with open(url, "rb") as f:
                head = f.read(len(_SQLITE_MAGIC))
        except OSError:
            return
        if head == _SQLITE_MAGIC:
            raise UsageError(
                f"{url} is a SQLite database, and a plain path names a JSONL store directory; "
                f"use --store sqlite:///{url}"
            )


# -- keys of encrypted stores -----------------------------------------------------------------

_HEX_KEY = re.compile(rb"[0-9a-fA-F]{64}")
_KEY_FILE_LIMIT = 4096


@dataclass(frozen=True)
class Secret:
    """What an encrypted store is opened with: a passphrase, a raw 32-byte key, or nothing.

    ``source`` says where it came from, for messages; ``repr`` never shows the secret."""

    passphrase: str | None = field(default=None, repr=False)
    key: bytes | None = field(default=None, repr=False)
    source: str = ""

    def __bool__(self) -> bool:
        return self.passphrase is not None or self.key is not None

    def options(self) -> dict[str, Any]:
        """The ``open_store`` keyword arguments (``passphrase=`` or ``key=``, or none)."""
        if self.key is not None:
            return {"key": self.key}
        if self.passphrase is not None:
            return {"passphrase": self.passphrase}
        return {}

    @property
    def kind(self) -> str:
        """``"passphrase"`` or ``"key"`` (a raw key)."""
        return "key" if self.key is not None else "passphrase"


def read_key_file(path: str) -> Secret:
    """The passphrase or key in the file at ``path``: 64 hex digits (and an optional newline)
    are a raw 32-byte key; anything else is a passphrase, UTF-8 text without its trailing
    newline. Raises :class:`UsageError` (naming the file, never its content) when the file
    cannot be read, is empty, is over 4 KB or is not UTF-8."""
    where = f"the key file {path}"
    try:
        with open(path, "rb") as f:
            data = f.read(_KEY_FILE_LIMIT + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {where}: {exc.strerror or type(exc).__name__}") from None
    if len(data) > _KEY_FILE_LIMIT:
        raise UsageError(f"{where} is over 4 KB: it should hold a passphrase or a key")
    if data.endswith(b"\r\n"):
        data = data[:-2]
    elif data.endswith(b"\n"):
        data = data[:-1]
    if not data:
        raise UsageError(f"{where} is empty: it should hold a passphrase or a key")
    if _HEX_KEY.fullmatch(data):
        return Secret(key=bytes.fromhex(data.decode("ascii")), source=where)
    try:
        passphrase = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(
            f"{where} is neither UTF-8 text (a passphrase) nor 64 hex digits (a raw key)"
        ) from None
    return Secret(passphrase=passphrase, source=where)


def secret_from(key_file: str | None, env: str) -> Secret:
    """The secret a command was given: the key file's, else the environment variable's (an
    empty variable counts as unset), else none."""
    if key_file is not None:
        return read_key_file(key_file)
    passphrase = os.environ.get(env)
    if passphrase:
        return Secret(passphrase=passphrase, source=f"the environment variable {env}")
    return Secret()


def _open_store(url: str, secret: Secret, hint: str, **options: Any) -> BaseStore:
    """``open_store`` with ``secret``; when the store turns out to be encrypted and no secret
    was given, the error says how to give one on the command line (``hint``)."""
    try:
        return open_store(url, **options, **secret.options())
    except EncryptionError as exc:
        if secret:
            raise
        raise EncryptionError(f"{exc}; on the command line, give it with {hint}") from None


_KEY_HINT = f"--key-file PATH or {PASSPHRASE_ENV}"
_DST_KEY_HINT = f"--dst-key-file PATH or {DST_PASSPHRASE_ENV}"


def open_existing(
    url: str,
    *,
    passphrase: str | None = None,
    key: bytes | None = None,
    hint: str = _KEY_HINT,
    read_only: bool = False,
) -> BaseStore:
    """The store at ``url``, which must exist (nothing is created): :class:`NoStore` saying
    "no store at ..." otherwise.

    ``read_only`` (the commands that only read) also changes no schema: an older one is read
    as it is where the backend can, or refused with
    :class:`~agentsession.errors.StoreUnavailable` saying to run ``agentsession migrate``.

    With ``passphrase`` or ``key`` the store must be encrypted: an encrypted store is opened
    with it (:class:`~agentsession.errors.EncryptionError` when it is wrong), while a store
    that is not encrypted raises :class:`UsageError`, so that a command that only reads never
    makes a store encrypted. Without either, opening an encrypted store raises
    :class:`~agentsession.errors.EncryptionError` saying how to give the key (``hint``)."""
    _check_url(url)
    secret = Secret(passphrase=passphrase, key=key)
    options: dict[str, Any] = {"read_only": True} if read_only else {"create": False}
    try:
        plain = _open_store(url, Secret(), hint, **options)
    except EncryptionError:
        if not secret:
            raise
        return _open_store(url, secret, hint, **options)
    except StoreUnavailable as exc:
        message = str(exc)
        if not message.startswith("no store at "):
            raise
        if _is_path(url) and url.lower().endswith(_SQLITE_SUFFIXES) and not os.path.exists(url):
            message += f"; for a SQLite store, use sqlite:///{url}"
        raise NoStore(message) from None
    if secret:
        location = plain.location
        plain.close()
        raise UsageError(
            f"the store {location} is not encrypted, but a {secret.kind} was given: leave it "
            f"out ({hint}) to read this store; to encrypt it, copy it into a new store "
            "(agentsession copy SRC DST --dst-key-file PATH)"
        )
    return plain


def _fold(session_id: str) -> str:
    folded = session_id.casefold()
    if folded.endswith(".jsonl"):
        folded = folded[: -len(".jsonl")]
    return folded.replace("_", ":")


def suggest(store: BaseStore, session_id: str) -> str | None:
    """The id of ``store`` that ``session_id`` most likely meant: the same but for case, ``_``
    for ``:`` or a ``.jsonl`` suffix (the file-name form), or else a close spelling."""
    ids = [info.id for info in store.list()]
    if not ids:
        return None
    stem = session_id[: -len(".jsonl")] if session_id.endswith(".jsonl") else session_id
    decoded = unsafe_name(stem)
    if decoded is not None and decoded in ids and decoded != session_id:
        return decoded
    by_fold: dict[str, str] = {}
    for sid in ids:
        by_fold.setdefault(_fold(sid), sid)
    folded = _fold(session_id)
    if folded in by_fold and by_fold[folded] != session_id:
        return by_fold[folded]
    close = difflib.get_close_matches(folded, list(by_fold), n=1, cutoff=0.8)
    return by_fold[close[0]] if close else None


def _not_found(store: BaseStore, session_id: str, more: int = 0) -> SessionNotFound:
    message = f"no session {session_id!r} in {store.location}"
    if more:
        message += f" (nor {more} more of the ids given)"
    hint = suggest(store, session_id)
    if hint is not None:
        message += f"; did you mean {hint!r}?"
    return SessionNotFound(session_id, message)


@dataclass
class State:
    """What the commands share: the store URL, opened on first use, and where its key comes
    from (read when a command opens the store)."""

    url: str
    debug: bool
    key_file: str | None = None
    _store: BaseStore | None = field(default=None, repr=False)
    _log: _LogHandler | None = field(default=None, repr=False)

    def debug_on(self) -> None:
        """Turn ``--debug`` on after the group started (given after the command)."""
        self.debug = True
        if self._log is not None:
            self._log.debug = True
            self._log.setLevel(logging.DEBUG)
            logging.getLogger().setLevel(logging.DEBUG)

    def secret(self) -> Secret:
        """The store's passphrase or key: ``--key-file``, else ``AGENTSESSION_PASSPHRASE``."""
        return secret_from(self.key_file, PASSPHRASE_ENV)

    def store(self, *, read_only: bool = False) -> BaseStore:
        """The store, opened once; it must exist (no command but the writes creates one).
        Every command that reads the global store opens it here, with its key; a command
        that only reads passes ``read_only`` (no schema is migrated: see
        :func:`open_existing`)."""
        if self._store is None:
            self._store = open_existing(
                self.url, **self.secret().options(), read_only=read_only
            )
        return self._store

    def open_for_writing(self, url: str) -> BaseStore:
        """The store at ``url`` for a write (created when missing), opened with the global
        key: a new or empty store given a key becomes encrypted."""
        _check_url(url)
        return _open_store(url, self.secret(), _KEY_HINT)

    def existing(self, session_id: str, *, read_only: bool = False) -> BaseSession:
        """A session that has events, or :class:`SessionNotFound` (with a suggestion);
        ``read_only`` as for :meth:`store`."""
        store = self.store(read_only=read_only)
        if not store.exists(session_id):
            raise _not_found(store, session_id)
        return store.get(session_id)

    def close(self) -> None:
        """Close the store if it was opened."""
        if self._store is not None:
            self._store.close()
            self._store = None


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


# -- helpers ----------------------------------------------------------------------------------


def _when(time_: dt.datetime | None) -> str:
    if time_ is None:
        return "-"
    return time_.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _size(n: int | None) -> str:
    """A size for people; ``-`` when it is not known."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KB", "MB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def _short(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters; unchanged when ``limit <= 0``."""
    if limit <= 0:
        return text
    text = text.replace("\n", " ⏎ ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _calls_line(text: str, calls: Sequence[view.ToolCallView], limit: int) -> str:
    parts = [_short(text, limit)] if text else []
    for call in calls:
        parts.append(f"→ {call.name}({_short(call.arguments, limit)}) [{call.id}]")
    return "  ".join(parts) or "(empty)"


def _result_line(row: view.ToolResultRow, limit: int) -> str:
    mark = "✗" if row.is_error else "←"
    audit = f" {{{', '.join(f'{k}={v}' for k, v in row.audit.items())}}}" if row.audit else ""
    return f"{mark} {row.name} [{row.call_id}]{audit}: {_short(row.content, limit)}"


def _columns(rows: Sequence[Sequence[str]], right: Iterable[int] = ()) -> Iterator[str]:
    """Rows of cells as aligned lines, nothing cut (widths in terminal cells)."""
    if not rows:
        return
    align_right = set(right)
    widths = [max(cell_len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            pad = " " * (widths[i] - cell_len(cell))
            cells.append(pad + cell if i in align_right else cell + pad)
        yield "  ".join(cells).rstrip()


@contextlib.contextmanager
def _progress(total: int, description: str) -> Iterator[Callable[[], None]]:
    """A progress bar on stderr for ``total`` steps, drawn only when stderr is a terminal and
    there is more than one step; yields the function that advances it."""
    if total < 2 or not _is_terminal(sys.stderr):
        yield lambda: None
        return
    console = _Console(file=sys.stderr, force_terminal=True, highlight=False, emoji=False)
    with Progress(
        console=console,
        transient=True,
        redirect_stdout=_is_terminal(sys.stdout),
        redirect_stderr=False,
    ) as bar:
        task = bar.add_task(description, total=total)
        yield lambda: bar.advance(task)


def _json_line(value: Any) -> None:
    click.echo(encode(value).decode())


# -- ls, stats, rm ----------------------------------------------------------------------------


class _Row(msgspec.Struct):
    """One line of ``ls``: only what ``store.list()`` reports, no event is read."""

    id: str
    last_seq: int | None
    """The session's last seq, which is its number of events; None when the backend does not
    know it cheaply."""
    updated_at: dt.datetime | None
    """When the session was last appended to."""
    size: int | None
    """Bytes in storage; None when the backend does not keep it per session (SQLite,
    PostgreSQL)."""


def _count(n: int | None) -> str:
    return "?" if n is None else str(n)


class _TreeRow(msgspec.Struct):
    """One session of ``ls --tree``: its ``ls`` line, what its parent's children index says
    of it (None for a session shown at the top), and its children in fork order."""

    id: str
    last_seq: int | None
    updated_at: dt.datetime | None
    size: int | None
    agent: str | None = None
    """The subagent working in it, as its parent's index says."""
    state: str | None = None
    """``active``, ``merged`` or ``discarded``."""
    fork_seq: int | None = None
    """The parent's seq it was forked at."""
    shredded: bool = False
    """Its key was destroyed (``shred``): its log cannot be read."""
    children: list[_TreeRow] = []
    """Its child sessions, in fork order."""


def _session_tree(store: BaseStore, infos: Sequence[SessionInfo]) -> list[_TreeRow]:
    """The listed sessions as trees: a listed session is at the top unless it is a child of
    another listed session. A child the listing left out (``--limit``, ``--prefix``) still
    shows under its parent, without what only the listing reports (events, size, time)."""
    listed = {info.id: info for info in infos}
    # One children_of per listed session: it reads the parent's children index (one meta
    # entry; the library also checks each active child's own log for its state), so finding
    # the top sessions never reads every session's events.
    children: dict[str, list[ChildInfo]] = {sid: store.children_of(sid) for sid in listed}
    nested = {child.id for kids in children.values() for child in kids}
    placed: set[str] = set()

    def node(sid: str, fork: ChildInfo | None) -> _TreeRow:
        placed.add(sid)
        info = listed.get(sid)
        kids = children[sid] if sid in children else store.children_of(sid)
        below: list[_TreeRow] = []
        for kid in kids:
            # Once each (a guard against a cycle of reused ids); an unlisted child only when
            # it still exists (the index may keep an ended child that was deleted alone).
            if kid.id not in placed and (kid.id in listed or store.exists(kid.id)):
                below.append(node(kid.id, kid))
        return _TreeRow(
            id=sid,
            last_seq=info.last_seq if info is not None and info.last_seq >= 0 else None,
            updated_at=info.updated_at if info is not None else None,
            size=(info.size or None) if info is not None else None,
            agent=fork.agent if fork is not None else None,
            state=fork.state if fork is not None else None,
            fork_seq=fork.fork_seq if fork is not None else None,
            shredded=fork.shredded if fork is not None else store.is_shredded(sid),
            children=below,
        )

    trees = [node(info.id, None) for info in infos if info.id not in nested]
    # Listed sessions no top session reached (only possible through a cycle) go at the top.
    trees += [node(info.id, None) for info in infos if info.id not in placed]
    return trees


def _tree_state(row: _TreeRow) -> str:
    """The state cell of ``ls --tree``: the child's state, and ``shredded`` for a session
    whose key was destroyed."""
    shown = [clean(row.state)] if row.state else []
    if row.shredded:
        shown.append("shredded")
    return ", ".join(shown) or "-"


def _tree_lines(trees: Sequence[_TreeRow]) -> list[list[str]]:
    """The cells of ``ls --tree``, a child indented under its parent (two spaces a level, so
    the id stays the line's first field)."""
    table: list[list[str]] = []

    def add(row: _TreeRow, level: int) -> None:
        table.append(
            [
                "  " * level + clean(row.id),
                _count(row.last_seq),
                _when(row.updated_at),
                _size(row.size),
                clean(row.agent) if row.agent else "-",
                _tree_state(row),
            ]
        )
        for child in row.children:
            add(child, level + 1)

    for tree in trees:
        add(tree, 0)
    return table


@cli.command(
    "ls",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession ls",
        "agentsession ls --prefix slack: --limit 20",
        "agentsession ls | awk '{print $1}'      # ids, never shortened",
        "agentsession ls --json | jq -r .id",
        "agentsession ls --tree                  # child sessions under their parents",
        "agentsession ls --tree --json | jq '.children[].id'",
    ),
)
@click.option("--prefix", default=None, help="Only ids starting with this.")
@click.option("--limit", type=click.IntRange(min=0), default=None, help="At most this many.")
@click.option(
    "--tree",
    is_flag=True,
    help="Show child sessions (forked for subagents) indented under their parents, in fork "
    "order, with their agent and state; with --json, one nested object per top session.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@pass_state
def ls_command(
    state: State, prefix: str | None, limit: int | None, tree: bool, as_json: bool
) -> None:
    """List sessions, most recently active first (events shows ? when the store cannot tell
    without reading the session; size shows - when the store does not keep it).

    With --tree, a session forked from another listed session is shown under it instead of
    at the top, and its children under it (also those --prefix or --limit left out)."""
    store = state.store(read_only=True)
    if tree:
        trees = _session_tree(store, store.list(prefix=prefix, limit=limit))
        if as_json:
            for top in trees:
                _json_line(top)
        elif not trees:
            _echo(f"no sessions in {clean(store.location)}")
        else:
            table = [["id", "events", "last activity (UTC)", "size", "agent", "state"]]
            for line in _columns(table + _tree_lines(trees), right=(1, 3)):
                _echo(line)
        return
    rows = [
        _Row(
            id=info.id,
            last_seq=info.last_seq if info.last_seq >= 0 else None,
            updated_at=info.updated_at,
            size=info.size or None,
        )
        for info in store.list(prefix=prefix, limit=limit)
    ]
    if as_json:
        for row in rows:
            _json_line(row)
        return
    if not rows:
        _echo(f"no sessions in {clean(store.location)}")
        return
    table = [["id", "events", "last activity (UTC)", "size"]]
    table += [
        [clean(row.id), _count(row.last_seq), _when(row.updated_at), _size(row.size)]
        for row in rows
    ]
    for line in _columns(table, right=(1, 3)):
        _echo(line)


def _store_bytes(store: BaseStore, sizes: Sequence[int]) -> int | None:
    """The store's size: the sum of its sessions' sizes, or the database file's (with its
    write-ahead log) for SQLite, which keeps no size per session; None when unknown."""
    if sizes and all(sizes):
        return sum(sizes)
    from .backends.sqlite import SqliteStore

    if isinstance(store, SqliteStore):
        return sum(
            os.path.getsize(path)
            for path in (store.path, store.path + "-wal")
            if os.path.exists(path)
        )
    return None if sizes else 0


_STAT_LABELS = {"message_events": "message events", "history_messages": "messages in history"}


def _print_stats(title: str, stats: dict[str, Any]) -> None:
    _echo(clean(title))
    for key, value in stats.items():
        if key == "session_id":
            continue  # in the title
        label = _STAT_LABELS.get(key, key.replace("_", " "))
        shown = _size(value) if key == "bytes" else "?" if value is None else str(value)
        _echo(f"{label}: {shown}")


@cli.command(
    "stats",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession stats",
        "agentsession stats slack:C002",
        "agentsession stats --json",
    ),
)
@click.argument("session_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@pass_state
def stats_command(state: State, session_id: str | None, as_json: bool) -> None:
    """Count the store's sessions, events and bytes (from its listing, reading no events; for
    SQLite, bytes is the database file's size); with SESSION_ID, that session's events, turns,
    message events (user and assistant messages stored), messages in history (what the model
    is sent: after compaction, with tool results) and incomplete turns."""
    from .recovery import scan_all_incomplete

    store = state.store(read_only=True)
    stats: dict[str, Any]
    if session_id is None:
        infos = store.list()
        known = all(info.last_seq >= 0 for info in infos)
        stats = {
            "sessions": len(infos),
            "events": sum(info.last_seq for info in infos) if known else None,
            "bytes": _store_bytes(store, [info.size for info in infos]),
        }
        title = f"store: {store.location}"
    else:
        session = state.existing(session_id, read_only=True)
        events = session.read()
        size = next((i.size for i in store.list(prefix=session_id) if i.id == session_id), 0)
        stats = {
            "session_id": session_id,
            "events": len(events),
            "turns": sum(1 for e in events if e.type == ev.TURN_START),
            "message_events": sum(
                1 for e in events if e.type in (ev.USER_MESSAGE, ev.ASSISTANT_MESSAGE)
            ),
            "history_messages": len(session.messages()),
            "incomplete_turns": len(scan_all_incomplete(events)),
            "bytes": size or None,
        }
        title = f"session: {session_id}"
    if as_json:
        _json_line(stats)
    else:
        _print_stats(title, stats)


def _ids_from(arguments: Sequence[str]) -> tuple[list[str], bool]:
    """The ids given, ``-`` replaced by the lines of stdin (blank ones skipped), without
    repeats; and whether stdin was read."""
    ids: list[str] = []
    from_stdin = False
    for argument in arguments:
        if argument == "-":
            if from_stdin:
                continue
            from_stdin = True
            ids.extend(line.strip() for line in sys.stdin if line.strip())
        else:
            ids.append(argument)
    return list(dict.fromkeys(ids)), from_stdin


def _listing(ids: Sequence[str], limit: int = 10) -> str:
    shown = ", ".join(clean(sid) for sid in ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


@cli.command(
    "rm",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession rm slack:C002                 # asks first on a terminal",
        "agentsession rm --dry-run slack:C002 cli:demo",
        "agentsession ls --prefix tmp: | awk 'NR>1 {print $1}' | agentsession rm -y -",
        "agentsession rm -r --dry-run slack:C002    # with its child sessions, and theirs",
    ),
)
@click.argument("session_ids", nargs=-1, required=True)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option(
    "-r",
    "--recursive",
    is_flag=True,
    help="Also delete the sessions' child sessions (forked for subagents), and theirs.",
)
@click.option("--dry-run", is_flag=True, help="Say what would be deleted; delete nothing.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per session.")
@pass_state
def rm_command(
    state: State,
    session_ids: tuple[str, ...],
    yes: bool,
    recursive: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Delete sessions (their events and everything stored beside them), for good.

    SESSION_IDS may be '-' to read ids from stdin, one per line. On a terminal rm asks before
    deleting; elsewhere (a script, ids on stdin) it deletes only with -y/--yes. Nothing is
    deleted when one of the ids does not exist, nor when one has child sessions and
    -r/--recursive is not given (with it, each session's whole subtree goes)."""
    ids, from_stdin = _ids_from(session_ids)
    if not ids:
        raise UsageError("no session ids given (stdin was empty)")
    store = state.store()
    missing = [sid for sid in ids if not store.exists(sid)]
    if missing:
        raise _not_found(store, missing[0], more=len(missing) - 1)
    subtrees = {sid: _descendants(store, sid) for sid in ids}
    if not recursive:
        parents = [sid for sid in ids if subtrees[sid]]
        if parents:
            first = parents[0]
            kids = sum(1 for parent in subtrees[first].values() if parent == first)
            below = len(subtrees[first])
            deeper = f" ({below} sessions below it in all)" if below > kids else ""
            others = len(parents) - 1
            verb = "has" if others == 1 else "have"
            more = f"; {others} more of the ids given {verb} children too" if others else ""
            _fail(
                f"session {first!r} has {kids} child session(s){deeper}{more}: pass "
                "-r/--recursive to delete them with it (rm -r --dry-run shows what would "
                "go); nothing deleted"
            )
    # An id inside the subtree of another id given goes with that one.
    inside = {child for sid in ids for child in subtrees[sid]}
    ids = [sid for sid in ids if sid not in inside]
    parent_of = {child: parent for sid in ids for child, parent in subtrees[sid].items()}
    everything = [item for sid in ids for item in (sid, *subtrees[sid])]
    wanted = set(everything)
    counts: dict[str, int | None] = {
        info.id: info.last_seq if info.last_seq >= 0 else None
        for info in store.list()
        if info.id in wanted
    }

    def child_of(sid: str, before: str) -> str:
        parent = parent_of.get(sid)
        return f"{before}child of {clean(parent)}" if parent is not None else ""

    if dry_run:
        for sid in everything:
            if as_json:
                _json_line({"session_id": sid, "events": counts.get(sid), "deleted": False})
            else:
                events = _count(counts.get(sid))
                _echo(f"would delete {clean(sid)} ({events} events{child_of(sid, ', ')})")
        return
    if not yes:
        if from_stdin or not _is_terminal(sys.stdin):
            why = "the ids came from stdin" if from_stdin else "stdin is not a terminal"
            raise UsageError(
                f"rm deletes for good and asks first, but {why}: pass -y/--yes to delete "
                f"{len(everything)} session(s) without asking (--dry-run shows what would go)"
            )
        question = f"Delete {len(everything)} session(s) for good: {_listing(everything)}?"
        if not click.confirm(question, default=False, err=True):
            click.echo("nothing deleted", err=True)
            raise click.exceptions.Exit(EXIT_ERROR)
    with _progress(len(ids), "deleting") as advance:
        for sid in ids:
            # The library deletes the children first, so an interrupted rm -r leaves the
            # parent (and rm -r can be run again), never children without their parent.
            store.delete(sid, recursive=recursive)
            for gone in (sid, *subtrees[sid]):
                if as_json:
                    _json_line({"session_id": gone, "events": counts.get(gone), "deleted": True})
                else:
                    parent = child_of(gone, "")
                    _echo(f"deleted {clean(gone)}" + (f" ({parent})" if parent else ""))
            advance()


def _descendants(store: BaseStore, session_id: str) -> dict[str, str]:
    """The child sessions of ``session_id``, and theirs, that still exist, each with its
    parent (in fork order, depth first: the order ``rm`` and ``shred -r`` report them in).
    One children index read per session of the subtree; shredded children are found too."""
    return descendants(store, session_id)


# -- rekey, shred ----------------------------------------------------------------------------


def _encrypted_store(state: State, command: str) -> BaseStore:
    """The global store, which must be encrypted (and its key given) for ``command``."""
    if not state.secret():
        raise UsageError(
            f"{command} needs the store's passphrase (or key): give it with --key-file PATH "
            f"or {PASSPHRASE_ENV}"
        )
    store = state.store()
    if not store.encrypted:  # (open_existing refuses a plain store given a key: defensive)
        raise UsageError(f"the store {store.location} is not encrypted")
    return store


@cli.command(
    "rekey",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession --key-file old.key rekey                      # asks twice, hidden",
        "agentsession --key-file old.key rekey --new-key-file new.key --json",
        "AGENTSESSION_PASSPHRASE=... agentsession rekey --new-key-file new.key",
    ),
)
@click.option(
    "--new-key-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Read the new passphrase from this file (as --key-file: text, or 64 hex digits for "
    "a raw key). Without it, rekey asks for it twice on a terminal, with hidden input.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@pass_state
def rekey_command(state: State, new_key_file: str | None, as_json: bool) -> None:
    """Change an encrypted store's passphrase (or key).

    The current one comes from --key-file or AGENTSESSION_PASSPHRASE and is checked first.
    One record is rewritten atomically (the store's key, wrapped anew), so it takes the same
    time however much the store holds, and a crash leaves the old or the new passphrase
    working. Processes that have the store open keep working."""
    store = _encrypted_store(state, "rekey")
    if new_key_file is not None:
        new = read_key_file(new_key_file)
    elif _is_terminal(sys.stdin):
        text = click.prompt(
            "New passphrase",
            hide_input=True,
            confirmation_prompt=True,
            err=True,
            type=str,
        )
        if not text:
            raise UsageError("the new passphrase is empty")
        new = Secret(passphrase=text, source="the terminal")
    else:
        raise UsageError(
            "rekey asks for the new passphrase on a terminal, but stdin is not a terminal: "
            "give it with --new-key-file PATH"
        )
    old = state.secret()
    store.change_passphrase(old.passphrase, new.passphrase, old_key=old.key, new_key=new.key)
    if as_json:
        _json_line({"store": store.location, "changed": True, "new": new.kind})
    else:
        _echo(clean(f"changed the {new.kind} of {store.location}"))


@cli.command(
    "shred",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession --key-file store.key shred slack:C002        # asks first on a terminal",
        "agentsession --key-file store.key shred -y --json slack:C002 cli:demo",
        "agentsession --key-file store.key shred -r -y slack:C002  # and its child sessions",
        "agentsession ls | awk 'NR>1 && /^tmp:/ {print $1}' | agentsession shred -y -",
    ),
)
@click.argument("session_ids", nargs=-1, required=True)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option(
    "-r",
    "--recursive",
    is_flag=True,
    help="Also shred the sessions' child sessions (forked for subagents, holding copies of "
    "their parent's history), and theirs.",
)
@click.option(
    "--keep-children",
    is_flag=True,
    help="Shred a session that has child sessions alone: its children keep their copies of "
    "its history (a warning names them).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per session.")
@pass_state
def shred_command(
    state: State,
    session_ids: tuple[str, ...],
    yes: bool,
    recursive: bool,
    keep_children: bool,
    as_json: bool,
) -> None:
    """Destroy the keys of sessions of an encrypted store, so their events can never be read
    again, here or in any copy of the logs (crypto-shredding; docs/security.md says what stays
    visible and what a backup of the key records taken before can still open).

    The logs stay (delete them with rm); reading or appending to a shredded session fails.
    A child session (forked for a subagent) holds a copy of its parent's history: a session
    with children not shredded yet is shredded only with -r/--recursive (its whole subtree)
    or --keep-children (it alone; a warning names the children that keep copies).
    SESSION_IDS may be '-' to read ids from stdin, one per line. On a terminal shred asks
    first; elsewhere it shreds only with -y/--yes. Nothing is shredded when one of the ids
    does not exist, nor when one has children and neither option is given."""
    if recursive and keep_children:
        raise UsageError("give -r/--recursive or --keep-children, not both")
    ids, from_stdin = _ids_from(session_ids)
    if not ids:
        raise UsageError("no session ids given (stdin was empty)")
    store = _encrypted_store(state, "shred")
    missing = [sid for sid in ids if not store.exists(sid)]
    if missing:
        raise _not_found(store, missing[0], more=len(missing) - 1)
    subtrees = {sid: _descendants(store, sid) for sid in ids}
    # The children that hold copies still readable (a shredded child holds none).
    keeping = {
        sid: [c for c, p in subtrees[sid].items() if p == sid and not store.is_shredded(c)]
        for sid in ids
    }
    if not recursive:
        parents = [sid for sid in ids if keeping[sid]]
        if parents and not keep_children:
            first = parents[0]
            others = len(parents) - 1
            verb = "has" if others == 1 else "have"
            more = f"; {others} more of the ids given {verb} children too" if others else ""
            _fail(
                f"session {clean(first)!r} has {len(keeping[first])} child session(s) holding "
                f"copies of its history ({_listing(keeping[first], 5)}){more}: pass "
                "-r/--recursive to shred them too, or --keep-children to shred it alone; "
                "nothing shredded"
            )
        subtrees = {sid: {} for sid in ids}
    # An id inside the subtree of another id given goes with that one.
    inside = {child for sid in ids for child in subtrees[sid]}
    ids = [sid for sid in ids if sid not in inside]
    parent_of = {child: parent for sid in ids for child, parent in subtrees[sid].items()}
    everything = [item for sid in ids for item in (sid, *subtrees[sid])]
    if not yes:
        if from_stdin or not _is_terminal(sys.stdin):
            why = "the ids came from stdin" if from_stdin else "stdin is not a terminal"
            raise UsageError(
                f"shred destroys keys for good and asks first, but {why}: pass -y/--yes to "
                f"shred {len(everything)} session(s) without asking"
            )
        question = (
            f"Shred {len(everything)} session(s) for good (their events can never be read "
            f"again): {_listing(everything)}?"
        )
        if not click.confirm(question, default=False, err=True):
            click.echo("nothing shredded", err=True)
            raise click.exceptions.Exit(EXIT_ERROR)
    with _progress(len(ids), "shredding") as advance:
        for sid in ids:
            done = store.shred(sid, recursive=recursive, keep_children=keep_children)
            for gone in done:
                parent = parent_of.get(gone)
                if as_json:
                    line: dict[str, Any] = {"session_id": gone, "shredded": True}
                    if parent is not None:
                        line["parent"] = parent
                    _json_line(line)
                else:
                    below = f" (child of {clean(parent)})" if parent is not None else ""
                    _echo(f"shredded {clean(gone)}{below}")
            if keep_children and keeping[sid]:
                click.echo(
                    f"warning: the child sessions of {clean(sid)} keep copies of its history: "
                    f"{_listing(keeping[sid])} (shred them too, or rm them)",
                    err=True,
                )
            advance()


# -- show, tail, messages ---------------------------------------------------------------------


def _e(text: str) -> str:
    """Stored text made safe for Rich markup."""
    return escape(text)


def _n(name: str) -> str:
    """A name (a session id, a store path, an agent, user or subagent name) made safe for
    Rich markup, its control characters escaped, newline and tab included: unlike a
    message's text, which keeps its lines, a name is printed on one line."""
    return escape(clean(name))


def _row_markup(row: view.Row, limit: int) -> str:
    """The Rich markup of one transcript row after its seq and indent (every value escaped)."""
    name = view.speaker(row)
    who = f" [dim]({_n(name)})[/]" if name else ""
    if isinstance(row, view.UserMessageRow):
        user = f" {_n(row.user)}" if row.user else ""
        return f"[bold green]user{user}{who}:[/] {_e(_calls_line(row.text, [], limit))}"
    if isinstance(row, view.AssistantMessageRow):
        line = _e(_calls_line(row.text, row.tool_calls, limit))
        return f"[bold magenta]assistant{who}:[/] {line}"
    if isinstance(row, view.ToolResultRow):
        style = "red" if row.is_error or row.interrupted else "yellow"
        return f"[{style}]{_e(_result_line(row, limit))}[/]"
    if isinstance(row, view.ToolCallRow):
        return f"[dim]tool call started: {_n(f'{row.name} [{row.call_id}]')}[/]"
    if isinstance(row, view.UsageRow):
        return f"[dim]usage: {row.input_tokens} in / {row.output_tokens} out[/]"
    if isinstance(row, view.TodoRow):
        items = ", ".join(f"[{'x' if t.done else ' '}] {t.title}" for t in row.items)
        return f"todos: {_e(items)}"
    if isinstance(row, view.RunFinishRow):
        return f"[bold]run {_n(row.status)}[/]: {_e(_short(row.summary, limit))}"
    if isinstance(row, view.SubagentStartRow):
        mode = " (in the background)" if row.background else ""
        task = _e(_short(row.task, limit))
        return (
            f"[bold]subagent {_n(row.subagent)}[/] started{mode} in session "
            f"{_n(row.child_session)}: {task}"
        )
    if isinstance(row, view.SubagentEndRow) and row.status == "merged":
        if row.merge_mode == "messages":
            what = f": {row.merged_messages} message(s) written here"
        elif row.summary:
            mode = "as a summary: " if row.merge_mode == "summary" else ""
            what = f": {mode}{_e(_short(row.summary, limit))}"
        else:
            what = ""
        return (
            f"[bold]subagent {_n(row.subagent)}[/] merged from session "
            f"{_n(row.child_session)}{what}"
        )
    if isinstance(row, view.SubagentEndRow) and row.status == "discarded":
        reason = f": {_e(_short(row.summary, limit))}" if row.summary else ""
        return (
            f"[bold]subagent {_n(row.subagent)}[/] discarded (session "
            f"{_n(row.child_session)}, nothing of it written here){reason}"
        )
    if isinstance(row, view.SubagentEndRow):
        error = f" · [red]{_e(_short(row.error, limit))}[/]" if row.error else ""
        summary = _e(_short(row.summary, limit))
        return (
            f"[bold]subagent {_n(row.subagent)}[/] {_n(row.status or 'ended')} "
            f"after {row.steps} step(s): {summary}{error}"
        )
    if isinstance(row, view.ForkRow):
        task = f" · task: {_e(_short(row.task, limit))}" if row.task else ""
        return (
            f"[bold black on cyan] FORK [/] from session {_n(row.parent)} at its seq "
            f"{row.parent_seq} for subagent {_n(row.subagent)} · "
            f"{row.inherited_messages} message(s) inherited{task}"
        )
    if isinstance(row, view.MergeRow):
        what = "a summary" if row.mode == "summary" else f"{row.messages} message(s)"
        return (
            f"[bold black on green] MERGED [/] into session {_n(row.parent)}: {what}, "
            f"ending at its seq {row.parent_seq}"
        )
    if isinstance(row, view.DiscardRow):
        reason = f": {_e(_short(row.reason, limit))}" if row.reason else ""
        return (
            f"[bold white on magenta] DISCARDED [/] session {_n(row.parent)} noted it at "
            f"its seq {row.parent_seq}{reason}"
        )
    if isinstance(row, view.SkillLoadRow):
        about = f": {_e(_short(row.description, limit))}" if row.description else ""
        return f"[bold]skill {_n(row.name)}[/] loaded{about}"
    if isinstance(row, view.EventRow):
        return f"[dim]{_n(row.type)}{who}: {_e(_short(row.data, limit))}[/]"
    return f"[dim]{_n(row.kind)}{who}[/]"  # a row kind this renderer does not know


def _forked_line(fork: view.ForkRow, rows: Sequence[view.Row]) -> str:
    """The markup of the line under a child session's header: where it was forked from and
    how it ended (the last merge or discard mark decides, as the library reads it)."""
    ending = "active (neither merged nor discarded)"
    for row in rows:
        if isinstance(row, view.MergeRow):
            ending = f"merged into it at its seq {row.parent_seq}"
        elif isinstance(row, view.DiscardRow):
            ending = f"discarded (noted at its seq {row.parent_seq})"
    agent = f" for subagent {_n(fork.subagent)}" if fork.subagent else ""
    return (
        f"[bold]child of session {_n(fork.parent)}[/], forked at its seq {fork.parent_seq}"
        f"{agent} · {ending}"
    )


def _transcript(
    session: BaseSession, events: Sequence[Event], full: bool
) -> Iterator[tuple[str, str]]:
    """``(gutter, body)`` pairs of Rich markup for a person reading the session, grouped by
    turn and step: the rows of :func:`agentsession.view.transcript_rows`. The gutter is the
    event's seq ("" for the header and the blank line before a turn); every stored value is
    escaped for markup, and control characters are escaped by the caller."""
    limit = 0 if full else view.PREVIEW_CHARS
    rows = view.transcript_rows(events, full=full)
    turns = sum(1 for row in rows if isinstance(row, view.TurnStartRow))
    yield (
        "",
        f"[bold]session {_n(session.id)}[/] · {len(events)} events · "
        f"{turns} turn{'' if turns == 1 else 's'} · {_n(session.location)}",
    )
    if rows and isinstance(rows[0], view.ForkRow):
        yield "", _forked_line(rows[0], rows)
    for row in rows:
        seq = f"{row.seq:>5}"
        indent = "│ " * row.depth
        who = f" [dim]({_n(row.agent)})[/]" if row.agent else ""
        if isinstance(row, view.TurnStartRow):
            user = f" · user {_n(row.user)}" if row.user else ""
            yield "", ""
            yield seq, f"[bold cyan]┌─ turn[/]{who}{user} · {_when(row.time)}"
        elif isinstance(row, view.TurnEndRow):
            tokens = (row.input_tokens, row.output_tokens)
            usage = f" · {tokens[0]} in / {tokens[1]} out tokens" if any(tokens) else ""
            error = ""
            if row.error_type or row.error_message:
                failure = _e(f"{row.error_type} {row.error_message}".strip())
                error = f" · [bold red]failed: {failure}[/]"
            steps = f"{row.steps} step" + ("" if row.steps == 1 else "s")
            yield seq, f"[bold cyan]└─ end of turn[/] · {steps}{usage}{error}"
        elif isinstance(row, view.StepStartRow):
            yield seq, f"{indent}[cyan]┌ step {row.step}[/]"
        elif isinstance(row, view.StepEndRow):
            yield seq, f"{indent}[cyan]└ end of step {row.step}[/]"
        elif isinstance(row, view.RecoveryRow):
            closed = f"closed step {row.closed_step}" if row.closed_step >= 0 else "no open step"
            yield (
                seq,
                f"[bold white on red] RECOVERY [/] the turn from seq {row.turn_start_seq} "
                f"was cut off: {row.orphan_results} tool call(s) answered as interrupted, "
                f"{closed}",
            )
        elif isinstance(row, view.CompactionRow):
            summary = _short(row.summary, limit) if row.summary else "(prune, no summary)"
            yield (
                seq,
                f"[bold black on yellow] COMPACTION [/] {_n(row.compaction_kind)}: history "
                f"before seq {row.first_kept_seq} replaced; {row.kept_messages} messages kept"
                f" · {_e(summary)}",
            )
        else:
            yield seq, f"{indent}{_row_markup(row, limit)}"


def _print_transcript(pairs: Iterable[tuple[str, str]]) -> None:
    """Plain lines when stdout is not a terminal (whole, never wrapped: long lines stay one
    line, continuation lines of a multi-line text are indented past the gutter); on a
    terminal, a two-column grid that wraps a long line beside its seq."""
    safe = ((gutter, clean(body, layout=True)) for gutter, body in pairs)
    if not _is_terminal(sys.stdout):
        for gutter, body in safe:
            text = _plain(body).replace("\n", "\n" + " " * 6)
            _echo(f"{gutter} {text}" if gutter else text)
        return
    console = _console()
    grid: Table | None = None
    for gutter, body in safe:
        if not gutter:
            if grid is not None:
                console.print(grid)
                grid = None
            console.print(body, soft_wrap=True)
            continue
        if grid is None:
            grid = Table.grid(padding=(0, 1))
            grid.add_column(justify="right", no_wrap=True, style="dim", min_width=5)
            grid.add_column(overflow="fold")
        grid.add_row(gutter.strip(), body)
    if grid is not None:
        console.print(grid)


@cli.command(
    "show",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession show slack:C002",
        "agentsession show slack:C002 --full | less",
        "agentsession show slack:C002 --json | jq -c 'select(.type == \"tool/result\")'",
        "agentsession show slack:C002 --json --rows | jq -c 'select(.kind == \"subagent_end\")'",
    ),
)
@click.argument("session_id")
@click.option("--full", is_flag=True, help="Do not shorten long texts and results.")
@click.option("--json", "as_json", is_flag=True, help="Print the raw events, one per line.")
@click.option(
    "--rows",
    is_flag=True,
    help="With --json: print the transcript's rows instead of the events, one JSON object "
    "per line with snake_case keys and a 'kind' (user_message, fork, merge, ...).",
)
@pass_state
def show_command(state: State, session_id: str, full: bool, as_json: bool, rows: bool) -> None:
    """Show a session's transcript, grouped by turn and step.

    A child session (forked for a subagent) starts with the parent and the parent's seq it
    was forked at; in a parent, the subagent lines name the child session, to show next."""
    if rows and not as_json:
        raise UsageError("--rows goes with --json (it chooses what --json prints)")
    session = state.existing(session_id, read_only=True)
    events = session.read()
    if rows:
        rows_out = view.transcript_rows(events, full=full)
        _write_bytes(b"".join(encode(row) + b"\n" for row in rows_out))
        return
    if as_json:
        _write_bytes(b"".join(encode_event(event) + b"\n" for event in events))
        return
    _print_transcript(_transcript(session, events, full))


def _event_line(event: Event) -> str:
    agent = f" {event.agent}" if event.agent else ""
    data = _short(event.raw.decode("utf-8", "replace"), 200)
    return clean(f"{event.seq:>6} {_when(event.time)} {event.type}{agent} {data}")


@cli.command(
    "tail",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession tail slack:C002",
        "agentsession tail -f -n 0 slack:C002      # waits for a session that does not exist",
        "agentsession tail slack:C002 --json | head -1",
    ),
)
@click.argument("session_id")
@click.option("-f", "--follow", is_flag=True, help="Keep printing events as they arrive.")
@click.option(
    "-n",
    "--lines",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="How many of the latest events to print first.",
)
@click.option("--json", "as_json", is_flag=True, help="Print raw JSON lines.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.01),
    default=0.2,
    show_default=True,
    help="Seconds between checks when following.",
)
@pass_state
def tail_command(
    state: State, session_id: str, follow: bool, lines: int, as_json: bool, interval: float
) -> None:
    """Print a session's latest events; with -f, follow new ones (also from other processes),
    waiting for the session when it does not exist yet."""
    store = state.store(read_only=True)
    if not store.exists(session_id):
        if not follow:
            raise _not_found(store, session_id)
        hint = suggest(store, session_id)
        click.echo(
            clean(
                f"waiting for session {session_id!r} in {store.location} (it has no events yet"
                + (f"; did you mean {hint!r}?" if hint else "")
                + ")"
            ),
            err=True,
        )
    session = store.get(session_id)
    latest = session.latest_seq
    last = max(0, latest - lines)
    out = sys.stdout

    def emit(batch: list[Event]) -> int:
        for event in batch:
            out.write((encode_event(event).decode() if as_json else _event_line(event)) + "\n")
        out.flush()
        return batch[-1].seq if batch else 0

    last = emit(session.read(after=last)) or last
    try:
        while follow:
            time.sleep(interval)
            last = emit(session.read(after=last)) or last
    except KeyboardInterrupt:
        raise click.exceptions.Exit(EXIT_INTERRUPTED) from None  # Ctrl-C is how -f ends


def _message_lines(message: Message) -> Iterator[str]:
    """A message for people: its role (and author or name), then its parts, calls and
    results; whole, with newlines kept."""
    who = message.author or message.name
    head = f"{message.role}" + (f" ({who})" if who else "") + ":"
    body: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            body.append(part.text)
        elif isinstance(part, ThinkingPart):
            body.append(f"[thinking: {len(part.text)} characters]")
        elif isinstance(part, RefusalPart):
            body.append(f"[refused: {part.text}]")
        elif isinstance(part, (ImagePart, FilePart)):
            kind = "image" if isinstance(part, ImagePart) else "file"
            where = part.source or part.url or (f"{len(part.data)} characters inline")
            body.append(f"[{kind} {part.mime} {where}]".replace("  ", " "))
        else:
            body.append(f"[attachment {part.mime} {part.source or part.url}]".replace("  ", " "))
    for call in message.tool_calls:
        body.append(f"→ {call.name}({encode(call.arguments).decode()}) [{call.id}]")
    for result in message.tool_results:
        mark = "✗" if result.is_error else "←"
        audit = ", ".join(f"{k}={v}" for k, v in result.audit.items())
        audit = f" {{{audit}}}" if audit else ""
        body.append(f"{mark} {result.name} [{result.call_id}]{audit}: {result.content}")
    text = "\n".join(body) or "(empty)"
    first, *rest = clean(text, layout=True).split("\n")
    yield f"{clean(head)} {first}"
    for line in rest:
        yield f"    {line}"


@cli.command(
    "messages",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession messages slack:C002",
        "agentsession messages slack:C002 --agent demo-coder",
        "agentsession messages slack:C002 --json | jq '.[-1]'",
    ),
)
@click.argument("session_id")
@click.option("--agent", default=None, help="Only this agent's view of the history.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the messages as a JSON array, in the stored message format.",
)
@pass_state
def messages_command(state: State, session_id: str, agent: str | None, as_json: bool) -> None:
    """Print the model-visible history: what would be sent to a model next."""
    session = state.existing(session_id, read_only=True)
    history = session.messages(agent=agent)
    if agent:
        agents = {event.agent for event in session.read() if event.agent}
        if agent not in agents:
            known = ", ".join(repr(a) for a in sorted(agents)) or "none"
            click.echo(
                clean(
                    f"note: no event of session {session_id!r} is by agent {agent!r}, so only "
                    f"events without an agent are shown (agents in it: {known})"
                ),
                err=True,
            )
    if as_json:
        _write_bytes(pretty(encode(history)) + b"\n")
        return
    for message in history:
        for line in _message_lines(message):
            _echo(line)


# -- repair, compact, copy, migrate -----------------------------------------------------------


@cli.command(
    "repair",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession repair --all --dry-run",
        "agentsession repair --all --dry-run --exit-code || echo 'something to repair'",
        "agentsession repair slack:C002",
    ),
)
@click.argument("session_ids", nargs=-1)
@click.option("--all", "all_sessions", is_flag=True, help="Every session in the store.")
@click.option("--dry-run", is_flag=True, help="Report what would be repaired; write nothing.")
@click.option(
    "--exit-code",
    is_flag=True,
    help="Exit with status 1 when a session has (or, without --dry-run, had) turns to repair.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON report per session.")
@pass_state
def repair_command(
    state: State,
    session_ids: tuple[str, ...],
    all_sessions: bool,
    dry_run: bool,
    exit_code: bool,
    as_json: bool,
) -> None:
    """Repair turns a crash cut off (those whose turn lock is free); with --dry-run, report
    every session named (or, with --all, every session) and what a repair would write."""
    if bool(session_ids) == all_sessions:
        raise UsageError("name sessions to repair, or pass --all (not both)")
    store = state.store(read_only=dry_run)
    for sid in session_ids:
        if not store.exists(sid):
            raise _not_found(store, sid)
    ids = list(dict.fromkeys(session_ids)) or [info.id for info in store.list()]
    reports: list[StoreRecoveryReport] = []
    # The reports below say what the recovery log says: keep its warnings off stderr.
    with _quiet("agentsession.recovery"), _progress(len(ids), "repairing") as advance:
        for sid in ids:
            for report in store.recover([sid], dry_run=dry_run):
                quiet = ("clean", "expired", "shredded")
                shown = dry_run or session_ids or report.status not in quiet
                if shown:
                    reports.append(report)
                    if as_json:
                        _json_line(report)
                    else:
                        _echo_report(report, dry_run=dry_run)
            advance()
    if not reports and not as_json:
        _echo("nothing to repair")
    damaged = [r.session_id for r in reports if r.status == "damaged"]
    if damaged:
        _fail(f"{len(damaged)} session(s) could not be read or repaired: {', '.join(damaged)}")
    if exit_code and any(r.status in ("pending", "live", "repaired") for r in reports):
        raise click.exceptions.Exit(EXIT_ERROR)


def _echo_report(report: StoreRecoveryReport, *, dry_run: bool) -> None:
    sid = clean(report.session_id)
    if report.status in ("pending", "live") and dry_run:
        what = ", ".join(
            f"turn at seq {t.turn_start_seq} ({t.orphan_results} unanswered calls)"
            for t in report.turns
        )
        live = "live (turn lock held), " if report.status == "live" else ""
        _echo(f"{sid}: {live}would repair {what}")
    elif report.status == "repaired":
        results = sum(t.orphan_results for t in report.turns if t.repaired)
        repaired = sum(1 for t in report.turns if t.repaired)
        _echo(f"{sid}: repaired {repaired} turn(s), {results} interrupted tool result(s) recorded")
    elif report.status == "live":
        _echo(f"{sid}: live (turn lock held), left alone")
    elif report.status == "expired":
        _echo(f"{sid}: expired (older than the store's TTL), left alone")
    elif report.status == "shredded":
        _echo(f"{sid}: shredded (its key is destroyed), left alone")
    elif report.status == "damaged":
        _echo(f"{sid}: damaged, left alone: {clean(report.error)}")
    else:
        _echo(f"{sid}: clean")


def _compaction_effects(store: BaseStore, session: BaseSession) -> list[str]:
    """What a compaction does not change for the event types in ``session``, as the code that
    wrote them recorded it (meta namespace ``compaction-effect``, keyed by type namespace)."""
    namespaces = sorted({e.type.split("/", 1)[0] for e in session.read() if "/" in e.type})
    notes = (store.meta_get(COMPACTION_EFFECT_KIND, name) for name in namespaces)
    return [note for note in notes if note]


@cli.command(
    "compact",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession compact slack:C001 --keep-turns 2 --summary 'The user fixed parse().'",
        "summarise.sh | agentsession compact slack:C001 --keep-turns 2 --summary-file -",
    ),
)
@click.argument("session_id")
@click.option("--summary", default=None, help="The summary text.")
@click.option(
    "--summary-file",
    type=click.File("r", encoding="utf-8"),
    default=None,
    help="Read the summary from a file ('-' for stdin).",
)
@click.option(
    "--keep-turns",
    type=click.IntRange(min=0),
    required=True,
    help="How many of the latest turns to keep verbatim.",
)
@click.option("--agent", default=None, help="Compact only this agent's history.")
@click.option(
    "--lock-timeout",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="Seconds to wait for the session's turn lock (a running turn holds it).",
)
@click.option(
    "--no-lock",
    is_flag=True,
    help="Do not take the turn lock. Unsafe while an agent is running the session: a turn in "
    "progress may be summarised away half-done.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@pass_state
def compact_command(
    state: State,
    session_id: str,
    summary: str | None,
    summary_file: Any,
    keep_turns: int,
    agent: str | None,
    lock_timeout: float,
    no_lock: bool,
    as_json: bool,
) -> None:
    """Replace older history by a summary, keeping the latest turns (nothing is deleted).

    Takes the session's turn lock first, so it never cuts into a turn an agent is running;
    the marker is appended only if nothing was appended while it was planned."""
    if (summary is None) == (summary_file is None):
        raise UsageError("give the summary with --summary TEXT or --summary-file FILE")
    text = summary if summary is not None else summary_file.read()
    if not text.strip():
        raise UsageError("the summary is empty")
    session = state.existing(session_id)
    store = state.store()
    with contextlib.ExitStack() as held:
        if not no_lock:
            try:
                held.enter_context(store.lock(session_id, timeout=lock_timeout))
            except LockTimeout:
                raise LockTimeout(
                    session_id,
                    lock_timeout,
                    f"session {session_id!r} is busy: its turn lock is held (an agent is running "
                    f"a turn); waited {lock_timeout:g} s. Try again later, or pass --no-lock "
                    "(unsafe)",
                ) from None
        seq = session.compact(Message.user(text.strip()), keep_turns=keep_turns, agent=agent)
    if seq is None:
        if as_json:
            _json_line({"session_id": session_id, "seq": None})
        else:
            _echo(
                f"{clean(session_id)}: nothing to compact (it has at most {keep_turns} turns)"
            )
        return
    marker = session.read(after=seq - 1, limit=1)[0].decode(ev.Compaction)
    for note in _compaction_effects(store, session):
        click.echo(f"warning: {clean(session_id)}: {clean(note)}", err=True)
    if as_json:
        _json_line(
            {
                "session_id": session_id,
                "seq": seq,
                "first_kept_seq": marker.first_kept_seq,
                "kept_messages": len(marker.retained_tail),
            }
        )
        return
    _echo(
        f"{clean(session_id)}: compacted at seq {seq}; history before seq "
        f"{marker.first_kept_seq} is now the summary, {len(marker.retained_tail)} "
        "messages kept"
    )


@cli.command(
    "copy",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession copy ./.agentsession sqlite:///sessions.db",
        "agentsession copy ./.agentsession postgresql://app@db/agents --skip-existing",
        "agentsession copy ./.agentsession ./backup --id slack:C002",
        "agentsession copy ./.agentsession ./encrypted --dst-key-file ~/.agentsession-key",
        "agentsession --key-file ~/.agentsession-key copy ./encrypted ./plain",
    ),
)
@click.argument("source")
@click.argument("destination")
@click.option("--id", "ids", multiple=True, help="Copy only this session (repeatable).")
@click.option(
    "--dst-key-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="The destination's passphrase, in a file (as --key-file; default: the environment "
    "variable AGENTSESSION_DST_PASSPHRASE). A new or empty destination becomes encrypted with "
    "it; without it the copy is plain. The source's key is the global --key-file.",
)
@click.option(
    "--skip-existing",
    is_flag=True,
    help="Leave sessions the destination already has; complete those an interrupted copy "
    "left half-copied (so running the same copy again resumes it).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@pass_state
def copy_command(
    state: State,
    source: str,
    destination: str,
    ids: tuple[str, ...],
    dst_key_file: str | None,
    skip_existing: bool,
    as_json: bool,
) -> None:
    """Copy sessions, and everything stored beside them, from one store to another; verify.

    The source must exist (nothing is created there); the destination is created when
    missing. Each session is created in the destination atomically with its first 1000
    events, the rest follow in batches of 1000; then its record, children index and binding,
    and (copying the whole store) the active-session map, the CLI pointer and integration
    state: every meta entry but the key records. Event times are kept, and so is a JSONL
    session's last activity. The copy is read back and verified: event counts, last seqs, ids
    and a digest of the events, and every meta entry. Encryption is each store's own: the
    source is opened with the global key (--key-file, AGENTSESSION_PASSPHRASE), the
    destination with --dst-key-file or AGENTSESSION_DST_PASSPHRASE, so a copy encrypts a plain
    store, decrypts an encrypted one, or changes its key. A shredded session cannot be read,
    so a copy of the whole store leaves it out (and says so); naming it with --id is an
    error."""
    _check_url(destination)
    dst_secret = secret_from(dst_key_file, DST_PASSPHRASE_ENV)
    src = open_existing(source, **state.secret().options(), read_only=True)
    dst: BaseStore | None = None
    try:
        missing = [sid for sid in dict.fromkeys(ids) if not src.exists(sid)]
        if missing:  # before the destination is created
            raise _not_found(src, missing[0], more=len(missing) - 1)
        dst = _open_store(destination, dst_secret, _DST_KEY_HINT)
        with contextlib.ExitStack() as bar:
            advance: list[Callable[[], None]] = []

            def progress(done: int, total: int, session_id: str) -> None:
                if not advance:
                    advance.append(bar.enter_context(_progress(total, "copying")))
                advance[0]()

            report = copy_store(
                src, dst, ids=ids or None, skip_existing=skip_existing, progress=progress
            )
    finally:
        src.close()
        if dst is not None:
            dst.close()
    if as_json:
        _json_line(report)
        return
    line = (
        f"copied {report.sessions} sessions ({report.events} events) and {report.meta} meta "
        f"entries from {report.source} to {report.destination}; event counts, last seqs, ids "
        f"and digests and {report.verified_meta} meta entries verified"
    )
    if report.completed:
        line += f"; completed {len(report.completed)} that an earlier copy left half-copied"
    if report.skipped:
        line += f"; skipped {len(report.skipped)} already there"
    if report.meta_kept:
        kept = [f"{kind} {key}" for kind, key in report.meta_kept]
        line += (
            f"; kept {len(kept)} meta entries the destination holds with other values "
            f"({_listing(kept)})"
        )
    if report.shredded:
        line += f"; left out {len(report.shredded)} shredded ({_listing(report.shredded)})"
    _echo(clean(line))


@cli.command(
    "migrate",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession --store postgresql://app@db/agents migrate",
        "agentsession --store sqlite:///sessions.db migrate --json",
    ),
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@pass_state
def migrate_command(state: State, as_json: bool) -> None:
    """Apply pending schema migrations to a SQL store (opening a store applies them too;
    run this from a deploy step when workers open stores with auto_migrate=False). Stores
    without a schema (JSONL) have nothing to migrate.

    A directory or SQLite file must hold a store already ("no store at ...", exit 4: a
    mistyped path has nothing to migrate); on a PostgreSQL server, migrate creates the
    store's tables in their schema when they are not there yet (the deploy step)."""
    _check_url(state.url)
    scheme = state.url.strip().partition(":")[0].lower()
    if _is_path(state.url) or scheme not in ("postgresql", "postgres"):
        # An encrypted store exists as well; its schema needs no key. Opened read-only, so
        # that the migrations are applied (and reported) below, not by this check.
        try:
            open_existing(state.url, read_only=True).close()
        except NoStore:
            raise
        except (EncryptionError, StoreUnavailable):
            pass  # it exists: a schema too old to read is what migrate is for
    applied = migrate_store(state.url)
    if as_json:
        _json_line({"applied": applied})
    elif applied:
        _echo("applied migrations " + ", ".join(map(str, applied)))
    else:
        _echo("nothing to migrate (the schema is up to date, or this store has no schema)")


@cli.command(
    "demo",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession demo",
        "agentsession demo /tmp/demo && agentsession --store /tmp/demo ls",
    ),
)
@click.argument("directory", default="./agentsession-demo")
@click.option(
    "--json", "as_json", is_flag=True, help="Print only a JSON summary of what was written."
)
def demo_command(directory: str, as_json: bool) -> None:
    """Run a scripted agent through three conversations, crash one, recover and compact.

    The store is built beside DIRECTORY and moved into place when it is complete, so an
    interrupted demo leaves no half-written store (an earlier demo's stays as it was)."""
    from .demo import run_demo

    # Long lines stay whole (the terminal wraps them), so the printed commands copy cleanly.
    console = _Console(
        file=sys.stdout, soft_wrap=True, highlight=False, emoji=False, quiet=as_json
    )
    result = run_demo(directory, console)
    if as_json:
        _json_line(
            {
                "store": result.location,
                "sessions": [
                    {"id": sid, "events": events} for sid, events in result.sessions.items()
                ],
                "commands": result.commands,
            }
        )


# -- serve ------------------------------------------------------------------------------------

_WEB_MODULES = ("starlette", "uvicorn", "markdown_it", "anyio")
"""The modules ``serve`` needs beyond the command line's (the ``web`` extra)."""


@cli.command(
    "serve",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession serve --store ./agentsession-demo",
        "agentsession serve --open                 # and open it in the browser",
        "agentsession serve --port 0 --json        # a free port; prints {\"url\": ...}",
        "agentsession serve --host 0.0.0.0         # prints a URL with a new access token",
        "AGENTSESSION_SERVE_TOKEN=... agentsession serve --host 0.0.0.0 --port 8080",
    ),
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on. Loopback (the default) is this machine only; any other "
    "address needs an access token (generated and printed when --token is not given).",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8765,
    show_default=True,
    help="Port to listen on (0: a free one, printed).",
)
@click.option(
    "--token",
    envvar="AGENTSESSION_SERVE_TOKEN",
    default=None,
    help="The access token every request must present (env AGENTSESSION_SERVE_TOKEN, which "
    "keeps it out of the process list). Default: none on loopback, a new random one otherwise.",
)
@click.option("--open", "open_browser", is_flag=True, help="Open the viewer in a web browser.")
@click.option(
    "--store",
    "store_url",
    default=None,
    help="The store to serve (as the global --store, which is the default; it must exist).",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print where it listens as one JSON object."
)
@pass_state
def serve_command(
    state: State,
    host: str,
    port: int,
    token: str | None,
    open_browser: bool,
    store_url: str | None,
    as_json: bool,
) -> None:
    """Serve a read-only web viewer of the store's sessions until Ctrl-C (docs/web.md).

    The sessions page lists every session, newest first; a session's page shows its turns and
    steps, tool calls with their results, usage charts, links between parent and child
    sessions, what the model sees, and new events as other processes append them. Nothing is
    written. Needs the web extra: pip install 'agentsession[web]'."""
    missing = [name for name in _WEB_MODULES if _module_missing(name)]
    if missing:
        _fail(
            "serve needs the web extra: pip install 'agentsession[web]' "
            f"(missing: {', '.join(missing)})"
        )
    from .web.server import Serving, serve

    if store_url is not None:
        state.close()
        state.url = store_url
    store = state.store(read_only=True)  # with its key, for an encrypted store

    def ready(serving: Serving) -> None:
        if as_json:
            _json_line(
                {
                    "url": serving.url,
                    "host": serving.host,
                    "port": serving.port,
                    "store": serving.store,
                    "token_required": serving.token,
                }
            )
            return
        _echo(clean(f"serving {serving.store} read-only at {serving.url}"))
        if serving.token:
            _echo("the URL carries the access token: whoever has it can read every session")
        _echo("press Ctrl-C to stop")

    # Ctrl-C is how serve ends: uvicorn stops, then raises the interrupt again; a quiet 0.
    with contextlib.suppress(KeyboardInterrupt):
        serve(
            store,
            host=host,
            port=port,
            token=token,
            open_browser=open_browser,
            ready=ready,
            log_level="info" if state.debug else "warning",
        )


def _module_missing(name: str) -> bool:
    """Whether the module ``name`` cannot be found (without importing it)."""
    import importlib.util

    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return True


# -- import -----------------------------------------------------------------------------------


@cli.group(
    "import",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession import agentkit ~/.agentkit/sessions --dry-run",
        "agentsession import agentkit ./sessions --store sqlite:///sessions.db",
        "agentsession import lango ~/.lango/lango.db --store ./.agentsession --json",
    ),
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print a JSON object (the same as --json after the subcommand).",
)
@click.pass_context
def import_group(ctx: click.Context, as_json: bool) -> None:
    """Import the sessions of another agent runtime into a store (docs/import.md).

    The source is only read. Everything in it is read and checked first, so a source that
    cannot be read whole imports nothing; a session the store already has is skipped and
    reported, never changed. At the end every imported session is read back and its event
    count (for agentkit, its seqs) compared with the source's."""
    ctx.meta["agentsession.import_json"] = as_json


_STORE_OPTION = click.option(
    "--store",
    "store_url",
    default=None,
    help="The store to import into (created when missing); default: the global --store "
    "(env AGENTSESSION_STORE, else ./.agentsession).",
)
_DRY_RUN_OPTION = click.option(
    "--dry-run", is_flag=True, help="Say what would be imported; write nothing."
)
_JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")

_IDENTITY_LABELS = {"active": "active session", "bind": "agent binding", "cli": "CLI pointer"}


def _run_import(
    state: State, store_url: str | None, source: Any, dry_run: bool, as_json: bool
) -> None:
    """Import a scanned source into the store and print what happened."""
    from .interop.importers import SessionOutcome, import_source

    as_json = as_json or bool(click.get_current_context().meta.get("agentsession.import_json"))
    url = store_url if store_url is not None else state.url
    _check_url(url)
    store: BaseStore | None
    if dry_run:
        try:
            store = open_existing(url, **state.secret().options(), read_only=True)
        except NoStore:
            store = None  # a dry run creates nothing; every session would be new
    else:
        store = state.open_for_writing(url)
    try:
        with _progress(len(source.sessions), "importing") as advance:

            def progress(_outcome: SessionOutcome) -> None:
                advance()

            report = import_source(source, store, dry_run=dry_run, progress=progress)
        destination = report.destination or url
        if as_json:
            _json_line(
                {
                    "source_kind": report.source_kind,
                    "source": report.source,
                    "destination": destination,
                    "dry_run": report.dry_run,
                    "sessions_found": report.found,
                    "imported": report.imported,
                    "skipped": report.skipped,
                    "events": report.events,
                    "verified": report.verified,
                    "sessions": [
                        {
                            "session_id": s.session_id,
                            "source": s.source,
                            "events": s.events,
                            "status": s.status,
                            "guessed_id": s.guessed_id,
                        }
                        for s in report.sessions
                    ],
                    "identity": [
                        {"kind": i.kind, "key": i.key, "value": i.value, "status": i.status}
                        for i in report.identity
                    ],
                    "notes": report.notes,
                }
            )
            return
        for note in report.notes:
            click.echo(clean(f"note: {note}"), err=True)
        for s in report.sessions:
            guessed = " [id read from the file name]" if s.guessed_id else ""
            if s.status in ("imported", "would_import"):
                verb = "imported" if s.status == "imported" else "would import"
                _echo(clean(f"{verb} {s.session_id} ({s.events} events) from {s.source}{guessed}"))
            else:
                verb = "skipped" if s.status == "skipped" else "would skip"
                _echo(clean(f"{verb} {s.session_id}: already in {destination}"))
        for i in report.identity:
            label = _IDENTITY_LABELS.get(i.kind, i.kind)
            what = f"{i.key} → {i.value}" if i.kind != "cli" else i.value
            status = {
                "written": "set",
                "would_write": "would set",
                "skipped": "kept the store's",
                "would_skip": "would keep the store's",
            }[i.status]
            _echo(clean(f"{status} {label}: {what}"))
        counts = (
            f"sessions found {report.found}, "
            f"{'would import' if dry_run else 'imported'} {report.imported}, "
            f"{'would skip' if dry_run else 'skipped'} {report.skipped} (already there), "
            f"events {report.events}"
        )
        if dry_run:
            _echo(clean(f"dry run: {counts}; nothing written to {destination}"))
        else:
            checked = (
                "event counts and seqs" if report.source_kind == "agentkit" else "event counts"
            )
            _echo(clean(f"{counts} into {destination}; {checked} verified"))
    finally:
        source.close()
        if store is not None:
            store.close()


def _id_map(pairs: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, sid = pair.partition("=")
        if not sep or not name or not sid.strip():
            raise UsageError(
                f"--id-map takes FILE=ID (a log's file name and a session id), not {pair!r}"
            )
        out[name] = sid
    return out


@import_group.command(
    "agentkit",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession import agentkit ./sessions --dry-run",
        "agentsession import agentkit ./sessions --store sqlite:///sessions.db",
        "agentsession import agentkit ./sessions --id-map chat-api_default_channel.jsonl="
        "chat-api:default_channel",
    ),
)
@click.argument("directory")
@_STORE_OPTION
@click.option(
    "--id-map",
    "id_map",
    multiple=True,
    metavar="FILE=ID",
    help="Import the log FILE as session ID (repeatable): agentkit's file names replace every "
    "character but A-Z a-z 0-9 . _ - by _, so an id is read back from a name by convention "
    "(_ as :) when the directory names it nowhere else.",
)
@_DRY_RUN_OPTION
@_JSON_OPTION
@pass_state
def import_agentkit_command(
    state: State,
    directory: str,
    store_url: str | None,
    id_map: tuple[str, ...],
    dry_run: bool,
    as_json: bool,
) -> None:
    """Import an agentkit sessions directory: every <session>.jsonl log, the agent bindings
    (<session>/runtime.json or agent.json), the active-session map (<key>/current.json) and the
    CLI pointer (cli_current.jsonl). agentkit's seqs are kept."""
    from .interop.importers import SourceNotFound, scan_agentkit_dir

    try:
        source = scan_agentkit_dir(directory, id_map=_id_map(id_map))
    except SourceNotFound as exc:
        raise NoStore(str(exc)) from None
    _run_import(state, store_url, source, dry_run, as_json)


@import_group.command(
    "lango",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession import lango ~/.lango/lango.db --dry-run",
        "agentsession import lango ~/.lango/lango.db --store postgresql://app@db/agents",
    ),
)
@click.argument("database")
@_STORE_OPTION
@_DRY_RUN_OPTION
@_JSON_OPTION
@pass_state
def import_lango_command(
    state: State, database: str, store_url: str | None, dry_run: bool, as_json: bool
) -> None:
    """Import a lango SQLite database (opened read-only): each row of sessions becomes a session
    with the id of its key, its messages become user, assistant and tool events, a compacted
    summary a compaction marker, and its agent_id the session's agent binding. An encrypted
    (SQLCipher) database is refused: decrypt it first."""
    from .interop.importers import SourceNotFound, scan_lango_db

    try:
        source = scan_lango_db(database)
    except SourceNotFound as exc:
        raise NoStore(str(exc)) from None
    _run_import(state, store_url, source, dry_run, as_json)


_accept_global_options(cli)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``agentsession`` command."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="agentsession")
