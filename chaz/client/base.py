"""What every namespace of :class:`chaz.Client` shares: the principal it acts
as, and backend failures reported as chaz errors with a stable code."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

import redis
import sqlalchemy.exc

from chaz.domain.entries import parse_sender
from chaz.domain.jobs import Job
from chaz.domain.principals import Grant, Principal
from chaz.domain.sessions import Session
from chaz.domain.validation import check_ref, check_text
from chaz.errors import BackendUnavailable, Forbidden
from chaz.services import Services

P = ParamSpec("P")
R = TypeVar("R")
_C = TypeVar("_C", bound=type)


def backend_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Report an unreachable Redis or database as a chaz error with a stable code."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except (redis.RedisError, redis.exceptions.SlotNotCoveredError) as exc:
            # SlotNotCoveredError: a Redis Cluster shard is down (it is no RedisError).
            raise BackendUnavailable(f"Redis is unavailable: {exc}") from exc
        except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError) as exc:
            raise BackendUnavailable(f"the database is unavailable: {exc.orig}") from exc
        except sqlalchemy.exc.TimeoutError as exc:
            # Not a driver error: the pool had no free connection in time.
            raise BackendUnavailable(
                "the database is unavailable: no pooled connection was free within "
                "CHAZ_DB_POOL_TIMEOUT (raise CHAZ_DB_POOL_SIZE, or the database is slow)"
            ) from exc

    return wrapper


def translating(cls: _C) -> _C:
    """Apply :func:`backend_errors` to every public method of a namespace."""
    for name, value in list(vars(cls).items()):
        if callable(value) and not name.startswith("_"):
            setattr(cls, name, backend_errors(value))
    return cls


class Acting:
    """What every namespace shares: the services, and the principal it acts as.

    Each public method checks its grant first, before anything is looked up,
    and finds objects only in the principal's project: one of another
    project is answered exactly as a missing one (docs/security.md).
    """

    def __init__(self, services: Services, principal: Principal) -> None:
        self._svc = services
        self._principal = principal

    @property
    def _project(self) -> str:
        return self._principal.project

    def _may(self, grant: Grant, action: str) -> None:
        self._principal.require(grant, action)

    def _sender(self, sender: str | None, operator_default: str | None = None) -> str:
        """Whom a write is from: ``sender`` if this principal may write as it.

        An operator's client writes as anyone (``None``: ``operator_default``,
        else itself); an API-key client writes only as its own principal, so
        it cannot pose as a person or an agent (``auth.forbidden``)."""
        principal = self._principal
        if sender is None:
            sender = operator_default if principal.operator and operator_default else principal.name
        parse_sender(check_text("sender", sender))
        if not principal.operator and sender != principal.name:
            raise Forbidden(
                f"{principal.name} may not write as {sender}: an API key writes as itself",
                sender=sender,
            )
        return sender

    def _session(self, ref: str, field: str = "session") -> Session:
        """The session of an id or exact name, in the principal's project."""
        return self._svc.store.get_session(check_ref(field, ref), project=self._project)

    def _job(self, execution_id: str) -> Job:
        """The job of an id, in the principal's project."""
        return self._svc.store.get_job(
            check_ref("execution_id", execution_id), project=self._project
        )


def iterating(items: Iterator[R]) -> Iterator[R]:
    """``items``, with a backend failure while iterating reported as a chaz error too."""
    step = backend_errors(items.__next__)
    try:
        while True:
            try:
                item = step()
            except StopIteration:
                return
            yield item
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()
