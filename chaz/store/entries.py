"""Entries: reading a timeline, finding an append by its idempotency key, and
importing a history.

The writes of a turn and of an admission are :mod:`chaz.store.core`'s; an
entry's columns are written by :func:`chaz.store.writes.insert_entry`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, select, update

from chaz.domain.entries import Entry, EntryType, KeyScope, NewEntry, Said, replay_differences
from chaz.errors import IdempotencyMismatch, SessionNotFound
from chaz.ids import new_id, utcnow
from chaz.store import statements as st
from chaz.store.db import Database
from chaz.store.models import EntryRow, JobRow
from chaz.store.records import as_said
from chaz.store.rows import as_entry, as_job, as_session, session_row
from chaz.store.types import Appended


class Entries:
    """Reads of a session's entries, and the writes that admit nothing and need
    no turn (``store.entries``, ``store.replay``, ``store.import_entries``, ...)."""

    db: Database

    def find_idempotent(
        self, session_id: str, key: str, scope: KeyScope = KeyScope.RUNTIME
    ) -> Appended | None:
        """The earlier append made with this idempotency key in ``scope``, if there was one."""
        return find_idempotent(self.db, session_id, key, scope)

    def replay(self, session_id: str, draft: NewEntry) -> Appended | None:
        """The earlier append with this key, if it was the same request (see :func:`replay`)."""
        return replay(self.db, session_id, draft)

    def entries(
        self,
        session_id: str,
        *,
        after: int = 0,
        until: int | None = None,
        limit: int | None = None,
        types: Iterable[EntryType] | None = None,
        visible: bool = False,
    ) -> list[Entry]:
        """Entries with ``after < seq <= until``, in seq order; with ``visible``,
        not those a rollback hid (chaz/domain/multitask.py)."""
        stmt = (
            select(EntryRow)
            .where(EntryRow.session_id == session_id, EntryRow.seq > after)
            .order_by(EntryRow.seq)
        )
        if visible:
            stmt = stmt.where(st.VISIBLE)
        if until is not None:
            stmt = stmt.where(EntryRow.seq <= until)
        if types is not None:
            stmt = stmt.where(EntryRow.type.in_([t.value for t in types]))
        if limit is not None:
            stmt = stmt.limit(limit)
        with self.db.read() as conn:
            return [as_entry(r) for r in conn.execute(stmt).mappings()]

    def said(
        self,
        session_id: str,
        types: Iterable[EntryType],
        *,
        visible: bool = False,
        until: int | None = None,
    ) -> list[Said]:
        """Who said what in the session's entries of ``types``, in seq order (with
        ``visible``, not those a rollback hid; with ``until``, none past that
        seq): only :class:`Said`'s columns, for a reader that needs no metadata
        or timestamps (a thread's values)."""
        stmt = (
            select(*st.SAID_COLUMNS)
            .where(st.ENTRIES.c.session_id == session_id)
            .where(st.ENTRIES.c.type.in_([t.value for t in types]))
            .order_by(st.ENTRIES.c.seq)
        )
        if visible:
            stmt = stmt.where(st.VISIBLE)
        if until is not None:
            stmt = stmt.where(st.ENTRIES.c.seq <= until)
        with self.db.read() as conn:
            return [as_said(r) for r in conn.execute(stmt)]

    def entry(self, entry_id: str) -> Entry | None:
        """One entry by id, if it exists."""
        with self.db.read() as conn:
            row = conn.execute(select(EntryRow).where(EntryRow.id == entry_id)).mappings().first()
        return as_entry(row) if row is not None else None

    def import_entries(self, session_id: str, drafts: Sequence[NewEntry]) -> int:
        """Append many entries in one transaction, admitting nothing: an imported
        history (benchmarks, tests, migrations from elsewhere). The session's
        last seq after it."""
        if not drafts:
            with self.db.read() as conn:
                return as_session(session_row(conn, session_id)).last_seq
        with self.db.write() as conn:
            last = conn.scalar(
                update(st.SESSIONS)
                .where(st.SESSIONS.c.id == session_id)
                .values(last_seq=st.SESSIONS.c.last_seq + len(drafts))
                .returning(st.SESSIONS.c.last_seq)
            )
            if last is None:
                raise SessionNotFound(f"no session {session_id!r}", session=session_id)
            first, now = int(last) - len(drafts) + 1, utcnow()
            conn.execute(
                st.INSERT_ENTRY,
                [
                    {
                        "id": new_id(),
                        "session_id": session_id,
                        "seq": first + i,
                        "type": d.type.value,
                        "sender": d.sender,
                        "content": d.content,
                        "metadata": d.metadata or {},
                        "job_id": d.job_id,
                        "idempotency_key": d.idempotency_key,
                        "key_scope": d.key_scope.value if d.idempotency_key is not None else None,
                        "created_at": now,
                    }
                    for i, d in enumerate(drafts)
                ],
            )
        return int(last)


def find_idempotent(
    db: Database, session_id: str, key: str, scope: KeyScope = KeyScope.RUNTIME
) -> Appended | None:
    """The earlier append made with this idempotency key in ``scope``, if there was one."""
    with db.read() as conn:
        row = (
            conn.execute(
                select(EntryRow).where(
                    EntryRow.session_id == session_id,
                    EntryRow.key_scope == scope.value,
                    EntryRow.idempotency_key == key,
                )
            )
            .mappings()
            .first()
        )
        if row is None:
            return None
        job = (
            conn.execute(select(JobRow).where(JobRow.trigger_entry_id == row["id"]))
            .mappings()
            .first()
        )
    return Appended(entry=as_entry(row), job=as_job(job) if job else None, created=False)


def replay(db: Database, session_id: str, draft: NewEntry) -> Appended | None:
    """The earlier append with this key, if it was the same request.

    A producer's key (``KeyScope.USER``) reused with a different type,
    sender, content or metadata is refused with
    :class:`~chaz.errors.IdempotencyMismatch`, as payment APIs do: the
    caller has a bug, and answering with the first entry would hide it.
    The runtime's keys keep "first wins": a resumed turn may word its
    reply differently, and the first one stands.
    """
    key = draft.idempotency_key
    if key is None:
        return None
    found = find_idempotent(db, session_id, key, draft.key_scope)
    if found is None or draft.key_scope is not KeyScope.USER:
        return found
    differs = replay_differences(found.entry, draft)
    if differs:
        raise IdempotencyMismatch(
            f"idempotency key {key!r} was already used in session {session_id} for a "
            f"different request ({', '.join(differs)} differ)",
            session_id=session_id,
            idempotency_key=key,
            entry_id=found.entry.id,
            differs=differs,
        )
    return found


def patch_attach(conn: Connection, entry_id: str, **attach: Any) -> None:
    """Record a child's end on the attach pointer that points to it.

    The pointer is the one entry chaz updates in place: it is a card in the
    caller's session, not conversation, and its update moves no seq.
    """
    meta = conn.scalar(select(EntryRow.meta).where(EntryRow.id == entry_id).with_for_update())
    if meta is None:
        return
    patched = {**meta, "attach": {**meta.get("attach", {}), **attach}}
    conn.execute(update(EntryRow).where(EntryRow.id == entry_id).values({EntryRow.meta: patched}))
