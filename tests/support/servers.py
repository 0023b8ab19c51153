"""Reaching the machine's servers from tests: a full server is not a missing one.

A test run on a shared machine can find PostgreSQL refusing connections
because other runs hold them all (``too many clients``). That server is
there: skipping would hide every test that needs it (the soak was skipped
so, silently), and "not reachable" would send whoever reads the report to
start a server that is running. So a full server always fails the run, with
a message that says it is full; only a server that does not answer skips,
and in CI that fails too.
"""

from __future__ import annotations

import os

import psycopg
import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

#: PostgreSQL's words for a server (or a role's or database's share of it)
#: with no connection left: its SQLSTATE 53300 does not reach psycopg for an
#: error raised while connecting.
_FULL = ("too many clients", "too many connections", "remaining connection slots are reserved")


def unavailable(what: str, exc: Exception) -> None:
    """Fail (in CI) or skip (elsewhere) because ``what`` did not answer."""
    message = f"{what} is not reachable: {exc}"
    if IN_CI:
        pytest.fail(message + " (CI=true: a missing server is a failure)")
    pytest.skip(message)


def postgres_admin(url: str, *, autocommit: bool = True) -> psycopg.Connection:
    """A connection to ``url``; a full server fails the test, a missing one is
    :func:`unavailable`."""
    try:
        return psycopg.connect(url, autocommit=autocommit, connect_timeout=3)
    except psycopg.OperationalError as exc:
        if any(words in str(exc).lower() for words in _FULL):
            pytest.fail(
                f"PostgreSQL at {url.rsplit('@', 1)[-1]} is full: it refuses new "
                f"connections ({str(exc).strip().splitlines()[-1]}). Other test runs "
                "or clients hold them all; close them or raise max_connections."
            )
        unavailable("PostgreSQL", exc)
        raise
