"""LangGraph's checkpointer over any agentsession store (the ``langgraph`` extra).

::

    from langgraph.graph import StateGraph
    from agentsession.integrations.langgraph import AgentSessionSaver

    saver = AgentSessionSaver(store="sessions/")  # or "sqlite:///s.db", "postgresql://...", a store
    graph = builder.compile(checkpointer=saver)
    graph.invoke(inputs, {"configurable": {"thread_id": "ada"}})

:class:`AgentSessionSaver` is a ``langgraph.checkpoint.base.BaseCheckpointSaver`` with the
sync and async methods LangGraph calls (``put``, ``put_writes``, ``get_tuple``, ``list``,
``delete_thread``) and the extended ones its conformance suite detects (``copy_thread``,
``delete_for_runs``, ``prune``), on every backend (memory, JSONL, SQLite, PostgreSQL,
encrypted or not). The async methods run the sync ones in a worker thread.

**One thread, one session.** A thread is the session ``thread_prefix + thread_id`` (``lg:``
by default), so encryption, TTL, the turn lock, ``copy_store``, ``shred`` and ``delete``
apply to it as to any session. Its log holds, in the application namespace ``langgraph/``:

* ``langgraph/checkpoint``: one per ``put``: the namespace, the checkpoint's id and its
  parent's, the checkpoint without its channel values and the metadata (each as LangGraph's
  serializer writes them), and a blob for each channel version that is new in it
  (``new_versions``; the version most of them share, LangGraph giving every channel a
  super-step writes the same one, is stored once, as the checkpoint's ``v``, and left out of
  those blobs: earlier threads, each blob with its version, read as they were). A channel
  value is stored once per version, never again with each later checkpoint. A list value
  (the ``messages`` channel, any ``operator.add`` channel) that extends the channel's
  previous stored version is stored as a delta: the serialized bytes of the items added, and
  the version it extends, checked byte for byte (the new value's serialized items must start
  with the previous value's), so reading it back rebuilds exactly the bytes the full value
  would have had. A growing list so takes the bytes of its items
  once, not once per checkpoint (at least every :data:`SNAPSHOT_EVERY`-th version is stored
  whole). When the list's first items are the very objects the saver serialized for the
  previous version, unchanged since (a message's fields compared with a copy taken then), only
  the items after them are serialized: a ``put`` costs the new messages, not the whole list.
* ``langgraph/writes``: one per ``put_writes`` call: namespace, checkpoint id, task id and
  task path once, then each write's index, channel and value. (Threads written before hold a
  ``langgraph/write`` event per write instead, the call's writes in one atomic batch; they read
  as they were.)
* Bytes (checkpoints, metadata, values, writes) are stored deflated (zlib) when that makes
  them smaller (``z`` on the payload; ``z`` 2: with a preset dictionary, LangChain messages'
  field names for values and writes, a checkpoint's for checkpoints and metadata); threads
  written before either read as they were.
* ``langgraph/removed``: the checkpoints ``delete_for_runs`` and ``prune`` took out (their
  writes with them). Nothing is deleted from the log; ``delete_thread`` deletes the session.

**Exactly once.** Every event's id is derived from what it records: a checkpoint's from
(thread, namespace, checkpoint id), a call's writes from (thread, namespace, checkpoint id,
task id, each write's index), with a special write's (an error, an interrupt, a resume:
LangGraph's negative indexes, which replace an earlier one) value too. agentsession stores
an id once, so a retried ``put`` or ``put_writes``, from this process or another, stores
nothing again; reading keeps the first regular write of a (task, index) and the last special
one, as LangGraph's own savers do.

**Calls that overlap, one commit.** LangGraph saves in worker threads, and does not wait for
``put_writes``; a thread's calls that overlap are stored in one append (``_Writer``): a
super-step's writes wait briefly for the checkpoint's ``put`` that follows them, and both are
one commit. Each call returns only once its own events are stored.

**The typed mirror.** When a root-namespace checkpoint holds a new version of the ``messages``
channel (``messages_channel``), the messages in it that the thread has not recorded yet (by
message id) are appended in the same batch as agentsession's typed events
(:func:`agentsession.integrations.langchain.events_for`: ``user/message``,
``assistant/message`` with tool calls, ``tool/result``, ``usage``), so ``session.messages()``,
``agentsession show``, the viewer and the provider converters see the conversation. Each
message is recorded once, when it is first checkpointed; a message ``update_state`` replaces
in place, or one a time-travelled fork drops, stays in the mirror (the checkpoints are the
truth; the mirror is what was said). A message the mirror cannot hold (no JSON form) is left
out of it, with a warning.

**Reading.** Each saver keeps, per thread, an index of the log it read (the checkpoints, the
blobs' places, the writes) and brings it up to date with the events appended since (by any
process) at each read, so a read costs one catch-up plus the decoding of what it returns. A
``list`` decodes a list channel's delta chain item by item, once for the whole call: each
tuple gets a list of its own, holding the items (the message objects) the call decoded once.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import copy
import hashlib
import logging
import os
import random
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, Final

import msgspec

try:
    from langchain_core.messages import BaseMessage
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        PendingWrite,
        get_checkpoint_id,
        get_checkpoint_metadata,
        writes_sort_key,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
    from langgraph.checkpoint.serde.types import ERROR, INTERRUPT
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "agentsession.integrations.langgraph needs LangGraph: pip install 'agentsession[langgraph]'"
    ) from exc

from ..aio import AsyncStore
from ..errors import ConflictError, UsageError
from ..events import Event
from ..session import BaseSession
from ..store import BaseStore, open_store
from .langchain import events_for

__all__ = [
    "CHECKPOINT",
    "META_KEY",
    "REMOVED",
    "SNAPSHOT_EVERY",
    "WRITE",
    "WRITES",
    "AgentSessionSaver",
    "StoreTarget",
]

log = logging.getLogger(__name__)

CHECKPOINT: Final = "langgraph/checkpoint"
"""Event type of one checkpoint (:class:`CheckpointData`)."""
WRITE: Final = "langgraph/write"
"""Event type of one pending write (:class:`WriteData`): the form ``put_writes`` stored
before :data:`WRITES`, still read."""
WRITES: Final = "langgraph/writes"
"""Event type of the pending writes of one ``put_writes`` call (:class:`WritesData`)."""
REMOVED: Final = "langgraph/removed"
"""Event type naming checkpoints taken out by ``delete_for_runs`` or ``prune``
(:class:`RemovedData`)."""
META_KEY: Final = "langgraph"
"""Event meta key of the mirror's events: ``{"message": <message id>}``."""
SNAPSHOT_EVERY: Final = 1024
"""A list channel's value is stored whole at least once every this many versions (the others
as deltas). Rebuilding a version walks its deltas in memory (the index holds them): their
bytes add up to the value's, so a longer chain costs lookups, not bytes."""

