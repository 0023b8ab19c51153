"""The arguments of ``chaz deliveries`` (docs/collaboration.md#deliveries)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from chaz.cli.parsers import Subcommands, command

if TYPE_CHECKING:
    from chaz.cli.context import Context


def register(commands: Subcommands) -> None:
    """Add ``chaz deliveries`` to ``commands``."""

    def dlv(name: str) -> Callable[[Context], int]:
        return command(f"cmd_deliveries_{name}", "chaz.cli.deliveries")

    deliveries_sub = commands.group(
        "deliveries", "hand-offs between sessions: list, inspect, send a request"
    )
    p = deliveries_sub.add(
        "ls",
        dlv("ls"),
        "hand-offs into and out of a session (spawns, messages, follow-ups, requests)",
    )
    p.add_argument("session", metavar="SESSION", help="session id or name")
    p.add_argument(
        "--direction", choices=("in", "out", "both"), default="both", help="default both"
    )
    p.add_argument(
        "--status",
        choices=("accepted", "delivering", "consumed", "failed"),
        default=None,
        help="only deliveries in this lifecycle status",
    )
    p.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    p = deliveries_sub.add("get", dlv("get"), "one delivery, its status and its result")
    p.add_argument("delivery", metavar="ID", help="delivery (request) id")
    p = deliveries_sub.add("send", dlv("send"), "send a request to a session: its own turn there")
    p.add_argument("target", metavar="SESSION_ID", help="the target's session id (not a name)")
    p.add_argument("text", metavar="TEXT", help="the request")
    p.add_argument("--reply", choices=("none", "completion"), default="none", help="default none")
    p.add_argument(
        "--from", dest="from_session", metavar="SESSION_ID", help="where a result comes back"
    )
    p.add_argument(
        "--sender", default=None, help="user:NAME or system:NAME (default: the acting principal)"
    )
