"""Claude Code transcripts in any agentsession store: the entry mapping, the keys, the importer.

Claude Code writes one JSONL transcript per session under ``~/.claude/projects/<project>/``
(``<session>.jsonl``) and one per subagent beside it (``<session>/subagents/agent-<id>.jsonl``).
The Claude Agent SDK names each transcript by a key: ``project_key``, ``session_id`` and, for a
subagent, ``subpath`` (``subagents/agent-<id>``). This module stores such transcripts, and is
what both :mod:`agentsession.integrations.claude` (the SDK's ``SessionStore``) and
``agentsession import claude-code`` write through, so the two give the same log. It imports
nothing of the SDK.

**Ids.** A main transcript is the session ``claude:<project>:<session>`` and a subagent's the
session ``claude:<project>:<session>:<subpath>`` (:func:`session_key`; each part
percent-encoded with ``urllib.parse.quote(part, safe="")``, so no part holds a ``:``). A
subagent's session is a child session of the main one (:meth:`BaseSession.fork
<agentsession.session.BaseSession.fork>` with ``inherit=0``, agent ``claude-subagent``): it is in
the main session's children index (``store.children_of``), and deleting
the main session with ``recursive=True`` deletes it too.

**The log.** Every transcript line (an *entry*) is one ``claude/entry`` event whose payload is
the entry's JSON, so loading returns the entries deep-equal to what was appended, in append
order. An entry with a string ``uuid`` gets the event id ``claude:<uuid>``: appended again (a
retried batch, an import run twice) it stores nothing (agentsession's id check, which looks back
65,536 seqs: ``docs/reliability.md``). Entries without a ``uuid`` (titles, tags, mode markers)
are appended each time, as the SDK asks.

**The typed mirror.** In the same atomic batch, each conversation entry is followed by
agentsession's typed events (:func:`entry_events`), so ``messages()``, ``agentsession show`` and
``messages`` and the viewer read the conversation: a ``user`` entry's text as ``user/message``
and each of its ``tool_result`` blocks as a ``tool/result`` (paired with its call by the
``tool_use_id``); an ``assistant`` entry's message (text, thinking, ``tool_use`` blocks as tool
calls) as ``assistant/message`` through
:func:`agentsession.providers.anthropic.from_anthropic`, and its usage as one ``usage`` event
per model message id (Claude Code repeats a message's usage on each of its content blocks'
entries: the event id ``claude:usage:<message id>`` keeps one). Entries marked ``isMeta``
(text Claude Code injects, not typed by the user) and every other entry type (summaries,
system entries, file-history snapshots) are in the entries only. Mirror events take ids derived
from the entry's ``uuid`` too, so a retried batch never doubles them.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import stat
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, NamedTuple
from urllib.parse import quote, unquote

import msgspec

from ..compaction import COMPACTION_EFFECT_KIND
from ..errors import DuplicateSession, SessionError, UsageError
from ..events import (
    ASSISTANT_MESSAGE,
    MAX_EVENT_ID_CHARS,
    TOOL_RESULT,
    USAGE,
    USER_MESSAGE,
    Event,
)
from ..messages import Message, TextPart, ToolResult
from ..providers.anthropic import from_anthropic
from ..session import BaseSession
from ..store import BaseStore
from . import healing
from .healing import SET_ASIDE, Defect
from .importers import ImportReport, SessionOutcome, SourceNotFound

__all__ = [
    "COMPACTION_EFFECT",
    "ENTRY",
    "Appended",
    "ID_PREFIX",
    "SUBAGENT_AGENT",
    "ClaudeCodeSource",
    "ClaudeTranscripts",
    "TranscriptFile",
    "entry_events",
    "import_claude_code",
    "parse_session_key",
    "read_transcript",
    "scan_claude_code_dir",
    "session_key",
    "transcript_events",
]

COMPACTION_EFFECT: Final = (
    "Claude Code resumes from its transcript entries (claude/entry events), which a "
    "compaction does not shorten: it shortens messages() and what agentsession shows only; "
    "Claude Code compacts its own transcript (/compact)"
)
"""What ``agentsession compact`` prints for a Claude session (meta namespace
:data:`agentsession.compaction.COMPACTION_EFFECT_KIND`, key ``claude``), written by the first
append of a :class:`ClaudeTranscripts`."""
ENTRY: Final = "claude/entry"
"""Event type of one transcript entry; its payload is the entry's JSON, as given."""
ID_PREFIX: Final = "claude:"
"""The start of every session id :func:`session_key` makes."""
SUBAGENT_AGENT: Final = "claude-subagent"
"""The agent of the child session a subagent's transcript is stored in."""

