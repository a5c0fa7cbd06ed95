"""The ``agentsession`` command line: inspect, follow, repair, compact, rewind, branch and copy
sessions.

A thin click layer over the library: each module of this package is one group of commands
that parses its arguments, calls the library and prints (``sessions``: ls, stats, rm;
``catalog``: search, reindex, totals, and the catalog options ls takes;
``transcript``: show, tail, messages; ``keys``: rekey, shred; ``maintenance``: repair, compact,
rewind, branch (``branch --list`` lists branches), copy, migrate; ``serve``; ``imports``;
``demo``), over what they share (``_output``: printing and exit statuses; ``_state``: opening
stores and their keys; ``_group``: the group and its global options). The store is chosen by
``--store URL`` or the ``AGENTSESSION_STORE`` environment variable (default: the JSONL
directory ``./.agentsession``).

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
* **Reading writes nothing**: ``ls``, ``stats``, ``search``, ``totals``, ``show``,
  ``messages``, ``tail``, ``repair --dry-run``, ``branch --list`` and ``serve`` change no byte
  of the store (a torn JSONL tail is read up to, and left for the next writer) and work on a
  store the process may only read; a write to such a store fails with one line saying why
  (``docs/safety.md``). They (and ``copy``'s source and ``import --dry-run``) open it with
  ``read_only=True``, so an older SQL schema is never migrated: it is read as it is, or refused
  saying to run ``agentsession migrate``.
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

from collections.abc import Sequence

# Importing the command modules registers their commands on the group.
from . import (  # noqa: F401
    catalog,
    demo,
    imports,
    keys,
    maintenance,
    retention,
    serve,
    sessions,
    transcript,
)
from ._group import _accept_global_options, cli
from ._output import (
    EXIT_BROKEN_PIPE,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    clean,
)
from ._state import (
    DST_PASSPHRASE_ENV,
    PASSPHRASE_ENV,
    NoStore,
    Secret,
    open_existing,
    read_key_file,
    suggest,
)

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
    "cli",
    "main",
    "open_existing",
    "read_key_file",
    "suggest",
]

_accept_global_options(cli)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``agentsession`` command."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="agentsession")
