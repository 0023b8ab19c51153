"""Rooms: who a Message in a shared session wakes (docs/rooms.md).

A room is a session with several agents: its host (``sessions.agent_id``) and
its members (``sessions.members``). Pure rules, no I/O: the store applies
them with the session row locked, in the transaction that writes the entry.

- A person's Message (or any Directive) wakes the first @mentioned agent of
  the room, else the host, and resets the burst counter.
- An agent's Message wakes only a room agent it @mentions that is not
  itself; one that mentions nobody (or only strangers, or itself) wakes
  nobody. Each agent Message that wakes someone counts one against the
  room's burst budget; once the budget is spent, agent Messages wake nobody,
  and the first of them gets a notice (once per spent burst).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from chaz.domain.entries import EntryType, parse_sender

#: The burst budget of a room that sets none (and no ``CHAZ_ROOM_BURST_BUDGET``).
DEFAULT_BURST_BUDGET = 6
#: Members a room may have besides its host.
MAX_MEMBERS = 16
#: The largest burst budget a room may set.
MAX_BURST_BUDGET = 1000
#: The sender of a room's notices.
ROOM_SENDER = "system:room"

# ``@id`` not preceded by a character that would make it part of a word or an
# address (``email@x.com`` is no mention); the id runs as far as id
# characters go, so ``@bobby`` is not ``@bob``.
_MENTION = re.compile(r"(?<![A-Za-z0-9_.@\-])@([A-Za-z0-9_.\-]{1,64})")


def mentions(text: str) -> list[str]:
    """The @mentioned names in ``text``, in order, lowercased (duplicates kept)."""
    return [m.group(1).lower() for m in _MENTION.finditer(text)]


def first_mention(text: str, agents: Sequence[str], speaker: str | None = None) -> str | None:
    """The first agent of ``agents`` that ``text`` @mentions, other than ``speaker``.

    Case-insensitive; the agent is returned as ``agents`` spell it. A mention
    followed by sentence punctuation (``@bob.``) still names ``bob``.
    """
    by_lower = {a.lower(): a for a in agents}
    me = speaker.lower() if speaker is not None else None
    for name in mentions(text):
        for candidate in (name, name.rstrip(".-")):
            found = by_lower.get(candidate)
            if found is not None and candidate != me:
                return found
    return None


@dataclass(frozen=True)
class Route:
    """What one entry does in a room.

    ``wake``: the agent whose turn it admits (None: nobody). ``burst``: the
    room's counter after it. ``spent``: write the burst-spent notice now.
    """

    wake: str | None
    burst: int
    spent: bool = False


def route(
    host: str,
    members: Sequence[str],
    entry_type: EntryType,
    sender: str,
    content: str,
    burst: int,
    budget: int,
) -> Route | None:
    """Route an entry written into a room (None: not a Message or Directive; it
    admits nothing and leaves the counter alone).

    ``burst`` is the room's counter before the entry; a counter above
    ``budget`` means the spent notice was already written for this burst.
    """
    agents = [host, *members]
    if entry_type is EntryType.DIRECTIVE:
        return Route(first_mention(content, agents) or host, 0)
    if entry_type is not EntryType.MESSAGE:
        return None
    kind, name = parse_sender(sender)
    if kind != "agent":
        return Route(first_mention(content, agents) or host, 0)
    target = first_mention(content, agents, speaker=name)
    if target is None:
        return Route(None, burst)
    if burst < budget:
        return Route(target, burst + 1)
    # Spent: this one wakes nobody; the first such one of the burst says so.
    return Route(None, budget + 1, spent=burst == budget)


def budget_of(room_budget: int | None, default: int | None) -> int:
    """A room's burst budget: its own, else the configured default, else 6."""
    if room_budget is not None:
        return room_budget
    return default if default is not None else DEFAULT_BURST_BUDGET


def spent_notice(budget: int) -> str:
    """The text of the notice a spent burst writes."""
    return (
        f"burst budget spent: {budget} agent messages in a row woke another agent; "
        "agents wake nobody until a person's message (or a Directive) resumes the room"
    )


def roster(me: str, host: str, members: Sequence[str]) -> str:
    """The note a member's context starts with: who else is here, how to address them."""
    others = [a for a in (host, *members) if a != me]
    lines = [f"- @{a}" + (" (host)" if a == host else "") for a in others]
    listing = "\n".join(lines) if lines else "- nobody else"
    return (
        f"You are @{me} in a shared room. The other agents here:\n{listing}\n"
        "To hand the conversation to one of them, @mention them (the first mention of "
        "another agent wakes it). A reply that mentions nobody wakes nobody; "
        "people read everything."
    )


def check_members(host: str, members: Sequence[str]) -> list[str]:
    """Members as given, or ValueError naming what is wrong (host, duplicate, too many)."""
    seen: set[str] = set()
    for m in members:
        if m.lower() == host.lower():
            raise ValueError(f"the host {host!r} cannot also be a member")
        if m.lower() in seen:
            raise ValueError(f"member {m!r} is listed twice")
        seen.add(m.lower())
    if len(members) > MAX_MEMBERS:
        raise ValueError(f"a room has at most {MAX_MEMBERS} members besides its host")
    return list(members)
