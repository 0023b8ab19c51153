"""Where a turn reads its context (issue 25 items 5 and 6).

On SQLite the start's unit of work (``Store.turn_start``) reads no entry,
and a turn run by the runner publishes its Ack before its first context
read. On PostgreSQL the start's statement reads the context's first
window with its writes, so that a turn is three transactions in all, its
admission included (the capacity benchmark's count, docs/capacity.md). On
both, the context is the one the setup would have read: the entries up to
the trigger, none written since (the Ack), a rollback-hidden one still
hidden."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event

import chaz
from chaz.domain.entries import EntryType, NewEntry
from chaz.domain.jobs import JobStatus
from chaz.store import Store
from chaz.store import statements as st
from chaz.store.types import TurnSetup
from chaz.store.writes import roll_back
from chaz.usecases import completion
from chaz.usecases.turns import TurnRunner
from tests.support.stack import Stack

pytest_plugins = ["tests.support.store_fixtures"]

AGENT = chaz.AgentSpec(id="ctx", script=[{"steps": [{"say": "ok"}]}])


def _reads_entries(statement: str) -> bool:
    flat = " ".join(statement.split()).upper()
    # A read of entries, or the start's statement reading the context's first
    # window with its writes (chaz.store.oneshot.START_WITH_ACK_AND_CONTEXT).
    return "FROM ENTRIES" in flat and (flat.startswith("SELECT") or "JSON_AGG(" in flat)


def _admit(store: Store, session_id: str, text: str) -> str:
    with store.admitting(session_id) as tx:
        done = tx.insert(NewEntry(EntryType.MESSAGE, "user:u", text))
    assert done.job is not None
    return done.job.id


def _said(setup: TurnSetup | None) -> tuple[list[tuple[str, int, str]], str | None]:
    assert setup is not None
    history = [(e.id, e.seq, e.content) for e in setup.history]
    return history, setup.trigger.id if setup.trigger is not None else None


def test_the_start_reads_no_entry_and_the_context_after_it_is_the_same(store: Store) -> None:
    s = store.create_session("bot")
    hidden = _admit(store, s.id, "zero")
    with store.db.write() as conn:
        # A rolled-back job's entries are hidden from every context.
        assert roll_back(conn, [hidden]) == 1
    store.transition(hidden, JobStatus.CANCELLED, completion=completion.ended)
    _admit(store, s.id, "one")
    _admit(store, s.id, "two")
    before = store.turn_setup(s.id, max_context=200)
    assert _said(before)[0] and [c for _, _, c in _said(before)[0]] == ["one"]
    ran: list[str] = []

    def seen(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        ran.append(statement)

    event.listen(store.engine, "before_cursor_execute", seen)
    try:
        with store.turn_start(s.id, 200) as tx:
            setup = tx.setup
            assert setup is not None and setup.history == [] and setup.trigger is None
            job, ack = tx.start("t1", ack_sender="agent:bot")
            in_start = list(ran)
        assert ack is not None and job.starts == 1
        ran.clear()
        after = store.turn_context(tx.setup or setup, 200)
    finally:
        event.remove(store.engine, "before_cursor_execute", seen)
    reads = [i for i, r in enumerate(in_start) if _reads_entries(r)]
    if store.db.sqlite:
        # No context read between the wake-up and the Ack: it comes after.
        assert reads == [], in_start
        assert any(_reads_entries(r) for r in ran), ran
    else:
        # In the start's transaction: its statement (the Ack's insert) reads
        # the context's first window too.
        assert reads and reads[0] > 0, in_start
        assert not _reads_entries(in_start[0]), in_start
        assert ran == []  # read already: turn_context runs nothing
    # The same entries as the setup read before the start (not the Ack).
    assert _said(after) == _said(before)
    # A resumed start (another token) reads the same context again.
    with store.turn_start(s.id, 200) as tx:
        assert tx.setup is not None
        tx.start("t2", ack_sender="agent:bot")
    assert _said(store.turn_context(tx.setup, 200)) == _said(before)


def _noise(n: int) -> list[NewEntry]:
    return [NewEntry(EntryType.TOOL_CALL, "agent:bot", "{}") for _ in range(n)]


def _shaped(store: Store, shape: str) -> str:
    """A session whose head job's context takes more than the start's one
    window to read: context entries windows apart, a Summary, a fork; its id."""
    w, m = st.CONTEXT_WINDOW, EntryType.MESSAGE
    s = store.create_session("bot")
    if shape == "windows":
        far = [NewEntry(m, "user:u", "oldest"), *_noise(3 * w), NewEntry(m, "user:u", "older")]
        store.import_entries(s.id, [*far, *_noise(w)])
    elif shape == "summary":
        store.import_entries(
            s.id,
            [
                NewEntry(m, "user:u", "before"),
                NewEntry(EntryType.SUMMARY, "user:u", "first"),
                *_noise(2 * w),
                NewEntry(m, "user:u", "after"),
            ],
        )
    else:  # a fork, read through its source
        store.import_entries(s.id, [NewEntry(m, "user:u", "source"), *_noise(w)])
        s = store.create_session("bot", fork=(s.id, store.get_session(s.id).last_seq))
    _admit(store, s.id, "now")
    return s.id


@pytest.mark.parametrize("shape", ["windows", "summary", "fork"])
@pytest.mark.parametrize("limit", [200, 2])
def test_the_start_reads_the_context_the_setup_would(store: Store, shape: str, limit: int) -> None:
    """The start's statement reads the context's first window only (on
    PostgreSQL); the rest is read after it, the same entries as the setup's."""
    sid = _shaped(store, shape)
    before = store.turn_setup(sid, max_context=limit)
    with store.turn_start(sid, limit) as tx:
        assert tx.setup is not None
        tx.start("t1", ack_sender="agent:bot")
    assert _said(store.turn_context(tx.setup, limit)) == _said(before)
    assert len(_said(before)[0]) == min(limit, {"windows": 3, "summary": 3, "fork": 2}[shape])


