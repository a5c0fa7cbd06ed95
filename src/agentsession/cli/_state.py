"""Opening stores for the commands: URL checks, the key of an encrypted store, "did you
mean" suggestions, and :class:`State`, what the commands share."""

from __future__ import annotations

import difflib
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._names import unsafe_name
from ..crypto import EncryptionError
from ..errors import SessionNotFound, StoreUnavailable, UsageError
from ..session import BaseSession
from ..store import BaseStore, open_store
from ._output import _LogHandler

DEFAULT_STORE = "./.agentsession"
"""The store a command uses without ``--store`` or ``AGENTSESSION_STORE``."""

PASSPHRASE_ENV = "AGENTSESSION_PASSPHRASE"
"""The environment variable holding the passphrase of the store (``--key-file`` wins)."""
DST_PASSPHRASE_ENV = "AGENTSESSION_DST_PASSPHRASE"
"""The environment variable holding the passphrase of ``copy``'s destination
(``--dst-key-file`` wins)."""


class NoStore(StoreUnavailable):
    """There is no store at the URL a command reads from (nothing was created there)."""


# -- stores -----------------------------------------------------------------------------------

_SQLITE_MAGIC = b"SQLite format 3\x00"
_SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")


def _is_path(url: str) -> bool:
    """Whether ``open_store`` reads ``url`` as a directory path (as it decides)."""
    scheme, sep, _ = url.partition(":")
    return not sep or len(scheme) == 1 or "/" in scheme or "\\" in scheme


def _check_url(url: str) -> None:
    """Refuse what the command line can never use: ``memory:`` (each process has its own,
    always empty) and a SQLite file given as a path (a directory is expected there)."""
    scheme = url.strip().partition(":")[0].lower()
    if not _is_path(url) and scheme == "memory":
        raise UsageError(
            "the command line cannot use a memory: store: it lives in one process's memory, so "
            "every command would see a new, empty one. Use a directory, sqlite:///file.db or "
            "postgresql://..."
        )
    if _is_path(url) and os.path.isfile(url):
        try:
            with open(url, "rb") as f:
                head = f.read(len(_SQLITE_MAGIC))
        except OSError:
            return
        if head == _SQLITE_MAGIC:
            raise UsageError(
                f"{url} is a SQLite database, and a plain path names a JSONL store directory; "
                f"use --store sqlite:///{url}"
            )


# -- keys of encrypted stores -----------------------------------------------------------------

_HEX_KEY = re.compile(rb"[0-9a-fA-F]{64}")
_KEY_FILE_LIMIT = 4096


@dataclass(frozen=True)
class Secret:
    """What an encrypted store is opened with: a passphrase, a raw 32-byte key, or nothing.

    ``source`` says where it came from, for messages; ``repr`` never shows the secret."""

    passphrase: str | None = field(default=None, repr=False)
    key: bytes | None = field(default=None, repr=False)
    source: str = ""

    def __bool__(self) -> bool:
        return self.passphrase is not None or self.key is not None

    def options(self) -> dict[str, Any]:
        """The ``open_store`` keyword arguments (``passphrase=`` or ``key=``, or none)."""
        if self.key is not None:
            return {"key": self.key}
        if self.passphrase is not None:
            return {"passphrase": self.passphrase}
        return {}

    @property
    def kind(self) -> str:
        """``"passphrase"`` or ``"key"`` (a raw key)."""
        return "key" if self.key is not None else "passphrase"


