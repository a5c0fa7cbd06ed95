"""Claude Agent SDK sessions in agentsession: ``AgentSessionStore`` as the SDK's
``session_store``. Claude Code itself is not run here (it needs an account): the transcript
entries it would mirror are appended as the SDK's transcript mirror appends them, a subagent's
among them; then the SDK's own store helpers read the conversation back, agentsession reads
the same session's typed messages, and the ``ClaudeAgentOptions`` that would resume it are
built. With Claude Code installed, pass those options to ``query()``.

    pip install 'agentsession[claude]'
    python examples/claude_example.py [DIRECTORY]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from typing import Any, cast

from claude_agent_sdk import (
    ClaudeAgentOptions,
    get_session_messages_from_store,
    project_key_for_directory,
)
from claude_agent_sdk.types import SessionKey, SessionStoreEntry

from agentsession.integrations.claude import AgentSessionStore, session_key

SESSION = "2d6f8a40-5b1c-4e7d-9f3a-0c8b7e6d5a41"
CWD = "/home/me/app"


def entry(kind: str, uuid: str, parent: str | None, message: dict[str, Any]) -> SessionStoreEntry:
    """One transcript line as Claude Code writes it (the fields this example needs)."""
    line: dict[str, Any] = {
        "type": kind,
        "uuid": uuid,
        "parentUuid": parent,
        "sessionId": SESSION,
        "cwd": CWD,
        "isSidechain": False,
        "timestamp": "2026-01-05T10:00:00.000Z",
        "message": message,
    }
    return cast("SessionStoreEntry", line)


def assistant(message_id: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    """An assistant message as the Messages API returns it."""
    usage = {"input_tokens": 50, "output_tokens": 10}
    return {"id": message_id, "role": "assistant", "content": content, "usage": usage}


TURN = [
    entry("user", "e1", None, {"role": "user", "content": "How many files are in src/?"}),
    entry(
        "assistant",
        "e2",
        "e1",
        assistant("msg_1", [{"type": "tool_use", "id": "tu_1", "name": "Bash", "input": {}}]),
    ),
    entry(
        "user",
        "e3",
        "e2",
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": "4"}],
        },
    ),
    entry("assistant", "e4", "e3", assistant("msg_2", [{"type": "text", "text": "4 files."}])),
]
SUBAGENT = [entry("user", "s1", None, {"role": "user", "content": "List the files in src/"})]


async def main(directory: str) -> None:
    store = AgentSessionStore(store=directory)  # or "sqlite:///s.db", "postgresql://..."
    try:
        key: SessionKey = {"project_key": project_key_for_directory(CWD), "session_id": SESSION}
        subagent: SessionKey = {**key, "subpath": "subagents/agent-s1"}
        # What the SDK's transcript mirror does during a turn, in batches (a retried batch is
        # stored once: the entries carry a uuid).
        await store.append(key, TURN[:2])
        await store.append(subagent, SUBAGENT)
        await store.append(key, TURN[2:])
        await store.append(key, TURN[2:])

        loaded = await store.load(key)
        assert loaded == TURN
        print("subagents:", await store.list_subkeys(key))

        # The SDK reads the conversation from the store...
        for message in await get_session_messages_from_store(store, SESSION, directory=CWD):
            print(f"sdk   {message.type}: {str(message.message)[:60]}")
        # ... and agentsession reads the same session's typed messages.
        session = store.store.get(session_key(key["project_key"], SESSION))
        for m in session.messages():
            calls = ", ".join(c.name for c in m.tool_calls)
            results = ", ".join(r.content for r in m.tool_results)
            print(f"typed {m.role}: {m.text or calls or results}")

        # With Claude Code installed: query(prompt=..., options=resume) goes on from the store.
        resume = ClaudeAgentOptions(cwd=CWD, session_store=store, resume=SESSION)
        print("resume options:", resume.resume, type(resume.session_store).__name__)
    finally:
        store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()))
