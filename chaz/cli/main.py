"""The entry points of the ``chaz`` command and its argument parser's root.

This module loads nothing heavy: ``chaz --help`` and ``chaz --version`` answer
from argparse alone (each group registers its arguments from its module in
:mod:`chaz.cli.parsers`), and a command's module (with SQLAlchemy, Redis,
rich, Celery behind it) is imported only when that command runs. The error handler
recognises third-party exceptions only through modules already loaded: an
exception of a library that was never imported cannot have been raised.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from contextlib import suppress

from chaz import __version__
from chaz.cli import parsers
from chaz.cli.exits import (
    EXIT_BROKEN_PIPE,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
)
from chaz.cli.parsers import (
    agents,
    approvals,
    bridges,
    deliveries,
    entries,
    events,
    jobs,
    keys,
    operations,
    processes,
    projects,
    rooms,
    schedules,
    search,
    sessions,
    webhooks,
)
from chaz.errors import (
    ChazError,
    ValidationError,
    from_exception,
    refuses_as_written,
)

#: The command groups, in the order ``chaz --help`` lists them.
GROUPS = (
    processes,
    operations,
    agents,
    sessions,
    rooms,
    deliveries,
    entries,
    events,
    schedules,
    approvals,
    keys,
    search,
    projects,
    jobs,
    webhooks,
    bridges,
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``chaz`` and all its subcommands."""
    parser, commands = _root_parser()
    for group in GROUPS:
        group.register(commands)
    return parser


def _worker_parser() -> argparse.ArgumentParser:
    """:func:`build_parser` with ``chaz worker`` as its only subcommand.

    A command line that starts with ``worker`` parses to the same namespace,
    the same errors and the same help with it (the root's options, which
    that line cannot hold before ``worker``, are the same; the subcommand's
    parser is the same), and building the other groups' parsers was about a
    fifth of the command's own time before its exec, which every worker's
    start pays (docs/performance.md#worker-start-up).
    """
    parser, commands = _root_parser()
    processes.register_worker(commands)
    return parser


def _root_parser() -> tuple[argparse.ArgumentParser, parsers.Subcommands]:
    """The root parser and where the command groups add their commands."""
    # --json and --home work before or after the subcommand. SUPPRESS keeps a
    # subcommand from resetting a value given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print JSON (JSON lines for streams) instead of text",
    )
    common.add_argument(
        "--home",
        metavar="DIR",
        default=argparse.SUPPRESS,
        help="data directory of the embedded default (overrides CHAZ_HOME)",
    )
    # Who the command acts as (docs/security.md), before or after the subcommand.
    identity = argparse.ArgumentParser(add_help=False)
    parsers.identity_options(identity, argparse.SUPPRESS)

    parser = argparse.ArgumentParser(
        prog="chaz",
        description="chaz: a distributed runtime for LLM agent sessions.",
        epilog="Settings come from CHAZ_* variables (see `chaz config`). "
        "Exit codes: 0 ok, 1 failure, 2 bad request, 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"chaz {__version__}")
    parser.add_argument(
        "--json",
        action="store_true",
        default=False,
        help="print JSON (JSON lines for streams) instead of text",
    )
    parser.add_argument(
        "--home",
        metavar="DIR",
        default=None,
        help="data directory of the embedded default (overrides CHAZ_HOME)",
    )
    parsers.identity_options(parser, None)
    commands = parsers.Subcommands(
        parser.add_subparsers(dest="command", metavar="COMMAND"), common, identity
    )
    return parser, commands


# --------------------------------------------------------------------------- entry points


def exit_code(exc: ChazError) -> int:
    """2 for a request that can never succeed as written, 1 for other failures."""
    return EXIT_USAGE if refuses_as_written(exc) else EXIT_FAILURE


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # `chaz worker ...` (a deployment's worker, each scale-up) builds only its parser.
    parser = _worker_parser() if argv[:1] == ["worker"] else build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra and args.command != "worker":
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:
        # argparse exits on --help (0) and on usage errors (2); run() returns instead.
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    args.extra = extra
    if not hasattr(args, "func"):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    from chaz.cli.context import Context
    from chaz.cli.output import Output
    from chaz.plumbing.files import PRIVATE_UMASK

    # Whatever a command creates (the home, the database, logs, the processes
    # it starts and their files) is for the owner only.
    os.umask(os.umask(PRIVATE_UMASK) | PRIVATE_UMASK)
    out = Output(json_mode=bool(args.json))
    ctx = Context(args, out)
    try:
        _check_arguments(args)
        return int(args.func(ctx))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except ChazError as exc:
        out.error(exc)
        return exit_code(exc)
    except BrokenPipeError:
        # `chaz tail S | head`: the reader left. Point stdout at /dev/null so
        # the interpreter's final flush does not complain a second time.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except Exception as exc:
        err = as_chaz_error(exc)
        out.error(err)
        return exit_code(err)
    finally:
        # Closing connections must not hide the command's own outcome.
        with suppress(Exception):
            ctx.close()


def _check_arguments(args: argparse.Namespace) -> None:
    """Refuse an argument that was not valid UTF-8 on the command line.

    Python decodes such bytes to lone surrogates, which no database or JSON
    encoder accepts; better said here than as an encoder's error later.
    """
    values = [v for v in vars(args).values() if isinstance(v, str)] + list(args.extra)
    for value in values:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            shown = value.encode("utf-8", "backslashreplace").decode()
            raise ValidationError(
                f"argument '{shown}' is not valid UTF-8 (at character {exc.start})"
            ) from exc


def as_chaz_error(exc: Exception) -> ChazError:
    """The chaz error to report for an exception that escaped a command
    (:func:`chaz.errors.from_exception`, which the worker ``chaz worker``
    execs shares)."""
    return from_exception(exc)


def main() -> None:
    """Console-script entry point: ``chaz ...``."""
    try:
        code = run()
    except KeyboardInterrupt:
        # Ctrl-C while run() was cleaning up, after its own handler.
        code = EXIT_INTERRUPTED
    # The command is over: a late Ctrl-C must not turn its outcome into a
    # traceback while the interpreter shuts down.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(code)
