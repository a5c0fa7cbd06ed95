"""Encryption at rest: a passphrase or key per store, a key per session, AES-256-GCM per event.

``open_store(url, passphrase="...")`` (or ``key=<32 bytes>``) makes a store encrypted: the
first such open creates its key record, and from then on every open needs the key. Everything
here works through the store's small key-value primitive (``meta``), so every backend keeps
the same records and the same sealed events; ``docs/security.md`` has the threat model and
``docs/format.md`` the stored shapes.

The keys, from the top:

* the **key-encryption key** (KEK): scrypt of the passphrase with the store's salt and cost
  parameters (kept in the store record, so they can be raised later), or the 32-byte ``key``
  itself. It exists only in memory;
* the **store key**: 32 random bytes, kept in the store record wrapped (AES-256-GCM) by the
  KEK. Changing the passphrase re-wraps this one key: one atomic write of one record, however
  much data the store holds, so a crash leaves the old or the new passphrase working;
* a **session key** per session: 32 random bytes, kept wrapped by the store key in the meta
  namespace ``crypto-session`` under the session id (created once, by whichever writer comes
  first). Deleting it is **crypto-shredding**: the session's events can never be read again;
* **data keys**, HKDF-SHA256 of the session key and a key id: events are sealed with the
  session's active data key (``k1`` until :meth:`KeyRing.rotate` starts a new one; older ones
  stay readable, as they derive from the same session key).

A sealed event keeps ``seq``, ``type``, ``agent``, ``time`` and its ``id`` in clear (indexing,
recovery, listing, the TTL and retries need them); its payload, meta and ``user`` are one
AES-256-GCM box. The box's associated data is every field stored in clear: the session id,
seq, type, agent, time, id, and the clear ``user`` and ``meta`` (empty, as sealing leaves
them), so a record moved to another session or position, or with any clear field changed,
does not open. The stored payload is
``{"sealed":2,"kid":"k1","box":"<base64 of nonce, ciphertext and tag>"}``; records of the
first format (``"sealed":1``, which earlier versions wrote; their associated data is the
session id, seq and type only) still open.

In an encrypted store every event is sealed: a store becomes encrypted only while it holds no
sessions, so an event that is not sealed was written without the key (injected, or by a store
object opened without it) and reading it raises :class:`EncryptionError` naming the session
and seq.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import functools
import hmac
import os
import threading
from collections.abc import Callable
from typing import Any, Final

import msgspec

from .codec import decode, encode
from .errors import EncryptionError, SessionShredded, UsageError
from .events import Event

__all__ = [
    "ACTIVE_KIND",
    "SEALED_FORMAT",
    "SESSION_KIND",
    "SHREDDED",
    "SHRED_NOTICE",
    "STORE_KIND",
    "EncryptionError",
    "KeyRing",
    "SessionCipher",
    "check_secret",
    "is_sealed",
    "unsealed_error",
]

STORE_KIND: Final = "crypto"
"""Meta namespace of the store record (key ``store``): KDF parameters and the wrapped store key."""
SESSION_KIND: Final = "crypto-session"
"""Meta namespace of the wrapped session keys, keyed by session id (deleted with the session)."""
ACTIVE_KIND: Final = "crypto-active"
"""Meta namespace of each session's active data key id (deleted with the session)."""

SHRED_NOTICE: Final = "agentsession/shred"
"""Type of the event :meth:`~agentsession.BaseStore.shred` appends to a session's log just
before it destroys the session's key (reserved: an append of one is refused). A session object
that still holds the key, in this process or another, meets it when it next reads or catches
up before an append, and refuses from then on, instead of appending events nobody can ever
open."""

SHREDDED: Final = "shredded"
"""What a shredded session's key record holds instead of its wrapped key."""

