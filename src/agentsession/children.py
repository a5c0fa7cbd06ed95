"""Child sessions for subagents: fork, merge, discard, and the session record.

A **child session** is a full session of the same store (its own durable log, recoverable,
listable) that a subagent works in. Its first event, ``session/fork``
(:class:`~agentsession.events.SessionFork`), records the parent, the parent seq it was forked
at, the agent and the history it inherited; the parent gets a ``subagent/start`` linking event
that names the child. Merging writes the child's work into the parent (a summary, or the
child's own messages) and only then marks the child merged (``session/merge``); discarding
writes a note into the parent and marks the child discarded (``session/discard``).

Crash safety rests on two facts: a parent event that ends a fork (``subagent/end`` with the
fork's ``fork_id`` in its meta) is written in one batch with everything the merge adds, and a
merge or discard looks for that event before writing one. A process killed between the parent
write and the child's mark therefore leaves a child that a retried merge completes (it writes
the mark, not a second copy). Merges and discards of one parent's children are serialised by
the parent's turn lock, so of two processes merging the same child exactly one writes and the
other gets :class:`~agentsession.errors.ChildStateError`.

The children of a parent are indexed in the store's meta table (namespace ``children``, keyed
by the parent id, one JSON list in fork order, updated by compare-and-set), so
``store.children_of(parent)`` reads one entry, never every session. The entry is deleted with
the parent. The session record (``session.info()``, ``session.update()``) is the meta entry
``record``/<session id> beside the log; see ``docs/subagents.md`` and ``docs/format.md``.

This module sits below ``session`` and ``store`` in the module graph: it works on what it is
handed through the small protocols below, never importing either.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as _dt
import logging
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final, Literal, Protocol

import msgspec

from .codec import encode
from .contract import SessionInfo, check_session_id
from .crypto import SESSION_KIND, SHREDDED, KeyRing, _b64, _open, _seal, _unb64
from .derive import IndexedMessage
from .errors import (
    ChildStateError,
    DuplicateSession,
    EncryptionError,
    SessionNotFound,
    SessionShredded,
    UsageError,
)
from .events import (
    ASSISTANT_MESSAGE,
    SESSION_DISCARD,
    SESSION_FORK,
    SESSION_MERGE,
    SUBAGENT_END,
    SUBAGENT_START,
    TOOL_RESULT,
    USER_MESSAGE,
    Event,
    SessionDiscard,
    SessionFork,
    SessionMerge,
    SubagentEnd,
    SubagentStart,
    fork_in,
)
from .fencing import Lease
from .messages import Message

__all__ = [
    "CHILDREN_KIND",
    "DEFAULT_MERGE_LOCK_TIMEOUT",
    "RECORD_KIND",
    "ChildInfo",
    "ChildState",
    "LifecycleEvent",
    "LifecycleHook",
    "SessionRecord",
    "SessionTree",
    "descendants",
    "tree",
]

log = logging.getLogger("agentsession")

CHILDREN_KIND = "children"
"""Meta namespace of the children index: key = parent id, value = a JSON list of the
parent's children in fork order (deleted with the parent)."""

RECORD_KIND = "record"
"""Meta namespace of the session record: key = session id, value = a JSON object with the
record's attributes (deleted with the session)."""

DEFAULT_MERGE_LOCK_TIMEOUT = 30.0
"""Seconds a merge or discard waits for the parent's turn lock by default."""

ChildState = Literal["active", "merged", "discarded"]
"""Where a child stands: working, merged into its parent, or discarded."""

_FORK_ID = "fork_id"
"""The meta key that ties a parent's linking events to their fork."""


class ChildInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A child session as ``store.children_of(parent)`` reports it."""

    id: str
    """The child session id."""
    parent: str
    """The parent session id."""
    agent: str = ""
    """The subagent working in the child."""
    task: str = ""
    """What it was asked to do."""
    fork_seq: int = 0
    """The parent's latest seq when the child was forked."""
    fork_id: str = ""
    """The fork's random id (carried by the parent's linking events)."""
    state: ChildState = "active"
    """``active``, ``merged`` or ``discarded``."""
    created_at: _dt.datetime | None = None
    """When the child was forked (UTC)."""
    merged_at: _dt.datetime | None = None
    """When the child was merged (UTC; lango's ``MergedAt``); None while it is not."""
    shredded: bool = False
    """The child was shredded (``store.shred``): its log cannot be read, so ``state`` is
    what its parent's index last said (``active`` when the parent was shredded too, and its
    index keeps only the child's id)."""


class LifecycleEvent(msgspec.Struct, frozen=True, kw_only=True):
    """What a lifecycle hook is called with (lango's ``SessionLifecycleEvent``)."""

    type: Literal["fork", "merge", "discard"]
    """What happened."""
    child_id: str
    """The child session."""
    parent_id: str
    """Its parent."""
    agent: str = ""
    """The child's agent."""
    parent_seq: int = 0
    """Seq of the event written in the parent (``subagent/start`` or ``subagent/end``)."""


LifecycleHook = Callable[[LifecycleEvent], None]
"""A callback for forks, merges and discards, called after the events are durable."""


class SessionRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A session's record: the attributes kept beside its log (lango's session row), read
    with ``session.info()`` and changed with ``session.update()``."""

    id: str
    """The session id."""
    created_at: _dt.datetime | None = None
    """Time of the session's first event (UTC); None while it has none."""
    updated_at: _dt.datetime | None = None
    """The later of its last append and its last record update (UTC)."""
    agent_id: str = ""
    """The agent the session belongs to."""
    channel_type: str = ""
    """The chat platform, for example ``slack`` or ``telegram``."""
    channel_id: str = ""
    """The channel or conversation id on that platform."""
    model: str = ""
    """The model the session talks to."""
    metadata: dict[str, str] = {}
    """Free string metadata."""
    parent: str = ""
    """The parent session id, for a child session ("" otherwise)."""
    fork_seq: int = 0
    """The parent's seq the child was forked at (0 for a session that is not a child)."""
    title: str = ""
    """The title set with ``update(title=...)`` ("" when none was: the catalog then shows
    the first user message's)."""
    tags: tuple[str, ...] = ()
    """Tags, for listing (``store.list(where={"tag": ...})``)."""
    user: str = ""
    """The user set with ``update(user=...)``."""
    tenant: str = ""
    """The tenant set with ``update(tenant=...)``."""


class _StoredRecord(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The record's attributes as the meta entry holds them."""

    agent_id: str = ""
    channel_type: str = ""
    channel_id: str = ""
    model: str = ""
    metadata: dict[str, str] = {}
    updated_at: _dt.datetime | None = None
    title: str = ""
    tags: tuple[str, ...] = ()
    user: str = ""
    tenant: str = ""


class _IndexEntry(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One child in its parent's index."""

    id: str
    fork_id: str
    agent: str = ""
    task: str = ""
    fork_seq: int = 0
    parent_agent: str = ""
    state: ChildState = "active"
    created_at: _dt.datetime | None = None
    ended_at: _dt.datetime | None = None


# ---------------------------------------------------------------------------------------------
# What this module needs from sessions and stores (BaseSession and BaseStore provide it).


class _Session(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def latest_seq(self) -> int: ...

    def read(self, after: int = 0, limit: int | None = None) -> builtins.list[Event]: ...

    def append(self, event: Event) -> int: ...

    def append_many(
        self, events: Sequence[Event], *, expect_seq: int | None = None
    ) -> builtins.list[int]: ...

    def entries(self, agent: str | None = None) -> builtins.list[IndexedMessage]: ...

    def _settled_entries(self, agent: str | None) -> tuple[builtins.list[IndexedMessage], int]: ...

    def _last_time(self) -> _dt.datetime | None: ...


class ChildHost(Protocol):
    """What child sessions and the session record need from a store (``BaseStore``)."""

    clock: Callable[[], _dt.datetime]
    _keyring: KeyRing | None

    def get(self, session_id: str) -> Any: ...

    def create(self, session_id: str, events: Sequence[Event]) -> Any: ...

    def exists(self, session_id: str) -> bool: ...

    def lock(
        self,
        session_id: str,
        timeout: float | None = None,
        ttl: float | None = None,
        steal_after: float | None = None,
    ) -> Lease: ...

    def holds_lock(self, session_id: str) -> bool: ...

    def _meta_get(self, kind: str, key: str) -> str | None: ...

    def _meta_update(
        self, kind: str, key: str, change: Callable[[str | None], str | None]
    ) -> str | None: ...

    def _lifecycle_hooks(self) -> builtins.list[LifecycleHook]: ...

    def _renew(self, session_id: str) -> None: ...


# ---------------------------------------------------------------------------------------------
# Meta values, sealed in an encrypted store: under the session's key (the record, the children
# index, an integration's per-session state) or under the store key (state shared by sessions).


def read_session_value(store: ChildHost, kind: str, session_id: str) -> str | None:
    """The plaintext of the session's ``kind`` entry (None when unset): opened with the
    session's key in an encrypted store, where a value written before the store sealed it
    is returned as it is. Raises :class:`~agentsession.errors.SessionShredded` for a shredded
    session's value, :class:`~agentsession.errors.EncryptionError` for one that does not
    open."""
    raw = store._meta_get(kind, session_id)
    ring = store._keyring
    if raw is None or ring is None:
        return raw
    return ring.cipher(session_id).open_value(kind, raw)


def update_session_value(
    store: ChildHost,
    kind: str,
    session_id: str,
    change: Callable[[str | None], str | None],
    *,
    cache: bool = False,
) -> None:
    """``store._meta_update`` of a value kept in plaintext, or sealed under the session's key
    when the store is encrypted (a sealed value is only rewritten when its plaintext
    changes). ``change`` gets and returns plaintext. With ``cache`` (a value that can be
    made again from the log), a stored value that is not sealed or does not open is handed
    to ``change`` as None, to be replaced, instead of raising."""
    ring = store._keyring
    if ring is None:
        store._meta_update(kind, session_id, change)
        return
    cipher = ring.cipher(session_id)

    def opened(raw: str) -> str | None:
        if not cache:
            return cipher.open_value(kind, raw)
        try:
            return cipher.open_value(kind, raw)
        except SessionShredded:
            raise
        except EncryptionError:
            return None

    def sealed(raw: str | None) -> str | None:
        plain = None if raw is None else opened(raw)
        wanted = change(plain)
        if wanted == plain:
            return raw
        return None if wanted is None else cipher.seal_value(kind, wanted)

    store._meta_update(kind, session_id, sealed)


class _StoreBox(msgspec.Struct, forbid_unknown_fields=True):
    """A meta value sealed under the store key: ``{"sealed":1,"box":"<base64 of nonce,
    ciphertext and tag>"}``, bound to its namespace and key."""

    sealed: int
    box: str


_store_box_decoder = msgspec.json.Decoder(_StoreBox)


def _store_value_aad(kind: str, key: str) -> bytes:
    return b"agentsession/store-meta/v1\x00%s\x00%s" % (
        kind.encode("utf-8", "surrogatepass"),
        key.encode("utf-8", "surrogatepass"),
    )


def read_store_value(store: ChildHost, kind: str, key: str) -> str | None:
    """The plaintext of a meta entry shared by sessions (None when unset): opened with the
    store key in an encrypted store, where a value written before it was sealed (plaintext)
    is returned as it is. Raises :class:`~agentsession.errors.EncryptionError` when a sealed
    value does not open (tampered, or moved to another namespace or key)."""
    raw = store._meta_get(kind, key)
    ring = store._keyring
    if raw is None or ring is None:
        return raw
    return open_store_value(ring, kind, key, raw)


STORE_BOX_HEAD: Final = '{"sealed":1,"box":'
"""How a meta value sealed under the store key starts (one sealed under a session's key
starts ``{"sealed":1,"kid":``)."""


def open_store_value(ring: KeyRing, kind: str, key: str, raw: str) -> str:
    """The plaintext of a meta value shared by sessions: opened with the store key when it is
    sealed, returned as it is when it was written in plaintext. Raises
    :class:`~agentsession.errors.EncryptionError` when a sealed value does not open."""
    if not raw.startswith('{"sealed":1,'):
        return raw  # written in plaintext, before the store sealed this kind
    try:
        envelope = _store_box_decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return raw  # plaintext that happens to start like a box
    where = f"the {kind} entry {key!r} in {ring._where}"
    plain = _open(ring._store_key, _unb64(envelope.box, where), _store_value_aad(kind, key))
    if plain is None:
        raise EncryptionError(f"{where} does not open (tampered or moved)")
    return plain.decode("utf-8", "surrogatepass")


def seal_store_value(ring: KeyRing, kind: str, key: str, plain: str) -> str:
    """``plain`` sealed under the store key, bound to its namespace and key."""
    data = plain.encode("utf-8", "surrogatepass")
    box = _seal(ring._store_key, data, _store_value_aad(kind, key))
    return encode(_StoreBox(sealed=1, box=_b64(box))).decode()


def update_store_value(
    store: ChildHost, kind: str, key: str, change: Callable[[str | None], str | None]
) -> None:
    """``store._meta_update`` of an entry shared by sessions, kept in plaintext, or sealed
    under the store key when the store is encrypted (``change`` gets and returns
    plaintext; a sealed value is only rewritten when its plaintext changes)."""
    ring = store._keyring
    if ring is None:
        store._meta_update(kind, key, change)
        return

    def sealed(raw: str | None) -> str | None:
        plain = None if raw is None else open_store_value(ring, kind, key, raw)
        wanted = change(plain)
        if wanted == plain and raw is not None and raw.startswith(STORE_BOX_HEAD):
            return raw
        if wanted is None:
            return None
        return seal_store_value(ring, kind, key, wanted)

    store._meta_update(kind, key, sealed)


# ---------------------------------------------------------------------------------------------
# The children index.

_index_decoder = msgspec.json.Decoder(builtins.list[_IndexEntry])

_SHREDDED_HEAD = '{"shredded":1,'
"""How the children index of a shredded parent starts (see :func:`keep_ids_of_children`)."""


class _ShreddedIndex(msgspec.Struct, frozen=True, kw_only=True):
    """The children index of a shredded parent: only its children's ids and fork ids (the ids
    are stored in clear anyway, as the children's own session ids), so that deleting the
    parent recursively, ``rm -r`` and ``ls --tree`` still find them once the parent's key,
    which sealed the full index, is destroyed."""

    shredded: int
    children: builtins.list[_IndexEntry]


_shredded_decoder = msgspec.json.Decoder(_ShreddedIndex)


def _index(store: ChildHost, parent_id: str) -> builtins.list[_IndexEntry]:
    raw = store._meta_get(CHILDREN_KIND, parent_id)
    if raw is None:
        return []
    if raw.startswith(_SHREDDED_HEAD):
        return _shredded_decoder.decode(raw.encode()).children
    ring = store._keyring
    if ring is not None:
        try:
            raw = ring.cipher(parent_id).open_value(CHILDREN_KIND, raw)
        except SessionShredded:
            # Shredded by a version that did not keep the ids: the children are unknown
            # from here (they stay sessions of their own).
            return []
    return _decode_index(raw)


def _decode_index(raw: str | None) -> builtins.list[_IndexEntry]:
    if raw is None:
        return []
    return _index_decoder.decode(raw.encode())


def _encode_index(entries: builtins.list[_IndexEntry]) -> str | None:
    return encode(entries).decode() if entries else None


def _index_add(store: ChildHost, parent_id: str, entry: _IndexEntry) -> None:
    def change(raw: str | None) -> str | None:
        entries = _decode_index(raw)
        if any(e.id == entry.id for e in entries):
            raise DuplicateSession(
                entry.id, f"session {parent_id!r} already has a child {entry.id!r}"
            )
        return _encode_index([*entries, entry])

    update_session_value(store, CHILDREN_KIND, parent_id, change)


def _index_change(
    store: ChildHost,
    parent_id: str,
    child_id: str,
    fork_id: str,
    state: ChildState | None,
    ended_at: _dt.datetime | None = None,
) -> None:
    """Set a child's state in its parent's index (None: remove it), with the time of the
    merge or discard that ended it."""

    def changed(entries: builtins.list[_IndexEntry]) -> builtins.list[_IndexEntry]:
        out = []
        for e in entries:
            if e.id == child_id and e.fork_id == fork_id:
                if state is None:
                    continue
                e = msgspec.structs.replace(e, state=state, ended_at=ended_at or e.ended_at)
            out.append(e)
        return out

    raw = store._meta_get(CHILDREN_KIND, parent_id)
    if raw is not None and raw.startswith(_SHREDDED_HEAD):
        # A shredded parent's index (only ids, in clear): a deleted child leaves it.
        def shredded(raw: str | None) -> str | None:
            if raw is None or not raw.startswith(_SHREDDED_HEAD):
                return raw
            kept = changed(_shredded_decoder.decode(raw.encode()).children)
            return _encode_shredded(kept)

        store._meta_update(CHILDREN_KIND, parent_id, shredded)
        return

    def change(raw: str | None) -> str | None:
        return _encode_index(changed(_decode_index(raw)))

    update_session_value(store, CHILDREN_KIND, parent_id, change)


def _encode_shredded(entries: builtins.list[_IndexEntry]) -> str | None:
    if not entries:
        return None
    ids = [_IndexEntry(id=e.id, fork_id=e.fork_id) for e in entries]
    return encode(_ShreddedIndex(shredded=1, children=ids)).decode()


def keep_ids_of_children(store: ChildHost, parent_id: str) -> None:
    """Before a parent's key is destroyed: replace its sealed children index by the ids of
    its children alone (:class:`_ShreddedIndex`), so that its children can still be found,
    shredded and deleted with it. Nothing when the index is gone already or cannot be opened
    (shredded by an earlier version)."""

    def change(raw: str | None) -> str | None:
        if raw is None or raw.startswith(_SHREDDED_HEAD):
            return raw
        ring = store._keyring
        try:
            plain = raw if ring is None else ring.cipher(parent_id).open_value(CHILDREN_KIND, raw)
        except SessionShredded:
            return raw
        return _encode_shredded(_decode_index(plain))

    store._meta_update(CHILDREN_KIND, parent_id, change)


def is_shredded(store: ChildHost, session_id: str) -> bool:
    """Whether the session's key was destroyed (``store.shred``; False in a plain store)."""
    return store._keyring is not None and store._meta_get(SESSION_KIND, session_id) == SHREDDED


def children_of(store: ChildHost, parent_id: str) -> builtins.list[ChildInfo]:
    """The children of ``parent_id`` in fork order (empty for an unknown parent). A child
    that was deleted (or whose fork never completed) is left out; an active one is checked
    against its log, so a crash between a merge's mark and the index update still reports
    the truth. A shredded child is reported with ``shredded=True`` and the state the index
    holds (its log cannot be read); the children of a shredded parent are found from the ids
    its index keeps (see :func:`keep_ids_of_children`)."""
    out = []
    for entry in _index(store, parent_id):
        state: ChildState = entry.state
        ended_at = entry.ended_at
        if not store.exists(entry.id):
            continue  # deleted by a process killed before it cleaned the index, or not made yet
        shredded = is_shredded(store, entry.id)
        if state == "active" and not shredded:
            try:
                child = store.get(entry.id)
                fork = fork_of(child)
                if fork is None or fork.fork_id != entry.fork_id:
                    continue  # the id was deleted and reused for another session
                state, ended_at = _tail_state(child)
            except SessionShredded:
                shredded = True  # a shred that stopped before the key was destroyed
        elif state == "merged" and ended_at is None and not shredded:
            # An index written before it kept the end time: the child's mark has it.
            with contextlib.suppress(SessionShredded):
                ended_at = _tail_state(store.get(entry.id))[1]
        out.append(
            ChildInfo(
                id=entry.id,
                parent=parent_id,
                agent=entry.agent,
                task=entry.task,
                fork_seq=entry.fork_seq,
                fork_id=entry.fork_id,
                state=state,
                created_at=entry.created_at,
                merged_at=ended_at if state == "merged" else None,
                shredded=shredded,
            )
        )
    return out


def descendants(store: ChildHost, session_id: str) -> dict[str, str]:
    """Every session below ``session_id`` (its children, theirs, and so on) that still
    exists, mapped to its parent, in fork order, depth first: the order ``rm -r`` and
    ``shred -r`` report them in. One children index read per session of the subtree;
    shredded children are found too (from the ids a shredded parent's index keeps).

    Each session is reported once, under the first parent that names it, and
    ``session_id`` itself never (a cycle of reused ids ends the walk instead of looping);
    a session that does not exist, or has no children, has none."""
    found: dict[str, str] = {}

    def walk(parent: str) -> None:
        for child in children_of(store, parent):
            # The index may keep an ended child that was deleted alone: children_of reports
            # only what exists. Once each: a guard against a cycle of reused ids.
            if child.id not in found and child.id != session_id:
                found[child.id] = parent
                walk(child.id)

    walk(session_id)
    return found


class SessionTree(msgspec.Struct, kw_only=True):
    """One session of a forest of child sessions (:func:`tree`): what the store's listing
    reports of it, what its parent's children index says of it (nothing for a session at the
    top), and its children in fork order. Plain values, for printing (``agentsession ls
    --tree``) or encoding as JSON."""

    id: str
    """The session id."""
    last_seq: int | None
    """Its last seq, which is its number of events; None when the listing did not report it
    (the backend does not know it cheaply, or the session was not listed)."""
    updated_at: _dt.datetime | None
    """When it was last appended to; None when unknown or not listed."""
    size: int | None
    """Bytes in storage; None when the backend does not keep it per session, or the session
    was not listed."""
    agent: str | None = None
    """The subagent working in it, as its parent's index says (None at the top)."""
    state: ChildState | None = None
    """``active``, ``merged`` or ``discarded`` (None at the top)."""
    fork_seq: int | None = None
    """The parent's seq it was forked at (None at the top)."""
    shredded: bool = False
    """Its key was destroyed (``store.shred``): its log cannot be read."""
    children: builtins.list[SessionTree] = []
    """Its child sessions, in fork order."""


def tree(store: ChildHost, infos: Sequence[SessionInfo]) -> builtins.list[SessionTree]:
    """The sessions ``infos`` lists (``store.list(...)``, in its order) as a forest: a listed
    session is at the top unless it is a child of another listed session, and every session
    has its children below it, in fork order, depth first.

    A child the listing left out (by ``prefix`` or ``limit``) still shows under its parent,
    without what only the listing reports (events, size, time). One children index read per
    session in the forest, never a session's events (but the check of an active child's state
    that :func:`children_of` makes). Each session appears once: a cycle of reused ids is cut
    where it closes, and listed sessions that only a cycle reaches go at the top; a child whose
    parent is missing from the listing is at the top."""
    listed = {info.id: info for info in infos}
    # One children_of per listed session: finding the top sessions reads one meta entry each.
    kids_of: dict[str, builtins.list[ChildInfo]] = {sid: children_of(store, sid) for sid in listed}
    nested = {child.id for kids in kids_of.values() for child in kids}
    placed: set[str] = set()

    def node(sid: str, fork: ChildInfo | None) -> SessionTree:
        placed.add(sid)
        info = listed.get(sid)
        kids = kids_of[sid] if sid in kids_of else children_of(store, sid)
        below = [
            node(kid.id, kid)
            for kid in kids
            # Once each (a guard against a cycle of reused ids). children_of reports only
            # children that exist; checked again, as the walk may reach one after it went.
            if kid.id not in placed and (kid.id in listed or store.exists(kid.id))
        ]
        return SessionTree(
            id=sid,
            last_seq=info.last_seq if info is not None and info.last_seq >= 0 else None,
            updated_at=info.updated_at if info is not None else None,
            size=(info.size or None) if info is not None else None,
            agent=fork.agent if fork is not None else None,
            state=fork.state if fork is not None else None,
            fork_seq=fork.fork_seq if fork is not None else None,
            shredded=fork.shredded if fork is not None else is_shredded(store, sid),
            children=below,
        )

    trees = [node(info.id, None) for info in infos if info.id not in nested]
    # Listed sessions no top session reached (only possible through a cycle) go at the top.
    trees += [node(info.id, None) for info in infos if info.id not in placed]
    return trees


# ---------------------------------------------------------------------------------------------
# Fork.


def fork_of(session: _Session) -> SessionFork | None:
    """The ``session/fork`` payload of a child session (None for a session that is not one)."""
    return fork_in(session.read(0, 1))


def inheritable(entries: Sequence[IndexedMessage], inherit: int) -> builtins.list[Message]:
    """The last ``inherit`` messages of a settled derived history (-1: all; see
    :meth:`~agentsession.derive.Deriver.settled`), cut so that they never start with a tool
    result whose call was cut off."""
    msgs = [entry.message for entry in entries]
    if inherit >= 0:
        msgs = msgs[len(msgs) - inherit :] if inherit else []
    while msgs and msgs[0].role == "tool":
        msgs.pop(0)
    return msgs


def _check_text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise UsageError(f"{name} must be a string, not {type(value).__name__}")
    return value


def _check_metadata(metadata: object) -> dict[str, str]:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise UsageError("metadata must be a mapping of strings to strings")
    return dict(metadata)


def fork(
    store: ChildHost,
    parent: _Session,
    *,
    agent: str,
    inherit: int | Literal["all"],
    max_messages: int | None,
    task: str,
    meta: Mapping[str, str] | None,
    parent_agent: str | None,
    child_id: str | None,
) -> Any:
    """Create a child of ``parent`` (see :meth:`agentsession.session.BaseSession.fork`)."""
    agent = _check_text("agent", agent)
    task = _check_text("task", task)
    metadata = _check_metadata(meta)
    if inherit == "all":
        count = -1
    elif isinstance(inherit, int) and not isinstance(inherit, bool) and inherit >= 0:
        count = inherit
    else:
        raise UsageError(f"inherit must be an int >= 0 or 'all', not {inherit!r}")
    if max_messages is not None and (
        not isinstance(max_messages, int) or isinstance(max_messages, bool) or max_messages < 1
    ):
        raise UsageError(f"max_messages must be an int >= 1 or None, not {max_messages!r}")
    sid = check_session_id(child_id) if child_id is not None else _new_child_id(parent.id, agent)
    history: builtins.list[Message] = []
    parent_seq = parent.latest_seq
    if count:
        settled, parent_seq = parent._settled_entries(parent_agent)
        history = inheritable(settled, count)
    fork_id = uuid.uuid4().hex
    now = store.clock()
    entry = _IndexEntry(
        id=sid,
        fork_id=fork_id,
        agent=agent,
        task=task,
        fork_seq=parent_seq,
        parent_agent=parent_agent or "",
        created_at=now,
    )
    payload = SessionFork(
        parent=parent.id,
        parent_seq=parent_seq,
        fork_id=fork_id,
        agent=agent,
        task=task,
        inherit=count,
        messages=history,
        max_messages=max_messages or 0,
        metadata=metadata,
    )
    # The index first: a crash before the child exists leaves an entry children_of skips.
    _index_add(store, parent.id, entry)
    try:
        child = store.create(sid, [Event.new(SESSION_FORK, payload, agent=agent, time=now)])
    except DuplicateSession:
        _index_change(store, parent.id, sid, fork_id, None)
        raise
    if agent or metadata:
        update_record(store, child, agent_id=agent or None, metadata=metadata or None)
    link = Event.new(
        SUBAGENT_START,
        SubagentStart(agent=agent, session=sid, task=task),
        agent=parent_agent or "",
        meta={_FORK_ID: fork_id},
    )
    seq = parent.append(link)
    _fire(
        store,
        LifecycleEvent(type="fork", child_id=sid, parent_id=parent.id, agent=agent, parent_seq=seq),
    )
    return child


def _new_child_id(parent_id: str, agent: str) -> str:
    """lango's child key shape, ``<parent>:child:<agent>:``, with a random suffix instead of a
    clock reading (two forks in one clock tick never collide)."""
    return f"{parent_id}:child:{agent or 'agent'}:{uuid.uuid4().hex[:16]}"


# ---------------------------------------------------------------------------------------------
# Merge and discard.


def _tail_state(child: _Session) -> tuple[ChildState, _dt.datetime | None]:
    """A child's state from the end of its log (a mark is the last thing a merge or discard
    writes), and the time of its mark: what the index says ``active`` is checked here,
    reading a few events rather than the child's whole log."""
    state: ChildState = "active"
    ended_at: _dt.datetime | None = None
    for event in child.read(max(1, child.latest_seq - _TAIL_EVENTS)):
        if event.type == SESSION_MERGE:
            state, ended_at = "merged", event.time
        elif event.type == SESSION_DISCARD:
            state, ended_at = "discarded", event.time
    return state, ended_at


_TAIL_EVENTS = 16


def forget(store: ChildHost, session: _Session) -> None:
    """Take a session that is being deleted out of its parent's children index (nothing
    when it is not a child)."""
    fork = fork_of(session)
    if fork is not None:
        _index_change(store, fork.parent, session.id, fork.fork_id, None)


def _log_state(child: _Session) -> ChildState:
    """A child's state from its log: the last merge or discard mark decides."""
    state: ChildState = "active"
    for event in child.read(1):
        if event.type == SESSION_MERGE:
            state = "merged"
        elif event.type == SESSION_DISCARD:
            state = "discarded"
    return state


def _ending_in(parent: _Session, fork: SessionFork) -> Event | None:
    """The parent's event that ended this fork (a merge's or a discard's ``subagent/end``),
    looked for after the fork point."""
    for event in parent.read(fork.parent_seq):
        if event.type == SUBAGENT_END and event.meta.get(_FORK_ID) == fork.fork_id:
            return event
    return None


@contextmanager
def _parent_lock(store: ChildHost, parent_id: str, timeout: float | None) -> Iterator[None]:
    """The parent's turn lock, unless this thread already holds it (a merge run from inside
    the parent's own turn)."""
    if store.holds_lock(parent_id):
        yield
        return
    with store.lock(parent_id, timeout=timeout):
        yield


def _messages_for_parent(
    messages: Sequence[Message], author: str, agent: str
) -> builtins.list[Event]:
    out: builtins.list[Event] = []
    for msg in messages:
        if msg.role == "tool":
            out.extend(Event.new(TOOL_RESULT, r, agent=agent) for r in msg.tool_results)
            continue
        if not msg.author and author:
            msg = msgspec.structs.replace(msg, author=author)
        kind = ASSISTANT_MESSAGE if msg.role == "assistant" else USER_MESSAGE
        out.append(Event.new(kind, msg, agent=agent))
    return out


def _child_context(store: ChildHost, child: _Session) -> tuple[SessionFork, _IndexEntry, Any]:
    fork = fork_of(child)
    if fork is None:
        raise UsageError(f"session {child.id!r} is not a child session (it was not forked)")
    entry = next(
        (e for e in _index(store, fork.parent) if e.id == child.id and e.fork_id == fork.fork_id),
        None,
    )
    if entry is None:
        raise ChildStateError(
            child.id,
            "orphaned",
            f"child session {child.id!r} is not a child of {fork.parent!r} any more: the "
            "parent was deleted (and perhaps created again) after the fork",
        )
    if is_shredded(store, fork.parent):
        raise ChildStateError(
            child.id,
            "orphaned",
            f"child session {child.id!r} cannot end into its parent {fork.parent!r}: the "
            "parent was shredded",
        )
    return fork, entry, store.get(fork.parent)


def _refuse_ended(child: _Session, state: ChildState) -> None:
    if state != "active":
        raise ChildStateError(child.id, state, f"child session {child.id!r} was already {state}")


def merge(
    store: ChildHost,
    child: _Session,
    summary: Message | str | None,
    *,
    as_author: str | None,
    agent: str | None,
    lock_timeout: float | None,
) -> int:
    """Merge ``child`` into its parent (see :meth:`agentsession.session.BaseSession.merge`);
    returns the seq of the parent's ``subagent/end``."""
    if summary == "":
        summary = None  # lango's MergeChildSession(ctx, id, ""): the whole history
    if isinstance(summary, str):
        summary = Message.assistant(summary)
    if summary is not None and not isinstance(summary, Message):
        raise UsageError(f"summary must be a Message, a string or None, not {summary!r}")
    if as_author is not None:
        _check_text("as_author", as_author)
    fork, entry, parent = _child_context(store, child)
    author = as_author or fork.agent
    target_agent = entry.parent_agent if agent is None else _check_text("agent", agent)
    with _parent_lock(store, fork.parent, lock_timeout):
        _refuse_ended(child, _log_state(child))
        ended = _ending_in(parent, fork)
        if ended is not None:  # a merge (or discard) that crashed before marking the child
            done = ended.decode(SubagentEnd)
            if done.status != "merged":
                _mark(store, child, fork, "discarded", ended.seq, done.summary, 0)
                raise ChildStateError(child.id, "discarded")
            count = int(ended.meta.get("messages", 0))
            mode = str(ended.meta.get("mode", ""))
            _mark(store, child, fork, "merged", ended.seq, mode, count)
            seq = ended.seq
        else:
            if summary is not None:
                mode = "summary"
                merged = [summary]
            else:
                mode = "messages"
                merged = [e.message for e in child.entries(None) if e.seq > 1]
            batch = _messages_for_parent(merged, author, target_agent)
            end = Event.new(
                SUBAGENT_END,
                SubagentEnd(
                    agent=fork.agent,
                    session=child.id,
                    status="merged",
                    summary=summary.text if summary is not None else "",
                ),
                agent=target_agent,
                meta={_FORK_ID: fork.fork_id, "mode": mode, "messages": len(merged)},
            )
            seq = parent.append_many([*batch, end])[-1]
            _mark(store, child, fork, "merged", seq, mode, len(merged))
    _fire(
        store,
        LifecycleEvent(
            type="merge", child_id=child.id, parent_id=fork.parent, agent=fork.agent, parent_seq=seq
        ),
    )
    return seq


def discard(store: ChildHost, child: _Session, reason: str, *, lock_timeout: float | None) -> int:
    """Discard ``child`` (see :meth:`agentsession.session.BaseSession.discard`); returns the
    seq of the note in the parent."""
    reason = _check_text("reason", reason)
    fork, entry, parent = _child_context(store, child)
    with _parent_lock(store, fork.parent, lock_timeout):
        _refuse_ended(child, _log_state(child))
        ended = _ending_in(parent, fork)
        if ended is not None:
            done = ended.decode(SubagentEnd)
            if done.status == "merged":
                _mark(
                    store,
                    child,
                    fork,
                    "merged",
                    ended.seq,
                    str(ended.meta.get("mode", "")),
                    int(ended.meta.get("messages", 0)),
                )
                raise ChildStateError(child.id, "merged")
            seq = ended.seq
        else:
            note = Event.new(
                SUBAGENT_END,
                SubagentEnd(agent=fork.agent, session=child.id, status="discarded", summary=reason),
                agent=entry.parent_agent,
                meta={_FORK_ID: fork.fork_id},
            )
            seq = parent.append(note)
        _mark(store, child, fork, "discarded", seq, reason, 0)
    _fire(
        store,
        LifecycleEvent(
            type="discard",
            child_id=child.id,
            parent_id=fork.parent,
            agent=fork.agent,
            parent_seq=seq,
        ),
    )
    return seq


def _mark(
    store: ChildHost,
    child: _Session,
    fork: SessionFork,
    state: ChildState,
    parent_seq: int,
    detail: str,
    count: int,
) -> None:
    """The child's mark (the last write of a merge or discard), then its index state."""
    if state == "merged":
        event = Event.new(
            SESSION_MERGE,
            SessionMerge(
                parent=fork.parent,
                fork_id=fork.fork_id,
                parent_seq=parent_seq,
                mode=detail,
                messages=count,
            ),
            agent=fork.agent,
        )
    else:
        event = Event.new(
            SESSION_DISCARD,
            SessionDiscard(
                parent=fork.parent, fork_id=fork.fork_id, parent_seq=parent_seq, reason=detail
            ),
            agent=fork.agent,
        )
    # The mark's time (the store's clock, as an append would stamp it) is the index's too.
    event = msgspec.structs.replace(event, time=store.clock())
    child.append(event)
    _index_change(store, fork.parent, child.id, fork.fork_id, state, event.time)


# ---------------------------------------------------------------------------------------------
# Lifecycle hooks.


def _fire(store: ChildHost, event: LifecycleEvent) -> None:
    """Call every hook; an exception is logged, never raised (the write is durable)."""
    for hook in store._lifecycle_hooks():
        try:
            hook(event)
        except Exception:
            log.exception(
                "a lifecycle hook failed on %s of child session %r (the %s is written and stays)",
                event.type,
                event.child_id,
                event.type,
            )


# ---------------------------------------------------------------------------------------------
# The session record.

_record_decoder = msgspec.json.Decoder(_StoredRecord)


def _stored_record(store: ChildHost, session_id: str) -> _StoredRecord:
    raw = read_session_value(store, RECORD_KIND, session_id)
    return _StoredRecord() if raw is None else _record_decoder.decode(raw.encode())


def stored_record(store: ChildHost, session_id: str) -> _StoredRecord:
    """What is stored of the session's record (what ``session.update`` and ``set_record`` set),
    without reading its log."""
    return _stored_record(store, session_id)


def record_of(store: ChildHost, session: _Session) -> SessionRecord:
    """The session's record (see :meth:`agentsession.session.BaseSession.info`)."""
    stored = _stored_record(store, session.id)
    last = session._last_time()
    first = session.read(0, 1) if last is not None else []
    created = first[0].time if first else None
    fork = None
    if first and first[0].type == SESSION_FORK:
        try:
            fork = first[0].decode(SessionFork)
        except (msgspec.DecodeError, msgspec.ValidationError):
            fork = None
    updated = last
    if stored.updated_at is not None and (updated is None or stored.updated_at > updated):
        updated = stored.updated_at
    return SessionRecord(
        id=session.id,
        created_at=created,
        updated_at=updated,
        agent_id=stored.agent_id,
        channel_type=stored.channel_type,
        channel_id=stored.channel_id,
        model=stored.model,
        metadata=dict(stored.metadata),
        parent=fork.parent if fork is not None else "",
        fork_seq=fork.parent_seq if fork is not None else 0,
        title=stored.title,
        tags=stored.tags,
        user=stored.user,
        tenant=stored.tenant,
    )


def update_record(
    store: ChildHost,
    session: _Session,
    *,
    agent_id: str | None = None,
    channel_type: str | None = None,
    channel_id: str | None = None,
    model: str | None = None,
    metadata: Mapping[str, str] | None = None,
    title: str | None = None,
    tags: Sequence[str] | None = None,
    user: str | None = None,
    tenant: str | None = None,
) -> SessionRecord:
    """Change the session's record (see :meth:`agentsession.session.BaseSession.update`)."""
    fields = _checked_fields(
        metadata,
        agent_id=agent_id,
        channel_type=channel_type,
        channel_id=channel_id,
        model=model,
        title=title,
        user=user,
        tenant=tenant,
    )
    if tags is not None:
        if isinstance(tags, str):
            raise UsageError("update(tags=...) takes a list of tags, not one string")
        checked = tuple(dict.fromkeys(tags))
        for tag in checked:
            if not isinstance(tag, str) or not tag.strip():
                raise UsageError(f"a tag must be a non-blank string, not {tag!r}")
        fields["tags"] = checked
    if session.latest_seq == 0 and read_session_value(store, RECORD_KIND, session.id) is None:
        raise SessionNotFound(
            session.id, f"session {session.id!r} has no events: there is no record to update"
        )

    def change(raw: str | None) -> str | None:
        current = _StoredRecord() if raw is None else _record_decoder.decode(raw.encode())
        new = msgspec.structs.replace(current, **fields, updated_at=store.clock())
        return encode(new).decode()

    update_session_value(store, RECORD_KIND, session.id, change)
    return record_of(store, session)


def _checked_fields(metadata: Mapping[str, str] | None, **texts: str | None) -> dict[str, Any]:
    """The record fields given (not None), each text checked, and the metadata checked."""
    fields: dict[str, Any] = {
        name: _check_text(name, value) for name, value in texts.items() if value is not None
    }
    if metadata is not None:
        fields["metadata"] = _check_metadata(metadata)
    return fields


def create_record(
    store: ChildHost,
    session: _Session,
    *,
    agent_id: str | None = None,
    channel_type: str | None = None,
    channel_id: str | None = None,
    model: str | None = None,
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write the record of a session created without events (see
    :meth:`agentsession.BaseStore.create`); :class:`DuplicateSession` when it has events or a
    record already."""
    fields = _checked_fields(
        metadata,
        agent_id=agent_id,
        channel_type=channel_type,
        channel_id=channel_id,
        model=model,
    )

    def duplicate() -> DuplicateSession:
        return DuplicateSession(session.id, f"session {session.id!r} already exists")

    if session.latest_seq:
        raise duplicate()

    def change(raw: str | None) -> str | None:
        if raw is not None:
            raise duplicate()
        return encode(_StoredRecord(**fields, updated_at=store.clock())).decode()

    update_session_value(store, RECORD_KIND, session.id, change)
