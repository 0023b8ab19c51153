"""Which failures are transient: a backend that was briefly away, not a broken turn.

A turn that hits one is retried from its checkpoint as a new attempt (the
same path as a lost worker), instead of ending ``turn.crashed``: a Redis
restart, a terminated database connection or a locked SQLite file delays a
turn; it does not fail it (docs/contracts.md#invariant-8).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import redis
from sqlalchemy import exc as sa_exc

from chaz.errors import BackendUnavailable

_CLUSTER_FAULTS = (
    redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError,
    redis.exceptions.SlotNotCoveredError,
)
_SQLITE_BUSY = ("database is locked", "database is busy", "disk i/o error")


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says a backend was unreachable for a while."""
    return any(_transient(e) for e in _chain(exc))


def is_deadlock(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is PostgreSQL aborting a transaction
    to break a deadlock (SQLSTATE ``40P01``): nothing of that transaction was
    written, so it may simply be run again."""
    return any(
        isinstance(e, sa_exc.DBAPIError) and getattr(e.orig, "sqlstate", None) == "40P01"
        for e in _chain(exc)
    )


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, BackendUnavailable):
        return True
    # Connection refused or dropped, a timeout, a server still loading its data.
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        return True
    # A Redis Cluster shard down or failing over: its slots come back (or move).
    if isinstance(exc, _CLUSTER_FAULTS):
        return True
    if isinstance(exc, sa_exc.DBAPIError):
        if exc.connection_invalidated:
            return True
        if isinstance(exc.orig, sqlite3.OperationalError):
            return str(exc.orig).lower().startswith(_SQLITE_BUSY)
        # PostgreSQL: psycopg raises OperationalError for a lost or refused
        # connection and an administrator's shutdown; errors of the statement
        # itself are other classes (DataError, IntegrityError, ...).
        return isinstance(exc, (sa_exc.OperationalError, sa_exc.InterfaceError))
    # Every pooled connection stayed busy for CHAZ_DB_POOL_TIMEOUT: the
    # database is slow or the pool too small, and a later try may get one.
    return isinstance(exc, (sa_exc.DisconnectionError, sa_exc.TimeoutError))


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        # Only explicit causes: an unrelated error raised while some other
        # handler dealt with a lost connection is not itself transient.
        current = current.__cause__
