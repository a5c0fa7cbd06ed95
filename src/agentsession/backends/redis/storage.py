"""A Redis session's log: a stream of events under a hash, every key in the session's slot.

:class:`RedisLog` is the session's log storage (a :class:`~agentsession.storage.LogStorage`). Each
operation is one server-side script (:mod:`~agentsession.backends.redis.scripts`), run atomically,
except reads past what opening read (a plain ``XRANGE``): opening reads the life and the tail (or
the window from the latest compaction marker) together; an append writes only when the session's
latest seq is still the one the session has seen (or ``expect_seq``) and its life the one this log
read, when none of the batch's ids is stored within the id window (``#<id>`` fields of the
session's hash; a session key layout 2 made: its ``i`` hash),
numbering the batch after it, so the stream entry ids (``<seq>-0``) are the seqs and the server
itself refuses one out of order. The catalog row's change is applied by the same script.

The log builds each script's keys and arguments (``*_call``) and takes the reply in
(``opened``, ``take_refresh``, ``decode``, ``take_append``), so that the async API
(:mod:`agentsession.backends.redis.aio`) runs the same scripts and keeps the log's state (its
life, whether it must open again) in one object.
"""

from __future__ import annotations

import collections
import datetime as _dt
import logging
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import msgspec

from ...core import ID_WINDOW
from ...errors import CorruptLogError, StorageError
from ...events import Event, decode_event, decode_event_lines, encode_event
from ...listing import CatalogChange, words
from ...storage import REOPEN, LogView, Reopen

if TYPE_CHECKING:
    from .server import Server

__all__ = [
    "RedisLog",
    "bytes_of",
    "Request",
    "index_args",
    "change_blob",
    "micros",
    "numbered",
    "pack",
    "pack_text",
    "row_words",
    "text_words",
    "time_of_micros",
]

log = logging.getLogger("agentsession.backends.redis")

TAIL_EVENTS: Final = 16
"""Events opening reads from the end of the log."""

_EPOCH: Final = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_MICRO: Final = _dt.timedelta(microseconds=1)
_replace = msgspec.structs.replace

_UNKNOWN: Final = (
    "the append may or may not have been stored: read the session (latest_seq) before retrying it"
)


