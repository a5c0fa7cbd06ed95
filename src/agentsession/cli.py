"""The ``agentsession`` command line: inspect, follow, repair, compact and copy sessions.

A thin click layer over the library. The store is chosen by ``--store URL`` or the
``AGENTSESSION_STORE`` environment variable (default: the JSONL directory ``./.agentsession``).
Errors print one line and exit 1; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import click
import msgspec
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

from . import events as ev
from . import view
from .contract import StoreRecoveryReport
from .errors import LockTimeout, SessionError, SessionNotFound, UsageError
from .events import Event, encode, encode_event
from .messages import Message
from .session import BaseSession
from .store import BaseStore, migrate_store, open_store

__all__ = ["main"]

DEFAULT_STORE = "./.agentsession"
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@dataclass
class State:
    """What the commands share: the store URL, opened on first use."""

    url: str
    debug: bool
    _store: BaseStore | None = field(default=None, repr=False)

    def store(self) -> BaseStore:
        """The store, opened once."""
        if self._store is None:
            self._store = open_store(self.url)
        return self._store

    def existing(self, session_id: str) -> BaseSession:
        """A session that has events, or :class:`SessionNotFound`."""
        store = self.store()
        if not store.exists(session_id):
            raise SessionNotFound(session_id, f"no session {session_id!r} in {store.location}")
        return store.get(session_id)

    def close(self) -> None:
        """Close the store if it was opened."""
        if self._store is not None:
            self._store.close()
            self._store = None


def _fail(message: str) -> NoReturn:
    click.echo(f"Error: {message}", err=True)
    sys.exit(1)


class _Group(click.Group):
    """Turns library errors (the :class:`SessionError` tree, into which every backend translates
    operating-system and driver errors) into one clear line (a traceback with ``--debug``)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SessionError as exc:
            state = ctx.find_object(State)
            if state is not None and state.debug:
                traceback.print_exc()
            _fail(str(exc) or type(exc).__name__)
        finally:
            state = ctx.find_object(State)
            if state is not None:
                state.close()


pass_state = click.make_pass_decorator(State)


@click.group(cls=_Group, context_settings=CONTEXT)
@click.option(
    "--store",
    "url",
    envvar="AGENTSESSION_STORE",
    default=DEFAULT_STORE,
    show_default=True,
    help="Store URL or directory (env AGENTSESSION_STORE): a path, memory:, "
    "sqlite:///file.db or postgresql://...",
)
@click.option("--debug", is_flag=True, help="Show tracebacks on errors.")
@click.version_option(package_name="agentsession")
@click.pass_context
def cli(ctx: click.Context, url: str, debug: bool) -> None:
    """Durable, crash-safe sessions for LLM agents.

    Start with `agentsession demo`, then explore what it wrote with `ls`, `show` and
    `messages`.
    """
    ctx.obj = State(url=url, debug=debug)


# -- helpers ----------------------------------------------------------------------------------


def _console() -> Console:
    return Console(
        file=sys.stdout,
        width=int(os.environ.get("COLUMNS", "0") or 0) or None,
        soft_wrap=False,
        highlight=False,
    )


