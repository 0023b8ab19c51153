"""Approvals: tool calls that wait for a person's decision.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

A call whose tool policy needs approval suspends its turn; its request is a
row here, closed by the first decision's compare-and-set on ``state``
(docs/approvals.md).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "approvals",
        sa.Column("request_id", sa.String(64), primary_key=True),
        sa.Column("job_id", sa.String(32), nullable=False),
        sa.Column("session_id", sa.String(32), nullable=False),
        sa.Column("tool", sa.String(64), nullable=False),
        sa.Column("call_id", sa.String(255), nullable=False),
        sa.Column("arguments", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("decided_by", sa.String(255), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False),
        sa.Column("decided_at", TS, nullable=True),
    )
    op.create_index("ix_approvals_job_id", "approvals", ["job_id"])
    op.create_index("ix_approvals_session_id", "approvals", ["session_id"])
    op.create_index("ix_approvals_state_expires", "approvals", ["state", "expires_at"])


def downgrade() -> None:
    op.drop_table("approvals")
