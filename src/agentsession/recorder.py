"""Recording what an agent loop does: ``session.turn()`` and ``turn.step()``, the one recording
API (every helper appends one event through the session's append pipeline).

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

**What is refused.** A helper of a turn or step that is not open (never entered, or closed
already) raises :class:`~agentsession.errors.UsageError`: what it recorded would land outside
any turn or step. So does a tool result whose call id names no tool call awaiting a result (one
of the turn's calls not yet answered, or one an earlier turn left open, whose late result
replaces the interrupted stand-in): ``messages()`` would leave it out. The message lists the
open call ids.

**Batched steps.** ``session.turn(..., batch_steps=True)`` buffers everything recorded while a
step is open (its ``step/start``, every helper called on the step or on the turn, the error
results written when an exception escapes, its ``step/end``) and writes it with one
``session.append_many`` when the step closes: one write and, at durability ``fsync``, one disk
sync per step instead of one per event. Events recorded outside a step (``turn/start``, the
user message, the final answer, ``turn/end``) are appended at once, as without batching.

* While a step is buffered its events are not in the log: a helper returns ``0`` instead of
  the seq, ``read()`` and ``messages()`` do not show them yet, and :attr:`Step.seqs` gives
  the seqs once the step is written.
* Each buffered event is checked when it is recorded (a bad payload raises
  :class:`~agentsession.errors.UsageError` at the helper call) and keeps the time it was
  recorded at.
* If writing the batch fails, the error propagates out of the step's ``with`` block (chained
  after an exception that was already escaping); the step's events are not retried.
* A process killed while a step is buffered loses that step (nothing of it was written), and
  a crash during the write leaves the whole batch or none of it; the turn is left open for
  :mod:`agentsession.recovery`. See "When the recorder batches" in ``docs/architecture.md``.

**Turn ids.** Every turn has an id, ``turn.turn_id``: the context's turn id
(:func:`agentsession.context.with_turn_id`) when one is set, otherwise a new ``uuid4().hex``.
Every event the recorder writes carries it in ``event.meta["turn_id"]`` (:data:`META_TURN_ID`;
it wins over a platform metadata key of that name), and while the turn is open it is the
context's turn id, so code called inside the turn reads it with
:func:`agentsession.context.turn_id`. The run id of the context's
:class:`~agentsession.context.RunContext` is stamped on the ``turn/start`` only, in
``meta["run_id"]`` (:data:`META_RUN_ID`): a run's turns are found from their ``turn/start``, and
every other event reaches it through its turn id.

**Timeouts.** A turn that ends because the model's reply timed out gets an assistant message
saying so (:func:`timeout_annotation`, the same message as ``session.annotate_timeout()``),
written after the unanswered calls are answered and the open step is closed, and before
``turn/end``, so the next ``messages()`` shows the model that its previous reply was cut off,
with the text it had produced so far. See :class:`Turn`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from .context import ContextToken, run_context, turn_id, with_turn_id
from .contract import Session
from .errors import LockTimeout, TurnInterrupted, UsageError
from .events import (
    ASSISTANT_MESSAGE,
    OVERFLOW_RECOVERY,
    RETRY_END,
    RETRY_START,
    RUN_FINISH,
    SESSION_DELIVERY,
    SESSION_ROLLBACK,
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
    Event,
    OverflowRecovery,
    RetryEnd,
    RetryStart,
    RunFinish,
    SessionDelivery,
    SessionRollback,
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
from .media import (
    METADATA_LOGICAL_CHARS,
    StoragePolicy,
    estimate_logical_chars,
    sanitize_for_storage,
)
from .messages import Message, Part, ToolCall, ToolResult

if TYPE_CHECKING:
    from types import TracebackType

__all__ = [
    "META_RUN_ID",
    "META_TURN_ID",
    "TIMEOUT_NOTE",
    "ContextDefaults",
    "Step",
    "Turn",
    "error_tool_result",
    "has_open_turn",
    "set_context_defaults",
    "timeout_annotation",
]

META_TURN_ID: Final = "turn_id"
"""``event.meta`` key of the id of the turn that recorded the event (every recorded event)."""

_META_DELIVERY: Final = "delivery"  # agentsession.inbox.META_DELIVERY (inbox imports this module)

META_RUN_ID: Final = "run_id"
"""``event.meta`` key of the context's run id, on a ``turn/start`` recorded inside a
:class:`~agentsession.context.RunContext` that has one."""

TIMEOUT_NOTE: Final = "[This response was interrupted due to a timeout]"
"""The text that tells the model its previous reply timed out (lango's ``AnnotateTimeout``)."""

_TIMEOUT_SEPARATOR: Final = "\n\n---\n"


def timeout_annotation(partial: str = "") -> Message:
    """The assistant message recorded when a reply timed out: ``partial`` (the text produced
    before the timeout), a ``---`` rule and :data:`TIMEOUT_NOTE`; only the note when
    ``partial`` is empty (lango v0.6's form; later lango dropped the partial text)."""
    if not isinstance(partial, str):
        raise UsageError(f"the partial reply must be a string, not {type(partial).__name__}")
    text = f"{partial}{_TIMEOUT_SEPARATOR}{TIMEOUT_NOTE}" if partial else TIMEOUT_NOTE
    return Message.assistant(text)


def _new_turn_id() -> str:
    """``uuid.uuid4().hex``, built without the ``UUID`` object (a third of the cost)."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    return raw.hex()


def _is_timeout(exc: BaseException | None) -> bool:
    """Whether ``exc`` ending a turn means the reply timed out: a ``TimeoutError``, or on
    Python 3.10 ``asyncio.TimeoutError`` and ``concurrent.futures.TimeoutError`` (their own
    classes there, aliases from 3.11 on); not a turn lock that was not taken in time."""
    if exc is None or isinstance(exc, LockTimeout):
        return False
    if isinstance(exc, TimeoutError):
        return True
    for module in ("asyncio", "concurrent.futures"):  # never imported here: only if in use
        loaded = sys.modules.get(module)
        timeout = getattr(loaded, "TimeoutError", None)
        if isinstance(timeout, type) and isinstance(exc, timeout):
            return True
    return False


# ---------------------------------------------------------------------------------------------
# Defaults from the context (the chat layer's turn envelope registers itself here).

ContextDefaults = Callable[[], tuple[str, str, Mapping[str, Any] | None]]
"""A function giving the current context's ``(agent, user, metadata)``."""

_context_defaults: ContextDefaults | None = None


def set_context_defaults(provider: ContextDefaults | None) -> None:
    """Install where ``session.turn()`` takes the agent, user and metadata it was not given.

    :mod:`agentsession.chat.envelope` installs the turn envelope's accessors when it is
    imported; without a provider the defaults are empty. ``None`` removes the provider.
    """
    global _context_defaults
    _context_defaults = provider


def _defaults() -> tuple[str, str, Mapping[str, Any] | None]:
    provider = _context_defaults
    return ("", "", None) if provider is None else provider()


def _message_event(
    turn: Turn,
    type: str,
    msg: Message,
    *,
    user: str = "",
    metadata: Mapping[str, Any] | None = None,
) -> Event:
    """A message event under the turn's storage policy; when the policy shrank the message, its
    size before is kept in ``meta["logical_chars"]``."""
    meta: dict[str, Any] = dict(metadata) if metadata else {}
    meta[META_TURN_ID] = turn.turn_id  # wins over a platform key of that name
    policy = turn.storage
    if policy is not None:
        logical = estimate_logical_chars(msg)
        msg = sanitize_for_storage(msg, policy)
        if logical > 0 and logical > estimate_logical_chars(msg):
            meta[METADATA_LOGICAL_CHARS] = logical  # the computed size wins over platform keys
    return Event.new(type, msg, agent=turn.agent, user=user, meta=meta)


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
    """What turns and steps share: the helpers that append one event each.

    Every helper returns the seq of the event it appended, or ``0`` when a batched step
    buffered it (``batch_steps=True``; the seqs are in :attr:`Step.seqs` once the step is
    written).
    """

    _turn: Turn

    def _live(self) -> Turn:
        """The turn to record into; raises :class:`~agentsession.errors.UsageError` when this
        turn or step is not open (never entered, or closed already): what is recorded then
        would land outside any turn or step."""
        raise NotImplementedError

    def user(self, content: str | Part | Sequence[Part] | Message, *, name: str = "") -> int:
        """Record a user message (sanitised; attributed to the turn's user)."""
        turn = self._live()
        msg = content if isinstance(content, Message) else Message.user(content, name=name)
        if msg.role != "user":
            raise UsageError(f"turn.user() needs a user message, not role {msg.role!r}")
        event = _message_event(turn, USER_MESSAGE, msg, user=turn.user_id, metadata=turn.metadata)
        return turn._append(event)

    def assistant(
        self,
        content: str | Part | Sequence[Part] | Message | None = None,
        *,
        tool_calls: Iterable[ToolCall] = (),
        thinking: str | None = None,
        signature: str = "",
    ) -> int:
        """Record an assistant message; its tool calls await results."""
        turn = self._live()
        if isinstance(content, Message):
            msg = content
        else:
            msg = Message.assistant(
                content, tool_calls=tool_calls, thinking=thinking, signature=signature
            )
        if msg.role != "assistant":
            raise UsageError(f"assistant() needs an assistant message, not role {msg.role!r}")
        seq = turn._append(_message_event(turn, ASSISTANT_MESSAGE, msg))
        turn._calls.extend(msg.tool_calls)
        turn.partial = ""  # the reply is recorded: nothing of it is pending any more
        return seq

    def tool_call(self, call: ToolCall) -> int:
        """Record that the runtime started a tool call (``tool/call``)."""
        return self._live()._record(TOOL_CALL, call)

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
        turn = self._live()
        if isinstance(call_id, ToolResult):
            result = call_id
        else:
            result = ToolResult(call_id, name, content, is_error, dict(audit or {}))
        turn._check_answers(result.call_id)
        seq = turn._record(TOOL_RESULT, result)
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
        reasoning_tokens: int = 0,
    ) -> int:
        """Record token usage of one model call (``total_tokens`` defaults to input+output;
        ``reasoning_tokens`` are part of ``output_tokens``)."""
        total = input_tokens + output_tokens if total_tokens is None else total_tokens
        usage = Usage(
            input_tokens,
            output_tokens,
            total,
            cache_read_tokens,
            cache_write_tokens,
            reasoning_tokens,
        )
        return self._live()._record(USAGE, usage)

    def todos(self, items: Sequence[Todo]) -> int:
        """Record the whole todo list as it is now."""
        return self._live()._record(TODO_UPDATE, TodoUpdate(items=list(items)))

    def finish(self, status: str = "completed", summary: str = "") -> int:
        """Record that the agent declared the run finished (``completed`` or ``blocked``)."""
        if status not in ("completed", "blocked"):
            raise UsageError(f"finish status must be 'completed' or 'blocked', not {status!r}")
        return self._live()._record(RUN_FINISH, RunFinish(status, summary))

    def retry_start(
        self, attempt: int, max_attempts: int, delay_ms: int = 0, error_message: str = ""
    ) -> int:
        """Record that a failed model call is retried."""
        data = RetryStart(attempt, max_attempts, delay_ms, error_message)
        return self._live()._record(RETRY_START, data)

    def retry_end(self, success: bool, attempt: int, final_error: str = "") -> int:
        """Record the end of retrying."""
        data = RetryEnd(success, attempt, final_error)
        return self._live()._record(RETRY_END, data)

    def summarization_retry_start(
        self, attempt: int, max_attempts: int, delay_ms: int = 0, error_message: str = ""
    ) -> int:
        """Record that a failed summarisation call is retried."""
        data = SummarizationRetryStart(attempt, max_attempts, delay_ms, error_message)
        return self._live()._record(SUMMARIZATION_RETRY_START, data)

    def summarization_retry_end(self, success: bool, attempt: int, final_error: str = "") -> int:
        """Record the end of summarisation retrying."""
        data = SummarizationRetryEnd(success, attempt, final_error)
        return self._live()._record(SUMMARIZATION_RETRY_END, data)

    def overflow_recovery(self, applied: int, reason: str = "", error: str = "") -> int:
        """Record that the context overflowed and was shrunk."""
        data = OverflowRecovery(applied, reason, error)
        return self._live()._record(OVERFLOW_RECOVERY, data)

    def skill_load(
        self, name: str, body: str, *, description: str = "", resource_base: str = ""
    ) -> int:
        """Record that a skill was loaded (model-visible after the tool result that loaded it)."""
        data = SkillLoad(name, description, body, resource_base)
        return self._live()._record(SKILL_LOAD, data)

    def continue_turn(self, segment: int, reason: str, *, messages: Sequence[Message] = ()) -> int:
        """Record that the turn continues in a new segment; ``messages`` are model-visible."""
        turn = self._live()
        data = TurnContinue(segment, reason, turn.steps, list(messages))
        return turn._record(TURN_CONTINUE, data)

    def subagent_start(
        self, agent: str, session: str, task: str, *, async_: bool = False, job_id: str = ""
    ) -> int:
        """Record that work was delegated to a subagent running in ``session``."""
        data = SubagentStart(agent, session, task, async_, job_id)
        return self._live()._record(SUBAGENT_START, data)

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
        return self._live()._record(SUBAGENT_END, data)


