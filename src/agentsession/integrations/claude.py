"""The Claude Agent SDK's ``SessionStore`` over any agentsession store (the ``claude`` extra).

::

    from claude_agent_sdk import ClaudeAgentOptions, query
    from agentsession.integrations.claude import AgentSessionStore

    store = AgentSessionStore(store="sessions/")   # or sqlite:///s.db, postgresql://..., a store
    options = ClaudeAgentOptions(session_store=store, resume=session_id)
    async for message in query(prompt="And then?", options=options):
        ...

:class:`AgentSessionStore` implements the SDK's ``SessionStore`` protocol: the required
``append`` and ``load``, and the optional ``list_sessions``, ``list_session_summaries``,
``delete`` and ``list_subkeys``
(subagent transcripts are child sessions of their main transcript's session). Claude Code
mirrors each transcript line to it as it writes it locally (the SDK's transcript mirror, in
batches); a ``query()`` with ``resume`` (or ``continue_conversation``) loads the transcript
from it, with its subagents' transcripts, and Claude Code resumes from that. So a conversation
can go on in another process or on another host, from a durable, multi-process-safe,
encrypted-if-asked store.

The log and its typed mirror are those of :mod:`agentsession.interop.claude_code`, which
``agentsession import claude-code`` writes through as well: one ``claude/entry`` event per
entry, its payload the entry's JSON (``load`` returns the entries deep-equal, in append order),
exactly once for an entry with a ``uuid`` (a retried batch stores nothing twice), each
conversation entry followed by ``user/message``, ``assistant/message``, ``tool/result`` and
``usage`` events, so ``messages()``, ``agentsession show`` and the viewer read Claude sessions.
The agentsession id of a transcript is ``claude:<project>:<session>[:<subpath>]``
(:func:`~agentsession.interop.claude_code.session_key`).

The methods are coroutines that run the store's blocking calls in a worker thread
(``anyio.to_thread``, so they work under asyncio and trio alike). ``list_session_summaries`` is
implemented too: each ``append`` to a main transcript folds the entries it stored (not those
stored before) into the session's summary with the SDK's ``fold_session_summary``, a
compare-and-set of one meta entry (:data:`SUMMARY_META`).
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar, Union

import anyio.to_thread

from ..aio import AsyncStore
from ..errors import UsageError
from ..interop.claude_code import ENTRY, ClaudeTranscripts, session_key
from ..store import BaseStore, open_store

if TYPE_CHECKING:
    from claude_agent_sdk.types import (
        SessionKey,
        SessionListSubkeysKey,
        SessionStoreEntry,
        SessionStoreListEntry,
        SessionSummaryEntry,
    )

__all__ = ["ENTRY", "SUMMARY_META", "AgentSessionStore", "StoreTarget", "session_key"]

SUMMARY_META: Final = "claude-summary"
"""The meta namespace of the sessions' summaries (``list_session_summaries``), keyed by the
agentsession session id; deleted with the main transcript."""

StoreTarget = Union[str, "os.PathLike[str]", BaseStore, AsyncStore]
"""What ``store=`` takes: a URL or path for :func:`agentsession.open_store`, or an open store."""

T = TypeVar("T")


def _parts(key: Mapping[str, Any]) -> tuple[str, str, str | None]:
    """``(project_key, session_id, subpath)`` of an SDK key."""
    if not isinstance(key, Mapping):
        raise UsageError(f"a session key is a dict with project_key and session_id, not {key!r}")
    subpath = key.get("subpath")
    return key.get("project_key"), key.get("session_id"), subpath  # type: ignore[return-value]


class AgentSessionStore:
    """The Claude Agent SDK's ``SessionStore`` over an agentsession store.

    ``store`` is a URL or path (opened here and closed by :meth:`close`), or an open store (a
    :class:`~agentsession.store.BaseStore` or :class:`~agentsession.aio.AsyncStore`, left open).
    ``mirror_messages=False`` stores the entries alone (``messages()`` is then empty).
    ``summaries=False`` keeps no summaries: ``append`` writes the log alone (on a JSONL store
    the summary's compare-and-set is most of an append's cost), and
    ``list_session_summaries`` folds each session's entries when it is called instead."""

    def __init__(
        self, store: StoreTarget, *, mirror_messages: bool = True, summaries: bool = True
    ) -> None:
        owned = isinstance(store, (str, os.PathLike))
        if isinstance(store, AsyncStore):
            sync = store.sync
        elif isinstance(store, BaseStore):
            sync = store
        elif owned:
            sync = open_store(store)
        else:
            raise UsageError(f"store must be a URL, a path or an open store, not {store!r}")
        self._owned = owned
        self._keep_summaries = summaries
        self._transcripts = ClaudeTranscripts(sync, mirror_messages=mirror_messages)
        self._closed = False

    @property
    def store(self) -> BaseStore:
        """The agentsession store the transcripts live in."""
        return self._transcripts.store

    @property
    def transcripts(self) -> ClaudeTranscripts:
        """The same transcripts through blocking calls (for scripts and the importer)."""
        return self._transcripts

    async def _run(self, call: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise UsageError("AgentSessionStore is closed")
        return await anyio.to_thread.run_sync(functools.partial(call, *args))

    # -- the SessionStore protocol ---------------------------------------------------------

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Store a batch of transcript entries at the end of the key's transcript, in one
        atomic append (with their typed mirror); an entry whose ``uuid`` is stored already is
        not stored again. ``append(key, [])`` stores nothing."""
        project, sid, subpath = _parts(key)
        if not entries:
            session_key(project, sid, subpath)  # a bad key is still refused
            return
        batch: Sequence[Mapping[str, Any]] = entries
        await self._run(self._append, project, sid, subpath, batch)

    def _append(
        self, project: str, sid: str, subpath: str | None, entries: Sequence[Mapping[str, Any]]
    ) -> None:
        stored = self._transcripts.append(project, sid, subpath, entries).entries
        if subpath is None and stored and self._keep_summaries:
            self._fold(project, sid, stored)

    def _fold(self, project: str, sid: str, entries: list[dict[str, Any]]) -> None:
        """Fold newly stored entries into the session's summary, a compare-and-set of its meta
        entry (so concurrent appends, in any process, lose no fold), stamped after the append
        with this host's clock, the one the store stamps appends with."""
        from claude_agent_sdk import fold_session_summary

        key: SessionKey = {"project_key": project, "session_id": sid}

        def change(old: str | None) -> str:
            prev: SessionSummaryEntry | None = json.loads(old) if old else None
            folded = fold_session_summary(prev, key, entries)  # type: ignore[arg-type]
            folded["mtime"] = max(int(time.time() * 1000), prev["mtime"] if prev else 0)
            return json.dumps(folded)

        self.store._meta_update(SUMMARY_META, session_key(project, sid), change)

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """The key's entries in order, deep-equal to what was appended; None when nothing was
        (or when the transcript was deleted)."""
        project, sid, subpath = _parts(key)
        loaded = await self._run(self._transcripts.load, project, sid, subpath)
        return loaded  # type: ignore[return-value]

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        """The project's main transcripts: ``session_id`` and ``mtime`` (the last append, in
        Unix epoch milliseconds), in no particular order."""
        found = await self._run(self._transcripts.list_sessions, project_key)
        return [{"session_id": sid, "mtime": mtime} for sid, mtime in found]

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        """The summaries of the project's main transcripts, as the SDK's
        ``fold_session_summary`` made them in :meth:`append` (kept in the meta namespace
        :data:`SUMMARY_META`, keyed by session id); with ``summaries=False``, folded from each
        session's entries now."""
        return await self._run(self._summaries, project_key)

    def _summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        from claude_agent_sdk import fold_session_summary

        found: list[SessionSummaryEntry] = []
        for sid, mtime in self._transcripts.list_sessions(project_key):
            if self._keep_summaries:
                raw = self.store.meta_get(SUMMARY_META, session_key(project_key, sid))
                if raw is not None:
                    found.append(json.loads(raw))
                continue
            entries = self._transcripts.load(project_key, sid)
            if entries:
                key: SessionKey = {"project_key": project_key, "session_id": sid}
                folded = fold_session_summary(None, key, entries)  # type: ignore[arg-type]
                folded["mtime"] = mtime
                found.append(folded)
        return found

    async def delete(self, key: SessionKey) -> None:
        """Delete a transcript: a main one together with its subagents' transcripts and its
        summary, one with a ``subpath`` alone. Deleting what does not exist does nothing."""
        project, sid, subpath = _parts(key)
        await self._run(self._delete, project, sid, subpath)

    def _delete(self, project: str, sid: str, subpath: str | None) -> None:
        self._transcripts.delete(project, sid, subpath)
        if subpath is None:
            self.store.meta_set(SUMMARY_META, session_key(project, sid), None)

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        """The subpaths of the session's subagent transcripts (``subagents/agent-<id>``)."""
        project, sid, _ = _parts(key)
        return await self._run(self._transcripts.list_subkeys, project, sid)

    # -- life ------------------------------------------------------------------------------

    def close(self) -> None:
        """Close a store opened from a URL or path (a store passed in stays open); using this
        object afterwards raises :class:`~agentsession.errors.UsageError`."""
        if self._closed:
            return
        self._closed = True
        if self._owned:
            self._transcripts.store.close()

    def __repr__(self) -> str:
        return f"<AgentSessionStore at {self._transcripts.store.location}>"
