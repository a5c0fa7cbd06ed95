"""Arrays sent to PostgreSQL already in its binary form.

An append statement takes each column of its events as one array parameter (``unnest``).
psycopg adapts a Python list item by item in Python, first looking through it to choose the
items' type (and a list of empty strings or of NULLs only is sent as text, each item escaped),
which cost more client CPU than the rest of the append. The arrays here are built in one pass
into the binary form PostgreSQL's ``array_recv`` reads: the header (one dimension, whether
any item is NULL, the items' type, the length, the lower bound 1), then each item's length
(-1: NULL) and bytes. Each kind is a ``bytes`` subclass whose psycopg dumper sends it as it
is, binary, with the array type's oid; the dumpers are registered in psycopg's global
adapters (:data:`psycopg.adapters`), which only these private classes use, so every connection
the store makes, sync or async, sends them.

Items are what the columns take: text that PostgreSQL can hold (the caller checked it), bytes,
and timezone-aware datetimes (microseconds since 2000-01-01 UTC, PostgreSQL's epoch).
"""

from __future__ import annotations

import datetime as _dt
import struct
from collections.abc import Sequence
from typing import Any, Final

import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format

__all__ = ["BinaryArray", "bytea_array", "text_array", "timestamptz_array"]

_HEAD: Final = struct.Struct("!iiiii")
"""One dimension, whether an item is NULL, the items' type, the length, the lower bound."""
_LENGTH: Final = struct.Struct("!i")
_NULL: Final = _LENGTH.pack(-1)
_MICROS: Final = struct.Struct("!q")
"""A timestamptz item: its microseconds since :data:`_EPOCH`."""
_EPOCH: Final = _dt.datetime(2000, 1, 1, tzinfo=_dt.timezone.utc)
_ONE_MICRO: Final = _dt.timedelta(microseconds=1)


class BinaryArray(bytes):
    """An array in PostgreSQL's binary form (see the module docstring); each subclass is one
    array type: ``oid`` is the array type's, ``item_oid`` its items'."""

    oid = 0
    item_oid = 0


class _TextArray(BinaryArray):
    oid, item_oid = 1009, 25


class _ByteaArray(BinaryArray):
    oid, item_oid = 1001, 17


class _TimestamptzArray(BinaryArray):
    oid, item_oid = 1185, 1184


def _items(kind: type[BinaryArray], items: Sequence[bytes | None]) -> BinaryArray:
    item_oid = kind.item_oid
    if not items:
        return kind(struct.pack("!iii", 0, 0, item_oid))
    parts = [b""]
    nulls = 0
    pack = _LENGTH.pack
    for item in items:
        if item is None:
            nulls = 1
            parts.append(_NULL)
        else:
            parts.append(pack(len(item)))
            parts.append(item)
    parts[0] = _HEAD.pack(1, nulls, item_oid, len(items), 1)
    return kind(b"".join(parts))


def text_array(items: Sequence[str | None]) -> BinaryArray:
    """A ``text[]`` of ``items`` (each one PostgreSQL's TEXT can hold: checked by the
    caller)."""
    return _items(_TextArray, [None if item is None else item.encode("utf-8") for item in items])


def bytea_array(items: Sequence[bytes | None]) -> BinaryArray:
    """A ``bytea[]`` of ``items``."""
    return _items(_ByteaArray, items)


def timestamptz_array(items: Sequence[_dt.datetime]) -> BinaryArray:
    """A ``timestamptz[]`` of ``items`` (timezone-aware)."""
    pack = _MICROS.pack
    micros = [pack((item - _EPOCH) // _ONE_MICRO) for item in items]
    return _items(_TimestamptzArray, micros)


def _dumper(kind: type[BinaryArray]) -> type[Dumper]:
    class _Sent(Dumper):
        format = Format.BINARY
        oid = kind.oid

        def dump(self, obj: Any) -> bytes:
            return obj  # type: ignore[no-any-return]  # built by this module: bytes

    _Sent.__name__ = _Sent.__qualname__ = f"{kind.__name__.lstrip('_')}Dumper"
    return _Sent


for _kind in (_TextArray, _ByteaArray, _TimestamptzArray):
    psycopg.adapters.register_dumper(_kind, _dumper(_kind))