def read_key_file(path: str) -> Secret:
    """The passphrase or key in the file at ``path``: 64 hex digits (and an optional newline)
    are a raw 32-byte key; anything else is a passphrase, UTF-8 text without its trailing
    newline. Raises :class:`UsageError` (naming the file, never its content) when the file
    cannot be read, is empty, is over 4 KB or is not UTF-8."""
    where = f"the key file {path}"
    try:
        with open(path, "rb") as f:
            data = f.read(_KEY_FILE_LIMIT + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {where}: {exc.strerror or type(exc).__name__}") from None
    if len(data) > _KEY_FILE_LIMIT:
        raise UsageError(f"{where} is over 4 KB: it should hold a passphrase or a key")
    if data.endswith(b"\r\n"):
        data = data[:-2]
    elif data.endswith(b"\n"):
        data = data[:-1]
    if not data:
        raise UsageError(f"{where} is empty: it should hold a passphrase or a key")
    if _HEX_KEY.fullmatch(data):
        return Secret(key=bytes.fromhex(data.decode("ascii")), source=where)
    try:
        passphrase = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(
            f"{where} is neither UTF-8 text (a passphrase) nor 64 hex digits (a raw key)"
        ) from None
    return Secret(passphrase=passphrase, source=where)


def secret_from(key_file: str | None, env: str) -> Secret:
    """The secret a command was given: the key file's, else the environment variable's (an
    empty variable counts as unset), else none."""
    if key_file is not None:
        return read_key_file(key_file)
    passphrase = os.environ.get(env)
    if passphrase:
        return Secret(passphrase=passphrase, source=f"the environment variable {env}")
    return Secret()


def _open_store(url: str, secret: Secret, hint: str, **options: Any) -> BaseStore:
    """``open_store`` with ``secret``; when the store turns out to be encrypted and no secret
    was given, the error says how to give one on the command line (``hint``)."""
    try:
        return open_store(url, **options, **secret.options())
    except EncryptionError as exc:
        if secret:
            raise
        raise EncryptionError(f"{exc}; on the command line, give it with {hint}") from None


_KEY_HINT = f"--key-file PATH or {PASSPHRASE_ENV}"
_DST_KEY_HINT = f"--dst-key-file PATH or {DST_PASSPHRASE_ENV}"


def open_existing(
    url: str,
    *,
    passphrase: str | None = None,
    key: bytes | None = None,
    hint: str = _KEY_HINT,
    read_only: bool = False,
) -> BaseStore:
    """The store at ``url``, which must exist (nothing is created): :class:`NoStore` saying
    "no store at ..." otherwise.

    ``read_only`` (the commands that only read) also changes no schema: an older one is read
    as it is where the backend can, or refused with
    :class:`~agentsession.errors.StoreUnavailable` saying to run ``agentsession migrate``.

    With ``passphrase`` or ``key`` the store must be encrypted: an encrypted store is opened
    with it (:class:`~agentsession.errors.EncryptionError` when it is wrong), while a store
    that is not encrypted raises :class:`UsageError`, so that a command that only reads never
    makes a store encrypted. Without either, opening an encrypted store raises
    :class:`~agentsession.errors.EncryptionError` saying how to give the key (``hint``)."""
    _check_url(url)
    secret = Secret(passphrase=passphrase, key=key)
    options: dict[str, Any] = {"read_only": True} if read_only else {"create": False}
    try:
        plain = _open_store(url, Secret(), hint, **options)
    except EncryptionError:
        if not secret:
            raise
        return _open_store(url, secret, hint, **options)
    except StoreUnavailable as exc:
        message = str(exc)
        if not message.startswith("no store at "):
            raise
        if _is_path(url) and url.lower().endswith(_SQLITE_SUFFIXES) and not os.path.exists(url):
            message += f"; for a SQLite store, use sqlite:///{url}"
        raise NoStore(message) from None
    if secret:
        location = plain.location
        plain.close()
        raise UsageError(
            f"the store {location} is not encrypted, but a {secret.kind} was given: leave it "
            f"out ({hint}) to read this store; to encrypt it, copy it into a new store "
            "(agentsession copy SRC DST --dst-key-file PATH)"
        )
    return plain


def _fold(session_id: str) -> str:
    folded = session_id.casefold()
    if folded.endswith(".jsonl"):
        folded = folded[: -len(".jsonl")]
    return folded.replace("_", ":")


def suggest(store: BaseStore, session_id: str) -> str | None:
    """The id of ``store`` that ``session_id`` most likely meant: the same but for case, ``_``
    for ``:`` or a ``.jsonl`` suffix (the file-name form), or else a close spelling."""
    ids = [info.id for info in store.list()]
    if not ids:
        return None
    stem = session_id[: -len(".jsonl")] if session_id.endswith(".jsonl") else session_id
    decoded = unsafe_name(stem)
    if decoded is not None and decoded in ids and decoded != session_id:
        return decoded
    by_fold: dict[str, str] = {}
    for sid in ids:
        by_fold.setdefault(_fold(sid), sid)
    folded = _fold(session_id)
    if folded in by_fold and by_fold[folded] != session_id:
        return by_fold[folded]
    close = difflib.get_close_matches(folded, list(by_fold), n=1, cutoff=0.8)
    return by_fold[close[0]] if close else None


def _not_found(store: BaseStore, session_id: str, more: int = 0) -> SessionNotFound:
    message = f"no session {session_id!r} in {store.location}"
    if more:
        message += f" (nor {more} more of the ids given)"
    hint = suggest(store, session_id)
    if hint is not None:
        message += f"; did you mean {hint!r}?"
    return SessionNotFound(session_id, message)


def _check_exist(store: BaseStore, ids: Sequence[str]) -> None:
    """Raise :class:`SessionNotFound` for the first id that does not exist (counting the
    others), before anything is done to any of them."""
    missing = [sid for sid in ids if not store.exists(sid)]
    if missing:
        raise _not_found(store, missing[0], more=len(missing) - 1)


def _outermost(
    ids: Sequence[str], subtrees: Mapping[str, Mapping[str, str]]
) -> tuple[list[str], dict[str, str], list[str]]:
    """The ids given but those inside the subtree (child to parent, as
    :func:`~agentsession.children.descendants` gives it) of another id given, which go with
    that one; the parent of every session below them; and every session, each id followed by
    its subtree."""
    inside = {child for sid in ids for child in subtrees[sid]}
    outer = [sid for sid in ids if sid not in inside]
    parent_of = {child: parent for sid in outer for child, parent in subtrees[sid].items()}
    everything = [item for sid in outer for item in (sid, *subtrees[sid])]
    return outer, parent_of, everything


@dataclass
class State:
    """What the commands share: the store URL, opened on first use, and where its key comes
    from (read when a command opens the store)."""

    url: str
    debug: bool
    key_file: str | None = None
    _store: BaseStore | None = field(default=None, repr=False)
    _log: _LogHandler | None = field(default=None, repr=False)

    def debug_on(self) -> None:
        """Turn ``--debug`` on after the group started (given after the command)."""
        self.debug = True
        if self._log is not None:
            self._log.debug = True
            self._log.setLevel(logging.DEBUG)
            logging.getLogger().setLevel(logging.DEBUG)

    def secret(self) -> Secret:
        """The store's passphrase or key: ``--key-file``, else ``AGENTSESSION_PASSPHRASE``."""
        return secret_from(self.key_file, PASSPHRASE_ENV)

    def store(self, *, read_only: bool = False) -> BaseStore:
        """The store, opened once; it must exist (no command but the writes creates one).
        Every command that reads the global store opens it here, with its key; a command
        that only reads passes ``read_only`` (no schema is migrated: see
        :func:`open_existing`)."""
        if self._store is None:
            self._store = open_existing(
                self.url, **self.secret().options(), read_only=read_only
            )
        return self._store

    def open_for_writing(self, url: str) -> BaseStore:
        """The store at ``url`` for a write (created when missing), opened with the global
        key: a new or empty store given a key becomes encrypted."""
        _check_url(url)
        return _open_store(url, self.secret(), _KEY_HINT)

    def existing(self, session_id: str, *, read_only: bool = False) -> BaseSession:
        """A session that has events, or :class:`SessionNotFound` (with a suggestion);
        ``read_only`` as for :meth:`store`."""
        store = self.store(read_only=read_only)
        if not store.exists(session_id):
            raise _not_found(store, session_id)
        return store.get(session_id)

    def close(self) -> None:
        """Close the store if it was opened."""
        if self._store is not None:
            self._store.close()
            self._store = None
