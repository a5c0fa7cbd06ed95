"""Throwaway PostgreSQL clusters for the tests: a primary and a streaming replica of it
(``pg_basebackup``), each on a free loopback port, in temporary directories, started and
always stopped by the fixture that made them.

The server refuses to run as root, so when the tests run as root (the CI) every server
program runs as the ``postgres`` OS user (``runuser``), in directories it owns.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

BIN = Path(os.environ.get("AGENTSESSION_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _server_user() -> str | None:
    """The OS user the servers run as: ``postgres`` when running as root, else ourselves."""
    return "postgres" if os.geteuid() == 0 else None


def _reason() -> str:
    missing = [p for p in ("initdb", "pg_ctl", "pg_basebackup") if not (BIN / p).exists()]
    if missing:
        return (
            f"{', '.join(missing)} not found in {BIN} (apt install postgresql-15, or set "
            "AGENTSESSION_TEST_PG_BIN): the replica tests start clusters of their own"
        )
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root without a postgres OS user to run the test clusters as"
        if shutil.which("runuser") is None:
            return "running as root without runuser to start the test clusters as postgres"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed: pip install 'agentsession[postgres]'"
    return ""


SKIP_REASON = _reason()
"""Why the tests that start clusters are skipped (empty: they can run)."""


def _run(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    user = _server_user()
    command = [*(["runuser", "-u", user, "--"] if user else []), *args]
    return subprocess.run(
        command, check=check, capture_output=True, text=True, timeout=timeout, cwd="/"
    )


def free_port() -> int:
    """A loopback TCP port nothing listens on (now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Cluster:
    """One running server: its data directory, port and log."""

    data: Path
    port: int
    log: Path

    @property
    def dsn(self) -> str:
        """The URL of its ``postgres`` database, as the ``postgres`` role."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        _run(
            str(BIN / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-t",
            "60",
            "-o",
            f"-p {self.port}",
            "start",
        )

    def stop(self) -> None:
        """Stop the server (fast shutdown; immediate when that does not end it)."""
        result = _run(
            str(BIN / "pg_ctl"),
            "-D",
            str(self.data),
            "-m",
            "fast",
            "-w",
            "-t",
            "30",
            "stop",
            check=False,
        )
        if result.returncode != 0:
            _run(str(BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop", check=False)

    def log_text(self) -> str:
        """The server's log (for a failing test's message)."""
        with contextlib.suppress(OSError):
            return self.log.read_text(errors="replace")
        return ""


@dataclass
class ReplicatedPair:
    """A primary and a hot-standby streaming replica of it."""

    primary: Cluster
    replica: Cluster

    def wait_replayed(self, timeout: float = 30) -> None:
        """Wait until the replica has replayed everything the primary has written."""
        import psycopg

        with psycopg.connect(self.primary.dsn, autocommit=True) as conn:
            row = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()
            assert row is not None
            target = row[0]
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.replica.dsn, autocommit=True) as conn:
            while True:
                done = conn.execute(
                    "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)
                ).fetchone()
                if done and done[0]:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError("the replica did not replay the primary's WAL")
                time.sleep(0.02)

    def pause_replay(self) -> None:
        """Stop the replica replaying WAL (it keeps receiving it)."""
        import psycopg

        with psycopg.connect(self.replica.dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_pause()")
            while True:
                row = conn.execute("SELECT pg_get_wal_replay_pause_state()").fetchone()
                if row and row[0] == "paused":
                    return
                time.sleep(0.01)

    def resume_replay(self) -> None:
        """Let the replica replay WAL again."""
        import psycopg

        with psycopg.connect(self.replica.dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_resume()")


@contextlib.contextmanager
def replicated_pair() -> Iterator[ReplicatedPair]:
    """A primary (``wal_level=replica``) and a streaming replica of it made by
    ``pg_basebackup``, each on a free loopback port, in a temporary directory; both stopped
    and removed on the way out, whatever happened."""
    root = Path(tempfile.mkdtemp(prefix="agentsession-pg-"))
    user = _server_user()
    if user:
        shutil.chown(root, user, user)
    os.chmod(root, 0o700)
    primary = Cluster(root / "primary", free_port(), root / "primary.log")
    replica = Cluster(root / "replica", free_port(), root / "replica.log")
    started: list[Cluster] = []
    try:
        _run(
            str(BIN / "initdb"),
            "-D",
            str(primary.data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C",
        )
        with open(primary.data / "postgresql.conf", "a") as conf:
            conf.write(
                "\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{root}'\n"
                "wal_level = replica\nmax_wal_senders = 4\nhot_standby = on\n"
                "fsync = off\nsynchronous_commit = on\nshared_buffers = 32MB\n"
                "max_connections = 60\n"
            )
        primary.start()
        started.append(primary)
        _run(
            str(BIN / "pg_basebackup"),
            "-h",
            "127.0.0.1",
            "-p",
            str(primary.port),
            "-U",
            "postgres",
            "-D",
            str(replica.data),
            "-R",
            "-X",
            "stream",
        )
        replica.start()
        started.append(replica)
        pair = ReplicatedPair(primary, replica)
        _wait_standby(replica)
        yield pair
    finally:
        for cluster in reversed(started):
            cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def _wait_standby(replica: Cluster, timeout: float = 60) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(replica.dsn, autocommit=True, connect_timeout=2) as conn:
                row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
                if row and row[0]:
                    return
        except psycopg.OperationalError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"the replica did not start:\n{replica.log_text()[-2000:]}")
        time.sleep(0.1)
