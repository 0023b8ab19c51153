"""Runs on a thread: the job a message admits (docs/http.md#runs).

A run's input message is written to the thread's session under the
processing rule (the write admits the turn, in the session's lane and queue),
and its output is the reply. ``enqueue`` is what the lane does anyway;
``reject`` refuses a run on a busy thread; ``interrupt`` and ``rollback``
cancel the runs in progress (:mod:`chaz.usecases.multitask`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from chaz.coord.partials import Partial
from chaz.coord.pubsub import Subscription
from chaz.domain.entries import Entry, EntryType, KeyScope, NewEntry, is_agent_sender
from chaz.domain.jobs import Job, JobStatus, missing_job
from chaz.domain.multitask import CancelAction, Strategy, cancel_action
from chaz.domain.multitask import strategy as parse_strategy
from chaz.domain.principals import DEFAULT_PERSON, Grant, grant_names
from chaz.domain.sessions import Session, missing_session
from chaz.domain.validation import check_content, check_ref
from chaz.errors import SessionBusy, Timeout, Unsupported, ValidationError
from chaz.server import awaited, fields, mapping
from chaz.server.awaited import Awaited, Gate
from chaz.server.state import Call, Caller, Payload
from chaz.server.waits import detached
from chaz.store.types import Appended, JobFields
from chaz.usecases import admission, multitask, webhooks
from chaz.usecases.control import cancel, wait_terminal
from chaz.usecases.watch import watch

router = APIRouter()

#: The fields of a run's body chaz implements (the others are refused).
RUN_FIELDS = ("assistant_id", "input", "multitask_strategy", "stream_mode", "webhook")
#: Values of other fields that mean what chaz does anyway.
#: (Every chaz stream is resumable: docs/http.md#streams.)
RUN_DEFAULTS: dict[str, tuple[object, ...]] = {
    "on_disconnect": ("continue",),
    "stream_resumable": (True,),
}
#: How long ``/runs/wait`` and ``/runs/stream`` follow a run before ``timeout``.
FOLLOW_SECONDS = 3600.0
#: How long a run's end may trail its reply or Error entry.
END_SECONDS = 30.0
#: The most runs one list returns.
MAX_RUNS = 1000


@dataclass
class Started:
    """A run just admitted: its session, the input entry and the job."""

    session: Session
    entry: Entry
    job: Job
    strategy: str
    #: A ``time.monotonic()`` before the input entry was written (see :func:`follow`).
    written_after: float | None = None

    @property
    def headers(self) -> dict[str, str]:
        """Where the run is, as LangGraph's clients read it."""
        return {"Content-Location": f"/threads/{self.session.id}/runs/{self.job.id}"}


def start(c: Call, thread_id: str, given: dict[str, Any], streamed: bool) -> Started:
    """Check a run's body and admit it: the input message written to the thread."""
    c.principal.require(Grant.SESSION_WRITE, "start runs")
    fields.refuse_unknown(given, RUN_FIELDS, defaults=RUN_DEFAULTS)
    strategy = parse_strategy(given.get("multitask_strategy"))
    if strategy.displaces:
        c.principal.require(Grant.RUNTIME_CONTROL, f"start runs with {strategy} (it cancels runs)")
    modes = fields.stream_modes(given.get("stream_mode"))
    if not streamed and modes != ("values",):
        raise Unsupported(
            "stream_mode is for /runs/stream and a rejoin's query: chaz keeps no modes with a run",
            field="stream_mode",
        )
    raw_hook = given.get("webhook")
    hook = None if raw_hook is None else webhooks.check(c.services.settings, raw_hook)
    thread_id = check_ref("thread_id", thread_id)
    assistant = check_ref("assistant_id", given.get("assistant_id"))
    cap = c.services.settings.max_content_bytes
    content = check_content(EntryType.MESSAGE, fields.input_text(given.get("input")), max_bytes=cap)
    principal = c.principal
    sender = DEFAULT_PERSON if principal.operator else principal.name
    if not c.services.store.admits(EntryType.MESSAGE, sender):
        # The processing rule: a saved agent's own message starts no turn.
        raise ValidationError(
            f"{sender} is a saved agent: its message admits no run", field="x-api-key"
        )
    draft = NewEntry(EntryType.MESSAGE, sender, content, None, None, KeyScope.USER)
    job_fields = JobFields(owner=principal.name, grants=grant_names(principal.grants), webhook=hook)
    # Before the write: its entry commits (and is published) after this moment.
    written_after = time.monotonic()
    if strategy is Strategy.ENQUEUE:
        # The common run: the thread is checked on the row the admission
        # locks, not read first (a thread deleted meanwhile admits nothing).
        done, session = admission.admit_checked(
            c.services,
            thread_id,
            draft,
            lambda tx: runnable(tx.session, thread_id, assistant),
            job_fields=job_fields,
            project=principal.project,
        )
    else:
        session = runnable(c.thread(thread_id), thread_id, assistant)
        done = _displacing(c, session, draft, strategy, job_fields)
    if done.entry.job_id is None:
        # Only in a room whose routing woke no agent: the message stays, as a post's would.
        raise ValidationError("the message was written but woke no agent", field="input")
    job = done.job if done.job is not None else c.services.store.get_job(done.entry.job_id)
    return Started(session, done.entry, job, strategy.value, written_after)


