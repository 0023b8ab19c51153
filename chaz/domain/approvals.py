"""Tool policies and approval requests (docs/approvals.md).

A tool policy says whether a call of a tool waits for a person's decision,
how long it may wait, and which of its arguments the person is shown. A call
that needs approval suspends its turn durably: the request is a row (the
first decision wins by a compare-and-set on its state) and two entries, the
``ApprovalRequest`` and one ``ApprovalDecision`` per decision, which admit
nothing.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from chaz.domain.validation import CheckedModel, ToolName
from chaz.errors import ValidationError

#: How long a request waits for a decision unless its policy says otherwise.
DEFAULT_TIMEOUT_SECONDS = 300
MAX_TIMEOUT_SECONDS = 86_400


class ToolPolicy(CheckedModel):
    """How calls of one tool are approved (an :class:`~chaz.domain.agents.AgentSpec`'s
    ``tool_policies``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    approval: Literal["never", "always", "unless_auto_approved"] = Field(
        "never",
        description="'always': every call waits for a person's decision; "
        "'unless_auto_approved': it waits unless the session's permission_mode is 'bypass'.",
    )
    timeout: int = Field(
        DEFAULT_TIMEOUT_SECONDS,
        ge=1,
        le=MAX_TIMEOUT_SECONDS,
        description="Seconds a request waits before it closes as denied.",
    )
    show: list[str] | None = Field(
        None, description="Argument names shown in the request (None: all of them)."
    )

    def shown(self, arguments: str) -> dict[str, Any]:
        """The arguments a person is shown: the named ones (all when ``show`` is None).

        Arguments that are not a JSON object are shown as ``{"_raw": text}``
        (the call will fail its validation anyway once approved).
        """
        try:
            raw = json.loads(arguments or "{}")
        except (json.JSONDecodeError, RecursionError):
            raw = None
        if not isinstance(raw, dict):
            return {"_raw": arguments}
        if self.show is None:
            return raw
        return {k: v for k, v in raw.items() if k in self.show}


class ApprovalState(StrEnum):
    """Where a request is: ``pending`` until its first decision, its timeout or
    its job's cancel closes it."""

    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


class Decision(StrEnum):
    """What a person may decide."""

    APPROVE = "approve"
    DENY = "deny"
    #: Approve this call and every later policy-gated call of the same job
    #: without asking (never a call the unattended policy holds).
    APPROVE_ALL = "approve_all"


#: The state each decision closes a request in.
DECIDED = {
    Decision.APPROVE: ApprovalState.APPROVED,
    Decision.DENY: ApprovalState.DENIED,
    Decision.APPROVE_ALL: ApprovalState.APPROVED,
}

#: The tools an unattended turn may never call without a person's decision
#: (docs/contracts.md#unattended): neither ``permission_mode="bypass"`` nor
#: ``approve_all`` lifts it. ``session_send`` and ``session_create`` are
#: session tools (docs/contracts.md#session-tools).
UNATTENDED_HELD = frozenset(
    {"send_message", "agent", "spawn_agent", "session_send", "session_create"}
)


#: A session's ``permission_mode``: ``bypass`` lets ``unless_auto_approved``
#: tools run unasked (never a call the unattended policy holds).
PERMISSION_MODES = ("default", "bypass")


def check_permission_mode(value: object) -> str:
    """A permission mode, or ``request.invalid`` naming ``permission_mode``."""
    if value not in PERMISSION_MODES:
        raise ValidationError(
            "permission_mode must be 'default' or 'bypass'", field="permission_mode"
        )
    return str(value)


#: Tools every call of which needs a live decision of its own
#: (docs/contracts.md#session-tools: they start another session's turn),
#: whatever the agent's policy, ``bypass`` or an ``approve_all`` say.
ALWAYS_ASKED = frozenset({"session_send", "session_create"})


def held(tool: str, unattended: bool) -> bool:
    """Whether a call of ``tool`` needs its own decision whatever the policy,
    ``permission_mode`` and ``approve_all`` say: the per-call session tools
    (docs/contracts.md#session-tools), and under the unattended policy its
    held tools."""
    return tool in ALWAYS_ASKED or (unattended and tool in UNATTENDED_HELD)


def effective_policy(
    policies: dict[str, ToolPolicy], tool: str, *, unattended: bool
) -> ToolPolicy | None:
    """The policy a call of ``tool`` runs under: the agent's, made ``always`` by the
    unattended policy or :data:`ALWAYS_ASKED` (its timeout and shown arguments
    kept, else the defaults)."""
    policy = policies.get(tool)
    if not held(tool, unattended):
        return policy
    if policy is None:
        return ToolPolicy(approval="always")
    return policy.model_copy(update={"approval": "always"})


def gated(policy: ToolPolicy | None, tool: str, *, unattended: bool, permission_mode: str) -> bool:
    """Whether a call needs a decision before it runs (ignoring ``approve_all``,
    which the caller checks for calls :func:`held` does not hold)."""
    if policy is None or policy.approval == "never":
        return False
    if held(tool, unattended):
        return True
    return not (policy.approval == "unless_auto_approved" and permission_mode == "bypass")


#: The code and message the model reads for a call that was not approved.
REFUSALS: dict[ApprovalState, tuple[str, str]] = {
    ApprovalState.DENIED: ("approval.denied", "denied by a person"),
    ApprovalState.EXPIRED: ("approval.expired", "no decision came in time; treated as denied"),
    ApprovalState.CANCELLED: ("approval.denied", "the request was cancelled"),
}


def request_id(job_id: str, call_id: str) -> str:
    """The request of one tool call of one job: the same on every attempt, so a
    resumed turn finds (and never duplicates) its request."""
    digest = hashlib.sha256(f"{job_id}\n{call_id}".encode()).hexdigest()
    return f"apr_{digest[:28]}"


class Approval(BaseModel):
    """One approval request and its outcome."""

    model_config = ConfigDict(frozen=True)

    request_id: str
    job_id: str
    session_id: str
    tool: ToolName
    call_id: str
    arguments: dict[str, Any]
    state: ApprovalState
    decided_by: str | None = None
    created_at: datetime
    expires_at: datetime
    decided_at: datetime | None = None
    #: Its job's project; the winning decision once decided.
    project: str = "default"
    decision: str | None = None


@dataclass(frozen=True)
class Decided:
    """A decision's outcome: the request as it now is, and whether this
    decision is the one that took effect."""

    approval: Approval
    effective: bool

    def to_dict(self) -> dict[str, object]:
        """A JSON-safe form (the CLI prints it)."""
        return {
            "request_id": self.approval.request_id,
            "state": self.approval.state.value,
            "effective": self.effective,
            "job_id": self.approval.job_id,
            "decided_by": self.approval.decided_by,
        }
