"""``search``, ``reindex`` and ``totals``, and the catalog options ``ls`` shares with them
(``--where``, ``--tag``, ``--status``): the store's catalog of sessions and search over it
(``store.list(where=...)``, ``store.search``, ``store.reindex``, ``store.totals``)."""

from __future__ import annotations

import datetime as dt
import re
import sys
from collections.abc import Callable, Collection, Sequence
from typing import Any, Final, TypeVar

import click
from rich.cells import cell_len
from rich.text import Text

from ..contract import SessionInfo
from ..errors import UsageError
from ..listing import GROUPS, STATUSES, Hit, Totals, words
from . import _output
from ._group import CONTEXT, _examples, cli, pass_state
from ._output import (
    _columns,
    _console,
    _count,
    _echo,
    _json_line,
    _progress,
    _when,
    clean,
)
from ._state import State, _check_exist

F = TypeVar("F", bound=Callable[..., Any])

WHERE_FIELDS: Final = ("status", "user", "tenant", "agent", "id", "title")
"""The fields ``--where FIELD=VALUE`` takes (``title``: contained, case-insensitive; the others:
one of the comma-separated values)."""

_ANY_OF: Final = frozenset(WHERE_FIELDS) - {"title"}


def parse_where_options(
    where: Sequence[str], tags: Sequence[str] = (), statuses: Sequence[str] = ()
) -> dict[str, object] | None:
    """The ``where`` mapping of ``store.list``/``search``/``totals`` made from the command
    line's ``--where FIELD=VALUE`` (repeatable; comma-separated values mean any of them, and
    a field given twice takes the values of both), ``--tag`` (every one) and ``--status``
    (any of them, as ``--where status=...``); None when none was given. A malformed option
    is a :class:`~agentsession.errors.UsageError` naming it and saying what is expected."""
    fields: dict[str, list[str]] = {}
    title: str | None = None
    for option in where:
        name, sep, value = option.partition("=")
        name = name.strip()
        if not sep or not name:
            raise UsageError(
                f"--where {option!r}: expected FIELD=VALUE (fields: {', '.join(WHERE_FIELDS)}), "
                "as in --where tenant=acme or --where status=idle,live"
            )
        if name not in WHERE_FIELDS:
            raise UsageError(
                f"--where {option!r}: unknown field {name!r} (fields: {', '.join(WHERE_FIELDS)}; "
                "tags go in --tag)"
            )
        if name == "title":
            if title is not None:
                raise UsageError("--where title=... is given twice: give it once")
            if not value:
                raise UsageError("--where title=: the text to look for in titles is empty")
            title = value
            continue
        values = [v.strip() for v in value.split(",")]
        if not value.strip() or not all(values):
            raise UsageError(
                f"--where {option!r}: an empty value (give {name}=VALUE or {name}=A,B for any "
                "of several)"
            )
        fields.setdefault(name, []).extend(values)
    for status in statuses:
        values = [v.strip() for v in status.split(",")]
        if not all(values):
            raise UsageError(f"--status {status!r}: an empty status")
        fields.setdefault("status", []).extend(values)
    unknown = [s for s in fields.get("status", ()) if s not in STATUSES]
    if unknown:
        raise UsageError(f"unknown status {unknown[0]!r} (statuses: {', '.join(STATUSES)})")
    out: dict[str, object] = {k: list(dict.fromkeys(v)) for k, v in fields.items()}
    for tag in tags:
        if not tag:
            raise UsageError("--tag: an empty tag")
    if tags:
        out["tags"] = list(dict.fromkeys(tags))
    if title is not None:
        out["title"] = title
    return out or None


def where_options(command: F) -> F:
    """The options that filter by the catalog's fields: ``--where``, ``--tag``, ``--status``."""
    command = click.option(
        "--status",
        "statuses",
        multiple=True,
        metavar="STATUS",
        help=f"Only sessions in this status ({', '.join(STATUSES)}; repeatable or "
        "comma-separated: any of them).",
    )(command)
    command = click.option(
        "--tag",
        "tags",
        multiple=True,
        metavar="TAG",
        help="Only sessions with this tag (repeatable: every one).",
    )(command)
    return click.option(
        "--where",
        "where",
        multiple=True,
        metavar="FIELD=VALUE",
        help=f"Only sessions whose FIELD ({', '.join(WHERE_FIELDS)}) is VALUE; A,B,C: any of "
        "them; title=TEXT: the title contains TEXT. Repeatable: every one must hold.",
    )(command)


