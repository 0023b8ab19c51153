"""(s) of ``python -m benchmarks.capacity --shards``: chaz turns/s with its
coordination on a Redis Cluster of 1 and of 3 masters (the broker on the
plain Redis of ``BENCH_REDIS_URL``), and what each shard's Redis spends per
turn.

Each phase starts a cluster of its own (``tests/support/redis_cluster.py``,
the machine's redis-server 7), runs the same closed loop as (h) over the
same number of sessions with ``BASE_WORKERS`` workers, and reads, over the
counting window, each node's CPU (``/proc``, by its pid) and its commands
(``INFO commandstats``). Sessions are in 12 projects, so their buckets (and
so their coordination keys) spread over the shards as a fleet's would.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from redis.cluster import RedisCluster
from rich.table import Table

import chaz
from benchmarks.cpu import _cpu_seconds, _machine_busy
from benchmarks.measure import ClosedLoop, Throughput, join_all
from benchmarks.stacks import AGENT, BenchStack
from chaz.coord import keys
from chaz.domain.entries import agent_sender
from tests.support.redis_cluster import Cluster

#: Projects the benchmark's sessions are spread over (their buckets pick the shards).
PROJECTS = 12
#: Seconds each phase watches the cluster with its workers up and idle.
IDLE_SECONDS = 5.0


@dataclasses.dataclass
class ShardPhase:
    """One (s) phase: throughput and each shard's cost per turn."""

    masters: int
    workers: int
    result: Throughput
    #: node port -> (CPU ms per turn, commands per turn), less what the node
    #: spent idle with the workers up (cluster bus, lease watch, heartbeats)
    shards: dict[int, tuple[float, float]]
    #: node port -> (CPU ms per second, commands per second) idle
    idle: dict[int, tuple[float, float]]
    #: The machine's load average when the phase began and ended.
    load: tuple[str, str]

    @property
    def redis_ms(self) -> float:
        """All shards' CPU ms per turn."""
        return sum(ms for ms, _ in self.shards.values())


class ShardMeter:
    """CPU seconds of each cluster node and of the workers, commands per node,
    and the machine's busy time, between :meth:`start` and :meth:`stop`."""

    def __init__(self, nodes: Cluster, worker_pids: Callable[[], list[int]]) -> None:
        self._nodes = nodes
        self._worker_pids = worker_pids
        self._first: dict[str, float] = {}

    def _read(self) -> dict[str, float]:
        tick = os.sysconf("SC_CLK_TCK")
        out = {"machine": _machine_busy(tick), "workers": 0.0}
        for pid in self._worker_pids():
            out["workers"] += _cpu_seconds(pid, tick)
        for node in self._nodes.nodes:
            assert node.proc is not None
            out[f"cpu:{node.port}"] = _cpu_seconds(node.proc.pid, tick)
            with node.client() as c:
                stats = c.info("commandstats")
            out[f"calls:{node.port}"] = float(
                sum(int(v["calls"]) for v in stats.values() if isinstance(v, dict))
            )
        return out

    def start(self) -> None:
        """Take the first reading."""
        self._first = self._read()

    def stop(self) -> dict[str, float]:
        """Each reading's growth since :meth:`start`."""
        end = self._read()
        return {k: end[k] - self._first.get(k, 0.0) for k in end}


