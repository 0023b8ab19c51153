"""The cumulative budgets' rules (docs/runtime.md#budgets): prices, charges,
allowances and a child's reservation, and a turn's Budget bounded by them."""

from __future__ import annotations

import pytest

from chaz.domain import budgets
from chaz.domain.agents import Limits
from chaz.domain.budgets import Allowance, BudgetRead, Spent
from chaz.domain.jobs import JobStatus, Usage
from chaz.errors import CostBudgetExceeded, TokenBudgetExceeded, ValidationError
from chaz.runtime.backends.base import TokenCount
from chaz.runtime.budget import Budget
from chaz.settings import ModelPrice, Settings

PRICE = ModelPrice(input_per_million=2.0, output_per_million=8.0)


def test_a_model_is_priced_as_written_else_by_its_name_and_unlisted_costs_nothing() -> None:
    prices = {
        "gpt-4o": PRICE,
        "openai:special": ModelPrice(input_per_million=1, output_per_million=1),
    }
    assert budgets.price_of(prices, "openai:gpt-4o") is PRICE
    assert budgets.price_of(prices, "openai:special") == prices["openai:special"]
    assert budgets.price_of(prices, "scripted") is None
    assert budgets.cost_of(PRICE, 1_000_000, 500_000) == 6.0
    assert budgets.cost_of(None, 10**6, 10**6) == 0.0


@pytest.mark.parametrize(
    "raw",
    ["{bad", '{"m": {"input_per_million": -1, "output_per_million": 1}}', '{"m": {"x": 1}}', "[1]"],
)
def test_a_bad_price_table_is_refused_when_settings_load(raw: str) -> None:
    import pydantic

    with pytest.raises(pydantic.ValidationError):
        Settings(_env_file=None, model_prices=raw)


def test_a_price_table_is_read_from_json() -> None:
    raw = '{"gpt-4o": {"input_per_million": 2, "output_per_million": 8}}'
    assert Settings(_env_file=None, model_prices=raw).model_prices == {"gpt-4o": PRICE}


def test_a_live_job_holds_its_reservation_an_ended_one_what_it_used() -> None:
    used = Usage(
        input_tokens=30, output_tokens=10, cost=0.5, reserved_tokens=100, reserved_cost=2.0
    )
    assert budgets.charge(JobStatus.RUNNING, used) == (100, 2.0)
    assert budgets.charge(JobStatus.QUEUED, None) == (0, 0.0)
    assert budgets.charge(JobStatus.SUCCEEDED, used) == (40, 0.5)
    assert budgets.charge(JobStatus.RUNNING, Usage(input_tokens=150, reserved_tokens=100)) == (
        150,
        0.0,
    )


def test_the_allowance_is_the_tightest_scope_and_never_negative() -> None:
    limits = Limits(max_tokens_per_session=1000, max_tokens_per_tree=500, max_cost_per_tree=1.0)
    found = budgets.allowance(limits, Spent(session=(100, 0.0), tree=(450, 0.25)))
    assert (found.tokens, found.tokens_scope) == (50, "tree")
    assert (found.cost, found.cost_scope) == (0.75, "tree")
    spent = budgets.allowance(limits, Spent(tree=(600, 0.0)))
    assert spent.tokens == 0
    assert not budgets.allowance(Limits(), Spent()).bounded


def test_a_callers_remaining_budget_counts_its_own_use_and_its_other_children() -> None:
    limits = Limits(max_tokens_per_turn=300)
    caller = budgets.caller_remaining(
        limits, Usage(input_tokens=150, output_tokens=50), (40, 0.0), Spent()
    )
    assert (caller.tokens, caller.tokens_scope) == (60, "caller")
    # A caller that is itself a child hands on no more than it reserved.
    reserved = Usage(input_tokens=10, reserved_tokens=50, reserved_cost=1.0, cost=0.25)
    caller = budgets.caller_remaining(Limits(), reserved, (0, 0.0), Spent())
    assert (caller.tokens, caller.cost) == (40, 0.75)


