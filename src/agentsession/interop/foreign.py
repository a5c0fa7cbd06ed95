"""Importing the stores of the OpenAI Agents SDK, Google ADK and LangGraph, healed on the way in.

Each scan reads its source whole, read-only, and returns an
:class:`~agentsession.interop.importers.ImportSource` that
:func:`~agentsession.interop.importers.import_source` writes:

* :func:`scan_openai_agents_db`: a ``SQLiteSession`` / ``AsyncSQLiteSession`` database (tables
  ``agent_sessions`` and ``agent_messages``), with ``AdvancedSQLiteSession``'s
  ``message_structure`` (branches) and ``turn_usage`` (token usage per user turn) when present.
  Each session id is a session of that id, as :class:`agentsession.integrations.openai_agents.
  OpenAIAgentsSession` names it; each branch but ``main`` the session ``<id>@<branch>``. Every
  item is an ``openai_agents/item`` event with the integration's typed mirror, so the SDK's
  ``OpenAIAgentsSession`` on the imported store returns the same items.
* :func:`scan_adk_db`: the database of ADK's ``DatabaseSessionService`` (a SQLite file, or a
  PostgreSQL URL) or ``SqliteSessionService``: its ``sessions``, ``events``, ``app_states`` and
  ``user_states``. Each session is ``adk:<app>:<user>:<session>``, stored as
  :class:`agentsession.integrations.adk.AgentSessionService` stores it (an ``adk/session``
  event, one ``adk/event`` per event with its typed mirror, a ``session/rewind`` marker after an
  ADK rewind, a ``session/compaction`` marker after ADK's own compaction event), and the
  ``app:`` / ``user:`` state is merged into that integration's shared state. A database of
  ADK's older schema (pickled event actions) is read as it is.
* :func:`scan_langgraph_db`: a ``SqliteSaver`` database or a ``PostgresSaver`` URL: each
  thread's ``messages`` channel at its latest root checkpoint (with the messages of its pending
  writes) as the session ``langgraph:<thread>``, through
  :func:`agentsession.integrations.langchain.events_for`, each message at the time of the
  checkpoint that first held it, with that checkpoint's id in the meta; with
  ``checkpoints="all"``, every earlier line of checkpoints whose messages part from the
  latest's as a branch ``langgraph:<thread>@<checkpoint id>`` of that session.

Every event gets an id derived from the source (the session and the record), so importing again
writes only what is missing, and an import killed at any point and run again ends as one clean
run. Unless ``heal=False``, each session goes through :func:`agentsession.interop.healing.heal`;
the defects found are on the session (:attr:`SourceSession.defects
<agentsession.interop.importers.SourceSession.defects>`).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import os
import re
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final, Literal

import msgspec

from ..core import check_event
from ..derive import INTERRUPTED_TOOL_RESULT_TEXT
from ..errors import UsageError
from ..events import (
    ASSISTANT_MESSAGE,
    MAX_EVENT_ID_CHARS,
    SESSION_REWIND,
    TOOL_RESULT,
    USAGE,
    USER_MESSAGE,
    Event,
    SessionRewind,
    Usage,
)
from ..messages import ToolCall
from .healing import META_CALL_IDS, META_HEALED, SET_ASIDE, Defect, HealHooks, heal, survey
from .importers import (
    ImportSource,
    SourceNotFound,
    SourceSession,
    _check_sqlite_file,
    _LangoReader,
)

__all__ = [
    "ADK_COMPACTION_META",
    "ADK_SET_ASIDE",
    "CHECKPOINT_CHOICES",
    "IMPORT_ID_PREFIX",
    "LANGGRAPH_PREFIX",
    "OPENAI_SET_ASIDE",
    "Checkpoints",
    "ForeignSource",
    "open_source",
    "scan_adk_db",
    "scan_langgraph_db",
    "scan_openai_agents_db",
]

IMPORT_ID_PREFIX: Final = "imp:"
"""The start of every event id these importers derive."""
OPENAI_SET_ASIDE: Final = "openai_agents/set_aside"
"""The type an ``openai_agents/item`` holding only orphan results is imported as: kept, and
left out of the SDK's item list."""
ADK_SET_ASIDE: Final = "adk/set_aside"
"""The type an ``adk/event`` holding only orphan function responses is imported as: kept, and
left out of the events ADK reads."""
ADK_COMPACTION_META: Final = "adk_compaction"  # the ADK integration's OWN_COMPACTION_META
"""The meta key of a ``session/compaction`` marker made from an ADK compaction event: ADK's
``EventCompaction`` as stored (``start_timestamp``, ``end_timestamp``, ``compacted_content``);
the ADK event itself stays in the log as an ``adk/event`` (meta ``adk``: its id), which is what
ADK reads, so the ADK integration derives no compaction event of its own from such a marker."""
_ADK_COMPACTION_PENDING: Final = "import/adk_compaction"
"""The type of an ADK compaction's marker until the session is healed and its seqs known."""
LANGGRAPH_PREFIX: Final = "langgraph:"
"""The start of the id of a session imported from a LangGraph thread."""

_MAIN_BRANCH: Final = "main"


def _eid(*parts: str) -> str:
    digest = hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).hexdigest()
    return f"{IMPORT_ID_PREFIX}{digest[:40]}"


def _sub(base: str, suffix: str) -> str:
    made = f"{base}:{suffix}"
    assert len(made) <= MAX_EVENT_ID_CHARS
    return made


def _utc(value: Any) -> _dt.datetime | None:
    """A time from a source column: epoch seconds, an ISO text (naive is UTC), a datetime."""
    if value is None or value == "":
        return None
    if isinstance(value, _dt.datetime):
        when = value
    elif isinstance(value, (int, float)):
        return _dt.datetime.fromtimestamp(float(value), _dt.timezone.utc)
    elif isinstance(value, str):
        try:
            when = _dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            try:
                return _dt.datetime.fromtimestamp(float(value), _dt.timezone.utc)
            except ValueError:
                return None
    else:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return when.astimezone(_dt.timezone.utc)


