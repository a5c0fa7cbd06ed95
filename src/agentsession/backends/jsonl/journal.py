"""The change journal of a JSONL directory store: ``.meta/catalog.journal``, one entry per
append naming the session appended to, which the catalog sidecar reads to catch up
(:mod:`.sidecar`).

An append writes its session's entry with one ``write()`` on a descriptor opened with
``O_APPEND``, holding the session file's lock and a shared ``flock`` of the journal, *before*
it writes the log line: an event a reader can see is named in the journal, even when its
writer dies between the two writes (an entry naming no new event costs the reader one look).
The shared lock is what lets the reader empty the journal once it has consumed all of it
(under an exclusive lock, taken without waiting).

An entry is a newline, the session id as a JSON string and a newline: a torn entry (a write
cut short) can only spoil itself, as the next one starts on a line of its own; a line that is
not a JSON string is skipped.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import threading
from collections.abc import Iterator
from typing import Final

from ..._files import O_CLOEXEC, O_NOFOLLOW, pread_all, private_dirs
from ...errors import StorageError

try:
    import fcntl
except ImportError as exc:  # not POSIX (Windows): no flock
    from ...locks import file_locks_unavailable

    raise file_locks_unavailable(
        "the JSONL store's catalog journal",
        "open a SQLite ('sqlite:///file.db') or PostgreSQL store instead",
    ) from exc

__all__ = ["JOURNAL_NAME", "Journal", "entry_of", "read_entries"]

JOURNAL_NAME: Final = "catalog.journal"
"""The journal's file name in the store's ``.meta`` directory."""

_flock, _LOCK_SH, _LOCK_UN, _write = fcntl.flock, fcntl.LOCK_SH, fcntl.LOCK_UN, os.write


def entry_of(session_id: str) -> bytes:
    """The journal entry naming ``session_id`` (ASCII: a lone surrogate an id may hold is
    escaped, as every character outside ASCII is)."""
    return b"\n" + json.dumps(session_id).encode("ascii") + b"\n"


class Journal:
    """The writers' side of one store directory's journal: a descriptor opened when first
    written (owner-only), kept open, reopened in a forked child. Threads of a process take
    turns (a ``flock`` belongs to the descriptor, which they share)."""

    def __init__(self, root: str, directory: str) -> None:
        self._root = root
        self._directory = directory
        self.path = os.path.join(directory, JOURNAL_NAME)
        """The journal file."""
        self._fd = -1
        self._mutex = threading.Lock()

    def _open(self) -> int:
        try:
            private_dirs(self._root, self._directory)
            fd = os.open(
                self.path,
                os.O_WRONLY | os.O_APPEND | os.O_CREAT | O_CLOEXEC | O_NOFOLLOW,
                0o600,
            )
        except OSError as exc:
            what = "is a symbolic link" if exc.errno == errno.ELOOP else str(exc)
            raise StorageError(f"cannot open the catalog journal {self.path}: {what}") from None
        self._fd = fd
        return fd

    def note(self, entry: bytes) -> None:
        """Append ``entry`` (see :func:`entry_of`) under a shared lock of the journal."""
        with self._mutex:
            fd = self._fd
            if fd < 0:
                fd = self._open()
            try:
                _flock(fd, _LOCK_SH)
                try:
                    _write(fd, entry)
                finally:
                    _flock(fd, _LOCK_UN)
            except OSError as exc:
                raise StorageError(
                    f"cannot write the catalog journal {self.path}: {exc}"
                ) from exc

    def close(self) -> None:
        """Close the descriptor (reopened when written again)."""
        with self._mutex:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __del__(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)

    def after_fork(self) -> None:
        """In a forked child: stop sharing the descriptor (and its lock) with the parent."""
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = -1
        self._mutex = threading.Lock()


def read_entries(fd: int, start: int, end: int) -> tuple[Iterator[str], int]:
    """The session ids named from offset ``start`` up to the last complete entry before
    ``end``, and the offset after that entry (what a reader has consumed)."""
    data = pread_all(fd, end - start, start)
    stop = data.rfind(b"\n") + 1
    return _ids(data[:stop]), start + stop


def _ids(data: bytes) -> Iterator[str]:
    for line in data.split(b"\n"):
        if not line:
            continue
        try:
            found = json.loads(line)
        except ValueError:
            continue  # a torn entry (or stray bytes): the next one is whole
        if isinstance(found, str):
            yield found
