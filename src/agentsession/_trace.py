"""Optional OpenTelemetry spans around a store's operations (the ``otel`` extra).

Tracing is off unless turned on, by :func:`enable` or by setting the environment variable
``AGENTSESSION_TRACING=1`` before agentsession is imported. While it is off, nothing of
OpenTelemetry is imported and a call site pays one attribute check::

    if _trace.enabled:
        with _trace.span("agentsession.append", session_id=sid, events=1):
            return self._append_one(event)
    return self._append_one(event)

(:func:`span` itself returns a shared no-op span when tracing is off, for call sites that are
not hot.) Spans go to the OpenTelemetry tracer provider the application configured (or the one
passed to :func:`enable`), nested under whatever span is current.

A span's attributes are limited to the names of :class:`Attributes`: ids, names and counts,
never a payload, a message text, a URL or a secret. An exception leaving a span marks it as an
error with the exception's type only (its message may quote stored data, so it is not
recorded).
"""

from __future__ import annotations

import os
import threading
import warnings
from typing import TYPE_CHECKING, Any, Final, TypedDict

if TYPE_CHECKING:
    from types import TracebackType

    from opentelemetry.trace import TracerProvider
    from typing_extensions import Unpack

__all__ = [
    "ENV_VAR",
    "INSTALL_HINT",
    "Attributes",
    "Span",
    "backend_of",
    "disable",
    "enable",
    "enabled",
    "span",
]

ENV_VAR: Final = "AGENTSESSION_TRACING"
"""Set to ``1`` (or ``true``, ``yes``, ``on``) to turn tracing on when agentsession is imported."""

INSTALL_HINT: Final = "tracing needs opentelemetry-api: pip install 'agentsession[otel]'"
"""The message when tracing is asked for but OpenTelemetry's API is not installed."""

TRACER_NAME: Final = "agentsession"
"""The instrumentation scope of every span."""

enabled: bool = False
"""True while spans are recorded. Hot paths check this before building a span's attributes."""


class Attributes(TypedDict, total=False):
    """What a span may carry. Each key becomes the attribute named in :data:`ATTRIBUTE_NAMES`;
    there is no way to attach anything else. A value of None is left out."""

    session_id: str | None
    """The session id."""
    backend: str | None
    """The backend: ``memory``, ``jsonl``, ``sqlite``, ``postgres`` (see :func:`backend_of`)."""
    agent: str | None
    """The agent filter of ``messages()``."""
    event_type: str | None
    """The type of the event appended (one event, or a batch whose events share it)."""
    events: int | None
    """How many events were appended or read."""
    messages: int | None
    """How many messages ``messages()`` returned."""
    sessions: int | None
    """How many sessions a recovery pass looked at or reported."""
    status: str | None
    """A recovery status (``clean``, ``repaired``, ``live``, ``pending``, ``damaged``, ...)."""
    dry_run: bool | None
    """Whether a recovery pass wrote nothing."""


ATTRIBUTE_NAMES: Final[dict[str, str]] = {
    "session_id": "agentsession.session.id",
    "backend": "agentsession.backend",
    "agent": "agentsession.agent",
    "event_type": "agentsession.event.type",
    "events": "agentsession.events.count",
    "messages": "agentsession.messages.count",
    "sessions": "agentsession.sessions.count",
    "status": "agentsession.status",
    "dry_run": "agentsession.dry_run",
}
"""The OpenTelemetry attribute name of each key of :class:`Attributes`."""

_tracer: Any = None
_mutex = threading.Lock()
_backend_names: dict[type, str] = {}


def _attributes(given: Attributes) -> dict[str, Any]:
    names = ATTRIBUTE_NAMES
    return {names[key]: value for key, value in given.items() if value is not None}


class Span:
    """A span in a ``with`` block. This base class is the no-op span returned while tracing
    is off; :meth:`set` adds attributes known only at the end (a count of results)."""

    __slots__ = ()

    def __enter__(self) -> Span:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    def set(self, **attributes: Unpack[Attributes]) -> None:
        """Add attributes to the span (nothing while tracing is off)."""


_NO_SPAN: Final = Span()


class _LiveSpan(Span):
    """A recording span: the OpenTelemetry span made current for the ``with`` block."""

    __slots__ = ("_manager", "_span")

    def __init__(self, tracer: Any, name: str, attributes: dict[str, Any]) -> None:
        self._manager = tracer.start_as_current_span(
            name, attributes=attributes, record_exception=False, set_status_on_exception=False
        )
        self._span: Any = None

    def __enter__(self) -> Span:
        self._span = self._manager.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc_type is not None:
                from opentelemetry.trace import Status, StatusCode

                self._span.set_attribute(
                    "error.type", f"{exc_type.__module__}.{exc_type.__qualname__}"
                )
                self._span.set_status(Status(StatusCode.ERROR, exc_type.__name__))
        finally:
            # The exception was described above; OpenTelemetry is told nothing more of it.
            self._manager.__exit__(None, None, None)

    def set(self, **attributes: Unpack[Attributes]) -> None:
        """Add attributes to the span."""
        self._span.set_attributes(_attributes(attributes))


def span(name: str, **attributes: Unpack[Attributes]) -> Span:
    """A span named ``name`` (``agentsession.<operation>``) with ``attributes``, for a
    ``with`` block; the shared no-op span while tracing is off."""
    tracer = _tracer
    if not enabled or tracer is None:
        return _NO_SPAN
    return _LiveSpan(tracer, name, _attributes(attributes))


def backend_of(obj: object) -> str:
    """A short backend name for a session or store object: its class name without a
    ``Session``/``Store``/``Log`` suffix, lower-cased (``JsonlSession`` is ``jsonl``); a session
    made with a log storage is named by its log (``MemoryLog`` is ``memory``)."""
    log = getattr(obj, "_log", None)
    if log is not None:
        obj = log
    kind = type(obj)
    name = _backend_names.get(kind)
    if name is None:
        name = kind.__name__
        for suffix in ("Session", "Store", "Log"):
            if name.endswith(suffix) and len(name) > len(suffix):
                name = name[: -len(suffix)]
                break
        name = name.lower()
        _backend_names[kind] = name
    return name


def _package_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agentsession")
    except PackageNotFoundError:
        return None


def enable(tracer_provider: TracerProvider | None = None) -> None:
    """Record spans from now on, through ``tracer_provider`` (default: OpenTelemetry's global
    provider, also one the application sets later). Raises ``ImportError`` with the install
    command when ``opentelemetry-api`` is not installed."""
    global _tracer, enabled
    try:
        from opentelemetry import trace
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    tracer = trace.get_tracer(TRACER_NAME, _package_version(), tracer_provider=tracer_provider)
    with _mutex:
        _tracer = tracer
        enabled = True


def disable() -> None:
    """Stop recording spans; spans already open end normally."""
    global _tracer, enabled
    with _mutex:
        enabled = False
        _tracer = None


def _enable_from_environment() -> None:
    if os.environ.get(ENV_VAR, "").strip().lower() not in ("1", "true", "yes", "on"):
        return
    try:
        enable()
    except ImportError:
        warnings.warn(f"{ENV_VAR} is set, but {INSTALL_HINT}", RuntimeWarning, stacklevel=3)


_enable_from_environment()
