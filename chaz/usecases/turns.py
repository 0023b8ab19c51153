"""Running turns: the lane, the job's life, and the entries a turn writes.

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
import json
import logging
import os
import secrets
import socket
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from chaz import metrics
from chaz.coord.lanes import Lease
from chaz.coord.partials import PartialPublisher
from chaz.coord.pubsub import publish
from chaz.coord.signals import TurnEnd
from chaz.domain import rooms
from chaz.domain.approvals import (
    ALWAYS_ASKED,
    REFUSALS,
    Approval,
    ApprovalState,
    ToolPolicy,
    effective_policy,
    gated,
    held,
    request_id,
)
from chaz.domain.deliveries import INTERRUPTED as DELIVERY_INTERRUPTED
from chaz.domain.deliveries import Delivered, DeliveryKind, NewBranch, Reply, Sender
from chaz.domain.entries import Entry, EntryType, NewEntry, agent_sender
from chaz.domain.jobs import Job, JobStatus
from chaz.domain.limits import resolve_limits
from chaz.domain.principals import Principal, parse_grants, turn_grants
from chaz.domain.sessions import Session, is_interactive
from chaz.errors import Cancelled, ChazError, HandedBack, IllegalTransition, LeaseLost
from chaz.ids import utcnow
from chaz.plumbing.faults import is_transient
from chaz.runtime.backends import make_backend
from chaz.runtime.backends.base import ToolCallRequest, TurnContext
from chaz.runtime.cancel import CancelToken, Running
from chaz.runtime.context import build_context
from chaz.runtime.events import EventSink, RuntimeEvent, ToolCallEvent
from chaz.runtime.loop import RUN, Checkpoint, LoopPorts, Suspend, Verdict, run_loop
from chaz.runtime.registry import ToolContext, ToolRegistry
from chaz.services import Services
from chaz.store.core import TurnStart
from chaz.store.types import Appended, Fence, Finish, JobFields, TurnSetup
from chaz.usecases import admission, compaction, completion, control, deliveries, naming

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


#: A job as its turn's start wrote it, and the Ack written with it.
_Started = tuple[Job, Entry | None]


@dataclass(frozen=True)
class _Ran:
    """How one job's turn ended."""

    #: The job reached a terminal state (False: another worker took it over).
    finished: bool
    #: Its last entry, committed and not yet published.
    last: Entry | None = None
    #: The turn suspended for approval (docs/approvals.md): the job is not
    #: finished, but its lane and live slot are given back.
    suspended: bool = False
    #: The turn was handed back (its worker is shutting down): the job is not
    #: finished, keeps its live slot, and another worker resumes it at once.
    handed_back: bool = False


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

    def wake(self, session_id: str, execution_id: str, *, lend_slot: bool = False) -> WakeOutcome:
        """Handle one wake-up for ``session_id`` (``execution_id`` is a hint).

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
            return self._wake(session_id, execution_id, lend_slot)
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
            # lease watch wakes the session then (chaz.coord.leases).
            self.services.dispatcher.wake(
                session_id, execution_id, countdown=RETRY_SECONDS, patient=True
            )
            return WakeOutcome("retry", execution_id or None)

    def _wake(self, session_id: str, execution_id: str, lend_slot: bool) -> WakeOutcome:
        svc = self.services
        token = svc.lanes.acquire(session_id, execution_id, svc.settings.lease_seconds)
        if token is None:
            return WakeOutcome("busy")
        outcome = WakeOutcome("idle")
        held, look, handed_back = True, True, False
        deadline = time.monotonic() + KEEP_LANE_SECONDS
        try:
            while True:
                started: _Started | None = None
                # The job, its session, agent and context, and the job's start
                # with its Ack: one transaction on PostgreSQL (Store.turn_start).
                with svc.store.turn_start(session_id, svc.settings.max_context_entries) as tx:
                    setup = tx.setup
                    if setup is None:
                        break
                    job = setup.job
                    if job.status is JobStatus.WAITING_APPROVAL:
                        # Nothing runs until a decision queues it again and wakes
                        # the session; later jobs wait behind it.
                        look = False
                        outcome = WakeOutcome("approval", job.id, outcome.ran)
                        break
                    # A delivery accepted before the archive never starts.
                    archived = bool(
                        job.delivery_id
                        and setup.session.archived
                        and job.status is JobStatus.QUEUED
                    )
                    if not archived:
                        limits = resolve_limits(svc.settings, setup.session, setup.agent)
                        if not lend_slot and not svc.capacity.start(job, limits):
                            # The tree is at its live limit: the job stays queued and
                            # waits in the tree's waiting set; a finishing turn wakes it.
                            look = False
                            outcome = WakeOutcome("waiting", job.id, outcome.ran)
                            break
                        started = self._start(tx, token)
                if archived:
                    refuse_archived(svc, job, setup.session)
                    continue
                ran = self._run(setup, token, started)
                outcome = WakeOutcome("ran", job.id, (*outcome.ran, job.id))
                keep = (
                    ran.finished
                    and not lend_slot
                    and outcome.turns < KEEP_LANE_TURNS
                    and time.monotonic() < deadline
                    # Shutting down: the next job is another worker's.
                    and not self.running.handing_back
                )
                end = hand_off(
                    svc, session_id, job, token, ran, lend_slot=lend_slot, keep_if_queued=keep
                )
                if ran.finished:
                    after_job(svc, job, inbox=end.inbox, session=setup.session)
                if ran.suspended:
                    look = False  # the head now waits for a decision, which wakes it
                if end.kept:
                    continue  # more jobs wait and the lane is still ours
                held = False
                if ran.handed_back:
                    handed_back = True
                    # Wake the session now, for a worker that still consumes
                    # (this one does not): the resume need not wait for a
                    # lease to expire.
                    break
                if end.queued == 0:
                    # Nothing waits. An admission racing with this release
                    # counted itself before the release read the counter,
                    # or it sends its own wake-up after its commit.
                    look = False
                break
        except Exception as exc:
            if is_transient(exc):
                # The retry's own wake-up follows; looking for the head job
                # now would only hit the same fault.
                look = False
            raise
        finally:
            if held:
                with contextlib.suppress(Exception):
                    svc.lanes.release(session_id, token)
            if look:
                # Released first, looked second: an admitter commits first and
                # wakes second, so one of us always sees the other.
                nxt = svc.store.head_job(session_id)
                if nxt is not None:
                    # A hand-back's wake-up keeps trying through a broker blip:
                    # nobody else would send it until the reconciler's sweep.
                    svc.dispatcher.wake(session_id, nxt.id, patient=handed_back)
        return outcome

    # -- one job --------------------------------------------------------------

    def _start(self, tx: TurnStart, token: str) -> _Started | None:
        """Write the job's start and its Ack in the turn's setup transaction;
        None if the job moved since the setup read it."""
        setup = tx.setup
        assert setup is not None
        try:
            # The start and the Ack commit together: one transaction fewer
            # between a message and the sign that its turn began.
            return tx.start(
                token,
                ack_sender=agent_sender(setup.job.member_agent_id or setup.session.agent_id),
                # Which process runs the turn: for operators (and the crash tests).
                ack_metadata={"host": socket.gethostname(), "pid": os.getpid()},
            )
        except IllegalTransition:
            # Cancelled (or finished) since the head was read: nothing to run.
            return None

    def _run(self, setup: TurnSetup, token: str, started: _Started | None) -> _Ran:
        """Run the job's turn, once its start has committed, to its end (or until
        another worker takes it over)."""
        svc = self.services
        if started is None:
            return _Ran(finished=True)
        job, ack = started
        # It left the queue on its first start (a resumed turn left it then).
        cancel_requested = svc.signals.started(job, ack, dequeued=job.attempts == 1)
        turn = Turn(self, job, Fence(job.id, token), setup, cancel_requested)
        if job.attempts > 1 and _lost_request(svc, job):
            # A session_send/session_create request is never replayed: its
            # lost turn ends here, and its one result goes back (docs/sessions.md).
            last = turn.fail(
                JobStatus.INTERRUPTED,
                ChazError("the request's turn was lost mid-flight; a request is never replayed"),
                code=DELIVERY_INTERRUPTED,
            )
            return _Ran(finished=True, last=last)
        if job.attempts > MAX_ATTEMPTS and not _resumed_by_decisions(svc, job):
            last = turn.fail(
                JobStatus.INTERRUPTED,
                ChazError(f"the turn was interrupted {MAX_ATTEMPTS} times; giving up"),
                code="turn.interrupted",
            )
            return _Ran(finished=True, last=last)
        if job.attempts > 1:
            turn.announce_resume()
        turn.heartbeat = svc.lease_keeper.hold(job.session_id, token)
        # From here the worker's one watcher sets the turn's token as soon as
        # the job's cancel flag appears (docs/runtime.md#preemptive-cancel),
        # and a shutdown whose grace ran out hands it back.
        svc.cancel_watcher.watch(job.id, turn.cancel)
        self.running.hold(turn.cancel)
        try:
            last = turn.run()
            if turn.handed_back:
                return _Ran(finished=False, handed_back=True)
            if not turn.suspended:
                # Still under the lane and the heartbeat: the next turn starts
                # from the Summary this may write (docs/sessions.md#compaction).
                compaction.after_turn(svc, setup)
            return _Ran(not turn.suspended, last, suspended=turn.suspended)
        except LeaseLost:
            # Another worker took this job over; it owns the session now.
            log.warning("lost the lease of job %s; leaving it to its new holder", job.id)
            metrics.turn_ended("lease_lost", turn.began)
            return _Ran(finished=False)
        except Exception as exc:
            metrics.turn_ended("retry" if is_transient(exc) else "error", turn.began)
            raise
        finally:
            self.running.drop(turn.cancel)
            svc.cancel_watcher.unwatch(job.id, turn.cancel)
            svc.lease_keeper.drop(turn.heartbeat)


def _resumed_by_decisions(services: Services, job: Job) -> bool:
    """Whether the job's attempts past the limit are resumes after approval
    decisions (docs/approvals.md) or hand-backs (docs/operations.md#termination),
    which are not failed attempts."""
    cp = Checkpoint.from_json(services.store.checkpoint(job.id))
    return cp.counted_attempts(job.attempts) <= MAX_ATTEMPTS


def _lost_request(services: Services, job: Job) -> bool:
    """Whether a restarted job is a seed 002 request whose turn was lost mid-flight."""
    if job.delivery_id is None:
        return False
    cp = Checkpoint.from_json(services.store.checkpoint(job.id))
    # A hand-back stopped the turn at a safe point: its resume replays nothing.
    return deliveries.lost_request(services, job, cp.suspensions + cp.handbacks)


def hand_off(
    services: Services,
    session_id: str,
    job: Job,
    token: str,
    ran: _Ran,
    *,
    lend_slot: bool,
    keep_if_queued: bool,
) -> TurnEnd:
    """After a turn's last write: publish it, free its live slot, and give the
    lane back unless ``keep_if_queued`` and more jobs wait; wake the session
    of the tree that waited for the freed slot."""
    end = services.signals.ended(
        job,
        token,
        ran.last,
        finished=ran.finished,
        free_slot=(ran.finished or ran.suspended) and not lend_slot,
        keep_if_queued=keep_if_queued,
    )
    if end.woken and end.woken != session_id:
        head = services.store.head_job(end.woken)
        services.dispatcher.wake(end.woken, head.id if head else "")
    return end


def after_job(services: Services, job: Job, *, inbox: bool, session: Session | None = None) -> None:
    """What follows a job's end outside its transaction: its follow-up is admitted
    in the caller's session, messages that waited in this session's inbox are
    admitted (docs/collaboration.md#follow-ups, #inbox), and the session is
    renamed when it reached a rename point (#names).

    A failure here is logged, not raised: the job's end has committed, and
    the reconciler's sweep finishes what was left (chaz.usecases.deliveries.sweep).
    """
    try:
        if job.delivery_id is not None:
            deliveries.settle(services, job)
        if inbox:
            deliveries.drain(services, job.session_id)
        if session is not None:
            naming.after_turn(services, session, job)
    except Exception:
        log.warning("after job %s: deliveries left to the sweep", job.id, exc_info=True)


def refuse_archived(services: Services, job: Job, session: Session) -> None:
    """End a delivered job that has not started because its session was archived.

    It ends ``cancelled`` with the reason (seed 003 §2.6: accepted deliveries
    recheck the archive state before they start), and its sender hears so
    through its follow-up.
    """
    reason = f"session {session.name or session.id} was archived before this job started"
    try:
        done = services.store.transition(
            job.id,
            JobStatus.CANCELLED,
            expected_version=job.version,
            error={"code": "session.archived", "message": reason, "retryable": False},
            completion=completion.ended,
        )
    except ChazError:
        return  # it moved under us (a cancel): whoever moved it settles it
    services.quotas.ended(done, dequeued=True)
    note = NewEntry(
        EntryType.ERROR,
        agent_sender(session.agent_id),
        f"session.archived: {reason}",
        metadata={"code": "session.archived", "retryable": False},
        idempotency_key=f"job:{job.id}:error",
        job_id=job.id,
    )
    admission.append(services, job.session_id, note)
    after_job(services, done, inbox=False)


class Turn:
    """One job's turn on this worker; its methods are the turn's steps.

    Holds what every step needs: the job as started, the fence its writes
    carry, the setup read before it started (session, agent, context), the
    lease heartbeat, and whether a cancel was already requested.
    """

    def __init__(
        self,
        runner: TurnRunner,
        job: Job,
        fence: Fence,
        setup: TurnSetup,
        cancel_requested: bool,
    ) -> None:
        self.runner = runner
        self.services = runner.services
        self.job = job
        self.fence = fence
        self.setup = setup
        self.cancel_requested = cancel_requested
        #: Set as soon as the job's cancel is seen (by the worker's watcher or
        #: a step boundary): what blocks inside the turn waits on it.
        self.cancel = CancelToken()
        if cancel_requested:
            self.cancel.set()
        #: Set while the turn runs (see :meth:`TurnRunner._run`).
        self.heartbeat: Lease | None = None
        #: The agent the turn runs for: in a room, the member the job woke.
        self.agent_id = job.member_agent_id or setup.session.agent_id
        #: The sender of everything the turn writes.
        self.me = agent_sender(self.agent_id)
        #: Set when the turn suspended for approval instead of ending.
        self.suspended = False
        #: Set when the turn was handed back instead of ending.
        self.handed_back = False
        #: Set once an ``approve_all`` decision of this job is seen.
        self.all_approved = False
        #: When it started, for its duration (counted here: one Turn per start).
        self.began = metrics.turn_started(job.attempts, job.created_at, job.started_at)

    def run(self) -> Entry | None:
        """The turn itself; its last entry (reply or Error), committed with the job's end."""
        sink = EventSink(self.write_event)
        try:
            text = self.think(sink)
            sink.close()
            # The last check before the reply commits: a cancel seen by now
            # means no reply (docs/contracts.md#cancel). A hand-back does not
            # stop a turn that has its answer: replying is finishing.
            if not self.cancel.handing_back:
                self.cancel.raise_if_set()
        except LeaseLost:
            _close_quietly(sink)
            raise
        except HandedBack:
            sink.close()  # its ToolCall/ToolResult entries so far, under our fence
            self.hand_back()
            return None
        except Suspend as held:
            sink.close()  # its ToolCall/ToolResult entries so far come first
            return self.suspend(held.call)
        except Cancelled as exc:
            _close_quietly(sink)
            return self.fail(JobStatus.CANCELLED, exc)
        except Exception as exc:
            _close_quietly(sink)
            if is_transient(exc):
                raise  # retried from the checkpoint (see TurnRunner.wake)
            if isinstance(exc, ChazError):
                return self.fail(JobStatus.FAILED, exc)
            # The session's readers get a code and a reference; the
            # exception (a driver's carries its SQL and parameters) goes to
            # the worker log only.
            ref = secrets.token_hex(6)
            log.exception("turn %s crashed (ref %s)", self.job.id, ref)
            return self.fail(
                JobStatus.FAILED,
                ChazError(f"the turn stopped on an internal error (ref {ref})", ref=ref),
                code="turn.crashed",
            )
        return self.reply(text)

    def think(self, sink: EventSink) -> str:
        """Run the ReAct loop (from the checkpoint, on a resumed attempt): the answer."""
        svc, job = self.services, self.job
        session, spec, trigger = self.setup.session, self.setup.agent, self.setup.trigger
        context = build_context(
            spec.system_prompt, self.setup.history, self.agent_id, notes=self._room_notes()
        )
        limits = spec.limits.narrowed(session.limits)
        resume = Checkpoint.from_json(svc.store.checkpoint(job.id)) if job.attempts > 1 else None
        turn = TurnContext(
            session_id=job.session_id,
            job_id=job.id,
            trigger_content=trigger.content if trigger else "",
        )
        tool_ctx = ToolContext(
            session_id=job.session_id,
            job_id=job.id,
            agent_id=self.agent_id,
            tree_id=job.tree_id,
            call_depth=job.call_depth,
            allowed_tools=self._allowed_tools(),
            services=svc,
            limits=limits,
            message_count=job.message_count,
            delegation=RunnerDelegation(self.runner),
            flush=sink.flush,
            principal=self.principal(),
            unattended=job.unattended,
            owner=job.owner,
            cancel=self.cancel,
        )
        assert self.heartbeat is not None, "a turn thinks only while its lease is kept"
        ports = LoopPorts(
            backend=make_backend(
                spec,
                svc.settings,
                self.cancel,
                PartialPublisher(svc.redis, job.session_id, job.id),
            ),
            registry=self.runner.registry,
            sink=sink,
            save=lambda cp: svc.store.save_checkpoint(self.fence, cp.to_json()),
            stop_check=_StopCheck(svc, job.id, self.heartbeat, self.cancel),
            approve=self.approve,
            cancel=self.cancel,
        )
        max_steps = min(
            limits.max_turn_steps or svc.settings.max_turn_steps, svc.settings.max_turn_steps
        )
        return run_loop(ports, context, turn, tool_ctx, max_steps, resume)

    def principal(self) -> Principal:
        """Who acts in this turn (docs/security.md#grants-inside-turns): the agent,
        in the job's project, holding its own grants and its starter's intersected."""
        job = self.job
        grants = turn_grants(self.setup.agent.grant_set(), parse_grants(job.grants))
        return Principal(f"agent:{self.agent_id}", job.project, grants, operator=False)

    # -- approvals (docs/approvals.md) ----------------------------------------

    def _policy(self, tool: str) -> ToolPolicy | None:
        return effective_policy(
            self.setup.agent.tool_policies, tool, unattended=self.job.unattended
        )

    def approve(self, call: ToolCallRequest) -> Verdict:
        """The loop's approval gate: run a call its policy does not hold; for
        one it holds, the decision if there is one, else :class:`Suspend`.

        ``unless_auto_approved`` runs unasked in a ``bypass`` session; an
        ``approve_all`` decision earlier in this job lets the rest of its
        gated calls run; neither lifts the unattended policy."""
        job = self.job
        if call.name not in self._allowed_tools():
            return RUN  # the registry refuses it: nobody is asked about a tool it lacks
        if call.name in ALWAYS_ASKED and not self._interactive():
            return RUN  # the tool refuses it (session.tool_forbidden): nobody is asked
        policy = self._policy(call.name)
        if not gated(
            policy,
            call.name,
            unattended=job.unattended,
            permission_mode=self.setup.session.permission_mode,
        ):
            return RUN
        if not held(call.name, job.unattended) and self._approved_all():
            return RUN
        found = self.services.store.approvals.find(request_id(self.job.id, call.id))
        if found is None or found.state is ApprovalState.PENDING:
            raise Suspend(call)
        if found.state is ApprovalState.APPROVED:
            return RUN
        code, message = REFUSALS[found.state]
        return Verdict(False, json.dumps({"error": {"code": code, "message": message}}))

    def _interactive(self) -> bool:
        """Whether a person's Message started this turn (seed 002's session tools)."""
        job = self.job
        trigger = self.services.store.entry(job.trigger_entry_id) if job.trigger_entry_id else None
        return is_interactive(job, trigger)

    def _approved_all(self) -> bool:
        """Whether someone decided ``approve_all`` on a request of this job."""
        if not self.all_approved:
            self.all_approved = self.services.store.approvals.approved_all(self.job.id)
        return self.all_approved

    def suspend(self, call: ToolCallRequest) -> Entry | None:
        """Park the turn on ``call``'s approval request: the request and its
        ApprovalRequest entry are written and the job waits, holding nothing.
        A cancel requested meanwhile ends the turn cancelled instead."""
        job = self.job
        policy = self._policy(call.name)
        assert policy is not None, "only a gated call suspends"
        now = utcnow()
        approval = Approval(
            request_id=request_id(job.id, call.id),
            job_id=job.id,
            session_id=job.session_id,
            tool=call.name,
            call_id=call.id,
            arguments=policy.shown(call.arguments),
            state=ApprovalState.PENDING,
            created_at=now,
            expires_at=now + timedelta(seconds=policy.timeout),
            project=job.project,
        )
        draft = NewEntry(
            EntryType.APPROVAL_REQUEST,
            self.me,
            json.dumps({"tool": call.name, "arguments": approval.arguments}),
            metadata={
                "request_id": approval.request_id,
                "tool": call.name,
                "call_id": call.id,
                "expires_at": approval.expires_at.isoformat(),
            },
            idempotency_key=f"approval:{approval.request_id}:request",
            job_id=job.id,
        )
        try:
            _, entry = self.services.store.approvals.suspend(self.fence, approval, draft)
        except IllegalTransition:
            return self.fail(JobStatus.CANCELLED, Cancelled("the job was cancelled"))
        self.suspended = True
        metrics.turn_ended("suspended", self.began)
        return entry

    def hand_back(self) -> None:
        """Give the turn back for another worker to resume (this one is shutting
        down; docs/operations.md#termination): no reply, no Error.

        The checkpoint counts the hand-back, so the resume spends no attempt;
        the job's lease token is dropped in the same write, so nothing this
        worker still holds can write for it. The caller releases the lane and
        wakes the session.
        """
        store = self.services.store
        cp = Checkpoint.from_json(store.checkpoint(self.job.id))
        cp.handbacks += 1
        store.hand_back(self.fence, cp.to_json())
        self.handed_back = True
        metrics.turn_ended("handed_back", self.began)
        log.warning("handed back job %s (the worker is shutting down)", self.job.id)

    # -- rooms (docs/rooms.md) ------------------------------------------------

    def _room_notes(self) -> list[str]:
        """A room member's roster note: who else is here, how to address them."""
        session = self.setup.session
        if session.members is None:
            return []
        return [rooms.roster(self.agent_id, session.agent_id, session.members)]

    def _allowed_tools(self) -> frozenset[str]:
        """The agent's tools; the session's ``tools`` replace them (a room narrows
        each member's own tools by them instead)."""
        session, spec = self.setup.session, self.setup.agent
        if session.tools is None:
            return frozenset(spec.tools)
        if session.members is None:
            return frozenset(session.tools)
        return frozenset(spec.tools) & frozenset(session.tools)

    def write_event(self, event: RuntimeEvent) -> None:
        """Write a ToolCall or ToolResult entry (the event sink's writer)."""
        job = self.job
        if isinstance(event, ToolCallEvent):
            etype, suffix = EntryType.TOOL_CALL, "call"
            content = json.dumps({"name": event.name, "arguments": event.arguments})
            meta: dict[str, Any] = {"call_id": event.call_id, "tool": event.name}
        else:
            etype, suffix = EntryType.TOOL_RESULT, "result"
            content = event.output
            meta = {"call_id": event.call_id, "tool": event.name, "is_error": event.is_error}
        key = f"job:{job.id}:{suffix}:{event.call_id}"
        draft = NewEntry(etype, self.me, content, metadata=meta, idempotency_key=key, job_id=job.id)
        admission.append(self.services, job.session_id, draft, self.fence)

    def announce_resume(self) -> None:
        """A status entry that tells the session's readers this turn was resumed."""
        job = self.job
        draft = NewEntry(
            EntryType.ACK,
            self.me,
            f"resumed: attempt {job.attempts}",
            metadata={"resumed": job.attempts, "host": socket.gethostname(), "pid": os.getpid()},
            idempotency_key=f"job:{job.id}:resume:{job.attempts}",
            job_id=job.id,
        )
        admission.append(self.services, job.session_id, draft, self.fence)

    def reply(self, text: str) -> Entry | None:
        """End the job ``succeeded`` with its reply; the entry if this wrote it."""
        job = self.job
        draft: NewEntry | None = NewEntry(
            EntryType.MESSAGE, self.me, text, idempotency_key=f"job:{job.id}:reply"
        )
        if job.fire_id is not None and not text.strip():
            # A schedule fire's empty reply writes nothing (docs/schedules.md).
            draft = None
        finish = Finish(job.id, JobStatus.SUCCEEDED, result=text)
        try:
            if self.setup.session.members is None or draft is None:
                done = self.services.store.end_turn(
                    self.fence, finish, job.session_id, draft, completion=completion.ended
                )
                metrics.turn_ended(JobStatus.SUCCEEDED.value, self.began)
                return done.entry if done is not None and done.created else None
            # A room: the reply may wake the member it mentions, in the same transaction.
            with admission.room_rules(self.services, job.session_id) as room:
                ended = self.services.store.end_turn(
                    self.fence, finish, job.session_id, draft, room, completion=completion.ended
                )
        except IllegalTransition:
            # The cancel committed after the turn's last look at its token and
            # before this end: it wins, and the reply is not written
            # (docs/contracts.md#cancel).
            return self.fail(JobStatus.CANCELLED, Cancelled("the job was cancelled"))
        assert ended is not None, "a reply with an entry returns it"
        metrics.turn_ended(JobStatus.SUCCEEDED.value, self.began)
        for note in ended.notices:
            publish(self.services.redis, note)
        return ended.entry if ended.created else None

    def fail(self, status: JobStatus, exc: ChazError, *, code: str | None = None) -> Entry | None:
        """End the job in ``status`` with an Error entry; the entry if this wrote it."""
        job = self.job
        error = exc.to_dict()
        if code:
            error["code"] = code
        done = self.services.store.end_turn(
            self.fence,
            Finish(job.id, status, error=error),
            job.session_id,
            NewEntry(
                EntryType.ERROR,
                self.me,
                f"{error['code']}: {exc.message}",
                metadata={"code": error["code"], "retryable": error["retryable"]},
                idempotency_key=f"job:{job.id}:error",
            ),
            completion=completion.ended,
        )
        metrics.turn_ended(status.value, self.began)
        return done.entry if done is not None and done.created else None


class RunnerDelegation:
    """The use cases collaboration tools call (:class:`chaz.runtime.registry.Delegation`),
    for the turns of one :class:`TurnRunner`."""

    def __init__(self, runner: TurnRunner) -> None:
        self._runner = runner
        self._services = runner.services

    def admit(
        self, session_id: str, draft: NewEntry, *, job_fields: JobFields | None = None
    ) -> Appended:
        return admission.admit(self._services, session_id, draft, job_fields=job_fields)

    def run_inline(self, session_id: str, job_id: str) -> None:
        self._runner.wake(session_id, job_id, lend_slot=True)

    def wait(self, job_id: str, timeout: float) -> Job:
        return control.wait_terminal(self._services, job_id, timeout)

    def output(
        self,
        job_id: str,
        viewer_session_id: str,
        *,
        block: bool,
        timeout: float,
        full: bool = False,
    ) -> dict[str, Any]:
        return control.job_output(
            self._services, job_id, viewer_session_id, block=block, timeout=timeout, full=full
        )

    def spawn(self, sender: Sender, branch: NewBranch) -> Delivered:
        return deliveries.spawn(self._services, sender, branch)

    def deliver(
        self, sender: Sender, target: Session, kind: DeliveryKind, body: str, reply: Reply
    ) -> Delivered:
        return deliveries.deliver(self._services, sender, target, kind, body, reply=reply)


class _StopCheck:
    """The runtime's check at each step boundary: lease lost, or cancel requested.

    The first check uses what the turn's start saw (the start's signal to
    Redis also read the cancel flag, and set the token), sparing a round
    trip on every turn; later ones read the flag, since the watcher's poll
    may not have run yet, and set the token when they find it.
    """

    def __init__(
        self, services: Services, job_id: str, heartbeat: Lease, cancel: CancelToken
    ) -> None:
        self._services = services
        self._job_id = job_id
        self._heartbeat = heartbeat
        self._cancel = cancel
        self._first = True

    def __call__(self) -> None:
        if self._heartbeat.lost.is_set():
            raise LeaseLost(f"job {self._job_id} lost its lane lease")
        first, self._first = self._first, False
        if not first and not self._cancel.is_set() and self._services.flags.requested(self._job_id):
            self._cancel.set()
        self._cancel.raise_if_set()


def _close_quietly(sink: EventSink) -> None:
    try:
        sink.close()
    except Exception:
        log.debug("event sink closed with an error", exc_info=True)