class ForeignSource(ImportSource):
    """A source whose event ids are derived from it, healed on reading: the sessions, each
    with its defects (:attr:`SourceSession.defects`), and the events on demand."""

    keeps_event_ids = True
    appends_missing = True
    """A session the store already has gets the events it lacks (by id), not skipped whole."""

    def __init__(self, location: str, *, heal: bool = True) -> None:
        super().__init__(location, [], [], [])
        self.heal = heal
        """Whether sessions are healed (``--no-heal`` imports them as they are)."""
        self._keys: dict[str, Any] = {}

    # What a concrete source provides.

    def _raw(self, key: Any, session_id: str) -> tuple[list[Event], list[Defect]]:
        """The events of one session before healing, and the defects its reader found."""
        raise NotImplementedError

    def hooks(self) -> HealHooks:
        """The source's additions to healing."""
        return HealHooks()

    def _finish(self, events: list[Event]) -> list[Event]:
        """What depends on positions after healing (ADK's rewind markers)."""
        return events

    def write_extras(self, store: Any, dry_run: bool) -> list[str]:
        """Write what belongs to the store rather than a session; returns notes."""
        return []

    # The common part.

    def _build(self, session_id: str) -> tuple[list[Event], list[Defect]]:
        raw, found = self._raw(self._keys[session_id], session_id)
        if self.heal:
            events, defects = heal(raw, self.hooks())
        else:
            events, defects = raw, survey(raw)
        events = self._finish(events)
        return events, [*found, *defects]

    def _add(self, session_id: str, key: Any, source: str, branch_of: str = "") -> None:
        """Read and check one session whole, and list it (as a branch of ``branch_of``, a
        session listed before it, when given)."""
        if session_id in self._keys:
            raise UsageError(f"{self.location}: two sources import as session {session_id!r}")
        self._keys[session_id] = key
        events, defects = self._build(session_id)
        seen: dict[str, int] = {}
        for n, event in enumerate(events):
            try:
                check_event(event, session_id)
            except UsageError as exc:
                raise UsageError(f"{source}: record {n + 1}: {exc}") from None
            if event.id in seen:
                raise UsageError(f"{source}: event id {event.id!r} twice")
            seen[event.id] = n
        self.sessions.append(
            SourceSession(
                session_id, source, len(events), defects=tuple(defects), branch_of=branch_of
            )
        )

    def read_events(self, session: SourceSession) -> list[Event]:
        """The events of one session, healed unless healing is off."""
        return self._build(session.session_id)[0]


def _set_aside(source: str, raw: str, reason: str, base: str, when: Any) -> tuple[Event, Defect]:
    event = Event.new(
        SET_ASIDE,
        {"source": source, "raw": raw, "reason": reason},
        meta={META_HEALED: "truncated_record"},
        time=_utc(when),
        id=base,
    )
    defect = Defect(
        "truncated_record",
        "set_aside",
        "",
        f"{source}: the last record does not decode ({reason}); kept as {SET_ASIDE}",
    )
    return event, defect


def _decode_last_tolerant(
    rows: Sequence[tuple[str, Any]], where: Callable[[int], str]
) -> tuple[list[Any], str | None]:
    """The JSON values of ``rows`` (``(text, ...)``); a last row that does not decode is
    returned as the second value, any other bad row raises."""
    values: list[Any] = []
    for index, (text, _) in enumerate(rows):
        try:
            value = json.loads(text) if isinstance(text, (str, bytes)) else text
        except ValueError as exc:
            if index == len(rows) - 1:
                return values, str(exc)
            raise UsageError(f"{where(index)}: not JSON ({exc})") from None
        if not isinstance(value, dict):
            raise UsageError(f"{where(index)}: not a JSON object")
        values.append(value)
    return values, None


# ---------------------------------------------------------------------------------------------
# The OpenAI Agents SDK.


