"""A session's event log, live: append and announce, and follow it.

The ``events`` table is the record (chaz/store/events.py); Redis only nudges.
Events written by :meth:`EventLog.add <chaz.store.events.EventLog.add>` are
announced on ``chaz:events:{sid}``. Events written with
:func:`chaz.store.events.record` inside another change's transaction (a
turn's job states, for instance) may be announced only by the entry that
transaction publishes on ``chaz:entries:{sid}``, or not at all. So a
follower listens to both channels and takes any message as "read the table
again after my last id", and it also re-reads every ``poll`` seconds: a lost
or missing announcement delays it, never makes it miss an event.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from chaz.coord import keys
from chaz.coord.pubsub import Listener, publish_event, wait_time
from chaz.domain.events import Event
from chaz.services import Services

#: Events read from the database at a time while catching up.
BATCH = 500


def emit(
    services: Services, session_id: str, kind: str, data: dict[str, Any] | None = None
) -> Event:
    """Append one event in its own transaction, then announce it."""
    event = services.store.events.add(session_id, kind, data)
    publish_event(services.redis, event)
    return event


def announce(services: Services, events: Iterable[Event]) -> None:
    """Announce events that :func:`~chaz.store.events.record` wrote, once their
    transaction has committed (announcing earlier could wake a follower for
    nothing, which is harmless but wasted)."""
    for event in events:
        publish_event(services.redis, event)


def follow(
    services: Services,
    session_id: str,
    *,
    after: int = 0,
    timeout: float | None = None,
    poll: float = 1.0,
    stop: Callable[[], bool] | None = None,
) -> Iterator[Event]:
    """Yield the session's events with ``id > after``: the backlog, then live ones.

    In id order, with no gap and no duplicate, forever or until ``timeout``
    seconds have passed, or until ``stop()`` is true (asked at every poll: an
    HTTP follower whose client has gone frees its thread within ``poll``).
    The subscription is opened before the backlog is read, so an event
    committed in between is read either way.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    log = services.store.events
    channels = (keys.events_channel(session_id), keys.entries_channel(session_id))
    with Listener(services.redis, *channels) as listener:
        last = after
        while True:
            # Settled reads only (see chaz/store/events.py): an event that
            # commits late below the last id yielded would be lost for good.
            batch = log.settled(session_id, after=last, limit=BATCH, wait=poll)
            for event in batch or ():
                yield event
                last = event.id
            if batch is not None and len(batch) == BATCH:
                continue  # catching up: read on before waiting
            wait = wait_time(deadline, poll)
            if wait is None or (stop is not None and stop()):
                return
            if listener.next(wait) is not None:
                # A burst of announcements needs one read, not one each.
                while listener.next(0) is not None:
                    pass
