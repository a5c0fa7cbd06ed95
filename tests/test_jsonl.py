"""Behaviour specific to the JSONL backend: files, crashes, corruption, names, permissions."""

from __future__ import annotations

import datetime as dt
import json
import os
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import agentsession as ags
from agentsession import CorruptLogError, Event, Message, StoreUnavailable
from agentsession.backends.jsonl import JsonlFileStore, JsonlLog, JsonlStore
from agentsession.storage import REOPEN


def line(seq: int, text: str, *, more: bool = False) -> bytes:
    flag = '"more":true,' if more else ""
    data = json.dumps({"role": "user", "parts": [{"type": "text", "text": text}]})
    return (
        f'{{"seq":{seq},{flag}"type":"user/message","time":"2026-01-01T00:00:00Z","data":{data}}}\n'
    ).encode()


def write_log(directory: Path, name: str, *chunks: bytes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.jsonl"
    path.write_bytes(b"".join(chunks))
    return path


def texts(session: ags.BaseSession) -> list[str]:
    return [m.text for m in session.messages()]


# -- torn writes and corruption ---------------------------------------------------------------


def test_torn_last_line_is_absent_to_readers_and_moved_aside_by_the_next_append(
    tmp_path: Path,
) -> None:
    torn = b'{"seq":3,"type":"user/mess'
    path = write_log(tmp_path, "s", line(1, "one"), line(2, "two"), torn)
    session = ags.open_store(tmp_path).get("s")
    assert texts(session) == ["one", "two"]
    assert [e.seq for e in session.read()] == [1, 2]
    assert path.read_bytes() == line(1, "one") + line(2, "two") + torn  # reading wrote nothing
    assert not (tmp_path / "s.jsonl.quarantine").exists()
    assert session.append(Event.new("user/message", Message.user("three"))) == 3
    assert (tmp_path / "s.jsonl.quarantine").read_bytes() == torn + b"\n"
    assert path.read_bytes().startswith(line(1, "one") + line(2, "two") + b'{"seq":3,')
    assert texts(ags.open_store(tmp_path).get("s")) == ["one", "two", "three"]


def test_unparsable_last_line_with_newline_is_moved_aside(tmp_path: Path) -> None:
    garbage = b'{"seq":3,"type":"user/message","data":{"role":\n'
    path = write_log(tmp_path, "s", line(1, "one"), line(2, "two"), garbage)
    session = ags.open_store(tmp_path).get("s")
    assert session.latest_seq == 2
    assert path.read_bytes() == line(1, "one") + line(2, "two") + garbage
    assert session.append(Event.new("test/n")) == 3
    assert path.read_bytes().startswith(line(1, "one") + line(2, "two") + b'{"seq":3,')
    assert (tmp_path / "s.jsonl.quarantine").read_bytes() == garbage + b"\n"


def test_batch_cut_short_by_a_crash_is_moved_aside_whole(tmp_path: Path) -> None:
    partial = line(2, "batch a", more=True) + line(3, "batch b", more=True) + b'{"seq":4,"ty'
    path = write_log(tmp_path, "s", line(1, "one"), partial)
    session = ags.open_store(tmp_path).get("s")
    assert texts(session) == ["one"]
    assert [e.seq for e in session.read()] == [1]
    assert path.read_bytes() == line(1, "one") + partial
    assert session.append_many([Event.new("test/n"), Event.new("test/n")]) == [2, 3]
    assert (tmp_path / "s.jsonl.quarantine").read_bytes() == partial + b"\n"
    assert [e.seq for e in ags.open_store(tmp_path).get("s").read()] == [1, 2, 3]


def test_batch_whose_last_line_is_missing_is_moved_aside_whole(tmp_path: Path) -> None:
    partial = line(2, "batch a", more=True) + line(3, "batch b", more=True)
    write_log(tmp_path, "s", line(1, "one"), partial)
    session = ags.open_store(tmp_path).get("s")
    assert session.latest_seq == 1
    assert not (tmp_path / "s.jsonl.quarantine").exists()
    assert session.append(Event.new("test/n")) == 2
    assert (tmp_path / "s.jsonl.quarantine").read_bytes() == partial + b"\n"


@pytest.mark.parametrize(
    "tail",
    [
        line(2, "batch a", more=True) + line(3, "batch b", more=True),
        line(2, "batch a", more=True) + b'{"seq":3,"ty',
        b'{"seq":2,"ty',
    ],
    ids=["unfinished-batch", "batch-cut-short", "torn-line"],
)
def test_list_counts_what_readers_read_of_a_log_with_a_torn_tail(
    tmp_path: Path, tail: bytes
) -> None:
    write_log(tmp_path, "s", line(1, "one"), tail)
    store = ags.open_store(tmp_path)
    [info] = store.list()
    assert info.last_seq == store.get("s").latest_seq == 1


def test_writer_repairs_a_torn_tail_left_by_another_crashed_writer(tmp_path: Path) -> None:
    store = ags.open_store(tmp_path)
    session = store.get("s")
    session.append(Event.new("user/message", Message.user("one")))
    with open(tmp_path / "s.jsonl", "ab") as f:  # a crashed writer's half line
        f.write(b'{"seq":2,"type":"user/message","da')
    assert session.append(Event.new("user/message", Message.user("two"))) == 2
    assert texts(ags.open_store(tmp_path).get("s")) == ["one", "two"]
    assert (tmp_path / "s.jsonl.quarantine").read_bytes() == b'{"seq":2,"type":"user/message","da\n'


def test_corrupt_middle_line_raises_naming_file_line_and_offset(tmp_path: Path) -> None:
    bad = b"this is not json\n"
    path = write_log(tmp_path, "s", line(1, "one"), bad, line(3, "three"))
    with pytest.raises(CorruptLogError) as info:
        ags.open_store(tmp_path).get("s")
    err = info.value
    assert (err.path, err.line, err.offset) == (str(path), 2, len(line(1, "one")))
    assert str(path) in str(err) and "line 2" in str(err)
    assert "byte offset" in str(err) and err.session_id == "s"
    assert path.read_bytes() == line(1, "one") + bad + line(3, "three")  # nothing changed


def test_corrupt_line_before_a_compaction_marker_surfaces_on_full_read(tmp_path: Path) -> None:
    marker = (
        b'{"seq":3,"type":"session/compaction","time":"2026-01-01T00:00:00Z",'
        b'"data":{"summary":{"role":"user","parts":[{"type":"text","text":"sum"}]},'
        b'"firstKeptSeq":3}}\n'
    )
    write_log(tmp_path, "s", line(1, "one"), b"{broken\n", marker, line(4, "four"))
    session = ags.open_store(tmp_path).get("s")  # opening reads from the marker on
    assert texts(session) == ["sum", "four"]
    with pytest.raises(CorruptLogError) as info:
        session.read()
    assert info.value.line == 2


def test_quarantine_moves_a_corrupt_middle_line_aside_and_carries_on(tmp_path: Path) -> None:
    bad = b'{"seq":2,"type":"user/message","data":{"role":"us\n'
    path = write_log(tmp_path, "s", line(1, "one"), bad, line(3, "three"))
    session = ags.open_store(tmp_path, on_corrupt="quarantine").get("s")
    assert texts(session) == ["one", "three"]
    assert [e.seq for e in session.read()] == [1, 3]
    assert (tmp_path / "s.jsonl.quarantine").read_bytes() == bad
    assert path.read_bytes() == line(1, "one") + b" " * (len(bad) - 1) + b"\n" + line(3, "three")
    # The blanked line stays skipped for every reader, also a strict one.
    assert [e.seq for e in ags.open_store(tmp_path).get("s").read()] == [1, 3]
    assert session.append(Event.new("test/n")) == 4


def test_a_payload_that_is_not_a_message_is_kept_but_not_derived(tmp_path: Path) -> None:
    odd = b'{"seq":2,"type":"user/message","data":{"role":"nope"}}\n'
    write_log(tmp_path, "s", line(1, "one"), odd, line(3, "three"))
    session = ags.open_store(tmp_path).get("s")
    assert [e.seq for e in session.read()] == [1, 2, 3]
    assert texts(session) == ["one", "three"]


def test_a_line_without_a_seq_is_corrupt(tmp_path: Path) -> None:
    write_log(tmp_path, "s", line(1, "one"), b'{"type":"user/message"}\n', line(3, "three"))
    with pytest.raises(CorruptLogError):
        ags.open_store(tmp_path).get("s")


def test_blank_log_file_is_an_empty_session(tmp_path: Path) -> None:
    write_log(tmp_path, "s")
    store = ags.open_store(tmp_path)
    assert not store.exists("s")
    assert store.get("s").latest_seq == 0
    assert store.list() == []


# -- sizes ------------------------------------------------------------------------------------


def test_lines_of_several_megabytes_round_trip(tmp_path: Path) -> None:
    store = ags.open_store(tmp_path)
    session = store.get("big")
    big = "é" * (3 << 20)
    session.append(Event.new("user/message", Message.user(big)))
    session.append(Event.new("user/message", Message.user("after")))
    assert os.path.getsize(tmp_path / "big.jsonl") > 6 << 20
    reopened = ags.open_store(tmp_path).get("big")
    assert texts(reopened) == [big, "after"]
    assert [e.seq for e in reopened.read(after=1)] == [2]
    assert reopened.read()[0].decode(Message).text == big


# -- names and permissions --------------------------------------------------------------------


def test_session_files_and_directories_are_owner_only(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        root = tmp_path / "new" / "store"
        store = ags.open_store(root)
        store.get("s").append(Event.new("test/n"))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(root / "s.jsonl").st_mode) == 0o600


def test_quarantine_sidecar_is_owner_only(tmp_path: Path) -> None:
    write_log(tmp_path, "s", line(1, "one"), b"torn")
    old = os.umask(0)
    try:
        ags.open_store(tmp_path).get("s").append(Event.new("test/n"))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "s.jsonl.quarantine").st_mode) == 0o600


