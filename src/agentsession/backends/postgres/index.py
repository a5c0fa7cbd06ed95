"""The PostgreSQL store's catalog and full-text search (:class:`PostgresIndex`).

Where it lives (schema version 5, see :mod:`agentsession.backends.postgres.schema`):

* the **catalog row** is the session's row of ``<schema>.sessions``, widened (title, tags,
  user, tenant, agents, status, counts, usage totals, ``compacted_before``, ``indexed``): the
  append already updates that row under its lock, so keeping the catalog costs no second row
  and no second lock, and ``created_at``/``updated_at``/``last_seq`` are the row's own.
  Listing is a keyset scan of an index: ``(updated_at DESC, id DESC)``, ``(created_at DESC,
  id DESC)``, the primary key for ``id``, ``(tenant, updated_at DESC, id DESC)`` and
  ``("user", updated_at DESC, id DESC)`` for those filters, GIN indexes on ``tags`` and
  ``agents`` (arrays: ``tags @> ...``, ``agents && ...``); since version 7 the tenant, user,
  tags and agents indexes hold only the rows that have one (the filters add that condition), so
  an append to a session without them adds no entry there;
* **usage rows** per (session, day, agent) in ``<schema>.usage`` (what ``totals`` sums);
* **documents** in ``<schema>.documents``: one per message, tool call or tool result, with
  its text (NULL on an encrypted store), a ``tsvector`` (GIN index) and ``rewound``.

Each append's :class:`~agentsession.listing.CatalogChange` (at a turn's start and end, see
:attr:`~agentsession.indexing.Indexing.deferred`) is applied by the append statement itself
(the session row it updates, and a data-modifying CTE for the usage rows: one statement, one
transaction, one round trip, on the sync and the async path alike; the parameters are made
here, by :func:`append_params`). Its documents are not (version 7): the statement marks the
session in ``<schema>.search_dirty`` with the seq before it, and a search first indexes the
marked sessions' documents from their logs (:meth:`PostgresIndex.index_documents`), so an
append writes no ``tsvector`` and no GIN entry. ``sessions.indexed`` is false for rows whose
catalog is not kept (rows that existed before version 5, or written by a store opened with
``catalog=False``): :meth:`PostgresIndex.sync` rebuilds them from their events before a
listing, search or totals (in Python, through ``store.reindex``: an encrypted store's fields
are sealed with its keys).

**Words.** With the default search language ``simple``, and always on an encrypted store
(blind tokens), a document's tsvector holds exactly the words of
:func:`agentsession.listing.words` (given as a ``tsvector`` literal, with positions for
``ts_rank``), and a query is the AND of its words: the same matches as the reference index.
With another language (``open_store(url, search_language="english")``) the text is parsed
and stemmed by that text search configuration (``to_tsvector``/``plainto_tsquery``), so
"running" finds "runs"; its stop words are not searchable. Every process writing a store
should use one language (``store.reindex()`` rewrites the documents with the current one).
"""

from __future__ import annotations

import builtins
import functools
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec
from psycopg import sql

from ...errors import CorruptLogError, EncryptionError, SessionExpired, SessionShredded
from ...indexing import (
    Fields,
    IndexHost,
    catalogued,
    change_for,
    reindex,
    set_row_fields,
    shared_until,
)
from ...listing import (
    CatalogChange,
    CatalogRow,
    Filter,
    Hit,
    ListQuery,
    SearchQuery,
    Totals,
    TotalsQuery,
    UsageRow,
    UsageTotals,
    apply_change,
    sort_totals,
)
from .connections import log
from .replicas import ReplicaSet
from .schema import APPEND_CATALOG_PARAMS, Statements

if TYPE_CHECKING:
    from .connections import Connections, _Conn

__all__ = [
    "PostgresIndex",
    "append_params",
    "catalog_params",
    "document_words",
    "documents_params",
]

MAX_LEXEME_BYTES: Final = 2046
"""Longer words are left out of a document's tsvector (PostgreSQL's limit is 2047 bytes)."""

MAX_WORDS_BYTES: Final = 400_000
"""A document's words beyond this many bytes are not indexed (a tsvector holds at most 1 MB)."""

_MAX_POSITION: Final = 16383
_MAX_POSITIONS: Final = 256


