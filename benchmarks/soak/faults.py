"""The fault kinds and the schedule that injects them.

* ``kill``: SIGKILL of a turn worker's process group, the one with the most
  turns in flight (one turn worker is always left running).
* ``pg``: ``pg_terminate_backend`` of every connection to the soak's database
  but the monitor's.
* ``redis-flush``: ``FLUSHALL`` on the soak's Redis: leases, counters, the
  Celery queues and unacked messages are gone.
* ``redis-restart``: ``kill -9`` of the soak's Redis, ``--redis-outage``
  seconds down, then a new, empty server on the same port.
* ``redeliver``: every unacked ``chaz.turn`` message pushed back onto its queue
  (what an expired visibility timeout does), plus duplicate wake-ups for
  sessions with work and stale ones for finished jobs.

With ``--cluster`` (coordination on a three-master Redis Cluster, the broker
on the soak's Redis, which the four kinds above then hit):

* ``shard-kill``: ``kill -9`` of one master, ``--redis-outage`` seconds down,
  then the same node started again (its append-only file and nodes.conf):
  only the projects on its slots pause.
* ``shard-flush``: ``FLUSHALL`` on one master: only its projects' counters,
  leases and flags are gone.
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import psycopg

from benchmarks.measure import join_all
from benchmarks.soak.stack import Database, RedisServer, Supervisor
from chaz.plumbing.dispatch import Dispatcher, Wake
from tests.support.redis_cluster import Cluster, Node

KINDS = ("kill", "pg", "redis-flush", "redis-restart", "redeliver")
#: The kinds that need ``--cluster``.
CLUSTER_KINDS = ("shard-kill", "shard-flush")


@dataclass
class Fault:
    """One injected fault (times are wall-clock seconds)."""

    kind: str
    start: float
    end: float
    detail: str
    #: for ``kill``: the worker's pid (recovery is measured on its turns only)
    victim_pid: int | None = None
    #: filled in by the check: seconds until the work it caught moved again
    recovery: float | None = None
    #: filled in by the check: the kind of a later fault that began before
    #: this one's work had recovered (its figure is then not its own alone)
    overlapped: str | None = None


@dataclass
class Plan:
    """The schedule: ``order`` of fault kinds, one every ``gap`` seconds after ``warmup``."""

    order: list[str]
    gap: float
    warmup: float


def plan(kinds: list[str], per_kind: int, seconds: float, outage: float, seed: int) -> Plan:
    """Each kind ``per_kind`` times, in shuffled rounds, spread over ``seconds``.

    Rounds keep the kinds interleaved, so every kind meets a system that is
    still recovering from some other fault as well as a calm one. The gap
    leaves room for the Redis outages, which block the schedule while they last.
    """
    rng = random.Random(seed)
    order: list[str] = []
    for _ in range(per_kind):
        round_ = list(kinds)
        rng.shuffle(round_)
        if order and round_[0] == order[-1] and len(round_) > 1:
            round_[0], round_[-1] = round_[-1], round_[0]
        order += round_
    warmup = min(10.0, seconds * 0.1)
    blocked = outage * (order.count("redis-restart") + order.count("shard-kill"))
    # The last fault comes one gap before the load stops: it is injected under load.
    gap = max(1.0, (seconds - warmup - blocked) / (len(order) + 1))
    return Plan(order, gap, warmup)


class Injector:
    """Injects one fault of a kind and says what it did."""

    def __init__(
        self,
        redis_server: RedisServer,
        database: Database,
        supervisor: Supervisor,
        dispatcher: Dispatcher,
        monitor: Monitor,
        *,
        outage: float,
        cluster: Cluster | None = None,
    ) -> None:
        self.cluster = cluster
        self.redis = redis_server
        self.database = database
        self.supervisor = supervisor
        self.dispatcher = dispatcher
        self.monitor = monitor
        self.outage = outage
        self.skipped: Counter[str] = Counter()

    def inject(self, kind: str) -> Fault | None:
        """Inject ``kind`` now; None if it could not be (counted in ``skipped``)."""
        method = getattr(self, "_" + kind.replace("-", "_"))
        fault: Fault | None = method()
        if fault is None:
            self.skipped[kind] += 1
        return fault

    def _kill(self) -> Fault | None:
        # Keep one turn worker up, and kill one that is in the middle of a turn.
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            alive = self.supervisor.alive("worker")
            if len(alive) >= 2:
                busy = self.monitor.turns_by_pid()
                ranked = sorted(alive, key=lambda w: busy.get(w.pid, 0), reverse=True)
                if busy.get(ranked[0].pid, 0) > 0 or time.monotonic() > deadline - 10:
                    victim = ranked[0]
                    t = time.time()
                    self.supervisor.kill(victim)
                    return Fault(
                        "kill",
                        t,
                        t,
                        f"{victim.name} pid {victim.pid}, "
                        f"{busy.get(victim.pid, 0)} turn(s) in flight",
                        victim_pid=victim.pid,
                    )
            time.sleep(0.2)
        return None

    def _pg(self) -> Fault | None:
        t = time.time()
        n = self.database.terminate_backends()
        return Fault("pg", t, t, f"{n} backends terminated")

    def _redis_flush(self) -> Fault | None:
        t = time.time()
        try:
            self.redis.flushall()
        except Exception:
            return None
        return Fault("redis-flush", t, t, "FLUSHALL")

    def _redis_restart(self) -> Fault | None:
        t = time.time()
        back = self.redis.restart(self.outage)
        return Fault("redis-restart", t, back, f"down {back - t:.1f}s")

    def _shard(self) -> Node | None:
        if self.cluster is None:
            return None
        masters = [n for n in self.cluster.nodes if n.proc is not None]
        return random.choice(masters) if masters else None

    def _shard_kill(self) -> Fault | None:
        node, t = self._shard(), time.time()
        if node is None or self.cluster is None:
            return None
        node.kill()
        time.sleep(self.outage)
        node.start()
        self.cluster.wait_ok()
        back = time.time()
        return Fault("shard-kill", t, back, f"master :{node.port} down {back - t:.1f}s")

    def _shard_flush(self) -> Fault | None:
        node, t = self._shard(), time.time()
        if node is None:
            return None
        with node.client() as c:
            c.flushall()
        return Fault("shard-flush", t, t, f"FLUSHALL on master :{node.port}")

    def _redeliver(self) -> Fault | None:
        t = time.time()
        restored = self._restore_unacked()
        woken = 0
        for sid, job_id in self.monitor.unfinished_heads()[:10]:
            for _ in range(2):
                self.dispatcher.send_wake(sid, job_id, Wake.RECONCILE)
                woken += 1
        stale = self.monitor.finished_jobs(5)
        for sid, job_id in stale:
            self.dispatcher.send_wake(sid, job_id, Wake.RECONCILE)
        return Fault(
            "redeliver",
            t,
            time.time(),
            f"{restored} unacked restored, {woken} duplicate and {len(stale)} stale wake-ups",
        )

    def _restore_unacked(self) -> int:
        """Push every unacked ``chaz.turns`` message back, as an expired visibility timeout does.

        kombu keeps a message it delivered in the ``unacked`` hash until the
        task is acknowledged (``acks_late``: after the turn). Restoring it while
        the turn still runs is exactly Celery's redelivery of a long task.
        """
        client = self.redis.client()
        n = 0
        try:
            for raw in client.hvals("unacked"):
                payload, _exchange, routing_key = json.loads(raw)
                if routing_key != "chaz.turns":
                    continue
                with contextlib.suppress(KeyError, TypeError):
                    payload["headers"]["redelivered"] = True
                    payload["properties"]["delivery_info"]["redelivered"] = True
                client.rpush(routing_key, json.dumps(payload))
                n += 1
        finally:
            client.close()
        return n


class Monitor:
    """The soak's own view of the database, refreshed twice a second.

    It feeds the producers (how many turns each session has unfinished) and
    the ``kill`` fault (which worker has turns in flight). Its connection is
    the one the PostgreSQL fault spares.
    """

    def __init__(self, database: Database, sessions: list[str]) -> None:
        self.database = database
        self.sessions = sessions
        #: session id -> unfinished jobs (shared with the producers)
        self.unfinished: dict[str, int] = {}
        self.on_refresh: list[Any] = []
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-monitor", daemon=True)

    def start(self) -> None:
        """Start refreshing."""
        self._thread.start()

    def stop(self) -> None:
        """Stop refreshing and close the connection."""
        self._stop.set()
        join_all([self._thread], "the monitor", strict=False)
        with self._lock:
            if self._conn is not None:
                self._conn.close()

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run ``sql`` on the monitor connection, reconnecting once if it broke."""
        with self._lock:
            for attempt in range(2):
                try:
                    if self._conn is None or self._conn.closed:
                        self._conn = self.database.monitor()
                    return self._conn.execute(sql, params).fetchall()
                except psycopg.OperationalError:
                    if self._conn is not None:
                        self._conn.close()
                    self._conn = None
                    if attempt:
                        raise
        return []

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                rows = self.query(
                    "SELECT session_id, count(*) FROM jobs "
                    "WHERE status IN ('queued', 'running', 'stopping') GROUP BY session_id"
                )
            except psycopg.Error:
                continue
            counts = {sid: int(n) for sid, n in rows}
            for sid in self.sessions:
                self.unfinished[sid] = counts.get(sid, 0)
            for callback in self.on_refresh:
                callback()

    def turns_by_pid(self) -> Counter[int]:
        """Running turns per worker pid, by the pid in each running job's latest Ack."""
        rows = self.query(
            "SELECT DISTINCT ON (e.job_id) e.metadata->>'pid' FROM jobs j "
            "JOIN entries e ON e.job_id = j.id AND e.type = 'ack' "
            "WHERE j.status = 'running' ORDER BY e.job_id, e.seq DESC"
        )
        return Counter(int(pid) for (pid,) in rows if pid is not None)

    def unfinished_heads(self) -> list[tuple[str, str]]:
        """(session, job) of each session's oldest unfinished job, busiest sessions first."""
        rows = self.query(
            "SELECT DISTINCT ON (session_id) session_id, id FROM jobs "
            "WHERE status IN ('queued', 'running', 'stopping') ORDER BY session_id, ordinal"
        )
        heads = [(str(s), str(j)) for s, j in rows]
        random.shuffle(heads)
        return heads

    def finished_jobs(self, n: int) -> list[tuple[str, str]]:
        """(session, job) of ``n`` finished jobs: their wake-ups are stale."""
        rows = self.query(
            "SELECT session_id, id FROM jobs WHERE status = 'succeeded' ORDER BY random() LIMIT %s",
            (n,),
        )
        return [(str(s), str(j)) for s, j in rows]
