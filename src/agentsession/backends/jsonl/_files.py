"""File primitives the JSONL store's modules share: open flags, whole reads, durable and
atomic writes, owner-only directories."""

from __future__ import annotations

import contextlib
import os
import threading

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


def atomic_write(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old or the new content, never a mix.
    A failed write (a full disk, say) leaves no temporary file behind."""
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | O_CLOEXEC | O_NOFOLLOW
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
