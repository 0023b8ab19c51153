"""A job's starts, apart from its attempts.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03

Adds ``jobs.starts``: every start of a job's turn, the resumes after an
approval decision or a hand-back included. ``jobs.attempts`` keeps only the
starts that spend an attempt (docs/executions.md#attempts). Existing rows get
``starts = attempts``: what they counted until now was every start.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the column, filled from what ``attempts`` counted so far."""
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("starts", sa.Integer(), nullable=False, server_default="0"))
    op.execute("UPDATE jobs SET starts = attempts")


def downgrade() -> None:
    """Drop the column (``attempts`` then reads as it is)."""
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("starts")
