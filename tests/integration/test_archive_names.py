"""Archive state and ordering (docs/contracts.md#archive, C4's state part), `to` resolution,
renames."""

from __future__ import annotations

import json
import threading

import pytest
from sqlalchemy import func, select, text

import chaz
from chaz.access import branches
from chaz.domain.sessions import ArchivedBy, NameSource
from chaz.errors import AmbiguousName, NameTaken, SessionArchived, SessionNotFound, ValidationError
from chaz.services import Services
from chaz.store.models import SessionRow
from tests.support.stack import Stack

LEAF = chaz.AgentSpec(id="leaf", script=[{"steps": [{"say": "ok"}]}])


def _events(svc: Services, session_id: str, kind: str) -> list[dict[str, object]]:
    with svc.store.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT data FROM events WHERE session_id = :s AND kind = :k ORDER BY id"),
            {"s": session_id, "k": kind},
        ).all()
    return [r[0] if isinstance(r[0], dict) else json.loads(r[0]) for r in rows]


def test_archive_keeps_the_first_time_and_the_manual_reason_in_any_order(stack: Stack) -> None:
    client = stack.client
    svc = client.services
    client.agents.put(LEAF)

    # Manual first, then automatic: nothing the automatic write brings is taken.
    a = client.sessions.create("leaf")
    first, changed = branches.archive(svc, a.id, reason="not needed")
    assert changed and first.archived_by is ArchivedBy.MANUAL and first.archived_at is not None
    again, changed = branches.archive(svc, a.id, reason="done", by=ArchivedBy.AUTO)
    assert not changed
    assert (again.archived_at, again.archive_reason, again.archived_by) == (
        first.archived_at,
        "not needed",
        ArchivedBy.MANUAL,
    )
    # Repeating the manual archive is idempotent too, even with another reason.
    again, changed = branches.archive(svc, f"{a.id}:HEAD", reason="other")
    assert not changed and again.archive_reason == "not needed"
    assert len(_events(svc, a.id, "session.archived")) == 1

    # Automatic first, then manual: the first time stays, the manual reason wins.
    b = client.sessions.create("leaf")
    auto, changed = branches.archive(svc, b.id, reason="done", by=ArchivedBy.AUTO)
    assert changed and auto.archived_by is ArchivedBy.AUTO
    manual, changed = branches.archive(svc, b.id, reason="superseded")
    assert changed
    assert (manual.archived_at, manual.archive_reason, manual.archived_by) == (
        auto.archived_at,
        "superseded",
        ArchivedBy.MANUAL,
    )
    # ...and a later automatic write changes nothing.
    late, changed = branches.archive(svc, b.id, reason="done again", by=ArchivedBy.AUTO)
    assert not changed and late.archive_reason == "superseded"
    assert [e["reason"] for e in _events(svc, b.id, "session.archived")] == ["done", "superseded"]

    # A later request may fill a missing reason, never overwrite one.
    c = client.sessions.create("leaf")
    bare, _ = branches.archive(svc, c.id, by=ArchivedBy.AUTO)
    filled, changed = branches.archive(svc, c.id, reason="cleanup", by=ArchivedBy.AUTO)
    assert changed and bare.archive_reason is None and filled.archive_reason == "cleanup"
    assert filled.archived_at == bare.archived_at

    # Concurrent archives: one archived_at, whoever came first.
    d = client.sessions.create("leaf")
    seen: list[object] = []

    def go(i: int) -> None:
        by = ArchivedBy.MANUAL if i % 2 else ArchivedBy.AUTO
        seen.append(branches.archive(svc, d.id, reason=f"r{i}", by=by)[0].archived_at)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = client.sessions.get(d.id)
    assert set(seen) == {final.archived_at}
    assert final.archived_by is ArchivedBy.MANUAL and final.archive_reason in {
        "r1",
        "r3",
        "r5",
        "r7",
    }

    # An archived session is hidden from the normal listing, shown in the archived one,
    # and refuses deliveries; reading and archiving it still resolve.
    assert a.id not in {s.id for s in client.sessions.list()}
    assert a.id in {s.id for s in client.sessions.list(archived=True)}
    with pytest.raises(SessionArchived) as refused:
        branches.resolve_target(svc, a.id, deliverable=True)
    assert refused.value.code == "session.archived"
    assert branches.resolve_target(svc, a.id, deliverable=False).id == a.id


