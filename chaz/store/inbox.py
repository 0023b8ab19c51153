"""Deliveries' writes on the store itself: a message into its target's inbox,
a delivery's settling, and the sweep's end of a delivery left ``admitted``.

The delivery rows' own operations (insert, move, lock, the inbox's read)
are :mod:`chaz.store.deliveries`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from chaz.domain.deliveries import DUPLICATE_WINDOW, Delivery, DeliveryState
from chaz.domain.jobs import JobStatus
from chaz.errors import DuplicateDelivery, SessionArchived, SessionNotFound
from chaz.ids import utcnow
from chaz.store import deliveries as dl
from chaz.store import statements as st
from chaz.store.db import Database
from chaz.store.ending import Completion, job_ended
from chaz.store.writes import lock_job


class Inbox:
    """Queue, settle and finalize deliveries (``store.queue_message``, ...)."""

    db: Database

    def queue_message(
        self, values: dict[str, Any], *, limit: int, window: timedelta = DUPLICATE_WINDOW
    ) -> tuple[Delivery, list[Delivery]]:
        """Put a message delivery (a new row's ``values``) into its target's inbox.

        With the target's row locked: an archived target refuses it
        (:class:`SessionArchived`); the same text from the same sender while
        a copy still waits and is younger than ``window`` is
        :class:`DuplicateDelivery`; a full inbox (``limit``) drops its oldest
        messages to make room. Returns the queued delivery and the dropped ones.
        """
        target = values["target_session_id"]
        with self.db.write() as conn:
            row = conn.execute(st.LOCK_SESSION, {"sid": target}).mappings().first()
            if row is None:
                raise SessionNotFound(f"no session {target!r}", session=target)
            if row["archived_at"] is not None:
                raise SessionArchived(
                    f"session {row['name'] or target} is archived and takes no new deliveries",
                    session_id=target,
                )
            waiting = dl.inbox(conn, target, lock=True)
            now = utcnow()
            for d in waiting:
                same = (d.sender, d.sender_session_id, d.body) == (
                    values["sender"],
                    values["sender_session_id"],
                    values["body"],
                )
                if same and now - d.created_at < window:
                    raise DuplicateDelivery(
                        "the same message is still waiting in the target's inbox "
                        f"(queued {int((now - d.created_at).total_seconds())}s ago); "
                        "it will be delivered when the target's turn ends",
                        delivery_id=d.id,
                    )
            dropped = []
            for old in waiting[: max(0, len(waiting) + 1 - limit)]:
                moved = dl.move(
                    conn,
                    old.id,
                    DeliveryState.DROPPED,
                    leaving=[DeliveryState.ACCEPTED],
                    code="inbox.full",
                    reason=f"the inbox holds at most {limit} messages",
                )
                if moved is not None:
                    dropped.append(moved)
            dl.insert_row(conn, values)
        return dl.as_delivery(values), dropped

    def settle_delivery(
        self,
        delivery_id: str,
        state: DeliveryState,
        *,
        leaving: Iterable[DeliveryState],
        code: str | None = None,
        reason: str | None = None,
    ) -> Delivery | None:
        """Move a delivery to ``state`` if it is in one of ``leaving`` (else None)."""
        with self.db.write() as conn:
            return dl.move(conn, delivery_id, state, leaving=leaving, code=code, reason=reason)

    def finalize_delivery(self, delivery: Delivery, *, completion: Completion) -> bool:
        """Apply ``completion`` (the policy) to a delivery left ``admitted`` after its
        job ended (the reconciler's sweep); whether it moved. Its job's row is
        locked, and every move is a compare-and-set, so a concurrent end and
        this one cannot both apply it."""
        if delivery.job_id is None:
            return False
        with self.db.write() as conn:
            row = lock_job(conn, delivery.job_id)
            status = JobStatus(row["status"])
            if not status.terminal:
                return False
            job_ended(
                conn,
                delivery.job_id,
                row["session_id"],
                status,
                result=row["result"],
                error=row["error"],
                delivery_id=delivery.id,
                completion=completion,
            )
            after = dl.locked(conn, delivery.id)
            return after is not None and after.state is not DeliveryState.ADMITTED

    def silence_followups(self, job_ids: Iterable[str]) -> None:
        """The jobs' ends will send no follow-up (a caller's cancel cascades to them)."""
        with self.db.write() as conn:
            dl.silence(conn, job_ids)
