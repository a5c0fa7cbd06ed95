"""The PostgreSQL backend: many workers on many machines sharing one database.

Opened by ``open_store("postgresql://user@host:5432/db?schema=agentsession")``. The tables
and their migrations are in :mod:`agentsession.backends.postgres.schema`; ``docs/scaling.md``
covers running it at scale. How it keeps the storage contract:

* **Append is one statement** (so one round trip, one transaction in autocommit mode). The
  common case, one event from a session object that saw the log last, is the fast path
  (:meth:`PostgresLog.append_one`): an ``UPDATE`` of the session row to ``last_seq + 1``,
  conditional on the row still having the latest seq and life this object knows, and an
  ``INSERT`` of the event fed by its ``RETURNING`` (nothing is written when the condition
  fails, and the general path runs). The general path is an ``INSERT ... ON CONFLICT DO UPDATE
  ... RETURNING`` that bumps ``sessions.last_seq`` by the batch size (creating the row on the
  first append), and a data-modifying CTE inserts the events with seqs after the returned
  previous value (scalar parameters for one event, ``unnest`` of one array per column for a
  batch, each array built in PostgreSQL's binary form and sent as it is:
  :mod:`~agentsession.backends.postgres.binary`), conditional on the row still having the latest
  seq this object has seen and the life it read: the append pipeline checked the batch's event
  ids against everything up to it, and when another writer appended first, nothing is written
  and the pipeline reads those events, checks the ids again and tries again
  (``BaseSession._append_fresh``); when the session was deleted (and perhaps created again),
  nothing is written either and the session opens the log again. The session row's lock
  serialises the writers of one session; other sessions proceed in parallel. When an append
  conditional on a seq beyond what this session object has seen (``expect_seq``) lands, the
  events in between (other writers') are read by key range right after: they were committed
  before this append could lock the row and never change, so reading them after the commit gives
  exactly the rows the same transaction would have seen. The statements a session runs are
  prepared by psycopg after a few executions, and the append statement runs on a cursor each
  connection keeps.
* **Opening** reads the session's latest events (``TAIL_EVENTS``) by key range, with its
  life, in one round trip: O(tail) however long the log is. The full window, from
  ``sessions.compaction_seq`` (the latest compaction marker that rebuilds the history on its
  own) to the end, is read when ``messages()`` and the like first need it; never the history
  before it.
* **Payloads are stored byte-exact** (schema version 3): ``data`` is a ``bytea`` holding the
  exact bytes of ``event.data``, so ``event.raw`` reads back as it was appended (key order,
  whitespace, number spelling, ``\\u0000`` and lone surrogate escapes), and reads hand the
  stored bytes over in binary with nothing to parse or convert; ``meta`` is the meta's
  agentsession JSON as ``bytea``. Only an event whose type, agent or user TEXT cannot hold
  (NUL, lone UTF-16 surrogates) also sets ``raw_event`` (those fields as JSON), with a readable
  copy (U+FFFD in their place) in the TEXT columns. Session ids, meta keys and values that TEXT
  cannot hold are refused with :class:`~agentsession.errors.UsageError` (a documented
  divergence from the file backends, which accept any non-blank id).
* **Durability**: an acknowledged append is a committed transaction, which survives our
  process dying whatever the setting. ``flush`` leaves ``synchronous_commit`` at the server's
  default (normally ``on``: the commit waits for the WAL to reach disk); ``fsync`` forces
  ``synchronous_commit = on`` on the store's connections even where the server or role default
  is ``off`` or ``local``. Whether a commit survives a power loss is finally the server's
  business (its ``fsync``, ``full_page_writes`` and disk cache settings, replication); opening
  an ``fsync`` store on a server with ``fsync = off`` logs a warning.
* **Errors** are translated in one place (:meth:`Connections.run
  <agentsession.backends.postgres.connections.Connections.run>`): a server that cannot be
  reached is :class:`~agentsession.errors.StoreUnavailable` naming host and database, never
  the password (psycopg_pool's own per-attempt "error connecting" warnings about the store's
  pools are logged at DEBUG instead, by the logger ``agentsession.backends.postgres``). A read
  whose connection drops is retried once on a fresh connection. A write whose connection drops
  raises :class:`~agentsession.errors.OutcomeUnknown` there; the append pipeline
  (:meth:`BaseSession._append_checked <agentsession.session.BaseSession._append_checked>`)
  then reads the log for the batch's event ids and appends it again only if it is not there,
  within ``reconnect_timeout``.
* **Connections** (:mod:`~agentsession.backends.postgres.connections`): opening a store
  connects once (the connection that checks the schema becomes the pool's first), the lock
  pool opens with the first turn lock, pooled connections are checked when handed out (a poll
  of the socket, no round trip; a pool whose connection the server closed is drained), and a
  forked child uses pools of its own.
* **The async API** (:mod:`agentsession.aio`) drives the session's plans on psycopg's
  ``AsyncConnectionPool`` (:mod:`agentsession.backends.postgres.aio`), with the statements,
  parameters, life check and row decoding of the session's
  :class:`~agentsession.backends.postgres.storage.PostgresLog`, which the sync storage
  methods use too (``open_request``/``opened``, ``refresh_request``/``take_refresh``,
  ``append_request``/``take_append``, ``catch_up_request``, ``decode``).
* **The turn lock** is a session-level advisory lock on a 64-bit key derived from the schema
  and the session id, held on a connection of a separate lock pool that is not handed back
  until the lock is released; a holder that dies (SIGKILL, lost network) loses its connection
  and with it the lock. Waiting is the server's job: ``pg_advisory_lock`` under a
  ``lock_timeout`` set for that one statement, so a waiter gets the lock as soon as it is
  released, with no polling (timeout 0 is one ``pg_try_advisory_lock``). See
  :class:`PostgresLocker` (:mod:`~agentsession.backends.postgres.locks`).

* **Read replicas** (``read_url``, ``read_urls``, ``replica_wait``): reads of sessions, lists
  and searches go to streaming replicas, writes to the primary, and a session object reads
  its own appends by comparing WAL positions
  (:mod:`~agentsession.backends.postgres.replicas`).
* **Partitioned events** (``partitions``, :func:`partition_events`): the events table as N
  hash partitions by session id; the statements are the same
  (:func:`~agentsession.backends.postgres.schema.partition_events_on`).

The package's modules, lowest first: ``target`` (the URL, password scrubbing), ``schema``
(tables, migrations, statements), ``connections``, ``replicas``, ``storage`` (the session's
log), ``locks``, this module (the store: catalog and meta), and ``aio`` (the async API's
native path).
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as _dt
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

import psycopg
from psycopg.conninfo import conninfo_to_dict

if TYPE_CHECKING:
    import concurrent.futures

    from ...aio._backend import AsyncBackend
    from ...session import SessionHost

from ...catalog import CatalogDefaults, StoreParts
from ...contract import Capabilities, SessionInfo
from ...errors import StorageError, StoreUnavailable, UsageError
from ...session import BaseSession
from ...store import BaseStore
from .connections import Connections, _Conn, log
from .index import PostgresIndex
from .locks import PostgresLocker, turn_lock_key
from .replicas import DEFAULT_REPLICA_WAIT, ReplicaSet
from .schema import (
    CATALOG_VERSION,
    LATEST_VERSION,
    MARKS_VERSION,
    READABLE_AS_IT_IS,
    Statements,
    apply_migrations,
    check_partitions,
    event_partitions,
    notify_channel,
    partition_events_on,
    schema_version,
)
from .storage import PostgresLog, PostgresSession, _fits_text, check_text
from .target import DEFAULT_SCHEMA, _Target
from .watch import PostgresWatcher

__all__ = [
    "DEFAULT_SCHEMA",
    "PostgresCatalog",
    "PostgresLocker",
    "PostgresLog",
    "PostgresMeta",
    "PostgresSession",
    "PostgresStore",
    "migrate",
    "open_postgres",
    "partition_events",
    "turn_lock_key",
]


# -- the schema, when a store opens ---------------------------------------------------------


@contextlib.contextmanager
def _closed_on_failure(db: Connections, conn: _Conn, doing: str) -> Iterator[None]:
    """Close ``conn`` when the block fails, and translate a driver error saying what was
    being done."""
    try:
        yield
    except psycopg.Error as exc:
        conn.close()
        raise db.failure(exc, doing) from None
    except BaseException:
        conn.close()
        raise


def _no_tables(target: _Target) -> str:
    """Why a schema without tables is no store."""
    return f"no store at {target.where}: schema {target.schema!r} holds no agentsession tables"


def _prepare_schema(
    db: Connections,
    target: _Target,
    durability: str,
    auto_migrate: bool,
    create: bool,
    partitions: int | None = None,
) -> _Conn:
    """Connect directly (for a precise error when the server is unreachable), check the
    schema version (one query when it is current) and migrate when allowed; returns the
    connection, for the pool. ``partitions``: the events table's layout a schema created now
    gets, and that an existing one must have."""
    conn = db.connect(db.pool_kwargs())
    with _closed_on_failure(db, conn, f"preparing schema {target.schema!r}"):
        if durability == "fsync":
            row = conn.execute("SHOW fsync").fetchone()
            if row is not None and row[0] != "on":
                log.warning(
                    "%s runs with fsync = %s: durability='fsync' cannot survive a power loss there",
                    target.where,
                    row[0],
                )
        version = _current_version(conn, target.schema)
        if not create and version == 0:
            raise StoreUnavailable(_no_tables(target))
        if version != LATEST_VERSION:
            if auto_migrate or version > LATEST_VERSION:
                _migrate_on(conn, target, partitions or 1)
            else:
                raise StorageError(
                    f"schema {target.schema!r} in {target.where} is not at "
                    f"version {LATEST_VERSION} (it is at version {version}): run "
                    "agentsession.backends.postgres.migrate() first, or open the store with "
                    "auto_migrate=True"
                )
        if partitions is not None:
            found = event_partitions(conn, target.schema)
            if found != partitions:
                layout = "a plain table" if found == 1 else f"{found} partitions"
                raise UsageError(
                    f"partitions={partitions}: the events table of schema {target.schema!r} "
                    f"in {target.where} has {layout}; lay it out anew with "
                    f"`agentsession migrate --partitions {partitions}` (or "
                    "agentsession.backends.postgres.partition_events)"
                )
    return conn


def _check_schema_for_reading(db: Connections, target: _Target) -> tuple[_Conn, Statements, int]:
    """``read_only``: connect and check the schema version, creating and migrating nothing;
    returns the connection and the statements for the version found. The current version is
    read as usual, version 3 as it is (with no event ids); a missing store or any other
    version raises :class:`StoreUnavailable`."""
    conn = db.connect(db.pool_kwargs())
    with _closed_on_failure(db, conn, f"reading schema {target.schema!r}"):
        version = _current_version(conn, target.schema)
    problem = None
    if version == 0:
        problem = _no_tables(target)
    elif version > LATEST_VERSION:
        problem = (
            f"schema {target.schema!r} in {target.where} has schema version "
            f"{version}, newer than this agentsession supports ({LATEST_VERSION}): upgrade "
            "agentsession"
        )
    elif version < READABLE_AS_IT_IS:
        problem = (
            f"schema {target.schema!r} in {target.where}: schema version "
            f"{version} is older than {LATEST_VERSION}; run `agentsession migrate`"
        )
    if problem is not None:
        conn.close()
        raise StoreUnavailable(problem)
    event_ids = version >= 4  # events.eid came with version 4
    return conn, Statements.for_schema(target.schema, event_ids=event_ids), version


# -- the store's parts -------------------------------------------------------------------------


class PostgresCatalog(CatalogDefaults):
    """The sessions of one PostgreSQL schema (a :class:`~agentsession.catalog.Catalog`): the
    ``sessions`` table, one query per question. From
    :class:`~agentsession.catalog.CatalogDefaults`: ``resolve``, ``cache_key``,
    ``storage_bytes``, and nothing to do for ``set_last_activity`` (``sessions.updated_at``
    follows the appends) and ``clean_crash_leftovers`` (a transaction leaves nothing
    behind)."""

    def __init__(
        self,
        target: _Target,
        db: Connections,
        sql: Statements,
        locker: PostgresLocker,
        reconnect_timeout: float,
        index: PostgresIndex | None = None,
        reads: ReplicaSet | None = None,
    ) -> None:
        self._target = target
        self._index = index
        self._db = db
        self._reads = reads or ReplicaSet(db, (), 0.0)
        """Where lists and ``exists`` read: a read replica when the store has one."""
        self._sql = sql
        self._locker = locker
        self._reconnect_timeout = reconnect_timeout
        """Seconds an append rides out a lost connection (the store's option)."""

    @property
    def location(self) -> str:
        """``postgresql://user@host:port/db?schema=...``, without the password."""
        return self._target.location

    @property
    def url(self) -> str:
        """The URL that reopens this store, with its schema (and password, if it had one)."""
        return self._target.url

    def open_session(self, store: SessionHost, session_id: str) -> BaseSession:
        log = PostgresLog(
            self._db,
            self._sql,
            check_text("session id", session_id),
            self._reconnect_timeout,
            self._index,
            self._reads,
        )
        return BaseSession(cast("BaseStore", store), session_id, log)

    def exists(self, session_id: str) -> bool:
        if not _fits_text(session_id):
            return False
        statement = self._sql.exists
        action = f"checking session {session_id!r}"
        row = self._reads.run(
            action, lambda conn: conn.execute(statement, (session_id,)).fetchone()
        )
        if row is None and self._reads.enabled:
            # A replica may not have replayed the session's first append yet (this store's
            # own, say): a session is never missing for a replica's lag alone.
            row = self._db.run(
                action, lambda conn: conn.execute(statement, (session_id,)).fetchone()
            )
        return row is not None

    def list_all(self) -> builtins.list[SessionInfo]:
        """Every session, unordered (:func:`~agentsession.catalog.page_of` of it is what
        :meth:`list_page` answers in its query)."""
        statement = self._sql.list_all
        rows = self._reads.run("listing sessions", lambda conn: conn.execute(statement).fetchall())
        return [SessionInfo(id=r[0], updated_at=r[1], last_seq=r[2], created_at=r[3]) for r in rows]

    def list_page(
        self, prefix: str | None, limit: int | None, offset: int
    ) -> builtins.list[SessionInfo]:
        """One query on the ``updated_at`` index, filtered, ordered and sliced there."""
        if prefix is not None and not _fits_text(prefix):
            return []
        statement = self._sql.list
        params = {"prefix": prefix, "limit": limit, "offset": offset}
        rows = self._reads.run(
            "listing sessions", lambda conn: conn.execute(statement, params).fetchall()
        )
        return [SessionInfo(id=r[0], updated_at=r[1], last_seq=r[2], created_at=r[3]) for r in rows]

    def expired_ids(self, cutoff: _dt.datetime) -> builtins.list[str]:
        """One query: the sessions whose ``updated_at`` is before ``cutoff``."""
        statement = self._sql.expired
        rows = self._reads.run(
            "listing expired sessions",
            lambda conn: conn.execute(statement, (cutoff,)).fetchall(),
        )
        return [r[0] for r in rows]

    def delete(self, session_id: str, meta_kinds: Sequence[str]) -> bool:
        if not _fits_text(session_id):
            return False
        statements = self._sql

        def delete(conn: _Conn) -> bool:
            with conn.transaction():
                # Locking the session row first waits out any append in flight; the events
                # are deleted by a later statement, whose snapshot includes that append.
                row = conn.execute(statements.delete_session, (session_id,)).fetchone()
                conn.execute(statements.delete_events, (session_id,))
                conn.execute(statements.delete_usage, (session_id,))
                conn.execute(statements.delete_documents, (session_id,))
                conn.execute(statements.delete_mark, (session_id,))
                conn.execute(statements.delete_meta_of, (list(meta_kinds), session_id))
            return row is not None

        return self._db.run(
            f"deleting session {session_id!r}",
            delete,
            write="the session may or may not have been deleted",
        )

    def last_append(self, session_id: str) -> _dt.datetime | None:
        if not _fits_text(session_id):
            return None
        statement = self._sql.last_append
        row = self._db.run(
            f"reading session {session_id!r}",
            lambda conn: conn.execute(statement, (session_id,)).fetchone(),
        )
        return row[0] if row is not None else None

    def close(self) -> None:
        self._locker.drop_all()
        self._db.close()
        self._reads.close()

    def after_fork(self) -> None:
        """In a forked child: never touch the parent's connections or locks again, and use
        pools of this process's own (opened when first needed)."""
        self._db.after_fork()
        self._reads.after_fork()
        self._locker.forget_after_fork()


class PostgresMeta:
    """The ``meta`` table (a :class:`~agentsession.catalog.MetaStorage`): compare-and-set is
    one conditional statement."""

    def __init__(self, db: Connections, sql: Statements, clock: Callable[[], _dt.datetime]) -> None:
        self._db = db
        self._sql = sql
        self._clock = clock

    def get(self, kind: str, key: str) -> str | None:
        check_text(f"{kind} key", key)
        statement = self._sql.meta_get
        row = self._db.run(
            f"reading {kind} {key!r}",
            lambda conn: conn.execute(statement, (kind, key)).fetchone(),
        )
        return row[0] if row is not None else None

    def list(self, kind: str | None = None) -> builtins.list[tuple[str, str, str]]:
        params: tuple[Any, ...] = ()
        if kind is None:
            statement = self._sql.meta_list
        else:
            check_text("meta kind", kind)
            statement, params = self._sql.meta_list_kind, (kind,)
        rows = self._db.run(
            "listing the meta entries",
            lambda conn: conn.execute(statement, params).fetchall(),
        )
        return sorted((str(k), str(key), str(v)) for k, key, v in rows)

    def set(self, kind: str, key: str, value: str | None) -> None:
        check_text(f"{kind} key", key)
        params: tuple[Any, ...]
        if value is None:
            statement, params = self._sql.meta_delete, (kind, key)
        else:
            check_text(f"{kind} value", value)
            statement, params = self._sql.meta_set, (kind, key, value, self._clock())
        self._db.run(
            f"writing {kind} {key!r}",
            lambda conn: conn.execute(statement, params),
            write=f"the {kind} value may or may not have been written",
        )

    def add(self, kind: str, key: str, value: str) -> str:
        check_text(f"{kind} key", key)
        check_text(f"{kind} value", value)
        statement = self._sql.meta_add
        params = {"kind": kind, "key": key, "value": value, "now": self._clock()}
        row = self._db.run(
            f"writing {kind} {key!r}",
            lambda conn: conn.execute(statement, params).fetchone(),
            write=f"the {kind} value may or may not have been written",
        )
        if row is None:  # deleted between the insert and the read: try again
            return self.add(kind, key, value)
        return str(row[0])

    def cas(self, kind: str, key: str, expected: str | None, new: str | None) -> bool:
        check_text(f"{kind} key", key)
        if new == expected:  # nothing to write (both None: no entry): one read answers
            return self.get(kind, key) == expected
        params: tuple[Any, ...]
        if new is None:
            assert expected is not None
            check_text(f"{kind} value", expected)
            statement, params = self._sql.meta_cas_delete, (kind, key, expected)
        elif expected is None:
            check_text(f"{kind} value", new)
            statement, params = self._sql.meta_cas_insert, (kind, key, new, self._clock())
        else:
            check_text(f"{kind} value", expected)
            check_text(f"{kind} value", new)
            statement = self._sql.meta_cas_update
            params = (new, self._clock(), kind, key, expected)
        rowcount = self._db.run(
            f"writing {kind} {key!r}",
            lambda conn: conn.execute(statement, params).rowcount,
            write=f"the {kind} value may or may not have been written",
        )
        return rowcount == 1


# -- the store --------------------------------------------------------------------------------


class PostgresStore(BaseStore):
    """Sessions in a PostgreSQL schema. Opened by ``open_store("postgresql://...")``.

    Options besides the common ones (``durability``, ``ttl``, ...):

    * ``schema``: the schema holding the tables (default ``agentsession``; also ``?schema=``
      in the URL). Created, with the tables, on open.
    * ``pool_min_size`` / ``pool_max_size`` (default 1 / 10): connections kept open / at most
      open for reads and appends. An append or read holds one only for its statement(s).
      Opening the store waits until ``pool_min_size`` are open; the first is the connection
      that checked the schema.
    * ``lock_pool_max_size`` (default 64): connections at most held for turn locks, one per
      held lock; opened on demand, closed after 10 idle minutes.
    * ``pool_timeout`` (default 30 s): how long to wait for a free connection.
    * ``connect_timeout`` (default 10 s): how long to wait for the server when connecting
      (unless the URL sets it).
    * ``auto_migrate`` (default True): apply missing migrations on open; when False, a schema
      that is not current raises :class:`~agentsession.errors.StorageError` (run
      :func:`migrate` first).
    * ``read_only`` (default False): open to read, running no DDL at all: nothing is created
      or migrated (a missing schema is "no store at ..."). A version 3 schema is read as it
      is (its events have no ids); any other older version raises
      :class:`~agentsession.errors.StoreUnavailable` saying to run ``agentsession migrate``.
      Writes are not meant for such a store (on an old schema they fail).
    * ``prepare_threshold`` (default 5): executions after which psycopg prepares a statement
      on the server; None disables prepared statements (PgBouncer in transaction mode before
      1.21). Turn locks need a session-level connection: never transaction pooling.
    * ``search_language`` (default ``"simple"``): the text search configuration search
      documents are parsed with (``"english"``: stemmed, stop words left out); ``simple``
      keeps the exact words of :func:`agentsession.listing.words`. An encrypted store's
      blind tokens are always kept exactly. See
      :mod:`~agentsession.backends.postgres.index`.
    * ``read_url`` / ``read_urls`` (default none): streaming replicas of the server (the same
      database and schema) that opening sessions, their reads, ``messages()``, lists,
      searches and totals read from, round robin; every write, turn lock, ``meta`` read and
      live feed goes to the primary (``url``). A session object reads its own appends: its
      reads go to a replica only once that replica has replayed past its last append. See
      :mod:`~agentsession.backends.postgres.replicas`. The URL may name them too, as
      ``?read_url=<percent-encoded URL>`` once per replica (a URL and options that name
      different replicas raise :class:`~agentsession.errors.UsageError`).
    * ``replica_wait`` (default 0.5 s; ``?replica_wait=`` in the URL): how long a read of a
      session object that appended waits for a replica to replay the append before it reads
      from the primary.
    * ``partitions`` (default None): the events table as that many hash partitions by session
      id (1: one plain table). A schema created on open gets that layout; an existing one
      must have it (:class:`~agentsession.errors.UsageError` otherwise: lay it out anew with
      :func:`partition_events` or ``agentsession migrate --partitions N``). None: any layout.
    * ``reconnect_timeout`` (default 10 s): how long an append rides out a lost connection or
      a server that cannot be reached (a restart, a failover, ``pg_terminate_backend``): it
      tries again with a growing pause, first reading the log to find out whether the lost
      try was stored (by its event ids), so it is stored once. After that long it raises
      :class:`~agentsession.errors.OutcomeUnknown` (or
      :class:`~agentsession.errors.StoreUnavailable`); 0 raises at once.

    Its parts: a :class:`PostgresCatalog`, a :class:`PostgresMeta` and a
    :class:`~agentsession.backends.postgres.locks.PostgresLocker` (advisory locks).

    ``url`` reopens the store as it was opened: with its schema, replicas (``read_url=``) and
    ``replica_wait=`` as URL parameters, so a worker process given ``store.url`` reads from the
    same replicas. It includes the URL's (and the replicas') password when they had one (it
    must reopen the store); prefer a ``.pgpass`` file or ``PGPASSWORD``. Messages and
    ``location`` never include it.
    """

    capabilities = Capabilities(native_async=True)
    _pg_index: PostgresIndex

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        pool_min_size: int = 1,
        pool_max_size: int = 10,
        lock_pool_max_size: int = 64,
        pool_timeout: float = 30.0,
        connect_timeout: int = 10,
        auto_migrate: bool = True,
        prepare_threshold: int | None = 5,
        reconnect_timeout: float = 10.0,
        create: bool = True,
        read_only: bool = False,
        search_language: str = "simple",
        read_url: str | None = None,
        read_urls: Sequence[str] | None = None,
        replica_wait: float | None = None,
        partitions: int | None = None,
        **options: Any,
    ) -> None:
        if not isinstance(search_language, str) or not search_language:
            raise UsageError(
                f"search_language must be a text search configuration name, not {search_language!r}"
            )

        def parts() -> StoreParts:
            if not isinstance(reconnect_timeout, (int, float)) or not reconnect_timeout >= 0:
                raise UsageError(
                    f"reconnect_timeout must be >= 0 seconds, not {reconnect_timeout!r}"
                )
            if pool_min_size < 0 or pool_max_size < 1 or pool_min_size > pool_max_size:
                raise UsageError(
                    f"pool sizes must satisfy 0 <= pool_min_size <= pool_max_size and "
                    f"pool_max_size >= 1 (got {pool_min_size} and {pool_max_size})"
                )
            if lock_pool_max_size < 1:
                raise UsageError(f"lock_pool_max_size must be >= 1, not {lock_pool_max_size}")
            if pool_timeout <= 0:
                raise UsageError(f"pool_timeout must be positive, not {pool_timeout}")
            if partitions is not None:
                _checked_partitions(partitions)
            target = self._target = _Target.parse(
                url, schema, _read_urls(read_url, read_urls), replica_wait
            )
            replica_targets = [_replica_target(u, target.schema) for u in target.read_urls]

            def connections(where: _Target, replica: bool = False) -> Connections:
                return Connections(
                    where,
                    durability=self.durability,
                    pool_min_size=pool_min_size,
                    pool_max_size=pool_max_size,
                    lock_pool_max_size=lock_pool_max_size,
                    pool_timeout=pool_timeout,
                    connect_timeout=connect_timeout,
                    prepare_threshold=prepare_threshold,
                    replica=replica,
                )

            db = self._db = connections(target)
            reads = ReplicaSet(
                db,
                [connections(t, replica=True) for t in replica_targets],
                DEFAULT_REPLICA_WAIT if target.replica_wait is None else target.replica_wait,
            )
            locker = PostgresLocker(db, target.schema)
            # One connection, made directly (for the precise error when the server cannot
            # be reached), checks the schema and then becomes the pool's first connection.
            try:
                if read_only:
                    conn, sql, version = _check_schema_for_reading(db, target)
                else:
                    version = LATEST_VERSION
                    conn = _prepare_schema(
                        db, target, self.durability, auto_migrate, create, partitions
                    )
                    # Appends mark their sessions for search where a store keeps documents.
                    marks = bool(options.get("catalog", True) and options.get("searchable", True))
                    sql = Statements.for_schema(target.schema, marks=marks)
            except BaseException:
                db.pool.close()  # not open yet, unless something opened it early
                raise
            db.open(conn)
            language = None if search_language == "simple" else search_language
            if language is not None:
                _check_language(db, language)
            for replica in reads.replicas:
                replica.db.open_in_background()
            index = self._pg_index = PostgresIndex(
                db,
                target.schema,
                sql,
                language=language,
                read_only=read_only,
                reads=reads,
                marks=version >= MARKS_VERSION,
            )
            # Versions 3 and 4 (no catalog) are read as they are, version 5 with its catalog
            # (a store opened to read catches nothing up: catalog_seq is not read).
            catalog_index = index if version >= CATALOG_VERSION else None
            return StoreParts(
                PostgresCatalog(
                    target, db, sql, locker, float(reconnect_timeout), catalog_index, reads
                ),
                PostgresMeta(db, sql, self.clock),
                locker=lambda: locker,
                async_backend=lambda executor: _async_backend(self, executor, db, sql, reads),
                reconnect_timeout=float(reconnect_timeout),
                watcher=lambda: PostgresWatcher(
                    db, notify_channel(target.schema), reads.heard if reads.enabled else None
                ),
                index=catalog_index,
            )

        super().__init__(parts, **options)
        self._pg_index.host = self
        # Changes at turn boundaries (schema version 6: sessions.catalog_seq), and documents
        # indexed apart by searches (version 7: search_dirty); see
        # agentsession.indexing.Indexing.deferred and documents_apart.
        self._indexing.deferred = not read_only
        self._indexing.documents_apart = not read_only

    def index_documents(self) -> int:
        """Index the search documents of the sessions whose appends marked them (appends
        write none); returns how many sessions' logs were read. Every ``search`` runs it first;
        a writer may run it after appending, so that the next search, in any process, finds
        the documents indexed (one opened read-only reads those not indexed from their logs
        at each search). Nothing on a store opened read-only or with ``catalog=False`` or
        ``searchable=False``. See
        :meth:`PostgresIndex.index_documents
        <agentsession.backends.postgres.index.PostgresIndex.index_documents>`."""
        if not (self._indexing.catalog and self._indexing.searchable):
            return 0
        return self._pg_index.index_documents(self)

    # -- the async API ----------------------------------------------------------------------

    # -- identity ---------------------------------------------------------------------------

    @property
    def schema(self) -> str:
        """The schema holding this store's tables."""
        return self._target.schema