_SQUEEZE_FROM = 96
"""Bytes from which a value is deflated before it is stored (when that makes it smaller)."""
_SQUEEZE_LEVEL = 6
"""zlib's level for stored values."""
_LINGER = 0.005
"""Seconds a thread's writes wait for the ``put`` that follows them, to be stored with it in
one append (:class:`_Writer`)."""
_ENDS_STEP: Final = frozenset({ERROR, INTERRUPT})
"""The channels of writes no checkpoint follows in their super-step (a task that failed or
was interrupted ends the run there): a ``put_writes`` with one of them does not wait for a
``put``."""
_LINGER_AFTER_MISS = 8
"""Leader turns that do not wait after a wait that saw no ``put`` come (doubled at each such
wait in a row)."""
_COPY_CHUNK = 1000
"""Events per batch when ``copy_thread`` copies a log."""
_THREADS_KEPT = 256
"""Threads whose index a saver keeps in memory (least recently used first out)."""
_BODIES_KEPT = 8
"""Rebuilt list bodies a thread's index keeps, so reading a history rebuilds each version
from the one before it."""

StoreTarget = str | os.PathLike[str] | BaseStore | AsyncStore
"""What :class:`AgentSessionSaver` takes as its store."""


# ---------------------------------------------------------------------------------------------
# The payloads.


class Blob(msgspec.Struct, frozen=True, omit_defaults=True, kw_only=True):
    """One channel version: the serialized value (``t``, ``d``: LangGraph's type tag and the
    bytes in base64; ``t == "empty"`` for a channel without a value), or, when ``base`` is
    set, the items appended to version ``base``'s list (``n``: the item count of the whole)."""

    ch: str
    """The channel."""
    v: str | int | float = ""
    """The version; stored as ``""`` (absent) when it is the checkpoint's ``v``, which
    reading puts back (:meth:`CheckpointData.blobs_read`)."""
    t: str
    """The serializer's type tag (``"msgpack"``, ``"empty"``, ...)."""
    d: str = ""
    """The bytes, base64: the whole value, or (a delta) the added items' bytes."""
    base: str | int | float | None = None
    """The version this delta extends; None for a whole value."""
    n: int = 0
    """A delta's item count of the whole list."""
    z: bool | int = False
    """``d`` holds the bytes deflated (zlib): True, or 2 when deflated with the preset
    dictionary :data:`_PRESET`; False (and absent) for bytes as they are."""


class CheckpointData(msgspec.Struct, frozen=True, omit_defaults=True):
    """The payload of a :data:`CHECKPOINT` event."""

    id: str
    """The checkpoint id."""
    ns: str = ""
    """The checkpoint namespace ("" for the root graph)."""
    parent: str | None = None
    """The parent checkpoint's id."""
    cp: tuple[str, str] = ("", "")
    """The checkpoint without ``channel_values``: type tag and base64 bytes."""
    md: tuple[str, str] = ("", "")
    """The metadata: type tag and base64 bytes."""
    blobs: list[Blob] = []
    """The channel versions new in this checkpoint."""
    z: bool | int = False
    """``cp`` and ``md`` hold their bytes deflated (zlib): True, or 2 when deflated with the
    preset dictionary :data:`_CHECKPOINT_PRESET`; False (and absent) for bytes as they are."""
    v: str | int | float | None = None
    """The version of the blobs stored without theirs (LangGraph gives every channel a
    super-step writes the same new version); None (absent): each blob has its own."""

    def blobs_read(self) -> builtins.list[Blob]:
        """The blobs, each with its version (the checkpoint's ``v`` where it was left out)."""
        shared = self.v
        if shared is None:
            return self.blobs
        return [
            msgspec.structs.replace(blob, v=shared) if blob.v == "" else blob for blob in self.blobs
        ]


def _shared_version(blobs: builtins.list[Blob]) -> tuple[builtins.list[Blob], Any]:
    """``blobs`` without the version most of them have (stored once, as the checkpoint's
    ``v``), and that version; ``blobs`` as they are and None when there is none to share
    (a version ``""`` is stored as it is: it would read as the shared one)."""
    counts: dict[Any, int] = {}
    for blob in blobs:
        if blob.v == "":
            return blobs, None
        key = (type(blob.v), blob.v)
        counts[key] = counts.get(key, 0) + 1
    if not counts:
        return blobs, None
    (kind, shared), count = max(counts.items(), key=lambda item: item[1])
    if count < 2:
        return blobs, None
    return [
        msgspec.structs.replace(blob, v="") if type(blob.v) is kind and blob.v == shared else blob
        for blob in blobs
    ], shared


class WriteData(msgspec.Struct, frozen=True, omit_defaults=True):
    """The payload of a :data:`WRITE` event."""

    cp: str
    """The checkpoint id the write belongs to."""
    task: str
    """The task id."""
    idx: int
    """The write's index in its task (negative for LangGraph's special channels)."""
    ch: str
    """The channel."""
    t: str
    """The value's type tag."""
    d: str = ""
    """The value's bytes, base64."""
    ns: str = ""
    """The checkpoint namespace."""
    path: str = ""
    """The task path."""
    z: bool | int = False
    """``d`` holds the bytes deflated (zlib); False (and absent) for bytes as they are (a
    :class:`WriteItem`'s ``z``, 2, when the index holds one of those as a WriteData)."""


class WriteItem(msgspec.Struct, frozen=True, array_like=True):
    """One write of a :class:`WritesData` (stored as a JSON array)."""

    idx: int
    """The write's index in its task (negative for LangGraph's special channels)."""
    ch: str
    """The channel."""
    t: str
    """The value's type tag."""
    d: str
    """The value's bytes, base64."""
    z: bool | int
    """``d`` holds the bytes deflated (zlib): True, or 2 with the preset dictionary
    :data:`_PRESET`; False: as they are."""


class WritesData(msgspec.Struct, frozen=True, omit_defaults=True):
    """The payload of a :data:`WRITES` event: what one ``put_writes`` call stored (the fields
    its writes share once, then each write)."""

    cp: str
    """The checkpoint id the writes belong to."""
    task: str
    """The task id."""
    w: list[WriteItem]
    """The writes, in the order of the call."""
    ns: str = ""
    """The checkpoint namespace."""
    path: str = ""
    """The task path."""


class RemovedData(msgspec.Struct, frozen=True):
    """The payload of a :data:`REMOVED` event."""

    checkpoints: list[tuple[str, str]]
    """The (namespace, checkpoint id) pairs taken out."""


# ---------------------------------------------------------------------------------------------
# Bytes.


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


