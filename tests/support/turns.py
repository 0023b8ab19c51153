"""The context a turn's tools get, for tests that invoke tools without a worker."""

from __future__ import annotations

from collections.abc import Iterable

import chaz
from chaz.runtime.registry import ToolContext
from chaz.usecases.turns import RunnerDelegation, TurnRunner


def interactive_turn(
    client: chaz.Client,
    session_id: str,
    tools: Iterable[str],
    *,
    text: str = "please",
    sender: str = "user:alice",
    type: str = "message",
) -> ToolContext:
    """The context of the interactive turn an entry ``text`` from ``sender``
    admits in ``session_id`` (the job is not run), allowed ``tools``."""
    posted = client.sessions.post(session_id, text, sender=sender, type=type)
    assert posted.job_id is not None
    session = client.sessions.get(session_id)
    return ToolContext(
        session_id=session.id,
        job_id=posted.job_id,
        agent_id=session.agent_id,
        tree_id=session.tree_id,
        call_depth=0,
        allowed_tools=frozenset(tools),
        services=client.services,
        delegation=RunnerDelegation(TurnRunner(client.services, client.tools)),
    )
