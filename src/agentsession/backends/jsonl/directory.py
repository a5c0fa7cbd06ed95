"""The directory store: one JSONL log per session in a directory, with the turn locks in
``.locks`` and the meta entries in ``.meta`` (or where the store's layout keeps them)."""

from __future__ import annotations

import builtins
import datetime as _dt
import errno
import logging
import os
import stat
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

import msgspec

from ..._files import O_CLOEXEC, O_NOFOLLOW, O_NONBLOCK, atomic_write
from ...catalog import CatalogDefaults, StoreParts
from ...contract import Capabilities, SessionInfo
from ...errors import StorageError, StoreUnavailable, UsageError
from ...interop.agentkit_layout import detect_dialect
from ...interop.jsonl_layout import SUFFIX, Dialect, JsonlLayout
from ...locks import FileLocker
from ...session import BaseSession, SessionHost
from ...store import BaseStore, path_of
from .journal import Journal, entry_of
from .layout import layout_for
from .lines import decode_line, first_time, last_line, last_seq_of
from .logfile import JsonlLog, LogFiles, LogHost
from .meta import META_DIR, MetaFiles
from .sidecar import SidecarIndex
from .watch import FileWatcher

try:
    import fcntl
    import resource
except ImportError as exc:  # not POSIX (Windows): no flock
    from ...locks import file_locks_unavailable

    raise file_locks_unavailable(
        "the JSONL store's session files",
        "open a SQLite ('sqlite:///file.db') or PostgreSQL store instead",
    ) from exc

__all__ = [
    "ID_SUFFIX",
    "LOCK_DIR",
    "QUARANTINE_SUFFIX",
    "JsonlCatalog",
    "JsonlStore",
    "OnCorrupt",
    "open_jsonl",
]

log = logging.getLogger("agentsession.backends.jsonl")

OnCorrupt = Literal["raise", "quarantine"]
"""What to do with a bad line in the middle of a log: raise, or move it aside and carry on."""

LOCK_DIR = ".locks"
QUARANTINE_SUFFIX = ".quarantine"
ID_SUFFIX = ".id"


