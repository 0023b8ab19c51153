"""The delegation port: the use cases a turn's collaboration tools call.

:class:`chaz.runtime.registry.Delegation` is the port the tools see; this is
its one implementation, over admission, control and deliveries, for the
turns of one runner (docs/runtime.md#tools).
"""

from __future__ import annotations

from typing import Any, Protocol

from chaz.domain.deliveries import Delivered, DeliveryKind, NewBranch, Reply, Sender
from chaz.domain.entries import NewEntry
from chaz.domain.jobs import Job
from chaz.domain.sessions import Session
from chaz.services import Services
from chaz.store.types import Appended, JobFields
from chaz.usecases import admission, control, deliveries


class Inline(Protocol):
    """What delegation needs of the runner: its services, and a turn run in
    this thread on a lent slot (:meth:`chaz.usecases.turns.TurnRunner.wake`)."""

    services: Services

    def wake(self, session_id: str, execution_id: str, *, lend_slot: bool = False) -> object:
        """Run the session's head job here (``lend_slot``: on the caller's live slot)."""
        ...


class RunnerDelegation:
    """The use cases collaboration tools call (:class:`chaz.runtime.registry.Delegation`),
    for the turns of one :class:`chaz.usecases.turns.TurnRunner`."""

    def __init__(self, runner: Inline) -> None:
        self._runner = runner
        self._services = runner.services

    def admit(
        self, session_id: str, draft: NewEntry, *, job_fields: JobFields | None = None
    ) -> Appended:
        return admission.admit(self._services, session_id, draft, job_fields=job_fields)

    def run_inline(self, session_id: str, job_id: str) -> None:
        self._runner.wake(session_id, job_id, lend_slot=True)

    def wait(self, job_id: str, timeout: float) -> Job:
        return control.wait_terminal(self._services, job_id, timeout)

    def output(
        self,
        job_id: str,
        viewer_session_id: str,
        *,
        block: bool,
        timeout: float,
        full: bool = False,
    ) -> dict[str, Any]:
        return control.job_output(
            self._services, job_id, viewer_session_id, block=block, timeout=timeout, full=full
        )

    def spawn(self, sender: Sender, branch: NewBranch) -> Delivered:
        return deliveries.spawn(self._services, sender, branch)

    def deliver(
        self, sender: Sender, target: Session, kind: DeliveryKind, body: str, reply: Reply
    ) -> Delivered:
        return deliveries.deliver(self._services, sender, target, kind, body, reply=reply)
