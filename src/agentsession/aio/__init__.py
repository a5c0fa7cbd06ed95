"""The async API: the whole session API as coroutines and async context managers.

::

    from agentsession import ToolCall
    from agentsession.aio import open_async_store

    call = ToolCall("c1", "read", {"path": "test_app.py"})
    async with open_async_store("sessions/") as store:
        session = await store.get("slack:C001")
        async with store.lock(session.id, timeout=30):
            async with session.turn(agent="coder", user="U456") as turn:
                await turn.user("Fix the failing test")
                async with turn.step() as step:
                    await step.assistant("Looking.", tool_calls=[call])
                    await step.tool_result("c1", "read", "...")
                await turn.assistant("Fixed.")
            history = await session.messages()

It wraps the sync API and shares its semantics: each coroutine is one call of a method of
:class:`~agentsession.BaseStore`, :class:`~agentsession.BaseSession`,
:class:`~agentsession.Turn` or :class:`~agentsession.Step`, run inline on the event loop when it
cannot wait for long (the memory backend; a JSONL append at durability ``flush``; a read a JSONL
session's window serves), natively where the backend has async I/O (PostgreSQL's appends and
reads, on psycopg's ``AsyncConnectionPool``) and otherwise in a worker thread of the store's
own pool (fsync, SQLite, the rest of PostgreSQL, reads that may reach storage, recovery).
``docs/architecture.md`` ("The async API") lists the choice for each operation and backend,
with the measurements behind it.

* **Cancellation** never tears a write: cancelled while ``append_many`` runs, the batch is in
  the log whole or not at all by the time ``CancelledError`` arrives. A cancelled ``async with
  session.turn()`` block closes the turn as an exception does (``turn/end`` carries
  ``CancelledError``), shielded, then re-raises.
* **Context**: the turn id, run context and chat envelope are read from the calling task's
  context, also by work done in a worker thread; an open :class:`AsyncTurn` is the task's turn
  id. Turn locks belong to the task that took them.
* **Sharing**: ``store.sync`` and ``session.sync`` are the sync objects; sync and async code
  may use one store together.
* **Provider replies** are recorded with ``await reply.arecord(step)``
  (:meth:`agentsession.providers.ProviderReply.arecord`); ``reply.record(step)`` is the sync
  API's and raises ``TypeError`` for an async step rather than recording nothing.
"""

from __future__ import annotations

from ._backend import AsyncBackend, Call
from ._session import AsyncDelivery, AsyncSession, AsyncStep, AsyncTurn
from ._store import AsyncStore, AsyncTurnLock, open_async_store

__all__ = [
    "AsyncBackend",
    "AsyncDelivery",
    "AsyncSession",
    "AsyncStep",
    "AsyncStore",
    "AsyncTurn",
    "AsyncTurnLock",
    "Call",
    "open_async_store",
]