_PRESET: Final = (
    b"\xc7\x88\x05\x94\xbelangchain_core.messages.system\xadSystemMessage\x86\xa7content\xa0"
    b"\xb1additional_kwargs\x80\xb1response_metadata\x80\xa4type\xa6system\xa4name\xc0\xa2id"
    b"\xa0\xb3model_validate_json\xc7\x85\x05\x94\xbdlangchain_core.messages.human\xacHuman"
    b"Message\x86\xa7content\xa0\xb1additional_kwargs\x80\xb1response_metadata\x80\xa4type"
    b"\xa5human\xa4name\xc0\xa2id\xa0\xb3model_validate_json\xc7\xae\x05\x94\xbclangchain_"
    b"core.messages.tool\xabToolMessage\x89\xa7content\xa0\xb1additional_kwargs\x80\xb1response"
    b"_metadata\x80\xa4type\xa4tool\xa4name\xc0\xa2id\xa0\xactool_call_id\xa5call_\xa8artifact"
    b"\xc0\xa6status\xa7success\xb3model_validate_json\xc8\x01\xc6\x05\x94\xbalangchain_core."
    b"messages.ai\xa9AIMessage\x89\xa7content\xa0\xb1additional_kwargs\x80\xb1response_metadata"
    b"\x85\xabtoken_usage\x83\xb1completion_tokens\x00\xadprompt_tokens\x00\xactotal_tokens\x00"
    b"\xaamodel_name\xa0\xb2system_fingerprint\xa0\xadfinish_reason\xaatool_calls\xa8logprobs"
    b"\xc0\xa4type\xa2ai\xa4name\xc0\xa2id\xa8lc_run--\xaatool_calls\x91\x84\xa4name\xa0\xa4"
    b"args\x80\xa2id\xa5call_\xa4type\xa9tool_call\xb2invalid_tool_calls\x90\xaeusage_metadata"
    b"\x85\xacinput_tokens\x00\xadoutput_tokens\x00\xactotal_tokens\x00\xb3input_token_details"
    b"\x81\xaacache_read\x00\xb4output_token_details\x81\xa9reasoning\x00\xb3model_validate_json"
)
"""zlib's preset dictionary for channel values and writes (``z`` 2): LangGraph's serializer's
bytes of empty LangChain messages (system, human, tool, AI with a tool call, token usage). A
message's own bytes are mostly its type's path and field names, which a value deflated on its
own pays for each time (a ~300 B AI message deflates to about 270 B alone, 130 B with it). Part
of the stored form: never changed (another would be another ``z``)."""


_CHECKPOINT_PRESET: Final = (
    b"\x83\xa6source\xa4loop\xa4step\x01\xa7parents\x80\x86\xa1v\x04\xa2ts\xd9 2026-01-01T00:0"
    b"0:00.000000+00:00\xa2id\xd9$1f000000-0000-6000-8000-000000000000\xb0channel_versions\x83"
    b"\xa9__start__\xd9300000000000000000000000000000001.0.1234567890123456\xa8messages\xd9300"
    b"000000000000000000000000000001.0.1234567890123456\xaabranch:to:\xd9300000000000000000000"
    b"000000000001.0.1234567890123456\xadversions_seen\x82\xa9__input__\x80\xa9__start__\x81"
    b"\xa9__start__\xd9300000000000000000000000000000001.0.1234567890123456\xb0updated_channel"
    b"s\x91\xa8messages"
)
"""zlib's preset dictionary for a checkpoint (without its values) and its metadata (their
``z`` 2): the serializer's bytes of a metadata and a checkpoint of LangGraph's form, field
names and a version of this saver's form. Part of the stored form: never changed."""


def _deflated(data: bytes, preset: bytes | None) -> bytes:
    """``data`` deflated (zlib), with ``preset`` as the preset dictionary when given."""
    if preset is None:
        return zlib.compress(data, _SQUEEZE_LEVEL)
    deflate = zlib.compressobj(_SQUEEZE_LEVEL, zdict=preset)
    return deflate.compress(data) + deflate.flush()


def _squeeze(data: bytes, preset: bool = False) -> tuple[str, bool | int]:
    """``data`` in base64, deflated first when that makes it smaller, and how: False (as it
    is), True (deflated) or, with ``preset``, 2 (deflated with :data:`_PRESET`)."""
    if len(data) >= _SQUEEZE_FROM:
        squeezed = _deflated(data, _PRESET if preset else None)
        if len(squeezed) < len(data):
            return _b64(squeezed), 2 if preset else True
    return _b64(data), False


def _unsqueeze(text: str, squeezed: bool | int, preset: bytes = _PRESET) -> bytes:
    """The bytes :func:`_squeeze` (or a form without deflation, ``squeezed`` False) stored;
    ``squeezed`` 2: deflated with ``preset``."""
    data = _unb64(text)
    if not squeezed:
        return data
    if squeezed == 2:
        inflate = zlib.decompressobj(zdict=preset)
        return inflate.decompress(data) + inflate.flush()
    return zlib.decompress(data)


def _array_header(data: bytes) -> int:
    """The length of the msgpack array header ``data`` starts with; 0 when it is no array."""
    if not data:
        return 0
    first = data[0]
    if 0x90 <= first <= 0x9F:
        return 1
    if first == 0xDC:
        return 3
    if first == 0xDD:
        return 5
    return 0


def _array_count(data: bytes, header: int) -> int:
    if header == 1:
        return data[0] & 0x0F
    return int.from_bytes(data[1:header], "big")


def _header_for(count: int) -> bytes:
    """The msgpack array header of ``count`` items."""
    if count < 16:
        return bytes([0x90 | count])
    if count < 1 << 16:
        return b"\xdc" + count.to_bytes(2, "big")
    return b"\xdd" + count.to_bytes(4, "big")


def _event_id(kind: str, *parts: str) -> str:
    """An event id derived from ``parts`` (so the same record always gets the same id): 120
    bits of their SHA-256 in base64url (ids made before were 160 bits in hex, 44 characters:
    each row of a thread's log keeps its id)."""
    digest = hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).digest()
    return f"lg{kind}-{base64.urlsafe_b64encode(digest[:15]).decode('ascii')}"


def _writes_id(
    thread_id: str, ns: str, checkpoint_id: str, task_id: str, items: Sequence[WriteItem]
) -> str:
    """The id of a :data:`WRITES` event: from the thread, namespace, checkpoint, task and
    each write's index, and a special write's (negative index: it replaces an earlier one)
    channel, type and value too."""
    parts = [thread_id, ns, checkpoint_id, task_id]
    for item in items:
        parts.append(str(item.idx))
        if item.idx < 0:
            raw = _unsqueeze(item.d, item.z)
            parts += [item.ch, item.t, hashlib.sha256(raw).hexdigest()]
    return _event_id("p", *parts)


# ---------------------------------------------------------------------------------------------
# A thread's index.


class _Last(msgspec.Struct):
    """The last list value this saver stored for a channel: what a delta may extend."""

    version: str | int | float
    body: bytes
    count: int
    depth: int
    items: list[Any] | None = None
    """The list's items when each is one :func:`_snapshot` can vouch for (else None)."""
    seen: list[Any] | None = None
    """Their snapshots, as they were serialized."""
    wait: int = 0
    """Whole serializations left before the items are snapshotted again."""
    backoff: int = 1
    """What ``wait`` is set to after the next miss (doubled at each miss in a row)."""


