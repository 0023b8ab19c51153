"""An example producer: save an agent, open a session, send a message, wait for the reply.

A producer is any process that writes to sessions through ``chaz.Client``. It
needs the same settings as the workers (``CHAZ_DATABASE_URL`` and
``CHAZ_REDIS_URL``) and nothing else: the write goes to the database, a
notification goes to Redis, and some worker runs the agent's turn.

In the compose stack (profile ``example``)::

    docker compose run --rm producer
    docker compose run --rm producer python deploy/producer_example.py "hi there"

Standalone, against the embedded default (a worker must be running, e.g. ``chaz worker``)::

    python deploy/producer_example.py

The agent is ``scripted`` (no model server needed): its one rule echoes the
incoming message back. Running the script again saves the agent again and
reuses the session named ``demo``.
"""

from __future__ import annotations

import sys

import chaz
from chaz.errors import ChazError, NameTaken

SESSION_NAME = "demo"


def main() -> int:
    text = " ".join(sys.argv[1:]) or "hello"
    client = chaz.Client()  # reads CHAZ_* settings from the environment

    # Save (or overwrite) the agent's configuration.
    client.agents.put(
        chaz.AgentSpec(id="echo", model="scripted", script=[{"steps": [{"echo": True}]}])
    )

    # Session names are unique labels; ids are the addresses. On a second run
    # the name is taken, so look the existing session up by name instead.
    # (Omit ``name`` to get a fresh, unnamed session every time.)
    try:
        session = client.sessions.create(agent_id="echo", name=SESSION_NAME)
    except NameTaken:
        session = client.sessions.get(SESSION_NAME)

    # Writing a message admits a turn; ``entry.seq`` is its place in the timeline.
    entry = client.sessions.post(session.id, text, sender="user:alice")

    # Block until the agent writes a reply after our message. chaz errors carry
    # a stable code, e.g. [timeout] if no worker answered within 30 seconds.
    try:
        reply = client.sessions.wait_for_reply(session.id, after=entry.seq, timeout=30)
    except ChazError as exc:
        print(f"no reply: {exc}", file=sys.stderr)
        return 1
    print(f"session {session.id} ({SESSION_NAME}): {reply.content}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
