"""Make the OpenAI Agents golden store in this directory (run from the repository root).

    python tests/golden/openai_agents/make.py

Writes ``jsonl/``, a JSONL store holding two sessions written through
:class:`agentsession.integrations.openai_agents.OpenAIAgentsSession` by the version whose
``pop_item`` wrote ``openai_agents/pop`` with the mirror's compaction marker (``mirrored``)
or alone (``plain``, ``mirror_messages=False``), before pops wrote ``session/rewind``
markers: :data:`STEPS` applied to each. ``tests/test_integration_openai_agents.py`` checks
that later versions read the same items (:data:`ITEMS`) and history from it. Never edit the
outputs by hand.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import agentsession as ags
from agentsession.integrations.openai_agents import OpenAIAgentsSession

STEPS: list[tuple[str, list[dict[str, Any]]]] = [
    ("add", [{"role": "user", "content": "hello"}]),
    (
        "add",
        [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "hi"}],
            },
        ],
    ),
    ("pop", []),
    ("add", [{"role": "user", "content": "again"}, {"role": "user", "content": "more"}]),
    ("pop", []),
    ("pop", []),
    ("clear", []),
    ("add", [{"role": "user", "content": "after the clear"}]),
    ("add", [{"role": "user", "content": "second"}, {"role": "user", "content": "third"}]),
    ("pop", []),
]
"""What was done to each session, in order."""
ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "after the clear"},
    {"role": "user", "content": "second"},
]
"""The items each session holds at the end."""


async def write(directory: Path) -> None:
    store = ags.open_store(directory)
    for session_id, mirror in (("mirrored", True), ("plain", False)):
        session = OpenAIAgentsSession(session_id, store, mirror_messages=mirror)
        for op, items in STEPS:
            if op == "add":
                await session.add_items(items)  # type: ignore[arg-type]
            elif op == "pop":
                await session.pop_item()
            else:
                await session.clear_session()
        assert await session.get_items() == ITEMS
    store.close()


def main() -> None:
    out = Path(__file__).parent / "jsonl"
    shutil.rmtree(out, ignore_errors=True)
    asyncio.run(write(out))


if __name__ == "__main__":
    main()