_UNSAFE: Final = object()
"""The snapshot of an item whose serialized bytes cannot be vouched for without serializing."""
_ATOMS: Final = frozenset({str, int, float, bool, bytes, type(None)})


def _copied(value: Any) -> Any:
    """A deep copy of ``value``: its dicts, lists and tuples copied (what ``copy.deepcopy``
    does, without its memo), immutable scalars as they are, anything else deep-copied."""
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is dict:
        return {key: _copied(item) for key, item in value.items()}
    if kind is list:
        return [_copied(item) for item in value]
    if kind is tuple:
        return tuple(_copied(item) for item in value)
    return copy.deepcopy(value)


def _snapshot(item: Any) -> Any:
    """What tells, later, that ``item`` (the same object) still serializes to the bytes it did:
    an immutable scalar itself; a message, a deep copy of its fields; else :data:`_UNSAFE`."""
    if type(item) in _ATOMS:
        return None
    if isinstance(item, BaseMessage):
        try:
            return _copied((item.__dict__, item.__pydantic_extra__))
        except Exception:  # a field that cannot be copied: serialize it each time
            return _UNSAFE
    return _UNSAFE


_Decoded = dict[tuple[str, str, str | int | float], builtins.list[Any]]
"""A list channel's versions decoded in one ``list`` call, by (namespace, channel, version)."""


class _Checkpoint(msgspec.Struct):
    data: CheckpointData
    metadata: dict[str, Any] | None = None  # decoded on first use


class _Pending:
    """One call's events, waiting to be stored by :class:`_Writer`."""

    __slots__ = ("closes", "done", "error", "events")

    def __init__(self, events: builtins.list[Event], closes: bool) -> None:
        self.events = events
        self.closes = closes
        """The call ends its super-step's saves (a ``put``, or writes no ``put`` follows: an
        interrupt's, an error's): nothing waits for a ``put`` after it."""
        self.done = False
        self.error: BaseException | None = None


def _store(session: BaseSession, events: builtins.list[Event]) -> None:
    if len(events) == 1:
        session.append(events[0])
    else:
        session.append_many(events)


class _Writer:
    """A thread's appends, stored together when calls overlap (a group commit).

    LangGraph runs a graph's saves in worker threads: by default (``durability="async"``)
    nothing waits for ``put_writes``, and each ``put`` waits only for the one before it; a
    super-step's ``put_writes`` is followed by its checkpoint's ``put`` (LangGraph makes the
    checkpoint right after the step's writes). The first caller stores its events; the calls
    that arrive meanwhile queue, and the next of them stores every queued call's events in one
    atomic append: one round trip and one commit for them all. A leader holding writes only
    waits up to :data:`_LINGER` seconds for the ``put`` that follows, which then stores them
    with its own checkpoint, so a super-step's two calls are one commit (after a wait that saw
    no ``put`` come, it stops waiting for a while: :data:`_LINGER_AFTER_MISS`). Writes that
    end a super-step with no checkpoint (an interrupt's, an error's: :data:`_ENDS_STEP`) close
    it as a ``put`` does: nothing waits after them, and a leader waiting stores its writes
    with them. Each call
    returns (or raises) only once its own events are stored (or not): as durable when it returns
    as an append of its own. When a combined append fails, each call's events are appended on
    their own, so each call gets its own outcome (a retry stores nothing twice: the ids are
    derived)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.queue: builtins.list[_Pending] = []
        self.busy = False
        self.lingering = False
        """A leader holding writes only waits for a ``put`` (which then takes them)."""
        self.skip = 0
        """Leader turns left that do not wait for a ``put`` (after a wait that saw none)."""
        self.misses = 0
        """Waits in a row that saw no ``put`` come."""
        self.appends = 0
        """Appends made (each one commit)."""

    def append(
        self,
        session: BaseSession,
        events: builtins.list[Event],
        *,
        closes: bool,
    ) -> None:
        """Store ``events``, with the calls that overlap; ``closes``: the call ends its
        super-step's saves (a ``put``'s, or writes no ``put`` follows: an interrupt's, an
        error's), so nothing waits for a ``put`` after it."""
        mine = _Pending(events, closes)
        cond = self.cond
        with cond:
            self.queue.append(mine)
            if closes and self.lingering:
                # A leader waits for this call: store its writes with it, from this thread (the
                # caller waits for it; nothing waits for the writes' caller to wake).
                self.lingering = False
                self.misses = 0
                batch: builtins.list[_Pending] | None = self.queue
                self.queue = []
                cond.notify_all()
            else:
                batch = self._lead(mine)
        if batch is not None:
            try:
                self._store(session, batch)
            finally:
                with cond:
                    for pending in batch:
                        pending.done = True
                    self.busy = False
                    cond.notify_all()
        if mine.error is not None:
            raise mine.error

    def _lead(self, mine: _Pending) -> builtins.list[_Pending] | None:
        """(Holding the lock.) The calls ``mine`` stores, once no append runs, or None when
        another call stored (or stores) it."""
        cond = self.cond
        while True:
            while self.busy and not mine.done:
                cond.wait()
            if mine.done:
                return None
            self.busy = True
            if self._linger():
                batch, self.queue = self.queue, []
                return batch

    def _linger(self) -> bool:
        """(Holding the lock, leading.) With writes only queued, wait for a ``put`` to take
        them; False when one did (it leads now), True to store them."""
        if any(p.closes for p in self.queue):
            return True
        if self.skip:
            self.skip -= 1
            return True
        self.lingering = True
        deadline = time.monotonic() + _LINGER
        while self.lingering:
            left = deadline - time.monotonic()
            if left <= 0:
                self.lingering = False
                self.misses += 1
                self.skip = min(_LINGER_AFTER_MISS << (self.misses - 1), SNAPSHOT_EVERY)
                return True
            self.cond.wait(left)
        return False

    def _store(self, session: BaseSession, batch: builtins.list[_Pending]) -> None:
        """Store ``batch``'s events, setting each call's error."""
        if len(batch) > 1:
            seen: set[str] = set()
            events = []
            for pending in batch:
                for event in pending.events:
                    if event.id not in seen:  # a call and its retry, queued together
                        seen.add(event.id)
                        events.append(event)
            try:
                self.appends += 1
                _store(session, events)
                return
            except Exception:
                pass  # each call on its own, below
            except BaseException as exc:
                for pending in batch:
                    pending.error = exc
                raise
        for pending in batch:
            try:
                self.appends += 1
                _store(session, pending.events)
            except BaseException as exc:
                pending.error = exc


