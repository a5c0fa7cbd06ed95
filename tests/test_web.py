"""``agentsession serve``: the viewer's JSON endpoints, headers, token and live tail.

The endpoints run through starlette's TestClient on JSONL, SQLite and (with
``AGENTSESSION_TEST_POSTGRES_DSN``) PostgreSQL; the live tail, which streams without end, runs
against a real uvicorn server on a free loopback port, started and stopped by each test that
needs it. The pages themselves are driven in a real browser by ``tests/test_web_browser.py``.
"""

from __future__ import annotations

import html.parser
import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import msgspec
import pytest

pytest.importorskip("starlette", reason="the viewer needs the web extra")
pytest.importorskip("uvicorn", reason="the viewer needs the web extra")

import httpx
import uvicorn
from click.testing import CliRunner
from starlette.testclient import TestClient

import agentsession as ags
from agentsession import events as ev
from agentsession.branching import BRANCHES_KIND, BranchRef, add_branch
from agentsession.cli import cli
from agentsession.events import encode_event
from agentsession.view import transcript_rows
from agentsession.web import CONTENT_SECURITY_POLICY, create_app
from agentsession.web import data as web_data
from agentsession.web.app import DEFAULT_PAGE_ROWS, token_cookie_name
from agentsession.web.server import RedactToken, bind, is_loopback, url_of

from .test_cli import SRC, make_read_only, read_only_runner, shared_tmp, tree_snapshot
from .test_conformance_postgres import (
    DSN,
    SKIP_REASON,
    drop_schemas,
    new_schema_name,
    url_with_schema,
)

ROOT = Path(__file__).resolve().parent.parent

XSS = "window.__xss=1"
PAYLOADS = (
    f"<script>{XSS}</script>",
    f'<img src=x onerror="{XSS}">',
    f"[click me](javascript:{XSS})",
    f'<a href="javascript:{XSS}">link</a>',
    f"<svg onload={XSS}>",
    f"<javascript:{XSS}>",
)
"""Stored in messages, tool arguments, results and ids; none may ever run."""
XSS_ID = f"xss:<script>{XSS}</script><img src=x onerror={XSS}>javascript:{XSS}"
ODD_ID = "team/a:b?c=d&e#f %2F%zz/ü"
"""An id with every character that could break a URL."""


# -- stores -----------------------------------------------------------------------------------


def populate(store: ags.BaseStore) -> None:
    """The sessions the tests read: a main session with tools, usage, a compaction and a child;
    a session whose crashed turn was recovered; one full of XSS payloads; one with an odd id;
    one with an open (incomplete) turn."""
    main = store.get("chat:main")
    for n in range(3):
        with main.turn(agent="coder", user="U1") as turn:
            turn.user(f"Fix the **failing** test {n}")
            with turn.step() as step:
                call = ags.ToolCall(id=f"c{n}", name="read", arguments={"path": f"a{n}.py"})
                step.assistant("Looking.", tool_calls=[call])
                step.tool_call(call)
                step.tool_result(f"c{n}", "read", "line\n" * 50)
                step.usage(input_tokens=1200 + n, output_tokens=80, cache_read_tokens=100)
            with turn.step() as step:
                step.assistant(f"Fixed {n}.")
                step.usage(input_tokens=1300, output_tokens=20)
    child = main.fork("researcher", inherit=2, task="find the docs")
    with child.turn(agent="researcher") as turn:
        turn.assistant("The docs say csv.reader.")
    child.merge("Research: csv.reader.")
    main.compact(ags.Message.user("Summary: three fixes."), keep_turns=1)

    crashed = store.get("chat:crashed")
    crashed.append_many(
        [
            ags.Event.new("turn/start", ev.TurnStart(), agent="coder"),
            ags.Event.new("user/message", ags.Message.user("Deploy it"), agent="coder"),
            ags.Event.new(
                "assistant/message",
                ags.Message.assistant(tool_calls=[ags.ToolCall("d1", "deploy")]),
                agent="coder",
            ),
        ]
    )
    [report] = store.recover(["chat:crashed"])
    assert report.status == "repaired"

    xss = store.get(XSS_ID)
    with xss.turn(agent=f"<b>{XSS}</b>", user=PAYLOADS[1]) as turn:
        turn.user("\n\n".join(PAYLOADS))
        with turn.step() as step:
            call = ags.ToolCall(id=PAYLOADS[0], name=PAYLOADS[1], arguments={"a": list(PAYLOADS)})
            step.assistant("\n\n".join(PAYLOADS), tool_calls=[call])
            step.tool_result(PAYLOADS[0], PAYLOADS[1], "\n".join(PAYLOADS))
        turn.assistant(f"see [the docs](https://example.org/?q=<b>) and {PAYLOADS[2]}")

    odd = store.create(ODD_ID, [ags.Event.new("user/message", ags.Message.user("odd"))],
                       agent_id="odd-agent")
    odd.append(ags.Event.new("assistant/message", ags.Message.assistant("even")))

    store.get("chat:open").append_many(
        [
            ags.Event.new("turn/start", ev.TurnStart(), agent="coder"),
            ags.Event.new("user/message", ags.Message.user("Still working"), agent="coder"),
        ]
    )


