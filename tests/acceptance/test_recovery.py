"""Invariants 2, 5 and 6 (docs/contracts.md#invariants) broken on purpose: dead workers, duplicate
and lost messages."""

from __future__ import annotations

import signal
import time

import pytest
import redis as redis_lib

import chaz
from chaz.coord import keys
from chaz.domain.entries import EntryType
from chaz.plumbing.dispatch import Wake
from tests.conftest import free_port
from tests.support.metrics import Sample, scrape
from tests.support.stack import Stack

CRASHY = chaz.AgentSpec(
    id="crashy",
    tools=["echo", "sleep"],
    script=[
        {"match": "^quick", "steps": [{"echo": True}]},
        {
            "steps": [
                {"call": "echo", "args": {"text": "before"}},
                {"call": "sleep", "args": {"seconds": 4}},
                {"say": "after {last_result}"},
            ]
        },
    ],
)


def test_sigkill_mid_turn_resumes_without_duplicates(stack: Stack) -> None:
    stack.housekeeper()
    workers = stack.workers(2, concurrency=2, queues="chaz.turns")
    client = stack.client
    client.agents.put(CRASHY)
    s = client.sessions.create(agent_id="crashy")
    first = client.sessions.post(s.id, "long job", sender="user:alice")
    second = client.sessions.post(s.id, "quick one", sender="user:alice")

    def sleeping_call() -> chaz.Entry | None:
        return next(
            (
                e
                for e in client.sessions.entries(s.id)
                if e.type is EntryType.TOOL_CALL and e.metadata.get("tool") == "sleep"
            ),
            None,
        )

    stack.wait_for(sleeping_call, 30, "the sleep tool call")
    ack = next(e for e in client.sessions.entries(s.id) if e.type is EntryType.ACK)
    victim = next(w for w in workers if w.pid == ack.metadata["pid"])
    victim.kill(signal.SIGKILL)

    reply = client.sessions.wait_for_reply(s.id, after=first.seq, timeout=60)
    assert reply.type is EntryType.MESSAGE, reply.content
    assert "tool.interrupted" in reply.content  # the in-flight call was reported, not re-run
    job = client.jobs.get(first.job_id or "")
    assert job.status is chaz.JobStatus.SUCCEEDED and job.attempts == 2

    nxt = client.sessions.wait_for_reply(s.id, after=second.seq, timeout=60)
    assert nxt.content == "quick one"

    entries = client.sessions.entries(s.id)
    mine = [e for e in entries if e.job_id == first.job_id]
    calls = [e.metadata["tool"] for e in mine if e.type is EntryType.TOOL_CALL]
    results = [e.metadata["tool"] for e in mine if e.type is EntryType.TOOL_RESULT]
    assert calls == ["echo", "sleep"], "a completed tool call was repeated"
    assert results == ["echo", "sleep"]
    # One Ack of the start, one status entry of the resume.
    assert [e.content for e in mine if e.type is EntryType.ACK] == [
        "processing",
        "resumed: attempt 2",
    ]
    assert [e.type for e in mine].count(EntryType.MESSAGE) == 2  # the trigger and the reply
    # The next turn started only after the recovered one finished.
    last_of_first = max(e.seq for e in mine)
    first_of_second = min(
        e.seq for e in entries if e.job_id == second.job_id and e.type is EntryType.ACK
    )
    assert last_of_first < first_of_second


@pytest.mark.slow
def test_a_turn_whose_worker_keeps_dying_ends_interrupted(stack: Stack) -> None:
    client = stack.client
    naps = [{"call": "sleep", "args": {"seconds": 5}} for _ in range(4)]
    client.agents.put(
        chaz.AgentSpec(
            id="doomed",
            tools=["sleep"],
            script=[{"match": "^quick", "steps": [{"echo": True}]}, {"steps": naps}],
        )
    )
    s = client.sessions.create(agent_id="doomed")
    posted = client.sessions.post(s.id, "doomed", sender="user:alice")
    stack.housekeeper()

    def sleeps() -> int:
        return sum(
            1
            for e in client.sessions.entries(s.id)
            if e.type is EntryType.TOOL_CALL and e.metadata.get("tool") == "sleep"
        )

    for attempt in range(1, 4):
        [worker] = stack.workers(1, concurrency=1, queues="chaz.turns")

        # Each attempt reports the previous in-flight nap interrupted and starts the next.
        def reached(a: int = attempt) -> bool:
            return client.jobs.get(posted.job_id or "").attempts >= a and sleeps() >= a

        stack.wait_for(reached, 30, f"attempt {attempt}")
        worker.kill(signal.SIGKILL)
    stack.workers(1, concurrency=1, queues="chaz.turns")
    final = client.jobs.wait(posted.job_id or "", timeout=60)
    assert final.status is chaz.JobStatus.INTERRUPTED
    err = client.sessions.wait_for_reply(s.id, after=posted.seq, timeout=10)
    assert err.type is EntryType.ERROR and err.metadata["code"] == "turn.interrupted"
    after = client.sessions.post(s.id, "quick again", sender="user:alice")
    assert (
        client.sessions.wait_for_reply(s.id, after=after.seq, timeout=30).content == "quick again"
    )


