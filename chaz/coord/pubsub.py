"""Publishing committed entries, for watchers and waiters."""

from __future__ import annotations

import contextlib

import redis

from chaz.coord import keys
from chaz.domain.entries import Entry


def publish(client: redis.Redis, entry: Entry) -> None:
    """Announce an entry that is already committed (write first, then publish).

    A lost publish only delays a watcher: ``watch`` re-reads the database when
    it sees a gap or hears nothing for a while.
    """
    # The entry is durable; a watcher's periodic re-read finds it if this fails.
    with contextlib.suppress(redis.RedisError):
        client.publish(keys.entries_channel(entry.session_id), entry.model_dump_json())
