"""``chaz deliveries``: hand-offs between sessions (docs/collaboration.md#deliveries)
and requests (docs/contracts.md#requests)."""

from __future__ import annotations

from typing import Any

from chaz.cli.context import Context
from chaz.cli.output import EXIT_OK
from chaz.domain.deliveries import Delivery


def cmd_deliveries_ls(ctx: Context) -> int:
    """Deliveries into and out of a session, newest first."""
    args = ctx.args
    found = ctx.client.deliveries.list(
        args.session, direction=args.direction, limit=args.limit, status=args.status
    )
    if ctx.out.json_mode:
        ctx.out.json([d.model_dump(mode="json") for d in found])
        return EXIT_OK
    ctx.out.table(
        "deliveries",
        ["ID", "KIND", "FROM", "TO", "STATE", "JOB", "CODE", "CREATED"],
        [
            [
                d.id,
                d.kind.value,
                d.sender_session_id or d.sender,
                d.target_session_id,
                d.state.value,
                d.job_id,
                d.code,
                d.created_at,
            ]
            for d in found
        ],
    )
    return EXIT_OK


def cmd_deliveries_get(ctx: Context) -> int:
    """One delivery with its lifecycle status and, for a request, its result."""
    client = ctx.client
    delivery = client.deliveries.get(ctx.args.delivery)
    status = client.deliveries.status(delivery.id)
    result = client.deliveries.result(delivery.id)
    if ctx.out.json_mode:
        ctx.out.json(
            {
                **delivery.model_dump(mode="json"),
                "status": status,
                "result": result.model_dump(mode="json") if result is not None else None,
            }
        )
        return EXIT_OK
    rows: list[tuple[str, Any]] = [
        ("id", delivery.id),
        ("kind", delivery.kind.value),
        ("status", status),
        ("state", delivery.state.value),
        ("from", delivery.sender_session_id or delivery.sender),
        ("to", delivery.target_session_id),
        ("reply", delivery.reply.value),
        ("job", delivery.job_id),
        ("code", delivery.code),
        ("reason", delivery.reason),
        ("result", _result_line(delivery)),
        ("result delivery", result.id if result is not None else None),
    ]
    ctx.out.fields("delivery", rows)
    return EXIT_OK


def cmd_deliveries_send(ctx: Context) -> int:
    """Send a request: it runs as its own turn in the target, after what runs there."""
    a = ctx.args
    delivery = ctx.client.deliveries.send(
        a.target, a.text, reply=a.reply, sender=a.sender, from_session=a.from_session
    )
    if ctx.out.json_mode:
        ctx.out.json(delivery.model_dump(mode="json"))
    else:
        ctx.out.line(
            f"request {delivery.id} -> {delivery.target_session_id} (job {delivery.job_id})"
        )
    return EXIT_OK


def _result_line(delivery: Delivery) -> str | None:
    frozen = delivery.metadata.get("result")
    if not frozen:
        return None
    if frozen.get("status") == "succeeded":
        return str(frozen.get("text", ""))
    return f"failed ({frozen.get('code')}): {frozen.get('message')}"
