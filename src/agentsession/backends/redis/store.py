"""The Redis store: its catalog, meta and turn locks, and the durability it checks.

Opened by ``open_store("redis://127.0.0.1:6379/0")`` (``rediss://`` for TLS,
``redis+cluster://host:port,host:port`` or ``cluster=True`` for a Redis Cluster). The key
layout is in ``docs/format.md``; how appends stay exactly-once and ordered is told in
:mod:`agentsession.backends.redis.storage`, the catalog in
:mod:`agentsession.backends.redis.index`.

* **Durability** is the server's, and the store checks which it gets: ``durability="fsync"``
  needs ``appendonly yes`` with ``appendfsync always`` on every primary (read with
  ``CONFIG GET``; a server that refuses ``CONFIG`` is trusted, with a warning), or
  ``replicas=N``, which makes every append wait (``WAIT N``) until N replicas acknowledged it.
  A server that keeps nothing on disk (no append-only file, no snapshots) is refused for
  ``fsync`` with a message saying how to configure it. ``flush`` takes the server's settings
  as they are.
* **Turn locks** are keys (``{tag}:l``) set to a random token with an expiry (``lock_ttl``,
  10 s by default), renewed by a thread every third of it while held and deleted (only
  while the token is still ours) on release. A holder that dies loses the lock when the
  expiry passes; one that stops renewing (a stopped process, a lost network) can lose it
  while alive, so a take-over fences the log (:mod:`agentsession.fencing`).
* **TTL**: with ``ttl=``, the server drops a session's keys ``ttl + expire_grace`` after its
  last append (``expire_grace`` defaults to ``ttl``), or after its last update in a store
  opened with ``renew_on_update=True``: until then the store refuses the session as expired,
  as every backend does, and ``purge_expired`` deletes it sooner.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as _dt
import logging
import os
import threading
import time
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import redis.exceptions as rex

from ...catalog import CatalogDefaults, StoreParts
from ...contract import Capabilities, SessionInfo
from ...errors import LockTimeout, StorageError, StoreUnavailable, UsageError
from ...session import BaseSession
from ...store import BaseStore
from .index import RedisIndex
from .server import DEFAULT_PREFIX, Server, Target, session_tag
from .storage import RedisLog, bytes_of, micros, time_of_micros

if TYPE_CHECKING:
    import concurrent.futures

    from ...session import SessionHost

__all__ = [
    "DEFAULT_PREFIX",
    "LAYOUT_VERSION",
    "RedisCatalog",
    "RedisLocker",
    "RedisLog",
    "RedisMeta",
    "RedisStore",
    "open_redis",
    "session_tag",
]

log = logging.getLogger("agentsession.backends.redis")

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def _text(value: Any) -> str:
    return bytes(value).decode("utf-8", "surrogatepass")


class RedisCatalog(CatalogDefaults):
    """The sessions of a :class:`RedisStore`: the store-wide sorted set of last appends
    (``{~catalog}:z:u``) lists them; each session's hash answers for it."""

    def __init__(self, db: Server, index: RedisIndex, expiry_ms: int) -> None:
        self._db = db
        self._index = index
        self._expiry_ms = expiry_ms
        self.kept = b""
        """What appends keep of the catalog (the append script's flag: ``b""`` nothing,
        ``b"r"`` rows, ``b"rd"`` rows and search documents; set by the store)."""

    @property
    def location(self) -> str:
        """The store's URL without its password."""
        return self._db.target.location

    @property
    def url(self) -> str:
        """The URL the store was opened with."""
        return self._db.target.url

    def open_session(self, store: SessionHost, session_id: str) -> BaseSession:
        log = RedisLog(self._db, session_id, self._expiry_ms, self.kept)
        return BaseSession(store, session_id, log)

    def _hash(self, session_id: str) -> bytes:
        return self._db.keys.session(session_id)[0]

    def exists(self, session_id: str) -> bool:
        db = self._db
        last = db.run(
            f"reading session {session_id!r}",
            lambda: db.client.hget(self._hash(session_id), "last"),
        )
        return bool(last and int(last) > 0)

    def _infos(self, hashes: Sequence[bytes]) -> builtins.list[SessionInfo]:
        """The listing entries of sessions by their hashes' keys (those with events)."""
        db = self._db

        def read() -> builtins.list[Any]:
            pipe = db.client.pipeline(transaction=False)
            for key in hashes:
                pipe.hmget(key, "sid", "updated", "created", "last", "size")
            return builtins.list(pipe.execute())

        found = db.run("listing sessions", read) if hashes else []
        out: builtins.list[SessionInfo] = []
        for sid, updated, created, last, size in found:
            if not last or sid is None:
                continue  # expired or deleted since the listing was read
            out.append(
                SessionInfo(
                    id=_text(sid),
                    updated_at=time_of_micros(updated),
                    created_at=time_of_micros(created),
                    last_seq=int(last),
                    size=int(size or 0),
                )
            )
        return out

    def list_all(self) -> builtins.list[SessionInfo]:
        """Every session, found by scanning for the sessions' hashes (on every primary of a
        Cluster): the sessions' own keys, not the store-wide index, so that ``reindex``
        finds what that index lost."""
        db = self._db
        pattern = _glob_escaped(db.keys.prefix) + b"{*}:s"

        def scan() -> builtins.list[bytes]:
            if db.cluster:
                from redis.cluster import RedisCluster

                found = db.client.scan_iter(
                    match=pattern, count=1000, target_nodes=RedisCluster.PRIMARIES
                )
            else:
                found = db.client.scan_iter(match=pattern, count=1000)
            return [bytes(k) for k in found]

        hashes = db.run("listing sessions", scan)
        return self._infos(sorted(set(hashes)))

    def list_page(
        self, prefix: str | None, limit: int | None, offset: int
    ) -> builtins.list[SessionInfo]:
        """A page newest first from the store-wide sorted set of last appends (ties by id,
        descending, as the server orders them); a prefix, or no limit, from
        :meth:`list_all`. On one server an append to a row behind its log (marked in
        ``m:r``) leaves the session's place in that set as it was: the marked sessions are
        placed by their own hashes' times."""
        if prefix is not None or limit is None:
            return super().list_page(prefix, limit, offset)
        db = self._db
        zkey = db.keys.catalog + b"z:u"
        stop = offset + limit - 1
        marks = db.keys.catalog + b"m:r"

        def read() -> tuple[builtins.list[bytes], builtins.list[bytes]]:
            if not self.kept or db.cluster:
                return db.client.zrevrange(zkey, offset, stop), []
            pipe = db.client.pipeline(transaction=False)
            pipe.hkeys(marks)
            pipe.zrevrange(zkey, 0, stop)
            marked, ids = pipe.execute()
            if not marked:
                return ids[offset:], []
            return ids, marked

        ids, marked = db.run("listing sessions", read)
        if not marked:
            return self._infos([self._hash(_text(i)) for i in ids])
        # A session that is not marked is placed right: those of the page are among the
        # first offset + limit of the set (a marked one is only ever placed too late).
        found = dict.fromkeys(bytes(i) for i in [*ids, *marked])
        infos = self._infos([self._hash(_text(i)) for i in found])
        infos.sort(key=lambda i: (i.updated_at or _EPOCH, bytes_of(i.id)), reverse=True)
        return infos[offset : offset + limit]

    def expired_ids(self, cutoff: _dt.datetime) -> builtins.list[str]:
        db = self._db
        zkey = db.keys.catalog + b"z:u"
        bound = f"({micros(cutoff)}"
        ids = db.run("listing sessions", lambda: db.client.zrangebyscore(zkey, "-inf", bound))
        return [
            i.id
            for i in self._infos([self._hash(_text(i)) for i in ids])
            if i.updated_at is not None and i.updated_at < cutoff
        ]

    def renew(self, session_id: str) -> None:
        """Give the session's keys (not its lock) their expiry again, ``ttl + expire_grace``
        from now, as an append's script does (nothing without ``ttl``; keys that are gone
        stay gone)."""
        if not self._expiry_ms:
            return
        db = self._db
        keys = db.keys.session(session_id)[:5]
        expiry = self._expiry_ms

        def renew() -> None:
            pipe = db.client.pipeline(transaction=False)
            for key in keys:
                pipe.pexpire(key, expiry)
            pipe.execute()

        db.run(f"renewing session {session_id!r}", renew)

    def last_append(self, session_id: str) -> _dt.datetime | None:
        db = self._db
        found = db.run(
            f"reading session {session_id!r}",
            lambda: db.client.hget(self._hash(session_id), "updated"),
        )
        return time_of_micros(found)

    def delete(self, session_id: str, meta_kinds: Sequence[str]) -> bool:
        """The session's keys in one script (its lock key stays: a holder keeps it), then its
        meta entries and its store-wide index entries, each in a call of its own (other
        slots): a failure between them leaves index entries that lists and searches skip
        (the session's row is gone)."""
        db = self._db
        keys = db.keys.session(session_id)
        sid = bytes_of(session_id)
        action = f"deleting session {session_id!r}"
        reply = db.run(
            action,
            lambda: db.script("DELETE", keys, []),
            write="the session may or may not have been deleted",
        )
        if meta_kinds:

            def drop_meta() -> None:
                pipe = db.client.pipeline(transaction=False)
                for kind in meta_kinds:
                    pipe.hdel(db.keys.meta(kind), sid)
                pipe.execute()

            db.run(action, drop_meta)
        self._index.unindex(session_id, reply[1])
        return int(reply[0]) == 1

    def close(self) -> None:
        self._db.close()

    def after_fork(self) -> None:
        self._db.after_fork()


