"""Views of sessions for people, independent of how they are drawn.

:func:`transcript_rows` turns a session's events into neutral rows (plain values, no markup)
that the command line renders with Rich and a web page could render as HTML.
"""

from __future__ import annotations

from .transcript import (
    INTEGRATION_NAMESPACES,
    PREVIEW_CHARS,
    AnyRow,
    AssistantMessageRow,
    CompactionRow,
    DiscardRow,
    EventRow,
    ForkRow,
    MergeRow,
    RecoveryRow,
    Row,
    RunFinishRow,
    SkillLoadRow,
    StepEndRow,
    StepStartRow,
    SubagentEndRow,
    SubagentStartRow,
    TodoItemView,
    TodoRow,
    ToolCallRow,
    ToolCallView,
    ToolResultRow,
    TurnEndRow,
    TurnStartRow,
    UsageRow,
    UserMessageRow,
    speaker,
    transcript_rows,
)

__all__ = [
    "INTEGRATION_NAMESPACES",
    "PREVIEW_CHARS",
    "AnyRow",
    "AssistantMessageRow",
    "CompactionRow",
    "DiscardRow",
    "EventRow",
    "ForkRow",
    "MergeRow",
    "RecoveryRow",
    "Row",
    "RunFinishRow",
    "SkillLoadRow",
    "StepEndRow",
    "StepStartRow",
    "SubagentEndRow",
    "SubagentStartRow",
    "TodoItemView",
    "TodoRow",
    "ToolCallRow",
    "ToolCallView",
    "ToolResultRow",
    "TurnEndRow",
    "TurnStartRow",
    "UsageRow",
    "UserMessageRow",
    "speaker",
    "transcript_rows",
]
