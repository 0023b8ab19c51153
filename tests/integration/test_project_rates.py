"""A project's rate limit: turns admitted per minute, a token bucket inside the
admission script (docs/security.md#project-quotas,
docs/coordination.md#a-projects-rate-the-token-bucket).

Every test runs on both stacks. Tests without workers share one stack per
module and work in projects of their own; the isolation test runs real
workers on a fresh stack.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import chaz
from chaz.coord import keys, scripts
from chaz.domain.deliveries import DeliveryState
from chaz.domain.entries import EntryType, agent_sender
from chaz.domain.jobs import JobStatus
from chaz.errors import ProjectLiveExceeded, ProjectRateExceeded, ValidationError
from chaz.settings import Settings
from chaz.usecases import admission
from chaz.usecases import projects as project_cases
from tests.support.concurrency import race
from tests.support.project_fixtures import BOT
from tests.support.projects import session_in
from tests.support.stack import Stack

#: The shared fixtures: ``mstack``, ``project`` and ``client``.
pytest_plugins = ["tests.support.project_fixtures"]
ECHO = chaz.AgentSpec(id="echo", script=[{"steps": [{"say": "{input}"}]}])


def set_rate(client: chaz.Client, project: str, rate: int | None, **limits: Any) -> chaz.Project:
    """Set the project's limits through the use case (the client gains the field
    when it is wired; its ``set_limits`` passes the other two through)."""
    return project_cases.set_limits(client.services, project, turns_per_minute=rate, **limits)


def counters(client: chaz.Client, project: str, session_ids: list[str]) -> tuple[Any, ...]:
    """Every Redis key an admission may write for these sessions and the project."""
    r = client.services.redis
    per_session = [(r.get(keys.queued(s)), r.get(keys.cumulative(s))) for s in session_ids]
    return (
        per_session,
        r.zrange(keys.project_live(project), 0, -1),
        r.get(keys.project_jobs(project)),
        r.hgetall(keys.project_rate(project)),
    )


def rows(client: chaz.Client, session_ids: list[str]) -> list[tuple[int, int, int]]:
    """Each session's entries, jobs and last seq, from the database."""
    return [
        (
            len(client.sessions.entries(s)),
            len(client.jobs.list(session_id=s, limit=1000)),
            client.sessions.get(s).last_seq,
        )
        for s in session_ids
    ]


def written(client: chaz.Client, project: str, session_ids: list[str]) -> tuple[Any, ...]:
    """What an admission writes that the workers running earlier turns do not
    touch: each session's jobs, its Messages from people and its cumulative
    counter, the project's cumulative counter and its rate bucket."""
    r = client.services.redis
    posted = [
        sum(1 for e in client.sessions.entries(s) if e.sender.startswith("user:"))
        for s in session_ids
    ]
    jobs = [len(client.jobs.list(session_id=s, limit=1000)) for s in session_ids]
    cumulative = [r.get(keys.cumulative(s)) for s in session_ids]
    bucket = r.hgetall(keys.project_rate(project))
    return posted, jobs, cumulative, r.get(keys.project_jobs(project)), bucket


def tokens(client: chaz.Client, project: str) -> float | None:
    """The tokens the bucket held when it was last written (None: no bucket)."""
    value = client.services.redis.hget(keys.project_rate(project), "tokens")
    return None if value is None else float(value)


# -- the limit: stored, in force, validated -------------------------------------------


def test_the_rate_is_stored_shown_and_defaults_to_the_setting(
    client: chaz.Client, project: str
) -> None:
    shown = set_rate(client, project, 30, max_live=5)
    assert (shown.turns_per_minute, shown.effective_turns_per_minute) == (30, 30)
    assert (shown.max_live, shown.max_jobs) == (5, None)
    # The client's set_limits passes its two limits through; a rate left out
    # is set to its default, like every limit set_limits is not given.
    shown = client.projects.set_limits(project, max_live=5)
    assert (shown.turns_per_minute, shown.effective_turns_per_minute) == (None, None)
    settings = client.settings.model_copy(update={"project_turns_per_minute": 12})
    with chaz.Client(settings, migrate=False, project=project) as c:
        assert c.projects.get(project).effective_turns_per_minute == 12
        shown = set_rate(c, project, -1)
        assert (shown.turns_per_minute, shown.effective_turns_per_minute) == (-1, None)


