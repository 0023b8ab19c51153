"""The multitask strategies and cancel actions as a request names them
(chaz/domain/multitask.py)."""

from __future__ import annotations

import pytest

from chaz.domain.jobs import JobStatus
from chaz.domain.multitask import CancelAction, Strategy, can_roll_back, cancel_action, strategy
from chaz.errors import ValidationError


def test_strategies_and_actions_parse_and_a_bad_one_is_request_invalid() -> None:
    assert strategy(None) is Strategy.ENQUEUE
    assert [strategy(s.value) for s in Strategy] == list(Strategy)
    assert [s for s in Strategy if s.displaces] == [Strategy.INTERRUPT, Strategy.ROLLBACK]
    assert [s for s in Strategy if s.hides] == [Strategy.ROLLBACK]
    assert cancel_action("rollback") is CancelAction.ROLLBACK
    for bad in ("undo", 3, ["interrupt"], ""):
        with pytest.raises(ValidationError) as caught:
            strategy(bad)
        assert caught.value.field == "multitask_strategy"
        with pytest.raises(ValidationError) as caught:
            cancel_action(bad)
        assert caught.value.field == "action"


def test_only_a_job_that_has_not_ended_can_be_rolled_back() -> None:
    assert [s for s in JobStatus if can_roll_back(s)] == [
        JobStatus.QUEUED,
        JobStatus.RUNNING,
        JobStatus.STOPPING,
        JobStatus.WAITING_APPROVAL,
    ]
