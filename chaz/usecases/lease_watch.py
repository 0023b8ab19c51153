"""The lease watch: wakes a session whose lane lease expired without being given back.

Every worker process runs one (a thread, started when the worker is ready).
A lease that expires unreleased means its turn's worker died or lost Redis
for longer than the lease; nobody else will wake that session, so the watch
does, at most half a heartbeat after the expiry, with no beat and no reconciler
pass needed. The claim is atomic (:meth:`chaz.coord.lanes.Lanes.expired`),
so one worker wakes each session once; the wake-up itself is a hint, and a
duplicate finds the lane busy.
"""

from __future__ import annotations

import logging
import threading

from chaz import metrics
from chaz.coord.lanes import heartbeat_seconds
from chaz.plumbing.dispatch import Wake
from chaz.services import Services

log = logging.getLogger(__name__)


class LeaseWatch:
    """Finds expired lane leases and wakes their sessions."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sweep(self) -> list[str]:
        """One pass: the sessions it woke."""
        svc = self.services
        woken = []
        for session_id, bucket in svc.lanes.expired():
            try:
                head = svc.store.head_job(session_id)
                if head is None:
                    continue  # the turn finished; only its release was lost
                log.warning(
                    "the lease of session %s expired with job %s unfinished; waking it",
                    session_id,
                    head.id,
                )
                if svc.dispatcher.send_wake(
                    session_id, head.id, Wake.LEASE_EXPIRED, tree=head.tree_id
                ):
                    woken.append(session_id)
                    metrics.LANE_TAKEOVERS.inc()
                    continue
            except Exception:
                log.warning("could not wake session %s", session_id, exc_info=True)
            # Not woken: put it back, due now, for the next pass.
            svc.lanes.watch_again(session_id, bucket)
        return woken

    def start(self) -> None:
        """Run :meth:`sweep` every half heartbeat on a daemon thread."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="chaz-lease-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread after its current pass."""
        self._stop.set()

    def _run(self) -> None:
        # Twice per heartbeat: one script call, and half a heartbeat less
        # between a lease's expiry and the resume.
        interval = heartbeat_seconds(self.services.settings.lease_seconds) / 2
        while not self._stop.wait(interval):
            try:
                self.sweep()
            except Exception:
                # Redis away: the leases zset waits there for the next pass.
                log.debug("lease watch pass failed", exc_info=True)
