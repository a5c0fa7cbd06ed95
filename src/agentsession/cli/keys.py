"""``rekey`` and ``shred``: the key commands of an encrypted store."""

from __future__ import annotations

import sys
from typing import Any

import click

from ..children import descendants
from ..errors import UsageError
from ..store import BaseStore
from . import _output
from ._group import CONTEXT, _examples, cli, many_ids, pass_state
from ._output import (
    _ask_first,
    _echo,
    _fail,
    _ids_from,
    _json_line,
    _listing,
    _others_too,
    _progress,
    clean,
)
from ._state import PASSPHRASE_ENV, Secret, State, _check_exist, _outermost, read_key_file


def _encrypted_store(state: State, command: str) -> BaseStore:
    """The global store, which must be encrypted (and its key given) for ``command``."""
    if not state.secret():
        raise UsageError(
            f"{command} needs the store's passphrase (or key): give it with --key-file PATH "
            f"or {PASSPHRASE_ENV}"
        )
    store = state.store()
    if not store.encrypted:  # (open_existing refuses a plain store given a key: defensive)
        raise UsageError(f"the store {store.location} is not encrypted")
    return store


@cli.command(
    "rekey",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession --key-file old.key rekey                      # asks twice, hidden",
        "agentsession --key-file old.key rekey --new-key-file new.key --json",
        "AGENTSESSION_PASSPHRASE=... agentsession rekey --new-key-file new.key",
    ),
)
@click.option(
    "--new-key-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Read the new passphrase from this file (as --key-file: text, or 64 hex digits for "
    "a raw key). Without it, rekey asks for it twice on a terminal, with hidden input.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@pass_state
def rekey_command(state: State, new_key_file: str | None, as_json: bool) -> None:
    """Change an encrypted store's passphrase (or key).

    The current one comes from --key-file or AGENTSESSION_PASSPHRASE and is checked first.
    One record is rewritten atomically (the store's key, wrapped anew), so it takes the same
    time however much the store holds, and a crash leaves the old or the new passphrase
    working. Processes that have the store open keep working."""
    store = _encrypted_store(state, "rekey")
    if new_key_file is not None:
        new = read_key_file(new_key_file)
    elif _output.is_terminal(sys.stdin):
        text = click.prompt(
            "New passphrase",
            hide_input=True,
            confirmation_prompt=True,
            err=True,
            type=str,
        )
        if not text:
            raise UsageError("the new passphrase is empty")
        new = Secret(passphrase=text, source="the terminal")
    else:
        raise UsageError(
            "rekey asks for the new passphrase on a terminal, but stdin is not a terminal: "
            "give it with --new-key-file PATH"
        )
    old = state.secret()
    store.change_passphrase(old.passphrase, new.passphrase, old_key=old.key, new_key=new.key)
    if as_json:
        _json_line({"store": store.location, "changed": True, "new": new.kind})
    else:
        _echo(clean(f"changed the {new.kind} of {store.location}"))


@cli.command(
    "shred",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession --key-file store.key shred slack:C002        # asks first on a terminal",
        "agentsession --key-file store.key shred -y --json slack:C002 cli:demo",
        "agentsession --key-file store.key shred -r -y slack:C002  # and its child sessions",
        "agentsession ls | awk 'NR>1 && /^tmp:/ {print $1}' | agentsession shred -y -",
    ),
)
@many_ids(
    "Also shred the sessions' child sessions (forked for subagents, holding copies of their "
    "parent's history), and theirs."
)
@click.option(
    "--keep-children",
    is_flag=True,
    help="Shred a session that has child sessions alone: its children keep their copies of "
    "its history (a warning names them).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per session.")
@pass_state
def shred_command(
    state: State,
    session_ids: tuple[str, ...],
    yes: bool,
    recursive: bool,
    keep_children: bool,
    as_json: bool,
) -> None:
    """Destroy the keys of sessions of an encrypted store, so their events can never be read
    again, here or in any copy of the logs (crypto-shredding; docs/security.md says what stays
    visible and what a backup of the key records taken before can still open).

    The logs stay (delete them with rm); reading or appending to a shredded session fails.
    A child session (forked for a subagent) holds a copy of its parent's history: a session
    with children not shredded yet is shredded only with -r/--recursive (its whole subtree)
    or --keep-children (it alone; a warning names the children that keep copies).
    SESSION_IDS may be '-' to read ids from stdin, one per line. On a terminal shred asks
    first; elsewhere it shreds only with -y/--yes. Nothing is shredded when one of the ids
    does not exist, nor when one has children and neither option is given."""
    if recursive and keep_children:
        raise UsageError("give -r/--recursive or --keep-children, not both")
    ids, from_stdin = _ids_from(session_ids)
    store = _encrypted_store(state, "shred")
    _check_exist(store, ids)
    subtrees = {sid: descendants(store, sid) for sid in ids}
    # The children that hold copies still readable (a shredded child holds none).
    keeping = {
        sid: [c for c, p in subtrees[sid].items() if p == sid and not store.is_shredded(c)]
        for sid in ids
    }
    if not recursive:
        parents = [sid for sid in ids if keeping[sid]]
        if parents and not keep_children:
            first = parents[0]
            _fail(
                f"session {clean(first)!r} has {len(keeping[first])} child session(s) holding "
                f"copies of its history ({_listing(keeping[first], 5)})"
                f"{_others_too(len(parents) - 1)}: pass "
                "-r/--recursive to shred them too, or --keep-children to shred it alone; "
                "nothing shredded"
            )
        subtrees = {sid: {} for sid in ids}
    ids, parent_of, everything = _outermost(ids, subtrees)
    _ask_first(
        yes=yes,
        from_stdin=from_stdin,
        asks="shred destroys keys for good and asks first",
        instead=f"shred {len(everything)} session(s) without asking",
        question=(
            f"Shred {len(everything)} session(s) for good (their events can never be read "
            f"again): {_listing(everything)}?"
        ),
        declined="nothing shredded",
    )
    with _progress(len(ids), "shredding") as advance:
        for sid in ids:
            done = store.shred(sid, recursive=recursive, keep_children=keep_children)
            for gone in done:
                parent = parent_of.get(gone)
                if as_json:
                    line: dict[str, Any] = {"session_id": gone, "shredded": True}
                    if parent is not None:
                        line["parent"] = parent
                    _json_line(line)
                else:
                    below = f" (child of {clean(parent)})" if parent is not None else ""
                    _echo(f"shredded {clean(gone)}{below}")
            if keep_children and keeping[sid]:
                click.echo(
                    f"warning: the child sessions of {clean(sid)} keep copies of its history: "
                    f"{_listing(keeping[sid])} (shred them too, or rm them)",
                    err=True,
                )
            advance()
