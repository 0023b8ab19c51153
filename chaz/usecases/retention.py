"""Retention: what chaz stops keeping, and when.

Two things: the event log (``CHAZ_EVENT_RETENTION_DAYS``: events older than
that are deleted by :func:`expire_events`, the ``chaz.expire_events`` task),
and the full text of job results over the result cap
(docs/contracts.md#result-cap): with ``CHAZ_ARTIFACT_RETENTION_DAYS`` set, a
terminal job that finished longer ago than that loses its artifact, and its
result is cut to the excerpt every reader was already shown. Beat runs
:func:`expire_artifacts` every ``CHAZ_ARTIFACT_SWEEP_SECONDS`` as the
``chaz.expire_artifacts`` task; running it twice at once cuts nothing twice.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from chaz.ids import utcnow
from chaz.services import Services

#: Artifacts removed per batch (one transaction each; one read per batch).
BATCH = 500


def expire_artifacts(services: Services, now: datetime | None = None) -> int:
    """Remove every artifact past retention as of ``now``; how many were removed.

    Only artifacts of terminal jobs that finished before ``now`` minus the
    retention are eligible; with no retention set, nothing is.
    """
    return _sweep(services.settings.artifact_retention_days, now, services.store.artifacts.expire)


def expire_events(services: Services, now: datetime | None = None) -> int:
    """Delete the event log's rows older than ``CHAZ_EVENT_RETENTION_DAYS`` as of ``now``,
    and the webhook deliveries settled before then.

    With no retention set, nothing is deleted. How many were.
    """
    days = services.settings.event_retention_days
    # Settled webhook deliveries (docs/http.md#webhooks) go with the events.
    hooks = _sweep(days, now, services.store.webhooks.expire)
    return _sweep(days, now, services.store.events.expire) + hooks


def _sweep(days: int | None, now: datetime | None, expire: Callable[..., int]) -> int:
    """Run ``expire(cutoff, limit=BATCH)`` until a short batch; the total removed."""
    if days is None:
        return 0
    cutoff = (now or utcnow()) - timedelta(days=days)
    total = 0
    while True:
        removed = expire(cutoff, limit=BATCH)
        total += removed
        # A short batch is the last (or another sweep took part of it).
        if removed < BATCH:
            return total
