"""The arrays the PostgreSQL appends send in binary form
(:mod:`agentsession.backends.postgres.binary`) read back on the server as the lists they were
built from, whatever their items: text PostgreSQL can hold (quotes, braces, backslashes,
empty strings, the word NULL, non-ASCII), bytes (empty, NUL bytes), NULLs, timestamps with
any offset and microsecond, empty arrays; with psycopg's prepared statements and without.

Needs the server named by ``AGENTSESSION_TEST_POSTGRES_DSN``; skipped without it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .test_conformance_postgres import DSN, SKIP_REASON

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not DSN, reason=SKIP_REASON)]

if DSN:
    import psycopg

    from agentsession.backends.postgres.binary import (
        bytea_array,
        text_array,
        timestamptz_array,
    )


@pytest.fixture(scope="module")
def conn() -> Iterator[Any]:
    with psycopg.connect(DSN, autocommit=True) as connection:
        connection.execute("SET TimeZone TO 'UTC'")
        yield connection


def _round_trip(conn: Any, cast: str, value: Any, prepare: bool) -> Any:
    row = psycopg.RawCursor(conn).execute(f"SELECT $1::{cast}", (value,), prepare=prepare)
    fetched = row.fetchone()
    assert fetched is not None
    return fetched[0]


_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=40)
_ITEMS = st.lists(st.one_of(st.none(), _TEXT, st.sampled_from(["", "NULL", '"{},\\ x'])))
_TIMES = st.datetimes(
    min_value=dt.datetime(2, 1, 1),  # year 1 with an offset east of UTC is year 0 there
    max_value=dt.datetime(9999, 12, 30),
    timezones=st.sampled_from(
        [dt.timezone.utc, dt.timezone(dt.timedelta(hours=5, minutes=30)), dt.timezone.min]
    ),
)


_BUILDS: Any = {}  # filled below, when the server is there (the module imports psycopg)
if DSN:
    _BUILDS.update(text=text_array, bytea=bytea_array, timestamptz=timestamptz_array)


@pytest.mark.parametrize(
    ("kind", "items"),
    [
        ("text", _ITEMS),
        ("bytea", st.lists(st.one_of(st.none(), st.binary(max_size=40)))),
        ("timestamptz", st.lists(_TIMES)),
    ],
)
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), prepare=st.booleans())
def test_an_array_reads_back_as_its_items(
    conn: Any, kind: str, items: Any, data: st.DataObject, prepare: bool
) -> None:
    """Each kind of array reads back equal (timestamps: the same instants, in UTC)."""
    values = data.draw(items)
    assert _round_trip(conn, f"{kind}[]", _BUILDS[kind](values), prepare) == values


def test_the_arrays_unnest_together_as_an_append_sends_them(conn: Any) -> None:
    """As in the append statement: several arrays in one ``unnest``, rows in order, through a
    placeholder psycopg converts (``%s``) as well as a raw one."""
    when = [
        dt.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=dt.timezone.utc),
        dt.datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.timezone(dt.timedelta(hours=-8))),
    ]
    rows = conn.execute(
        "SELECT * FROM unnest(%s::text[], %s::bytea[], %s::timestamptz[]) WITH ORDINALITY",
        (text_array(["a", None]), bytea_array([None, b"\x00"]), timestamptz_array(when)),
    ).fetchall()
    assert rows == [("a", None, when[0], 1), (None, b"\x00", when[1], 2)]
