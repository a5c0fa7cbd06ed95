"""``show``, ``tail`` and ``messages``: a session's transcript, latest events and history."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence

import click
from rich.markup import escape
from rich.table import Table

from .. import view
from ..branching import BranchRef, live_branches
from ..codec import pretty
from ..errors import SessionReset, UsageError
from ..events import Event, encode, encode_event
from ..messages import FilePart, ImagePart, Message, RefusalPart, TextPart, ThinkingPart
from ..session import BaseSession
from ..view.live import LiveRows
from . import _output
from ._group import CONTEXT, _examples, cli, pass_state
from ._output import (
    EXIT_INTERRUPTED,
    _console,
    _echo,
    _plain,
    _short,
    _when,
    _write_bytes,
    clean,
)
from ._state import State, _not_found, suggest


def _calls_line(text: str, calls: Sequence[view.ToolCallView], limit: int) -> str:
    parts = [_short(text, limit)] if text else []
    for call in calls:
        parts.append(f"→ {call.name}({_short(call.arguments, limit)}) [{call.id}]")
    return "  ".join(parts) or "(empty)"


def _result_line(row: view.ToolResultRow, limit: int) -> str:
    mark = "✗" if row.is_error else "←"
    audit = f" {{{', '.join(f'{k}={v}' for k, v in row.audit.items())}}}" if row.audit else ""
    return f"{mark} {row.name} [{row.call_id}]{audit}: {_short(row.content, limit)}"


def _e(text: str) -> str:
    """Stored text made safe for Rich markup."""
    return escape(text)


def _n(name: str) -> str:
    """A name (a session id, a store path, an agent, user or subagent name) made safe for
    Rich markup, its control characters escaped, newline and tab included: unlike a
    message's text, which keeps its lines, a name is printed on one line."""
    return escape(clean(name))


def _row_markup(row: view.Row, limit: int) -> str:
    """The Rich markup of one transcript row after its seq and indent (every value escaped)."""
    name = view.speaker(row)
    who = f" [dim]({_n(name)})[/]" if name else ""
    if isinstance(row, view.UserMessageRow):
        user = f" {_n(row.user)}" if row.user else ""
        return f"[bold green]user{user}{who}:[/] {_e(_calls_line(row.text, [], limit))}"
    if isinstance(row, view.AssistantMessageRow):
        line = _e(_calls_line(row.text, row.tool_calls, limit))
        return f"[bold magenta]assistant{who}:[/] {line}"
    if isinstance(row, view.ToolResultRow):
        style = "red" if row.is_error or row.interrupted else "yellow"
        return f"[{style}]{_e(_result_line(row, limit))}[/]"
    if isinstance(row, view.ToolCallRow):
        return f"[dim]tool call started: {_n(f'{row.name} [{row.call_id}]')}[/]"
    if isinstance(row, view.UsageRow):
        return f"[dim]usage: {row.input_tokens} in / {row.output_tokens} out[/]"
    if isinstance(row, view.TodoRow):
        items = ", ".join(f"[{'x' if t.done else ' '}] {t.title}" for t in row.items)
        return f"todos: {_e(items)}"
    if isinstance(row, view.RunFinishRow):
        return f"[bold]run {_n(row.status)}[/]: {_e(_short(row.summary, limit))}"
    if isinstance(row, view.SubagentStartRow):
        mode = " (in the background)" if row.background else ""
        task = _e(_short(row.task, limit))
        return (
            f"[bold]subagent {_n(row.subagent)}[/] started{mode} in session "
            f"{_n(row.child_session)}: {task}"
        )
    if isinstance(row, view.SubagentEndRow) and row.status == "merged":
        if row.merge_mode == "messages":
            what = f": {row.merged_messages} message(s) written here"
        elif row.summary:
            mode = "as a summary: " if row.merge_mode == "summary" else ""
            what = f": {mode}{_e(_short(row.summary, limit))}"
        else:
            what = ""
        return (
            f"[bold]subagent {_n(row.subagent)}[/] merged from session "
            f"{_n(row.child_session)}{what}"
        )
    if isinstance(row, view.SubagentEndRow) and row.status == "discarded":
        reason = f": {_e(_short(row.summary, limit))}" if row.summary else ""
        return (
            f"[bold]subagent {_n(row.subagent)}[/] discarded (session "
            f"{_n(row.child_session)}, nothing of it written here){reason}"
        )
    if isinstance(row, view.SubagentEndRow):
        error = f" · [red]{_e(_short(row.error, limit))}[/]" if row.error else ""
        summary = _e(_short(row.summary, limit))
        return (
            f"[bold]subagent {_n(row.subagent)}[/] {_n(row.status or 'ended')} "
            f"after {row.steps} step(s): {summary}{error}"
        )
    if isinstance(row, view.ForkRow):
        task = f" · task: {_e(_short(row.task, limit))}" if row.task else ""
        return (
            f"[bold black on cyan] FORK [/] from session {_n(row.parent)} at its seq "
            f"{row.parent_seq} for subagent {_n(row.subagent)} · "
            f"{row.inherited_messages} message(s) inherited{task}"
        )
    if isinstance(row, view.MergeRow):
        what = "a summary" if row.mode == "summary" else f"{row.messages} message(s)"
        return (
            f"[bold black on green] MERGED [/] into session {_n(row.parent)}: {what}, "
            f"ending at its seq {row.parent_seq}"
        )
    if isinstance(row, view.DiscardRow):
        reason = f": {_e(_short(row.reason, limit))}" if row.reason else ""
        return (
            f"[bold white on magenta] DISCARDED [/] session {_n(row.parent)} noted it at "
            f"its seq {row.parent_seq}{reason}"
        )
    if isinstance(row, view.SkillLoadRow):
        about = f": {_e(_short(row.description, limit))}" if row.description else ""
        return f"[bold]skill {_n(row.name)}[/] loaded{about}"
    if isinstance(row, view.EventRow):
        return f"[dim]{_n(row.type)}{who}: {_e(_short(row.data, limit))}[/]"
    return f"[dim]{_n(row.kind)}{who}[/]"  # a row kind this renderer does not know


