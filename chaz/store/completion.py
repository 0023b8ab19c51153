"""A job's end, beyond the job: its event, and its delivery's completion policy.

Runs inside the transaction that ends the job (a turn's end, a transition
to a terminal state), so the policy commits with the end or not at all
(docs/collaboration.md#follow-ups).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, func, select, update

from chaz.domain import events as ev
from chaz.domain.deliveries import (
    REQUESTS,
    Delivery,
    DeliveryKind,
    DeliveryState,
    Reply,
    followup,
    followup_key,
    frozen_result,
    result_key,
    result_text,
)
from chaz.domain.jobs import JobStatus
from chaz.domain.results import excerpt
from chaz.domain.sessions import ArchivedBy
from chaz.ids import utcnow
from chaz.store import deliveries as dl
from chaz.store import schedules
from chaz.store import statements as st
from chaz.store.events import record
from chaz.store.models import ArtifactRow, EntryRow, SessionRow


def ended(
    conn: Connection,
    job_id: str,
    session_id: str,
    status: JobStatus,
    *,
    result: str | None,
    error: dict[str, Any] | None,
    delivery_id: str | None,
    fire_id: str | None = None,
) -> None:
    """What a job's end changes besides the job, in the same transaction: for a
    schedule fire's job the fire's outcome (docs/schedules.md), and for a
    delivered job its event and its delivery's completion policy (a
    producer's own job needs neither).

    The policy (docs/collaboration.md#follow-ups): the delivery is ``done``;
    an attach pointer in the caller's session gets the job's status and the
    child's head; ``archive_when_done`` archives the session; a ``followup``
    reply records one follow-up delivery back to the sender session (unique
    per finished job, so a repeated end cannot make two). The follow-up is
    admitted after the commit (:mod:`chaz.usecases.deliveries`); a crash in between
    leaves it ``accepted``, and the reconciler admits it.
    """
    if fire_id is not None:
        # A schedule fire's job: its end is the fire's outcome in the ledger.
        schedules.job_ended(conn, fire_id, status, error)
        record(conn, session_id, ev.job_event(status.value), {"job_id": job_id})
    if delivery_id is None:
        return
    record(conn, session_id, ev.job_event(status.value), {"job_id": job_id})
    delivery = dl.move(
        conn,
        delivery_id,
        DeliveryState.DONE,
        leaving=[DeliveryState.ADMITTED],
        unless_kinds=REQUESTS,
    )
    if delivery is None:
        # Moved already, or one of seed 002's requests, whose end is its own.
        request_ended(
            conn, job_id, session_id, status, result=result, error=error, delivery_id=delivery_id
        )
        return
    target = conn.execute(st.SESSION_BY_ID, {"ref": session_id}).mappings().one()
    pointer = delivery.metadata.get("attach_entry_id")
    if pointer:
        _patch_attach(conn, pointer, status=status.value, head_seq=target["last_seq"])
    if delivery.archive_when_done:
        _archive_auto(conn, session_id, "archive_when_done")
    if delivery.reply is not Reply.FOLLOWUP or delivery.sender_session_id is None:
        return
    label = f"{target['name'] or 'session'} ({session_id})"
    said = followup(status.value, excerpt(result or "")[0], error, label=label)
    if said is None:
        return
    text, is_error = said
    _answer(
        conn,
        delivery,
        DeliveryKind.FOLLOWUP,
        target,
        job_id,
        body=text,
        metadata={
            "is_error": is_error,
            "status": status.value,
            "session_id": session_id,
            "execution_id": job_id,
            "head_seq": target["last_seq"],
        },
        key=followup_key(job_id),
    )


def request_ended(
    conn: Connection,
    job_id: str,
    session_id: str,
    status: JobStatus,
    *,
    result: str | None,
    error: dict[str, Any] | None,
    delivery_id: str,
) -> None:
    """The end of a ``session_send`` / ``session_create`` request's job, in its transaction.

    The request becomes ``done`` (its turn succeeded) or ``failed`` with the
    job's code (``delivery.interrupted`` for a turn lost mid-flight); its
    terminal result, frozen (final text and artifact references, nothing of
    how the turn got there), is stored on the request; and with
    ``reply="completion"`` one result delivery back to the sender session is
    recorded, unique per request (:func:`~chaz.domain.deliveries.result_key`),
    so however often this end is applied there is one
    (docs/sessions.md#sending-between-sessions).
    """
    request = dl.locked(conn, delivery_id)
    if (
        request is None
        or request.kind not in REQUESTS
        or request.state is not DeliveryState.ADMITTED
    ):
        return
    refs = conn.execute(
        select(ArtifactRow.id, ArtifactRow.byte_length, ArtifactRow.sha256).where(
            ArtifactRow.job_id == job_id
        )
    ).all()
    frozen = frozen_result(
        request.id,
        session_id=session_id,
        execution_id=job_id,
        status=status.value,
        text=excerpt(result or "")[0],
        error=error,
        artifacts=[{"artifact_id": a, "byte_length": n, "sha256": h} for a, n, h in refs],
    )
    succeeded = status is JobStatus.SUCCEEDED
    dl.move(
        conn,
        request.id,
        DeliveryState.DONE if succeeded else DeliveryState.FAILED,
        leaving=[DeliveryState.ADMITTED],
        code=None if succeeded else frozen["code"],
        reason=None if succeeded else frozen["message"],
        metadata={**request.metadata, "result": frozen},
    )
    target = conn.execute(st.SESSION_BY_ID, {"ref": session_id}).mappings().one()
    pointer = request.metadata.get("attach_entry_id")
    if pointer:
        _patch_attach(conn, pointer, status=status.value, head_seq=target["last_seq"])
    if request.reply is not Reply.COMPLETION or request.sender_session_id is None:
        return
    label = f"{target['name'] or 'session'} ({session_id})"
    _answer(
        conn,
        request,
        DeliveryKind.RESULT,
        target,
        job_id,
        body=result_text(frozen, label),
        metadata=frozen,
        key=result_key(request.id),
    )


def _answer(
    conn: Connection,
    delivery: Delivery,
    kind: DeliveryKind,
    target: Any,
    job_id: str,
    *,
    body: str,
    metadata: dict[str, Any],
    key: str,
) -> None:
    """Record, once per ``key``, the delivery that answers ``delivery`` from its
    target (a follow-up or a request's result) back into its sender session.

    The chain's counters travel back unchanged: reading a result spends no
    message and no generation (docs/contracts.md#topology); and the caller's
    turn continues with the authority it handed on.
    """
    assert delivery.sender_session_id is not None
    caller_depth = conn.scalar(
        select(SessionRow.call_depth).where(SessionRow.id == delivery.sender_session_id)
    )
    dl.insert_once(
        conn,
        dl.new_row(
            kind=kind,
            sender=f"agent:{target['agent_id']}",
            sender_session_id=target["id"],
            sender_job_id=job_id,
            target_session_id=delivery.sender_session_id,
            body=body,
            message_count=delivery.message_count,
            generation=int(caller_depth or 0),
            state=DeliveryState.ACCEPTED,
            answers_job_id=job_id,
            metadata=metadata,
            idempotency_key=key,
            project=delivery.project,
            owner=delivery.owner,
            grants=delivery.grants,
            unattended=delivery.unattended,
        ),
    )


def _patch_attach(conn: Connection, entry_id: str, **attach: Any) -> None:
    """Record a child's end on the attach pointer that points to it.

    The pointer is the one entry chaz updates in place: it is a card in the
    caller's session, not conversation, and its update moves no seq.
    """
    meta = conn.scalar(select(EntryRow.meta).where(EntryRow.id == entry_id).with_for_update())
    if meta is None:
        return
    patched = {**meta, "attach": {**meta.get("attach", {}), **attach}}
    conn.execute(update(EntryRow).where(EntryRow.id == entry_id).values(meta=patched))


def _archive_auto(conn: Connection, session_id: str, reason: str) -> None:
    """Archive a session by completion policy, unless it is archived already
    (then its first ``archived_at`` and any manual reason stand)."""
    now = utcnow()
    done = conn.execute(
        update(SessionRow)
        .where(SessionRow.id == session_id, SessionRow.archived_at.is_(None))
        .values(
            archived_at=now,
            archived_by=ArchivedBy.AUTO.value,
            archive_reason=func.coalesce(SessionRow.archive_reason, reason),
        )
    ).rowcount
    if done:
        # The same shape as a manual archive's event (chaz.store.directory).
        record(
            conn,
            session_id,
            ev.SESSION_ARCHIVED,
            {
                "archived_at": now.isoformat(),
                "archived_by": ArchivedBy.AUTO.value,
                "reason": reason,
                "requested_by": ArchivedBy.AUTO.value,
            },
        )
