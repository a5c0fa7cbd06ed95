"""How a JSONL store learns of appends other processes make (its
:class:`~agentsession.follow.Watcher`): inotify on the store's directory on Linux, a poll of
the session files' sizes and modification times elsewhere.

Every session file of a store lies in its directory itself (in both layouts: the
subdirectories hold locks, meta entries and agentkit's sidecars, never a log), so one watch on
the directory sees every append, creation, deletion and rename of a log. A file's name is
mapped back to its session id by the store's catalog; a name that does not tell its id for
sure (agentkit's names, which are not injective, without the id recorded beside them) wakes
every follower instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import select
import stat
import struct
import sys
import threading
from collections.abc import Callable
from typing import Final

from ...interop.jsonl_layout import SUFFIX

__all__ = ["POLL_INTERVAL", "FileWatcher", "Inotify"]

POLL_INTERVAL: Final = 0.02
"""Seconds between two looks at the session files where inotify is unavailable."""

_STOP_CHECK = 0.1  # seconds a wait for inotify events lasts before ``stop`` is looked at again

# <sys/inotify.h>
_IN_MODIFY = 0x00000002
_IN_CLOSE_WRITE = 0x00000008
_IN_MOVED_FROM = 0x00000040
_IN_MOVED_TO = 0x00000080
_IN_CREATE = 0x00000100
_IN_DELETE = 0x00000200
_IN_DELETE_SELF = 0x00000400
_IN_MOVE_SELF = 0x00000800
_IN_Q_OVERFLOW = 0x00004000
_IN_IGNORED = 0x00008000
_IN_ONLYDIR = 0x01000000
_IN_ISDIR = 0x40000000
_MASK = (
    _IN_MODIFY
    | _IN_CLOSE_WRITE
    | _IN_CREATE
    | _IN_DELETE
    | _IN_MOVED_TO
    | _IN_MOVED_FROM
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
    | _IN_ONLYDIR
)
_GONE = _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_IGNORED  # the directory watched is no more
_HEAD = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name)
_READ_SIZE = 64 * 1024  # many events at once (one is at most 16 + NAME_MAX + 1 bytes)

_libc_calls: tuple[Callable[..., int], Callable[..., int]] | None = None
_libc_lock = threading.Lock()


def _inotify_calls() -> tuple[Callable[..., int], Callable[..., int]] | None:
    """libc's ``inotify_init1`` and ``inotify_add_watch`` (None where there are none: not
    Linux, or a C library that ctypes cannot load)."""
    global _libc_calls
    if not sys.platform.startswith("linux"):
        return None
    with _libc_lock:
        if _libc_calls is None:
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
                init1 = libc.inotify_init1
                add_watch = libc.inotify_add_watch
            except (OSError, AttributeError):
                return None
            init1.argtypes = [ctypes.c_int]
            init1.restype = ctypes.c_int
            add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
            add_watch.restype = ctypes.c_int
            _libc_calls = (init1, add_watch)
        return _libc_calls


class Inotify:
    """An inotify descriptor watching one directory for changes of the files in it (made by
    :meth:`open`; close it with :meth:`close`)."""

    def __init__(self, fd: int, directory: str) -> None:
        self.fd = fd
        """The inotify descriptor (non-blocking, closed on exec)."""
        self.directory = directory
        """The directory watched."""
        self._poller = select.poll()
        self._poller.register(fd, select.POLLIN)

    @classmethod
    def open(cls, directory: str) -> Inotify | None:
        """A watch on ``directory`` (appends, creations, deletions, renames of the files in
        it); None where inotify is unavailable: not Linux, no C library to call, the
        process's or user's inotify limits reached, or the directory unreadable."""
        calls = _inotify_calls()
        if calls is None:
            return None
        init1, add_watch = calls
        fd = init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:  # EMFILE: too many inotify instances; ENOSYS: none in this kernel
            return None
        if add_watch(fd, os.fsencode(directory), _MASK) < 0:  # ENOSPC: the watch limit
            os.close(fd)
            return None
        return cls(fd, directory)

    def read(self, timeout: float) -> list[tuple[int, str]] | None:
        """The events that came within ``timeout`` seconds, as (mask, file name) pairs (an
        empty list when none did); None when the directory is gone or renamed (the watch
        ended)."""
        if not self._poller.poll(int(timeout * 1000)):
            return []
        try:
            data = os.read(self.fd, _READ_SIZE)
        except BlockingIOError:
            return []
        except OSError as exc:
            if exc.errno == errno.EINTR:
                return []
            raise
        out: list[tuple[int, str]] = []
        offset = 0
        while offset + _HEAD.size <= len(data):
            _, mask, _, length = _HEAD.unpack_from(data, offset)
            start = offset + _HEAD.size
            raw = data[start : start + length].rstrip(b"\0")
            offset = start + length
            if mask & _GONE:
                return None
            out.append((mask, os.fsdecode(raw)))
        return out

    def close(self) -> None:
        """Close the descriptor (the watch ends with it)."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)


