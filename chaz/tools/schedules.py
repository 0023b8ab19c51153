"""Schedule tools: an agent's own schedules (docs/schedules.md#interfaces).

``schedule_add``, ``schedule_once``, ``schedule_update``, ``schedule_remove``
and ``schedule_list`` act for the calling turn's agent: its schedules are
the only ones it sees or changes (another agent's is ``schedule.not_found``,
like a missing one). A pinned schedule defaults to the calling session.
"""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from chaz.domain.principals import Grant, grant_names
from chaz.domain.schedules import (
    DEFAULT_MAX_FAILURES,
    MAX_INTERVAL_SECONDS,
    MAX_PROMPT_CHARS,
    Schedule,
)
from chaz.domain.sessions import missing_session
from chaz.domain.validation import SafeText
from chaz.errors import ScheduleNotFound
from chaz.ids import utcnow
from chaz.runtime.registry import Tool, ToolContext

_TARGET_HELP = (
    "pinned: fire in one session (session_id, default this one); fresh: a new session per fire."
)


class _Common(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt: SafeText = Field(
        min_length=1, max_length=MAX_PROMPT_CHARS, description="The input each fire's turn gets."
    )
    name: SafeText | None = Field(None, max_length=200, description="A name for people.")
    target: Literal["pinned", "fresh"] = Field("pinned", description=_TARGET_HELP)
    session_id: SafeText | None = Field(
        None, description="The pinned session (default: this session)."
    )


class ScheduleAddArgs(_Common):
    """Arguments of ``schedule_add``."""

    cron: SafeText | None = Field(None, description="Five-field cron, e.g. '30 2 * * *'.")
    timezone: SafeText | None = Field(None, description="IANA zone of the cron (default UTC).")
    interval_seconds: int | None = Field(
        None, ge=1, le=MAX_INTERVAL_SECONDS, description="Fire every this many seconds."
    )
    overlap: Literal["skip", "queue"] = Field(
        "skip", description="A busy pinned session: skip the slot, or queue the fire."
    )
    missed: Literal["skip", "catch_up_once"] = Field(
        "catch_up_once", description="Slots missed during downtime: none, or one catch-up fire."
    )
    max_fires: int | None = Field(None, ge=1, description="Stop after this many fires.")
    expires_at: SafeText | None = Field(
        None, description="ISO datetime with offset: no slots after."
    )
    max_failures: int = Field(
        DEFAULT_MAX_FAILURES, ge=1, le=100, description="Disable after this many failures in a row."
    )


class ScheduleOnceArgs(_Common):
    """Arguments of ``schedule_once``."""

    run_at: SafeText | None = Field(None, description="ISO datetime with offset.")
    in_seconds: int | None = Field(
        None, ge=0, le=MAX_INTERVAL_SECONDS, description="Or: this many seconds from now."
    )


class ScheduleUpdateArgs(BaseModel):
    """Arguments of ``schedule_update``."""

    model_config = ConfigDict(extra="forbid")

    schedule_id: SafeText = Field(description="The id schedule_add or schedule_list gave.")
    enabled: bool | None = Field(None, description="False pauses; true resumes afresh.")
    prompt: SafeText | None = Field(None, min_length=1, max_length=MAX_PROMPT_CHARS)
    name: SafeText | None = Field(None, max_length=200)
    cron: SafeText | None = None
    timezone: SafeText | None = None
    interval_seconds: int | None = Field(None, ge=1, le=MAX_INTERVAL_SECONDS)
    overlap: Literal["skip", "queue"] | None = None
    missed: Literal["skip", "catch_up_once"] | None = None
    max_fires: int | None = Field(None, ge=1)
    max_failures: int | None = Field(None, ge=1, le=100)


class ScheduleRemoveArgs(BaseModel):
    """Arguments of ``schedule_remove``."""

    model_config = ConfigDict(extra="forbid")

    schedule_id: SafeText = Field(description="The schedule to delete, with its ledger.")


class ScheduleListArgs(BaseModel):
    """Arguments of ``schedule_list`` (none)."""

    model_config = ConfigDict(extra="forbid")


def _shown(s: Schedule) -> dict[str, Any]:
    keep = (
        "id", "name", "kind", "cron", "timezone", "interval_seconds", "run_at", "prompt",
        "target", "session_id", "enabled", "overlap", "missed", "fires", "max_fires",
        "failures", "max_failures", "last_error", "disabled_reason", "next_slot", "last_slot",
    )  # fmt: skip
    data = s.model_dump(mode="json")
    return {k: data[k] for k in keep}


def _call_id(ctx: ToolContext) -> str:
    # The id comes from the call: a resumed turn repeating it gets the same schedule.
    key = f"{ctx.session_id}:{ctx.job_id}:{ctx.call_id}".encode()
    return hashlib.sha256(key).hexdigest()[:16]


def _add(ctx: ToolContext, fields: dict[str, Any]) -> str:
    ctx.require(Grant.SCHEDULE_MANAGE, "add a schedule")
    svc = ctx.need_services()
    if fields.get("target") == "pinned" and fields.get("session_id") is None:
        fields["session_id"] = ctx.session_id
    elif fields.get("session_id") is not None:
        fields["session_id"] = _pinned(ctx, str(fields["session_id"]))
    me = ctx.principal
    made = svc.store.schedules.add(
        ctx.agent_id,
        fields,
        schedule_id=_call_id(ctx),
        # Its fires act with this turn's (narrowed) authority, never more.
        project=me.project,
        principal=ctx.owner,
        grants=grant_names(me.grants),
        unattended=ctx.unattended,
        # A cancel of this turn's lineage pauses it (docs/schedules.md#a-cancelled-creator).
        job_id=ctx.job_id,
    )
    return json.dumps(_shown(made))


def _pinned(ctx: ToolContext, ref: str) -> str:
    """The id of the session a schedule pins, of this turn's project only: another
    project's session is answered as a missing one."""
    found = ctx.need_services().store.find_sessions(ref, project=ctx.principal.project)
    if not found:
        raise missing_session(ref)
    return found[0].id


def _mine(ctx: ToolContext, schedule_id: str) -> None:
    """Refuse another project's schedule exactly like a missing one."""
    book = ctx.need_services().store.schedules
    if book.get(schedule_id, owner=ctx.agent_id).project != ctx.principal.project:
        raise ScheduleNotFound(f"no schedule {schedule_id!r}", schedule_id=schedule_id)


def schedule_add(args: ScheduleAddArgs, ctx: ToolContext) -> str:
    """Create a cron or interval schedule owned by the calling agent."""
    fields = args.model_dump(exclude_none=True)
    fields["kind"] = "cron" if args.cron is not None else "interval"
    return _add(ctx, fields)


def schedule_once(args: ScheduleOnceArgs, ctx: ToolContext) -> str:
    """Create a one-shot schedule: at ``run_at``, or ``in_seconds`` from now."""
    fields = args.model_dump(exclude_none=True, exclude={"in_seconds"})
    if args.in_seconds is not None:
        fields["run_at"] = (utcnow() + timedelta(seconds=args.in_seconds)).isoformat()
    fields["kind"] = "once"
    return _add(ctx, fields)


def schedule_update(args: ScheduleUpdateArgs, ctx: ToolContext) -> str:
    """Change one of the calling agent's schedules."""
    ctx.require(Grant.SCHEDULE_MANAGE, "change a schedule")
    _mine(ctx, args.schedule_id)
    changes = args.model_dump(exclude_none=True, exclude={"schedule_id"})
    book = ctx.need_services().store.schedules
    return json.dumps(_shown(book.update(args.schedule_id, changes, owner=ctx.agent_id)))


def schedule_remove(args: ScheduleRemoveArgs, ctx: ToolContext) -> str:
    """Delete one of the calling agent's schedules."""
    ctx.require(Grant.SCHEDULE_MANAGE, "remove a schedule")
    _mine(ctx, args.schedule_id)
    gone = ctx.need_services().store.schedules.remove(args.schedule_id, owner=ctx.agent_id)
    return json.dumps({"removed": gone.id})


def schedule_list(args: ScheduleListArgs, ctx: ToolContext) -> str:
    """The calling agent's schedules."""
    ctx.require(Grant.SCHEDULE_MANAGE, "list schedules")
    mine = ctx.need_services().store.schedules.list(ctx.agent_id)
    return json.dumps([_shown(s) for s in mine if s.project == ctx.principal.project])


TOOLS = [
    Tool(
        "schedule_add",
        "Schedule a prompt for yourself: give cron (with timezone) or interval_seconds. "
        "Each fire runs a turn with the prompt as input, in this session (pinned) or a new "
        "one (fresh). Returns the schedule with its id and next slot.",
        ScheduleAddArgs,
        schedule_add,
    ),
    Tool(
        "schedule_once",
        "Schedule a prompt for yourself once: at run_at, or in_seconds from now.",
        ScheduleOnceArgs,
        schedule_once,
    ),
    Tool(
        "schedule_update",
        "Change one of your schedules (enabled=false pauses, true resumes).",
        ScheduleUpdateArgs,
        schedule_update,
    ),
    Tool("schedule_remove", "Delete one of your schedules.", ScheduleRemoveArgs, schedule_remove),
    Tool("schedule_list", "List your schedules.", ScheduleListArgs, schedule_list),
]
