"""Collaboration tools: ``spawn_agent``, ``list_jobs`` and ``job_output``.

Their contracts: docs/contracts.md#spawn-agent, #list-jobs and #job-output.

``spawn_agent`` registers a child session in the caller's tree and writes the
task there as a Directive; the child's turn is admitted and runs like any
other. In the foreground the calling turn runs the child's turn inline (in its
own thread, lending the child its live slot), so a chain of spawns completes
even with a single worker thread.

``list_jobs`` and ``job_output`` only observe: they spend no delegation
allowance and stay available when topology limits are exhausted.
"""

from __future__ import annotations

import json
import time

from pydantic import BaseModel, ConfigDict, Field

from chaz.domain.entries import EntryType, NewEntry, agent_sender
from chaz.domain.jobs import JobStatus
from chaz.domain.validation import SafeText, check_content, check_session_name
from chaz.errors import (
    ConfigError,
    DepthExceeded,
    FanoutExceeded,
    MessagesExceeded,
    ToolError,
)
from chaz.runtime.registry import Delegation, Tool, ToolContext
from chaz.services import Services
from chaz.store.repo import JobFields


class SpawnArgs(BaseModel):
    """Arguments of ``spawn_agent``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    agent_id: SafeText = Field(description="The saved agent to run the task.")
    task: SafeText = Field(min_length=1, description="What the child agent should do.")
    run_in_background: bool = Field(
        False,
        alias="async",
        description="Return the child's execution_id at once instead of waiting.",
    )
    name: SafeText | None = Field(
        None, max_length=255, description="A label for the child session."
    )
    timeout: float = Field(600, gt=0, le=3600, description="Seconds to wait in the foreground.")


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


def _services(ctx: ToolContext) -> Services:
    if ctx.services is None:
        raise ConfigError("this tool needs the runtime's services")
    return ctx.services


def _delegation(ctx: ToolContext) -> Delegation:
    if ctx.delegation is None:
        raise ConfigError("this tool needs the runtime's delegation port")
    return ctx.delegation


def spawn_agent(args: SpawnArgs, ctx: ToolContext) -> str:
    """Run ``task`` in a new child session of ``agent_id``."""
    svc = _services(ctx)
    delegation = _delegation(ctx)
    # The task becomes a Directive: the same rules as a producer's post.
    check_content(EntryType.DIRECTIVE, args.task, max_bytes=svc.settings.max_content_bytes)
    name = check_session_name(args.name) if args.name is not None else None
    child_spec = svc.store.get_agent(args.agent_id)
    depth, messages = _check_topology(svc, ctx)
    # Transitive narrowing: a child never gets a tool its parent lacks.
    tools = sorted(set(child_spec.tools) & ctx.allowed_tools)
    child = svc.store.create_session(
        args.agent_id,
        name=name,
        tools=tools,
        parent_job_id=ctx.job_id,
        tree_id=ctx.tree_id,
        call_depth=depth,
    )
    try:
        task = NewEntry(
            EntryType.DIRECTIVE,
            agent_sender(ctx.agent_id),
            args.task,
            metadata={"spawned_from_session": ctx.session_id, "parent_job_id": ctx.job_id},
            idempotency_key=f"spawn:{ctx.job_id}:{ctx.call_id}",
        )
        done = delegation.admit(
            child.id,
            task,
            job_fields=JobFields(
                caller_session_id=ctx.session_id,
                parent_job_id=ctx.job_id,
                call_depth=depth,
                message_count=messages,
            ),
        )
    except BaseException:
        # A refused admission leaves nothing behind, not even an empty child.
        svc.store.delete_empty_session(child.id)
        raise
    job = done.job
    assert job is not None, "a Directive always admits a job"
    if args.run_in_background:
        return json.dumps(
            {"execution_id": job.id, "session_id": child.id, "status": job.status.value}
        )
    # Run the child here rather than wait for a free worker thread: with one
    # thread per worker, waiting would deadlock. If a worker holds the child's
    # lane (running it, or just parking it for tree capacity), try again until
    # the child has finished, whoever ran it.
    deadline = time.monotonic() + args.timeout
    while True:
        delegation.run_inline(child.id, job.id)
        final = svc.store.get_job(job.id)
        if final.status.terminal:
            break
        if time.monotonic() >= deadline:
            final = delegation.wait(job.id, 0)  # raises Timeout with the state
        time.sleep(0.05)
    if final.status is JobStatus.SUCCEEDED:
        return final.result or ""
    reason = (final.error or {}).get("message", final.status.value)
    raise ToolError(
        f"{args.agent_id} ({final.status.value}): {reason}",
        execution_id=job.id,
        status=final.status.value,
    )


def _check_topology(svc: Services, ctx: ToolContext) -> tuple[int, int]:
    """Depth, message depth and fan-out of a new child (docs/contracts.md#topology); 0 disables."""
    depth = ctx.call_depth + 1
    limit = ctx.limits.topology("max_call_depth")
    if limit and depth > limit:
        raise DepthExceeded(
            f"spawning would nest {depth} deep; {ctx.agent_id} allows {limit}",
            depth=depth,
            max_call_depth=limit,
        )
    messages = ctx.message_count + 1
    limit = ctx.limits.topology("max_messages")
    if limit and messages > limit:
        raise MessagesExceeded(
            f"this lineage has used its {limit} messages",
            message_count=messages,
            max_messages=limit,
        )
    limit = ctx.limits.topology("max_spawn_fanout")
    if limit and svc.store.count_children(ctx.job_id) >= limit:
        raise FanoutExceeded(
            f"this turn has already created {limit} sub-agents", max_spawn_fanout=limit
        )
    return depth, messages


def list_jobs(args: ListJobsArgs, ctx: ToolContext) -> str:
    """Jobs that run in this session or that this session started."""
    svc = _services(ctx)
    jobs = svc.store.list_jobs(
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
    return json.dumps(
        _delegation(ctx).output(
            args.job_id, ctx.session_id, block=args.block, timeout=args.timeout, full=args.full
        )
    )


TOOLS = [
    Tool(
        "spawn_agent",
        "Run a task in a new sub-agent session. Foreground (default) returns the "
        "sub-agent's final answer; async returns its execution_id at once.",
        SpawnArgs,
        spawn_agent,
    ),
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
