"""``chaz webhooks``: runs' webhook deliveries and the signing secret
(docs/http.md#webhooks)."""

from __future__ import annotations

from dataclasses import asdict

from chaz.cli.context import Context
from chaz.cli.output import EXIT_OK
from chaz.errors import ValidationError


def cmd_webhooks_ls(ctx: Context) -> int:
    """List the project's deliveries: state, attempts, the last error (a dead
    one keeps it: what an operator looks at)."""
    found = ctx.client.webhooks.list(state=ctx.args.state, limit=ctx.args.limit)
    if ctx.out.json_mode:
        ctx.out.json(
            [
                {**asdict(w), "state": w.state.value}
                | {k: getattr(w, k) and getattr(w, k).isoformat() for k in _TIMES}
                for w in found
            ]
        )
        return EXIT_OK
    rows = [
        [w.id, w.job_id, w.state.value, w.attempts, w.last_status or "", w.url, w.last_error or ""]
        for w in found
    ]
    ctx.out.table(
        "webhook deliveries",
        ["ID", "RUN", "STATE", "ATTEMPTS", "STATUS", "URL", "LAST ERROR"],
        rows,
    )
    return EXIT_OK


_TIMES = ("next_at", "created_at", "settled_at")
COLUMNS = ("ID", "RUN", "STATE", "ATTEMPTS", "STATUS", "URL", "LAST ERROR")


def cmd_webhooks_retry(ctx: Context) -> int:
    """Send a dead delivery again."""
    w = ctx.client.webhooks.retry(ctx.args.webhook_id)
    if ctx.out.json_mode:
        ctx.out.json({"id": w.id, "job_id": w.job_id, "state": w.state.value})
    else:
        ctx.out.line(f"webhook {w.id} of run {w.job_id} is pending again")
    return EXIT_OK


def cmd_webhooks_secret(ctx: Context) -> int:
    """Print the project's signing secret (``--rotate``: a new one first)."""
    hooks = ctx.client.webhooks
    if ctx.args.overlap is not None and not ctx.args.rotate:
        raise ValidationError("--overlap goes with --rotate", field="overlap")
    secret = hooks.rotate_secret(ctx.args.overlap) if ctx.args.rotate else hooks.secret()
    if ctx.out.json_mode:
        ctx.out.json({"project": ctx.client.principal.project, "secret": secret})
    else:
        ctx.out.line(secret)
    return EXIT_OK
