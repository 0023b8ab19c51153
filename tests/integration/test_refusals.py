"""The fleet-wide refusal counter (chaz.coord.refusals) against a real Redis."""

from __future__ import annotations

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from chaz.coord import keys, refusals
from tests.conftest import free_port


def test_refusals_are_counted_by_code(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        client.delete(keys.refusals())
        assert refusals.counts(client) == {}
        refusals.count(client, "quota.queue_full")
        refusals.count(client, "quota.queue_full")
        refusals.count(client, "session.archived")
        assert refusals.counts(client) == {"quota.queue_full": 2, "session.archived": 1}
    finally:
        client.delete(keys.refusals())
        client.close()


def test_counting_without_redis_is_silent() -> None:
    # Nothing listens on this port: the refusal itself must still reach its caller.
    gone = redis.Redis(port=free_port(), socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    refusals.count(gone, "quota.queue_full")
