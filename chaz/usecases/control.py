"""Execution control: waiting for jobs, the versioned ``execution.cancel`` command,
ownership of job results and their cap.

Cancelling (docs/contracts.md#cancel):

* a queued job is withdrawn from its lane (it becomes ``cancelled`` at once)
  without touching the running turn of the same session;
* a running job becomes ``stopping``; the runtime stops at its next step
  boundary, and the job is ``cancelled`` only once the turn has exited;
* a terminal job is left as it is, and the outcome says so;
* descendants (through ``parent_job_id``) are cancelled first;
* what the lineage left waiting (messages in busy inboxes, follow-ups not
  yet admitted) is withdrawn (``withdrawn``), and never runs;
* the schedules the lineage's turns added are paused (``paused``), and
  fire no more until someone resumes them.

A stale ``expected_version`` is a :class:`~chaz.errors.VersionConflict`; a
repeated ``command_id`` returns the first outcome.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from chaz.access import visibility
from chaz.domain.artifacts import Artifact, is_excerpt
from chaz.domain.commands import command_key
from chaz.domain.entries import EntryType, NewEntry
from chaz.domain.jobs import Job, JobStatus, missing_job
from chaz.domain.principals import LOCAL, Grant, Principal
from chaz.domain.results import RESULT_CAP, digest, excerpt
from chaz.domain.validation import (
    MAX_SEQ,
    check_command_id,
    check_int,
    check_ref,
    check_text,
)
from chaz.errors import (
    ArtifactNotFound,
    Conflict,
    IdempotencyMismatch,
    JobNotFound,
    Timeout,
    Unauthorized,
    VersionConflict,
)
from chaz.services import Services
from chaz.usecases import admission, completion, deliveries
from chaz.usecases.caller_gone import caller_gone

log = logging.getLogger(__name__)

CANCEL_ACTION = "execution.cancel"
#: A cancel's reason goes into the withdrawn job's Error entry and the cancel flag.
MAX_REASON_CHARS = 1000
#: Lineage walks stop here, so a corrupt cycle cannot hang a caller.
MAX_HOPS = 64


def wait_terminal(services: Services, job_id: str, timeout: float) -> Job:
    """Poll until the job is terminal (backing off to 200 ms between reads), or
    ``timeout`` once ``timeout`` seconds have passed or the caller has gone
    (:mod:`chaz.usecases.caller_gone`)."""
    deadline = time.monotonic() + timeout
    pause = 0.01
    while True:
        job = services.store.get_job(job_id)
        if job.status.terminal:
            return job
        if time.monotonic() >= deadline or caller_gone():
            raise Timeout(
                f"job {job_id} is still {job.status.value} after {timeout:g}s", job_id=job_id
            )
        time.sleep(pause)
        pause = min(pause * 2, 0.2)


def descendants(services: Services, job_id: str) -> list[Job]:
    """Every job below ``job_id`` through ``parent_job_id``, deepest first."""
    order: list[Job] = []
    seen = {job_id}
    frontier = [job_id]
    depth = 0
    while frontier and depth < MAX_HOPS:
        children: list[Job] = []
        for parent in frontier:
            for child in services.store.list_jobs(parent_job_id=parent, limit=10_000):
                if child.id not in seen:
                    seen.add(child.id)
                    children.append(child)
        order.extend(children)
        frontier = [c.id for c in children]
        depth += 1
    return list(reversed(order))


def cancel(
    services: Services,
    job_id: str,
    *,
    expected_version: int | None = None,
    command_id: str | None = None,
    reason: str = "",
    principal: Principal = LOCAL,
) -> dict[str, Any]:
    """Apply ``execution.cancel`` to ``job_id`` and its descendants; the outcome.

    Every argument is checked before anything changes: an over-long
    ``command_id`` used to cancel the job and then fail to record the command.
    ``principal`` must hold ``runtime.control`` (checked before the job is
    looked up) and the job must be of its project: knowing an execution id
    grants nothing (another project's job is ``job.not_found``, as a missing
    one, and nothing changes; docs/security.md).
    """
    principal.require(Grant.RUNTIME_CONTROL, "cancel jobs")
    job_id = check_ref("execution_id", job_id)
    command_id = check_command_id(command_id)
    if expected_version is not None:
        expected_version = check_int("expected_version", expected_version, low=1, high=MAX_SEQ)
    reason = check_text("reason", reason, max_chars=MAX_REASON_CHARS)
    store = services.store
    job = store.get_job(job_id)
    check_control(principal, job)
    key = None if command_id is None else command_key(job.project, command_id)
    if key is not None:
        first = store.get_command(key)
        if first is not None:
            if first.get("execution_id") != job.id:
                # The id named another job of the project: its outcome is
                # not this command's to return.
                raise IdempotencyMismatch(
                    f"command {command_id!r} was used for another job",
                    command_id=command_id,
                )
            return first
    if expected_version is not None and job.version != expected_version:
        raise VersionConflict(
            f"job {job_id} is at version {job.version}, not {expected_version}",
            job_id=job_id,
            version=job.version,
        )
    outcome = cancel_lineage(
        services, job, reason=reason, by=command_id or job.id, expected_version=expected_version
    )
    if key is not None:
        outcome = store.record_command(key, CANCEL_ACTION, job_id, outcome)
    return outcome


def cancel_lineage(
    services: Services,
    job: Job,
    *,
    reason: str,
    by: str,
    expected_version: int | None = None,
    depth: int = 0,
) -> dict[str, Any]:
    """Cancel ``job`` and its descendants, and withdraw what the lineage left
    waiting; the outcome (``cascaded``: the other jobs cancelled,
    ``withdrawn``: the deliveries taken back, ``paused``: the schedules the
    lineage's turns added, turned off).

    ``by`` is what the withdrawn deliveries record as ``withdrawn_by`` (the
    command id, else the cancelled job's id). The withdrawal comes after the
    cancels and is a compare-and-set against each delivery's admission
    (docs/collaboration.md#withdrawal): a delivery admitted first is not
    withdrawn, and the job it admitted is cancelled here instead, so every
    one is either withdrawn or its job cancelled.
    """
    store = services.store
    lineage = descendants(services, job.id)
    below = [child for child in lineage if not child.status.terminal]
    # Their caller is being cancelled: nobody is left to read a follow-up
    # (docs/collaboration.md#follow-ups). The job named here still sends its own.
    store.silence_followups(child.id for child in below)
    cascaded = [_cancel_one(services, child, reason)["execution_id"] for child in below]
    outcome = _cancel_one(services, job, reason, expected_version=expected_version)
    sent_by = [job.id, *(child.id for child in lineage)]
    withdrawn = store.deliveries.withdraw_sent(
        sent_by,
        keep_answers_of=job.id,
        by=by,
        reason=f"withdrawn: the job that sent it was cancelled{': ' + reason if reason else ''}",
    )
    # Admitted before the withdrawal could take them: their jobs (a message's,
    # a descendant's follow-up into the lineage) are cancelled like the rest.
    done = {job.id, *cascaded}
    late = [
        j for j in store.deliveries.admitted_jobs(sent_by, keep_answers_of=job.id) if j not in done
    ]
    store.silence_followups(late)
    withdrawn_ids = [d.id for d in withdrawn]
    # After the cancels: a turn adding one meanwhile either saw its job
    # moved (and added nothing) or committed first, and is found here.
    paused = store.schedules.pause_made_by(
        sent_by, f"paused: the job that added it was cancelled (by {by})"
    )
    for late_id in late:
        late_job = store.get_job(late_id)
        if depth >= MAX_HOPS:
            cascaded.append(_cancel_one(services, late_job, reason)["execution_id"])
            continue
        # A late job may have run and sent work of its own before this found
        # it: it is cancelled with its lineage, as the addressed job was.
        inner = cancel_lineage(services, late_job, reason=reason, by=by, depth=depth + 1)
        cascaded.extend([inner["execution_id"], *inner["cascaded"]])
        withdrawn_ids.extend(inner["withdrawn"])
        paused.extend(inner["paused"])
    outcome["cascaded"] = cascaded
    outcome["withdrawn"] = withdrawn_ids
    outcome["paused"] = paused
    return outcome


def check_control(principal: Principal, job: Job) -> None:
    """``job.not_found`` unless ``job`` is of ``principal``'s project: the check
    every execution control command shares (docs/security.md#execution-control).

    A job of another project is answered exactly as a missing one, so an id
    says nothing about what exists outside the caller's project.
    """
    if not principal.same_project(job.project):
        raise missing_job(job.id)


def _cancel_one(
    services: Services, job: Job, reason: str, expected_version: int | None = None
) -> dict[str, Any]:
    store = services.store
    for _ in range(5):
        try:
            if job.status in (JobStatus.QUEUED, JobStatus.WAITING_APPROVAL):
                # Neither has a running turn to stop: it ends here, at once.
                done = store.transition(
                    job.id,
                    JobStatus.CANCELLED,
                    expected_version=expected_version or job.version,
                    completion=completion.ended,
                )
                if job.status is JobStatus.WAITING_APPROVAL:
                    store.approvals.cancel_for_job(job.id)
                # It leaves its project's live set; only a job that never
                # started still counts in the queue (one queued again by an
                # approval decision left it).
                services.quotas.ended(
                    done, dequeued=job.status is JobStatus.QUEUED and job.starts == 0
                )
                _note(services, done, reason, waiting=job.status is JobStatus.WAITING_APPROVAL)
                if done.webhook is not None:
                    from chaz.usecases import webhooks  # only a run with a webhook

                    webhooks.announce(services, done.id)
                try:
                    deliveries.settle(services, done)
                except Exception:
                    # The cancel is done; the reconciler's sweep admits the
                    # follow-up its end recorded.
                    log.warning("job %s: follow-up left to the sweep", job.id, exc_info=True)
                return _outcome(done, previous=job.status, changed=True)
            if job.status is JobStatus.RUNNING:
                done = store.transition(
                    job.id,
                    JobStatus.STOPPING,
                    expected_version=expected_version or job.version,
                    completion=completion.ended,
                )
                services.flags.request(job.id, job.project, reason)
                return _outcome(done, previous=job.status, changed=True)
            return _outcome(job, previous=job.status, changed=False)
        except Conflict:
            if expected_version is not None:
                raise
            # The job moved under us (a worker started it): look again.
            try:
                job = store.get_job(job.id)
            except JobNotFound:
                raise
    raise VersionConflict(f"job {job.id} kept changing; try again", job_id=job.id)


def _note(services: Services, job: Job, reason: str, *, waiting: bool = False) -> None:
    """Leave an explicit outcome in the session for a job withdrawn before it
    ran (or while it ``waiting`` for approval)."""
    session = services.store.get_session(job.session_id)
    when = "while it waited for approval" if waiting else "before it ran"
    note = NewEntry(
        EntryType.ERROR,
        f"agent:{job.member_agent_id or session.agent_id}",
        f"job.cancelled: cancelled {when}{': ' + reason if reason else ''}",
        metadata={"code": "job.cancelled", "retryable": False},
        idempotency_key=f"job:{job.id}:error",
        job_id=job.id,
    )
    admission.append(services, job.session_id, note)


def _outcome(job: Job, *, previous: JobStatus, changed: bool) -> dict[str, Any]:
    return {
        "action": CANCEL_ACTION,
        "execution_id": job.id,
        "previous": previous.value,
        "status": job.status.value,
        "version": job.version,
        "changed": changed,
    }


def check_ownership(services: Services, job: Job, viewer_session_id: str) -> None:
    """Allow the job's own session, its caller's, or an ancestor's (docs/contracts.md#job-output).

    The rule lives in :func:`chaz.access.visibility.check_job`, the one visibility
    check; this name stays for the callers that know it.
    """
    visibility.check_job(services, job, viewer_session_id)


def job_output(
    services: Services,
    job_id: str,
    viewer_session_id: str | None,
    *,
    block: bool = True,
    timeout: float = 30.0,
    full: bool = False,
) -> dict[str, Any]:
    """A job's state and (bounded) result, after the ownership check.

    ``viewer_session_id=None`` is the operator's view (the producer API), which
    is authorized by whoever holds the client, not by session lineage. A job
    the viewer may not read is answered exactly as a missing one
    (``job.not_found``, the same message and details:
    docs/contracts.md#invariant-9), so a model cannot learn which ids exist.

    A result longer than the cap comes back as its excerpt with its
    ``artifact`` (docs/contracts.md#result-cap). ``full=True`` returns the
    whole text instead: of a cut result only while its artifact exists
    (:class:`~chaz.errors.ArtifactNotFound` once retention removed it); a
    result within the cap is whole already and comes back as it is.
    """
    job = services.store.get_job(job_id)
    if viewer_session_id is not None:
        try:
            check_ownership(services, job, viewer_session_id)
        except Unauthorized:
            raise missing_job(job_id) from None
    if block and not job.status.terminal:
        try:
            job = wait_terminal(services, job_id, timeout)
        except Timeout:
            job = services.store.get_job(job_id)
    text = job.result
    # The artifact is read after the job: it cannot have appeared since (it
    # commits with the result), and if retention removed it in between, the
    # text read still is the full one it described.
    artifact = _artifact(services, job.id, text)
    if full:
        if artifact is None and text is not None and (len(text) > RESULT_CAP or is_excerpt(text)):
            raise ArtifactNotFound(
                f"job {job.id} has no full result to read: its artifact expired or was never "
                "recorded",
                job_id=job.id,
            )
        result, truncated = text, False
    else:
        result, truncated = excerpt(text) if text is not None else (None, False)
        # Retention stored the excerpt: it is still a cut, with no artifact left.
        truncated = truncated or (text is not None and artifact is None and is_excerpt(text))
    return {
        "execution_id": job.id,
        "job_id": job.id,
        "session_id": job.session_id,
        "status": job.status.value,
        "version": job.version,
        "result": result,
        "truncated": truncated,
        "artifact": artifact.summary() if artifact is not None else None,
        "error": job.error,
    }


def _artifact(services: Services, job_id: str, text: str | None) -> Artifact | None:
    """The artifact of ``text``, the job's result as read, if it has one that matches it.

    Only a result the cap cuts has one; and one whose size or hash does not
    match the text is not reported (docs/contracts.md#result-cap: nothing
    is named that is not there).
    """
    if text is None or len(text) <= RESULT_CAP:
        return None
    artifact = services.store.artifacts.get(job_id)
    if artifact is None:
        return None
    found = digest(text)
    if (found.byte_length, found.sha256) != (artifact.byte_length, artifact.sha256):
        return None
    return artifact
