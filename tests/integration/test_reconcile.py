"""The reconciler rebuilds Redis state from the database and wakes stranded work."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import chaz
from chaz.coord import keys
from chaz.domain.entries import EntryType
from chaz.domain.jobs import JobStatus
from chaz.services import Services
from chaz.tools import default_registry
from chaz.usecases import admission, completion
from chaz.usecases.reconcile import Reconciler
from tests.support.dispatch import RecordingDispatcher
from tests.support.stack import Stack


@pytest.fixture
def svc(stack: Stack) -> Iterator[Services]:
    stack.client.agents.put(chaz.AgentSpec(id="echo", script=[{"steps": [{"echo": True}]}]))
    services = Services(stack.settings)
    services.__dict__["dispatcher"] = RecordingDispatcher()
    yield services
    services.close()


def test_orphaned_running_job_is_woken_and_held_lanes_are_left_alone(svc: Services) -> None:
    s1 = svc.store.create_session("echo")
    s2 = svc.store.create_session("echo")
    j1 = admission.write(svc, s1.id, EntryType.MESSAGE, "user:u", "x").job
    j2 = admission.write(svc, s2.id, EntryType.MESSAGE, "user:u", "y").job
    assert j1 is not None and j2 is not None
    svc.store.start_turn(j1.id, "dead-worker")  # running, but nobody holds its lease
    svc.store.start_turn(j2.id, "live-worker")
    assert svc.lanes.acquire(s2.id, j2.id, 30, project="default") is not None
    report = Reconciler(svc, grace_seconds=0).run()
    assert report.orphaned == [j1.id]
    assert report.woken == [s1.id]


def test_a_turn_that_ends_during_the_pass_is_not_an_orphan(
    svc: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = svc.store.create_session("echo")
    job = admission.write(svc, s.id, EntryType.MESSAGE, "user:u", "x").job
    assert job is not None
    svc.store.start_turn(job.id, "worker")
    real_held = svc.lanes.held

    def held_once_the_turn_has_ended(session_ids: dict[str, str]) -> set[str]:
        # The turn ends (and releases its lane) after the pass read the
        # active jobs and before it looks at the leases.
        svc.store.transition(job.id, JobStatus.SUCCEEDED, completion=completion.ended)
        return real_held(session_ids)

    monkeypatch.setattr(svc.lanes, "held", held_once_the_turn_has_ended)
    report = Reconciler(svc, grace_seconds=0).run()
    assert report.orphaned == []
    assert report.woken == []


def test_young_queued_jobs_are_left_to_their_wake_up(svc: Services) -> None:
    s = svc.store.create_session("echo")
    admission.write(svc, s.id, EntryType.MESSAGE, "user:u", "x")
    assert Reconciler(svc, grace_seconds=60).run().woken == []
    assert Reconciler(svc, grace_seconds=0).run().woken == [s.id]


def test_flushed_counters_and_cancel_flags_come_back(svc: Services) -> None:
    s = svc.store.create_session("echo")
    jobs = [admission.write(svc, s.id, EntryType.MESSAGE, "user:u", str(i)).job for i in range(3)]
    assert all(jobs)
    running = jobs[0]
    assert running is not None
    svc.store.start_turn(running.id, "t")
    svc.store.transition(running.id, JobStatus.STOPPING, completion=completion.ended)
    svc.redis.flushdb()
    report = Reconciler(svc, grace_seconds=0).run()
    assert report.counters_rebuilt >= 2  # the session's counters and the tree's live set
    assert svc.redis.get(keys.queued(s.id)) == "2"
    assert svc.redis.get(keys.cumulative(s.id)) == "3"
    assert svc.redis.hexists(keys.live(s.tree_id), running.id)
    assert svc.redis.exists(keys.cancel(running.id))


def test_slots_of_finished_jobs_are_freed_and_their_waiters_woken(svc: Services) -> None:
    s = svc.store.create_session("echo")
    done = admission.write(svc, s.id, EntryType.MESSAGE, "user:u", "x").job
    other = svc.store.create_session("echo")
    waiting = admission.write(svc, other.id, EntryType.MESSAGE, "user:u", "y")
    assert done is not None and waiting.job is not None
    svc.store.start_turn(done.id, "t")
    svc.store.transition(done.id, JobStatus.SUCCEEDED, completion=completion.ended)
    # The worker died before handing its slot on; another session waits for one.
    svc.redis.hset(keys.live(s.tree_id), mapping={"_": "1", done.id: s.id})
    svc.redis.zadd(keys.waiting(s.tree_id), {waiting.entry.session_id: 1})
    report = Reconciler(svc, grace_seconds=60).run()
    assert not svc.redis.hexists(keys.live(s.tree_id), done.id)
    assert waiting.entry.session_id in report.woken


def test_queued_counter_drops_once_whether_a_job_starts_or_is_cancelled(svc: Services) -> None:
    from chaz.usecases.control import cancel

    s = svc.store.create_session("echo")
    a = admission.write(svc, s.id, EntryType.MESSAGE, "user:u", "a").job
    b = admission.write(svc, s.id, EntryType.MESSAGE, "user:u", "b").job
    assert a is not None and b is not None
    assert svc.redis.get(keys.queued(s.id)) == "2"
    cancel(svc, b.id)
    assert svc.redis.get(keys.queued(s.id)) == "1"
    from chaz.usecases.turns import TurnRunner

    # The inline (foreground) path:
    TurnRunner(svc, default_registry()).wake(s.id, a.id, lend_slot=True)
    assert svc.store.get_job(a.id).status is JobStatus.SUCCEEDED
    assert svc.redis.get(keys.queued(s.id)) == "0"
    assert svc.redis.get(keys.cumulative(s.id)) == "2"
