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

import json
import logging
import os
import socket
from dataclasses import dataclass
from typing import Any

from chaz.admission import resolve_limits
from chaz.coord import keys
from chaz.coord.lanes import Lease
from chaz.coord.pubsub import publish
from chaz.domain.agents import AgentSpec
from chaz.domain.entries import Entry, EntryType, agent_sender
from chaz.domain.jobs import Job, JobStatus
from chaz.domain.sessions import Session
from chaz.errors import Cancelled, ChazError, IllegalTransition, LeaseLost
from chaz.runtime.backends import make_backend
from chaz.runtime.backends.base import TurnContext
from chaz.runtime.context import build_context
from chaz.runtime.events import EventSink, RuntimeEvent, ToolCallEvent
from chaz.runtime.loop import Checkpoint, LoopPorts, run_loop
from chaz.runtime.tools import ToolContext
from chaz.services import Services
from chaz.store.repo import Fence, Finish

log = logging.getLogger(__name__)

#: A job whose turn was started this many times without finishing (each time its
#: worker died) ends ``interrupted`` instead of being resumed once more.
MAX_ATTEMPTS = 3


@dataclass(frozen=True)
class WakeOutcome:
    """What a wake-up did: ``ran`` a job, found the lane ``busy``, or the session ``idle``."""

    status: str
    job_id: str | None = None


