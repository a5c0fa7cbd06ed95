"""The Redis store's catalog taken at turn boundaries and its search documents indexed apart
(key layout version 2): appends inside a turn mark the session (``m:r``) instead of writing
its row, every append with documents marks them (``m:d``) instead of indexing them, and
reading the catalog first catches up what is marked from the logs, so that what is listed and
found always matches a rebuild, whoever wrote and however a writer ended; a version 1 store
(rows and documents written by every append) is read as it is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

import agentsession as ags
from agentsession import Event, Message
from agentsession.backends.redis.storage import pack
from agentsession.events import TurnEnd, TurnStart, Usage, encode_event

from . import test_redis
from .redis_servers import SERVER_SKIP, redis_server, requires_redis
from .test_catalog_deferred import _listed, _rebuilt, kill_writer_mid_turn
from .test_redis import redis_url, wait_for_replica

prefixes = test_redis.prefixes  # the fixture: the key prefixes a test made, dropped after it

pytestmark = [pytest.mark.redis, requires_redis]


def _client(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url.split("?")[0])


def _found(store: Any, word: str) -> list[tuple[str, int]]:
    return sorted((h.session_id, h.seq) for h in store.search(word, limit=1000))


def _marks(url: str, prefix: str, kind: str) -> dict[bytes, bytes]:
    found: dict[bytes, bytes] = _client(url).hgetall(f"{prefix}{{~catalog}}:m:{kind}")
    return found


def test_appends_inside_a_turn_mark_the_session_and_reading_catches_it_up(
    prefixes: list[str],
) -> None:
    url = redis_url(prefixes)
    prefix = prefixes[-1]
    with ags.open_store(url) as writer, ags.open_store(url) as reader:
        session = writer.get("chat")
        session.append(Event.new("turn/start", TurnStart(), agent="bot"))
        session.append(Event.new("user/message", Message.user("where is my parcel"), agent="bot"))
        session.append(Event.new("usage", Usage(input_tokens=7), agent="bot"))
        assert set(_marks(url, prefix, "r")) == {b"chat"}  # the row waits for the turn's end
        assert set(_marks(url, prefix, "d")) == {b"chat"}  # documents wait for a search
        [info] = reader.list(order="id")  # caught up from the log
        assert (info.messages, info.turns, info.usage.input_tokens, info.status) == (
            1,
            1,
            7,
            "needs_recovery",  # a turn open, its lock held by no one
        )
        assert _marks(url, prefix, "r") == {}
        assert _found(reader, "parcel") == [("chat", 2)]
        assert _marks(url, prefix, "d") == {}
        session.append(Event.new("assistant/message", Message.assistant("parcel found")))
        session.append(Event.new("turn/end", TurnEnd(steps=0), agent="bot"))
        # The reader moved the row past what the writer's turn end continues: marked again.
        assert set(_marks(url, prefix, "r")) == {b"chat"}
        assert _found(reader, "parcel") == [("chat", 2), ("chat", 4)]
        assert _marks(url, prefix, "r") == {} and _marks(url, prefix, "d") == {}
        assert _listed(reader) == _rebuilt(reader)
        session.append(Event.new("turn/start", TurnStart(), agent="bot"))
        session.append(Event.new("user/message", Message.user("and a refund")))
        session.append(Event.new("turn/end", TurnEnd(steps=0), agent="bot"))
        assert _marks(url, prefix, "r") == {}  # a turn nobody read meanwhile: its end's change
        [info] = reader.list(order="id")
        assert (info.messages, info.turns, info.status) == (3, 2, "idle")


def test_a_writer_killed_mid_turn_loses_nothing_of_the_catalog(prefixes: list[str]) -> None:
    url = redis_url(prefixes)
    kill_writer_mid_turn(url, 7)  # a turn's start and 7 user messages, "m0" to "m6"
    every = [("killed", seq) for seq in range(2, 9)]
    with ags.open_store(url) as store:
        [info] = store.list(order="id")
        assert (info.messages, info.turns, info.last_seq) == (7, 1, 8)
        assert info.status == "needs_recovery"
        assert [hit for n in range(7) for hit in _found(store, f"m{n}")] == every
        assert _listed(store) == _rebuilt(store)
        assert [hit for n in range(7) for hit in _found(store, f"m{n}")] == every


def test_delete_and_shred_leave_nothing_marked_or_indexed(prefixes: list[str]) -> None:
    pytest.importorskip("cryptography")
    url = redis_url(prefixes)
    prefix = prefixes[-1]
    with ags.open_store(url, passphrase="pw") as store:
        for sid in ("gone", "shredded"):
            session = store.get(sid)
            session.append(Event.new("turn/start", TurnStart()))
            session.append(Event.new("user/message", Message.user("secret refund")))
        store.delete("gone")
        store.shred("shredded")
        assert store.search("refund").items == []
        assert _marks(url, prefix, "r") == {} or set(_marks(url, prefix, "r")) <= {b"shredded"}
        assert _marks(url, prefix, "d") == {}
        client = _client(url)
        assert list(client.scan_iter(match=f"{prefix}{{~catalog}}:w:*")) == []
        assert client.hget(f"{prefix}{{~catalog}}:di", "gone") is None


EVENTS: dict[str, Any] = {
    "start": lambda agent: Event.new("turn/start", TurnStart(), agent=agent),
    "end": lambda agent: Event.new("turn/end", TurnEnd(steps=0), agent=agent),
    "user": lambda agent: Event.new("user/message", Message.user("u"), agent=agent),
    "assistant": lambda agent: Event.new("assistant/message", Message.assistant("u"), agent=agent),
    "usage": lambda agent: Event.new("usage", Usage(input_tokens=3, output_tokens=1), agent=agent),
}
"""The events an operation of the property test appends, by its name."""

# Which store object writes, which session, what it does.
STEP = st.tuples(
    st.sampled_from([0, 1]), st.sampled_from("ab"), st.sampled_from([*EVENTS, "list", "search"])
)
CHECKS = HealthCheck.function_scoped_fixture


@settings(max_examples=25, deadline=None, suppress_health_check=[CHECKS])
@given(ops=st.lists(STEP, max_size=30))
def test_the_catalog_and_search_always_match_a_rebuild(prefixes: list[str], ops: list[Any]) -> None:
    url = redis_url(prefixes)
    stores = [ags.open_store(url), ags.open_store(url)]
    try:
        for who, sid, op in ops:
            store = stores[who]
            if op in ("list", "search"):
                store.list(order="id") if op == "list" else store.search("u")
            else:
                store.get(sid).append(EVENTS[op](f"agent{who}"))
        listed, found = _listed(stores[0]), _found(stores[0], "u")
        assert listed == _rebuilt(stores[1])
        assert found == _found(stores[1], "u")
    finally:
        for store in stores:
            store.close()


# -- a version 1 store --------------------------------------------------------------------------


def build_version_1(url: str, prefix: str) -> None:
    """A store as key layout version 1 wrote it (docs/format.md before version 2): session
    ``old`` with two events, its row and documents written by the appends, its words in the
    inverted index, no ``cs``, no marks."""
    import msgspec

    client = _client(url)
    t0 = 1_700_000_000_000_000
    events = [
        msgspec.structs.replace(Event.new("turn/start", TurnStart(), agent="bot"), seq=1),
        msgspec.structs.replace(
            Event.new("user/message", Message.user("an old invoice"), agent="bot"), seq=2
        ),
    ]
    base = f"{prefix}{{old}}:"
    catalog = f"{prefix}{{~catalog}}:"
    for event in events:
        client.xadd(base + "e", {"e": encode_event(event)}, id=f"{event.seq}-0")
    client.hset(base + "i", mapping={e.id: e.seq for e in events})
    client.hset(
        base + "s",
        mapping={
            "sid": "old",
            "life": "0123456789abcdef",
            "last": 2,
            "created": t0,
            "updated": t0 + 1,
            "size": 100,
            "v": 2,
            "messages": 1,
            "turns": 1,
            "title": "an old invoice",
            "status": "live",
            "agents": msgspec.msgpack.encode(["bot"]),
            "tags": msgspec.msgpack.encode([]),
        },
    )
    client.hset(base + "d", 2, msgspec.msgpack.encode(["user", "an old invoice"]))
    for word in ("an", "old", "invoice"):
        client.sadd(catalog + "w:" + word, b"old\x002")
    # As the scripts' cmsgpack packs it: byte strings as msgpack strings.
    packed = pack(["live", "", "", [], ["bot"]])
    client.hset(catalog + "x", "old", pack(["2", packed]))
    client.zadd(catalog + "z:u", {"old": t0 + 1})
    client.zadd(catalog + "z:c", {"old": t0})
    client.zadd(catalog + "z:i", {"old": 0})
    client.sadd(catalog + "f:status:live", "old")
    client.sadd(catalog + "f:user:", "old")
    client.sadd(catalog + "f:tenant:", "old")
    client.sadd(catalog + "f:agent:bot", "old")
    client.set(f"{prefix}{{~meta}}:layout", 1)


def test_a_version_1_store_loads_searches_and_goes_on(prefixes: list[str]) -> None:
    url = redis_url(prefixes)
    prefix = prefixes[-1]
    build_version_1(url, prefix)
    with ags.open_store(url) as store:
        assert _client(url).get(f"{prefix}{{~meta}}:layout") == b"3"
        [info] = store.list(where={"agent": "bot"})
        assert (info.id, info.messages, info.turns, info.title) == ("old", 1, 1, "an old invoice")
        assert _found(store, "invoice") == [("old", 2)]
        session = store.get("old")
        session.append(Event.new("user/message", Message.user("a new invoice"), agent="bot"))
        session.append(Event.new("turn/end", TurnEnd(steps=0), agent="bot"))
        assert _found(store, "invoice") == [("old", 2), ("old", 3)]
        [info] = store.list(order="id")
        assert (info.messages, info.turns, info.status, info.last_seq) == (2, 1, "idle", 4)
        assert _listed(store) == _rebuilt(store)
        assert _found(store, "invoice") == [("old", 2), ("old", 3)]


def _pages(store: Any, query: str, limit: int) -> list[tuple[str, int, float]]:
    out: list[tuple[str, int, float]] = []
    cursor = None
    while True:
        page = store.search(query, limit=limit, cursor=cursor)
        out += [(h.session_id, h.seq, h.rank) for h in page.items]
        cursor = page.next_cursor
        if cursor is None:
            return out


def test_search_pages_through_many_tied_ranks_as_the_reference_does(prefixes: list[str]) -> None:
    """More documents than one read of the ranked word sets takes, most of them tied (the same
    words, the same length), some not: every page, with one word and with several, is the
    reference's."""
    reference = ags.open_store("memory:")
    with ags.open_store(redis_url(prefixes)) as store:
        for target in (store, reference):
            for n in range(130):
                session = target.get(f"s{n % 7}")
                extra = " alpha" * (n % 3) + " beta" * (n % 5 == 0)
                session.append(Event.new("user/message", Message.user(f"alpha beta gamma{extra}")))
        for query, limit in (("alpha", 7), ("alpha beta", 9), ("beta alpha gamma", 50)):
            assert _pages(store, query, limit) == _pages(reference, query, limit), query
    reference.close()


