"""One job's turn on this worker: what it thinks with, and every entry it writes.

The turn hands each entry it commits to its :class:`chaz.coord.feed.Feed`,
the one publisher of what a turn writes: ToolCall and ToolResult entries
and a resume's Ack are announced at once; its last entry (reply, Error or
ApprovalRequest) is held for the ``TURN_ENDED`` signal that follows it.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
from typing import Any

import redis

from chaz import metrics, tracing
from chaz.coord.feed import Feed
from chaz.coord.lanes import Lease
from chaz.coord.partials import PartialPublisher
from chaz.domain import budgets, rooms
from chaz.domain.agents import Limits
from chaz.domain.budgets import Allowance
from chaz.domain.entries import EntryType, NewEntry, agent_sender
from chaz.domain.jobs import Job, JobStatus
from chaz.domain.principals import Principal, parse_grants, turn_grants
from chaz.errors import Cancelled, ChazError, HandedBack, IllegalTransition, LeaseLost
from chaz.plumbing.faults import is_transient
from chaz.runtime.backends import make_backend
from chaz.runtime.backends.base import ToolCallRequest, TurnContext
from chaz.runtime.budget import Budget
from chaz.runtime.cancel import CancelToken
from chaz.runtime.context import build_context
from chaz.runtime.events import EventSink, RuntimeEvent, ToolCallEvent
from chaz.runtime.loop import Checkpoint, LoopPorts, Suspend, run_loop
from chaz.runtime.registry import Delegation, ToolContext, ToolRegistry
from chaz.runtime.spans import TracedBackend, TracedTools
from chaz.services import Services
from chaz.store.types import Fence, Finish, TurnSetup
from chaz.usecases import admission, completion, projects
from chaz.usecases.turns.approval import ApprovalGate

log = logging.getLogger(__name__)


class Turn:
    """One job's turn on this worker; its methods are the turn's steps.

    Holds what every step needs: the job as started, the fence its writes
    carry, the setup read before it started (session, agent, context), the
    feed that publishes its entries, the lease heartbeat, and whether a
    cancel was already requested.
    """

    def __init__(
        self,
        services: Services,
        registry: ToolRegistry,
        delegation: Delegation,
        job: Job,
        setup: TurnSetup,
        token: str,
        feed: Feed,
        cancel_requested: bool,
    ) -> None:
        self.services = services
        #: The tools this process's agents may call.
        self.registry = registry
        #: The use cases its collaboration tools call.
        self.delegation = delegation
        self.job = job
        self.fence = Fence(job.id, token)
        self.setup = setup
        #: The publisher of every entry this turn commits.
        self.feed = feed
        #: Set as soon as the job's cancel is seen (by the worker's watcher or
        #: a step boundary): what blocks inside the turn waits on it.
        self.cancel = CancelToken()
        if cancel_requested:
            self.cancel.set()
        #: Its per-turn budgets and usage (docs/runtime.md#per-turn-budgets),
        #: counted on from what earlier attempts recorded. The token polls its
        #: deadlines, so a crossed one stops the turn the way a cancel does.
        limits = setup.agent.limits.narrowed(setup.session.limits)
        self.budget = Budget(
            limits,
            job.usage,
            price=budgets.price_of(services.settings.model_prices, setup.agent.model),
            allowance=_allowance(services, setup, limits),
            # Its children spend from its budget (docs/runtime.md#budgets).
            children=lambda: services.store.children_charged(job.id),
        )
        self.cancel.limit(self.budget.overrun)
        #: Set while the turn runs (see ``TurnRunner._think``).
        self.heartbeat: Lease | None = None
        #: The agent the turn runs for: in a room, the member the job woke.
        self.agent_id = job.member_agent_id or setup.session.agent_id
        #: The sender of everything the turn writes.
        self.me = agent_sender(self.agent_id)
        self.gate = ApprovalGate(services, job, setup, self._allowed_tools())
        #: Set when the turn suspended for approval instead of ending.
        self.suspended = False
        #: Set when the turn was handed back instead of ending.
        self.handed_back = False
        #: When it started, for its duration (counted here: one Turn per start).
        self.began = metrics.turn_started(job.starts, job.created_at, job.started_at)

    def run(self) -> None:
        """The turn itself, to its last entry (reply or Error, committed with the
        job's end and held in the feed), a suspension or a hand-back."""
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
            return
        except Suspend as waiting:
            sink.close()  # its ToolCall/ToolResult entries so far come first
            self.suspend(waiting.call)
            return
        except Cancelled as exc:
            _close_quietly(sink)
            self.fail(JobStatus.CANCELLED, exc)
            return
        except Exception as exc:
            _close_quietly(sink)
            if is_transient(exc):
                raise  # retried from the checkpoint (see TurnRunner.wake)
            self.crashed(exc)
            return
        self.reply(text)

    def crashed(self, exc: Exception) -> None:
        """End the job ``failed`` on an error its turn did not expect to meet."""
        if isinstance(exc, ChazError):
            self.fail(JobStatus.FAILED, exc)
            return
        # The session's readers get a code and a reference; the exception (a
        # driver's carries its SQL and parameters) goes to the worker log only.
        ref = secrets.token_hex(6)
        log.exception("turn %s crashed (ref %s)", self.job.id, ref)
        self.fail(
            JobStatus.FAILED,
            ChazError(f"the turn stopped on an internal error (ref {ref})", ref=ref),
            code="turn.crashed",
        )

    def think(self, sink: EventSink) -> str:
        """Run the ReAct loop (from the checkpoint, on a resumed attempt): the answer."""
        svc, job = self.services, self.job
        session, spec = self.setup.session, self.setup.agent
        # A cumulative budget spent before the turn began ends it at once.
        self.budget.check_start()
        context = build_context(
            spec.system_prompt, self.setup.history, self.agent_id, notes=self._room_notes()
        )
        limits = spec.limits.narrowed(session.limits)
        resume = Checkpoint.from_json(svc.store.checkpoint(job.id)) if job.starts > 1 else None
        trigger = self.setup.trigger
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
            allowed_tools=self.gate.allowed,
            services=svc,
            limits=limits,
            message_count=job.message_count,
            delegation=self.delegation,
            flush=sink.flush,
            principal=self.principal(),
            unattended=job.unattended,
            owner=job.owner,
            cancel=self.cancel,
        )
        max_steps = min(
            limits.max_turn_steps or svc.settings.max_turn_steps, svc.settings.max_turn_steps
        )
        return run_loop(self._ports(sink), context, turn, tool_ctx, max_steps, resume)

    def _ports(self, sink: EventSink) -> LoopPorts:
        """The runtime loop's ports for this turn: its model, tools, writer,
        checkpoint, stop check, approval gate and cancel."""
        svc, job = self.services, self.job
        assert self.heartbeat is not None, "a turn thinks only while its lease is kept"
        backend = make_backend(
            self.setup.agent,
            svc.settings,
            self.cancel,
            PartialPublisher(svc.redis, job.session_id, job.id),
        )
        registry = self.registry
        if tracing.on():
            # A span per model and tool call; when off, the ports are the bare ones.
            backend = TracedBackend(backend, self.setup.agent.model)
            registry = TracedTools(registry)
        return LoopPorts(
            backend=backend,
            registry=registry,
            sink=sink,
            save=lambda cp: svc.store.save_checkpoint(
                self.fence, cp.to_json(), self.budget.usage()
            ),
            stop_check=_StopCheck(svc, job.id, self.heartbeat, self.cancel),
            approve=self.gate.approve,
            cancel=self.cancel,
            budget=self.budget,
        )

    def principal(self) -> Principal:
        """Who acts in this turn (docs/security.md#grants-inside-turns): the agent,
        in the job's project, holding its own grants and its starter's intersected."""
        job = self.job
        grants = turn_grants(self.setup.agent.grant_set(), parse_grants(job.grants))
        return Principal(f"agent:{self.agent_id}", job.project, grants, operator=False)

    # -- the turn's ends other than a reply --------------------------------------

    def suspend(self, call: ToolCallRequest) -> None:
        """Park the turn on ``call``'s approval request (docs/approvals.md): the
        request and its ApprovalRequest entry are written and the job waits,
        holding nothing. A cancel requested meanwhile ends the turn cancelled
        instead."""
        try:
            entry = self.gate.suspend(self.fence, call, self.me)
        except IllegalTransition:
            self.fail(JobStatus.CANCELLED, Cancelled("the job was cancelled"))
            return
        self.suspended = True
        self._ended("suspended")
        self.feed.hold(entry)

    def hand_back(self) -> None:
        """Give the turn back for another worker to resume (this one is shutting
        down; docs/operations.md#termination): no reply, no Error.

        The job's lease token is dropped in the same write as the checkpoint
        (which counts the hand-back), so the resume spends no attempt
        (docs/executions.md#attempts) and nothing this worker still holds can
        write for it. The caller releases the lane and
        wakes the session.
        """
        store = self.services.store
        cp = Checkpoint.from_json(store.checkpoint(self.job.id))
        cp.handbacks += 1
        store.hand_back(self.fence, cp.to_json(), self.budget.usage())
        self.handed_back = True
        self._ended("handed_back")
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

    # -- the entries it writes --------------------------------------------------

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
        admission.append(self.services, job.session_id, draft, self.fence, feed=self.feed)

    def announce_resume(self) -> None:
        """A status entry that tells the session's readers this turn was resumed."""
        job = self.job
        draft = NewEntry(
            EntryType.ACK,
            self.me,
            f"resumed: attempt {job.attempts}",
            metadata={
                "resumed": job.attempts,
                "start": job.starts,
                "host": socket.gethostname(),
                "pid": os.getpid(),
            },
            # One per start: a resume after an approval spends no attempt.
            idempotency_key=f"job:{job.id}:resume:{job.starts}",
            job_id=job.id,
        )
        admission.append(self.services, job.session_id, draft, self.fence, feed=self.feed)

    def reply(self, text: str) -> None:
        """End the job ``succeeded`` with its reply, held in the feed if this wrote it."""
        with tracing.span("chaz.reply", {"chaz.reply.chars": len(text)}):
            self._reply(text)

    def _reply(self, text: str) -> None:
        job = self.job
        draft: NewEntry | None = NewEntry(
            EntryType.MESSAGE, self.me, text, idempotency_key=f"job:{job.id}:reply"
        )
        if job.fire_id is not None and not text.strip():
            # A schedule fire's empty reply writes nothing (docs/schedules.md).
            draft = None
        finish = Finish(job.id, JobStatus.SUCCEEDED, result=text, usage=self.budget.usage())
        try:
            if self.setup.session.members is None or draft is None:
                done = self.services.store.end_turn(
                    self.fence, finish, job.session_id, draft, completion=completion.ended
                )
                self._ended(JobStatus.SUCCEEDED.value)
                self.feed.hold(done.entry if done is not None and done.created else None)
                return
            # A room: the reply may wake the member it mentions, in the same transaction.
            with admission.room_rules(self.services, job.session_id) as room:
                ended = self.services.store.end_turn(
                    self.fence, finish, job.session_id, draft, room, completion=completion.ended
                )
        except IllegalTransition:
            # The cancel committed after the turn's last look at its token and
            # before this end: it wins, and the reply is not written
            # (docs/contracts.md#cancel).
            self.fail(JobStatus.CANCELLED, Cancelled("the job was cancelled"))
            return
        assert ended is not None, "a reply with an entry returns it"
        self._ended(JobStatus.SUCCEEDED.value)
        self.feed.publish(*ended.notices)
        self.feed.hold(ended.entry if ended.created else None)

    def _ended(self, outcome: str) -> None:
        """Count the attempt's end and the usage it added to its job's (what
        earlier attempts recorded was counted by them), and debit the tokens
        it added from its project's token bucket."""
        metrics.turn_ended(outcome, self.began)
        now, before = self.budget.usage(), self.job.usage
        metrics.usage_recorded(self.job.project, now, before)
        added = now.tokens - (before.tokens if before is not None else 0)
        if added > 0:
            # The project's tokens-per-minute bucket (docs/security.md#project-quotas):
            # best effort, as the Redis side of a turn's end is; a lost debit
            # lets the project's next admissions through, it loses no work.
            try:
                self.services.quotas.debit_tokens(self.job.project, added)
            except redis.RedisError:
                log.warning("could not debit %d tokens of project %s", added, self.job.project)

    def fail(self, status: JobStatus, exc: ChazError, *, code: str | None = None) -> None:
        """End the job in ``status`` with an Error entry, held in the feed if this wrote it."""
        job = self.job
        error = exc.to_dict()
        if code:
            error["code"] = code
        done = self.services.store.end_turn(
            self.fence,
            Finish(job.id, status, error=error, usage=self.budget.usage()),
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
        self._ended(status.value)
        self.feed.hold(done.entry if done is not None and done.created else None)


def _allowance(services: Services, setup: TurnSetup, limits: Limits) -> Allowance | None:
    """The most the job may use in all (docs/runtime.md#budgets): its session's,
    tree's and caller's bounds as its setup read them, and its project's,
    read now and only when the project sets a cumulative budget."""
    found = setup.budget.allowance(limits) if setup.budget is not None else None
    project = projects.limits_for(services, setup.job.project)
    if project.max_tokens is None and project.max_cost is None:
        return found
    spent = services.store.project_charged(setup.job.project, but=setup.job.id)
    return budgets.project_bound(found, project.max_tokens, project.max_cost, spent)


class _StopCheck:
    """The runtime's check at each step boundary: lease lost, cancel requested,
    or a runtime or idle budget crossed (the token's :meth:`~CancelToken.poll`).

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
        if (
            not first
            and not self._cancel.is_set()
            and self._services.flags.requested(self._job_id, self._heartbeat.project)
        ):
            self._cancel.set()
        self._cancel.poll()
        self._cancel.raise_if_set()


def _close_quietly(sink: EventSink) -> None:
    try:
        sink.close()
    except Exception:
        log.debug("event sink closed with an error", exc_info=True)
