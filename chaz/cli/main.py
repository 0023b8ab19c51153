"""The argument parser and the entry points of the ``chaz`` command."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any

import pydantic
import redis
import sqlalchemy.exc

from chaz import __version__
from chaz.cli.commands import (
    DEMO_MESSAGE,
    cmd_agents_ls,
    cmd_agents_put,
    cmd_config,
    cmd_demo,
    cmd_jobs_cancel,
    cmd_jobs_ls,
    cmd_jobs_show,
    cmd_migrate,
    cmd_send,
    cmd_sessions_ls,
    cmd_sessions_new,
    cmd_sessions_show,
    cmd_tail,
    cmd_up,
    cmd_worker,
)
from chaz.cli.context import (
    Context,
    _pydantic_message,
)
from chaz.cli.output import (
    EXIT_BROKEN_PIPE,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    Output,
)
from chaz.domain.entries import EntryType
from chaz.domain.jobs import JobStatus
from chaz.errors import (
    BackendUnavailable,
    ChazError,
    ConfigError,
    NotFound,
    ValidationError,
)


def _show_help(_ctx: Context) -> int:
    return EXIT_USAGE  # replaced by _help_of(parser) once the parser exists


def _help_of(parser: argparse.ArgumentParser) -> Callable[[Context], int]:
    def show(_ctx: Context) -> int:
        parser.print_help(sys.stderr)
        return EXIT_USAGE

    return show


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``chaz`` and all its subcommands."""
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
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(
        parent: Any, name: str, func: Callable[[Context], int], help: str, **kw: Any
    ) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = parent.add_parser(
            name, help=help, description=help, parents=[common], **kw
        )
        p.set_defaults(func=func)
        return p

    def group(name: str, help: str) -> Any:
        # A command with subcommands; alone, it shows its help.
        p = add(sub, name, _show_help, help)
        p.set_defaults(func=_help_of(p))
        return p.add_subparsers(dest=f"{name}_command", metavar="COMMAND")

    p = add(sub, "demo", cmd_demo, "run one agent turn on the embedded stack, live")
    p.add_argument("--message", default=DEMO_MESSAGE, help="what user:you says")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the reply")

    p = add(sub, "up", cmd_up, "run workers and beat in the foreground until Ctrl-C")
    p.add_argument(
        "--workers", type=int, default=1, metavar="N", help="worker processes (default 1)"
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=None,
        metavar="N",
        help="turn threads per worker (default CHAZ_WORKER_CONCURRENCY)",
    )
    p.add_argument("--no-beat", action="store_true", help="do not run the periodic reconciler")
    p.add_argument("--loglevel", default="INFO", help="worker log level (logs go to files)")

    p = add(
        sub,
        "worker",
        cmd_worker,
        "exec a celery worker on chaz's queues (extra args go to celery)",
        allow_abbrev=False,  # an unknown option is celery's, never a prefix of ours
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=None,
        metavar="N",
        help="threads (default CHAZ_WORKER_CONCURRENCY)",
    )
    p.add_argument("--beat", action="store_true", help="also run beat in this worker")
    p.add_argument("--loglevel", default="INFO", help="celery log level (default INFO)")
    p.add_argument(
        "--dry-run", action="store_true", help="print the celery command instead of running it"
    )

    add(sub, "migrate", cmd_migrate, "bring the database schema up to date")
    add(sub, "config", cmd_config, "print the effective settings (secrets masked)")

    agents_sub = group("agents", "saved agents")
    p = add(agents_sub, "put", cmd_agents_put, "create or replace agents from JSON")
    p.add_argument("file", metavar="FILE", help="a JSON AgentSpec (or a list of them); - = stdin")
    add(agents_sub, "ls", cmd_agents_ls, "list agents")

    sessions_sub = group("sessions", "sessions: create, list, inspect")
    p = add(sessions_sub, "ls", cmd_sessions_ls, "list sessions, newest first")
    p.add_argument("--agent", help="only this agent's sessions")
    p.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    p = add(sessions_sub, "new", cmd_sessions_new, "create a session")
    p.add_argument("agent", metavar="AGENT", help="the agent id")
    p.add_argument("--name", help="a unique label (addressable like the id)")
    p = add(sessions_sub, "show", cmd_sessions_show, "a session, its entries and its queue")
    p.add_argument("session", metavar="SESSION", help="session id or name")
    p.add_argument("--last", type=int, default=None, metavar="N", help="only the last N entries")

    p = add(sub, "send", cmd_send, "post a message or directive into a session")
    p.add_argument("session", metavar="SESSION", help="session id or name")
    p.add_argument("text", metavar="TEXT", help="the content")
    p.add_argument("--sender", default="user:you", help="user:NAME, agent:NAME or system:NAME")
    p.add_argument(
        "--type",
        choices=[EntryType.MESSAGE.value, EntryType.DIRECTIVE.value],
        default=EntryType.MESSAGE.value,
        help="entry type (default message)",
    )
    p.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="a repeated key returns the first entry instead of a new one",
    )
    p.add_argument("--wait", action="store_true", help="wait for and print the reply")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds --wait waits (default 60)")

    p = add(sub, "tail", cmd_tail, "print a session's entries live until Ctrl-C")
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

    jobs_sub = group("jobs", "jobs (admitted turns): list, inspect, cancel")
    p = add(jobs_sub, "ls", cmd_jobs_ls, "list jobs, oldest first")
    p.add_argument("--session", help="only this session's jobs (id or name)")
    p.add_argument("--status", choices=[s.value for s in JobStatus], help="only jobs in this state")
    p.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    p = add(jobs_sub, "show", cmd_jobs_show, "one job")
    p.add_argument("job", metavar="ID", help="the job (execution) id")
    p = add(jobs_sub, "cancel", cmd_jobs_cancel, "cancel a job (execution.cancel)")
    p.add_argument("job", metavar="ID", help="the job (execution) id")
    p.add_argument(
        "--expected-version",
        type=int,
        metavar="V",
        help="refuse (conflict.version) unless the job is at this version",
    )
    p.add_argument(
        "--command-id", metavar="C", help="idempotency key: a repeated id returns the first outcome"
    )
    p.add_argument("--reason", default="", help="why; recorded with the cancellation")
    return parser


