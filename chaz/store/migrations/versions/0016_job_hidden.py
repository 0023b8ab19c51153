"""A run deleted over HTTP: hidden from its thread's runs, its history kept.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04

Adds ``jobs.hidden_at``: when ``DELETE /threads/{id}/runs/{run}`` hid the
ended job from the thread's runs (docs/http.md#runs). NULL: not hidden. The
job, its entries and its events stay: chaz keeps every run's history.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the column; every existing job is visible."""
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("hidden_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    """Drop the column (every job is listed again)."""
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("hidden_at")
