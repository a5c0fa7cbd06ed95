"""``SessionCore``: the I/O-free part of a session, what every backend's session shares.

The sync facade (:class:`agentsession.session.BaseSession`) and the async API drive the same
core; this module holds it and performs no I/O itself:

* **The window and the id index**: every event from the latest compaction marker that rebuilds
  the history (or a tail of the log, until something needs more), the latest seq, the ids of
  the stored events this object has read, and one incremental
  :class:`~agentsession.derive.Deriver` per agent filter.
* **The plans**: generator methods (``_load_plan``, ``_refresh_plan``, ``_append_one_plan``,
  ``_append_batch_plan``, ``_read_plan``, ``_messages_plan``, ``_compact_plan``, ...) that
  decide everything and, where they need storage, yield an operation of
  :mod:`agentsession.ops` and are sent its result (or have the storage's exception thrown in).
  A driver performs the operations: :func:`agentsession.ops.drive` for the sync API,
  :func:`agentsession.ops.adrive` for the async one (through :class:`SessionPlans`).
* **The checks**: :func:`check_event` (what an append may store), stamping, the TTL, the
  marker index of a batch (:attr:`agentsession.events.Compaction.rebuilds_history`, the only
  place that decides it).
"""

from __future__ import annotations

import bisect
import datetime as _dt
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import msgspec

from .archive import ARCHIVE_KIND, SEGMENT_KIND, decode_index, decode_segment
from .backoff import Backoff
from .branching import shift
from .codec import check_json, encode
from .compaction import (
    CompactionPolicy,
    PlannedCompaction,
    check_commit,
    elide_tool_results,
    latest_turn_start,
    plan_compaction,
    plan_prune,
    turn_cuts,
)
from .contract import Durability
from .crypto import (
    ACTIVE_KIND,
    SESSION_KIND,
    SHRED_NOTICE,
    STORE_KIND,
    KeyRing,
    SessionCipher,
    is_sealed,
)
from .derive import Deriver, IndexedMessage, check_revision
from .errors import (
    ConflictError,
    CorruptLogError,
    EncryptionError,
    OutcomeUnknown,
    SessionExpired,
    StorageError,
    StoreUnavailable,
    UsageError,
)
from .events import (
    COMPACTION,
    MAX_EVENT_ID_CHARS,
    PAYLOAD_TYPES,
    SESSION_BRANCH,
    SESSION_REWIND,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
    Compaction,
    Event,
    SessionBranch,
    check_event_type,
    compaction_of,
    fork_in,
    made_here_since,
    new_event_id,
)
from .lease import LEASE_KIND, HeldLease, fence_epoch, load_lease
from .listing import CatalogChange
from .messages import Message
from .ops import (
    Append,
    AppendOne,
    MetaAdd,
    MetaGet,
    Open,
    OpenTail,
    Pause,
    Plan,
    Quarantine,
    Read,
    ReadOrigin,
    Refresh,
)
from .storage import LogStorage, LogView, Reopen

__all__ = [
    "ID_WINDOW",
    "RENEWED_KIND",
    "Clock",
    "SessionCore",
    "SessionHost",
    "SessionPlans",
    "check_event",
    "renewal_text",
    "renewal_time",
]

Clock = Callable[[], _dt.datetime]
T = TypeVar("T")

RENEWED_KIND = "renewed"
"""Meta namespace of a session's latest renewal by ``session.update()`` in a store opened with
``renew_on_update=True``: key = session id, value = the time (RFC 3339, in clear; no content),
deleted with the session. A session expires ``ttl`` after the later of its last append and
this time."""


def renewal_text(when: _dt.datetime) -> str:
    """The stored form of a renewal time (see :data:`RENEWED_KIND`): RFC 3339 in UTC."""
    return when.astimezone(_dt.timezone.utc).isoformat()


def renewal_time(text: str | None) -> _dt.datetime | None:
    """The renewal time a :data:`RENEWED_KIND` value holds (None: unset, or not a time, which
    renews nothing)."""
    if not text:
        return None
    try:
        when = _dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


# The operations without arguments, made once (plans yield them on every catch-up).
_OPEN = Open()
_OPEN_TAIL = OpenTail()
_REFRESH = Refresh()
_STORE_RECORD = MetaGet(STORE_KIND, "store")

_SEALED_RETRIES = 1000
"""How often an encrypted append seals again when other writers keep appending first (with a
growing random pause from the fifth try on)."""

_COMPACTION_RETRIES = 8
"""How often compaction plans again when other writers keep appending while it plans."""

ID_WINDOW = 65_536
"""How far back an append looks for an event's id: an event whose id is stored among the
latest ``ID_WINDOW`` seqs of the log (of those the session object has read, which includes
every event other writers appended since it opened) is not written again; one stored further
back is not looked up, and is stored again."""

_ID_LIMIT = 2 * ID_WINDOW  # ids remembered before the oldest are forgotten

_DEFERRED_AT_MOST = 256
"""Events a turn appends before a catalog that takes changes at turn boundaries is handed
them anyway (so one long turn does not leave it far behind)."""

_LAZY_OUTSIDE_TURNS = 64
"""Events appended outside turns that a catalog taking changes at turns' ends only
(:attr:`agentsession.indexing.Indexing.lazy`) lets wait for a catch-up before it is handed
them (a reader that cannot catch up, of a Redis replica, is at most this far behind)."""

_FLAGGING = frozenset((SESSION_REWIND, COMPACTION, SHRED_NOTICE))
"""Markers whose batch a lazy catalog is handed outside turns: they flag documents, or (the
shred notice) end what can be read of the log to catch up from."""

_RETRYABLE = (OutcomeUnknown, StoreUnavailable)
"""Append failures the pipeline rides out within the store's ``reconnect_timeout``: the
connection was lost (the write may or may not have landed) or the server could not be reached
(nothing was sent)."""


class Indexer(Protocol):
    """What the append pipeline asks of its store's catalog settings
    (:class:`agentsession.indexing.Indexing`)."""

    deferred: bool
    """Whether the backend takes changes at turn boundaries (see
    :attr:`agentsession.indexing.Indexing.deferred`)."""
    lazy: bool
    """Whether it takes them at turns' ends only (see
    :attr:`agentsession.indexing.Indexing.lazy`)."""

    def change(self, stored: Sequence[Event]) -> CatalogChange | None:
        """What ``stored`` (plaintext, with seqs) changes in the catalog (None: it keeps
        none)."""
        ...


class SessionHost(Protocol):
    """What a session needs from its store: the settings of the append pipeline."""

    durability: Durability
    ttl: _dt.timedelta | None
    clock: Clock
    max_messages: int | None
    compaction: CompactionPolicy | None
    """The compaction policy run at the end of each turn (None: none)."""
    max_loaded_events: int | None
    """At most this many of the latest events are loaded to derive the history (None: the
    whole window); see :meth:`SessionCore._load_window`."""
    revive_expired: bool
    """Whether an append to an expired session is accepted (and renews it)."""
    renew_on_update: bool
    """Whether ``session.update()`` renews the session's TTL as an append does."""
    _keyring: KeyRing | None

    @property
    def _indexing(self) -> Indexer:
        """What appends change in the store's catalog and search index."""
        ...

    _reconnect_timeout: float
    """Seconds an append keeps retrying after a lost connection or an unreachable server
    (0: it raises at once)."""

    @property
    def location(self) -> str:
        """Where the store keeps its data, for people."""
        ...

    @property
    def encrypted(self) -> bool:
        """Whether the store encrypts its events."""
        ...

    def _meta_get(self, kind: str, key: str) -> str | None:
        """A small persisted value (the store's key record, for a plain session object)."""
        ...

    def _meta_add(self, kind: str, key: str, value: str) -> str:
        """Store a small value unless one is stored; returns the value stored (a session's
        key record)."""
        ...

    def current_lease(self, session_id: str) -> HeldLease | None:
        """The session's lease current in this context (its appends carry its epoch)."""
        ...

    def holds_lock(self, session_id: str) -> bool:
        """Whether the caller holds the session's turn lock (no I/O)."""
        ...

    def get(self, session_id: str) -> Any:
        """The session with this id (a branch reads its origin's events through it)."""
        ...

    def exists(self, session_id: str) -> bool:
        """Whether the session has events."""
        ...

    def _meta_cas(self, kind: str, key: str, expected: str | None, new: str | None) -> bool:
        """The store's meta compare-and-set."""
        ...

    _changes: Any
    """The store object's followers (:class:`agentsession.follow.ChangeHub`)."""


