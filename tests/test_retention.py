"""Retention rules, legal holds, the audit log and data-subject requests on every backend, the
async API's twins, the command line, and a SIGKILL loop of retention runs."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import random
import signal
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentsession import BaseStore, UsageError, open_store
from agentsession.aio import AsyncStore
from agentsession.retention import Retention, RetentionReport, user_digest

from .store_urls import store_url

BACKENDS = ["memory", "jsonl", "sqlite", "postgres", "redis"]
SRC = Path(__file__).resolve().parents[1] / "src"
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += dt.timedelta(**delta)


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from store_url(request.param, tmp_path)


def _session(store: BaseStore, sid: str, *, user: str = "", tenant: str = "", turns: int = 4,
             event_user: str = "") -> None:  # fmt: skip
    session = store.get(sid)
    for i in range(turns):
        with session.turn(user=event_user) if event_user else session.turn() as turn:
            turn.user(f"{sid} question {i}")
            turn.assistant(f"{sid} answer {i}")
        if i == turns - 2:
            session.compact(f"summary of {sid}", keep_turns=1)
    if user or tenant:
        session.update(user=user or None, tenant=tenant or None)


def _open(url: str, clock: Callable[[], dt.datetime], **options: object) -> BaseStore:
    return open_store(url, clock=clock, **options)


def test_rules_archive_and_delete_by_age_idleness_prefix_and_tenant(url: str) -> None:
    clock = Clock()
    rules = [
        Retention(prefix="tmp-", delete_after="48h"),
        Retention(tenant="acme", delete_after="24h", idle_after="1h"),
        Retention(archive_after="12h", idle_after="2h"),
    ]
    store = _open(url, clock, retention=rules)
    _session(store, "tmp-a")
    _session(store, "acme-1", tenant="acme")
    _session(store, "plain")
    _session(store, "fresh-idle")
    clock.advance(hours=30)
    with store.get("fresh-idle").turn() as turn:  # active just now: not idle
        turn.user("still here")
        turn.assistant("ok")

    dry = store.apply_retention(dry_run=True)
    assert isinstance(dry, RetentionReport) and dry.dry_run
    assert dry.of("delete") == ["acme-1"]  # tmp-a is not 48h old yet
    assert dry.of("archive") == ["plain"]  # fresh-idle is not idle
    assert not any(a.done for a in dry.actions)
    assert {info.id for info in store.list()} == {"tmp-a", "acme-1", "plain", "fresh-idle"}
    assert store.audit_log() == []  # a dry run records nothing

    done = store.apply_retention()
    assert [(a.session_id, a.action, a.done) for a in done.actions] == [
        ("acme-1", "delete", True),
        ("plain", "archive", True),
    ]
    assert "events archived" in done.actions[1].detail
    assert {info.id for info in store.list()} == {"tmp-a", "plain", "fresh-idle"}
    clock.advance(hours=20)
    later = store.apply_retention()
    assert later.of("delete") == ["tmp-a"]
    # plain has nothing new to archive: reported, not done, not recorded.
    assert {(a.session_id, a.done) for a in later.actions if a.action == "archive"} == {
        ("fresh-idle", True),
        ("plain", False),
    }
    log = store.audit_log()
    assert [(e.action, e.session_id) for e in log] == [
        ("delete", "acme-1"),
        ("archive", "plain"),
        ("delete", "tmp-a"),
        ("archive", "fresh-idle"),
    ]
    assert all(e.time >= T0 for e in log)
    # What was archived still reads whole.
    assert [e.seq for e in store.get("plain").read()] == list(
        range(1, store.get("plain").latest_seq + 1)
    )
    store.close()


def test_a_legal_hold_wins_over_every_rule_erasure_and_delete(url: str) -> None:
    clock = Clock()
    store = _open(url, clock, retention=Retention(delete_after="1h"), ttl="1h")
    _session(store, "kept", user="ann")
    _session(store, "gone", user="ann")
    store.hold("kept", "case 2026-17")
    assert set(store.holds()) == {"kept"}
    assert store.holds()["kept"].reason == "case 2026-17"
    clock.advance(hours=2)
    report = store.apply_retention()
    assert report.of("held") == ["kept"] and report.of("delete") == ["gone"]
    _session(store, "gone", user="ann")
    clock.advance(hours=2)
    assert store.purge_expired() == ["gone"]  # the TTL is a policy too
    with pytest.raises(UsageError, match="legal hold"):
        store.delete("kept")
    _session(store, "third", user="ann")
    erased = store.erase_user("ann")
    assert erased.held == ["kept"] and erased.erased == ["third"]
    assert store.exists("kept")
    with pytest.raises(UsageError):
        store.hold("kept", "  ")
    assert store.release("kept") is True and store.release("kept") is False
    assert store.delete("kept")
    actions = [e.action for e in store.audit_log()]
    assert actions[0] == "hold" and "release" in actions and "erase" in actions
    store.close()


def test_export_user_writes_every_session_they_took_part_in(url: str, tmp_path: Path) -> None:
    store = open_store(url)
    _session(store, "s1", user="ann")
    _session(store, "s2", user="bob", event_user="ann", turns=2)  # ann spoke in bob's session
    _session(store, "s3", user="bob")
    store.archive("s1")
    dest = tmp_path / "export"
    path = store.export_user("ann", dest)
    assert Path(path) == dest
    manifest = json.loads((dest / "manifest.json").read_text())
    assert manifest["user"] == "ann"
    assert [s["session_id"] for s in manifest["sessions"]] == ["s1", "s2"]
    assert stat.S_IMODE(os.stat(dest).st_mode) == 0o700
    for entry in manifest["sessions"]:
        file = dest / entry["file"]
        assert stat.S_IMODE(os.stat(file).st_mode) == 0o600
        lines = file.read_bytes().splitlines()
        assert len(lines) == entry["events"]
        seqs = [json.loads(line)["seq"] for line in lines]
        assert seqs == list(range(1, len(seqs) + 1))  # archived events included
    # Nothing of the user's name is in the audit log: its SHA-256 is.
    (entry,) = store.audit_log()
    assert entry.action == "export" and "ann" not in entry.detail
    assert user_digest("ann") in entry.detail
    default = store.export_user("bob")
    assert os.path.isdir(default) and stat.S_IMODE(os.stat(default).st_mode) == 0o700
    with pytest.raises(UsageError):
        store.export_user("")
    store.close()


def test_erase_user_deletes_or_shreds(url: str) -> None:
    store = open_store(url)
    _session(store, "s1", user="ann")
    _session(store, "s2", user="bob")
    report = store.erase_user("ann")
    assert report.erased == ["s1"] and report.method == "delete" and report.held == []
    assert not store.exists("s1") and store.exists("s2")
    store.close()


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_erase_user_shreds_in_an_encrypted_store(backend: str, tmp_path: Path) -> None:
    url = next(store_url(backend, tmp_path))
    store = open_store(url, passphrase="correct horse")
    _session(store, "s1", user="ann", turns=6)
    store.archive("s1")
    report = store.erase_user("ann")
    assert report.method == "shred" and report.erased == ["s1"]
    assert not store.exists("s1")
    store.close()


def test_the_async_store_has_every_retention_operation(tmp_path: Path) -> None:
    async def main() -> None:
        sync = open_store(str(tmp_path / "store"), retention=Retention(archive_after="0s"))
        store = AsyncStore(sync)
        _session(sync, "s", user="ann")
        await store.hold("s", "audit")
        assert list(await store.holds()) == ["s"]
        assert (await store.apply_retention()).of("held") == ["s"]
        assert await store.release("s")
        assert (await store.apply_retention(dry_run=True)).of("archive") == ["s"]
        assert (await store.archive("s")).sessions[0].moved > 0
        path = await store.export_user("ann", tmp_path / "out")
        assert os.path.exists(os.path.join(path, "manifest.json"))
        assert (await store.erase_user("ann")).erased == ["s"]
        assert [e.action for e in await store.audit_log()][-1] == "erase"
        await store.close()

    asyncio.run(main())


def test_the_command_line(tmp_path: Path) -> None:
    directory = tmp_path / "store"
    store = open_store(str(directory))
    _session(store, "a", turns=6)
    _session(store, "b", turns=6)
    store.close()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "agentsession", "--store", str(directory), *args],
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONPATH=str(SRC)),
            check=False,
        )

    held = run("hold", "b", "--reason", "case 9")
    assert held.returncode == 0, held.stderr
    dry = run("retention", "--archive-after", "0s", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "a: would archive" in dry.stdout and "b: held" in dry.stdout
    real = run("retention", "--delete-after", "0s", "--json")
    assert real.returncode == 0, real.stderr
    actions = [json.loads(line) for line in real.stdout.splitlines()]
    assert {(a["session_id"], a["action"]) for a in actions} == {("a", "delete"), ("b", "held")}
    assert run("hold", "--list").stdout.startswith("b: case 9")
    assert run("hold", "b", "--release").returncode == 0
    archived = run("archive", "b", "--json")
    assert archived.returncode == 0, archived.stderr
    assert json.loads(archived.stdout)["moved"] > 0
    assert run("retention").returncode != 0  # no rule given


_CHILD = textwrap.dedent(
    """
    import sys
    from agentsession import open_store
    from agentsession.retention import Retention
    url, start = sys.argv[1], int(sys.argv[2])
    rules = [Retention(prefix="tmp-", delete_after="0s"), Retention(archive_after="0s")]
    store = open_store(url, retention=rules)
    i = start
    while True:
        for sid in ("keep", f"tmp-{i}"):
            session = store.get(sid)
            for _ in range(3):
                with session.turn() as turn:
                    turn.user(f"q{i}")
                    turn.assistant(f"a{i}")
            session.compact(f"summary {i}", keep_turns=1)
        print(store.get("keep").latest_seq, flush=True)
        store.apply_retention()
        i += 1
    """
)


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_sigkill_loop_during_retention_loses_nothing(backend: str, tmp_path: Path) -> None:
    """A process that writes and applies retention (archiving one session, deleting others)
    is SIGKILLed at random moments; each time, the kept session reads back whole and in
    order, and no deleted session leaves a partial log behind."""
    url = next(store_url(backend, tmp_path))
    rng = random.Random(11)
    env = dict(os.environ, PYTHONPATH=str(SRC))
    reported = 0
    for round_ in range(10):
        proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, url, str(round_ * 1000)],
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(rng.randint(1, 4))]
        time.sleep(rng.random() * 0.1)
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate()
        reported = max([reported, *(int(x) for x in [*lines, *out.split()] if x.strip())])
        store = open_store(url)
        events = store.get("keep").read()
        seqs = [e.seq for e in events]
        assert seqs == list(range(1, len(seqs) + 1))
        assert seqs[-1] >= reported
        for info in store.list():
            if info.id.startswith("tmp-"):
                got = [e.seq for e in store.get(info.id).read()]
                assert got == list(range(1, len(got) + 1))
        store.close()
