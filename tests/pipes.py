"""Reading a child process's output line by line with a bound against a hang.

``select`` on a text pipe misses lines that the file object has already buffered (a child
that writes several lines at once leaves the rest in the reader's buffer, and ``select`` then
waits for bytes that never come). These helpers read the pipe's descriptor themselves and keep
what they read past a line, so every line a child wrote is returned, in order.
"""

from __future__ import annotations

import os
import select
import time
from typing import IO

_pending: dict[int, bytes] = {}


def readline_within(stream: IO[str], seconds: float = 60.0) -> str:
    """The next line of a child's output (with its newline); "" when none comes within
    ``seconds`` (a bound against a hang, far above the time the line takes) or the child
    closed the pipe. Do not mix with ``stream.readline()`` on the same pipe."""
    fd = stream.fileno()
    deadline = time.monotonic() + seconds
    buffered = _pending.get(fd, b"")
    while b"\n" not in buffered:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buffered += chunk
    line, newline, rest = buffered.partition(b"\n")
    if not newline:
        _pending[fd] = buffered
        return ""
    _pending[fd] = rest
    return (line + newline).decode()


def unread(stream: IO[str]) -> str:
    """What :func:`readline_within` read past its last line and has not returned (forgotten
    here: the pipe is done with). Call before the pipe is closed."""
    return _pending.pop(stream.fileno(), b"").decode()
