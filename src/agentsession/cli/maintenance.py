"""``repair``, ``compact``, ``rewind``, ``branch``, ``copy`` and ``migrate``: the commands that
keep a store well, take a conversation back and branch it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import click

from .. import events as ev
from ..compaction import COMPACTION_EFFECT_KIND
from ..contract import StoreRecoveryReport
from ..copying import copy_store
from ..crypto import EncryptionError
from ..errors import DuplicateSession, LockTimeout, StoreUnavailable, UsageError
from ..messages import Message
from ..session import BaseSession
from ..store import BaseStore, migrate_store
from ._group import CONTEXT, _examples, cli, pass_state
from ._output import (
    EXIT_ERROR,
    _columns,
    _echo,
    _fail,
    _json_line,
    _listing,
    _progress,
    _quiet,
    _short,
    clean,
)
from ._state import (
    _DST_KEY_HINT,
    DST_PASSPHRASE_ENV,
    NoStore,
    State,
    _check_url,
    _is_path,
    _not_found,
    _open_store,
    open_existing,
    secret_from,
)


@cli.command(
    "repair",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession repair --all --dry-run",
        "agentsession repair --all --dry-run --exit-code || echo 'something to repair'",
        "agentsession repair slack:C002",
    ),
)
@click.argument("session_ids", nargs=-1)
@click.option("--all", "all_sessions", is_flag=True, help="Every session in the store.")
@click.option("--dry-run", is_flag=True, help="Report what would be repaired; write nothing.")
@click.option(
    "--exit-code",
    is_flag=True,
    help="Exit with status 1 when a session has (or, without --dry-run, had) turns to repair.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON report per session.")
@pass_state
def repair_command(
    state: State,
    session_ids: tuple[str, ...],
    all_sessions: bool,
    dry_run: bool,
    exit_code: bool,
    as_json: bool,
) -> None:
    """Repair turns a crash cut off (those whose turn lock is free); with --dry-run, report
    every session named (or, with --all, every session) and what a repair would write."""
    if bool(session_ids) == all_sessions:
        raise UsageError("name sessions to repair, or pass --all (not both)")
    store = state.store(read_only=dry_run)
    for sid in session_ids:
        if not store.exists(sid):
            raise _not_found(store, sid)
    ids = list(dict.fromkeys(session_ids)) or [info.id for info in store.list()]
    reports: list[StoreRecoveryReport] = []
    # The reports below say what the recovery log says: keep its warnings off stderr.
    with _quiet("agentsession.recovery"), _progress(len(ids), "repairing") as advance:
        for sid in ids:
            for report in store.recover([sid], dry_run=dry_run):
                quiet = ("clean", "expired", "shredded")
                shown = dry_run or session_ids or report.status not in quiet
                if shown:
                    reports.append(report)
                    if as_json:
                        _json_line(report)
                    else:
                        _echo_report(report, dry_run=dry_run)
            advance()
    if not reports and not as_json:
        _echo("nothing to repair")
    damaged = [r.session_id for r in reports if r.status == "damaged"]
    if damaged:
        _fail(f"{len(damaged)} session(s) could not be read or repaired: {', '.join(damaged)}")
    if exit_code and any(r.status in ("pending", "live", "repaired") for r in reports):
        raise click.exceptions.Exit(EXIT_ERROR)


def _echo_report(report: StoreRecoveryReport, *, dry_run: bool) -> None:
    sid = clean(report.session_id)
    if report.status in ("pending", "live") and dry_run:
        what = ", ".join(
            f"turn at seq {t.turn_start_seq} ({t.orphan_results} unanswered calls)"
            for t in report.turns
        )
        live = "live (turn lock held), " if report.status == "live" else ""
        _echo(f"{sid}: {live}would repair {what}")
    elif report.status == "repaired":
        results = sum(t.orphan_results for t in report.turns if t.repaired)
        repaired = sum(1 for t in report.turns if t.repaired)
        _echo(f"{sid}: repaired {repaired} turn(s), {results} interrupted tool result(s) recorded")
    elif report.status == "live":
        _echo(f"{sid}: live (turn lock held), left alone")
    elif report.status == "expired":
        _echo(f"{sid}: expired (older than the store's TTL), left alone")
    elif report.status == "shredded":
        _echo(f"{sid}: shredded (its key is destroyed), left alone")
    elif report.status == "damaged":
        _echo(f"{sid}: damaged, left alone: {clean(report.error)}")
    else:
        _echo(f"{sid}: clean")


def _compaction_effects(store: BaseStore, session: BaseSession) -> list[str]:
    """What a compaction does not change for the event types in ``session``, as the code that
    wrote them recorded it (meta namespace ``compaction-effect``, keyed by type namespace)."""
    namespaces = sorted({e.type.split("/", 1)[0] for e in session.read() if "/" in e.type})
    notes = (store.meta_get(COMPACTION_EFFECT_KIND, name) for name in namespaces)
    return [note for note in notes if note]


@cli.command(
    "compact",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession compact slack:C001 --keep-turns 2 --summary 'The user fixed parse().'",
        "summarise.sh | agentsession compact slack:C001 --keep-turns 2 --summary-file -",
    ),
)
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
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
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
    as_json: bool,
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
        if as_json:
            _json_line({"session_id": session_id, "seq": None})
        else:
            _echo(f"{clean(session_id)}: nothing to compact (it has at most {keep_turns} turns)")
        return
    marker = session.read(after=seq - 1, limit=1)[0].decode(ev.Compaction)
    for note in _compaction_effects(store, session):
        click.echo(f"warning: {clean(session_id)}: {clean(note)}", err=True)
    if as_json:
        _json_line(
            {
                "session_id": session_id,
                "seq": seq,
                "first_kept_seq": marker.first_kept_seq,
                "kept_messages": len(marker.retained_tail),
            }
        )
        return
    _echo(
        f"{clean(session_id)}: compacted at seq {seq}; history before seq "
        f"{marker.first_kept_seq} is now the summary, {len(marker.retained_tail)} "
        "messages kept"
    )


def _turn_point(value: str, option: str = "--to-turn") -> int | str:
    """A turn option's value (``--to-turn``, ``--at-turn``): digits are a seq inside the
    turn, anything else its turn id."""
    text = value.strip()
    if not text:
        raise UsageError(f"{option} needs a turn id or a seq, not an empty string")
    return int(text) if text.isdigit() else text


def _gist(message: Message) -> str:
    """A message in a few words, on one line: its text, else its tool calls or results."""
    if message.text:
        return _short(message.text, 80)
    if message.tool_calls:
        return "calls " + ", ".join(call.name for call in message.tool_calls)
    if message.tool_results:
        return "results of " + ", ".join(result.name for result in message.tool_results)
    return "(no text)"


@cli.command(
    "rewind",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession rewind slack:C001 --to-turn 12 --reason 'wrong answer'",
        "agentsession rewind slack:C001 --to-seq 40",
        "agentsession rewind slack:C001 --to-turn 0f3c9a2e --json",
    ),
)
@click.argument("session_id")
@click.option(
    "--to-seq",
    type=click.IntRange(min=0),
    default=None,
    help="Go back to the history as it stood right after this seq (a seq inside a turn moves "
    "to just before that turn).",
)
@click.option(
    "--to-turn",
    default=None,
    help="Go back to the end of this turn: its turn id, or any seq inside it (digits are a "
    "seq). That turn stays, the later ones leave the history.",
)
@click.option("--reason", default=None, help="Why, recorded in the marker.")
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
    help="Do not take the turn lock; the rewind is then refused while a turn has no end.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@pass_state
def rewind_command(
    state: State,
    session_id: str,
    to_seq: int | None,
    to_turn: str | None,
    reason: str | None,
    lock_timeout: float,
    no_lock: bool,
    as_json: bool,
) -> None:
    """Go back in a conversation: append a rewind marker after which the history is the one
    that stood at an earlier point (nothing is deleted: show still prints every event, and a
    later rewind can bring the rewound turns back).

    Takes the session's turn lock first, so it never cuts into a turn an agent is running;
    the marker is appended only if nothing was appended while it was planned. A rewind never
    goes back past the latest compaction (docs/rewind.md)."""
    if (to_seq is None) == (to_turn is None):
        raise UsageError("give exactly one of --to-seq N and --to-turn TURN")
    point = _turn_point(to_turn) if to_turn is not None else None
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
                    f"a turn); waited {lock_timeout:g} s. Try again later",
                ) from None
        seq = session.rewind(to_seq=to_seq, to_turn=point, reason=reason)
    marker = session.read(after=seq - 1, limit=1)[0].decode(ev.SessionRewind)
    entries = session.entries()
    last = entries[-1] if entries else None
    if as_json:
        _json_line(
            {
                "session_id": session_id,
                "seq": seq,
                "to_seq": marker.to_seq,
                "messages": len(entries),
                "last": None
                if last is None
                else {"seq": last.seq, "role": last.message.role, "text": last.message.text},
            }
        )
        return
    if last is None:
        ends = "the history is now empty"
    else:
        ends = (
            f"the history now has {len(entries)} messages and ends with seq {last.seq}, "
            f"{last.message.role}: {_gist(last.message)}"
        )
    _echo(clean(f"{session_id}: rewound to seq {marker.to_seq} (marker at seq {seq}); {ends}"))


def _list_branches(state: State, session_id: str, as_json: bool) -> None:
    """``branch --list``: the session's origin (for a branch) and its branches."""
    session = state.existing(session_id, read_only=True)
    refs = session.branches()  # reads only
    origin = session.origin
    if as_json:
        _json_line(
            {
                "session_id": session_id,
                "origin": None if origin is None else {"id": origin.id, "seq": origin.seq},
                "branches": [{"id": ref.id, "seq": ref.seq} for ref in refs],
            }
        )
        return
    sid = clean(session_id)
    if origin is not None:
        _echo(f"{sid}: a branch of {clean(origin.id)} at seq {origin.seq}")
    if not refs:
        _echo(f"{sid}: no branches")
        return
    _echo(f"{sid}: {len(refs)} {'branch' if len(refs) == 1 else 'branches'}")
    table = [["id", "seq"], *([clean(ref.id), str(ref.seq)] for ref in refs)]
    for line in _columns(table, right=(1,)):
        _echo(line)


