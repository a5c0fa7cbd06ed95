"""One session's log file: opening it, the tail scan, appending, catching up, reading, and
torn tails and bad lines (see the package docstring for the guarantees).

The file's line dialect (:class:`~agentsession.interop.jsonl_layout.LineDialect`) is chosen
from its first bytes when it is opened, or is the store layout's for a new file; appending
and the backwards scan for a compaction marker call it and never ask which one it is.
"""

from __future__ import annotations

import contextlib
import errno
import io
import itertools
import logging
import operator
import os
import stat
from collections.abc import Callable, Iterator
from typing import Any, Literal, Protocol, TypeVar

import msgspec

from ..._files import O_CLOEXEC, O_NOFOLLOW, O_NONBLOCK, pread_all, sync_dir
from ...contract import Durability
from ...errors import CorruptLogError, StorageError, StoreUnavailable
from ...events import Event, decode_event_lines
from ...interop.jsonl_layout import JsonlLayout
from ...storage import REOPEN, LogView, Reopen
from .journal import Journal, entry_of
from .layout import lines_of
from .lines import (
    HAS_MORE,
    HEAD_BYTES,
    SEQ_HEAD,
    complete_json,
    decode_line,
    head_seq,
    is_blank,
    next_seq,
)

try:
    import fcntl
except ImportError as exc:  # not POSIX (Windows): no flock, and no os.pread either
    from ...locks import file_locks_unavailable

    raise file_locks_unavailable(
        "the JSONL store's session files",
        "open a SQLite ('sqlite:///file.db') or PostgreSQL store instead",
    ) from exc

__all__ = ["JsonlLog", "LogFiles", "LogHost"]

log = logging.getLogger("agentsession.backends.jsonl")
_T = TypeVar("_T")

_CHUNK = 4 << 20
_SMALL_CHUNK = 16 << 10  # what a read of a few events takes at a time
_BACK_CHUNK = 1 << 20
_TAIL_BYTES = 64 << 10
"""How much of the end of a log opening a session reads (whole lines): the events that
``latest_seq``, a TTL check and a read of recent events need, without the history."""
_ORDER_PROBE_LINES = 64
"""How many blank (quarantined) lines before a log's tail opening steps over to find the seq
the tail must follow."""
_SEARCH_SPAN = 64 << 10  # below this many bytes, reading beats seeking
# Why opening a log to write can fail where opening it to read would not.
_READ_ONLY_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS)

_flock, _LOCK_EX, _LOCK_UN = fcntl.flock, fcntl.LOCK_EX, fcntl.LOCK_UN
_lseek, _write, _SEEK_END = os.lseek, os.write, os.SEEK_END
_replace = msgspec.structs.replace
_seq_of = operator.attrgetter("seq")
_lt = operator.lt
_islice = itertools.islice

try:
    _datasync = os.fdatasync
except AttributeError:  # pragma: no cover - macOS
    _datasync = os.fsync


class LogHost(Protocol):
    """The store settings a log file reads when it uses them (they may change on the store)."""

    durability: Durability
    on_corrupt: Literal["raise", "quarantine"]


class LogFiles(msgspec.Struct, frozen=True):
    """What a log file needs of the JSONL store that holds it, handed to it when it is made:
    the store's layout and its services for session files."""

    layout: JsonlLayout
    """The store's layout: the dialect of new files, whether appends claim a name."""
    check_open: Callable[[], None]
    """Raise when the store is closed (a log of a closed store is not opened again)."""
    track_open: Callable[[JsonlLog], None]
    """Count an opened log file (the store bounds how many stay open)."""
    untrack_open: Callable[[JsonlLog], None]
    """Stop counting a closed log file."""
    write_id_sidecar: Callable[[str, str], None]
    """Record the id (first argument) beside its file (second) where the layout says to."""
    quarantine: Callable[[str, bytes, str, int, str], None]
    """Append bytes taken out of a log (path, data, reason, offset, session id) to its
    sidecar."""
    encrypted: bool
    """Whether the store seals its events (a dialect that cannot hold them refuses)."""
    journal: Journal | None = None
    """The store's change journal, written before each append's lines (None: the store
    keeps no catalog)."""


class _BadLine(Exception):
    """A line that does not parse, found while decoding a region."""

    def __init__(self, offset: int, length: int, reason: str, parsed: list[Event]) -> None:
        self.offset = offset  # of the line's first byte
        self.length = length  # including its newline
        self.reason = reason
        self.parsed = parsed  # good events before it in the region


