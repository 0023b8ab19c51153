"""Execution observation tools: ``list_jobs`` and ``job_output``.

Their contracts: docs/contracts.md#list-jobs and #job-output. They only
observe: they spend no delegation allowance and stay available when
topology limits are exhausted. The tools that hand work to other sessions
are in :mod:`chaz.tools.agents`.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field

from chaz.domain.jobs import JobStatus
from chaz.domain.principals import Grant
from chaz.domain.validation import SafeText
from chaz.runtime.registry import Tool, ToolContext


class ListJobsArgs(BaseModel):
    """Arguments of ``list_jobs``."""

    model_config = ConfigDict(extra="forbid")

    status: JobStatus | None = None
    limit: int = Field(20, ge=1, le=200)


class JobOutputArgs(BaseModel):
    """Arguments of ``job_output``."""

    model_config = ConfigDict(extra="forbid")

    job_id: SafeText
    block: bool = True
    timeout: float = Field(30, ge=0, le=600)
    full: bool = Field(
        False,
        description="Return the whole result, not its capped excerpt (while its artifact is kept).",
    )


def list_jobs(args: ListJobsArgs, ctx: ToolContext) -> str:
    """Jobs that run in this session or that this session started (of its project)."""
    ctx.require(Grant.HISTORY_READ, "list jobs")
    svc = ctx.need_services()
    jobs = svc.store.list_jobs(
        project=ctx.principal.project,
        related_to_session=ctx.session_id,
        statuses=[args.status] if args.status else None,
        limit=args.limit,
        newest_first=True,
    )
    return json.dumps(
        [
            {
                "execution_id": j.id,
                "session_id": j.session_id,
                "status": j.status.value,
                "parent_job_id": j.parent_job_id,
                "created_at": j.created_at.isoformat(),
            }
            for j in jobs
        ]
    )


def job_output(args: JobOutputArgs, ctx: ToolContext) -> str:
    """A job's state and result, if this session may read it."""
    ctx.require(Grant.HISTORY_READ, "read a job's output")
    return json.dumps(
        ctx.need_delegation().output(
            args.job_id, ctx.session_id, block=args.block, timeout=args.timeout, full=args.full
        )
    )


TOOLS = [
    Tool(
        "list_jobs",
        "List the jobs (executions) of this session and those it started.",
        ListJobsArgs,
        list_jobs,
    ),
    Tool(
        "job_output",
        "Read a job's status and result; blocks until it finishes unless block=false. "
        "A result over 30,000 characters is cut to head and tail; full=true reads it whole.",
        JobOutputArgs,
        job_output,
    ),
]