class _Thread:
    """What a saver read of one thread's log."""

    def __init__(self, session: BaseSession) -> None:
        self.session = session
        self.life = session.life
        self.last_seq = 0
        self.checkpoints: dict[str, dict[str, _Checkpoint]] = {}
        self.blobs: dict[tuple[str, str, str | int | float], Blob] = {}
        self.writes: dict[tuple[str, str], dict[tuple[str, int], WriteData]] = {}
        self.mirrored: set[str] = set()
        self.last: dict[tuple[str, str], _Last] = {}
        self.bodies: OrderedDict[tuple[str, str, str | int | float], bytes] = OrderedDict()
        self.added: dict[tuple[str, str, str | int | float], bytes] = {}  # deltas, decoded
        self.lock = threading.RLock()
        self.writer = _Writer()

    def take(self, events: Sequence[Event]) -> None:
        """Index ``events`` (the log's next ones, in seq order)."""
        for event in events:
            kind = event.type
            if kind == CHECKPOINT:
                data = event.decode(CheckpointData)
                self.checkpoints.setdefault(data.ns, {})[data.id] = _Checkpoint(data)
                for blob in data.blobs_read():
                    self.blobs.setdefault((data.ns, blob.ch, blob.v), blob)
            elif kind == WRITES:
                batch = event.decode(WritesData)
                stored = self.writes.setdefault((batch.ns, batch.cp), {})
                for item in batch.w:
                    key = (batch.task, item.idx)
                    if item.idx < 0 or key not in stored:
                        stored[key] = WriteData(
                            batch.cp,
                            batch.task,
                            item.idx,
                            item.ch,
                            item.t,
                            item.d,
                            batch.ns,
                            batch.path,
                            item.z,
                        )
            elif kind == WRITE:
                write = event.decode(WriteData)
                stored = self.writes.setdefault((write.ns, write.cp), {})
                key = (write.task, write.idx)
                if write.idx < 0 or key not in stored:
                    stored[key] = write
            elif kind == REMOVED:
                for ns, checkpoint_id in event.decode(RemovedData).checkpoints:
                    self.checkpoints.get(ns, {}).pop(checkpoint_id, None)
                    self.writes.pop((ns, checkpoint_id), None)
            else:
                mirrored = event.meta.get(META_KEY)
                if isinstance(mirrored, dict) and isinstance(mirrored.get("message"), str):
                    self.mirrored.add(mirrored["message"])
            self.last_seq = event.seq

    def body(self, ns: str, blob: Blob) -> bytes | None:
        """The msgpack array body (the items' bytes, without the header) of a list blob; None
        when a delta's base is not in the log."""
        parts: list[bytes] = []  # the added items' bytes, newest first
        current: Blob | None = blob
        while current is not None and current.base is not None:
            key = (ns, current.ch, current.v)
            cached = self.bodies.get(key)
            if cached is not None:
                parts.append(cached)
                break
            added = self.added_bytes(key, current)
            parts.append(added)
            current = self.blobs.get((ns, current.ch, current.base))
        else:
            if current is None:
                log.warning(
                    "a base version of channel %r version %r is not in session %s",
                    blob.ch,
                    blob.v,
                    self.session.id,
                )
                return None
            data = _unsqueeze(current.d, current.z)
            parts.append(data[_array_header(data) :])
        whole = b"".join(reversed(parts))
        self.bodies[(ns, blob.ch, blob.v)] = whole
        if len(self.bodies) > _BODIES_KEPT:
            self.bodies.popitem(last=False)
        return whole

    def added_bytes(self, key: tuple[str, str, str | int | float], blob: Blob) -> bytes:
        """The bytes of the items a delta blob adds (decoded once, then kept)."""
        added = self.added.get(key)
        if added is None:
            added = self.added[key] = _unsqueeze(blob.d, blob.z)
        return added

    def value(self, ns: str, blob: Blob) -> tuple[str, bytes] | None:
        """The typed bytes of ``blob`` (None for an empty channel or a lost base)."""
        if blob.t == "empty":
            return None
        if blob.base is None:
            return blob.t, _unsqueeze(blob.d, blob.z)
        body = self.body(ns, blob)
        return None if body is None else (blob.t, _header_for(blob.n) + body)


# ---------------------------------------------------------------------------------------------
# The saver.


def _configurable(config: RunnableConfig) -> Mapping[str, Any]:
    conf = config.get("configurable")
    if not isinstance(conf, Mapping):
        raise UsageError("a LangGraph config needs a 'configurable' mapping with a thread_id")
    return conf


def _thread_id(config: RunnableConfig) -> str:
    thread = _configurable(config).get("thread_id")
    if thread is None or thread == "":
        raise UsageError("a LangGraph config needs configurable.thread_id")
    return str(thread)


