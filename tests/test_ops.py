"""The I/O-free core's machinery: the Backoff schedule and the two drivers running one plan."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import agentsession as ags
from agentsession import Event
from agentsession.backoff import Backoff
from agentsession.errors import OutcomeUnknown, StorageError
from agentsession.events import Event as _Event
from agentsession.ops import Pause, Plan, Read, Refresh, adrive, drive


def test_backoff_counts_tries_and_jitters_only_after_four() -> None:
    backoff = Backoff(tries=10)
    pauses = []
    while backoff.next_try():
        pauses.append(backoff.contention_pause())
    assert len(pauses) == 10
    assert pauses[:4] == [0.0, 0.0, 0.0, 0.0]
    for attempt, pause in enumerate(pauses[4:], start=4):
        assert 0 <= pause <= min(0.05, 0.0005 * 2 ** (attempt - 4))
    assert not backoff.next_try()  # spent


def test_backoff_reconnect_pauses_double_to_one_second_within_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [100.0]
    monkeypatch.setattr("agentsession.backoff.time.monotonic", lambda: clock[0])
    backoff = Backoff(tries=1, reconnect_timeout=3.0)
    seen = []
    while (pause := backoff.reconnect_pause()) is not None:
        seen.append(pause)
        clock[0] += pause
    assert seen[:4] == [0.02, 0.04, 0.08, 0.16]
    assert max(seen) <= 1.0
    assert sum(seen) == pytest.approx(3.0)  # the last pause is cut to the deadline
    assert Backoff(tries=1).reconnect_pause() is None  # no timeout: give up at once


class _Log:
    """A scripted storage: Refresh answers from a list; Read raises what it is told to."""

    def __init__(self, refreshes: list[list[Event]], failure: BaseException | None = None):
        self.refreshes = refreshes
        self.failure = failure
        self.calls: list[str] = []

    def _storage_refresh(self) -> list[Event]:
        self.calls.append("refresh")
        return self.refreshes.pop(0)

    def _storage_read(self, after: int, limit: int | None) -> list[Event]:
        self.calls.append(f"read {after} {limit}")
        if self.failure is not None:
            raise self.failure
        return []


def _plan() -> Plan[tuple[int, str]]:
    first = yield Refresh()
    second = yield Refresh()
    yield Pause(0)
    try:
        yield Read(5, 2)
    except OutcomeUnknown as exc:
        return len(first) + len(second), f"rode out {exc}"
    return len(first) + len(second), "read"


def test_both_drivers_run_one_plan_alike() -> None:
    event = _Event.new("test/n", {"i": 1})
    for failure, outcome in ((None, "read"), (OutcomeUnknown("lost"), "rode out lost")):
        sync_log = _Log([[event], [event, event]], failure)
        async_log = _Log([[event], [event, event]], failure)
        assert drive(_plan(), sync_log) == (3, outcome)  # type: ignore[arg-type]
        assert asyncio.run(adrive(_plan(), async_log, None)) == (3, outcome)  # type: ignore[arg-type]
        assert sync_log.calls == async_log.calls == ["refresh", "refresh", "read 5 2"]


def test_an_exception_the_plan_does_not_catch_reaches_the_caller() -> None:
    log = _Log([[], []], StorageError("disk gone"))
    with pytest.raises(StorageError, match="disk gone"):
        drive(_plan(), log)  # type: ignore[arg-type]
    log = _Log([[], []], StorageError("disk gone"))
    with pytest.raises(StorageError, match="disk gone"):
        asyncio.run(adrive(_plan(), log, None))  # type: ignore[arg-type]


def test_a_session_plan_runs_on_the_async_driver_as_on_the_sync_one() -> None:
    """The append and read plans of a real session, driven on an event loop (the sync calls
    made where the log has no coroutine), leave the log the sync driver would."""
    stores = [ags.open_store("memory:"), ags.open_store("memory:")]
    events = [Event.new("test/n", {"i": i}, id=f"e{i}") for i in range(5)]
    sync_session = stores[0].get("s")
    seqs_sync = [sync_session.append(e) for e in events[:2]]
    seqs_sync += sync_session.append_many(events[2:])
    seqs_sync.append(sync_session.append(events[0]))  # a retry: stored once

    async_session = stores[1].get("s")

    async def run() -> list[Any]:
        seqs = []
        for event in events[:2]:
            prepared = async_session._prepare(event, None)
            seqs.append(await adrive(async_session._append_one_plan(prepared), async_session, None))
        batch = async_session._prepare_batch(events[2:], None)
        seqs += await adrive(async_session._append_batch_plan(batch, None), async_session, None)
        again = async_session._prepare(events[0], None)
        seqs.append(await adrive(async_session._append_one_plan(again), async_session, None))
        read = await adrive(async_session._read_plan(0, None), async_session, None)
        return [seqs, read]

    seqs_async, read = asyncio.run(run())
    assert seqs_async == seqs_sync == [1, 2, 3, 4, 5, 1]
    assert [e.id for e in read] == [e.id for e in sync_session.read()]
