"""Idempotency keys get a scope: a producer's keys and the runtime's never collide.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01

A producer posting with ``idempotency_key="job:J:ack"`` used to take job J's
own Ack key and stop J from ever starting. Each key now belongs to a scope
(``user`` or ``runtime``) and is unique per session and scope. Existing keys
written by the runtime (``job:...`` and ``spawn:...``) become ``runtime``;
every other key was a producer's.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("entries") as batch:
        batch.add_column(sa.Column("key_scope", sa.String(8), nullable=True))
    op.execute(
        "UPDATE entries SET key_scope = CASE"
        " WHEN idempotency_key LIKE 'job:%' OR idempotency_key LIKE 'spawn:%' THEN 'runtime'"
        " ELSE 'user' END"
        " WHERE idempotency_key IS NOT NULL"
    )
    with op.batch_alter_table("entries") as batch:
        batch.drop_constraint("uq_entries_session_idem", type_="unique")
        batch.create_unique_constraint(
            "uq_entries_session_scope_idem", ["session_id", "key_scope", "idempotency_key"]
        )


def downgrade() -> None:
    # Two scopes may hold the same key in one session; the old constraint
    # cannot hold both, so the runtime's copy takes a prefix.
    op.execute(
        "UPDATE entries SET idempotency_key = 'runtime:' || idempotency_key"
        " WHERE key_scope = 'runtime' AND EXISTS (SELECT 1 FROM entries u"
        " WHERE u.session_id = entries.session_id AND u.key_scope = 'user'"
        " AND u.idempotency_key = entries.idempotency_key)"
    )
    with op.batch_alter_table("entries") as batch:
        batch.drop_constraint("uq_entries_session_scope_idem", type_="unique")
        batch.create_unique_constraint("uq_entries_session_idem", ["session_id", "idempotency_key"])
        batch.drop_column("key_scope")
