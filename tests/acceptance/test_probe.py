"""``chaz probe worker``: the Kubernetes probes of a real worker (deploy/k8s).

Ready means announced in Redis by a running worker; live means its
consumer's event loop still beats. Each case waits on an outcome the test
caused (a worker started, stopped, frozen, thawed), never on a pace.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import pytest

from chaz.coord import keys
from chaz.plumbing.heartbeat import BEAT_SECONDS, beats_dir
from chaz.stack import settings_env
from tests.support.stack import Stack

#: A bound on a worker's next beat (every BEAT_SECONDS): a loaded machine is slow.
NEXT_BEAT = BEAT_SECONDS * 4


def probe(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``chaz probe worker ARGS`` as a probe would, in the stack's environment."""
    env = {**os.environ, **settings_env(stack.settings)}
    return subprocess.run(
        [sys.executable, "-m", "chaz.cli", "probe", "worker", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def probe_json(stack: Stack, *args: str) -> tuple[int, dict[str, Any]]:
    done = probe(stack, "--json", *args)
    return done.returncode, json.loads(done.stdout)


def test_no_worker_is_neither_ready_nor_live(stack: Stack) -> None:
    for args in ((), ("--live",)):
        done = probe(stack, *args)
        assert done.returncode == 1, done
        assert "no worker runs here" in done.stderr


def test_a_running_worker_is_ready_and_live_and_a_killed_one_is_not(stack: Stack) -> None:
    [worker] = stack.workers(1, concurrency=1)
    node = f"{worker.name}@{socket.gethostname()}"
    code, ready = probe_json(stack)
    assert code == 0, ready
    assert ready["check"] == "ready" and ready["problems"] == []
    assert ready["workers"] == [{"node": node, "pid": worker.pid, "state": "ready"}]
    assert probe(stack, "--live").returncode == 0
    assert probe(stack, "--node", node).returncode == 0
    other = probe(stack, "--node", "someone-else@nowhere")
    assert other.returncode == 1 and "no worker someone-else@nowhere" in other.stderr

    # The ready key gone (expired, or Redis flushed): unready, still live, and
    # ready again after the worker's next beat re-sets it. The worker is
    # stopped meanwhile, so that beat cannot come before the probes look.
    worker.kill(signal.SIGSTOP)
    try:
        stack.client.services.redis.delete(keys.worker_ready(node))
        code, report = probe_json(stack)
        assert code == 1 and "not announced in Redis" in report["problems"][0]
        assert probe(stack, "--live").returncode == 0
    finally:
        worker.kill(signal.SIGCONT)
    stack.wait_for(lambda: probe(stack).returncode == 0, NEXT_BEAT, "the ready key re-set")

    # SIGKILL leaves the beat file behind; a dead pid's file does not count.
    worker.kill(signal.SIGKILL)
    assert worker.proc is not None
    worker.proc.wait(30)
    assert list(beats_dir(stack.settings.home).glob("*.json")), "the file should be left"
    for args in ((), ("--live",)):
        done = probe(stack, *args)
        assert done.returncode == 1 and "no worker runs here" in done.stderr, done


@pytest.mark.slow
def test_a_frozen_worker_is_not_live_until_it_beats_again(stack: Stack) -> None:
    [worker] = stack.workers(1, concurrency=1)
    [beat_file] = beats_dir(stack.settings.home).glob("*.json")
    # SIGSTOP: the process exists but its event loop does not turn, as in a
    # wedged worker. Its last beat is made old (instead of waiting a minute).
    worker.kill(signal.SIGSTOP)
    try:
        old = time.time() - 600
        os.utime(beat_file, (old, old))
        code, report = probe_json(stack, "--live")
        assert code == 1 and "last beat" in report["problems"][0], report
    finally:
        worker.kill(signal.SIGCONT)
    stack.wait_for(
        lambda: probe(stack, "--live").returncode == 0, NEXT_BEAT, "a beat after SIGCONT"
    )
    assert probe(stack).returncode == 0
