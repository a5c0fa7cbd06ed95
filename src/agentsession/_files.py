"""File primitives that the JSONL store's modules and agentkit's layout share: open flags,
whole reads, durable and atomic writes, owner-only directories, compare-and-set under a
``flock``."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable

from .errors import StorageError

O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO in place of a file must not block open()
O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def pread_all(fd: int, size: int, offset: int) -> bytes:
    """``size`` bytes from ``offset`` (fewer at the end of the file), however many reads it
    takes."""
    parts = []
    while size > 0:
        chunk = os.pread(fd, min(size, 1 << 30), offset)
        if not chunk:
            break
        parts.append(chunk)
        size -= len(chunk)
        offset += len(chunk)
    return b"".join(parts)


def sync_dir(path: str) -> None:
    """``fsync`` the directory ``path``: the names created in it are then durable."""
    fd = os.open(path, os.O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (however many writes it takes), then ``fsync`` it."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


def atomic_write(path: str, data: bytes, *, dir_fd: int | None = None) -> None:
    """Write ``data`` to ``path`` (owner-only) so that readers see the old or the new content,
    never a mix. A failed write (a full disk, say) leaves no temporary file behind. With
    ``dir_fd``, ``path`` is a name inside that directory (nothing above it is resolved again),
    the temporary file must be new, and the rename is made durable."""
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    fresh = os.O_TRUNC if dir_fd is None else os.O_EXCL
    flags = os.O_WRONLY | os.O_CREAT | fresh | O_CLOEXEC | O_NOFOLLOW
    try:
        fd = os.open(tmp, flags, 0o600, dir_fd=dir_fd)
        try:
            write_synced(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        if dir_fd is not None:
            os.fsync(dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def private_dirs(root: str, path: str) -> None:
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


def compare_and_set(
    read: Callable[[], str | None],
    write: Callable[[str | None], None],
    expected: str | None,
    new: str | None,
    *,
    open_lock: Callable[[], int],
    lock_name: str,
) -> bool:
    """Compare and set under an exclusive ``flock`` of the descriptor ``open_lock()`` returns
    (closed after, which releases the lock), so it is atomic with every other one that locks
    the same file, in any process: False when ``read()`` is not ``expected`` (looked at first
    without the lock, which is not needed to say so, then again under it); else ``write(new)``
    and True."""
    if read() != expected:
        return False  # another value now: no lock needed to say so
    if new == expected:
        return True
    import fcntl  # here: the callers say why they need POSIX, this module need not

    fd = open_lock()
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            raise StorageError(f"cannot lock {lock_name}: {exc}") from exc
        if read() != expected:
            return False
        write(new)
        return True
    finally:
        os.close(fd)  # releases the lock
