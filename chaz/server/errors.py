"""chaz's errors as HTTP answers: one table from error class to status, and a
JSON body that carries the stable code (docs/http.md#errors)."""

from __future__ import annotations

import logging
from typing import Any

import redis
import sqlalchemy.exc
from pydantic import BaseModel, ConfigDict
from starlette.responses import JSONResponse

from chaz import errors

log = logging.getLogger(__name__)

#: Error class -> HTTP status. The most specific class listed wins (the table
#: is searched along the error's method resolution order), so a subclass
#: inherits its root's status unless it is named here.
STATUS: dict[type[errors.ChazError], int] = {
    errors.ChazError: 500,
    errors.ConfigError: 500,
    errors.ValidationError: 422,
    errors.TopologyError: 422,
    errors.RequestTooLarge: 413,
    errors.NotFound: 404,
    errors.Conflict: 409,
    errors.Unauthenticated: 401,
    errors.Unauthorized: 403,
    errors.Forbidden: 403,
    errors.QuotaError: 429,
    errors.Timeout: 504,
    errors.BackendUnavailable: 503,
}


def status_of(exc: errors.ChazError) -> int:
    """The HTTP status of a chaz error (500 for a class the table does not know)."""
    for cls in type(exc).__mro__:
        status = STATUS.get(cls)
        if status is not None:
            return status
    return 500


def body_of(exc: errors.ChazError) -> dict[str, Any]:
    """The JSON body of an error answer: ``code``, ``message``, ``retryable``,
    ``details`` (:meth:`chaz.errors.ChazError.to_dict`), and ``detail`` (the
    message), where LangGraph's clients look for one."""
    return {**exc.to_dict(), "detail": exc.message}


#: What a route's code may raise when the database or Redis is down: 503
#: ``backend.unavailable``, not a bug's 500.
BACKEND_ERRORS: tuple[type[Exception], ...] = (
    redis.RedisError,
    sqlalchemy.exc.OperationalError,
    sqlalchemy.exc.InterfaceError,
    sqlalchemy.exc.TimeoutError,
)


def answer(exc: errors.ChazError) -> JSONResponse:
    """The answer to a chaz error: its status and :func:`body_of`."""
    return JSONResponse(body_of(exc), status_code=status_of(exc))


def backend_down(exc: Exception) -> JSONResponse:
    """The answer to a backend's error (one of :data:`BACKEND_ERRORS`)."""
    return answer(_backend_error(exc))


def unexpected(exc: Exception) -> JSONResponse:
    """A bug: logged with its traceback, answered 500 ``chaz.error`` without it."""
    return answer(_internal_error(exc))


def error_answer(exc: Exception) -> JSONResponse:
    """The answer to anything a route's own code raised, as the app's
    exception handlers give it (chaz/server/app.py): for a route answered
    without FastAPI (chaz/server/fastpath.py)."""
    return answer(as_chaz(exc))


def as_chaz(exc: Exception) -> errors.ChazError:
    """The chaz error a client is told of for ``exc``, as :func:`error_answer`
    answers it: itself, ``backend.unavailable`` for a backend's error, else a
    logged bug's ``chaz.error``. A stream that already sent its head sends
    this as its ``error`` event, so that a client can tell a failed stream
    from a finished one."""
    if isinstance(exc, errors.ChazError):
        return exc
    if isinstance(exc, BACKEND_ERRORS):
        return _backend_error(exc)
    return _internal_error(exc)


def _backend_error(exc: Exception) -> errors.BackendUnavailable:
    return errors.BackendUnavailable(f"a backend is unavailable: {type(exc).__name__}")


def _internal_error(exc: Exception) -> errors.ChazError:
    log.error("unexpected error", exc_info=exc)
    return errors.ChazError("internal error (see the server's log)")


class ErrorBody(BaseModel):
    """The JSON body of every error answer, as :func:`body_of` builds it (the
    schema ``/openapi.json`` gives for each error status)."""

    model_config = ConfigDict(extra="forbid")

    code: str
    message: str
    retryable: bool
    #: Left out when the error has none.
    details: dict[str, Any] | None = None
    detail: str


#: What each error status means, as the OpenAPI document says it.
_MEANING = {
    401: "no key, or an unknown, malformed or revoked one (auth.unauthenticated)",
    403: "the key lacks the grant the route needs (auth.forbidden)",
    404: "a missing id, or one the key may not read (every *.not_found)",
    409: "a conflict with the current state (session.busy, job.illegal_transition, ...)",
    413: "the body is past the server's cap (request.too_large)",
    422: "a malformed or unsupported field, named in details.field",
    429: "a quota or rate limit (every quota.*)",
    500: "a bug or a misconfiguration (chaz.error, config.invalid)",
    503: "the database or Redis is unavailable (backend.unavailable)",
    504: "the wait ran out (timeout)",
}

#: Every error status any route may answer, each with :class:`ErrorBody`:
#: given to the app, so every route's operation lists them, routes added later
#: too (a route's own success answers are its own).
RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": meaning} for status, meaning in _MEANING.items()
}
