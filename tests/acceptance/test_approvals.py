"""Durable approvals (issue 11 item 5, docs/contracts.md#invariant-10: waiting holds nothing).

A tool call whose policy needs approval suspends its turn: the job waits in
``waiting_approval`` holding no worker thread, survives the SIGKILL of every
worker, and resumes on a new one after the decision, the tool called once.
"""

from __future__ import annotations

import json
import signal
import threading

import pytest

import chaz
from chaz.domain.approvals import Approval, ApprovalState
from chaz.domain.entries import EntryType
from chaz.domain.principals import Grant, Principal
from chaz.errors import ApprovalNotFound, Forbidden
from chaz.usecases import approvals
from tests.acceptance.test_cli import chaz_cli, ok
from tests.support.principals import post_as, session_in
from tests.support.stack import Stack

pytest_plugins = ["tests.support.producers"]

ECHO_AFTER = [
    {"match": "^quick", "steps": [{"echo": True}]},
    {
        "steps": [
            {"call": "echo", "args": {"text": "{input}"}},
            {"say": "after {last_result}"},
        ]
    },
]


def careful(agent_id: str, timeout: int = 300) -> chaz.AgentSpec:
    return chaz.AgentSpec(
        id=agent_id,
        tools=["echo"],
        script=ECHO_AFTER,
        tool_policies={"echo": {"approval": "always", "timeout": timeout, "show": ["text"]}},
    )


def _waiting(stack: Stack, client: chaz.Client, job_id: str) -> Approval:
    """The job's approval request, once its turn has suspended on it."""

    def found() -> Approval | None:
        if client.jobs.get(job_id).status is not chaz.JobStatus.WAITING_APPROVAL:
            return None
        return next((a for a in client.approvals.pending() if a.job_id == job_id), None)

    request = stack.wait_for(found, 30, f"job {job_id} waiting for approval")
    assert request is not None
    return request


def _for_call(entries: list[chaz.Entry], etype: EntryType, call_id: str) -> list[chaz.Entry]:
    return [e for e in entries if e.type is etype and e.metadata.get("call_id") == call_id]


def test_a_waiting_turn_holds_no_worker_survives_them_all_and_resumes_once(
    stack: Stack,
) -> None:
    client = stack.client
    client.agents.put(careful("careful"))
    [worker] = stack.workers(1, concurrency=1, queues="chaz.turns")
    s = client.sessions.create(agent_id="careful")
    posted = client.sessions.post(s.id, "launch", sender="user:alice")
    job_id = posted.job_id or ""
    request = _waiting(stack, client, job_id)
    assert request.tool == "echo" and request.arguments == {"text": "launch"}
    [asked] = [e for e in client.sessions.entries(s.id) if e.type is EntryType.APPROVAL_REQUEST]
    assert asked.metadata["request_id"] == request.request_id
    # Nothing ran the tool yet.
    assert not _for_call(client.sessions.entries(s.id), EntryType.TOOL_CALL, request.call_id)

    # The worker's only thread is free: another session's turn runs meanwhile.
    other = client.sessions.create(agent_id="careful")
    quick = client.sessions.post(other.id, "quick one", sender="user:bob")
    assert client.sessions.wait_for_reply(other.id, after=quick.seq, timeout=30).content == (
        "quick one"
    )
    # A later message of the waiting session queues behind its head job.
    later = client.sessions.post(s.id, "quick later", sender="user:alice")

    worker.kill(signal.SIGKILL)
    assert worker.proc is not None
    worker.proc.wait(timeout=30)
    assert client.jobs.get(job_id).status is chaz.JobStatus.WAITING_APPROVAL
    stack.workers(1, concurrency=1, queues="chaz.turns")

    # 100 people decide at once: exactly one decision takes effect.
    outcomes: list[bool] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(100)

    def decide(i: int) -> None:
        try:
            start.wait(timeout=30)
            done = client.approvals.decide(request.request_id, "approve", by=f"user:p{i}")
            with lock:
                outcomes.append(done.effective)
        except BaseException as exc:
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors[:3]
    assert sorted(outcomes) == [False] * 99 + [True]

    reply = client.sessions.wait_for_reply(s.id, after=posted.seq, timeout=60)
    assert reply.type is EntryType.MESSAGE and reply.content == "after launch", reply.content
    job = client.jobs.get(job_id)
    # The resume after the decision is no attempt: the worker it lost held nothing.
    assert job.status is chaz.JobStatus.SUCCEEDED and (job.attempts, job.starts) == (1, 2)
    entries = client.sessions.entries(s.id)
    # The tool was called exactly once, after the decision.
    assert len(_for_call(entries, EntryType.TOOL_CALL, request.call_id)) == 1
    [result] = _for_call(entries, EntryType.TOOL_RESULT, request.call_id)
    assert result.content == "launch" and not result.metadata["is_error"]
    decisions = [e for e in entries if e.type is EntryType.APPROVAL_DECISION]
    assert len(decisions) == 100
    assert [d.metadata["effective"] for d in decisions].count(True) == 1
    assert client.approvals.get(request.request_id).state is ApprovalState.APPROVED
    # One resume, and the later job ran only after the resumed turn ended.
    acks = [e.content for e in entries if e.job_id == job_id and e.type is EntryType.ACK]
    assert acks == ["processing", "resumed: attempt 1"]
    nxt = client.sessions.wait_for_reply(s.id, after=later.seq, timeout=30)
    assert nxt.content == "quick later" and nxt.seq > reply.seq


