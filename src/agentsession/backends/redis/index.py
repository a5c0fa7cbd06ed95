"""The Redis store's catalog and search index (:class:`RedisIndex`, a
:class:`~agentsession.indexing.CatalogIndex`).

A session's **row** is fields of its hash (``{tag}:s``: times, counts, usage, title, user,
tenant, tags, agents, status, compacted and rewound ranges), its **usage rows** a hash
(``{tag}:u``: ``day NUL agent NUL field``) and its **documents** a hash (``{tag}:d``: seq ->
role and text): all in the session's slot, changed by the append's own script. The
**store-wide** index is in the catalog's slot (``{~catalog}``): sorted sets for the list
orders (``z:u`` updated, ``z:c`` created, ``z:i`` ids), sets for the filters
(``f:status:<v>``, ``f:user:<v>``, ``f:tenant:<v>``, ``f:tag:<v>``, ``f:agent:<v>``), the
inverted index (``w:<word>``: ``session NUL seq`` of the documents holding the word or blind
token) and ``x`` (what each session is indexed under, with its row version).

On one server the append's script updates the store-wide index too, in the same atomic run.
On a Cluster the catalog's slot is on another node, so the log runs a second script right
after the append (:data:`~agentsession.backends.redis.scripts.INDEX_ROW`); rows carry a
version, so a late update never replaces a newer one. Between the two, a list or search may
not show the append yet; a second script that never ran (the client died between them, the
node failed) leaves the store-wide index behind until ``store.reindex()``. Every row a query
returns is read from the session's own hash and checked against the filter
(:func:`~agentsession.listing.matches`), so a stale entry is never returned as a match.
"""

from __future__ import annotations

import builtins
import logging
import struct
import weakref
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

from ... import indexing
from ...errors import SessionError, SessionShredded, StoreUnavailable
from ...listing import (
    CatalogChange,
    CatalogRow,
    Document,
    Hit,
    ListQuery,
    SearchQuery,
    Totals,
    TotalsQuery,
    UsageRow,
    UsageTotals,
    matches,
    search_rows,
    select,
    totals_of,
)
from .storage import (
    bytes_of,
    change_blob,
    index_args,
    micros,
    pack,
    row_words,
    text_words,
    time_of_micros,
)

if TYPE_CHECKING:
    from ...indexing import Fields, IndexHost
    from .server import Server

log = logging.getLogger("agentsession.backends.redis")

__all__ = ["ROW_FIELDS", "RedisIndex", "row_of", "unpack"]

_CHUNK: Final = 500
_KEEP: Final = b"\x00"  # a field set_fields leaves as it is


def unpack(buf: bytes) -> Any:
    """Decode what a script packed with ``cmsgpack`` (arrays, strings as bytes, integers,
    doubles, nil, booleans): the subset the scripts produce."""
    value, _ = _unpack_at(memoryview(buf), 0)
    return value


def _unpack_at(buf: memoryview, pos: int) -> tuple[Any, int]:
    b = buf[pos]
    pos += 1
    if b <= 0x7F:
        return b, pos
    if 0x90 <= b <= 0x9F:
        return _array(buf, pos, b & 0x0F)
    if 0xA0 <= b <= 0xBF:
        n = b & 0x1F
        return bytes(buf[pos : pos + n]), pos + n
    if b >= 0xE0:
        return b - 0x100, pos
    if b == 0xC0:
        return None, pos
    if b in (0xC2, 0xC3):
        return b == 0xC3, pos
    sizes = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4}
    if b in sizes:
        width = sizes[b]
        n = int.from_bytes(buf[pos : pos + width], "big")
        pos += width
        return bytes(buf[pos : pos + n]), pos + n
    if b in (0xDC, 0xDD):
        width = 2 if b == 0xDC else 4
        n = int.from_bytes(buf[pos : pos + width], "big")
        return _array(buf, pos + width, n)
    ints = {0xCC: (1, False), 0xCD: (2, False), 0xCE: (4, False), 0xCF: (8, False),
            0xD0: (1, True), 0xD1: (2, True), 0xD2: (4, True), 0xD3: (8, True)}  # fmt: skip
    if b in ints:
        width, signed = ints[b]
        return int.from_bytes(buf[pos : pos + width], "big", signed=signed), pos + width
    if b == 0xCB:
        return struct.unpack(">d", buf[pos : pos + 8])[0], pos + 8
    if b == 0xCA:
        return struct.unpack(">f", buf[pos : pos + 4])[0], pos + 4
    raise ValueError(f"unexpected msgpack byte {b:#x}")