_CLAUDE: Final = "anthropic"


def _quote(part: str) -> str:
    return quote(part, safe="")


def session_key(project_key: str, session_id: str, subpath: str | None = None) -> str:
    """The agentsession id of a transcript: ``claude:<project>:<session>`` for a main
    transcript, ``claude:<project>:<session>:<subpath>`` for a subagent's (each part
    percent-encoded, so none holds a ``:``). Raises
    :class:`~agentsession.errors.UsageError` for an empty part."""
    for name, value in (("project_key", project_key), ("session_id", session_id)):
        if not isinstance(value, str) or not value:
            raise UsageError(f"a Claude session key needs a non-empty {name}, not {value!r}")
    main = f"{ID_PREFIX}{_quote(project_key)}:{_quote(session_id)}"
    if subpath is None:
        return main
    if not isinstance(subpath, str) or not subpath:
        raise UsageError(f"a subpath must be a non-empty string (or left out), not {subpath!r}")
    return f"{main}:{_quote(subpath)}"


def parse_session_key(key: str) -> tuple[str, str, str | None] | None:
    """``(project_key, session_id, subpath)`` of an id :func:`session_key` made, else None."""
    if not key.startswith(ID_PREFIX):
        return None
    parts = key[len(ID_PREFIX) :].split(":")
    if len(parts) not in (2, 3):
        return None
    project, sid = unquote(parts[0]), unquote(parts[1])
    subpath = unquote(parts[2]) if len(parts) == 3 else None
    try:
        made = session_key(project, sid, subpath)
    except UsageError:
        return None
    return (project, sid, subpath) if made == key else None


# ---------------------------------------------------------------------------------------------
# The entry mapping.


def _event_id(kind: str, value: str) -> str:
    """``claude:<kind><value>``; raises ``_TooLong`` when that is too long for an event id
    (the event then gets a new id of its own)."""
    made = f"{ID_PREFIX}{kind}{value}"
    if len(made) > MAX_EVENT_ID_CHARS:
        raise _TooLong
    return made


class _TooLong(Exception):
    pass


