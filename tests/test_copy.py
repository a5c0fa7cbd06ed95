"""``copy_store``: a copy keeps the events and everything stored beside them, on every backend.

Each test builds a source with what a store holds beside its logs (session records, a live
child and its parent's children index, agent bindings, the active-session map, the CLI
pointer, a meta namespace nobody knows by name, ADK ``user:``/``app:`` state), copies it, and
checks the destination: the same events, the same meta, the same last activity, and a child
that still merges. Then encryption in and out, resuming with ``skip_existing`` (also after a
copy subprocess was killed with SIGKILL at a random point), and the refusals.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

import agentsession as ags
from agentsession.backends.jsonl import JsonlStore
from agentsession.chat.identity import (
    active_session,
    agent_binding,
    bind_agent,
    cli_current,
    set_active_session,
    set_cli_current,
)
from agentsession.children import STORE_BOX_HEAD, open_store_value
from agentsession.copying import KEY_RECORD_KINDS
from agentsession.crypto import SESSION_KIND
from agentsession.errors import SessionShredded
from agentsession.events import encode_event
from agentsession.store import BaseStore

from .test_conformance_postgres import DSN, drop_schemas, new_schema_name, url_with_schema

NO_POSTGRES = pytest.mark.skipif(
    not DSN, reason="set AGENTSESSION_TEST_POSTGRES_DSN to run the PostgreSQL tests"
)
PASSPHRASE = "Copy-Source-Passphrase 7"
OTHER_PASSPHRASE = "Copy-Destination-Passphrase 8"


class Stores:
    """Opens new stores of any backend for one test and closes (and drops) them after it."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.opened: list[BaseStore] = []
        self.schemas: list[str] = []
        self.count = 0

    def url(self, backend: str) -> str:
        self.count += 1
        name = f"{backend}{self.count}"
        if backend == "jsonl":
            return str(self.tmp_path / name)
        if backend == "sqlite":
            return f"sqlite:///{self.tmp_path / name}.db"
        if backend == "postgres":
            self.schemas.append(new_schema_name())
            return url_with_schema(self.schemas[-1])
        assert backend == "memory"
        return "memory:"

    def new(self, backend: str, **options: Any) -> BaseStore:
        return self.open(self.url(backend), **options)

    def open(self, url: str, **options: Any) -> BaseStore:
        store = ags.open_store(url, **options)
        self.opened.append(store)
        return store

    def close(self) -> None:
        for store in self.opened:
            store.close()
        drop_schemas(self.schemas)


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[Stores]:
    made = Stores(tmp_path)
    try:
        yield made
    finally:
        made.close()


def user(text: str) -> ags.Event:
    return ags.Event.new("user/message", ags.Message.user(text))


def assistant(text: str) -> ags.Event:
    return ags.Event.new("assistant/message", ags.Message.assistant(text))


def fill(store: BaseStore, *, long_events: int = 0) -> str:
    """Everything a store keeps beside its logs; returns the id of a live child."""
    store.create(
        "conv:a",
        [user("Fix the failing test"), assistant("On it")],
        agent_id="coder",
        channel_type="slack",
        channel_id="C001",
        model="model-1",
        metadata={"team": "core"},
    )
    parent = store.get("conv:a")
    child = parent.fork("researcher", inherit="all", task="find the cause", max_messages=2)
    child.append(user("look at parse()"))
    child.append(assistant("parse() drops the last line"))
    child.append(user("and the fix?"))
    store.create("conv:b", [user("hello")])
    if long_events:
        store.get("conv:b").append_many(
            [user(f"message {i}") if i % 2 else assistant(f"reply {i}") for i in range(long_events)]
        )
    bind_agent(store, "conv:a", "coder")
    set_active_session(store, "slack:C001", "conv:a")
    set_cli_current(store, "conv:b")
    store.meta_set("future-integration", "some key", '{"kept": true}')
    return child.id


