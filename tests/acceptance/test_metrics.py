"""Metrics (issue 13 item 1, docs/operations.md): the exporter reports a backlog
it is shown, and a real worker's endpoint shows its turns.

The exporter runs in this process, on the stack's Redis and database, and is
read over HTTP like Prometheus would. Nothing here waits on wall time: the
backlog is posted while no worker runs, so its depth is exact, and the
worker's figures are waited for as an outcome (its turns have ended).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.error
from collections.abc import Iterator

import pytest

import chaz
from chaz.errors import QueueFull
from chaz.services import Services
from chaz.stack import settings_env
from chaz.usecases import exporter
from tests.conftest import free_port
from tests.support.metrics import Sample, scrape
from tests.support.stack import Stack

ECHO = chaz.AgentSpec(
    id="echo", script=[{"steps": [{"echo": True, "usage": {"input": 7, "output": 3}}]}]
)
#: How long a worker may take to run a few turns on a loaded machine.
WAIT = 60


@pytest.fixture(scope="module")
def fleet(module_stack: Stack) -> Iterator[tuple[Stack, int]]:
    """The module's stack, and the port of an exporter serving it."""
    services = Services(module_stack.settings)
    port = free_port()
    server = exporter.serve(services, port, "127.0.0.1")
    try:
        yield module_stack, port
    finally:
        server.shutdown()
        server.server_close()
        services.close()


def test_the_exporter_reports_a_backlog_and_refusals(fleet: tuple[Stack, int]) -> None:
    # Runs first in the module: no worker has started yet, so nothing drains the backlog.
    stack, port = fleet
    client = stack.client
    client.agents.put(ECHO)
    for i in range(4):
        s = client.sessions.create("echo")
        client.sessions.post(s.id, f"hello {i}", sender="user:alice")
    # One more waiting job, in a session that refuses a second one.
    full = client.sessions.create("echo", limits={"max_queued_per_session": 1})
    client.sessions.post(full.id, "first", sender="user:alice")
    with pytest.raises(QueueFull):
        client.sessions.post(full.id, "second", sender="user:alice")

    got = scrape(port)
    assert got[("chaz_queue_depth", (("queue", "chaz.turns"),))] == 5
    assert got[("chaz_queue_depth", (("queue", "chaz.control"),))] == 0
    assert got[("chaz_jobs", (("state", "queued"),))] == 5
    assert got[("chaz_jobs", (("state", "running"),))] == 0
    assert got[("chaz_sessions_waiting", ())] == 5
    assert got[("chaz_deliveries", (("state", "accepted"),))] == 0
    assert got[("chaz_webhooks", (("state", "dead"),))] == 0
    assert got[("chaz_admission_refusals_total", (("code", "quota.queue_full"),))] == 1
    assert got[("chaz_exporter_source_up", (("source", "redis"),))] == 1
    assert got[("chaz_exporter_source_up", (("source", "database"),))] == 1


@pytest.mark.fleet
def test_a_workers_endpoint_shows_its_turns(fleet: tuple[Stack, int]) -> None:
    stack, exporter_port = fleet
    port = free_port()
    stack.workers(1, concurrency=2, metrics_ports=[port])
    client = stack.client
    client.agents.put(ECHO)
    posted = []
    for i in range(3):
        s = client.sessions.create("echo")
        posted.append(client.sessions.post(s.id, f"ping {i}", sender="user:alice"))
    for p in posted:
        assert client.jobs.wait(p.job_id or "", timeout=WAIT).status is chaz.JobStatus.SUCCEEDED

    def moved() -> dict[Sample, float] | None:
        # A turn counts its end just after its reply commits: wait for the count.
        got = scrape(port)
        ended = got.get(("chaz_turns_ended_total", (("outcome", "succeeded"),)), 0)
        return got if ended >= len(posted) else None

    got = stack.wait_for(moved, WAIT, "the worker's turn counters")
    assert got is not None
    assert got[("chaz_turns_started_total", ())] >= len(posted)
    succeeded = (("outcome", "succeeded"),)
    assert got[("chaz_turn_duration_seconds_count", succeeded)] >= len(posted)
    assert got[("chaz_turn_duration_seconds_sum", succeeded)] > 0
    assert got[("chaz_dispatch_latency_seconds_count", ())] >= len(posted)
    assert got[("chaz_dispatch_latency_seconds_bucket", (("le", "+Inf"),))] >= len(posted)
    # Tokens by project and kind, as the steps reported them (the scripted
    # model has no price here: its cost counter never moves).
    project = client.jobs.get(posted[0].job_id or "").project
    tokens = "chaz_tokens_total"
    assert got[(tokens, (("kind", "input"), ("project", project)))] >= 7 * len(posted)
    assert got[(tokens, (("kind", "output"), ("project", project)))] >= 3 * len(posted)

    # The worker drains the first test's backlog too; then nothing waits.
    def drained() -> bool:
        now = scrape(exporter_port)
        return now[("chaz_sessions_waiting", ())] == 0 and all(
            now[("chaz_jobs", (("state", state),))] == 0 for state in ("queued", "running")
        )

    stack.wait_for(drained, WAIT, "the exporter to find nothing waiting")


def test_chaz_exporter_serves_until_sigterm(fleet: tuple[Stack, int]) -> None:
    stack, _ = fleet
    port = free_port()
    env = {**os.environ, **settings_env(stack.settings)}
    cmd = [sys.executable, "-m", "chaz.cli", "exporter", "--port", str(port), "--addr", "127.0.0.1"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:

        def answers() -> dict[Sample, float] | None:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                return scrape(port)
            except (urllib.error.URLError, ConnectionError):
                return None  # not listening yet

        got = stack.wait_for(answers, WAIT, "chaz exporter to answer")
        assert got is not None
        assert ("chaz_queue_depth", (("queue", "chaz.turns"),)) in got
        assert got[("chaz_exporter_source_up", (("source", "database"),))] == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_workers_endpoint_binds_the_address_it_is_given(fleet: tuple[Stack, int]) -> None:
    stack, _ = fleet
    port = free_port()
    only_here = stack.settings.model_copy(update={"metrics_addr": "127.0.0.1"})
    stack.workers(1, concurrency=1, metrics_ports=[port], settings=only_here)
    assert ("chaz_turns_started_total", ()) in scrape(port)
    # 127.0.0.2 is this host's loopback too: an endpoint on every interface
    # (the default) answers there, one bound to 127.0.0.1 does not.
    with pytest.raises(urllib.error.URLError):
        scrape(port, host="127.0.0.2")


def test_a_bad_metrics_address_is_refused_before_the_worker_starts() -> None:
    from chaz.cli.main import run

    args = ["worker", "--metrics-port", "9809", "--metrics-addr", "not-an-ip", "--dry-run"]
    assert run(args) == 2  # EXIT_USAGE, before anything starts