@pytest.mark.skipif(bool(SERVER_SKIP), reason=SERVER_SKIP or "-")
def test_a_store_on_a_replica_finds_what_is_not_indexed_yet_in_the_logs(tmp_path: Path) -> None:
    with redis_server(tmp_path / "primary") as primary:
        url = f"redis://127.0.0.1:{primary.port}/0"
        with redis_server(
            tmp_path / "replica", "--replicaof", "127.0.0.1", str(primary.port)
        ) as replica:
            wait_for_replica(primary.port)
            with ags.open_store(url, replicas=1) as store:
                session = store.get("chat")
                session.append(Event.new("turn/start", TurnStart()))
                session.append(Event.new("user/message", Message.user("an indexed parcel")))
                assert _found(store, "parcel") == [("chat", 2)]  # indexed by this search
                session.append(Event.new("user/message", Message.user("a parcel since")))
            with ags.open_store(f"redis://127.0.0.1:{replica.port}/0") as copy:
                assert _found(copy, "parcel") == [("chat", 2), ("chat", 3)]
                # The row as the primary's search caught it up: the replica cannot catch it up.
                [info] = copy.list(order="id")
                assert (info.last_seq, info.messages) == (3, 1)


def test_a_long_log_is_indexed_in_parts(prefixes: list[str]) -> None:
    """More documents than one script takes (a script's arguments are bounded) are indexed
    in parts, all of them."""
    with ags.open_store(redis_url(prefixes)) as store:
        events = [Event.new("user/message", Message.user(f"note n{n} hello")) for n in range(4500)]
        store.get("long").append_many(events)
        assert _found(store, "n4250") == [("long", 4251)]
        assert len(store.search("hello", limit=1000).items) == 1000


