"""Session listing and search through the client (issue 12 items 1, 2 and 9), on
SQLite (FTS5 trigram) and PostgreSQL (pg_trgm): docs/sessions.md."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest
from sqlalchemy import text, update

import chaz
from chaz.domain.search import SearchResult
from chaz.errors import ChazError
from chaz.store.statements import SESSIONS
from tests.support.stack import Stack


@pytest.fixture
def client(stack: Stack) -> chaz.Client:
    c = stack.client
    for agent in ("alpha", "beta"):
        c.agents.put(chaz.AgentSpec(id=agent, script=[{"steps": [{"echo": True}]}]))
    return c


def _session(client: chaz.Client, agent: str, *said: str, name: str | None = None) -> chaz.Session:
    # The session's own agent's Messages admit no turn: the corpus needs no workers.
    s = client.sessions.create(agent, name=name)
    for text_ in said:
        client.sessions.post(s.id, text_, sender=f"agent:{agent}")
    return s


def _describe(client: chaz.Client, sid: str, description: str | None) -> None:
    client.services.store.search.describe(sid, description)


def _sql(client: chaz.Client, statement: str, **params: object) -> None:
    with client.services.store.engine.begin() as conn:
        conn.execute(text(statement), params)


def _ids(results: list[SearchResult]) -> list[str]:
    return [r.session.session_id for r in results]


def _error(call: object) -> ChazError:
    assert callable(call)
    with pytest.raises(ChazError) as caught:
        call()
    return caught.value


def test_message_evidence_ranks_first_and_metadata_only_hits_are_kept(
    client: chaz.Client,
) -> None:
    said = _session(client, "alpha", "the flaky-widget failure came back after the deploy")
    named = _session(client, "beta", "nothing to see", name="flaky-widget triage")
    described = _session(client, "beta", "unrelated chatter")
    _describe(client, described.id, "Tracking the flaky-widget regression")
    found = client.sessions.search("flaky-widget")
    assert _ids(found)[0] == said.id
    assert set(_ids(found)) == {said.id, named.id, described.id}
    top = found[0]
    assert top.metadata_matches == [] and len(top.matches) == 1
    assert "«flaky-widget»" in top.matches[0].snippet
    entry = client.sessions.entries(said.id)[0]
    assert top.matches[0].message_id == entry.id
    assert top.matches[0].timestamp == entry.created_at
    by_id = {r.session.session_id: r for r in found}
    assert by_id[named.id].matches == []
    assert [(m.field, m.snippet) for m in by_id[named.id].metadata_matches] == [
        ("name", "«flaky-widget» triage")
    ]
    assert [m.field for m in by_id[described.id].metadata_matches] == ["description"]
    card = by_id[described.id].session
    assert card.description == "Tracking the flaky-widget regression"
    assert card.agent_id == "beta" and card.turn_count == 0 and not card.own


def test_the_limit_counts_sessions_not_rows(client: chaz.Client) -> None:
    chatty = _session(client, "alpha", *[f"kestrel sighting number {i}" for i in range(30)])
    quiet = [_session(client, "alpha", f"one kestrel here {i}") for i in range(3)]
    found = client.sessions.search("kestrel", limit=2)
    assert len(found) == 2 and len(set(_ids(found))) == 2
    every = client.sessions.search("kestrel", limit=10)
    assert set(_ids(every)) == {chatty.id, *(q.id for q in quiet)}
    [mine] = [r for r in every if r.session.session_id == chatty.id]
    assert len(mine.matches) == 3  # the best three of its thirty
    assert len({m.message_id for m in mine.matches}) == 3


def test_the_agent_filter_applies_before_ranking_and_limiting(client: chaz.Client) -> None:
    strong = _session(client, "alpha", "zephyr zephyr", "zephyr", "zephyr again")
    weak = _session(client, "beta", "a long message that mentions zephyr once among many words")
    assert _ids(client.sessions.search("zephyr", limit=1)) == [strong.id]
    # Filtered after a limit of one this would be empty; filtered first it is beta's.
    assert _ids(client.sessions.search("zephyr", agent_id="beta", limit=1)) == [weak.id]
    assert _ids(client.sessions.search("zephyr", agent_id="nobody")) == []


def test_chinese_two_character_accented_and_identifier_queries(client: chaz.Client) -> None:
    zh = _session(client, "alpha", "今天我们讨论了数据库迁移的方案，明天上线。")  # noqa: RUF001
    other_zh = _session(client, "alpha", "迁移到新的机房")
    accented = _session(client, "alpha", "Le café de la gare, près de Genève: crème brûlée")
    code = _session(client, "alpha", "call foo_bar.baz() before fooXbarXbaz runs")
    decoy = _session(client, "alpha", "fooXbar.baz() and foo bar baz are different")
    assert _ids(client.sessions.search("数据库迁移")) == [zh.id]
    assert set(_ids(client.sessions.search("迁移"))) == {zh.id, other_zh.id}
    assert _ids(client.sessions.search("Genève")) == [accented.id]
    assert _ids(client.sessions.search("crème brûlée")) == [accented.id]
    found = client.sessions.search("café")
    assert _ids(found) == [accented.id] and "«café»" in found[0].matches[0].snippet
    # Punctuation is part of the term: `_` and `.` are not wildcards.
    assert _ids(client.sessions.search("foo_bar.baz()")) == [code.id]
    assert set(_ids(client.sessions.search("baz()"))) == {code.id, decoy.id}
    # Case does not matter; a two-letter Latin query scans.
    assert _ids(client.sessions.search("GENÈVE")) == [accented.id]
    assert accented.id in _ids(client.sessions.search("Ge"))


def test_exact_phrases_and_every_term(client: chaz.Client) -> None:
    phrase = _session(client, "alpha", "the quick brown fox jumps")
    apart = _session(client, "alpha", "brown paper, quick lunch")
    assert _ids(client.sessions.search('"quick brown"')) == [phrase.id]
    assert set(_ids(client.sessions.search("quick brown"))) == {phrase.id, apart.id}
    # Every term must match within one message; a short term filters the indexed one.
    assert _ids(client.sessions.search("lunch xq")) == []
    assert _ids(client.sessions.search("lunch pa")) == [apart.id]


def test_hostile_queries_neither_error_nor_widen(client: chaz.Client) -> None:
    s = _session(client, "alpha", "progress: 100% done", '100_x and a*b and it\'s "quoted"')
    _session(client, "alpha", "1000 done, 100x, aab")
    for query in ['"', '""" "', "*", "a*b", "NEAR(a b)", "x OR y", "col:val", "^start", "'", "\\"]:
        client.sessions.search(query)  # no error
    assert _ids(client.sessions.search("100%")) == [s.id]
    assert _ids(client.sessions.search("%")) == [s.id]
    assert _ids(client.sessions.search("100_")) == [s.id]
    assert _ids(client.sessions.search("a*b")) == [s.id]
    assert _ids(client.sessions.search("it's")) == [s.id]
    assert _ids(client.sessions.search('"quoted')) == [s.id]
    nul = _error(lambda: client.sessions.search("bad\x00query"))
    assert nul.code == "request.invalid" and nul.details["field"] == "query"
    big = _error(lambda: client.sessions.search("x" * 10_000))
    assert big.code in ("request.too_large", "request.invalid")
    assert _error(lambda: client.sessions.search("   ")).code == "request.invalid"
    assert _ids(client.sessions.search('"')) == [s.id]  # only quotes: a literal quote
    assert _error(lambda: client.sessions.search("ok", limit=0)).code == "request.invalid"
    assert _error(lambda: client.sessions.search("ok", limit=51)).code == "request.invalid"
    many = " ".join(f"w{i}x" for i in range(17))
    assert _error(lambda: client.sessions.search(many)).code == "request.invalid"


