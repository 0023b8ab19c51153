"""Issue 10: agent-owned schedules fired by two real beat processes.

The issue's "60 seconds of one-second schedules" is 8 one-second slots here
(``max_fires=8``): the test ends when the outcome is in, not at a wall time.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

import chaz
from chaz.domain.entries import EntryType
from chaz.domain.jobs import JobStatus
from chaz.domain.schedules import FireOutcome, ScheduleFire
from chaz.domain.sessions import Origin
from chaz.ids import utcnow
from tests.support.stack import Stack

pytest_plugins = ["tests.support.producers"]

SLOTS = 8

PLANNER = chaz.AgentSpec(
    id="planner",
    tools=["schedule_once", "schedule_list", "schedule_update", "schedule_remove"],
    script=[
        {
            "match": "^plan",
            "steps": [
                {"call": "schedule_once", "args": {"prompt": "later", "in_seconds": 0}},
                {"say": "{last_result}"},
            ],
        },
        {"match": "^list", "steps": [{"call": "schedule_list"}, {"say": "{last_result}"}]},
        {
            "match": "^[0-9a-f]{16}$",
            "steps": [
                {"call": "schedule_remove", "args": {"schedule_id": "{input}"}},
                {"say": "{last_result}"},
            ],
        },
        {"steps": [{"say": "done: {input}"}]},
    ],
)

TICKER = chaz.AgentSpec(
    id="ticker",
    script=[
        {"match": "^quiet", "steps": [{"say": " "}]},
        {"match": "^boom", "steps": [{"fail": "boom at {input}"}]},
        {"steps": [{"say": "tock: {input}"}]},
    ],
)


def test_two_beats_fire_each_slot_once_through_the_standalone_path(
    stack: Stack, producer: chaz.Client
) -> None:
    client = producer
    stack.client.agents.put(TICKER)
    stack.client.agents.put(PLANNER)
    stack.workers(1, concurrency=4)
    # Two beat processes at once, each reading the schedules table.
    stack.housekeeper()
    stack.housekeeper()
    every: dict[str, Any] = {"kind": "interval", "interval_seconds": 1}

    ticks = client.schedules.add("ticker", **every, prompt="tick", max_fires=SLOTS)
    quiet_session = client.sessions.create("ticker")
    quiet = client.schedules.add(
        "ticker", **every, prompt="quiet", target="pinned", session_id=quiet_session.id, max_fires=1
    )
    boom_session = client.sessions.create("ticker")
    boom = client.schedules.add(
        "ticker", **every, prompt="boom", target="pinned", session_id=boom_session.id
    )

    # Downtime, as data: slots every 10 s from 55.5 s ago, so five slots were
    # missed before any beat looked (the latest 5.5 s late, not on time).
    start = utcnow()
    past: dict[str, Any] = {
        "kind": "interval",
        "interval_seconds": 10,
        "run_at": (start - timedelta(seconds=55.5)).isoformat(),
        "prompt": "tick",
    }
    catch_up = client.schedules.add("ticker", **past, missed="catch_up_once")
    skipping = client.schedules.add("ticker", **past, missed="skip")
    assert catch_up.next_slot is not None and catch_up.next_slot < start

    def settled(schedule_id: str, count: int) -> list[ScheduleFire] | None:
        fires = client.schedules.fires(schedule_id)
        done = [f for f in fires if f.outcome is not FireOutcome.ADMITTED]
        return fires if len(fires) >= count and len(done) == len(fires) else None

    # Exactly one fire per slot, each with one job, all through to the end.
    fires = stack.wait_for(lambda: settled(ticks.id, SLOTS), 90, "8 settled fires")
    assert fires is not None
    assert len(fires) == SLOTS
    assert len({f.slot for f in fires}) == SLOTS
    assert Counter(f.outcome for f in fires) == {FireOutcome.SUCCEEDED: SLOTS}, fires
    jobs = [client.jobs.get(f.job_id or "") for f in fires]
    assert len({j.id for j in jobs}) == SLOTS
    assert {j.status for j in jobs} == {JobStatus.SUCCEEDED}
    assert all(j.fire_id in {f.id for f in fires} for j in jobs)
    assert all(f.duration_ms is not None for f in fires)
    # The fires' turns are all there is: one job per fire, in fresh sessions.
    fired_sessions = {j.session_id for j in jobs}
    assert len(fired_sessions) == SLOTS
    for sid in fired_sessions:
        entries = client.sessions.entries(sid)
        # No Directive: the prompt was the turn's input; the reply is there.
        assert [e.type for e in entries] == [EntryType.ACK, EntryType.MESSAGE], entries
        assert entries[-1].content == "tock: tick"
        assert client.sessions.get(sid).origin is Origin.SCHEDULE
    assert client.schedules.get(ticks.id).fires == SLOTS

    # After the downtime: one catch-up fire (at the first missed slot), or none.
    stack.wait_for(
        lambda: (n := client.schedules.get(skipping.id).next_slot) and n > start, 30, "skip looked"
    )
    missed = [f for f in client.schedules.fires(skipping.id) if f.slot < start]
    assert missed == []
    caught = stack.wait_for(
        lambda: [f for f in client.schedules.fires(catch_up.id) if f.slot < start], 30, "catch-up"
    )
    assert [f.slot for f in caught] == [catch_up.next_slot]

    # An empty reply writes nothing: the job succeeded, and only its Ack is there.
    quiet_fires = stack.wait_for(lambda: settled(quiet.id, 1), 60, "the quiet fire")
    assert quiet_fires is not None
    (q,) = quiet_fires
    assert q.outcome is FireOutcome.SUCCEEDED
    assert client.jobs.get(q.job_id or "").status is JobStatus.SUCCEEDED
    assert [e.type for e in client.sessions.entries(quiet_session.id)] == [EntryType.ACK]

    # Three failing fires in a row disable the schedule, keeping the last error.
    off = stack.wait_for(
        lambda: (s := client.schedules.get(boom.id)) and not s.enabled and s, 90, "boom disabled"
    )
    assert off
    assert off.failures == 3 and off.disabled_reason
    failed = [f for f in client.schedules.fires(boom.id) if f.outcome is FireOutcome.FAILED]
    assert len(failed) == 3
    assert off.last_error is not None and off.last_error["code"] == "model.error"
    assert "boom at boom" in off.last_error["message"]
    entries = client.sessions.entries(boom_session.id)
    assert [e.type for e in entries].count(EntryType.ERROR) == 3
    assert EntryType.DIRECTIVE not in {e.type for e in entries}


@pytest.mark.parametrize("producer_principal", ["user:ann"])
def test_an_agent_schedules_itself_and_sees_only_its_own(
    stack: Stack, producer: chaz.Client
) -> None:
    client = producer
    stack.client.agents.put(PLANNER)
    stack.client.agents.put(PLANNER.model_copy(update={"id": "rival"}))
    stack.workers(1, concurrency=2)
    stack.housekeeper()
    s = client.sessions.create("planner")
    e = client.sessions.post(s.id, "plan", sender="user:ann")
    made = json.loads(client.sessions.wait_for_reply(s.id, after=e.seq, timeout=60).content)
    assert made["kind"] == "once" and made["session_id"] == s.id
    assert [x.id for x in client.schedules.list("planner")] == [made["id"]]
    # The once schedule fires in this session: its turn's input is the prompt.
    fire = stack.wait_for(
        lambda: [f for f in client.schedules.fires(made["id"]) if f.outcome.value == "succeeded"],
        60,
        "the once fire",
    )[0]
    assert client.jobs.get(fire.job_id or "").session_id == s.id
    last = client.sessions.entries(s.id)[-1]
    assert last.type is EntryType.MESSAGE and last.content == "done: later"
    assert EntryType.DIRECTIVE not in {x.type for x in client.sessions.entries(s.id)}
    # Another agent sees none of it and cannot remove it.
    r = client.sessions.create("rival")
    e = client.sessions.post(r.id, "list", sender="user:ann")
    assert client.sessions.wait_for_reply(r.id, after=e.seq, timeout=60).content == "[]"
    e = client.sessions.post(r.id, made["id"], sender="user:ann")
    client.sessions.wait_for_reply(r.id, after=e.seq, timeout=60)
    results = [x for x in client.sessions.entries(r.id) if x.type is EntryType.TOOL_RESULT]
    assert "schedule.not_found" in results[-1].content
    assert client.schedules.get(made["id"]).owner_agent_id == "planner"


def test_a_cancel_pauses_what_the_cancelled_turn_scheduled_and_it_fires_no_more(
    stack: Stack, producer: chaz.Client
) -> None:
    """docs/schedules.md#a-cancelled-creator: the turn adds a one-second
    schedule, then waits; its cancel pauses the schedule, which fires no
    more while a producer's one-second schedule beside it keeps firing."""
    client = producer
    every_second: dict[str, Any] = {"prompt": "tick", "interval_seconds": 1, "target": "fresh"}
    stack.client.agents.put(
        chaz.AgentSpec(
            id="eager",
            tools=["schedule_add"],
            script=[
                {"match": "^tick", "steps": [{"say": "tock"}]},
                {
                    "steps": [
                        {"call": "schedule_add", "args": every_second},
                        {"wait": "never-{session_id}", "timeout": 300},
                        {"say": "not said"},
                    ]
                },
            ],
        )
    )
    stack.workers(1, concurrency=3)
    stack.housekeeper()
    s = client.sessions.create("eager")
    job_id = client.sessions.post(s.id, "go", sender="user:alice").job_id or ""
    [added] = stack.wait_for(
        lambda: [x for x in client.schedules.list("eager") if x.job_id == job_id],
        60,
        "the turn's schedule",
    )
    outcome = client.jobs.cancel(job_id, reason="enough")
    assert outcome["paused"] == [added.id], outcome
    assert client.jobs.wait(job_id, timeout=60).status is JobStatus.CANCELLED
    paused = client.schedules.get(added.id)
    assert not paused.enabled and "was cancelled" in (paused.disabled_reason or "")
    before = {f.slot for f in client.schedules.fires(added.id)}
    # The beat keeps firing a schedule nobody cancelled: two of its slots
    # after the cancel, and still none of the paused one's.
    beside = client.schedules.add("eager", kind="interval", **every_second)
    stack.wait_for(
        lambda: len([f for f in client.schedules.fires(beside.id) if f.job_id]) >= 2,
        60,
        "two fires of the schedule beside it",
    )
    assert {f.slot for f in client.schedules.fires(added.id)} == before
