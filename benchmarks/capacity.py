"""``python -m benchmarks.capacity``: what a turn costs, and how turns/s scale with workers.

On the server stack (PostgreSQL and Redis) only, in one run:

* (a) bare Celery's round trips/s with 2 worker processes, and its CPU per
  round trip: the whole machine's, and that of its own processes (this
  process, the baseline's workers, this stack's Redis server);
* (h) chaz turns/s across 100 sessions with 1, 2, 3 and 4 worker processes
  (the issue calls this figure "(f)"; that letter was taken by the long
  session of ``benchmarks.run``), each with its per-turn cost: PostgreSQL
  transactions (``pg_stat_database`` of the benchmark's database), PostgreSQL
  CPU (the backends connected to that database, from ``/proc``), Redis
  commands (``INFO commandstats``) and worker CPU;
* (r) one worker's resident memory after 10,000 turns;
* (d) dispatch latency on both stacks, chaz's commit -> Ack against bare
  Celery's send -> task start, their samples interleaved in the same run
  (:mod:`benchmarks.dispatch`; the embedded stack's on a stack of its own).

Other people's load on a shared machine stays out of every per-turn figure:
PostgreSQL's CPU is read from the backends of this run's database only, and
Redis's from this stack's server process (point ``BENCH_REDIS_URL`` at a
Redis server of your own when others benchmark on the same machine). The
goals are printed, not asserted; the exit status is 1 only when a phase
broke or turns failed. Sizing from these figures: docs/capacity.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import redis
from rich.console import Console
from rich.table import Table

from benchmarks import dispatch, noop_app, shards
from benchmarks.cpu import CpuMeter, _cpu_seconds, _machine_busy, available
from benchmarks.measure import (
    ClosedLoop,
    DoneListener,
    ReplyListener,
    Throughput,
    join_all,
    producer_app,
)
from benchmarks.run import code_version, machine
from benchmarks.stacks import AGENT, PG_ADMIN, PG_DATABASE, BenchStack, scrub_environment

#: The issue's goals (item 5), read as ratios within one run.
GOAL_PG_CPU_RATIO = 0.5  # PostgreSQL CPU per turn / bare Celery's CPU per round trip
GOAL_XACTS = 3.0  # database transactions per turn, its admission included
GOAL_RSS_MB = 150.0  # a worker's resident memory after 10,000 turns

#: The phase whose per-turn costs are set against the baseline: as many
#: worker processes as the baseline has (and as ``benchmarks.run`` uses).
BASE_WORKERS = 2

console = Console(width=int(os.environ.get("COLUMNS", "132")))


@dataclasses.dataclass
class Sizes:
    """How much each phase does."""

    sessions: int = 100
    senders: int = 4
    concurrency: int = 8
    warmup: float = 2.0
    baseline_seconds: float = 10.0
    phase_seconds: float = 12.0
    #: Seconds the workers are watched idle before each (h) phase.
    idle_seconds: float = 5.0
    workers: tuple[int, ...] = (1, 2, 3, 4)
    #: (r): turns one worker runs before its memory is read, read every ``rss_every``.
    rss_turns: int = 10_000
    rss_every: int = 2_500
    #: (d): messages each way per stack (0: no dispatch phase).
    dispatch_samples: int = 500


FULL = Sizes()
QUICK = Sizes(
    warmup=1.0,
    baseline_seconds=3.0,
    phase_seconds=3.0,
    idle_seconds=2.0,
    workers=(1, 2),
    rss_turns=1_000,
    rss_every=500,
    dispatch_samples=30,
)


# -- the meter ------------------------------------------------------------------------


class CostMeter(CpuMeter):
    """CPU seconds of this run's own processes, and its database and Redis counters.

    Groups: ``benchmark`` (this process), ``workers`` (the phase's worker
    processes), ``redis`` (this stack's Redis server, by the pid it reports),
    ``database`` (the PostgreSQL backends connected to the benchmark's
    database), ``own`` (their sum) and ``machine`` (all CPUs' busy time,
    whoever used it). Counters: ``xacts`` (commits and rollbacks in the
    benchmark's database) and ``redis_calls`` (commands the Redis server ran).
    """

    def __init__(self, worker_pids: Callable[[], list[int]], redis_client: redis.Redis) -> None:
        super().__init__(worker_pids, database=True)
        self._redis = redis_client
        self._redis_pid = int(redis_client.info("server")["process_id"])
        self._admin = psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5)
        self._first: dict[str, Any] = {}

    def follow(self, worker_pids: Callable[[], list[int]]) -> None:
        """Measure these workers from the next :meth:`start` on."""
        self._worker_pids = worker_pids

    def close(self) -> None:
        """Close the meter's database connection."""
        self._admin.close()

    def start(self) -> None:
        self._first = self._snapshot()

    def stop(self) -> dict[str, float]:
        if not self._first:
            return {}
        end = self._snapshot()
        out: dict[str, float] = {"benchmark": 0.0, "workers": 0.0, "redis": 0.0, "database": 0.0}
        first_cpu, end_cpu = self._first["cpu"], end["cpu"]
        for key, value in end_cpu.items():
            group, _pid = key
            # A backend that connected during the window counts from zero.
            base = first_cpu.get(key, 0.0 if group == "database" else None)
            if base is not None:
                out[group] += max(0.0, value - base)
        out["own"] = sum(out[g] for g in ("benchmark", "workers", "redis", "database"))
        out["machine"] = end["machine"] - self._first["machine"]
        out["xacts"] = float(end["xacts"] - self._first["xacts"])
        first_calls = self._first["redis_calls"]
        for name, n in end["redis_calls"].items():
            if n - first_calls.get(name, 0):
                out[f"redis:{name}"] = float(n - first_calls.get(name, 0))
        out["redis_calls"] = sum(v for k, v in out.items() if k.startswith("redis:"))
        return out

    def _snapshot(self) -> dict[str, Any]:
        tick = os.sysconf("SC_CLK_TCK")
        rows = self._admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (PG_DATABASE,)
        ).fetchall()
        self._admin.execute("SELECT pg_stat_clear_snapshot()")
        xacts = self._admin.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
            (PG_DATABASE,),
        ).fetchone()
        calls = {
            name.removeprefix("cmdstat_"): int(v["calls"])
            for name, v in self._redis.info("commandstats").items()
            if isinstance(v, dict)
        }
        cpu = {("benchmark", os.getpid()): _cpu_seconds(os.getpid(), tick)}
        for pid in self._worker_pids():
            cpu[("workers", pid)] = _cpu_seconds(pid, tick)
        cpu[("redis", self._redis_pid)] = _cpu_seconds(self._redis_pid, tick)
        for (pid,) in rows:
            cpu[("database", int(pid))] = _cpu_seconds(int(pid), tick)
        return {
            "cpu": cpu,
            "machine": _machine_busy(tick),
            "xacts": int(xacts[0]) if xacts else 0,
            "redis_calls": calls,
        }


