"""Crons onto chaz schedules (docs/http.md#crons, docs/schedules.md).

A cron is a schedule of kind ``cron``: its ``schedule`` is the schedule's
five-field ``cron``, in its ``timezone``; its input (one user message, as a
run's) is the schedule's prompt; its assistant the schedule's owner agent;
``end_time`` its ``expires_at``. A cron on a thread pins the schedule to that
thread's session; a standalone cron's fires each make a new session
(``target: fresh``), as LangGraph makes a new thread per fire. Every fire
goes chaz's fire path: one turn whose input is the prompt, no entry written
for it (docs/schedules.md#the-fire-path), its reply in the thread.

Schedules of another kind (interval, once) are not crons: their ids are
answered like a missing cron's, and a search does not list them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import APIRouter, Response

from chaz.domain.principals import Grant, grant_names
from chaz.domain.schedules import Overlap, Schedule, ScheduleKind, Target
from chaz.domain.validation import check_ref
from chaz.errors import ScheduleNotFound, Unsupported, ValidationError
from chaz.server import fields, mapping
from chaz.server.state import Call, Caller, Payload

router = APIRouter()

#: The fields of a cron's body chaz implements (the others are refused).
CREATE_FIELDS = (
    "schedule",
    "input",
    "assistant_id",
    "end_time",
    "enabled",
    "timezone",
    "multitask_strategy",
)
#: A standalone cron's body may also say what happens to each fire's thread.
STANDALONE_FIELDS = (*CREATE_FIELDS, "on_run_completed")
UPDATE_FIELDS = ("schedule", "input", "end_time", "enabled", "timezone", "on_run_completed")
SEARCH_FIELDS = (
    "assistant_id",
    "thread_id",
    "enabled",
    "limit",
    "offset",
    "sort_by",
    "sort_order",
    "select",
)
#: A cron on a busy thread: ``reject`` skips the slot (chaz's default
#: ``overlap: skip``), ``enqueue`` queues the fire's turn behind the work.
STRATEGIES = {"reject": Overlap.SKIP, "enqueue": Overlap.QUEUE}
#: What chaz does with a standalone cron's threads: keeps them.
ON_RUN_COMPLETED = ("keep",)
#: The fields a search sorts by, and those a ``select`` may keep.
SORT_BY = (
    "cron_id",
    "assistant_id",
    "thread_id",
    "created_at",
    "updated_at",
    "next_run_date",
    "end_time",
)
SELECT = (
    "cron_id",
    "assistant_id",
    "thread_id",
    "end_time",
    "schedule",
    "timezone",
    "created_at",
    "updated_at",
    "user_id",
    "payload",
    "next_run_date",
    "metadata",
    "on_run_completed",
    "enabled",
)
#: The most crons one search returns.
MAX_PAGE = 1000
#: A schedule's field -> the cron's, for refusals that name a field.
FIELD_NAMES = {
    "cron": "schedule",
    "expires_at": "end_time",
    "prompt": "input",
    "session_id": "thread_id",
    "overlap": "multitask_strategy",
    "owner_agent_id": "assistant_id",
}


def cron(schedule: Schedule) -> dict[str, Any]:
    """A cron schedule as LangGraph's ``Cron``."""
    pinned = schedule.target is Target.PINNED
    strategy = "enqueue" if schedule.overlap is Overlap.QUEUE else "reject"
    return {
        "cron_id": schedule.id,
        "assistant_id": schedule.owner_agent_id,
        "thread_id": schedule.session_id if pinned else None,
        "on_run_completed": None if pinned else "keep",
        "end_time": mapping.iso(schedule.expires_at),
        "schedule": schedule.cron,
        "timezone": schedule.timezone,
        "created_at": mapping.iso(schedule.created_at),
        "updated_at": mapping.iso(schedule.updated_at),
        "payload": {
            "assistant_id": schedule.owner_agent_id,
            "input": {"messages": [{"role": "user", "content": schedule.prompt}]},
            "multitask_strategy": strategy,
        },
        "user_id": schedule.owner,
        "next_run_date": mapping.iso(schedule.next_slot) if schedule.enabled else None,
        "metadata": {},
        "enabled": schedule.enabled,
    }


