"""``open_store``: one entry point that picks a backend from a URL-like string."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import unquote, urlsplit

from .errors import StoreUnavailable, UsageError
from .session import BaseStore

__all__ = ["open_store"]


def open_store(target: str | os.PathLike[str] | BaseStore, **options: Any) -> BaseStore:
    """Open a store.

    ``target`` is one of:

    * ``"memory:"`` — sessions in this process's memory;
    * a directory path, or ``"jsonl:///abs/dir"`` / ``"jsonl:relative/dir"`` — the JSONL store
      (the embedded default), created owner-only when missing;
    * ``"sqlite:///path/to.db"`` — one SQLite file;
    * ``"postgresql://user@host/db"`` (or ``postgres://``) — PostgreSQL (extra ``postgres``);
    * a store object, returned as it is.

    ``options`` go to the backend: ``durability`` (``"flush"`` or ``"fsync"``), ``ttl``
    (a ``timedelta``), ``max_cached_sessions``, ``cache_idle_ttl``, ``clock``,
    ``max_messages``; for JSONL ``on_corrupt`` (``"raise"`` or ``"quarantine"``); for SQLite
    ``busy_timeout`` (seconds a writer waits for another, default 30); for
    PostgreSQL ``schema``, ``pool_min_size``, ``pool_max_size``, ``lock_pool_max_size``,
    ``pool_timeout``, ``connect_timeout``, ``auto_migrate`` and ``prepare_threshold``.
    """
    if isinstance(target, BaseStore):
        if options:
            raise UsageError("options cannot be applied to a store object that is already open")
        return target
    if isinstance(target, os.PathLike):
        target = os.fspath(target)
    if not isinstance(target, str):
        raise UsageError(f"open_store needs a URL, a path or a store, not {type(target).__name__}")
    if not target.strip():
        raise UsageError("open_store needs a URL or a path (got an empty string)")
    scheme, sep, _ = target.partition(":")
    scheme = scheme.lower()
    if not sep or len(scheme) == 1 or "/" in scheme or "\\" in scheme:
        # A plain path (a one-letter "scheme" is a Windows drive).
        from .backends.jsonl import JsonlStore

        return JsonlStore(target, **options)
    if scheme == "memory":
        from .backends.memory import MemoryStore

        return MemoryStore(**options)
    if scheme in ("jsonl", "file"):
        from .backends.jsonl import JsonlStore

        return JsonlStore(_path_of(target, scheme), **options)
    if scheme == "sqlite":
        from .backends.sqlite import SqliteStore

        return SqliteStore(_path_of(target, scheme), **options)
    if scheme in ("postgresql", "postgres"):
        try:
            from .backends.postgres import PostgresStore
        except ImportError as exc:
            raise StoreUnavailable(
                "the PostgreSQL backend needs psycopg: pip install 'agentsession[postgres]' "
                f"({exc})"
            ) from exc
        return PostgresStore(target, **options)
    raise UsageError(
        f"unknown store URL scheme {scheme!r} in {target!r}: use a directory path, 'memory:', "
        "'jsonl:///dir', 'sqlite:///file.db' or 'postgresql://...'"
    )


def _path_of(url: str, scheme: str) -> str:
    """The filesystem path of ``jsonl:``/``sqlite:``/``file:`` URLs (``scheme:///abs``,
    ``scheme://relative`` or ``scheme:relative``)."""
    parts = urlsplit(url)
    # scheme://relative/dir puts the first segment in netloc.
    remote = parts.netloc and parts.netloc != "localhost"
    path = unquote(parts.netloc + parts.path if remote else parts.path)
    if not path:
        raise UsageError(f"{url!r} names no path: use {scheme}:///absolute/path or {scheme}:dir")
    return path