class OpenAIAgentsSource(ForeignSource):
    """A ``SQLiteSession`` (or ``AdvancedSQLiteSession``) database, read whole."""

    kind = "openai-agents"

    def __init__(
        self,
        location: str,
        reader: _LangoReader,
        *,
        heal: bool,
        sessions_table: str,
        messages_table: str,
    ) -> None:
        super().__init__(location, heal=heal)
        self._reader = reader
        self._sessions_table = sessions_table
        self._messages_table = messages_table
        self._conn = reader.connect()
        self._advanced = False

    def close(self) -> None:
        """Close the database (and delete a private copy)."""
        self._conn.close()
        self._reader.close()

    def _rows(self, sid: str, branch: str | None) -> list[tuple[Any, ...]]:
        table = self._messages_table
        if branch is None:
            return self._conn.execute(
                f'SELECT id, message_data, created_at, NULL FROM "{table}" '
                "WHERE session_id = ? ORDER BY id",
                (sid,),
            ).fetchall()
        return self._conn.execute(
            f'SELECT m.id, m.message_data, m.created_at, s.user_turn_number FROM "{table}" m '
            "JOIN message_structure s ON m.id = s.message_id "
            "WHERE m.session_id = ? AND s.branch_id = ? ORDER BY s.sequence_number",
            (sid, branch),
        ).fetchall()

    def _raw(self, key: Any, session_id: str) -> tuple[list[Event], list[Defect]]:
        from ..integrations.openai_agents import ITEM
        from ..providers.openai_responses import input_messages_with_ends

        sid, branch = key
        rows = self._rows(sid, branch)
        where = f"{self.location}#{session_id}"
        items, torn = _decode_last_tolerant(
            [(r[1], r) for r in rows], lambda i: f"{where}: {self._messages_table} row {rows[i][0]}"
        )
        try:
            mirrored = input_messages_with_ends(items)
        except (UsageError, ValueError, TypeError):
            mirrored = []
        after: dict[int, list[Any]] = {}
        for message, end in mirrored:
            after.setdefault(end, []).append(message)
        events: list[Event] = []
        defects: list[Defect] = []
        turn_ends: dict[int, int] = {}
        for index, (item, row) in enumerate(zip(items, rows, strict=False)):
            base = _eid("openai-agents", session_id, str(row[0]), _text_of(row[1]))
            when = _utc(row[2])
            events.append(
                Event.new(ITEM, item, meta={"openai_agents_row": row[0]}, time=when, id=base)
            )
            if row[3] is not None:
                turn_ends[int(row[3])] = len(events) + len(after.get(index, ()))
            for k, message in enumerate(after.get(index, ())):
                mid = _sub(base, f"m{k}")
                if message.role == "assistant":
                    events.append(Event.new(ASSISTANT_MESSAGE, message, time=when, id=mid))
                elif message.role == "tool":
                    for j, result in enumerate(message.tool_results):
                        rid = _sub(base, f"m{k}r{j}")
                        events.append(Event.new(TOOL_RESULT, result, time=when, id=rid))
                else:
                    events.append(Event.new(USER_MESSAGE, message, time=when, id=mid))
        if torn is not None:
            row = rows[-1]
            base = _eid("openai-agents", session_id, str(row[0]), _text_of(row[1]))
            event, defect = _set_aside(f"{where} row {row[0]}", str(row[1]), torn, base, row[2])
            events.append(event)
            defects.append(defect)
        if self._advanced and branch is not None:
            events = self._with_usage(events, sid, branch, turn_ends, session_id)
        return events, defects

    def _with_usage(
        self,
        events: list[Event],
        sid: str,
        branch: str,
        turn_ends: Mapping[int, int],
        session_id: str,
    ) -> list[Event]:
        """``turn_usage`` rows as ``usage`` events after their turn's last item."""
        rows = self._conn.execute(
            "SELECT user_turn_number, requests, input_tokens, output_tokens, total_tokens, "
            "input_tokens_details, output_tokens_details, created_at FROM turn_usage "
            "WHERE session_id = ? AND branch_id = ? ORDER BY user_turn_number",
            (sid, branch),
        ).fetchall()
        inserts: dict[int, list[Event]] = {}
        for turn, requests, given, made, total, given_d, made_d, created in rows:
            details_in = _json_or_none(given_d)
            details_out = _json_or_none(made_d)
            usage = Usage(
                input_tokens=int(given or 0),
                output_tokens=int(made or 0),
                total_tokens=int(total or 0),
                cache_read_tokens=int((details_in or {}).get("cached_tokens", 0) or 0),
                reasoning_tokens=int((details_out or {}).get("reasoning_tokens", 0) or 0),
            )
            meta = {"openai_agents_turn": turn, "openai_agents_requests": requests}
            if details_in or details_out:
                meta["openai_agents_details"] = {"input": details_in, "output": details_out}
            at = turn_ends.get(int(turn), len(events))
            eid = _eid("openai-agents", session_id, "usage", str(turn), str(created))
            inserts.setdefault(at, []).append(
                Event.new(USAGE, usage, meta=meta, time=_utc(created), id=eid)
            )
        out: list[Event] = []
        for index, event in enumerate(events):
            out.extend(inserts.pop(index, ()))
            out.append(event)
        for rest in inserts.values():
            out.extend(rest)
        return out

    def hooks(self) -> HealHooks:
        """An orphan call gets a ``function_call_output`` item too; an item holding only
        orphan results is set aside."""
        from ..integrations.openai_agents import ITEM

        def standin(call: ToolCall, call_event: Event) -> list[Event]:
            original = call_event.meta.get(META_CALL_IDS, {}).get(call.id, call.id)
            item = {
                "type": "function_call_output",
                "call_id": original,
                "output": INTERRUPTED_TOOL_RESULT_TEXT,
            }
            eid = _sub(call_event.id, f"item:{hashlib.sha256(call.id.encode()).hexdigest()[:12]}")
            meta = {META_HEALED: "orphan_call"}
            return [Event.new(ITEM, item, meta=meta, time=call_event.time, id=eid)]

        def set_aside(event: Event) -> Event:
            if event.type != ITEM:
                return event
            return msgspec.structs.replace(
                event, type=OPENAI_SET_ASIDE, meta={**event.meta, META_HEALED: "orphan_result"}
            )

        return HealHooks(standin_records=standin, set_aside=set_aside)


def _text_of(value: Any) -> str:
    """A record's stored text (what an event id is derived from, with the record's place: the
    same record of another database with the same place gets another id)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _json_or_none(value: Any) -> dict[str, Any] | None:
    if value in (None, ""):
        return None
    if isinstance(value, dict):
        return value
    try:
        parsed = json.loads(value)
    except (TypeError, ValueError):
        return None
    return parsed if isinstance(parsed, dict) else None


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def scan_openai_agents_db(
    path: str | os.PathLike[str],
    *,
    heal: bool = True,
    id_map: Mapping[str, str] | None = None,
    sessions_table: str = "agent_sessions",
    messages_table: str = "agent_messages",
) -> OpenAIAgentsSource:
    """Read an OpenAI Agents SDK SQLite database (``SQLiteSession``, ``AsyncSQLiteSession``,
    ``AdvancedSQLiteSession``) whole, opened immutable. ``id_map`` maps a source session id
    (``<id>@<branch>`` for a branch) to the session id to import it as. Raises
    :class:`~agentsession.interop.importers.SourceNotFound` when the file does not exist and
    :class:`~agentsession.errors.UsageError` when it is not such a database or a record other
    than a session's last cannot be read."""
    location = os.fspath(path)
    _check_sqlite_file(location)
    reader = _LangoReader(location)
    source = OpenAIAgentsSource(
        location,
        reader,
        heal=heal,
        sessions_table=sessions_table,
        messages_table=messages_table,
    )
    try:
        conn = source._conn
        tables = _tables(conn)
        if messages_table not in tables:
            raise UsageError(
                f"{location} is not an OpenAI Agents SDK session database: it has no "
                f"{messages_table} table"
            )
        if reader.note:
            source.notes.append(reader.note)
        source._advanced = "message_structure" in tables and "turn_usage" in tables
        ids = [
            r[0]
            for r in conn.execute(
                f'SELECT DISTINCT session_id FROM "{messages_table}" ORDER BY session_id'
            )
        ]
        if sessions_table in tables:
            listed = [r[0] for r in conn.execute(f'SELECT session_id FROM "{sessions_table}"')]
            ids = sorted(set(ids) | set(listed))
        mapping = dict(id_map or {})
        for sid in ids:
            branches: list[str | None] = [None]
            if source._advanced:
                found = [
                    r[0]
                    for r in conn.execute(
                        "SELECT DISTINCT branch_id FROM message_structure WHERE session_id = ? "
                        "ORDER BY branch_id = 'main' DESC, branch_id",
                        (sid,),
                    )
                ]
                branches = list(found) or [None]
            for branch in branches:
                name = sid if branch in (None, _MAIN_BRANCH) else f"{sid}@{branch}"
                target = mapping.pop(name, name)
                source._add(target, (sid, branch), f"{location}#{name}")
        if mapping:
            raise UsageError(f"--id-map names sessions the source does not hold: {sorted(mapping)}")
    except BaseException:
        source.close()
        raise
    return source


# ---------------------------------------------------------------------------------------------
# Google ADK.


