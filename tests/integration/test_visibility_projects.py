"""Property: from inside a turn nothing crosses projects (issue 11 item 3, C8).

A fixed world of sessions and jobs in three projects, tied together as
closely as rows can be across projects (shared trees, callers, parent
jobs, names sharing prefixes); generated viewers, refs and grant sets. A
turn's lookups (``visibility.check_read``, ``branches.resolve_target``
with the turn's project, ``branches.summaries``, ``visibility.check_job``)
never yield another project's session or job, and a turn's grants never
exceed either of the sets they come from.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import chaz
from chaz.access import branches, visibility
from chaz.domain.entries import EntryType, NewEntry
from chaz.domain.principals import ALL_GRANTS, Grant, narrow, turn_grants
from chaz.errors import AmbiguousName, SessionNotFound, Unauthorized
from chaz.services import Services
from chaz.store.types import JobFields
from chaz.usecases import admission
from tests.support.stack import Stack

PROJECTS = ("default", "acme", "zeta")
LEAF = chaz.AgentSpec(id="leaf", script=[{"steps": [{"say": "ok"}]}])
#: 300 fixed examples on a default run (of 8,640 viewer, target, reference and
#: job combinations); ``CHAZ_TEST_PROPERTY_EXAMPLES`` widens the run with random
#: ones (docs/testing.md#generated-input).
WIDE = int(os.environ.get("CHAZ_TEST_PROPERTY_EXAMPLES") or 0)
PROPERTY = settings(
    max_examples=WIDE or 300,
    deadline=None,
    derandomize=not WIDE,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _job(svc: Services, session_id: str, **fields: str | None) -> chaz.Job:
    done = admission.admit(
        svc,
        session_id,
        NewEntry(EntryType.DIRECTIVE, "agent:leaf", "work"),
        job_fields=JobFields(**fields),  # type: ignore[arg-type]
    )
    assert done.job is not None
    return done.job


@pytest.fixture
def world(stack: Stack) -> tuple[Services, list[chaz.Session], list[chaz.Job]]:
    svc = stack.client.services
    stack.client.agents.put(LEAF)
    store = svc.store
    sessions: list[chaz.Session] = []
    jobs: list[chaz.Job] = []
    root = store.create_session("leaf", name="shared-0-default", project="default")
    sessions.append(root)
    for i in range(1, 12):
        project = PROJECTS[i % 3]
        # Every third joins the first tree whatever its project; names share prefixes.
        tree = root.tree_id if i % 3 == 0 or i % 4 == 0 else None
        sessions.append(
            store.create_session(
                "leaf", name=f"shared-{i}-{project}", project=project, tree_id=tree
            )
        )
    for i, s in enumerate(sessions):
        # Each job is called by, and descends from, a session of another project.
        other = sessions[(i + 1) % len(sessions)]
        parent = jobs[-1].id if jobs else None
        jobs.append(_job(svc, s.id, caller_session_id=other.id, parent_job_id=parent))
    return svc, sessions, jobs


GRANT_SETS = st.one_of(st.none(), st.frozensets(st.sampled_from(list(Grant))))


@PROPERTY
@given(data=st.data())
def test_a_turns_lookups_never_cross_projects(
    world: tuple[Services, list[chaz.Session], list[chaz.Job]], data: st.DataObject
) -> None:
    svc, sessions, jobs = world
    by_id = {s.id: s for s in sessions}
    viewer = data.draw(st.sampled_from(sessions))
    target = data.draw(st.sampled_from(sessions))
    ref = data.draw(
        st.sampled_from(
            [target.id, f"{target.id}:HEAD", target.name or target.id, "shared-", "shared-1"]
        )
    )
    try:
        found = visibility.check_read(svc, viewer.id, ref)
        assert found.project == viewer.project
    except (SessionNotFound, AmbiguousName) as exc:
        for candidate in exc.details.get("candidates", []):
            sid = candidate["to"].split(":")[0]
            assert by_id[sid].project == viewer.project
    try:
        resolved = branches.resolve_target(svc, ref, deliverable=True, project=viewer.project)
        assert resolved.project == viewer.project
    except (SessionNotFound, AmbiguousName) as exc:
        for candidate in exc.details.get("candidates", []):
            assert by_id[candidate["to"].split(":")[0]].project == viewer.project
    listed = branches.summaries(svc, tree_id=None, archived=False, project=viewer.project)
    assert {item.session.project for item in listed} <= {viewer.project}
    job = data.draw(st.sampled_from(jobs))
    try:
        visibility.check_job(svc, job, viewer.id)
        assert job.project == viewer.project
    except Unauthorized:
        pass


@PROPERTY
@given(agent=GRANT_SETS, starter=GRANT_SETS, child_agent=GRANT_SETS)
def test_grants_only_narrow_along_a_chain(
    agent: frozenset[Grant] | None,
    starter: frozenset[Grant] | None,
    child_agent: frozenset[Grant] | None,
) -> None:
    held = turn_grants(agent, starter)
    assert held <= (agent if agent is not None else ALL_GRANTS)
    assert held <= (starter if starter is not None else ALL_GRANTS)
    # A sub-agent's job carries the parent's turn grants: it can only hold less.
    child = turn_grants(child_agent, held)
    assert child <= held
    assert narrow(held, None) == held
