"""Importing whole stores of other agent runtimes into any agentsession store.

Two sources are read, each without changing it:

* an **agentkit sessions directory** (``lengzhao/agentkit``, ``runtime/session/sessstore``): one
  ``<name>.jsonl`` log per session in agentkit's line dialect (decoded line by line with
  :func:`~agentsession.interop.agentkit.decode_agentkit_line`), and beside the logs the per-session
  sidecar directories ``<name>/runtime.json`` (``{"agentId", "model"}``; ``agent.json`` with
  ``{"agentId"}`` in older releases) and ``<name>/current.json`` (``{"sessionId"}``: the session
  ``/new`` made current for an entry key), and the ``cli_current.jsonl`` symlink naming the
  session the command line attaches to (:func:`scan_agentkit_dir`);
* a **lango SQLite database** (``langoai/lango``, ``internal/session/ent_store.go``): its
  ``sessions`` and ``messages`` tables as lango's ent schema defines them, one row per message
  (:func:`scan_lango_db`).

A scan reads and checks everything before anything is written: a source that cannot be read
whole raises :class:`~agentsession.errors.UsageError` (a malformed line, a gap in agentkit's seqs,
an event id repeated in a session, a symlinked agentkit sidecar, an encrypted lango database or
payload, an event that ``store.create`` would refuse: every event goes through the append
pipeline's own :func:`~agentsession.core.check_event`) or :class:`SourceNotFound`, and nothing
is imported. Neither source is changed, nor is anything created beside it (a lango database is
opened immutable; see :class:`_LangoReader`).
:func:`import_source` then writes each session with ``store.create(session_id, events)`` (atomic;
a session the store already has is skipped and reported, never changed), writes the identity
mappings the source holds (the active-session map, agent bindings and the CLI pointer of
:mod:`agentsession.chat.identity`; a mapping the store already has is left alone, and so is the
binding of a skipped session unless the store's session is exactly what the source gives, which
an earlier run of the same import wrote before it was stopped), and reads
every imported session back to check that it holds as many events as the source (and, for
agentkit, the same seqs). ``docs/import.md`` describes both mappings.

agentkit's file names
---------------------

agentkit names a log after its session id with every character outside ``A-Z a-z 0-9 . _ -``
replaced by ``_`` (``safeSessionName`` in ``sessstore/store.go``), so ``slack:C001:t:17.9`` is
``slack_C001_t_17.9.jsonl``. The mapping loses information, and the id is recovered, in this
order, from: the ``SessionID`` of the log's first line when it names this file (agentkit's own
writer leaves it empty; others set it); an id the directory names elsewhere whose safe name is
this file's (the ``sessionId`` of a ``current.json``, the target of ``cli_current.jsonl``,
``cli:default``); and otherwise agentkit's convention that ids are ``:``-joined parts, each ``_``
read back as ``:`` (``guessed_id`` is then true, and the id is shown before anything is written
with a dry run; ``id_map`` overrides it). The CLI pointer is read as agentkit's
``ResolveCLICurrent`` reads it: ``cli_default`` is ``cli:default``, ``cli_<rest>`` is
``cli:<rest>`` with its last ``_`` read as ``.``, anything else is ``cli:default``.

lango's rows
------------

Each session becomes a log that begins with a ``lango/session`` event holding the session row
(``key``, ``agentId``, ``channelType``, ``channelId``, ``model``, ``metadata``, ``createdAt``,
``updatedAt``: lango's own JSON names; not model-visible), followed by the events of its messages
in lango's order (by ``timestamp``, then row id): see :func:`lango_row_events`. The session's
``agent_id`` becomes its agent binding.
"""

from __future__ import annotations

import abc
import datetime as _dt
import errno
import json
import os
import re
import shutil
import sqlite3
import stat
import tempfile
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import msgspec

from ..chat.identity import bind_agent, set_active_session, set_cli_current
from ..contract import Store, check_session_id
from ..core import check_event
from ..errors import DuplicateSession, SessionError, StoreUnavailable, UsageError
from ..events import (
    ASSISTANT_MESSAGE,
    COMPACTION,
    TOOL_RESULT,
    USER_MESSAGE,
    Compaction,
    Event,
)
from ..messages import Message, Part, TextPart, ToolCall, ToolResult
from .agentkit import AgentkitLineError, decode_agentkit_line
from .healing import Defect

__all__ = [
    "AGENTKIT_ACTIVE_FILE",
    "AGENTKIT_AGENT_FILE",
    "AGENTKIT_CLI_CURRENT_LINK",
    "AGENTKIT_DEFAULT_CLI_SESSION",
    "AGENTKIT_RUNTIME_FILE",
    "LANGO_MESSAGE_TYPE",
    "LANGO_SESSION_TYPE",
    "LANGO_SUMMARY_PREFIX",
    "SQLITE_HEADER",
    "AgentkitSource",
    "IdentityEntry",
    "IdentityOutcome",
    "ImportReport",
    "ImportSource",
    "LangoSource",
    "SessionOutcome",
    "SourceNotFound",
    "SourceSession",
    "agentkit_cli_session_id",
    "agentkit_safe_name",
    "import_source",
    "lango_row_events",
    "parse_lango_time",
    "report_dict",
    "scan_agentkit_dir",
    "scan_lango_db",
]

AGENTKIT_RUNTIME_FILE: Final = "runtime.json"
"""Per-session overrides in a session's sidecar directory: ``{"agentId", "model"}``
(``sessstore/runtime_session.go``)."""
AGENTKIT_AGENT_FILE: Final = "agent.json"
"""The agent binding of releases before ``runtime.json``: ``{"agentId"}`` (``session/agent.go``)."""
AGENTKIT_ACTIVE_FILE: Final = "current.json"
"""The active-session mapping of an entry key: ``{"sessionId"}`` (``sessstore/agent.go``)."""
AGENTKIT_CLI_CURRENT_LINK: Final = "cli_current.jsonl"
"""The symlink naming the CLI's current session log (``session/current.go``)."""
AGENTKIT_DEFAULT_CLI_SESSION: Final = "cli:default"
"""agentkit's ``DefaultCLISessionID``."""

LANGO_SESSION_TYPE: Final = "lango/session"
"""The event that opens an imported lango session: the ``sessions`` row, with lango's JSON
names."""
LANGO_MESSAGE_TYPE: Final = "lango/message"
"""A ``messages`` row agentsession has no message for (a tool-role row without tool output, a role
lango does not define), kept whole and not model-visible."""
LANGO_SUMMARY_PREFIX: Final = "[Compacted Summary]\n"
"""How ``CompactMessages`` begins the ``system`` row that replaces compacted messages."""
SQLITE_HEADER: Final = b"SQLite format 3\x00"
"""The first 16 bytes of every plain SQLite database; a SQLCipher database has none."""

_SAFE_CHAR = re.compile(r"[A-Za-z0-9._-]")


class SourceNotFound(StoreUnavailable):
    """The directory or database to import from does not exist."""


# ---------------------------------------------------------------------------------------------
# What a source holds, what an import did.


