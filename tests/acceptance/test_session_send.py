"""``session_send``/``session_create`` (docs/contracts.md#requests) with real workers (issue 12
items 4, 5, 7).

A request owns one FIFO turn in its target, queued behind what runs there;
with ``reply="completion"`` its frozen result (final text and artifact
references, never tool calls) comes back into the caller's session exactly
once; a request whose worker is SIGKILLed is failed with
``delivery.interrupted`` and answered once, never replayed; an archived
target fails its pending requests with results sent back; a turn a delivery
started cannot use a session tool; a declined approval writes nothing.
"""

from __future__ import annotations

import json
import signal
from typing import Any

import chaz
from chaz.domain.deliveries import Delivery, DeliveryKind, DeliveryState
from chaz.domain.entries import Entry, EntryType
from tests.support.stack import Stack

SESSION_TOOLS = ["session_send", "session_create", "session_deliveries", "session_rename"]


def helper(steps: list[dict[str, Any]], tools: list[str] | None = None) -> chaz.AgentSpec:
    """The target agent: holds a turn at gate HOLD, and answers requests with ``steps``."""
    return chaz.AgentSpec(
        id="helper",
        tools=tools or ["echo"],
        script=[
            {"match": "^hold", "steps": [{"wait": "HOLD"}, {"say": "held"}]},
            {"match": "totals", "steps": steps},
        ],
    )


def boss(target_id: str, **extra: Any) -> chaz.AgentSpec:
    """The caller: delegates to ``target_id`` with reply=completion, audits, reads results."""
    return chaz.AgentSpec(
        id="boss",
        tools=SESSION_TOOLS,
        script=[
            {
                "match": "^delegate",
                "steps": [
                    {
                        "call": "session_send",
                        "args": {
                            "target_session_id": target_id,
                            "message": "compute the totals",
                            "reply": "completion",
                        },
                    },
                    {"say": "sent {last_result}"},
                ],
            },
            {
                "match": "^audit",
                "steps": [
                    {"call": "session_deliveries", "args": {"direction": "outgoing"}},
                    {"say": "{last_result}"},
                ],
            },
            {"match": "result of request", "steps": [{"say": "noted: {input}"}]},
        ],
        **extra,
    )


def _approve(stack: Stack, job_id: str | None, tool: str) -> None:
    """Approve the call of ``tool`` that the job waits on: a person is
    asked for every call of session_send and session_create
    (docs/contracts.md#session-tools)."""
    client = stack.client

    def pending() -> Any:
        waiting = client.approvals.pending()
        return next((a for a in waiting if a.job_id == job_id and a.tool == tool), None)

    request = stack.wait_for(pending, 30, f"the approval of {tool}")
    assert client.approvals.decide(request.request_id, "approve", by="user:alice").effective


def _delegate(stack: Stack, caller: str) -> dict[str, Any]:
    """A person asks the caller to delegate and approves the call; the tool's
    answer (the request)."""
    client = stack.client
    asked = client.sessions.post(caller, "delegate", sender="user:alice")
    _approve(stack, asked.job_id, "session_send")
    reply = client.sessions.wait_for_reply(caller, after=asked.seq, timeout=60)
    assert reply.type is EntryType.MESSAGE and reply.content.startswith("sent "), reply.content
    answer: dict[str, Any] = json.loads(reply.content.removeprefix("sent "))
    return answer


def _results(client: chaz.Client, caller: str) -> list[Delivery]:
    return [
        d for d in client.deliveries.list(caller, direction="in") if d.kind is DeliveryKind.RESULT
    ]


def _held(stack: Stack, target: str) -> str:
    """Start a turn in ``target`` that waits at gate HOLD; its job id once it runs."""
    client = stack.client
    posted = client.sessions.post(target, "hold on", sender="user:bob")
    job_id = posted.job_id or ""
    stack.wait_for(
        lambda: client.jobs.get(job_id).status is chaz.JobStatus.RUNNING, 30, "the held turn"
    )
    return job_id


