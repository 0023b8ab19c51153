"""Budget accounting on a real SQLite file and a real PostgreSQL (docs/runtime.md#budgets).

The sums are taken over ``jobs.usage``, which only the job's fence may
write: a redelivered attempt carries its job's usage on and overwrites it,
so the totals never count an attempt twice, and a stale attempt's late
write changes nothing. A live job holds its reservation; its end releases
it down to what it used.
"""

from __future__ import annotations

import pytest

from chaz.domain.entries import EntryType, NewEntry
from chaz.domain.jobs import JobStatus, Usage
from chaz.errors import LeaseLost
from chaz.runtime.backends.base import TokenCount
from chaz.runtime.budget import Budget
from chaz.store import Store
from chaz.store import budgets as rows
from chaz.store.types import Fence, Finish
from chaz.usecases import completion

pytest_plugins = ["tests.support.store_fixtures"]


def _queued(store: Store, session_id: str) -> str:
    with store.admitting(session_id) as tx:
        done = tx.insert(NewEntry(EntryType.MESSAGE, "user:a", "go"))
    assert done.job is not None
    return done.job.id


def _end(store: Store, fence: Fence, session_id: str, usage: Usage) -> None:
    store.end_turn(
        fence,
        Finish(fence.job_id, JobStatus.SUCCEEDED, result="ok", usage=usage),
        session_id,
        NewEntry(EntryType.MESSAGE, "agent:bot", "ok"),
        completion=completion.ended,
    )


def test_a_redelivered_attempt_is_not_counted_twice(store: Store) -> None:
    s = store.create_session("bot")
    job_id = _queued(store, s.id)
    first, _ = store.start_turn(job_id, "tok-1")
    budget = Budget(carried=first.usage)
    budget.spent(TokenCount(input=100, output=20))
    store.save_checkpoint(Fence(job_id, "tok-1"), {"steps": 1}, budget.usage())
    # The worker dies; the redelivered task takes the job over and counts on
    # from what the first attempt recorded.
    taken, _ = store.start_turn(job_id, "tok-2")
    assert taken.attempts == 2 and taken.usage is not None and taken.usage.tokens == 120
    resumed = Budget(carried=taken.usage)
    resumed.spent(TokenCount(input=30, output=10))
    # The first attempt's late write is refused: it adds nothing.
    with pytest.raises(LeaseLost):
        store.save_checkpoint(Fence(job_id, "tok-1"), {"steps": 9}, Usage(input_tokens=999))
    _end(store, Fence(job_id, "tok-2"), s.id, resumed.usage())
    total = store.usage_totals(s.project, session_id=s.id)
    assert (total.input_tokens, total.output_tokens, total.jobs) == (130, 30, 1)
    assert store.usage_totals(s.project, tree_id=s.tree_id) == total


def test_a_live_job_holds_its_reservation_until_its_end(store: Store) -> None:
    s = store.create_session("bot")
    job_id = _queued(store, s.id)
    reserved = Usage(reserved_tokens=100, reserved_cost=1.5)
    job, _ = store.start_turn(job_id, "tok")
    # As a spawned turn's start writes it (TurnStart.start(usage=...)).
    store.save_checkpoint(
        Fence(job_id, "tok"), {}, reserved.model_copy(update={"input_tokens": 10})
    )
    with store.db.read() as conn:
        assert rows.charged(conn, rows.in_tree(s.tree_id), but="") == (100, 1.5)
        assert rows.charged(conn, rows.in_tree(s.tree_id), but=job_id) == (0, 0.0)
    _end(store, Fence(job_id, "tok"), s.id, reserved.model_copy(update={"input_tokens": 10}))
    with store.db.read() as conn:
        assert rows.charged(conn, rows.in_tree(s.tree_id), but="") == (10, 0.0)
    assert job.id == job_id