def _forked_line(fork: view.ForkRow, rows: Sequence[view.Row]) -> str:
    """The markup of the line under a child session's header: where it was forked from and
    how it ended (the last merge or discard mark decides, as the library reads it)."""
    ending = "active (neither merged nor discarded)"
    for row in rows:
        if isinstance(row, view.MergeRow):
            ending = f"merged into it at its seq {row.parent_seq}"
        elif isinstance(row, view.DiscardRow):
            ending = f"discarded (noted at its seq {row.parent_seq})"
    agent = f" for subagent {_n(fork.subagent)}" if fork.subagent else ""
    return (
        f"[bold]child of session {_n(fork.parent)}[/], forked at its seq {fork.parent_seq}"
        f"{agent} · {ending}"
    )


def _branch_lines(
    origin: BranchRef | None, branches: Sequence[BranchRef]
) -> Iterator[str]:
    """The markup of the lines under a session's header about its branches: the session it
    branched from and where, and the branches that leave it."""
    if origin is not None:
        yield f"[bold]branch of {_n(origin.id)} at seq {origin.seq}[/]"
    if branches:
        listed = ", ".join(f"{_n(ref.id)} (from seq {ref.seq})" for ref in branches)
        yield f"[bold]branches:[/] {listed}"


def _transcript(
    session: BaseSession,
    events: Sequence[Event],
    full: bool,
    branches: Sequence[BranchRef] = (),
) -> Iterator[tuple[str, str]]:
    """``(gutter, body)`` pairs of Rich markup for a person reading the session, grouped by
    turn and step: the rows of :func:`agentsession.view.transcript_rows`. The gutter is the
    event's seq ("" for the header and the blank line before a turn); every stored value is
    escaped for markup, and control characters are escaped by the caller. A branch's header
    names its origin and the seq it leaves it at; ``branches`` (the session's own) are listed
    under it, each with the seq it leaves this session at."""
    limit = 0 if full else view.PREVIEW_CHARS
    rows = view.transcript_rows(events, full=full)
    turns = sum(1 for row in rows if isinstance(row, view.TurnStartRow))
    yield (
        "",
        f"[bold]session {_n(session.id)}[/] · {len(events)} events · "
        f"{turns} turn{'' if turns == 1 else 's'} · {_n(session.location)}",
    )
    if rows and isinstance(rows[0], view.ForkRow):
        yield "", _forked_line(rows[0], rows)
    for line in _branch_lines(session.origin, branches):
        yield "", line
    for row in rows:
        seq = f"{row.seq:>5}"
        if isinstance(row, view.TurnStartRow):
            yield "", ""
        body = _line_markup(row, limit)
        if row.rewound:
            # Out of the history since a rewind, still in the log: muted, and marked for
            # output without colour.
            body = f"[dim]{REWOUND_MARK} {body}[/dim]"
        yield seq, body


