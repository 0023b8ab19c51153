"""Watching a session: the backlog from the database, then live entries from Redis.

The subscription is opened *before* the backlog is read, so an entry committed
in between is either in the backlog or on the channel (or both: duplicates are
dropped by seq). Entries are yielded strictly in seq order with no gap: when a
published entry skips ahead, or nothing is heard for ``poll`` seconds, the
missing range is read from the database, which is the source of truth.
Through a process's shared subscription (``subscriber``), a reconnection
triggers that re-read at once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import redis

from chaz.coord import keys
from chaz.coord.pubsub import Listener, Subscriber, wait_time
from chaz.domain.entries import Entry
from chaz.store.repo import Store


def watch(
    store: Store,
    client: redis.Redis,
    session_id: str,
    *,
    after: int = 0,
    timeout: float | None = None,
    poll: float = 1.0,
    subscriber: Subscriber | None = None,
    written_after: float | None = None,
) -> Iterator[Entry]:
    """Yield the session's entries with ``seq > after``, forever or until ``timeout``.

    ``subscriber``: listen through the process's shared subscription instead
    of a pubsub connection of this call's own. ``written_after``: a
    ``time.monotonic()`` of this process before which no entry with
    ``seq > after`` can have been committed; when the subscription has heard
    every message of the session since before it, the backlog read is skipped.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    channel = keys.entries_channel(session_id)
    opened = Listener(client, channel) if subscriber is None else subscriber.listen(channel)
    with opened as listener:
        last = after
        heard = getattr(listener, "since", None)
        if written_after is None or heard is None or heard >= written_after:
            for entry in store.entries(session_id, after=last):
                yield entry
                last = entry.seq
        while (wait := wait_time(deadline, poll)) is not None:
            data = listener.next(wait)
            if data is None:
                # Quiet (or a lost notification): the database has the answer.
                for entry in store.entries(session_id, after=last):
                    yield entry
                    last = entry.seq
                continue
            entry = Entry.model_validate_json(data)
            if entry.seq <= last:
                continue
            if entry.seq == last + 1:
                yield entry
                last = entry.seq
                continue
            # Skipped ahead: publishes can arrive out of commit order.
            for missing in store.entries(session_id, after=last, until=entry.seq):
                yield missing
                last = missing.seq
