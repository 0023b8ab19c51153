"""A job's end beyond the job row, in the transaction that ends it.

The store's own part is bookkeeping: a schedule fire's outcome in its
ledger, and the job's event in its session's log. What a delivered job's
end *means* (its delivery done, a follow-up to its sender, an attach
pointer patched, its session archived) is the completion policy, a use
case (:mod:`chaz.usecases.completion`): whoever ends a job hands it in as a
:data:`Completion`, and it runs over an :class:`Ending`, the named
operations it may apply inside the open transaction. The policy commits
with the end or not at all (docs/collaboration.md#follow-ups).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import Connection, select

from chaz.domain import events as ev
from chaz.domain.deliveries import Delivery, DeliveryKind, DeliveryState
from chaz.domain.jobs import JobStatus
from chaz.domain.sessions import Session
from chaz.store import artifacts, directory, entries
from chaz.store import deliveries as dl
from chaz.store import statements as st
from chaz.store.events import record
from chaz.store.models import SessionRow
from chaz.store.rows import as_session


class Ending:
    """A delivered job's end, in the open transaction that ends it.

    The job (``job_id``, its ``session_id``, ``status``, ``result``,
    ``error``) and the delivery that admitted it (``delivery_id``), with the
    operations the completion policy applies.
    """

    def __init__(
        self,
        conn: Connection,
        job_id: str,
        session_id: str,
        status: JobStatus,
        *,
        result: str | None,
        error: dict[str, Any] | None,
        delivery_id: str,
    ) -> None:
        self._conn = conn
        self.job_id = job_id
        self.session_id = session_id
        self.status = status
        self.result = result
        self.error = error
        self.delivery_id = delivery_id

    def move(
        self,
        delivery_id: str,
        state: DeliveryState,
        *,
        leaving: Iterable[DeliveryState],
        code: str | None = None,
        reason: str | None = None,
        metadata: dict[str, Any] | None = None,
        unless_kinds: Iterable[DeliveryKind] = (),
    ) -> Delivery | None:
        """Move a delivery to ``state`` if it is in one of ``leaving`` and not
        of ``unless_kinds``; the delivery as moved, else None."""
        return dl.move(
            self._conn,
            delivery_id,
            state,
            leaving=leaving,
            code=code,
            reason=reason,
            metadata=metadata,
            unless_kinds=unless_kinds,
        )

    def locked(self, delivery_id: str) -> Delivery | None:
        """A delivery, its row locked for this transaction."""
        return dl.locked(self._conn, delivery_id)

    def session(self, session_id: str) -> Session:
        """A session as it is in this transaction."""
        return as_session(
            self._conn.execute(st.SESSION_BY_ID, {"ref": session_id}).mappings().one()
        )

    def call_depth(self, session_id: str) -> int:
        """A session's generation (its ``call_depth``; 0 if it is gone)."""
        depth = self._conn.scalar(select(SessionRow.call_depth).where(SessionRow.id == session_id))
        return int(depth or 0)

    def artifacts(self) -> list[dict[str, Any]]:
        """The references of the job's artifact (at most one)."""
        return artifacts.refs(self._conn, self.job_id)

    def patch_attach(self, entry_id: str, **attach: Any) -> None:
        """Record the job's end on the attach pointer ``entry_id``."""
        entries.patch_attach(self._conn, entry_id, **attach)

    def archive(self, reason: str) -> None:
        """Archive the job's session by policy, unless it is archived already."""
        directory.archive_auto(self._conn, self.session_id, reason)

    def answer(self, values: dict[str, Any]) -> None:
        """Record a delivery back (a new row's ``values``) once per its idempotency key."""
        dl.insert_once(self._conn, values)


#: What a delivered job's end does beyond the job (the completion policy),
#: applied in the transaction that ends it.
Completion = Callable[[Ending], None]


def job_ended(
    conn: Connection,
    job_id: str,
    session_id: str,
    status: JobStatus,
    *,
    result: str | None,
    error: dict[str, Any] | None,
    delivery_id: str | None,
    completion: Completion,
    fire_id: str | None = None,
    webhook: str | None = None,
    project: str = "default",
) -> None:
    """What a job's end changes besides the job, in the same transaction: for a
    schedule fire's job the fire's outcome (docs/schedules.md), for a
    delivered job its event and ``completion`` (a producer's own job needs
    neither), and for a run that names a ``webhook`` its outbox row
    (docs/http.md#webhooks), so the POST survives any crash after the commit."""
    # The webhooks' and schedules' stores are imported only by the jobs that
    # need them, so that a worker's start does not load them (and their domain
    # modules) for the turns that never do.
    if webhook is not None:
        from chaz.store import webhooks

        webhooks.record(conn, job_id=job_id, session_id=session_id, project=project, url=webhook)
    if fire_id is not None:
        # A schedule fire's job: its end is the fire's outcome in the ledger.
        from chaz.store import schedules

        schedules.job_ended(conn, fire_id, status, error)
        record(conn, session_id, ev.job_event(status.value), {"job_id": job_id})
    if delivery_id is None:
        return
    record(conn, session_id, ev.job_event(status.value), {"job_id": job_id})
    completion(
        Ending(
            conn, job_id, session_id, status, result=result, error=error, delivery_id=delivery_id
        )
    )
