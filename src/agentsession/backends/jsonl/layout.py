"""The store's own layout of JSONL files, and the choice between the layouts and dialects.

:data:`NATIVE_LINES` is agentsession's line format (``docs/format.md``); :data:`NATIVE_LAYOUT`
names files with :func:`~agentsession._names.safe_name` and keeps every meta entry in
``.meta/``. agentkit's are in :mod:`agentsession.interop.agentkit_layout`; the protocols both
meet are in :mod:`agentsession.interop.jsonl_layout`.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from collections.abc import Callable, Sequence
from typing import Literal

import msgspec

from ..._names import safe_name, unsafe_name
from ...codec import encoder
from ...errors import StorageError
from ...events import Event, decode_event, encode_event
from ...interop.agentkit_layout import AGENTKIT_LAYOUT, AGENTKIT_LINES, LINE_START
from ...interop.jsonl_layout import SUFFIX, Dialect, JsonlLayout, LineDialect, MetaStore

__all__ = ["NATIVE_LAYOUT", "NATIVE_LINES", "NativeLayout", "NativeLines", "layout_for", "lines_of"]

MORE = b'"more":true,'
"""The flag on every line of a batch but its last (``docs/format.md``)."""


_encode = encoder.encode


def _one_line(event: Event) -> bytes:
    """One event's line: :func:`~agentsession.events.encode_event`, with its common case (no
    lone surrogate to escape) made here, for the single-event append."""
    try:
        return _encode(event) + b"\n"
    except UnicodeEncodeError:
        return encode_event(event) + b"\n"


def _bodies(events: Sequence[Event]) -> list[bytes]:
    return [encode_event(event)[1:] for event in events]


class _LineTime(msgspec.Struct, gc=False):
    """The one field of an agentsession line that ``list()`` decodes (sealed lines keep it in
    clear too)."""

    time: _dt.datetime | None = None


_line_time = msgspec.json.Decoder(_LineTime)


class NativeLines:
    """agentsession's lines: ``{"seq":N,`` first, so the rest of each line is encoded before
    the file lock is taken, and a batch flagged ``"more":true`` on all lines but its last."""

    marker_type = b'"type":"session/compaction"'
    """How a compaction marker's type reads inside a line."""
    marker_head = re.compile(rb'\{"seq":\d+,(?:"more":true,)?\Z')
    """A line's head up to its ``type``."""

    def __init__(self) -> None:
        self.one_line: Callable[[Event], bytes] | None = _one_line
        """One event's whole line."""

    def encode_early(self, events: Sequence[Event]) -> list[bytes] | None:
        """Each line without its ``{"seq":N,`` head."""
        return _bodies(events)

    def encode_batch(
        self, events: Sequence[Event], early: list[bytes] | None, first: int, session_id: str
    ) -> bytes:
        """The lines, their seqs and batch flags put in front of what was encoded early."""
        bodies = _bodies(events) if early is None else early
        last = len(bodies) - 1
        return b"".join(
            b'{"seq":%d,%s%s\n' % (first + i, MORE if i < last else b"", body)
            for i, body in enumerate(bodies)
        )

    def check_append(self, session_id: str, path: str, encrypted: bool) -> None:
        """Every store appends to these lines."""

    def decode_line(self, line: bytes) -> Event:
        """One line as an event."""
        return decode_event(line)

    def line_time(self, line: bytes) -> _dt.datetime | None:
        """The line's ``time``."""
        try:
            return _line_time.decode(line).time
        except msgspec.DecodeError:
            return self.decode_line(line).time  # what msgspec refuses (lone surrogates)


NATIVE_LINES = NativeLines()
"""agentsession's line dialect (stateless: one object serves every file)."""


def lines_of(head: bytes) -> LineDialect:
    """The dialect of a line (or of a file, from its first line) by its first bytes: a store
    reads both, whatever its layout."""
    return AGENTKIT_LINES if head[:6] == LINE_START else NATIVE_LINES


class NativeLayout:
    """The default layout: injective file names, agentsession's lines, meta entries in
    ``.meta/``."""

    dialect: Literal["agentsession"] = "agentsession"
    """The store option that chooses this layout."""
    new_lines: LineDialect = NATIVE_LINES
    """New files are written in agentsession's lines."""
    encryption_refused: str | None = None
    """The layout can be encrypted."""
    injective = True
    """Two ids never name one file."""

    def file_stem(self, session_id: str) -> str:
        """:func:`~agentsession._names.safe_name`."""
        return safe_name(session_id)

    def check_session(
        self, session_id: str, path: str, claimed_by: Callable[[str], str | None]
    ) -> None:
        """Every id may have its file."""

    def records_id(self, path: str) -> bool:
        """Only a cut (hashed) name, which cannot be read back as its id."""
        return "~" in os.path.basename(path)

    def claims(self, lines: LineDialect) -> bool:
        """Never: names are injective."""
        return False

    def id_of(self, path: str, claimed_by: Callable[[str], str | None]) -> str | None:
        """The id a name spells, or the one recorded beside a cut name."""
        stem = os.path.basename(path)[: -len(SUFFIX)]
        sid = unsafe_name(stem)
        if sid is not None or "~" not in stem:
            return sid
        try:
            return claimed_by(path)
        except StorageError:  # an unreadable id: the file is not listed
            return None

    def meta(
        self,
        files: MetaStore,
        root: str,
        claimed_by: Callable[[str], str | None],
        record_id: Callable[[str, str], None],
    ) -> MetaStore:
        """``files`` itself: every entry in ``.meta/``."""
        return files


NATIVE_LAYOUT = NativeLayout()
"""The default layout (stateless: one object serves every store)."""

_LAYOUTS: dict[str, JsonlLayout] = {"agentsession": NATIVE_LAYOUT, "agentkit": AGENTKIT_LAYOUT}


def layout_for(dialect: Dialect) -> JsonlLayout:
    """The layout a store's ``dialect`` option names."""
    return _LAYOUTS[dialect]
