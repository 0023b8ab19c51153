"""The most bytes one request body may carry, enforced before anything reads it.

FastAPI reads a whole body into memory before a route's own checks refuse
an oversized field, so without a cap one request of a few gigabytes takes
a replica's memory. :class:`BodyLimit` answers ``413 request.too_large``
when ``Content-Length`` says too much, and cuts a chunked body off at the
first byte past the cap, before the route sees any of it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from chaz.errors import RequestTooLarge
from chaz.server.errors import body_of

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: JSON may spell one byte of content in six (``\\u0001``), and a body holds
#: more than the content: room for a post of the largest content allowed.
ENCODING_ROOM = 6
#: What a body carries besides its content (ids, options, metadata).
OVERHEAD_BYTES = 64 * 1024


def body_limit(max_content_bytes: int) -> int:
    """The cap on a request body for a deployment whose content cap is ``max_content_bytes``."""
    return max_content_bytes * ENCODING_ROOM + OVERHEAD_BYTES


class BodyLimit:
    """ASGI middleware: a request body past ``limit`` bytes is ``413 request.too_large``."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        #: The most bytes a request body may carry.
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, refusing it if its body is past the limit."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            await self._refuse(send, declared)
            return
        seen = 0
        refused = False

        async def counted() -> Message:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    refused = True
                    raise _TooLarge
            return message

        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except _TooLarge:
            if not started:
                await self._refuse(send, seen)
        except Exception:
            # A route that caught the cut-off and failed another way: the
            # refusal is still the answer, if none was started.
            if not refused or started:
                raise
            await self._refuse(send, seen)

    async def _refuse(self, send: Send, size: int) -> None:
        exc = RequestTooLarge(
            f"the request body is past {self.limit} bytes",
            field="body",
            limit=self.limit,
            size=size,
        )
        payload = json.dumps(body_of(exc)).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})


class _TooLarge(Exception):
    """Raised into the app when the body passes the limit."""


def _content_length(scope: Scope) -> int | None:
    """The request's declared ``Content-Length``, or None (absent or not a number)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
