"""agentsession: durable, crash-safe sessions for LLM agents.

One append-only event log per conversation; the model-visible history, run state, crash
recovery and routing are derived from it. Start with :func:`open_store`.
"""

from __future__ import annotations

from .derive import (
    INTERRUPTED_TOOL_RESULT_TEXT,
    IndexedMessage,
    index_messages_for_compaction,
    interrupted_tool_result,
)
from .errors import (
    ConflictError,
    CorruptLogError,
    DuplicateSession,
    LockTimeout,
    SessionError,
    SessionExpired,
    SessionNotFound,
    StorageError,
    StoreUnavailable,
    UsageError,
)
from .events import (
    Compaction,
    Event,
    OverflowRecovery,
    RetryEnd,
    RetryStart,
    RunFinish,
    SessionRecovery,
    SkillLoad,
    StepEnd,
    StepStart,
    SubagentEnd,
    SubagentStart,
    SummarizationRetryEnd,
    SummarizationRetryStart,
    Todo,
    TodoUpdate,
    TurnContinue,
    TurnEnd,
    TurnError,
    TurnStart,
    Usage,
)
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
from .session import BaseSession, BaseStore, Durability, Session, SessionInfo, Store
from .store import open_store
from .validation import assert_provider_valid, provider_errors

__version__ = "0.1.0"

__all__ = [
    "INTERRUPTED_TOOL_RESULT_TEXT",
    "AttachmentRef",
    "BaseSession",
    "BaseStore",
    "Compaction",
    "ConflictError",
    "CorruptLogError",
    "DuplicateSession",
    "Durability",
    "Event",
    "FilePart",
    "ImagePart",
    "IndexedMessage",
    "LockTimeout",
    "Message",
    "OverflowRecovery",
    "Part",
    "RetryEnd",
    "RetryStart",
    "RunFinish",
    "Session",
    "SessionError",
    "SessionExpired",
    "SessionInfo",
    "SessionNotFound",
    "SessionRecovery",
    "SkillLoad",
    "StepEnd",
    "StepStart",
    "StorageError",
    "Store",
    "StoreUnavailable",
    "SubagentEnd",
    "SubagentStart",
    "SummarizationRetryEnd",
    "SummarizationRetryStart",
    "TextPart",
    "ThinkingPart",
    "Todo",
    "TodoUpdate",
    "ToolCall",
    "ToolResult",
    "TurnContinue",
    "TurnEnd",
    "TurnError",
    "TurnStart",
    "Usage",
    "UsageError",
    "__version__",
    "assert_provider_valid",
    "index_messages_for_compaction",
    "interrupted_tool_result",
    "open_store",
    "provider_errors",
]
