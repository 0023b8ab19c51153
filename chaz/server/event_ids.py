"""The ``id:`` of a stream's events: where in a run's stream an event is, so
that a client that drops can rejoin right after it (docs/http.md#streams).

An id is ``TAG.SEQ.PART.KIND`` + ``INDEX``, for instance
``5d41402a.7.1733340000123-0.p0``:

- ``TAG``: 8 hex digits of the SHA-256 of the run id, so an id of another
  run is refused rather than resumed from an unrelated place;
- ``SEQ``: the seq of the last entry of the run it had sent a step for (the
  run's input before any);
- ``PART``: the buffer position of the last of the run's partials it had
  sent (``0``: none yet; a position is a Redis Stream id, ``MS-N``);
- ``KIND``: the step the event belongs to: ``s`` the start (the input's
  seq, no partial), ``p`` a partial (the one at ``PART``), ``e`` an entry of
  the run (the one at ``SEQ``, with the run's end when it ends the run);
- ``INDEX``: the event's slot in its step (:data:`SLOTS`), the same whatever
  the stream modes, so a rejoin in other modes still resumes after it.

Pure: nothing here reads or writes.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace

from chaz.errors import ValidationError

#: The header a client rejoins with.
HEADER = "Last-Event-ID"
#: Per step kind, its events' slots in order: an event's index is its slot.
SLOTS: dict[str, tuple[str, ...]] = {
    "s": ("metadata", "values", "events"),
    "p": ("messages", "events"),
    "e": ("updates", "events", "values", "events", "error", "end"),
}
#: The longest id a client may send back (a longer one is not ours).
MAX_LENGTH = 80

_PART = re.compile(r"0|[0-9]{1,20}-[0-9]{1,20}")
_SHAPE = re.compile(
    r"(?P<tag>[0-9a-f]{8})\.(?P<seq>[0-9]{1,18})\.(?P<part>[0-9-]{1,41})\.(?P<kind>[spe])(?P<index>[0-9])"
)


def tag(run_id: str) -> str:
    """The run's mark in its events' ids."""
    return hashlib.sha256(run_id.encode()).hexdigest()[:8]


@dataclass(frozen=True)
class EventId:
    """A position in a run's stream: the step ``kind`` at (``seq``, ``part``),
    and the event's ``index`` in it (-1: before the step's first event)."""

    run_id: str
    seq: int
    part: str
    kind: str
    index: int

    def __str__(self) -> str:
        return f"{tag(self.run_id)}.{self.seq}.{self.part}.{self.kind}{self.index}"

    def at(self, index: int) -> EventId:
        """The id of this step's event in slot ``index``."""
        return replace(self, index=index)

    @classmethod
    def start(cls, run_id: str, input_seq: int) -> EventId:
        """The position before a run's first event."""
        return cls(run_id, input_seq, "0", "s", -1)


def parse(raw: str, run_id: str, *, input_seq: int, last_seq: int) -> EventId:
    """The position a client's ``Last-Event-ID`` names in run ``run_id``'s
    stream, whose input has seq ``input_seq`` in a session at ``last_seq``.

    Anything else (malformed, of another run, past the session's end, a start
    step at another place) is ``request.invalid`` naming the header: never
    resumed from a guess."""
    found = _SHAPE.fullmatch(raw) if len(raw) <= MAX_LENGTH else None
    if found is None:
        raise _invalid("is not an id of a chaz stream")
    if found["tag"] != tag(run_id):
        raise _invalid(f"is not an id of run {run_id}'s stream")
    seq, part, kind, index = (
        int(found["seq"]),
        found["part"],
        found["kind"],
        int(found["index"]),
    )
    if not _PART.fullmatch(part):
        raise _invalid("has a malformed partial position")
    if index >= len(SLOTS[kind]):
        raise _invalid(f"names no event of a {kind!r} step")
    if not input_seq <= seq <= last_seq:
        raise _invalid("names an entry outside the run")
    if kind == "s" and (seq != input_seq or part != "0"):
        raise _invalid("names a start step away from the run's input")
    if kind == "p" and part == "0":
        raise _invalid("names a partial without a position")
    if kind == "e" and seq == input_seq:
        raise _invalid("names the run's input as an entry step")
    return EventId(run_id, seq, part, kind, index)


def _invalid(why: str) -> ValidationError:
    return ValidationError(f"{HEADER} {why} (docs/http.md#streams)", field=HEADER)