def _result_turn(stack: Stack, caller: str, result: Delivery) -> Entry:
    """The caller's reply to the result it was woken by."""
    client = stack.client
    # Recorded with the target's end, admitted just after that commit.
    job_id = stack.wait_for(
        lambda: client.deliveries.get(result.id).job_id, 30, "the result's admission"
    )
    stack.wait_for(lambda: client.jobs.get(str(job_id)).status.terminal, 60, "the result's turn")
    [entry] = [e for e in client.sessions.entries(caller) if e.metadata.get("result")]
    return client.sessions.wait_for_reply(caller, after=entry.seq, timeout=30)


def test_a_completion_request_into_a_busy_target_runs_after_it_and_answers_once(
    stack: Stack,
) -> None:
    client = stack.client
    client.agents.put(
        helper([{"call": "echo", "args": {"text": "scratch work"}}, {"say": "the totals are 42"}])
    )
    client.agents.put(boss("-"))
    target = client.sessions.create("helper")
    caller = client.sessions.create("boss")
    client.agents.put(boss(target.id))
    stack.workers(1, concurrency=4, queues="chaz.turns")

    held = _held(stack, target.id)
    sent = _delegate(stack, caller.id)
    request_id = sent["requestId"]
    # Accepted, not running: its own turn waits behind the current one, not merged into it.
    assert sent["status"] == "accepted" and sent["targetSessionId"] == target.id
    assert [j.id for j in client.sessions.queue(target.id)] == [held, sent["executionId"]]
    assert client.deliveries.status(request_id) == "accepted"

    stack.open_gate("HOLD")
    stack.wait_for(lambda: client.deliveries.status(request_id) == "consumed", 60, "consumed")
    [result] = stack.wait_for(lambda: _results(client, caller.id), 30, "the result")
    noted = _result_turn(stack, caller.id, client.deliveries.get(result.id))
    assert noted.content.startswith(f"noted: [result of request {request_id} from ")
    assert noted.content.endswith("\nthe totals are 42")

    # The request's turn ran after the held one ended, as a turn of its own.
    entries = client.sessions.entries(target.id)
    held_end = max(e.seq for e in entries if e.job_id == held)
    request_start = min(
        e.seq for e in entries if e.job_id == sent["executionId"] and e.type is EntryType.ACK
    )
    assert held_end < request_start
    # Frozen: the final text and artifact references, nothing of how it got there.
    frozen = client.deliveries.get(result.id).metadata
    assert set(frozen) == {
        "request_id",
        "session_id",
        "execution_id",
        "status",
        "artifacts",
        "text",
    }
    assert frozen["text"] == "the totals are 42" and frozen["status"] == "succeeded"
    assert "scratch work" not in json.dumps(frozen) and "echo" not in json.dumps(frozen)
    assert client.deliveries.get(request_id).metadata["result"] == frozen
    # Exactly once: one result delivery, one result entry in the caller.
    assert len(_results(client, caller.id)) == 1
    assert len([e for e in client.sessions.entries(caller.id) if e.metadata.get("result")]) == 1
    assert client.deliveries.status(result.id) == "consumed"

    # The person audits through the caller's session_deliveries.
    asked = client.sessions.post(caller.id, "audit", sender="user:alice")
    audit = json.loads(
        client.sessions.wait_for_reply(caller.id, after=asked.seq, timeout=30).content
    )
    [row] = audit["deliveries"]
    assert (row["requestId"], row["status"], row["kind"]) == (request_id, "consumed", "request")
    assert row["result"]["text"] == "the totals are 42"