def _quoted(word: str) -> str:
    return "'" + word.replace("\\", "\\\\").replace("'", "''") + "'"


def document_words(words: Sequence[str], language: str | None) -> str:
    """A document's words as the append statement takes them: a ``tsvector`` literal (exact
    lexemes, with positions) when ``language`` is None, else the words space-separated for
    that configuration to parse; bounded by :data:`MAX_WORDS_BYTES`."""
    if language is not None:
        out: list[str] = []
        size = 0
        for word in words:
            size += len(word) + 1
            if size > MAX_WORDS_BYTES:
                break
            out.append(word)
        return " ".join(out)
    positions: dict[str, list[int]] = {}
    skipped: builtins.set[str] = builtins.set()
    get = positions.get
    size = 0
    for index, word in enumerate(words, start=1):
        found = get(word)
        if found is not None:
            found.append(index)
            continue
        if word in skipped:
            continue
        length = len(word) if word.isascii() else len(word.encode("utf-8", "surrogatepass"))
        if length > MAX_LEXEME_BYTES:
            skipped.add(word)
            continue
        size += length + 8
        if size > MAX_WORDS_BYTES:
            break
        positions[word] = [index]
    return " ".join(_quoted(word) + ":" + _positions(pos) for word, pos in positions.items())


def _positions(pos: list[int]) -> str:
    """A lexeme's positions as a ``tsvector`` literal lists them: at most
    :data:`_MAX_POSITIONS`, each at most :data:`_MAX_POSITION` (those beyond it become it)."""
    pos = pos[:_MAX_POSITIONS]
    if pos[-1] > _MAX_POSITION:
        pos = list(dict.fromkeys(min(p, _MAX_POSITION) for p in pos))
    return ",".join(map(str, pos))


def _readable(value: str) -> str:
    """``value`` with NUL and lone surrogates replaced by U+FFFD, so TEXT can hold it."""
    value = value.replace("\x00", "\ufffd")
    return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def append_params(change: CatalogChange) -> dict[str, Any]:
    """The catalog's parameters of an append statement
    (:data:`~agentsession.backends.postgres.schema.APPEND_CATALOG_PARAMS`) for ``change``:
    what it adds to the session row and its usage rows (its documents are indexed apart)."""
    usage = change.usage
    rows = change.usage_rows
    params = {
        "c_messages": change.messages,
        "c_turns": change.turns,
        "c_input": usage.input_tokens,
        "c_output": usage.output_tokens,
        "c_cache_read": usage.cache_read_tokens,
        "c_cache_write": usage.cache_write_tokens,
        "c_cost": float(usage.cost),
        "c_agents": [_readable(a) for a in change.agents],
        "c_user": _readable(change.user),
        "c_title": _readable(change.title),
        "c_status": change.status,
        "c_compacted": change.compacted_before,
        # The row's catalog_seq is the storage's seq (a branch's own: CatalogChange.shared).
        "c_first": change.first_seq - change.shared,
        "c_last": change.last_seq - change.shared,
    }
    return params | (_usage_params(rows) if rows else _NO_USAGE)


def _usage_params(rows: Sequence[UsageRow]) -> dict[str, Any]:
    """The usage rows' parameters (``u_*``): one array per column."""
    return {
        "u_days": [r.day for r in rows],
        "u_agents": [_readable(r.agent) for r in rows],
        "u_calls": [r.calls for r in rows],
        "u_input": [r.usage.input_tokens for r in rows],
        "u_output": [r.usage.output_tokens for r in rows],
        "u_cache_read": [r.usage.cache_read_tokens for r in rows],
        "u_cache_write": [r.usage.cache_write_tokens for r in rows],
        "u_cost": [float(r.usage.cost) for r in rows],
    }


_NO_USAGE: Final = dict.fromkeys(_usage_params(()), None)
"""No usage rows: NULL arrays (unnested as no rows), which cost the driver nothing to send."""


