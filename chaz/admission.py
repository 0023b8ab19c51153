"""Admission and capacity: the quotas of seed 003 §5.2, enforced in Redis.

Per session, ``queued`` (admitted, waiting) and ``cumulative`` (ever admitted,
never refunded) are checked and incremented by one Lua script, so fifty
concurrent admissions against a limit of five admit exactly five. A job is
reserved *before* its entry is written; if the write fails the reservation is
refunded, so a rejected or failed admission leaves nothing behind.

Per tree, ``live`` bounds how many turns run at once; a head job that finds
its tree full stays queued and waits in the tree's waiting set until a
running turn of that tree finishes and hands it the slot.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from chaz.coord import keys, lua
from chaz.domain.agents import AgentSpec, Limits
from chaz.domain.jobs import Job, JobStatus
from chaz.domain.sessions import Session
from chaz.errors import JobsExhausted, QueueFull
from chaz.services import Services
from chaz.settings import Settings

#: Counters of idle sessions expire; the next admission rebuilds them.
COUNTER_TTL_MS = 7 * 24 * 3600 * 1000
_SENTINEL = "_"


@dataclass(frozen=True)
class EffectiveLimits:
    """The limits in force for one session: global, narrowed by agent and session."""

    max_queued_per_session: int | None
    max_jobs_per_session: int | None
    max_live_per_tree: int | None


def effective_limits(services: Services, session_id: str) -> EffectiveLimits:
    """Resolve a session's limits (settings, then the agent's, then the session's)."""
    session = services.store.get_session(session_id)
    agent = services.store.get_agent(session.agent_id)
    return resolve_limits(services.settings, session, agent)


def resolve_limits(s: Settings, session: Session, agent: AgentSpec) -> EffectiveLimits:
    """The quota limits in force for a session whose rows are already loaded."""
    base = Limits(
        max_queued_per_session=s.max_queued_per_session,
        max_jobs_per_session=s.max_jobs_per_session,
        max_live_per_tree=s.max_live_per_tree,
    )
    merged = base.narrowed(agent.limits).narrowed(session.limits)
    return EffectiveLimits(
        merged.max_queued_per_session, merged.max_jobs_per_session, merged.max_live_per_tree
    )


def _arg(limit: int | None) -> int:
    return -1 if limit is None else limit


