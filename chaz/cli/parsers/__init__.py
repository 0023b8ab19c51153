"""The argument parser of ``chaz``, one module per command group.

Each module's ``register`` adds its group's commands to a :class:`Subcommands`;
:func:`chaz.cli.main.build_parser` calls them in the order ``chaz --help``
lists them. These modules load nothing but argparse: a command's own module
(with SQLAlchemy, Redis, rich, Celery behind it) is imported only when that
command runs (:func:`command`).
"""

from __future__ import annotations

import argparse
import importlib
import ipaddress
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from chaz.cli.exits import EXIT_USAGE

if TYPE_CHECKING:
    from chaz.cli.context import Context


class Subcommands:
    """Where a group's commands are added: an argparse subparsers action, with
    the options every command takes wherever they are written (``common``:
    ``--json``, ``--home``; ``identity``: who the command acts as)."""

    def __init__(
        self,
        action: Any,
        common: argparse.ArgumentParser,
        identity: argparse.ArgumentParser,
    ) -> None:
        self._action = action
        self.common = common
        self.identity = identity

    def add(
        self,
        name: str,
        func: Callable[[Context], int],
        help: str,
        parents: Sequence[argparse.ArgumentParser] | None = None,
        **kw: Any,
    ) -> argparse.ArgumentParser:
        """A command ``name`` that runs ``func``; ``parents`` default to common and identity."""
        p: argparse.ArgumentParser = self._action.add_parser(
            name,
            help=help,
            description=help,
            parents=list((self.common, self.identity) if parents is None else parents),
            **kw,
        )
        p.set_defaults(func=func)
        return p

    def group(self, name: str, help: str) -> Subcommands:
        """A command with subcommands of its own; alone, it shows its help."""
        p = self.add(name, _help_of_group, help)
        p.set_defaults(func=_help_of(p))
        action = p.add_subparsers(dest=f"{name}_command", metavar="COMMAND")
        return Subcommands(action, self.common, self.identity)


def command(name: str, module_name: str) -> Callable[[Context], int]:
    """The command ``MODULE.NAME``, imported when it runs."""

    def run_command(ctx: Context) -> int:
        module = importlib.import_module(module_name)
        func: Callable[[Context], int] = getattr(module, name)
        return func(ctx)

    run_command.__name__ = name
    return run_command


def port(text: str) -> int:
    """A TCP port number, for argparse."""
    try:
        number = int(text)
    except ValueError:
        number = 0
    if not 0 < number < 65536:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}")
    return number


def ip_address(text: str) -> str:
    """An IP address to bind, for argparse."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an IP address: {text!r}") from None
    return text


def identity_options(parser: argparse.ArgumentParser, default: Any) -> None:
    """``--api-key``, ``--principal`` and ``--project``: who every command's client
    acts as (docs/security.md#principals-and-projects)."""
    parser.add_argument(
        "--api-key",
        metavar="KEY",
        default=default,
        help="act as this API key's principal (default CHAZ_API_KEY; the variable keeps "
        "it out of the process list)",
    )
    parser.add_argument(
        "--principal",
        metavar="P",
        default=default,
        help="operator: act as user:NAME, agent:ID or system:NAME (default CHAZ_PRINCIPAL, "
        "else user:local)",
    )
    parser.add_argument(
        "--project",
        metavar="X",
        default=default,
        help="operator: act in this project (default CHAZ_PROJECT, else default)",
    )


def _help_of_group(_ctx: Context) -> int:
    return EXIT_USAGE  # replaced by _help_of(parser) once the group's parser exists


def _help_of(parser: argparse.ArgumentParser) -> Callable[[Context], int]:
    def show(_ctx: Context) -> int:
        parser.print_help(sys.stderr)
        return EXIT_USAGE

    return show
