"""A job keeps the trace context its turn joins (docs/operations.md#tracing).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07

Adds ``jobs.trace_context``: the W3C ``traceparent`` (and ``tracestate``) of
the span that admitted the job, as JSON, so that a turn resumed by another
worker (after a SIGKILL, a hand-back, the reconciler's or the lease watch's
wake-up) continues its post's trace. NULL for every existing row, and for
every job admitted while tracing is off: such a turn starts a trace of its own.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the column."""
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("trace_context", sa.String(512), nullable=True))


def downgrade() -> None:
    """Drop it (turns then start traces of their own)."""
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("trace_context")
