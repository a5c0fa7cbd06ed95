"""The catalog and search rules every backend that keeps an index holds, checked against the
reference (the memory store, :class:`~agentsession.indexing.MemoryIndex`) on the same appended
data: one abstract pytest class, :class:`CatalogConformance`, that a backend's test module
subclasses with its ``make_store``.

Listing pages (membership, order, cursors), totals, search membership, snippets and flags must
be the reference's; search ranks may differ (hits are compared as sets)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ..contract import SessionInfo
from ..errors import UsageError
from ..events import Event, Usage
from ..listing import Hit
from ..messages import Message, ToolCall, ToolResult
from ..store import BaseStore, open_store

__all__ = ["CatalogConformance", "populate"]

BASE = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
SECRET = "zanzibarquux"
"""A word the data holds that no encrypted store's files may."""

_WORDS = ("Straße", "café", "foo_bar", "naïve", "ﬁle", "日本語", "alpha", "beta", "Gamma", "x2")


class _Clock:
    """A clock that stands still (events the pipeline stamps share one time: the tie is broken
    by id, the same on every backend)."""

    def __call__(self) -> dt.datetime:
        return BASE


def populate(store: BaseStore, sessions: int = 12) -> None:
    """Append the same data to ``store`` (deterministic: times given, or the standing clock's):
    messages in several languages, tool calls and results, usage on two days by two agents,
    users, titles, tags, tenants, a rewind, a compaction and a deleted session."""
    for i in range(sessions):
        session = store.get(f"s{i:02d}")
        time = BASE + dt.timedelta(minutes=i * 7 % sessions)
        events = []
        for j in range(4):
            text = " ".join(_WORDS[(i * 3 + j * 5 + k) % len(_WORDS)] for k in range(4))
            if i == 3 and j == 1:
                text += f" {SECRET}"
            kind, message = (
                ("user/message", Message.user(f"Q{j} {text}"))
                if j % 2 == 0
                else ("assistant/message", Message.assistant(f"A{j} {text}"))
            )
            events.append(
                Event.new(
                    kind,
                    message,
                    agent="" if j % 2 == 0 else ("coder" if i % 2 else "planner"),
                    user=f"user{i % 3}" if j == 0 else "",
                    time=time + dt.timedelta(seconds=j),
                )
            )
        events.append(
            Event.new(
                "tool/call",
                ToolCall(id=f"c{i}", name="lookup_weather", arguments={"city": "Paris"}),
                time=time + dt.timedelta(seconds=5),
            )
        )
        events.append(
            Event.new(
                "tool/result",
                ToolResult(call_id=f"c{i}", name="lookup_weather", content="sunny café"),
                time=time + dt.timedelta(seconds=6),
            )
        )
        events.append(
            Event.new(
                "usage",
                Usage(input_tokens=100 + i, output_tokens=10, model="m", cost=0.5),
                agent="coder" if i % 2 else "planner",
                time=time + dt.timedelta(days=i % 2, seconds=7),
            )
        )
        if i % 2:
            session.append_many(events)
        else:
            for event in events:
                session.append(event)
        if i % 3 == 0:
            session.update(title=f"Title {i}", tags=["red", "blue"][: i % 2 + 1])
        if i % 4 == 0:
            session.update(tenant=f"t{i % 8}")
    session = store.get("turns")
    for n in range(4):
        with session.turn() as turn:
            turn.user(f"question {n} alpha")
            turn.assistant(f"answer {n} beta")
    session.rewind(to_seq=12)  # turn 3 rewound
    session.compact("summary alpha", keep_turns=1)  # turns 0 and 1 compacted away
    with session.turn() as turn:
        turn.user("after the compaction alpha")
    store.get("gone").append(Event.new("user/message", Message.user("gone alpha")))
    store.delete("gone")


def _sizeless(infos: list[SessionInfo]) -> list[SessionInfo]:
    """``infos`` without their sizes (a file store knows them, the reference does not)."""
    return [msgspec.structs.replace(info, size=0) for info in infos]


def _hits(hits: list[Hit]) -> set[tuple[str, int, str, str, bool, bool]]:
    return {(h.session_id, h.seq, h.role, h.snippet, h.rewound, h.compacted) for h in hits}


def _walk(store: BaseStore, limit: int, **options: Any) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        page = store.list(limit=limit, cursor=cursor, **options)
        ids += [info.id for info in page]
        cursor = page.next_cursor
        if cursor is None:
            return ids


