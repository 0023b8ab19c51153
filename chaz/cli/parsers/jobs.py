"""The arguments of ``chaz jobs``."""

from __future__ import annotations

from chaz.cli.parsers import Subcommands, command

#: The values of chaz.domain.jobs.JobStatus, spelled out so that the parser
#: needs no pydantic (tests/acceptance/test_cli_startup.py keeps them equal to
#: the enum).
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


def register(commands: Subcommands) -> None:
    """Add ``chaz jobs`` to ``commands``."""
    jobs_sub = commands.group("jobs", "jobs (admitted turns): list, inspect, read, cancel")
    p = jobs_sub.add("ls", command("cmd_jobs_ls", "chaz.cli.jobs"), "list jobs, oldest first")
    p.add_argument("--session", help="only this session's jobs (id or name)")
    p.add_argument("--status", choices=JOB_STATUSES, help="only jobs in this state")
    p.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    p = jobs_sub.add("show", command("cmd_jobs_show", "chaz.cli.jobs"), "one job")
    p.add_argument("job", metavar="ID", help="the job (execution) id")
    p = jobs_sub.add(
        "usage",
        command("cmd_jobs_usage", "chaz.cli.jobs"),
        "tokens, cost and time used: the project's, a session's or a tree's",
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--session", help="only this session's jobs (id or name)")
    which.add_argument("--tree", metavar="TREE_ID", help="only the jobs of this session tree")
    p = jobs_sub.add(
        "output", command("cmd_jobs_output", "chaz.cli.jobs"), "a job's result (capped, or --full)"
    )
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
    p = jobs_sub.add(
        "cancel", command("cmd_jobs_cancel", "chaz.cli.jobs"), "cancel a job (execution.cancel)"
    )
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