def _start_head(
    store: Store, sid: str, limit: int = 200, *, job_id: str = "", tree_id: str = ""
) -> Any:
    """``Store.start_head`` of the session's head job (or of ``job_id`` in ``tree_id``)."""
    if not job_id or not tree_id:
        head = store.head_job(sid)
        assert head is not None
        job_id, tree_id = job_id or head.id, tree_id or head.tree_id
    return store.start_head(sid, job_id, tree_id, "t1", ack_metadata=None, max_context=limit)


@pytest.mark.parametrize("shape", ["windows", "summary", "fork"])
@pytest.mark.parametrize("limit", [200, 2])
def test_the_start_with_its_setup_reads_what_the_setup_and_start_would(
    store: Store, shape: str, limit: int
) -> None:
    """``Store.start_head`` (PostgreSQL: the setup's read and the start in one
    statement) gives the setup as read, the context the setup would read,
    the job as started and its Ack; SQLite has no such statement."""
    sid = _shaped(store, shape)
    before = store.turn_setup(sid, max_context=limit)
    assert before is not None
    started = _start_head(store, sid, limit)
    if store.db.sqlite:
        assert started is None
        return
    assert started is not None
    setup, job, ack = started
    assert _said(setup) == _said(before)
    assert (setup.job, setup.session, setup.agent, setup.budget) == (
        before.job,
        before.session,
        before.agent,
        before.budget,
    )
    assert (job.status, job.starts, job.attempts, job.version) == (
        JobStatus.RUNNING,
        1,
        1,
        before.job.version + 1,
    )
    assert store.get_job(job.id) == job
    assert (ack.type, ack.sender, ack.job_id, ack.seq) == (
        EntryType.ACK,
        "agent:bot",
        job.id,
        before.session.last_seq + 1,
    )
    assert store.get_session(sid).last_seq == ack.seq
    assert [e.id for e in store.entries(sid, after=before.session.last_seq)] == [ack.id]


@pytest.mark.parametrize("case", ["later job", "other tree", "cancelled", "started", "no job"])
def test_the_start_with_its_setup_writes_nothing_unless_it_is_a_plain_first_start(
    store: Store, case: str
) -> None:
    """Any job but the session's head in the tree the wake-up named, queued and
    never started, is left to the setup's read: nothing is written."""
    s = store.create_session("bot")
    first = _admit(store, s.id, "one")
    named: dict[str, str] = {}
    if case == "later job":
        named["job_id"] = _admit(store, s.id, "two")
    elif case == "other tree":
        named["tree_id"] = "elsewhere"
    elif case == "cancelled":
        store.transition(first, JobStatus.CANCELLED, completion=completion.ended)
        named["job_id"] = first
    elif case == "started":
        with store.turn_start(s.id, 200) as tx:
            tx.start("t0", ack_sender="agent:bot")
    else:
        named["job_id"] = "nosuchjob"
    jobs_before = {j.id: j for j in store.list_jobs(session_id=s.id)}
    seq_before = store.get_session(s.id).last_seq
    head = store.head_job(s.id)
    named.setdefault("tree_id", s.tree_id)
    named.setdefault("job_id", head.id if head is not None else first)
    assert _start_head(store, s.id, job_id=named["job_id"], tree_id=named["tree_id"]) is None
    assert {j.id: j for j in store.list_jobs(session_id=s.id)} == jobs_before
    assert store.get_session(s.id).last_seq == seq_before


