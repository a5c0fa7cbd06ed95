"""The one exception tree of agentsession.

::

    SessionError                      root: catch this to catch everything below
    ├── StorageError                  the backend could not do what was asked
    │   ├── ConflictError             a concurrent writer made the operation impossible
    │   ├── CorruptLogError           stored data does not parse (names file, line, byte offset)
    │   ├── OutcomeUnknown            the connection was lost during a write: stored or not?
    │   └── StoreUnavailable          the store cannot be reached (names host and database)
    ├── SessionNotFound               no session with that id (also a ``LookupError``)
    ├── SessionExpired                the session outlived the store's TTL
    ├── DuplicateSession              a session with that id already exists
    ├── LockTimeout                   the turn lock was not taken in time (also a ``TimeoutError``)
    ├── TurnInterrupted               a delivery interrupted the running turn (``turn.step()``)
    ├── ChildStateError               a child session was already merged or discarded
    └── UsageError                    the caller passed something invalid (also a ``ValueError``)

Driver and operating-system errors are translated into this tree in one place per backend,
so a caller never needs to import ``sqlite3`` or ``psycopg`` to handle a failure.
"""

from __future__ import annotations

__all__ = [
    "ChildStateError",
    "EncryptionError",
    "ConflictError",
    "CorruptLogError",
    "DuplicateSession",
    "LeaseLost",
    "LockTimeout",
    "NewerFormat",
    "OutcomeUnknown",
    "SessionError",
    "SessionBusy",
    "SessionExpired",
    "SessionNotFound",
    "SessionReset",
    "SessionShredded",
    "StorageError",
    "StoreUnavailable",
    "TurnInterrupted",
    "UsageError",
]


class SessionError(Exception):
    """Root of every error agentsession raises."""


class StorageError(SessionError):
    """The backend failed to store or load data."""


class ConflictError(StorageError):
    """A concurrent writer made the operation impossible (for example a seq already taken)."""


class CorruptLogError(StorageError):
    """Stored data does not parse.

    ``path``, ``line`` (1-based) and ``offset`` (byte offset of the line's first byte) say where;
    ``session_id`` names the session when it is known.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str = "",
        line: int = 0,
        offset: int = -1,
        session_id: str = "",
    ) -> None:
        super().__init__(message)
        self.path = path
        self.line = line
        self.offset = offset
        self.session_id = session_id


class NewerFormat(CorruptLogError):
    """The log holds an event that a newer revision of the format wrote and that this version
    cannot read correctly (its payload's ``minRevision`` is above
    :data:`agentsession.events.FORMAT_REVISION`): the history is refused rather than derived
    wrongly. Upgrade agentsession to read it."""


class OutcomeUnknown(StorageError):
    """The connection to the server was lost while a write was under way, so whether it took
    effect is unknown. An append retries by itself for the store's ``reconnect_timeout``
    (finding out from the log whether the write landed) and raises this only when the server
    stayed out of reach that long. Appending the same events again (the same
    :class:`~agentsession.events.Event` objects, or events with the same ids) is safe: what is
    stored already is recognised by its event ids and not stored twice."""


class StoreUnavailable(StorageError):
    """The store cannot be reached (server down, directory unreadable, driver missing)."""


class SessionNotFound(SessionError, LookupError):
    """No session with that id exists in the store."""

    def __init__(self, session_id: str, message: str = "") -> None:
        super().__init__(message or f"session not found: {session_id!r}")
        self.session_id = session_id


class SessionExpired(SessionError):
    """The session's last append is older than the store's TTL."""

    def __init__(self, session_id: str, message: str = "") -> None:
        super().__init__(message or f"session expired: {session_id!r}")
        self.session_id = session_id


class DuplicateSession(SessionError):
    """A session with that id already exists where a new one was required."""

    def __init__(self, session_id: str, message: str = "") -> None:
        super().__init__(message or f"duplicate session: {session_id!r}")
        self.session_id = session_id


class LockTimeout(SessionError, TimeoutError):
    """The per-conversation turn lock could not be acquired within the timeout."""

    def __init__(self, session_id: str, timeout: float, message: str = "") -> None:
        super().__init__(
            message or f"turn lock of session {session_id!r} not acquired within {timeout:g}s"
        )
        self.session_id = session_id
        self.timeout = timeout


class SessionReset(SessionError):
    """The session followed (``session.follow()``) was deleted, and perhaps created again,
    while it was followed: what was yielded belongs to the log's previous life. ``first_seq``
    is the seq the new life starts at (the caller reloads from there, or gives up)."""

    def __init__(self, session_id: str, first_seq: int) -> None:
        super().__init__(
            f"session {session_id!r} was deleted (perhaps created again) while followed; its "
            f"new life starts at seq {first_seq}"
        )
        self.session_id = session_id
        self.first_seq = first_seq


class LeaseLost(SessionError):
    """The turn lock's lease the caller holds is no longer current: another worker took the
    conversation's lock since (it stole the lock from a holder that had not renewed, took over
    an expired lease, or a lock that went with its holder's connection). An append made under
    that lease was refused and wrote nothing; stop the turn. ``epoch`` is the lease's, and
    ``current`` the newer epoch found (0 when unknown)."""

    def __init__(self, session_id: str, epoch: int, current: int = 0, message: str = "") -> None:
        newer = f" (the lock is at epoch {current} now)" if current else ""
        super().__init__(
            message
            or f"the lease of session {session_id!r} at epoch {epoch} is lost: another worker "
            f"took the turn lock{newer}; nothing was written"
        )
        self.session_id = session_id
        self.epoch = epoch
        self.current = current


class SessionBusy(SessionError):
    """A delivery with the ``reject`` policy (``store.deliver(..., policy="reject")``) found a
    turn running in the conversation (its latest ``turn/start`` has no ``turn/end`` yet):
    nothing was recorded; tell the sender to try again later. ``session_id`` is the
    conversation, ``turn_id`` the running turn's id (empty when unknown)."""

    def __init__(self, session_id: str, turn_id: str = "", message: str = "") -> None:
        running = f" (turn {turn_id!r})" if turn_id else ""
        super().__init__(
            message
            or f"session {session_id!r} is busy: a turn is running{running}, and the delivery's "
            "policy is 'reject'; nothing was recorded"
        )
        self.session_id = session_id
        self.turn_id = turn_id