@cli.command(
    "branch",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession branch slack:C001",
        "agentsession branch slack:C001 --at-turn 12 --id slack:C001:try-2",
        "agentsession branch slack:C001 --at-seq 40 --json",
        "agentsession branch slack:C001 --list",
    ),
)
@click.argument("session_id")
@click.option(
    "--at-seq",
    type=click.IntRange(min=0),
    default=None,
    help="Branch from the history as it stood right after this seq (a seq inside a turn "
    "moves to just before that turn).",
)
@click.option(
    "--at-turn",
    default=None,
    help="Branch from the end of this turn: its turn id, or any seq inside it (digits are a "
    "seq). Without --at-seq and --at-turn the branch starts at the head (before a turn "
    "still running).",
)
@click.option(
    "--id",
    "new_id",
    default=None,
    help="The branch's id (default: the session's id, '~' and 12 hex digits); it must be new.",
)
@click.option(
    "--list",
    "list_branches",
    is_flag=True,
    help="List the session's branches (id and seq) and, for a branch, its origin; create nothing.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@pass_state
def branch_command(
    state: State,
    session_id: str,
    at_seq: int | None,
    at_turn: str | None,
    new_id: str | None,
    list_branches: bool,
    as_json: bool,
) -> None:
    """Branch a conversation: a new session whose history is this one's up to a point, then
    its own (nothing is copied: the branch stores one marker and reads the shared part from
    this session, which is left unchanged). Prints the branch's id, where it leaves its
    origin and how many messages its history has; --list lists the branches instead
    (docs/rewind.md)."""
    if list_branches:
        if at_seq is not None or at_turn is not None or new_id is not None:
            raise UsageError("--list takes none of --at-seq, --at-turn and --id")
        _list_branches(state, session_id, as_json)
        return
    if at_seq is not None and at_turn is not None:
        raise UsageError("give at most one of --at-seq N and --at-turn TURN")
    point = _turn_point(at_turn, "--at-turn") if at_turn is not None else None
    session = state.existing(session_id)
    store = state.store()
    if new_id is not None and new_id != session_id and store.exists(new_id):
        # Checked first, so that the origin's list of branches never names it.
        raise UsageError(f"session {new_id!r} exists already: a branch needs a new id")
    try:
        made = session.branch(at_seq=at_seq, at_turn=point, id=new_id)
    except DuplicateSession:  # created meanwhile by another writer
        raise UsageError(f"session {new_id!r} exists already: a branch needs a new id") from None
    origin = made.origin
    assert origin is not None  # a branch names its origin
    entries = made.entries()
    if as_json:
        _json_line(
            {"id": made.id, "origin": origin.id, "seq": origin.seq, "messages": len(entries)}
        )
        return
    if entries:
        last = entries[-1]
        history = (
            f"its history has {len(entries)} messages and ends with seq {last.seq}, "
            f"{last.message.role}: {_gist(last.message)}"
        )
    else:
        history = "its history is empty"
    _echo(clean(f"{made.id}: branched from {origin.id} at seq {origin.seq}; {history}"))


@cli.command(
    "copy",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession copy ./.agentsession sqlite:///sessions.db",
        "agentsession copy ./.agentsession postgresql://app@db/agents --skip-existing",
        "agentsession copy ./.agentsession ./backup --id slack:C002",
        "agentsession copy ./.agentsession ./encrypted --dst-key-file ~/.agentsession-key",
        "agentsession --key-file ~/.agentsession-key copy ./encrypted ./plain",
    ),
)
@click.argument("source")
@click.argument("destination")
@click.option("--id", "ids", multiple=True, help="Copy only this session (repeatable).")
@click.option(
    "--dst-key-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="The destination's passphrase, in a file (as --key-file; default: the environment "
    "variable AGENTSESSION_DST_PASSPHRASE). A new or empty destination becomes encrypted with "
    "it; without it the copy is plain. The source's key is the global --key-file.",
)
@click.option(
    "--skip-existing",
    is_flag=True,
    help="Leave sessions the destination already has; complete those an interrupted copy "
    "left half-copied (so running the same copy again resumes it).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@pass_state
def copy_command(
    state: State,
    source: str,
    destination: str,
    ids: tuple[str, ...],
    dst_key_file: str | None,
    skip_existing: bool,
    as_json: bool,
) -> None:
    """Copy sessions, and everything stored beside them, from one store to another; verify.

    The source must exist (nothing is created there); the destination is created when
    missing. Each session is created in the destination atomically with its first 1000
    events, the rest follow in batches of 1000; then its record, children index and binding,
    and (copying the whole store) the active-session map, the CLI pointer and integration
    state: every meta entry but the key records. Event times are kept, and so is a JSONL
    session's last activity. The copy is read back and verified: event counts, last seqs, ids
    and a digest of the events, and every meta entry. Encryption is each store's own: the
    source is opened with the global key (--key-file, AGENTSESSION_PASSPHRASE), the
    destination with --dst-key-file or AGENTSESSION_DST_PASSPHRASE, so a copy encrypts a plain
    store, decrypts an encrypted one, or changes its key. A shredded session cannot be read,
    so a copy of the whole store leaves it out (and says so); naming it with --id is an
    error."""
    _check_url(destination)
    dst_secret = secret_from(dst_key_file, DST_PASSPHRASE_ENV)
    src = open_existing(source, **state.secret().options(), read_only=True)
    dst: BaseStore | None = None
    try:
        missing = [sid for sid in dict.fromkeys(ids) if not src.exists(sid)]
        if missing:  # before the destination is created
            raise _not_found(src, missing[0], more=len(missing) - 1)
        dst = _open_store(destination, dst_secret, _DST_KEY_HINT)
        with contextlib.ExitStack() as bar:
            advance: list[Callable[[], None]] = []

            def progress(done: int, total: int, session_id: str) -> None:
                if not advance:
                    advance.append(bar.enter_context(_progress(total, "copying")))
                advance[0]()

            report = copy_store(
                src, dst, ids=ids or None, skip_existing=skip_existing, progress=progress
            )
    finally:
        src.close()
        if dst is not None:
            dst.close()
    if as_json:
        _json_line(report)
        return
    line = (
        f"copied {report.sessions} sessions ({report.events} events) and {report.meta} meta "
        f"entries from {report.source} to {report.destination}; event counts, last seqs, ids "
        f"and digests and {report.verified_meta} meta entries verified"
    )
    if report.completed:
        line += f"; completed {len(report.completed)} that an earlier copy left half-copied"
    if report.skipped:
        line += f"; skipped {len(report.skipped)} already there"
    if report.meta_kept:
        kept = [f"{kind} {key}" for kind, key in report.meta_kept]
        line += (
            f"; kept {len(kept)} meta entries the destination holds with other values "
            f"({_listing(kept)})"
        )
    if report.shredded:
        line += f"; left out {len(report.shredded)} shredded ({_listing(report.shredded)})"
    _echo(clean(line))


@cli.command(
    "migrate",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession --store postgresql://app@db/agents migrate",
        "agentsession --store sqlite:///sessions.db migrate --json",
        "agentsession --store postgresql://app@db/agents migrate --partitions 16",
    ),
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@click.option(
    "--partitions",
    type=click.IntRange(1, 1024),
    default=None,
    help="PostgreSQL: lay the events table out as N hash partitions by session id (1: one "
    "plain table), copying the events in one transaction when it has another layout.",
)
@pass_state
def migrate_command(state: State, as_json: bool, partitions: int | None) -> None:
    """Apply pending schema migrations to a SQL store (opening a store applies them too;
    run this from a deploy step when workers open stores with auto_migrate=False). Stores
    without a schema (JSONL) have nothing to migrate.

    A directory or SQLite file must hold a store already ("no store at ...", exit 4: a
    mistyped path has nothing to migrate); on a PostgreSQL server, migrate creates the
    store's tables in their schema when they are not there yet (the deploy step).

    ``--partitions N`` (PostgreSQL) lays the events table out as N hash partitions by session
    id; appends and reads wait while it copies the events (see docs/scaling.md)."""
    _check_url(state.url)
    scheme = state.url.strip().partition(":")[0].lower()
    postgres = scheme in ("postgresql", "postgres")
    if partitions is not None and not postgres:
        raise UsageError("--partitions lays out a PostgreSQL store's events table only")
    if _is_path(state.url) or not postgres:
        # An encrypted store exists as well; its schema needs no key. Opened read-only, so
        # that the migrations are applied (and reported) below, not by this check.
        try:
            open_existing(state.url, read_only=True).close()
        except NoStore:
            raise
        except (EncryptionError, StoreUnavailable):
            pass  # it exists: a schema too old to read is what migrate is for
    if partitions is None:
        applied = migrate_store(state.url)
    else:
        applied = migrate_store(state.url, partitions=partitions)
    if as_json:
        out: dict[str, object] = {"applied": applied}
        if partitions is not None:
            out["partitions"] = partitions
        _json_line(out)
        return
    if partitions is not None:
        layout = f"{partitions} partitions" if partitions > 1 else "one table"
        _echo(f"events table: {layout}")
    if applied:
        _echo("applied migrations " + ", ".join(map(str, applied)))
    elif partitions is None:
        _echo("nothing to migrate (the schema is up to date, or this store has no schema)")
