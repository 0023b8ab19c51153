"""The limits in force for one session: global settings, narrowed by agent and session."""

from __future__ import annotations

from dataclasses import dataclass

from chaz.domain.agents import AgentSpec, Limits
from chaz.domain.sessions import Session
from chaz.settings import Settings


@dataclass(frozen=True)
class EffectiveLimits:
    """The limits in force for one session: global, narrowed by agent and session."""

    max_queued_per_session: int | None
    max_jobs_per_session: int | None
    max_live_per_tree: int | None


def resolve_limits(settings: Settings, session: Session, agent: AgentSpec) -> EffectiveLimits:
    """The quota limits in force for a session whose rows are already loaded."""
    base = Limits(
        max_queued_per_session=settings.max_queued_per_session,
        max_jobs_per_session=settings.max_jobs_per_session,
        max_live_per_tree=settings.max_live_per_tree,
    )
    merged = base.narrowed(agent.limits).narrowed(session.limits)
    return EffectiveLimits(
        merged.max_queued_per_session, merged.max_jobs_per_session, merged.max_live_per_tree
    )
