"""Schedules: agent-owned prompts that fire at slots (docs/schedules.md).

A schedule belongs to an agent. It fires at *slots*: the instants its
``cron`` expression (in an IANA time zone), its ``interval`` or its ``once``
datetime name. This module is the schedule's shape, the validation of every
field (a stable ``request.invalid`` naming the field), and the slot
arithmetic: pure functions of the schedule and an injected instant, no wall
clock inside, so tests pin time instead of sleeping to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict

from chaz.domain.validation import check_agent_id, check_choice, check_text, invalid, is_blank

#: The longest prompt, in characters.
MAX_PROMPT_CHARS = 20_000
#: The longest name, in characters.
MAX_NAME_CHARS = 200
#: The shortest and longest interval, in seconds.
MIN_INTERVAL_SECONDS = 1
MAX_INTERVAL_SECONDS = 366 * 24 * 3600
#: The most consecutive failures a schedule may be allowed before it disables itself.
MAX_FAILURE_LIMIT = 100
#: The default consecutive-failure limit.
DEFAULT_MAX_FAILURES = 3
#: A slot this late is *missed* (the scheduler was down or behind), not on time.
ON_TIME = timedelta(seconds=2)
#: Most slots one look at a cron schedule walks before it jumps to the latest.
MAX_WALK = 1000

#: Where check_cron starts looking for a cron expression's first slot.
_CRON_PROBE = datetime(2000, 1, 1, tzinfo=UTC)


class ScheduleKind(StrEnum):
    """How a schedule names its slots."""

    CRON = "cron"
    INTERVAL = "interval"
    ONCE = "once"


class Target(StrEnum):
    """Where a fire runs: one ``pinned`` session, or a ``fresh`` session per fire."""

    PINNED = "pinned"
    FRESH = "fresh"


class Overlap(StrEnum):
    """What a slot does when its pinned session is busy."""

    SKIP = "skip"
    QUEUE = "queue"


class Missed(StrEnum):
    """What missed slots do after downtime: none fire, or one catch-up fire."""

    SKIP = "skip"
    CATCH_UP_ONCE = "catch_up_once"


class FireOutcome(StrEnum):
    """A fire's row in the ledger, as it stands."""

    ADMITTED = "admitted"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    REFUSED = "refused"


#: The outcomes that end a fire (the ledger row changes no more).
FINAL = frozenset({FireOutcome.SUCCEEDED, FireOutcome.FAILED, FireOutcome.SKIPPED})


class Schedule(BaseModel):
    """An agent-owned schedule, as stored."""

    model_config = ConfigDict(frozen=True)

    id: str
    owner_agent_id: str
    name: str | None = None
    kind: ScheduleKind
    cron: str | None = None
    timezone: str | None = None
    interval_seconds: int | None = None
    run_at: datetime | None = None
    prompt: str
    target: Target
    session_id: str | None = None
    enabled: bool = True
    expires_at: datetime | None = None
    max_fires: int | None = None
    fires: int = 0
    overlap: Overlap = Overlap.SKIP
    missed: Missed = Missed.CATCH_UP_ONCE
    max_failures: int = DEFAULT_MAX_FAILURES
    failures: int = 0
    last_error: dict[str, Any] | None = None
    disabled_reason: str | None = None
    next_slot: datetime | None = None
    last_slot: datetime | None = None
    created_at: datetime
    updated_at: datetime
    #: Its project and owner; its fires start turns with ``grants`` (the
    #: owner's when it was added; None: every grant), unattended if set.
    project: str = "default"
    owner: str = "user:local"
    grants: list[str] | None = None
    unattended: bool = False
    #: The job whose turn added it (None: a producer did); a cancel of that
    #: job's lineage pauses it (docs/schedules.md#a-cancelled-creator).
    job_id: str | None = None


class ScheduleFire(BaseModel):
    """One claimed slot of a schedule: a row of the agent's ledger."""

    model_config = ConfigDict(frozen=True)

    id: str
    schedule_id: str
    slot: datetime
    fired_at: datetime
    session_id: str | None = None
    job_id: str | None = None
    outcome: FireOutcome
    error: dict[str, Any] | None = None
    duration_ms: int | None = None
    usage: dict[str, Any] | None = None


