"""A job's usage: tokens its model steps reported and its turn's wall time.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03

Adds ``jobs.usage`` (JSON, NULL until a turn records some): the
``input_tokens``, ``output_tokens`` and ``runtime_seconds`` of the job's turn
(docs/runtime.md#per-turn-budgets). Written by the turn's checkpoint saves
and its end, which it already makes. A plain ADD COLUMN on both databases.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
# 0010 and 0011 branch from 0009 at the same time; the merge chains them.
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("usage", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("usage")
