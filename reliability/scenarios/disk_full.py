"""Disk full and permission faults on JSONL and SQLite: each failing operation raises a
``StorageError`` naming the session, nothing half-written is visible, the session still opens,
and once the fault is gone the next append gets the next seq.

Faults (one row each, per backend):

* ``enospc``: the store on a small tmpfs (``mount -t tmpfs -o size=256k``), written until an
  append fails, at a random fill level and with single appends and batches; a second append
  while full; a fresh store reads exactly the acknowledged events (still full); the tmpfs is
  grown (``remount,size=4m``), and the next append gets seq latest + 1. Without the privilege
  to mount, ``RLIMIT_FSIZE`` in the child (SIGXFSZ ignored, so writes fail with EFBIG) does
  the same, and the row says so.
* ``read-only-dir``: run as ``nobody`` (root ignores permission bits): the store directory made
  ``0500``; appending to a new session must fail; appending to an existing one may succeed
  (its file is still writable) or fail cleanly; after ``0700`` again everything reads back.
* ``unreadable``: as ``nobody``: the session's file (JSONL log, SQLite database) made ``0000``
  then ``0400``: opening, reading and appending fail cleanly or succeed, never with another
  exception, and after ``0600`` again everything reads back and appends resume.

Each trial runs in a forked child (a full tmpfs can raise SIGBUS on a memory-mapped SQLite
``-shm``; a crash is counted, not fatal to the harness). PostgreSQL is out of scope: its disk
is the server's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import pwd
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import agentsession as ags

from ..common import Config, Result, note, spawn, tally, violation

NAME = "disk_full"
TITLE = "Disk full (ENOSPC/EFBIG), read-only directory, unreadable file: clean errors, no partial"

SID = "slack:C042:t:1712345678.5"
OTHER = "slack:C042:t:new"
TRIAL_TIMEOUT = 60.0
_COUNTERS = tuple(f.name for f in dataclasses.fields(Result) if f.type == "int")
"""The counting columns of a row: what a trial's child sends back to be added up."""


# -- the store and its events --------------------------------------------------------------


def _url(backend: str, where: Path) -> tuple[str, dict[str, Any]]:
    if backend == "sqlite":
        return f"sqlite:///{where / 's.db'}", {}
    return str(where / "store"), {"durability": backend.split("-")[1]}


