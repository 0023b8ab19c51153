"""Sending wake-ups to the workers: the ``chaz.turn`` Celery task, by name.

The library never imports the worker package; it only needs the broker and
the task's name. A wake-up is a hint: the worker runs whatever job is at the
head of the session, so duplicates and stale wake-ups are harmless.

Every wake-up goes through :meth:`Dispatcher.send_wake` and names its
:class:`Wake` reason, which decides how hard the send tries and what the log
says when it fails (docs/executions.md#wake-ups).
"""

from __future__ import annotations

import logging
import threading
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from chaz import tracing
from chaz.brokers import configure, whole_seconds
from chaz.settings import Settings, broker_url_for

if TYPE_CHECKING:
    from celery import Celery

log = logging.getLogger(__name__)

TURN_TASK = "chaz.turn"
#: Stage-2 naming of a session (chaz.usecases.naming), on the housekeeping queue.
RENAME_TASK = "chaz.rename"
#: One attempt of a run's webhook (chaz.usecases.webhooks), on the housekeeping queue.
WEBHOOK_TASK = "chaz.webhook"

#: The wake-up's header naming its job's session tree: with it, the worker
#: takes the job's live slot in its lane's script (chaz.coord.lanes). A
#: header, not an argument: a worker that does not know it ignores it.
TREE_HEADER = "chaz_tree"

#: How long a patient wake-up keeps trying to reach the broker.
PATIENT_SECONDS = 60.0
#: kombu's retry policy for it: every second, up to PATIENT_SECONDS.
PATIENT_RETRY = {
    "max_retries": int(PATIENT_SECONDS),
    "interval_start": 0.5,
    "interval_step": 0.5,
    "interval_max": 1.0,
}


class Wake(StrEnum):
    """Why a session is woken: every sender of a wake-up names one."""

    #: A new job was committed (a post, a delivery, a follow-up, a room mention).
    ADMITTED = "admitted"
    #: A schedule's fire admitted its job.
    FIRED = "fired"
    #: An approval decision queued its job again (docs/approvals.md).
    DECIDED = "decided"
    #: A turn's end released the lane and found more work waiting.
    NEXT = "next"
    #: A compaction released the lane its head job waited behind.
    COMPACTED = "compacted"
    #: A turn's end freed a live slot the session's tree waited for.
    SLOT_FREED = "slot-freed"
    #: A turn stopped on a transient fault: it resumes from its checkpoint.
    RETRY = "retry"
    #: A worker shutting down handed its turn back (docs/operations.md#termination).
    HANDED_BACK = "hand-back"
    #: A lane lease expired with its job unfinished (the lease watch).
    LEASE_EXPIRED = "lease-expired"
    #: The reconciler's sweep found the session's head job stranded.
    RECONCILE = "reconcile"


#: The reasons whose wake-up nobody else would send before the reconciler's
#: sweep: their send keeps trying through a broker outage.
PATIENT = frozenset({Wake.RETRY, Wake.HANDED_BACK, Wake.LEASE_EXPIRED})


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
                    app.config_from_object("chaz.celery_settings")
                    configure(app.conf, broker_url_for(self._settings))
                    # No task-sent event per wake-up: one more PUBLISH (and an
                    # event message built) on every admission, which the
                    # contract does not need; a worker's received/started
                    # events still show every turn in Flower.
                    app.conf.task_send_sent_event = False
                    self._app = app
        return self._app

    def send_wake(
        self,
        session_id: str,
        execution_id: str,
        reason: Wake,
        *,
        countdown: float | None = None,
        tree: str | None = None,
    ) -> bool:
        """Ask a worker to run the session's next turn (in ``countdown`` seconds).

        A failure to publish is logged, not raised: the job is committed, and
        the reconciler's sweep sends the wake-up again (write first, publish
        second; a lost notification delays work, it never loses it). A
        :data:`PATIENT` reason keeps retrying through a broker outage of up
        to :data:`PATIENT_SECONDS`: a worker re-queuing a turn that a Redis
        restart interrupted must not lose that wake-up to the same restart.
        ``tree``: the session tree of ``execution_id``'s job, when the
        sender has it at hand (:data:`TREE_HEADER`). Returns whether the
        wake-up was sent.
        """
        options: dict[str, Any] = (
            {"retry": True, "retry_policy": PATIENT_RETRY} if reason in PATIENT else {}
        )
        # The sender's trace context, in the message's headers (None when
        # tracing is off): the wake-up joins its admission's trace
        # (docs/operations.md#tracing).
        headers = tracing.carrier() or {}
        if tree:
            headers[TREE_HEADER] = tree
        if headers:
            options["headers"] = headers
        try:
            self.app.send_task(
                TURN_TASK,
                kwargs={"session_id": session_id, "execution_id": execution_id},
                queue="chaz.turns",
                countdown=whole_seconds(broker_url_for(self._settings), countdown),
                **options,
            )
        except Exception:
            log.warning(
                "could not send a wake-up (%s) for session %s",
                reason.value,
                session_id,
                exc_info=True,
            )
            return False
        return True

    def rename(self, session_id: str) -> bool:
        """Ask a worker to rename the session from its transcript (``chaz.rename``).

        On ``chaz.control``, beside the reconciler: a slow model call there
        never holds a turn thread. A lost request only leaves the stage-1
        name (logged, not raised); returns whether it was sent.
        """
        try:
            self.app.send_task(RENAME_TASK, kwargs={"session_id": session_id}, queue="chaz.control")
        except Exception:
            log.warning("could not send a rename for session %s", session_id, exc_info=True)
            return False
        return True

    def send_webhook(self, job_id: str, *, countdown: float | None = None) -> bool:
        """Ask a worker to attempt the ended job's webhook (``chaz.webhook``), in
        ``countdown`` seconds. On ``chaz.control``: an attempt is one bounded
        POST (CHAZ_WEBHOOK_TIMEOUT_SECONDS) and never holds a turn's queue. A
        lost send only delays it: the reconciler's sweep sends it again
        (logged, not raised); returns whether it was sent."""
        try:
            self.app.send_task(
                WEBHOOK_TASK,
                args=[job_id],
                queue="chaz.control",
                countdown=whole_seconds(broker_url_for(self._settings), countdown),
            )
        except Exception:
            log.warning("could not send the webhook of job %s", job_id, exc_info=True)
            return False
        return True

    def close(self) -> None:
        """Release broker connections."""
        if self._app is not None:
            self._app.close()
