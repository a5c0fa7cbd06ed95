"""The single-file store: one explicit JSONL file holding its one session (agentkit's
``NewJSONL(path)``)."""

from __future__ import annotations

import datetime as _dt
import os
import stat
from collections.abc import Sequence
from typing import Any

from ...contract import SessionInfo
from ...errors import SessionNotFound, StorageError, StoreUnavailable, UsageError
from ...interop.jsonl_layout import SUFFIX
from ...session import BaseSession
from .directory import JsonlStore

__all__ = ["JsonlFileStore", "open_jsonl_file"]


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
    must be a regular file, reached without a symbolic link.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, session_id: str | None = None, **options: Any
    ) -> None:
        raw = os.path.abspath(os.fspath(path))
        name = os.path.basename(raw)
        if not name or name in (".", "..") or os.path.isdir(raw):
            raise UsageError(f"{raw} is not a file path")
        super().__init__(os.path.dirname(raw), **options)
        self._file = os.path.join(self._root, name)
        try:
            st = os.lstat(self._file)
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISREG(st.st_mode):
                raise StorageError(f"{self._file} is not a regular file; refusing to use it")
        sid = session_id if session_id is not None else name.removesuffix(SUFFIX)
        if not isinstance(sid, str) or not sid.strip():
            raise UsageError(f"a session id is required for {self._file}")
        self.session_id: str = sid
        """The id of the file's one session."""

    @property
    def file_path(self) -> str:
        """The session's file (agentkit's ``FilePath``)."""
        return self._file

    @property
    def location(self) -> str:
        """The session's file."""
        return self._file

    @property
    def url(self) -> str:
        """The session's file."""
        return self._file

    @property
    def session(self) -> BaseSession:
        """The file's session (``get(session_id)``)."""
        return self.get(self.session_id)

    def get(self, session_id: str) -> BaseSession:
        """The file's session: ``session_id`` must be its id (or ``""``)."""
        return super().get(session_id or self.session_id)

    def _mine(self, session_id: str) -> bool:
        return session_id == self.session_id

    def path_for(self, session_id: str) -> str:
        """The file, for the file's session id; :class:`SessionNotFound` for any other."""
        if not self._mine(session_id):
            held = f"{self._file} holds only {self.session_id!r}"
            raise SessionNotFound(session_id, f"session not found: {session_id!r} ({held})")
        return self._file

    def _cache_key(self, session_id: str) -> str:
        return session_id

    def _open_session(self, session_id: str) -> BaseSession:
        return self._session_at(session_id, self.path_for(session_id))

    def _claimed_by(self, path: str) -> str | None:
        return self.session_id if path == self._file else None

    def _write_id_sidecar(self, session_id: str, path: str) -> None:
        return None  # the id is the store's own; nothing is written beside the file

    def _id_of(self, name: str) -> str | None:
        return self.session_id if name == os.path.basename(self._file) else None

    def _exists(self, session_id: str) -> bool:
        return self._mine(session_id) and super()._exists(session_id)

    def _list_all(self) -> list[SessionInfo]:
        name = os.path.basename(self._file)
        try:
            st = os.lstat(self._file)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StoreUnavailable(f"cannot read {self._file}: {exc}") from exc
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0 or not name:
            return []
        updated = _dt.datetime.fromtimestamp(st.st_mtime_ns / 1e9, _dt.timezone.utc)
        last_seq, created = self._peek(self._file)
        return [
            SessionInfo(
                id=self.session_id,
                updated_at=updated,
                created_at=created,
                size=st.st_size,
                last_seq=last_seq,
            )
        ]

    def _delete(self, session_id: str, meta_kinds: Sequence[str]) -> bool:
        return self._mine(session_id) and super()._delete(session_id, meta_kinds)

    def _last_append(self, session_id: str) -> _dt.datetime | None:
        return super()._last_append(session_id) if self._mine(session_id) else None


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
