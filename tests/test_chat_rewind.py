"""The chat commands /retry and /edit: what the history is after them, what they reply and
hand back to answer, and when there is nothing to go back to."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import agentsession as ags
from agentsession import chat
from agentsession.chat.commands import CommandReply
from agentsession.chat.envelope import TurnEnvelope, apply_envelope, with_conversation
from agentsession.events import SESSION_REWIND, SessionRewind

SID = "slack:C001"


@pytest.fixture
def store(tmp_path: Path) -> ags.BaseStore:
    store = ags.open_store(tmp_path)
    session = store.get(SID)
    for n in range(2):  # seqs 1-4 and 5-8
        with session.turn(agent="coder") as turn:
            turn.user(f"question {n}")
            turn.assistant(f"answer {n}")
    return store


def dispatch(store: ags.BaseStore, text: str, conversation: str = SID) -> CommandReply:
    with with_conversation(conversation):
        reply = chat.default_commands(store).reply(text)
    assert reply is not None
    return reply


def history(store: ags.BaseStore, session_id: str = SID) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in store.get(session_id).messages()]


def answer(store: ags.BaseStore, reply: CommandReply, text: str) -> None:
    """What a runtime does with a reply that has messages to answer: a new turn."""
    with store.lock(SID, timeout=5), store.get(SID).turn(agent="coder") as turn:
        for message in reply.to_answer:
            turn.user(message)
        turn.assistant(text)


def last_marker(store: ags.BaseStore) -> SessionRewind:
    event = store.get(SID).read()[-1]
    assert event.type == SESSION_REWIND
    return event.decode(SessionRewind)


def test_retry_rewinds_the_last_turn_and_hands_its_message_back(store: ags.BaseStore) -> None:
    reply = dispatch(store, "/retry")
    assert reply.text == "rewound the last answer; asking again: question 1"
    assert [(m.role, m.text) for m in reply.to_answer] == [("user", "question 1")]
    assert history(store) == [("user", "question 0"), ("assistant", "answer 0")]
    marker = last_marker(store)
    assert (marker.to_seq, marker.kind, marker.reason) == (4, "retry", "")
    assert len(store.get(SID).read()) == 9  # nothing deleted
    answer(store, reply, "answer 1, again")
    assert history(store) == [
        ("user", "question 0"),
        ("assistant", "answer 0"),
        ("user", "question 1"),
        ("assistant", "answer 1, again"),
    ]
    # Retrying again goes back to before the new turn, not further.
    again = dispatch(store, "/retry")
    assert [m.text for m in again.to_answer] == ["question 1"]
    assert last_marker(store).to_seq == 9
    assert history(store) == [("user", "question 0"), ("assistant", "answer 0")]


def test_retry_hands_back_every_user_message_of_the_turn(store: ags.BaseStore) -> None:
    with store.get(SID).turn(agent="coder") as turn:
        turn.user("first part")
        turn.user("second part")
        turn.assistant("both parts")
    reply = dispatch(store, "/retry")
    assert reply.text == "rewound the last answer; asking again: first part / second part"
    assert [m.text for m in reply.to_answer] == ["first part", "second part"]
    assert history(store)[-1] == ("assistant", "answer 1")


def test_edit_replaces_the_last_user_message(store: ags.BaseStore) -> None:
    reply = dispatch(store, "/edit  what about  tomorrow? ")
    assert reply.text == "rewound the last turn; asking instead: what about tomorrow?"
    assert [(m.role, m.text) for m in reply.to_answer] == [("user", "what about  tomorrow?")]
    assert history(store) == [("user", "question 0"), ("assistant", "answer 0")]
    marker = last_marker(store)
    assert (marker.to_seq, marker.kind) == (4, "edit")
    answer(store, reply, "sunny")
    assert history(store) == [
        ("user", "question 0"),
        ("assistant", "answer 0"),
        ("user", "what about  tomorrow?"),
        ("assistant", "sunny"),
    ]


def test_a_turn_without_an_answer_is_the_one_retried(store: ags.BaseStore) -> None:
    # A worker crashed after recording the message: the turn has no end and no answer.
    store.get(SID).append_many(
        [
            ags.Event.new("turn/start", ags.events.TurnStart(), agent="coder"),
            ags.Event.new("user/message", ags.Message.user("question 2"), agent="coder"),
        ]
    )
    reply = dispatch(store, "/retry")
    assert [m.text for m in reply.to_answer] == ["question 2"]
    assert last_marker(store).to_seq == 8
    assert history(store)[-1] == ("assistant", "answer 1")


def test_nothing_to_retry_or_edit(store: ags.BaseStore) -> None:
    for text, kind in (("/retry", "retry"), ("/edit hello", "edit")):
        reply = dispatch(store, text, conversation="slack:C999")
        assert reply.text == f"nothing to {kind}: this conversation has no message to go back to"
        assert reply.to_answer == ()
    assert not store.exists("slack:C999")
    # A session whose events hold no user message.
    store.get("slack:C998").append(ags.Event.new("note/x", {"n": 1}))
    assert dispatch(store, "/retry", conversation="slack:C998").to_answer == ()
    assert len(store.get("slack:C998").read()) == 1
    # The history rewound to the start: nothing left to go back to.
    store.get(SID).rewind(to_seq=0)
    assert dispatch(store, "/retry").text == (
        "nothing to retry: this conversation has no message to go back to"
    )
    assert store.get(SID).read()[-1].seq == 9


def test_nothing_to_retry_behind_the_latest_compaction(store: ags.BaseStore) -> None:
    store.get(SID).compact(ags.Message.user("Summary."), keep_turns=1)
    reply = dispatch(store, "/retry")
    assert reply.text == (
        "nothing to retry: the last message comes before the latest compaction, and a rewind "
        "goes back no further than that"
    )
    assert reply.to_answer == ()
    assert store.get(SID).read()[-1].type == ags.events.COMPACTION


def test_the_command_line_conversation_follows_the_cli_pointer(tmp_path: Path) -> None:
    store = ags.open_store(tmp_path)
    with store.get(chat.cli_current(store)).turn() as turn:
        turn.user("hi")
        turn.assistant("hello")
    reply = chat.default_commands(store).reply("/retry")
    assert reply is not None and [m.text for m in reply.to_answer] == ["hi"]
    assert store.get("cli:default").messages() == []


def test_the_marker_names_the_envelope_agent(store: ags.BaseStore) -> None:
    with apply_envelope(TurnEnvelope(conversation=SID, agent_id="helper")):
        chat.default_commands(store).dispatch("/retry")
    assert store.get(SID).read()[-1].agent == "helper"


def test_usage_errors(store: ags.BaseStore) -> None:
    with pytest.raises(ags.UsageError, match=r"usage: /retry$"):
        dispatch(store, "/retry now")
    with pytest.raises(ags.UsageError, match="usage: /edit NEW MESSAGE"):
        dispatch(store, "/edit   ")
    assert store.get(SID).read()[-1].seq == 8


def test_a_busy_conversation_is_refused_and_one_under_the_callers_lock_is_not(
    store: ags.BaseStore,
) -> None:
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with store.lock(SID, timeout=5):
            taken.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert taken.wait(5)
        registry = chat.CommandRegistry([chat.retry_command(store, lock_timeout=0.1)])
        with with_conversation(SID), pytest.raises(ags.UsageError, match="busy"):
            registry.dispatch("/retry")
    finally:
        release.set()
        holder.join()
    assert store.get(SID).read()[-1].seq == 8
    # A runtime that dispatches while it holds the lock itself.
    with store.lock(SID, timeout=5):
        reply = dispatch(store, "/edit instead")
    assert [m.text for m in reply.to_answer] == ["instead"]


def test_help_lists_retry_and_edit(store: ags.BaseStore) -> None:
    registry = chat.default_commands(store)
    assert [c.name for c in registry.commands()] == ["edit", "help", "new", "retry", "session"]
    lines = registry.help().splitlines()
    assert "/retry: answer the last message again (the last answer is dropped)" in lines
    assert "/edit: replace the last message by the text given, and answer it" in lines


def test_reply_gives_the_whole_reply_and_dispatch_its_text(store: ags.BaseStore) -> None:
    registry = chat.CommandRegistry([chat.Command("ping", "pong", lambda args: "pong")])
    assert registry.reply("/ping") == CommandReply("pong")
    assert registry.reply("ping") is None
    with with_conversation(SID):
        text = chat.default_commands(store).dispatch("/retry")
    assert type(text) is str and text == "rewound the last answer; asking again: question 1"
    with pytest.raises(ags.UsageError, match="user messages only"):
        CommandReply("x", to_answer=(ags.Message.assistant("no"),))
    with pytest.raises(ags.UsageError, match="text is a str"):
        CommandReply(b"x")  # type: ignore[arg-type]
