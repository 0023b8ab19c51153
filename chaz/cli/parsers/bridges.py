"""The arguments of ``chaz bridge`` (docs/bridges.md)."""

from __future__ import annotations

from pathlib import Path

from chaz.cli.parsers import Subcommands, command


def register(commands: Subcommands) -> None:
    """Add ``chaz bridge matrix`` to ``commands``."""
    bridge = commands.group("bridge", "relay a chat platform to chaz sessions (docs/bridges.md)")
    p = bridge.add(
        "matrix",
        command("cmd_bridge_matrix", "chaz.cli.bridges"),
        "relay Matrix rooms to chaz sessions until SIGTERM or Ctrl-C (needs only a chaz URL "
        "and API keys)",
        parents=[commands.common],
    )
    p.add_argument(
        "--config",
        type=Path,
        required=True,
        metavar="FILE",
        help="the bridge's configuration, TOML (or .json): docs/bridges.md#config",
    )
