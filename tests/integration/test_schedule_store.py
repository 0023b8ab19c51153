"""Issue 10: the schedule store and the fire path, without workers.

A fire admits its job and stops there: no worker runs it, so what the fire
itself did (the claim, the policy, the job it admitted, the entries it did
not write) is read back before anything else moves.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import chaz
from chaz.domain.entries import EntryType
from chaz.domain.schedules import FireOutcome
from chaz.errors import ScheduleNotFound
from chaz.usecases import schedules
from tests.support.stack import Stack

SLOT = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)


def test_a_slot_is_claimed_once_and_policies_are_kept(stack: Stack) -> None:
    client = stack.client
    svc = client.services
    book = svc.store.schedules
    client.agents.put(chaz.AgentSpec(id="bot", script=[{"steps": [{"say": "ok"}]}]))
    client.agents.put(chaz.AgentSpec(id="other", script=[{"steps": [{"say": "ok"}]}]))
    s = client.sessions.create("bot")
    pinned = {"kind": "interval", "interval_seconds": 60, "prompt": "tick", "target": "pinned"}
    skip = book.add("bot", {**pinned, "session_id": s.id})
    assert skip.next_slot is not None

    # Concurrent claims of one slot: exactly one wins.
    won: list[object] = []
    barrier = threading.Barrier(8)

    def claim() -> None:
        barrier.wait()
        won.append(book.claim(skip.id, SLOT))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len([w for w in won if w is not None]) == 1
    assert len(book.fires(skip.id)) == 1
    assert book.get(skip.id).fires == 1

    # An idle pinned session: the fire admits a job with the prompt as its
    # input and writes no entry at all.
    fired = schedules.fire(svc, skip.id, SLOT + timedelta(minutes=1))
    assert fired.outcome == "admitted" and fired.job is not None
    assert fired.job.input == "tick" and fired.job.trigger_entry_id is None
    assert fired.job.fire_id == fired.fire.id if fired.fire else False
    assert client.sessions.entries(s.id) == []
    assert schedules.fire(svc, skip.id, SLOT + timedelta(minutes=1)).outcome == "unclaimed"
    # Busy now (its job waits): skip records the slot as skipped...
    busy = schedules.fire(svc, skip.id, SLOT + timedelta(minutes=2))
    assert busy.outcome == "skipped" and busy.job is None
    ledger = {f.slot: f for f in book.fires(skip.id)}
    assert ledger[SLOT + timedelta(minutes=2)].outcome is FireOutcome.SKIPPED
    assert ledger[SLOT + timedelta(minutes=1)].job_id == fired.job.id
    # ...and queue admits it behind the waiting job.
    queue = book.add("bot", {**pinned, "session_id": s.id, "overlap": "queue"})
    queued = schedules.fire(svc, queue.id, SLOT)
    assert queued.outcome == "admitted" and queued.job is not None
    assert [j.id for j in client.sessions.queue(s.id)] == [fired.job.id, queued.job.id]
    assert [e.type for e in client.sessions.entries(s.id)] == []

    # Another agent neither sees nor changes it.
    assert book.list("other") == []
    try:
        book.update(skip.id, {"enabled": False}, owner="other")
        raise AssertionError("another agent changed the schedule")
    except ScheduleNotFound:
        pass

    # Failures: the limit disables the schedule and keeps the last error.
    fresh = book.add("bot", {**pinned, "target": "fresh", "max_failures": 2})
    for i in range(2):
        f = book.claim(fresh.id, SLOT + timedelta(hours=i))
        assert f is not None
        book.settle(f.id, FireOutcome.FAILED, error={"code": "model.error", "message": f"#{i}"})
    off = book.get(fresh.id)
    assert not off.enabled and off.failures == 2
    assert off.last_error == {"code": "model.error", "message": "#1"}
    assert off.disabled_reason
    assert book.claim(fresh.id, SLOT + timedelta(hours=5)) is None  # off: claims nothing
    resumed = book.update(fresh.id, {"enabled": True})
    assert resumed.enabled and resumed.failures == 0 and resumed.disabled_reason is None

    # A fresh target makes a session per fire, named from the schedule and slot.
    made = schedules.fire(svc, fresh.id, SLOT + timedelta(days=1))
    assert made.outcome == "admitted" and made.session_id not in (None, s.id)
    new = client.sessions.get(made.session_id or "")
    assert new.agent_id == "bot" and new.name == f"schedule-{fresh.id}-20260502T090000Z"

    # An archived pinned session disables its schedule with a reason.
    client.sessions.archive(s.id, "done")
    gone = schedules.fire(svc, skip.id, SLOT + timedelta(minutes=3))
    assert gone.outcome == "refused"
    assert not book.get(skip.id).enabled
    assert "archived" in (book.get(skip.id).disabled_reason or "")
    assert EntryType.DIRECTIVE not in {e.type for e in client.sessions.entries(s.id)}


def test_a_fire_that_died_after_its_claim_is_admitted_once_by_the_reconciler(
    stack: Stack,
) -> None:
    from chaz.usecases.reconcile import Reconciler

    client = stack.client
    svc = client.services
    book = svc.store.schedules
    client.agents.put(chaz.AgentSpec(id="bot", script=[{"steps": [{"say": "ok"}]}]))
    s = client.sessions.create("bot")
    every = book.add(
        "bot",
        {"kind": "interval", "interval_seconds": 60, "prompt": "tick", "session_id": s.id},
    )
    # The beat claimed the slot, then its chaz.fire message was lost (or the
    # fire task's worker died after the claim): a claimed fire with no job.
    claimed = book.claim(every.id, SLOT)
    assert claimed is not None and claimed.job_id is None
    report = Reconciler(svc, grace_seconds=0).run()
    assert report.fires == 1
    fire = next(f for f in book.fires(every.id) if f.slot == SLOT)
    assert fire.job_id is not None and fire.session_id == s.id
    job = client.jobs.get(fire.job_id)
    assert job.input == "tick" and job.fire_id == fire.id
    # Once: a second pass (or a slow first attempt racing it) admits nothing more.
    assert Reconciler(svc, grace_seconds=0).run().fires == 0
    schedules._fire_pinned(svc, book.get(every.id), claimed)  # the slow first attempt
    assert schedules.fire(svc, every.id, SLOT).outcome == "unclaimed"  # a late message
    assert [j.id for j in client.sessions.queue(s.id)] == [job.id]
    again = next(f for f in book.fires(every.id) if f.slot == SLOT)
    assert (again.job_id, again.outcome) == (job.id, FireOutcome.ADMITTED)


def test_the_beat_claims_before_it_sends_and_the_task_admits_the_claimed_fire(
    stack: Stack,
) -> None:
    client = stack.client
    svc = client.services
    book = svc.store.schedules
    client.agents.put(chaz.AgentSpec(id="bot", script=[{"steps": [{"say": "ok"}]}]))
    s = client.sessions.create("bot")
    every = book.add(
        "bot",
        {
            "kind": "interval",
            "interval_seconds": 60,
            "prompt": "tick",
            "session_id": s.id,
            "run_at": SLOT.isoformat(),
        },
    )
    sent: list[tuple[str, datetime]] = []
    # Two beats look at the same moment: one claims and sends the slot.
    assert schedules.send_due(svc, lambda i, t: sent.append((i, t)), SLOT) == [(every.id, SLOT)]
    assert schedules.send_due(svc, lambda i, t: sent.append((i, t)), SLOT) == []
    assert book.fire_at(every.id, SLOT) is not None and len(sent) == 1
    # The task then admits the fire the beat claimed; a redelivery does nothing.
    first = schedules.fire(svc, every.id, SLOT)
    assert first.outcome == "admitted" and first.job is not None
    assert schedules.fire(svc, every.id, SLOT).outcome == "unclaimed"
    assert [j.id for j in client.sessions.queue(s.id)] == [first.job.id]