@dataclass(frozen=True)
class SourceSession:
    """One session a source holds, as a scan found it."""

    session_id: str
    """The id it is imported under."""
    source: str
    """Where it comes from: the log file, or ``<database>#<key>`` for lango."""
    events: int
    """How many events it becomes."""
    guessed_id: bool = False
    """True when the id was read back from an agentkit file name by convention alone."""
    notes: tuple[str, ...] = ()
    """What a person should know (a torn last line that was left out, ...)."""
    defects: tuple[Defect, ...] = ()
    """The defects found in it and what healing did (:mod:`agentsession.interop.healing`)."""
    record: Mapping[str, Any] = field(default_factory=dict)
    """The session record's fields the source gives (``store.create``'s keyword arguments:
    ``agent_id``, ``channel_type``, ``channel_id``, ``model``, ``metadata``)."""
    branch_of: str = ""
    """For a source whose event ids are derived from it: the session (listed before this one)
    that this one is a branch of (:meth:`agentsession.BaseSession.branch`), or ``""``. Its
    events begin with events of that session (the same ids); the branch is made right after
    the last of them, and holds the rest as its own events."""


@dataclass(frozen=True)
class IdentityEntry:
    """One chat-identity mapping a source holds (:mod:`agentsession.chat.identity`)."""

    kind: Literal["active", "bind", "cli"]
    """``active``: entry key → session; ``bind``: session → agent; ``cli``: the CLI pointer."""
    key: str
    """The entry key, the session id, or ``current`` for the CLI pointer."""
    value: str
    """The session or agent it maps to."""


@dataclass(frozen=True)
class SessionOutcome:
    """What an import did with one session."""

    session_id: str
    source: str
    events: int
    status: Literal["imported", "skipped", "would_import", "would_skip"]
    """``skipped``: the store already has the session (it is left as it is)."""
    guessed_id: bool = False
    defects: tuple[Defect, ...] = ()
    """The defects found in the session and what was done about each."""
    branch_of: str = ""
    """The session this one is (or would be) imported as a branch of (``""``: none)."""


@dataclass(frozen=True)
class IdentityOutcome:
    """What an import did with one identity mapping."""

    kind: str
    key: str
    value: str
    status: Literal["written", "skipped", "would_write", "would_skip"]
    """``skipped``: the store already has a mapping for the key (or its session was skipped)."""


@dataclass
class ImportReport:
    """The result of :func:`import_source`."""

    source_kind: str
    source: str
    destination: str
    dry_run: bool
    sessions: list[SessionOutcome] = field(default_factory=list)
    identity: list[IdentityOutcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    verified: bool = False
    """True when every imported session read back with its event count (and agentkit seqs)."""
    healed: bool = True
    """Whether defects were healed (False: ``--no-heal``, the defects are only listed)."""

    @property
    def found(self) -> int:
        """Sessions in the source."""
        return len(self.sessions)

    @property
    def imported(self) -> int:
        """Sessions written (with a dry run: that would be written)."""
        return sum(1 for s in self.sessions if s.status in ("imported", "would_import"))

    @property
    def skipped(self) -> int:
        """Sessions the store already had."""
        return sum(1 for s in self.sessions if s.status in ("skipped", "would_skip"))

    @property
    def events(self) -> int:
        """Events written (with a dry run: that would be written)."""
        return sum(s.events for s in self.sessions if s.status in ("imported", "would_import"))


class ImportSource(abc.ABC):
    """What a scan found: the sessions, the identity mappings and notes, and the events of
    each session on demand (read again from the source, so that memory holds one session at a
    time)."""

    kind: str = ""
    """``agentkit`` or ``lango``."""
    keeps_event_ids: bool = False
    """Whether event ids come from the source (agentkit's ``ID``), rather than being made anew
    each time the source is read (lango rows have none)."""

    def __init__(
        self,
        location: str,
        sessions: Sequence[SourceSession],
        identity: Sequence[IdentityEntry],
        notes: Sequence[str],
    ) -> None:
        self.location = location
        """The directory or database read."""
        self.sessions = list(sessions)
        """Every session found, in a stable order."""
        self.identity = list(identity)
        """The identity mappings found."""
        self.notes = list(notes)
        """What was found but is not imported, and why."""

    @abc.abstractmethod
    def read_events(self, session: SourceSession) -> list[Event]:
        """The events of one session, in order."""

    def expected_seqs(self, session: SourceSession) -> list[int] | None:
        """The seqs the imported session must have, when the source numbers its events."""
        return None

    def iter_events(self) -> Iterator[tuple[SourceSession, list[Event]]]:
        """Every session with its events, one at a time."""
        for session in self.sessions:
            yield session, self.read_events(session)

    def close(self) -> None:
        """Release what reading the source holds (a lango source's private copy of a database
        with a pending write-ahead log); the source cannot be read afterwards."""
        return None  # an agentkit source holds nothing open


# ---------------------------------------------------------------------------------------------
# agentkit.


def agentkit_safe_name(session_id: str) -> str:
    """The file name stem agentkit gives a session id: every character outside
    ``A-Z a-z 0-9 . _ -`` becomes one ``_`` (``safeSessionName``)."""
    return "".join(ch if _SAFE_CHAR.fullmatch(ch) else "_" for ch in session_id)


def agentkit_cli_session_id(file_name: str) -> str:
    """The session id agentkit's ``ResolveCLICurrent`` reads from the name of the file
    ``cli_current.jsonl`` points at: ``cli_default.jsonl`` is ``cli:default``; ``cli_<rest>.jsonl``
    is ``cli:<rest>`` with the last ``_`` of ``<rest>`` (after its first character) read as
    ``.``; any other name is ``cli:default``."""
    if not file_name.endswith(".jsonl"):
        return AGENTKIT_DEFAULT_CLI_SESSION
    base = file_name[: -len(".jsonl")]
    if base == "cli_default" or not base.startswith("cli_"):
        return AGENTKIT_DEFAULT_CLI_SESSION
    rest = base[len("cli_") :]
    idx = rest.rfind("_")
    if idx > 0:
        rest = rest[:idx] + "." + rest[idx + 1 :]
    return "cli:" + rest


class _Head(msgspec.Struct):
    session_id: str = msgspec.field(default="", name="SessionID")


_head_decoder = msgspec.json.Decoder(_Head)


_O_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK: Final = getattr(os, "O_NONBLOCK", 0)
_O_DIRECTORY: Final = getattr(os, "O_DIRECTORY", 0)
_O_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)