def rss_mb(pid: int) -> float:
    """A process's resident memory, in MB (nan if it cannot be read)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


# -- the phases -----------------------------------------------------------------------


@dataclasses.dataclass
class Phase:
    """One closed-loop phase: completions and what they cost."""

    label: str
    workers: int
    result: Throughput
    #: Transactions per second with the workers up and idle (their
    #: reconciler, beat and lease watch), measured just before the load.
    idle_xacts: float = 0.0

    def per(self, key: str) -> float:
        """``key``'s amount per completion (CPU in ms, counters as they are)."""
        r = self.result
        if key not in r.cpu or not r.count:
            return float("nan")
        scale = 1.0 if key in ("xacts", "redis_calls") or key.startswith("redis:") else 1000.0
        return scale * r.cpu[key] / r.count

    @property
    def turn_xacts(self) -> float:
        """Transactions per turn less the idle fleet's own (periodic, not per turn)."""
        r = self.result
        if "xacts" not in r.cpu or not r.count:
            return float("nan")
        return (r.cpu["xacts"] - self.idle_xacts * r.seconds) / r.count


def measure_baseline(stack: BenchStack, sizes: Sizes, meter: CostMeter) -> Phase:
    """(a) bare Celery round trips in a closed loop, ``BASE_WORKERS`` workers."""
    stack.start_noop_workers(BASE_WORKERS, sizes.concurrency)
    app = producer_app(stack)
    stack.redis.delete(noop_app.DONE)
    listener = DoneListener(redis.Redis.from_url(stack.settings.effective_redis_url()))
    try:

        def send(key: str) -> None:
            app.send_task(noop_app.TASK, args=[key], queue=noop_app.QUEUE)

        loop = ClosedLoop([f"slot{i}" for i in range(sizes.sessions)], send, sizes.senders)
        listener.handler = lambda key, started: loop.complete(key)
        meter.follow(stack.noop_worker_pids)
        result = loop.run(sizes.warmup, sizes.baseline_seconds, meter=meter)
    finally:
        listener.close()
        app.close()
        stack.stop_noop_workers()
    return Phase("(a) bare Celery", BASE_WORKERS, result)


