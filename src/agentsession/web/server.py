"""Running the viewer: binding the socket, the access token, uvicorn, the browser.

``agentsession serve`` calls :func:`serve`. The address defaults to loopback; any other
address needs an access token (one is generated, as Jupyter does, when none is given), because
a transcript is as private as the conversations in it.
"""

from __future__ import annotations

import copy
import ipaddress
import logging
import re
import secrets
import socket
import threading
import webbrowser
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

import uvicorn
import uvicorn.config

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
    "log_config",
    "new_token",
    "serve",
    "url_of",
]

DEFAULT_HOST: Final = "127.0.0.1"
"""Loopback: only this machine can connect."""
DEFAULT_PORT: Final = 8765
"""The default port (``--port 0`` picks a free one)."""


def _spelled(char: str, *, any_case: bool) -> str:
    """A pattern matching ``char`` as itself or percent-encoded, once or more (``%65``,
    ``%2565``), its hex digits in either case; with ``any_case``, a letter in either case."""
    forms = {char, char.lower(), char.upper()} if any_case else {char}
    codes = "|".join(sorted(f"{ord(form):02x}" for form in forms))
    literal = "".join(sorted(re.escape(form) for form in forms))
    return f"(?:[{literal}]|%(?:25)*(?i:{codes}))"


_TOKEN_PARAMETER: Final = re.compile(
    "(" + "".join(_spelled(c, any_case=True) for c in "token") + _spelled("=", any_case=False)
    + ")[^&;\\s\"'<>]*"
)
"""``token=VALUE`` in any spelling of the name a decoder could read as ``token`` (percent
escapes, repeated ones, either case), and its value up to the next parameter."""


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
    # Quoted: a "+" left as it is would reach the server as a space.
    return f"http://{shown}:{port}/" + (f"?token={quote(token, safe='')}" if token else "")


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
    """Keeps the access token out of log records (uvicorn's access log prints request paths).

    Replaces by ``…`` the value of every ``token=`` parameter, whatever the spelling of its
    name (``tok%65n``, ``%74oken``, ``TOKEN``, escapes repeated or in either case, ``=`` as
    ``%3D`` where uvicorn prints a path), and, with ``token``, that token itself wherever it
    appears (in a path, under another name), as itself or percent-encoded. It redacts the
    message, its arguments and a traceback's text; attach it to the handlers, so it sees the
    records of every logger."""

    def __init__(self, token: str | None = None) -> None:
        super().__init__()
        self._value = (
            None
            if not token
            else re.compile("".join(_spelled(c, any_case=False) for c in token))
        )

    def redact(self, text: str) -> str:
        """``text`` with every token value in it replaced by ``…``."""
        text = _TOKEN_PARAMETER.sub("\\1…", text)
        if self._value is not None:
            text = self._value.sub("…", text)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact the record in place; always keep it."""
        if isinstance(record.args, tuple):
            record.args = tuple(
                self.redact(a) if isinstance(a, str) else a for a in record.args
            )
        elif isinstance(record.args, dict):
            record.args = {
                k: self.redact(v) if isinstance(v, str) else v for k, v in record.args.items()
            }
        if isinstance(record.msg, str):
            record.msg = self.redact(record.msg)
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        return True


def log_config(token: str | None) -> dict[str, Any]:
    """uvicorn's logging configuration for :func:`serve`: its own, with the access log on
    stderr beside the server's messages (stdout is the command's output: ``serve --json``
    prints one JSON object there) and :class:`RedactToken` on every handler."""
    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config.setdefault("filters", {})["redact_token"] = {"()": RedactToken, "token": token}
    for handler in config["handlers"].values():
        handler["stream"] = "ext://sys.stderr"
        handler["filters"] = [*handler.get("filters", []), "redact_token"]
    return config


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
        log_config=log_config(token),
        server_header=False,
        timeout_graceful_shutdown=1,
    )
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
    # Records of other loggers that reach the root's handlers (the command line's, with
    # --debug) are redacted as well.
    redact = RedactToken(token)
    root_handlers = list(logging.getLogger().handlers)
    for handler in root_handlers:
        handler.addFilter(redact)
    try:
        server.run(sockets=[sock])
    finally:
        for handler in root_handlers:
            handler.removeFilter(redact)
        sock.close()
