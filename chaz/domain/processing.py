"""The processing rule: which writes start a turn (docs/contracts.md#processing-rule)."""

from __future__ import annotations

from collections.abc import Container

from chaz.domain.entries import EntryType, parse_sender


def admits_turn(entry_type: EntryType, sender: str, known_agents: Container[str]) -> bool:
    """Whether writing this entry admits a job for the session's agent.

    A Message from a sender that is not a known agent, or any Directive, admits
    a turn; everything else (an agent's own Message, Ack, ToolResult, ...)
    admits nothing, so an agent never re-triggers itself.
    """
    if entry_type is EntryType.DIRECTIVE:
        return True
    if entry_type is EntryType.MESSAGE:
        kind, name = parse_sender(sender)
        return not (kind == "agent" and name in known_agents)
    return False
