"""The baseline: a bare Celery app with chaz's settings and one no-op task.

Started as a real worker, like chaz's::

    celery -A benchmarks.noop_app worker --pool threads --queues bench.noop ...

It loads the same :mod:`chaz.celery_settings` (so the same broker, threads pool,
``acks_late``, ``reject_on_worker_lost``, prefetch 1, task events and
concurrency) and is configured by the same ``CHAZ_*`` variables. chaz ignores
Celery results, so the task needs no result backend either: it signals that it
ran by pushing onto a Redis list that the benchmark pops.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import redis
from celery import Celery
from celery.signals import worker_ready

from chaz.settings import get_settings

#: The queue the no-op tasks travel on (chaz's own queues stay untouched).
QUEUE = "bench.noop"
#: The task's name.
TASK = "bench.noop"
#: The list each finished task pushes ``"<key> <start time>"`` onto.
DONE = "bench:done"


def ready_key(hostname: str) -> str:
    """Set to the worker's pid once it consumes (as chaz's workers do)."""
    return f"bench:ready:{hostname}"


app = Celery("bench-noop")
app.config_from_object("chaz.celery_settings")
app.conf.task_default_queue = QUEUE
app.conf.beat_schedule = {}

_lock = threading.Lock()
_client: redis.Redis | None = None


def client() -> redis.Redis:
    """This process's Redis client (the Redis chaz would use for coordination)."""
    global _client
    if _client is None:
        with _lock:
            if _client is None:
                _client = redis.Redis.from_url(get_settings().effective_redis_url())
    return _client


@worker_ready.connect  # type: ignore[untyped-decorator]
def _announce(sender: Any, **_: Any) -> None:
    client().set(ready_key(sender.hostname), os.getpid(), ex=3600)


@app.task(  # type: ignore[untyped-decorator]
    name=TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True
)
def noop(key: str) -> None:
    """Do nothing but say so: push the key and when the task started."""
    client().lpush(DONE, f"{key} {time.time()!r}")
