"""A turn's two signals to Redis: one script when it starts, one when it ends.

Each bundles what a turn's start or end changes in Redis into one round
trip: the queued counter, the Ack or the last entry's publish, the cancel
flag, the live slot and the lane (``lua/turn_started.lua``,
``lua/turn_ended.lua``). The entry each one announces is the one the turn's
:class:`chaz.coord.feed.Feed` held (docs/coordination.md#pubsub). See
docs/coordination.md#tree-capacity-and-the-waiting-set.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import redis

from chaz.coord import keys, scripts
from chaz.coord.pubsub import PUBLISH_ERRORS, publish_raw
from chaz.coord.redis import clustered, tag_for
from chaz.domain.entries import Entry
from chaz.domain.jobs import Job


@dataclass(frozen=True)
class TurnEnd:
    """What :meth:`TurnSignals.ended` did and saw."""

    #: The lane is still ours (jobs wait and the caller may keep it); else it
    #: was released, or it was not ours any more.
    kept: bool
    #: A session of the tree that was waiting for the freed slot: wake it.
    woken: str | None
    #: Jobs still queued in the session (None: the counter is missing).
    queued: int | None
    #: Messages wait in the session's inbox: drain it (chaz.usecases.deliveries).
    inbox: bool = False


class TurnSignals:
    """The start and end of a turn, as Redis sees them."""

    def __init__(self, client: redis.Redis, lease_seconds: float) -> None:
        """``lease_seconds``: how long a lane kept by :meth:`ended` stays leased."""
        self.client = client
        self._lease_ms = int(lease_seconds * 1000)
        self._started = scripts.register(client, "turn_started")
        self._ended = scripts.register(client, "turn_ended")
        self._clustered = clustered(client)

    def started(self, job: Job, ack: Entry | None, *, dequeued: bool) -> bool:
        """After a turn's start commits: leave the queue (``dequeued``, on the
        job's first start), publish its Ack; True if a cancel is requested."""
        t = tag_for(self.client, job.project)
        data = ack.model_dump_json() if ack is not None else ""
        answer = self._started(
            keys=[keys.queued(job.session_id, t), keys.cancel(job.id, t)],
            args=[
                "1" if dequeued else "0",
                keys.entries_channel(job.session_id),
                "" if self._clustered else data,
            ],
        )
        self._announce(job, data)
        return bool(answer)

    def _announce(self, job: Job, data: str) -> None:
        """On a cluster, publish on the session's sharded channel, after the
        script: the channel is on the session's slot, the script's keys on
        its project's (a single Redis publishes inside the script)."""
        if self._clustered and data:
            with contextlib.suppress(*PUBLISH_ERRORS):
                publish_raw(self.client, keys.entries_channel(job.session_id), data)

    def ended(
        self,
        job: Job,
        token: str,
        last: Entry | None,
        *,
        finished: bool,
        free_slot: bool,
        keep_if_queued: bool = False,
    ) -> TurnEnd:
        """After a turn's last write commits: publish ``last``, and if the job
        ``finished`` clear its cancel flag and free its project live slot;
        free its live slot (``free_slot``); give the lane back, unless
        ``keep_if_queued`` and more jobs wait in the session."""
        t = tag_for(self.client, job.project)
        data = last.model_dump_json() if last is not None else ""
        lane, woken, queued, inbox = self._ended(
            keys=[
                keys.lane(job.session_id, t),
                keys.live(job.tree_id, t),
                keys.waiting(job.tree_id, t),
                keys.cancel(job.id, t),
                keys.queued(job.session_id, t),
                keys.leases(t),
                keys.inbox(job.session_id, t),
                keys.project_live(job.project, t),
            ],
            args=[
                token,
                job.id,
                "1" if finished else "0",
                "1" if free_slot else "0",
                "k" if keep_if_queued else "1",
                keys.entries_channel(job.session_id),
                "" if self._clustered else data,
                self._lease_ms,
                job.session_id,
            ],
        )
        self._announce(job, data)
        count = int(queued)
        return TurnEnd(
            kept=int(lane) == 0,
            woken=str(woken) or None,
            queued=count if count >= 0 else None,
            inbox=bool(int(inbox)),
        )
