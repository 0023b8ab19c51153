"""Rooms' pure rules: mentions, routing, the burst budget, the roster (docs/rooms.md)."""

from __future__ import annotations

import pytest

from chaz.domain.entries import EntryType, Said
from chaz.domain.rooms import (
    DEFAULT_BURST_BUDGET,
    MAX_MEMBERS,
    Route,
    budget_of,
    check_members,
    first_mention,
    mentions,
    roster,
    route,
)
from chaz.runtime.context import build_context

AGENTS = ["host", "a", "b.bot", "c-2"]


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("@a hi", ["a"]),
        ("hi @A and @b.bot.", ["a", "b.bot."]),
        ("mail email@x.com or @@a", []),
        ("(@c-2) @host,", ["c-2", "host"]),
    ],
)
def test_mentions_are_words_not_addresses(text: str, found: list[str]) -> None:
    assert mentions(text) == found


@pytest.mark.parametrize(
    ("text", "speaker", "wakes"),
    [
        ("@a then @b.bot", None, "a"),
        ("@B.BOT then @a", None, "b.bot"),  # case-insensitive, first wins, spelled as the room does
        ("thanks @b.bot.", None, "b.bot"),  # sentence punctuation after a mention
        ("@a, over to @host", "a", "host"),  # the speaker's own mention is skipped
        ("@a alone", "a", None),
        ("@abc and @zed", None, None),  # not members; @abc is not @a
        ("write to a@host.com", None, None),
    ],
)
def test_first_mention(text: str, speaker: str | None, wakes: str | None) -> None:
    assert first_mention(text, AGENTS, speaker) == wakes


def test_people_and_directives_wake_a_mention_else_the_host_and_reset_the_burst() -> None:
    members = AGENTS[1:]
    assert route("host", members, EntryType.MESSAGE, "user:al", "hi", 5, 6) == Route("host", 0)
    assert route("host", members, EntryType.MESSAGE, "system:x", "@a", 9, 6) == Route("a", 0)
    assert route("host", members, EntryType.DIRECTIVE, "agent:a", "@c-2 go", 3, 6) == Route(
        "c-2", 0
    )
    assert route("host", members, EntryType.ACK, "user:al", "@a", 3, 6) is None


def test_agents_wake_only_others_they_mention_within_the_budget() -> None:
    members = AGENTS[1:]

    def say(sender: str, text: str, burst: int, budget: int = 2) -> Route | None:
        return route("host", members, EntryType.MESSAGE, f"agent:{sender}", text, burst, budget)

    assert say("a", "no mention", 1) == Route(None, 1)
    assert say("a", "@a me again", 1) == Route(None, 1)
    assert say("a", "@zed stranger", 1) == Route(None, 1)
    assert say("a", "@host you", 0) == Route("host", 1)
    assert say("host", "@a you", 1) == Route("a", 2)
    # Spent: wakes nobody; the first one says so (counter past the budget), later ones do not.
    assert say("a", "@host you", 2) == Route(None, 3, spent=True)
    assert say("host", "@a you", 3) == Route(None, 3)
    # A budget of 0: agents never wake each other.
    assert say("a", "@host", 0, budget=0) == Route(None, 1, spent=True)


def test_budget_and_members() -> None:
    assert budget_of(None, None) == DEFAULT_BURST_BUDGET == 6
    assert budget_of(None, 2) == 2
    assert budget_of(0, 2) == 0
    assert check_members("host", ["a", "b"]) == ["a", "b"]
    for bad in (["HOST"], ["a", "A"], [f"m{i}" for i in range(MAX_MEMBERS + 1)]):
        with pytest.raises(ValueError):
            check_members("host", bad)


def test_roster_names_the_others_and_how_to_address_them() -> None:
    note = roster("a", "host", ["a", "b"])
    assert "You are @a" in note
    assert "- @host (host)" in note and "- @b" in note and "- @a\n" not in note
    assert "@mention" in note


def test_member_context_is_its_own_with_the_roster_after_the_system_prompt() -> None:
    entries = [
        Said("1", 1, EntryType.MESSAGE, "user:al", "@a hi"),
        Said("2", 2, EntryType.MESSAGE, "agent:a", "@b yours"),
        Said("3", 3, EntryType.MESSAGE, "agent:b", "@a back"),
    ]
    messages = build_context("SYS", entries, "b", notes=["ROSTER"])
    assert messages == [
        {"role": "system", "content": "SYS"},
        {"role": "system", "content": "ROSTER"},
        {"role": "user", "content": "@a hi", "name": "user_al"},
        {"role": "user", "content": "@b yours", "name": "agent_a"},
        {"role": "assistant", "content": "@a back"},
    ]
