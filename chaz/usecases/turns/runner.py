"""The turn runner: one wake-up, the session's lane, and the turns run under it.

A wake-up names a session. The worker takes the session's lane lease; if it is
held, another worker is running this session's turn and will wake the next one
when it is done, so this wake-up ends. Holding the lease, the worker runs the
session's *head* job (the oldest unfinished one, by admission order), releases
the lease, and wakes the session again if more work waits. Because the releaser
looks for work only after releasing, and an admitter wakes only after
committing, one of them always sees the other: no wake-up is lost.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from chaz import metrics, tracing
from chaz.coord.feed import Feed
from chaz.domain import budgets
from chaz.domain.deliveries import INTERRUPTED as DELIVERY_INTERRUPTED
from chaz.domain.entries import agent_sender
from chaz.domain.jobs import Job, JobStatus
from chaz.domain.limits import resolve_limits
from chaz.errors import ChazError, IllegalTransition, LeaseLost
from chaz.plumbing.dispatch import Wake
from chaz.plumbing.faults import is_transient
from chaz.runtime.cancel import Running
from chaz.runtime.registry import ToolRegistry
from chaz.services import Services
from chaz.store.core import TurnStart
from chaz.store.types import TurnSetup
from chaz.usecases import compaction, deliveries
from chaz.usecases.turns.delegation import RunnerDelegation
from chaz.usecases.turns.ending import (
    Ran,
    after_job,
    archived_delivery,
    hand_off,
    refuse_archived,
)
from chaz.usecases.turns.turn import Turn

log = logging.getLogger(__name__)

#: A job whose turn was started this many times without finishing (its worker
#: died, or a transient fault stopped it) ends ``interrupted`` instead of being
#: resumed once more.
MAX_ATTEMPTS = 3

#: How long a turn stopped by a transient fault waits before its retry: long
#: enough for a restarting backend, short next to the lease.
RETRY_SECONDS = 1.0


#: A worker that finds more of its session's jobs waiting when a turn ends
#: runs them under the same lease, up to this many turns or this many seconds,
#: then hands the session back to the broker: each hop then costs no new task,
#: release and acquire, while one busy session still cannot keep a thread.
KEEP_LANE_TURNS = 16
KEEP_LANE_SECONDS = 0.5

#: The turns this process runs: a worker whose shutdown grace runs out hands
#: them all back (workers.tasks; docs/operations.md#termination).
RUNNING = Running()


@dataclass(frozen=True)
class WakeOutcome:
    """What a wake-up did: ``ran`` jobs, found the lane ``busy``, the session
    ``idle``, its head job ``waiting`` for tree capacity, or its head job
    waiting for a person's decision (``approval``)."""

    status: str
    job_id: str | None = None
    #: The jobs whose turns ran under this wake-up's lease, in order (a kept
    #: lane runs several); ``job_id`` is the last of them, or the one waiting.
    ran: tuple[str, ...] = ()

    @property
    def turns(self) -> int:
        """How many turns ran under this wake-up's lease."""
        return len(self.ran)


@dataclass(frozen=True)
class _Early:
    """A live slot taken with the lane, for the job the wake-up named, before
    the setup read the session's head job (:meth:`TurnRunner._hold_lane`)."""

    job_id: str
    tree_id: str
    #: Taken by the lane's script (False: the job held it already).
    took: bool


@dataclass
class _Lane:
    """One wake-up's hold on its session's lane, across the turns it runs."""

    session_id: str
    token: str
    #: Run one turn on the caller's live slot (see :meth:`TurnRunner.wake`).
    lend_slot: bool
    #: Past this (``time.monotonic()``), the lane is not kept for another turn.
    deadline: float
    #: The project whose bucket holds the lane (``""`` on a single Redis).
    project: str
    outcome: WakeOutcome = WakeOutcome("idle")
    #: The lane is still ours, to release when the wake-up ends.
    held: bool = True
    #: Once released, look for the session's head job and wake it for this
    #: reason; None: whatever waits is woken by someone else.
    then: Wake | None = Wake.NEXT
    #: When the lane was asked for and taken (``time.time_ns()``), for the
    #: first turn's span; None once told (docs/operations.md#tracing).
    acquired: tuple[int, int] | None = None
    #: The slot the lane's script took, until the first turn's setup claims
    #: it for its head job or gives it back.
    early: _Early | None = None
    #: The tree whose waiting set the head job joined (its tree was full).
    slot_wait: str | None = None

    def stop(self, status: str, job_id: str) -> None:
        """End the wake-up on a head job that waits (for capacity, for a
        decision): what frees it wakes it, so nothing is looked for."""
        self.outcome = WakeOutcome(status, job_id, self.outcome.ran)
        self.then = None


