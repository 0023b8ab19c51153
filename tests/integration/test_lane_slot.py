"""The lane and the live slot in one script (issue 25 item 6,
docs/coordination.md#the-lane-and-the-slot-in-one-script).

A wake-up that names its job's tree lets the worker take that job's live
slot with the lane (``lua/lane_start.lua``), when no limit can refuse it:
the job waits in the session and no turn of its tree runs. Everything else
goes through ``lua/start.lua`` after the setup read, as before: a held
lane, a tree with running turns (whatever its limit is by then), a missing
live hash; and a slot taken for a job that does not start in it is given
back, its waiter woken. On both stacks, with real Redis and the database,
this test as the worker.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import chaz
from chaz.coord import keys
from chaz.domain.agents import Limits
from chaz.domain.entries import EntryType
from chaz.domain.jobs import Job, JobStatus
from chaz.domain.limits import EffectiveLimits
from chaz.errors import BackendUnavailable
from chaz.ids import new_id
from chaz.services import Services
from chaz.tools import default_registry
from chaz.usecases import admission
from chaz.usecases.turns import TurnRunner
from tests.support.dispatch import RecordingDispatcher
from tests.support.stack import Stack

ECHO = [{"steps": [{"echo": True}]}]


@pytest.fixture
def svc(stack: Stack) -> Iterator[Services]:
    stack.client.agents.put(chaz.AgentSpec(id="echo", script=ECHO))
    services = Services(stack.settings)
    services.__dict__["dispatcher"] = RecordingDispatcher()  # no workers: this test is one
    yield services
    services.close()


@pytest.fixture
def starts(svc: Services, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The jobs ``TreeCapacity.start`` (the slot after the setup read) was asked for."""
    asked: list[str] = []
    real = svc.capacity.start

    def start(job: Job, limits: EffectiveLimits) -> bool:
        asked.append(job.id)
        return real(job, limits)

    monkeypatch.setattr(svc.capacity, "start", start)
    return asked


def _post(svc: Services, session_id: str, text: str = "hi") -> Job:
    job = admission.write(svc, session_id, EntryType.MESSAGE, "user:u", text).job
    assert job is not None
    return job


def _live(svc: Services, tree_id: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in svc.redis.hgetall(keys.live(tree_id)).items()}


def _another_turn_runs(svc: Services, tree_id: str) -> str:
    """A slot of the tree held by a turn of another session (as a worker's start leaves it)."""
    svc.capacity.seed(tree_id, [], "default")
    other = new_id()
    svc.redis.hset(keys.live(tree_id), other, new_id())
    return other


# -- the script ---------------------------------------------------------------


def test_the_script_takes_the_slot_only_when_no_limit_can_refuse_it(svc: Services) -> None:
    lanes, tree, project = svc.lanes, new_id(), "default"
    slot = svc.capacity.slot_keys(tree, project)

    def take(sid: str, job: str) -> str | None:
        got = lanes.acquire_with_slot(sid, job, 30, project=project, slot_keys=slot)
        return None if got is None else got.slot

    # No live hash (a flushed Redis): the lane only; the start rebuilds it.
    sid = new_id()
    svc.redis.set(keys.queued(sid), 1)
    assert take(sid, "j1") == ""
    assert not svc.redis.exists(keys.live(tree))

    # An empty tree, the job waiting: lane and slot, and the session leaves the waiting set.
    svc.capacity.seed(tree, [], project)
    sid = new_id()
    svc.redis.set(keys.queued(sid), 1)
    svc.redis.zadd(keys.waiting(tree), {sid: 1})
    assert take(sid, "j2") == "took"
    assert _live(svc, tree) == {"_": "1", "j2": sid}
    assert svc.redis.zscore(keys.waiting(tree), sid) is None
    assert str(svc.redis.get(keys.lane(sid))).endswith(" j2")

    # The lane held: nothing is taken, not even the slot of a free tree.
    svc.redis.hdel(keys.live(tree), "j2")
    assert take(sid, "j2") is None
    assert _live(svc, tree) == {"_": "1"}

    # A turn of the tree runs: whatever the limit, it is the start's to apply.
    running = _another_turn_runs(svc, tree)
    sid = new_id()
    svc.redis.set(keys.queued(sid), 1)
    assert take(sid, "j3") == ""
    assert set(_live(svc, tree)) == {"_", running}

    # Nothing waits in the session (a stale wake-up, a resumed turn): the lane only.
    svc.redis.hdel(keys.live(tree), running)
    sid = new_id()
    assert take(sid, "j4") == ""
    assert _live(svc, tree) == {"_": "1"}

    # The job holds its slot already (its worker died mid-turn): kept, not taken twice.
    sid = new_id()
    svc.redis.set(keys.queued(sid), 1)
    svc.redis.hset(keys.live(tree), "j5", sid)
    assert take(sid, "j5") == "held"
    assert _live(svc, tree) == {"_": "1", "j5": sid}


