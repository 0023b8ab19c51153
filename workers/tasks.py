"""Celery tasks: ``chaz.turn`` (run a session's next turn), ``chaz.usecases.reconcile``,
``chaz.rename`` (stage-2 session naming), the retention sweeps
``chaz.expire_artifacts`` and ``chaz.expire_events``, ``chaz.fire`` (a
schedule's slot), and ``chaz.webhook`` (a run's webhook attempt)."""

from __future__ import annotations

import gc
import logging
import os
import threading
from datetime import datetime
from typing import Any

from celery.signals import (
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
    worker_shutting_down,
)

from chaz import metrics, tracing
from chaz.coord.broker import declare_queues
from chaz.plumbing.dispatch import TREE_HEADER
from chaz.plumbing.heartbeat import BEAT_SECONDS, Heartbeat
from chaz.services import Services
from chaz.settings import get_settings
from chaz.tools import default_registry
from chaz.tools.mcp import McpTools
from chaz.usecases.lease_watch import LeaseWatch
from chaz.usecases.turns import RUNNING, TurnRunner
from workers.app import app

# The use cases of the other tasks are imported by the task that runs them:
# every import here delays the worker's first turn (and each scale-up).

log = logging.getLogger(__name__)

_lock = threading.Lock()
_services: Services | None = None
_watch: LeaseWatch | None = None
_heartbeat: Heartbeat | None = None
#: Hands the running turns back once the shutdown grace is over (see _retract).
_grace_timer: threading.Timer | None = None
#: This worker's turn threads (``--concurrency``), known once Celery built it.
_threads: int | None = None
#: Database users beside the turn threads: the lease watch, and one spare for
#: a turn's event-sink writer overlapping its own thread's transaction.
FIXED_DB_THREADS = 2


#: The tools this worker's agents may call: built here, where the worker starts.
REGISTRY = default_registry()
#: The MCP servers' tools (docs/tools.md): nothing starts until a turn names one.
MCP = McpTools(lambda: get_settings().mcp_servers)
REGISTRY.add_source(MCP)


def services() -> Services:
    """This worker process's connections, created on first use."""
    global _services
    if _services is None:
        with _lock:
            if _services is None:
                threads = _threads if _threads is not None else get_settings().worker_concurrency
                _services = Services(get_settings(), db_threads=threads + FIXED_DB_THREADS)
    return _services


@worker_init.connect
def _trace(**_: Any) -> None:
    # The threads pool never fires worker_process_init: the worker's own
    # start configures tracing, once, for every turn thread
    # (docs/operations.md#tracing). Off, this reads the environment only.
    tracing.configure()


@worker_process_init.connect
def _trace_child(**_: Any) -> None:
    # A prefork child: the SDK's span processor restarts its thread after the fork.
    tracing.configure()


@worker_init.connect
def _count_threads(sender: Any, **_: Any) -> None:
    # The --concurrency of the command line, which CHAZ_WORKER_CONCURRENCY
    # only defaults: the pool is sized to the threads that really run.
    global _threads
    if isinstance(sender.concurrency, int):
        _threads = sender.concurrency


@worker_init.connect
def _declare_queues(sender: Any, **_: Any) -> None:
    # Before the consumer starts: RabbitMQ's delayed delivery binds them all.
    declare_queues(sender.app)


@worker_ready.connect
def _announce(sender: Any, **_: Any) -> None:
    # Launchers (chaz.embedded, tests) wait for this key rather than a control
    # ping: a broadcast ping over Redis takes seconds to gather replies.
    global _watch, _heartbeat
    settings = services().settings
    port = settings.metrics_port
    if port is not None:
        # Before the ready key: whoever waits for it may scrape at once.
        try:
            metrics.serve(port, settings.metrics_addr)
        except OSError:
            # The worker still takes turns; the scrape's `up` shows the gap.
            log.exception("could not serve metrics on %s port %d", settings.metrics_addr, port)
    _heartbeat = Heartbeat(services().redis, services().settings.home, sender.hostname, os.getpid())
    # The first beat sets the ready key; a failure (CHAZ_HOME not writable,
    # Redis away) is logged and retried by the next beat, and must not keep
    # the lease watch below from starting.
    _beat()
    # On the consumer's timer, in its event loop: a loop that stops turning
    # stops the beat, which is what `chaz probe worker --live` looks for.
    sender.timer.call_repeatedly(BEAT_SECONDS, _beat)
    # Every worker watches for expired leases: a dead worker's turn is
    # resumed about a lease after its last heartbeat, with or without beat.
    _watch = LeaseWatch(services())
    _watch.start()
    # What the start built (modules, the app, settings, the services and
    # their pools) lives as long as the worker: out of the collector's
    # generations, so that a full collection, which holds the GIL against
    # every turn thread, scans only what turns made since (about 100,000
    # objects fewer: tens of ms a collection on a loaded machine, in the
    # dispatch's tail, docs/performance.md#dispatch).
    gc.freeze()


def _beat() -> None:
    if _heartbeat is None:
        return
    try:
        _heartbeat.beat()
    except Exception:
        # Until a beat gets through, `chaz probe worker` says not ready (Redis
        # away) or not live (the beat file cannot be written).
        log.warning("heartbeat: could not beat", exc_info=True)


@worker_shutting_down.connect
def _retract(sender: Any, **_: Any) -> None:
    # Warm shutdown (SIGTERM): no new turns; running ones finish, or are handed
    # back once CHAZ_SHUTDOWN_GRACE_SECONDS have passed (docs/operations.md#termination).
    _hand_back_later(services().settings.shutdown_grace_seconds)
    if _watch is not None:
        _watch.stop()
    if _heartbeat is not None:
        try:
            _heartbeat.stop()
        except Exception:
            log.warning("heartbeat: could not retract the ready key", exc_info=True)