class AgentSessionSaver(BaseCheckpointSaver[str]):
    """LangGraph's checkpointer, each thread kept in an agentsession session (see the module
    docstring for what is stored and how).

    ``store`` is an open store (a sync :class:`~agentsession.BaseStore`, or an
    :class:`~agentsession.aio.AsyncStore` whose sync store is used; shared and not closed by
    the saver) or a URL or path the saver opens on first use (with ``store_options``) and
    closes in :meth:`close`. ``thread_prefix`` starts every thread's session id;
    ``messages_channel`` names the channel mirrored as typed messages (None: no mirror);
    ``serde`` is LangGraph's serializer (its ``JsonPlusSerializer`` by default).
    """

    def __init__(
        self,
        store: StoreTarget,
        *,
        thread_prefix: str = "lg:",
        messages_channel: str | None = "messages",
        serde: SerializerProtocol | None = None,
        **store_options: Any,
    ) -> None:
        super().__init__(serde=serde)
        if not isinstance(thread_prefix, str):
            raise UsageError("thread_prefix must be a string")
        self.thread_prefix = thread_prefix
        """What every thread's session id starts with."""
        self.messages_channel = messages_channel
        """The channel mirrored as agentsession's typed messages (None: none)."""
        self._target: str | os.PathLike[str] | None = None
        self._sync: BaseStore | None = None
        self._owned = False
        self._options = store_options
        if isinstance(store, AsyncStore):
            self._sync = store.sync
        elif isinstance(store, BaseStore):
            self._sync = store
        elif isinstance(store, (str, os.PathLike)):
            if isinstance(store, str) and store.strip().lower().startswith("memory:"):
                raise UsageError(
                    "store='memory:' would open a store for this saver alone; open one with "
                    "open_store('memory:') and pass the store itself"
                )
            self._target, self._owned = store, True
        else:
            raise UsageError(
                "store must be a URL, a path, a BaseStore or an AsyncStore, not "
                f"{type(store).__name__}"
            )
        if store_options and not self._owned:
            raise UsageError("store options apply only to a store given as a URL or a path")
        self._lock = threading.Lock()
        self._threads: OrderedDict[str, _Thread] = OrderedDict()

    # -- the store ----------------------------------------------------------------------------

    @property
    def store(self) -> BaseStore:
        """The sync store (opened now when the saver was given a URL)."""
        with self._lock:
            if self._sync is None:
                assert self._target is not None
                self._sync = open_store(self._target, **self._options)
            return self._sync

    def session_id(self, thread_id: str) -> str:
        """The agentsession session id of a thread (``thread_prefix + thread_id``)."""
        return self.thread_prefix + str(thread_id)

    def session(self, thread_id: str) -> BaseSession:
        """The agentsession session of a thread: its ``messages()`` is the mirrored
        conversation."""
        return self.store.get(self.session_id(thread_id))

    def close(self) -> None:
        """Close the store the saver opened from a URL (a store given open is left open)."""
        with self._lock:
            owned = self._sync if self._owned else None
            self._threads.clear()
        if owned is not None:
            owned.close()

    def __enter__(self) -> AgentSessionSaver:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self._sync.location if self._sync is not None else self._target
        return f"<AgentSessionSaver {self.thread_prefix!r} at {where}>"

    # -- the index ----------------------------------------------------------------------------

    def _thread(self, thread_id: str, *, read: bool = True) -> _Thread:
        """The thread's index, brought up to date with its log when ``read``."""
        session = self.session(thread_id)
        with self._lock:
            thread = self._threads.get(session.id)
            if thread is None or thread.session is not session or thread.life != session.life:
                thread = self._threads[session.id] = _Thread(session)
            self._threads.move_to_end(session.id)
            while len(self._threads) > _THREADS_KEPT:
                self._threads.popitem(last=False)
        if read:
            with thread.lock:
                events = session.read(thread.last_seq)
                if session.life != thread.life:  # deleted and perhaps created again meanwhile
                    thread = _Thread(session)
                    with self._lock:
                        self._threads[session.id] = thread
                    events = session.read(0)
                thread.take(events)
        return thread

    def _forget(self, thread_id: str) -> None:
        with self._lock:
            self._threads.pop(self.session_id(thread_id), None)

    def _thread_ids(self) -> list[str]:
        """Every thread of the store (sessions whose id starts with the prefix)."""
        prefix = self.thread_prefix
        return [info.id[len(prefix) :] for info in self.store.list(prefix or None)]

    # -- reading ------------------------------------------------------------------------------

    def _tuple(
        self,
        thread_id: str,
        thread: _Thread,
        entry: _Checkpoint,
        decoded: _Decoded | None = None,
    ) -> CheckpointTuple:
        """The tuple of one checkpoint. With ``decoded`` (one ``list`` call's), a list
        channel's versions stored as deltas decode each added item once for the whole call:
        the tuples get lists of their own that share those items."""
        data = entry.data
        ns = data.ns
        checkpoint: Checkpoint = self.serde.loads_typed(
            (data.cp[0], _unsqueeze(data.cp[1], data.z, _CHECKPOINT_PRESET))
        )
        if "id" not in checkpoint:  # stored once, in the payload (the form before: in both)
            checkpoint["id"] = data.id
        values: dict[str, Any] = {}
        for channel, version in checkpoint["channel_versions"].items():
            blob = thread.blobs.get((ns, channel, version))
            if blob is None or blob.t == "empty":
                continue
            if decoded is not None and blob.base is not None:
                items = self._items(thread, ns, blob, decoded)
                if items is not None:
                    values[channel] = [*items]
                    continue
            typed = thread.value(ns, blob)
            if typed is not None:
                values[channel] = self.serde.loads_typed(typed)
        checkpoint["channel_values"] = values
        stored = thread.writes.get((ns, data.id), {})
        ordered = sorted(stored.values(), key=lambda w: writes_sort_key(w.path, w.task, w.idx))
        pending: list[PendingWrite] = [
            (w.task, w.ch, self.serde.loads_typed((w.t, _unsqueeze(w.d, w.z)))) for w in ordered
        ]
        parent: RunnableConfig | None = None
        if data.parent:
            parent = {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": data.parent,
                }
            }
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": data.id,
                }
            },
            checkpoint=checkpoint,
            metadata=self._metadata(entry),
            parent_config=parent,
            pending_writes=pending,
        )

    def _items(
        self, thread: _Thread, ns: str, blob: Blob, decoded: _Decoded
    ) -> builtins.list[Any] | None:
        """The items of a list version stored as a delta, each delta's items decoded once
        into ``decoded``; None when the chain is not one of msgpack lists (the caller then
        decodes the whole value's bytes)."""
        chain: builtins.list[Blob] = []  # the deltas still to decode, newest first
        current = blob
        while (ns, current.ch, current.v) not in decoded and current.base is not None:
            if current.t != "msgpack":
                return None
            chain.append(current)
            below = thread.blobs.get((ns, current.ch, current.base))
            if below is None:
                return None
            current = below
        key = (ns, current.ch, current.v)
        items = decoded.get(key)
        if items is None:  # a whole value: the chain's start
            if current.t != "msgpack":
                return None
            whole = self.serde.loads_typed((current.t, _unsqueeze(current.d, current.z)))
            if not isinstance(whole, builtins.list):
                return None
            items = decoded[key] = whole
        for delta in reversed(chain):
            count = delta.n - len(items)
            if count < 0:
                return None
            added = thread.added_bytes((ns, delta.ch, delta.v), delta)
            new = self.serde.loads_typed((delta.t, _header_for(count) + added))
            if not isinstance(new, builtins.list) or len(new) != count:
                return None
            items = decoded[(ns, delta.ch, delta.v)] = [*items, *new]
        return items

    def _metadata(self, entry: _Checkpoint) -> CheckpointMetadata:
        if entry.metadata is None:
            md = entry.data.md
            entry.metadata = self.serde.loads_typed(
                (md[0], _unsqueeze(md[1], entry.data.z, _CHECKPOINT_PRESET))
            )
        metadata: CheckpointMetadata = dict(entry.metadata)  # type: ignore[assignment]
        return metadata

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``), or the thread's latest in
        its namespace; None when there is none."""
        thread_id = _thread_id(config)
        thread = self._thread(thread_id)
        ns = str(_configurable(config).get("checkpoint_ns") or "")
        with thread.lock:
            checkpoints = thread.checkpoints.get(ns)
            if not checkpoints:
                return None
            checkpoint_id = get_checkpoint_id(config)
            if checkpoint_id is None:
                checkpoint_id = max(checkpoints)
            entry = checkpoints.get(checkpoint_id)
            return None if entry is None else self._tuple(thread_id, thread, entry)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """The checkpoints that match, newest first: of the config's thread (every thread
        when None) and namespace (every namespace when it names none), whose metadata holds
        every ``filter`` item, older than ``before``'s checkpoint, at most ``limit``."""
        if config is None:
            threads = self._thread_ids()
            ns_wanted: str | None = None
            id_wanted: str | None = None
        else:
            threads = [_thread_id(config)]
            given = _configurable(config).get("checkpoint_ns")
            ns_wanted = None if given is None else str(given)
            id_wanted = get_checkpoint_id(config)
        before_id = get_checkpoint_id(before) if before else None
        left = limit
        for thread_id in threads:
            if left is not None and left <= 0:
                return
            thread = self._thread(thread_id)
            found: list[CheckpointTuple] = []
            decoded: _Decoded = {}
            with thread.lock:
                entries = [
                    entry
                    for ns, checkpoints in thread.checkpoints.items()
                    if ns_wanted is None or ns == ns_wanted
                    for entry in checkpoints.values()
                ]
                entries.sort(key=lambda e: e.data.id, reverse=True)
                for entry in entries:
                    if left is not None and left <= 0:
                        break
                    if id_wanted and entry.data.id != id_wanted:
                        continue
                    if before_id and entry.data.id >= before_id:
                        continue
                    if filter:
                        metadata = self._metadata(entry)
                        if not all(metadata.get(k) == v for k, v in filter.items()):
                            continue
                    found.append(self._tuple(thread_id, thread, entry, decoded))
                    if left is not None:
                        left -= 1
            yield from found

    # -- writing ------------------------------------------------------------------------------

    def _blob(
        self, thread: _Thread, ns: str, channel: str, version: str | int | float, value: Any
    ) -> tuple[Blob, int]:
        """The blob of one new channel version: a delta when the value is a list extending
        the last list this saver stored for the channel. When the list's first items are the
        very objects of that last list, unchanged since (messages compared field by field
        with a copy taken when they were serialized; immutable scalars), only the items
        after them are serialized. With it, how many first items are those (0: none)."""
        last = thread.last.get((ns, channel))
        if isinstance(value, builtins.list) and last is not None:
            blob = self._tail_blob(thread, ns, channel, version, value, last)
            if blob is not None:
                return blob, len(last.items or ())
        kind, data = self.serde.dumps_typed(value)
        header = _array_header(data) if kind == "msgpack" else 0
        if not header:
            thread.last.pop((ns, channel), None)
            encoded, squeezed = _squeeze(data, preset=True)
            return Blob(ch=channel, v=version, t=kind, d=encoded, z=squeezed), 0
        count = _array_count(data, header)
        body = data[header:]
        # Snapshot the items for the next put's tail, unless snapshots keep missing (the list's
        # objects are new at each put, or change in place): then only after a wait that
        # doubles at each miss, so such a channel pays for few snapshots.
        wait, backoff = 0, 1
        if last is not None and last.items:  # the snapshot was there, and missed
            backoff = min(last.backoff * 2, SNAPSHOT_EVERY)
            wait = backoff
        elif last is not None and last.items is None:
            wait, backoff = max(last.wait - 1, 0), last.backoff
        items: builtins.list[Any] | None = None
        seen: builtins.list[Any] | None = None
        if wait == 0 and isinstance(value, builtins.list):
            seen = [_snapshot(item) for item in value]
            if any(snap is _UNSAFE for snap in seen):
                seen = None
            else:
                items = [*value]
        if (
            last is not None
            and last.count
            and last.depth + 1 < SNAPSHOT_EVERY
            and count >= last.count
            and last.version != version
            and body.startswith(last.body)
        ):
            thread.last[(ns, channel)] = _Last(
                version, body, count, last.depth + 1, items, seen, wait, backoff
            )
            encoded, squeezed = _squeeze(body[len(last.body) :], preset=True)
            delta = Blob(
                ch=channel, v=version, t=kind, d=encoded, base=last.version, n=count, z=squeezed
            )
            return delta, 0
        thread.last[(ns, channel)] = _Last(version, body, count, 0, items, seen, wait, backoff)
        encoded, squeezed = _squeeze(data, preset=True)
        return Blob(ch=channel, v=version, t=kind, d=encoded, z=squeezed), 0

    def _tail_blob(
        self,
        thread: _Thread,
        ns: str,
        channel: str,
        version: str | int | float,
        value: builtins.list[Any],
        last: _Last,
    ) -> Blob | None:
        """The delta of ``value`` over ``last`` made by serializing only the items after
        ``last``'s, when its first items are ``last``'s own objects, unchanged; None when
        they are not (the caller serializes the whole value)."""
        items, seen = last.items, last.seen
        if (
            items is None
            or seen is None
            or not last.count
            or last.depth + 1 >= SNAPSHOT_EVERY
            or last.version == version
            or len(value) < len(items)
        ):
            return None
        for index, item in enumerate(items):
            if value[index] is not item:
                return None
            snap = seen[index]  # None: an immutable scalar; else the message's fields
            if snap is not None and (
                item.__dict__ != snap[0] or item.__pydantic_extra__ != snap[1]
            ):
                return None
        tail = value[len(items) :]
        snaps = [_snapshot(item) for item in tail]
        if any(s is _UNSAFE for s in snaps):
            return None
        kind, data = self.serde.dumps_typed(tail)
        header = _array_header(data) if kind == "msgpack" else 0
        if not header or _array_count(data, header) != len(tail):
            return None
        added = data[header:]
        count = len(value)
        thread.last[(ns, channel)] = _Last(
            version, last.body + added, count, last.depth + 1, [*value], [*seen, *snaps]
        )
        encoded, squeezed = _squeeze(added, preset=True)
        return Blob(
            ch=channel, v=version, t=kind, d=encoded, base=last.version, n=count, z=squeezed
        )

    def _mirror(self, thread_id: str, thread: _Thread, value: Any) -> builtins.list[Event]:
        """The typed events of the messages in ``value`` the thread has not recorded."""
        if not isinstance(value, list):
            return []
        events: list[Event] = []
        for message in value:
            if not isinstance(message, BaseMessage) or not message.id:
                continue
            if message.id in thread.mirrored:
                continue
            try:
                made = events_for([message])
            except UsageError as exc:
                log.warning("message %s is left out of the typed mirror: %s", message.id, exc)
                thread.mirrored.add(message.id)
                continue
            for index, event in enumerate(made):
                meta = {**event.meta, META_KEY: {"message": message.id}}
                events.append(
                    msgspec.structs.replace(
                        event,
                        id=_event_id("m", thread_id, message.id, str(index)),
                        meta=meta,
                    )
                )
            thread.mirrored.add(message.id)
        return events

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint (one atomic batch: the mirror's new messages, then the
        checkpoint with its new channel versions); returns the config naming it."""
        thread_id = _thread_id(config)
        conf = _configurable(config)
        ns = str(conf.get("checkpoint_ns") or "")
        thread = self._thread(thread_id, read=False)
        values = checkpoint["channel_values"]
        skeleton = {k: v for k, v in checkpoint.items() if k not in ("channel_values", "id")}
        mirrored = self.messages_channel if ns == "" else None
        with thread.lock:
            blobs: list[Blob] = []
            known = 0  # the mirrored channel's first items the last put saw, unchanged
            for channel, version in new_versions.items():
                if channel not in values:
                    blobs.append(Blob(ch=channel, v=version, t="empty"))
                    continue
                blob, same = self._blob(thread, ns, channel, version, values[channel])
                blobs.append(blob)
                if channel == mirrored:
                    known = same
            mirror: list[Event] = []
            if mirrored is not None and mirrored in new_versions:
                value = values.get(mirrored)
                if isinstance(value, list) and known:
                    value = value[known:]  # those went through the mirror when last stored
                mirror = self._mirror(thread_id, thread, value)
        cp_type, cp_bytes = self.serde.dumps_typed(skeleton)
        md_type, md_bytes = self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))
        # one flag for both: both deflated (with the checkpoint's preset), or neither
        cp_deflated = _deflated(cp_bytes, _CHECKPOINT_PRESET)
        md_deflated = _deflated(md_bytes, _CHECKPOINT_PRESET)
        cp_z: bool | int = len(cp_deflated) + len(md_deflated) < len(cp_bytes) + len(md_bytes)
        if cp_z:
            cp_z, cp_text, md_text = 2, _b64(cp_deflated), _b64(md_deflated)
        else:
            cp_text, md_text = _b64(cp_bytes), _b64(md_bytes)
        stored_blobs, shared = _shared_version(blobs)
        data = CheckpointData(
            id=checkpoint["id"],
            ns=ns,
            parent=conf.get("checkpoint_id"),
            cp=(cp_type, cp_text),
            md=(md_type, md_text),
            blobs=stored_blobs,
            z=cp_z,
            v=shared,
        )
        event = Event.new(CHECKPOINT, data, id=_event_id("c", thread_id, ns, checkpoint["id"]))
        try:
            thread.writer.append(thread.session, [*mirror, event], closes=True)
        except BaseException:
            with thread.lock:  # what was kept for the next delta may not be stored
                for blob in blobs:
                    thread.last.pop((ns, blob.ch), None)
                # nor the mirror's messages: the next put mirrors them again (their ids
                # are derived, so an append that did store them stores nothing twice)
                for made in mirror:
                    thread.mirrored.discard(made.meta[META_KEY]["message"])
            raise
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes for the checkpoint ``config`` names, in one atomic batch,
        each once (see the module docstring)."""
        thread_id = _thread_id(config)
        conf = _configurable(config)
        ns = str(conf.get("checkpoint_ns") or "")
        checkpoint_id = conf.get("checkpoint_id")
        if not checkpoint_id:
            raise UsageError("put_writes needs the checkpoint's id in configurable.checkpoint_id")
        items: list[WriteItem] = []
        dumps = self.serde.dumps_typed
        for index, (channel, value) in enumerate(writes):
            kind, data = dumps(value)
            encoded, squeezed = _squeeze(data, preset=True)
            items.append(
                WriteItem(WRITES_IDX_MAP.get(channel, index), channel, kind, encoded, squeezed)
            )
        if items:
            payload = WritesData(checkpoint_id, task_id, items, ns, task_path)
            event_id = _writes_id(thread_id, ns, checkpoint_id, task_id, items)
            thread = self._thread(thread_id, read=False)
            writes_event = Event.new(WRITES, payload, id=event_id)
            closes = any(item.ch in _ENDS_STEP for item in items)
            thread.writer.append(thread.session, [writes_event], closes=closes)

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's session (every checkpoint, write and mirrored message)."""
        self._forget(thread_id)
        self.store.delete(self.session_id(thread_id))
        self._forget(thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Take out, in every thread, the checkpoints whose metadata's ``run_id`` is one of
        ``run_ids`` (and their writes): a :data:`REMOVED` event per thread that has any."""
        wanted = set(run_ids)
        if not wanted:
            return
        for thread_id in self._thread_ids():
            thread = self._thread(thread_id)
            with thread.lock:
                gone = [
                    (ns, checkpoint_id)
                    for ns, checkpoints in thread.checkpoints.items()
                    for checkpoint_id, entry in checkpoints.items()
                    if self._metadata(entry).get("run_id") in wanted
                ]
            self._remove(thread, gone)

    def _remove(self, thread: _Thread, gone: builtins.list[tuple[str, str]]) -> None:
        if gone:
            thread.session.append(Event.new(REMOVED, RemovedData(sorted(gone))))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's log to a thread without events (every checkpoint, write, removal
        and mirrored message, each with the id it would have had there; times kept). Raises
        :class:`~agentsession.errors.UsageError` when the target has events."""
        source = self.session_id(source_thread_id)
        if not self.store.exists(source):
            return
        events = self.store.get(source).read()
        target = self.session(target_thread_id)
        copies = [self._copy(event, source_thread_id, target_thread_id) for event in events]
        for start in range(0, len(copies), _COPY_CHUNK):
            chunk = copies[start : start + _COPY_CHUNK]
            try:
                target.append_many(chunk, expect_seq=start)
            except ConflictError:
                if start == 0:
                    raise UsageError(
                        f"copy_thread: thread {target_thread_id!r} already has events"
                    ) from None
                raise
        self._forget(target_thread_id)

    def _copy(self, event: Event, source: str, target: str) -> Event:
        kind = event.type
        if kind == CHECKPOINT:
            data = event.decode(CheckpointData)
            new_id = _event_id("c", target, data.ns, data.id)
        elif kind == WRITE:
            write = event.decode(WriteData)
            parts = [target, write.ns, write.cp, write.task, str(write.idx)]
            if write.idx < 0:
                raw = _unsqueeze(write.d, write.z)
                parts += [write.ch, write.t, hashlib.sha256(raw).hexdigest()]
            new_id = _event_id("w", *parts)
        elif kind == WRITES:
            batch = event.decode(WritesData)
            new_id = _writes_id(target, batch.ns, batch.cp, batch.task, batch.w)
        else:
            new_id = _event_id("x", target, source, event.id or str(event.seq))
        return msgspec.structs.replace(event, seq=0, id=new_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: take out every checkpoint but the latest of each namespace (a
        :data:`REMOVED` event per thread; the values stay in the log, so the kept
        checkpoints' list deltas still read). ``delete``: delete the threads."""
        if strategy not in ("keep_latest", "delete"):
            raise UsageError(f"prune strategy must be 'keep_latest' or 'delete', not {strategy!r}")
        for thread_id in thread_ids:
            if not self.store.exists(self.session_id(thread_id)):
                continue
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            thread = self._thread(thread_id)
            with thread.lock:
                gone = [
                    (ns, checkpoint_id)
                    for ns, checkpoints in thread.checkpoints.items()
                    for checkpoint_id in sorted(checkpoints)[:-1]
                ]
            self._remove(thread, gone)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """The next version of a channel: a zero-padded counter and a random fraction, so two
        forks of one checkpoint never make the same version with different values."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # -- async: the sync methods in a worker thread ---------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """:meth:`get_tuple`, in a worker thread."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """:meth:`list`, in a worker thread."""
        found = await asyncio.to_thread(
            lambda: [*self.list(config, filter=filter, before=before, limit=limit)]
        )
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """:meth:`put`, in a worker thread."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """:meth:`put_writes`, in a worker thread."""
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """:meth:`delete_thread`, in a worker thread."""
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """:meth:`delete_for_runs`, in a worker thread."""
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """:meth:`copy_thread`, in a worker thread."""
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """:meth:`prune`, in a worker thread."""
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)