def _is_postgres(location: str) -> bool:
    return re.match(r"^postgres(?:ql)?(?:\+\w+)?://", location) is not None


def _read_only_pg(url: str, **options: Any) -> Any:
    """A psycopg connection whose every transaction is read-only (the URL's own options, such
    as a ``search_path``, kept)."""
    import psycopg

    url = re.sub(r"^postgres(?:ql)?\+\w+://", "postgresql://", url)  # SQLAlchemy's driver name
    conn = psycopg.connect(url, autocommit=True, **options)
    conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
    return conn


class _Reader:
    """Rows from a SQLite file (opened immutable) or a PostgreSQL database (a read-only
    transaction)."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.note = ""
        self.postgres = _is_postgres(location)
        self._lango: _LangoReader | None = None
        self._sqlite: sqlite3.Connection | None = None
        self._pg: Any = None
        if self.postgres:
            import psycopg

            try:
                self._pg = _read_only_pg(location)
            except psycopg.Error as exc:
                raise SourceNotFound(f"cannot connect to {location}: {exc}") from None
        else:
            _check_sqlite_file(location)
            self._lango = _LangoReader(location)
            self.note = self._lango.note
            self._sqlite = self._lango.connect()

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of a query (``?`` placeholders, turned into ``%s`` for PostgreSQL)."""
        if self._pg is not None:
            with self._pg.cursor() as cur:
                cur.execute(sql.replace("?", "%s"), tuple(args))
                return list(cur.fetchall())
        assert self._sqlite is not None
        return self._sqlite.execute(sql, tuple(args)).fetchall()

    def tables(self) -> set[str]:
        """The tables there are."""
        if self._pg is not None:
            return {
                r[0]
                for r in self.rows(
                    "SELECT table_name FROM information_schema.tables "
                    "WHERE table_schema = current_schema()"
                )
            }
        assert self._sqlite is not None
        return _tables(self._sqlite)

    def columns(self, table: str) -> set[str]:
        """The columns of a table."""
        if self._pg is not None:
            return {
                r[0]
                for r in self.rows(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_schema = current_schema() AND table_name = ?",
                    (table,),
                )
            }
        assert self._sqlite is not None
        return {r[1] for r in self._sqlite.execute(f'PRAGMA table_info("{table}")')}

    def close(self) -> None:
        """Close the connection (and delete a private copy)."""
        if self._pg is not None:
            self._pg.close()
        if self._sqlite is not None:
            self._sqlite.close()
        if self._lango is not None:
            self._lango.close()


def _epoch(value: Any) -> float:
    when = _utc(value)
    return when.timestamp() if when is not None else 0.0


