"""JSONL stores whose directory is resolved per tenant workspace (agentkit's session store with
``StoreDeps.Workspace``).

agentkit resolves its store directory through a workspace service on every call: a
multi-tenant service maps the turn's workspace key (``slack:C001``, see
:func:`~agentsession.chat.routing.workspace_key`) to that tenant's root, so two channels never
share sessions, files or tool output. Here a *resolver* is any callable from a workspace key to
a tenant root directory; :func:`tenant_resolver` builds the one agentkit's ``workspace/tenant``
plugin implements. :class:`WorkspaceStores` opens one
:class:`~agentsession.backends.jsonl.JsonlStore` per tenant, at ``<root>/<sessions_dir>``,
and creates the tenant's tool work directory ``<root>/work`` (:data:`TENANT_TOOL_WORK_DIR`)
beside it, as agentkit does::

    stores = WorkspaceStores(tenant_resolver("/srv/tenants"), dialect="agentkit")
    with apply_envelope(env):                   # env.workspace == "slack:C001"
        session = stores.get(env.conversation)  # /srv/tenants/slack_C001/sessions/...

Deliberate difference from agentkit: stores are cached by their resolved directory, not by
session id, so two tenants with the same session id (``cli:default``) never share a session
object.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Final

from ..backends.jsonl import Dialect, JsonlSession, JsonlStore
from ..errors import StorageError, UsageError
from .envelope import workspace_from_context
from .routing import workspace_local_dir_name

__all__ = [
    "DEFAULT_SESSIONS_DIR",
    "DEFAULT_TENANT_DIR",
    "TENANT_TOOL_WORK_DIR",
    "WorkspaceResolver",
    "WorkspaceStores",
    "tenant_resolver",
]

TENANT_TOOL_WORK_DIR: Final = "work"
"""The tenant-relative directory for shell working directories, uploads and tool output
(agentkit's ``TenantToolWorkDir``); :class:`WorkspaceStores` creates it in each tenant root."""

DEFAULT_TENANT_DIR: Final = "_default"
"""The directory :func:`tenant_resolver` gives a turn without a workspace key (timers, direct
library calls), so they never land in another tenant's root (agentkit's ``DefaultTenantDir``)."""

DEFAULT_SESSIONS_DIR: Final = "sessions"
"""The tenant-relative directory of the session files, unless another is given."""

WorkspaceResolver = Callable[[str], "str | os.PathLike[str]"]
"""Maps a workspace key (``""`` when the turn has none) to that tenant's root directory."""


def tenant_resolver(
    local_base: str | os.PathLike[str],
    *,
    tenants: Mapping[str, str | os.PathLike[str]] | None = None,
    omit_platform: bool = False,
    dialect: Dialect = "agentsession",
) -> WorkspaceResolver:
    """agentkit's ``workspace/tenant`` layout as a resolver.

    A key listed in ``tenants`` resolves to its pinned root; any other key to
    ``<local_base>/<workspace_local_dir_name(key, omit_platform, dialect=dialect)>``, and
    ``""`` to ``<local_base>/_default`` (:data:`DEFAULT_TENANT_DIR`). With
    ``dialect="agentkit"`` the directory names are agentkit's own (``slack:C001`` →
    ``slack_C001``), so the tree can be shared with an agentkit service; the default dialect's
    names never collide (``_`` is escaped).
    """
    base = os.path.abspath(os.fspath(local_base))
    pinned = {key: os.path.abspath(os.fspath(root)) for key, root in (tenants or {}).items()}
    workspace_local_dir_name("", dialect=dialect)  # checks the dialect now, not at first use

    def resolve(key: str) -> str:
        if key in pinned:
            return pinned[key]
        name = workspace_local_dir_name(key, omit_platform, dialect=dialect)
        return os.path.join(base, name or DEFAULT_TENANT_DIR)

    return resolve


def _relative_dir(value: str, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{what} must be a non-blank relative path")
    norm = os.path.normpath(value)
    if os.path.isabs(norm) or norm == ".." or norm.startswith(".." + os.sep):
        raise UsageError(f"{what} must stay inside the tenant root, not {value!r}")
    return norm


class WorkspaceStores:
    """One JSONL store per tenant workspace, its directory resolved through ``resolve``.

    ``resolve`` maps a workspace key to the tenant root (see :func:`tenant_resolver`). Each
    tenant's sessions live in ``<root>/<sessions_dir>`` (default ``sessions``; ``.`` is the
    root itself), which must stay inside the root; ``work_dir`` (default ``work``,
    :data:`TENANT_TOOL_WORK_DIR`; ``None`` for none) is created beside it. Directories are
    created owner-only. ``dialect`` and ``store_options`` are passed to every
    :class:`~agentsession.backends.jsonl.JsonlStore`. Thread-safe; :meth:`close` closes every
    store opened.
    """

    def __init__(
        self,
        resolve: WorkspaceResolver,
        *,
        sessions_dir: str = DEFAULT_SESSIONS_DIR,
        work_dir: str | None = TENANT_TOOL_WORK_DIR,
        dialect: Dialect = "agentsession",
        **store_options: Any,
    ) -> None:
        if not callable(resolve):
            raise UsageError("resolve must be a callable from a workspace key to a directory")
        self._resolve = resolve
        self.sessions_dir = _relative_dir(sessions_dir, "sessions_dir")
        """The tenant-relative directory of the session files."""
        self.work_dir = None if work_dir is None else _relative_dir(work_dir, "work_dir")
        """The tenant-relative tool work directory created beside it, if any."""
        self.dialect: Dialect = dialect
        """The dialect of every store (see :class:`~agentsession.backends.jsonl.JsonlStore`)."""
        self._options = dict(store_options)
        self._stores: dict[str, JsonlStore] = {}
        self._lock = threading.Lock()
        self._closed = False

    def tenant_root(self, workspace: str | None = None) -> str:
        """The absolute root directory of ``workspace`` (default: the current envelope's,
        :func:`~agentsession.chat.envelope.workspace_from_context`)."""
        key = workspace_from_context() if workspace is None else workspace
        if not isinstance(key, str):
            raise UsageError(f"a workspace key must be a string, not {type(key).__name__}")
        root = self._resolve(key)
        if not isinstance(root, (str, os.PathLike)) or not os.fspath(root):
            raise UsageError(f"the resolver gave no directory for workspace {key!r}")
        return os.path.abspath(os.fspath(root))

    def directory(self, workspace: str | None = None) -> str:
        """The absolute session directory of ``workspace`` (nothing is created)."""
        return os.path.normpath(os.path.join(self.tenant_root(workspace), self.sessions_dir))

    def store(self, workspace: str | None = None) -> JsonlStore:
        """The store of ``workspace`` (default: the current envelope's), opened on first use:
        the session and work directories are created, and the session directory, once
        symbolic links are resolved, must lie inside the tenant root."""
        root = self.tenant_root(workspace)
        directory = os.path.normpath(os.path.join(root, self.sessions_dir))
        for path in filter(None, (directory, self.work_dir and os.path.join(root, self.work_dir))):
            try:
                os.makedirs(path, mode=0o700, exist_ok=True)
            except OSError as exc:
                raise StorageError(f"cannot create {path}: {exc}") from exc
        real_root = os.path.realpath(root)
        real = os.path.realpath(directory)
        if real != real_root and not real.startswith(real_root + os.sep):
            raise StorageError(
                f"the session directory {directory} resolves to {real}, outside the tenant "
                f"root {real_root}; refusing to use it"
            )
        with self._lock:
            if self._closed:
                raise UsageError("these workspace stores are closed")
            found = self._stores.get(real)
            if found is None:
                found = self._stores[real] = JsonlStore(real, dialect=self.dialect, **self._options)
            return found

    def get(self, session_id: str, workspace: str | None = None) -> JsonlSession:
        """``store(workspace).get(session_id)``: the session in the tenant's store."""
        found = self.store(workspace).get(session_id)
        assert isinstance(found, JsonlSession)
        return found

    def close(self) -> None:
        """Close every store opened; later calls to :meth:`store` raise :class:`UsageError`."""
        with self._lock:
            self._closed = True
            stores, self._stores = list(self._stores.values()), {}
        for opened in stores:
            opened.close()

    def __enter__(self) -> WorkspaceStores:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
