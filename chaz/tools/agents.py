"""The tools that hand work to other sessions: ``agent``, ``spawn_agent``, ``send_message``.

Their contracts: docs/collaboration.md. Each is one delivery
(:mod:`chaz.usecases.deliveries`, reached through the delegation port): a new
session and its first job (``agent`` without ``to``, ``spawn_agent``), a
tracked job in an existing session (``agent(to=...)``), or a message
(``send_message``). Arguments come from a model: every one is checked, and a
refused call writes nothing (docs/contracts.md#invariant-7).
"""

from __future__ import annotations

import json
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from chaz.access import branches, visibility
from chaz.domain.addresses import StartMode, parse_start_from
from chaz.domain.deliveries import Delivered, DeliveryKind, NewBranch, Reply
from chaz.domain.entries import EntryType
from chaz.domain.jobs import Job, JobStatus
from chaz.domain.principals import Grant
from chaz.domain.results import excerpt
from chaz.domain.sessions import Session
from chaz.domain.validation import SafeText, check_content, check_session_name
from chaz.errors import (
    Cancelled,
    ToolError,
    ValidationError,
    WaitCycle,
)
from chaz.runtime.registry import Tool, ToolContext
from chaz.services import Services
from chaz.tools.handoff import check_creation, check_messages, sender_of, stage1_names


class AgentArgs(BaseModel):
    """Arguments of ``agent`` (docs/contracts.md#spawn-agent)."""

    model_config = ConfigDict(extra="forbid")

    prompt: SafeText = Field(min_length=1, description="What the agent should do.")
    description: SafeText = Field(
        "", max_length=255, description="A short label that names a new session."
    )
    agent_id: SafeText = Field(
        "", description="The saved agent whose configuration runs it (default: yours)."
    )
    start_from: SafeText = Field(
        "clean",
        description="'clean' (empty history), 'inherit' (your conversation so far), or "
        "'SID:SEQ' (fork at that exact entry of a session you may read).",
    )
    run_in_background: bool = Field(
        False,
        description="Return {execution_id, session_id} at once; the result comes back to "
        "you as a follow-up when it finishes.",
    )
    to: SafeText = Field(
        "",
        description="Continue an existing session instead (an id, 'SID:HEAD' or its name); "
        "only with start_from='clean'.",
    )
    archive_when_done: bool = Field(
        False, description="Archive the new session once its job ends (not with to)."
    )
    timeout: float = Field(600, gt=0, le=3600, description="Seconds to wait in the foreground.")


class SpawnArgs(BaseModel):
    """Arguments of ``spawn_agent`` (docs/contracts.md#spawn-agent): ``agent(start_from="clean")``
    by another name."""

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


class SendMessageArgs(BaseModel):
    """Arguments of ``send_message`` (docs/contracts.md#inbox)."""

    model_config = ConfigDict(extra="forbid")

    message: SafeText = Field(min_length=1, description="The text to deliver.")
    to: SafeText = Field(description="The session: an id, 'SID:HEAD' or its name.")
    agent_id: SafeText = Field(
        "main",
        description="The agent you expect there; 'main' accepts whichever agent it runs.",
    )


# -- agent ------------------------------------------------------------------------


def agent(args: AgentArgs, ctx: ToolContext) -> str:
    """Create (or fork) a session and run ``prompt`` there, or continue one with ``to``."""
    svc = ctx.need_services()
    if args.to:
        ctx.require(Grant.MESSAGE_SEND, "message another session")
    else:
        ctx.require(Grant.AGENT_SPAWN, "start a sub-agent")
    check_content(EntryType.DIRECTIVE, args.prompt, max_bytes=svc.settings.max_content_bytes)
    if args.to:
        return _continue(args, ctx, svc)
    start = parse_start_from(args.start_from)
    fork: tuple[str, int] | None = None
    kind = DeliveryKind.SPAWN
    if start.mode is StartMode.INHERIT:
        fork = (ctx.session_id, svc.store.get_session(ctx.session_id).last_seq)
    elif start.mode is StartMode.FORK:
        assert start.session_ref is not None
        # A historical fork reads another session's history.
        ctx.require(Grant.HISTORY_READ, "fork another session's history")
        fork = _fork_point(svc, ctx, start.session_ref, start.seq)
        kind = DeliveryKind.FORK
    return _create(
        ctx,
        svc,
        agent_id=args.agent_id or ctx.agent_id,
        prompt=args.prompt,
        label=args.description,
        kind=kind,
        fork=fork,
        background=args.run_in_background,
        archive_when_done=args.archive_when_done,
        timeout=args.timeout,
    )


