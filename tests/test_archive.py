"""store.archive(): what moves out of the live log, what stays, reading through the archive,
encryption, crash safety (SIGKILL loops and a stop between the archive's steps), and the
archive's format (a golden store written by this version must keep loading)."""

from __future__ import annotations

import base64
import gzip
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentsession import BaseStore, CorruptLogError, Event, Message, UsageError, open_store
from agentsession import archive as archive_module
from agentsession.archive import ARCHIVE_KIND, SEGMENT_KIND, ArchiveReport, decode_index
from agentsession.events import encode_event

from .store_urls import store_url

BACKENDS = ["memory", "jsonl", "sqlite", "postgres", "redis"]
SRC = Path(__file__).resolve().parents[1] / "src"
GOLDEN = Path(__file__).parent / "golden" / "archive-v1"


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from store_url(request.param, tmp_path)


def _turns(store: BaseStore, sid: str, count: int, *, start: int = 0, word: str = "turn") -> None:
    session = store.get(sid)
    for i in range(start, start + count):
        with session.turn() as turn:
            turn.user(f"{word} question {i}")
            turn.assistant(f"{word} answer {i}")


def _grow(store: BaseStore, sid: str, rounds: int, per_round: int = 5) -> None:
    """``rounds`` times: ``per_round`` turns, then a compaction keeping the last turn."""
    for r in range(rounds):
        _turns(store, sid, per_round, start=r * per_round)
        store.get(sid).compact(f"summary of round {r}", keep_turns=1)


def _reopen(store: BaseStore, url: str) -> BaseStore:
    """Another store object on the same data (the same object for memory)."""
    if url == "memory:":
        return store
    return open_store(url)


def test_archive_moves_what_no_history_needs_and_read_still_returns_everything(url: str) -> None:
    store = open_store(url)
    _grow(store, "s", 4)
    _turns(store, "s", 2, start=100)
    session = store.get("s")
    before = session.read()
    messages = session.messages()

    report = store.archive("s")

    assert isinstance(report, ArchiveReport)
    (entry,) = report.sessions
    assert entry.skipped is None, entry
    assert entry.moved > 0 and entry.first_seq == 1 and entry.through_seq == entry.moved
    assert entry.compression in ("zstd", "gzip")
    assert entry.archive_bytes > 0 and entry.location.endswith(f"{SEGMENT_KIND}/s#1")
    if entry.live_bytes_before is not None:
        assert entry.live_bytes_after is not None
        assert entry.live_bytes_after < entry.live_bytes_before
    other = _reopen(store, url)
    again = other.get("s")
    assert again.read() == before
    assert again.messages() == messages
    # Slices across the archive's edge, and within it, come back whole and in order.
    edge = entry.through_seq
    for after, limit in [(0, 3), (edge - 2, 5), (edge, 2), (3, None), (edge - 1, 1)]:
        assert again.read(after, limit) == [e for e in before if e.seq > after][:limit], (
            after,
            limit,
        )
    # The live log really shrank: a raw read of the storage starts after the archive.
    assert again._storage_read(0, None)[0].seq == edge + 1
    # Appending and archiving again adds a segment; everything still reads in order.
    _grow(store, "s", 2)
    second = store.archive("s").sessions[0]
    assert second.skipped is None and second.first_seq == edge + 1
    index = decode_index("s", store._meta_get(ARCHIVE_KIND, "s"))
    assert [seg.first for seg in index.segments] == [1, edge + 1]
    everything = _reopen(store, url).get("s").read()
    assert [e.seq for e in everything] == list(range(1, everything[-1].seq + 1))
    assert everything[: len(before)] == before
    if other is not store:
        other.close()
    store.close()


def test_opening_and_messages_never_read_the_archive(url: str) -> None:
    store = open_store(url)
    _grow(store, "s", 3)
    messages = store.get("s").messages()
    entry = store.archive("s").sessions[0]
    assert entry.moved
    # Damage the archive: a history (and opening) does not notice, a read of archived seqs does.
    store._meta_set(SEGMENT_KIND, "s#1", "{not json")
    other = _reopen(store, url)
    other._drop_cached("s")
    session = other.get("s")
    assert session.messages() == messages
    assert session.read(entry.through_seq)[0].seq == entry.through_seq + 1
    with pytest.raises(CorruptLogError, match="archive segment"):
        session.read()
    store.close()


