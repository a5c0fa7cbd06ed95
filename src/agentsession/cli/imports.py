"""``agentsession import``: other runtimes' sessions into a store (agentkit, lango, the OpenAI
Agents SDK, ADK, LangGraph, Claude Code)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import click

from ..errors import UsageError
from ..store import BaseStore
from ._group import CONTEXT, _examples, cli, pass_state
from ._output import _echo, _json_line, _progress, clean
from ._state import NoStore, State, _check_url, open_existing


@cli.group(
    "import",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession import agentkit ~/.agentkit/sessions --dry-run",
        "agentsession import agentkit ./sessions --store sqlite:///sessions.db",
        "agentsession import lango ~/.lango/lango.db --store ./.agentsession --json",
        "agentsession import claude-code ~/.claude/projects/-home-me-app --dry-run",
    ),
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print a JSON object (the same as --json after the subcommand).",
)
@click.pass_context
def import_group(ctx: click.Context, as_json: bool) -> None:
    """Import the sessions of another agent runtime into a store (docs/import.md).

    The source is only read. Everything in it is read and checked first, so a source that
    cannot be read whole imports nothing; a session the store already has is skipped and
    reported, never changed. At the end every imported session is read back and its event
    count (for agentkit, its seqs) compared with the source's."""
    ctx.meta["agentsession.import_json"] = as_json


_STORE_OPTION = click.option(
    "--store",
    "store_url",
    default=None,
    help="The store to import into (created when missing); default: the global --store "
    "(env AGENTSESSION_STORE, else ./.agentsession).",
)
_DRY_RUN_OPTION = click.option(
    "--dry-run", is_flag=True, help="Say what would be imported; write nothing."
)
_JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")

_IDENTITY_LABELS = {"active": "active session", "bind": "agent binding", "cli": "CLI pointer"}


def _run_import(
    state: State,
    store_url: str | None,
    source: Any,
    dry_run: bool,
    as_json: bool,
    importer: Callable[..., Any] | None = None,
    report_file: str | None = None,
) -> None:
    """Import a scanned source into the store (with ``importer``, default
    :func:`~agentsession.interop.importers.import_source`), print what happened and, with
    ``report_file``, write the JSON report there."""
    from ..interop.importers import SessionOutcome, import_source, report_dict

    importer = importer or import_source
    as_json = as_json or bool(click.get_current_context().meta.get("agentsession.import_json"))
    url = store_url if store_url is not None else state.url
    _check_url(url)
    store: BaseStore | None
    if dry_run:
        try:
            store = open_existing(url, **state.secret().options(), read_only=True)
        except NoStore:
            store = None  # a dry run creates nothing; every session would be new
    else:
        store = state.open_for_writing(url)
    try:
        with _progress(len(source.sessions), "importing") as advance:

            def progress(_outcome: SessionOutcome) -> None:
                advance()

            report = importer(source, store, dry_run=dry_run, progress=progress)
        destination = report.destination or url
        data = report_dict(report)
        data["destination"] = destination
        if report_file is not None:
            _write_report(report_file, data)
        if as_json:
            _json_line(data)
            return
        for note in report.notes:
            click.echo(clean(f"note: {note}"), err=True)
        for s in report.sessions:
            guessed = " [id read from the file name]" if s.guessed_id else ""
            if s.status in ("imported", "would_import"):
                verb = "imported" if s.status == "imported" else "would import"
                _echo(clean(f"{verb} {s.session_id} ({s.events} events) from {s.source}{guessed}"))
            else:
                verb = "skipped" if s.status == "skipped" else "would skip"
                _echo(clean(f"{verb} {s.session_id}: already in {destination}"))
            for d in s.defects:
                action = "found, not healed" if d.action == "none" else d.action.replace("_", " ")
                _echo(clean(f"  {d.kind.replace('_', ' ')}: {action}: {d.detail}"))
        for i in report.identity:
            label = _IDENTITY_LABELS.get(i.kind, i.kind)
            what = f"{i.key} → {i.value}" if i.kind != "cli" else i.value
            status = {
                "written": "set",
                "would_write": "would set",
                "skipped": "kept the store's",
                "would_skip": "would keep the store's",
            }[i.status]
            _echo(clean(f"{status} {label}: {what}"))
        counts = (
            f"sessions found {report.found}, "
            f"{'would import' if dry_run else 'imported'} {report.imported}, "
            f"{'would skip' if dry_run else 'skipped'} {report.skipped} (already there), "
            f"events {report.events}"
        )
        if dry_run:
            _echo(clean(f"dry run: {counts}; nothing written to {destination}"))
        else:
            checked = {
                "agentkit": "event counts and seqs",
                "claude-code": "entries",
                "openai-agents": "event ids",
                "adk": "event ids",
                "langgraph": "event ids",
            }.get(report.source_kind, "event counts")
            _echo(clean(f"{counts} into {destination}; {checked} verified"))
    finally:
        source.close()
        if store is not None:
            store.close()