REWOUND_MARK = "↶"
"""What ``show`` puts before a row whose event a rewind took out of the history (the row is
also dim on a terminal)."""


def _line_markup(row: view.Row, limit: int) -> str:
    """The Rich markup of one transcript row after its seq: the turn and step frames, the
    banners, and :func:`_row_markup` indented by the row's depth."""
    indent = "│ " * row.depth
    who = f" [dim]({_n(row.agent)})[/]" if row.agent else ""
    if isinstance(row, view.TurnStartRow):
        user = f" · user {_n(row.user)}" if row.user else ""
        return f"[bold cyan]┌─ turn[/]{who}{user} · {_when(row.time)}"
    if isinstance(row, view.TurnEndRow):
        tokens = (row.input_tokens, row.output_tokens)
        usage = f" · {tokens[0]} in / {tokens[1]} out tokens" if any(tokens) else ""
        error = ""
        if row.error_type or row.error_message:
            failure = _e(f"{row.error_type} {row.error_message}".strip())
            error = f" · [bold red]failed: {failure}[/]"
        steps = f"{row.steps} step" + ("" if row.steps == 1 else "s")
        return f"[bold cyan]└─ end of turn[/] · {steps}{usage}{error}"
    if isinstance(row, view.StepStartRow):
        return f"{indent}[cyan]┌ step {row.step}[/]"
    if isinstance(row, view.StepEndRow):
        return f"{indent}[cyan]└ end of step {row.step}[/]"
    if isinstance(row, view.RecoveryRow):
        closed = f"closed step {row.closed_step}" if row.closed_step >= 0 else "no open step"
        return (
            f"[bold white on red] RECOVERY [/] the turn from seq {row.turn_start_seq} "
            f"was cut off: {row.orphan_results} tool call(s) answered as interrupted, "
            f"{closed}"
        )
    if isinstance(row, view.CompactionRow):
        summary = _short(row.summary, limit) if row.summary else "(prune, no summary)"
        return (
            f"[bold black on yellow] COMPACTION [/] {_n(row.compaction_kind)}: history "
            f"before seq {row.first_kept_seq} replaced; {row.kept_messages} messages kept"
            f" · {_e(summary)}"
        )
    if isinstance(row, view.BranchRow):
        shared = (
            f"its events up to seq {row.origin_seq} are above (shared), this branch's own "
            "follow"
            if row.origin_seq
            else "at its start: nothing shared"
        )
        return f"{indent}[bold white on green] BRANCH [/] of session {_n(row.origin)}: {shared}"
    if isinstance(row, view.RewindRow):
        reason = f" · {_e(_short(row.reason, limit))}" if row.reason else ""
        undone = " (undone by a later rewind)" if row.rewound else ""
        return (
            f"{indent}[bold white on blue] REWIND [/] {_n(row.rewind_kind)}{who}: history back "
            f"to seq {row.to_seq} (what followed it is marked {REWOUND_MARK}){undone}{reason}"
        )
    return f"{indent}{_row_markup(row, limit)}"


def _print_transcript(pairs: Iterable[tuple[str, str]]) -> None:
    """Plain lines when stdout is not a terminal (whole, never wrapped: long lines stay one
    line, continuation lines of a multi-line text are indented past the gutter); on a
    terminal, a two-column grid that wraps a long line beside its seq."""
    safe = ((gutter, clean(body, layout=True)) for gutter, body in pairs)
    if not _output.is_terminal(sys.stdout):
        for gutter, body in safe:
            text = _plain(body).replace("\n", "\n" + " " * 6)
            _echo(f"{gutter} {text}" if gutter else text)
        return
    console = _console()
    grid: Table | None = None
    for gutter, body in safe:
        if not gutter:
            if grid is not None:
                console.print(grid)
                grid = None
            console.print(body, soft_wrap=True)
            continue
        if grid is None:
            grid = Table.grid(padding=(0, 1))
            grid.add_column(justify="right", no_wrap=True, style="dim", min_width=5)
            grid.add_column(overflow="fold")
        grid.add_row(gutter.strip(), body)
    if grid is not None:
        console.print(grid)


