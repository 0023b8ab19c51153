"""Cancel flags: ``chaz:cancel:{job}``, set while a running job's cancellation is requested.

``execution.cancel`` sets the flag once the job is ``stopping`` in the
database; the turn checks it at every step boundary. ``lua/turn_started.lua``
reads it and ``lua/turn_ended.lua`` deletes it when the turn ends the job.
See docs/coordination.md#cancel-flags.
"""

from __future__ import annotations

import redis

from chaz.coord import keys

#: The reason a flag holds when none was given, or when the reconciler restored it.
DEFAULT_REASON = "cancelled"


class CancelFlags:
    """The cancel flags of running jobs."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def request(self, job_id: str, reason: str = "") -> None:
        """Ask the job's turn to stop at its next step boundary (the flag holds ``reason``)."""
        self.client.set(keys.cancel(job_id), reason or DEFAULT_REASON)

    def requested(self, job_id: str) -> bool:
        """Whether cancellation of the job is requested."""
        return bool(self.client.exists(keys.cancel(job_id)))

    def restore(self, job_id: str) -> None:
        """Set the flag of a ``stopping`` job if it is missing (lost with Redis).

        An existing flag keeps its reason.
        """
        self.client.set(keys.cancel(job_id), DEFAULT_REASON, nx=True)
