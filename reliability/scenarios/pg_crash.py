"""PostgreSQL server crash and killed connections.

A throwaway cluster of our own (``initdb`` into the run's work directory, another loopback
port, run as the ``postgres`` user since the server refuses root; never the shared server):

* ``pg_crash/server-crash``: writer processes append with ``durability="fsync"`` (single
  events and two-event batches) while the harness stops the server with
  ``pg_ctl stop -m immediate`` (a crash: no shutdown checkpoint, unflushed buffers dropped) and
  starts it again. Every acknowledged append must be there once, and no writer may see an
  error: the store rides the restart out (``reconnect_timeout``).
* ``pg_crash/terminate-backend``: the same writers while the harness ends their connections
  with ``pg_terminate_backend`` again and again (mid-append, mid-commit): again 0 lost, 0
  duplicated, 0 errors.
* ``pg_crash/lock-lost``: a turn lock whose connection the server ends is reported lost
  (``TurnLock.held`` turns False), another store object can take it, and the first store
  appends and locks again afterwards without an error.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import agentsession as ags

from ..common import (
    Config,
    Proc,
    Result,
    check_history,
    check_seqs,
    count_exception,
    count_problems,
    kill_all,
    note,
    pump,
    spawn,
    stored_keys,
    tally,
    violation,
)

NAME = "pg_crash"
TITLE = "PostgreSQL server crash (pg_ctl stop -m immediate), pg_terminate_backend, lost locks"

_APP_PREFIX = "agentsession/"


def _bindir() -> str | None:
    """The PostgreSQL server binaries (Debian's layout), newest version first."""
    for path in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(path, "initdb")):
            return path
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Cluster:
    """A private PostgreSQL cluster on a loopback port, run as the ``postgres`` user."""

    def __init__(self, bindir: str, root: Path) -> None:
        self.bindir = bindir
        self.data = root / "pgdata"
        self.log = root / "server.log"
        self.port = _free_port()
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(root, "postgres")
        self._as_postgres(
            "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"
        )

    def _as_postgres(self, tool: str, *args: str) -> None:
        command = [os.path.join(self.bindir, tool), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.data} -c fsync=on "
            "-c synchronous_commit=on -c max_connections=60"
        )
        self._as_postgres(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start"
        )

    def crash(self) -> None:
        """Stop as a crash does: no shutdown checkpoint; recovery replays the WAL on start."""
        self._as_postgres("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def stop(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self._as_postgres("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def url(self, schema: str) -> str:
        return f"{self.dsn}?schema={schema}"

    def terminate(self, prefix: str) -> int:
        """End every connection whose application name starts with ``prefix``."""
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name LIKE %s AND pid <> pg_backend_pid()",
                (prefix + "%",),
            ).fetchall()
        return len(rows)


@contextlib.contextmanager
def _cluster(config: Config) -> Iterator[Cluster | str]:
    """A started cluster, stopped afterwards; or the reason there is none."""
    bindir = _bindir()
    if bindir is None:
        yield "no PostgreSQL server binaries (/usr/lib/postgresql/*/bin/initdb)"
        return
    # Outside the run's private work directory: the server runs as another user.
    root = Path(tempfile.mkdtemp(prefix="agentsession-pgcrash-"))
    try:
        if os.geteuid() == 0:
            shutil.chown(root, "postgres")
        try:
            cluster = Cluster(bindir, root / "cluster")
            cluster.start()
        except (subprocess.SubprocessError, OSError, LookupError) as exc:
            stderr = getattr(exc, "stderr", b"") or b""
            raise RuntimeError(
                f"cannot start a throwaway cluster: {exc} {stderr.decode(errors='replace')}"
            ) from None
        try:
            yield cluster
        finally:
            kill_all()
            cluster.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _writer(
    url: str, session_id: str, tag: str, appends: int, seed: int
) -> Callable[[Callable[[str], None]], None]:
    """A writer process's body: ``appends`` appends (one event, or a user + assistant pair as
    one batch), each acknowledged key reported once the call returned."""

    def body(report: Callable[[str], None]) -> None:
        # The pool's own warnings about the connections the harness ends are expected here.
        logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
        rng = random.Random(seed)
        store = ags.open_store(url, durability="fsync", pool_max_size=2)
        session = store.get(session_id)
        report("ready")  # opened: the fault may come now (an open does not ride it out)
        for n in range(appends):
            if rng.random() < 0.3:
                keys = [f"K:{tag}-{n}a", f"K:{tag}-{n}b"]
                session.append_many(
                    [
                        ags.Event.new("user/message", ags.Message.user(f"ask {keys[0]}")),
                        ags.Event.new(
                            "assistant/message", ags.Message.assistant(f"answer {keys[1]}")
                        ),
                    ]
                )
            else:
                keys = [f"K:{tag}-{n}"]
                session.append(ags.Event.new("user/message", ags.Message.user(f"say {keys[0]}")))
            report("ack " + " ".join(keys))
            time.sleep(rng.uniform(0, 0.004))
        store.close()
        report("done")

    return body


def _collect(procs: list[Proc], result: Result, acked: list[str]) -> None:
    """Take in the writers' lines: acknowledged keys, and the errors they saw."""
    for proc in procs:
        for line in proc.lines:
            if line.startswith("ack "):
                acked.extend(line[4:].split())
        count_problems(result, proc, "writer")


