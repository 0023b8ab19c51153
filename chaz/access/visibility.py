"""Who may read what: the one visibility check of every history-consuming read.

docs/contracts.md#invariant-9 (knowing an id grants nothing) and
docs/contracts.md#visibility. Every read of another session's history
(``read_conversation``, a fork's source, ``inherit``, attach expansion,
artifacts) asks :func:`readable_scope`,
:func:`can_read` or :func:`check_read`; a job's result (``job_output``)
asks :func:`check_job`.

The rules (docs/collaboration.md#visibility):

* a session may read a session of its own tree, or one it is an ancestor
  of: made, through ``parent_job_id``, by one of its jobs or by a job of
  such a session, at most :data:`MAX_HOPS` generations down;
* a session may read a job that ran in it, that it called, or that
  descends (``parent_job_id``) from a job that ran in it, at most
  :data:`MAX_HOPS` hops up;
* and, above both, nothing of another project: a viewer sees only sessions
  and jobs of its own session's project (docs/security.md#visibility), so
  another project's session is never found, named, listed or previewed.

A target the viewer may not read is answered exactly like a missing one
(:func:`chaz.domain.sessions.missing_session`, :func:`chaz.domain.jobs.missing_job`):
same class, message and details, so a model cannot learn which ids or names exist.
"""

from __future__ import annotations

from chaz.access import branches
from chaz.domain.jobs import Job
from chaz.domain.read_scope import ReadScope
from chaz.domain.sessions import Session, missing_session
from chaz.errors import Unauthorized
from chaz.services import Services

#: Lineage walks stop here, so a corrupt cycle cannot hang a caller.
MAX_HOPS = 64


def readable_scope(services: Services, viewer_session_id: str) -> ReadScope | None:
    """What ``viewer_session_id`` may read; None if the viewer itself does not exist."""
    store = services.store
    found = [s for s in store.find_sessions(viewer_session_id) if s.id == viewer_session_id]
    if not found:
        return None
    viewer = found[0]
    below = store.descendant_sessions(viewer.id, MAX_HOPS)
    # Only sessions outside the tree need listing: the tree is allowed whole.
    others = frozenset(sid for sid, tree in below.items() if tree != viewer.tree_id)
    return ReadScope(viewer.id, viewer.tree_id, others, viewer.project)


def session_project(services: Services, session_id: str) -> str | None:
    """The project of a session, None if it does not exist."""
    found = [s for s in services.store.find_sessions(session_id) if s.id == session_id]
    return found[0].project if found else None


def can_read(services: Services, viewer_session_id: str, target_session_id: str) -> bool:
    """Whether the viewer may read the target's history (False for a missing one)."""
    scope = readable_scope(services, viewer_session_id)
    if scope is None:
        return False
    found = services.store.find_sessions(target_session_id)
    target = next((s for s in found if s.id == target_session_id), None)
    return target is not None and scope.allows(target)


def check_read(services: Services, viewer_session_id: str, ref: str) -> Session:
    """The session ``ref`` addresses (an id, ``SID:HEAD``, a name or a unique name
    prefix), if the viewer may read it; else what a missing one raises.

    Resolution only ever sees the sessions the viewer may read, so a denied
    target is not found by the same code that fails to find a missing one,
    and an ambiguous prefix lists only readable candidates.
    """
    scope = readable_scope(services, viewer_session_id)
    if scope is None:
        raise missing_session(ref)
    return branches.resolve_target(services, ref, deliverable=False, within=scope)


def check_job(services: Services, job: Job, viewer_session_id: str) -> None:
    """Allow the job's own session, its caller's, or an ancestor job's session
    (docs/contracts.md#job-output); else :class:`~chaz.errors.Unauthorized`.

    Ancestry follows ``parent_job_id`` upwards, at most :data:`MAX_HOPS` hops,
    in one query that a cycle cannot hang. Callers that answer a model turn
    the refusal into :func:`chaz.domain.jobs.missing_job`.

    A job of another project than the viewer's is never readable, whatever
    its lineage says.
    """
    if viewer_session_id == job.session_id:
        return
    # Any other relation counts only inside the viewer's project: a forged or
    # stale lineage across projects reads nothing.
    if session_project(services, viewer_session_id) == job.project:
        if viewer_session_id == job.caller_session_id:
            return
        if viewer_session_id in services.store.job_ancestor_sessions(job.id, MAX_HOPS):
            return
    raise Unauthorized(
        f"session {viewer_session_id} may not read job {job.id}",
        job_id=job.id,
        session_id=viewer_session_id,
    )