def test_what_stays_live(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"))
    _turns(store, "plain", 5)
    assert store.archive("plain").sessions[0].skipped is not None  # no marker: all needed

    _grow(store, "s", 3)
    session = store.get("s")
    marker = next(e for e in reversed(session.read()) if e.type == "session/compaction")
    first_kept = json.loads(bytes(marker.data))["firstKeptSeq"]
    # keep_after_marker=False may go up to the marker; True keeps from its first kept seq.
    store2 = open_store(str(tmp_path / "store2"))
    _grow(store2, "s", 3)
    loose = store2.archive("s", keep_after_marker=False).sessions[0]
    assert loose.through_seq == marker.seq - 1
    kept = store.archive("s", before=4).sessions[0]
    assert kept.through_seq == 3  # before= limits it
    kept = store.archive("s").sessions[0]
    assert kept.through_seq == first_kept - 1
    # A child forked at a seq keeps its parent's events from there on.
    _turns(store, "p", 2)
    child = store.get("p").fork(child_id="child")
    child_fork = child.fork_point
    assert child_fork
    _grow(store, "p", 3)
    entry = store.archive("p").sessions[0]
    assert entry.skipped is not None or entry.through_seq < child_fork
    # A branch is skipped, and its origin keeps everything from the branch point on.
    _grow(store, "o", 3)
    branch = store.get("o").branch(at_seq=5, id="b")
    _turns(store, branch.id, 1)
    assert store.archive("b").sessions[0].skipped is not None
    origin = store.archive("o").sessions[0]
    assert origin.through_seq <= 4
    assert store.get("b").read()[0].seq == 1  # the branch reads its shared history through it
    with pytest.raises(UsageError):
        store.archive("s", before=True)  # type: ignore[arg-type]
    store.close()
    store2.close()


def test_every_session_is_archived_when_none_is_named() -> None:
    store = open_store("memory:")
    _grow(store, "a", 2)
    _grow(store, "b", 2)
    _turns(store, "c", 2)
    report = store.archive()
    assert {e.session_id for e in report.sessions} == {"a", "b", "c"}
    assert set(report.skipped) == {"c"}
    assert report.moved == sum(e.moved for e in report.sessions) > 0


def test_deleting_a_session_deletes_its_archive(url: str) -> None:
    store = open_store(url)
    _grow(store, "s", 3)
    assert store.archive("s").sessions[0].moved
    assert store._meta_get(SEGMENT_KIND, "s#1") is not None
    assert store.delete("s")
    assert store._meta_get(SEGMENT_KIND, "s#1") is None
    assert store._meta_get(ARCHIVE_KIND, "s") is None
    # A new life of the id starts without an archive.
    _turns(store, "s", 1)
    assert [e.seq for e in store.get("s").read()] == [1, 2, 3, 4]
    store.close()


def test_gzip_when_zstandard_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archive_module, "_zstd", lambda: None)
    store = open_store("memory:")
    _grow(store, "s", 2)
    before = store.get("s").read()
    entry = store.archive("s").sessions[0]
    assert entry.compression == "gzip"
    text = store._meta_get(SEGMENT_KIND, "s#1")
    assert text is not None
    header = json.loads(text)
    assert header["compression"] == "gzip"
    lines = gzip.decompress(base64.b64decode(header["data"])).splitlines()
    assert len(lines) == entry.moved
    store._drop_cached("s")
    assert store.get("s").read() == before


def test_a_segment_of_another_session_or_damaged_is_refused() -> None:
    store = open_store("memory:")
    _grow(store, "s", 2)
    store.archive("s")
    text = store._meta_get(SEGMENT_KIND, "s#1")
    assert text is not None
    with pytest.raises(CorruptLogError, match="another session"):
        archive_module.decode_segment("t", text)
    header = json.loads(text)
    header["sha256"] = "0" * 64
    with pytest.raises(CorruptLogError, match="checksum"):
        archive_module.decode_segment("s", json.dumps(header))


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_an_encrypted_archive_holds_no_plaintext_and_dies_with_the_key(
    backend: str, tmp_path: Path
) -> None:
    url = next(store_url(backend, tmp_path))
    store = open_store(url, passphrase="correct horse")
    _grow(store, "s", 3)
    _turns(store, "s", 2, start=50, word="zanzibarquokka")
    _grow(store, "s", 1)
    before = store.get("s").read()
    entry = store.archive("s").sessions[0]
    assert entry.moved > 0
    text = store._meta_get(SEGMENT_KIND, "s#1")
    assert text is not None
    header = json.loads(text)
    packed = base64.b64decode(header["data"])
    plain = (
        gzip.decompress(packed)
        if header["compression"] == "gzip"
        else archive_module._decompress(packed, "zstd", "s")
    )
    assert b"zanzibarquokka" not in plain and b"question" not in plain
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert b"zanzibarquokka" not in path.read_bytes(), path
    other = open_store(url, passphrase="correct horse")
    assert other.get("s").read() == before
    other.shred("s")
    from agentsession.errors import EncryptionError

    third = open_store(url, passphrase="correct horse")
    with pytest.raises(EncryptionError):
        third.get("s").read(0, 3)
    for s in (store, other, third):
        s.close()


