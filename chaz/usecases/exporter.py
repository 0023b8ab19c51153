"""``chaz exporter``: the fleet-wide metrics, read from Redis and the database
on each scrape (docs/operations.md).

A worker's own metrics (:mod:`chaz.metrics`) say what that worker did; what
the whole fleet has waiting is nobody's counter. The exporter reads it when
Prometheus asks: the Celery queues' depths, unfinished jobs by state,
sessions with waiting jobs, deliveries and runs' webhooks by state, and the admission refusals
producers counted (:mod:`chaz.coord.refusals`). Run one per deployment: any
number answer the same, and each scrape costs a few Redis reads and three
grouped counts in one read transaction.

A source that does not answer leaves its families out of that scrape and sets
``chaz_exporter_source_up{source}`` to 0, so the other figures still arrive
and the outage itself can be alerted on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from chaz.coord import refusals
from chaz.coord.broker import queue_depths
from chaz.services import Services
from chaz.settings import broker_is_coordination, broker_url_for, is_amqp
from chaz.store.fleet import counts

log = logging.getLogger(__name__)

#: Where operators scrape the exporter (the k8s manifests' and the docs' example).
DEFAULT_PORT = 9808


class FleetCollector(Collector):
    """Reads the fleet's figures from Redis and the database on every collect."""

    def __init__(self, services: Services) -> None:
        self.services = services

    def collect(self) -> Iterator[Metric]:
        """One scrape: each source read once; a failed source is reported, not raised."""
        up = GaugeMetricFamily(
            "chaz_exporter_source_up",
            "Whether the exporter could read this source during the scrape.",
            labels=["source"],
        )
        try:
            yield from self._redis()
            up.add_metric(["redis"], 1)
        except Exception:
            log.warning("exporter: Redis did not answer", exc_info=True)
            up.add_metric(["redis"], 0)
        if is_amqp(broker_url_for(self.services.settings)):
            # A broker of its own is a source of its own: RabbitMQ down is not Redis down.
            try:
                yield self._depths()
                up.add_metric(["broker"], 1)
            except Exception:
                log.warning("exporter: the broker did not answer", exc_info=True)
                up.add_metric(["broker"], 0)
        try:
            yield from self._database()
            up.add_metric(["database"], 1)
        except Exception:
            log.warning("exporter: the database did not answer", exc_info=True)
            up.add_metric(["database"], 0)
        yield up

    def _depths(self) -> Metric:
        depth = GaugeMetricFamily(
            "chaz_queue_depth",
            "Messages waiting in a Celery queue (every priority level), not yet taken by a worker.",
            labels=["queue"],
        )
        broker = broker_url_for(self.services.settings)
        same = broker_is_coordination(self.services.settings)
        for queue, n in queue_depths(self.services.redis if same else None, broker).items():
            depth.add_metric([queue], n)
        return depth

    def _redis(self) -> list[Metric]:
        # Read everything before yielding anything: a source fails whole.
        client = self.services.redis
        redis_broker = not is_amqp(broker_url_for(self.services.settings))
        depths = [self._depths()] if redis_broker else []
        refused = CounterMetricFamily(
            "chaz_admission_refusals",
            "Admissions refused, fleet-wide, by error code (counted by the producers).",
            labels=["code"],
        )
        for code, n in sorted(refusals.counts(client).items()):
            refused.add_metric([code], n)
        return [*depths, refused]

    def _database(self) -> list[Metric]:
        found = counts(self.services.store.db)
        jobs = GaugeMetricFamily("chaz_jobs", "Unfinished jobs, by state.", labels=["state"])
        for state, n in found.jobs.items():
            jobs.add_metric([state], n)
        waiting = GaugeMetricFamily(
            "chaz_sessions_waiting", "Sessions with at least one queued job."
        )
        waiting.add_metric([], found.sessions_waiting)
        deliveries = GaugeMetricFamily(
            "chaz_deliveries", "Deliveries between sessions, by state.", labels=["state"]
        )
        for state, n in found.deliveries.items():
            deliveries.add_metric([state], n)
        hooks = GaugeMetricFamily(
            "chaz_webhooks",
            "Runs' webhook deliveries, by state: pending (due or retrying), delivered, dead.",
            labels=["state"],
        )
        for state, n in found.webhooks.items():
            hooks.add_metric([state], n)
        return [jobs, waiting, deliveries, hooks]


def registry(services: Services) -> CollectorRegistry:
    """A registry holding only the fleet's figures (no process metrics: they
    would describe the exporter, not the fleet)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(FleetCollector(services))
    return reg


def serve(services: Services, port: int, addr: str = "0.0.0.0") -> WSGIServer:
    """Serve the fleet's figures on ``addr:port`` from a daemon thread; the
    server is returned (``shutdown()`` stops it)."""
    from prometheus_client import start_http_server

    server, _ = start_http_server(port, addr, registry=registry(services))
    log.info("chaz exporter on http://%s:%d/metrics", addr, port)
    return server
