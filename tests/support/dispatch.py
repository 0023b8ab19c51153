"""A dispatcher that records wake-ups instead of sending them, for tests that
drive turns and repairs step by step with no worker consuming."""

from __future__ import annotations

from chaz.plumbing.dispatch import Wake


class RecordingDispatcher:
    """Stands in for :class:`chaz.plumbing.dispatch.Dispatcher`: ``wakes`` lists each
    ``(session_id, execution_id)`` asked for, in order."""

    def __init__(self) -> None:
        self.wakes: list[tuple[str, str]] = []
        #: ``(job_id, countdown)`` of each webhook attempt asked for.
        self.webhooks: list[tuple[str, float | None]] = []

    def send_wake(self, session_id: str, execution_id: str, reason: Wake, **_: object) -> bool:
        """Record the wake-up (its reason and the real one's options, such as
        ``countdown``, change only how it is sent); it always "succeeds"."""
        self.wakes.append((session_id, execution_id))
        return True

    def send_webhook(self, job_id: str, *, countdown: float | None = None) -> bool:
        """Record the webhook attempt asked for; it always "succeeds"."""
        self.webhooks.append((job_id, countdown))
        return True

    def close(self) -> None:
        """Nothing to release."""
