"""The arguments of ``chaz webhooks`` (docs/http.md#webhooks)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from chaz.cli.parsers import Subcommands, command

if TYPE_CHECKING:
    from chaz.cli.context import Context


def register(commands: Subcommands) -> None:
    """Add ``chaz webhooks`` to ``commands``."""

    def hook(name: str) -> Callable[[Context], int]:
        return command(f"cmd_webhooks_{name}", "chaz.cli.webhooks")

    sub = commands.group("webhooks", "runs' webhook deliveries and the project's signing secret")
    p = sub.add("ls", hook("ls"), "list the project's webhook deliveries, newest first")
    p.add_argument("--state", choices=("pending", "delivered", "dead"), help="only these")
    p.add_argument("--limit", type=int, default=100, help="at most this many (100)")
    p = sub.add("retry", hook("retry"), "send a dead delivery again (attempts from zero)")
    p.add_argument("webhook_id", metavar="ID", help="the delivery's id (see `chaz webhooks ls`)")
    p = sub.add("secret", hook("secret"), "print the project's signing secret (operator)")
    p.add_argument(
        "--rotate",
        action="store_true",
        help="replace it first; the old one signs beside it for the overlap",
    )
    p.add_argument(
        "--overlap",
        type=float,
        metavar="SECONDS",
        help="with --rotate: how long the old one keeps signing "
        "(default CHAZ_WEBHOOK_ROTATION_OVERLAP_SECONDS, a day; 0 for not at all)",
    )