def _hand_back_later(grace: float) -> None:
    global _grace_timer
    with _lock:
        if _grace_timer is not None:
            return  # a second SIGTERM does not restart the clock
        # A daemon thread: the process may exit before it fires (no turn held).
        _grace_timer = threading.Timer(grace, _hand_back)
        _grace_timer.daemon = True
        _grace_timer.start()


def _hand_back() -> None:
    held = RUNNING.hand_back_all()
    log.warning("shutdown grace over: handing back the %d turn(s) still running", held)


@worker_shutdown.connect
def _gone(**_: Any) -> None:
    # The MCP servers this process started stop with it (sent in the main
    # process, which the threads pool's turns share; a SIGKILL leaves it to
    # their launcher's parent-death signal, chaz/tools/mcp/launch.py).
    MCP.close()
    if _heartbeat is not None:
        _heartbeat.remove()
    # The spans still buffered leave before the process does.
    tracing.shutdown()


@worker_process_shutdown.connect
def _close(**_: Any) -> None:
    if _services is not None:
        _services.close()


@app.task(name="chaz.turn", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def turn(session_id: str, execution_id: str) -> dict[str, Any]:
    """Run the next turn of ``session_id``; ``execution_id`` names the job expected."""
    runner, tree = TurnRunner(services(), REGISTRY), _header(turn.request, TREE_HEADER)
    if tracing.on():
        # The sender's context from the message's headers: a turn's span
        # whose job row keeps none is its child (docs/operations.md#tracing).
        with tracing.joined(_trace_headers(turn.request)):
            outcome = runner.wake(session_id, execution_id, tree=tree)
    else:
        outcome = runner.wake(session_id, execution_id, tree=tree)
    # Flower shows this with the task: a kept lane runs more jobs than the
    # one the wake-up named, and operators should see which.
    return {"status": outcome.status, "job_id": outcome.job_id, "ran": list(outcome.ran)}


def _header(request: Any, key: str) -> str | None:
    """A custom header of the task's message, or None (Celery sets custom
    headers as attributes of the request; older protocols keep them in
    ``headers``)."""
    value = getattr(request, key, None) or (getattr(request, "headers", None) or {}).get(key)
    return value if isinstance(value, str) else None


def _trace_headers(request: Any) -> dict[str, str]:
    """The W3C headers a wake-up's message carries."""
    found: dict[str, str] = {}
    for key in tracing.CARRIER_KEYS:
        value = _header(request, key)
        if value is not None:
            found[key] = value
    return found


@app.task(name="chaz.reconcile", ignore_result=True)
def reconcile() -> dict[str, Any]:
    """Rebuild coordination state from the database and wake stranded work."""
    from chaz.usecases.reconcile import Reconciler

    report = Reconciler(services()).run()
    repairs = {
        "woken": len(report.woken),
        "orphaned": len(report.orphaned),
        "counters_rebuilt": report.counters_rebuilt,
        "project_slots_freed": len(report.project_slots_freed),
        "followups": report.deliveries.followups,
        "drained": report.deliveries.drained,
        "finalized": report.deliveries.finalized,
        "fires": report.fires,
        "approvals_expired": len(report.approvals_expired),
        "webhooks": report.webhooks,
    }
    metrics.reconciled(repairs)
    return {**repairs, "orphaned": report.orphaned}


@app.task(name="chaz.expire_artifacts", ignore_result=True)
def expire_artifacts() -> dict[str, Any]:
    """Remove the artifacts retention no longer keeps (CHAZ_ARTIFACT_RETENTION_DAYS)."""
    from chaz.usecases import retention

    return {"expired": retention.expire_artifacts(services())}


@app.task(name="chaz.expire_events", ignore_result=True)
def expire_events() -> dict[str, Any]:
    """Delete event log rows older than CHAZ_EVENT_RETENTION_DAYS."""
    from chaz.usecases import retention

    return {"expired": retention.expire_events(services())}


@app.task(name="chaz.rename", ignore_result=True)
def rename(session_id: str) -> dict[str, Any]:
    """Rename a session from its transcript (stage 2 of docs/collaboration.md#names)."""
    from chaz.usecases import naming

    # naming.rename logs its own failures and returns None: a rename never fails a worker.
    return {"session_id": session_id, "name": naming.rename(services(), session_id)}


@app.task(name="chaz.fire", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def fire(schedule_id: str, slot: str) -> dict[str, Any]:
    """Fire one slot of a schedule (sent by chaz.usecases.beat; docs/schedules.md).

    Redelivered or sent twice, it fires once: the slot's claim is unique.
    """
    from chaz.usecases import schedules as schedule_fires

    done = schedule_fires.fire(services(), schedule_id, datetime.fromisoformat(slot))
    return {
        "schedule_id": schedule_id,
        "slot": slot,
        "outcome": done.outcome,
        "job_id": done.job.id if done.job else None,
    }


@app.task(name="chaz.webhook", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def webhook(job_id: str) -> dict[str, Any]:
    """One attempt of an ended run's webhook (docs/http.md#webhooks).

    Sent after the job's end, again by the attempt for its retry, and by the
    reconciler's sweep for a delivery nobody claimed: redelivered or sent
    twice, it POSTs at most once per claim.
    """
    from chaz.usecases import webhooks

    outcome = webhooks.deliver(services(), job_id)
    metrics.webhook_attempted(outcome)
    return {"job_id": job_id, "outcome": outcome}