def test_to_resolution_and_names(stack: Stack) -> None:
    client = stack.client
    svc = client.services
    client.agents.put(LEAF)
    review = client.sessions.create("leaf", name="review")
    for i in range(12):
        client.sessions.create("leaf", name=f"worker-{i:02d}")
    solo = client.sessions.create("leaf", name="solo-session")

    assert branches.resolve_target(svc, f"{review.id}:HEAD", deliverable=True).id == review.id
    assert branches.resolve_target(svc, "review", deliverable=True).id == review.id
    assert branches.resolve_target(svc, "solo", deliverable=True).id == solo.id
    with pytest.raises(AmbiguousName) as ambiguous:
        branches.resolve_target(svc, "worker", deliverable=True)
    err = ambiguous.value
    assert err.code == "session.ambiguous" and len(err.details["candidates"]) == 10
    first = err.details["candidates"][0]
    assert first["name"] == "worker-00" and first["to"].endswith(":HEAD")
    with pytest.raises(SessionNotFound):
        branches.resolve_target(svc, "nobody", deliverable=False)
    with pytest.raises(ValidationError) as entry_address:
        branches.resolve_target(svc, f"{review.id}:3", deliverable=False)
    assert entry_address.value.field == "to"
    # Archived sessions leave the prefix lookup (exact addresses still find them).
    branches.archive(svc, "solo-session")
    with pytest.raises(SessionNotFound):
        branches.resolve_target(svc, "solo", deliverable=False)
    assert branches.resolve_target(svc, "solo-session", deliverable=False).id == solo.id

    # A person's rename is final: stage 2's compare-and-set leaves it alone.
    named = client.sessions.rename(review.id, "code review")
    assert (named.name, named.name_source) == ("code review", NameSource.USER)
    auto = svc.store.rename_session(review.id, "auto", source=NameSource.AUTO, only_if_auto=True)
    assert auto is None
    assert client.sessions.get(review.id).name == "code review"
    with pytest.raises(NameTaken):
        client.sessions.rename(review.id, "worker-01")
    assert [e["name"] for e in _events(svc, review.id, "session.renamed")] == ["code review"]


def _sessions(client: chaz.Client) -> int:
    with client.services.store.engine.connect() as conn:
        return int(conn.scalar(select(func.count()).select_from(SessionRow)) or 0)


def test_names_are_unique_per_project(stack: Stack) -> None:
    """Two projects each have a ``main`` (docs/contracts.md#names): a taken name says
    nothing about another project, and every lookup by name finds its own project's."""
    admin = stack.client
    svc = admin.services
    admin.agents.put(LEAF)
    grants = ["history.read", "session.write"]
    _, key_a = admin.keys.create("user:alice", "acme", grants)
    _, key_b = admin.keys.create("user:bob", "beta", grants)
    with (
        chaz.Client(stack.settings, migrate=False, api_key=key_a) as a,
        chaz.Client(stack.settings, migrate=False, api_key=key_b) as b,
    ):
        mine = a.sessions.create("leaf", name="main")
        theirs = b.sessions.create("leaf", name="main")
        assert (mine.project, theirs.project) == ("acme", "beta")

        # Within one project the name is still taken, and the refusal writes nothing.
        before = _sessions(admin)
        with pytest.raises(NameTaken) as taken:
            a.sessions.create("leaf", name="main")
        assert taken.value.code == "conflict.name_taken"
        other = b.sessions.create("leaf", name="side")
        with pytest.raises(NameTaken):
            b.sessions.rename(other.id, "main")
        assert _sessions(admin) == before + 1
        # A rename into a name another project uses is free.
        assert admin.sessions.rename(admin.sessions.create("leaf").id, "main").name == "main"

        # Each project's lookups by name, exact or prefix, find its own.
        assert a.sessions.get("main").id == mine.id
        assert b.sessions.get("main").id == theirs.id
        for ref in ("main", "mai"):
            assert branches.resolve_target(svc, ref, deliverable=True, project="acme").id == (
                mine.id
            )
            assert branches.resolve_target(svc, ref, deliverable=True, project="beta").id == (
                theirs.id
            )
        assert [s.id for s in svc.store.find_sessions("main", project="acme")] == [mine.id]
        # Automatic names pick a free suffix among the project's own names only.
        assert svc.store.names_with_prefix("main", project="acme") == {"main"}
        assert svc.store.names_with_prefix("side", project="acme") == set()
        auto = svc.store.create_session("leaf", names=("side", "side-2"), project="acme")
        assert auto.name == "side"
