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

import json
from typing import Any

import pytest

import chaz
import chaz.errors
from chaz.coord import keys
from chaz.domain.entries import EntryType
from chaz.settings import ModelPrice
from tests.acceptance.test_cli import chaz_cli, ok
from tests.support.fake_openai import CannedResponse, FakeOpenAI
from tests.support.stack import Stack

pytest_plugins = ["tests.support.producers"]

#: What the turn would sleep for without its budget.
LONG = 60
#: How long a worker may take to start and end the turn on a loaded machine.
WAIT = 40


def _run(
    stack: Stack, client: chaz.Client, agent: str, steps: list[dict[str, Any]], **limits: int
) -> chaz.Job:
    """Post to a new session of ``agent`` through ``client`` and wait for its job's end."""
    stack.workers(1, concurrency=2)
    stack.client.agents.put(
        chaz.AgentSpec(
            id=agent, tools=["echo"], script=[{"steps": steps}], limits=chaz.Limits(**limits)
        )
    )
    s = client.sessions.create(agent)
    posted = client.sessions.post(s.id, "go", sender="user:alice")
    return client.jobs.wait(posted.job_id or "", timeout=WAIT)


def _ended_by(stack: Stack, client: chaz.Client, job: chaz.Job, code: str) -> None:
    """The job failed with ``code``: an Error entry, and no reply after it."""
    assert job.status is chaz.JobStatus.FAILED, stack.logs()
    assert job.error is not None and job.error["code"] == code
    entries = client.sessions.entries(job.session_id)
    assert not [e for e in entries if e.type is EntryType.MESSAGE and e.sender.startswith("agent:")]
    [error] = [e for e in entries if e.type is EntryType.ERROR]
    assert error.metadata["code"] == code and error.job_id == job.id


