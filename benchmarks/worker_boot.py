"""``python -m benchmarks.worker_boot`` (or ``benchmarks.run --boot``): how fast a worker starts.

A worker's start-up is paid at every deploy, every KEDA scale-up and every
test that boots one, so it is measured against the floor Celery sets: in the
same run, alternating, each repetition a fresh process,

* (a) a bare ``celery -A benchmarks.noop_app worker`` (chaz's own command
  line, on the no-op app), from exec until it has taken and finished one task
  that was queued before it started;
* (i) ``chaz worker`` (the console script a deployment runs), from exec until
  it has taken and finished its first turn: a message posted before it
  started, answered by the benchmark's scripted agent. This includes all the
  command does before it execs Celery (settings, the embedded Redis, the
  migrations check) and the worker's own start (bootsteps, connections, the
  ready key, the lease watch).

Both kinds of worker run this checkout's modules (``chaz``, ``workers``,
``benchmarks``) compiled, as an installed chaz's are (``pip install``
compiles them; the Dockerfile's image starts from bytecode) and as the bare
worker's Celery is: the benchmark compiles them first (:func:`compile_sources`).
A checkout run with ``PYTHONDONTWRITEBYTECODE=1`` would otherwise compile
every chaz module from source in every start, a cost no deployment pays.

Completion is seen as the benchmark sees every figure: the no-op task's push
onto ``bench:done``, the reply's publication on the entry channel. The table
shows the median, fastest and slowest run of each, and (i)'s median as a
ratio to (a)'s; the goal (issue 20) is at most 1.5. Beside them, the CPU
seconds the process had used by then (``/proc``; for ``chaz worker`` the
command's and the worker's, one pid across the exec): on a machine that other
work keeps busy, the steadier figure of the two.
"""

from __future__ import annotations

import argparse
import compileall
import os
import queue
import signal
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table

from benchmarks import noop_app
from benchmarks.cli_startup import chaz_command
from benchmarks.cpu import process_cpu_seconds
from benchmarks.measure import ReplyListener, producer_app
from benchmarks.stacks import AGENT, ROOT, BenchStack, Worker, scrub_environment
from chaz.stack import settings_env

#: Issue 20: (i) over (a), medians of the same run.
GOAL_RATIO = 1.5
#: Repetitions of each case (``--runs``).
RUNS = 5
#: Turn threads of both kinds of worker: chaz's default.
CONCURRENCY = 8
#: A boot that takes longer than this failed.
TIMEOUT = 120.0
#: This checkout's packages that the workers import (compiled before the runs).
SOURCES = ("chaz", "workers", "benchmarks")

console = Console(width=int(os.environ.get("COLUMNS", "132")))


@dataclass
class Boot:
    """One start: wall-clock seconds from exec to done, and CPU seconds used by then."""

    seconds: float
    cpu: float


@dataclass
class Boots:
    """One stack's starts of each kind."""

    kind: str
    bare: list[Boot] = field(default_factory=list)
    chaz: list[Boot] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        """(i)'s median over (a)'s."""
        return _median(self.chaz, "seconds") / _median(self.bare, "seconds")

    @property
    def cpu_ratio(self) -> float:
        """(i)'s median CPU over (a)'s."""
        return _median(self.chaz, "cpu") / _median(self.bare, "cpu")


def _median(boots: list[Boot], what: str) -> float:
    return statistics.median(float(getattr(b, what)) for b in boots)


def _done(proc: subprocess.Popen[bytes], start: float) -> Boot:
    return Boot(time.perf_counter() - start, process_cpu_seconds(proc.pid))


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Warm shutdown of the process group (the times are taken before this)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def boot_bare(stack: BenchStack) -> Boot:
    """(a): exec of a bare Celery worker until its first (queued) task is done."""
    app = producer_app(stack)
    key = f"boot-{uuid.uuid4().hex[:8]}"
    try:
        app.send_task(noop_app.TASK, args=[key], queue=noop_app.QUEUE)
    finally:
        app.close()
    worker = Worker(stack.settings, CONCURRENCY, stack.home / "boot-noop.log")
    start = time.perf_counter()
    worker.start()
    assert worker.proc is not None
    try:
        deadline = start + TIMEOUT
        while time.perf_counter() < deadline:
            got = stack.redis.blpop([noop_app.DONE], timeout=0.05)
            raw = got[1] if got is not None else b""
            done = raw.decode() if isinstance(raw, bytes) else raw
            if done.partition(" ")[0] == key:
                return _done(worker.proc, start)
            if worker.proc.poll() is not None:
                raise RuntimeError(f"the bare worker exited; see {worker.log_file}")
        raise RuntimeError(f"the bare worker took no task in {TIMEOUT:g}s; see {worker.log_file}")
    finally:
        _stop(worker.proc)


