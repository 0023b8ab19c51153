"""Per-project quotas: live turns and turns ever admitted, enforced by the
admission script with the session quotas (docs/security.md#project-quotas).

Every test runs on both stacks. Tests without workers share one stack per
module and work in projects of their own; tests that run turns get a fresh
stack with real workers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator

import pytest

import chaz
from chaz.client.admin import Projects
from chaz.coord import keys, scripts
from chaz.domain.jobs import JobStatus
from chaz.domain.principals import Principal
from chaz.domain.projects import resolve_project_limits
from chaz.errors import (
    Forbidden,
    ProjectJobsExhausted,
    ProjectLiveExceeded,
    QueueFull,
    QuotaError,
    ValidationError,
)
from chaz.services import Services
from chaz.settings import Settings
from chaz.stack import settings_env
from chaz.usecases import admission, completion
from chaz.usecases.reconcile import Reconciler
from chaz.usecases.turns import MAX_ATTEMPTS, TurnRunner
from tests.support.cli import run_in_process
from tests.support.concurrency import race
from tests.support.dispatch import RecordingDispatcher
from tests.support.projects import jobs_counter, live_members, session_in
from tests.support.stack import Stack

#: The shared fixtures: ``mstack``, ``project`` and ``client``.
pytest_plugins = ["tests.support.project_fixtures"]
#: Holds at its session's gate; the tool call after it is a step boundary,
#: where a cancel takes effect.
GATED = chaz.AgentSpec(
    id="gated",
    tools=["clock"],
    script=[
        {
            "steps": [
                {"wait": "go-{session_id}", "timeout": 300},
                {"call": "clock"},
                {"say": "done"},
            ]
        }
    ],
)

#: Every echo call waits for a person's decision; a "quick" message just echoes.
CAREFUL = chaz.AgentSpec(
    id="careful",
    tools=["echo"],
    script=[
        {"match": "^quick", "steps": [{"echo": True}]},
        {"steps": [{"call": "echo", "args": {"text": "{input}"}}, {"say": "after"}]},
    ],
    tool_policies={"echo": {"approval": "always", "timeout": 300}},
)


@pytest.fixture
def quiet(mstack: Stack) -> Iterator[Services]:
    """Services whose wake-ups go nowhere, for reconciler passes."""
    services = Services(mstack.settings)
    services.__dict__["dispatcher"] = RecordingDispatcher()
    yield services
    services.close()


def freed(stack: Stack, project: str) -> None:
    """Wait until the project's live set is empty: a turn's end reaches Redis
    just after its commit, which is what ``jobs.wait`` sees."""
    stack.wait_for(lambda: live_members(stack.client, project) == set(), 30, "the freed slot")


def _jobs(client: chaz.Client, session_id: str) -> list[chaz.Job]:
    return client.jobs.list(session_id=session_id, limit=100)


# -- exactness under concurrency ------------------------------------------------


def test_fifty_concurrent_admissions_into_fifty_sessions_admit_exactly_max_live(
    client: chaz.Client, project: str
) -> None:
    client.projects.set_limits(project, max_live=5)
    sessions = [session_in(client, "bot", project) for _ in range(50)]
    results = race(50, lambda i: client.sessions.post(sessions[i].id, f"m{i}"))

    admitted = [i for i, r in enumerate(results) if isinstance(r, chaz.Entry)]
    refused = [i for i, r in enumerate(results) if isinstance(r, BaseException)]
    assert len(admitted) == 5, [results[i] for i in refused[:3]]
    for i in refused:
        exc = results[i]
        assert isinstance(exc, ProjectLiveExceeded), repr(exc)
        assert exc.code == "quota.project_live"
        assert exc.retryable is True
        assert exc.details == {"project": project, "limit": 5}
        # A refused admission writes nothing.
        assert client.sessions.entries(sessions[i].id) == []
        assert _jobs(client, sessions[i].id) == []
        assert client.sessions.get(sessions[i].id).last_seq == 0
    live = {j.id for i in admitted for j in _jobs(client, sessions[i].id)}
    assert len(live) == 5
    assert live_members(client, project) == live
    assert jobs_counter(client, project) == 5
    shown = client.projects.get(project)
    assert (shown.live, shown.jobs, shown.max_live, shown.effective_max_live) == (5, 5, 5, 5)


def test_fifty_concurrent_admissions_against_max_jobs_admit_exactly_five(
    client: chaz.Client, project: str
) -> None:
    client.projects.set_limits(project, max_jobs=5)
    sessions = [session_in(client, "bot", project) for _ in range(50)]
    results = race(50, lambda i: client.sessions.post(sessions[i].id, f"m{i}"))

    admitted = [r for r in results if isinstance(r, chaz.Entry)]
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(admitted) == 5, refused[:3]
    for exc in refused:
        assert isinstance(exc, ProjectJobsExhausted), repr(exc)
        assert exc.code == "quota.project_jobs"
        assert exc.retryable is False
    assert sum(len(_jobs(client, s.id)) for s in sessions) == 5
    assert sum(len(client.sessions.entries(s.id)) for s in sessions) == 5
    assert jobs_counter(client, project) == 5


# -- the live count goes down when a job ends ------------------------------------


def test_cancelling_a_queued_job_frees_its_slot(client: chaz.Client, project: str) -> None:
    client.projects.set_limits(project, max_live=1)
    s1, s2 = session_in(client, "bot", project), session_in(client, "bot", project)
    first = client.sessions.post(s1.id, "first")
    with pytest.raises(ProjectLiveExceeded):
        client.sessions.post(s2.id, "refused")
    assert first.job_id is not None
    client.jobs.cancel(first.job_id)
    assert live_members(client, project) == set()
    second = client.sessions.post(s2.id, "admitted now")
    assert live_members(client, project) == {second.job_id}
    # A second cancel of the same job changes nothing: the slot went once.
    client.jobs.cancel(first.job_id)
    assert live_members(client, project) == {second.job_id}
    assert jobs_counter(client, project) == 2


def test_the_cumulative_quota_never_refills(client: chaz.Client, project: str) -> None:
    client.projects.set_limits(project, max_jobs=2)
    sessions = [session_in(client, "bot", project) for _ in range(3)]
    for s in sessions[:2]:
        entry = client.sessions.post(s.id, "spend")
        assert entry.job_id is not None
        client.jobs.cancel(entry.job_id)
    assert live_members(client, project) == set()
    with pytest.raises(ProjectJobsExhausted) as info:
        client.sessions.post(sessions[2].id, "none left")
    assert info.value.details == {"project": project, "limit": 2}
    # Not even once its counter is lost: it is rebuilt from all the project's jobs.
    client.services.redis.delete(keys.project_jobs(project))
    with pytest.raises(ProjectJobsExhausted):
        client.sessions.post(sessions[2].id, "still none")
    assert jobs_counter(client, project) == 2
    # Raising the limit lets it admit again.
    client.projects.set_limits(project, max_jobs=3)
    client.sessions.post(sessions[2].id, "one more")


def test_lost_project_keys_are_rebuilt_from_the_database(client: chaz.Client, project: str) -> None:
    client.projects.set_limits(project, max_live=2)
    s1, s2, s3 = (session_in(client, "bot", project) for _ in range(3))
    posted = [client.sessions.post(s.id, "x") for s in (s1, s2)]
    ids = {e.job_id for e in posted}
    r = client.services.redis
    r.delete(keys.project_live(project), keys.project_jobs(project))
    # A missing set is never read as empty: the two unfinished jobs still count.
    with pytest.raises(ProjectLiveExceeded):
        client.sessions.post(s3.id, "refused")
    assert live_members(client, project) == ids
    assert jobs_counter(client, project) == 2
    assert posted[0].job_id is not None
    client.jobs.cancel(posted[0].job_id)
    third = client.sessions.post(s3.id, "admitted")
    assert live_members(client, project) == {posted[1].job_id, third.job_id}
    assert jobs_counter(client, project) == 3


def test_a_reconciler_pass_frees_a_slot_whose_end_never_reached_redis(
    client: chaz.Client, quiet: Services, project: str
) -> None:
    client.projects.set_limits(project, max_live=1)
    s1, s2 = session_in(client, "bot", project), session_in(client, "bot", project)
    first = client.sessions.post(s1.id, "first")
    assert first.job_id is not None
    # The job ends in the database, and its process dies before telling Redis.
    client.services.store.transition(first.job_id, JobStatus.CANCELLED, completion=completion.ended)
    with pytest.raises(ProjectLiveExceeded):
        client.sessions.post(s2.id, "the slot leaked")
    # A reservation whose producer died before its commit (no job: an old
    # member), and one still under way (no job yet: a fresh member).
    r = client.services.redis
    r.zadd(keys.project_live(project), {"deadproducer": 1})
    now_ms = int(r.time()[0]) * 1000
    r.zadd(keys.project_live(project), {"underway": now_ms})

    report = Reconciler(quiet, grace_seconds=0).run()

    assert set(report.project_slots_freed) >= {first.job_id, "deadproducer"}
    assert "underway" not in report.project_slots_freed
    assert live_members(client, project) == {"underway"}
    r.zrem(keys.project_live(project), "underway")
    client.sessions.post(s2.id, "admitted after the pass")


def test_a_turn_that_ends_interrupted_after_its_workers_died_frees_its_slot(
    client: chaz.Client, quiet: Services, project: str
) -> None:
    client.projects.set_limits(project, max_live=1)
    s1, s2 = session_in(client, "bot", project), session_in(client, "bot", project)
    first = client.sessions.post(s1.id, "first")
    assert first.job_id is not None
    # Three workers started it and died (the reconciler woke it each time).
    for n in range(MAX_ATTEMPTS):
        quiet.store.start_turn(first.job_id, f"dead-worker-{n}")
    with pytest.raises(ProjectLiveExceeded):
        client.sessions.post(s2.id, "refused")
    # The next start gives up on it: the turn ends interrupted, and its end
    # frees the project's slot.
    TurnRunner(quiet, client.tools).wake(s1.id, first.job_id)
    assert client.jobs.get(first.job_id).status is JobStatus.INTERRUPTED
    assert live_members(client, project) == set()
    client.sessions.post(s2.id, "admitted")


def test_a_reservation_whose_transaction_fails_is_refunded(
    client: chaz.Client, project: str
) -> None:
    client.projects.set_limits(project, max_live=1, max_jobs=1)
    s = session_in(client, "bot", project)

    def boom(tx: object) -> None:
        raise RuntimeError("the insert failed after the reservation")

    with pytest.raises(RuntimeError):
        admission.transact(client.services, s.id, boom, lambda: None)
    assert live_members(client, project) == set()
    assert jobs_counter(client, project) == 0
    assert client.sessions.entries(s.id) == []
    # The refunded place is there for the next admission, live and cumulative.
    client.sessions.post(s.id, "admitted")


def test_a_project_at_its_limit_does_not_hold_back_another(
    client: chaz.Client, project: str
) -> None:
    other = project + "-b"
    client.projects.set_limits(project, max_live=1, max_jobs=1)
    a1, a2 = session_in(client, "bot", project), session_in(client, "bot", project)
    client.sessions.post(a1.id, "a")
    with pytest.raises(QuotaError):
        client.sessions.post(a2.id, "a again")
    sessions = [session_in(client, "bot", other) for _ in range(3)]
    with chaz.Client(client.settings, migrate=False, project=other) as theirs:
        results = race(3, lambda i: theirs.sessions.post(sessions[i].id, "b"))
    assert all(isinstance(r, chaz.Entry) for r in results), results
    assert len(live_members(client, other) or ()) == 3
    assert len(live_members(client, project) or ()) == 1


def test_the_session_quotas_and_the_project_quotas_both_hold(
    client: chaz.Client, project: str
) -> None:
    client.projects.set_limits(project, max_live=3)
    s = session_in(client, "bot", project, chaz.Limits(max_queued_per_session=2))
    t = session_in(client, "bot", project)
    client.sessions.post(s.id, "1")
    client.sessions.post(s.id, "2")
    with pytest.raises(QueueFull):
        client.sessions.post(s.id, "the session's queue is full")
    client.sessions.post(t.id, "3")
    with pytest.raises(ProjectLiveExceeded):
        client.sessions.post(t.id, "the project is full")
    # A spent cumulative allowance is said first: it never passes again.
    client.projects.set_limits(project, max_live=3, max_jobs=3)
    with pytest.raises(ProjectJobsExhausted):
        client.sessions.post(s.id, "never")
    assert jobs_counter(client, project) == 3
    assert len(live_members(client, project) or ()) == 3


# -- limits: defaults, validation, who may set them ---------------------------------


def test_limits_default_to_the_settings_and_minus_one_is_none() -> None:
    settings = Settings(_env_file=None, project_max_live=3, project_max_jobs=-1)
    limits = resolve_project_limits(settings, None)
    assert (limits.max_live, limits.max_jobs) == (3, None)
    limits = resolve_project_limits(settings, (-1, 7, None, None, None, None))
    assert (limits.max_live, limits.max_jobs) == (None, 7)
    limits = resolve_project_limits(settings, (None, None, None, None, None, None))
    assert (limits.max_live, limits.max_jobs) == (3, None)


def test_the_default_limit_applies_to_a_project_without_a_row(mstack: Stack, project: str) -> None:
    settings = mstack.settings.model_copy(update={"project_max_live": 1})
    with chaz.Client(settings, migrate=False, project=project) as c:
        s1, s2 = session_in(c, "bot", project), session_in(c, "bot", project)
        c.sessions.post(s1.id, "one")
        with pytest.raises(ProjectLiveExceeded):
            c.sessions.post(s2.id, "two")
        shown = c.projects.get(project)
        assert (shown.max_live, shown.effective_max_live, shown.live) == (None, 1, 1)
        # Its own row lifts it.
        c.projects.set_limits(project, max_live=-1)
        c.sessions.post(s2.id, "two")


def test_an_admission_reads_the_limits_once_per_cache_period(
    client: chaz.Client, project: str
) -> None:
    reads: list[str] = []

    def read() -> tuple[int | None, int | None, int | None, int | None, int | None, float | None]:
        reads.append(project)
        return (3, None, None, None, None, None)

    store = client.services.store.projects
    assert store.stored(project, read) == (3, None, None, None, None, None)
    assert store.stored(project, read) == (3, None, None, None, None, None)
    assert reads == [project]  # the second came from the cache
    # Setting the limits drops this process's entry: the next admission reads them.
    client.projects.set_limits(project, max_live=7)
    assert store.stored(project, read) == (3, None, None, None, None, None)
    assert reads == [project, project]
    s = session_in(client, "bot", project)
    client.sessions.post(s.id, "admitted under the cached limit")


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_live", -2), ("max_jobs", "5"), ("max_live", True), ("max_jobs", 2**31)],
)
def test_a_bad_limit_is_request_invalid_naming_its_field(
    client: chaz.Client, project: str, field: str, value: object
) -> None:
    with pytest.raises(ValidationError) as info:
        client.projects.set_limits(project, **{field: value})  # type: ignore[arg-type]
    assert info.value.code == "request.invalid"
    assert info.value.details["field"] == field
    assert client.projects.get(project).created_at is None


def test_a_bad_project_name_is_request_invalid(client: chaz.Client) -> None:
    with pytest.raises(ValidationError) as info:
        client.projects.set_limits("Not A Project", max_live=1)
    assert info.value.details["field"] == "project"


def test_only_an_operator_sets_limits_and_others_read_only_their_own(
    client: chaz.Client, project: str
) -> None:
    keyed = Projects(client.services, Principal("user:alice", project, operator=False))
    with pytest.raises(Forbidden) as info:
        keyed.set_limits(project, max_live=100)
    assert info.value.code == "auth.forbidden"
    assert client.projects.get(project).created_at is None
    assert keyed.get(project).id == project
    with pytest.raises(Forbidden):
        keyed.get("default")
    assert [p.id for p in keyed.list()] == [project]
    client.projects.set_limits(project, max_live=4)
    assert project in {p.id for p in client.projects.list()}
    assert keyed.get(project).max_live == 4


# -- turns that end, with real workers ----------------------------------------------


@pytest.mark.fleet
def test_finished_cancelled_and_waiting_turns_hold_and_free_their_slots(
    stack: Stack, request: pytest.FixtureRequest
) -> None:
    stack.client.agents.put(GATED)
    [worker] = stack.workers(1)
    project = "acme"
    client = chaz.Client(stack.settings, migrate=False, project=project)
    request.addfinalizer(client.close)
    client.projects.set_limits(project, max_live=1)
    s1, s2, s3 = (session_in(client, "gated", project) for _ in range(3))

    first = client.sessions.post(s1.id, "one")
    assert first.job_id is not None
    stack.wait_for(
        lambda: client.jobs.get(first.job_id or "").status is JobStatus.RUNNING,
        60,
        "the first turn",
    )
    with pytest.raises(ProjectLiveExceeded):
        client.sessions.post(s2.id, "refused while the first runs")
    stack.open_gate(f"go-{s1.id}")
    assert client.jobs.wait(first.job_id, timeout=60).status is JobStatus.SUCCEEDED
    # The turn's end tells Redis right after its commit.
    freed(stack, project)

    second = client.sessions.post(s2.id, "two")
    assert second.job_id is not None
    stack.wait_for(
        lambda: client.jobs.get(second.job_id or "").status is JobStatus.RUNNING,
        60,
        "the second turn",
    )
    # Frozen, the worker cannot see the cancel yet: the job is stopping, not
    # ended, for as long as the refused post takes (else a fast stop could
    # free the slot first and the post would race it).
    worker.kill(signal.SIGSTOP)
    try:
        client.jobs.cancel(second.job_id)
        with pytest.raises(ProjectLiveExceeded):
            client.sessions.post(s3.id, "refused while the second stops")
    finally:
        worker.kill(signal.SIGCONT)
    stack.open_gate(f"go-{s2.id}")
    assert client.jobs.wait(second.job_id, timeout=60).status is JobStatus.CANCELLED
    freed(stack, project)
    third = client.sessions.post(s3.id, "three")
    assert live_members(client, project) == {third.job_id}
    stack.open_gate(f"go-{s3.id}")
    assert client.jobs.wait(third.job_id or "", timeout=60).status is JobStatus.SUCCEEDED
    freed(stack, project)
    assert jobs_counter(client, project) == 3

    # A turn waiting for a person's decision is unfinished: it keeps its
    # slot, and cancelling it frees the slot at once.
    client.agents.put(CAREFUL)
    s4, s5 = session_in(client, "careful", project), session_in(client, "careful", project)
    waiting = client.sessions.post(s4.id, "launch")
    assert waiting.job_id is not None
    stack.wait_for(
        lambda: client.jobs.get(waiting.job_id or "").status is JobStatus.WAITING_APPROVAL,
        60,
        "the turn to wait for approval",
    )
    assert live_members(client, project) == {waiting.job_id}
    with pytest.raises(ProjectLiveExceeded):
        client.sessions.post(s5.id, "quick, refused while one waits")
    client.jobs.cancel(waiting.job_id)
    assert client.jobs.get(waiting.job_id).status is JobStatus.CANCELLED
    assert live_members(client, project) == set()
    quick = client.sessions.post(s5.id, "quick one")
    assert client.sessions.wait_for_reply(s5.id, after=quick.seq, timeout=60).content == "quick one"
    freed(stack, project)
    assert jobs_counter(client, project) == 5


# -- the CLI ---------------------------------------------------------------------------


def _cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHAZ_")}
    env.update(settings_env(settings))
    return run_in_process(*args, env=env)


def test_the_cli_sets_and_lists_project_limits(mstack: Stack, project: str) -> None:
    session_in(mstack.client, "bot", project)
    done = _cli(mstack.settings, "projects", "set", project, "--max-live", "3")
    assert done.returncode == 0, done.stderr
    assert f"project {project}: live 0 of 3" in done.stdout
    # An option left out keeps its value; 'unlimited' and 'default' are words.
    done = _cli(mstack.settings, "projects", "set", project, "--max-jobs", "unlimited")
    assert done.returncode == 0, done.stderr
    shown = mstack.client.projects.get(project)
    assert (shown.max_live, shown.max_jobs) == (3, -1)
    done = _cli(mstack.settings, "projects", "ls", "--json")
    assert done.returncode == 0, done.stderr
    rows = {p["id"]: p for p in json.loads(done.stdout)}
    assert rows[project]["max_live"] == 3 and rows[project]["effective_max_jobs"] is None
    done = _cli(mstack.settings, "projects", "ls")
    assert done.returncode == 0 and project in done.stdout
    # The rate too; and a later --max-live leaves it as it is.
    done = _cli(mstack.settings, "projects", "set", project, "--turns-per-minute", "120")
    assert done.returncode == 0 and "120 turns a minute" in done.stdout, done.stderr
    done = _cli(mstack.settings, "projects", "set", project, "--max-live", "default")
    assert done.returncode == 0, done.stderr
    shown = mstack.client.projects.get(project)
    assert (shown.max_live, shown.max_jobs, shown.turns_per_minute) == (None, -1, 120)
    assert "TURNS/MIN" in _cli(mstack.settings, "projects", "ls").stdout
    bad = _cli(mstack.settings, "projects", "set", project, "--max-live", "lots")
    assert bad.returncode != 0
    assert "max-live" in bad.stderr + bad.stdout
    # The token rate and the cumulative budgets, kept by a later option too.
    args = ["--tokens-per-minute", "5000", "--max-tokens", "90000", "--max-cost", "2.5"]
    done = _cli(mstack.settings, "projects", "set", project, *args)
    assert done.returncode == 0 and "5000 tokens a minute" in done.stdout, done.stderr
    done = _cli(mstack.settings, "projects", "set", project, "--max-live", "4")
    assert done.returncode == 0, done.stderr
    shown = mstack.client.projects.get(project)
    assert (shown.tokens_per_minute, shown.max_tokens, shown.max_cost) == (5000, 90000, 2.5)
    assert "TOKENS/MIN" in _cli(mstack.settings, "projects", "ls").stdout
    bad = _cli(mstack.settings, "projects", "set", project, "--max-cost", "lots")
    assert bad.returncode != 0 and "max-cost" in bad.stderr + bad.stdout


# -- the scripts themselves ------------------------------------------------------------


def test_reserve_answers_in_order_and_counts_nothing_when_it_refuses(
    client: chaz.Client, project: str
) -> None:
    r = client.services.redis
    reserve = scripts.register(r, "reserve")
    refund = scripts.register(r, "refund")
    ended = scripts.register(r, "job_ended")
    sid = f"s-{project}"
    ks = [keys.queued(sid), keys.cumulative(sid), keys.project_live(project)]
    ks += [keys.project_jobs(project), keys.project_rate(project), keys.project_tokens(project)]

    def run(max_q: int, max_c: int, max_live: int, max_pj: int, job: str = "j1") -> str:
        return str(reserve(keys=ks, args=[max_q, max_c, 60_000, max_live, max_pj, job, -1, -1]))

    assert run(-1, -1, -1, -1) == "rebuild"
    r.set(ks[0], 1)
    r.set(ks[1], 1)
    assert run(-1, -1, -1, -1) == "rebuild_project"
    r.zadd(ks[2], {"_": 0, "j0": 1})
    r.set(ks[3], 1)
    before = (r.get(ks[0]), r.get(ks[1]), r.zcard(ks[2]), r.get(ks[3]))
    # Everything at its limit: the cumulative checks answer first.
    assert run(1, 1, 1, 1) == "jobs_exhausted"
    assert run(1, 2, 1, 1) == "project_jobs"
    assert run(1, 2, 1, 2) == "queue_full"
    assert run(2, 2, 1, 2) == "project_live"
    assert (r.get(ks[0]), r.get(ks[1]), r.zcard(ks[2]), r.get(ks[3])) == before
    assert run(2, 2, 2, 2) == "ok"
    assert (r.get(ks[0]), r.get(ks[1]), r.get(ks[3])) == ("2", "2", "2")
    assert set(r.zrange(ks[2], 0, -1)) == {"_", "j0", "j1"}
    assert all(r.pttl(k) > 0 for k in ks[:4])
    assert not r.exists(ks[4])  # no rate, no bucket
    # A refund undoes exactly one reservation; a job's end frees its slot once.
    refund(keys=[ks[0], ks[1], ks[3], ks[2], ks[4]], args=["j1", "0"])
    assert (r.get(ks[0]), r.get(ks[1]), r.get(ks[3])) == ("1", "1", "1")
    assert ended(keys=[ks[2], ks[0]], args=["j0", "1"]) == 1
    assert ended(keys=[ks[2], ks[0]], args=["j0", "1"]) == 0
    assert r.get(ks[0]) == "0"
    assert set(r.zrange(ks[2], 0, -1)) == {"_"}


def test_concurrent_puts_of_a_new_project_all_land(mstack: Stack, project: str) -> None:
    # Eight writers create the same project's row at once: each put is one
    # upsert, so none fails and the row holds one writer's limits whole.
    store = mstack.client.services.store.projects
    results = race(8, lambda i: store.put(project, i + 1, 100 + i))
    assert not [r for r in results if isinstance(r, BaseException)], results
    shown = store.get(project)
    assert shown["max_jobs"] == 100 + shown["max_live"] - 1
    assert [p["id"] for p in store.list()].count(project) == 1
