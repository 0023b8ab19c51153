"""The arguments of ``chaz agents``."""

from __future__ import annotations

from chaz.cli.parsers import Subcommands, command


def register(commands: Subcommands) -> None:
    """Add ``chaz agents`` to ``commands``."""
    agents_sub = commands.group("agents", "saved agents")
    p = agents_sub.add(
        "put", command("cmd_agents_put", "chaz.cli.agents"), "create or replace agents from JSON"
    )
    p.add_argument("file", metavar="FILE", help="a JSON AgentSpec (or a list of them); - = stdin")
    agents_sub.add("ls", command("cmd_agents_ls", "chaz.cli.agents"), "list agents")
