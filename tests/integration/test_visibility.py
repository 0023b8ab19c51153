"""The one visibility check (docs/contracts.md#invariant-9, docs/contracts.md#visibility): who may
read which session."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

import chaz
from chaz.access import visibility
from chaz.domain.entries import EntryType, NewEntry
from chaz.errors import AmbiguousName, SessionNotFound, Unauthorized
from chaz.services import Services
from chaz.store.types import JobFields
from chaz.usecases import admission
from tests.support.stack import Stack

LEAF = chaz.AgentSpec(id="leaf", script=[{"steps": [{"say": "ok"}]}])


def _job_in(svc: Services, session_id: str, parent_job_id: str | None = None) -> str:
    done = admission.admit(
        svc,
        session_id,
        NewEntry(EntryType.DIRECTIVE, "agent:leaf", "work"),
        job_fields=JobFields(parent_job_id=parent_job_id),
    )
    assert done.job is not None
    return done.job.id


def _denied_equals_missing(svc: Services, viewer: str, denied: str, missing: str) -> None:
    with pytest.raises(SessionNotFound) as got_denied:
        visibility.check_read(svc, viewer, denied)
    with pytest.raises(SessionNotFound) as got_missing:
        visibility.check_read(svc, viewer, missing)
    # Identical once the reference itself is swapped: code, message and details.
    as_denied = json.dumps(got_denied.value.to_dict()).replace(denied, "REF")
    as_missing = json.dumps(got_missing.value.to_dict()).replace(missing, "REF")
    assert as_denied == as_missing
    assert got_denied.value.message == f"no session {denied!r}"


def test_visibility_by_tree_and_lineage_and_a_denied_read_looks_missing(stack: Stack) -> None:
    client = stack.client
    svc = client.services
    client.agents.put(LEAF)
    root = client.sessions.create("leaf", name="alpha-root")
    root_job = _job_in(svc, root.id)
    child = svc.store.create_session(
        "leaf", name="alpha-child", parent_job_id=root_job, tree_id=root.tree_id
    )
    child_job = _job_in(svc, child.id, root_job)
    # Below the child but in a tree of its own: readable only through lineage.
    below = svc.store.create_session("leaf", name="beta-below", parent_job_id=child_job)
    below_job = _job_in(svc, below.id, child_job)
    stranger = client.sessions.create("leaf", name="gamma-stranger")

    assert visibility.can_read(svc, root.id, child.id)  # same tree
    assert visibility.can_read(svc, child.id, root.id)  # same tree, upwards
    assert visibility.can_read(svc, root.id, below.id)  # an ancestor, two hops
    assert visibility.can_read(svc, child.id, below.id)  # an ancestor, one hop
    assert not visibility.can_read(svc, below.id, root.id)  # a descendant is not an ancestor
    assert not visibility.can_read(svc, stranger.id, root.id)
    assert not visibility.can_read(svc, root.id, stranger.id)
    assert not visibility.can_read(svc, root.id, "0" * 32)

    # check_read resolves ids, SID:HEAD, names and prefixes of readable sessions.
    assert visibility.check_read(svc, root.id, f"{below.id}:HEAD").id == below.id
    assert visibility.check_read(svc, root.id, "beta-below").id == below.id
    assert visibility.check_read(svc, root.id, "beta").id == below.id
    with pytest.raises(AmbiguousName) as ambiguous:
        visibility.check_read(svc, root.id, "alpha")
    assert {c["name"] for c in ambiguous.value.details["candidates"]} == {
        "alpha-root",
        "alpha-child",
    }
    # A denied id, name or prefix is answered exactly like a missing one.
    _denied_equals_missing(svc, stranger.id, root.id, "f" * 32)
    _denied_equals_missing(svc, stranger.id, "alpha-root", "alpha-nothing")
    # The prefix matches two sessions the stranger cannot see: not ambiguous, missing.
    _denied_equals_missing(svc, stranger.id, "alpha", "delta")
    _denied_equals_missing(svc, below.id, "alpha-root", "alpha-nothing")

    # A parent_job_id cycle (root made by a job of `below`) must not hang any walk.
    with svc.store.engine.begin() as conn:
        conn.execute(
            text("UPDATE sessions SET parent_job_id = :j WHERE id = :s"),
            {"j": below_job, "s": root.id},
        )
        conn.execute(
            text("UPDATE jobs SET parent_job_id = :j WHERE id = :s"),
            {"j": below_job, "s": root_job},
        )
    assert not visibility.can_read(svc, stranger.id, below.id)
    assert visibility.can_read(svc, root.id, below.id)
    _denied_equals_missing(svc, stranger.id, below.id, "e" * 32)
    # Jobs: their own session, an ancestor job's session; the cycle ends the walk.
    below_job_row = svc.store.get_job(below_job)
    visibility.check_job(svc, below_job_row, below.id)
    visibility.check_job(svc, below_job_row, root.id)
    with pytest.raises(Unauthorized):
        visibility.check_job(svc, below_job_row, stranger.id)
