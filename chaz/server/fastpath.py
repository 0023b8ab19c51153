"""``POST /threads/{thread_id}/runs/wait`` answered below FastAPI's routing and
dependency layers (docs/http.md#the-fast-path).

FastAPI's own machinery cost about half a millisecond of CPU per request
before a route's code ran (docs/performance.md#http-chaz-serve-against-langgraph-dev):
matching the path against some fifty routes, its exception and exit-stack
layers, solving the route's dependencies and encoding the answer. The run's
wait is the route a client calls most, so :class:`FastRuns`, an ASGI
middleware inside the body cap and the trace context, takes that one route
itself: it authenticates the key as the ``Caller`` dependency does, calls
the route's own :func:`chaz.server.runs.wait_run_call`, and answers errors
through the app's own table (:func:`chaz.server.errors.error_answer`).

Anything it is not sure to answer exactly as FastAPI would goes on to
FastAPI untouched, its body replayed: a body that is not a JSON object, a
content type other than JSON, an app mounted under a root path. The route
stays declared with FastAPI, so ``/openapi.json`` is unchanged, and a test
holds both answers equal (tests/acceptance/test_http_fastpath.py).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from chaz.server import runs
from chaz.server.errors import error_answer
from chaz.server.limits import ASGIApp, Message, Receive, Scope, Send
from chaz.server.state import Server, call_of

_PREFIX = "/threads/"
_SUFFIX = "/runs/wait"


class FastRuns:
    """ASGI middleware: answers ``POST /threads/{thread_id}/runs/wait`` itself
    (as FastAPI's route would), and passes every other request on."""

    def __init__(self, app: ASGIApp, server: Server) -> None:
        self.app = app
        self.server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer a run's wait, or pass the request on."""
        thread_id = _thread_of(scope)
        if thread_id is None:
            await self.app(scope, receive, send)
            return
        body, complete = await _read(receive)
        given = _json_object(scope, body) if complete else None
        if given is None:
            # FastAPI's own answer (its 422 for a body that is not JSON, say).
            await self.app(scope, _replay(body, receive, complete), send)
            return
        request = Request(scope, receive)
        try:
            c = await call_of(self.server, request.headers)
            response = await runs.wait_run_call(c, thread_id, given, request)
        except Exception as exc:
            response = error_answer(exc)
        await response(scope, receive, send)


def _thread_of(scope: Scope) -> str | None:
    """The thread id of a ``POST /threads/{thread_id}/runs/wait``, else None."""
    if scope["type"] != "http" or scope["method"] != "POST" or scope.get("root_path"):
        return None
    path: str = scope["path"]
    if not (path.startswith(_PREFIX) and path.endswith(_SUFFIX)):
        return None
    thread_id = path[len(_PREFIX) : -len(_SUFFIX)]
    # FastAPI's path parameter: one non-empty segment.
    return thread_id if thread_id and "/" not in thread_id else None


async def _read(receive: Receive) -> tuple[bytes, bool]:
    """The request's body, and whether it arrived whole (not cut by a disconnect)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks), True


def _json_object(scope: Scope, body: bytes) -> dict[str, Any] | None:
    """The body as the JSON object FastAPI's ``Body()`` would give the route,
    or None where FastAPI's answer may differ (it is then left to FastAPI)."""
    for name, value in scope["headers"]:
        if name == b"content-type":
            kind = value.split(b";", 1)[0].strip().lower()
            if kind != b"application/json":
                return None
    if not body:
        return None
    try:
        given = json.loads(body)
    except ValueError:
        return None
    return given if isinstance(given, dict) else None


def _replay(body: bytes, receive: Receive, complete: bool) -> Receive:
    """A ``receive`` that gives ``body`` once, then what ``receive`` gives."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": not complete}
        return await receive()

    return replayed