def _read_regular(name: str, where: str, *, dir_fd: int | None = None) -> bytes | None:
    """The bytes of the regular file ``name`` (in ``dir_fd`` when given), never through a
    symbolic link: a link could lead the read out of the source directory, so it is refused
    (as the JSONL store's agentkit dialect refuses it). None when the file does not exist."""
    try:
        fd = os.open(name, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UsageError(
                f"{where} is a symbolic link; refusing to follow it out of the agentkit "
                "directory (replace it with the file itself)"
            ) from None
        raise UsageError(f"cannot read {where}: {exc.strerror or exc}") from None
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise UsageError(f"{where} is not a regular file; refusing to read it")
        try:
            return f.read()
        except OSError as exc:
            raise UsageError(f"cannot read {where}: {exc.strerror or exc}") from None


def _read_sidecar(dir_fd: int, name: str, where: str) -> dict[str, Any] | None:
    """The JSON object of a sidecar file, None when there is none."""
    raw = _read_regular(name, where, dir_fd=dir_fd)
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise UsageError(f"cannot read agentkit sidecar {where}: {exc}") from None
    if not isinstance(value, dict):
        raise UsageError(f"agentkit sidecar {where} is not a JSON object")
    return value


def _string_field(obj: Mapping[str, Any], key: str, path: str) -> str:
    value = obj.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise UsageError(f"agentkit sidecar {path}: {key} is not a string")
    return value.strip()


def _agentkit_lines(path: str, session_id: str) -> tuple[list[Event], list[str]]:
    """Decode an agentkit log into the events ``store.create`` will take, each checked by the
    append pipeline's own :func:`~agentsession.core.check_event`. A last line without its
    newline that does not decode is a torn write: it is left out with a note. Every other bad
    line (one that does not decode, an event an append would refuse, an event id a line
    before already has) raises :class:`~agentsession.errors.UsageError` naming the file and
    line."""
    data = _read_regular(path, path)
    if data is None:
        raise UsageError(f"cannot read {path}: it no longer exists")
    events: list[Event] = []
    notes: list[str] = []
    first_line_of: dict[str, int] = {}
    lines = data.split(b"\n")
    torn_candidate = not data.endswith(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            event = decode_agentkit_line(line)
        except AgentkitLineError as exc:
            if torn_candidate and number == len(lines):
                notes.append(
                    f"{os.path.basename(path)}: the last line ({len(line)} bytes, no newline) is a "
                    f"torn write and was left out: {exc}"
                )
                continue
            raise UsageError(f"{path}:{number}: not an agentkit event line: {exc}") from None
        try:
            event = check_event(event, session_id)
        except UsageError as exc:
            raise UsageError(f"{path}:{number}: {exc}") from None
        if event.id:
            earlier = first_line_of.setdefault(event.id, number)
            if earlier != number:
                raise UsageError(
                    f"{path}:{number}: event id {event.id!r} is also the id of line {earlier}; "
                    "a session holds each event id once, so this log cannot be imported"
                )
        events.append(event)
    for expected, event in enumerate(events, start=1):
        if event.seq != expected:
            raise UsageError(
                f"{path}: seqs must run 1, 2, 3, ... without gaps or repeats, but event "
                f"{expected} has seq {event.seq}; agentsession numbers events gap-free, so this "
                "log cannot be imported with its seqs"
            )
    return events, notes


def _first_line_session_id(path: str) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC)
        with open(fd, "rb") as f:
            first = f.readline()
    except OSError:
        return ""  # reading the log itself says why
    if not first.strip():
        return ""
    try:
        return _head_decoder.decode(first).session_id
    except (msgspec.DecodeError, msgspec.ValidationError):
        return ""


class AgentkitSource(ImportSource):
    """An agentkit sessions directory, as :func:`scan_agentkit_dir` found it."""

    kind = "agentkit"
    keeps_event_ids = True

    def __init__(
        self,
        location: str,
        sessions: Sequence[SourceSession],
        identity: Sequence[IdentityEntry],
        notes: Sequence[str],
        seqs: Mapping[str, list[int]],
    ) -> None:
        super().__init__(location, sessions, identity, notes)
        self._seqs = dict(seqs)

    def read_events(self, session: SourceSession) -> list[Event]:
        """The events of the session's log (agentkit's seqs kept)."""
        events, _ = _agentkit_lines(session.source, session.session_id)
        if [e.seq for e in events] != self._seqs.get(session.session_id):
            raise SessionError(f"{session.source} changed while it was being imported")
        return events

    def expected_seqs(self, session: SourceSession) -> list[int] | None:
        """agentkit's seqs of the session, which the import keeps."""
        return list(self._seqs.get(session.session_id, []))


def scan_agentkit_dir(
    directory: str | os.PathLike[str], *, id_map: Mapping[str, str] | None = None
) -> AgentkitSource:
    """Read an agentkit sessions directory: every ``*.jsonl`` log (symlinks such as
    ``cli_current.jsonl`` are not logs), the sidecar directories beside them and the CLI
    pointer. ``id_map`` maps a log's file name (with or without ``.jsonl``) to the session id to
    import it under, overriding the one read back from the name.

    Raises :class:`SourceNotFound` when ``directory`` does not exist and
    :class:`~agentsession.errors.UsageError` when it is not a directory or a log or sidecar cannot
    be read; nothing is written."""
    path = os.fspath(directory)
    if not os.path.exists(path):
        raise SourceNotFound(f"no agentkit sessions directory at {path}")
    if not os.path.isdir(path):
        raise UsageError(
            f"{path} is not a directory: import agentkit reads agentkit's sessions directory "
            "(the one holding the <session>.jsonl logs)"
        )
    overrides = {
        (name if name.endswith(".jsonl") else name + ".jsonl"): sid
        for name, sid in (id_map or {}).items()
    }
    try:
        entries = sorted(os.scandir(path), key=lambda e: e.name)
    except OSError as exc:
        raise UsageError(f"cannot list {path}: {exc}") from None

    logs: list[os.DirEntry[str]] = []
    sidecars: list[os.DirEntry[str]] = []
    cli_link: str | None = None
    for entry in entries:
        if entry.is_symlink():
            if entry.name == AGENTKIT_CLI_CURRENT_LINK:
                try:
                    cli_link = os.readlink(entry.path)
                except OSError as exc:
                    raise UsageError(f"cannot read the link {entry.path}: {exc}") from None
            elif entry.is_dir():
                raise UsageError(
                    f"{entry.path} is a symbolic link to a directory; refusing to follow it out "
                    "of the agentkit directory (a sidecar directory must be a directory)"
                )
            continue
        if entry.is_file() and entry.name.endswith(".jsonl"):
            logs.append(entry)
        elif entry.is_dir():
            sidecars.append(entry)
    unknown_overrides = set(overrides) - {e.name for e in logs}
    if unknown_overrides:
        raise UsageError(f"no log {sorted(unknown_overrides)[0]!r} in {path} (given in the id map)")

    # Ids the directory names exactly: current.json values and the CLI pointer.
    active: list[tuple[str, str, str]] = []  # (sidecar dir name, session id, file)
    runtime: list[tuple[str, str, str, str]] = []  # (dir name, agent, model, file)
    for entry in sidecars:
        try:
            dir_fd = os.open(entry.path, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC)
        except OSError as exc:
            raise UsageError(f"cannot open {entry.path}: {exc.strerror or exc}") from None
        try:
            current = os.path.join(entry.path, AGENTKIT_ACTIVE_FILE)
            obj = _read_sidecar(dir_fd, AGENTKIT_ACTIVE_FILE, current)
            if obj is not None:
                sid = _string_field(obj, "sessionId", current)
                if sid:
                    active.append((entry.name, sid, current))
            for name in (AGENTKIT_RUNTIME_FILE, AGENTKIT_AGENT_FILE):
                file = os.path.join(entry.path, name)
                obj = _read_sidecar(dir_fd, name, file)
                if obj is not None:
                    runtime.append(
                        (
                            entry.name,
                            _string_field(obj, "agentId", file),
                            _string_field(obj, "model", file),
                            file,
                        )
                    )
                    break  # runtime.json supersedes agent.json
        finally:
            os.close(dir_fd)
    cli_id = agentkit_cli_session_id(os.path.basename(cli_link)) if cli_link else None
    known = {sid for _, sid, _ in active} | {AGENTKIT_DEFAULT_CLI_SESSION}
    if cli_id:
        known.add(cli_id)
    by_safe: dict[str, set[str]] = {}
    for sid in known:
        by_safe.setdefault(agentkit_safe_name(sid), set()).add(sid)

    def resolve(stem: str, first_line_id: str = "") -> tuple[str, bool]:
        if first_line_id and agentkit_safe_name(first_line_id) == stem:
            return first_line_id, False
        exact = by_safe.get(stem, set())
        if len(exact) == 1:
            return next(iter(exact)), False
        return stem.replace("_", ":"), True

    sessions: list[SourceSession] = []
    seqs: dict[str, list[int]] = {}
    notes: list[str] = []
    for entry in logs:
        stem = entry.name[: -len(".jsonl")]
        if entry.name in overrides:
            sid, guessed = overrides[entry.name], False
            if not sid.strip():
                raise UsageError(f"the id map gives {entry.name} an empty session id")
        else:
            sid, guessed = resolve(stem, _first_line_session_id(entry.path))
        check_session_id(sid)
        events, file_notes = _agentkit_lines(entry.path, sid)
        notes.extend(file_notes)
        if not events:
            notes.append(f"{entry.name}: no events, nothing to import")
            continue
        if sid in seqs:
            other = next(s.source for s in sessions if s.session_id == sid)
            raise UsageError(
                f"{entry.path} and {other} both read as session {sid!r}; give one of them "
                "another id with the id map"
            )
        seqs[sid] = [e.seq for e in events]
        sessions.append(SourceSession(sid, entry.path, len(events), guessed, tuple(file_notes)))

    # Sidecar directories are named like logs: resolve them against the ids found.
    for session in sessions:
        by_safe.setdefault(agentkit_safe_name(session.session_id), set()).add(session.session_id)
    identity: list[IdentityEntry] = []
    for dir_name, sid, _file in active:
        key, _ = resolve(dir_name)
        if sid == key:
            continue  # agentkit reads a mapping to the key itself as no mapping
        identity.append(IdentityEntry("active", key, sid))
    for dir_name, agent, model, file in runtime:
        sid, _ = resolve(dir_name)
        if agent:
            identity.append(IdentityEntry("bind", sid, agent))
        if model:
            notes.append(
                f"{file}: the model binding {model!r} of session {sid!r} is not imported "
                "(agentsession keeps no per-session model)"
            )
    if cli_id:
        identity.append(IdentityEntry("cli", "current", cli_id))
    return AgentkitSource(path, sessions, identity, notes, seqs)


# ---------------------------------------------------------------------------------------------
# lango.

_LANGO_TIME = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:\.(\d+))?"
    r"\s*(Z|[+-]\d{2}:?\d{2})?(?:\s+[A-Za-z][A-Za-z0-9+_/-]*)?(?:\s+m=[+-][0-9.]+)?$"
)


