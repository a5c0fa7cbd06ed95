"""The static store: a store over one fixed session object, of any backend."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentsession as ags
from agentsession.backends.static import StaticStore
from agentsession.chat.identity import (
    active_session,
    agent_binding,
    bind_agent,
    set_active_session,
)
from agentsession.contract import Store


@pytest.fixture(params=["memory", "jsonl", "sqlite"])
def host(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ags.BaseStore]:
    url = {
        "memory": "memory:",
        "jsonl": str(tmp_path / "jsonl"),
        "sqlite": f"sqlite:///{tmp_path}/s.db",
    }[request.param]
    store = ags.open_store(url)
    yield store
    store.close()


@pytest.fixture
def static(host: ags.BaseStore) -> StaticStore:
    return StaticStore(host.get("preset"))


def hello(text: str = "hi") -> ags.Event:
    return ags.Event.new("user/message", ags.Message.user(text))


def test_get_of_the_empty_id_or_the_sessions_id_is_the_session_object(
    host: ags.BaseStore, static: StaticStore
) -> None:
    session = host.get("preset")
    assert static.get("") is session
    assert static.get("preset") is session
    assert static.session is session
    assert isinstance(static, ags.BaseStore) and isinstance(static, Store)


def test_any_other_id_is_not_found(static: StaticStore) -> None:
    with pytest.raises(ags.SessionNotFound, match="session not found: 'other'") as info:
        static.get("other")
    assert info.value.args and "preset" in str(info.value)
    with pytest.raises(ags.SessionNotFound):
        static.open("other")
    assert not static.exists("other")


def test_with_any_id_every_id_is_the_one_session(host: ags.BaseStore) -> None:
    session = host.get("preset")
    lenient = StaticStore(session, any_id=True)
    assert lenient.get("anything") is session
    assert lenient.get("slack:C1") is session
    lenient.get("x").append(hello())
    assert lenient.exists("whatever")
    assert lenient.open("y") is session


def test_with_any_id_creating_and_locking_any_id_are_the_sessions(host: ags.BaseStore) -> None:
    lenient = StaticStore(host.get("preset"), any_id=True)
    assert lenient.create("slack:C1", [hello()]) is lenient.session
    with pytest.raises(ags.DuplicateSession):
        lenient.create("other", [hello()])
    with lenient.lock("whatever", timeout=0):
        assert host.is_locked("preset") and lenient.is_locked("anything")
    assert [info.id for info in lenient.list()] == ["preset"]


def test_it_needs_a_session_object() -> None:
    with pytest.raises(ags.UsageError, match="session object"):
        StaticStore("preset")  # type: ignore[arg-type]


def test_exists_open_and_list_follow_the_sessions_events(
    host: ags.BaseStore, static: StaticStore
) -> None:
    assert not static.exists("preset")
    assert static.list() == []
    with pytest.raises(ags.SessionNotFound):
        static.open("preset")
    host.get("preset").append(hello())
    assert static.exists("preset")
    assert static.open("") is static.get("preset")
    (info,) = static.list()
    assert info.id == "preset" and info.last_seq == 1 and info.updated_at is not None
    assert static.list(prefix="other") == []
    assert [i.id for i in host.list()] == ["preset"]  # nothing else was created in the host


def test_create_writes_the_session_and_refuses_other_ids(static: StaticStore) -> None:
    with pytest.raises(ags.UsageError, match="holds only session 'preset'"):
        static.create("other", [hello()])
    session = static.create("preset", [hello("first")])
    assert session is static.session
    assert [e.seq for e in session.read()] == [1]
    with pytest.raises(ags.DuplicateSession):
        static.create("preset", [hello("again")])


def test_meta_lives_in_the_static_store_only(host: ags.BaseStore, static: StaticStore) -> None:
    assert static.meta_get("bind", "preset") is None
    bind_agent(static, "preset", "coder")
    assert agent_binding(static, "preset") == "coder"
    assert agent_binding(host, "preset") == ""  # not written to the session's store
    assert active_session(static, "slack:C1") == "slack:C1"  # an unknown key maps to itself
    set_active_session(static, "slack:C1", "preset")
    assert active_session(static, "slack:C1") == "preset"
    static.meta_set("cli", "current", "preset")
    assert static.meta_get("cli", "current") == "preset"
    static.meta_set("cli", "current", None)
    assert static.meta_get("cli", "current") is None


def test_the_turn_lock_is_the_lock_of_the_store_holding_the_session(
    host: ags.BaseStore, static: StaticStore
) -> None:
    with static.lock("preset", timeout=0):
        assert static.is_locked("preset") and host.is_locked("preset")
        assert static.is_locked("")
        with pytest.raises(ags.UsageError, match="not reentrant"):
            host.lock("preset", timeout=0)  # the same holder, through the other store
        failed: list[BaseException] = []

        def other_thread() -> None:
            try:
                host.lock("preset", timeout=0)
            except BaseException as exc:
                failed.append(exc)

        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        assert len(failed) == 1 and isinstance(failed[0], ags.LockTimeout)
    assert not host.is_locked("preset")


def test_recover_repairs_a_crashed_turn_of_the_session(static: StaticStore) -> None:
    session = static.get("")
    session.append(ags.Event.new("turn/start", ags.events.TurnStart()))
    session.append(hello())
    call = ags.ToolCall("c1", "read")
    session.append(ags.Event.new("assistant/message", ags.Message.assistant(tool_calls=[call])))
    (report,) = static.recover()
    assert report.session_id == "preset" and report.status == "repaired"
    assert ags.scan_incomplete(session.read()) is None
    assert static.recover(["preset"])[0].status == "clean"


def test_delete_deletes_the_session_in_its_store(
    host: ags.BaseStore, static: StaticStore
) -> None:
    session = static.get("preset")
    session.append(hello())
    bind_agent(static, "preset", "coder")
    assert static.delete("other") is False
    assert static.exists("preset")
    assert static.delete("preset") is True
    assert not static.exists("preset") and not host.exists("preset")
    assert agent_binding(static, "preset") == ""
    assert static.get("preset") is session  # still the store's session, starting over
    assert session.append(hello("again")) == 1


def test_recording_through_the_static_store_and_closing_it(
    host: ags.BaseStore, static: StaticStore
) -> None:
    with static.get("").turn(agent="coder") as turn:
        turn.user("hello")
        turn.assistant("hi")
    static.close()
    assert [m.text for m in host.get("preset").messages()] == ["hello", "hi"]
    with pytest.raises(ags.UsageError, match="closed"):
        static.get("")
    assert host.get("preset").latest_seq == 4  # the host store still works


def test_where_it_is_and_its_settings(host: ags.BaseStore, static: StaticStore) -> None:
    assert static.location.startswith("static:")
    assert static.url == host.url
    assert static.ttl == host.ttl and static.clock is host.clock
    with pytest.raises(ags.UsageError, match="unknown store URL scheme"):
        ags.open_store("static:preset")
