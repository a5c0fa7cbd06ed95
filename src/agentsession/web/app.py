"""The viewer's ASGI application: two pages, their static files and read-only JSON endpoints.

Every route answers GET (and HEAD) only: there is no endpoint that writes. Session ids travel
in the query string (``?id=...``, percent-encoded), so ids holding ``/``, ``:``, ``?`` or any
other character round-trip. See ``docs/web.md`` for the endpoints and the security model.
"""

from __future__ import annotations

import hashlib
import hmac
import http.cookies
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote_plus

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..codec import encode
from ..errors import EncryptionError, SessionError, SessionNotFound, UsageError
from ..store import BaseStore
from . import catalog, data
from .stream import DEFAULT_HEARTBEAT, TOKEN_CHARS, create_stream_app

__all__ = [
    "CONTENT_SECURITY_POLICY",
    "DEFAULT_PAGE_ROWS",
    "LOOPBACK_HOSTS",
    "SECURITY_HEADERS",
    "STATIC_DIR",
    "create_app",
    "token_cookie_name",
]

STATIC_DIR: Final = Path(__file__).with_name("static")
"""The pages, script, style sheet and icon the package ships (nothing comes from a CDN)."""

CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
"""Sent with every response: scripts and styles only from the server's own files (no inline
script, no inline style, no ``eval``), no plug-ins, frames or foreign connections."""

SECURITY_HEADERS: Final[tuple[tuple[bytes, bytes], ...]] = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)
"""The headers added to every response."""

LOOPBACK_HOSTS: Final = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
"""The ``Host`` names a server without a token answers (a DNS-rebinding page would send its
own name)."""

DEFAULT_PAGE_ROWS: Final = 200
"""Rows per transcript page (the first screen ships this many at most)."""
_MAX_PAGE_ROWS: Final = 2000
_MAX_LIST: Final = 500
_MAX_MESSAGES: Final = 2000
_MAX_BADGE_IDS: Final = 200
_MAX_HITS: Final = 200

_UNAUTHORIZED: Final = (
    "This agentsession server needs its access token. Open the URL that `agentsession serve` "
    "printed (it ends in ?token=...), or send the header 'Authorization: Bearer TOKEN'.\n"
)


def token_cookie_name(token: str) -> str:
    """The name of the cookie that carries ``token`` after the first request: it depends on
    the token, so servers on other ports of the same host (cookies ignore ports) do not
    overwrite each other's."""
    return "agentsession_" + hashlib.sha256(token.encode()).hexdigest()[:12]


def _host_name(scope: Scope) -> str:
    for name, value in scope.get("headers", []):
        if name == b"host":
            host: str = value.decode("latin-1").strip().lower()
            if host.startswith("["):
                return host[: host.find("]") + 1] if "]" in host else host
            return host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return ""


class _Guard:
    """The security layer around the app (plain ASGI, so streaming responses pass through
    untouched): only GET and HEAD; the ``Host`` check; the token check on every request,
    including the event stream; the security headers on every response."""

    def __init__(
        self, app: ASGIApp, token: str | None, allowed_hosts: frozenset[str] | None
    ) -> None:
        self.app = app
        self.token = token
        self.allowed_hosts = allowed_hosts
        self.cookie = token_cookie_name(token) if token is not None else ""

    def _matches(self, candidate: str) -> bool:
        assert self.token is not None
        return hmac.compare_digest(candidate.encode(), self.token.encode())

    def _presented(self, scope: Scope) -> tuple[str | None, bool]:
        """The token the request presents, and whether it came in the query string.

        In the query string, the parameter is ``token``, spelled so: a name that only
        decodes to it (``tok%65n``) is refused (None) rather than read, as is a second
        ``token`` with another value, so that no reader of the address (a proxy, a log
        filter, this server) can take a different parameter for the token than another."""
        query = scope.get("query_string", b"").decode("latin-1")
        values: set[str] = set()
        for part in query.split("&"):
            name, _, value = part.partition("=")
            if unquote_plus(name) != "token":
                continue
            if name != "token":
                return None, True
            values.add(unquote_plus(value))
        if values:
            return (values.pop(), True) if len(values) == 1 else (None, True)
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                scheme, _, credential = value.decode("latin-1").partition(" ")
                if scheme.lower() == "bearer":
                    return credential.strip(), False
            elif name == b"cookie":
                jar = http.cookies.SimpleCookie()
                try:
                    jar.load(value.decode("latin-1"))
                except http.cookies.CookieError:
                    continue
                if self.cookie in jar:
                    return jar[self.cookie].value, False
        return None, False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        extra: list[tuple[bytes, bytes]] = list(SECURITY_HEADERS)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        if scope["method"] not in ("GET", "HEAD"):
            response = PlainTextResponse(
                "read-only: only GET requests\n", status_code=405, headers={"Allow": "GET, HEAD"}
            )
            await response(scope, receive, send_with_headers)
            return
        if self.allowed_hosts is not None and _host_name(scope) not in self.allowed_hosts:
            response = PlainTextResponse("unknown Host\n", status_code=400)
            await response(scope, receive, send_with_headers)
            return
        if self.token is not None:
            presented, from_query = self._presented(scope)
            if presented is None or not self._matches(presented):
                response = PlainTextResponse(_UNAUTHORIZED, status_code=401)
                await response(scope, receive, send_with_headers)
                return
            if from_query:
                extra.append(
                    (
                        b"set-cookie",
                        f"{self.cookie}={self.token}; HttpOnly; SameSite=Strict; Path=/".encode(),
                    )
                )
        await self.app(scope, receive, send_with_headers)