def _id_map(pairs: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, sid = pair.partition("=")
        if not sep or not name or not sid.strip():
            raise UsageError(
                f"--id-map takes FILE=ID (a log's file name and a session id), not {pair!r}"
            )
        out[name] = sid
    return out


@import_group.command(
    "agentkit",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession import agentkit ./sessions --dry-run",
        "agentsession import agentkit ./sessions --store sqlite:///sessions.db",
        "agentsession import agentkit ./sessions --id-map chat-api_default_channel.jsonl="
        "chat-api:default_channel",
    ),
)
@click.argument("directory")
@_STORE_OPTION
@click.option(
    "--id-map",
    "id_map",
    multiple=True,
    metavar="FILE=ID",
    help="Import the log FILE as session ID (repeatable): agentkit's file names replace every "
    "character but A-Z a-z 0-9 . _ - by _, so an id is read back from a name by convention "
    "(_ as :) when the directory names it nowhere else.",
)
@_DRY_RUN_OPTION
@_JSON_OPTION
@pass_state
def import_agentkit_command(
    state: State,
    directory: str,
    store_url: str | None,
    id_map: tuple[str, ...],
    dry_run: bool,
    as_json: bool,
) -> None:
    """Import an agentkit sessions directory: every <session>.jsonl log, the agent bindings
    (<session>/runtime.json or agent.json), the active-session map (<key>/current.json) and the
    CLI pointer (cli_current.jsonl). agentkit's seqs are kept."""
    from ..interop.importers import SourceNotFound, scan_agentkit_dir

    try:
        source = scan_agentkit_dir(directory, id_map=_id_map(id_map))
    except SourceNotFound as exc:
        raise NoStore(str(exc)) from None
    _run_import(state, store_url, source, dry_run, as_json)


@import_group.command(
    "lango",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession import lango ~/.lango/lango.db --dry-run",
        "agentsession import lango ~/.lango/lango.db --store postgresql://app@db/agents",
    ),
)
@click.argument("database")
@_STORE_OPTION
@_DRY_RUN_OPTION
@_JSON_OPTION
@pass_state
def import_lango_command(
    state: State, database: str, store_url: str | None, dry_run: bool, as_json: bool
) -> None:
    """Import a lango SQLite database (opened read-only): each row of sessions becomes a session
    with the id of its key, its messages become user, assistant and tool events, a compacted
    summary a compaction marker, and its agent_id the session's agent binding. An encrypted
    (SQLCipher) database is refused: decrypt it first."""
    from ..interop.importers import SourceNotFound, scan_lango_db

    try:
        source = scan_lango_db(database)
    except SourceNotFound as exc:
        raise NoStore(str(exc)) from None
    _run_import(state, store_url, source, dry_run, as_json)


_REPORT_OPTION = click.option(
    "--report",
    "report_file",
    default=None,
    metavar="FILE",
    help="Also write the JSON report (every session with its defects and what was done) to FILE.",
)
_NO_HEAL_OPTION = click.option(
    "--no-heal",
    is_flag=True,
    help="Import as the source has it: defects are reported, not fixed (the derived history "
    "still answers orphan calls with the interrupted stand-in).",
)
_ID_MAP_FILE_OPTION = click.option(
    "--id-map",
    "id_map_file",
    default=None,
    metavar="FILE",
    help="A JSON object mapping a source session's name (as the report's source shows it after "
    "the #) to the session id to import it as.",
)


def _write_report(path: str, data: Any) -> None:
    """Write the JSON report, whole or not at all (a temporary file renamed over ``path``)."""
    import os
    import tempfile

    from ..codec import encode

    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".report-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(encode(data) + b"\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _read_id_map(path: str | None) -> dict[str, str] | None:
    if path is None:
        return None
    import json

    try:
        with open(path, "rb") as f:
            value = json.load(f)
    except OSError as exc:
        raise UsageError(f"cannot read --id-map {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"--id-map {path} is not JSON: {exc}") from None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in value.items()
    ):
        raise UsageError(f"--id-map {path} must be a JSON object of strings (name: session id)")
    return value


def _foreign(
    kind: str,
    state: State,
    location: str,
    store_url: str | None,
    dry_run: bool,
    as_json: bool,
    id_map_file: str | None,
    no_heal: bool,
    report_file: str | None,
    checkpoints: str = "latest",
) -> None:
    from ..interop.foreign import open_source
    from ..interop.importers import SourceNotFound

    try:
        source = open_source(
            kind,
            location,
            heal=not no_heal,
            id_map=_read_id_map(id_map_file),
            checkpoints="all" if checkpoints == "all" else "latest",
        )
    except SourceNotFound as exc:
        raise NoStore(str(exc)) from None
    _run_import(state, store_url, source, dry_run, as_json, report_file=report_file)


