"""``chaz schedules``: agent-owned schedules and their ledgers (docs/schedules.md)."""

from __future__ import annotations

from typing import Any

from chaz.cli.context import Context
from chaz.cli.output import EXIT_OK
from chaz.domain.schedules import Schedule


def _when(s: Schedule) -> str:
    if s.cron is not None:
        return f"cron {s.cron} {s.timezone}"
    if s.interval_seconds is not None:
        return f"every {s.interval_seconds}s"
    return f"once {s.run_at.isoformat() if s.run_at else '?'}"


def _state(s: Schedule) -> str:
    if s.enabled:
        return "on" if s.next_slot is not None else "done"
    return f"off: {s.disabled_reason}" if s.disabled_reason else "paused"


def _print(ctx: Context, s: Schedule, verb: str) -> int:
    if ctx.out.json_mode:
        ctx.out.json(s.model_dump(mode="json"))
    else:
        ctx.out.line(f"schedule {s.id} {verb} ({_when(s)}; {_state(s)})")
    return EXIT_OK


def cmd_schedules_ls(ctx: Context) -> int:
    """List schedules (of one agent), oldest first."""
    found = ctx.client.schedules.list(ctx.args.agent)
    if ctx.out.json_mode:
        ctx.out.json([s.model_dump(mode="json") for s in found])
        return EXIT_OK
    rows = [
        [
            s.id,
            s.name or "",
            s.owner_agent_id,
            _when(s),
            s.session_id or "fresh",
            s.fires,
            s.next_slot.isoformat() if s.next_slot else "",
            _state(s),
        ]
        for s in found
    ]
    ctx.out.table(
        "schedules", ["ID", "NAME", "AGENT", "WHEN", "TARGET", "FIRES", "NEXT", "STATE"], rows
    )
    return EXIT_OK


def cmd_schedules_add(ctx: Context) -> int:
    """Create a schedule for an agent."""
    a = ctx.args
    fields: dict[str, Any] = {"prompt": a.prompt, "overlap": a.overlap, "missed": a.missed}
    if a.cron is not None:
        fields |= {"kind": "cron", "cron": a.cron, "timezone": a.timezone}
    elif a.every is not None:
        fields |= {"kind": "interval", "interval_seconds": a.every}
    else:
        fields |= {"kind": "once", "run_at": a.at}
    for key in ("name", "session_id", "max_fires", "expires_at"):
        value = getattr(a, key)
        if value is not None:
            fields[key] = value
    fields["target"] = "pinned" if a.session_id is not None else "fresh"
    return _print(ctx, ctx.client.schedules.add(a.agent, **fields), "added")


def cmd_schedules_rm(ctx: Context) -> int:
    """Delete a schedule and its ledger."""
    return _print(ctx, ctx.client.schedules.remove(ctx.args.schedule), "removed")


def cmd_schedules_pause(ctx: Context) -> int:
    """Stop a schedule firing."""
    return _print(ctx, ctx.client.schedules.pause(ctx.args.schedule), "paused")


def cmd_schedules_resume(ctx: Context) -> int:
    """Fire again from the next slot, failures cleared."""
    return _print(ctx, ctx.client.schedules.resume(ctx.args.schedule), "resumed")


def cmd_schedules_fires(ctx: Context) -> int:
    """A schedule's ledger, newest slot first."""
    fires = ctx.client.schedules.fires(ctx.args.schedule, limit=ctx.args.limit)
    if ctx.out.json_mode:
        ctx.out.json([f.model_dump(mode="json") for f in fires])
        return EXIT_OK
    rows = [
        [
            f.slot.isoformat(),
            f.outcome.value,
            f.session_id or "",
            f.job_id or "",
            f"{f.duration_ms}ms" if f.duration_ms is not None else "",
            (f.error or {}).get("code", ""),
        ]
        for f in fires
    ]
    ctx.out.table("fires", ["SLOT", "OUTCOME", "SESSION", "JOB", "DURATION", "ERROR"], rows)
    return EXIT_OK
