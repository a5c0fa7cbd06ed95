"""Retention: policies that archive or delete sessions by age and idleness, legal holds that no
policy overrides, a store-level audit log of every action, and data-subject requests (export
and erasure of everything a user took part in). ``docs/retention.md`` walks through them.

Everything here is kept in the store's meta entries, so it works alike on every backend:

* ``hold/<session id>``: a legal hold (:class:`Hold`), set by :meth:`BaseStore.hold` and
  removed by :meth:`BaseStore.release`; a held session is never archived or deleted by a
  policy, never erased by :meth:`BaseStore.erase_user`, and :meth:`BaseStore.delete` refuses it;
* ``audit/<time>-<host time in ns>-<random>``: one :class:`AuditEntry` per action taken (a
  policy's archive or delete, a hold, a release, an export, an erasure), oldest first by key.
  Entries name sessions and reasons, never a user: a data-subject request records the SHA-256
  of the user.
"""

from __future__ import annotations

import builtins
import datetime as _dt
import hashlib
import json
import os
import secrets
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Protocol

import msgspec

from ._durations import as_timedelta
from ._files import O_CLOEXEC, O_NOFOLLOW, write_synced
from .errors import SessionError, UsageError
from .events import encode_event

if TYPE_CHECKING:
    from .archive import ArchiveReport
    from .contract import SessionInfo
    from .events import Event

__all__ = [
    "AUDIT_KIND",
    "HOLD_KIND",
    "AuditEntry",
    "ErasureReport",
    "Hold",
    "Retention",
    "RetentionAction",
    "RetentionReport",
]

HOLD_KIND: Final = "hold"
"""The meta namespace of legal holds (keyed by session id)."""
AUDIT_KIND: Final = "audit"
"""The meta namespace of the audit log (keyed ``<UTC time>-<random>``, in time order)."""


@dataclass(frozen=True)
class Retention:
    """One retention rule: which sessions it covers, and when it archives or deletes them.

    A session is covered when its id starts with ``prefix`` and its catalog ``tenant`` is
    ``tenant`` (None: any). It is *idle* when its last event is at least ``idle_after`` old
    (None: every session counts as idle). An idle session at least ``delete_after`` old (since
    its first event) is deleted (with its branches and children); else one at least
    ``archive_after`` old is archived (:meth:`BaseStore.archive`). Sessions whose id is in
    ``hold``, and sessions under a legal hold (:meth:`BaseStore.hold`), are never touched.
    Durations are ``timedelta`` values or Go duration strings (``"720h"``)."""

    idle_after: _dt.timedelta | str | None = None
    """How long without an event before a session counts as idle (None: always)."""
    archive_after: _dt.timedelta | str | None = None
    """Archive idle sessions at least this old (None: never)."""
    delete_after: _dt.timedelta | str | None = None
    """Delete idle sessions at least this old (None: never)."""
    prefix: str | None = None
    """Only sessions whose id starts with this (None: all)."""
    tenant: str | None = None
    """Only sessions of this tenant, as the catalog records it (None: any)."""
    hold: tuple[str, ...] = ()
    """Session ids this rule never touches (as if held)."""

    def __post_init__(self) -> None:
        for name in ("idle_after", "archive_after", "delete_after"):
            value = as_timedelta(getattr(self, name), name)
            if value is not None and value < _dt.timedelta(0):
                raise UsageError(f"Retention({name}=...) must not be negative, not {value}")
            object.__setattr__(self, name, value)
        if isinstance(self.hold, str):
            raise UsageError("Retention(hold=...) is a sequence of session ids, not a string")
        object.__setattr__(self, "hold", tuple(self.hold))

    def _delta(self, name: str) -> _dt.timedelta | None:
        value = getattr(self, name)
        assert value is None or isinstance(value, _dt.timedelta)
        return value

    def action_for(self, info: SessionInfo, now: _dt.datetime) -> tuple[str, str] | None:
        """What this rule does to a covered session now: ``("delete" | "archive", why)``, or
        None."""
        updated = info.updated_at or info.created_at
        created = info.created_at or info.updated_at
        if updated is None or created is None:
            return None
        idle = self._delta("idle_after")
        if idle is not None and now - updated < idle:
            return None
        age = now - created
        delete, archive = self._delta("delete_after"), self._delta("archive_after")
        if delete is not None and age >= delete:
            return "delete", f"older than delete_after ({delete})"
        if archive is not None and age >= archive:
            return "archive", f"older than archive_after ({archive})"
        return None


def as_rules(retention: Retention | Sequence[Retention] | None) -> tuple[Retention, ...]:
    """The rules an ``open_store(retention=...)`` option names (one or several)."""
    if retention is None:
        return ()
    rules = (retention,) if isinstance(retention, Retention) else tuple(retention)
    for rule in rules:
        if not isinstance(rule, Retention):
            raise UsageError(f"retention= takes Retention rules, not {type(rule).__name__}")
    return rules