def test_a_turns_usage_is_summed_over_its_steps_and_shown_on_its_job(
    stack: Stack, producer: chaz.Client
) -> None:
    job = _run(
        stack,
        producer,
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
    assert producer.jobs.get(job.id).usage == job.usage


def test_a_turn_past_its_token_budget_ends_budget_tokens(
    stack: Stack, producer: chaz.Client
) -> None:
    job = _run(
        stack,
        producer,
        "spender",
        [
            {"call": "echo", "args": {"text": "a"}, "usage": {"input": 20, "output": 10}},
            # Asked for at most 100 - 30 - 20 (the last prompt) = 50 output
            # tokens; its prompt grew by 30, so 30 + 90 > 100: this step's
            # answer is neither run nor replied.
            {"say": "never said", "usage": {"input": 50, "output": 40}},
        ],
        max_tokens_per_turn=100,
    )
    _ended_by(stack, producer, job, "budget.tokens")
    assert job.usage is not None and job.usage.tokens == 120


def test_a_turn_idle_past_its_budget_is_cut(stack: Stack, producer: chaz.Client) -> None:
    steps: list[dict[str, Any]] = [{"sleep": LONG}, {"say": "too late"}]
    job = _run(stack, producer, "idler", steps, max_idle_seconds=1)
    _ended_by(stack, producer, job, "budget.idle")


def test_a_turn_running_past_its_budget_is_cut(stack: Stack, producer: chaz.Client) -> None:
    # A tool result every second keeps it from idling: only its runtime
    # (twenty seconds of steps in all) can end it.
    steps: list[dict[str, Any]] = [{"sleep": 1}, {"call": "echo", "args": {"text": "x"}}] * 20
    job = _run(
        stack,
        producer,
        "runner",
        [*steps, {"say": "too late"}],
        max_runtime_seconds=2,
        max_idle_seconds=5,
    )
    _ended_by(stack, producer, job, "budget.runtime")


# -- cumulative budgets, cost and a child's reservation (docs/runtime.md#budgets)

#: What the fleet's workers price the scripted model at, per million tokens.
PRICES = {"scripted": {"input_per_million": 1000.0, "output_per_million": 4000.0}}


@pytest.fixture(scope="module")
def fleet(module_stack: Stack) -> Stack:
    """One worker of two turn threads that prices the scripted model."""
    prices = {model: ModelPrice(**price) for model, price in PRICES.items()}
    priced = module_stack.settings.model_copy(update={"model_prices": prices})
    module_stack.settings = priced
    module_stack.workers(1, concurrency=2, settings=priced)
    return module_stack


def _agent(client: chaz.Client, agent: str, steps: list[dict[str, Any]], **limits: Any) -> None:
    client.agents.put(
        chaz.AgentSpec(
            id=agent,
            tools=["echo", "spawn_agent"],
            script=[{"steps": steps}],
            limits=chaz.Limits(**limits),
        )
    )


def _post(client: chaz.Client, session_id: str) -> chaz.Job:
    posted = client.sessions.post(session_id, "go", sender="user:alice")
    return client.jobs.wait(posted.job_id or "", timeout=WAIT)


def test_a_session_past_its_cumulative_budget_ends_its_turns_and_costs_are_priced(
    fleet: Stack, producer: chaz.Client, producer_env: dict[str, str]
) -> None:
    client = producer
    steps = [{"say": "ok", "usage": {"input": 50, "output": 30}}]
    _agent(fleet.client, "saver", steps, max_tokens_per_session=100)
    s = client.sessions.create("saver")
    first = _post(client, s.id)
    assert first.status is chaz.JobStatus.SUCCEEDED, fleet.logs()
    # 50 input and 30 output tokens at 1000 and 4000 per million.
    assert first.usage is not None and first.usage.cost == pytest.approx(0.17)
    # 80 spent, 20 left: this turn asks for at most 20 output tokens, is cut
    # there, and its prompt's 50 crosses the bound: its answer unsaid.
    second = _post(client, s.id)
    _ended_by_in(fleet, client, second, "budget.tokens")
    assert second.usage is not None and second.usage.tokens == 70
    # Nothing left: the next turn ends before its first step.
    third = _post(client, s.id)
    assert third.status is chaz.JobStatus.FAILED and third.error is not None
    assert third.error["code"] == "budget.tokens"
    assert third.usage is not None and third.usage.tokens == 0
    total = client.jobs.totals(session_id=s.id)
    assert (total.tokens, total.jobs) == (150, 3)
    assert total.cost == pytest.approx(0.30)
    assert client.jobs.totals() == total  # the tenant's project holds this session only
    for bad in ({"tree_id": ""}, {"session_id": s.id, "tree_id": s.tree_id}):
        with pytest.raises(chaz.errors.ValidationError) as refused:
            client.jobs.totals(**bad)
        assert refused.value.field == "tree_id"
    # The CLI reads the same sums.
    env = producer_env
    shown = json.loads(ok(chaz_cli("--json", "jobs", "usage", "--session", s.id, env=env)))
    assert (shown["tokens"], shown["jobs"]) == (150, 3)
    both = chaz_cli("jobs", "usage", "--session", s.id, "--tree", s.tree_id, env=env)
    assert both.returncode == 2


def test_a_child_whose_caller_has_100_tokens_left_cannot_spend_500(
    fleet: Stack, producer: chaz.Client
) -> None:
    client = producer
    # It would spend 500; it is asked for at most the 100 it was handed.
    _agent(fleet.client, "big-child", [{"say": "spent", "usage": {"output": 500}}])
    parent_steps: list[dict[str, Any]] = [
        # 200 of the turn's 300 spent before it spawns: 100 left to hand on.
        {
            "call": "spawn_agent",
            "args": {"agent_id": "big-child", "task": "t"},
            "usage": {"input": 150, "output": 50},
        },
        {"say": "parent got: {last_result}"},
    ]
    _agent(fleet.client, "thrifty", parent_steps, max_tokens_per_turn=300)
    s = client.sessions.create("thrifty")
    parent = _post(client, s.id)
    [child] = [j for j in client.jobs.list() if j.parent_job_id == parent.id]
    assert child.status is chaz.JobStatus.FAILED and child.error is not None, fleet.logs()
    assert child.error["code"] == "budget.tokens", child.error
    assert child.usage is not None and child.usage.reserved_tokens == 100
    # Cut at its cap: it spent its reservation and no more, and wrote no reply.
    assert child.usage.tokens == 100
    assert child.error["details"]["asked"] == 100
    _ended_by_in(fleet, client, child, "budget.tokens")
    # What the child spent is its caller's: 200 + 100 leaves the caller
    # nothing, so it ends before its next model call, without a reply.
    _ended_by_in(fleet, client, parent, "budget.tokens")
    assert parent.error is not None and parent.error["details"]["children"] == 100
    assert parent.usage is not None and parent.usage.tokens == 200
    tree = client.jobs.totals(tree_id=s.tree_id)
    assert (tree.tokens, tree.jobs) == (300, 2)


def test_an_openai_step_asks_for_what_the_turn_has_left_and_an_answer_cut_there_ends_it(
    fleet: Stack, producer: chaz.Client
) -> None:
    client = producer
    with FakeOpenAI(model="fake-model") as srv:
        fleet.client.agents.put(
            chaz.AgentSpec(
                id="capped-gpt",
                model="openai:fake-model",
                tools=["echo"],
                options={"base_url": srv.base_url, "api_key": "unused", "max_retries": 0},
                limits=chaz.Limits(max_tokens_per_turn=100),
            )
        )
        srv.push(
            CannedResponse(
                message={"role": "assistant", "content": None, "tool_calls": [_ECHO]},
                finish_reason="tool_calls",
                usage=(20, 10),
            )
        )
        # 100 - 30 spent - the 20-token prompt: 50 asked, 50 generated.
        srv.push(
            CannedResponse(
                message={"role": "assistant", "content": "an answer cut sh", "refusal": None},
                finish_reason="length",
                usage=(25, 50),
            )
        )
        s = client.sessions.create("capped-gpt")
        job = _post(client, s.id)
        assert [r["max_tokens"] for r in srv.requests] == [100, 50]
    _ended_by_in(fleet, client, job, "budget.tokens")
    assert job.usage is not None and job.usage.tokens == 105


#: The tool call the fake model's first answer makes.
_ECHO = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "echo", "arguments": '{"text": "x"}'},
}