def measure_workers(
    stack: BenchStack, sizes: Sizes, meter: CostMeter, listener: ReplyListener, n: int
) -> Phase:
    """(h) chaz turns/s across ``sessions`` sessions with ``n`` worker processes."""
    client = stack.client
    # Before the workers start: their start-up gives the database's
    # statistics time to count these transactions before the window opens.
    sessions = [client.sessions.create(AGENT.id).id for _ in range(sizes.sessions)]
    stack.start_chaz_workers(n, sizes.concurrency)
    try:
        mine = set(sessions)
        errors = [0]

        def post(sid: str) -> None:
            client.sessions.post(sid, "hi")

        loop = ClosedLoop(sessions, post, sizes.senders)

        def on_reply(data: dict[str, Any]) -> None:
            if data["session_id"] in mine:
                errors[0] += data["type"] == "error"
                loop.complete(data["session_id"])

        listener.handler = on_reply
        meter.follow(stack.worker_pids)
        time.sleep(1.0)  # the sessions' transactions reach the statistics first
        meter.start()
        time.sleep(sizes.idle_seconds)
        idle = meter.stop().get("xacts", 0.0) / sizes.idle_seconds
        result = loop.run(sizes.warmup, sizes.phase_seconds, drain_timeout=120, meter=meter)
        listener.handler = None
        result.errors += errors[0]
    finally:
        stack.stop_chaz_workers()
    return Phase(f"(h) {n} worker(s)", n, result, idle)


@dataclasses.dataclass
class Memory:
    """(r): one worker's resident memory as its turns add up."""

    turns: int
    #: (turns so far, RSS in MB), the first after start-up and a warm-up.
    samples: list[tuple[int, float]]
    errors: int

    @property
    def last(self) -> float:
        return self.samples[-1][1] if self.samples else float("nan")


def measure_memory(stack: BenchStack, sizes: Sizes, listener: ReplyListener) -> Memory:
    """(r) ``rss_turns`` turns on one worker, its RSS read every ``rss_every`` turns."""
    client = stack.client
    sessions = [client.sessions.create(AGENT.id).id for _ in range(sizes.sessions)]
    stack.start_chaz_workers(1, sizes.concurrency)
    try:
        pid = stack.worker_pids()[0]
        mine = set(sessions)
        ready: queue.Queue[str] = queue.Queue()
        lock = threading.Lock()
        state = {"posted": 0, "done": 0, "errors": 0}
        samples: list[tuple[int, float]] = []
        finished = threading.Event()

        def on_reply(data: dict[str, Any]) -> None:
            if data["session_id"] not in mine:
                return
            with lock:
                state["done"] += 1
                state["errors"] += data["type"] == "error"
                done = state["done"]
            if done % sizes.rss_every == 0:
                samples.append((done, rss_mb(pid)))
            if done >= sizes.rss_turns:
                finished.set()
            ready.put(data["session_id"])

        def send() -> None:
            while not finished.is_set():
                try:
                    sid = ready.get(timeout=0.1)
                except queue.Empty:
                    continue
                with lock:
                    if state["posted"] >= sizes.rss_turns:
                        continue
                    state["posted"] += 1
                client.sessions.post(sid, "hi")

        samples.append((0, rss_mb(pid)))
        listener.handler = on_reply
        for sid in sessions:
            ready.put(sid)
        threads = [
            threading.Thread(target=send, name=f"bench-r-send-{i}", daemon=True)
            for i in range(sizes.senders)
        ]
        for t in threads:
            t.start()
        if not finished.wait(timeout=max(120.0, sizes.rss_turns / 10)):
            raise RuntimeError(f"only {state['done']} of {sizes.rss_turns} turns finished")
        join_all(threads, "sender threads of (r)")
        listener.handler = None
    finally:
        stack.stop_chaz_workers()
    return Memory(sizes.rss_turns, samples, state["errors"])


