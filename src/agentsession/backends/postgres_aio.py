"""PostgreSQL for the async API: moved to :mod:`agentsession.backends.postgres.aio`; this path
keeps working."""

from __future__ import annotations

from .postgres.aio import PostgresAsyncBackend, PostgresHost, PostgresLog

__all__ = ["PostgresAsyncBackend", "PostgresHost", "PostgresLog"]
