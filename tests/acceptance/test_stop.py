"""Stop, and withdrawing queued work (docs/collaboration.md#withdrawal,
docs/executions.md#stop), on real worker processes.

A cancelled job's message waiting in a busy inbox never runs, and its
sender's session runs no further turn; a session-wide Stop cancels a
session's running turn and queued jobs and leaves another session's
running turn alone. Both go through the public entries: ``client.jobs.cancel``,
``client.sessions.stop`` and ``chaz sessions stop``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

import chaz
from chaz.domain.deliveries import WITHDRAWN_CODE, DeliveryState
from chaz.usecases.reconcile import Reconciler
from tests.acceptance.test_cli import chaz_cli, ok
from tests.support.stack import Stack

pytest_plugins = ["tests.support.producers"]

WAIT = 60
HOLD = {"match": "^hold", "steps": [{"wait": "hold-{session_id}", "timeout": 300}, {"say": "held"}]}


@pytest.fixture(scope="module")
def fleet(module_stack: Stack) -> Iterator[Stack]:
    module_stack.workers(1, concurrency=4)
    yield module_stack


@pytest.fixture
def producer_principal() -> str:
    """The sender of these tests' posts (tests/support/producers.py)."""
    return "user:tester"


def _running(stack: Stack, client: chaz.Client, job_id: str) -> None:
    stack.wait_for(
        lambda: client.jobs.get(job_id).status is chaz.JobStatus.RUNNING,
        WAIT,
        f"job {job_id} to run",
    )


def test_a_cancel_withdraws_its_message_from_a_busy_inbox(
    fleet: Stack, producer: chaz.Client
) -> None:
    client = producer
    fleet.client.agents.put(
        chaz.AgentSpec(id="w-target", script=[HOLD, {"steps": [{"say": "ran: {input}"}]}])
    )
    fleet.client.agents.put(
        chaz.AgentSpec(
            id="w-sender",
            tools=["send_message"],
            script=[
                {
                    # The input names the target: session names are global,
                    # and each run of the test names its own.
                    "match": "^w-busy-",
                    "steps": [
                        {"call": "send_message", "args": {"to": "{input}", "message": "do it"}},
                        {"wait": "sent-{session_id}", "timeout": 300},
                        {"say": "sent"},
                    ],
                },
                {"steps": [{"say": "noted"}]},
            ],
        )
    )
    busy = f"w-busy-{uuid.uuid4().hex[:8]}"
    target = client.sessions.create("w-target", name=busy)
    sender = client.sessions.create("w-sender")
    held = client.sessions.post(target.id, "hold", sender="user:tester").job_id or ""
    _running(fleet, client, held)
    sending = client.sessions.post(sender.id, busy, sender="user:tester").job_id or ""
    [queued] = fleet.wait_for(
        lambda: [
            json.loads(e.content)
            for e in client.sessions.entries(sender.id)
            if e.type is chaz.EntryType.TOOL_RESULT
        ],
        WAIT,
        "the message to be queued",
    )
    assert queued["status"] == "queued", queued
    # Command ids are global, like session names: each run of the test has its own.
    command = f"cancel-the-sender-{uuid.uuid4().hex[:8]}"
    outcome = client.jobs.cancel(sending, command_id=command, reason="never mind")
    assert outcome["withdrawn"] == [queued["delivery_id"]]
    assert client.jobs.wait(sending, timeout=WAIT).status is chaz.JobStatus.CANCELLED
    delivery = client.deliveries.get(queued["delivery_id"])
    assert delivery.state is DeliveryState.WITHDRAWN and delivery.code == WITHDRAWN_CODE
    assert delivery.metadata["withdrawn_by"] == command
    # The target's turn ends, and its inbox has nothing left to run.
    fleet.open_gate(f"hold-{target.id}")
    assert client.jobs.wait(held, timeout=WAIT).status is chaz.JobStatus.SUCCEEDED
    Reconciler(fleet.client.services, grace_seconds=0).run()
    assert [j.id for j in client.jobs.list(session_id=target.id)] == [held]
    assert [j.id for j in client.jobs.list(session_id=sender.id)] == [sending]
    assert client.deliveries.get(queued["delivery_id"]).state is DeliveryState.WITHDRAWN


def test_stop_cancels_a_session_and_leaves_another_running(
    fleet: Stack, producer: chaz.Client, producer_env: dict[str, str]
) -> None:
    client = producer
    fleet.client.agents.put(
        chaz.AgentSpec(id="s-busy", script=[HOLD, {"steps": [{"say": "ran: {input}"}]}])
    )
    stopped = client.sessions.create("s-busy")
    other = client.sessions.create("s-busy")
    running = client.sessions.post(stopped.id, "hold", sender="user:tester").job_id or ""
    elsewhere = client.sessions.post(other.id, "hold", sender="user:tester").job_id or ""
    _running(fleet, client, running)
    _running(fleet, client, elsewhere)
    queued = [
        client.sessions.post(stopped.id, f"hold {i}", sender="user:tester").job_id or ""
        for i in range(3)
    ]
    command = f"stop-it-{uuid.uuid4().hex[:8]}"  # global, as in the test above
    outcome = client.sessions.stop(stopped.id, command_id=command, reason="enough")
    assert outcome["session_id"] == stopped.id and outcome["changed"] is True
    assert [o["execution_id"] for o in outcome["cancelled"]] == [running, *queued]
    assert [o["status"] for o in outcome["cancelled"]] == ["stopping"] + ["cancelled"] * 3
    for job_id in (running, *queued):
        assert client.jobs.wait(job_id, timeout=WAIT).status is chaz.JobStatus.CANCELLED
    # Another session's turn is untouched: it still runs, and ends on its own.
    assert client.jobs.get(elsewhere).status is chaz.JobStatus.RUNNING
    # The same stop again (a redelivered command), from the CLI: the first
    # outcome, nothing more.
    env = producer_env
    again = ok(chaz_cli("--json", "sessions", "stop", stopped.id, "--command-id", command, env=env))
    assert json.loads(again) == json.loads(json.dumps(outcome))
    assert client.jobs.get(elsewhere).status is chaz.JobStatus.RUNNING
    fleet.open_gate(f"hold-{other.id}")
    assert client.jobs.wait(elsewhere, timeout=WAIT).status is chaz.JobStatus.SUCCEEDED
    assert [j.status for j in client.jobs.list(session_id=stopped.id)] == [
        chaz.JobStatus.CANCELLED
    ] * 4
