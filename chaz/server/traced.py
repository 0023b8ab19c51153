"""The request's W3C trace context, made current for its route
(docs/operations.md#tracing): a post over HTTP joins its caller's trace.

Installed only when tracing is on; a pure ASGI middleware, so the route
(and the thread it runs in) sees the context the ``traceparent`` header names.
"""

from __future__ import annotations

from typing import Any

from chaz import tracing

_WANTED = {key.encode("latin-1") for key in tracing.CARRIER_KEYS}


class TraceContext:
    """Joins each HTTP request to the trace its ``traceparent`` header names."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Run the request under its caller's trace context, if it sent one."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope.get("headers", ())
            if name.lower() in _WANTED
        }
        with tracing.joined(headers or None):
            await self.app(scope, receive, send)
