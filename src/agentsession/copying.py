"""``copy_store``: copy sessions from one store to another, with everything stored beside them.

A copy takes, for every session, its events (ids, times, payloads and all, in batches of
:data:`BATCH` events; the first batch creates the session atomically) and then every meta
entry of the store (:meth:`~agentsession.store.BaseStore._meta_list`, so also namespaces this
module does not know by name): the session record, the children index, agent bindings, the
active-session map, the CLI pointer, the integrations' state. Then it reads the copy back and
verifies it: per session the number of events, the last seq, the event ids in order and a
SHA-256 digest of the events as stored (type, agent, user, time, id, payload, meta), and every
meta entry's value.

What is not copied: the key records of an encrypted store (``crypto``, ``crypto-session``,
``crypto-active``: each store has its own keys), and sessions that were shredded (their events
cannot be read; a whole-store copy leaves them out and says so, naming one is an error).

Encryption is each store's own. Events are read as the source opens them and written through
the destination's append pipeline, which seals them when the destination is encrypted. A meta
value the source sealed under a session's key is opened with the source's key of that session
and sealed again with the destination's (or written in plaintext to a plain destination); the
session record and the children index are sealed in an encrypted destination also when the
source was plain, as the library seals them there.

Times: events keep their times. The last activity of a JSONL session is its file's
modification time; the copy sets it to the source's last activity (``list()``'s
``updated_at``), so the catalogue of the copy is the source's. The other backends derive it
from the last event's time, which the copy keeps.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Final

import msgspec

from .archive import ARCHIVE_KIND, SEGMENT_KIND
from .branching import BRANCHES_KIND, branch_refs
from .children import (
    CHILDREN_KIND,
    RECORD_KIND,
    STORE_BOX_HEAD,
    open_store_value,
    seal_store_value,
)
from .contract import SessionInfo, check_session_id
from .crypto import ACTIVE_KIND, SESSION_KIND, SHREDDED, STORE_KIND, KeyRing
from .errors import (
    ConflictError,
    DuplicateSession,
    EncryptionError,
    SessionError,
    SessionNotFound,
    SessionShredded,
    UsageError,
)
from .events import Event, encode_event
from .session import BaseSession
from .store import SESSION_META_KINDS, BaseStore, open_store

__all__ = ["BATCH", "CopyProgress", "CopyReport", "copy_store"]

BATCH: Final = 1000
"""Events read, written and verified at a time."""

KEY_RECORD_KINDS: Final = frozenset({STORE_KIND, SESSION_KIND, ACTIVE_KIND})
"""Meta namespaces of an encrypted store's keys: never copied (each store has its own)."""

_ARCHIVE_KINDS: Final = frozenset({ARCHIVE_KIND, SEGMENT_KIND})
"""Not copied: the copy's logs are written whole (an archive's events sealed under the
source's keys would not open in the destination)."""
_SEALED_IN_ENCRYPTED: Final = frozenset({RECORD_KIND, CHILDREN_KIND, "adk-snapshot"})
"""Session-keyed namespaces the library seals in an encrypted store whatever the source did
(the session record, the children index, the ADK integration's state snapshot)."""

_STORE_SEALED_IN_ENCRYPTED: Final = frozenset({"adk-app-state", "adk-user-state"})
"""Namespaces shared by sessions that the library seals under the store key in an encrypted
store (the ADK integration's ``app:`` and ``user:`` state)."""

_SEALED_HEAD: Final = '{"sealed":1,'

CopyProgress = Callable[[int, int, str], None]
"""``progress(done, total, session_id)``: called once per session, after ``session_id`` was
copied, completed, found already there or left out (``done`` of ``total`` sessions)."""