# -- the run --------------------------------------------------------------------------


@dataclasses.dataclass
class CapacityRun:
    versions: dict[str, str]
    baseline: Phase
    phases: list[Phase]
    memory: Memory | None
    seconds: float
    #: (d) per stack: benchmarks.dispatch.summary of its run.
    dispatch: list[dict[str, Any]] = dataclasses.field(default_factory=list)


def run(sizes: Sizes, *, memory: bool = True) -> CapacityRun:
    """Every phase on a fresh server stack."""
    started = time.perf_counter()

    def say(msg: str) -> None:
        console.print(f"[dim]{time.perf_counter() - started:6.1f}s[/] {msg}")

    stack = BenchStack("server")
    meter: CostMeter | None = None
    dispatched: list[dict[str, Any]] = []
    try:
        versions = stack.versions()
        say(f"stack up ({versions['database']}, Redis {versions['redis']})")
        meter = CostMeter(stack.worker_pids, stack.redis)
        say(f"(a) bare Celery, {BASE_WORKERS} workers, {sizes.baseline_seconds:g}s")
        baseline = measure_baseline(stack, sizes, meter)
        say(f"(a) {baseline.result.rate:,.0f} round trips/s")
        if sizes.dispatch_samples:
            dispatched.append(_dispatch(stack, sizes, say))
        listener = ReplyListener(redis.Redis.from_url(stack.settings.effective_redis_url()))
        phases: list[Phase] = []
        mem: Memory | None = None
        try:
            for n in sizes.workers:
                say(f"(h) {n} worker(s) x {sizes.concurrency} threads, {sizes.phase_seconds:g}s")
                phase = measure_workers(stack, sizes, meter, listener, n)
                phases.append(phase)
                say(
                    f"(h) {phase.result.rate:,.1f} turns/s; per turn "
                    f"{phase.turn_xacts:.2f} transactions ({phase.per('xacts'):.2f} with "
                    f"the idle fleet's {phase.idle_xacts:.1f}/s), "
                    f"{phase.per('database'):.2f} ms PostgreSQL CPU"
                )
            if memory:
                say(f"(r) {sizes.rss_turns:,} turns on one worker")
                mem = measure_memory(stack, sizes, listener)
                say(f"(r) RSS {mem.last:.0f} MB after {mem.turns:,} turns")
        finally:
            listener.close()
    finally:
        if meter is not None:
            meter.close()
        stack.close()
    if sizes.dispatch_samples:
        embedded = BenchStack("embedded")
        try:
            dispatched.insert(0, _dispatch(embedded, sizes, say))
        finally:
            embedded.close()
    return CapacityRun(versions, baseline, phases, mem, time.perf_counter() - started, dispatched)


