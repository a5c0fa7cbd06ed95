"""Hostile session ids and payloads, on every backend.

Each id or payload is either stored and read back exactly (the same id in ``store.list()``,
the same event after reopening with a fresh store object) or refused with ``UsageError``
(and then nothing is stored). The JSONL store never creates a file outside its directory and
names its files safely whatever the id.

PostgreSQL runs when ``AGENTSESSION_TEST_POSTGRES_DSN`` is set (each test in a schema of its
own, dropped afterwards).
"""

from __future__ import annotations

import contextlib
import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentsession as ags

from .test_conformance_postgres import (
    DSN,
    SKIP_REASON,
    drop_schemas,
    new_schema_name,
    url_with_schema,
)

NAMED_IDS = [
    pytest.param("a\x00b", id="nul-inside"),
    pytest.param("\x00", id="nul-only"),
    pytest.param("x" * 10_000, id="10000-chars"),
    pytest.param("é" * 5_000, id="10000-utf8-bytes"),
    pytest.param("/", id="slash"),
    pytest.param("a/b", id="slash-inside"),
    pytest.param("/etc/passwd", id="absolute-path"),
    pytest.param("\\", id="backslash"),
    pytest.param("a\\..\\b", id="backslash-dotdot"),
    pytest.param(".", id="dot"),
    pytest.param("..", id="dotdot"),
    pytest.param("../x", id="dotdot-slash-x"),
    pytest.param("../../../../tmp/escape", id="deep-escape"),
    pytest.param(".hidden", id="leading-dot"),
    pytest.param(".locks", id="lock-dir-name"),
    pytest.param(".meta", id="meta-dir-name"),
    pytest.param("CON", id="con"),
    pytest.param("nul.txt", id="nul-txt"),
    pytest.param("COM1", id="com1"),
    pytest.param("LPT9.log", id="lpt9"),
    pytest.param("aux", id="aux"),
    pytest.param(" lead", id="leading-space"),
    pytest.param("trail ", id="trailing-space"),
    pytest.param("   ", id="spaces-only"),
    pytest.param("tab\there", id="tab"),
    pytest.param("line\nbreak", id="newline"),
    pytest.param("a%2Fb", id="escape-lookalike"),
    pytest.param("a_b", id="underscore"),
    pytest.param("a:b", id="colon"),
    pytest.param("x~0123456789abcdef", id="hash-lookalike"),
    pytest.param("x.jsonl", id="suffix"),
    pytest.param("x.jsonl.quarantine", id="quarantine-suffix"),
    pytest.param("\ud800", id="lone-high-surrogate"),
    pytest.param("a\udfffb", id="lone-low-surrogate"),
    pytest.param("\U0001f600", id="astral"),
    pytest.param("\u202e\u200b", id="bidi-zero-width"),
]
"""Ids from the issue: NUL, 10,000 characters, path separators, Windows device names,
leading/trailing spaces, lone surrogates, and a few more of the same families."""

HOSTILE_TEXT = [
    "lone \ud800 high",
    "lone \udfff low",
    "nul \x00 inside",
    "\x00",
    "both \udc80\x00",
    "e\u0301 vs \u00e9",
    "\u2028\u2029 line separators",
    "quote \" backslash \\ slash /",
]


# -- backends ---------------------------------------------------------------------------------


class Backend:
    """One backend under test: ``open()`` gives a fresh store object on the same data."""

    def __init__(self, name: str, url: str, root: Path | None = None) -> None:
        self.name = name
        self.url = url
        self.root = root  # JSONL: the store directory
        self._writer: ags.BaseStore | None = None

    def open(self) -> ags.BaseStore:
        """The writer: one store object per test (memory: the store is the data)."""
        if self._writer is None:
            self._writer = ags.open_store(self.url)
        return self._writer

    @contextlib.contextmanager
    def fresh(self) -> Iterator[ags.BaseStore]:
        """A fresh store object on the same data, closed afterwards."""
        if self.name == "memory":
            yield self.open()
            return
        store = ags.open_store(self.url)
        try:
            yield store
        finally:
            store.close()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


