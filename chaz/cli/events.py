"""``chaz events``: a session's event log, listed or followed."""

from __future__ import annotations

from chaz.cli.context import Context, _watching
from chaz.cli.output import EXIT_OK
from chaz.domain.events import Event
from chaz.errors import ValidationError


def cmd_events(ctx: Context) -> int:
    """A session's event log: a table (or JSON), or with ``--follow`` a live stream."""
    args, client, out = ctx.args, ctx.client, ctx.out
    session = client.sessions.get(args.session)
    if not args.follow:
        limit = 100 if args.limit is None else args.limit
        events: list[Event] = client.events.list(session.id, after=args.after, limit=limit)
        if args.jsonl:
            for event in events:
                out.event(event, jsonl=True)
        elif out.json_mode:
            out.json([e.model_dump(mode="json") for e in events])
        else:
            out.table(
                "events",
                ["ID", "TIME", "KIND", "DATA"],
                [[e.id, e.created_at, e.kind, e.data] for e in events],
            )
        return EXIT_OK
    if args.limit is not None and args.limit < 1:
        raise ValidationError("--limit must be at least 1", field="limit")
    printed = 0
    with (
        out.status(f"following the events of {session.id} (Ctrl-C to stop)"),
        _watching(
            client.events.follow(session.id, after=args.after, timeout=args.timeout)
        ) as stream,
    ):
        for event in stream:
            out.event(event, jsonl=args.jsonl)
            printed += 1
            if args.limit is not None and printed >= args.limit:
                break
    return EXIT_OK
