"""Stage 2 of session names: a background rename by the session's own model.

The rule: docs/contracts.md#names (details: docs/collaboration.md#names). A
session made by the ``agent`` tool or a fork (``origin`` set) starts with a
stage-1 label (:func:`chaz.domain.naming.stage1_label`). When its
finished-turn count reaches 1, 6, 16 or 40, :func:`after_turn` sends the
``chaz.rename`` Celery task (queue ``chaz.control``), whose worker calls
:func:`rename`: the session's own model reads the latest transcript, fenced
as data, and answers a title. The title is written only while the name is
still automatic (a compare-and-set: a person's rename wins) and the session
is not archived. Nothing here ever raises into a worker's loop.
"""

from __future__ import annotations

import logging

from chaz.domain.entries import EntryType
from chaz.domain.jobs import Job
from chaz.domain.naming import first_free, is_rename_point, rename_prompt, title_from_reply
from chaz.domain.sessions import NameSource, Origin, Session
from chaz.errors import NameTaken
from chaz.runtime.backends import make_backend
from chaz.runtime.backends.base import ChatMessage, TurnContext
from chaz.services import Services

log = logging.getLogger(__name__)

#: How far back (in entries) the transcript of a rename reads.
TRANSCRIPT_WINDOW = 200
#: Characters of one entry the transcript keeps.
ENTRY_CHARS = 600
#: Names tried when the title (then ``title-2``, ...) is taken concurrently.
NAME_TRIES = 5
SYSTEM_PROMPT = "You give conversations short, specific titles. You answer with the title only."


def after_turn(services: Services, session: Session, job: Job) -> None:
    """Called after each job's end: send a rename when the session reached a rename point.

    Free for a producer's session (``origin`` None) and a schedule's fresh
    session (named for its schedule and slot, which says what it is better
    than a model call per fire would): it returns before any read. Never
    raises: a failure to count or to send is logged.
    """
    if session.origin is None or session.origin is Origin.SCHEDULE:
        return
    try:
        if session.name_source is NameSource.USER or session.archived_at is not None:
            return
        if is_rename_point(services.store.count_turns(session.id)):
            services.dispatcher.rename(session.id)
    except Exception:
        log.warning(
            "could not schedule the rename of session %s after job %s",
            session.id,
            job.id,
            exc_info=True,
        )


def rename(services: Services, session_id: str) -> str | None:
    """Rename the session from its transcript; the name written, or None.

    Not when a person named it (``name_source`` user) or it is archived.
    Failures (the model, the database) are logged, never raised.
    """
    try:
        return _rename(services, session_id)
    except Exception:
        log.warning("renaming session %s failed", session_id, exc_info=True)
        return None


def _rename(services: Services, session_id: str) -> str | None:
    store = services.store
    session = next((s for s in store.find_sessions(session_id) if s.id == session_id), None)
    if session is None or session.name_source is not NameSource.AUTO or session.archived_at:
        return None
    transcript = _transcript(services, session)
    if not transcript:
        return None
    prompt = rename_prompt(transcript)
    messages: list[ChatMessage] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": prompt},
    ]
    backend = make_backend(store.get_agent(session.agent_id), services.settings)
    try:
        reply = backend.complete(
            messages, [], TurnContext(session_id=session.id, job_id="", trigger_content=prompt)
        )
    finally:
        close = getattr(backend, "close", None)
        if callable(close):
            close()
    title = title_from_reply(reply.text)
    if title is None or _bears(session.name, title):
        return None
    taken = store.names_with_prefix(title, project=session.project) - {session.name}
    for _ in range(NAME_TRIES):
        name = first_free(title, taken)
        try:
            done = store.rename_session(session.id, name, source=NameSource.AUTO, only_if_auto=True)
        except NameTaken:
            taken.add(name)  # taken since we looked: the next candidate
            continue
        return done.name if done is not None else None
    log.warning("no free name for session %s near %r", session.id, title)
    return None


def _bears(name: str | None, title: str) -> bool:
    """Whether ``name`` is ``title`` already, or ``title`` with a uniqueness suffix:
    a second rename to the same title (two rename points, a redelivered task)
    must not walk the suffix up."""
    if name is None:
        return False
    return name == title or (name.startswith(f"{title}-") and name[len(title) + 1 :].isdigit())


def _transcript(services: Services, session: Session) -> str:
    """The session's latest Messages and Directives, one ``sender: text`` each."""
    entries = services.store.entries(
        session.id,
        after=max(0, session.last_seq - TRANSCRIPT_WINDOW),
        types=[EntryType.MESSAGE, EntryType.DIRECTIVE],
    )
    lines = []
    for e in entries:
        text = " ".join(e.content.split())
        if len(text) > ENTRY_CHARS:
            text = text[:ENTRY_CHARS] + " [...]"
        lines.append(f"{e.sender}: {text}")
    return "\n".join(lines)
