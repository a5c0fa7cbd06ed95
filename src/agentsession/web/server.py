"""Running the viewer: binding the socket, the access token, uvicorn, the browser.

``agentsession serve`` calls :func:`serve`. The address defaults to loopback; any other
address needs an access token (one is generated, as Jupyter does, when none is given), because
a transcript is as private as the conversations in it.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import secrets
import socket
import threading
import webbrowser
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import uvicorn

from ..errors import UsageError
from ..store import BaseStore
from .app import create_app

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "RedactToken",
    "Serving",
    "bind",
    "is_loopback",
    "new_token",
    "serve",
    "url_of",
]

DEFAULT_HOST: Final = "127.0.0.1"
"""Loopback: only this machine can connect."""
DEFAULT_PORT: Final = 8765
"""The default port (``--port 0`` picks a free one)."""

_TOKEN_IN_TEXT = re.compile(r"(token=)[^&\s\"']*")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) only accepts connections from this
    machine."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def new_token() -> str:
    """A fresh access token: 32 random bytes, URL-safe (``secrets.token_urlsafe``)."""
    return secrets.token_urlsafe(32)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (``port`` 0: a free one); raises
    :class:`~agentsession.errors.UsageError` saying why when it cannot be bound (the port is
    in use, the address is not this machine's)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UsageError(f"cannot resolve --host {host!r}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise UsageError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc} (choose another --port, or "
            "--port 0 for a free one)"
        ) from None
    sock.set_inheritable(True)
    return sock


def url_of(host: str, port: int, token: str | None) -> str:
    """The address to open in a browser (with ``?token=`` when there is a token)."""
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    if shown in ("0.0.0.0", "[::]"):
        shown = socket.gethostname()
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


@dataclass(frozen=True)
class Serving:
    """Where a server listens, as :func:`serve` reports it once the socket is bound."""

    url: str
    """The address to open (with ``?token=`` when the server has a token)."""
    host: str
    """The address it is bound to."""
    port: int
    """The port it is bound to (the free one chosen, for port 0)."""
    store: str
    """The location of the store it serves."""
    token: bool
    """Whether requests need the access token."""


class RedactToken(logging.Filter):
    """Replaces the value of every ``token=`` in a log record (uvicorn's access log prints
    request paths) by ``…``, so the access token never reaches a log."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact the record in place; always keep it."""
        if isinstance(record.args, tuple):
            record.args = tuple(
                _TOKEN_IN_TEXT.sub(r"\1…", a) if isinstance(a, str) else a for a in record.args
            )
        if isinstance(record.msg, str):
            record.msg = _TOKEN_IN_TEXT.sub(r"\1…", record.msg)
        return True


def serve(
    store: BaseStore,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    open_browser: bool = False,
    ready: Callable[[Serving], None] | None = None,
    log_level: str = "warning",
) -> None:
    """Serve the viewer of ``store`` until interrupted (Ctrl-C).

    A ``host`` that is not loopback needs ``token``; without one, a token is generated.
    ``ready`` is called with the address once the socket listens (the URL carries the token,
    which is never logged otherwise); by default the URL is printed."""
    if token is None and not is_loopback(host):
        token = new_token()
    app = create_app(store, token=token)  # checks the token before anything listens
    sock = bind(host, port)
    bound_port = sock.getsockname()[1]
    url = url_of(host, bound_port, token)
    config = uvicorn.Config(
        app,
        log_level=log_level,
        access_log=log_level in ("debug", "info", "trace"),
        server_header=False,
        timeout_graceful_shutdown=1,
    )
    for name in ("uvicorn.access", "uvicorn.error", "uvicorn"):
        logging.getLogger(name).addFilter(RedactToken())
    server = uvicorn.Server(config)
    serving = Serving(
        url=url, host=host, port=bound_port, store=store.location, token=token is not None
    )
    if ready is not None:
        ready(serving)
    else:
        print(f"serving {store.location} read-only at {url}", flush=True)
    if open_browser:
        threading.Timer(0.5, webbrowser.open, args=(url,)).start()
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
