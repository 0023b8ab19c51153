"""The turn runner's lane, driven with fakes: which turns one wake-up runs
under its lease, when it gives the lane back, and which wake-up it sends
after (and why). The turns themselves are scripted: each says how it ended.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import pytest

from chaz.coord.feed import Feed
from chaz.coord.signals import TurnEnd
from chaz.domain.agents import Limits
from chaz.domain.jobs import JobStatus
from chaz.errors import BackendUnavailable
from chaz.plumbing.dispatch import Wake
from chaz.runtime.cancel import Running
from chaz.settings import Settings
from chaz.usecases.turns import TurnRunner, WakeOutcome
from chaz.usecases.turns.ending import Ran
from chaz.usecases.turns.runner import RETRY_SECONDS

SID = "s1"


def _job(job_id: str, status: JobStatus = JobStatus.QUEUED) -> Any:
    return SimpleNamespace(
        id=job_id,
        status=status,
        delivery_id=None,
        member_agent_id=None,
        usage=None,
        webhook=None,
        tree_id="t",
    )


class _Store:
    """The session's unfinished jobs, head first; a finished turn removes its job."""

    def __init__(self, *jobs: Any) -> None:
        self.jobs = list(jobs)

    @contextmanager
    def turn_start(self, session_id: str, max_entries: int) -> Iterator[Any]:
        head = self.head_job(session_id)
        session = SimpleNamespace(
            id=SID, agent_id="a", archived=False, origin=None, limits=Limits()
        )
        setup = None
        if head is not None:
            setup = SimpleNamespace(
                job=head, session=session, agent=SimpleNamespace(limits=Limits()), budget=None
            )
        yield SimpleNamespace(setup=setup, start=lambda token, **_: (head, None))

    def head_job(self, session_id: str) -> Any:
        return self.jobs[0] if self.jobs else None


class _Services:
    """What the runner's lane steps call: the lane, the tree's slots, the
    turn-ended signal and the wake-ups, recorded."""

    def __init__(
        self,
        store: _Store,
        *,
        lane_free: bool = True,
        tree_full: bool = False,
        handed_meanwhile: bool = False,
    ) -> None:
        self.settings = Settings()
        self.store = store
        self.redis = None  # the feeds' client: these scripted turns publish nothing
        self.lane_free = lane_free
        self.tree_full = tree_full
        self.released: list[str] = []
        self.wakes: list[tuple[str, Wake, float | None]] = []
        self.lanes = SimpleNamespace(acquire=self._acquire, release=self._release)
        # handed_meanwhile: a turn of the tree ended between the START that
        # made the head wait and the lane's release, and handed it the slot.
        self.capacity = SimpleNamespace(
            start=lambda job, limits: not self.tree_full,
            waits=lambda session_id, tree_id, project: not handed_meanwhile,
        )
        self.signals = SimpleNamespace(ended=self._ended)
        self.dispatcher = SimpleNamespace(send_wake=self._send_wake)

    def coord_project(self, session_id: str) -> str:
        return ""

    def _acquire(
        self, session_id: str, execution_id: str, seconds: float, *, project: str
    ) -> str | None:
        return "tok" if self.lane_free else None

    def _release(self, session_id: str, token: str, *, project: str) -> None:
        self.released.append(token)

    def _ended(self, job: Any, token: str, last: Any, *, keep_if_queued: bool, **_: Any) -> TurnEnd:
        # TURN_ENDED: keep the lane only if asked to and jobs wait; else release it.
        queued = len(self.store.jobs)
        return TurnEnd(kept=keep_if_queued and queued > 0, woken=None, queued=queued)

    def _send_wake(
        self,
        session_id: str,
        execution_id: str,
        reason: Wake,
        *,
        countdown: float | None = None,
        tree: str | None = None,
    ) -> bool:
        self.wakes.append((execution_id, reason, countdown))
        return True


class _Scripted(TurnRunner):
    """A runner whose turns end as scripted, one :class:`Ran` (or exception) per turn."""

    def __init__(self, services: _Services, *ends: Ran | Exception) -> None:
        super().__init__(services, registry=None, running=Running())  # type: ignore[arg-type]
        self.ends = list(ends)
        self.store = services.store

    def _run(self, setup: Any, token: str, job: Any, feed: Feed) -> Ran:
        end = self.ends.pop(0)
        if isinstance(end, Exception):
            raise end
        if end.finished:
            self.store.jobs.remove(job)
        return end


