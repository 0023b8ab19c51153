"""chaz's errors as HTTP answers: one table from error class to status, and a
JSON body that carries the stable code (docs/http.md#errors)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from chaz import errors

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
