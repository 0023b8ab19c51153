"""Initial schema: agents, sessions, entries, jobs, commands.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "agents",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
    )
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("agent_id", sa.String(64), sa.ForeignKey("agents.id"), nullable=False),
        sa.Column("name", sa.String(255), nullable=True, unique=True),
        sa.Column("tree_id", sa.String(32), nullable=False),
        sa.Column("parent_job_id", sa.String(32), nullable=True),
        sa.Column("call_depth", sa.Integer(), nullable=False),
        sa.Column("last_seq", sa.Integer(), nullable=False),
        sa.Column("last_ordinal", sa.Integer(), nullable=False),
        sa.Column("limits", sa.JSON(), nullable=True),
        sa.Column("tools", sa.JSON(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_index("ix_sessions_tree_id", "sessions", ["tree_id"])
    op.create_table(
        "entries",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("session_id", sa.String(32), sa.ForeignKey("sessions.id"), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("sender", sa.String(160), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("job_id", sa.String(32), nullable=True),
        sa.Column("idempotency_key", sa.String(200), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.UniqueConstraint("session_id", "seq", name="uq_entries_session_seq"),
        sa.UniqueConstraint("session_id", "idempotency_key", name="uq_entries_session_idem"),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("session_id", sa.String(32), sa.ForeignKey("sessions.id"), nullable=False),
        sa.Column("tree_id", sa.String(32), nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("trigger_entry_id", sa.String(32), nullable=True, unique=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("caller_session_id", sa.String(32), nullable=True),
        sa.Column("caller_entry_id", sa.String(32), nullable=True),
        sa.Column("parent_job_id", sa.String(32), nullable=True),
        sa.Column("call_depth", sa.Integer(), nullable=False),
        sa.Column("message_count", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("lease_token", sa.String(64), nullable=True),
        sa.Column("checkpoint", sa.JSON(), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("error", sa.JSON(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("started_at", TS, nullable=True),
        sa.Column("finished_at", TS, nullable=True),
        sa.UniqueConstraint("session_id", "ordinal", name="uq_jobs_session_ordinal"),
    )
    op.create_index("ix_jobs_session_status_ordinal", "jobs", ["session_id", "status", "ordinal"])
    op.create_index("ix_jobs_status", "jobs", ["status"])
    op.create_index("ix_jobs_parent_job_id", "jobs", ["parent_job_id"])
    op.create_table(
        "commands",
        sa.Column("command_id", sa.String(100), primary_key=True),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("job_id", sa.String(32), nullable=False),
        sa.Column("outcome", sa.JSON(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("commands")
    op.drop_table("jobs")
    op.drop_table("entries")
    op.drop_table("sessions")
    op.drop_table("agents")
