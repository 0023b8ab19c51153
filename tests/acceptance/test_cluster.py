"""Faults per shard of a Redis Cluster used as coordination
(docs/coordination.md#on-a-redis-cluster): a master killed under load pauses
only the projects on its slots, a flushed master has only its counters
rebuilt, and in both nothing is lost, nothing runs twice and each session
keeps its order. The broker is a plain Redis beside the cluster.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.crc import key_slot

import chaz
from chaz.coord import keys
from chaz.domain.entries import EntryType
from chaz.usecases.reconcile import Reconciler
from tests.support.redis_cluster import Cluster, Node
from tests.support.stack import Stack

pytestmark = pytest.mark.cluster

ECHO = chaz.AgentSpec(id="echo", script=[{"steps": [{"echo": True}]}])
#: Sessions per project, and messages per session.
SESSIONS, MESSAGES = 3, 4
WAIT = 120.0


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A cluster of this module's own: its tests kill and flush nodes."""
    cluster = Cluster(tmp_path_factory.mktemp("fault-cluster")).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def cstack(nodes: Cluster, pg_url: str, redis_url: str, tmp_path: Path) -> Iterator[Stack]:
    """The cluster stack on this module's cluster (every node running)."""
    for node in nodes.nodes:
        if node.proc is None:
            node.start()
    nodes.wait_ok()
    s = Stack.cluster(tmp_path / "home", pg_url, nodes, broker_url=redis_url)
    try:
        yield s
    finally:
        s.close()


def project_slot(project: str) -> int:
    """The slot every coordination key of ``project`` lives on."""
    return key_slot(keys.lane("x", keys.tag(project)).encode())


def projects_apart(nodes: Cluster) -> tuple[str, str, Node]:
    """Two project names, the first on one master and the second on another;
    and the first one's master."""
    by_node: dict[int, str] = {}
    i = 0
    while len(by_node) < 2:
        name = f"shard-{i}"
        by_node.setdefault(nodes.master_of(project_slot(name)).port, name)
        i += 1
    (port_a, a), (_, b) = list(by_node.items())[:2]
    return a, b, next(n for n in nodes.nodes if n.port == port_a)


def post_all(
    client: chaz.Client, sessions: list[chaz.Session], tag: str, *, retry: bool = False
) -> list[chaz.Entry]:
    """``MESSAGES`` posts into each session; with ``retry``, a post refused with
    ``backend.unavailable`` is sent again, as a producer must (a client whose
    view of the cluster is stale after a failover learns the new one so)."""
    out = []
    for i in range(MESSAGES):
        for s in sessions:
            for attempt in range(20 if retry else 1):
                try:
                    out.append(client.sessions.post(s.id, f"{tag}-{s.id}-{i}", sender="user:a"))
                    break
                except chaz.errors.BackendUnavailable:
                    if attempt == 19 or not retry:
                        raise
                    time.sleep(0.25)
    return out


def done(client: chaz.Client, posted: list[chaz.Entry]) -> bool:
    return all(client.jobs.get(p.job_id or "").status.terminal for p in posted)


def assert_once_in_order(client: chaz.Client, sessions: list[chaz.Session]) -> None:
    """Every admitted message answered once, in admission order, every job succeeded."""
    for s in sessions:
        entries = client.sessions.entries(s.id)
        asked = [e.content for e in entries if e.type is EntryType.MESSAGE and e.sender == "user:a"]
        replies = [
            e.content for e in entries if e.type is EntryType.MESSAGE and e.sender == "agent:echo"
        ]
        assert replies == asked, (
            f"session {s.id}: {[(e.type, e.sender, e.content) for e in entries]}"
        )
        jobs = client.jobs.list(session_id=s.id)
        assert len(jobs) == len(asked)
        assert all(j.status is chaz.JobStatus.SUCCEEDED for j in jobs)
        # One start Ack per job: a resumed attempt would add a "resumed" one.
        assert [e.type for e in entries].count(EntryType.ACK) >= len(asked)


def dispatch_seconds(client: chaz.Client, posted: list[chaz.Entry]) -> list[float]:
    """Commit -> Ack of each posted message's job, from the database's timestamps."""
    out = []
    for p in posted:
        ack = next(
            e
            for e in client.sessions.entries(p.session_id)
            if e.type is EntryType.ACK and e.job_id == p.job_id
        )
        out.append((ack.created_at - p.created_at).total_seconds())
    return out


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) > 1 else values[0]