def _seq_of(event: Event) -> int:
    return event.seq


def _marker_index(events: Sequence[Event]) -> int:
    """Index of the last compaction marker of a batch that rebuilds history on its own (-1:
    none): the one place the append pipeline decides it."""
    marker = -1
    for index, event in enumerate(events):
        if event.type == COMPACTION:
            data = compaction_of(event)
            if data is not None and data.rebuilds_history:
                marker = index
    return marker


_replace = msgspec.structs.replace
_FLAT = (str, int, bool)


def _check_read(after: int, limit: int | None) -> None:
    """Refuse a read's bad arguments."""
    if after < 0:
        raise UsageError(f"read(after={after}): after must be >= 0")
    if limit is not None and limit < 0:
        raise UsageError(f"read(limit={limit}): limit must be >= 0 or None")


def _shown(value: object) -> str:
    """A bad event id, shortened, for an error message."""
    if not isinstance(value, str):
        return f"a {type(value).__name__}"
    return repr(value) if len(value) <= 40 else f"{value[:37]!r}... ({len(value)} characters)"


def _repeated_id(batch: Sequence[Event]) -> str | None:
    """The first event id that a batch holds twice (None: every id is its own)."""
    seen: set[str] = set()
    for event in batch:
        if event.id in seen:
            return event.id
        seen.add(event.id)
    return None


_PAYLOAD_DECODERS = {kind: msgspec.json.Decoder(struct) for kind, struct in PAYLOAD_TYPES.items()}


def check_event(event: object, session_id: str) -> Event:
    """``event`` when an append may store it, with its payload in the form stored; raises
    :class:`~agentsession.errors.UsageError` naming the problem (and ``session_id``) otherwise.

    What is acknowledged must always read back, and read back as what it claims to be, so
    the fields are checked here, once for every backend and for every caller that must know
    beforehand whether an append will take an event (an importer's scan): a non-blank string
    type (known, in the core namespaces: see :data:`~agentsession.events.CORE_NAMESPACES`;
    not the shred notice, which only ``store.shred()`` writes), string agent and user, a
    timezone-aware time, a payload (and meta) that is exactly one JSON value nested at most
    :data:`~agentsession.codec.MAX_JSON_DEPTH` deep and, for a known type, valid for its
    payload struct, and an id of at most :data:`~agentsession.events.MAX_EVENT_ID_CHARS`
    printable characters (empty: one is given on append). Nothing is stamped: seq, time and
    an empty id are left as they are.
    """
    if type(event) is not Event and not isinstance(event, Event):
        raise UsageError(
            f"session {session_id!r}: can only append Event objects, not {type(event).__name__}"
        )
    kind = event.type
    decoder = _PAYLOAD_DECODERS.get(kind)  # None for types agentsession does not know
    if decoder is None:
        if type(kind) is not str or not kind.strip():
            raise UsageError(f"session {session_id!r}: an event needs a type (a non-blank string)")
        problem = check_event_type(kind)
        if problem is not None:
            raise UsageError(f"session {session_id!r}: {problem}")
        if kind == SHRED_NOTICE:
            raise UsageError(
                f"session {session_id!r}: {SHRED_NOTICE!r} events are written by store.shred() only"
            )
    if type(event.agent) is not str or type(event.user) is not str:
        raise UsageError(f"session {session_id!r}: an event's agent and user must be strings")
    time = event.time
    if time is not None and (not isinstance(time, _dt.datetime) or time.tzinfo is None):
        raise UsageError(
            f"session {session_id!r}: an event's time must be a timezone-aware datetime "
            f"(got {time!r}); use datetime.now(timezone.utc)"
        )
    data = event.data
    if type(data) is not msgspec.Raw:
        raise UsageError(
            f"session {session_id!r}: an event's data must be msgspec.Raw JSON; build events "
            "with Event.new(type, payload)"
        )
    meta = event.meta
    raw = bytes(data)
    try:
        checked = check_json(raw, "payload", decoder)
        if meta:
            if type(meta) is not dict:
                raise UsageError("meta must be a dict")
            # A flat map of strings and integers (the recorder's turn id, logical_chars,
            # platform ids) is always one valid JSON value: only anything else is checked.
            if not all(type(k) is str and type(v) in _FLAT for k, v in meta.items()):
                check_json(encode(meta), "meta")
    except UsageError as exc:
        raise UsageError(f"session {session_id!r}: the {kind} event's {exc}") from None
    if type(meta) is not dict:
        raise UsageError(f"session {session_id!r}: the {kind} event's meta must be a dict")
    eid = event.id
    if type(eid) is not str or (eid and (len(eid) > MAX_EVENT_ID_CHARS or not eid.isprintable())):
        raise UsageError(
            f"session {session_id!r}: an event's id must be a string of 1 to "
            f"{MAX_EVENT_ID_CHARS} printable characters (got {_shown(eid)})"
        )
    if checked is not raw:
        event = _replace(event, data=msgspec.Raw(checked))
    return event


class _View:
    """What a session's log storage may know of it (:class:`~agentsession.storage.LogView`)."""

    __slots__ = ("_session",)

    def __init__(self, session: SessionCore) -> None:
        self._session = session

    @property
    def id(self) -> str:
        return self._session._id

    @property
    def seen_seq(self) -> int:
        return self._session._latest_seq

    def admits(self, foreign: Sequence[Event], events: Sequence[Event]) -> bool:
        return self._session._admits(foreign, events)

    def indexed(self, stored: Sequence[Event]) -> CatalogChange | None:
        return self._session._catalog_change(stored)

    def catalog_due(self, kinds: Sequence[str], first: int, last: int) -> bool:
        return self._session._catalog_noted(kinds, first, last)

    def indexed_since(self, after: int, stored: Sequence[Event]) -> CatalogChange | None:
        session = self._session
        if not stored or after >= stored[0].seq:
            return None
        return session._catalog_since(after, session._plain_of(stored))


class SessionPlans:
    """The pipeline's plans of one session (:attr:`BaseSession.plans`), for a driver other
    than the sync API's: the async API runs them with :func:`agentsession.ops.adrive` on a
    log's native coroutines. Each method checks and stamps its arguments at once (raising
    :class:`~agentsession.errors.UsageError` as the sync method would) and returns the plan;
    run it holding :attr:`BaseSession.state_lock`, or hand it to :meth:`run`."""

    __slots__ = ("_session",)

    def __init__(self, session: SessionCore) -> None:
        self._session = session

    def append(self, event: Event) -> Plan[int]:
        """The plan of :meth:`BaseSession.append`."""
        session = self._session
        return session._append_one_plan(session._prepare(event, None))

    def append_many(self, events: Sequence[Event], expect_seq: int | None) -> Plan[list[int]]:
        """The plan of :meth:`BaseSession.append_many`."""
        session = self._session
        batch = session._prepare_batch(events, expect_seq)
        return session._append_batch_plan(batch, expect_seq) if batch else _nothing()

    def read(self, after: int, limit: int | None) -> Plan[list[Event]]:
        """The plan of :meth:`BaseSession.read`."""
        return self._session._read_plan(after, limit)

    def latest_seq(self) -> Plan[int]:
        """The plan of :attr:`BaseSession.latest_seq`."""
        return self._session._latest_seq_plan()

    def messages(self, agent: str | None, max_tool_result_bytes: int | None) -> Plan[list[Message]]:
        """The plan of :meth:`BaseSession.messages`."""
        return self._session._messages_plan(agent, max_tool_result_bytes)

    def entries(self, agent: str | None) -> Plan[list[IndexedMessage]]:
        """The plan of :meth:`BaseSession.entries`."""
        return self._session._entries_plan(agent)

    def policy_check(self, policy: CompactionPolicy) -> Plan[PlannedCompaction | None]:
        """At the end of a turn: the compaction ``policy`` asks for, or None (the history fits
        its budget); see :mod:`agentsession.compaction`."""
        return self._session._policy_check_plan(policy)

    def policy_commit(self, planned: PlannedCompaction, summary: Message) -> Plan[int | None]:
        """Append the marker of ``planned`` with ``summary`` (conditionally); its seq, or None
        when the history changed so that the summary no longer fits."""
        return self._session._policy_commit_plan(planned, summary)

    def run(self, plan: Plan[T]) -> T:
        """Run ``plan`` with the sync driver, under the session's lock (in a worker thread,
        when another driver cannot run it now)."""
        return self._session._run(plan)

    @property
    def log(self) -> LogStorage | None:
        """The log storage the plans' operations are performed on (None: the session
        overrides the storage methods instead), for a driver that performs them natively."""
        return self._session._log

    @property
    def view(self) -> LogView:
        """What the log storage may know of the session, as the sync driver hands it over."""
        return self._session._view

    @property
    def host(self) -> SessionHost:
        """The store the session belongs to (its settings: durability, TTL, clock), for a
        store that serves another store's session (:class:`~agentsession.backends.static.
        StaticStore`)."""
        return self._session._store


