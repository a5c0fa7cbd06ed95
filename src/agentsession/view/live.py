"""Rows of a session's events as they arrive, each nested as in the rows of the whole log.

A row's nesting (``depth``), a ``turn_end`` row's token totals and whether a row is rewound
depend on the events before it. A ``turn/start`` resets the nesting state of
:func:`~agentsession.view.transcript_rows`, so the rows of new events are computed with the
events since the latest ``turn/start`` before them (:func:`context_before`), which
:class:`LiveRows` keeps in memory: each batch costs its own events and the current turn, never
a look back through the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from .. import events as ev
from ..events import Event
from .transcript import Row, transcript_rows

if TYPE_CHECKING:
    from ..session import BaseSession

__all__ = ["CONTEXT_CHUNK", "LiveRows", "context_before", "last_turn_start"]

CONTEXT_CHUNK: Final = 512
"""Events read per step when looking back for the ``turn/start`` before a seq."""


def last_turn_start(events: Sequence[Event]) -> int | None:
    """The index of the last ``turn/start`` of ``events`` (None when there is none)."""
    for index in range(len(events) - 1, -1, -1):
        if events[index].type == ev.TURN_START:
            return index
    return None


def context_before(session: BaseSession, after: int) -> list[Event]:
    """The events from the latest ``turn/start`` at or before seq ``after`` up to ``after``
    (from seq 1 when there is none; [] for ``after`` 0), read backwards in chunks of
    :data:`CONTEXT_CHUNK`: the rows computed from there on equal the rows of the whole log."""
    context: list[Event] = []
    high = after
    while high > 0:
        low = max(0, high - CONTEXT_CHUNK)
        chunk = [e for e in session.read(after=low, limit=high - low) if e.seq <= high]
        start = last_turn_start(chunk)
        if start is not None:
            return chunk[start:] + context
        context = chunk + context
        high = low
    return context


class LiveRows:
    """The rows of a session's events after a seq, batch by batch, as
    :func:`~agentsession.view.transcript_rows` gives them within the whole log (a row's
    ``rewound`` as the log stood at its batch's last event)."""

    def __init__(self, session: BaseSession, after: int, *, full: bool = True) -> None:
        """Rows of ``session``'s events after seq ``after`` (reads the context before it);
        ``full``: texts whole (False: previews, as ``show`` without ``--full``)."""
        self.full = full
        """Whether texts are whole."""
        self._context = context_before(session, after)

    def rows(self, events: Sequence[Event]) -> list[Row]:
        """The rows of ``events``, the next events of the session in seq order (one row
        each)."""
        if not events:
            return []
        combined = [*self._context, *events]
        rows = transcript_rows(combined, full=self.full)[len(self._context) :]
        start = last_turn_start(combined)
        self._context = combined if start is None else combined[start:]
        return rows