@pytest.mark.parametrize("value", [-2, 0, "5", True, 1.5, 1_000_001, 2**40])
def test_a_bad_rate_is_request_invalid_naming_its_field(
    client: chaz.Client, project: str, value: object
) -> None:
    with pytest.raises(ValidationError) as info:
        set_rate(client, project, value)  # type: ignore[arg-type]
    assert info.value.code == "request.invalid"
    assert info.value.details["field"] == "turns_per_minute"
    assert client.projects.get(project).created_at is None


def test_a_zero_default_rate_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="project_turns_per_minute"):
        Settings(_env_file=None, project_turns_per_minute=0)


# -- refusals: the code, retry_after, and nothing written --------------------------------


def test_past_its_rate_a_project_is_refused_with_retry_after_and_nothing_is_written(
    client: chaz.Client, project: str
) -> None:
    set_rate(client, project, 3)
    s, t = session_in(client, "bot", project), session_in(client, "bot", project)
    for i in range(3):  # the burst: one minute's worth
        client.sessions.post((s if i % 2 else t).id, f"m{i}")
    ids = [s.id, t.id]
    before = (rows(client, ids), counters(client, project, ids))
    with pytest.raises(ProjectRateExceeded) as info:
        client.sessions.post(s.id, "one too many")
    exc = info.value
    assert exc.code == "quota.project_rate"
    assert exc.retryable is True
    assert exc.details["project"] == project and exc.details["limit"] == 3
    # One token a 20 s; at most that long, and never nothing.
    assert isinstance(exc.details["retry_after"], float)
    assert 0 < exc.details["retry_after"] <= 20
    assert exc.to_dict()["details"]["retry_after"] == exc.details["retry_after"]
    assert (rows(client, ids), counters(client, project, ids)) == before


@contextlib.contextmanager
def _write_locked(mstack: Stack, session_id: str) -> Iterator[None]:
    """Hold what an admission's transaction must take first: on SQLite the
    database's write lock, on PostgreSQL the session row's lock."""
    url = mstack.settings.effective_database_url()
    conn: Any
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
    else:
        conn = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"))
        conn.execute("SELECT id FROM sessions WHERE id = %s FOR UPDATE", (session_id,))
    try:
        yield
    finally:
        conn.rollback()
        conn.close()


def test_a_refusal_by_the_rate_takes_no_write_lock(
    mstack: Stack, client: chaz.Client, project: str
) -> None:
    # A project past its rate is refused before its admission's transaction:
    # its refusals never queue on (and never hold) the lock that every other
    # admission needs (on SQLite, one lock for the whole install).
    set_rate(client, project, 1)
    s = session_in(client, "bot", project)
    client.sessions.post(s.id, "the burst")
    outcome: list[BaseException | chaz.Entry] = []

    def post() -> None:
        try:
            outcome.append(client.sessions.post(s.id, "one too many"))
        except BaseException as exc:
            outcome.append(exc)

    with _write_locked(mstack, s.id):
        poster = threading.Thread(target=post)
        poster.start()
        # Without the check before the transaction the post would wait on
        # the lock held here, for as long as it is held.
        poster.join(timeout=30)
        answered_while_locked = not poster.is_alive()
    poster.join()
    assert answered_while_locked, outcome
    [refused] = outcome
    assert isinstance(refused, ProjectRateExceeded), refused
    assert 0 < refused.details["retry_after"] <= 60 and refused.details["limit"] == 1


