"""Checks that a message list is what model providers accept.

The rule every provider enforces, in its strictest common form: each tool call of an assistant
message is answered, before the next user, system or assistant message, by exactly one tool
result with its id; and no tool result appears without a call before it.

An id may be used again once its call is answered (a model server that names every call
``call_0``), and two calls of one message may share one: results pair with calls by id, first
come first served, as ``messages()`` pairs them (the converters tell two calls of one id
apart by tool name). The APIs that want each id once per request
get a fresh id for each later use from the converters of :mod:`agentsession.providers`, so a
history valid here converts to a request each provider's own check (``anthropic_errors``,
``openai_chat_errors``...) accepts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from .errors import UsageError
from .messages import Message

__all__ = ["assert_provider_valid", "provider_errors"]


def provider_errors(messages: Sequence[Message]) -> list[str]:
    """Every way ``messages`` breaks the tool-call pairing rule, as readable sentences
    (an empty list means valid)."""
    errors: list[str] = []
    waiting: Counter[str] = Counter()
    opened_at = -1

    def unanswered(before: int) -> None:
        for call_id, count in waiting.items():
            if count > 0:
                errors.append(
                    f"message {opened_at}: tool call {call_id!r} has no result before "
                    f"{'the end' if before < 0 else f'message {before}'}"
                )
        waiting.clear()

    for i, msg in enumerate(messages):
        if msg.role == "tool":
            if not msg.tool_results:
                errors.append(f"message {i}: tool message without results")
            for result in msg.tool_results:
                if waiting[result.call_id] > 0:
                    waiting[result.call_id] -= 1
                else:
                    errors.append(
                        f"message {i}: tool result {result.call_id!r} answers no open call"
                    )
            continue
        unanswered(i)
        if msg.tool_results:
            errors.append(f"message {i}: {msg.role} message carries tool results")
        if msg.tool_calls:
            if msg.role != "assistant":
                errors.append(f"message {i}: {msg.role} message carries tool calls")
            waiting.update(call.id for call in msg.tool_calls)
            opened_at = i
    unanswered(-1)
    return errors


def assert_provider_valid(messages: Sequence[Message]) -> None:
    """Raise :class:`~agentsession.errors.UsageError` listing the problems when ``messages``
    would be rejected by a provider."""
    errors = provider_errors(messages)
    if errors:
        raise UsageError("message list is not provider-valid: " + "; ".join(errors))
