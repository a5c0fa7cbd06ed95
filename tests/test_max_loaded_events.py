"""The loading cap (``open_store(..., max_loaded_events=N)``, agentkit's ``MaxLoadedEvents``):
opening a long uncompacted log loads only its last N events, and the history derived from
them starts at a turn boundary (agentkit's ring could start it with orphaned tool results)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentsession as ags
from agentsession import derive
from agentsession.events import Event, StepEnd, StepStart, TurnEnd, TurnStart
from agentsession.validation import provider_errors

DSN = os.environ.get("AGENTSESSION_TEST_POSTGRES_DSN", "")
TOTAL = 5000
CAP = 100


# -- the log ---------------------------------------------------------------------------------


def turn_events(n: int, steps: int, agent: str = "") -> list[Event]:
    """One recorded turn: its user message, ``steps`` tool steps, the answer."""
    out = [
        Event.new("turn/start", TurnStart(), agent=agent),
        Event.new("user/message", ags.Message.user(f"question {n}"), agent=agent),
    ]
    for k in range(steps):
        call = ags.ToolCall(f"c{n}.{k}", "read", {"n": n})
        out += [
            Event.new("step/start", StepStart(step=k), agent=agent),
            Event.new("assistant/message", ags.Message.assistant(tool_calls=[call]), agent=agent),
            Event.new("tool/result", ags.ToolResult(call.id, "read", f"r{n}.{k}"), agent=agent),
            Event.new("step/end", StepEnd(step=k), agent=agent),
        ]
    out += [
        Event.new("assistant/message", ags.Message.assistant(f"answer {n}"), agent=agent),
        Event.new("turn/end", TurnEnd(steps=steps), agent=agent),
    ]
    return out


def write_log(session: ags.BaseSession, total: int, *, agents: tuple[str, ...] = ("",)) -> None:
    """Turns of 0 to 4 steps, round-robin over ``agents``, until the log has ``total`` events
    or a little less (padded with notes to exactly ``total``)."""
    n = 0
    while True:
        batch = turn_events(n, n % 5, agents[n % len(agents)])
        if session.latest_seq + len(batch) > total:
            break
        session.append_many(batch)
        n += 1
    notes = [Event.new("app/note", {"i": i}) for i in range(total - session.latest_seq)]
    if notes:
        session.append_many(notes)


def end_the_cut_on_a_tool_result(session: ags.BaseSession, cap: int) -> None:
    """Append notes so that the first of the last ``cap`` events is a tool result whose call is
    older: the case that broke agentkit's ring."""
    latest = session.latest_seq
    events = session.read(after=latest - cap - 20)
    seq = next(e.seq for e in events if e.type == "tool/result" and e.seq >= latest - cap + 1)
    extra = seq + cap - 1 - latest
    session.append_many([Event.new("app/note", {"pad": i}) for i in range(extra)])
    assert session.read(after=session.latest_seq - cap, limit=1)[0].type == "tool/result"


def reference(events: list[Event], cap: int, agent: str | None = None) -> list[ags.Message]:
    """What the capped history must be: derived from the last ``cap`` events, from the first
    turn boundary among them (all of them when none)."""
    if len(events) <= cap:
        return derive.messages(events, agent)
    window = events[-cap:]
    probe = derive.Deriver(agent)
    start = next(
        (
            i
            for i, e in enumerate(window)
            if e.type in ("turn/start", "user/message") and probe.passes(e)
        ),
        0,
    )
    return derive.messages(window[start:], agent)


# -- counting what the backend returns -------------------------------------------------------


class Loads:
    """Events the backend's session class returned from each storage read."""

    def __init__(self, cls: type[ags.BaseSession], monkeypatch: pytest.MonkeyPatch) -> None:
        self.window = 0
        self.tail = 0
        self.read = 0
        open_window, open_tail, read = cls._storage_open, cls._storage_open_tail, cls._storage_read

        def counted_window(session: ags.BaseSession) -> tuple[list[Event], bool]:
            events, complete = open_window(session)
            self.window += len(events)
            return events, complete

        def counted_tail(session: ags.BaseSession) -> tuple[list[Event], bool]:
            events, complete = open_tail(session)
            self.tail += len(events)
            return events, complete

        def counted_read(session: ags.BaseSession, after: int, limit: int | None) -> list[Event]:
            events = read(session, after, limit)
            self.read += len(events)
            return events

        monkeypatch.setattr(cls, "_storage_open", counted_window)
        monkeypatch.setattr(cls, "_storage_open_tail", counted_tail)
        monkeypatch.setattr(cls, "_storage_read", counted_read)

    @property
    def total(self) -> int:
        return self.window + self.tail + self.read


