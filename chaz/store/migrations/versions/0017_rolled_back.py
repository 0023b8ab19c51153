"""Runs rolled back by a multitask strategy or a cancel (docs/http.md#runs).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-04

Adds ``jobs.rolled_back_at``: when the job's run was rolled back. The
entries naming a rolled-back job are hidden from its thread's values and
from later context (chaz/domain/multitask.py). NULL for every existing job,
so nothing existing is hidden; and ``ix_jobs_rolled_back``, a partial index
of the rolled-back jobs only, for the context reads' anti-join with them.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the column and its partial index."""
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("rolled_back_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        "ix_jobs_rolled_back",
        "jobs",
        ["id"],
        postgresql_where=sa.text("rolled_back_at IS NOT NULL"),
        sqlite_where=sa.text("rolled_back_at IS NOT NULL"),
    )


def downgrade() -> None:
    """Drop the index and the column (what was rolled back shows again)."""
    op.drop_index("ix_jobs_rolled_back", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("rolled_back_at")
