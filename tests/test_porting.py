"""Porting from the Go originals (agentkit, lango): the behaviours aligned with Go, and the
options that restore Go's meaning where agentsession's default differs (``docs/porting.md``)."""

from __future__ import annotations

import asyncio
import datetime as _dt
import logging
import shutil
from pathlib import Path

import pytest

import agentsession as ags
from agentsession._durations import parse_go_duration
from agentsession.backends.jsonl import JsonlStore
from agentsession.interop.agentkit_layout import detect_dialect

GOLDEN_DIR = Path(__file__).parent / "golden" / "agentkit_dir"


def user(text: str) -> ags.Event:
    return ags.Event.new("user/message", ags.Message.user(text))


# ---------------------------------------------------------------------------------------------
# 1. A directory agentkit writes opens in the agentkit dialect.


def test_an_agentkit_directory_opens_in_the_agentkit_dialect(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shutil.copytree(GOLDEN_DIR, tmp_path / "sessions")
    with caplog.at_level(logging.INFO, logger="agentsession.backends.jsonl"):
        store = ags.open_store(tmp_path / "sessions")
    try:
        assert isinstance(store, JsonlStore) and store.dialect == "agentkit"
        assert sum("agentkit dialect" in r.getMessage() for r in caplog.records) == 1
        ids = {info.id for info in store.list()}
        assert "slack_C001_u_U111_new_20260905-101112.123" in ids
        assert {"cli:default", "cli:20260905-101112.123", "slack_C001"} <= ids
        # An id holding "_" maps to Go's file, not to a second file beside it.
        before = sorted(p.name for p in (tmp_path / "sessions").glob("*.jsonl"))
        store.get("slack:C001").append(user("more"))
        assert sorted(p.name for p in (tmp_path / "sessions").glob("*.jsonl")) == before
        assert "more" in (tmp_path / "sessions" / "slack_C001.jsonl").read_text()
    finally:
        store.close()


def test_a_session_id_written_in_the_first_line_is_listed(tmp_path: Path) -> None:
    line = (
        '{"ID":"","Seq":1,"SessionID":"feishu:oc_x:t:om_y","AgentID":"","Type":"turn/start",'
        '"Data":{},"CreatedAt":"0001-01-01T00:00:00Z","UserID":""}\n'
    )
    (tmp_path / "feishu_oc_x_t_om_y.jsonl").write_text(line)
    with ags.open_store(tmp_path) as store:
        assert [info.id for info in store.list()] == ["feishu:oc_x:t:om_y"]


def test_new_mixed_and_native_directories_keep_the_default_dialect(tmp_path: Path) -> None:
    assert detect_dialect(tmp_path / "missing") == "agentsession"
    assert detect_dialect(tmp_path) == "agentsession"
    with ags.open_store(tmp_path / "native") as store:
        store.get("a_b").append(user("x"))
    assert detect_dialect(tmp_path / "native") == "agentsession"
    shutil.copy(GOLDEN_DIR / "cli_default.jsonl", tmp_path / "native" / "cli_default.jsonl")
    with ags.open_store(tmp_path / "native") as store:
        assert store.dialect == "agentsession"  # type: ignore[attr-defined]
    with ags.open_store(tmp_path / "forced", dialect="agentsession") as store:
        assert store.dialect == "agentsession"  # type: ignore[attr-defined]


def test_a_cli_pointer_or_a_sidecar_alone_marks_an_agentkit_directory(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "cli_current.jsonl").symlink_to("cli_default.jsonl")
    assert detect_dialect(tmp_path / "a") == "agentkit"
    (tmp_path / "b" / "slack_C001").mkdir(parents=True)
    (tmp_path / "b" / "slack_C001" / "current.json").write_text('{"sessionId":"x"}')
    assert detect_dialect(tmp_path / "b") == "agentkit"


# ---------------------------------------------------------------------------------------------
# 2. Options with Go's meanings.


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30m", _dt.timedelta(minutes=30)),
        ("1h30m", _dt.timedelta(hours=1, minutes=30)),
        ("45s", _dt.timedelta(seconds=45)),
        ("1.5s", _dt.timedelta(seconds=1.5)),
        ("300ms", _dt.timedelta(milliseconds=300)),
        ("2h45m30.5s", _dt.timedelta(hours=2, minutes=45, seconds=30.5)),
        ("-1m", _dt.timedelta(minutes=-1)),
        ("0", _dt.timedelta(0)),
    ],
)
def test_go_durations_parse(text: str, expected: _dt.timedelta) -> None:
    assert parse_go_duration(text) == expected


