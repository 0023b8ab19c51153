"""Per-tree capacity: how many turns of one session tree run at once.

The hash ``chaz:live:{tree}`` holds the running jobs (job id -> session id)
and a sentinel field ``_``, so that an empty tree and a lost hash differ. A
head job that finds its tree full stays queued and waits in the tree's
waiting set until a running turn of that tree ends and hands it the slot
(``lua/turn_ended.lua`` on the turn path, :meth:`TreeCapacity.prune` for
the turns whose worker died first). See
docs/coordination.md#tree-capacity-and-the-waiting-set.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping

import redis

from chaz.coord import keys, scripts
from chaz.coord.redis import clustered, scan_keys, tag_for
from chaz.domain.jobs import Job, JobStatus
from chaz.domain.limits import EffectiveLimits

#: The live hash's sentinel field: present in every live hash, never a job.
SENTINEL = "_"

#: The tree's unfinished jobs, from the database.
TreeJobs = Callable[[str], Iterable[Job]]
#: Jobs by id, from the database (ids that no longer exist are left out).
JobsById = Callable[[list[str]], Mapping[str, Job]]


class TreeCapacity:
    """The live slots and waiting sets of every session tree."""

    def __init__(self, client: redis.Redis, active: TreeJobs, jobs: JobsById) -> None:
        """``active(tree_id)`` gives the tree's unfinished jobs, to seed a
        missing live hash; ``jobs(ids)`` tells :meth:`prune` which slot
        holders are still active."""
        self.client = client
        self._active = active
        self._jobs = jobs
        self._seed_hash = scripts.register(client, "seed_hash")
        self._start = scripts.register(client, "start")
        self._finish = scripts.register(client, "finish")
        self._unhand = scripts.register(client, "unhand")
        self._clustered = clustered(client)

    def start(self, job: Job, limits: EffectiveLimits) -> bool:
        """Take a live slot in the job's tree; False if the tree is full (it waits)."""
        ks = self.slot_keys(job.tree_id, job.project)
        args: list[str | int | float] = [
            job.id,
            scripts.limit_arg(limits.max_live_per_tree),
            job.session_id,
            time.time(),
        ]
        answer = self._start(keys=ks, args=args)
        if answer == "rebuild":
            self.seed(job.tree_id, _holding(self._active(job.tree_id)), job.project)
            answer = self._start(keys=ks, args=args)
        return bool(answer == "ok")

    def slot_keys(self, tree_id: str, project: str) -> list[str]:
        """The keys of a tree's live slots (its live hash, its waiting set), for
        a script that takes a slot beside other work (:meth:`Lanes.acquire_with_slot`)."""
        t = tag_for(self.client, project)
        return [keys.live(tree_id, t), keys.waiting(tree_id, t)]

    def waits(self, session_id: str, tree_id: str, project: str) -> bool:
        """Whether the session still waits in its tree's waiting set (False
        once a freed slot was handed to it, or it took one)."""
        waiting = keys.waiting(tree_id, tag_for(self.client, project))
        score = self.client.zscore(waiting, session_id)
        # A negative score: a slot was handed to it (lua/_hand_off.lua).
        return score is not None and score > 0

    def give_back(self, job_id: str, tree_id: str, project: str) -> str | None:
        """Free a slot the job took but will not run in (``lua/finish.lua``):
        the session that has waited longest for one, to wake, or None."""
        woken = self._finish(keys=self.slot_keys(tree_id, project), args=[job_id])
        return str(woken) if woken else None

    def seed(self, tree_id: str, running: Iterable[Job], project: str) -> bool:
        """Create the tree's live hash (on ``project``'s slot on a cluster)
        from its running jobs, unless it exists.

        False if it existed (a concurrent seeder won; nothing changed).
        """
        pairs: list[str] = [SENTINEL, "1"]
        for j in running:
            pairs += [j.id, j.session_id]
        return bool(
            self._seed_hash(keys=[keys.live(tree_id, tag_for(self.client, project))], args=pairs)
        )

    def prune(self) -> list[str]:
        """Free live slots held by jobs that are no longer active.

        A worker that dies between finishing a turn and handing its slot on
        leaves the slot taken; without this the tree would lose capacity for
        good. Returns the sessions to wake (the slots' next takers). Also
        forgets the sessions handed a slot that have no job waiting any more.
        """
        woken: list[str] = []
        # On a cluster, SCAN visits every master in turn.
        for key in scan_keys(self.client, keys.live_pattern(self._clustered)):
            tree_id = str(key).rsplit(":", 1)[-1]
            t = keys.key_tag(str(key))
            waiting = keys.waiting(tree_id, t)
            for sid in self.client.zrangebyscore(waiting, "-inf", "(0"):
                self._unhand(keys=[waiting, keys.queued(str(sid), t)], args=[str(sid)])
            fields = [str(f) for f in self.client.hkeys(key) if f != SENTINEL]
            if not fields:
                continue
            jobs = self._jobs(fields)
            for job_id in fields:
                job = jobs.get(job_id)
                if job is None or job.status.terminal:
                    nxt = self._finish(keys=[key, waiting], args=[job_id])
                    if nxt:
                        woken.append(str(nxt))
        return woken

    def rebuild(self, active: Iterable[Job]) -> int:
        """Restore the missing live hashes of the trees of these unfinished jobs.

        Only trees with a running (or stopping) job are seeded; a tree whose
        jobs all wait gets its hash from its first :meth:`start`. Returns how
        many trees' hashes were restored.
        """
        running: dict[str, list[Job]] = defaultdict(list)
        for job in _holding(active):
            running[job.tree_id].append(job)
        restored = 0
        for tree_id, jobs in running.items():
            project = jobs[0].project
            try:
                if self.client.exists(keys.live(tree_id, tag_for(self.client, project))):
                    continue
                self.seed(tree_id, jobs, project)
            except redis.RedisError:
                if not self._clustered:
                    raise
                continue  # its shard is down: the next pass
            restored += 1
        return restored


def _holding(jobs: Iterable[Job]) -> list[Job]:
    # Running or stopping: the jobs that hold a slot (a queued job has none
    # yet; one waiting for approval gave its slot back when it suspended).
    return [j for j in jobs if j.status in (JobStatus.RUNNING, JobStatus.STOPPING)]
