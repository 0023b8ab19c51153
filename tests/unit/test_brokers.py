"""CHAZ_BROKER_URL and the Celery settings each broker gets (docs/brokers.md)."""

from __future__ import annotations

import pytest
import redis
from celery import Celery
from pydantic import ValidationError

from chaz.brokers import QUEUES, broker_conf, configure, whole_seconds
from chaz.settings import Settings, broker_url_for
from chaz.usecases.doctor import check_queues

AMQP = "amqp://guest:secret@rabbit:5672/chaz"


def test_the_broker_defaults_to_the_redis_in_force() -> None:
    s = Settings(_env_file=None, redis_url="redis://r:6379/3", broker_url=None)
    assert broker_url_for(s) == "redis://r:6379/3"
    s = Settings(_env_file=None, redis_url="redis://r:6379/3", broker_url=f"  {AMQP} ")
    assert broker_url_for(s) == AMQP
    assert s.masked()["broker_url"] == "amqp://guest:****@rabbit:5672/chaz"


@pytest.mark.parametrize("url", ["sqs://x", "rabbit://h", "http://h", "amqp"])
def test_a_broker_url_of_another_kind_is_refused_when_read(url: str) -> None:
    with pytest.raises(ValidationError, match="broker_url"):
        Settings(_env_file=None, broker_url=url)


def test_rabbitmq_gets_quorum_queues_on_a_topic_exchange_and_publisher_confirms() -> None:
    conf = broker_conf(AMQP)
    assert conf["broker_transport_options"] == {"confirm_publish": True}
    queues = {q.name: q for q in conf["task_queues"]}
    assert tuple(queues) == QUEUES
    for name, q in queues.items():
        assert q.queue_arguments == {"x-queue-type": "quorum"}
        assert q.exchange.type == "topic" and q.routing_key == name and q.durable


def test_a_channel_rabbitmq_closes_restarts_the_consumer_instead_of_ending_the_worker() -> None:
    # consumer_timeout's PRECONDITION_FAILED closes the channel (docs/brokers.md).
    assert broker_conf(AMQP)["broker_channel_error_retry"] is True
    assert broker_conf("redis://r:6379/0")["broker_channel_error_retry"] is False


def test_a_producer_configured_for_rabbitmq_then_redis_keeps_nothing_of_rabbitmq() -> None:
    app = Celery("t", set_as_current=False)
    configure(app.conf, AMQP)
    configure(app.conf, "redis://r:6379/0")
    assert app.conf.task_queues is None
    assert app.conf.task_default_exchange_type == "direct"
    assert app.conf.broker_transport_options == {"visibility_timeout": 3600}


def test_rabbitmq_countdowns_are_whole_seconds_of_at_least_one() -> None:
    assert whole_seconds(AMQP, 0.2) == 1.0
    assert whole_seconds(AMQP, 2.6) == 3.0
    assert whole_seconds(AMQP, None) is None
    assert whole_seconds("redis://r", 0.2) == 0.2


def test_doctor_names_rabbitmq_when_its_queues_cannot_be_read() -> None:
    # Port 1 refuses at once: nothing listens there.
    result = check_queues(redis.Redis(), "amqp://guest:guest@127.0.0.1:1/chaz")
    assert not result.ok
    assert result.detail.startswith("cannot read the queues:")
    assert result.fix == "check RabbitMQ (CHAZ_BROKER_URL)"