def spawn_agent(args: SpawnArgs, ctx: ToolContext) -> str:
    """Run ``task`` in a new session of ``agent_id``: ``agent`` with a clean start."""
    svc = ctx.need_services()
    ctx.require(Grant.AGENT_SPAWN, "start a sub-agent")
    check_content(EntryType.DIRECTIVE, args.task, max_bytes=svc.settings.max_content_bytes)
    label = check_session_name(args.name) if args.name is not None else ""
    return _create(
        ctx,
        svc,
        agent_id=args.agent_id,
        prompt=args.task,
        label=label,
        kind=DeliveryKind.SPAWN,
        fork=None,
        background=args.run_in_background,
        archive_when_done=False,
        timeout=args.timeout,
    )


def _create(
    ctx: ToolContext,
    svc: Services,
    *,
    agent_id: str,
    prompt: str,
    label: str,
    kind: DeliveryKind,
    fork: tuple[str, int] | None,
    background: bool,
    archive_when_done: bool,
    timeout: float,
) -> str:
    spec = svc.store.get_agent(agent_id)
    generation = check_creation(svc, ctx)
    # Transitive narrowing: a child never gets a tool its caller lacks,
    # whichever configuration it runs (docs/contracts.md#authority).
    tools = sorted(set(spec.tools) & ctx.allowed_tools)
    branch = NewBranch(
        agent_id=agent_id,
        prompt=prompt,
        kind=kind,
        tools=tools,
        fork=fork,
        names=stage1_names(label, prompt),
        generation=generation,
        reply=Reply.FOLLOWUP if background else Reply.NONE,
        archive_when_done=archive_when_done,
    )
    done = ctx.need_delegation().spawn(sender_of(svc, ctx, kind), branch)
    return _answer(ctx, done, background, timeout)


def _continue(args: AgentArgs, ctx: ToolContext, svc: Services) -> str:
    """``agent(to=...)``: a tracked job in an existing session."""
    start = parse_start_from(args.start_from)
    if start.mode is not StartMode.CLEAN:
        raise ValidationError(
            "to continues an existing session; start_from='inherit' or 'SID:SEQ' creates a "
            "new one: use one or the other",
            field="start_from",
        )
    if args.archive_when_done:
        raise ValidationError(
            "archive_when_done applies to a session this call creates, not to one named by to",
            field="archive_when_done",
        )
    target = branches.resolve_target(svc, args.to, deliverable=True, project=ctx.principal.project)
    _expect_agent(target, args.agent_id)
    check_messages(ctx)
    if not args.run_in_background:
        _refuse_wait_cycle(svc, ctx, target)
    done = ctx.need_delegation().deliver(
        sender_of(svc, ctx, DeliveryKind.AGENT),
        target,
        DeliveryKind.AGENT,
        args.prompt,
        Reply.FOLLOWUP if args.run_in_background else Reply.NONE,
    )
    return _answer(ctx, done, args.run_in_background, args.timeout)


def _refuse_wait_cycle(svc: Services, ctx: ToolContext, target: Session) -> None:
    """A foreground call into a session where one of this turn's ancestors
    still runs would wait for that turn's lane, which that turn holds while
    it waits (directly or through others) on this one: refuse it up front,
    rather than hang until the timeout."""
    ancestor = svc.store.unfinished_ancestor_in(ctx.job_id, target.id, visibility.MAX_HOPS)
    if ancestor is not None:
        raise WaitCycle(
            f"session {target.name or target.id} is running job {ancestor}, which this "
            "turn descends from: a foreground call there would wait on itself; use "
            "run_in_background=True (the answer comes back as a follow-up) or send_message",
            session_id=target.id,
            execution_id=ancestor,
        )


def _answer(ctx: ToolContext, done: Delivered, background: bool, timeout: float) -> str:
    job = done.job
    if job is None:
        # Withdrawn at once: this turn is being cancelled (docs/collaboration.md#withdrawal).
        raise Cancelled("not delivered: the job that sent it is being cancelled")
    if background:
        return json.dumps(
            {
                "execution_id": job.id,
                "session_id": done.session.id,
                "name": done.session.name,
                "status": job.status.value,
            }
        )
    if done.session.tree_id == ctx.tree_id:
        final = _run_to_end(ctx, done.session.id, job, timeout)
    else:
        # Another tree's turn must take a live slot of its own tree: lending
        # this turn's slot would let it run past that tree's limit. Wait.
        final = _wait_for_end(ctx, job, timeout)
    if final.status is JobStatus.SUCCEEDED:
        return excerpt(final.result or "")[0]
    reason = (final.error or {}).get("message", final.status.value)
    raise ToolError(
        f"{done.session.name or done.session.id} ({final.status.value}): {reason}",
        execution_id=job.id,
        session_id=done.session.id,
        status=final.status.value,
    )


