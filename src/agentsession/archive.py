"""Archives: moving a session's old events out of its live log, and reading them back.

An archive holds the events of a session that no derived history needs any more (those before
the latest compaction marker's kept turns, before every branch point and every child's fork
point), so that the live log stays bounded however long the session runs. Seqs never change:
the live log just starts later, and :meth:`~agentsession.BaseSession.read` reads the archived
seqs from the archive, then the live log, without the caller knowing. Opening a session and
deriving its history never read the archive.

The archive lives in the store's meta entries, on every backend alike (``docs/format.md``):

* ``archive/<session id>``: the session's archive index (:class:`ArchiveIndex`), with
  ``through``, the seq up to which the archive holds every event (the "archived up to" mark);
* ``archive-segment/<session id>#<first seq>``: one segment per archive run, the stored events
  (sealed, when the store is encrypted) as JSONL lines, compressed (zstd when the
  ``zstandard`` module is importable, else gzip) and base64-encoded, with a header naming the
  compression, the seqs and a SHA-256 of the compressed bytes.

An archive run writes the segment, then the index (compare-and-set), then drops the archived
events from the live log (:meth:`LogStorage.discard_through`); a crash between any two steps
leaves either the old log, or the new index with the events still live too (a read then takes
them from the live log, and the next run drops them), never a gap.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

import msgspec

from .errors import CorruptLogError
from .events import (
    COMPACTION,
    SESSION_REWIND,
    SESSION_ROLLBACK,
    Event,
    SessionRewind,
    SessionRollback,
    compaction_of,
    decode_event_lines,
    encode_event,
)

if TYPE_CHECKING:
    import threading

    from .branching import BranchRef

__all__ = [
    "ARCHIVE_FORMAT",
    "ARCHIVE_KIND",
    "ARCHIVE_VERSION",
    "SEGMENT_KIND",
    "ArchiveIndex",
    "ArchiveReport",
    "ArchiveSegment",
    "SessionArchive",
    "archivable_through",
    "archive_session",
    "decode_index",
    "decode_segment",
    "encode_index",
    "encode_segment",
    "segment_key",
]

ARCHIVE_KIND: Final = "archive"
"""The meta namespace of archive indexes (keyed by session id, deleted with the session)."""
SEGMENT_KIND: Final = "archive-segment"
"""The meta namespace of archive segments (keyed ``<session id>#<first seq>``)."""
ARCHIVE_FORMAT: Final = "agentsession-archive"
"""The ``format`` field of a segment and of an index."""
ARCHIVE_VERSION: Final = 1
"""The version of the archive format this code writes and reads."""


class ArchiveSegment(msgspec.Struct, frozen=True):
    """One segment as the index lists it."""

    first: int
    """The first seq the segment holds."""
    last: int
    """The last seq the segment holds."""
    count: int
    """How many events it holds (seqs ``first..last`` without those a rewind dropped: all)."""
    bytes: int
    """The size of its compressed events."""
    key: str
    """Its key in the ``archive-segment`` namespace."""


class ArchiveIndex(msgspec.Struct, frozen=True):
    """A session's archive index (the ``archive/<session id>`` meta entry)."""

    format: str = ARCHIVE_FORMAT
    """Always :data:`ARCHIVE_FORMAT`."""
    version: int = ARCHIVE_VERSION
    """The format version."""
    through: int = 0
    """Every event up to this seq is in the archive (0: none)."""
    segments: list[ArchiveSegment] = []
    """The segments, in seq order."""


class _SegmentHeader(msgspec.Struct, frozen=True):
    format: str
    version: int
    session: str
    first: int
    last: int
    count: int
    compression: str
    sha256: str
    data: str


_INDEX_DECODER = msgspec.json.Decoder(ArchiveIndex)
_SEGMENT_DECODER = msgspec.json.Decoder(_SegmentHeader)
_ENCODER = msgspec.json.Encoder()


def segment_key(session_id: str, first: int) -> str:
    """The meta key of the segment of ``session_id`` starting at seq ``first``."""
    return f"{session_id}#{first}"


def decode_index(session_id: str, text: str | None) -> ArchiveIndex:
    """A session's archive index from its meta value (an empty index for None)."""
    if text is None:
        return ArchiveIndex()
    try:
        index = _INDEX_DECODER.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise CorruptLogError(
            f"session {session_id!r}: its archive index does not decode: {exc}",
            session_id=session_id,
        ) from None
    if index.format != ARCHIVE_FORMAT or index.version > ARCHIVE_VERSION:
        raise CorruptLogError(
            f"session {session_id!r}: its archive index is of format {index.format!r} "
            f"version {index.version}, which this version cannot read",
            session_id=session_id,
        )
    return index


def encode_index(index: ArchiveIndex) -> str:
    """The meta value of an archive index."""
    return _ENCODER.encode(index).decode()


def _zstd() -> Any:
    try:
        return importlib.import_module("zstandard")
    except ImportError:
        return None


def compression_available() -> str:
    """The compression new segments use: ``zstd`` when ``zstandard`` is importable, else
    ``gzip``."""
    return "zstd" if _zstd() is not None else "gzip"


def _compress(data: bytes, how: str) -> bytes:
    if how == "zstd":
        return bytes(_zstd().ZstdCompressor(level=3).compress(data))
    return gzip.compress(data, compresslevel=6, mtime=0)


def _decompress(data: bytes, how: str, session_id: str) -> bytes:
    if how == "gzip":
        return gzip.decompress(data)
    if how == "zstd":
        module = _zstd()
        if module is None:
            raise CorruptLogError(
                f"session {session_id!r}: an archive segment is zstd-compressed; install "
                "zstandard to read it",
                session_id=session_id,
            )
        return bytes(module.ZstdDecompressor().decompress(data))
    raise CorruptLogError(
        f"session {session_id!r}: an archive segment names an unknown compression {how!r}",
        session_id=session_id,
    )


def encode_segment(session_id: str, events: Sequence[Event], compression: str | None = None) -> str:
    """The meta value of a segment holding ``events`` (as stored: sealed when the store is
    encrypted), in seq order."""
    how = compression or compression_available()
    lines = b"".join(encode_event(event) + b"\n" for event in events)
    packed = _compress(lines, how)
    header = _SegmentHeader(
        format=ARCHIVE_FORMAT,
        version=ARCHIVE_VERSION,
        session=session_id,
        first=events[0].seq,
        last=events[-1].seq,
        count=len(events),
        compression=how,
        sha256=hashlib.sha256(packed).hexdigest(),
        data=base64.b64encode(packed).decode("ascii"),
    )
    return _ENCODER.encode(header).decode()


def decode_segment(session_id: str, text: str) -> list[Event]:
    """The events of a segment's meta value; raises
    :class:`~agentsession.errors.CorruptLogError` when it is damaged or another session's."""
    where = f"session {session_id!r}: an archive segment"
    try:
        header = _SEGMENT_DECODER.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise CorruptLogError(f"{where} does not decode: {exc}", session_id=session_id) from None
    if header.format != ARCHIVE_FORMAT or header.version > ARCHIVE_VERSION:
        raise CorruptLogError(f"{where} is of an unknown format", session_id=session_id)
    if header.session != session_id:
        raise CorruptLogError(f"{where} belongs to another session", session_id=session_id)
    try:
        packed = base64.b64decode(header.data, validate=True)
    except ValueError:
        raise CorruptLogError(f"{where} is not base64", session_id=session_id) from None
    if hashlib.sha256(packed).hexdigest() != header.sha256:
        raise CorruptLogError(f"{where} fails its checksum", session_id=session_id)
    try:
        events = decode_event_lines(_decompress(packed, header.compression, session_id))
    except (OSError, EOFError, msgspec.DecodeError, ValueError) as exc:
        raise CorruptLogError(f"{where} does not read: {exc}", session_id=session_id) from None
    if len(events) != header.count or (
        events and (events[0].seq != header.first or events[-1].seq != header.last)
    ):
        raise CorruptLogError(f"{where} does not hold what its header says", session_id=session_id)
    return events


def segment_compression(text: str) -> str:
    """The compression a segment's meta value names (for reports and tests)."""
    return str(json.loads(text).get("compression", ""))


def archivable_through(
    events: Sequence[Event],
    *,
    keep_after_marker: bool,
    before: int | None,
    branch_points: Sequence[int] = (),
    fork_points: Sequence[int] = (),
) -> tuple[int, str | None]:
    """The highest seq that may be archived, and why nothing may be (None: something may).

    ``events`` are the session's live events from (at least) its latest compaction marker
    that rebuilds the history for every agent (one with no agent) to the end. Everything from
    that marker on stays (with ``keep_after_marker``, from its first kept seq on), and so does
    what a rewind or rollback after it goes back to, every seq from a branch point or a child's
    fork point on, and every seq from ``before`` on."""
    marker_at = -1
    for index in range(len(events) - 1, -1, -1):
        event = events[index]
        if event.type != COMPACTION or event.agent:
            continue
        data = compaction_of(event)
        if data is not None and data.rebuilds_history:
            marker_at = index
            break
    if marker_at < 0:
        return 0, NO_MARKER
    marker = events[marker_at]
    data = compaction_of(marker)
    assert data is not None
    keep_from = marker.seq
    if keep_after_marker and data.first_kept_seq:
        keep_from = min(keep_from, data.first_kept_seq)
    for event in events[marker_at:]:
        if event.type == SESSION_REWIND:
            target = _rewind_to(event)
            if target is not None:
                keep_from = min(keep_from, target)
        elif event.type == SESSION_ROLLBACK:
            try:
                rollback = msgspec.json.decode(bytes(event.data), type=SessionRollback)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            if rollback.turn_start_seq:
                keep_from = min(keep_from, rollback.turn_start_seq)
    for point in (*branch_points, *fork_points):
        if point > 0:
            keep_from = min(keep_from, point)
    if before is not None:
        keep_from = min(keep_from, before)
    through = keep_from - 1
    if through <= 0:
        return 0, "every event is still needed (branch, fork, rewind or before=)"
    return through, None


NO_MARKER: Final = "no compaction marker that rebuilds the history for every agent"


def _rewind_to(event: Event) -> int | None:
    try:
        marker = msgspec.json.decode(bytes(event.data), type=SessionRewind)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return marker.to_seq if marker.to_seq >= 0 else None


@dataclass(frozen=True)
class SessionArchive:
    """What :meth:`~agentsession.BaseStore.archive` did to one session."""

    session_id: str
    """The session."""
    moved: int = 0
    """How many events were moved out of the live log by this run."""
    first_seq: int = 0
    """The first seq moved (0: none)."""
    through_seq: int = 0
    """Every seq up to this one is archived now (0: none)."""
    live_bytes_before: int | None = None
    """The live log's stored size before (None: the backend keeps no size)."""
    live_bytes_after: int | None = None
    """The live log's stored size after (None: the backend keeps no size)."""
    archive_bytes: int = 0
    """The size of the compressed segment this run wrote."""
    archive_total_bytes: int = 0
    """The size of all of the session's compressed segments."""
    location: str = ""
    """Where the segment is: ``<store location> archive-segment/<key>``."""
    compression: str = ""
    """``zstd`` or ``gzip``."""
    skipped: str | None = None
    """Why nothing was moved (None: something was)."""


@dataclass(frozen=True)
class ArchiveReport:
    """What :meth:`~agentsession.BaseStore.archive` did, session by session."""

    sessions: list[SessionArchive] = field(default_factory=list)
    """One entry per session looked at."""

    @property
    def moved(self) -> int:
        """Events moved in all."""
        return sum(entry.moved for entry in self.sessions)

    @property
    def skipped(self) -> dict[str, str]:
        """The sessions nothing was moved of, and why."""
        return {e.session_id: e.skipped for e in self.sessions if e.skipped is not None}


class ArchiveSession(Protocol):
    """What archiving asks of a session object (:class:`~agentsession.BaseSession` is one)."""

    @property
    def state_lock(self) -> threading.RLock:
        """The session's lock."""
        ...

    @property
    def origin(self) -> BranchRef | None:
        """The branch origin (None: not a branch)."""
        ...

    @property
    def latest_seq(self) -> int:
        """The latest seq."""
        ...

    def read(self, after: int = 0, limit: int | None = None) -> list[Event]:
        """Events after ``after`` (opened)."""
        ...

    def branches(self) -> list[BranchRef]:
        """The session's live branches."""
        ...

    def _storage_read(self, after: int, limit: int | None) -> list[Event]: ...

    def _storage_can_discard(self) -> bool: ...

    def _storage_discard_through(self, seq: int) -> tuple[int | None, int | None] | None: ...


class ArchiveHost(Protocol):
    """What archiving asks of the store (:class:`~agentsession.BaseStore` is one)."""

    @property
    def location(self) -> str:
        """Where the store is."""
        ...

    def _meta_get(self, kind: str, key: str) -> str | None: ...

    def _meta_set(self, kind: str, key: str, value: str | None) -> None: ...

    def _meta_cas(self, kind: str, key: str, expected: str | None, new: str | None) -> bool: ...


def archive_session(
    store: ArchiveHost,
    session: ArchiveSession,
    session_id: str,
    *,
    before: int | None,
    keep_after_marker: bool,
    fork_points: Sequence[int],
) -> SessionArchive:
    """Archive what may be archived of one session (see the module docstring for the steps
    and what a crash between them leaves)."""
    with session.state_lock:
        if session.origin is not None:
            return SessionArchive(
                session_id, skipped="a branch (its shared history is its origin's)"
            )
        if not session._storage_can_discard():
            return SessionArchive(session_id, skipped="the backend cannot drop events from the log")
        index_text = store._meta_get(ARCHIVE_KIND, session_id)
        index = decode_index(session_id, index_text)
        latest = session.latest_seq
        branch_points = [ref.seq for ref in session.branches()]
        span = 1024
        while True:
            start = max(index.through, latest - span)
            events = session.read(start)
            through, why = archivable_through(
                events,
                keep_after_marker=keep_after_marker,
                before=before,
                branch_points=branch_points,
                fork_points=fork_points,
            )
            if why != NO_MARKER or start <= index.through:
                break
            span *= 4
        if why is not None:
            return SessionArchive(session_id, through_seq=index.through, skipped=why)
        through = min(through, latest - 1)
        if through <= index.through:
            head = session._storage_read(0, 1)
            if index.through and head and head[0].seq <= index.through:
                # An earlier run stopped after its index: drop what it archived now.
                sizes = session._storage_discard_through(index.through)
                before_bytes, after_bytes = sizes if sizes is not None else (None, None)
                return SessionArchive(
                    session_id,
                    through_seq=index.through,
                    live_bytes_before=before_bytes,
                    live_bytes_after=after_bytes,
                    archive_total_bytes=sum(seg.bytes for seg in index.segments),
                )
            return SessionArchive(
                session_id, through_seq=index.through, skipped="nothing new to archive"
            )
        raw = [
            e
            for e in session._storage_read(index.through, through - index.through)
            if index.through < e.seq <= through
        ]
        if not raw:
            return SessionArchive(session_id, through_seq=index.through, skipped="nothing stored")
        through = raw[-1].seq
        how = compression_available()
        text = encode_segment(session_id, raw, how)
        key = segment_key(session_id, raw[0].seq)
        packed = len(base64.b64decode(_SEGMENT_DECODER.decode(text).data))
        store._meta_set(SEGMENT_KIND, key, text)  # 1. the segment, durable
        segment = ArchiveSegment(raw[0].seq, through, len(raw), packed, key)
        new_index = ArchiveIndex(through=through, segments=[*index.segments, segment])
        if not store._meta_cas(ARCHIVE_KIND, session_id, index_text, encode_index(new_index)):
            return SessionArchive(  # 2. the index (the mark), unless another run went first
                session_id, through_seq=index.through, skipped="another archive run went first"
            )
        sizes = session._storage_discard_through(through)  # 3. the live log shrinks
        before_bytes, after_bytes = sizes if sizes is not None else (None, None)
        return SessionArchive(
            session_id,
            moved=len(raw),
            first_seq=raw[0].seq,
            through_seq=through,
            live_bytes_before=before_bytes,
            live_bytes_after=after_bytes,
            archive_bytes=packed,
            archive_total_bytes=sum(seg.bytes for seg in new_index.segments),
            location=f"{store.location} {SEGMENT_KIND}/{key}",
            compression=how,
        )


def segment_keys(session_id: str, index_text: str | None) -> list[str]:
    """The keys of a session's segments, from its index's meta value (empty when it has none
    or it does not decode: deleting a session never stops at its archive)."""
    try:
        return [seg.key for seg in decode_index(session_id, index_text).segments]
    except CorruptLogError:
        return []
