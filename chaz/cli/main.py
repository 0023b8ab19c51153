"""The argument parser and the entry points of the ``chaz`` command.

This module loads nothing heavy: ``chaz --help`` and ``chaz --version`` answer
from argparse alone, and a command's module (with SQLAlchemy, Redis, rich,
Celery behind it) is imported only when that command runs. The error handler
recognises third-party exceptions only through modules already loaded: an
exception of a library that was never imported cannot have been raised.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from chaz import __version__
from chaz.cli.exits import (
    EXIT_BROKEN_PIPE,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
)
from chaz.errors import (
    BackendUnavailable,
    ChazError,
    ConfigError,
    NotFound,
    ValidationError,
)

if TYPE_CHECKING:
    from chaz.cli.context import Context

DEMO_MESSAGE = "Hello chaz, please count the words in this message."
#: The values of chaz.domain.entries.EntryType a producer may post, and of
#: chaz.domain.jobs.JobStatus, spelled out so that the parser needs no pydantic
#: (tests/unit/test_cli_parser.py keeps them equal to the enums).
POSTABLE_TYPES = ("message", "directive")
JOB_STATUSES = (
    "queued",
    "running",
    "stopping",
    "waiting_approval",
    "succeeded",
    "failed",
    "cancelled",
    "interrupted",
)


def _command(name: str, module_name: str = "chaz.cli.commands") -> Callable[[Context], int]:
    """The command ``MODULE.NAME``, imported when it runs."""

    def run_command(ctx: Context) -> int:
        module = importlib.import_module(module_name)
        func: Callable[[Context], int] = getattr(module, name)
        return func(ctx)

    run_command.__name__ = name
    return run_command


def _port(text: str) -> int:
    """A TCP port number, for argparse."""
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}")
    return port


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
    # Who the command acts as (docs/security.md), before or after the subcommand.
    identity = argparse.ArgumentParser(add_help=False)
    _identity_options(identity, argparse.SUPPRESS)

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
    _identity_options(parser, None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(
        parent: Any,
        name: str,
        func: Callable[[Context], int],
        help: str,
        parents: Sequence[argparse.ArgumentParser] = (common, identity),
        **kw: Any,
    ) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = parent.add_parser(
            name, help=help, description=help, parents=list(parents), **kw
        )
        p.set_defaults(func=func)
        return p

    def group(name: str, help: str) -> Any:
        # A command with subcommands; alone, it shows its help.
        p = add(sub, name, _show_help, help)
        p.set_defaults(func=_help_of(p))
        return p.add_subparsers(dest=f"{name}_command", metavar="COMMAND")

    p = add(sub, "demo", _command("cmd_demo"), "run one agent turn on the embedded stack, live")
    p.add_argument("--message", default=DEMO_MESSAGE, help="what user:you says")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the reply")

    p = add(sub, "up", _command("cmd_up"), "run workers and beat in the foreground until Ctrl-C")
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
    p.add_argument(
        "--no-beat",
        action="store_true",
        help="do not run beat (the reconciler, retention, schedules)",
    )
    p.add_argument("--loglevel", default="INFO", help="worker log level (logs go to files)")

    p = add(
        sub,
        "worker",
        _command("cmd_worker"),
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
        "--metrics-port",
        type=_port,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics on this port (default CHAZ_METRICS_PORT; e.g. 9809)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print the celery command instead of running it"
    )

    p = add(
        sub,
        "exporter",
        _command("cmd_exporter", "chaz.cli.exporter"),
        "serve fleet-wide Prometheus metrics (queues, jobs, deliveries, refusals)",
    )
    p.add_argument(
        "--port", type=_port, default=9808, metavar="PORT", help="listen port (default 9808)"
    )
    p.add_argument(
        "--addr", default="0.0.0.0", metavar="ADDR", help="listen address (default 0.0.0.0)"
    )

    probe_sub = group("probe", "cheap health checks for a platform's probes (exit 0 = healthy)")
    p = add(
        probe_sub,
        "worker",
        _command("cmd_probe_worker", "chaz.cli.probe"),
        "is this machine's worker ready for turns (or, with --live, still working)?",
    )
    p.add_argument(
        "--live",
        action="store_true",
        help="check only that the worker's event loop still beats (no Redis); a worker "
        "in warm shutdown is live",
    )
    p.add_argument(
        "--node", metavar="NAME@HOST", help="this worker only (default: every worker of CHAZ_HOME)"
    )
    p.add_argument(
        "--max-age",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="with --live: the oldest beat that counts as live (default 60)",
    )

    add(sub, "migrate", _command("cmd_migrate"), "bring the database schema up to date")
    doctor = _command("cmd_doctor", "chaz.cli.doctor")
    add(sub, "doctor", doctor, "check settings, database, Redis, workers and beat; say what to fix")
    config = _command("cmd_config", "chaz.cli.info")
    add(sub, "config", config, "print the effective settings (secrets masked)")

    agents_sub = group("agents", "saved agents")
    p = add(agents_sub, "put", _command("cmd_agents_put"), "create or replace agents from JSON")
    p.add_argument("file", metavar="FILE", help="a JSON AgentSpec (or a list of them); - = stdin")
    add(agents_sub, "ls", _command("cmd_agents_ls"), "list agents")

    sessions_sub = group("sessions", "sessions: create, list, inspect")
    p = add(sessions_sub, "ls", _command("cmd_sessions_ls"), "list sessions, newest first")
    p.add_argument("--agent", help="only this agent's sessions")
    p.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    p.add_argument("--tree", metavar="SESSION", help="only the tree of this session (id or name)")
    p.add_argument("--archived", action="store_true", help="archived sessions (hidden otherwise)")
    p = add(
        sessions_sub,
        "archive",
        _command("cmd_sessions_archive"),
        "archive a session: hidden from listings, no new deliveries; its work goes on",
    )
    p.add_argument("session", metavar="SESSION", help="session id, SID:HEAD or name")
    p.add_argument("--reason", default="", help="why; kept with the archive")
    p = add(
        sessions_sub,
        "rename",
        _command("cmd_sessions_rename"),
        "name a session (automatic naming never overwrites it)",
    )
    p.add_argument("session", metavar="SESSION", help="session id or name")
    p.add_argument("name", metavar="NAME", help="the new unique name")
    p = add(
        sessions_sub,
        "compact",
        _command("cmd_sessions_compact"),
        "write a Summary of the session by its own model; later turns start from it",
    )
    p.add_argument("session", metavar="SESSION", help="session id or name")
    p.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for a running turn (60)"
    )
    p = add(sessions_sub, "new", _command("cmd_sessions_new"), "create a session")
    p.add_argument("agent", metavar="AGENT", help="the agent id")
    p.add_argument("--name", help="a unique label (addressable like the id)")
    p = add(
        sessions_sub, "show", _command("cmd_sessions_show"), "a session, its entries and its queue"
    )
    p.add_argument("session", metavar="SESSION", help="session id or name")
    p.add_argument("--last", type=int, default=None, metavar="N", help="only the last N entries")

    p = add(
        sessions_sub,
        "fork",
        _command("cmd_sessions_fork"),
        "a new session whose history reads through SESSION up to entry --at",
    )
    p.add_argument("session", metavar="SESSION", help="session id or name to fork")
    p.add_argument("--at", type=int, required=True, metavar="SEQ", help="the entry to fork at")
    p.add_argument("--agent", help="the agent the fork runs (default: the source's)")
    p.add_argument("--name", help="a unique label (default: an automatic name)")

    rooms_sub = group("rooms", "rooms: sessions of several agents, woken by @mention")
    p = add(rooms_sub, "new", _command("cmd_rooms_new"), "create a room of HOST and its members")
    p.add_argument("host", metavar="HOST", help="the host agent (wakes when nobody is mentioned)")
    p.add_argument(
        "--member", action="append", default=[], metavar="AGENT", help="a member (repeatable)"
    )
    p.add_argument("--name", help="a unique label (addressable like the id)")
    p.add_argument(
        "--burst", type=int, default=None, metavar="N", help="the room's burst budget (default 6)"
    )
    p = add(rooms_sub, "ls", _command("cmd_rooms_ls"), "list rooms, newest first")
    p.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    p.add_argument("--archived", action="store_true", help="archived rooms (hidden otherwise)")
    for verb, text in (("add", "add a member to a room"), ("rm", "remove a member from a room")):
        p = add(rooms_sub, verb, _command(f"cmd_rooms_{verb}"), text)
        p.add_argument("room", metavar="ROOM", help="room id or name")
        p.add_argument("agent", metavar="AGENT", help="the agent id")

    # -- deliveries (docs/collaboration.md#deliveries, docs/sessions.md) ------
    def dlv(name: str) -> Callable[[Context], int]:
        return _command(f"cmd_deliveries_{name}", "chaz.cli.deliveries")

    deliveries_sub = group(
        "deliveries", "hand-offs between sessions: list, inspect, send a request"
    )
    p = add(
        deliveries_sub,
        "ls",
        dlv("ls"),
        "hand-offs into and out of a session (spawns, messages, follow-ups, requests)",
    )
    p.add_argument("session", metavar="SESSION", help="session id or name")
    p.add_argument(
        "--direction", choices=("in", "out", "both"), default="both", help="default both"
    )
    p.add_argument(
        "--status",
        choices=("accepted", "delivering", "consumed", "failed"),
        default=None,
        help="only deliveries in this lifecycle status",
    )
    p.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    p = add(deliveries_sub, "get", dlv("get"), "one delivery, its status and its result")
    p.add_argument("delivery", metavar="ID", help="delivery (request) id")
    p = add(deliveries_sub, "send", dlv("send"), "send a request to a session: its own turn there")
    p.add_argument("target", metavar="SESSION_ID", help="the target's session id (not a name)")
    p.add_argument("text", metavar="TEXT", help="the request")
    p.add_argument("--reply", choices=("none", "completion"), default="none", help="default none")
    p.add_argument(
        "--from", dest="from_session", metavar="SESSION_ID", help="where a result comes back"
    )
    p.add_argument(
        "--sender", default=None, help="user:NAME or system:NAME (default: the acting principal)"
    )

    p = add(sub, "send", _command("cmd_send"), "post a message or directive into a session")
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

    p = add(sub, "tail", _command("cmd_tail"), "print a session's entries live until Ctrl-C")
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

    p = add(
        sub,
        "events",
        _command("cmd_events"),
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

    # -- schedules (docs/schedules.md) ------------------------------------------
    def sched(name: str) -> Callable[[Context], int]:
        return _command(f"cmd_schedules_{name}", "chaz.cli.schedules")

    schedules_sub = group("schedules", "agent-owned schedules: list, add, pause, resume, ledger")
    p = add(schedules_sub, "ls", sched("ls"), "list schedules, oldest first")
    p.add_argument("--agent", help="only this agent's schedules")
    p = add(schedules_sub, "add", sched("add"), "schedule a prompt for an agent")
    p.add_argument("agent", metavar="AGENT", help="the owner agent")
    p.add_argument("prompt", metavar="PROMPT", help="each fire's input")
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", help="five-field cron expression, e.g. '30 2 * * *'")
    when.add_argument("--every", type=int, metavar="SECONDS", help="an interval")
    when.add_argument("--at", metavar="ISO", help="once, at this datetime (with an offset)")
    p.add_argument("--timezone", default="UTC", help="IANA zone of --cron (default UTC)")
    p.add_argument("--session", dest="session_id", help="pinned session (default: fresh ones)")
    p.add_argument("--name", help="a name for people")
    p.add_argument("--overlap", default="skip", choices=["skip", "queue"], help="busy session")
    p.add_argument(
        "--missed", default="catch_up_once", choices=["skip", "catch_up_once"], help="downtime"
    )
    p.add_argument("--max-fires", type=int, dest="max_fires", help="stop after N fires")
    p.add_argument("--expires-at", dest="expires_at", metavar="ISO", help="no slots after")
    for name, help in (
        ("rm", "delete a schedule and its ledger"),
        ("pause", "stop a schedule firing"),
        ("resume", "fire again from the next slot, failures cleared"),
    ):
        p = add(schedules_sub, name, sched(name), help)
        p.add_argument("schedule", metavar="SCHEDULE", help="schedule id")
    p = add(schedules_sub, "fires", sched("fires"), "a schedule's ledger, newest slot first")
    p.add_argument("schedule", metavar="SCHEDULE", help="schedule id")
    p.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")

    # -- approvals (docs/approvals.md) ------------------------------------------
    def appr(name: str) -> Callable[[Context], int]:
        return _command(f"cmd_approvals_{name}", "chaz.cli.approvals")

    approvals_sub = group("approvals", "tool calls waiting for a decision: list, decide")
    p = add(approvals_sub, "ls", appr("ls"), "requests waiting for a decision, oldest first")
    p.add_argument("--session", help="only this session's requests")
    p = add(approvals_sub, "decide", appr("decide"), "approve or deny a request")
    p.add_argument("request", metavar="ID", help="request id")
    p.add_argument(
        "decision",
        choices=["approve", "deny", "approve_all"],
        help="the decision (approve_all: this call and the rest of its turn's gated calls)",
    )
    p.add_argument("--by", default=None, help="who decides (default: the principal acting)")

    # -- API keys (docs/security.md#api-keys) -----------------------------------
    def key(name: str) -> Callable[[Context], int]:
        return _command(f"cmd_keys_{name}", "chaz.cli.keys")

    # Here --principal and --project are the key's: the global ones (given
    # before the subcommand) still name who acts.
    keys_sub = group("keys", "API keys for clients that are not operators: create, revoke, list")
    p = add(
        keys_sub,
        "create",
        key("create"),
        "create an API key; prints it once",
        parents=[common],
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
    p = add(keys_sub, "revoke", key("revoke"), "revoke an API key", parents=[common])
    p.add_argument("key_id", metavar="KEY_ID", help="the key's id (see `chaz keys ls`)")
    p = add(keys_sub, "ls", key("ls"), "list API keys (never their secrets)", parents=[common])
    p.add_argument("--project", dest="project_of_key", metavar="X", help="only this project's")

    # -- search (docs/sessions.md#session_search) ----------------------------------------
    p = add(
        sub,
        "search",
        _command("cmd_search", "chaz.cli.search"),
        "find sessions by their messages, name or description",
    )
    p.add_argument("query", metavar="QUERY", help='words, identifiers or a "quoted phrase"')
    p.add_argument("--agent", help="only this agent's sessions")
    p.add_argument("--limit", type=int, default=10, help="at most this many sessions (1-50)")

    # -- projects (docs/security.md#project-quotas) ------------------------------
    def proj(name: str) -> Callable[[Context], int]:
        return _command(f"cmd_projects_{name}", "chaz.cli.projects")

    projects_sub = group("projects", "projects' quotas: live turns, turns ever admitted")
    add(projects_sub, "ls", proj("ls"), "list projects, their limits and their use")
    p = add(projects_sub, "set", proj("set"), "set a project's limits (others keep theirs)")
    p.add_argument("project", metavar="NAME", help="the project")
    limit_help = "a number, -1 or 'unlimited' (no limit), or 'default'"
    p.add_argument("--max-live", dest="max_live", metavar="N", help=f"live turns: {limit_help}")
    p.add_argument("--max-jobs", dest="max_jobs", metavar="N", help=f"turns ever: {limit_help}")

    jobs_sub = group("jobs", "jobs (admitted turns): list, inspect, read, cancel")
    p = add(jobs_sub, "ls", _command("cmd_jobs_ls"), "list jobs, oldest first")
    p.add_argument("--session", help="only this session's jobs (id or name)")
    p.add_argument("--status", choices=JOB_STATUSES, help="only jobs in this state")
    p.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    p = add(jobs_sub, "show", _command("cmd_jobs_show"), "one job")
    p.add_argument("job", metavar="ID", help="the job (execution) id")
    p = add(jobs_sub, "output", _command("cmd_jobs_output"), "a job's result (capped, or --full)")
    p.add_argument("job", metavar="ID", help="the job (execution) id")
    p.add_argument(
        "--full", action="store_true", help="the whole result, not its 30,000-character excerpt"
    )
    p.add_argument(
        "--no-block",
        dest="block",
        action="store_false",
        help="answer at once instead of waiting for the job to finish",
    )
    p.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for the job (default 30)"
    )
    p = add(jobs_sub, "cancel", _command("cmd_jobs_cancel"), "cancel a job (execution.cancel)")
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


def _identity_options(parser: argparse.ArgumentParser, default: Any) -> None:
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
    """The chaz error to report for an exception that escaped a command.

    Libraries are looked up in ``sys.modules``, never imported here: one that
    is not loaded cannot have raised.
    """
    pydantic = sys.modules.get("pydantic")
    if pydantic is not None and isinstance(exc, pydantic.ValidationError):
        # Input that reached a model unchecked (a malformed id, a bad limit).
        from chaz.cli.context import pydantic_message

        return ValidationError(pydantic_message(exc))
    redis = sys.modules.get("redis")
    sa_exc = sys.modules.get("sqlalchemy.exc")
    if (redis is not None and isinstance(exc, redis.RedisError)) or (
        sa_exc is not None and isinstance(exc, sa_exc.OperationalError)
    ):
        # An unreachable server is the environment's fault, not a bug: no traceback.
        return BackendUnavailable(f"{type(exc).__name__}: {exc}".splitlines()[0])
    if sa_exc is not None and isinstance(exc, sa_exc.ArgumentError):
        # SQLAlchemy's word for a database URL it cannot parse or load.
        return ConfigError(f"invalid database URL: {exc}".splitlines()[0])
    if isinstance(exc, OSError):
        # A file or directory chaz needs (CHAZ_HOME, an agent file) is unusable.
        return ChazError(str(exc))
    # A bug: still one line with a code, never a traceback on a user's screen.
    return ChazError(f"unexpected {type(exc).__name__}: {exc}".splitlines()[0])


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
