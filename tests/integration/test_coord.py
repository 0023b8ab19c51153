"""Cancel flags and idempotency claims against real Redis, on both stacks."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from chaz.coord import keys
from chaz.coord.claims import IdempotencyClaims
from chaz.coord.flags import CancelFlags
from chaz.ids import new_id
from chaz.services import Services
from tests.support.concurrency import race
from tests.support.stack import Stack


@pytest.fixture(scope="module")
def mstack(module_stack: Stack) -> Stack:
    return module_stack


@pytest.fixture
def services(mstack: Stack) -> Iterator[Services]:
    svc = Services(mstack.settings)
    try:
        yield svc
    finally:
        svc.close()


def test_a_cancel_flag_holds_its_reason_and_a_restore_keeps_it(services: Services) -> None:
    flags: CancelFlags = services.flags
    job = new_id()
    assert not flags.requested(job, "default")
    flags.restore(job, "default")  # lost with Redis: restored with the default reason
    assert flags.requested(job, "default")
    assert services.redis.get(keys.cancel(job)) == "cancelled"

    other = new_id()
    flags.request(other, "default", "user asked")
    flags.restore(other, "default")
    assert services.redis.get(keys.cancel(other)) == "user asked"
    third = new_id()
    flags.request(third, "")  # no reason: the default
    assert services.redis.get(keys.cancel(third)) == "cancelled"
    services.redis.delete(keys.cancel(job), keys.cancel(other), keys.cancel(third))


def test_one_claim_per_key_among_concurrent_takers(services: Services) -> None:
    claims: IdempotencyClaims = services.claims
    sid = new_id()
    results = race(20, lambda i: claims.take(sid, "user:k"))
    assert results.count(True) == 1
    assert claims.held(sid, "user:k")
    assert not claims.held(sid, "runtime:k")  # another scope is another claim
    assert claims.take(sid, "runtime:k")

    claims.release(sid, "user:k")
    assert not claims.held(sid, "user:k")
    assert claims.take(sid, "user:k")  # free again
    claims.release(sid, "user:k")
    claims.release(sid, "runtime:k")


def test_a_claim_expires_if_nobody_releases_it(services: Services) -> None:
    claims = services.claims
    sid = new_id()
    assert claims.take(sid, "user:k", ttl_seconds=1)
    assert 0 < services.redis.ttl(keys.idempotency_claim(sid, "user:k")) <= 1
    deadline = time.monotonic() + 5
    while claims.held(sid, "user:k") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not claims.held(sid, "user:k")
