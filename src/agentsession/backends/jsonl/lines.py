"""Reading JSONL lines of either dialect without a session: line heads, a line's event or
time, and the short reads ``list()`` and ``last_append`` make of a log's ends."""

from __future__ import annotations

import datetime as _dt
import os
import re

import msgspec

from ...codec import TooDeep, decode
from ...events import Event
from .layout import lines_of

HAS_MORE = re.compile(rb'\{"seq":\d+,"more":true,')
"""The head of a line that a batch's later lines follow."""
# A line's head, in either dialect: ours, or agentkit's ({"ID":"…","Seq":N,…}).
SEQ_HEAD = re.compile(rb'\{(?:"seq":(\d+),|"ID":"(?:[^"\\]|\\.)*","Seq":(\d+),)')
HEAD_BYTES = 256  # enough for either head (an agentkit ID longer than this is stepped over)
FIRST_LINE_BYTES = 64 << 10
"""How much of a log's beginning ``list()`` reads for the time of its first event (one read;
a longer first line leaves ``created_at`` unknown)."""


def head_seq(found: re.Match[bytes]) -> int:
    """The seq a :data:`SEQ_HEAD` match read."""
    return int(found[1] or found[2])


def decode_line(line: bytes) -> Event:
    """One line of either dialect as an event (raises :class:`msgspec.DecodeError`)."""
    return lines_of(line).decode_line(line)


def is_blank(line: bytes) -> bool:
    """Whether a line is empty or spaces (a quarantined line is blanked)."""
    return not line.strip()


def complete_json(line: bytes) -> bool:
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


def next_seq(lines: list[bytes], start: int) -> int:
    """The seq of the first line from ``lines[start]`` on that decodes as an event (0: none)."""
    for line in lines[start:]:
        if is_blank(line):
            continue
        try:
            return decode_line(line).seq
        except msgspec.DecodeError:
            continue
    return 0


def first_time(fd: int) -> _dt.datetime | None:
    """The time of the file's first event, from one read of its first
    :data:`FIRST_LINE_BYTES` (blank lines stepped over); None when that holds no whole line
    or the line does not decode."""
    head = os.pread(fd, FIRST_LINE_BYTES, 0)
    start = 0
    while True:
        end = head.find(b"\n", start)
        if end == -1:
            return None  # a first line longer than the read, or a torn one
        if not is_blank(head[start:end]):
            break
        start = end + 1
    line = head[start:end]
    try:
        return lines_of(line).line_time(line)
    except (msgspec.DecodeError, ValueError):
        return None


def last_seq_of(fd: int, size: int) -> int:
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
            head = os.pread(fd, HEAD_BYTES, start)
            match = SEQ_HEAD.match(head)
            if match and not HAS_MORE.match(head):
                return head_seq(match)
        end = start
    return -1


def last_line(fd: int) -> bytes | None:
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
