"""Fleet-wide counts for ``chaz exporter``: unfinished jobs by state, sessions
with waiting jobs, deliveries by state, runs' webhook deliveries by state.

Each is one grouped count an index answers (``ix_jobs_session_active``, the
partial index of unfinished jobs, and ``ix_deliveries_state_created``), read
in one short transaction per scrape.
Finished jobs are left out on purpose: they grow without bound, and the
workers' ``chaz_turns_ended_total`` counts them as they end.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import distinct, func, literal_column, select

from chaz.domain.deliveries import DeliveryState
from chaz.domain.jobs import ACTIVE, JobStatus
from chaz.domain.webhooks import WebhookState
from chaz.store.db import Database
from chaz.store.models import DeliveryRow, JobRow, WebhookRow, unfinished

_ACTIVE = sorted(s.value for s in ACTIVE)


@dataclass(frozen=True)
class FleetCounts:
    """What the database says about the whole fleet at one moment."""

    #: Every unfinished state, zero included, by its value.
    jobs: dict[str, int] = field(default_factory=dict)
    #: Sessions that have at least one queued job.
    sessions_waiting: int = 0
    #: Every delivery state, zero included, by its value.
    deliveries: dict[str, int] = field(default_factory=dict)
    #: Every webhook delivery state (pending, delivered, dead), zero included.
    webhooks: dict[str, int] = field(default_factory=dict)


def counts(db: Database) -> FleetCounts:
    """Read the fleet's counts in one transaction."""
    with db.read() as conn:
        jobs = dict.fromkeys(_ACTIVE, 0)
        for status, n in conn.execute(
            select(JobRow.status, func.count())
            .where(unfinished(JobRow.status))
            .group_by(JobRow.status)
        ):
            jobs[status] = int(n)
        waiting = conn.scalar(
            select(func.count(distinct(JobRow.session_id))).where(
                unfinished(JobRow.status),
                JobRow.status == literal_column(f"'{JobStatus.QUEUED.value}'"),
            )
        )
        delivered = {s.value: 0 for s in DeliveryState}
        for state, n in conn.execute(
            select(DeliveryRow.state, func.count()).group_by(DeliveryRow.state)
        ):
            delivered[state] = int(n)
        hooks = {s.value: 0 for s in WebhookState}
        for state, n in conn.execute(
            select(WebhookRow.state, func.count()).group_by(WebhookRow.state)
        ):
            hooks[state] = int(n)
    return FleetCounts(
        jobs=jobs, sessions_waiting=int(waiting or 0), deliveries=delivered, webhooks=hooks
    )
