"""Admission quotas against real Redis and a real database, with no workers running."""

from __future__ import annotations

import uuid
from typing import TypeVar, cast

import pytest

import chaz
from chaz.coord import keys
from chaz.domain.entries import EntryType
from chaz.domain.jobs import JobStatus
from chaz.errors import JobsExhausted, QueueFull, QuotaError
from chaz.usecases import completion
from tests.support.concurrency import race
from tests.support.stack import Stack

T = TypeVar("T")

AGENT = chaz.AgentSpec(id="bot", script=[{"steps": [{"say": "ok"}]}])


@pytest.fixture(scope="module")
def mstack(module_stack: Stack) -> Stack:
    module_stack.client.agents.put(AGENT)
    return module_stack


@pytest.fixture
def client(mstack: Stack) -> chaz.Client:
    return mstack.client


def counters(client: chaz.Client, sid: str) -> tuple[int | None, int | None]:
    r = client.services.redis
    q, c = r.get(keys.queued(sid)), r.get(keys.cumulative(sid))
    return (None if q is None else int(q), None if c is None else int(c))


def jobs(client: chaz.Client, sid: str) -> list[chaz.Job]:
    return client.jobs.list(session_id=sid, limit=1000)


def test_fifty_concurrent_posts_against_a_queue_of_five(client: chaz.Client) -> None:
    s = client.sessions.create("bot", limits=chaz.Limits(max_queued_per_session=5))
    results = race(50, lambda i: client.sessions.post(s.id, f"msg {i}", sender=f"user:u{i}"))

    admitted = [r for r in results if isinstance(r, chaz.Entry)]
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(admitted) == 5, refused[:3]
    assert len(refused) == 45
    for exc in refused:
        assert isinstance(exc, QueueFull), repr(exc)
        assert exc.code == "quota.queue_full"
        assert exc.retryable is True
        assert exc.details["limit"] == 5

    entries = client.sessions.entries(s.id)
    assert len(entries) == 5
    assert all(e.type is EntryType.MESSAGE for e in entries)
    assert sorted(e.seq for e in entries) == [1, 2, 3, 4, 5]
    assert {e.id for e in entries} == {e.id for e in admitted}
    js = jobs(client, s.id)
    assert len(js) == 5
    assert all(j.status is JobStatus.QUEUED for j in js)
    assert {j.trigger_entry_id for j in js} == {e.id for e in entries}
    assert counters(client, s.id) == (5, 5)
    assert client.services.redis.get(f"chaz:q:{s.id}") == "5"
    assert client.sessions.get(s.id).last_seq == 5


def test_cumulative_jobs_are_exhausted_and_the_refusal_leaves_nothing(
    client: chaz.Client,
) -> None:
    s = client.sessions.create("bot", limits=chaz.Limits(max_jobs_per_session=3))
    for i in range(3):
        client.sessions.post(s.id, f"job {i}")
    with pytest.raises(JobsExhausted) as info:
        client.sessions.post(s.id, "one too many")
    assert info.value.code == "quota.jobs_exhausted"
    assert info.value.retryable is False
    assert isinstance(info.value, QuotaError)
    assert [e.content for e in client.sessions.entries(s.id)] == ["job 0", "job 1", "job 2"]
    assert len(jobs(client, s.id)) == 3
    assert counters(client, s.id) == (3, 3)
    assert client.sessions.get(s.id).last_seq == 3
    # A Directive is refused the same way: the allowance counts jobs, not messages.
    with pytest.raises(JobsExhausted):
        client.sessions.post(s.id, "do it", sender="agent:bot", type="directive")
    assert len(client.sessions.entries(s.id)) == 3


def test_cumulative_allowance_never_refills(client: chaz.Client) -> None:
    s = client.sessions.create("bot", limits=chaz.Limits(max_jobs_per_session=2))
    for i in range(2):
        client.sessions.post(s.id, f"job {i}")
    # Cancel both queued jobs (they leave the queue, but were admitted).
    for job in jobs(client, s.id):
        client.services.store.transition(job.id, JobStatus.CANCELLED, completion=completion.ended)
        client.services.quotas.dequeued(s.id, s.project)
    assert counters(client, s.id) == (0, 2)
    with pytest.raises(JobsExhausted):
        client.sessions.post(s.id, "again")
    # Even with the counters gone, the database says two were admitted.
    client.services.redis.delete(keys.queued(s.id), keys.cumulative(s.id))
    with pytest.raises(JobsExhausted):
        client.sessions.post(s.id, "again")
    assert counters(client, s.id) == (0, 2)
    assert len(client.sessions.entries(s.id)) == 2