def _read_urls(read_url: str | None, read_urls: Sequence[str] | None) -> builtins.list[str]:
    """The replicas' URLs of the options ``read_url`` and ``read_urls``, in order."""
    urls: builtins.list[str] = []
    if read_url is not None:
        urls.append(read_url)
    if read_urls is not None:
        if isinstance(read_urls, str):
            raise UsageError("read_urls must be a list of URLs, not one string (use read_url)")
        urls.extend(read_urls)
    return urls


def _replica_target(url: str, schema: str) -> _Target:
    """A read replica's target: the primary's schema; a replica has no replicas of its own."""
    target = _Target.parse(url, schema)
    if target.read_urls or target.replica_wait is not None:
        raise UsageError("a read replica's URL cannot name read replicas or replica_wait itself")
    return target


def _async_backend(
    store: PostgresStore,
    executor: concurrent.futures.Executor,
    db: Connections,
    sql: Statements,
    reads: ReplicaSet,
) -> AsyncBackend:
    """The async API's backend for a store: appends, reads, ``latest_seq`` and the catch-up of
    ``messages()`` run natively on psycopg's ``AsyncConnectionPool``, the rest in worker
    threads (see :mod:`agentsession.backends.postgres.aio`)."""
    from .aio import PostgresAsyncBackend

    return PostgresAsyncBackend(store, executor, db, sql, reads)


