"""Power loss on the JSONL backend: record every write, truncate and sync a realistic run makes,
then rebuild the store as a power cut (or a killed process) could have left it, and reopen it.

How it works:

* **Recording.** A shim over the ``os`` calls the backend makes (``open``, ``write``,
  ``pwrite``, ``ftruncate``, ``fsync``, ``fdatasync``, ``rename``/``replace``, ``link``,
  ``unlink``, ``mkdir``, ``close``, and the aliases ``jsonl.logfile._write`` and
  ``jsonl.logfile._datasync`` that its hot path binds at import) logs, for the files inside
  the store directory, each data operation as (file, offset, bytes), each sync point, and each
  directory-entry change. After
  every call that returns to the caller (an append, an ``append_many``, each recorder helper,
  entering and leaving a turn or step, a compaction) the driver logs an *ack*: the session's
  latest seq, so everything up to it was acknowledged.
* **Crash states.** For each session log: its first ``j`` data operations applied, plus
  nothing, a prefix of the next write cut at random byte offsets and at 512- and 4096-byte file
  offsets, or that write's blocks left as zeros (the file's size reached the disk, its data did
  not). Every other file is as the run left it at the crash time. A state ``(j, cut)`` is
  reachable at any time up to the log's next sync after write ``j + 1``.
* **Checks.** The store opens and the session reads without changing the log (a torn tail is
  absent to readers); what reads back is a prefix of the recorded events, byte for byte,
  ending on a batch boundary (a batch is all or nothing); what was acknowledged is there:

  - ``durability="fsync"``: everything acknowledged before the latest moment the state can
    exist (power loss: "also syncs it to disk, so it survives a power loss");
  - ``durability="flush"``: everything acknowledged before the interrupted write began (a
    process crash: "survives the process crashing or being killed"). A power cut may lose any
    unsynced suffix, which the README allows; the row's notes say how much it lost at most.

  Then a new append gets the next seq and moves the torn tail to the quarantine sidecar, bytes
  intact, and the derived history is provider-valid.
* **Directory entries.** A new log's name is durable only once its directory is synced
  (POSIX; ext4, XFS and btrfs usually commit it with the file's own sync, other file systems
  need not). The row ``jsonl-fsync/dir-entry`` replays the states where directory changes not
  followed by a directory ``fsync`` are lost.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import agentsession as ags
from agentsession.backends.jsonl import logfile as jsonl_backend
from agentsession.events import encode_event

from ..common import (
    Config,
    Hang,
    Result,
    check_history,
    count_exception,
    deadline,
    encoded_key,
    note,
    tally,
    violation,
)

NAME = "power_loss"
TITLE = "JSONL power loss: replay every crash state of a recorded write/fsync sequence"

MAIN_ID = "slack:C001:t:1712345678.9"
LONG_ID = "long:" + "x" * 260  # a hashed file name with an .id sidecar
TRIAL_TIMEOUT = 20  # seconds: a hang is a failure, not a stuck harness



# -- recording ------------------------------------------------------------------------------


@dataclasses.dataclass
class Op:
    """One recorded operation. ``kind``: create, write, trunc, sync, dirsync, rename, unlink,
    link, mkdir, ack."""

    kind: str
    fid: int = -1
    name: str = ""
    dest: str = ""
    offset: int = 0
    data: bytes = b""
    seqs: dict[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _Fd:
    fid: int  # -1: a directory
    append: bool
    name: str  # relative name (of the file when opened, or of the directory)


class Recorder:
    """The shim: patches ``os`` and the JSONL module while active (:meth:`active`)."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.ops: list[Op] = []
        self._fds: dict[int, _Fd] = {}
        self._inodes: dict[tuple[int, int], int] = {}
        self._next_fid = 0
        self.file_names: dict[int, str] = {}  # fid -> name when created
        self._real: dict[str, Any] = {}
        self._lock = threading.RLock()

    def ack(self, seqs: dict[str, int]) -> None:
        self.ops.append(Op("ack", seqs=dict(seqs)))

    # path helpers
    def _rel(self, path: Any, dir_fd: int | None) -> str | None:
        if isinstance(path, int):
            return None
        path = os.fsdecode(path)
        if dir_fd is not None:
            base = self._fds.get(dir_fd)
            if base is None or base.fid != -1:
                return None
            path = os.path.join(self.root, base.name, path)
        full = os.path.normpath(os.path.abspath(path))
        if full == self.root:
            return "."
        if not full.startswith(self.root + os.sep):
            return None
        return os.path.relpath(full, self.root)

    def _fid_of(self, fd: int) -> int:
        st = self._real["fstat"](fd)
        key = (st.st_dev, st.st_ino)
        if key not in self._inodes:
            self._inodes[key] = self._next_fid
            self._next_fid += 1
        return self._inodes[key]

    # the shims
    def _open(self, path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        rel = self._rel(path, dir_fd)
        existed = rel is not None and os.path.lexists(os.path.join(self.root, rel))
        fd: int = self._real["open"](path, flags, mode, dir_fd=dir_fd)
        if rel is None:
            return fd
        with self._lock:
            st = self._real["fstat"](fd)
            if stat.S_ISDIR(st.st_mode):
                self._fds[fd] = _Fd(-1, False, rel)
                return fd
            if not existed:
                self._inodes.pop((st.st_dev, st.st_ino), None)  # a reused inode number
            fid = self._fid_of(fd)
            if not existed:
                self.ops.append(Op("create", fid=fid, name=rel))
                self.file_names[fid] = rel
            elif flags & os.O_TRUNC:
                self.ops.append(Op("trunc", fid=fid, offset=0))
            self._fds[fd] = _Fd(fid, bool(flags & os.O_APPEND), rel)
        return fd

    def _writer(self, real: Callable[[int, Any], int]) -> Callable[[int, Any], int]:
        def write(fd: int, data: Any) -> int:
            info = self._fds.get(fd)
            if info is None or info.fid < 0:
                return real(fd, data)
            with self._lock:
                if info.append:
                    offset = self._real["fstat"](fd).st_size
                else:
                    offset = os.lseek(fd, 0, os.SEEK_CUR)
                done = real(fd, data)
                self.ops.append(Op("write", fid=info.fid, offset=offset, data=bytes(data[:done])))
            return done

        return write

    def _pwrite(self, fd: int, data: Any, offset: int) -> int:
        info = self._fds.get(fd)
        done: int = self._real["pwrite"](fd, data, offset)
        if info is not None and info.fid >= 0:
            self.ops.append(Op("write", fid=info.fid, offset=offset, data=bytes(data[:done])))
        return done

    def _ftruncate(self, fd: int, length: int) -> None:
        self._real["ftruncate"](fd, length)
        info = self._fds.get(fd)
        if info is not None and info.fid >= 0:
            self.ops.append(Op("trunc", fid=info.fid, offset=length))

    def _sync(self, real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            real(fd)
            info = self._fds.get(fd)
            if info is None:
                return
            if info.fid < 0:
                self.ops.append(Op("dirsync", name=info.name))
            else:
                self.ops.append(Op("sync", fid=info.fid))

        return sync

    def _close(self, fd: int) -> None:
        self._fds.pop(fd, None)
        self._real["close"](fd)

    def _rename(self, which: str) -> Callable[..., None]:
        def rename(
            src: Any, dst: Any, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None
        ) -> None:
            a, b = self._rel(src, src_dir_fd), self._rel(dst, dst_dir_fd)
            self._real[which](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
            if a is not None and b is not None:
                self.ops.append(Op("rename", name=a, dest=b))

        return rename

    def _link(
        self, src: Any, dst: Any, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None,
        follow_symlinks: bool = True,
    ) -> None:
        a, b = self._rel(src, src_dir_fd), self._rel(dst, dst_dir_fd)
        self._real["link"](
            src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd, follow_symlinks=follow_symlinks
        )
        if a is not None and b is not None:
            self.ops.append(Op("link", name=a, dest=b))

    def _unlink(self, path: Any, *, dir_fd: int | None = None) -> None:
        rel = self._rel(path, dir_fd)
        self._real["unlink"](path, dir_fd=dir_fd)
        if rel is not None:
            self.ops.append(Op("unlink", name=rel))

    def _mkdir(self, path: Any, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        rel = self._rel(path, dir_fd)
        self._real["mkdir"](path, mode, dir_fd=dir_fd)
        if rel is not None:
            self.ops.append(Op("mkdir", name=rel))

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        names = ["open", "write", "pwrite", "ftruncate", "fsync", "fdatasync", "close",
                 "rename", "replace", "link", "unlink", "mkdir", "fstat"]
        self._real = {name: getattr(os, name) for name in names}
        shims: dict[str, Any] = {
            "open": self._open, "write": self._writer(self._real["write"]),
            "pwrite": self._pwrite, "ftruncate": self._ftruncate,
            "fsync": self._sync(self._real["fsync"]),
            "fdatasync": self._sync(self._real["fdatasync"]), "close": self._close,
            "rename": self._rename("rename"), "replace": self._rename("replace"),
            "link": self._link, "unlink": self._unlink, "mkdir": self._mkdir,
        }
        module_real = (jsonl_backend._write, jsonl_backend._datasync)
        for name, shim in shims.items():
            setattr(os, name, shim)
        # The hot path's aliases, bound at import: wrap whatever they are now.
        jsonl_backend._write = self._writer(module_real[0])
        jsonl_backend._datasync = self._sync(module_real[1])
        try:
            yield
        finally:
            for name in shims:
                setattr(os, name, self._real[name])
            jsonl_backend._write, jsonl_backend._datasync = module_real


# -- the recorded run -----------------------------------------------------------------------


def _text(n: int, tag: str) -> str:
    words = f"{tag} lorem ipsum dolor sit amet é ü 漢字 "
    return (words * (n // len(words) + 1))[:n]


def _drive(store: ags.BaseStore, rec: Recorder) -> None:
    """A realistic run: single appends, batches, recorded turns (plain and batched steps), a
    compaction, and a second session whose id needs a hashed file name."""
    main = store.get(MAIN_ID)
    other = store.get(LONG_ID)

    def ack() -> None:
        rec.ack({MAIN_ID: main.latest_seq, LONG_ID: other.latest_seq})

    def one(session: ags.Session, event: ags.Event) -> None:
        session.append(event)
        ack()

    one(main, ags.Event.new("user/message", ags.Message.user("Fix the failing test"), agent="coder",
                            user="U1"))
    one(main, ags.Event.new("assistant/message", ags.Message.assistant(_text(6000, "long")),
                            agent="coder"))
    one(other, ags.Event.new("myapp/note", {"n": 1, "text": _text(300, "other")}))
    one(main, ags.Event.new("myapp/progress", {"pct": 10}))
    main.append_many([
        ags.Event.new("turn/start", ags.events.TurnStart(), agent="coder"),
        ags.Event.new("user/message", ags.Message.user(_text(700, "batch")), agent="coder"),
        ags.Event.new("assistant/message", ags.Message.assistant(_text(3000, "answer")),
                      agent="coder"),
        ags.Event.new("turn/end", ags.events.TurnEnd(steps=0), agent="coder"),
    ])
    ack()
    for batch_steps in (False, True):
        with main.turn(agent="coder", user="U1", batch_steps=batch_steps) as turn:
            ack()
            turn.user(f"Run the tests (batched={batch_steps})")
            ack()
            for step_no in range(2):
                with turn.step() as step:
                    ack()
                    call = ags.ToolCall(id=f"c{batch_steps:d}{step_no}", name="run",
                                        arguments={"cmd": "pytest", "n": step_no})
                    step.assistant("Running.", tool_calls=[call])
                    ack()
                    step.tool_result(call.id, "run", _text(2500 + 1500 * step_no, "output"))
                    ack()
                    step.usage(input_tokens=1200, output_tokens=80)
                    ack()
                ack()
            turn.assistant("All green.")
            ack()
        ack()
    other.append_many([ags.Event.new("myapp/note", {"n": i, "text": _text(900, "b")})
                       for i in range(3)])
    ack()
    main.compact(ags.Message.user("Summary: tests were fixed."), keep_turns=1)
    ack()
    with main.turn(agent="coder", user="U1") as turn:
        ack()
        turn.user("And now?")
        ack()
        turn.assistant(_text(5000, "final"))
        ack()
    ack()
    main.append_many([ags.Event.new("myapp/blob", {"i": i, "blob": _text(1800, "blob")})
                      for i in range(3)])
    ack()
    one(main, ags.Event.new("myapp/progress", {"pct": 100}))


# -- replaying ------------------------------------------------------------------------------


@dataclasses.dataclass
class Recording:
    ops: list[Op]
    names: dict[int, str]
    events: dict[str, list[bytes]]  # session id -> encoded events, in seq order
    batch_ends: dict[str, set[int]]  # seqs that end a batch (0 included)
    fids: dict[str, int]  # session id -> its log's fid


def _record(root: Path, durability: str) -> Recording:
    root.mkdir(parents=True)
    store = ags.open_store(str(root), durability=durability)
    rec = Recorder(str(root))
    try:
        with rec.active():
            _drive(store, rec)
    finally:
        store.close()
    reader = ags.open_store(str(root), durability=durability)
    events: dict[str, list[bytes]] = {}
    ends: dict[str, set[int]] = {}
    fids: dict[str, int] = {}
    try:
        for sid in (MAIN_ID, LONG_ID):
            session = reader.open(sid)
            events[sid] = [encode_event(e) for e in session.read()]
            path = session.location
            name = os.path.relpath(path, os.path.realpath(root))
            fids[sid] = next(fid for fid, n in rec.file_names.items() if n == name)
            # Every call the driver made was acknowledged on its own: a crash state may end
            # only where an acknowledgement did (a batch is all or nothing).
            ends[sid] = {0} | {op.seqs.get(sid, 0) for op in rec.ops if op.kind == "ack"}
    finally:
        reader.close()
    return Recording(rec.ops, rec.file_names, events, ends, fids)


@dataclasses.dataclass
class State:
    """A crash state: the target log's bytes, and when it can exist."""

    sid: str
    content: bytes
    t_files: int  # every other file and every name as of ops[:t_files]
    required: int  # seqs 1..required were acknowledged and must read back
    label: str
    strict_names: bool = False  # drop name changes not followed by a directory fsync


def _apply(content: bytearray, op: Op) -> None:
    if op.kind == "write":
        end = op.offset + len(op.data)
        if len(content) < op.offset:
            content.extend(b"\0" * (op.offset - len(content)))
        content[op.offset:end] = op.data
    elif op.kind == "trunc":
        del content[op.offset:]


def _acked(ops: list[Op], t: int, sid: str) -> int:
    best = 0
    for op in ops[:t]:
        if op.kind == "ack":
            best = max(best, op.seqs.get(sid, 0))
    return best


def _cuts(op: Op, rng: Any, quick: bool) -> list[tuple[str, int, bool]]:
    """(label, bytes kept, zero-fill the rest) variants of an interrupted write."""
    n = len(op.data)
    cuts: set[int] = {1, n - 1} if n > 1 else set()
    for block in (512, 4096):
        first = (op.offset // block + 1) * block
        boundaries = list(range(first, op.offset + n, block))
        if quick and len(boundaries) > 2:
            boundaries = [boundaries[0], boundaries[-1]]
        cuts.update(b - op.offset for b in boundaries)
    if not quick and n <= 4096:
        cuts.update(range(1, n))  # full: every byte offset of a small write
    elif n > 2:
        cuts.update(rng.randrange(1, n) for _ in range(16 if quick else 512))
    out = [(f"cut {c}/{n}", c, False) for c in sorted(c for c in cuts if 0 < c < n)]
    out.append((f"zeros 0/{n}", 0, True))
    mid = ((op.offset // 512 + 1) * 512) - op.offset
    if 0 < mid < n:
        out.append((f"zeros {mid}/{n}", mid, True))
    return out


def _states(rec: Recording, sid: str, durability: str, rng: Any, quick: bool) -> Iterator[State]:
    fid = rec.fids[sid]
    ops = rec.ops
    data_idx = [i for i, op in enumerate(ops) if op.fid == fid and op.kind in ("write", "trunc")]
    sync_idx = [i for i, op in enumerate(ops) if op.fid == fid and op.kind == "sync"]
    content = bytearray()
    for j in range(len(data_idx) + 1):
        # The first j data operations are applied; the next one is interrupted.
        nxt = data_idx[j] if j < len(data_idx) else len(ops)
        later_syncs = [s for s in sync_idx if s > nxt]
        t_max = later_syncs[0] if later_syncs else len(ops)
        t_req = t_max if durability == "fsync" else nxt
        required = _acked(ops, t_req, sid)
        yield State(sid, bytes(content), t_req, required, f"after {j} writes")
        if j < len(data_idx) and ops[nxt].kind == "write":
            op = ops[nxt]
            for label, keep, zeros in _cuts(op, rng, quick):
                torn = bytearray(content)
                part = op.data[:keep] + (b"\0" * (len(op.data) - keep) if zeros else b"")
                _apply(torn, Op("write", offset=op.offset, data=part))
                yield State(sid, bytes(torn), t_req, required, f"write {j + 1} {label}")
        if j < len(data_idx):
            _apply(content, ops[nxt])


def _dir_entry_states(rec: Recording, sid: str) -> Iterator[State]:
    """fsync mode, strict POSIX names: a crash right before each sync-acknowledged append
    returns... after it returns, with directory changes since the last directory fsync lost."""
    ops = rec.ops
    for t, op in enumerate(ops):
        if op.kind != "ack":
            continue
        required = op.seqs.get(sid, 0)
        if not required:
            continue
        content = bytearray()
        for earlier in ops[:t]:
            if earlier.fid == rec.fids[sid]:
                _apply(content, earlier)
        yield State(sid, bytes(content), t + 1, required, f"ack at op {t}", strict_names=True)


def _materialize(rec: Recording, state: State, root: Path) -> None:
    """Write the crash state's store into ``root`` (which must not exist)."""
    names: dict[str, int] = {}  # name -> fid (-1: a directory)
    durable_names: dict[str, int] = {}
    contents: dict[int, bytearray] = {}
    for op in rec.ops[: state.t_files]:
        if op.kind == "create":
            names[op.name] = op.fid
            contents[op.fid] = bytearray()
        elif op.kind == "mkdir":
            names[op.name] = -1
        elif op.kind in ("write", "trunc"):
            _apply(contents.setdefault(op.fid, bytearray()), op)
        elif op.kind == "rename":
            if op.name in names:
                names[op.dest] = names.pop(op.name)
        elif op.kind == "link":
            if op.name in names:
                names[op.dest] = names[op.name]
        elif op.kind == "unlink":
            names.pop(op.name, None)
        elif op.kind == "dirsync":
            prefix = "" if op.name == "." else op.name + os.sep
            for name in set(names) | set(durable_names):
                if os.path.dirname(name) == prefix.rstrip(os.sep):
                    if name in names:
                        durable_names[name] = names[name]
                    else:
                        durable_names.pop(name, None)
    if state.strict_names:
        names = durable_names
    contents[rec.fids[state.sid]] = bytearray(state.content)
    root.mkdir(parents=True)
    for name, fid in sorted(names.items()):
        path = root / name
        if fid == -1:
            path.mkdir(parents=True, exist_ok=True, mode=0o700)
            continue
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.write_bytes(bytes(contents.get(fid, b"")))
        path.chmod(0o600)


def _check(rec: Recording, state: State, root: Path, durability: str, result: Result) -> int:
    """Open the crash state and check it; returns how many acknowledged events it lost beyond
    ``required`` (power-loss losses that flush mode allows)."""
    result.trials += 1
    expected = rec.events[state.sid]
    path = root / rec.names[rec.fids[state.sid]]
    before = path.read_bytes() if path.exists() else b""
    where = f"{state.sid[:24]} {state.label}"
    store: ags.BaseStore | None = None
    try:
        with deadline(TRIAL_TIMEOUT):
            store = ags.open_store(str(root), durability=durability)
            session = store.get(state.sid)
            events = session.read()
            found = [encode_event(e) for e in events]
            tally(
                result,
                [encoded_key(e) for e in expected[: state.required]],
                [encoded_key(e) for e in found],
            )
            m = len(found)
            if found != expected[:m]:
                violation(result, f"{where}: read back is not a prefix of what was written")
            elif m not in rec.batch_ends[state.sid]:
                violation(result, f"{where}: a partial batch is visible (ends at seq {m})")
            if (path.read_bytes() if path.exists() else b"") != before:
                violation(result, f"{where}: reading changed the log")
            check_history(session, result)
            seq = session.append(ags.Event.new("myapp/after-crash", {"ok": True}))
            latest = events[-1].seq if events else 0
            if seq != latest + 1:
                violation(result, f"{where}: the next append got seq {seq}, not {latest + 1}")
            # The append moved the torn tail aside: the log is what was kept, then its line.
            after = path.read_bytes()
            kept_end = after.rfind(b"\n", 0, len(after) - 1) + 1
            moved = before[kept_end:]
            if moved:
                quarantine = Path(str(path) + ".quarantine")
                kept = quarantine.read_bytes() if quarantine.exists() else b""
                if not before.startswith(after[:kept_end]) or not kept.endswith(moved + b"\n"):
                    violation(result, f"{where}: torn bytes were not kept in the quarantine")
            return max(0, len(expected) - m) if durability == "flush" else 0
    except Hang as exc:
        result.uncaught += 1
        note(result, f"{where}: hang: {exc}")
    except ags.SessionError as exc:
        result.unopenable += 1
        note(result, f"{where}: {type(exc).__name__}: {exc}")
    except Exception as exc:
        count_exception(result, exc, where)
    finally:
        if store is not None:
            with contextlib.suppress(Exception):
                store.close()
    return 0


def _dir_fsync_note(rec: Recording) -> str:
    created = {op.name for op in rec.ops if op.kind == "create" and os.sep not in op.name}
    synced = any(op.kind == "dirsync" and op.name == "." for op in rec.ops)
    logs = sorted(n for n in created if n.endswith(".jsonl"))
    if synced:
        return ""
    return (f"no fsync of the store directory after creating {len(logs)} session log(s) "
            f"({', '.join(n[:30] for n in logs)}): their names are durable only where the "
            "file system commits them with the file's own sync")


def run(config: Config) -> list[Result]:
    """One row per JSONL durability, and the ``dir-entry`` row. Each torn tail moved aside logs
    a warning: ``run.py`` keeps the library's log at ERROR for the whole run."""
    rng = config.rng(NAME)
    results: list[Result] = []
    base = config.workdir / NAME
    counter = 0
    for backend in ("jsonl-flush", "jsonl-fsync"):
        durability = backend.split("-")[1]
        if backend not in config.backends:
            results.append(Result(NAME, backend, skipped="not in --backends"))
            continue
        result = Result(NAME, backend)
        results.append(result)
        try:
            rec = _record(base / f"record-{durability}", durability)
        except Exception as exc:
            count_exception(result, exc, "recording")
            continue
        writes = sum(op.kind == "write" for op in rec.ops)
        syncs = sum(op.kind == "sync" for op in rec.ops)
        worst_loss = 0
        deadline = time.monotonic() + 7.0  # quick mode: stay within the CI budget
        for sid in (MAIN_ID, LONG_ID):
            for state in _states(rec, sid, durability, rng, config.quick):
                if config.quick and time.monotonic() > deadline:
                    if not any("time budget" in text for text in result.notes):
                        note(result, f"time budget reached after {result.trials} crash states")
                    break
                counter += 1
                root = base / f"s{counter}"
                _materialize(rec, state, root)
                worst_loss = max(worst_loss, _check(rec, state, root, durability, result))
                shutil.rmtree(root, ignore_errors=True)
        result.notes.insert(0, f"{writes} writes, {syncs} syncs recorded; "
                            f"{len(rec.events[MAIN_ID]) + len(rec.events[LONG_ID])} events")
        if durability == "flush":
            result.notes.insert(1, f"power loss lost at most {worst_loss} acknowledged events "
                                "(allowed at flush: survives a process crash, not a power loss)")
        else:
            dir_note = _dir_fsync_note(rec)
            dir_row = Result(NAME, "jsonl-fsync/dir-entry")
            results.append(dir_row)
            if dir_note:
                dir_row.notes.append(dir_note)
            for sid in (MAIN_ID, LONG_ID):
                for state in _dir_entry_states(rec, sid):
                    counter += 1
                    root = base / f"s{counter}"
                    _materialize(rec, state, root)
                    _check(rec, state, root, durability, dir_row)
                    shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(base / f"record-{durability}", ignore_errors=True)
    return results