# ---------------------------------------------------------------------------------------------
# Endpoints.


def _json(value: Any, status_code: int = 200) -> Response:
    return Response(
        encode(value),
        status_code=status_code,
        media_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


def _int(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise HTTPException(400, f"{name} must be an integer") from None
    if not low <= value <= high:
        raise HTTPException(400, f"{name} must be between {low} and {high}")
    return value


def _session_id(request: Request) -> str:
    sid = request.query_params.get("id")
    if not sid:
        raise HTTPException(400, "the session id is missing: ?id=...")
    return sid


Handler = Callable[[Request], Awaitable[Response]]


def _routes(
    store: BaseStore, listing: data.ListingCache, stream_app: Starlette
) -> list[Route | Mount]:
    badge_cache = data.BadgeCache()
    pages = {
        name: (STATIC_DIR / f"{name}.html").read_bytes() for name in ("index", "session")
    }

    def page(name: str) -> Handler:
        async def handler(request: Request) -> Response:
            return Response(
                pages[name],
                media_type="text/html; charset=utf-8",
                headers={"Cache-Control": "no-store"},
            )

        return handler

    async def sessions(request: Request) -> Response:
        q = request.query_params.get("q", "")
        agent = request.query_params.get("agent", "")
        offset = _int(request, "offset", 0, 0, 10**9)
        limit = _int(request, "limit", 50, 1, _MAX_LIST)
        result = await run_in_threadpool(
            data.list_sessions,
            store,
            query=q,
            agent=agent,
            offset=offset,
            limit=limit,
            listing=listing,
        )
        return _json(result)

    async def features(request: Request) -> Response:
        return _json(catalog.store_features(store))

    def where_of(request: Request) -> dict[str, object]:
        params = request.query_params
        return catalog.catalog_where(
            status=params.get("status", ""),
            tags=params.getlist("tag"),
            tenant=params.get("tenant", ""),
            user=params.get("user", ""),
            agent=params.get("agent", ""),
        )

    async def catalog_sessions(request: Request) -> Response:
        result = await run_in_threadpool(
            catalog.catalog_page,
            store,
            where=where_of(request),
            query=request.query_params.get("q", ""),
            cursor=request.query_params.get("cursor") or None,
            limit=_int(request, "limit", 50, 1, _MAX_LIST),
        )
        return _json(result)

    async def search(request: Request) -> Response:
        query = request.query_params.get("q", "")
        if not query.strip():
            raise HTTPException(400, "the search query is missing: ?q=...")
        result = await run_in_threadpool(
            catalog.search_page,
            store,
            query,
            where=where_of(request),
            session_id=request.query_params.get("session") or None,
            cursor=request.query_params.get("cursor") or None,
            limit=_int(request, "limit", 20, 1, _MAX_HITS),
        )
        return _json(result)

    async def badges(request: Request) -> Response:
        ids = list(dict.fromkeys(request.query_params.getlist("id")))[:_MAX_BADGE_IDS]

        def compute() -> dict[str, data.Badges | None]:
            out: dict[str, data.Badges | None] = {}
            for sid in ids:
                try:
                    out[sid] = data.session_badges(store, sid, badge_cache)
                except (SessionNotFound, EncryptionError):
                    # Deleted since it was listed, or shredded or not opening: no badges (its
                    # transcript page says why) rather than none for the whole page.
                    out[sid] = None
            return out

        return _json(await run_in_threadpool(compute))

    async def summary(request: Request) -> Response:
        sid = _session_id(request)
        return _json(await run_in_threadpool(data.session_summary, store, sid))

    async def rows(request: Request) -> Response:
        sid = _session_id(request)
        after = _int(request, "after", 0, 0, 2**62)
        limit = _int(request, "limit", DEFAULT_PAGE_ROWS, 1, _MAX_PAGE_ROWS)

        def compute() -> dict[str, Any]:
            return data.rows_page(store.open(sid), after, limit)

        return _json(await run_in_threadpool(compute))

    async def messages(request: Request) -> Response:
        sid = _session_id(request)
        agent = request.query_params.get("agent") or None
        offset = _int(request, "offset", 0, 0, 10**9)
        limit = _int(request, "limit", 500, 1, _MAX_MESSAGES)

        def compute() -> dict[str, Any]:
            history = store.open(sid).messages(agent=agent)
            return {
                "messages": data.message_views(history[offset : offset + limit], offset),
                "offset": offset,
                "total": len(history),
                "more": offset + limit < len(history),
                "agent": agent or "",
            }

        return _json(await run_in_threadpool(compute))

    async def event(request: Request) -> Response:
        sid = _session_id(request)
        seq = _int(request, "seq", 0, 1, 2**62)
        raw = await run_in_threadpool(lambda: data.raw_event(store.open(sid), seq))
        if raw is None:
            return _json({"error": f"no event {seq} in session {sid!r}"}, 404)
        return Response(
            raw, media_type="application/json", headers={"Cache-Control": "no-store"}
        )

    async def stats(request: Request) -> Response:
        sid = _session_id(request)

        def compute() -> data.Stats:
            return data.session_stats(store.open(sid).read())

        return _json(await run_in_threadpool(compute))

    return [
        Route("/", page("index"), methods=["GET", "HEAD"]),
        Route("/session", page("session"), methods=["GET", "HEAD"]),
        Route("/api/sessions", sessions, methods=["GET", "HEAD"]),
        Route("/api/store", features, methods=["GET", "HEAD"]),
        Route("/api/catalog", catalog_sessions, methods=["GET", "HEAD"]),
        Route("/api/search", search, methods=["GET", "HEAD"]),
        Route("/api/badges", badges, methods=["GET", "HEAD"]),
        Route("/api/session", summary, methods=["GET", "HEAD"]),
        Route("/api/session/rows", rows, methods=["GET", "HEAD"]),
        Route("/api/session/messages", messages, methods=["GET", "HEAD"]),
        Route("/api/session/event", event, methods=["GET", "HEAD"]),
        Route("/api/session/stats", stats, methods=["GET", "HEAD"]),
        Mount("/stream", app=stream_app),
        Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="static"),
    ]


async def _session_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, SessionNotFound):
        return _json({"error": str(exc)}, 404)
    if isinstance(exc, UsageError):
        return _json({"error": str(exc)}, 400)
    return _json({"error": str(exc) or type(exc).__name__}, 500)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _json({"error": exc.detail}, exc.status_code)