def test_another_projects_sessions_never_appear_nor_take_a_slot(client: chaz.Client) -> None:
    mine = _session(client, "alpha", "a note about the heron migration")
    theirs = [_session(client, "alpha", "heron heron heron migration") for _ in range(3)]
    hidden = _session(client, "alpha", "heron in an archived session")
    client.sessions.archive(hidden.id)
    for s in theirs:
        _sql(client, "UPDATE sessions SET project = 'other' WHERE id = :sid", sid=s.id)
    _describe(client, theirs[0].id, "heron")
    # Their better-ranked sessions neither show up nor use the only slot.
    assert _ids(client.sessions.search("heron", limit=1)) == [mine.id]
    assert _ids(client.sessions.search("he", limit=1)) == [mine.id]
    with chaz.Client(client.settings, migrate=False, project="other") as other:
        assert set(_ids(other.sessions.search("heron"))) == {t.id for t in theirs}
    listed = client.sessions.page(limit=100)
    assert mine.id in {c.session_id for c in listed.sessions}
    assert not {c.session_id for c in listed.sessions} & {hidden.id, *(t.id for t in theirs)}


def test_the_triggers_keep_the_index_in_sync(client: chaz.Client) -> None:
    s = _session(client, "alpha", "original wording about pelicans")
    entry = client.sessions.entries(s.id)[0]
    _sql(client, "UPDATE entries SET content = 'rewritten: cormorants' WHERE id = :e", e=entry.id)
    assert _ids(client.sessions.search("pelicans")) == []
    [hit] = client.sessions.search("cormorants")
    assert hit.matches[0].message_id == entry.id
    # An entry that stops being a Message leaves the index; a deleted one too.
    _sql(client, "UPDATE entries SET type = 'directive' WHERE id = :e", e=entry.id)
    assert _ids(client.sessions.search("cormorants")) == []
    _sql(client, "UPDATE entries SET type = 'message' WHERE id = :e", e=entry.id)
    assert _ids(client.sessions.search("cormorants")) == [s.id]
    _sql(client, "DELETE FROM entries WHERE id = :e", e=entry.id)
    assert _ids(client.sessions.search("cormorants")) == []
    # Names and descriptions follow their edits.
    client.sessions.rename(s.id, "albatross-notes")
    assert _ids(client.sessions.search("albatross")) == [s.id]
    client.sessions.rename(s.id, "gull-notes")
    assert _ids(client.sessions.search("albatross")) == []
    _describe(client, s.id, "puffin survey")
    assert _ids(client.sessions.search("puffin")) == [s.id]
    _describe(client, s.id, None)
    assert _ids(client.sessions.search("puffin")) == []
    # Appends (which bump the session row) keep the metadata indexed.
    client.sessions.post(s.id, "more words", sender="agent:alpha")
    assert _ids(client.sessions.search("gull-notes")) == [s.id]
    gone = _error(lambda: _describe(client, "nosuchsession", "x"))
    assert gone.code == "session.not_found"


