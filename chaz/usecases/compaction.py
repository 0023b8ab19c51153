"""Compaction: a Summary entry, made by the session's own model, that later turns start from.

A Summary is a context start boundary (docs/contracts.md#context): a turn
reads its context from the latest Summary on
(:meth:`chaz.store.Store.turn_setup`), so its cost stays flat however long the
session grows. :func:`compact` writes a new Summary at the session's head that
stands for the context since the previous one (that Summary included): a
person's ``client.sessions.compact`` / ``chaz sessions compact``, and
:func:`after_turn`, the automatic trigger, when a turn's context passed
``Limits.max_context_chars``.

Ordering: compaction runs under the session's **lane**, the same lease a
turn runs under, so it never runs beside a turn of the session; a turn
admitted meanwhile waits in the lane and runs after it. The Summary is
written under the session row's lock and only if no context entry came in
after the range it stands for (otherwise the range is read again), so no
entry is ever left between a Summary and what it summarizes.
docs/sessions.md#compaction.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

from chaz.coord.pubsub import publish
from chaz.domain.compaction import (
    SUMMARY_HEADER,
    SYSTEM_PROMPT,
    context_budget,
    context_chars,
    digest,
    pending,
    summary_key,
    summary_prompt,
)
from chaz.domain.entries import Entry, EntryType, NewEntry, Said, agent_sender
from chaz.domain.sessions import Session
from chaz.errors import SessionArchived, SessionBusy
from chaz.plumbing.dispatch import Wake
from chaz.runtime.backends import make_backend
from chaz.runtime.backends.base import ChatMessage, TurnContext
from chaz.runtime.backends.scripted import ScriptedBackend
from chaz.services import Services
from chaz.store.types import TurnSetup

log = logging.getLogger(__name__)

#: Most context entries one compaction reads (from the latest Summary on):
#: older ones are left out of the Summary, as a turn leaves them out.
MAX_RANGE_ENTRIES = 200_000
#: Times the range is read again when messages arrived while it was summarized.
ATTEMPTS = 3
#: How often a waiting compaction tries the session's lane again.
LANE_POLL_SECONDS = 0.05


def compact(services: Services, ref: str, *, timeout: float = 60.0) -> Entry | None:
    """Compact the session ``ref`` (an id or name): the Summary written, or None
    when its context has nothing since the latest Summary (a no-op).

    Waits up to ``timeout`` seconds for the session's lane (a turn running
    there finishes first), then holds it, renewed, until the Summary is
    written; then wakes the session's head job, which waited behind it.
    Missing: ``session.not_found``; archived: ``session.archived``; a lane
    held for longer, or messages arriving faster than they are summarized:
    ``session.busy`` (retryable).
    """
    session = services.store.get_session(ref)
    _check_live(session)
    sid = session.id
    token = _take_lane(services, sid, timeout, session.project)
    lease = services.lease_keeper.hold(sid, token, session.project)
    try:
        return compact_held(services, sid, auto=False, lost=lease.lost)
    finally:
        services.lease_keeper.drop(lease)
        with contextlib.suppress(Exception):
            services.lanes.release(sid, token, project=session.project)
        # Released first, looked second, as a turn's end does (chaz.usecases.turns): an
        # admission that found the lane ours sent a wake-up that was dropped.
        head = services.store.head_job(sid)
        if head is not None:
            services.dispatcher.send_wake(sid, head.id, Wake.COMPACTED, tree=head.tree_id)


def compact_held(
    services: Services, session_id: str, *, auto: bool, lost: threading.Event | None = None
) -> Entry | None:
    """Compact a session whose lane the caller holds (see :func:`compact`).

    ``lost`` is set when the lane's lease could not be renewed: a turn may
    then run beside us, so nothing is written (``session.busy``).
    """
    store = services.store
    for _ in range(ATTEMPTS):
        session, history, covers = store.compaction_range(session_id, MAX_RANGE_ENTRIES)
        _check_live(session)
        new = pending(history)
        if not new:
            return None
        text = _summarize(services, session, history)
        if lost is not None and lost.is_set():
            raise SessionBusy(
                f"session {session_id}: the compaction lost the session's lane; retry later",
                session_id=session_id,
            )
        draft = NewEntry(
            EntryType.SUMMARY,
            agent_sender(session.agent_id),
            text,
            metadata={"covers": covers, "entries": len(new), "auto": auto},
            idempotency_key=summary_key(session_id, covers),
        )
        done = store.write_summary(session_id, draft, covers)
        if done is None:
            continue  # a message came in meanwhile: summarize it too
        if done.created:
            publish(services.redis, done.entry)
        return done.entry
    raise SessionBusy(
        f"session {session_id} kept receiving messages while it was compacted; retry later",
        session_id=session_id,
    )


def after_turn(services: Services, setup: TurnSetup) -> Entry | None:
    """The automatic trigger: compact after a turn whose context passed the budget.

    The budget is ``Limits.max_context_chars`` (``CHAZ_MAX_CONTEXT_CHARS``,
    narrowed by the agent's and the session's limits; unset: off), measured
    on the context the turn read. Called by the worker while it still holds
    the session's lane, so the next turn starts from the new Summary. Never
    raises: a failed compaction is logged and tried again after the next turn.
    """
    try:
        budget = context_budget(
            services.settings.max_context_chars, setup.agent.limits, setup.session.limits
        )
        if budget is None or context_chars(setup.history) <= budget:
            return None
        if setup.session.archived:
            return None
        return compact_held(services, setup.session.id, auto=True)
    except Exception:
        log.warning("compacting session %s failed", setup.session.id, exc_info=True)
        return None


def _check_live(session: Session) -> None:
    if session.archived:
        raise SessionArchived(f"session {session.id} is archived", session_id=session.id)


def _take_lane(services: Services, session_id: str, timeout: float, project: str) -> str:
    deadline = time.monotonic() + timeout
    while True:
        token = services.lanes.acquire(
            session_id, f"compact:{session_id}", services.settings.lease_seconds, project=project
        )
        if token is not None:
            return token
        if time.monotonic() >= deadline:
            raise SessionBusy(
                f"session {session_id} was running turns for {timeout:g}s; retry later",
                session_id=session_id,
            )
        time.sleep(LANE_POLL_SECONDS)


def _summarize(services: Services, session: Session, history: list[Said]) -> str:
    """The session's own model's summary of ``history`` (the scripted model's
    is :func:`chaz.domain.compaction.digest`), cut to the content cap."""
    spec = services.store.get_agent(session.agent_id)
    backend = make_backend(spec, services.settings)
    turn = TurnContext(session_id=session.id, job_id="", trigger_content=SUMMARY_HEADER)
    fallback = digest(history)
    try:
        if isinstance(backend, ScriptedBackend):
            text = backend.summarize(fallback, turn)
        else:
            prompt = summary_prompt(history)
            messages: list[ChatMessage] = [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": prompt},
            ]
            asked = turn.model_copy(update={"trigger_content": prompt})
            text = backend.complete(messages, [], asked).text or ""
    finally:
        close = getattr(backend, "close", None)
        if callable(close):
            close()
    if not text.strip():
        text = fallback  # a Summary must have content; the digest still says what was there
    cap = services.settings.max_content_bytes
    raw = text.encode()
    return raw[:cap].decode(errors="ignore") if len(raw) > cap else text
