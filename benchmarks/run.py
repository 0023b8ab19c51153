"""``python -m benchmarks.run``: chaz against bare Celery, on one or both stacks.

Prints one table: (a) bare Celery round trips/s and dispatch latency (the
baseline), (b) chaz turns/s across 100 sessions, (c) one session's sequential
turns/s, (d) chaz dispatch latency (commit -> Ack), (e) admissions/s, each
chaz figure also as a ratio to (a) measured in the same run, and (f) one
session's turns/s after 100,000 entries and a compaction, as a ratio to a
fresh session's, and (g) a producer's CPU per ``post`` + ``wait_for_reply``
under 100 producer threads beside the workers' CPU per turn. See README.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import redis
from rich.console import Console
from rich.table import Table

from benchmarks.cpu import GROUPS
from benchmarks.measure import (
    FULL,
    QUICK,
    BaselineResult,
    ChazResult,
    ProducerResult,
    ReplyListener,
    Sizes,
    Throughput,
    measure_admissions,
    measure_baseline,
    measure_dispatch,
    measure_fifo,
    measure_long_session,
    measure_producer,
    measure_turns,
)
from benchmarks.stacks import BenchStack, scrub_environment

#: The issue's goals.
GOAL_TURN_RATIO = 0.5
GOAL_P99_MS = 10.0
#: Issue 12: turns/s in a compacted long session against a fresh one.
GOAL_LONG_RATIO = 0.9
#: Issue 13: a producer's CPU per post + wait_for_reply, as a ratio to the
#: workers' CPU per turn in the same run, at most half of what it was before
#: the shared subscription (docs/performance.md#producer-cost): the ratio
#: measured then, per stack.
PRODUCER_RATIO_BEFORE = {"embedded": 0.91, "server": 0.97}
GOAL_PRODUCER_FACTOR = 0.5

console = Console(width=int(os.environ.get("COLUMNS", "132")))


@dataclasses.dataclass
class StackRun:
    kind: str
    versions: dict[str, str]
    baseline: BaselineResult
    chaz: ChazResult
    seconds: float


def _py_spy(
    stack: BenchStack, out: Path, kind: str, seconds: float
) -> list[subprocess.Popen[bytes]]:
    """Sample every chaz worker with py-spy (if installed) for ``seconds``."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(exe).exists():
        console.print("[yellow]py-spy is not installed (pip install py-spy); not profiling[/]")
        return []
    out.mkdir(parents=True, exist_ok=True)
    return [
        subprocess.Popen(
            [
                exe,
                "record",
                "--pid",
                str(pid),
                "--duration",
                str(int(seconds) + 1),
                "--rate",
                "100",
                "--format",
                "speedscope",
                "--nonblocking",
                "--output",
                str(out / f"{kind}-worker{i}.speedscope.json"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i, pid in enumerate(stack.worker_pids())
    ]


def run_stack(
    kind: str, sizes: Sizes, workers: int, concurrency: int, profile: Path | None = None
) -> StackRun:
    """Every measurement on one stack, in an order that keeps each one clean."""
    started = time.perf_counter()

    def say(msg: str) -> None:
        console.print(f"[dim]{kind:>8} {time.perf_counter() - started:6.1f}s[/] {msg}")

    stack = BenchStack(kind)
    try:
        versions = stack.versions()
        say(f"stack up ({versions['database']}, Redis {versions['redis']})")

        stack.start_noop_workers(workers, concurrency)
        say("(a) bare Celery: latency, then round trips")
        baseline = measure_baseline(stack, sizes)
        stack.stop_noop_workers()
        say(f"(a) {baseline.round_trips.rate:,.0f} round trips/s")

        stack.start_chaz_workers(workers, concurrency)
        listener = ReplyListener(redis.Redis.from_url(stack.settings.effective_redis_url()))
        try:
            say("(d) dispatch latency, one message at a time")
            dispatch = measure_dispatch(stack, listener, sizes)
            say(f"(d) p50 {dispatch.latency.p50:.1f} ms, p99 {dispatch.latency.p99:.1f} ms")
            say(f"(c) one session, {sizes.fifo_messages} messages")
            fifo = measure_fifo(stack, listener, sizes)
            say(f"(c) {fifo.hop_rate:,.1f} turns/s")
            say(f"(b) {sizes.sessions} sessions for {sizes.turns_seconds:g}s")
            spies = (
                _py_spy(stack, profile, kind, sizes.warmup + sizes.turns_seconds) if profile else []
            )
            turns = measure_turns(stack, listener, sizes)
            for spy in spies:
                spy.wait()
            say(f"(b) {turns.rate:,.1f} turns/s")
            say(
                f"(f) a session of {sizes.long_entries:,} entries, compacted, "
                f"against a fresh one ({sizes.long_rounds} x {sizes.long_messages} turns each)"
            )
            long = measure_long_session(stack, listener, sizes)
            say(
                f"(f) {long.long_rate:,.1f} vs {long.fresh_rate:,.1f} turns/s: "
                f"ratio {long.ratio:.2f} (import {long.import_seconds:.1f}s, "
                f"compaction {long.compact_seconds * 1000:.0f} ms)"
            )
        finally:
            listener.close()
        producer = _measure_producer(stack, sizes, say)
        stack.stop_chaz_workers()

        say("(e) admissions with no worker consuming")
        admissions = measure_admissions(stack, sizes)
        say(f"(e) {admissions.rate:,.0f} admissions/s")
        chaz_result = ChazResult(turns, fifo, dispatch, admissions, long=long, producer=producer)
    finally:
        stack.close()
    return StackRun(kind, versions, baseline, chaz_result, time.perf_counter() - started)


def _measure_producer(stack: BenchStack, sizes: Sizes, say: Any) -> ProducerResult:
    say(f"(g) {sizes.producer_threads} producer threads: post + wait_for_reply")
    producer = measure_producer(stack, sizes)
    say(
        f"(g) {producer.rate:,.1f} replies/s; producer {producer.producer_ms:.2f} ms CPU "
        f"per post+wait, workers {producer.worker_ms:.2f} ms per turn"
    )
    return producer


def run_producer_only(kind: str, sizes: Sizes, workers: int, concurrency: int) -> ProducerResult:
    """Only (g), for comparing a change's producer cost quickly (``--producer``)."""
    started = time.perf_counter()

    def say(msg: str) -> None:
        console.print(f"[dim]{kind:>8} {time.perf_counter() - started:6.1f}s[/] {msg}")

    stack = BenchStack(kind)
    try:
        stack.start_chaz_workers(workers, concurrency)
        producer = _measure_producer(stack, sizes, say)
        stack.stop_chaz_workers()
    finally:
        stack.close()
    return producer


def producer_goal(kind: str, g: ProducerResult) -> str:
    """(g) against its goal: the producer/worker CPU ratio at most half of before."""
    ratio = g.producer_ms / g.worker_ms if g.worker_ms == g.worker_ms else float("nan")
    before = PRODUCER_RATIO_BEFORE.get(kind, float("nan"))
    goal = GOAL_PRODUCER_FACTOR * before
    return (
        f"{kind}: producer CPU per post+wait = {g.producer_ms:.2f} ms = {ratio:.2f} x the "
        f"workers' CPU per turn (goal <= {goal:.2f}, half of {before:.2f} before): "
        f"{'met' if ratio <= goal else 'NOT met'}"
        + (f"; PROBLEM {g.crossed} replies crossed waiters" if g.crossed else "")
        + (f"; {g.errors} posts or waits failed" if g.errors else "")
    )


# -- reporting ----------------------------------------------------------------------


def code_version() -> str:
    """Which chaz is measured: its directory, and its commit when it is a git checkout."""
    import chaz

    where = Path(chaz.__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            [
                "git",
                "-C",
                str(where),
                "status",
                "--porcelain",
                "--",
                "chaz",
                "workers",
                "celeryconfig.py",
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return f"{where} (not a git checkout)"
    return f"{where} at {commit}{' with uncommitted changes' if dirty else ''}"


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    except OSError:
        pass
    versions = {}
    for dist in ("celery", "kombu", "redis", "SQLAlchemy", "psycopg"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "-"
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_before": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "code": code_version(),
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "memory": mem,
        "python": platform.python_version(),
        "platform": platform.platform(),
        **versions,
    }


def _ratio(value: float, base: float) -> str:
    if not base or base != base or value != value:
        return "-"
    return f"{value / base:.2f}"


_SPLIT = "    of which bench/workers/Redis/DB"


def _cpu_ms(t: Throughput, group: str) -> str:
    value = t.cpu_ms_per(group)
    return "-" if value != value else f"{value:.2f}"


def _cpu_split(t: Throughput) -> str:
    """Each process group's CPU per completion."""
    return "/".join(_cpu_ms(t, g) for g in GROUPS) if t.cpu else "-"


def table(runs: list[StackRun], sizes: Sizes, workers: int, concurrency: int) -> Table:
    t = Table(
        title=(
            f"chaz vs bare Celery ({workers} worker process(es) x {concurrency} threads, "
            f"{sizes.sessions} keys in flight)"
        ),
        title_justify="left",
    )
    t.add_column("figure")
    for r in runs:
        t.add_column(r.kind, justify="right")
        t.add_column("x (a)", justify="right")

    def row(label: str, cells: list[tuple[str, str]]) -> None:
        flat: list[str] = [label]
        for value, ratio in cells:
            flat += [value, ratio]
        t.add_row(*flat)

    row(
        "(a) bare Celery round trips/s",
        [(f"{r.baseline.round_trips.rate:,.0f}", "1.00") for r in runs],
    )
    row(
        "(a) bare Celery dispatch p50 / p99 ms (send -> task start)",
        [(f"{r.baseline.latency.p50:.2f} / {r.baseline.latency.p99:.2f}", "") for r in runs],
    )
    row(
        "(b) chaz turns/s, 100 sessions",
        [
            (f"{r.chaz.turns.rate:,.1f}", _ratio(r.chaz.turns.rate, r.baseline.round_trips.rate))
            for r in runs
        ],
    )
    row(
        "(c) one session's sequential turns/s",
        [
            (
                f"{r.chaz.fifo.hop_rate:,.1f}",
                _ratio(r.chaz.fifo.hop_rate, r.baseline.round_trips.rate),
            )
            for r in runs
        ],
    )
    row(
        "(d) chaz dispatch p50 ms (commit -> Ack)",
        [
            (
                f"{r.chaz.dispatch.latency.p50:.2f}",
                _ratio(r.chaz.dispatch.latency.p50, r.baseline.latency.p50),
            )
            for r in runs
        ],
    )
    row(
        "(d) chaz dispatch p99 ms (commit -> Ack)",
        [
            (
                f"{r.chaz.dispatch.latency.p99:.2f}",
                _ratio(r.chaz.dispatch.latency.p99, r.baseline.latency.p99),
            )
            for r in runs
        ],
    )
    row(
        "    post -> reply seen, p50 / p99 ms",
        [(f"{r.chaz.dispatch.rtt.p50:.1f} / {r.chaz.dispatch.rtt.p99:.1f}", "") for r in runs],
    )
    row(
        "(a) CPU ms per round trip, whole machine",
        [(_cpu_ms(r.baseline.round_trips, "machine"), "") for r in runs],
    )
    row(_SPLIT, [(_cpu_split(r.baseline.round_trips), "") for r in runs])
    row(
        "(b) CPU ms per turn, whole machine",
        [
            (
                _cpu_ms(r.chaz.turns, "machine"),
                _ratio(
                    r.chaz.turns.cpu_ms_per("machine"),
                    r.baseline.round_trips.cpu_ms_per("machine"),
                ),
            )
            for r in runs
        ],
    )
    row(_SPLIT, [(_cpu_split(r.chaz.turns), "") for r in runs])
    longs = [r.chaz.long for r in runs]
    row(
        "(f) one session's turns/s: compacted after N entries / fresh",
        [
            (
                f"{lg.long_rate:,.1f} / {lg.fresh_rate:,.1f} (N={lg.prior_entries:,})"
                if lg
                else "-",
                f"{lg.ratio:.2f}" if lg else "-",
            )
            for lg in longs
        ],
    )
    gs = [r.chaz.producer for r in runs]
    row(
        "(g) producer CPU ms per post+wait (100 threads) / workers' per turn",
        [
            (
                f"{g.producer_ms:.2f} / {g.worker_ms:.2f} ({g.rate:,.0f}/s)" if g else "-",
                _ratio(g.producer_ms, g.worker_ms) if g else "-",
            )
            for g in gs
        ],
    )
    adm = [r.chaz.admissions for r in runs]
    row(
        "(e) admissions/s (no worker consuming)",
        [
            (
                f"{a.rate:,.0f}" if a else "-",
                _ratio(a.rate, r.baseline.round_trips.rate) if a else "-",
            )
            for a, r in zip(adm, runs, strict=True)
        ],
    )
    return t


def problems(run: StackRun) -> list[str]:
    """Correctness problems seen while measuring (unlike missed goals, these fail the run)."""
    found = []
    if not run.chaz.fifo.in_order:
        found.append("one session's turns did NOT run in admission order")
    if run.chaz.long is not None and not run.chaz.long.in_order:
        found.append("the long session's turns did NOT run in admission order")
    failed = run.chaz.turns.errors + run.chaz.fifo.errors
    failed += run.chaz.long.errors if run.chaz.long is not None else 0
    if failed:
        found.append(f"{failed} turns or posts failed")
    g = run.chaz.producer
    if g is not None and (g.crossed or g.errors):
        found.append(f"(g): {g.crossed} replies crossed waiters, {g.errors} posts or waits failed")
    if run.chaz.turns.count == 0 or run.baseline.round_trips.count == 0:
        found.append("a throughput phase completed nothing")
    return found


def goals(runs: list[StackRun]) -> list[str]:
    lines = []
    for r in runs:
        ratio = r.chaz.turns.rate / r.baseline.round_trips.rate
        ok1 = ratio >= GOAL_TURN_RATIO
        ok2 = r.chaz.dispatch.latency.p99 < GOAL_P99_MS
        lines.append(
            f"{r.kind}: turns/s = {ratio:.2f} x bare Celery (goal >= {GOAL_TURN_RATIO}): "
            f"{'met' if ok1 else 'NOT met'}; dispatch p99 = {r.chaz.dispatch.latency.p99:.1f} ms "
            f"(goal < {GOAL_P99_MS:g} ms): {'met' if ok2 else 'NOT met'}"
        )
        lg = r.chaz.long
        if lg is not None:
            lines.append(
                f"{r.kind}: turns/s after {lg.prior_entries:,} entries, compacted = "
                f"{lg.ratio:.2f} x a fresh session's (goal >= {GOAL_LONG_RATIO}): "
                f"{'met' if lg.ratio >= GOAL_LONG_RATIO else 'NOT met'}"
            )
        if r.chaz.producer is not None:
            lines.append(producer_goal(r.kind, r.chaz.producer))
        lines += [f"{r.kind}: PROBLEM {n}" for n in problems(r)]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--stack", choices=["embedded", "server", "both"], default="both")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument(
        "--workers",
        type=int,
        default=2,
        help="worker processes, for chaz and for the baseline (default 2)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=8,
        help="threads per worker process (default 8, chaz's default)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument(
        "--cli",
        action="store_true",
        help="only time the `chaz` command's start-up (benchmarks/cli_startup.py)",
    )
    parser.add_argument(
        "--boot",
        action="store_true",
        help="only time a worker's start-up against a bare Celery worker's "
        "(benchmarks/worker_boot.py; --quick: 2 runs each)",
    )
    parser.add_argument(
        "--py-spy",
        type=Path,
        metavar="DIR",
        dest="profile",
        help="sample chaz's workers with py-spy during (b): speedscope files",
    )
    parser.add_argument(
        "--http",
        action="store_true",
        help="only the HTTP case: langgraph-sdk against chaz serve and langgraph dev "
        "(benchmarks/http.py; --quick: small sizes)",
    )
    parser.add_argument(
        "--producer",
        action="store_true",
        help="only (g): a producer's CPU per post + wait_for_reply (chaz's workers only)",
    )
    args = parser.parse_args(argv)
    if args.cli:
        from benchmarks import cli_startup

        # --stack server: the read commands on PostgreSQL + Redis instead.
        return cli_startup.main(["--server"] if args.stack == "server" else [])
    if args.http:
        from benchmarks import http

        return http.main(["--quick"] if args.quick else [])
    if args.boot:
        from benchmarks import worker_boot

        return worker_boot.main(["--stack", args.stack, *(["--runs", "2"] if args.quick else [])])

    scrub_environment()
    sizes = QUICK if args.quick else FULL
    kinds = ["embedded", "server"] if args.stack == "both" else [args.stack]
    info = machine()
    console.print(
        f"[bold]chaz benchmark[/] {info['date']}: {info['cpus']} CPUs ({info['cpu']}), "
        f"{info['memory']}, Python {info['python']}, Celery {info['celery']}; "
        f"load average {info['load_before']}"
    )
    console.print(f"chaz measured: {info['code']}")
    t0 = time.perf_counter()
    if args.producer:
        return _producer_main(kinds, sizes, args.workers, args.concurrency, info, args.json)
    runs: list[StackRun] = []
    failed: list[str] = []
    for kind in kinds:
        try:
            runs.append(run_stack(kind, sizes, args.workers, args.concurrency, args.profile))
        except Exception:
            console.print(f"[red]{kind}: the benchmark failed[/]\n{traceback.format_exc()}")
            failed.append(kind)
    console.print()
    if runs:
        console.print(table(runs, sizes, args.workers, args.concurrency))
        for line in goals(runs):
            console.print(line)
    info["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    console.print(
        f"[dim]total {time.perf_counter() - t0:.0f}s; load average now {info['load_after']} "
        "(the figures assume an otherwise idle machine)[/]"
    )
    if args.json:
        payload = {
            "machine": info,
            "sizes": dataclasses.asdict(sizes),
            "workers": args.workers,
            "concurrency": args.concurrency,
            "runs": [dataclasses.asdict(r) for r in runs],
        }
        args.json.write_text(json.dumps(payload, indent=2, default=str))
    # Missed goals are figures, not failures; a stack that broke or misbehaved is.
    return 1 if failed or any(problems(r) for r in runs) else 0


def _producer_main(
    kinds: list[str],
    sizes: Sizes,
    workers: int,
    concurrency: int,
    info: dict[str, Any],
    out: Path | None,
) -> int:
    """``--producer``: (g) alone on each stack, its goal, and the exit status."""
    results: dict[str, ProducerResult] = {}
    for kind in kinds:
        results[kind] = run_producer_only(kind, sizes, workers, concurrency)
        console.print(producer_goal(kind, results[kind]))
    info["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    console.print(f"[dim]load average now {info['load_after']}[/]")
    if out:
        payload = {
            "machine": info,
            "producer": {k: dataclasses.asdict(v) for k, v in results.items()},
        }
        out.write_text(json.dumps(payload, indent=2, default=str))
    return 1 if any(g.crossed or g.errors or not g.replies for g in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
