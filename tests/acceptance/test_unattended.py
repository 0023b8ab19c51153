"""The unattended policy (issue 11 item 6, docs/contracts.md#unattended).

In an unattended session (or a job started unattended), ``send_message``,
``agent``, ``spawn_agent``, ``session_send`` and ``session_create`` always
wait for a person's decision, even with no tool policy;
``permission_mode="bypass"`` does not lift it, and neither does an
``approve_all`` decision on another call of the turn.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

import chaz
from chaz.domain.approvals import DEFAULT_TIMEOUT_SECONDS, Approval, ApprovalState
from chaz.domain.entries import EntryType
from chaz.errors import ValidationError
from chaz.ids import utcnow
from chaz.usecases import schedules
from tests.acceptance.test_approvals import _for_call, _waiting
from tests.support.principals import post_as
from tests.support.stack import Stack

pytest_plugins = ["tests.support.producers"]

TARGET = "unattended-target"

COURIER = chaz.AgentSpec(
    id="courier",
    tools=["send_message", "spawn_agent", "echo"],
    # echo may be approved for the rest of the turn; send_message never is.
    tool_policies={"echo": {"approval": "always"}},
    script=[
        {
            "match": "^twice",
            "steps": [
                {"call": "echo", "args": {"text": "first"}},
                {"call": "send_message", "args": {"to": TARGET, "message": "one"}},
                {"call": "echo", "args": {"text": "second"}},
                {"say": "sent: {last_result}"},
            ],
        },
        {
            "match": "^spawn",
            "steps": [
                {"call": "spawn_agent", "args": {"agent_id": "sink", "task": "child work"}},
                {"say": "spawned: {last_result}"},
            ],
        },
        {
            "match": "^send",
            "steps": [
                {"call": "send_message", "args": {"to": TARGET, "message": "{input}"}},
                {"say": "sent: {last_result}"},
            ],
        },
        {"steps": [{"say": "noted"}]},
    ],
)
SINK = chaz.AgentSpec(id="sink", script=[{"steps": [{"say": "sink got {input}"}]}])


def _next_request(stack: Stack, client: chaz.Client, job_id: str, seen: set[str]) -> Approval:
    """The job's next pending request (one not in ``seen``)."""

    def found() -> Approval | None:
        if client.jobs.get(job_id).status is not chaz.JobStatus.WAITING_APPROVAL:
            return None
        return next(
            (
                a
                for a in client.approvals.pending()
                if a.job_id == job_id and a.request_id not in seen
            ),
            None,
        )

    got = stack.wait_for(found, 30, f"a new approval request of job {job_id}")
    assert got is not None
    seen.add(got.request_id)
    return got


def test_bypass_does_not_lift_the_unattended_hold_and_approval_lets_it_send(
    stack: Stack, producer: chaz.Client
) -> None:
    client = producer
    stack.client.agents.put_many([COURIER, SINK])
    stack.workers(1, concurrency=2)
    target = client.sessions.create("sink", name=TARGET)
    s = client.sessions.create("courier", unattended=True, permission_mode="bypass")
    assert s.unattended and s.permission_mode == "bypass"

    posted = client.sessions.post(s.id, "send hello", sender="user:alice")
    request = _waiting(stack, client, posted.job_id or "")
    # No policy for send_message: the unattended hold's default one.
    assert request.tool == "send_message"
    assert request.arguments == {"to": TARGET, "message": "send hello"}
    assert (request.expires_at - request.created_at).total_seconds() == DEFAULT_TIMEOUT_SECONDS
    assert client.jobs.get(posted.job_id or "").unattended
    # Held: nothing was delivered.
    assert client.deliveries.list(target.id) == []

    assert client.approvals.decide(request.request_id, "approve").effective
    reply = client.sessions.wait_for_reply(s.id, after=posted.seq, timeout=60)
    assert reply.content.startswith("sent: "), reply.content
    assert [d.kind.value for d in client.deliveries.list(target.id, direction="in")] == ["message"]


def test_a_denied_send_reaches_the_model_as_a_tool_error(stack: Stack) -> None:
    client = stack.client
    client.agents.put_many([COURIER, SINK])
    stack.workers(1, concurrency=2)
    target = client.sessions.create("sink", name=TARGET)
    s = client.sessions.create("courier")
    # An attended session; the turn itself was started unattended.
    posted = post_as(client, s.id, "send secrets", unattended=True)
    job_id = posted.entry.job_id or ""
    assert client.jobs.get(job_id).unattended
    request = _waiting(stack, client, job_id)
    assert client.approvals.decide(request.request_id, "deny").effective
    reply = client.sessions.wait_for_reply(s.id, after=posted.entry.seq, timeout=60)
    assert "approval.denied" in reply.content, reply.content
    [result] = _for_call(client.sessions.entries(s.id), EntryType.TOOL_RESULT, request.call_id)
    assert result.metadata["is_error"]
    assert json.loads(result.content)["error"]["code"] == "approval.denied"
    assert client.deliveries.list(target.id) == []


