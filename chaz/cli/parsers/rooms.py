"""The arguments of ``chaz rooms`` (docs/rooms.md)."""

from __future__ import annotations

from chaz.cli.parsers import Subcommands, command


def register(commands: Subcommands) -> None:
    """Add ``chaz rooms`` to ``commands``."""
    rooms_sub = commands.group("rooms", "rooms: sessions of several agents, woken by @mention")
    p = rooms_sub.add(
        "new", command("cmd_rooms_new", "chaz.cli.rooms"), "create a room of HOST and its members"
    )
    p.add_argument("host", metavar="HOST", help="the host agent (wakes when nobody is mentioned)")
    p.add_argument(
        "--member", action="append", default=[], metavar="AGENT", help="a member (repeatable)"
    )
    p.add_argument("--name", help="a unique label (addressable like the id)")
    p.add_argument(
        "--burst", type=int, default=None, metavar="N", help="the room's burst budget (default 6)"
    )
    p = rooms_sub.add("ls", command("cmd_rooms_ls", "chaz.cli.rooms"), "list rooms, newest first")
    p.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    p.add_argument("--archived", action="store_true", help="archived rooms (hidden otherwise)")
    for verb, text in (("add", "add a member to a room"), ("rm", "remove a member from a room")):
        p = rooms_sub.add(verb, command(f"cmd_rooms_{verb}", "chaz.cli.rooms"), text)
        p.add_argument("room", metavar="ROOM", help="room id or name")
        p.add_argument("agent", metavar="AGENT", help="the agent id")