class TurnInterrupted(SessionError):
    """A delivery with the ``interrupt`` or ``rollback`` policy arrived while this turn ran
    (``store.deliver(..., policy="interrupt")``): raised by ``turn.step()`` at the turn's next
    step boundary. Let it escape the turn's ``with`` block: the turn is closed (its unanswered
    tool calls answered, its ``turn/end`` naming the delivery; with ``rollback`` the turn is
    also left out of the history) and the delivery stays pending, so ``session.pending``
    yields it next. ``session_id`` is the conversation, ``turn_id`` the interrupted turn's id,
    ``delivery_id`` the delivery's id and ``policy`` its policy."""

    def __init__(
        self, session_id: str, turn_id: str, delivery_id: str, policy: str = "interrupt"
    ) -> None:
        verb = "rolled back" if policy == "rollback" else "interrupted"
        super().__init__(f"{verb} by delivery {delivery_id}")
        self.session_id = session_id
        self.turn_id = turn_id
        self.delivery_id = delivery_id
        self.policy = policy


class ChildStateError(SessionError):
    """A child session cannot be merged or discarded: it already was (``state`` says which:
    ``merged`` or ``discarded``), or its parent no longer holds it (``state`` ``orphaned``:
    the parent was deleted, perhaps created again, or shredded)."""

    def __init__(self, session_id: str, state: str, message: str = "") -> None:
        super().__init__(message or f"child session {session_id!r} is {state}")
        self.session_id = session_id
        self.state = state


class EncryptionError(SessionError):
    """A key is wrong or missing, a sealed record does not open, or a store's encryption does
    not match how it was opened (see :mod:`agentsession.crypto`). Messages name the store,
    session and seq, never a key, passphrase or plaintext."""


class SessionShredded(EncryptionError):
    """The session was shredded (``store.shred``): its key is destroyed, so it can be neither
    read nor appended to until it is deleted."""


class UsageError(SessionError, ValueError):
    """The caller passed something invalid: a bad id, URL, argument or state."""
