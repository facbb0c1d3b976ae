"""OpenTelemetry traces: a span per request and per tool call, child spans for storage,
credential checks, OAuth and MCP upstream calls, and W3C trace context in and out.

Optional: the `otel` extra installs the SDK and the OTLP exporter, and `serve` turns tracing
on only when asked (`TOOLKIT_VAULT_OTEL_TRACES=on`; the exporter reads the standard
`OTEL_EXPORTER_OTLP_*` variables). Off, or without the extra, `span` hands back one shared
object that does nothing, so the hot path pays a function call.

The vault's tracer provider is its own, not OpenTelemetry's global one: a library in the
process that traces does not see our spans, and tests can configure a fresh one.

No attribute carries a value: span names come from a fixed set (`SPANS`), attribute keys
from another (`ATTRIBUTES`), and an attribute's value is kept only when it is a number, a
boolean or a name-shaped string (`labels.TYPE_SHAPE`: a toolkit, a tool, a message type,
an outcome). A session id, a token, a URL or an argument never fits a key; anything that
does not fit is dropped, silently.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, MutableMapping
from contextlib import AbstractContextManager
from typing import Any, ParamSpec, TypeVar

from toolkit_vault.telemetry.labels import TYPE_SHAPE

__all__ = [
    "ATTRIBUTES",
    "SPANS",
    "Traced",
    "annotate",
    "carried",
    "configure_tracing",
    "continued",
    "current",
    "environment",
    "inject",
    "span",
    "stop_tracing",
    "tracing",
]

log = logging.getLogger(__name__)
T = TypeVar("T")
P = ParamSpec("P")

SPANS = frozenset({
    "request",  # one A2E or MCP message, or an HTTP request (transports)
    "tool_call",  # one tool call (the engine)
    "storage.read",
    "storage.write",
    "credential_check",
    "oauth.refresh",
    "oauth.token_request",
    "mcp.upstream",  # a request to an imported MCP server
})  # fmt: skip
ATTRIBUTES = frozenset({
    "transport", "message.type", "outcome", "toolkit", "tool", "http.request.method",
    "http.response.status_code", "db.system", "retries", "storage.batch",
})  # fmt: skip

_tracer: Any = None  # an SDK Tracer while tracing is on
_provider: Any = None


class _Nothing:
    """The span of tracing turned off: a context manager and a span that do nothing."""

    __slots__ = ()

    def __enter__(self) -> _Nothing:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def set(self, **_attributes: object) -> None:
        return None

    def link(self, _context: object) -> None:
        return None


_NOTHING = _Nothing()


class _Span:
    """A live span, entered as the current one; `set` adds attributes (filtered)."""

    __slots__ = ("_manager", "_span")
    _span: Any

    def __init__(self, manager: Any) -> None:
        self._manager, self._span = manager, None

    def __enter__(self) -> _Span:
        self._span = self._manager.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._manager.__exit__(*exc)

    def set(self, **attributes: object) -> None:
        for key, value in _allowed(attributes).items():
            self._span.set_attribute(key, value)

    def link(self, context: object) -> None:
        """Link this span to another's (`current`, taken where that one ran), if any."""
        if context is not None:
            self._span.add_link(context)


Traced = _Span | _Nothing  # what `span` hands back: `with` it, `set` attributes on it


def tracing() -> bool:
    return _tracer is not None


def span(name: str, **attributes: object) -> _Span | _Nothing:
    """A span named `name` (one of SPANS), child of the current one, to enter with `with`.
    Only attributes of ATTRIBUTES with name-shaped values are kept. A failure inside
    marks it as an error by its exception's type only (never its message)."""
    tracer = _tracer
    if tracer is None or name not in SPANS:
        return _NOTHING
    manager = tracer.start_as_current_span(
        name,
        attributes=_allowed(attributes),
        record_exception=False,  # an exception's message may hold what we never log
        set_status_on_exception=False,
    )
    return _ErrorsByType(manager)