def parse_lango_time(value: object) -> _dt.datetime | None:
    """A timestamp as lango's SQLite drivers write it, in UTC: mattn/go-sqlite3's
    ``2006-01-02 15:04:05.999999999-07:00``, modernc.org/sqlite's ``time.Time.String()`` form
    ``2006-01-02 15:04:05.999999999 +0000 UTC`` (a monotonic ``m=+…`` suffix is ignored), RFC 3339,
    or Unix seconds. Go's zero time (year 1) is None (no time). Digits past the microsecond are
    dropped. Raises :class:`~agentsession.errors.UsageError` for anything else."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _dt.datetime.fromtimestamp(value, _dt.timezone.utc)
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        raise UsageError(f"not a lango timestamp: {value!r}")
    match = _LANGO_TIME.match(value.strip())
    if match is None:
        raise UsageError(f"not a lango timestamp: {value!r}")
    date, clock, fraction, zone = match.groups()
    micro = (fraction or "")[:6].ljust(6, "0")
    offset = _dt.timedelta(0)
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        offset = sign * _dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    parsed = _dt.datetime.fromisoformat(f"{date}T{clock}.{micro}").replace(
        tzinfo=_dt.timezone(offset)
    )
    if parsed.year == 1:
        return None
    return parsed.astimezone(_dt.timezone.utc)


def _check_sqlite_file(path: str) -> None:
    if not os.path.exists(path):
        raise SourceNotFound(f"no lango database at {path}")
    if not os.path.isfile(path):
        raise UsageError(f"{path} is not a file: import lango reads lango's SQLite database")
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    if not head:
        raise UsageError(f"{path} is empty: not a lango database")
    if head != SQLITE_HEADER:
        raise UsageError(
            f"encrypted lango database (SQLCipher): {path} does not begin with the SQLite "
            "header. Decrypt it first with `lango security db-decrypt` (in a lango release that "
            "still supports SQLCipher), or with the sqlcipher shell: PRAGMA key = ...; ATTACH "
            "DATABASE 'plain.db' AS plain KEY ''; SELECT sqlcipher_export('plain'); then import "
            "plain.db. agentsession does not read SQLCipher"
        )


class _LangoReader:
    """Opens a lango database so that neither the file nor its directory changes.

    A database with nothing pending beside it is opened immutable (``mode=ro&immutable=1``):
    SQLite then takes no lock and creates no ``-wal``, ``-shm`` or ``-journal`` file, so the
    import works in a read-only directory, also for a database in WAL mode. A database with a
    non-empty ``-wal`` (changes not yet checkpointed into the file) or ``-journal`` (a write a
    crash interrupted) holds more than its file: reading it in place would write (SQLite
    builds a ``-shm`` index, rolls a journal back), so the file and that companion are copied
    (only read) into a private temporary directory and the copy is read, where SQLite applies
    them; the copy is deleted with the reader."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.note = ""
        self._snapshot: tempfile.TemporaryDirectory[str] | None = None
        pending = [
            suffix
            for suffix in ("-wal", "-journal")
            if os.path.isfile(path + suffix) and os.path.getsize(path + suffix) > 0
        ]
        if not pending:
            self._uri = "file:" + urllib.parse.quote(os.path.abspath(path))
            self._uri += "?mode=ro&immutable=1"
            return
        self._snapshot = tempfile.TemporaryDirectory(prefix="agentsession-import-")
        copy = os.path.join(self._snapshot.name, "lango.db")
        try:
            for suffix in ("", pending[0]):
                shutil.copyfile(path + suffix, copy + suffix)
        except OSError as exc:
            self.close()
            raise UsageError(
                f"cannot copy {path}{suffix} into a private temporary directory to read it "
                f"without changing it: {exc.strerror or exc}"
            ) from None
        self._uri = "file:" + urllib.parse.quote(copy)
        what = (
            "holds changes not yet checkpointed into the database file"
            if pending[0] == "-wal"
            else "holds a write a crash interrupted, which SQLite rolls back"
        )
        self.note = (
            f"{os.path.basename(path)}{pending[0]} {what}: the database was read from a private "
            "copy, and the source was not changed"
        )

    def connect(self) -> sqlite3.Connection:
        """A connection that only reads."""
        try:
            conn = sqlite3.connect(self._uri, uri=True)
            conn.execute("PRAGMA query_only = ON")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.DatabaseError as exc:
            raise UsageError(f"cannot open {self.path} as a SQLite database: {exc}") from None
        return conn

    def close(self) -> None:
        """Delete the private copy, if one was made."""
        if self._snapshot is not None:
            self._snapshot.cleanup()
            self._snapshot = None