class ShardedReplies:
    """The benchmark agent's replies, from the sessions' sharded channels."""

    def __init__(self, client: RedisCluster, sessions: list[str]) -> None:
        self._pubsub = client.pubsub()
        self._pubsub.ssubscribe(*(keys.sharded(keys.entries_channel(s)) for s in sessions))
        self._me = agent_sender(AGENT.id)
        self.handler: Callable[[dict[str, Any]], None] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-shard-replies", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self._pubsub.get_sharded_message(  # type: ignore[no-untyped-call]
                ignore_subscribe_messages=True, timeout=0.05
            )
            if msg is None or msg.get("type") != "smessage":
                continue
            data = json.loads(msg["data"])
            if data["sender"] != self._me or data["type"] not in ("message", "error"):
                continue
            if self.handler is not None:
                self.handler(data)

    def close(self) -> None:
        """Stop listening."""
        self._stop.set()
        join_all([self._thread], "the reply listener", strict=False)
        self._pubsub.close()


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def measure_shards(
    masters: int,
    workers: int,
    *,
    sessions: int,
    senders: int,
    concurrency: int,
    warmup: float,
    seconds: float,
) -> ShardPhase:
    """One (s) phase on a fresh cluster of ``masters`` masters."""
    load_before = _load()
    nodes = Cluster(Path(tempfile.mkdtemp(prefix="chaz-bench-shards-")), masters=masters).start()
    stack = BenchStack("server", cluster_url=nodes.url)
    try:
        clients = [
            chaz.Client(stack.settings, migrate=False, project=f"bench-{i}")
            for i in range(PROJECTS)
        ]
        ids = [clients[i % PROJECTS].sessions.create(AGENT.id).id for i in range(sessions)]
        owner = {sid: clients[i % PROJECTS] for i, sid in enumerate(ids)}
        stack.start_chaz_workers(workers, concurrency)
        replies = ShardedReplies(nodes.client(), ids)
        try:

            def post(sid: str) -> None:
                owner[sid].sessions.post(sid, "hi")

            loop = ClosedLoop(ids, post, senders)
            errors = [0]

            def on_reply(data: dict[str, Any]) -> None:
                errors[0] += data["type"] == "error"
                loop.complete(data["session_id"])

            replies.handler = on_reply
            meter = ShardMeter(nodes, stack.worker_pids)
            meter.start()
            time.sleep(IDLE_SECONDS)
            quiet = meter.stop()
            result = loop.run(warmup, seconds, drain_timeout=120, meter=meter)  # type: ignore[arg-type]
            result.errors += errors[0]
        finally:
            replies.close()
            for c in clients:
                c.close()
    finally:
        stack.close()
        nodes.stop()
    count = max(1, result.count)
    idle = {
        n.port: (
            1000 * quiet.get(f"cpu:{n.port}", 0.0) / IDLE_SECONDS,
            quiet.get(f"calls:{n.port}", 0.0) / IDLE_SECONDS,
        )
        for n in nodes.nodes
    }
    shards = {
        n.port: (
            max(0.0, 1000 * result.cpu.get(f"cpu:{n.port}", 0.0) - idle[n.port][0] * seconds)
            / count,
            max(0.0, result.cpu.get(f"calls:{n.port}", 0.0) - idle[n.port][1] * seconds) / count,
        )
        for n in nodes.nodes
    }
    return ShardPhase(masters, workers, result, shards, idle, (load_before, _load()))


def table(phases: list[ShardPhase]) -> Table:
    """The (s) phases: turns/s, and each shard's Redis CPU and commands per turn."""
    t = Table(title="(s) coordination shards (a Redis Cluster; the broker apart)")
    for col in (
        "masters",
        "workers",
        "turns/s",
        "shard",
        "Redis CPU ms/turn",
        "commands/turn",
        "idle CPU ms/s",
        "idle commands/s",
    ):
        t.add_column(col, justify="right")
    t.add_column("load avg (1, 5, 15 min) before → after")
    for p in phases:
        for i, (port, (ms, calls)) in enumerate(sorted(p.shards.items())):
            idle_ms, idle_calls = p.idle[port]
            first = i == 0
            t.add_row(
                str(p.masters) if first else "",
                str(p.workers) if first else "",
                f"{p.result.rate:,.1f}" if first else "",
                f":{port}",
                f"{ms:.3f}",
                f"{calls:.1f}",
                f"{idle_ms:.1f}",
                f"{idle_calls:.0f}",
                f"{p.load[0]} → {p.load[1]}" if first else "",
            )
        total_calls = sum(c for _, c in p.shards.values())
        t.add_row("", "", "", "all", f"{p.redis_ms:.3f}", f"{total_calls:.1f}", "", "", "")
    return t


def run_all(
    masters: tuple[int, ...],
    workers: int,
    *,
    sessions: int,
    senders: int,
    concurrency: int,
    warmup: float,
    seconds: float,
    say: Callable[[str], None],
) -> list[ShardPhase]:
    """Every (s) phase in turn."""
    out = []
    for m in masters:
        say(f"(s) {m} coordination shard(s), {workers} workers, {seconds:g}s")
        started = time.perf_counter()
        phase = measure_shards(
            m,
            workers,
            sessions=sessions,
            senders=senders,
            concurrency=concurrency,
            warmup=warmup,
            seconds=seconds,
        )
        out.append(phase)
        say(
            f"(s) {phase.result.rate:,.1f} turns/s; Redis {phase.redis_ms:.3f} ms per turn "
            f"over {m} shard(s) ({time.perf_counter() - started:.0f}s)"
        )
    return out