_CHECKPOINTS_OPTION = click.option(
    "--checkpoints",
    type=click.Choice(["latest", "all"]),
    default="latest",
    show_default=True,
    help="latest: each thread at its latest checkpoint; all: every checkpoint, an earlier line "
    "whose messages part from the latest's imported as a branch <session>@<checkpoint id>.",
)


def _foreign_command(
    kind: str, argument: str, doc: str, examples: Sequence[str], *, checkpoints: bool = False
) -> None:
    @click.argument("source", metavar=argument)
    @_STORE_OPTION
    @_DRY_RUN_OPTION
    @_ID_MAP_FILE_OPTION
    @_NO_HEAL_OPTION
    @_REPORT_OPTION
    @_JSON_OPTION
    @pass_state
    def command(
        state: State,
        source: str,
        store_url: str | None,
        dry_run: bool,
        id_map_file: str | None,
        no_heal: bool,
        report_file: str | None,
        as_json: bool,
        checkpoints: str = "latest",
    ) -> None:
        _foreign(
            kind,
            state,
            source,
            store_url,
            dry_run,
            as_json,
            id_map_file,
            no_heal,
            report_file,
            checkpoints,
        )

    command.__doc__ = doc
    if checkpoints:
        command = _CHECKPOINTS_OPTION(command)
    made = import_group.command(kind, context_settings=CONTEXT, epilog=_examples(*examples))(
        command
    )
    made.help = doc


_foreign_command(
    "openai-agents",
    "DATABASE",
    """Import an OpenAI Agents SDK SQLite database (SQLiteSession, AsyncSQLiteSession,
    AdvancedSQLiteSession with its branches and turn usage): each session id a session, stored
    as OpenAIAgentsSession stores it, healed (orphan calls answered as interrupted, orphan
    outputs set aside, repeated call ids remapped) unless --no-heal.""",
    [
        "agentsession import openai-agents conversations.db --dry-run",
        "agentsession import openai-agents conversations.db --store sqlite:///s.db --report r.json",
    ],
)
_foreign_command(
    "adk",
    "SOURCE",
    """Import an ADK session database (DatabaseSessionService or SqliteSessionService: a
    SQLite file or a postgresql:// URL): each session adk:<app>:<user>:<session>, stored as
    AgentSessionService stores it, with its app: and user: state, healed unless --no-heal.""",
    [
        "agentsession import adk adk_sessions.db --dry-run",
        "agentsession import adk postgresql://app@db/adk --store sqlite:///s.db",
    ],
)
_foreign_command(
    "langgraph",
    "SOURCE",
    """Import a LangGraph checkpoint database (a SqliteSaver file or a PostgresSaver
    postgresql:// URL): each thread's messages at its latest checkpoint as the session
    langgraph:<thread>, with the checkpoint ids kept, healed unless --no-heal; with
    --checkpoints all, every checkpoint, an earlier line of the thread (time travel, an
    update of an earlier checkpoint) as a branch langgraph:<thread>@<checkpoint id>.""",
    [
        "agentsession import langgraph checkpoints.sqlite --dry-run",
        "agentsession import langgraph checkpoints.sqlite --checkpoints all",
        "agentsession import langgraph postgresql://app@db/graph --report report.json",
    ],
    checkpoints=True,
)


@import_group.command(
    "claude-code",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession import claude-code ~/.claude/projects/-home-me-app --dry-run",
        "agentsession import claude-code ~/.claude/projects --store sqlite:///sessions.db",
    ),
)
@click.argument("directory")
@_STORE_OPTION
@_DRY_RUN_OPTION
@click.option(
    "--id-map",
    "id_map_file",
    default=None,
    metavar="FILE",
    help="A JSON object mapping a project directory's name to the project key to store its "
    "transcripts under (claude:<project key>:<session>).",
)
@_NO_HEAL_OPTION
@_REPORT_OPTION
@_JSON_OPTION
@pass_state
def import_claude_code_command(
    state: State,
    directory: str,
    store_url: str | None,
    dry_run: bool,
    id_map_file: str | None,
    no_heal: bool,
    report_file: str | None,
    as_json: bool,
) -> None:
    """Import Claude Code transcripts: a project directory (~/.claude/projects/<project>, its
    <session>.jsonl files and their subagents' <session>/subagents/*.jsonl) or the projects
    directory holding several. Each transcript is stored as the Claude Agent SDK integration
    stores it (claude:<project>:<session>, subagents as child sessions), its typed history
    healed unless --no-heal. Running it again appends only what a transcript gained since; a
    store transcript that is not the start of its file is left as it is."""
    from ..interop.claude_code import import_claude_code
    from ..interop.foreign import open_source
    from ..interop.importers import SourceNotFound

    try:
        source = open_source(
            "claude-code", directory, heal=not no_heal, id_map=_read_id_map(id_map_file)
        )
    except SourceNotFound as exc:
        raise NoStore(str(exc)) from None
    _run_import(
        state, store_url, source, dry_run, as_json, import_claude_code, report_file=report_file
    )
