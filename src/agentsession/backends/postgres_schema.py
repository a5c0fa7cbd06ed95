"""The PostgreSQL tables and their migrations: moved to
:mod:`agentsession.backends.postgres.schema`; this path keeps working."""

from __future__ import annotations

from .postgres.schema import (
    LATEST_VERSION,
    MIGRATIONS,
    READABLE_AS_IT_IS,
    TAIL_EVENTS,
    Migration,
    Statements,
    apply_migrations,
    schema_version,
)

__all__ = [
    "LATEST_VERSION",
    "TAIL_EVENTS",
    "MIGRATIONS",
    "READABLE_AS_IT_IS",
    "Migration",
    "Statements",
    "apply_migrations",
    "schema_version",
]
