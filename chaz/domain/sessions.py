"""Sessions: one linear timeline of entries, the unit of FIFO serialization."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

from chaz.domain.agents import Limits


class Session(BaseModel):
    """A session as the producer API returns it."""

    model_config = ConfigDict(frozen=True)

    id: str
    agent_id: str
    name: str | None
    tree_id: str
    parent_job_id: str | None = None
    call_depth: int = 0
    last_seq: int
    limits: Limits | None = None
    tools: list[str] | None = None
    created_at: datetime
