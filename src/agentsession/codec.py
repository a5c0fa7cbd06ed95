"""The one byte boundary: every JSON value agentsession stores or prints passes through here.

:func:`encode` and :func:`decode` turn structs and plain JSON data into compact UTF-8 JSON and
back; :mod:`agentsession.events` builds the event line format (``encode_event`` and friends) on
the same encoder. Nothing else in the package calls ``msgspec.json`` or ``json`` directly.

Encryption at rest (:mod:`agentsession.crypto`) seals each event's payload bytes in the
session's append pipeline, before a backend sees them, and opens them after a backend returns
them, so backends only ever store opaque payload bytes.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json as _json
import re
from typing import Any, Final, TypeVar, overload

import msgspec

from .errors import UsageError

__all__ = ["MAX_JSON_DEPTH", "check_json", "decode", "encode", "pretty", "utcnow"]

MAX_JSON_DEPTH = 256
"""Deepest nesting of arrays and objects a stored JSON value may have. Readers decode with the
interpreter's recursion limit shared with their own call stack; a bound well below it means
that whatever was acknowledged can always be read back."""

T = TypeVar("T")

encoder = msgspec.json.Encoder()
"""The shared encoder (module-private use: the event line format reuses it)."""
sorted_encoder = msgspec.json.Encoder(order="sorted")
"""An encoder that writes object keys in sorted order (canonical forms, fingerprints)."""
_decoders: dict[Any, msgspec.json.Decoder[Any]] = {}
_Buffer = bytes | memoryview | str | msgspec.Raw


def _decoder(type_: Any) -> msgspec.json.Decoder[Any]:
    dec = _decoders.get(type_)
    if dec is None:
        dec = _decoders[type_] = msgspec.json.Decoder(type_)
    return dec


def fallback_dumps(obj: Any) -> bytes:
    """JSON of ``obj`` with every non-ASCII character escaped (the path for lone surrogates).

    Only reached for strings holding lone surrogates, which UTF-8 cannot carry: the standard
    library escapes them as ``\\udXXX``, which is valid JSON and reads back unchanged.
    """
    return _json.dumps(msgspec.to_builtins(obj), ensure_ascii=True, separators=(",", ":")).encode(
        "ascii"
    )


def encode(obj: Any, *, sort_keys: bool = False) -> bytes:
    """Encode ``obj`` (a struct, or plain JSON data) as compact UTF-8 JSON.

    With ``sort_keys`` the keys of every object are written in sorted order, so equal data
    always gives equal bytes.
    """
    try:
        return (sorted_encoder if sort_keys else encoder).encode(obj)
    except RecursionError:
        raise UsageError(
            f"cannot encode a value nested deeper than the interpreter allows "
            f"(stored JSON may nest at most {MAX_JSON_DEPTH} levels)"
        ) from None
    except UnicodeEncodeError:
        if sort_keys:
            data = msgspec.to_builtins(obj)
            return _json.dumps(
                data, ensure_ascii=True, separators=(",", ":"), sort_keys=True
            ).encode("ascii")
        return fallback_dumps(obj)


@overload
def decode(buf: _Buffer, type_: type[T]) -> T: ...
@overload
def decode(buf: _Buffer, type_: None = None) -> Any: ...
def decode(buf: _Buffer, type_: Any = None) -> Any:
    """Decode JSON into ``type_`` (plain JSON data when ``type_`` is None).

    Raises :class:`msgspec.DecodeError` (a ``ValueError``) when the bytes are not valid JSON of
    that shape.
    """
    try:
        return _decoder(type_ if type_ is not None else Any).decode(buf)
    except msgspec.DecodeError:
        pass
    except RecursionError:
        raise TooDeep(TOO_DEEP) from None
    # msgspec refuses JSON escapes of lone surrogates; the standard library reads them.
    try:
        obj = _json.loads(buf if isinstance(buf, (bytes, str)) else bytes(buf))
    except RecursionError:
        raise TooDeep(TOO_DEEP) from None
    except ValueError:
        raise msgspec.DecodeError("JSON is malformed") from None
    if type_ is None:
        return obj
    try:
        return msgspec.convert(obj, type_)
    except RecursionError:
        raise TooDeep(TOO_DEEP) from None
    except UnicodeError as exc:  # a lone surrogate where the type wants text UTF-8 can carry
        raise msgspec.ValidationError(str(exc)) from None


TOO_DEEP: Final = "JSON is nested too deeply to decode"
"""The message of :class:`TooDeep`."""


class TooDeep(msgspec.DecodeError):
    """A value nested beyond what the decoders handle: whole JSON, but not data agentsession
    wrote (it refuses to store anything nested that deep)."""


_raw_checker = msgspec.json.Decoder(msgspec.Raw)
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
_NOT_MARKS = bytes(b for b in range(256) if b not in b"[{\n\r")


def pretty(raw: bytes, indent: int = 2) -> bytes:
    """The JSON text ``raw`` (as :func:`encode` writes it) indented for people to read. Text
    holding a lone surrogate, which msgspec does not read back, keeps its escape."""
    try:
        return msgspec.json.format(raw, indent=indent)
    except msgspec.DecodeError:
        return _json.dumps(decode(raw), indent=indent).encode("ascii")


def json_depth(raw: bytes) -> int:
    """How deeply arrays and objects nest in the JSON text ``raw``: exact when above
    :data:`MAX_JSON_DEPTH`, otherwise a cheap upper bound that does not exceed it."""
    if len(raw) <= 2 * MAX_JSON_DEPTH:
        return len(raw) // 2  # every level takes two bytes
    opening = raw.count(b"[") + raw.count(b"{")
    if opening <= MAX_JSON_DEPTH:
        return opening
    brackets = _JSON_STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets)), default=0)


def check_json(
    raw: bytes, what: str, decoder: msgspec.json.Decoder[Any] | None = None
) -> bytes:
    """``raw`` when it is exactly one JSON value fit to store: well-formed, on one line, nested
    at most :data:`MAX_JSON_DEPTH` deep and, with ``decoder``, valid for its type. Pretty-printed
    JSON (raw newlines between tokens) is re-encoded compactly. Raises
    :class:`~agentsession.errors.UsageError` naming ``what``."""
    try:
        (decoder or _raw_checker).decode(raw)
    except msgspec.ValidationError as exc:
        raise UsageError(f"{what} is not valid: {exc}") from None
    except msgspec.DecodeError as exc:
        try:  # the codec also writes escaped lone surrogates, which msgspec refuses
            value = _json.loads(raw)
        except (ValueError, RecursionError):
            raise UsageError(f"{what} is not valid JSON: {exc}") from None
        if decoder is not None:
            try:
                msgspec.convert(value, decoder.type)
            except (msgspec.ValidationError, ValueError) as invalid:
                raise UsageError(f"{what} is not valid: {invalid}") from None
    except RecursionError:
        raise UsageError(f"{what} is nested too deeply") from None
    except UsageError as exc:  # raised by a payload struct's own checks
        raise UsageError(f"{what} is not valid: {exc}") from None
    # Raw newlines are whitespace between tokens (strings escape them). Each level takes two
    # bytes ("[" and "]"), so only longer values can be too deep: one pass over such a value
    # keeps the bytes that open a level and the newlines, and only a value with more of them
    # than MAX_JSON_DEPTH has its depth measured.
    if len(raw) <= 2 * MAX_JSON_DEPTH:
        marks = raw
    else:
        marks = raw.translate(None, _NOT_MARKS)
        if len(marks) > MAX_JSON_DEPTH and json_depth(raw) > MAX_JSON_DEPTH:
            raise UsageError(f"{what} is nested deeper than {MAX_JSON_DEPTH} levels")
    if marks.find(10) >= 0 or marks.find(13) >= 0:
        return encode(decode(raw))
    return raw


_now = _dt.datetime.now
_UTC = _dt.timezone.utc


def utcnow() -> _dt.datetime:
    """The current time, timezone-aware UTC."""
    return _now(_UTC)
