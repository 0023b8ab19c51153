"""Projects and their quotas (docs/security.md#project-quotas).

A project bounds three things across all of its sessions: its *live* turns
(admitted and not yet finished: queued, running, stopping or waiting for
approval), its *cumulative* turns (ever admitted; the allowance never
refills), its *rate* (turns admitted per minute, a token bucket whose
burst is one minute's worth) and its *token rate* (model tokens per minute,
a bucket debited as turns report usage, refusing admissions while in
debt). Each limit is stored per project in the
``projects`` table, where NULL means the install's default
(``CHAZ_PROJECT_MAX_LIVE``, ``CHAZ_PROJECT_MAX_JOBS``,
``CHAZ_PROJECT_TURNS_PER_MINUTE``, each unlimited unless set) and ``-1``
means no limit. A project without a row has the defaults.

This module is rules only: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from chaz.errors import ValidationError
from chaz.settings import Settings

#: A stored limit meaning "no limit" (NULL means "the default").
NO_LIMIT = -1
#: The largest limit accepted (the column is a 32-bit integer).
MAX_LIMIT = 2**31 - 1
#: The largest rate accepted: about 16,700 admissions a second, twenty
#: times what one install admits (docs/performance.md), so a larger one
#: could never bind and is a mistake.
MAX_TURNS_PER_MINUTE = 1_000_000


@dataclass(frozen=True)
class ProjectLimits:
    """The limits in force for one project; None: no limit."""

    max_live: int | None
    max_jobs: int | None
    #: Turns admitted per minute, with a burst of as many.
    turns_per_minute: int | None = None
    #: Model tokens per minute: a bucket debited as turns report usage,
    #: refusing admissions while it is in debt.
    tokens_per_minute: int | None = None
    #: Model tokens and cost (CHAZ_MODEL_PRICES) its turns may use in all.
    max_tokens: int | None = None
    max_cost: float | None = None


class Project(BaseModel):
    """A project's limits as stored, as in force, and its use of them."""

    model_config = ConfigDict(frozen=True)

    id: str
    #: As stored: None is the default, -1 no limit.
    max_live: int | None = None
    max_jobs: int | None = None
    turns_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    #: In force (stored value, else the default); None: no limit.
    effective_max_live: int | None = None
    effective_max_jobs: int | None = None
    effective_turns_per_minute: int | None = None
    effective_tokens_per_minute: int | None = None
    effective_max_tokens: int | None = None
    effective_max_cost: float | None = None
    #: Unfinished jobs and jobs ever admitted, from the database.
    live: int = 0
    jobs: int = 0
    created_at: datetime | None = None
    updated_at: datetime | None = None


def check_limit(field: str, value: object) -> int | None:
    """A stored limit: None (the default), -1 (no limit) or 0..2**31-1;
    anything else is ``request.invalid`` naming ``field``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{field} must be an integer, -1 (no limit) or null", field=field)
    if value < NO_LIMIT or value > MAX_LIMIT:
        raise ValidationError(
            f"{field} must be -1 (no limit) or between 0 and {MAX_LIMIT}", field=field
        )
    return value


def check_rate(field: str, value: object) -> int | None:
    """A stored rate: None (the default), -1 (no limit) or
    1..:data:`MAX_TURNS_PER_MINUTE`; anything else is ``request.invalid``
    naming ``field``. Zero is refused: a bucket that never refills would
    refuse for ever with no time to retry after (``max_live`` 0 stops a
    project)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{field} must be an integer, -1 (no limit) or null", field=field)
    if value != NO_LIMIT and not 1 <= value <= MAX_TURNS_PER_MINUTE:
        raise ValidationError(
            f"{field} must be -1 (no limit) or between 1 and {MAX_TURNS_PER_MINUTE}", field=field
        )
    return value


def _in_force(stored: int | None, default: int | None) -> int | None:
    value = default if stored is None else stored
    return None if value is None or value < 0 else value


def check_token_rate(field: str, value: object) -> int | None:
    """A stored token rate: None (the default), -1 (no limit) or
    1..:data:`MAX_LIMIT`; anything else is ``request.invalid`` naming ``field``
    (zero is refused for the reason :func:`check_rate` gives)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{field} must be an integer, -1 (no limit) or null", field=field)
    if value != NO_LIMIT and not 1 <= value <= MAX_LIMIT:
        raise ValidationError(
            f"{field} must be -1 (no limit) or between 1 and {MAX_LIMIT}", field=field
        )
    return value


#: The largest cumulative token budget accepted (the column is a 64-bit integer).
MAX_TOKENS = 2**63 - 1


def check_token_budget(field: str, value: object) -> int | None:
    """A stored cumulative token budget: None (the default), -1 (no limit) or
    0..:data:`MAX_TOKENS`; anything else is ``request.invalid`` naming ``field``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{field} must be an integer, -1 (no limit) or null", field=field)
    if value < NO_LIMIT or value > MAX_TOKENS:
        raise ValidationError(
            f"{field} must be -1 (no limit) or between 0 and {MAX_TOKENS}", field=field
        )
    return value


def check_cost_budget(field: str, value: object) -> float | None:
    """A stored cumulative cost budget: None (the default), -1 (no limit) or a
    finite number from 0; anything else is ``request.invalid`` naming ``field``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(f"{field} must be a number, -1 (no limit) or null", field=field)
    number = float(value)
    if not math.isfinite(number) or (number < 0 and number != NO_LIMIT):
        raise ValidationError(f"{field} must be -1 (no limit) or 0 or more", field=field)
    return number


def resolve_project_limits(
    settings: Settings,
    stored: tuple[int | None, int | None, int | None, int | None, int | None, float | None] | None,
) -> ProjectLimits:
    """The limits in force for a project whose stored ``(max_live, max_jobs,
    turns_per_minute, tokens_per_minute, max_tokens, max_cost)`` are given
    (None: the project has no row)."""
    live, jobs, rate, tokens, total, cost = stored or (None, None, None, None, None, None)
    default_cost = settings.project_max_cost
    cost = default_cost if cost is None else cost
    return ProjectLimits(
        _in_force(live, settings.project_max_live),
        _in_force(jobs, settings.project_max_jobs),
        _in_force(rate, settings.project_turns_per_minute),
        _in_force(tokens, settings.project_tokens_per_minute),
        _in_force(total, settings.project_max_tokens),
        None if cost is None or cost < 0 else cost,
    )
