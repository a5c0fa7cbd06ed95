"""Optional OpenTelemetry spans (``agentsession._trace``): off and free by default, recorded
through the application's tracer provider when enabled, and never carrying a payload.

The spans are checked with the OpenTelemetry SDK's in-memory exporter (the dev extra installs
the SDK); the no-op path runs in subprocesses where OpenTelemetry cannot be imported.
Subprocesses run with ``subprocess.run(..., timeout=...)``, which kills one that overruns.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentsession
from agentsession import _trace

pytest.importorskip("opentelemetry.sdk", reason="the OpenTelemetry SDK comes with the dev extra")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode

SECRET = "s3cret-Sentinel-4217"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """Tracing enabled through a provider of this test's own, exporting to memory."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    _trace.enable(tracer_provider=provider)
    try:
        yield memory
    finally:
        _trace.disable()
        provider.shutdown()


@pytest.fixture(autouse=True)
def _tracing_off() -> Iterator[None]:
    _trace.disable()  # also when AGENTSESSION_TRACING was set for the test run
    yield
    _trace.disable()


def finished(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return list(exporter.get_finished_spans())


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter, with tracing off unless ``env`` turns it on."""
    base = {k: v for k, v in os.environ.items() if k != _trace.ENV_VAR}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, **env},
        check=False,
    )


# -- the helper -------------------------------------------------------------------------------


def test_tracing_is_off_by_default_and_span_is_the_shared_no_op() -> None:
    assert _trace.enabled is False
    first = _trace.span("agentsession.append", session_id="s", events=1)
    assert first is _trace.span("agentsession.read")
    with first as handle:
        handle.set(events=3)


def test_a_span_carries_the_named_attributes_only(exporter: InMemorySpanExporter) -> None:
    with _trace.span(
        "agentsession.append",
        session_id="conv",
        backend="jsonl",
        events=2,
        event_type="user/message",
        agent=None,
    ) as span:
        span.set(status="ok")
    [recorded] = finished(exporter)
    assert recorded.name == "agentsession.append"
    assert dict(recorded.attributes or {}) == {
        "agentsession.session.id": "conv",
        "agentsession.backend": "jsonl",
        "agentsession.events.count": 2,
        "agentsession.event.type": "user/message",
        "agentsession.status": "ok",
    }
    assert recorded.instrumentation_scope is not None
    assert recorded.instrumentation_scope.name == "agentsession"
    assert recorded.instrumentation_scope.version == agentsession.__version__
    assert recorded.status.status_code == StatusCode.UNSET


def test_spans_nest_under_the_current_span(exporter: InMemorySpanExporter) -> None:
    with _trace.span("agentsession.recover", sessions=2), _trace.span("agentsession.read"):
        pass
    inner, outer = finished(exporter)
    assert inner.parent is not None and outer.context is not None
    assert inner.parent.span_id == outer.context.span_id


def test_an_exception_marks_the_span_with_its_type_only(exporter: InMemorySpanExporter) -> None:
    with pytest.raises(agentsession.ConflictError), _trace.span("agentsession.append"):
        raise agentsession.ConflictError(f"the payload was {SECRET}")
    [recorded] = finished(exporter)
    assert recorded.status.status_code == StatusCode.ERROR
    assert recorded.status.description == "ConflictError"
    assert (recorded.attributes or {})["error.type"] == "agentsession.errors.ConflictError"
    assert list(recorded.events) == []  # no exception event: its message may quote data
    assert SECRET not in recorded.to_json()


def test_disable_stops_recording(exporter: InMemorySpanExporter) -> None:
    with _trace.span("agentsession.read"):
        pass
    _trace.disable()
    with _trace.span("agentsession.read"):
        pass
    assert [s.name for s in finished(exporter)] == ["agentsession.read"]


def test_every_attribute_key_has_an_opentelemetry_name() -> None:
    assert set(_trace.Attributes.__annotations__) == set(_trace.ATTRIBUTE_NAMES)
    assert all(name.startswith("agentsession.") for name in _trace.ATTRIBUTE_NAMES.values())


def test_backend_names_come_from_the_class(tmp_path: Path) -> None:
    with agentsession.open_store(str(tmp_path / "j")) as jsonl:
        assert _trace.backend_of(jsonl) == "jsonl"
        assert _trace.backend_of(jsonl.get("s")) == "jsonl"
    with agentsession.open_store(f"sqlite:///{tmp_path}/s.db") as sqlite:
        assert _trace.backend_of(sqlite.get("s")) == "sqlite"
    assert _trace.backend_of(agentsession.open_store("memory:")) == "memory"


# -- without OpenTelemetry, and the environment switch ----------------------------------------


def test_without_opentelemetry_everything_works_and_enable_says_what_to_install() -> None:
    result = run_python(
        """
        import sys
        sys.modules["opentelemetry"] = None   # as if opentelemetry-api were not installed
        import agentsession
        from agentsession import _trace
        assert _trace.enabled is False
        with _trace.span("agentsession.append", session_id="s") as span:
            span.set(events=1)
        store = agentsession.open_store("memory:")
        store.get("s").append(agentsession.Event.new("user/message",
                                                     agentsession.Message.user("hi")))
        try:
            _trace.enable()
        except ImportError as exc:
            print(exc)
        print(_trace.enabled)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [_trace.INSTALL_HINT, "False"]


def test_while_tracing_is_off_nothing_of_opentelemetry_is_imported() -> None:
    result = run_python(
        """
        import sys
        import agentsession, agentsession.session, agentsession.store
        from agentsession import _trace
        store = agentsession.open_store("memory:")
        session = store.get("s")
        session.append(agentsession.Event.new("user/message", agentsession.Message.user("hi")))
        session.messages()
        store.recover()
        print(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_environment_variable_turns_tracing_on() -> None:
    result = run_python(
        """
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )
        memory = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(memory))
        trace.set_tracer_provider(provider)
        from agentsession import _trace
        with _trace.span("agentsession.read", session_id="s"):
            pass
        print(_trace.enabled, [s.name for s in memory.get_finished_spans()])
        """,
        AGENTSESSION_TRACING="1",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True ['agentsession.read']"


def test_the_environment_variable_without_opentelemetry_warns_and_imports() -> None:
    result = run_python(
        """
        import sys, warnings
        sys.modules["opentelemetry"] = None
        warnings.simplefilter("always")
        with warnings.catch_warnings(record=True) as caught:
            from agentsession import _trace
        print(_trace.enabled)
        for w in caught:
            print(w.category.__name__, w.message)
        """,
        AGENTSESSION_TRACING="1",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "False",
        f"RuntimeWarning {_trace.ENV_VAR} is set, but {_trace.INSTALL_HINT}",
    ]


# -- the library's operations (once session.py, store.py and recovery.py call the helper) ----

WIRED = hasattr(agentsession.session, "_trace")
NOT_WIRED = "session.py does not call agentsession._trace yet"


def all_attribute_values(spans: list[ReadableSpan]) -> list[Any]:
    return [value for span in spans for value in (span.attributes or {}).values()]


@pytest.mark.skipif(not WIRED, reason=NOT_WIRED)
@pytest.mark.parametrize("target", ["memory", "jsonl", "sqlite"])
def test_append_read_messages_and_recover_are_traced_without_payloads(
    exporter: InMemorySpanExporter, tmp_path: Path, target: str
) -> None:
    url = {
        "memory": "memory:",
        "jsonl": str(tmp_path / "store"),
        "sqlite": f"sqlite:///{tmp_path}/s.db",
    }[target]
    with agentsession.open_store(url) as store:
        session = store.get("conv")
        session.append(agentsession.Event.new("user/message", agentsession.Message.user(SECRET)))
        session.append_many(
            [
                agentsession.Event.new("turn/start", agentsession.events.TurnStart()),
                agentsession.Event.new(
                    "assistant/message",
                    agentsession.Message.assistant(
                        tool_calls=[agentsession.ToolCall("c1", "x", {"k": SECRET})]
                    ),
                    meta={"token": SECRET},
                ),
            ]
        )
        session.read()
        session.messages(agent="coder")
        store.recover()
    spans = {span.name: span for span in finished(exporter)}
    assert {
        "agentsession.append",
        "agentsession.read",
        "agentsession.messages",
        "agentsession.recover",
    } <= set(spans)
    append = dict(spans["agentsession.append"].attributes or {})
    assert append["agentsession.session.id"] == "conv"
    assert append["agentsession.backend"] == target
    assert dict(spans["agentsession.read"].attributes or {})["agentsession.events.count"] == 3
    assert dict(spans["agentsession.messages"].attributes or {})["agentsession.agent"] == "coder"
    assert not [v for v in all_attribute_values(finished(exporter)) if SECRET in str(v)]
