"""The publisher of a turn's entries: the one place a turn hands what it wrote.

Write first, then publish: a turn gives its :class:`Feed` each entry once the
entry's transaction has committed, and the feed announces it on the entry's
session channel (``chaz:entries:{sid}``). An entry that a turn signal follows
at once (the Ack, which ``TURN_STARTED`` follows; the reply, Error or
ApprovalRequest, which ``TURN_ENDED`` follows) is *held* and rides on that
signal's round trip (:mod:`chaz.coord.signals`); every other one (a
ToolCall, a ToolResult, a resume's Ack, a room's notices) is published at
once. See docs/coordination.md#pubsub.
"""

from __future__ import annotations

import redis

from chaz.coord.pubsub import publish
from chaz.domain.entries import Entry


class Feed:
    """Announces the committed entries of one turn (or of one write outside a turn)."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._held: Entry | None = None

    def publish(self, *entries: Entry) -> None:
        """Announce committed ``entries`` now, in order (a lost one only delays
        a watcher: see :func:`chaz.coord.pubsub.publish`)."""
        for entry in entries:
            publish(self._client, entry)

    def hold(self, entry: Entry | None) -> None:
        """Keep a committed ``entry`` for the turn's next signal, which announces
        it in its own round trip; None holds nothing."""
        assert self._held is None, "a turn signal announces one entry"
        self._held = entry

    def take(self) -> Entry | None:
        """The held entry, for the signal that announces it; the feed holds nothing after."""
        entry, self._held = self._held, None
        return entry
