"""A run's stream of server-sent events, and rejoining it (docs/http.md#streams).

One stream is a sequence of *steps*, each a few events (per stream mode):
the start (``metadata``, the ``values`` before), one per partial of the run's
answer (``messages``), one per new conversation entry of the run
(``updates``), the last with the run's end (the ``values`` after, an
``error``, ``end``). Every event carries an id (:mod:`chaz.server.event_ids`)
naming its place; the stream from any place on is rebuilt from the stored
entries and the run's partial buffer (:func:`chaz.coord.partials.buffered`),
so a client that rejoins with the last id it got receives exactly what
followed it.

Partials are sent from the buffer, in its order; the pub/sub message that
announces one only wakes the stream. Before an entry of the run is sent, the
buffer is read to its end: a turn buffers its partials before it commits
what follows them, so a step's partials precede its reply.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from sse_starlette import EventSourceResponse

from chaz.coord.partials import Partial, buffered
from chaz.domain.entries import Entry
from chaz.domain.jobs import Job
from chaz.domain.principals import Grant
from chaz.domain.sessions import Session
from chaz.errors import Timeout, Unsupported, ValidationError
from chaz.server import fields, mapping
from chaz.server.errors import as_chaz
from chaz.server.event_ids import HEADER, EventId, parse
from chaz.server.runs import END_SECONDS, FOLLOW_SECONDS, ends_run, outcome, start, thread_run
from chaz.server.state import Call, Caller, Payload
from chaz.server.waits import streamed
from chaz.usecases.control import wait_terminal
from chaz.usecases.watch import watch

router = APIRouter()

#: The query parameters of a rejoin (``runs.join_stream``).
JOIN_QUERY = ("stream_mode", "cancel_on_disconnect")
#: The modes that send partials.
_PARTIAL_MODES = ("messages-tuple", "events")

Event = dict[str, str]


@dataclass(frozen=True)
class Stream:
    """What one stream of one run sends: its run, the input's seq, the modes."""

    c: Call
    session: Session
    job: Job
    input_seq: int
    modes: tuple[str, ...]

    @property
    def node(self) -> str:
        """The node name of ``updates`` and ``events``: the run's assistant (agent) id."""
        return self.job.member_agent_id or self.session.agent_id

    @property
    def meta(self) -> dict[str, Any]:
        """The run's ids, as the events' metadata carries them."""
        return {"run_id": self.job.id, "thread_id": self.session.id}

    def headers(self) -> dict[str, str]:
        """Where the run is, and where its stream is rejoined (the SDK's
        reconnect reads ``Location``; the query keeps the modes)."""
        run = f"/threads/{self.session.id}/runs/{self.job.id}"
        query = urlencode({"stream_mode": list(self.modes)}, doseq=True)
        return {"Content-Location": run, "Location": f"{run}/stream?{query}"}


@router.post("/threads/{thread_id}/runs/stream")
def stream_run(
    thread_id: str, c: Caller, request: Request, payload: Payload = None
) -> EventSourceResponse:
    """Start a run and stream it as server-sent events: ``metadata`` (the run's
    id) first, then what each stream mode sends, an ``error`` if it failed,
    and ``end``; every event with an ``id:`` to rejoin after."""
    if request.headers.get(HEADER):
        raise ValidationError(
            f"a new run's stream has nothing to resume: rejoin a run at "
            f"/threads/{thread_id}/runs/RUN_ID/stream with {HEADER}",
            field=HEADER,
        )
    given = fields.body(payload)
    run = start(c, thread_id, given, streamed=True)
    stream = Stream(
        c, run.session, run.job, run.entry.seq, fields.stream_modes(given.get("stream_mode"))
    )
    place = EventId.start(run.job.id, run.entry.seq)
    return EventSourceResponse(streamed(events(stream, place)), headers=stream.headers())


@router.get("/threads/{thread_id}/runs/{run_id}/stream")
def join_stream(thread_id: str, run_id: str, c: Caller, request: Request) -> EventSourceResponse:
    """Rejoin a run's stream: everything after ``Last-Event-ID`` (from the
    start without one), in the ``stream_mode`` asked (default ``values``),
    up to the run's ``end``; a run that has ended is replayed and ends."""
    c.principal.require(Grant.HISTORY_READ, "read runs")
    query = request.query_params
    fields.refuse_unknown(query, JOIN_QUERY)
    if query.get("cancel_on_disconnect", "false").lower() not in ("", "false"):
        raise Unsupported(
            "cancel_on_disconnect is not supported by chaz: a run goes on without its "
            "streams (cancel it with runs.cancel)",
            field="cancel_on_disconnect",
        )
    asked = [m for m in query.getlist("stream_mode") if m]
    session, job = thread_run(c, thread_id, run_id)
    trigger = job.trigger_entry_id
    entry = None if trigger is None else c.services.store.entry(trigger)
    if entry is None:
        raise ValidationError(f"run {job.id} has no input message to stream", field="run_id")
    raw = request.headers.get(HEADER)
    place = (
        EventId.start(job.id, entry.seq)
        if not raw
        else parse(raw, job.id, input_seq=entry.seq, last_seq=session.last_seq)
    )
    stream = Stream(c, session, job, entry.seq, fields.stream_modes(asked or None))
    return EventSourceResponse(streamed(events(stream, place)), headers=stream.headers())


def events(st: Stream, place: EventId) -> Iterator[Event]:
    """The events of ``st`` after ``place``: the rest of its step, then the
    steps that follow it, to the run's end."""
    if place.kind == "s":
        yield from _after(place, _start(st))
    elif place.kind == "p":
        for position, partial in buffered(st.c.services.redis, st.job.id, place.part, only=True):
            yield from _after(replace(place, part=position), _partial(st, partial))
    else:
        (entry,) = st.c.services.store.entries(st.session.id, after=place.seq - 1, until=place.seq)
        yield from _after(place, _entry(st, entry))
        if _ends_run(st, entry):
            return
    yield from _follow(st, place)