def plain_meta(store: BaseStore) -> dict[tuple[str, str], str]:
    """Every meta entry but the key records, opened where the store sealed it."""
    ring = store._keyring
    out = {}
    for kind, key, value in store._meta_list():
        if kind in KEY_RECORD_KINDS:
            continue
        if ring is not None and value.startswith(STORE_BOX_HEAD):
            value = open_store_value(ring, kind, key, value)  # a value shared by sessions
        elif ring is not None and value.startswith('{"sealed":1,'):
            value = ring.cipher(key).open_value(kind, value)
        out[(kind, key)] = value
    return out


def assert_same(src: BaseStore, dst: BaseStore) -> None:
    """``dst`` holds exactly what ``src`` holds: sessions, events, meta, last activity."""
    src_infos = {i.id: i for i in src.list()}
    dst_infos = {i.id: i for i in dst.list()}
    assert sorted(dst_infos) == sorted(src_infos)
    for sid, info in src_infos.items():
        ours = [encode_event(e) for e in src._open_session(sid).read()]
        theirs = [encode_event(e) for e in dst._open_session(sid).read()]
        assert theirs == ours, sid
        # A JSONL copy takes the source's last activity; the others keep the last event's time.
        last_event_time = src._open_session(sid).read()[-1].time
        kept = info.updated_at if isinstance(dst, JsonlStore) else last_event_time
        assert dst_infos[sid].updated_at == kept, sid
        assert dst.get(sid).info() == src.get(sid).info(), sid
    assert plain_meta(dst) == plain_meta(src)


PAIRS = [
    ("memory", "jsonl"),
    ("jsonl", "sqlite"),
    ("sqlite", "memory"),
    pytest.param("sqlite", "postgres", marks=NO_POSTGRES),
    pytest.param("postgres", "jsonl", marks=NO_POSTGRES),
]


@pytest.mark.parametrize(("source", "destination"), PAIRS)
def test_copy_keeps_records_children_bindings_pointers_and_unknown_meta(
    stores: Stores, source: str, destination: str
) -> None:
    src = stores.new(source)
    child_id = fill(src, long_events=2100)  # three batches
    dst = stores.new(destination)
    calls: list[tuple[int, int, str]] = []
    report = ags.copy_store(src, dst, progress=lambda *args: calls.append(args))
    assert report.sessions == 3
    assert report.events == sum(len(src.get(i.id).read()) for i in src.list()) > 2100
    assert report.verified_sessions == 3 and report.meta == report.verified_meta == 7
    assert (report.completed, report.skipped, report.shredded, report.meta_kept) == ([], [], [], [])
    assert calls == [(n, 3, sid) for n, sid in enumerate(sorted(["conv:a", "conv:b", child_id]), 1)]
    assert_same(src, dst)
    info = dst.get("conv:a").info()
    assert (info.agent_id, info.model, info.metadata) == ("coder", "model-1", {"team": "core"})
    assert agent_binding(dst, "conv:a") == "coder"
    assert active_session(dst, "slack:C001") == "conv:a"
    assert cli_current(dst) == "conv:b"
    assert dst.meta_get("future-integration", "some key") == '{"kept": true}'
    assert [c.id for c in dst.children_of("conv:a")] == [child_id]
    # The child is live in the copy: it merges into the copied parent.
    seq = dst.get(child_id).merge("parse() drops the last line; fixed")
    assert dst.get("conv:a").read()[-1].seq == seq
    assert [c.state for c in dst.children_of("conv:a")] == ["merged"]
    assert [c.state for c in src.children_of("conv:a")] == ["active"]


def test_a_jsonl_copy_keeps_the_source_last_activity(stores: Stores) -> None:
    src = stores.new("sqlite")
    src.create("old", [ags.Event.new("test/n", {}, time=ags.events.utcnow().replace(year=2020))])
    dst = stores.new("jsonl")
    ags.copy_store(src, dst)
    [info] = dst.list()
    assert info.updated_at is not None and info.updated_at.year == 2020
    assert info.updated_at == src.list()[0].updated_at


def test_a_capped_destination_or_child_gets_no_prune_marker(stores: Stores) -> None:
    src = stores.new("jsonl")
    src.create(
        "long", [user(f"question {i}") if i % 2 == 0 else assistant("answer") for i in range(40)]
    )
    dst = stores.new("sqlite", max_messages=4)
    ags.copy_store(src, dst)
    assert [encode_event(e) for e in dst.get("long").read()] == [
        encode_event(e) for e in src.get("long").read()
    ]


