"""A turn's per-turn budgets and the usage they are measured on.

Tokens are counted as the backend reports them, after each model step: a
step that crosses ``max_tokens_per_turn`` ends the turn (``budget.tokens``)
before its answer is acted on. Runtime and idle time are checked wherever
the turn looks at its cancel token: at the loop's step boundaries, and by
the worker's cancel watcher every tenth of a second while the turn blocks
(:meth:`chaz.runtime.cancel.CancelToken.poll`). A crossed deadline stops the
turn as a cancel does, with ``budget.runtime`` or ``budget.idle`` instead of
``job.cancelled``. See docs/runtime.md#per-turn-budgets.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from chaz.domain.agents import Limits
from chaz.domain.jobs import Usage
from chaz.errors import (
    BudgetExceeded,
    IdleBudgetExceeded,
    RuntimeBudgetExceeded,
    TokenBudgetExceeded,
)
from chaz.runtime.backends.base import TokenCount


class Budget:
    """One attempt's view of its turn's budgets: what was spent, and the deadlines.

    ``carried`` is what the turn's earlier attempts recorded (its job's
    usage): a resumed turn keeps counting from there. Idle time starts at
    this attempt's start. Thread-safe: the watcher checks it from its thread.
    """

    def __init__(
        self,
        limits: Limits | None = None,
        carried: Usage | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._limits = limits or Limits()
        self._carried = carried or Usage()
        self._clock = clock
        self._lock = threading.Lock()
        self._began = self._last_active = clock()
        self._input = self._carried.input_tokens
        self._output = self._carried.output_tokens

    def spent(self, count: TokenCount | None) -> None:
        """Count one model step's tokens (it is also activity); raise
        :class:`~chaz.errors.TokenBudgetExceeded` once past the limit."""
        with self._lock:
            self._last_active = self._clock()
            if count is not None:
                self._input += count.input
                self._output += count.output
            total = self._input + self._output
        limit = self._limits.max_tokens_per_turn
        if limit is not None and total > limit:
            raise TokenBudgetExceeded(
                f"the turn spent {total} tokens, past its limit of {limit}",
                tokens=total,
                limit=limit,
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
            )