@pytest.fixture(params=["jsonl", "sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store URL of each backend (PostgreSQL in a schema of its own, when configured)."""
    if request.param == "jsonl":
        yield str(tmp_path / "store")
    elif request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
    else:
        if not DSN:
            pytest.skip(SKIP_REASON)
        schema = new_schema_name()
        try:
            yield url_with_schema(schema)
        finally:
            drop_schemas([schema])


@pytest.fixture
def store(store_url: str) -> Iterator[ags.BaseStore]:
    """A populated store of each backend."""
    opened = ags.open_store(store_url)
    populate(opened)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def client(store: ags.BaseStore) -> Iterator[TestClient]:
    """A client of the viewer of ``store`` (no token; the Host TestClient sends is allowed)."""
    app = create_app(store, allowed_hosts=["testserver"], listing_ttl=0)
    with TestClient(app) as c:
        yield c


def get_json(client: TestClient, path: str, **params: Any) -> Any:
    response = client.get(path, params=params)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    return response.json()


def stored_rows(store: ags.BaseStore, session_id: str) -> list[dict[str, Any]]:
    """What the rows endpoint must return: transcript_rows of the whole log (full texts)."""
    rows = transcript_rows(store.open(session_id).read(), full=True)
    return json.loads(msgspec.json.encode(rows))


def strip_html(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k != "html"} for row in rows]


# -- headers, methods, hosts ------------------------------------------------------------------


def test_every_response_carries_the_security_headers(client: TestClient) -> None:
    paths = [
        "/",
        "/session?id=chat:main",
        "/static/app.js",
        "/static/app.css",
        "/api/sessions",
        "/api/session?id=chat:main",
        "/api/session?id=nope",
        "/no/such/page",
    ]
    for path in paths:
        response = client.get(path)
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY, path
        assert response.headers["x-content-type-options"] == "nosniff", path
        assert response.headers["referrer-policy"] == "no-referrer", path
        assert response.headers["x-frame-options"] == "DENY", path
    assert "'unsafe-inline'" not in CONTENT_SECURITY_POLICY
    assert "script-src 'self';" in CONTENT_SECURITY_POLICY
    assert "default-src 'none'" in CONTENT_SECURITY_POLICY


def test_the_pages_have_no_inline_script_or_style_and_load_nothing_from_elsewhere() -> None:
    static = ROOT / "src" / "agentsession" / "web" / "static"
    for page in ("index.html", "session.html"):
        text = (static / page).read_text(encoding="utf-8")
        assert "<style" not in text and "style=" not in text, page
        scripts = text.count("<script")
        assert scripts == text.count('<script src="static/app.js" defer></script>') == 1, page
        assert " on" not in text.replace("\n", " ").split("<body", 1)[1].split(">", 1)[0]
        assert "http://" not in text and "https://" not in text and "//" not in text.replace(
            "://", ""
        ), page
    script = (static / "app.js").read_text(encoding="utf-8")
    elsewhere = script.replace("http://www.w3.org/2000/svg", "")
    assert "http://" not in elsewhere and "https://" not in elsewhere
    assert "eval(" not in script and "new Function" not in script
    # The one HTML insertion is the server's Markdown rendering.
    assert script.count("innerHTML") == 1


def test_every_write_method_is_refused(client: TestClient) -> None:
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        for path in ("/", "/api/sessions", "/api/session?id=chat:main", "/static/app.js",
                     "/stream/?id=chat:main"):
            response = client.request(method, path)
            assert response.status_code == 405, (method, path)
            assert response.headers["allow"] == "GET, HEAD"
            assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY


def test_without_a_token_only_loopback_host_names_are_answered(store: ags.BaseStore) -> None:
    with TestClient(create_app(store), base_url="http://127.0.0.1:8765") as c:
        assert c.get("/api/sessions").status_code == 200
        for host in ("localhost:8765", "[::1]:8765", "127.0.0.1"):
            assert c.get("/api/sessions", headers={"Host": host}).status_code == 200, host
        for host in ("evil.example:8765", "evil.example", "127.0.0.1.evil.example"):
            response = c.get("/api/sessions", headers={"Host": host})
            assert response.status_code == 400, host
            assert "chat:main" not in response.text


# -- the token --------------------------------------------------------------------------------


def test_with_a_token_every_request_needs_it(store: ags.BaseStore) -> None:
    token = "t0k-" + "x" * 30
    app = create_app(store, token=token)
    with TestClient(app, base_url="http://192.0.2.1:8765") as c:
        for path in ("/", "/session?id=chat:main", "/static/app.js", "/api/sessions",
                     "/api/session/rows?id=chat:main", "/stream/?id=chat:main"):
            response = c.get(path)
            assert response.status_code == 401, path
            assert "chat:main" not in response.text and "Fix the" not in response.text
            wrong = c.get(path, params={"token": token[:-1] + "y"})
            assert wrong.status_code == 401, path
            assert c.get(path, headers={"Authorization": "Bearer nope"}).status_code == 401
        first = c.get("/", params={"token": token})
        assert first.status_code == 200
        cookie = first.headers["set-cookie"]
        name = token_cookie_name(token)
        assert cookie.startswith(f"{name}={token};")
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
        # The page's later requests carry the cookie (the TestClient kept it).
        assert c.get("/api/sessions").status_code == 200
        c.cookies.clear()
        assert c.get("/api/sessions").status_code == 401
        bearer = {"Authorization": f"Bearer {token}"}
        assert c.get("/api/sessions", headers=bearer).status_code == 200
        assert "set-cookie" not in c.get("/api/sessions", headers=bearer).headers
        c.cookies.set(name, token)
        assert c.get("/api/session/rows", params={"id": "chat:main"}).status_code == 200
        c.cookies.clear()
        c.cookies.set(token_cookie_name("other"), token)
        assert c.get("/api/sessions").status_code == 401


def test_a_token_that_cannot_travel_in_a_url_and_a_cookie_is_refused(
    store: ags.BaseStore,
) -> None:
    for bad in ("", "short", "has space in it", "semi;colon-token", "quote\"token-value"):
        with pytest.raises(ags.UsageError, match="access token"):
            create_app(store, token=bad)
    result = CliRunner().invoke(cli, ["serve", "--store", store.url, "--token", "a b c d e f g"])
    assert result.exit_code == 2 and "access token" in result.output


def test_the_token_never_reaches_a_log_record() -> None:
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "GET", "/session?id=a&token=SeCrEt123&x=1", "1.1", 200), None,
    )
    assert RedactToken().filter(record)
    text = record.getMessage()
    assert "SeCrEt123" not in text and "token=…" in text and "id=a" in text


SECRET = "SeCrEt-t0ken_value"
"""A token for the redaction tests."""


def escaped(text: str, *, upper: bool = False) -> str:
    """Every character of ``text`` percent-encoded, the hex digits in either case."""
    return "".join(f"%{ord(c):02X}" if upper else f"%{ord(c):02x}" for c in text)


TOKEN_SPELLINGS = (
    f"token={SECRET}",
    f"tok%65n={SECRET}",
    f"%74oken={SECRET}",
    f"%74%6F%6b%65%6E={SECRET}",
    f"tok%2565n={SECRET}",
    f"TOKEN={SECRET}",
    f"token%3D{SECRET}",
    f"token={escaped(SECRET)}",
    f"token={escaped(SECRET, upper=True)}",
    f"token={SECRET}&token={SECRET}",
)
"""The token parameter as a client may spell it: percent escapes in its name (mixed case,
repeated), another case, ``=`` escaped (as uvicorn prints a path), the value escaped, twice."""


@pytest.mark.parametrize("spelling", TOKEN_SPELLINGS)
@pytest.mark.parametrize(
    "path", ["/api/sessions?{}", "/stream/?id=chat:1&{}&after=0",
             "/stream/{}", "/session?{}&id=a"]
)
def test_no_spelling_of_the_token_parameter_reaches_a_log_line(spelling: str, path: str) -> None:
    line = path.format(spelling)
    for redactor in (RedactToken(), RedactToken(SECRET)):
        record = logging.LogRecord(
            "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
            ("127.0.0.1:5", "GET", line, "1.1", 200), None,
        )
        assert redactor.filter(record)
        text = record.getMessage()
        assert SECRET not in text and escaped(SECRET) not in text.lower(), text
        assert "…" in text and "HTTP/1.1" in text
    # The token itself is redacted wherever it is, under any name or none, and in a traceback.
    try:
        raise ValueError(f"/p/{SECRET}?other={escaped(SECRET, upper=True)}")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "at %s", (f"/{SECRET}",),
                                   sys.exc_info())
    assert RedactToken(SECRET).filter(record)
    formatted = logging.Formatter().format(record)
    assert SECRET not in formatted and escaped(SECRET, upper=True) not in formatted
    assert "ValueError" in formatted


