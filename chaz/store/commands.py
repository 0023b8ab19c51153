"""Applied control commands: each command id is applied once (docs/store.md)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError

from chaz.ids import utcnow
from chaz.store.db import Database
from chaz.store.models import CommandRow


class Commands:
    """Record and read control commands' outcomes (``store.record_command``, ...)."""

    db: Database

    def get_command(self, command_id: str) -> dict[str, Any] | None:
        """The recorded outcome of a control command, if it was applied before."""
        with self.db.read() as conn:
            value: dict[str, Any] | None = conn.scalar(
                select(CommandRow.outcome).where(CommandRow.command_id == command_id)
            )
        return value

    def record_command(
        self, command_id: str, action: str, job_id: str, outcome: dict[str, Any]
    ) -> dict[str, Any]:
        """Store a command's outcome; a concurrent duplicate gets the first outcome."""
        try:
            with self.db.write() as conn:
                conn.execute(
                    insert(CommandRow).values(
                        command_id=command_id,
                        action=action,
                        job_id=job_id,
                        outcome=outcome,
                        created_at=utcnow(),
                    )
                )
        except IntegrityError:
            first = self.get_command(command_id)
            if first is not None:
                return first
            raise
        return outcome
