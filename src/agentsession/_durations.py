"""Go duration strings (``"30m"``, ``"1h30m"``, ``"1.5s"``), as Go's ``time.ParseDuration``
reads them, for options ported from Go configuration (agentkit's ``cacheIdleTTL``)."""

from __future__ import annotations

import datetime as _dt
import re

from .errors import UsageError

__all__ = ["as_timedelta", "parse_go_duration"]

_UNITS_US = {
    "ns": 0.001,
    "us": 1.0,
    "\u00b5s": 1.0,  # micro sign
    "\u03bcs": 1.0,  # Greek mu
    "ms": 1000.0,
    "s": 1_000_000.0,
    "m": 60_000_000.0,
    "h": 3_600_000_000.0,
}
_ELEMENT = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")


def parse_go_duration(text: str) -> _dt.timedelta:
    """The ``timedelta`` a Go duration string spells: an optional sign, then one or more
    decimal numbers each with a unit (``ns``, ``us``/``µs``, ``ms``, ``s``, ``m``, ``h``), or
    ``"0"``. Raises :class:`~agentsession.errors.UsageError` naming the string otherwise
    (nanoseconds below a microsecond are dropped: ``timedelta`` holds microseconds)."""
    body = text.strip()
    sign = 1
    if body[:1] in ("+", "-"):
        sign = -1 if body[0] == "-" else 1
        body = body[1:]
    if body == "0":
        return _dt.timedelta(0)
    total = 0.0
    pos = 0
    while pos < len(body):
        match = _ELEMENT.match(body, pos)
        if match is None:
            break
        total += float(match.group(1)) * _UNITS_US[match.group(2)]
        pos = match.end()
    if not body or pos != len(body):
        raise UsageError(
            f"invalid duration {text!r}: expected a Go duration such as '45s', '30m' or "
            "'1h30m' (units ns, us, ms, s, m, h)"
        )
    return _dt.timedelta(microseconds=sign * int(total))


def as_timedelta(value: object, option: str) -> _dt.timedelta | None:
    """An option given as a ``timedelta``, a Go duration string or None; ``""`` is None (Go's
    empty setting: disabled). Anything else raises :class:`~agentsession.errors.UsageError`
    naming ``option``."""
    if value is None or isinstance(value, _dt.timedelta):
        return value
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            return parse_go_duration(value)
        except UsageError as exc:
            raise UsageError(f"{option}: {exc}") from None
    raise UsageError(
        f"{option} must be a datetime.timedelta, a Go duration string ('30m') or None, "
        f"not {type(value).__name__}"
    )
