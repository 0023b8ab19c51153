"""Claims on Redis database numbers (tests.support.redis_claims): a killed
test run's claims must not keep later runs from every number.

Against the real Redis, under a prefix of its own so that the test runs'
real claims are not touched.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
import redis

from tests.support import redis_claims
from tests.support.servers import unavailable


@pytest.fixture
def admin() -> Iterator[tuple[redis.Redis, str]]:
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0", socket_timeout=3)
    try:
        client.ping()
    except redis.RedisError as exc:
        unavailable("Redis", exc)
    prefix = f"chaz-test:claims-test:{uuid.uuid4().hex}"
    yield client, prefix
    for key in client.scan_iter(f"{prefix}:*"):
        client.delete(key)
    client.close()


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(done.stdout)


def test_a_free_number_is_claimed_and_released(admin: tuple[redis.Redis, str]) -> None:
    client, prefix = admin
    assert redis_claims.claim(client, [1, 2], prefix) == 1
    assert redis_claims.claim(client, [1, 2], prefix) == 2
    assert client.get(f"{prefix}:1") == redis_claims.owner().encode()
    redis_claims.release(client, 1, prefix)
    assert client.get(f"{prefix}:1") is None


def test_a_dead_local_owners_claim_is_taken_over(admin: tuple[redis.Redis, str]) -> None:
    client, prefix = admin
    dead = _dead_pid()
    client.set(f"{prefix}:1", f"{socket.gethostname()}:{dead}")
    client.set(f"{prefix}:2", str(dead))  # the value before claims named their host
    assert redis_claims.claim(client, [1, 2], prefix) == 1
    assert redis_claims.claim(client, [1, 2], prefix) == 2
    assert client.get(f"{prefix}:2") == redis_claims.owner().encode()


def test_live_and_foreign_claims_are_left_alone(admin: tuple[redis.Redis, str]) -> None:
    client, prefix = admin
    live = f"{socket.gethostname()}:{os.getpid()}"
    foreign = f"another-host.example:{_dead_pid()}"  # its pid means nothing here
    client.set(f"{prefix}:1", live)
    client.set(f"{prefix}:2", foreign)
    assert redis_claims.claim(client, [1, 2], prefix) is None
    assert client.mget(f"{prefix}:1", f"{prefix}:2") == [live.encode(), foreign.encode()]


def test_release_leaves_a_claim_another_run_holds(admin: tuple[redis.Redis, str]) -> None:
    client, prefix = admin
    client.set(f"{prefix}:1", "another-host.example:1")
    redis_claims.release(client, 1, prefix)
    assert client.get(f"{prefix}:1") == b"another-host.example:1"