def _glob_escaped(text: bytes) -> bytes:
    """``text`` with the glob characters of ``SCAN MATCH`` escaped."""
    out = bytearray()
    for byte in text:
        if byte in b"*?[]\\":
            out += b"\\"
        out.append(byte)
    return bytes(out)


class RedisMeta:
    """Meta entries as one hash per kind (``{~meta}:k:<kind>``) and the set of kinds, with
    ``add`` and ``cas`` as scripts."""

    def __init__(self, db: Server) -> None:
        self._db = db

    def get(self, kind: str, key: str) -> str | None:
        db = self._db
        found = db.run(
            f"reading {kind} {key!r}", lambda: db.client.hget(db.keys.meta(kind), bytes_of(key))
        )
        return None if found is None else _text(found)

    def set(self, kind: str, key: str, value: str | None) -> None:
        db = self._db
        hkey = db.keys.meta(kind)
        action = f"writing {kind} {key!r}"
        if value is None:
            db.run(action, lambda: db.client.hdel(hkey, bytes_of(key)))
            return

        def write() -> None:
            db.client.hset(hkey, bytes_of(key), bytes_of(value))
            db.client.sadd(db.keys.meta_kinds, bytes_of(kind))

        db.run(action, write, write=f"the {kind} value may or may not have been written")

    def add(self, kind: str, key: str, value: str) -> str:
        db = self._db
        keys = [db.keys.meta(kind), db.keys.meta_kinds]
        args = [bytes_of(kind), bytes_of(key), bytes_of(value)]
        found = db.run(
            f"writing {kind} {key!r}",
            lambda: db.script("META_ADD", keys, args),
            write=f"the {kind} value may or may not have been written",
        )
        return _text(found)

    def cas(self, kind: str, key: str, expected: str | None, new: str | None) -> bool:
        db = self._db
        keys = [db.keys.meta(kind), db.keys.meta_kinds]
        args = [
            bytes_of(kind),
            bytes_of(key),
            b"0" if expected is None else b"1",
            b"" if expected is None else bytes_of(expected),
            b"0" if new is None else b"1",
            b"" if new is None else bytes_of(new),
        ]
        done = db.run(
            f"writing {kind} {key!r}",
            lambda: db.script("CAS", keys, args),
            write=f"the {kind} value may or may not have been written",
        )
        return int(done) == 1

    def list(self, kind: str | None = None) -> builtins.list[tuple[str, str, str]]:
        db = self._db
        if kind is None:
            kinds = sorted(
                _text(k)
                for k in db.run("listing meta", lambda: db.client.smembers(db.keys.meta_kinds))
            )
        else:
            kinds = [kind]
        out: builtins.list[tuple[str, str, str]] = []
        for name in kinds:
            hkey = db.keys.meta(name)

            def read(hkey: bytes = hkey) -> Any:
                return db.client.hgetall(hkey)

            entries = db.run(f"listing {name}", read)
            out += [(name, _text(k), _text(v)) for k, v in entries.items()]
        return sorted(out)


