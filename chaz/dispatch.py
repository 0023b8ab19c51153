"""Sending wake-ups to the workers: the ``chaz.turn`` Celery task, by name.

The library never imports the worker package; it only needs the broker and
the task's name. A wake-up is a hint: the worker runs whatever job is at the
head of the session, so duplicates and stale wake-ups are harmless.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from chaz.settings import Settings, broker_url_for

if TYPE_CHECKING:
    from celery import Celery

log = logging.getLogger(__name__)

TURN_TASK = "chaz.turn"


class Dispatcher:
    """Publishes wake-up tasks to the broker."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._app: Celery | None = None
        self._lock = threading.Lock()

    @property
    def app(self) -> Celery:
        """The producer-side Celery app (created on first use)."""
        if self._app is None:
            with self._lock:
                if self._app is None:
                    # Imported on the first wake-up: a client that only reads
                    # never pays for loading Celery.
                    from celery import Celery

                    app = Celery("chaz-producer", set_as_current=False)
                    app.config_from_object("celeryconfig")
                    app.conf.broker_url = broker_url_for(self._settings)
                    self._app = app
        return self._app

    def wake(self, session_id: str, execution_id: str) -> None:
        """Ask a worker to run the session's next turn.

        A failure to publish is logged, not raised: the job is committed, and
        the reconciler's sweep sends the wake-up again (write first, publish
        second; a lost notification delays work, it never loses it).
        """
        try:
            self.app.send_task(
                TURN_TASK,
                kwargs={"session_id": session_id, "execution_id": execution_id},
                queue="chaz.turns",
            )
        except Exception:
            log.warning("could not send a wake-up for session %s", session_id, exc_info=True)

    def close(self) -> None:
        """Release broker connections."""
        if self._app is not None:
            self._app.close()
