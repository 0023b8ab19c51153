"""Error answers of a ``chaz serve`` as the chaz errors they were: the JSON
body's stable ``code`` names the class (chaz/errors.py), its message and
details are kept."""

from __future__ import annotations

import json
from functools import cache

from chaz import errors
from chaz.errors import ChazError

#: A status that came without a chaz body (a proxy's page, say): the class it means.
_BY_STATUS: dict[int, type[ChazError]] = {
    401: errors.Unauthenticated,
    403: errors.Forbidden,
    404: errors.NotFound,
    409: errors.Conflict,
    413: errors.RequestTooLarge,
    422: errors.ValidationError,
    429: errors.QuotaError,
    502: errors.BackendUnavailable,
    503: errors.BackendUnavailable,
    504: errors.Timeout,
}


@cache
def classes() -> dict[str, type[ChazError]]:
    """Every error class of :mod:`chaz.errors`, by its code."""
    found: dict[str, type[ChazError]] = {ChazError.code: ChazError}
    todo = [ChazError]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if sub.__module__ == errors.__name__:
                found.setdefault(sub.code, sub)
    return found


def error_of(status: int, content: bytes) -> ChazError:
    """The chaz error an error answer carries (its code's class; a code this
    client does not know is the class of its status, the code kept in
    ``details["code"]``)."""
    try:
        body = json.loads(content)
    except ValueError:
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("code"), str):
        cls = _BY_STATUS.get(status, ChazError)
        text = content[:200].decode("utf-8", "replace")
        return cls(f"chaz serve answered {status}: {text}", status=status)
    code = body["code"]
    message = str(body.get("message", ""))
    details = body.get("details")
    details = dict(details) if isinstance(details, dict) else {}
    known = classes().get(code)
    if known is None:
        known = _BY_STATUS.get(status, ChazError)
        details["code"] = code
    # Set, not passed: a detail may be named like an argument (``message``).
    error = known(message)
    error.details = details
    return error
