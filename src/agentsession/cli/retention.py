"""``archive``, ``retention`` and ``hold``: bounding what a store keeps live, and for how long
(``docs/retention.md``)."""

from __future__ import annotations

import dataclasses

import click

from ..errors import UsageError
from ..retention import Retention
from ._group import CONTEXT, _examples, cli, pass_state
from ._output import _echo, _json_line, clean
from ._state import State, _not_found


@cli.command(
    "archive",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession archive --all",
        "agentsession archive slack:C002 --before 5000",
    ),
)
@click.argument("session_ids", nargs=-1)
@click.option("--all", "all_sessions", is_flag=True, help="Every session in the store.")
@click.option("--before", type=int, default=None, help="Archive only seqs before this one.")
@click.option(
    "--up-to-marker",
    is_flag=True,
    help="Archive up to the compaction marker itself, not only before its kept turns.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per session.")
@pass_state
def archive_command(
    state: State,
    session_ids: tuple[str, ...],
    all_sessions: bool,
    before: int | None,
    up_to_marker: bool,
    as_json: bool,
) -> None:
    """Move the events no derived history needs out of the live logs into each session's
    archive (read() still returns them)."""
    if bool(session_ids) == all_sessions:
        raise UsageError("name sessions to archive, or pass --all (not both)")
    store = state.store()
    for sid in session_ids:
        if not store.exists(sid):
            raise _not_found(store, sid)
    ids: list[str | None] = [*dict.fromkeys(session_ids)] if session_ids else [None]
    for named in ids:
        report = store.archive(named, before=before, keep_after_marker=not up_to_marker)
        for entry in report.sessions:
            if as_json:
                _json_line(dataclasses.asdict(entry))
            elif entry.skipped is not None:
                _echo(f"{clean(entry.session_id)}: skipped ({entry.skipped})")
            else:
                sizes = ""
                if entry.live_bytes_before is not None and entry.live_bytes_after is not None:
                    sizes = f", live log {entry.live_bytes_before} -> {entry.live_bytes_after} B"
                _echo(
                    f"{clean(entry.session_id)}: archived {entry.moved} events "
                    f"(seqs {entry.first_seq}..{entry.through_seq}, {entry.archive_bytes} B "
                    f"{entry.compression}{sizes})"
                )


@cli.command(
    "retention",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession retention --archive-after 720h --idle-after 24h --dry-run",
        "agentsession retention --prefix tmp- --delete-after 168h",
    ),
)
@click.option("--dry-run", is_flag=True, help="Report what would be done; change nothing.")
@click.option("--idle-after", default=None, help="Idle for this long first (Go duration).")
@click.option("--archive-after", default=None, help="Archive sessions this old (Go duration).")
@click.option("--delete-after", default=None, help="Delete sessions this old (Go duration).")
@click.option("--prefix", default=None, help="Only sessions whose id starts with this.")
@click.option("--tenant", default=None, help="Only sessions of this tenant.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per action.")
@pass_state
def retention_command(
    state: State,
    dry_run: bool,
    idle_after: str | None,
    archive_after: str | None,
    delete_after: str | None,
    prefix: str | None,
    tenant: str | None,
    as_json: bool,
) -> None:
    """Archive or delete sessions by age and idleness (never one under a legal hold); every
    action is recorded in the store's audit log."""
    if archive_after is None and delete_after is None:
        raise UsageError("give --archive-after and/or --delete-after")
    store = state.store(read_only=dry_run)
    store.retention = (
        Retention(
            idle_after=idle_after,
            archive_after=archive_after,
            delete_after=delete_after,
            prefix=prefix,
            tenant=tenant,
        ),
    )
    report = store.apply_retention(dry_run=dry_run)
    for action in report.actions:
        if as_json:
            _json_line(dataclasses.asdict(action))
            continue
        verb = {"archive": "archive", "delete": "delete", "held": "held"}[action.action]
        if action.action == "held":
            line = f"{clean(action.session_id)}: held, not touched ({clean(action.reason)})"
        elif dry_run:
            line = f"{clean(action.session_id)}: would {verb} ({action.reason})"
        else:
            line = f"{clean(action.session_id)}: {verb}: {clean(action.detail)}"
        _echo(line)
    if not report.actions and not as_json:
        _echo("nothing to do")


@cli.command(
    "hold",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession hold slack:C002 --reason 'case 2026-17'",
        "agentsession hold slack:C002 --release",
        "agentsession hold --list",
    ),
)
@click.argument("session_id", required=False)
@click.option("--reason", default=None, help="Why the session is held.")
@click.option("--release", is_flag=True, help="Lift the hold.")
@click.option("--list", "list_holds", is_flag=True, help="List every hold.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_state
def hold_command(
    state: State,
    session_id: str | None,
    reason: str | None,
    release: bool,
    list_holds: bool,
    as_json: bool,
) -> None:
    """Place (or with --release lift) a legal hold: no retention rule, erasure or rm touches
    a held session."""
    store = state.store()
    if list_holds:
        for sid, hold in sorted(store.holds().items()):
            if as_json:
                _json_line({"session_id": sid, "reason": hold.reason, "since": hold.since})
            else:
                _echo(f"{clean(sid)}: {clean(hold.reason)} (since {hold.since.isoformat()})")
        return
    if session_id is None:
        raise UsageError("name a session (or pass --list)")
    if release:
        released = store.release(session_id)
        if as_json:
            _json_line({"session_id": session_id, "released": released})
        else:
            _echo(f"{clean(session_id)}: {'released' if released else 'was not held'}")
        return
    if not reason:
        raise UsageError("a hold needs --reason")
    if not store.exists(session_id):
        raise _not_found(store, session_id)
    store.hold(session_id, reason)
    if as_json:
        _json_line({"session_id": session_id, "held": True, "reason": reason})
    else:
        _echo(f"{clean(session_id)}: held ({clean(reason)})")