def _check_language(db: Connections, language: str) -> None:
    """Raise :class:`~agentsession.errors.UsageError` unless the server knows the text search
    configuration ``language``."""
    try:
        db.run(
            "checking search_language",
            lambda conn: conn.execute("SELECT %s::text::regconfig", (language,)).fetchone(),
        )
        row: tuple[bool] | None = (True,)
    except StorageError:
        row = None
    if row is None or not row[0]:
        db.close()
        raise UsageError(
            f"search_language={language!r}: the server has no such text search configuration "
            "(see SELECT cfgname FROM pg_ts_config)"
        )


def _current_version(conn: psycopg.Connection[Any], schema: str) -> int:
    """The schema's version in one query (0: no agentsession tables there)."""
    try:
        return schema_version(conn, schema, assume_table=True)
    except psycopg.errors.UndefinedTable:
        return 0


def _migrate_on(
    conn: psycopg.Connection[Any], target: _Target, partitions: int = 1
) -> builtins.list[int]:
    try:
        applied = apply_migrations(conn, target.schema, partitions=partitions)
    except RuntimeError as exc:
        raise StorageError(f"{target.where}: {exc}") from None
    if applied:
        log.info(
            "%s: applied migrations %s to schema %r",
            target.where,
            applied,
            target.schema,
        )
    return applied


