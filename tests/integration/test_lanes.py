"""Session lanes: Redis leases with tokens, on the embedded and the server Redis."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from chaz.coord import keys
from chaz.coord.lanes import Lanes
from chaz.ids import new_id
from chaz.services import Services
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


@pytest.fixture
def lanes(services: Services) -> Lanes:
    return services.lanes


def test_acquire_is_exclusive_across_threads(lanes: Lanes) -> None:
    sid = new_id()
    n = 20
    barrier = threading.Barrier(n)
    tokens: list[str | None] = [None] * n
    errors: list[BaseException] = []

    def grab(i: int) -> None:
        barrier.wait()
        try:
            tokens[i] = lanes.acquire(sid, f"job{i}", ttl_seconds=10, project="default")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=grab, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    winners = [(i, t) for i, t in enumerate(tokens) if t is not None]
    assert len(winners) == 1, tokens
    i, token = winners[0]
    assert lanes.client.get(keys.lane(sid)) == f"{token} job{i}"
    assert lanes.held(dict.fromkeys([sid, new_id()], "default")) == {sid}
    # While it is held nobody else gets it, not even the same job again.
    assert lanes.acquire(sid, f"job{i}", ttl_seconds=10, project="default") is None
    assert lanes.release(sid, token, project="default")
    assert lanes.client.get(keys.lane(sid)) is None
    assert lanes.acquire(sid, "next", ttl_seconds=10, project="default") is not None


def test_release_with_a_wrong_token_does_nothing(lanes: Lanes, services: Services) -> None:
    sid = new_id()
    token = lanes.acquire(sid, "job1", ttl_seconds=10, project="default")
    assert token is not None
    ttl_before = services.redis.pttl(keys.lane(sid))
    for wrong in ("", "nope", token[:8], token + "x", "job1", f"{token[:-1]}0 job1"):
        if wrong == token:
            continue
        assert lanes.release(sid, wrong, project="default") is False
        assert lanes.renew(sid, wrong, ttl_seconds=60, project="default") is False
    assert lanes.client.get(keys.lane(sid)) == f"{token} job1"
    # A failed renew did not extend the lease either.
    assert services.redis.pttl(keys.lane(sid)) <= ttl_before
    assert lanes.release(sid, token, project="default") is True
    assert lanes.release(sid, token, project="default") is False  # twice is harmless
    assert lanes.client.get(keys.lane(sid)) is None


def test_renew_extends_the_lease(lanes: Lanes, services: Services) -> None:
    sid = new_id()
    token = lanes.acquire(sid, "job1", ttl_seconds=0.5, project="default")
    assert token is not None
    assert 0 < services.redis.pttl(keys.lane(sid)) <= 500
    assert lanes.renew(sid, token, ttl_seconds=5, project="default") is True
    assert 4000 < services.redis.pttl(keys.lane(sid)) <= 5000
    time.sleep(0.7)  # past the original expiry
    assert lanes.client.get(keys.lane(sid)) == f"{token} job1"
    assert lanes.acquire(sid, "job2", ttl_seconds=5, project="default") is None


def test_an_expired_lease_passes_to_another_holder(lanes: Lanes) -> None:
    sid = new_id()
    old = lanes.acquire(sid, "job1", ttl_seconds=0.2, project="default")
    assert old is not None
    assert lanes.acquire(sid, "job2", ttl_seconds=5, project="default") is None
    time.sleep(0.35)
    assert lanes.client.get(keys.lane(sid)) is None
    new = lanes.acquire(sid, "job2", ttl_seconds=5, project="default")
    assert new is not None and new != old
    # The old holder can neither renew nor release what is now someone else's.
    assert lanes.renew(sid, old, ttl_seconds=60, project="default") is False
    assert lanes.release(sid, old, project="default") is False
    assert lanes.client.get(keys.lane(sid)) == f"{new} job2"
    assert lanes.renew(sid, new, ttl_seconds=5, project="default") is True
    assert lanes.release(sid, new, project="default") is True


def test_an_expired_lease_cannot_be_renewed_back(lanes: Lanes) -> None:
    sid = new_id()
    token = lanes.acquire(sid, "job1", ttl_seconds=0.1, project="default")
    assert token is not None
    time.sleep(0.25)
    assert lanes.renew(sid, token, ttl_seconds=5, project="default") is False
    assert lanes.client.get(keys.lane(sid)) is None


def test_lanes_of_different_sessions_are_independent(lanes: Lanes) -> None:
    a, b = new_id(), new_id()
    ta = lanes.acquire(a, "job", ttl_seconds=5, project="default")
    tb = lanes.acquire(b, "job", ttl_seconds=5, project="default")
    assert ta is not None and tb is not None and ta != tb
    assert lanes.release(a, tb, project="default") is False
    assert lanes.held(dict.fromkeys([a, b], "default")) == {a, b}
    assert lanes.release(a, ta, project="default") and lanes.release(b, tb, project="default")
    assert lanes.held(dict.fromkeys([a, b], "default")) == set()