def test_a_request_whose_worker_is_killed_fails_interrupted_and_answers_once(
    stack: Stack,
) -> None:
    client = stack.client
    steps: list[dict[str, Any]] = [
        {"call": "echo", "args": {"text": "started"}},
        {"wait": "NEVER", "timeout": 300},
        {"say": "never"},
    ]
    client.agents.put(helper(steps))
    client.agents.put(boss("-"))
    target = client.sessions.create("helper")
    caller = client.sessions.create("boss")
    client.agents.put(boss(target.id))
    stack.housekeeper()
    workers = stack.workers(2, concurrency=2, queues="chaz.turns")

    sent = _delegate(stack, caller.id)
    job_id = sent["executionId"]

    def mid_flight() -> Entry | None:
        return next(
            (
                e
                for e in client.sessions.entries(target.id)
                if e.job_id == job_id and e.type is EntryType.TOOL_RESULT
            ),
            None,
        )

    stack.wait_for(mid_flight, 30, "the request's turn mid-flight")
    [ack] = [
        e
        for e in client.sessions.entries(target.id)
        if e.job_id == job_id and e.type is EntryType.ACK
    ]
    victim = next(w for w in workers if w.pid == ack.metadata["pid"])
    victim.kill(signal.SIGKILL)

    stack.wait_for(lambda: client.deliveries.status(sent["requestId"]) == "failed", 60, "failed")
    request = client.deliveries.get(sent["requestId"])
    assert request.state is DeliveryState.FAILED and request.code == "delivery.interrupted"
    job = client.jobs.get(job_id)
    assert job.status is chaz.JobStatus.INTERRUPTED and job.error is not None
    assert job.error["code"] == "delivery.interrupted"
    [result] = stack.wait_for(lambda: _results(client, caller.id), 30, "the result")
    frozen = result.metadata
    assert (frozen["status"], frozen["code"]) == ("failed", "delivery.interrupted")
    noted = _result_turn(stack, caller.id, client.deliveries.get(result.id))
    assert "failed (delivery.interrupted)" in noted.content
    # Never replayed: the one tool call stands, no resumed attempt ran the script again.
    mine = [e for e in client.sessions.entries(target.id) if e.job_id == job_id]
    assert [e.type for e in mine if e.type is EntryType.TOOL_CALL] == [EntryType.TOOL_CALL]
    assert [e.content for e in mine if e.type is EntryType.ACK] == ["processing"]
    assert mine[-1].type is EntryType.ERROR and mine[-1].metadata["code"] == "delivery.interrupted"
    assert len(_results(client, caller.id)) == 1


def test_an_archived_target_fails_its_pending_requests_with_results_back(stack: Stack) -> None:
    client = stack.client
    client.agents.put(helper([{"say": "too late"}]))
    client.agents.put(boss("-"))
    target = client.sessions.create("helper")
    caller = client.sessions.create("boss")
    client.agents.put(boss(target.id))
    stack.workers(1, concurrency=4, queues="chaz.turns")

    _held(stack, target.id)
    sent = _delegate(stack, caller.id)
    client.sessions.archive(target.id, reason="done with it")
    stack.open_gate("HOLD")
    stack.wait_for(lambda: client.deliveries.status(sent["requestId"]) == "failed", 60, "failed")
    assert client.deliveries.get(sent["requestId"]).code == "session.archived"
    [result] = stack.wait_for(lambda: _results(client, caller.id), 30, "the result")
    assert result.metadata["code"] == "session.archived"
    noted = _result_turn(stack, caller.id, client.deliveries.get(result.id))
    assert "failed (session.archived)" in noted.content
    # Its turn never started, and a new request is refused at once.
    assert not [
        e
        for e in client.sessions.entries(target.id)
        if e.job_id == sent["executionId"] and e.type is EntryType.ACK
    ]
    again = client.sessions.post(caller.id, "delegate", sender="user:alice")
    _approve(stack, again.job_id, "session_send")
    refused = client.sessions.wait_for_reply(caller.id, after=again.seq, timeout=30)
    assert "session.archived" in refused.content
    assert len(_results(client, caller.id)) == 1


def test_a_delivered_turn_gets_session_tool_forbidden_so_no_loop_can_start(stack: Stack) -> None:
    client = stack.client
    client.agents.put(helper([{"say": "placeholder"}]))
    client.agents.put(boss("-"))
    target = client.sessions.create("helper")
    caller = client.sessions.create("boss")
    bounce: list[dict[str, Any]] = [
        {
            "calls": [
                {
                    "call": "session_send",
                    "args": {
                        "target_session_id": caller.id,
                        "message": "pong",
                        "reply": "completion",
                    },
                },
                {"call": "session_create", "args": {"message": "spin off"}},
                {"call": "session_deliveries", "args": {}},
                {"call": "session_rename", "args": {"name": "hijacked"}},
            ]
        },
        {"say": "bounced"},
    ]
    client.agents.put(helper(bounce, tools=SESSION_TOOLS))
    client.agents.put(boss(target.id))
    stack.workers(1, concurrency=4, queues="chaz.turns")

    sent = _delegate(stack, caller.id)
    stack.wait_for(
        lambda: client.deliveries.status(sent["requestId"]) == "consumed", 60, "consumed"
    )
    results = [
        e
        for e in client.sessions.entries(target.id)
        if e.job_id == sent["executionId"] and e.type is EntryType.TOOL_RESULT
    ]
    assert [e.metadata["tool"] for e in results] == SESSION_TOOLS
    for e in results:
        assert (
            e.metadata["is_error"]
            and json.loads(e.content)["error"]["code"] == "session.tool_forbidden"
        )
    # Nothing left the target but the result of the request it served.
    out = client.deliveries.list(target.id, direction="out")
    assert [d.kind for d in out] == [DeliveryKind.RESULT]
    assert client.sessions.get(target.id).name != "hijacked"
    assert len(client.sessions.list(limit=100)) == 2
    [result] = _results(client, caller.id)
    _result_turn(stack, caller.id, client.deliveries.get(result.id))