def _posted(stack: Stack, text: str) -> tuple[str, str]:
    """A new session of AGENT and the job of a message posted to it."""
    stack.client.agents.put(AGENT)
    s = stack.client.sessions.create(AGENT.id)
    job_id = stack.client.sessions.post(s.id, text).job_id
    assert job_id is not None
    return s.id, job_id


def test_a_turn_publishes_its_ack_before_it_reads_its_context(stack: Stack) -> None:
    client, svc = stack.client, stack.client.services
    sid, job_id = _posted(stack, "hello")
    order: list[str] = []

    def seen(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        if _reads_entries(statement):
            order.append("entries")

    started = svc.signals.started

    def publish(*args: Any, **kwargs: Any) -> bool:
        order.append("ack")
        return started(*args, **kwargs)

    svc.signals.started = publish  # type: ignore[method-assign]
    event.listen(svc.store.engine, "before_cursor_execute", seen)
    try:
        outcome = TurnRunner(svc, client.tools).wake(sid, job_id)
    finally:
        event.remove(svc.store.engine, "before_cursor_execute", seen)
        del svc.signals.started
    assert outcome.ran == (job_id,)
    assert "ack" in order and "entries" in order, order
    if svc.store.db.sqlite:
        assert order.index("ack") < order.index("entries"), order
    else:
        # Read in the start's transaction, which the Ack's publish follows.
        assert order.index("entries") < order.index("ack"), order
    assert client.jobs.get(job_id).status is JobStatus.SUCCEEDED


@pytest.mark.parametrize("named", [False, True], ids=["wake-up", "named job and tree"])
def test_a_turn_and_its_admission_are_three_transactions(stack: Stack, named: bool) -> None:
    """Each ``COMMIT`` and each statement run with no transaction around it
    is a transaction (what ``pg_stat_database`` counts): the admission, the
    start with its context, the end. A wake-up that names its job and tree
    (a worker's) takes the setup's read and the start in one statement."""
    if stack.kind != "server":
        pytest.skip("the count is PostgreSQL's (docs/capacity.md)")
    client, svc = stack.client, stack.client.services
    # A first turn fills what a worker and a producer keep (the project's
    # limits, the quota counters rebuilt from the database): the count is
    # of a turn in a running fleet.
    sid, first = _posted(stack, "warm")
    assert TurnRunner(svc, client.tools).wake(sid, first).ran == (first,)
    seen: list[str] = []

    def statement(conn: Any, _cur: Any, text: str, *_: Any) -> None:
        alone = conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT"
        seen.append(("alone: " if alone else "in: ") + " ".join(text.split())[:60])

    def commit(_conn: Any) -> None:
        seen.append("commit")

    # The session's tree, as the admission's wake-up names it.
    tree = svc.store.get_session(sid).tree_id if named else None
    event.listen(svc.store.engine, "before_cursor_execute", statement)
    event.listen(svc.store.engine, "commit", commit)
    try:
        job_id = client.sessions.post(sid, "hello").job_id
        assert job_id is not None
        outcome = TurnRunner(svc, client.tools).wake(sid, job_id, tree=tree)
    finally:
        event.remove(svc.store.engine, "before_cursor_execute", statement)
        event.remove(svc.store.engine, "commit", commit)
    assert outcome.ran == (job_id,)
    assert client.jobs.get(job_id).status is JobStatus.SUCCEEDED
    transactions = [x for x in seen if x == "commit" or x.startswith("alone: ")]
    assert len(transactions) == 3, seen
    # Which start ran: the one statement, or the setup's read in a transaction.
    assert any(x.startswith("alone: WITH head") for x in seen) is named, seen
    assert any(x.startswith("in: SELECT sessions.") for x in seen) is not named, seen
