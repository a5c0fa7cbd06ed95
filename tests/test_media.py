"""Sanitising messages for storage, logical sizes, and hydrating attachments."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import msgspec

import agentsession as ags
from agentsession.media import (
    AGENTKIT_STORAGE_POLICY,
    IMAGE_SLOT_CHARS,
    StoragePolicy,
    estimate_logical_chars,
    hydrate_local_attachments,
    sanitize_for_storage,
    sum_logical_chars,
)
from agentsession.messages import AttachmentRef, ImagePart, Message, TextPart, ToolCall

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
DATA_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()


def test_image_data_without_a_source_is_dropped_and_text_kept() -> None:
    msg = Message.user([TextPart("look"), ImagePart(url=DATA_URL, mime="image/png")])
    assert sanitize_for_storage(msg).parts == [TextPart("look")]


def test_inline_image_with_a_source_becomes_an_attachment_ref() -> None:
    msg = Message.user([ImagePart(url=DATA_URL, mime="image/png", source="upload/shot.png")])
    assert sanitize_for_storage(msg).parts == [
        AttachmentRef(source="upload/shot.png", mime="image/png")
    ]


def test_remote_image_url_is_kept_as_a_reference() -> None:
    msg = Message.user([ImagePart(url="https://x/a.png", mime="image/png")])
    assert sanitize_for_storage(msg).parts == [
        AttachmentRef(url="https://x/a.png", mime="image/png")
    ]


def test_attachment_refs_and_thinking_are_kept_unchanged() -> None:
    parts = [AttachmentRef(source="a.png"), ags.ThinkingPart("t" * 20000, "sig")]
    assert sanitize_for_storage(Message.assistant(parts)).parts == parts


def test_long_text_is_cut_with_the_truncation_mark() -> None:
    out = sanitize_for_storage(Message.user("a" * 9000), StoragePolicy(max_text_bytes=100))
    assert out.text == "a" * 100 + "\n...[truncated]"


def test_text_is_cut_on_a_character_boundary() -> None:
    out = sanitize_for_storage(Message.user("é" * 100), StoragePolicy(max_text_bytes=11))
    assert out.text == "é" * 5 + "\n...[truncated]"
    out.text.encode("utf-8")  # valid UTF-8, no stray bytes


def test_blank_and_data_url_text_is_dropped() -> None:
    msg = Message.user([TextPart("  "), TextPart("data:image/png;base64,AAAA"), TextPart(" hi ")])
    assert sanitize_for_storage(msg).parts == [TextPart("hi")]


def test_tool_call_arguments_are_never_cut_into_invalid_json() -> None:
    args = {"text": "z" * 50000}
    msg = Message.assistant(tool_calls=[ToolCall("c", "write", args)])
    out = sanitize_for_storage(msg, StoragePolicy(max_text_bytes=100))
    encoded = msgspec.json.encode(out)
    assert msgspec.json.decode(encoded, type=Message).tool_calls[0].arguments == args


def test_under_the_agentkit_policy_no_inline_image_data_is_stored() -> None:
    session = ags.open_store("memory:").get("s")
    msg = Message.user([TextPart("see"), ImagePart(url=DATA_URL, source="upload/shot.png")])
    with session.turn(storage=AGENTKIT_STORAGE_POLICY) as turn:
        turn.user(msg)
    raw = session.read()[1].raw
    assert b"data:image" not in raw
    assert b'"type":"attachment_ref"' in raw


def test_by_default_messages_are_stored_whole() -> None:
    session = ags.open_store("memory:").get("s")
    long_text = "x" * 100_000
    msg = Message.user([TextPart("  see  "), ImagePart(url=DATA_URL, source="upload/shot.png")])
    with session.turn() as turn:
        turn.user(msg)
        turn.assistant(long_text)
    stored = [e.payload() for e in session.read() if e.type.endswith("/message")]
    assert stored[0] == msg
    assert stored[1].text == long_text
    assert "logical_chars" not in session.read()[1].meta


def test_a_storage_policy_must_be_sane() -> None:
    import pytest

    with pytest.raises(ags.UsageError, match="max_text_bytes"):
        StoragePolicy(max_text_bytes=0)


def test_logical_chars_count_inline_images_as_a_fixed_slot() -> None:
    small = Message.user([ImagePart(url=DATA_URL)])
    big = Message.user([ImagePart(url="data:image/png;base64," + "A" * 100000)])
    assert estimate_logical_chars(small) == estimate_logical_chars(big)
    assert estimate_logical_chars(small) == len("user") + IMAGE_SLOT_CHARS


def test_logical_chars_count_bytes_of_text_calls_and_results() -> None:
    msg = Message(
        role="assistant",
        parts=[TextPart("héllo")],
        tool_calls=[ToolCall("c", "read", {"a": 1})],
        tool_results=[ags.ToolResult("c", "read", "out")],
    )
    assert estimate_logical_chars(msg) == 9 + 6 + 4 + len(b'{"a":1}') + 4 + 3


def test_sum_logical_chars_uses_recorded_sizes_and_derives_agent_filter() -> None:
    session = ags.open_store("memory:").get("s")
    with session.turn(agent="a", storage=AGENTKIT_STORAGE_POLICY) as turn:
        turn.user("x" * 10000)
    with session.turn(agent="", storage=AGENTKIT_STORAGE_POLICY) as turn:
        turn.assistant("shared")
    with session.turn(agent="b", storage=AGENTKIT_STORAGE_POLICY) as turn:
        turn.assistant("other")
    events = [e for e in session.read() if e.type.endswith("/message")]
    assert events[0].meta["logical_chars"] == 10004
    shared = len("assistant") + len("shared")
    assert sum_logical_chars(events, agent="a") == 10004 + shared
    assert sum_logical_chars(events) == 10004 + shared + len("assistant") + len("other")


# -- hydration --------------------------------------------------------------------------------


def workspace(tmp_path: Path) -> Path:
    (tmp_path / "upload").mkdir(parents=True, exist_ok=True)
    (tmp_path / "upload" / "shot.png").write_bytes(PNG)
    return tmp_path


def test_hydrate_reloads_a_workspace_image_as_a_data_url(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    msgs = [Message.user([AttachmentRef(source="work/upload/shot.png", mime="image/png")])]
    out = hydrate_local_attachments(msgs, ws, strip_prefix="work/")
    part = out[0].parts[0]
    assert isinstance(part, ImagePart)
    assert part.url == DATA_URL and part.mime == "image/png"
    assert msgs[0].parts[0] == AttachmentRef(source="work/upload/shot.png", mime="image/png")


def test_hydrate_only_touches_the_last_user_message(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    ref = AttachmentRef(source="upload/shot.png")
    msgs = [Message.user([ref]), Message.assistant("ok"), Message.user("now")]
    assert hydrate_local_attachments(msgs, ws)[0].parts == [ref]


def test_hydrate_injects_images_the_read_tool_reported(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    msgs = [
        Message.user("what is in the screenshot?"),
        Message.assistant(tool_calls=[ToolCall("r1", "read", {"path": "upload/shot.png"})]),
        Message.tool_result(
            "r1", "read", "Image: upload/shot.png\nMIME: image/png\nSize: 40 bytes"
        ),
    ]
    assert hydrate_local_attachments(msgs, ws) == msgs  # no tool named: nothing injected
    out = hydrate_local_attachments(msgs, ws, image_tools={"read"})
    assert [m.role for m in out] == ["user", "assistant", "tool", "user"]
    assert isinstance(out[3].parts[0], ImagePart)
    assert out[3].parts[0].url == DATA_URL


def test_missing_or_unreadable_images_degrade_to_a_text_hint(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    (tmp_path / "upload" / "secret.png").write_bytes(PNG)
    os.chmod(tmp_path / "upload" / "secret.png", 0)
    msgs = [
        Message.user(
            [
                AttachmentRef(source="upload/gone.png"),
                AttachmentRef(source="upload/secret.png"),
                AttachmentRef(url="https://x/y.pdf"),
                AttachmentRef(),
            ]
        )
    ]
    out = hydrate_local_attachments(msgs, ws)
    texts = [p.text for p in out[0].parts if isinstance(p, TextPart)]
    if os.geteuid() == 0:  # root reads anything: the unreadable file still loads
        assert texts == [
            "[attachment: upload/gone.png]",
            "[attachment: https://x/y.pdf]",
            "[attachment omitted]",
        ]
    else:
        assert texts == [
            "[attachment: upload/gone.png]",
            "[attachment: upload/secret.png]",
            "[attachment: https://x/y.pdf]",
            "[attachment omitted]",
        ]


def test_hydrate_never_reads_outside_the_workspace(tmp_path: Path) -> None:
    ws = workspace(tmp_path / "ws")
    (tmp_path / "outside.png").write_bytes(PNG)
    (ws / "upload" / "link.png").symlink_to(tmp_path / "outside.png")
    msgs = [
        Message.user(
            [AttachmentRef(source="../outside.png"), AttachmentRef(source="upload/link.png")]
        )
    ]
    out = hydrate_local_attachments(msgs, ws)
    assert all(isinstance(p, TextPart) for p in out[0].parts)


def test_hydrate_skips_images_over_the_size_limit(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    out = hydrate_local_attachments(
        [Message.user([AttachmentRef(source="upload/shot.png")])], ws, max_image_bytes=10
    )
    assert out[0].parts == [TextPart("[attachment: upload/shot.png]")]
