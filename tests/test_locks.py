"""File turn locks report operating-system failures in the SessionError tree."""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

import pytest

import agentsession as ags
from agentsession.backends.jsonl import LOCK_DIR
from agentsession.locks import FileLocker


def test_a_lock_directory_blocked_by_a_file_is_a_storage_error(tmp_path: Path) -> None:
    (tmp_path / "locks").write_text("in the way")
    locker = FileLocker(str(tmp_path / "locks"))
    with pytest.raises(ags.StorageError) as caught:
        locker.acquire("conv:1", timeout=0)
    message = str(caught.value)
    assert message.startswith("cannot create the directory of the turn lock file ")
    assert locker.path_for("conv:1") in message and "'conv:1'" in message
    assert isinstance(caught.value.__cause__, OSError)
    assert not isinstance(caught.value, OSError)
    with pytest.raises(ags.StorageError, match=r"cannot open the turn lock file .*'conv:1'"):
        locker.is_locked("conv:1")


def test_a_lock_file_that_cannot_be_opened_is_a_storage_error(tmp_path: Path) -> None:
    locker = FileLocker(str(tmp_path))
    os.mkdir(locker.path_for("conv:2"))  # a directory where the lock file should be
    with pytest.raises(ags.StorageError, match=r"cannot open the turn lock file .*'conv:2'"):
        locker.acquire("conv:2", timeout=0)
    with pytest.raises(ags.StorageError, match=r"cannot open the turn lock file .*'conv:2'"):
        locker.is_locked("conv:2")


def test_a_missing_lock_file_is_simply_not_locked(tmp_path: Path) -> None:
    locker = FileLocker(str(tmp_path / "not-yet"))
    assert locker.is_locked("conv:3") is False
    assert not (tmp_path / "not-yet").exists()


def test_the_store_lock_and_recovery_raise_storage_errors(tmp_path: Path) -> None:
    store = ags.open_store(tmp_path / "store")
    try:
        store.get("conv:4").append_many(
            [
                ags.Event.new("turn/start", ags.events.TurnStart(), agent="a"),
                ags.Event.new("user/message", ags.Message.user("hi"), agent="a"),
            ]
        )
        (tmp_path / "store" / LOCK_DIR).write_text("in the way")
        with pytest.raises(ags.StorageError, match="'conv:4'"):
            store.lock("conv:4", timeout=0)
        # Recovery reports the session as damaged, with the lock's error, and goes on.
        [report] = store.recover(dry_run=True)
        assert report.status == "damaged" and "'conv:4'" in report.error
    finally:
        store.close()


def test_a_lock_directory_that_vanishes_is_a_storage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if another process removed the directory between makedirs and open.
    monkeypatch.setattr(os, "makedirs", lambda *args, **kwargs: None)
    locker = FileLocker(str(tmp_path / "gone"))
    with pytest.raises(ags.StorageError, match=r"cannot create the turn lock file .*'conv:5'"):
        locker.acquire("conv:5", timeout=0)


def test_a_lock_that_fails_is_a_storage_error_and_closes_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[int] = []
    real_close = os.close

    def failing_flock(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    def close(fd: int) -> None:
        closed.append(fd)
        real_close(fd)

    monkeypatch.setattr(fcntl, "flock", failing_flock)
    monkeypatch.setattr(os, "close", close)
    locker = FileLocker(str(tmp_path))
    with pytest.raises(ags.StorageError, match=r"cannot lock the turn lock file .*'conv:6'"):
        locker.acquire("conv:6", timeout=0)
    assert len(closed) == 1
    with pytest.raises(ags.StorageError, match=r"cannot test the turn lock file .*'conv:6'"):
        locker.is_locked("conv:6")
    assert len(closed) == 2


def test_coroutines_of_one_loop_take_the_lock_in_turn(tmp_path: Path) -> None:
    import asyncio

    store = ags.open_store(tmp_path / "store")
    order: list[str] = []

    async def worker(name: str) -> None:
        lock = await asyncio.to_thread(store.lock, "conv", 10)
        try:
            order.append(f"{name} in")
            await asyncio.sleep(0.01)  # the other coroutine runs, and must wait
            order.append(f"{name} out")
        finally:
            lock.release()

    async def main() -> None:
        await asyncio.gather(*(worker(f"w{n}") for n in range(4)))

    try:
        asyncio.run(main())
    finally:
        store.close()
    assert len(order) == 8
    for first, second in zip(order[::2], order[1::2], strict=True):
        assert first.endswith(" in") and second == first.replace(" in", " out")


def test_reentry_in_one_coroutine_is_refused_but_not_across_tasks(tmp_path: Path) -> None:
    import asyncio

    store = ags.open_store("memory:")

    async def reenter() -> str:
        lock = store.lock("conv", timeout=0)
        try:
            with pytest.raises(ags.UsageError, match="already held here"):
                store.lock("conv", timeout=0)
            return await asyncio.create_task(other_task())
        finally:
            lock.release()

    async def other_task() -> str:
        try:
            store.lock("conv", timeout=0)
        except ags.LockTimeout:
            return "waited"  # another task's lock: a timeout, not a re-entry error
        return "took it"

    assert asyncio.run(reenter()) == "waited"
    store.close()