class CatalogConformance:
    """Subclass per backend and implement :meth:`make_store`; ``encryption_key`` set runs the
    class on an encrypted store (compared with the plain reference)."""

    encryption_key: bytes | None = None
    """The store's key (None: not encrypted)."""

    def make_store(self, tmp_path: Path, **options: Any) -> BaseStore:
        """A store keeping its data under ``tmp_path``, with ``options`` passed on."""
        raise NotImplementedError

    def stored_bytes(self, tmp_path: Path) -> bytes:
        """Every byte the store keeps under ``tmp_path`` (what must hold no plaintext when it
        is encrypted)."""
        return b"".join(p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file())

    def _make(self, tmp_path: Path, **options: Any) -> BaseStore:
        options.setdefault("clock", _Clock())
        if self.encryption_key is not None:
            options.setdefault("key", self.encryption_key)
        return self.make_store(tmp_path, **options)

    @pytest.fixture
    def pair(self, tmp_path: Path) -> Iterator[tuple[BaseStore, BaseStore]]:
        """The reference and the store under test, holding the same data."""
        reference = open_store("memory:", clock=_Clock())
        store = self._make(tmp_path / "store")
        try:
            populate(reference)
            populate(store)
            yield reference, store
        finally:
            store.close()
            reference.close()

    # -- listing ----------------------------------------------------------------------------

    @pytest.mark.parametrize(
        "options",
        [
            {},
            {"order": "created"},
            {"order": "id"},
            {"where": {"tag": "red"}},
            {"where": {"tags": ["red", "blue"]}},
            {"where": {"tenant": ["t0", "t4"]}},
            {"where": {"user": "user1", "agent": "coder"}},
            {"where": {"agent": ["planner"]}, "order": "id"},
            {"where": {"status": "idle"}},
            {"where": {"updated": (BASE + dt.timedelta(minutes=3), None)}},
            {"where": {"created": (None, BASE + dt.timedelta(minutes=5))}},
            {"prefix": "s0"},
            {"where": {"id": ["s01", "s05", "nope"]}},
        ],
    )
    def test_pages_are_the_references(
        self, pair: tuple[BaseStore, BaseStore], options: dict[str, Any]
    ) -> None:
        reference, store = pair
        if "title" in options.get("where", {}) and self.encryption_key is not None:
            pytest.skip("titles are sealed")
        expected = list(reference.list(limit=None, **options))
        got = list(store.list(limit=None, **options))
        assert [i.id for i in got] == [i.id for i in expected]
        for mine, theirs in zip(got, expected, strict=True):
            assert msgspec.structs.replace(mine, size=0) == msgspec.structs.replace(
                theirs, size=0
            )
        for limit in (1, 3, 50):
            assert _walk(store, limit, **options) == [i.id for i in expected]

    def test_title_filter_is_the_references(self, pair: tuple[BaseStore, BaseStore]) -> None:
        reference, store = pair
        where = {"title": "TITLE"}
        if self.encryption_key is not None:
            with pytest.raises(UsageError, match="sealed"):
                store.list(where=where)
            return
        assert [i.id for i in store.list(where=where)] == [
            i.id for i in reference.list(where=where)
        ]

    def test_a_cursor_stays_put_while_sessions_are_appended(
        self, pair: tuple[BaseStore, BaseStore]
    ) -> None:
        _, store = pair
        first = store.list(limit=4, order="id")
        store.get("s00").append(Event.new("user/message", Message.user("later")))
        second = store.list(limit=100, order="id", cursor=first.next_cursor)
        ids = [i.id for i in first] + [i.id for i in second]
        assert ids == sorted(ids) and len(ids) == len(set(ids))

    # -- totals -----------------------------------------------------------------------------

    @pytest.mark.parametrize("group_by", ["tenant", "user", "agent", "day"])
    def test_totals_are_the_references(
        self, pair: tuple[BaseStore, BaseStore], group_by: str
    ) -> None:
        reference, store = pair
        assert store.totals(group_by=group_by) == reference.totals(group_by=group_by)
        where = {"agent": "coder"}
        since = (BASE + dt.timedelta(days=1)).date()
        assert store.totals(group_by=group_by, where=where, since=since) == reference.totals(
            group_by=group_by, where=where, since=since
        )

    # -- search -----------------------------------------------------------------------------

    @pytest.mark.parametrize(
        "query",
        ["alpha", "strasse", "STRASSE café", "foo_bar", "file", "日本語", "naive gamma",
         "lookup_weather paris", "sunny", "question", "summary", "nothing_matches"],
    )
    def test_search_finds_the_references_hits(
        self, pair: tuple[BaseStore, BaseStore], query: str
    ) -> None:
        reference, store = pair
        expected = reference.search(query, limit=1000)
        got = store.search(query, limit=1000)
        assert _hits(got) == _hits(expected)

    def test_search_pages_hold_every_hit_once(self, pair: tuple[BaseStore, BaseStore]) -> None:
        reference, store = pair
        seen: list[tuple[str, int]] = []
        cursor = None
        while True:
            page = store.search("alpha", limit=4, cursor=cursor)
            seen += [(h.session_id, h.seq) for h in page]
            cursor = page.next_cursor
            if cursor is None:
                break
        assert len(seen) == len(set(seen))
        assert set(seen) == {(h.session_id, h.seq) for h in reference.search("alpha", limit=1000)}

    def test_search_filters_by_session_and_where(
        self, pair: tuple[BaseStore, BaseStore]
    ) -> None:
        reference, store = pair
        for options in ({"session_id": "s02"}, {"where": {"tag": "red"}},
                        {"where": {"tenant": "t4", "agent": "planner"}}):
            expected = reference.search("alpha", limit=1000, **options)
            assert _hits(store.search("alpha", limit=1000, **options)) == _hits(expected)

    def test_rewound_and_compacted_documents_are_flagged(
        self, pair: tuple[BaseStore, BaseStore]
    ) -> None:
        _, store = pair
        hits = store.search("alpha", session_id="turns", limit=100)
        assert any(h.rewound for h in hits)
        assert any(h.compacted for h in hits)
        assert any(not h.rewound and not h.compacted for h in hits)

    # -- changes ----------------------------------------------------------------------------

    def test_update_delete_and_a_new_life_are_the_references(
        self, pair: tuple[BaseStore, BaseStore]
    ) -> None:
        reference, store = pair
        store.list(limit=1)  # an index kept apart from the logs (JSONL's) is made by now
        for target in (reference, store):
            target.get("s01").update(title="", tags=["gold"], user="someone", tenant="t9")
            target.delete("s02")
            target.get("s02").append(
                Event.new("user/message", Message.user("born again alpha"), time=BASE)
            )
        assert _sizeless(store.list(limit=None)) == _sizeless(reference.list(limit=None))
        assert _hits(store.search("alpha", limit=1000)) == _hits(
            reference.search("alpha", limit=1000)
        )
        assert store.totals(group_by="tenant") == reference.totals(group_by="tenant")
        [info] = store.list(where={"tag": "gold"})
        assert (info.id, info.user, info.tenant) == ("s01", "someone", "t9")

    def test_reindex_gives_the_same_catalog(self, pair: tuple[BaseStore, BaseStore]) -> None:
        _, store = pair
        before = list(store.list(limit=None))
        hits = _hits(store.search("alpha", limit=1000))
        assert store.reindex() == len(before)
        assert list(store.list(limit=None)) == before
        assert _hits(store.search("alpha", limit=1000)) == hits

    def test_a_store_without_a_catalog_refuses_to_search(self, tmp_path: Path) -> None:
        store = self._make(tmp_path / "plain", catalog=False)
        try:
            store.get("a").append(Event.new("user/message", Message.user("alpha")))
            with pytest.raises(UsageError, match="catalog=False"):
                store.search("alpha")
        finally:
            store.close()

    # -- encryption -------------------------------------------------------------------------

    def test_an_encrypted_store_keeps_no_plaintext_and_shred_forgets(
        self, tmp_path: Path
    ) -> None:
        if self.encryption_key is None:
            pytest.skip("not an encrypted store")
        store = self._make(tmp_path / "enc")
        try:
            populate(store)
            assert [h.session_id for h in store.search(SECRET)] == ["s03"]
            assert store.search(SECRET)[0].snippet.count(f"[{SECRET}]") == 1
            store.get("s03").update(title=f"{SECRET} title", tags=[SECRET])
            assert [i.id for i in store.list(where={"tag": SECRET})] == ["s03"]
            store.shred("s03")
            assert list(store.search(SECRET)) == []
            [info] = store.list(where={"id": "s03"})
            assert (info.status, info.title, info.tags) == ("shredded", "", ())
        finally:
            store.close()
        data = self.stored_bytes(tmp_path / "enc")
        for secret in (SECRET, "lookup_weather", "Paris", "sunny"):
            assert secret.encode() not in data, secret
