"""Tools over other sessions: ``list_agents``, ``archive_agent``, ``read_conversation``.

The rules: docs/contracts.md#reading and docs/contracts.md#archive (details:
docs/collaboration.md#list-agents, #archive and #read-conversation). Their
output is text for a model: compact, one line per session or entry,
deterministic. ``read_conversation`` goes through
:func:`chaz.access.visibility.check_read`, so a session the caller may not
read is answered exactly like a missing one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from chaz.access import branches, visibility
from chaz.domain.entries import EntryType
from chaz.domain.principals import Grant
from chaz.domain.sessions import ArchivedBy, Session
from chaz.domain.validation import SafeText
from chaz.errors import ValidationError
from chaz.runtime.registry import Tool, ToolContext
from chaz.services import Services
from chaz.store.directory import Outline, SessionSummary

#: Characters of a session's tip that ``list_agents`` shows.
PREVIEW_CHARS = 70
#: ``read_conversation``'s bounds on ``max_chars``.
MAX_READ_CHARS = 60_000
MIN_READ_CHARS = 1_000
#: Room kept for the closing note of a cut read.
NOTE_CHARS = 300
#: Entries a conversation read never shows: a turn's start is status, not content.
_NEVER_SHOWN = frozenset({EntryType.ACK.value})
_TOOL_TYPES = frozenset({EntryType.TOOL_CALL.value, EntryType.TOOL_RESULT.value})


# -- list_agents -------------------------------------------------------------


class ListAgentsArgs(BaseModel):
    """Arguments of ``list_agents``."""

    model_config = ConfigDict(extra="forbid")

    scope: Literal["session", "all", "archived"] = Field(
        "session",
        description="'session': sessions of this tree; 'all': every session this one may "
        "read, its tree and the trees below it (no previews); "
        "'archived': archived sessions of this tree (the other views hide them).",
    )
    limit: int = Field(20, ge=1, le=200)
    agent_id: SafeText | None = Field(None, description="Only sessions of this saved agent.")


def size_label(chars: int) -> str:
    """An approximate size: ``<1k chars`` under 1,000 characters, else ``~Nk chars``."""
    if chars < 1000:
        return "<1k chars"
    return f"~{(chars + 500) // 1000}k chars"


def preview(text: str, width: int = PREVIEW_CHARS) -> str:
    """``text`` on one line, at most ``width`` characters (an ellipsis marks a cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _line(item: SessionSummary, *, me: str, with_tip: bool) -> str:
    s = item.session
    turns = f"{item.turns} turn" + ("" if item.turns == 1 else "s")
    parts = [
        f"- {s.id}",
        json.dumps(s.name, ensure_ascii=False) if s.name else "(unnamed)",
        f"agent={s.agent_id}",
        "busy" if item.busy else "idle",
        f'to="{branches.address(s)}"',
        f"{turns}, {size_label(item.size)}",
    ]
    if s.members is not None:
        parts.append(room_marker(s))
    if s.id == me:
        parts.append("(this session)")
    if s.archived_at is not None:
        reason = f": {preview(s.archive_reason, 40)}" if s.archive_reason else ""
        parts.append(f"archived{reason}")
    line = " ".join(parts)
    if with_tip:
        tip = json.dumps(preview(item.tip), ensure_ascii=False) if item.tip else "(empty)"
        line += f" tip: {tip}"
    return line


def room_marker(session: Session) -> str:
    """``room: host+member+...`` for a room (docs/rooms.md): who may be @mentioned there."""
    return "room: " + "+".join([session.agent_id, *(session.members or [])])


def list_agents(args: ListAgentsArgs, ctx: ToolContext) -> str:
    """The sessions this one may read, most recently active first: the read rule
    of ``read_conversation`` and ``session_search`` (its tree, and sessions of
    other trees below it; never another project's), so a listing names no
    session that a read would answer as missing."""
    ctx.require(Grant.HISTORY_READ, "list sessions")
    svc = ctx.need_services()
    everywhere = args.scope == "all"
    scope = visibility.readable_scope(svc, ctx.session_id)
    if scope is None:
        # The caller's own session is gone: there is nothing it may read.
        return "Sessions: none."
    items = branches.summaries(
        svc,
        tree_id=None if everywhere else ctx.tree_id,
        archived=args.scope == "archived",
        agent_id=args.agent_id,
        limit=args.limit,
        project=ctx.principal.project,
        within=scope,
    )
    title = {
        "session": "Sessions of this tree",
        "all": "Sessions of every tree",
        "archived": "Archived sessions of this tree",
    }[args.scope]
    if not items:
        return f"{title}: none."
    head = f"{title}, most recently active first ({len(items)}"
    head += f", limit {args.limit}):" if len(items) == args.limit else "):"
    lines = [_line(i, me=ctx.session_id, with_tip=not everywhere) for i in items]
    return "\n".join([head, *lines])


# -- archive_agent -----------------------------------------------------------


class ArchiveAgentArgs(BaseModel):
    """Arguments of ``archive_agent``."""

    model_config = ConfigDict(extra="forbid")

    to: SafeText = Field(description="The session: its id, 'SID:HEAD' or its name.")
    reason: SafeText = Field("", max_length=1000, description="Why (kept with the archive).")


def archive_agent(args: ArchiveAgentArgs, ctx: ToolContext) -> str:
    """Archive a session for everyone: hidden from listings, no new deliveries."""
    ctx.require(Grant.SESSION_ARCHIVE, "archive a session")
    session, changed = branches.archive(
        ctx.need_services(),
        args.to,
        reason=args.reason,
        by=ArchivedBy.MANUAL,
        project=ctx.principal.project,
    )
    return json.dumps(
        {
            "session_id": session.id,
            "name": session.name,
            "to": branches.address(session),
            "changed": changed,
            "archived_at": session.archived_at.isoformat() if session.archived_at else None,
            "archived_by": session.archived_by.value if session.archived_by else None,
            "reason": session.archive_reason,
            "note": (
                "archived: hidden from list_agents, refuses new deliveries; running work "
                "continues and its history stays"
                if changed
                else "already archived: nothing changed"
            ),
        },
        ensure_ascii=False,
    )


# -- read_conversation -------------------------------------------------------


class ReadConversationArgs(BaseModel):
    """Arguments of ``read_conversation``."""

    model_config = ConfigDict(extra="forbid")

    to: SafeText = Field(description="The session: its id, 'SID:HEAD' or its name.")
    start_turn: int = Field(0, ge=0, description="First turn to read (1 is the first; 0: from 1).")
    end_turn: int = Field(0, ge=0, description="Last turn to read (0: to the last).")
    include_tool_calls: bool = True
    max_chars: int = Field(
        MAX_READ_CHARS,
        description=f"Longest answer; held between {MIN_READ_CHARS} and {MAX_READ_CHARS}.",
    )


@dataclass
class _Turn:
    """The entries of one job (plus notes written between turns), in seq order."""

    job_id: str | None
    rows: list[Outline] = field(default_factory=list)


def turns_of(outline: list[Outline]) -> list[_Turn]:
    """Number a session's entries into turns: one per job, in order of first entry.

    An entry without a job (a note) joins the turn of the entry before it, or
    opens a turn of its own when it comes first.
    """
    turns: list[_Turn] = []
    by_job: dict[str, _Turn] = {}
    current: _Turn | None = None
    for row in outline:
        if row.job_id is not None:
            turn = by_job.get(row.job_id)
            if turn is None:
                turn = by_job[row.job_id] = _Turn(row.job_id)
                turns.append(turn)
            current = turn
        elif current is None:
            current = _Turn(None)
            turns.append(current)
        current.rows.append(row)
    return turns


def _label(type: str, sender: str) -> str:
    if type == EntryType.MESSAGE:
        return sender
    if type == EntryType.DIRECTIVE:
        return f"{sender} (directive)"
    return type.replace("_", " ")


def _entry_line(seq: int, type: str, sender: str, content: str) -> str:
    return f"[{seq}] {_label(type, sender)}: {content}"


def _cost(row: Outline) -> int:
    return len(_entry_line(row.seq, row.type, row.sender, "")) + row.length + 1


def _turn_header(number: int, status: str) -> str:
    return f"--- turn {number} ({status}) ---"


def read_conversation(args: ReadConversationArgs, ctx: ToolContext) -> str:
    """Turns of another session this one may read, cut at ``max_chars``."""
    ctx.require(Grant.HISTORY_READ, "read a conversation")
    svc = ctx.need_services()
    max_chars = min(max(args.max_chars, MIN_READ_CHARS), MAX_READ_CHARS)
    session = visibility.check_read(svc, ctx.session_id, args.to)
    turns = turns_of(svc.store.entry_outline(session.id))
    total = len(turns)
    first = args.start_turn or 1
    last = min(args.end_turn or total, total)
    if args.end_turn and args.start_turn and args.end_turn < args.start_turn:
        raise ValidationError("end_turn is before start_turn", field="end_turn")
    if total and first > total:
        raise ValidationError(
            f"session {session.id} has {total} turns; start_turn={first} is past its end",
            field="start_turn",
            turns=total,
        )
    head = _header(session, first, last, total)
    if not total:
        return head + "\n(no entries yet)"

    def shown(row: Outline) -> bool:
        if row.type in _NEVER_SHOWN:
            return False
        return args.include_tool_calls or row.type not in _TOOL_TYPES

    # Plan from lengths alone, then read only the content that will be shown.
    jobs = svc.store.get_jobs(t.job_id for t in turns[first - 1 : last] if t.job_id)
    budget = max_chars - len(head) - 1 - NOTE_CHARS
    plan: list[tuple[int, str, list[Outline]]] = []
    cut_entry: tuple[int, int] | None = None  # (seq, characters of its content kept)
    resume: int | None = None
    used = 0
    for number in range(first, last + 1):
        turn = turns[number - 1]
        job = jobs.get(turn.job_id) if turn.job_id else None
        header = _turn_header(number, job.status.value if job else "notes")
        rows = [r for r in turn.rows if shown(r)]
        cost = len(header) + 1 + sum(_cost(r) for r in rows)
        if used + cost <= budget:
            plan.append((number, header, rows))
            used += cost
            continue
        if plan:
            resume = number
            break
        # Not even the first turn fits: show its start, and go on after it.
        kept: list[Outline] = []
        room = budget - len(header) - 1
        for r in rows:
            if _cost(r) <= room:
                kept.append(r)
                room -= _cost(r)
                continue
            kept.append(r)
            cut_entry = (r.seq, max(0, room - _cost(Outline(r.seq, r.type, r.sender, None, 0))))
            break
        plan.append((number, header, kept))
        resume = number + 1 if number < last else None
        break
    contents = _contents(svc, session.id, [r for _, _, rows in plan for r in rows])
    out = [head]
    for _, header, rows in plan:
        out.append(header)
        for r in rows:
            text = contents.get(r.seq, "")
            if cut_entry is not None and r.seq == cut_entry[0]:
                text = text[: cut_entry[1]] + f" [... {len(text) - cut_entry[1]} characters cut]"
            out.append(_entry_line(r.seq, r.type, r.sender, text))
    shown_to = plan[-1][0] if plan else first - 1
    if cut_entry is not None or resume is not None:
        out.append(_note(session, args, max_chars, first, shown_to, resume, cut_entry))
    return "\n".join(out)


def _header(session: Session, first: int, last: int, total: int) -> str:
    name = f" {json.dumps(session.name, ensure_ascii=False)}" if session.name else ""
    span = f"turns {first}-{last} of {total}" if total else "no turns"
    who = room_marker(session) if session.members is not None else f"agent {session.agent_id}"
    head = f"Conversation of session {session.id}{name} ({who}), {span}:"
    if session.forked_from:
        head += (
            f"\n(forked from {session.forked_from}: its history before the fork "
            "is read in that session)"
        )
    return head


def _note(
    session: Session,
    args: ReadConversationArgs,
    max_chars: int,
    first: int,
    shown_to: int,
    resume: int | None,
    cut_entry: tuple[int, int] | None,
) -> str:
    what = f"turns {first}-{shown_to}" if shown_to > first else f"turn {first}"
    if cut_entry is not None:
        # Only a first turn longer than the whole budget is ever shown in part.
        what = f"turn {first} only in part"
    if resume is None:
        return f"[cut at max_chars={max_chars}: {what}; no more turns were asked for]"
    again = f'to="{branches.address(session)}", start_turn={resume}'
    if args.end_turn:
        again += f", end_turn={args.end_turn}"
    return f"[cut at max_chars={max_chars}: {what}; to read on, call read_conversation({again})]"


def _contents(svc: Services, session_id: str, rows: list[Outline]) -> dict[int, str]:
    """The content of these entries of a session, by seq."""
    seqs = [r.seq for r in rows]
    types = {EntryType(r.type) for r in rows}
    if not seqs:
        return {}
    wanted = set(seqs)
    found = svc.store.entries(session_id, after=min(wanted) - 1, until=max(wanted), types=types)
    return {e.seq: e.content for e in found if e.seq in wanted}


TOOLS = [
    Tool(
        "list_agents",
        "List the sessions (agents) you can address: id, name, agent, busy/idle, a "
        'ready-to-use to="SID:HEAD", turn count, approximate size and a preview of the '
        "latest message. scope: 'session' (this tree), 'all' (every tree), 'archived'.",
        ListAgentsArgs,
        list_agents,
    ),
    Tool(
        "archive_agent",
        "Archive a session for everyone: hidden from list_agents, refuses new deliveries; "
        "running work continues and its history stays readable. Idempotent.",
        ArchiveAgentArgs,
        archive_agent,
    ),
    Tool(
        "read_conversation",
        "Read another session's conversation, turn by turn (turns numbered from 1), up "
        "to max_chars characters; a cut answer ends with the start_turn to read on from.",
        ReadConversationArgs,
        read_conversation,
    ),
]
