"""The JSONL directory store's catalog and search index: a SQLite database beside the logs
(``.meta/catalog.sqlite``, owner-only), holding the tables of
:class:`~agentsession.backends.sqlite_index.SqliteIndex` and two of its own, and kept up to
date from the logs through the change journal (:mod:`.journal`).

Appends never touch the database (a SQLite transaction per append would cost several times
the append): each names its session in the journal before writing its lines. The database
records how far it has read the journal (an offset, and the journal's first line, which a
reader that empties the journal rewrites) and, per session, the last seq it indexed.
:meth:`SidecarIndex.sync`, which the store calls before each ``list``, ``search`` and
``totals``, reads the journal past that offset and, for each session named, the events after
its indexed seq (through a session of the store: plaintext on an encrypted store), and applies
what they change, all in one transaction; once it has consumed the whole journal it empties it
(when no writer holds it). So:

* every event an append acknowledged is counted by the next ``list``, whatever process made
  it, and even when its writer died right after (its session is named in the journal before
  its line is written; the sync waits for a writer holding the session file's lock);
* a crash of a sync loses nothing: its transaction is rolled back and the journal kept;
* a missing or unreadable database is made again from the logs (``store.reindex()`` of every
  session, once); a missing or replaced journal makes the next sync compare every log's last
  seq with the one indexed;
* a log changed by another program (agentkit's Go writers write no journal) is caught up by
  ``agentsession reindex`` (:meth:`agentsession.Store.reindex`).

Deleting, shredding and ``session.update`` write the database directly.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as _dt
import errno
import logging
import os
import secrets
import sqlite3
import threading
from collections.abc import Iterator
from typing import Any, Final, Protocol

from ..._files import O_CLOEXEC, O_NOFOLLOW, O_NONBLOCK, private_dirs
from ...contract import SessionInfo
from ...errors import (
    CorruptLogError,
    EncryptionError,
    SessionShredded,
    StorageError,
    UsageError,
)
from ...indexing import Fields, IndexHost, catalogued, change_for, record_fields
from ...listing import CatalogChange, CatalogRow, Hit, ListQuery, SearchQuery, Totals, TotalsQuery
from ...session import BaseSession
from ..sqlite_index import SqliteIndex, create_index_tables, surrogate_text
from .journal import read_entries

try:
    import fcntl
except ImportError as exc:  # not POSIX (Windows): no flock
    from ...locks import file_locks_unavailable

    raise file_locks_unavailable(
        "the JSONL store's catalog index",
        "open a SQLite ('sqlite:///file.db') or PostgreSQL store instead",
    ) from exc


class SessionFiles(Protocol):
    """What the index needs of the store's catalog
    (:class:`~agentsession.backends.jsonl.directory.JsonlCatalog`)."""

    def path_for(self, session_id: str) -> str:
        """The session's log file."""
        ...

    def list_all(self) -> builtins.list[SessionInfo]:
        """Every session with a log (its last seq from the head of its last line)."""
        ...

    def peek(self, path: str) -> tuple[int, _dt.datetime | None]:
        """A log's last seq and first time, without decoding it."""
        ...

    def open_uncached(self, session_id: str) -> BaseSession:
        """A session over the log, outside the store's cache."""
        ...


log = logging.getLogger("agentsession.backends.jsonl")

__all__ = ["SIDECAR_NAME", "SIDECAR_VERSION", "SessionFiles", "SidecarIndex"]

SIDECAR_NAME: Final = "catalog.sqlite"
"""The database's file name in the store's ``.meta`` directory."""
SIDECAR_VERSION: Final = 1
"""The database's schema version (``PRAGMA user_version``)."""

