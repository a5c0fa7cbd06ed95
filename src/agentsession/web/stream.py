"""A session's events as Server-Sent Events, resumable: :func:`create_stream_app`.

``GET /?id=SESSION`` (wherever the app is mounted) answers ``text/event-stream``:

* first ``id: N``, ``event: start``, ``data: {"after": N, "mark": ..., "latest_seq": L}``: the
  seq the stream goes on after (``?after=``, the ``Last-Event-ID`` header of a reconnecting
  client, else the session's latest seq) and the :func:`~agentsession.web.data.event_mark` of
  the event there (``"0"`` for none), so that a client that saw another event at that seq (a
  session deleted and created again while it was away) knows to load it anew;
* then one message per event, in seq order, each once: ``id: SEQ``, ``event: row``, ``data:``
  the event's transcript row as the viewer's rows endpoint gives it
  (:func:`agentsession.web.data.row_dicts`, nested within the whole log) with the event's
  ``mark`` added;
* ``: ping`` comment lines while nothing happens (every ``heartbeat`` seconds);
* ``event: reset`` (``data: {"first_seq": 1}``) when the session is deleted, and perhaps created
  again, while followed, then the end of the stream;
* ``event: reload`` (``data: {"from": SEQ}``) when the client reads more slowly than the session
  grows and more than ``buffer`` events wait for it: the events from ``SEQ`` on were not sent,
  the stream ends, and the client loads them otherwise (the rows endpoint, or a new stream);
* ``event: failed`` (``data: {"error": ...}``) when the session cannot be read (a wrong key),
  then the end.

``GET /sessions`` (``?prefix=`` optional) answers the store-wide feed of
:meth:`~agentsession.BaseStore.changes`:

* first ``id: POSITION``, ``event: start``, ``data: {}``: where the feed goes on after (the
  ``Last-Event-ID`` of a reconnecting client, else now);
* then one message per change: ``id: POSITION``, ``event: change``, ``data: {"session_id": ...,
  "kind": "created" | "appended" | "deleted", "seq": ..., "time": ...}``;
* ``: ping`` comments, ``reload`` (``data: {}``: changes were dropped for a slow client; its
  list is to be read anew) and ``failed`` as above.

``POSITION`` is the change's :attr:`~agentsession.follow.Change.position`, percent-encoded
(a session id may hold a line break). Each client's events or changes come from
``session.follow()`` or ``store.changes()`` in a thread of its own, which stops within about a
second after the client goes. See ``docs/web.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import re
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final, Generic, TypeVar
from urllib.parse import quote, unquote

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from ..codec import encode
from ..errors import SessionError, SessionNotFound, SessionReset, UsageError
from ..events import Event
from ..follow import Change, position
from ..session import BaseSession
from ..store import BaseStore
from ..view.live import LiveRows
from . import data

__all__ = [
    "DEFAULT_BUFFER",
    "DEFAULT_HEARTBEAT",
    "TOKEN_CHARS",
    "create_stream_app",
]

DEFAULT_HEARTBEAT: Final = 15.0
"""Seconds between two ``: ping`` comments on an idle stream (proxies close silent ones)."""
DEFAULT_BUFFER: Final = 1000
"""Events that may wait for one slow client before its stream ends with ``reload``."""
TOKEN_CHARS: Final = re.compile(r"[A-Za-z0-9._~+/=-]{8,}")
"""What an access token may be made of (it travels in a URL and a cookie)."""

_STOP_CHECK: Final = 1.0
"""Seconds a follower thread waits without news before it checks whether its client left."""
_BATCH: Final = 500
"""Events turned into rows at once."""
T = TypeVar("T")
_UNAUTHORIZED: Final = (
    "This event stream needs its access token: send the header 'Authorization: Bearer TOKEN' "
    "or add ?token=TOKEN to the address.\n"
)


class _Pump(Generic[T]):
    """One client's items: a thread (:meth:`_run`) fills a bounded buffer that the response
    drains. Overfilled, the buffer is dropped and the pump ends with ``reload``."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        self._limit = limit
        self._loop = loop
        self._lock = threading.Lock()
        self._items: deque[T] = deque()
        self._end: tuple[str, dict[str, Any]] | None = None
        self._stop = threading.Event()
        self._ready = asyncio.Event()
        self._thread = threading.Thread(
            target=self._guarded, name="agentsession-stream", daemon=True
        )

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to stop (it does within about a second)."""
        self._stop.set()

    def _signal(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody reads any more
            self._loop.call_soon_threadsafe(self._ready.set)

    def _finish(self, kind: str, body: dict[str, Any]) -> None:
        with self._lock:
            if self._end is None:
                self._end = (kind, body)
        self._signal()

    def _put(self, item: T, reload: Callable[[T], dict[str, Any]]) -> bool:
        """Queue ``item``; False when a whole buffer waits already: the buffer is dropped, the
        pump ends with ``reload`` (its data ``reload(the oldest item dropped)``) and the
        thread must stop."""
        with self._lock:
            if len(self._items) >= self._limit:
                # Behind by a whole buffer: drop it, and let the client load what it did not
                # get some other way.
                self._end = ("reload", reload(self._items[0]))
                self._items.clear()
                overflowed = True
            else:
                self._items.append(item)
                overflowed = False
        self._signal()
        return not overflowed

    def _guarded(self) -> None:
        try:
            self._run()
        except Exception as exc:  # a wrong key, a store gone: the client is told, not hung
            self._finish("failed", {"error": str(exc) or type(exc).__name__})

    def _run(self) -> None:
        raise NotImplementedError

    async def take(self, timeout: float) -> tuple[list[T], tuple[str, dict[str, Any]] | None]:
        """The items waiting (at most a batch) and how the pump ended (None while it goes
        on); waits up to ``timeout`` seconds for either (([], None) when nothing came)."""
        for attempt in range(2):
            self._ready.clear()
            with self._lock:
                if self._items or self._end is not None:
                    count = min(len(self._items), _BATCH)
                    batch = [self._items.popleft() for _ in range(count)]
                    end = self._end if not self._items else None
                    if self._items:
                        self._ready.set()
                    return batch, end
            if attempt == 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._ready.wait(), timeout)
        return [], None


class _Feed(_Pump[Event]):
    """One client's events: the thread follows the session."""

    def __init__(
        self, session: BaseSession, after: int, limit: int, loop: asyncio.AbstractEventLoop
    ) -> None:
        super().__init__(limit, loop)
        self._session = session
        self._after = after

    def _run(self) -> None:
        cursor = self._after
        session = self._session
        try:
            life = session.life
            while not self._stop.is_set():
                for event in session.follow(after=cursor, timeout=_STOP_CHECK):
                    if self._stop.is_set():
                        return
                    if session.life != life:  # a follow begun after a new life began
                        raise SessionReset(session.id, 1)
                    if not self._put(event, lambda oldest: {"from": oldest.seq}):
                        return
                    cursor = event.seq
                if session.life != life:
                    raise SessionReset(session.id, 1)
        except SessionReset as reset:
            self._finish("reset", {"first_seq": reset.first_seq})