def print_next_cursor(cursor: str | None) -> None:
    """Say where the next page starts (``next_cursor: ...``), on stderr: stdout keeps only
    the rows, JSON or not."""
    if cursor is not None:
        click.echo(f"next_cursor: {cursor}", err=True)


# -- ls's catalog view ------------------------------------------------------------------------


def _tokens(info: SessionInfo) -> str:
    used = info.usage.input_tokens + info.usage.output_tokens
    return str(used) if used else "-"


def _cost(value: float) -> str:
    return f"{value:.4f}" if value else "-"


def catalog_table(infos: Sequence[SessionInfo]) -> list[list[str]]:
    """The cells of ``ls``'s catalog view: the listing's columns, then status, messages,
    turns, tokens (input + output), cost and title (last: it holds spaces)."""
    table = [
        [
            "id",
            "events",
            "last activity (UTC)",
            "status",
            "messages",
            "turns",
            "tokens",
            "cost",
            "title",
        ]
    ]
    for info in infos:
        table.append(
            [
                clean(info.id),
                _count(info.last_seq if info.last_seq >= 0 else None),
                _when(info.updated_at),
                clean(info.status),
                str(info.messages),
                str(info.turns),
                _tokens(info),
                _cost(info.usage.cost),
                clean(info.title) if info.title else "-",
            ]
        )
    return table


def print_catalog(infos: Sequence[SessionInfo]) -> None:
    """``ls``'s catalog view as aligned lines."""
    for line in _columns(catalog_table(infos), right=(1, 4, 5, 6, 7)):
        _echo(line)


# -- search -----------------------------------------------------------------------------------

_MARK = re.compile(r"(?<!\w)\[(\w+)\](?!\w)")


def _pad(line: str, width: int) -> str:
    return line + " " * (width - cell_len(line))


def _flags(hit: Hit) -> str:
    flags = [name for name, on in (("rewound", hit.rewound), ("compacted", hit.compacted)) if on]
    return ",".join(flags) or "-"


def highlighted(snippet: str, terms: Collection[str]) -> Text:
    """A hit's snippet as Rich text: each ``[word]`` the search matched (a whole word in
    brackets that is one of ``terms``, the query's normalised words) shown bold and reversed,
    without its brackets; brackets the stored text holds stay as they are (the snippet is
    stored text: never read as markup)."""
    wanted = set(terms)
    text = Text()
    pos = 0
    for match in _MARK.finditer(snippet):
        found = words(match.group(1))
        if not found or not set(found) <= wanted:
            continue
        text.append(snippet[pos : match.start()])
        text.append(match.group(1), style="bold reverse")
        pos = match.end()
    text.append(snippet[pos:])
    return text


@cli.command(
    "search",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession search 'deploy production'",
        "agentsession search deploy --session slack:C002",
        "agentsession search invoice --where tenant=acme --tag billing --limit 5",
        "agentsession search deploy --json | jq -r '.session_id + \" \" + (.seq|tostring)'",
        "agentsession search deploy --limit 20 --cursor CURSOR   # the next page",
    ),
)
@click.argument("query")
@click.option("--session", "session_id", default=None, help="Only in this session.")
@where_options
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="Hits at most (the next page's cursor is printed on stderr).")
@click.option("--cursor", default=None, help="Continue after the page that printed this cursor.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per hit.")
@pass_state
def search_command(
    state: State,
    query: str,
    session_id: str | None,
    where: tuple[str, ...],
    tags: tuple[str, ...],
    statuses: tuple[str, ...],
    limit: int,
    cursor: str | None,
    as_json: bool,
) -> None:
    """Search the messages, tool calls and tool results of the store's sessions for events
    holding every word of QUERY, best first: session, seq, role, rank, flags (rewound: a
    rewind went back past the event; compacted: before the session's latest compaction) and
    the text around the words found (highlighted on a terminal, in [ ] otherwise).

    Needs a store that keeps a search index (docs/catalog.md); on an encrypted one the index
    holds keyed tokens of the words, never the words."""
    store = state.store(read_only=True)
    checked = parse_where_options(where, tags, statuses)
    if session_id is not None:
        state.existing(session_id, read_only=True)  # not found: with a suggestion
    page = store.search(
        query, where=checked, session_id=session_id, limit=limit, cursor=cursor
    )
    if as_json:
        for hit in page:
            _json_line(hit)
        print_next_cursor(page.next_cursor)
        return
    if not page:
        _echo("no hits")
        print_next_cursor(page.next_cursor)
        return
    cells = [["session", "seq", "role", "rank", "flags"]]
    cells += [
        [clean(h.session_id), str(h.seq), clean(h.role), f"{h.rank:.3f}", _flags(h)]
        for h in page
    ]
    lines = list(_columns(cells, right=(1, 3)))
    width = max(cell_len(line) for line in lines)
    snippets = ["snippet", *(clean(h.snippet) for h in page)]
    if not _output.is_terminal(sys.stdout):
        for line, snippet in zip(lines, snippets, strict=True):
            _echo(f"{_pad(line, width)}  {snippet}")
    else:
        console = _console()
        terms = words(query)
        for i, (line, snippet) in enumerate(zip(lines, snippets, strict=True)):
            row = Text(f"{_pad(line, width)}  ", style="bold" if i == 0 else "")
            row.append_text(Text(snippet) if i == 0 else highlighted(snippet, terms))
            console.print(row, soft_wrap=True)
    print_next_cursor(page.next_cursor)


