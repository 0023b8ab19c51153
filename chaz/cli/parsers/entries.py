"""The arguments of ``chaz send`` and ``chaz tail`` (writing and following a session's entries)."""

from __future__ import annotations

from chaz.cli.parsers import Subcommands, command

#: The values of chaz.domain.entries.EntryType a producer may post, spelled out
#: so that the parser needs no pydantic (tests/acceptance/test_cli_startup.py
#: keeps them equal to the enum).
POSTABLE_TYPES = ("message", "directive")


def register(commands: Subcommands) -> None:
    """Add ``chaz send`` and ``chaz tail`` to ``commands``."""
    p = commands.add(
        "send",
        command("cmd_send", "chaz.cli.sessions"),
        "post a message or directive into a session",
    )
    p.add_argument("session", metavar="SESSION", help="session id or name")
    p.add_argument("text", metavar="TEXT", help="the content")
    p.add_argument(
        "--sender",
        default=None,
        help="user:NAME, agent:NAME or system:NAME (default user:you; with an API key, "
        "the key's principal, the only sender it may use)",
    )
    p.add_argument(
        "--type",
        choices=POSTABLE_TYPES,
        default=POSTABLE_TYPES[0],
        help="entry type (default message)",
    )
    p.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="a repeated key returns the first entry instead of a new one",
    )
    p.add_argument("--wait", action="store_true", help="wait for and print the reply")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds --wait waits (default 60)")

    p = commands.add(
        "tail",
        command("cmd_tail", "chaz.cli.sessions"),
        "print a session's entries live until Ctrl-C",
    )
    p.add_argument("session", metavar="SESSION", help="session id or name")
    p.add_argument(
        "--after",
        type=int,
        default=None,
        metavar="N",
        help="start after entry #N (0: the whole history)",
    )
    p.add_argument(
        "-n",
        "--lines",
        type=int,
        default=10,
        metavar="N",
        help="without --after, first show the last N entries (default 10)",
    )
    p.add_argument(
        "--timeout", type=float, default=None, help="stop after this many seconds (default: never)"
    )
    p.add_argument(
        "--partial",
        action="store_true",
        help="also show answers growing as they are streamed (never stored; "
        "with --json, one JSON line per partial)",
    )