def test_a_declined_approval_leaves_no_delivery_and_no_session(stack: Stack) -> None:
    client = stack.client
    client.agents.put(helper([{"say": "never asked"}]))
    target = client.sessions.create("helper")
    spec = chaz.AgentSpec(
        id="boss",
        tools=SESSION_TOOLS,
        # No tool_policies: every call of these two is asked for anyway
        # (docs/contracts.md#session-tools).
        script=[
            {
                "steps": [
                    {
                        "call": "session_send",
                        "args": {
                            "target_session_id": target.id,
                            "message": "x",
                            "reply": "completion",
                        },
                    },
                    {"call": "session_create", "args": {"message": "a new timeline"}},
                    {"say": "outcome: {last_result}"},
                ]
            }
        ],
    )
    client.agents.put(spec)
    caller = client.sessions.create("boss")
    stack.workers(1, concurrency=2, queues="chaz.turns")
    asked = client.sessions.post(caller.id, "delegate", sender="user:alice")
    job_id = asked.job_id or ""

    for tool in ("session_send", "session_create"):

        def pending(tool: str = tool) -> Any:
            return next(
                (a for a in client.approvals.pending() if a.job_id == job_id and a.tool == tool),
                None,
            )

        request = stack.wait_for(pending, 30, f"the approval of {tool}")
        assert client.approvals.decide(request.request_id, "deny", by="user:alice").effective

    reply = client.sessions.wait_for_reply(caller.id, after=asked.seq, timeout=60)
    assert "approval.denied" in reply.content
    denied = [
        json.loads(e.content)["error"]["code"]
        for e in client.sessions.entries(caller.id)
        if e.type is EntryType.TOOL_RESULT
    ]
    assert denied == ["approval.denied", "approval.denied"]
    assert {s.id for s in client.sessions.list(limit=100)} == {target.id, caller.id}
    assert client.deliveries.list(caller.id) == [] and client.deliveries.list(target.id) == []
    assert client.sessions.queue(target.id) == []


def test_session_create_runs_its_first_request_and_answers_once(stack: Stack) -> None:
    client = stack.client
    spec = boss("-")
    script = [
        {
            "match": "^spin off",
            "steps": [
                {
                    "call": "session_create",
                    "args": {"message": "draft the plan", "description": "planning"},
                },
                {"say": "made {last_result}"},
            ],
        },
        {"match": "draft the plan", "steps": [{"say": "the plan: ship it"}]},
        *(spec.script or []),
    ]
    client.agents.put(spec.model_copy(update={"script": script}))
    caller = client.sessions.create("boss")
    stack.workers(1, concurrency=4, queues="chaz.turns")
    asked = client.sessions.post(caller.id, "spin off", sender="user:alice")
    _approve(stack, asked.job_id, "session_create")
    reply = client.sessions.wait_for_reply(caller.id, after=asked.seq, timeout=60)
    made = json.loads(reply.content.removeprefix("made "))
    assert made["created"] and made["agentId"] == "boss"
    child = client.sessions.get(made["sessionId"])
    assert child.description == "planning" and child.project == caller.project
    [result] = stack.wait_for(lambda: _results(client, caller.id), 60, "the result")
    noted = _result_turn(stack, caller.id, result)
    assert noted.content.endswith("\nthe plan: ship it")
    assert client.deliveries.status(made["requestId"]) == "consumed"
    assert client.deliveries.get(made["requestId"]).kind is DeliveryKind.SESSION_CREATE
    assert len(_results(client, caller.id)) == 1
