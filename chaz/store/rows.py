"""Session rows by reference, and the row-to-model converters of
:mod:`chaz.store.records` (re-exported: every store module reads through these)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from chaz.domain.sessions import missing_session
from chaz.store import statements as st
from chaz.store.records import as_entry, as_job, as_said, as_session, as_ts

__all__ = ["as_entry", "as_job", "as_said", "as_session", "as_ts", "session_row"]


def session_row(conn: Connection, ref: str, *, project: str | None = None) -> Any:
    """The session row of an id or, failing that, a name; with ``project``, only
    one of that project (another project's is answered as a missing one)."""
    if project is None:
        row = conn.execute(st.SESSION_BY_ID, {"ref": ref}).mappings().first()
        if row is None:
            row = conn.execute(st.SESSION_BY_NAME, {"ref": ref}).mappings().first()
    else:
        params = {"ref": ref, "project": project}
        row = conn.execute(st.SESSION_IN_PROJECT, params).mappings().first()
        if row is None:
            row = conn.execute(st.SESSION_IN_PROJECT_BY_NAME, params).mappings().first()
    if row is None:
        raise missing_session(ref)
    return row