class AdkSource(ForeignSource):
    """An ADK session database, read whole."""

    kind = "adk"

    def __init__(self, location: str, reader: _Reader, *, heal: bool) -> None:
        super().__init__(location, heal=heal)
        self._reader = reader
        self.app_states: dict[str, dict[str, Any]] = {}
        """``app:`` state per app (without the prefix, as ADK stores it)."""
        self.user_states: dict[tuple[str, str], dict[str, Any]] = {}
        """``user:`` state per (app, user) (without the prefix)."""
        self.legacy_columns: tuple[str, ...] = ()
        """For a database of ADK's older schema (``v0``: an event's fields in columns of their
        own, its ``actions`` pickled), the columns of its ``events`` table that are read;
        empty for the current schema (``event_data``)."""

    def _legacy_rows(
        self, app: str, user: str, sid: str, where: str
    ) -> list[tuple[Any, Any, Any, Any]]:
        """The events of one session of the older schema as ``(id, invocation id, timestamp,
        event document)``: the document ADK's current schema would store (its ``event_data``),
        made from the columns, ``actions`` unpickled by ADK's own restricted unpickler (which
        resolves only the data types ``EventActions`` is made of) and validated as ADK's
        current ``EventActions``. An event whose columns do not read gets an unreadable
        document (only a session's last event may: it is set aside)."""
        columns = self.legacy_columns
        picked = ", ".join(f'"{c}"' for c in columns)
        rows = self._reader.rows(
            f"SELECT {picked} FROM events WHERE app_name = ? AND user_id = ? AND session_id = ?",
            (app, user, sid),
        )
        out: list[tuple[Any, Any, Any, Any]] = []
        for row in rows:
            values = dict(zip(columns, row, strict=True))
            doc: dict[str, Any] | _Unreadable
            try:
                doc = _legacy_event_doc(values)
            except (ValueError, TypeError) as exc:
                doc = _Unreadable(str(exc))
            out.append((values["id"], values.get("invocation_id"), values["timestamp"], doc))
        return out

    def close(self) -> None:
        """Close the database."""
        self._reader.close()

    def _raw(self, key: Any, session_id: str) -> tuple[list[Event], list[Defect]]:
        from ..integrations.adk import ADK_EVENT, ADK_SESSION, _Created, _mirror_or_nothing

        app, user, sid, state, created = key
        where = f"{self.location}#{session_id}"
        if self.legacy_columns:
            rows = self._legacy_rows(app, user, sid, where)
        else:
            rows = self._reader.rows(
                "SELECT id, invocation_id, timestamp, event_data FROM events "
                "WHERE app_name = ? AND user_id = ? AND session_id = ?",
                (app, user, sid),
            )
        docs: list[tuple[float, str, dict[str, Any]]] = []
        bad: list[tuple[float, str, str]] = []
        for eid, invocation, stamp, data in rows:
            try:
                doc = json.loads(data) if isinstance(data, (str, bytes)) else data
            except ValueError as exc:
                doc, reason = None, str(exc)
            else:
                reason = data.reason if isinstance(data, _Unreadable) else "not a JSON object"
            if not isinstance(doc, dict):
                bad.append((_epoch(stamp), str(eid), reason))
                continue
            doc = {**doc, "id": eid, "invocation_id": invocation or doc.get("invocation_id", "")}
            if doc.get("timestamp") is None:
                doc["timestamp"] = _epoch(stamp)
            docs.append((float(doc["timestamp"]), str(eid), doc))
        docs.sort(key=lambda d: (d[0], d[1]))
        torn: tuple[str, str] | None = None
        if bad:
            # Only the session's last event may be cut short; any other bad one is an error.
            stamp, eid, reason = max(bad)
            if len(bad) > 1 or (docs and docs[-1][0] > stamp):
                first = min(bad)
                raise UsageError(f"{where}: event {first[1]}: event_data {first[2]}")
            torn = (eid, reason)
        payload = _Created(
            app_name=app, user_id=user, id=sid, state=state, last_update_time=_epoch(created)
        )
        events = [
            Event.new(
                ADK_SESSION,
                payload,
                user=user,
                time=_utc(created),
                id=_eid("adk", session_id, "session"),
            )
        ]
        defects: list[Defect] = []
        for stamp, eid, doc in docs:
            base = _eid("adk", session_id, eid)
            invocation = doc.get("invocation_id") or ""
            meta = {"turn_id": invocation} if invocation else {}
            by_user = doc.get("author") == "user"
            author = doc.get("author")
            when = _utc(stamp)
            events.append(
                Event.new(
                    ADK_EVENT,
                    doc,
                    agent="" if by_user or not isinstance(author, str) else author,
                    user=user if by_user else "",
                    meta={"adk": eid, **meta},
                    time=when,
                    id=base,
                )
            )
            found_actions = doc.get("actions")
            actions: dict[str, Any] = found_actions if isinstance(found_actions, dict) else {}
            compaction = actions.get("compaction")
            if compaction:
                # ADK applies its own compaction when it reads (the adk/event above); the
                # derived history gets a compaction marker, made once the seqs are known.
                if isinstance(compaction, dict):
                    events.append(
                        Event.new(
                            _ADK_COMPACTION_PENDING,
                            {"compaction": compaction},
                            meta={"adk": eid, **meta},
                            time=when,
                            id=_sub(base, "compaction"),
                        )
                    )
                continue
            for k, mirrored in enumerate(_mirror_or_nothing(doc, user, meta)):
                events.append(msgspec.structs.replace(mirrored, time=when, id=_sub(base, f"m{k}")))
            target = actions.get("rewind_before_invocation_id")
            if isinstance(target, str) and target:
                events.append(
                    Event.new(
                        SESSION_REWIND,
                        SessionRewind(kind="adk.rewind"),
                        meta={**meta, "import_rewind_before": target},
                        time=when,
                        id=_sub(base, "rewind"),
                    )
                )
        if torn is not None:
            event, defect = _set_aside(
                f"{where} event {torn[0]}", "", torn[1], _eid("adk", session_id, torn[0]), None
            )
            events.append(event)
            defects.append(defect)
        return events, defects

    def hooks(self) -> HealHooks:
        """An orphan call gets an ADK event with its function response too (so ADK's own
        reading is healed); an ADK event holding only orphan responses is set aside."""
        from ..integrations.adk import ADK_EVENT

        def standin(call: ToolCall, call_event: Event) -> list[Event]:
            original = call_event.meta.get(META_CALL_IDS, {}).get(call.id, call.id)
            eid = _sub(call_event.id, f"adk:{hashlib.sha256(call.id.encode()).hexdigest()[:12]}")
            adk_id = f"import-{eid.rsplit(':', 1)[-1]}"
            turn = call_event.meta.get("turn_id", "")
            when = call_event.time.timestamp() if call_event.time is not None else 0.0
            doc = {
                "id": adk_id,
                "invocation_id": turn,
                "author": call_event.agent or "user",
                "timestamp": when,
                "content": {
                    "role": "user",
                    "parts": [
                        {
                            "function_response": {
                                "id": original,
                                "name": call.name,
                                "response": {"result": INTERRUPTED_TOOL_RESULT_TEXT},
                            }
                        }
                    ],
                },
            }
            meta = {"adk": adk_id, META_HEALED: "orphan_call"}
            if turn:
                meta["turn_id"] = turn
            return [
                Event.new(
                    ADK_EVENT, doc, agent=call_event.agent, meta=meta, time=call_event.time, id=eid
                )
            ]

        def set_aside(event: Event) -> Event:
            if event.type != ADK_EVENT:
                return event
            return msgspec.structs.replace(
                event, type=ADK_SET_ASIDE, meta={**event.meta, META_HEALED: "orphan_result"}
            )

        return HealHooks(standin_records=standin, set_aside=set_aside)

    def _finish(self, events: list[Event]) -> list[Event]:
        """Point each rewind marker at the seq before its invocation's first event (as the
        ADK integration does), or drop it when ADK would ignore the rewind; then make each ADK
        compaction's marker (:func:`_adk_compaction_marker`)."""
        from ..integrations.adk import _rewind_target

        numbered = [msgspec.structs.replace(e, seq=n) for n, e in enumerate(events, 1)]
        out: list[Event] = []
        for n, event in enumerate(numbered):
            if event.type != SESSION_REWIND or "import_rewind_before" not in event.meta:
                out.append(msgspec.structs.replace(event, seq=0))
                continue
            meta = {k: v for k, v in event.meta.items() if k != "import_rewind_before"}
            target = _rewind_target(numbered[:n], event.meta["import_rewind_before"])
            if target is None:
                continue
            out.append(
                Event.new(
                    SESSION_REWIND,
                    SessionRewind(to_seq=target, kind="adk.rewind"),
                    meta=meta,
                    time=event.time,
                    id=event.id,
                )
            )
        done: list[Event] = []
        for event in out:
            if event.type != _ADK_COMPACTION_PENDING:
                done.append(event)
                continue
            marker = _adk_compaction_marker(done, event)
            if marker is not None:
                done.append(marker)
        return done

    def write_extras(self, store: Any, dry_run: bool) -> list[str]:
        """Merge the ``app:`` and ``user:`` state into the ADK integration's shared state
        (``dict.update``: a key the store has is overwritten by the source's value)."""
        from ..children import update_store_value as update
        from ..integrations.adk import (
            APP_STATE_KIND,
            USER_STATE_KIND,
            _app_key,
            _state_of,
            _user_key,
        )

        notes: list[str] = []
        entries = [(APP_STATE_KIND, _app_key(app), s) for app, s in self.app_states.items()]
        entries += [
            (USER_STATE_KIND, _user_key(app, user), s)
            for (app, user), s in self.user_states.items()
        ]
        for kind, key, state in entries:
            if not state:
                continue
            if dry_run:
                notes.append(f"would merge {len(state)} key(s) into {kind} {key}")
                continue

            def change(current: str | None, state: dict[str, Any] = state) -> str:
                merged = _state_of(current)
                merged.update(state)
                return json.dumps(merged, sort_keys=True)

            update(store, kind, key, change)
            notes.append(f"merged {len(state)} key(s) into {kind} {key}")
        return notes


