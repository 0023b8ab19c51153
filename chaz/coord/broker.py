"""The Celery broker: its queues' depths, and a workaround that lets a worker
ride through a Redis restart.

:func:`queue_depths` reads the waiting messages for ``chaz doctor`` and
``chaz exporter``, from either broker (docs/brokers.md): on Redis each chaz
queue is a list named after it (kombu's Redis transport), on RabbitMQ a
passive declare answers the queue's count of ready messages.

The workaround below is for the Redis transport only; on RabbitMQ the
channel it patches is never opened.

When the broker connection drops, Celery's consumer (5.7) first *collects*
the broken connection, which detaches its kombu transport
(``transport.client = None``), and then closes it. Closing the channel
restores the messages the worker holds unacknowledged (every turn in flight,
``task_acks_late``), and the late ack of a turn that finishes after the
reconnect goes through that same old channel. Both build a new Redis pool
from ``transport.client``: ``AttributeError: 'NoneType' object has no
attribute 'hostname'``, which Celery treats as unrecoverable, and the worker
exits. An idle worker holds no unacked message and survives. This is a
kombu/Celery bug (kombu.transport.redis.Channel._connparams reads the
detached transport), not chaz's; until it is fixed upstream, each channel
remembers the connection it was opened on and uses it when its transport
has been detached, so the restore and the ack reach the restarted server (or
fail with a connection error, which kombu already handles: the message stays
in the unacked hash and the broker redelivers it).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import redis

from chaz.brokers import QUEUES
from chaz.settings import is_amqp

__all__ = ["QUEUES", "declare_queues", "install_restart_workaround", "queue_depths"]

#: kombu's Redis transport keeps a queue's messages of priority P > 0 in the
#: list ``NAME\\x06\\x16P`` (its default priority steps), beside ``NAME``.
_PRIORITY_STEPS = (3, 6, 9)
_PRIORITY_SEP = "\x06\x16"

_installed = False
_lock = threading.Lock()


def install_restart_workaround() -> None:
    """Patch kombu's Redis channel once per process (idempotent)."""
    global _installed
    with _lock:
        if _installed:
            return
        from kombu.transport import redis as kredis

        channel_cls: Any = kredis.Channel
        original_init = channel_cls.__init__
        original_connparams = channel_cls._connparams

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            original_init(self, *args, **kwargs)
            self._chaz_conninfo = self.connection.client

        def _connparams(self: Any, asynchronous: bool = False) -> Any:
            transport = self.connection
            saved = getattr(self, "_chaz_conninfo", None)
            if transport.client is not None or saved is None:
                return original_connparams(self, asynchronous=asynchronous)
            # A detached transport belongs to a connection Celery has given
            # up on: nobody else reads it, so lending it back its client for
            # this one call is safe.
            transport.client = saved
            try:
                return original_connparams(self, asynchronous=asynchronous)
            finally:
                transport.client = None

        channel_cls.__init__ = __init__
        channel_cls._connparams = _connparams
        _installed = True


#: How long a depth read waits for the broker before it fails (an exporter scrape
#: or a doctor run must not hang on a broker that does not answer).
AMQP_TIMEOUT = 5.0


def queue_depths(client: redis.Redis | None, broker_url: str) -> dict[str, int]:
    """Messages waiting in each of chaz's queues (every priority level), not yet
    taken by a worker: from RabbitMQ at ``broker_url``, or from Redis: ``client``
    when the broker is the coordination Redis, else (``None``) a connection of
    its own to ``broker_url`` (another Redis: the coordination one may be a
    cluster, which holds no queues). A queue no worker has declared yet holds
    nothing: 0."""
    if is_amqp(broker_url):
        return _amqp_depths(broker_url)
    if client is None:
        own = redis.Redis.from_url(
            broker_url, socket_timeout=AMQP_TIMEOUT, socket_connect_timeout=AMQP_TIMEOUT
        )
        try:
            return _redis_depths(own)
        finally:
            own.close()
    return _redis_depths(client)


def _redis_depths(client: redis.Redis) -> dict[str, int]:
    pipe = client.pipeline(transaction=False)
    for queue in QUEUES:
        pipe.llen(queue)
        for step in _PRIORITY_STEPS:
            pipe.llen(f"{queue}{_PRIORITY_SEP}{step}")
    lengths = iter(pipe.execute())
    per_queue = 1 + len(_PRIORITY_STEPS)
    return {queue: sum(next(lengths) for _ in range(per_queue)) for queue in QUEUES}


def _amqp_depths(url: str) -> dict[str, int]:
    # Imported here: only an exporter or doctor on RabbitMQ needs py-amqp.
    import kombu
    from amqp.exceptions import NotFound

    k: Any = kombu

    depths: dict[str, int] = {}
    with k.Connection(url, connect_timeout=AMQP_TIMEOUT, transport_options={}) as conn:
        conn.ensure_connection(max_retries=1)
        for queue in QUEUES:
            # A passive declare of a missing queue closes its channel: one each.
            channel: Any = conn.channel()
            try:
                depths[queue] = int(channel.queue_declare(queue, passive=True).message_count)
            except NotFound:
                depths[queue] = 0
            finally:
                # Already closed by the broker, after a 404.
                with contextlib.suppress(Exception):
                    channel.close()
    return depths


def declare_queues(app: Any) -> None:
    """On RabbitMQ, declare every chaz queue of ``app``, consumed here or not.

    Celery's native delayed delivery (a countdown on quorum queues) binds
    every queue the app knows to its exchanges when a worker starts, and a
    queue nobody declared yet cannot be bound: a worker started on
    ``chaz.turns`` alone would leave the others' countdowns undeliverable.
    Idempotent (a declare of an existing queue with the same arguments is a
    no-op); nothing on Redis, whose queues are lists made by the first push.
    """
    if not is_amqp(str(app.conf.broker_url)):
        return
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=3)
        channel = conn.default_channel
        for queue in app.conf.task_queues or ():
            queue.bind(channel).declare()
