"""The cancel token a turn holds: set as soon as the turn's cancel is seen.

A running turn learns of its job's cancel from the worker's cancel watcher
(:class:`chaz.coord.flags.CancelWatcher`), which sets the token within a
fraction of a second of the cancel flag appearing. Whatever blocks inside
the turn waits on the token rather than on the clock: the scripted
``sleep`` step and ``stream`` chunks, the OpenAI backend's in-flight request
(cut on the wire), and tools (they find it as ``ctx.cancel``). See
docs/runtime.md#preemptive-cancel.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from chaz.errors import Cancelled

log = logging.getLogger(__name__)


class CancelToken:
    """Set once, never cleared: the turn's job was cancelled.

    Thread-safe: the watcher sets it from its own thread while the turn's
    thread checks it or waits on it.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []

    def set(self) -> None:
        """Mark the cancel seen; wake every waiter and run the callbacks once,
        in the order they were registered (the openai backend cuts its
        connection before it wakes the turn that closes it)."""
        with self._lock:
            if self._event.is_set():
                return
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
        """Raise :class:`~chaz.errors.Cancelled` if the cancel was seen."""
        if self._event.is_set():
            raise Cancelled("the job was cancelled")

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
