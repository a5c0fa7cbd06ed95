"""``ls``, ``stats`` and ``rm``: list, count and delete sessions."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import click
import msgspec

from .. import children
from ..children import SessionTree
from ..contract import SessionInfo
from ..listing import ORDERS
from ..stats import SessionStats, StoreStats
from ._group import CONTEXT, _examples, cli, many_ids, pass_state
from ._output import (
    _ask_first,
    _columns,
    _count,
    _echo,
    _fail,
    _ids_from,
    _json_line,
    _listing,
    _others_too,
    _progress,
    _size,
    _when,
    clean,
)
from ._state import State, _check_exist, _outermost
from .catalog import parse_where_options, print_catalog, print_next_cursor, where_options


class _Row(msgspec.Struct):
    """One line of ``ls``: only what ``store.list()`` reports, no event is read."""

    id: str
    last_seq: int | None
    """The session's last seq, which is its number of events; None when the backend does not
    know it cheaply."""
    updated_at: dt.datetime | None
    """When the session was last appended to."""
    size: int | None
    """Bytes in storage; None when the backend does not keep it per session (SQLite,
    PostgreSQL)."""


def _tree_state(row: SessionTree) -> str:
    """The state cell of ``ls --tree``: the child's state, and ``shredded`` for a session
    whose key was destroyed."""
    shown = [clean(row.state)] if row.state else []
    if row.shredded:
        shown.append("shredded")
    return ", ".join(shown) or "-"


def _tree_lines(trees: Sequence[SessionTree]) -> list[list[str]]:
    """The cells of ``ls --tree``, a child indented under its parent (two spaces a level, so
    the id stays the line's first field)."""
    table: list[list[str]] = []

    def add(row: SessionTree, level: int) -> None:
        table.append(
            [
                "  " * level + clean(row.id),
                _count(row.last_seq),
                _when(row.updated_at),
                _size(row.size),
                clean(row.agent) if row.agent else "-",
                _tree_state(row),
            ]
        )
        for child in row.children:
            add(child, level + 1)

    for top in trees:
        add(top, 0)
    return table


@cli.command(
    "ls",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession ls",
        "agentsession ls --prefix slack: --limit 20",
        "agentsession ls | awk '{print $1}'      # ids, never shortened",
        "agentsession ls --json | jq -r .id",
        "agentsession ls --tree                  # child sessions under their parents",
        "agentsession ls --tree --json | jq '.children[].id'",
        "agentsession ls -l                      # with status, counts, usage and title",
        "agentsession ls --where tenant=acme --tag billing --status idle,live",
        "agentsession ls --where user=u1,u2 --order created --limit 50",
        "agentsession ls --limit 50 --cursor CURSOR   # the page after the one that printed it",
    ),
)
@click.option("--prefix", default=None, help="Only ids starting with this.")
@click.option("--limit", type=click.IntRange(min=0), default=None, help="At most this many.")
@click.option(
    "--tree",
    is_flag=True,
    help="Show child sessions (forked for subagents) indented under their parents, in fork "
    "order, with their agent and state; with --json, one nested object per top session.",
)
@where_options
@click.option(
    "--order",
    type=click.Choice(ORDERS),
    default=None,
    help="updated (the last append, newest first; the default), created (newest first) or id.",
)
@click.option(
    "--cursor",
    default=None,
    help="Continue after the page that printed this cursor (give the same filters and order).",
)
@click.option(
    "-l",
    "--long",
    "long_view",
    is_flag=True,
    help="Show the catalog's columns: status, messages, turns, tokens, cost and title.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@pass_state
def ls_command(
    state: State,
    prefix: str | None,
    limit: int | None,
    tree: bool,
    where: tuple[str, ...],
    tags: tuple[str, ...],
    statuses: tuple[str, ...],
    order: str | None,
    cursor: str | None,
    long_view: bool,
    as_json: bool,
) -> None:
    """List sessions, most recently active first (events shows ? when the store cannot tell
    without reading the session; size shows - when the store does not keep it).

    With --tree, a session forked from another listed session is shown under it instead of
    at the top, and its children under it (also those --prefix or --limit left out).

    With -l/--long, --where, --tag, --status, --order or --cursor, the sessions come from the
    store's catalog (docs/catalog.md): each line shows the session's status, messages, turns,
    tokens (input + output), cost and title, --json prints every field of the library's
    SessionInfo, and when --limit cuts the listing short the cursor of the next page is
    printed on stderr (next_cursor: ...). A store that keeps no catalog refuses them."""
    store = state.store(read_only=True)
    checked = parse_where_options(where, tags, statuses)
    catalog = long_view or checked is not None or order is not None or cursor is not None
    infos: Sequence[SessionInfo]
    next_cursor: str | None = None
    if catalog:
        page = store.list(
            prefix=prefix, limit=limit, where=checked or {}, order=order or "updated",
            cursor=cursor,
        )
        infos, next_cursor = page, page.next_cursor
    else:
        infos = store.list(prefix=prefix, limit=limit)
    if tree:
        trees = children.tree(store, infos)
        if as_json:
            for top in trees:
                _json_line(top)
        elif not trees:
            _echo(f"no sessions in {clean(store.location)}")
        else:
            table = [["id", "events", "last activity (UTC)", "size", "agent", "state"]]
            for line in _columns(table + _tree_lines(trees), right=(1, 3)):
                _echo(line)
        print_next_cursor(next_cursor)
        return
    if catalog:
        if as_json:
            for info in infos:
                _json_line(info)
        elif not infos:
            _echo(f"no sessions match in {clean(store.location)}")
        else:
            print_catalog(infos)
        print_next_cursor(next_cursor)
        return
    rows = [
        _Row(
            id=info.id,
            last_seq=info.last_seq if info.last_seq >= 0 else None,
            updated_at=info.updated_at,
            size=info.size or None,
        )
        for info in infos
    ]
    if as_json:
        for row in rows:
            _json_line(row)
        return
    if not rows:
        _echo(f"no sessions in {clean(store.location)}")
        return
    table = [["id", "events", "last activity (UTC)", "size"]]
    table += [
        [clean(row.id), _count(row.last_seq), _when(row.updated_at), _size(row.size)]
        for row in rows
    ]
    for line in _columns(table, right=(1, 3)):
        _echo(line)


_STAT_LABELS = {"message_events": "message events", "history_messages": "messages in history"}


def _print_stats(title: str, stats: StoreStats | SessionStats) -> None:
    _echo(clean(title))
    for key, value in msgspec.structs.asdict(stats).items():
        if key == "session_id":
            continue  # in the title
        label = _STAT_LABELS.get(key, key.replace("_", " "))
        shown = _size(value) if key == "bytes" else "?" if value is None else str(value)
        _echo(f"{label}: {shown}")


@cli.command(
    "stats",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession stats",
        "agentsession stats slack:C002",
        "agentsession stats --json",
    ),
)
@click.argument("session_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@pass_state
def stats_command(state: State, session_id: str | None, as_json: bool) -> None:
    """Count the store's sessions, events and bytes (from its listing, reading no events; for
    SQLite, bytes is the database file's size); with SESSION_ID, that session's events, turns,
    message events (user and assistant messages stored), messages in history (what the model
    is sent: after compaction, with tool results) and incomplete turns."""
    store = state.store(read_only=True)
    stats: StoreStats | SessionStats
    if session_id is None:
        stats = store.stats()
        title = f"store: {store.location}"
    else:
        state.existing(session_id, read_only=True)  # not found: with a suggestion
        stats = store.stats(session_id)
        title = f"session: {session_id}"
    if as_json:
        _json_line(stats)
    else:
        _print_stats(title, stats)


@cli.command(
    "rm",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession rm slack:C002                 # asks first on a terminal",
        "agentsession rm --dry-run slack:C002 cli:demo",
        "agentsession ls --prefix tmp: | awk 'NR>1 {print $1}' | agentsession rm -y -",
        "agentsession rm -r --dry-run slack:C002    # with its child sessions, and theirs",
    ),
)
@many_ids("Also delete the sessions' child sessions (forked for subagents), and theirs.")
@click.option("--dry-run", is_flag=True, help="Say what would be deleted; delete nothing.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per session.")
@pass_state
def rm_command(
    state: State,
    session_ids: tuple[str, ...],
    yes: bool,
    recursive: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Delete sessions (their events and everything stored beside them), for good.

    SESSION_IDS may be '-' to read ids from stdin, one per line. On a terminal rm asks before
    deleting; elsewhere (a script, ids on stdin) it deletes only with -y/--yes. Nothing is
    deleted when one of the ids does not exist, nor when one has child sessions and
    -r/--recursive is not given (with it, each session's whole subtree goes)."""
    ids, from_stdin = _ids_from(session_ids)
    store = state.store()
    _check_exist(store, ids)
    subtrees = {sid: children.descendants(store, sid) for sid in ids}
    if not recursive:
        parents = [sid for sid in ids if subtrees[sid]]
        if parents:
            first = parents[0]
            kids = sum(1 for parent in subtrees[first].values() if parent == first)
            below = len(subtrees[first])
            deeper = f" ({below} sessions below it in all)" if below > kids else ""
            _fail(
                f"session {first!r} has {kids} child session(s){deeper}"
                f"{_others_too(len(parents) - 1)}: pass "
                "-r/--recursive to delete them with it (rm -r --dry-run shows what would "
                "go); nothing deleted"
            )
    ids, parent_of, everything = _outermost(ids, subtrees)
    wanted = set(everything)
    counts: dict[str, int | None] = {
        info.id: info.last_seq if info.last_seq >= 0 else None
        for info in store.list()
        if info.id in wanted
    }

    def child_of(sid: str, before: str) -> str:
        parent = parent_of.get(sid)
        return f"{before}child of {clean(parent)}" if parent is not None else ""

    if dry_run:
        for sid in everything:
            if as_json:
                _json_line({"session_id": sid, "events": counts.get(sid), "deleted": False})
            else:
                events = _count(counts.get(sid))
                _echo(f"would delete {clean(sid)} ({events} events{child_of(sid, ', ')})")
        return
    _ask_first(
        yes=yes,
        from_stdin=from_stdin,
        asks="rm deletes for good and asks first",
        instead=(
            f"delete {len(everything)} session(s) without asking (--dry-run shows what "
            "would go)"
        ),
        question=f"Delete {len(everything)} session(s) for good: {_listing(everything)}?",
        declined="nothing deleted",
    )
    with _progress(len(ids), "deleting") as advance:
        for sid in ids:
            # The library deletes the children first, so an interrupted rm -r leaves the
            # parent (and rm -r can be run again), never children without their parent.
            store.delete(sid, recursive=recursive)
            for gone in (sid, *subtrees[sid]):
                if as_json:
                    _json_line({"session_id": gone, "events": counts.get(gone), "deleted": True})
                else:
                    parent = child_of(gone, "")
                    _echo(f"deleted {clean(gone)}" + (f" ({parent})" if parent else ""))
            advance()
