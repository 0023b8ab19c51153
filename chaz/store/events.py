"""The ``events`` table: written inside the transaction of the change it records."""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Connection, Table, insert

from chaz.ids import utcnow
from chaz.store.models import EventRow

EVENTS = cast(Table, EventRow.__table__)
_INSERT = insert(EVENTS)


def record(conn: Connection, session_id: str, kind: str, data: dict[str, Any]) -> None:
    """Append one event in the caller's open write transaction.

    In the same transaction as the change it describes: the log never shows
    a change that was rolled back, nor misses one that committed.
    """
    conn.execute(
        _INSERT, {"session_id": session_id, "kind": kind, "data": data, "created_at": utcnow()}
    )