def test_a_killed_master_pauses_only_its_projects_and_loses_nothing(cstack: Stack) -> None:
    nodes = cstack.nodes
    assert nodes is not None
    far, near, victim = projects_apart(nodes)
    cstack.workers(2, concurrency=4, beat=True)
    paused = chaz.Client(cstack.settings, migrate=False, project=far)
    going = chaz.Client(cstack.settings, migrate=False, project=near)
    try:
        going.agents.put(ECHO)
        a = [paused.sessions.create("echo") for _ in range(SESSIONS)]
        b = [going.sessions.create("echo") for _ in range(SESSIONS)]
        before = post_all(going, b, "before")
        admitted = post_all(paused, a, "admitted")
        cstack.wait_for(lambda: done(going, before), WAIT, "the turns before the kill")

        victim.kill()
        # The other shards' projects go on while the victim is down: all of
        # these finish before the test brings it back.
        during = post_all(going, b, "during")
        cstack.wait_for(lambda: done(going, during), WAIT, "the other shards' turns")
        with pytest.raises(chaz.errors.ChazError):
            paused.sessions.post(a[0].id, "refused", sender="user:a")

        victim.start()
        nodes.wait_ok()
        cstack.wait_for(lambda: done(paused, admitted), WAIT, "the victim's turns")
        assert_once_in_order(paused, a)
        assert_once_in_order(going, b)
        # For docs/coordination.md: the other shards' dispatch, before and during.
        print(
            f"dispatch p99 before {p99(dispatch_seconds(going, before)):.3f} s, "
            f"during the outage {p99(dispatch_seconds(going, during)):.3f} s"
        )
    finally:
        paused.close()
        going.close()


def test_a_flushed_master_has_only_its_counters_rebuilt(cstack: Stack) -> None:
    nodes = cstack.nodes
    assert nodes is not None
    far, near, victim = projects_apart(nodes)
    flushed = chaz.Client(cstack.settings, migrate=False, project=far)
    kept = chaz.Client(cstack.settings, migrate=False, project=near)
    try:
        kept.agents.put(ECHO)
        a = [flushed.sessions.create("echo") for _ in range(SESSIONS)]
        b = [kept.sessions.create("echo") for _ in range(SESSIONS)]
        posted_a, posted_b = post_all(flushed, a, "x"), post_all(kept, b, "y")
        r = kept.services.redis
        tb = keys.tag(near)
        before = [r.get(keys.cumulative(s.id, tb)) for s in b]
        assert before == [str(MESSAGES)] * SESSIONS

        with victim.client() as c:
            c.flushall()
        ta = keys.tag(far)
        assert all(r.get(keys.cumulative(s.id, ta)) is None for s in a)
        # The reconciler's rebuild restores the flushed shard's counters, and
        # only those: the other shard's were never missing.
        report = Reconciler(kept.services, grace_seconds=3600).run()
        assert report.counters_rebuilt == SESSIONS
        assert [r.get(keys.cumulative(s.id, ta)) for s in a] == [str(MESSAGES)] * SESSIONS
        assert [r.get(keys.cumulative(s.id, tb)) for s in b] == before

        cstack.workers(2, concurrency=4, beat=True)
        cstack.wait_for(
            lambda: done(flushed, posted_a) and done(kept, posted_b), WAIT, "every turn"
        )
        assert_once_in_order(flushed, a)
        assert_once_in_order(kept, b)
    finally:
        flushed.close()
        kept.close()


@pytest.fixture(scope="module")
def replicated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three masters with a replica each: a killed master fails over."""
    cluster = Cluster(tmp_path_factory.mktemp("replicated-cluster"), replicas=1).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def promoted(nodes: Cluster, slot: int, old: Node) -> bool:
    """Whether a running node other than ``old`` now serves ``slot``."""
    try:
        return nodes.master_of(slot).port != old.port
    except LookupError:
        return False


def test_a_master_that_fails_over_to_its_replica_loses_nothing(
    replicated: Cluster, pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    stack = Stack.cluster(tmp_path / "home", pg_url, replicated, broker_url=redis_url)
    try:
        far, near, victim = projects_apart(replicated)
        stack.workers(2, concurrency=4, beat=True)
        moved = chaz.Client(stack.settings, migrate=False, project=far)
        steady = chaz.Client(stack.settings, migrate=False, project=near)
        try:
            steady.agents.put(ECHO)
            a = [moved.sessions.create("echo") for _ in range(SESSIONS)]
            b = [steady.sessions.create("echo") for _ in range(SESSIONS)]
            admitted = post_all(moved, a, "admitted") + post_all(steady, b, "steady")
            victim.kill()
            # Its replica takes its slots; the node is never started again.
            stack.wait_for(
                lambda: promoted(replicated, project_slot(far), victim),
                WAIT,
                "the replica's promotion",
            )
            after = post_all(moved, a, "after", retry=True)
            everything = admitted + after
            stack.wait_for(
                lambda: (
                    done(moved, [p for p in everything if p.session_id in {s.id for s in a}])
                    and done(steady, [p for p in everything if p.session_id in {s.id for s in b}])
                ),
                WAIT,
                "every turn after the failover",
            )
            assert_once_in_order(moved, a)
            assert_once_in_order(steady, b)
        finally:
            moved.close()
            steady.close()
    finally:
        stack.close()
