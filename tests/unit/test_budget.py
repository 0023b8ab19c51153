"""A turn's per-turn budgets (docs/runtime.md#per-turn-budgets), on a fake clock."""

from __future__ import annotations

import pytest

from chaz.domain.agents import Limits
from chaz.domain.budgets import Allowance
from chaz.domain.jobs import Usage
from chaz.domain.script import ScriptStep
from chaz.errors import (
    IdleBudgetExceeded,
    RuntimeBudgetExceeded,
    TokenBudgetExceeded,
    ValidationError,
)
from chaz.runtime.backends.base import TokenCount, TurnContext
from chaz.runtime.backends.scripted import ScriptedBackend
from chaz.runtime.budget import Budget
from chaz.runtime.cancel import CancelToken


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_tokens_are_summed_from_what_earlier_attempts_recorded() -> None:
    budget = Budget(Limits(max_tokens_per_turn=100), Usage(input_tokens=50, output_tokens=10))
    budget.spent(TokenCount(input=30, output=10))
    budget.spent(None)  # a step that reports nothing costs nothing
    assert (budget.usage().input_tokens, budget.usage().output_tokens) == (80, 20)
    with pytest.raises(TokenBudgetExceeded) as crossed:
        budget.spent(TokenCount(output=1))
    assert crossed.value.code == "budget.tokens"
    assert budget.usage().tokens == 101


def test_runtime_counts_earlier_attempts_and_idle_restarts_at_activity() -> None:
    clock = Clock()
    budget = Budget(
        Limits(max_runtime_seconds=10, max_idle_seconds=3),
        Usage(runtime_seconds=5.0),
        clock=clock,
    )
    clock.now += 2.5
    budget.active()
    clock.now += 2.5
    assert budget.overrun() is None  # 5 s earlier + 5 s now; 2.5 s quiet
    assert budget.usage().runtime_seconds == 10.0
    clock.now += 0.6
    assert isinstance(budget.overrun(), RuntimeBudgetExceeded)


def test_idle_is_time_since_the_last_output_or_result() -> None:
    clock = Clock()
    budget = Budget(Limits(max_idle_seconds=3), clock=clock)
    clock.now += 2
    budget.spent(TokenCount())
    clock.now += 2
    assert budget.overrun() is None
    clock.now += 1.5
    error = budget.overrun()
    assert isinstance(error, IdleBudgetExceeded) and error.code == "budget.idle"


def test_a_polled_token_stops_with_the_budgets_error_and_wakes_a_sleep() -> None:
    clock = Clock()
    budget = Budget(Limits(max_idle_seconds=1), clock=clock)
    token = CancelToken()
    token.limit(budget.overrun)
    token.poll()
    assert not token.is_set()
    clock.now += 2
    token.poll()
    assert token.is_set()
    # Whatever waits on the token raises the budget's error, not job.cancelled.
    backend = ScriptedBackend.from_script(
        [{"steps": [{"sleep": 60}, {"say": "late"}]}], cancel=token
    )
    with pytest.raises(IdleBudgetExceeded):
        backend.complete([], [], TurnContext(session_id="s", job_id="j", trigger_content="x"))
    # A cancel after it does not replace it: the first stop stays.
    token.set()
    with pytest.raises(IdleBudgetExceeded):
        token.raise_if_set()


def test_a_scripted_step_reports_its_usage() -> None:
    backend = ScriptedBackend.from_script(
        [{"steps": [{"say": "hi", "usage": {"input": 7, "output": 2}}, {"say": "bye"}]}]
    )
    turn = TurnContext(session_id="s", job_id="j", trigger_content="x")
    assert backend.complete([], [], turn).usage == TokenCount(input=7, output=2)
    assert backend.complete([], [], turn.model_copy(update={"step": 1})).usage is None


def test_usage_goes_with_a_response_step_only() -> None:
    with pytest.raises(ValueError, match="usage goes with a response step"):
        ScriptStep.model_validate({"sleep": 1, "usage": {"input": 1}})


def test_the_per_turn_budgets_narrow_and_must_be_positive() -> None:
    agent = Limits(max_tokens_per_turn=1000, max_runtime_seconds=60)
    merged = agent.narrowed(Limits(max_tokens_per_turn=200, max_idle_seconds=5))
    assert (merged.max_tokens_per_turn, merged.max_runtime_seconds, merged.max_idle_seconds) == (
        200,
        60,
        5,
    )
    with pytest.raises(ValidationError):
        Limits(max_idle_seconds=0)


# -- the token cap a model step asks for (docs/runtime.md#the-token-cap)


def test_the_cap_is_what_the_tightest_bound_leaves_less_the_last_prompt() -> None:
    held = [(0, 0.0)]
    budget = Budget(
        Limits(max_tokens_per_turn=300),
        allowance=Allowance(tokens=250, tokens_scope="caller"),
        children=lambda: held[0],
    )
    assert budget.cap() == 250
    budget.spent(TokenCount(input=60, output=10), asked=250)
    # 250 - 70 spent, less the next prompt's floor of 60.
    assert budget.cap() == 120
    held[0] = (100, 0.0)
    assert budget.cap() == 20
    held[0] = (120, 0.0)
    with pytest.raises(TokenBudgetExceeded) as none_left:
        budget.cap()
    details = none_left.value.details
    assert (details["limit"], details["scope"], details["prompt"]) == (250, "caller", 60)
    assert details["children"] == 120
    # Nothing bounds tokens: no cap, and the children are not asked.
    free = Budget(children=lambda: (_ for _ in ()).throw(AssertionError))
    assert free.cap() is None


def test_an_answer_cut_at_the_cap_ends_the_turn_but_one_under_it_does_not() -> None:
    budget = Budget(Limits(max_tokens_per_turn=100))
    # Truncated by the agent's own, lower max_tokens: not the budget's doing.
    budget.spent(TokenCount(input=5, output=20), asked=100, truncated=True)
    with pytest.raises(TokenBudgetExceeded) as cut:
        budget.spent(TokenCount(input=5, output=50), asked=50, truncated=True)
    assert cut.value.details["asked"] == 50
    assert budget.usage().tokens == 80


def test_a_scripted_step_honours_the_cap_it_is_asked_for() -> None:
    backend = ScriptedBackend.from_script([{"steps": [{"say": "hi", "usage": {"output": 500}}]}])
    turn = TurnContext(session_id="s", job_id="j", trigger_content="x")
    free = backend.complete([], [], turn)
    assert (free.usage, free.truncated) == (TokenCount(output=500), False)
    capped = backend.complete([], [], turn.model_copy(update={"max_tokens": 100}))
    assert (capped.usage, capped.truncated) == (TokenCount(output=100), True)
    roomy = backend.complete([], [], turn.model_copy(update={"max_tokens": 500}))
    assert (roomy.usage, roomy.truncated) == (TokenCount(output=500), False)
