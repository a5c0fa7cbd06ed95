"""Markdown of stored message text, rendered to HTML that cannot run anything.

Message text is whatever a user or a model wrote, so it is untrusted. It goes through
markdown-it-py (CommonMark) with raw HTML turned off, so ``<script>`` or ``<img onerror=...>``
in a message comes out as escaped text; images are off (a transcript never loads a picture from
an address a model wrote); and a link keeps its target only when it is ``http:``, ``https:``
or ``mailto:`` (``javascript:``, ``data:``, ``vbscript:``, relative and every other target is
rendered as plain text). Links open in a new tab without a referrer. The page's
Content-Security-Policy is the second line of defence: even markup that slipped through could
not run a script.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict

__all__ = ["SAFE_SCHEMES", "is_safe_link", "render_markdown"]

SAFE_SCHEMES: Final = ("http:", "https:", "mailto:")
"""The only link schemes that survive rendering."""

_CONTROL_AND_SPACE = {chr(c) for c in range(0x21)} | {"\x7f"}


def is_safe_link(url: str) -> bool:
    """Whether ``url`` (as markdown-it normalised it) may be a link target: it starts with
    one of :data:`SAFE_SCHEMES`, compared without case, spaces or control characters (which a
    browser would also ignore: ``java\\tscript:`` is ``javascript:``)."""
    squeezed = "".join(ch for ch in url if ch not in _CONTROL_AND_SPACE).lower()
    return squeezed.startswith(SAFE_SCHEMES)


def _link_open(
    renderer: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    token = tokens[idx]
    token.attrSet("rel", "noopener noreferrer nofollow")
    token.attrSet("target", "_blank")
    return renderer.renderToken(tokens, idx, options, env)


def _build() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.disable("image")
    md.validateLink = is_safe_link  # type: ignore[method-assign]
    md.add_render_rule("link_open", _link_open)
    return md


_MD: Final = _build()


def render_markdown(text: str) -> str:
    """``text`` as HTML: CommonMark without raw HTML or images, links only to
    :data:`SAFE_SCHEMES` (every other link is left as text); safe to insert into a page."""
    html: str = _MD.render(text)
    return html