def create_app(
    store: BaseStore,
    *,
    token: str | None = None,
    allowed_hosts: Iterable[str] | None = None,
    heartbeat: float = DEFAULT_HEARTBEAT,
    listing_ttl: float = 2.0,
) -> Starlette:
    """The read-only viewer of ``store`` as an ASGI application (serve it with uvicorn).

    With ``token``, every request must present it: ``?token=...`` once (the response sets an
    HttpOnly, SameSite=Strict cookie the page's later requests carry), the cookie, or an
    ``Authorization: Bearer`` header; compared in constant time. Without a token, only
    requests whose ``Host`` is a loopback name are answered (``allowed_hosts`` replaces that
    list; with a token, any ``Host`` is). The live tail and the live session list are
    :func:`create_stream_app`'s, mounted at ``/stream`` and ``/stream/sessions`` (behind the
    same token and ``Host`` checks); ``heartbeat`` is the seconds
    between its ``: ping`` comments. ``listing_ttl`` is how long the sessions page reuses a
    ``store.list()``. The store stays the caller's to close."""
    if token is not None and not TOKEN_CHARS.fullmatch(token):
        raise UsageError(
            "the access token must be at least 8 characters of A-Z a-z 0-9 . _ ~ + / = - "
            "(it travels in a URL and a cookie)"
        )
    hosts: frozenset[str] | None
    if allowed_hosts is not None:
        hosts = frozenset(h.lower() for h in allowed_hosts)
    else:
        hosts = None if token is not None else LOOPBACK_HOSTS
    listing = data.ListingCache(store, ttl=listing_ttl)
    # The guard around the viewer checks every request, the stream's included.
    # A change the live session list hears of drops the cached listing first, so that the
    # page's reload shows it.
    stream_app = create_stream_app(
        store, heartbeat=heartbeat, on_change=lambda change: listing.forget()
    )
    app = Starlette(
        routes=_routes(store, listing, stream_app),
        exception_handlers={SessionError: _session_error, HTTPException: _http_error},
    )
    app.state.store = store
    app.state.stream = stream_app
    app.add_middleware(_Guard, token=token, allowed_hosts=hosts)
    return app