_STORE_KEY: Final = "store"
_NONCE = 12
_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 1 << 15, 8, 1
_HEAD_V1: Final = b'{"sealed":1,'
_HEAD_V2: Final = b'{"sealed":2,'
_HEAD_LEN: Final = max(len(_HEAD_V1), len(_HEAD_V2))
SEALED_FORMAT: Final = 2
"""The format of the events sealed now (``"sealed":2``: every clear field is associated data)."""
_PLAIN_TAIL: Final = b',{},""]'  # the end of a box's plaintext when meta and user are empty
_replace = msgspec.structs.replace


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers import aead
    except ImportError:
        raise UsageError(
            "encryption needs the crypto extra: pip install 'agentsession[crypto]'"
        ) from None
    return aead


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: object, what: str) -> bytes:
    if not isinstance(text, str):
        raise EncryptionError(f"{what} is not base64 text")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise EncryptionError(f"{what} is not valid base64") from None


class _Nonces(threading.local):
    """Random bytes drawn from ``os.urandom`` a few kilobytes at a time, handed out as GCM
    nonces (one system call per 256 events instead of one per event). Per thread, and drawn
    afresh in a forked child, so that no two processes or threads ever hand out the same
    bytes."""

    def __init__(self) -> None:
        self.pool = b""
        self.at = 0


_nonces = _Nonces()


def _fresh_nonces() -> None:
    global _nonces
    _nonces = _Nonces()


os.register_at_fork(after_in_child=_fresh_nonces)


def _nonce() -> bytes:
    """12 random bytes for a GCM nonce."""
    pool = _nonces
    at = pool.at
    if at >= len(pool.pool):
        pool.pool = os.urandom(_NONCE * 256)
        at = 0
    pool.at = at + _NONCE
    return pool.pool[at : at + _NONCE]


def _seal(key: bytes, plaintext: bytes, aad: bytes) -> bytes:
    nonce = os.urandom(_NONCE)
    return nonce + bytes(_crypto().AESGCM(key).encrypt(nonce, plaintext, aad))


def _open(key: bytes, box: bytes, aad: bytes) -> bytes | None:
    return _open_box(_crypto().AESGCM(key), box, aad)


def _open_box(aead: Any, box: bytes, aad: bytes) -> bytes | None:
    """The plaintext of ``nonce + ciphertext + tag``, or None when it does not open."""
    if len(box) < _NONCE + 16:
        return None
    try:
        return aead.decrypt(box[:_NONCE], box[_NONCE:], aad)  # type: ignore[no-any-return]
    except Exception as exc:
        if isinstance(exc, _invalid_tag()):
            return None
        raise


@functools.cache
def _invalid_tag() -> type[Exception]:
    """cryptography's error for a box that does not open (imported once, with the extra)."""
    from cryptography.exceptions import InvalidTag

    return InvalidTag


def _kek(passphrase: str | None, key: bytes | None, kdf: dict[str, Any]) -> bytes:
    """The key-encryption key from what the store was opened with and the stored KDF."""
    name = kdf.get("name")
    if key is not None:
        if name != "raw":
            raise EncryptionError("the store is encrypted with a passphrase, not a raw key")
        return key
    if name != "scrypt" or passphrase is None:
        raise EncryptionError("the store is encrypted with a raw key, not a passphrase")
    from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

    n, r, p, salt = _scrypt_parameters(kdf)
    try:
        return bytes(Scrypt(salt=salt, length=32, n=n, r=r, p=p).derive(passphrase.encode()))
    except (ValueError, OverflowError, MemoryError):
        raise EncryptionError("the store record's KDF parameters are not usable") from None


_SCRYPT_MAX_MEMORY = 1 << 28
"""The most memory (bytes, ``128 * n * r``) a stored scrypt cost may ask for: 256 MiB, 8 times
what new records use."""
_SCRYPT_MAX_WORK = 1 << 23
"""The most work (``n * r * p``) a stored scrypt cost may ask for: 32 times what new records use
(a few seconds per open)."""


