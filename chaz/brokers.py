"""The Celery settings that depend on the broker: Redis or RabbitMQ (docs/brokers.md).

One place, read by the workers (:mod:`chaz.celery_settings`) and by every
producer-side app (the dispatcher, ``chaz doctor``, the benchmarks), because
a producer and a worker must declare the same queues: RabbitMQ refuses a
queue declared twice with different arguments (a classic queue where a
quorum queue exists), so a producer that made up its own would fail its
first publish.

On RabbitMQ:

- **Quorum queues** (``x-queue-type: quorum``): replicated, and a message
  survives a broker node's restart. Celery sees them and switches the
  consumer to per-consumer prefetch, as quorum queues require.
- **One topic exchange**, ``chaz``, each queue bound by its own name. Topic,
  not direct, because a quorum queue holds no delayed message: a countdown
  (a turn's retry, a webhook's backoff) goes through Celery's native delayed
  delivery exchanges, which forward only to topic or fanout exchanges.
- **Publisher confirms**: a publish returns once the broker has the message,
  so a wake-up sent after a commit is not lost in a socket buffer.
- Late acks and reject-on-worker-lost are the same settings as on Redis
  (:mod:`chaz.celery_settings`).
- **A closed channel is recoverable**: RabbitMQ closes a consumer's channel
  when a delivery stays unacknowledged past its ``consumer_timeout`` (a
  turn longer than that); Celery would take it as fatal and the worker
  would exit, so the consumer reconnects instead.
"""

from __future__ import annotations

from typing import Any

from chaz.settings import is_amqp

#: The queues chaz's tasks are routed to (``task_routes`` in chaz.celery_settings).
QUEUES = ("chaz.turns", "chaz.control", "chaz.schedules")
#: RabbitMQ: the exchange every chaz queue is bound to.
EXCHANGE = "chaz"
#: Redis: a turn that outruns this is redelivered while it still runs, which
#: the lane lease fences (chaz.celery_settings says why an hour).
REDIS_VISIBILITY_TIMEOUT = 3600


def broker_conf(url: str) -> dict[str, Any]:
    """The Celery settings for the broker at ``url`` (``broker_url`` included)."""
    if not is_amqp(url):
        # Celery's defaults, spelled out: a producer app configured from a
        # RabbitMQ environment and then pointed at Redis must drop them.
        return {
            "broker_url": url,
            "broker_transport_options": {"visibility_timeout": REDIS_VISIBILITY_TIMEOUT},
            "task_queues": None,
            "task_default_exchange": None,
            "task_default_exchange_type": "direct",
            "task_default_routing_key": None,
            "broker_channel_error_retry": False,
        }
    # Imported here: the CLI's quick commands read settings without loading
    # kombu. Untyped: used as Any.
    import kombu

    k: Any = kombu
    exchange = k.Exchange(EXCHANGE, type="topic", durable=True)
    return {
        "broker_url": url,
        "broker_transport_options": {"confirm_publish": True},
        "task_queues": tuple(
            k.Queue(
                name,
                exchange,
                routing_key=name,
                durable=True,
                queue_arguments={"x-queue-type": "quorum"},
            )
            for name in QUEUES
        ),
        "task_default_exchange": EXCHANGE,
        "task_default_exchange_type": "topic",
        "task_default_routing_key": QUEUES[0],
        "worker_detect_quorum_queues": True,
        # A channel RabbitMQ closes (consumer_timeout's PRECONDITION_FAILED on
        # an ack that came too late) restarts the consumer, as a lost
        # connection does, instead of ending the worker (docs/brokers.md).
        "broker_channel_error_retry": True,
    }


def configure(conf: Any, url: str) -> None:
    """Apply :func:`broker_conf` to a Celery app's ``conf`` (a producer's, say)."""
    conf.update(broker_conf(url))


def whole_seconds(url: str, countdown: float | None) -> float | None:
    """A countdown the broker can keep: RabbitMQ's delayed delivery counts whole
    seconds and refuses one under a second, so a shorter one waits one second."""
    if countdown is None or countdown <= 0 or not is_amqp(url):
        return countdown
    return float(max(1, round(countdown)))