def runnable(session: Session, thread_id: str, assistant: str) -> Session:
    """``session``, if a run of ``assistant`` may start on it as thread ``thread_id``:
    a deleted (archived) thread is a missing one, and its agent is its assistant."""
    if session.id != thread_id or session.archived_at is not None:
        raise missing_session(thread_id)
    if assistant != session.agent_id:
        raise ValidationError(
            f"thread {session.id} is a session of {session.agent_id!r}: runs on it use that "
            "assistant",
            field="assistant_id",
        )
    return session


def _displacing(
    c: Call, session: Session, draft: NewEntry, strategy: Strategy, job_fields: JobFields
) -> Appended:
    """The admission of a run under ``reject``, ``interrupt`` or ``rollback``."""
    if strategy.displaces:
        return multitask.admit_displacing(
            c.services, session.id, draft, strategy, principal=c.principal, job_fields=job_fields
        ).done
    try:
        return admission.admit_unless_busy(
            c.services, session.id, draft, job_fields=job_fields, project=c.principal.project
        )
    except SessionBusy as exc:
        raise SessionBusy(
            f"thread {session.id} has a run in progress (multitask_strategy reject)",
            field="multitask_strategy",
            thread_id=session.id,
        ) from exc


def follow(
    c: Call,
    session_id: str,
    job_id: str,
    *,
    after: int,
    partial: bool = False,
    written_after: float | None = None,
) -> Iterator[Entry | Partial]:
    """The session's entries after seq ``after``, and with ``partial`` the
    job's partials, up to and including the job's reply or Error.

    ``written_after``: a ``time.monotonic()`` before entry ``after`` was
    written by this process; if the shared subscription has heard the
    session since before then, the backlog is not read (chaz/usecases/watch.py)."""
    for item in watch(
        c.services.store,
        c.services.redis,
        session_id,
        after=after,
        timeout=FOLLOW_SECONDS,
        partial=partial,
        subscriber=c.services.subscriber,
        written_after=written_after,
    ):
        if isinstance(item, Partial):
            if item.job_id == job_id:
                yield item
            continue
        yield item
        if item.job_id == job_id and ends_run(item):
            return
    raise Timeout(f"run {job_id} did not end within {FOLLOW_SECONDS:g}s", run_id=job_id)


def ended(c: Call, session: Session, job: Job) -> Job:
    """The job once it has ended. ``session`` was read before ``job``: a job
    not ended then writes its reply or Error after ``session.last_seq``."""
    if not job.status.terminal:
        for _ in follow(c, session.id, job.id, after=session.last_seq):
            pass
    return wait_terminal(c.services, job.id, END_SECONDS)


def finished(c: Call, session: Session, job: Job) -> dict[str, Any]:
    """What a run that ended answers: the thread's values, or ``__error__``."""
    error = outcome(job)
    return {"__error__": error} if error else mapping.values(c.said(session.id))


def ends_run(entry: Entry) -> bool:
    """Whether ``entry`` is the last a run writes: the agent's reply, or an Error."""
    return entry.type is EntryType.ERROR or (
        entry.type is EntryType.MESSAGE and is_agent_sender(entry.sender)
    )


