"""Schedules and rooms: the schedules and schedule_fires tables; room members;
a job's standalone input, its fire and its room member.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

A schedule fire admits a job with the prompt carried on the job
(``jobs.input``) instead of a Directive entry; ``schedule_fires`` claims each
``(schedule_id, slot)`` once. A room is a session with ``members``; a turn
records the member it runs for.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("members", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("burst_budget", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("room_burst", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("input", sa.Text(), nullable=True))
        batch.add_column(sa.Column("fire_id", sa.String(32), nullable=True))
        batch.add_column(sa.Column("member_agent_id", sa.String(64), nullable=True))
    op.create_table(
        "schedules",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("owner_agent_id", sa.String(64), sa.ForeignKey("agents.id"), nullable=False),
        sa.Column("name", sa.String(255), nullable=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("cron", sa.String(255), nullable=True),
        sa.Column("timezone", sa.String(64), nullable=True),
        sa.Column("interval_seconds", sa.Integer(), nullable=True),
        sa.Column("run_at", TS, nullable=True),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("target", sa.String(16), nullable=False),
        sa.Column("session_id", sa.String(32), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("expires_at", TS, nullable=True),
        sa.Column("max_fires", sa.Integer(), nullable=True),
        sa.Column("fires", sa.Integer(), nullable=False),
        sa.Column("overlap", sa.String(8), nullable=False),
        sa.Column("missed", sa.String(16), nullable=False),
        sa.Column("max_failures", sa.Integer(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.JSON(), nullable=True),
        sa.Column("disabled_reason", sa.Text(), nullable=True),
        sa.Column("next_slot", TS, nullable=True),
        sa.Column("last_slot", TS, nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
    )
    op.create_index("ix_schedules_owner_agent_id", "schedules", ["owner_agent_id"])
    op.create_index("ix_schedules_enabled_next", "schedules", ["enabled", "next_slot"])
    op.create_table(
        "schedule_fires",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("schedule_id", sa.String(32), sa.ForeignKey("schedules.id"), nullable=False),
        sa.Column("slot", TS, nullable=False),
        sa.Column("fired_at", TS, nullable=False),
        sa.Column("session_id", sa.String(32), nullable=True),
        sa.Column("job_id", sa.String(32), nullable=True),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("error", sa.JSON(), nullable=True),
        sa.Column("duration_ms", sa.Integer(), nullable=True),
        sa.Column("usage", sa.JSON(), nullable=True),
        sa.UniqueConstraint("schedule_id", "slot", name="uq_schedule_fires_schedule_slot"),
    )


def downgrade() -> None:
    op.drop_table("schedule_fires")
    op.drop_index("ix_schedules_enabled_next", table_name="schedules")
    op.drop_index("ix_schedules_owner_agent_id", table_name="schedules")
    op.drop_table("schedules")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("member_agent_id")
        batch.drop_column("fire_id")
        batch.drop_column("input")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("room_burst")
        batch.drop_column("burst_budget")
        batch.drop_column("members")