def test_a_childs_spend_is_charged_to_its_caller_while_it_runs_and_after(
    fleet: Stack, producer: chaz.Client
) -> None:
    client = producer
    _agent(fleet.client, "small-child", [{"say": "spent", "usage": {"input": 100, "output": 50}}])
    parent_steps: list[dict[str, Any]] = [
        {
            "call": "spawn_agent",
            "args": {"agent_id": "small-child", "task": "t"},
            "usage": {"input": 80, "output": 20},
        },
        # 100 own + 150 the child used leaves 50, less than the last prompt's
        # 80: the turn ends before this call. Without the child's share it
        # would have asked for 120 tokens, spent 200 and replied.
        {"say": "never said", "usage": {"input": 90, "output": 10}},
    ]
    _agent(fleet.client, "sharer", parent_steps, max_tokens_per_turn=300)
    s = client.sessions.create("sharer")
    parent = _post(client, s.id)
    [child] = [j for j in client.jobs.list() if j.parent_job_id == parent.id]
    assert child.status is chaz.JobStatus.SUCCEEDED, fleet.logs()
    assert child.usage is not None and child.usage.reserved_tokens == 200
    _ended_by_in(fleet, client, parent, "budget.tokens")
    assert parent.usage is not None and parent.usage.tokens == 100  # its own, not the child's
    assert parent.error is not None and parent.error["details"]["children"] == 150


def _ended_by_in(stack: Stack, client: chaz.Client, job: chaz.Job, code: str) -> None:
    """As :func:`_ended_by`, in a session that may hold earlier turns' replies."""
    assert job.status is chaz.JobStatus.FAILED, stack.logs()
    assert job.error is not None and job.error["code"] == code
    entries = client.sessions.entries(job.session_id)
    replies = [e for e in entries if e.type is EntryType.MESSAGE and e.sender.startswith("agent:")]
    assert not [e for e in replies if e.job_id == job.id]
    [error] = [e for e in entries if e.type is EntryType.ERROR and e.job_id == job.id]
    assert error.metadata["code"] == code


def test_a_project_past_its_tokens_per_minute_is_refused_with_retry_after(
    fleet: Stack, producer: chaz.Client
) -> None:
    client = producer
    project = client.principal.project
    # The project's limits, its bucket in Redis: an operator's, on the fleet's client.
    fleet.client.projects.set_limits(project, tokens_per_minute=100)
    _agent(fleet.client, "gulper", [{"say": "ok", "usage": {"input": 400, "output": 100}}])
    s = client.sessions.create("gulper")
    # Tokens are known only once the turn has spent them: it runs to its reply.
    first = _post(client, s.id)
    assert first.status is chaz.JobStatus.SUCCEEDED, fleet.logs()
    bucket = keys.project_tokens(project)
    redis = fleet.client.services.redis

    def in_debt() -> bool:
        held = redis.hget(bucket, "tokens")
        return held is not None and float(held) < 0

    fleet.wait_for(in_debt, WAIT, "the turn's tokens debited from its project's bucket")
    with pytest.raises(chaz.errors.ProjectRateExceeded) as info:
        client.sessions.post(s.id, "again", sender="user:alice")
    assert info.value.code == "quota.project_rate"
    # 400 tokens of debt at 100 a minute: about four minutes.
    assert 200 < info.value.details["retry_after"] <= 240
    assert len(client.jobs.list(session_id=s.id)) == 1


def test_a_project_past_its_cumulative_budget_ends_its_turns(
    fleet: Stack, producer: chaz.Client
) -> None:
    client = producer
    project = client.principal.project
    # At 1000 and 4000 per million a turn of 60 + 20 tokens costs 0.14.
    shown = fleet.client.projects.set_limits(project, max_tokens=1000, max_cost=0.2)
    assert (shown.effective_max_tokens, shown.effective_max_cost) == (1000, 0.2)
    _agent(fleet.client, "spendthrift", [{"say": "ok", "usage": {"input": 60, "output": 20}}])
    # Three sessions: only the project's limit binds them together.
    first = _post(client, client.sessions.create("spendthrift").id)
    assert first.status is chaz.JobStatus.SUCCEEDED, fleet.logs()
    second = _post(client, client.sessions.create("spendthrift").id)
    _ended_by_in(fleet, client, second, "budget.cost")
    assert second.error is not None and second.error["details"]["scope"] == "project"
    # 0.28 spent of 0.2: the next turn ends before its first step.
    third = _post(client, client.sessions.create("spendthrift").id)
    assert third.error is not None and third.error["code"] == "budget.cost", third.error
    assert third.usage is not None and third.usage.tokens == 0
    assert client.jobs.totals().cost == pytest.approx(0.28)
