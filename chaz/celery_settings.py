"""Celery settings for chaz, each one chosen on purpose.

Workers (``celery -A workers worker``) and producers (``chaz.Client``) both load
this module, so a message sent is a message the worker understands. It lives
in the package (the top-level ``celeryconfig.py`` of a checkout only
re-exports it), so an installed chaz never puts a module named
``celeryconfig`` on a user's path.
"""

from __future__ import annotations

from chaz import tracing
from chaz.brokers import broker_conf
from chaz.settings import broker_url_for, get_settings

_settings = get_settings()

#: The broker: CHAZ_BROKER_URL, else the same Redis that holds chaz's
#: coordination state (a Redis Cluster cannot be a broker: then it is
#: elsewhere). Redis and RabbitMQ are supported (docs/brokers.md).
_broker = broker_conf(broker_url_for(_settings))
broker_url: str = _broker.pop("broker_url")

#: chaz keeps results and state in its database, not in a Celery result backend.
task_ignore_result = True
result_backend = None

#: Ack only after the task finished: a worker that dies mid-turn leaves the
#: message unacknowledged, so it is delivered again...
task_acks_late = True
#: ...and when the worker *process* is lost, the message is rejected back to the
#: queue at once instead of being acked (acks_late alone does not redeliver).
task_reject_on_worker_lost = True

#: A lost broker connection (or a channel RabbitMQ closed: docs/brokers.md)
#: leaves running turns running: the lane's lease, not the message, fences
#: them, and cancelling them would throw work away. Celery's default in 5.x,
#: said here because 6.0 flips it.
worker_cancel_long_running_tasks_on_connection_loss = False

#: A worker reserves one message per thread: a long turn must not hold other
#: sessions' wake-ups behind it.
worker_prefetch_multiplier = 1

#: Redis: a turn that outruns the visibility timeout is redelivered while it
#: still runs. That is harmless (the session lane's lease fences the duplicate
#: out), and the lease watch and the reconciler, not the visibility timeout,
#: recover dead turns (docs/architecture.md#recovery says why a short timeout
#: would not help), so this only bounds how long a lost message waits: one
#: hour. RabbitMQ: publisher confirms (docs/brokers.md).
broker_transport_options: dict[str, object] = _broker.pop("broker_transport_options")

#: The queues and exchange (chaz.brokers): on RabbitMQ quorum queues bound to
#: a topic exchange; on Redis, Celery's defaults.
globals().update(_broker)

#: JSON only: arguments are ids, and nothing unpickles data from the network.
task_serializer = "json"
accept_content = ["json"]
event_serializer = "json"

#: Turns and housekeeping have their own queues, so a flood of wake-ups never
#: delays the reconciler.
task_default_queue = "chaz.turns"
task_routes = {
    "chaz.turn": {"queue": "chaz.turns"},
    "chaz.reconcile": {"queue": "chaz.control"},
    "chaz.expire_artifacts": {"queue": "chaz.control"},
    "chaz.expire_events": {"queue": "chaz.control"},
    # Stage-2 session naming: a model call that must not take a turn thread.
    "chaz.rename": {"queue": "chaz.control"},
    # A run's webhook attempt (docs/http.md#webhooks): one bounded POST.
    "chaz.webhook": {"queue": "chaz.control"},
    # Schedule fires (docs/schedules.md): a burst of due slots waits neither
    # behind wake-ups nor in front of the reconciler.
    "chaz.fire": {"queue": "chaz.schedules"},
}

#: Send task events so Flower shows what runs (chaz.turn with session and
#: execution ids as arguments).
worker_send_task_events = True
task_send_sent_event = True

#: Turns are I/O-bound (model calls): the threads pool with many threads.
worker_pool = "threads"
worker_concurrency = _settings.worker_concurrency

if tracing.wanted():
    # Each log line carries its trace and span ids (docs/operations.md#tracing):
    # Celery's own formats, with the ids the record factory sets.
    tracing.install_log_ids()
    worker_log_format = (
        "[%(asctime)s: %(levelname)s/%(processName)s] %(message)s" + tracing.LOG_FORMAT_IDS
    )
    worker_task_log_format = (
        "[%(asctime)s: %(levelname)s/%(processName)s] %(task_name)s[%(task_id)s]:"
        " %(message)s" + tracing.LOG_FORMAT_IDS
    )

#: Keep broker connections healthy across broker restarts. No AMQP heartbeat:
#: a producer's connection (a web server's) sends none between publishes and
#: would be closed by the broker; a dead peer is found by the next read.
broker_connection_retry_on_startup = True
broker_heartbeat = 0

#: The reconciler: restores counters and cancel flags from the database, frees
#: slots of finished jobs, and finds admitted work that nobody picked up (a
#: lost wake-up, a dead worker).
beat_schedule = {
    "chaz-reconcile": {
        "task": "chaz.reconcile",
        "schedule": _settings.reconcile_seconds,
        "options": {"expires": _settings.reconcile_seconds},
    },
    # Artifact retention (CHAZ_ARTIFACT_RETENTION_DAYS): removes the artifacts
    # of long-finished jobs and cuts their results. Safe to run twice at once.
    "chaz-expire-artifacts": {
        "task": "chaz.expire_artifacts",
        "schedule": _settings.artifact_sweep_seconds,
        "options": {"expires": _settings.artifact_sweep_seconds},
    },
    # Event log retention (CHAZ_EVENT_RETENTION_DAYS).
    "chaz-expire-events": {
        "task": "chaz.expire_events",
        "schedule": _settings.artifact_sweep_seconds,
        "options": {"expires": _settings.artifact_sweep_seconds},
    },
}

#: chaz's beat scheduler: the beat_schedule above, plus agent-owned schedules
#: read from the database (docs/schedules.md#beat).
beat_scheduler = "chaz.usecases.beat:ChazScheduler"

timezone = "UTC"
enable_utc = True
