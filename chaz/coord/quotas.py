"""Per-session quotas: the queued and cumulative counters, enforced in Redis.

Per session, ``queued`` (admitted, waiting) and ``cumulative`` (ever
admitted, never refunded) are checked and incremented by one Lua script
(``lua/reserve.lua``), so fifty concurrent admissions against a limit of
five admit exactly five. An admission reserves inside its database
transaction, once the session row is locked and before the entry is
inserted: a refusal rolls the transaction back, and a reservation whose
commit fails is refunded, so a rejected or failed admission leaves nothing
behind. A missing counter is never read as zero: it is rebuilt from the
database first. See docs/coordination.md#admission-counters-and-their-scripts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import redis

from chaz.coord import keys, scripts
from chaz.domain.jobs import Job
from chaz.domain.limits import EffectiveLimits
from chaz.errors import JobsExhausted, QueueFull

#: Counters of idle sessions expire; the next admission rebuilds them.
COUNTER_TTL_MS = 7 * 24 * 3600 * 1000

#: ``(queued, total)`` jobs of a session, from the database.
SessionCounts = Callable[[str], tuple[int, int]]


class Quotas:
    """The queued and cumulative counters of every session."""

    def __init__(self, client: redis.Redis, counts: SessionCounts) -> None:
        """``counts(session_id)`` gives ``(queued, total)`` from the database, to
        rebuild missing counters."""
        self.client = client
        self._counts = counts
        self._reserve = scripts.register(client, "reserve")
        self._decrement = scripts.register(client, "decrement")
        self._seed = scripts.register(client, "seed")

    def reserve(
        self,
        session_id: str,
        limits: EffectiveLimits,
        counts: Callable[[], tuple[int, int]] | None = None,
    ) -> None:
        """Count one admission, or raise QueueFull / JobsExhausted having counted nothing.

        ``counts`` gives ``(queued, total)`` from the database if the counters
        must be rebuilt, for a caller inside a transaction that must read
        through it (default: the constructor's ``counts``).
        """
        ks = [keys.queued(session_id), keys.cumulative(session_id)]
        args: list[str | int | float] = [
            scripts.limit_arg(limits.max_queued_per_session),
            scripts.limit_arg(limits.max_jobs_per_session),
            COUNTER_TTL_MS,
        ]
        answer = self._reserve(keys=ks, args=args)
        if answer == "rebuild":
            self._rebuild(session_id, counts)
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

    def rebuild(self, active: Iterable[Job]) -> int:
        """Restore the missing counters of the sessions of these unfinished jobs.

        Existing counters are left alone: an admission may be between its
        reservation and its commit, and overwriting would forget it. Returns
        how many sessions' counters were restored.
        """
        restored = 0
        for session_id in dict.fromkeys(job.session_id for job in active):
            if not self.client.exists(keys.cumulative(session_id)) or not self.client.exists(
                keys.queued(session_id)
            ):
                self._rebuild(session_id)
                restored += 1
        return restored

    def _rebuild(
        self, session_id: str, counts: Callable[[], tuple[int, int]] | None = None
    ) -> None:
        queued, total = self._counts(session_id) if counts is None else counts()
        self._seed(
            keys=[keys.queued(session_id), keys.cumulative(session_id)],
            args=[queued, total, COUNTER_TTL_MS],
        )