def test_the_token_parameter_is_read_only_when_spelled_token(store: ags.BaseStore) -> None:
    app = create_app(store, token=SECRET)
    with TestClient(app, base_url="http://192.0.2.1:8765") as c:
        def status(query: str) -> int:
            c.cookies.clear()
            return c.get("/api/sessions?" + query).status_code

        assert status(f"token={SECRET}") == 200
        assert status(f"token={escaped(SECRET)}") == 200  # the value is decoded, as any
        assert status(f"token={SECRET}&token={SECRET}") == 200
        # A name that only decodes to "token" is not read as the token, nor are two values.
        for query in (f"tok%65n={SECRET}", f"%74oken={SECRET}", f"%74%6F%6b%65%6E={SECRET}",
                      f"token={SECRET}&tok%65n={SECRET}", f"token={SECRET}&token=other-value",
                      f"token=other-value&token={SECRET}", f"TOKEN={SECRET}"):
            assert status(query) == 401, query
        # Nor does such a request pass with a good cookie or header beside it.
        c.cookies.set(token_cookie_name(SECRET), SECRET)
        assert c.get(f"/api/sessions?tok%65n={SECRET}").status_code == 401
        assert c.get("/api/sessions").status_code == 200


def test_a_token_with_a_plus_works_in_the_printed_url() -> None:
    url = url_of("127.0.0.1", 8765, "a+b/c=d-token")
    query = url.split("?", 1)[1]
    assert query == "token=a%2Bb%2Fc%3Dd-token"
    assert dict(parse_qsl(query)) == {"token": "a+b/c=d-token"}


# -- the sessions list ------------------------------------------------------------------------


def test_the_list_pages_newest_first_and_filters(client: TestClient, store: ags.BaseStore) -> None:
    everything = [info.id for info in store.list()]
    page = get_json(client, "/api/sessions")
    assert [s["id"] for s in page["sessions"]] == everything
    assert page["total"] == len(everything) == 6
    assert page["more"] is False
    first = get_json(client, "/api/sessions", limit=2)
    second = get_json(client, "/api/sessions", limit=2, offset=2)
    third = get_json(client, "/api/sessions", limit=2, offset=4)
    assert [s["id"] for p in (first, second, third) for s in p["sessions"]] == everything
    assert first["more"] and second["more"] and not third["more"]
    info = {i.id: i for i in store.list()}
    for row in page["sessions"]:
        assert row["events"] == info[row["id"]].last_seq
    matching = get_json(client, "/api/sessions", q="chat:")
    assert [s["id"] for s in matching["sessions"]] == [i for i in everything if "chat:" in i]
    assert len(matching["sessions"]) == 4  # chat:main, its child, chat:crashed, chat:open
    assert [s["id"] for s in get_json(client, "/api/sessions", q="a:b?c")["sessions"]] == [ODD_ID]
    by_agent = get_json(client, "/api/sessions", agent="odd-agent")
    assert [s["id"] for s in by_agent["sessions"]] == [ODD_ID]
    assert by_agent["total"] is None and by_agent["more"] is False
    assert get_json(client, "/api/sessions", agent="nobody")["sessions"] == []
    assert client.get("/api/sessions", params={"limit": "0"}).status_code == 400
    assert client.get("/api/sessions", params={"offset": "x"}).status_code == 400


def test_the_list_reads_no_event(store: ags.BaseStore, monkeypatch: pytest.MonkeyPatch) -> None:
    def no(*args: object, **kwargs: object) -> None:
        raise AssertionError("the sessions list read a session")

    store.list(limit=1)  # a JSONL store's index catches up with the appends (reads them once)
    monkeypatch.setattr(ags.BaseStore, "get", no)
    monkeypatch.setattr(ags.BaseStore, "open", no)
    monkeypatch.setattr(ags.BaseSession, "read", no)
    page = web_data.list_sessions(store, limit=3)
    assert len(page.sessions) == 3 and page.total == 6


