"""The runtime event sink: ToolCall / ToolResult entries written as they happen.

The ReAct loop emits events into a queue; one writer thread turns them into
entries, in order, concurrently with the loop (docs/contracts.md#event-sink).
:meth:`EventSink.close` drains what is left before the turn writes its reply.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ToolCallEvent:
    """The model asked for a tool call."""

    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ToolResultEvent:
    """A tool call finished."""

    call_id: str
    name: str
    output: str
    is_error: bool


RuntimeEvent = ToolCallEvent | ToolResultEvent
_STOP = object()


class EventSink:
    """Feeds events to ``write`` on a background thread, in emission order."""

    def __init__(self, write: Callable[[RuntimeEvent], None], name: str = "chaz-events") -> None:
        self._write = write
        self._queue: queue.Queue[object] = queue.Queue()
        self._error: BaseException | None = None
        self._name = name
        # Started on the first event: most turns of a chat call no tool, and a
        # thread per turn that never writes is pure cost.
        self._thread: threading.Thread | None = None

    def emit(self, event: RuntimeEvent) -> None:
        """Queue an event; a failure of the writer surfaces here, to stop the turn."""
        if self._error is not None:
            raise self._error
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
        self._queue.put(event)

    def flush(self) -> None:
        """Wait until every event emitted so far is written; re-raises a writer's failure.

        A tool that writes into the session itself (an attach pointer) calls
        this first, so its entry lands after the ToolCall that asked for it.
        """
        if self._thread is not None:
            self._queue.join()
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Drain the queue and stop; re-raises the writer's first failure."""
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join()
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                if self._error is not None:
                    continue  # keep draining so close() never blocks
                try:
                    self._write(item)  # type: ignore[arg-type]
                except BaseException as exc:  # surfaced to the loop by emit/close
                    self._error = exc
            finally:
                self._queue.task_done()
