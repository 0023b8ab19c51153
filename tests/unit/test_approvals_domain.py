"""Tool policies: validation (request.invalid naming the field) and shown arguments."""

from __future__ import annotations

import pytest

from chaz.domain.agents import AgentSpec
from chaz.domain.approvals import ToolPolicy, request_id
from chaz.errors import ValidationError

SCRIPT = [{"steps": [{"say": "hi"}]}]


def test_policy_defaults_and_shown_arguments() -> None:
    policy = ToolPolicy()
    assert (policy.approval, policy.timeout, policy.show) == ("never", 300, None)
    picky = ToolPolicy(approval="always", show=["path"])
    assert picky.shown('{"path": "/x", "secret": "k"}') == {"path": "/x"}
    assert ToolPolicy().shown('{"a": 1}') == {"a": 1}
    assert ToolPolicy().shown("not json") == {"_raw": "not json"}


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        ({"approval": "maybe"}, "tool_policies.echo.approval"),
        ({"timeout": 0}, "tool_policies.echo.timeout"),
        ({"timeout": 86_401}, "tool_policies.echo.timeout"),
        ({"colour": "red"}, "tool_policies.echo.colour"),
    ],
)
def test_a_bad_policy_is_refused_naming_its_field(policy: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        AgentSpec(id="a", script=SCRIPT, tool_policies={"echo": policy})
    assert info.value.field == field


def test_request_ids_are_stable_per_call() -> None:
    assert request_id("j1", "c1") == request_id("j1", "c1")
    assert request_id("j1", "c1") != request_id("j1", "c2")
    assert len(request_id("j" * 32, "c" * 500)) <= 64
