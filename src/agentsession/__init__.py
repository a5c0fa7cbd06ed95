"""agentsession: durable, crash-safe sessions for LLM agents.

One append-only event log per conversation; the model-visible history, run state and crash
recovery are derived from it. Start with :func:`open_store`.

This namespace is the core surface. Event payload types and type constants are in
:mod:`agentsession.events`; the chat layer (routing, the turn envelope, ``/new``) is
:mod:`agentsession.chat`; opt-in storage and media policies are :mod:`agentsession.media`; the
conformance suite for backends is :mod:`agentsession.testing`; the async API is
:mod:`agentsession.aio` (``open_async_store``); conversions to and from the model APIs are
:mod:`agentsession.providers`; child sessions and the session record are
:mod:`agentsession.children`; the turn id and run context helpers are
:mod:`agentsession.context`. :func:`copy_store` copies sessions, and everything stored beside
them, from one store to another.
"""

from __future__ import annotations

from . import events
from .contract import (
    Durability,
    IncompleteTurn,
    RecoveryReport,
    Session,
    SessionInfo,
    Store,
    StoreRecoveryReport,
)
from .copying import CopyReport, copy_store
from .errors import (
    ConflictError,
    CorruptLogError,
    DuplicateSession,
    EncryptionError,
    LeaseLost,
    LockTimeout,
    OutcomeUnknown,
    SessionError,
    SessionExpired,
    SessionNotFound,
    StorageError,
    StoreUnavailable,
    UsageError,
)
from .events import Event
from .fencing import Lease
from .locks import TurnLock
from .messages import (
    AttachmentRef,
    FilePart,
    ImagePart,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolCall,
    ToolResult,
)
from .recorder import Step, Turn
from .recovery import repair_incomplete, scan_incomplete
from .runstate import RunState, load_run_state
from .session import BaseSession
from .store import BaseStore, open_store

__version__ = "0.1.0"

__all__ = [
    "AttachmentRef",
    "BaseSession",
    "BaseStore",
    "ConflictError",
    "CopyReport",
    "CorruptLogError",
    "DuplicateSession",
    "Durability",
    "Event",
    "FilePart",
    "ImagePart",
    "IncompleteTurn",
    "EncryptionError",
    "Lease",
    "LeaseLost",
    "LockTimeout",
    "OutcomeUnknown",
    "Message",
    "Part",
    "RecoveryReport",
    "RunState",
    "Session",
    "SessionError",
    "SessionExpired",
    "SessionInfo",
    "SessionNotFound",
    "Step",
    "StorageError",
    "Store",
    "StoreRecoveryReport",
    "StoreUnavailable",
    "TextPart",
    "ThinkingPart",
    "ToolCall",
    "ToolResult",
    "Turn",
    "TurnLock",
    "UsageError",
    "__version__",
    "copy_store",
    "events",
    "load_run_state",
    "open_store",
    "repair_incomplete",
    "scan_incomplete",
]