# -- key layout 3: ids in the session's hash, a row behind marked once ----------------------------


def test_appends_to_a_row_behind_mark_it_once_and_a_catch_up_raced_by_one_keeps_it(
    prefixes: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On one server the append that leaves a row behind marks it (``m:r``, at its seq) and
    the appends after it do not again; a catch-up that an append overtakes (between reading
    the log and applying its change) leaves the mark, so that the next reader catches the
    rest up."""
    from agentsession import indexing

    url = redis_url(prefixes)
    prefix = prefixes[-1]
    with ags.open_store(url) as writer, ags.open_store(url) as reader:
        session = writer.get("chat")
        session.append(Event.new("turn/start", TurnStart(), agent="bot"))
        session.append(Event.new("user/message", Message.user("one"), agent="bot"))
        session.append(Event.new("user/message", Message.user("two"), agent="bot"))
        # The session's first append wrote the row; the second left it behind and marked it.
        assert _marks(url, prefix, "r") == {b"chat": b"2"}
        read = indexing.catalogued

        def overtaken(session_read: Any, after: int) -> Any:
            events = read(session_read, after)
            monkeypatch.setattr(indexing, "catalogued", read)
            session.append(Event.new("user/message", Message.user("three"), agent="bot"))
            return events

        monkeypatch.setattr(indexing, "catalogued", overtaken)
        reader.catch_up_catalog()  # applies seqs 1 to 3; seq 4 came after the read
        assert set(_marks(url, prefix, "r")) == {b"chat"}
        [info] = reader.list(order="id")
        assert (info.messages, info.last_seq) == (3, 4)
        assert _marks(url, prefix, "r") == {}
        session.append(Event.new("user/message", Message.user("four"), agent="bot"))
        assert _marks(url, prefix, "r") == {b"chat": b"5"}  # caught up, then behind again
        assert _listed(reader) == _rebuilt(reader)


def test_a_new_session_keeps_its_event_ids_in_its_hash(prefixes: list[str]) -> None:
    url = redis_url(prefixes)
    prefix = prefixes[-1]
    client = _client(url)
    events = [Event.new("test/n", {"n": n}) for n in range(2500)]  # more than a script reads
    with ags.open_store(url) as store:
        session = store.get("many")
        assert session.append_many(events[:2400]) == list(range(1, 2401))
        # The same ids again (a retry): recognised, nothing stored twice.
        assert session.append_many(events[2300:]) == list(range(2301, 2501))
        assert client.hget(f"{prefix}{{many}}:s", "ids") == b"s"
        assert client.hget(f"{prefix}{{many}}:s", f"#{events[1234].id}") == b"1235"
        assert client.exists(f"{prefix}{{many}}:i") == 0
        [info] = store.list(order="id")
        assert info.last_seq == 2500
        # The script itself refuses a batch holding an id stored within the window.
        from agentsession.backends.redis.storage import RedisLog, numbered

        db = store._catalog._db  # type: ignore[attr-defined]
        log = RedisLog(db, "many", 0)
        log.open_tail(None)  # type: ignore[arg-type]
        fresh = Event.new("test/n", {"n": "new"})
        for batch, status in (([fresh, events[7]], -1), ([events[2499]], -1), ([fresh], 1)):
            request = log.append_call(numbered(batch, 2500), -1, 2500, None, True)
            reply = db.packed_script(request.name, request.keys, request.args)
            assert log.take_append(reply)[0] == status
    with ags.open_store(url) as other:  # a new object
        assert other.get("many").append_many(events[2000:2010]) == list(range(2001, 2011))
        assert other.get("many").latest_seq == 2501


def build_version_2(url: str, prefix: str) -> list[Event]:
    """A store as key layout version 2 wrote it (docs/format.md before version 3): session
    ``two`` with three events, its ids in its own hash (``i``), its row holding the first
    event only and marked behind (``m:r``) at the second; returns the events."""
    import msgspec

    client = _client(url)
    t0 = 1_700_000_000_000_000
    events = [
        msgspec.structs.replace(Event.new("turn/start", TurnStart(), agent="bot"), seq=1),
        msgspec.structs.replace(
            Event.new("user/message", Message.user("a second invoice"), agent="bot"), seq=2
        ),
        msgspec.structs.replace(
            Event.new("assistant/message", Message.assistant("found it"), agent="bot"), seq=3
        ),
    ]
    base = f"{prefix}{{two}}:"
    catalog = f"{prefix}{{~catalog}}:"
    for event in events:
        client.xadd(base + "e", {"e": encode_event(event)}, id=f"{event.seq}-0")
    client.hset(base + "i", mapping={e.id: e.seq for e in events})
    client.hset(
        base + "s",
        mapping={
            "sid": "two",
            "life": "fedcba9876543210",
            "last": 3,
            "created": t0,
            "updated": t0 + 2,
            "size": 300,
            "v": 3,
            "cs": 1,
            "turns": 1,
            "status": "live",
            "agents": msgspec.msgpack.encode(["bot"]),
            "tags": msgspec.msgpack.encode([]),
        },
    )
    packed = pack(["live", "", "", [], ["bot"]])
    client.hset(catalog + "x", "two", pack(["1", packed]))
    client.zadd(catalog + "z:u", {"two": t0})
    client.zadd(catalog + "z:c", {"two": t0})
    client.zadd(catalog + "z:i", {"two": 0})
    client.sadd(catalog + "f:status:live", "two")
    client.sadd(catalog + "f:user:", "two")
    client.sadd(catalog + "f:tenant:", "two")
    client.sadd(catalog + "f:agent:bot", "two")
    client.hset(catalog + "m:r", "two", 3)
    client.set(f"{prefix}{{~meta}}:layout", 2)
    return events


def test_a_version_2_store_loads_and_keeps_its_sessions_ids_where_they_are(
    prefixes: list[str],
) -> None:
    url = redis_url(prefixes)
    prefix = prefixes[-1]
    events = build_version_2(url, prefix)
    client = _client(url)
    with ags.open_store(url) as store:
        assert client.get(f"{prefix}{{~meta}}:layout") == b"3"
        [info] = store.list(where={"agent": "bot"})  # the row caught up from the log
        assert (info.id, info.messages, info.turns, info.last_seq) == ("two", 2, 1, 3)
        assert _found(store, "invoice") == [("two", 2)]
        session = store.get("two")
        assert [e.seq for e in session.read()] == [1, 2, 3]
        # An id the session stored (in its ``i`` hash) is recognised, by a new object too.
        assert session.append_many(events[1:]) == [2, 3]
        with ags.open_store(url) as other:
            assert other.get("two").append_many([events[2]]) == [3]
        end = Event.new("turn/end", TurnEnd(steps=0), agent="bot")
        assert session.append(end) == 4
        with ags.open_store(url) as other:
            assert other.get("two").append_many([end]) == [4]
        assert client.hget(f"{prefix}{{two}}:i", end.id) == b"4"  # still its ids' hash
        assert client.hget(f"{prefix}{{two}}:s", "ids") is None
        [info] = store.list(order="id")
        assert (info.messages, info.turns, info.status, info.last_seq) == (2, 1, "idle", 4)
        assert _listed(store) == _rebuilt(store)


def test_a_plain_list_places_a_session_marked_behind_by_its_latest_append(
    prefixes: list[str],
) -> None:
    """An append to a row already behind its log leaves the session's place in the list
    order (``z:u``) as it was; a plain ``list()`` places the marked sessions by their own
    times, and a catch-up moves them."""
    import datetime as dt

    import msgspec

    url = redis_url(prefixes)
    prefix = prefixes[-1]
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)

    def at(minute: int, kind: str = "user") -> Event:
        return msgspec.structs.replace(EVENTS[kind]("bot"), time=t0 + dt.timedelta(minutes=minute))

    with ags.open_store(url) as store:
        a, b, c = store.get("a"), store.get("b"), store.get("c")
        a.append(at(0, "start"))  # a's row
        a.append(at(1))  # behind: marked, placed at minute 1
        b.append(at(2, "start"))
        c.append(at(3, "start"))
        a.append(at(4))  # a row already behind: its place is left
        a.append(at(5))
        score = _client(url).zscore(f"{prefix}{{~catalog}}:z:u", "a")
        assert score == (t0 + dt.timedelta(minutes=1)).timestamp() * 1e6
        for limit, offset, ids in ((1, 0, ["a"]), (2, 0, ["a", "c"]), (2, 1, ["c", "b"])):
            assert [i.id for i in store.list(limit=limit, offset=offset)] == ids
        assert [i.id for i in store.list()] == ["a", "c", "b"]
        store.catch_up_catalog()
        assert _marks(url, prefix, "r") == {}
        score = _client(url).zscore(f"{prefix}{{~catalog}}:z:u", "a")
        assert score == (t0 + dt.timedelta(minutes=5)).timestamp() * 1e6
        assert [i.id for i in store.list(limit=2)] == ["a", "c"]
    with ags.open_store(url, catalog=False) as plain:  # no marks: every append places it
        d = plain.get("d")
        d.append(at(6, "start"))
        d.append(at(7))
        d.append(at(8))
        assert [i.id for i in plain.list(limit=2)] == ["d", "a"]
