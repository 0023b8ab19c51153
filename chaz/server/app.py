"""The ASGI app of ``chaz serve``: LangGraph Platform's routes over chaz's use
cases, authenticated by chaz's API keys (docs/http.md).

Stateless: every request reads what it needs from the database and Redis, so
any number of replicas may run behind a load balancer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from chaz import tracing
from chaz.errors import ChazError, NotFound, ValidationError
from chaz.server import (
    assistants,
    crons,
    history,
    producer,
    producer_more,
    producer_sessions,
    run_delete,
    runs,
    schemas,
    streams,
    threadless,
    threads,
)
from chaz.server.errors import BACKEND_ERRORS, RESPONSES, answer, backend_down, body_of, unexpected
from chaz.server.fastpath import FastRuns
from chaz.server.limits import BodyLimit, body_limit
from chaz.server.state import Server
from chaz.server.traced import TraceContext
from chaz.server.waits import set_threads
from chaz.services import Services


def create_app(services: Services, *, anonymous: bool = False, fast_path: bool = True) -> FastAPI:
    """The app over ``services`` (closed when the app shuts down).

    ``anonymous``: a request without an ``x-api-key`` acts as the operator;
    only for the embedded default's loopback listener (docs/http.md#auth).
    ``fast_path``: a run's wait is answered below FastAPI's layers
    (chaz/server/fastpath.py); off only for tests that compare the two."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        set_threads(services.settings.http_threads)
        try:
            yield
        finally:
            services.close()

    app = FastAPI(
        title="chaz",
        version=_version(),
        description="LangGraph Platform's API over chaz (docs/http.md).",
        lifespan=lifespan,
        responses=RESPONSES,
    )
    app.state.chaz = server = Server(services, anonymous=anonymous)
    if fast_path:
        # Inside the body cap and the trace context (added before them).
        app.add_middleware(FastRuns, server=server)
    # Before FastAPI reads a body into memory (chaz/server/limits.py).
    app.add_middleware(BodyLimit, limit=body_limit(services.settings.max_content_bytes))
    if tracing.on():
        # A caller's traceparent: its post's spans join its trace.
        app.add_middleware(TraceContext)
    app.include_router(threads.router)
    app.include_router(runs.router)
    app.include_router(streams.router)
    # Each a module of its own (docs/http.md#routes): threads.py and runs.py stay small.
    for more in (history, run_delete, threadless, crons, assistants):
        app.include_router(more.router)
    app.include_router(producer.router)
    app.include_router(producer_more.router)
    app.include_router(producer_sessions.router)
    app.add_api_route("/ok", ok, methods=["GET"])
    app.add_api_route("/info", info, methods=["GET"])
    # The bodies the routes check themselves, as /openapi.json says them.
    schemas.document(app)
    app.add_exception_handler(ChazError, _chaz_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    for backend_error in BACKEND_ERRORS:
        app.add_exception_handler(backend_error, _backend_down)
    app.add_exception_handler(StarletteHTTPException, _routing_error)
    app.add_exception_handler(Exception, _unexpected)
    return app


def ok() -> dict[str, bool]:
    """Liveness: the process answers (no key needed)."""
    return {"ok": True}


def info() -> dict[str, Any]:
    """What this server is and which optional families of routes it has."""
    return {
        "version": _version(),
        "server": "chaz",
        "flags": {"assistants": True, "crons": True, "langsmith": False},
    }


def _version() -> str:
    try:
        return version("chaz")
    except PackageNotFoundError:  # a checkout that was never installed
        return "0+unknown"


_answer = answer


async def _chaz_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ChazError)
    return _answer(exc)


async def _invalid_request(_: Request, exc: Exception) -> JSONResponse:
    """FastAPI's own checks (a body that is not JSON, a query that is not a
    number) answered as ``request.invalid`` naming the field, like any other."""
    assert isinstance(exc, RequestValidationError)
    problems = exc.errors()
    first = problems[0] if problems else {}
    where = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path")]
    field = ".".join(where) or "body"
    return _answer(ValidationError(f"{field}: {first.get('msg', 'invalid')}", field=field))


async def _routing_error(_: Request, exc: Exception) -> JSONResponse:
    """No such route, or not with that method: the status stays, and the body
    has a stable code like every other error's."""
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400:
        # A body FastAPI could not even decode (not UTF-8, say): the same
        # answer as a body that is not JSON, 422 naming the body.
        return _answer(ValidationError(f"body: {exc.detail}", field="body"))
    error: ChazError = (
        NotFound(str(exc.detail)) if exc.status_code == 404 else ValidationError(str(exc.detail))
    )
    return JSONResponse(body_of(error), status_code=exc.status_code, headers=exc.headers)


async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
    """A bug: logged with its traceback, answered 500 ``chaz.error`` without it."""
    return unexpected(exc)


async def _backend_down(_: Request, exc: Exception) -> JSONResponse:
    return backend_down(exc)