# --------------------------------------------------------------------------- entry points


def exit_code(exc: ChazError) -> int:
    """2 for a request that can never succeed as written, 1 for other failures."""
    return EXIT_USAGE if isinstance(exc, ValidationError | NotFound | ConfigError) else EXIT_FAILURE


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra and args.command != "worker":
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:
        # argparse exits on --help (0) and on usage errors (2); run() returns instead.
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    args.extra = extra
    out = Output(json_mode=bool(args.json))
    if not hasattr(args, "func"):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    ctx = Context(args, out)
    try:
        return int(args.func(ctx))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except ChazError as exc:
        out.error(exc)
        return exit_code(exc)
    except pydantic.ValidationError as exc:
        # Input that reached a model unchecked (a malformed id, a bad limit).
        err = ValidationError(_pydantic_message(exc))
        out.error(err)
        return exit_code(err)
    except (redis.RedisError, sqlalchemy.exc.OperationalError) as exc:
        # An unreachable server is the environment's fault, not a bug: no traceback.
        busy = BackendUnavailable(f"{type(exc).__name__}: {exc}".splitlines()[0])
        out.error(busy)
        return exit_code(busy)
    except BrokenPipeError:
        # `chaz tail S | head`: the reader left. Point stdout at /dev/null so
        # the interpreter's final flush does not complain a second time.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        # A file or directory chaz needs (CHAZ_HOME, an agent file) is unusable.
        failure = ChazError(str(exc))
        out.error(failure)
        return exit_code(failure)
    finally:
        # Closing connections must not hide the command's own outcome.
        with suppress(Exception):
            ctx.close()


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
