"""OpenTelemetry traces of a turn, from a producer's post to its reply
(docs/operations.md#tracing).

Off unless ``OTEL_TRACES_EXPORTER`` names an exporter (``otlp`` or
``console``; ``none`` or unset: off) and ``OTEL_SDK_DISABLED`` is not
``true``; the rest of the standard ``OTEL_*`` variables configure the SDK
(``OTEL_SERVICE_NAME``, ``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_EXPORTER_OTLP_PROTOCOL``, ``OTEL_TRACES_SAMPLER``,
``OTEL_BSP_SCHEDULE_DELAY``, ...). Off, nothing here imports the SDK: each
helper answers after one test of a module flag (:func:`on`), and the turn's
ports are not even wrapped (docs/performance.md#tracing).

The context travels as a W3C ``traceparent`` carrier: in the HTTP headers of
a remote client, in the Celery message of a wake-up (:func:`carrier`), and in
the job row (``jobs.trace_context``), so that a turn resumed by another
worker, after a SIGKILL or a hand-back, joins its post's trace. A job
admitted while a turn runs (a spawn, a message, a follow-up, a room's wake)
starts a trace of its own whose root links to the span that admitted it
(:func:`job_carrier`).
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

log = logging.getLogger(__name__)

#: The exporters :func:`configure` knows (``OTEL_TRACES_EXPORTER``, comma separated).
EXPORTERS = frozenset({"otlp", "console"})
#: The carrier's keys chaz keeps (W3C trace context).
CARRIER_KEYS = ("traceparent", "tracestate")
#: A job row's carrier is at most this long (a traceparent is 55 characters).
MAX_CARRIER = 512

_lock = threading.Lock()
_on: bool | None = None
_tracer: Tracer | None = None
_provider: TracerProvider | None = None
#: Set inside a turn's span: a job admitted there starts a linked trace.
_in_turn: contextvars.ContextVar[bool] = contextvars.ContextVar("chaz_in_turn", default=False)


def wanted(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for traces (without configuring anything)."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    names = _exporter_names(env)
    return bool(names) and names != ["none"]


def _exporter_names(env: Mapping[str, str]) -> list[str]:
    raw = env.get("OTEL_TRACES_EXPORTER", "")
    return [n.strip().lower() for n in raw.split(",") if n.strip()]


def on() -> bool:
    """Whether this process traces: the environment is read once, and the SDK
    configured on the first call that finds it asked for."""
    if _on is None:
        return configure()
    return _on


def configure() -> bool:
    """Set up the SDK from the ``OTEL_*`` variables if they ask for traces
    (idempotent; a worker calls it in ``worker_init``, a producer on its first
    span). Whether this process traces."""
    global _on, _tracer, _provider
    if _on is not None:
        return _on
    with _lock:
        if _on is not None:
            return _on
        if not wanted():
            _on = False
            return False
        try:
            _provider = _build_provider()
        except Exception:
            # A bad exporter setting must not stop a worker taking turns.
            log.exception("tracing: could not configure the OpenTelemetry SDK; tracing is off")
            _on = False
            return False
        from opentelemetry import trace

        trace.set_tracer_provider(_provider)
        _tracer = _provider.get_tracer("chaz")
        install_log_ids()
        _on = True
        return True


def _build_provider() -> TracerProvider:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    env = os.environ
    if "OTEL_SERVICE_NAME" not in env and "service.name" not in env.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    ):
        resource = Resource.create({"service.name": "chaz"})
    else:
        resource = Resource.create()
    # The sampler comes from OTEL_TRACES_SAMPLER (parentbased_always_on by default).
    provider = TracerProvider(resource=resource)
    for name in _exporter_names(env):
        if name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        elif name == "otlp":
            provider.add_span_processor(BatchSpanProcessor(_otlp_exporter(env)))
        elif name != "none":
            raise ValueError(f"OTEL_TRACES_EXPORTER: unknown exporter {name!r}")
    return provider


def _otlp_exporter(env: Mapping[str, str]) -> Any:
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    if protocol == "grpc":
        # Not a dependency of chaz: `pip install opentelemetry-exporter-otlp-proto-grpc`.
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    # The endpoint, headers, timeout and compression come from the OTEL_* variables.
    return OTLPSpanExporter()


def flush(timeout_millis: int = 5000) -> None:
    """Export the spans still buffered (a worker's shutdown; tests)."""
    if _provider is not None:
        _provider.force_flush(timeout_millis)


def shutdown() -> None:
    """Flush and stop the exporters."""
    if _provider is not None:
        _provider.shutdown()


def reset_for_tests(provider: TracerProvider | None = None, *, reread: bool = False) -> None:
    """Trace into ``provider`` (an in-memory exporter's); or, without one, turn
    tracing off, or with ``reread`` forget the configuration so that the next
    call reads the environment again."""
    global _on, _tracer, _provider
    with _lock:
        _provider = provider
        _tracer = provider.get_tracer("chaz") if provider is not None else None
        _on = True if provider is not None else (None if reread else False)
    if provider is not None:
        install_log_ids()


# -- spans ------------------------------------------------------------------------


class _Nothing:
    """The span context manager when tracing is off: it does nothing."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


NOTHING = _Nothing()


def span(
    name: str,
    attributes: Mapping[str, Any] | None = None,
    *,
    parent: str | None = None,
    turn: bool = False,
) -> Any:
    """A context manager around a span named ``name`` (yields the span, or
    None when tracing is off), a child of the current span, or of ``parent``
    (a job row's carrier) when given. ``turn``: a turn's own span, inside
    which admitted jobs start linked traces."""
    if not on():
        return NOTHING
    return _span(name, attributes, parent, turn)


@contextmanager
def _span(
    name: str, attributes: Mapping[str, Any] | None, parent: str | None, turn: bool
) -> Iterator[Span]:
    assert _tracer is not None
    ctx = from_carrier(parent) if parent is not None else None
    token = _in_turn.set(True) if turn else None
    try:
        with _tracer.start_as_current_span(name, context=ctx, attributes=_clean(attributes)) as s:
            yield s
    finally:
        if token is not None:
            _in_turn.reset(token)


def record(
    name: str,
    start_ns: int,
    end_ns: int,
    attributes: Mapping[str, Any] | None = None,
) -> None:
    """A span already over (a queue wait, an approval wait), a child of the current span."""
    if not on():
        return
    assert _tracer is not None
    s = _tracer.start_span(name, attributes=_clean(attributes), start_time=start_ns)
    s.end(end_time=max(end_ns, start_ns))


def set_attributes(attributes: Mapping[str, Any]) -> None:
    """Add attributes to the current span (nothing when off or outside a span)."""
    if not on():
        return
    from opentelemetry import trace

    trace.get_current_span().set_attributes(_clean(attributes))


def _clean(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    # OpenTelemetry refuses None values: leave them out.
    return {k: v for k, v in (attributes or {}).items() if v is not None}


# -- propagation --------------------------------------------------------------------


def carrier() -> dict[str, str] | None:
    """The current span's context as W3C headers (None when off or outside a span)."""
    if not on():
        return None
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    if not trace.get_current_span().get_span_context().is_valid:
        return None
    found: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(found)
    return found or None


def job_carrier(session_id: str) -> str | None:
    """What a new job row keeps (``jobs.trace_context``): the current span's
    context; inside a turn, the root of a new trace linked to the current
    span (the turn that admitted it), so each turn of a hand-off is a trace of its own."""
    if not on():
        return None
    if not _in_turn.get():
        return _text(carrier())
    from opentelemetry import trace
    from opentelemetry.context import Context

    assert _tracer is not None
    here = trace.get_current_span().get_span_context()
    links = [trace.Link(here)] if here.is_valid else []
    root = _tracer.start_span(
        "chaz.handoff",
        context=Context(),
        links=links,
        attributes={"chaz.session_id": session_id},
    )
    try:
        with trace.use_span(root, end_on_exit=False):
            return _text(carrier())
    finally:
        root.end()


def _text(found: dict[str, str] | None) -> str | None:
    if not found:
        return None
    text = json.dumps({k: found[k] for k in CARRIER_KEYS if k in found}, separators=(",", ":"))
    return text if len(text) <= MAX_CARRIER else None


def from_carrier(text: str | Mapping[str, str] | None) -> Context | None:
    """The context a carrier (a job row's text or headers) names; None for
    none, or for one that does not parse (a bad header starts a new trace)."""
    if not text:
        return None
    if isinstance(text, str):
        try:
            found = json.loads(text)
        except ValueError:
            return None
        if not isinstance(found, dict):
            return None
    else:
        found = {k.lower(): v for k, v in text.items()}
    headers = {k: v for k, v in found.items() if k in CARRIER_KEYS and isinstance(v, str)}
    if "traceparent" not in headers:
        return None
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    ctx = TraceContextTextMapPropagator().extract(headers)
    if not trace.get_current_span(ctx).get_span_context().is_valid:
        return None
    return ctx


@contextmanager
def joined(headers: Mapping[str, str] | None) -> Iterator[None]:
    """Make the context in ``headers`` (an HTTP request's, a Celery message's)
    current for the block; nothing when off or absent."""
    if headers is None or not on():
        yield
        return
    ctx = from_carrier(headers)
    if ctx is None:
        yield
        return
    from opentelemetry import context

    token = context.attach(ctx)
    try:
        yield
    finally:
        context.detach(token)


# -- log lines --------------------------------------------------------------------

#: What a log format adds to show a record's ids (the worker's, when tracing is on).
LOG_FORMAT_IDS = " [trace_id=%(trace_id)s span_id=%(span_id)s]"
_factory_installed = False


def install_log_ids() -> None:
    """Give every log record ``trace_id`` and ``span_id`` attributes (hex; zeros
    outside a span), for a format that names them (:data:`LOG_FORMAT_IDS`)."""
    global _factory_installed
    if _factory_installed:
        return
    _factory_installed = True
    from opentelemetry import trace

    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        ctx = trace.get_current_span().get_span_context()
        record.trace_id = format(ctx.trace_id, "032x")
        record.span_id = format(ctx.span_id, "016x")
        return record

    logging.setLogRecordFactory(factory)


class LogIds(logging.Filter):
    """A filter that sets ``trace_id`` and ``span_id`` on records the factory
    did not make (zeros), so a format naming them never fails."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "trace_id"):
            record.trace_id = "0" * 32
            record.span_id = "0" * 16
        return True
