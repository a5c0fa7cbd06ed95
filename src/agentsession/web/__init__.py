"""``agentsession serve``: a read-only web viewer of a store's sessions (the ``web`` extra).

:func:`create_app` builds the ASGI application (Starlette) over an open store: a sessions page
(paged, newest first), a transcript page per session (the rows of
:func:`agentsession.view.transcript_rows`, the rows the command line's ``show`` prints), charts
of tokens per turn and tool-call durations, a live tail over Server-Sent Events, and JSON
endpoints. Nothing in it writes. The page's script, style sheet and charts ship in the package;
the page loads nothing from another origin. See ``docs/web.md``.

The core library never imports this package; the command line imports it only for ``serve``.
"""

from __future__ import annotations

from .app import CONTENT_SECURITY_POLICY, create_app
from .stream import create_stream_app

__all__ = ["CONTENT_SECURITY_POLICY", "create_app", "create_stream_app"]