def test_approve_all_does_not_lift_the_unattended_hold(stack: Stack, producer: chaz.Client) -> None:
    client = producer
    stack.client.agents.put_many([COURIER, SINK])
    stack.workers(1, concurrency=2)
    target = client.sessions.create("sink", name=TARGET)
    s = client.sessions.create("courier", unattended=True)
    posted = client.sessions.post(s.id, "twice", sender="user:alice")
    job_id = posted.job_id or ""
    seen: set[str] = set()

    first = _next_request(stack, client, job_id, seen)
    assert first.tool == "echo"
    assert client.approvals.decide(first.request_id, "approve_all").effective
    assert client.approvals.get(first.request_id).decision == "approve_all"
    # approve_all covers echo, not the send: it is held on its own.
    held = _next_request(stack, client, job_id, seen)
    assert held.tool == "send_message"
    assert client.deliveries.list(target.id) == []
    assert client.approvals.decide(held.request_id, "approve").effective
    reply = client.sessions.wait_for_reply(s.id, after=posted.seq, timeout=60)
    # The second echo ran unasked under approve_all.
    assert reply.content == "sent: second", reply.content
    assert sorted(seen) == sorted({first.request_id, held.request_id})
    entries = client.sessions.entries(s.id)
    assert len([e for e in entries if e.type is EntryType.APPROVAL_REQUEST]) == 2


def test_an_unattended_spawn_is_held_and_its_child_stays_unattended(stack: Stack) -> None:
    client = stack.client
    client.agents.put_many([COURIER, SINK])
    stack.workers(1, concurrency=2)
    s = client.sessions.create("courier", unattended=True, permission_mode="bypass")
    before = {x.id for x in client.sessions.list()}
    posted = client.sessions.post(s.id, "spawn one", sender="user:alice")
    request = _waiting(stack, client, posted.job_id or "")
    assert request.tool == "spawn_agent"
    assert {x.id for x in client.sessions.list()} == before  # nothing made yet
    client.approvals.decide(request.request_id, "approve")
    reply = client.sessions.wait_for_reply(s.id, after=posted.seq, timeout=60)
    assert reply.content == "spawned: sink got child work", reply.content
    [child] = [x for x in client.sessions.list() if x.id not in before]
    assert child.unattended and child.project == s.project
    [child_job] = client.jobs.list(session_id=child.id)
    assert child_job.unattended and child_job.owner == "user:local"
    assert client.approvals.get(request.request_id).state is ApprovalState.APPROVED


def test_an_unattended_schedule_fires_held_turns_in_unattended_sessions(stack: Stack) -> None:
    client = stack.client
    client.agents.put_many([COURIER, SINK])
    stack.workers(1, concurrency=2)
    target = client.sessions.create("sink", name=TARGET)
    made = client.schedules.add(
        "courier",
        kind="once",
        run_at=(utcnow() + timedelta(hours=1)).isoformat(),
        prompt="send from a schedule",
        target="fresh",
        unattended=True,
    )
    assert made.unattended and made.project == "default" and made.grants is None
    assert made.next_slot is not None
    # The beat's task calls this for the slot (docs/schedules.md).
    fired = schedules.fire(client.services, made.id, made.next_slot)
    assert fired.job is not None and fired.job.unattended
    fresh = client.sessions.get(fired.job.session_id)
    assert fresh.unattended and fresh.project == made.project and fresh.owner == made.owner
    request = _waiting(stack, client, fired.job.id)
    assert request.tool == "send_message"
    assert client.deliveries.list(target.id) == []


def test_a_bad_permission_mode_is_refused_naming_it(stack: Stack, producer: chaz.Client) -> None:
    client = producer
    stack.client.agents.put(SINK)
    with pytest.raises(ValidationError) as refused:
        client.sessions.create("sink", permission_mode="yolo")
    assert refused.value.details["field"] == "permission_mode"


def test_a_held_tool_the_agent_lacks_is_refused_without_asking(
    stack: Stack, producer: chaz.Client
) -> None:
    client = producer
    lacking = chaz.AgentSpec(
        id="lacking",
        tools=["echo"],
        script=[
            {
                "steps": [
                    {"call": "send_message", "args": {"to": TARGET, "message": "hi"}},
                    {"say": "{last_result}"},
                ]
            }
        ],
    )
    stack.client.agents.put_many([lacking, SINK])
    stack.workers(1, concurrency=2)
    client.sessions.create("sink", name=TARGET)
    s = client.sessions.create("lacking", unattended=True)
    posted = client.sessions.post(s.id, "go", sender="user:alice")
    reply = client.sessions.wait_for_reply(s.id, after=posted.seq, timeout=60)
    assert json.loads(reply.content)["error"]["code"] == "tool.unknown", reply.content
    entries = client.sessions.entries(s.id)
    assert not [e for e in entries if e.type is EntryType.APPROVAL_REQUEST]