# -- the backends ----------------------------------------------------------------------------


def _postgres_url() -> tuple[str, str]:
    schema = "t_" + uuid.uuid4().hex[:16]
    parts = urlsplit(DSN)
    query = "&".join(q for q in (parts.query, f"schema={schema}") if q)
    return urlunsplit(parts._replace(query=query)), schema


class Backend:
    """Opens stores over one place; every ``get`` gives a new session object (no cache), so
    the reader opens the log the way a new process would."""

    def __init__(self, name: str, url: str, session_class: type[ags.BaseSession]) -> None:
        self.name = name
        self.url = url
        self.session_class = session_class
        self.stores: list[ags.BaseStore] = []
        self._memory: ags.BaseStore | None = None

    def open(self, cap: int | None) -> ags.BaseStore:
        if self.name == "memory":
            # One store object holds the logs: the cap is set on it (the writer's session
            # object started from an empty log, so it holds its events and is not cut back).
            if self._memory is None:
                self._memory = ags.open_store("memory:", max_cached_sessions=0)
            self._memory.max_loaded_events = cap
            return self._memory
        store = ags.open_store(self.url, max_loaded_events=cap, max_cached_sessions=0)
        self.stores.append(store)
        return store

    def close(self) -> None:
        for store in [*self.stores, *([self._memory] if self._memory else [])]:
            store.close()