_open_turns: dict[tuple[str, ...], Turn] = {}
_open_turns_lock = threading.Lock()


def _session_key(session: Session) -> tuple[str, ...]:
    """What identifies a session's log within this process (two objects of one log share it)."""
    identity = getattr(session, "log_identity", None)
    if isinstance(identity, tuple):
        return identity
    return ("object", str(id(session)))


def has_open_turn(session: Session) -> bool:
    """Whether a turn of ``session``'s log is open in this process (entered, not closed)."""
    with _open_turns_lock:
        return _session_key(session) in _open_turns


class Step(_Recording):
    """One model call and its tool calls, between ``step/start`` and ``step/end``."""

    def __init__(self, turn: Turn, number: int) -> None:
        self._turn = turn
        self.number = number
        """Step number within the turn, from 0."""
        self.seqs: list[int] = []
        """Seqs of the events recorded while the step was open (``step/start`` to ``step/end``),
        in order. Without batching they are added as the events are appended; with
        ``batch_steps`` the list stays empty until the step is written when it closes."""
        self._open = False
        self._entered = False
        self._calls_before: list[ToolCall] = []

    def _live(self) -> Turn:
        if not self._open:
            state = "closed" if self._entered else "not entered"
            raise UsageError(
                f"step {self.number} of session {self._turn.session.id!r} is {state}: record "
                "inside 'with turn.step() as step:' (what a closed step records would land "
                "outside it)"
            )
        return self._turn

    @property
    def is_open(self) -> bool:
        """Whether the step is open: ``step/start`` is recorded and ``step/end`` not yet."""
        return self._open

    def __enter__(self) -> Step:
        turn = self._turn
        if turn._step is not None:
            raise UsageError(f"step {turn._step.number} is still open; steps do not nest")
        if self._entered:
            raise UsageError(f"step {self.number} was entered already; open a new turn.step()")
        if not turn._open:
            raise UsageError(f"the turn of step {self.number} is closed; open a new turn")
        self._open = self._entered = True
        turn._step = self
        if turn.batch_steps:
            self._calls_before = list(turn._calls)
            turn._buffer = []
        try:
            turn._record(STEP_START, StepStart(step=self.number))
        except BaseException:
            self._open = False
            turn._step = None
            turn._buffer = None
            raise
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

    def __repr__(self) -> str:
        state = "open" if self._open else "closed"
        return f"<Step {self.number} {state} session={self._turn.session.id!r}>"

    def close(self) -> None:
        """Write ``step/end`` (once); with ``batch_steps``, write the whole step as one batch.

        When the batch cannot be written, the error propagates and the step's events are lost
        (not retried): the turn then counts neither the step nor the tool calls it made or
        answered.
        """
        if not self._open:
            return
        turn = self._turn
        self._open = False
        try:
            turn._record(STEP_END, StepEnd(step=self.number))
        finally:
            turn._step = None
            batch, turn._buffer = turn._buffer, None
            if batch:
                self._write(batch)
        turn.steps += 1

    def _write(self, batch: list[Event]) -> None:
        """Append the buffered step in one batch and note its seqs."""
        turn = self._turn
        try:
            # The session's append of events it checked already (BaseSession._append_prepared)
            # when the events were checked by it; append_many otherwise.
            write = getattr(turn.session, "_append_prepared", None) if turn._check else None
            seqs = write(batch) if callable(write) else turn.session.append_many(batch)
        except BaseException:
            # Nothing of the step is stored: its calls were never made, nor its answers given.
            turn._calls = self._calls_before
            raise
        self.seqs.extend(seqs)