@pytest.mark.parametrize("backend", ["memory", "jsonl", "sqlite"])
def test_a_stop_between_the_index_and_the_drop_leaves_no_gap(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = next(store_url(backend, tmp_path))
    store = open_store(url)
    _grow(store, "s", 3)
    before = store.get("s").read()

    def stop(self: object, seq: int) -> None:
        raise KeyboardInterrupt  # as if killed: the index is written, the log untouched

    from agentsession.session import BaseSession

    monkeypatch.setattr(BaseSession, "_storage_discard_through", stop)
    with pytest.raises(KeyboardInterrupt):
        store.archive("s")
    monkeypatch.undo()
    index = decode_index("s", store._meta_get(ARCHIVE_KIND, "s"))
    assert index.through > 0
    fresh = _reopen(store, url)
    fresh._drop_cached("s")
    assert fresh.get("s").read() == before
    # The next run finds nothing new to archive but drops what is still live.
    _grow(store, "s", 1)
    again = store.archive("s").sessions[0]
    assert again.skipped is None
    store._drop_cached("s")
    everything = store.get("s").read()
    assert everything[: len(before)] == before
    assert [e.seq for e in everything] == list(range(1, len(everything) + 1))
    store.close()


_CHILD = textwrap.dedent(
    """
    import sys
    from agentsession import open_store
    url, start = sys.argv[1], int(sys.argv[2])
    store = open_store(url)
    session = store.get("s")
    i = start
    while True:
        with session.turn() as turn:
            turn.user(f"q{i}")
            turn.assistant(f"a{i}")
        if i % 7 == 6:
            session.compact(f"summary {i}", keep_turns=1)
        if i % 5 == 4:
            store.archive("s")
        print(session.latest_seq, flush=True)
        i += 1
    """
)


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_sigkill_loop_while_appending_and_archiving_loses_nothing(
    backend: str, tmp_path: Path
) -> None:
    """A writer that appends, compacts and archives is SIGKILLed at random moments, again and
    again; after each kill every event it reported is read back, exactly once, in order."""
    url = next(store_url(backend, tmp_path))
    rng = random.Random(7)
    env = dict(os.environ, PYTHONPATH=str(SRC))
    reported = 0
    start = 0
    archived_runs = 0
    for _round in range(12):
        proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, url, str(start)],
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        assert proc.stdout is not None
        # Let it run past a few archive runs, then kill it at a random moment.
        lines = [proc.stdout.readline() for _ in range(rng.randint(3, 12))]
        time.sleep(rng.random() * 0.05)
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate()
        seen = [int(x) for x in [*lines, *out.split()] if x.strip()]
        reported = max([reported, *seen])
        store = open_store(url)
        events = store.get("s").read()
        seqs = [e.seq for e in events]
        assert seqs == list(range(1, len(seqs) + 1)), "a gap or a repeat after a kill"
        assert seqs[-1] >= reported
        ids = [e.id for e in events]
        assert len(set(ids)) == len(ids)
        index = decode_index("s", store._meta_get(ARCHIVE_KIND, "s"))
        archived_runs = len(index.segments)
        start = len([e for e in events if e.type == "turn/start"])
        store.close()
    assert archived_runs >= 2  # the loop did archive, many times over


def test_the_golden_archive_of_this_format_loads(tmp_path: Path) -> None:
    """A JSONL store with an archived session, written by format version 1 (gzip), reads
    back whole."""
    copy = tmp_path / "store"
    shutil.copytree(GOLDEN / "store", copy)
    expected = [json.loads(line) for line in (GOLDEN / "expected.jsonl").read_text().splitlines()]
    store = open_store(str(copy))
    events = store.get("golden").read()
    assert [json.loads(encode_event(e)) for e in events] == expected
    assert store.get("golden")._storage_read(0, None)[0].seq > 1
    assert store.get("golden").messages()