def test_the_agent_filter_matches_the_agents_of_the_events(
    client: TestClient, store: ags.BaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No record of chat:main, chat:crashed and chat:open names an agent, but their events
    name "coder" (the forked child's record names "researcher"): the filter finds them
    from each session's first and last events, never reading a whole log."""
    for sid in ("chat:main", "chat:crashed", "chat:open"):
        assert web_data._record_agent(store, sid) == ""
    ids = [info.id for info in store.list()]
    coder = [s["id"] for s in get_json(client, "/api/sessions", agent="coder")["sessions"]]
    assert coder == [i for i in ids if i in ("chat:main", "chat:crashed", "chat:open")]
    researcher = get_json(client, "/api/sessions", agent="researcher")["sessions"]
    assert [s["id"] for s in researcher] == [i for i in ids if i.startswith("chat:main:")]
    assert [s["id"] for s in get_json(client, "/api/sessions", agent="odd-agent")["sessions"]] \
        == [ODD_ID]
    assert get_json(client, "/api/sessions", agent="nobody")["sessions"] == []
    # An agent that wrote only the middle of a long log is not looked for there.
    middle = store.get("chat:middle")
    middle.append(ags.Event.new("user/message", ags.Message.user("start"), agent="first"))
    middle.append(ags.Event.new("user/message", ags.Message.user("mid"), agent="middle"))
    for n in range(web_data.AGENT_TAIL):
        middle.append(ags.Event.new("user/message", ags.Message.user(f"{n}"), agent="last"))
    for name, found in (("first", True), ("last", True), ("middle", False)):
        page = web_data.list_sessions(store, agent=name)
        assert ("chat:middle" in [s.id for s in page.sessions]) is found, name
    reads: list[int | None] = []
    real_read = ags.BaseSession.read

    def counted(self: ags.BaseSession, *args: Any, **kwargs: Any) -> Any:
        reads.append(kwargs.get("limit"))
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(ags.BaseSession, "read", counted)
    web_data.list_sessions(store, agent="nobody")
    assert reads and all(limit is not None and limit <= web_data.AGENT_TAIL for limit in reads)
    # The listing keeps each session's agents as long as it keeps the listing.
    listing = web_data.ListingCache(store, ttl=60)
    web_data.list_sessions(store, agent="nobody", listing=listing)
    reads.clear()
    web_data.list_sessions(store, agent="coder", listing=listing)
    assert reads == []


def test_a_listing_is_reused_for_its_ttl(store: ags.BaseStore) -> None:
    now = [0.0]
    listing = web_data.ListingCache(store, ttl=2.0, clock=lambda: now[0])
    assert len(listing.get()) == 6
    store.get("chat:new").append(ags.Event.new("user/message", ags.Message.user("hi")))
    assert len(listing.get()) == 6
    now[0] = 2.5
    assert len(listing.get()) == 7


def test_badges_are_computed_for_the_sessions_asked(client: TestClient) -> None:
    found = client.get(
        "/api/badges",
        params=[("id", i) for i in ("chat:main", "chat:crashed", "chat:open", "gone")],
    ).json()
    main, crashed, open_, gone = (found[i] for i in ("chat:main", "chat:crashed", "chat:open",
                                                     "gone"))
    assert gone is None
    assert main["turns"] == 3 and main["compacted"] == 1 and main["children"] == 1
    assert main["recovered"] == 0 and main["incomplete"] == 0 and main["parent"] == ""
    assert crashed["recovered"] == 1 and crashed["incomplete"] == 0 and crashed["turns"] == 1
    assert open_["incomplete"] == 1
    child_id = get_json(client, "/api/session", id="chat:main")["children"][0]["id"]
    assert get_json(client, "/api/badges", id=child_id)[child_id]["parent"] == "chat:main"


def test_badges_follow_appends(client: TestClient, store: ags.BaseStore) -> None:
    before = get_json(client, "/api/badges", id="chat:crashed")["chat:crashed"]
    assert get_json(client, "/api/badges", id="chat:crashed")["chat:crashed"] == before
    with store.get("chat:crashed").turn(agent="coder") as turn:
        turn.user("again")
    after = get_json(client, "/api/badges", id="chat:crashed")["chat:crashed"]
    assert after["turns"] == before["turns"] + 1
    assert after["events"] == before["events"] + 3


# -- one session ------------------------------------------------------------------------------


def test_the_summary_links_parent_and_children(client: TestClient, store: ags.BaseStore) -> None:
    main = get_json(client, "/api/session", id="chat:main")
    assert main["latest_seq"] == store.open("chat:main").latest_seq
    [child] = main["children"]
    assert child["agent"] == "researcher" and child["state"] == "merged"
    assert main["parent"] == ""
    summary = get_json(client, "/api/session", id=child["id"])
    assert summary["parent"] == "chat:main" and summary["fork_point"] == child["fork_seq"]
    missing = client.get("/api/session", params={"id": "no:such"})
    assert missing.status_code == 404 and "no:such" in missing.json()["error"]
    assert client.get("/api/session").status_code == 400


def test_the_summary_names_a_branchs_origin_and_a_sessions_branches(
    client: TestClient, store: ags.BaseStore
) -> None:
    plain = get_json(client, "/api/session", id="chat:main")
    assert plain["origin"] is None and plain["branches"] == []
    origin = store.get("chat:tree")
    for n in range(2):
        with origin.turn() as turn:
            turn.user(f"q{n}")
            turn.assistant(f"a{n}")
    first = origin.branch(at_seq=4, id="chat:tree/b1")
    with first.turn() as turn:
        turn.user("only in b1")
    origin.branch(id=ODD_ID + "~b")  # an odd id round-trips
    add_branch(store._meta_get, store._meta_cas, "chat:tree", BranchRef("gone", 4))
    index = store._meta_get(BRANCHES_KIND, "chat:tree")
    summary = get_json(client, "/api/session", id="chat:tree")
    assert summary["origin"] is None
    assert summary["branches"] == [
        {"id": "chat:tree/b1", "seq": 4},
        {"id": ODD_ID + "~b", "seq": 8},
    ]
    assert store._meta_get(BRANCHES_KIND, "chat:tree") == index  # the viewer writes nothing
    branch = get_json(client, "/api/session", id="chat:tree/b1")
    assert branch["origin"] == {"id": "chat:tree", "seq": 4} and branch["branches"] == []
    assert branch["latest_seq"] == 8
    rows = get_json(client, "/api/session/rows", id="chat:tree/b1")["rows"]
    assert strip_html(rows) == stored_rows(store, "chat:tree/b1")
    assert [row["kind"] for row in rows] == [
        "turn_start", "user_message", "assistant_message", "turn_end",  # the origin's
        "branch",
        "turn_start", "user_message", "turn_end",  # its own
    ]
    assert rows[4]["seq"] == 5 and rows[4]["origin"] == "chat:tree"
    assert rows[4]["origin_seq"] == 4
    assert rows[1]["text"] == "q0" and rows[6]["text"] == "only in b1"
    # The page carries the switcher's place, the script fills it.
    page = client.get("/session", params={"id": "chat:tree"}).text
    assert 'id="branching"' in page
    script = client.get("/static/app.js").text
    assert '"origin: " + s.origin.id + " at seq "' in script
    assert '" (from seq " + branch.seq + ")"' in script


@pytest.mark.parametrize("limit", [1, 3, 7, DEFAULT_PAGE_ROWS])
def test_pages_of_rows_are_the_rows_of_the_whole_log(
    client: TestClient, store: ags.BaseStore, limit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(web_data, "CONTEXT_CHUNK", 2)  # look back in many small steps
    for sid in ("chat:main", "chat:crashed", XSS_ID, ODD_ID, "chat:open"):
        got: list[dict[str, Any]] = []
        after = 0
        while True:
            page = get_json(client, "/api/session/rows", id=sid, after=after, limit=limit)
            assert len(page["rows"]) <= limit
            got += page["rows"]
            if page["done"]:
                break
            assert page["next_after"] > after
            after = page["next_after"]
        assert strip_html(got) == stored_rows(store, sid), (sid, limit)


def test_the_first_page_of_a_long_session_is_one_page(
    client: TestClient, store: ags.BaseStore
) -> None:
    session = store.get("chat:long")
    for n in range(150):
        with session.turn(agent="coder") as turn:
            turn.user(f"question {n}")
            turn.assistant(f"answer {n}")
    assert session.latest_seq == 600
    page = get_json(client, "/api/session/rows", id="chat:long")
    assert len(page["rows"]) == DEFAULT_PAGE_ROWS and not page["done"]
    assert page["latest_seq"] == 600 and page["next_after"] == DEFAULT_PAGE_ROWS
    middle = get_json(client, "/api/session/rows", id="chat:long", after=301, limit=5)
    assert strip_html(middle["rows"]) == stored_rows(store, "chat:long")[301:306]
    too_many = {"id": "chat:long", "limit": 5000}
    assert client.get("/api/session/rows", params=too_many).status_code == 400


def test_messages_are_what_the_model_sees(client: TestClient, store: ags.BaseStore) -> None:
    for agent in (None, "coder", "researcher"):
        params = {"id": "chat:main"} | ({"agent": agent} if agent else {})
        page = get_json(client, "/api/session/messages", **params)
        history = store.open("chat:main").messages(agent=agent)
        assert page["total"] == len(history)
        assert [m["role"] for m in page["messages"]] == [m.role for m in history]
        assert [m["text"] for m in page["messages"]] == [m.text for m in history]
    recovered = get_json(client, "/api/session/messages", id="chat:crashed")["messages"]
    [result] = [r for m in recovered for r in m["tool_results"]]
    assert result["audit"] == {"decision": "interrupted"}
    some = get_json(client, "/api/session/messages", id="chat:main", offset=1, limit=2)
    assert [m["index"] for m in some["messages"]] == [1, 2] and some["more"]


def test_the_raw_event_is_the_stored_json(client: TestClient, store: ags.BaseStore) -> None:
    event = store.open("chat:main").read(after=2, limit=1)[0]
    response = client.get("/api/session/event", params={"id": "chat:main", "seq": 3})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert json.loads(response.content) == json.loads(encode_event(event))
    for seq, status in ((9999, 404), (0, 400)):
        response = client.get("/api/session/event", params={"id": "chat:main", "seq": seq})
        assert response.status_code == status


def test_ids_with_any_character_round_trip(client: TestClient, store: ags.BaseStore) -> None:
    assert get_json(client, "/api/session", id=ODD_ID)["id"] == ODD_ID
    rows = get_json(client, "/api/session/rows", id=ODD_ID)["rows"]
    assert [r["text"] for r in rows] == ["odd", "even"]
    assert get_json(client, "/api/badges", id=ODD_ID)[ODD_ID]["events"] == 2


def test_stats_chart_tokens_per_turn_and_tool_durations(client: TestClient) -> None:
    stats = get_json(client, "/api/session/stats", id="chat:main")
    assert [t["input"] for t in stats["turns"]][:3] == [2500, 2501, 2502]
    assert [t["output"] for t in stats["turns"]][:3] == [100, 100, 100]
    assert [t["cache_read"] for t in stats["turns"]][:3] == [100, 100, 100]
    assert [t["call_id"] for t in stats["tools"]] == ["c0", "c1", "c2"]
    assert all(t["ms"] >= 0 and t["name"] == "read" for t in stats["tools"])
    assert "coder" in stats["agents"]
    assert stats["grouped_by"] == "turn" and stats["usage"] is True
    assert stats["interrupted"] == []


def test_the_tokens_chart_counts_cache_reads_inside_input(
    client: TestClient, store: ags.BaseStore
) -> None:
    """The converters count cached tokens inside input: 859 in (256 cached) + 80 out is a bar
    of 939, of which 603 input not cached, not one of 1,195."""
    with store.get("chat:cached").turn(agent="coder") as turn:
        turn.user("hi")
        with turn.step() as step:
            step.assistant("hello")
            step.usage(input_tokens=859, output_tokens=80, cache_read_tokens=256)
    [turn_tokens] = get_json(client, "/api/session/stats", id="chat:cached")["turns"]
    assert turn_tokens["input"] == 859 and turn_tokens["cache_read"] == 256
    assert turn_tokens["uncached"] == 603
    bar = sum(turn_tokens[k] for k in ("uncached", "cache_read", "cache_write", "output"))
    assert bar == 859 + 80
    stats = web_data.session_stats(
        [
            ags.Event.new("turn/start", ev.TurnStart()),
            ags.Event.new("usage", ev.Usage(input_tokens=10, cache_read_tokens=6,
                                            cache_write_tokens=3)),
            ags.Event.new("usage", ev.Usage(input_tokens=1, cache_read_tokens=5)),
        ]
    )
    assert stats.turns[0].uncached == 0  # never negative, whatever a provider reported


def test_usage_without_turns_is_grouped_by_user_message(
    client: TestClient, store: ags.BaseStore
) -> None:
    """Integration sessions record messages and usage without turn markers."""
    session = store.get("adk:no-turns")
    session.append_many(
        [
            ags.Event.new("usage", ev.Usage(input_tokens=5, output_tokens=1)),
            ags.Event.new("user/message", ags.Message.user("one")),
            ags.Event.new("assistant/message", ags.Message.assistant("a")),
            ags.Event.new("usage", ev.Usage(input_tokens=100, output_tokens=10)),
            ags.Event.new("usage", ev.Usage(input_tokens=120, output_tokens=12)),
            ags.Event.new("user/message", ags.Message.user("two")),
            ags.Event.new("usage", ev.Usage(input_tokens=300, output_tokens=30,
                                            cache_read_tokens=200)),
        ]
    )
    stats = get_json(client, "/api/session/stats", id="adk:no-turns")
    assert stats["grouped_by"] == "message" and stats["usage"] is True
    assert [(t["seq"], t["input"], t["output"]) for t in stats["turns"]] == [
        (1, 5, 1), (2, 220, 22), (6, 300, 30)
    ]
    # A turn without usage: no usage, and so nothing to chart.
    with store.get("chat:quiet").turn(agent="coder") as turn:
        turn.user("hi")
        turn.assistant("hello")
    quiet = get_json(client, "/api/session/stats", id="chat:quiet")
    assert quiet["grouped_by"] == "turn" and quiet["usage"] is False
    assert get_json(client, "/api/session/stats", id="chat:open")["usage"] is False


def test_an_interrupted_call_is_not_timed(client: TestClient) -> None:
    """A crash repair answers the cut-off call at the repair's time: no duration."""
    stats = get_json(client, "/api/session/stats", id="chat:crashed")
    assert stats["tools"] == []
    assert [(c["name"], c["call_id"]) for c in stats["interrupted"]] == [("deploy", "d1")]
    [result] = [r for r in get_json(client, "/api/session/rows", id="chat:crashed")["rows"]
                if r["kind"] == "tool_result"]
    assert result["interrupted"] is True


def test_rows_name_the_author_of_a_merged_summary(client: TestClient) -> None:
    """The child's summary that a merge wrote into its parent is the researcher's."""
    rows = get_json(client, "/api/session/rows", id="chat:main")["rows"]
    [summary] = [r for r in rows if r["kind"] == "assistant_message"
                 and r["text"].startswith("Research:")]
    assert summary["author"] == "researcher"


def test_integration_records_are_marked(client: TestClient, store: ags.BaseStore) -> None:
    store.get("oa:s").append_many(
        [
            ags.Event.new("openai_agents/item", {"role": "user", "content": "Q"}),
            ags.Event.new("user/message", ags.Message.user("Q")),
            ags.Event.new("myapp/deploy", {"target": "prod"}),
        ]
    )
    rows = get_json(client, "/api/session/rows", id="oa:s")["rows"]
    assert [(r["kind"], r.get("integration")) for r in rows] == [
        ("event", True), ("user_message", None), ("event", False)
    ]


def test_text_with_a_lone_surrogate_is_served(client: TestClient, store: ags.BaseStore) -> None:
    """Stored text may hold a lone surrogate, which UTF-8 cannot carry: the codec escapes it."""
    session = store.get("chat:surrogate")
    session.append(ags.Event.new("user/message", ags.Message.user("bad \udc80 text")))
    call = ags.ToolCall("c1", "t", {"a": "\udc81"})
    session.append(ags.Event.new("assistant/message", ags.Message.assistant(tool_calls=[call])))
    rows = get_json(client, "/api/session/rows", id="chat:surrogate")["rows"]
    assert rows[0]["text"] == "bad \udc80 text"
    messages = get_json(client, "/api/session/messages", id="chat:surrogate")["messages"]
    assert json.loads(messages[1]["tool_calls"][0]["arguments"]) == {"a": "\udc81"}
    raw = client.get("/api/session/event", params={"id": "chat:surrogate", "seq": 1})
    assert raw.status_code == 200 and raw.json()["data"]["parts"][0]["text"] == "bad \udc80 text"


# -- stored text is inert ---------------------------------------------------------------------


class Tags(html.parser.HTMLParser):
    """The tags and attributes of an HTML fragment."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))


SAFE_TAGS = {"p", "strong", "em", "code", "pre", "a", "ul", "ol", "li", "blockquote", "br", "hr",
             "h1", "h2", "h3", "h4", "h5", "h6"}


def assert_inert(fragment: str) -> None:
    parser = Tags()
    parser.feed(fragment)
    for tag, attrs in parser.tags:
        assert tag in SAFE_TAGS, (tag, fragment)
        for name, value in attrs:
            assert not name.startswith("on"), fragment
            if name == "href":
                assert (value or "").startswith(("https://", "http://", "mailto:")), fragment
            else:
                assert name in ("rel", "target"), fragment


def test_xss_payloads_come_back_as_text(client: TestClient, store: ags.BaseStore) -> None:
    listed = get_json(client, "/api/sessions", q="xss:")["sessions"]
    assert [s["id"] for s in listed] == [XSS_ID]
    rows = get_json(client, "/api/session/rows", id=XSS_ID)["rows"]
    fragments = [r["html"] for r in rows if "html" in r]
    assert len(fragments) == 3
    for fragment in fragments:
        assert_inert(fragment)
        assert "<script" not in fragment and "<img" not in fragment and "<svg" not in fragment
        assert "&lt;script&gt;" in fragment or "javascript:" in fragment
    assert 'href="https://example.org/?q=%3Cb%3E"' in fragments[-1]
    # Everything else travels as JSON strings, which the page only ever sets as text.
    assert strip_html(rows) == stored_rows(store, XSS_ID)
    for m in get_json(client, "/api/session/messages", id=XSS_ID)["messages"]:
        assert_inert(m["html"])
    # The pages never carry stored data: the id is not reflected into the HTML.
    page = client.get("/session", params={"id": XSS_ID})
    assert page.headers["content-type"].startswith("text/html")
    assert XSS not in page.text and "xss:" not in page.text


def test_markdown_links_only_to_http_and_mail() -> None:
    from agentsession.web.markdown import is_safe_link, render_markdown

    unsafe = ("javascript:x", "JaVaScRiPt:x", "java\tscript:x", " javascript:x", "vbscript:x",
              "data:text/html,x", "file:///etc/passwd", "/relative", "//host/x")
    for url in unsafe:
        assert not is_safe_link(url), url
        assert "href" not in render_markdown(f"[a]({url})"), url
    for url in ("https://x.org", "http://x.org/a?b", "mailto:a@b.org"):
        assert is_safe_link(url)
        assert "href" in render_markdown(f"[a]({url})")
    assert "<img" not in render_markdown("![alt](https://example.org/pixel.png)")


# -- an encrypted store -----------------------------------------------------------------------


def test_an_encrypted_store_is_served_with_its_key(tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    url = str(tmp_path / "sealed")
    store = ags.open_store(url, passphrase="correct horse")
    store.get("secret:1").append(ags.Event.new("user/message", ags.Message.user("classified")))
    with TestClient(create_app(store, allowed_hosts=["testserver"])) as c:
        assert get_json(c, "/api/sessions")["encrypted"] is True
        assert get_json(c, "/api/badges", id="secret:1")["secret:1"]["encrypted"] is True
        assert get_json(c, "/api/session/rows", id="secret:1")["rows"][0]["text"] == "classified"
    store.close()
    result = CliRunner().invoke(cli, ["--store", url, "serve", "--port", "0"], env={
        "AGENTSESSION_PASSPHRASE": ""})
    assert result.exit_code == 1
    assert "--key-file" in result.output


def test_a_shredded_session_has_no_badges_and_its_page_says_why(tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    store = ags.open_store(str(tmp_path / "sealed"), key=bytes(32))
    for sid in ("kept", "gone"):
        store.get(sid).append(ags.Event.new("user/message", ags.Message.user(sid)))
    store.shred("gone")
    with TestClient(create_app(store, allowed_hosts=["testserver"])) as c:
        badges = get_json(c, "/api/badges", id=["kept", "gone"])
        assert badges["gone"] is None and badges["kept"]["events"] == 1
        response = c.get("/api/session/rows", params={"id": "gone"})
        assert response.status_code >= 400 and "shredded" in response.text
    store.close()


# -- the command ------------------------------------------------------------------------------


def test_serve_without_the_web_extra_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agentsession.cli.serve as cli_serve

    ags.open_store(str(tmp_path / "s")).get("a").append(
        ags.Event.new("user/message", ags.Message.user("x"))
    )
    monkeypatch.setattr(cli_serve, "_module_missing", lambda name: name == "starlette")
    result = CliRunner().invoke(cli, ["--store", str(tmp_path / "s"), "serve"])
    assert result.exit_code == 1
    assert "pip install 'agentsession[web]'" in result.output and "starlette" in result.output


def test_the_core_and_the_command_line_do_not_import_the_viewer() -> None:
    code = (
        "import sys, agentsession, agentsession.cli, agentsession.view;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('starlette', 'uvicorn')"
        " or m.startswith('agentsession.web')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_loopback_and_addresses() -> None:
    for host in ("127.0.0.1", "localhost", "::1", "[::1]", "127.5.0.1"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "192.168.1.4", "example.org"):
        assert not is_loopback(host), host
    assert url_of("127.0.0.1", 8765, None) == "http://127.0.0.1:8765/"
    assert url_of("::1", 80, "abc") == "http://[::1]:80/?token=abc"


def test_a_port_in_use_is_a_usage_error() -> None:
    taken = bind("127.0.0.1", 0)
    try:
        with pytest.raises(ags.UsageError, match="--port"):
            bind("127.0.0.1", taken.getsockname()[1])
    finally:
        taken.close()


def run_serve(args: list[str], store_url: str) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    """``agentsession serve --json`` in a process of its own; its announcement."""
    process = subprocess.Popen(
        [sys.executable, "-m", "agentsession", "serve", "--store", store_url, "--json", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        process.kill()
        raise AssertionError(process.communicate(timeout=10)[1])
    return process, json.loads(line)


def stop(process: subprocess.Popen[str]) -> str:
    process.terminate()
    try:
        return process.communicate(timeout=15)[1]
    except subprocess.TimeoutExpired:
        process.kill()
        return process.communicate(timeout=15)[1]


def test_a_non_loopback_host_gets_a_generated_token(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    ags.open_store(url).get("chat:1").append(ags.Event.new("user/message", ags.Message.user("x")))
    process, announced = run_serve(["--host", "0.0.0.0", "--port", "0"], url)
    try:
        assert announced["token_required"] is True
        token = announced["url"].split("?token=", 1)[1]
        assert len(token) >= 32
        base = f"http://127.0.0.1:{announced['port']}"
        assert httpx.get(f"{base}/api/sessions", timeout=10).status_code == 401
        ok = httpx.get(f"{base}/api/sessions", params={"token": token}, timeout=10)
        assert ok.status_code == 200 and ok.json()["sessions"][0]["id"] == "chat:1"
    finally:
        log = stop(process)
    assert token not in log


def test_serve_on_loopback_needs_no_token_and_takes_one(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    ags.open_store(url).get("chat:1").append(ags.Event.new("user/message", ags.Message.user("x")))
    process, announced = run_serve(["--port", "0"], url)
    try:
        assert announced["token_required"] is False and "token" not in announced["url"]
        assert httpx.get(announced["url"] + "api/sessions", timeout=10).status_code == 200
    finally:
        stop(process)
    process, announced = run_serve(["--port", "0", "--token", "s3cret-token-value"], url)
    try:
        assert announced["url"].endswith("?token=s3cret-token-value")
        base = f"http://127.0.0.1:{announced['port']}"
        assert httpx.get(f"{base}/api/sessions", timeout=10).status_code == 401
    finally:
        stop(process)


def test_serve_debug_logs_requests_on_stderr_without_the_token(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    ags.open_store(url).get("chat:1").append(ags.Event.new("user/message", ags.Message.user("x")))
    process = subprocess.Popen(
        [sys.executable, "-m", "agentsession", "--debug", "serve", "--store", url, "--json",
         "--port", "0", "--token", SECRET],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert process.stdout is not None
        announced = json.loads(process.stdout.readline())
        base = f"http://127.0.0.1:{announced['port']}"
        with httpx.Client(base_url=base, timeout=10) as http:
            for spelling in TOKEN_SPELLINGS:
                for path in ("/api/sessions?{}", "/stream/{}"):
                    http.get(path.format(spelling))
            # The event stream, with the token in its query string and in its path.
            for path in (f"/stream/?id=chat:1&after=0&token={SECRET}",
                         f"/stream/?id=chat:1&after=0&tok%65n={SECRET}",
                         f"/stream/token={SECRET}?id=chat:1"):
                with http.stream("GET", path) as response:
                    if response.status_code == 200:
                        next(response.iter_lines())
            http.get("/api/sessions", headers={"Authorization": f"Bearer {SECRET}"})
    finally:
        process.terminate()
        try:
            out, err = process.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate(timeout=15)
    # stdout holds the one JSON object and nothing else; the access log went to stderr.
    assert out == ""
    gets = err.count('"GET /api/sessions') + err.count('"GET /stream')
    assert gets >= 2 * len(TOKEN_SPELLINGS) + 4, err
    assert SECRET not in err and escaped(SECRET) not in err.lower(), err
    assert "token=…" in err


# -- the live tail ----------------------------------------------------------------------------


class Server:
    """uvicorn serving ``app`` on a free loopback port, in a thread."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.sock = bind("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


def append_from_another_process(store_url: str, session_id: str, text: str) -> None:
    code = textwrap.dedent(
        f"""
        import agentsession as ags
        store = ags.open_store({store_url!r})
        session = store.get({session_id!r})
        with session.turn(agent="other") as turn:
            turn.user({text!r})
        store.close()
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=str(ROOT))


def say(store: ags.BaseStore, session_id: str, texts: list[str]) -> None:
    """One turn with a user message for each of ``texts`` (three events each)."""
    session = store.get(session_id)
    for text in texts:
        with session.turn(agent="coder") as turn:
            turn.user(text)


def create_again_from_another_process(store_url: str, session_id: str, texts: list[str]) -> None:
    """Delete the session and create it again with a turn for each of ``texts``, in another
    process."""
    code = textwrap.dedent(
        f"""
        import agentsession as ags
        store = ags.open_store({store_url!r})
        store.delete({session_id!r})
        session = store.get({session_id!r})
        for text in {texts!r}:
            with session.turn(agent="other") as turn:
                turn.user(text)
        store.close()
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=str(ROOT))


def read_events(
    lines: Iterator[str], until: Any, timeout: float = 20
) -> list[tuple[str, str, Any]]:
    """The ``(event, id, data)`` of an event stream (``response.iter_lines()``, which can be
    iterated once) until ``until(events so far)`` holds."""
    got: list[tuple[str, str, Any]] = []
    deadline = time.monotonic() + timeout
    event = ident = ""
    for line in lines:
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("id: "):
            ident = line[4:]
        elif line.startswith("data: "):
            got.append((event, ident, json.loads(line[6:])))
            if until(got):
                return got
        assert time.monotonic() < deadline, got
    return got


def rows_of(got: list[tuple[str, str, Any]]) -> list[dict[str, Any]]:
    """The rows of the ``row`` messages of ``read_events``' result."""
    return [data for event, _, data in got if event == "row"]


def wait_for_streams(app: Any, count: int) -> None:
    """Until the viewer's stream app has ``count`` streams open."""
    deadline = time.monotonic() + 10
    while app.state.stream.state.active_streams != count:
        assert time.monotonic() < deadline, app.state.stream.state.active_streams
        time.sleep(0.02)


def test_the_live_tail_streams_what_another_process_appends(
    store: ags.BaseStore, store_url: str
) -> None:
    app = create_app(store)
    latest = store.open("chat:main").latest_seq
    with Server(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        with http.stream("GET", "/stream/",
                         params={"id": "chat:main", "after": latest}) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
            wait_for_streams(app, 1)
            append_from_another_process(store_url, "chat:main", "appended <b>elsewhere</b>")
            got = read_events(response.iter_lines(),
                              lambda got: any(r["kind"] == "turn_end" for r in rows_of(got)))
        assert got[0][0] == "start" and got[0][2]["after"] == latest
        rows = rows_of(got)
        assert [r["kind"] for r in rows] == ["turn_start", "user_message", "turn_end"]
        assert [int(ident) for event, ident, _ in got if event == "row"] == [
            latest + 1, latest + 2, latest + 3
        ]
        assert rows[1]["text"] == "appended <b>elsewhere</b>"
        assert "&lt;b&gt;" in rows[1]["html"]
        assert strip_html([{k: v for k, v in r.items() if k != "mark"} for r in rows]) == (
            stored_rows(store, "chat:main")[latest:]
        )
        # The stream ends when the client goes.
        wait_for_streams(app, 0)
        # A reconnecting EventSource resumes after the last id it saw.
        with http.stream("GET", "/stream/", params={"id": "chat:main", "after": 0},
                         headers={"Last-Event-ID": str(latest + 1)}) as response:
            resumed = rows_of(read_events(response.iter_lines(),
                                          lambda got: len(rows_of(got)) >= 2))
        assert [r["seq"] for r in resumed][:2] == [latest + 2, latest + 3]
        assert resumed[0]["depth"] == 1  # nested in the turn begun before the resume point


@pytest.mark.parametrize("turns", [1, 5])
def test_the_live_tail_resets_on_a_session_created_again(
    store: ags.BaseStore, store_url: str, turns: int
) -> None:
    sid = "live:again"
    say(store, sid, ["old 1", "old 2"])
    app = create_app(store)
    with Server(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        summary = http.get("/api/session", params={"id": sid}).json()
        old = {"id": sid, "after": summary["latest_seq"]}
        with http.stream("GET", "/stream/", params=old) as response:
            wait_for_streams(app, 1)
            create_again_from_another_process(store_url, sid, [f"new {n}" for n in range(turns)])
            got = read_events(response.iter_lines(),
                              lambda got: any(e == "reset" for e, _, _ in got))
        # No row of the new life came before the reset, and the stream ended with it.
        assert [e for e, _, _ in got] == ["start", "reset"]
        assert got[0][2]["mark"] == summary["latest_mark"]
        assert got[1][2] == {"first_seq": 1}
        wait_for_streams(app, 0)
        # A reader that comes back with the old life's position learns it from the start
        # message's mark: not the mark it saw there.
        for params, headers in ((old, {}), ({"id": sid}, {"Last-Event-ID": str(old["after"])})):
            with http.stream("GET", "/stream/", params=params, headers=headers) as response:
                again = read_events(response.iter_lines(), lambda got: len(got) >= 1)
            assert again[0][0] == "start"
            assert again[0][2]["after"] == old["after"]
            assert again[0][2]["mark"] != summary["latest_mark"]


def test_the_live_tail_needs_the_token_too(store: ags.BaseStore) -> None:
    token = "stream-token-" + "z" * 20
    app = create_app(store, token=token)
    with Server(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        refused = http.get("/stream/", params={"id": "chat:main"})
        assert refused.status_code == 401 and token not in refused.text
        with http.stream("GET", "/stream/",
                         params={"id": "chat:main", "after": 0, "token": token}) as response:
            assert response.status_code == 200
            rows = rows_of(read_events(response.iter_lines(), lambda got: len(rows_of(got)) >= 1))
        assert rows[0]["seq"] == 1


# -- packaging --------------------------------------------------------------------------------


def test_the_wheel_ships_the_static_files_and_the_web_extra(tmp_path: Path) -> None:
    pytest.importorskip("hatchling")
    import zipfile

    code = (
        "import hatchling.build as b, sys; "
        f"print(b.build_wheel({str(tmp_path)!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=180, cwd=str(ROOT), check=True)
    wheel = tmp_path / out.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = archive.read(metadata).decode()
    for name in ("index.html", "session.html", "app.js", "app.css", "icon.svg"):
        assert f"agentsession/web/static/{name}" in names, name
    assert "Provides-Extra: web" in meta
    for requirement in ("starlette", "uvicorn", "markdown-it-py"):
        assert any(
            line.startswith(f"Requires-Dist: {requirement}") and "extra == 'web'" in line
            for line in meta.splitlines()
        ), requirement



# -- reading writes nothing -------------------------------------------------------------------

READ_ENDPOINTS = [
    ("/api/sessions", {}),
    ("/api/badges", {"id": "chat:open"}),
    ("/api/session", {"id": "chat:open"}),
    ("/api/session/rows", {"id": "chat:open"}),
    ("/api/session/messages", {"id": "chat:open"}),
    ("/api/session/event", {"id": "chat:open", "seq": "1"}),
    ("/api/session/stats", {"id": "chat:open"}),
]
TORN = b'{"seq":99,"type":"user/message","da'


@pytest.mark.parametrize(("path", "params"), READ_ENDPOINTS, ids=[p for p, _ in READ_ENDPOINTS])
def test_a_read_endpoint_leaves_a_torn_jsonl_store_byte_identical(
    tmp_path: Path, path: str, params: dict[str, str]
) -> None:
    url = str(tmp_path / "store")
    filled = ags.open_store(url)
    populate(filled)
    latest = filled.open("chat:open").latest_seq
    log = Path(filled.open("chat:open").location)
    filled.close()
    with log.open("ab") as f:
        f.write(TORN)
    store = ags.open_store(url, create=False)  # as serve opens it
    try:
        before = tree_snapshot(tmp_path / "store")
        with TestClient(create_app(store, allowed_hosts=["testserver"], listing_ttl=0)) as c:
            found = get_json(c, path, **params)
        assert tree_snapshot(tmp_path / "store") == before
    finally:
        store.close()
    if path == "/api/session":
        assert found["latest_seq"] == latest  # the torn line is not an event
    if path == "/api/badges":
        assert found["chat:open"]["events"] == latest


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
@pytest.mark.parametrize("how", ["mount", "user"])
def test_the_viewer_serves_a_read_only_store(how: str, backend: str) -> None:
    with shared_tmp() as base:
        store_dir = base / "store"
        url = str(store_dir) if backend == "jsonl" else f"sqlite:///{store_dir / 's.db'}"
        filled = ags.open_store(url)
        populate(filled)
        log = Path(filled.open("chat:open").location)
        filled.close()
        if backend == "jsonl":
            with log.open("ab") as f:
                f.write(TORN)
        make_read_only(how, store_dir)
        before = tree_snapshot(store_dir)
        process = subprocess.Popen(
            [*read_only_runner(how, store_dir), sys.executable, "-m", "agentsession",
             "serve", "--store", url, "--json", "--port", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(SRC)},
        )
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line, process.communicate(timeout=15)[1]
            base_url = f"http://127.0.0.1:{json.loads(line)['port']}"
            for path, params in READ_ENDPOINTS:
                response = httpx.get(base_url + path, params=params, timeout=30)
                assert response.status_code == 200, (path, response.text)
            listed = httpx.get(base_url + "/api/sessions", timeout=30).json()["sessions"]
            assert "chat:open" in {row["id"] for row in listed}
        finally:
            log_text = stop(process)
        assert "Traceback" not in log_text, log_text
        assert tree_snapshot(store_dir) == before


def test_rewound_rows_are_marked_and_the_model_view_leaves_them_out(
    client: TestClient, store: ags.BaseStore
) -> None:
    session = store.get("chat:rewound")
    for i in range(3):  # turns at seqs 1-4, 5-8, 9-12
        with session.turn(agent="coder") as turn:
            turn.user(f"question {i}")
            turn.assistant(f"answer {i}")
    session.rewind(to_turn=6, reason="wrong path")  # 13: back to seq 8
    with session.retry(agent="coder") as turn:  # 14: back to seq 4; the turn 15-18
        turn.assistant("answer 1 again")
    rows = get_json(client, "/api/session/rows", id="chat:rewound")["rows"]
    assert strip_html(rows) == stored_rows(store, "chat:rewound")
    assert [row["seq"] for row in rows if row["rewound"]] == [*range(5, 14)]
    markers = [row for row in rows if row["kind"] == "rewind"]
    assert [(m["seq"], m["rewind_kind"], m["to_seq"], m["reason"]) for m in markers] == [
        (13, "rewind", 8, "wrong path"),
        (14, "retry", 4, ""),
    ]
    # A page is marked as the log stood at its last event; the page greys earlier ones again.
    first = get_json(client, "/api/session/rows", id="chat:rewound", limit=12)["rows"]
    assert not any(row["rewound"] for row in first)
    last = get_json(client, "/api/session/rows", id="chat:rewound", after=12, limit=6)["rows"]
    assert [(row["seq"], row["rewound"]) for row in last[:2]] == [(13, True), (14, False)]
    # What the model sees: the history after the rewinds, nothing of the rewound turns.
    page = get_json(client, "/api/session/messages", id="chat:rewound")
    assert [m["text"] for m in page["messages"]] == [
        "question 0",
        "answer 0",
        "question 1",
        "answer 1 again",
    ]
    stats = get_json(client, "/api/session/stats", id="chat:rewound")
    assert len(stats["turns"]) == 4  # every turn ran, rewound or not
