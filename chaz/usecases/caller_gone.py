"""Whether the caller a blocking call waits for is still there.

A wait (a reply, a job's end, a run's follow) runs in a thread of the HTTP
server on behalf of one client. When that client disconnects, nobody will
read the answer, yet the thread would wait on until the call's own timeout
(up to an hour for a run), and a replica has a bounded pool of such threads.
The server sets a hook for the call (:func:`while_present`); the waits below
it ask :func:`caller_gone` at every poll and end early, so the thread is
free within a poll of the client's going. Context variables travel into the
thread with the call (``anyio.to_thread`` copies the context), and code not
run for an HTTP client sees no hook and waits as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_hook: ContextVar[Callable[[], bool] | None] = ContextVar("chaz_caller_gone", default=None)


def hook() -> Callable[[], bool] | None:
    """The current call's "has the caller gone?" hook, if one is set."""
    return _hook.get()


def caller_gone() -> bool:
    """True once the caller of the current call has gone (never without a hook)."""
    gone = _hook.get()
    return gone is not None and gone()


@contextmanager
def while_present(gone: Callable[[], bool]) -> Iterator[None]:
    """Run the block on behalf of a caller whose going ``gone()`` reports."""
    token = _hook.set(gone)
    try:
        yield
    finally:
        _hook.reset(token)
