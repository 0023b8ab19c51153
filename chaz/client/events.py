"""``client.events``: sessions' event logs."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterator

from chaz.client.base import Acting, iterating, translating
from chaz.domain.events import Event
from chaz.domain.principals import Grant
from chaz.domain.validation import check_int, check_limit, check_seconds
from chaz.usecases import event_log

#: Event ids are 64-bit integers in the database.
_MAX_EVENT_ID = 2**63 - 1


@translating
class Events(Acting):
    """Sessions' event logs: deliveries, job state changes, archive changes, renames."""

    def list(self, session_id: str, after: int = 0, limit: int = 100) -> builtins.list[Event]:
        """The session's events with ``id > after``, in id order (``limit``: 1 to 10,000).

        Resuming with ``after=`` the last id returned never skips an event.
        """
        self._may(Grant.HISTORY_READ, "read events")
        after = check_int("after", after, low=0, high=_MAX_EVENT_ID)
        limit = check_limit("limit", limit)
        session = self._session(session_id)
        return self._svc.store.events.list(session.id, after=after, limit=limit)

    def follow(
        self,
        session_id: str,
        after: int = 0,
        timeout: float | None = None,
        *,
        stop: Callable[[], bool] | None = None,
    ) -> Iterator[Event]:
        """The events after ``after``, then live ones as they are recorded, in id
        order with no gap and no duplicate; forever, or until ``timeout`` seconds,
        or until ``stop()`` is true (asked about once a second)."""
        self._may(Grant.HISTORY_READ, "read events")
        after = check_int("after", after, low=0, high=_MAX_EVENT_ID)
        if timeout is not None:
            timeout = check_seconds("timeout", timeout)
        session = self._session(session_id)
        return iterating(
            event_log.follow(self._svc, session.id, after=after, timeout=timeout, stop=stop)
        )
