"""``chaz jobs``: list, inspect, read and cancel admitted turns."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from chaz.cli.context import Context
from chaz.cli.output import EXIT_OK

if TYPE_CHECKING:
    from chaz.domain.jobs import Job


def _job_rows(jobs: Sequence[Job]) -> list[list[Any]]:
    return [
        [
            j.id,
            j.session_id,
            j.ordinal,
            j.status.value,
            j.version,
            j.attempts,
            j.created_at,
            j.finished_at,
        ]
        for j in jobs
    ]


def cmd_jobs_ls(ctx: Context) -> int:
    """List jobs, optionally of one session or in one state."""
    args = ctx.args
    jobs = ctx.read(
        lambda direct: direct.jobs(args.session, args.status, args.limit, newest_first=True),
        lambda client: client.jobs.list(
            session_id=args.session, status=args.status, limit=args.limit, newest_first=True
        ),
    )
    if ctx.out.json_mode:
        ctx.out.json([j.model_dump(mode="json") for j in jobs])
        return EXIT_OK
    ctx.out.table(
        "jobs",
        ["ID", "SESSION", "ORDINAL", "STATUS", "VERSION", "ATTEMPTS", "CREATED", "FINISHED"],
        _job_rows(jobs),
    )
    return EXIT_OK


def cmd_jobs_show(ctx: Context) -> int:
    """Every field of one job."""
    job = ctx.client.jobs.get(ctx.args.job)
    if ctx.out.json_mode:
        ctx.out.json(job.model_dump(mode="json"))
    else:
        ctx.out.fields(f"job {job.id}", list(job.model_dump().items()))
    return EXIT_OK


def cmd_jobs_usage(ctx: Context) -> int:
    """What jobs used, summed: the project's, one session's or one tree's."""
    args = ctx.args
    totals = ctx.client.jobs.totals(session_id=args.session, tree_id=args.tree)
    pairs = [
        ("input_tokens", totals.input_tokens),
        ("output_tokens", totals.output_tokens),
        ("tokens", totals.tokens),
        ("cost", totals.cost),
        ("runtime_seconds", totals.runtime_seconds),
        ("jobs", totals.jobs),
    ]
    if ctx.out.json_mode:
        ctx.out.json(dict(pairs))
    else:
        scope = (
            f"session {args.session}"
            if args.session
            else f"tree {args.tree}"
            if args.tree
            else "project"
        )
        ctx.out.fields(f"usage of {scope}", pairs)
    return EXIT_OK


def cmd_jobs_output(ctx: Context) -> int:
    """A job's result: the text alone on stdout, what it is on stderr (or all as JSON)."""
    args = ctx.args
    out = ctx.client.jobs.output(args.job, block=args.block, timeout=args.timeout, full=args.full)
    if ctx.out.json_mode:
        ctx.out.json(out)
        return EXIT_OK
    result = out["result"]
    if result is None:
        ctx.out.fields(f"job {out['execution_id']}", list(out.items()))
        return EXIT_OK
    # The text as it is, so that `> file` keeps it byte for byte.
    sys.stdout.write(result)
    sys.stdout.flush()
    note = f"job {out['execution_id']} {out['status']}: {len(result)} characters"
    artifact = out["artifact"]
    if out["truncated"]:
        note += ", cut to head and tail"
        if artifact is not None:
            note += f" of {artifact['byte_length']} bytes (--full prints them all)"
    elif artifact is not None:
        note += f", {artifact['byte_length']} bytes, sha256 {artifact['sha256']}"
    ctx.out.note(note)
    return EXIT_OK


def cmd_jobs_cancel(ctx: Context) -> int:
    """The versioned ``execution.cancel`` command; prints its outcome."""
    args = ctx.args
    outcome = ctx.client.jobs.cancel(
        args.job,
        expected_version=args.expected_version,
        command_id=args.command_id,
        reason=args.reason,
    )
    if ctx.out.json_mode:
        ctx.out.json(outcome)
    else:
        ctx.out.fields("execution.cancel", list(outcome.items()))
    return EXIT_OK
