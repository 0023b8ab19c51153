"""A project's token rate: model tokens per minute (docs/security.md#project-quotas).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03

Adds ``projects.tokens_per_minute``: NULL (every existing row) is the
install's default, ``CHAZ_PROJECT_TOKENS_PER_MINUTE``, unlimited unless set,
so no project's admissions change. The bucket itself lives in Redis.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the nullable column; existing rows keep the default."""
    with op.batch_alter_table("projects") as batch:
        batch.add_column(sa.Column("tokens_per_minute", sa.Integer(), nullable=True))


def downgrade() -> None:
    """Drop the column (the buckets in Redis expire on their own)."""
    with op.batch_alter_table("projects") as batch:
        batch.drop_column("tokens_per_minute")