class TurnRunner:
    """Runs the next turn of a session under its lane lease."""

    def __init__(
        self, services: Services, registry: ToolRegistry, running: Running = RUNNING
    ) -> None:
        self.services = services
        #: The tools this process's agents may call.
        self.registry = registry
        #: The turns this process runs, which a shutdown hands back.
        self.running = running
        self._delegation = RunnerDelegation(self)

    def wake(
        self,
        session_id: str,
        execution_id: str,
        *,
        lend_slot: bool = False,
        tree: str | None = None,
    ) -> WakeOutcome:
        """Handle one wake-up for ``session_id`` (``execution_id`` is a hint).

        ``tree``: the session tree of ``execution_id``'s job, as the wake-up's
        sender knew it (a hint too): with it the lane's script also takes
        that job's live slot when no limit can refuse it (no turn of the tree
        runs), one Redis round trip fewer before the Ack
        (docs/performance.md#dispatch); a head job that turns out to be
        another, or not to start, gives the slot back.

        ``lend_slot`` runs the turn without taking a live slot of its tree: a
        foreground parent that runs its child inline lends the child its own
        slot while it waits, so a full tree cannot deadlock on itself. Such a
        wake-up runs that one turn only.

        A transient fault (Redis or the database briefly away, see
        :mod:`chaz.plumbing.faults`) ends the wake-up with ``retry``: nothing is
        finished or failed, the lane is given back if Redis answers, and a
        new wake-up is queued; the job's next start counts an attempt and
        resumes from its checkpoint, as after a lost worker.
        """
        try:
            return self._hold_lane(session_id, execution_id, lend_slot, tree)
        except Exception as exc:
            if not is_transient(exc):
                raise
            log.warning(
                "a turn of session %s met a transient fault (%s: %s); retrying from its checkpoint",
                session_id,
                type(exc).__name__,
                exc,
            )
            # A lane we could not give back expires on its own, and the
            # lease watch wakes the session then (chaz.usecases.lease_watch).
            self.services.dispatcher.send_wake(
                session_id, execution_id, Wake.RETRY, countdown=RETRY_SECONDS
            )
            return WakeOutcome("retry", execution_id or None)

    def _hold_lane(
        self, session_id: str, execution_id: str, lend_slot: bool, tree: str | None
    ) -> WakeOutcome:
        """Take the lane, run turns while :meth:`_turn` keeps it, then leave it."""
        svc = self.services
        asked = time.time_ns()
        project = svc.coord_project(session_id)
        early: _Early | None = None
        if tree and execution_id and not lend_slot:
            taken = svc.lanes.acquire_with_slot(
                session_id,
                execution_id,
                svc.settings.lease_seconds,
                project=project,
                slot_keys=svc.capacity.slot_keys(tree, project),
            )
            token = taken.token if taken is not None else None
            if taken is not None and taken.slot:
                early = _Early(execution_id, tree, took=taken.slot == "took")
        else:
            token = svc.lanes.acquire(
                session_id, execution_id, svc.settings.lease_seconds, project=project
            )
        if token is None:
            return WakeOutcome("busy")
        lane = _Lane(session_id, token, lend_slot, time.monotonic() + KEEP_LANE_SECONDS, project)
        lane.acquired = (asked, time.time_ns())
        lane.early = early
        try:
            while self._turn(lane):
                pass
        except Exception as exc:
            if is_transient(exc):
                # The retry's own wake-up follows; looking for the head job
                # now would only hit the same fault.
                lane.then = None
            raise
        finally:
            self._leave(lane)
        return lane.outcome

    def _turn(self, lane: _Lane) -> bool:
        """Start the session's head job and run its turn; whether the lane is
        still ours for the next one."""
        svc = self.services
        feed = Feed(svc.redis)
        setup: TurnSetup | None
        job: Job | None
        quick = self._start_early(lane, feed)
        if quick is not None:
            setup, job = quick
        else:
            # The job, its session and agent, and the job's start with its
            # Ack: one transaction on PostgreSQL (Store.turn_start), which
            # reads the job's context after its start; on SQLite _run reads
            # it, after the Ack is out.
            with svc.store.turn_start(lane.session_id, svc.settings.max_context_entries) as tx:
                setup = tx.setup
                slotted = self._claim_early(lane, setup)
                if setup is None or not self._may_start(lane, setup, slotted):
                    return False
                archived = archived_delivery(setup.job, setup.session)
                job = None if archived else self._start(tx, lane.token, feed)
                # With its context, if the start read it (PostgreSQL).
                setup = tx.setup if tx.setup is not None else setup
            if archived:
                refuse_archived(svc, setup.job, setup.session)
                return True
        if tracing.on():
            return self._traced(lane, setup, job, feed)
        ran = self._run(setup, lane.token, job, feed)
        return self._end(lane, setup, ran, feed)

    def _traced(self, lane: _Lane, setup: TurnSetup, job: Job | None, feed: Feed) -> bool:
        """:meth:`_run` and :meth:`_end` inside the turn's ``chaz.turn`` span, a
        child of the span that admitted the job (its row's context; else the
        wake-up's), with the lane's acquisition and the job's wait in the
        queue before it. A job admitted in it (a spawn, a message, a
        follow-up) starts a trace of its own, linked to it."""
        head = setup.job
        # As its start wrote them (None: cancelled since the head was read).
        started = job or head
        attributes = {
            "chaz.session_id": head.session_id,
            "chaz.job_id": head.id,
            "chaz.agent_id": head.member_agent_id or setup.session.agent_id,
            "chaz.job.start": started.starts,
            # A resume after a decision or a hand-back spends no attempt.
            "chaz.job.attempt": started.attempts,
            "chaz.job.parent_job_id": head.parent_job_id,
            "chaz.job.call_depth": head.call_depth,
        }
        with tracing.span("chaz.turn", attributes, parent=head.trace_context, turn=True) as span:
            # A line in the worker's log under the turn's trace and span ids.
            log.info(
                "turn of job %s (session %s, start %d)", head.id, head.session_id, started.starts
            )
            if lane.acquired is not None:
                tracing.record("chaz.lane", *lane.acquired, {"chaz.session_id": lane.session_id})
                lane.acquired = None
            if head.starts == 0:
                queued = int(head.created_at.timestamp() * 1e9)
                tracing.record("chaz.queue", queued, time.time_ns())
            ran = self._run(setup, lane.token, job, feed)
            span.set_attributes(
                {
                    "chaz.turn.finished": ran.finished,
                    "chaz.turn.suspended": ran.suspended,
                    "chaz.turn.handed_back": ran.handed_back,
                }
            )
            return self._end(lane, setup, ran, feed)

    def _start_early(self, lane: _Lane, feed: Feed) -> tuple[TurnSetup, Job] | None:
        """The wake-up's job started in the live slot the lane took for it,
        its setup read by the same statement (``Store.start_head``), its Ack
        held in ``feed``; None when that is not the case (nothing written):
        the setup read decides then, as for any other wake-up."""
        early = lane.early
        if early is None:
            return None
        svc = self.services
        started = svc.store.start_head(
            lane.session_id,
            early.job_id,
            early.tree_id,
            lane.token,
            ack_metadata=self._ack_metadata(),
            max_context=svc.settings.max_context_entries,
        )
        if started is None:
            return None
        # The head job, in its tree, queued, with no approval or delivery to
        # wait for (the statement's own conditions): what _claim_early and
        # _may_start would have found, and the slot is its own.
        lane.early = None
        setup, job, ack = started
        feed.hold(ack)
        return setup, job

    @staticmethod
    def _ack_metadata() -> dict[str, Any]:
        """Which process runs the turn: for operators (and the crash tests)."""
        return {"host": socket.gethostname(), "pid": os.getpid()}

    def _claim_early(self, lane: _Lane, setup: TurnSetup | None) -> bool:
        """Whether the slot the lane's script took is the head job's, which
        will start in it; any other slot it took is given back."""
        early, lane.early = lane.early, None
        if early is None:
            return False
        if (
            setup is not None
            and setup.job.id == early.job_id
            and setup.job.tree_id == early.tree_id
            and setup.job.status is not JobStatus.WAITING_APPROVAL
            and not archived_delivery(setup.job, setup.session)
        ):
            return True
        if early.took:
            self._give_back(lane, early)
        return False

    def _give_back(self, lane: _Lane, early: _Early) -> None:
        """Free a slot taken with the lane for a job that does not start in it,
        and wake the session that waited longest for one."""
        svc = self.services
        woken = svc.capacity.give_back(early.job_id, early.tree_id, lane.project)
        if woken and woken != lane.session_id:
            svc.dispatcher.send_wake(woken, "", Wake.SLOT_FREED)

    def _may_start(self, lane: _Lane, setup: TurnSetup, slotted: bool = False) -> bool:
        """Whether the head job may start now: not while it waits for a
        decision, nor (unless the slot is lent, or ``slotted``: it was taken
        with the lane) while its tree is at its live limit; later jobs wait
        behind it."""
        svc, job = self.services, setup.job
        if job.status is JobStatus.WAITING_APPROVAL:
            # Nothing runs until a decision queues it again and wakes the session.
            lane.stop("approval", job.id)
            return False
        if archived_delivery(job, setup.session) or slotted:
            return True  # it ends without starting and takes no slot; or it holds one
        limits = resolve_limits(svc.settings, setup.session, setup.agent)
        if not lane.lend_slot and not svc.capacity.start(job, limits):
            # The tree is at its live limit: the job stays queued in the tree's
            # waiting set; a finishing turn wakes it.
            lane.stop("waiting", job.id)
            lane.slot_wait = job.tree_id
            return False
        return True

    def _end(self, lane: _Lane, setup: TurnSetup, ran: Ran, feed: Feed) -> bool:
        """Signal the turn's end, then what follows it; whether the lane is kept."""
        job = setup.job
        lane.outcome = WakeOutcome("ran", job.id, (*lane.outcome.ran, job.id))
        end = hand_off(
            self.services,
            job,
            lane.token,
            ran,
            feed,
            lend_slot=lane.lend_slot,
            keep_if_queued=self._keeps(lane, ran),
        )
        if ran.finished:
            after_job(self.services, job, inbox=end.inbox, session=setup.session)
        if ran.suspended:
            lane.then = None  # the head now waits for a decision, which wakes it
        if end.kept:
            return True  # more jobs wait and the lane is still ours
        lane.held = False
        if ran.handed_back:
            # Wake the session now, for a worker that still consumes (this one
            # does not): the resume need not wait for a lease to expire.
            lane.then = Wake.HANDED_BACK
        elif end.queued == 0:
            # Nothing waits. An admission racing with this release counted
            # itself before the release read the counter, or it sends its own
            # wake-up after its commit.
            lane.then = None
        return False

    def _keeps(self, lane: _Lane, ran: Ran) -> bool:
        """Whether the lane may run the session's next job too (if one waits)."""
        return (
            ran.finished
            and not lane.lend_slot
            and lane.outcome.turns < KEEP_LANE_TURNS
            and time.monotonic() < lane.deadline
            # Shutting down: the next job is another worker's.
            and not self.running.handing_back
        )

    def _leave(self, lane: _Lane) -> None:
        """Give the lane back if it is still ours, then wake what waits."""
        svc = self.services
        if lane.early is not None:
            # The setup never read the head job (a fault before it): the
            # slot taken for the wake-up's job goes back before the lane.
            early, lane.early = lane.early, None
            if early.took:
                with contextlib.suppress(Exception):
                    self._give_back(lane, early)
        if lane.held:
            with contextlib.suppress(Exception):
                svc.lanes.release(lane.session_id, lane.token, project=lane.project)
        if lane.slot_wait is not None and not svc.capacity.waits(
            lane.session_id, lane.slot_wait, lane.project
        ):
            # A turn of the tree ended after the head joined the waiting set
            # and handed it the slot; that turn's wake-up may have found the
            # lane still ours and gone. Released first, looked second: the
            # hand-over marks the session first and wakes it second, so a
            # wake-up that missed the lane is resent here.
            lane.then = Wake.SLOT_FREED
        if lane.then is None:
            return
        # Released first, looked second: an admitter commits first and wakes
        # second, so one of us always sees the other.
        nxt = svc.store.head_job(lane.session_id)
        if nxt is not None:
            svc.dispatcher.send_wake(lane.session_id, nxt.id, lane.then, tree=nxt.tree_id)

    # -- one job --------------------------------------------------------------

    def _start(self, tx: TurnStart, token: str, feed: Feed) -> Job | None:
        """Write the job's start and its Ack in the turn's setup transaction,
        the Ack held in ``feed``; None if the job moved since the setup read it."""
        setup = tx.setup
        assert setup is not None
        try:
            # The start and the Ack commit together: one transaction fewer
            # between a message and the sign that its turn began.
            job, ack = tx.start(
                token,
                ack_sender=agent_sender(setup.job.member_agent_id or setup.session.agent_id),
                ack_metadata=self._ack_metadata(),
                # A spawned turn's reservation from its caller's budget.
                usage=budgets.reserve(
                    setup.budget,
                    setup.agent.limits.narrowed(setup.session.limits),
                    setup.job.usage,
                ),
            )
        except IllegalTransition:
            # Cancelled (or finished) since the head was read: nothing to run.
            return None
        # Published once the transaction commits, by the start's signal.
        feed.hold(ack)
        return job

    def _run(self, setup: TurnSetup, token: str, job: Job | None, feed: Feed) -> Ran:
        """Run the job's turn, once its start has committed, to its end (or until
        another worker takes it over)."""
        svc = self.services
        if job is None:
            return Ran(finished=True)
        # It left the queue on its first start (a resumed turn left it then).
        cancel_requested = svc.signals.started(job, feed.take(), dequeued=job.starts == 1)
        # Only the model call needs the context: unless the start's
        # transaction read it (PostgreSQL), read now, with the Ack committed
        # and published, not between the wake-up and the Ack.
        setup = svc.store.turn_context(setup, svc.settings.max_context_entries)
        turn = Turn(svc, self.registry, self._delegation, job, setup, token, feed, cancel_requested)
        if _given_up(svc, turn):
            return Ran(finished=True)
        if job.starts > 1:
            turn.announce_resume()
        return self._think(turn)

    def _think(self, turn: Turn) -> Ran:
        """Run the turn under its lease heartbeat, watched for a cancel and a hand-back."""
        svc, job = self.services, turn.job
        turn.heartbeat = svc.lease_keeper.hold(job.session_id, turn.fence.token, job.project)
        # From here the worker's one watcher sets the turn's token as soon as
        # the job's cancel flag appears (docs/runtime.md#preemptive-cancel),
        # and a shutdown whose grace ran out hands it back.
        svc.cancel_watcher.watch(job.id, turn.cancel, job.project)
        self.running.hold(turn.cancel)
        try:
            turn.run()
            if turn.handed_back:
                return Ran(finished=False, handed_back=True)
            if not turn.suspended:
                # Still under the lane and the heartbeat: the next turn starts
                # from the Summary this may write (docs/sessions.md#compaction).
                compaction.after_turn(svc, turn.setup)
            return Ran(not turn.suspended, suspended=turn.suspended)
        except LeaseLost:
            # Another worker took this job over; it owns the session now.
            log.warning("lost the lease of job %s; leaving it to its new holder", job.id)
            metrics.turn_ended("lease_lost", turn.began)
            return Ran(finished=False)
        except Exception as exc:
            metrics.turn_ended("retry" if is_transient(exc) else "error", turn.began)
            raise
        finally:
            self.running.drop(turn.cancel)
            svc.cancel_watcher.unwatch(job.id, turn.cancel)
            svc.lease_keeper.drop(turn.heartbeat)


def _given_up(services: Services, turn: Turn) -> bool:
    """End a restarted turn that must not run again; whether it was ended."""
    job = turn.job
    # Only a restart spends a second attempt: a resume after an approval
    # decision or a hand-back stopped at a safe point and replays nothing.
    if job.attempts > 1 and deliveries.lost_request(services, job):
        # A session_send/session_create request is never replayed: its lost
        # turn ends here, and its one result goes back (docs/sessions.md).
        turn.fail(
            JobStatus.INTERRUPTED,
            ChazError("the request's turn was lost mid-flight; a request is never replayed"),
            code=DELIVERY_INTERRUPTED,
        )
        return True
    if job.attempts > MAX_ATTEMPTS:
        turn.fail(
            JobStatus.INTERRUPTED,
            ChazError(f"the turn was interrupted {MAX_ATTEMPTS} times; giving up"),
            code="turn.interrupted",
        )
        return True
    return False