# -- the runner ---------------------------------------------------------------


def test_the_wake_ups_job_starts_in_the_slot_its_lane_took(
    svc: Services, starts: list[str]
) -> None:
    s = svc.store.create_session("echo")
    job = _post(svc, s.id)
    assert job.tree_id == s.tree_id
    svc.capacity.seed(s.tree_id, [], "default")
    outcome = TurnRunner(svc, default_registry()).wake(s.id, job.id, tree=job.tree_id)
    assert outcome.ran == (job.id,)
    assert starts == []  # one script before the setup read, none after it
    assert svc.store.get_job(job.id).status is JobStatus.SUCCEEDED
    assert _live(svc, s.tree_id) == {"_": "1"}  # the end freed it


def test_a_full_tree_makes_the_job_wait_and_takes_nothing(
    svc: Services, stack: Stack, starts: list[str]
) -> None:
    stack.client.agents.put(
        chaz.AgentSpec(id="one", script=ECHO, limits=Limits(max_live_per_tree=1))
    )
    s = svc.store.create_session("one")
    job = _post(svc, s.id)
    running = _another_turn_runs(svc, s.tree_id)
    outcome = TurnRunner(svc, default_registry()).wake(s.id, job.id, tree=job.tree_id)
    assert (outcome.status, outcome.job_id) == ("waiting", job.id)
    assert starts == [job.id]
    assert set(_live(svc, s.tree_id)) == {"_", running}
    assert svc.redis.zscore(keys.waiting(s.tree_id), s.id) is not None
    assert svc.store.get_job(job.id).status is JobStatus.QUEUED
    assert not svc.redis.exists(keys.lane(s.id))


def test_the_limit_in_force_at_the_turn_decides_not_the_one_at_the_wake_up(
    svc: Services, stack: Stack, starts: list[str]
) -> None:
    agents = stack.client.agents
    s = svc.store.create_session("echo")
    job = _post(svc, s.id)  # no limit when it was admitted and woken
    running = _another_turn_runs(svc, s.tree_id)
    runner = TurnRunner(svc, default_registry())
    # Narrowed to one live turn before the wake-up arrives: it waits.
    agents.put(chaz.AgentSpec(id="echo", script=ECHO, limits=Limits(max_live_per_tree=1)))
    assert runner.wake(s.id, job.id, tree=job.tree_id).status == "waiting"
    assert set(_live(svc, s.tree_id)) == {"_", running}
    # Widened to two: the next wake-up runs it, in a slot the start took.
    agents.put(chaz.AgentSpec(id="echo", script=ECHO, limits=Limits(max_live_per_tree=2)))
    assert runner.wake(s.id, job.id, tree=job.tree_id).ran == (job.id,)
    assert starts == [job.id, job.id]
    assert set(_live(svc, s.tree_id)) == {"_", running}


