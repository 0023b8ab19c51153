"""Multitask strategies: what a new run does to the runs of its thread that
have not ended (docs/http.md#runs), and the rule for rolled-back entries.

A run's ``multitask_strategy`` is one of :class:`Strategy`. ``enqueue``
leaves the runs in progress alone (the session's lane runs the new one after
them); ``reject`` refuses the new run while one is in progress; ``interrupt``
cancels every run of the thread that has not ended (the one running, those
queued, one waiting for approval) and the new one runs next; ``rollback``
does the same and rolls each of them back.

**The hidden-entries rule.** A job that is rolled back keeps its row and its
entries (chaz keeps history), but an entry whose ``job_id`` names a
rolled-back job is hidden: from a thread's values and from the context of
every later turn of the session (and what a compaction summarizes). That is
every entry the job wrote (its Ack, tool calls and results, an Error) and the
message that admitted it, which names the job it admitted. The rule reads
the job, not the entry, so an entry the job writes after its rollback (a
turn still stopping) is hidden as well. A job is rolled back only while it
has not ended (:func:`can_roll_back`): a rollback of a run that ended first
changes nothing, as a cancel of it does.
"""

from __future__ import annotations

from enum import StrEnum

from chaz.domain.jobs import JobStatus
from chaz.errors import ValidationError


class Strategy(StrEnum):
    """A run's ``multitask_strategy``: what it does on a busy thread."""

    ENQUEUE = "enqueue"
    REJECT = "reject"
    INTERRUPT = "interrupt"
    ROLLBACK = "rollback"

    @property
    def displaces(self) -> bool:
        """Whether the new run cancels the runs in progress."""
        return self in (Strategy.INTERRUPT, Strategy.ROLLBACK)

    @property
    def hides(self) -> bool:
        """Whether the runs it cancels are rolled back too."""
        return self is Strategy.ROLLBACK


class CancelAction(StrEnum):
    """A cancel's ``action``: ``interrupt`` stops the run and keeps its
    entries; ``rollback`` also hides them."""

    INTERRUPT = "interrupt"
    ROLLBACK = "rollback"


def strategy(value: object) -> Strategy:
    """A run's ``multitask_strategy`` (None: ``enqueue``), or ``request.invalid``."""
    if value is None:
        return Strategy.ENQUEUE
    if isinstance(value, str) and value in Strategy.__members__.values():
        return Strategy(value)
    raise ValidationError(
        "multitask_strategy must be one of " + ", ".join(s.value for s in Strategy),
        field="multitask_strategy",
    )


def cancel_action(value: object) -> CancelAction:
    """A cancel's ``action``, or ``request.invalid``."""
    if isinstance(value, str) and value in CancelAction.__members__.values():
        return CancelAction(value)
    raise ValidationError(
        "action must be one of " + ", ".join(a.value for a in CancelAction), field="action"
    )


def can_roll_back(status: JobStatus) -> bool:
    """Whether a job in ``status`` may still be rolled back: one that has not
    ended (a cancelled turn still stopping has not)."""
    return not status.terminal
