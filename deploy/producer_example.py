"""An example producer: open a session, send a message, wait for the reply.

A producer is any process that writes to sessions through ``chaz.Client``.
Given ``CHAZ_URL`` and ``CHAZ_API_KEY`` it is a key holder: it talks to
``chaz serve`` over HTTP, acts as the key's principal in the key's project,
and holds no database or Redis credentials (docs/security.md). Without them
it is an operator on the machine's own settings (the embedded default, or
``CHAZ_DATABASE_URL`` and ``CHAZ_REDIS_URL``) and saves the agent itself.

In the compose stack (profile ``example``), after an operator has saved the
agent and minted a key (deploy/README.md)::

    CHAZ_API_KEY=chz_... docker compose run --rm producer
    CHAZ_API_KEY=chz_... docker compose run --rm producer python deploy/producer_example.py "hi"

Standalone, against the embedded default (a worker must be running, e.g. ``chaz worker``)::

    python deploy/producer_example.py

The agent is ``echo``, scripted (no model server needed): its one rule echoes
the incoming message back. Running the script again reuses the session named
``demo``.
"""

from __future__ import annotations

import sys

import chaz
from chaz.errors import AgentNotFound, ChazError, NameTaken

SESSION_NAME = "demo"
ECHO = chaz.AgentSpec(id="echo", model="scripted", script=[{"steps": [{"echo": True}]}])


def main() -> int:
    text = " ".join(sys.argv[1:]) or "hello"
    client = chaz.Client()  # reads CHAZ_* settings from the environment

    if client.principal.operator:
        # Save (or overwrite) the agent's configuration: an operator's act.
        client.agents.put(ECHO)
    else:
        # A key holder uses the agents an operator saved.
        try:
            client.agents.get(ECHO.id)
        except AgentNotFound:
            print(f"no agent {ECHO.id!r}: an operator saves it first (deploy/README.md)")
            return 1

    # Session names are unique labels; ids are the addresses. On a second run
    # the name is taken, so look the existing session up by name instead.
    # (Omit ``name`` to get a fresh, unnamed session every time.)
    try:
        session = client.sessions.create(agent_id="echo", name=SESSION_NAME)
    except NameTaken:
        session = client.sessions.get(SESSION_NAME)

    # Writing a message admits a turn; ``entry.seq`` is its place in the timeline.
    entry = client.sessions.post(session.id, text)

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
