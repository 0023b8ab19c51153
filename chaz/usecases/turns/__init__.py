"""Running turns: the runner, one job's turn, its approval gate, and the
delegation port its collaboration tools call.

- :mod:`.runner`: :class:`TurnRunner`, one wake-up under the session's lane
  lease, the turns it runs there, and the lane left behind;
- :mod:`.turn`: :class:`~chaz.usecases.turns.turn.Turn`, one job's turn and
  every entry it writes (each handed to its :class:`chaz.coord.feed.Feed`);
- :mod:`.approval`: the turn's approval gate (docs/approvals.md);
- :mod:`.delegation`: :class:`RunnerDelegation`, the use cases tools call;
- :mod:`.ending`: what follows a turn's last write (its end signal,
  follow-ups, inbox, names).

The names callers need are re-exported here; the modules are the package's own.
"""

from chaz.usecases.turns.delegation import RunnerDelegation
from chaz.usecases.turns.runner import MAX_ATTEMPTS, RUNNING, TurnRunner, WakeOutcome

__all__ = ["MAX_ATTEMPTS", "RUNNING", "RunnerDelegation", "TurnRunner", "WakeOutcome"]