def _verify(url: str, session_ids: list[str], acked: list[str], result: Result) -> None:
    try:
        with ags.open_store(url) as store:
            stored: list[str] = []
            for sid in session_ids:
                session = store.get(sid)
                events = session.read()
                check_seqs(events, result, sid)
                stored.extend(stored_keys(events, result, sid))
                check_history(session, result)
    except ags.SessionError as exc:
        result.unopenable += 1
        note(result, f"reopening: {exc}")
        return
    tally(result, acked, stored)


def _writers_under_fault(
    cluster: Cluster,
    config: Config,
    result: Result,
    trial: int,
    fault: Callable[[random.Random], None],
) -> None:
    """One trial: writers on two sessions (two writers share one), ``fault`` meanwhile."""
    rng = config.rng(f"{result.scenario}:{trial}")
    schema = f"crash_{trial}_{rng.randrange(1 << 30)}"
    url = cluster.url(schema)
    appends = config.trials(60, 200)
    with ags.open_store(url):
        pass  # the schema exists before the writers start
    sessions = ["shared", "solo"]
    procs = [
        spawn(_writer(url, sessions[0], f"t{trial}w0", appends, rng.randrange(1 << 30))),
        spawn(_writer(url, sessions[0], f"t{trial}w1", appends, rng.randrange(1 << 30))),
        spawn(_writer(url, sessions[1], f"t{trial}w2", appends, rng.randrange(1 << 30))),
    ]
    try:
        # The fault falls while the writers append, not while a slow machine still starts
        # them: opening a store does not ride out a crash, its appends do.
        pump(
            procs,
            time.monotonic() + 60,
            until=lambda: all("ready" in p.lines or p.exited for p in procs),
        )
        pump(procs, time.monotonic() + rng.uniform(0.05, 0.3))
        fault(rng)
        pump(procs, time.monotonic() + 120)
        hung = [p for p in procs if not p.exited]
        if hung:
            violation(result, f"trial {trial}: {len(hung)} writer(s) still running after 120 s")
        for proc in procs:
            proc.finish(timeout=1.0)
        if not any(line == "done" for p in procs for line in p.lines):
            note(result, f"trial {trial}: no writer finished")
    finally:
        kill_all()
    acked: list[str] = []
    _collect(procs, result, acked)
    _verify(url, sessions, acked, result)
    result.trials += 1


def _server_crash(cluster: Cluster, config: Config) -> Result:
    result = Result(NAME + "/server-crash", "postgres", expected_errors=False)
    down: list[float] = []

    def crash(rng: random.Random) -> None:
        cluster.crash()
        pause = rng.uniform(0.2, 1.5)
        time.sleep(pause)
        cluster.start()
        down.append(pause)

    for trial in range(config.trials(3, 20)):
        try:
            _writers_under_fault(cluster, config, result, trial, crash)
        except (subprocess.SubprocessError, OSError) as exc:
            count_exception(result, exc, "the harness's cluster")
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                cluster.start()
    if down:
        note(result, f"server down {min(down):.1f}-{max(down):.1f} s per crash, fsync on")
    return result


def _terminate_backends(cluster: Cluster, config: Config) -> Result:
    result = Result(NAME + "/terminate-backend", "postgres", expected_errors=False)
    ended: list[int] = []

    def terminate(rng: random.Random) -> None:
        for _ in range(rng.randint(5, 15)):
            ended.append(cluster.terminate(_APP_PREFIX))
            time.sleep(rng.uniform(0.01, 0.06))

    for trial in range(config.trials(4, 30)):
        _writers_under_fault(cluster, config, result, trial, terminate)
    note(result, f"{sum(ended)} connections terminated while appending")
    return result


def _lock_lost(cluster: Cluster, config: Config) -> Result:
    result = Result(NAME + "/lock-lost", "postgres", expected_errors=False)
    for trial in range(config.trials(5, 40)):
        url = cluster.url(f"locks_{trial}")
        try:
            with ags.open_store(url) as store, ags.open_store(url) as other:
                session = store.get("s")
                lock = store.lock("s", timeout=5)
                session.append(ags.Event.new("user/message", ags.Message.user(f"K:l{trial}-0")))
                cluster.terminate("agentsession-lock/")
                deadline = time.monotonic() + 5
                while lock.held and time.monotonic() < deadline:
                    time.sleep(0.01)
                if lock.held:
                    violation(result, f"trial {trial}: a lock whose connection ended still held")
                with other.lock("s", timeout=5):
                    pass  # the server released it with the connection
                lock.release()
                # The first store goes on: appends and locks on fresh connections.
                session.append(ags.Event.new("user/message", ags.Message.user(f"K:l{trial}-1")))
                with store.lock("s", timeout=5) as again:
                    if not again.held:
                        violation(result, f"trial {trial}: a new lock is not held")
            _verify(url, ["s"], [f"K:l{trial}-0", f"K:l{trial}-1"], result)
        except Exception as exc:
            count_exception(result, exc, f"trial {trial}")
        result.trials += 1
    return result


def run(config: Config) -> list[Result]:
    """The three rows on a throwaway cluster (PostgreSQL only)."""
    if "postgres" not in config.backends:
        return []
    names = ("server-crash", "terminate-backend", "lock-lost")
    try:
        with _cluster(config) as cluster:
            if isinstance(cluster, str):
                return [Result(f"{NAME}/{n}", "postgres", skipped=cluster) for n in names]
            return [
                _server_crash(cluster, config),
                _terminate_backends(cluster, config),
                _lock_lost(cluster, config),
            ]
    except RuntimeError as exc:  # the server binaries are there but would not run
        failed = Result(f"{NAME}/cluster", "postgres")
        violation(failed, str(exc))
        return [failed]
