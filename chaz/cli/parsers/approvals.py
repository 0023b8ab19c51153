"""The arguments of ``chaz approvals`` (docs/approvals.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from chaz.cli.parsers import Subcommands, command

if TYPE_CHECKING:
    from chaz.cli.context import Context


def register(commands: Subcommands) -> None:
    """Add ``chaz approvals`` to ``commands``."""

    def appr(name: str) -> Callable[[Context], int]:
        return command(f"cmd_approvals_{name}", "chaz.cli.approvals")

    approvals_sub = commands.group("approvals", "tool calls waiting for a decision: list, decide")
    p = approvals_sub.add("ls", appr("ls"), "requests waiting for a decision, oldest first")
    p.add_argument("--session", help="only this session's requests")
    p = approvals_sub.add("decide", appr("decide"), "approve or deny a request")
    p.add_argument("request", metavar="ID", help="request id")
    p.add_argument(
        "decision",
        choices=["approve", "deny", "approve_all"],
        help="the decision (approve_all: this call and the rest of its turn's gated calls)",
    )
    p.add_argument("--by", default=None, help="who decides (default: the principal acting)")