@pytest.mark.parametrize("text", ["nope", "30", "m", "1x", "1h 30m", "", "1.2.3s"])
def test_bad_go_durations_are_refused_clearly(text: str) -> None:
    with pytest.raises(ags.UsageError, match="duration"):
        parse_go_duration(text)


def test_cache_idle_ttl_takes_a_go_duration(tmp_path: Path) -> None:
    with ags.open_store(tmp_path, cache_idle_ttl="30m", ttl="24h") as store:
        assert store.cache_idle_ttl == _dt.timedelta(minutes=30)
        assert store.ttl == _dt.timedelta(hours=24)
    with ags.open_store("memory:", cache_idle_ttl="") as store:
        assert store.cache_idle_ttl is None  # Go's empty setting: disabled
    with pytest.raises(ags.UsageError, match="cache_idle_ttl: invalid duration 'nope'"):
        ags.open_store("memory:", cache_idle_ttl="nope")
    with pytest.raises(ags.UsageError, match="positive"):
        ags.open_store("memory:", cache_idle_ttl="0s")
    with pytest.raises(ags.UsageError, match="cache_idle_ttl must be"):
        ags.open_store("memory:", cache_idle_ttl=30)


def test_max_cached_sessions_none_keeps_every_session_and_zero_follows_the_dialect(
    tmp_path: Path,
) -> None:
    with ags.open_store("memory:", max_cached_sessions=None) as store:
        sessions = [store.get(f"s{i}") for i in range(300)]
        assert all(store.get(f"s{i}") is s for i, s in enumerate(sessions))
    with ags.open_store("memory:", max_cached_sessions=0) as store:
        assert store.get("a") is not store.get("a")  # agentsession's 0: no cache
    with ags.open_store(tmp_path, dialect="agentkit", max_cached_sessions=0) as store:
        assert store.max_cached_sessions is None  # agentkit's 0: no limit
        assert store.get("a") is store.get("a")
    with pytest.raises(ags.UsageError, match="max_cached_sessions"):
        ags.open_store("memory:", max_cached_sessions=-1)


def test_max_loaded_events_zero_loads_everything(tmp_path: Path) -> None:
    with ags.open_store(tmp_path, max_loaded_events=0) as store:
        assert store.max_loaded_events is None
        session = store.get("s")
        for i in range(10):
            session.append(user(f"m{i}"))
    with ags.open_store(tmp_path, max_loaded_events=0) as store:
        assert len(store.get("s").messages()) == 10
    with pytest.raises(ags.UsageError, match="max_loaded_events"):
        ags.open_store("memory:", max_loaded_events=-1)


# ---------------------------------------------------------------------------------------------
# 3. The CLI pointer and the commands.


def test_cli_current_can_create_the_default_link_as_agentkit_does(tmp_path: Path) -> None:
    from agentsession.chat import cli_current

    with ags.open_store(tmp_path, dialect="agentkit") as store:
        assert cli_current(store) == "cli:default"
        assert not (tmp_path / "cli_current.jsonl").is_symlink()  # reading never writes
        assert cli_current(store, create=True) == "cli:default"
        link = tmp_path / "cli_current.jsonl"
        assert link.is_symlink() and str(link.readlink()) == "cli_default.jsonl"
    with ags.open_store(tmp_path) as store:
        assert store.dialect == "agentkit"  # type: ignore[attr-defined]  # the link says so


def test_session_and_help_commands_read_as_agentkits() -> None:
    from agentsession import chat
    from agentsession.chat.routing import new_cli_session_id

    with ags.open_store("memory:") as store:
        registry = chat.default_commands(store)
        with chat.with_conversation("cli:default"):
            lines = (registry.dispatch("/session") or "").splitlines()
        assert lines[:4] == [
            "session id: cli:default",
            "path: (memory)",
            "events: 0",
            "messages: 0",
        ]
        assert lines[4:] == ["turns: 0"]
        text = registry.dispatch("/help") or ""
        assert "/help: list the commands" in text.splitlines()
        assert "/session (/sess): " in text
        with pytest.raises(ags.UsageError, match="usage: /help"):
            registry.dispatch("/help me")
    suffix = new_cli_session_id().rsplit("-", 1)[1]
    assert len(suffix) == 16


# ---------------------------------------------------------------------------------------------
# 4. The history filtered by the envelope's agent, as agentkit's DeriveMessages(ctx).


def _two_agents(store: ags.BaseStore) -> ags.BaseSession:
    session = store.get("s")
    session.append(ags.Event.new("user/message", ags.Message.user("to coder"), agent="coder"))
    session.append(
        ags.Event.new("user/message", ags.Message.user("to meetingbot"), agent="meetingbot")
    )
    session.append(ags.Event.new("user/message", ags.Message.user("to all")))
    return session


