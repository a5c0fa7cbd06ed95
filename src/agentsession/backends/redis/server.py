"""Where a Redis store lives and how it talks to the server: the URL, the client (one server
or a Cluster), the key names, the scripts, and the one translation of driver errors.

URLs: ``redis://[user:password@]host:port/db`` and ``rediss://...`` (TLS) for one server;
``redis+cluster://host:port,host:port/`` and ``rediss+cluster://...`` (or ``cluster=True``)
for a Redis Cluster, reached through any of the nodes named. Query parameters (also accepted
as ``open_store`` options): ``prefix`` (the key prefix, default ``agentsession:``),
``replicas`` (acknowledgements ``WAIT`` asks for after each write), ``lock_ttl`` (seconds a
turn lock outlives a holder that stopped renewing it).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import socket
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import redis
import redis.exceptions as rex

from ...errors import OutcomeUnknown, StorageError, StoreUnavailable, UsageError
from . import scripts

_REPLY_ERRORS: Any
try:  # redis-py's own mapping of error replies to its exceptions (redis-py 5 and later)
    from redis._parsers import BaseParser as _REPLY_ERRORS
except ImportError:  # pragma: no cover - a redis-py that moved it
    _REPLY_ERRORS = None

__all__ = [
    "COMMANDS",
    "DEFAULT_PREFIX",
    "Keys",
    "Server",
    "Target",
    "pack_command",
    "parse_reply",
    "session_tag",
]

log = logging.getLogger("agentsession.backends.redis")

T = TypeVar("T")

DEFAULT_PREFIX: Final = "agentsession:"
"""The key prefix of a store whose URL names none."""

_SCHEMES: Final = ("redis", "rediss", "redis+cluster", "rediss+cluster")

_CLUSTER_DOWN = ("CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "LOADING", "READONLY")
"""Replies that say the server did not run the command (a failover under way)."""


def _b(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def session_tag(session_id: str) -> bytes:
    """The hash tag of a session's keys: the id itself when it holds no brace and does not
    start with ``~``, else ``~`` and a BLAKE2b hex digest of it (so every key of one session
    hashes to one slot, and no tag is another's)."""
    if "{" in session_id or "}" in session_id or session_id.startswith("~"):
        digest = hashlib.blake2b(_b(session_id), digest_size=16).hexdigest()
        return b"~" + digest.encode()
    return _b(session_id)


@dataclass(frozen=True)
class Keys:
    """The key names of one store (its prefix)."""

    prefix: bytes

    @property
    def catalog(self) -> bytes:
        """The prefix of the store-wide catalog keys (one slot: ``{~catalog}``)."""
        return self.prefix + b"{~catalog}:"

    def meta(self, kind: str) -> bytes:
        """The hash of one meta kind (one slot: ``{~meta}``)."""
        return self.prefix + b"{~meta}:k:" + _b(kind)

    @property
    def meta_kinds(self) -> bytes:
        """The set of meta kinds that have entries."""
        return self.prefix + b"{~meta}:kinds"

    def session(self, session_id: str) -> list[bytes]:
        """A session's keys: ``s`` (its hash), ``e`` (the stream), ``i`` (event ids of a
        session key layout 2 made; layout 3 keeps them in ``s``), ``d``
        (documents), ``u`` (usage rows), ``l`` (the turn lock)."""
        base = self.prefix + b"{" + session_tag(session_id) + b"}:"
        return [base + kind for kind in (b"s", b"e", b"i", b"d", b"u", b"l")]


@dataclass
class Target:
    """A parsed store URL."""

    url: str
    """The URL as given (with its password: it must reopen the store)."""
    location: str
    """The URL without its password, for people."""
    cluster: bool
    nodes: list[tuple[str, int]]
    tls: bool
    db: int
    username: str | None
    password: str | None
    prefix: str
    replicas: int
    lock_ttl: float
    tls_options: dict[str, Any] = field(default_factory=dict)
    """redis-py's ``ssl_*`` keywords from the URL's query (``rediss://`` only)."""

    @classmethod
    def parse(
        cls,
        url: str,
        *,
        cluster: bool | None,
        prefix: str | None,
        replicas: int | None,
        lock_ttl: float | None,
    ) -> Target:
        """Parse ``url``; options given to ``open_store`` win over the URL's query."""
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in _SCHEMES:
            raise UsageError(f"not a Redis URL: {url!r} (redis://, rediss://, redis+cluster://)")
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        hosts = parts.netloc.rpartition("@")[2]
        nodes: list[tuple[str, int]] = []
        for node in (hosts or "127.0.0.1:6379").split(","):
            if node.startswith("["):  # [IPv6]:port
                host, _, port = node[1:].partition("]")
                port = port.lstrip(":")
            else:
                host, sep, port = node.rpartition(":")
                if not sep:
                    host, port = node, ""
            try:
                nodes.append((host or "127.0.0.1", int(port or 6379)))
            except ValueError:
                raise UsageError(f"bad port in Redis URL {url!r}: {port!r}") from None
        is_cluster = scheme.endswith("+cluster") if cluster is None else bool(cluster)
        if scheme.endswith("+cluster"):
            is_cluster = True
        path = parts.path.strip("/")
        db = int(query.pop("db", path or "0") or "0") if path.isdigit() or not path else -1
        if db < 0:
            raise UsageError(f"the database of a Redis URL is a number: {url!r}")
        if is_cluster and db:
            raise UsageError("Redis Cluster has database 0 only: use a prefix instead")
        chosen_prefix = prefix if prefix is not None else query.pop("prefix", DEFAULT_PREFIX)
        query.pop("prefix", None)
        if "{" in chosen_prefix or "}" in chosen_prefix:
            raise UsageError(f"a Redis key prefix holds no braces: {chosen_prefix!r}")
        wanted_replicas = int(replicas if replicas is not None else query.pop("replicas", "0"))
        query.pop("replicas", None)
        if wanted_replicas < 0:
            raise UsageError(f"replicas must be >= 0, not {wanted_replicas}")
        ttl = float(lock_ttl if lock_ttl is not None else query.pop("lock_ttl", "10"))
        query.pop("lock_ttl", None)
        tls_options = _tls_options(query, scheme.startswith("rediss"))
        if query:
            where = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
            raise UsageError(
                f"unknown option(s) in Redis URL {where}: {', '.join(sorted(query))} "
                f"(known: prefix, db, replicas, lock_ttl, {', '.join(_TLS_QUERY)})"
            )
        if not ttl > 0:
            raise UsageError(f"lock_ttl must be positive seconds, not {ttl}")
        username = unquote(parts.username) if parts.username else None
        password = unquote(parts.password) if parts.password is not None else None
        shown = parts.netloc.rpartition("@")[2]
        if parts.username:
            shown = f"{quote(username or '')}@{shown}"
        location = f"{scheme}://{shown}/{db if not is_cluster else ''}".rstrip("/")
        if chosen_prefix != DEFAULT_PREFIX:
            location += f"?prefix={quote(chosen_prefix)}"
        return cls(
            url=url,
            location=location,
            cluster=is_cluster,
            nodes=nodes,
            tls=scheme.startswith("rediss"),
            db=db,
            username=username,
            password=password,
            prefix=chosen_prefix,
            replicas=wanted_replicas,
            lock_ttl=ttl,
            tls_options=tls_options,
        )

    def connect(self, *, socket_timeout: float, connect_timeout: float) -> Any:
        """A redis-py client for this target (``redis.Redis`` or ``redis.RedisCluster``)."""
        common: dict[str, Any] = {
            "username": self.username,
            "password": self.password,
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": connect_timeout,
            "ssl": self.tls,
            **self.tls_options,
        }
        # No retries of the driver's own: the append pipeline retries, knowing what a write
        # may have done.
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        if self.cluster:
            from redis.cluster import ClusterNode, RedisCluster

            return RedisCluster(
                startup_nodes=[ClusterNode(h, p) for h, p in self.nodes],  # type: ignore[no-untyped-call]
                retry=Retry(NoBackoff(), 1),
                **common,
            )
        host, port = self.nodes[0]
        return redis.Redis(host=host, port=port, db=self.db, retry=Retry(NoBackoff(), 0), **common)

    def setup_commands(self) -> list[list[Any]]:
        """What a connection of the store's own sends first: ``AUTH`` with the URL's user
        and password, ``SELECT`` of its database (none needed: empty)."""
        setup: list[list[Any]] = []
        if self.password is not None:
            user = [self.username] if self.username else []
            setup.append(["AUTH", *user, self.password])
        if self.db:
            setup.append(["SELECT", self.db])
        return setup

    def connect_async(self, *, socket_timeout: float, connect_timeout: float) -> Any:
        """A redis-py asyncio client for this target."""
        import redis.asyncio as aredis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        common: dict[str, Any] = {
            "username": self.username,
            "password": self.password,
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": connect_timeout,
            "ssl": self.tls,
            **self.tls_options,
        }
        if self.cluster:
            from redis.asyncio.cluster import ClusterNode, RedisCluster

            return RedisCluster(
                startup_nodes=[ClusterNode(h, p) for h, p in self.nodes],
                retry=Retry(NoBackoff(), 1),
                **common,
            )
        host, port = self.nodes[0]
        return aredis.Redis(host=host, port=port, db=self.db, retry=Retry(NoBackoff(), 0), **common)


_TLS_QUERY: Final = (
    "ssl_ca_certs",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_cert_reqs",
    "ssl_check_hostname",
)
"""The TLS options a ``rediss://`` URL's query may carry (redis-py's keywords): the CA bundle
that verifies the server (default: the system's), a client certificate and key, whether the
server's certificate is required (``required``, the default; ``optional``; ``none``), and
whether its host name is checked (``true``, the default, or ``false``)."""


def _tls_options(query: dict[str, str], tls: bool) -> dict[str, Any]:
    """Take the TLS options out of ``query`` (refused on a ``redis://`` URL: they would be
    ignored, and the connection would not be encrypted)."""
    found = {name: query.pop(name) for name in _TLS_QUERY if name in query}
    if not found:
        return {}
    if not tls:
        raise UsageError(f"{', '.join(found)} in a redis:// URL: use rediss:// for TLS")
    options: dict[str, Any] = {}
    for name, value in found.items():
        if name == "ssl_cert_reqs":
            if value not in ("required", "optional", "none"):
                raise UsageError(f"ssl_cert_reqs is required, optional or none, not {value!r}")
            options[name] = value
        elif name == "ssl_check_hostname":
            if value.lower() not in ("true", "false"):
                raise UsageError(f"ssl_check_hostname is true or false, not {value!r}")
            options[name] = value.lower() == "true"
        else:
            options[name] = value
    return options


_SCRIPTS: Final = {name: getattr(scripts, name) for name in scripts.__all__}
_SHAS: Final = {name: hashlib.sha1(text.encode()).hexdigest() for name, text in _SCRIPTS.items()}


COMMANDS: Final = frozenset({"XRANGE"})
"""Requests that are plain commands (keys, then arguments), not scripts."""


def script_sha(name: str) -> str:
    """The SHA1 of a script (what ``EVALSHA`` names it by)."""
    return _SHAS[name]


def script_text(name: str) -> str:
    """The Lua text of a script."""
    return str(_SCRIPTS[name])


def _bulk(value: Any) -> bytes:
    if type(value) is bytes:
        return b"$%d\r\n%b\r\n" % (len(value), value)
    value = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else b"%d" % value
    return b"$%d\r\n%b\r\n" % (len(value), value)


APPEND_FIXED: Final = 5
"""How many of an append script's first arguments are the same for every append of a session
(packed once, :func:`evalsha_command`)."""


def evalsha_command(
    sha: str, keys: Sequence[bytes], args: Sequence[Any], fixed: int = APPEND_FIXED
) -> bytes:
    """``EVALSHA sha numkeys keys... args...`` in the protocol (arguments: bytes, strings
    as UTF-8, integers); the part up to the first ``fixed`` arguments, the same for every
    append of a session, is packed once (kept for the latest sessions)."""
    head = _head(sha, tuple(keys), tuple(args[:fixed]))
    count = b"*%d\r\n$7\r\nEVALSHA\r\n" % (3 + len(keys) + len(args))
    return count + head + b"".join(map(_bulk, args[fixed:]))


@functools.lru_cache(maxsize=4096)
def _head(sha: str, keys: tuple[bytes, ...], fixed: tuple[Any, ...]) -> bytes:
    """The packed sha, key count, keys and fixed arguments of :func:`evalsha_command`."""
    return b"".join(map(_bulk, (sha, len(keys), *keys, *fixed)))


def eval_command(text: str, keys: Sequence[bytes], args: Sequence[Any]) -> bytes:
    """``EVAL`` of a script's text, as :func:`evalsha_command` packs it."""
    parts = [text, len(keys), *keys, *args]
    return b"*%d\r\n$4\r\nEVAL\r\n" % (len(parts) + 1) + b"".join(map(_bulk, parts))


def _parse_error(text: str) -> Exception:
    """The redis-py exception of an error reply (``NOSCRIPT ...``, ``READONLY ...``), as
    redis-py's own parsers make it."""
    if _REPLY_ERRORS is not None:
        error: Exception = _REPLY_ERRORS.parse_error(text)
        return error
    code = text.split(" ", 1)[0]  # pragma: no cover - the few the append tells apart
    kinds = {"NOSCRIPT": rex.NoScriptError, "READONLY": rex.ReadOnlyError}
    return kinds.get(code, rex.ResponseError)(text)  # pragma: no cover


def parse_reply(buf: bytearray, at: int) -> tuple[Any, int] | None:
    """One RESP2 reply of ``buf`` from ``at`` and where it ends (None: not all of it read
    yet): bulk strings as bytes, integers, arrays as lists, an error reply as its
    exception (raised by the caller once the reply is whole)."""
    end = buf.find(b"\r\n", at)
    if end < 0:
        return None
    kind, head = buf[at], bytes(buf[at + 1 : end])
    at = end + 2
    if kind == 0x24:  # $: a bulk string
        n = int(head)
        if n < 0:
            return None, at
        if len(buf) < at + n + 2:
            return None
        return bytes(buf[at : at + n]), at + n + 2
    if kind == 0x3A:  # :
        return int(head), at
    if kind == 0x2A:  # *: an array
        n = int(head)
        items: list[Any] = []
        for _ in range(max(n, 0)):
            got = parse_reply(buf, at)
            if got is None:
                return None
            item, at = got
            items.append(item)
        return (items if n >= 0 else None), at
    if kind == 0x2B:  # +: a simple string
        return head, at
    if kind == 0x2D:  # -: an error
        return _parse_error(head.decode("utf-8", "replace")), at
    raise rex.InvalidResponse(f"unexpected reply type {chr(kind)!r}")


class _Direct:
    """A socket of one thread's own to a plain-TCP server, for the append's script: sent and
    read here (RESP2), without redis-py's connection and parser around each call, which cost
    about as much client time as the rest of the append. Connected (and authenticated, its
    database selected) at its first use and again after any failure; closed when the
    thread's locals go, or by :meth:`Server.close`."""

    __slots__ = ("__weakref__", "pid", "sock", "target", "timeouts")

    def __init__(self, target: Target, timeouts: tuple[float, float]) -> None:
        self.target = target
        self.timeouts = timeouts
        self.pid = os.getpid()
        self.sock: socket.socket | None = None

    def _connect(self) -> socket.socket:
        target = self.target
        socket_timeout, connect_timeout = self.timeouts
        host, port = target.nodes[0]
        try:
            sock = socket.create_connection((host, port), timeout=connect_timeout)
        except OSError as exc:
            raise rex.ConnectionError(f"Error connecting to {host}:{port}. {exc}") from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(socket_timeout)
            setup = target.setup_commands()
            if setup:
                sock.sendall(b"".join(pack_command(parts) for parts in setup))
                buf = bytearray()
                for _ in setup:
                    answer = self._read(sock, buf)
                    if isinstance(answer, Exception):
                        raise answer
        except BaseException:
            sock.close()
            raise
        return sock

    @staticmethod
    def _read(sock: socket.socket, buf: bytearray) -> Any:
        """One reply, read from ``sock`` into ``buf`` (what follows it stays in ``buf``)."""
        while True:
            got = parse_reply(buf, 0) if buf else None
            if got is not None:
                del buf[: got[1]]
                return got[0]
            chunk = sock.recv(65536)
            if not chunk:
                raise rex.ConnectionError("Connection closed by server.")
            buf += chunk

    def call(self, command: bytes) -> Any:
        """Send ``command`` and read its reply (an error reply raised as redis-py's
        exception; a failed send or read closes the socket and raises redis-py's
        ``ConnectionError`` or ``TimeoutError``)."""
        sock = self.sock
        if sock is None:
            sock = self.sock = self._connect()
        try:
            sock.sendall(command)
            chunk = sock.recv(65536)
            # The common answer, whole in one read: a bulk string.
            if chunk[:1] == b"$" and chunk[-2:] == b"\r\n":
                head, _, rest = chunk.partition(b"\r\n")
                if len(rest) == int(head[1:]) + 2:
                    return rest[:-2]
            if not chunk:
                raise rex.ConnectionError("Connection closed by server.")
            answer = self._read(sock, bytearray(chunk))
        except TimeoutError:
            self.close()
            raise rex.TimeoutError("Timeout reading from the server") from None
        except OSError as exc:
            self.close()
            raise rex.ConnectionError(f"Error while talking to the server: {exc}") from None
        except BaseException:
            self.close()  # the reply may be on its way: not for the next command
            raise
        if isinstance(answer, Exception):
            raise answer
        return answer

    def close(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None and self.pid == os.getpid():
            with contextlib.suppress(OSError):
                sock.close()

    def __del__(self) -> None:
        self.close()


def pack_command(parts: Sequence[Any]) -> bytes:
    """A command in the protocol (its parts bytes, strings or integers)."""
    return b"*%d\r\n" % len(parts) + b"".join(map(_bulk, parts))


class _Held:
    """A connection taken from a pool for one thread, given back when the thread's locals
    go (the thread ended, or the server was closed)."""

    __slots__ = ("connection", "pid", "pool")

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.pid = os.getpid()
        self.connection = pool.get_connection()

    def __del__(self) -> None:
        if self.pid == os.getpid():
            with contextlib.suppress(Exception):
                self.pool.release(self.connection)


class Server:
    """A store's client and what every call goes through: scripts by name (``EVALSHA``,
    loaded on ``NOSCRIPT``), and the translation of driver errors (:meth:`failure`)."""

    def __init__(self, target: Target, client: Any) -> None:
        self.target = target
        """The store's URL, parsed."""
        self._client = client
        self._reconnect = False
        self.keys = Keys(_b(target.prefix))
        """The store's key names."""
        self.closed = False
        """Whether the store closed it."""
        self.replica_timeout = 5.0
        """Seconds ``WAIT`` waits for the replicas (``replicas=N``)."""
        self.read_only = False
        """Whether the server refused a write as a read-only replica (the catalog is then
        read as it stands, and the documents not indexed yet are read from the logs)."""
        self.timeouts = (30.0, 10.0)
        """The socket and connect timeouts (seconds) of the append's own sockets."""
        self._lock = threading.Lock()
        self._local = threading.local()
        self._directs: weakref.WeakSet[_Direct] = weakref.WeakSet()

    @property
    def client(self) -> Any:
        """The redis-py client (thread-safe: a connection pool); in a forked child, a cluster
        client of its own, made at its first use there (see :meth:`after_fork`)."""
        if self._reconnect:
            with self._lock:
                if self._reconnect:
                    self._client = self.target.connect(socket_timeout=30.0, connect_timeout=10.0)
                    self._reconnect = False
        return self._client

    @property
    def cluster(self) -> bool:
        """Whether the store is on a Redis Cluster."""
        return self.target.cluster

    def failure(self, exc: Exception, action: str, write: str = "") -> StorageError:
        """The library's error for a driver error met while ``action``: a write (``write``
        says what is unknown then) that lost its connection is
        :class:`~agentsession.errors.OutcomeUnknown`; a server that cannot be reached, or a
        cluster that refused the command while it fails over, is
        :class:`~agentsession.errors.StoreUnavailable`; anything else a
        :class:`~agentsession.errors.StorageError`."""
        where = self.target.location
        text = str(exc).strip().replace("\n", " ")
        if self.target.password:
            text = text.replace(self.target.password, "***")
        if isinstance(exc, rex.ResponseError) and text.split(" ", 1)[0] in _CLUSTER_DOWN:
            return StoreUnavailable(f"{action}: {where} refused the command for now ({text})")
        unreachable = (
            rex.ConnectionError,
            rex.TimeoutError,
            rex.ClusterError,
            rex.RedisClusterUnreachableError,  # not a RedisError: a cluster client made anew
            OSError,
        )
        if isinstance(exc, unreachable):
            if write:
                return OutcomeUnknown(
                    f"{action}: the connection to {where} was lost ({text}); {write}"
                )
            return StoreUnavailable(f"{action}: cannot reach {where} ({text})")
        return StorageError(f"{action}: {where} answered an error ({text})")

    def run(self, action: str, call: Callable[[], T], write: str = "") -> T:
        """``call()``, its driver errors translated (:meth:`failure`)."""
        if self.closed:
            raise UsageError(f"store {self.target.location} is closed")
        try:
            return call()
        except (rex.RedisError, rex.RedisClusterException) as exc:
            if isinstance(exc, rex.ReadOnlyError) and not self.cluster:
                self.read_only = True
            raise self.failure(exc, action, write) from None
        except OSError as exc:
            raise self.failure(exc, action, write) from None

    def script(
        self, name: str, keys: Sequence[bytes], args: Sequence[Any], client: Any = None
    ) -> Any:
        """Run the script ``name`` (loading it when the server does not know it), untranslated
        (call it inside :meth:`run`)."""
        use = self.client if client is None else client
        if name in COMMANDS:
            return use.execute_command(name, *keys, *args)
        sha = _SHAS[name]
        try:
            return use.evalsha(sha, len(keys), *keys, *args)
        except rex.NoScriptError:
            return use.eval(_SCRIPTS[name], len(keys), *keys, *args)

    def packed_script(self, name: str, keys: Sequence[bytes], args: Sequence[Any]) -> Any:
        """:meth:`script` on one server, packed here: the hot append's path, which skips the
        client time redis-py spends around a command (its generic packing, retries,
        observability, its parser). Sent on this thread's own socket (:class:`_Direct`) to a
        plain-TCP server, on a connection of the client's pool with TLS."""
        command = evalsha_command(_SHAS[name], keys, args)
        if not self.target.tls:
            direct = self._direct()
            try:
                return direct.call(command)
            except rex.NoScriptError:
                return direct.call(eval_command(_SCRIPTS[name], keys, args))
        connection = self._connection()
        try:
            connection.send_packed_command([command])
            return connection.read_response()
        except rex.NoScriptError:
            connection.send_packed_command([eval_command(_SCRIPTS[name], keys, args)])
            return connection.read_response()
        except rex.ResponseError:
            raise  # an answer: the connection is fine
        except BaseException:
            connection.disconnect()  # the reply may be on its way: not for the next command
            raise

    def _direct(self) -> _Direct:
        """This thread's socket for :meth:`packed_script` (made at its first use in this
        thread and process)."""
        direct: _Direct | None = getattr(self._local, "direct", None)
        if direct is None or direct.pid != os.getpid():
            direct = self._local.direct = _Direct(self.target, self.timeouts)
            with self._lock:
                self._directs.add(direct)
        return direct

    def _connection(self) -> Any:
        """This thread's connection for :meth:`packed_script`: taken from the client's pool
        at its first use in this thread and process, given back when the thread ends."""
        pool = self.client.connection_pool
        held = getattr(self._local, "held", None)
        if held is None or held.pool is not pool or held.pid != os.getpid():
            held = self._local.held = _Held(pool)
        return held.connection

    def append(self, request: Any) -> Any:
        """Run an append's script (a :class:`~agentsession.backends.redis.storage.Request`);
        with ``replicas=N``, on the same connection, ``WAIT N`` after it: a batch stored but
        acknowledged by fewer replicas within ``replica_timeout`` raises
        :class:`~agentsession.errors.StorageError` (stored on the primary, which may still
        lose it). Untranslated otherwise (call it inside :meth:`run`)."""
        wanted = self.target.replicas
        if not wanted:
            if self.cluster:
                return self.script(request.name, request.keys, request.args)
            return self.packed_script(request.name, request.keys, request.args)
        client = self.client
        if self.cluster:
            client = client.get_redis_connection(client.get_node_from_key(request.keys[0]))
        sha = _SHAS[request.name]
        for _ in range(2):
            pipe = client.pipeline(transaction=False)
            pipe.evalsha(sha, len(request.keys), *request.keys, *request.args)
            pipe.wait(wanted, int(self.replica_timeout * 1000))
            try:
                reply, acked = pipe.execute()
            except rex.NoScriptError:
                client.script_load(_SCRIPTS[request.name])
                continue
            stored = type(reply) is bytes or int(reply[0]) == 1  # bytes: '1 <base> <life>'
            if stored and int(acked) < wanted:
                raise StorageError(
                    f"{request.action}: stored on the primary of {self.target.location}, but "
                    f"only {acked} of {wanted} replicas acknowledged it within "
                    f"{self.replica_timeout} s: a failover now could lose it (the ids are "
                    "recognised if it is appended again)"
                )
            return reply
        raise StorageError(f"{request.action}: the server keeps forgetting its scripts")

    def close(self) -> None:
        """Close the client's connections."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            directs = list(self._directs)
        for direct in directs:
            direct.close()
        if self._reconnect:  # a forked child that never used it: the parent's to close
            self._reconnect = False
            return
        try:
            self._client.close()
        except Exception:
            log.debug("closing %s failed", self.target.location, exc_info=True)

    def after_fork(self) -> None:
        """In a forked child: connections of its own (redis-py's pools notice the new pid;
        a cluster client is made again at its first use, so that a fork never waits for, or
        fails on, a cluster it will not use)."""
        self._lock = threading.Lock()
        self._local = threading.local()
        self._directs = weakref.WeakSet()
        if self.cluster and not self.closed:
            self._reconnect = True
