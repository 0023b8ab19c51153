"""``chaz approvals``: tool calls waiting for a person's decision (docs/approvals.md)."""

from __future__ import annotations

from chaz.cli.context import Context
from chaz.cli.output import EXIT_OK
from chaz.domain.approvals import Approval


def _args(a: Approval) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in a.arguments.items())


def cmd_approvals_ls(ctx: Context) -> int:
    """List the requests waiting for a decision, oldest first."""
    found = ctx.client.approvals.pending(ctx.args.session)
    if ctx.out.json_mode:
        ctx.out.json([a.model_dump(mode="json") for a in found])
        return EXIT_OK
    rows = [[a.request_id, a.session_id, a.tool, _args(a), a.expires_at.isoformat()] for a in found]
    ctx.out.table("approvals", ["ID", "SESSION", "TOOL", "ARGUMENTS", "EXPIRES"], rows)
    return EXIT_OK


def cmd_approvals_decide(ctx: Context) -> int:
    """Approve or deny a request; say whether this decision took effect."""
    a = ctx.args
    done = ctx.client.approvals.decide(a.request, a.decision, by=a.by)
    if ctx.out.json_mode:
        ctx.out.json(done.to_dict())
    elif done.effective:
        ctx.out.line(f"approval {done.approval.request_id} {done.approval.state.value}")
    else:
        ctx.out.line(
            f"approval {done.approval.request_id} was already {done.approval.state.value}; "
            "this decision changed nothing"
        )
    return EXIT_OK
