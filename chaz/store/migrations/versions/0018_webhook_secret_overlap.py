"""A rotated webhook secret keeps signing for a while (docs/http.md#webhooks).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-04

Adds ``webhook_secrets.previous_secret`` and ``previous_until``: after a
rotation the replaced secret signs every delivery beside the new one until
``previous_until``, so a receiver can move to the new secret without
refusing a delivery in between. NULL for every existing row: nothing to
overlap.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the two columns."""
    with op.batch_alter_table("webhook_secrets") as batch:
        batch.add_column(sa.Column("previous_secret", sa.String(128), nullable=True))
        batch.add_column(sa.Column("previous_until", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    """Drop them (the replaced secret signs nothing more)."""
    with op.batch_alter_table("webhook_secrets") as batch:
        batch.drop_column("previous_until")
        batch.drop_column("previous_secret")