def _when(time_: dt.datetime | None) -> str:
    if time_ is None:
        return "-"
    return time_.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def _short(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters; unchanged when ``limit <= 0``."""
    if limit <= 0:
        return text
    text = text.replace("\n", " ⏎ ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _calls_line(text: str, calls: Sequence[view.ToolCallView], limit: int) -> str:
    parts = [_short(text, limit)] if text else []
    for call in calls:
        parts.append(f"→ {call.name}({_short(call.arguments, limit)}) [{call.id}]")
    return "  ".join(parts) or "(empty)"


def _result_line(row: view.ToolResultRow, limit: int) -> str:
    mark = "✗" if row.is_error else "←"
    audit = f" {{{', '.join(f'{k}={v}' for k, v in row.audit.items())}}}" if row.audit else ""
    return f"{mark} {row.name} [{row.call_id}]{audit}: {_short(row.content, limit)}"


# -- ls, stats, rm ----------------------------------------------------------------------------


class _Row(msgspec.Struct):
    """One line of ``ls``: only what ``store.list()`` reports, no event is read."""

    id: str
    events: int | None
    """The session's last seq, which is its number of events; None when the backend does not
    know it cheaply."""
    last_activity: dt.datetime | None
    size: int


def _count(n: int | None) -> str:
    return "?" if n is None else str(n)


@cli.command("ls", context_settings=CONTEXT)
@click.option("--prefix", default=None, help="Only ids starting with this.")
@click.option("--limit", type=click.IntRange(min=0), default=None, help="At most this many.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@pass_state
def ls_command(state: State, prefix: str | None, limit: int | None, as_json: bool) -> None:
    """List sessions, most recently active first (events shows ? when the store cannot tell
    without reading the session)."""
    store = state.store()
    rows = [
        _Row(
            id=info.id,
            events=info.last_seq if info.last_seq >= 0 else None,
            last_activity=info.updated_at,
            size=info.size,
        )
        for info in store.list(prefix=prefix, limit=limit)
    ]
    if as_json:
        for row in rows:
            click.echo(encode(row).decode())
        return
    table = Table(box=None, pad_edge=False)
    table.add_column("id")
    table.add_column("events", justify="right")
    table.add_column("last activity (UTC)")
    table.add_column("size", justify="right")
    for row in rows:
        table.add_row(
            escape(row.id),
            _count(row.events),
            _when(row.last_activity),
            _size(row.size) if row.size else "-",
        )
    if rows:
        _console().print(table)
    else:
        click.echo(f"no sessions in {store.location}")


def _print_stats(title: str, stats: dict[str, Any]) -> None:
    click.echo(title)
    for key, value in stats.items():
        label = key.replace("_", " ")
        shown = "?" if value is None else _size(value) if key == "bytes" else value
        click.echo(f"{label}: {shown}")


@cli.command("stats", context_settings=CONTEXT)
@click.argument("session_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@pass_state
def stats_command(state: State, session_id: str | None, as_json: bool) -> None:
    """Count the store's sessions, events and bytes (from its listing, reading no events); with
    SESSION_ID, that session's events, turns, messages and incomplete turns."""
    from .recovery import scan_all_incomplete

    store = state.store()
    stats: dict[str, Any]
    if session_id is None:
        infos = store.list()
        known = all(info.last_seq >= 0 for info in infos)
        stats = {
            "sessions": len(infos),
            "events": sum(info.last_seq for info in infos) if known else None,
            "bytes": sum(info.size for info in infos),
        }
        title = f"store: {store.location}"
    else:
        events = state.existing(session_id).read()
        size = next((i.size for i in store.list(prefix=session_id) if i.id == session_id), 0)
        stats = {
            "events": len(events),
            "turns": sum(1 for e in events if e.type == ev.TURN_START),
            "messages": sum(1 for e in events if e.type in (ev.USER_MESSAGE, ev.ASSISTANT_MESSAGE)),
            "incomplete_turns": len(scan_all_incomplete(events)),
            "bytes": size,
        }
        title = f"session: {session_id}"
    if as_json:
        click.echo(encode(stats).decode())
    else:
        _print_stats(title, stats)


@cli.command("rm", context_settings=CONTEXT)
@click.argument("session_ids", nargs=-1, required=True)
@pass_state
def rm_command(state: State, session_ids: tuple[str, ...]) -> None:
    """Delete sessions (their events and everything stored beside them)."""
    store = state.store()
    missing = [sid for sid in session_ids if not store.exists(sid)]
    if missing:
        raise SessionNotFound(missing[0], f"no session {missing[0]!r} in {store.location}")
    for sid in session_ids:
        store.delete(sid)
        click.echo(f"deleted {sid}")


# -- show, tail, messages ---------------------------------------------------------------------


def _row_markup(row: view.Row, limit: int) -> str:
    """The Rich markup of one transcript row after its seq and indent (every value escaped)."""
    who = f" [dim]({escape(row.agent)})[/]" if row.agent else ""
    if isinstance(row, view.UserMessageRow):
        user = f" {escape(row.user)}" if row.user else ""
        return f"[bold green]user{user}:[/] {escape(_calls_line(row.text, [], limit))}"
    if isinstance(row, view.AssistantMessageRow):
        line = escape(_calls_line(row.text, row.tool_calls, limit))
        return f"[bold magenta]assistant{who}:[/] {line}"
    if isinstance(row, view.ToolResultRow):
        style = "red" if row.is_error or row.interrupted else "yellow"
        return f"[{style}]{escape(_result_line(row, limit))}[/]"
    if isinstance(row, view.ToolCallRow):
        return f"[dim]tool call started: {escape(f'{row.name} [{row.call_id}]')}[/]"
    if isinstance(row, view.UsageRow):
        return f"[dim]usage: {row.input_tokens} in / {row.output_tokens} out[/]"
    if isinstance(row, view.TodoRow):
        items = ", ".join(f"[{'x' if t.done else ' '}] {t.title}" for t in row.items)
        return f"todos: {escape(items)}"
    if isinstance(row, view.RunFinishRow):
        return f"[bold]run {escape(row.status)}[/]: {escape(_short(row.summary, limit))}"
    if isinstance(row, view.SubagentStartRow):
        mode = " (in the background)" if row.background else ""
        task = escape(_short(row.task, limit))
        return (
            f"[bold]subagent {escape(row.subagent)}[/] started{mode} in session "
            f"{escape(row.child_session)}: {task}"
        )
    if isinstance(row, view.SubagentEndRow):
        error = f" · [red]{escape(_short(row.error, limit))}[/]" if row.error else ""
        summary = escape(_short(row.summary, limit))
        return (
            f"[bold]subagent {escape(row.subagent)}[/] {escape(row.status or 'ended')} "
            f"after {row.steps} step(s): {summary}{error}"
        )
    if isinstance(row, view.SkillLoadRow):
        about = f": {escape(_short(row.description, limit))}" if row.description else ""
        return f"[bold]skill {escape(row.name)}[/] loaded{about}"
    if isinstance(row, view.EventRow):
        return f"[dim]{escape(row.type)}{who}: {escape(_short(row.data, limit))}[/]"
    return f"[dim]{escape(row.kind)}{who}[/]"  # a row kind this renderer does not know


def _render_transcript(session: BaseSession, events: Sequence[Event], full: bool) -> Iterator[str]:
    """Rich-markup lines for a person reading the session, grouped by turn and step: the rows
    of :func:`agentsession.view.transcript_rows`, drawn for a terminal."""
    limit = 0 if full else view.PREVIEW_CHARS
    rows = view.transcript_rows(events, full=full)
    turns = sum(1 for row in rows if isinstance(row, view.TurnStartRow))
    yield (
        f"[bold]session {escape(session.id)}[/] · {len(events)} events · "
        f"{turns} turns · {escape(session.location)}"
    )
    for row in rows:
        seq = f"[dim]{row.seq:>5}[/] "
        indent = "│ " * row.depth
        who = f" [dim]({escape(row.agent)})[/]" if row.agent else ""
        if isinstance(row, view.TurnStartRow):
            user = f" · user {escape(row.user)}" if row.user else ""
            yield ""
            yield f"{seq}[bold cyan]┌─ turn[/]{who}{user} · {_when(row.time)}"
        elif isinstance(row, view.TurnEndRow):
            tokens = (row.input_tokens, row.output_tokens)
            usage = f" · {tokens[0]} in / {tokens[1]} out tokens" if any(tokens) else ""
            error = ""
            if row.error_type or row.error_message:
                failure = escape(f"{row.error_type} {row.error_message}".strip())
                error = f" · [bold red]failed: {failure}[/]"
            steps = f"{row.steps} step" + ("" if row.steps == 1 else "s")
            yield f"{seq}[bold cyan]└─ end of turn[/] · {steps}{usage}{error}"
        elif isinstance(row, view.StepStartRow):
            yield f"{seq}{indent}[cyan]┌ step {row.step}[/]"
        elif isinstance(row, view.StepEndRow):
            yield f"{seq}{indent}[cyan]└ end of step {row.step}[/]"
        elif isinstance(row, view.RecoveryRow):
            closed = f"closed step {row.closed_step}" if row.closed_step >= 0 else "no open step"
            yield (
                f"{seq}[bold white on red] RECOVERY [/] the turn from seq {row.turn_start_seq} "
                f"was cut off: {row.orphan_results} tool call(s) answered as interrupted, "
                f"{closed}"
            )
        elif isinstance(row, view.CompactionRow):
            summary = _short(row.summary, limit) if row.summary else "(prune, no summary)"
            yield (
                f"{seq}[bold black on yellow] COMPACTION [/] {row.compaction_kind}: history "
                f"before seq {row.first_kept_seq} replaced; {row.kept_messages} messages kept"
                f" · {escape(summary)}"
            )
        else:
            yield f"{seq}{indent}{_row_markup(row, limit)}"


@cli.command("show", context_settings=CONTEXT)
@click.argument("session_id")
@click.option("--full", is_flag=True, help="Do not shorten long texts and results.")
@click.option("--json", "as_json", is_flag=True, help="Print the raw events, one per line.")
@pass_state
def show_command(state: State, session_id: str, full: bool, as_json: bool) -> None:
    """Show a session's transcript, grouped by turn and step."""
    session = state.existing(session_id)
    events = session.read()
    if as_json:
        out = sys.stdout.buffer
        for event in events:
            out.write(encode_event(event) + b"\n")
        return
    console = _console()
    for line in _render_transcript(session, events, full):
        console.print(line)


def _event_line(event: Event) -> str:
    agent = f" {event.agent}" if event.agent else ""
    data = _short(event.raw.decode("utf-8", "replace"), 200)
    return f"{event.seq:>6} {_when(event.time)} {event.type}{agent} {data}"


@cli.command("tail", context_settings=CONTEXT)
@click.argument("session_id")
@click.option("-f", "--follow", is_flag=True, help="Keep printing events as they arrive.")
@click.option(
    "-n",
    "--lines",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="How many of the latest events to print first.",
)
@click.option("--json", "as_json", is_flag=True, help="Print raw JSON lines.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.01),
    default=0.2,
    show_default=True,
    help="Seconds between checks when following.",
)
@pass_state
def tail_command(
    state: State, session_id: str, follow: bool, lines: int, as_json: bool, interval: float
) -> None:
    """Print a session's latest events; with -f, follow new ones (also from other processes)."""
    store = state.store()
    if not follow and not store.exists(session_id):
        state.existing(session_id)
    session = store.get(session_id)
    latest = session.latest_seq
    last = max(0, latest - lines)
    out = sys.stdout

    def emit(batch: list[Event]) -> int:
        for event in batch:
            out.write((encode_event(event).decode() if as_json else _event_line(event)) + "\n")
        out.flush()
        return batch[-1].seq if batch else 0

    last = emit(session.read(after=last)) or last
    while follow:
        time.sleep(interval)
        last = emit(session.read(after=last)) or last


@cli.command("messages", context_settings=CONTEXT)
@click.argument("session_id")
@click.option("--agent", default=None, help="Only this agent's view of the history.")
@pass_state
def messages_command(state: State, session_id: str, agent: str | None) -> None:
    """Print the model-visible history as JSON."""
    session = state.existing(session_id)
    text = msgspec.json.format(encode(session.messages(agent=agent)), indent=2)
    sys.stdout.buffer.write(text + b"\n")


# -- repair, compact, copy, migrate -----------------------------------------------------------


@cli.command("repair", context_settings=CONTEXT)
@click.argument("session_ids", nargs=-1)
@click.option("--all", "all_sessions", is_flag=True, help="Every session in the store.")
@click.option("--dry-run", is_flag=True, help="Report what would be repaired; write nothing.")
@pass_state
def repair_command(
    state: State, session_ids: tuple[str, ...], all_sessions: bool, dry_run: bool
) -> None:
    """Repair turns a crash cut off (those whose turn lock is free); with --dry-run, report
    every session named (or, with --all, every session) and what a repair would write."""
    if bool(session_ids) == all_sessions:
        raise UsageError("name sessions to repair, or pass --all (not both)")
    store = state.store()
    for sid in session_ids:
        state.existing(sid)
    if dry_run:
        ids = list(session_ids) or [info.id for info in store.list()]
        reports = store.recover(ids, dry_run=True)
    else:
        reports = store.recover(list(session_ids) if session_ids else None)
        if not reports:
            click.echo("nothing to repair")
    for report in reports:
        _echo_report(report, dry_run=dry_run)
    damaged = [r.session_id for r in reports if r.status == "damaged"]
    if damaged:
        _fail(f"{len(damaged)} session(s) could not be read or repaired: {', '.join(damaged)}")


def _echo_report(report: StoreRecoveryReport, *, dry_run: bool) -> None:
    sid = report.session_id
    if report.status in ("pending", "live") and dry_run:
        what = ", ".join(
            f"turn at seq {t.turn_start_seq} ({t.orphan_results} unanswered calls)"
            for t in report.turns
        )
        live = "live (turn lock held), " if report.status == "live" else ""
        click.echo(f"{sid}: {live}would repair {what}")
    elif report.status == "repaired":
        results = sum(t.orphan_results for t in report.turns if t.repaired)
        repaired = sum(1 for t in report.turns if t.repaired)
        click.echo(
            f"{sid}: repaired {repaired} turn(s), {results} interrupted tool result(s) recorded"
        )
    elif report.status == "live":
        click.echo(f"{sid}: live (turn lock held), left alone")
    elif report.status == "expired":
        click.echo(f"{sid}: expired (older than the store's TTL), left alone")
    elif report.status == "damaged":
        click.echo(f"{sid}: damaged, left alone: {report.error}")
    else:
        click.echo(f"{sid}: clean")


@cli.command("compact", context_settings=CONTEXT)
@click.argument("session_id")
@click.option("--summary", default=None, help="The summary text.")
@click.option(
    "--summary-file",
    type=click.File("r", encoding="utf-8"),
    default=None,
    help="Read the summary from a file ('-' for stdin).",
)
@click.option(
    "--keep-turns",
    type=click.IntRange(min=0),
    required=True,
    help="How many of the latest turns to keep verbatim.",
)
@click.option("--agent", default=None, help="Compact only this agent's history.")
@click.option(
    "--lock-timeout",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="Seconds to wait for the session's turn lock (a running turn holds it).",
)
@click.option(
    "--no-lock",
    is_flag=True,
    help="Do not take the turn lock. Unsafe while an agent is running the session: a turn in "
    "progress may be summarised away half-done.",
)
@pass_state
def compact_command(
    state: State,
    session_id: str,
    summary: str | None,
    summary_file: Any,
    keep_turns: int,
    agent: str | None,
    lock_timeout: float,
    no_lock: bool,
) -> None:
    """Replace older history by a summary, keeping the latest turns (nothing is deleted).

    Takes the session's turn lock first, so it never cuts into a turn an agent is running;
    the marker is appended only if nothing was appended while it was planned."""
    if (summary is None) == (summary_file is None):
        raise UsageError("give the summary with --summary TEXT or --summary-file FILE")
    text = summary if summary is not None else summary_file.read()
    if not text.strip():
        raise UsageError("the summary is empty")
    session = state.existing(session_id)
    store = state.store()
    with contextlib.ExitStack() as held:
        if not no_lock:
            try:
                held.enter_context(store.lock(session_id, timeout=lock_timeout))
            except LockTimeout:
                raise LockTimeout(
                    session_id,
                    lock_timeout,
                    f"session {session_id!r} is busy: its turn lock is held (an agent is running "
                    f"a turn); waited {lock_timeout:g} s. Try again later, or pass --no-lock "
                    "(unsafe)",
                ) from None
        seq = session.compact(Message.user(text.strip()), keep_turns=keep_turns, agent=agent)
    if seq is None:
        click.echo(f"{session_id}: nothing to compact (it has at most {keep_turns} turns)")
        return
    marker = session.read(after=seq - 1, limit=1)[0].decode(ev.Compaction)
    click.echo(
        f"{session_id}: compacted at seq {seq}; history before seq "
        f"{marker.first_kept_seq} is now the summary, {len(marker.retained_tail)} "
        "messages kept"
    )


@cli.command("copy", context_settings=CONTEXT)
@click.argument("source")
@click.argument("destination")
@click.option("--id", "ids", multiple=True, help="Copy only this session (repeatable).")
@pass_state
def copy_command(state: State, source: str, destination: str, ids: tuple[str, ...]) -> None:
    """Copy sessions from one store to another, verifying counts and last seqs."""
    src, dst = open_store(source), open_store(destination)
    try:
        wanted = list(ids) or [info.id for info in src.list()]
        for sid in wanted:
            if not src.exists(sid):
                raise SessionNotFound(sid, f"no session {sid!r} in {src.location}")
            if dst.exists(sid):
                raise UsageError(
                    f"session {sid!r} already exists in {dst.location}; remove it there first"
                )
        copied = 0
        with Progress(console=Console(stderr=True), transient=True) as progress:
            task = progress.add_task("copying", total=len(wanted))
            for sid in wanted:
                events = src.get(sid).read()
                target = dst.get(sid)
                for start in range(0, len(events), 1000):
                    target.append_many(events[start : start + 1000])
                got = target.read()
                if len(got) != len(events) or (got and got[-1].seq != events[-1].seq):
                    raise SessionError(
                        f"copy of {sid!r} does not match: {len(got)} events up to seq "
                        f"{got[-1].seq if got else 0} in {dst.location}, {len(events)} up to "
                        f"{events[-1].seq if events else 0} in {src.location}"
                    )
                copied += len(events)
                progress.advance(task)
        click.echo(
            f"copied {len(wanted)} sessions ({copied} events) from {src.location} to "
            f"{dst.location}; event counts and last seqs verified"
        )
    finally:
        src.close()
        dst.close()


@cli.command("migrate", context_settings=CONTEXT)
@pass_state
def migrate_command(state: State) -> None:
    """Apply pending schema migrations to a SQL store (opening a store applies them too;
    run this from a deploy step when workers open stores with auto_migrate=False). Stores
    without a schema (JSONL, memory) have nothing to migrate."""
    applied = migrate_store(state.url)
    if applied:
        click.echo("applied migrations " + ", ".join(map(str, applied)))
    else:
        click.echo("nothing to migrate (the schema is up to date, or this store has no schema)")


@cli.command("demo", context_settings=CONTEXT)
@click.argument("directory", default="./agentsession-demo")
def demo_command(directory: str) -> None:
    """Run a scripted agent through three conversations, crash one, recover and compact."""
    from .demo import run_demo

    # Long lines stay whole (the terminal wraps them), so the printed commands copy cleanly.
    run_demo(directory, Console(file=sys.stdout, soft_wrap=True, highlight=False))


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``agentsession`` command."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="agentsession")