@cli.command(
    "show",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession show slack:C002",
        "agentsession show slack:C002 --full | less",
        "agentsession show slack:C002 --json | jq -c 'select(.type == \"tool/result\")'",
        "agentsession show slack:C002 --json --rows | jq -c 'select(.kind == \"subagent_end\")'",
    ),
)
@click.argument("session_id")
@click.option("--full", is_flag=True, help="Do not shorten long texts and results.")
@click.option("--json", "as_json", is_flag=True, help="Print the raw events, one per line.")
@click.option(
    "--rows",
    is_flag=True,
    help="With --json: print the transcript's rows instead of the events, one JSON object "
    "per line with snake_case keys and a 'kind' (user_message, fork, merge, ...).",
)
@pass_state
def show_command(state: State, session_id: str, full: bool, as_json: bool, rows: bool) -> None:
    """Show a session's transcript, grouped by turn and step.

    A child session (forked for a subagent) starts with the parent and the parent's seq it
    was forked at; in a parent, the subagent lines name the child session, to show next.
    Rows a rewind (or retry, or edit) took out of the history stay, dim and after a ↶; each
    rewind is a REWIND line naming the seq the history went back to. A branch (made with
    session.branch) starts with "branch of ORIGIN at seq N" and shows its origin's events up
    to there, then a BRANCH line where it leaves them; a session with branches lists them
    under its header, each with the seq it leaves at."""
    if rows and not as_json:
        raise UsageError("--rows goes with --json (it chooses what --json prints)")
    session = state.existing(session_id, read_only=True)
    events = session.read()
    if rows:
        rows_out = view.transcript_rows(events, full=full)
        _write_bytes(b"".join(encode(row) + b"\n" for row in rows_out))
        return
    if as_json:
        _write_bytes(b"".join(encode_event(event) + b"\n" for event in events))
        return
    store = state.store(read_only=True)
    branches = live_branches(store, session.id)
    _print_transcript(_transcript(session, events, full, branches))


def _row_pairs(rows: Sequence[view.Row], limit: int) -> Iterator[tuple[str, str]]:
    """``(gutter, body)`` pairs of ``rows`` as ``show`` prints them (a blank line before a
    turn, a rewound row dim after the mark), without the session's header."""
    for row in rows:
        if isinstance(row, view.TurnStartRow):
            yield "", ""
        body = _line_markup(row, limit)
        if row.rewound:
            body = f"[dim]{REWOUND_MARK} {body}[/dim]"
        yield f"{row.seq:>5}", body


_STOP_CHECK = 0.25
"""Seconds ``tail -f`` waits for an event before it looks whether Ctrl-C asked it to stop."""


@cli.command(
    "tail",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession tail slack:C002",
        "agentsession tail -f slack:C002             # and every event appended after them",
        "agentsession tail -f --after 0 slack:C002   # the whole session, then new events",
        "agentsession tail -f -n 0 slack:new         # waits for a session that does not exist",
        "agentsession tail slack:C002 --json | head -1",
    ),
)
@click.argument("session_id")
@click.option(
    "-f",
    "--follow",
    is_flag=True,
    help="Keep printing events as they are appended, by any process, until Ctrl-C (exit 0).",
)
@click.option(
    "-n",
    "--lines",
    type=click.IntRange(min=0),
    default=None,
    help="How many of the latest events to print first (default 10).",
)
@click.option(
    "--after",
    type=click.IntRange(min=0),
    default=None,
    help="Print the events after this seq instead of the latest ones (0: from the first).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the events as stored, one per line.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.01),
    default=None,
    hidden=True,
    help="Ignored: -f is woken by the appends themselves (kept so that scripts still run).",
)
@pass_state
def tail_command(
    state: State,
    session_id: str,
    follow: bool,
    lines: int | None,
    after: int | None,
    as_json: bool,
    interval: float | None,
) -> None:
    """Print a session's latest events as show prints its rows (--json: as stored); with -f,
    keep printing the events appended after them, by any process (session.follow()), until
    Ctrl-C, waiting for the session when it does not exist yet."""
    if lines is not None and after is not None:
        raise UsageError("give -n/--lines or --after, not both")
    store = state.store(read_only=True)
    if not store.exists(session_id):
        if not follow:
            raise _not_found(store, session_id)
        hint = suggest(store, session_id)
        click.echo(
            clean(
                f"waiting for session {session_id!r} in {store.location} (it has no events yet"
                + (f"; did you mean {hint!r}?" if hint else "")
                + ")"
            ),
            err=True,
        )
    session = store.get(session_id)
    if after is None:
        after = max(0, session.latest_seq - (10 if lines is None else lines))
    start = after
    rows = None if as_json else LiveRows(session, start, full=False)

    def emit(batch: Sequence[Event]) -> None:
        if not batch:
            return
        if rows is None:
            _write_bytes(b"".join(encode_event(event) + b"\n" for event in batch))
            return
        _print_transcript(_row_pairs(rows.rows(batch), view.PREVIEW_CHARS))
        sys.stdout.flush()

    if not follow:
        emit(session.read(after=start))
        return
    with _stopped_by_ctrl_c() as stopped:
        cursor = start
        life = session.life
        while not stopped():
            try:
                for event in session.follow(after=cursor, timeout=_STOP_CHECK):
                    if session.life != life:  # a follow begun after a new life began
                        raise SessionReset(session.id, 1)
                    emit([event])
                    cursor = event.seq
                    if stopped():
                        break
                if session.life != life:
                    raise SessionReset(session.id, 1)
            except SessionReset:
                # Deleted, perhaps created again: its new life is printed from its start.
                click.echo(
                    clean(f"session {session_id!r} was deleted; following it from seq 1 on"),
                    err=True,
                )
                cursor, life = 0, session.life
                rows = None if as_json else LiveRows(session, 0, full=False)
    # Ctrl-C is how -f ends: a clean stop, exit status 0.


