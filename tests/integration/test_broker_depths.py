"""Queue depths come from the broker, wherever CHAZ_BROKER_URL puts it
(docs/brokers.md): another Redis than the coordination one is read itself."""

from __future__ import annotations

import redis

from chaz.coord.broker import queue_depths
from chaz.settings import Settings, broker_is_coordination, broker_url_for
from chaz.usecases.doctor import check_queues


def test_depths_are_read_from_a_broker_redis_apart_from_coordination(
    redis_url: str, fleet_redis_url: str
) -> None:
    # Two real Redis databases: coordination in one, the broker's queues in
    # the other, as with CHAZ_BROKER_URL naming another Redis (or a cluster
    # for coordination, which holds no queues).
    coordination = redis.Redis.from_url(redis_url)
    broker = redis.Redis.from_url(fleet_redis_url)
    try:
        coordination.delete("chaz.turns")
        broker.delete("chaz.turns")
        broker.rpush("chaz.turns", "a", "b", "c")
        settings = Settings(_env_file=None, redis_url=redis_url, broker_url=fleet_redis_url)
        assert not broker_is_coordination(settings)
        assert queue_depths(None, broker_url_for(settings))["chaz.turns"] == 3
        result = check_queues(None, broker_url_for(settings))
        assert result.ok and "chaz.turns 3" in result.detail
        # With the broker unset, the coordination client is the broker.
        same = Settings(_env_file=None, redis_url=redis_url)
        assert broker_is_coordination(same)
        assert queue_depths(coordination, broker_url_for(same))["chaz.turns"] == 0
    finally:
        broker.delete("chaz.turns")
        coordination.close()
        broker.close()