class _Held:
    """A held turn lock: its key, token and whether renewing it still finds it ours."""

    __slots__ = ("alive", "key", "session_id", "token")

    def __init__(self, session_id: str, key: bytes, token: bytes) -> None:
        self.session_id = session_id
        self.key = key
        self.token = token
        self.alive = True


class RedisLocker:
    """Turn locks as expiring keys holding a random token (see the module docstring).
    Waiting polls, with pauses growing from 1 ms to 50 ms."""

    lost_while_alive = True
    """A holder that stops renewing (stopped, cut off) loses the lock while alive: a
    take-over fences the log."""

    def __init__(self, db: Server, ttl: float) -> None:
        self._db = db
        self._ttl_ms = max(int(ttl * 1000), 1)
        self._held: set[_Held] = set()
        self._mutex = threading.Lock()
        self._renewer: threading.Thread | None = None
        self._stop = threading.Event()

    def acquire(self, session_id: str, timeout: float | None) -> object:
        db = self._db
        key = db.keys.session(session_id)[5]
        token = os.urandom(12).hex().encode()
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        pause = 0.001
        action = f"taking the turn lock of session {session_id!r}"
        while True:
            taken = db.run(action, lambda: db.script("LOCK", [key], [token, self._ttl_ms]))
            if int(taken) == 1:
                held = _Held(session_id, key, token)
                with self._mutex:
                    self._held.add(held)
                    self._start_renewing()
                return held
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise LockTimeout(session_id, timeout or 0.0)
            wait = pause if deadline is None else min(pause, max(deadline - now, 0.0))
            time.sleep(wait)
            pause = min(pause * 2, 0.05)

    def release(self, handle: object) -> None:
        assert isinstance(handle, _Held)
        with self._mutex:
            self._held.discard(handle)
        if not handle.alive:
            return
        handle.alive = False
        db = self._db
        with contextlib.suppress(StoreUnavailable, UsageError):  # it expires by itself
            db.run(
                f"releasing the turn lock of session {handle.session_id!r}",
                lambda: db.script("UNLOCK", [handle.key], [handle.token]),
            )

    def alive(self, handle: object) -> bool:
        """Whether renewing the lock last found it ours (no round trip)."""
        assert isinstance(handle, _Held)
        return handle.alive

    def is_locked(self, session_id: str) -> bool:
        db = self._db
        key = db.keys.session(session_id)[5]
        return bool(
            db.run(
                f"checking the turn lock of session {session_id!r}", lambda: db.client.exists(key)
            )
        )

    def _start_renewing(self) -> None:
        if self._renewer is not None and self._renewer.is_alive():
            return
        self._stop.clear()
        ref = weakref.ref(self)
        interval = self._ttl_ms / 3000.0
        thread = threading.Thread(
            target=_renew_loop, args=(ref, interval, self._stop), daemon=True,
            name="agentsession-redis-locks",
        )  # fmt: skip
        self._renewer = thread
        thread.start()

    def renew_all(self) -> bool:
        """Push back the expiry of every held lock; marks those found lost. False when none
        is held (the renewing thread then ends)."""
        with self._mutex:
            held = builtins.list(self._held)
        if not held:
            return False
        db = self._db
        for handle in held:
            args = [handle.token, self._ttl_ms]

            def renew(key: bytes = handle.key, args: builtins.list[Any] = args) -> Any:
                return db.script("RENEW", [key], args)

            try:
                ours = db.run("renewing a turn lock", renew)
            except StorageError:
                continue  # tried again at the next renewal, while the expiry lasts
            except UsageError:
                return False  # closed
            if int(ours) != 1:
                handle.alive = False
                with self._mutex:
                    self._held.discard(handle)
        return True

    def after_fork(self, held: builtins.list[object]) -> None:
        """In a forked child: the parent's locks stay the parent's (never released or
        renewed here)."""
        self._held = set()
        self._mutex = threading.Lock()
        self._renewer = None
        self._stop = threading.Event()


