"""Meta entries as files: ``.meta/<kind>/<key>.json``, each replaced atomically, with
compare-and-set under a lock file per kind."""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import re
import stat
import threading
import time as _time
from collections.abc import Callable

import msgspec

from ..._files import (
    O_CLOEXEC,
    O_NOFOLLOW,
    O_NONBLOCK,
    atomic_write,
    compare_and_set,
    private_dirs,
)
from ..._names import safe_name
from ...codec import decode, encode
from ...errors import CorruptLogError, StorageError

__all__ = ["CAS_LOCK", "META_DIR", "MetaFiles"]

META_DIR = ".meta"
CAS_LOCK = ".cas.lock"
"""The lock file in each ``.meta/<kind>/`` directory that compare-and-set holds (``flock``);
never taken for an entry, whose file name ends in ``.json``."""

_LEFTOVER = re.compile(r"\.(\d+)\.\d+\.(?:tmp|add)\Z")
"""The end of a temporary meta file's name: ``.<pid>.<thread id>.tmp`` (an atomic write) or
``.add`` (an "add unless present")."""
_LEFTOVER_AGE = 600.0
"""Seconds after which a temporary meta file is a leftover even when a process with its writer's
pid runs (another host's, or a pid used again)."""


class _MetaEntry(msgspec.Struct, rename="camel"):
    """One small persisted value (``.meta/<kind>/<key>.json``)."""

    key: str
    value: str
    updated_at: _dt.datetime | None = None


class MetaFiles:
    """The meta entries under ``<root>/.meta``; ``clock`` stamps ``updatedAt``."""

    def __init__(self, root: str, clock: Callable[[], _dt.datetime]) -> None:
        self._root = root
        self._clock = clock

    def path(self, kind: str, key: str) -> str:
        """The file of an entry (the key's safe, injective name)."""
        return os.path.join(self._root, META_DIR, kind, safe_name(key) + ".json")

    def get(self, kind: str, key: str) -> str | None:
        """The value of an entry, or None."""
        entry = _read_meta_entry(self.path(kind, key), kind)
        return None if entry is None else entry.value

    def set(self, kind: str, key: str, value: str | None) -> None:
        """Replace an entry atomically (None removes it)."""
        path = self.path(kind, key)
        try:
            if value is None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                return
            private_dirs(self._root, os.path.dirname(path))
            atomic_write(path, encode(_MetaEntry(key=key, value=value, updated_at=self._clock())))
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc}") from exc

    def add(self, kind: str, key: str, value: str) -> str:
        """Create an entry unless it exists (a hard link: the first writer wins, in any
        process); the value stored now."""
        path = self.path(kind, key)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.add"
        try:
            private_dirs(self._root, os.path.dirname(path))
            atomic_write(tmp, encode(_MetaEntry(key=key, value=value, updated_at=self._clock())))
            try:
                os.link(tmp, path)  # fails when the entry exists: the first writer wins
            except FileExistsError:
                pass
            finally:
                os.unlink(tmp)
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc}") from exc
        stored = self.get(kind, key)
        return value if stored is None else stored

    def cas(self, kind: str, key: str, expected: str | None, new: str | None) -> bool:
        """Compare and set under an exclusive ``flock`` of ``.meta/<kind>/.cas.lock`` (so it is
        atomic with every other compare-and-set of the kind, in any process); the entry itself
        is replaced atomically as :meth:`set` does, so readers never wait."""
        directory = os.path.dirname(self.path(kind, key))
        lock_path = os.path.join(directory, CAS_LOCK)

        def open_lock() -> int:
            flags = os.O_RDWR | os.O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK
            try:
                private_dirs(self._root, directory)
                fd = os.open(lock_path, flags, 0o600)
            except OSError as exc:
                raise StorageError(f"cannot open {lock_path}: {exc}") from exc
            try:
                regular = stat.S_ISREG(os.fstat(fd).st_mode)
            except OSError as exc:
                os.close(fd)
                raise StorageError(f"cannot lock {lock_path}: {exc}") from exc
            if not regular:
                os.close(fd)
                raise StorageError(f"{lock_path} is not a regular file; refusing to use it")
            return fd

        return compare_and_set(
            lambda: self.get(kind, key),
            lambda value: self.set(kind, key, value),
            expected,
            new,
            open_lock=open_lock,
            lock_name=lock_path,
        )

    def list(self, kind: str | None) -> list[tuple[str, str, str]]:
        """The entries of ``.meta/<kind>/`` (each file names its key). A file whose name is
        not its key's (copied in by hand) is not listed, as :meth:`get` of that key would not
        read it either."""
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
                if self.path(name, entry.key) == path:
                    items.append((name, entry.key, entry.value))
        return sorted(items)

    def clean_crash_leftovers(self) -> None:
        """Remove what a killed process left of its writes in ``.meta/<kind>/``: the
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


def _read_meta_entry(path: str, kind: str) -> _MetaEntry | None:
    """The meta entry stored at ``path`` (never through a symbolic link); None when there is
    no file."""
    try:
        fd = os.open(path, os.O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
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
