"""A schedule remembers the job whose turn created it (docs/schedules.md#a-cancelled-creator).

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07

Adds ``schedules.job_id`` (indexed): the job whose turn's tool call added
the schedule, so that cancelling that job's lineage pauses what it
scheduled. NULL for every existing row and for a producer's schedules:
no job made them, and no cancel pauses them.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the column and its index."""
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(sa.Column("job_id", sa.String(32), nullable=True))
    op.create_index("ix_schedules_job_id", "schedules", ["job_id"])


def downgrade() -> None:
    """Drop them (a cancel then pauses no schedule)."""
    op.drop_index("ix_schedules_job_id", table_name="schedules")
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("job_id")