def test_messages_from_the_envelope_filter_by_its_agent() -> None:
    from agentsession import chat
    from agentsession.context import FROM_ENVELOPE

    with ags.open_store("memory:") as store:
        session = _two_agents(store)
        assert len(session.messages()) == 3  # the default: every agent
        with chat.apply_envelope(chat.TurnEnvelope(agent_id="meetingbot")):
            assert len(session.messages()) == 3
            texts = [m.text for m in session.messages(agent=FROM_ENVELOPE)]
            assert texts == ["to meetingbot", "to all"]
            assert len(session.entries(FROM_ENVELOPE)) == 2
        assert len(session.messages(agent=FROM_ENVELOPE)) == 3  # no envelope: no filter


def test_async_messages_from_the_envelope(tmp_path: Path) -> None:
    from agentsession import chat
    from agentsession.aio import open_async_store
    from agentsession.context import FROM_ENVELOPE

    async def main() -> list[str]:
        with ags.open_store(tmp_path) as sync:
            _two_agents(sync)
        async with open_async_store(tmp_path) as store:
            session = await store.get("s")
            with chat.apply_envelope(chat.TurnEnvelope(agent_id="coder")):
                return [m.text for m in await session.messages(agent=FROM_ENVELOPE)]

    assert asyncio.run(main()) == ["to coder", "to all"]


# ---------------------------------------------------------------------------------------------
# 5. lango's child sessions.


def test_merge_of_an_empty_summary_merges_the_whole_history() -> None:
    with ags.open_store("memory:") as store:
        parent = store.get("parent")
        parent.append(user("plan the trip"))
        child = parent.fork("researcher")
        child.append(ags.Event.new("assistant/message", ags.Message.assistant("found FR")))
        child.merge("")
        assert [m.text for m in parent.messages()] == ["plan the trip", "found FR"]
        [info] = store.children_of("parent")
        assert info.state == "merged" and info.merged_at is not None
        assert info.merged_at == store.get(child.id).read()[-1].time


# ---------------------------------------------------------------------------------------------
# 7. lango's CompactMessages.


def _turns(session: ags.BaseSession, n: int) -> None:
    for i in range(n):
        with session.turn() as turn:
            turn.user(f"q{i}")
            with turn.step() as step:
                step.assistant(f"a{i}")


def test_compact_up_to_a_message_can_write_langos_system_summary() -> None:
    with ags.open_store("memory:") as store:
        session = store.get("s")
        _turns(session, 3)
        assert session.compact("they talked", up_to_message=3, summary_role="system")
        first = session.messages()[0]
        assert (first.role, first.text) == ("system", "[Compacted Summary]\nthey talked")
        assert [m.text for m in session.messages()[1:]] == ["q2", "a2"]
        with pytest.raises(ags.UsageError, match="summary_role"):
            session.compact("x", keep_turns=1, summary_role="tool")  # type: ignore[arg-type]


def test_compact_inside_the_first_turn_says_it_did_nothing() -> None:
    with ags.open_store("memory:") as store:
        session = store.get("s")
        _turns(session, 2)
        assert session.compact("nothing", up_to_message=0) is None  # lango: deletes message 0
        assert len(session.messages()) == 4


# ---------------------------------------------------------------------------------------------
# 6. lango's Create and TTL.


@pytest.mark.parametrize("url", ["memory:", "jsonl", "sqlite"])
def test_create_without_events_writes_the_record(url: str, tmp_path: Path) -> None:
    target = {"memory:": "memory:", "jsonl": str(tmp_path), "sqlite": f"sqlite:///{tmp_path}/s.db"}
    with ags.open_store(target[url]) as store:
        session = store.create("telegram:42", channel_type="telegram", channel_id="42", model="m")
        info = session.info()
        assert (info.channel_type, info.channel_id, info.model) == ("telegram", "42", "m")
        assert info.updated_at is not None and info.created_at is None
        assert session.update(agent_id="bot").agent_id == "bot"
        with pytest.raises(ags.DuplicateSession):
            store.create("telegram:42")
        session.append(user("hi"))
        assert [i.id for i in store.list()] == ["telegram:42"]
        with pytest.raises(ags.DuplicateSession):
            store.create("telegram:42")
        with pytest.raises(ags.SessionNotFound):
            store.get("never").update(model="x")


class _Clock:
    def __init__(self) -> None:
        self.now = _dt.datetime(2026, 1, 1, tzinfo=_dt.timezone.utc)

    def __call__(self) -> _dt.datetime:
        return self.now


