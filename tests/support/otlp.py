"""A real OTLP/HTTP receiver for the tracing tests: the OpenTelemetry
project's own test sink (``oteltest.sink.HttpSink``, from
opentelemetry-python-contrib, installed with ``.[dev]``), started on a free
port, collecting every span it is sent (docs/operations.md#tracing)."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import HTTPServer
from typing import Any

import oteltest.sink
from oteltest.sink import HttpSink


@dataclass(frozen=True)
class Span:
    """One received span, its ids in hex."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    service: str
    attributes: dict[str, Any]
    links: list[tuple[str, str]] = field(default_factory=list)
    start_ns: int = 0
    end_ns: int = 0


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class Receiver:
    """What the sink received, as :class:`Span` values, with a wait on them."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.endpoint = f"http://127.0.0.1:{port}"
        self.requests = 0
        self._spans: list[Span] = []
        self._changed = threading.Condition()

    # The sink's listener interface (oteltest.sink.handler.RequestHandler).
    def handle_trace(self, request: Any, headers: Any) -> None:
        found = []
        for rs in request.resource_spans:
            attrs = {a.key: _value(a.value) for a in rs.resource.attributes}
            service = str(attrs.get("service.name", ""))
            for ss in rs.scope_spans:
                for s in ss.spans:
                    found.append(
                        Span(
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            service=service,
                            attributes={a.key: _value(a.value) for a in s.attributes},
                            links=[(li.trace_id.hex(), li.span_id.hex()) for li in s.links],
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                        )
                    )
        with self._changed:
            self.requests += 1
            self._spans.extend(found)
            self._changed.notify_all()

    def handle_metrics(self, request: Any, headers: Any) -> None:
        """Metrics are not chaz's to send here."""

    def handle_logs(self, request: Any, headers: Any) -> None:
        """Nor logs."""

    @property
    def spans(self) -> list[Span]:
        """Every span received so far."""
        with self._changed:
            return list(self._spans)

    def wait(
        self, predicate: Callable[[list[Span]], bool], timeout: float, what: str
    ) -> list[Span]:
        """The spans once ``predicate`` holds of them; fails after ``timeout`` (a
        bound on an outcome: the spans are exported by processes the test started)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self._spans):
                left = deadline - time.monotonic()
                if left <= 0:
                    names = sorted({s.name for s in self._spans})
                    raise AssertionError(f"timed out waiting for {what}; received {names}")
                self._changed.wait(min(left, 0.5))
            return list(self._spans)


class _Loopback(HTTPServer):
    """The sink's server, on the loopback interface only (the sink binds every
    interface; a test's receiver has no business beyond this machine)."""

    def __init__(self, address: tuple[str, int], handler: Any) -> None:
        super().__init__(("127.0.0.1", address[1]), handler)


# The sink builds its server from its module's name for the class.
oteltest.sink.HTTPServer = _Loopback


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def receiver() -> Iterator[Receiver]:
    """An OTLP/HTTP receiver on a free port, up until the block ends."""
    port = _free_port()
    found = Receiver(port)
    sink = HttpSink(found, logging.getLogger("otlp-sink"), port=port, daemon=True)
    sink.start()
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    try:
        yield found
    finally:
        sink.stop()
