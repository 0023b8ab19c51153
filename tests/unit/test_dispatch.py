"""Every wake-up names its reason; the reason decides how hard the send tries."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from chaz.plumbing.dispatch import (
    PATIENT,
    PATIENT_RETRY,
    TREE_HEADER,
    TURN_TASK,
    Dispatcher,
    Wake,
)
from chaz.settings import Settings


class _App:
    """Records what ``send_task`` was asked; fails when told to."""

    def __init__(self, fail: bool = False) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.fail = fail

    def send_task(self, name: str, **options: Any) -> None:
        if self.fail:
            raise ConnectionError("broker away")
        self.sent.append((name, options))


def _dispatcher(app: _App) -> Dispatcher:
    dispatcher = Dispatcher(Settings())
    dispatcher._app = app
    return dispatcher


@pytest.mark.parametrize("reason", list(Wake))
def test_a_wake_up_sends_the_turn_task_patiently_only_for_a_patient_reason(reason: Wake) -> None:
    app = _App()
    assert _dispatcher(app).send_wake("s1", "j1", reason, countdown=2.0)
    [(name, options)] = app.sent
    assert name == TURN_TASK
    assert options["kwargs"] == {"session_id": "s1", "execution_id": "j1"}
    assert options["queue"] == "chaz.turns" and options["countdown"] == 2.0
    if reason in PATIENT:
        assert options["retry"] is True and options["retry_policy"] == PATIENT_RETRY
    else:
        assert "retry" not in options


def test_the_wake_ups_nobody_else_would_send_are_the_patient_ones() -> None:
    assert {Wake.RETRY, Wake.HANDED_BACK, Wake.LEASE_EXPIRED} == PATIENT


def test_a_failed_wake_up_is_logged_with_its_reason_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="chaz.plumbing.dispatch"):
        assert not _dispatcher(_App(fail=True)).send_wake("s1", "j1", Wake.ADMITTED)
    assert "wake-up (admitted) for session s1" in caplog.text


def test_a_wake_up_carries_its_jobs_tree_in_a_header_the_worker_reads_back() -> None:
    from celery.app.task import Context

    from workers.tasks import _header

    app = _App()
    dispatcher = _dispatcher(app)
    assert dispatcher.send_wake("s1", "j1", Wake.ADMITTED, tree="t1")
    assert dispatcher.send_wake("s1", "", Wake.SLOT_FREED)
    first, second = (options for _, options in app.sent)
    # A header, not a kwarg: a worker that does not know it still runs the task.
    assert first["kwargs"] == {"session_id": "s1", "execution_id": "j1"}
    assert first["headers"] == {TREE_HEADER: "t1"}
    assert "headers" not in second
    # Celery makes a custom header a request attribute (older protocols: ``headers``).
    assert _header(Context(first["headers"]), TREE_HEADER) == "t1"
    assert _header(Context({"headers": first["headers"]}), TREE_HEADER) == "t1"
    assert _header(Context({}), TREE_HEADER) is None
