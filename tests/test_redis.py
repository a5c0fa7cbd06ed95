"""The Redis backend beyond the storage contract: its catalog and search index against the
reference (:class:`~agentsession.indexing.MemoryIndex`), on one server and on a Cluster; the
Cluster's store-wide index, repaired by ``reindex``; the key layout (one slot per session);
durability checks (``appendfsync``, ``replicas=N`` with ``WAIT``); TTL by expiry.

The catalog tests of ``tests/test_catalog_core.py`` that take a ``store`` run here again, on
a Redis store (this module's ``store`` fixture).
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime as dt
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import agentsession as ags
from agentsession.errors import StorageError
from agentsession.events import Usage
from agentsession.listing import Price

from .redis_servers import (
    SERVER_SKIP,
    cluster_url,
    drop_prefixes,
    new_prefix,
    redis_cluster,
    redis_server,
    requires_redis,
    url_with_prefix,
)
from .test_catalog_core import (  # noqa: F401 - collected here, on this module's store
    T0,
    chat,
    clock_from,
    test_a_cursor_continues_where_its_page_ended_and_is_tied_to_its_order,
    test_concurrent_appends_keep_exact_counts,
    test_paging_with_cursors_lists_every_session_once,
    test_reindex_rebuilds_rows_and_prices_earlier_usage,
    test_rewound_and_compacted_hits_are_flagged,
    test_rows_are_kept_as_the_store_appends,
    test_search_finds_every_word_in_messages_tool_calls_and_results,
    test_search_pages_with_a_cursor,
    test_status_tells_a_running_turn_from_one_that_needs_recovery,
    test_the_user_comes_from_the_first_event_that_names_one,
    test_update_sets_fields_and_an_explicit_title_wins,
    test_where_filters_and_rejects_what_it_does_not_know,
)

pytestmark = [pytest.mark.redis, requires_redis]


@pytest.fixture
def prefixes() -> Iterator[list[str]]:
    made: list[str] = []
    try:
        yield made
    finally:
        drop_prefixes(made)


def redis_url(prefixes: list[str]) -> str:
    prefix = new_prefix()
    prefixes.append(prefix)
    return url_with_prefix(prefix)


@pytest.fixture
def store(prefixes: list[str]) -> Iterator[ags.BaseStore]:
    _, clock = clock_from(T0)
    opened = ags.open_store(redis_url(prefixes), clock=clock)
    try:
        yield opened
    finally:
        opened.close()


# -- the catalog against the reference ------------------------------------------------------

TENANTS = ["acme", "globex", ""]
TAGS = ["red", "green", "blue"]
AGENTS = ["bot", "helper"]
WORDS = ["parcel", "refund", "invoice", "delay", "weather", "password"]


def populate(store: ags.BaseStore, seed: int, sessions: int = 40) -> None:
    """The same sessions, fields, usage and documents on any store (its clock must tick
    alike)."""
    rng = random.Random(seed)
    for n in range(sessions):
        sid = f"s{rng.randrange(1000):03d}-{n}"
        for _ in range(rng.randrange(1, 3)):
            text = " ".join(rng.choice(WORDS) for _ in range(3))
            chat(store, sid, text, agent=rng.choice(AGENTS))
        session = store.get(sid)
        session.append(
            ags.Event.new("usage", Usage(input_tokens=rng.randrange(100), model="m"), agent="bot")
        )
        session.update(
            tenant=rng.choice(TENANTS),
            tags=rng.sample(TAGS, rng.randrange(3)),
            user=rng.choice(["ann", "bob"]),
        )
        if rng.random() < 0.2:  # a turn left open: status live
            # In a context of its own (the turn id it sets stays there), and recorded, so
            # that the test forgets it as a crashed process would (_forget_open_turns).
            def leave_open(session: Any = session) -> None:
                turn = session.turn(agent="bot").__enter__()
                turn.user("still running " + rng.choice(WORDS))
                LEFT_OPEN.append(turn)

            contextvars.copy_context().run(leave_open)


LEFT_OPEN: list[Any] = []
"""Turns :func:`populate` left open, forgotten after each test."""


@pytest.fixture(autouse=True)
def _forget_open_turns() -> Iterator[None]:
    """After each test, this process forgets the turns populate left open (as if it had
    crashed with them open), so that later tests find no open turn of theirs."""
    yield
    from agentsession import recorder

    with recorder._open_turns_lock:
        for turn in LEFT_OPEN:
            for key, open_turn in list(recorder._open_turns.items()):
                if open_turn is turn:
                    del recorder._open_turns[key]
    LEFT_OPEN.clear()


def pages(store: ags.BaseStore, **kwargs: Any) -> list[list[str]]:
    """Every page of a listing, as ids, following cursors."""
    out: list[list[str]] = []
    cursor = None
    while True:
        page = store.list(limit=7, cursor=cursor, **kwargs)
        out.append([i.id for i in page])
        cursor = page.next_cursor
        if cursor is None:
            return out


WHERES: list[dict[str, Any]] = [
    {},
    {"tenant": "acme"},
    {"tenant": ["acme", "globex"], "tag": "red"},
    {"tag": ["red", "green"]},
    {"agent": "helper"},
    {"user": "ann", "status": "idle"},
    {"status": "live"},
    {"prefix": "s1"},
    {"title": "refund"},
    {"updated": (T0 + dt.timedelta(seconds=100), None)},
]


def compare_with_reference(store: ags.BaseStore, seed: int) -> None:
    """``store``'s lists, searches and totals are the reference's on the same data."""
    _, clock = clock_from(T0)
    reference = ags.open_store("memory:", clock=clock)  # type: ignore[arg-type]
    populate(reference, seed)
    for where in WHERES:
        for order in ("updated", "created", "id"):
            assert pages(store, where=where, order=order) == pages(
                reference, where=where, order=order
            ), (where, order)
    mine = {i.id: i for i in store.list(limit=None)}
    theirs = {i.id: i for i in reference.list(limit=None)}
    assert mine.keys() == theirs.keys()
    for sid, info in theirs.items():
        assert mine[sid] == msgspec_replace(info, size=mine[sid].size), sid
    for query in ("parcel", "refund delay", "weather password invoice", "nothing"):
        for where in ({}, {"tenant": "acme"}):
            found = [
                (h.session_id, h.seq, h.rank) for h in store.search(query, where=where, limit=500)
            ]
            wanted = [
                (h.session_id, h.seq, h.rank)
                for h in reference.search(query, where=where, limit=500)
            ]
            assert found == wanted, (query, where)
    for group in ("tenant", "user", "agent", "day"):
        assert store.totals(group_by=group) == reference.totals(group_by=group), group


def msgspec_replace(info: ags.SessionInfo, **changes: Any) -> ags.SessionInfo:
    import msgspec

    return msgspec.structs.replace(info, **changes)


@pytest.mark.parametrize("seed", [1, 2])
def test_lists_searches_and_totals_are_the_references(prefixes: list[str], seed: int) -> None:
    _, clock = clock_from(T0)
    with ags.open_store(redis_url(prefixes), clock=clock) as store:  # type: ignore[arg-type]
        populate(store, seed)
        compare_with_reference(store, seed)


def test_delete_and_shred_leave_nothing_listed_or_searchable(prefixes: list[str]) -> None:
    with ags.open_store(redis_url(prefixes), passphrase="pw") as store:
        chat(store, "a", "secret plans")
        chat(store, "b", "secret recipes")
        store.get("b").update(title="Recipes", tenant="acme", tags=["food"])
        store.delete("a")
        assert {h.session_id for h in store.search("secret")} == {"b"}
        assert [i.id for i in store.list(where={"tenant": "acme"})] == ["b"]
        store.shred("b")
        assert store.search("secret") == []
        [info] = store.list()
        assert (info.status, info.title, info.tenant, info.tags) == ("shredded", "", "", ())
        assert store.list(where={"tenant": "acme"}) == []
        assert store.list(where={"status": "shredded"})[0].id == "b"


def test_an_encrypted_store_keeps_no_plaintext_in_redis(prefixes: list[str]) -> None:
    import redis

    url = redis_url(prefixes)
    with ags.open_store(url, passphrase="pw") as store:
        chat(store, "a", "Confidential merger with Initech")
        store.get("a").update(
            tenant="acmecorp", tags=["dealroom"], user="chiefexec", title="Project Falcon"
        )
        [hit, _reply] = sorted(store.search("initech merger"), key=lambda h: h.seq)
        assert hit.snippet == "Confidential [merger] with [Initech]"
        assert [i.id for i in store.list(where={"tenant": "acmecorp", "tag": "dealroom"})] == ["a"]
    client = redis.Redis.from_url(url.split("?")[0])
    dump = b""
    for key in client.scan_iter(match=f"{prefixes[-1]}*"):
        dump += key
        kind = client.type(key)
        if kind == b"hash":
            dump += repr(client.hgetall(key)).encode()
        elif kind == b"stream":
            dump += repr(client.xrange(key)).encode()
        elif kind == b"set":
            dump += repr(client.smembers(key)).encode()
        elif kind == b"zset":
            dump += repr(client.zrange(key, 0, -1)).encode()
        elif kind == b"string":
            dump += client.get(key) or b""
    for secret in (
        b"Confidential",
        b"merger",
        b"initech",
        b"acmecorp",
        b"dealroom",
        b"chiefexec",
        b"Falcon",
    ):
        assert secret.lower() not in dump.lower(), secret


def test_catalog_false_still_lists_sessions(prefixes: list[str]) -> None:
    with ags.open_store(redis_url(prefixes), catalog=False) as store:
        chat(store, "a", "hello")
        chat(store, "b", "hello again")
        assert [s.id for s in store.list()] == ["b", "a"]
        assert store.list()[0].last_seq == 4


def test_totals_price_usage_as_the_reference_does(prefixes: list[str]) -> None:
    def fill(store: ags.BaseStore) -> None:
        store.set_prices({"m": Price(input=1.0, output=2.0)})
        for sid in ("a", "b"):
            session = store.get(sid)
            session.append(ags.Event.new("user/message", ags.Message.user("hi")))
            for n in range(5):
                session.append(
                    ags.Event.new("usage", Usage(input_tokens=n, output_tokens=7, cost=0.1))
                )

    _, clock = clock_from(T0)
    reference = ags.open_store("memory:", clock=clock)  # type: ignore[arg-type]
    fill(reference)
    _, clock = clock_from(T0)
    with ags.open_store(redis_url(prefixes), clock=clock) as store:  # type: ignore[arg-type]
        fill(store)
        assert store.totals() == reference.totals()
        assert [i.usage for i in store.list()] == [i.usage for i in reference.list()]


# -- key layout, expiry ---------------------------------------------------------------------


@pytest.mark.parametrize("sid", ["plain", "with{brace}", "}starts", "~tilde", "nul\x00é\ud800"])
def test_every_key_of_a_session_hashes_to_one_slot(sid: str) -> None:
    from redis.crc import key_slot

    from agentsession.backends.redis.server import Keys

    keys = Keys(b"p:").session(sid)
    assert len({key_slot(k) for k in keys}) == 1
    other = Keys(b"p:").session(sid + "x")
    assert not set(keys) & set(other)


def test_session_keys_expire_ttl_plus_grace_after_the_last_append(prefixes: list[str]) -> None:
    import redis

    url = redis_url(prefixes)
    ttl = dt.timedelta(hours=1)
    with ags.open_store(url, ttl=ttl, expire_grace=dt.timedelta(minutes=30)) as store:
        store.get("a").append(ags.Event.new("test/n"))
        keys = store._catalog._db.keys.session("a")  # type: ignore[attr-defined]
    client = redis.Redis.from_url(url.split("?")[0])
    for key in keys[:2]:  # the hash (with the event ids) and the stream
        left = client.pttl(key)
        assert 89 * 60_000 < left <= 90 * 60_000
    assert client.exists(keys[2]) == 0  # no ids hash of its own (key layout 3)


def test_an_update_with_renew_on_update_gives_the_keys_their_expiry_again(
    prefixes: list[str],
) -> None:
    import redis

    url = redis_url(prefixes)
    client = redis.Redis.from_url(url.split("?")[0])
    ttl, grace = dt.timedelta(hours=1), dt.timedelta(minutes=30)
    for renew in (True, False):
        with ags.open_store(url, ttl=ttl, expire_grace=grace, renew_on_update=renew) as store:
            sid = f"renew-{renew}"
            session = store.get(sid)
            session.append(ags.Event.new("test/n"))
            keys = store._catalog._db.keys.session(sid)  # type: ignore[attr-defined]
            for key in keys[:5]:
                client.pexpire(key, 600_000)  # as if 80 minutes had gone by since the append
            session.update(model="m")
        left = [client.pttl(key) for key in keys[:2]]  # the hash (ids too) and the stream
        if renew:
            assert all(89 * 60_000 < ms <= 90 * 60_000 for ms in left), left
        else:
            assert all(0 < ms <= 600_000 for ms in left), left
    # Keys already gone stay gone: a renewal makes none.
    with ags.open_store(url, ttl=ttl, renew_on_update=True) as store:
        store._catalog.renew("never-written")  # type: ignore[attr-defined]
        keys = store._catalog._db.keys.session("never-written")  # type: ignore[attr-defined]
    assert not any(client.exists(key) for key in keys)


# -- the Cluster's store-wide index ---------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(bool(SERVER_SKIP), reason=SERVER_SKIP or "-")
def test_on_a_cluster_the_index_lags_by_one_script_and_reindex_repairs_it(
    tmp_path: Path,
) -> None:
    from redis.cluster import RedisCluster

    with redis_cluster(tmp_path) as nodes:
        url = cluster_url(nodes)
        _, clock = clock_from(T0)
        with ags.open_store(url, clock=clock) as store:  # type: ignore[arg-type]
            populate(store, 3)
            compare_with_reference(store, 3)
            # The second script lost (the client died between the two): the store-wide
            # index misses what the sessions' own keys hold...
            catalog = store._catalog._db.keys.catalog  # type: ignore[attr-defined]
            client = RedisCluster(host="127.0.0.1", port=nodes[0].port)
            try:
                for key in client.scan_iter(
                    match=catalog + b"*", count=1000, target_nodes=RedisCluster.PRIMARIES
                ):
                    client.delete(key)
            finally:
                client.close()
            assert store.list(where={"tenant": "acme"}) == []
            assert store.search("parcel") == []
            # ...until reindex rebuilds it from the sessions' own keys.
            assert store.reindex() == len(store._catalog.list_all())  # type: ignore[attr-defined]
            compare_with_reference(store, 3)


# -- durability -----------------------------------------------------------------------------


def test_fsync_is_refused_on_a_server_that_does_not_sync_every_write(prefixes: list[str]) -> None:
    import redis

    config = redis.Redis().config_get("appendonly")
    if config.get("appendonly") == "yes":
        pytest.skip("the local server runs appendonly yes")
    with pytest.raises(StorageError, match="appendfsync always"):
        ags.open_store(redis_url(prefixes), durability="fsync")


@pytest.mark.skipif(bool(SERVER_SKIP), reason=SERVER_SKIP or "-")
def test_fsync_needs_appendfsync_always_and_says_how_to_configure(tmp_path: Path) -> None:
    with (
        redis_server(tmp_path / "none") as server,
        pytest.raises(StorageError, match=r"keeps nothing on disk.*appendonly yes"),
    ):
        ags.open_store(f"redis://127.0.0.1:{server.port}/0", durability="fsync")
    with redis_server(tmp_path / "everysec", "--appendonly", "yes") as server:
        with pytest.raises(StorageError, match="appendfsync everysec"):
            ags.open_store(f"redis://127.0.0.1:{server.port}/0", durability="fsync")
        ags.open_store(f"redis://127.0.0.1:{server.port}/0", durability="flush").close()
    with (
        redis_server(
            tmp_path / "always", "--appendonly", "yes", "--appendfsync", "always"
        ) as server,
        ags.open_store(f"redis://127.0.0.1:{server.port}/0", durability="fsync") as store,
    ):
        assert store.get("a").append(ags.Event.new("test/n")) == 1


@pytest.mark.skipif(bool(SERVER_SKIP), reason=SERVER_SKIP or "-")
def test_replicas_waits_for_acknowledgements_and_says_when_they_are_missing(
    tmp_path: Path,
) -> None:
    with redis_server(tmp_path / "primary") as primary:
        url = f"redis://127.0.0.1:{primary.port}/0"
        with ags.open_store(url, replicas=1, replica_timeout=0.2) as lonely:
            with pytest.raises(StorageError, match="only 0 of 1 replicas"):
                lonely.get("a").append(ags.Event.new("test/n", {"n": 1}))
            # Appended again, it is recognised (stored once, on the primary).
            assert lonely.get("a").latest_seq == 1
        with redis_server(
            tmp_path / "replica", "--replicaof", "127.0.0.1", str(primary.port)
        ) as replica:
            wait_for_replica(primary.port)
            with ags.open_store(url, replicas=1, durability="fsync") as store:
                session = store.get("b")
                assert session.append_many([ags.Event.new("test/n") for _ in range(3)]) == [
                    1,
                    2,
                    3,
                ]
            with ags.open_store(f"redis://127.0.0.1:{replica.port}/0") as copy:
                assert copy.get("b").latest_seq == 3


def wait_for_replica(port: int) -> None:
    import time

    import redis

    client = redis.Redis(port=port)
    for _ in range(600):
        info = client.info("replication")
        if info.get("connected_slaves", 0) >= 1 and info.get("slave0", {}).get("state") == "online":
            return
        time.sleep(0.05)
    raise AssertionError("the replica never came online")


def test_a_store_records_its_key_layout_and_refuses_a_newer_one(prefixes: list[str]) -> None:
    import redis

    from agentsession.errors import StoreUnavailable

    url = redis_url(prefixes)
    ags.open_store(url).close()
    client = redis.Redis.from_url(url.split("?")[0])
    key = f"{prefixes[-1]}{{~meta}}:layout"
    assert client.get(key) == b"3"
    client.set(key, 4)
    with pytest.raises(StoreUnavailable, match="key layout version 4"):
        ags.open_store(url)


def test_urls_name_a_server_or_a_cluster_and_never_show_the_password() -> None:
    from agentsession.backends.redis.server import Target

    def parse(url: str, **options: Any) -> Target:
        given = {"cluster": None, "prefix": None, "replicas": None, "lock_ttl": None}
        given.update(options)
        return Target.parse(url, **given)

    one = parse("redis://app:s3cret@db.internal:6380/2?prefix=agents:&replicas=1")
    assert (one.nodes, one.db, one.prefix, one.replicas, one.tls, one.cluster) == (
        [("db.internal", 6380)],
        2,
        "agents:",
        1,
        False,
        False,
    )
    assert one.password == "s3cret" and "s3cret" not in one.location
    assert parse("rediss://h/0").tls
    many = parse("redis+cluster://a:7000,b:7001,[::1]:7002/")
    assert many.cluster and many.nodes == [("a", 7000), ("b", 7001), ("::1", 7002)]
    assert parse("redis://h:7000/", cluster=True).cluster
    assert parse("redis://h/", prefix="x:", lock_ttl=3).lock_ttl == 3.0
    from agentsession.errors import UsageError

    for bad in ("redis://h/x", "redis+cluster://h:1/3", "redis://h/?prefix={x}", "redis://h:p/"):
        with pytest.raises(UsageError):
            parse(bad)


def test_an_unreachable_server_is_store_unavailable_without_the_password() -> None:
    from agentsession.errors import StoreUnavailable

    with pytest.raises(StoreUnavailable) as caught:
        ags.open_store("redis://u:hunter2@127.0.0.1:1/0", connect_timeout=1)
    assert "hunter2" not in str(caught.value) and "127.0.0.1:1" in str(caught.value)


# -- reads: entries as the server returns them, damaged ones located ---------------------------


def _damage(url: str, prefix: str, sid: str, seq: int, line: bytes) -> None:
    """Replace the stream entry of ``seq`` (kept in place) with ``line``."""
    import redis

    client = redis.Redis.from_url(url.split("?")[0])
    try:
        key = f"{prefix}{{{sid}}}:e"
        entries = client.xrange(key)
        client.delete(key)
        for entry_id, fields in entries:
            keep = line if entry_id == f"{seq}-0".encode() else fields[b"e"]
            client.xadd(key, {"e": keep}, id=entry_id)
    finally:
        client.close()


@pytest.mark.parametrize(
    "line", [b'{"not": "an event"', b'{"type": "user.message"}\n{"seq": 3}'], ids=["json", "break"]
)
def test_a_damaged_entry_is_reported_by_every_read_with_its_seq(
    prefixes: list[str], line: bytes
) -> None:
    from agentsession.errors import CorruptLogError

    url = redis_url(prefixes)
    with ags.open_store(url) as store:
        session = store.get("d")
        session.append_many([ags.Event.new("user.message", {"text": f"m{i}"}) for i in range(20)])
    _damage(url, prefixes[-1], "d", 3, line)  # before the tail opening reads (16 events)
    with ags.open_store(url) as store:
        session = store.get("d")
        assert [e.seq for e in session.read(3)] == list(range(4, 21))
        with pytest.raises(CorruptLogError, match="seq 3"):
            session.read(0, 3)
        with pytest.raises(CorruptLogError, match="seq 3"):
            session.read()
    _damage(url, prefixes[-1], "d", 18, line)  # within the tail: opening finds it
    with (
        ags.open_store(url) as store,
        pytest.raises(CorruptLogError, match="seq 18"),
    ):
        store.get("d").read(19)


def test_reads_of_every_kind_return_the_events_in_order(prefixes: list[str]) -> None:
    url = redis_url(prefixes)
    texts = [f"line {i}\nwith a break and \u00e9 and \U0001f600" for i in range(40)]
    with ags.open_store(url) as store:
        store.get("r").append_many([ags.Event.new("user.message", {"text": t}) for t in texts])
        other = store.get("r")
        assert [e.seq for e in other.read(10, 5)] == [11, 12, 13, 14, 15]
        assert [e.payload()["text"] for e in other.read()] == texts
        store.get("r").append(ags.Event.new("user.message", {"text": "more"}))
        assert other.read(40)[0].payload()["text"] == "more"  # caught up by REFRESH
    with ags.open_store(url) as store:
        assert [e.seq for e in store.get("r").read()] == list(range(1, 42))
        assert store.get("empty").read() == []


@given(
    st.recursive(
        st.none() | st.integers(-(2**63), 2**64 - 1) | st.text(),
        lambda inner: st.lists(inner, max_size=20),
        max_leaves=50,
    )
)
def test_pack_text_packs_as_pack_does(value: Any) -> None:
    from agentsession.backends.redis.storage import pack, pack_text

    assert pack_text(value) == pack(value)


def test_a_forked_child_connects_to_a_cluster_at_its_first_use_only() -> None:
    """The fork hook of a cluster store connects to nothing: one whose cluster is gone must
    not fail it (which would stop the hook for every store after it)."""
    from agentsession.backends.redis.server import Server, Target
    from agentsession.errors import StoreUnavailable

    from .redis_servers import free_port

    url = f"redis+cluster://127.0.0.1:{free_port()}/"  # nothing listens there
    target = Target.parse(url, cluster=None, prefix=None, replicas=None, lock_ttl=None)
    inherited = object()
    server = Server(target, inherited)
    server.after_fork()  # in a child: nothing connected yet
    with pytest.raises(StoreUnavailable):
        server.run("reading", lambda: server.client.ping())  # the first use connects
    closed = Server(target, inherited)
    closed.closed = True
    closed.after_fork()
    assert closed.client is inherited  # a closed store is never connected again


# -- the append's own socket ----------------------------------------------------------------


@pytest.mark.skipif(bool(SERVER_SKIP), reason=SERVER_SKIP or "-")
def test_the_appends_own_socket_logs_in_selects_the_database_and_connects_again(
    tmp_path: Path,
) -> None:
    """The append's script goes on a socket of the thread's own (not redis-py's): it
    authenticates as the URL's user, selects the URL's database, sends a script the server
    forgot in full, connects again after the server dropped it, and closes with the store."""
    import redis

    with redis_server(tmp_path / "auth") as server:
        admin = redis.Redis(port=server.port)
        admin.acl_setuser(
            "app", enabled=True, passwords=["+s3cret"], keys=["*"], channels=["*"],
            commands=["+@all"],
        )  # fmt: skip
        admin.acl_setuser("default", enabled=False)  # nothing runs without logging in
        client = redis.Redis(port=server.port, db=3, username="app", password="s3cret")
        url = f"redis://app:s3cret@127.0.0.1:{server.port}/3"
        with ags.open_store(url) as store:
            session = store.get("chat")
            assert [session.append(ags.Event.new("test/n", {"n": n})) for n in range(3)] == [
                1,
                2,
                3,
            ]
            assert client.xlen("agentsession:{chat}:e") == 3  # in database 3
            other = redis.Redis(port=server.port, db=0, username="app", password="s3cret")
            assert other.dbsize() == 0
            other.close()
            client.script_flush()
            assert session.append(ags.Event.new("test/n", {"n": 3})) == 4
            client.client_kill_filter(_type="normal", skipme=True)  # the store's sockets go
            assert session.append(ags.Event.new("test/n", {"n": 4})) == 5

            async def appends() -> list[int]:  # the async API's own connections, likewise
                from agentsession.aio import AsyncStore

                astore = AsyncStore(store)
                asession = await astore.get("chat")
                seqs = [await asession.append(ags.Event.new("test/n", {"n": 5}))]
                client.script_flush()
                seqs.append(await asession.append(ags.Event.new("test/n", {"n": 6})))
                client.client_kill_filter(_type="normal", skipme=True)
                seqs.append(await asession.append(ags.Event.new("test/n", {"n": 7})))
                await astore.close()
                return seqs

            assert asyncio.run(appends()) == [6, 7, 8]
        # Closed with the store: no connection is left but this test's own.
        assert [c["id"] for c in client.client_list()] == [str(client.client_id())]
        with ags.open_store(url) as store:
            assert [e.seq for e in store.get("chat").read()] == [1, 2, 3, 4, 5, 6, 7, 8]
        with pytest.raises(StorageError):
            ags.open_store(f"redis://app:wrong@127.0.0.1:{server.port}/3")


def test_the_appends_own_reply_reader_reads_what_the_scripts_answer() -> None:
    import redis.exceptions as rex

    from agentsession.backends.redis.server import pack_command, parse_reply

    def whole(data: bytes) -> Any:
        got = parse_reply(bytearray(data), 0)
        assert got is not None and got[1] == len(data)
        return got[0]

    assert whole(b"$13\r\n1 41 abc\r\ndef\r\n") == b"1 41 abc\r\ndef"  # a line break inside
    assert whole(b"*3\r\n:0\r\n:-7\r\n$4\r\nlife\r\n") == [0, -7, b"life"]
    assert whole(b"*2\r\n$-1\r\n*0\r\n") == [None, []]
    assert whole(b"+OK\r\n") == b"OK"
    assert isinstance(whole(b"-NOSCRIPT No matching script.\r\n"), rex.NoScriptError)
    assert isinstance(whole(b"-READONLY You can't write against a replica.\r\n"), rex.ReadOnlyError)
    assert type(whole(b"-ERR something else\r\n")) is rex.ResponseError
    for cut in (b"$12\r\n1 41", b"*3\r\n:0\r\n", b"*2\r\n$4\r\nli", b"$3"):
        assert parse_reply(bytearray(cut), 0) is None  # not all of it read yet
    assert pack_command(["SELECT", 3]) == b"*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n"
