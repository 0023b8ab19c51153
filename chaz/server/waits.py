"""The routes that block until something happens (a reply, a job's end, a
run's end), run so that a client who leaves frees its thread.

A sync FastAPI route holds one of the process's worker threads
(``CHAZ_HTTP_THREADS``) for as long as it runs. A wait whose client has
disconnected would hold it until its own timeout, up to an hour for a run;
enough abandoned waits and the replica answers nothing. :func:`detached`
runs the blocking call in a thread under :mod:`chaz.usecases.caller_gone`'s
hook and watches the connection meanwhile: once the client has gone, the
call's waits end at their next poll (at most a few seconds) and the thread
is free.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TypeVar, cast

import anyio
import anyio.to_thread
from fastapi import Request

from chaz.usecases.caller_gone import while_present

T = TypeVar("T")

#: How often a waiting route asks whether its client is still connected.
CHECK_SECONDS = 1.0


async def detached(request: Request, call: Callable[[], T]) -> T:
    """``call()`` in a worker thread, told when ``request``'s client goes."""
    gone = threading.Event()

    def run() -> tuple[T | None, Exception | None]:
        # The call's error is carried out of the thread, not raised there: raised
        # inside the task group it would come out wrapped in an ExceptionGroup.
        with while_present(gone.is_set):
            try:
                return call(), None
            except Exception as exc:
                return None, exc

    async def watch_connection() -> None:
        while not await request.is_disconnected():
            await anyio.sleep(CHECK_SECONDS)
        gone.set()

    async with anyio.create_task_group() as group:
        group.start_soon(watch_connection)
        try:
            result, error = await anyio.to_thread.run_sync(run)
        finally:
            group.cancel_scope.cancel()
    if error is not None:
        raise error
    return cast(T, result)


def set_threads(count: int) -> None:
    """Size the process's pool of threads for blocking work (call it from the
    running event loop, at start-up)."""
    anyio.to_thread.current_default_thread_limiter().total_tokens = count


async def streamed(
    events: Iterator[dict[str, str]], gone: threading.Event | None = None
) -> AsyncIterator[dict[str, str]]:
    """``events`` (a blocking iterator of server-sent events) read in worker
    threads, each ``next`` under the caller-gone hook. When the client goes,
    the stream is cancelled and ``gone`` set: the watches below ask it at
    every poll, so the thread is free within about a second, not at the
    session's next entry."""
    gone = gone or threading.Event()

    def step() -> dict[str, str] | None:
        with while_present(gone.is_set):
            return next(events, None)

    try:
        while True:
            event = await anyio.to_thread.run_sync(step, abandon_on_cancel=True)
            if event is None:
                return
            yield event
    finally:
        gone.set()
