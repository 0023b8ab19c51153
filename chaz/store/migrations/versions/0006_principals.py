"""Principals and projects: API keys, project limits, and the project, owner and
grants of every session, job, delivery, schedule, artifact and approval.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

Rows written before this revision belong to project ``default`` and to
``user:local`` with every grant (NULL ``grants``), which is what the
single-user embedded case has always been (docs/security.md).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def _project() -> sa.Column[str]:
    return sa.Column("project", sa.String(64), nullable=False, server_default="default")


def _owner() -> sa.Column[str]:
    return sa.Column("owner", sa.String(160), nullable=False, server_default="user:local")


def _unattended() -> sa.Column[bool]:
    return sa.Column("unattended", sa.Boolean(), nullable=False, server_default=sa.false())


def upgrade() -> None:
    op.create_table(
        "projects",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("max_live", sa.Integer(), nullable=True),
        sa.Column("max_jobs", sa.Integer(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("principal", sa.String(160), nullable=False),
        sa.Column("project", sa.String(64), nullable=False),
        sa.Column("grants", sa.JSON(), nullable=True),
        sa.Column("label", sa.String(255), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("revoked_at", TS, nullable=True),
    )
    op.create_index("ix_api_keys_project", "api_keys", ["project"])
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(_project())
        batch.add_column(_owner())
        batch.add_column(_unattended())
        batch.add_column(
            sa.Column("permission_mode", sa.String(16), nullable=False, server_default="default")
        )
        batch.create_index("ix_sessions_project_active", ["project", "active_at"])
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(_project())
        batch.add_column(_owner())
        batch.add_column(sa.Column("grants", sa.JSON(), nullable=True))
        batch.add_column(_unattended())
        batch.create_index("ix_jobs_project_status", ["project", "status"])
    with op.batch_alter_table("deliveries") as batch:
        batch.add_column(_project())
        batch.add_column(_owner())
        batch.add_column(sa.Column("grants", sa.JSON(), nullable=True))
        batch.add_column(_unattended())
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(_project())
        batch.add_column(_owner())
        batch.add_column(sa.Column("grants", sa.JSON(), nullable=True))
        batch.add_column(_unattended())
    with op.batch_alter_table("artifacts") as batch:
        batch.add_column(_project())
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(_project())
        batch.add_column(sa.Column("decision", sa.String(16), nullable=True))
        batch.create_index("ix_approvals_project_state", ["project", "state"])


def downgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.drop_index("ix_approvals_project_state")
        batch.drop_column("decision")
        batch.drop_column("project")
    with op.batch_alter_table("artifacts") as batch:
        batch.drop_column("project")
    with op.batch_alter_table("schedules") as batch:
        for name in ("unattended", "grants", "owner", "project"):
            batch.drop_column(name)
    with op.batch_alter_table("deliveries") as batch:
        for name in ("unattended", "grants", "owner", "project"):
            batch.drop_column(name)
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_project_status")
        for name in ("unattended", "grants", "owner", "project"):
            batch.drop_column(name)
    with op.batch_alter_table("sessions") as batch:
        batch.drop_index("ix_sessions_project_active")
        for name in ("permission_mode", "unattended", "owner", "project"):
            batch.drop_column(name)
    op.drop_table("api_keys")
    op.drop_table("projects")