def _nothing() -> Plan[list[int]]:
    """The plan of an empty batch: nothing to do."""
    return []
    yield  # a generator


class SessionCore:
    """The I/O-free part of a session: the window and id state, and the pipeline's plans over
    it (see the module's docstring). :class:`~agentsession.session.BaseSession` is the sync
    facade over it, which drives the plans and hands their operations to the session's log
    storage."""

    def __init__(self, store: SessionHost, session_id: str) -> None:
        self._store = store
        self._plain_batch: Sequence[Event] | None = None  # the batch being sealed
        # A catalog that takes changes at turn boundaries (Indexing.deferred): the seq up to
        # which this object handed changes over, and whether its own writes left a turn open.
        self._catalog_seq = 0
        self._catalog_turn = False
        self._view = _View(self)
        self._id = session_id
        self._window: list[Event] = []
        self._window_start = 1
        # A branch (agentsession.branching): the origin and the seq its history shares up to
        # (_base; 0: not a branch), its first own seq (_first = _base + 1), and the origin's
        # events up to _base, read once per life when a history needs them.
        self._lives = 0  # how often the log was found gone and opened anew (SessionReset)
        self._base = 0
        self._first = 1
        self._origin: str | None = None
        self._prefix: list[Event] | None = None
        self._full = True  # whether the window reaches back to the latest marker (or seq 1)
        self._latest_seq = 0
        self._derivers: dict[str | None, Deriver] = {}
        ring = store._keyring
        self._cipher: SessionCipher | None = None if ring is None else ring.cipher(session_id)
        self._generation = 0  # counts reloads and resets (a child's cap checks it)
        # Fencing (see _fenced): the lease of the append being made (for _admits), the epoch
        # of the lease whose record this object checked since it opened the log (0: none),
        # and the newest fence it took in since.
        self._appending_lease: HeldLease | None = None
        self._fence_checked = 0
        self._fence_seen = 0
        self._own_cap: tuple[int, int] | None = None  # (generation, a child's max_messages)
        # The compaction policy's running count of the history: the deriver it counted, how
        # many of its committed entries, the last of them, and their tokens (_policy_budget).
        self._policy_count: tuple[Deriver, int, object, int] | None = None
        # Ids of the events this object has seen (loaded, read while catching up, appended),
        # to their seqs: an append of one of them stores nothing (see _stored_seqs_plan). A loaded
        # window is indexed when an append first needs it (_index_window), so that reading
        # and deriving never pay for it.
        self._ids: dict[str, int] = {}
        self._ids_todo = False
        # Ids of appends that failed: whether they were stored is checked against storage
        # before they are appended again.
        self._unsure: set[str] = set()
        self._loaded_once = False  # whether the log was loaded once (a later _load reloads)
        # Every stored id from seq _ids_from on is in _ids (or beyond the id window); ids made
        # here since _loaded_ms (Unix ms, when the log was last opened) cannot be stored
        # before it, so only other ids make an append read older ids (_cover_ids).
        self._ids_from = 1
        self._loaded_ms = 0

    if TYPE_CHECKING:
        # What the facade provides: its log storage and driver (SessionPlans.log, .run), and
        # the tails of the single-event append that its fast lane shares with _append_one_plan.

        _log: LogStorage | None

        def _run(self, plan: Plan[T]) -> T: ...

        def _shift_log(self, base: int) -> None: ...

        def _one_failed(self, prepared: Event, marker: int, exc: BaseException) -> Plan[int]: ...

        def _one_stored(self, prepared: Event, stored: Event, marker: int) -> Plan[int]: ...

    # -- state ----------------------------------------------------------------------------

    def _load_plan(self) -> Plan[None]:
        """(Re)open the log at its tail, forgetting everything derived (the full window is
        loaded when something needs it: :meth:`_load_window`). A tail that holds a compaction
        marker rebuilding the history is the full window from that marker on."""
        loaded_ms = time.time_ns() // 1_000_000
        events, complete = yield _OPEN_TAIL
        self._loaded_ms = loaded_ms
        if self._cipher is not None:
            self._cipher.forget_key()  # (re)opened, perhaps a new life: read it afresh
        if events:
            events = yield from self._from_storage(events)
            events = yield from self._branch_plan(events)
        self._set_window(events, complete)
        marker = _marker_index(events)
        if marker >= 0:
            self._trim_at(events[marker])
        if self._loaded_once and not complete:
            # A reload: another life of the log, or one this object lost track of. None of it
            # was read since this object opened, so its ids are read back over the id window
            # (as a catch-up would have read them), for the next append to check against.
            yield from self._ensure_window_from(self._latest_seq - ID_WINDOW + 1)
        self._loaded_once = True

    def _load_window(self) -> Plan[None]:
        """Load the full window (from the latest compaction marker), forgetting everything
        derived.

        With the store's ``max_loaded_events`` cap ``N`` and a log longer than ``N`` events,
        only the latest ``N`` events are ever read: backwards from the tail in doubling spans,
        stopping at the first span that holds a compaction marker rebuilding the history (the
        history then starts from it; the older events of that span stay loaded, for the
        histories of agents the marker does not apply to), or at ``N`` events (the real window
        is then longer than the cap, and what lies before is not read). A compacted log so
        reads at most about twice its window, as without the cap."""
        cap = self._store.max_loaded_events
        if cap is None or self._latest_seq - self._base <= cap:
            events, complete = yield _OPEN
            events = yield from self._from_storage(events)
            self._set_window(events, complete)
            self._full = True
            return
        floor = self._latest_seq - cap  # the window never reaches back to this seq
        floor = max(floor, self._base)  # (nor into a branch's shared history)
        events = self._window[bisect.bisect_right(self._window, floor, key=_seq_of) :]
        start = events[0].seq if events else self._latest_seq + 1
        span = max(64, self._latest_seq - start + 1)
        marker = -1  # the tail in memory holds no rebuilding marker, or it would be full
        while start > floor + 1 and marker < 0:
            span *= 2
            after = max(floor, self._latest_seq - span)
            read = yield Read(after, start - 1 - after)
            read = yield from self._from_storage(read)
            older = [e for e in read if after < e.seq < start]
            events[:0] = older
            start = after + 1
            marker = _marker_index(older)
        # Derivers start from the latest marker in the window themselves: the events before
        # it are kept rather than read again for another agent's history.
        self._set_window(events, False, same_life=True)
        self._full = True

    def _from_storage(self, events: list[Event]) -> Plan[list[Event]]:
        """Events read from storage, opened when the store is encrypted."""
        cipher = self._cipher
        if cipher is None or not events:
            if events and (is_sealed(events[-1]) or is_sealed(events[0])):
                try:
                    yield from self._check_still_plain()
                except EncryptionError:
                    self._reset()
                    raise
            return events
        if any(event.type == SHRED_NOTICE for event in events):
            # Shredded (by this store or another): the cached key must not be used again.
            self._reset()
            raise cipher.shredded()
        try:
            try:
                return (yield from self._open_events(cipher, events))
            except EncryptionError:
                if not any(not is_sealed(event) for event in events):
                    raise
                return (yield from self._open_quarantining(cipher, events))
        except EncryptionError:
            # Read again from the start next time: an event that does not open (or is not
            # sealed) is met again by every read and append, never stepped over.
            self._reset()
            raise

    def _open_events(self, cipher: SessionCipher, events: list[Event]) -> Plan[list[Event]]:
        """:meth:`SessionCipher.open` of each event with the session's key, read first when
        not cached; a cached key that does not open them is read again once (it may be an
        old life's)."""
        cached = cipher.keyed
        if not cached:
            yield from self._key_plan(cipher, sealing=False)
        try:
            return [cipher.open(event, primed=True) for event in events]
        except EncryptionError:
            if not cached:
                raise
        cipher.forget_key()
        yield from self._key_plan(cipher, sealing=False)
        return [cipher.open(event, primed=True) for event in events]

    def _key_plan(self, cipher: SessionCipher, *, sealing: bool) -> Plan[None]:
        """Give ``cipher`` the session's key and, when ``sealing``, the session's active key
        id, read from the store's meta; sealing, a session without a key gets a new one
        (recorded unless another writer recorded one first: that one is taken)."""
        record = None
        if not cipher.keyed:
            record = yield MetaGet(SESSION_KIND, self._id)
            if record is None and sealing:
                record = yield MetaAdd(SESSION_KIND, self._id, cipher.new_key_record())
        active = (yield MetaGet(ACTIVE_KIND, self._id)) if sealing else None
        cipher.prime(record, active, sealing=sealing)

    def _open_quarantining(self, cipher: SessionCipher, events: list[Event]) -> Plan[list[Event]]:
        """:meth:`SessionCipher.open` of each event, leaving out the unsealed ones that the
        backend moves aside (``_quarantine_unsealed``); raises for any other."""
        opened = []
        for event in events:
            try:
                opened.extend((yield from self._open_events(cipher, [event])))
            except EncryptionError as exc:
                if is_sealed(event) or not (yield Quarantine(event, str(exc))):
                    raise
        return opened

    def _check_still_plain(self) -> Plan[None]:
        """Raise :class:`EncryptionError` when the store this plain session object belongs to
        has become encrypted since it was opened (another process opened it with a key while
        it held no sessions): what it would write could never be read back there."""
        if (yield _STORE_RECORD) is not None:
            raise EncryptionError(
                f"session {self._id!r}: the store {self._store.location} has become encrypted "
                "since this store object was opened without a key; open it again with "
                "passphrase= (or key=)"
            )

    def _set_window(self, events: list[Event], complete: bool, *, same_life: bool = False) -> None:
        self._generation += 1
        if not same_life:
            self._ids = {}
            self._fence_checked = self._fence_seen = 0  # read anew: a lease checks again
        self._ids_todo = bool(events)
        self._window = events
        self._derivers = {}
        self._full = complete
        if events:
            self._latest_seq = events[-1].seq
            # (a log whose first events are archived is whole from its first live event on)
            complete_from_first = complete and events[0].seq <= self._first
            self._window_start = self._first if complete_from_first else events[0].seq
        else:
            self._latest_seq = self._base
            self._window_start = self._first
            self._full = True
        self._catalog_seq = self._latest_seq  # what is stored is taken as in the catalog
        self._catalog_turn = False
        start = self._window_start
        self._ids_from = min(self._ids_from, start) if same_life else start

    def _reset(self) -> None:
        """Forget all state: the stored log was deleted or replaced underneath us."""
        self._generation += 1
        self._fence_checked = self._fence_seen = 0
        if self._cipher is not None:
            self._cipher.forget_key()  # a new life has a new key
        self._window = []
        self._window_start = self._first  # a branch stays one: its log's first event stays
        self._full = True
        self._latest_seq = self._base
        self._catalog_seq = self._base
        self._catalog_turn = False
        self._derivers = {}
        self._ids = {}
        self._ids_todo = False
        self._ids_from = self._first

    def _full_window(self) -> Plan[list[Event]]:
        """The window from the latest compaction marker on, loading it when only the tail
        is in memory."""
        if not self._full:
            yield from self._load_window()
        return self._window

    def _ingest(self, events: Sequence[Event]) -> None:
        """Take in events read from storage (other writers'): their markers are decoded here,
        and, once a lease was checked here, their fences (``session/lease``) noted."""
        if self._fence_checked and events:
            self._fence_seen = max(self._fence_seen, fence_epoch(events))
        if events and self._catalog_seq == events[0].seq - 1:
            self._catalog_seq = events[-1].seq  # their writer hands them to the catalog
        self._extend(events, _marker_index(events))

    # -- fencing --------------------------------------------------------------------------

    def _fenced(self) -> Plan[HeldLease | None]:
        """The lease current for this session's appends (see :mod:`agentsession.fencing`),
        checked before a write, or None: raises :class:`~agentsession.errors.LeaseLost` when
        another worker took the lock over. The first check of a lease since this object
        opened the log reads the lease record (fences stored before then are not in the
        window); from then on the fences among what it takes in are noted, and the backend's
        write-lock check (:meth:`_admits`) refuses an append that finds a newer one."""
        lease = self._store.current_lease(self._id)
        self._appending_lease = lease
        if lease is None:
            return None
        epoch = lease.epoch
        if lease.lost:
            raise lease.lost_error()
        if self._fence_checked != epoch:
            record = load_lease((yield MetaGet(LEASE_KIND, self._id)))
            if record is None or record.epoch != epoch:
                raise lease.lost_error(0 if record is None else record.epoch)
            self._fence_checked = epoch
        if self._fence_seen > epoch:
            raise lease.lost_error(self._fence_seen)
        return lease

    def _extend(self, events: Sequence[Event], marker: int) -> None:
        """Add stored events to the window; ``marker`` is the index of the last one that
        rebuilds history on its own (-1: none), already decided by the append pipeline."""
        if not events:
            return
        self._window.extend(events)
        self._latest_seq = events[-1].seq
        self._index(events)
        if len(self._ids) > _ID_LIMIT:
            self._forget_old_ids()
        if marker >= 0:
            self._trim_at(events[marker])

    def _trim_at(self, marker: Event) -> None:
        """Drop window events before a compaction marker that rebuilds history on its own."""
        # Derivers of other agents still need the events the marker hides from them.
        for deriver in self._derivers.values():
            start = bisect.bisect_right(self._window, deriver.last_seq, key=_seq_of)
            if not deriver.feed_all(self._window[start:]):
                self._derivers = {}
                break
        index = bisect.bisect_left(self._window, marker.seq, key=_seq_of)
        if self._ids_todo and index:
            self._index_window()  # the ids of what is dropped stay known
        del self._window[:index]
        self._window_start = marker.seq
        self._full = True

    def _ensure_window_from(self, seq: int) -> Plan[None]:
        """Make the window hold every event from ``seq`` on; with the store's
        ``max_loaded_events`` cap, only those among the latest ``max_loaded_events``."""
        first = max(seq, self._first)
        cap = self._store.max_loaded_events
        if cap is not None:
            first = max(first, self._latest_seq - cap + 1)
        if self._window_start <= first:
            return
        read = yield Read(first - 1, self._window_start - first)
        read = yield from self._from_storage(read)
        older = [e for e in read if e.seq < self._window_start]
        self._window[:0] = older
        self._window_start = first
        if older and not self._ids_todo:
            self._index(older)
        self._ids_from = min(self._ids_from, first)

    def _refresh_plan(self) -> Plan[None]:
        """Catch up: take in the events other writers appended since this object looked."""
        events = yield _REFRESH
        if isinstance(events, Reopen):
            yield from self._reopen()
        elif events:
            yield from self._take_in(events)

    def _reopen(self) -> Plan[None]:
        """The log this object read is gone (deleted, perhaps created again): forget it and
        open the log again at its tail."""
        self._reset()
        self._lives += 1
        if self._base:
            self._unbranch()  # another life of the log: read its first event again
        yield from self._load_plan()

    def _take_in(self, events: list[Event]) -> Plan[None]:
        """Take in events a catch-up read (opened first when the store is encrypted)."""
        if self._cipher is not None or is_sealed(events[-1]) or is_sealed(events[0]):
            events = yield from self._from_storage(events)
        self._ingest(events)

    def _check_ttl(self) -> None:
        """Raise :class:`SessionExpired` when the session's last activity (its last append, or
        a later renewal: :data:`RENEWED_KIND`) is older than the store's TTL."""
        self._run(self._check_ttl_plan())

    def _check_ttl_plan(self) -> Plan[None]:
        """:meth:`_check_ttl` as a plan: the renewal entry is read only when the last append
        is older than the TTL."""
        ttl = self._store.ttl
        if ttl is None or not self._window:
            return
        last = self._window[-1].time
        now = self._store.clock()
        if last is None or now - last <= ttl:
            return
        renewed = renewal_time((yield MetaGet(RENEWED_KIND, self._id)))
        if renewed is not None and now - renewed <= ttl:
            return
        if renewed is not None and renewed > last:
            what = f"last activity (an update) at {renewed.isoformat()}"
        else:
            what = f"last append at {last.isoformat()}"
        raise SessionExpired(
            self._id,
            f"session {self._id!r} expired: {what} is older than the store's TTL of {ttl}",
        )

    def _check_ttl_for_append(self) -> Plan[None]:
        try:
            yield from self._check_ttl_plan()
        except SessionExpired:
            yield from self._refresh_plan()  # another process may have appended since
            yield from self._check_ttl_plan()

    # -- the append pipeline --------------------------------------------------------------

    def _prepare(self, event: object, now: _dt.datetime | None) -> Event:
        """Check one event (:func:`check_event`) and stamp it for storage (seq cleared, time
        set when unset, from ``now`` or the store's clock, an id when it has none)."""
        event = check_event(event, self._id)
        if not event.id:
            event = _replace(event, id=new_event_id())
        if event.time is None or event.seq:
            return _replace(event, seq=0, time=event.time or now or self._store.clock())
        return event

    def _append_one_plan(self, prepared: Event) -> Plan[int]:
        """Append one prepared event; returns its seq."""
        marker = _marker_index((prepared,)) if prepared.type == COMPACTION else -1
        if self._store.ttl is not None and not self._store.revive_expired:
            yield from self._check_ttl_for_append()
        if self._ids_todo:
            self._index_window()
        eid = prepared.id
        known = self._ids.get(eid)
        if known is None and self._ids_from > 1 and self._needs_cover((prepared,)):
            yield from self._cover_ids()
            known = self._ids.get(eid)
        if known is not None and known > self._latest_seq - ID_WINDOW:
            return known  # stored already: a retried append stores nothing
        if self._unsure and eid in self._unsure:
            return (yield from self._append_checked([prepared], marker, None, None))[0]
        stored: Event | None = None
        try:
            if self._cipher is None:
                if not self._latest_seq:
                    yield from self._check_still_plain()
                yield from self._fenced()
                stored = yield AppendOne(prepared, marker == 0)
            if stored is None:
                # The general path: other writers' events are checked for the id under the
                # backend's write lock (_admits).
                return (yield from self._append_fresh([prepared], marker, None))[0]
        except BaseException as exc:
            return (yield from self._one_failed(prepared, marker, exc))
        return (yield from self._one_stored(prepared, stored, marker))

    def _index_window(self) -> None:
        """Index the ids of the window loaded last (see ``_ids``)."""
        self._ids_todo = False
        self._index(self._window)

    def _index(self, events: Sequence[Event]) -> None:
        """Remember the ids of ``events`` (stored events this object read); an id stored twice
        (by a version without the check under the write lock) keeps its latest seq, so that it
        stays known as long as a copy is within :data:`ID_WINDOW`."""
        ids = self._ids
        get = ids.get
        for event in events:
            eid = event.id
            if eid and event.seq > get(eid, 0):
                ids[eid] = event.seq

    def _forget_old_ids(self) -> None:
        """Keep the ids of the latest :data:`ID_WINDOW` seqs only."""
        floor = self._latest_seq - ID_WINDOW
        self._ids = {eid: seq for eid, seq in self._ids.items() if seq > floor}

    def _stored_seqs_plan(self, batch: Sequence[Event]) -> Plan[list[int | None]]:
        """For each event of ``batch``, the seq of its stored copy when its id is stored among
        the latest :data:`ID_WINDOW` seqs this object has read (None: not stored there)."""
        if self._ids_todo:
            self._index_window()
        if self._ids_from > self._first and self._needs_cover(batch):
            yield from self._cover_ids()
        seqs = [self._ids.get(event.id) for event in batch]
        if seqs[0] is None and all(seq is None for seq in seqs):
            return seqs
        if None in seqs:
            # Only the end of a long batch may be among the events this object loaded.
            floor = min(seq for seq in seqs if seq is not None) - len(batch)
            if floor + 1 < self._window_start:
                yield from self._ensure_window_from(floor + 1)
                seqs = [self._ids.get(event.id) for event in batch]
        oldest = self._latest_seq - ID_WINDOW
        return [seq if seq is not None and seq > oldest else None for seq in seqs]

    def _needs_cover(self, batch: Sequence[Event]) -> bool:
        """Whether an append of ``batch`` must first read the ids of older stored events: this
        object knows the ids only from seq ``_ids_from`` on, short of the id window, and the
        batch holds an id that could be stored before that (one the application chose, or one
        made elsewhere or before the log was opened; ids made here since then cannot)."""
        if self._ids_from <= max(self._first, self._latest_seq - ID_WINDOW + 1):
            return False
        since = self._loaded_ms
        return not all(made_here_since(event.id, since) for event in batch)

    def _cover_ids(self) -> Plan[None]:
        """Read the ids of the stored events this object has not read, back to the id window's
        edge (their clear ``id`` only: nothing is opened or kept but the ids), so that an id
        stored before this object opened the log is recognised. Once per session object: later
        events reach it through its catch-ups."""
        if self._ids_todo:
            self._index_window()
        floor = max(self._first, self._latest_seq - ID_WINDOW + 1)
        end = self._ids_from
        after = floor - 1
        while after + 1 < end:
            read = yield Read(after, min(4096, end - 1 - after))
            chunk = [e for e in read if e.seq < end]
            if not chunk:
                break
            self._index(chunk)
            after = chunk[-1].seq
        self._ids_from = floor

    def _catalog_change(self, stored: Sequence[Event]) -> CatalogChange | None:
        """What the batch a backend is storing (``stored``: as stored, sealed on an
        encrypted store, with its seqs) changes in the store's catalog: made from the plaintext
        (the batch being sealed, when it is).

        A catalog that takes changes at turn boundaries (:attr:`Indexing.deferred
        <agentsession.indexing.Indexing.deferred>`) gets None for a batch inside a turn this
        object opened (the backend marks the session for a later catch-up instead), and at
        the batch that starts or ends a turn, or any batch outside one, the change of every
        event since the last one it got (from the window), whose ``first_seq`` lets the
        backend apply it only where it continues what the catalog holds."""
        indexing = self._store._indexing
        if not indexing.deferred or not stored or self._base:
            return indexing.change(self._plain_of(stored))
        done = self._catalog_seq
        kinds = (stored[0].type,) if len(stored) == 1 else [e.type for e in stored]
        if not self._catalog_due(kinds, stored[0].seq, lazy=indexing.lazy):
            return None  # inside a turn: handed over at its end
        return self._catalog_since(done, self._plain_of(stored))

    def _catalog_due(self, kinds: Sequence[str], first: int, *, lazy: bool = False) -> bool:
        """Whether a batch of events of types ``kinds`` stored from seq ``first`` is one a
        catalog taken at turn boundaries is handed (it starts or ends a turn, is outside
        one, or a turn has gone on for :data:`_DEFERRED_AT_MOST` events); notes whether this
        object's writes leave a turn open.

        ``lazy`` (:attr:`agentsession.indexing.Indexing.lazy`: the backend marks the
        session at every append it gets no change for): a turn's start is not handed over
        (its mark is enough: a reader catches the session up) unless it is the session's first
        event, and outside turns only that, a rewind or compaction marker (what flags search
        hits, for a reader that cannot catch up too), a shred notice (after it the log cannot
        be read) and every :data:`_LAZY_OUTSIDE_TURNS` events are."""
        turn = self._catalog_turn
        starts = ends = marker = False
        for kind in kinds:
            if kind == TURN_START:
                turn = starts = True
            elif kind == TURN_END:
                turn, ends = False, True
            elif kind in _FLAGGING:
                marker = True
        self._catalog_turn = turn
        behind = first - self._catalog_seq
        if behind > _DEFERRED_AT_MOST:
            return True
        if not lazy:
            return not turn or starts
        if ends or first == 1:  # (a session's first event makes its row)
            return True
        return not turn and (marker or behind + len(kinds) > _LAZY_OUTSIDE_TURNS)

    def _catalog_noted(self, kinds: Sequence[str], first: int, last: int) -> bool:
        """:meth:`_catalog_due` for a backend whose catalog catches up from the logs by
        itself (the JSONL store's journal): True when it must be told, which then counts as
        handed over up to ``last``."""
        if not self._store._indexing.deferred or self._base:
            return True
        if not self._catalog_due(kinds, first):
            return False
        self._catalog_seq = last
        return True

    def _plain_of(self, stored: Sequence[Event]) -> Sequence[Event]:
        plain = self._plain_batch
        if plain is not None and len(plain) == len(stored):
            return [_replace(p, seq=s.seq) for p, s in zip(plain, stored, strict=True)]
        return stored

    def _catalog_since(self, done: int, stored: Sequence[Event]) -> CatalogChange | None:
        """The change of the events after seq ``done`` up to and with the batch ``stored``
        (plaintext): those before the batch from the window when it holds all of them (else
        the batch's alone, which a backend checking ``first_seq`` does not apply)."""
        first = stored[0].seq
        self._catalog_seq = stored[-1].seq
        if done < first - 1:
            window = self._window
            start = bisect.bisect_right(window, done, key=_seq_of)
            held = window[start:]
            if held and held[0].seq == done + 1 and held[-1].seq == first - 1:
                stored = [*held, *stored]  # the turn so far, as this object wrote or read it
        return self._store._indexing.change(stored)

    def _admits(self, foreign: Sequence[Event], events: Sequence[Event]) -> bool:
        """Whether none of ``events`` is stored: the check a backend's general append path
        makes under its write lock, after catching up and before it allocates seqs.

        ``foreign`` are the other writers' events it just read (not taken in yet; the session
        may also have reloaded meanwhile). Any of ``events`` whose id is stored within
        :data:`ID_WINDOW` makes it False: the backend then writes nothing and returns the
        foreign events, and the pipeline takes them in and appends only what is not stored
        (:meth:`_append_fresh`)."""
        if self._ids_todo:
            self._index_window()
        lease = self._appending_lease
        if lease is not None and foreign and fence_epoch(foreign) > lease.epoch:
            return False  # another worker took the lock over: nothing is written
        ids = self._ids
        # Seqs start at 1, so 0 (absent) is never above ``oldest``.
        if not foreign:
            oldest = max(self._latest_seq - ID_WINDOW, 0)
            return not any(ids.get(event.id, 0) > oldest for event in events)
        oldest = max(foreign[-1].seq - ID_WINDOW, 0)
        new = {event.id: event.seq for event in foreign}
        return not any(max(ids.get(event.id, 0), new.get(event.id, 0)) > oldest for event in events)

    def _append_checked(
        self,
        batch: list[Event],
        marker: int,
        expect_seq: int | None,
        failure: StorageError | None,
    ) -> Plan[list[int]]:
        """Append ``batch`` after making sure none of it is stored: catch up with storage,
        take the stored seqs when it is there, else append it conditionally (only after the
        seq just read, so that an earlier try landing meanwhile is found, not doubled).

        ``failure`` is the retryable error the first try raised (None: a batch that failed
        before, appended again): tries go on, with a growing pause, for the store's
        ``reconnect_timeout`` and then raise the latest failure. Returns the seqs; empty when
        ``expect_seq`` does not match."""
        ids = [event.id for event in batch]
        self._unsure.update(ids)  # until it is known where the batch stands
        backoff = Backoff(reconnect_timeout=self._store._reconnect_timeout, tries=_SEALED_RETRIES)
        while backoff.next_try():
            if failure is not None:
                pause = backoff.reconnect_pause()
                if pause is None:
                    raise failure
                yield Pause(pause)
            elif pause := backoff.contention_pause():  # writers are racing for this session
                yield Pause(pause)
            try:
                yield from self._refresh_plan()
                known = yield from self._stored_seqs_plan(batch)
                if None not in known:
                    self._unsure.difference_update(ids)
                    return cast("list[int]", known)
                base = self._latest_seq
                if expect_seq is not None and base != expect_seq:
                    self._unsure.difference_update(ids)  # checked: not stored
                    return []
                seqs = yield from self._append_fresh(batch, marker, base, known)
            except _RETRYABLE as exc:
                failure = exc
                continue
            failure = None
            if seqs:
                self._unsure.difference_update(ids)
                return seqs
        raise ConflictError(
            f"session {self._id!r}: other writers kept appending while an append checked "
            f"that it was not stored already ({_SEALED_RETRIES} tries)"
        )

    def _prepare_batch(
        self, events: Sequence[Event], expect_seq: int | None, prepared: bool = False
    ) -> list[Event]:
        """Check and stamp a batch for :meth:`_append_batch_plan` (no I/O)."""
        if isinstance(events, Event):
            raise UsageError("append_many takes a sequence of events; use append for one")
        if expect_seq is not None and (not isinstance(expect_seq, int) or expect_seq < 0):
            raise UsageError(f"expect_seq must be an int >= 0 or None, not {expect_seq!r}")
        if prepared:
            batch = list(events)
        else:
            now = self._store.clock()
            batch = [self._prepare(event, now) for event in events]
        if len(batch) > 1:
            self._check_batch_ids(batch)
        return batch

    def _append_batch_plan(self, batch: list[Event], expect_seq: int | None) -> Plan[list[int]]:
        """Append a prepared, non-empty batch; returns its seqs (see :meth:`append_many`)."""
        marker = _marker_index(batch)
        if self._store.ttl is not None and not self._store.revive_expired:
            yield from self._check_ttl_for_append()
        known = yield from self._stored_seqs_plan(batch)
        if None not in known:
            return cast("list[int]", known)  # stored already: a retry stores nothing
        unsure = self._unsure
        if unsure and any(event.id in unsure for event in batch):
            seqs = yield from self._append_checked(batch, marker, expect_seq, None)
        else:
            try:
                seqs = yield from self._append_fresh(batch, marker, expect_seq, known)
            except _RETRYABLE as exc:
                seqs = yield from self._append_checked(batch, marker, expect_seq, exc)
            except StorageError:
                unsure.update(event.id for event in batch)
                raise
        if not seqs:
            raise ConflictError(
                f"session {self._id!r}: expected the latest seq to be {expect_seq}, "
                f"but it is {self._latest_seq}; nothing was appended"
            )
        return seqs

    def _check_batch_ids(self, batch: Sequence[Event]) -> None:
        """Refuse a batch that holds one event id twice (nothing is written): an id names one
        event, stored once."""
        repeated = _repeated_id(batch)
        if repeated is not None:
            raise UsageError(
                f"session {self._id!r}: the batch holds the event id {_shown(repeated)} more "
                "than once; give each event of a batch its own id"
            )

    def _append_fresh(
        self,
        batch: list[Event],
        marker: int,
        expect_seq: int | None,
        known: list[int | None] | None = None,
    ) -> Plan[list[int]]:
        """Append the events of ``batch`` that are not stored; returns every event's seq (the
        stored copy's for those that were), or empty when ``expect_seq`` does not match.

        ``known`` is what :meth:`_stored_seqs_plan` found for the batch (None: nothing). The
        backend checks the other writers' events it catches up on under its write lock
        (:meth:`_admits`) and writes nothing when some of the batch is among them; this then
        takes them in and appends what is still missing, as one batch. A backend that appends
        conditionally instead (PostgreSQL) writes nothing when another writer appended first,
        and this tries again."""
        seqs: list[int | None] = known if known is not None else [None] * len(batch)
        todo = batch
        if any(seq is not None for seq in seqs):
            todo = [event for event, seq in zip(batch, seqs, strict=True) if seq is None]
            marker = _marker_index(todo)
        backoff = Backoff(tries=_SEALED_RETRIES)
        while backoff.next_try():
            if pause := backoff.contention_pause():  # writers are racing for this session
                yield Pause(pause)
            lease = yield from self._fenced()
            if lease is not None and expect_seq is not None and expect_seq > self._latest_seq:
                # A backend may write after expect_seq without reading what lies between:
                # a fence there is read first.
                yield from self._refresh_plan()
                lease = yield from self._fenced()
            foreign: list[Event]
            if self._cipher is not None:
                foreign, stored = [], (yield from self._append_sealed(todo, marker, expect_seq))
            else:
                if not self._latest_seq:
                    yield from self._check_still_plain()
                appended = yield Append(todo, marker, expect_seq)
                if isinstance(appended, Reopen):
                    yield from self._reopen()
                    continue
                foreign, stored = appended
            self._ingest(foreign)
            if lease is not None and not stored and self._fence_seen > lease.epoch:
                raise lease.lost_error(self._fence_seen)  # refused under the write lock
            if stored:
                if self._cipher is None and stored[0].seq == 1:
                    yield from self._check_still_plain()  # made encrypted while this wrote
                self._extend(stored, marker)
                if any(e.type == USER_MESSAGE for e in stored):
                    cap = yield from self._history_cap_plan()
                    if cap:
                        yield from self._prune_plan(cap, None)
                if todo is batch:
                    return [event.seq for event in stored]
                fresh = iter(stored)
                return [next(fresh).seq if seq is None else seq for seq in seqs]
            # Nothing written: the expected seq did not match, or other writers stored some of
            # the batch meanwhile, or a conditional backend met another writer's events.
            found = yield from self._stored_seqs_plan(todo)
            if all(seq is None for seq in found):
                if expect_seq is not None:
                    return []
                continue
            if todo is batch:
                seqs = found
            else:
                found_in_todo = iter(found)
                seqs = [next(found_in_todo) if seq is None else seq for seq in seqs]
            todo = [event for event, seq in zip(batch, seqs, strict=True) if seq is None]
            if not todo:
                return cast("list[int]", seqs)
            marker = _marker_index(todo)
        raise ConflictError(
            f"session {self._id!r}: other writers kept appending while an append checked "
            f"its event ids against theirs ({_SEALED_RETRIES} tries)"
        )

    def _append_sealed(
        self, batch: list[Event], marker: int, expect_seq: int | None
    ) -> Plan[list[Event]]:
        """Append ``batch`` sealed by the session's cipher; returns the stored plaintext events
        (empty when ``expect_seq`` did not match).

        A sealed event is bound to its seq, so each try seals for the seqs that follow what
        this session has seen and appends only if the log still ends there (the backends'
        conditional append); when another writer got there first, it catches up and seals
        again."""
        cipher = self._cipher
        assert cipher is not None
        backoff = Backoff(tries=_SEALED_RETRIES)
        while backoff.next_try():
            if pause := backoff.contention_pause():  # writers are racing for this session
                yield Pause(pause)
            base = self._latest_seq
            if expect_seq is not None and base != expect_seq:
                yield from self._refresh_plan()
                if self._latest_seq != expect_seq:
                    return []
                base = expect_seq
            yield from self._fenced()
            if cipher.needs_key(sealing=True):
                yield from self._key_plan(cipher, sealing=True)
            sealed = [cipher.seal(event, base + i) for i, event in enumerate(batch, start=1)]
            # Appended only at ``base`` and in the life read (else REOPEN): a sealed event
            # never lands at a seq, or in a life, other than the one it was sealed for. The
            # catalog's change is made from the plaintext (_catalog_change).
            self._plain_batch = batch
            try:
                if len(sealed) == 1:
                    one = yield AppendOne(sealed[0], marker == 0)
                    if one is not None:
                        return [_replace(batch[0], seq=one.seq)]
                appended = yield Append(sealed, marker, base)
            finally:
                self._plain_batch = None
            if isinstance(appended, Reopen):
                yield from self._reopen()
                if not self._admits((), batch):
                    return []  # the new life holds some of the batch: _append_fresh sorts it
                continue
            foreign, stored = appended
            if foreign:
                foreign = yield from self._from_storage(foreign)
                self._ingest(foreign)
            if not stored and not self._admits((), batch):
                return []  # other writers stored some of the batch: _append_fresh sorts it
            if stored:
                return [_replace(e, seq=s.seq) for e, s in zip(batch, stored, strict=True)]
            if expect_seq is not None and self._latest_seq != expect_seq:
                return []
        raise ConflictError(
            f"session {self._id!r}: other writers kept appending while an encrypted append "
            f"sealed its events ({_SEALED_RETRIES} tries)"
        )

    # -- reading --------------------------------------------------------------------------

    def _latest_seq_plan(self) -> Plan[int]:
        yield from self._refresh_plan()
        return self._latest_seq

    def _read_plan(self, after: int, limit: int | None) -> Plan[list[Event]]:
        _check_read(after, limit)
        if limit == 0:
            return []
        yield from self._refresh_plan()
        served = self._from_window(after, limit)
        if served is not None:
            return served
        return (yield from self._read_stored(after, limit))

    def _from_window(self, after: int, limit: int | None) -> list[Event] | None:
        """The events a read asks for, from the window (None: it does not hold them)."""
        if after + 1 < self._window_start:
            return None
        start = bisect.bisect_right(self._window, after, key=_seq_of)
        end = len(self._window) if limit is None else start + limit
        return self._window[start:end]

    def _read_stored(self, after: int, limit: int | None) -> Plan[list[Event]]:
        shared: list[Event] = []
        base = self._base
        if after < base:  # a branch: its first events are its origin's
            count = base - after if limit is None else min(limit, base - after)
            shared = yield ReadOrigin(self._origin or "", after, count)
            if limit is not None:
                limit -= len(shared)
                if limit <= 0:
                    return shared
            after = base
        events = yield Read(after, limit)
        if not base and after < self._latest_seq and (not events or events[0].seq > after + 1):
            events = yield from self._with_archived(after, limit, events)
        return shared + (yield from self._from_storage(events))

    def _with_archived(self, after: int, limit: int | None, live: list[Event]) -> Plan[list[Event]]:
        """A read whose live events start later than asked: the archived events after
        ``after`` (:mod:`agentsession.archive`), then the live ones past the archive's mark."""
        index = decode_index(self._id, (yield MetaGet(ARCHIVE_KIND, self._id)))
        if after >= index.through:
            return live
        out: list[Event] = []
        for segment in index.segments:
            if segment.last <= after:
                continue
            text = yield MetaGet(SEGMENT_KIND, segment.key)
            if text is None:
                raise CorruptLogError(
                    f"session {self._id!r}: archive segment {segment.key!r} is missing",
                    session_id=self._id,
                )
            out.extend(e for e in decode_segment(self._id, text) if after < e.seq <= index.through)
            if limit is not None and len(out) >= limit:
                return out[:limit]
        if live and live[0].seq <= index.through:
            # Archived, and not yet dropped from the live log: read the live log past the mark.
            live = yield Read(index.through, None if limit is None else limit - len(out))
        out.extend(live if limit is None else live[: limit - len(out)])
        return out

    # -- branches -------------------------------------------------------------------------

    def _branch_plan(self, events: list[Event]) -> Plan[list[Event]]:
        """Opened at its tail (``events``, at its own seqs, opened): when the log's first
        event is a ``session/branch`` marker, become that branch (its seqs shifted past the
        shared history from now on) and return ``events`` shifted; else ``events``."""
        first = events[0]
        if first.seq != 1:
            try:
                head = yield Read(0, 1)
            except (CorruptLogError, ValueError):
                return events  # a first event that does not read is no marker: a full read says
            if not head or head[0].type != SESSION_BRANCH:
                return events
            first = (yield from self._from_storage(head))[0]
        if first.seq != 1 or first.type != SESSION_BRANCH:
            return events
        try:
            marker = first.decode(SessionBranch)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise CorruptLogError(
                f"session {self._id!r}: its branch marker does not decode: {exc}",
                session_id=self._id,
            ) from None
        check_revision(first)
        if not marker.origin or marker.origin_seq < 0:
            raise CorruptLogError(
                f"session {self._id!r}: its branch marker names no origin",
                session_id=self._id,
            )
        self._base = marker.origin_seq
        self._first = marker.origin_seq + 1
        self._origin = marker.origin
        self._prefix = None
        if self._cipher is not None:
            self._cipher.seq_offset = marker.origin_seq
        self._shift_log(marker.origin_seq)
        return shift(events, marker.origin_seq)

    def _unbranch(self) -> None:
        """Forget being a branch (the log was deleted or replaced: read its first event
        again)."""
        self._base = 0
        self._first = 1
        self._origin = None
        self._prefix = None
        if self._cipher is not None:
            self._cipher.seq_offset = 0
        self._shift_log(0)

    def _shared_plan(self) -> Plan[list[Event]]:
        """A branch's shared history: its origin's events up to the branch seq (read once per
        life of the log); empty for a session that is not a branch."""
        if not self._base:
            return []
        if self._prefix is None:
            self._prefix = yield ReadOrigin(self._origin or "", 0, self._base)
        return self._prefix

    def _history_events(self) -> Plan[list[Event]]:
        """The events a history is derived from: the full window, after a branch's shared
        history when the window starts at the branch (no compaction of its own cut it)."""
        window = yield from self._full_window()
        if self._base and self._window_start <= self._first:
            return (yield from self._shared_plan()) + window
        return window

    def _deriver(self, agent: str | None) -> Plan[Deriver]:
        deriver = self._fed_deriver(agent)
        if deriver is None:
            deriver = yield from self._build_deriver(agent or None)
            self._derivers[agent or None] = deriver
        return deriver

    def _fed_deriver(self, agent: str | None) -> Deriver | None:
        """The ``agent`` filter's deriver fed the new events of the window (None: it must be
        built again, from storage). Pure."""
        deriver = self._derivers.get(agent or None)
        if deriver is not None:
            start = bisect.bisect_right(self._window, deriver.last_seq, key=_seq_of)
            if deriver.last_seq + 1 >= self._window_start and deriver.feed_all(
                self._window[start:]
            ):
                return deriver
        return None

    def _build_deriver(self, agent: str | None) -> Plan[Deriver]:
        yield from self._full_window()
        probe = Deriver(agent)
        need = self._first
        if self._window_start > self._first:
            for event in reversed(self._window):
                if event.type != COMPACTION or not probe.passes(event):
                    continue
                data = compaction_of(event)
                if data is None:
                    continue
                need = event.seq if data.rebuilds_history else data.history_starts_at
                break
            yield from self._ensure_window_from(need)
        events = self._window
        if self._base and self._window_start <= self._first:
            events = (yield from self._shared_plan()) + events  # a branch's shared history
        if need < self._window_start:
            # The loading cap stopped the window short of where this history starts: derive
            # from the first turn boundary in it (keeping a legacy marker before that), so the
            # history never opens inside a turn with results whose calls were not loaded.
            from .compaction import history_start

            start = history_start(events, probe)
            events = [e for e in events[:start] if e.type == COMPACTION] + events[start:]
        return Deriver.from_events(events, agent)

    def _entries_plan(self, agent: str | None) -> Plan[list[IndexedMessage]]:
        yield from self._refresh_plan()
        return (yield from self._deriver(agent)).entries()

    def _messages_plan(
        self, agent: str | None, max_tool_result_bytes: int | None
    ) -> Plan[list[Message]]:
        yield from self._refresh_plan()
        return self._history_messages((yield from self._deriver(agent)), max_tool_result_bytes)

    def _history_messages(
        self, deriver: Deriver, max_tool_result_bytes: int | None
    ) -> list[Message]:
        """``deriver``'s messages, with the compaction policy's elision of older tool results
        (:attr:`CompactionPolicy.elide_tool_results_over`) applied. Pure."""
        messages = deriver.messages(max_tool_result_bytes)
        policy = self._store.compaction
        if policy is None or policy.elide_tool_results_over is None:
            return messages
        before = latest_turn_start(deriver.committed())
        return elide_tool_results(messages, policy.elide_tool_results_over, before)

    # -- the compaction policy ------------------------------------------------------------

    def _policy_budget(self, policy: CompactionPolicy, deriver: Deriver) -> tuple[int, int]:
        """The history's tokens (as the policy counts them: older tool results elided) and
        messages. The tokens are a running count: only the entries added since the last count
        are counted, unless the history was rebuilt (a marker, a reload) since. Pure."""
        state = self._policy_count
        start, tokens = 0, 0
        if state is not None and state[0] is deriver and state[1] > 0:
            since = deriver.committed_since(state[1] - 1)
            if since and since[0] is state[2]:
                start, tokens, new = state[1], state[3], since[1:]
        if not start:
            new = deriver.committed()
        count = start + len(new)
        if policy.max_tokens is not None and new:
            tokens += policy.count([policy.counted(e.message) for e in new])
        if count:
            last = new[-1] if new else state[2] if state is not None else None
            self._policy_count = (deriver, count, last, tokens)
        return tokens, count

    def _policy_check_plan(self, policy: CompactionPolicy) -> Plan[PlannedCompaction | None]:
        """At the end of a turn: when the history is over the policy's budget, the compaction
        to summarize (the messages the summary replaces); None when it fits, when tool calls
        are unanswered or when there is nothing to drop. The budget is checked on what this
        object holds (its own appends, and other writers' as far as it has caught up); the
        plan catches up first."""
        deriver = yield from self._deriver(None)
        if deriver.has_open_calls:
            return None
        tokens, count = self._policy_budget(policy, deriver)
        if not policy.over(tokens, count):
            return None
        yield from self._refresh_plan()
        deriver = yield from self._deriver(None)
        if deriver.has_open_calls:
            return None
        placeholder = Message.user("")
        data = plan_compaction(
            (yield from self._history_events()),
            deriver,
            self._latest_seq,
            placeholder,
            keep_turns=policy.keep_turns,
            session_id=self._id,
        )
        if data is None:
            return None
        entries = deriver.committed()
        cut = len(entries) - len(data.retained_tail)
        if cut <= 0:
            return None
        return PlannedCompaction(
            messages=[e.message for e in entries[:cut]],
            planned_at=self._latest_seq,
            keep_turns=policy.keep_turns,
            tokens=tokens,
        )

    def _policy_commit_plan(self, planned: PlannedCompaction, summary: Message) -> Plan[int | None]:
        """Append the marker of ``planned`` with ``summary``, conditional on the seq it is
        planned from (as :meth:`_compact_plan`). When other writers appended since the check,
        the cut is planned again keeping the turns that began since as well, and the marker is
        appended only if it replaces exactly the messages summarized; None otherwise (a
        compaction, rewind or unanswered calls got in between)."""

        def plan() -> Plan[Compaction | None]:
            deriver = yield from self._deriver(None)
            if deriver.has_open_calls:
                return None
            events = yield from self._history_events()
            keep = planned.keep_turns
            if self._latest_seq != planned.planned_at:
                keep += sum(1 for _, seq in turn_cuts(events, deriver) if seq > planned.planned_at)
            data = plan_compaction(
                events,
                deriver,
                self._latest_seq,
                summary,
                keep_turns=keep,
                tokens_before=planned.tokens,
                session_id=self._id,
            )
            if data is None or not check_commit(planned, data, deriver.committed()):
                return None
            return data

        return (yield from self._append_marker(plan, None))

    # -- compaction -----------------------------------------------------------------------

    def _append_marker(
        self, plan: Callable[[], Plan[Compaction | None]], agent: str | None
    ) -> Plan[int | None]:
        """Append the marker ``plan`` makes, conditional on the seq it was planned from;
        plan again when another writer appended in between."""
        for _ in range(_COMPACTION_RETRIES):
            yield from self._refresh_plan()
            planned_at = self._latest_seq
            data = yield from plan()
            if data is None:
                return None
            event = Event.new(COMPACTION, data, agent=agent or "")
            batch = self._prepare_batch((event,), planned_at)
            try:
                return (yield from self._append_batch_plan(batch, planned_at))[0]
            except ConflictError:
                continue
        raise ConflictError(
            f"session {self._id!r}: other writers kept appending while compaction planned "
            f"({_COMPACTION_RETRIES} tries); take the session's turn lock to compact"
        )

    def _compact_plan(
        self,
        summary: Message | None,
        *,
        keep_turns: int | None,
        first_kept_seq: int | None,
        up_to_message: int | None,
        tokens_before: int,
        agent: str | None,
    ) -> Plan[int | None]:
        def plan() -> Plan[Compaction | None]:
            deriver = yield from self._deriver(agent)  # loads the full window first
            return plan_compaction(
                (yield from self._history_events()),
                deriver,
                self._latest_seq,
                summary,
                keep_turns=keep_turns,
                first_kept_seq=first_kept_seq,
                up_to_message=up_to_message,
                tokens_before=tokens_before,
                session_id=self._id,
            )

        return (yield from self._append_marker(plan, agent))

    def _prune_plan(self, max_messages: int, agent: str | None) -> Plan[int | None]:
        def plan() -> Plan[Compaction | None]:
            deriver = yield from self._deriver(agent)  # loads the full window first
            return plan_prune((yield from self._history_events()), deriver, max_messages)

        return (yield from self._append_marker(plan, agent))

    _replaying = False
    """Set on a session object that writes another store's log as it is (``copy_store``):
    no history cap applies, so no prune marker is added to the copy."""

    def _history_cap_plan(self) -> Plan[int | None]:
        """The history cap in force: the store's ``max_messages`` and, for a child session,
        the one it was forked with (the smaller of the two). A child's is read from its first
        event once per life of the log."""
        if self._replaying:
            return None
        own = self._own_cap
        if own is None or own[0] != self._generation:
            generation = self._generation
            fork = fork_in((yield from self._read_plan(0, 1)))
            own = self._own_cap = (generation, fork.max_messages if fork is not None else 0)
        store_cap = self._store.max_messages
        if own[1] and store_cap:
            return min(own[1], store_cap)
        return own[1] or store_cap

    # -- child sessions -------------------------------------------------------------------

    def _settled_plan(self, agent: str | None) -> Plan[tuple[list[IndexedMessage], int]]:
        yield from self._refresh_plan()
        deriver = yield from self._deriver(agent)
        return deriver.settled(), self._latest_seq

    def _last_time_plan(self) -> Plan[_dt.datetime | None]:
        yield from self._refresh_plan()
        return self._window[-1].time if self._window else None
