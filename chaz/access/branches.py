"""Sessions as collaboration addresses them: ``to`` resolution, archive, listings.

The rules: docs/contracts.md#addresses and docs/contracts.md#archive
(details: docs/collaboration.md#addresses and #archive). A ``to`` names an
existing session and never creates one: its id, ``SID:HEAD``, its exact
name, or a prefix of exactly one non-archived session's name. Archiving is
a global state of the session, idempotent, and cancels nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chaz.domain.addresses import HEAD, parse_to
from chaz.domain.sessions import ArchivedBy, Session, missing_session
from chaz.domain.validation import check_text
from chaz.errors import AmbiguousName, SessionArchived
from chaz.services import Services
from chaz.store.directory import SessionSummary

if TYPE_CHECKING:
    from chaz.domain.read_scope import ReadScope

#: How many candidates an ambiguous name lists.
MAX_CANDIDATES = 10
#: Longest archive reason kept.
MAX_REASON_CHARS = 1000


def address(session: Session) -> str:
    """The ready-to-use ``to`` of a session: ``"SID:HEAD"``."""
    return f"{session.id}:{HEAD}"


def resolve_target(
    services: Services,
    to: str,
    *,
    deliverable: bool,
    within: ReadScope | None = None,
    project: str | None = None,
) -> Session:
    """The existing session ``to`` addresses; nothing is ever created.

    Tried in order: the exact id, the exact name, then a name prefix shared
    by exactly one non-archived session. Several prefix matches are
    :class:`~chaz.errors.AmbiguousName` (``details["candidates"]``: up to
    :data:`MAX_CANDIDATES` of ``{"to": "SID:HEAD", "name": ...}``); none is
    :func:`~chaz.domain.sessions.missing_session`. ``deliverable`` refuses an
    archived target with :class:`~chaz.errors.SessionArchived` (it takes no
    new deliveries). ``within`` (a viewer's :class:`~chaz.domain.read_scope.ReadScope`)
    makes every other session invisible to the lookup: a session outside it
    is not found, exactly like one that does not exist. ``project`` does the
    same for every session of another project (a turn's ``to``: docs/security.md#visibility).
    """
    ref = parse_to(to)
    store = services.store
    if within is not None:
        project = within.project
    exact = [
        s for s in store.find_sessions(ref, project=project) if within is None or within.allows(s)
    ]
    if exact:
        session = exact[0]
    else:
        matches = store.sessions_by_name_prefix(
            ref,
            limit=MAX_CANDIDATES + 1,
            within_tree=within.tree_id if within is not None else None,
            or_ids=within.below if within is not None else (),
            project=project,
        )
        if not matches:
            raise missing_session(ref)
        if len(matches) > 1:
            shown = matches[:MAX_CANDIDATES]
            more = "" if len(matches) <= MAX_CANDIDATES else " (and more)"
            raise AmbiguousName(
                f"{ref!r} matches several sessions{more}: "
                + ", ".join(f"{s.name!r} ({address(s)})" for s in shown)
                + "; address one by its id or full name",
                field="to",
                candidates=[{"to": address(s), "name": s.name} for s in shown],
            )
        session = matches[0]
    if deliverable and session.archived_at is not None:
        raise SessionArchived(
            f"session {session.id} is archived: it takes no new deliveries "
            "(its history stays readable; fork it with start_from to continue it)",
            session_id=session.id,
            archived_at=session.archived_at.isoformat(),
        )
    return session


def archive(
    services: Services,
    ref: str,
    *,
    reason: str = "",
    by: ArchivedBy = ArchivedBy.MANUAL,
    project: str | None = None,
) -> tuple[Session, bool]:
    """Archive the session ``ref`` addresses; the session now and whether this changed it.

    Global (every caller's listings hide it) and idempotent: the first
    ``archived_at`` stays; an explicit manual reason outranks an automatic
    one, and a later request otherwise only fills a missing reason
    (docs/contracts.md#archive, case C4). Running and queued work continue:
    archiving cancels nothing. ``project`` (a turn's) makes another
    project's session not found.
    """
    reason = check_text("reason", reason, max_chars=MAX_REASON_CHARS).strip()
    session = resolve_target(services, ref, deliverable=False, project=project)
    return services.store.archive_session(session.id, reason=reason or None, by=by)


def summaries(
    services: Services,
    *,
    tree_id: str | None,
    archived: bool,
    agent_id: str | None = None,
    limit: int = 20,
    project: str | None = None,
    within: ReadScope | None = None,
) -> list[SessionSummary]:
    """Sessions (of one tree, or all; of one project; ``within``: only those a
    viewer may read) for a listing, most recently active first."""
    return services.store.session_summaries(
        tree_id=tree_id,
        archived=archived,
        agent_id=agent_id,
        limit=limit,
        project=project,
        within=within,
    )
