"""Issue 9: follow-ups and the busy-target inbox under load and a worker kill.

Each test has its own stack and workers, because it kills one of them.
"""

from __future__ import annotations

import itertools
import json
import signal
from datetime import timedelta
from typing import Any

from sqlalchemy import update

import chaz
from chaz.coord import keys
from chaz.domain.deliveries import DeliveryState
from chaz.domain.entries import Entry, EntryType
from chaz.stack import WorkerProcess
from chaz.store.models import DeliveryRow
from tests.support.stack import Stack

WAIT = 90


def _agent(stack: Stack, agent_id: str, rules: list[dict[str, Any]], *tools: str) -> None:
    stack.client.agents.put(chaz.AgentSpec(id=agent_id, tools=list(tools), script=rules))


def _followups(stack: Stack, session_id: str) -> list[Entry]:
    return [
        e
        for e in stack.client.sessions.entries(session_id)
        if e.type is EntryType.DIRECTIVE and "followup" in e.metadata
    ]


def _worker_of(stack: Stack, workers: list[WorkerProcess], job_id: str) -> WorkerProcess:
    """The worker process running ``job_id`` (its Ack names the pid)."""
    job = stack.client.jobs.get(job_id)
    ack = next(
        e
        for e in stack.client.sessions.entries(job.session_id)
        if e.type is EntryType.ACK and e.job_id == job_id
    )
    return next(w for w in workers if w.pid == ack.metadata["pid"])


def test_five_children_finishing_at_once_make_one_serial_chain_despite_a_kill(
    stack: Stack,
) -> None:
    stack.housekeeper()
    workers = stack.workers(2, concurrency=4, queues="chaz.turns")
    _agent(stack, "kid", [{"steps": [{"wait": "kids", "timeout": 120}, {"say": "kid: {input}"}]}])
    spawn = [
        {
            "call": "agent",
            "args": {"prompt": f"part {i}", "agent_id": "kid", "run_in_background": True},
        }
        for i in range(5)
    ]
    _agent(
        stack,
        "boss",
        [
            {"match": "^go", "steps": [{"calls": spawn}, {"say": "spawned"}]},
            # Each follow-up turn waits at the gate: the first one is running
            # (and is killed) while the other four queue behind it.
            {"match": "finished", "steps": [{"wait": "chain", "timeout": 120}, {"say": "noted"}]},
        ],
        "agent",
    )
    client = stack.client
    boss = client.sessions.create("boss")
    posted = client.sessions.post(boss.id, "go", sender="user:tester")
    client.jobs.wait(posted.job_id or "", timeout=WAIT)
    kids = [j for j in client.jobs.list(limit=100) if j.parent_job_id == posted.job_id]
    assert len(kids) == 5
    stack.open_gate("kids")
    for kid in kids:
        assert client.jobs.wait(kid.id, timeout=WAIT).status is chaz.JobStatus.SUCCEEDED
    stack.wait_for(lambda: len(_followups(stack, boss.id)) == 5, WAIT, "five follow-ups")

    def running_followup() -> chaz.Job | None:
        jobs = client.jobs.list(session_id=boss.id, status="running")
        return jobs[0] if jobs and jobs[0].id != posted.job_id else None

    first = stack.wait_for(running_followup, WAIT, "the first follow-up turn")
    assert first is not None
    stack.wait_for(
        lambda: any(
            e.type is EntryType.ACK and e.job_id == first.id
            for e in client.sessions.entries(boss.id)
        ),
        WAIT,
        "its Ack",
    )
    _worker_of(stack, workers, first.id).kill(signal.SIGKILL)
    stack.workers(1, concurrency=4, queues="chaz.turns")
    stack.open_gate("chain")

    chain = [j for j in client.jobs.list(session_id=boss.id, limit=100) if j.id != posted.job_id]
    assert len(chain) == 5
    done = [client.jobs.wait(j.id, timeout=WAIT) for j in chain]
    assert {j.status for j in done} == {chaz.JobStatus.SUCCEEDED}
    # One after another at the caller's head: each starts after the last ended.
    done.sort(key=lambda j: j.ordinal)
    for before, after in itertools.pairwise(done):
        assert before.finished_at is not None and after.started_at is not None
        assert after.started_at >= before.finished_at
    assert client.jobs.get(first.id).attempts == 2  # resumed, not run twice
    # Each child answered exactly once.
    answered = [fu.metadata["followup"]["execution_id"] for fu in _followups(stack, boss.id)]
    assert sorted(answered) == sorted(k.id for k in kids)