def test_fifty_concurrent_admissions_against_a_rate_admit_exactly_its_burst(
    client: chaz.Client, project: str
) -> None:
    set_rate(client, project, 5)
    sessions = [session_in(client, "bot", project) for _ in range(50)]
    results = race(50, lambda i: client.sessions.post(sessions[i].id, f"m{i}"))
    admitted = [r for r in results if isinstance(r, chaz.Entry)]
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(admitted) == 5, refused[:3]
    assert all(isinstance(e, ProjectRateExceeded) for e in refused), refused[:3]
    assert sum(len(client.sessions.entries(s.id)) for s in sessions) == 5


def test_another_quotas_refusal_spends_no_token(client: chaz.Client, project: str) -> None:
    set_rate(client, project, 10, max_live=1)
    s, t = session_in(client, "bot", project), session_in(client, "bot", project)
    client.sessions.post(s.id, "takes the one live slot")
    bucket = client.services.redis.hgetall(keys.project_rate(project))
    assert float(bucket["tokens"]) == pytest.approx(9, abs=0.1)
    with pytest.raises(ProjectLiveExceeded):
        client.sessions.post(t.id, "refused by max_live")
    assert client.services.redis.hgetall(keys.project_rate(project)) == bucket


def test_a_refunded_reservation_gives_its_token_back(client: chaz.Client, project: str) -> None:
    set_rate(client, project, 1)
    s = session_in(client, "bot", project)

    def boom(tx: object) -> None:
        raise RuntimeError("the insert failed after the reservation")

    with pytest.raises(RuntimeError):
        admission.transact(client.services, s.id, boom, lambda: None)
    assert tokens(client, project) == pytest.approx(1, abs=0.01)
    # The one token of the minute is there for the next admission.
    client.sessions.post(s.id, "admitted")
    with pytest.raises(ProjectRateExceeded):
        client.sessions.post(s.id, "and that was the minute's one")


def test_a_missing_bucket_is_full(client: chaz.Client, project: str) -> None:
    set_rate(client, project, 2)
    s = session_in(client, "bot", project)
    client.sessions.post(s.id, "1")
    client.sessions.post(s.id, "2")
    with pytest.raises(ProjectRateExceeded):
        client.sessions.post(s.id, "empty")
    # A flush or a new Redis: the bucket starts full (one extra minute's burst).
    client.services.redis.delete(keys.project_rate(project))
    client.sessions.post(s.id, "3")
    client.sessions.post(s.id, "4")
    with pytest.raises(ProjectRateExceeded):
        client.sessions.post(s.id, "empty again")


def test_the_bucket_refills_on_the_redis_clock_and_expires_once_full(
    client: chaz.Client, project: str
) -> None:
    r = client.services.redis
    reserve = scripts.register(r, "reserve")
    sid = f"s-{project}"
    ks = [keys.queued(sid), keys.cumulative(sid), keys.project_live(project)]
    ks += [keys.project_jobs(project), keys.project_rate(project), keys.project_tokens(project)]
    r.set(ks[0], 0)
    r.set(ks[1], 0)
    r.zadd(ks[2], {"_": 0})
    r.set(ks[3], 0)

    def run(rate: int, job: str) -> Any:
        return reserve(keys=ks, args=[-1, -1, 60_000, -1, -1, job, rate, -1])

    assert run(60, "j1") == "ok"  # a missing bucket is full: 59 left
    assert 0 < r.pttl(ks[4]) <= 1_001 + 1  # full again in one second (one token a second)
    # Empty it, as of one second ago (Redis clock): one token has come back.
    now_s, now_us = r.time()
    now_ms = now_s * 1000 + now_us / 1000
    r.hset(ks[4], mapping={"tokens": 0, "at": now_ms - 1000, "cap": 60})
    assert run(60, "j2") == "ok"
    answer = run(60, "j3")
    assert answer[0] == "project_rate" and 0 < int(answer[1]) <= 1000
    assert r.zcard(ks[2]) == 3  # the sentinel, j1 and j2: j3 counted nothing


# -- isolation: one noisy project does not hold back another ----------------------------


