"""Idempotency keys at the producer API: two scopes, and a reused key is the same request.

No workers: a turn is run in this process by the real :class:`chaz.usecases.turns.TurnRunner`,
exactly as a worker's task would run it.
"""

from __future__ import annotations

from typing import Any

import pytest

import chaz
from chaz.domain.entries import EntryType, KeyScope, NewEntry
from chaz.domain.jobs import JobStatus
from chaz.errors import IdempotencyMismatch
from chaz.usecases.turns import TurnRunner
from tests.support.stack import Stack

AGENT = chaz.AgentSpec(id="bot", script=[{"steps": [{"say": "ok"}]}])


@pytest.fixture(scope="module")
def mstack(module_stack: Stack) -> Stack:
    module_stack.client.agents.put(AGENT)
    return module_stack


@pytest.fixture
def client(mstack: Stack) -> chaz.Client:
    return mstack.client


def run_turns(client: chaz.Client, session_id: str, job_id: str) -> None:
    """Run every queued turn of the session here, as workers would.

    One wake-up keeps the lane for at most half a second of turns; on a
    loaded machine that can be one turn, so wake again until none waits.
    """
    runner = TurnRunner(client.services, client.tools)
    for _ in range(20):
        head = client.services.store.head_job(session_id)
        if head is None:
            return
        runner.wake(session_id, head.id)
    raise AssertionError(f"session {session_id} still has work after 20 wake-ups")


@pytest.mark.parametrize("suffix", ["ack", "reply", "error"])
def test_a_producer_key_cannot_take_a_runtime_key(client: chaz.Client, suffix: str) -> None:
    s = client.sessions.create("bot")
    first = client.sessions.post(s.id, "hi")
    assert first.job_id is not None
    # A key spelled like the runtime's own key for that job, from a producer.
    squatter = client.sessions.post(s.id, "again", idempotency_key=f"job:{first.job_id}:{suffix}")
    assert squatter.idempotency_key == f"job:{first.job_id}:{suffix}"
    assert squatter.job_id is not None and squatter.job_id != first.job_id

    run_turns(client, s.id, first.job_id)

    for job_id in (first.job_id, squatter.job_id):
        job = client.jobs.get(job_id)
        assert (job.status, job.result) == (JobStatus.SUCCEEDED, "ok"), job
    entries = client.sessions.entries(s.id)
    kinds = [(e.type.value, e.job_id) for e in entries]
    assert kinds == [
        ("message", first.job_id),
        ("message", squatter.job_id),
        ("ack", first.job_id),
        ("message", first.job_id),
        ("ack", squatter.job_id),
        ("message", squatter.job_id),
    ]
    # The runtime's keys are internal: a producer sees only its own.
    assert [e.idempotency_key for e in entries if e.type is EntryType.ACK] == [None, None]


def test_a_runtime_write_cannot_take_a_producer_key(client: chaz.Client) -> None:
    s = client.sessions.create("bot")
    mine = client.sessions.post(s.id, "hi", type="ack", sender="system:x", idempotency_key="k")
    store = client.services.store
    theirs = store.append(s.id, NewEntry(EntryType.ACK, "system:x", "hi", idempotency_key="k"))
    assert theirs.created and theirs.entry.id != mine.id
    assert store.find_idempotent(s.id, "k", KeyScope.USER) is not None
    again = client.sessions.post(s.id, "hi", type="ack", sender="system:x", idempotency_key="k")
    assert again.id == mine.id


SAME: dict[str, Any] = {
    "sender": "user:alice",
    "type": "message",
    "metadata": {"a": [1, 2], "b": "x"},
}


@pytest.mark.parametrize(
    ("change", "differs"),
    [
        ({"content": "bye"}, ["content"]),
        ({"sender": "user:bob"}, ["sender"]),
        ({"type": "directive"}, ["type"]),
        ({"metadata": {"a": [1, 2]}}, ["metadata"]),
        ({"metadata": None}, ["metadata"]),
        ({"content": "bye", "sender": "user:bob"}, ["sender", "content"]),
    ],
)
def test_a_reused_key_with_a_different_request_is_refused(
    client: chaz.Client, change: dict[str, Any], differs: list[str]
) -> None:
    s = client.sessions.create("bot")
    first = client.sessions.post(s.id, "hi", idempotency_key="click", **SAME)
    request = {"content": "hi", **SAME, **change}
    content = request.pop("content")
    with pytest.raises(IdempotencyMismatch) as info:
        client.sessions.post(s.id, content, idempotency_key="click", **request)
    err = info.value
    assert err.code == "conflict.idempotency_mismatch"
    assert err.details["differs"] == differs
    assert err.details["entry_id"] == first.id
    # Nothing was written, no job admitted.
    assert [e.id for e in client.sessions.entries(s.id)] == [first.id]
    assert len(client.jobs.list(session_id=s.id)) == 1


def test_the_same_request_retried_returns_the_first_entry(client: chaz.Client) -> None:
    s = client.sessions.create("bot")
    first = client.sessions.post(s.id, "hi", idempotency_key="click", **SAME)
    # Tuples are stored as JSON lists: the same request.
    again = client.sessions.post(
        s.id, "hi", idempotency_key="click", **{**SAME, "metadata": {"b": "x", "a": (1, 2)}}
    )
    assert again == first
    assert len(client.sessions.entries(s.id)) == 1
    assert len(client.jobs.list(session_id=s.id)) == 1