def _scrypt_parameters(kdf: dict[str, Any]) -> tuple[int, int, int, bytes]:
    """``n``, ``r``, ``p`` and the salt of a stored scrypt record, checked so that a damaged or
    hostile record can neither crash the KDF nor make it take unbounded memory or time."""
    try:
        n, r, p = kdf["n"], kdf["r"], kdf["p"]
    except KeyError:
        raise EncryptionError("the store record's KDF parameters are unreadable") from None
    if not all(type(value) is int for value in (n, r, p)):
        raise EncryptionError("the store record's KDF parameters are unreadable")
    if n < 2 or n & (n - 1) or r < 1 or p < 1:
        raise EncryptionError(
            "the store record's KDF parameters are invalid (n must be a power of 2 above 1, "
            "r and p at least 1)"
        )
    if 128 * n * r > _SCRYPT_MAX_MEMORY or n * r * p > _SCRYPT_MAX_WORK:
        raise EncryptionError(
            "the store record's KDF parameters ask for more memory or time than this version "
            f"allows (128*n*r <= {_SCRYPT_MAX_MEMORY}, n*r*p <= {_SCRYPT_MAX_WORK})"
        )
    salt = _unb64(kdf.get("salt"), "the store record's salt")
    if not 8 <= len(salt) <= 1024:
        raise EncryptionError("the store record's salt has an invalid length")
    return n, r, p, salt


def _new_kdf(passphrase: str | None) -> dict[str, Any]:
    if passphrase is None:
        return {"name": "raw"}
    return {
        "name": "scrypt",
        "n": _SCRYPT_N,
        "r": _SCRYPT_R,
        "p": _SCRYPT_P,
        "salt": _b64(os.urandom(16)),
    }


def check_secret(passphrase: object, key: object) -> None:
    """Raise :class:`UsageError` unless ``passphrase`` and ``key`` are a valid choice (at most
    one; a non-empty string; 32 bytes). Never echoes either."""
    if passphrase is not None and key is not None:
        raise UsageError("give a passphrase or a key, not both")
    if passphrase is not None and (not isinstance(passphrase, str) or not passphrase):
        raise UsageError("the passphrase must be a non-empty string")
    if key is not None and (not isinstance(key, bytes) or len(key) != 32):
        raise UsageError("the key must be 32 bytes")


_STORE_AAD = b"agentsession/store-key/v1"


def _session_aad(session_id: str) -> bytes:
    return b"agentsession/session-key/v1\x00" + session_id.encode("utf-8", "surrogatepass")


def _event_aad_prefix(session_id: str) -> bytes:
    """The session's part of the associated data of format 1; the event's seq and type follow
    (``<prefix><seq>\\0<type>``)."""
    return b"agentsession/event/v1\x00" + session_id.encode("utf-8", "surrogatepass") + b"\x00"


def _event_aad_prefix_v2(session_id: str) -> bytes:
    """The session's part of the associated data of format 2; the JSON array of the event's
    clear fields follows (see :meth:`SessionCipher._aad_v2`)."""
    return b"agentsession/event/v2\x00" + session_id.encode("utf-8", "surrogatepass") + b"\x00"


_UTC: Final = _dt.timezone.utc
_AAD_ENCODER = msgspec.json.Encoder()


def _clear_fields(event: Event, seq: int) -> bytes:
    """The JSON array ``[seq, type, agent, user, time, id, meta]`` of an event's fields as they
    are stored in clear (``time`` in UTC, ``YYYY-MM-DDTHH:MM:SS[.ffffff]Z``, so that every
    backend's way of keeping a time gives the same bytes; ``null`` when unset)."""
    moment = event.time
    if moment is not None and moment.tzinfo is not _UTC:
        moment = moment.astimezone(_UTC)
    fields = (seq, event.type, event.agent, event.user, moment, event.id, event.meta)
    try:
        return _AAD_ENCODER.encode(fields)
    except (msgspec.EncodeError, UnicodeEncodeError):
        return encode(fields)  # lone surrogates, which msgspec refuses: the codec writes them


class _Meta(msgspec.Struct):
    get: Callable[[str, str], str | None]
    set: Callable[[str, str, str | None], None]
    add: Callable[[str, str, str], str]  # store unless present; returns what is stored


def unsealed_error(where: str) -> EncryptionError:
    """The error for an event of an encrypted store that is not sealed (``where`` names the
    session, seq and store): it was written without the key, so it is never history."""
    return EncryptionError(
        f"{where}: the event is not sealed, but every event of an encrypted store is (it was "
        "written without the key: injected, or by a store object opened without it)"
    )