def outcome(job: Job) -> dict[str, Any] | None:
    """A failed run's ``__error__`` body (None for any other run)."""
    if job.status is not JobStatus.FAILED:
        return None
    error = job.error or {}
    return {"error": error.get("code", "chaz.error"), "message": error.get("message", "")}


@router.post("/threads/{thread_id}/runs")
def create_run(thread_id: str, c: Caller, payload: Payload = None) -> JSONResponse:
    """Start a run in the background: the run, ``pending`` until a worker takes it."""
    run = start(c, thread_id, fields.body(payload), streamed=False)
    body = mapping.run(run.job, run.session.agent_id, run.strategy)
    return JSONResponse(body, headers=run.headers)


def run_and_wait(c: Call, thread_id: str, given: dict[str, Any]) -> JSONResponse:
    """Start a run and block until it ends: the thread's values, or ``__error__``."""
    run = start(c, thread_id, given, streamed=False)
    seen: list[Entry] = []
    for item in follow(
        c, run.session.id, run.job.id, after=run.entry.seq, written_after=run.written_after
    ):
        if isinstance(item, Entry):
            seen.append(item)
    if seen and seen[-1].type is EntryType.MESSAGE:
        # The reply commits in the transaction that ends its job succeeded (a
        # turn's end_turn; a cancel that wins writes an Error instead): the run
        # has ended, and its status needs no read.
        return JSONResponse(replied(c, run, seen), headers=run.headers)
    job = wait_terminal(c.services, run.job.id, END_SECONDS)
    return JSONResponse(finished(c, run.session, job), headers=run.headers)


def replied(c: Call, run: Started, seen: list[Entry]) -> dict[str, Any]:
    """The thread's values once ``run`` has replied (``seen``: the entries
    after its input, up to the reply): from the replica's copy when it may
    be used (chaz/server/convo.py), else read."""
    if c.conversations is None or run.written_after is None:
        return mapping.values(c.said(run.session.id))
    return c.conversations.answer(c.services, run.entry, seen, run.written_after)


@router.post("/threads/{thread_id}/runs/wait")
async def wait_run(
    thread_id: str, c: Caller, request: Request, payload: Payload = None
) -> JSONResponse:
    """Start a run and answer when it ends: the thread's values, or ``__error__``.
    A client that leaves frees the server's thread; the run goes on."""
    return await wait_run_call(c, thread_id, fields.body(payload), request)


async def wait_run_call(
    c: Call, thread_id: str, given: dict[str, Any], request: Request
) -> JSONResponse:
    """:func:`wait_run`'s work, for FastAPI's route and for the fast path
    (chaz/server/fastpath.py), which answers the same request without it.

    What :func:`run_and_wait` does, with the wait for the reply on the event
    loop instead of in a thread (chaz/server/awaited.py)."""
    gate = c.gate or Gate(c.services.pool.size, c.services.pool.timeout)
    loop = asyncio.get_running_loop()
    run, waiting, sub = await gate.run(_begin, c, thread_id, given, loop)
    try:
        if not waiting.done:
            read = partial(_entries, c, run.session.id)
            await waiting.until_end(gate, sub, read, ends_run, request, FOLLOW_SECONDS)
    finally:
        sub.close()
    seen = waiting.seen
    if seen[-1].type is EntryType.MESSAGE:
        # As run_and_wait: the reply commits with its job's success.
        body = await gate.run(replied, c, run, seen)
        return JSONResponse(body, headers=run.headers)
    job_id = run.job.id
    body = await detached(
        request, lambda: finished(c, run.session, wait_terminal(c.services, job_id, END_SECONDS))
    )
    return JSONResponse(body, headers=run.headers)


def _begin(
    c: Call, thread_id: str, given: dict[str, Any], loop: asyncio.AbstractEventLoop
) -> tuple[Started, Awaited, Subscription]:
    """The blocking start of :func:`wait_run_call`: the run admitted, its
    thread's channel listened to (the wait woken on ``loop``), and, unless the
    subscription has heard the thread since before the input was written,
    the entries already after the input."""
    run = start(c, thread_id, given, streamed=False)
    waiting = Awaited(run.session.id, run.job.id, run.entry.seq, loop)
    sub = c.services.subscriber.listen(awaited.channel(run.session.id), wake=waiting.wake)
    try:
        heard = sub.since
        if run.written_after is None or heard is None or heard >= run.written_after:
            waiting.take(_entries(c, run.session.id, run.entry.seq, None), ends_run)
    except BaseException:
        sub.close()
        raise
    return run, waiting, sub