def _array(buf: memoryview, pos: int, n: int) -> tuple[list[Any], int]:
    out = []
    for _ in range(n):
        value, pos = _unpack_at(buf, pos)
        out.append(value)
    return out, pos


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "surrogatepass")
    return str(value)


def _int(value: Any) -> int:
    return int(value) if value else 0


def _list(value: Any) -> list[Any]:
    if not value:
        return []
    found = unpack(bytes(value))
    return found if isinstance(found, list) else []


def _usage(fields: Sequence[Any]) -> UsageTotals:
    return UsageTotals(
        input_tokens=_int(fields[0]),
        output_tokens=_int(fields[1]),
        cache_read_tokens=_int(fields[2]),
        cache_write_tokens=_int(fields[3]),
        cost=float(fields[4]) if fields[4] else 0.0,
    )


ROW_FIELDS: Final = (
    b"created",
    b"updated",
    b"last",
    b"size",
    b"title",
    b"title_set",
    b"tags",
    b"user",
    b"tenant",
    b"agents",
    b"status",
    b"messages",
    b"turns",
    b"u_in",
    b"u_out",
    b"u_cr",
    b"u_cw",
    b"u_cost",
    b"compacted",
)
"""The fields of a session's hash that :func:`row_of` reads (the hash also holds the event
ids of a session key layout 3 made: never read whole)."""


def row_of(session_id: str, h: dict[bytes, Any]) -> CatalogRow | None:
    """The catalog row of a session hash (None: no session, or no events)."""
    if not h or not h.get(b"created"):
        return None
    return CatalogRow(
        id=session_id,
        created_at=time_of_micros(h.get(b"created")),
        updated_at=time_of_micros(h.get(b"updated")),
        last_seq=_int(h.get(b"last")),
        size=_int(h.get(b"size")),
        title=_text(h.get(b"title")),
        title_set=h.get(b"title_set") == b"1",
        tags=[_text(t) for t in _list(h.get(b"tags"))],
        user=_text(h.get(b"user")),
        tenant=_text(h.get(b"tenant")),
        agents=[_text(a) for a in _list(h.get(b"agents"))],
        status=_text(h.get(b"status")) or "idle",
        messages=_int(h.get(b"messages")),
        turns=_int(h.get(b"turns")),
        usage=_usage([h.get(k) for k in (b"u_in", b"u_out", b"u_cr", b"u_cw", b"u_cost")]),
        compacted_before=_int(h.get(b"compacted")),
    )


def _doc_words(flat: Sequence[Any]) -> list[Any]:
    """``word, seq`` pairs (flat) of documents as a hash's ``HGETALL`` list (seq, packed)."""
    out: list[Any] = []
    for i in range(0, len(flat), 2):
        seq = int(flat[i])
        _role, text = unpack(bytes(flat[i + 1]))
        for word in dict.fromkeys(text_words(_text(text))):
            out += (word, seq)
    return out


def _ref(member: Any) -> tuple[bytes, int]:
    """The session and seq of an inverted index member (``session NUL seq``)."""
    sid, _, seq = bytes(member).rpartition(b"\x00")
    return sid, int(seq)


def _margin(rank: float) -> float:
    """How far a sum of several words' scores may be from the rank computed at once."""
    return 1e-9 * max(1.0, abs(rank))


