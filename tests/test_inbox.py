"""The inbox (``agentsession.inbox``): ``store.deliver`` without the lock, ``session.pending``
under it, ``Delivery.start_turn``; the enqueue, reject, interrupt, merge and rollback
policies; a worker killed mid-turn;
three delivering processes and two workers killed and restarted at random; the async API.

The PostgreSQL cases need ``AGENTSESSION_TEST_POSTGRES_DSN`` and are skipped without it."""

from __future__ import annotations

import asyncio
import itertools
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentsession as ags
from agentsession import Message
from agentsession.aio import open_async_store
from agentsession.aio._session import LeaseHolder
from agentsession.errors import SessionBusy, TurnInterrupted, UsageError
from agentsession.events import (
    EVENT_TYPES,
    SESSION_DELIVERY,
    SESSION_RECOVERY,
    SESSION_ROLLBACK,
    TURN_END,
    TURN_START,
    SessionDelivery,
    SessionRollback,
    TurnEnd,
)
from agentsession.inbox import META_DELIVERY
from agentsession.messages import ToolCall

from .store_urls import store_url


@pytest.fixture(params=["memory", "jsonl", "sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store URL of every backend."""
    yield from store_url(request.param, tmp_path)


@pytest.fixture(params=["jsonl", "sqlite", "postgres"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store URL shared by processes."""
    yield from store_url(request.param, tmp_path)


def roles_and_texts(session: ags.BaseSession) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in session.messages()]


def test_deliver_pending_and_start_turn(url: str) -> None:
    with ags.open_store(url) as store:
        first = store.deliver("c", "hello", id="evt-1", user="U1", meta={"channel": "C1"})
        assert (first.id, first.seq, first.policy, first.user) == ("evt-1", 1, "enqueue", "U1")
        assert first.message == Message.user("hello") and first.meta == {"channel": "C1"}
        again = store.deliver("c", "hello, retried by the platform", id="evt-1")
        assert (again.seq, again.message.text) == (first.seq, "hello")  # the first one
        store.deliver("c", Message.user("second"), id="evt-2")
        session = store.get("c")
        assert session.messages() == []  # deliveries are not history
        assert [e.type for e in session.read()] == [SESSION_DELIVERY, SESSION_DELIVERY]
        with store.lock("c", timeout=5) as lease:
            seen = []
            for delivery in session.pending(lease):
                seen.append(delivery.id)
                with delivery.start_turn(agent="bot") as turn:
                    turn.assistant(f"re: {delivery.message.text}")
            assert seen == ["evt-1", "evt-2"]
            assert list(session.pending(lease)) == []  # exactly once
        assert roles_and_texts(session) == [
            ("user", "hello"),
            ("assistant", "re: hello"),
            ("user", "second"),
            ("assistant", "re: second"),
        ]
        starts = [e for e in session.read() if e.type == TURN_START]
        assert [s.meta[META_DELIVERY] for s in starts] == ["evt-1", "evt-2"]
        users = [e for e in session.read() if e.type == "user/message"]
        assert [u.user for u in users] == ["U1", ""]  # the delivery's sender


def test_enqueue_while_a_turn_runs_is_processed_after_it_and_reject_refuses(url: str) -> None:
    with ags.open_store(url) as store:
        store.deliver("c", "one")
        session = store.get("c")
        with store.lock("c", timeout=5) as lease:
            order = []
            for delivery in session.pending(lease):
                order.append(delivery.message.text)
                with delivery.start_turn() as turn:
                    if delivery.message.text == "one":
                        before = session.latest_seq
                        with pytest.raises(SessionBusy, match="busy"):
                            store.deliver("c", "refused", policy="reject")
                        assert session.latest_seq == before  # nothing recorded
                        store.deliver("c", "two")  # enqueue: after this turn
                    turn.assistant(f"answer {delivery.message.text}")
            assert order == ["one", "two"]
        assert roles_and_texts(session) == [
            ("user", "one"),
            ("assistant", "answer one"),
            ("user", "two"),
            ("assistant", "answer two"),
        ]
        # No turn runs now: reject records it; a repeat of its id returns it even mid-turn.
        accepted = store.deliver("c", "three", id="r3", policy="reject")
        with session.turn() as turn:
            assert store.deliver("c", "three", id="r3", policy="reject").seq == accepted.seq
            turn.user("direct")
            turn.assistant("ok")
        texts = [e.decode(SessionDelivery).message.text for e in session.read()
                 if e.type == SESSION_DELIVERY]
        assert texts == ["one", "two", "three"]


def test_policies_are_validated() -> None:
    with pytest.raises(UsageError, match="unknown delivery policy"):
        ags.open_store("memory:", default_delivery_policy="later")
    store = ags.open_store("memory:", default_delivery_policy="reject")
    assert store.default_delivery_policy == "reject"
    assert store.deliver("c", "hi").policy == "reject"
    for policy in ("interrupt", "merge", "rollback"):
        assert store.deliver("c", "hi", policy=policy).policy == policy
    with pytest.raises(UsageError, match="unknown"):
        store.deliver("c", "hi", policy="whenever")
    with pytest.raises(UsageError, match="user message"):
        store.deliver("c", Message.assistant("hi"))
    assert "session/delivery" in EVENT_TYPES


def test_pending_needs_this_sessions_held_lease() -> None:
    store = ags.open_store("memory:")
    store.deliver("c", "hi")
    with store.lock("other") as other, pytest.raises(UsageError, match="not 'c'"):
        next(store.get("c").pending(other))
    lease = store.lock("c")
    lease.release()
    with pytest.raises(UsageError, match="not held"):
        next(store.get("c").pending(lease))


def test_a_delivery_arriving_while_draining_is_yielded_in_order() -> None:
    store = ags.open_store("memory:")
    for i in range(3):
        store.deliver("c", f"m{i}")
    session = store.get("c")
    seen = []
    with store.lock("c") as lease:
        for delivery in session.pending(lease):
            seen.append(delivery.message.text)
            if delivery.message.text == "m0":
                store.deliver("c", "m3")
            with delivery.start_turn() as turn:
                turn.assistant("ok")
    assert seen == ["m0", "m1", "m2", "m3"]


def test_deliveries_merged_while_draining_are_not_yielded_again() -> None:
    """The drain learns of deliveries written during a turn when the ones it knew are done;
    a merge delivery the turn took in by then is not yielded, nor is an unused delivery."""
    store = ags.open_store("memory:")
    for i in range(3):
        store.deliver("c", f"m{i}", id=f"d{i}")
    session = store.get("c")
    seen = []
    with store.lock("c") as lease:
        for delivery in session.pending(lease):
            seen.append(delivery.id)
            if delivery.id == "d1":
                continue  # not processed: passed over, not yielded again
            with delivery.start_turn() as turn:
                if delivery.id == "d0":
                    store.deliver("c", "joined", id="m", policy="merge")
                    store.deliver("c", "later", id="d3")
                with turn.step() as step:
                    step.assistant(f"re {delivery.id} + {len(turn.new_messages())}")
    assert seen == ["d0", "d1", "d2", "d3"]
    assert roles_and_texts(session) == [
        ("user", "m0"),
        ("user", "joined"),
        ("assistant", "re d0 + 1"),
        ("user", "m2"),
        ("assistant", "re d2 + 0"),
        ("user", "later"),
        ("assistant", "re d3 + 0"),
    ]


_CRASHER = textwrap.dedent(
    """
    import sys, time
    import agentsession as ags
    store = ags.open_store(sys.argv[1])
    session = store.get("c")
    with store.lock("c", timeout=10, ttl=0.5) as lease:
        for delivery in session.pending(lease):
            turn = delivery.start_turn(agent="bot")
            turn.__enter__()
            print("started", delivery.id, flush=True)
            time.sleep(60)
    """
)


def test_a_worker_killed_mid_turn_leaves_the_delivery_claimed(shared_url: str) -> None:
    with ags.open_store(shared_url) as store:
        store.deliver("c", "crash on me", id="d1")
        store.deliver("c", "after it", id="d2")
        worker = subprocess.Popen(
            [sys.executable, "-c", _CRASHER, shared_url], stdout=subprocess.PIPE, text=True
        )
        try:
            assert worker.stdout is not None
            assert worker.stdout.readline().split() == ["started", "d1"]
        finally:
            worker.kill()
            worker.wait(30)
        session = store.get("c")
        with store.lock("c", timeout=10, steal_after=1) as lease:
            assert [d.id for d in session.pending(lease)] == ["d2"]  # d1 is claimed
        log = session.read()
        assert [e.type for e in log if e.type in (TURN_END, SESSION_RECOVERY)] == [
            TURN_END,
            SESSION_RECOVERY,
        ]  # pending closed the crashed turn
        with store.lock("c", timeout=10, steal_after=1) as lease:
            retried = list(session.pending(lease, retry_unfinished=True))
            assert [d.id for d in retried] == ["d1", "d2"]
            for delivery in retried:
                with delivery.start_turn(agent="bot") as turn:
                    turn.assistant(f"done {delivery.id}")
            assert list(session.pending(lease, retry_unfinished=True)) == []
        assert roles_and_texts(session) == [
            ("user", "crash on me"),  # recorded once, by the crashed turn
            ("assistant", "done d1"),
            ("user", "after it"),
            ("assistant", "done d2"),
        ]


_DELIVERER = textwrap.dedent(
    """
    import random, sys, time
    import agentsession as ags
    url, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rng = random.Random(name)
    store = ags.open_store(url)
    sent = []
    for i in range(count):
        if sent and i % 10 == 9:
            again = rng.choice(sent)   # the platform retries an event id
            store.deliver("c", f"dup of {again}", id=again)
        else:
            key = f"{name}-{i}"
            store.deliver("c", f"{name} {i}", id=key, user=name)
            sent.append(key)
        time.sleep(rng.uniform(0, 0.006))
    store.close()
    """
)

_DRAINER = textwrap.dedent(
    """
    import os, sys, time
    import agentsession as ags
    from agentsession.errors import LeaseLost, LockTimeout
    url, stop = sys.argv[1], sys.argv[2]
    store = ags.open_store(url)
    session = store.get("c")
    while True:
        done = 0
        try:
            with store.lock("c", timeout=0.5, ttl=0.6, steal_after=1.5) as lease:
                for delivery in session.pending(lease, retry_unfinished=True):
                    with delivery.start_turn(agent="bot") as turn:
                        time.sleep(0.002)
                        turn.assistant(f"done {delivery.id}")
                    done += 1
        except (LeaseLost, LockTimeout):
            continue
        if not done:
            if os.path.exists(stop):
                break
            time.sleep(0.02)
    store.close()
    """
)


@pytest.mark.slow
def test_three_deliverers_and_two_workers_killed_at_random(
    shared_url: str, tmp_path: Path
) -> None:
    """1,002 deliveries (every tenth a repeat of an earlier id) from three processes, drained by
    two workers contending for the lease while the test kills one with SIGKILL now and then
    and restarts it: every delivery is completed exactly once, in delivery order (one whose
    turn was killed is retried and completed once), repeats are ignored, and the history
    holds each message once."""
    with ags.open_store(shared_url):
        pass  # create the store (schema, directory) before the processes race to
    stop = tmp_path / "stop"
    rng = random.Random(11)

    def drainer() -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-c", _DRAINER, shared_url, str(stop)])

    deliverers = [
        subprocess.Popen([sys.executable, "-c", _DELIVERER, shared_url, f"p{i}", "334"])
        for i in range(3)
    ]
    workers = [drainer(), drainer()]
    kills = 0
    try:
        deadline = time.monotonic() + 120
        time.sleep(0.5)
        while any(p.poll() is None for p in deliverers) and time.monotonic() < deadline:
            time.sleep(rng.uniform(0.1, 0.3))
            index = rng.randrange(len(workers))
            workers[index].send_signal(signal.SIGKILL)
            workers[index].wait(30)
            kills += 1
            workers[index] = drainer()
        assert [p.wait(60) for p in deliverers] == [0, 0, 0]
        stop.touch()
        assert [w.wait(60) for w in workers] == [0, 0]
    finally:
        for p in [*deliverers, *workers]:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert kills >= 2
    with ags.open_store(shared_url) as store:
        log = store.get("c").read()
        deliveries = [e for e in log if e.type == SESSION_DELIVERY]
        ids = [e.id for e in deliveries]
        assert len(ids) == len(set(ids)) == 903  # the 99 repeats (3 x 33) stored nothing
        assert not any("dup of" in e.decode(SessionDelivery).message.text for e in deliveries)
        seq_of = {e.id: e.seq for e in deliveries}
        starts = {e.meta["turn_id"]: e.meta[META_DELIVERY] for e in log if e.type == TURN_START}
        ended = [e.meta["turn_id"] for e in log if e.type == TURN_END and "turn_id" in e.meta]
        completed = [starts[t] for t in ended]
        assert sorted(completed) == sorted(ids)  # completed exactly once
        assert [seq_of[d] for d in completed] == sorted(seq_of[d] for d in completed)
        assert set(starts.values()) == set(ids)  # processed at least once
        messages = store.get("c").messages()
        users = [m.text for m in messages if m.role == "user"]
        by_id = {e.id: e.decode(SessionDelivery).message.text for e in deliveries}
        assert users == [by_id[d] for d in completed]  # each once, in delivery order
        roles = [m.role for m in messages]
        assert roles[0] == "user" and roles[-1] == "assistant"
        assert all(not (a == b == "user") for a, b in itertools.pairwise(roles))


def test_the_async_inbox(tmp_path: Path) -> None:
    async def main() -> None:
        async with open_async_store(tmp_path / "s") as store:
            first = await store.deliver("c", "hello", id="e1")
            again = await store.deliver("c", "hello again", id="e1")
            assert (again.seq, again.message.text) == (first.seq, "hello")
            await store.deliver("c", "second")
            session = await store.get("c")
            async with store.lock("c", timeout=5) as lock:
                held: LeaseHolder = lock
                seen = []
                async for delivery in session.pending(held):
                    seen.append(delivery.message.text)
                    async with delivery.start_turn(agent="bot") as turn:
                        with pytest.raises(SessionBusy):
                            await store.deliver("c", "no", policy="reject")
                        await turn.assistant(f"re: {delivery.message.text}")
                assert seen == ["hello", "second"]
                assert [d async for d in session.pending(lock.lease)] == []
            texts = [(m.role, m.text) for m in await session.messages()]
            assert texts == [
                ("user", "hello"),
                ("assistant", "re: hello"),
                ("user", "second"),
                ("assistant", "re: second"),
            ]

    asyncio.run(main())


def test_an_encrypted_store_seals_deliveries(tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    with ags.open_store(tmp_path / "s", passphrase="secret words") as store:
        store.deliver("c", "the secret plan")
        with store.lock("c") as lease:
            for delivery in store.get("c").pending(lease):
                assert delivery.message.text == "the secret plan"
    raw = b"".join(p.read_bytes() for p in (tmp_path / "s").rglob("*") if p.is_file())
    assert b"the secret plan" not in raw


def _drain_with_a_second_message(
    store: ags.BaseStore, policy: str
) -> tuple[ags.BaseSession, list[str], list[bool]]:
    """Deliver "first"; its turn makes a tool call left unanswered in step 0, during which
    "second" is delivered with ``policy``; step 1 answers. Returns the session, the
    deliveries' texts in the order turns started for them, and ``turn.interrupted`` as read
    after step 0 of each turn and after TurnInterrupted."""
    store.deliver("c", "first", id="d1")
    session = store.get("c")
    started: list[str] = []
    seen: list[bool] = []
    caught: list[tuple[str, str, str, str]] = []
    with store.lock("c", timeout=5) as lease:
        for delivery in session.pending(lease):
            text = delivery.message.text
            started.append(text)
            try:
                with delivery.start_turn(agent="bot") as turn:
                    with turn.step() as step:
                        assert session.messages()[-1].text == text  # derived mid-turn
                        step.assistant(f"calling for {text}", tool_calls=[ToolCall("c1", "ls")])
                        if text == "first":
                            store.deliver("c", "second", id="d2", policy=policy)
                    seen.append(turn.interrupted)
                    with turn.step() as step:
                        merged = [m.text for m in turn.new_messages()]
                        step.assistant(f"answer to {text}" + "".join(f" + {m}" for m in merged))
            except TurnInterrupted as exc:
                caught.append((exc.delivery_id, exc.policy, exc.session_id, exc.turn_id))
                seen.append(turn.interrupted)
        assert list(session.pending(lease)) == []
    if caught:
        assert caught == [("d2", policy, "c", session.read()[1].meta["turn_id"])]
    return session, started, seen


def _turn_ends(session: ags.BaseSession) -> list[tuple[str, str] | None]:
    out: list[tuple[str, str] | None] = []
    for event in session.read():
        if event.type == TURN_END:
            error = event.decode(TurnEnd).error
            out.append(None if error is None else (error.type, error.message))
    return out


def test_interrupt_ends_the_running_turn_at_its_next_step(url: str) -> None:
    with ags.open_store(url) as store:
        session, started, seen = _drain_with_a_second_message(store, "interrupt")
        assert started == ["first", "second"]
        assert seen == [True, True, False]  # after step 0; after the raise; second turn
        assert roles_and_texts(session) == [
            ("user", "first"),
            ("assistant", "calling for first"),
            ("tool", ""),  # the unanswered call, answered as interrupted
            ("user", "second"),
            ("assistant", "calling for second"),
            ("tool", ""),  # step 1 of the second turn did not answer it either
            ("assistant", "answer to second"),
        ]
        answer = session.messages()[2].tool_results[0]
        assert answer.call_id == "c1" and answer.is_error
        assert answer.content == (
            "tool call did not complete: the turn failed with TurnInterrupted: "
            "interrupted by delivery d2"
        )
        assert _turn_ends(session) == [("TurnInterrupted", "interrupted by delivery d2"), None]
        starts = [e.meta[META_DELIVERY] for e in session.read() if e.type == TURN_START]
        assert starts == ["d1", "d2"]


def test_merge_hands_the_message_to_the_running_turn(url: str) -> None:
    with ags.open_store(url) as store:
        session, started, seen = _drain_with_a_second_message(store, "merge")
        assert started == ["first"]  # "second" joined the turn: no turn of its own
        assert seen == [False]
        assert roles_and_texts(session) == [
            ("user", "first"),
            ("assistant", "calling for first"),
            ("tool", ""),  # closed by the merged user message (the interrupted stand-in)
            ("user", "second"),
            ("assistant", "answer to first + second"),
        ]
        users = [e for e in session.read() if e.type == "user/message"]
        assert [u.meta[META_DELIVERY] for u in users] == ["d1", "d2"]
        assert _turn_ends(session) == [None]


def test_rollback_discards_the_running_turn_and_deletes_nothing(url: str) -> None:
    with ags.open_store(url) as store:
        session, started, seen = _drain_with_a_second_message(store, "rollback")
        assert started == ["first", "second"]
        assert seen == [True, True, False]  # after step 0; after the raise; second turn
        assert roles_and_texts(session) == [
            ("user", "second"),
            ("assistant", "calling for second"),
            ("tool", ""),
            ("assistant", "answer to second"),
        ]
        log = session.read()
        assert [e.type for e in log] == [
            SESSION_DELIVERY,
            TURN_START,
            "user/message",
            "step/start",
            "assistant/message",
            SESSION_DELIVERY,
            "step/end",
            "tool/result",
            TURN_END,
            SESSION_ROLLBACK,  # nothing of the first turn is deleted
            TURN_START,
            "user/message",
            "step/start",
            "assistant/message",
            "step/end",
            "step/start",
            "assistant/message",
            "step/end",
            TURN_END,
        ]
        marker = log[9].decode(SessionRollback)
        assert (marker.turn_id, marker.turn_start_seq, marker.delivery) == (
            log[1].meta["turn_id"],
            log[1].seq,
            "d2",
        )
        assert _turn_ends(session) == [("TurnInterrupted", "rolled back by delivery d2"), None]
        # A fresh session object (derived from the log alone) agrees.
        assert roles_and_texts(store.get("c")) == roles_and_texts(session)


def test_a_policy_delivery_with_no_turn_running_starts_a_turn(url: str) -> None:
    with ags.open_store(url) as store:
        for i, policy in enumerate(("interrupt", "merge", "rollback")):
            store.deliver("c", f"m{i}", policy=policy)
        session = store.get("c")
        with store.lock("c", timeout=5) as lease:
            for delivery in session.pending(lease):
                with delivery.start_turn() as turn:
                    assert not turn.interrupted
                    with turn.step() as step:
                        assert turn.new_messages() == []
                        step.assistant(f"re: {delivery.message.text}")
        assert roles_and_texts(session) == [
            ("user", "m0"),
            ("assistant", "re: m0"),
            ("user", "m1"),
            ("assistant", "re: m1"),
            ("user", "m2"),
            ("assistant", "re: m2"),
        ]


def test_a_turn_not_opened_by_the_inbox_is_not_interrupted() -> None:
    store = ags.open_store("memory:")
    session = store.get("c")
    with session.turn() as turn:
        turn.user("direct")
        store.deliver("c", "later", policy="interrupt")
        assert not turn.interrupted
        with turn.step() as step:
            step.assistant("ok")
    with store.lock("c") as lease:
        assert [d.message.text for d in session.pending(lease)] == ["later"]


def test_interrupt_caught_inside_the_turn_still_ends_it_so() -> None:
    store = ags.open_store("memory:")
    store.deliver("c", "first", id="d1")
    session = store.get("c")
    with store.lock("c") as lease:
        delivery = next(session.pending(lease))
        with delivery.start_turn() as turn:
            with turn.step() as step:
                step.assistant("calling", tool_calls=[ToolCall("c1", "ls")])
            store.deliver("c", "stop", id="d2", policy="interrupt")
            with pytest.raises(TurnInterrupted):
                turn.step()
            with pytest.raises(TurnInterrupted):
                turn.step()  # still
    assert _turn_ends(session) == [("TurnInterrupted", "interrupted by delivery d2")]
    assert session.messages()[-1].tool_results[0].content.endswith("delivery d2")


def test_the_async_policies(tmp_path: Path) -> None:
    async def main() -> None:
        async with open_async_store(tmp_path / "s") as store:
            await store.deliver("c", "first", id="d1")
            session = await store.get("c")
            started = []
            caught: list[tuple[str, bool]] = []
            handed: list[list[str]] = []
            async with store.lock("c", timeout=5) as lock:
                async for delivery in session.pending(lock):
                    started.append(delivery.message.text)
                    try:
                        async with delivery.start_turn(agent="bot") as turn:
                            async with turn.step() as step:
                                await step.assistant("one")
                                if delivery.message.text == "first":
                                    await store.deliver("c", "more", id="d2", policy="merge")
                            async with turn.step() as step:
                                assert not turn.interrupted
                                merged = [m.text for m in turn.new_messages()]
                                handed.append(merged)
                                await step.assistant(f"two {merged}")
                                if delivery.message.text == "first":
                                    await store.deliver("c", "new", id="d3", policy="rollback")
                            async with turn.step() as step:
                                await step.assistant("three")
                    except TurnInterrupted as exc:
                        caught.append((exc.delivery_id, turn.interrupted))
            assert started == ["first", "new"]
            assert caught == [("d3", True)]
            assert handed == [["more"], []]
            # "more" joined the first turn, so the rollback left it out with that turn.
            texts = [(m.role, m.text) for m in await session.messages()]
            assert texts == [
                ("user", "new"),
                ("assistant", "one"),
                ("assistant", "two []"),
                ("assistant", "three"),
            ]

    asyncio.run(main())