def _renew_loop(ref: weakref.ref[RedisLocker], interval: float, stop: threading.Event) -> None:
    while not stop.wait(interval):
        locker = ref()
        if locker is None or not locker.renew_all():
            return
        del locker


# -- the key layout's version ----------------------------------------------------------------

LAYOUT_VERSION = 3
"""The version of the key layout (``docs/format.md``), kept in ``<prefix>{~meta}:layout``.
Version 2 (catalog rows at turn boundaries, search documents indexed before a search: the
row's ``cs`` seq, the marks ``m:r`` and ``m:d``, ``di``) reads version 1 as it is (a row
without ``cs`` holds every event, documents without ``di`` are indexed again when their
session is marked). Version 3 keeps a new session's event ids in its hash (``#<id>``
fields, the hash's ``ids`` field ``s``), not in a hash of their own (``i``), and on one
server marks a row behind its log once, not at every append; it reads version 2 as it is (a
session without ``ids`` keeps its ids in ``i``). Each records itself in the store it opens,
so that older code, which would take ids or drop marks the older way, refuses the store."""


def check_layout(db: Server, create: bool) -> None:
    """Record the key layout's version in a new store (``create``), and refuse a store that a
    newer layout wrote."""
    key = db.keys.prefix + b"{~meta}:layout"

    def read() -> Any:
        try:
            if create:
                db.client.set(key, LAYOUT_VERSION, nx=True)
            found = db.client.get(key)
            if found is not None and int(found) < LAYOUT_VERSION:
                db.client.set(key, LAYOUT_VERSION)  # read as it is, written as this version
        except rex.ReadOnlyError:  # a replica: read what it has
            db.read_only = not db.cluster
        return db.client.get(key)

    found = db.run("reading the key layout's version", read)
    if found is not None and int(found) > LAYOUT_VERSION:
        raise StoreUnavailable(
            f"{db.target.location} holds key layout version {int(found)}, newer than this "
            f"agentsession reads ({LAYOUT_VERSION}): upgrade agentsession"
        )


