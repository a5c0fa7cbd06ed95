"""Recording what an agent loop does: ``session.turn()`` and ``turn.step()``, and the plain
``append_*`` functions with agentkit's names.

::

    with session.turn(agent="coder", user="U456") as turn:      # turn/start ... turn/end
        turn.user("Fix the failing test")
        with turn.step() as step:                                # step/start ... step/end
            step.assistant("Looking.", tool_calls=[call])
            step.tool_result("c1", "read", "...")
            step.usage(input_tokens=1200, output_tokens=80)
        turn.assistant("Fixed.")

If an exception escapes a step or the turn, the recorder answers the unanswered tool calls with
an error result, closes the open step and the turn (``turn/end`` carries the exception's type
and message) and lets the exception propagate. A process that dies outright leaves the turn
open; :mod:`agentsession.recovery` repairs it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .envelope import agent_id_from_context, metadata_from_context, user_id_from_context
from .errors import UsageError
from .events import (
    ASSISTANT_MESSAGE,
    COMPACTION,
    OVERFLOW_RECOVERY,
    RETRY_END,
    RETRY_START,
    RUN_FINISH,
    SESSION_RECOVERY,
    SKILL_LOAD,
    STEP_END,
    STEP_START,
    SUBAGENT_END,
    SUBAGENT_START,
    SUMMARIZATION_RETRY_END,
    SUMMARIZATION_RETRY_START,
    TODO_UPDATE,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_CONTINUE,
    TURN_END,
    TURN_START,
    USAGE,
    USER_MESSAGE,
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
from .messages import Message, Part, ToolCall, ToolResult
from .sanitize import METADATA_LOGICAL_CHARS, estimate_logical_chars, sanitize_for_storage

if TYPE_CHECKING:
    from types import TracebackType

    from .session import Session

__all__ = [
    "Step",
    "Turn",
    "append_auto_retry_end",
    "append_auto_retry_start",
    "append_compaction",
    "append_message",
    "append_overflow_recovery",
    "append_run_finish",
    "append_session_recovery",
    "append_skill_load",
    "append_step_end",
    "append_step_start",
    "append_subagent_end",
    "append_subagent_start",
    "append_summarization_retry_end",
    "append_summarization_retry_start",
    "append_todo_update",
    "append_tool_call",
    "append_tool_result",
    "append_turn_continue",
    "append_turn_end",
    "append_turn_start",
    "append_usage",
    "error_tool_result",
]


# ---------------------------------------------------------------------------------------------
# The plain functions (agentkit's names in Python spelling). Each appends one event and returns
# its seq.


def append_message(
    session: Session,
    agent: str,
    type: str,
    msg: Message,
    *,
    user: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    max_text_bytes: int = 0,
) -> int:
    """Append a message event. User and assistant messages are sanitised for storage first
    (:func:`~agentsession.sanitize.sanitize_for_storage`); when that shrank them, their size
    before is kept in ``meta["logical_chars"]``. A user message is attributed to ``user``
    (default: the envelope's actor) and carries ``metadata`` (default: the envelope's)."""
    meta: dict[str, Any] = {}
    if type in (USER_MESSAGE, ASSISTANT_MESSAGE):
        logical = estimate_logical_chars(msg)
        msg = sanitize_for_storage(msg, max_text_bytes)
        if type == USER_MESSAGE:
            extra = metadata if metadata is not None else metadata_from_context()
            if extra:
                meta.update(extra)
        if logical > 0 and logical > estimate_logical_chars(msg):
            meta[METADATA_LOGICAL_CHARS] = logical  # the computed size wins over platform keys
    stamped_user = ""
    if type == USER_MESSAGE:
        stamped_user = user if user is not None else user_id_from_context()
    return session.append(Event.new(type, msg, agent=agent, user=stamped_user, meta=meta))


def _append(session: Session, agent: str, type: str, payload: Any) -> int:
    return session.append(Event.new(type, payload, agent=agent))


def append_turn_start(session: Session, agent: str) -> int:
    """``turn/start``."""
    return _append(session, agent, TURN_START, TurnStart())


def append_turn_end(session: Session, agent: str, steps: int) -> int:
    """``turn/end {steps}``."""
    return _append(session, agent, TURN_END, TurnEnd(steps=steps))


def append_step_start(session: Session, agent: str, step: int) -> int:
    """``step/start {step}``."""
    return _append(session, agent, STEP_START, StepStart(step=step))


def append_step_end(session: Session, agent: str, step: int) -> int:
    """``step/end {step}``."""
    return _append(session, agent, STEP_END, StepEnd(step=step))


def append_tool_call(session: Session, agent: str, call: ToolCall) -> int:
    """``tool/call``: the call as the runtime starts it."""
    return _append(session, agent, TOOL_CALL, call)


def append_tool_result(session: Session, agent: str, result: ToolResult) -> int:
    """``tool/result``: a tool's answer."""
    return _append(session, agent, TOOL_RESULT, result)