def _dispatch(stack: BenchStack, sizes: Sizes, say: Callable[[str], None]) -> dict[str, Any]:
    """(d) on ``stack``: ``BASE_WORKERS`` workers of each kind, samples interleaved."""
    say(
        f"(d) dispatch on the {stack.kind} stack: {sizes.dispatch_samples} messages each "
        "way, bare Celery's and chaz's interleaved"
    )
    run = dispatch.measure(
        stack, sizes.dispatch_samples, workers=BASE_WORKERS, concurrency=sizes.concurrency
    )
    console.print(dispatch.table(run))
    say(dispatch.goal_line(run))
    return dispatch.summary(run)


def _f(value: float, digits: int = 2) -> str:
    return "-" if value != value else f"{value:,.{digits}f}"


def _ratio(value: float, base: float) -> str:
    if not base or base != base or value != value:
        return "-"
    return f"{value / base:.2f}"


def table(r: CapacityRun, sizes: Sizes) -> Table:
    """Per phase: rate and per-completion costs."""
    t = Table(
        title=(
            f"capacity, server stack ({sizes.concurrency} threads per worker process, "
            f"{sizes.sessions} keys in flight; CPU in ms per turn or round trip)"
        ),
        title_justify="left",
    )
    for name in (
        "phase",
        "per s",
        "per worker",
        "PG xacts (raw)",
        "PG CPU",
        "Redis cmds",
        "Redis CPU",
        "worker CPU",
        "bench CPU",
        "own CPU",
        "machine CPU",
        "PG CPU / (a) own",
    ):
        t.add_column(name, justify="left" if name == "phase" else "right")
    base_own = r.baseline.per("own")
    for p in [r.baseline, *r.phases]:
        is_base = p is r.baseline
        t.add_row(
            p.label,
            _f(p.result.rate, 1),
            _f(p.result.rate / p.workers, 1),
            "-" if is_base else f"{_f(p.turn_xacts)} ({_f(p.per('xacts'))})",
            "-" if is_base else _f(p.per("database")),
            _f(p.per("redis_calls"), 1),
            _f(p.per("redis")),
            _f(p.per("workers")),
            _f(p.per("benchmark")),
            _f(p.per("own")),
            _f(p.per("machine")),
            "-" if is_base else _ratio(p.per("database"), base_own),
        )
    return t


def reference(r: CapacityRun) -> Phase | None:
    """The phase set against the goals: the one with the baseline's worker
    count, else the one with the most workers."""
    same = [p for p in r.phases if p.workers == BASE_WORKERS]
    picked = same or sorted(r.phases, key=lambda p: p.workers)[-1:]
    return picked[0] if picked else None


def goals(r: CapacityRun) -> list[str]:
    """Each goal of the issue, met or not (read, never asserted)."""
    lines: list[str] = []
    p = reference(r)
    if p is not None:
        own, whole = r.baseline.per("own"), r.baseline.per("machine")
        pg = p.per("database")
        lines.append(
            f"{p.label}: PostgreSQL CPU per turn = {pg:.2f} ms = {pg / own:.2f} x bare "
            f"Celery's CPU per round trip ({own:.2f} ms, its own processes; "
            f"{pg / whole:.2f} x the whole machine's {whole:.2f} ms) "
            f"(goal <= {GOAL_PG_CPU_RATIO}): "
            f"{'met' if pg / own <= GOAL_PG_CPU_RATIO else 'NOT met'}"
        )
        top = sorted(
            ((k.removeprefix("redis:"), p.per(k)) for k in p.result.cpu if k.startswith("redis:")),
            key=lambda kv: -kv[1],
        )
        lines.append(
            f"Redis commands per turn ({p.label}): "
            + ", ".join(f"{name} {n:.1f}" for name, n in top[:10])
        )
        x = p.turn_xacts
        lines.append(
            f"{p.label}: database transactions per turn, admission included = {x:.2f} "
            f"({p.per('xacts'):.2f} with the idle fleet's {p.idle_xacts:.1f}/s of periodic "
            f"work) (goal <= {GOAL_XACTS:g}): {'met' if x <= GOAL_XACTS + 0.05 else 'NOT met'}"
        )
    lines += [d["goal"] for d in r.dispatch]
    if r.memory is not None:
        mb = r.memory.last
        lines.append(
            f"worker RSS after {r.memory.turns:,} turns = {mb:.0f} MB "
            f"(goal < {GOAL_RSS_MB:g} MB after 10,000): "
            f"{'met' if mb < GOAL_RSS_MB else 'NOT met'}; "
            + ", ".join(f"{n:,}: {mb:.0f}" for n, mb in r.memory.samples)
        )
    lines += [f"PROBLEM {x}" for x in problems(r)]
    return lines