class RedisIndex:
    """The catalog rows, usage rows and documents of a Redis store (see the module
    docstring)."""

    def __init__(self, db: Server) -> None:
        self._db = db
        self._catalog = db.keys.catalog
        self.deferred = False
        """Whether appends leave rows and documents to be caught up from the logs (set by
        the store: a store that keeps its catalog)."""
        self.searchable = False
        """Whether the store keeps search documents (set by the store)."""
        self._host: weakref.ref[IndexHost] | None = None

    # -- reading ----------------------------------------------------------------------------

    def _rows(self, ids: Sequence[bytes]) -> dict[bytes, CatalogRow]:
        """The rows of ``ids`` (those with events), read from the sessions' hashes."""
        if not ids:
            return {}
        db = self._db
        keys = db.keys

        def read() -> list[Any]:
            pipe = db.client.pipeline(transaction=False)
            for sid in ids:
                pipe.hmget(keys.session(_text(sid))[0], ROW_FIELDS)
            return list(pipe.execute())

        found = db.run("reading catalog rows", read)
        out: dict[bytes, CatalogRow] = {}
        for sid, values in zip(ids, found, strict=True):
            row = row_of(_text(sid), dict(zip(ROW_FIELDS, values, strict=True)))
            if row is not None:
                out[sid] = row
        return out

    def _rewound(self, ids: Sequence[bytes]) -> dict[bytes, list[Any]]:
        db = self._db
        keys = db.keys

        def read() -> list[Any]:
            pipe = db.client.pipeline(transaction=False)
            for sid in ids:
                pipe.hget(keys.session(_text(sid))[0], "rewound")
            return list(pipe.execute())

        found = db.run("reading catalog rows", read)
        return {sid: _list(v) for sid, v in zip(ids, found, strict=True)}

    def sync(self, store: IndexHost) -> None:
        """Catch up the rows of the sessions marked behind their logs (``m:r``: appends
        inside a turn, a change that did not continue the row, a writer killed mid-turn)."""
        self._host = weakref.ref(store)
        db = self._db
        if not self.deferred or db.read_only:
            return  # a replica: each row as of its latest turn boundary
        marks = db.run(
            "reading the catalog's marks", lambda: db.client.hgetall(self._catalog + b"m:r")
        )
        try:
            for sid, mark in marks.items():
                self._catch_up_row(store, _text(sid), int(mark))
        except StoreUnavailable:
            if not db.read_only:
                raise

    def _catch_up_row(self, store: IndexHost, session_id: str, mark: int) -> None:
        """Apply to the row of ``session_id`` the change of its events after the seq the row
        holds, read from its log (plaintext), where the row still holds that seq; the mark
        goes once the row holds the seq it names, and the documents read are marked for the
        next search."""
        db = self._db
        keys = db.keys.session(session_id)
        sid = bytes_of(session_id)
        life, cs, last_raw = db.run(
            f"reading session {session_id!r}",
            lambda: db.client.hmget(keys[0], "life", "cs", "last"),
        )
        last = _int(last_raw)
        held = int(cs) if cs is not None else last
        if life is None or held >= last:
            self._run_index(
                session_id, index_args(self._catalog, sid, done=b"r", done_seq=max(mark, held))
            )
            return
        try:
            # The row's seqs are the stream's: a branch's own, its reader's minus its shared part.
            session = store.get(session_id)
            shared = indexing.shared_until(session)
            events = indexing.catalogued(session, held + shared)
        except SessionShredded:
            self.shredded(session_id)
            self._run_index(session_id, index_args(self._catalog, sid, done=b"r", done_seq=mark))
            return
        except SessionError as exc:
            log.warning("catalog: session %r not caught up: %s", session_id, type(exc).__name__)
            return
        change = indexing.change_for(store, events) if events else None
        if change is None:
            return
        through = events[-1].seq - shared
        args = [held, change_blob(change), through]
        reply = db.run(
            f"catching up the catalog row of session {session_id!r}",
            lambda: db.script("CATCH_UP", [keys[0], keys[3], keys[4]], args),
        )
        if int(reply[0]) != 1:
            return  # the row moved meanwhile: whoever moved it marked it again if need be
        # Appended meanwhile: the row is still behind, and its mark stays (on one server an
        # append to a row behind does not mark it again).
        caught_up = int(reply[2]) <= through
        self._run_index(
            session_id,
            index_args(
                self._catalog,
                sid,
                row=bytes(reply[1]),
                mark=b"d" if self.searchable else b"",
                mark_seq=through,
                done=b"r" if caught_up else b"",
                done_seq=through,
            ),
        )

    def index_documents(self, store: IndexHost) -> int:
        """Index the search documents of the sessions marked behind their logs (``m:d``:
        appends never write documents), read from their logs after the seq indexed (``di``);
        returns how many sessions were read. Run by every search first."""
        db = self._db
        c = self._catalog
        marks = db.run("reading the catalog's marks", lambda: db.client.hgetall(c + b"m:d"))
        if not marks:
            return 0
        ids = builtins.list(marks)
        indexed = db.run("reading the catalog's marks", lambda: db.client.hmget(c + b"di", ids))
        done = 0
        for sid, seq in zip(ids, indexed, strict=True):
            done += self._index_session_documents(store, _text(sid), int(marks[sid]), _int(seq))
        return done

    def _index_session_documents(
        self, store: IndexHost, session_id: str, mark: int, indexed: int
    ) -> int:
        db = self._db
        sid = bytes_of(session_id)
        keys = db.keys.session(session_id)
        shared = 0
        try:
            # ``indexed`` (di) is a seq as the reader presents it; marks are the stream's.
            session = store.get(session_id)
            shared = indexing.shared_until(session)
            events = indexing.catalogued(session, indexed)
        except SessionShredded:
            events = []
        except SessionError as exc:
            log.warning("search: session %r not indexed: %s", session_id, type(exc).__name__)
            return 0
        change = indexing.change_for(store, events, documents=True) if events else None
        through = events[-1].seq if events else indexed
        documents = change.documents if change is not None else ()
        for start in range(0, len(documents), _CHUNK):  # a script's arguments are bounded
            docs: list[Any] = []
            for doc in documents[start : start + _CHUNK]:
                docs += (doc.seq, pack([doc.role, doc.text]))

            def write(docs: list[Any] = docs) -> Any:
                return db.script("DOCUMENTS", [keys[0], keys[3]], docs)

            if not int(db.run(f"indexing the documents of session {session_id!r}", write)):
                change = None  # gone or shredded meanwhile: nothing of it goes in the index
                break
        args = index_args(
            self._catalog,
            sid,
            words=row_words(change),
            done=b"d",
            done_seq=max(through - shared, mark) if not events else through - shared,
            through=through,
            session=b"" if db.cluster else keys[0],
        )
        self._run_index(session_id, args)
        return 1

    def _run_index(self, session_id: str, args: list[Any]) -> None:
        db = self._db
        db.run(
            f"indexing session {session_id!r}",
            lambda: db.script("INDEX_ROW", [self._catalog + b"x"], args),
        )

    def _groups(self, query: ListQuery) -> list[Any]:
        """The filter's set keys as the query script takes them (count, keys...)."""
        where = query.where
        c = self._catalog
        out: list[Any] = []

        def group(field: str, values: Iterable[str]) -> None:
            keys = [c + f"f:{field}:".encode() + bytes_of(v) for v in values]
            out.extend([len(keys), *keys])

        if where.status is not None:
            group("status", where.status)
        if where.user is not None:
            group("user", where.user)
        if where.tenant is not None:
            group("tenant", where.tenant)
        if where.agent is not None:
            group("agent", where.agent)
        for tag in where.tags or ():
            group("tag", [tag])
        return out

    def query(self, query: ListQuery) -> builtins.list[CatalogRow]:
        where = query.where
        if where.ids is not None:
            rows = self._rows([bytes_of(i) for i in dict.fromkeys(where.ids)])
            return select(rows.values(), query)
        if any(v == () for v in (where.status, where.user, where.tenant, where.agent)):
            return []
        order = query.order
        zkey = self._catalog + {"updated": b"z:u", "created": b"z:c"}.get(order, b"z:i")
        groups = self._groups(query)
        limit = query.limit
        after: tuple[bytes, bytes] | None = None
        if query.after is not None:
            value, at = query.after
            mark = at if order == "id" else micros(value) or "0"
            after = (bytes_of(mark), bytes_of(at))
        out: list[CatalogRow] = []
        db = self._db
        while limit is None or len(out) < limit:
            chunk = _CHUNK if limit is None else max(limit - len(out), 1)
            score, last = after if after is not None else (b"", b"")
            args: list[Any] = [self._catalog, order, score, last, chunk, *groups]

            def run(args: list[Any] = args) -> Any:
                return db.script("QUERY", [zkey], args)

            found = db.run("listing sessions", run)
            if not found:
                break
            ids = [bytes(m) for m in found[0::2]] if order != "id" else [bytes(m) for m in found]
            rows = self._rows(ids)
            for sid_b in ids:
                row = rows.get(sid_b)
                if row is not None and matches(row, where):
                    out.append(row)
                    if limit is not None and len(out) >= limit:
                        break
            if order == "id":
                after = (ids[-1], ids[-1])
                count = len(found)
            else:
                after = (bytes(found[-1]), ids[-1])
                count = len(found) // 2
            if count < chunk:
                break
        return out

    def search(self, query: SearchQuery) -> builtins.list[Hit]:
        """The documents holding every term, best first: the terms' sorted sets (``W:``)
        read in order of their summed scores, a batch at a time, until the page is certain
        (each batch's documents ranked exactly by :func:`~agentsession.listing.search_rows`),
        and every document of the version 1 sets (``w:``)."""
        c = self._catalog
        db = self._db
        host = self._host() if self._host is not None else None
        behind: list[tuple[bytes, Document, bool]] = []
        if self.searchable and self.deferred and host is not None:
            try:
                if not db.read_only:
                    self.index_documents(host)
            except StoreUnavailable:
                if not db.read_only:
                    raise
            if db.read_only:  # a replica cannot index: what is behind, read from the logs
                behind = self._documents_behind(host)
        terms = [bytes_of(t) for t in query.terms]
        old = [c + b"w:" + t for t in terms]
        refs: list[tuple[bytes, int]] = [
            _ref(ref) for ref in db.run("searching", lambda: db.client.sinter(old))
        ]
        keys = [c + b"W:" + t for t in terms]
        chunk = max(4 * query.limit, 100)
        # Scores are minus the ranks: the hits after a cursor have a score of at least minus
        # its rank (a sum of several words' scores may be off by a rounding: a margin).
        lowest = "-inf" if query.after is None else repr(-query.after[0] - _margin(query.after[0]))
        docs: dict[tuple[bytes, int], tuple[str, Document, bool]] = {}
        rows: dict[bytes, CatalogRow] = {}
        offset = 0
        while True:
            args: list[Any] = [c, lowest, offset, chunk, *keys]

            def ranked(args: list[Any] = args) -> Any:
                return db.script("SEARCH", keys[:1], args)

            found = db.run("searching", ranked)
            batch = [_ref(m) for m in found[0::2]]
            offset += len(batch)
            self._documents(query, batch + refs, docs, rows)
            if behind:
                self._add_behind(query, behind, docs, rows)
                behind = []
            refs = []
            hits = search_rows(docs.values(), {_text(k): v for k, v in rows.items()}, query)
            if len(batch) < chunk:
                return hits
            if len(hits) >= query.limit:
                # Done when no document not read yet can rank with the page's last hit: one
                # word's scores are its exact ranks, and ties list in (session, seq) order.
                last, rank = -float(found[-1]), hits[-1].rank
                if len(terms) == 1 or last < rank - _margin(rank):
                    return hits

    def _documents_behind(self, store: IndexHost) -> list[tuple[bytes, Document, bool]]:
        """The documents of the marked sessions (``m:d``, and ``m:r``: rows behind have their
        documents behind too) not indexed yet, read from their logs (on a replica, which
        cannot index them), each flagged by its session's later rewinds."""
        db = self._db
        c = self._catalog
        # Rows behind have their documents behind too (the row's catch-up marks them).
        marks = db.run(
            "reading the catalog's marks",
            lambda: [*db.client.hkeys(c + b"m:d"), *db.client.hkeys(c + b"m:r")],
        )
        ids = builtins.list(dict.fromkeys(bytes(m) for m in marks))
        if not ids:
            return []
        indexed = db.run("reading the catalog's marks", lambda: db.client.hmget(c + b"di", ids))
        out: list[tuple[bytes, Document, bool]] = []
        for sid, seq in zip(ids, indexed, strict=True):
            try:
                events = indexing.catalogued(store.get(_text(sid)), _int(seq))
            except SessionError:
                continue
            change = indexing.change_for(store, events, documents=True) if events else None
            if change is None:
                continue
            for doc in change.documents:
                out.append((sid, doc, any(lo < doc.seq < hi for lo, hi in change.rewound)))
        return out

    def _add_behind(
        self,
        query: SearchQuery,
        behind: list[tuple[bytes, Document, bool]],
        docs: dict[tuple[bytes, int], tuple[str, Document, bool]],
        rows: dict[bytes, CatalogRow],
    ) -> None:
        """Add to ``docs`` the documents read from the logs (:meth:`_documents_behind`) of
        ``query``'s sessions that match its filter."""
        wanted = None if query.session_id is None else bytes_of(query.session_id)
        rows.update(self._rows([sid for sid, _, _ in behind if sid not in rows]))
        for sid, doc, flagged in behind:
            if (
                (wanted is None or sid == wanted)
                and sid in rows
                and matches(rows[sid], query.where)
            ):
                docs[sid, doc.seq] = (_text(sid), doc, flagged)

    def _documents(
        self,
        query: SearchQuery,
        refs: Sequence[tuple[bytes, int]],
        docs: dict[tuple[bytes, int], tuple[str, Document, bool]],
        rows: dict[bytes, CatalogRow],
    ) -> None:
        """Add to ``docs`` (by session and seq) the documents ``refs`` names whose session is
        ``query``'s and matches its filter, with its rewound flag; and their rows to
        ``rows``."""
        db = self._db
        by_session: dict[bytes, list[int]] = {}
        wanted = None if query.session_id is None else bytes_of(query.session_id)
        for sid, seq in refs:
            if (wanted is None or sid == wanted) and (sid, seq) not in docs:
                by_session.setdefault(sid, []).append(seq)
        if not by_session:
            return
        new = [sid for sid in by_session if sid not in rows]
        rows.update(self._rows(new))
        ids = [i for i in by_session if i in rows and matches(rows[i], query.where)]
        rewound = self._rewound(ids)
        keys = db.keys

        def read() -> list[Any]:
            pipe = db.client.pipeline(transaction=False)
            for sid in ids:
                pipe.hmget(keys.session(_text(sid))[3], by_session[sid])
            return list(pipe.execute())

        found = db.run("reading search documents", read) if ids else []
        for owner, packed in zip(ids, found, strict=True):
            ranges = rewound[owner]
            for at_seq, doc in zip(by_session[owner], packed, strict=True):
                if doc is None:
                    continue
                role, text = unpack(bytes(doc))
                flagged = any(int(lo) < at_seq < int(hi) for lo, hi in ranges)
                document = Document(seq=at_seq, role=_text(role), text=_text(text))
                docs[owner, at_seq] = (_text(owner), document, flagged)

    def totals(self, query: TotalsQuery) -> builtins.list[Totals]:
        rows = self.query(ListQuery(where=query.where, order="id", limit=None))
        db = self._db
        keys = db.keys

        def read() -> list[Any]:
            pipe = db.client.pipeline(transaction=False)
            for row in rows:
                pipe.hgetall(keys.session(row.id)[4])
            return list(pipe.execute())

        found = db.run("reading usage rows", read) if rows else []
        usage: list[tuple[str, UsageRow]] = []
        for row, h in zip(rows, found, strict=True):
            grouped: dict[tuple[str, str], dict[bytes, Any]] = {}
            for field, value in h.items():
                raw_day, _, rest = bytes(field).partition(b"\x00")
                raw_agent, _, part = rest.rpartition(b"\x00")
                grouped.setdefault((_text(raw_day), _text(raw_agent)), {})[part] = value
            for (day, agent), parts in grouped.items():
                sums = _usage([parts.get(k) for k in (b"i", b"o", b"r", b"w", b"$")])
                calls = _int(parts.get(b"c"))
                usage.append((row.id, UsageRow(day=day, agent=agent, calls=calls, usage=sums)))
        return totals_of(usage, {row.id: row for row in rows}, query)

    # -- writing ----------------------------------------------------------------------------

    def _index(self, session_id: str, row: bytes, new: list[Any], gone: list[Any]) -> None:
        args = index_args(self._catalog, bytes_of(session_id), row=row, words=new, gone=gone)
        self._run_index(session_id, args)

    def unindex(self, session_id: str, documents: Sequence[Any]) -> None:
        """Remove a deleted session from the store-wide index (``documents``: its documents
        as ``HGETALL`` listed them), its marks with it."""
        args = index_args(
            self._catalog, bytes_of(session_id), remove=True, gone=_doc_words(documents)
        )
        self._run_index(session_id, args)

    def _set_fields(self, session_id: str, args: list[Any]) -> None:
        db = self._db
        keys = db.keys.session(session_id)
        reply = db.run(
            f"updating session {session_id!r}",
            lambda: db.script("SET_FIELDS", [keys[0], keys[3]], args),
        )
        if int(reply[0]) != 1:
            return
        self._index(session_id, bytes(reply[1]), [], _doc_words(reply[2]))

    def set_fields(self, session_id: str, fields: Fields) -> None:
        def keep(value: str | None) -> bytes:
            return _KEEP if value is None else bytes_of(value)

        tags = _KEEP if fields.tags is None else _packed(list(fields.tags))
        args = [keep(fields.title), tags, keep(fields.user), keep(fields.tenant), b"0"]
        self._set_fields(session_id, args)

    def shredded(self, session_id: str) -> None:
        self._set_fields(session_id, [_KEEP, _KEEP, _KEEP, _KEEP, b"1"])

    def rebuild(
        self, session_id: str, change: CatalogChange | None, fields: Fields, rewound: bool
    ) -> None:
        db = self._db
        keys = db.keys.session(session_id)
        title = fields.title or ""
        args = [
            change_blob(change) if change is not None else b"",
            bytes_of(title),
            b"1" if title else b"0",
            _packed(list(fields.tags or ())),
            bytes_of(fields.user or ""),
            bytes_of(fields.tenant or ""),
            change.last_seq - change.shared if change is not None else 0,
        ]
        reply = db.run(
            f"rebuilding the catalog row of session {session_id!r}",
            lambda: db.script("REBUILD", [keys[0], keys[3], keys[4]], args),
        )
        if int(reply[0]) != 1:
            self.unindex(session_id, [])
            return
        if change is None:
            self.unindex(session_id, reply[2])
            return
        latest = int(reply[3])
        own = change.last_seq - change.shared  # the stream's seq (a branch's own)
        behind = latest > own  # appended since the log was read: caught up later
        args = index_args(
            self._catalog,
            bytes_of(session_id),
            row=bytes(reply[1]),
            words=row_words(change),
            gone=_doc_words(reply[2]),
            mark=b"r" if behind else b"",
            mark_seq=latest,
            done=b"" if behind else b"rd",
            done_seq=own,
            through=change.last_seq,
        )
        self._run_index(session_id, args)


def _packed(value: list[Any]) -> bytes:
    return pack(value)
