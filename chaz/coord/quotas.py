"""Admission quotas: per session (queued, cumulative) and per project (live,
cumulative, rate), enforced in Redis by one script.

Per session, ``queued`` (admitted, waiting) and ``cumulative`` (ever
admitted, never refunded); per project, ``live`` (the set of its unfinished
jobs), ``cumulative`` and its turns per minute (a token bucket on the Redis
clock). All five are checked and counted by one Lua script
(``lua/reserve.lua``), so fifty concurrent admissions against a limit of
five admit exactly five, whichever limit binds, and a refused admission
spends no token. An admission reserves inside
its database transaction, once the session row is locked and before the
entry is inserted: a refusal rolls the transaction back, and a reservation
whose commit fails is refunded, so a rejected or failed admission leaves
nothing behind. A missing counter is never read as zero: it is rebuilt from
the database first. A job leaves its project's live set when it ends, by
whichever path (``lua/turn_ended.lua``, :meth:`Quotas.ended`); the
reconciler prunes what a crash left behind (:meth:`Quotas.prune`). See
docs/coordination.md#admission-counters-and-their-scripts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import cast

import redis

from chaz.coord import keys, scripts
from chaz.coord.redis import clustered, scan_keys
from chaz.domain.jobs import Job
from chaz.domain.limits import EffectiveLimits
from chaz.domain.projects import ProjectLimits
from chaz.errors import (
    JobsExhausted,
    ProjectJobsExhausted,
    ProjectLiveExceeded,
    ProjectRateExceeded,
    QueueFull,
    QuotaError,
)

#: Counters of idle sessions expire; the next admission rebuilds them.
COUNTER_TTL_MS = 7 * 24 * 3600 * 1000

#: A live-set member whose job is not in the database is an admission still
#: between its reservation and its commit, until it is this old (then: a
#: reservation whose producer died, pruned by the reconciler).
RESERVATION_GRACE_MS = 60_000

#: ``(queued, total)`` jobs of a session, from the database.
SessionCounts = Callable[[str], tuple[int, int]]
#: ``(ids of unfinished jobs, total)`` of a project, from the database.
ProjectCounts = Callable[[str], tuple[list[str], int]]
#: Jobs by id, from the database (missing ids are absent).
JobsById = Callable[[list[str]], Mapping[str, Job]]


@dataclass(frozen=True)
class Reservation:
    """One admission's place in the quotas: its session, its project, the
    id its job takes (a member of the project's live set), and whether it
    spent a token of the project's rate (a refund gives it back)."""

    session_id: str
    project: str
    job_id: str
    rated: bool = False


class Quotas:
    """The quota counters of every session and every project."""

    def __init__(
        self, client: redis.Redis, counts: SessionCounts, project_counts: ProjectCounts
    ) -> None:
        """``counts(session_id)`` gives ``(queued, total)`` and
        ``project_counts(project)`` ``(ids of unfinished jobs, total)`` from
        the database, to rebuild missing counters."""
        self.client = client
        self._counts = counts
        self._project_counts = project_counts
        self._reserve = scripts.register(client, "reserve")
        self._decrement = scripts.register(client, "decrement")
        self._seed = scripts.register(client, "seed")
        self._refund = scripts.register(client, "refund")
        self._job_ended = scripts.register(client, "job_ended")
        self._seed_project = scripts.register(client, "seed_project")
        self._rate_peek = scripts.register(client, "rate_peek")
        self._debit_tokens = scripts.register(client, "debit_tokens")
        self._clustered = clustered(client)

    def _t(self, project: str) -> str:
        return keys.tag(project) if self._clustered else ""

    def debit_tokens(self, project: str, tokens: int) -> float | None:
        """Charge ``tokens`` a turn reported to the project's token bucket
        (docs/coordination.md#tokens-per-minute); it may go into debt. Returns
        what the bucket holds after (None: the project has no token rate)."""
        if tokens <= 0:
            return None
        left = self._debit_tokens(
            keys=[keys.project_tokens(project, self._t(project))], args=[tokens, COUNTER_TTL_MS]
        )
        return None if left is None else float(left)

    def peek_rate(self, project: str, limits: ProjectLimits) -> None:
        """Raise :class:`ProjectRateExceeded` (with ``retry_after``) if the
        project's turn bucket would refuse an admission now, or its token
        bucket is in debt; spends nothing.

        Asked before an admission's database transaction, so a project
        driven past its rate is refused without taking the database's write
        lock (on SQLite, one for the whole install) or a session row's lock:
        another project's admissions never queue behind its refusals. The
        admission script checks again inside the transaction, and is the
        only one that spends: a peek that passes promises nothing.
        """
        if limits.turns_per_minute is None and limits.tokens_per_minute is None:
            return
        t = self._t(project)
        answer = self._rate_peek(
            keys=[keys.project_rate(project, t), keys.project_tokens(project, t)],
            args=[
                scripts.limit_arg(limits.turns_per_minute),
                scripts.limit_arg(limits.tokens_per_minute),
            ],
        )
        refusal = _refusal(
            answer, Reservation("", project, ""), EffectiveLimits(None, None, None), limits
        )
        if refusal is not None:
            raise refusal

    def reserve(
        self,
        at: Reservation,
        limits: EffectiveLimits,
        project: ProjectLimits,
        counts: Callable[[], tuple[int, int]] | None = None,
        project_counts: Callable[[], tuple[list[str], int]] | None = None,
    ) -> Reservation:
        """Count one admission against its session's and its project's quotas,
        or raise (:class:`QueueFull`, :class:`JobsExhausted`,
        :class:`ProjectLiveExceeded`, :class:`ProjectJobsExhausted`,
        :class:`ProjectRateExceeded`) having counted and spent nothing.
        Returns the reservation made (``at``, with whether it spent a token),
        for :meth:`refund`.

        ``counts`` and ``project_counts`` give the session's and the project's
        counts from the database if they must be rebuilt, for a caller inside
        a transaction that must read through it (default: the constructor's).
        """
        # One slot on a cluster: the project's tag is on every key.
        t = self._t(at.project)
        ks = [
            keys.queued(at.session_id, t),
            keys.cumulative(at.session_id, t),
            keys.project_live(at.project, t),
            keys.project_jobs(at.project, t),
            keys.project_rate(at.project, t),
            keys.project_tokens(at.project, t),
        ]
        args: list[str | int | float] = [
            scripts.limit_arg(limits.max_queued_per_session),
            scripts.limit_arg(limits.max_jobs_per_session),
            COUNTER_TTL_MS,
            scripts.limit_arg(project.max_live),
            scripts.limit_arg(project.max_jobs),
            at.job_id,
            scripts.limit_arg(project.turns_per_minute),
            scripts.limit_arg(project.tokens_per_minute),
        ]
        answer = self._reserve(keys=ks, args=args)
        # At most one rebuild of each kind: a second 'rebuild' would mean the
        # keys vanished again at once, and the script then answers as it finds.
        for _ in range(2):
            if answer == "rebuild":
                self._rebuild(at.session_id, at.project, counts)
            elif answer == "rebuild_project":
                self._rebuild_project(at.project, project_counts)
            else:
                break
            answer = self._reserve(keys=ks, args=args)
        refusal = _refusal(answer, at, limits, project)
        if refusal is not None:
            raise refusal
        if answer != "ok":
            raise RuntimeError(f"RESERVE answered {answer!r}")
        return replace(at, rated=project.turns_per_minute is not None)

    def refund(self, at: Reservation) -> None:
        """Undo a reservation whose job was never written, its token included."""
        t = self._t(at.project)
        self._refund(
            keys=[
                keys.queued(at.session_id, t),
                keys.cumulative(at.session_id, t),
                keys.project_jobs(at.project, t),
                keys.project_live(at.project, t),
                keys.project_rate(at.project, t),
            ],
            args=[at.job_id, "1" if at.rated else "0"],
        )

    def ended(self, job: Job, *, dequeued: bool = False) -> None:
        """A job became terminal off the turn path (a cancel, an archived
        target): free its project live slot and, with ``dequeued`` (it never
        started), take it out of its session's queued counter.

        Called by whoever won the job's terminal transition; a second call
        for the same job changes nothing.
        """
        self._job_ended(
            keys=[
                keys.project_live(job.project, self._t(job.project)),
                keys.queued(job.session_id, self._t(job.project)),
            ],
            args=[job.id, "1" if dequeued else "0"],
        )

    def dequeued(self, session_id: str, project: str) -> None:
        """A queued job left the queue: it started, or it was cancelled.

        Called by whoever won the job's QUEUED transition in the database, so
        exactly once per job.
        """
        self._decrement(keys=[keys.queued(session_id, self._t(project))])

    def rebuild(self, active: Iterable[Job]) -> int:
        """Restore the missing counters of the sessions of these unfinished jobs.

        Existing counters are left alone: an admission may be between its
        reservation and its commit, and overwriting would forget it. Returns
        how many sessions' counters were restored.
        """
        restored = 0
        projects = {job.session_id: job.project for job in active}
        for session_id, project in projects.items():
            t = self._t(project)
            try:
                if self.client.exists(keys.cumulative(session_id, t)) and self.client.exists(
                    keys.queued(session_id, t)
                ):
                    continue
                self._rebuild(session_id, project)
            except redis.RedisError:
                if not self._clustered:
                    raise
                # That session's shard is down: the next pass rebuilds it.
                continue
            restored += 1
        return restored

    def _rebuild(
        self, session_id: str, project: str, counts: Callable[[], tuple[int, int]] | None = None
    ) -> None:
        queued, total = self._counts(session_id) if counts is None else counts()
        t = self._t(project)
        self._seed(
            keys=[keys.queued(session_id, t), keys.cumulative(session_id, t)],
            args=[queued, total, COUNTER_TTL_MS],
        )

    def _rebuild_project(
        self, project: str, counts: Callable[[], tuple[list[str], int]] | None = None
    ) -> None:
        live, total = self._project_counts(project) if counts is None else counts()
        t = self._t(project)
        self._seed_project(
            keys=[keys.project_live(project, t), keys.project_jobs(project, t)],
            args=[COUNTER_TTL_MS, total, *live],
        )

    def prune(self, jobs: JobsById, grace_ms: int = RESERVATION_GRACE_MS) -> list[str]:
        """Drop from every project's live set the jobs that ended without
        saying so (their process died between the commit and Redis), and
        reservations older than ``grace_ms`` whose job was never written.

        Returns the ids dropped. A member added after this pass read its set
        is not looked at; one whose job ends meanwhile is dropped by whoever
        ends it or by the next pass.
        """
        now = self.client.time()
        cutoff = int(now[0]) * 1000 + int(now[1]) // 1000 - grace_ms
        dropped: list[str] = []
        pattern = keys.project_live_pattern(self._clustered)
        # On a cluster, SCAN visits every master in turn.
        for key in scan_keys(self.client, pattern):
            scored = cast(list[tuple[str, float]], self.client.zrange(key, 0, -1, withscores=True))
            members = [(str(m), float(score)) for m, score in scored if m != "_"]
            if not members:
                continue
            found = jobs([m for m, _ in members])
            stale = [
                m
                for m, score in members
                if (m in found and found[m].status.terminal) or (m not in found and score < cutoff)
            ]
            if stale:
                self.client.zrem(key, *stale)
                dropped.extend(stale)
        return dropped


def _refusal(
    answer: object, at: Reservation, limits: EffectiveLimits, project: ProjectLimits
) -> QuotaError | None:
    """The error a RESERVE answer stands for (None: it refused nothing)."""
    if answer == "queue_full":
        return QueueFull(
            f"session {at.session_id} already has {limits.max_queued_per_session} "
            "jobs waiting; try again when one has started",
            session_id=at.session_id,
            limit=limits.max_queued_per_session,
        )
    if answer == "jobs_exhausted":
        return JobsExhausted(
            f"session {at.session_id} has used all {limits.max_jobs_per_session} "
            "jobs it may ever admit",
            session_id=at.session_id,
            limit=limits.max_jobs_per_session,
        )
    if answer == "project_live":
        return ProjectLiveExceeded(
            f"project {at.project} already has {project.max_live} unfinished turns; "
            "try again when one has finished",
            project=at.project,
            limit=project.max_live,
        )
    if answer == "project_jobs":
        return ProjectJobsExhausted(
            f"project {at.project} has used all {project.max_jobs} turns it may ever admit",
            project=at.project,
            limit=project.max_jobs,
        )
    if isinstance(answer, list) and answer[0] == "project_tokens":
        retry_after = int(answer[1]) / 1000
        return ProjectRateExceeded(
            f"project {at.project} is past its {project.tokens_per_minute} model tokens "
            f"a minute; try again in {retry_after:g} s",
            project=at.project,
            limit=project.tokens_per_minute,
            retry_after=retry_after,
            rate="tokens_per_minute",
        )
    if isinstance(answer, list) and answer[0] == "project_rate":
        retry_after = int(answer[1]) / 1000
        return ProjectRateExceeded(
            f"project {at.project} has admitted its {project.turns_per_minute} turns "
            f"a minute; try again in {retry_after:g} s",
            project=at.project,
            limit=project.turns_per_minute,
            retry_after=retry_after,
        )
    return None