def micros(when: _dt.datetime | None) -> str:
    """``when`` as whole microseconds since the Unix epoch, a decimal string (exact)."""
    if when is None:
        return ""
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return str((when - _EPOCH) // _MICRO)


def time_of_micros(value: bytes | str | None) -> _dt.datetime | None:
    """The UTC time of a :func:`micros` string (None: none stored)."""
    if not value:
        return None
    return _EPOCH + int(value) * _MICRO


def bytes_of(value: Any) -> Any:
    """``value`` with every string as UTF-8 bytes (lone surrogates kept)."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    if isinstance(value, (list, tuple)):
        return [bytes_of(v) for v in value]
    return value


def pack(value: Any) -> bytes:
    """``value`` (lists, strings, bytes, ints, None) as msgpack the scripts' ``cmsgpack``
    reads: every string as a msgpack string of its UTF-8 bytes (lone surrogates kept), as
    ``cmsgpack`` knows no binary type."""
    out = bytearray()
    _pack_into(out, value)
    return bytes(out)


_msgpack_encode: Final = msgspec.msgpack.Encoder().encode


def pack_text(value: Any) -> bytes:
    """:func:`pack` for a value without bytes (lists, strings, ints, None): msgspec's encoder,
    which writes strings as :func:`pack` does; :func:`pack` itself when a string holds a lone
    surrogate (which UTF-8 cannot encode strictly)."""
    try:
        return _msgpack_encode(value)
    except UnicodeEncodeError:
        return pack(value)


def _pack_into(out: bytearray, value: Any) -> None:
    if isinstance(value, str):
        value = value.encode("utf-8", "surrogatepass")
    if isinstance(value, (bytes, bytearray)):
        n = len(value)
        if n < 32:
            out.append(0xA0 | n)
        elif n < 0x100:
            out += b"\xd9" + n.to_bytes(1, "big")
        elif n < 0x10000:
            out += b"\xda" + n.to_bytes(2, "big")
        else:
            out += b"\xdb" + n.to_bytes(4, "big")
        out += value
    elif isinstance(value, (list, tuple)):
        n = len(value)
        if n < 16:
            out.append(0x90 | n)
        elif n < 0x10000:
            out += b"\xdc" + n.to_bytes(2, "big")
        else:
            out += b"\xdd" + n.to_bytes(4, "big")
        for item in value:
            _pack_into(out, item)
    elif value is None:
        out.append(0xC0)
    elif isinstance(value, bool):
        out.append(0xC3 if value else 0xC2)
    elif isinstance(value, int):
        out += msgspec.msgpack.encode(value)
    else:
        raise TypeError(f"cannot pack {type(value).__name__}")


def _usage(u: Any) -> list[Any]:
    return [
        u.input_tokens,
        u.output_tokens,
        u.cache_read_tokens,
        u.cache_write_tokens,
        repr(u.cost),
    ]


def change_blob(change: CatalogChange) -> bytes:
    """``change`` as the scripts read it (msgpack; times as :func:`micros`, costs as
    ``repr``)."""
    return pack_text(
        [
            micros(change.first_time),
            micros(change.last_time),
            change.messages,
            change.turns,
            _usage(change.usage),
            [[r.day, r.agent, r.calls, *_usage(r.usage)] for r in change.usage_rows],
            list(change.agents),
            change.user,
            change.title,
            change.status or "",
            change.compacted_before,
            [list(pair) for pair in change.rewound],
            [[d.seq, d.role, d.text] for d in change.documents],
            change.first_seq - change.shared,  # the row's seqs are the stream's (a branch's own)
        ]
    )


def index_args(
    catalog: bytes,
    sid: bytes,
    *,
    row: bytes = b"",
    words: list[Any] | None = None,
    remove: bool = False,
    gone: list[Any] | None = None,
    mark: bytes = b"",
    mark_seq: int = 0,
    updated: str = "",
    created: str = "",
    done: bytes = b"",
    done_seq: int = 0,
    through: int | None = None,
    session: bytes = b"",
) -> list[Any]:
    """The arguments of the store-wide index's script
    (:data:`~agentsession.backends.redis.scripts.INDEX_ROW`) for session ``sid``: its row
    (msgpack, as a script returned it), words to add and to remove (``word, seq`` pairs), a
    mark to set (``r``: the row is behind the log, ``d``: its documents are) at ``mark_seq``,
    the list orders' times when there is no row, the marks to drop when they are at most
    ``done_seq``, the seq its documents are indexed ``through``, and the session's hash
    (given on one server: no words are added once it is gone or shredded)."""
    return [
        catalog,
        sid,
        row,
        pack(words or []),
        b"1" if remove else b"0",
        pack(gone or []),
        mark,
        mark_seq,
        updated,
        created,
        done,
        done_seq,
        b"" if through is None else through,
        session,
    ]


def row_words(change: CatalogChange | None) -> list[Any]:
    """The store-wide search index entries of ``change``'s documents: ``word, seq, score``
    triples, flat (a blind token is a word of its own: 24 hex digits). The score is minus the
    word's rank in the document as :func:`agentsession.listing.search_rows` ranks a one-word
    query (its occurrences over one plus the document's words over 50), exact as a double, so
    that a word's sorted set lists its documents best first."""
    out: list[Any] = []
    if change is None:
        return out
    for doc in change.documents:
        found = text_words(doc.text)
        length = 1.0 + len(found) / 50.0
        for word, count in collections.Counter(found).items():
            out += (word, doc.seq, repr(-(count / length)))
    return out


_WORD: Final = re.compile(r"\w+")


def text_words(text: str) -> list[str]:
    """:func:`agentsession.listing.words`, with a fast path for ASCII text (which no
    normalisation changes but case)."""
    if text.isascii():
        return _WORD.findall(text.lower())
    return words(text)


def numbered(events: list[Event], after: int) -> list[Event]:
    """``events`` as stored after seq ``after``: with seqs ``after + 1``, ``after + 2``..."""
    if len(events) == 1:
        return [_replace(events[0], seq=after + 1)]
    return [_replace(e, seq=after + i) for i, e in enumerate(events, start=1)]


class Request(NamedTuple):
    """A script the log asks the server to run."""

    name: str
    keys: list[bytes]
    args: list[Any]
    action: str
    """What the call is called in errors."""
    unknown: str = ""
    """What a lost connection leaves unknown (a write), else empty."""


def _decode(reply: Sequence[Any], session_id: str) -> list[Event]:
    """Events of the entries a script returned joined (``{ids, lines, lengths}``: the entry
    ids joined by spaces, the event lines by line breaks, their lengths by spaces), in the
    order given."""
    ids_blob, blob = bytes(reply[0]), bytes(reply[1])
    if not ids_blob:
        return []
    ids = ids_blob.split(b" ")
    events = _decode_joined(blob, len(ids))
    if events is not None:
        return events
    lines, at = [], 0
    for size in bytes(reply[2]).split(b" "):
        lines.append(blob[at : at + int(size)])
        at += int(size) + 1
    return _decode_each(ids, lines, session_id)


def _decode_entries(entries: Sequence[Any], session_id: str) -> list[Event]:
    """Events of ``XRANGE`` entries (``(id, fields)``, the fields a mapping or a flat list),
    in the order given."""
    if not entries:
        return []
    lines = []
    for _, fields in entries:
        line = fields.get(b"e") if isinstance(fields, dict) else fields[1]
        lines.append(b"" if line is None else bytes(line))
    events = _decode_joined(b"\n".join(lines), len(lines))
    if events is not None:
        return events
    return _decode_each([bytes(entry[0]) for entry in entries], lines, session_id)


def _decode_joined(blob: bytes, count: int) -> list[Event] | None:
    """The fast path: ``count`` event lines joined by line breaks decoded at once; None when
    a line holds a line break or does not decode as one event (:func:`_decode_each` says
    which)."""
    if blob.count(b"\n") != count - 1:
        return None
    try:
        events = decode_event_lines(blob)
    except (msgspec.DecodeError, ValueError, TypeError):
        return None
    return events if len(events) == count else None


def _decode_each(ids: Sequence[bytes], lines: Sequence[bytes], session_id: str) -> list[Event]:
    """Events of the lines of the entries ``ids``, one by one: the first that does not decode
    raises :class:`~agentsession.errors.CorruptLogError` naming its seq."""
    out = []
    for entry_id, line in zip(ids, lines, strict=True):
        try:
            out.append(decode_event(line))
        except (msgspec.DecodeError, ValueError, TypeError) as exc:
            raise CorruptLogError(
                f"session {session_id!r}: the event with seq {_seq_of(entry_id)} does not"
                f" decode: {exc}",
                session_id=session_id,
            ) from None
    return out


def _seq_of(entry_id: bytes) -> str:
    """The seq of a stream entry id (``<seq>-0``)."""
    return entry_id.split(b"-")[0].decode("ascii", "replace")


class RedisLog:
    """One session's log in a :class:`~agentsession.backends.redis.RedisStore` (see the
    module docstring). It remembers the life it read (a random token the session's first
    append set; None: none read) and whether it must open again before its next use
    (:attr:`stale`)."""

    __slots__ = (
        "_db",
        "_expiry_ms",
        "_id",
        "_identity",
        "_kept",
        "_keys",
        "_life",
        "_location",
        "_reading",
        "_sid",
        "_stale",
    )

    def __init__(self, db: Server, session_id: str, expiry_ms: int, kept: bytes = b"") -> None:
        self._db = db
        self._kept = kept
        self._id = session_id
        self._sid = session_id.encode("utf-8", "surrogatepass")
        self._keys = db.keys.session(session_id)
        self._expiry_ms = expiry_ms
        self._location = f"{db.target.location} session {session_id!r}"
        self._identity = ("redis", db.target.location, session_id)
        self._reading = f"reading session {session_id!r}"
        self._life: bytes | None = None
        self._stale = False

    # -- what it is -------------------------------------------------------------------------

    @property
    def location(self) -> str:
        """The store's password-free URL and the session id."""
        return self._location

    @property
    def identity(self) -> tuple[str, ...]:
        """The server, the key prefix and the session id."""
        return self._identity

    @property
    def server(self) -> Server:
        """The store's server."""
        return self._db

    @property
    def life(self) -> bytes | None:
        """The life this log read (None: none)."""
        return self._life

    @property
    def stale(self) -> bool:
        """Whether the log must be opened again before its next use."""
        return self._stale

    def mark_stale(self) -> None:
        """Open the log again before its next use (an append's outcome was not taken in)."""
        self._stale = True

    # -- requests and replies (shared by the sync and the async API) --------------------------

    def open_call(self, *, tail: bool) -> Request:
        """What opening reads: the life and the tail (``tail``) or the full window."""
        mode = b"tail" if tail else b"window"
        return Request("OPEN", self._keys[:2], [mode, TAIL_EVENTS], f"opening session {self._id!r}")

    def opened(self, reply: Any, *, tail: bool) -> tuple[list[Event], bool]:
        """Take in what :meth:`open_call` read: the events and whether they are the whole
        log."""
        self._stale = False
        life, _last, entries = reply
        if not life:
            self._life = None
            return [], True
        self._life = bytes(life)
        events = _decode(entries, self._id)
        return events, not events or events[0].seq <= 1

    def refresh_call(self, after: int) -> Request:
        """What catching up from seq ``after`` reads."""
        return Request("REFRESH", self._keys[:2], [after], self._reading)

    def take_refresh(self, reply: Any, after: int) -> list[Event] | Reopen:
        """The other writers' events, or REOPEN when the log this object read is gone or was
        created since it found none."""
        life, last, entries = reply
        if not life:
            if after or self._life is not None:
                return REOPEN
            return []
        if bytes(life) != self._life or int(last) < after:
            return REOPEN
        return _decode(entries, self._id)

    def read_call(self, after: int, limit: int | None, upto: int | None = None) -> Request:
        """Events with ``after < seq`` (``<= upto``), at most ``limit``: a plain ``XRANGE`` (no
        script: the server answers the entries as it stores them)."""
        args: list[Any] = [f"{after + 1}-0", "+" if upto is None else f"{upto}-0"]
        if limit is not None:
            args += ("COUNT", limit)
        return Request("XRANGE", self._keys[1:2], args, self._reading)

    def decode(self, entries: Sequence[Any]) -> list[Event]:
        """Events of the stream entries a read (:meth:`read_call`) returned."""
        return _decode_entries(entries, self._id)

    def append_call(
        self,
        stored: list[Event],
        marker: int,
        after: int,
        change: CatalogChange | None,
        inline_catalog: bool,
    ) -> Request:
        """The append script for ``stored`` (the events numbered after seq ``after``), in the
        life this log read or a new one."""
        per_event: list[Any] = []
        for event in stored:
            per_event += (event.id, encode_event(event), micros(event.time) or "0")
        count = len(stored)
        args: list[Any] = [
            self._expiry_ms,  # the first APPEND_FIXED: the same for every append of the log
            ID_WINDOW,
            self._db.keys.catalog if inline_catalog else b"",
            self._kept,
            self._sid,
            after,
            self._life or b"",
            os.urandom(8).hex() if self._life is None else b"",
            after + marker + 1 if marker >= 0 else 0,
            change_blob(change) if change is not None else b"",
            count,
            *per_event,
        ]
        action = f"appending {count} event{'s' if count > 1 else ''} to session {self._id!r}"
        name = "APPEND" if change is not None else "APPEND_PLAIN"
        return Request(name, self._keys[:5], args, action, _UNKNOWN)

    def take_append(self, reply: Any) -> tuple[int, Any]:
        """What the append script answered: 1 (stored, with the life), 0 (another seq or
        life: nothing written), -1 (an id stored within the window: nothing written, the
        session opens again); and the reply itself."""
        if type(reply) is bytes:  # stored, as the script answers when it indexes
            self._life = reply.split(b" ")[2]
            return 1, reply
        status = int(reply[0])
        if status == 1:
            self._life = bytes(reply[2])
        elif status < 0:
            self._stale = True
        return status, reply

    def refused(
        self, expect_seq: int | None, found: list[Event] | Reopen
    ) -> tuple[list[Event], list[Event]] | Reopen:
        """What an append that wrote nothing answers, given what catching up found: a
        conditional append planned in a life that is gone is refused as a seq that did not
        match (the log opens again when next used); any other answers REOPEN."""
        if not isinstance(found, Reopen):
            return found, []
        if expect_seq:
            self._stale = True
            return [], []
        return found

    def catch_up_failed(self, base: int, count: int, exc: StorageError) -> StorageError:
        """The error for an append stored as seqs ``base + 1...`` whose catch-up failed (the
        log opens again when next used)."""
        self._stale = True
        return StorageError(
            f"session {self._id!r}: the append was stored as seqs {base + 1}..."
            f"{base + count}, but reading the events other writers appended before it "
            f"failed; the session reloads when next used ({exc})"
        )

    def index_call(self, reply: Any, stored: list[Event]) -> Request:
        """On a Cluster: the store-wide index update after a stored append (the catalog's
        slot is another), given the append script's reply: the row when its change was
        applied, else the list orders; the mark the script asks for."""
        catalog = self._db.keys.catalog
        row = bytes(reply[3])
        args = index_args(
            catalog,
            self._sid,
            row=row,
            mark=bytes(reply[4]),
            mark_seq=stored[-1].seq,
            done=b"r" if row else b"",
            done_seq=stored[-1].seq,
            updated=micros(stored[-1].time) or "0",
            created=micros(stored[0].time) or "0",
        )
        return Request("INDEX_ROW", [catalog + b"x"], args, f"indexing session {self._id!r}")

    # -- LogStorage ---------------------------------------------------------------------------

    def _call(self, request: Request) -> Any:
        db = self._db
        return db.run(
            request.action,
            lambda: db.script(request.name, request.keys, request.args),
            request.unknown,
        )

    def open_tail(self, view: LogView) -> tuple[list[Event], bool]:
        """The latest ``TAIL_EVENTS`` events and the life, in one script."""
        return self.opened(self._call(self.open_call(tail=True)), tail=True)

    def open(self, view: LogView) -> tuple[list[Event], bool]:
        """The window from the latest compaction marker, and the life."""
        return self.opened(self._call(self.open_call(tail=False)), tail=False)

    def refresh(self, view: LogView) -> list[Event] | Reopen:
        if self._stale:
            return REOPEN
        after = view.seen_seq
        return self.take_refresh(self._call(self.refresh_call(after)), after)

    def read(self, after: int, limit: int | None) -> list[Event]:
        return self.decode(self._call(self.read_call(after, limit)))

    def discard_through(self, seq: int) -> tuple[int | None, int | None]:
        """Trim the stream's entries of the (archived) events up to ``seq`` (``XTRIM MINID``,
        exact; the store never asks for the last event); returns the stream's memory usage
        before and after, as the server reports it."""
        db, stream = self._db, self._keys[1]

        def trim() -> tuple[int | None, int | None]:
            before = db.client.memory_usage(stream)
            db.client.xtrim(stream, minid=f"{seq + 1}-0", approximate=False)
            return before, db.client.memory_usage(stream)

        sizes: tuple[int | None, int | None] = db.run(
            f"archiving session {self._id!r}",
            trim,
            "the archived events may or may not have been dropped from the live log",
        )
        return sizes

    def append_one(self, view: LogView, event: Event, marker: bool) -> Event | None:
        """The fast path: the append script for one event at ``seen_seq + 1`` in the life
        read; None (nothing written) when this log read no life, must open again, or another
        writer appended first."""
        if self._life is None or self._stale:
            return None
        stored = self._write(view, [event], 0 if marker else -1, view.seen_seq)
        return stored[0] if stored else None

    def append(
        self, view: LogView, events: list[Event], marker: int, expect_seq: int | None
    ) -> tuple[list[Event], list[Event]] | Reopen:
        """The append script, after the latest seq the session has seen (or ``expect_seq``),
        in the life this log read; other writers' events before a batch stored beyond the
        session's seq are read right after."""
        if self._stale:
            return REOPEN
        if not view.admits((), events):
            return [], []
        seen = view.seen_seq
        after = seen if expect_seq is None else expect_seq
        stored = self._write(view, events, marker, after)
        if stored is None:
            if self._stale:
                return REOPEN
            return self.refused(expect_seq, self.refresh(view))
        foreign: list[Event] = []
        if after > seen:
            try:
                foreign = self.decode(self._call(self.read_call(seen, None, after)))
            except StorageError as exc:
                raise self.catch_up_failed(after, len(events), exc) from exc
        return foreign, stored

    def _write(
        self, view: LogView, events: list[Event], marker: int, after: int
    ) -> list[Event] | None:
        """Run the append script; the stored events, or None when nothing was written."""
        db = self._db
        stored = numbered(events, after)
        change = view.indexed(stored)
        request = self.append_call(stored, marker, after, change, not db.cluster)
        reply = db.run(request.action, lambda: db.append(request), request.unknown)
        status, reply = self.take_append(reply)
        if status != 1:
            return None
        if db.cluster:
            index = self.index_call(reply, stored)
            try:
                self._call(index)
            except StorageError as exc:  # stored: the index catches up at reindex
                log.warning("%s: %s; store.reindex() repairs the index", self._location, exc)
        return stored

    def quarantine(self, event: Event, reason: str) -> bool:
        """Nothing is quarantined in Redis (a damaged entry raises)."""
        return False

    def close(self) -> None:
        """Nothing of its own: the store's client holds the connections."""

    def after_fork(self) -> None:
        """Nothing of its own: the store's client starts over in the child."""
