"""The provider-validity check that every derived history must pass."""

from __future__ import annotations

import pytest

import agentsession as ags
from agentsession.validation import assert_provider_valid, provider_errors

CALL = ags.ToolCall("c1", "read", {"path": "a.py"})


def test_a_valid_exchange_passes() -> None:
    history = [
        ags.Message.user("read a.py"),
        ags.Message.assistant(tool_calls=[CALL]),
        ags.Message.tool_result("c1", "read", "print(1)"),
        ags.Message.assistant("done"),
    ]
    assert provider_errors(history) == []
    assert_provider_valid(history)  # raises nothing


@pytest.mark.parametrize(
    ("history", "problem"),
    [
        ([ags.Message.user("x"), ags.Message.assistant(tool_calls=[CALL])], "c1"),
        ([ags.Message.user("x"), ags.Message.tool_result("c9", "read", "orphan")], "c9"),
        (
            [
                ags.Message.assistant(tool_calls=[CALL]),
                ags.Message.user("interrupting"),
                ags.Message.tool_result("c1", "read", "late"),
            ],
            "c1",
        ),
    ],
)
def test_assert_provider_valid_names_the_problem(
    history: list[ags.Message], problem: str
) -> None:
    assert provider_errors(history)
    with pytest.raises(ags.UsageError, match="not provider-valid") as raised:
        assert_provider_valid(history)
    assert problem in str(raised.value)
