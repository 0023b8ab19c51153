"""The arguments of ``chaz projects`` (docs/security.md#project-quotas)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from chaz.cli.parsers import Subcommands, command

if TYPE_CHECKING:
    from chaz.cli.context import Context


def register(commands: Subcommands) -> None:
    """Add ``chaz projects`` to ``commands``."""

    def proj(name: str) -> Callable[[Context], int]:
        return command(f"cmd_projects_{name}", "chaz.cli.projects")

    projects_sub = commands.group("projects", "projects' quotas: live turns, turns ever admitted")
    projects_sub.add("ls", proj("ls"), "list projects, their limits and their use")
    p = projects_sub.add("set", proj("set"), "set a project's limits (others keep theirs)")
    p.add_argument("project", metavar="NAME", help="the project")
    limit_help = "a number, -1 or 'unlimited' (no limit), or 'default'"
    p.add_argument("--max-live", dest="max_live", metavar="N", help=f"live turns: {limit_help}")
    p.add_argument("--max-jobs", dest="max_jobs", metavar="N", help=f"turns ever: {limit_help}")
    p.add_argument(
        "--turns-per-minute",
        dest="turns_per_minute",
        metavar="N",
        help=f"turns admitted per minute (a one-minute burst): {limit_help}",
    )
    p.add_argument(
        "--tokens-per-minute",
        dest="tokens_per_minute",
        metavar="N",
        help=f"model tokens per minute (admissions wait while in debt): {limit_help}",
    )
    p.add_argument(
        "--max-tokens",
        dest="max_tokens",
        metavar="N",
        help=f"model tokens the project's turns may use in all: {limit_help}",
    )
    p.add_argument(
        "--max-cost",
        dest="max_cost",
        metavar="X",
        help=f"cost (CHAZ_MODEL_PRICES) the project's turns may use in all: {limit_help}",
    )