def append_usage(session: Session, agent: str, usage: Usage) -> int:
    """``usage``: tokens of one model call."""
    return _append(session, agent, USAGE, usage)


def append_todo_update(session: Session, agent: str, items: Sequence[Todo]) -> int:
    """``todo/update``: the whole todo list."""
    return _append(session, agent, TODO_UPDATE, TodoUpdate(items=list(items)))


def append_run_finish(session: Session, agent: str, finish: RunFinish) -> int:
    """``run/finish``."""
    return _append(session, agent, RUN_FINISH, finish)


def append_auto_retry_start(session: Session, agent: str, data: RetryStart) -> int:
    """``retry/start``."""
    return _append(session, agent, RETRY_START, data)


def append_auto_retry_end(session: Session, agent: str, data: RetryEnd) -> int:
    """``retry/end``."""
    return _append(session, agent, RETRY_END, data)


def append_summarization_retry_start(
    session: Session, agent: str, data: SummarizationRetryStart
) -> int:
    """``summarization/retry/start``."""
    return _append(session, agent, SUMMARIZATION_RETRY_START, data)


def append_summarization_retry_end(
    session: Session, agent: str, data: SummarizationRetryEnd
) -> int:
    """``summarization/retry/end``."""
    return _append(session, agent, SUMMARIZATION_RETRY_END, data)


def append_overflow_recovery(session: Session, agent: str, data: OverflowRecovery) -> int:
    """``overflow/recovery``."""
    return _append(session, agent, OVERFLOW_RECOVERY, data)


def append_turn_continue(session: Session, agent: str, data: TurnContinue) -> int:
    """``turn/continue``: its messages are model-visible."""
    return _append(session, agent, TURN_CONTINUE, data)


def append_skill_load(session: Session, agent: str, skill: SkillLoad) -> int:
    """``skill/load``."""
    return _append(session, agent, SKILL_LOAD, skill)


def append_subagent_start(session: Session, agent: str, data: SubagentStart) -> int:
    """``subagent/start``."""
    return _append(session, agent, SUBAGENT_START, data)


def append_subagent_end(session: Session, agent: str, data: SubagentEnd) -> int:
    """``subagent/end``."""
    return _append(session, agent, SUBAGENT_END, data)


def append_session_recovery(session: Session, agent: str, data: SessionRecovery) -> int:
    """``session/recovery``."""
    return _append(session, agent, SESSION_RECOVERY, data)


def append_compaction(session: Session, agent: str, data: Compaction) -> int:
    """``session/compaction``: a marker; prefer ``session.compact()``, which picks the cut."""
    return _append(session, agent, COMPACTION, data)


def error_tool_result(call: ToolCall, exc: BaseException) -> ToolResult:
    """The result recorded for a call whose step or turn failed with ``exc``."""
    detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return ToolResult(
        call_id=call.id,
        name=call.name,
        content=f"tool call did not complete: the turn failed with {detail}",
        is_error=True,
        audit={"decision": "error"},
    )


# ---------------------------------------------------------------------------------------------
# The context managers.