def documents_params(change: CatalogChange, language: str | None, blind: bool) -> dict[str, Any]:
    """The parameters of ``change``'s documents and rewinds (``d_*``, ``r_*`` of
    :data:`CATALOG_PARAMS`): ``language`` None keeps exact words (``simple``); ``blind``: the
    documents hold blind tokens (an encrypted store: no text is kept, the tokens are matched
    exactly)."""
    from ...listing import words as words_of

    docs = change.documents
    rewinds = change.rewound
    language = None if blind else language
    return {
        "d_seqs": [d.seq for d in docs],
        "d_roles": [d.role for d in docs],
        "d_texts": ["" if blind else _readable(d.text) for d in docs],
        "d_words": [
            document_words(d.text.split() if blind else words_of(d.text), language) for d in docs
        ],
        "d_rewound": [any(t < d.seq < m for t, m in rewinds) for d in docs],
        "d_language": language,
        "r_to": [t for t, _ in rewinds],
        "r_marker": [m for _, m in rewinds],
    }


def catalog_params(change: CatalogChange, language: str | None, blind: bool) -> dict[str, Any]:
    """Every catalog parameter (:data:`CATALOG_PARAMS`) of ``change``: :func:`append_params`
    and :func:`documents_params`."""
    return append_params(change) | documents_params(change, language, blind)


_in_append_order: Final = operator.itemgetter(*APPEND_CATALOG_PARAMS)


def raw_append_params(params: dict[str, Any]) -> tuple[Any, ...]:
    """:func:`append_params` in the order of the ``$13`` ... placeholders."""
    return _in_append_order(params)  # type: ignore[no-any-return]


# -- the queries --------------------------------------------------------------------------------

_ROW_COLUMNS: Final = (
    'id, created_at, updated_at, last_seq, title, title_set, tags, "user", tenant, agents, '
    "status, messages, turns, input_tokens, output_tokens, cache_read_tokens, "
    "cache_write_tokens, cost, compacted_before"
)


def _row(r: Sequence[Any]) -> CatalogRow:
    return CatalogRow(
        id=r[0],
        created_at=r[1],
        updated_at=r[2],
        last_seq=r[3],
        title=r[4],
        title_set=r[5],
        tags=list(r[6]),
        user=r[7],
        tenant=r[8],
        agents=list(r[9]),
        status=r[10],
        messages=r[11],
        turns=r[12],
        usage=UsageTotals(
            input_tokens=r[13],
            output_tokens=r[14],
            cache_read_tokens=r[15],
            cache_write_tokens=r[16],
            cost=r[17],
        ),
        compacted_before=r[18],
    )


def _conditions(where: Filter, params: dict[str, Any], alias: str) -> list[sql.Composable]:
    """``where`` as SQL conditions on the sessions row ``alias`` (parameters added to
    ``params``): the rule of :func:`agentsession.listing.matches`."""
    a = sql.Identifier(alias)
    out: list[sql.Composable] = []

    def add(template: str, name: str, value: Any) -> None:
        params[name] = value
        out.append(sql.SQL(template).format(a=a, p=sql.Placeholder(name)))

    if where.prefix is not None:
        add("starts_with({a}.id, {p}::text)", "w_prefix", where.prefix)
    if where.ids is not None:
        add("{a}.id = ANY({p}::text[])", "w_ids", list(where.ids))
    # The indexes of user, tenant and tags hold only the rows that have one (schema version
    # 7): a filter that cannot match an empty one says so, for the planner to use them.
    if where.user is not None:
        add('{a}."user" = ANY({p}::text[])', "w_user", list(where.user))
        if "" not in where.user:
            out.append(sql.SQL("{a}.\"user\" <> ''").format(a=a))
    if where.tenant is not None:
        add("{a}.tenant = ANY({p}::text[])", "w_tenant", list(where.tenant))
        if "" not in where.tenant:
            out.append(sql.SQL("{a}.tenant <> ''").format(a=a))
    if where.agent is not None:
        add("{a}.agents && {p}::text[]", "w_agent", list(where.agent))
        out.append(sql.SQL("{a}.agents <> '{{}}'").format(a=a))
    if where.tags is not None:
        add("{a}.tags @> {p}::text[]", "w_tags", list(where.tags))
        if where.tags:
            out.append(sql.SQL("{a}.tags <> '{{}}'").format(a=a))
    if where.status is not None:
        add("{a}.status = ANY({p}::text[])", "w_status", list(where.status))
    for field, bounds in (("updated_at", where.updated), ("created_at", where.created)):
        if bounds is None:
            continue
        after, before = bounds
        column = sql.Identifier(field)
        if after is not None:
            params[f"w_{field}_after"] = after
            out.append(
                sql.SQL("{a}.{c} >= {p}").format(
                    a=a, c=column, p=sql.Placeholder(f"w_{field}_after")
                )
            )
        if before is not None:
            params[f"w_{field}_before"] = before
            out.append(
                sql.SQL("{a}.{c} < {p}").format(
                    a=a, c=column, p=sql.Placeholder(f"w_{field}_before")
                )
            )
    if where.title is not None:
        add("strpos(lower({a}.title), lower({p}::text)) > 0", "w_title", where.title)
    return out


