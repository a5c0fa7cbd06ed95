"""agentkit's layout of a JSONL sessions directory, as a strategy the JSONL store calls.

:data:`AGENTKIT_LINES` is agentkit's line dialect (lines through
:mod:`agentsession.interop.agentkit`, which is imported on first use); :data:`AGENTKIT_LAYOUT`
is the whole layout of ``dialect="agentkit"``: agentkit's file names (:func:`agentkit_file_name`,
not injective, so the id is recorded beside each file), its lines for new files, and its own
files for the identity mappings (:class:`AgentkitMeta`). See ``docs/interop.md``.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as _dt
import errno
import logging
import os
import re
import stat
import threading
from collections.abc import Callable, Sequence
from typing import Literal

import msgspec

from .._files import O_CLOEXEC, O_DIRECTORY, O_NOFOLLOW, O_NONBLOCK, atomic_write, compare_and_set
from ..codec import decode, encode
from ..errors import CorruptLogError, StorageError, StoreUnavailable, UsageError
from ..events import Event
from .jsonl_layout import SUFFIX, LineDialect, MetaStore

__all__ = [
    "AGENTKIT_LAYOUT",
    "AGENTKIT_LINES",
    "CLI_CURRENT_LINK",
    "LINE_START",
    "AgentkitLayout",
    "AgentkitLines",
    "AgentkitMeta",
    "agentkit_file_name",
    "detect_dialect",
]

log = logging.getLogger("agentsession.backends.jsonl")

LINE_START = b'{"ID":'
"""The first bytes of every agentkit line (``json.Marshal`` of its ``SessionEvent``)."""

CLI_CURRENT_LINK = "cli_current.jsonl"
"""agentkit's CLI pointer (``CLICurrentLinkName``): in the agentkit dialect, a symbolic link in
the store directory whose target is the file name of the session the command line uses next."""

_NAME = re.compile(r"[^A-Za-z0-9._-]")
_SIDECARS = {"active": ("current.json", "sessionId"), "bind": ("agent.json", "agentId")}
# The entry key or session id an agentkit sidecar file was written for (agentkit ignores it):
# agentkit's names are not injective, so it tells two colliding keys apart.
_CLAIM = "agentsessionKey"


def agentkit_file_name(session_id: str) -> str:
    """agentkit's file name (without ``.jsonl``) for a session id: every character outside
    ``[A-Za-z0-9._-]`` becomes ``_``. Ids agentkit refuses (empty, containing ``..``) and names
    too long for a file are refused with :class:`UsageError`."""
    if not session_id or ".." in session_id:
        raise UsageError(
            f"session id {session_id!r} cannot be an agentkit file name (empty, or contains '..')"
        )
    name = _NAME.sub("_", session_id)
    if len(name.encode()) + len(SUFFIX) > 255:
        raise UsageError(f"session id {session_id[:40]!r}... is too long for an agentkit file name")
    return name


# -- lines ------------------------------------------------------------------------------------


class _LineTime(msgspec.Struct, gc=False):
    """The one field of an agentkit line that ``list()`` decodes."""

    created_at: str | None = msgspec.field(default=None, name="CreatedAt")


_line_time = msgspec.json.Decoder(_LineTime)


class AgentkitLines:
    """agentkit's line dialect: lines carry their seqs in the middle, so a batch is encoded
    under the file lock, and has no batch flag (see ``docs/interop.md``)."""

    marker_type = b'"Type":"session/compaction"'
    """How a compaction marker's type reads inside an agentkit line."""
    marker_head = re.compile(
        rb'\{"ID":"(?:[^"\\]|\\.)*","Seq":\d+,"SessionID":"(?:[^"\\]|\\.)*",'
        rb'"AgentID":"(?:[^"\\]|\\.)*",\Z'
    )
    """An agentkit line's head up to its ``Type``."""
    one_line: Callable[[Event], bytes] | None = None
    """None: appends to agentkit files take the general path (the id claim, the encryption
    check)."""

    def encode_early(self, events: Sequence[Event]) -> list[bytes] | None:
        """None: an agentkit line needs its seq."""
        return None

    def encode_batch(
        self, events: Sequence[Event], early: list[bytes] | None, first: int, session_id: str
    ) -> bytes:
        """The batch as agentkit lines (``early`` is not used)."""
        from .agentkit import encode_agentkit_line

        replace = msgspec.structs.replace
        return b"".join(
            encode_agentkit_line(replace(event, seq=first + i), session_id) + b"\n"
            for i, event in enumerate(events)
        )

    def check_append(self, session_id: str, path: str, encrypted: bool) -> None:
        """An encrypted store does not append to an agentkit log."""
        if encrypted:
            raise UsageError(
                f"session {session_id!r}: {path} is an agentkit log, which agentkit reads as "
                "plain lines; an encrypted store does not append to it (import it into the "
                "store instead: agentsession import)"
            )

    def decode_line(self, line: bytes) -> Event:
        """One agentkit line as an event."""
        from .agentkit import decode_agentkit_line

        return decode_agentkit_line(line.rstrip(b"\r\n"))

    def line_time(self, line: bytes) -> _dt.datetime | None:
        """The line's ``CreatedAt`` (None for Go's zero time)."""
        from .agentkit import _time_in

        try:
            text = _line_time.decode(line).created_at
            return None if text is None else _time_in(text)
        except msgspec.DecodeError:
            return self.decode_line(line).time  # what msgspec refuses (lone surrogates)


