"""Rules of a turn's authority: agent grants, tool policies under bypass,
approve_all and the unattended policy (docs/security.md, docs/approvals.md)."""

from __future__ import annotations

from typing import Any, cast

import pytest

import chaz
from chaz.domain.approvals import (
    DECIDED,
    DEFAULT_TIMEOUT_SECONDS,
    ApprovalState,
    Decision,
    ToolPolicy,
    check_permission_mode,
    effective_policy,
    gated,
)
from chaz.domain.principals import Grant, Principal
from chaz.errors import Forbidden, ValidationError
from chaz.runtime.registry import ToolContext
from chaz.services import Services
from chaz.usecases import approvals

SCRIPT = [{"steps": [{"say": "ok"}]}]


def test_agent_grants_default_to_every_grant_and_refuse_unknown_names() -> None:
    assert chaz.AgentSpec(id="a", script=SCRIPT).grant_set() is None
    spec = chaz.AgentSpec(id="a", script=SCRIPT, grants=["history.read"])
    assert spec.grant_set() == frozenset({Grant.HISTORY_READ})
    with pytest.raises(ValidationError) as refused:
        chaz.AgentSpec(id="a", script=SCRIPT, grants=["root"])
    assert refused.value.details["field"] == "grants.0"


def test_a_tool_context_refuses_a_missing_grant_with_auth_forbidden() -> None:
    ctx = ToolContext(
        session_id="s",
        job_id="j",
        agent_id="a",
        tree_id="t",
        call_depth=0,
        allowed_tools=frozenset(),
        principal=Principal("agent:a", "acme", frozenset({Grant.HISTORY_READ}), operator=False),
    )
    ctx.require(Grant.HISTORY_READ, "read")
    with pytest.raises(Forbidden) as refused:
        ctx.require(Grant.AGENT_SPAWN, "start a sub-agent")
    assert refused.value.code == "auth.forbidden"
    assert refused.value.details == {"grant": "agent.spawn", "project": "acme"}


@pytest.mark.parametrize(
    ("approval", "mode", "unattended", "tool", "expected"),
    [
        ("never", "default", False, "echo", False),
        ("always", "bypass", False, "echo", True),
        ("unless_auto_approved", "default", False, "echo", True),
        ("unless_auto_approved", "bypass", False, "echo", False),
        (None, "bypass", True, "send_message", True),  # no policy, still held
        ("never", "bypass", True, "spawn_agent", True),
        ("unless_auto_approved", "bypass", True, "agent", True),
        ("never", "default", True, "echo", False),  # echo is not held
        (None, "default", True, "session_create", True),
        # The per-call session tools (docs/contracts.md#session-tools): asked for attended or not,
        # whatever the policy.
        (None, "default", False, "session_send", True),
        ("never", "bypass", False, "session_create", True),
        ("unless_auto_approved", "bypass", False, "session_send", True),
    ],
)
def test_which_calls_are_gated(
    approval: str | None, mode: str, unattended: bool, tool: str, expected: bool
) -> None:
    policies = {} if approval is None else {tool: ToolPolicy(approval=cast(Any, approval))}
    policy = effective_policy(policies, tool, unattended=unattended)
    assert gated(policy, tool, unattended=unattended, permission_mode=mode) is expected


def test_the_unattended_hold_keeps_the_agents_timeout_and_shown_arguments() -> None:
    mine = ToolPolicy(approval="never", timeout=42, show=["to"])
    held = effective_policy({"send_message": mine}, "send_message", unattended=True)
    assert held is not None and (held.approval, held.timeout, held.show) == ("always", 42, ["to"])
    default = effective_policy({}, "agent", unattended=True)
    assert default is not None and default.timeout == DEFAULT_TIMEOUT_SECONDS


def test_approve_all_approves_and_permission_modes_are_checked() -> None:
    assert DECIDED[Decision.APPROVE_ALL] is ApprovalState.APPROVED
    assert check_permission_mode("bypass") == "bypass"
    with pytest.raises(ValidationError) as refused:
        check_permission_mode("yolo")
    assert refused.value.details["field"] == "permission_mode"
    with pytest.raises(ValidationError):
        ToolPolicy(approval=cast(Any, "sometimes"))


def test_deciding_checks_the_grant_first_then_the_decision() -> None:
    nobody = cast(Services, None)  # nothing is looked up before these refusals
    reader = Principal("user:r", "acme", frozenset({Grant.HISTORY_READ}))
    with pytest.raises(Forbidden):
        approvals.decide(nobody, "apr_x", "maybe", principal=reader)
    with pytest.raises(ValidationError) as refused:
        approvals.decide(nobody, "apr_x", "maybe")
    assert refused.value.details["field"] == "decision"
    assert "approve_all" in refused.value.message
