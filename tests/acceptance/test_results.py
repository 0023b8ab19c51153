"""Acceptance (docs/contracts.md#acceptance, C9): one result cap, and the full text as an artifact.

A parent starts a child in the background whose answer is 200,000
characters, then reads it with ``job_output`` inside its own turn: capped to
head and tail with the artifact's record, and whole with ``full=true``. A
session of another tree gets ``job.not_found``; the producer API and the CLI
return the full text to the operator.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import chaz
from chaz.domain.entries import Entry, EntryType
from chaz.domain.results import RESULT_CAP
from tests.support.stack import Stack

pytest_plugins = ["tests.support.producers"]

_LINES = "".join(f"{i:09d}\n" for i in range(20_000))
#: 200,000 characters (one of them two bytes in UTF-8) with a known head and tail.
BIG = "HEAD-é" + _LINES[6:-5] + "-TAIL"

WRITER = chaz.AgentSpec(id="writer", script=[{"steps": [{"say": BIG}]}])
BOSS = chaz.AgentSpec(
    id="boss",
    tools=["spawn_agent", "job_output"],
    script=[
        {
            "match": "^start$",
            "steps": [
                {
                    "call": "spawn_agent",
                    "args": {"agent_id": "writer", "task": "write", "async": True},
                },
                {"say": "{last_result}"},
            ],
        },
        {
            # An execution id: read its output, capped, then whole.
            "match": "^[0-9a-f]{16}$",
            "steps": [
                {"call": "job_output", "args": {"job_id": "{input}", "timeout": 60}},
                {"call": "job_output", "args": {"job_id": "{input}", "full": True}},
                {"say": "read"},
            ],
        },
    ],
)
#: Another tree's agent, trying the same id.
SNOOP = chaz.AgentSpec(
    id="snoop",
    tools=["job_output"],
    script=[
        {
            "steps": [
                {"call": "job_output", "args": {"job_id": "{input}", "full": True}},
                {"say": "tried"},
            ]
        }
    ],
)


def tool_results(client: chaz.Client, session_id: str) -> list[Entry]:
    return [e for e in client.sessions.entries(session_id) if e.type is EntryType.TOOL_RESULT]


def ask(stack: Stack, client: chaz.Client, session_id: str, text: str) -> Entry:
    """Post ``text`` and wait for the turn's reply."""
    posted = client.sessions.post(session_id, text, sender="user:alice")
    reply = client.sessions.wait_for_reply(session_id, after=posted.seq, timeout=90)
    assert reply.type is EntryType.MESSAGE, f"{reply.content}\n{stack.logs()}"
    return reply


def test_a_200k_child_result_is_capped_in_job_output_and_whole_for_authorized_readers(
    stack: Stack, producer: chaz.Client, producer_env: dict[str, str]
) -> None:
    assert len(BIG) == 200_000
    stack.workers(1, concurrency=2)
    client = producer
    for spec in (WRITER, BOSS, SNOOP):
        stack.client.agents.put(spec)
    boss = client.sessions.create(agent_id="boss")

    started = json.loads(ask(stack, client, boss.id, "start").content)
    execution_id = started["execution_id"]
    assert client.jobs.wait(execution_id, timeout=60).result == BIG
    ask(stack, client, boss.id, execution_id)

    data = BIG.encode("utf-8")
    # The first turn's result was the spawn's; the second turn's, the two reads.
    _, capped, whole = (json.loads(e.content) for e in tool_results(client, boss.id))
    assert capped["status"] == "succeeded" and capped["truncated"] is True
    assert len(capped["result"]) <= RESULT_CAP
    assert capped["result"].startswith(BIG[:10_000]) and capped["result"].endswith(BIG[-5_000:])
    assert capped["artifact"]["byte_length"] == len(data) == len(BIG) + 1
    assert capped["artifact"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert capped["artifact"]["media_type"].startswith("text/plain")
    assert (whole["result"], whole["truncated"]) == (BIG, False)

    # An unrelated tree cannot tell the job exists, full or not.
    snoop = client.sessions.create(agent_id="snoop")
    ask(stack, client, snoop.id, execution_id)
    (denied,) = tool_results(client, snoop.id)
    assert denied.metadata["is_error"] is True
    assert json.loads(denied.content)["error"]["code"] == "job.not_found"

    # The operator's twins: the producer API and the CLI.
    assert client.jobs.output(execution_id)["result"] == capped["result"]
    assert client.jobs.output(execution_id, full=True)["result"] == BIG
    cli = subprocess.run(
        [sys.executable, "-m", "chaz.cli", "jobs", "output", execution_id, "--full"],
        env=producer_env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        cwd=stack.settings.home.parent,
    )
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout == BIG
