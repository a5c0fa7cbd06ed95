"""The PostgreSQL tables and their migrations: moved to
:mod:`agentsession.backends.postgres.schema`; this path keeps working."""

from __future__ import annotations

# A shim: every public name of the new module, listed once there.
from .postgres.schema import *  # noqa: F403
from .postgres.schema import __all__ as __all__
