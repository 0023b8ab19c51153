"""Admission: the write path, and the quotas and capacity it enforces in Redis.

Writing to a session is :func:`write` (the processing rule decides whether
the entry admits a job), :func:`admit` or :func:`append`. Each commits first
and publishes second (a new entry to the session's channel, a new job's
wake-up to the broker): a lost notification delays work, it never loses it.

The quotas are those of docs/contracts.md#quotas.

Per session, ``queued`` (admitted, waiting) and ``cumulative`` (ever admitted,
never refunded) are checked and incremented by one Lua script, so fifty
concurrent admissions against a limit of five admit exactly five. A job is
reserved inside its admission's transaction, once the session row is locked
and before the entry is inserted: a refusal rolls the transaction back, and
a reservation whose commit fails is refunded, so a rejected or failed
admission leaves nothing behind.

Per tree, ``live`` bounds how many turns run at once; a head job that finds
its tree full stays queued and waits in the tree's waiting set until a
running turn of that tree finishes and hands it the slot.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from chaz.coord import keys, lua
from chaz.coord.pubsub import publish
from chaz.domain.agents import AgentSpec, Limits
from chaz.domain.entries import Entry, EntryType, KeyScope
from chaz.domain.jobs import Job, JobStatus
from chaz.domain.sessions import Session
from chaz.errors import JobsExhausted, QueueFull
from chaz.services import Services
from chaz.settings import Settings
from chaz.store.repo import Appended, Fence, JobFields, KeyTaken

#: Counters of idle sessions expire; the next admission rebuilds them.
COUNTER_TTL_MS = 7 * 24 * 3600 * 1000
_SENTINEL = "_"


@dataclass(frozen=True)
class EffectiveLimits:
    """The limits in force for one session: global, narrowed by agent and session."""

    max_queued_per_session: int | None
    max_jobs_per_session: int | None
    max_live_per_tree: int | None


@dataclass(frozen=True)
class TurnEnd:
    """What :meth:`Admission.turn_ended` did and saw."""

    #: The lane is still ours (jobs wait and the caller may keep it); else it
    #: was released, or it was not ours any more.
    kept: bool
    #: A session of the tree that was waiting for the freed slot: wake it.
    woken: str | None
    #: Jobs still queued in the session (None: the counter is missing).
    queued: int | None


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
        self._turn_started = r.register_script(lua.TURN_STARTED)
        self._turn_ended = r.register_script(lua.TURN_ENDED)

    # -- per session ------------------------------------------------------------

    def reserve(
        self,
        session_id: str,
        limits: EffectiveLimits,
        job_counts: Callable[[], tuple[int, int]] | None = None,
    ) -> None:
        """Count one admission, or raise QueueFull / JobsExhausted having counted nothing.

        ``job_counts`` gives ``(queued, total)`` from the database if the
        counters must be rebuilt (default: a read of its own).
        """
        ks = [keys.queued(session_id), keys.cumulative(session_id)]
        args: list[str | int | float] = [
            _arg(limits.max_queued_per_session),
            _arg(limits.max_jobs_per_session),
            COUNTER_TTL_MS,
        ]
        answer = self._reserve(keys=ks, args=args)
        if answer == "rebuild":
            self._rebuild_session(session_id, job_counts)
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

    def _rebuild_session(
        self, session_id: str, job_counts: Callable[[], tuple[int, int]] | None = None
    ) -> None:
        if job_counts is None:
            queued, total = self.services.store.job_counts(session_id)
        else:
            queued, total = job_counts()
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

    # -- a turn's two signals ------------------------------------------------------

    def turn_started(self, job: Job, ack: Entry | None, *, dequeued: bool) -> bool:
        """After a turn's start commits: leave the queue (``dequeued``, on the
        job's first start), publish its Ack; True if a cancel is requested."""
        answer = self._turn_started(
            keys=[keys.queued(job.session_id), keys.cancel(job.id)],
            args=[
                "1" if dequeued else "0",
                keys.entries_channel(job.session_id),
                ack.model_dump_json() if ack is not None else "",
            ],
        )
        return bool(answer)

    def turn_ended(
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
        ``finished`` clear its cancel flag; free its live slot (``free_slot``);
        give the lane back, unless ``keep_if_queued`` and more jobs wait in the
        session. See :data:`chaz.coord.lua.TURN_ENDED`."""
        lane, woken, queued = self._turn_ended(
            keys=[
                keys.lane(job.session_id),
                keys.live(job.tree_id),
                keys.waiting(job.tree_id),
                keys.cancel(job.id),
                keys.queued(job.session_id),
                keys.leases(),
            ],
            args=[
                token,
                job.id,
                "1" if finished else "0",
                "1" if free_slot else "0",
                "k" if keep_if_queued else "1",
                keys.entries_channel(job.session_id),
                last.model_dump_json() if last is not None else "",
                int(self.services.settings.lease_seconds * 1000),
                job.session_id,
            ],
        )
        count = int(queued)
        return TurnEnd(
            kept=int(lane) == 0,
            woken=str(woken) or None,
            queued=count if count >= 0 else None,
        )

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


# -- the write path -----------------------------------------------------------------

#: How long a retry of an idempotent admission waits for the first caller's entry.
CLAIM_WAIT_SECONDS = 10.0


def write(
    services: Services,
    session_id: str,
    type: EntryType,
    sender: str,
    content: str,
    *,
    metadata: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
    key_scope: KeyScope = KeyScope.RUNTIME,
    job_fields: JobFields | None = None,
) -> Appended:
    """Write an entry under the processing rule: :func:`admit` when it starts a
    turn (docs/contracts.md#processing-rule), :func:`append` otherwise."""
    if services.store.admits(type, sender):
        return admit(
            services,
            session_id,
            type,
            sender,
            content,
            metadata=metadata,
            idempotency_key=idempotency_key,
            key_scope=key_scope,
            job_fields=job_fields,
        )
    return append(
        services,
        session_id,
        type,
        sender,
        content,
        metadata=metadata,
        idempotency_key=idempotency_key,
        key_scope=key_scope,
    )


def append(
    services: Services,
    session_id: str,
    type: EntryType,
    sender: str,
    content: str,
    *,
    metadata: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
    key_scope: KeyScope = KeyScope.RUNTIME,
    job_id: str | None = None,
    fence: Fence | None = None,
    durable: bool = True,
) -> Appended:
    """Commit an entry that admits nothing, then publish it (see :meth:`Store.append`)."""
    done = services.store.append(
        session_id,
        type,
        sender,
        content,
        metadata=metadata,
        idempotency_key=idempotency_key,
        key_scope=key_scope,
        job_id=job_id,
        fence=fence,
        durable=durable,
    )
    return announce(services, done)


def admit(
    services: Services,
    session_id: str,
    type: EntryType,
    sender: str,
    content: str,
    *,
    metadata: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
    key_scope: KeyScope = KeyScope.RUNTIME,
    job_fields: JobFields | None = None,
) -> Appended:
    """Commit an entry and the job it admits, under the session's quotas; then
    publish the entry and wake a worker.

    A refused admission (:class:`~chaz.errors.QueueFull`,
    :class:`~chaz.errors.JobsExhausted`) writes nothing. A repeated
    ``idempotency_key`` returns the first entry and spends no quota:
    concurrent retries of one request wait for the first caller's entry.
    """

    def replay() -> Appended | None:
        return services.store.replay(
            session_id, idempotency_key, key_scope, type, sender, content, metadata
        )

    claimed = False
    if idempotency_key is not None:
        found = replay()
        if found is not None:
            return found
        claim = keys.idempotency_claim(session_id, f"{key_scope.value}:{idempotency_key}")
        claimed = bool(services.redis.set(claim, "1", nx=True, ex=30))
        # Not claimed: another caller is admitting this request; wait for its
        # entry. Claimed: the first caller may have committed and dropped its
        # claim between our read and our claim; look again.
        found = replay() if claimed else _await_first(services, claim, replay)
        if found is not None:
            if claimed:
                services.redis.delete(claim)
            return found
    try:
        done = _admit_once(
            services,
            session_id,
            type,
            sender,
            content,
            metadata=metadata,
            idempotency_key=idempotency_key,
            key_scope=key_scope,
            job_fields=job_fields,
            replay=replay,
        )
    finally:
        if claimed:
            services.redis.delete(claim)
    return announce(services, done)


def _admit_once(
    services: Services,
    session_id: str,
    type: EntryType,
    sender: str,
    content: str,
    *,
    metadata: dict[str, Any] | None,
    idempotency_key: str | None,
    key_scope: KeyScope,
    job_fields: JobFields | None,
    replay: Callable[[], Appended | None],
) -> Appended:
    """One admission transaction, with its quota reserved inside it."""
    reserved = False
    try:
        with services.store.admitting(session_id) as tx:
            # The session row is locked: its limits cannot change under the
            # check, and a refusal rolls the whole admission back.
            limits = resolve_limits(services.settings, tx.session, tx.agent)
            services.admission.reserve(session_id, limits, tx.job_counts)
            reserved = True
            return tx.insert(
                type,
                sender,
                content,
                metadata=metadata,
                idempotency_key=idempotency_key,
                key_scope=key_scope,
                job_fields=job_fields,
            )
    except KeyTaken:
        # A concurrent admission of the same key committed first: theirs
        # stands, and ours was counted for nothing.
        services.admission.refund(session_id)
        found = replay()
        if found is None:
            raise
        return found
    except BaseException:
        if reserved:
            # Counted, but the commit did not happen.
            services.admission.refund(session_id)
        raise


def _await_first(
    services: Services, claim: str, replay: Callable[[], Appended | None]
) -> Appended | None:
    """The first caller's entry, once it commits; None if it gave up."""
    deadline = time.monotonic() + CLAIM_WAIT_SECONDS
    while time.monotonic() < deadline:
        found = replay()
        if found is not None:
            return found
        if not services.redis.exists(claim):
            # The first caller gave up (refused or failed): look once more.
            return replay()
        time.sleep(0.01)
    return None


def announce(services: Services, done: Appended) -> Appended:
    """After a commit: publish a new entry, and wake a worker for a new job."""
    if done.created:
        publish(services.redis, done.entry)
        if done.job is not None:
            services.dispatcher.wake(done.entry.session_id, done.job.id)
    return done