_SESSION_COLUMNS: Final = ("id", "key")
_MESSAGE_COLUMNS: Final = ("id", "role", "content", "timestamp", "session_messages")
_PROTECTED_COLUMNS: Final = ("content_ciphertext", "tool_calls_ciphertext")


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def _json_column(value: object, what: str) -> Any:
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        raise UsageError(f"{what} is not JSON text: {value!r}")
    try:
        return json.loads(value)
    except ValueError as exc:
        raise UsageError(f"{what} is not valid JSON: {exc}") from None


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


@dataclass(frozen=True)
class _LangoSession:
    row_id: int
    key: str
    record: dict[str, Any]
    agent: str


class LangoSource(ImportSource):
    """A lango database, as :func:`scan_lango_db` found it."""

    kind = "lango"

    def __init__(
        self,
        location: str,
        sessions: Sequence[SourceSession],
        identity: Sequence[IdentityEntry],
        notes: Sequence[str],
        rows: Mapping[str, _LangoSession],
        columns: set[str],
        reader: _LangoReader | None = None,
    ) -> None:
        super().__init__(location, sessions, identity, notes)
        self._rows = dict(rows)
        self._columns = columns
        self._reader = reader or _LangoReader(location)

    def read_events(self, session: SourceSession) -> list[Event]:
        """The ``lango/session`` event and the events of the session's messages, each checked
        as an append checks it."""
        conn = self._reader.connect()
        try:
            return _lango_session_events(conn, self._rows[session.session_id], self._columns)
        finally:
            conn.close()

    def close(self) -> None:
        """Delete the private copy of the database, if the scan made one."""
        self._reader.close()


def _message_rows(
    conn: sqlite3.Connection, session_row: int, columns: set[str]
) -> list[dict[str, Any]]:
    wanted = [
        c for c in ("id", "role", "content", "timestamp", "tool_calls", "author") if c in columns
    ]
    cursor = conn.execute(
        f"SELECT {', '.join(wanted)} FROM messages WHERE session_messages = ?", (session_row,)
    )
    rows = [dict(zip(wanted, row, strict=True)) for row in cursor]
    for row in rows:
        row["time"] = parse_lango_time(row["timestamp"])
    epoch = _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)
    rows.sort(key=lambda r: (r["time"] or epoch, r["id"]))
    return rows


def _lango_session_events(
    conn: sqlite3.Connection, session: _LangoSession, columns: set[str]
) -> list[Event]:
    """The events a session becomes, numbered (:func:`_number`) and each checked by the append
    pipeline's own :func:`~agentsession.core.check_event`, so that a session a scan accepts
    is one ``store.create`` takes."""
    created = parse_lango_time(session.record.get("createdAt"))
    out = [Event.new(LANGO_SESSION_TYPE, session.record, time=created)]
    seen_messages = False
    for row in _message_rows(conn, session.row_id, columns):
        for event in lango_row_events(row, time=row["time"], first=not seen_messages):
            out.append(event)
            if event.type in (USER_MESSAGE, ASSISTANT_MESSAGE, TOOL_RESULT, COMPACTION):
                seen_messages = True
    checked: list[Event] = []
    for event in _number(out):
        try:
            checked.append(check_event(event, session.key))
        except UsageError as exc:
            row_id = event.meta.get("lango_id")
            where = "sessions row" if row_id is None else "messages row"
            raise UsageError(
                f"{where} {session.row_id if row_id is None else row_id}: {exc}"
            ) from None
    return checked


def _tool_call_list(raw: Any, row_id: object) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(c, dict) for c in raw):
        raise UsageError(f"messages row {row_id}: tool_calls is not a JSON array of objects")
    return raw


def _arguments(raw: object) -> tuple[dict[str, Any], bool]:
    """A lango call's ``input`` (JSON text) as arguments, and whether it was a JSON object."""
    text = _text(raw)
    if not text.strip():
        return {}, True
    try:
        value = json.loads(text)
    except ValueError:
        return {}, False
    return (value, True) if isinstance(value, dict) else ({}, False)


