"""Flower shows an operator what runs: chaz.turn with session and execution ids."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import chaz
from chaz.stack import settings_env
from tests.conftest import free_port
from tests.support.stack import Stack


def test_flower_finds_the_turn(stack: Stack) -> None:
    port = free_port()
    env = {**os.environ, **settings_env(stack.settings)}
    flower = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "workers",
            "flower",
            f"--port={port}",
            "--address=127.0.0.1",
            "--basic-auth=ops:secret",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    auth = "Basic " + base64.b64encode(b"ops:secret").decode()

    def get(path: str) -> object:
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}{path}", headers={"Authorization": auth}
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.loads(resp.read())

    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                get("/api/workers?refresh=false")
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, "flower did not start"
                time.sleep(0.2)
        # Flower learns of tasks from events: give it a moment to subscribe.
        time.sleep(1.0)
        stack.workers(1)
        client = stack.client
        client.agents.put(chaz.AgentSpec(id="echo", script=[{"steps": [{"echo": True}]}]))
        s = client.sessions.create(agent_id="echo")
        e = client.sessions.post(s.id, "watched", sender="user:ops")
        client.sessions.wait_for_reply(s.id, after=e.seq, timeout=30)

        deadline = time.monotonic() + 30
        found = None
        while found is None:
            tasks = get("/api/tasks?taskname=chaz.turn")
            assert isinstance(tasks, dict)
            found = next(
                (t for t in tasks.values() if str(e.job_id) in str(t.get("kwargs", ""))), None
            )
            if found is None:
                assert time.monotonic() < deadline, f"turn not in flower: {tasks}"
                time.sleep(0.3)
        assert found["name"] == "chaz.turn"
        assert s.id in found["kwargs"]
        deadline = time.monotonic() + 15
        while found.get("state") != "SUCCESS" and time.monotonic() < deadline:
            time.sleep(0.3)
            found = get(f"/api/task/info/{found['uuid']}")
            assert isinstance(found, dict)
        assert found["state"] == "SUCCESS"
        # The result names the jobs the task ran (a kept lane may run several).
        assert str(e.job_id) in str(found.get("result")), found
    finally:
        flower.terminate()
        flower.wait(10)