@pytest.mark.parametrize(
    "destination", ["jsonl", "sqlite", pytest.param("postgres", marks=NO_POSTGRES)]
)
def test_an_encrypted_source_copies_in_plaintext_or_under_the_destination_keys(
    stores: Stores, destination: str
) -> None:
    src = stores.new("jsonl", passphrase=PASSPHRASE)
    child_id = fill(src)
    sealed_at_source = src._meta_get("record", "conv:a")
    assert sealed_at_source is not None and sealed_at_source.startswith('{"sealed":1,')
    plain = stores.new(destination)
    ags.copy_store(src, plain)
    assert_same(src, plain)
    assert not plain.encrypted
    assert plain._meta_get("record", "conv:a") == plain_meta(src)[("record", "conv:a")]
    assert not [e for e in plain._meta_list() if e[0] in KEY_RECORD_KINDS]
    # Into another encrypted store: sealed under its own keys, never the source's records.
    other = stores.new(destination, passphrase=OTHER_PASSPHRASE)
    ags.copy_store(src, other)
    assert_same(src, other)
    for kind in ("record", "children"):
        for sid in ("conv:a",):
            raw = other._meta_get(kind, sid)
            assert (
                raw is not None
                and raw.startswith('{"sealed":1,')
                and raw != src._meta_get(kind, sid)
            )
    assert other._meta_get(SESSION_KIND, "conv:a") != src._meta_get(SESSION_KIND, "conv:a")
    assert other._meta_get("crypto", "store") != src._meta_get("crypto", "store")
    reopened = stores.open(other.url, passphrase=OTHER_PASSPHRASE)
    assert reopened.get("conv:a").info().agent_id == "coder"
    reopened.get(child_id).merge("done")
    # And a plain store copied into an encrypted one has its record and index sealed there.
    back = stores.new("sqlite", passphrase=OTHER_PASSPHRASE)
    ags.copy_store(plain, back)
    assert_same(plain, back)
    record = back._meta_get("record", "conv:a")
    assert record is not None and record.startswith('{"sealed":1,')


def test_skip_existing_completes_a_half_copied_session_and_its_meta(stores: Stores) -> None:
    src = stores.new("jsonl")
    child_id = fill(src, long_events=1500)
    dst = stores.new("sqlite")
    dst.create("conv:b", src.get("conv:b").read()[:700])  # cut off inside the first batch
    dst.create("conv:a", src.get("conv:a").read())  # events whole, meta not yet written
    with pytest.raises(ags.DuplicateSession, match="already exist"):
        ags.copy_store(src, dst)
    report = ags.copy_store(src, dst, skip_existing=True)
    assert report.completed == ["conv:b"] and report.skipped == ["conv:a"]
    child_events = len(src.get(child_id).read())
    assert report.sessions == 2
    assert report.events == len(src.get("conv:b").read()) - 700 + child_events
    assert_same(src, dst)
    again = ags.copy_store(src, dst, ids=["conv:a"], skip_existing=True)
    assert (again.sessions, again.events, again.meta, again.skipped) == (0, 0, 0, ["conv:a"])
    assert dst.get(child_id).merge() > 0


def test_a_destination_that_is_not_a_copy_is_refused_and_its_own_meta_kept(
    stores: Stores,
) -> None:
    src = stores.new("memory")
    fill(src)
    dst = stores.new("jsonl")
    dst.create("conv:b", [user("something else")])
    with pytest.raises(ags.ConflictError, match=r"'conv:b' in .* is not a copy"):
        ags.copy_store(src, dst, skip_existing=True)
    assert [i.id for i in dst.list()] == ["conv:b"]  # checked before anything was written
    dst.delete("conv:b")
    set_cli_current(dst, "mine")
    report = ags.copy_store(src, dst)
    assert report.meta_kept == [("cli", "current")]
    assert cli_current(dst) == "mine"