# -- durability -------------------------------------------------------------------------------

_HOW_TO = (
    "configure the server with 'appendonly yes' and 'appendfsync always' (redis.conf, or "
    "CONFIG SET appendonly yes / CONFIG SET appendfsync always, then CONFIG REWRITE), or "
    "open the store with replicas=N to wait for N replicas' acknowledgement of every append, "
    "or use durability='flush'"
)


def check_durability(db: Server, durability: str) -> None:
    """Refuse ``durability="fsync"`` on a primary that does not sync its append-only file at
    every write (unless ``replicas=N``); a server that refuses ``CONFIG GET`` is trusted."""
    if durability != "fsync" or db.target.replicas:
        return
    client = db.client

    def read() -> builtins.list[dict[str, str]]:
        if db.cluster:
            from redis.cluster import RedisCluster

            replies = client.config_get("*", target_nodes=RedisCluster.PRIMARIES)
            if (
                isinstance(replies, dict)
                and replies
                and all(isinstance(v, dict) for v in replies.values())
            ):
                return [_config(v) for v in replies.values()]
            return [_config(replies)]
        return [_config(client.config_get("*"))]

    try:
        configs = db.run("checking the server's persistence", read)
    except StorageError as exc:
        if isinstance(exc, StoreUnavailable):
            raise
        log.warning(
            "%s: CONFIG GET is not allowed (%s): durability='fsync' trusts the server to "
            "run appendonly yes with appendfsync always",
            db.target.location,
            exc,
        )
        return
    for config in configs:
        aof = config.get("appendonly", "no")
        fsync = config.get("appendfsync", "everysec")
        save = config.get("save", "")
        if aof != "yes" and not save.strip():
            raise StorageError(
                f"{db.target.location} keeps nothing on disk (appendonly no, no save "
                f"points): durability='fsync' cannot be had there; {_HOW_TO}"
            )
        if aof != "yes" or fsync != "always":
            raise StorageError(
                f"{db.target.location} runs appendonly {aof} with appendfsync {fsync}: an "
                f"acknowledged append could be lost in a crash, so durability='fsync' is "
                f"refused; {_HOW_TO}"
            )