class Turn(_Recording):
    """One turn of a conversation, between ``turn/start`` and ``turn/end``.

    Made by ``session.turn()``. Helpers on the turn record outside any step; ``turn.step()``
    opens a step.

    **Turn id.** :attr:`turn_id` is the context's turn id when one is set
    (:func:`agentsession.context.with_turn_id`), else a new ``uuid4().hex``; every event the
    turn records carries it in ``meta["turn_id"]``, and while the turn is open it is the
    context's turn id (:func:`agentsession.context.turn_id`). So a turn opened inside another
    (a subagent's turn in its own session) shares the outer turn's id, as it would share
    lango's trace id; give it its own with ``with with_turn_id(new_id): ...``.

    **Timeouts.** The turn is ended as timed out when a ``TimeoutError`` escapes it (also
    ``asyncio.TimeoutError`` and ``concurrent.futures.TimeoutError``, which are that class
    from Python 3.11 on; not :class:`~agentsession.errors.LockTimeout`, a turn lock not taken
    in time), or when
    :meth:`timed_out` was called (for a timeout the caller catches itself, or one signalled
    by another exception class, such as an HTTP client's). Then, after the unanswered calls
    are answered and the open step is closed, and before ``turn/end``, the recorder writes
    the assistant message of :func:`timeout_annotation` with :attr:`partial`: the reply text
    the model had produced so far, kept, followed by the note that it was interrupted. The
    ``turn/end`` then carries a ``TimeoutError`` (the escaping exception's message, or none)::

        with session.turn() as turn:
            turn.user(question)
            try:
                async with asyncio.timeout(60):
                    async for delta in model.stream(turn.session.messages()):
                        turn.partial += delta
            except TimeoutError:
                turn.timed_out()            # or let it escape: the same is recorded
            else:
                turn.assistant(turn.partial)

    A timeout placed *around* the code that opens the turn (``asyncio.wait_for`` of the
    whole turn, an ``asyncio.timeout`` block enclosing the ``with``) cancels the turn: what
    crosses its ``with`` is ``CancelledError``, which is not told apart from any other
    cancellation, so no annotation is written; put the timeout inside the turn, or call
    ``session.annotate_timeout(partial)`` after it.
    """

    def __init__(
        self,
        session: Session,
        agent: str | None = None,
        user: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        *,
        storage: StoragePolicy | None = None,
        batch_steps: bool = False,
    ) -> None:
        self._turn = self
        self.session = session
        """The session being recorded into."""
        context_agent, context_user, context_metadata = _defaults()
        self.agent = agent if agent is not None else context_agent
        """The agent running the turn (default: the context's)."""
        self.user_id = user if user is not None else context_user
        """The end user the turn answers (default: the context's)."""
        chosen = metadata if metadata is not None else context_metadata
        self.metadata = dict(chosen) if chosen is not None else None
        """Platform metadata copied onto user messages (default: the context's)."""
        self.storage = storage
        """The storage policy applied to messages (None: stored whole)."""
        self.batch_steps = batch_steps
        """Whether each step is buffered and written as one batch when it closes (see
        :mod:`agentsession.recorder`)."""
        self.steps = 0
        """Steps completed so far."""
        self.start_seq = 0
        """Seq of this turn's ``turn/start``."""
        self.turn_id = turn_id() or _new_turn_id()
        """The turn's id: the context's turn id when one is set, else a new ``uuid4().hex``
        (stamped on every event as ``meta["turn_id"]``)."""
        self.partial = ""
        """The reply text the model has produced and that is not recorded yet (extend it while
        streaming: ``turn.partial += delta``); recording an assistant message clears it. If
        the turn times out, the timeout annotation keeps it."""
        self._timed_out = False
        self._stamp: dict[str, Any] = {META_TURN_ID: self.turn_id}  # copied by Event.new
        self._context: ContextToken[str] | None = None
        self._step: Step | None = None
        self._calls: list[ToolCall] = []
        self._open = False
        self._entered = False
        self._buffer: list[Event] | None = None  # the open step's events, when batching
        # Set by the inbox (Delivery.start_turn): more meta for turn/start (the delivery it
        # claims), and what to record right after it (the delivery's user message).
        self._start_meta: dict[str, Any] | None = None
        self._after_start: Callable[[Turn], object] | None = None
        # Set by rewind's retry and edit: what to append before turn/start (the rewind marker).
        self._before_start: Callable[[Turn], object] | None = None
        # Set by the inbox too: watch the log for deliveries at each step boundary
        # (interrupt, merge, rollback). What was seen: the log read up to _inbox_cursor, the
        # interrupting delivery (id, policy), the merge deliveries not handed over yet, the
        # ids handed over, and the messages the latest step boundary handed over.
        self._watch_inbox = False
        self._inbox_cursor = 0
        self._interruption: tuple[str, str] | None = None
        self._raised: TurnInterrupted | None = None
        self._merge_queue: list[tuple[str, Message]] = []
        self._merged: set[str] = set()
        self._new_messages: list[Message] = []
        # The session's own check and stamp of an event (BaseSession._prepare), so that a
        # buffered event fails at the helper call, not when its step is written.
        prepare = getattr(session, "_prepare", None)
        self._check: Callable[[Event, None], Event] | None = prepare if callable(prepare) else None

    def _append(self, event: Event) -> int:
        """Append ``event`` now, or buffer it while a batched step is open (seq 0)."""
        buffer = self._buffer
        if buffer is not None:
            check = self._check
            buffer.append(event if check is None else check(event, None))
            return 0
        seq = self.session.append(event)
        step = self._step
        if step is not None:
            step.seqs.append(seq)
        return seq

    def _record(self, type: str, payload: Any) -> int:
        return self._append(Event.new(type, payload, agent=self.agent, meta=self._stamp))

    def __enter__(self) -> Turn:
        if self._open:
            raise UsageError("this turn is already open")
        if self._entered:
            # Entering it again would write a second turn/start under the same turn id.
            raise UsageError("this turn was entered and closed already; open a new session.turn()")
        key = _session_key(self.session)
        with _open_turns_lock:
            other = _open_turns.get(key)
            if other is not None:
                raise UsageError(
                    f"session {self.session.id!r} already has an open turn in this process "
                    f"(agent {other.agent!r}, from seq {other.start_seq}): turns of one "
                    "session do not nest or overlap; finish it first, or take the session's "
                    "turn lock (store.lock) so that concurrent turns wait for each other"
                )
            _open_turns[key] = self
        try:
            before = self._before_start
            if before is not None:
                before(self)
            meta = self._stamp
            run = run_context()
            if run is not None and run.run_id:
                meta = {**meta, META_RUN_ID: run.run_id}
            if self._start_meta:
                meta = {**self._start_meta, **meta}
            start = Event.new(TURN_START, TurnStart(), agent=self.agent, meta=meta)
            self.start_seq = self.session.append(start)  # never buffered
        except BaseException:
            with _open_turns_lock:
                _open_turns.pop(key, None)
            raise
        self._open = self._entered = True
        self._context = with_turn_id(self.turn_id)
        after = self._after_start
        if after is not None:
            try:
                after(self)
            except BaseException as exc:
                self.__exit__(type(exc), exc, exc.__traceback__)
                raise
        return self

    def timed_out(self, partial: str | None = None) -> None:
        """Mark the turn as ended by a timeout, for a timeout the caller handles itself: when
        the turn ends, the timeout annotation is written before ``turn/end`` (see
        :class:`Turn`). ``partial`` replaces :attr:`partial`, the reply text kept in it."""
        if partial is not None:
            if not isinstance(partial, str):
                raise UsageError(
                    f"the partial reply must be a string, not {type(partial).__name__}"
                )
            self.partial = partial
        self._timed_out = True

    @property
    def is_open(self) -> bool:
        """Whether the turn is open: ``turn/start`` is written and ``turn/end`` not yet."""
        return self._open

    @property
    def buffering(self) -> bool:
        """Whether a step of a ``batch_steps`` turn is open: helpers then only check and
        buffer their events, written as one batch when the step closes."""
        return self._buffer is not None

    @property
    def buffered(self) -> tuple[Event, ...]:
        """The events the open batched step has buffered, not written yet (empty when none
        is open)."""
        return tuple(self._buffer or ())

    def step(self) -> Step:
        """A new step (use as a context manager).

        In a turn opened by the inbox (``delivery.start_turn()``) this is the step boundary
        where deliveries that arrived while the turn ran take effect (one read of the log):
        one with the ``interrupt`` or ``rollback`` policy makes this call raise
        :class:`~agentsession.errors.TurnInterrupted` (see :attr:`interrupted`); those with
        the ``merge`` policy are recorded as user messages of this turn, in delivery order
        (``meta["delivery"]`` naming each), and returned by :meth:`new_messages`."""
        self._new_step_check()
        self._boundary()
        return Step(self, self.steps)

    def step_boundary(self) -> None:
        """The step boundary of :meth:`step` without making the step (for a driver that makes
        it itself, as the async API does when its step is entered): raises
        :class:`~agentsession.errors.TurnInterrupted` or hands ``merge`` deliveries over."""
        self._new_step_check()
        self._boundary()

    @property
    def interruption_seen(self) -> bool:
        """Whether an ``interrupt`` or ``rollback`` delivery was seen as of the latest look at
        the log (no I/O; :attr:`interrupted` looks again)."""
        return self._interruption is not None

    def _new_step_check(self) -> None:
        if not self._open:
            raise UsageError("open the turn (with session.turn(...)) before its steps")

    def _poll(self) -> None:
        """Read the log written since the last look for deliveries (inbox turns only)."""
        if not self._watch_inbox or not self._open or self._interruption is not None:
            return
        events = self.session.read(max(self._inbox_cursor, self.start_seq))
        if not events:
            return
        self._inbox_cursor = events[-1].seq
        queued = {delivery for delivery, _ in self._merge_queue}
        for event in events:
            if event.type != SESSION_DELIVERY:
                continue
            payload = event.decode(SessionDelivery)
            if payload.policy in ("interrupt", "rollback"):
                self._interruption = (event.id, payload.policy)
                return  # what follows is for the turns after this one
            if payload.policy == "merge" and event.id not in self._merged | queued:
                self._merge_queue.append((event.id, payload.message))
                queued.add(event.id)

    def _boundary(self) -> None:
        """The step boundary: raise :class:`TurnInterrupted` when a delivery interrupts the
        turn, else hand the merged deliveries over (recorded as the turn's user messages)."""
        self._poll()
        if self._interruption is not None:
            delivery, policy = self._interruption
            self._raised = TurnInterrupted(self.session.id, self.turn_id, delivery, policy)
            raise self._raised
        handed: list[Message] = []
        if self._step is None:  # never inside an open step
            queue, self._merge_queue = self._merge_queue, []
            for delivery, message in queue:
                metadata = dict(self.metadata or {})
                metadata[_META_DELIVERY] = delivery
                event = _message_event(
                    self, USER_MESSAGE, message, user=self.user_id, metadata=metadata
                )
                self._append(event)
                self._merged.add(delivery)
                handed.append(message)
        self._new_messages = handed

    @property
    def interrupted(self) -> bool:
        """Whether a delivery with the ``interrupt`` or ``rollback`` policy arrived while this
        turn ran (inbox turns only; reading it reads the log written since the last look).
        The next :meth:`step` raises :class:`~agentsession.errors.TurnInterrupted`; stays
        true once the turn is closed."""
        self._poll()
        return self._interruption is not None

    def new_messages(self) -> list[Message]:
        """The messages of ``merge`` deliveries the latest :meth:`step` handed over to this
        turn (recorded as its user messages just before that step): add them to what the model
        sees next. Empty when there were none."""
        return list(self._new_messages)

    def _live(self) -> Turn:
        if not self._open:
            state = "closed" if self._entered else "not entered"
            raise UsageError(
                f"the turn of session {self.session.id!r} is {state}: record inside "
                "'with session.turn(...) as turn:' (what a closed turn records would land "
                "outside any turn)"
            )
        return self

    def _check_answers(self, call_id: str) -> None:
        """Raise :class:`~agentsession.errors.UsageError` unless ``call_id`` names a tool call
        awaiting its result: one of this turn's, or one an earlier turn left unanswered (a late
        result replaces the interrupted stand-in). A result for any other id would be stored
        and then left out of ``messages()``."""
        if any(call.id == call_id for call in self._calls):
            return
        # Not a call of this turn: an assistant message appended around the recorder, or a
        # call an earlier turn left open. Ask derive, whose pairing rule messages() follows.
        from .derive import Deriver

        waiting = Deriver.from_events(self.session.read(), self.agent or None).unanswered_calls()
        if any(call.id == call_id for call in waiting):
            return
        open_ids = list(dict.fromkeys([c.id for c in self._calls] + [c.id for c in waiting]))
        listed = ", ".join(repr(i) for i in open_ids) if open_ids else "none"
        raise UsageError(
            f"tool result for call {call_id!r} answers no open tool call of session "
            f"{self.session.id!r} (open calls: {listed}); record the assistant message that "
            "makes the call first (messages() would leave this result out)"
        )

    def _answer(self, call_id: str) -> None:
        for i, call in enumerate(self._calls):
            if call.id == call_id:
                del self._calls[i]
                return

    def _answer_open_calls(self, exc: BaseException) -> None:
        calls, self._calls = self._calls, []
        for call in calls:
            self._record(TOOL_RESULT, error_tool_result(call, exc))

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
            elif self._raised is not None:  # TurnInterrupted was caught inside the turn
                self._answer_open_calls(self._raised)
            elif self._timed_out:
                self._answer_open_calls(TimeoutError())
        finally:
            try:
                if self._step is not None:
                    self._step.close()  # with batch_steps: writes the step
            finally:
                self._open = False
                with _open_turns_lock:
                    if _open_turns.get(_session_key(self.session)) is self:
                        del _open_turns[_session_key(self.session)]
                timed_out = self._timed_out or _is_timeout(exc)
                try:
                    if timed_out:
                        annotation = timeout_annotation(self.partial)
                        self.session.append(_message_event(self, ASSISTANT_MESSAGE, annotation))
                        self.partial = ""
                finally:
                    self._end(exc, timed_out)
                    raised = self._raised
                    if raised is not None and raised.policy == "rollback":
                        marker = SessionRollback(
                            turn_id=self.turn_id,
                            turn_start_seq=self.start_seq,
                            delivery=raised.delivery_id,
                        )
                        self.session.append(Event.new(SESSION_ROLLBACK, marker, agent=self.agent))
        if exc is None and self._raised is None:
            # The store's compaction policy, when it has one (BaseSession._turn_ended).
            ended = getattr(self.session, "_turn_ended", None)
            if callable(ended):
                ended(self.agent)

    def _end(self, exc: BaseException | None, timed_out: bool) -> None:
        """Write ``turn/end`` (carrying ``exc``, or a ``TimeoutError`` for a turn marked timed
        out) and give the context back its turn id from before the turn."""
        try:
            if exc is None and self._raised is not None:
                exc = self._raised  # caught inside the turn: still what ended it
            if exc is not None:
                error: TurnError | None = TurnError(type(exc).__name__, str(exc))
            else:
                error = TurnError(TimeoutError.__name__) if timed_out else None
            end = TurnEnd(steps=self.steps, error=error)
            self.session.append(Event.new(TURN_END, end, agent=self.agent, meta=self._stamp))
        finally:
            token, self._context = self._context, None
            if token is not None:
                # Exited in another context than it was entered in: nothing to restore there.
                with contextlib.suppress(ValueError):
                    token.reset()

    def __repr__(self) -> str:
        state = "open" if self._open else "closed"
        return (
            f"<Turn {state} session={self.session.id!r} agent={self.agent!r} "
            f"start_seq={self.start_seq} steps={self.steps}>"
        )