def test_a_child_reserves_its_allowance_once() -> None:
    read = BudgetRead(Spent(), Allowance(tokens=100, tokens_scope="caller"))
    first = budgets.reserve(read, Limits(), None)
    assert first is not None and first.reserved_tokens == 100
    assert budgets.reserve(read, Limits(), first) is None
    assert budgets.reserve(BudgetRead(Spent()), Limits(max_tokens_per_tree=5), None) is None


def test_a_budget_past_its_allowance_ends_tokens_or_cost() -> None:
    budget = Budget(allowance=Allowance(tokens=100, tokens_scope="caller"))
    budget.spent(TokenCount(input=60, output=40))
    with pytest.raises(TokenBudgetExceeded) as crossed:
        budget.spent(TokenCount(output=1))
    assert crossed.value.details["scope"] == "caller"
    priced = Budget(price=PRICE, allowance=Allowance(cost=1.0, cost_scope="tree"))
    priced.spent(TokenCount(input=100_000, output=100_000))  # 1.0: at the bound, not past
    with pytest.raises(CostBudgetExceeded) as over:
        priced.spent(TokenCount(output=1))
    assert over.value.code == "budget.cost" and priced.usage().cost == 1.000008


def test_what_children_hold_is_charged_to_the_callers_bounds() -> None:
    held = [(0, 0.0)]
    budget = Budget(Limits(max_tokens_per_turn=100), children=lambda: held[0])
    budget.spent(TokenCount(input=60))
    held[0] = (40, 0.0)
    budget.spent(None)  # 60 + 40: at the limit, not past
    held[0] = (41, 0.0)
    with pytest.raises(TokenBudgetExceeded) as crossed:
        budget.spent(None)
    assert crossed.value.details["children"] == 41
    assert budget.usage().tokens == 60  # its own usage stays its own
    # Without a bound the children are not even asked.
    Budget(children=lambda: (_ for _ in ()).throw(AssertionError)).spent(TokenCount(input=5))


def test_a_spent_allowance_ends_the_turn_before_its_first_step() -> None:
    with pytest.raises(TokenBudgetExceeded):
        Budget(allowance=Allowance(tokens=0, tokens_scope="session")).check_start()
    Budget(allowance=Allowance(tokens=1, tokens_scope="session")).check_start()
    carried = Usage(reserved_tokens=100)
    assert Budget(carried=carried).usage().reserved_tokens == 100
    # A resumed job that used its allowance to the bound has crossed nothing.
    resumed = Budget(
        carried=Usage(input_tokens=50), allowance=Allowance(tokens=50, tokens_scope="tree")
    )
    resumed.check_start()
    with pytest.raises(TokenBudgetExceeded):
        resumed.spent(TokenCount(output=1))


def test_cumulative_limits_are_positive_and_narrow() -> None:
    with pytest.raises(ValidationError):
        Limits.parse({"max_cost_per_tree": 0})
    merged = Limits(max_cost_per_tree=2.5).narrowed(Limits(max_cost_per_tree=1.5))
    assert merged.max_cost_per_tree == 1.5


def test_a_projects_budgets_bound_its_jobs_and_are_checked_as_stored() -> None:
    from chaz.domain.projects import check_cost_budget, check_token_budget

    found = budgets.project_bound(None, 1000, 2.0, (900, 0.5))
    assert (found.tokens, found.tokens_scope, found.cost) == (100, "project", 1.5)
    assert (
        budgets.project_bound(
            Allowance(tokens=50, tokens_scope="tree"), 1000, None, (0, 0.0)
        ).tokens
        == 50
    )
    assert check_token_budget("max_tokens", -1) == -1 and check_cost_budget("max_cost", 2) == 2.0
    for bad_tokens in (-2, 1.5, "1", True, 2**63):
        with pytest.raises(ValidationError):
            check_token_budget("max_tokens", bad_tokens)
    for bad_cost in (-0.5, float("nan"), float("inf"), "1", True):
        with pytest.raises(ValidationError):
            check_cost_budget("max_cost", bad_cost)