def test_ids_copy_the_named_sessions_and_their_meta_only(stores: Stores) -> None:
    src = stores.new("sqlite")
    child_id = fill(src)
    dst = stores.new("jsonl")
    report = ags.copy_store(src, dst, ids=["conv:a", "conv:a"])
    assert report.sessions == 1 and [i.id for i in dst.list()] == ["conv:a"]
    assert dst.get("conv:a").info().agent_id == "coder"
    assert agent_binding(dst, "conv:a") == "coder"
    assert [c.id for c in dst.children_of("conv:a")] == []  # the child was not copied
    assert dst._meta_get("children", "conv:a") == src._meta_get("children", "conv:a")
    assert dst.meta_get("cli", "current") is None  # store-wide entries need a whole copy
    assert dst.meta_get("future-integration", "some key") is None
    with pytest.raises(ags.SessionNotFound, match="no session 'nope'"):
        ags.copy_store(src, dst, ids=["nope", child_id])
    with pytest.raises(ags.UsageError):
        ags.copy_store(src, dst, ids="conv:b")


def test_urls_are_opened_and_a_missing_session_creates_no_destination(
    stores: Stores, tmp_path: Path
) -> None:
    src = stores.new("jsonl")
    fill(src)
    with pytest.raises(ags.SessionNotFound):
        ags.copy_store(src.url, tmp_path / "never", ids=["nope"])
    assert not (tmp_path / "never").exists()
    with pytest.raises(ags.StoreUnavailable):
        ags.copy_store(tmp_path / "missing", tmp_path / "never")
    assert not (tmp_path / "missing").exists() and not (tmp_path / "never").exists()
    report = ags.copy_store(src.url, f"sqlite:///{tmp_path / 'copy.db'}")
    assert report.sessions == 3
    assert_same(src, stores.open(f"sqlite:///{tmp_path / 'copy.db'}"))
    with pytest.raises(ags.UsageError, match="progress"):
        ags.copy_store(src, stores.new("memory"), progress=3)  # type: ignore[arg-type]


def test_a_shredded_session_is_left_out_of_a_whole_copy_and_refused_by_id(
    stores: Stores,
) -> None:
    src = stores.new("jsonl", passphrase=PASSPHRASE)
    fill(src)
    bind_agent(src, "conv:b", "shredded-agent")
    src.shred("conv:b")
    dst = stores.new("sqlite")
    report = ags.copy_store(src, dst)
    assert report.shredded == ["conv:b"] and report.sessions == 2
    assert not dst.exists("conv:b") and agent_binding(dst, "conv:b") == ""
    with pytest.raises(SessionShredded):
        ags.copy_store(src, stores.new("memory"), ids=["conv:b"])


@pytest.mark.parametrize(
    ("src_secret", "dst_secret"),
    [(None, None), (PASSPHRASE, None), (None, OTHER_PASSPHRASE), (PASSPHRASE, OTHER_PASSPHRASE)],
)
def test_adk_user_and_app_state_are_copied(
    stores: Stores, src_secret: str | None, dst_secret: str | None
) -> None:
    pytest.importorskip("google.adk")
    from google.adk.events.event import Event
    from google.adk.events.event_actions import EventActions

    from agentsession.integrations.adk import AgentSessionService

    src = stores.new("jsonl", passphrase=src_secret)
    dst = stores.new("sqlite", passphrase=dst_secret)

    async def write() -> None:
        service = AgentSessionService(src)
        session = await service.create_session(
            app_name="my_app",
            user_id="u1",
            session_id="s1",
            state={"app:k1": "v1", "user:pref": "dark", "mine": 1},
        )
        delta = EventActions(state_delta={"app:k2": "v2", "user:count": 2})
        await service.append_event(session, Event(invocation_id="i", author="user", actions=delta))

    async def read() -> dict[str, Any]:
        service = AgentSessionService(dst)
        got = await service.get_session(app_name="my_app", user_id="u1", session_id="s1")
        assert got is not None
        return dict(got.state)

    asyncio.run(write())
    ags.copy_store(src, dst)
    assert_same(src, dst)
    shared = {
        (k, key): v
        for k, key, v in dst._meta_list()
        if k.startswith("adk-") and k != "adk-snapshot"
    }
    assert shared  # app: and user: state
    for value in shared.values():  # sealed under the destination's store key when encrypted
        assert value.startswith(STORE_BOX_HEAD) == (dst_secret is not None)
    state = asyncio.run(read())
    assert state == {
        "app:k1": "v1",
        "app:k2": "v2",
        "user:pref": "dark",
        "user:count": 2,
        "mine": 1,
    }


