"""The cancel token a turn holds: set as soon as the turn's cancel is seen.

A running turn learns of its job's cancel from the worker's cancel watcher
(:class:`chaz.coord.flags.CancelWatcher`), which sets the token within a
fraction of a second of the cancel flag appearing. Whatever blocks inside
the turn waits on the token rather than on the clock: the scripted
``sleep`` step and ``stream`` chunks, the OpenAI backend's in-flight request
(cut on the wire), and tools (they find it as ``ctx.cancel``). See
docs/runtime.md#preemptive-cancel.

The same token stops a turn its worker hands back (a worker whose shutdown
grace ran out, docs/operations.md#termination): :meth:`CancelToken.hand_back`
wakes the same waiters, and the turn then raises
:class:`~chaz.errors.HandedBack` instead of :class:`~chaz.errors.Cancelled`,
so it is put back for another worker rather than ended. :class:`Running` is
the process's set of tokens that such a shutdown hands back.

A turn past its runtime or idle budget is stopped by the same token
(:meth:`CancelToken.exceed`, docs/runtime.md#per-turn-budgets): its waiters
then raise the budget's error. The watcher that sets tokens on a cancel
also calls :meth:`CancelToken.poll` on every watched token, so a turn
blocked inside a step finds its crossed deadline within a poll, without a
timer of its own.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from chaz.errors import BudgetExceeded, Cancelled, HandedBack

log = logging.getLogger(__name__)


class CancelToken:
    """Set once, never cleared: the turn's job was cancelled, or the turn is
    handed back (whichever came first stays).

    Thread-safe: the watcher sets it from its own thread while the turn's
    thread checks it or waits on it.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self._handing_back = False
        self._exceeded: BudgetExceeded | None = None
        self._check: Callable[[], BudgetExceeded | None] | None = None

    def set(self) -> None:
        """Mark the cancel seen; wake every waiter and run the callbacks once,
        in the order they were registered (the openai backend cuts its
        connection before it wakes the turn that closes it)."""
        self._stop(handing_back=False)

    def hand_back(self) -> None:
        """Stop the turn as :meth:`set` does, to be handed back, not ended.

        A cancel seen before wins (the turn ends cancelled); one requested
        after is seen by the worker that resumes the turn.
        """
        self._stop(handing_back=True)

    def exceed(self, error: BudgetExceeded) -> None:
        """Stop the turn as :meth:`set` does, for crossing a budget: its waiters
        raise ``error``. Whichever stop came first stays."""
        self._stop(handing_back=False, exceeded=error)

    def limit(self, check: Callable[[], BudgetExceeded | None]) -> None:
        """Have :meth:`poll` ask ``check`` which budget the turn crossed, if any."""
        self._check = check

    def poll(self) -> None:
        """Stop the turn (:meth:`exceed`) if its budget check finds one crossed.

        Called at step boundaries and by the cancel watcher every poll.
        """
        if self._check is None or self._event.is_set():
            return
        error = self._check()
        if error is not None:
            self.exceed(error)

    @property
    def handing_back(self) -> bool:
        """Whether the token stops its turn to hand it back (not a cancel)."""
        return self._handing_back

    def _stop(self, *, handing_back: bool, exceeded: BudgetExceeded | None = None) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self._handing_back = handing_back
            self._exceeded = exceeded
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                # A callback only hurries the turn along; the turn still
                # sees the token at its next check.
                log.warning("a cancel callback failed", exc_info=True)

    def is_set(self) -> bool:
        """Whether the cancel was seen."""
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the token is set or ``timeout`` seconds pass; whether it is set."""
        return self._event.wait(timeout)

    def raise_if_set(self) -> None:
        """Raise :class:`~chaz.errors.Cancelled` if the cancel was seen,
        :class:`~chaz.errors.HandedBack` if the turn is being handed back, or
        the budget's error if it crossed one."""
        if self._event.is_set():
            raise self.stopped("the job was cancelled")

    def stopped(self, message: str) -> Cancelled | HandedBack | BudgetExceeded:
        """The exception a turn stopped by this token raises (``message`` for a cancel)."""
        if self._exceeded is not None:
            return self._exceeded
        if self._handing_back:
            return HandedBack("the worker is shutting down; the turn is handed back")
        return Cancelled(message)

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run ``callback`` when the token is set (at once if it already is).

        Returns a function that unregisters it (a finished request's callback
        must not close what the next request uses).
        """
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return lambda: self._forget(callback)
        callback()
        return lambda: None

    def _forget(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)


class Running:
    """The cancel tokens of the turns this process runs, to hand back together.

    A worker whose shutdown grace runs out calls :meth:`hand_back_all`: every
    held token is handed back, and so is any registered after (a turn that
    started meanwhile stops at its first step boundary).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens: set[CancelToken] = set()
        self._handing_back = False

    def hold(self, token: CancelToken) -> None:
        """Register a running turn's token, until :meth:`drop`."""
        with self._lock:
            self._tokens.add(token)
            late = self._handing_back
        if late:
            token.hand_back()

    def drop(self, token: CancelToken) -> None:
        """Forget a token (its turn is over)."""
        with self._lock:
            self._tokens.discard(token)

    @property
    def handing_back(self) -> bool:
        """Whether this process hands its turns back (it is shutting down)."""
        return self._handing_back

    def hand_back_all(self) -> int:
        """Hand back every registered turn, and every one registered from now on;
        how many were registered."""
        with self._lock:
            self._handing_back = True
            tokens = list(self._tokens)
        for token in tokens:
            token.hand_back()
        return len(tokens)
