"""The Prometheus metrics of a worker process, defined in one place (docs/operations.md).

Turns, the reconciler and the lease watch increment these; ``chaz worker
--metrics-port PORT`` (or ``CHAZ_METRICS_PORT``) serves them over HTTP
(:func:`serve`). Recording one is an in-memory update: nothing here does I/O
on the turn path. The fleet-wide figures (queue depths, jobs by state,
admission refusals) are not here: any process may read them from Redis and
the database, so ``chaz exporter`` does (:mod:`chaz.usecases.exporter`).

Multiprocess-safe: when ``PROMETHEUS_MULTIPROC_DIR`` is set before the
process starts, prometheus_client keeps every value in a file of that
directory, and :func:`serve` answers with the sum over every process that
wrote there (a prefork pool's children). A threads-pool worker, chaz's
default, is one process and needs none of that.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client import multiprocess as _multiprocess

from chaz.domain.jobs import Usage

log = logging.getLogger(__name__)

#: Where operators scrape a worker (the k8s manifests' and the docs' example).
DEFAULT_WORKER_PORT = 9809

#: A scripted turn takes milliseconds, a model's turn seconds to minutes.
TURN_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
#: From a job's commit to its turn's start: milliseconds when workers keep up.
DISPATCH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

TURNS_STARTED = Counter(
    "chaz_turns_started",
    "Turns this worker started (a resumed turn counts again).",
)
TURNS_ENDED = Counter(
    "chaz_turns_ended",
    "Turns this worker ended, by outcome: the job's final state, or suspended, "
    "lease_lost (another worker took it over) or retry (a transient fault).",
    ["outcome"],
)
TURN_SECONDS = Histogram(
    "chaz_turn_duration_seconds",
    "From a turn's start (its job running) to its end, by outcome.",
    ["outcome"],
    buckets=TURN_BUCKETS,
)
DISPATCH_SECONDS = Histogram(
    "chaz_dispatch_latency_seconds",
    "From a job's admission to its turn's first start (the Ack), across hosts' clocks.",
    buckets=DISPATCH_BUCKETS,
)
TURNS_RESUMED = Counter(
    "chaz_turns_resumed",
    "Turns started again from their checkpoint: after a lost worker, a transient "
    "fault, or an approval decision.",
)
LANE_TAKEOVERS = Counter(
    "chaz_lane_takeovers",
    "Sessions whose lane lease expired with a job unfinished, woken by this "
    "worker's lease watch so another turn takes the job over.",
)
BROKER_MESSAGES_SET_ASIDE = Counter(
    "chaz_broker_messages_set_aside",
    "Broker messages this worker popped and could not decode, moved to "
    "chaz:deadletter (chaz.coord.poison), by queue.",
    ["queue"],
)
WEBHOOK_ATTEMPTS = Counter(
    "chaz_webhook_attempts",
    "Runs' webhook attempts this worker made, by outcome: delivered, retry, dead, "
    "or skipped (nothing due: delivered already, or another sender holds it).",
    ["outcome"],
)
TOKENS = Counter(
    "chaz_tokens",
    "Tokens the turns this worker ran reported, by project and kind (input, "
    "output); a resumed attempt counts only what it added (docs/runtime.md#budgets).",
    ["project", "kind"],
)
COST = Counter(
    "chaz_cost",
    "What those tokens cost by CHAZ_MODEL_PRICES, by project.",
    ["project"],
)
RECONCILER_PASSES = Counter("chaz_reconciler_passes", "Reconciler passes this worker completed.")
RECONCILER_REPAIRS = Counter(
    "chaz_reconciler_repairs",
    "What reconciler passes found and repaired, by kind.",
    ["kind"],
)


def turn_started(job_starts: int, created_at: datetime, started_at: datetime | None) -> float:
    """Count a turn's start (``job_starts``: the job's, this one included); on its
    first, observe its dispatch latency.

    Returns the monotonic time to pass to :func:`turn_ended`."""
    TURNS_STARTED.inc()
    if job_starts > 1:
        TURNS_RESUMED.inc()
    elif started_at is not None:
        DISPATCH_SECONDS.observe(max((started_at - created_at).total_seconds(), 0.0))
    return time.monotonic()


def turn_ended(outcome: str, began: float) -> None:
    """Count a turn's end with its ``outcome``, and its duration since ``began``."""
    TURNS_ENDED.labels(outcome).inc()
    TURN_SECONDS.labels(outcome).observe(time.monotonic() - began)


def webhook_attempted(outcome: str) -> None:
    """Count one ``chaz.webhook`` task by its outcome."""
    WEBHOOK_ATTEMPTS.labels(outcome).inc()


def usage_recorded(project: str, now: Usage, before: Usage | None) -> None:
    """Count what an attempt added to its job's usage (``before``: what the
    job carried when the attempt started)."""
    was = before or Usage()
    added_in = now.input_tokens - was.input_tokens
    added_out = now.output_tokens - was.output_tokens
    if added_in > 0:
        TOKENS.labels(project, "input").inc(added_in)
    if added_out > 0:
        TOKENS.labels(project, "output").inc(added_out)
    if now.cost > was.cost:
        COST.labels(project).inc(now.cost - was.cost)


def reconciled(repairs: Mapping[str, int]) -> None:
    """Count one reconciler pass and what it repaired (kind -> how many)."""
    RECONCILER_PASSES.inc()
    for kind, n in repairs.items():
        if n:
            RECONCILER_REPAIRS.labels(kind).inc(n)


def multiprocess_dir() -> str | None:
    """``PROMETHEUS_MULTIPROC_DIR``, when this process shares its metrics through files."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def serve(port: int, addr: str = "0.0.0.0") -> None:
    """Serve this process's metrics (every process's, in multiprocess mode) on
    ``addr:port`` from a daemon thread."""
    if multiprocess_dir() is None:
        start_http_server(port, addr)
    else:
        registry = CollectorRegistry()
        _multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        start_http_server(port, addr, registry=registry)
    log.info("metrics on http://%s:%d/metrics", addr, port)
