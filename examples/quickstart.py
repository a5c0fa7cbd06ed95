"""Write a short conversation to a JSONL store, reopen it and print the derived history."""

from __future__ import annotations

import sys
import tempfile

import agentsession as ags


def main(directory: str) -> None:
    store = ags.open_store(directory)
    session = store.get("slack:C001:t:1712345678.9")
    call = ags.ToolCall(id="c1", name="read", arguments={"path": "a.py"})
    session.append_many(
        [
            ags.Event.new("turn/start", ags.TurnStart(), agent="coder"),
            ags.Event.new("user/message", ags.Message.user("Fix the failing test"), agent="coder"),
            ags.Event.new(
                "assistant/message",
                ags.Message.assistant("Looking.", tool_calls=[call]),
                agent="coder",
            ),
            ags.Event.new(
                "tool/result", ags.ToolResult("c1", "read", "assert 1 == 2"), agent="coder"
            ),
            ags.Event.new("assistant/message", ags.Message.assistant("Fixed."), agent="coder"),
            ags.Event.new("turn/end", ags.TurnEnd(steps=1), agent="coder"),
        ]
    )
    store.close()

    reopened = ags.open_store(directory).get("slack:C001:t:1712345678.9")
    print(f"{reopened.latest_seq} events in {reopened.location}")
    for message in reopened.messages(agent="coder"):
        calls = ", ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
        results = ", ".join(r.content for r in message.tool_results)
        print(f"{message.role:>9}: {message.text or calls or results}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="agentsession-"))
