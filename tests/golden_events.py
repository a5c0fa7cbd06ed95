"""The canonical events pinned by ``tests/golden/events-v1.jsonl`` (one per event type)."""

from __future__ import annotations

import datetime as dt

from agentsession import events as ev
from agentsession.messages import (
    AttachmentRef,
    FilePart,
    ImagePart,
    Message,
    RefusalPart,
    TextPart,
    ThinkingPart,
    ToolCall,
    ToolResult,
)

T0 = dt.datetime(2026, 9, 5, 10, 11, 12, 123456, tzinfo=dt.timezone.utc)
CALL = ToolCall("call-1", "read", {"path": "a.py", "limit": 10})
ASSISTANT = Message.assistant(
    "Reading it.", tool_calls=[CALL], thinking="Need the file.", signature="sig=="
)
USER = Message(
    role="user",
    parts=[
        TextPart("look <here> & there"),
        ImagePart(url="https://example.com/a.png", mime="image/png", detail="high"),
        FilePart(data="JVBERi0=", mime="application/pdf", name="spec.pdf"),
        AttachmentRef(source="upload/shot.png", mime="image/png"),
        ThinkingPart("user-side thinking is kept verbatim"),
    ],
    name="alice",
)


def canonical_events() -> list[ev.Event]:
    """Every event type with a representative payload, seqs 1.., fixed times."""
    payloads: list[tuple[str, object, dict[str, object]]] = [
        (ev.TURN_START, ev.TurnStart(), {}),
        (ev.USER_MESSAGE, USER, {"logical_chars": 12004, "platform": "slack"}),
        (ev.STEP_START, ev.StepStart(step=0), {}),
        (ev.MESSAGE_START, ev.MessageStream(id="m1"), {}),
        (ev.MESSAGE_UPDATE, ev.MessageStream(id="m1", delta="Read"), {}),
        (ev.MESSAGE_END, ev.MessageStream(id="m1", message=ASSISTANT), {}),
        (ev.ASSISTANT_MESSAGE, ASSISTANT, {}),
        (ev.TOOL_CALL, CALL, {}),
        (
            ev.PERMISSION_REQUEST,
            ev.PermissionRequest(call_id="call-1", tool="read", reason="fs"),
            {},
        ),
        (ev.PERMISSION_RESOLVED, ev.PermissionResolved(call_id="call-1", decision="allow"), {}),
        (
            ev.SKILL_LOAD,
            ev.SkillLoad(
                name="pdf", description="PDFs", body="Use pdftotext.", resource_base="/skills/pdf"
            ),
            {},
        ),
        (
            ev.TOOL_RESULT,
            ToolResult("call-1", "read", "print(1)\n", is_error=False, audit={"decision": "allow"}),
            {},
        ),
        (
            ev.USAGE,
            ev.Usage(
                input_tokens=1200, output_tokens=80, total_tokens=1280, cache_read_tokens=1000
            ),
            {},
        ),
        (ev.STEP_END, ev.StepEnd(step=0), {}),
        (
            ev.RETRY_START,
            ev.RetryStart(attempt=1, max_attempts=3, delay_ms=500, error_message="429"),
            {},
        ),
        (ev.RETRY_END, ev.RetryEnd(success=True, attempt=2), {}),
        (
            ev.SUMMARIZATION_RETRY_START,
            ev.SummarizationRetryStart(
                attempt=1, max_attempts=2, delay_ms=100, error_message="timeout"
            ),
            {},
        ),
        (
            ev.SUMMARIZATION_RETRY_END,
            ev.SummarizationRetryEnd(success=False, attempt=2, final_error="timeout"),
            {},
        ),
        (ev.OVERFLOW_RECOVERY, ev.OverflowRecovery(applied=1, reason="context overflow"), {}),
        (
            ev.TODO_UPDATE,
            ev.TodoUpdate(
                items=[ev.Todo(id="1", title="read", status="done"), ev.Todo(id="2", title="fix")]
            ),
            {},
        ),
        (
            ev.TURN_CONTINUE,
            ev.TurnContinue(
                segment=1, reason="max steps", steps=8, messages=[Message.user("continue")]
            ),
            {},
        ),
        (
            ev.SUBAGENT_START,
            ev.SubagentStart(
                agent="researcher",
                session="s:sub:researcher:1",
                task="find docs",
                async_=True,
                job_id="j1",
            ),
            {},
        ),
        (
            ev.SUBAGENT_END,
            ev.SubagentEnd(
                agent="researcher",
                session="s:sub:researcher:1",
                status="completed",
                summary="found",
                steps=3,
                job_id="j1",
            ),
            {},
        ),
        (ev.RUN_FINISH, ev.RunFinish(status="completed", summary="done"), {}),
        (ev.TURN_END, ev.TurnEnd(steps=1), {}),
        (ev.TURN_END, ev.TurnEnd(steps=2, error=ev.TurnError(type="KeyboardInterrupt")), {}),
        (
            ev.SESSION_RECOVERY,
            ev.SessionRecovery(
                turn_start_seq=1,
                steps=1,
                orphan_results=1,
                closed_step=0,
                reason="turn/start without turn/end",
            ),
            {},
        ),
        (
            ev.COMPACTION,
            ev.Compaction(
                summary=Message.user("Summary: fixed a.py"),
                first_kept_seq=25,
                retained_tail=[Message.user("next")],
                tokens_before=9000,
            ),
            {},
        ),
        (ev.COMPACTION, ev.Compaction(summary=Message.user("legacy"), before_seq=18), {}),
        ("plugin/custom", {"anything": ["goes", 1, None]}, {}),
    ]
    out = []
    for seq, (kind, payload, meta) in enumerate(payloads, start=1):
        event = ev.Event.new(
            kind,
            payload,
            agent="coder" if seq % 2 else "",
            meta=meta,
            user="U1" if kind == ev.USER_MESSAGE else "",
            time=T0 + dt.timedelta(seconds=seq),
        )
        out.append(
            ev.Event(
                seq=seq,
                type=event.type,
                agent=event.agent,
                user=event.user,
                time=event.time,
                data=event.data,
                meta=event.meta,
            )
        )
    return out