def _block_text(content: Any) -> str:
    """The text of a ``tool_result`` block's content: a string, or its text blocks joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text") or "")
            for b in content
            if isinstance(b, Mapping) and b.get("type") == "text"
        )
    return ""


def _user_mirror(content: Any) -> tuple[Message | None, list[ToolResult]]:
    if isinstance(content, str):
        return (Message(role="user", parts=[TextPart(content)]) if content else None), []
    if not isinstance(content, list):
        return None, []
    texts: list[TextPart] = []
    results: list[ToolResult] = []
    for block in content:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            texts.append(TextPart(str(block["text"])))
        elif kind == "tool_result" and isinstance(block.get("tool_use_id"), str):
            results.append(
                ToolResult(
                    call_id=block["tool_use_id"],
                    content=_block_text(block.get("content")),
                    is_error=bool(block.get("is_error")),
                )
            )
    return (Message(role="user", parts=list(texts)) if texts else None), results


def entry_events(entry: Mapping[str, Any], *, mirror: bool = True) -> list[Event]:
    """The events one transcript entry is stored as: its ``claude/entry`` and, with
    ``mirror``, the typed events read from it (see the module's docstring). Raises
    :class:`~agentsession.errors.UsageError` for an entry that is not a JSON object with a
    string ``type``."""
    if not isinstance(entry, Mapping) or not isinstance(entry.get("type"), str):
        raise UsageError(f"a transcript entry is a JSON object with a string 'type': {entry!r}")
    uuid = entry.get("uuid")
    base: str | None = None
    if isinstance(uuid, str) and uuid:
        try:
            base = _event_id("", uuid)
        except _TooLong:
            base = None
    events = [Event.new(ENTRY, dict(entry), id=base)]
    message = entry.get("message")
    if not mirror or entry.get("isMeta") or not isinstance(message, Mapping):
        return events

    def mirror_id(suffix: str) -> str | None:
        made = f"{base}:{suffix}"
        return made if base is not None and len(made) <= MAX_EVENT_ID_CHARS else None

    kind = entry["type"]
    if kind == "user":
        said, results = _user_mirror(message.get("content"))
        if said is not None:
            events.append(Event.new(USER_MESSAGE, said, id=mirror_id("m")))
        for index, result in enumerate(results):
            events.append(Event.new(TOOL_RESULT, result, id=mirror_id(f"r{index}")))
    elif kind == "assistant":
        try:
            reply = from_anthropic(message)
        except UsageError:
            return events  # a malformed tool_use block: the entry is kept, unmirrored
        answer = reply.messages[0]
        if answer.parts or answer.tool_calls:
            events.append(Event.new(ASSISTANT_MESSAGE, answer, id=mirror_id("m")))
        if reply.usage is not None and reply.id:
            try:
                usage_id: str | None = _event_id("usage:", reply.id)
            except _TooLong:
                usage_id = None
            if usage_id is not None:
                events.append(Event.new(USAGE, reply.usage, id=usage_id))
    return events


def _batch(entries: Iterable[Mapping[str, Any]], mirror: bool) -> tuple[list[Event], int]:
    """The events of ``entries`` for one append (an event id repeated within the batch, as a
    message's usage on each of its blocks, is kept once), and how many entries it holds."""
    events: list[Event] = []
    seen: set[str] = set()
    count = 0
    for entry in entries:
        for event in entry_events(entry, mirror=mirror):
            if event.type == ENTRY:
                if event.id in seen:
                    break  # the same entry twice in one batch: stored once, mirror too
                count += 1
            elif event.id in seen:
                continue
            seen.add(event.id)
            events.append(event)
    return events, count


_entry_decoder = msgspec.json.Decoder()


# ---------------------------------------------------------------------------------------------
# The transcripts in a store.


class Appended(NamedTuple):
    """What :meth:`ClaudeTranscripts.append` stored."""

    events: int
    """Events stored (entries and their mirror)."""
    entries: list[dict[str, Any]]
    """The entries stored, in order (an entry stored before is not among them)."""


class ClaudeTranscripts:
    """Claude transcripts in one agentsession store, by the SDK's keys (the sync half of
    :class:`agentsession.integrations.claude.AgentSessionStore`, and what the importer writes
    through). Thread-safe; every method does blocking I/O."""

    def __init__(self, store: BaseStore, *, mirror_messages: bool = True) -> None:
        self.store = store
        """The agentsession store the transcripts live in."""
        self.mirror_messages = mirror_messages
        """Whether entries are stored with their typed mirror (``messages()`` then reads them)."""
        self._forking = threading.Lock()
        self._effect_noted = False

    def note_effect(self) -> None:
        """Record, once per object, what a compaction does to Claude sessions of the store
        (:data:`COMPACTION_EFFECT`)."""
        if not self._effect_noted:
            key = ENTRY.split("/", 1)[0]
            if self.store.meta_get(COMPACTION_EFFECT_KIND, key) != COMPACTION_EFFECT:
                self.store.meta_set(COMPACTION_EFFECT_KIND, key, COMPACTION_EFFECT)
            self._effect_noted = True

    def _session(self, project_key: str, session_id: str, subpath: str | None) -> BaseSession:
        """The session of a key; a subagent's is forked from the main session when new."""
        sid = session_key(project_key, session_id, subpath)
        store = self.store
        if subpath is None or store.exists(sid):
            return store.get(sid)
        parent = store.get(session_key(project_key, session_id))
        with self._forking:  # two batches of one new subagent in this process fork once
            if store.exists(sid):
                return store.get(sid)
            try:
                return parent.fork(SUBAGENT_AGENT, child_id=sid, task=subpath)
            except DuplicateSession:
                return store.get(sid)  # another process forked it first

    def append(
        self,
        project_key: str,
        session_id: str,
        subpath: str | None,
        entries: Sequence[Mapping[str, Any]],
    ) -> Appended:
        """Store ``entries`` (with their mirror) at the end of the transcript, in one atomic
        append; an entry whose ``uuid`` is already stored is not stored again. Returns what
        was stored."""
        events, _ = _batch(entries, self.mirror_messages)
        if not events:
            return Appended(0, [])
        self.note_effect()
        session = self._session(project_key, session_id, subpath)
        before = session.latest_seq
        seqs = session.append_many(events)
        new = [event for event, seq in zip(events, seqs, strict=True) if seq > before]
        stored = [_entry_decoder.decode(e.data) for e in new if e.type == ENTRY]
        return Appended(len(new), stored)

    def load(
        self, project_key: str, session_id: str, subpath: str | None = None
    ) -> list[dict[str, Any]] | None:
        """The transcript's entries in order (None when it has none)."""
        sid = session_key(project_key, session_id, subpath)
        if not self.store.exists(sid):
            return None
        raws = [e.data for e in self.store.get(sid).read() if e.type == ENTRY]
        if not raws:
            return None
        return list(_entry_decoder.decode(b"[" + b",".join(raws) + b"]"))

    def list_sessions(self, project_key: str) -> list[tuple[str, int]]:
        """``(session_id, mtime)`` of the main transcripts of a project; ``mtime`` is the last
        append's time in Unix epoch milliseconds."""
        prefix = f"{ID_PREFIX}{_quote(project_key)}:"
        found: list[tuple[str, int]] = []
        for info in self.store.list(prefix=prefix):
            parsed = parse_session_key(info.id)
            if parsed is None or parsed[0] != project_key or parsed[2] is not None:
                continue
            found.append((parsed[1], _millis(info.updated_at) or self._last_time(info.id)))
        return found

    def _last_time(self, sid: str) -> int:
        """The last event's time (for a backend whose listing does not know it)."""
        session = self.store.get(sid)
        latest = session.latest_seq
        events = session.read(after=max(0, latest - 1))
        return _millis(events[-1].time) if events else 0

    def list_subkeys(self, project_key: str, session_id: str) -> list[str]:
        """The subpaths of the session's subagent transcripts, in the order they began."""
        parent = session_key(project_key, session_id)
        subpaths: dict[str, None] = {}
        for child in self.store.children_of(parent, include_discarded=True):
            parsed = parse_session_key(child.id)
            if parsed is None or parsed[2] is None:
                continue
            if parsed[:2] == (project_key, session_id):
                subpaths[parsed[2]] = None
        return list(subpaths)

    def delete(self, project_key: str, session_id: str, subpath: str | None = None) -> None:
        """Delete a transcript: a main one with its subagents' (recursively), a subagent's
        alone."""
        sid = session_key(project_key, session_id, subpath)
        self.store.delete(sid, recursive=subpath is None)


def _millis(when: _dt.datetime | None) -> int:
    return int(when.timestamp() * 1000) if when is not None else 0


# ---------------------------------------------------------------------------------------------
# Importing ~/.claude/projects.


@dataclass(frozen=True)
class TranscriptFile:
    """One transcript file a scan found."""

    path: str
    """The file."""
    project_key: str
    """Its project directory's name (Claude Code's sanitised working directory)."""
    session_id: str
    """The session it belongs to (the main transcript's file name without ``.jsonl``)."""
    subpath: str | None = None
    """For a subagent's transcript, its path under the session's directory without
    ``.jsonl`` (``subagents/agent-<id>``); None for the main transcript."""

    @property
    def key(self) -> str:
        """The agentsession id it is stored under (:func:`session_key`)."""
        return session_key(self.project_key, self.session_id, self.subpath)


@dataclass
class ClaudeCodeSource:
    """What :func:`scan_claude_code_dir` found: the transcript files (main transcripts before
    their subagents'), and notes."""

    location: str
    """The directory scanned."""
    sessions: list[TranscriptFile]
    """The transcript files, each stored as one session."""
    notes: list[str]
    """What a person should know (no transcripts found, ...)."""
    heal: bool = True
    """Whether :func:`import_claude_code` heals the transcripts (:func:`transcript_events`)."""

    def run_import(
        self,
        store: BaseStore | None,
        *,
        dry_run: bool = False,
        progress: Callable[[SessionOutcome], None] | None = None,
    ) -> ImportReport:
        """:func:`import_claude_code` of this source (what
        :func:`~agentsession.interop.importers.import_source` calls for it)."""
        return import_claude_code(self, store, dry_run=dry_run, progress=progress)

    def close(self) -> None:
        """Nothing to release: the files are opened only while they are read."""


def _project_files(project_dir: str, project_key: str) -> list[TranscriptFile]:
    files: list[TranscriptFile] = []
    names = sorted(os.listdir(project_dir))
    for name in names:
        path = os.path.join(project_dir, name)
        if not name.endswith(".jsonl") or not stat.S_ISREG(os.lstat(path).st_mode):
            continue
        sid = name[: -len(".jsonl")]
        if not sid:
            continue
        files.append(TranscriptFile(path, project_key, sid))
        folder = os.path.join(project_dir, sid)
        if not os.path.isdir(folder) or os.path.islink(folder):
            continue
        for root, dirs, found in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(root, d)))
            for file_name in sorted(found):
                full = os.path.join(root, file_name)
                if not file_name.endswith(".jsonl") or not stat.S_ISREG(os.lstat(full).st_mode):
                    continue
                rel = os.path.relpath(full, folder)[: -len(".jsonl")]
                files.append(TranscriptFile(full, project_key, sid, rel.replace(os.sep, "/")))
    return files