@contextlib.contextmanager
def _stopped_by_ctrl_c() -> Iterator[Callable[[], bool]]:
    """While the block runs, a first Ctrl-C (SIGINT) asks it to stop (the function yielded
    turns true) instead of raising ``KeyboardInterrupt`` wherever it lands, which could leave
    a lock taken halfway and hang the store's closing; a second Ctrl-C interrupts at once.
    Outside the main thread (no signal handlers there), Ctrl-C raises as usual."""
    asked = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield asked.is_set
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is None:  # a handler not installed from Python
        previous = signal.default_int_handler

    def on_sigint(signum: int, frame: object) -> None:
        asked.set()
        signal.signal(signal.SIGINT, previous)  # the next Ctrl-C interrupts

    signal.signal(signal.SIGINT, on_sigint)
    try:
        yield asked.is_set
    except KeyboardInterrupt:
        raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
    finally:
        signal.signal(signal.SIGINT, previous)


def _message_lines(message: Message) -> Iterator[str]:
    """A message for people: its role (and author or name), then its parts, calls and
    results; whole, with newlines kept."""
    who = message.author or message.name
    head = f"{message.role}" + (f" ({who})" if who else "") + ":"
    body: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            body.append(part.text)
        elif isinstance(part, ThinkingPart):
            body.append(f"[thinking: {len(part.text)} characters]")
        elif isinstance(part, RefusalPart):
            body.append(f"[refused: {part.text}]")
        elif isinstance(part, (ImagePart, FilePart)):
            kind = "image" if isinstance(part, ImagePart) else "file"
            where = part.source or part.url or (f"{len(part.data)} characters inline")
            body.append(f"[{kind} {part.mime} {where}]".replace("  ", " "))
        else:
            body.append(f"[attachment {part.mime} {part.source or part.url}]".replace("  ", " "))
    for call in message.tool_calls:
        body.append(f"→ {call.name}({encode(call.arguments).decode()}) [{call.id}]")
    for result in message.tool_results:
        mark = "✗" if result.is_error else "←"
        audit = ", ".join(f"{k}={v}" for k, v in result.audit.items())
        audit = f" {{{audit}}}" if audit else ""
        body.append(f"{mark} {result.name} [{result.call_id}]{audit}: {result.content}")
    text = "\n".join(body) or "(empty)"
    first, *rest = clean(text, layout=True).split("\n")
    yield f"{clean(head)} {first}"
    for line in rest:
        yield f"    {line}"


@cli.command(
    "messages",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession messages slack:C002",
        "agentsession messages slack:C002 --agent demo-coder",
        "agentsession messages slack:C002 --json | jq '.[-1]'",
    ),
)
@click.argument("session_id")
@click.option("--agent", default=None, help="Only this agent's view of the history.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the messages as a JSON array, in the stored message format.",
)
@pass_state
def messages_command(state: State, session_id: str, agent: str | None, as_json: bool) -> None:
    """Print the model-visible history: what would be sent to a model next."""
    session = state.existing(session_id, read_only=True)
    history = session.messages(agent=agent)
    if agent:
        agents = {event.agent for event in session.read() if event.agent}
        if agent not in agents:
            known = ", ".join(repr(a) for a in sorted(agents)) or "none"
            click.echo(
                clean(
                    f"note: no event of session {session_id!r} is by agent {agent!r}, so only "
                    f"events without an agent are shown (agents in it: {known})"
                ),
                err=True,
            )
    if as_json:
        _write_bytes(pretty(encode(history)) + b"\n")
        return
    for message in history:
        for line in _message_lines(message):
            _echo(line)
