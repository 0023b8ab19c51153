"""Issue 2 acceptance: a message in, an agent turn out, on both stacks."""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict

import pytest

import chaz
from chaz.domain.entries import EntryType
from tests.support.stack import Stack

pytest_plugins = ["tests.support.producers"]

ECHO = chaz.AgentSpec(id="echo", script=[{"steps": [{"echo": True}]}])
COUNTER = chaz.AgentSpec(
    id="counter",
    tools=["word_count"],
    script=[
        {"match": "^fail", "steps": [{"fail": "the model is down"}]},
        {"match": "^bad", "steps": [{"call": "word_count", "raw_args": "{not json"}]},
        {"match": "^unknown", "steps": [{"call": "no_such_tool"}, {"say": "saw {last_result}"}]},
        {"match": "^invalid", "steps": [{"call": "word_count", "args": {"txt": 1}}]},
        {"steps": [{"call": "word_count", "args": {"text": "{input}"}}, {"say": "{last_result}"}]},
    ],
)


@pytest.fixture(scope="module")
def fleet(module_stack: Stack) -> Stack:
    """One worker, for the tests here that neither stop it nor count on its pool size."""
    module_stack.workers(1)
    return module_stack


def types(entries: list[chaz.Entry]) -> list[str]:
    return [e.type.value for e in entries]


def test_message_produces_exactly_one_turn(tenant: Stack) -> None:
    client = tenant.client
    client.agents.put(COUNTER)
    s = client.sessions.create(agent_id="counter")
    e = client.sessions.post(s.id, "three little words", sender="user:alice")
    reply = client.sessions.wait_for_reply(s.id, after=e.seq, timeout=30)
    assert reply.content == "3"
    entries = client.sessions.entries(s.id)
    assert types(entries) == ["message", "ack", "tool_call", "tool_result", "message"]
    assert [x.seq for x in entries] == [1, 2, 3, 4, 5]
    assert len(client.jobs.list(session_id=s.id)) == 1

    # Entries that must not start a turn: the agent's own message, an Ack, a ToolResult.
    client.sessions.post(s.id, "from me", sender="agent:counter")
    client.sessions.post(s.id, "ack", sender="system:test", type="ack")
    client.sessions.post(s.id, "42", sender="system:test", type="tool_result")
    time.sleep(1.0)
    assert len(client.jobs.list(session_id=s.id)) == 1
    assert types(client.sessions.entries(s.id, after=5)) == ["message", "ack", "tool_result"]


def test_directive_from_another_agent_starts_a_turn(tenant: Stack) -> None:
    client = tenant.client
    client.agents.put(ECHO)
    client.agents.put(chaz.AgentSpec(id="planner", script=[{"steps": [{"say": "ok"}]}]))
    s = client.sessions.create(agent_id="echo")
    d = client.sessions.post(s.id, "do X", sender="agent:planner", type="directive")
    reply = client.sessions.wait_for_reply(s.id, after=d.seq, timeout=30)
    assert reply.type is EntryType.MESSAGE and reply.content == "do X"
    # A message from a *known* agent other than the session's own is also no trigger.
    client.sessions.post(s.id, "chatting", sender="agent:planner")
    time.sleep(0.5)
    assert len(client.jobs.list(session_id=s.id)) == 1


def test_failures_end_as_clear_entries_and_the_session_goes_on(
    fleet: Stack, producer: chaz.Client
) -> None:
    client = producer
    fleet.client.agents.put(COUNTER)
    s = client.sessions.create(agent_id="counter")

    e = client.sessions.post(s.id, "bad call", sender="user:alice")
    r = client.sessions.wait_for_reply(s.id, after=e.seq, timeout=30)
    results = [x for x in client.sessions.entries(s.id) if x.type is EntryType.TOOL_RESULT]
    assert results[-1].metadata["is_error"] is True
    assert "tool.malformed" in results[-1].content
    assert r.type is EntryType.MESSAGE  # the model saw the error and the turn ended

    e = client.sessions.post(s.id, "invalid args", sender="user:alice")
    client.sessions.wait_for_reply(s.id, after=e.seq, timeout=30)
    results = [x for x in client.sessions.entries(s.id) if x.type is EntryType.TOOL_RESULT]
    assert "tool.invalid_arguments" in results[-1].content

    e = client.sessions.post(s.id, "unknown tool", sender="user:alice")
    r = client.sessions.wait_for_reply(s.id, after=e.seq, timeout=30)
    assert "tool.unknown" in r.content

    e = client.sessions.post(s.id, "fail now", sender="user:alice")
    r = client.sessions.wait_for_reply(s.id, after=e.seq, timeout=30)
    assert r.type is EntryType.ERROR
    assert r.metadata["code"] == "model.error"
    assert "the model is down" in r.content
    assert client.jobs.get(r.job_id or "").status is chaz.JobStatus.FAILED

    e = client.sessions.post(s.id, "still alive here", sender="user:alice")
    r = client.sessions.wait_for_reply(s.id, after=e.seq, timeout=30)
    assert r.content == "3"


