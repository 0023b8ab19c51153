"""Fewer index writes per turn (docs/performance.md#postgresql-work-per-turn).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01

Every update of a job changes its ``status``, which indexes held, so no
update was HOT and each wrote an entry into all seven of the table's
indexes; the admission's update of a session sets ``active_at`` and so
wrote every index of ``sessions``. This revision:

* replaces ``ix_jobs_session_status_ordinal`` and ``ix_jobs_status`` with
  ``ix_jobs_session_active``, a partial index of the unfinished jobs on
  ``(session_id, ordinal)``: it serves the head-job lookup, the
  reconciler's scan and the exporter's counts, and a job's end (which
  finishes it) adds nothing to it;
* makes ``ix_jobs_parent_job_id`` partial (``parent_job_id IS NOT NULL``):
  a root turn, the common case, adds nothing to it;
* drops ``ix_sessions_active_at``: every reader ordering by ``active_at``
  names a project, which ``ix_sessions_project_active`` serves.

Plain CREATE/DROP INDEX on both databases (no batch rebuild, so the FTS5
triggers of 0008 stay as they are).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

# Written out, not imported: a revision keeps the schema of its day.
_UNFINISHED = "status IN ('queued', 'running', 'stopping', 'waiting_approval')"
_HAS_PARENT = "parent_job_id IS NOT NULL"


def _where(sql: str) -> dict[str, Any]:
    return {"postgresql_where": sa.text(sql), "sqlite_where": sa.text(sql)}


def upgrade() -> None:
    op.create_index(
        "ix_jobs_session_active", "jobs", ["session_id", "ordinal"], **_where(_UNFINISHED)
    )
    op.drop_index("ix_jobs_session_status_ordinal", table_name="jobs")
    op.drop_index("ix_jobs_status", table_name="jobs")
    op.drop_index("ix_jobs_parent_job_id", table_name="jobs")
    op.create_index("ix_jobs_parent_job_id", "jobs", ["parent_job_id"], **_where(_HAS_PARENT))
    op.drop_index("ix_sessions_active_at", table_name="sessions")


def downgrade() -> None:
    op.create_index("ix_sessions_active_at", "sessions", ["active_at"])
    op.drop_index("ix_jobs_parent_job_id", table_name="jobs")
    op.create_index("ix_jobs_parent_job_id", "jobs", ["parent_job_id"])
    op.create_index("ix_jobs_status", "jobs", ["status"])
    op.create_index("ix_jobs_session_status_ordinal", "jobs", ["session_id", "status", "ordinal"])
    op.drop_index("ix_jobs_session_active", table_name="jobs")
