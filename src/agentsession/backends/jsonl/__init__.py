"""The JSONL backend: a directory with one append-only file of JSON lines per session.

The line format is documented in ``docs/format.md``. How writing stays safe:

* An append encodes its events first, then takes an exclusive ``flock`` on the file, catches up
  on whatever other processes or instances appended since this one last looked, assigns the
  next seqs and writes every line of the batch with one ``write()`` on a descriptor opened with
  ``O_APPEND`` and kept open. Seqs therefore stay unique and gap-free across processes.
* Every line of a multi-event batch but the last carries ``"more":true``; a log that ends in such
  a line ends in a batch a crash cut short, and the batch is moved aside whole.
* A torn tail (bytes after the last newline, an unparsable last line, or an unfinished batch) is
  absent to readers: opening, reading and catching up stop before it and write nothing. The
  next writer (an append, ``recover``) moves it, bytes intact, to the sidecar
  ``<name>.jsonl.quarantine`` and truncates the log to its last complete line, under the lock.
  A log (or store directory) the process may only read opens read-only.
* A bad line elsewhere raises :class:`~agentsession.errors.CorruptLogError`, or with
  ``on_corrupt="quarantine"`` is copied to the sidecar and blanked in place (readers skip blank
  lines). Nothing is silently dropped.
* Opening reads from the latest compaction marker to the end, found by scanning backwards.

The modules: :mod:`.logfile` (one session's log file, :class:`JsonlLog`: the session is the
library's :class:`~agentsession.BaseSession` over it), :mod:`.directory` (the directory
store), :mod:`.meta` (meta entries as files, with compare-and-set), :mod:`.single` (the
single-file store), :mod:`.lines` (reading lines without a session) and :mod:`.layout` (the
store's own layout; agentkit's is :mod:`agentsession.interop.agentkit_layout`).
"""

from __future__ import annotations

from ...interop.agentkit_layout import CLI_CURRENT_LINK, agentkit_file_name
from ...interop.jsonl_layout import SUFFIX as SUFFIX
from ...interop.jsonl_layout import Dialect
from ...session import BaseSession
from .directory import ID_SUFFIX as ID_SUFFIX
from .directory import LOCK_DIR as LOCK_DIR
from .directory import QUARANTINE_SUFFIX as QUARANTINE_SUFFIX
from .directory import JsonlStore, OnCorrupt, open_jsonl
from .logfile import JsonlLog
from .meta import CAS_LOCK as CAS_LOCK
from .meta import META_DIR as META_DIR
from .single import JsonlFileStore, open_jsonl_file

# The names of the store's own files (SUFFIX, LOCK_DIR, META_DIR, CAS_LOCK, ID_SUFFIX,
# QUARANTINE_SUFFIX) stay importable from here, as before the split, outside __all__.
__all__ = [
    "CLI_CURRENT_LINK",
    "Dialect",
    "JsonlFileStore",
    "JsonlLog",
    "JsonlSession",
    "JsonlStore",
    "OnCorrupt",
    "agentkit_file_name",
    "open_jsonl",
    "open_jsonl_file",
]

JsonlSession = BaseSession
"""A JSONL store's session: the library's :class:`~agentsession.BaseSession` over a
:class:`JsonlLog` (the name is kept for code that imports it; ``session.location`` is the
session's file)."""

# The classes are known by their public path (as before the split): in reprs and in pickles.
for _public in (JsonlFileStore, JsonlLog, JsonlStore):
    _public.__module__ = __name__
del _public
