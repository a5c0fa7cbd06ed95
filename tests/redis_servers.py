"""Redis servers for the tests: the local server (a key prefix per test, its keys deleted
afterwards), and throwaway servers and Clusters started from Debian's ``redis-server`` on
loopback ports, stopped by the test that started them."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

URL = os.environ.get("AGENTSESSION_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
REDIS_SERVER = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")


def _reason() -> str:
    try:
        import redis
    except ImportError:
        return "redis-py is not installed: pip install 'agentsession[redis]'"
    try:
        redis.Redis.from_url(URL, socket_connect_timeout=2).ping()
    except Exception as exc:
        return (
            f"no Redis server at {URL} ({exc}): start one (redis-server) or set "
            "AGENTSESSION_TEST_REDIS_URL"
        )
    return ""


SKIP_REASON = _reason()
"""Why the Redis tests are skipped (empty: a server answers)."""

SERVER_SKIP = (
    ""
    if REDIS_SERVER and REDIS_CLI and not SKIP_REASON.startswith("redis-py")
    else "redis-server and redis-cli start the throwaway servers: apt install redis-server"
)


def new_prefix() -> str:
    """A key prefix no other test uses."""
    return "t" + uuid.uuid4().hex[:12] + ":"


def url_with_prefix(prefix: str, url: str | None = None) -> str:
    """The test server's URL with ``?prefix=`` added."""
    base = url or URL
    return f"{base}{'&' if '?' in base else '?'}prefix={prefix}"


def drop_prefixes(prefixes: list[str], url: str | None = None) -> None:
    """Delete every key of the test prefixes (on every primary of a Cluster)."""
    if not prefixes:
        return
    import redis

    if url is not None and "+cluster" in url:
        from redis.cluster import RedisCluster

        host, port = url.split("//", 1)[1].split("/")[0].split(",")[0].split(":")
        cluster = RedisCluster(host=host, port=int(port))
        try:
            for prefix in prefixes:
                for key in cluster.scan_iter(match=f"{prefix}*", count=1000):
                    cluster.delete(key)
        finally:
            cluster.close()
        return
    client = redis.Redis.from_url(url or URL)
    try:
        for prefix in prefixes:
            batch = list(client.scan_iter(match=f"{prefix}*", count=1000))
            for i in range(0, len(batch), 500):
                client.delete(*batch[i : i + 500])
    finally:
        client.close()


def free_port() -> int:
    """A loopback port nothing listens on now (and its cluster bus port + 10000)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port < 55000:
            return int(port)


def _wait_for_ping(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    import redis

    deadline = time.monotonic() + timeout
    while True:
        try:
            redis.Redis(port=port, socket_connect_timeout=1).ping()
            return
        except redis.exceptions.RedisError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {port} did not start") from None
            time.sleep(0.05)


class RedisProcess:
    """A ``redis-server`` of the test's own, in a directory of its own."""

    def __init__(self, directory: Path, port: int, *args: str) -> None:
        self.directory = directory
        self.port = port
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None
        directory.mkdir(parents=True, exist_ok=True)

    def start(self) -> None:
        """Start it (again) and wait until it answers."""
        assert REDIS_SERVER is not None
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
             str(self.directory), "--save", "", "--protected-mode", "no", *self.args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        _wait_for_ping(self.port, self.proc)

    def kill(self) -> None:
        """SIGKILL it and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        """Stop it (SIGKILL: nothing to keep) and reap it."""
        self.kill()


@contextmanager
def redis_server(directory: Path, *args: str) -> Iterator[RedisProcess]:
    """A throwaway server on a free loopback port, killed afterwards."""
    server = RedisProcess(directory, free_port(), *args)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def redis_cluster(
    directory: Path, masters: int = 3, replicas: int = 0
) -> Iterator[list[RedisProcess]]:
    """A Redis Cluster of ``masters`` primaries (each with ``replicas`` replicas) on free
    loopback ports, made with ``redis-cli --cluster create``; every node killed afterwards."""
    assert REDIS_CLI is not None
    nodes: list[RedisProcess] = []
    try:
        for i in range(masters * (1 + replicas)):
            node = RedisProcess(
                directory / f"node{i}",
                free_port(),
                "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", "1000",
                "--appendonly", "yes",
                "--appendfsync", "always",
            )  # fmt: skip
            node.start()
            nodes.append(node)
        addresses = [f"127.0.0.1:{n.port}" for n in nodes]
        subprocess.run(
            [REDIS_CLI, "--cluster", "create", *addresses, "--cluster-replicas", str(replicas),
             "--cluster-yes"],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=60,
        )  # fmt: skip
        _wait_for_cluster(nodes)
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def _wait_for_cluster(nodes: list[RedisProcess], timeout: float = 60.0) -> None:
    import redis

    deadline = time.monotonic() + timeout
    while True:
        states: list[Any] = []
        for node in nodes:
            try:
                info = redis.Redis(port=node.port).execute_command("CLUSTER", "INFO")
                if isinstance(info, dict):
                    state = info.get("cluster_state")
                else:
                    text = info.decode() if isinstance(info, bytes) else str(info)
                    state = "ok" if "cluster_state:ok" in text else text
                states.append(state)
            except redis.exceptions.RedisError:
                states.append(None)
        if all(s == "ok" for s in states):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the cluster did not become ready: {states}")
        time.sleep(0.1)


def cluster_url(nodes: list[RedisProcess]) -> str:
    """The ``redis+cluster://`` URL of a test cluster."""
    return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in nodes) + "/"


requires_redis = pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON or "-")
requires_redis_server = pytest.mark.skipif(bool(SERVER_SKIP), reason=SERVER_SKIP or "-")
