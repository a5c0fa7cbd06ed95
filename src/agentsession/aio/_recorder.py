"""The recorder helpers of :class:`~agentsession.aio.AsyncTurn` and
:class:`~agentsession.aio.AsyncStep`: one coroutine per helper of the sync
:class:`~agentsession.Turn` and :class:`~agentsession.Step`, each calling it (the event is built,
checked and stamped there, once). Each returns the seq, or 0 while a batched step buffers it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial

from ..events import Todo
from ..messages import Message, Part, ToolCall, ToolResult
from ..recorder import Step, Turn

__all__ = ["AsyncRecording"]


class AsyncRecording:
    """What async turns and steps share: the helpers, each a coroutine around the sync one."""

    _recording: Turn | Step

    async def _record(self, op: str, fn: Callable[[], int], *, user_message: bool = False) -> int:
        raise NotImplementedError

    async def user(self, content: str | Part | Sequence[Part] | Message, *, name: str = "") -> int:
        """Record a user message (:meth:`agentsession.Turn.user`)."""
        helper = partial(self._recording.user, content, name=name)
        return await self._record("turn.user", helper, user_message=True)

    async def assistant(
        self,
        content: str | Part | Sequence[Part] | Message | None = None,
        *,
        tool_calls: Iterable[ToolCall] = (),
        thinking: str | None = None,
        signature: str = "",
    ) -> int:
        """Record an assistant message; its tool calls await results
        (:meth:`agentsession.Turn.assistant`)."""
        helper = partial(
            self._recording.assistant,
            content,
            tool_calls=tool_calls,
            thinking=thinking,
            signature=signature,
        )
        return await self._record("turn.assistant", helper)

    async def tool_call(self, call: ToolCall) -> int:
        """Record that the runtime started a tool call (:meth:`agentsession.Turn.tool_call`)."""
        return await self._record("turn.tool_call", partial(self._recording.tool_call, call))

    async def tool_result(
        self,
        call_id: str | ToolResult,
        name: str = "",
        content: str = "",
        *,
        is_error: bool = False,
        audit: Mapping[str, str] | None = None,
    ) -> int:
        """Record a tool's result (:meth:`agentsession.Turn.tool_result`)."""
        helper = partial(
            self._recording.tool_result, call_id, name, content, is_error=is_error, audit=audit
        )
        return await self._record("turn.tool_result", helper)

    async def usage(
        self,
        input_tokens: int = 0,
        output_tokens: int = 0,
        total_tokens: int | None = None,
        *,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
    ) -> int:
        """Record token usage of one model call (:meth:`agentsession.Turn.usage`)."""
        helper = partial(
            self._recording.usage,
            input_tokens,
            output_tokens,
            total_tokens,
            cache_read_tokens=cache_read_tokens,
            cache_write_tokens=cache_write_tokens,
            reasoning_tokens=reasoning_tokens,
        )
        return await self._record("turn.usage", helper)

    async def todos(self, items: Sequence[Todo]) -> int:
        """Record the whole todo list as it is now (:meth:`agentsession.Turn.todos`)."""
        return await self._record("turn.todos", partial(self._recording.todos, items))

    async def finish(self, status: str = "completed", summary: str = "") -> int:
        """Record that the agent declared the run finished (:meth:`agentsession.Turn.finish`)."""
        return await self._record("turn.finish", partial(self._recording.finish, status, summary))

    async def retry_start(
        self, attempt: int, max_attempts: int, delay_ms: int = 0, error_message: str = ""
    ) -> int:
        """Record that a failed model call is retried (:meth:`agentsession.Turn.retry_start`)."""
        helper = partial(
            self._recording.retry_start, attempt, max_attempts, delay_ms, error_message
        )
        return await self._record("turn.retry_start", helper)

    async def retry_end(self, success: bool, attempt: int, final_error: str = "") -> int:
        """Record the end of retrying (:meth:`agentsession.Turn.retry_end`)."""
        helper = partial(self._recording.retry_end, success, attempt, final_error)
        return await self._record("turn.retry_end", helper)

    async def summarization_retry_start(
        self, attempt: int, max_attempts: int, delay_ms: int = 0, error_message: str = ""
    ) -> int:
        """Record that a failed summarisation call is retried
        (:meth:`agentsession.Turn.summarization_retry_start`)."""
        helper = partial(
            self._recording.summarization_retry_start,
            attempt,
            max_attempts,
            delay_ms,
            error_message,
        )
        return await self._record("turn.summarization_retry_start", helper)

    async def summarization_retry_end(
        self, success: bool, attempt: int, final_error: str = ""
    ) -> int:
        """Record the end of summarisation retrying
        (:meth:`agentsession.Turn.summarization_retry_end`)."""
        helper = partial(self._recording.summarization_retry_end, success, attempt, final_error)
        return await self._record("turn.summarization_retry_end", helper)

    async def overflow_recovery(self, applied: int, reason: str = "", error: str = "") -> int:
        """Record that the context overflowed and was shrunk
        (:meth:`agentsession.Turn.overflow_recovery`)."""
        helper = partial(self._recording.overflow_recovery, applied, reason, error)
        return await self._record("turn.overflow_recovery", helper)

    async def skill_load(
        self, name: str, body: str, *, description: str = "", resource_base: str = ""
    ) -> int:
        """Record that a skill was loaded (:meth:`agentsession.Turn.skill_load`)."""
        helper = partial(
            self._recording.skill_load,
            name,
            body,
            description=description,
            resource_base=resource_base,
        )
        return await self._record("turn.skill_load", helper)

    async def continue_turn(
        self, segment: int, reason: str, *, messages: Sequence[Message] = ()
    ) -> int:
        """Record that the turn continues in a new segment
        (:meth:`agentsession.Turn.continue_turn`)."""
        helper = partial(self._recording.continue_turn, segment, reason, messages=messages)
        return await self._record("turn.continue_turn", helper)

    async def subagent_start(
        self, agent: str, session: str, task: str, *, async_: bool = False, job_id: str = ""
    ) -> int:
        """Record that work was delegated to a subagent
        (:meth:`agentsession.Turn.subagent_start`)."""
        helper = partial(
            self._recording.subagent_start, agent, session, task, async_=async_, job_id=job_id
        )
        return await self._record("turn.subagent_start", helper)

    async def subagent_end(
        self,
        agent: str,
        session: str,
        status: str,
        *,
        summary: str = "",
        steps: int = 0,
        error: str = "",
        job_id: str = "",
    ) -> int:
        """Record that a subagent finished (:meth:`agentsession.Turn.subagent_end`)."""
        helper = partial(
            self._recording.subagent_end,
            agent,
            session,
            status,
            summary=summary,
            steps=steps,
            error=error,
            job_id=job_id,
        )
        return await self._record("turn.subagent_end", helper)