def _run_to_end(ctx: ToolContext, session_id: str, job: Job, timeout: float) -> Job:
    """Run the job's session here until the job is terminal.

    Rather than wait for a free worker thread: with one thread per worker,
    waiting would deadlock. If a worker holds the session's lane (running a
    turn there, or parking it for tree capacity), try again until the job
    has finished, whoever ran it.
    """
    svc, port = ctx.need_services(), ctx.need_delegation()
    deadline = time.monotonic() + timeout
    while True:
        if ctx.cancel.handing_back:
            # This worker is shutting down: the child resumes elsewhere, and
            # this call stops with its turn (HandedBack).
            ctx.cancel.raise_if_set()
        port.run_inline(session_id, job.id)
        final = svc.store.get_job(job.id)
        if final.status.terminal:
            return final
        if time.monotonic() >= deadline:
            return port.wait(job.id, 0)  # raises Timeout with the state
        time.sleep(0.05)


def _wait_for_end(ctx: ToolContext, job: Job, timeout: float) -> Job:
    """Wait for a job another worker runs; ``timeout`` bounds the wait."""
    return ctx.need_delegation().wait(job.id, timeout)


# -- send_message ------------------------------------------------------------------


def send_message(args: SendMessageArgs, ctx: ToolContext) -> str:
    """Deliver a message to an existing session: a turn now, or its inbox while it is busy."""
    svc = ctx.need_services()
    ctx.require(Grant.MESSAGE_SEND, "message another session")
    check_content(EntryType.DIRECTIVE, args.message, max_bytes=svc.settings.max_content_bytes)
    target = branches.resolve_target(svc, args.to, deliverable=True, project=ctx.principal.project)
    _expect_agent(target, "" if args.agent_id == "main" else args.agent_id)
    check_messages(ctx)
    done = ctx.need_delegation().deliver(
        sender_of(svc, ctx, DeliveryKind.MESSAGE),
        target,
        DeliveryKind.MESSAGE,
        args.message,
        Reply.FOLLOWUP,
    )
    answer: dict[str, Any] = {"delivery_id": done.delivery.id, "session_id": done.session.id}
    if done.queued:
        answer |= {
            "status": "queued",
            "note": "target busy, message queued; it is processed when its current turn ends",
        }
    elif done.job is None:
        # Withdrawn at once: this turn is being cancelled (docs/collaboration.md#withdrawal).
        answer |= {"status": done.delivery.state.value, "note": done.delivery.reason}
    else:
        answer |= {"status": "admitted", "execution_id": done.job.id}
    return json.dumps(answer)


# -- checks --------------------------------------------------------------------------


def _expect_agent(target: Session, agent_id: str) -> None:
    """``agent_id`` (empty: any) must be the agent the existing target runs: a
    delivery continues a session, it never changes its configuration."""
    if agent_id and agent_id != target.agent_id:
        raise ValidationError(
            f"session {target.name or target.id} runs agent {target.agent_id!r}, not {agent_id!r}",
            field="agent_id",
        )


def _fork_point(svc: Services, ctx: ToolContext, ref: str, seq: int | None) -> tuple[str, int]:
    """The ``(session, seq)`` a fork starts at, once the caller may read that history.

    A source the caller may not read is answered as a missing one
    (docs/collaboration.md#visibility); an archived source may be forked.
    """
    source = visibility.check_read(svc, ctx.session_id, ref)
    at = source.last_seq if seq is None else seq
    if at < 1 or at > source.last_seq:
        raise ValidationError(
            f"session {source.name or source.id} has entries 1 to {source.last_seq}; "
            f"there is no entry {at} to fork at",
            field="start_from",
        )
    return source.id, at


TOOLS = [
    Tool(
        "agent",
        "Hand a prompt to an agent: a new session (start_from='clean', 'inherit' or "
        "'SID:SEQ' to fork at an entry), or an existing one (to='SID:HEAD' or its name). "
        "Foreground returns the final answer; run_in_background returns its execution_id "
        "at once and the result comes back as a follow-up.",
        AgentArgs,
        agent,
    ),
    Tool(
        "spawn_agent",
        "Run a task in a new sub-agent session. Foreground (default) returns the "
        "sub-agent's final answer; async returns its execution_id at once.",
        SpawnArgs,
        spawn_agent,
    ),
    Tool(
        "send_message",
        "Send a message to an existing session (to='SID:HEAD' or its name). An idle "
        "target runs it at once; a busy one queues it until its turn ends. Its answer "
        "comes back to you as a follow-up.",
        SendMessageArgs,
        send_message,
    ),
]