def _where(conditions: list[sql.Composable]) -> sql.Composable:
    if not conditions:
        return sql.SQL("true")
    return sql.SQL(" AND ").join(conditions)


_HEADLINE_OPTIONS: Final = "StartSel=[, StopSel=], MaxWords=30, MinWords=12, ShortWord=2"

# What a store opened read-only searches: the documents indexed, and those of the marked
# sessions not indexed yet (``b_*``: read from their logs), each once.
_WITH_BEHIND: Final = """(
    SELECT session_id, seq, role, text, words, rewound FROM {s}.documents
    UNION ALL
    SELECT x.sid, x.seq, x.role, x.text,
           CASE WHEN %(b_language)s::regconfig IS NULL THEN x.w::tsvector
                ELSE to_tsvector(%(b_language)s::regconfig, x.w) END,
           x.rewound
    FROM unnest(%(b_sids)s::text[], %(b_seqs)s::bigint[], %(b_roles)s::text[],
                %(b_texts)s::text[], %(b_words)s::text[], %(b_rewound)s::boolean[])
         AS x(sid, seq, role, text, w, rewound)
    WHERE NOT EXISTS (
        SELECT 1 FROM {s}.documents e WHERE e.session_id = x.sid AND e.seq = x.seq
    )
)"""


class PostgresIndex:
    """A :class:`~agentsession.indexing.CatalogIndex` over a PostgreSQL store's tables (see the
    module docstring): appends keep it in their own statement; this object answers the
    store's queries and writes what ``session.update``, ``shred`` and ``reindex`` change.

    ``language``: the text search configuration of the documents (None: ``simple``, exact
    words); ``read_only``: a store that must not write (:meth:`sync` rebuilds nothing, a
    search indexes nothing); ``marks``: the schema has the search marks (version 7), whose
    sessions' documents a search indexes first (:meth:`index_documents`)."""

    def __init__(
        self,
        db: Connections,
        schema: str,
        statements: Statements,
        *,
        language: str | None = None,
        read_only: bool = False,
        reads: ReplicaSet | None = None,
        marks: bool = False,
    ) -> None:
        self._db = db
        self._marks = marks and not read_only
        self._behind = marks and read_only
        """A store opened read-only on a schema with search marks: its searches also match
        the marked sessions' documents not indexed yet, read from their logs."""
        self._read = (reads or ReplicaSet(db, (), 0.0)).run
        """How lists, searches and totals read: on a read replica when the store has one."""
        self._sql = statements
        self._schema = sql.Identifier(schema)
        self.language = language
        """The documents' text search configuration (None: ``simple``, exact words)."""
        self._read_only = read_only
        self.host: IndexHost | None = None
        """The store (set by it once made): whether it is encrypted decides how documents'
        words are kept."""

    def blind(self) -> bool:
        """Whether documents hold blind tokens (the store is encrypted)."""
        host = self.host
        return host is not None and host.encrypted

    def words_language(self) -> str | None:
        """The configuration that parses documents' words (None: exact words)."""
        return None if self.blind() else self.language

    def _q(self, template: str, **parts: sql.Composable) -> sql.Composed:
        return sql.SQL(template).format(s=self._schema, **parts)

    # -- CatalogIndex ------------------------------------------------------------------------

    def sync(self, store: IndexHost) -> None:
        """Rebuild the rows whose catalog is not kept (``indexed`` false: from before schema
        version 5, or written with ``catalog=False``) from their events; one index probe when
        there are none."""
        if self._read_only:
            return
        statement = self._q(
            "SELECT id, catalog_seq FROM {s}.sessions WHERE NOT indexed ORDER BY id LIMIT 500"
        )
        seen: builtins.set[str] = builtins.set()
        while True:
            rows = self._db.run(
                "finding sessions to index", lambda c: c.execute(statement).fetchall()
            )
            rows = [r for r in rows if r[0] not in seen]
            if not rows:
                return
            seen.update(r[0] for r in rows)
            whole = [sid for sid, held in rows if not held or not self._catch_up(store, sid, held)]
            if whole:
                reindex(store, whole)

    def _catch_up(self, store: IndexHost, session_id: str, held: int) -> bool:
        """Apply the change of the session's events after ``held`` (its row's
        ``catalog_seq``) where the row still continues there; False when it must be rebuilt
        whole (fewer events than held: made again since)."""
        try:
            session = store.get(session_id)
            # ``held`` is a seq of the session's own storage: a branch's reader presents its
            # events after its shared history (indexing.shared_until).
            shared = shared_until(session)
            if session.latest_seq - shared < held:
                return False
            events = catalogued(session, held + shared)
        except SessionShredded:
            self.shredded(session_id)
            return True
        change = change_for(store, events) if events else None
        if change is None:
            return True
        if shared:
            change = msgspec.structs.replace(change, shared=shared)
        params = catalog_params(change, self.language, self.blind())
        params["id"] = session_id
        statement = self._sql.catalog_apply
        self._db.run(
            f"indexing session {session_id!r}",
            lambda c: c.execute(statement, params),
            write="the session's catalog entries may or may not have been updated",
        )
        return True

    def index_documents(self, store: IndexHost) -> int:
        """Index the search documents of the sessions marked behind their logs (version 7:
        appends write no documents, they mark their session in ``search_dirty`` with the seq
        before them); returns how many sessions' logs were read. Run by every ``search``
        first; a writer may run it after appending (``store.index_documents()``), so that the
        next search finds the documents indexed. Nothing on a store opened read-only (its
        searches read the marked sessions' documents from their logs:
        :meth:`documents_behind`) or on an older schema.

        Each marked session is read after its mark's seq, and its documents written in one
        transaction that first locks the session row (as appends lock it), so the latest seq
        read there is the stored one: the mark goes when the documents reach it, else it moves
        to the seq they reach (an append meanwhile left it, and is read next time). A crash
        leaves the mark; indexing a document again replaces it."""
        if not self._marks:
            return 0
        statement = self._sql.marked

        def _marked(conn: _Conn, after: str) -> builtins.list[Any]:
            return conn.execute(statement, (after,)).fetchall()

        done = 0
        seen = ""
        while True:
            rows = self._db.run("finding sessions to index", functools.partial(_marked, after=seen))
            if not rows:
                return done
            seen = rows[-1][0]
            for sid, after in rows:
                done += self._index_marked(store, sid, int(after))

    def _marked_change(
        self, store: IndexHost, session_id: str, after: int
    ) -> tuple[CatalogChange | None, int] | None:
        """What the events of a marked session after its mark's seq ``after`` (one of its
        storage's own seqs: a branch's reader presents them after its shared history) change,
        with their documents, and the storage's seq they reach; None when its log cannot be
        read now (logged), or it was shredded (its documents removed, unless read-only)."""
        try:
            session = store.get(session_id)
            latest = session.latest_seq
            origin = session.origin
            shared = origin.seq if origin is not None else 0
            events = session.read(after=after + shared)
        except (SessionShredded, CorruptLogError, EncryptionError, SessionExpired) as exc:
            if not isinstance(exc, SessionShredded):
                log.warning("search: session %r not indexed: %s", session_id, type(exc).__name__)
            elif self._marks:  # no words of it may stay in the index
                self.shredded(session_id)
            return None
        change = change_for(store, events, documents=True) if events else None
        return change, (events[-1].seq if events else latest) - shared

    def _index_marked(self, store: IndexHost, session_id: str, after: int) -> int:
        """Index the documents of one marked session after its mark's seq ``after``."""
        found = self._marked_change(store, session_id, after)
        if found is None:
            return 0
        change, upto = found
        docs: dict[str, Any] | None = None
        if change is not None and (change.documents or change.rewound):
            docs = documents_params(change, self.language, self.blind())
            docs["id"] = session_id
        statements = self._sql
        mark = {"id": session_id, "after": after, "upto": upto}

        def write(conn: _Conn) -> None:
            with conn.transaction():
                found = conn.execute(statements.lock_session, (session_id,)).fetchone()
                if found is None:  # deleted since
                    conn.execute(statements.mark_done, mark)
                    return
                if found[0] < upto:  # made again since: read again next time
                    return
                if docs is not None:
                    conn.execute(statements.documents_add, docs)
                done = statements.mark_done if found[0] == upto else statements.mark_moved
                conn.execute(done, mark)

        self._db.run(
            f"indexing the documents of session {session_id!r}",
            write,
            write="the session's documents may or may not have been indexed",
        )
        return 1

    def documents_behind(self, store: IndexHost) -> dict[str, Any] | None:
        """For a store opened read-only: the documents of the marked sessions not indexed yet
        (read from their logs, as an index run would write them), as the search statement's
        ``b_*`` parameters; None when there are none."""
        if not self._behind:
            return None
        statement = self._sql.marked
        out: dict[str, builtins.list[Any]] = {}
        seen = ""
        while rows := self._read(
            "finding sessions not indexed",
            functools.partial(lambda c, a: c.execute(statement, (a,)).fetchall(), a=seen),
        ):
            seen = rows[-1][0]
            for sid, after in rows:
                found = self._marked_change(store, sid, int(after))
                if found is None or found[0] is None or not found[0].documents:
                    continue
                docs = documents_params(found[0], self.language, self.blind())
                out.setdefault("b_sids", []).extend([sid] * len(docs["d_seqs"]))
                for name in ("d_seqs", "d_roles", "d_texts", "d_words", "d_rewound"):
                    out.setdefault("b_" + name[2:], []).extend(docs[name])
        if not out:
            return None
        return {**out, "b_language": None if self.blind() else self.language}

    def query(self, query: ListQuery) -> builtins.list[CatalogRow]:
        params: dict[str, Any] = {}
        conditions = _conditions(query.where, params, "s")
        order = query.order
        order_by: sql.Composable
        if order == "id":
            order_by = sql.SQL("s.id")
            if query.after is not None:
                params["k_id"] = query.after[1]
                conditions.append(sql.SQL("s.id > %(k_id)s"))
        else:
            column = sql.Identifier("updated_at" if order == "updated" else "created_at")
            order_by = sql.SQL("s.{c} DESC, s.id DESC").format(c=column)
            if query.after is not None:
                value, sid = query.after
                params["k_time"], params["k_id"] = value, sid
                conditions.append(
                    sql.SQL("(s.{c}, s.id) < (%(k_time)s::timestamptz, %(k_id)s)").format(c=column)
                    if value is not None
                    else sql.SQL("false")
                )
        params["limit"] = query.limit
        statement = self._q(
            "SELECT " + _ROW_COLUMNS + " FROM {s}.sessions s WHERE {w} ORDER BY {o} "
            "LIMIT %(limit)s",
            w=_where(conditions),
            o=order_by,
        )
        rows = self._read("listing sessions", lambda c: c.execute(statement, params).fetchall())
        return [_row(r) for r in rows]

    def search(self, query: SearchQuery) -> builtins.list[Hit]:
        host = self.host
        # Read where documents were just written, if any: a replica may not have them yet.
        indexed = host is not None and self.index_documents(host) > 0
        read = self._db.run if indexed else self._read
        params: dict[str, Any] = {"limit": query.limit}
        behind = None if host is None else self.documents_behind(host)
        documents: sql.Composable = sql.SQL("{s}.documents").format(s=self._schema)
        if behind is not None:
            params.update(behind)
            documents = self._q(_WITH_BEHIND)
        exact = query.blind or self.language is None
        if exact:
            params["q"] = " & ".join(_quoted(t) for t in query.terms)
            tsquery = sql.SQL("%(q)s::tsquery")
            config = "simple"
        else:
            params["q"] = " ".join(query.terms)
            params["lang"] = self.language
            tsquery = sql.SQL("plainto_tsquery(%(lang)s::regconfig, %(q)s)")
            config = str(self.language)
        conditions = _conditions(query.where, params, "s")
        if query.session_id is not None:
            params["sid"] = query.session_id
            conditions.append(sql.SQL("d.session_id = %(sid)s"))
        outer: list[sql.Composable] = []
        if query.after is not None:
            rank, sid, seq = query.after
            params.update(k_rank=rank, k_sid=sid, k_seq=seq)
            outer.append(
                sql.SQL(
                    "(h.rank < %(k_rank)s::real OR (h.rank = %(k_rank)s::real "
                    "AND (h.session_id, h.seq) > (%(k_sid)s, %(k_seq)s::bigint)))"
                )
            )
        headline = (
            sql.SQL("''")
            if query.blind
            else sql.SQL("coalesce(ts_headline({cfg}::regconfig, h.text, q.q, {opts}), '')").format(
                cfg=sql.Literal(config), opts=sql.Literal(_HEADLINE_OPTIONS)
            )
        )
        statement = self._q(
            """
            WITH q AS (SELECT {tsquery} AS q)
            SELECT h.session_id, h.seq, h.role, h.rewound, h.compacted, h.rank, {headline}
            FROM q, (
                SELECT h.* FROM (
                    SELECT d.session_id, d.seq, d.role, d.text, d.rewound,
                           d.seq < s.compacted_before AS compacted,
                           ts_rank(d.words, q.q) AS rank
                    FROM q, {documents} d JOIN {s}.sessions s ON s.id = d.session_id
                    WHERE d.words @@ q.q AND {w}
                ) h
                WHERE {outer}
                ORDER BY h.rank DESC, h.session_id, h.seq
                LIMIT %(limit)s
            ) h
            ORDER BY h.rank DESC, h.session_id, h.seq
            """,
            tsquery=tsquery,
            documents=documents,
            headline=headline,
            w=_where(conditions),
            outer=_where(outer),
        )
        rows = read("searching", lambda c: c.execute(statement, params).fetchall())
        return [
            Hit(
                session_id=r[0],
                seq=r[1],
                role=r[2],
                rewound=r[3],
                compacted=r[4],
                rank=float(r[5]),
                snippet=r[6].replace("\n", " "),
            )
            for r in rows
        ]

    def totals(self, query: TotalsQuery) -> builtins.list[Totals]:
        params: dict[str, Any] = {}
        conditions = _conditions(query.where, params, "s")
        if query.since is not None:
            params["since"] = query.since.isoformat()
            conditions.append(sql.SQL("u.day >= %(since)s"))
        if query.until is not None:
            params["until"] = query.until.isoformat()
            conditions.append(sql.SQL("u.day < %(until)s"))
        key = {
            "tenant": "s.tenant",
            "user": 's."user"',
            "agent": "u.agent",
            "day": "u.day",
        }[query.group_by]
        statement = self._q(
            "SELECT " + key + ", count(DISTINCT u.session_id), sum(u.calls)::bigint, "
            "sum(u.input_tokens)::bigint, sum(u.output_tokens)::bigint, "
            "sum(u.cache_read_tokens)::bigint, sum(u.cache_write_tokens)::bigint, "
            "sum(u.cost)::float8 "
            "FROM {s}.usage u JOIN {s}.sessions s ON s.id = u.session_id "
            "WHERE {w} GROUP BY 1",
            w=_where(conditions),
        )
        rows = self._read("summing usage", lambda c: c.execute(statement, params).fetchall())
        return sort_totals(
            [
                Totals(
                    key=r[0],
                    sessions=r[1],
                    calls=r[2],
                    usage=UsageTotals(
                        input_tokens=r[3],
                        output_tokens=r[4],
                        cache_read_tokens=r[5],
                        cache_write_tokens=r[6],
                        cost=r[7],
                    ),
                )
                for r in rows
            ]
        )

    def set_fields(self, session_id: str, fields: Fields) -> None:
        params = {
            "id": session_id,
            "title": None if fields.title is None else _readable(fields.title),
            "tags": None if fields.tags is None else [_readable(t) for t in fields.tags],
            "user": None if fields.user is None else _readable(fields.user),
            "tenant": None if fields.tenant is None else _readable(fields.tenant),
        }
        statement = self._q(
            """
            UPDATE {s}.sessions SET
                title = coalesce(%(title)s::text, title),
                title_set = CASE WHEN %(title)s::text IS NULL THEN title_set
                                 ELSE %(title)s::text <> '' END,
                tags = coalesce(%(tags)s::text[], tags),
                "user" = coalesce(%(user)s::text, "user"),
                tenant = coalesce(%(tenant)s::text, tenant)
            WHERE id = %(id)s
            """
        )
        self._db.run(
            f"updating session {session_id!r}",
            lambda c: c.execute(statement, params),
            write="the session's fields may or may not have been updated",
        )

    def shredded(self, session_id: str) -> None:
        update = self._q(
            """
            UPDATE {s}.sessions SET status = 'shredded', title = '', title_set = false,
                "user" = '', tenant = '', tags = '{{}}', indexed = true
            WHERE id = %s
            """
        )
        statements = self._sql
        marks = self._marks

        def shred(conn: _Conn) -> None:
            with conn.transaction():
                conn.execute(update, (session_id,))
                conn.execute(statements.delete_documents, (session_id,))
                if marks:
                    conn.execute(statements.delete_mark, (session_id,))

        self._db.run(
            f"shredding session {session_id!r} in the catalog",
            shred,
            write="the session's catalog entries may or may not have been removed",
        )

    def rebuild(
        self, session_id: str, change: CatalogChange | None, fields: Fields, rewound: bool
    ) -> None:
        lock = self._q("SELECT last_seq FROM {s}.sessions WHERE id = %s FOR UPDATE")
        update = self._q(
            """
            UPDATE {s}.sessions SET
                title = %(title)s, title_set = %(title_set)s, tags = %(tags)s::text[],
                "user" = %(user)s, tenant = %(tenant)s, agents = %(agents)s::text[],
                status = %(status)s, messages = %(messages)s, turns = %(turns)s,
                input_tokens = %(input)s, output_tokens = %(output)s,
                cache_read_tokens = %(cache_read)s, cache_write_tokens = %(cache_write)s,
                cost = %(cost)s, compacted_before = %(compacted)s, indexed = true,
                catalog_seq = last_seq
            WHERE id = %(id)s
            """
        )
        row = apply_change(None, session_id, change or CatalogChange())
        set_row_fields(row, fields)
        values = {
            "id": session_id,
            "title": _readable(row.title),
            "title_set": row.title_set,
            "tags": [_readable(t) for t in row.tags],
            "user": _readable(row.user),
            "tenant": _readable(row.tenant),
            "agents": [_readable(a) for a in row.agents],
            "status": row.status,
            "messages": row.messages,
            "turns": row.turns,
            "input": row.usage.input_tokens,
            "output": row.usage.output_tokens,
            "cache_read": row.usage.cache_read_tokens,
            "cache_write": row.usage.cache_write_tokens,
            "cost": float(row.usage.cost),
            "compacted": row.compacted_before,
        }
        statements = self._sql
        marks = self._marks
        blind = self.blind()
        docs: dict[str, Any] | None = None
        if change is not None:
            docs = catalog_params(change, self.language, blind)
            docs["id"] = session_id
            if not rewound:
                docs["d_rewound"] = [False] * len(change.documents)
            docs["r_to"], docs["r_marker"] = [], []

        def write(conn: _Conn) -> None:
            with conn.transaction():
                found = conn.execute(lock, (session_id,)).fetchone()
                if found is not None and change is not None and found[0] != change.last_seq:
                    # Appended to since its log was read: the appends kept what they changed
                    # in the row; the next sync (or reindex) rebuilds it whole.
                    return
                conn.execute(statements.delete_usage, (session_id,))
                conn.execute(statements.delete_documents, (session_id,))
                if marks:  # its documents are rebuilt here, up to the latest seq
                    conn.execute(statements.delete_mark, (session_id,))
                if found is None:
                    return
                conn.execute(update, values)
                if docs is not None:
                    conn.execute(statements.catalog_rebuild, docs)

        self._db.run(
            f"indexing session {session_id!r}",
            write,
            write="the session's catalog entries may or may not have been rebuilt",
        )
