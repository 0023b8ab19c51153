"""A replica's copy of each thread's values (chaz/server/convo.py), on SQLite
and PostgreSQL with real Redis: every answer equals the database's visible
values up to the reply; the copy is used only when nothing can have changed
them, and a rollback (counted in chaz.coord.rollbacks) makes the next answer
read again."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from chaz.coord import keys, rollbacks
from chaz.domain.agents import AgentSpec
from chaz.domain.entries import Entry, EntryType, NewEntry
from chaz.domain.principals import LOCAL
from chaz.server import mapping
from chaz.server.convo import TYPES, Conversations
from chaz.services import Services
from chaz.usecases import multitask
from tests.support.stack import Stack


@pytest.fixture
def services(stack: Stack) -> Iterator[Services]:
    stack.client.agents.put(AgentSpec(id="bot", script=[{"steps": [{"say": "ok"}]}]))
    made = Services(stack.settings)
    try:
        yield made
    finally:
        made.close()


class Thread:
    """A session whose runs are written by hand: the input admits a job, the
    reply is the agent's message naming it (what a turn writes)."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.store = services.store
        self.id = self.store.create_session("bot").id

    def admit(self, text: str) -> tuple[float, Entry]:
        before = time.monotonic()
        with self.store.admitting(self.id) as tx:
            done = tx.insert(NewEntry(EntryType.MESSAGE, "user:u", text, None, None))
        assert done.entry.job_id is not None
        return before, done.entry

    def reply(self, given: Entry, text: str) -> Entry:
        reply = NewEntry(EntryType.MESSAGE, "agent:bot", text, job_id=given.job_id)
        self.store.import_entries(self.id, [reply])
        return self.store.entries(self.id)[-1]

    def seen(self, given: Entry) -> list[Entry]:
        return self.store.entries(self.id, after=given.seq)

    def values(self, until: int) -> dict[str, Any]:
        return mapping.values(self.store.said(self.id, TYPES, visible=True, until=until))


def test_the_copy_answers_the_databases_values_and_reads_when_another_wrote(
    services: Services,
) -> None:
    convo, t = Conversations(), Thread(services)
    for n in range(3):
        before, given = t.admit(f"q{n}")
        t.reply(given, f"a{n}")
        seen = t.seen(given)
        assert convo.answer(services, given, seen, before) == t.values(seen[-1].seq)
    assert (convo.reads, convo.hits) == (1, 2)
    # Another replica answered a run: this one's copy ends before it.
    _, other = t.admit("elsewhere")
    t.reply(other, "answered elsewhere")
    before, given = t.admit("q3")
    t.reply(given, "a3")
    seen = t.seen(given)
    answer = convo.answer(services, given, seen, before)
    assert answer == t.values(seen[-1].seq)
    assert "answered elsewhere" in str(answer)
    assert convo.reads == 2


def test_a_rollback_since_the_copy_makes_the_next_answer_read(services: Services) -> None:
    convo, t = Conversations(), Thread(services)
    before, given = t.admit("first")
    _, queued = t.admit("secret")  # a run queued behind it, not ended
    t.reply(given, "first answer")
    seen = t.seen(given)
    assert "secret" in str(convo.answer(services, given, seen, before))
    # The queued run is rolled back: only its mark, as multitask does it (no
    # entry follows it, so only the count tells the copy).
    with rollbacks.under_way(services.redis, t.id):
        assert services.store.roll_back(str(queued.job_id))
    before, given = t.admit("next")
    # The reply as this run's own (as if the next seq followed the copy's).
    t.reply(given, "next answer")
    seen = t.seen(given)
    answer = convo.answer(services, given, seen, before)
    assert "secret" not in str(answer)
    assert answer == t.values(seen[-1].seq)
    assert convo.hits == 0


def test_a_redis_that_lost_its_data_after_a_rollback_does_not_revive_the_copy(
    services: Services,
) -> None:
    """The count of a copy made before a rollback never comes back when Redis
    forgets the count (a restart without persistence, a flush)."""
    convo, t = Conversations(), Thread(services)
    before, given = t.admit("first")
    _, queued = t.admit("secret")
    t.reply(given, "first answer")
    seen = t.seen(given)
    assert "secret" in str(convo.answer(services, given, seen, before))
    with rollbacks.under_way(services.redis, t.id):
        assert services.store.roll_back(str(queued.job_id))
    services.redis.delete(keys.rollbacks(t.id))  # what a flush does to it
    before, given = t.admit("next")
    t.reply(given, "next answer")
    seen = t.seen(given)
    answer = convo.answer(services, given, seen, before)
    assert "secret" not in str(answer)
    assert answer == t.values(seen[-1].seq)
    assert convo.hits == 0


def test_while_a_rollback_is_under_way_nothing_is_kept(services: Services) -> None:
    convo, t = Conversations(), Thread(services)
    with rollbacks.under_way(services.redis, t.id):
        before, given = t.admit("q")
        t.reply(given, "a")
        convo.answer(services, given, t.seen(given), before)
    before, given = t.admit("q2")
    t.reply(given, "a2")
    seen = t.seen(given)
    assert convo.answer(services, given, seen, before) == t.values(seen[-1].seq)
    assert (convo.reads, convo.hits) == (2, 0)


def test_a_copy_checked_after_the_run_was_admitted_is_not_extended(services: Services) -> None:
    """A run admitted before the copy was checked may have been rolled back
    before the count was read: its answer reads."""
    convo, t = Conversations(), Thread(services)
    before, given = t.admit("q")
    t.reply(given, "a")
    convo.answer(services, given, t.seen(given), before)
    before, given = t.admit("q2")
    t.reply(given, "a2")
    convo.answer(services, given, t.seen(given), time.monotonic() - 3600)
    assert (convo.reads, convo.hits) == (2, 0)


def test_a_rollback_counts_two_once_it_has_marked(services: Services) -> None:
    t = Thread(services)
    _, given = t.admit("q")
    count = rollbacks.count(services.redis, t.id)
    outcome = multitask.roll_back(services, str(given.job_id), principal=LOCAL)
    assert outcome["rolled_back"]
    assert rollbacks.count(services.redis, t.id) == count + 2
