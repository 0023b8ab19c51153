"""What SIGTERM does to a worker mid-turn (a Kubernetes pod stopping; deploy/k8s).

SIGTERM starts Celery's warm shutdown: the worker takes no more turns and
waits for the ones it runs. Either the turn finishes inside the grace
period; or it outlives CHAZ_SHUTDOWN_GRACE_SECONDS and the worker hands it
back, and another worker resumes it at once without spending an attempt;
or the platform's SIGKILL ends the process first and another worker resumes
the turn from its checkpoint once the lease expires. Every way the turn
runs once: no completed step repeats, one reply. The turn waits on a
gate the test opens, so "mid-turn" is a known point, not a guess.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import chaz
from chaz.domain.entries import EntryType
from chaz.runtime.loop import Checkpoint
from chaz.stack import STOP_SECONDS, WorkerProcess, settings_env
from tests.support.stack import Stack

#: A turn that does one step, then holds at its session's gate until the test opens it.
HELD = chaz.AgentSpec(
    id="held",
    tools=["echo"],
    script=[
        {"match": "^quick", "steps": [{"echo": True}]},
        {
            "steps": [
                {"call": "echo", "args": {"text": "before"}},
                {"wait": "go-{session_id}", "timeout": 300},
                {"say": "after {last_result}"},
            ]
        },
    ],
)
WAIT = 60


def _node(worker: WorkerProcess) -> str:
    return f"{worker.name}@{socket.gethostname()}"


def _probe(stack: Stack, worker: WorkerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **settings_env(stack.settings)}
    return subprocess.run(
        [sys.executable, "-m", "chaz.cli", "probe", "worker", "--node", _node(worker), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _held_turn(stack: Stack) -> tuple[chaz.Session, chaz.Entry]:
    """A turn past its first tool call, now waiting at its gate."""
    client = stack.client
    client.agents.put(HELD)
    s = client.sessions.create("held")
    posted = client.sessions.post(s.id, "hold on", sender="user:alice")
    stack.wait_for(
        lambda: any(e.type is EntryType.TOOL_RESULT for e in client.sessions.entries(s.id)),
        WAIT,
        "the echo step done",
    )
    return s, posted


def _shutting_down(stack: Stack, worker: WorkerProcess) -> None:
    """SIGTERM, then wait until the worker says it is in warm shutdown."""
    worker.kill(signal.SIGTERM)
    stack.wait_for(
        lambda: "shutting down" in _probe(stack, worker).stderr, WAIT, "warm shutdown to begin"
    )
    # Unready (no new work), yet live: a liveness probe must not kill it mid-grace.
    assert _probe(stack, worker, "--live").returncode == 0


def _ran_once(stack: Stack, s: chaz.Session, posted: chaz.Entry) -> list[chaz.Entry]:
    client = stack.client
    reply = client.sessions.wait_for_reply(s.id, after=posted.seq, timeout=WAIT)
    assert reply.type is EntryType.MESSAGE and reply.content == "after before", reply
    mine = [e for e in client.sessions.entries(s.id) if e.job_id == posted.job_id]
    assert [e.metadata.get("tool") for e in mine if e.type is EntryType.TOOL_CALL] == ["echo"]
    assert [e.type for e in mine].count(EntryType.MESSAGE) == 2  # the trigger and one reply
    assert client.jobs.get(posted.job_id or "").status is chaz.JobStatus.SUCCEEDED
    return mine


def test_sigterm_lets_the_running_turn_finish_and_takes_no_new_one(stack: Stack) -> None:
    [first] = stack.workers(1, concurrency=1, queues="chaz.turns")
    s, posted = _held_turn(stack)
    [second] = stack.workers(1, concurrency=1, queues="chaz.turns")
    _shutting_down(stack, first)

    # New work goes to the other worker while the first finishes its turn.
    client = stack.client
    other = client.sessions.create("held")
    quick = client.sessions.post(other.id, "quick one", sender="user:bob")
    assert client.sessions.wait_for_reply(other.id, after=quick.seq, timeout=WAIT).content == (
        "quick one"
    )
    [ack] = [e for e in client.sessions.entries(other.id) if e.type is EntryType.ACK]
    assert ack.metadata["pid"] == second.pid

    stack.open_gate(f"go-{s.id}")
    mine = _ran_once(stack, s, posted)
    assert [e.metadata["pid"] for e in mine if e.type is EntryType.ACK] == [first.pid]
    assert client.jobs.get(posted.job_id or "").attempts == 1
    assert first.proc is not None and first.proc.wait(WAIT) == 0  # a clean exit


def test_a_turn_outliving_the_grace_period_resumes_elsewhere_once(stack: Stack) -> None:
    [first] = stack.workers(1, concurrency=1, queues="chaz.turns")
    s, posted = _held_turn(stack)
    [second] = stack.workers(1, concurrency=1, queues="chaz.turns")
    _shutting_down(stack, first)
    # terminationGracePeriodSeconds ran out: the kubelet's SIGKILL.
    first.kill(signal.SIGKILL)
    assert first.proc is not None
    first.proc.wait(WAIT)
    stack.open_gate(f"go-{s.id}")

    mine = _ran_once(stack, s, posted)
    acks = [e for e in mine if e.type is EntryType.ACK]
    assert [e.content for e in acks] == ["processing", "resumed: attempt 2"]
    assert [e.metadata["pid"] for e in acks] == [first.pid, second.pid]
    assert stack.client.jobs.get(posted.job_id or "").attempts == 2


def test_a_turn_outliving_the_shutdown_grace_is_handed_back_and_resumed_at_once(
    stack: Stack,
) -> None:
    # A 1 s grace, and a lease far longer than the test may take: a resume
    # within WAIT cannot have waited for the lease to expire.
    quick = stack.settings.model_copy(
        update={"shutdown_grace_seconds": 1.0, "lease_seconds": 600.0}
    )
    [first] = stack.workers(1, concurrency=1, queues="chaz.turns", settings=quick)
    s, posted = _held_turn(stack)
    [second] = stack.workers(1, concurrency=1, queues="chaz.turns")
    client = stack.client
    first.kill(signal.SIGTERM)
    # The gate is still shut: the first worker exits because it handed the
    # turn back, cleanly, and nobody sends it a SIGKILL.
    assert first.proc is not None and first.proc.wait(WAIT) == 0
    resumed = stack.wait_for(
        lambda: [
            e
            for e in client.sessions.entries(s.id)
            if e.type is EntryType.ACK and e.metadata.get("resumed")
        ],
        WAIT,
        "the second worker to resume the turn",
    )
    assert [e.metadata["pid"] for e in resumed] == [second.pid]
    stack.open_gate(f"go-{s.id}")

    mine = _ran_once(stack, s, posted)  # the echo step once, one reply
    acks = [e for e in mine if e.type is EntryType.ACK]
    # The resume spent no attempt: it is still the first.
    assert [e.content for e in acks] == ["processing", "resumed: attempt 1"]
    assert [e.metadata["pid"] for e in acks] == [first.pid, second.pid]
    assert not [e for e in mine if e.type is EntryType.ERROR]
    # Two starts, one of them a hand-back's resume: one attempt counted.
    job = client.jobs.get(posted.job_id or "")
    cp = Checkpoint.from_json(client.services.store.checkpoint(job.id))
    assert (job.attempts, job.starts, cp.handbacks) == (1, 2, 1)


def test_a_stop_deadline_hands_the_turn_back_before_the_kill(stack: Stack) -> None:
    # What `chaz up` and `chaz.embedded()` do on Ctrl-C: they stop their
    # worker with a deadline (15 s), and the worker's 240 s shutdown grace is
    # cut to fit, so the turn it holds is handed back, not killed mid-step.
    assert stack.settings.shutdown_grace_seconds > STOP_SECONDS
    client = stack.client
    first = WorkerProcess(
        stack.settings,
        concurrency=1,
        queues="chaz.turns",
        log_file=stack.settings.home / "worker-deadline.log",
        stop_deadline=STOP_SECONDS,
    ).start()
    try:
        first.wait_ready(client)
        s, posted = _held_turn(stack)
        proc = first.proc
        assert proc is not None
        first.stop()
        # The worker ended on its own (the hand-back), before the deadline's SIGKILL.
        assert proc.returncode == 0, (stack.settings.home / "worker-deadline.log").read_text()
    finally:
        first.stop()
    job = client.jobs.get(posted.job_id or "")
    cp = Checkpoint.from_json(client.services.store.checkpoint(job.id))
    assert (job.status, cp.handbacks) == (chaz.JobStatus.RUNNING, 1)
    [second] = stack.workers(1, concurrency=1, queues="chaz.turns")
    stack.open_gate(f"go-{s.id}")
    mine = _ran_once(stack, s, posted)
    acks = [e for e in mine if e.type is EntryType.ACK]
    assert [e.metadata["pid"] for e in acks][1:] == [second.pid]
    job = client.jobs.get(job.id)
    cp = Checkpoint.from_json(client.services.store.checkpoint(job.id))
    assert (job.attempts, job.starts) == (1, 2)  # the hand-back's resume spent none