def is_sealed(event: Event) -> bool:
    """Whether an event read from storage is sealed (its payload is an encryption box)."""
    # The head only: a plain store's reads ask this of every batch, and payloads can be long.
    return memoryview(event.data)[:_HEAD_LEN].tobytes().startswith((_HEAD_V1, _HEAD_V2))


class KeyRing:
    """A store's keys, unlocked (made by the store when opened with a passphrase or key).

    ``where`` names the store in errors. ``meta_get``, ``meta_set`` and ``meta_add`` are the
    store's meta primitives (``meta_add`` stores a value only when the key has none, and returns
    the value stored). Raises :class:`EncryptionError` for a wrong passphrase or key, before any
    event is read.
    """

    def __init__(
        self,
        where: str,
        meta_get: Callable[[str, str], str | None],
        meta_set: Callable[[str, str, str | None], None],
        meta_add: Callable[[str, str, str], str],
        *,
        passphrase: str | None = None,
        key: bytes | None = None,
    ) -> None:
        check_secret(passphrase, key)
        if passphrase is None and key is None:
            raise UsageError("a key ring needs a passphrase or a key")
        _crypto()
        self._where = where
        self._meta = _Meta(meta_get, meta_set, meta_add)
        self._lock = threading.Lock()
        self._sessions: dict[str, SessionCipher] = {}
        record = meta_get(STORE_KIND, _STORE_KEY)
        if record is None:
            store_key = os.urandom(32)
            record = self._store_record(store_key, passphrase, key)
            stored = meta_add(STORE_KIND, _STORE_KEY, record)
            if stored == record:
                self._store_key = store_key
                return
            record = stored  # another process made the store encrypted first
        self._store_key = self._unwrap(record, passphrase, key)

    def __repr__(self) -> str:
        return f"<KeyRing of {self._where}>"

    @staticmethod
    def _store_record(store_key: bytes, passphrase: str | None, key: bytes | None) -> str:
        kdf = _new_kdf(passphrase)
        kek = _kek(passphrase, key, kdf)
        wrapped = _b64(_seal(kek, store_key, _STORE_AAD))
        return encode({"v": 1, "kdf": kdf, "key": wrapped}).decode()

    def _unwrap(self, record: str, passphrase: str | None, key: bytes | None) -> bytes:
        try:
            data = decode(record.encode())
        except ValueError:
            raise EncryptionError(f"the key record of {self._where} is unreadable") from None
        if not isinstance(data, dict) or data.get("v") != 1 or not isinstance(data.get("kdf"), dict):  # noqa: E501
            raise EncryptionError(f"the key record of {self._where} is unreadable")
        try:
            kek = _kek(passphrase, key, data["kdf"])
        except EncryptionError as exc:
            raise EncryptionError(f"{self._where}: {exc}") from None
        store_key = _open(kek, _unb64(data.get("key"), "the wrapped store key"), _STORE_AAD)
        if store_key is None:
            what = "passphrase" if passphrase is not None else "key"
            raise EncryptionError(f"wrong {what} for the encrypted store {self._where}")
        return store_key

    def change_passphrase(
        self,
        old: str | None,
        new: str | None,
        *,
        old_key: bytes | None = None,
        new_key: bytes | None = None,
    ) -> None:
        """Re-wrap the store key under a new passphrase (or key): one atomic record write,
        whatever the store holds. The old one is checked first."""
        check_secret(old, old_key)
        check_secret(new, new_key)
        if new is None and new_key is None:
            raise UsageError("give the new passphrase (or key)")
        with self._lock:
            record = self._meta.get(STORE_KIND, _STORE_KEY)
            if record is None:
                raise EncryptionError(f"{self._where} has no key record")
            store_key = self._unwrap(record, old, old_key)
            if not hmac.compare_digest(store_key, self._store_key):
                raise EncryptionError(f"the key record of {self._where} changed underneath")
            self._meta.set(STORE_KIND, _STORE_KEY, self._store_record(store_key, new, new_key))

    # -- sessions -------------------------------------------------------------------------

    def field_sealer(self) -> CatalogSealer:
        """The catalog's sealer: keys derived from the store key (HKDF-SHA256), so every
        process that opens the store seals and blinds alike (``docs/catalog.md``)."""
        return CatalogSealer(self._store_key)

    def cipher(self, session_id: str) -> SessionCipher:
        """The session's cipher (its keys are read or made when first needed)."""
        with self._lock:
            cipher = self._sessions.get(session_id)
            if cipher is None:
                cipher = self._sessions[session_id] = SessionCipher(self, session_id)
            return cipher

    def forget(self, session_id: str) -> None:
        """Drop what is cached about a session's keys (it was deleted or shredded)."""
        with self._lock:
            cipher = self._sessions.pop(session_id, None)
        if cipher is not None:
            cipher._drop()

    def shred(self, session_id: str) -> None:
        """Destroy the session's key: its events can never be opened again. The record is
        replaced by a tombstone, so the session also refuses new appends until it is
        deleted."""
        self._meta.set(SESSION_KIND, session_id, SHREDDED)
        self._meta.set(ACTIVE_KIND, session_id, None)
        self.forget(session_id)

    def rotate(self, session_id: str) -> str:
        """Start a new data key for the session's new events; returns its key id. Events
        sealed under earlier ids stay readable."""
        cipher = self.cipher(session_id)
        cipher._session_key(create=True)
        current = self._meta.get(ACTIVE_KIND, session_id) or "k1"
        try:
            number = int(current[1:]) + 1
        except ValueError:
            number = 2
        kid = f"k{number}"
        self._meta.set(ACTIVE_KIND, session_id, kid)
        cipher._active = kid
        return kid

    def _wrap_session_key(self, session_id: str, key: bytes) -> str:
        return _b64(_seal(self._store_key, key, _session_aad(session_id)))

    def _shredded_error(self, session_id: str) -> SessionShredded:
        return SessionShredded(
            f"session {session_id!r} in {self._where} was shredded: its key is destroyed"
        )

    def _unwrap_session_key(self, session_id: str, record: str) -> bytes:
        if record == SHREDDED:
            raise self._shredded_error(session_id)
        key = _open(
            self._store_key, _unb64(record, "a wrapped session key"), _session_aad(session_id)
        )
        if key is None:
            raise EncryptionError(
                f"the key of session {session_id!r} in {self._where} does not open"
            )
        return key


