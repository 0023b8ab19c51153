"""Preemptive cancellation (issue 13 item 4, docs/runtime.md#preemptive-cancel).

A cancel reaches a running turn through its worker's cancel watcher, not
only at the turn's next step boundary: a scripted ``sleep``, a tool waiting
on ``ctx.cancel`` and an in-flight OpenAI request all end early, no reply is
written, and the job ends ``cancelled``. Every wait here is far longer than
the time allowed for the job to end, so a job that ended in time was
interrupted; no assertion rests on a tight wall-time bound.
"""

from __future__ import annotations

import json

import pytest

import chaz
from chaz.domain.entries import EntryType
from tests.support.fake_openai import FakeOpenAI
from tests.support.stack import Stack

pytest_plugins = ["tests.support.producers"]

#: What the turn would wait for without the cancel.
LONG = 30
#: How long the job may take to end once cancelled: a third of LONG.
PROMPT = 10
#: How long a worker may take to start the turn on a loaded machine.
WAIT = 60


def _running(stack: Stack, client: chaz.Client, job_id: str) -> chaz.Job:
    job = stack.wait_for(
        lambda: (j := client.jobs.get(job_id)).status is chaz.JobStatus.RUNNING and j,
        WAIT,
        f"job {job_id} to run",
    )
    assert job
    return job


def _cancelled_without_reply(
    stack: Stack, client: chaz.Client, session_id: str, job_id: str, agent: str
) -> None:
    """The cancel took: the job ends ``cancelled`` well before its wait could
    have, with its Error entry and no reply."""
    assert client.jobs.cancel(job_id, reason="stop now")["status"] == "stopping"
    done = client.jobs.wait(job_id, timeout=PROMPT)
    assert done.status is chaz.JobStatus.CANCELLED, stack.logs()
    entries = client.sessions.entries(session_id)
    assert not [e for e in entries if e.type is EntryType.MESSAGE and e.sender == agent]
    [error] = [e for e in entries if e.type is EntryType.ERROR]
    assert error.metadata["code"] == "job.cancelled" and error.job_id == job_id


@pytest.fixture(scope="module")
def fleet(module_stack: Stack) -> Stack:
    """One worker of two turn threads: a cancel that fails to stop a turn fails its test."""
    module_stack.workers(1, concurrency=2)
    return module_stack


def test_a_cancel_ends_a_scripted_sleep_at_once(fleet: Stack, producer: chaz.Client) -> None:
    client = producer
    fleet.client.agents.put(
        chaz.AgentSpec(id="sleepy", script=[{"steps": [{"sleep": LONG}, {"say": "too late"}]}])
    )
    s = client.sessions.create("sleepy")
    posted = client.sessions.post(s.id, "nap", sender="user:alice")
    job_id = posted.job_id or ""
    _running(fleet, client, job_id)
    _cancelled_without_reply(fleet, client, s.id, job_id, "agent:sleepy")
    # The session is free again: its next message is answered at once.
    fleet.client.agents.put(chaz.AgentSpec(id="sleepy", script=[{"steps": [{"echo": True}]}]))
    again = client.sessions.post(s.id, "awake", sender="user:alice")
    assert client.sessions.wait_for_reply(s.id, after=again.seq, timeout=WAIT).content == "awake"


def test_a_cancel_stops_a_tool_waiting_on_its_token(fleet: Stack, producer: chaz.Client) -> None:
    client = producer
    fleet.client.agents.put(
        chaz.AgentSpec(
            id="napper",
            tools=["sleep"],
            script=[{"steps": [{"call": "sleep", "args": {"seconds": LONG}}, {"say": "woke"}]}],
        )
    )
    s = client.sessions.create("napper")
    posted = client.sessions.post(s.id, "nap", sender="user:alice")
    job_id = posted.job_id or ""
    # The ToolCall entry is written as the call starts: the tool is in flight.
    fleet.wait_for(
        lambda: any(e.type is EntryType.TOOL_CALL for e in client.sessions.entries(s.id)),
        WAIT,
        "the sleep tool to start",
    )
    _cancelled_without_reply(fleet, client, s.id, job_id, "agent:napper")
    # The tool said why it stopped, and nothing ran after it.
    [result] = [e for e in client.sessions.entries(s.id) if e.type is EntryType.TOOL_RESULT]
    assert result.metadata["is_error"] is True
    assert json.loads(result.content)["error"]["code"] == "job.cancelled"


def test_a_cancel_interrupts_an_in_flight_model_request(
    fleet: Stack, producer: chaz.Client
) -> None:
    client = producer
    with FakeOpenAI(model="fake-model") as srv:
        fleet.client.agents.put(
            chaz.AgentSpec(
                id="gpt",
                model="openai:fake-model",
                options={
                    "base_url": srv.base_url,
                    "api_key": "unused",
                    "max_retries": 0,
                    "timeout": LONG * 2,
                },
            )
        )
        # The answer comes only after LONG seconds: the turn is waiting on it.
        srv.push_text("an answer nobody may write", delay=LONG)
        s = client.sessions.create("gpt")
        posted = client.sessions.post(s.id, "hello", sender="user:alice")
        job_id = posted.job_id or ""
        fleet.wait_for(lambda: srv.received, WAIT, "the model request")
        _cancelled_without_reply(fleet, client, s.id, job_id, "agent:gpt")
        # The request was cut on the wire: the server saw the worker hang up.
        fleet.wait_for(lambda: srv.hangups == 1, WAIT, "the server to see the hang-up")


def test_a_cancel_before_the_answer_is_seen_keeps_the_step_boundary_rule(
    fleet: Stack, producer: chaz.Client
) -> None:
    """A turn held at a gate is cancelled, then let go: it ends ``cancelled``
    at once (the gate's wait ends on the token), never with its reply."""
    client = producer
    fleet.client.agents.put(
        chaz.AgentSpec(
            id="held",
            script=[{"steps": [{"wait": "hold-{session_id}", "timeout": 300}, {"say": "done"}]}],
        )
    )
    s = client.sessions.create("held")
    posted = client.sessions.post(s.id, "go", sender="user:alice")
    job_id = posted.job_id or ""
    _running(fleet, client, job_id)
    _cancelled_without_reply(fleet, client, s.id, job_id, "agent:held")
    # Opening the gate afterwards changes nothing: the turn is over.
    fleet.open_gate(f"hold-{s.id}")
    assert client.jobs.get(job_id).status is chaz.JobStatus.CANCELLED