class _ChangeFeed(_Pump[Change]):
    """One client's store-wide changes: the thread runs ``store.changes()``, a short while at
    a time, so that it notices within about a second that its client left."""

    def __init__(
        self,
        store: BaseStore,
        prefix: str | None,
        after: str,
        on_change: Callable[[Change], None] | None,
        limit: int,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        super().__init__(limit, loop)
        self._store = store
        self._prefix = prefix
        self._after = after
        self._on_change = on_change

    def _run(self) -> None:
        cursor = self._after
        while not self._stop.is_set():
            feed = self._store.changes(prefix=self._prefix, after=cursor, timeout=_STOP_CHECK)
            with contextlib.closing(feed):
                for change in feed:
                    if self._stop.is_set():
                        return
                    if self._on_change is not None:
                        self._on_change(change)
                    if not self._put(change, lambda oldest: {}):
                        return
                    cursor = change.position


def _row_dicts(rows: LiveRows, batch: list[Event]) -> list[dict[str, Any]]:
    return data.row_dicts(rows.rows(batch))


def _message(kind: str, body: Any, ident: int | str | None = None) -> bytes:
    head = b"" if ident is None else b"id: " + str(ident).encode() + b"\n"
    return head + b"event: " + kind.encode() + b"\ndata: " + encode(body) + b"\n\n"


def _resume_point(request: Request) -> int | None:
    """Where the client wants the stream to go on after: ``Last-Event-ID`` (its seq part),
    else ``?after=``, else None (the latest seq)."""
    last = request.headers.get("last-event-id", "").strip()
    seq = last.partition(":")[0]
    if seq.isdigit() and len(seq) < 19:
        return int(seq)
    raw = request.query_params.get("after")
    if raw is None or raw == "":
        return None
    if not raw.isdigit() or len(raw) >= 19:
        raise _BadRequest("after must be a seq: an integer >= 0")
    return int(raw)


class _BadRequest(Exception):
    pass


def _latest_position(store: BaseStore, prefix: str | None) -> str:
    """The position of ``store.changes()`` right now: after the session appended to last
    (of those whose ids start with ``prefix``)."""
    dated = [info for info in store.list(prefix=prefix) if info.updated_at is not None]
    if not dated:
        return position(None, "")  # before anything: every session to come is news
    last = max(dated, key=lambda info: (info.updated_at, info.id))
    return position(last.updated_at, last.id)


def _change_data(change: Change) -> dict[str, Any]:
    return {
        "session_id": change.session_id,
        "kind": change.kind,
        "seq": change.seq,
        "time": change.time,
    }


def _presented(request: Request) -> str | None:
    """The token a request presents: ``?token=`` or ``Authorization: Bearer``."""
    values = request.query_params.getlist("token")
    if values:
        return values[0] if len(set(values)) == 1 else None
    scheme, _, credential = request.headers.get("authorization", "").partition(" ")
    return credential.strip() if scheme.lower() == "bearer" else None


def _sse(
    state: Any,
    feed: Any,
    start: bytes,
    render: Callable[[list[Any]], Awaitable[bytes]],
    heartbeat: float,
) -> StreamingResponse:
    """The response of one client's stream: ``start``, then what ``feed`` takes, rendered, a
    ping when nothing came for ``heartbeat`` seconds, and its end message; the feed's thread
    is stopped however the client leaves (both streams: a session's rows, the store's
    changes)."""

    async def messages() -> AsyncIterator[bytes]:
        state.active_streams += 1
        feed.start()
        try:
            yield b"retry: 1000\n\n"
            yield start
            while True:
                batch, end = await feed.take(heartbeat)
                if batch:
                    yield await render(batch)
                if end is not None:
                    yield _message(*end)
                    return
                if not batch:
                    yield b": ping\n\n"
        finally:
            feed.stop()
            state.active_streams -= 1

    return StreamingResponse(
        messages(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def create_stream_app(
    store: BaseStore,
    *,
    token: str | None = None,
    heartbeat: float = DEFAULT_HEARTBEAT,
    buffer: int = DEFAULT_BUFFER,
    on_change: Callable[[Change], None] | None = None,
) -> Starlette:
    """An ASGI application (Starlette) serving one session's events as Server-Sent Events at
    ``GET /?id=SESSION`` wherever it is mounted, and the store-wide feed of
    :meth:`~agentsession.BaseStore.changes` at ``GET /sessions`` (see
    :mod:`agentsession.web.stream` for the messages): resumable with ``Last-Event-ID`` (or
    ``?after=SEQ`` for a session), a ``: ping`` every ``heartbeat`` seconds, at most ``buffer``
    events or changes waiting for a slow client (then ``reload`` and the end).
    ``on_change(change)`` is called, in a feed's thread, for each change before a client of
    ``/sessions`` is sent it (to drop a cached listing, say). With ``token``, every request
    must present it (``Authorization: Bearer TOKEN`` or ``?token=TOKEN``, compared in
    constant time) or gets 401; the token is never echoed. Nothing is written to the store,
    which stays the caller's to close; ``app.state.active_streams`` counts the open streams."""
    if token is not None and (not isinstance(token, str) or not TOKEN_CHARS.fullmatch(token)):
        raise UsageError(
            "the access token must be at least 8 characters of A-Z a-z 0-9 . _ ~ + / = - "
            "(it travels in a URL)"
        )
    if isinstance(heartbeat, bool) or not isinstance(heartbeat, int | float) or heartbeat <= 0:
        raise UsageError(f"heartbeat must be a number of seconds > 0, not {heartbeat!r}")
    if isinstance(buffer, bool) or not isinstance(buffer, int) or buffer < 1:
        raise UsageError(f"buffer must be a number of events >= 1, not {buffer!r}")
    if on_change is not None and not callable(on_change):
        raise UsageError(f"on_change must be a function of a Change or None, not {on_change!r}")
    secret = token.encode() if token is not None else None

    def refused(request: Request) -> Response | None:
        if secret is not None:
            presented = _presented(request)
            if presented is None or not hmac.compare_digest(presented.encode(), secret):
                return PlainTextResponse(_UNAUTHORIZED, status_code=401)
        return None

    async def stream(request: Request) -> Response:
        denied = refused(request)
        if denied is not None:
            return denied
        sid = request.query_params.get("id")
        if not sid:
            return PlainTextResponse("the session id is missing: ?id=...\n", status_code=400)
        try:
            asked = _resume_point(request)
        except _BadRequest as bad:
            return PlainTextResponse(f"{bad}\n", status_code=400)

        def prepare() -> tuple[BaseSession, int, str, int, LiveRows]:
            reader = store.open(sid)
            latest = reader.latest_seq
            after = latest if asked is None else asked
            mark = data.event_mark(data.event_at(reader, after))
            # The follower reads through its own session object, in its own thread.
            return store.open(sid), after, mark, latest, LiveRows(reader, after)

        try:
            followed, after, mark, latest, rows = await run_in_threadpool(prepare)
        except SessionError as exc:  # a wrong key, say: said once, not streamed
            status = 404 if isinstance(exc, SessionNotFound) else 500
            return PlainTextResponse(f"{exc}\n", status_code=status)
        feed = _Feed(followed, after, buffer, asyncio.get_running_loop())

        async def render(batch: list[Event]) -> bytes:
            dicts = await run_in_threadpool(_row_dicts, rows, batch)
            return b"".join(
                _message("row", {**row, "mark": data.event_mark(event)}, event.seq)
                for event, row in zip(batch, dicts, strict=True)
            )

        start = _message("start", {"after": after, "mark": mark, "latest_seq": latest}, after)
        return _sse(request.app.state, feed, start, render, heartbeat)

    async def sessions(request: Request) -> Response:
        denied = refused(request)
        if denied is not None:
            return denied
        prefix = request.query_params.get("prefix") or None
        last = request.headers.get("last-event-id", "").strip()
        asked = unquote(last) if last else None
        if asked is not None:
            try:  # checked now (the feed's own reading starts in its thread)
                store.changes(prefix=prefix, after=asked, timeout=0).close()
            except UsageError:
                return PlainTextResponse(
                    "Last-Event-ID must be a position this stream sent\n", status_code=400
                )
        try:
            after = (
                asked
                if asked is not None
                else await run_in_threadpool(_latest_position, store, prefix)
            )
        except SessionError as exc:
            return PlainTextResponse(f"{exc}\n", status_code=500)
        feed = _ChangeFeed(store, prefix, after, on_change, buffer, asyncio.get_running_loop())

        async def render(batch: list[Change]) -> bytes:
            return b"".join(
                _message("change", _change_data(c), quote(c.position, safe="")) for c in batch
            )

        start = _message("start", {}, quote(after, safe=""))
        return _sse(request.app.state, feed, start, render, heartbeat)

    app = Starlette(
        routes=[Route("/", stream, methods=["GET"]), Route("/sessions", sessions, methods=["GET"])]
    )
    app.state.active_streams = 0
    return app