def test_inbox_full_duplicates_and_a_kill_lose_nothing(stack: Stack) -> None:
    stack.housekeeper()
    workers = stack.workers(2, concurrency=4, queues="chaz.turns")
    _agent(
        stack,
        "target",
        [
            {"match": "^hold", "steps": [{"wait": "hold", "timeout": 120}, {"say": "held"}]},
            {"steps": [{"say": "got it"}]},
        ],
    )
    flood = [
        {"call": "send_message", "args": {"to": "the-target", "message": f"m{i}"}}
        for i in range(51)
    ]
    _agent(
        stack,
        "sender",
        [
            {"match": "^flood", "steps": [{"calls": flood}, {"say": "sent"}]},
            {
                "match": "^again",
                "steps": [
                    {"call": "send_message", "args": {"to": "the-target", "message": "m50"}},
                    {"say": "{last_result}"},
                ],
            },
            {"match": "finished|failed", "steps": [{"say": "ok"}]},
        ],
        "send_message",
    )
    client = stack.client
    target = client.sessions.create("target", name="the-target")
    sender = client.sessions.create("sender")
    held = client.sessions.post(target.id, "hold", sender="user:tester")
    stack.wait_for(
        lambda: client.jobs.get(held.job_id or "").status is chaz.JobStatus.RUNNING,
        WAIT,
        "the target's held turn",
    )
    posted = client.sessions.post(sender.id, "flood", sender="user:tester")
    reply = client.sessions.wait_for_reply(sender.id, after=posted.seq, timeout=WAIT)
    assert reply.content == "sent"
    results = [
        json.loads(e.content)
        for e in client.sessions.entries(sender.id)
        if e.type is EntryType.TOOL_RESULT
    ]
    assert [r["status"] for r in results] == ["queued"] * 51
    into = client.deliveries.list(target.id, direction="in", limit=200)
    waiting = [d for d in into if d.state is DeliveryState.ACCEPTED]
    dropped = [d for d in into if d.state is DeliveryState.DROPPED]
    assert len(waiting) == 50 and [d.body for d in dropped] == ["m0"]
    notices = [e for e in client.sessions.entries(sender.id) if e.type is EntryType.NOTICE]
    assert len(notices) == 1 and notices[0].metadata["code"] == "inbox.full"

    # The same text again while its copy waits: refused, and the sender is told.
    posted = client.sessions.post(sender.id, "again", sender="user:tester")
    reply = client.sessions.wait_for_reply(sender.id, after=posted.seq, timeout=WAIT)
    assert "delivery.duplicate" in reply.content
    # A minute later it is a deliberate resend: accepted (dropping m1).
    with client.services.store.engine.begin() as conn:
        # The clock moved on: every queued copy is now older than the window
        # (computed here, not in SQL: SQLite has no date arithmetic on these).
        for d in client.deliveries.list(target.id, direction="in", limit=200):
            conn.execute(
                update(DeliveryRow)
                .where(DeliveryRow.id == d.id)
                .values(created_at=d.created_at - timedelta(seconds=61))
            )
    posted = client.sessions.post(sender.id, "again", sender="user:tester")
    reply = client.sessions.wait_for_reply(sender.id, after=posted.seq, timeout=WAIT)
    assert json.loads(reply.content)["status"] == "queued"

    # Kill the worker in the middle of the target's turn: the turn resumes
    # on another worker, ends, and its end drains the inbox, each message once.
    _worker_of(stack, workers, held.job_id or "").kill(signal.SIGKILL)
    stack.workers(1, concurrency=4, queues="chaz.turns")
    stack.open_gate("hold")
    expected = [f"m{i}" for i in range(2, 51)] + ["m50"]

    def delivered() -> list[str]:
        return [
            e.content.rsplit("\n", 1)[-1]
            for e in client.sessions.entries(target.id)
            if e.type is EntryType.DIRECTIVE
        ]

    stack.wait_for(lambda: len(delivered()) >= len(expected), WAIT, "the inbox to drain")
    assert delivered() == expected
    jobs = client.jobs.list(session_id=target.id, limit=200)
    assert len(jobs) == 1 + len(expected)
    for job in jobs:
        assert client.jobs.wait(job.id, timeout=WAIT).status is chaz.JobStatus.SUCCEEDED
    assert client.jobs.get(held.job_id or "").attempts == 2
    into = client.deliveries.list(target.id, direction="in", limit=200)
    assert sum(d.state is DeliveryState.ACCEPTED for d in into) == 0


