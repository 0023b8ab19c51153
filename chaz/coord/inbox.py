"""The inbox flag: a hint that messages wait in a session's inbox.

The deliveries table is the record; the flag only spares a turn's end a
database read when nothing waits: ``turn_ended.lua`` reports it in the same
round trip. A flag lost with Redis delays a message until the reconciler's
sweep finds it (chaz.usecases.deliveries.sweep); it never loses one.
"""

from __future__ import annotations

import redis

from chaz.coord import keys
from chaz.coord.redis import tag_for


class InboxFlags:
    """Set and clear the inbox flags of sessions."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def mark(self, session_id: str, project: str) -> None:
        """Messages wait in ``session_id``'s inbox."""
        self.client.set(keys.inbox(session_id, tag_for(self.client, project)), 1)

    def clear(self, session_id: str, project: str) -> None:
        """The inbox is empty (set again by the next queued message)."""
        self.client.delete(keys.inbox(session_id, tag_for(self.client, project)))
