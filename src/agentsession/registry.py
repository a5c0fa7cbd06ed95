"""The backend registry: which factory opens a store URL, and ``migrate_store``.

A URL scheme names a backend. The built-in schemes (``memory``, ``jsonl``/``file``,
``sqlite``, ``postgresql``/``postgres``, ``redis``/``rediss``/``redis+cluster``) map to a
``module:factory`` imported on first use; :func:`register_backend` adds a scheme in this
process, and an entry point in the group ``agentsession.backends`` (named after the scheme,
value ``module:factory``) adds one without importing the package. A plain path (no scheme,
or a one-letter one: a Windows drive) is the JSONL store.

This module knows URLs and factories, not stores: :func:`agentsession.store.open_store` calls
:func:`open_url` and checks what the factory returned, so the registry sits below
``store`` and ``store`` re-exports its names (``agentsession.store.register_backend``,
``migrate_store``, ``path_of``) without an import cycle.
"""

from __future__ import annotations

import builtins
import os
import threading
from collections.abc import Callable
from importlib import import_module
from typing import Any
from urllib.parse import unquote, urlsplit

from .errors import StoreUnavailable, UsageError

__all__ = ["migrate_store", "open_url", "path_of", "register_backend"]

_Factory = Callable[..., Any]
# What a backend provides: factory(url, **options) returns an open store (open_store refuses
# anything but a BaseStore; agentsession.store.StoreFactory is the precise type).

_BUILTIN: dict[str, str] = {
    "memory": "agentsession.backends.memory:open_memory",
    "jsonl": "agentsession.backends.jsonl:open_jsonl",
    "file": "agentsession.backends.jsonl:open_jsonl",
    "sqlite": "agentsession.backends.sqlite:open_sqlite",
    "postgresql": "agentsession.backends.postgres:open_postgres",
    "postgres": "agentsession.backends.postgres:open_postgres",
    "redis": "agentsession.backends.redis:open_redis",
    "rediss": "agentsession.backends.redis:open_redis",
    "redis+cluster": "agentsession.backends.redis:open_redis",
    "rediss+cluster": "agentsession.backends.redis:open_redis",
}
_registered: dict[str, _Factory] = {}
_registry_lock = threading.Lock()


def register_backend(scheme: str, factory: _Factory) -> None:
    """Make ``open_store("<scheme>:...")`` call ``factory(url, **options)``.

    Packages can also register without being imported, with an entry point in the group
    ``agentsession.backends`` named after the scheme (value ``module:factory``).
    """
    if not isinstance(scheme, str) or not scheme.isidentifier() or len(scheme) < 2:
        raise UsageError(f"a backend scheme must be an identifier of 2+ characters: {scheme!r}")
    with _registry_lock:
        _registered[scheme.lower()] = factory


def _load(target: str, scheme: str) -> _Factory:
    """Import the ``module:factory`` of a built-in scheme."""
    module_name, _, attr = target.partition(":")
    try:
        module = import_module(module_name)
    except ImportError as exc:
        if scheme in ("postgresql", "postgres"):
            raise StoreUnavailable(
                "the PostgreSQL backend needs psycopg: pip install 'agentsession[postgres]' "
                f"({exc})"
            ) from exc
        if scheme.startswith("redis"):
            raise StoreUnavailable(
                f"the Redis backend needs redis-py: pip install 'agentsession[redis]' ({exc})"
            ) from exc
        raise StoreUnavailable(f"the {scheme!r} backend could not be imported: {exc}") from exc
    factory: _Factory = getattr(module, attr)
    return factory


def _factory_for(scheme: str) -> _Factory | None:
    """The factory of ``scheme``: registered in this process, built in, or an entry point."""
    with _registry_lock:
        found = _registered.get(scheme)
    if found is not None:
        return found
    builtin = _BUILTIN.get(scheme)
    if builtin is not None:
        return _load(builtin, scheme)
    from importlib.metadata import entry_points  # third-party backends only: slow to import

    for entry in entry_points(group="agentsession.backends"):
        if entry.name.lower() == scheme:
            loaded: _Factory = entry.load()
            return loaded
    return None


def _has_schema(factory: _Factory) -> bool:
    """Whether the backend of ``factory`` has a schema: its module provides ``migrate``
    (the convention :func:`migrate_store` dispatches on)."""
    module = getattr(factory, "__module__", None)
    return isinstance(module, str) and callable(getattr(import_module(module), "migrate", None))


def _scheme_of(target: str) -> str | None:
    """The URL scheme of ``target`` (lower case), or None for a plain path (a one-letter
    "scheme" is a Windows drive)."""
    scheme, sep, _ = target.partition(":")
    if not sep or len(scheme) == 1 or "/" in scheme or "\\" in scheme:
        return None
    return scheme.lower()


def open_url(target: str | os.PathLike[str], **options: Any) -> object:
    """Call the factory of ``target``'s scheme (a plain path: the JSONL store's) with
    ``options``, ``read_only`` turned into what the backend takes (``create=False``, and
    ``read_only=True`` for a backend with a schema); returns what the factory returned.

    The work of :func:`agentsession.store.open_store` for a URL or a path, which checks the
    result and unlocks an encrypted store."""
    if isinstance(target, os.PathLike):
        target = os.fspath(target)
    if not isinstance(target, str):
        raise UsageError(f"open_store needs a URL, a path or a store, not {type(target).__name__}")
    if not target.strip():
        raise UsageError("open_store needs a URL or a path (got an empty string)")
    scheme = _scheme_of(target)
    if scheme is None:
        factory = _load(_BUILTIN["jsonl"], "jsonl")
    else:
        found = _factory_for(scheme)
        if found is None:
            raise UsageError(
                f"unknown store URL scheme {scheme!r} in {target!r}: use a directory path, "
                "'memory:', 'jsonl:///dir', 'sqlite:///relative.db', "
                "'sqlite:////absolute.db' or 'postgresql://...'"
            )
        factory = found
    if "read_only" in options:
        read_only = bool(options.pop("read_only"))
        if read_only:
            options["create"] = False
            if _has_schema(factory):
                options["read_only"] = True
    opened: object = factory(target, **options)
    return opened


def migrate_store(url: str, **options: Any) -> builtins.list[int]:
    """Apply pending schema migrations to the store at ``url``; returns the versions applied.

    Dispatches through the backend registry: a backend with a schema provides a module-level
    ``migrate(url, **options)`` beside its factory. Backends without a schema (memory, JSONL)
    have nothing to migrate and return ``[]``.
    """
    if not isinstance(url, str) or not url.strip():
        raise UsageError("migrate_store needs a store URL")
    scheme = _scheme_of(url)
    if scheme is None:
        return []
    factory = _factory_for(scheme)
    if factory is None:
        raise UsageError(f"unknown store URL scheme {scheme!r} in {url!r}")
    module = import_module(factory.__module__)
    migrate: Callable[..., builtins.list[int]] | None = getattr(module, "migrate", None)
    if migrate is None:
        return []
    return migrate(url, **options)


def path_of(url: str, scheme: str) -> str:
    """The filesystem path of ``jsonl:``/``sqlite:``/``file:`` URLs (``scheme:///abs``,
    ``scheme://relative`` or ``scheme:relative``)."""
    parts = urlsplit(url)
    # scheme://relative/dir puts the first segment in netloc.
    remote = parts.netloc and parts.netloc != "localhost"
    path = unquote(parts.netloc + parts.path if remote else parts.path)
    if not path:
        raise UsageError(f"{url!r} names no path: use {scheme}:///absolute/path or {scheme}:dir")
    return path