def events_since_0_3() -> list[ev.Event]:
    """What 0.3 added to the format, pinned by ``golden/events-0.3.jsonl`` (version 1 lines,
    as everything else): the child-session event types, and the new message fields (text
    annotations, refusals, thinking provenance, call signatures, images in tool results,
    reasoning tokens)."""
    inherited = [Message.user("plan the trip"), Message.assistant("three options")]
    payloads: list[tuple[str, object]] = [
        (
            ev.SESSION_FORK,
            ev.SessionFork(
                parent="s:lead",
                parent_seq=12,
                fork_id="0f5e3c9a1b2d4e6f8a7b9c0d1e2f3a4b",
                agent="researcher",
                task="compare fares",
                inherit=2,
                messages=inherited,
                max_messages=40,
                metadata={"ticket": "T-7"},
            ),
        ),
        (
            ev.SESSION_MERGE,
            ev.SessionMerge(
                parent="s:lead",
                fork_id="0f5e3c9a1b2d4e6f8a7b9c0d1e2f3a4b",
                parent_seq=15,
                mode="summary",
                messages=1,
            ),
        ),
        (
            ev.SESSION_DISCARD,
            ev.SessionDiscard(
                parent="s:lead",
                fork_id="5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d",
                parent_seq=17,
                reason="not needed",
            ),
        ),
        (
            ev.ASSISTANT_MESSAGE,
            Message(
                role="assistant",
                parts=[
                    ThinkingPart("weighing fares", "c2lnbmF0dXJl", provider="anthropic"),
                    ThinkingPart("", "cmVkYWN0ZWQ=", provider="anthropic", redacted=True),
                    ThinkingPart("summary", "ZW5jcnlwdGVk", provider="openai", id="rs_1"),
                    TextPart(
                        "FR is cheapest", annotations=[{"type": "url_citation", "url": "https://x"}]
                    ),
                    RefusalPart("I cannot book it"),
                ],
                tool_calls=[ToolCall("c9", "book", {"flight": "FR"}, signature="dGhvdWdodA==")],
            ),
        ),
        (
            ev.TOOL_RESULT,
            ToolResult("c9", "book", "booked", parts=[ImagePart(url="https://x/ticket.png")]),
        ),
        (
            ev.USAGE,
            ev.Usage(input_tokens=900, output_tokens=300, total_tokens=1200, reasoning_tokens=120),
        ),
    ]
    return [
        ev.Event(
            seq=seq,
            type=kind,
            agent="researcher",
            time=T0 + dt.timedelta(seconds=seq),
            data=ev.Event.new(kind, payload).data,
        )
        for seq, (kind, payload) in enumerate(payloads, start=1)
    ]


def all_event_types_events() -> list[ev.Event]:
    """Every pinned event: :func:`canonical_events`, :func:`events_since_0_3`,
    :func:`events_since_0_5`, then :func:`events_since_0_6`."""
    return canonical_events() + events_since_0_3() + events_since_0_5() + events_since_0_6()