#: The fields a caller may set (add) or change (update).
EDITABLE = (
    "name",
    "kind",
    "cron",
    "timezone",
    "interval_seconds",
    "run_at",
    "prompt",
    "target",
    "session_id",
    "enabled",
    "expires_at",
    "max_fires",
    "overlap",
    "missed",
    "max_failures",
)

#: What each field is when a new schedule leaves it out.
DEFAULTS: dict[str, Any] = {
    "name": None,
    "cron": None,
    "timezone": None,
    "interval_seconds": None,
    "run_at": None,
    "session_id": None,
    "enabled": True,
    "expires_at": None,
    "max_fires": None,
    "overlap": Overlap.SKIP.value,
    "missed": Missed.CATCH_UP_ONCE.value,
    "max_failures": DEFAULT_MAX_FAILURES,
}


def check_fields(values: dict[str, Any]) -> dict[str, Any]:
    """A whole schedule definition, every field checked: the values to store.

    ``values`` holds every field of :data:`EDITABLE` (an update merges its
    changes into the stored schedule first). Each refusal is
    ``request.invalid`` with ``details["field"]``; enums are stored by value
    and datetimes in UTC.
    """
    unknown = sorted(set(values) - set(EDITABLE))
    if unknown:
        raise invalid(unknown[0], f"unknown schedule field {unknown[0]!r}; one of {list(EDITABLE)}")
    v = {**DEFAULTS, **values}
    out: dict[str, Any] = {}
    name = v["name"]
    out["name"] = (
        None
        if name is None or (isinstance(name, str) and is_blank(name))
        else check_text("name", name, max_chars=MAX_NAME_CHARS)
    )
    kind = check_choice("kind", v.get("kind"), ScheduleKind, "schedule kind")
    out["kind"] = kind.value
    prompt = check_text("prompt", v.get("prompt"), max_chars=MAX_PROMPT_CHARS)
    if is_blank(prompt):
        raise invalid("prompt", "prompt may not be empty or blank")
    out["prompt"] = prompt
    out["cron"] = out["timezone"] = out["interval_seconds"] = out["run_at"] = None
    if kind is ScheduleKind.CRON:
        out["timezone"] = check_timezone(v["timezone"] if v["timezone"] is not None else "UTC")
        out["cron"] = check_cron(v["cron"])
    else:
        for field in ("cron", "timezone"):
            if v[field] is not None:
                raise invalid(field, f"{field} is for cron schedules, not {kind.value}")
    if kind is ScheduleKind.INTERVAL:
        out["interval_seconds"] = _int(
            "interval_seconds", v["interval_seconds"], MIN_INTERVAL_SECONDS, MAX_INTERVAL_SECONDS
        )
        # An interval's optional first slot; its slots are run_at + k * interval.
        out["run_at"] = check_instant("run_at", v["run_at"]) if v["run_at"] is not None else None
    elif v["interval_seconds"] is not None:
        raise invalid("interval_seconds", f"interval_seconds is not for {kind.value} schedules")
    if kind is ScheduleKind.ONCE:
        if v["run_at"] is None:
            raise invalid("run_at", "a once schedule needs run_at")
        out["run_at"] = check_instant("run_at", v["run_at"])
    elif kind is ScheduleKind.CRON and v["run_at"] is not None:
        raise invalid("run_at", "run_at is not for cron schedules")
    if v.get("target") is None:
        # Left out: a session named means that session, none means fresh ones.
        v["target"] = Target.PINNED.value if v["session_id"] is not None else Target.FRESH.value
    target = check_choice("target", v["target"], Target, "schedule target")
    out["target"] = target.value
    if target is Target.PINNED:
        if v["session_id"] is None:
            raise invalid("session_id", "a pinned schedule needs session_id")
        out["session_id"] = check_text("session_id", v["session_id"], max_chars=255)
    elif v["session_id"] is not None:
        raise invalid("session_id", "a fresh schedule makes its own sessions; omit session_id")
    else:
        out["session_id"] = None
    if not isinstance(v["enabled"], bool):
        raise invalid("enabled", "enabled must be true or false")
    out["enabled"] = v["enabled"]
    out["expires_at"] = (
        check_instant("expires_at", v["expires_at"]) if v["expires_at"] is not None else None
    )
    out["max_fires"] = (
        _int("max_fires", v["max_fires"], 1, 10**9) if v["max_fires"] is not None else None
    )
    out["overlap"] = check_choice("overlap", v["overlap"], Overlap, "overlap policy").value
    out["missed"] = check_choice("missed", v["missed"], Missed, "missed-run policy").value
    out["max_failures"] = _int("max_failures", v["max_failures"], 1, MAX_FAILURE_LIMIT)
    return out