def test_revive_expired_appends_renew_an_expired_session() -> None:
    clock = _Clock()
    with ags.open_store("memory:", ttl="1h", clock=clock) as strict:
        strict.get("s").append(user("one"))
        clock.now += _dt.timedelta(hours=2)
        with pytest.raises(ags.SessionExpired):
            strict.get("s")
    clock = _Clock()
    with ags.open_store("memory:", ttl="1h", clock=clock, revive_expired=True) as store:
        store.get("s").append(user("one"))
        clock.now += _dt.timedelta(hours=2)
        assert store.expired() == ["s"]
        session = store.get("s")
        session.append(user("two"))
        assert store.expired() == []
        assert [m.text for m in session.messages()] == ["one", "two"]


def test_renew_on_update_makes_update_renew_the_ttl_as_lango_does(tmp_path: Path) -> None:
    from agentsession.core import RENEWED_KIND

    clock = _Clock()
    with ags.open_store(tmp_path, ttl="1h", clock=clock) as store:
        assert store.renew_on_update is False  # the default: expiry counts from appends
        store.get("s").append(user("one"))
        clock.now += _dt.timedelta(minutes=50)
        store.get("s").update(model="m")
        clock.now += _dt.timedelta(minutes=20)
        assert store.expired() == ["s"]
    clock = _Clock()
    with ags.open_store(tmp_path / "renew", ttl="1h", clock=clock, renew_on_update=True) as store:
        assert store.renew_on_update is True
        session = store.get("s")
        session.append(user("one"))
        clock.now += _dt.timedelta(minutes=50)
        record = session.update(channel_type="slack")
        assert record.updated_at == clock.now
        assert store._meta_get(RENEWED_KIND, "s") is not None
        clock.now += _dt.timedelta(minutes=20)
        assert store.expired() == []
        assert [m.text for m in store.get("s").messages()] == ["one"]
        assert store.delete("s")
        assert store._meta_get(RENEWED_KIND, "s") is None  # deleted with its session


def test_a_renewal_never_moves_back_and_a_malformed_one_renews_nothing() -> None:
    from agentsession.core import RENEWED_KIND, renewal_text, renewal_time

    clock = _Clock()
    with ags.open_store("memory:", ttl="1h", clock=clock, renew_on_update=True) as store:
        session = store.get("s")
        session.append(user("one"))
        clock.now += _dt.timedelta(minutes=50)
        session.update(model="a")
        stored = store._meta_get(RENEWED_KIND, "s")
        assert renewal_time(stored) == clock.now
        clock.now -= _dt.timedelta(minutes=30)  # a writer whose clock is behind
        session.update(model="b")
        assert store._meta_get(RENEWED_KIND, "s") == stored
        store._meta_set(RENEWED_KIND, "s", "not a time")
        clock.now += _dt.timedelta(minutes=60)
        assert store.expired() == ["s"]
        with pytest.raises(ags.SessionExpired):
            store.get("s")
    assert renewal_time(None) is None
    assert renewal_time("2026-01-01T00:00:00") is None  # no zone: not a renewal
    when = _dt.datetime(2026, 1, 1, 12, tzinfo=_dt.timezone(_dt.timedelta(hours=2)))
    assert renewal_time(renewal_text(when)) == when
    assert renewal_text(when).endswith("+00:00")


# ---------------------------------------------------------------------------------------------
# 8. Imports remember what they wrote.


def test_an_import_again_with_another_id_map_makes_no_second_copy(tmp_path: Path) -> None:
    from agentsession.interop import importers as im

    shutil.copytree(GOLDEN_DIR, tmp_path / "go")
    with ags.open_store(tmp_path / "store") as store:
        mapped = im.scan_agentkit_dir(tmp_path / "go", id_map={"slack_C002": "slack:C002:t:1.0"})
        first = im.import_source(mapped, store)
        assert first.imported == len(mapped.sessions)
        plain = im.scan_agentkit_dir(tmp_path / "go")
        again = im.import_source(plain, store)
        assert again.imported == 0
        assert any("imported before as 'slack:C002:t:1.0'" in note for note in again.notes)
        ids = [info.id for info in store.list()]
        assert "slack:C002:t:1.0" in ids and "slack:C002" not in ids
        assert len(ids) == len(mapped.sessions)


def test_an_encrypted_store_keeps_its_own_dialect(tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    (tmp_path / "sessions").mkdir()
    (tmp_path / "sessions" / "cli_current.jsonl").symlink_to("cli_default.jsonl")
    assert detect_dialect(tmp_path / "sessions") == "agentkit"
    with ags.open_store(tmp_path / "sessions", passphrase="correct horse") as store:
        assert store.dialect == "agentsession"  # type: ignore[attr-defined]
