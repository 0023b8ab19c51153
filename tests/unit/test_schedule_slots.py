"""Issue 10: schedule validation and slot arithmetic, with fixed clocks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from chaz.domain.schedules import (
    Missed,
    Schedule,
    ScheduleKind,
    check_fields,
    first_slot,
    fresh_session_name,
    next_slot,
    plan,
)
from chaz.errors import ValidationError

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def sched(**fields: Any) -> Schedule:
    values = check_fields({"prompt": "wake up", "target": "fresh", **fields})
    return Schedule(
        id="s1",
        owner_agent_id="a",
        created_at=T0,
        updated_at=T0,
        **values,
    )


def test_a_daily_0230_cron_in_a_zone_that_skips_0230_fires_once_that_day() -> None:
    s = sched(kind="cron", cron="30 2 * * *", timezone="America/New_York")
    # 2026-03-08: clocks go from 02:00 EST to 03:00 EDT; 02:30 does not exist.
    day = datetime(2026, 3, 8, 5, 0, tzinfo=UTC)  # 00:00 EST
    end = day + timedelta(days=1)
    slots = []
    at = day
    while True:
        nxt = next_slot(s, at)
        assert nxt is not None
        if nxt >= end:
            break
        slots.append(nxt)
        at = nxt
    assert len(slots) == 1
    # The day before and after: 02:30 local, in EST (07:30Z) and EDT (06:30Z).
    assert next_slot(s, day - timedelta(days=1)) == datetime(2026, 3, 7, 7, 30, tzinfo=UTC)
    assert next_slot(s, end) == datetime(2026, 3, 9, 6, 30, tzinfo=UTC)


def test_a_cron_slot_is_local_time_in_its_zone() -> None:
    s = sched(kind="cron", cron="0 9 * * 1-5", timezone="Asia/Tokyo")
    # Friday 2026-03-06 10:00 in Tokyo: the next weekday 09:00 is Monday.
    after = datetime(2026, 3, 6, 1, 0, tzinfo=UTC)
    assert next_slot(s, after) == datetime(2026, 3, 9, 0, 0, tzinfo=UTC)
    utc = sched(kind="cron", cron="0 9 * * *")
    assert utc.timezone == "UTC"
    assert next_slot(utc, after) == datetime(2026, 3, 6, 9, 0, tzinfo=UTC)


def test_interval_and_once_slots() -> None:
    s = sched(kind="interval", interval_seconds=10)
    assert first_slot(s, T0) == T0 + timedelta(seconds=10)
    assert next_slot(s, T0 + timedelta(seconds=10)) == T0 + timedelta(seconds=20)
    assert next_slot(s, T0 + timedelta(seconds=25)) == T0 + timedelta(seconds=30)
    when = T0 + timedelta(hours=1)
    once = sched(kind="once", run_at=when.isoformat())
    assert first_slot(once, T0) == when
    assert next_slot(once, when) is None
    expiring = sched(kind="interval", interval_seconds=10, expires_at=T0 + timedelta(seconds=15))
    assert next_slot(expiring, T0 + timedelta(seconds=10)) is None


def test_missed_slots_collapse_into_one_catch_up_or_none() -> None:
    base = sched(kind="interval", interval_seconds=1)
    first = T0 + timedelta(seconds=1)
    down = base.model_copy(update={"next_slot": first})
    # Five slots pass while no scheduler looks; it looks just after the sixth.
    now = first + timedelta(seconds=5, milliseconds=100)
    catch = plan(down, now)
    assert catch.fire == (first, first + timedelta(seconds=5))
    assert catch.next_slot == first + timedelta(seconds=6)
    assert catch.missed == 5
    skip = plan(down.model_copy(update={"missed": Missed.SKIP}), now)
    assert skip.fire == (first + timedelta(seconds=5),)
    # On time: exactly the slot, nothing missed.
    assert plan(down, first).fire == (first,)
    assert plan(down, first - timedelta(microseconds=1)).fire == ()
    # Long down (past the walk's bound): one catch-up, and the slot on time.
    long = plan(down, first + timedelta(hours=3, milliseconds=500))
    assert long.fire == (first, first + timedelta(hours=3))
    # Looked at late: the catch-up alone, since no slot is on time.
    minute = sched(kind="interval", interval_seconds=60)
    m1 = T0 + timedelta(minutes=1)
    late = plan(minute.model_copy(update={"next_slot": m1}), m1 + timedelta(minutes=2, seconds=30))
    assert late.fire == (m1,)
    assert late.next_slot == m1 + timedelta(minutes=3)


def test_every_field_is_checked_with_its_name() -> None:
    cases: dict[str, dict[str, Any]] = {
        "kind": {"kind": "hourly"},
        "cron": {"kind": "cron", "cron": "61 * * * *"},
        "timezone": {"kind": "cron", "cron": "* * * * *", "timezone": "Mars/Olympus"},
        "interval_seconds": {"kind": "interval", "interval_seconds": 0},
        "run_at": {"kind": "once", "run_at": "2026-03-01T12:00:00"},
        "session_id": {"kind": "interval", "interval_seconds": 5, "target": "pinned"},
        "overlap": {"kind": "interval", "interval_seconds": 5, "overlap": "maybe"},
        "missed": {"kind": "interval", "interval_seconds": 5, "missed": "all"},
        "max_failures": {"kind": "interval", "interval_seconds": 5, "max_failures": 0},
        "max_fires": {"kind": "interval", "interval_seconds": 5, "max_fires": -1},
        "prompt": {"kind": "interval", "interval_seconds": 5, "prompt": "  "},
        "bogus": {"kind": "interval", "interval_seconds": 5, "bogus": 1},
    }
    for field, values in cases.items():
        with pytest.raises(ValidationError) as caught:
            sched(**values)
        assert caught.value.field == field, (field, caught.value)
    assert fresh_session_name(
        sched(kind="interval", interval_seconds=5, name="daily report"), T0
    ) == ("daily-report-20260301T120000Z")
    assert ScheduleKind("cron") is ScheduleKind.CRON


@pytest.mark.parametrize("cron", ["0 0 31 2 *", "0 0 30 2 *", "15 3 31 4,6,9,11 *"])
def test_a_cron_that_no_date_matches_is_refused_by_name(cron: str) -> None:
    with pytest.raises(ValidationError) as caught:
        sched(kind="cron", cron=cron)
    assert caught.value.code == "request.invalid" and caught.value.field == "cron"


def test_a_cron_of_a_rare_date_is_accepted() -> None:
    leap = sched(kind="cron", cron="0 0 29 2 *")
    assert next_slot(leap, T0) == datetime(2028, 2, 29, tzinfo=UTC)
