"""A worker's heartbeat, and the checks ``chaz probe worker`` makes of it.

A worker has two signs of life, for two different questions:

* **Ready** (may it be counted on for turns?): the Redis key
  ``chaz:worker:{node}`` holds the worker's pid. The worker sets it when
  Celery says it consumes, re-sets it on every beat with a short expiry, and
  deletes it when its shutdown begins. A worker whose Redis is gone is not
  ready, and becomes ready again on its first beat after Redis is back.
* **Live** (is the process still working, or wedged?): the worker's beat file
  in ``$CHAZ_HOME/workers/`` was rewritten recently. The beat runs on the
  Celery consumer's own timer, in its event loop, so a file that stops
  changing means that loop stopped turning. The file is local, so this
  check never depends on Redis: an outage of Redis makes workers unready,
  not dead, and nobody restarts a fleet because its broker blinked.

A worker in warm shutdown (SIGTERM: it takes no more work and finishes its
turns) writes ``stopping`` into its file: it is not ready, but live until it
exits, however long its turns take; the platform's grace period bounds that.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from chaz.coord import keys
from chaz.plumbing.files import private_dir

#: Seconds between two beats of a worker.
BEAT_SECONDS = 10.0
#: Seconds the ready key outlives a worker's last beat: three beats.
READY_TTL_SECONDS = 30
#: A beat file older than this many seconds means a wedged worker (six beats).
LIVE_MAX_AGE_SECONDS = 60.0

READY = "ready"
STOPPING = "stopping"


def beats_dir(home: Path) -> Path:
    """Where this ``CHAZ_HOME``'s workers keep their beat files."""
    return home.resolve() / "workers"


def _beat_file(home: Path, node: str) -> Path:
    # A node name is NAME@HOST: both are safe in a file name except a slash.
    return beats_dir(home) / f"{node.replace('/', '_')}.json"


class Heartbeat:
    """The beat of one worker process: its ready key and its beat file."""

    def __init__(self, client: redis.Redis, home: Path, node: str, pid: int) -> None:
        self.client = client
        self.node = node
        self.pid = pid
        self.path = _beat_file(home, node)
        self.stopping = False

    def beat(self) -> None:
        """Rewrite the beat file, then (unless stopping) re-set the ready key.

        The file first: it answers "is this process working", which must not
        wait on Redis. A Redis error is the caller's to log.
        """
        self._write(STOPPING if self.stopping else READY)
        if not self.stopping:
            self.client.set(keys.worker_ready(self.node), self.pid, ex=READY_TTL_SECONDS)

    def stop(self) -> None:
        """Warm shutdown began: no longer ready (key deleted), still live."""
        self.stopping = True
        self._write(STOPPING)
        self.client.delete(keys.worker_ready(self.node))

    def remove(self) -> None:
        """The process is exiting: its beat file goes with it."""
        self.path.unlink(missing_ok=True)

    def _write(self, state: str) -> None:
        private_dir(self.path.parent)
        tmp = self.path.with_name(f".{self.path.name}.{self.pid}")
        tmp.write_text(json.dumps({"node": self.node, "pid": self.pid, "state": state}))
        # rename is atomic: a probe reads the old beat or the new one, never half.
        os.replace(tmp, self.path)


@dataclass(frozen=True)
class Beat:
    """What a worker's beat file says."""

    node: str
    pid: int
    state: str
    #: Seconds since the file was last written.
    age: float


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: it exists
    return True


def local_beats(home: Path, node: str | None = None) -> list[Beat]:
    """The beat files of this home whose process still runs (only ``node``'s if given).

    A file left by a process that died (SIGKILL, OOM) is ignored: a
    container restarted in the same pod may find its predecessor's.
    """
    found = []
    now = time.time()
    for path in sorted(beats_dir(home).glob("*.json")):
        try:
            data = json.loads(path.read_text())
            beat = Beat(str(data["node"]), int(data["pid"]), str(data["state"]),
                        now - path.stat().st_mtime)  # fmt: skip
        except (OSError, ValueError, KeyError, TypeError):
            continue  # vanished or foreign: not a worker of ours
        if _pid_alive(beat.pid) and (node is None or beat.node == node):
            found.append(beat)
    return found


def live_problem(beat: Beat, max_age: float = LIVE_MAX_AGE_SECONDS) -> str | None:
    """Why ``beat``'s worker is not live, or None if it is."""
    if beat.state == STOPPING:
        return None  # finishing its turns; the grace period bounds it, not us
    if beat.age > max_age:
        return f"worker {beat.node} last beat {beat.age:.0f}s ago (more than {max_age:g}s)"
    return None


def ready_problem(beat: Beat, client: redis.Redis) -> str | None:
    """Why ``beat``'s worker is not ready for turns, or None if it is."""
    if beat.state == STOPPING:
        return f"worker {beat.node} is shutting down"
    try:
        value = client.get(keys.worker_ready(beat.node))
    except redis.RedisError as exc:
        return f"cannot read worker {beat.node}'s ready key from Redis: {exc}"
    if value is None:
        return f"worker {beat.node} is not announced in Redis (no beat for {READY_TTL_SECONDS}s)"
    text = value.decode() if isinstance(value, bytes) else str(value)
    if text != str(beat.pid):
        return f"worker {beat.node}'s ready key names pid {text}, not {beat.pid}"
    return None