def _connect_for_ddl(target: _Target, connect_timeout: int) -> psycopg.Connection[Any]:
    """An autocommit connection of its own for DDL; :class:`StoreUnavailable` when the
    server cannot be reached."""
    params = conninfo_to_dict(target.conninfo)
    kwargs: dict[str, Any] = {"autocommit": True}
    if "connect_timeout" not in params:
        kwargs["connect_timeout"] = connect_timeout
    try:
        return psycopg.connect(target.conninfo, **kwargs)
    except psycopg.Error as exc:
        reason = target.scrub(str(exc).strip()).replace("\n", " ").replace("\t", "")
        raise StoreUnavailable(f"cannot reach {target.where}: {reason}") from None


def migrate(
    url: str,
    schema: str | None = None,
    *,
    connect_timeout: int = 10,
    partitions: int | None = None,
) -> list[int]:
    """Create or upgrade a store's tables; returns the migration versions applied now (empty
    when the schema was current). Safe to run from several processes at once.

    ``schema`` defaults to the URL's ``?schema=`` or ``agentsession``. ``partitions``: lay the
    events table out as that many hash partitions by session id afterwards (1: one plain
    table), copying the events when it has another layout (:func:`partition_events`). Raises
    :class:`~agentsession.errors.StoreUnavailable` when the server cannot be reached.
    """
    target = _Target.parse(url, schema)
    if partitions is not None:
        _checked_partitions(partitions)
    conn = _connect_for_ddl(target, connect_timeout)
    try:
        applied = _migrate_on(conn, target, partitions or 1)
        if partitions is not None and not (applied and applied[0] == 1):
            _partition_on(conn, target, partitions)
        return applied
    except psycopg.Error as exc:
        message = target.scrub(str(exc).strip().splitlines()[0] if str(exc) else "")
        raise StorageError(
            f"migrating schema {target.schema!r} in {target.where} failed: {message}"
        ) from None
    finally:
        conn.close()