def _adk_compaction_marker(before: list[Event], pending: Event) -> Event | None:
    """The ``session/compaction`` marker of the ADK compaction event ``pending`` stands for,
    to follow ``before`` (see :func:`agentsession.integrations.adk.compaction_marker`)."""
    from ..integrations.adk import compaction_marker

    raw = msgspec.json.decode(bytes(pending.data))
    compaction = raw.get("compaction") if isinstance(raw, dict) else None
    if not isinstance(compaction, dict):
        return None
    return compaction_marker(
        before, compaction, meta=pending.meta, time=pending.time, event_id=pending.id
    )


@dataclasses.dataclass(frozen=True)
class _Unreadable:
    """An event of the older schema whose columns do not read, and why."""

    reason: str


_LEGACY_EVENT_COLUMNS: Final = (
    "id",
    "invocation_id",
    "author",
    "actions",
    "long_running_tool_ids_json",
    "branch",
    "timestamp",
    "content",
    "grounding_metadata",
    "custom_metadata",
    "usage_metadata",
    "citation_metadata",
    "partial",
    "turn_complete",
    "error_code",
    "error_message",
    "interrupted",
    "input_transcription",
    "output_transcription",
)
"""The columns of the ``events`` table of ADK's older schema (``google.adk.sessions.schemas.
v0``, ADK 1.19 to 1.21; earlier versions have fewer of them) that hold an event's fields."""

_LEGACY_JSON_COLUMNS: Final = frozenset(
    {
        "content",
        "grounding_metadata",
        "custom_metadata",
        "usage_metadata",
        "citation_metadata",
        "input_transcription",
        "output_transcription",
    }
)


def _legacy_event_doc(values: Mapping[str, Any]) -> dict[str, Any]:
    """The event document ADK's current schema stores (``Event.model_dump(exclude_none=True,
    mode="json")``) for a row of the older one (see :meth:`AdkSource._legacy_rows`)."""
    from google.adk.events.event_actions import EventActions
    from google.adk.sessions import _restricted_pickle

    doc: dict[str, Any] = {}
    for name, value in values.items():
        if value is None or name in ("actions", "long_running_tool_ids_json", "timestamp"):
            continue
        if name in _LEGACY_JSON_COLUMNS and isinstance(value, (str, bytes)):
            value = json.loads(value)
        if name in ("partial", "turn_complete", "interrupted"):
            value = bool(value)
        doc[name] = value
    pickled = values.get("actions")
    actions = EventActions()
    if pickled is not None:
        try:
            loaded = _restricted_pickle.loads(bytes(pickled))
        except Exception as exc:  # the unpickler refuses what it does not resolve
            raise ValueError(f"its pickled actions do not load: {exc}") from None
        dumped = loaded.model_dump() if hasattr(loaded, "model_dump") else loaded
        actions = EventActions.model_validate(dumped)
    doc["actions"] = actions.model_dump(exclude_none=True, mode="json")
    ids = values.get("long_running_tool_ids_json")
    if ids:
        doc["long_running_tool_ids"] = sorted(json.loads(ids))
    doc["timestamp"] = _epoch(values.get("timestamp"))
    return doc


def _is_adk_compaction(event: Event) -> bool:
    """Whether an ``adk/event`` is one of ADK's compaction events."""
    doc = msgspec.json.decode(bytes(event.data))
    actions = doc.get("actions") if isinstance(doc, dict) else None
    return isinstance(actions, dict) and bool(actions.get("compaction"))


def _state(value: Any, where: str) -> dict[str, Any]:
    if value in (None, ""):
        return {}
    parsed = json.loads(value) if isinstance(value, (str, bytes)) else value
    if not isinstance(parsed, dict):
        raise UsageError(f"{where}: state is not a JSON object")
    return parsed


def scan_adk_db(
    location: str | os.PathLike[str],
    *,
    heal: bool = True,
    id_map: Mapping[str, str] | None = None,
) -> AdkSource:
    """Read an ADK session database whole: a SQLite file (``DatabaseSessionService`` with a
    ``sqlite`` URL, or ``SqliteSessionService``; opened immutable) or a PostgreSQL URL
    (``postgresql://...``; read in read-only transactions). ``id_map`` maps
    ``<app>/<user>/<session>`` to the session id to import it as (default
    ``adk:<app>:<user>:<session>``). Raises
    :class:`~agentsession.interop.importers.SourceNotFound` when there is nothing there and
    :class:`~agentsession.errors.UsageError` when it is not an ADK database (of the current
    schema, ``events.event_data``, or the older one, ``events.actions`` pickled, read as it is:
    see :meth:`AdkSource._legacy_rows`) or a record other than a session's last cannot be
    read. ADK's own compaction events become ``session/compaction`` markers too
    (:func:`_adk_compaction_marker`)."""
    from ..integrations.adk import session_key

    where = os.fspath(location)
    reader = _Reader(where)
    source = AdkSource(where, reader, heal=heal)
    try:
        tables = reader.tables()
        if not {"sessions", "events"} <= tables:
            raise UsageError(f"{where} is not an ADK session database (no sessions/events table)")
        columns = reader.columns("events")
        if "event_data" not in columns:
            if not {"id", "timestamp", "actions"} <= columns:
                raise UsageError(
                    f"{where} is not an ADK session database of a schema this reads (events "
                    "have neither event_data nor actions)"
                )
            source.legacy_columns = tuple(c for c in _LEGACY_EVENT_COLUMNS if c in columns)
            source.notes.append(
                f"{where} holds ADK's older session schema (v0: pickled event actions); read "
                "as it is (unpickled by ADK's restricted unpickler), the source left unchanged"
            )
        if reader.note:
            source.notes.append(reader.note)
        if "app_states" in tables:
            for app, state in reader.rows("SELECT app_name, state FROM app_states"):
                source.app_states[app] = _state(state, f"{where}: app_states {app}")
        if "user_states" in tables:
            for app, user, state in reader.rows("SELECT app_name, user_id, state FROM user_states"):
                source.user_states[(app, user)] = _state(state, f"{where}: user_states {user}")
        mapping = dict(id_map or {})
        for app, user, sid, state, created in reader.rows(
            "SELECT app_name, user_id, id, state, create_time FROM sessions "
            "ORDER BY app_name, user_id, id"
        ):
            name = f"{app}/{user}/{sid}"
            target = mapping.pop(name, None) or session_key(app, user, sid)
            key = (app, user, sid, _state(state, f"{where}#{name}"), created)
            source._add(target, key, f"{where}#{name}")
        if mapping:
            raise UsageError(f"--id-map names sessions the source does not hold: {sorted(mapping)}")
    except BaseException:
        source.close()
        raise
    return source