def boot_chaz(stack: BenchStack, listener: ReplyListener) -> Boot:
    """(i): exec of ``chaz worker`` until its first (queued) turn has replied."""
    client = stack.client
    session = client.sessions.create(AGENT.id).id
    replied: queue.Queue[str] = queue.Queue()
    listener.handler = lambda data: replied.put(data["job_id"])
    job = client.sessions.post(session, "boot").job_id
    log = (stack.home / "boot-chaz.log").open("ab")
    env = {**os.environ, **settings_env(stack.settings)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    cmd = [*chaz_command(), "worker", "--concurrency", str(CONCURRENCY), "--loglevel", "WARNING"]
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    log.close()
    try:
        deadline = start + TIMEOUT
        while time.perf_counter() < deadline:
            try:
                if replied.get(timeout=0.05) == job:
                    return _done(proc, start)
            except queue.Empty:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"chaz worker exited; see {stack.home / 'boot-chaz.log'}")
        raise RuntimeError(f"chaz worker took no turn in {TIMEOUT:g}s")
    finally:
        listener.handler = None
        _stop(proc)


def compile_sources() -> bool:
    """Compile :data:`SOURCES` to bytecode beside them (``__pycache__``, which git
    ignores), as ``pip install`` does for an installed chaz; True if all compiled.
    Python reads bytecode even under ``PYTHONDONTWRITEBYTECODE``, which only
    stops it writing any."""
    return all(compileall.compile_dir(ROOT / name, quiet=1, force=False) for name in SOURCES)


def measure(kind: str, runs: int) -> Boots:
    """``runs`` boots of each kind on one stack, alternating (the first kind alternates too)."""
    boots = Boots(kind)
    stack = BenchStack(kind)
    listener = ReplyListener(stack.redis)
    try:
        for i in range(runs):
            order = (boot_bare, boot_chaz) if i % 2 == 0 else (boot_chaz, boot_bare)
            for case in order:
                if case is boot_bare:
                    boots.bare.append(boot_bare(stack))
                else:
                    boots.chaz.append(boot_chaz(stack, listener))
    finally:
        listener.close()
        stack.close()
    return boots


def table(results: list[Boots], runs: int) -> Table:
    """(a) and (i) per stack: median, fastest, slowest, and the ratio to (a)."""
    t = Table(
        title=(
            f"worker start-up, exec -> first task or turn done ({runs} run(s) each, "
            f"alternating; {CONCURRENCY} threads)"
        ),
        title_justify="left",
    )
    for column in ("figure", "stack", "median s", "min s", "max s", "x (a)", "CPU s", "x (a) "):
        t.add_column(column, justify="left" if column in ("figure", "stack") else "right")
    for b in results:
        for label, boots, ratio, cpu_ratio in (
            ("(a) bare `celery worker` of a no-op app", b.bare, "1.00", "1.00"),
            (
                "(i) `chaz worker`, scripted agent's reply",
                b.chaz,
                f"{b.ratio:.2f}",
                f"{b.cpu_ratio:.2f}",
            ),
        ):
            seconds = [boot.seconds for boot in boots]
            t.add_row(
                label,
                b.kind,
                f"{statistics.median(seconds):.2f}",
                f"{min(seconds):.2f}",
                f"{max(seconds):.2f}",
                ratio,
                f"{_median(boots, 'cpu'):.2f}",
                cpu_ratio,
            )
    return t


def goals(results: list[Boots]) -> list[str]:
    """Each stack's ratio against the goal."""
    return [
        f"{b.kind}: chaz worker start-up = {b.ratio:.2f} x a bare Celery worker's "
        f"(goal <= {GOAL_RATIO}): {'met' if b.ratio <= GOAL_RATIO else 'NOT met'}; "
        f"its CPU = {b.cpu_ratio:.2f} x"
        for b in results
    ]


def main(argv: list[str] | None = None) -> int:
    """Measure and print; the exit status is 0 unless a worker failed to start."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.worker_boot", description=__doc__)
    parser.add_argument("--stack", choices=["embedded", "server", "both"], default="both")
    parser.add_argument("--runs", type=int, default=RUNS, help=f"boots of each (default {RUNS})")
    parser.add_argument(
        "--no-compile",
        action="store_true",
        help="do not compile the checkout first (a fresh checkout under "
        "PYTHONDONTWRITEBYTECODE=1 then compiles chaz's modules in every start)",
    )
    args = parser.parse_args(argv)
    scrub_environment()
    kinds = ["embedded", "server"] if args.stack == "both" else [args.stack]
    if args.no_compile:
        how = "modules as they are (no bytecode compiled first)"
    elif compile_sources():
        how = f"{', '.join(SOURCES)} compiled to bytecode first, as installed"
    else:
        how = "[red]some modules did not compile: they start from source[/]"
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    console.print(f"[bold]worker start-up[/]: {os.cpu_count()} CPUs, load average {load}; {how}")
    results = []
    for kind in kinds:
        results.append(measure(kind, args.runs))
        console.print(f"[dim]{kind}: done[/]")
    console.print(table(results, args.runs))
    for line in goals(results):
        console.print(line)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    console.print(f"[dim]load average now {load} (the figures assume an otherwise idle machine)[/]")
    # A missed goal is a figure, not a failure (as in benchmarks.run).
    return 0


if __name__ == "__main__":
    sys.exit(main())
