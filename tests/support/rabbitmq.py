"""RabbitMQ for tests: a virtual host of a stack's own on the machine's server.

A vhost is RabbitMQ's namespace: queues, exchanges and their messages in one
are invisible from another. Each RabbitMQ-broker stack gets a fresh one
(``chaz_test_<pid>_<n>``), so a test's leftover messages (a killed worker's
requeued wake-up) never reach the next test, and two test runs on the
machine never share a queue. They are made and deleted with ``rabbitmqctl``
(AMQP itself cannot create a vhost), which runs as root here and in CI.
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess

from tests.support.servers import unavailable

#: The machine's RabbitMQ (docs/testing.md): .ci/run starts it when absent.
HOST = os.environ.get("CHAZ_TEST_RABBITMQ_HOST", "127.0.0.1")
PORT = int(os.environ.get("CHAZ_TEST_RABBITMQ_PORT", "5672"))
USER = "guest"
PASSWORD = "guest"
#: rabbitmqctl starts an Erlang VM each call: a second or two on a busy machine.
CTL_TIMEOUT = 60.0

_numbers = itertools.count()


def _ctl(*args: str) -> None:
    subprocess.run(
        ["rabbitmqctl", "--timeout", str(int(CTL_TIMEOUT)), *args],
        check=True,
        capture_output=True,
        timeout=CTL_TIMEOUT + 10,
    )


def ensure_reachable() -> None:
    """Skip (fail in CI) unless RabbitMQ accepts a TCP connection."""
    try:
        socket.create_connection((HOST, PORT), timeout=3).close()
    except OSError as exc:
        unavailable("RabbitMQ", exc)


def new_vhost() -> tuple[str, str]:
    """A fresh vhost the guest user may use: ``(name, broker URL)``."""
    ensure_reachable()
    name = f"chaz_test_{os.getpid()}_{next(_numbers)}"
    # A previous run with the same pid may have been killed before its cleanup.
    subprocess.run(["rabbitmqctl", "delete_vhost", name], capture_output=True, check=False)
    _ctl("add_vhost", name)
    _ctl("set_permissions", "-p", name, USER, ".*", ".*", ".*")
    return name, f"amqp://{USER}:{PASSWORD}@{HOST}:{PORT}/{name}"


def delete_vhost(name: str) -> None:
    """Drop the vhost and everything in it (its queues and their messages)."""
    _ctl("delete_vhost", name)