# -- a copy killed with SIGKILL, then resumed -------------------------------------------------

_COPIER = """
import sys
import agentsession as ags

def progress(done, total, session_id):
    print(done, flush=True)

ags.copy_store(sys.argv[1], sys.argv[2], progress=progress)
print("finished", flush=True)
"""


@pytest.mark.parametrize(
    "destination", ["jsonl", "sqlite", pytest.param("postgres", marks=NO_POSTGRES)]
)
def test_a_copy_killed_at_a_random_point_resumes_to_an_exact_copy(
    stores: Stores, destination: str
) -> None:
    rng = random.Random(f"copy-kill-{destination}")
    src = stores.new("jsonl")
    fill(src)
    for n in range(8):
        src.create(
            f"bulk:{n}", [user(f"q{n}.{i}") if i % 2 else assistant("a") for i in range(1200)]
        )
        bind_agent(src, f"bulk:{n}", f"agent-{n}")
        set_active_session(src, f"room:{n}", f"bulk:{n}")
    total = len(src.list())
    resumed_work = 0
    for _ in range(3):
        url = stores.url(destination)
        stop_after = rng.randrange(0, total)
        proc = subprocess.Popen(
            [sys.executable, "-c", _COPIER, src.url, url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            for _ in range(stop_after):
                if not proc.stdout.readline():
                    break
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            with contextlib.suppress(Exception):
                proc.stdout.close()  # type: ignore[union-attr]
                proc.stderr.close()  # type: ignore[union-attr]
        dst = stores.open(url)
        report = ags.copy_store(src, dst, skip_existing=True)
        resumed_work += report.sessions + report.meta
        assert_same(src, dst)
    assert resumed_work > 0  # the kills did interrupt copies


def test_an_agentkit_directory_copies_its_sidecars_and_cli_pointer(stores: Stores) -> None:
    src = stores.open(str(stores.tmp_path / "agentkit"), dialect="agentkit")
    src.create("cli:default", [user("hi")])
    src.create("slack:C001", [user("hello")])
    bind_agent(src, "slack:C001", "coder")
    set_active_session(src, "slack:C001", "cli:default")
    set_cli_current(src, "slack:C001")
    assert not (stores.tmp_path / "agentkit" / ".meta" / "bind").exists()
    assert sorted(e[:2] for e in src._meta_list()) == [
        ("active", "slack:C001"),
        ("bind", "slack:C001"),
        ("cli", "current"),
    ]
    dst = stores.new("sqlite")
    report = ags.copy_store(src, dst)
    assert report.meta == 3
    assert agent_binding(dst, "slack:C001") == "coder"
    assert active_session(dst, "slack:C001") == "cli:default"
    assert cli_current(dst) == "slack:C001"


@pytest.mark.parametrize("destination", ["jsonl", "sqlite"])
def test_events_stored_before_ids_are_copied_and_given_ids(
    stores: Stores, destination: str
) -> None:
    """A log written before events had ids (read back with ``""``) copies whole: each such
    event gets an id in the copy, the rest is the same, and a resumed copy still recognises
    what it copied."""
    golden = Path(__file__).parent / "golden" / "events-v1.jsonl"
    url = stores.url("jsonl")
    Path(url).mkdir(mode=0o700)
    (Path(url) / "old.jsonl").write_bytes(golden.read_bytes())
    (Path(url) / "old.jsonl").chmod(0o600)
    src = stores.open(url)
    events = src.get("old").read()
    assert events and all(e.id == "" for e in events)
    dst = stores.new(destination)
    report = ags.copy_store(src, dst)
    assert report.sessions == 1 and report.events == len(events)
    copied = dst.get("old").read()
    assert all(e.id for e in copied)
    assert [msgspec.structs.replace(e, id="") for e in copied] == events
    again = ags.copy_store(src, dst, skip_existing=True)
    assert again.skipped == ["old"] and again.events == 0
