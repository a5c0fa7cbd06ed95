"""The Redis backend: sessions as Redis Streams, on one server or a Redis Cluster.

Opened by ``open_store("redis://127.0.0.1:6379/0")`` (``rediss://`` for TLS,
``redis+cluster://host:port,...`` for a Cluster); how it keeps the storage contract is told in
:mod:`agentsession.backends.redis.store`. The modules, lowest first: ``scripts`` (the Lua
scripts), ``server`` (the URL, the client, key names, error translation), ``storage`` (the
session's log), ``index`` (the catalog and search index), ``store`` (catalog, meta, turn
locks, the store) and ``aio`` (the async API's native path).
"""

from __future__ import annotations

# The backend's public names are the store module's, listed once there.
from .store import *  # noqa: F403
from .store import __all__ as __all__
