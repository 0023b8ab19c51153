"""Building the model's context from a session's entries (docs/contracts.md#context).

Only Message, Directive and Summary entries are context; the latest Summary is
where the context starts. ToolCall, ToolResult, Ack and Error are audit.
Directives are instructions, so the model reads them as the user's words.
"""

from __future__ import annotations

from collections.abc import Sequence

from chaz.domain.entries import Entry, EntryType, Said, agent_sender
from chaz.runtime.backends.base import ChatMessage

#: How the context's Summary is introduced to the model (a system message).
SUMMARY_PREFIX = "Summary of the conversation so far:\n"


def build_context(
    system_prompt: str,
    entries: Sequence[Entry | Said],
    agent_id: str,
    *,
    notes: Sequence[str] = (),
) -> list[ChatMessage]:
    """The chat messages for a turn, given the session's entries up to its trigger.

    ``agent_id``'s own Messages are the assistant's; everyone else's are the
    user's, with a name. ``notes`` follow the system prompt as system
    messages (a room's roster, docs/rooms.md#roster).
    """
    start = 0
    for i, entry in enumerate(entries):
        if entry.type is EntryType.SUMMARY:
            start = i
    me = agent_sender(agent_id)
    messages: list[ChatMessage] = [{"role": "system", "content": system_prompt}]
    messages.extend({"role": "system", "content": note} for note in notes)
    for entry in entries[start:]:
        if entry.type is EntryType.SUMMARY:
            messages.append(
                {
                    "role": "system",
                    "content": SUMMARY_PREFIX + entry.content,
                }
            )
        elif entry.type is EntryType.DIRECTIVE:
            messages.append({"role": "user", "content": entry.content})
        elif entry.type is EntryType.MESSAGE:
            if entry.sender == me:
                messages.append({"role": "assistant", "content": entry.content})
            else:
                messages.append({"role": "user", "content": entry.content, "name": _name(entry)})
    return messages


def _name(entry: Entry | Said) -> str:
    # OpenAI's `name` allows [A-Za-z0-9_-]; it tells the model who spoke in a room.
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in entry.sender)[:64]