def lango_row_events(
    row: Mapping[str, Any], *, time: _dt.datetime | None = None, first: bool = False
) -> list[Event]:
    """The events of one lango ``messages`` row (keys: the column names; ``tool_calls`` may be
    the decoded list or its JSON text). ``first`` tells whether no message came before it in its
    session.

    * ``user`` → ``user/message`` with the content as text; tool calls that carry an ``output``
      (a function response lango recorded on a user-role row) become ``tool/result`` events
      before it, and the text is left out when it only repeats those outputs.
    * ``assistant`` and ``model`` → ``assistant/message``: the content as text, the calls with an
      ``input`` (or no ``output``) as tool calls (``input`` is the JSON arguments; input that is
      not a JSON object is kept in the event meta ``lango_inputs``); calls with an ``output``
      follow as ``tool/result`` events.
    * ``tool`` and ``function`` → one ``tool/result`` per call with an ``output`` (call id,
      name, output as content); without any, the row is kept as a ``lango/message`` event.
    * ``system`` whose content begins ``[Compacted Summary]\\n`` (what ``CompactMessages``
      writes) → a ``session/compaction`` marker whose summary is that system message, kept
      verbatim, and whose first kept seq is the next event: lango deleted the messages it
      summarised, so the history is the summary and what follows. When messages came before it
      (lango sorts the summary first by giving it a timestamp a day early; older messages sort
      before it), the marker's retained tail holds them, so they are kept, after the summary.
      Other ``system`` rows → ``user/message`` with role ``system``.
    * any other role → ``lango/message``.

    ``author`` is the message's author; a call's ``thought`` and ``thoughtSignature`` (Gemini)
    are kept in the event meta ``lango_thoughts``. Every event carries the row id in its meta
    (``lango_id``) and the row's timestamp as its time."""
    row_id = row.get("id")
    role = _text(row.get("role"))
    content = _text(row.get("content"))
    author = _text(row.get("author"))
    raw_calls = row.get("tool_calls")
    if isinstance(raw_calls, (str, bytes)):
        raw_calls = _json_column(raw_calls, f"messages row {row_id}: tool_calls")
    calls = _tool_call_list(raw_calls, row_id)
    meta: dict[str, Any] = {"lango_id": row_id}
    thoughts = {
        _text(c.get("id")): {k: c[k] for k in ("thought", "thoughtSignature") if c.get(k)}
        for c in calls
        if c.get("thought") or c.get("thoughtSignature")
    }
    if thoughts:
        meta["lango_thoughts"] = thoughts

    def new(kind: str, payload: Any, extra: Mapping[str, Any] | None = None) -> Event:
        return Event.new(kind, payload, meta={**meta, **(extra or {})}, time=time)

    outputs = [c for c in calls if _text(c.get("output"))]
    requests = [c for c in calls if _text(c.get("input")) or not _text(c.get("output"))]
    results = [
        new(
            TOOL_RESULT,
            ToolResult(
                call_id=_text(c.get("id")),
                name=_text(c.get("name")),
                content=_text(c.get("output")),
            ),
        )
        for c in outputs
    ]
    normalized = {"model": "assistant", "function": "tool"}.get(role, role)
    parts: list[Part] = [TextPart(content)] if content else []

    if normalized == "user":
        events = list(results)
        leftover = content
        for c in outputs:
            leftover = leftover.replace(_text(c.get("output")), "", 1)
        if not outputs or leftover.strip():
            message = (
                Message.user(content, author=author)
                if content
                else Message(role="user", author=author)
            )
            events.append(new(USER_MESSAGE, message))
        return events
    if normalized == "assistant":
        tool_calls: list[ToolCall] = []
        odd_inputs: dict[str, str] = {}
        for c in requests:
            arguments, is_object = _arguments(c.get("input"))
            if not is_object:
                odd_inputs[_text(c.get("id"))] = _text(c.get("input"))
            # Gemini replays need the call's thought signature back (ToolCall.signature).
            signature = _text(c.get("thoughtSignature"))
            tool_calls.append(
                ToolCall(_text(c.get("id")), _text(c.get("name")), arguments, signature=signature)
            )
        message = Message(role="assistant", parts=parts, tool_calls=tool_calls, author=author)
        extra = {"lango_inputs": odd_inputs} if odd_inputs else None
        return [new(ASSISTANT_MESSAGE, message, extra), *results]
    if normalized == "tool":
        if results:
            return results
        return [new(LANGO_MESSAGE_TYPE, _raw_row(row, calls))]
    if normalized == "system" and content.startswith(LANGO_SUMMARY_PREFIX):
        summary = Message(role="system", parts=parts, author=author)
        # first_kept_seq is filled in when the session's events are numbered (_number).
        return [new(COMPACTION, Compaction(summary=summary), {"lango_first": first})]
    if normalized == "system":
        system = Message(role="system", parts=parts, author=author)
        return [new(USER_MESSAGE, system)]
    return [new(LANGO_MESSAGE_TYPE, _raw_row(row, calls))]


def _raw_row(row: Mapping[str, Any], calls: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": row.get("id"),
        "role": _text(row.get("role")),
        "content": _text(row.get("content")),
        "timestamp": _text(row.get("timestamp")),
        "toolCalls": calls,
        "author": _text(row.get("author")),
    }


def _number(events: list[Event]) -> list[Event]:
    """Fill in what depends on an event's position: a compaction marker's first kept seq (the
    next event) and its retained tail (the messages before it, when the summary was not first)."""
    from ..derive import Deriver  # only to rebuild the messages before a late summary

    out: list[Event] = []
    for index, event in enumerate(events):
        if event.type != COMPACTION or "lango_first" not in event.meta:
            out.append(event)
            continue
        first = bool(event.meta["lango_first"])
        meta = {k: v for k, v in event.meta.items() if k != "lango_first"}
        marker = event.decode(Compaction)
        tail: list[Message] = []
        if not first:
            numbered = [msgspec.structs.replace(e, seq=n) for n, e in enumerate(out, start=1)]
            tail = Deriver.from_events(numbered).messages()
        payload = Compaction(
            summary=marker.summary,
            first_kept_seq=index + 2,
            retained_tail=tail,
        )
        out.append(Event.new(COMPACTION, payload, meta=meta, time=event.time))
    return out


def scan_lango_db(path: str | os.PathLike[str]) -> LangoSource:
    """Read a lango SQLite database (opened read-only): its ``sessions`` and the ``messages``
    of each. Raises :class:`SourceNotFound` when the file does not exist, and
    :class:`~agentsession.errors.UsageError` when it is encrypted (SQLCipher: the file lacks the
    SQLite header), is not a lango database, holds payload-protected messages (whose text lango's
    broker encrypted into ``content_ciphertext``) or a row that cannot be read; nothing is
    written."""
    location = os.fspath(path)
    _check_sqlite_file(location)
    reader = _LangoReader(location)
    try:
        return _scan_lango(location, reader)
    except BaseException:
        reader.close()
        raise


def _scan_lango(location: str, reader: _LangoReader) -> LangoSource:
    conn = reader.connect()
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        missing = [t for t in ("sessions", "messages") if t not in tables]
        if missing:
            raise UsageError(
                f"{location} is not a lango database: it has no {' or '.join(missing)} table"
            )
        session_columns = _columns(conn, "sessions")
        message_columns = _columns(conn, "messages")
        for table, have, need in (
            ("sessions", session_columns, _SESSION_COLUMNS),
            ("messages", message_columns, _MESSAGE_COLUMNS),
        ):
            lacking = [c for c in need if c not in have]
            if lacking:
                raise UsageError(
                    f"{location} is not a lango database: its {table} table has no "
                    f"{', '.join(lacking)} column"
                )
        protected_columns = [c for c in _PROTECTED_COLUMNS if c in message_columns]
        if protected_columns:
            where = " OR ".join(f"{c} IS NOT NULL" for c in protected_columns)
            (protected,) = conn.execute(f"SELECT count(*) FROM messages WHERE {where}").fetchone()
            if protected:
                raise UsageError(
                    f"{location}: {protected} message(s) are payload-protected by lango's broker "
                    f"({' / '.join(protected_columns)} set): their content column holds only a "
                    "redacted projection of at most 512 bytes, and tool calls lack their input "
                    "and output. agentsession cannot decrypt them; export the sessions with "
                    "lango first"
                )
        wanted = [
            c
            for c in (
                "id",
                "key",
                "agent_id",
                "channel_type",
                "channel_id",
                "model",
                "metadata",
                "created_at",
                "updated_at",
            )
            if c in session_columns
        ]
        records: dict[str, _LangoSession] = {}
        identity: list[IdentityEntry] = []
        for values in conn.execute(f"SELECT {', '.join(wanted)} FROM sessions ORDER BY id"):
            row = dict(zip(wanted, values, strict=True))
            key = _text(row["key"])
            if not key.strip():
                raise UsageError(f"{location}: sessions row {row['id']} has an empty key")
            metadata = _json_column(row.get("metadata"), f"sessions row {row['id']}: metadata")
            if metadata is not None and not isinstance(metadata, dict):
                raise UsageError(f"{location}: sessions row {row['id']}: metadata is not an object")
            record: dict[str, Any] = {"key": key}
            for column, name in (
                ("agent_id", "agentId"),
                ("channel_type", "channelType"),
                ("channel_id", "channelId"),
                ("model", "model"),
            ):
                if _text(row.get(column)):
                    record[name] = _text(row.get(column))
            if metadata:
                record["metadata"] = metadata
            for column, name in (("created_at", "createdAt"), ("updated_at", "updatedAt")):
                when = parse_lango_time(row.get(column))
                if when is not None:
                    record[name] = when.isoformat().replace("+00:00", "Z")
            agent = _text(row.get("agent_id"))
            records[key] = _LangoSession(int(row["id"]), key, record, agent)
            if agent:
                identity.append(IdentityEntry("bind", key, agent))
        sessions: list[SourceSession] = []
        for key, session in records.items():
            check_session_id(key)
            try:
                events = _lango_session_events(conn, session, message_columns)
            except UsageError as exc:
                raise UsageError(f"{location}: {exc}") from None
            sessions.append(
                SourceSession(key, f"{location}#{key}", len(events), record=_record_fields(session))
            )
        notes: list[str] = [reader.note] if reader.note else []
        (orphans,) = conn.execute(
            "SELECT count(*) FROM messages WHERE session_messages IS NULL OR session_messages "
            "NOT IN (SELECT id FROM sessions)"
        ).fetchone()
        if orphans:
            notes.append(
                f"{orphans} message(s) belong to no session (their session was deleted) and are "
                "not imported"
            )
    finally:
        conn.close()
    return LangoSource(location, sessions, identity, notes, records, message_columns, reader)


