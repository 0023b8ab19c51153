"""A turn's approval gate (docs/approvals.md): which tool calls run, and which
wait for a person's decision.

The runtime's loop asks :meth:`ApprovalGate.approve` before each call
(:class:`chaz.runtime.loop.LoopPorts`); a call that must wait raises
:class:`chaz.runtime.loop.Suspend`, and the turn parks on it through
:meth:`ApprovalGate.suspend`, holding nothing until a decision wakes it.
"""

from __future__ import annotations

import json
from datetime import timedelta

from chaz import tracing
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
from chaz.domain.entries import Entry, EntryType, NewEntry
from chaz.domain.jobs import Job
from chaz.domain.sessions import is_interactive
from chaz.ids import utcnow
from chaz.runtime.backends.base import ToolCallRequest
from chaz.runtime.loop import RUN, Suspend, Verdict
from chaz.services import Services
from chaz.store.types import Fence, TurnSetup


class ApprovalGate:
    """The approval policy of one job's turn, over the agent's tool policies."""

    def __init__(
        self, services: Services, job: Job, setup: TurnSetup, allowed: frozenset[str]
    ) -> None:
        self.services = services
        #: The job as its turn's start wrote it.
        self.job = job
        self.setup = setup
        #: The tools the turn may call: nobody is asked about one it lacks.
        self.allowed = allowed
        #: Set once an ``approve_all`` decision of this job is seen.
        self.all_approved = False

    def policy(self, tool: str) -> ToolPolicy | None:
        """The policy in force for ``tool`` in this job (None: not gated)."""
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
        if call.name not in self.allowed:
            return RUN  # the registry refuses it: nobody is asked about a tool it lacks
        if call.name in ALWAYS_ASKED and not self._interactive():
            return RUN  # the tool refuses it (session.tool_forbidden): nobody is asked
        if not gated(
            self.policy(call.name),
            call.name,
            unattended=job.unattended,
            permission_mode=self.setup.session.permission_mode,
        ):
            return RUN
        if not held(call.name, job.unattended) and self._approved_all():
            return RUN
        found = self.services.store.approvals.find(request_id(job.id, call.id))
        if found is None or found.state is ApprovalState.PENDING:
            raise Suspend(call)
        _traced_wait(found)
        if found.state is ApprovalState.APPROVED:
            return RUN
        code, message = REFUSALS[found.state]
        return Verdict(False, json.dumps({"error": {"code": code, "message": message}}))

    def suspend(self, fence: Fence, call: ToolCallRequest, sender: str) -> Entry | None:
        """Park the job on ``call``'s approval request: the request and its
        ApprovalRequest entry (from ``sender``) commit, the job waits; the
        entry if this wrote it. Raises ``IllegalTransition`` if the job was
        cancelled meanwhile."""
        job = self.job
        policy = self.policy(call.name)
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
            sender,
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
        _, entry = self.services.store.approvals.suspend(fence, approval, draft)
        return entry

    def _interactive(self) -> bool:
        """Whether a person's Message started this turn (the session tools' rule)."""
        job = self.job
        trigger = self.services.store.entry(job.trigger_entry_id) if job.trigger_entry_id else None
        return is_interactive(job, trigger)

    def _approved_all(self) -> bool:
        """Whether someone decided ``approve_all`` on a request of this job."""
        if not self.all_approved:
            self.all_approved = self.services.store.approvals.approved_all(self.job.id)
        return self.all_approved


def _traced_wait(found: Approval) -> None:
    """The wait for a person's decision as a ``chaz.approval`` span of the
    resumed turn, from the request to its decision (docs/operations.md#tracing)."""
    if not tracing.on():
        return
    end = found.decided_at or utcnow()
    tracing.record(
        "chaz.approval",
        int(found.created_at.timestamp() * 1e9),
        int(end.timestamp() * 1e9),
        {
            "chaz.tool.name": found.tool,
            "chaz.tool.call_id": found.call_id,
            "chaz.approval.state": found.state.value,
            "chaz.approval.decided_by": found.decided_by,
        },
    )