def test_pages_visit_every_session_once_with_a_stable_tie_break(client: chaz.Client) -> None:
    made = [client.sessions.create("alpha" if i % 2 else "beta") for i in range(23)]
    # Ties on the activity time are broken by id, so pages neither skip nor repeat.
    tie = datetime(2026, 1, 1, tzinfo=UTC)
    with client.services.store.engine.begin() as conn:
        conn.execute(
            update(SESSIONS)
            .where(SESSIONS.c.id.in_([s.id for s in made[5:15]]))
            .values(active_at=tie)
        )
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(len(made)):
        page = client.sessions.page(limit=4, cursor=cursor)
        assert len(page.sessions) <= 4
        seen += [c.session_id for c in page.sessions]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    else:
        pytest.fail("the cursor did not advance")
    assert sorted(seen) == sorted(s.id for s in made) and len(seen) == len(set(seen))
    times = [c.last_activity for c in client.sessions.page(limit=100).sessions]
    assert times == sorted(times, reverse=True)
    betas = client.sessions.page(agent_id="beta", limit=100).sessions
    assert {c.agent_id for c in betas} == {"beta"} and len(betas) == 12
    for bad in ("garbage", "", "eyJ4Ijox", "W10", '["2026-01-01T00:00:00", 1]'):
        err = _error(lambda bad=bad: client.sessions.page(cursor=bad))
        assert err.code == "request.invalid" and err.details["field"] == "cursor"
    for limit in (0, 101):
        assert _error(lambda limit=limit: client.sessions.page(limit=limit)).code == (
            "request.invalid"
        )


def test_pages_visit_every_session_once_under_concurrent_inserts(client: chaz.Client) -> None:
    before = {client.sessions.create("alpha").id for _ in range(30)}
    first = client.sessions.page(limit=5)
    seen = [c.session_id for c in first.sessions]
    # Another producer creates sessions between and during the page reads.
    stop = threading.Event()
    added: list[str] = []

    def insert() -> None:  # bounded: stops once told to and five are made
        while not stop.is_set() or len(added) < 5:
            added.append(client.sessions.create("beta").id)

    inserter = threading.Thread(target=insert)
    inserter.start()
    try:
        cursor = first.next_cursor
        for _ in range(len(before)):
            if cursor is None:
                break
            page = client.sessions.page(limit=5, cursor=cursor)
            seen += [c.session_id for c in page.sessions]
            added.append(client.sessions.create("beta").id)
            cursor = page.next_cursor
    finally:
        stop.set()
        inserter.join(timeout=60)
    # New sessions are newer than the cursor: every old one is seen exactly once.
    assert len(seen) == len(set(seen))
    assert before <= set(seen)
    assert set(seen) == before