def partition_events(
    url: str, partitions: int, *, schema: str | None = None, connect_timeout: int = 10
) -> int:
    """Lay a store's events table out as ``partitions`` hash partitions by session id (1: one
    plain table, undoing it); returns how many events were copied (0: it had that layout
    already). The store must exist and be current (run :func:`migrate` first).

    One transaction: appends and reads of the store wait while it copies the events (about
    as long as ``INSERT ... SELECT`` of the whole table takes: see ``docs/scaling.md``), and
    a failure changes nothing. Every event keeps its row, byte for byte. Other indexes on the
    events table are made again on the new one. Safe to run from several processes at once
    (the second finds the work done).
    """
    _checked_partitions(partitions)
    target = _Target.parse(url, schema)
    conn = _connect_for_ddl(target, connect_timeout)
    try:
        version = _current_version(conn, target.schema)
        if version == 0:
            raise StoreUnavailable(_no_tables(target))
        if version != LATEST_VERSION:
            raise StorageError(
                f"schema {target.schema!r} in {target.where} is at version {version}, not "
                f"{LATEST_VERSION}: run agentsession.backends.postgres.migrate() first"
            )
        return _partition_on(conn, target, partitions)
    except psycopg.Error as exc:
        message = target.scrub(str(exc).strip().splitlines()[0] if str(exc) else "")
        raise StorageError(
            f"partitioning the events of schema {target.schema!r} in {target.where} failed: "
            f"{message}"
        ) from None
    finally:
        conn.close()


def _checked_partitions(partitions: object) -> int:
    try:
        return check_partitions(partitions)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _partition_on(conn: psycopg.Connection[Any], target: _Target, partitions: int) -> int:
    copied = partition_events_on(conn, target.schema, partitions)
    if copied or event_partitions(conn, target.schema) == partitions:
        log.info(
            "%s: events of schema %r laid out as %s (%d events copied)",
            target.where,
            target.schema,
            f"{partitions} partitions" if partitions > 1 else "one table",
            copied,
        )
    return copied


def open_postgres(url: str, **options: Any) -> PostgresStore:
    """``open_store("postgresql://user@host/db?schema=...")``."""
    return PostgresStore(url, **options)