class CopyReport(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`copy_store` did; everything it wrote was read back and verified."""

    source: str
    """Where the sessions came from (the source's location)."""
    destination: str
    """Where they went (the destination's location)."""
    sessions: int
    """Sessions written: copied whole, or completed after an interrupted copy."""
    events: int
    """Events written."""
    meta: int
    """Meta entries written (records, children indexes, bindings, store-wide entries)."""
    verified_sessions: int
    """Sessions whose copy was verified (written, completed or already there)."""
    verified_meta: int
    """Meta entries verified equal to the source's."""
    completed: list[str] = msgspec.field(default_factory=list)
    """Sessions an earlier, interrupted copy had left half-copied, completed now."""
    skipped: list[str] = msgspec.field(default_factory=list)
    """Sessions the destination held already, whole (with ``skip_existing``)."""
    shredded: list[str] = msgspec.field(default_factory=list)
    """Sessions left out because they were shredded (a whole-store copy only)."""
    meta_kept: list[tuple[str, str]] = msgspec.field(default_factory=list)
    """``(kind, key)`` of store-wide entries, or of entries of sessions already there, that
    the destination held with another value: left as they were (the destination's own)."""


class _Entry(msgspec.Struct, frozen=True):
    kind: str
    key: str
    value: str
    """The plaintext value (opened when the source sealed it)."""
    sealed: bool
    """Whether the source held it sealed."""
    store_key: bool = False
    """Whether the source sealed it under the store key (a value shared by sessions) rather
    than a session's key."""


def copy_store(
    src: BaseStore | str | os.PathLike[str],
    dst: BaseStore | str | os.PathLike[str],
    *,
    ids: Iterable[str] | None = None,
    skip_existing: bool = False,
    progress: CopyProgress | None = None,
) -> CopyReport:
    """Copy sessions, with everything stored beside them, from ``src`` to ``dst``; verify it.

    ``src`` and ``dst`` are store objects or what :func:`~agentsession.open_store` takes (a
    URL or a path; the source must exist, the destination is created when missing; stores
    opened here are closed here, store objects are left open). Encrypted stores are passed
    as store objects opened with their keys. ``ids`` names the sessions to copy (each must
    exist in the source); without it, every session and every store-wide meta entry (the
    active-session map, the CLI pointer, integration state) is copied. With ``ids``, only
    the named sessions and the meta entries keyed by their ids are.

    A session the destination holds already raises
    :class:`~agentsession.errors.DuplicateSession` (nothing is written), unless
    ``skip_existing``: then it is left when it is a whole copy (its missing meta entries are
    added), completed when it is the start of one (an interrupted copy: running the same copy
    again resumes it), and :class:`~agentsession.errors.ConflictError` is raised when its
    events differ from the source's. ``progress`` (see :data:`CopyProgress`) is called once
    per session. A verification that fails raises :class:`~agentsession.errors.SessionError`
    naming the session or entry. See the module docstring for what is copied and how.
    """
    if progress is not None and not callable(progress):
        raise UsageError(f"progress must be callable, not {progress!r}")
    wanted_ids = _check_ids(ids)
    source = open_store(src, create=False) if not isinstance(src, BaseStore) else src
    target: BaseStore | None = None
    try:
        infos = {info.id: info for info in source.list()}
        wanted = wanted_ids if wanted_ids is not None else sorted(infos)
        missing = [sid for sid in wanted if sid not in infos and not source.exists(sid)]
        if missing:
            more = f" (nor {len(missing) - 1} more of the ids given)" if len(missing) > 1 else ""
            raise SessionNotFound(
                missing[0], f"no session {missing[0]!r} in {source.location}{more}"
            )
        target = dst if isinstance(dst, BaseStore) else open_store(dst)
        if target is source:
            raise UsageError("the source and the destination are the same store object")
        copier = _Copier(source, target, infos, whole=wanted_ids is None)
        return copier.run(wanted, skip_existing=skip_existing, progress=progress)
    finally:
        if target is not None and target is not dst:
            target.close()
        if source is not src:
            source.close()


def _check_ids(ids: Iterable[str] | None) -> list[str] | None:
    if ids is None:
        return None
    if isinstance(ids, str):
        raise UsageError("ids must be a collection of session ids, not one string")
    return list(dict.fromkeys(check_session_id(sid) for sid in ids))


class _Copier:
    """One copy: the two stores and what it has done so far."""

    def __init__(
        self, src: BaseStore, dst: BaseStore, infos: dict[str, SessionInfo], *, whole: bool
    ) -> None:
        self.src = src
        self.dst = dst
        self.infos = infos
        self.whole = whole
        self.src_ring: KeyRing | None = src._keyring if src.encrypted else None
        self.dst_ring: KeyRing | None = dst._keyring if dst.encrypted else None
        self.events = 0
        self.meta = 0
        self.verified_meta = 0
        self.meta_kept: list[tuple[str, str]] = []

    # -- the whole copy ---------------------------------------------------------------------

    def run(
        self, wanted: Sequence[str], *, skip_existing: bool, progress: CopyProgress | None
    ) -> CopyReport:
        src, dst = self.src, self.dst
        present = [sid for sid in wanted if dst.exists(sid)]
        if present and not skip_existing:
            which = (
                f"session {present[0]!r} already exists"
                if len(present) == 1
                else f"{len(present)} sessions already exist ({_listing(present)})"
            )
            raise DuplicateSession(
                present[0],
                f"{which} in {dst.location}; remove them there first, or skip them "
                "(skip_existing; --skip-existing on the command line) to leave them and "
                "complete any an interrupted copy left half-copied",
            )
        for sid in present:  # before anything is written
            self._check_is_a_copy(sid)
        shredded = {sid for sid in wanted if self._shredded(sid)}
        if shredded and not self.whole:
            sid = min(shredded)
            raise SessionShredded(
                f"session {sid!r} in {src.location} was shredded: its key is destroyed, so "
                "it cannot be copied"
            )
        entries = self._source_entries(set(wanted), shredded)
        wanted = self._origins_first(wanted)
        by_session: dict[str, list[_Entry]] = {}
        store_wide: list[_Entry] = []
        wanted_set = set(wanted)
        for entry in entries:
            if entry.key in wanted_set:
                by_session.setdefault(entry.key, []).append(entry)
            elif self.whole:
                store_wide.append(entry)
        written = 0
        verified = 0
        completed: list[str] = []
        skipped: list[str] = []
        left_out: list[str] = []
        for done, sid in enumerate(wanted, 1):
            outcome = "shredded" if sid in shredded else self._copy_shreddable(sid, sid in present)
            if outcome == "shredded":
                left_out.append(sid)
            else:
                own = by_session.get(sid, [])
                if outcome == "skipped":
                    skipped.append(sid)
                    self._copy_entries(own, overwrite=False)
                else:
                    written += 1
                    if outcome == "completed":
                        completed.append(sid)
                    self._copy_entries(own, overwrite=True)
                verified += 1
            if progress is not None:
                progress(done, len(wanted), sid)
        self._copy_entries(store_wide, overwrite=False)
        return CopyReport(
            source=src.location,
            destination=dst.location,
            sessions=written,
            events=self.events,
            meta=self.meta,
            verified_sessions=verified,
            verified_meta=self.verified_meta,
            completed=completed,
            skipped=skipped,
            shredded=left_out,
            meta_kept=self.meta_kept,
        )

    def _origins_first(self, wanted: Sequence[str]) -> list[str]:
        """``wanted`` with every branch after its origin (a branch reads its shared history
        from its origin, in the destination too); :class:`UsageError` for a branch whose
        origin is neither copied nor in the destination."""
        origin_of = {
            ref.id: origin
            for _, origin, raw in self.src._meta_list(BRANCHES_KIND)
            for ref in branch_refs(raw)
        }
        chosen = set(wanted)
        for sid in wanted:
            origin = origin_of.get(sid)
            if origin is not None and origin not in chosen and not self.dst.exists(origin):
                raise UsageError(
                    f"session {sid!r} is a branch of {origin!r}, which is neither copied nor "
                    f"in {self.dst.location}: copy it too (the branch reads its history from "
                    "it)"
                )

        def depth(sid: str) -> int:
            seen = 0
            while sid in origin_of and seen < len(origin_of):
                sid = origin_of[sid]
                seen += 1
            return seen

        return sorted(wanted, key=depth)

    def _copy_shreddable(self, sid: str, present: bool) -> str:
        """:meth:`_copy_session`, or ``shredded`` when a whole-store copy meets a session whose
        shredding was interrupted (the notice is in its log, its key not yet destroyed)."""
        try:
            return self._copy_session(sid, present)
        except SessionShredded:
            if not self.whole:
                raise
            return "shredded"

    def _shredded(self, sid: str) -> bool:
        ring = self.src_ring
        return ring is not None and self.src._meta_get(SESSION_KIND, sid) == SHREDDED

    # -- events ---------------------------------------------------------------------------

    def _copy_session(self, sid: str, present: bool) -> str:
        """Copy one session's events and verify them: ``copied``, ``completed`` or
        ``skipped`` (already whole in the destination)."""
        src, dst = self.src, self.dst
        reader = src._open_session(sid)
        writer: BaseSession = dst._open_session(sid)
        writer._replaying = True
        try:
            have = writer.latest_seq if present else 0
            total = reader.latest_seq
            if have > total:
                raise self._not_a_copy(sid, have)
            after = 0
            origin = reader.origin
            fresh_copy = not have
            if origin is not None:
                # A branch is copied as one: its marker first (the destination's session
                # becomes the branch), then its own events; the shared part stays its origin's.
                after = origin.seq
                if not have:
                    marker = reader.read(after=after, limit=1)
                    writer.append_many(marker, expect_seq=0)
                    writer._load()
                    self.events += 1
                    have = writer.latest_seq
            while after < total:
                batch = reader.read(after=after, limit=BATCH)
                if not batch:
                    break
                for offset, event in enumerate(batch, after + 1):  # (a branch: from its marker)
                    if event.seq != offset:
                        raise SessionError(
                            f"session {sid!r} in {src.location} has no event at seq {offset} "
                            f"(the next is seq {event.seq}): a copy needs gap-free seqs"
                        )
                kept = [e for e in batch if e.seq <= have]
                if kept:
                    stored = writer.read(after=after, limit=len(kept))
                    if not _same(stored, kept):
                        raise self._not_a_copy(sid, have)
                fresh = batch[len(kept) :]
                if fresh:
                    try:
                        writer.append_many(fresh, expect_seq=fresh[0].seq - 1)
                    except ConflictError:
                        raise ConflictError(
                            f"session {sid!r} in {dst.location} was written to while it was "
                            "copied; nothing more was copied into it"
                        ) from None
                    self.events += len(fresh)
                after = batch[-1].seq
        finally:
            reader.close()
            writer.close()
        self._verify_events(sid)
        info = self.infos.get(sid)
        if info is not None and info.updated_at is not None:
            dst._catalog.set_last_activity(sid, info.updated_at)
        if fresh_copy:
            return "copied"
        return "skipped" if have == total else "completed"

    def _check_is_a_copy(self, sid: str) -> None:
        """Raise :class:`ConflictError` unless the destination's events of ``sid`` are the
        source's first events (a whole or an interrupted copy)."""
        reader = self.src._open_session(sid)
        stored = self.dst._open_session(sid)
        try:
            have = stored.latest_seq
            after = 0
            while after < have:
                theirs = stored.read(after=after, limit=BATCH)
                if not theirs:
                    break
                if not _same(theirs, reader.read(after=after, limit=len(theirs))):
                    raise self._not_a_copy(sid, have)
                after = theirs[-1].seq
        except SessionShredded:
            if not self.whole:
                raise  # a whole copy leaves it out
        finally:
            reader.close()
            stored.close()

    def _not_a_copy(self, sid: str, have: int) -> ConflictError:
        return ConflictError(
            f"session {sid!r} in {self.dst.location} is not a copy of the one in "
            f"{self.src.location} (its {have} events differ); remove it there or leave it out "
            "(ids; --id on the command line)"
        )

    def _verify_events(self, sid: str) -> None:
        """Read both logs again, from fresh session objects, and compare them."""
        src_side, dst_side = _LogDigest(self.src, sid), _LogDigest(self.dst, sid)
        problem = src_side.differs_from(dst_side)
        if problem:
            raise SessionError(
                f"copy of {sid!r} in {self.dst.location} does not match the session in "
                f"{self.src.location}: {problem}"
            )

    # -- meta entries ---------------------------------------------------------------------

    def _source_entries(self, wanted: set[str], shredded: set[str]) -> list[_Entry]:
        entries: list[_Entry] = []
        for kind, key, raw in self.src._meta_list():
            if kind in KEY_RECORD_KINDS or kind in _ARCHIVE_KINDS:
                continue  # (a copy's logs hold every event live: read through the archive)
            if key in shredded or (kind in SESSION_META_KINDS and self._shredded(key)):
                continue  # sealed under a destroyed key, or the state of a session left out
            if not self.whole and key not in wanted:
                continue
            sealed = self.src_ring is not None and raw.startswith(_SEALED_HEAD)
            value = self._open(self.src, self.src_ring, kind, key, raw) if sealed else raw
            store_key = sealed and raw.startswith(STORE_BOX_HEAD)
            entries.append(_Entry(kind, key, value, sealed, store_key))
        return entries

    @staticmethod
    def _open(store: BaseStore, ring: KeyRing | None, kind: str, key: str, raw: str) -> str:
        if ring is None or not raw.startswith(_SEALED_HEAD):
            return raw
        if raw.startswith(STORE_BOX_HEAD):
            return open_store_value(ring, kind, key, raw)
        try:
            return ring.cipher(key).open_value(kind, raw)
        except SessionShredded:
            raise
        except EncryptionError:
            raise EncryptionError(
                f"the {kind} entry {key!r} in {store.location} is sealed, and not under the "
                f"key of a session {key!r}: it cannot be opened to be copied"
            ) from None

    def _sealed_for_dst(self, entry: _Entry) -> str:
        ring = self.dst_ring
        if ring is None:
            return entry.value
        if entry.store_key or entry.kind in _STORE_SEALED_IN_ENCRYPTED:
            return seal_store_value(ring, entry.kind, entry.key, entry.value)
        if not (entry.sealed or entry.kind in _SEALED_IN_ENCRYPTED):
            return entry.value
        return ring.cipher(entry.key).seal_value(entry.kind, entry.value)

    def _open_stored(self, entry: _Entry, raw: str | None) -> str | None:
        """The plaintext of the destination's value of ``entry``'s kind and key."""
        if raw is None:
            return None
        return self._open(self.dst, self.dst_ring, entry.kind, entry.key, raw)

    def _copy_entries(self, entries: Sequence[_Entry], *, overwrite: bool) -> None:
        """Write ``entries`` to the destination and verify each. Without ``overwrite``, an
        entry the destination holds with another value is kept there and reported."""
        dst = self.dst
        for entry in entries:
            raw = dst._meta_get(entry.kind, entry.key)
            current = self._open_stored(entry, raw)
            if current == entry.value:
                self.verified_meta += 1
                continue
            if current is not None and not overwrite:
                self.meta_kept.append((entry.kind, entry.key))
                continue
            dst._meta_set(entry.kind, entry.key, self._sealed_for_dst(entry))
            self.meta += 1
            stored = dst._meta_get(entry.kind, entry.key)
            opened = self._open_stored(entry, stored)
            if opened != entry.value:
                raise SessionError(
                    f"copy of the {entry.kind} entry {entry.key!r} in {dst.location} does not "
                    f"match the one in {self.src.location}"
                )
            self.verified_meta += 1


class _LogDigest:
    """One session's log read in batches: count, last seq, ids and a SHA-256 of the events."""

    def __init__(self, store: BaseStore, sid: str) -> None:
        self.count = 0
        self.last_seq = 0
        self.ids: list[str] = []
        digest = hashlib.sha256()
        session = store._open_session(sid)
        try:
            after = 0
            while True:
                batch = session.read(after=after, limit=BATCH)
                if not batch:
                    break
                for event in batch:
                    # The ids are compared apart: an event stored before events had ids
                    # (read back with "") gets one when it is copied.
                    digest.update(encode_event(_without_id(event)))
                    digest.update(b"\n")
                    self.ids.append(event.id)
                self.count += len(batch)
                after = self.last_seq = batch[-1].seq
        finally:
            session.close()
        self.digest = digest.hexdigest()

    def differs_from(self, other: _LogDigest) -> str:
        """What differs, for people (empty when nothing does)."""
        if self.count != other.count:
            return f"{other.count} events against {self.count}"
        if self.last_seq != other.last_seq:
            return f"last seq {other.last_seq} against {self.last_seq}"
        pairs = zip(self.ids, other.ids, strict=True)
        at = next((i for i, (a, b) in enumerate(pairs) if a and a != b), None)
        if at is not None:
            return f"the event ids differ from the {at + 1}th event on"
        if self.digest != other.digest:
            return "the events' contents differ (digest)"
        return ""


def _without_id(event: Event) -> Event:
    return msgspec.structs.replace(event, id="") if event.id else event


def _same(copied: Sequence[Event], source: Sequence[Event]) -> bool:
    """Whether ``copied`` are copies of ``source``: the same events, and the same ids where
    the source has one (an event stored before events had ids was given one by the copy)."""
    if len(copied) != len(source):
        return False
    return all(
        encode_event(c if s.id else _without_id(c)) == encode_event(s)
        for c, s in zip(copied, source, strict=True)
    )


def _listing(ids: Sequence[str], limit: int = 3) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")