def test_a_copy_holds_every_event_live_and_no_archive(tmp_path: Path) -> None:
    """copy_store reads through the archive and writes the copy's logs whole; the archive's
    entries (sealed under the source's keys in an encrypted store) are not copied."""
    from agentsession import copy_store

    source = open_store(str(tmp_path / "a"), passphrase="one")
    _grow(source, "s", 3)
    assert source.archive("s").sessions[0].moved
    before = source.get("s").read()
    target = open_store(str(tmp_path / "b"), passphrase="two", create=True)
    copy_store(source, target)
    assert target._meta_get(ARCHIVE_KIND, "s") is None
    assert [e.seq for e in target.get("s")._storage_read(0, None)] == [e.seq for e in before]
    assert target.archive("s").sessions[0].moved  # and it archives on its own
    target._drop_cached("s")
    assert target.get("s").read() == before
    source.close()
    target.close()


@pytest.mark.parametrize("emptied", [True, False])
def test_a_writer_holding_the_replaced_jsonl_file_writes_to_the_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, emptied: bool
) -> None:
    """Another store object (here: in this process) has the log open when an archive run
    replaces the file; its next appends land in the new file, also when the run stopped
    before emptying the old one (``emptied=False``: as if killed right after the rename)."""
    directory = str(tmp_path / "store")
    writer = open_store(directory)
    _grow(writer, "s", 3)
    held = writer.get("s")
    assert held.latest_seq  # the writer's log has the file open
    archiver = open_store(directory)
    if not emptied:
        monkeypatch.setattr(os, "ftruncate", lambda fd, size: None)
    assert archiver.archive("s").sessions[0].moved
    monkeypatch.undo()
    seq = held.append(Event.new("user/message", Message.user("after the archive")))
    _turns(writer, "s", 1, start=99)
    reader = open_store(directory)
    events = reader.get("s").read()
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert seq in [e.seq for e in events]
    for s in (writer, archiver, reader):
        s.close()


@pytest.mark.parametrize("backend", ["memory", "jsonl", "postgres", "redis"])
def test_async_reads_go_through_the_archive(backend: str, tmp_path: Path) -> None:
    """The async API's reads (natively driven on PostgreSQL and Redis) read archived seqs
    through the archive too."""
    import asyncio

    from agentsession.aio import open_async_store

    urls = store_url(backend, tmp_path)
    url = next(urls)

    async def main() -> None:
        store = await open_async_store(url)
        _grow(store.sync, "s", 3)
        before = store.sync.get("s").read()
        report = await store.archive("s")
        assert report.sessions[0].moved
        store.sync._drop_cached("s")
        session = await store.get("s")
        assert await session.read() == before
        assert await session.read(2, 3) == before[2:5]
        await store.close()

    try:
        asyncio.run(main())
    finally:
        urls.close()  # drops the schema or the key prefix


def test_a_jsonl_run_stopped_before_the_rename_leaves_a_log_that_reads_and_grows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = str(tmp_path / "store")
    store = open_store(directory)
    _grow(store, "s", 3)
    before = store.get("s").read()

    real_replace = os.replace

    def killed(src: str, dst: str, **kwargs: object) -> None:
        if str(dst).endswith(".jsonl"):  # the log's rename, not a meta entry's
            raise KeyboardInterrupt
        real_replace(src, dst, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        store.archive("s")
    monkeypatch.undo()
    other = open_store(directory)
    assert other.get("s").read() == before
    _turns(other, "s", 2, start=200)
    events = open_store(directory).get("s").read()
    assert events[: len(before)] == before
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    # The next run drops what the stopped one archived (its temporary file is made anew).
    index = decode_index("s", other._meta_get(ARCHIVE_KIND, "s"))
    entry = other.archive("s").sessions[0]
    assert entry.skipped is None and entry.moved == 0 and entry.through_seq == index.through
    assert other.get("s")._storage_read(0, 1)[0].seq == index.through + 1
    assert [e.seq for e in open_store(directory).get("s").read()] == [e.seq for e in events]
    assert other.archive("s").sessions[0].skipped == "nothing new to archive"