def events_since_0_6() -> list[ev.Event]:
    """What revision 6 added, pinned by ``golden/events-0.6.jsonl``: after the revision 4
    golden lines (seqs 1 to 3) and revision 5's (4 to 7), a ``session/rewind`` back to seq 0
    (an empty history) written by ``retry`` with a reason, then one back to seq 7, the seq
    before the first marker, which undoes it; and a branch's ``session/branch`` marker, as
    the branch's own log stores it (at its seq 1)."""
    return [
        ev.Event(
            seq=8,
            type=ev.SESSION_REWIND,
            agent="coder",
            time=T0 + dt.timedelta(seconds=8),
            data=ev.Event.new(
                ev.SESSION_REWIND,
                ev.SessionRewind(to_seq=0, kind="retry", reason="regenerate", min_revision=6),
            ).data,
            id="0199a1b2c3d47008800012345678abcd",
        ),
        ev.Event(
            seq=9,
            type=ev.SESSION_REWIND,
            time=T0 + dt.timedelta(seconds=9),
            data=ev.Event.new(ev.SESSION_REWIND, ev.SessionRewind(to_seq=7, min_revision=6)).data,
            id="0199a1b2c3d47009800012345678abcd",
        ),
        # A branch's marker as its own log stores it (its seq 1; it reads back at 13).
        ev.Event(
            seq=1,
            type=ev.SESSION_BRANCH,
            time=T0 + dt.timedelta(seconds=10),
            data=ev.Event.new(
                ev.SESSION_BRANCH,
                ev.SessionBranch(origin="slack:C1:t:1", origin_seq=12, min_revision=6),
            ).data,
            id="0199a1b2c3d4700a800012345678abcd",
        ),
    ]


def events_since_0_5() -> list[ev.Event]:
    """What revision 5 added, pinned by ``golden/events-0.5.jsonl``: the turn lock's fence
    (``session/lease``) and the inbox's deliveries (``session/delivery``: one with the default
    policy, left out of the JSON, and platform meta; one with ``reject``), and the marker of a
    turn a ``rollback`` delivery discarded (``session/rollback``)."""
    return [
        ev.Event(
            seq=4,
            type=ev.SESSION_LEASE,
            time=T0 + dt.timedelta(seconds=4),
            data=ev.Event.new(
                ev.SESSION_LEASE, ev.SessionLease(epoch=8, previous=7, reason="stolen")
            ).data,
            id="0199a1b2c3d47004800012345678abcd",
        ),
        ev.Event(
            seq=5,
            type=ev.SESSION_DELIVERY,
            user="U1",
            time=T0 + dt.timedelta(seconds=5),
            data=ev.Event.new(
                ev.SESSION_DELIVERY, ev.SessionDelivery(message=Message.user("and roll back"))
            ).data,
            meta={"channel": "C1"},
            id="slack:Ev0001",
        ),
        ev.Event(
            seq=6,
            type=ev.SESSION_DELIVERY,
            agent="coder",
            user="U2",
            time=T0 + dt.timedelta(seconds=6),
            data=ev.Event.new(
                ev.SESSION_DELIVERY,
                ev.SessionDelivery(message=Message.user("status?"), policy="reject"),
            ).data,
            id="slack:Ev0002",
        ),
        ev.Event(
            seq=7,
            type=ev.SESSION_ROLLBACK,
            agent="coder",
            time=T0 + dt.timedelta(seconds=7),
            data=ev.Event.new(
                ev.SESSION_ROLLBACK,
                ev.SessionRollback(
                    turn_id="t-1",
                    turn_start_seq=2,
                    delivery="slack:Ev0003",
                ),
            ).data,
            id="0199a1b2c3d47007800012345678abcd",
        ),
    ]



def events_since_0_4() -> list[ev.Event]:
    """What 0.4 added to the format, pinned by ``golden/events-0.4.jsonl``: the event id
    (``"id"``, the last key of a line), as :func:`~agentsession.events.new_event_id` makes them
    and as an application may choose them (an idempotency key)."""
    return [
        ev.Event(
            seq=1,
            type=ev.USER_MESSAGE,
            agent="coder",
            user="U1",
            time=T0,
            data=ev.Event.new(ev.USER_MESSAGE, Message.user("deploy it")).data,
            id="0199a1b2c3d47000800012345678abcd",
        ),
        ev.Event(
            seq=2,
            type=ev.ASSISTANT_MESSAGE,
            agent="coder",
            time=T0 + dt.timedelta(seconds=1),
            data=ev.Event.new(ev.ASSISTANT_MESSAGE, Message.assistant("deployed")).data,
            meta={"turn_id": "t-1"},
            id="0199a1b2c3d47001800012345678abcd",
        ),
        ev.Event(
            seq=3,
            type="myapp/webhook",
            time=T0 + dt.timedelta(seconds=2),
            data=ev.Event.new("myapp/webhook", {"delivery": 7}).data,
            id="queue:orders:msg-000042",
        ),
    ]
