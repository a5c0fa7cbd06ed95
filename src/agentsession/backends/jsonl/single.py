"""The single-file store: one explicit JSONL file holding its one session (agentkit's
``NewJSONL(path)``)."""

from __future__ import annotations

import datetime as _dt
import os
import stat
from collections.abc import Sequence
from typing import Any

from ...catalog import StoreParts
from ...contract import SessionInfo, check_session_id
from ...errors import SessionNotFound, StorageError, StoreUnavailable, UsageError
from ...interop.jsonl_layout import SUFFIX, JsonlLayout
from ...session import BaseSession, SessionHost
from ...store import BaseStore
from .directory import JsonlCatalog, JsonlHost, JsonlStore, _jsonl_parts
from .watch import FileWatcher

__all__ = ["JsonlFileCatalog", "JsonlFileStore", "open_jsonl_file"]


class JsonlFileCatalog(JsonlCatalog):
    """The catalog of a :class:`JsonlFileStore`: the directory's catalog narrowed to the one
    file, whose session is ``session_id``."""

    def __init__(
        self,
        host: JsonlHost,
        root: str,
        layout: JsonlLayout,
        max_open_files: int,
        *,
        name: str,
        session_id: str,
    ) -> None:
        super().__init__(host, root, layout, max_open_files)
        self.file = os.path.join(root, name)
        """The session's file."""
        self.session_id = session_id
        """The id of the file's one session."""

    @property
    def location(self) -> str:
        """The session's file."""
        return self.file

    @property
    def url(self) -> str:
        """The session's file."""
        return self.file

    def resolve(self, session_id: str, purpose: str) -> str:
        """``""`` opens the file's session (as agentkit's static store allows)."""
        if session_id == "" and purpose == "open":
            return self.session_id
        return check_session_id(session_id)

    def _mine(self, session_id: str) -> bool:
        return session_id == self.session_id

    def path_for(self, session_id: str) -> str:
        """The file, for the file's session id; :class:`SessionNotFound` for any other."""
        if not self._mine(session_id):
            held = f"{self.file} holds only {self.session_id!r}"
            raise SessionNotFound(session_id, f"session not found: {session_id!r} ({held})")
        return self.file

    def cache_key(self, session_id: str) -> str:
        return session_id

    def open_session(self, store: SessionHost, session_id: str) -> BaseSession:
        return self._session_at(store, session_id, self.path_for(session_id))

    def _claimed_by(self, path: str) -> str | None:
        return self.session_id if path == self.file else None

    def _write_id_sidecar(self, session_id: str, path: str) -> None:
        return None  # the id is the store's own; nothing is written beside the file

    def _id_of(self, name: str) -> str | None:
        return self.session_id if name == os.path.basename(self.file) else None

    def watcher(self) -> FileWatcher:
        """A watcher of the one file (see
        :class:`~agentsession.backends.jsonl.watch.FileWatcher`)."""
        return FileWatcher(
            os.path.dirname(self.file), self.session_of_name, only=os.path.basename(self.file)
        )

    def exists(self, session_id: str) -> bool:
        return self._mine(session_id) and super().exists(session_id)

    def list_all(self) -> list[SessionInfo]:
        name = os.path.basename(self.file)
        try:
            st = os.lstat(self.file)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StoreUnavailable(f"cannot read {self.file}: {exc}") from exc
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0 or not name:
            return []
        updated = _dt.datetime.fromtimestamp(st.st_mtime_ns / 1e9, _dt.timezone.utc)
        last_seq, created = self.peek(self.file)
        return [
            SessionInfo(
                id=self.session_id,
                updated_at=updated,
                created_at=created,
                size=st.st_size,
                last_seq=last_seq,
            )
        ]

    def delete(self, session_id: str, meta_kinds: Sequence[str]) -> bool:
        return self._mine(session_id) and super().delete(session_id, meta_kinds)

    def last_append(self, session_id: str) -> _dt.datetime | None:
        return super().last_append(session_id) if self._mine(session_id) else None


class JsonlFileStore(JsonlStore):
    """A JSONL store over one explicit file, which holds its one session (agentkit's
    ``NewJSONL(path)``).

    ``session_id`` names the session (default: the file's name without ``.jsonl``); ``get``
    of that id (or of ``""``, as agentkit's static store allows) gives the session whose
    :attr:`~agentsession.BaseSession.location` is the file, and any other id raises
    :class:`~agentsession.errors.SessionNotFound`. The file keeps the dialect of its first
    line; a new one is written in ``dialect``. Turn locks and the key-value entries live beside
    the file, in the directory's ``.locks`` and ``.meta`` (a :class:`JsonlStore` over the same
    directory uses the same ones). The directory is created owner-only when missing; the file
    must be a regular file, reached without a symbolic link. Its catalog is a
    :class:`JsonlFileCatalog`.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, session_id: str | None = None, **options: Any
    ) -> None:
        raw = os.path.abspath(os.fspath(path))
        name = os.path.basename(raw)
        if not name or name in (".", "..") or os.path.isdir(raw):
            raise UsageError(f"{raw} is not a file path")
        jsonl = {key: options.pop(key) for key in _JSONL_OPTIONS if key in options}
        sealed = options.get("passphrase") is not None or options.get("key") is not None

        def catalog(
            host: JsonlHost, root: str, layout: JsonlLayout, max_open_files: int
        ) -> JsonlCatalog:
            file = os.path.join(root, name)
            try:
                st = os.lstat(file)
            except FileNotFoundError:
                pass
            else:
                if not stat.S_ISREG(st.st_mode):
                    raise StorageError(f"{file} is not a regular file; refusing to use it")
            sid = session_id if session_id is not None else name.removesuffix(SUFFIX)
            if not isinstance(sid, str) or not sid.strip():
                raise UsageError(f"a session id is required for {file}")
            self.session_id = sid
            self._file = JsonlFileCatalog(
                host, root, layout, max_open_files, name=name, session_id=sid
            )
            return self._file

        def parts() -> StoreParts:
            self._files, built = _jsonl_parts(
                self, catalog, os.path.dirname(raw), sealed=sealed, **jsonl
            )
            return built

        BaseStore.__init__(self, parts, **options)

    _file: JsonlFileCatalog
    """The store's catalog: its one file."""

    session_id: str
    """The id of the file's one session."""

    @property
    def file_path(self) -> str:
        """The session's file (agentkit's ``FilePath``)."""
        return self._file.file

    @property
    def session(self) -> BaseSession:
        """The file's session (``get(session_id)``)."""
        return self.get(self.session_id)


_JSONL_OPTIONS = ("on_corrupt", "max_open_files", "create", "dialect")
"""The options of :class:`JsonlStore` besides the common ones."""


def open_jsonl_file(
    path: str | os.PathLike[str], *, session_id: str | None = None, **options: Any
) -> BaseSession:
    """The session kept in the one JSONL file ``path`` (agentkit's ``NewJSONL``): a session
    whose :attr:`~agentsession.BaseSession.location` is ``path``.

    ``session_id`` defaults to the file's name without ``.jsonl``. ``options`` are those of
    :class:`JsonlStore` (``dialect``, ``on_corrupt``, ``durability``, ...). The file is created
    by the first append; reopening it resumes its seqs. For turn locks or crash recovery, make
    the :class:`JsonlFileStore` itself and use its ``session``.
    """
    return JsonlFileStore(path, session_id=session_id, **options).session