@pytest.mark.fleet
def test_a_project_driven_at_ten_times_its_rate_does_not_hold_back_another(
    stack: Stack, request: pytest.FixtureRequest
) -> None:
    stack.client.agents.put(ECHO)
    stack.workers(1)
    noisy, quiet = f"noisy{uuid.uuid4().hex[:8]}", f"quiet{uuid.uuid4().hex[:8]}"
    a = chaz.Client(stack.settings, migrate=False, project=noisy)
    request.addfinalizer(a.close)
    b = chaz.Client(stack.settings, migrate=False, project=quiet)
    request.addfinalizer(b.close)
    rate = 6
    set_rate(a, noisy, rate)
    set_rate(b, quiet, rate * 100)
    a_sessions = [session_in(a, "echo", noisy) for _ in range(10)]
    b_session = session_in(b, "echo", quiet)

    # A's whole minute's worth ten times over, as fast as one producer posts
    # (seconds, so at least ten times its rate), B's messages in between.
    started = time.monotonic()
    a_results: list[chaz.Entry | ProjectRateExceeded] = []
    b_entries: list[chaz.Entry] = []
    for i in range(rate * 10):
        sid = a_sessions[i % len(a_sessions)].id
        ids = [s.id for s in a_sessions]
        before = written(a, noisy, ids)
        try:
            a_results.append(a.sessions.post(sid, f"a{i}"))
        except ProjectRateExceeded as exc:
            a_results.append(exc)
            # A refusal writes nothing, in the database or in Redis (a
            # session's missing counter may have been seeded from the
            # database, at zero: it has no job yet).
            after = written(a, noisy, ids)
            assert after[:2] == before[:2] and after[3:] == before[3:]
            assert all(
                new == old or (old is None and new == "0")
                for old, new in zip(before[2], after[2], strict=True)
            )
        if i % 3 == 0:
            b_entries.append(b.sessions.post(b_session.id, f"b{i}"))

    elapsed = time.monotonic() - started
    refused = [r for r in a_results if isinstance(r, ProjectRateExceeded)]
    # The burst, and what refilled while the loop ran (one token per 60/rate s).
    # A loop slowed by a busy machine only refills more: the bounds follow
    # the time it took rather than assume it (CI once took over a minute).
    refilled = int(elapsed * rate / 60) + 1
    assert rate <= len(a_results) - len(refused) <= rate + refilled
    assert len(refused) >= rate * 10 - rate - refilled
    assert all(e.code == "quota.project_rate" and e.details["retry_after"] > 0 for e in refused)
    # Every one of B's admissions passed, and its turns ran, in admission order.
    assert len(b_entries) == 20 and all(e.job_id for e in b_entries)
    for e in b_entries:
        assert b.jobs.wait(e.job_id or "", timeout=60).status is JobStatus.SUCCEEDED
    replies = [
        e
        for e in b.sessions.entries(b_session.id)
        if e.type is EntryType.MESSAGE and e.sender == agent_sender(ECHO.id)
    ]
    assert [e.job_id for e in replies] == [e.job_id for e in b_entries]
    assert [e.content for e in replies] == [e.content for e in b_entries]
    # A's refused admissions left no job behind.
    a_jobs = [j for s in a_sessions for j in a.jobs.list(session_id=s.id, limit=100)]
    assert len(a_jobs) == len(a_results) - len(refused)