def _event(key: str, size: int) -> ags.Event:
    return ags.Event.new("rel/note", {"key": key, "blob": ("disk full " * (size // 10 + 1))[:size]})


def _keys(events: list[ags.Event]) -> list[str]:
    out = []
    for event in events:
        data = event.payload()
        out.append(str(data.get("key")) if isinstance(data, dict) else f"?{event.type}")
    return out


def _names(exc: BaseException, sid: str) -> bool:
    text = str(exc)
    return sid in text or repr(sid) in text


class Trial:
    """Bookkeeping of one child's trial: the acknowledged keys per session and the checks."""

    def __init__(self, backend: str, where: Path, result: Result) -> None:
        self.url, self.options = _url(backend, where)
        self.result = result
        self.acked: dict[str, list[str]] = {SID: [], OTHER: []}
        self.counter = 0

    def store(self) -> ags.BaseStore:
        return ags.open_store(self.url, **self.options)

    def append(self, store: ags.BaseStore, sid: str, sizes: list[int], *, fault: str,
               must_fail: bool = False) -> bool:
        """Append one event (one size) or a batch; True when acknowledged. A ``StorageError``
        must name the session; anything else is uncaught."""
        events = []
        for size in sizes:
            self.counter += 1
            events.append(_event(f"K:{fault}-{self.counter}", size))
        try:
            session = store.get(sid)
            one = len(events) == 1
            seqs = [session.append(events[0])] if one else session.append_many(events)
        except ags.StorageError as exc:
            self.result.errors += 1
            if not _names(exc, sid):
                violation(self.result, f"{fault}: the error does not name the session: {exc}")
            return False
        except Exception as exc:
            self.result.uncaught += 1
            note(self.result, f"{fault}: append raised {type(exc).__name__}: {exc}")
            return False
        expected = list(range(len(self.acked[sid]) + 1, len(self.acked[sid]) + 1 + len(events)))
        if seqs != expected:
            violation(self.result, f"{fault}: acknowledged seqs {seqs[:3]}, expected "
                                   f"{expected[:3]}")
        if must_fail:
            note(self.result, f"{fault}: an append that should have failed succeeded")
        self.acked[sid].extend(_keys(events))
        return True

    def verify(self, fault: str, *, count: bool = True) -> bool:
        """A fresh store reads back exactly the acknowledged events of each session."""
        try:
            store = self.store()
        except ags.StorageError as exc:
            self.result.unopenable += 1
            note(self.result, f"{fault}: the store does not open: {type(exc).__name__}: {exc}")
            return False
        except Exception as exc:
            self.result.uncaught += 1
            note(self.result, f"{fault}: opening raised {type(exc).__name__}: {exc}")
            return False
        try:
            for sid, acked in self.acked.items():
                try:
                    events = store.get(sid).read()
                except ags.SessionError as exc:
                    self.result.unopenable += 1
                    note(self.result, f"{fault}: {sid} does not read: {type(exc).__name__}: {exc}")
                    return False
                except Exception as exc:
                    self.result.uncaught += 1
                    note(self.result, f"{fault}: reading raised {type(exc).__name__}: {exc}")
                    return False
                stored = _keys(events)
                if count:
                    tally(self.result, acked, stored)
                if stored != acked or [e.seq for e in events] != list(range(1, len(acked) + 1)):
                    extra = [k for k in stored if k not in acked]
                    violation(self.result, f"{fault}: {sid} reads {len(stored)} events, "
                              f"{len(acked)} acknowledged (unacknowledged: {extra[:3]})")
            return True
        finally:
            store.close()


# -- running a trial in a child -------------------------------------------------------------


def _in_child(result: Result, body: Callable[[Result], None], timeout: float,
              as_user: int | None = None) -> None:
    """Run ``body`` on a fresh result in a forked child (as uid/gid ``as_user``); merge its
    counters and notes into ``result``."""

    def target(report: Callable[[str], None]) -> None:
        if as_user is not None:
            os.setgroups([])
            os.setgid(as_user)
            os.setuid(as_user)
        mine = Result(result.scenario, result.backend)
        try:
            body(mine)
        finally:
            report("!result " + json.dumps(
                {"counts": {k: getattr(mine, k) for k in _COUNTERS}, "notes": mine.notes}))

    proc = spawn(target)
    proc.finish(timeout)
    got = False
    for line in proc.lines:
        if line.startswith("!result "):
            data = json.loads(line[8:])
            for key, value in data["counts"].items():
                setattr(result, key, getattr(result, key) + value)
            for text in data["notes"]:
                note(result, text)
            got = True
    for kind, text in proc.problems():
        if kind == "uncaught":
            result.uncaught += 1
            note(result, f"child: uncaught {text}")
    code = proc.exit_code
    if not got:
        result.uncaught += 1
        why = "hung (killed)" if proc.killed_at else f"exit code {code}"
        note(result, f"the trial's child died before reporting: {why}")


# -- ENOSPC ---------------------------------------------------------------------------------


def _mount(where: Path, size: str) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs",
                           str(where)], capture_output=True, timeout=30, check=False)
    return done.returncode == 0


def _umount(where: Path) -> None:
    for _ in range(10):
        done = subprocess.run(["umount", str(where)], capture_output=True, timeout=30,
                              check=False)
        if done.returncode == 0 or not os.path.ismount(where):
            return
        time.sleep(0.2)


@contextlib.contextmanager
def _tmpfs(where: Path) -> Iterator[bool]:
    mounted = False
    try:
        mounted = _mount(where, "512k")  # SQLite with its catalog tables starts near 200k
        yield mounted
    finally:
        if mounted:
            _umount(where)


def _enospc_body(backend: str, where: Path, seed: int, tmpfs: bool) -> Callable[[Result], None]:
    def body(result: Result) -> None:
        import random

        rng = random.Random(seed)
        fault = "ENOSPC" if tmpfs else "EFBIG"
        trial = Trial(backend, where, result)
        result.trials += 1
        store = trial.store()
        # A few acknowledged events before the limit, so a later failure has history to keep.
        trial.append(store, SID, [300], fault=fault)
        trial.append(store, OTHER, [200], fault=fault)
        if tmpfs:
            filler = where / "filler"
            try:  # a random fill level (a store whose files already fill the disk stops here)
                filler.write_bytes(b"\0" * rng.randrange(0, 160_000))
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
        else:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            size = os.path.getsize(where / "s.db") if backend == "sqlite" else 0
            limit = size + rng.randrange(20_000, 120_000)
            _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
        failed = False
        for _ in range(2000):
            sizes = [rng.randrange(100, 9000)]
            if rng.random() < 0.35:
                sizes = [rng.randrange(100, 6000) for _ in range(rng.randrange(2, 6))]
            if not trial.append(store, SID, sizes, fault=fault):
                failed = True
                break
        if not failed:
            note(result, f"{fault}: the store never filled up")
            store.close()
            return
        # Still full: an event larger than the whole disk fails cleanly too; a fresh store
        # reads exactly what was acknowledged.
        trial.append(store, SID, [400_000], fault=fault, must_fail=True)
        store.close()
        trial.verify(f"{fault} while full", count=False)
        # Space returns.
        if tmpfs:
            grown = subprocess.run(["mount", "-o", "remount,size=4m", str(where)],
                                   capture_output=True, timeout=30, check=False)
            if grown.returncode != 0:
                (where / "filler").unlink(missing_ok=True)
        else:
            _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
            resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
        store = trial.store()
        try:
            if not trial.append(store, SID, [400], fault=f"{fault} after space returned"):
                violation(result, f"{fault}: the append after space returned failed")
            trial.append(store, OTHER, [400], fault=f"{fault} after space returned")
        finally:
            store.close()
        trial.verify(f"{fault} after space returned")

    return body


def _enospc(config: Config, backend: str, base: Path, rng: Any) -> Result:
    result = Result(NAME, f"{backend}/enospc")
    trials = config.trials(8, 40)
    kinds: set[str] = set()
    for n in range(trials):
        where = base / f"enospc-{backend}-{n}"
        with _tmpfs(where) as mounted:
            if not mounted:
                where.mkdir(parents=True, exist_ok=True)
            kinds.add("tmpfs 256k (ENOSPC)" if mounted else "RLIMIT_FSIZE (EFBIG)")
            _in_child(result, _enospc_body(backend, where, rng.randrange(1 << 30), mounted),
                      TRIAL_TIMEOUT)
        shutil.rmtree(where, ignore_errors=True)
    result.notes.insert(0, f"fault: {', '.join(sorted(kinds))}; errors are the expected "
                        "StorageErrors of the failed appends")
    return result


# -- permissions (as an unprivileged user) --------------------------------------------------


def _unprivileged() -> int | None:
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        return None


def _expect_clean(result: Result, what: str, sid: str | None, fn: Callable[[], Any],
                  seen: list[str] | None = None) -> Any:
    """Run ``fn``: a ``StorageError`` is an expected error (naming ``sid`` when given), any
    other exception is uncaught. Returns fn's value, or None when it raised; appends
    ``what: outcome`` to ``seen``."""
    outcome = "ok"
    value = None
    try:
        value = fn()
        if value is False:  # Trial.append: refused (counted there)
            outcome = "StorageError"
    except ags.StorageError as exc:
        result.errors += 1
        outcome = type(exc).__name__
        if sid is not None and not _names(exc, sid):
            violation(result, f"{what}: the error does not name the session: {exc}")
    except ags.SessionError as exc:
        result.errors += 1
        outcome = type(exc).__name__
        note(result, f"{what}: {type(exc).__name__}: {exc}")
    except Exception as exc:
        result.uncaught += 1
        outcome = f"uncaught {type(exc).__name__}"
        note(result, f"{what}: raised {type(exc).__name__}: {exc}")
    if seen is not None:
        seen.append(f"{what.split(': ')[-1]} {outcome}")
    return value


def _read_only_dir_body(backend: str, where: Path) -> Callable[[Result], None]:
    def body(result: Result) -> None:
        trial = Trial(backend, where, result)
        result.trials += 1
        store = trial.store()
        trial.append(store, SID, [300, 400], fault="setup")
        trial.append(store, SID, [500], fault="setup")
        directory = where / "store" if backend != "sqlite" else where
        os.chmod(directory, 0o500)
        seen: list[str] = []
        try:
            # JSONL must create a file for a new session (refused); SQLite adds a row to a
            # database whose files exist (may succeed). Either way: clean.
            _expect_clean(result, "new session append", OTHER, lambda: trial.append(
                store, OTHER, [300], fault="read-only dir, new session"), seen)
            _expect_clean(result, "existing session append", SID, lambda: trial.append(
                store, SID, [300], fault="read-only dir, existing session"), seen)
            store.close()
            fresh = _expect_clean(result, "fresh store open", None, trial.store, seen)
            if fresh is not None:
                _expect_clean(result, "read", SID, lambda: fresh.get(SID).read(), seen)
                _expect_clean(result, "append", SID, lambda: trial.append(
                    fresh, SID, [200], fault="read-only dir"), seen)
                fresh.close()
        finally:
            os.chmod(directory, 0o700)
        note(result, "dir 0500: " + ", ".join(seen))
        trial.verify("read-only dir lifted")
        store = trial.store()
        try:
            trial.append(store, SID, [200], fault="after read-only dir")
            if not trial.append(store, OTHER, [200], fault="after read-only dir"):
                violation(result, "read-only dir: no append after the directory is writable")
        finally:
            store.close()
        trial.verify("after read-only dir")

    return body


def _unreadable_body(backend: str, where: Path) -> Callable[[Result], None]:
    def body(result: Result) -> None:
        trial = Trial(backend, where, result)
        store = trial.store()
        trial.append(store, SID, [300, 400], fault="setup")
        trial.append(store, OTHER, [300], fault="setup")
        path = Path(store.get(SID).location) if backend != "sqlite" else where / "s.db"
        store.close()
        for mode in (0o000, 0o400):
            result.trials += 1
            what = f"file mode {mode:04o}"
            os.chmod(path, mode)
            seen: list[str] = []
            try:
                fresh = _expect_clean(result, f"{what}: open", None, trial.store, seen)
                if fresh is not None:
                    events = _expect_clean(result, f"{what}: read", SID,
                                           lambda s=fresh: s.get(SID).read(), seen)
                    if events is not None and _keys(events) != trial.acked[SID]:
                        violation(result, f"{what}: read {len(events)} events, "
                                          f"{len(trial.acked[SID])} acknowledged")
                    _expect_clean(result, f"{what}: append", SID,
                                  lambda s=fresh, w=what: trial.append(s, SID, [200], fault=w),
                                  seen)
                    _expect_clean(result, f"{what}: list", None, lambda s=fresh: s.list(), seen)
                    fresh.close()
            finally:
                os.chmod(path, 0o600)
            note(result, f"{what}: " + ", ".join(seen))
            trial.verify(f"{what} lifted")
        store = trial.store()
        try:
            if not trial.append(store, SID, [200], fault="after unreadable"):
                violation(result, "unreadable: no append after the file is readable")
        finally:
            store.close()
        trial.verify("after unreadable")

    return body


def _permission(config: Config, backend: str, fault: str) -> Result:
    result = Result(NAME, f"{backend}/{fault}")
    uid = _unprivileged()
    if uid is None:
        result.skipped = "no 'nobody' user to drop privileges to"
        return result
    if os.geteuid() != 0:
        # Not root: permission bits apply to this process itself.
        uid = None
    where = Path(tempfile.mkdtemp(prefix=f"agentsession-{NAME}-"))
    try:
        if uid is not None:
            os.chown(where, uid, uid)
        body = (_read_only_dir_body if fault == "read-only-dir" else _unreadable_body)(
            backend, where)
        _in_child(result, body, TRIAL_TIMEOUT, as_user=uid)
        result.notes.insert(0, "run as " + ("nobody" if uid is not None else "this user")
                            + "; errors are the expected StorageErrors")
    finally:
        shutil.rmtree(where, ignore_errors=True)
    return result


def run(config: Config) -> list[Result]:
    import agentsession.backends.sqlite  # noqa: F401 - imported before dropping privileges

    rng = config.rng(NAME)
    base = config.workdir / NAME
    base.mkdir(parents=True, exist_ok=True)
    results: list[Result] = []
    for backend in ("jsonl-flush", "jsonl-fsync", "sqlite"):
        if backend not in config.backends:
            results.append(Result(NAME, backend, skipped="not in --backends"))
            continue
        results.append(_enospc(config, backend, base, rng))
        results.append(_permission(config, backend, "read-only-dir"))
        results.append(_permission(config, backend, "unreadable"))
    if "postgres" in config.backends:
        results.append(Result(NAME, "postgres", skipped="out of scope: the server's disk"))
    return results