def _default_open_files() -> int:
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):  # pragma: no cover - no limit to read
        return 256
    if soft == resource.RLIM_INFINITY:
        return 256
    return max(4, min(256, soft // 4))


class JsonlHost(LogHost, SessionHost, Protocol):
    """The store a JSONL catalog serves: the settings its logs read, and what its sessions
    need."""


class JsonlCatalog(CatalogDefaults):
    """The sessions of a JSONL directory (a :class:`~agentsession.catalog.Catalog`): one log
    file per session, named by the store's layout, with the ids the names cannot hold beside
    them; it bounds the session files kept open. ``host`` holds the settings its logs read
    (``durability``, ``on_corrupt``). From :class:`~agentsession.catalog.CatalogDefaults`:
    ``resolve``, ``storage_bytes`` (every listed session has its size), and ``list_page`` and
    ``expired_ids`` over every file listed, filtered, sorted and sliced."""

    def __init__(
        self, host: JsonlHost, root: str, layout: JsonlLayout, max_open_files: int
    ) -> None:
        self._host = host
        self._root = root
        self._layout = layout
        self._max_open_files = max_open_files
        self._closed = False
        self._open_files: OrderedDict[int, weakref.ref[JsonlLog]] = OrderedDict()
        # The session each log serves (by the log's id): a log is closed to bound the open
        # files only while its session's lock is free, as every call of a log holds it.
        self._log_sessions: weakref.WeakValueDictionary[int, BaseSession] = (
            weakref.WeakValueDictionary()
        )
        self._open_files_lock = threading.Lock()
        self._meta_files = MetaFiles(root, lambda: host.clock())
        self.meta = layout.meta(self._meta_files, root, self._claimed_by, self._write_id_sidecar)
        """The store's meta entries (``.meta``, or where the layout keeps them)."""
        self.journal: Journal | None = None
        """The change journal its appends write (None: the store keeps no catalog)."""
        self.index: SidecarIndex | None = None
        """The catalog and search index that reads the journal (None: none kept)."""

    @property
    def location(self) -> str:
        """The store's directory."""
        return self._root

    @property
    def url(self) -> str:
        """The store's directory (a path is what ``open_store`` takes)."""
        return self._root

    def cache_key(self, session_id: str) -> str:
        # A layout whose names are not injective never shares a session object by path.
        return self.path_for(session_id) if self._layout.injective else session_id

    def path_for(self, session_id: str) -> str:
        """The log file of a session id (safe and injective; see ``agentsession._names``; in
        the agentkit dialect, agentkit's naming, which is not injective)."""
        return os.path.join(self._root, self._layout.file_stem(session_id) + SUFFIX)

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(f"store {self.location} is closed")

    def _track_open(self, log: JsonlLog) -> None:
        """Count an opened session file; close the oldest idle ones beyond the bound (those
        whose session is not in use: its lock is taken without waiting)."""
        victims = []
        with self._open_files_lock:
            self._open_files[id(log)] = weakref.ref(log)
            while len(self._open_files) > self._max_open_files:
                key, ref = self._open_files.popitem(last=False)
                other = ref()
                session = self._log_sessions.get(key)
                if other is not None and other is not log and session is not None:
                    victims.append((other, session.state_lock))
        for other, lock in victims:
            if lock.acquire(blocking=False):
                try:
                    other.close_if_idle()
                finally:
                    lock.release()

    def _untrack_open(self, log: JsonlLog) -> None:
        with self._open_files_lock:
            self._open_files.pop(id(log), None)

    def after_fork(self) -> None:
        """Forget the parent's open files (the logs reopen theirs) and the journal's."""
        self._open_files_lock = threading.Lock()
        self._open_files.clear()
        if self.journal is not None:
            self.journal.after_fork()

    def close(self) -> None:
        """Logs of a closed store are not opened again."""
        self._closed = True
        if self.journal is not None:
            self.journal.close()
        if self.index is not None:
            self.index.close()

    def _claimed_by(self, path: str) -> str | None:
        """The id recorded beside a session file (``<name>.id``), if any."""
        try:
            with open(path[: -len(SUFFIX)] + ID_SUFFIX, "rb") as f:
                return f.read().decode("utf-8", "surrogatepass")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read the id beside {path}: {exc}") from exc

    def open_session(self, store: SessionHost, session_id: str) -> BaseSession:
        path = self.path_for(session_id)
        self._layout.check_session(session_id, path, self._claimed_by)
        return self._session_at(store, session_id, path)

    def _session_at(self, store: SessionHost, session_id: str, path: str) -> BaseSession:
        """The session whose log is the file ``path``."""
        files = LogFiles(
            layout=self._layout,
            check_open=self._check_open,
            track_open=self._track_open,
            untrack_open=self._untrack_open,
            write_id_sidecar=self._write_id_sidecar,
            quarantine=self._quarantine,
            encrypted=store.encrypted,
            journal=self.journal,
        )
        log = JsonlLog(self._host, files, session_id, path)
        session = BaseSession(store, session_id, log)
        with self._open_files_lock:
            self._log_sessions[id(log)] = session
        return session

    def clean_crash_leftovers(self) -> None:
        """Remove what a killed process left of its meta writes (see
        :meth:`MetaFiles.clean_crash_leftovers`)."""
        self._meta_files.clean_crash_leftovers()

    def set_last_activity(self, session_id: str, when: _dt.datetime) -> None:
        """Set the log file's modification time (what ``list()`` reports as ``updated_at``)."""
        session = self.open_uncached(session_id)
        try:
            path = session.location
        finally:
            session.close()
        epoch = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
        ns = (when - epoch) // _dt.timedelta(microseconds=1) * 1000
        try:
            os.utime(path, ns=(ns, ns), follow_symlinks=False)
        except FileNotFoundError:
            return  # deleted meanwhile: nothing to date
        except OSError as exc:
            raise StorageError(f"cannot set the modification time of {path}: {exc}") from exc

    def _write_id_sidecar(self, session_id: str, path: str) -> None:
        """A cut (hashed) file name cannot be read back as an id, nor can agentkit's names:
        keep the id beside it (which also claims an agentkit name for that one id)."""
        if not self._layout.records_id(path):
            return
        id_path = path[: -len(SUFFIX)] + ID_SUFFIX
        if os.path.exists(id_path):
            return
        atomic_write(id_path, session_id.encode("utf-8", "surrogatepass"))

    def _quarantine(
        self, path: str, data: bytes, reason: str, offset: int, session_id: str
    ) -> None:
        """Append bytes taken out of a log to its sidecar, followed by a newline."""
        target = path + QUARANTINE_SUFFIX
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | O_CLOEXEC | O_NOFOLLOW
        fd = os.open(target, flags, 0o600)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise StorageError(f"{target} is not a regular file; refusing to write to it")
            os.write(fd, data + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        log.warning(
            "session %r: moved %d bytes at offset %d of %s to %s (%s)",
            session_id,
            len(data),
            offset,
            path,
            target,
            reason,
        )

    def _id_of(self, name: str) -> str | None:
        return self._layout.id_of(os.path.join(self._root, name), self._claimed_by)

    def session_of_name(self, name: str) -> str | None:
        """The session whose log is the file ``name`` of the store's directory, when the
        name tells it for sure: the id it spells or the one recorded beside it (with agentkit's
        names, which are not injective, only a recorded id); None otherwise."""
        if self._layout.injective:
            return self._id_of(name)
        try:
            return self._claimed_by(os.path.join(self._root, name))
        except StorageError:
            return None

    def watcher(self) -> FileWatcher:
        """A watcher of the store's session files, for its followers (see
        :class:`~agentsession.backends.jsonl.watch.FileWatcher`)."""
        return FileWatcher(self._root, self.session_of_name)

    def exists(self, session_id: str) -> bool:
        try:
            st = os.lstat(self.path_for(session_id))
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StorageError(f"cannot look up session {session_id!r}: {exc}") from exc
        return stat.S_ISREG(st.st_mode) and st.st_size > 0

    def list_all(self) -> builtins.list[SessionInfo]:
        out = []
        try:
            entries = list(os.scandir(self._root))
        except OSError as exc:
            raise StoreUnavailable(f"cannot list {self._root}: {exc}") from exc
        for entry in entries:
            if not entry.name.endswith(SUFFIX) or not entry.is_file(follow_symlinks=False):
                continue
            sid = self._id_of(entry.name)
            if sid is None:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if st.st_size == 0:
                continue
            updated = _dt.datetime.fromtimestamp(st.st_mtime_ns / 1e9, _dt.timezone.utc)
            last_seq, created = self.peek(entry.path)
            out.append(
                SessionInfo(
                    id=sid,
                    updated_at=updated,
                    created_at=created,
                    size=st.st_size,
                    last_seq=last_seq,
                )
            )
        return out

    def peek(self, path: str) -> tuple[int, _dt.datetime | None]:
        """The file's last seq, from the head of its last line (-1 when unreadable), and its
        first event's time, from one read of its beginning (None when unknown)."""
        try:
            fd = os.open(path, os.O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        except OSError:
            return -1, None
        try:
            try:
                last_seq = last_seq_of(fd, os.fstat(fd).st_size)
            except OSError:
                last_seq = -1
            try:
                created = first_time(fd)
            except OSError:
                created = None
            return last_seq, created
        finally:
            os.close(fd)

    def open_uncached(self, session_id: str) -> BaseSession:
        """A session of the store over the log, outside its cache (the caller closes it after
        one use)."""
        return self.open_session(self._host, session_id)

    def delete(self, session_id: str, meta_kinds: Sequence[str]) -> bool:
        """All or nothing: the log is renamed aside first, so a directory the process may not
        write (or any other failure before that) leaves the session whole and raises
        :class:`StorageError`; only then is it emptied under the writers' lock (a session
        object still holding the file sees it shrink and starts over) and unlinked."""
        path = self.path_for(session_id)
        if self.journal is not None:
            # Named first: a crash before the index forgets the session leaves the next
            # sync to find its log gone.
            self.journal.note(entry_of(session_id))
        try:
            fd = os.open(path, os.O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        except FileNotFoundError:
            existed = False
        except OSError as exc:
            what = "is a symbolic link" if exc.errno == errno.ELOOP else str(exc)
            raise StorageError(
                f"cannot delete session {session_id!r}: {path} {what}; nothing was deleted"
            ) from None
        else:
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise StorageError(
                        f"cannot delete session {session_id!r}: {path} is not a regular file; "
                        "nothing was deleted"
                    )
                fcntl.flock(fd, fcntl.LOCK_EX)
                tomb = f"{path}.{os.getpid()}.{threading.get_ident()}.deleting"
                try:
                    os.rename(path, tomb)
                except OSError as exc:
                    raise StorageError(
                        f"cannot delete session {session_id!r} at {path}: {exc.strerror or exc}; "
                        "nothing was deleted"
                    ) from None
                existed = os.fstat(fd).st_size > 0
                os.ftruncate(fd, 0)
                os.unlink(tomb)
            except OSError as exc:
                raise StorageError(f"deleting session {session_id!r} at {path}: {exc}") from exc
            finally:
                os.close(fd)
        for kind in meta_kinds:
            self.meta.set(kind, session_id, None)
        stem = path[: -len(SUFFIX)]
        for extra in (stem + ID_SUFFIX, path + QUARANTINE_SUFFIX):
            try:
                os.unlink(extra)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise StorageError(f"cannot delete {extra}: {exc}") from exc
        if self.index is not None:
            self.index.delete(session_id)  # after the log's lock is released (see .sidecar)
        return existed

    def last_append(self, session_id: str) -> _dt.datetime | None:
        path = self.path_for(session_id)
        try:
            fd = os.open(path, os.O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read session {session_id!r} at {path}: {exc}") from exc
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise StorageError(f"session {session_id!r}: {path} is not a regular file")
            line = last_line(fd)
        finally:
            os.close(fd)
        if line is None:
            return None
        try:
            return decode_line(line).time
        except msgspec.DecodeError:
            pass
        session = self.open_uncached(session_id)  # reads up to a torn tail, writing nothing
        try:
            events = session.read(after=max(0, session.latest_seq - 1))
            return events[-1].time if events else None
        finally:
            session.close()




def detected_dialect(directory: str | os.PathLike[str]) -> Dialect:
    """The dialect a store over ``directory`` opens in when none is given, logged when it is
    agentkit's (see :func:`~agentsession.interop.agentkit_layout.detect_dialect`)."""
    dialect = detect_dialect(directory)
    if dialect == "agentkit":
        log.info(
            "%s holds agentkit's session files: opening it in the agentkit dialect (pass "
            "dialect='agentsession' to open it in agentsession's own)",
            os.path.abspath(os.fspath(directory)),
        )
    return dialect


def _jsonl_parts(
    store: JsonlStore,
    make_catalog: Callable[[JsonlHost, str, JsonlLayout, int], JsonlCatalog],
    directory: str | os.PathLike[str],
    *,
    on_corrupt: OnCorrupt = "raise",
    max_open_files: int | None = None,
    create: bool = True,
    dialect: Dialect = "agentsession",
    sealed: bool = False,
    indexed: bool = False,
) -> tuple[JsonlCatalog, StoreParts]:
    """Check a JSONL store's options, set its public settings and build its parts over
    ``directory`` (created owner-only when missing, unless ``create`` is False): its catalog,
    and the parts with it; with ``indexed``, the change journal its appends write and the
    catalog sidecar that reads it."""
    if on_corrupt not in ("raise", "quarantine"):
        raise UsageError(f"on_corrupt must be 'raise' or 'quarantine', not {on_corrupt!r}")
    if dialect not in ("agentsession", "agentkit"):
        raise UsageError(f"dialect must be 'agentsession' or 'agentkit', not {dialect!r}")
    layout = layout_for(dialect)
    refused = layout.encryption_refused
    if refused is not None and sealed:
        raise UsageError(refused)
    store.dialect = dialect
    if max_open_files is not None and (
        not isinstance(max_open_files, int) or max_open_files < 1
    ):
        raise UsageError(f"max_open_files must be an int >= 1, not {max_open_files!r}")
    store.on_corrupt = on_corrupt
    store.max_open_files = max_open_files or _default_open_files()
    root = os.path.abspath(os.fspath(directory))
    if not create:
        # Opening an existing store creates nothing, and reading needs no write access
        # (a read-only mount, a directory of another user): writes fail when they come.
        if not os.path.isdir(root):
            what = "it is not a directory" if os.path.exists(root) else "no such directory"
            raise StoreUnavailable(f"no store at {root} ({what})")
        if not os.access(root, os.R_OK | os.X_OK):
            raise StoreUnavailable(f"the store directory {root} is not readable")
    else:
        try:
            os.makedirs(root, mode=0o700, exist_ok=True)
        except FileExistsError:
            raise StoreUnavailable(f"{root} exists and is not a directory") from None
        except OSError as exc:
            raise StoreUnavailable(f"cannot create the store directory {root}: {exc}") from exc
        if not os.access(root, os.R_OK | os.W_OK | os.X_OK):
            raise StoreUnavailable(f"the store directory {root} is not readable and writable")
    real = os.path.realpath(root)
    catalog = make_catalog(store, real, layout, store.max_open_files)
    if indexed:
        meta_dir = os.path.join(real, META_DIR)
        journal = catalog.journal = Journal(real, meta_dir)
        catalog.index = SidecarIndex(catalog, meta_dir, journal.path)
    return catalog, StoreParts(
        catalog,
        catalog.meta,
        locker=lambda: FileLocker(os.path.join(real, LOCK_DIR)),
        watcher=catalog.watcher,
        index=catalog.index,
    )


class JsonlStore(BaseStore):
    """A directory of JSONL session files. Opened by ``open_store(path)``.

    ``on_corrupt`` decides what a bad line in the middle of a log does: ``"raise"`` (default)
    raises :class:`~agentsession.errors.CorruptLogError`; ``"quarantine"`` moves it to the
    session's sidecar file and carries on.

    Logs written by agentkit (the Go package) are read in either dialect, and a file keeps the
    dialect of its first line when appended to. ``dialect="agentkit"`` (for a directory shared
    with an agentkit service) also writes new files as agentkit lines and names them as
    agentkit does (every character outside ``[A-Za-z0-9._-]`` becomes ``_``); two ids that
    agentkit's naming maps to one file are refused rather than merged. Without ``dialect``,
    a directory holding agentkit's files and none of agentsession's opens in the agentkit
    dialect, logged once (:func:`~agentsession.interop.agentkit_layout.detect_dialect`), and
    any other directory, or an encrypted store, in ``"agentsession"``. In the agentkit
    dialect ``max_cached_sessions=0`` means no limit, as in agentkit. See
    ``docs/interop.md``.

    Its parts: a :class:`JsonlCatalog`, its layout's meta entries (``.meta``, see
    :class:`~agentsession.backends.jsonl.meta.MetaFiles`), a
    :class:`~agentsession.locks.FileLocker` over ``.locks`` and, for its followers, a
    :class:`~agentsession.backends.jsonl.watch.FileWatcher` of its directory (inotify on
    Linux, a poll of the files elsewhere).
    """

    capabilities = Capabilities(inline_appends=True, inline_reads=True)

    dialect: Dialect
    """The line format and file naming of new session files."""
    on_corrupt: OnCorrupt
    """What a bad line in the middle of a log does."""
    max_open_files: int
    """Session files this store keeps open at most (default: a quarter of the process's
    descriptor limit, at most 256); the least recently opened are closed first and reopened
    when used again."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        on_corrupt: OnCorrupt = "raise",
        max_open_files: int | None = None,
        create: bool = True,
        dialect: Dialect | None = None,
        **options: Any,
    ) -> None:
        sealed = options.get("passphrase") is not None or options.get("key") is not None
        if dialect is None:
            # agentkit's dialect cannot be encrypted: an encrypted store keeps its own.
            dialect = "agentsession" if sealed else detected_dialect(directory)
        if dialect == "agentkit" and options.get("max_cached_sessions") == 0:
            options["max_cached_sessions"] = None  # agentkit's 0: no limit

        def parts() -> StoreParts:
            self._files, built = _jsonl_parts(
                self,
                JsonlCatalog,
                directory,
                on_corrupt=on_corrupt,
                max_open_files=max_open_files,
                create=create,
                dialect=dialect,
                sealed=sealed,
                indexed=bool(options.get("catalog", True)),
            )
            return built

        super().__init__(parts, **options)
        # The journal names a session at a turn's start and end, not at the appends between:
        # the sidecar finds those in the logs of sessions it indexed with a turn open.
        self._indexing.deferred = self._index is not None

    _files: JsonlCatalog
    """The store's catalog: its session files."""

    def path_for(self, session_id: str) -> str:
        """The log file of a session id (safe and injective; see ``agentsession._names``; in
        the agentkit dialect, agentkit's naming, which is not injective)."""
        return self._files.path_for(session_id)



def open_jsonl(url: str, **options: Any) -> JsonlStore:
    """``open_store`` for a directory path, ``jsonl:///abs/dir``, ``jsonl:dir`` or ``file:``."""
    scheme, sep, _ = url.partition(":")
    if sep and scheme.lower() in ("jsonl", "file"):
        return JsonlStore(path_of(url, scheme.lower()), **options)
    return JsonlStore(url, **options)
