"""The arguments of ``chaz keys`` (docs/security.md#api-keys)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from chaz.cli.parsers import Subcommands, command

if TYPE_CHECKING:
    from chaz.cli.context import Context


def register(commands: Subcommands) -> None:
    """Add ``chaz keys`` to ``commands``."""

    def key(name: str) -> Callable[[Context], int]:
        return command(f"cmd_keys_{name}", "chaz.cli.keys")

    # Here --principal and --project are the key's: the global ones (given
    # before the subcommand) still name who acts.
    keys_sub = commands.group(
        "keys", "API keys for clients that are not operators: create, revoke, list"
    )
    p = keys_sub.add(
        "create",
        key("create"),
        "create an API key; prints it once",
        parents=[commands.common],
    )
    p.add_argument(
        "--principal",
        dest="principal_of_key",
        required=True,
        metavar="P",
        help="who the key acts as: user:NAME, agent:ID or system:NAME",
    )
    p.add_argument(
        "--project", dest="project_of_key", required=True, metavar="X", help="its project"
    )
    p.add_argument(
        "--grants",
        required=True,
        metavar="G,G",
        help="comma-separated grants (history.read, session.write, ...; docs/security.md)",
    )
    p.add_argument("--label", help="a note for people (what the key is for)")
    p = keys_sub.add("revoke", key("revoke"), "revoke an API key", parents=[commands.common])
    p.add_argument("key_id", metavar="KEY_ID", help="the key's id (see `chaz keys ls`)")
    p = keys_sub.add(
        "ls", key("ls"), "list API keys (never their secrets)", parents=[commands.common]
    )
    p.add_argument("--project", dest="project_of_key", metavar="X", help="only this project's")