def problems(r: CapacityRun) -> list[str]:
    """What fails the run (unlike a missed goal)."""
    found = []
    failed = sum(p.result.errors for p in r.phases)
    failed += r.memory.errors if r.memory is not None else 0
    if failed:
        found.append(f"{failed} turns or posts failed")
    if any(p.result.count == 0 for p in [r.baseline, *r.phases]):
        found.append("a throughput phase completed nothing")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.capacity",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--no-memory", action="store_true", help="skip (r), the memory phase")
    parser.add_argument(
        "--no-dispatch", action="store_true", help="skip (d), the dispatch latency phases"
    )
    parser.add_argument(
        "--workers",
        type=lambda s: tuple(int(x) for x in s.split(",")),
        help="worker counts of (h), comma-separated (default 1,2,3,4; --quick 1,2)",
    )
    parser.add_argument(
        "--shards",
        type=lambda s: tuple(int(x) for x in s.split(",")),
        help="also run (s): coordination on a Redis Cluster of these many masters each "
        "(e.g. 1,3), the broker on BENCH_REDIS_URL",
    )
    parser.add_argument("--only-shards", action="store_true", help="run (s) alone (with --shards)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if not available():
        console.print("[red]the capacity benchmark reads /proc: Linux only[/]")
        return 1
    scrub_environment()
    sizes = QUICK if args.quick else FULL
    if args.workers:
        sizes = dataclasses.replace(sizes, workers=args.workers)
    if args.no_dispatch:
        sizes = dataclasses.replace(sizes, dispatch_samples=0)
    info = machine()
    console.print(
        f"[bold]chaz capacity[/] {info['date']}: {info['cpus']} CPUs ({info['cpu']}), "
        f"Python {info['python']}, Celery {info['celery']}; load average {info['load_before']}"
    )
    console.print(f"chaz measured: {code_version()}")
    sharded: list[shards.ShardPhase] = []
    if args.shards:
        started = time.perf_counter()
        try:
            sharded = shards.run_all(
                args.shards,
                BASE_WORKERS,
                sessions=sizes.sessions,
                senders=sizes.senders,
                concurrency=sizes.concurrency,
                warmup=sizes.warmup,
                seconds=sizes.phase_seconds,
                say=lambda m: console.print(f"[dim]{time.perf_counter() - started:6.1f}s[/] {m}"),
            )
        except Exception:
            console.print(f"[red]the shards phase failed[/]\n{traceback.format_exc()}")
            return 1
        console.print(shards.table(sharded))
        if args.only_shards:
            if args.json:
                payload = {"machine": info, "shards": [dataclasses.asdict(p) for p in sharded]}
                args.json.write_text(json.dumps(payload, indent=2, default=str))
            return 1 if any(p.result.errors or not p.result.count for p in sharded) else 0
    try:
        result = run(sizes, memory=not args.no_memory)
    except Exception:
        console.print(f"[red]the capacity benchmark failed[/]\n{traceback.format_exc()}")
        return 1
    console.print()
    console.print(table(result, sizes))
    for line in goals(result):
        console.print(line)
    info["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    console.print(f"[dim]total {result.seconds:.0f}s; load average now {info['load_after']}[/]")
    if args.json:
        payload = {
            "machine": info,
            "sizes": dataclasses.asdict(sizes),
            "run": dataclasses.asdict(result),
            "shards": [dataclasses.asdict(p) for p in sharded],
        }
        args.json.write_text(json.dumps(payload, indent=2, default=str))
    return 1 if problems(result) else 0


if __name__ == "__main__":
    sys.exit(main())