def _config(reply: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in dict(reply).items():
        key = k.decode() if isinstance(k, bytes) else str(k)
        out[key] = v.decode() if isinstance(v, bytes) else str(v)
    return out


# -- the store --------------------------------------------------------------------------------


class RedisStore(BaseStore):
    """Sessions in Redis (one server or a Cluster). Opened by ``open_store("redis://...")``.

    Options besides the common ones (``durability``, ``ttl``, ...), also accepted in the
    URL's query where noted:

    * ``cluster`` (default: the scheme says): a Redis Cluster reached through the nodes
      named;
    * ``prefix`` (URL too; default ``agentsession:``): the start of every key name, so that
      stores share a server;
    * ``replicas`` (URL too; default 0): after every append, ``WAIT`` for this many replicas'
      acknowledgement (within ``replica_timeout``, default 5 s; fewer raises
      :class:`~agentsession.errors.StorageError`, the batch stored on the primary);
    * ``lock_ttl`` (URL too; default 10 s): how long a turn lock outlives a holder that
      stopped renewing it;
    * ``expire_grace`` (default: ``ttl``): with ``ttl=``, how long after a session expires the
      server drops its keys;
    * ``reconnect_timeout`` (default 10 s): how long an append rides out a lost connection or
      a failover (reading the log for the batch's ids first, so it is stored once);
    * ``socket_timeout`` / ``connect_timeout`` (default 30 s / 10 s).
    """

    capabilities = Capabilities(native_async=True)

    def __init__(
        self,
        url: str,
        *,
        cluster: bool | None = None,
        prefix: str | None = None,
        replicas: int | None = None,
        replica_timeout: float = 5.0,
        lock_ttl: float | None = None,
        expire_grace: _dt.timedelta | None = None,
        reconnect_timeout: float = 10.0,
        socket_timeout: float = 30.0,
        connect_timeout: float = 10.0,
        create: bool = True,
        **options: Any,
    ) -> None:
        def parts() -> StoreParts:
            if not isinstance(reconnect_timeout, (int, float)) or not reconnect_timeout >= 0:
                raise UsageError(
                    f"reconnect_timeout must be >= 0 seconds, not {reconnect_timeout!r}"
                )
            target = Target.parse(
                url, cluster=cluster, prefix=prefix, replicas=replicas, lock_ttl=lock_ttl
            )
            try:
                client = target.connect(
                    socket_timeout=socket_timeout, connect_timeout=connect_timeout
                )
            except (rex.RedisError, OSError) as exc:
                raise StoreUnavailable(f"cannot reach {target.location}: {exc}") from None
            db = self._db = Server(target, client)
            db.replica_timeout = float(replica_timeout)
            db.timeouts = (socket_timeout, connect_timeout)
            try:
                db.run("connecting", client.ping)
                check_layout(db, create)
                check_durability(db, self.durability)
            except BaseException:
                db.close()
                raise
            expiry_ms = 0
            if self.ttl is not None:
                grace = self.ttl if expire_grace is None else expire_grace
                expiry_ms = int((self.ttl + grace) / _dt.timedelta(milliseconds=1))
            index = RedisIndex(db)
            locker = RedisLocker(db, target.lock_ttl)
            return StoreParts(
                RedisCatalog(db, index, expiry_ms),
                RedisMeta(db),
                locker=lambda: locker,
                async_backend=lambda executor: _async_backend(self, executor, db),
                reconnect_timeout=float(reconnect_timeout),
                index=index,
            )

        super().__init__(parts, **options)
        # The catalog is caught up from the logs: rows at turns' ends (every other append
        # marks the session: Indexing.lazy), search documents before each search (appends
        # only mark).
        indexing = self._indexing
        catalog = self._catalog
        index = self._index
        assert isinstance(catalog, RedisCatalog) and isinstance(index, RedisIndex)
        if indexing.catalog:
            indexing.deferred = indexing.lazy = True
            indexing.documents_apart = indexing.searchable
            catalog.kept = b"rd" if indexing.searchable else b"r"
        index.deferred = indexing.catalog
        index.searchable = indexing.catalog and indexing.searchable

    def catch_up_catalog(self) -> None:
        """Bring the catalog rows of the sessions marked behind their logs up to date (as
        ``list`` by field, ``search`` and ``totals`` do first)."""
        index = self._index
        assert isinstance(index, RedisIndex)
        index.sync(self)

    def index_documents(self) -> int:
        """Index the search documents of the sessions whose appends marked them (as every
        ``search`` does first; a writer may run it after appending, so that the next search
        finds them indexed); returns how many sessions were read."""
        index = self._index
        assert isinstance(index, RedisIndex)
        if not index.searchable:
            return 0
        index.sync(self)
        return index.index_documents(self)

    @property
    def prefix(self) -> str:
        """The start of this store's key names."""
        return self._db.target.prefix

    @property
    def cluster(self) -> bool:
        """Whether the store is on a Redis Cluster."""
        return self._db.cluster


def _async_backend(store: RedisStore, executor: concurrent.futures.Executor, db: Server) -> Any:
    """The async API's backend: appends and reads natively on redis-py's asyncio client."""
    from .aio import RedisAsyncBackend

    return RedisAsyncBackend(store, executor, db)


def open_redis(url: str, **options: Any) -> RedisStore:
    """``open_store("redis://host:port/db")`` (also ``rediss://``, ``redis+cluster://``)."""
    return RedisStore(url, **options)