@pytest.fixture(params=["memory", "jsonl", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    name = request.param
    schema = ""
    if name == "postgres":
        if not DSN:
            pytest.skip(SKIP_REASON)
        schema = new_schema_name()
        found = Backend(name, url_with_schema(schema))
    elif name == "memory":
        found = Backend(name, "memory:")
    elif name == "jsonl":
        found = Backend(name, str(tmp_path / "outer" / "store"), tmp_path / "outer" / "store")
    else:
        found = Backend(name, f"sqlite:///{tmp_path}/s.db")
    try:
        yield found
    finally:
        found.close()
        if schema:
            drop_schemas([schema])


def _snapshot(event: ags.Event) -> tuple[Any, ...]:
    """What must read back: everything but the object identity."""
    return (event.seq, event.type, event.agent, event.user, event.time, event.raw, event.meta)


def _listed(store: ags.BaseStore) -> list[str]:
    return [info.id for info in store.list()]


def roundtrip_id(backend: Backend, session_id: str) -> bool:
    """Store one event under ``session_id`` and read it back with a fresh store; True when
    stored, False when refused with UsageError (and then nothing was stored)."""
    writer = backend.open()
    before = set(_listed(writer))
    event = ags.Event.new("user/message", ags.Message.user(f"hello {len(session_id)}"))
    try:
        session = writer.get(session_id)
        session.append(event)
    except ags.UsageError:
        assert set(_listed(writer)) == before, "a refused id left a session behind"
        return False
    written = [_snapshot(e) for e in session.read()]
    with backend.fresh() as reader:
        listed = _listed(reader)
        assert session_id in listed, f"{session_id[:40]!r} is not listed (got {listed[:5]})"
        assert listed.count(session_id) == 1
        assert [_snapshot(e) for e in reader.open(session_id).read()] == written
        assert reader.exists(session_id)
    return True


def check_jsonl_files(backend: Backend) -> None:
    """Nothing outside the store directory; every name in it is a safe one."""
    if backend.root is None:
        return
    outer = backend.root.parent
    assert sorted(p.name for p in outer.iterdir()) == ["store"], "a file outside the store"
    safe = re.compile(r"[A-Za-z0-9._%~-]+")
    for path in backend.root.rglob("*"):
        name = path.name
        assert safe.fullmatch(name), f"unsafe file name {name!r}"
        assert len(name.encode()) <= 255
        assert path.resolve().is_relative_to(backend.root.resolve())
        if path.parent == backend.root and name.startswith("."):
            assert name in (".locks", ".meta"), f"{name!r} looks like a hidden store file"


# -- ids --------------------------------------------------------------------------------------


@pytest.mark.parametrize("session_id", NAMED_IDS)
def test_a_hostile_id_is_stored_exactly_or_refused(backend: Backend, session_id: str) -> None:
    roundtrip_id(backend, session_id)
    check_jsonl_files(backend)


def test_normalisation_twins_are_two_sessions(backend: Backend) -> None:
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    assert unicodedata.normalize("NFC", decomposed) == composed
    writer = backend.open()
    writer.get(composed).append(ags.Event.new("rel/which", {"form": "NFC"}))
    writer.get(decomposed).append(ags.Event.new("rel/which", {"form": "NFD"}))
    with backend.fresh() as reader:
        listed = _listed(reader)
        assert listed.count(composed) == 1 and listed.count(decomposed) == 1
        assert [e.payload()["form"] for e in reader.open(composed).read()] == ["NFC"]
        assert [e.payload()["form"] for e in reader.open(decomposed).read()] == ["NFD"]
    check_jsonl_files(backend)


def test_case_twins_and_escape_lookalikes_are_distinct(backend: Backend) -> None:
    ids = ["a:b", "a_b", "a%5Fb", "a/b", "a%2Fb", ".x", "%2Ex"]
    writer = backend.open()
    for n, sid in enumerate(ids):
        writer.get(sid).append(ags.Event.new("rel/n", {"n": n}))
    with backend.fresh() as reader:
        for n, sid in enumerate(ids):
            assert [e.payload()["n"] for e in reader.open(sid).read()] == [n], sid
    check_jsonl_files(backend)


_ID_SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@_ID_SETTINGS
@given(
    st.text(
        alphabet=st.characters(codec=None, exclude_categories=()),
        min_size=1,
        max_size=300,
    )
)
def test_generated_ids_are_stored_exactly_or_refused(backend: Backend, session_id: str) -> None:
    roundtrip_id(backend, session_id)
    check_jsonl_files(backend)


@_ID_SETTINGS
@given(st.sampled_from(["/", "\\", "..", ".", "\x00", ":", "%", "~", " "]).flatmap(
    lambda piece: st.lists(st.sampled_from([piece, "a", "..", "/"]), min_size=1, max_size=12)
).map("".join))
def test_generated_path_like_ids(backend: Backend, session_id: str) -> None:
    roundtrip_id(backend, session_id)
    check_jsonl_files(backend)


# -- payloads ---------------------------------------------------------------------------------


def _hostile_events(text: str) -> list[ags.Event]:
    call = ags.ToolCall(id=f"call {text}", name="tool", arguments={text: text, "list": [text]})
    return [
        ags.Event.new("user/message", ags.Message.user(text), agent=text, user=text,
                      meta={text: text, "k": [text]}),
        ags.Event.new("assistant/message", ags.Message.assistant(text, tool_calls=[call]),
                      agent=text),
        ags.Event.new("tool/result", ags.ToolResult(call_id=call.id, name="tool", content=text),
                      agent=text),
        ags.Event.new("rel/app", {"text": text, text: [text]}, meta={"m": text}),
    ]


def roundtrip_payload(backend: Backend, text: str, session_id: str = "payloads") -> None:
    """Each event carrying ``text`` everywhere reads back exactly, or is refused whole."""
    writer = backend.open()
    session = writer.get(session_id)
    for event in _hostile_events(text):
        start = session.latest_seq
        try:
            seq = session.append(event)
        except ags.UsageError:
            assert session.latest_seq == start, "a refused event was stored"
            continue
        [stored] = session.read(after=seq - 1)
        with backend.fresh() as reader:
            [again] = reader.open(session_id).read(after=seq - 1)
        assert _snapshot(again) == _snapshot(stored)
        assert stored.type == event.type
        assert stored.agent == event.agent and stored.user == event.user
        assert stored.meta == event.meta
        assert again.payload() == event.payload()


@pytest.mark.parametrize("text", HOSTILE_TEXT)
def test_hostile_payloads_read_back_exactly_or_are_refused(backend: Backend, text: str) -> None:
    roundtrip_payload(backend, text)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=60))
def test_generated_payloads_read_back_exactly_or_are_refused(backend: Backend, text: str) -> None:
    roundtrip_payload(backend, text)


def test_a_history_with_hostile_text_derives(backend: Backend) -> None:
    """The recorder and the derived history carry the same text."""
    writer = backend.open()
    session = writer.get("history")
    text = "lone \ud800 and nul \x00"
    try:
        with session.turn(agent="coder") as turn:
            turn.user(text)
            turn.assistant(text)
    except ags.UsageError:
        return
    with backend.fresh() as reader:
        assert [m.text for m in reader.open("history").messages()] == [text, text]
