"""The PostgreSQL backend: many workers on many machines sharing one database.

Opened by ``open_store("postgresql://user@host:5432/db?schema=agentsession")``; how it keeps
the storage contract is told in :mod:`agentsession.backends.postgres.store`. The package's
modules, lowest first: ``schema`` (tables, migrations, statements), ``store`` (the store).
"""

from __future__ import annotations

from .store import (
    DEFAULT_SCHEMA,
    PostgresLocker,
    PostgresSession,
    PostgresStore,
    migrate,
    open_postgres,
    turn_lock_key,
)

__all__ = [
    "DEFAULT_SCHEMA",
    "PostgresLocker",
    "PostgresSession",
    "PostgresStore",
    "migrate",
    "open_postgres",
    "turn_lock_key",
]