_SIDECAR_SCHEMA: Final = (
    # How far the journal is read: its offset, and the journal's first line then (a new one
    # means it was emptied since: read it from its start).
    """
    CREATE TABLE IF NOT EXISTS sidecar_journal (
        one     INTEGER PRIMARY KEY CHECK (one = 1),
        inode   TEXT    NOT NULL,
        head    BLOB    NOT NULL,
        offset  INTEGER NOT NULL
    )
    """,
    # The last seq indexed of each session with a row.
    """
    CREATE TABLE IF NOT EXISTS sidecar_seen (
        session_id BLOB    PRIMARY KEY,  -- UTF-8 (a lone surrogate kept: surrogatepass)
        last_seq   INTEGER NOT NULL
    ) WITHOUT ROWID
    """,
)

_READ_ONLY_ERRNOS: Final = (errno.EACCES, errno.EPERM, errno.EROFS)
_HEAD_BYTES: Final = 18  # "#" and 16 hex digits and a newline: a journal emptied by a sync


def _key(session_id: str) -> bytes:
    return session_id.encode("utf-8", "surrogatepass")


class _JournalState:
    """The journal as found on disk: its identity, first line and size (None: missing)."""

    __slots__ = ("head", "inode", "size")

    def __init__(self, inode: str, head: bytes, size: int) -> None:
        self.inode = inode
        self.head = head
        self.size = size