class JsonlLog:
    """One session's log as one JSONL file: the JSONL store's
    :class:`~agentsession.storage.LogStorage` (see the module docstring for the guarantees).

    The log remembers which file it read (device, inode and the head of its first line) and
    where it read to. When the path names another file than the one read (deleted, perhaps
    created again), or the file shrank below what was read, or this process was forked, the log
    answers :data:`~agentsession.storage.REOPEN` from ``refresh`` and ``append`` (writing
    nothing) and the session opens it again."""

    # Few attributes: past CPython's 30 shared keys an instance's attribute reads get slower,
    # and the append fast path reads several of them.

    def __init__(self, store: LogHost, files: LogFiles, session_id: str, path: str) -> None:
        self._store = store
        self._files = files
        self._id = session_id
        self._path = path
        self._file: io.FileIO | None = None
        self._fd = -1
        self._size = 0  # bytes consumed; always ends at a line boundary
        self._locked = False  # whether this log holds the file lock now
        self._ident: tuple[int, int, bytes] | None = None  # which file was read (_identity)
        # Set when the file read is gone (another file at the path, or a forked child): the
        # next refresh or append answers REOPEN, and opening clears it.
        self._reload = False
        self._lines = files.layout.new_lines  # the file's line dialect (_detect)
        self._claimed = False  # whether this id is recorded beside an agentkit-named file
        self._writable = False  # whether the open descriptor may write (else opened read-only)
        self._entry = entry_of(session_id) if files.journal is not None else b""

    # -- files ----------------------------------------------------------------------------

    @property
    def path(self) -> str:
        """The session's log file."""
        return self._path

    @property
    def location(self) -> str:
        """The session's log file."""
        return self._path

    @property
    def identity(self) -> tuple[str, ...]:
        """The log file's path (two logs of one file are one log)."""
        return ("jsonl", self._path, self._id)

    def _error(self, action: str, exc: OSError) -> StorageError:
        return StorageError(
            f"session {self._id!r}: {action} {self._path} failed: "
            f"{exc.strerror or exc} (errno {exc.errno})"
        )

    def _open_fd(self, create: bool) -> bool:
        """Open the log (creating it with ``create``); False when it does not exist.

        The file must be a regular file reached without a symbolic link. When the path now
        names another file than the one this log read before (deleted and created again, or
        replaced), nothing read of the old one applies: the log starts again at the new file's
        start and asks the session to reopen it (``_reload``), so no stale offset is ever
        applied to the new file.
        """
        if self._fd >= 0:
            if self._writable or not create:
                return True
            self._close_fd()  # opened read-only: reopen to write (or say why it cannot)
        self._files.check_open()  # a session of a closed store is not used again
        flags = os.O_RDWR | os.O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK
        writable = True
        try:
            try:
                fd = os.open(self._path, flags | (os.O_CREAT if create else 0), 0o600)
            except OSError as exc:
                if create or exc.errno not in _READ_ONLY_ERRNOS:
                    raise
                # A log on a read-only mount, or one this process may only read: reading
                # needs no more (a writer reopens it, and then fails with this error).
                fd = os.open(self._path, flags & ~(os.O_RDWR | os.O_APPEND))
                writable = False
        except FileNotFoundError:
            if not create:
                return False
            raise StoreUnavailable(
                f"session {self._id!r}: the store directory {os.path.dirname(self._path)} is gone"
            ) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise StorageError(
                    f"session {self._id!r}: {self._path} is a symbolic link; session files "
                    "must be regular files inside the store"
                ) from None
            raise self._error("opening", exc) from exc
        try:
            st = os.fstat(fd)
        except OSError as exc:
            os.close(fd)
            raise self._error("opening", exc) from exc
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise StorageError(
                f"session {self._id!r}: {self._path} is not a regular file "
                f"(mode {stat.filemode(st.st_mode)}); refusing to use it"
            )
        ident = _identity(fd, st)
        if self._ident is not None and ident != self._ident:
            # Another file than the one read before: nothing read of it applies.
            self._size = 0
            self._reload = True
        self._ident = ident
        self._detect(ident[2])
        self._file = io.FileIO(fd, "r+" if writable else "r", closefd=True)
        self._fd = fd
        self._writable = writable
        files = self._files
        files.track_open(self)
        if create:
            files.write_id_sidecar(self._id, self._path)
            if st.st_size == 0 and self._store.durability == "fsync":
                # A new log's name (and its id sidecar's) must survive a power loss as well as
                # the lines synced into it: not every file system commits a new directory entry
                # with the file's own sync.
                sync_dir(os.path.dirname(self._path))
        return True

    def _detect(self, head: bytes) -> None:
        """The file's dialect, from its first bytes: a file keeps the dialect of its first line
        (so a log another program owns stays readable to it); an empty one takes the store's."""
        self._lines = lines_of(head) if head else self._files.layout.new_lines

    def close(self) -> None:
        """Close the file's descriptor (the log reopens it when used again)."""
        self._close_fd()

    def _close_fd(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._ident = _identity(self._fd, os.fstat(self._fd))
            self._file.close()
            self._files.untrack_open(self)
        self._file = None
        self._fd = -1
        self._writable = False

    def close_if_idle(self) -> None:
        """Close the descriptor unless this log holds the file lock (it reopens on use): how
        the store bounds the files it keeps open, holding the session's lock (taken without
        waiting), so that no other call of the log runs meanwhile."""
        if not self._locked:
            self._close_fd()

    def after_fork(self) -> None:
        """In a forked child: stop sharing the descriptor (and so its ``flock``) with the
        parent; the session opens the log afresh when next used (``REOPEN``)."""
        # The inherited descriptor shares its open file description, and so its flock, with
        # the parent: close this process's copy and read the file afresh when next used.
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
        self._file = None
        self._fd = -1
        self._writable = False
        self._locked = False
        self._reload = True

    def _unlock_fd(self) -> None:
        self._locked = False
        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _with_lock(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run ``fn`` holding the file lock (re-entrant for this log)."""
        if self._locked:
            return fn(*args)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        self._locked = True
        try:
            return fn(*args)
        finally:
            self._unlock_fd()

    # -- loading --------------------------------------------------------------------------

    def open(self, view: LogView) -> tuple[list[Event], bool]:
        """The window: every event from the latest compaction marker on."""
        return self._open(window=True)

    def open_tail(self, view: LogView) -> tuple[list[Event], bool]:
        """The last :data:`_TAIL_BYTES` or so of whole lines (from a compaction marker in
        them, when there is one)."""
        return self._open(window=False)

    def _open(self, window: bool) -> tuple[list[Event], bool]:
        """Open the file as it is now: whatever was read before no longer applies."""
        self._size = 0
        self._reload = False
        if not self._open_fd(create=False):
            self._ident = None  # no file: the next one created is this log's
            return [], True
        self._reload = False
        try:
            return self._load_tail(locked=self._locked, window=window)
        except OSError as exc:
            raise self._error("reading", exc) from exc

    def _load_tail(
        self, locked: bool, window: bool = True, end: int | None = None
    ) -> tuple[list[Event], bool]:
        """The events from the latest compaction marker on (``window``), or only the last
        :data:`_TAIL_BYTES` or so of whole lines, of the log up to ``end`` (default: its size).
        A torn tail is absent: with ``locked`` (a writer) it is moved aside first; without,
        nothing is written and the events end before it. Sets :attr:`_size` to the end of the
        last complete line, so that the next writer's catch-up finds the torn tail."""
        fd = self._fd
        size = os.fstat(fd).st_size if end is None else end
        if size == 0:
            self._size = 0
            return [], True
        if os.pread(fd, 1, size - 1) != b"\n" or self._ends_in_open_batch(size):
            size = self._cut_torn_tail(size) if locked else self._complete_end(size)
            if size == 0:
                self._size = 0
                return [], True
        if window:
            start = self._find_last_marker(size)
            begin = 0 if start is None else start
        else:
            floor = 0 if size <= _TAIL_BYTES else self._line_start_before(size - _TAIL_BYTES)
            start = self._find_last_marker(size, floor)
            begin = floor if start is None else start
        try:
            events = self._decode_region(begin, size, tail=True)
            while not events and begin > 0:  # only blank (quarantined) lines in the tail
                begin = self._line_start_before(max(0, begin - _TAIL_BYTES))
                events = self._decode_region(begin, size, tail=True)
            if begin > 0 and events and self._out_of_order_before(begin, events[0].seq):
                # A line before the tail carries a seq the tail does not follow (lines moved,
                # pasted or damaged): the tail's last seq is not the log's. Read the whole
                # log, whose line checks find the damage (raise, or move the lines aside).
                begin = 0
                events = self._decode_region(0, size, tail=True)
        except _BadLine as bad:
            if not locked:
                return self._load_tail(False, window, bad.offset)  # read as if it were cut
            self._quarantine_tail(bad.offset, size, f"unparsable last line: {bad.reason}")
            return self._load_tail(True, window)
        self._size = size
        return events, begin == 0

    def _out_of_order_before(self, begin: int, first: int) -> bool:
        """Whether the last readable line before ``begin`` (a line start; blank, quarantined
        lines stepped over, at most :data:`_ORDER_PROBE_LINES` of them) has a seq of ``first``
        or above, the seq of the line at ``begin``: seqs rise through a log, so the tail that
        starts there does not end the log."""
        end = begin
        for _ in range(_ORDER_PROBE_LINES):
            if end <= 0:
                return False
            start = self._line_start_before(end - 1)
            found = SEQ_HEAD.match(os.pread(self._fd, HEAD_BYTES, start))
            if found is not None:
                return head_seq(found) >= first
            end = start
        return False

    def _ends_in_open_batch(self, size: int) -> bool:
        start = self._line_start_before(size - 1)
        return bool(HAS_MORE.match(os.pread(self._fd, 32, start)))

    def _line_start_before(self, end: int) -> int:
        """Offset of the first byte after the last newline strictly before ``end``."""
        pos, step = end, 4096  # most lines are shorter: read little first, more when needed
        while pos > 0:
            begin = max(0, pos - step)
            chunk = os.pread(self._fd, pos - begin, begin)
            nl = chunk.rfind(b"\n")
            if nl != -1:
                return begin + nl + 1
            pos, step = begin, min(step * 2, 65536)
        return 0

    def _complete_end(self, size: int) -> int:
        """The end of the log's first ``size`` bytes without an unterminated last line or an
        unfinished batch: where a torn tail starts (``size`` when there is none)."""
        end = size
        if os.pread(self._fd, 1, size - 1) != b"\n":
            end = self._line_start_before(size)
        while end > 0:
            start = self._line_start_before(end - 1)
            if not HAS_MORE.match(os.pread(self._fd, 32, start)):
                break
            end = start
        return end

    def _cut_torn_tail(self, size: int) -> int:
        """With the lock held: move an unterminated last line and any unfinished batch aside."""
        end = self._complete_end(size)
        self._quarantine_tail(end, size, "torn write at the end of the log")
        return end

    def _quarantine_tail(self, offset: int, size: int, reason: str) -> None:
        """With the lock held: copy ``[offset, size)`` to the sidecar and truncate the log."""
        data = pread_all(self._fd, size - offset, offset)
        self._files.quarantine(self._path, data, reason, offset, self._id)
        os.ftruncate(self._fd, offset)
        if self._store.durability == "fsync":
            _datasync(self._fd)

    def _find_last_marker(self, size: int, floor: int = 0) -> int | None:
        """Offset of the last compaction marker line, scanning backwards from the end down to
        ``floor`` (a line start)."""
        fd = self._fd
        needle, head = self._lines.marker_type, self._lines.marker_head
        end = size
        carry = b""
        while end > floor:
            begin = max(floor, end - _BACK_CHUNK)
            chunk = os.pread(fd, end - begin, begin) + carry
            region = chunk.find(b"\n") + 1 if begin > floor else 0
            stop = len(chunk)
            while True:
                hit = chunk.rfind(needle, region, stop)
                if hit == -1:
                    break
                line = chunk.rfind(b"\n", 0, hit) + 1
                if line >= region and head.match(chunk, line, hit):
                    return begin + line
                stop = hit
            carry = chunk[:region]
            end = begin
        return None

    def _line_number(self, offset: int) -> int:
        count, pos = 1, 0
        while pos < offset:
            chunk = os.pread(self._fd, min(_CHUNK, offset - pos), pos)
            if not chunk:
                break
            count += chunk.count(b"\n")
            pos += len(chunk)
        return count

    def _decode_region(self, begin: int, end: int, *, tail: bool) -> list[Event]:
        """Every event in ``[begin, end)`` (whole lines). With ``tail``, a bad *last* line raises
        :class:`_BadLine` so the caller can move it aside under the lock."""
        events: list[Event] = []
        for batch in self._iter_region(begin, end, tail=tail):
            events.extend(batch)
        return events

    def _iter_region(
        self,
        begin: int,
        end: int,
        *,
        tail: bool,
        span: int = _CHUNK,
        lines: int | None = None,
    ) -> Iterator[list[Event]]:
        """The events of the lines from ``begin`` to ``end``, a region of about ``span``
        bytes at a time; with ``lines``, at most that many lines of each region (a read of a
        few events decodes no line beyond them)."""
        pos = begin
        prev = 0 if begin == 0 else -1  # -1: the seq before a line in the middle is not known
        while pos < end:
            want = min(span, end - pos)
            buf = pread_all(self._fd, want, pos)
            if pos + len(buf) < end:
                cut = buf.rfind(b"\n") + 1
                if cut == 0:  # one line longer than the chunk: read it whole
                    nl = self._find_newline(pos + len(buf), end)
                    buf = pread_all(self._fd, nl + 1 - pos, pos)
                    cut = len(buf)
                buf = buf[:cut]
            if lines is not None:
                stop = 0
                for _ in range(lines):
                    stop = buf.find(b"\n", stop) + 1
                    if not stop:
                        break
                if stop:
                    buf = buf[:stop]
            chunk = self._decode_chunk(buf, pos, end, tail=tail, prev=prev)
            if chunk:
                prev = chunk[-1].seq
            yield chunk
            pos += len(buf)

    def _find_newline(self, pos: int, end: int) -> int:
        while pos < end:
            chunk = os.pread(self._fd, min(_CHUNK, end - pos), pos)
            nl = chunk.find(b"\n")
            if nl != -1:
                return pos + nl
            pos += len(chunk)
        return end - 1

    def _decode_chunk(
        self, buf: bytes, base: int, end: int, *, tail: bool, prev: int = 0
    ) -> list[Event]:
        """Events of whole lines ``buf`` (file offset ``base``); seqs must rise above ``prev``
        (-1: not known, the lines start in the middle of the log)
        and keep rising (a duplicate or decreasing seq is a bad line)."""
        try:
            events = decode_event_lines(buf)
            seqs = list(map(_seq_of, events))
            if not seqs or (seqs[0] > prev and all(map(_lt, seqs, _islice(seqs, 1, None)))):
                return events
        except msgspec.DecodeError:
            pass
        # Slow path: find the bad lines one by one.
        events = []
        offset = 0
        lines = buf.splitlines(keepends=True)
        for index, line in enumerate(lines):
            here = base + offset
            offset += len(line)
            if is_blank(line):
                continue
            try:
                event = decode_line(line)
                if event.seq <= 0:
                    raise msgspec.DecodeError("the line has no positive seq")
            except msgspec.DecodeError as exc:
                last = base + offset >= end
                if tail and last and not complete_json(line):
                    # A crash cut this write short: the torn tail is moved aside.
                    raise _BadLine(here, len(line), str(exc), events) from None
                # A whole line that is not an event (corruption, or another program's line)
                # is never cut off silently: it raises, or is quarantined on request.
                self._bad_line(here, line, str(exc))
                continue
            if event.seq <= prev:
                reason = f"seq {event.seq} does not follow seq {prev} (duplicate or out of order)"
                self._bad_line(here, line, reason)
                continue
            seq = event.seq
            if prev >= 0 and seq > prev + 1 and prev < next_seq(lines, index + 1) < seq:
                # A seq that jumps ahead of the lines that follow it (pasted or damaged): the
                # one line is out of place, not all those after it. (Not at the start of a
                # region read from the middle of the log, where the seq before is not known.)
                reason = f"seq {event.seq} jumps ahead of the seqs of the lines after it"
                self._bad_line(here, line, reason)
                continue
            prev = event.seq
            events.append(event)
        return events

    def _bad_line(self, offset: int, line: bytes, reason: str) -> None:
        line_no = self._line_number(offset)
        if self._store.on_corrupt == "raise":
            raise CorruptLogError(
                f"session {self._id!r}: {self._path} line {line_no} (byte offset {offset}) "
                f"is not a valid event: {reason}; open the store with on_corrupt='quarantine' "
                "to move it aside",
                path=self._path,
                line=line_no,
                offset=offset,
                session_id=self._id,
            )
        self._with_lock(self._blank_line, offset, line.rstrip(b"\n"), f"line {line_no}: {reason}")

    def quarantine(self, event: Event, reason: str) -> bool:
        """With ``on_corrupt="quarantine"``: move the line of ``event`` (read from this log, and
        not sealed though the store is encrypted) aside as a bad line is; False (nothing
        done) otherwise, or when the line is no longer there."""
        if self._store.on_corrupt != "quarantine" or self._fd < 0:
            return False
        end = os.lseek(self._fd, 0, os.SEEK_END)
        pos = self._offset_after(event.seq - 1, end)
        while True:
            found = self._seq_at(pos, end)
            if found is None or found[0] > event.seq:
                return False
            stop = self._find_newline(found[1], end)
            if found[0] == event.seq:
                break
            pos = stop + 1
        start = found[1]
        body = os.pread(self._fd, stop - start, start)
        where = f"line {self._line_number(start)}: {reason}"
        self._with_lock(self._blank_line, start, body, where)
        return True

    def _blank_line(self, offset: int, body: bytes, reason: str) -> None:
        """With the lock held: copy a bad line to the sidecar and overwrite it with spaces."""
        if os.pread(self._fd, len(body), offset) != body:
            return  # someone else moved it aside already
        self._files.quarantine(self._path, body, reason, offset, self._id)
        # O_APPEND would send pwrite to the end of the file, so use a plain descriptor.
        blank = os.open(self._path, os.O_WRONLY | O_CLOEXEC | O_NOFOLLOW)
        try:
            os.pwrite(blank, b" " * len(body), offset)
            if self._store.durability == "fsync":
                _datasync(blank)
        finally:
            os.close(blank)

    # -- appending and catching up --------------------------------------------------------

    def _catch_up(self, size: int, prev: int, *, locked: bool) -> list[Event]:
        """Events between what this log consumed and ``size`` (not below it); their seqs rise
        above ``prev``, the latest the session has seen."""
        if size == self._size:
            return []
        data = pread_all(self._fd, size - self._size, self._size)
        end = data.rfind(b"\n") + 1
        while end > 0:
            start = data.rfind(b"\n", 0, end - 1) + 1
            if not HAS_MORE.match(data, start):
                break
            end = start
        if locked and end < len(data):
            # We hold the lock, so nobody is writing: the rest is a crashed writer's torn tail.
            self._quarantine_tail(self._size + end, size, "torn write at the end of the log")
        if end == 0:
            return []
        try:
            events = self._decode_chunk(
                data[:end], self._size, self._size + end, tail=True, prev=prev
            )
        except _BadLine as bad:
            if locked:
                reason = f"unparsable last line: {bad.reason}"
                self._quarantine_tail(bad.offset, self._size + end, reason)
            # Unlocked, a torn last line is absent (only a writer moves it aside).
            end = bad.offset - self._size
            events = bad.parsed
        self._size += end
        return events

    def refresh(self, view: LogView) -> list[Event] | Reopen:
        """The events appended after what this log read; ``REOPEN`` when the file read is gone
        (deleted, emptied, truncated by hand or replaced) or this is a forked child."""
        seen = view.seen_seq
        fd = self._fd
        if fd >= 0 and seen and not self._reload:
            # The common case, kept lean (``latest_seq`` of an agent loop): nothing new.
            try:
                size = _lseek(fd, 0, _SEEK_END)
            except OSError as exc:
                raise self._error("reading", exc) from exc
            if size == self._size:
                return []
        if self._reload:
            return REOPEN
        try:
            if self._fd < 0 and not self._open_fd(create=False):
                if seen:
                    return REOPEN  # deleted while this log had it closed
                self._size = 0
                return []
            if self._reload:
                return REOPEN  # another file than the one read
            size = _lseek(self._fd, 0, _SEEK_END)
            if size < self._size or (size == 0 and os.fstat(self._fd).st_nlink == 0):
                # Deleted (``Store.delete`` empties the file first) or truncated by hand.
                self._close_fd()
                return REOPEN
            if not seen:
                self._size = 0  # the session forgot what it read: read it all again
            return self._catch_up(size, seen, locked=False)
        except OSError as exc:
            raise self._error("reading", exc) from exc

    def _lock_for_append(self, seen: int) -> list[Event] | Reopen:
        """Take the file lock and catch up; returns other writers' new events (after
        ``seen``), or ``REOPEN`` (not holding the lock) when the file read is gone.

        A log emptied by ``Store.delete`` (which truncates under this lock before unlinking)
        shows up as a size below what we consumed.
        """
        if self._reload:
            return REOPEN
        self._open_fd(create=True)
        if self._reload:
            return REOPEN  # another file than the one read
        fd = self._fd
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._locked = True
        try:
            size = _lseek(fd, 0, _SEEK_END)
            # A file no name leads to any more (replaced by an archive run that stopped before
            # emptying it, or deleted) is never written to: open the path's file instead.
            if size >= self._size and os.fstat(fd).st_nlink:
                if not seen:
                    self._size = 0  # the session forgot what it read: read it all again
                return self._catch_up(size, seen, locked=True) if size > self._size else []
        except BaseException:
            self._unlock_fd()  # a failed catch-up must not leave other writers locked out
            raise
        # Emptied or deleted underneath us: whatever comes next starts a new log.
        self._unlock_fd()
        self._close_fd()
        return REOPEN

    def append_one(self, view: LogView, event: Event, marker: bool) -> Event | None:
        """The fast path: one ``write`` when this log read the file last (nothing to catch up
        on). It is the hot path of an agent loop, hence the local names for every call."""
        fd = self._fd
        size = self._size
        one_line = self._lines.one_line
        seen = view.seen_seq
        if fd < 0 or not size or not seen or one_line is None or not self._writable:
            return None
        try:
            _flock(fd, _LOCK_EX)
            try:
                if _lseek(fd, 0, _SEEK_END) != size:
                    # Someone else wrote, or the file was replaced (archived: see
                    # discard_through, which grows the old file first) or deleted: the
                    # general path finds out which.
                    return None
                stored = _replace(event, seq=seen + 1)
                line = one_line(stored)
                journal = self._files.journal
                if journal is not None and view.catalog_due((stored.type,), stored.seq, stored.seq):
                    journal.note(self._entry)  # before the line: see .journal
                done = _write(fd, line)
                if done == len(line) and self._store.durability == "flush":
                    self._size = size + done
                else:
                    self._finish_write(line, size, done)
            finally:
                _flock(fd, _LOCK_UN)
        except OSError as exc:
            raise self._error("appending to", exc) from exc
        return stored

    def _finish_write(self, line: bytes, start: int, done: int) -> None:
        """Complete ``line``, which starts at offset ``start`` and of which ``done`` bytes are
        written (none yet, or a short write's), and sync it when the store is durable; on
        failure, truncate back to ``start``. The file's size is then known: ``start`` and
        the line."""
        fd = self._fd
        try:
            while done < len(line):
                done += os.write(fd, line[done:])
            if self._store.durability == "fsync":
                _datasync(fd)
        except OSError:
            try:
                os.ftruncate(fd, start)
            except OSError:
                log.error("could not undo a failed append to %s", self._path)
            raise
        self._size = start + len(line)

    def append(
        self, view: LogView, events: list[Event], marker: int, expect_seq: int | None
    ) -> tuple[list[Event], list[Event]] | Reopen:
        """Under the file lock: catch up, then write the batch with one ``write()`` (nothing
        when ``expect_seq`` or ``view.admits`` say so)."""
        # Encoded before the lock is taken where the dialect can (agentkit's lines need the
        # seqs, so they are encoded under it).
        early = self._lines.encode_early(events)
        seen = view.seen_seq
        try:
            foreign = self._lock_for_append(seen)
            if isinstance(foreign, Reopen):
                return foreign
            try:
                first = (foreign[-1].seq if foreign else seen) + 1
                if (
                    (expect_seq is not None and first - 1 != expect_seq)
                    or not view.admits(foreign, events)
                ):
                    return foreign, []
                self._detect(os.pread(self._fd, 6, 0))
                lines = self._lines
                lines.check_append(self._id, self._path, self._files.encrypted)
                buf = lines.encode_batch(events, early, first, self._id)
                if not self._claimed and self._files.layout.claims(lines):
                    self._files.write_id_sidecar(self._id, self._path)
                    self._claimed = True
                journal = self._files.journal
                if journal is not None and view.catalog_due(
                    [e.type for e in events], first, first + len(events) - 1
                ):
                    journal.note(self._entry)  # before the lines: see .journal
                self._write(buf)
            finally:
                self._unlock_fd()
        except OSError as exc:
            raise self._error("appending to", exc) from exc
        replace = msgspec.structs.replace
        return foreign, [replace(event, seq=first + i) for i, event in enumerate(events)]

    def _write(self, buf: bytes) -> None:
        """With the lock held: write ``buf`` at the end, undoing a partial write on failure."""
        self._finish_write(buf, self._size, 0)

    # -- reading from storage -------------------------------------------------------------

    def _seq_at(self, pos: int, end: int) -> tuple[int, int] | None:
        """The seq of the first line starting at or after ``pos`` (a line start) whose head
        reads ``{"seq":N,``, and where that line starts; None when no such line starts before
        ``end``. Blank (quarantined) and unreadable lines are stepped over."""
        fd = self._fd
        while pos < end:
            head = os.pread(fd, HEAD_BYTES, pos)
            found = SEQ_HEAD.match(head)
            if found is not None:
                return head_seq(found), pos
            pos = self._find_newline(pos, end) + 1
        return None

    def _offset_after(self, after: int, end: int) -> int:
        """A line start at or before the first line with a seq above ``after``: a binary search
        over the log's line heads (seqs rise through the file), O(log n) reads. Lines before it
        are not decoded, so only the region read is checked line by line."""
        lo, hi = 0, end
        # Invariant: every line starting before lo has seq <= after, and the first line with a
        # seq above after starts at or before hi.
        while hi - lo > _SEARCH_SPAN:
            mid = self._line_start_before(lo + (hi - lo) // 2)
            if mid <= lo:
                break
            probe = self._seq_at(mid, hi)
            if probe is None:
                hi = mid
            elif probe[0] > after:
                hi = probe[1]
            else:
                lo = self._find_newline(probe[1], end) + 1
        return lo

    def discard_through(self, seq: int) -> tuple[int | None, int | None]:
        """Drop the lines of the (archived) events up to ``seq`` (never the last line): under
        the file lock, the rest is written to a new file, synced, renamed over the log and the
        directory synced; then the old file is emptied, so that every other log object that
        has it open (in any process) sees it gone and opens the new one (``REOPEN``). A crash
        leaves the old file or the new one at the path, each whole."""
        if not self._open_fd(create=False):
            return None, None
        try:
            return self._with_lock(self._discard_locked, seq)
        except OSError as exc:
            raise self._error("archiving", exc) from exc

    def _discard_locked(self, seq: int) -> tuple[int | None, int | None]:
        fd = self._fd
        size = _lseek(fd, 0, _SEEK_END)
        if os.fstat(fd).st_nlink == 0 or size == 0:
            return None, None  # replaced or deleted meanwhile: nothing of it to drop
        if not SEQ_HEAD.match(os.pread(fd, HEAD_BYTES, 0)):
            raise StorageError(
                f"session {self._id!r}: {self._path} is not in agentsession's own line "
                "format; its events cannot be archived"
            )
        pos = self._offset_after(seq, size)
        last = self._line_start_before(size - 1) if size > 1 else 0
        while pos < size:
            found = self._seq_at(pos, size)
            if found is None or found[0] > seq or found[1] >= last:
                pos = size if found is None else found[1]
                break
            pos = self._find_newline(found[1], size) + 1
        if pos <= 0 or pos >= size:
            return size, size
        tmp = f"{self._path}.archive.tmp"  # one at a time: under the lock
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o600)
        try:
            at = pos
            while at < size:
                chunk = pread_all(fd, min(_CHUNK, size - at), at)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view) :]
                at += len(chunk)
            os.fsync(out)
        except BaseException:
            os.close(out)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        os.close(out)
        # A blank line on the old file first (readers step over it): should this process
        # die between the rename and emptying the old file, every writer holding it finds
        # it grown, takes the general path and, seeing no name leads to it, opens the new one.
        os.write(fd, b"\n")
        os.replace(tmp, self._path)
        sync_dir(os.path.dirname(self._path))
        # The old file is unlinked: empty it, so that a log object holding it sees it gone.
        os.ftruncate(fd, 0)
        self._size = 0
        self._reload = True
        return size, size - pos

    def read(self, after: int, limit: int | None) -> list[Event]:
        """Events with ``seq > after`` up to what this log read, found by a binary search
        over the line heads (:meth:`_offset_after`)."""
        if not self._open_fd(create=False):
            return []
        out: list[Event] = []
        try:
            begin = self._offset_after(after, self._size) if after else 0
            # A few events (a branch's marker, the latest ones): a small region at a time.
            few = limit is not None and limit <= 32
            regions = (
                self._iter_region(begin, self._size, tail=False, span=_SMALL_CHUNK, lines=limit)
                if few
                else self._iter_region(begin, self._size, tail=False)
            )
            for batch in regions:
                if batch and batch[0].seq > after:
                    out.extend(batch)  # seqs rise: the whole batch is after the seq
                else:
                    out.extend(e for e in batch if e.seq > after)
                if limit is not None and len(out) >= limit:
                    return out[:limit]
        except OSError as exc:
            raise self._error("reading", exc) from exc
        return out


def _identity(fd: int, st: os.stat_result) -> tuple[int, int, bytes]:
    """Which file this is: device, inode and the head of its first line. A deleted file's inode
    number is often reused at once by the next file created, but the first line of a new log
    carries its own time stamp to the microsecond, so the head tells two lives apart."""
    return st.st_dev, st.st_ino, os.pread(fd, 256, 0)
