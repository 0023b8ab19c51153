"""Reading a Prometheus endpoint in tests (a worker's, or chaz exporter's)."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

#: A sample's name and its labels, sorted: ``("chaz_jobs", (("state", "queued"),))``.
Sample = tuple[str, tuple[tuple[str, str], ...]]


def scrape(port: int, host: str = "127.0.0.1") -> dict[Sample, float]:
    """Every sample of ``http://HOST:PORT/metrics``, by name and sorted labels."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