@pytest.mark.parametrize(
    "session_id", ["../escape", "..", ".", "/etc/passwd", "a/../../b", "..\\..\\x", "x\x00y"]
)
def test_hostile_ids_stay_inside_the_store_directory(tmp_path: Path, session_id: str) -> None:
    root = tmp_path / "store"
    store = JsonlStore(root)
    session = store.get(session_id)
    session.append(Event.new("test/n"))
    assert isinstance(session._log, JsonlLog)
    path = Path(session.location)
    assert path.parent == root.resolve()
    assert ".." not in path.name and "/" not in path.name
    # (and the catalog's journal and index in .meta)
    assert sorted(n for n in os.listdir(root) if n != ".meta") == [path.name]
    assert [i.id for i in store.list()] == [session_id]


def test_common_ids_keep_readable_file_names(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    assert Path(store.path_for("slack:C001")).name == "slack_C001.jsonl"
    assert Path(store.path_for("cli:20260905-101112.123")).name == "cli_20260905-101112.123.jsonl"
    assert Path(store.path_for("a_b")).name != Path(store.path_for("a:b")).name


def test_long_ids_get_short_hashed_names_and_list_returns_the_real_id(tmp_path: Path) -> None:
    store = ags.open_store(tmp_path)
    long_a = "slack:C001:t:" + "9" * 400
    long_b = "slack:C001:t:" + "9" * 399 + "8"
    store.get(long_a).append(Event.new("test/n", {"n": "a"}))
    store.get(long_b).append(Event.new("test/n", {"n": "b"}))
    names = [n for n in os.listdir(tmp_path) if n.endswith(".jsonl")]
    assert len(names) == 2 and all(len(n.encode()) <= 255 for n in names)
    assert sorted(i.id for i in store.list()) == sorted([long_a, long_b])
    assert ags.open_store(tmp_path).get(long_b).read()[0].payload() == {"n": "b"}
    store.delete(long_a)
    assert [i.id for i in store.list()] == [long_b]
    assert sorted(n for n in os.listdir(tmp_path) if n != ".meta") == sorted(
        [Path(store.path_for(long_b)).name, Path(store.path_for(long_b)).stem + ".id"]
    )


def test_foreign_files_in_the_directory_are_ignored(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hi")
    (tmp_path / "weird~name.jsonl").write_text("{}\n")
    (tmp_path / "a_b.jsonl.quarantine").write_text("junk\n")
    store = ags.open_store(tmp_path)
    store.get("real").append(Event.new("test/n"))
    assert [i.id for i in store.list()] == ["real"]


def test_store_path_that_is_a_file_is_unavailable(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(StoreUnavailable):
        ags.open_store(target)


# -- opening reads only the tail --------------------------------------------------------------


def test_open_reads_from_the_last_compaction_marker_and_read_still_returns_everything(
    tmp_path: Path,
) -> None:
    store = ags.open_store(tmp_path)
    session = store.get("s")
    for n in range(50):
        session.append(Event.new("user/message", Message.user(f"m{n}")))
    summary = ags.events.Compaction(
        summary=Message.user("summary"), first_kept_seq=50, retained_tail=[Message.user("m49")]
    )
    marker_seq = session.append(Event.new("session/compaction", summary))
    session.append(Event.new("user/message", Message.user("after")))
    reopened = ags.open_store(tmp_path).get("s")
    assert isinstance(reopened._log, JsonlLog)
    assert reopened._window_start == marker_seq
    assert len(reopened._window) == 2
    assert texts(reopened) == ["summary", "m49", "after"]
    assert [e.seq for e in reopened.read()] == list(range(1, 53))
    assert [e.seq for e in reopened.read(after=10, limit=2)] == [11, 12]


def test_cache_is_keyed_by_resolved_path(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    store_a, store_b = ags.open_store(real), ags.open_store(tmp_path / "link")
    assert isinstance(store_a, JsonlStore) and isinstance(store_b, JsonlStore)
    assert store_a._catalog.cache_key("x") == store_b._catalog.cache_key("x")
    other = ags.open_store(tmp_path / "other")
    assert store_a.get("cli:default") is not other.get("cli:default")


# -- durability -------------------------------------------------------------------------------


@pytest.mark.parametrize(("durability", "syncs"), [("flush", 0), ("fsync", 4)])
def test_fsync_durability_syncs_every_append_and_flush_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str, syncs: int
) -> None:
    import agentsession.backends.jsonl.logfile as logfile

    calls: list[int] = []
    real = logfile._datasync
    monkeypatch.setattr(logfile, "_datasync", lambda fd: (calls.append(fd), real(fd)))
    session = ags.open_store(tmp_path, durability=durability).get("d")
    session.append(Event.new("test/n"))  # first append: general path
    session.append(Event.new("test/n"))  # later appends: fast path
    session.append(Event.new("test/n"))
    session.append_many([Event.new("test/n"), Event.new("test/n")])
    assert len(calls) == syncs


# -- data safety: symlinks, special files, delete, the .meta directory, descriptors ----------


def outside_log(tmp_path: Path) -> Path:
    victim = tmp_path / "outside.jsonl"
    victim.write_bytes(line(1, "outside the store"))
    return victim


def test_a_symlinked_session_file_is_refused_and_the_target_untouched(tmp_path: Path) -> None:
    victim = outside_log(tmp_path)
    store = ags.open_store(tmp_path / "s")
    (tmp_path / "s" / "evil.jsonl").symlink_to(victim)
    before = victim.read_bytes()
    with pytest.raises(ags.StorageError, match="symbolic link"):
        store.get("evil")
    with pytest.raises(ags.StorageError, match="symbolic link"):
        store.delete("evil")
    assert victim.read_bytes() == before
    assert not (tmp_path / "s" / "evil.jsonl.quarantine").exists()
    assert not store.exists("evil")
    assert [info.id for info in store.list()] == []


def test_a_symlinked_quarantine_sidecar_is_never_written_through(tmp_path: Path) -> None:
    victim = outside_log(tmp_path)
    store_dir = tmp_path / "s"
    write_log(store_dir, "torn", line(1, "kept"), b'{"seq":2,"ty')
    (store_dir / "torn.jsonl.quarantine").symlink_to(victim)
    before = victim.read_bytes()
    session = ags.open_store(store_dir).get("torn")  # reading does not move it aside
    assert session.latest_seq == 1
    with pytest.raises(ags.StorageError):  # the torn tail cannot be moved aside: nothing lost
        session.append(Event.new("test/n"))
    assert victim.read_bytes() == before
    assert (store_dir / "torn.jsonl").read_bytes().endswith(b'{"seq":2,"ty')


def test_a_fifo_in_place_of_a_session_file_is_refused(tmp_path: Path) -> None:
    store = ags.open_store(tmp_path / "s")
    os.mkfifo(tmp_path / "s" / "pipe.jsonl")
    with pytest.raises(ags.StorageError, match="not a regular file"):
        store.get("pipe")
    with pytest.raises(ags.StorageError, match="not a regular file"):
        store.delete("pipe")
    assert not store.exists("pipe")


def test_a_log_file_replaced_under_a_session_is_reopened_and_nothing_is_written_to_it(
    tmp_path: Path,
) -> None:
    store = JsonlStore(tmp_path)
    session = store.get("s")
    session.append(Event.new("test/n", {"life": 1}))
    log = session._log
    assert isinstance(log, JsonlLog)
    session.close()  # the descriptor is closed: the log remembers which file it read
    other = JsonlStore(tmp_path)
    other.delete("s")
    other.get("s").append_many([Event.new("test/n", {"life": 2}) for _ in range(2)])
    before = Path(session.location).read_bytes()
    with session.state_lock:
        assert log.refresh(session._view) is REOPEN
        assert log.append(session._view, [Event.new("test/n")], -1, None) is REOPEN
    assert Path(session.location).read_bytes() == before
    assert session.append(Event.new("test/n", {"life": 2})) == 3
    lines = Path(session.location).read_bytes().splitlines()
    assert [json.loads(line)["data"]["life"] for line in lines] == [2, 2, 2]


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only directory")
def test_delete_in_a_directory_it_may_not_write_loses_nothing(tmp_path: Path) -> None:
    store = ags.open_store(tmp_path / "s")
    session = store.get("kept")
    session.append_many([Event.new("test/n", {"n": n}) for n in range(6)])
    (tmp_path / "s").chmod(0o500)
    try:
        with pytest.raises(ags.StorageError, match="nothing was deleted"):
            store.delete("kept")
    finally:
        (tmp_path / "s").chmod(0o700)
    assert len(ags.open_store(tmp_path / "s").get("kept").read()) == 6


def test_delete_that_cannot_rename_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same failure as a read-only directory, for a test run as root."""
    store = ags.open_store(tmp_path / "s")
    store.get("kept").append_many([Event.new("test/n", {"n": n}) for n in range(6)])

    def refuse(src: str, dst: str) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "rename", refuse)
    with pytest.raises(ags.StorageError, match="nothing was deleted"):
        store.delete("kept")
    monkeypatch.undo()
    assert len(ags.open_store(tmp_path / "s").get("kept").read()) == 6
    assert not list((tmp_path / "s").glob("*.deleting"))


def test_the_meta_directory_is_owner_only_under_any_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        store = ags.open_store(tmp_path / "s")
        store.meta_set("active", "slack:C1", "slack:C1:new:1")
    finally:
        os.umask(old)
    for directory in (tmp_path / "s" / ".meta", tmp_path / "s" / ".meta" / "active"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory


def test_a_failed_meta_write_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ags.open_store(tmp_path / "s")
    store.meta_set("active", "k", "v1")

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(ags.StorageError, match="No space left"):
        store.meta_set("active", "k", "v2")
    monkeypatch.undo()
    assert store.meta_get("active", "k") == "v1"
    assert not list((tmp_path / "s" / ".meta").rglob("*.tmp"))


def test_open_descriptors_stay_within_the_bound(tmp_path: Path) -> None:
    store = ags.open_store(tmp_path / "s", max_open_files=4)
    assert isinstance(store, JsonlStore)
    sessions = [store.get(f"s{n}") for n in range(20)]
    for n, session in enumerate(sessions):
        session.append(Event.new("test/n", {"n": n}))
    fds = os.listdir(f"/proc/{os.getpid()}/fd")
    open_logs = [  # (the catalog's journal in .meta is one descriptor more, not a log)
        fd
        for fd in fds
        if os.path.realpath(f"/proc/{os.getpid()}/fd/{fd}").startswith(str(tmp_path / "s"))
        and ".meta" not in os.path.realpath(f"/proc/{os.getpid()}/fd/{fd}")
    ]
    assert len(open_logs) <= 4
    # Sessions whose descriptor was closed reopen on use and still see everything.
    for n, session in enumerate(sessions):
        session.append(Event.new("test/n", {"n": n, "again": True}))
        assert [e.seq for e in session.read()] == [1, 2]


def test_the_default_bound_follows_the_descriptor_limit(tmp_path: Path) -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # What this process holds open already (a test worker's pipes, other tests' files), plus
    # room for the store's own: its index database, the journal, and a quarter for the logs.
    limit = len(os.listdir("/proc/self/fd")) + 64
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        store = ags.open_store(tmp_path / "s")
        assert isinstance(store, JsonlStore)
        assert store.max_open_files == limit // 4
        for n in range(3 * limit):  # far more sessions than descriptors
            store.get(f"s{n}").append(Event.new("test/n", {"n": n}))
        assert len(store.list()) == 3 * limit
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.parametrize("seqs", [(1, 2, 2, 3), (1, 3, 2, 4)])
def test_duplicate_or_decreasing_seqs_raise_or_are_quarantined(
    tmp_path: Path, seqs: tuple[int, ...]
) -> None:
    write_log(tmp_path / "s", "dup", *(line(seq, f"m{i}") for i, seq in enumerate(seqs)))
    reason = "duplicate or out of order" if seqs[1] == 2 else "jumps ahead"
    with pytest.raises(CorruptLogError, match=reason):
        ags.open_store(tmp_path / "s").get("dup").read()
    session = ags.open_store(tmp_path / "s", on_corrupt="quarantine").get("dup")
    kept = [e.seq for e in session.read()]
    assert kept == sorted(set(kept)) and len(kept) == 3
    assert (tmp_path / "s" / "dup.jsonl.quarantine").exists()
    # The one line out of place is taken out: the next append follows the kept seqs.
    assert kept == [1, 2, 3] if seqs[1] == 2 else kept == [1, 2, 4]
    assert session.append(ags.Event.new("test/n")) == kept[-1] + 1


@pytest.mark.parametrize(
    ("seqs", "kept", "out"),
    [((1, 2, 90, 3, 4, 5), [1, 2, 3, 4, 5], 90), ((6, 2, 3, 4, 5, 1), [2, 3, 4, 5], 6)],
)
def test_a_line_whose_seq_jumps_ahead_is_taken_out_alone(
    tmp_path: Path, seqs: tuple[int, ...], kept: list[int], out: int
) -> None:
    write_log(tmp_path / "s", "j", *(line(seq, f"m{i}") for i, seq in enumerate(seqs)))
    session = ags.open_store(tmp_path / "s", on_corrupt="quarantine").get("j")
    assert [e.seq for e in session.read()] == kept
    assert session.append(ags.Event.new("test/n")) == kept[-1] + 1  # never a seq stored twice
    assert b'"seq":%d' % out in (tmp_path / "s" / "j.jsonl.quarantine").read_bytes()


def test_a_complete_foreign_last_line_raises_instead_of_being_cut_off(tmp_path: Path) -> None:
    foreign = b'{"Type":"user","Content":"written by another program"}\n'
    path = write_log(tmp_path, "s", line(1, "one"), line(2, "two"), foreign)
    with pytest.raises(CorruptLogError, match="line 3"):
        ags.open_store(tmp_path).get("s")
    assert path.read_bytes() == line(1, "one") + line(2, "two") + foreign  # nothing moved
    assert not (tmp_path / "s.jsonl.quarantine").exists()
    # Asked to, quarantine moves it aside and keeps a copy.
    session = ags.open_store(tmp_path, on_corrupt="quarantine").get("s")
    assert session.latest_seq == 2
    assert (tmp_path / "s.jsonl.quarantine").read_bytes().startswith(foreign.rstrip(b"\n"))


# -- opening at the tail, and reading by seq without decoding the history ---------------------


def big_log(tmp_path: Path, count: int, *, blank_every: int = 0, seed: int = 7) -> list[int]:
    """A log of ``count`` lines of varied length (some blanked, as quarantine leaves them);
    returns the seqs of the events that remain."""
    import random

    rng = random.Random(seed)
    chunks, seqs = [], []
    for seq in range(1, count + 1):
        text = f"m{seq} " + "y" * rng.choice([0, 10, 200, 3000, 20000])
        encoded = line(seq, text)
        if blank_every and seq % blank_every == 0:
            chunks.append(b" " * (len(encoded) - 1) + b"\n")
        else:
            chunks.append(encoded)
            seqs.append(seq)
    write_log(tmp_path, "big", *chunks)
    return seqs


@pytest.mark.parametrize("blank_every", [0, 7])
def test_read_after_any_seq_finds_exactly_the_later_events(
    tmp_path: Path, blank_every: int
) -> None:
    seqs = big_log(tmp_path, 1500, blank_every=blank_every)  # ~5 MB
    session = ags.open_store(tmp_path).get("big")
    log = session._log
    assert isinstance(log, JsonlLog)
    assert log._size > 4 << 20 and not session._full
    for after in [0, 1, 2, 6, 7, 8, 500, 749, 750, 751, 1000, 1200, 1400, 1498, 1499, 1500]:
        expected = [s for s in seqs if s > after]
        got = session._storage_read(after, None)  # storage, not the in-memory tail
        assert [e.seq for e in got] == expected, after
        assert [e.seq for e in session._storage_read(after, 5)] == expected[:5], after
        assert [e.seq for e in session.read(after=after, limit=5)] == expected[:5], after
    assert session.latest_seq == seqs[-1]


def test_read_by_seq_across_a_line_longer_than_the_search_span(tmp_path: Path) -> None:
    write_log(
        tmp_path,
        "s",
        *(line(n, f"short {n}") for n in range(1, 50)),
        line(50, "z" * 300_000),
        *(line(n, f"short {n}") for n in range(51, 3000)),
    )
    session = ags.open_store(tmp_path).get("s")
    assert isinstance(session._log, JsonlLog)
    for after in range(0, 3000, 37):
        expected = list(range(after + 1, min(after + 3, 3000)))
        assert [e.seq for e in session._storage_read(after, 2)] == expected


def test_a_corrupt_line_far_behind_the_tail_does_not_stop_opening_or_recent_reads(
    tmp_path: Path,
) -> None:
    chunks = [line(n, "w" * 2000) for n in range(1, 2000)]
    chunks[10] = b"{broken\n"
    write_log(tmp_path, "s", *chunks)
    session = ags.open_store(tmp_path).get("s")
    assert session.latest_seq == 1999
    assert [e.seq for e in session.read(after=1990)] == list(range(1991, 2000))
    with pytest.raises(CorruptLogError) as info:
        session.read()  # the whole log is checked when it is read
    assert info.value.line == 11


def test_a_big_log_with_a_torn_tail_opens_and_only_the_tail_is_moved_aside(
    tmp_path: Path,
) -> None:
    torn = b'{"seq":1501,"type":"user/mess'
    seqs = big_log(tmp_path, 1500)
    path = tmp_path / "big.jsonl"
    intact = path.read_bytes()
    with path.open("ab") as f:
        f.write(torn)
    session = ags.open_store(tmp_path).get("big")
    assert session.latest_seq == seqs[-1]
    assert path.read_bytes() == intact + torn
    assert session.append(Event.new("user/message", Message.user("next"))) == 1501
    assert path.read_bytes().startswith(intact + b'{"seq":1501,')
    assert (tmp_path / "big.jsonl.quarantine").read_bytes() == torn + b"\n"
    assert [e.seq for e in session.read(after=1499)] == [1500, 1501]


def test_a_tail_of_blank_lines_is_stepped_over_to_the_last_event(tmp_path: Path) -> None:
    big_log(tmp_path, 200)
    path = tmp_path / "big.jsonl"
    with path.open("ab") as f:
        for _ in range(200):  # ~200 KB of quarantined (blanked) lines at the end
            f.write(b" " * 1000 + b"\n")
    session = ags.open_store(tmp_path).get("big")
    assert session.latest_seq == 200
    assert session.append(Event.new("test/n")) == 201
    assert [e.seq for e in ags.open_store(tmp_path).get("big").read(after=199)] == [200, 201]


def test_a_corrupt_last_line_of_a_big_log_is_quarantined_on_request(tmp_path: Path) -> None:
    big_log(tmp_path, 300)
    path = tmp_path / "big.jsonl"
    with path.open("ab") as f:
        f.write(b'{"not":"an event"}\n')
    with pytest.raises(CorruptLogError):
        ags.open_store(tmp_path).get("big")
    session = ags.open_store(tmp_path, on_corrupt="quarantine").get("big")
    assert session.latest_seq == 300
    assert session.append(Event.new("test/n")) == 301


# -- list(): created_at from the first line ---------------------------------------------------


def timed_line(seq: int, moment: str, filler: int = 0) -> bytes:
    data = json.dumps({"n": seq, "filler": "x" * filler})
    return f'{{"seq":{seq},"type":"test/n","time":"{moment}","data":{data}}}\n'.encode()


def test_created_at_is_unknown_when_the_first_line_is_longer_than_one_read(
    tmp_path: Path,
) -> None:
    long_first = timed_line(1, "2026-01-01T00:00:00Z", filler=70_000)
    assert len(long_first) > 64 << 10
    write_log(tmp_path, "long", long_first, timed_line(2, "2026-01-02T00:00:00Z"))
    short_first = timed_line(1, "2026-01-03T00:00:00.5Z", filler=60_000)
    write_log(tmp_path, "short", short_first, timed_line(2, "2026-01-04T00:00:00Z"))
    store = ags.open_store(tmp_path, catalog=False)  # the files' listing (the catalog reads)
    infos = {info.id: info for info in store.list()}
    assert set(infos) == {"long", "short"}
    assert infos["long"].created_at is None
    assert infos["long"].last_seq == 2
    assert infos["long"].size == (tmp_path / "long.jsonl").stat().st_size
    expected = dt.datetime(2026, 1, 3, 0, 0, 0, 500000, tzinfo=dt.timezone.utc)
    assert infos["short"].created_at == expected == store.get("short").read()[0].time
    assert [e.seq for e in store.get("long").read()] == [1, 2]  # the log itself is fine
    file_store = JsonlFileStore(tmp_path / "long.jsonl")
    [info] = file_store.list()
    assert (info.id, info.created_at, info.last_seq) == ("long", None, 2)
    [info] = JsonlFileStore(tmp_path / "short.jsonl").list()
    assert info.created_at == expected


def test_created_at_steps_over_blank_first_lines_and_not_over_a_torn_one(
    tmp_path: Path,
) -> None:
    write_log(tmp_path, "blanked", b"    \n", timed_line(2, "2026-02-01T00:00:00Z"))
    write_log(tmp_path, "torn", b'{"seq":1,"type":"test/n","ti')
    listing = ags.open_store(tmp_path, catalog=False).list()  # the files' listing
    infos = {info.id: info.created_at for info in listing}
    assert infos == {"blanked": dt.datetime(2026, 2, 1, tzinfo=dt.timezone.utc), "torn": None}
    # The catalog lists sessions with events: the torn line is none.
    assert [i.id for i in ags.open_store(tmp_path).list()] == ["blanked"]


def test_created_at_of_agentkit_logs_is_their_first_lines_time(tmp_path: Path) -> None:
    first = (
        b'{"ID":"","Seq":1,"SessionID":"ak","AgentID":"coder","Type":"turn/start","Data":{},'
        b'"CreatedAt":"2026-03-04T05:06:07.123456789+02:00","UserID":""}\n'
    )
    second = first.replace(b'"Seq":1', b'"Seq":2').replace(
        b"2026-03-04T05:06:07.123456789+02:00", b"2026-03-05T00:00:00Z"
    )
    write_log(tmp_path, "ak", first, second)
    zero = first.replace(b"2026-03-04T05:06:07.123456789+02:00", b"0001-01-01T00:00:00Z")
    write_log(tmp_path, "zero", zero)
    store = ags.open_store(tmp_path)
    infos = {info.id: info.created_at for info in store.list()}
    expected = dt.datetime(2026, 3, 4, 3, 6, 7, 123456, tzinfo=dt.timezone.utc)
    assert infos == {"ak": expected, "zero": None}  # Go's zero time is no time
    assert store.get("ak").read()[0].time == expected
    assert store.get("zero").read()[0].time is None
    # A store writing agentkit's dialect reports the time of the first line it wrote.
    ak_store = ags.open_store(tmp_path / "ak-store", dialect="agentkit")
    session = ak_store.get("slack:C1")
    session.append(Event.new("user/message", Message.user("hi")))
    session.append(Event.new("user/message", Message.user("again")))
    [info] = ak_store.list()
    assert info.created_at is not None
    assert info.created_at == session.read()[0].time
    [line_one, _] = (tmp_path / "ak-store" / "slack_C1.jsonl").read_bytes().splitlines()
    assert line_one.startswith(b'{"ID":')


def test_compare_and_set_locks_beside_the_entries_and_is_never_an_entry(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        store = ags.open_store(tmp_path / "s")
        assert store._meta_cas("app", "k", None, "v")
    finally:
        os.umask(old)
    lock = tmp_path / "s" / ".meta" / "app" / ".cas.lock"
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600
    assert sorted(p.name for p in lock.parent.iterdir()) == [".cas.lock", "k.json"]
    assert store._meta_cas("app", "k", "v", None)
    assert sorted(p.name for p in lock.parent.iterdir()) == [".cas.lock"]
    assert store.list() == []
    assert store.meta_get("app", ".cas.lock") is None
    store.meta_set("app", ".cas.lock", "a key that looks like the lock")
    assert store._meta_cas("app", ".cas.lock", "a key that looks like the lock", "changed")
    assert store.meta_get("app", ".cas.lock") == "changed"
    assert lock.read_bytes() == b""


def test_compare_and_set_of_agentkits_files_takes_the_store_directorys_lock(
    tmp_path: Path,
) -> None:
    """agentkit's sidecar files get no lock file beside them: their compare-and-set waits for
    an exclusive ``flock`` of the store directory (held here by another open file), and no
    ``.meta`` appears in the agentkit layout."""
    import fcntl

    root = tmp_path / "ak"
    store = ags.open_store(root, dialect="agentkit")
    results: list[bool] = []
    holder = os.open(root, os.O_RDONLY)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        racer = threading.Thread(
            target=lambda: results.append(
                store._meta_cas("active", "slack:C1", None, "slack:C1:new")
            )
        )
        racer.start()
        racer.join(0.3)
        assert racer.is_alive() and results == []  # waiting for the directory's lock
        fcntl.flock(holder, fcntl.LOCK_UN)
        racer.join(10)
    finally:
        os.close(holder)
    assert results == [True]
    assert store.meta_get("active", "slack:C1") == "slack:C1:new"
    assert not store._meta_cas("active", "slack:C1", None, "slack:C1:other")
    assert store._meta_cas("active", "slack:C1", "slack:C1:new", None)
    assert store.meta_get("active", "slack:C1") is None
    assert not (root / ".meta").exists()


def test_a_duplicate_after_the_marker_a_session_opens_at_leaves_the_marker_in_place(
    tmp_path: Path,
) -> None:
    # Opening reads from the latest compaction marker, where the seq before is not known: the
    # marker must not be taken for a line that jumps ahead of the duplicate after it.
    store = ags.open_store(tmp_path)
    session = store.get("s")
    for n in range(3):
        with session.turn(agent="a") as turn:
            turn.user(f"q{n}")
            turn.assistant(f"a{n}")
    session.compact(ags.Message.user("summary"), keep_turns=1)
    marker = session.latest_seq
    session.append(ags.Event.new("test/n", {"n": 1}))
    store.close()
    path = tmp_path / "s.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(marker, lines[2])  # an older line again, right after the marker
    path.write_bytes(b"".join(lines))
    reopened = ags.open_store(tmp_path, on_corrupt="quarantine").get("s")
    assert [e.seq for e in reopened.read()] == list(range(1, marker + 2))
    assert reopened.messages()[0].text == "summary"
    assert reopened.append(ags.Event.new("test/n", {"n": 2})) == marker + 2


def test_a_session_opened_read_only_reopens_to_append_and_repairs_the_torn_tail() -> None:
    # As the user nobody, whose log is read-only (0400): the session opens the file read-only
    # and reads up to the torn line; an append is refused with the OS reason and writes
    # nothing; once the file may be written, the same session object reopens it, moves the
    # torn tail aside and appends at the next seq.
    from .test_cli import SRC, read_only_runner, shared_tmp

    script = textwrap.dedent(
        """
        import os, sys
        import agentsession as ags
        root = sys.argv[1]
        session = ags.open_store(root, create=False).get("s")
        print(session.latest_seq, [e.seq for e in session.read()])
        try:
            session.append(ags.Event.new("test/n"))
        except ags.StorageError as exc:
            print("refused:", "Permission denied" in str(exc))
        os.chmod(os.path.join(root, "s.jsonl"), 0o600)
        print(session.append(ags.Event.new("test/n")))
        """
    )
    torn = b'{"seq":3,"type":"user/mess'
    with shared_tmp() as base:
        root = base / "store"
        path = write_log(root, "s", line(1, "one"), line(2, "two"), torn)
        runner = read_only_runner("user", root)  # skips unless root with setpriv(1)
        os.chown(root, 65534, 65534)
        os.chown(path, 65534, 65534)
        path.chmod(0o400)
        proc = subprocess.run(
            [*runner, sys.executable, "-c", script, str(root)],
            capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(SRC)},
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines() == ["2 [1, 2]", "refused: True", "3"]
        assert (root / "s.jsonl.quarantine").read_bytes() == torn + b"\n"
        assert [e.seq for e in ags.open_store(root).get("s").read()] == [1, 2, 3]


def test_a_catch_up_that_fails_under_the_file_lock_releases_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An I/O error while catching up on another writer's events (with the file lock held)
    fails the append and lets go of the lock, so no writer is locked out afterwards."""
    import errno
    import fcntl

    from agentsession.backends.jsonl import logfile

    mine, theirs = JsonlStore(tmp_path), JsonlStore(tmp_path)
    session = mine.get("s")
    session.append(Event.new("user/message", Message.user("one")))
    # Another writer appends: ours must catch up (under the file lock) before appending.
    theirs.get("s").append(Event.new("user/message", Message.user("two")))

    def failing(fd: int, size: int, offset: int) -> bytes:
        raise OSError(errno.EIO, "injected read error")

    monkeypatch.setattr(logfile, "pread_all", failing)
    with pytest.raises(ags.StorageError, match="injected read error"):
        session.append(Event.new("user/message", Message.user("three")))
    monkeypatch.undo()

    path = tmp_path / "s.jsonl"
    with path.open("rb") as other:  # another open file description: flock conflicts with ours
        fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if still held
        fcntl.flock(other.fileno(), fcntl.LOCK_UN)
    session.append(Event.new("user/message", Message.user("four")))
    assert texts(JsonlStore(tmp_path).get("s")) == ["one", "two", "four"]
    mine.close()
    theirs.close()


def _log_ending_in_a_moved_marker(tmp_path: Path) -> Path:
    """A log whose last line is its compaction marker, moved there from the middle: the lines
    before it carry higher seqs than the marker's."""
    store = JsonlStore(tmp_path)
    session = store.get("s")
    for n in range(6):
        session.append(Event.new("user/message", Message.user(f"m{n}")))
    session.compact(Message.user("summary"), keep_turns=1)
    for n in range(3):
        session.append(Event.new("user/message", Message.user(f"after {n}")))
    store.close()
    path = tmp_path / "s.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    marker = next(i for i, line in enumerate(lines) if b'"session/compaction"' in line)
    lines[marker], lines[-1] = lines[-1], lines[marker]
    path.write_bytes(b"".join(lines))
    return path


def test_a_tail_that_a_line_before_it_overtakes_is_corrupt(tmp_path: Path) -> None:
    """Opening reads the log from its last compaction marker; when a line before the marker
    has a higher seq (lines moved), the marker's seq is not the log's latest: the damage is
    reported, never an append reusing a seq."""
    _log_ending_in_a_moved_marker(tmp_path)
    with pytest.raises(CorruptLogError, match="jumps ahead"):
        JsonlStore(tmp_path).get("s")


def test_a_tail_that_a_line_before_it_overtakes_is_quarantined(tmp_path: Path) -> None:
    path = _log_ending_in_a_moved_marker(tmp_path)
    session = JsonlStore(tmp_path, on_corrupt="quarantine").get("s")
    seqs = [event.seq for event in session.read()]
    assert seqs == sorted(set(seqs))
    assert session.latest_seq == seqs[-1]
    assert session.append(Event.new("test/n")) == seqs[-1] + 1
    stored = [json.loads(line)["seq"] for line in path.read_bytes().splitlines() if line.strip()]
    assert stored == sorted(set(stored))  # no seq twice in the file