AGENTKIT_LINES = AgentkitLines()
"""agentkit's line dialect (stateless: one object serves every file)."""


# -- the layout -------------------------------------------------------------------------------


class AgentkitLayout:
    """``dialect="agentkit"``: files named as agentkit names them (the id recorded beside
    each, as the naming is not injective), new files in agentkit's lines, the active-session
    map, the agent binding and the CLI pointer in agentkit's own files."""

    dialect: Literal["agentkit"] = "agentkit"
    """The store option that chooses this layout."""
    new_lines: LineDialect = AGENTKIT_LINES
    """New files are written in agentkit's lines."""
    encryption_refused: str | None = (
        "the agentkit dialect cannot be encrypted: agentkit reads plain lines only"
    )
    """agentkit reads plain lines only."""
    injective = False
    """Two ids may name one file: sessions are shared by id."""

    def file_stem(self, session_id: str) -> str:
        """:func:`agentkit_file_name`."""
        return agentkit_file_name(session_id)

    def check_session(
        self, session_id: str, path: str, claimed_by: Callable[[str], str | None]
    ) -> None:
        """Refuse the id of the CLI pointer's name, and an id whose file another id claimed."""
        if os.path.basename(path) == CLI_CURRENT_LINK:
            raise UsageError(
                f"session id {session_id!r} maps to {CLI_CURRENT_LINK}, agentkit's CLI "
                "pointer, in the agentkit dialect; choose another id"
            )
        claimed = claimed_by(path)
        if claimed is not None and claimed != session_id:
            raise UsageError(
                f"session ids {claimed!r} and {session_id!r} map to the same agentkit file "
                f"{os.path.basename(path)}; agentkit's naming cannot keep them apart, so "
                f"{session_id!r} is refused rather than merged into {claimed!r}"
            )

    def records_id(self, path: str) -> bool:
        """Always: the id claims the name."""
        return True

    def claims(self, lines: LineDialect) -> bool:
        """An agentkit file appended to records its id once."""
        return lines is AGENTKIT_LINES

    def id_of(self, path: str, claimed_by: Callable[[str], str | None]) -> str | None:
        """The session id of a file: the id recorded beside it; else the ``SessionID`` of its
        first line when agentkit names that id with this file (agentkit's own writers leave
        it empty, other writers of its format fill it in); else the CLI id the name spells
        (``cli_default`` is ``cli:default``, ``cli_<rest>`` is ``cli:<rest>``, agentkit's
        ``NewCLISessionID`` ids); else the name itself, which opens the same file."""
        recorded = claimed_by(path)
        if recorded:
            return recorded
        stem = os.path.basename(path)[: -len(SUFFIX)]
        written = _first_session_id(path)
        if written and _NAME.sub("_", written) == stem and ".." not in written:
            return written
        if stem.startswith("cli_") and len(stem) > 4:
            return "cli:" + stem[4:]
        return stem

    def meta(
        self,
        files: MetaStore,
        root: str,
        claimed_by: Callable[[str], str | None],
        record_id: Callable[[str, str], None],
    ) -> MetaStore:
        """:class:`AgentkitMeta` over ``files``."""
        return AgentkitMeta(files, root, claimed_by, record_id)