class Hold(msgspec.Struct, frozen=True):
    """A legal hold on a session."""

    reason: str
    """Why the session is held."""
    since: _dt.datetime
    """When the hold was placed."""


class AuditEntry(msgspec.Struct, frozen=True):
    """One action in the store's audit log."""

    time: _dt.datetime
    """When it was taken."""
    action: str
    """``archive``, ``delete``, ``hold``, ``release``, ``export``, ``erase``, ``shred``."""
    session_id: str = ""
    """The session acted on (empty for a request about a user)."""
    reason: str = ""
    """Why (the rule, the hold's reason)."""
    detail: str = ""
    """What came of it (events archived, sessions erased, a user's SHA-256)."""


@dataclass(frozen=True)
class RetentionAction:
    """One thing :meth:`BaseStore.apply_retention` did (or, in a dry run, would do)."""

    session_id: str
    """The session."""
    action: str
    """``archive``, ``delete``, or ``held`` (left alone: under a hold)."""
    reason: str
    """Why."""
    done: bool = False
    """Whether it was done (False in a dry run, for ``held``, or when it failed)."""
    detail: str = ""
    """What came of it (events archived, or the error that stopped it)."""


@dataclass(frozen=True)
class RetentionReport:
    """What :meth:`BaseStore.apply_retention` did, session by session."""

    dry_run: bool
    """Whether nothing was changed."""
    actions: list[RetentionAction] = field(default_factory=list)
    """The actions, in the order taken."""

    def of(self, action: str) -> builtins.list[str]:
        """The ids of the sessions with ``action``."""
        return [a.session_id for a in self.actions if a.action == action]


@dataclass(frozen=True)
class ErasureReport:
    """What :meth:`BaseStore.erase_user` did."""

    erased: list[str] = field(default_factory=list)
    """The sessions erased."""
    method: str = "delete"
    """``shred`` (an encrypted store: the keys are destroyed, then the logs deleted) or
    ``delete``."""
    held: list[str] = field(default_factory=list)
    """The sessions the user took part in that a legal hold kept."""


# -- the store's side --------------------------------------------------------------------------


class RetentionHost(Protocol):
    """What retention asks of the store (:class:`~agentsession.BaseStore` is one)."""

    retention: tuple[Retention, ...]
    clock: Callable[[], _dt.datetime]

    @property
    def encrypted(self) -> bool:
        """Whether the store is encrypted."""
        ...

    def list(self, prefix: str | None = None, limit: int | None = None, offset: int = 0, *,
             where: Mapping[str, object] | None = None, order: str = "updated",
             cursor: str | None = None) -> Sequence[SessionInfo]:  # fmt: skip
        """The catalog's listing."""
        ...

    def delete(self, session_id: str, *, recursive: bool = False) -> bool:
        """Delete a session."""
        ...

    def shred(
        self, session_id: str, *, recursive: bool = False, keep_children: bool = False
    ) -> builtins.list[str]:
        """Shred a session."""
        ...

    def archive(self, session_id: str | None = None, *, before: int | None = None,
                keep_after_marker: bool = True) -> ArchiveReport:  # fmt: skip
        """Archive a session."""
        ...

    def _meta_get(self, kind: str, key: str) -> str | None: ...

    def _meta_set(self, kind: str, key: str, value: str | None) -> None: ...

    def _meta_list(self, kind: str | None = None) -> builtins.list[tuple[str, str, str]]: ...

    def _read_all(self, session_id: str) -> builtins.list[Event]: ...


_HOLD = msgspec.json.Decoder(Hold)
_AUDIT = msgspec.json.Decoder(AuditEntry)
_ENCODE = msgspec.json.Encoder()


def hold_of(store: RetentionHost, session_id: str) -> Hold | None:
    """The session's legal hold (None: not held)."""
    text = store._meta_get(HOLD_KIND, session_id)
    if text is None:
        return None
    try:
        return _HOLD.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError):
        # A hold that does not read still holds: no policy may take a damaged one for none.
        return Hold(reason="(unreadable hold record)", since=_dt.datetime.min)


