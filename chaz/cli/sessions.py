"""``chaz sessions``, ``chaz send`` and ``chaz tail``: create, list, inspect,
post into and follow sessions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from chaz.cli.context import Context, _watching
from chaz.cli.output import EXIT_FAILURE, EXIT_OK
from chaz.domain.kinds import EntryType, JobStatus

if TYPE_CHECKING:
    from chaz.client import Client
    from chaz.domain.entries import Entry
    from chaz.domain.jobs import Job
    from chaz.domain.sessions import Session


def _session_rows(sessions: Sequence[Session]) -> list[list[Any]]:
    return [[s.id, s.name, s.agent_id, s.last_seq, s.created_at] for s in sessions]


def cmd_sessions_ls(ctx: Context) -> int:
    """List sessions, newest first (archived ones only with ``--archived``)."""
    args = ctx.args
    sessions = ctx.read(
        lambda direct: direct.sessions(args.agent, args.limit, args.tree, args.archived),
        lambda client: client.sessions.list(
            agent_id=args.agent, limit=args.limit, tree=args.tree, archived=args.archived
        ),
    )
    if ctx.out.json_mode:
        ctx.out.json([s.model_dump(mode="json") for s in sessions])
        return EXIT_OK
    ctx.out.table(
        "sessions", ["ID", "NAME", "AGENT", "ENTRIES", "CREATED"], _session_rows(sessions)
    )
    return EXIT_OK


def cmd_sessions_archive(ctx: Context) -> int:
    """Archive a session (idempotent: the first archive's time stays)."""
    session = ctx.client.sessions.archive(ctx.args.session, reason=ctx.args.reason)
    out = ctx.out
    if out.json_mode:
        out.json(session.model_dump(mode="json"))
        return EXIT_OK
    reason = f" ({session.archive_reason})" if session.archive_reason else ""
    out.line(f"session {session.id} archived at {session.archived_at}{reason}")
    return EXIT_OK


def cmd_sessions_stop(ctx: Context) -> int:
    """Stop a session (``client.sessions.stop``); prints the outcome."""
    args = ctx.args
    outcome = ctx.client.sessions.stop(args.session, command_id=args.command_id, reason=args.reason)
    if ctx.out.json_mode:
        ctx.out.json(outcome)
    else:
        ctx.out.fields("session.stop", list(outcome.items()))
    return EXIT_OK


def cmd_sessions_rename(ctx: Context) -> int:
    """Name a session; automatic naming never overwrites a person's name."""
    session = ctx.client.sessions.rename(ctx.args.session, ctx.args.name)
    out = ctx.out
    if out.json_mode:
        out.json(session.model_dump(mode="json"))
    else:
        out.line(f"session {session.id} is now named {session.name!r}")
    return EXIT_OK


def cmd_sessions_compact(ctx: Context) -> int:
    """Compact a session: a Summary by its own model, which later turns start from."""
    summary = ctx.client.sessions.compact(ctx.args.session, timeout=ctx.args.timeout)
    out = ctx.out
    if out.json_mode:
        out.json({"summary": summary.model_dump(mode="json") if summary else None})
    elif summary is None:
        out.line(f"session {ctx.args.session}: nothing to compact since the latest Summary")
    else:
        out.line(
            f"session {summary.session_id} compacted: Summary at seq {summary.seq} "
            f"({summary.metadata.get('entries', 0)} entries)"
        )
    return EXIT_OK


def cmd_sessions_new(ctx: Context) -> int:
    """Create a session; in a pipe, print only its id (for ``S=$(chaz sessions new A)``)."""
    session = ctx.client.sessions.create(ctx.args.agent, name=ctx.args.name)
    out = ctx.out
    if out.json_mode:
        out.json(session.model_dump(mode="json"))
    elif out.fancy:
        name = f" {session.name!r}" if session.name else ""
        out.line(f"created session {session.id}{name} of agent {session.agent_id}", "green")
    else:
        out.line(session.id)
    return EXIT_OK


def cmd_sessions_fork(ctx: Context) -> int:
    """Fork a session at an entry; in a pipe, print only the new id."""
    args = ctx.args
    session = ctx.client.sessions.fork(args.session, args.at, agent_id=args.agent, name=args.name)
    out = ctx.out
    if out.json_mode:
        out.json(session.model_dump(mode="json"))
    elif out.fancy:
        out.line(
            f"forked {session.forked_from} into session {session.id} {session.name!r}", "green"
        )
    else:
        out.line(session.id)
    return EXIT_OK


# -- rooms (docs/rooms.md) ----------------------------------------------------


def cmd_sessions_show(ctx: Context) -> int:
    """A session's details, its timeline, and its queue (what runs, what waits)."""
    out = ctx.out
    session, entries, queue = ctx.read(
        lambda direct: direct.show(ctx.args.session, ctx.args.last),
        lambda client: _show(client, ctx.args.session, ctx.args.last),
    )
    if out.json_mode:
        out.json(
            {
                "session": session.model_dump(mode="json"),
                "entries": [e.model_dump(mode="json") for e in entries],
                "queue": [j.model_dump(mode="json") for j in queue],
            }
        )
        return EXIT_OK
    details: list[tuple[str, Any]] = [
        ("id", session.id),
        ("name", session.name),
        ("agent", session.agent_id),
        ("tree", session.tree_id),
        ("depth", session.call_depth),
        ("entries", session.last_seq),
        ("created", session.created_at),
    ]
    if session.members is not None:
        details.append(("room members", ", ".join(session.members) or "(none yet)"))
    if session.forked_from:
        details.append(("forked from", session.forked_from))
    if session.archived_at is not None:
        why = f": {session.archive_reason}" if session.archive_reason else ""
        details.append(("archived", f"{session.archived_at} ({session.archived_by}){why}"))
    out.fields("session", details)
    out.line("")
    out.line(f"entries ({len(entries)} of {session.last_seq})", "bold underline")
    for entry in entries:
        out.entry(entry)
    out.line("")
    running = sum(1 for j in queue if j.status in (JobStatus.RUNNING, JobStatus.STOPPING))
    waiting = len(queue) - running
    out.line(f"queue ({running} running, {waiting} waiting)", "bold underline")
    if queue:
        seqs = {e.id: e.seq for e in entries}
        out.table(
            "",
            ["#", "STATUS", "JOB", "TRIGGER", "ADMITTED", "STARTED"],
            [
                [
                    pos,
                    j.status.value,
                    j.id,
                    f"#{seqs[j.trigger_entry_id]}"
                    if j.trigger_entry_id in seqs
                    else j.trigger_entry_id,
                    j.created_at,
                    j.started_at,
                ]
                for pos, j in enumerate(queue, start=1)
            ],
        )
    else:
        out.line("empty: nothing runs or waits")
    return EXIT_OK


def _show(client: Client, ref: str, last: int | None) -> tuple[Session, list[Entry], list[Job]]:
    session = client.sessions.get(ref)
    after = 0 if last is None else max(0, session.last_seq - last)
    # Annotated: Client's methods named ``list`` confuse type checkers about list[...].
    entries: list[Entry] = client.sessions.entries(session.id, after=after)
    queue: list[Job] = client.sessions.queue(session.id)
    return session, entries, queue


def cmd_send(ctx: Context) -> int:
    """Post an entry; with ``--wait``, print the agent's reply (exit 1 on an Error)."""
    args, client, out = ctx.args, ctx.client, ctx.out
    entry = client.sessions.post(
        args.session,
        args.text,
        sender=args.sender,  # None: the client's default (user:you, or the key's principal)
        type=args.type,
        idempotency_key=args.idempotency_key,
    )
    if not args.wait:
        if out.json_mode:
            out.json(entry.model_dump(mode="json"))
        else:
            out.entry(entry)
            if entry.job_id:
                out.note(f"admitted job {entry.job_id}")
        return EXIT_OK
    if out.fancy:
        out.entry(entry)
    with out.status(f"waiting for the reply (up to {args.timeout:g}s)..."):
        reply = client.sessions.wait_for_reply(
            entry.session_id, after=entry.seq, timeout=args.timeout
        )
    failed = reply.type is EntryType.ERROR
    if out.json_mode:
        out.json({"entry": entry.model_dump(mode="json"), "reply": reply.model_dump(mode="json")})
    elif out.fancy:
        out.entry(reply)
    elif failed:
        out.error_entry(reply)
    else:
        # In a pipe the reply's text alone is the most useful: REPLY=$(chaz send ... --wait).
        out.line(reply.content)
    return EXIT_FAILURE if failed else EXIT_OK


def cmd_tail(ctx: Context) -> int:
    """Print a session's entries as they land, until Ctrl-C (or ``--timeout``)."""
    from chaz.domain.entries import Entry

    args, client, out = ctx.args, ctx.client, ctx.out
    session = client.sessions.get(args.session)
    after = args.after if args.after is not None else max(0, session.last_seq - args.lines)
    watch = client.sessions.watch(
        session.id, after=after, timeout=args.timeout, partial=args.partial
    )
    # The text of the answer being streamed, by (job, model step).
    growing: tuple[str, int] | None = None
    text = ""
    with out.status(f"following {session.id} (Ctrl-C to stop)"), _watching(watch) as items:
        for item in items:
            if isinstance(item, Entry):
                growing = None
                out.entry(item)
                continue
            if growing != (item.job_id, item.step):
                out.end_partial()
                growing, text = (item.job_id, item.step), ""
            text += item.text
            out.partial(item, text)
    return EXIT_OK