def test_denied_expired_and_cancelled_requests(
    stack: Stack, producer: chaz.Client, producer_env: dict[str, str]
) -> None:
    client = producer
    stack.client.agents.put(careful("careful"))
    stack.client.agents.put(careful("hasty", timeout=1))
    stack.workers(1, concurrency=2, queues="chaz.turns")

    # Denied: the model reads a tool error it can explain; the tool never runs.
    s = client.sessions.create(agent_id="careful")
    posted = client.sessions.post(s.id, "drop tables", sender="user:alice")
    request = _waiting(stack, client, posted.job_id or "")
    env = producer_env
    listed = json.loads(ok(chaz_cli("approvals", "ls", "--json", env=env)))
    assert [(r["request_id"], r["arguments"]) for r in listed] == [
        (request.request_id, {"text": "drop tables"})
    ]
    decided = json.loads(
        ok(chaz_cli("approvals", "decide", request.request_id, "deny", "--json", env=env))
    )
    assert decided["effective"] and decided["state"] == "denied"
    reply = client.sessions.wait_for_reply(s.id, after=posted.seq, timeout=30)
    assert reply.type is EntryType.MESSAGE and "approval.denied" in reply.content
    assert "denied by a person" in reply.content
    [result] = _for_call(client.sessions.entries(s.id), EntryType.TOOL_RESULT, request.call_id)
    assert result.metadata["is_error"]
    again = client.approvals.decide(request.request_id, "approve")
    assert not again.effective and again.approval.state is ApprovalState.DENIED

    # Timed out: the reconciler closes it as denied; a late decision changes nothing.
    h = client.sessions.create(agent_id="hasty")
    slow = client.sessions.post(h.id, "too late", sender="user:alice")
    late = _waiting(stack, client, slow.job_id or "")
    stack.housekeeper()
    reply = client.sessions.wait_for_reply(h.id, after=slow.seq, timeout=60)
    assert "approval.expired" in reply.content, reply.content
    after = client.approvals.decide(late.request_id, "approve")
    assert not after.effective and after.approval.state is ApprovalState.EXPIRED
    # Resumed once, not again; a resume after the expiry is no attempt.
    timed_out = client.jobs.get(slow.job_id or "")
    assert (timed_out.attempts, timed_out.starts) == (1, 2)
    entries = client.sessions.entries(h.id)
    assert not [
        e
        for e in _for_call(entries, EntryType.TOOL_RESULT, late.call_id)
        if not e.metadata["is_error"]
    ]

    # Cancelled while waiting: it ends at once, with no worker involved.
    c = client.sessions.create(agent_id="careful")
    held = client.sessions.post(c.id, "hold me", sender="user:alice")
    pending = _waiting(stack, client, held.job_id or "")
    outcome = client.jobs.cancel(held.job_id or "")
    assert outcome["previous"] == "waiting_approval" and outcome["status"] == "cancelled"
    assert client.jobs.get(held.job_id or "").status is chaz.JobStatus.CANCELLED
    gone = client.approvals.decide(pending.request_id, "approve")
    assert not gone.effective and gone.approval.state is ApprovalState.CANCELLED
    assert all(a.request_id != pending.request_id for a in client.approvals.pending())