class SessionCipher:
    """Seals and opens one session's events (made by :meth:`KeyRing.cipher`)."""

    def __init__(self, ring: KeyRing, session_id: str) -> None:
        self._ring = ring
        self._id = session_id
        self._key: bytes | None = None
        self._active: str | None = None
        self.seq_offset = 0
        """What to take off an event's seq for its associated data: a branch's events are
        sealed at the seqs its own log stores them at, which its reads shift past the
        history it shares (:class:`~agentsession.events.SessionBranch`)."""
        self._aeads: dict[str, Any] = {}
        self._aad_prefix = _event_aad_prefix(session_id)
        self._aad_prefix_v2 = _event_aad_prefix_v2(session_id)
        self._kinds: dict[str, bytes] = {}

    def __repr__(self) -> str:
        return f"<SessionCipher {self._id!r}>"

    def _drop(self) -> None:
        self._key = None
        self._active = None
        self._aeads.clear()

    # -- keys given by a plan -----------------------------------------------------------------
    # The session pipeline (agentsession.core) reads and records the session's key with
    # storage operations of its plans (so that the async driver can await them), then gives
    # the cipher what it read: needs_key, new_key_record, prime, and open(primed=True), which
    # never reads the store's meta itself.

    def forget_key(self) -> None:
        """Forget the cached key (the log was opened again, perhaps in a new life: its key
        is read afresh)."""
        self._drop()

    @property
    def keyed(self) -> bool:
        """Whether the session's key is cached (given by :meth:`prime`, or read)."""
        return self._key is not None

    def needs_key(self, *, sealing: bool) -> bool:
        """Whether :meth:`prime` must be given the session's key record first (and, to seal,
        the session's active key id) before :meth:`open` with ``primed=True`` or
        :meth:`seal`."""
        return self._key is None or (sealing and self._active is None)

    def new_key_record(self) -> str:
        """A new random session key, wrapped by the store key: what to record as the session's
        key (``meta_add`` of ``SESSION_KIND``) when it has none."""
        ring = self._ring
        return ring._wrap_session_key(self._id, os.urandom(32))

    def prime(self, record: str | None, active: str | None = None, *, sealing: bool) -> None:
        """Take the session's key ``record`` as read from the store's meta (None: the session
        has none; ignored when a key is cached) and, when ``sealing``, its active key id
        ``active`` (None: ``k1``). Raises
        :class:`SessionShredded` for a shredded session and :class:`EncryptionError` for a
        record that does not open."""
        if record is not None and self._key is None:
            self._key = self._ring._unwrap_session_key(self._id, record)
        if sealing:
            self._active = active or "k1"

    def _session_key(self, *, create: bool) -> bytes | None:
        if self._key is not None:
            return self._key
        ring, sid = self._ring, self._id
        record = ring._meta.get(SESSION_KIND, sid)
        if record is None:
            if not create:
                return None
            key = os.urandom(32)
            record = ring._meta.add(SESSION_KIND, sid, ring._wrap_session_key(sid, key))
        self._key = ring._unwrap_session_key(sid, record)
        return self._key

    def shredded(self) -> SessionShredded:
        """Forget the cached key, and the error for a session shredded underneath (a
        :data:`SHRED_NOTICE` was read from its log)."""
        self._drop()
        return self._ring._shredded_error(self._id)

    def _aead(self, kid: str, *, create: bool) -> Any:
        aead = self._aeads.get(kid)
        if aead is None:
            key = self._session_key(create=create)
            if key is None:
                raise self._no_key()
            from cryptography.hazmat.primitives import hashes
            from cryptography.hazmat.primitives.kdf.hkdf import HKDF

            info = b"agentsession/data-key/" + kid.encode()
            data_key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(key)
            aead = self._aeads[kid] = _crypto().AESGCM(data_key)
        return aead

    def _no_key(self) -> EncryptionError:
        return EncryptionError(
            f"session {self._id!r} in {self._ring._where} has no key (deleted or never "
            "written with encryption)"
        )

    def _aad_v2(self, event: Event, seq: int) -> bytes:
        """The associated data of format 2: the session id and every field of ``event`` stored
        in clear, with ``seq`` (the session's part, :func:`_event_aad_prefix_v2`, is computed
        once)."""
        return self._aad_prefix_v2 + _clear_fields(event, seq)

    def _aad(self, seq: int, kind: str) -> bytes:
        """The associated data of format 1 for the event at ``seq`` of type ``kind`` (the
        session's part, :func:`_event_aad_prefix`, is computed once)."""
        kind_bytes = self._kinds.get(kind)
        if kind_bytes is None:
            kind_bytes = self._kinds[kind] = kind.encode("utf-8", "surrogatepass")
        return b"%s%d\x00%s" % (self._aad_prefix, seq, kind_bytes)

    def seal(self, event: Event, seq: int) -> Event:
        """``event`` (plaintext, as the append pipeline prepared it) as stored at ``seq``."""
        kid = self._active
        if kid is None:
            self._session_key(create=True)
            kid = self._active = self._ring._meta.get(ACTIVE_KIND, self._id) or "k1"
        aead = self._aead(kid, create=True)
        meta, user = event.meta, event.user
        if meta or user:
            tail = b",%s,%s]" % (encode(meta) if meta else b"{}", encode(user))
        else:
            tail = _PLAIN_TAIL
        plain = b"[%s%s" % (bytes(event.data), tail)
        # What is stored in clear: meta and user go into the box, so they are stored empty.
        clear = _replace(event, meta={}, user="") if meta or user else event
        nonce = _nonce()
        box = nonce + aead.encrypt(nonce, plain, self._aad_v2(clear, seq - self.seq_offset))
        data = _BOX_ENCODER.encode(_SealedBox(SEALED_FORMAT, kid, box))  # base64 in C code
        # The seq stays the caller's (0): the backend writes the seq it stores the event at,
        # which the append pipeline makes sure is ``seq``.
        return _replace(clear, data=msgspec.Raw(data))

    def open(self, event: Event, *, primed: bool = False) -> Event:
        """The plaintext of a stored event. Raises :class:`EncryptionError` naming the session
        and seq when the event is not sealed (in an encrypted store every event is: see
        :func:`unsealed_error`) or its box does not open (tampered with, moved, or any field
        stored in clear changed).

        ``primed``: the key is the one :meth:`prime` was given, and the store's meta is not
        read (a box that does not open with it is an error: the caller reads the key again
        and retries, as a plan does); otherwise a box that does not open with the cached key
        is tried once more with the key read again (it may be an old life's)."""
        raw = bytes(event.data)
        if raw.startswith(_HEAD_V2):
            version = 2
        elif raw.startswith(_HEAD_V1):
            version = 1
        else:
            raise unsealed_error(self._where(event))
        # One decode reads the envelope and its base64 (in msgspec's C code).
        try:
            envelope = _BOX.decode(raw)
        except msgspec.DecodeError:
            problem = f"{self._where(event)}: the sealed payload is malformed or not base64"
            raise EncryptionError(problem) from None
        kid, box = envelope.kid, envelope.box
        stored_seq = event.seq - self.seq_offset
        if version == 2:
            aad = self._aad_v2(event, stored_seq)
        elif event.meta or event.user:
            # Format 1 sealed meta and user too, and stored them empty: set ones were added.
            raise self._not_opening(event)
        else:
            aad = self._aad(stored_seq, event.type)
        if primed:
            if self._key is None:
                raise self._no_key()
            plain = self._decrypt(kid, box, aad)
        else:
            plain = self._decrypt(kid, box, aad)
            if plain is None and self._key is not None:
                self._drop()  # the cached key may be an old life's: read it again
                plain = self._decrypt(kid, box, aad)
        if plain is None:
            raise self._not_opening(event)
        if plain.endswith(_PLAIN_TAIL) and plain[:1] == b"[":
            return _replace(event, data=msgspec.Raw(plain[1 : -len(_PLAIN_TAIL)]))
        try:
            data, meta, user = _PLAIN.decode(plain)
        except msgspec.DecodeError:
            # Lone surrogates, which msgspec refuses: the codec reads them.
            try:
                value, meta, user = decode(plain)
                data = msgspec.Raw(encode(value))
            except (ValueError, TypeError):
                problem = f"{self._where(event)}: the opened payload is malformed"
                raise EncryptionError(problem) from None
        return _replace(event, data=data, meta=meta, user=user)

    def _where(self, event: Event) -> str:
        return f"session {self._id!r} seq {event.seq} in {self._ring._where}"

    def _not_opening(self, event: Event) -> EncryptionError:
        return EncryptionError(
            f"{self._where(event)}: the sealed payload does not open (tampered, truncated, "
            "moved from another session or position, or a field stored in clear changed)"
        )

    def _value_aad(self, kind: str) -> bytes:
        return b"agentsession/meta\x00%s\x00%s" % (
            self._id.encode("utf-8", "surrogatepass"),
            kind.encode("utf-8", "surrogatepass"),
        )

    def seal_value(self, kind: str, text: str) -> str:
        """A meta value of the session (its record, its children index) sealed under the
        session's key, bound to the session and ``kind``: shredding the session makes it
        unreadable too."""
        kid = self._active
        if kid is None:
            self._session_key(create=True)
            kid = self._active = self._ring._meta.get(ACTIVE_KIND, self._id) or "k1"
        nonce = os.urandom(_NONCE)
        plain = text.encode("utf-8", "surrogatepass")
        box = nonce + self._aead(kid, create=True).encrypt(nonce, plain, self._value_aad(kind))
        return f'{{"sealed":1,"kid":"{kid}","box":"{_b64(box)}"}}'

    def open_value(self, kind: str, text: str) -> str:
        """The plaintext of a value :meth:`seal_value` made. Raises :class:`EncryptionError`
        when it does not open, or is not sealed (every such value of an encrypted store is:
        one in plaintext was written without the key)."""
        where = f"the {kind} entry of session {self._id!r} in {self._ring._where}"
        if not text.startswith('{"sealed":1,'):
            raise EncryptionError(
                f"{where} is not sealed, but every one of an encrypted store is (it was written "
                "without the key)"
            )
        try:
            envelope = msgspec.json.decode(text, type=_Envelope)
        except msgspec.DecodeError:
            raise EncryptionError(f"{where} is malformed") from None
        box = _unb64(envelope.box, where)
        plain = self._decrypt(envelope.kid, box, self._value_aad(kind))
        if plain is None and self._key is not None:
            self._drop()
            plain = self._decrypt(envelope.kid, box, self._value_aad(kind))
        if plain is None:
            raise EncryptionError(f"{where} does not open (tampered or moved)")
        return plain.decode("utf-8", "surrogatepass")

    def _decrypt(self, kid: str, box: bytes, aad: bytes) -> bytes | None:
        return _open_box(self._aead(kid, create=False), box, aad)


