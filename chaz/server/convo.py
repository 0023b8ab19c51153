"""A replica's copy of each thread's values, for the answer of a run's wait
(docs/http.md#the-values-copy).

``/runs/wait`` answers the thread's values: every visible Message and
Directive of the session, read from the database after the reply, a read
that grew with the thread and was about a sixth of the server's CPU per
run (docs/performance.md). A replica keeps the last values it answered per
thread, up to the reply's seq; the next run's answer is that copy plus the
run's own input and the entries its wait already received, with no read.

When the copy may be used, checked at each answer:

* **It is exactly the thread's values up to seq** ``upto``, and the run's
  input is at ``upto + 1``: no other writer's entry came between, and the
  wait saw every entry from the input to the reply in seq order (the watch
  is gapless). Every one of them is the run's own (a run queued beside it
  makes the answer read the database).
* **No rollback has begun since the copy was checked**: a rollback hides
  entries that were visible. Its marks are counted in Redis
  (:mod:`chaz.coord.rollbacks`); the count read now must equal the copy's,
  and be even (none under way). The run itself was admitted after the copy
  was last checked, so a rollback of it would have changed the count.

Otherwise the values are read from the database (up to the reply's seq: the
thread as it was when the run ended) after reading the count, and kept.
The copy is used only by a request that has already written to the
thread under its key's project (the admission checks it), so it never
answers another project's key; a thread's copy is keyed by its globally
unique session id.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from chaz.coord import rollbacks
from chaz.domain.entries import Entry, EntryType
from chaz.server import mapping
from chaz.services import Services

#: How many threads one replica keeps values of (the least recently answered go first).
MAX_THREADS = 1024
#: A thread whose values hold more characters of content than this is not kept.
MAX_CHARS = 64 * 1024
#: A copy older than this is not used (the rollback count's key expires after a week).
MAX_AGE_SECONDS = 24 * 3600.0
#: The entry types of a thread's values.
TYPES = (EntryType.MESSAGE, EntryType.DIRECTIVE)


@dataclass(frozen=True)
class Copy:
    """A thread's values up to seq ``upto``, valid as of rollback count ``count``."""

    count: int
    upto: int
    messages: tuple[dict[str, Any], ...]
    #: ``time.monotonic()`` after the count was last read: a run admitted after
    #: it cannot have been rolled back without the count changing.
    checked: float
    #: When it was first read from the database.
    born: float
    chars: int


class Conversations:
    """Each thread's values as last answered by this replica (see the module)."""

    def __init__(self, size: int = MAX_THREADS) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._known: OrderedDict[str, Copy] = OrderedDict()
        #: Answers from the copy and from the database (tests and logs).
        self.hits = 0
        self.reads = 0

    def answer(
        self, services: Services, given: Entry, seen: list[Entry], admitted_after: float
    ) -> dict[str, Any]:
        """The values of ``given``'s thread once its run's reply (the last of
        ``seen``, the entries after ``given`` up to it) is written.
        ``admitted_after``: a ``time.monotonic()`` before ``given`` was written."""
        sid, reply = given.session_id, seen[-1]
        count = rollbacks.count(services.redis, sid)
        checked = time.monotonic()
        with self._lock:
            known = self._known.get(sid)
        if known is not None and self._extends(known, count, given, seen, admitted_after):
            added = [m for m in map(mapping.message, [given, *seen]) if m is not None]
            messages = (*known.messages, *added)
            chars = known.chars + sum(len(m["content"]) for m in added)
            self._keep(sid, known, Copy(count, reply.seq, messages, checked, known.born, chars))
            self.hits += 1
            return {"messages": list(messages)}
        said = services.store.said(sid, TYPES, visible=True, until=reply.seq)
        fresh = tuple(m for m in map(mapping.message, said) if m is not None)
        if count % 2 == 0:
            chars = sum(len(m["content"]) for m in fresh)
            self._keep(sid, known, Copy(count, reply.seq, fresh, checked, checked, chars))
        self.reads += 1
        return {"messages": list(fresh)}

    @staticmethod
    def _extends(
        known: Copy, count: int, given: Entry, seen: list[Entry], admitted_after: float
    ) -> bool:
        return (
            count == known.count
            and count % 2 == 0
            and known.upto == given.seq - 1
            and known.checked < admitted_after
            and time.monotonic() - known.born < MAX_AGE_SECONDS
            and all(e.job_id == given.job_id for e in seen)
        )

    def _keep(self, sid: str, was: Copy | None, copy: Copy) -> None:
        with self._lock:
            if self._known.get(sid) is not was:
                # Another answer of this thread changed it meanwhile: drop both.
                self._known.pop(sid, None)
                return
            if copy.chars > MAX_CHARS:
                self._known.pop(sid, None)
                return
            self._known[sid] = copy
            self._known.move_to_end(sid)
            while len(self._known) > self._size:
                self._known.popitem(last=False)

    def forget(self) -> None:
        """Forget every thread's values."""
        with self._lock:
            self._known.clear()
