"""chaz's errors as HTTP answers: one table from error class to status, and a
JSON body that carries the stable code (docs/http.md#errors)."""

from __future__ import annotations

from typing import Any

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