def test_a_lost_inbox_flag_delays_messages_and_the_reconciler_delivers_them(
    stack: Stack,
) -> None:
    stack.housekeeper()  # beat: the reconciler every second (tests' settings)
    stack.workers(1, concurrency=4, queues="chaz.turns")
    _agent(
        stack,
        "target",
        [
            {"match": "^hold", "steps": [{"wait": "hold", "timeout": 120}, {"say": "held"}]},
            {"steps": [{"say": "got it"}]},
        ],
    )
    sends = [
        {"call": "send_message", "args": {"to": "the-target", "message": f"m{i}"}} for i in range(2)
    ]
    _agent(
        stack,
        "sender",
        [
            {"match": "^send", "steps": [{"calls": sends}, {"say": "sent"}]},
            {"match": "finished|failed", "steps": [{"say": "ok"}]},
        ],
        "send_message",
    )
    client = stack.client
    target = client.sessions.create("target", name="the-target")
    sender = client.sessions.create("sender")
    held = client.sessions.post(target.id, "hold", sender="user:tester")
    stack.wait_for(
        lambda: client.jobs.get(held.job_id or "").status is chaz.JobStatus.RUNNING,
        WAIT,
        "the target's held turn",
    )
    posted = client.sessions.post(sender.id, "send", sender="user:tester")
    assert client.sessions.wait_for_reply(sender.id, after=posted.seq, timeout=WAIT).content == (
        "sent"
    )
    # Redis loses the hint (a flush, a failover): the turn's end cannot see it.
    client.services.redis.delete(keys.inbox(target.id))
    stack.open_gate("hold")
    client.jobs.wait(held.job_id or "", timeout=WAIT)

    def delivered() -> list[str]:
        return [
            e.content.rsplit("\n", 1)[-1]
            for e in client.sessions.entries(target.id)
            if e.type is EntryType.DIRECTIVE
        ]

    # The database still holds them: the reconciler's sweep drains the idle target.
    stack.wait_for(lambda: delivered() == ["m0", "m1"], WAIT, "the sweep to drain the inbox")
    stack.wait_for(lambda: len(_followups(stack, sender.id)) == 2, WAIT, "two follow-ups")


def test_an_inbox_message_waits_out_a_full_queue_instead_of_failing(stack: Stack) -> None:
    stack.workers(1, concurrency=2, queues="chaz.turns")
    _agent(
        stack,
        "target",
        [
            {"match": "^hold", "steps": [{"wait": "hold", "timeout": 120}, {"say": "held"}]},
            {"match": "^queued", "steps": [{"wait": "queued", "timeout": 120}, {"say": "q"}]},
            {"steps": [{"say": "got it"}]},
        ],
    )
    _agent(
        stack,
        "sender",
        [
            {
                "match": "^send",
                "steps": [
                    {"call": "send_message", "args": {"to": "the-target", "message": "hi"}},
                    {"say": "{last_result}"},
                ],
            },
            {"match": "finished|failed", "steps": [{"say": "ok"}]},
        ],
        "send_message",
    )
    client = stack.client
    target = client.sessions.create(
        "target", name="the-target", limits={"max_queued_per_session": 1}
    )
    sender = client.sessions.create("sender")
    held = client.sessions.post(target.id, "hold", sender="user:tester")
    stack.wait_for(
        lambda: client.jobs.get(held.job_id or "").status is chaz.JobStatus.RUNNING,
        WAIT,
        "the held turn",
    )
    # The held job leaves the queue's count in the start's Redis script, just
    # after its start commits: a post in between still finds the queue full
    # (retryable), so the post is tried until the held job has left it.
    queued = stack.wait_for(
        lambda: _admitted_or_none(client, target.id, "queued"), WAIT, "room in the queue"
    )  # now the queue is full
    assert queued is not None
    posted = client.sessions.post(sender.id, "send", sender="user:tester")
    reply = client.sessions.wait_for_reply(sender.id, after=posted.seq, timeout=WAIT)
    delivery_id = json.loads(reply.content)["delivery_id"]
    # The held turn ends while the queued job still fills the queue: the
    # message cannot be admitted yet, and it is not failed for that.
    stack.open_gate("hold")
    stack.wait_for(
        lambda: client.jobs.get(queued.job_id or "").status is chaz.JobStatus.RUNNING,
        WAIT,
        "the queued job to start",
    )
    assert client.deliveries.get(delivery_id).state is DeliveryState.ACCEPTED
    stack.open_gate("queued")
    stack.wait_for(
        lambda: client.deliveries.get(delivery_id).state is DeliveryState.DONE,
        WAIT,
        "the message to be admitted and answered",
    )
    assert not [e for e in client.sessions.entries(sender.id) if e.type is EntryType.NOTICE]


def _admitted_or_none(client: chaz.Client, session_id: str, text: str) -> Entry | None:
    """The post's entry, or None while the session's queue is full."""
    try:
        return client.sessions.post(session_id, text, sender="user:tester")
    except chaz.errors.QueueFull:
        return None