class SidecarIndex:
    """A :class:`~agentsession.indexing.CatalogIndex` for a JSONL directory store: a
    :class:`~agentsession.backends.sqlite_index.SqliteIndex` in ``.meta/catalog.sqlite``,
    caught up from the change journal by :meth:`sync` (see the module docstring). One
    connection per store object, used by one thread at a time; reopened in a forked child."""

    def __init__(self, catalog: SessionFiles, directory: str, journal_path: str) -> None:
        self._catalog = catalog
        self._directory = directory
        self._root = os.path.dirname(directory)
        self.path = os.path.join(directory, SIDECAR_NAME)
        """The database file."""
        self._journal_path = journal_path
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self._fresh = False  # made empty: filled from the logs at the next sync
        self.in_memory = False
        """Whether the index is kept in memory (the store's directory cannot be written)."""
        self._inner = SqliteIndex(self._connection, location=self.path)

    # -- the database ---------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        """The store object's connection (opened, checked and made when missing)."""
        if self._pid != os.getpid():  # a forked child: the parent's connection is not ours
            self._conn = None
            self._pid = os.getpid()
            self._lock = threading.RLock()
        conn = self._conn
        if conn is None:
            try:
                conn = self._open()
            except sqlite3.DatabaseError as exc:
                # Unreadable (not a database, damaged): made again from the logs.
                self._discard(exc)
                conn = self._open()
            self._conn = conn
        return conn

    def _open(self) -> sqlite3.Connection:
        try:
            private_dirs(self._root, self._directory)
            # Created owner-only before SQLite opens it (its -wal and -shm files take the
            # database file's permissions).
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
            os.close(fd)
        except OSError as exc:
            if exc.errno not in _READ_ONLY_ERRNOS:
                raise StorageError(f"cannot open the catalog index {self.path}: {exc}") from exc
            # A store this process may only read (a read-only mount, another user's): an
            # index in this store object's memory, filled from the logs.
            self.in_memory = True
            return self._prepare(sqlite3.connect(":memory:", check_same_thread=False))
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open the catalog index {self.path}: {exc}") from exc
        return self._prepare(conn)

    def _prepare(self, conn: sqlite3.Connection) -> sqlite3.Connection:
        """``conn`` with its settings, and the tables made (or checked) once."""
        conn.isolation_level = None
        try:
            conn.execute("PRAGMA busy_timeout = 30000")
            if not self.in_memory:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")  # rebuildable from the logs
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SIDECAR_VERSION:
                raise UsageError(
                    f"the catalog index {self.path} was made by a newer agentsession (schema "
                    f"{version}, this one knows {SIDECAR_VERSION}); upgrade, or delete the file "
                    "to have it made again from the logs"
                )
            if version < SIDECAR_VERSION:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    # Checked again under the write lock: another process may have made it.
                    if conn.execute("PRAGMA user_version").fetchone()[0] < SIDECAR_VERSION:
                        create_index_tables(conn)
                        for statement in _SIDECAR_SCHEMA:
                            conn.execute(statement)
                        conn.execute(f"PRAGMA user_version = {SIDECAR_VERSION}")
                        self._fresh = True
                    conn.execute("COMMIT")
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                    raise
        except BaseException:
            conn.close()
            raise
        return conn

    def _discard(self, exc: Exception) -> None:
        """Remove an unreadable database (and its WAL files)."""
        for suffix in ("", "-wal", "-shm"):
            try:
                os.unlink(self.path + suffix)
            except FileNotFoundError:
                continue
            except OSError as error:
                raise StorageError(
                    f"the catalog index {self.path} is unreadable ({exc}) and cannot be "
                    f"removed: {error}"
                ) from error

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise

    # -- catching up ----------------------------------------------------------------------

    def _journal(self) -> _JournalState | None:
        """The journal as it is (made empty when missing, so that what is appended from now
        on is read from it; None: missing, and this process cannot make it)."""
        flags = O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK
        try:
            fd = os.open(self._journal_path, os.O_RDONLY | flags)
        except FileNotFoundError:
            if self.in_memory:
                return None
            try:
                create = os.O_RDWR | os.O_APPEND | os.O_CREAT
                fd = os.open(self._journal_path, create | flags, 0o600)
            except OSError:
                return None
        except OSError as exc:
            raise StorageError(
                f"cannot read the catalog journal {self._journal_path}: {exc}"
            ) from exc
        try:
            st = os.fstat(fd)
            head = os.pread(fd, _HEAD_BYTES, 0)
        finally:
            os.close(fd)
        head = head if head.startswith(b"#") and head.endswith(b"\n") else b""
        return _JournalState(f"{st.st_dev}:{st.st_ino}", head, st.st_size)

    def sync(self, store: IndexHost) -> None:
        """Catch up with the journal (or, the first time, with every log): see the module
        docstring."""
        with self._lock:
            try:
                self._sync(store)
            except sqlite3.Error as exc:
                raise StorageError(f"updating the catalog index {self.path} failed: {exc}") from exc

    def _live_behind(self, conn: sqlite3.Connection) -> builtins.list[str]:
        """The sessions indexed with a turn open whose logs grew since: a writer names a
        session in the journal when a turn starts and ends, not at the appends between
        (see :meth:`agentsession.storage.LogView.catalog_due`), so those are found here, by
        the seq at the end of each such log."""
        behind = []
        for (raw,) in conn.execute("SELECT id FROM catalog WHERE status = 'live'").fetchall():
            sid = raw if isinstance(raw, str) else surrogate_text(raw)
            try:
                last_seq, _ = self._catalog.peek(self._catalog.path_for(sid))
            except (OSError, StorageError):
                continue
            if last_seq > self._seen(conn, sid):
                behind.append(sid)
        return behind

    def _sync(self, store: IndexHost) -> None:
        conn = self._connection()
        found = self._journal()
        behind = [] if self._fresh else self._live_behind(conn)
        if not self._fresh and found is not None and not behind:
            row = conn.execute("SELECT inode, head, offset FROM sidecar_journal").fetchone()
            if row is not None and (row[0], bytes(row[1]), row[2]) == (
                found.inode,
                found.head,
                found.size,
            ):
                return  # nothing appended since
        with self._transaction() as conn:
            found = self._journal()
            row = conn.execute("SELECT inode, head, offset FROM sidecar_journal").fetchone()
            if self._fresh:
                self._fill(store, conn)
                self._fresh = False
            elif found is None or row is None or row[0] != found.inode:
                # No journal, or another file than the one read: every log is compared.
                self._compare(store, conn)
            else:
                start = row[2] if bytes(row[1]) == found.head and row[2] <= found.size else 0
                if start < found.size:
                    found.size = self._consume(store, conn, start, found.size)
            for sid in behind:
                self._catch_up(store, conn, sid)  # nothing to do if the journal's did it
            if found is not None and not self.in_memory:
                found = self._empty(found)  # (an index in memory leaves it to the file's)
            conn.execute("DELETE FROM sidecar_journal")
            if found is not None:
                conn.execute(
                    "INSERT INTO sidecar_journal (one, inode, head, offset) VALUES (1, ?, ?, ?)",
                    (found.inode, found.head, found.size),
                )

    def _consume(self, store: IndexHost, conn: sqlite3.Connection, start: int, end: int) -> int:
        """Catch up the sessions the journal names from ``start`` to ``end``; returns the
        offset consumed."""
        fd = os.open(self._journal_path, os.O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        try:
            ids, consumed = read_entries(fd, start, end)
            for sid in dict.fromkeys(ids):
                self._catch_up(store, conn, sid)
        finally:
            os.close(fd)
        return consumed

    def _empty(self, found: _JournalState) -> _JournalState:
        """The journal emptied when all of it is consumed and no writer holds it (its new
        first line tells every reader that it was); as it is otherwise."""
        try:
            fd = os.open(self._journal_path, os.O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        except OSError:
            return found
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return found  # a writer is at it: emptied another time
            st = os.fstat(fd)
            if f"{st.st_dev}:{st.st_ino}" != found.inode or st.st_size != found.size:
                return found
            head = b"#" + secrets.token_hex(8).encode() + b"\n"
            os.ftruncate(fd, 0)
            os.pwrite(fd, head, 0)
            return _JournalState(found.inode, head, len(head))
        finally:
            os.close(fd)  # releases the lock

    def _seen(self, conn: sqlite3.Connection, session_id: str) -> int:
        row = conn.execute(
            "SELECT last_seq FROM sidecar_seen WHERE session_id = ?", (_key(session_id),)
        ).fetchone()
        return 0 if row is None else int(row[0])

    def _set_seen(self, conn: sqlite3.Connection, session_id: str, seq: int) -> None:
        if seq > 0:
            conn.execute(
                "INSERT OR REPLACE INTO sidecar_seen (session_id, last_seq) VALUES (?, ?)",
                (_key(session_id), seq),
            )
        else:
            conn.execute("DELETE FROM sidecar_seen WHERE session_id = ?", (_key(session_id),))

    def _catch_up(self, store: IndexHost, conn: sqlite3.Connection, session_id: str) -> None:
        """Index the session's events after its indexed seq (in ``conn``'s transaction),
        after waiting for a writer that holds its log's lock."""
        seen = self._seen(conn, session_id)
        path = self._catalog.path_for(session_id)
        try:
            fd = os.open(path, os.O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        except FileNotFoundError:
            fd = -1
        except OSError as exc:
            raise StorageError(f"cannot read session {session_id!r} at {path}: {exc}") from exc
        try:
            if fd >= 0:
                fcntl.flock(fd, fcntl.LOCK_SH)  # a writer's lines are all written
            try:
                session = self._catalog.open_uncached(session_id)
            except SessionShredded:
                self._unread_row(conn, session_id, path, seen, shredded=True)
                return
            except (CorruptLogError, EncryptionError) as exc:
                self._unread_row(conn, session_id, path, seen, shredded=False, error=exc)
                return
            try:
                latest = session.latest_seq
                if latest == 0:
                    self._inner.delete(session_id)
                    self._set_seen(conn, session_id, 0)
                elif latest < seen:
                    # Fewer events than indexed: deleted and made again meanwhile.
                    self._rebuild_from(store, conn, session_id, catalogued(session))
                elif latest > seen:
                    events = catalogued(session, seen)
                    change = change_for(store, events)
                    if change is not None:
                        self._inner.apply(session_id, change, conn)
                        if not seen:  # a new row: what session.update set is in the record
                            self._inner.set_fields(session_id, record_fields(store, session_id))
                    if events:
                        self._set_seen(conn, session_id, events[-1].seq)
            except SessionShredded:
                self._unread_row(conn, session_id, path, seen, shredded=True)
            except (CorruptLogError, EncryptionError) as exc:
                self._unread_row(conn, session_id, path, seen, shredded=False, error=exc)
            finally:
                session.close()
        finally:
            if fd >= 0:
                os.close(fd)  # releases the lock

    def _unread_row(
        self,
        conn: sqlite3.Connection,
        session_id: str,
        path: str,
        seen: int,
        *,
        shredded: bool,
        error: Exception | None = None,
    ) -> None:
        """The row of a session whose events cannot be read (shredded, or a bad line
        ``error`` names that the store does not move aside): made, when it has none, from what
        the file tells without decoding it (seqs and times are not sealed), so that it is
        still listed; its events up to the file's last seq are taken as indexed (a repaired
        log's later events are read as appended)."""
        if error is not None:
            log.warning("catalog index: session %r not indexed: %s", session_id, error)
        last_seq, created = self._catalog.peek(path)
        if not seen:
            try:
                mtime = os.stat(path, follow_symlinks=False).st_mtime_ns
            except OSError:
                return
            updated = _dt.datetime.fromtimestamp(mtime / 1e9, _dt.timezone.utc)
            change = CatalogChange(first_time=created, last_time=updated, last_seq=max(last_seq, 0))
            self._inner.apply(session_id, change, conn)
        if shredded:
            self._inner.shredded(session_id)
        self._set_seen(conn, session_id, max(last_seq, seen))

    def _rebuild_from(
        self, store: IndexHost, conn: sqlite3.Connection, session_id: str, events: list[Any]
    ) -> None:
        change = change_for(store, events) if events else None
        fields = record_fields(store, session_id) if events else Fields()
        self._inner.rebuild(session_id, change, fields, True)
        self._set_seen(conn, session_id, change.last_seq if change is not None else 0)

    def _fill(self, store: IndexHost, conn: sqlite3.Connection) -> None:
        """Index every session (a new database)."""
        for info in self._catalog.list_all():
            self._catch_up(store, conn, info.id)

    def _compare(self, store: IndexHost, conn: sqlite3.Connection) -> None:
        """Catch up every session whose log's last seq is not the one indexed, and forget the
        sessions without a log."""
        indexed = {
            bytes(key).decode("utf-8", "surrogatepass"): seq
            for key, seq in conn.execute("SELECT session_id, last_seq FROM sidecar_seen")
        }
        for info in self._catalog.list_all():
            if indexed.pop(info.id, None) != info.last_seq or info.last_seq < 0:
                self._catch_up(store, conn, info.id)
        for gone in indexed:
            self._inner.delete(gone)
            self._set_seen(conn, gone, 0)

    # -- the index ------------------------------------------------------------------------

    def delete(self, session_id: str) -> None:
        """Forget the session (its log was deleted)."""
        with self._lock, self._transaction() as conn:
            self._inner.delete(session_id)
            self._set_seen(conn, session_id, 0)

    def query(self, query: ListQuery) -> builtins.list[CatalogRow]:
        with self._lock:
            self._connection()
            rows = self._inner.query(query)
        for row in rows:  # the log file's size now (the index keeps none)
            try:
                row.size = os.stat(self._catalog.path_for(row.id), follow_symlinks=False).st_size
            except OSError:
                row.size = 0
        return rows

    def search(self, query: SearchQuery) -> builtins.list[Hit]:
        with self._lock:
            self._connection()
            return self._inner.search(query)

    def totals(self, query: TotalsQuery) -> builtins.list[Totals]:
        with self._lock:
            self._connection()
            return self._inner.totals(query)

    def set_fields(self, session_id: str, fields: Fields) -> None:
        with self._lock:
            self._connection()
            self._inner.set_fields(session_id, fields)

    def shredded(self, session_id: str) -> None:
        with self._lock:
            self._connection()
            self._inner.shredded(session_id)

    def rebuild(
        self, session_id: str, change: CatalogChange | None, fields: Fields, rewound: bool
    ) -> None:
        with self._lock, self._transaction() as conn:
            self._inner.rebuild(session_id, change, fields, rewound)
            self._set_seen(conn, session_id, change.last_seq if change is not None else 0)

    def close(self) -> None:
        """Close the connection (reopened when used again)."""
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None