# -- unless_auto_approved, approve_all, who may decide (issue 11 item 5) ---------

THRICE = [
    {
        "steps": [
            {"call": "echo", "args": {"text": "one"}},
            {"call": "echo", "args": {"text": "two"}},
            {"call": "echo", "args": {"text": "three"}},
            {"say": "done {last_result}"},
        ]
    }
]


def test_unless_auto_approved_runs_unasked_under_bypass_and_waits_otherwise(
    stack: Stack, producer: chaz.Client
) -> None:
    client = producer
    stack.client.agents.put(
        chaz.AgentSpec(
            id="auto",
            tools=["echo"],
            script=ECHO_AFTER,
            tool_policies={"echo": {"approval": "unless_auto_approved"}},
        )
    )
    stack.workers(1, concurrency=2, queues="chaz.turns")

    bypass = client.sessions.create(agent_id="auto", permission_mode="bypass")
    posted = client.sessions.post(bypass.id, "go", sender="user:alice")
    reply = client.sessions.wait_for_reply(bypass.id, after=posted.seq, timeout=30)
    assert reply.content == "after go", reply.content
    assert not [
        e for e in client.sessions.entries(bypass.id) if e.type is EntryType.APPROVAL_REQUEST
    ]

    asked = client.sessions.create(agent_id="auto")
    held = client.sessions.post(asked.id, "wait", sender="user:alice")
    request = _waiting(stack, client, held.job_id or "")
    assert request.tool == "echo"
    client.approvals.decide(request.request_id, "approve")
    reply = client.sessions.wait_for_reply(asked.id, after=held.seq, timeout=30)
    assert reply.content == "after wait", reply.content


def test_approve_all_lets_the_rest_of_the_turn_run_decided_once(
    stack: Stack, producer: chaz.Client, producer_env: dict[str, str]
) -> None:
    client = producer
    stack.client.agents.put(
        chaz.AgentSpec(
            id="thrice",
            tools=["echo"],
            script=THRICE,
            tool_policies={"echo": {"approval": "always"}},
        )
    )
    stack.workers(1, concurrency=2, queues="chaz.turns")
    s = client.sessions.create(agent_id="thrice")
    posted = client.sessions.post(s.id, "go", sender="user:alice")
    request = _waiting(stack, client, posted.job_id or "")
    assert request.arguments == {"text": "one"}
    env = producer_env
    decided = json.loads(
        ok(chaz_cli("approvals", "decide", request.request_id, "approve_all", "--json", env=env))
    )
    assert decided["effective"] and decided["state"] == "approved"
    reply = client.sessions.wait_for_reply(s.id, after=posted.seq, timeout=30)
    assert reply.content == "done three", reply.content
    entries = client.sessions.entries(s.id)
    assert len([e for e in entries if e.type is EntryType.APPROVAL_REQUEST]) == 1
    assert [e.content for e in entries if e.type is EntryType.TOOL_RESULT] == [
        "one",
        "two",
        "three",
    ]
    assert client.approvals.get(request.request_id).decision == "approve_all"
    # The next turn asks again: approve_all is for one turn.
    again = client.sessions.post(s.id, "again", sender="user:alice")
    nxt = _waiting(stack, client, again.job_id or "")
    assert nxt.request_id != request.request_id
    client.jobs.cancel(again.job_id or "")