@pytest.mark.fleet
def test_a_delivery_refused_by_the_rate_waits_in_the_inbox_instead_of_failing(
    stack: Stack,
) -> None:
    stack.housekeeper()  # beat: the reconciler's sweep retries the inbox
    stack.workers(1, concurrency=4)
    client = stack.client
    client.agents.put(BOT)
    client.agents.put(
        chaz.AgentSpec(
            id="target",
            script=[
                {"match": "^hold", "steps": [{"wait": "hold", "timeout": 120}, {"say": "held"}]},
                {"steps": [{"say": "got it"}]},
            ],
        )
    )
    client.agents.put(
        chaz.AgentSpec(
            id="sender",
            tools=["send_message"],
            script=[
                {
                    "match": "^send",
                    "steps": [
                        {"call": "send_message", "args": {"to": "the-target", "message": "hi"}},
                        {"say": "{last_result}"},
                    ],
                },
                {"steps": [{"say": "ok"}]},
            ],
        )
    )
    project = client.sessions.create("bot").project
    set_rate(client, project, 6)  # one token every 10 s
    target = client.sessions.create("target", name="the-target")
    sender = client.sessions.create("sender")
    held = client.sessions.post(target.id, "hold", sender="user:tester")
    stack.wait_for(
        lambda: client.jobs.get(held.job_id or "").status is JobStatus.RUNNING, 60, "the hold"
    )
    posted = client.sessions.post(sender.id, "send", sender="user:tester")
    reply = client.sessions.wait_for_reply(sender.id, after=posted.seq, timeout=60)
    delivery_id = json.loads(reply.content)["delivery_id"]
    burner = client.sessions.create("bot")
    with pytest.raises(ProjectRateExceeded):
        for i in range(6):  # spend what is left of the burst
            client.sessions.post(burner.id, f"burn {i}")
    # The target goes idle with the project's bucket empty: the message is
    # not admitted yet, and it is not failed for that.
    stack.open_gate("hold")
    client.jobs.wait(held.job_id or "", timeout=60)
    assert client.deliveries.get(delivery_id).state is DeliveryState.ACCEPTED
    # A token comes back within 10 s; the sweep admits it then.
    stack.wait_for(
        lambda: client.deliveries.get(delivery_id).state is DeliveryState.DONE,
        60,
        "the message to be admitted and answered",
    )
    assert not [e for e in client.sessions.entries(sender.id) if e.type is EntryType.NOTICE]


# -- tokens per minute: a bucket of model tokens, debited as turns report usage ------


def test_a_project_in_token_debt_is_refused_until_the_refill_pays_it(
    mstack: Stack, client: chaz.Client, project: str
) -> None:
    shown = client.projects.set_limits(project, tokens_per_minute=600)
    assert (shown.tokens_per_minute, shown.effective_tokens_per_minute) == (600, 600)
    s = session_in(client, "bot", project)
    client.sessions.post(s.id, "first")  # the admission writes the bucket, full
    quotas = client.services.quotas
    # What the first turn reported: 1,500 tokens, 900 past the bucket.
    left = quotas.debit_tokens(project, 1500)
    assert left is not None and -900 <= left < -899
    ids = [s.id]
    before = (rows(client, ids), counters(client, project, ids))
    with pytest.raises(ProjectRateExceeded) as info:
        client.sessions.post(s.id, "in debt")
    exc = info.value
    assert exc.code == "quota.project_rate" and exc.details["rate"] == "tokens_per_minute"
    assert exc.details["limit"] == 600
    # 900 tokens at 10 a second: about 90 s to pay back, never nothing.
    assert 85 < exc.details["retry_after"] <= 90
    assert (rows(client, ids), counters(client, project, ids)) == before
    # Refused the same inside the transaction (a turn's admission does not peek).
    with pytest.raises(ProjectRateExceeded):
        admission.admit(
            client.services, s.id, chaz.domain.entries.NewEntry(EntryType.MESSAGE, "user:a", "x")
        )
    # Paid back (the bucket rewritten as if 90 s had passed): admitted again.
    r = client.services.redis
    r.hset(keys.project_tokens(project), mapping={"tokens": 0})
    client.sessions.post(s.id, "paid")


def test_a_project_without_a_token_rate_keeps_no_token_bucket(
    client: chaz.Client, project: str
) -> None:
    s = session_in(client, "bot", project)
    client.sessions.post(s.id, "hi")
    assert client.services.quotas.debit_tokens(project, 10_000) is None
    assert not client.services.redis.exists(keys.project_tokens(project))
    client.sessions.post(s.id, "again")


def test_a_bad_token_rate_is_request_invalid_naming_its_field(
    client: chaz.Client, project: str
) -> None:
    for bad in (0, -2, "10", 2**31):
        with pytest.raises(ValidationError) as info:
            client.projects.set_limits(project, tokens_per_minute=bad)  # type: ignore[arg-type]
        assert info.value.field == "tokens_per_minute"