def scan_claude_code_dir(path: str | os.PathLike[str]) -> ClaudeCodeSource:
    """The transcripts of a Claude Code project directory (``~/.claude/projects/<project>``:
    ``<session>.jsonl`` and ``<session>/**/*.jsonl`` for its subagents) or of the projects
    directory holding several. Nothing is read but the directory listings (and nothing
    written); raises :class:`~agentsession.interop.importers.SourceNotFound` when ``path`` is
    not a directory."""
    location = os.fspath(path)
    if not os.path.isdir(location):
        raise SourceNotFound(f"no Claude Code directory at {location}")
    files = _project_files(location, os.path.basename(os.path.abspath(location)))
    notes: list[str] = []
    if not files:  # a projects directory: one folder per project
        for name in sorted(os.listdir(location)):
            folder = os.path.join(location, name)
            if os.path.isdir(folder) and not os.path.islink(folder):
                files.extend(_project_files(folder, name))
    if not files:
        notes.append(f"no transcripts (*.jsonl) in {location}")
    return ClaudeCodeSource(location, files, notes)


def read_transcript(path: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The entries of one transcript file, and notes. A last line without its newline that
    does not parse (a write cut short) is left out with a note; any other line that is not a
    JSON object with a string ``type`` raises :class:`~agentsession.errors.UsageError`."""
    entries, notes, _ = _read_transcript(path)
    return entries, notes


def _read_transcript(path: str) -> tuple[list[dict[str, Any]], list[str], bytes | None]:
    """:func:`read_transcript`, and the torn last line (None when there is none)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as handle:
        data = handle.read()
    entries: list[dict[str, Any]] = []
    notes: list[str] = []
    torn: bytes | None = None
    lines = data.split(b"\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError:
            if number == len(lines):  # no newline after it: torn
                notes.append(f"{path}: left out a torn last line ({len(line)} bytes)")
                torn = line
                continue
            raise UsageError(f"{path}:{number}: not a JSON line") from None
        if not isinstance(value, dict) or not isinstance(value.get("type"), str):
            raise UsageError(f"{path}:{number}: not a transcript entry (a 'type' is needed)")
        entries.append(value)
    return entries, notes, torn


def _entry_time(entry: Mapping[str, Any]) -> _dt.datetime | None:
    stamp = entry.get("timestamp")
    if not isinstance(stamp, str):
        return None
    try:
        when = _dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=_dt.timezone.utc)


def transcript_events(
    file: TranscriptFile,
    entries: Sequence[Mapping[str, Any]],
    *,
    heal: bool = True,
    torn: bytes | None = None,
) -> tuple[list[Event], list[Defect]]:
    """The events an import stores for one transcript, and the defects found: the entries
    and their mirror as :func:`entry_events` gives them, each at the entry's ``timestamp``;
    an entry without a ``uuid`` gets an id derived from the file and its place in it. With
    ``heal``, the entries of one model message that Claude Code writes one content block per
    line are mirrored as that one message; the subagent entries a main transcript holds inline
    (``isSidechain``) are kept as entries but left out of its history (defect
    ``interleaved_subagent``); and the mirror goes through
    :func:`agentsession.interop.healing.heal`. A torn last line is kept as an
    ``import/set_aside`` event (defect ``truncated_record``)."""
    events: list[Event] = []
    defects: list[Defect] = []
    seen: set[str] = set()
    last_reply: tuple[str, int] | None = None  # (model message id, index of its mirror event)
    sidechain_run = False
    # An entry without a timestamp (a summary, a title) takes the one before it, or the first
    # of the file: so its events' times come from the file, the same on every run.
    when = next((t for e in entries if (t := _entry_time(e)) is not None), None)
    for number, entry in enumerate(entries):
        sidechain = file.subpath is None and bool(entry.get("isSidechain"))
        if sidechain and not sidechain_run:
            defects.append(
                Defect(
                    "interleaved_subagent",
                    "kept_out_of_history" if heal else "none",
                    "",
                    f"{file.path}: subagent entries from line {number + 1} on are inline in the "
                    "main transcript",
                )
            )
        sidechain_run = sidechain
        made = entry_events(entry, mirror=not (heal and sidechain))
        when = _entry_time(entry) or when
        head = made[0]
        if head.id in seen:
            continue  # the same entry twice: stored once, mirror too
        if not isinstance(entry.get("uuid"), str) or not entry.get("uuid"):
            digest = hashlib.sha256(f"{file.key}\x00{number}".encode()).hexdigest()[:32]
            head = msgspec.structs.replace(head, id=f"{ID_PREFIX}line:{digest}")
        out = [msgspec.structs.replace(head, time=when)]
        for k, event in enumerate(made[1:]):
            if event.id in seen:
                continue
            if not event.id.startswith(ID_PREFIX):
                event = msgspec.structs.replace(event, id=f"{head.id}:{k}")
            out.append(msgspec.structs.replace(event, time=when))
        message = entry.get("message")
        reply_id = message.get("id") if isinstance(message, Mapping) else None
        if heal and entry.get("type") == "assistant" and isinstance(reply_id, str):
            mirror = [e for e in out if e.type == ASSISTANT_MESSAGE]
            if last_reply is not None and last_reply[0] == reply_id and mirror:
                index = last_reply[1]
                before = events[index].decode(Message)
                more = mirror[0].decode(Message)
                joined = msgspec.structs.replace(
                    before,
                    parts=[*before.parts, *more.parts],
                    tool_calls=[*before.tool_calls, *more.tool_calls],
                )
                events[index] = Event.new(
                    ASSISTANT_MESSAGE,
                    joined,
                    meta=events[index].meta,
                    time=events[index].time,
                    id=events[index].id,
                )
                out = [e for e in out if e.type != ASSISTANT_MESSAGE]
            elif mirror:
                last_reply = (reply_id, len(events) + out.index(mirror[0]))
        elif entry.get("type") in ("user", "assistant") and not sidechain:
            last_reply = None
        for event in out:
            seen.add(event.id)
        events.extend(out)
    if heal:
        events, found = healing.heal(events, healing.HealHooks(move_records=False))
    else:
        found = healing.survey(events)
    defects.extend(found)
    if torn is not None:
        digest = hashlib.sha256(f"{file.key}\x00torn".encode()).hexdigest()[:32]
        events.append(
            Event.new(
                SET_ASIDE,
                {"source": file.path, "raw": torn.decode("utf-8", "replace"), "reason": "torn"},
                meta={healing.META_HEALED: "truncated_record"},
                time=when,
                id=f"{ID_PREFIX}line:{digest}",
            )
        )
        defects.append(
            Defect(
                "truncated_record",
                "set_aside",
                "",
                f"{file.path}: the last line was cut short ({len(torn)} bytes); kept as "
                f"{SET_ASIDE}",
            )
        )
    return events, defects


def import_claude_code(
    source: ClaudeCodeSource,
    store: BaseStore | None,
    *,
    dry_run: bool = False,
    progress: Callable[[SessionOutcome], None] | None = None,
) -> ImportReport:
    """Import the transcripts of ``source`` into ``store``, as the SDK's mirror would have
    stored them (:class:`ClaudeTranscripts`), healed unless ``source.heal`` is False
    (:func:`transcript_events`).

    Every file is read and checked first. A transcript the store does not have is written
    whole; one the store has is compared entry by entry: when the store's entries are the
    start of the file's, the events it lacks (by id) are appended (a session that went on
    since the last import, or an import that was killed), else it is skipped with a note. So
    running the import again writes nothing. The source is only read. With ``dry_run`` nothing
    is written (``store`` may be None). At the end every written transcript is read back and
    compared with the file; a difference raises :class:`~agentsession.errors.SessionError`."""
    if store is None and not dry_run:
        raise UsageError("import_claude_code needs a store unless dry_run is set")
    report = ImportReport(
        "claude-code", source.location, getattr(store, "location", "") if store else "", dry_run
    )
    report.healed = source.heal
    report.notes.extend(source.notes)
    read: list[tuple[TranscriptFile, list[dict[str, Any]], list[Event], list[Defect]]] = []
    for file in source.sessions:
        entries, notes, torn = _read_transcript(file.path)
        report.notes.extend(notes)
        events, defects = transcript_events(file, entries, heal=source.heal, torn=torn)
        read.append((file, entries, events, defects))
    transcripts = ClaudeTranscripts(store) if store is not None else None
    written: list[tuple[TranscriptFile, list[dict[str, Any]]]] = []
    for file, entries, events, defects in read:
        stored = (
            transcripts.load(file.project_key, file.session_id, file.subpath)
            if transcripts is not None
            else None
        ) or []
        missing: list[Event] = []
        if stored != entries[: len(stored)]:
            report.notes.append(
                f"{file.key}: the store's transcript is not the start of {file.path}; left as it is"
            )
        else:
            have: set[str] = set()
            if store is not None and store.exists(file.key):
                have = {e.id for e in store.get(file.key).read()}
            missing = [e for e in events if e.id not in have]
        if missing and not dry_run:
            assert transcripts is not None
            transcripts.note_effect()
            session = transcripts._session(file.project_key, file.session_id, file.subpath)
            session.append_many(missing)
            written.append((file, entries))
        status: Literal["imported", "skipped", "would_import", "would_skip"]
        if missing:
            status = "would_import" if dry_run else "imported"
        else:
            status = "would_skip" if dry_run else "skipped"
        outcome = SessionOutcome(file.key, file.path, len(missing), status, defects=tuple(defects))
        report.sessions.append(outcome)
        if progress is not None:
            progress(outcome)
    if not dry_run:
        assert transcripts is not None
        for file, entries in written:
            got = transcripts.load(file.project_key, file.session_id, file.subpath) or []
            if got[: len(entries)] != entries:
                raise SessionError(
                    f"import of {file.key!r} does not match: {len(got)} entries in "
                    f"{report.destination}, {len(entries)} in {file.path}"
                )
        report.verified = True
    return report
