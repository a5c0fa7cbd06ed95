"""The catalog and search as the store offers them (the memory backend, the reference)."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentsession as ags
import agentsession.aio
from agentsession.errors import UsageError
from agentsession.events import Usage
from agentsession.listing import Page, Price, change_of, words
from agentsession.recovery import recover_store

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def clock_from(start: dt.datetime) -> tuple[list[dt.datetime], object]:
    now = [start]

    def clock() -> dt.datetime:
        now[0] += dt.timedelta(seconds=1)
        return now[0]

    return now, clock


def chat(store: ags.BaseStore, sid: str, text: str, *, agent: str = "bot") -> None:
    with store.get(sid).turn(agent=agent) as turn:
        turn.user(text)
        turn.assistant(f"reply to {text}")


@pytest.fixture
def store() -> ags.BaseStore:
    _, clock = clock_from(T0)
    return ags.open_store("memory:", clock=clock)  # type: ignore[arg-type]


def test_rows_are_kept_as_the_store_appends(store: ags.BaseStore) -> None:
    chat(store, "a", "  Where   is my\nparcel?  ")
    store.get("a").append(
        ags.Event.new("usage", Usage(input_tokens=10, output_tokens=5, cache_read_tokens=4))
    )
    chat(store, "a", "second question", agent="helper")
    [info] = store.list()
    assert (info.title, info.messages, info.turns, info.status) == (
        "Where is my parcel?",
        4,
        2,
        "idle",
    )
    assert info.agents == ("bot", "helper")
    assert (info.usage.input_tokens, info.usage.output_tokens) == (10, 5)
    assert info.usage.cache_read_tokens == 4 and info.usage.cost == 0.0
    assert info.last_seq == store.get("a").latest_seq
    long = "word " * 40
    chat(store, "b", long)
    title = store.list(where={"id": "b"})[0].title
    assert len(title) <= 80 and title.endswith("…") and title.startswith("word word")


def test_update_sets_fields_and_an_explicit_title_wins(store: ags.BaseStore) -> None:
    chat(store, "a", "first words")
    record = store.get("a").update(title="Billing", tags=["x", "y", "x"], user="u", tenant="t")
    assert (record.title, record.tags, record.user, record.tenant) == (
        "Billing",
        ("x", "y"),
        "u",
        "t",
    )
    chat(store, "a", "more words")
    [info] = store.list()
    assert (info.title, info.tags, info.user, info.tenant) == ("Billing", ("x", "y"), "u", "t")
    with pytest.raises(UsageError, match="list of tags"):
        store.get("a").update(tags="x")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="non-blank"):
        store.get("a").update(tags=[" "])


def test_the_user_comes_from_the_first_event_that_names_one(store: ags.BaseStore) -> None:
    session = store.get("a")
    session.append(ags.Event.new("user/message", ags.Message.user("hi"), user="alice"))
    session.append(ags.Event.new("user/message", ags.Message.user("hi"), user="bob"))
    assert store.list()[0].user == "alice"
    assert [s.id for s in store.list(where={"user": ["bob", "alice"]})] == ["a"]


def test_where_filters_and_rejects_what_it_does_not_know(store: ags.BaseStore) -> None:
    for n in range(6):
        chat(store, f"s{n}", f"hello {n}", agent="bot" if n % 2 else "other")
        store.get(f"s{n}").update(tenant="acme" if n < 3 else "globex", tags=[f"t{n % 3}"])
    assert [s.id for s in store.list(where={"tenant": "acme"})] == ["s2", "s1", "s0"]
    assert [s.id for s in store.list(where={"tenant": "acme", "agent": "bot"})] == ["s1"]
    assert [s.id for s in store.list(where={"tag": "t1"})] == ["s4", "s1"]
    assert store.list(where={"tags": ["t1", "t2"]}) == []
    middle = store.list(where={"id": "s2"})[0].updated_at
    assert middle is not None
    newer = store.list(where={"updated": (middle, None)})
    assert [s.id for s in newer] == ["s5", "s4", "s3", "s2"]
    assert [s.id for s in store.list(where={"updated": (None, middle)})] == ["s1", "s0"]
    assert [s.id for s in store.list(where={"title": "HELLO 4"})] == ["s4"]
    assert [s.id for s in store.list(order="id", limit=2)] == ["s0", "s1"]
    for bad, message in [
        ({"colour": "red"}, "unknown field 'colour'"),
        ({"status": "sleeping"}, "unknown status 'sleeping'"),
        ({"tenant": 3}, "takes a string"),
        ({"updated": "2026-01-01"}, "pair"),
        ({"updated": ("yesterday", None)}, "ISO 8601"),
        ({"user": []}, "matches nothing"),
    ]:
        with pytest.raises(UsageError, match=message):
            store.list(where=bad)
    with pytest.raises(UsageError, match="order must be one of"):
        store.list(order="size")
    with pytest.raises(UsageError, match="cursor or an offset"):
        store.list(limit=1, offset=1, cursor=store.list(limit=1).next_cursor)


def test_a_cursor_continues_where_its_page_ended_and_is_tied_to_its_order(
    store: ags.BaseStore,
) -> None:
    for n in range(5):
        chat(store, f"s{n}", "x")
    first = store.list(limit=2)
    assert isinstance(first, Page) and isinstance(first, list)
    assert [s.id for s in first] == ["s4", "s3"] and first.next_cursor
    chat(store, "s0", "moves to the front")  # appended meanwhile: not repeated, not skipped
    second = store.list(limit=2, cursor=first.next_cursor)
    assert [s.id for s in second] == ["s2", "s1"] and second.next_cursor is None
    with pytest.raises(UsageError, match="another listing or order"):
        store.list(order="created", cursor=first.next_cursor)
    with pytest.raises(UsageError, match="not one this store made"):
        store.list(cursor="garbage!")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sessions=st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=30),
    limit=st.integers(1, 4),
    order=st.sampled_from(["updated", "created", "id"]),
)
def test_paging_with_cursors_lists_every_session_once(
    sessions: list[str], limit: int, order: str
) -> None:
    _, clock = clock_from(T0)
    store = ags.open_store("memory:", clock=clock)  # type: ignore[arg-type]
    for sid in sessions:
        store.get(sid).append(ags.Event.new("user/message", ags.Message.user("x")))
    seen: list[str] = []
    cursor = None
    while True:
        page = store.list(limit=limit, order=order, cursor=cursor)
        seen += [s.id for s in page]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == [s.id for s in store.list(order=order)]
    assert sorted(seen) == sorted(set(sessions))


def test_status_tells_a_running_turn_from_one_that_needs_recovery(store: ags.BaseStore) -> None:
    chat(store, "done", "x")
    crashed = store.get("crashed")
    crashed.append(ags.Event.new("turn/start", {}))  # its process died here
    running = store.get("running")
    lease = store.lock("running")
    try:
        running.append(ags.Event.new("turn/start", {}))
        statuses = {s.id: s.status for s in store.list()}
        assert statuses == {"done": "idle", "crashed": "needs_recovery", "running": "live"}
        assert [s.id for s in store.list(where={"status": "needs_recovery"})] == ["crashed"]
        assert [s.id for s in store.list(where={"status": ["live", "idle"]})] == ["running", "done"]
    finally:
        lease.release()
    recover_store(store)
    assert [s.status for s in store.list(where={"id": "crashed"})] == ["idle"]


def test_search_finds_every_word_in_messages_tool_calls_and_results(store: ags.BaseStore) -> None:
    session = store.get("a")
    with session.turn(agent="bot") as turn:
        turn.user("Find the Café near Zürich")
        call = ags.ToolCall(id="c1", name="maps_lookup", arguments={"city": "Zürich"})
        turn.assistant("", tool_calls=[call])
        turn.tool_result("c1", "maps_lookup", "Café Odeon, Limmatquai 2")
        turn.assistant("Café Odeon it is.")
    chat(store, "b", "nothing about it")
    hits = store.search("cafe zurich")
    assert [(h.session_id, h.seq, h.role) for h in hits] == [("a", 2, "user")]
    assert hits[0].snippet == "Find the [Café] near [Zürich]"
    assert [h.seq for h in store.search("maps_lookup")] == [3, 4]  # the call, its result
    assert {h.seq for h in store.search("limmatquai")} == {4}
    assert {h.seq for h in store.search("odeon")} == {4, 5}
    assert store.search("odeon", session_id="b") == []
    with pytest.raises(UsageError, match="no words"):
        store.search("  ?! ")


def test_search_pages_with_a_cursor(store: ags.BaseStore) -> None:
    for n in range(7):
        chat(store, f"s{n}", "needle in a haystack")
    seen = []
    cursor = None
    while True:
        page = store.search("needle", limit=3, cursor=cursor)
        seen += [(h.session_id, h.seq) for h in page]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    # The user message and the reply quoting it, in each session: each hit once.
    assert sorted(seen) == sorted({(f"s{n}", seq) for n in range(7) for seq in (2, 3)})


def test_rewound_and_compacted_hits_are_flagged(store: ags.BaseStore) -> None:
    session = store.get("a")
    chat(store, "a", "alpha topic")
    chat(store, "a", "beta topic")
    session.rewind(to_seq=4)  # after the first turn: the second turn is rewound
    flags = {h.seq: (h.rewound, h.compacted) for h in store.search("topic")}
    assert flags == {2: (False, False), 3: (False, False), 6: (True, False), 7: (True, False)}
    chat(store, "a", "gamma topic")
    session.compact(ags.Message.assistant("summary"), keep_turns=1)
    flags = {h.seq: (h.rewound, h.compacted) for h in store.search("topic")}
    assert flags[2] == (False, True) and flags[11] == (False, False)


def test_totals_group_usage_by_tenant_user_agent_and_day() -> None:
    now, clock = clock_from(T0)
    store = ags.open_store("memory:", clock=clock)  # type: ignore[arg-type]
    store.set_prices({"m": Price(input=1.0, output=2.0), "*": {"input": 10.0}})
    for sid, tenant, agent in [("a", "acme", "bot"), ("b", "acme", "helper"), ("c", "", "bot")]:
        session = store.get(sid)
        session.append(ags.Event.new("user/message", ags.Message.user("hi")))
        session.update(tenant=tenant)
        session.append(ags.Event.new("usage", Usage(input_tokens=1000, model="m"), agent=agent))
        now[0] += dt.timedelta(days=1)
        session.append(ags.Event.new("usage", Usage(output_tokens=1000, model="?"), agent=agent))
        session.append(ags.Event.new("usage", Usage(input_tokens=1, cost=0.5), agent=agent))
    tenants = {t.key: t for t in store.totals()}
    assert set(tenants) == {"acme", ""}
    assert (tenants["acme"].sessions, tenants["acme"].calls) == (2, 6)
    assert tenants["acme"].usage.input_tokens == 2002
    # 1000 input tokens at 1.0/M, 1000 output at "*" (no output price), two costs of 0.5
    assert tenants["acme"].usage.cost == pytest.approx(2 * (0.001 + 0.5))
    agents = {t.key: t.sessions for t in store.totals(group_by="agent")}
    assert agents == {"bot": 2, "helper": 1}
    days = [t.key for t in store.totals(group_by="day")]
    assert days == sorted(days) and len(days) >= 2
    first_day = T0.date() + dt.timedelta(days=1)
    only_later = store.totals(group_by="day", since=first_day + dt.timedelta(days=1))
    assert all(t.key > first_day.isoformat() for t in only_later)
    assert store.totals(where={"tenant": "acme"}, group_by="user")[0].sessions == 2
    with pytest.raises(UsageError, match="group_by must be one of"):
        store.totals(group_by="model")
    with pytest.raises(UsageError, match="Price"):
        store.set_prices({"m": 3})  # type: ignore[dict-item]


def test_delete_and_shred_leave_nothing_searchable() -> None:
    store = ags.open_store("memory:", passphrase="pw")
    chat(store, "a", "secret plans")
    chat(store, "b", "secret recipes")
    store.get("b").update(title="Recipes", tenant="acme", tags=["food"])
    store.delete("a")
    assert {h.session_id for h in store.search("secret")} == {"b"}
    store.shred("b")
    assert store.search("secret") == []
    [info] = store.list()
    assert (info.status, info.title, info.tenant, info.tags) == ("shredded", "", "", ())
    assert store.list(where={"status": "shredded"})[0].id == "b"


def test_an_encrypted_store_indexes_no_plaintext_and_still_finds() -> None:
    store = ags.open_store("memory:", passphrase="pw")
    chat(store, "a", "Confidential merger with Initech")
    store.get("a").update(
        tenant="acmecorp", tags=["dealroom"], user="chiefexec", title="Project Falcon"
    )
    index = store._index
    assert index is not None
    dump = repr(index.rows) + repr(index.documents) + repr(index.usage)  # type: ignore[attr-defined]
    for secret in (
        "Confidential",
        "merger",
        "initech",
        "acmecorp",
        "dealroom",
        "chiefexec",
        "Falcon",
    ):
        assert secret.lower() not in dump.lower(), secret
    [info] = store.list(where={"tenant": "acmecorp", "tag": "dealroom", "user": "chiefexec"})
    assert (info.title, info.tenant, info.tags, info.user) == (
        "Project Falcon",
        "acmecorp",
        ("dealroom",),
        "chiefexec",
    )
    [hit, _reply] = sorted(store.search("initech merger"), key=lambda h: h.seq)
    assert hit.snippet == "Confidential [merger] with [Initech]"
    with pytest.raises(UsageError, match="titles in clear"):
        store.list(where={"title": "Falcon"})
    # Another store object with the same key matches the same tokens.
    assert store.list(where={"tenant": "globex"}) == []


def test_searchable_false_and_catalog_false() -> None:
    unsearchable = ags.open_store("memory:", searchable=False)
    chat(unsearchable, "a", "hello")
    assert unsearchable.list(where={"status": "idle"})[0].messages == 2
    with pytest.raises(UsageError, match="searchable=False"):
        unsearchable.search("hello")
    bare = ags.open_store("memory:", catalog=False)
    chat(bare, "a", "hello")
    assert [s.id for s in bare.list()] == ["a"]  # the plain listing still works
    with pytest.raises(UsageError, match="catalog=False"):
        bare.list(where={"status": "idle"})


def test_reindex_rebuilds_rows_and_prices_earlier_usage(store: ags.BaseStore) -> None:
    session = store.get("a")
    session.append(ags.Event.new("user/message", ags.Message.user("hello there")))
    session.append(ags.Event.new("usage", Usage(input_tokens=1_000_000, model="m")))
    session.update(tags=["kept"])
    assert store.list()[0].usage.cost == 0.0
    store.set_prices({"m": Price(input=3.0)})
    assert store.reindex() == 1
    [info] = store.list()
    assert info.usage.cost == pytest.approx(3.0) and info.tags == ("kept",)
    assert info.title == "hello there" and [h.seq for h in store.search("hello")] == [1]
    with pytest.raises(UsageError, match="not one string"):
        store.reindex("a")


def test_concurrent_appends_keep_exact_counts(store: ags.BaseStore) -> None:
    def worker(n: int) -> None:
        for _ in range(50):
            store.get("shared").append(ags.Event.new("user/message", ags.Message.user(f"w{n}")))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    [info] = store.list()
    assert info.messages == 200 and info.last_seq == 200


def test_change_of_counts_what_it_cannot_decode_without_indexing_it() -> None:
    bad = ags.Event(seq=1, type="user/message", data=ags.events.msgspec.Raw(b'{"x":1}'))
    change = change_of([bad])
    assert (change.messages, change.documents, change.title) == (1, (), "")


def test_words_normalise_like_the_indexes() -> None:
    fullwidth_c = "\uff23"  # NFKC makes it C
    assert words(f"{fullwidth_c}afé, ZÜRICH-2 snake_case!") == ["cafe", "zurich", "2", "snake_case"]


def test_the_async_api_lists_searches_and_totals() -> None:
    async def main() -> None:
        store = await agentsession.aio.open_async_store("memory:")
        session = await store.get("a")
        await session.append(ags.Event.new("user/message", ags.Message.user("async hello")))
        await session.update(tenant="acme")
        page = await store.list(where={"tenant": "acme"}, limit=10)
        assert [s.id for s in page] == ["a"]
        assert [h.seq for h in await store.search("hello")] == [1]
        await store.set_prices({"*": Price(input=1.0)})
        assert await store.reindex() == 1
        assert (await store.totals(group_by="tenant")) == []
        await store.close()

    asyncio.run(main())


@given(st.text(alphabet=st.characters(max_codepoint=127)) | st.text())
def test_words_of_ascii_text_take_the_fast_path_to_the_same_words(text: str) -> None:
    import re
    import unicodedata

    folded = unicodedata.normalize("NFKD", text.casefold())
    bare = "".join(c for c in folded if not unicodedata.combining(c))
    assert words(text) == re.findall(r"\w+", unicodedata.normalize("NFKC", bare))