@contextmanager
def _named_as_crons() -> Iterator[None]:
    """A schedule's refusal, naming the cron's field (``schedule``, not ``cron``)."""
    try:
        yield
    except ValidationError as exc:
        field = exc.field
        if field not in FIELD_NAMES:
            raise
        renamed = FIELD_NAMES[field]
        raise type(exc)(
            exc.message.replace(field, renamed), **{**exc.details, "field": renamed}
        ) from exc


def _timing(given: dict[str, Any]) -> dict[str, Any]:
    """The schedule's fields a cron's body sets (those it gives)."""
    out: dict[str, Any] = {}
    if "schedule" in given:
        out["cron"] = given["schedule"]
    if given.get("timezone") is not None:
        out["timezone"] = given["timezone"]
    if "end_time" in given:
        out["expires_at"] = given["end_time"]
    if given.get("enabled") is not None:
        out["enabled"] = given["enabled"]
    if given.get("input") is not None:
        out["prompt"] = fields.input_text(given["input"])
    return out


def _on_run_completed(given: dict[str, Any]) -> None:
    value = given.get("on_run_completed")
    if value is not None and value not in ON_RUN_COMPLETED:
        raise Unsupported(
            f"on_run_completed {value!r} is not supported by chaz: a fire's thread is kept",
            field="on_run_completed",
        )


def _add(c: Call, given: dict[str, Any], agent_id: str, session_id: str | None) -> Schedule:
    if "schedule" not in given:
        raise ValidationError("a cron needs a schedule (a cron expression)", field="schedule")
    if given.get("input") is None:
        raise ValidationError("a cron needs an input: its run's message", field="input")
    strategy = given.get("multitask_strategy") or "reject"
    if strategy not in STRATEGIES:
        raise Unsupported(
            f"multitask_strategy {strategy!r} is not supported for crons: use "
            + " or ".join(STRATEGIES),
            field="multitask_strategy",
        )
    values = {
        "kind": ScheduleKind.CRON.value,
        "overlap": STRATEGIES[strategy].value,
        **_timing(given),
    }
    if session_id is not None:
        values |= {"target": Target.PINNED.value, "session_id": session_id}
    else:
        values["target"] = Target.FRESH.value
    with _named_as_crons():
        return c.services.store.schedules.add(
            agent_id,
            values,
            project=c.principal.project,
            principal=c.principal.name,
            grants=grant_names(c.principal.grants),
        )


@router.post("/threads/{thread_id}/runs/crons")
def create_thread_cron(thread_id: str, c: Caller, payload: Payload = None) -> dict[str, Any]:
    """A cron on a thread: a cron schedule pinned to the thread's session."""
    given = fields.body(payload)
    c.principal.require(Grant.SCHEDULE_MANAGE, "create crons")
    fields.refuse_unknown(given, CREATE_FIELDS)
    session = c.thread(thread_id)
    assistant = check_ref("assistant_id", given.get("assistant_id"))
    if assistant != session.agent_id:
        raise ValidationError(
            f"thread {session.id} is a session of {session.agent_id!r}: its crons use that "
            "assistant",
            field="assistant_id",
        )
    return cron(_add(c, given, session.agent_id, session.id))


@router.post("/runs/crons")
def create_cron(c: Caller, payload: Payload = None) -> dict[str, Any]:
    """A standalone cron: each fire runs in a new session of the assistant."""
    given = fields.body(payload)
    c.principal.require(Grant.SCHEDULE_MANAGE, "create crons")
    fields.refuse_unknown(given, STANDALONE_FIELDS)
    _on_run_completed(given)
    agent = c.services.store.get_agent(check_ref("assistant_id", given.get("assistant_id")))
    return cron(_add(c, given, agent.id, None))


