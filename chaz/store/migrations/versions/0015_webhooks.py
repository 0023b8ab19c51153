"""Webhooks when a run ends (docs/http.md#webhooks).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-03

Adds ``jobs.webhook`` (the URL a run named; NULL for every existing job, so
no job's end changes), the ``webhooks`` outbox (one row per ended job that
names a URL, written in the transaction that ends it) and
``webhook_secrets`` (each project's signing secret, made on first use).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    """Add the column and the two tables."""
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("webhook", sa.Text(), nullable=True))
    op.create_table(
        "webhooks",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("job_id", sa.String(32), nullable=False, unique=True),
        sa.Column("session_id", sa.String(32), nullable=False),
        sa.Column("project", sa.String(64), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_at", TS, nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("settled_at", TS, nullable=True),
    )
    op.create_index(
        "ix_webhooks_pending_next",
        "webhooks",
        ["next_at"],
        postgresql_where=sa.text("state = 'pending'"),
        sqlite_where=sa.text("state = 'pending'"),
    )
    op.create_index("ix_webhooks_project_state", "webhooks", ["project", "state"])
    op.create_table(
        "webhook_secrets",
        sa.Column("project", sa.String(64), primary_key=True),
        sa.Column("secret", sa.String(128), nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )


def downgrade() -> None:
    """Drop the tables and the column (pending deliveries are lost with them)."""
    op.drop_table("webhook_secrets")
    op.drop_index("ix_webhooks_project_state", table_name="webhooks")
    op.drop_index("ix_webhooks_pending_next", table_name="webhooks")
    op.drop_table("webhooks")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("webhook")
