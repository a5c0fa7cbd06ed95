"""``demo``: a scripted agent writes a store to explore."""

from __future__ import annotations

import sys

import click

from ._group import CONTEXT, _examples, cli
from ._output import _Console, _json_line


@cli.command(
    "demo",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession demo",
        "agentsession demo /tmp/demo && agentsession --store /tmp/demo ls",
    ),
)
@click.argument("directory", default="./agentsession-demo")
@click.option(
    "--json", "as_json", is_flag=True, help="Print only a JSON summary of what was written."
)
def demo_command(directory: str, as_json: bool) -> None:
    """Run a scripted agent through three conversations, crash one, recover and compact.

    The store is built beside DIRECTORY and moved into place when it is complete, so an
    interrupted demo leaves no half-written store (an earlier demo's stays as it was)."""
    from ..demo import run_demo

    # Long lines stay whole (the terminal wraps them), so the printed commands copy cleanly.
    console = _Console(
        file=sys.stdout, soft_wrap=True, highlight=False, emoji=False, quiet=as_json
    )
    result = run_demo(directory, console)
    if as_json:
        _json_line(
            {
                "store": result.location,
                "sessions": [
                    {"id": sid, "events": events} for sid, events in result.sessions.items()
                ],
                "commands": result.commands,
            }
        )
