"""The arguments of ``chaz sessions``."""

from __future__ import annotations

from chaz.cli.parsers import Subcommands, command


def register(commands: Subcommands) -> None:
    """Add ``chaz sessions`` to ``commands``."""
    sessions_sub = commands.group("sessions", "sessions: create, list, inspect")
    p = sessions_sub.add(
        "ls", command("cmd_sessions_ls", "chaz.cli.sessions"), "list sessions, newest first"
    )
    p.add_argument("--agent", help="only this agent's sessions")
    p.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    p.add_argument("--tree", metavar="SESSION", help="only the tree of this session (id or name)")
    p.add_argument("--archived", action="store_true", help="archived sessions (hidden otherwise)")
    p = sessions_sub.add(
        "archive",
        command("cmd_sessions_archive", "chaz.cli.sessions"),
        "archive a session: hidden from listings, no new deliveries; its work goes on",
    )
    p.add_argument("session", metavar="SESSION", help="session id, SID:HEAD or name")
    p.add_argument("--reason", default="", help="why; kept with the archive")
    p = sessions_sub.add(
        "stop",
        command("cmd_sessions_stop", "chaz.cli.sessions"),
        "stop a session: withdraw its inbox, cancel its queued jobs and its running turn",
    )
    p.add_argument("session", metavar="SESSION", help="session id or name")
    p.add_argument(
        "--command-id", metavar="C", help="idempotency key: a repeated id returns the first outcome"
    )
    p.add_argument("--reason", default="", help="why; recorded with the cancellations")
    p = sessions_sub.add(
        "rename",
        command("cmd_sessions_rename", "chaz.cli.sessions"),
        "name a session (automatic naming never overwrites it)",
    )
    p.add_argument("session", metavar="SESSION", help="session id or name")
    p.add_argument("name", metavar="NAME", help="the new unique name")
    p = sessions_sub.add(
        "compact",
        command("cmd_sessions_compact", "chaz.cli.sessions"),
        "write a Summary of the session by its own model; later turns start from it",
    )
    p.add_argument("session", metavar="SESSION", help="session id or name")
    p.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for a running turn (60)"
    )
    p = sessions_sub.add(
        "new", command("cmd_sessions_new", "chaz.cli.sessions"), "create a session"
    )
    p.add_argument("agent", metavar="AGENT", help="the agent id")
    p.add_argument("--name", help="a unique label (addressable like the id)")
    p = sessions_sub.add(
        "show",
        command("cmd_sessions_show", "chaz.cli.sessions"),
        "a session, its entries and its queue",
    )
    p.add_argument("session", metavar="SESSION", help="session id or name")
    p.add_argument("--last", type=int, default=None, metavar="N", help="only the last N entries")

    p = sessions_sub.add(
        "fork",
        command("cmd_sessions_fork", "chaz.cli.sessions"),
        "a new session whose history reads through SESSION up to entry --at",
    )
    p.add_argument("session", metavar="SESSION", help="session id or name to fork")
    p.add_argument("--at", type=int, required=True, metavar="SEQ", help="the entry to fork at")
    p.add_argument("--agent", help="the agent the fork runs (default: the source's)")
    p.add_argument("--name", help="a unique label (default: an automatic name)")
