"""Watching a session: the backlog from the database, then live entries from Redis.

The subscription is opened *before* the backlog is read, so an entry committed
in between is either in the backlog or on the channel (or both: duplicates are
dropped by seq). Entries are yielded strictly in seq order with no gap: when a
published entry skips ahead, or nothing is heard for ``poll`` seconds, the
missing range is read from the database, which is the source of truth.

With ``partial=True`` the watch also subscribes to the session's partials
(:mod:`chaz.coord.partials`) and yields each :class:`~chaz.coord.partials.Partial`
as it is heard, between the entries. Partials are live only: there is no
backlog of them, and one lost on the way is not fetched again (the reply
entry that follows holds the whole text). A partial heard after its job's
reply or Error was yielded (the reply read from the database first) is
dropped as stale.

Through a process's shared subscription (``subscriber``), a reconnection
triggers the re-read at once. A partial watch keeps a subscription of its
own to both channels.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Literal, overload

import redis

from chaz.coord import keys
from chaz.coord.partials import Partial, StreamListener
from chaz.coord.pubsub import Listener, Subscriber, wait_time
from chaz.domain.entries import Entry, EntryType
from chaz.store.facade import Store
from chaz.usecases import caller_gone


@overload
def watch(
    store: Store,
    client: redis.Redis,
    session_id: str,
    *,
    after: int = ...,
    timeout: float | None = ...,
    poll: float = ...,
    partial: Literal[False] = ...,
    subscriber: Subscriber | None = ...,
    written_after: float | None = ...,
    stop: Callable[[], bool] | None = ...,
) -> Iterator[Entry]: ...


@overload
def watch(
    store: Store,
    client: redis.Redis,
    session_id: str,
    *,
    after: int = ...,
    timeout: float | None = ...,
    poll: float = ...,
    partial: bool,
    subscriber: Subscriber | None = ...,
    written_after: float | None = ...,
    stop: Callable[[], bool] | None = ...,
) -> Iterator[Entry | Partial]: ...


def watch(
    store: Store,
    client: redis.Redis,
    session_id: str,
    *,
    after: int = 0,
    timeout: float | None = None,
    poll: float = 1.0,
    partial: bool = False,
    subscriber: Subscriber | None = None,
    written_after: float | None = None,
    stop: Callable[[], bool] | None = None,
) -> Iterator[Entry] | Iterator[Entry | Partial]:
    """Yield the session's entries with ``seq > after``, forever or until ``timeout``;
    with ``partial``, also the partials of answers streamed meanwhile.

    ``subscriber``: listen through the process's shared subscription instead
    of a pubsub connection of this call's own (entries only). ``written_after``:
    a ``time.monotonic()`` of this process before which no entry with
    ``seq > after`` can have been committed; when the subscription has heard
    every message of the session since before it, the backlog read is skipped.
    ``stop``: asked at every ``poll`` and every message heard; once it answers true the
    watch ends (an HTTP stream whose client has gone, chaz/server/producer.py).
    Without one, the call's :mod:`chaz.usecases.caller_gone` hook, if any.
    """
    if stop is None:
        # A wait on behalf of an HTTP client ends when the client goes.
        stop = caller_gone.hook()
    if partial:
        return _watch_partials(store, client, session_id, after, timeout, poll, stop)
    return _watch(store, client, session_id, after, timeout, poll, subscriber, written_after, stop)


class _Cursor:
    """The last seq yielded, and the database reads that keep entries gapless."""

    def __init__(self, store: Store, session_id: str, after: int) -> None:
        self.store = store
        self.session_id = session_id
        self.last = after

    def catch_up(self) -> Iterator[Entry]:
        """Everything committed after the last yielded entry."""
        for entry in self.store.entries(self.session_id, after=self.last):
            yield entry
            self.last = entry.seq

    def heard(self, data: str | bytes) -> Iterator[Entry]:
        """A published entry, with whatever it skipped ahead of; nothing if seen."""
        entry = Entry.model_validate_json(data)
        if entry.seq <= self.last:
            return
        if entry.seq == self.last + 1:
            yield entry
            self.last = entry.seq
            return
        # Skipped ahead (publishes can arrive out of commit order): the
        # database has the range, this entry included.
        for missing in self.store.entries(self.session_id, after=self.last, until=entry.seq):
            yield missing
            self.last = missing.seq


def _watch(
    store: Store,
    client: redis.Redis,
    session_id: str,
    after: int,
    timeout: float | None,
    poll: float,
    subscriber: Subscriber | None,
    written_after: float | None,
    stop: Callable[[], bool] | None,
) -> Iterator[Entry]:
    deadline = None if timeout is None else time.monotonic() + timeout
    channel = keys.entries_channel(session_id)
    opened = Listener(client, channel) if subscriber is None else subscriber.listen(channel)
    with opened as listener:
        cursor = _Cursor(store, session_id, after)
        heard = getattr(listener, "since", None)
        if written_after is None or heard is None or heard >= written_after:
            yield from cursor.catch_up()
        while (wait := _wait(deadline, poll, stop)) is not None:
            data = listener.next(wait)
            if data is None:
                # Quiet (or a lost notification): the database has the answer.
                yield from cursor.catch_up()
            else:
                yield from cursor.heard(data)


def _watch_partials(
    store: Store,
    client: redis.Redis,
    session_id: str,
    after: int,
    timeout: float | None,
    poll: float,
    stop: Callable[[], bool] | None,
) -> Iterator[Entry | Partial]:
    deadline = None if timeout is None else time.monotonic() + timeout
    # Jobs whose reply (or Error) was yielded: a partial of theirs still on
    # its way (the reply was read from the database first) is stale.
    ended: deque[str] = deque(maxlen=_ENDED_KEPT)

    def note(entries: Iterator[Entry]) -> Iterator[Entry]:
        for entry in entries:
            if entry.job_id is not None and _ends_turn(entry):
                ended.append(entry.job_id)
            yield entry

    # One subscription to both channels, opened before the backlog is read.
    with StreamListener(client, session_id) as listener:
        cursor = _Cursor(store, session_id, after)
        yield from note(cursor.catch_up())
        while (wait := _wait(deadline, poll, stop)) is not None:
            heard = listener.next(wait)
            if heard is None:
                yield from note(cursor.catch_up())
            elif heard[0] == "entry":
                yield from note(cursor.heard(heard[1]))
            else:
                partial = Partial.model_validate_json(heard[1])
                if partial.job_id not in ended:
                    yield partial


def _wait(deadline: float | None, poll: float, stop: Callable[[], bool] | None) -> float | None:
    """The next wait (:func:`wait_time`), or None when ``stop`` says so."""
    if stop is not None and stop():
        return None
    return wait_time(deadline, poll)


#: How many ended jobs a partial watch remembers (a session runs one turn at a
#: time, and a stale partial trails its reply by moments).
_ENDED_KEPT = 64


def _ends_turn(entry: Entry) -> bool:
    """Whether ``entry`` is a turn's last: the agent's reply or an Error."""
    return entry.type is EntryType.ERROR or (
        entry.type is EntryType.MESSAGE and entry.sender.startswith("agent:")
    )
