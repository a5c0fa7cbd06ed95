"""Messages refuse shapes a provider could not take, and accept the wire forms users meet."""

from __future__ import annotations

from typing import Any

import pytest

import agentsession as ags
from agentsession.events import check_event_type


def test_message_content_of_the_wrong_type_is_a_usage_error() -> None:
    with pytest.raises(ags.UsageError, match="not int"):
        ags.Message.user(123)  # type: ignore[arg-type]
    session = ags.open_store("memory:").get("s")
    for by_hand in (
        ags.Message(role="user", parts=["hi"]),  # type: ignore[list-item]
        ags.Message(role="robot"),  # type: ignore[arg-type]
    ):
        with pytest.raises(ags.UsageError, match="user/message event's payload is not valid"):
            session.append(ags.Event.new("user/message", by_hand))
    assert session.latest_seq == 0


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [('{"a": 1}', {"a": 1}), ("", {}), (b'{"b": [1]}', {"b": [1]}), ({"c": 2}, {"c": 2})],
)
def test_tool_call_arguments_in_the_wire_form_are_parsed(arguments: Any, expected: Any) -> None:
    assert ags.ToolCall("c1", "read", arguments).arguments == expected


@pytest.mark.parametrize("arguments", ["[1, 2]", "{not json", 5])
def test_tool_call_arguments_that_are_no_object_are_refused(arguments: Any) -> None:
    with pytest.raises(ags.UsageError, match="c1"):
        ags.ToolCall("c1", "read", arguments)


def test_structured_tool_results_become_json_text() -> None:
    assert ags.ToolResult("c1", "q", {"rows": 3}).content == '{"rows":3}'  # type: ignore[arg-type]
    assert ags.ToolResult("c1", "q", None).content == ""  # type: ignore[arg-type]
    with pytest.raises(ags.UsageError, match="content"):
        ags.ToolResult("c1", "q", object())  # type: ignore[arg-type]


def test_a_recorded_structured_result_reaches_the_model() -> None:
    session = ags.open_store("memory:").get("s")
    with session.turn() as turn, turn.step() as step:
        step.assistant(tool_calls=[ags.ToolCall("c1", "read", arguments='{"a":1}')])  # type: ignore[arg-type]
        step.tool_result("c1", "read", {"rows": 3})  # type: ignore[arg-type]
    history = session.messages()
    assert history[0].tool_calls[0].arguments == {"a": 1}
    assert history[1].tool_results[0].content == '{"rows":3}'
    assert history[1].tool_results[0].audit == {}  # the real result, not the stand-in


def test_typos_in_core_namespaces_are_refused_with_a_suggestion() -> None:
    problem = check_event_type("user/mesage")
    assert problem is not None and "'user/message'" in problem
    assert check_event_type("user/message") is None
    assert check_event_type("myapp/deploy") is None
    assert check_event_type("usage") is None
    session = ags.open_store("memory:").get("s")
    with pytest.raises(ags.UsageError, match="Did you mean 'user/message'"):
        session.append(ags.Event.new("user/mesage", ags.Message.user("hi")))
    assert session.append(ags.Event.new("myapp/deploy", {"target": "prod"})) == 1


def test_tool_calls_and_results_of_the_wrong_type_are_refused_naming_the_struct() -> None:
    as_dict: Any = {"id": "c1", "name": "read"}
    with pytest.raises(ags.UsageError, match=r"tool_calls\[0\] must be a ToolCall, not dict"):
        ags.Message.assistant("x", tool_calls=[as_dict])
    with pytest.raises(ags.UsageError, match=r"tool_calls\[1\] must be a ToolCall, not str"):
        ags.Message(role="assistant", tool_calls=[ags.ToolCall("c1", "read"), "c2"])  # type: ignore[list-item]
    with pytest.raises(ags.UsageError, match="tool_calls must be a list of ToolCall, not dict"):
        ags.Message(role="assistant", tool_calls=as_dict)
    with pytest.raises(ags.UsageError, match=r"tool_results\[0\] must be a ToolResult, not dict"):
        ags.Message.tool({"call_id": "c1"})  # type: ignore[arg-type]
    kept = ags.Message(role="assistant", tool_calls=(ags.ToolCall("c1", "read"),))  # type: ignore[arg-type]
    assert kept.tool_calls == [ags.ToolCall("c1", "read")]