class _Recording:
    """What turns and steps share: the helpers that append one event each."""

    _turn: Turn

    def user(self, content: str | Part | Sequence[Part] | Message, *, name: str = "") -> int:
        """Record a user message (sanitised; attributed to the turn's user)."""
        turn = self._turn
        msg = content if isinstance(content, Message) else Message.user(content, name=name)
        if msg.role != "user":
            raise UsageError(f"turn.user() needs a user message, not role {msg.role!r}")
        return append_message(
            turn.session, turn.agent, USER_MESSAGE, msg, user=turn.user_id, metadata=turn.metadata
        )

    def assistant(
        self,
        content: str | Part | Sequence[Part] | Message | None = None,
        *,
        tool_calls: Iterable[ToolCall] = (),
        thinking: str | None = None,
        signature: str = "",
    ) -> int:
        """Record an assistant message; its tool calls await results."""
        turn = self._turn
        if isinstance(content, Message):
            msg = content
        else:
            msg = Message.assistant(
                content, tool_calls=tool_calls, thinking=thinking, signature=signature
            )
        if msg.role != "assistant":
            raise UsageError(f"assistant() needs an assistant message, not role {msg.role!r}")
        seq = append_message(turn.session, turn.agent, ASSISTANT_MESSAGE, msg)
        turn._calls.extend(msg.tool_calls)
        return seq

    def tool_call(self, call: ToolCall) -> int:
        """Record that the runtime started a tool call (``tool/call``)."""
        return append_tool_call(self._turn.session, self._turn.agent, call)

    def tool_result(
        self,
        call_id: str | ToolResult,
        name: str = "",
        content: str = "",
        *,
        is_error: bool = False,
        audit: Mapping[str, str] | None = None,
    ) -> int:
        """Record a tool's result (pass a :class:`ToolResult` or its fields)."""
        turn = self._turn
        if isinstance(call_id, ToolResult):
            result = call_id
        else:
            result = ToolResult(call_id, name, content, is_error, dict(audit or {}))
        seq = append_tool_result(turn.session, turn.agent, result)
        turn._answer(result.call_id)
        return seq

    def usage(
        self,
        input_tokens: int = 0,
        output_tokens: int = 0,
        total_tokens: int | None = None,
        *,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> int:
        """Record token usage of one model call (``total_tokens`` defaults to input+output)."""
        total = input_tokens + output_tokens if total_tokens is None else total_tokens
        usage = Usage(input_tokens, output_tokens, total, cache_read_tokens, cache_write_tokens)
        return append_usage(self._turn.session, self._turn.agent, usage)

    def todos(self, items: Sequence[Todo]) -> int:
        """Record the whole todo list as it is now."""
        return append_todo_update(self._turn.session, self._turn.agent, items)

    def finish(self, status: str = "completed", summary: str = "") -> int:
        """Record that the agent declared the run finished (``completed`` or ``blocked``)."""
        if status not in ("completed", "blocked"):
            raise UsageError(f"finish status must be 'completed' or 'blocked', not {status!r}")
        return append_run_finish(self._turn.session, self._turn.agent, RunFinish(status, summary))

    def retry_start(
        self, attempt: int, max_attempts: int, delay_ms: int = 0, error_message: str = ""
    ) -> int:
        """Record that a failed model call is retried."""
        data = RetryStart(attempt, max_attempts, delay_ms, error_message)
        return append_auto_retry_start(self._turn.session, self._turn.agent, data)

    def retry_end(self, success: bool, attempt: int, final_error: str = "") -> int:
        """Record the end of retrying."""
        data = RetryEnd(success, attempt, final_error)
        return append_auto_retry_end(self._turn.session, self._turn.agent, data)

    def summarization_retry_start(
        self, attempt: int, max_attempts: int, delay_ms: int = 0, error_message: str = ""
    ) -> int:
        """Record that a failed summarisation call is retried."""
        data = SummarizationRetryStart(attempt, max_attempts, delay_ms, error_message)
        return append_summarization_retry_start(self._turn.session, self._turn.agent, data)

    def summarization_retry_end(self, success: bool, attempt: int, final_error: str = "") -> int:
        """Record the end of summarisation retrying."""
        data = SummarizationRetryEnd(success, attempt, final_error)
        return append_summarization_retry_end(self._turn.session, self._turn.agent, data)

    def overflow_recovery(self, applied: int, reason: str = "", error: str = "") -> int:
        """Record that the context overflowed and was shrunk."""
        data = OverflowRecovery(applied, reason, error)
        return append_overflow_recovery(self._turn.session, self._turn.agent, data)

    def skill_load(
        self, name: str, body: str, *, description: str = "", resource_base: str = ""
    ) -> int:
        """Record that a skill was loaded (model-visible after the tool result that loaded it)."""
        data = SkillLoad(name, description, body, resource_base)
        return append_skill_load(self._turn.session, self._turn.agent, data)

    def continue_turn(self, segment: int, reason: str, *, messages: Sequence[Message] = ()) -> int:
        """Record that the turn continues in a new segment; ``messages`` are model-visible."""
        turn = self._turn
        data = TurnContinue(segment, reason, turn.steps, list(messages))
        return append_turn_continue(turn.session, turn.agent, data)

    def subagent_start(
        self, agent: str, session: str, task: str, *, async_: bool = False, job_id: str = ""
    ) -> int:
        """Record that work was delegated to a subagent running in ``session``."""
        data = SubagentStart(agent, session, task, async_, job_id)
        return append_subagent_start(self._turn.session, self._turn.agent, data)

    def subagent_end(
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
        """Record that a subagent finished."""
        data = SubagentEnd(agent, session, status, summary, steps, error, job_id)
        return append_subagent_end(self._turn.session, self._turn.agent, data)


class Step(_Recording):
    """One model call and its tool calls, between ``step/start`` and ``step/end``."""

    def __init__(self, turn: Turn, number: int) -> None:
        self._turn = turn
        self.number = number
        """Step number within the turn, from 0."""
        self._open = False

    def __enter__(self) -> Step:
        turn = self._turn
        if turn._step is not None:
            raise UsageError(f"step {turn._step.number} is still open; steps do not nest")
        append_step_start(turn.session, turn.agent, self.number)
        self._open = True
        turn._step = self
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        turn = self._turn
        if exc is not None:
            turn._answer_open_calls(exc)
        self.close()

    def close(self) -> None:
        """Write ``step/end`` (once)."""
        if not self._open:
            return
        turn = self._turn
        self._open = False
        turn._step = None
        append_step_end(turn.session, turn.agent, self.number)
        turn.steps += 1


class Turn(_Recording):
    """One turn of a conversation, between ``turn/start`` and ``turn/end``.

    Made by ``session.turn()``. Helpers on the turn record outside any step; ``turn.step()``
    opens a step.
    """

    def __init__(
        self,
        session: Session,
        agent: str | None = None,
        user: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        self._turn = self
        self.session = session
        """The session being recorded into."""
        self.agent = agent if agent is not None else agent_id_from_context()
        """The agent running the turn (default: the envelope's)."""
        self.user_id = user if user is not None else user_id_from_context()
        """The end user the turn answers (default: the envelope's actor)."""
        self.metadata = dict(metadata) if metadata is not None else None
        """Platform metadata copied onto user messages (default: the envelope's)."""
        self.steps = 0
        """Steps completed so far."""
        self.start_seq = 0
        """Seq of this turn's ``turn/start``."""
        self._step: Step | None = None
        self._calls: list[ToolCall] = []
        self._open = False

    def __enter__(self) -> Turn:
        if self._open:
            raise UsageError("this turn is already open")
        self.start_seq = append_turn_start(self.session, self.agent)
        self._open = True
        return self

    def step(self) -> Step:
        """A new step (use as a context manager)."""
        if not self._open:
            raise UsageError("open the turn (with session.turn(...)) before its steps")
        return Step(self, self.steps)

    def _answer(self, call_id: str) -> None:
        for i, call in enumerate(self._calls):
            if call.id == call_id:
                del self._calls[i]
                return

    def _answer_open_calls(self, exc: BaseException) -> None:
        calls, self._calls = self._calls, []
        for call in calls:
            append_tool_result(self.session, self.agent, error_tool_result(call, exc))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._open:
            return
        try:
            if exc is not None:
                self._answer_open_calls(exc)
            if self._step is not None:
                self._step.close()
        finally:
            self._open = False
            error = None if exc is None else TurnError(type(exc).__name__, str(exc))
            self.session.append(
                Event.new(TURN_END, TurnEnd(steps=self.steps, error=error), agent=self.agent)
            )
