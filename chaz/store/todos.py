"""The ``todos`` table: each session's checklist (the planning tools' storage)."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, insert, select, update

from chaz.domain.todos import (
    MAX_TODOS,
    Todo,
    TodoStatus,
    check_note,
    check_status,
    check_title,
)
from chaz.domain.validation import invalid
from chaz.errors import SessionNotFound, TodoLimitReached, TodoNotFound
from chaz.ids import as_utc, new_id, utcnow
from chaz.store.models import SessionRow, TodoRow

if TYPE_CHECKING:
    from chaz.store.db import Database


class TodoStore:
    """Create, update and list the todos of a session (``Store.todos``).

    Every call names the session it acts for: a todo of another session is
    :class:`~chaz.errors.TodoNotFound`, exactly like one that does not exist.
    """

    def __init__(self, db: Database) -> None:
        self._db = db

    def create(
        self, session_id: str, title: str, note: str | None = None, *, todo_id: str | None = None
    ) -> Todo:
        """Append a todo (status ``pending``) to the session's list.

        Its ordinal is the session's next; the 201st todo of a session is
        :class:`~chaz.errors.TodoLimitReached`. ``todo_id`` makes the call
        idempotent: if the session already has a todo with that id, it is
        returned unchanged (a resumed turn repeating its call adds nothing).
        """
        title = check_title(title)
        note = check_note(note)
        with self._db.write() as conn:
            # The session row's lock serializes the creators of one session:
            # the count below and the next ordinal cannot change under us.
            # NO KEY UPDATE does not block inserts that merely reference it.
            locked = conn.execute(
                select(SessionRow.id)
                .where(SessionRow.id == session_id)
                .with_for_update(key_share=True)
            ).first()
            if locked is None:
                raise SessionNotFound(f"no session {session_id!r}", session=session_id)
            if todo_id is not None:
                row = conn.execute(_by_id(session_id, todo_id)).mappings().first()
                if row is not None:
                    return _todo(row)
            count, top = conn.execute(
                select(func.count(), func.max(TodoRow.ordinal)).where(
                    TodoRow.session_id == session_id
                )
            ).one()
            if count >= MAX_TODOS:
                raise TodoLimitReached(
                    f"this session already has {MAX_TODOS} todos; update or reuse one",
                    max_todos=MAX_TODOS,
                )
            now = utcnow()
            values: dict[str, Any] = {
                "id": todo_id or new_id(),
                "session_id": session_id,
                "ordinal": (top or 0) + 1,
                "title": title,
                "status": TodoStatus.PENDING.value,
                "note": note,
                "created_at": now,
                "updated_at": now,
            }
            conn.execute(insert(TodoRow).values(**values))
        return _todo(values)

    def update(
        self,
        session_id: str,
        todo_id: str,
        *,
        status: TodoStatus | str | None = None,
        title: str | None = None,
        note: str | None = None,
    ) -> Todo:
        """Change a todo's status, title or note (None leaves one as it is; an
        empty note clears it). At least one must be given."""
        values: dict[str, Any] = {}
        if status is not None:
            values["status"] = check_status(status).value
        if title is not None:
            values["title"] = check_title(title)
        if note is not None:
            values["note"] = check_note(note)
        if not values:
            raise invalid("status", "nothing to change: give a status, a title or a note")
        values["updated_at"] = utcnow()
        with self._db.write() as conn:
            done = conn.execute(
                update(TodoRow)
                .where(TodoRow.id == todo_id, TodoRow.session_id == session_id)
                .values(**values)
            ).rowcount
            if not done:
                raise TodoNotFound(f"no todo {todo_id!r} in this session", todo_id=todo_id)
            row = conn.execute(_by_id(session_id, todo_id)).mappings().one()
        return _todo(row)

    def get(self, session_id: str, todo_id: str) -> Todo:
        """One todo of the session, or :class:`~chaz.errors.TodoNotFound`."""
        with self._db.read() as conn:
            row = conn.execute(_by_id(session_id, todo_id)).mappings().first()
        if row is None:
            raise TodoNotFound(f"no todo {todo_id!r} in this session", todo_id=todo_id)
        return _todo(row)

    def list(self, session_id: str, status: TodoStatus | str | None = None) -> builtins.list[Todo]:
        """The session's todos in creation order, optionally only those in ``status``."""
        stmt = select(TodoRow).where(TodoRow.session_id == session_id).order_by(TodoRow.ordinal)
        if status is not None:
            stmt = stmt.where(TodoRow.status == check_status(status).value)
        with self._db.read() as conn:
            return [_todo(r) for r in conn.execute(stmt).mappings()]


def _by_id(session_id: str, todo_id: str) -> Any:
    return select(TodoRow).where(TodoRow.id == todo_id, TodoRow.session_id == session_id)


def _todo(row: Any) -> Todo:
    return Todo(
        id=row["id"],
        session_id=row["session_id"],
        ordinal=row["ordinal"],
        title=row["title"],
        status=TodoStatus(row["status"]),
        note=row["note"],
        created_at=as_utc(row["created_at"]),
        updated_at=as_utc(row["updated_at"]),
    )
