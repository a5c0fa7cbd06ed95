"""A LangChain chat with its history in agentsession: two turns through
``RunnableWithMessageHistory`` over a scripted model (no network, no API key), read back by a
new store object, then cleared without deleting anything.

    pip install 'agentsession[langchain]'
    python examples/langchain_example.py [DIRECTORY]
"""

from __future__ import annotations

import sys
import tempfile
import warnings

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory

import agentsession as ags
from agentsession.integrations.langchain import AgentSessionChatHistory

# langchain-core 1.x marks RunnableWithMessageHistory deprecated (LangGraph's persistence is
# its successor); it still works, and this example shows it.
warnings.filterwarnings("ignore", message=".*deprecated.*")


def main(directory: str) -> None:
    store = ags.open_store(directory)  # one store for every history object
    model = GenericFakeChatModel(
        messages=iter(
            [
                AIMessage(
                    "Hello Ada, nice to meet you.",
                    usage_metadata={"input_tokens": 24, "output_tokens": 8, "total_tokens": 32},
                ),
                AIMessage("You are Ada."),
            ]
        )
    )
    prompt = ChatPromptTemplate.from_messages(
        [
            ("system", "You are a brief assistant."),
            MessagesPlaceholder("history"),
            ("human", "{question}"),
        ]
    )
    chat = RunnableWithMessageHistory(
        prompt | model,
        lambda session_id: AgentSessionChatHistory(session_id, store=store),
        input_messages_key="question",
        history_messages_key="history",
    )
    config = {"configurable": {"session_id": "web:ada"}}
    for question in ("My name is Ada.", "What is my name?"):
        answer = chat.invoke({"question": question}, config)  # type: ignore[arg-type]
        print(f"user: {question}\nassistant: {answer.content}")
    store.close()

    # Another process (here: a new store object) reads the same history back.
    reopened = ags.open_store(directory)
    history = AgentSessionChatHistory("web:ada", store=reopened)
    print(f"\n{len(history.messages)} LangChain messages in {history.session.location}:")
    for message in history.messages:
        print(f"  {message.type}: {message.content}")
    session = history.session
    print("agentsession's history:", [m.role for m in session.messages()])
    usage = [e.payload() for e in session.read() if e.type == "usage"]
    print("usage events:", [(u.input_tokens, u.output_tokens) for u in usage])

    history.clear()  # a marker: nothing is deleted
    print(f"\nafter clear(): {history.messages} ({len(session.read())} events kept)")
    reopened.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="agentsession-"))
