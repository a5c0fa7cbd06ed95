"""``agentsession.web.create_stream_app``: a session's rows as resumable Server-Sent Events.

Streams run against real uvicorn servers on free loopback ports (a stream has no end, which
starlette's TestClient would wait for) on JSONL, SQLite and, with
``AGENTSESSION_TEST_POSTGRES_DSN``, PostgreSQL; the back-pressure test drives the ASGI app
directly, with a client that stops reading.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the stream app needs the web extra")
pytest.importorskip("uvicorn", reason="the stream app needs the web extra")

import httpx

import agentsession as ags
from agentsession.errors import UsageError
from agentsession.web import create_app, create_stream_app

from . import test_web
from .test_web import Server, read_events, rows_of, say, stored_rows, strip_html

store_url = test_web.store_url
"""A store URL of each backend (the viewer tests' fixture)."""
store = test_web.store
"""The viewer tests' populated store of each backend."""

TOKEN = "stream-" + "k" * 24


def without_marks(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return strip_html([{k: v for k, v in row.items() if k != "mark"} for row in rows])


def wait_for(app: Any, count: int) -> None:
    deadline = time.monotonic() + 10
    while app.state.active_streams != count:
        assert time.monotonic() < deadline, app.state.active_streams
        time.sleep(0.02)


def test_every_event_once_across_reconnects_from_random_points(
    store: ags.BaseStore, store_url: str
) -> None:
    sid = "stream:resume"
    say(store, sid, ["before the stream"])
    app = create_stream_app(store)
    writer = ags.open_store(store_url)

    def write() -> None:
        session = writer.get(sid)
        for n in range(25):  # 75 events, while the reader comes and goes
            with session.turn(agent="w") as turn:
                turn.user(f"message {n}")
            time.sleep(0.01)

    total = 3 + 25 * 3
    chosen = random.Random(7)
    seen: list[dict[str, Any]] = []
    last = "0"
    connections = 0
    thread = threading.Thread(target=write)
    with Server(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        thread.start()
        try:
            while not seen or seen[-1]["seq"] < total:
                wanted = chosen.randint(1, 9)
                connections += 1
                with http.stream("GET", "/", params={"id": sid, "after": 0},
                                 headers={"Last-Event-ID": last}) as response:
                    assert response.status_code == 200

                    def enough(got: list[tuple[str, str, Any]], n: int = wanted) -> bool:
                        rows = rows_of(got)
                        return len(rows) >= n or (bool(rows) and rows[-1]["seq"] >= total)

                    got = read_events(response.iter_lines(), enough)
                assert got[0][0] == "start" and got[0][1] == last
                for event, ident, data in got[1:]:
                    assert event == "row" and int(ident) == data["seq"]
                    seen.append(data)
                    last = ident
                assert connections < 500
        finally:
            thread.join()
            writer.close()
    assert connections > 5
    assert store.open(sid).latest_seq == total
    assert [row["seq"] for row in seen] == list(range(1, total + 1))
    assert without_marks(seen) == stored_rows(store, sid)
    wait_for(app, 0)


def test_a_stream_without_a_point_goes_on_after_the_latest_seq(store: ags.BaseStore) -> None:
    sid = "stream:latest"
    say(store, sid, ["one", "two"])
    app = create_stream_app(store)
    with Server(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        with http.stream("GET", "/", params={"id": sid}) as response:
            lines = response.iter_lines()
            start = read_events(lines, lambda got: len(got) >= 1)
            assert start[0][:2] == ("start", "6")
            assert start[0][2]["after"] == start[0][2]["latest_seq"] == 6
            say(store, sid, ["three"])
            got = read_events(lines, lambda got: len(got) >= 3)
        assert [data["seq"] for _, _, data in got] == [7, 8, 9]
        assert got[1][2]["text"] == "three" and got[1][2]["depth"] == 1


def test_idle_streams_get_heartbeats(store: ags.BaseStore) -> None:
    app = create_stream_app(store, heartbeat=0.1)
    with Server(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        with http.stream("GET", "/", params={"id": "chat:main"}) as response:
            pings = 0
            began = time.monotonic()
            for line in response.iter_lines():
                pings += line == ": ping"
                if pings == 3:
                    break
                assert time.monotonic() - began < 10
        assert time.monotonic() - began < 5
        wait_for(app, 0)


def test_a_session_deleted_while_followed_resets_and_ends_the_stream(
    store: ags.BaseStore,
) -> None:
    sid = "stream:deleted"
    say(store, sid, ["old"])
    app = create_stream_app(store)
    with Server(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        with http.stream("GET", "/", params={"id": sid}) as response:
            wait_for(app, 1)
            store.delete(sid)
            say(store, sid, ["new", "newer"])
            got = read_events(response.iter_lines(), lambda got: False)  # until it ends
        assert [event for event, _, _ in got] == ["start", "reset"]
        assert got[1][2] == {"first_seq": 1}
        wait_for(app, 0)


def test_the_token_is_required_and_never_echoed(store: ags.BaseStore) -> None:
    app = create_stream_app(store, token=TOKEN)
    with Server(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        for params, headers in (
            ({"id": "chat:main"}, {}),
            ({"id": "chat:main", "token": TOKEN[:-1] + "x"}, {}),
            ({"id": "chat:main"}, {"Authorization": f"Bearer {TOKEN}x"}),
            ({"id": "chat:main"}, {"Authorization": f"Basic {TOKEN}"}),
            ({"id": "chat:main", "token": [TOKEN, "other-token"]}, {}),
        ):
            refused = http.get("/", params=params, headers=headers)
            assert refused.status_code == 401, (params, headers)
            assert TOKEN not in refused.text and TOKEN[:-1] not in refused.text
        for params, headers in (
            ({"id": "chat:main", "after": 0, "token": TOKEN}, {}),
            ({"id": "chat:main", "after": 0}, {"Authorization": f"Bearer {TOKEN}"}),
        ):
            with http.stream("GET", "/", params=params, headers=headers) as response:
                assert response.status_code == 200
                got = read_events(response.iter_lines(), lambda got: len(rows_of(got)) >= 1)
            assert rows_of(got)[0]["seq"] == 1
    for bad in ("short", "has space in it", ""):
        with pytest.raises(UsageError, match="access token") as caught:
            create_stream_app(store, token=bad)
        assert not bad or bad not in str(caught.value)


def test_bad_requests_are_refused(store: ags.BaseStore) -> None:
    app = create_stream_app(store)
    with Server(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        assert http.get("/").status_code == 400
        assert http.get("/", params={"id": "chat:main", "after": "x"}).status_code == 400
        assert http.get("/", params={"id": "chat:main", "after": "-1"}).status_code == 400
        missing = http.get("/", params={"id": "no:such"})
        assert missing.status_code == 404 and "no:such" in missing.text
        assert http.post("/", params={"id": "chat:main"}).status_code == 405
    for kwargs in ({"heartbeat": 0}, {"heartbeat": "1"}, {"buffer": 0}, {"buffer": True}):
        with pytest.raises(UsageError):
            create_stream_app(store, **kwargs)


class SlowClient:
    """Drives the ASGI app as a server would, with a client that reads nothing until
    :meth:`release`: each ``send`` of a body waits for it."""

    def __init__(self) -> None:
        self.messages: list[bytes] = []
        self.gone = asyncio.Event()
        self.reading = asyncio.Event()
        self.started = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            assert message["status"] == 200
            return
        body = message.get("body", b"")
        if body:
            self.messages.append(body)
            self.started.set()
            if b"event: start" not in body:
                await self.reading.wait()

    def events(self) -> list[tuple[str, str, Any]]:
        import json

        got = []
        for block in b"".join(self.messages).decode().split("\n\n"):
            fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line
                          and not line.startswith(":"))
            if "data" in fields:
                got.append((fields.get("event", ""), fields.get("id", ""),
                            json.loads(fields["data"])))
        return got


def test_a_client_that_falls_behind_gets_reload_instead_of_a_growing_buffer(
    store: ags.BaseStore,
) -> None:
    sid = "stream:slow"
    say(store, sid, ["first"])
    app = create_stream_app(store, buffer=5)
    scope = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
        "method": "GET", "scheme": "http", "path": "/", "raw_path": b"/", "root_path": "",
        "query_string": f"id={sid}&after=0".encode(), "headers": [], "server": ("t", 80),
        "client": ("c", 1),
    }

    async def run() -> SlowClient:
        client = SlowClient()
        task = asyncio.create_task(app(scope, client.receive, client.send))
        await asyncio.wait_for(client.started.wait(), 10)
        # The first rows are being sent to a client that reads nothing; 30 more events come.
        await asyncio.to_thread(say, store, sid, [f"more {n}" for n in range(10)])
        await asyncio.sleep(1.5)
        client.reading.set()
        await asyncio.wait_for(task, 10)  # the stream ends by itself after reload
        return client

    client = asyncio.run(run())
    got = client.events()
    assert got[0][0] == "start" and got[-1][0] == "reload"
    rows = [data for event, _, data in got if event == "row"]
    assert [event for event, _, _ in got[1:-1]] == ["row"] * len(rows)
    # What was sent is whole and in order; reload says where what was not sent begins.
    assert [row["seq"] for row in rows] == list(range(1, len(rows) + 1))
    assert got[-1][2] == {"from": len(rows) + 1}
    assert len(rows) < 33 - 5
    assert app.state.active_streams == 0


# -- the store-wide feed: /sessions ------------------------------------------------------------


def changes_until(lines: Any, until: Any) -> list[tuple[str, str, Any]]:
    """The messages of a /sessions stream until ``until(changes so far)`` holds."""
    return read_events(lines, lambda got: until([m for m in got if m[0] == "change"]))


def test_the_sessions_feed_reports_created_appended_deleted_and_resumes(
    store: ags.BaseStore, store_url: str
) -> None:
    app = create_stream_app(store, heartbeat=0.2)
    writer = ags.open_store(store_url)  # another store object writes
    try:
        with Server(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
            with http.stream("GET", "/sessions", params={"prefix": "feed:"}) as response:
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                lines = response.iter_lines()
                start = read_events(lines, lambda got: len(got) >= 1)
                assert start[0][0] == "start" and start[0][1]
                # Once a change came, the feed reads on for a second at least: what is
                # created then comes as created (one created while a feed (re)starts may come
                # as appended, as after a resume).
                say(writer, "feed:warm", ["up"])
                changes_until(lines, lambda c: c and c[-1][2]["seq"] == 3)
                say(writer, "other:x", ["not under the prefix"])
                say(writer, "feed:a", ["one"])
                got = changes_until(lines, lambda c: c and c[-1][2]["seq"] == 3)
                assert got[0][2]["kind"] == "created"
                assert {data["session_id"] for _, _, data in got} == {"feed:a"}
                assert got[-1][2]["time"] is not None
                say(writer, "feed:a", ["two"])
                got = changes_until(lines, lambda c: c and c[-1][2]["seq"] == 6)
                assert {data["kind"] for _, _, data in got} == {"appended"}
                writer.delete("feed:a")
                got = changes_until(lines, lambda c: c and c[-1][2]["kind"] == "deleted")
                assert got[-1][2] == {"session_id": "feed:a", "kind": "deleted", "seq": 0,
                                      "time": None}
                say(writer, "feed:b", ["before leaving"])
                got = changes_until(lines, lambda c: c and c[-1][2]["seq"] == 3)
                last = got[-1][1]
                assert "\n" not in last and got[-1][2]["session_id"] == "feed:b"
            wait_for(app, 0)
            # Away: one session grows, another is created; back, with the last id seen.
            say(writer, "feed:b", ["while away"])
            say(writer, "feed:c", ["while away"])
            with http.stream("GET", "/sessions", params={"prefix": "feed:"},
                             headers={"Last-Event-ID": last}) as response:
                lines = response.iter_lines()
                got = read_events(lines, lambda got: len(got) >= 3)
            assert got[0][:2] == ("start", last)
            assert [(data["session_id"], data["seq"]) for _, _, data in got[1:]] == [
                ("feed:b", 6), ("feed:c", 3)]
            wait_for(app, 0)
    finally:
        writer.close()
    # Each client's thread ends soon after its client went.
    deadline = time.monotonic() + 5
    while any(t.name == "agentsession-stream" for t in threading.enumerate()):
        assert time.monotonic() < deadline, threading.enumerate()
        time.sleep(0.05)


def test_the_sessions_feed_needs_the_token_and_a_position_it_sent(
    store: ags.BaseStore,
) -> None:
    app = create_stream_app(store, token=TOKEN, heartbeat=0.1)
    with Server(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        for params, headers in (
            ({}, {}),
            ({"token": TOKEN[:-1] + "x"}, {}),
            ({}, {"Authorization": f"Bearer {TOKEN}x"}),
        ):
            refused = http.get("/sessions", params=params, headers=headers)
            assert refused.status_code == 401, (params, headers)
            assert TOKEN[:-1] not in refused.text
        bad = http.get("/sessions", params={"token": TOKEN},
                       headers={"Last-Event-ID": "not a position"})
        assert bad.status_code == 400 and "Last-Event-ID" in bad.text
        with http.stream("GET", "/sessions", headers={"Authorization": f"Bearer {TOKEN}"}
                         ) as response:
            assert response.status_code == 200
            pings = 0
            for line in response.iter_lines():
                pings += line == ": ping"
                if pings == 2:
                    break
        wait_for(app, 0)
    with pytest.raises(UsageError, match="on_change"):
        create_stream_app(store, on_change="listing")  # type: ignore[arg-type]


def test_the_viewer_serves_the_feed_and_drops_its_cached_listing_on_a_change(
    store: ags.BaseStore, store_url: str
) -> None:
    app = create_app(store, listing_ttl=3600)
    writer = ags.open_store(store_url)
    try:
        with Server(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
            def listed() -> set[str]:
                page = http.get("/api/sessions", params={"limit": 500}).json()
                return {s["id"] for s in page["sessions"]}

            assert "viewer:new" not in listed()  # and the listing is kept for an hour
            with http.stream("GET", "/stream/sessions") as response:
                lines = response.iter_lines()
                read_events(lines, lambda got: len(got) >= 1)
                say(writer, "viewer:new", ["hello"])
                changes_until(lines, lambda c: any(d["session_id"] == "viewer:new"
                                                   for _, _, d in c))
                assert "viewer:new" in listed()
            assert http.get("/stream/sessions", headers={"Host": "evil.example"}
                            ).status_code == 400
    finally:
        writer.close()
