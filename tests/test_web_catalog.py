"""The viewer's catalog endpoints (``/api/store``, ``/api/catalog``, ``/api/search``) through
starlette's TestClient, compared with the library's answers on the same store: a memory store
(its catalog is the reference), and a JSONL directory once that backend keeps a catalog index
(skipped until then, saying so). The page that uses them is driven in a real browser by
``tests/test_web_catalog_browser.py``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the viewer needs the web extra")

from starlette.testclient import TestClient

import agentsession as ags
from agentsession.backends.memory import MemoryStore
from agentsession.web import catalog as web_catalog
from agentsession.web import create_app

from .catalog_store import fill, jsonl_keeps_an_index, shared_factory


@pytest.fixture
def store() -> Iterator[ags.BaseStore]:
    opened = MemoryStore()
    fill(opened)
    yield opened
    opened.close()


@pytest.fixture
def client(store: ags.BaseStore) -> Iterator[TestClient]:
    with TestClient(create_app(store), base_url="http://127.0.0.1") as test_client:
        yield test_client


def get(client: TestClient, path: str, expect: int = 200, **params: Any) -> Any:
    response = client.get(path, params=params)
    assert response.status_code == expect, response.text
    return response.json()


def test_the_store_says_what_the_page_can_offer(client: TestClient) -> None:
    assert get(client, "/api/store") == {
        "store": "memory:", "encrypted": False, "catalog": True, "searchable": True,
    }
    for options, catalog, searchable in (
        ({"searchable": False}, True, False),
        ({"catalog": False}, False, False),
    ):
        other = MemoryStore(**options)
        assert web_catalog.store_features(other) == web_catalog.StoreFeatures(
            store="memory:", encrypted=False, catalog=catalog, searchable=searchable
        )
        other.close()
    bare = shared_factory(index=False)("x:")
    assert web_catalog.store_features(bare).catalog is False
    bare.close()


def test_the_catalog_pages_by_cursor_through_every_session_once(
    client: TestClient, store: ags.BaseStore
) -> None:
    seen: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 5}
    pages = 0
    while True:
        page = get(client, "/api/catalog", **params)
        seen += page["sessions"]
        pages += 1
        if page["next_cursor"] is None:
            break
        params["cursor"] = page["next_cursor"]
    infos = store.list(where={})
    assert [s["id"] for s in seen] == [i.id for i in infos] and pages == 3
    first, info = seen[-1], infos[-1]
    assert first["title"] == info.title == "The first session"
    assert (first["events"], first["messages"], first["turns"]) == (
        info.last_seq, info.messages, info.turns,
    )
    assert first["tags"] == ["billing"] and first["tenant"] == "acme"
    assert first["usage"]["input_tokens"] == 100 and first["agents"] == ["writer"]
    assert {s["status"] for s in seen} == {"idle", "needs_recovery"}


FILTERS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"tenant": "acme"}, {"tenant": "acme"}),
    ({"tenant": "acme", "tag": "billing"}, {"tenant": "acme", "tags": ["billing"]}),
    ({"tag": ["billing", "ops"]}, {"tags": ["billing", "ops"]}),
    ({"user": "u1", "agent": "coder"}, {"user": "u1", "agent": "coder"}),
    ({"status": "needs_recovery"}, {"status": "needs_recovery"}),
    ({"status": "idle", "tenant": ""}, {"status": "idle"}),
]


@pytest.mark.parametrize(("params", "where"), FILTERS)
def test_the_catalog_filters_as_the_library_does(
    client: TestClient, store: ags.BaseStore, params: dict[str, Any], where: dict[str, Any]
) -> None:
    page = get(client, "/api/catalog", **params)
    assert [s["id"] for s in page["sessions"]] == [i.id for i in store.list(where=where)]


def test_id_contains_reads_on_until_the_page_is_full(
    client: TestClient, store: ags.BaseStore
) -> None:
    for n in range(250):  # more than one scan of the listing between two matches
        store.get(f"filler:{n:03d}").append(ags.Event.new("user/message", ags.Message.user("x")))
    expected = [i.id for i in store.list(where={}) if "1" in i.id]
    seen: list[str] = []
    params: dict[str, Any] = {"q": "1", "limit": 7}
    while True:
        page = get(client, "/api/catalog", **params)
        assert len(page["sessions"]) <= 7
        seen += [s["id"] for s in page["sessions"]]
        if page["next_cursor"] is None:
            break
        params["cursor"] = page["next_cursor"]
    assert seen == expected
    tenant = get(client, "/api/catalog", q="chat:0", tenant="globex")
    assert [s["id"] for s in tenant["sessions"]] == [
        i.id for i in store.list(where={"tenant": "globex"}) if "chat:0" in i.id
    ]


def test_bad_catalog_parameters_are_400_with_the_reason(client: TestClient) -> None:
    assert "unknown status 'asleep'" in get(client, "/api/catalog", 400, status="asleep")["error"]
    assert "cursor" in get(client, "/api/catalog", 400, cursor="nonsense!")["error"]
    assert get(client, "/api/catalog", 400, limit=0)["error"]
    assert "missing" in get(client, "/api/search", 400, q=" ")["error"]
    assert "no words" in get(client, "/api/search", 400, q="...")["error"]
    assert "live" in get(client, "/api/search", 400, q="deploy", status="live")["error"]


def test_search_hits_and_their_pages_are_the_librarys(
    client: TestClient, store: ags.BaseStore
) -> None:
    page = get(client, "/api/search", q="deploy production")
    assert page["query"] == "deploy production"
    hits = store.search("deploy production")
    assert [(h["session_id"], h["seq"], h["role"], h["snippet"]) for h in page["hits"]] == [
        (h.session_id, h.seq, h.role, h.snippet) for h in hits
    ]
    assert set(page["hits"][0]) == {
        "session_id", "seq", "role", "snippet", "rank", "rewound", "compacted",
    }
    seen: list[tuple[str, int]] = []
    params: dict[str, Any] = {"q": "deploy", "limit": 4}
    while True:
        found = get(client, "/api/search", **params)
        seen += [(h["session_id"], h["seq"]) for h in found["hits"]]
        if found["next_cursor"] is None:
            break
        params["cursor"] = found["next_cursor"]
    assert seen == [(h.session_id, h.seq) for h in store.search("deploy", limit=200)]
    filtered = get(client, "/api/search", q="invoice", tenant="globex", tag="ops")
    assert [h["session_id"] for h in filtered["hits"]] == [
        h.session_id for h in store.search("invoice", where={"tenant": "globex", "tags": ["ops"]})
    ]
    one = get(client, "/api/search", q="build", session="chat:04")
    assert {h["session_id"] for h in one["hits"]} == {"chat:04"} and len(one["hits"]) == 2


def test_a_store_without_a_catalog_index_refuses_with_the_reason() -> None:
    bare = shared_factory(index=False)("x:")
    bare.get("a").append(ags.Event.new("user/message", ags.Message.user("deploy")))
    with TestClient(create_app(bare), base_url="http://127.0.0.1") as test_client:
        assert get(test_client, "/api/store")["catalog"] is False
        assert "keeps no catalog index" in get(test_client, "/api/catalog", 400)["error"]
        assert "keeps no catalog index" in get(test_client, "/api/search", 400, q="x")["error"]
        assert [s["id"] for s in get(test_client, "/api/sessions")["sessions"]] == ["a"]
    bare.close()


def test_an_encrypted_store_is_filtered_and_searched_through_its_sealed_index() -> None:
    sealed = MemoryStore(passphrase="correct horse")
    fill(sealed, count=4)
    with TestClient(create_app(sealed), base_url="http://127.0.0.1") as test_client:
        assert get(test_client, "/api/store")["encrypted"] is True
        page = get(test_client, "/api/catalog", tenant="globex")
        assert [(s["id"], s["tenant"]) for s in page["sessions"]] == [
            ("chat:03", "globex"), ("chat:01", "globex"),
        ]
        hits = get(test_client, "/api/search", q="Deploy production", tenant="globex")["hits"]
        assert [h["snippet"] for h in hits] == [
            "Please [deploy] build 1 to [production]", "Please [deploy] build 3 to [production]",
        ]
    sealed.close()


def test_the_pages_have_the_catalog_controls_and_no_inline_style() -> None:
    from agentsession.web.app import STATIC_DIR

    index = (STATIC_DIR / "index.html").read_text()
    for control in ('id="status"', 'id="tag"', 'id="tenant"', 'id="user"', 'id="search"',
                    'id="more-sessions"', 'id="hits"'):
        assert control in index, control
    assert "style=" not in index and "<script>" not in index


def test_jsonl_catalog_and_search_endpoints(tmp_path: Path) -> None:
    if not jsonl_keeps_an_index(tmp_path):
        pytest.skip("the JSONL backend keeps no catalog index yet (runs once it does)")
    store = ags.open_store(tmp_path / "store")
    fill(store)
    try:
        with TestClient(create_app(store), base_url="http://127.0.0.1") as test_client:
            assert get(test_client, "/api/store")["catalog"] is True
            page = get(test_client, "/api/catalog", tenant="acme", tag="billing")
            where = {"tenant": "acme", "tags": ["billing"]}
            assert [s["id"] for s in page["sessions"]] == [i.id for i in store.list(where=where)]
            hits = get(test_client, "/api/search", q="deploy production")["hits"]
            assert [h["session_id"] for h in hits] == [
                h.session_id for h in store.search("deploy production")
            ]
    finally:
        store.close()