@pytest.mark.parametrize("producer_principal", ["user:bob"])
def test_no_matching_rule_is_an_error_entry(fleet: Stack, producer: chaz.Client) -> None:
    client = producer
    fleet.client.agents.put(
        chaz.AgentSpec(id="picky", script=[{"match": "^yes$", "steps": [{"say": "y"}]}])
    )
    s = client.sessions.create(agent_id="picky")
    e = client.sessions.post(s.id, "no", sender="user:bob")
    r = client.sessions.wait_for_reply(s.id, after=e.seq, timeout=30)
    assert r.type is EntryType.ERROR and r.metadata["code"] == "model.no_rule"


def test_turns_of_one_session_never_overlap_and_keep_admission_order(stack: Stack) -> None:
    stack.workers(3, concurrency=4)
    client = stack.client
    client.agents.put(
        chaz.AgentSpec(id="slow", script=[{"steps": [{"sleep": 0.002}, {"echo": True}]}])
    )
    s = client.sessions.create(agent_id="slow")
    posted: list[chaz.Entry] = []
    lock = threading.Lock()

    def post(thread: int) -> None:
        for i in range(25):
            entry = client.sessions.post(s.id, f"t{thread}-{i}", sender=f"user:u{thread}")
            with lock:
                posted.append(entry)

    threads = [threading.Thread(target=post, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(posted) == 200
    jobs = {e.job_id for e in posted}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done = [j for j in client.jobs.list(session_id=s.id, limit=1000) if j.status.terminal]
        if len(done) == 200:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"only {len(done)} of 200 turns finished\n{stack.logs()}")

    entries = client.sessions.entries(s.id)
    by_job: dict[str, list[chaz.Entry]] = defaultdict(list)
    for entry in entries:
        if entry.sender == "agent:slow":
            by_job[entry.job_id or ""].append(entry)
    assert set(by_job) == jobs
    trigger_seq = {e.job_id: e.seq for e in posted}
    # Turns start (Ack) in admission order, and each ends before the next starts.
    order = sorted(by_job, key=lambda j: by_job[j][0].seq)
    assert order == sorted(jobs, key=lambda j: trigger_seq[j])
    for prev, nxt in itertools.pairwise(order):
        assert by_job[prev][-1].seq < by_job[nxt][0].seq, "turns overlapped"
        assert by_job[prev][-1].created_at <= by_job[nxt][0].created_at
    for job in order:
        assert types(by_job[job]) == ["ack", "message"]


@pytest.mark.parametrize("producer_principal", ["user:a"])
def test_many_sessions_run_in_parallel(stack: Stack, producer: chaz.Client) -> None:
    stack.workers(2, concurrency=8)
    client = producer
    stack.client.agents.put(
        chaz.AgentSpec(id="nap", script=[{"steps": [{"sleep": 0.2}, {"echo": True}]}])
    )
    sessions = [client.sessions.create(agent_id="nap") for _ in range(200)]
    posted = [
        (s, client.sessions.post(s.id, f"hi {i}", sender="user:a")) for i, s in enumerate(sessions)
    ]
    for s, e in posted:
        r = client.sessions.wait_for_reply(s.id, after=e.seq, timeout=120)
        assert r.content == e.content
    # Parallelism from the record, not a stopwatch: how many turns were
    # running at the moment each one started (16 threads across 2 workers).
    spans = [
        (j.started_at, j.finished_at) for s, _ in posted for j in client.jobs.list(session_id=s.id)
    ]
    most = max(sum(1 for a, b in spans if a <= start < b) for start, _ in spans)  # type: ignore[operator, misc]
    assert most >= 4, f"at most {most} turns ran at once"


def test_a_turn_held_at_a_gate_waits_for_the_test_and_the_queue_behind_it(
    stack: Stack, producer: chaz.Client
) -> None:
    """A worker process sees the gates of its CHAZ_HOME: the turn holds until opened."""
    stack.workers(1)
    client = producer
    stack.client.agents.put(
        chaz.AgentSpec(
            id="gated",
            script=[{"steps": [{"wait": "go-{session_id}"}, {"say": "through {input}"}]}],
        )
    )
    s = client.sessions.create(agent_id="gated")
    first = client.sessions.post(s.id, "one", sender="user:alice")
    second = client.sessions.post(s.id, "two", sender="user:alice")
    # The first turn has started (its Ack is written) and holds at the gate.
    # Its Ack may come before the second message: the worker can start the
    # turn before the second post commits. (60 s: a fresh stack's first turn
    # on a machine with two busy loops beside it.)
    next(
        e
        for e in client.sessions.watch(s.id, after=first.seq, timeout=60)
        if e.type == "ack" and e.job_id == first.job_id
    )
    assert client.jobs.get(first.job_id or "").status is chaz.JobStatus.RUNNING
    assert client.jobs.get(second.job_id or "").status is chaz.JobStatus.QUEUED
    stack.open_gate(f"go-{s.id}")
    assert client.sessions.wait_for_reply(s.id, after=first.seq, timeout=30).content == (
        "through one"
    )
    assert client.sessions.wait_for_reply(s.id, after=second.seq, timeout=30).content == (
        "through two"
    )
