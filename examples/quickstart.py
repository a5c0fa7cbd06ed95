"""Record a short conversation in a JSONL store, reopen it and print the derived history.

    python examples/quickstart.py [DIRECTORY]
"""

from __future__ import annotations

import sys
import tempfile

import agentsession as ags


def main(directory: str) -> None:
    store = ags.open_store(directory)
    session = store.get("slack:C001:t:1712345678.9")
    with session.turn(agent="coder", user="U456") as turn:
        turn.user("Fix the failing test")
        with turn.step() as step:
            call = ags.ToolCall(id="c1", name="read", arguments={"path": "a.py"})
            step.assistant("Looking.", tool_calls=[call])
            step.tool_result("c1", "read", "assert 1 == 2")
            step.usage(input_tokens=1200, output_tokens=80)
        turn.assistant("Fixed.")
    store.close()

    reopened = ags.open_store(directory).get("slack:C001:t:1712345678.9")
    print(f"{reopened.latest_seq} events in {reopened.location}")
    for message in reopened.messages(agent="coder"):
        calls = ", ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
        results = ", ".join(r.content for r in message.tool_results)
        print(f"{message.role:>9}: {message.text or calls or results}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="agentsession-"))