def _entries(c: Call, session_id: str, after: int, until: int | None) -> list[Entry]:
    return c.services.store.entries(session_id, after=after, until=until)


@router.get("/threads/{thread_id}/runs")
def list_runs(
    thread_id: str,
    c: Caller,
    request: Request,
    limit: int = Query(10, ge=1, le=MAX_RUNS),
    offset: int = Query(0, ge=0, le=100_000),
    status: str | None = Query(None),
) -> list[dict[str, Any]]:
    """The thread's runs, newest first; ``status`` keeps the runs of one status."""
    c.principal.require(Grant.HISTORY_READ, "read runs")
    fields.refuse_unknown(request.query_params, ("limit", "offset", "status"))
    if status is not None and status not in mapping.JOB_STATES:
        raise ValidationError(
            "status must be one of " + ", ".join(mapping.JOB_STATES), field="status"
        )
    session = c.thread(thread_id)
    jobs = c.services.store.list_jobs(
        session_id=session.id,
        statuses=None if status is None else mapping.JOB_STATES[status],
        limit=offset + limit,
        newest_first=True,
        project=c.principal.project,
        hidden=False,
    )[offset:]
    return [mapping.run(j, session.agent_id) for j in jobs]


def thread_run(c: Call, thread_id: str, run_id: str) -> tuple[Session, Job]:
    """The thread and its run, in the principal's project; a run of another
    thread, or one deleted (hidden), is answered exactly like a missing one."""
    session = c.thread(thread_id)
    job = c.services.store.get_job(check_ref("run_id", run_id), project=c.principal.project)
    if job.session_id != session.id or job.hidden_at is not None:
        raise missing_job(run_id)
    return session, job


@router.get("/threads/{thread_id}/runs/{run_id}")
def get_run(thread_id: str, run_id: str, c: Caller) -> dict[str, Any]:
    """One run of the thread."""
    c.principal.require(Grant.HISTORY_READ, "read runs")
    session, job = thread_run(c, thread_id, run_id)
    return mapping.run(job, session.agent_id)


@router.get("/threads/{thread_id}/runs/{run_id}/join")
async def join_run(thread_id: str, run_id: str, c: Caller, request: Request) -> dict[str, Any]:
    """Answer when the run has ended (at once if it has): the thread's values,
    or ``__error__`` for a failed run, as ``/runs/wait`` does."""
    c.principal.require(Grant.HISTORY_READ, "read runs")

    def joined() -> dict[str, Any]:
        session, job = thread_run(c, thread_id, run_id)
        return finished(c, session, ended(c, session, job))

    return await detached(request, joined)


@router.post(
    "/threads/{thread_id}/runs/{run_id}/cancel",
    response_model=None,
    responses={202: {"description": "the cancel is requested (without wait): no body"}},
)
def cancel_run(
    thread_id: str,
    run_id: str,
    c: Caller,
    request: Request,
    wait: bool = Query(False),
    action: str = Query("interrupt"),
) -> Response | dict[str, Any]:
    """Cancel a run (chaz's ``execution.cancel``: the turn stops, its entries
    stay); ``action=rollback`` also hides its entries from the thread's values
    and later context. With ``wait``, answer when it has ended."""
    c.principal.require(Grant.RUNTIME_CONTROL, "cancel runs")
    fields.refuse_unknown(request.query_params, ("wait", "action"))
    chosen = cancel_action(action)
    session, job = thread_run(c, thread_id, run_id)
    if chosen is CancelAction.ROLLBACK:
        multitask.roll_back(
            c.services, job.id, principal=c.principal, reason="rolled back over HTTP"
        )
    else:
        cancel(c.services, job.id, principal=c.principal, reason="cancelled over HTTP")
    if not wait:
        return Response(status_code=202)
    return mapping.run(ended(c, session, job), session.agent_id)
