"""The pure rules of requests (docs/contracts.md#requests): who is interactive, the lifecycle, the
frozen result."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from chaz.domain.deliveries import (
    DeliveryState,
    RequestStatus,
    check_request_target,
    frozen_result,
    request_status,
    result_text,
    stored_states,
)
from chaz.domain.entries import Entry, EntryType
from chaz.domain.jobs import Job, JobStatus
from chaz.domain.sessions import Session, is_interactive
from chaz.errors import SelfDelivery, SessionArchived, SessionNotFound

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _job(**kw: object) -> Job:
    fields: dict[str, object] = {
        "id": "j1",
        "session_id": "s1",
        "tree_id": "s1",
        "ordinal": 1,
        "trigger_entry_id": "e1",
        "status": JobStatus.RUNNING,
        "version": 1,
        "created_at": NOW,
    }
    return Job.model_validate(fields | kw)


def _entry(type: EntryType = EntryType.MESSAGE, sender: str = "user:alice") -> Entry:
    return Entry(
        id="e1", session_id="s1", seq=1, type=type, sender=sender, content="hi", created_at=NOW
    )


def _session(**kw: object) -> Session:
    fields: dict[str, object] = {
        "id": "t1",
        "agent_id": "a",
        "name": "target",
        "tree_id": "t1",
        "last_seq": 0,
        "created_at": NOW,
    }
    return Session.model_validate(fields | kw)


def test_only_a_persons_message_makes_an_interactive_turn() -> None:
    assert is_interactive(_job(), _entry())
    assert not is_interactive(_job(), None)
    assert not is_interactive(_job(delivery_id="d1"), _entry())  # a delivery, a follow-up, a result
    assert not is_interactive(_job(fire_id="f1"), _entry())  # a schedule
    assert not is_interactive(_job(), _entry(EntryType.DIRECTIVE))
    assert not is_interactive(_job(), _entry(sender="agent:stranger"))
    assert not is_interactive(_job(), _entry(sender="system:bridge"))


@pytest.mark.parametrize(
    ("state", "job_status", "expected"),
    [
        (DeliveryState.ACCEPTED, None, RequestStatus.ACCEPTED),
        (DeliveryState.ADMITTED, "queued", RequestStatus.ACCEPTED),
        (DeliveryState.ADMITTED, "running", RequestStatus.DELIVERING),
        (DeliveryState.ADMITTED, "waiting_approval", RequestStatus.DELIVERING),
        (DeliveryState.DONE, "succeeded", RequestStatus.CONSUMED),
        (DeliveryState.FAILED, "interrupted", RequestStatus.FAILED),
        (DeliveryState.REFUSED, None, RequestStatus.FAILED),
        (DeliveryState.DROPPED, None, RequestStatus.FAILED),
    ],
)
def test_the_lifecycle_comes_from_the_stored_state_and_the_job(
    state: DeliveryState, job_status: str | None, expected: RequestStatus
) -> None:
    assert request_status(state, job_status) is expected
    assert state in stored_states(expected)


def test_a_frozen_result_holds_text_or_a_code_and_nothing_else() -> None:
    ok = frozen_result(
        "r1",
        session_id="t1",
        execution_id="j1",
        status="succeeded",
        text="42",
        error=None,
        artifacts=[],
    )
    assert ok == {
        "request_id": "r1",
        "session_id": "t1",
        "execution_id": "j1",
        "status": "succeeded",
        "artifacts": [],
        "text": "42",
    }
    assert result_text(ok, "target (t1)") == "[result of request r1 from target (t1)]\n42"
    lost = frozen_result(
        "r1",
        session_id="t1",
        execution_id="j1",
        status="interrupted",
        text="partial",
        error={"code": "delivery.interrupted", "message": "lost", "retryable": False},
        artifacts=[],
    )
    assert (lost["status"], lost["code"], lost["message"]) == (
        "failed",
        "delivery.interrupted",
        "lost",
    )
    assert "text" not in lost and "retryable" not in lost


def test_a_request_target_is_an_id_of_the_project_live_and_not_oneself() -> None:
    target = _session()
    assert check_request_target(target, "t1", project="default", sender_session_id="s1") is target
    with pytest.raises(SessionNotFound):
        check_request_target(target, "target", project="default", sender_session_id="s1")
    with pytest.raises(SessionNotFound):
        check_request_target(target, "t1", project="other", sender_session_id="s1")
    with pytest.raises(SelfDelivery):
        check_request_target(target, "t1", project="default", sender_session_id="t1")
    with pytest.raises(SessionArchived):
        check_request_target(
            _session(archived_at=NOW), "t1", project="default", sender_session_id="s1"
        )
