"""``chaz rooms``: sessions of several agents, woken by @mention (docs/rooms.md)."""

from __future__ import annotations

from chaz.cli.context import Context
from chaz.cli.output import EXIT_OK
from chaz.domain.sessions import Session


def cmd_rooms_new(ctx: Context) -> int:
    """Create a room; in a pipe, print only its id."""
    args = ctx.args
    room = ctx.client.sessions.create(
        args.host, name=args.name, members=list(args.member), burst_budget=args.burst
    )
    out = ctx.out
    if out.json_mode:
        out.json(room.model_dump(mode="json"))
    elif out.fancy:
        name = f" {room.name!r}" if room.name else ""
        out.line(f"created room {room.id}{name}: {_roster(room)}", "green")
    else:
        out.line(room.id)
    return EXIT_OK


def cmd_rooms_ls(ctx: Context) -> int:
    """List rooms, newest first."""
    rooms = ctx.client.sessions.rooms(limit=ctx.args.limit, archived=ctx.args.archived)
    if ctx.out.json_mode:
        ctx.out.json([r.model_dump(mode="json") for r in rooms])
        return EXIT_OK
    rows = [
        [
            r.id,
            r.name or "",
            _roster(r),
            str(r.burst_budget) if r.burst_budget is not None else "default",
            str(r.created_at),
        ]
        for r in rooms
    ]
    ctx.out.table("rooms", ["ID", "NAME", "AGENTS", "BURST", "CREATED"], rows)
    return EXIT_OK


def cmd_rooms_add(ctx: Context) -> int:
    """Add a member to a room."""
    return _room_changed(ctx, ctx.client.sessions.add_member(ctx.args.room, ctx.args.agent))


def cmd_rooms_rm(ctx: Context) -> int:
    """Remove a member from a room."""
    return _room_changed(ctx, ctx.client.sessions.remove_member(ctx.args.room, ctx.args.agent))


def _room_changed(ctx: Context, room: Session) -> int:
    if ctx.out.json_mode:
        ctx.out.json(room.model_dump(mode="json"))
    else:
        ctx.out.line(f"room {room.name or room.id}: {_roster(room)}")
    return EXIT_OK


def _roster(room: Session) -> str:
    return "+".join([f"{room.agent_id} (host)", *(room.members or [])])
