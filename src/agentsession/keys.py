"""The encryption lifecycle of a store: unlocking its key ring, changing the passphrase,
rotating and shredding session keys.

:mod:`agentsession.crypto` holds the keys and seals; this module decides *when*: a store
composes one :class:`KeyLifecycle`, which checks once, before any event is read, that the
store's encryption matches how it was opened (and makes a new, empty store encrypted), then
holds the unlocked :class:`~agentsession.crypto.KeyRing` that sessions seal and open with.
Shredding lives here too: a notice in the log, what is kept beside the log under the
session's id removed, then the key destroyed. The store's public methods (``encrypted``,
``change_passphrase``, ``shred``, ``is_shredded``, ``rotate_key``) call it.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Sequence
from typing import Any, Protocol

from . import children
from .branching import branches_problem, live_branches
from .catalog import Catalog
from .contract import check_session_id
from .crypto import (
    SESSION_KIND,
    SHRED_NOTICE,
    SHREDDED,
    STORE_KIND,
    EncryptionError,
    KeyRing,
    check_secret,
)
from .errors import UsageError
from .events import Event
from .session import BaseSession

__all__ = ["KeyHost", "KeyLifecycle"]


class KeyHost(children.ChildHost, Protocol):
    """What the key lifecycle needs of its store (``BaseStore`` meets it)."""

    @property
    def location(self) -> str: ...

    def _meta_set(self, kind: str, key: str, value: str | None) -> None: ...

    def _meta_add(self, kind: str, key: str, value: str) -> str: ...

    _catalog: Catalog

    def _open_session(self, session_id: str) -> BaseSession: ...

    def _drop_cached(self, session_id: str) -> None: ...

    def _meta_cas(self, kind: str, key: str, expected: str | None, new: str | None) -> bool: ...

    def exists(self, session_id: str) -> bool: ...

    def get(self, session_id: str) -> Any: ...


class KeyLifecycle:
    """One store's keys: the secret it was opened with until :meth:`unlock` has checked it,
    then the unlocked :attr:`ring` (None for a plain store).

    ``shred_clears`` names the meta namespaces keyed by session id that shredding a session
    empties (its record, binding, integration state; not its key's tombstone, nor its
    children index, whose ids are kept)."""

    def __init__(
        self,
        store: KeyHost,
        passphrase: str | None,
        key: bytes | None,
        *,
        shred_clears: Sequence[str],
    ) -> None:
        check_secret(passphrase, key)
        self._store = store
        # Kept only until the key ring is unlocked (unlock), then dropped.
        self._secret: tuple[str | None, bytes | None] | None = (passphrase, key)
        self._lock = threading.Lock()
        self._shred_clears = tuple(shred_clears)
        self.ring: KeyRing | None = None
        """The store's unlocked keys when it is encrypted (see :mod:`agentsession.crypto`)."""

    @property
    def pending(self) -> bool:
        """Whether :meth:`unlock` has still to run (the secret is still held)."""
        return self._secret is not None

    def unlock(self) -> None:
        """Check that the store's encryption matches how it was opened, once: a store with a
        key record needs its passphrase (or key), which is checked here, before any event is
        read; a store opened with one becomes encrypted if it holds no sessions yet."""
        with self._lock:
            secret = self._secret
            if secret is None:
                return
            passphrase, key = secret
            store = self._store
            store._catalog.clean_crash_leftovers()
            record = store._meta_get(STORE_KIND, "store")
            if passphrase is None and key is None:
                if record is not None:
                    raise EncryptionError(
                        f"the store {store.location} is encrypted: open it with passphrase= "
                        "(or key=)"
                    )
            else:
                if record is None and store._catalog.list_page(None, 1, 0):
                    raise EncryptionError(
                        f"the store {store.location} holds unencrypted sessions: encryption is "
                        "chosen when a store is created; copy it into a new, encrypted store "
                        "(agentsession copy) instead"
                    )
                self.ring = KeyRing(
                    store.location,
                    store._meta_get,
                    store._meta_set,
                    store._meta_add,
                    passphrase=passphrase,
                    key=key,
                )
            self._secret = None

    def required(self) -> KeyRing:
        """The key ring; :class:`~agentsession.errors.UsageError` for a plain store."""
        if self.ring is None:
            raise UsageError(f"the store {self._store.location} is not encrypted")
        return self.ring

    def change_passphrase(
        self, old: str | None, new: str | None, *, old_key: bytes | None, new_key: bytes | None
    ) -> None:
        """Wrap the store key under a new passphrase or key (see
        :meth:`agentsession.store.BaseStore.change_passphrase`)."""
        self.required().change_passphrase(old, new, old_key=old_key, new_key=new_key)

    def rotate(self, session_id: str) -> str:
        """Seal the session's new events under a new data key; returns its key id."""
        ring = self.required()
        return ring.rotate(check_session_id(session_id))

    def forget(self, session_id: str) -> None:
        """Drop what the ring holds of a deleted session (nothing for a plain store)."""
        if self.ring is not None:
            self.ring.forget(session_id)

    def is_shredded(self, session_id: str) -> bool:
        """Whether the session was shredded (its key is destroyed; False in a plain store)."""
        return children.is_shredded(self._store, session_id)

    def shred(self, session_id: str, *, recursive: bool, keep_children: bool) -> builtins.list[str]:
        """Shred the session, and with ``recursive`` its children first; returns the ids
        shredded (see :meth:`agentsession.store.BaseStore.shred`)."""
        self.required()
        branches = live_branches(self._store, session_id)
        if branches and not recursive:
            raise UsageError(
                branches_problem(session_id, branches, "shred(recursive=True) shreds")
            )
        shredded = [
            shred_id
            for branch in branches
            for shred_id in self.shred(branch.id, recursive=True, keep_children=keep_children)
        ]
        below = children.descendants(self._store, session_id)
        if recursive:
            # Deepest first: an interrupted run leaves every parent whose children are not all
            # shredded unshredded (and findable), and shredding again finishes the job.
            order = [*reversed(below), session_id]
        else:
            keeping = [c for c in below if below[c] == session_id and not self.is_shredded(c)]
            if keeping and not keep_children:
                shown = ", ".join(repr(c) for c in keeping[:5])
                more = f" and {len(keeping) - 5} more" if len(keeping) > 5 else ""
                raise UsageError(
                    f"session {session_id!r} has {len(keeping)} child session(s) holding "
                    f"copies of its history ({shown}{more}): shred(recursive=True) shreds them "
                    "too, keep_children=True shreds it alone; nothing shredded"
                )
            order = [session_id]
        for target in order:
            self.shred_one(target)
        return shredded + order

    def shred_one(self, session_id: str) -> None:
        """Shred one session, whatever its children: the notice, the entries beside its log,
        then its key."""
        ring = self.required()
        store = self._store
        store._drop_cached(session_id)
        # First a notice in the log (its type is clear): a session object elsewhere that still
        # holds the key meets it when it next catches up, before it appends, and refuses from
        # then on. Then what is kept beside the log goes, and the key is destroyed. Shredding
        # again after a crash in between finishes the job.
        record = store._meta_get(SESSION_KIND, session_id)
        if record is not None and record != SHREDDED:
            event = Event.new(SHRED_NOTICE, {}, time=store.clock())
            try:
                notice = store._open_session(session_id)
                try:
                    notice._append_prepared([event])
                finally:
                    notice.close()
            except EncryptionError:
                pass  # it refuses already: a notice is in the log (an interrupted shred)
        if record != SHREDDED:
            children.keep_ids_of_children(store, session_id)
        for kind in self._shred_clears:
            store._meta_set(kind, session_id, None)
        ring.shred(session_id)