def check_owner(value: object) -> str:
    """A schedule's owner: an agent id."""
    return check_agent_id(value, "owner_agent_id")


def check_timezone(value: object) -> str:
    """An IANA time zone name that this machine's zone database knows."""
    name = check_text("timezone", value, max_chars=64)
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise invalid("timezone", f"unknown time zone {name[:64]!r} (an IANA name)") from exc
    return name


def check_cron(value: object) -> str:
    """A five-field cron expression croniter accepts, and that names a date that exists."""
    # croniter is imported where it is used: a worker's start and its turns
    # never parse a cron expression (docs/performance.md#worker-start-up).
    from croniter import CroniterBadDateError, croniter

    expr = check_text("cron", value, max_chars=255).strip()
    if len(expr.split()) != 5 or not croniter.is_valid(expr):
        raise invalid("cron", f"not a five-field cron expression: {expr[:80]!r}")
    # Well-formed is not enough: "0 0 31 2 *" parses, but no day matches it,
    # and croniter says so only when asked for a slot (CroniterBadDateError
    # would then reach the caller, or beat). Ask once now. The day-of-month
    # and month fields alone decide this, so any start and zone will do.
    try:
        croniter(expr, _CRON_PROBE).get_next(datetime)
    except CroniterBadDateError as exc:
        raise invalid("cron", f"no date ever matches the cron expression {expr[:80]!r}") from exc
    return expr


def check_instant(field: str, value: object) -> datetime:
    """A timezone-aware datetime (or ISO 8601 text with an offset), in UTC."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError as exc:
            raise invalid(field, f"{field} is not an ISO 8601 datetime") from exc
    if not isinstance(value, datetime):
        raise invalid(field, f"{field} must be a datetime")
    if value.tzinfo is None:
        raise invalid(field, f"{field} needs a time zone offset (say +00:00 for UTC)")
    return value.astimezone(UTC)


def _int(field: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(field, f"{field} must be an integer")
    if not low <= value <= high:
        raise invalid(field, f"{field} must be between {low} and {high}", min=low, max=high)
    return value


# -- slots ---------------------------------------------------------------------


def next_slot(schedule: Schedule, after: datetime) -> datetime | None:
    """The schedule's first slot strictly after ``after`` (UTC); None when it has no more.

    Cron slots are computed in the schedule's zone and converted to UTC: a
    local time that a daylight-saving gap skips, or that a fold repeats,
    follows croniter's rules. Expiry ends the slots; ``max_fires`` is the
    store's to count.
    """
    found = _after(schedule, after.astimezone(UTC))
    if found is not None and schedule.expires_at is not None and found > schedule.expires_at:
        return None
    return found


def _after(schedule: Schedule, after: datetime) -> datetime | None:
    if schedule.kind is ScheduleKind.ONCE:
        assert schedule.run_at is not None
        return schedule.run_at if schedule.run_at > after else None
    if schedule.kind is ScheduleKind.INTERVAL:
        assert schedule.interval_seconds is not None
        step = timedelta(seconds=schedule.interval_seconds)
        anchor = interval_anchor(schedule)
        if after < anchor:
            return anchor
        k = (after - anchor) // step + 1
        return anchor + k * step
    from croniter import croniter

    assert schedule.cron is not None
    zone = ZoneInfo(schedule.timezone or "UTC")
    it = croniter(schedule.cron, after.astimezone(zone))
    nxt: datetime = it.get_next(datetime)
    return nxt.astimezone(UTC)


def interval_anchor(schedule: Schedule) -> datetime:
    """An interval schedule's first slot: ``run_at``, else its creation to the whole second."""
    if schedule.run_at is not None:
        return schedule.run_at
    return schedule.created_at.astimezone(UTC).replace(microsecond=0) + timedelta(
        seconds=schedule.interval_seconds or 1
    )