def test_deciding_needs_the_grant_and_another_projects_request_is_not_found(
    stack: Stack,
) -> None:
    client = stack.client
    client.agents.put(careful("careful"))
    stack.workers(1, concurrency=2, queues="chaz.turns")
    theirs = session_in(client, "careful", "other")
    posted = post_as(client, theirs.id, "their call", sender="user:other")
    svc = client.services
    alice = Principal("user:alice", "default")
    bob = Principal("user:bob", "other")
    request = stack.wait_for(
        lambda: next(iter(approvals.pending(svc, principal=bob)), None), 30, "their request"
    )
    assert request is not None
    assert request.project == "other" and request.job_id == posted.entry.job_id

    # Another project's request: exactly what a missing one gets.
    with pytest.raises(ApprovalNotFound) as denied:
        approvals.decide(svc, request.request_id, "approve", principal=alice)
    missing_id = "apr_" + "0" * 28
    with pytest.raises(ApprovalNotFound) as missing:
        approvals.decide(svc, missing_id, "approve", principal=alice)
    assert denied.value.code == missing.value.code == "approval.not_found"
    assert denied.value.message.replace(request.request_id, "ID") == missing.value.message.replace(
        missing_id, "ID"
    )
    assert set(denied.value.details) == set(missing.value.details)
    with pytest.raises(ApprovalNotFound):
        approvals.get(svc, request.request_id, principal=alice)
    assert approvals.pending(svc, principal=alice) == []
    assert [a.request_id for a in approvals.pending(svc, principal=bob)] == [request.request_id]
    # Without approval.decide: refused before anything is looked up.
    reader = Principal("user:carol", "other", frozenset({Grant.HISTORY_READ}))
    with pytest.raises(Forbidden):
        approvals.decide(svc, request.request_id, "approve", principal=reader)
    with pytest.raises(Forbidden):
        approvals.decide(svc, missing_id, "approve", principal=reader)
    assert approvals.get(svc, request.request_id, principal=bob).state is ApprovalState.PENDING
    # An API-key principal may not decide in someone else's name.
    keyed = Principal("user:dave", "other", operator=False)
    with pytest.raises(Forbidden):
        approvals.decide(svc, request.request_id, "approve", by="user:eve", principal=keyed)

    # The permitted equivalent: recorded under the principal's name.
    done = approvals.decide(svc, request.request_id, "approve", principal=bob)
    assert done.effective and done.approval.decided_by == "user:bob"
    assert done.approval.decision == "approve"
    with chaz.Client(stack.settings, migrate=False, project="other") as owner:
        reply = owner.sessions.wait_for_reply(theirs.id, after=posted.entry.seq, timeout=30)
    assert reply.content == "after their call", reply.content


FOUR_THEN_HOLD = [
    {
        "steps": [
            *({"call": "echo", "args": {"text": f"n{i}"}} for i in range(4)),
            {"wait": "go-{session_id}", "timeout": 300},
            {"say": "done {last_result}"},
        ]
    }
]


def test_resumes_after_decisions_are_no_attempts_and_a_kill_still_is_one(
    stack: Stack, producer: chaz.Client
) -> None:
    # Four decisions are four resumes, more than the attempt limit (3): none
    # of them is an attempt. The worker killed mid-turn afterwards spends one.
    client = producer
    stack.client.agents.put(
        chaz.AgentSpec(
            id="fourfold",
            tools=["echo"],
            script=FOUR_THEN_HOLD,
            tool_policies={"echo": {"approval": "always"}},
        )
    )
    [first] = stack.workers(1, concurrency=1, queues="chaz.turns")
    s = client.sessions.create(agent_id="fourfold")
    posted = client.sessions.post(s.id, "go", sender="user:alice")
    job_id = posted.job_id or ""
    for i in range(4):
        request = _waiting(stack, client, job_id)
        assert request.arguments == {"text": f"n{i}"}
        assert client.approvals.decide(request.request_id, "approve", by="user:alice").effective

    def results() -> list[str]:
        return [e.content for e in client.sessions.entries(s.id) if e.type is EntryType.TOOL_RESULT]

    held = stack.wait_for(lambda: len(results()) == 4, 30, "the turn at its gate, four echoes done")
    assert held and results() == ["n0", "n1", "n2", "n3"]
    job = client.jobs.get(job_id)
    assert (job.status, job.attempts, job.starts) == (chaz.JobStatus.RUNNING, 1, 5)

    first.kill(signal.SIGKILL)
    assert first.proc is not None
    first.proc.wait(timeout=30)
    stack.workers(1, concurrency=1, queues="chaz.turns")
    stack.open_gate(f"go-{s.id}")
    reply = client.sessions.wait_for_reply(s.id, after=posted.seq, timeout=60)
    assert reply.content == "done n3", reply.content
    job = client.jobs.get(job_id)
    # Not interrupted past the limit: two attempts, the first start and the crash's.
    assert (job.status, job.attempts, job.starts) == (chaz.JobStatus.SUCCEEDED, 2, 6)
    acks = [e.content for e in client.sessions.entries(s.id) if e.type is EntryType.ACK]
    assert acks == ["processing", *["resumed: attempt 1"] * 4, "resumed: attempt 2"]
