"""The reconciler: rebuilds Redis coordination state from the database.

Run periodically by beat (``chaz.usecases.reconcile``). It is the sweep behind
"a lost notification delays work, it never loses it": a session with
unfinished jobs and no lane lease gets a fresh wake-up, whether its wake-up
message was lost, its worker died (the lease expired), or Redis was flushed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from chaz.coord import keys
from chaz.domain.jobs import Job, JobStatus
from chaz.ids import utcnow
from chaz.plumbing.dispatch import Wake
from chaz.plumbing.faults import is_transient
from chaz.services import Services
from chaz.usecases import approvals, webhooks
from chaz.usecases.deliveries import SweepReport, sweep
from chaz.usecases.schedules import resume_stranded

log = logging.getLogger(__name__)

#: A pass's record lasts this many reconcile periods: ``chaz doctor`` calls the
#: reconciler stale once it is gone (a beat missed a few periods in a row).
RECORD_PERIODS = 3
#: ...and never less than this, so a short period does not flap on a busy host.
RECORD_MIN_SECONDS = 15.0


@dataclass
class ReconcileReport:
    """What one reconciler pass found and did."""

    woken: list[str] = field(default_factory=list)
    orphaned: list[str] = field(default_factory=list)
    counters_rebuilt: int = 0
    #: Jobs dropped from their project's live set: they ended (or were never
    #: written) without Redis hearing of it.
    project_slots_freed: list[str] = field(default_factory=list)
    #: Follow-ups a crash left unadmitted, and inbox messages of idle targets, admitted now.
    deliveries: SweepReport = field(default_factory=SweepReport)
    #: Claimed schedule fires that never got their job, admitted now.
    fires: int = 0
    #: Approval requests closed ``expired`` by their timeout (docs/approvals.md).
    approvals_expired: list[str] = field(default_factory=list)
    #: Webhook deliveries due and unclaimed, sent again (docs/http.md#webhooks).
    webhooks: int = 0


class Reconciler:
    """One pass over the active jobs."""

    def __init__(self, services: Services, grace_seconds: float | None = None) -> None:
        self.services = services
        # A queued job younger than this is probably still on its way to a worker.
        self.grace = timedelta(
            seconds=grace_seconds
            if grace_seconds is not None
            else services.settings.reconcile_seconds
        )

    def run(self) -> ReconcileReport:
        """Wake every session whose head job nobody is running."""
        svc = self.services
        report = ReconcileReport()
        active = svc.store.active_jobs()
        heads: dict[str, Job] = {}
        for job in active:
            heads.setdefault(job.session_id, job)
        held = svc.lanes.held({sid: job.project for sid, job in heads.items()})
        heads = self._drop_ended(heads, held)
        now = utcnow()
        for session_id, head in heads.items():
            if session_id in held or head.status is JobStatus.WAITING_APPROVAL:
                # A turn waiting for a person is woken by the decision (or by
                # its timeout, below), not by a sweep.
                continue
            if head.status in (JobStatus.RUNNING, JobStatus.STOPPING):
                report.orphaned.append(head.id)
            elif now - head.created_at < self.grace:
                continue
            svc.dispatcher.send_wake(session_id, head.id, Wake.RECONCILE, tree=head.tree_id)
            report.woken.append(session_id)
        # Approval requests past their timeout close as denied; their turns resume.
        report.approvals_expired = approvals.expire_due(svc)
        report.counters_rebuilt = self.rebuild_counters(active)
        for session_id in svc.capacity.prune():
            waiting = svc.store.head_job(session_id)
            if waiting is not None:
                svc.dispatcher.send_wake(
                    session_id, waiting.id, Wake.RECONCILE, tree=waiting.tree_id
                )
                report.woken.append(session_id)
        # Project live slots of jobs that ended without Redis hearing of it.
        report.project_slots_freed = svc.quotas.prune(svc.store.get_jobs)
        # Follow-ups recorded by a job's end whose worker died before
        # admitting them; messages queued for a target that went idle while
        # its inbox flag was lost.
        report.deliveries = sweep(svc, self.grace)
        # Schedule fires whose process died between the claim and the job.
        report.fires = resume_stranded(svc, self.grace)
        # Webhook deliveries whose message was lost or whose worker died mid-POST.
        report.webhooks = webhooks.sweep(svc, self.grace)
        # A cancel requested before a flush must still stop its turn.
        for job in active:
            if job.status is JobStatus.STOPPING:
                svc.flags.restore(job.id, job.project)
        # Only a running job with no lease is an orphaned turn (its worker is
        # gone); a queued job past the grace period just had its wake-up sent
        # again, which a backlog of wake-ups explains as well as a lost one.
        if report.orphaned:
            log.warning("reconciler found orphaned turns, woke their sessions: %s", report.orphaned)
        if len(report.woken) > len(report.orphaned):
            log.debug(
                "reconciler re-sent %d wake-ups for unclaimed jobs",
                len(report.woken) - len(report.orphaned),
            )
        self.record_pass()
        return report

    def _drop_ended(self, heads: dict[str, Job], held: set[str]) -> dict[str, Job]:
        """``heads`` without the running ones whose turn ended since they were read.

        The active jobs are read before the leases are looked at, and a turn
        that ends in between releases its lane: read alone, it would look
        like an orphan (and its session be woken for nothing). Only running
        heads with no lease are read again, so a pass that finds no
        candidate reads nothing more.
        """
        turning = (JobStatus.RUNNING, JobStatus.STOPPING)
        unheld = [h.id for sid, h in heads.items() if sid not in held and h.status in turning]
        if not unheld:
            return heads
        now = self.services.store.get_jobs(unheld)
        ended = {i for i in unheld if i not in now or now[i].status not in turning}
        return {sid: h for sid, h in heads.items() if h.id not in ended}

    def record_pass(self) -> None:
        """Note in Redis that a pass completed now (read by ``chaz doctor``)."""
        svc = self.services
        ttl = max(RECORD_PERIODS * svc.settings.reconcile_seconds, RECORD_MIN_SECONDS)
        try:
            svc.redis.set(keys.reconciled(), utcnow().isoformat(), px=int(ttl * 1000))
        except Exception as exc:
            # On a cluster the key's shard may be the one that is down: the
            # pass did its work on the others, and the next one records it.
            if not (svc.clustered and is_transient(exc)):
                raise
            log.warning("could not record the reconciler's pass: %s", exc)

    def rebuild_counters(self, active: list[Job]) -> int:
        """Restore missing quota counters and live hashes from the database.

        See :mod:`chaz.coord.quotas` and :mod:`chaz.coord.capacity`.
        """
        svc = self.services
        return svc.quotas.rebuild(active) + svc.capacity.rebuild(active)