class _ErrorsByType(_Span):
    __slots__ = ()

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is not None and self._span is not None:
            from opentelemetry.trace import Status, StatusCode

            self._span.set_status(Status(StatusCode.ERROR))
            self._span.set_attribute("error.type", exc[0].__name__)
        self._manager.__exit__(*exc)


def _allowed(attributes: Mapping[str, object]) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for key, value in attributes.items():
        key = key.replace("__", ".")
        if key not in ATTRIBUTES:
            continue
        if isinstance(value, bool | int | float) or (
            isinstance(value, str) and TYPE_SHAPE.fullmatch(value)
        ):
            kept[key] = value
    return kept


def current() -> object | None:
    """The current span's context, for another span to link to (`Traced.link`: a write
    that committed other threads' records too); None while tracing is off."""
    if _tracer is None:
        return None
    from opentelemetry import trace

    return trace.get_current_span().get_span_context()


def annotate(**attributes: object) -> None:
    """Add attributes (filtered as `span`'s) to the current span, if tracing is on."""
    if _tracer is None:
        return
    from opentelemetry import trace

    current = trace.get_current_span()
    for key, value in _allowed(attributes).items():
        current.set_attribute(key, value)


def inject(carrier: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Add the current span's W3C `traceparent` (and `tracestate`) to `carrier` (HTTP
    headers of an upstream request; an MCP server's environment takes `TRACEPARENT`)."""
    if _tracer is not None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        TraceContextTextMapPropagator().inject(carrier)
    return carrier


def carried(function: Callable[P, T]) -> Callable[P, T]:
    """`function`, to run on another thread (the call engine's) as a child of the span
    current here: a thread starts with no trace of its own. Itself while tracing is off."""
    if _tracer is None:
        return function
    from opentelemetry import context

    current = context.get_current()

    def within(*args: P.args, **kwargs: P.kwargs) -> T:
        token = context.attach(current)
        try:
            return function(*args, **kwargs)
        finally:
            context.detach(token)

    return within


def environment() -> dict[str, str]:
    """The current trace context as a child process's environment (`TRACEPARENT`,
    `TRACESTATE`: the names OpenTelemetry's environment carrier uses), for a local MCP
    server launched within a span; empty while tracing is off."""
    return {key.upper(): value for key, value in inject({}).items()}


def continued(carrier: Mapping[str, str]) -> AbstractContextManager[None]:
    """The trace a caller's `traceparent` names, made current for the `with` block: the
    request's span becomes its child. A malformed header starts a new trace."""
    if _tracer is None:
        return _NOTHING  # type: ignore[return-value]
    from opentelemetry import context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    extracted = TraceContextTextMapPropagator().extract({k.lower(): v for k, v in carrier.items()})
    return _Attached(context, extracted)


class _Attached:
    __slots__ = ("_context", "_extracted", "_token")

    def __init__(self, context: Any, extracted: Any) -> None:
        self._context, self._extracted, self._token = context, extracted, None

    def __enter__(self) -> None:
        self._token = self._context.attach(self._extracted)

    def __exit__(self, *_exc: object) -> None:
        self._context.detach(self._token)


def configure_tracing(exporter: Any = None, *, service_name: str = "toolkit-vault") -> bool:
    """Turn tracing on: spans go to `exporter` (a test's in-memory one, sent as each ends)
    or, by default, to OTLP over HTTP in batches. False (and a warning) when the `otel`
    extra is not installed."""
    global _tracer, _provider
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    except ImportError:
        log.warning("traces asked for, but the otel extra is not installed: no traces")
        return False
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    else:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    stop_tracing()
    _provider, _tracer = provider, provider.get_tracer("toolkit_vault")
    return True


def stop_tracing() -> None:
    """Turn tracing off, sending what the exporter still holds."""
    global _tracer, _provider
    provider, _provider, _tracer = _provider, None, None
    if provider is not None:
        provider.shutdown()