class TurnRunner:
    """Runs the next turn of a session under its lane lease."""

    def __init__(self, services: Services) -> None:
        self.services = services

    def wake(self, session_id: str, execution_id: str, *, lend_slot: bool = False) -> WakeOutcome:
        """Handle one wake-up for ``session_id`` (``execution_id`` is a hint).

        ``lend_slot`` runs the turn without taking a live slot of its tree: a
        foreground parent that runs its child inline lends the child its own
        slot while it waits, so a full tree cannot deadlock on itself.
        """
        svc = self.services
        ttl = svc.settings.lease_seconds
        token = svc.lanes.acquire(session_id, execution_id, ttl)
        if token is None:
            return WakeOutcome("busy")
        outcome = WakeOutcome("idle")
        wake_next = True
        try:
            # One read: limits, context and tools all need the session and agent.
            setup = svc.store.head_with_owner(session_id)
            if setup is not None:
                job, session, spec = setup
                limits = resolve_limits(svc.settings, session, spec)
                if not lend_slot and not svc.admission.start(job, limits):
                    # The tree is at its live limit: the job stays queued and
                    # waits in the tree's waiting set; a finishing turn wakes it.
                    wake_next = False
                    outcome = WakeOutcome("waiting", job.id)
                else:
                    if self._run(job, token, session, spec) and not lend_slot:
                        self._hand_off(job)
                    outcome = WakeOutcome("ran", job.id)
        finally:
            svc.lanes.release(session_id, token)
            if wake_next:
                nxt = svc.store.head_job(session_id)
                if nxt is not None:
                    svc.dispatcher.wake(session_id, nxt.id)
        return outcome

    def _hand_off(self, job: Job) -> None:
        """Give the finished job's live slot to a session waiting in its tree."""
        svc = self.services
        woken = svc.admission.finished(job)
        if woken and woken != job.session_id:
            head = svc.store.head_job(woken)
            svc.dispatcher.wake(woken, head.id if head else "")

    # -- one job --------------------------------------------------------------

    def _run(self, job: Job, token: str, session: Session, spec: AgentSpec) -> bool:
        """Run the job's turn; True when the job has reached a terminal state."""
        svc = self.services
        try:
            # The start and the Ack commit together: one transaction fewer
            # between a message and the sign that its turn began.
            job, ack = svc.store.start_turn(
                job.id,
                token,
                ack_sender=agent_sender(session.agent_id),
                # Which process runs the turn: for operators (and the crash tests).
                ack_metadata={"host": socket.gethostname(), "pid": os.getpid()},
            )
        except IllegalTransition:
            # Cancelled (or finished) since we read the head: nothing to run.
            return True
        if ack is not None:
            publish(svc.redis, ack)
        if job.attempts == 1:
            # It left the queue now (a resumed turn left it on its first start).
            svc.admission.dequeued(job.session_id)
        fence = Fence(job.id, token)
        if job.attempts > MAX_ATTEMPTS:
            self._fail(
                job,
                fence,
                session.agent_id,
                JobStatus.INTERRUPTED,
                ChazError(f"the turn's worker died {MAX_ATTEMPTS} times; giving up"),
                code="turn.interrupted",
            )
            return True
        heartbeat = svc.lease_keeper.hold(job.session_id, token)
        try:
            self._turn(job, fence, session, spec, heartbeat)
        except LeaseLost:
            # Another worker took this job over; it owns the session now.
            log.warning("lost the lease of job %s; leaving it to its new holder", job.id)
            return False
        finally:
            svc.lease_keeper.drop(heartbeat)
        return True

    def _turn(
        self, job: Job, fence: Fence, session: Session, spec: AgentSpec, heartbeat: Lease
    ) -> None:
        svc = self.services
        agent_id = session.agent_id
        me = agent_sender(agent_id)
        sink = EventSink(lambda ev: self._write_event(job, fence, me, ev))
        try:
            text = self._think(job, fence, session, spec, sink, heartbeat)
            sink.close()
        except LeaseLost:
            _close_quietly(sink)
            raise
        except Cancelled as exc:
            _close_quietly(sink)
            self._fail(job, fence, agent_id, JobStatus.CANCELLED, exc)
            return
        except ChazError as exc:
            _close_quietly(sink)
            self._fail(job, fence, agent_id, JobStatus.FAILED, exc)
            return
        except Exception as exc:
            _close_quietly(sink)
            log.exception("turn %s crashed", job.id)
            self._fail(
                job,
                fence,
                agent_id,
                JobStatus.FAILED,
                ChazError(f"{type(exc).__name__}: {exc}"),
                code="turn.crashed",
            )
            return
        svc.append(
            job.session_id,
            EntryType.MESSAGE,
            me,
            text,
            job_id=job.id,
            idempotency_key=f"job:{job.id}:reply",
            admit=False,
            fence=fence,
            finish=Finish(job.id, JobStatus.SUCCEEDED, result=text),
        )
        self._clear_cancel(job.id)

    def _think(
        self,
        job: Job,
        fence: Fence,
        session: Session,
        spec: AgentSpec,
        sink: EventSink,
        heartbeat: Lease,
    ) -> str:
        svc = self.services
        agent_id = session.agent_id
        history, trigger = svc.store.turn_context(
            job.session_id, job.trigger_entry_id, svc.settings.max_context_entries
        )
        context = build_context(spec.system_prompt, history, agent_id)
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
            agent_id=agent_id,
            tree_id=job.tree_id,
            call_depth=job.call_depth,
            allowed_tools=frozenset(session.tools if session.tools is not None else spec.tools),
            services=svc,
            limits=limits,
            message_count=job.message_count,
        )
        ports = LoopPorts(
            backend=make_backend(spec, svc.settings),
            registry=svc.tools,
            sink=sink,
            save=lambda cp: svc.store.save_checkpoint(fence, cp.to_json()),
            stop_check=lambda: self._stop_check(job.id, heartbeat),
        )
        max_steps = min(
            limits.max_turn_steps or svc.settings.max_turn_steps, svc.settings.max_turn_steps
        )
        return run_loop(ports, context, turn, tool_ctx, max_steps, resume)

    def _stop_check(self, job_id: str, heartbeat: Lease) -> None:
        if heartbeat.lost.is_set():
            raise LeaseLost(f"job {job_id} lost its lane lease")
        if self.services.redis.exists(keys.cancel(job_id)):
            raise Cancelled("the job was cancelled")

    def _write_event(self, job: Job, fence: Fence, sender: str, event: RuntimeEvent) -> None:
        if isinstance(event, ToolCallEvent):
            etype, suffix = EntryType.TOOL_CALL, "call"
            content = json.dumps({"name": event.name, "arguments": event.arguments})
            meta: dict[str, Any] = {"call_id": event.call_id, "tool": event.name}
        else:
            etype, suffix = EntryType.TOOL_RESULT, "result"
            content = event.output
            meta = {"call_id": event.call_id, "tool": event.name, "is_error": event.is_error}
        self.services.append(
            job.session_id,
            etype,
            sender,
            content,
            job_id=job.id,
            idempotency_key=f"job:{job.id}:{suffix}:{event.call_id}",
            admit=False,
            fence=fence,
            durable=False,
            metadata=meta,
        )

    def _fail(
        self,
        job: Job,
        fence: Fence,
        agent_id: str,
        status: JobStatus,
        exc: ChazError,
        *,
        code: str | None = None,
    ) -> Entry:
        error = exc.to_dict()
        if code:
            error["code"] = code
        entry = self.services.append(
            job.session_id,
            EntryType.ERROR,
            agent_sender(agent_id),
            f"{error['code']}: {exc.message}",
            job_id=job.id,
            idempotency_key=f"job:{job.id}:error",
            admit=False,
            fence=fence,
            metadata={"code": error["code"], "retryable": error["retryable"]},
            finish=Finish(job.id, status, error=error),
        ).entry
        self._clear_cancel(job.id)
        return entry

    def _clear_cancel(self, job_id: str) -> None:
        self.services.redis.delete(keys.cancel(job_id))


def _close_quietly(sink: EventSink) -> None:
    try:
        sink.close()
    except Exception:
        log.debug("event sink closed with an error", exc_info=True)
