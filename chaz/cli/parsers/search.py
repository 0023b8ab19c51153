"""The arguments of ``chaz search`` (docs/sessions.md#session_search)."""

from __future__ import annotations

from chaz.cli.parsers import Subcommands, command


def register(commands: Subcommands) -> None:
    """Add ``chaz search`` to ``commands``."""
    p = commands.add(
        "search",
        command("cmd_search", "chaz.cli.search"),
        "find sessions by their messages, name or description",
    )
    p.add_argument("query", metavar="QUERY", help='words, identifiers or a "quoted phrase"')
    p.add_argument("--agent", help="only this agent's sessions")
    p.add_argument("--limit", type=int, default=10, help="at most this many sessions (1-50)")