def _record_fields(session: _LangoSession) -> dict[str, Any]:
    """The session record of a lango ``sessions`` row (its metadata values as strings: a
    record's metadata maps strings to strings, so other JSON values are kept as JSON text)."""
    record = session.record
    fields: dict[str, Any] = {
        name: record[key]
        for name, key in (
            ("agent_id", "agentId"),
            ("channel_type", "channelType"),
            ("channel_id", "channelId"),
            ("model", "model"),
        )
        if record.get(key)
    }
    metadata = record.get("metadata")
    if metadata:
        fields["metadata"] = {
            str(k): v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
            for k, v in metadata.items()
        }
    return fields


# ---------------------------------------------------------------------------------------------
# Importing.

IMPORTED_KIND: Final = "imported"
"""The store's meta namespace remembering what an import wrote: key the source session
(``SourceSession.source``), value the session id it was imported under."""


def import_source(
    source: ImportSource,
    store: Store | None,
    *,
    dry_run: bool = False,
    progress: Callable[[SessionOutcome], None] | None = None,
) -> ImportReport:
    """Import every session of ``source`` into ``store`` and write its identity mappings.

    ``source`` is what a scan returned: :func:`scan_agentkit_dir`, :func:`scan_lango_db`, or
    for the OpenAI Agents SDK, ADK and LangGraph :func:`agentsession.interop.foreign.
    open_source` (a Claude Code directory is imported by
    :func:`agentsession.interop.claude_code.import_claude_code`, which this calls for it).

    For agentkit and lango, a session the store already has is skipped (left unchanged), and so
    are a mapping whose key the store already maps and the binding of a skipped session, unless
    the store's session holds exactly the events the source gives it: then an earlier import of
    this source wrote it and was stopped before its mappings, and its binding is written like
    that of an imported session (when the store has none), so that running an interrupted
    import again completes it. The other sources derive every event id from the source, so a
    session the store already has gets exactly the events it lacks (``imported``) or nothing
    (``skipped``). With ``dry_run`` nothing is written: the report says what would be
    (``store`` may then be None, for a store that does not exist yet). At the end every
    imported session is read back; a session whose event count (or, for agentkit, whose seqs;
    for the others, whose event ids) differ raises :class:`~agentsession.errors.SessionError`.
    ``progress`` is called after each session."""
    if store is None and not dry_run:
        raise UsageError("import_source needs a store unless dry_run is set")
    own = getattr(source, "run_import", None)
    if own is not None:  # a source with an import of its own (Claude Code's transcripts)
        report: ImportReport = own(store, dry_run=dry_run, progress=progress)
        return report
    if getattr(source, "appends_missing", False):
        return _import_missing(source, store, dry_run, progress)
    destination = getattr(store, "location", "") if store is not None else ""
    report = ImportReport(source.kind, source.location, destination, dry_run)
    report.notes.extend(source.notes)
    skipped_ids: set[str] = set()
    resumed = 0
    imported: list[SourceSession] = []
    for session in source.sessions:
        exists = store is not None and store.exists(session.session_id)
        status: Literal["imported", "skipped", "would_import", "would_skip"]
        events: list[Event] | None = None
        earlier = None if store is None else store.meta_get(IMPORTED_KIND, session.source)
        if (
            store is not None
            and earlier is not None
            and earlier != session.session_id
            and store.exists(earlier)
        ):
            # Imported before under another id (another --id-map): not a second copy.
            report.notes.append(
                f"{session.source} was imported before as {earlier!r}; it is not imported "
                f"again as {session.session_id!r} (delete {earlier!r} to import it anew)"
            )
            skipped_ids.add(session.session_id)
            outcome = SessionOutcome(
                session.session_id,
                session.source,
                session.events,
                "would_skip" if dry_run else "skipped",
                session.guessed_id,
            )
            report.sessions.append(outcome)
            if progress is not None:
                progress(outcome)
            continue
        if dry_run:
            status = "would_skip" if exists else "would_import"
        elif exists:
            status = "skipped"
        else:
            events = source.read_events(session)
            assert store is not None
            try:
                store.create(session.session_id, events, **session.record)
                store.meta_set(IMPORTED_KIND, session.source, session.session_id)
                status = "imported"
            except DuplicateSession:
                status = "skipped"  # another process created it in between
        if status in ("skipped", "would_skip"):
            assert store is not None
            if events is None:
                events = source.read_events(session)
            if _holds_source_events(store, source, session, events):
                resumed += 1  # imported by an earlier run: its mappings are still due
            else:
                skipped_ids.add(session.session_id)
        elif status == "imported":
            imported.append(session)
        outcome = SessionOutcome(
            session.session_id,
            session.source,
            session.events,
            status,
            session.guessed_id,
            session.defects,
        )
        report.sessions.append(outcome)
        if progress is not None:
            progress(outcome)

    if resumed:
        report.notes.append(
            f"{resumed} session(s) the store already has hold exactly the source's events (an "
            "earlier import of this source wrote them); their identity mappings are "
            f"{'checked' if dry_run else 'completed'} as for imported sessions"
        )
    for entry in source.identity:
        report.identity.append(_apply_identity(entry, store, dry_run, skipped_ids))

    if not dry_run:
        assert store is not None
        for session in imported:
            got = store.get(session.session_id).read()
            expected = source.expected_seqs(session) or list(range(1, session.events + 1))
            if len(got) != session.events or [e.seq for e in got] != expected:
                raise SessionError(
                    f"import of {session.session_id!r} does not match: {len(got)} events up to "
                    f"seq {got[-1].seq if got else 0} in {destination}, {session.events} up to "
                    f"{expected[-1] if expected else 0} in {session.source}"
                )
        report.verified = True
    return report