_PLAIN = msgspec.json.Decoder(tuple[msgspec.Raw, dict[str, Any], str])


class _Envelope(msgspec.Struct):
    sealed: int
    kid: str
    box: str


class _SealedBox(msgspec.Struct):
    """A sealed event's payload, its box decoded from base64."""

    sealed: int
    kid: str
    box: bytes


_BOX = msgspec.json.Decoder(_SealedBox)
_BOX_ENCODER = msgspec.json.Encoder()


class CatalogSealer:
    """Seals an encrypted store's catalog fields and blinds its search words
    (:class:`agentsession.listing.FieldSealer`), with two keys derived from the store key.

    * ``seal_field``: AES-SIV (deterministic authenticated encryption, RFC 5297) of the value:
      equal values seal to equal text, so the catalog can match a filter against sealed
      values without opening them; the text reveals which sessions share a value (and a
      value's length), nothing of the value itself.
    * ``blind``: HMAC-SHA256 of a normalised word, cut to 96 bits, hex: equal words give equal
      tokens within the store (and only there: another store's key gives others); the index
      reveals how often each token occurs, and which documents share one.
    """

    __slots__ = ("_mac_key", "_siv")

    def __init__(self, store_key: bytes) -> None:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF

        def derive(info: bytes, length: int) -> bytes:
            return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=info).derive(
                store_key
            )

        self._siv = _crypto().AESSIV(derive(b"agentsession/catalog-fields", 64))
        self._mac_key = derive(b"agentsession/search-tokens", 32)

    def __repr__(self) -> str:
        return "<CatalogSealer>"

    def seal_field(self, value: str) -> str:
        """``value`` sealed deterministically, as ``~`` and URL-safe base64."""
        plain = value.encode("utf-8", "surrogatepass")
        box = self._siv.encrypt(plain, [b"agentsession/catalog-field"])
        return "~" + base64.urlsafe_b64encode(box).decode().rstrip("=")

    def open_field(self, sealed: str) -> str:
        """The value :meth:`seal_field` sealed (:class:`EncryptionError` when it does not
        open: tampered with, or sealed by another store)."""
        if not sealed.startswith("~"):
            raise EncryptionError("a catalog field of an encrypted store is not sealed")
        raw = sealed[1:]
        try:
            box = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
            plain: bytes = self._siv.decrypt(box, [b"agentsession/catalog-field"])
            return plain.decode("utf-8", "surrogatepass")
        except Exception:
            raise EncryptionError(
                "a sealed catalog field does not open with this store's key"
            ) from None

    def blind(self, word: str) -> str:
        """The keyed token of a normalised word (24 hex digits)."""
        return hmac.new(
            self._mac_key, word.encode("utf-8", "surrogatepass"), "sha256"
        ).hexdigest()[:24]

