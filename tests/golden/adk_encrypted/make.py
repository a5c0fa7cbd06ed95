"""Make the encrypted ADK golden store in this directory (run from the repository root).

    python tests/golden/adk_encrypted/make.py

Writes ``jsonl/``, a JSONL store encrypted with the raw key :data:`KEY`, holding one ADK
session written through :class:`agentsession.integrations.adk.AgentSessionService`:
``adk:golden_app:ada:s1``, created with the state :data:`INITIAL`, then :data:`EVENTS` events
each carrying the state delta ``{"n": i, "user:seen": i, "app:last": i}`` (past a snapshot,
one per 64 seqs). It was made by the version whose ADK integration kept ``app:`` and
``user:`` state and the session-state snapshot in plaintext beside the sealed log
(``.meta/adk-app-state``, ``.meta/adk-user-state``, ``.meta/adk-snapshot``);
``tests/test_integration_adk.py`` checks that later versions still read that state (and seal
it at its next change). Never edit the outputs by hand.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions

import agentsession as ags
from agentsession.integrations.adk import AgentSessionService

KEY = bytes(range(32))
"""The store's raw key (``key=``)."""
INITIAL = {"topic": "golden", "app:tier": "gold", "user:lang": "en"}
"""The state the session was created with."""
EVENTS = 70
"""ADK events appended, each with a state delta."""


async def write(directory: Path) -> None:
    store = ags.open_store(directory, key=KEY)
    async with AgentSessionService(store) as service:
        session = await service.create_session(
            app_name="golden_app", user_id="ada", session_id="s1", state=dict(INITIAL)
        )
        for i in range(EVENTS):
            delta = {"n": i, "user:seen": i, "app:last": i}
            actions = EventActions(state_delta=delta)
            event = Event(author="user", invocation_id=f"i{i}", actions=actions)
            await service.append_event(session, event)
    store.close()


def main() -> None:
    out = Path(__file__).parent / "jsonl"
    shutil.rmtree(out, ignore_errors=True)
    asyncio.run(write(out))


if __name__ == "__main__":
    main()