# -- reindex ----------------------------------------------------------------------------------


@cli.command(
    "reindex",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession reindex                      # every session",
        "agentsession reindex slack:C001 slack:C002",
        "agentsession reindex --json",
    ),
)
@click.argument("session_ids", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per session.")
@pass_state
def reindex_command(state: State, session_ids: tuple[str, ...], as_json: bool) -> None:
    """Rebuild the catalog rows and search index of the sessions (all of them without
    SESSION_IDS) from their logs: after a crash left a JSONL store's index behind, after
    another program wrote the logs, or to price earlier usage with the store's prices. A
    progress bar is drawn on stderr when it is a terminal."""
    store = state.store()
    ids = list(dict.fromkeys(session_ids)) or None
    if ids is not None:
        _check_exist(store, ids)
    with _progress(len(ids) if ids is not None else None, "reindexing") as advance:

        def rebuilt(session_id: str) -> None:
            if as_json:
                _json_line({"session_id": session_id, "reindexed": True})
            advance()

        done = store.reindex(ids, progress=rebuilt)
    if not as_json:
        _echo(f"reindexed {done} session(s) in {clean(store.location)}")


# -- totals -----------------------------------------------------------------------------------

_DAY = click.DateTime(formats=["%Y-%m-%d"])


def totals_table(group_by: str, totals: Sequence[Totals]) -> list[list[str]]:
    """The cells of ``totals``: the group's key (``-``: none set), sessions, calls, tokens
    and cost."""
    table = [
        [group_by, "sessions", "calls", "input", "output", "cache read", "cache write", "cost"]
    ]
    for row in totals:
        used = row.usage
        table.append(
            [
                clean(row.key) if row.key else "-",
                str(row.sessions),
                str(row.calls),
                str(used.input_tokens),
                str(used.output_tokens),
                str(used.cache_read_tokens),
                str(used.cache_write_tokens),
                _cost(used.cost),
            ]
        )
    return table


@cli.command(
    "totals",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession totals                       # by tenant",
        "agentsession totals --group-by day --since 2026-01-01 --until 2026-02-01",
        "agentsession totals --group-by user --where tenant=acme --json",
    ),
)
@click.option("--group-by", type=click.Choice(GROUPS), default="tenant", show_default=True,
              help="What to sum usage by.")
@click.option("--since", type=_DAY, default=None, help="Usage on this day (UTC) or later.")
@click.option("--until", type=_DAY, default=None, help="Usage before this day (UTC).")
@where_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object per group.")
@pass_state
def totals_command(
    state: State,
    group_by: str,
    since: dt.datetime | None,
    until: dt.datetime | None,
    where: tuple[str, ...],
    tags: tuple[str, ...],
    statuses: tuple[str, ...],
    as_json: bool,
) -> None:
    """Sum the usage events of the sessions (tokens, cost, calls, sessions) by tenant, user,
    agent or day, from the store's catalog (no log is read), ordered by key."""
    store = state.store(read_only=True)
    found = store.totals(
        where=parse_where_options(where, tags, statuses),
        group_by=group_by,
        since=since.date() if since is not None else None,
        until=until.date() if until is not None else None,
    )
    if as_json:
        for row in found:
            _json_line(row)
        return
    if not found:
        _echo("no usage recorded")
        return
    for line in _columns(totals_table(group_by, found), right=range(1, 8)):
        _echo(line)
