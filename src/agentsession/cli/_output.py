"""What every command prints through: exit statuses, terminal-safe text, the console,
one-line errors, the log on stderr, and the formatting helpers (times, sizes, columns, JSON
lines, a progress bar)."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import IO, Any, NoReturn

import click
from rich.cells import cell_len
from rich.console import Console
from rich.progress import Progress
from rich.text import Text

from ..errors import UsageError
from ..events import encode

EXIT_ERROR = 1
"""An error (also: ``repair --exit-code`` found something to repair; a wrong or missing key
of an encrypted store, or sealed data that does not open)."""
EXIT_USAGE = 2
"""A usage error: a bad option or argument, or the library's ``UsageError``."""
EXIT_NOT_FOUND = 4
"""No such session, or no store at the path given."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (SIGINT) ended the command: 128 + SIGINT, quietly. ``serve`` and ``tail -f``
run until Ctrl-C, so for them a first Ctrl-C is success (0)."""
EXIT_BROKEN_PIPE = 141
"""Stdout was closed before the output was written (``| head``): 128 + SIGPIPE, the status a
shell reports for a Unix tool killed by SIGPIPE. Nothing is printed."""


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


def is_terminal(stream: IO[Any]) -> bool:
    """Whether ``stream`` is a terminal (tests replace this: callers look it up here, as
    ``_output.is_terminal``)."""
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
def _progress(total: int | None, description: str) -> Iterator[Callable[[], None]]:
    """A progress bar on stderr for ``total`` steps (None: not known, the steps done are
    counted), drawn only when stderr is a terminal and there is more than one step; yields the
    function that advances it."""
    if (total is not None and total < 2) or not is_terminal(sys.stderr):
        yield lambda: None
        return
    console = _Console(file=sys.stderr, force_terminal=True, highlight=False, emoji=False)
    with Progress(
        console=console,
        transient=True,
        redirect_stdout=is_terminal(sys.stdout),
        redirect_stderr=False,
    ) as bar:
        task = bar.add_task(description, total=total)
        yield lambda: bar.advance(task)


def _json_line(value: Any) -> None:
    click.echo(encode(value).decode())


def _count(n: int | None) -> str:
    return "?" if n is None else str(n)


def _ids_from(arguments: Sequence[str]) -> tuple[list[str], bool]:
    """The ids given, ``-`` replaced by the lines of stdin (blank ones skipped), without
    repeats; and whether stdin was read. None at all (an empty stdin) is a usage error."""
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
    if not ids:
        raise UsageError("no session ids given (stdin was empty)")
    return list(dict.fromkeys(ids)), from_stdin


def _ask_first(
    *, yes: bool, from_stdin: bool, asks: str, instead: str, question: str, declined: str
) -> None:
    """Go on only when the user agreed: with -y/--yes, or by answering ``question`` on a
    terminal. Ids from stdin, or no terminal, and no -y/--yes: a usage error
    (``"{asks}, but {why}: pass -y/--yes to {instead}"``); a question answered no: ``declined``
    and the error exit status."""
    if yes:
        return
    if from_stdin or not is_terminal(sys.stdin):
        why = "the ids came from stdin" if from_stdin else "stdin is not a terminal"
        raise UsageError(f"{asks}, but {why}: pass -y/--yes to {instead}")
    if not click.confirm(question, default=False, err=True):
        click.echo(declined, err=True)
        raise click.exceptions.Exit(EXIT_ERROR)


def _others_too(others: int) -> str:
    """The end of a refusal naming the first id that has children: how many more do."""
    verb = "has" if others == 1 else "have"
    return f"; {others} more of the ids given {verb} children too" if others else ""


def _listing(ids: Sequence[str], limit: int = 10) -> str:
    shown = ", ".join(clean(sid) for sid in ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")
