"""Provider formats: a session's neutral messages as the requests of the model APIs, and the
APIs' replies back as messages to record.

One module per API, each a pair of converters and a structural check:

* OpenAI Chat Completions (:mod:`.openai_chat`): :func:`to_openai_chat`,
  :func:`from_openai_chat`, :func:`openai_chat_errors`;
* the OpenAI Responses API (:mod:`.openai_responses`): :func:`to_openai_responses`,
  :func:`from_openai_responses`, :func:`from_openai_responses_input` (a conversation of input
  items), :func:`openai_responses_errors`;
* Anthropic Messages (:mod:`.anthropic`): :func:`to_anthropic`, :func:`from_anthropic`,
  :func:`anthropic_errors`;
* Google Gemini ``generateContent`` (:mod:`.gemini`): :func:`to_gemini`, :func:`from_gemini`,
  :func:`gemini_errors`.

Every ``from_*`` returns a :class:`ProviderReply`, whose ``record(step)`` records the answer
and its usage on a recorder step. Every ``to_*`` takes a provider-valid history
(:func:`agentsession.validation.provider_errors`; ``session.messages()`` always is) and
returns plain dicts that keep the API's own structural rules by construction; the
``*_errors`` functions check those rules on a request's wire form and return readable
sentences (an empty list means valid), the per-provider extension of ``provider_errors``.

The package never imports an SDK (``openai``, ``anthropic``, ``google.genai``): the ``to_*``
functions return plain data the SDKs accept, and the ``from_*`` functions take the SDKs'
response objects or their dict forms alike. It builds on the core (messages, events,
validation); the core never imports it. docs/providers.md has the rules, the tables of what
each API keeps and drops, and worked examples.
"""

from __future__ import annotations

from ._common import ProviderReply
from .anthropic import anthropic_errors, from_anthropic, to_anthropic
from .gemini import from_gemini, gemini_errors, to_gemini
from .openai_chat import from_openai_chat, openai_chat_errors, to_openai_chat
from .openai_responses import (
    from_openai_responses,
    from_openai_responses_input,
    openai_responses_errors,
    to_openai_responses,
)

__all__ = [
    "ProviderReply",
    "anthropic_errors",
    "from_anthropic",
    "from_gemini",
    "from_openai_chat",
    "from_openai_responses",
    "from_openai_responses_input",
    "gemini_errors",
    "openai_chat_errors",
    "openai_responses_errors",
    "to_anthropic",
    "to_gemini",
    "to_openai_chat",
    "to_openai_responses",
]
