"""A turn's per-turn budgets and the usage they are measured on.

Tokens are counted as the backend reports them, after each model step: a
step that crosses ``max_tokens_per_turn`` ends the turn (``budget.tokens``)
before its answer is acted on. Runtime and idle time are checked wherever
the turn looks at its cancel token: at the loop's step boundaries, and by
the worker's cancel watcher every tenth of a second while the turn blocks
(:meth:`chaz.runtime.cancel.CancelToken.poll`). A crossed deadline stops the
turn as a cancel does, with ``budget.runtime`` or ``budget.idle`` instead of
``job.cancelled``. See docs/runtime.md#per-turn-budgets.

The cumulative budgets (docs/runtime.md#budgets) reach a turn as an
:class:`~chaz.domain.budgets.Allowance`: the most its job's usage may total,
read from its scopes' rows when it started. A step past it ends the turn
``budget.tokens`` or ``budget.cost``; a turn whose allowance is spent before
its first step ends at once (:meth:`Budget.check_start`).

Before each model step the turn asks :meth:`Budget.cap` for the most output
tokens the step may generate: what its tightest token bound has left, less
the previous step's prompt (the next prompt holds it whole, so it costs at
least as much). The backend sends it as the request's token cap; nothing
left ends the turn ``budget.tokens`` before the call, and an answer that
stops at the cap ends it too (the budget cut it; docs/runtime.md#the-token-cap).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from chaz.domain.agents import Limits
from chaz.domain.budgets import Allowance, cost_of
from chaz.domain.jobs import Usage
from chaz.errors import (
    BudgetExceeded,
    CostBudgetExceeded,
    IdleBudgetExceeded,
    RuntimeBudgetExceeded,
    TokenBudgetExceeded,
)
from chaz.runtime.backends.base import TokenCount
from chaz.settings import ModelPrice


class Budget:
    """One attempt's view of its turn's budgets: what was spent, and the deadlines.

    ``carried`` is what the turn's earlier attempts recorded (its job's
    usage): a resumed turn keeps counting from there. Idle time starts at
    this attempt's start. ``price`` prices the tokens (None: they cost 0);
    ``allowance`` bounds the job's whole usage by its cumulative budgets.
    ``children`` gives what the turn's spawned children hold (tokens, cost:
    their reservations while they run, what they used once ended), charged
    to the turn's token bounds beside its own use; asked only when a bound
    is set. Thread-safe: the watcher checks it from its thread.
    """

    def __init__(
        self,
        limits: Limits | None = None,
        carried: Usage | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        price: ModelPrice | None = None,
        allowance: Allowance | None = None,
        children: Callable[[], tuple[int, float]] | None = None,
    ) -> None:
        self._limits = limits or Limits()
        self._carried = carried or Usage()
        self._price = price
        self._allowance = allowance or Allowance()
        self._children = children
        self._clock = clock
        self._lock = threading.Lock()
        self._began = self._last_active = clock()
        self._input = self._carried.input_tokens
        self._output = self._carried.output_tokens
        #: The last step's prompt tokens: a floor on the next step's prompt.
        self._prompt = 0

    def spent(
        self, count: TokenCount | None, asked: int | None = None, truncated: bool = False
    ) -> None:
        """Count one model step's tokens (it is also activity); raise
        :class:`~chaz.errors.TokenBudgetExceeded` once past the limit, or when
        the step asked for at most ``asked`` output tokens (:meth:`cap`) and its
        answer was ``truncated`` there: the budget, not the model, ended it."""
        with self._lock:
            self._last_active = self._clock()
            if count is not None:
                self._input += count.input
                self._output += count.output
                self._prompt = count.input
            total = self._input + self._output
        if asked is not None and truncated and (count is None or count.output >= asked):
            raise TokenBudgetExceeded(
                f"the model's answer reached the {asked} output tokens the turn had left",
                tokens=total,
                asked=asked,
            )
        limit = self._limits.max_tokens_per_turn
        held = self._held()
        if limit is not None and total + held[0] > limit:
            raise TokenBudgetExceeded(
                f"the turn spent {total} tokens and its children hold {held[0]}, past "
                f"its limit of {limit}",
                tokens=total,
                children=held[0],
                limit=limit,
            )
        self._check_allowance(over=lambda spent, bound: spent > bound, held=held)

    def _held(self) -> tuple[int, float]:
        """What the turn's children hold, if any bound needs it."""
        bounded = self._limits.max_tokens_per_turn is not None or self._allowance.bounded
        if self._children is None or not bounded:
            return 0, 0.0
        return self._children()

    def cap(self) -> int | None:
        """The most output tokens the next model step may ask for (None: no
        token bound): the tightest of the per-turn limit and the allowance,
        less what the turn and its children hold, less the last step's
        prompt. Raises :class:`~chaz.errors.TokenBudgetExceeded` when that
        leaves nothing: the step would cross its bound whatever it answered."""
        limit, allowed = self._limits.max_tokens_per_turn, self._allowance.tokens
        if limit is None and allowed is None:
            return None
        held = self._held()[0]
        with self._lock:
            total, prompt = self._input + self._output, self._prompt
        bounds = ((limit, "turn"), (allowed, ""))
        left, scope = min((b - total - held, s) for b, s in bounds if b is not None)
        if left - prompt > 0:
            return left - prompt
        bound = limit if scope == "turn" else allowed
        raise TokenBudgetExceeded(
            f"the turn spent {total} tokens and its children hold {held}, leaving "
            f"{max(left, 0)} of {bound}: not enough for a step whose prompt is at least {prompt}",
            tokens=total,
            children=held,
            limit=bound,
            scope=scope or self._allowance.tokens_scope,
            prompt=prompt,
        )

    def check_start(self) -> None:
        """Before the first step: end the turn at once if its cumulative
        allowance is spent already (``budget.tokens`` / ``budget.cost``).

        Only for a job that has spent nothing itself: a resumed attempt (after
        an approval, a hand-back, a lost worker) that used its allowance up
        to the bound has crossed nothing, and is stopped by its next step's
        tokens if it spends any."""
        if self._carried.tokens > 0:
            return
        self._check_allowance(over=lambda spent, bound: spent >= bound)

    def _check_allowance(
        self, over: Callable[[float, float], bool], held: tuple[int, float] = (0, 0.0)
    ) -> None:
        allowed = self._allowance
        used = self.usage()
        tokens, cost = used.tokens + held[0], used.cost + held[1]
        if allowed.tokens is not None and over(tokens, allowed.tokens):
            raise TokenBudgetExceeded(
                f"the turn's job and its children used {tokens} tokens; its "
                f"{allowed.tokens_scope} budget left it {allowed.tokens}",
                tokens=tokens,
                limit=allowed.tokens,
                scope=allowed.tokens_scope,
            )
        if allowed.cost is not None and over(cost, allowed.cost):
            raise CostBudgetExceeded(
                f"the turn's job and its children cost {cost:g}; its {allowed.cost_scope} "
                f"budget left it {allowed.cost:g}",
                cost=round(cost, 9),
                limit=allowed.cost,
                scope=allowed.cost_scope,
            )

    def active(self) -> None:
        """Note activity (a tool result): the idle clock starts again."""
        with self._lock:
            self._last_active = self._clock()

    def overrun(self) -> BudgetExceeded | None:
        """The runtime or idle budget the turn has crossed by now, if any."""
        now = self._clock()
        runtime, idle = self._limits.max_runtime_seconds, self._limits.max_idle_seconds
        with self._lock:
            ran = self._carried.runtime_seconds + now - self._began
            quiet = now - self._last_active
        if runtime is not None and ran > runtime:
            return RuntimeBudgetExceeded(
                f"the turn ran past its limit of {runtime}s", limit=runtime
            )
        if idle is not None and quiet > idle:
            return IdleBudgetExceeded(
                f"the turn had no model output or tool result for {idle}s", limit=idle
            )
        return None

    def usage(self) -> Usage:
        """What the turn used so far, this attempt's wall time included."""
        with self._lock:
            return Usage(
                input_tokens=self._input,
                output_tokens=self._output,
                runtime_seconds=round(
                    self._carried.runtime_seconds + self._clock() - self._began, 3
                ),
                cost=cost_of(self._price, self._input, self._output),
                reserved_tokens=self._carried.reserved_tokens,
                reserved_cost=self._carried.reserved_cost,
            )
