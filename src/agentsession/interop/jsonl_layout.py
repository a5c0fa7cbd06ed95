"""What a layout of JSONL session files is: the strategy a JSONL store is handed.

A layout decides everything that differs between agentsession's own files and another
runtime's: how a session id names its file, which line dialect a new file is written in,
which meta entries live in files of their own, and whether the store may be encrypted. A
line dialect decides how a batch of events becomes lines and how a compaction marker's line
is recognised while scanning backwards. The JSONL store (``agentsession.backends.jsonl``)
calls these objects and never asks which layout or dialect it has.

The layouts: the store's own (``agentsession.backends.jsonl.layout``, the default) and
agentkit's (:mod:`agentsession.interop.agentkit_layout`, ``dialect="agentkit"``). The
protocols live here, below both, so that neither imports the other.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Callable, Sequence
from typing import Literal, Protocol

from ..events import Event

__all__ = ["SUFFIX", "Dialect", "JsonlLayout", "LineDialect", "MetaStore"]

SUFFIX = ".jsonl"
"""The ending of every session file's name, in every layout."""

Dialect = Literal["agentsession", "agentkit"]
"""The line format of new session files (see ``docs/interop.md``)."""


class LineDialect(Protocol):
    """One line format of session files. A file keeps the dialect of its first line."""

    @property
    def marker_type(self) -> bytes:
        """The bytes that name a compaction marker's type inside a line."""
        ...

    @property
    def marker_head(self) -> re.Pattern[bytes]:
        """Matches a line's head up to where :attr:`marker_type` must start (anchored)."""
        ...

    @property
    def one_line(self) -> Callable[[Event], bytes] | None:
        """The whole line (with its newline) of one event that has its seq, for the append of
        a single event in one ``write``; None when this dialect's appends take the general
        path only."""
        ...

    def encode_early(self, events: Sequence[Event]) -> list[bytes] | None:
        """What can be encoded before the file lock is taken (the lines without their seqs);
        None when a line needs its seq to be encoded."""
        ...

    def encode_batch(
        self, events: Sequence[Event], early: list[bytes] | None, first: int, session_id: str
    ) -> bytes:
        """The lines of a batch whose first event gets seq ``first``, from ``early`` (what
        :meth:`encode_early` returned, possibly for another dialect's file; None when
        nothing was encoded early)."""
        ...

    def check_append(self, session_id: str, path: str, encrypted: bool) -> None:
        """Raise :class:`~agentsession.errors.UsageError` when this file may not be appended
        to (an encrypted store and a dialect that has no sealed lines)."""
        ...

    def decode_line(self, line: bytes) -> Event:
        """One line as an event (raises :class:`msgspec.DecodeError`)."""
        ...

    def line_time(self, line: bytes) -> _dt.datetime | None:
        """The time of one line's event, decoding as little as it can (raises
        :class:`msgspec.DecodeError` when the line is not an event)."""
        ...


class MetaStore(Protocol):
    """Small persisted values by kind and key: a store's ``_meta_*`` primitives."""

    def get(self, kind: str, key: str) -> str | None:
        """The value of an entry, or None."""
        ...

    def set(self, kind: str, key: str, value: str | None) -> None:
        """Store a value atomically (None removes the entry)."""
        ...

    def add(self, kind: str, key: str, value: str) -> str:
        """Store a value when the key has none; the value stored now."""
        ...

    def cas(self, kind: str, key: str, expected: str | None, new: str | None) -> bool:
        """Compare and set (see :meth:`agentsession.catalog.MetaStorage.cas`)."""
        ...

    def list(self, kind: str | None) -> list[tuple[str, str, str]]:
        """Every entry as ``(kind, key, value)``, of one kind or of all."""
        ...


class JsonlLayout(Protocol):
    """How a JSONL store names and writes its files."""

    @property
    def dialect(self) -> Dialect:
        """The name of this layout (the store's ``dialect`` option)."""
        ...

    @property
    def new_lines(self) -> LineDialect:
        """The line dialect of new (empty) session files."""
        ...

    @property
    def encryption_refused(self) -> str | None:
        """Why a store in this layout cannot be encrypted; None when it can."""
        ...

    @property
    def injective(self) -> bool:
        """Whether two session ids always name two files (else sessions are shared by id,
        never by path)."""
        ...

    def file_stem(self, session_id: str) -> str:
        """The file name of a session id, without :data:`SUFFIX`."""
        ...

    def check_session(
        self, session_id: str, path: str, claimed_by: Callable[[str], str | None]
    ) -> None:
        """Raise :class:`~agentsession.errors.UsageError` when ``session_id`` may not have the
        file ``path`` (``claimed_by(path)``: the id recorded beside a file, or None)."""
        ...

    def records_id(self, path: str) -> bool:
        """Whether the id of the session in ``path`` is written beside it (``<name>.id``)."""
        ...

    def claims(self, lines: LineDialect) -> bool:
        """Whether appending to a file in ``lines`` records its id beside it, once."""
        ...

    def id_of(self, path: str, claimed_by: Callable[[str], str | None]) -> str | None:
        """The session id of the file ``path``; None when it names no session."""
        ...

    def meta(
        self,
        files: MetaStore,
        root: str,
        claimed_by: Callable[[str], str | None],
        record_id: Callable[[str, str], None],
    ) -> MetaStore:
        """The meta entries of a store at ``root``: ``files`` (``.meta/<kind>/<key>.json``),
        or a layer over it that keeps some kinds where this layout keeps them."""
        ...