@pytest.fixture(params=["memory", "jsonl", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    name = request.param
    schema = ""
    if name == "postgres":
        if not DSN:
            pytest.skip(
                "set AGENTSESSION_TEST_POSTGRES_DSN (for example "
                "postgresql://postgres@127.0.0.1:5432/test) to run the PostgreSQL tests"
            )
        from agentsession.backends.postgres import PostgresSession

        url, schema = _postgres_url()
        found = Backend(name, url, PostgresSession)
    else:
        url, cls = {
            "memory": ("memory:", ags.BaseSession),
            "jsonl": (str(tmp_path / "store"), ags.BaseSession),
            "sqlite": (f"sqlite:///{tmp_path}/s.db", ags.BaseSession),
        }[name]
        found = Backend(name, url, cls)
    try:
        yield found
    finally:
        found.close()
        if schema:
            import psycopg
            from psycopg import sql

            with psycopg.connect(DSN, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                )


# -- the option ------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-1, 1.5, True, "10"])
def test_the_cap_must_be_a_positive_int_zero_or_none(bad: Any) -> None:
    with pytest.raises(ags.UsageError, match="max_loaded_events must be an int >= 0 or None"):
        ags.open_store("memory:", max_loaded_events=bad)


def test_a_cap_of_zero_is_no_cap_as_in_agentkit() -> None:
    assert ags.open_store("memory:", max_loaded_events=0).max_loaded_events is None


def test_no_cap_by_default() -> None:
    assert ags.open_store("memory:").max_loaded_events is None
    assert ags.open_store("memory:", max_loaded_events=1).max_loaded_events == 1


# -- a long uncompacted log --------------------------------------------------------------------


def test_a_long_log_is_derived_from_its_last_events_from_a_turn_boundary(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = backend.open(None).get("long")
    write_log(writer, TOTAL - 30)
    end_the_cut_on_a_tool_result(writer, CAP)
    latest = writer.latest_seq
    assert latest >= TOTAL - 30
    loads = Loads(backend.session_class, monkeypatch)
    reader = backend.open(CAP).get("long")
    msgs = reader.messages()
    # Only the last CAP events were loaded, never the window (the whole log) at once.
    assert loads.window == 0
    assert loads.read <= CAP
    assert loads.total < latest // 4
    # The history comes from them, starting at the first turn boundary among them: the
    # tool result the cut begins with is not in it.
    entries = reader.entries()
    assert min(entry.seq for entry in entries) > latest - CAP
    assert msgs[0].role == "user"
    assert provider_errors(msgs) == []
    every = reader.read()
    assert len(every) == latest  # read() is not capped
    assert msgs == reference(every, CAP)


def test_appending_after_a_capped_load_extends_the_history(backend: Backend) -> None:
    writer = backend.open(None).get("grow")
    write_log(writer, 1000)
    reader = backend.open(CAP).get("grow")
    before = reader.messages()
    with reader.turn() as turn:
        turn.user("one more")
        turn.assistant("done")
    after = reader.messages()
    assert after[: len(before)] == before
    assert [m.text for m in after[len(before) :]] == ["one more", "done"]
    assert len(reader.read()) == reader.latest_seq


def test_a_log_within_the_cap_is_derived_whole(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = backend.open(None).get("short")
    write_log(writer, 90)
    expected = writer.messages()
    reader = backend.open(CAP).get("short")
    assert reader.messages() == expected


def test_a_compaction_among_the_last_events_is_honoured(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = backend.open(None).get("compacted")
    write_log(writer, 2000)
    assert writer.compact("summary of it all", keep_turns=1) is not None
    writer.append_many(turn_events(9000, 2))
    expected = writer.messages()
    assert expected[0].text == "summary of it all"
    loads = Loads(backend.session_class, monkeypatch)
    reader = backend.open(CAP).get("compacted")
    assert reader.messages() == expected
    assert loads.window == 0 and loads.read <= CAP


def test_a_compaction_older_than_the_last_events_is_not_seen(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = backend.open(None).get("old-marker")
    write_log(writer, 300)
    writer.compact("old summary", keep_turns=1)
    for n in range(60):
        writer.append_many(turn_events(1000 + n, n % 4))
    loads = Loads(backend.session_class, monkeypatch)
    reader = backend.open(CAP).get("old-marker")
    msgs = reader.messages()
    assert "old summary" not in [m.text for m in msgs]
    assert msgs[0].role == "user" and provider_errors(msgs) == []
    assert loads.window == 0 and loads.read <= CAP
    assert msgs == reference(reader.read(), CAP)


def test_one_turn_longer_than_the_cap_opens_with_an_assistant_message(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = backend.open(None).get("one-turn")
    writer.append_many(turn_events(0, 400))
    reader = backend.open(CAP).get("one-turn")
    msgs = reader.messages()
    assert msgs and msgs[0].role == "assistant"  # no turn begins among the last events
    assert provider_errors(msgs) == []
    assert msgs == reference(reader.read(), CAP)


def test_no_agents_history_reaches_back_before_the_cap(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = backend.open(None).get("agents")
    write_log(writer, 3000, agents=("a", "b"))
    # A marker for agent a near the end rebuilds a's history and trims the window; b's
    # history would need the log from seq 1.
    assert writer.compact("a's summary", keep_turns=1, agent="a") is not None
    writer.append_many(turn_events(7000, 1, "b"))
    latest = writer.latest_seq
    loads = Loads(backend.session_class, monkeypatch)
    reader = backend.open(CAP).get("agents")
    assert reader.messages(agent="a")[0].text == "a's summary"
    msgs_b = reader.messages(agent="b")
    assert loads.window == 0 and loads.read <= CAP
    assert min(entry.seq for entry in reader.entries(agent="b")) > latest - CAP
    assert msgs_b[0].role == "user" and provider_errors(msgs_b) == []
    assert msgs_b == reference(reader.read(), CAP, agent="b")


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(st.integers(min_value=0, max_value=6), min_size=1, max_size=25),
    notes=st.integers(min_value=0, max_value=7),
    cap=st.integers(min_value=1, max_value=120),
)
def test_the_capped_history_is_the_history_of_the_last_events(
    steps: list[int], notes: int, cap: int
) -> None:
    store = ags.open_store("memory:", max_cached_sessions=0)
    writer = store.get("p")
    for n, count in enumerate(steps):
        writer.append_many(turn_events(n, count))
    writer.append_many([Event.new("app/note", {"i": i}) for i in range(notes)])
    store.max_loaded_events = cap
    reader = store.get("p")
    assert reader is not writer
    loaded: list[int] = []
    original = reader._storage_read

    def counted(after: int, limit: int | None) -> list[Event]:
        events = original(after, limit)
        loaded.append(len(events))
        return events

    reader._storage_read = counted  # type: ignore[method-assign]
    msgs = reader.messages()
    assert sum(loaded) <= cap
    assert provider_errors(msgs) == []
    assert not msgs or msgs[0].role != "tool"
    assert msgs == reference(reader.read(), cap)