# ---------------------------------------------------------------------------------------------
# LangGraph.


Checkpoints = Literal["latest", "all"]
"""Which checkpoints of a LangGraph thread an import reads: ``latest`` (its latest root
checkpoint) or ``all`` (every one: those whose messages are not a start of the latest one's
become branches)."""

CHECKPOINT_CHOICES: Final = ("latest", "all")


class LangGraphSource(ForeignSource):
    """A LangGraph checkpoint database, read whole through LangGraph's own saver."""

    kind = "langgraph"

    def __init__(
        self,
        location: str,
        saver: Any,
        closer: Callable[[], None],
        *,
        heal: bool,
        checkpoints: Checkpoints = "latest",
    ):
        super().__init__(location, heal=heal)
        self._saver = saver
        self._closer = closer
        self.checkpoints: Checkpoints = checkpoints
        """Which checkpoints of each thread are imported (see :data:`Checkpoints`)."""
        self._threads: dict[str, list[Any]] = {}

    def close(self) -> None:
        """Close the database."""
        self._closer()

    def _tuples(self, thread: str) -> list[Any]:
        """The thread's root checkpoints, newest first (read once)."""
        found = self._threads.get(thread)
        if found is None:
            config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            found = self._threads[thread] = list(self._saver.list(config))
        return found

    def _line(self, thread: str, tip: Any) -> list[Any]:
        """The checkpoints from the thread's first to ``tip``, along its parents."""
        by_id = {t.config["configurable"]["checkpoint_id"]: t for t in self._tuples(thread)}
        chain = [tip]
        while chain[-1].parent_config is not None:
            parent = by_id.get(chain[-1].parent_config["configurable"].get("checkpoint_id"))
            if parent is None or parent in chain:
                break
            chain.append(parent)
        chain.reverse()
        return chain

    def _messages(self, tip: Any, pending: bool) -> list[Any]:
        """The ``messages`` channel of a checkpoint (and of its pending writes)."""
        messages = list(tip.checkpoint.get("channel_values", {}).get("messages", []) or [])
        if not pending:
            return messages
        present = {getattr(m, "id", None) for m in messages}
        extra: list[Any] = []
        for _task, channel, value in tip.pending_writes or []:
            if channel != "messages":
                continue
            for message in value if isinstance(value, list) else [value]:
                if getattr(message, "id", None) not in present:
                    extra.append(message)
        return [*messages, *extra]

    def branch_tips(self, thread: str) -> list[tuple[Any, int]]:
        """The thread's checkpoints that become branches (``checkpoints="all"``), oldest first,
        each with how many of its first messages it shares with the latest checkpoint: those
        whose messages are not a start of the latest's (with its pending writes), leaving out
        one whose messages are a start of another such checkpoint's (or the same as a newer
        one's)."""
        tuples = self._tuples(thread)
        if not tuples:
            return []
        main = [_message_key(m) for m in self._messages(tuples[0], True)]
        lines: list[tuple[Any, list[tuple[str, str]]]] = []
        for t in tuples[1:]:
            keys = [_message_key(m) for m in self._messages(t, False)]
            if keys != main[: len(keys)]:
                lines.append((t, keys))
        tips: list[tuple[Any, int]] = []
        for n, (t, keys) in enumerate(lines):
            covered = any(
                (len(other) > len(keys) or m < n) and other[: len(keys)] == keys
                for m, (_, other) in enumerate(lines)
                if m != n
            )
            if not covered:
                shared = 0
                while shared < min(len(keys), len(main)) and keys[shared] == main[shared]:
                    shared += 1
                tips.append((t, shared))
        tips.reverse()
        return tips

    def _raw(self, key: Any, session_id: str) -> tuple[list[Event], list[Defect]]:
        thread, tip_id, main_id, shared = key
        tuples = self._tuples(thread)
        if not tuples:
            return [], []
        latest = tuples[0]
        tip = latest
        if tip_id:
            tip = next(t for t in tuples if t.checkpoint["id"] == tip_id)
        messages = self._messages(tip, False)
        pending = self._messages(tip, tip is latest)[len(messages) :]
        return self._events(
            session_id, main_id, shared, self._line(thread, tip), messages, pending
        ), []

    def _events(
        self,
        session_id: str,
        main_id: str,
        shared: int,
        chain: list[Any],
        messages: list[Any],
        pending: list[Any],
    ) -> list[Event]:
        """The events of a line of checkpoints ending with ``messages`` (and ``pending``):
        each message at the time of the checkpoint that first held it, with that checkpoint's
        id in the meta; the first ``shared`` messages with the ids of session ``main_id``'s
        (a branch's part in common with its origin)."""
        from langchain_core.messages import message_to_dict

        from ..integrations.langchain import events_for

        tip = chain[-1]
        first_seen: dict[str, tuple[str, str]] = {}
        for t in chain:
            for message in t.checkpoint.get("channel_values", {}).get("messages", []) or []:
                mid = getattr(message, "id", None)
                if mid and mid not in first_seen:
                    first_seen[mid] = (t.checkpoint["id"], t.checkpoint.get("ts", ""))
        tip_id = tip.checkpoint["id"]
        events: list[Event] = []
        for index, message in enumerate([*messages, *pending]):
            mid = getattr(message, "id", None) or f"#{index}"
            checkpoint, ts = first_seen.get(mid, (tip_id, tip.checkpoint.get("ts", "")))
            meta: dict[str, Any] = {"langgraph_checkpoint": checkpoint}
            if index >= len(messages):
                meta = {"langgraph_checkpoint": tip_id, "langgraph_pending_write": True}
            whole = json.dumps(message_to_dict(message), sort_keys=True, default=str)
            owner = main_id if index < shared else session_id
            base = _eid("langgraph", owner, mid, whole)
            for k, event in enumerate(events_for([message])):
                events.append(
                    msgspec.structs.replace(
                        event,
                        meta={**event.meta, **meta},
                        time=_utc(ts),
                        id=base if k == 0 else _sub(base, f"{k}"),
                    )
                )
        return events