FINISHED = Ran(finished=True)


def test_a_held_lane_ends_the_wake_up_busy() -> None:
    svc = _Services(_Store(_job("j1")), lane_free=False)
    assert _Scripted(svc).wake(SID, "j1") == WakeOutcome("busy")
    assert svc.wakes == [] and svc.released == []


def test_the_lane_is_kept_for_the_jobs_that_wait_and_nothing_is_woken_after() -> None:
    svc = _Services(_Store(_job("j1"), _job("j2"), _job("j3")))
    outcome = _Scripted(svc, FINISHED, FINISHED, FINISHED).wake(SID, "j1")
    assert (outcome.status, outcome.ran) == ("ran", ("j1", "j2", "j3"))
    # The last turn's end released the lane, and its counter said nothing waits.
    assert svc.released == [] and svc.wakes == []


def test_a_spent_budget_gives_the_lane_back_and_wakes_the_next_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("chaz.usecases.turns.runner.KEEP_LANE_TURNS", 1)
    svc = _Services(_Store(_job("j1"), _job("j2")))
    outcome = _Scripted(svc, FINISHED).wake(SID, "j1")
    assert outcome.ran == ("j1",)
    assert svc.wakes == [("j2", Wake.NEXT, None)]


def test_a_lent_slot_runs_one_turn_only() -> None:
    svc = _Services(_Store(_job("j1"), _job("j2")))
    assert _Scripted(svc, FINISHED).wake(SID, "j1", lend_slot=True).ran == ("j1",)
    assert svc.wakes == [("j2", Wake.NEXT, None)]


def test_a_handed_back_turn_wakes_its_own_job_for_another_worker() -> None:
    svc = _Services(_Store(_job("j1"), _job("j2")))
    outcome = _Scripted(svc, Ran(finished=False, handed_back=True)).wake(SID, "j1")
    assert outcome.ran == ("j1",)
    assert svc.wakes == [("j1", Wake.HANDED_BACK, None)]


def test_a_suspended_turn_wakes_nothing_its_decision_will() -> None:
    svc = _Services(_Store(_job("j1"), _job("j2")))
    outcome = _Scripted(svc, Ran(finished=False, suspended=True)).wake(SID, "j1")
    assert outcome.ran == ("j1",)
    assert svc.wakes == []


@pytest.mark.parametrize(
    ("head", "tree_full", "status"),
    [
        (_job("j1", JobStatus.WAITING_APPROVAL), False, "approval"),
        (_job("j1"), True, "waiting"),
    ],
)
def test_a_head_that_cannot_start_gives_the_lane_back_and_wakes_nothing(
    head: Any, tree_full: bool, status: str
) -> None:
    svc = _Services(_Store(head, _job("j2")), tree_full=tree_full)
    assert _Scripted(svc).wake(SID, "j1") == WakeOutcome(status, "j1")
    assert svc.released == ["tok"] and svc.wakes == []


def test_a_head_handed_a_slot_before_its_lane_went_back_is_woken_after_the_release() -> None:
    svc = _Services(_Store(_job("j1"), _job("j2")), tree_full=True, handed_meanwhile=True)
    assert _Scripted(svc).wake(SID, "j1") == WakeOutcome("waiting", "j1")
    # The slot's own wake-up may have found the lane held: this one follows the release.
    assert svc.released == ["tok"] and svc.wakes == [("j1", Wake.SLOT_FREED, None)]


def test_an_idle_session_gives_the_lane_back() -> None:
    svc = _Services(_Store())
    assert _Scripted(svc).wake(SID, "") == WakeOutcome("idle")
    assert svc.released == ["tok"] and svc.wakes == []


def test_a_transient_fault_gives_the_lane_back_and_sends_only_the_retry() -> None:
    svc = _Services(_Store(_job("j1"), _job("j2")))
    outcome = _Scripted(svc, BackendUnavailable("redis away")).wake(SID, "j1")
    assert outcome == WakeOutcome("retry", "j1")
    assert svc.released == ["tok"]
    assert svc.wakes == [("j1", Wake.RETRY, RETRY_SECONDS)]


def test_an_unexpected_error_gives_the_lane_back_wakes_the_head_and_raises() -> None:
    svc = _Services(_Store(_job("j1")))
    with pytest.raises(RuntimeError):
        _Scripted(svc, RuntimeError("bug")).wake(SID, "j1")
    assert svc.released == ["tok"]
    assert svc.wakes == [("j1", Wake.NEXT, None)]
