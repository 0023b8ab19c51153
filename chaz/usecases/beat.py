"""chaz's Celery beat scheduler: the static entries, and schedules from the database.

``beat_scheduler = "chaz.usecases.beat:ChazScheduler"`` (chaz.celery_settings). Like
django-celery-beat's and redbeat's schedulers, it subclasses a Celery
scheduler (:class:`celery.beat.PersistentScheduler`, whose schedule file
keeps the configured ``beat_schedule`` entries' last runs: the reconciler,
retention); on each tick it
also looks at the ``schedules`` table and sends one ``chaz.fire`` task per due
slot, on the ``chaz.schedules`` queue (docs/schedules.md#beat).

A tick lasts at most :data:`POLL_SECONDS`; between slots it reads only a change
marker (latest ``updated_at`` and count), so an added or changed schedule is
seen within that, and it wakes at the soonest slot it knows. What it sends is
not trusted to be unique: two beats, or a restarted one, may send a slot
twice, and the fire's claim keeps one.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from celery.beat import PersistentScheduler

from chaz.coord import keys
from chaz.ids import utcnow
from chaz.services import Services
from chaz.settings import get_settings
from chaz.usecases import schedules

log = logging.getLogger(__name__)

#: The longest a tick sleeps: schedules added or changed are seen this soon.
POLL_SECONDS = 1.0
#: The task a due slot sends, and its queue (chaz.celery_settings.task_routes).
FIRE_TASK = "chaz.fire"
FIRE_QUEUE = "chaz.schedules"
#: How long a tick's heartbeat key lives: a beat that has not ticked for this
#: long is taken for stopped (``chaz doctor``). Ticks come every POLL_SECONDS.
HEARTBEAT_SECONDS = 10.0


class ChazScheduler(PersistentScheduler):  # type: ignore[misc]
    """Celery beat's scheduler for chaz: static entries plus agent-owned schedules.

    The static entries keep their last-run times in beat's schedule file
    (``-s``), as Celery's default scheduler does: a beat restarted more often
    than an entry's period (the hourly retention sweeps) must still run it.
    Agent-owned schedules keep theirs in the database.
    """

    #: Base-class knob: the longest sleep between two ticks.
    max_interval = POLL_SECONDS

    def __init__(self, app: Any, *args: Any, **kwargs: Any) -> None:
        self._services: Services | None = None
        self._marker: Any = None
        self._soonest: datetime | None = None
        super().__init__(app, *args, **kwargs)
        self.max_interval = min(self.max_interval, POLL_SECONDS)

    @property
    def services(self) -> Services:
        """This beat's connections, made on first use (after the fork, if any)."""
        if self._services is None:
            self._services = Services(get_settings())
        return self._services

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """Run the static entries' tick, then the schedules'; the seconds to sleep."""
        static: float = super().tick(*args, **kwargs)
        self._heartbeat()
        return min(static, self._tick_schedules())

    def _heartbeat(self) -> None:
        try:
            self.services.redis.set(
                keys.beat_heartbeat(), utcnow().isoformat(), px=int(HEARTBEAT_SECONDS * 1000)
            )
        except Exception:
            # Redis is away: beat goes on, and chaz doctor reports no heartbeat.
            log.warning("beat: heartbeat could not be written", exc_info=True)

    def _tick_schedules(self) -> float:
        now = utcnow()
        try:
            book = self.services.store.schedules
            marker = book.changed_since()
            look = marker != self._marker or self._soonest is None or self._soonest <= now
            if look:
                # A change may have added an earlier slot; a slot may have come.
                self._marker = marker
                schedules.send_due(self.services, self._send, now)
                self._soonest = book.soonest()
        except Exception:
            # The database or broker is away: try again next tick, as the
            # static entries' failures are retried.
            log.warning("beat: schedules could not be read or sent", exc_info=True)
            self._soonest = None
            return POLL_SECONDS
        if self._soonest is None:
            return POLL_SECONDS
        wait = (self._soonest - utcnow()).total_seconds()
        return max(0.01, min(wait, POLL_SECONDS))

    def _send(self, schedule_id: str, slot: datetime) -> None:
        log.info("beat: firing schedule %s at slot %s", schedule_id, slot.isoformat())
        self.app.send_task(
            FIRE_TASK,
            args=[schedule_id, slot.isoformat()],
            queue=FIRE_QUEUE,
            # A slot long late has been caught up (or skipped) by the plan; a
            # message that waited in the broker an hour is still claimed once.
            expires=3600,
        )

    def close(self) -> None:
        """Close the base scheduler, then this beat's connections."""
        super().close()
        if self._services is not None:
            self._services.close()
            self._services = None

    @property
    def info(self) -> str:
        """What ``celery beat`` prints at start-up."""
        return f"chaz schedules (polled every {POLL_SECONDS:g}s) + beat_schedule"