def test_non_admitting_entries_are_never_refused(client: chaz.Client) -> None:
    s = client.sessions.create(
        "bot", limits=chaz.Limits(max_queued_per_session=1, max_jobs_per_session=1)
    )
    client.sessions.post(s.id, "the only job")
    with pytest.raises(QuotaError):
        client.sessions.post(s.id, "second")
    written = [
        client.sessions.post(s.id, "working", sender="system:worker", type="ack"),
        client.sessions.post(s.id, "my reply", sender="agent:bot"),
        client.sessions.post(s.id, "42", sender="system:t", type="tool_result"),
        client.sessions.post(s.id, "{}", sender="agent:bot", type="tool_call"),
        client.sessions.post(s.id, "oops", sender="system:worker", type="error"),
        client.sessions.post(s.id, "so far", sender="system:compact", type="summary"),
        client.sessions.post(s.id, "may I?", sender="agent:bot", type="approval_request"),
        client.sessions.post(s.id, "yes", sender="user:alice", type="approval_decision"),
    ]
    assert [e.seq for e in written] == list(range(2, 10))
    assert all(e.job_id is None for e in written)
    assert len(jobs(client, s.id)) == 1
    assert counters(client, s.id) == (1, 1)


def test_a_post_asks_the_processing_rule_once(
    client: chaz.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = client.sessions.create("bot", name=f"asked-{uuid.uuid4().hex[:8]}")
    store = client.services.store
    asked: list[str] = []
    rule = store.admits

    def admits(type: EntryType, sender: str) -> bool:
        asked.append(sender)
        return rule(type, sender)

    monkeypatch.setattr(store, "admits", admits)
    first = client.sessions.post(s.id, "a person's message")
    reply = client.sessions.post(s.id, "the agent's own", sender="agent:bot")
    keyed = client.sessions.post(s.id, "once", idempotency_key="asked-once")
    by_name = client.sessions.post(str(s.name), "by its name")
    # One question per post, whether it admits a turn or not, with a key or by name.
    assert asked == ["user:you", "agent:bot", "user:you", "user:you"]
    assert first.job_id is not None and keyed.job_id is not None
    assert by_name.job_id is not None and reply.job_id is None
    assert len(jobs(client, s.id)) == 3


def test_missing_counters_are_rebuilt_from_the_database(client: chaz.Client) -> None:
    s = client.sessions.create("bot", limits=chaz.Limits(max_queued_per_session=5))
    for i in range(3):
        client.sessions.post(s.id, f"m{i}")
    assert counters(client, s.id) == (3, 3)
    client.services.redis.delete(keys.queued(s.id), keys.cumulative(s.id))
    assert counters(client, s.id) == (None, None)

    client.sessions.post(s.id, "m3")
    assert counters(client, s.id) == (4, 4)  # rebuilt as 3, then counted
    client.sessions.post(s.id, "m4")
    with pytest.raises(QueueFull):
        client.sessions.post(s.id, "m5")
    assert len(jobs(client, s.id)) == 5
    assert counters(client, s.id) == (5, 5)


def test_missing_counters_rebuilt_under_a_race(client: chaz.Client) -> None:
    s = client.sessions.create("bot", limits=chaz.Limits(max_queued_per_session=5))
    for i in range(2):
        client.sessions.post(s.id, f"m{i}")
    client.services.redis.delete(keys.queued(s.id), keys.cumulative(s.id))

    results = race(20, lambda i: client.sessions.post(s.id, f"r{i}"))
    admitted = [r for r in results if isinstance(r, chaz.Entry)]
    refused = [r for r in results if isinstance(r, BaseException)]
    assert all(isinstance(r, QueueFull) for r in refused), refused
    assert len(admitted) == 3
    assert len(jobs(client, s.id)) == 5
    assert counters(client, s.id) == (5, 5)


def test_only_one_counter_missing_is_rebuilt_too(client: chaz.Client) -> None:
    s = client.sessions.create("bot", limits=chaz.Limits(max_jobs_per_session=3))
    for i in range(3):
        client.sessions.post(s.id, f"m{i}")
    client.services.redis.delete(keys.cumulative(s.id))
    with pytest.raises(JobsExhausted):
        client.sessions.post(s.id, "m3")
    assert counters(client, s.id) == (3, 3)
    assert len(jobs(client, s.id)) == 3


def test_an_idempotent_retry_is_not_counted_twice(client: chaz.Client) -> None:
    s = client.sessions.create("bot", limits=chaz.Limits(max_queued_per_session=2))
    first = client.sessions.post(s.id, "hi", idempotency_key="click")
    results = race(10, lambda i: client.sessions.post(s.id, "hi", idempotency_key="click"))
    assert all(isinstance(r, chaz.Entry) and r.id == first.id for r in results), results
    assert counters(client, s.id) == (1, 1)
    assert len(jobs(client, s.id)) == 1
    client.sessions.post(s.id, "second")  # the retries did not use up the queue
    assert counters(client, s.id) == (2, 2)


def test_agent_limits_narrow_and_session_limits_narrow_further(client: chaz.Client) -> None:
    client.agents.put(
        chaz.AgentSpec(
            id="tight",
            script=[{"steps": [{"say": "ok"}]}],
            limits=chaz.Limits(max_queued_per_session=2),
        )
    )
    loose = client.sessions.create("tight", limits=chaz.Limits(max_queued_per_session=10))
    tighter = client.sessions.create("tight", limits=chaz.Limits(max_queued_per_session=1))
    for sid, allowed in ((loose.id, 2), (tighter.id, 1)):

        def post(i: int, sid: str = sid) -> chaz.Entry:
            return client.sessions.post(sid, f"m{i}")

        results = race(6, post)
        assert sum(isinstance(r, chaz.Entry) for r in results) == allowed
        assert all(isinstance(r, (chaz.Entry, QueueFull)) for r in results), results


def test_concurrent_retries_of_one_key_all_get_the_first_entry(client: chaz.Client) -> None:
    s = client.sessions.create("bot", limits=chaz.Limits(max_queued_per_session=1))
    results = race(20, lambda i: client.sessions.post(s.id, "hi", idempotency_key="dbl"))
    # Whatever happens, the database and the counters are right...
    assert len(client.sessions.entries(s.id)) == 1
    assert counters(client, s.id) == (1, 1)
    # ...but every retry should be answered with the one admitted entry.
    assert all(isinstance(r, chaz.Entry) for r in results), [type(r).__name__ for r in results]
    assert len({r.id for r in results if isinstance(r, chaz.Entry)}) == 1


def _ended(
    client: chaz.Client, job: chaz.Job, token: str, keep: bool
) -> tuple[bool, int | None, str | None]:
    end = client.services.signals.ended(
        job, token, None, finished=True, free_slot=True, keep_if_queued=keep
    )
    holder = cast("str | None", client.services.redis.get(keys.lane(job.session_id)))
    return end.kept, end.queued, holder


def test_a_turns_end_keeps_the_lane_only_when_jobs_wait_and_it_is_ours(
    client: chaz.Client,
) -> None:
    svc = client.services
    sid = client.sessions.create("bot").id
    first = client.jobs.get(client.sessions.post(sid, "one").job_id or "")
    token = svc.lanes.acquire(sid, first.id, 30, project="default")
    assert token is not None
    svc.redis.pexpire(keys.lane(sid), 500)  # nearly spent: a kept lane is renewed
    svc.store.start_turn(first.id, token)
    svc.signals.started(first, None, dequeued=True)

    # Nothing waits: released even when the caller would keep it.
    assert _ended(client, first, token, keep=True) == (False, 0, None)

    token = svc.lanes.acquire(sid, first.id, 30, project="default")
    assert token is not None
    svc.redis.pexpire(keys.lane(sid), 500)
    client.sessions.post(sid, "two")  # one job waits now
    kept, queued, holder = _ended(client, first, token, keep=True)
    assert (kept, queued) == (True, 1)
    assert holder is not None and holder.startswith(token)
    assert svc.redis.pttl(keys.lane(sid)) > 1000  # renewed to the full lease
    # A caller that may not keep it (its budget is spent) releases it.
    assert _ended(client, first, token, keep=False) == (False, 1, None)

    # Not ours any more (taken over after an expiry): left alone, never kept.
    other = svc.lanes.acquire(sid, first.id, 30, project="default")
    assert other is not None
    kept, _, holder = _ended(client, first, token, keep=True)
    assert not kept and holder is not None and holder.startswith(other)

    # A flushed counter reads as unknown, and the lane is released.
    svc.redis.delete(keys.queued(sid))
    assert _ended(client, first, other, keep=True) == (False, None, None)
