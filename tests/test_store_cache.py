"""The store's cache of open sessions: LRU size limit and idle eviction, without threads."""

from __future__ import annotations

import threading
from pathlib import Path

import agentsession as ags
from agentsession.testing.conformance import FakeClock


def test_cache_evicts_the_least_recently_used_session(tmp_path: Path) -> None:
    store = ags.open_store(tmp_path, max_cached_sessions=2)
    s1, s2 = store.get("s1"), store.get("s2")
    assert store.get("s1") is s1  # touching s1 makes s2 the oldest
    store.get("s3")
    assert store.get("s1") is s1
    assert store.get("s2") is not s2


def test_cache_evicts_sessions_idle_longer_than_the_idle_ttl(tmp_path: Path) -> None:
    import datetime as dt

    clock = FakeClock()
    store = ags.open_store(tmp_path, cache_idle_ttl=dt.timedelta(minutes=30), clock=clock)
    s1 = store.get("s1")
    clock.advance(minutes=29)
    assert store.get("s1") is s1
    clock.advance(minutes=31)
    fresh = store.get("s1")
    assert fresh is not s1


def test_evicted_session_reloads_its_history_from_disk(tmp_path: Path) -> None:
    store = ags.open_store(tmp_path, max_cached_sessions=2)
    store.get("s1").append(ags.Event.new("user/message", ags.Message.user("persisted")))
    store.get("s2")
    store.get("s3")
    assert [m.text for m in store.get("s1").messages()] == ["persisted"]


def test_a_store_starts_no_threads(tmp_path: Path) -> None:
    before = threading.active_count()
    import datetime as dt

    store = ags.open_store(tmp_path, cache_idle_ttl=dt.timedelta(seconds=1))
    for n in range(5):
        store.get(f"s{n}").append(ags.Event.new("test/n"))
    with store.lock("s1"):
        pass
    store.close()
    assert threading.active_count() == before