def _stored_ids(store: Store | None, session_id: str) -> set[str] | None:
    if store is None or not store.exists(session_id):
        return None
    return {e.id for e in store.get(session_id).read()}


def _import_missing(
    source: ImportSource,
    store: Store | None,
    dry_run: bool,
    progress: Callable[[SessionOutcome], None] | None,
) -> ImportReport:
    """Import a source whose event ids are derived from it: each session gets the events the
    store lacks. Each write is one atomic ``create`` or ``append_many``, so a run killed at
    any point leaves every session either as it was or with all it was given."""
    destination = getattr(store, "location", "") if store is not None else ""
    report = ImportReport(source.kind, source.location, destination, dry_run)
    report.healed = bool(getattr(source, "heal", True))
    report.notes.extend(source.notes)
    written: list[tuple[SourceSession, list[str]]] = []
    read: dict[str, list[Event]] = {}  # each session's events, for the branches after it
    for session in source.sessions:
        events = read[session.session_id] = source.read_events(session)
        stored = _stored_ids(store, session.session_id)
        if stored is None and session.branch_of:
            # A branch not made yet: what its origin holds is shared, not written again.
            origin_ids = _stored_ids(store, session.branch_of)
            if origin_ids is None:
                origin_ids = {e.id for e in read.get(session.branch_of, [])}
            missing = [e for e in events if e.id not in origin_ids]
        else:
            missing = events if stored is None else [e for e in events if e.id not in stored]
        status: Literal["imported", "skipped", "would_import", "would_skip"]
        if not missing:
            status = "would_skip" if dry_run else "skipped"
        elif dry_run:
            status = "would_import"
        else:
            assert store is not None
            if stored is None and session.branch_of:
                _make_branch(store, session, events)
            elif stored is None:
                try:
                    store.create(session.session_id, missing)
                except DuplicateSession:  # another process created it in between
                    store.get(session.session_id).append_many(missing)
            else:
                store.get(session.session_id).append_many(missing)
            status = "imported"
            written.append((session, [e.id for e in events]))
        outcome = SessionOutcome(
            session.session_id,
            session.source,
            len(missing),
            status,
            False,
            session.defects,
            session.branch_of,
        )
        report.sessions.append(outcome)
        if progress is not None:
            progress(outcome)
    extras = getattr(source, "write_extras", None)
    if extras is not None:
        report.notes.extend(extras(store, dry_run))
    if not dry_run:
        assert store is not None
        for session, ids in written:
            have = {e.id for e in store.get(session.session_id).read()}
            lacking = [i for i in ids if i not in have]
            if lacking:
                raise SessionError(
                    f"import of {session.session_id!r} does not match: {len(lacking)} of the "
                    f"source's {len(ids)} events are not in {destination}"
                )
        report.verified = True
    return report


def _make_branch(store: Store, session: SourceSession, events: Sequence[Event]) -> None:
    """Make ``session`` a branch of its origin right after the origin's last event among the
    first of ``events`` (0: before the origin's first event), and append the rest of them.
    A run killed between the two finds the branch made and appends what it lacks."""
    origin = store.get(session.branch_of)
    seqs = {e.id: e.seq for e in origin.read()}
    point = 0
    for event in events:
        seq = seqs.get(event.id)
        if seq is None:
            break
        point = seq
    make = getattr(origin, "branch", None)  # BaseSession's (not in the Session protocol)
    if make is None:
        raise UsageError(
            f"sessions of {type(store).__name__} cannot branch: {session.session_id!r} is a "
            f"branch of {session.branch_of!r}"
        )
    try:
        made = make(at_seq=point, id=session.session_id)
    except DuplicateSession:  # another process made it in between
        made = store.get(session.session_id)
    have = {e.id for e in made.read()}
    made.append_many([e for e in events if e.id not in have])


def report_dict(report: ImportReport) -> dict[str, Any]:
    """The report as JSON-ready data: what ``agentsession import --json`` prints and
    ``--report FILE`` writes (snake_case keys; ``docs/import.md`` lists them)."""
    return {
        "source_kind": report.source_kind,
        "source": report.source,
        "destination": report.destination,
        "dry_run": report.dry_run,
        "sessions_found": report.found,
        "imported": report.imported,
        "skipped": report.skipped,
        "events": report.events,
        "verified": report.verified,
        "healed": report.healed,
        "sessions": [
            {
                "session_id": s.session_id,
                "source": s.source,
                "events": s.events,
                "status": s.status,
                "guessed_id": s.guessed_id,
                "defects": [d.as_dict() for d in s.defects],
                **({"branch_of": s.branch_of} if s.branch_of else {}),
            }
            for s in report.sessions
        ],
        "identity": [
            {"kind": i.kind, "key": i.key, "value": i.value, "status": i.status}
            for i in report.identity
        ],
        "notes": list(report.notes),
    }


def _holds_source_events(
    store: Store, source: ImportSource, session: SourceSession, events: Sequence[Event]
) -> bool:
    """Whether the store's session is exactly what importing ``events`` writes: the same
    seqs, types, agents, users, payloads and meta, and the same ids and times where the source
    gives them (an import stamps the others)."""
    got = store.get(session.session_id).read()
    seqs = source.expected_seqs(session)
    expected = list(seqs) if seqs is not None else list(range(1, len(events) + 1))
    same_ids = source.keeps_event_ids
    if len(got) != len(events) or [e.seq for e in got] != expected:
        return False
    for stored, given in zip(got, events, strict=True):
        if (
            stored.type != given.type
            or stored.agent != given.agent
            or stored.user != given.user
            or stored.meta != given.meta
            or (same_ids and given.id and stored.id != given.id)
            or (given.time is not None and stored.time != given.time)
            or msgspec.json.decode(bytes(stored.data)) != msgspec.json.decode(bytes(given.data))
        ):
            return False
    return True


def _apply_identity(
    entry: IdentityEntry, store: Store | None, dry_run: bool, skipped: set[str]
) -> IdentityOutcome:
    namespace, key = (entry.kind, entry.key) if entry.kind != "cli" else ("cli", "current")
    taken = (entry.kind == "bind" and entry.key in skipped) or (
        store is not None and store.meta_get(namespace, key) is not None
    )
    if dry_run:
        return IdentityOutcome(
            entry.kind, entry.key, entry.value, "would_skip" if taken else "would_write"
        )
    if taken:
        return IdentityOutcome(entry.kind, entry.key, entry.value, "skipped")
    assert store is not None
    if entry.kind == "active":
        set_active_session(store, entry.key, entry.value)
    elif entry.kind == "bind":
        bind_agent(store, entry.key, entry.value)
    else:
        set_cli_current(store, entry.value)
    return IdentityOutcome(entry.kind, entry.key, entry.value, "written")
