"""A run's wait on the event loop, on the process's shared subscription
(docs/http.md#the-wait-on-the-event-loop).

``/runs/wait`` used to hold one of the server's threads for the whole run:
the admission, then a blocking wait for the reply on the shared
subscription, then the answer, with a second task polling the connection
every second. Here only the blocking parts run in a thread: the admission
(and the subscription's ``listen``, which may wait for Redis to confirm a
new channel), then, once the reply is in, the answer. In between, the wait
is a coroutine: the subscription's reader thread wakes the loop for each
entry of the thread it routes (``Subscriber.listen(wake=...)``), so a
waiting run holds no thread and costs nothing until an entry comes.

The order and gap rules are :mod:`chaz.usecases.watch`'s: entries are taken
strictly in seq order; an entry that skips ahead, a re-read notice (the
connection came back) or a quiet ``POLL_SECONDS`` make the missing range be
read from the database, in a thread. The backlog after the run's input is
read only when the subscription has not heard the thread since before the
input was written (``written_after``). A client that has gone is noticed
within ``CHECK_SECONDS``; the wait then ends as a watch stopped by
:mod:`chaz.usecases.caller_gone` does (the run goes on).
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import anyio.to_thread

from chaz.coord import keys
from chaz.coord.pubsub import Subscription
from chaz.domain.entries import Entry
from chaz.errors import BackendUnavailable, Timeout
from chaz.server.waits import CHECK_SECONDS

T = TypeVar("T")


class Connection(Protocol):
    """What a wait asks of its request: whether the client has gone."""

    async def is_disconnected(self) -> bool:
        """True once the client has disconnected."""
        ...


#: How long a quiet wait goes between database re-reads. As for the in-process
#: ``wait_for_reply`` (chaz/client/sessions.py): a reconnection of the shared
#: subscription makes the re-read come at once, so this is only for a publish
#: lost with the connection healthy (a writer that died between its commit
#: and its publish).
POLL_SECONDS = 5.0


class Gate:
    """How many threads the blocking steps of runs' waits use at once.

    They are database transactions (the admission, a read), so threads past
    the process's pool of connections would only wait for one, each a thread
    more taking turns at the interpreter's lock; a wait that holds no thread
    needs no more. One limiter per event loop (tests run an app on several).

    A step waits for a free thread at most ``timeout`` seconds (the pool's
    own wait for a connection, ``CHAZ_DB_POOL_TIMEOUT``), then raises
    ``backend.unavailable`` as a pool that stayed full would: an overloaded
    server answers instead of queueing runs without bound."""

    def __init__(self, size: int, timeout: float = 30.0) -> None:
        self.size = size
        self.timeout = timeout
        # Per loop: the gate, and the threads of its holders. anyio takes a
        # thread under a limiter it acquires itself, and a task cannot hold
        # one token twice, so the call is run under a second limiter of the
        # same size, which a gate holder always finds free.
        self._limiters: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[anyio.CapacityLimiter, anyio.CapacityLimiter]
        ] = weakref.WeakKeyDictionary()

    async def run(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)`` in a worker thread, once one of the gate's is free."""
        loop = asyncio.get_running_loop()
        pair = self._limiters.get(loop)
        if pair is None:
            pair = self._limiters[loop] = (
                anyio.CapacityLimiter(self.size),
                anyio.CapacityLimiter(self.size),
            )
        gate, threads = pair
        acquired = False
        with anyio.move_on_after(self.timeout):
            await gate.acquire()
            acquired = True
        if not acquired:
            raise BackendUnavailable(
                f"no thread for a run's wait within {self.timeout:g}s ({self.size} busy)"
            )
        try:
            return await anyio.to_thread.run_sync(call, *args, limiter=threads)
        finally:
            gate.release()


class Awaited:
    """One run's wait: the entries after its input up to its reply or Error."""

    def __init__(
        self, session_id: str, job_id: str, after: int, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.session_id = session_id
        self.job_id = job_id
        #: The last seq taken (the input's, at first).
        self.last = after
        #: The entries taken, in seq order.
        self.seen: list[Entry] = []
        #: Whether the run's last entry was taken.
        self.done = False
        self._loop = loop
        self._event = asyncio.Event()

    def wake(self) -> None:
        """The subscription's ``wake``: called from its reader thread."""
        self._loop.call_soon_threadsafe(self._event.set)

    def take(self, entries: list[Entry], ends: Callable[[Entry], bool]) -> bool:
        """Take ``entries`` (in seq order) past the last taken; True once the
        run's last entry (``ends``) is among them."""
        for entry in entries:
            if entry.seq <= self.last:
                continue
            self.last = entry.seq
            self.seen.append(entry)
            if entry.job_id == self.job_id and ends(entry):
                self.done = True
                return True
        return False

    async def until_end(
        self,
        gate: Gate,
        sub: Subscription,
        read: Callable[[int, int | None], list[Entry]],
        ends: Callable[[Entry], bool],
        request: Connection,
        timeout: float,
    ) -> list[Entry]:
        """Wait on ``sub`` until the run's last entry; ``read(after, until)``
        reads a range from the database (in a thread). Raises ``Timeout``
        after ``timeout`` seconds, or once the client has gone."""
        deadline = time.monotonic() + timeout
        quiet_since = time.monotonic()
        while True:
            self._event.clear()
            got, data = sub.take()
            if got:
                quiet_since = time.monotonic()
                if await self._heard(gate, data, read, ends):
                    return self.seen
                continue
            now = time.monotonic()
            if now >= deadline or await request.is_disconnected():
                raise Timeout(
                    f"run {self.job_id} did not end within {timeout:g}s", run_id=self.job_id
                )
            if now - quiet_since >= POLL_SECONDS:
                # Quiet (or a lost notification): the database has the answer.
                quiet_since = now
                if self.take(await gate.run(read, self.last, None), ends):
                    return self.seen
                continue
            wait = min(CHECK_SECONDS, deadline - now, POLL_SECONDS - (now - quiet_since))
            try:
                async with asyncio.timeout(max(wait, 0.0)):
                    await self._event.wait()
            except TimeoutError:
                pass

    async def _heard(
        self,
        gate: Gate,
        data: Any | None,
        read: Callable[[int, int | None], list[Entry]],
        ends: Callable[[Entry], bool],
    ) -> bool:
        if data is None:
            # Re-subscribed after a lost connection: whatever was published
            # meanwhile is only in the database.
            return self.take(await gate.run(read, self.last, None), ends)
        entry = Entry.model_validate_json(data)
        if entry.seq <= self.last:
            return False
        if entry.seq == self.last + 1:
            return self.take([entry], ends)
        # Skipped ahead (publishes can arrive out of commit order): the
        # database has the range, this entry included.
        return self.take(await gate.run(read, self.last, entry.seq), ends)


def channel(session_id: str) -> str:
    """The channel a run's wait listens on: its thread's entries."""
    return keys.entries_channel(session_id)