def _follow(st: Stream, place: EventId) -> Iterator[Event]:
    """The steps after ``place``: the buffer's partials, and the entries after
    ``place.seq`` as the session's watch yields them, to the run's end."""
    svc = st.c.services
    items = watch(
        svc.store,
        svc.redis,
        st.session.id,
        after=place.seq - 1,
        timeout=FOLLOW_SECONDS,
        partial=any(m in st.modes for m in _PARTIAL_MODES),
        subscriber=svc.subscriber,
    )
    cursor = _Cursor(st, place)
    try:
        # The entry at place.seq, sent already: once it is here the watch has
        # subscribed, so a partial buffered from now on wakes it.
        next(items)
        yield from cursor.drain()
        for item in items:
            if isinstance(item, Partial):
                if item.job_id == st.job.id:
                    yield from cursor.drain()
                continue
            if item.job_id != st.job.id or not (_ends_run(st, item) or mapping.message(item)):
                continue
            yield from cursor.drain()
            cursor.seq = item.seq
            yield from cursor.send("e", _entry(st, item))
            if _ends_run(st, item):
                return
        raise Timeout(f"run {st.job.id} did not end within {FOLLOW_SECONDS:g}s", run_id=st.job.id)
    except Exception as exc:
        # A timeout, a backend's error or a bug: an ``error`` event, so that
        # the client does not take the stream's end for the run's. It
        # carries the id of the event before it: a rejoin resumes the run,
        # not the failure.
        failed = as_chaz(exc)
        yield _event(cursor.last, "error", {"error": failed.code, "message": failed.message})
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()  # unsubscribes


class _Cursor:
    """Where a stream is: the last entry it sent a step for (or the input), and
    the last partial it sent. Entries read past without a step are not
    counted: a partial's place is then the same in every stream of the run,
    however far each had read when it heard the partial."""

    def __init__(self, st: Stream, place: EventId) -> None:
        self.st = st
        self.seq = place.seq
        self.part = place.part
        self.last = place

    def drain(self) -> Iterator[Event]:
        """The buffer's partials after the last sent."""
        for position, partial in buffered(self.st.c.services.redis, self.st.job.id, self.part):
            self.part = position
            yield from self.send("p", _partial(self.st, partial))

    def send(self, kind: str, step: Iterator[tuple[int, str, object]]) -> Iterator[Event]:
        """One step's events, at the stream's current place."""
        here = EventId(self.st.job.id, self.seq, self.part, kind, -1)
        for index, name, data in step:
            self.last = here.at(index)
            yield _event(self.last, name, data)


def _after(place: EventId, step: Iterator[tuple[int, str, object]]) -> Iterator[Event]:
    """The events of ``place``'s step after it."""
    for index, name, data in step:
        if index > place.index:
            yield _event(place.at(index), name, data)


def _start(st: Stream) -> Iterator[tuple[int, str, object]]:
    yield 0, "metadata", st.meta
    if "values" in st.modes or "events" in st.modes:
        before = st.c.said(st.session.id, until=st.input_seq)
        if "values" in st.modes:
            yield 1, "values", mapping.values(before)
        if "events" in st.modes:
            given = mapping.values(e for e in before if e.seq == st.input_seq)
            yield 2, "events", _lc_event(st, "on_chain_start", {"input": given})


def _partial(st: Stream, partial: Partial) -> Iterator[tuple[int, str, object]]:
    chunk = mapping.chunk(partial.job_id, partial.step, partial.text)
    meta = {**st.meta, "step": partial.step}
    if "messages-tuple" in st.modes:
        yield 0, "messages", [chunk, meta]
    if "events" in st.modes:
        yield (
            1,
            "events",
            _lc_event(st, "on_chat_model_stream", {"chunk": chunk}, step=partial.step),
        )


def _entry(st: Stream, entry: Entry) -> Iterator[tuple[int, str, object]]:
    said = mapping.message(entry)
    if said is not None:
        update = {"messages": [said]}
        if "updates" in st.modes:
            yield 0, "updates", {st.node: update}
        if "events" in st.modes:
            yield 1, "events", _lc_event(st, "on_chain_stream", {"chunk": update})
    if not _ends_run(st, entry):
        return
    job = wait_terminal(st.c.services, st.job.id, END_SECONDS)
    if "values" in st.modes or "events" in st.modes:
        upto = st.c.said(st.session.id, until=entry.seq)
        if "values" in st.modes:
            yield 2, "values", mapping.values(upto)
        if "events" in st.modes:
            yield 3, "events", _lc_event(st, "on_chain_end", {"output": mapping.values(upto)})
    error = outcome(job)
    if error:
        yield 4, "error", error
    yield 5, "end", {"run_id": job.id, "status": mapping.RUN_STATUS[job.status]}


def _lc_event(st: Stream, kind: str, data: dict[str, Any], **meta: object) -> dict[str, Any]:
    """An ``events`` mode event, in the shape of LangChain's ``astream_events`` v2."""
    return {
        "event": kind,
        "name": st.node,
        "run_id": st.job.id,
        "tags": [],
        "metadata": {**st.meta, **meta},
        "data": data,
        "parent_ids": [],
    }


def _ends_run(st: Stream, entry: Entry) -> bool:
    return entry.job_id == st.job.id and entry.seq > st.input_seq and ends_run(entry)


def _event(place: EventId, name: str, data: object) -> Event:
    return {"id": str(place), "event": name, "data": json.dumps(data, separators=(",", ":"))}