class Admission:
    """Quota counters and tree capacity."""

    def __init__(self, services: Services) -> None:
        self.services = services
        r = services.redis
        self._reserve = r.register_script(lua.RESERVE)
        self._decrement = r.register_script(lua.DECREMENT)
        self._seed = r.register_script(lua.SEED)
        self._seed_hash = r.register_script(lua.SEED_HASH)
        self._start = r.register_script(lua.START)
        self._finish = r.register_script(lua.FINISH)

    # -- per session ------------------------------------------------------------

    def reserve(self, session_id: str, limits: EffectiveLimits) -> None:
        """Count one admission, or raise QueueFull / JobsExhausted having counted nothing."""
        ks = [keys.queued(session_id), keys.cumulative(session_id)]
        args: list[str | int | float] = [
            _arg(limits.max_queued_per_session),
            _arg(limits.max_jobs_per_session),
            COUNTER_TTL_MS,
        ]
        answer = self._reserve(keys=ks, args=args)
        if answer == "rebuild":
            self._rebuild_session(session_id)
            answer = self._reserve(keys=ks, args=args)
        if answer == "queue_full":
            raise QueueFull(
                f"session {session_id} already has {limits.max_queued_per_session} "
                "jobs waiting; try again when one has started",
                session_id=session_id,
                limit=limits.max_queued_per_session,
            )
        if answer == "jobs_exhausted":
            raise JobsExhausted(
                f"session {session_id} has used all {limits.max_jobs_per_session} "
                "jobs it may ever admit",
                session_id=session_id,
                limit=limits.max_jobs_per_session,
            )

    def refund(self, session_id: str) -> None:
        """Undo a reservation whose job was never written."""
        self._decrement(keys=[keys.queued(session_id), keys.cumulative(session_id)])

    def dequeued(self, session_id: str) -> None:
        """A queued job left the queue: it started, or it was cancelled.

        Called by whoever won the job's QUEUED transition in the database, so
        exactly once per job.
        """
        self._decrement(keys=[keys.queued(session_id)])

    def _rebuild_session(self, session_id: str) -> None:
        store = self.services.store
        queued = store.count_jobs(session_id, [JobStatus.QUEUED])
        total = store.count_jobs(session_id)
        self._seed(
            keys=[keys.queued(session_id), keys.cumulative(session_id)],
            args=[queued, total, COUNTER_TTL_MS],
        )

    # -- per tree ---------------------------------------------------------------

    def start(self, job: Job, limits: EffectiveLimits) -> bool:
        """Take a live slot in the job's tree; False if the tree is full (it waits)."""
        ks = [keys.live(job.tree_id), keys.waiting(job.tree_id)]
        args: list[str | int | float] = [
            job.id,
            _arg(limits.max_live_per_tree),
            job.session_id,
            time.time(),
        ]
        answer = self._start(keys=ks, args=args)
        if answer == "rebuild":
            self._rebuild_tree(job.tree_id)
            answer = self._start(keys=ks, args=args)
        return bool(answer == "ok")

    def finished(self, job: Job) -> str | None:
        """Free the job's live slot; the session that should run next in the tree."""
        woken = self._finish(
            keys=[keys.live(job.tree_id), keys.waiting(job.tree_id)], args=[job.id]
        )
        return str(woken) if woken else None

    def _rebuild_tree(self, tree_id: str) -> None:
        running = [
            j
            for j in self.services.store.active_jobs(tree_id=tree_id)
            if j.status is not JobStatus.QUEUED
        ]
        self._seed_live(tree_id, running)

    def _seed_live(self, tree_id: str, running: Iterable[Job]) -> None:
        # Seeding is a no-op if the hash exists: a concurrent seeder won.
        pairs: list[str] = [_SENTINEL, "1"]
        for j in running:
            pairs += [j.id, j.session_id]
        self._seed_hash(keys=[keys.live(tree_id)], args=pairs)

    def prune(self) -> list[str]:
        """Free live slots held by jobs that are no longer active.

        A worker that dies between finishing a turn and handing its slot on
        leaves the slot taken; without this the tree would lose capacity for
        good. Returns the sessions to wake (the slots' next takers).
        """
        r = self.services.redis
        woken: list[str] = []
        for key in r.scan_iter(match=keys.live("*"), count=500):
            tree_id = str(key).rsplit(":", 1)[-1]
            fields = [str(f) for f in r.hkeys(key) if f != _SENTINEL]
            if not fields:
                continue
            jobs = self.services.store.get_jobs(fields)
            for job_id in fields:
                job = jobs.get(job_id)
                if job is None or job.status.terminal:
                    nxt = self._finish(keys=[key, keys.waiting(tree_id)], args=[job_id])
                    if nxt:
                        woken.append(str(nxt))
        return woken

    # -- reconciler -------------------------------------------------------------

    def rebuild(self, active: list[Job]) -> int:
        """Restore counters that are missing (flushed Redis, expired keys).

        Existing counters are left alone: an admission may be between its
        reservation and its commit, and overwriting would forget it.
        """
        queued: Counter[str] = Counter()
        running: dict[str, list[Job]] = defaultdict(list)
        sessions: set[str] = set()
        for job in active:
            sessions.add(job.session_id)
            if job.status is JobStatus.QUEUED:
                queued[job.session_id] += 1
            else:
                running[job.tree_id].append(job)
        r = self.services.redis
        restored = 0
        for session_id in sessions:
            if not r.exists(keys.cumulative(session_id)) or not r.exists(keys.queued(session_id)):
                self._rebuild_session(session_id)
                restored += 1
        for tree_id, jobs in running.items():
            if not r.exists(keys.live(tree_id)):
                self._seed_live(tree_id, jobs)
                restored += 1
        return restored
