"""The ``events`` table: a session's append-only log, and reading it in order.

An event is written inside the transaction of the change it records
(:func:`record`), or on its own (:meth:`EventLog.add`). Ids come from one
counter for the whole table, so one session's ids have gaps (other
sessions' events) but only grow.

Reading "everything after id N" must not skip an event that commits late.
SQLite has one writer at a time, so ids commit in order. PostgreSQL takes an
id when a row is inserted, not when it commits: a transaction that inserted
id 10 may commit after another one inserted and committed id 11, and a
reader that saw 11 and moved on would never see 10. So on PostgreSQL a read
is *settled* before it is answered (:meth:`EventLog.list`): after reading up
to id M, it waits until every transaction that was writing to ``events`` at
that moment has ended, then reads up to M again. Any event below M that was
not committed at the first read belonged to one of those transactions, so
the second read is complete up to M. Only writers of this table are waited
for, found as holders of its ROW EXCLUSIVE lock in ``pg_locks``; they are
chaz's own short write transactions.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, delete, insert, select, text

from chaz.domain.events import Event
from chaz.domain.validation import check_json, check_text
from chaz.errors import Timeout
from chaz.ids import as_utc, utcnow
from chaz.store.models import EventRow

if TYPE_CHECKING:
    from chaz.store.db import Database

EVENTS = EventRow.__table__
_INSERT = insert(EVENTS)
#: The width of the ``kind`` column.
MAX_KIND_CHARS = 48

# The transactions (other than ours) that may hold uncommitted events: every
# INSERT into the table holds ROW EXCLUSIVE on it until its transaction ends.
_WRITERS = text(
    "SELECT DISTINCT virtualtransaction FROM pg_locks"
    " WHERE locktype = 'relation' AND relation = CAST(:table AS regclass)"
    " AND mode = 'RowExclusiveLock' AND granted AND pid <> pg_backend_pid()"
)
_STILL_WRITING = text(
    "SELECT count(*) FROM pg_locks"
    " WHERE locktype = 'relation' AND relation = CAST(:table AS regclass)"
    " AND mode = 'RowExclusiveLock' AND virtualtransaction = ANY(:writers)"
)


def record(conn: Connection, session_id: str, kind: str, data: dict[str, Any]) -> Event:
    """Append one event in the caller's open write transaction, and return it.

    In the same transaction as the change it describes: the log never shows
    a change that was rolled back, nor misses one that committed. The caller
    may publish the returned event (``chaz.coord.pubsub.publish_event``) once
    its transaction has committed, never before.
    """
    now = utcnow()
    result = conn.execute(
        _INSERT, {"session_id": session_id, "kind": kind, "data": data, "created_at": now}
    )
    event_id = result.inserted_primary_key[0] if result.inserted_primary_key else None
    assert event_id is not None, "an insert into events always yields its id"
    return Event(id=event_id, session_id=session_id, kind=kind, data=data, created_at=now)


class EventLog:
    """Sessions' event logs (``Store.events``): append, and read in id order."""

    #: How long :meth:`list` waits for the writers it must outlast (PostgreSQL).
    settle_timeout = 10.0

    def __init__(self, db: Database) -> None:
        self._db = db

    def add(self, session_id: str, kind: str, data: dict[str, Any] | None = None) -> Event:
        """Append one event in a transaction of its own."""
        kind = check_text("kind", kind, max_chars=MAX_KIND_CHARS)
        data = check_json("data", data)
        with self._db.write() as conn:
            return record(conn, session_id, kind, data)

    def expire(self, before: datetime, limit: int = 500) -> int:
        """Delete the oldest events written before ``before``, at most ``limit``; how many.

        It walks the primary key from the oldest id rather than an index on
        ``created_at``: ids grow with time, and every turn writes events, so
        one more index on the hot path would cost more than this sweep saves.
        An event that commits late (a lower id, newer than its neighbours)
        waits for a later sweep.
        """
        with self._db.write() as conn:
            rows = conn.execute(
                select(EVENTS.c.id, EVENTS.c.created_at).order_by(EVENTS.c.id).limit(limit)
            ).all()
            old = [r[0] for r in rows if as_utc(r[1]) < before]
            if old:
                conn.execute(delete(EVENTS).where(EVENTS.c.id.in_(old)))
        return len(old)

    def list(
        self,
        session_id: str,
        *,
        after: int = 0,
        limit: int = 100,
        kinds: Sequence[str] | None = None,
    ) -> builtins.list[Event]:
        """The session's events with ``id > after``, in id order, at most ``limit``.

        The answer is settled (see the module): no event with an id below the
        last one returned can commit later, so ``after=<last id>`` resumes
        without a gap. On PostgreSQL, if a writer of the table outlasts
        :attr:`settle_timeout`, this is :class:`~chaz.errors.Timeout`
        (retryable) rather than an answer that could have a hole.
        """
        events = self.settled(
            session_id, after=after, limit=limit, kinds=kinds, wait=self.settle_timeout
        )
        if events is None:
            raise Timeout(
                f"events of session {session_id} are still being written; try again",
                session_id=session_id,
            )
        return events

    def settled(
        self,
        session_id: str,
        *,
        after: int,
        limit: int,
        kinds: Sequence[str] | None = None,
        wait: float,
    ) -> builtins.list[Event] | None:
        """:meth:`list`, or None when the writers it must outlast run longer than ``wait``."""
        with self._db.read() as conn:
            rows = _read(conn, session_id, after, limit, kinds)
            if not rows or conn.dialect.name != "postgresql":
                return [_event(r) for r in rows]
            writers = list(conn.scalars(_WRITERS, {"table": EVENTS.name}))
        if writers and not self._outlast(writers, wait):
            return None
        with self._db.read() as conn:
            rows = _read(conn, session_id, after, limit, kinds, until=rows[-1]["id"])
        return [_event(r) for r in rows]

    def _outlast(self, writers: builtins.list[str], wait: float) -> bool:
        """Wait until none of ``writers`` (virtual transaction ids) writes any more."""
        deadline = time.monotonic() + wait
        pause = 0.002
        while True:
            with self._db.read() as conn:
                busy = conn.scalar(_STILL_WRITING, {"table": EVENTS.name, "writers": writers})
            if not busy:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            # Chaz's write transactions last milliseconds: start with short pauses.
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, 0.05)


def _read(
    conn: Connection,
    session_id: str,
    after: int,
    limit: int,
    kinds: Sequence[str] | None,
    until: int | None = None,
) -> Sequence[Any]:
    stmt = (
        select(EVENTS)
        .where(EVENTS.c.session_id == session_id, EVENTS.c.id > after)
        .order_by(EVENTS.c.id)
        .limit(limit)
    )
    if until is not None:
        stmt = stmt.where(EVENTS.c.id <= until)
    if kinds is not None:
        stmt = stmt.where(EVENTS.c.kind.in_(list(kinds)))
    return conn.execute(stmt).mappings().all()


def _event(row: Any) -> Event:
    return Event(
        id=row["id"],
        session_id=row["session_id"],
        kind=row["kind"],
        data=row["data"] or {},
        created_at=as_utc(row["created_at"]),
    )
