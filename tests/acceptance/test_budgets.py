"""Per-turn budgets and usage (docs/runtime.md#per-turn-budgets).

A scripted agent's steps report tokens (``usage``), which the job shows;
one past ``max_tokens_per_turn`` ends ``budget.tokens`` before its answer is
acted on. A turn blocked in a ``sleep`` past ``max_idle_seconds`` or
``max_runtime_seconds`` is cut by its worker's cancel watcher, as a cancel
cuts it. Every sleep here is far longer than the time allowed for the job
to end, so a job that ended in time was cut; no assertion rests on a tight
wall-time bound.
"""

from __future__ import annotations

from typing import Any

import chaz
from chaz.domain.entries import EntryType
from tests.support.stack import Stack

#: What the turn would sleep for without its budget.
LONG = 60
#: How long a worker may take to start and end the turn on a loaded machine.
WAIT = 40


def _run(stack: Stack, agent: str, steps: list[dict[str, Any]], **limits: int) -> chaz.Job:
    """Post to a new session of ``agent`` and wait for its job's end."""
    stack.workers(1, concurrency=2)
    client = stack.client
    client.agents.put(
        chaz.AgentSpec(
            id=agent, tools=["echo"], script=[{"steps": steps}], limits=chaz.Limits(**limits)
        )
    )
    s = client.sessions.create(agent)
    posted = client.sessions.post(s.id, "go", sender="user:alice")
    return client.jobs.wait(posted.job_id or "", timeout=WAIT)


def _ended_by(stack: Stack, job: chaz.Job, code: str) -> None:
    """The job failed with ``code``: an Error entry, and no reply after it."""
    assert job.status is chaz.JobStatus.FAILED, stack.logs()
    assert job.error is not None and job.error["code"] == code
    entries = stack.client.sessions.entries(job.session_id)
    assert not [e for e in entries if e.type is EntryType.MESSAGE and e.sender.startswith("agent:")]
    [error] = [e for e in entries if e.type is EntryType.ERROR]
    assert error.metadata["code"] == code and error.job_id == job.id


def test_a_turns_usage_is_summed_over_its_steps_and_shown_on_its_job(stack: Stack) -> None:
    job = _run(
        stack,
        "counter",
        [
            {"call": "echo", "args": {"text": "hi"}, "usage": {"input": 100, "output": 20}},
            {"say": "done", "usage": {"input": 130, "output": 5}},
        ],
    )
    assert job.status is chaz.JobStatus.SUCCEEDED, stack.logs()
    assert job.usage is not None
    assert (job.usage.input_tokens, job.usage.output_tokens) == (230, 25)
    assert job.usage.runtime_seconds > 0
    assert stack.client.jobs.get(job.id).usage == job.usage


def test_a_turn_past_its_token_budget_ends_budget_tokens(stack: Stack) -> None:
    job = _run(
        stack,
        "spender",
        [
            {"call": "echo", "args": {"text": "a"}, "usage": {"input": 60, "output": 10}},
            # 70 + 50 > 100: this step's answer is neither run nor replied.
            {"say": "never said", "usage": {"input": 40, "output": 10}},
        ],
        max_tokens_per_turn=100,
    )
    _ended_by(stack, job, "budget.tokens")
    assert job.usage is not None and job.usage.tokens == 120


def test_a_turn_idle_past_its_budget_is_cut(stack: Stack) -> None:
    job = _run(stack, "idler", [{"sleep": LONG}, {"say": "too late"}], max_idle_seconds=1)
    _ended_by(stack, job, "budget.idle")


def test_a_turn_running_past_its_budget_is_cut(stack: Stack) -> None:
    # A tool result every second keeps it from idling: only its runtime
    # (twenty seconds of steps in all) can end it.
    steps: list[dict[str, Any]] = [{"sleep": 1}, {"call": "echo", "args": {"text": "x"}}] * 20
    job = _run(
        stack, "runner", [*steps, {"say": "too late"}], max_runtime_seconds=2, max_idle_seconds=5
    )
    _ended_by(stack, job, "budget.runtime")