_Signature = tuple[int, int, int]  # a file's inode, size and modification time (ns)


class FileWatcher:
    """The :class:`~agentsession.follow.Watcher` of a JSONL store: ``changed(session_id)``
    when a session file in ``directory`` is written, created, deleted or renamed (``only``:
    that one file name alone), ``changed(None)`` when a file's name does not tell its session
    (``session_of(name)`` returned None) or events were lost. inotify where it is available
    (Linux, within the inotify limits), else a look at every session file's inode, size and
    modification time each ``poll_interval`` seconds."""

    def __init__(
        self,
        directory: str,
        session_of: Callable[[str], str | None],
        *,
        only: str | None = None,
        poll_interval: float = POLL_INTERVAL,
    ) -> None:
        self.directory = directory
        """The store's directory."""
        self.session_of = session_of
        """The session id of a file name in the directory (None: it cannot be told)."""
        self.only = only
        """The one file name watched (None: every ``.jsonl`` file)."""
        self.poll_interval = poll_interval
        """Seconds between two looks at the files when inotify is unavailable."""
        self.mode = ""
        """How the last :meth:`run` watched: ``"inotify"`` or ``"poll"`` ("" before)."""

    def _wanted(self, name: str) -> bool:
        return name == self.only if self.only is not None else name.endswith(SUFFIX)

    def _tell(self, names: set[str], changed: Callable[[str | None], None]) -> None:
        ids: set[str | None] = set()
        for name in names:
            try:
                ids.add(self.session_of(name))
            except Exception:  # an unreadable id sidecar, say: any session may have grown
                ids.add(None)
        if None in ids:
            changed(None)
            return
        for sid in ids:
            changed(sid)

    def run(self, changed: Callable[[str | None], None], stop: threading.Event) -> None:
        """Watch until ``stop`` is set (returns within about 0.1 s of it)."""
        watch = Inotify.open(self.directory)
        if watch is None:
            self.mode = "poll"
            self._poll(changed, stop)
            return
        self.mode = "inotify"
        changed(None)  # watching now: what was appended before is read by every follower
        try:
            while not stop.is_set():
                events = watch.read(_STOP_CHECK)
                if events is None:  # the directory went away: look at it by polling
                    changed(None)
                    break
                names: set[str] = set()
                lost = False
                for mask, name in events:
                    if mask & _IN_Q_OVERFLOW:
                        lost = True
                    elif not mask & _IN_ISDIR and self._wanted(name):
                        names.add(name)
                if lost:
                    changed(None)
                elif names:
                    self._tell(names, changed)
        finally:
            watch.close()
        if not stop.is_set():
            self.mode = "poll"
            self._poll(changed, stop)

    def _snapshot(self) -> dict[str, _Signature]:
        """Every watched file's signature."""
        out: dict[str, _Signature] = {}
        if self.only is not None:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(self.directory, self.only))
                if stat.S_ISREG(st.st_mode):
                    out[self.only] = (st.st_ino, st.st_size, st.st_mtime_ns)
            return out
        try:
            entries = os.scandir(self.directory)
        except OSError:
            return out  # gone or unreadable: no file to watch
        with entries:
            for entry in entries:
                if not entry.name.endswith(SUFFIX):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    out[entry.name] = (st.st_ino, st.st_size, st.st_mtime_ns)
        return out

    def _poll(self, changed: Callable[[str | None], None], stop: threading.Event) -> None:
        """The fallback: compare the files' signatures every :attr:`poll_interval`."""
        seen = self._snapshot()
        changed(None)  # watching now: what was appended before is read by every follower
        while not stop.wait(self.poll_interval):
            now = self._snapshot()
            if now == seen:
                continue
            names = {n for n, sig in now.items() if seen.get(n) != sig}
            names.update(n for n in seen if n not in now)
            seen = now
            self._tell(names, changed)