def audit(store: RetentionHost, action: str, session_id: str = "", reason: str = "",
          detail: str = "") -> None:  # fmt: skip
    """Record one action in the store's audit log."""
    now = store.clock()
    entry = AuditEntry(now, action, session_id, reason, detail)
    stamp = now.astimezone(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    # The store's clock first, then this host's, then a random part: in the order taken.
    key = f"{stamp}-{time.time_ns():020d}-{secrets.token_hex(4)}"
    store._meta_set(AUDIT_KIND, key, _ENCODE.encode(entry).decode())


def audit_log(store: RetentionHost) -> builtins.list[AuditEntry]:
    """The audit log, oldest first (an entry that does not decode is skipped)."""
    out = []
    for _kind, _key, value in sorted(store._meta_list(AUDIT_KIND), key=lambda row: row[1]):
        try:
            out.append(_AUDIT.decode(value))
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
    return out


def apply_retention(store: RetentionHost, *, dry_run: bool) -> RetentionReport:
    """Apply the store's rules (see :class:`Retention`); the first rule covering a session
    decides for it."""
    report = RetentionReport(dry_run)
    now = store.clock()
    decided: set[str] = set()
    for rule in store.retention:
        where = None if rule.tenant is None else {"tenant": rule.tenant}
        for info in builtins.list(store.list(rule.prefix, where=where, order="id")):
            if info.id in decided:
                continue
            decided.add(info.id)
            verdict = rule.action_for(info, now)
            if verdict is None:
                continue
            action, reason = verdict
            hold = hold_of(store, info.id)
            if hold is not None or info.id in rule.hold:
                why = hold.reason if hold is not None else "held by the rule"
                report.actions.append(RetentionAction(info.id, "held", f"{action}: {why}"))
                continue
            if dry_run:
                report.actions.append(RetentionAction(info.id, action, reason))
                continue
            report.actions.append(_act(store, info.id, action, reason))
    return report


def _act(store: RetentionHost, session_id: str, action: str, reason: str) -> RetentionAction:
    try:
        if action == "delete":
            store.delete(session_id, recursive=True)
            detail = "deleted"
        else:
            entry = store.archive(session_id).sessions[0]
            if entry.skipped is not None:  # nothing changed: nothing to record
                detail = f"nothing archived: {entry.skipped}"
                return RetentionAction(session_id, action, reason, False, detail)
            detail = f"{entry.moved} events archived (through seq {entry.through_seq})"
    except SessionError as exc:
        return RetentionAction(session_id, action, reason, False, f"failed: {exc}")
    audit(store, action, session_id, reason, detail)
    return RetentionAction(session_id, action, reason, True, detail)


def user_digest(user: str) -> str:
    """The SHA-256 of a user name, as the audit log records it."""
    return hashlib.sha256(user.encode("utf-8", "surrogatepass")).hexdigest()


def sessions_of_user(
    store: RetentionHost, user: str
) -> builtins.list[tuple[str, builtins.list[Event]]]:
    """Every session ``user`` took part in (the catalog's user, or any event's), with its
    events (read through the archive), in id order."""
    if not isinstance(user, str) or not user:
        raise UsageError("a data-subject request names a user (a non-empty string)")
    out = []
    for info in store.list(order="id"):
        events = store._read_all(info.id)
        if info.user == user or any(event.user == user for event in events):
            out.append((info.id, events))
    return out


def export_user(store: RetentionHost, user: str, dest: str | os.PathLike[str] | None) -> str:
    """Write every session ``user`` took part in as JSONL (one file per session, the events
    as the JSONL format stores them, opened) with ``manifest.json``; returns the directory."""
    found = sessions_of_user(store, user)
    if dest is None:
        directory = tempfile.mkdtemp(prefix="agentsession-export-")
    else:
        directory = os.fspath(dest)
        os.makedirs(directory, mode=0o700, exist_ok=True)
    os.chmod(directory, 0o700)
    files = []
    for number, (session_id, events) in enumerate(found, start=1):
        name = f"session-{number:05d}.jsonl"
        data = b"".join(encode_event(event) + b"\n" for event in events)
        _write_private(os.path.join(directory, name), data)
        files.append(
            {"session_id": session_id, "file": name, "events": len(events),
             "sha256": hashlib.sha256(data).hexdigest()}
        )  # fmt: skip
    manifest = {
        "format": "agentsession-user-export",
        "version": 1,
        "user": user,
        "exported_at": store.clock().isoformat(),
        "sessions": files,
    }
    _write_private(
        os.path.join(directory, "manifest.json"), json.dumps(manifest, indent=2).encode()
    )
    audit(store, "export", detail=f"user sha256 {user_digest(user)}: {len(files)} sessions")
    return directory


def erase_user(store: RetentionHost, user: str) -> ErasureReport:
    """Erase every session ``user`` took part in that no legal hold keeps: shredded then
    deleted in an encrypted store, deleted otherwise (with branches and children)."""
    found = sessions_of_user(store, user)
    method = "shred" if store.encrypted else "delete"
    erased, held = [], []
    for session_id, _events in found:
        if hold_of(store, session_id) is not None:
            held.append(session_id)
            continue
        if store.encrypted:
            store.shred(session_id, recursive=True)
        store.delete(session_id, recursive=True)
        erased.append(session_id)
    audit(
        store,
        "erase",
        detail=f"user sha256 {user_digest(user)}: {len(erased)} sessions {method}, "
        f"{len(held)} held",
    )
    return ErasureReport(erased, method, held)


def _write_private(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o600)
    try:
        write_synced(fd, data)
    finally:
        os.close(fd)


def holds(store: RetentionHost) -> dict[str, Hold]:
    """Every legal hold, by session id."""
    out = {}
    for _kind, key, _value in store._meta_list(HOLD_KIND):
        hold = hold_of(store, key)
        if hold is not None:
            out[key] = hold
    return out
