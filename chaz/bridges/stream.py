"""Streamed answers as one message edited in place (docs/bridges.md#streaming).

A job's partials (``sessions.watch(partial=True)``) grow one message per job
and room: the first partial sends it (under :func:`stream_txn_id`, retried
like any send), later ones edit it at most once per ``edit_seconds`` (each
edit tried once: a lost edit is a preview that lags, and the next edit or
the reply catches up), and the job's stored reply is the last edit, under the
reply entry's own :func:`txn_id`, so it is sent exactly as an unstreamed
reply would be: at least once, never shown twice. Partials are a live
preview that is never stored and has no backlog: a piece missed (a gap in
the partials' seq: heard between two watches, or before a restart) leaves
the message as it was until the reply's edit makes it whole, and a job
whose first piece was missed is not streamed: its reply is sent as usual.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from chaz.bridges.base import Bridge, PlatformRefused, PlatformUnavailable, stream_txn_id, txn_id
from chaz.bridges.state import State
from chaz.domain.entries import Entry, EntryType

__all__ = ["PartialLike", "Streams"]

log = logging.getLogger("chaz.bridges")
#: How many ended jobs a room remembers, to ignore a partial heard after its reply.
ENDED_KEPT = 256


class PartialLike(Protocol):
    """What the bridge reads of a ``chaz.Partial`` (the remote watch's)."""

    @property
    def job_id(self) -> str: ...
    @property
    def step(self) -> int: ...
    @property
    def seq(self) -> int: ...
    @property
    def text(self) -> str: ...


@dataclass
class _Live:
    """What this run has seen of one job's stream."""

    step: int
    seq: int
    text: str
    shown: float = 0.0
    event_id: str | None = None
    #: A partial of this attempt's step was missed: the text is not shown.
    holed: bool = False


class Streams:
    """The streams of one room's session; driven by that room's outbound thread."""

    def __init__(
        self,
        bridge: Bridge,
        state: State,
        room: str,
        session_id: str,
        *,
        edit_seconds: float,
        send: Callable[[str, str, str, str | None], str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bridge = bridge
        self.state = state
        self.room = room
        self.session_id = session_id
        self.edit_seconds = edit_seconds
        #: ``send(room, txn, text, replaces)``, retried until it lands.
        self._send = send
        self._clock = clock
        self._live: dict[str, _Live] = {}
        self._ended: deque[str] = deque(maxlen=ENDED_KEPT)
        #: Edits sent (partials) and edits not sent because the throttle held them.
        self.edits = 0

    def partial(self, part: PartialLike) -> None:
        """One partial: start the job's message, or edit it if the throttle allows."""
        if part.job_id in self._ended:
            return
        live = self._live.get(part.job_id)
        if live is None:
            # Known from before a restart, or new: its message's id, if sent.
            _, event_id = self.state.stream(self.room, part.job_id)
            live = _Live(step=part.step, seq=0, text="", event_id=event_id)
            self._live[part.job_id] = live
        again = part.seq <= live.seq  # a new attempt of the job: seq starts at 1 again
        if again or part.step != live.step:
            # A new attempt or a new model step: the answer starts over, and so
            # does the message's text (seq counts an attempt's partials, all steps).
            live.step, live.text = part.step, ""
            live.holed = part.seq != 1 if again else part.seq != live.seq + 1
        elif part.seq != live.seq + 1:
            live.holed = True
        live.seq = part.seq
        live.text += part.text
        if live.holed or not live.text.strip():
            # A piece was missed (heard between two watches, or before a
            # restart): the text has a hole, so the message waits for the
            # reply rather than show it. And no empty message: wait for words.
            return
        if live.event_id is None:
            live.event_id = self._open(part.job_id, live.text)
            live.shown = self._clock()
            return
        now = self._clock()
        if now - live.shown < self.edit_seconds:
            return  # the next partial after the interval, or the reply, shows it
        live.shown = now
        try:
            # A fresh id: an edit is a preview, tried once, never replayed.
            txn = f"chaz.edit.{uuid.uuid4().hex}"
            self.bridge.send(self.room, txn, live.text, replaces=live.event_id)
            self.edits += 1
        except (PlatformUnavailable, PlatformRefused) as exc:
            log.info(
                "chaz bridge: an edit of %s in %s was not taken: %s", part.job_id, self.room, exc
            )

    def reply(self, entry: Entry) -> tuple[bool, str | None]:
        """Send ``entry`` (a visible entry) as the end of its job's stream, if
        its job streamed here: ``(handled, ended job)``. An agent's Message is
        the stream message's last edit; an Error ends the stream (the caller
        sends it as a notice of its own, and the message keeps its text); an
        approval request is sent as usual and ends nothing."""
        job = entry.job_id
        if job is None or entry.type is EntryType.APPROVAL_REQUEST:
            # A request mid-turn does not end the answer: it goes on streaming
            # (into the same message) once the request is decided.
            return False, None
        begun, event_id = self.state.stream(self.room, job)
        live = self._live.pop(job, None)
        if not begun:
            return False, None
        self._ended.append(job)
        if entry.type is not EntryType.MESSAGE:
            return False, job
        if event_id is None:
            # Killed before the first send's id was saved: the same first send
            # again finds the message (or makes it, if it never landed).
            text = live.text if live is not None and live.text.strip() else entry.content
            event_id = self._send(self.room, stream_txn_id(self.room, job), text, None)
        self._send(
            self.room, txn_id(self.room, self.session_id, entry.seq), entry.content, event_id
        )
        return True, job

    def _open(self, job: str, text: str) -> str:
        self.state.begin_stream(self.room, job)
        event_id = self._send(self.room, stream_txn_id(self.room, job), text, None)
        self.state.stream_sent(self.room, job, event_id)
        return event_id
