"""The JSONL backend: a directory with one append-only file of JSON lines per session.

The line format is documented in ``docs/format.md``. How writing stays safe:

* An append encodes its events first, then takes an exclusive ``flock`` on the file, catches up
  on whatever other processes or instances appended since this one last looked, assigns the
  next seqs and writes every line of the batch with one ``write()`` on a descriptor opened with
  ``O_APPEND`` and kept open. Seqs therefore stay unique and gap-free across processes.
* Every line of a multi-event batch but the last carries ``"more":true``; a log that ends in such
  a line ends in a batch a crash cut short, and the batch is moved aside whole.
* A torn tail (bytes after the last newline, an unparsable last line, or an unfinished batch) is
  absent to readers: opening, reading and catching up stop before it and write nothing. The
  next writer (an append, ``recover``) moves it, bytes intact, to the sidecar
  ``<name>.jsonl.quarantine`` and truncates the log to its last complete line, under the lock.
  A log (or store directory) the process may only read opens read-only.
* A bad line elsewhere raises :class:`~agentsession.errors.CorruptLogError`, or with
  ``on_corrupt="quarantine"`` is copied to the sidecar and blanked in place (readers skip blank
  lines). Nothing is silently dropped.
* Opening reads from the latest compaction marker to the end, found by scanning backwards.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import io
import itertools
import logging
import operator
import os
import re
import stat
import threading
import time as _time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal, TypeVar

import msgspec

from .._names import safe_name, unsafe_name
from ..codec import TooDeep, decode, encode
from ..contract import Capabilities, SessionInfo
from ..errors import CorruptLogError, SessionNotFound, StorageError, StoreUnavailable, UsageError
from ..events import Event, decode_event, decode_event_lines, encode_event
from ..locks import FileLocker, file_locks_unavailable
from ..session import BaseSession
from ..store import BaseStore, path_of

try:
    import fcntl
    import resource
except ImportError as exc:  # not POSIX (Windows): no flock, and no os.pread either
    raise file_locks_unavailable(
        "the JSONL store's session files",
        "open a SQLite ('sqlite:///file.db') or PostgreSQL store instead",
    ) from exc

__all__ = [
    "CLI_CURRENT_LINK",
    "Dialect",
    "JsonlFileStore",
    "JsonlSession",
    "JsonlStore",
    "OnCorrupt",
    "agentkit_file_name",
    "open_jsonl",
    "open_jsonl_file",
]

log = logging.getLogger(__name__)
_T = TypeVar("_T")

OnCorrupt = Literal["raise", "quarantine"]
"""What to do with a bad line in the middle of a log: raise, or move it aside and carry on."""

SUFFIX = ".jsonl"
LOCK_DIR = ".locks"
META_DIR = ".meta"
CAS_LOCK = ".cas.lock"
"""The lock file in each ``.meta/<kind>/`` directory that compare-and-set holds (``flock``);
never taken for an entry, whose file name ends in ``.json``."""
QUARANTINE_SUFFIX = ".quarantine"
ID_SUFFIX = ".id"
_MORE = b'"more":true,'
_CHUNK = 4 << 20
_BACK_CHUNK = 1 << 20
_FIRST_LINE_BYTES = 64 << 10
"""How much of a log's beginning ``list()`` reads for the time of its first event (one read;
a longer first line leaves ``created_at`` unknown)."""
_TAIL_BYTES = 64 << 10
"""How much of the end of a log opening a session reads (whole lines): the events that
``latest_seq``, a TTL check and a read of recent events need, without the history."""
_MARKER_TYPE = b'"type":"session/compaction"'
_LINE_HEAD = re.compile(rb'\{"seq":\d+,(?:"more":true,)?\Z')
_HAS_MORE = re.compile(rb'\{"seq":\d+,"more":true,')
# A line's head, in either dialect: ours, or agentkit's ({"ID":"…","Seq":N,…}).
_SEQ_HEAD = re.compile(rb'\{(?:"seq":(\d+),|"ID":"(?:[^"\\]|\\.)*","Seq":(\d+),)')
_HEAD_BYTES = 256  # enough for either head (an agentkit ID longer than this is stepped over)
_AGENTKIT = b'{"ID":'
_AK_MARKER_TYPE = b'"Type":"session/compaction"'
_AK_LINE_HEAD = re.compile(
    rb'\{"ID":"(?:[^"\\]|\\.)*","Seq":\d+,"SessionID":"(?:[^"\\]|\\.)*",'
    rb'"AgentID":"(?:[^"\\]|\\.)*",\Z'
)
_AGENTKIT_NAME = re.compile(r"[^A-Za-z0-9._-]")

Dialect = Literal["agentsession", "agentkit"]
"""The line format of new session files (see ``docs/interop.md``)."""

CLI_CURRENT_LINK = "cli_current.jsonl"
"""agentkit's CLI pointer (``CLICurrentLinkName``): in the agentkit dialect, a symbolic link in
the store directory whose target is the file name of the session the command line uses next."""
_AK_SIDECARS = {"active": ("current.json", "sessionId"), "bind": ("agent.json", "agentId")}
# The entry key or session id an agentkit sidecar file was written for (agentkit ignores it):
# agentkit's names are not injective, so it tells two colliding keys apart.
_AK_CLAIM = "agentsessionKey"
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def _head_seq(found: re.Match[bytes]) -> int:
    return int(found[1] or found[2])


def _decode_line(line: bytes) -> Event:
    """One line of either dialect as an event (raises :class:`msgspec.DecodeError`)."""
    if line[:6] == _AGENTKIT:
        from ..interop.agentkit import decode_agentkit_line

        return decode_agentkit_line(line.rstrip(b"\r\n"))
    return decode_event(line)


class _LineTime(msgspec.Struct, gc=False):
    """The one field of an agentsession line that ``list()`` decodes (sealed lines keep it in
    clear too)."""

    time: _dt.datetime | None = None


class _AgentkitLineTime(msgspec.Struct, gc=False):
    """The one field of an agentkit line that ``list()`` decodes."""

    created_at: str | None = msgspec.field(default=None, name="CreatedAt")


_line_time = msgspec.json.Decoder(_LineTime)
_agentkit_line_time = msgspec.json.Decoder(_AgentkitLineTime)


def _line_time_of(line: bytes) -> _dt.datetime | None:
    """The time of one event line of either dialect, decoding nothing else when it can;
    raises :class:`msgspec.DecodeError` when the line is not an event."""
    try:
        if line[:6] == _AGENTKIT:
            from ..interop.agentkit import _time_in

            text = _agentkit_line_time.decode(line).created_at
            return None if text is None else _time_in(text)
        return _line_time.decode(line).time
    except msgspec.DecodeError:
        pass
    return _decode_line(line).time  # what msgspec refuses (escaped lone surrogates)


def _first_time(fd: int) -> _dt.datetime | None:
    """The time of the file's first event, from one read of its first
    :data:`_FIRST_LINE_BYTES` (blank lines stepped over); None when that holds no whole line
    or the line does not decode."""
    head = os.pread(fd, _FIRST_LINE_BYTES, 0)
    start = 0
    while True:
        end = head.find(b"\n", start)
        if end == -1:
            return None  # a first line longer than the read, or a torn one
        if not _is_blank(head[start:end]):
            break
        start = end + 1
    try:
        return _line_time_of(head[start:end])
    except (msgspec.DecodeError, ValueError):
        return None


_SEARCH_SPAN = 64 << 10  # below this many bytes, reading beats seeking

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO in place of a log must not block open()
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


def _pread_all(fd: int, size: int, offset: int) -> bytes:
    parts = []
    while size > 0:
        chunk = os.pread(fd, min(size, 1 << 30), offset)
        if not chunk:
            break
        parts.append(chunk)
        size -= len(chunk)
        offset += len(chunk)
    return b"".join(parts)


def _next_seq(lines: list[bytes], start: int) -> int:
    """The seq of the first line from ``lines[start]`` on that decodes as an event (0: none)."""
    for line in lines[start:]:
        if _is_blank(line):
            continue
        try:
            return _decode_line(line).seq
        except msgspec.DecodeError:
            continue
    return 0


def _is_blank(line: bytes) -> bool:
    return not line.strip()


def _complete_json(line: bytes) -> bool:
    """Whether ``line`` is newline-terminated and one whole JSON value (a crash cuts a write
    short, leaving no newline or unfinished JSON; a complete value is a written line)."""
    if not line.endswith(b"\n"):
        return False
    try:
        decode(line)
    except TooDeep:
        return True  # whole, only too deep to be an event
    except ValueError:
        return False
    return True


class _BadLine(Exception):
    """A line that does not parse, found while decoding a region."""

    def __init__(self, offset: int, length: int, reason: str, parsed: list[Event]) -> None:
        self.offset = offset  # of the line's first byte
        self.length = length  # including its newline
        self.reason = reason
        self.parsed = parsed  # good events before it in the region


class JsonlSession(BaseSession):
    """A session stored as one JSONL file (see the module docstring for the guarantees)."""

    _store: JsonlStore

    def __init__(self, store: JsonlStore, session_id: str, path: str) -> None:
        super().__init__(store, session_id)
        self._path = path
        self._file: io.FileIO | None = None
        self._fd = -1
        self._size = 0  # bytes consumed; always ends at a line boundary
        self._locked = False  # whether this session holds the file lock now
        self._ident: tuple[int, int, bytes] | None = None  # which file was read (_identity)
        self._reload = False  # set in a forked child: load the tail afresh before use
        self._agentkit = store.dialect == "agentkit"  # the file's line dialect (_detect)
        self._claimed = False  # whether this id is recorded beside an agentkit-named file
        self._writable = False  # whether the open descriptor may write (else opened read-only)
        with self._lock:
            self._load()

    # -- files ----------------------------------------------------------------------------

    @property
    def path(self) -> str:
        """The session's log file."""
        return self._path

    @property
    def location(self) -> str:
        """The session's log file."""
        return self._path

    def _error(self, action: str, exc: OSError) -> StorageError:
        return StorageError(
            f"session {self._id!r}: {action} {self._path} failed: "
            f"{exc.strerror or exc} (errno {exc.errno})"
        )

    def _open_fd(self, create: bool) -> bool:
        """Open the log (creating it with ``create``); False when it does not exist.

        The file must be a regular file reached without a symbolic link. When the path now
        names another file than the one this session read before (deleted and created again,
        or replaced), everything cached about the old one is forgotten, so no stale offset is
        ever applied to the new file.
        """
        if self._fd >= 0:
            if self._writable or not create:
                return True
            self._storage_close()  # opened read-only: reopen to write (or say why it cannot)
        self._store._check_open()  # a session of a closed store is not used again
        flags = os.O_RDWR | os.O_APPEND | _O_CLOEXEC | _O_NOFOLLOW | _O_NONBLOCK
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
            self._reset()  # another file than the one read before: nothing cached applies
        self._ident = ident
        self._detect(ident[2])
        self._file = io.FileIO(fd, "r+" if writable else "r", closefd=True)
        self._fd = fd
        self._writable = writable
        self._store._track_open(self)
        if create:
            self._store._write_id_sidecar(self._id, self._path)
            if st.st_size == 0 and self._store.durability == "fsync":
                # A new log's name (and its id sidecar's) must survive a power loss as well as
                # the lines synced into it: not every file system commits a new directory entry
                # with the file's own sync.
                _sync_dir(os.path.dirname(self._path))
        return True

    def _reset(self) -> None:
        """Forget the log, and where this object had read to in its file."""
        super()._reset()
        self._size = 0

    def _detect(self, head: bytes) -> None:
        """The file's dialect, from its first bytes: a file keeps the dialect of its first line
        (so a log another program owns stays readable to it); an empty one takes the store's."""
        self._agentkit = head[:6] == _AGENTKIT if head else self._store.dialect == "agentkit"

    def _storage_close(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._ident = _identity(self._fd, os.fstat(self._fd))
            self._file.close()
            self._store._untrack_open(self)
        self._file = None
        self._fd = -1
        self._writable = False

    def _close_if_idle(self) -> None:
        """Close the descriptor unless the session is in use right now (it reopens on use)."""
        if self._lock.acquire(blocking=False):
            try:
                if not self._locked:
                    self._storage_close()
            finally:
                self._lock.release()

    def _storage_after_fork(self) -> None:
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
        """Run ``fn`` holding the file lock (re-entrant for this session)."""
        if self._locked:
            return fn(*args)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        self._locked = True
        try:
            return fn(*args)
        finally:
            self._unlock_fd()

    # -- loading --------------------------------------------------------------------------

    def _storage_open(self) -> tuple[list[Event], bool]:
        self._size = 0
        if not self._open_fd(create=False):
            return [], True
        try:
            return self._load_tail(locked=self._locked)
        except OSError as exc:
            raise self._error("reading", exc) from exc

    def _storage_open_tail(self) -> tuple[list[Event], bool]:
        self._size = 0
        if not self._open_fd(create=False):
            return [], True
        try:
            return self._load_tail(locked=self._locked, window=False)
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
        except _BadLine as bad:
            if not locked:
                return self._load_tail(False, window, bad.offset)  # read as if it were cut
            self._quarantine_tail(bad.offset, size, f"unparsable last line: {bad.reason}")
            return self._load_tail(True, window)
        self._size = size
        return events, begin == 0

    def _ends_in_open_batch(self, size: int) -> bool:
        start = self._line_start_before(size - 1)
        return bool(_HAS_MORE.match(os.pread(self._fd, 32, start)))

    def _line_start_before(self, end: int) -> int:
        """Offset of the first byte after the last newline strictly before ``end``."""
        pos = end
        while pos > 0:
            begin = max(0, pos - 65536)
            chunk = os.pread(self._fd, pos - begin, begin)
            nl = chunk.rfind(b"\n")
            if nl != -1:
                return begin + nl + 1
            pos = begin
        return 0

    def _complete_end(self, size: int) -> int:
        """The end of the log's first ``size`` bytes without an unterminated last line or an
        unfinished batch: where a torn tail starts (``size`` when there is none)."""
        end = size
        if os.pread(self._fd, 1, size - 1) != b"\n":
            end = self._line_start_before(size)
        while end > 0:
            start = self._line_start_before(end - 1)
            if not _HAS_MORE.match(os.pread(self._fd, 32, start)):
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
        data = _pread_all(self._fd, size - offset, offset)
        self._store._quarantine(self._path, data, reason, offset, self._id)
        os.ftruncate(self._fd, offset)
        if self._store.durability == "fsync":
            _datasync(self._fd)

    def _find_last_marker(self, size: int, floor: int = 0) -> int | None:
        """Offset of the last compaction marker line, scanning backwards from the end down to
        ``floor`` (a line start)."""
        fd = self._fd
        needle, head = (
            (_AK_MARKER_TYPE, _AK_LINE_HEAD) if self._agentkit else (_MARKER_TYPE, _LINE_HEAD)
        )
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

    def _iter_region(self, begin: int, end: int, *, tail: bool) -> Iterator[list[Event]]:
        pos = begin
        prev = 0 if begin == 0 else -1  # -1: the seq before a line in the middle is not known
        while pos < end:
            want = min(_CHUNK, end - pos)
            buf = _pread_all(self._fd, want, pos)
            if pos + len(buf) < end:
                cut = buf.rfind(b"\n") + 1
                if cut == 0:  # one line longer than the chunk: read it whole
                    nl = self._find_newline(pos + len(buf), end)
                    buf = _pread_all(self._fd, nl + 1 - pos, pos)
                    cut = len(buf)
                buf = buf[:cut]
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
            if _is_blank(line):
                continue
            try:
                event = _decode_line(line)
                if event.seq <= 0:
                    raise msgspec.DecodeError("the line has no positive seq")
            except msgspec.DecodeError as exc:
                last = base + offset >= end
                if tail and last and not _complete_json(line):
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
            if prev >= 0 and seq > prev + 1 and prev < _next_seq(lines, index + 1) < seq:
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

    def _quarantine_unsealed(self, event: Event, reason: str) -> bool:
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
        self._store._quarantine(self._path, body, reason, offset, self._id)
        # O_APPEND would send pwrite to the end of the file, so use a plain descriptor.
        blank = os.open(self._path, os.O_WRONLY | _O_CLOEXEC | _O_NOFOLLOW)
        try:
            os.pwrite(blank, b" " * len(body), offset)
            if self._store.durability == "fsync":
                _datasync(blank)
        finally:
            os.close(blank)

    # -- appending and catching up --------------------------------------------------------

    def _catch_up(self, size: int, *, locked: bool) -> list[Event]:
        """Events between what this session consumed and ``size``."""
        if size < self._size:
            # Truncated or replaced by hand: start again from what is there now.
            self._load()
            return []
        if size == self._size:
            return []
        data = _pread_all(self._fd, size - self._size, self._size)
        end = data.rfind(b"\n") + 1
        while end > 0:
            start = data.rfind(b"\n", 0, end - 1) + 1
            if not _HAS_MORE.match(data, start):
                break
            end = start
        if locked and end < len(data):
            # We hold the lock, so nobody is writing: the rest is a crashed writer's torn tail.
            self._quarantine_tail(self._size + end, size, "torn write at the end of the log")
        if end == 0:
            return []
        try:
            events = self._decode_chunk(
                data[:end], self._size, self._size + end, tail=True, prev=self._latest_seq
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

    def _storage_refresh(self) -> list[Event]:
        if self._reload:
            self._reload = False
            self._load()
            return []
        try:
            if self._fd < 0 and not self._open_fd(create=False):
                if self._latest_seq or self._window:
                    self._reset()  # deleted while this object had it closed: start over
                return []
            size = os.lseek(self._fd, 0, os.SEEK_END)
            if size < self._size or (size == 0 and os.fstat(self._fd).st_nlink == 0):
                # Deleted (``Store.delete`` empties the file first) or truncated by hand.
                self._storage_close()
                self._load()
                return []
            return self._catch_up(size, locked=False)
        except OSError as exc:
            raise self._error("reading", exc) from exc

    def _lock_for_append(self) -> list[Event]:
        """Take the file lock and catch up; returns other writers' new events.

        A log emptied by ``Store.delete`` (which truncates under this lock before unlinking)
        shows up as a size below what we consumed: we then reopen the path and start over.
        """
        if self._reload:
            self._reload = False
            self._load()
        self._open_fd(create=True)
        while True:
            fd = self._fd
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._locked = True
            size = os.lseek(fd, 0, os.SEEK_END)
            if size > self._size or (size == self._size and (size or os.fstat(fd).st_nlink)):
                return self._catch_up(size, locked=True) if size > self._size else []
            # Emptied or deleted underneath us: whatever comes next starts a new log.
            self._unlock_fd()
            self._storage_close()
            self._reset()
            self._open_fd(create=True)
            self._load()

    def _storage_append_one(self, event: Event, marker: bool) -> Event | None:
        """The fast path: one ``write`` when this session saw the file last (nothing to catch
        up on). It is the hot path of an agent loop, hence the local names for every call."""
        fd = self._fd
        size = self._size
        if fd < 0 or not size or self._agentkit or not self._writable:
            return None
        try:
            _flock(fd, _LOCK_EX)
            try:
                if _lseek(fd, 0, _SEEK_END) != size:
                    return None  # someone else wrote: take the general path
                stored = _replace(event, seq=self._latest_seq + 1)
                line = encode_event(stored) + b"\n"
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
        """After a short write or for ``fsync``: complete ``line`` written from ``start``, of
        which ``done`` bytes are written."""
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

    def _storage_append(
        self, events: list[Event], marker: int, expect_seq: int | None
    ) -> tuple[list[Event], list[Event]]:
        # Encoded before the lock is taken; an agentkit log is encoded under it (its lines need
        # the seqs).
        bodies = None if self._agentkit else [encode_event(event)[1:] for event in events]
        last = len(events) - 1
        try:
            foreign = self._lock_for_append()
            try:
                first = (foreign[-1].seq if foreign else self._latest_seq) + 1
                if (
                    (expect_seq is not None and first - 1 != expect_seq)
                    or self._seal_is_stale()
                    or not self._admits(foreign, events)
                ):
                    return foreign, []
                self._detect(os.pread(self._fd, 6, 0))
                if self._agentkit and self._store._keyring is not None:
                    raise UsageError(
                        f"session {self._id!r}: {self._path} is an agentkit log, which "
                        "agentkit reads as plain lines; an encrypted store does not append "
                        "to it (import it into the store instead: agentsession import)"
                    )
                if self._agentkit:
                    buf = self._agentkit_lines(events, first)
                    if self._store.dialect == "agentkit" and not self._claimed:
                        self._store._write_id_sidecar(self._id, self._path)
                        self._claimed = True
                else:
                    if bodies is None:  # the file was emptied and started in our dialect
                        bodies = [encode_event(event)[1:] for event in events]
                    buf = b"".join(
                        b'{"seq":%d,%s%s\n' % (first + i, _MORE if i < last else b"", body)
                        for i, body in enumerate(bodies)
                    )
                self._write(buf)
            finally:
                self._unlock_fd()
        except OSError as exc:
            raise self._error("appending to", exc) from exc
        replace = msgspec.structs.replace
        return foreign, [replace(event, seq=first + i) for i, event in enumerate(events)]

    def _agentkit_lines(self, events: list[Event], first: int) -> bytes:
        """The batch as agentkit lines (which have no batch flag: see ``docs/interop.md``)."""
        from ..interop.agentkit import encode_agentkit_line

        replace = msgspec.structs.replace
        return b"".join(
            encode_agentkit_line(replace(event, seq=first + i), self._id) + b"\n"
            for i, event in enumerate(events)
        )

    def _write(self, buf: bytes) -> None:
        """With the lock held: write ``buf`` at the end, undoing a partial write on failure."""
        fd = self._fd
        try:
            done = os.write(fd, buf)
            while done < len(buf):
                done += os.write(fd, buf[done:])
            if self._store.durability == "fsync":
                _datasync(fd)
        except OSError:
            try:
                os.ftruncate(fd, self._size)
            except OSError:
                log.error("could not undo a failed append to %s", self._path)
            raise
        self._size += len(buf)

    # -- reading from storage -------------------------------------------------------------

    def _seq_at(self, pos: int, end: int) -> tuple[int, int] | None:
        """The seq of the first line starting at or after ``pos`` (a line start) whose head
        reads ``{"seq":N,``, and where that line starts; None when no such line starts before
        ``end``. Blank (quarantined) and unreadable lines are stepped over."""
        fd = self._fd
        while pos < end:
            head = os.pread(fd, _HEAD_BYTES, pos)
            found = _SEQ_HEAD.match(head)
            if found is not None:
                return _head_seq(found), pos
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

    def _storage_read(self, after: int, limit: int | None) -> list[Event]:
        with self._lock:
            if not self._open_fd(create=False):
                return []
            out: list[Event] = []
            try:
                begin = self._offset_after(after, self._size) if after else 0
                for batch in self._iter_region(begin, self._size, tail=False):
                    if batch and batch[0].seq > after:
                        out.extend(batch)  # seqs rise: the whole batch is after the seq
                    else:
                        out.extend(e for e in batch if e.seq > after)
                    if limit is not None and len(out) >= limit:
                        return out[:limit]
            except OSError as exc:
                raise self._error("reading", exc) from exc
            return out


def agentkit_file_name(session_id: str) -> str:
    """agentkit's file name (without ``.jsonl``) for a session id: every character outside
    ``[A-Za-z0-9._-]`` becomes ``_``. Ids agentkit refuses (empty, containing ``..``) and names
    too long for a file are refused with :class:`UsageError`."""
    if not session_id or ".." in session_id:
        raise UsageError(
            f"session id {session_id!r} cannot be an agentkit file name (empty, or contains '..')"
        )
    name = _AGENTKIT_NAME.sub("_", session_id)
    if len(name.encode()) + len(SUFFIX) > 255:
        raise UsageError(f"session id {session_id[:40]!r}... is too long for an agentkit file name")
    return name


def _identity(fd: int, st: os.stat_result) -> tuple[int, int, bytes]:
    """Which file this is: device, inode and the head of its first line. A deleted file's inode
    number is often reused at once by the next file created, but the first line of a new log
    carries its own time stamp to the microsecond, so the head tells two lives apart."""
    return st.st_dev, st.st_ino, os.pread(fd, 256, 0)


def _default_open_files() -> int:
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):  # pragma: no cover - no limit to read
        return 256
    if soft == resource.RLIM_INFINITY:
        return 256
    return max(4, min(256, soft // 4))


class JsonlStore(BaseStore):
    """A directory of JSONL session files. Opened by ``open_store(path)``.

    ``on_corrupt`` decides what a bad line in the middle of a log does: ``"raise"`` (default)
    raises :class:`~agentsession.errors.CorruptLogError`; ``"quarantine"`` moves it to the
    session's sidecar file and carries on.

    Logs written by agentkit (the Go package) are read in either dialect, and a file keeps the
    dialect of its first line when appended to. ``dialect="agentkit"`` (for a directory shared
    with an agentkit service) also writes new files as agentkit lines and names them as
    agentkit does (every character outside ``[A-Za-z0-9._-]`` becomes ``_``); two ids that
    agentkit's naming maps to one file are refused rather than merged. See
    ``docs/interop.md``.
    """

    capabilities = Capabilities(inline_appends=True, inline_reads=True)

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        on_corrupt: OnCorrupt = "raise",
        max_open_files: int | None = None,
        create: bool = True,
        dialect: Dialect = "agentsession",
        **options: Any,
    ) -> None:
        super().__init__(**options)
        if on_corrupt not in ("raise", "quarantine"):
            raise UsageError(f"on_corrupt must be 'raise' or 'quarantine', not {on_corrupt!r}")
        if dialect not in ("agentsession", "agentkit"):
            raise UsageError(f"dialect must be 'agentsession' or 'agentkit', not {dialect!r}")
        if dialect == "agentkit" and (
            options.get("passphrase") is not None or options.get("key") is not None
        ):
            raise UsageError(
                "the agentkit dialect cannot be encrypted: agentkit reads plain lines only"
            )
        self.dialect: Dialect = dialect
        """The line format and file naming of new session files."""
        if max_open_files is not None and (
            not isinstance(max_open_files, int) or max_open_files < 1
        ):
            raise UsageError(f"max_open_files must be an int >= 1, not {max_open_files!r}")
        self.on_corrupt: OnCorrupt = on_corrupt
        """What a bad line in the middle of a log does."""
        self.max_open_files = max_open_files or _default_open_files()
        """Session files this store keeps open at most (default: a quarter of the process's
        descriptor limit, at most 256); the least recently opened are closed first and
        reopened when used again."""
        self._open_files: OrderedDict[int, weakref.ref[JsonlSession]] = OrderedDict()
        self._open_files_lock = threading.Lock()
        root = os.path.abspath(os.fspath(directory))
        if not create:
            # Opening an existing store creates nothing, and reading needs no write access
            # (a read-only mount, a directory of another user): writes fail when they come.
            if not os.path.isdir(root):
                what = "it is not a directory" if os.path.exists(root) else "no such directory"
                raise StoreUnavailable(f"no store at {root} ({what})")
            if not os.access(root, os.R_OK | os.X_OK):
                raise StoreUnavailable(f"the store directory {root} is not readable")
        else:
            try:
                os.makedirs(root, mode=0o700, exist_ok=True)
            except FileExistsError:
                raise StoreUnavailable(f"{root} exists and is not a directory") from None
            except OSError as exc:
                raise StoreUnavailable(
                    f"cannot create the store directory {root}: {exc}"
                ) from exc
            if not os.access(root, os.R_OK | os.W_OK | os.X_OK):
                raise StoreUnavailable(
                    f"the store directory {root} is not readable and writable"
                )
        self._root = os.path.realpath(root)

    @property
    def location(self) -> str:
        """The store's directory."""
        return self._root

    def _track_open(self, session: JsonlSession) -> None:
        """Count an opened session file; close the oldest idle ones beyond the bound."""
        victims = []
        with self._open_files_lock:
            self._open_files[id(session)] = weakref.ref(session)
            while len(self._open_files) > self.max_open_files:
                _, ref = self._open_files.popitem(last=False)
                other = ref()
                if other is not None and other is not session:
                    victims.append(other)
        for other in victims:
            other._close_if_idle()

    def _untrack_open(self, session: JsonlSession) -> None:
        with self._open_files_lock:
            self._open_files.pop(id(session), None)

    def _after_fork(self) -> None:
        super()._after_fork()
        self._open_files_lock = threading.Lock()
        self._open_files.clear()

    @property
    def url(self) -> str:
        """The store's directory (a path is what ``open_store`` takes)."""
        return self._root

    def path_for(self, session_id: str) -> str:
        """The log file of a session id (safe and injective; see ``agentsession._names``; in
        the agentkit dialect, agentkit's naming, which is not injective)."""
        if self.dialect == "agentkit":
            return os.path.join(self._root, agentkit_file_name(session_id) + SUFFIX)
        return os.path.join(self._root, safe_name(session_id) + SUFFIX)

    def _claimed_by(self, path: str) -> str | None:
        """The id recorded beside a session file (``<name>.id``), if any."""
        try:
            with open(path[: -len(SUFFIX)] + ID_SUFFIX, "rb") as f:
                return f.read().decode("utf-8", "surrogatepass")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read the id beside {path}: {exc}") from exc

    def _cache_key(self, session_id: str) -> str:
        if self.dialect == "agentkit":  # the naming is not injective: never share by path
            return session_id
        return self.path_for(session_id)

    def _open_session(self, session_id: str) -> JsonlSession:
        path = self.path_for(session_id)
        if self.dialect == "agentkit":
            if os.path.basename(path) == CLI_CURRENT_LINK:
                raise UsageError(
                    f"session id {session_id!r} maps to {CLI_CURRENT_LINK}, agentkit's CLI "
                    "pointer, in the agentkit dialect; choose another id"
                )
            claimed = self._claimed_by(path)
            if claimed is not None and claimed != session_id:
                raise UsageError(
                    f"session ids {claimed!r} and {session_id!r} map to the same agentkit file "
                    f"{os.path.basename(path)}; agentkit's naming cannot keep them apart, so "
                    f"{session_id!r} is refused rather than merged into {claimed!r}"
                )
        return JsonlSession(self, session_id, path)

    def _clean_crash_leftovers(self) -> None:
        """Remove what a killed process left of its meta writes in ``.meta/<kind>/``: the
        temporary files of an atomic write or of an "add unless present" (a wrapped session
        key of a session never written, a store record re-wrapped under a passphrase being
        set), once their writer is no longer running (or, for a writer this host cannot see,
        after :data:`_LEFTOVER_AGE` seconds). Best effort: a store that cannot be written
        (a read-only mount) still opens, and the next writable open cleans up."""
        meta = os.path.join(self._root, META_DIR)
        try:
            kinds = [e.path for e in os.scandir(meta) if e.is_dir(follow_symlinks=False)]
        except OSError:
            return  # no meta yet, or none readable: nothing this open can clean
        now = _time.time()
        for kind in kinds:
            with contextlib.suppress(OSError):
                for entry in os.scandir(kind):
                    found = _LEFTOVER.search(entry.name)
                    if found is None:
                        continue
                    with contextlib.suppress(OSError):
                        st = entry.stat(follow_symlinks=False)
                        young = now - st.st_mtime < _LEFTOVER_AGE
                        if stat.S_ISREG(st.st_mode) and not (
                            young and _running(int(found.group(1)))
                        ):
                            os.unlink(entry.path)

    def _make_locker(self) -> FileLocker:
        return FileLocker(os.path.join(self._root, LOCK_DIR))

    def _meta_path(self, kind: str, key: str) -> str:
        return os.path.join(self._root, META_DIR, kind, safe_name(key) + ".json")

    def _meta_get(self, kind: str, key: str) -> str | None:
        if self.dialect == "agentkit":
            if kind == "cli" and key == "current":
                return self._ak_cli_get()
            if kind in _AK_SIDECARS:
                return self._ak_sidecar_get(kind, key)
        entry = _read_meta_entry(self._meta_path(kind, key), kind)
        return None if entry is None else entry.value

    def _meta_set(self, kind: str, key: str, value: str | None) -> None:
        if self.dialect == "agentkit":
            if kind == "cli" and key == "current":
                self._ak_cli_set(value)
                return
            if kind in _AK_SIDECARS:
                self._ak_sidecar_set(kind, key, value)
                return
        path = self._meta_path(kind, key)
        try:
            if value is None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                return
            _private_dirs(self._root, os.path.dirname(path))
            _atomic_write(path, encode(_MetaEntry(key=key, value=value, updated_at=self.clock())))
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc}") from exc

    def _meta_add(self, kind: str, key: str, value: str) -> str:
        if self.dialect == "agentkit" and (kind in _AK_SIDECARS or kind == "cli"):
            return super()._meta_add(kind, key, value)
        path = self._meta_path(kind, key)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.add"
        try:
            _private_dirs(self._root, os.path.dirname(path))
            _atomic_write(tmp, encode(_MetaEntry(key=key, value=value, updated_at=self.clock())))
            try:
                os.link(tmp, path)  # fails when the entry exists: the first writer wins
            except FileExistsError:
                pass
            finally:
                os.unlink(tmp)
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc}") from exc
        stored = self._meta_get(kind, key)
        return value if stored is None else stored

    def _set_last_activity(self, session_id: str, when: _dt.datetime) -> None:
        """Set the log file's modification time (what ``list()`` reports as ``updated_at``)."""
        session = self._open_session(session_id)
        try:
            path = session.path
        finally:
            session.close()
        epoch = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
        ns = (when - epoch) // _dt.timedelta(microseconds=1) * 1000
        try:
            os.utime(path, ns=(ns, ns), follow_symlinks=False)
        except FileNotFoundError:
            return  # deleted meanwhile: nothing to date
        except OSError as exc:
            raise StorageError(f"cannot set the modification time of {path}: {exc}") from exc

    def _meta_list(self, kind: str | None = None) -> list[tuple[str, str, str]]:
        """The entries of ``.meta/<kind>/`` (each file names its key), and in the agentkit
        dialect agentkit's own files: the sidecars of the active-session map and the binding
        (listed under the key recorded in them, else under their directory's name) and the CLI
        pointer. A file whose name is not its key's (copied in by hand) is not listed, as
        ``_meta_get`` of that key would not read it either."""
        base = os.path.join(self._root, META_DIR)
        try:
            kinds = sorted(os.listdir(base)) if kind is None else [kind]
        except FileNotFoundError:
            kinds = []
        except OSError as exc:
            raise StorageError(f"cannot list {base}: {exc}") from exc
        items: list[tuple[str, str, str]] = []
        for name in kinds:
            directory = os.path.join(base, name)
            if not os.path.isdir(directory) or os.path.islink(directory):
                continue
            try:
                files = sorted(os.listdir(directory))
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise StorageError(f"cannot list {directory}: {exc}") from exc
            for file_name in files:
                if not file_name.endswith(".json") or file_name.startswith("."):
                    continue  # the lock, or a temporary file of a write in progress
                path = os.path.join(directory, file_name)
                entry = _read_meta_entry(path, name)
                if entry is None:
                    continue  # removed meanwhile
                if self._meta_path(name, entry.key) == path:
                    items.append((name, entry.key, entry.value))
        if self.dialect == "agentkit":
            items.extend(self._ak_meta_list(kind))
        return sorted(items)

    def _ak_meta_list(self, kind: str | None) -> list[tuple[str, str, str]]:
        items: list[tuple[str, str, str]] = []
        if kind in (None, "cli"):
            pointer = self._ak_cli_get()
            if pointer is not None:
                items.append(("cli", "current", pointer))
        kinds = [k for k in _AK_SIDECARS if kind in (None, k)]
        if not kinds:
            return items
        try:
            names = sorted(os.listdir(self._root))
        except OSError as exc:
            raise StorageError(f"cannot list {self._root}: {exc}") from exc
        for dir_name in names:
            path = os.path.join(self._root, dir_name)
            if dir_name.startswith(".") or os.path.islink(path) or not os.path.isdir(path):
                continue
            for sidecar in kinds:
                file_name = _AK_SIDECARS[sidecar][0]
                try:
                    raw = _read_regular_path(os.path.join(path, file_name))
                except StorageError:
                    continue  # not a sidecar this store reads
                if raw is None:
                    continue
                try:
                    obj = decode(raw)
                except ValueError:
                    continue
                claim = obj.get(_AK_CLAIM) if isinstance(obj, dict) else None
                key = claim if isinstance(claim, str) else dir_name
                try:
                    value = self._ak_sidecar_get(sidecar, key)
                except (UsageError, StorageError, CorruptLogError):
                    continue
                if value is not None:
                    items.append((sidecar, key, value))
        return items

    def _meta_cas(self, kind: str, key: str, expected: str | None, new: str | None) -> bool:
        """Compare and set under an exclusive ``flock`` of ``.meta/<kind>/.cas.lock`` (so it is
        atomic with every other compare-and-set of the kind, in any process); the entry itself
        is replaced atomically as :meth:`_meta_set` does, so readers never wait. agentkit's
        own files (dialect ``agentkit``) are locked by a ``flock`` of the store directory
        instead, so no file of ours appears in agentkit's layout."""
        if self._meta_get(kind, key) != expected:
            return False  # another value now: no lock needed to say so
        if new == expected:
            return True
        lock_file = not (self.dialect == "agentkit" and (kind in _AK_SIDECARS or kind == "cli"))
        if lock_file:
            directory = os.path.dirname(self._meta_path(kind, key))
            lock_path = os.path.join(directory, CAS_LOCK)
            flags = os.O_RDWR | os.O_CREAT | _O_CLOEXEC | _O_NOFOLLOW | _O_NONBLOCK
            try:
                _private_dirs(self._root, directory)
                fd = os.open(lock_path, flags, 0o600)
            except OSError as exc:
                raise StorageError(f"cannot open {lock_path}: {exc}") from exc
        else:
            lock_path = self._root
            fd = self._root_fd()
        try:
            try:
                if lock_file and not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise StorageError(f"{lock_path} is not a regular file; refusing to use it")
                _flock(fd, _LOCK_EX)
            except OSError as exc:
                raise StorageError(f"cannot lock {lock_path}: {exc}") from exc
            if self._meta_get(kind, key) != expected:
                return False
            self._meta_set(kind, key, new)
            return True
        finally:
            os.close(fd)  # releases the lock

    # -- agentkit's layout of the identity mappings (dialect="agentkit") --------------------
    #
    # The active-session map and agent binding live in a directory per key,
    # <store>/<agentkit name>/current.json {"sessionId":...} and .../agent.json {"agentId":...};
    # the CLI pointer is the symbolic link <store>/cli_current.jsonl -> <agentkit name>.jsonl.
    # Every access goes through descriptors relative to the store directory and never follows
    # a symbolic link, so a planted link cannot lead a read or a write out of the store.

    def _root_fd(self) -> int:
        try:
            return os.open(self._root, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
        except OSError as exc:
            raise StoreUnavailable(f"cannot open the store directory {self._root}: {exc}") from exc

    def _ak_sidecar_get(self, kind: str, key: str) -> str | None:
        file_name, field = _AK_SIDECARS[kind]
        try:
            dir_name = _ak_sidecar_dir(key)
        except UsageError:
            return None  # agentkit cannot name it, so no mapping can exist for it
        where = os.path.join(self._root, dir_name, file_name)
        root = self._root_fd()
        try:
            dfd = _open_subdir(root, dir_name, where, create=False)
            if dfd is None:
                return None
            try:
                raw = _read_regular(dfd, file_name, where)
            finally:
                os.close(dfd)
        finally:
            os.close(root)
        if raw is None:
            return None
        try:
            obj = decode(raw)
        except ValueError as exc:
            raise CorruptLogError(f"{where} is not valid JSON: {exc}", path=where) from None
        if not isinstance(obj, dict):
            raise CorruptLogError(f"{where} is not a JSON object", path=where)
        claim = obj.get(_AK_CLAIM)
        if isinstance(claim, str) and claim != key:
            return None  # written for another key that agentkit names the same
        value = obj.get(field)
        if value is None:  # Go's decoder matches field names case-insensitively
            value = next((v for k, v in obj.items() if k.lower() == field.lower()), None)
        if not isinstance(value, str) or not value.strip():
            return None
        return value

    def _ak_sidecar_set(self, kind: str, key: str, value: str | None) -> None:
        file_name, field = _AK_SIDECARS[kind]
        dir_name = _ak_sidecar_dir(key)
        where = os.path.join(self._root, dir_name, file_name)
        root = self._root_fd()
        try:
            dfd = _open_subdir(root, dir_name, where, create=value is not None)
            if dfd is None:
                return  # nothing to remove
            try:
                claim = _read_regular(dfd, file_name, where)
                if claim is not None:
                    try:
                        other = decode(claim)
                    except ValueError:
                        other = None
                    owner = other.get(_AK_CLAIM) if isinstance(other, dict) else None
                    if isinstance(owner, str) and owner != key:
                        raise UsageError(
                            f"keys {owner!r} and {key!r} share agentkit's sidecar directory "
                            f"{dir_name}; agentkit's naming cannot keep them apart, so {key!r} "
                            f"is refused rather than overwriting {owner!r}'s {kind} entry"
                        )
                if value is None:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(file_name, dir_fd=dfd)
                else:
                    body = encode({field: value, _AK_CLAIM: key})
                    _atomic_write_at(dfd, file_name, body)
            finally:
                os.close(dfd)
            if value is None:
                with contextlib.suppress(OSError):  # only when nothing else is in it
                    os.rmdir(dir_name, dir_fd=root)
        except OSError as exc:
            raise StorageError(f"cannot write {where}: {exc}") from exc
        finally:
            os.close(root)

    def _ak_cli_get(self) -> str | None:
        link = os.path.join(self._root, CLI_CURRENT_LINK)
        try:
            target = os.readlink(link)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                raise StorageError(
                    f"{link} is not a symbolic link; agentkit's CLI pointer must be one"
                ) from None
            raise StorageError(f"cannot read {link}: {exc}") from exc
        if (
            not target.endswith(SUFFIX)
            or len(target) == len(SUFFIX)
            or "/" in target
            or "\\" in target
            or "\x00" in target
            or target.startswith(".")
        ):
            log.warning("ignoring %s: its target %r is no session file of the store", link, target)
            return None
        claimed = self._claimed_by(os.path.join(self._root, target))
        if claimed is not None:
            return claimed
        stem = target[: -len(SUFFIX)]
        candidates = [stem]
        if stem == "cli_default":
            candidates.insert(0, "cli:default")
        elif stem.startswith("cli_") and len(stem) > 4:
            candidates.insert(0, "cli:" + stem[4:])
        for candidate in candidates:  # an id whose file is the link's target
            try:
                if agentkit_file_name(candidate) == stem:
                    return candidate
            except UsageError:
                continue
        log.warning("ignoring %s: no session id names its target %r", link, target)
        return None

    def _ak_cli_set(self, session_id: str | None) -> None:
        link = os.path.join(self._root, CLI_CURRENT_LINK)
        root = self._root_fd()
        try:
            try:
                st: os.stat_result | None = os.lstat(CLI_CURRENT_LINK, dir_fd=root)
            except FileNotFoundError:
                st = None
            if st is not None and not stat.S_ISLNK(st.st_mode):
                raise StorageError(
                    f"{link} exists and is not a symbolic link; refusing to replace it"
                )
            if session_id is None:
                if st is not None:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(CLI_CURRENT_LINK, dir_fd=root)
                return
            target = agentkit_file_name(session_id) + SUFFIX
            if target == CLI_CURRENT_LINK:
                raise UsageError(f"session id {session_id!r} names the CLI pointer itself")
            claimed = self._claimed_by(os.path.join(self._root, target))
            if claimed is not None and claimed != session_id:
                raise UsageError(
                    f"session ids {claimed!r} and {session_id!r} map to the same agentkit file "
                    f"{target}; the CLI pointer cannot name {session_id!r}"
                )
            if claimed is None:  # claim the name, so the pointer reads back as this very id
                self._write_id_sidecar(session_id, os.path.join(self._root, target))
            tmp = f"{CLI_CURRENT_LINK}.{os.getpid()}.{threading.get_ident()}.tmp"
            os.symlink(target, tmp, dir_fd=root)
            try:
                os.replace(tmp, CLI_CURRENT_LINK, src_dir_fd=root, dst_dir_fd=root)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=root)
                raise
            with contextlib.suppress(OSError):
                os.fsync(root)
        except OSError as exc:
            raise StorageError(f"cannot set {link}: {exc}") from exc
        finally:
            os.close(root)

    def _write_id_sidecar(self, session_id: str, path: str) -> None:
        """A cut (hashed) file name cannot be read back as an id, nor can agentkit's names:
        keep the id beside it (which also claims an agentkit name for that one id)."""
        if "~" not in os.path.basename(path) and self.dialect != "agentkit":
            return
        id_path = path[: -len(SUFFIX)] + ID_SUFFIX
        if os.path.exists(id_path):
            return
        _atomic_write(id_path, session_id.encode("utf-8", "surrogatepass"))

    def _quarantine(
        self, path: str, data: bytes, reason: str, offset: int, session_id: str
    ) -> None:
        """Append bytes taken out of a log to its sidecar, followed by a newline."""
        target = path + QUARANTINE_SUFFIX
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | _O_CLOEXEC | _O_NOFOLLOW
        fd = os.open(target, flags, 0o600)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise StorageError(f"{target} is not a regular file; refusing to write to it")
            os.write(fd, data + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        log.warning(
            "session %r: moved %d bytes at offset %d of %s to %s (%s)",
            session_id,
            len(data),
            offset,
            path,
            target,
            reason,
        )

    def _id_of(self, name: str) -> str | None:
        stem = name[: -len(SUFFIX)]
        if self.dialect == "agentkit":  # the recorded id, or the name itself (which opens it)
            return self._claimed_by(os.path.join(self._root, name)) or stem
        sid = unsafe_name(stem)
        if sid is not None or "~" not in stem:
            return sid
        with contextlib.suppress(StorageError):  # an unreadable id: the file is not listed
            return self._claimed_by(os.path.join(self._root, name))
        return None

    def _exists(self, session_id: str) -> bool:
        try:
            st = os.lstat(self.path_for(session_id))
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StorageError(f"cannot look up session {session_id!r}: {exc}") from exc
        return stat.S_ISREG(st.st_mode) and st.st_size > 0

    def _list_all(self) -> list[SessionInfo]:
        out = []
        try:
            entries = list(os.scandir(self._root))
        except OSError as exc:
            raise StoreUnavailable(f"cannot list {self._root}: {exc}") from exc
        for entry in entries:
            if not entry.name.endswith(SUFFIX) or not entry.is_file(follow_symlinks=False):
                continue
            sid = self._id_of(entry.name)
            if sid is None:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if st.st_size == 0:
                continue
            updated = _dt.datetime.fromtimestamp(st.st_mtime_ns / 1e9, _dt.timezone.utc)
            last_seq, created = self._peek(entry.path)
            out.append(
                SessionInfo(
                    id=sid,
                    updated_at=updated,
                    created_at=created,
                    size=st.st_size,
                    last_seq=last_seq,
                )
            )
        return out

    def _peek(self, path: str) -> tuple[int, _dt.datetime | None]:
        """The file's last seq, from the head of its last line (-1 when unreadable), and its
        first event's time, from one read of its beginning (None when unknown)."""
        try:
            fd = os.open(path, os.O_RDONLY | _O_CLOEXEC | _O_NOFOLLOW | _O_NONBLOCK)
        except OSError:
            return -1, None
        try:
            try:
                last_seq = _last_seq(fd, os.fstat(fd).st_size)
            except OSError:
                last_seq = -1
            try:
                created = _first_time(fd)
            except OSError:
                created = None
            return last_seq, created
        finally:
            os.close(fd)

    def _delete(self, session_id: str, meta_kinds: Sequence[str]) -> bool:
        """All or nothing: the log is renamed aside first, so a directory the process may not
        write (or any other failure before that) leaves the session whole and raises
        :class:`StorageError`; only then is it emptied under the writers' lock (a session
        object still holding the file sees it shrink and starts over) and unlinked."""
        path = self.path_for(session_id)
        try:
            fd = os.open(path, os.O_RDWR | _O_CLOEXEC | _O_NOFOLLOW | _O_NONBLOCK)
        except FileNotFoundError:
            existed = False
        except OSError as exc:
            what = "is a symbolic link" if exc.errno == errno.ELOOP else str(exc)
            raise StorageError(
                f"cannot delete session {session_id!r}: {path} {what}; nothing was deleted"
            ) from None
        else:
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise StorageError(
                        f"cannot delete session {session_id!r}: {path} is not a regular file; "
                        "nothing was deleted"
                    )
                fcntl.flock(fd, fcntl.LOCK_EX)
                tomb = f"{path}.{os.getpid()}.{threading.get_ident()}.deleting"
                try:
                    os.rename(path, tomb)
                except OSError as exc:
                    raise StorageError(
                        f"cannot delete session {session_id!r} at {path}: {exc.strerror or exc}; "
                        "nothing was deleted"
                    ) from None
                existed = os.fstat(fd).st_size > 0
                os.ftruncate(fd, 0)
                os.unlink(tomb)
            except OSError as exc:
                raise StorageError(f"deleting session {session_id!r} at {path}: {exc}") from exc
            finally:
                os.close(fd)
        for kind in meta_kinds:
            self._meta_set(kind, session_id, None)
        stem = path[: -len(SUFFIX)]
        for extra in (stem + ID_SUFFIX, path + QUARANTINE_SUFFIX):
            try:
                os.unlink(extra)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise StorageError(f"cannot delete {extra}: {exc}") from exc
        return existed

    def _last_append(self, session_id: str) -> _dt.datetime | None:
        path = self.path_for(session_id)
        try:
            fd = os.open(path, os.O_RDONLY | _O_CLOEXEC | _O_NOFOLLOW | _O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read session {session_id!r} at {path}: {exc}") from exc
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise StorageError(f"session {session_id!r}: {path} is not a regular file")
            line = _last_line(fd)
        finally:
            os.close(fd)
        if line is None:
            return None
        try:
            return _decode_line(line).time
        except msgspec.DecodeError:
            pass
        session = self._open_session(session_id)  # reads up to a torn tail, writing nothing
        try:
            events = session.read(after=max(0, session.latest_seq - 1))
            return events[-1].time if events else None
        finally:
            session.close()


class _MetaEntry(msgspec.Struct, rename="camel"):
    """One small persisted value (``.meta/<kind>/<key>.json``)."""

    key: str
    value: str
    updated_at: _dt.datetime | None = None


def _read_meta_entry(path: str, kind: str) -> _MetaEntry | None:
    """The meta entry stored at ``path`` (never through a symbolic link); None when there is
    no file."""
    try:
        fd = os.open(path, os.O_RDONLY | _O_CLOEXEC | _O_NOFOLLOW)
        with open(fd, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    try:
        return decode(raw, _MetaEntry)
    except msgspec.DecodeError as exc:
        raise CorruptLogError(f"{path} is not a valid {kind} entry: {exc}", path=path) from exc


_LEFTOVER = re.compile(r"\.(\d+)\.\d+\.(?:tmp|add)\Z")
"""The end of a temporary meta file's name: ``.<pid>.<thread id>.tmp`` (an atomic write) or
``.add`` (an "add unless present")."""
_LEFTOVER_AGE = 600.0
"""Seconds after which a temporary meta file is a leftover even when a process with its writer's
pid runs (another host's, or a pid used again)."""


def _running(pid: int) -> bool:
    """Whether a process ``pid`` runs on this host (this one counts: another thread of it may
    be writing)."""
    if pid == os.getpid():
        return True
    if pid <= 0:
        return False  # (0 and -1 would name process groups)
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _sync_dir(path: str) -> None:
    """``fsync`` the directory ``path``: the names created in it are then durable."""
    fd = os.open(path, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _atomic_write(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old or the new content, never a mix.
    A failed write (a full disk, say) leaves no temporary file behind."""
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _O_CLOEXEC | _O_NOFOLLOW
    try:
        fd = os.open(tmp, flags, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _private_dirs(root: str, path: str) -> None:
    """Create ``path`` and every missing directory between ``root`` and it, each owner-only
    (``os.makedirs`` gives intermediate directories the umask's default mode)."""
    relative = os.path.relpath(path, root)
    current = root
    for part in relative.split(os.sep):
        current = os.path.join(current, part)
        try:
            os.mkdir(current, 0o700)
        except FileExistsError:
            continue
        os.chmod(current, 0o700)  # mkdir's mode is masked by the umask


def _ak_sidecar_dir(key: str) -> str:
    """agentkit's per-key sidecar directory name (its session file name without ``.jsonl``).
    A name starting with ``.`` is refused: ``.`` is the store itself (an agentkit bug) and
    ``.locks`` and ``.meta`` are this store's own directories."""
    name = agentkit_file_name(key)
    if name.startswith("."):
        raise UsageError(
            f"key {key!r} names the agentkit sidecar directory {name!r}; names starting with "
            "'.' are reserved for the store's own files"
        )
    return name


def _open_subdir(root: int, name: str, where: str, *, create: bool) -> int | None:
    """A descriptor of the directory ``name`` inside ``root`` (created owner-only with
    ``create``), never through a symbolic link; None when it does not exist."""
    created = False
    if create:
        try:
            os.mkdir(name, 0o700, dir_fd=root)
            created = True
        except FileExistsError:
            pass
    try:
        fd = os.open(name, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=root)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise StorageError(
                f"{os.path.dirname(where)} is a symbolic link or not a directory; refusing "
                "to follow it out of the store"
            ) from None
        raise StorageError(f"cannot open {os.path.dirname(where)}: {exc}") from exc
    if created:
        os.fchmod(fd, 0o700)  # mkdir's mode is masked by the umask
    return fd


def _read_regular(dirfd: int, name: str, where: str) -> bytes | None:
    """The content of the regular file ``name`` in ``dirfd`` (no symbolic link), or None."""
    try:
        fd = os.open(name, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC | _O_NONBLOCK, dir_fd=dirfd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        what = "is a symbolic link" if exc.errno == errno.ELOOP else str(exc)
        raise StorageError(f"cannot read {where}: {what}") from None
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise StorageError(f"{where} is not a regular file; refusing to read it")
        return f.read()


def _read_regular_path(path: str) -> bytes | None:
    """:func:`_read_regular` of a path (its directory opened without following a link)."""
    directory, name = os.path.split(path)
    try:
        dirfd = os.open(directory, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC)
    except OSError as exc:
        raise StorageError(f"cannot open {directory}: {exc}") from exc
    try:
        return _read_regular(dirfd, name, path)
    finally:
        os.close(dirfd)


def _atomic_write_at(dirfd: int, name: str, data: bytes) -> None:
    """:func:`_atomic_write` of ``name`` inside the directory ``dirfd``: owner-only, readers
    see the old or the new content, and the rename is made durable."""
    tmp = f"{name}.{os.getpid()}.{threading.get_ident()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC | _O_NOFOLLOW
    try:
        fd = os.open(tmp, flags, 0o600, dir_fd=dirfd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
        os.fsync(dirfd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dirfd)
        raise


def _last_seq(fd: int, size: int) -> int:
    """The seq of the last complete (newline-terminated) event line that ends a batch, reading
    only the heads of the last lines (the lines of an unfinished batch are stepped over, as
    readers do); -1 when none is found (an empty file, or only blank or foreign lines)."""
    end = size
    while end > 0:
        if os.pread(fd, 1, end - 1) != b"\n":  # a torn tail: step back to its line start
            pos, start = end, -1
        else:
            pos, start = end - 1, -1
        while pos > 0 and start < 0:
            begin = max(0, pos - 65536)
            chunk = os.pread(fd, pos - begin, begin)
            nl = chunk.rfind(b"\n")
            if nl != -1:
                start = begin + nl + 1
            pos = begin
        start = max(start, 0)
        if os.pread(fd, 1, end - 1) == b"\n":
            head = os.pread(fd, _HEAD_BYTES, start)
            match = _SEQ_HEAD.match(head)
            if match and not _HAS_MORE.match(head):
                return _head_seq(match)
        end = start
    return -1


def _last_line(fd: int) -> bytes | None:
    """The last non-blank line of a file, without its newline."""
    pos = os.fstat(fd).st_size
    buf = b""
    while pos > 0:
        begin = max(0, pos - 65536)
        buf = os.pread(fd, pos - begin, begin) + buf
        pos = begin
        stripped = buf.rstrip()
        if not stripped:
            continue
        nl = stripped.rfind(b"\n")
        if nl != -1 or pos == 0:
            return stripped[nl + 1 :]
    return None


def open_jsonl(url: str, **options: Any) -> JsonlStore:
    """``open_store`` for a directory path, ``jsonl:///abs/dir``, ``jsonl:dir`` or ``file:``."""
    scheme, sep, _ = url.partition(":")
    if sep and scheme.lower() in ("jsonl", "file"):
        return JsonlStore(path_of(url, scheme.lower()), **options)
    return JsonlStore(url, **options)


class JsonlFileStore(JsonlStore):
    """A JSONL store over one explicit file, which holds its one session (agentkit's
    ``NewJSONL(path)``).

    ``session_id`` names the session (default: the file's name without ``.jsonl``); ``get``
    of that id (or of ``""``, as agentkit's static store allows) gives the session whose
    :attr:`~JsonlSession.path` is the file, and any other id raises
    :class:`~agentsession.errors.SessionNotFound`. The file keeps the dialect of its first
    line; a new one is written in ``dialect``. Turn locks and the key-value entries live beside
    the file, in the directory's ``.locks`` and ``.meta`` (a :class:`JsonlStore` over the same
    directory uses the same ones). The directory is created owner-only when missing; the file
    must be a regular file, reached without a symbolic link.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, session_id: str | None = None, **options: Any
    ) -> None:
        raw = os.path.abspath(os.fspath(path))
        name = os.path.basename(raw)
        if not name or name in (".", "..") or os.path.isdir(raw):
            raise UsageError(f"{raw} is not a file path")
        super().__init__(os.path.dirname(raw), **options)
        self._file = os.path.join(self._root, name)
        try:
            st = os.lstat(self._file)
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISREG(st.st_mode):
                raise StorageError(f"{self._file} is not a regular file; refusing to use it")
        sid = session_id if session_id is not None else name.removesuffix(SUFFIX)
        if not isinstance(sid, str) or not sid.strip():
            raise UsageError(f"a session id is required for {self._file}")
        self.session_id: str = sid
        """The id of the file's one session."""

    @property
    def file_path(self) -> str:
        """The session's file (agentkit's ``FilePath``)."""
        return self._file

    @property
    def location(self) -> str:
        """The session's file."""
        return self._file

    @property
    def url(self) -> str:
        """The session's file."""
        return self._file

    @property
    def session(self) -> JsonlSession:
        """The file's session (``get(session_id)``)."""
        found = self.get(self.session_id)
        assert isinstance(found, JsonlSession)
        return found

    def get(self, session_id: str) -> JsonlSession:
        """The file's session: ``session_id`` must be its id (or ``""``)."""
        found = super().get(session_id or self.session_id)
        assert isinstance(found, JsonlSession)
        return found

    def _mine(self, session_id: str) -> bool:
        return session_id == self.session_id

    def path_for(self, session_id: str) -> str:
        """The file, for the file's session id; :class:`SessionNotFound` for any other."""
        if not self._mine(session_id):
            held = f"{self._file} holds only {self.session_id!r}"
            raise SessionNotFound(session_id, f"session not found: {session_id!r} ({held})")
        return self._file

    def _cache_key(self, session_id: str) -> str:
        return session_id

    def _open_session(self, session_id: str) -> JsonlSession:
        return JsonlSession(self, session_id, self.path_for(session_id))

    def _claimed_by(self, path: str) -> str | None:
        return self.session_id if path == self._file else None

    def _write_id_sidecar(self, session_id: str, path: str) -> None:
        return None  # the id is the store's own; nothing is written beside the file

    def _id_of(self, name: str) -> str | None:
        return self.session_id if name == os.path.basename(self._file) else None

    def _exists(self, session_id: str) -> bool:
        return self._mine(session_id) and super()._exists(session_id)

    def _list_all(self) -> list[SessionInfo]:
        name = os.path.basename(self._file)
        try:
            st = os.lstat(self._file)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StoreUnavailable(f"cannot read {self._file}: {exc}") from exc
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0 or not name:
            return []
        updated = _dt.datetime.fromtimestamp(st.st_mtime_ns / 1e9, _dt.timezone.utc)
        last_seq, created = self._peek(self._file)
        return [
            SessionInfo(
                id=self.session_id,
                updated_at=updated,
                created_at=created,
                size=st.st_size,
                last_seq=last_seq,
            )
        ]

    def _delete(self, session_id: str, meta_kinds: Sequence[str]) -> bool:
        return self._mine(session_id) and super()._delete(session_id, meta_kinds)

    def _last_append(self, session_id: str) -> _dt.datetime | None:
        return super()._last_append(session_id) if self._mine(session_id) else None


def open_jsonl_file(
    path: str | os.PathLike[str], *, session_id: str | None = None, **options: Any
) -> JsonlSession:
    """The session kept in the one JSONL file ``path`` (agentkit's ``NewJSONL``): a
    :class:`JsonlSession` whose :attr:`~JsonlSession.path` is ``path``.

    ``session_id`` defaults to the file's name without ``.jsonl``. ``options`` are those of
    :class:`JsonlStore` (``dialect``, ``on_corrupt``, ``durability``, ...). The file is created
    by the first append; reopening it resumes its seqs. For turn locks or crash recovery, make
    the :class:`JsonlFileStore` itself and use its ``session``.
    """
    return JsonlFileStore(path, session_id=session_id, **options).session
