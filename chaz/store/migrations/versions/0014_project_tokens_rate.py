"""A project's token budgets: tokens per minute and cumulative tokens and cost
(docs/security.md#project-quotas).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03

Adds ``projects.tokens_per_minute``, ``projects.max_tokens`` and
``projects.max_cost``: NULL (every existing row) is the install's default
(``CHAZ_PROJECT_TOKENS_PER_MINUTE``, ``CHAZ_PROJECT_MAX_TOKENS``,
``CHAZ_PROJECT_MAX_COST``), unlimited unless set, so no project's turns
change. The token bucket itself lives in Redis.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
# 0013 (jobs.starts) and this one were written at the same time; chained.
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the nullable column; existing rows keep the default."""
    with op.batch_alter_table("projects") as batch:
        batch.add_column(sa.Column("tokens_per_minute", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("max_tokens", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("max_cost", sa.Float(), nullable=True))


def downgrade() -> None:
    """Drop the column (the buckets in Redis expire on their own)."""
    with op.batch_alter_table("projects") as batch:
        batch.drop_column("max_cost")
        batch.drop_column("max_tokens")
        batch.drop_column("tokens_per_minute")
