"""A cancel committed after a turn's last look at its token still wins.

The turn checks its cancel token just before it commits its reply; a cancel
can commit between that check and the reply (the cancel watcher polls). The
reply's end is a compare-and-set that requires ``running``, so it finds the
job ``stopping``, writes no reply and ends the job ``cancelled``
(docs/contracts.md#cancel). The test opens that window on purpose: it moves
the job to ``stopping`` in the database only, with no cancel flag, so
neither the watcher nor the step-boundary check can see it.
"""

from __future__ import annotations

import threading

import chaz
from chaz.domain.entries import EntryType
from chaz.domain.jobs import JobStatus
from chaz.usecases import completion
from chaz.usecases.turns import TurnRunner
from tests.support.stack import Stack

AGENT = chaz.AgentSpec(
    id="window", script=[{"steps": [{"wait": "window-{session_id}"}, {"say": "too late"}]}]
)


def test_a_reply_committing_after_the_cancel_is_not_written(stack: Stack) -> None:
    client = stack.client
    client.agents.put(AGENT)
    s = client.sessions.create("window")
    job_id = client.sessions.post(s.id, "go").job_id
    assert job_id is not None
    runner = TurnRunner(client.services, client.tools)
    turn = threading.Thread(target=runner.wake, args=(s.id, job_id))
    turn.start()
    try:
        stack.wait_for(
            lambda: client.jobs.get(job_id).status is JobStatus.RUNNING, 30, "the turn to start"
        )
        # The cancel, as the database sees it, without the flag the turn watches.
        client.services.store.transition(job_id, JobStatus.STOPPING, completion=completion.ended)
    finally:
        stack.open_gate(f"window-{s.id}")
        turn.join(timeout=60)
    assert not turn.is_alive()
    job = client.jobs.get(job_id)
    assert job.status is JobStatus.CANCELLED
    entries = client.sessions.entries(s.id)
    assert not [e for e in entries if e.type is EntryType.MESSAGE and e.sender == "agent:window"]
    [error] = [e for e in entries if e.type is EntryType.ERROR]
    assert error.metadata["code"] == "job.cancelled" and error.job_id == job_id
