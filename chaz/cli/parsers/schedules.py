"""The arguments of ``chaz schedules`` (docs/schedules.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from chaz.cli.parsers import Subcommands, command

if TYPE_CHECKING:
    from chaz.cli.context import Context


def register(commands: Subcommands) -> None:
    """Add ``chaz schedules`` to ``commands``."""

    def sched(name: str) -> Callable[[Context], int]:
        return command(f"cmd_schedules_{name}", "chaz.cli.schedules")

    schedules_sub = commands.group(
        "schedules", "agent-owned schedules: list, add, pause, resume, ledger"
    )
    p = schedules_sub.add("ls", sched("ls"), "list schedules, oldest first")
    p.add_argument("--agent", help="only this agent's schedules")
    p = schedules_sub.add("add", sched("add"), "schedule a prompt for an agent")
    p.add_argument("agent", metavar="AGENT", help="the owner agent")
    p.add_argument("prompt", metavar="PROMPT", help="each fire's input")
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", help="five-field cron expression, e.g. '30 2 * * *'")
    when.add_argument("--every", type=int, metavar="SECONDS", help="an interval")
    when.add_argument("--at", metavar="ISO", help="once, at this datetime (with an offset)")
    p.add_argument("--timezone", default="UTC", help="IANA zone of --cron (default UTC)")
    p.add_argument("--session", dest="session_id", help="pinned session (default: fresh ones)")
    p.add_argument("--name", help="a name for people")
    p.add_argument("--overlap", default="skip", choices=["skip", "queue"], help="busy session")
    p.add_argument(
        "--missed", default="catch_up_once", choices=["skip", "catch_up_once"], help="downtime"
    )
    p.add_argument("--max-fires", type=int, dest="max_fires", help="stop after N fires")
    p.add_argument("--expires-at", dest="expires_at", metavar="ISO", help="no slots after")
    for name, help in (
        ("rm", "delete a schedule and its ledger"),
        ("pause", "stop a schedule firing"),
        ("resume", "fire again from the next slot, failures cleared"),
    ):
        p = schedules_sub.add(name, sched(name), help)
        p.add_argument("schedule", metavar="SCHEDULE", help="schedule id")
    p = schedules_sub.add("fires", sched("fires"), "a schedule's ledger, newest slot first")
    p.add_argument("schedule", metavar="SCHEDULE", help="schedule id")
    p.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
