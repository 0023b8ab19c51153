"""The rules every hand-off tool shares: topology checks, who a delivery is
from, and a new session's first names.

``agent``, ``spawn_agent`` and ``send_message`` (:mod:`chaz.tools.agents`)
and ``session_send`` / ``session_create`` (:mod:`chaz.tools.session_delivery`)
each end in one delivery (:mod:`chaz.usecases.deliveries`); they check and describe it
the same way, here.
"""

from __future__ import annotations

import itertools

from chaz.domain.deliveries import DeliveryKind, Sender
from chaz.domain.entries import agent_sender
from chaz.domain.naming import candidates, stage1_label
from chaz.domain.principals import grant_names
from chaz.errors import DepthExceeded, FanoutExceeded, MessagesExceeded
from chaz.runtime.registry import ToolContext
from chaz.services import Services

#: Automatic names tried for a new session before it is left unnamed.
NAME_CANDIDATES = 20


def check_creation(svc: Services, ctx: ToolContext) -> int:
    """Depth, message depth and fan-out of a new session (docs/contracts.md#topology).

    Returns the new session's generation. A refusal creates nothing.
    """
    depth = ctx.call_depth + 1
    limit = ctx.limits.topology("max_call_depth")
    if limit and depth > limit:
        raise DepthExceeded(
            f"creating a session would nest {depth} deep; {ctx.agent_id} allows {limit}",
            depth=depth,
            max_call_depth=limit,
        )
    check_messages(ctx)
    limit = ctx.limits.topology("max_spawn_fanout")
    if limit and svc.store.count_created(ctx.job_id) >= limit:
        raise FanoutExceeded(
            f"this turn has already created {limit} sessions", max_spawn_fanout=limit
        )
    return depth


def check_messages(ctx: ToolContext) -> None:
    """Message depth: every delivery spends one along its lineage; 0 disables the check."""
    messages = ctx.message_count + 1
    limit = ctx.limits.topology("max_messages")
    if limit and messages > limit:
        raise MessagesExceeded(
            f"this lineage has used its {limit} messages",
            message_count=messages,
            max_messages=limit,
        )


def sender_of(svc: Services, ctx: ToolContext, kind: DeliveryKind) -> Sender:
    """Who a hand-off of this tool call is from, keyed once per call, with the
    turn's project, owner and (only narrowing) grants."""
    ctx.flush()  # the ToolCall entry first: the hand-off points to it
    call = svc.store.find_idempotent(ctx.session_id, f"job:{ctx.job_id}:call:{ctx.call_id}")
    return Sender(
        sender=agent_sender(ctx.agent_id),
        # One hand-off per tool call: a resumed turn's retry finds the first.
        key=f"{kind.value}:{ctx.job_id}:{ctx.call_id}",
        session_id=ctx.session_id,
        job_id=ctx.job_id,
        entry_id=call.entry.id if call is not None else None,
        tree_id=ctx.tree_id,
        message_count=ctx.message_count,
        # Grants only narrow: what this hand-off admits holds this turn's grants.
        project=ctx.principal.project,
        owner=ctx.owner,
        grants=grant_names(ctx.principal.grants),
        unattended=ctx.unattended,
    )


def stage1_names(label: str, prompt: str) -> tuple[str, ...]:
    """Stage-1 names to try in turn (docs/collaboration.md#names)."""
    return tuple(itertools.islice(candidates(stage1_label(label, prompt)), NAME_CANDIDATES))
