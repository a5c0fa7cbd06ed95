"""Safe, injective file names for session ids and routing keys.

``safe_name`` turns any string into a name that is readable for the common ids
(``slack:C001:t:17.9`` becomes ``slack_C001_t_17.9``) and safe to join onto a directory:

* ``[A-Za-z0-9-]`` are kept; ``:`` becomes ``_``;
* ``.`` is kept, except at the start or right after another ``.`` (escaped as ``%2E``), so the
  name is never ``.`` or ``..`` and never contains ``..``;
* every other character becomes ``%XX`` per UTF-8 byte (``_`` is ``%5F``, ``/`` is ``%2F``,
  ``%`` is ``%25``), so two different inputs never give the same name;
* a name longer than the limit is cut and given a ``~`` plus 16 hex digits of its SHA-256
  (``~`` never appears otherwise), which keeps it within file-name limits and still distinct.

``unsafe_name`` reverses it, returning ``None`` for a cut (hashed) name.
"""

from __future__ import annotations

import hashlib
import re

_KEEP = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")
MAX_NAME_BYTES = 200
"""Longest name ``safe_name`` returns (file systems allow 255 bytes; suffixes need room)."""
_ESCAPE = re.compile(r"%([0-9A-F]{2})")


def safe_name(key: str, *, max_bytes: int = MAX_NAME_BYTES) -> str:
    """The injective, traversal-free file-name form of ``key`` (``""`` for ``""``)."""
    out: list[str] = []
    previous = "."  # a dot at the very start is escaped like a dot after a dot
    for ch in key:
        if ch in _KEEP:
            out.append(ch)
        elif ch == ":":
            out.append("_")
        elif ch == "." and previous != ".":
            out.append(".")
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
        previous = ch
    name = "".join(out)
    if len(name) <= max_bytes:
        return name
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    head = name[: max_bytes - 17]
    # Never leave half an escape at the cut.
    cut = head.rfind("%", len(head) - 2)
    if cut != -1:
        head = head[:cut]
    return f"{head}~{digest}"


def unsafe_name(name: str) -> str | None:
    """The key ``safe_name`` was given, or ``None`` when the name was cut and hashed or is not
    a name ``safe_name`` produces."""
    if "~" in name or "\x00" in name:
        return None
    raw = _ESCAPE.sub(lambda m: f"\x00{m.group(1)}", name.replace("_", ":"))
    if "\x00" not in raw:
        return raw if safe_name(raw) == name else None
    data = bytearray()
    i = 0
    while i < len(raw):
        if raw[i] == "\x00":
            data.append(int(raw[i + 1 : i + 3], 16))
            i += 3
        else:
            data.extend(raw[i].encode("utf-8"))
            i += 1
    try:
        key = data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None
    return key if safe_name(key) == name else None
