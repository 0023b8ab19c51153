"""A bridge's metrics, and the last sync that ``chaz doctor`` reads from them
(docs/bridges.md#health).

A bridge holds only a chaz URL and keys, so it has nothing of chaz's to
write its health into; it serves it instead, as Prometheus text on
``metrics_port`` (its own registry: a bridge is one process, not a worker
pool). ``chaz doctor`` reads ``chaz_bridge_last_sync_timestamp_seconds``
and ``chaz_bridge_poll_seconds`` from the URLs in ``CHAZ_BRIDGES``.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

__all__ = ["Metrics"]


class Metrics:
    """The counters and gauges of one bridge process."""

    def __init__(self, platform: str = "matrix", poll_seconds: float = 5.0) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ["platform"]
        self._in = Counter(
            "chaz_bridge_messages_in",
            "People's messages admitted into chaz sessions.",
            labels,
            registry=self.registry,
        ).labels(platform)
        self._out = Counter(
            "chaz_bridge_messages_out",
            "Entries sent to the platform's rooms (a streamed answer counts once).",
            labels,
            registry=self.registry,
        ).labels(platform)
        self._failures = Counter(
            "chaz_bridge_send_failures",
            "Sends the platform did not take (each retried, so nothing is lost).",
            labels,
            registry=self.registry,
        ).labels(platform)
        self._refused = Counter(
            "chaz_bridge_refused",
            "People's messages chaz refused (a quota, a grant, bad input).",
            labels,
            registry=self.registry,
        ).labels(platform)
        self._lag = Gauge(
            "chaz_bridge_lag_seconds",
            "How old the last entry sent to a room was when it was sent.",
            [*labels, "room"],
            registry=self.registry,
        )
        self._synced = Gauge(
            "chaz_bridge_last_sync_timestamp_seconds",
            "When the bridge last finished a poll of the platform (Unix time; 0: never).",
            labels,
            registry=self.registry,
        ).labels(platform)
        Gauge(
            "chaz_bridge_poll_seconds",
            "The bridge's long-poll length: a sync older than a few of them is stale.",
            labels,
            registry=self.registry,
        ).labels(platform).set(poll_seconds)
        self.platform = platform

    def admitted(self) -> None:
        """A person's message became a session write."""
        self._in.inc()

    def refused(self) -> None:
        """A person's message was refused by chaz."""
        self._refused.inc()

    def sent(self, room: str, age: float) -> None:
        """An entry reached ``room``, ``age`` seconds after chaz stored it."""
        self._out.inc()
        self._lag.labels(self.platform, room).set(max(age, 0.0))

    def send_failed(self) -> None:
        """A send the platform did not take (it is retried)."""
        self._failures.inc()

    def synced(self) -> None:
        """A poll of the platform finished."""
        self._synced.set(time.time())

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        """Serve the metrics on ``addr:port`` (``/metrics``) from a daemon thread."""
        start_http_server(port, addr=addr, registry=self.registry)
