"""Publishing committed entries and events, and listening for them.

Write first, then publish: a notification only says that the database has
something new. A lost one delays a listener, which re-reads the database
when it has heard nothing for a while; it never loses a row.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import redis

from chaz.coord import keys
from chaz.domain.entries import Entry
from chaz.domain.events import Event


def publish(client: redis.Redis, entry: Entry) -> None:
    """Announce an entry that is already committed (write first, then publish).

    A lost publish only delays a watcher: ``watch`` re-reads the database when
    it sees a gap or hears nothing for a while.
    """
    # The entry is durable; a watcher's periodic re-read finds it if this fails.
    with contextlib.suppress(redis.RedisError):
        client.publish(keys.entries_channel(entry.session_id), entry.model_dump_json())


def publish_event(client: redis.Redis, event: Event) -> None:
    """Announce an event that is already committed on ``chaz:events:{sid}``.

    A notification only: followers re-read the table, so a lost publish
    delays them by their poll interval at most.
    """
    with contextlib.suppress(redis.RedisError):
        client.publish(keys.events_channel(event.session_id), event.model_dump_json())


class Listener:
    """A subscription to some channels, open from construction until :meth:`close`.

    Whatever is published after it is built is heard, so a reader builds it
    *before* reading its backlog: a row committed in between is then in the
    backlog or announced (or both).
    """

    def __init__(self, client: redis.Redis, *channels: str) -> None:
        self._pubsub = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
        self._pubsub.subscribe(*channels)

    def next(self, timeout: float) -> Any | None:
        """The data of the next message, or None if none came within ``timeout`` seconds."""
        message = self._pubsub.get_message(timeout=timeout)
        if message is None or message.get("type") != "message":
            return None
        return message["data"]

    def close(self) -> None:
        """Unsubscribe and release the connection."""
        self._pubsub.close()

    def __enter__(self) -> Listener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def wait_time(deadline: float | None, poll: float) -> float | None:
    """How long a listener's next wait may last: ``poll``, cut at ``deadline``
    (a ``time.monotonic()`` value; None: never), or None once it has passed."""
    if deadline is None:
        return poll
    remaining = deadline - time.monotonic()
    return min(poll, remaining) if remaining > 0 else None
