"""The SQL stores list and expire in their queries (their catalogs' ``list_page`` and
``expired_ids``): the answers equal ``agentsession.catalog.page_of`` and ``expired_among``,
which filter, sort and slice every session (the catalog's ``list_all``) in Python, also
for times whose stored text does not sort as the instants do (other offsets than UTC, a
fraction or none, sub-millisecond steps) and for sessions appended at the same instant."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentsession import BaseStore, Event, open_store
from agentsession.catalog import expired_among, page_of

from .test_conformance_postgres import DSN, drop_schemas, new_schema_name, url_with_schema

UTC = dt.timezone.utc
BASE = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)

# (id, time of its one event): instants that string order gets wrong, and ties.
SESSIONS = [
    ("whole", BASE),
    ("fraction", BASE + dt.timedelta(microseconds=500_000)),  # "...00.5Z" < "...00Z" as text
    ("sub-ms", BASE + dt.timedelta(microseconds=500_300)),
    ("sub-ms-2", BASE + dt.timedelta(microseconds=500_301)),
    ("east", (BASE + dt.timedelta(seconds=1)).astimezone(dt.timezone(dt.timedelta(hours=5)))),
    ("west", (BASE - dt.timedelta(seconds=1)).astimezone(dt.timezone(dt.timedelta(hours=-7)))),
    ("tie:b", BASE + dt.timedelta(seconds=2)),
    ("tie:a", BASE + dt.timedelta(seconds=2)),
    ("tie:c", (BASE + dt.timedelta(seconds=2)).astimezone(dt.timezone(dt.timedelta(hours=1)))),
    ("late", BASE + dt.timedelta(days=400)),
]


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseStore]:
    schema = ""
    if request.param == "postgres":
        if not DSN:
            pytest.skip("set AGENTSESSION_TEST_POSTGRES_DSN to run the PostgreSQL tests")
        schema = new_schema_name()
        url = url_with_schema(schema)
    else:
        url = f"sqlite:///{tmp_path}/s.db"
    opened = open_store(url)
    try:
        for sid, when in SESSIONS:
            opened.get(sid).append(Event(type="test/n", time=when))
        yield opened
    finally:
        opened.close()
        if schema:
            drop_schemas([schema])


def test_list_pages_equal_the_default_computed_from_every_session(store: BaseStore) -> None:
    expected_order = [
        "late", "tie:c", "tie:b", "tie:a", "east", "sub-ms-2", "sub-ms", "fraction", "whole",
        "west",
    ]  # fmt: skip
    assert [i.id for i in store.list()] == expected_order
    for prefix in (None, "", "tie:", "sub", "w", "none"):
        for limit in (None, 0, 1, 3, 20):
            for offset in (0, 2, 9, 30):
                pushed = store.list(prefix=prefix, limit=limit, offset=offset)
                every = store._catalog.list_all()  # type: ignore[attr-defined]
                default = page_of(every, prefix, limit, offset)
                assert pushed == default, (prefix, limit, offset)


@pytest.mark.parametrize("seconds", [-2, 0, 0.5, 0.5003, 0.500301, 1, 2, 3, 86400 * 401])
def test_expired_ids_equal_the_default_at_every_cutoff(store: BaseStore, seconds: float) -> None:
    cutoff = BASE + dt.timedelta(seconds=seconds)
    catalog = store._catalog
    pushed = catalog.expired_ids(cutoff)
    every = catalog.list_all()  # type: ignore[attr-defined]
    assert sorted(pushed) == sorted(expired_among(every, catalog.last_append, cutoff))
    assert sorted(pushed) == sorted(sid for sid, when in SESSIONS if when < cutoff)


def test_an_unreadable_time_is_a_corrupt_log_when_listing_sqlite(tmp_path: Path) -> None:
    import sqlite3

    from agentsession import CorruptLogError

    path = tmp_path / "s.db"
    with open_store(f"sqlite:///{path}", ttl=dt.timedelta(hours=1)) as store:
        store.get("s").append(Event(type="test/n", time=BASE))
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE events SET time = 'not a time'")
    conn.close()
    # Without the catalog, the listing reads the events' times.
    with open_store(f"sqlite:///{path}", ttl=dt.timedelta(hours=1), catalog=False) as store:
        with pytest.raises(CorruptLogError, match="unreadable time"):
            store.list()
        with pytest.raises(CorruptLogError, match="unreadable time"):
            store.list(limit=1)
        with pytest.raises(CorruptLogError, match="unreadable time"):
            store.expired()
    # With it, the listing reads the catalog's row, made when the event was appended.
    with open_store(f"sqlite:///{path}", ttl=dt.timedelta(hours=1)) as store:
        assert [(i.id, i.updated_at) for i in store.list()] == [("s", BASE)]