def test_a_message_delivered_twice_runs_its_turn_once(stack: Stack) -> None:
    stack.workers(2, concurrency=4)
    client = stack.client
    client.agents.put(
        chaz.AgentSpec(id="once", script=[{"steps": [{"sleep": 0.3}, {"say": "done"}]}])
    )
    s = client.sessions.create(agent_id="once")
    e = client.sessions.post(s.id, "hello", sender="user:a")
    for _ in range(5):  # duplicates of the same Celery message, racing the first
        client.services.dispatcher.send_wake(s.id, e.job_id or "", Wake.RECONCILE)
    client.sessions.wait_for_reply(s.id, after=e.seq, timeout=30)
    time.sleep(1.0)
    for _ in range(3):  # and late duplicates after it finished
        client.services.dispatcher.send_wake(s.id, e.job_id or "", Wake.RECONCILE)
    time.sleep(1.0)
    entries = client.sessions.entries(s.id)
    assert [x.type for x in entries] == [EntryType.MESSAGE, EntryType.ACK, EntryType.MESSAGE]
    job = client.jobs.get(e.job_id or "")
    assert job.attempts == 1 and job.status is chaz.JobStatus.SUCCEEDED


def test_redis_flushed_while_jobs_are_queued(stack: Stack) -> None:
    client = stack.client
    client.agents.put(chaz.AgentSpec(id="echo", script=[{"steps": [{"echo": True}]}]))
    sessions = [client.sessions.create(agent_id="echo") for _ in range(3)]
    posted = [
        (s, client.sessions.post(s.id, f"{s.id}-{i}", sender="user:a"))
        for s in sessions
        for i in range(4)
    ]
    r: redis_lib.Redis = client.services.redis
    assert r.get(keys.cumulative(sessions[0].id)) == "4"
    r.flushdb()  # wake-ups, counters and broker queue all gone
    assert r.get(keys.cumulative(sessions[0].id)) is None

    stack.workers(1, concurrency=4, beat=True)
    for s, e in posted:
        reply = client.sessions.wait_for_reply(s.id, after=e.seq, timeout=60)
        assert reply.content == e.content
    for s in sessions:
        entries = client.sessions.entries(s.id)
        assert [x.type for x in entries].count(EntryType.ACK) == 4
        assert [x.type for x in entries].count(EntryType.MESSAGE) == 8
        assert all(j.attempts == 1 for j in client.jobs.list(session_id=s.id))
    # The counters came back from the database: cumulative is never refunded.
    stack.wait_for(lambda: r.get(keys.cumulative(sessions[0].id)) == "4", 10, "counters")


def test_a_killed_workers_turn_resumes_with_no_beat_running(stack: Stack) -> None:
    # No housekeeper: nothing runs the reconciler. The surviving worker's
    # lease watch finds the dead worker's expired lease and wakes the session.
    ports = [free_port(), free_port()]
    workers = stack.workers(2, concurrency=2, metrics_ports=ports)
    client = stack.client
    client.agents.put(CRASHY)
    s = client.sessions.create(agent_id="crashy")
    first = client.sessions.post(s.id, "long job", sender="user:alice")

    def sleeping_call() -> chaz.Entry | None:
        return next(
            (
                e
                for e in client.sessions.entries(s.id)
                if e.type is EntryType.TOOL_CALL and e.metadata.get("tool") == "sleep"
            ),
            None,
        )

    stack.wait_for(sleeping_call, 30, "the sleep tool call")
    ack = next(e for e in client.sessions.entries(s.id) if e.type is EntryType.ACK)
    victim = next(w for w in workers if w.pid == ack.metadata["pid"])
    victim.kill(signal.SIGKILL)
    survivor = next(w for w in workers if w is not victim)

    reply = client.sessions.wait_for_reply(s.id, after=first.seq, timeout=60)
    assert reply.type is EntryType.MESSAGE, f"{reply.content}\n{stack.logs()}"
    job = client.jobs.get(first.job_id or "")
    assert job.status is chaz.JobStatus.SUCCEEDED and job.attempts == 2
    # A reader of the timeline sees the resume, and which worker took it over.
    mine = [e for e in client.sessions.entries(s.id) if e.job_id == first.job_id]
    acks = [e for e in mine if e.type is EntryType.ACK]
    assert [a.content for a in acks] == ["processing", "resumed: attempt 2"]
    assert acks[1].metadata["resumed"] == 2 and acks[1].metadata["pid"] == survivor.pid
    assert acks[1].seq < reply.seq
    # The survivor's metrics say so too (docs/operations.md).
    port = ports[workers.index(survivor)]

    def counted() -> dict[Sample, float] | None:
        got = scrape(port)
        return got if got.get(("chaz_turns_ended_total", (("outcome", "succeeded"),))) else None

    got = stack.wait_for(counted, 30, "the survivor's turn counters")
    assert got is not None
    assert got[("chaz_lane_takeovers_total", ())] >= 1
    assert got[("chaz_turns_resumed_total", ())] >= 1
