"""The arguments of ``chaz events``."""

from __future__ import annotations

from chaz.cli.parsers import Subcommands, command


def register(commands: Subcommands) -> None:
    """Add ``chaz events`` to ``commands``."""
    p = commands.add(
        "events",
        command("cmd_events", "chaz.cli.events"),
        "a session's event log: deliveries, job states, archive changes, renames",
    )
    p.add_argument("session", metavar="SESSION", help="session id or name")
    p.add_argument(
        "-f", "--follow", action="store_true", help="then print new events live until Ctrl-C"
    )
    p.add_argument("--jsonl", action="store_true", help="print one JSON object per line")
    p.add_argument("--after", type=int, default=0, metavar="N", help="only events after id N")
    p.add_argument(
        "--limit",
        type=int,
        default=None,
        metavar="N",
        help="at most N events (default 100; with --follow, stop after N)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="with --follow, stop after this many seconds (default: never)",
    )