def _cron(c: Call, cron_id: str) -> Schedule:
    """A cron of the principal's project; any other schedule is a missing cron."""
    ref = check_ref("cron_id", cron_id)
    schedule = c.services.store.schedules.get(ref, project=c.principal.project)
    if schedule.kind is not ScheduleKind.CRON:
        raise ScheduleNotFound(f"no cron {cron_id!r}", schedule_id=cron_id)
    return schedule


@router.patch("/runs/crons/{cron_id}")
def update_cron(cron_id: str, c: Caller, payload: Payload = None) -> dict[str, Any]:
    """Change a cron's schedule, time zone, end, input, or whether it is enabled."""
    given = fields.body(payload)
    c.principal.require(Grant.SCHEDULE_MANAGE, "change crons")
    fields.refuse_unknown(given, UPDATE_FIELDS)
    _on_run_completed(given)
    old = _cron(c, cron_id)
    if "schedule" in given and given["schedule"] is None:
        raise ValidationError("schedule may not be null", field="schedule")
    changes = _timing(given)
    if not changes:
        return cron(old)
    with _named_as_crons():
        return cron(c.services.store.schedules.update(old.id, changes, project=c.principal.project))


@router.delete("/runs/crons/{cron_id}", status_code=204)
def delete_cron(cron_id: str, c: Caller) -> Response:
    """Delete a cron: its schedule and its ledger (the fires' sessions stay)."""
    c.principal.require(Grant.SCHEDULE_MANAGE, "delete crons")
    old = _cron(c, cron_id)
    c.services.store.schedules.remove(old.id, project=c.principal.project)
    return Response(status_code=204)


def _matching(c: Call, given: dict[str, Any]) -> list[Schedule]:
    """The project's crons that a search's filters keep, oldest first."""
    agent_id = given.get("assistant_id")
    if agent_id is not None:
        agent_id = check_ref("assistant_id", agent_id)
    thread_id = given.get("thread_id")
    if thread_id is not None:
        thread_id = check_ref("thread_id", thread_id)
    enabled = given.get("enabled")
    if enabled is not None and not isinstance(enabled, bool):
        raise ValidationError("enabled must be true or false", field="enabled")
    found = c.services.store.schedules.list(agent_id, project=c.principal.project)
    return [
        s
        for s in found
        if s.kind is ScheduleKind.CRON
        and (thread_id is None or (s.target is Target.PINNED and s.session_id == thread_id))
        and (enabled is None or s.enabled is enabled)
    ]


@router.post("/runs/crons/search")
def search_crons(c: Caller, payload: Payload = None) -> list[dict[str, Any]]:
    """The project's crons, filtered by assistant, thread and ``enabled``;
    sorted by ``sort_by`` (default ``created_at``), ``select`` keeps fields."""
    given = fields.body(payload)
    c.principal.require(Grant.HISTORY_READ, "list crons")
    fields.refuse_unknown(given, SEARCH_FIELDS)
    limit = fields.integer(given, "limit", 10, 1, MAX_PAGE)
    offset = fields.integer(given, "offset", 0, 0, 100_000)
    sort_by = fields.choice(given, "sort_by", SORT_BY, "created_at")
    order = fields.choice(given, "sort_order", ("asc", "desc"), "asc")
    select = given.get("select")
    if select is not None and (
        not isinstance(select, list) or not all(isinstance(f, str) and f in SELECT for f in select)
    ):
        raise ValidationError("select must be a list of: " + ", ".join(SELECT), field="select")
    crons = [cron(s) for s in _matching(c, given)]
    # None sorts first: an empty key before any value, then by id for a stable order.
    crons.sort(key=lambda x: (x[sort_by] is not None, x[sort_by] or "", x["cron_id"]))
    if order == "desc":
        crons.reverse()
    page = crons[offset : offset + limit]
    if select:
        page = [{k: v for k, v in x.items() if k in select} for x in page]
    return page


@router.post("/runs/crons/count")
def count_crons(c: Caller, payload: Payload = None) -> int:
    """How many of the project's crons the filters keep."""
    given = fields.body(payload)
    c.principal.require(Grant.HISTORY_READ, "count crons")
    fields.refuse_unknown(given, ("assistant_id", "thread_id"))
    return len(_matching(c, given))
