"""Cancel flags: ``chaz:cancel:{job}``, set while a running job's cancellation is requested.

``execution.cancel`` sets the flag once the job is ``stopping`` in the
database; the turn checks it at every step boundary, and the worker's
:class:`CancelWatcher` polls it for the turns the worker runs, so a turn
blocked inside a step learns of it within :data:`WATCH_SECONDS`. ``lua/turn_started.lua``
reads it and ``lua/turn_ended.lua`` deletes it when the turn ends the job.
See docs/coordination.md#cancel-flags.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

import redis

from chaz.coord import keys
from chaz.coord.redis import clustered, tag_for

log = logging.getLogger(__name__)

#: How often the watcher reads the flags of the turns its process runs: a
#: blocked turn stops within about this long of its cancel.
WATCH_SECONDS = 0.1

#: The reason a flag holds when none was given, or when the reconciler restored it.
DEFAULT_REASON = "cancelled"


class CancelFlags:
    """The cancel flags of running jobs (each on its project's slot on a
    cluster: the turn's scripts read and clear it)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def request(self, job_id: str, project: str, reason: str = "") -> None:
        """Ask the job's turn to stop at its next step boundary (the flag holds ``reason``)."""
        key = keys.cancel(job_id, tag_for(self.client, project))
        self.client.set(key, reason or DEFAULT_REASON)

    def requested(self, job_id: str, project: str) -> bool:
        """Whether cancellation of the job is requested."""
        return bool(self.client.exists(keys.cancel(job_id, tag_for(self.client, project))))

    def restore(self, job_id: str, project: str) -> None:
        """Set the flag of a ``stopping`` job if it is missing (lost with Redis).

        An existing flag keeps its reason. On a cluster, a shard that does not
        answer is left for the reconciler's next pass.
        """
        key = keys.cancel(job_id, tag_for(self.client, project))
        try:
            self.client.set(key, DEFAULT_REASON, nx=True)
        except redis.RedisError:
            if not clustered(self.client):
                raise
            log.warning("could not restore the cancel flag of %s: its shard is down", job_id)


class Settable(Protocol):
    """What the watcher sets when a job's flag appears (a turn's cancel token)."""

    def set(self) -> None:
        """Mark the cancel seen."""
        ...

    def poll(self) -> None:
        """Called every poll: stop the turn if it crossed a runtime or idle budget."""
        ...


class CancelWatcher:
    """Watches the cancel flags of the jobs this process runs, from one thread.

    One thread per process, not one per turn (as :class:`~chaz.coord.lanes.LeaseKeeper`):
    every :data:`WATCH_SECONDS` it reads all watched flags in one ``MGET``
    and sets the token of each job whose flag is there. Polling rather than
    a pub/sub channel: the flag is already the truth (the reconciler
    restores a lost one), a poll cannot miss a message published before it
    subscribed or while it reconnected, and one round trip per tenth of a
    second per worker, only while turns run, costs Redis nothing.
    """

    def __init__(self, client: redis.Redis, interval: float = WATCH_SECONDS) -> None:
        self.client = client
        self._interval = interval
        self._clustered = clustered(client)
        self._watched: dict[str, list[Settable]] = {}
        #: job id -> its flag's key (guarded by _lock).
        self._keys: dict[str, str] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None

    def watch(self, job_id: str, token: Settable, project: str = "") -> None:
        """Set ``token`` once ``job_id``'s flag appears, until :meth:`unwatch`."""
        with self._lock:
            self._watched.setdefault(job_id, []).append(token)
            self._keys[job_id] = keys.cancel(job_id, tag_for(self.client, project))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="chaz-cancel-watcher", daemon=True
                )
                self._thread.start()
            self._wake.notify()

    def unwatch(self, job_id: str, token: Settable) -> None:
        """Stop watching for ``token`` (its turn is over)."""
        with self._lock:
            tokens = self._watched.get(job_id, [])
            if token in tokens:
                tokens.remove(token)
            if not tokens:
                self._watched.pop(job_id, None)
                self._keys.pop(job_id, None)

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._watched:
                    # Idle: no turn runs, so no round trips until one starts.
                    self._wake.wait()
                job_ids = list(self._watched)
                names = [self._keys[j] for j in job_ids]
            try:
                # On a cluster, one MGET per shard (the flags sit on their projects' slots).
                flags = (
                    self.client.mget_nonatomic(names)  # type: ignore[attr-defined]
                    if self._clustered
                    else self.client.mget(names)
                )
            except Exception:
                # A Redis hiccup: the step boundary checks still see the flag.
                log.warning("reading cancel flags failed", exc_info=True)
                flags = [None] * len(job_ids)
            for job_id, flag in zip(job_ids, flags, strict=True):
                with self._lock:
                    tokens = list(self._watched.get(job_id, []))
                for token in tokens:
                    # The same poll finds a turn past its deadline: no timer per turn.
                    if flag is None:
                        token.poll()
                    else:
                        token.set()
            time.sleep(self._interval)
