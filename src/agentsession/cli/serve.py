"""``serve``: the read-only web viewer (the web extra; imported only when it runs)."""

from __future__ import annotations

import contextlib

import click

from ._group import CONTEXT, _examples, cli, pass_state
from ._output import _echo, _fail, _json_line, clean
from ._state import State

_WEB_MODULES = ("starlette", "uvicorn", "markdown_it", "anyio")
"""The modules ``serve`` needs beyond the command line's (the ``web`` extra)."""


@cli.command(
    "serve",
    context_settings=CONTEXT,
    epilog=_examples(
        "agentsession serve --store ./agentsession-demo",
        "agentsession serve --open                 # and open it in the browser",
        "agentsession serve --port 0 --json        # a free port; prints {\"url\": ...}",
        "agentsession serve --host 0.0.0.0         # prints a URL with a new access token",
        "AGENTSESSION_SERVE_TOKEN=... agentsession serve --host 0.0.0.0 --port 8080",
    ),
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on. Loopback (the default) is this machine only; any other "
    "address needs an access token (generated and printed when --token is not given).",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8765,
    show_default=True,
    help="Port to listen on (0: a free one, printed).",
)
@click.option(
    "--token",
    envvar="AGENTSESSION_SERVE_TOKEN",
    default=None,
    help="The access token every request must present (env AGENTSESSION_SERVE_TOKEN, which "
    "keeps it out of the process list). Default: none on loopback, a new random one otherwise.",
)
@click.option("--open", "open_browser", is_flag=True, help="Open the viewer in a web browser.")
@click.option(
    "--store",
    "store_url",
    default=None,
    help="The store to serve (as the global --store, which is the default; it must exist).",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print where it listens as one JSON object."
)
@pass_state
def serve_command(
    state: State,
    host: str,
    port: int,
    token: str | None,
    open_browser: bool,
    store_url: str | None,
    as_json: bool,
) -> None:
    """Serve a read-only web viewer of the store's sessions until Ctrl-C (docs/web.md).

    The sessions page lists every session, newest first; a session's page shows its turns and
    steps, tool calls with their results, usage charts, links between parent and child
    sessions, what the model sees, and new events as other processes append them. Nothing is
    written. Needs the web extra: pip install 'agentsession[web]'."""
    missing = [name for name in _WEB_MODULES if _module_missing(name)]
    if missing:
        _fail(
            "serve needs the web extra: pip install 'agentsession[web]' "
            f"(missing: {', '.join(missing)})"
        )
    from ..web.server import Serving, serve

    if store_url is not None:
        state.close()
        state.url = store_url
    store = state.store(read_only=True)  # with its key, for an encrypted store

    def ready(serving: Serving) -> None:
        if as_json:
            _json_line(
                {
                    "url": serving.url,
                    "host": serving.host,
                    "port": serving.port,
                    "store": serving.store,
                    "token_required": serving.token,
                }
            )
            return
        _echo(clean(f"serving {serving.store} read-only at {serving.url}"))
        if serving.token:
            _echo("the URL carries the access token: whoever has it can read every session")
        _echo("press Ctrl-C to stop")

    # Ctrl-C is how serve ends: uvicorn stops, then raises the interrupt again; a quiet 0.
    with contextlib.suppress(KeyboardInterrupt):
        serve(
            store,
            host=host,
            port=port,
            token=token,
            open_browser=open_browser,
            ready=ready,
            log_level="info" if state.debug else "warning",
        )


def _module_missing(name: str) -> bool:
    """Whether the module ``name`` cannot be found (without importing it)."""
    import importlib.util

    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return True