def _message_key(message: Any) -> tuple[str, str]:
    """What tells two checkpoints' messages apart: the id and the whole message."""
    from langchain_core.messages import message_to_dict

    whole = json.dumps(message_to_dict(message), sort_keys=True, default=str)
    return (str(getattr(message, "id", None) or ""), whole)


def scan_langgraph_db(
    location: str | os.PathLike[str],
    *,
    heal: bool = True,
    id_map: Mapping[str, str] | None = None,
    checkpoints: Checkpoints = "latest",
) -> LangGraphSource:
    """Read a LangGraph checkpoint database whole: a ``SqliteSaver`` file (opened immutable)
    or a ``PostgresSaver`` URL (read-only transactions), each thread's ``messages`` channel at
    its latest root checkpoint. ``id_map`` maps a thread id to the session id to import it as
    (default ``langgraph:<thread>``). Needs the ``langgraph`` extra (and
    ``langgraph-checkpoint-sqlite`` / ``-postgres`` for the saver of the source).

    ``checkpoints="all"`` reads every checkpoint of each thread: one whose messages are not a
    start of the latest one's (an earlier line of the thread that time travel, an
    ``update_state`` on an earlier checkpoint, or a replay left behind) becomes a branch of the
    thread's session, ``<session>@<checkpoint id>``, made where their messages part (the
    checkpoint that ends the line; a checkpoint whose messages are a start of another such
    one's is in that one's branch). Each event keeps the id of the checkpoint that first held
    its message (``meta["langgraph_checkpoint"]``)."""
    if checkpoints not in CHECKPOINT_CHOICES:
        raise UsageError(f"checkpoints must be 'latest' or 'all', not {checkpoints!r}")
    where = os.fspath(location)
    with _closing_on_error() as closers:
        if _is_postgres(where):
            import psycopg
            from langgraph.checkpoint.postgres import PostgresSaver
            from psycopg.rows import dict_row

            try:
                conn = _read_only_pg(where, row_factory=dict_row)
            except psycopg.Error as exc:
                raise SourceNotFound(f"cannot connect to {where}: {exc}") from None
            closers.append(conn.close)
            saver: Any = PostgresSaver(conn)
            threads = [
                r["thread_id"]
                for r in conn.execute(
                    "SELECT DISTINCT thread_id FROM checkpoints ORDER BY thread_id"
                ).fetchall()
            ]
            note = ""
        else:
            from langgraph.checkpoint.sqlite import SqliteSaver

            _check_sqlite_file(where)
            reader = _LangoReader(where)
            closers.append(reader.close)
            sconn = sqlite3.connect(reader._uri, uri=True, check_same_thread=False)
            closers.insert(0, sconn.close)
            sconn.execute("PRAGMA query_only = ON")
            if "checkpoints" not in _tables(sconn):
                raise UsageError(f"{where} is not a LangGraph SqliteSaver database")
            saver = SqliteSaver(sconn)
            saver.is_setup = True  # its setup writes (journal mode, tables): never run it
            threads = [
                r[0]
                for r in sconn.execute(
                    "SELECT DISTINCT thread_id FROM checkpoints ORDER BY thread_id"
                )
            ]
            note = reader.note

        def close() -> None:
            for fn in closers:
                fn()

        source = LangGraphSource(where, saver, close, heal=heal, checkpoints=checkpoints)
        if note:
            source.notes.append(note)
        mapping = dict(id_map or {})
        for thread in threads:
            target = mapping.pop(str(thread), None) or f"{LANGGRAPH_PREFIX}{thread}"
            source._add(target, (str(thread), "", target, 0), f"{where}#{thread}")
            if checkpoints == "all":
                for tip, shared in source.branch_tips(str(thread)):
                    tip_id = str(tip.checkpoint["id"])
                    source._add(
                        f"{target}@{tip_id}",
                        (str(thread), tip_id, target, shared),
                        f"{where}#{thread}@{tip_id}",
                        branch_of=target,
                    )
        if mapping:
            raise UsageError(f"--id-map names threads the source does not hold: {sorted(mapping)}")
        closers.clear()  # the source closes them now
        return source


@contextmanager
def _closing_on_error() -> Iterator[list[Callable[[], None]]]:
    closers: list[Callable[[], None]] = []
    try:
        yield closers
    except BaseException:
        for fn in closers:
            fn()
        raise


# ---------------------------------------------------------------------------------------------
# By name.

SOURCE_KINDS: Final = ("openai-agents", "adk", "langgraph", "claude-code")


def open_source(
    kind: str,
    location: str | os.PathLike[str],
    *,
    heal: bool = True,
    id_map: Mapping[str, str] | None = None,
    checkpoints: Checkpoints = "latest",
) -> Any:
    """The source of ``kind`` (``openai-agents``, ``adk``, ``langgraph`` or ``claude-code``) at
    ``location``, read whole and checked (healed unless ``heal=False``), ready for
    :func:`~agentsession.interop.importers.import_source`. ``id_map`` maps a source session's
    name to the session id to import it as; for ``claude-code``, a project directory's name to
    the project key its transcripts are stored under (``claude:<project key>:...``).
    ``checkpoints`` (``langgraph`` only): ``"latest"`` (the default) imports each thread at its
    latest checkpoint, ``"all"`` every checkpoint, earlier lines as branches (see
    :func:`scan_langgraph_db`)."""
    if checkpoints != "latest" and kind != "langgraph":
        raise UsageError(f"checkpoints= is for langgraph sources, not {kind}")
    if kind == "openai-agents":
        return scan_openai_agents_db(location, heal=heal, id_map=id_map)
    if kind == "adk":
        return scan_adk_db(location, heal=heal, id_map=id_map)
    if kind == "langgraph":
        return scan_langgraph_db(location, heal=heal, id_map=id_map, checkpoints=checkpoints)
    if kind == "claude-code":
        from .claude_code import scan_claude_code_dir

        source = scan_claude_code_dir(location)
        source.heal = heal
        mapping = dict(id_map or {})
        if mapping:
            known = {f.project_key for f in source.sessions}
            unknown = sorted(set(mapping) - known)
            if unknown:
                raise UsageError(f"--id-map names projects the source does not hold: {unknown}")
            source.sessions = [
                dataclasses.replace(f, project_key=mapping.get(f.project_key, f.project_key))
                for f in source.sessions
            ]
        return source
    raise UsageError(f"no importer for {kind!r}; one of {', '.join(SOURCE_KINDS)}")
