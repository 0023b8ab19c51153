"""The completion policy: what a delivered job's end does beyond the job.

Handed to the store as the ``completion`` of every operation that ends a job
(``Store.end_turn``, ``Store.transition``, ``Store.finalize_delivery``) and
run over a :class:`~chaz.store.ending.Ending` inside the transaction that
ends it, so the policy commits with the end or not at all
(docs/collaboration.md#follow-ups).
"""

from __future__ import annotations

from typing import Any

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
from chaz.domain.sessions import Session
from chaz.store import deliveries as dl
from chaz.store.ending import Ending


def ended(tx: Ending) -> None:
    """Apply a delivered job's completion policy in the transaction that ends it.

    The delivery is ``done``; an attach pointer in the caller's session gets
    the job's status and the child's head; ``archive_when_done`` archives
    the session; a ``followup`` reply records one follow-up delivery back
    to the sender session (unique per finished job, so a repeated end
    cannot make two). The follow-up is admitted after the commit
    (:mod:`chaz.usecases.deliveries`); a crash in between leaves it
    ``accepted``, and the reconciler admits it.
    """
    delivery = tx.move(
        tx.delivery_id,
        DeliveryState.DONE,
        leaving=[DeliveryState.ADMITTED],
        unless_kinds=REQUESTS,
    )
    if delivery is None:
        # Moved already, or a request (docs/contracts.md#requests), whose end is its own.
        request_ended(tx)
        return
    target = tx.session(tx.session_id)
    pointer = delivery.metadata.get("attach_entry_id")
    if pointer:
        tx.patch_attach(pointer, status=tx.status.value, head_seq=target.last_seq)
    if delivery.archive_when_done:
        tx.archive("archive_when_done")
    if delivery.reply is not Reply.FOLLOWUP or delivery.sender_session_id is None:
        return
    label = f"{target.name or 'session'} ({tx.session_id})"
    said = followup(tx.status.value, excerpt(tx.result or "")[0], tx.error, label=label)
    if said is None:
        return
    text, is_error = said
    _answer(
        tx,
        delivery,
        DeliveryKind.FOLLOWUP,
        target,
        body=text,
        metadata={
            "is_error": is_error,
            "status": tx.status.value,
            "session_id": tx.session_id,
            "execution_id": tx.job_id,
            "head_seq": target.last_seq,
        },
        key=followup_key(tx.job_id),
    )


def request_ended(tx: Ending) -> None:
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
    request = tx.locked(tx.delivery_id)
    if (
        request is None
        or request.kind not in REQUESTS
        or request.state is not DeliveryState.ADMITTED
    ):
        return
    frozen = frozen_result(
        request.id,
        session_id=tx.session_id,
        execution_id=tx.job_id,
        status=tx.status.value,
        text=excerpt(tx.result or "")[0],
        error=tx.error,
        artifacts=tx.artifacts(),
    )
    succeeded = tx.status is JobStatus.SUCCEEDED
    tx.move(
        request.id,
        DeliveryState.DONE if succeeded else DeliveryState.FAILED,
        leaving=[DeliveryState.ADMITTED],
        code=None if succeeded else frozen["code"],
        reason=None if succeeded else frozen["message"],
        metadata={**request.metadata, "result": frozen},
    )
    target = tx.session(tx.session_id)
    pointer = request.metadata.get("attach_entry_id")
    if pointer:
        tx.patch_attach(pointer, status=tx.status.value, head_seq=target.last_seq)
    if request.reply is not Reply.COMPLETION or request.sender_session_id is None:
        return
    label = f"{target.name or 'session'} ({tx.session_id})"
    _answer(
        tx,
        request,
        DeliveryKind.RESULT,
        target,
        body=result_text(frozen, label),
        metadata=frozen,
        key=result_key(request.id),
    )


def _answer(
    tx: Ending,
    delivery: Delivery,
    kind: DeliveryKind,
    target: Session,
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
    tx.answer(
        dl.new_row(
            kind=kind,
            sender=f"agent:{target.agent_id}",
            sender_session_id=target.id,
            sender_job_id=tx.job_id,
            target_session_id=delivery.sender_session_id,
            body=body,
            message_count=delivery.message_count,
            generation=tx.call_depth(delivery.sender_session_id),
            state=DeliveryState.ACCEPTED,
            answers_job_id=tx.job_id,
            metadata=metadata,
            idempotency_key=key,
            project=delivery.project,
            owner=delivery.owner,
            grants=delivery.grants,
            unattended=delivery.unattended,
        ),
    )
