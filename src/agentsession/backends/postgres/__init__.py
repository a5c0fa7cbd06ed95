"""The PostgreSQL backend: many workers on many machines sharing one database.

Opened by ``open_store("postgresql://user@host:5432/db?schema=agentsession")``; how it keeps
the storage contract is told in :mod:`agentsession.backends.postgres.store`. The modules,
lowest first: ``target`` (the URL, password scrubbing), ``schema`` (tables, migrations,
statements, the events table's hash partitions), ``connections`` (pools, fork handling, error
translation), ``replicas`` (read replicas and read-your-writes), ``storage`` (the session's
log), ``locks`` (turn locks), ``store`` (the store: catalog and meta) and ``aio`` (the async
API's native path).
"""

from __future__ import annotations

# The backend's public names are the store module's, listed once there.
from .store import *  # noqa: F403
from .store import __all__ as __all__