def test_a_slot_taken_for_a_job_that_is_not_the_head_goes_back_and_wakes_the_waiter(
    svc: Services, starts: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("chaz.usecases.turns.runner.KEEP_LANE_SECONDS", 3600.0)
    recorder = svc.dispatcher
    assert isinstance(recorder, RecordingDispatcher)
    s = svc.store.create_session("echo")
    first, second = _post(svc, s.id, "a"), _post(svc, s.id, "b")
    svc.capacity.seed(s.tree_id, [], "default")
    waiter = new_id()  # a session of the tree that waits for a slot
    svc.redis.zadd(keys.waiting(s.tree_id), {waiter: 1})
    given: list[str] = []
    real = svc.capacity.give_back

    def give_back(job_id: str, tree_id: str, project: str) -> str | None:
        given.append(job_id)
        return real(job_id, tree_id, project)

    monkeypatch.setattr(svc.capacity, "give_back", give_back)
    recorder.wakes.clear()
    # The wake-up names the second job; the head is the first.
    outcome = TurnRunner(svc, default_registry()).wake(s.id, second.id, tree=second.tree_id)
    assert outcome.ran == (first.id, second.id)  # in order, the lane kept
    assert given == [second.id]
    assert (waiter, "") in recorder.wakes
    assert starts == [first.id, second.id]
    assert _live(svc, s.tree_id) == {"_": "1"}


def test_a_stale_wake_up_gives_its_slot_back(svc: Services) -> None:
    s = svc.store.create_session("echo")
    job = _post(svc, s.id)
    runner = TurnRunner(svc, default_registry())
    assert runner.wake(s.id, job.id).ran == (job.id,)
    # Redelivered after its job ran (another job's count still up): the
    # script takes the slot, the setup finds nothing to run.
    svc.redis.set(keys.queued(s.id), 1)
    outcome = runner.wake(s.id, job.id, tree=job.tree_id)
    assert outcome.status == "idle" and outcome.ran == ()
    assert _live(svc, s.tree_id) == {"_": "1"}
    assert not svc.redis.exists(keys.lane(s.id))


def test_a_fault_before_the_setup_gives_the_slot_and_the_lane_back(
    svc: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = svc.store.create_session("echo")
    job = _post(svc, s.id)
    svc.capacity.seed(s.tree_id, [], "default")

    def down(*_: object, **__: object) -> None:
        raise BackendUnavailable("the database is away")

    # The setup's read either way: with the start (start_head) or alone.
    monkeypatch.setattr(svc.store, "start_head", down)
    monkeypatch.setattr(svc.store, "turn_start", down)
    outcome = TurnRunner(svc, default_registry()).wake(s.id, job.id, tree=job.tree_id)
    assert outcome.status == "retry"
    assert _live(svc, s.tree_id) == {"_": "1"}
    assert not svc.redis.exists(keys.lane(s.id))
    monkeypatch.undo()
    # The retry's wake-up (no tree) runs it.
    assert TurnRunner(svc, default_registry()).wake(s.id, job.id).ran == (job.id,)


# -- the waiting set's order ----------------------------------------------------


def _tree_of_one(
    svc: Services, stack: Stack, members: int
) -> tuple[chaz.Session, list[chaz.Session]]:
    """A root session whose tree runs one turn at a time, and ``members`` more sessions in it."""
    stack.client.agents.put(
        chaz.AgentSpec(id="one", script=ECHO, limits=Limits(max_live_per_tree=1))
    )
    root = svc.store.create_session("one")
    return root, [svc.store.create_session("one", tree_id=root.tree_id) for _ in range(members)]


def test_a_session_handed_a_slot_that_another_takes_first_keeps_its_place(
    svc: Services, stack: Stack
) -> None:
    root, (w1, w2, newcomer) = _tree_of_one(svc, stack, 3)
    tree, one = root.tree_id, EffectiveLimits(None, None, 1)
    running = _post(svc, root.id)
    assert svc.capacity.start(running, one)
    j1, j2 = _post(svc, w1.id), _post(svc, w2.id)
    assert not svc.capacity.start(j1, one)
    assert not svc.capacity.start(j2, one)
    # The root's turn ends: its slot is handed to w1, which waited longest.
    assert svc.capacity.give_back(running.id, tree, "default") == w1.id
    assert not svc.capacity.waits(w1.id, tree, "default")
    assert svc.capacity.waits(w2.id, tree, "default")
    # A newcomer's first start takes the free slot before w1's wake-up comes...
    n = _post(svc, newcomer.id)
    assert svc.capacity.start(n, one)
    # ... and w1, finding the tree full, waits again at its place, before w2
    # (it went to the back until 2026-12-07, and a tree that kept spawning
    # could starve it).
    assert not svc.capacity.start(j1, one)
    assert [str(m) for m in svc.redis.zrange(keys.waiting(tree), 0, -1)] == [w1.id, w2.id]
    assert svc.capacity.waits(w1.id, tree, "default")
    assert svc.capacity.give_back(n.id, tree, "default") == w1.id
    assert svc.capacity.start(j1, one)
    assert svc.redis.zscore(keys.waiting(tree), w1.id) is None
    assert set(_live(svc, tree)) == {"_", j1.id}


def test_the_reconciler_forgets_a_handed_session_once_nothing_of_it_waits(
    svc: Services, stack: Stack
) -> None:
    root, (gone, still) = _tree_of_one(svc, stack, 2)
    tree, one = root.tree_id, EffectiveLimits(None, None, 1)
    first, second = _post(svc, root.id, "a"), _post(svc, root.id, "b")
    assert svc.capacity.start(first, one)
    j_gone, j_still = _post(svc, gone.id), _post(svc, still.id)
    assert not svc.capacity.start(j_gone, one)
    assert not svc.capacity.start(j_still, one)
    # Both are handed a slot (the second by a turn that took the first's).
    assert svc.capacity.give_back(first.id, tree, "default") == gone.id
    assert svc.capacity.start(second, one)
    assert svc.capacity.give_back(second.id, tree, "default") == still.id
    # The first's job is cancelled before its wake-up runs it.
    stack.client.jobs.cancel(j_gone.id)
    svc.capacity.prune()
    assert svc.redis.zscore(keys.waiting(tree), gone.id) is None
    assert svc.redis.zscore(keys.waiting(tree), still.id) is not None  # its job still waits