def first_slot(schedule: Schedule, now: datetime) -> datetime | None:
    """The slot a new (or changed, or resumed) schedule waits for first.

    A ``once`` schedule whose time has passed still fires once; the others
    start at their next slot after ``now``.
    """
    if schedule.kind is ScheduleKind.ONCE:
        return (
            schedule.run_at
            if schedule.expires_at is None
            or (schedule.run_at is not None and schedule.run_at <= schedule.expires_at)
            else None
        )
    if schedule.kind is ScheduleKind.INTERVAL and schedule.run_at is not None:
        return next_slot(schedule, min(now, schedule.run_at - timedelta(microseconds=1)))
    return next_slot(schedule, now)


@dataclass(frozen=True)
class Plan:
    """What a due schedule does at ``now``: the slots to fire, and the next one to wait for."""

    #: Slots to send a fire for, oldest first (none, one, or a catch-up and one).
    fire: tuple[datetime, ...]
    #: The schedule's next slot after these (None: it has no more).
    next_slot: datetime | None
    #: How many pending slots were missed (late); at most one of them fires.
    missed: int


def plan(schedule: Schedule, now: datetime) -> Plan:
    """The fires a schedule is due at ``now`` (its ``next_slot`` has come).

    The latest slot at or before ``now`` is *on time* when it is less than
    :data:`ON_TIME` late; every earlier pending slot, and a late latest one,
    was missed (the scheduler was down or behind). Missed slots collapse
    into one catch-up fire at the first of them (``catch_up_once``), or
    none (``skip``). A pure function of the schedule and ``now``: two
    schedulers looking at one schedule plan the same slots, and the claim
    keeps one fire of each.
    """
    start = schedule.next_slot
    if start is None or start > now:
        return Plan((), start, 0)
    pending = [start]
    latest = start
    for _ in range(MAX_WALK):
        nxt = next_slot(schedule, latest)
        if nxt is None or nxt > now:
            break
        latest = nxt
        pending.append(nxt)
    else:
        # Too many to walk (a long outage of a frequent cron): jump to the end.
        latest = _latest_at_or_before(schedule, now, latest)
        pending.append(latest)
    on_time = now - latest < ON_TIME
    missed = pending[:-1] if on_time else pending
    fire: list[datetime] = []
    if missed and schedule.missed is Missed.CATCH_UP_ONCE:
        fire.append(missed[0])
    if on_time:
        fire.append(latest)
    return Plan(tuple(fire), next_slot(schedule, latest), len(missed))


def _latest_at_or_before(schedule: Schedule, now: datetime, floor: datetime) -> datetime:
    if schedule.kind is ScheduleKind.CRON:
        from croniter import croniter

        assert schedule.cron is not None
        zone = ZoneInfo(schedule.timezone or "UTC")
        it = croniter(schedule.cron, (now + timedelta(microseconds=1)).astimezone(zone))
        prev: datetime = it.get_prev(datetime)
        return max(prev.astimezone(UTC), floor)
    if schedule.kind is ScheduleKind.INTERVAL:
        assert schedule.interval_seconds is not None
        step = timedelta(seconds=schedule.interval_seconds)
        anchor = interval_anchor(schedule)
        return anchor + ((now - anchor) // step) * step
    return floor


def fresh_session_name(schedule: Schedule, slot: datetime) -> str:
    """A fresh target's session name: the schedule's name (or id) and the slot."""
    base = schedule.name or f"schedule-{schedule.id}"
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in base)[:80].strip("-") or "s"
    return f"{safe}-{slot.astimezone(UTC).strftime('%Y%m%dT%H%M%SZ')}"