AGENTKIT_LAYOUT = AgentkitLayout()
"""agentkit's layout (stateless: one object serves every store)."""


class _LineSession(msgspec.Struct, gc=False):
    """The one field of an agentkit line :meth:`AgentkitLayout.id_of` reads."""

    session_id: str = msgspec.field(default="", name="SessionID")


_line_session = msgspec.json.Decoder(_LineSession)
_HEAD_BYTES = 4096  # the first line's SessionID comes before its payload


def _first_session_id(path: str) -> str:
    """The ``SessionID`` of a file's first agentkit line (``""`` when there is none)."""
    try:
        fd = os.open(path, os.O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
    except OSError:
        return ""
    try:
        head = os.pread(fd, _HEAD_BYTES, 0)
    except OSError:
        return ""
    finally:
        os.close(fd)
    if not head.startswith(LINE_START):
        return ""
    match = re.match(rb'\{"ID":"(?:[^"\\]|\\.)*","Seq":\d+,"SessionID":("(?:[^"\\]|\\.)*")', head)
    if match is None:
        return ""
    try:
        return _line_session.decode(b'{"SessionID":' + match.group(1) + b"}").session_id
    except msgspec.DecodeError:
        return ""


# -- telling a directory agentkit writes from one agentsession writes --------------------------

DETECT_FILES = 64
"""Session files whose first line :func:`detect_dialect` reads at most."""


def detect_dialect(directory: str | os.PathLike[str]) -> Literal["agentsession", "agentkit"]:
    """The dialect a JSONL store over ``directory`` opens in when none is given:
    ``"agentkit"`` when the directory holds agentkit's files and none of agentsession's
    lines (the first line of a session file starting ``{"ID":``, the CLI pointer
    ``cli_current.jsonl``, or a sidecar directory holding ``current.json`` or
    ``agent.json``), ``"agentsession"`` otherwise: a new or empty directory, one with
    agentsession's lines (``{"seq":``), and one holding both. Reads the first bytes of at most
    :data:`DETECT_FILES` session files."""
    root = os.fspath(directory)
    agentkit = False
    try:
        entries = os.scandir(root)
    except OSError:
        return "agentsession"  # nothing there yet, or unreadable: the open says why
    read = 0
    sidecars: builtins.list[str] = []
    with entries:
        for entry in entries:
            name = entry.name
            if name.startswith("."):
                continue
            try:
                if name == CLI_CURRENT_LINK and entry.is_symlink():
                    agentkit = True
                    continue
                if entry.is_dir(follow_symlinks=False):
                    sidecars.append(entry.path)
                    continue
                if not name.endswith(SUFFIX) or read >= DETECT_FILES:
                    continue
                if not entry.is_file(follow_symlinks=False):
                    continue
            except OSError:
                continue
            read += 1
            head = _head(entry.path)
            if head.startswith(b'{"seq":'):
                return "agentsession"
            if head.startswith(LINE_START):
                agentkit = True
    if not agentkit:
        agentkit = any(
            os.path.isfile(os.path.join(path, sidecar))
            for path in sidecars[:DETECT_FILES]
            for sidecar in ("current.json", "agent.json")
        )
    return "agentkit" if agentkit else "agentsession"


def _head(path: str) -> bytes:
    """The first bytes of a file (blank leading lines skipped; ``b""`` when unreadable)."""
    try:
        fd = os.open(path, os.O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
    except OSError:
        return b""
    try:
        return os.pread(fd, 64, 0).lstrip()
    except OSError:
        return b""
    finally:
        os.close(fd)


# -- agentkit's files for the identity mappings -----------------------------------------------


class AgentkitMeta:
    """The meta entries of a store in agentkit's layout: the active-session map and agent
    binding in a directory per key, ``<store>/<agentkit name>/current.json``
    ``{"sessionId":...}`` and ``.../agent.json`` ``{"agentId":...}``; the CLI pointer as the
    symbolic link ``<store>/cli_current.jsonl -> <agentkit name>.jsonl``; every other entry
    in ``files``. Every access goes through descriptors relative to the store directory and
    never follows a symbolic link, so a planted link cannot lead a read or a write out of the
    store."""

    def __init__(
        self,
        files: MetaStore,
        root: str,
        claimed_by: Callable[[str], str | None],
        record_id: Callable[[str, str], None],
    ) -> None:
        self._files = files
        self._root = root
        self._claimed_by = claimed_by
        self._record_id = record_id

    def get(self, kind: str, key: str) -> str | None:
        """An entry, from agentkit's file when it keeps the kind."""
        if kind == "cli" and key == "current":
            return self._cli_get()
        if kind in _SIDECARS:
            return self._sidecar_get(kind, key)
        return self._files.get(kind, key)

    def set(self, kind: str, key: str, value: str | None) -> None:
        """Store an entry, in agentkit's file when it keeps the kind."""
        if kind == "cli" and key == "current":
            self._cli_set(value)
        elif kind in _SIDECARS:
            self._sidecar_set(kind, key, value)
        else:
            self._files.set(kind, key, value)

    def add(self, kind: str, key: str, value: str) -> str:
        """Store an entry when the key has none (agentkit's files: not atomic across
        processes, which agentkit's own writers are not either)."""
        if kind not in _SIDECARS and kind != "cli":
            return self._files.add(kind, key, value)
        current = self.get(kind, key)
        if current is None:
            self.set(kind, key, value)
            return value
        return current

    def cas(self, kind: str, key: str, expected: str | None, new: str | None) -> bool:
        """Compare and set; agentkit's own files are locked by a ``flock`` of the store
        directory (atomic across processes), so no lock file of ours appears in agentkit's
        layout."""
        if kind not in _SIDECARS and kind != "cli":
            return self._files.cas(kind, key, expected, new)
        return compare_and_set(
            lambda: self.get(kind, key),
            lambda value: self.set(kind, key, value),
            expected,
            new,
            open_lock=self._root_fd,
            lock_name=self._root,
        )

    def list(self, kind: str | None) -> list[tuple[str, str, str]]:
        """The entries of ``files``, and agentkit's: the sidecars of the active-session map
        and the binding (listed under the key recorded in them, else under their directory's
        name) and the CLI pointer."""
        return sorted(self._files.list(kind) + self._own_list(kind))

    def _own_list(self, kind: str | None) -> builtins.list[tuple[str, str, str]]:
        items: builtins.list[tuple[str, str, str]] = []
        if kind in (None, "cli"):
            pointer = self._cli_get()
            if pointer is not None:
                items.append(("cli", "current", pointer))
        kinds = [k for k in _SIDECARS if kind in (None, k)]
        if not kinds:
            return items
        try:
            names = sorted(os.listdir(self._root))
        except OSError as exc:
            raise StorageError(f"cannot list {self._root}: {exc}") from exc
        for dir_name in names:
            path = os.path.join(self._root, dir_name)
            if dir_name.startswith(".") or os.path.islink(path) or not os.path.isdir(path):
                continue
            for sidecar in kinds:
                file_name = _SIDECARS[sidecar][0]
                try:
                    raw = _read_regular_path(os.path.join(path, file_name))
                except StorageError:
                    continue  # not a sidecar this store reads
                if raw is None:
                    continue
                try:
                    obj = decode(raw)
                except ValueError:
                    continue
                claim = obj.get(_CLAIM) if isinstance(obj, dict) else None
                key = claim if isinstance(claim, str) else dir_name
                try:
                    value = self._sidecar_get(sidecar, key)
                except (UsageError, StorageError, CorruptLogError):
                    continue
                if value is not None:
                    items.append((sidecar, key, value))
        return items

    def _root_fd(self) -> int:
        try:
            return os.open(self._root, os.O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        except OSError as exc:
            raise StoreUnavailable(f"cannot open the store directory {self._root}: {exc}") from exc

    def _sidecar_get(self, kind: str, key: str) -> str | None:
        file_name, field = _SIDECARS[kind]
        try:
            dir_name = _sidecar_dir(key)
        except UsageError:
            return None  # agentkit cannot name it, so no mapping can exist for it
        where = os.path.join(self._root, dir_name, file_name)
        root = self._root_fd()
        try:
            dfd = _open_subdir(root, dir_name, where, create=False)
            if dfd is None:
                return None
            try:
                raw = _read_regular(dfd, file_name, where)
            finally:
                os.close(dfd)
        finally:
            os.close(root)
        if raw is None:
            return None
        try:
            obj = decode(raw)
        except ValueError as exc:
            raise CorruptLogError(f"{where} is not valid JSON: {exc}", path=where) from None
        if not isinstance(obj, dict):
            raise CorruptLogError(f"{where} is not a JSON object", path=where)
        claim = obj.get(_CLAIM)
        if isinstance(claim, str) and claim != key:
            return None  # written for another key that agentkit names the same
        value = obj.get(field)
        if value is None:  # Go's decoder matches field names case-insensitively
            value = next((v for k, v in obj.items() if k.lower() == field.lower()), None)
        if not isinstance(value, str) or not value.strip():
            return None
        return value

    def _sidecar_set(self, kind: str, key: str, value: str | None) -> None:
        file_name, field = _SIDECARS[kind]
        dir_name = _sidecar_dir(key)
        where = os.path.join(self._root, dir_name, file_name)
        root = self._root_fd()
        try:
            dfd = _open_subdir(root, dir_name, where, create=value is not None)
            if dfd is None:
                return  # nothing to remove
            try:
                claim = _read_regular(dfd, file_name, where)
                if claim is not None:
                    try:
                        other = decode(claim)
                    except ValueError:
                        other = None
                    owner = other.get(_CLAIM) if isinstance(other, dict) else None
                    if isinstance(owner, str) and owner != key:
                        raise UsageError(
                            f"keys {owner!r} and {key!r} share agentkit's sidecar directory "
                            f"{dir_name}; agentkit's naming cannot keep them apart, so {key!r} "
                            f"is refused rather than overwriting {owner!r}'s {kind} entry"
                        )
                if value is None:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(file_name, dir_fd=dfd)
                else:
                    body = encode({field: value, _CLAIM: key})
                    atomic_write(file_name, body, dir_fd=dfd)
            finally:
                os.close(dfd)
            if value is None:
                with contextlib.suppress(OSError):  # only when nothing else is in it
                    os.rmdir(dir_name, dir_fd=root)
        except OSError as exc:
            raise StorageError(f"cannot write {where}: {exc}") from exc
        finally:
            os.close(root)

    def _cli_get(self) -> str | None:
        link = os.path.join(self._root, CLI_CURRENT_LINK)
        try:
            target = os.readlink(link)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                raise StorageError(
                    f"{link} is not a symbolic link; agentkit's CLI pointer must be one"
                ) from None
            raise StorageError(f"cannot read {link}: {exc}") from exc
        if (
            not target.endswith(SUFFIX)
            or len(target) == len(SUFFIX)
            or "/" in target
            or "\\" in target
            or "\x00" in target
            or target.startswith(".")
        ):
            log.warning("ignoring %s: its target %r is no session file of the store", link, target)
            return None
        claimed = self._claimed_by(os.path.join(self._root, target))
        if claimed is not None:
            return claimed
        stem = target[: -len(SUFFIX)]
        candidates = [stem]
        if stem == "cli_default":
            candidates.insert(0, "cli:default")
        elif stem.startswith("cli_") and len(stem) > 4:
            candidates.insert(0, "cli:" + stem[4:])
        for candidate in candidates:  # an id whose file is the link's target
            try:
                if agentkit_file_name(candidate) == stem:
                    return candidate
            except UsageError:
                continue
        log.warning("ignoring %s: no session id names its target %r", link, target)
        return None

    def _cli_set(self, session_id: str | None) -> None:
        link = os.path.join(self._root, CLI_CURRENT_LINK)
        root = self._root_fd()
        try:
            try:
                st: os.stat_result | None = os.lstat(CLI_CURRENT_LINK, dir_fd=root)
            except FileNotFoundError:
                st = None
            if st is not None and not stat.S_ISLNK(st.st_mode):
                raise StorageError(
                    f"{link} exists and is not a symbolic link; refusing to replace it"
                )
            if session_id is None:
                if st is not None:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(CLI_CURRENT_LINK, dir_fd=root)
                return
            target = agentkit_file_name(session_id) + SUFFIX
            if target == CLI_CURRENT_LINK:
                raise UsageError(f"session id {session_id!r} names the CLI pointer itself")
            claimed = self._claimed_by(os.path.join(self._root, target))
            if claimed is not None and claimed != session_id:
                raise UsageError(
                    f"session ids {claimed!r} and {session_id!r} map to the same agentkit file "
                    f"{target}; the CLI pointer cannot name {session_id!r}"
                )
            if claimed is None:  # claim the name, so the pointer reads back as this very id
                self._record_id(session_id, os.path.join(self._root, target))
            tmp = f"{CLI_CURRENT_LINK}.{os.getpid()}.{threading.get_ident()}.tmp"
            os.symlink(target, tmp, dir_fd=root)
            try:
                os.replace(tmp, CLI_CURRENT_LINK, src_dir_fd=root, dst_dir_fd=root)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=root)
                raise
            with contextlib.suppress(OSError):
                os.fsync(root)
        except OSError as exc:
            raise StorageError(f"cannot set {link}: {exc}") from exc
        finally:
            os.close(root)


def _sidecar_dir(key: str) -> str:
    """agentkit's per-key sidecar directory name (its session file name without ``.jsonl``).
    A name starting with ``.`` is refused: ``.`` is the store itself (an agentkit bug) and
    ``.locks`` and ``.meta`` are the store's own directories."""
    name = agentkit_file_name(key)
    if name.startswith("."):
        raise UsageError(
            f"key {key!r} names the agentkit sidecar directory {name!r}; names starting with "
            "'.' are reserved for the store's own files"
        )
    return name


def _open_subdir(root: int, name: str, where: str, *, create: bool) -> int | None:
    """A descriptor of the directory ``name`` inside ``root`` (created owner-only with
    ``create``), never through a symbolic link; None when it does not exist."""
    created = False
    if create:
        try:
            os.mkdir(name, 0o700, dir_fd=root)
            created = True
        except FileExistsError:
            pass
    try:
        fd = os.open(name, os.O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, dir_fd=root)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise StorageError(
                f"{os.path.dirname(where)} is a symbolic link or not a directory; refusing "
                "to follow it out of the store"
            ) from None
        raise StorageError(f"cannot open {os.path.dirname(where)}: {exc}") from exc
    if created:
        os.fchmod(fd, 0o700)  # mkdir's mode is masked by the umask
    return fd


def _read_regular(dirfd: int, name: str, where: str) -> bytes | None:
    """The content of the regular file ``name`` in ``dirfd`` (no symbolic link), or None."""
    try:
        fd = os.open(name, os.O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, dir_fd=dirfd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        what = "is a symbolic link" if exc.errno == errno.ELOOP else str(exc)
        raise StorageError(f"cannot read {where}: {what}") from None
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise StorageError(f"{where} is not a regular file; refusing to read it")
        return f.read()


def _read_regular_path(path: str) -> bytes | None:
    """:func:`_read_regular` of a path (its directory opened without following a link)."""
    directory, name = os.path.split(path)
    try:
        dirfd = os.open(directory, os.O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
    except OSError as exc:
        raise StorageError(f"cannot open {directory}: {exc}") from exc
    try:
        return _read_regular(dirfd, name, path)
    finally:
        os.close(dirfd)
