"""Redis servers failing under load: a server with ``appendfsync always`` killed (SIGKILL) and
restarted while writers append, and a Cluster primary killed until its replica takes over.
Every acknowledged event must be stored, and stored once (appends retried with the same event
ids are recognised). Servers are started and stopped by the tests, on loopback ports.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import agentsession as ags
from agentsession.errors import OutcomeUnknown, StorageError, StoreUnavailable

from .redis_servers import (
    SERVER_SKIP,
    cluster_url,
    redis_cluster,
    redis_server,
    requires_redis,
)

pytestmark = [
    pytest.mark.redis,
    pytest.mark.slow,
    requires_redis,
    pytest.mark.skipif(bool(SERVER_SKIP), reason=SERVER_SKIP or "-"),
]


class Writers:
    """Threads appending numbered events, each to sessions of its own and all to one shared
    session, recording what was acknowledged; a failed append is retried with the same
    event (its id) until it is acknowledged, as an application would."""

    def __init__(self, store: ags.BaseStore, threads: int = 4) -> None:
        self.store = store
        self.acked: list[tuple[str, str]] = []
        self.errors: list[BaseException] = []
        self.raised: list[type[BaseException]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(threads)
        ]

    def _run(self, n: int) -> None:
        i = 0
        while not self._stop.is_set():
            for sid in (f"own-{n}-{i % 5}", "shared"):
                event = ags.Event.new("test/n", {"writer": n, "i": i})
                while True:
                    try:
                        self.store.get(sid).append(event)
                        break
                    except (OutcomeUnknown, StoreUnavailable) as exc:
                        with self._lock:
                            self.raised.append(type(exc))
                        time.sleep(0.05)
                    except StorageError as exc:
                        if "replicas acknowledged" not in str(exc):
                            raise
                        with self._lock:  # stored on a primary whose replica is gone
                            self.raised.append(type(exc))
                        time.sleep(0.05)
                    except BaseException as exc:
                        with self._lock:
                            self.errors.append(exc)
                        return
                with self._lock:
                    self.acked.append((sid, event.id))
            i += 1

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def wait_for(self, count: int, timeout: float = 120.0) -> None:
        """Until ``count`` appends were acknowledged in all."""
        deadline = time.monotonic() + timeout
        while len(self.acked) < count:
            assert not self.errors, self.errors
            assert time.monotonic() < deadline, f"only {len(self.acked)} acknowledged"
            time.sleep(0.01)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)
        assert not any(t.is_alive() for t in self._threads)
        assert not self.errors, self.errors


def check_exactly_once(
    open_store: Callable[[], ags.BaseStore], acked: list[tuple[str, str]]
) -> None:
    """Every acknowledged event is stored, once; no event is stored twice; seqs are gap-free."""
    with open_store() as store:
        stored: dict[str, list[str]] = {}
        for sid in {sid for sid, _ in acked}:
            events = store.get(sid).read()
            assert [e.seq for e in events] == list(range(1, len(events) + 1)), sid
            stored[sid] = [e.id for e in events]
    for sid, ids in stored.items():
        assert len(ids) == len(set(ids)), f"{sid}: an event stored twice"
    lost = [(sid, eid) for sid, eid in acked if eid not in set(stored[sid])]
    assert lost == [], f"{len(lost)} acknowledged events lost"


def test_sigkill_of_an_appendfsync_always_server_loses_and_doubles_nothing(
    tmp_path: Path,
) -> None:
    with redis_server(tmp_path, "--appendonly", "yes", "--appendfsync", "always") as server:
        url = f"redis://127.0.0.1:{server.port}/0"
        store = ags.open_store(url, durability="fsync", reconnect_timeout=30.0)
        writers = Writers(store)
        writers.start()
        try:
            writers.wait_for(300)
            server.kill()  # mid-load: appends in flight lose their connection
            time.sleep(0.3)
            server.start()  # the append-only file is replayed
            writers.wait_for(len(writers.acked) + 300)
        finally:
            writers.stop()
            store.close()
        check_exactly_once(lambda: ags.open_store(url), writers.acked)


def test_a_killed_cluster_primary_raises_and_retries_resolve_after_failover(
    tmp_path: Path,
) -> None:
    with redis_cluster(tmp_path, masters=3, replicas=1) as nodes:
        url = cluster_url(nodes)
        # replicas=1: every append waits for its replica (WAIT), so a failover loses none.
        store = ags.open_store(url, replicas=1, reconnect_timeout=0)
        writers = Writers(store)
        writers.start()
        try:
            writers.wait_for(300)
            primary = primary_of(nodes, store, "shared")
            primary.kill()
            deadline = time.monotonic() + 60
            while not writers.raised and time.monotonic() < deadline:
                time.sleep(0.01)
            # Its replica takes over (cluster-node-timeout 1 s); the old primary, started
            # again, rejoins as the new primary's replica, so WAIT 1 is met again.
            time.sleep(3)
            primary.start()
            writers.wait_for(len(writers.acked) + 300, timeout=180)
        finally:
            writers.stop()
            store.close()
        assert writers.raised, "the outage raised nothing"
        assert OutcomeUnknown in writers.raised or StoreUnavailable in writers.raised
        assert set(writers.raised) <= {OutcomeUnknown, StoreUnavailable, StorageError}
        check_exactly_once(lambda: ags.open_store(url), writers.acked)


def primary_of(nodes: list, store: ags.BaseStore, session_id: str):  # type: ignore[no-untyped-def]
    """The node process serving the session's slot."""
    db = store._catalog._db  # type: ignore[attr-defined]
    node = db.client.get_node_from_key(db.keys.session(session_id)[0])
    [found] = [n for n in nodes if n.port == node.port]
    return found
