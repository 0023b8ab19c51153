"""Collaboration: deliveries, events, artifacts, todos; forks, archive and names on sessions.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

Every hand-off between sessions becomes a ``deliveries`` row (its own
lifecycle and a unique idempotency key); a job admitted by one names it in
``jobs.delivery_id``, so the job's end can apply its completion policy in
the same transaction. Sessions learn where they were forked from, whether
they are archived, who named them and when they were last active.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("fork_session_id", sa.String(32), nullable=True))
        batch.add_column(sa.Column("fork_seq", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("origin", sa.String(16), nullable=True))
        batch.add_column(sa.Column("name_source", sa.String(8), nullable=True))
        batch.add_column(sa.Column("archived_at", TS, nullable=True))
        batch.add_column(sa.Column("archive_reason", sa.Text(), nullable=True))
        batch.add_column(sa.Column("archived_by", sa.String(8), nullable=True))
        batch.add_column(sa.Column("active_at", TS, nullable=True))
    op.create_index("ix_sessions_parent_job_id", "sessions", ["parent_job_id"])
    op.create_index("ix_sessions_active_at", "sessions", ["active_at"])
    # Names set before this revision were a person's.
    op.execute("UPDATE sessions SET name_source = 'user' WHERE name IS NOT NULL")
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("delivery_id", sa.String(32), nullable=True))
    _create_deliveries()
    op.create_table(
        "events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("session_id", sa.String(32), nullable=False),
        sa.Column("kind", sa.String(48), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_index("ix_events_session_id", "events", ["session_id", "id"])
    op.create_table(
        "artifacts",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("job_id", sa.String(32), nullable=False, unique=True),
        sa.Column("session_id", sa.String(32), nullable=False),
        sa.Column("media_type", sa.String(64), nullable=False),
        sa.Column("byte_length", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_index("ix_artifacts_session_id", "artifacts", ["session_id"])
    op.create_table(
        "todos",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("session_id", sa.String(32), sa.ForeignKey("sessions.id"), nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.UniqueConstraint("session_id", "ordinal", name="uq_todos_session_ordinal"),
    )


def _create_deliveries() -> None:
    """The deliveries table (docs/store.md#tables) and its indexes."""
    op.create_table(
        "deliveries",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("sender", sa.String(160), nullable=False),
        sa.Column("sender_session_id", sa.String(32), nullable=True),
        sa.Column("sender_entry_id", sa.String(32), nullable=True),
        sa.Column("sender_job_id", sa.String(32), nullable=True),
        sa.Column("target_session_id", sa.String(32), sa.ForeignKey("sessions.id"), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("message_count", sa.Integer(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("code", sa.String(64), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("job_id", sa.String(32), nullable=True),
        sa.Column("reply", sa.String(16), nullable=False),
        sa.Column("archive_when_done", sa.Boolean(), nullable=False),
        sa.Column("answers_job_id", sa.String(32), nullable=True),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("idempotency_key", sa.String(200), nullable=False, unique=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
    )
    op.create_index(
        "ix_deliveries_target_state", "deliveries", ["target_session_id", "state", "created_at"]
    )
    op.create_index("ix_deliveries_sender", "deliveries", ["sender_session_id", "created_at"])
    op.create_index("ix_deliveries_job_id", "deliveries", ["job_id"])
    op.create_index("ix_deliveries_state_created", "deliveries", ["state", "created_at"])


def downgrade() -> None:
    op.drop_table("todos")
    op.drop_index("ix_artifacts_session_id", table_name="artifacts")
    op.drop_table("artifacts")
    op.drop_index("ix_events_session_id", table_name="events")
    op.drop_table("events")
    op.drop_index("ix_deliveries_state_created", table_name="deliveries")
    op.drop_index("ix_deliveries_job_id", table_name="deliveries")
    op.drop_index("ix_deliveries_sender", table_name="deliveries")
    op.drop_index("ix_deliveries_target_state", table_name="deliveries")
    op.drop_table("deliveries")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("delivery_id")
    op.drop_index("ix_sessions_active_at", table_name="sessions")
    op.drop_index("ix_sessions_parent_job_id", table_name="sessions")
    with op.batch_alter_table("sessions") as batch:
        for column in (
            "active_at",
            "archived_by",
            "archive_reason",
            "archived_at",
            "name_source",
            "origin",
            "fork_seq",
            "fork_session_id",
        ):
            batch.drop_column(column)
